//! Remote MCP servers behind `awf mcp-serve`: a server of these tests' own over Streamable
//! HTTP and TLS (tests/fixtures/servers/remote.py, its certificate signed by a CA each test
//! makes and awf is told of through SSL_CERT_FILE), in either era, listed, called, audited
//! and traced with its bearer token sent and never written anywhere; refused at a private
//! address (literal or resolved) unless the entry allows it; its URL and `${VAR}`s checked
//! by `awf validate`.

use crate::common;
use crate::otlp_receiver;
use common::*;
use otlp_receiver::{Receiver, attr};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The token the tests' server takes; unique enough that finding it anywhere is a leak.
const TOKEN: &str = "awf-test-pat-7f3c9e1b5d";

/// The tests' remote server, running until dropped.
struct Remote {
    /// Kept to the end: dropping it stops the server.
    _server: PortServer,
    port: u16,
    log: PathBuf,
    ca: PathBuf,
}

impl Remote {
    /// Starts remote.py in `era` over TLS with a certificate for localhost and 127.0.0.1
    /// signed by a CA made here (written to `base/ca.pem`).
    fn start(base: &Path, era: &str) -> Remote {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&leaf_key, &ca_cert, &ca_key)
            .unwrap();
        let ca = base.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        std::fs::write(base.join("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(base.join("key.pem"), leaf_key.serialize_pem()).unwrap();
        let log = base.join(format!("remote-{era}.log"));
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/remote.py");
        let mut cmd = Command::new("python3");
        cmd.arg(fixture)
            .env("ERA", era)
            .env("CERT", base.join("cert.pem"))
            .env("KEY", base.join("key.pem"))
            .env("TOKEN", TOKEN)
            .env("LOG", &log);
        let server = PortServer::start(cmd);
        Remote {
            port: server.port,
            _server: server,
            log,
            ca,
        }
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}/mcp", self.port)
    }

    /// Every request the server logged.
    fn requests(&self) -> Vec<Value> {
        audit_lines(&self.log)
    }
}

/// `awf mcp-serve` over one remote server `gh` (`entry`), with the token in
/// AWF_TEST_PAT and the tests' CA trusted.
fn serve(
    base: &Path,
    root: &Path,
    audit: &Path,
    entry: Value,
    remote: &Remote,
    env: &[(&str, &str)],
) -> Server {
    let config = json!({"root": root, "audit_path": audit, "intercept_builtins": false,
                        "servers": {"gh": entry}});
    let cfg = write_config(base, &config);
    let ca = remote.ca.display().to_string();
    let mut envs = vec![("AWF_TEST_PAT", TOKEN), ("SSL_CERT_FILE", ca.as_str())];
    envs.extend_from_slice(env);
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &envs);
    s.initialize();
    s
}

fn entry(url: &str) -> Value {
    json!({"url": url, "headers": {"Authorization": "Bearer ${AWF_TEST_PAT}"},
           "allow_private": true})
}

