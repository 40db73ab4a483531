//! What tools send back, scanned by the real `awf mcp-serve`: a secret in a builtin's or a
//! server's result is redacted by kind with a `secret.redacted` audit record (or passed
//! with a record under `warn`, or the result withheld under `refuse`, or left alone under
//! `off`; a server's own `scan` over the step's); a poisoned tool description is a
//! `tool.suspicious` record, and with `scan: {descriptions: refuse}` the tool is withheld;
//! `awf tools pin` shows the finding; `awf validate` names a bad setting.

use crate::common;
use common::*;
use serde_json::{Value, json};
use std::path::Path;

const AWS_KEY: &str = "AKIAZ7Q2X4K9M3N5P8R6";
const GITHUB_TOKEN: &str = "ghp_Zr8Qw2Lx5Vn3Kt7Yb1Hc9Pd4Mf6Js0Ga2Te8";

fn hostile() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/servers/hostile.py")
        .display()
        .to_string()
}

/// `awf mcp-serve` over `root` with `extra` keys in its config (the audit in `base`).
fn serve(base: &Path, root: &Path, extra: Value) -> (Server, std::path::PathBuf) {
    let audit = base.join("audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    let mut config = json!({"root": root, "audit_path": audit});
    for (k, v) in extra.as_object().unwrap() {
        config[k] = v.clone();
    }
    let cfg = write_config(base, &config);
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    (s, audit)
}

fn records_of(audit: &Path, kind: &str) -> Vec<Value> {
    audit_lines(audit)
        .into_iter()
        .filter(|r| r["type"] == kind)
        .collect()
}

#[test]
fn a_secret_in_a_builtin_s_result_is_redacted_warned_withheld_or_left_as_the_step_says() {
    let (base, root, _o) = workspace("scan-builtins");
    std::fs::write(
        root.join("creds.txt"),
        format!("[default]\naws_access_key_id = {AWS_KEY}\ngithub = {GITHUB_TOKEN}\n"),
    )
    .unwrap();

    // The default: redacted by kind, and audited without the secret.
    let (mut s, audit) = serve(&base, &root, json!({}));
    let read = s.ok("Read", json!({"path": "creds.txt"}));
    assert!(
        read.contains("aws_access_key_id = [redacted: aws-access-key-id]"),
        "{read}"
    );
    assert!(read.contains("github = [redacted: github-token]"), "{read}");
    let bash = s.ok("Bash", json!({"command": "cat creds.txt"}));
    assert!(
        bash.contains("[redacted: aws-access-key-id]") && !bash.contains(AWS_KEY),
        "{bash}"
    );
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let redacted = records_of(&audit, "secret.redacted");
    assert_eq!(redacted.len(), 2, "{redacted:#?}");
    assert_eq!(redacted[0]["tool"], "Read");
    assert_eq!(redacted[0]["source"], "builtin");
    assert_eq!(redacted[0]["mode"], "redact");
    assert_eq!(
        redacted[0]["found"],
        json!([{"kind": "aws-access-key-id", "count": 1}, {"kind": "github-token", "count": 1}])
    );
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !text.contains(AWS_KEY) && !text.contains(GITHUB_TOKEN),
        "{text}"
    );
    assert!(
        stderr.contains("a secret in the result of Read"),
        "{stderr}"
    );

    // warn: passed on, and recorded as found.
    let (mut s, audit) = serve(&base, &root, json!({"scan": "warn"}));
    assert!(s.ok("Read", json!({"path": "creds.txt"})).contains(AWS_KEY));
    s.finish();
    let found = records_of(&audit, "secret.found");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        found[0]["found"],
        json!([{"kind": "aws-access-key-id", "count": 1}, {"kind": "github-token", "count": 1}])
    );

    // refuse: the whole result withheld, saying why.
    let (mut s, audit) = serve(&base, &root, json!({"scan": {"results": "refuse"}}));
    let refused = s.err("Read", json!({"path": "creds.txt"}));
    assert!(
        refused.contains("withheld the result of Read") && refused.contains("aws-access-key-id"),
        "{refused}"
    );
    assert!(!refused.contains(AWS_KEY));
    s.finish();
    assert_eq!(records_of(&audit, "secret.redacted")[0]["mode"], "refuse");

    // off: as it is, nothing recorded.
    let (mut s, audit) = serve(&base, &root, json!({"scan": "off"}));
    assert!(
        s.ok("Read", json!({"path": "creds.txt"}))
            .contains(GITHUB_TOKEN)
    );
    s.finish();
    assert!(records_of(&audit, "secret.redacted").is_empty());
    assert!(records_of(&audit, "secret.found").is_empty());
}

