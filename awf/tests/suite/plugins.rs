//! The plugin host end to end: the real `awf` binary with the plugin-sdk example plugins
//! (`notes`, `faulty`) as real processes over real gRPC on Unix sockets, spoken to over
//! MCP. Covers listing, calls with array/object inputs, failures, a crash mid-call, start-up
//! failures (slow, garbage handshake), the fatal config errors, `awf plugins list`,
//! `awf tools list|call`, and that no plugin outlives a SIGKILLed `awf mcp-serve`.

use crate::common;
use crate::harness::plugin_examples;

use common::{AWF, Server, audit_lines, dead, eventually, write_config};
use plugin_examples::{example, place_executable};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A test directory: `plugins/{notes,faulty}/{plugin.yaml,<exe>}` as a user installs them,
/// `root/` (the workspace) and `tmp` (the plugins' TMPDIR, where their sockets go).
struct Setup {
    base: PathBuf,
    plugins: PathBuf,
    root: PathBuf,
    tmp: PathBuf,
}

fn setup(tag: &str) -> Setup {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-plugins-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let plugins = base.join("plugins");
    for name in ["notes", "faulty"] {
        plugin_examples::install(name, &plugins);
    }
    let root = base.join("root");
    // Short whatever the checkout's path: the socket directories awf names after its
    // process must fit here with the SDK's socket path (else awf makes them under /tmp).
    let tmp = Path::new("/tmp").join(format!("awf-pt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(root.join("hello.txt"), "hello\n").unwrap();
    Setup {
        base,
        plugins,
        root,
        tmp,
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Outside the target's directory: not left behind.
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

impl Setup {
    fn config(&self, plugin_tools: Value) -> PathBuf {
        write_config(
            &self.base,
            &json!({
                "root": self.root,
                "plugin_tools": plugin_tools,
                "audit_path": self.base.join("audit.jsonl"),
                "landlock": false,
            }),
        )
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWF_PLUGINS_PATH", self.plugins.display().to_string()),
            ("TMPDIR", self.tmp.display().to_string()),
        ]
    }

    /// `awf mcp-serve --config CONFIG` in this setup's environment, initialized.
    fn serve(&self, config: &Path, extra_env: &[(&str, &str)]) -> Server {
        let env = self.env();
        let mut envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        envs.extend_from_slice(extra_env);
        let mut server = Server::start(&["mcp-serve", "--config", config.to_str().unwrap()], &envs);
        server.initialize();
        server
    }

    /// `awf ARGS` in this setup's environment, run to its end.
    fn awf(&self, args: &[&str], extra_env: &[(&str, &str)]) -> std::process::Output {
        Command::new(AWF)
            .args(args)
            .envs(self.env())
            .envs(extra_env.iter().copied())
            .output()
            .unwrap()
    }

    /// Plugin socket directories left in the plugins' TMPDIR.
    fn leftover_sockets(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // awf's private directory per plugin, and the SDK's socket directory in it.
            .filter(|n| n.starts_with("awf-p-") || n.starts_with("awf-plugin-"))
            .collect()
    }

    /// Every plugin's private socket directory is gone.
    fn assert_no_leftover_sockets(&self) {
        let left = self.leftover_sockets();
        assert!(left.is_empty(), "{left:?}");
    }
}

fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pids of the live children of `parent` running `exe` (the same file: plugins run
/// from a hard link or copy in their directory).
fn children_running(parent: i32, exe: &Path) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let id = |m: std::fs::Metadata| (m.dev(), m.ino(), m.len());
    let exe = id(std::fs::metadata(exe).unwrap());
    // pid (comm) state ppid ...
    let ppid = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if !std::fs::metadata(format!("/proc/{pid}/exe")).is_ok_and(|m| id(m) == exe) {
            continue;
        }
        // A jailed plugin runs two levels below awf (its jail's waiter and init between).
        let mut up = ppid(pid);
        for _ in 0..4 {
            match up {
                Some(p) if p == parent => {
                    pids.push(pid);
                    break;
                }
                Some(p) if p > 1 => up = ppid(p),
                _ => break,
            }
        }
    }
    pids
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

/// Splits a plugin result into its text and the structured data after the blank line.
fn text_and_data(result: &str) -> (&str, Value) {
    let (text, data) = result
        .rsplit_once("\n\n")
        .unwrap_or_else(|| panic!("no data in {result:?}"));
    (text, serde_json::from_str(data).unwrap())
}

#[test]
fn a_plugin_serves_when_tmpdir_is_too_long_for_a_socket_path() {
    let s = setup("long-tmpdir");
    // A TMPDIR whose path alone is 100 bytes: a socket in it would exceed `sun_path`.
    let prefix = s.base.join("tmp-");
    let pad = 100usize.saturating_sub(prefix.as_os_str().len()).max(1);
    let long_tmp = format!("{}{}", prefix.display(), "t".repeat(pad));
    std::fs::create_dir_all(&long_tmp).unwrap();
    let cfg = s.config(json!([{"plugin": "notes", "expose": ["add"]}]));
    let mut server = s.serve(&cfg, &[("TMPDIR", &long_tmp)]);
    let text = server.ok("notes_add", json!({"text": "buy milk"}));
    assert_eq!(text_and_data(&text).0, "added note 1");
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn plugin_operations_are_tools_with_their_schemas_and_results() {
    let s = setup("calls");
    let cfg = s.config(json!([
        {"plugin": "notes", "expose": ["add", "search"]},
        {"plugin": "faulty", "expose": ["fail", "panic"]}
    ]));
    let mut server = s.serve(&cfg, &[]);

    let listed = server.request("tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "Read",
        "notes_add",
        "notes_search",
        "faulty_fail",
        "faulty_panic",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    assert!(
        !names.contains(&"faulty_crash"),
        "not exposed, yet listed: {names:?}"
    );
    let add = tool(&tools, "notes_add");
    assert_eq!(
        add["description"],
        "Store a note with optional tags and metadata"
    );
    assert_eq!(add["inputSchema"]["properties"]["tags"]["type"], "array");
    assert_eq!(add["inputSchema"]["properties"]["meta"]["type"], "object");
    assert_eq!(add["inputSchema"]["required"], json!(["text"]));

    // Array and object inputs cross MCP and gRPC unchanged.
    let text = server.ok(
        "notes_add",
        json!({"text": "buy milk", "tags": ["home", "shop"], "meta": {"source": "test", "n": "1"}}),
    );
    let (line, data) = text_and_data(&text);
    assert_eq!(line, "added note 1");
    assert_eq!(data["tags"], json!(["home", "shop"]));
    assert_eq!(data["meta"], json!({"source": "test", "n": "1"}));
    server.ok("notes_add", json!({"text": "buy bread", "tags": ["shop"]}));
    server.ok("notes_add", json!({"text": "call mum", "tags": ["home"]}));
    let text = server.ok(
        "notes_search",
        json!({"query": "BUY", "tags": ["shop"], "limit": 5}),
    );
    let (lines, data) = text_and_data(&text);
    assert_eq!(lines, "#1 buy milk\n#2 buy bread");
    assert_eq!(data.as_array().unwrap().len(), 2);
    let text = server.ok("notes_search", json!({"query": "buy", "limit": 1}));
    assert_eq!(text_and_data(&text).1.as_array().unwrap().len(), 1);

    // Failures reported by the plugin are isError results with its reason.
    assert_eq!(
        server.err("faulty_fail", json!({"message": "nope, on purpose"})),
        "nope, on purpose"
    );
    let text = server.err("faulty_panic", json!({}));
    assert!(text.contains("panicked on purpose"), "{text}");
    let text = server.err("notes_add", json!({"txt": "typo"}));
    assert!(
        text.contains("invalid arguments") && text.contains("txt"),
        "{text}"
    );
    // ... and the plugin goes on working.
    server.ok("notes_search", json!({"query": "mum"}));

    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
    // Plugin calls are audited like builtins, with their source.
    let audit = audit_lines(&s.base.join("audit.jsonl"));
    let calls: Vec<&Value> = audit.iter().filter(|r| r["type"] == "tool.call").collect();
    assert!(
        calls
            .iter()
            .any(|r| r["tool"] == "notes_add" && r["source"] == "plugin:notes"),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|r| r["tool"] == "faulty_fail" && r["source"] == "plugin:faulty")
    );
    let failed = audit
        .iter()
        .find(|r| r["type"] == "tool.result" && r["tool"] == "faulty_fail");
    assert!(failed.is_some(), "{audit:?}");
    // Both plugins stopped cleanly and removed their sockets.
    s.assert_no_leftover_sockets();
}

#[test]
fn a_crash_mid_call_is_an_error_and_the_server_serves_on() {
    let s = setup("crash");
    let cfg = s.config(json!([
        {"plugin": "faulty", "expose": ["crash", "fail"]},
        {"plugin": "notes", "expose": ["add"]}
    ]));
    let mut server = s.serve(&cfg, &[]);

    let text = server.err("faulty_crash", json!({}));
    assert!(
        text.contains("plugin faulty crashed during this call to faulty_crash"),
        "{text}"
    );
    assert!(text.contains("SIGABRT"), "{text}");
    // Builtins and the other plugin still answer.
    assert!(
        server
            .ok("Read", json!({"path": "hello.txt"}))
            .contains("hello")
    );
    server.ok("notes_add", json!({"text": "still here", "tags": ["a"]}));
    // Later calls to the crashed plugin say it is down, at once.
    let text = server.err("faulty_fail", json!({"message": "x"}));
    assert!(
        text.contains("plugin faulty is down") && text.contains("SIGABRT"),
        "{text}"
    );
    assert!(
        eventually(|| server.stderr().contains("plugin faulty is down")),
        "no log line: {}",
        server.stderr()
    );
    // The dead plugin's socket directory was removed by the host.
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
    s.assert_no_leftover_sockets();
}

/// Runs `awf mcp-serve` that must fail at start-up; returns (exit code, its whole stderr,
/// the pids of the `watch` plugin processes it started, caught while it ran).
fn failing_start(
    s: &Setup,
    cfg: &Path,
    env: &[(&str, &str)],
    watch: Option<&str>,
) -> (i32, String, Vec<i32>) {
    let child = Command::new(AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .envs(s.env())
        .envs(env.iter().copied())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut seen = Vec::new();
    if let Some(exe) = watch {
        // Catch the plugin while awf waits for its handshake (it may already be gone).
        let _ = eventually(|| {
            for p in children_running(pid, &example(exe)) {
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
            !seen.is_empty() || dead(pid)
        });
    }
    // Reads stderr to its end, unlike a wait that may return before the last line.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr, seen)
}

#[test]
fn a_slow_start_is_killed_after_five_seconds_with_a_clear_error() {
    let s = setup("slow");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["fail"]}]));
    let (code, stderr, pids) = failing_start(
        &s,
        &cfg,
        &[("FAULTY_START_DELAY_MS", "30000")],
        Some("faulty"),
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("plugin faulty")
            && stderr.contains("printed no handshake line within 5 s and was killed")
            && stderr.contains("EXECUTION.PLUGINS.START_FAILED"),
        "{stderr}"
    );
    assert!(!pids.is_empty(), "never saw the plugin process");
    for p in pids {
        assert!(dead(p), "plugin {p} survived its failed start");
    }
}

#[test]
fn a_garbage_handshake_is_a_clear_error() {
    let s = setup("garbage");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["fail"]}]));
    let (code, stderr, pids) =
        failing_start(&s, &cfg, &[("FAULTY_BAD_HANDSHAKE", "1")], Some("faulty"));
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("plugin faulty")
            && stderr.contains("failed its handshake")
            && stderr.contains("hello, I am not a handshake"),
        "{stderr}"
    );
    for p in pids {
        assert!(dead(p), "plugin {p} survived its failed handshake");
    }
}

