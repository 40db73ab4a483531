//! The server's life through the real binary: config errors (exit 1, nothing on stdout),
//! clean exits on end of input, `shutdown` and SIGTERM/SIGINT with a `session.end` record
//! naming the reason, and the audit pairs with masked secrets.

use crate::common;
use common::*;
use serde_json::{Value, json};
use std::process::Command;

fn serve_fails(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(AWF)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_errors_exit_1_with_a_message_and_nothing_on_stdout() {
    let (base, root, _o) = workspace("config-errors");
    let missing = base.join("missing.json");
    let bad_json = base.join("bad.json");
    std::fs::write(&bad_json, "{\"root\": ").unwrap();
    let unknown = base.join("unknown.json");
    std::fs::write(
        &unknown,
        json!({"root": root, "landlok": false}).to_string(),
    )
    .unwrap();
    let bad_root = base.join("badroot.json");
    std::fs::write(&bad_root, json!({"root": base.join("nope")}).to_string()).unwrap();
    let plugins = base.join("plugins.json");
    std::fs::write(
        &plugins,
        json!({"root": root, "plugin_tools": [{"plugin": "jira", "expose": ["create"]}]})
            .to_string(),
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--config".into(), missing.display().to_string()],
            "missing.json",
        ),
        (
            vec!["--config".into(), bad_json.display().to_string()],
            "bad.json is invalid",
        ),
        (
            vec!["--config".into(), unknown.display().to_string()],
            "unknown field `landlok`",
        ),
        (
            vec!["--config".into(), bad_root.display().to_string()],
            "is not an existing directory",
        ),
        (
            vec!["--config".into(), plugins.display().to_string()],
            "jira",
        ),
        (
            vec!["--root".into(), base.join("nope").display().to_string()],
            "--root",
        ),
        (vec![], "needs --config FILE or --root DIR"),
        // Both may be given (the root over the config's): the config is read first.
        (
            vec!["--config".into(), "a".into(), "--root".into(), "b".into()],
            "cannot read the config a",
        ),
    ];
    for (args, want) in cases {
        let mut full = vec!["mcp-serve".to_string()];
        full.extend(args.iter().cloned());
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = serve_fails(&refs);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?} wrote to stdout");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// The step's registry (`servers_dir`): a serving server is listed there by pid; once the
/// step is closed, a server started late stops before it serves or records a session.
#[test]
fn a_server_registers_for_its_step_and_one_started_after_the_step_closed_stops() {
    let (base, root, _o) = workspace("registry");
    let servers = base.join("servers");
    std::fs::create_dir(&servers).unwrap();
    let audit = base.join("audit.jsonl");
    let cfg = write_config(
        &base,
        &json!({"root": root, "audit_path": audit, "servers_dir": servers}),
    );
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    assert!(
        servers.join(s.pid().to_string()).exists(),
        "the serving server is not registered"
    );
    s.finish();
    std::fs::write(servers.join("closed"), "").unwrap();
    let sessions = || {
        audit_lines(&audit)
            .iter()
            .filter(|r| r["type"] == "session.start")
            .count()
    };
    assert_eq!(sessions(), 1);
    let (code, stdout, stderr) = serve_fails(&["mcp-serve", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "");
    assert!(stderr.contains("has ended: nothing to serve"), "{stderr}");
    assert_eq!(sessions(), 1, "the late server recorded a session");
}

#[test]
fn mcp_serve_is_hidden_from_help() {
    let (code, stdout, _) = serve_fails(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("  tools "), "{stdout}");
    assert!(
        !stdout
            .lines()
            .any(|l| l.trim_start().starts_with("mcp-serve")),
        "{stdout}"
    );
}

fn audited(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Server) {
    let (base, root, _o) = workspace(name);
    let audit = base.join("audit.jsonl");
    let cfg = write_config(
        &base,
        &json!({"root": root, "audit_path": audit, "run_id": "run-7", "step_id": "build"}),
    );
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("AWF_TEST_API_TOKEN", "sk-verysecret-123")],
    );
    s.initialize();
    (root, audit, s)
}