fn tool_names(s: &mut Server) -> Vec<String> {
    let list = s.request("tools/list", json!({}));
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn a_remote_server_of_either_era_is_listed_called_audited_and_traced_and_its_token_never_written() {
    for era in ["modern", "legacy"] {
        let receiver = Receiver::start();
        let (base, root, _o) = workspace(&format!("remote-{era}"));
        let remote = Remote::start(&base, era);
        let audit = base.join("audit.jsonl");
        let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
        let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
        let otlp = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.as_str()),
            ("TRACEPARENT", traceparent.as_str()),
            ("AWF_LOG", "debug"),
        ];
        let mut s = serve(
            &base,
            &root,
            &audit,
            entry(&remote.url("127.0.0.1")),
            &remote,
            &otlp,
        );
        assert_eq!(
            tool_names(&mut s),
            ["gh_echo", "gh_leak"],
            "{era}: {}",
            s.stderr()
        );
        // Answered as an SSE stream, after a log message.
        assert_eq!(s.ok("gh_echo", json!({"text": "hi"})), "hi", "{era}");
        // The server sends back the credentials it got: masked before the agent sees them.
        let leak = s.ok("gh_leak", json!({}));
        assert_eq!(leak, "you sent: [masked: header Authorization]", "{era}");
        let (status, _, stderr) = s.finish();
        assert!(status.success(), "{era}: {stderr}");
        let speaks = if era == "modern" {
            "server gh speaks 2026-07-28"
        } else {
            "server gh speaks the handshake era"
        };
        assert!(stderr.contains(speaks), "{era}: {stderr}");

        // What the server read: the token on every request, and each era's headers.
        let requests = remote.requests();
        let posts: Vec<&Value> = requests.iter().filter(|r| r["http"] == "POST").collect();
        assert!(
            posts.iter().all(|r| r["authorized"] == true),
            "{era}: {requests:#?}"
        );
        let echo = posts
            .iter()
            .find(|r| r["method"] == "tools/call" && r["mcp_name"] == "echo")
            .unwrap_or_else(|| panic!("{era}: {requests:#?}"));
        assert_eq!(echo["mcp_method"], "tools/call");
        if era == "modern" {
            assert_eq!(echo["protocol_version"], "2026-07-28");
            assert!(
                posts.iter().all(|r| r["session"].is_null()),
                "{requests:#?}"
            );
            assert!(
                !posts.iter().any(|r| r["method"] == "initialize"),
                "{requests:#?}"
            );
        } else {
            // Probed with server/discover (refused: no session), then the handshake.
            let methods: Vec<&str> = posts.iter().filter_map(|r| r["method"].as_str()).collect();
            assert_eq!(
                methods[..2],
                ["server/discover", "initialize"],
                "{requests:#?}"
            );
            assert_eq!(echo["protocol_version"], "2025-06-18");
            assert!(echo["session"].is_string(), "{requests:#?}");
            // The session is ended when the step is.
            assert!(
                eventually(|| remote.requests().iter().any(|r| r["http"] == "DELETE")),
                "{:#?}",
                remote.requests()
            );
        }

        // Audited and traced as any server's call, and the token is nowhere.
        let records = audit_lines(&audit);
        assert!(
            records.iter().any(|r| r["type"] == "tool.call"
                && r["tool"] == "gh_echo"
                && r["source"] == "server:gh"),
            "{era}: {records:#?}"
        );
        let spans = receiver.spans();
        let span = spans
            .iter()
            .find(|s| s.name == "tools/call gh_echo")
            .unwrap_or_else(|| panic!("{era}: {spans:#?}"));
        assert_eq!(attr(span, "awf.mcp.server").as_deref(), Some("gh"));
        let audit_text = std::fs::read_to_string(&audit).unwrap();
        for (what, text) in [
            ("the audit", audit_text),
            ("the log", stderr),
            ("the spans", format!("{spans:?}")),
        ] {
            assert!(
                !text.contains(TOKEN),
                "{era}: the token is in {what}: {text}"
            );
        }
    }
}