#[test]
fn bad_plugin_tools_are_fatal_before_serving_and_name_the_entry() {
    let s = setup("config");
    let cases = [
        (
            json!([{"plugin": "notes", "expose": ["add"]}, {"plugin": "nosuch", "expose": ["x"]}]),
            "USER.MCP_PROXY.UNKNOWN_PLUGIN",
            vec!["plugin_tools[1]", "\"nosuch\"", "found faulty, notes"],
        ),
        (
            json!([{"plugin": "notes", "expose": ["add", "delete"]}]),
            "USER.MCP_PROXY.UNKNOWN_OPERATION",
            vec![
                "plugin_tools[0]",
                "plugin notes",
                "\"delete\"",
                "add, search",
            ],
        ),
        (
            json!([{"plugin": "notes", "expose": ["add"]}, {"plugin": "notes", "expose": ["search", "add"]}]),
            "USER.MCP_PROXY.NAME_COLLISION",
            vec!["plugin_tools[1]", "plugin_tools[0]", "\"notes_add\""],
        ),
    ];
    for (plugin_tools, error_code, needles) in cases {
        let cfg = s.config(plugin_tools.clone());
        let (code, stderr, _) = failing_start(&s, &cfg, &[], None);
        assert_eq!(code, 1, "{plugin_tools}: {stderr}");
        assert!(stderr.contains(error_code), "{plugin_tools}: {stderr}");
        assert!(stderr.contains(&cfg.display().to_string()), "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{plugin_tools}: {n:?} not in {stderr}");
        }
    }
    // A plugin directory with a broken manifest: the error names the file and the field.
    std::fs::write(
        s.plugins.join("notes/plugin.yaml"),
        "name: notes\nversion: 1\n",
    )
    .unwrap();
    let cfg = s.config(json!([{"plugin": "notes", "expose": ["add"]}]));
    let (code, stderr, _) = failing_start(&s, &cfg, &[], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("notes/plugin.yaml") && stderr.contains("`description`"),
        "{stderr}"
    );
    s.assert_no_leftover_sockets();
}