#[test]
fn audit_has_session_records_and_call_pairs_with_masked_secrets() {
    let (root, audit, mut s) = audited("audit");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    s.ok("Read", json!({"path": "f.txt"}));
    s.err("Read", json!({"path": "nope"}));
    s.ok(
        "Bash",
        json!({"command": "echo sk-verysecret-123 | wc -c", "timeout_seconds": 30}),
    );
    s.ok(
        "Write",
        json!({"path": "big.txt", "content": "y".repeat(5000)}),
    );
    let (status, rest, _) = s.finish();
    assert!(status.success());
    assert_eq!(rest, "");
    let lines = audit_lines(&audit);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session.start",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "session.end"
        ]
    );
    assert_eq!(lines.last().unwrap()["reason"], "end_of_input");
    for l in &lines {
        assert_eq!(l["run_id"], "run-7");
        assert_eq!(l["step_id"], "build");
        assert_eq!(l["session_id"], lines[0]["session_id"]);
    }
    assert_eq!(
        lines[0]["tools"],
        json!(["Read", "Write", "Edit", "Bash", "Glob", "Grep"])
    );
    for pair in lines[1..9].chunks(2) {
        assert_eq!(pair[0]["call_id"], pair[1]["call_id"]);
        assert!(pair[1]["duration_ms"].as_f64().unwrap() >= 0.0);
        assert!(pair[1]["output_bytes"].as_u64().is_some());
    }
    assert_eq!(lines[2]["outcome"], "ok");
    assert_eq!(lines[4]["outcome"], "tool_error");
    assert!(
        lines[4]["error"]
            .as_str()
            .unwrap()
            .contains("file not found")
    );
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !text.contains("sk-verysecret-123"),
        "secret in the audit file"
    );
    assert_eq!(lines[5]["arguments"]["command"], "echo *** | wc -c");
    assert!(
        lines[7]["arguments"]["content"]
            .as_str()
            .unwrap()
            .ends_with("…[cut: 5000 bytes]")
    );
}

/// Secrets the environment does not know of are masked by their shape or their name, in
/// arguments and in error texts (the Bash call below fails and its output is recorded).
#[test]
fn token_shapes_and_secret_assignments_are_masked_in_the_audit() {
    let (_root, audit, mut s) = audited("audit-shapes");
    let secrets = [
        "wJalrXUtnFEMIK7MDENGbPxRfiCYzz",
        "ghp_0123456789abcdefghijABCDEFGHIJ",
        "eyJhbGciOiJIUzI1NiJ9.payload.sig",
        "hunter2hunter2",
    ];
    s.ok(
        "Write",
        json!({"path": "env.sh", "content": format!(
            "export AWS_SECRET_ACCESS_KEY={}\nGH={}\npassword={}\n",
            secrets[0], secrets[1], secrets[3]
        )}),
    );
    s.err(
        "Bash",
        json!({"command": format!(
            "echo 'Authorization: Bearer {}'; exit 3", secrets[2]
        )}),
    );
    let (status, _, _) = s.finish();
    assert!(status.success());
    let text = std::fs::read_to_string(&audit).unwrap();
    for secret in secrets {
        assert!(!text.contains(secret), "{secret} in the audit: {text}");
    }
    let lines = audit_lines(&audit);
    let content = lines[1]["arguments"]["content"].as_str().unwrap();
    assert!(content.contains("AWS_SECRET_ACCESS_KEY=***"), "{content}");
    assert!(
        lines[3]["arguments"]["command"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer ***"),
        "{}",
        lines[3]
    );
}

#[test]
fn shutdown_is_answered_and_recorded() {
    let (_root, audit, mut s) = audited("shutdown");
    let a = s.request("shutdown", json!({}));
    assert!(a.get("result").is_some(), "{a}");
    let (status, _) = s.wait();
    assert!(status.success());
    assert_eq!(audit_lines(&audit).last().unwrap()["reason"], "shutdown");
}

fn signal_exit(sig: i32, name: &str) {
    let (_root, audit, mut s) = audited(&format!("signal-{sig}"));
    assert!(s.request("ping", json!({})).get("result").is_some());
    unsafe { libc::kill(s.pid(), sig) };
    let (status, stderr) = s.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let last: Value = audit_lines(&audit).last().unwrap().clone();
    assert_eq!(last["type"], "session.end");
    assert_eq!(last["reason"], "signal");
    assert_eq!(last["detail"], name);
}

#[test]
fn sigterm_and_sigint_exit_0_with_session_end() {
    signal_exit(libc::SIGTERM, "SIGTERM");
    signal_exit(libc::SIGINT, "SIGINT");
}

/// Calls the server answers with an error before any tool runs (unknown tool, arguments
/// that are not an object) are audited as a pair with outcome `rejected`, numbered in the
/// same sequence as the others.
#[test]
fn calls_rejected_before_any_tool_runs_are_audited() {
    let (root, audit, mut s) = audited("rejected");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let e = s.request(
        "tools/call",
        json!({"name": "Nope", "arguments": {"token": "sk-verysecret-123"}}),
    );
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = s.request("tools/call", json!({"name": "Read", "arguments": [1]}));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    s.ok("Read", json!({"path": "f.txt"}));
    let (status, _, _) = s.finish();
    assert!(status.success());
    let lines = audit_lines(&audit);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "session.start",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "tool.call",
            "tool.result",
            "session.end"
        ]
    );
    let session = lines[0]["session_id"].as_str().unwrap();
    for (i, pair) in lines[1..7].chunks(2).enumerate() {
        assert_eq!(pair[0]["call_id"], format!("{session}-{}", i + 1));
        assert_eq!(pair[0]["call_id"], pair[1]["call_id"]);
    }
    assert_eq!(lines[1]["tool"], "Nope");
    assert_eq!(lines[1]["source"], "none");
    // Masked like any other call's arguments.
    assert!(
        !std::fs::read_to_string(&audit)
            .unwrap()
            .contains("sk-verysecret-123")
    );
    assert_eq!(lines[2]["outcome"], "rejected");
    assert_eq!(lines[2]["is_error"], true);
    assert!(
        lines[2]["error"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"Nope\""),
        "{}",
        lines[2]
    );
    assert_eq!(lines[3]["arguments"], json!([1]));
    assert_eq!(lines[4]["outcome"], "rejected");
    assert!(
        lines[4]["error"]
            .as_str()
            .unwrap()
            .contains("must be an object"),
        "{}",
        lines[4]
    );
    assert_eq!(lines[6]["outcome"], "ok");
}