#[test]
fn a_server_s_result_is_scanned_too_and_its_own_setting_is_over_the_step_s() {
    let (base, root, _o) = workspace("scan-servers");
    std::fs::write(root.join("creds.txt"), format!("key {AWS_KEY}\n")).unwrap();
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhd2YtdGVzdCIsImlhdCI6MTcwMDAwMDAwMH0.q0rVNm3lT9yKp2Xw8Jd5Hc1Gb7Ef4Za6";
    let servers = |scan: Value| {
        let mut h = json!({"command": ["python3", hostile()]});
        if !scan.is_null() {
            h["scan"] = scan;
        }
        json!({"intercept_builtins": true, "servers": {"h": h}})
    };
    let (mut s, audit) = serve(&base, &root, servers(Value::Null));
    let echo = s.ok("h_echo", json!({"text": format!("session={jwt}")}));
    assert_eq!(echo, "session=[redacted: jwt]");
    s.finish();
    let redacted = records_of(&audit, "secret.redacted");
    assert_eq!(redacted[0]["tool"], "h_echo");
    assert_eq!(redacted[0]["source"], "server:h");

    // The server's `scan: off` leaves its results alone; the builtins keep the step's.
    let (mut s, _) = serve(&base, &root, servers(json!("off")));
    assert_eq!(
        s.ok("h_echo", json!({"text": format!("session={jwt}")})),
        format!("session={jwt}")
    );
    assert!(
        s.ok("Read", json!({"path": "creds.txt"}))
            .contains("[redacted: aws-access-key-id]")
    );
    s.finish();
}

#[test]
fn a_poisoned_description_is_found_and_with_refuse_its_tool_is_withheld() {
    let (base, root, _o) = workspace("scan-descriptions");
    // Variant 2's echo asks the model to read ~/.ssh/id_rsa.
    let server = |scan: Value| {
        let mut h = json!({"command": ["python3", hostile()], "env": {"HOSTILE_VARIANT": "2"}});
        if !scan.is_null() {
            h["scan"] = scan;
        }
        json!({"intercept_builtins": false, "servers": {"h": h}})
    };
    let names = |s: &mut Server| -> Vec<String> {
        s.request("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };

    // warn (the default): offered, and recorded with what was found.
    let (mut s, audit) = serve(&base, &root, server(Value::Null));
    assert!(names(&mut s).contains(&"h_echo".to_string()));
    let (_, _, stderr) = s.finish();
    let suspicious = records_of(&audit, "tool.suspicious");
    assert_eq!(suspicious.len(), 1, "{suspicious:#?}");
    assert_eq!(suspicious[0]["tool"], "h_echo");
    let findings = suspicious[0]["findings"].to_string();
    assert!(
        findings.contains("aimed at the model") && findings.contains("~/.ssh"),
        "{findings}"
    );
    assert!(
        stderr.contains("the description of h_echo is suspicious"),
        "{stderr}"
    );

    // refuse: withheld, and a call to it says why.
    let (mut s, _) = serve(&base, &root, server(json!({"descriptions": "refuse"})));
    let offered = names(&mut s);
    assert!(!offered.contains(&"h_echo".to_string()), "{offered:?}");
    assert!(offered.contains(&"h_read_file".to_string()), "{offered:?}");
    let call = s.request(
        "tools/call",
        json!({"name": "h_echo", "arguments": {"text": "x"}}),
    );
    let said = call.to_string();
    assert!(
        said.contains("suspicious") && said.contains("refuse"),
        "{said}"
    );
    s.finish();

    // `awf tools pin` shows the finding.
    let cfg = write_config(
        &base,
        &json!({"root": root, "servers": server(Value::Null)["servers"]}),
    );
    let out = std::process::Command::new(AWF)
        .args(["tools", "pin", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("server h: ! echo: description: words aimed at the model"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn awf_validate_names_a_bad_scan_setting() {
    let (base, _root, _o) = workspace("scan-validate");
    let wf = base.join("flow.yaml");
    for (scan, words) in [
        ("maybe", &["\"maybe\"", "off, warn, redact or refuse"][..]),
        ("{descriptions: redact}", &["not redacted"]),
        ("{results: redact, other: 1}", &["other"]),
    ] {
        std::fs::write(
            &wf,
            format!(
                "\
name: s
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: hi
    mcp_proxy:
      enable: true
      scan: {scan}
    on_success: done
  done:
    type: terminal
"
            ),
        )
        .unwrap();
        let out = common::awf(&base)
            .arg("validate")
            .arg(&wf)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(out.status.code(), Some(0), "{scan}: {text}");
        for w in words {
            assert!(text.contains(w), "{scan}: {w} not in {text}");
        }
    }
}