#[test]
fn no_plugin_outlives_a_sigkilled_mcp_serve() {
    let s = setup("sigkill");
    let cfg = s.config(json!([
        {"plugin": "notes", "expose": ["add"]},
        {"plugin": "faulty", "expose": ["sleep"]}
    ]));
    let mut server = s.serve(&cfg, &[]);
    server.ok("notes_add", json!({"text": "x"}));
    let awf = server.pid();
    let mut plugins = children_running(awf, &example("notes"));
    plugins.extend(children_running(awf, &example("faulty")));
    assert_eq!(plugins.len(), 2, "expected both plugins as children of awf");
    // A call in flight must not keep the plugin alive either.
    let _ = server.send_request(
        "tools/call",
        json!({"name": "faulty_sleep", "arguments": {"ms": 60000}}),
    );
    assert!(eventually(|| server.stderr().contains("sleeping 60000 ms")));
    // SAFETY: kill(2) on the pid of a child we spawned.
    assert_eq!(unsafe { libc::kill(awf, libc::SIGKILL) }, 0);
    let killed = std::time::Instant::now();
    // Generous bound (see `eventually`): this is about "gone", not about speed.
    for p in plugins {
        assert!(eventually(|| dead(p)), "plugin {p} outlived awf");
    }
    // For the record (`--nocapture`), not asserted.
    eprintln!("plugins gone {:?} after SIGKILL of awf", killed.elapsed());
    server.wait();
}