/// A tool policy withholds tools: they are not listed, and a call to one is -32602 naming
/// the policy, audited as rejected. Unknown denied names are refused at start.
#[test]
fn a_tool_policy_withholds_tools_and_refuses_calls_to_them() {
    let (base, root, _o) = workspace("policy");
    let audit = base.join("audit.jsonl");
    let cfg = write_config(
        &base,
        &json!({"root": root, "audit_path": audit, "tools": {"deny": ["Bash", "Write"]}}),
    );
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    let list = s.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Read", "Edit", "Glob", "Grep"]);
    let e = s.request(
        "tools/call",
        json!({"name": "Bash", "arguments": {"command": "touch pwned"}}),
    );
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"Bash\" is not available") && message.contains("mcp_proxy.tools.deny"),
        "{message}"
    );
    let (status, _, _) = s.finish();
    assert!(status.success());
    assert!(!root.join("pwned").exists());
    let lines = audit_lines(&audit);
    assert_eq!(lines[0]["tools"], json!(["Read", "Edit", "Glob", "Grep"]));
    assert_eq!(
        (&lines[1]["type"], &lines[1]["tool"]),
        (&json!("tool.call"), &json!("Bash"))
    );
    assert_eq!(lines[2]["outcome"], "rejected");
    assert!(
        lines[2]["error"]
            .as_str()
            .unwrap()
            .contains("mcp_proxy.tools.deny")
    );

    let bad = write_config(&base, &json!({"root": root, "tools": {"deny": ["Bsh"]}}));
    let out = std::process::Command::new(AWF)
        .args(["mcp-serve", "--config", bad.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"Bsh\"") && err.contains("Read, Write, Edit, Bash, Glob, Grep"),
        "{err}"
    );
}

#[test]
fn sigterm_during_a_long_call_answers_it_and_kills_the_command() {
    let (_root, audit, mut s) = audited("signal-busy");
    let fg = format!("983.{}", std::process::id());
    let id = s.send_request(
        "tools/call",
        json!({"name": "Bash", "arguments": {"command": format!("sleep {fg}")}}),
    );
    assert!(eventually(|| !common::pids_with_arg(&fg).is_empty()));
    unsafe { libc::kill(s.pid(), libc::SIGTERM) };
    let answer = s.answer(id);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cancelled")
    );
    let (status, _) = s.wait();
    assert_eq!(status.code(), Some(0));
    assert!(eventually(|| common::pids_with_arg(&fg).is_empty()));
    let lines = audit_lines(&audit);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["session.start", "tool.call", "tool.result", "session.end"]
    );
    assert_eq!(lines[2]["outcome"], "cancelled");
}