#[test]
fn a_remote_server_at_a_private_address_is_refused_unless_allowed_and_bad_credentials_are_named() {
    let (base, root, _o) = workspace("remote-refused");
    let remote = Remote::start(&base, "modern");
    let audit = base.join("audit.jsonl");
    let start = |entry: Value| -> String {
        let config = json!({"root": root, "audit_path": audit, "intercept_builtins": false,
                            "servers": {"gh": entry}});
        let cfg = write_config(&base, &config);
        let out = Command::new(AWF)
            .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
            .env("AWF_TEST_PAT", TOKEN)
            .env("SSL_CERT_FILE", &remote.ca)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "it started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let without =
        |url: &str| json!({"url": url, "headers": {"Authorization": "Bearer ${AWF_TEST_PAT}"}});
    // A literal address, a name that resolves to loopback, a cloud's metadata service.
    for (url, address) in [
        (remote.url("127.0.0.1"), "127.0.0.1"),
        (remote.url("localhost"), "127.0.0.1"),
        (
            "https://169.254.169.254/latest/meta-data".to_string(),
            "169.254.169.254",
        ),
    ] {
        let why = start(without(&url));
        assert!(
            why.contains("not a public address")
                && why.contains(address)
                && why.contains("allow_private"),
            "{url}: {why}"
        );
    }
    assert!(remote.requests().is_empty(), "{:#?}", remote.requests());
    // Plain http is refused too, unless allowed.
    let why = start(without(&format!("http://127.0.0.1:{}/mcp", remote.port)));
    assert!(why.contains("plain http"), "{why}");

    // A 307 is followed (the POST as it was); a 302 would make it a GET: refused, naming
    // where it pointed.
    let moved = format!("https://localhost:{}/moved", remote.port);
    let mut s = serve(&base, &root, &audit, entry(&moved), &remote, &[]);
    assert_eq!(tool_names(&mut s), ["gh_echo", "gh_leak"]);
    s.finish();
    let found = json!({"url": format!("https://localhost:{}/found", remote.port),
                       "headers": {"Authorization": "Bearer ${AWF_TEST_PAT}"}, "allow_private": true});
    let why = start(found);
    assert!(
        why.contains("redirect (302)") && why.contains("/mcp") && why.contains("into a GET"),
        "{why}"
    );

    // Wrong credentials: the status and the fix are named, and what the server echoed of
    // them is masked.
    let wrong = json!({"url": remote.url("localhost"), "allow_private": true,
                       "headers": {"Authorization": "Bearer ${AWF_OTHER_PAT}"}});
    let config = json!({"root": root, "audit_path": audit, "intercept_builtins": false,
                        "servers": {"gh": wrong}});
    let cfg = write_config(&base, &config);
    let out = Command::new(AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .env("AWF_OTHER_PAT", "wrong-token-4242")
        .env("SSL_CERT_FILE", &remote.ca)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        why.contains("HTTP 401") && why.contains("check the entry's headers"),
        "{why}"
    );
    assert!(!why.contains("wrong-token-4242"), "{why}");
    // An unset variable is named before anything is sent.
    let unset = json!({"url": remote.url("localhost"), "allow_private": true,
                       "headers": {"X-Key": "${AWF_SURELY_UNSET_PAT}"}});
    let config = json!({"root": root, "audit_path": audit, "intercept_builtins": false,
                        "servers": {"gh": unset}});
    let cfg = write_config(&base, &config);
    let out = Command::new(AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("AWF_SURELY_UNSET_PAT") && why.contains("not set"),
        "{why}"
    );
}

#[test]
fn awf_validate_checks_a_remote_server_s_url_and_variables() {
    let (base, _root, _o) = workspace("remote-validate");
    let wf = base.join("flow.yaml");
    let flow = |server: &str| {
        format!(
            "\
name: remote
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: hi
    mcp_proxy:
      enable: true
      servers:
        gh:
{server}    on_success: done
  done:
    type: terminal
"
        )
    };
    let validate = |server: &str| {
        std::fs::write(&wf, flow(server)).unwrap();
        let out = common::awf(&base)
            .arg("validate")
            .arg(&wf)
            .env("AWF_TEST_PAT", TOKEN)
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let good = "          url: https://mcp.example.com/mcp\n          headers: {Authorization: \"Bearer ${AWF_TEST_PAT}\"}\n          tools: {deny: [delete_repository]}\n";
    let (code, out) = validate(good);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains(TOKEN), "{out}");
    for (server, words) in [
        (
            "          url: http://mcp.example.com/mcp\n",
            &["plain http"][..],
        ),
        (
            "          url: https://169.254.169.254/\n",
            &["169.254.169.254", "allow_private"],
        ),
        (
            "          url: https://mcp.example.com/mcp\n          headers: {Authorization: \"Bearer ${AWF_SURELY_UNSET_PAT}\"}\n",
            &["AWF_SURELY_UNSET_PAT", "not set"],
        ),
        (
            "          url: https://mcp.example.com/mcp\n          command: [npx, server]\n",
            &["both command and url"],
        ),
        (
            "          url: https://mcp.example.com/mcp\n          sandbox: {network: allow}\n",
            &["for a server awf starts"],
        ),
        (
            "          command: [cat]\n          headers: {X-Key: v}\n",
            &["headers but no url"],
        ),
    ] {
        let (code, out) = validate(server);
        assert_ne!(code, Some(0), "{server}: {out}");
        for w in words {
            assert!(out.contains(w), "{server}: {w:?} not in {out}");
        }
    }
}

/// One step of `awf run` with `provider` whose model calls the remote server's tools, with
/// the server in `era`: listed and called through the step's tool server, audited, traced,
/// pinned in the workflow's lock file, and the token never in what the model, the run's
/// output or its audit get.
fn through_a_run(provider: &str, era: &str) {
    use crate::fake_model::{FakeModel, Script};
    use crate::harness::*;
    let program = match provider {
        "openai_compatible" => None,
        cli => match agent_cli(cli) {
            Some(p) => Some(p),
            None => return,
        },
    };
    let receiver = Receiver::start();
    let fake = FakeModel::start(
        Script::new()
            .call("gh_echo", json!({"text": "through the run"}))
            .call("gh_leak", json!({})),
    );
    let step = Step::new(&format!("remote-run-{provider}"));
    let remote = Remote::start(&step.base, era);
    let options = model_options(provider, program.as_deref(), &fake);
    let proxy = format!(
        "{{enable: true, intercept_builtins: false, servers: {{gh: {{url: \"{}\", \
         headers: {{Authorization: \"Bearer ${{AWF_TEST_PAT}}\"}}, allow_private: true}}}}}}",
        remote.url("127.0.0.1")
    );
    let env = [
        ("AWF_TEST_PAT", TOKEN.to_string()),
        ("SSL_CERT_FILE", remote.ca.display().to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
    ];
    let run = run_workflow(&step, provider, &options, &proxy, None, &env);
    let ctx = run.assert_success(&fake);
    let called: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert!(
        called.len() == 2 && called[0].ends_with("gh_echo") && called[1].ends_with("gh_leak"),
        "{called:?}\n{ctx}"
    );
    let audited: Vec<(&str, &str)> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .map(|r| {
            (
                r["tool"].as_str().unwrap(),
                r["source"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        audited,
        [("gh_echo", "server:gh"), ("gh_leak", "server:gh")],
        "{ctx}"
    );
    // What the model got back: the echo, and the credentials masked.
    let sent: String = fake.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(sent.contains("through the run"), "{ctx}");
    assert!(sent.contains("[masked: header Authorization]"), "{sent}");
    // Pinned on first use in the workflow's lock file.
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(step.base.join("wf.lock.json"))
            .unwrap_or_else(|e| panic!("no lock file: {e}\n{ctx}")),
    )
    .unwrap();
    assert!(lock["servers"]["gh"]["echo"].is_object(), "{lock:#}");
    let spans = receiver.spans();
    assert!(
        spans.iter().any(|s| s.name == "tools/call gh_echo"
            && attr(s, "awf.mcp.server").as_deref() == Some("gh")),
        "{spans:#?}"
    );
    let audit_text: String = run.audit.iter().map(Value::to_string).collect();
    for (what, text) in [
        ("the model's requests", sent),
        ("the run's log", run.stderr.clone()),
        ("the summary", run.summary.to_string()),
        ("the audit", audit_text),
        ("the spans", format!("{spans:?}")),
    ] {
        assert!(!text.contains(TOKEN), "the token is in {what}: {text}");
    }
    assert!(
        remote
            .requests()
            .iter()
            .filter(|r| r["http"] == "POST")
            .all(|r| r["authorized"] == true),
        "{:#?}",
        remote.requests()
    );
}

#[test]
fn claude_code_calls_a_modern_remote_server_through_awf_run() {
    through_a_run("claude", "modern");
}

#[test]
fn openai_compatible_calls_a_legacy_remote_server_through_awf_run() {
    through_a_run("openai_compatible", "legacy");
}