#[test]
fn concurrent_calls_share_one_plugin_connection() {
    let s = setup("concurrent");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["sleep"]}]));
    let mut server = s.serve(&cfg, &[]);
    let ids: Vec<i64> = (0..8)
        .map(|i| {
            server.send_request(
                "tools/call",
                json!({"name": "faulty_sleep", "arguments": {"ms": 200 + i}}),
            )
        })
        .collect();
    // Answers may come in any order.
    let mut answers = HashMap::new();
    while answers.len() < ids.len() {
        let m = server.read_message().expect("server closed");
        answers.insert(m["id"].as_i64().unwrap(), m);
    }
    for (i, id) in ids.iter().enumerate() {
        let answer = &answers[id];
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        let ms = 200 + i;
        assert_eq!(
            text,
            format!("slept {ms} ms\n\n{{\"slept_ms\":{ms}}}"),
            "{answer}"
        );
    }
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn plugins_list_reports_each_plugin_and_its_tools() {
    let s = setup("list");
    std::fs::create_dir_all(s.plugins.join("broken")).unwrap();
    std::fs::write(
        s.plugins.join("broken/plugin.yaml"),
        "\
name: broken
version: 1
description: x
executabel: b
",
    )
    .unwrap();
    let out = s.awf(&["plugins", "list", "--json"], &[]);
    assert_success(&out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["search_path"], json!([s.plugins]));
    let plugins = report["plugins"].as_array().unwrap();
    let by_state = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name || p["dir"].as_str().is_some_and(|d| d.ends_with(name)))
            .unwrap_or_else(|| panic!("{name} not in {plugins:?}"))
    };
    let notes = by_state("notes");
    assert_eq!(notes["state"], "ok");
    assert_eq!(notes["version"], "0.1.0");
    let tools: Vec<&str> = notes["operations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["tool"].as_str())
        .collect();
    assert_eq!(tools, ["notes_add", "notes_search"]);
    assert_eq!(by_state("faulty")["state"], "ok");
    let broken = by_state("broken");
    assert_eq!(broken["state"], "invalid");
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `executabel`")
    );

    // A plugin that cannot start is listed as failed, with the reason.
    let out = s.awf(&["plugins", "list"], &[("FAULTY_BAD_HANDSHAKE", "1")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("faulty 0.1.0  [failed]"), "{text}");
    assert!(
        text.contains("notes 0.1.0  [ok]") && text.contains("notes_search"),
        "{text}"
    );
    s.assert_no_leftover_sockets();
}