#[test]
fn tools_cli_spawns_the_server_and_prints_result_and_audit() {
    let (_b, root, _o) = workspace("cli");
    std::fs::write(root.join("README.md"), "# hello\n").unwrap();
    let r = root.to_str().unwrap();
    let out = Command::new(AWF)
        .args(["tools", "list", "--root", r])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Read(path, limit?, offset?)\n"), "{text}");
    let out = Command::new(AWF)
        .args([
            "tools",
            "call",
            "Read",
            r#"{"path":"README.md"}"#,
            "--root",
            r,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("# hello"));
    assert_eq!(lines.next(), Some("--- audit (temporary file) ---"));
    let call: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let result: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        (call["type"].as_str(), result["type"].as_str()),
        (Some("tool.call"), Some("tool.result"))
    );
    assert_eq!(call["call_id"], result["call_id"]);

    let out = Command::new(AWF)
        .args([
            "tools",
            "call",
            "Read",
            r#"{"path":"../x"}"#,
            "--root",
            r,
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["is_error"], true);
    assert_eq!(v["audit"].as_array().unwrap().len(), 2);

    let out = Command::new(AWF)
        .args(["tools", "call", "Nope", "--root", r])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("USER.TOOLS.UNKNOWN_TOOL"));
    let out = Command::new(AWF)
        .args(["tools", "call", "Read", r#"{"file": "x"}"#, "--root", r])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("USER.TOOLS.BAD_ARGUMENTS"));
    let out = Command::new(AWF)
        .args(["tools", "call", "Read", "{bad", "--root", r])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
}

/// The README's quick start typed in the home directory: awf's state directory
/// (`~/.local/state/awf`, where `awf tools call` keeps the call's audit) lies beneath the
/// root. The call works, and the call's Bash can neither read nor change what is there.
#[test]
fn tools_call_from_home_keeps_awf_s_state_directory_from_bash() {
    let (base, home, _o) = workspace("tools-call-home");
    let state = home.join(".local/state/awf");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("earlier.jsonl"), "RECORD\n").unwrap();
    std::fs::write(home.join("f.txt"), "hello\n").unwrap();
    let call = |tool: &str, args: &str| {
        let out = common::awf(&home)
            .args(["tools", "call", tool, args, "--output", "json"])
            .env("HOME", &home)
            .env("TMPDIR", base.join("tmp"))
            .env_remove("XDG_STATE_HOME")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{tool}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v)
    };
    std::fs::create_dir_all(base.join("tmp")).unwrap();
    let (code, v) = call("Read", r#"{"path": "f.txt"}"#);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["audit"].as_array().unwrap().len(), 2, "{v:#}");
    let (_, v) = call(
        "Bash",
        "{\"command\": \"cat .local/state/awf/earlier.jsonl; rm -f .local/state/awf/earlier.jsonl\"}",
    );
    assert!(!v.to_string().contains("RECORD"), "{v:#}");
    assert_eq!(
        std::fs::read_to_string(state.join("earlier.jsonl")).unwrap(),
        "RECORD\n"
    );
}

#[test]
fn json_logs_on_stderr_one_line_per_call() {
    let (_b, root, _o) = workspace("json-logs");
    let mut s = Server::start(
        &[
            "--log-format",
            "json",
            "mcp-serve",
            "--root",
            root.to_str().unwrap(),
        ],
        &[("AWF_LOG", "info")],
    );
    s.initialize();
    s.ok("Glob", json!({"pattern": "*"}));
    s.err("Read", json!({"path": "missing"}));
    let (status, _, stderr) = s.finish();
    assert!(status.success());
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect();
    let calls: Vec<&Value> = lines.iter().filter(|l| l["tool"].is_string()).collect();
    assert_eq!(calls.len(), 2, "{stderr}");
    assert_eq!(
        (calls[0]["tool"].as_str(), calls[0]["outcome"].as_str()),
        (Some("Glob"), Some("ok"))
    );
    assert_eq!(calls[0]["source"], "builtin");
    assert!(calls[0]["duration_ms"].is_string() || calls[0]["duration_ms"].is_number());
    assert_eq!(
        (calls[1]["level"].as_str(), calls[1]["outcome"].as_str()),
        (Some("WARN"), Some("tool_error"))
    );
    assert!(
        calls[1]["error"]
            .as_str()
            .unwrap()
            .contains("file not found")
    );
}

/// Standard input that cannot be waited on (a file, /dev/null) is read as it is: every
/// request answered, exit 0 at its end.
#[test]
fn requests_from_a_file_or_dev_null_are_served() {
    let (base, root, _o) = workspace("stdin-file");
    let requests = base.join("requests.jsonl");
    std::fs::write(
        &requests,
        concat!(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "\n",
        ),
    )
    .unwrap();
    let root = root.to_str().unwrap();
    let from_file = Command::new(AWF)
        .args(["mcp-serve", "--root", root])
        .stdin(std::fs::File::open(&requests).unwrap())
        .output()
        .unwrap();
    assert_eq!(from_file.status.code(), Some(0), "{from_file:?}");
    let answers: Vec<Value> = String::from_utf8(from_file.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[1]["id"], 1);
    assert_eq!(answers[1]["result"], json!({}));

    let (code, stdout, stderr) = serve_fails(&["mcp-serve", "--root", root]);
    assert_eq!((code, stdout.as_str()), (0, ""), "{stderr}");
}