#[test]
fn tools_list_and_call_include_exposed_plugin_tools() {
    let s = setup("cli");
    let cfg = s.config(json!([{"plugin": "notes", "expose": ["add"]}]));
    let out = s.awf(&["tools", "list", "--config", cfg.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_success(&out);
    assert!(
        text.contains("notes_add(text, ") && text.contains("tags?"),
        "{text}"
    );
    assert!(text.contains("Read(path"), "{text}");

    let out = s.awf(
        &[
            "tools",
            "call",
            "notes_add",
            r#"{"text": "hi", "tags": ["x", "y"]}"#,
            "--config",
            cfg.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_success(&out);
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["is_error"], false);
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert_eq!(text_and_data(text).1["tags"], json!(["x", "y"]));
    assert!(
        answer["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["source"] == "plugin:notes"),
        "{answer}"
    );
}

fn thread_names(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn the_plugin_runtime_exists_only_with_plugins_and_sigterm_stops_them() {
    let s = setup("sigterm");
    // No plugin tools: no plugin host, no async runtime thread.
    let plain = s.serve(&s.config(json!([])), &[]);
    let names = thread_names(plain.pid());
    assert!(!names.iter().any(|n| n == "awf-plugins"), "{names:?}");
    let (status, _, stderr) = plain.finish();
    assert!(status.success(), "{stderr}");

    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["sleep"]}]));
    let mut server = s.serve(&cfg, &[]);
    let names = thread_names(server.pid());
    // The runtime's worker (tokio may add blocking threads of the same name).
    assert!(names.iter().any(|n| n == "awf-plugins"), "{names:?}");
    let plugin = children_running(server.pid(), &example("faulty"));
    assert_eq!(plugin.len(), 1);
    // A call in flight when SIGTERM arrives is answered (cancelled), then all stops.
    let id = server.send_request(
        "tools/call",
        json!({"name": "faulty_sleep", "arguments": {"ms": 60000}}),
    );
    assert!(eventually(|| server.stderr().contains("sleeping 60000 ms")));
    // SAFETY: kill(2) on the pid of a child we spawned.
    assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGTERM) }, 0);
    let answer = server.answer(id);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("faulty_sleep was cancelled"),
        "{answer}"
    );
    let (status, stderr) = server.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    // awf waited for its plugin (shutdown rpc, then signals), so it is gone now.
    assert!(dead(plugin[0]), "plugin outlived a clean stop");
    s.assert_no_leftover_sockets();
}

#[test]
fn a_cancelled_plugin_call_stops_waiting_and_the_server_goes_on() {
    let s = setup("cancel");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["sleep"]}]));
    let mut server = s.serve(&cfg, &[]);
    let id = server.send_request(
        "tools/call",
        json!({"name": "faulty_sleep", "arguments": {"ms": 60000}}),
    );
    assert!(eventually(|| server.stderr().contains("sleeping 60000 ms")));
    server.notify("notifications/cancelled", json!({"requestId": id}));
    // Meanwhile the server and the plugin go on answering.
    assert_eq!(
        server.ok("faulty_sleep", json!({"ms": 1})),
        "slept 1 ms\n\n{\"slept_ms\":1}"
    );
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
    let audit = audit_lines(&s.base.join("audit.jsonl"));
    let cancelled = audit
        .iter()
        .find(|r| r["type"] == "tool.result" && r["outcome"] == "cancelled")
        .unwrap_or_else(|| panic!("no cancelled call in {audit:?}"));
    // Not a speed check: a call that waited for the plugin would have taken the full 60 s.
    let waited = cancelled["duration_ms"].as_f64().unwrap();
    assert!(waited < 30_000.0, "the cancelled call waited {waited} ms");
}

#[test]
fn hyphenated_names_the_executable_field_and_the_tool_name_rule() {
    let s = setup("names");
    let install = |name: &str| {
        let dir = s.plugins.join(name);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(
            dir.join("plugin.yaml"),
            format!(
                "\
name: {name}
version: 2.0
description: notes under another name
executable: bin/notes
"
            ),
        )
        .unwrap();
        place_executable(&example("notes"), &dir.join("bin/notes"));
    };
    install("note-store");
    let cfg = s.config(json!([{"plugin": "note-store", "expose": ["add"]}]));
    let mut server = s.serve(&cfg, &[]);
    let text = server.ok("note-store_add", json!({"text": "x", "tags": ["y"]}));
    assert!(text.starts_with("added note 1"), "{text}");
    // The plugin calls itself `notes`: served under its manifest's name, with a warning.
    assert!(
        eventually(|| {
            let e = server.stderr();
            e.contains("calls itself \"notes\"") && e.contains("note-store")
        }),
        "{}",
        server.stderr()
    );
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");

    // 60 + 1 + 6 characters: over the 64 that MCP clients accept.
    let long = format!("n{}", "-x".repeat(30));
    install(&long);
    let cfg = s.config(json!([{"plugin": long, "expose": ["search"]}]));
    let (code, stderr, _) = failing_start(&s, &cfg, &[], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("USER.MCP_PROXY.INVALID_TOOL_NAME")
            && stderr.contains("plugin_tools[0]")
            && stderr.contains(&format!("\"{long}_search\"")),
        "{stderr}"
    );
}

/// A plugin starts from the allowlisted environment: a planted `*_TOKEN` of awf's own
/// environment reaches it only when its manifest names it (exactly or by prefix).
#[test]
fn a_plugin_sees_a_token_only_when_its_manifest_names_it() {
    let s = setup("env");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["env"]}]));
    let planted = [
        ("AWF_PLANTED_TOKEN", "planted-token-value-1"),
        ("FAULTY_PLANTED_TOKEN", "planted-token-value-2"),
        ("OTHER_PLANTED_TOKEN", "planted-token-value-3"),
    ];
    let seen = |server: &mut Server, name: &str| server.ok("faulty_env", json!({"name": name}));
    // The example's manifest names FAULTY_* only.
    let mut server = s.serve(&cfg, &planted);
    assert!(seen(&mut server, "AWF_PLANTED_TOKEN").contains("is not set"));
    assert!(seen(&mut server, "OTHER_PLANTED_TOKEN").contains("is not set"));
    assert!(seen(&mut server, "FAULTY_PLANTED_TOKEN").contains("planted-token-value-2"));
    // The allowlist still passes (TMPDIR is where its socket goes).
    assert!(seen(&mut server, "TMPDIR").contains(s.tmp.to_str().unwrap()));
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
    // Named by the manifest: passed, secret-looking or not.
    let manifest = s.plugins.join("faulty/plugin.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        "env_passthrough: [FAULTY_*]",
        "env_passthrough: [FAULTY_*, AWF_PLANTED_TOKEN]",
    );
    std::fs::write(&manifest, text).unwrap();
    let mut server = s.serve(&cfg, &planted);
    assert!(seen(&mut server, "AWF_PLANTED_TOKEN").contains("planted-token-value-1"));
    assert!(seen(&mut server, "OTHER_PLANTED_TOKEN").contains("is not set"));
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
}

/// A plugin's structured data and output schema survive into the tool: in-process, the
/// very server `awf mcp-serve` assembles, spoken to in revision 2025-06-18 (the first with
/// output schemas and structured content). Object data is structured content besides the
/// text the model reads; an operation whose schema is no object schema declares none.
#[test]
fn plugin_results_keep_their_structured_data_and_output_schema() {
    if std::env::var_os("AWF_PLUGINS_PATH").is_some() {
        // The in-process host would search there instead of the root's .awf/plugins.
        eprintln!("SKIP: AWF_PLUGINS_PATH is set in the test's environment");
        return;
    }
    let s = setup("structured");
    plugin_examples::install("notes", &s.root.join(".awf/plugins"));
    let mut cfg = awf::tool_server::ServeConfig::for_root(s.root.clone());
    cfg.intercept_builtins = false;
    cfg.plugin_tools = vec![awf::plugins::PluginTools {
        sandbox: Default::default(),
        plugin: "notes".into(),
        expose: vec!["add".into(), "search".into()],
        timeout_seconds: None,
    }];
    let prepared = awf::tool_server::assembly::prepare(&cfg).unwrap();
    let mut server = Server::in_process(
        prepared
            .tools
            .build(mcpserver::Server::builder("t", "1").accept_newer_revisions(true))
            .unwrap(),
    );
    let init = server.request("initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let list = server.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let add = tool(tools, "notes_add");
    assert_eq!(add["outputSchema"]["type"], "object", "{add}");
    assert_eq!(
        add["outputSchema"]["required"],
        json!(["id", "text", "tags", "meta"])
    );
    // Its data is an array: no object schema to declare.
    assert!(tool(tools, "notes_search").get("outputSchema").is_none());
    let answer = server.request(
        "tools/call",
        json!({"name": "notes_add", "arguments": {"text": "buy milk", "tags": ["shop"]}}),
    );
    let result = &answer["result"];
    let (text, data) = text_and_data(result["content"][0]["text"].as_str().unwrap());
    assert!(text.starts_with("added note 1"), "{text}");
    assert_eq!(result["structuredContent"], data);
    assert_eq!(result["structuredContent"]["text"], "buy milk");
    let answer = server.request(
        "tools/call",
        json!({"name": "notes_search", "arguments": {"query": "milk"}}),
    );
    assert!(
        answer["result"].get("structuredContent").is_none(),
        "{answer}"
    );
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("buy milk")
    );
    server.finish_in_process();
}

#[test]
fn a_plugin_call_past_its_deadline_is_an_error_naming_it_and_the_plugin_serves_on() {
    let s = setup("deadline");
    let cfg =
        s.config(json!([{"plugin": "faulty", "expose": ["sleep", "fail"], "timeout_seconds": 1}]));
    let mut server = s.serve(&cfg, &[]);
    let e = server.err("faulty_sleep", json!({"ms": 60000}));
    assert!(
        e.contains("did not answer within 1 s") && e.contains("timeout_seconds"),
        "{e}"
    );
    // The plugin is alive and answers the next call.
    let e = server.err("faulty_fail", json!({"message": "still here"}));
    assert!(e.contains("still here"), "{e}");
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_socket_announced_outside_the_plugin_s_private_directory_is_refused_and_nothing_deleted() {
    let s = setup("announce");
    let precious = s.base.join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    std::fs::write(precious.join("data.txt"), "keep me\n").unwrap();
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["fail"]}]));
    let target = precious.join("data.txt");
    let (code, stderr, _) = failing_start(
        &s,
        &cfg,
        &[("FAULTY_ANNOUNCE", target.to_str().unwrap())],
        Some("faulty"),
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("lies outside the plugin's private directory"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "keep me\n",
        "the announced file was touched"
    );
    s.assert_no_leftover_sockets();
}

#[test]
fn another_plugin_s_socket_is_refused() {
    let s = setup("stolen");
    // notes starts first and serves; faulty then announces notes' socket.
    let cfg = s.config(json!([{"plugin": "notes", "expose": ["add"]}]));
    let mut notes = s.serve(&cfg, &[]);
    notes.ok("notes_add", json!({"text": "x", "tags": []}));
    let socket = walk(&s.tmp)
        .into_iter()
        .find(|p| p.ends_with("plugin.sock"))
        .expect("notes' socket under the plugins' TMPDIR");
    let cfg2 = s.base.join("faulty.json");
    std::fs::write(
        &cfg2,
        json!({"root": s.root, "plugin_tools": [{"plugin": "faulty", "expose": ["fail"]}], "landlock": false}).to_string(),
    )
    .unwrap();
    let (code, stderr, _) = failing_start(
        &s,
        &cfg2,
        &[("FAULTY_ANNOUNCE", socket.to_str().unwrap())],
        Some("faulty"),
    );
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("outside the plugin's private directory"),
        "{stderr}"
    );
    // notes is unharmed.
    notes.ok("notes_add", json!({"text": "y", "tags": []}));
    let (status, _, stderr) = notes.finish();
    assert!(status.success(), "{stderr}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_plugin_that_ignores_its_lifeline_dies_with_a_sigkilled_awf() {
    let s = setup("pdeathsig");
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["fail"]}]));
    let mut server = s.serve(&cfg, &[("FAULTY_IGNORE_STDIN", "1")]);
    server.err("faulty_fail", json!({"message": "up"}));
    let plugins = children_running(server.pid(), &example("faulty"));
    assert_eq!(plugins.len(), 1, "{plugins:?}");
    unsafe { libc::kill(server.pid(), libc::SIGKILL) };
    let _ = server.wait();
    assert!(
        eventually(|| dead(plugins[0])),
        "plugin {} outlived the SIGKILL of awf mcp-serve",
        plugins[0]
    );
}

#[test]
fn plugin_results_are_bounded_with_a_note_like_the_builtins() {
    let s = setup("bounded");
    // In-process, on the revision that carries structured content.
    plugin_examples::install("faulty", &s.root.join(".awf/plugins"));
    let mut cfg = awf::tool_server::ServeConfig::for_root(s.root.clone());
    cfg.intercept_builtins = false;
    cfg.plugin_tools = vec![awf::plugins::PluginTools {
        sandbox: Default::default(),
        plugin: "faulty".into(),
        expose: vec!["big".into()],
        timeout_seconds: None,
    }];
    let prepared = awf::tool_server::assembly::prepare(&cfg).unwrap();
    let mut server = Server::in_process(
        prepared
            .tools
            .build(mcpserver::Server::builder("t", "1").accept_newer_revisions(true))
            .unwrap(),
    );
    let init = server.request("initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    let answer = server.request(
        "tools/call",
        json!({"name": "faulty_big", "arguments": {"bytes": 1_500_000}}),
    );
    let result = &answer["result"];
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.len() < 100_000 + 500 && text.len() > 90_000, "{text}");
    assert!(
        text.contains("[output cut: showing the first"),
        "{}",
        &text[text.len() - 300..]
    );
    assert!(
        text.contains("structured content left out"),
        "{}",
        &text[text.len() - 300..]
    );
    assert!(
        result.get("structuredContent").is_none(),
        "structured content passed whole"
    );
    // A small result keeps its structured content.
    let answer = server.request(
        "tools/call",
        json!({"name": "faulty_big", "arguments": {"bytes": 10}}),
    );
    assert_eq!(answer["result"]["structuredContent"]["blob"], "yyyyyyyyyy");
    server.finish_in_process();
}

/// A plugin reaches no unix socket of the host's (as Bash cannot): a server the test starts
/// on a pathname socket outside every path (as docker.sock lies) is refused with
/// *Permission denied*, while the plugin's own socket serves and TCP goes on.
#[test]
fn a_plugin_reaches_no_host_unix_socket_and_tcp_goes_on() {
    use std::io::{Read, Write};
    let s = setup("unix");
    let sock = s.base.join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = c.read(&mut [0u8; 256]);
            let _ = c.write_all(b"HTTP/1.0 200 UNIX-REACHED\r\n\r\n");
        }
    });
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut c in tcp.incoming().flatten() {
            let _ = c.read(&mut [0u8; 256]);
            let _ = c.write_all(b"HTTP/1.0 200 TCP-REACHED\r\n\r\n");
        }
    });
    let cfg = s.config(
        json!([{"plugin": "faulty", "expose": ["connect"], "sandbox": {"network": "allow"}}]),
    );
    let mut server = s.serve(&cfg, &[]);
    let text = server.err("faulty_connect", json!({"path": sock}));
    assert!(text.contains("Permission denied"), "{text}");
    assert!(!text.contains("UNIX-REACHED"), "{text}");
    let text = server.ok("faulty_connect", json!({"addr": addr}));
    assert!(text.contains("TCP-REACHED"), "{text}");
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("net.connect denied (unix)"), "{stderr}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn a_plugin_runs_in_the_jail_bash_and_servers_get() {
    let s = setup("jail");
    let home = s.base.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "PLANTED-SSH-KEY\n").unwrap();
    let outside = s.base.join("outside.txt");
    std::fs::write(&outside, "PLANTED-OUTSIDE\n").unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap().to_string();
    let cfg = s.config(json!([{"plugin": "faulty", "expose": ["read", "write", "connect"]}]));
    let mut server = s.serve(&cfg, &[("HOME", home.to_str().unwrap())]);
    // The workspace is readable ...
    let text = server.ok("faulty_read", json!({"path": s.root.join("hello.txt")}));
    assert!(text.contains("hello"), "{text}");
    // ... nothing else of the user's, and nothing outside it.
    for secret in [home.join(".ssh/id_rsa"), outside.clone()] {
        let text = server.err("faulty_read", json!({"path": secret}));
        assert!(
            text.contains("refused") && !text.contains("PLANTED"),
            "{text}"
        );
    }
    // Not writable, the workspace included.
    let text = server.err(
        "faulty_write",
        json!({"path": s.root.join("new.txt"), "text": "x"}),
    );
    assert!(text.contains("refused"), "{text}");
    assert!(!s.root.join("new.txt").exists());
    // No network by default.
    let text = server.err("faulty_connect", json!({"addr": addr}));
    assert!(text.contains("refused"), "{text}");
    let (status, _, stderr) = server.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn two_entries_of_one_plugin_may_not_ask_for_two_jails() {
    let s = setup("two-jails");
    let cfg = s.config(json!([
        {"plugin": "faulty", "expose": ["read"]},
        {"plugin": "faulty", "expose": ["connect"], "sandbox": {"network": "allow"}}
    ]));
    let (code, stderr, _) = failing_start(&s, &cfg, &[], None);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("plugin_tools[1]") && stderr.contains("another sandbox in plugin_tools[0]"),
        "{stderr}"
    );
}
