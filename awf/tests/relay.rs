//! The model relay with the real agent CLIs against the test model: the CLI gets a
//! placeholder key that only the relay takes (a wrong one gets 401), the model gets the
//! real key, and the real key is nowhere in the CLI's environment, arguments or files;
//! every model turn is a `chat <model>` span under its step's span with the tokens the
//! model reported, and a `model.request` + `model.response` pair in the step's audit; a
//! step's `budget` ends it with EXECUTION.BUDGET once spent.

#[path = "fake_model/mod.rs"]
mod fake_model;
#[path = "fake_model/agent_harness.rs"]
mod harness;
mod otlp_receiver;

use fake_model::{FakeModel, Script};
use harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const KEY: &str = "fake-key-for-the-fake-model";

/// A stand-in for the CLI's executable that notes what the CLI is given (its environment
/// and arguments), tries the relay with a wrong key, runs the real CLI, and then looks for
/// the key in every file of the run's private directory (where the CLI's config and state
/// dirs are) before awf removes it.
fn witness(dir: &Path, program: &Path, state_home: &Path) -> PathBuf {
    let script = dir.join("witness.sh");
    let notes = dir.join("notes");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
notes={notes}
env > "$notes.env"
printf '%s\n' "$@" > "$notes.args"
base="${{ANTHROPIC_BASE_URL:-${{GOOGLE_GEMINI_BASE_URL:-}}}}"
if [ -z "$base" ]; then
  base=$( (printf '%s\n' "$@"; cat "${{OPENCODE_CONFIG:-/dev/null}}") | grep -o 'http://127.0.0.1:[0-9]*/s/[0-9a-f]*' | head -n 1)
fi
curl -s -o /dev/null -w '%{{http_code}}' -H 'x-api-key: wrong' -H 'authorization: Bearer wrong' \
  -H 'content-type: application/json' -d '{{"model":"m","messages":[]}}' \
  "$base/v1/messages" > "$notes.wrong"
{program} "$@"
status=$?
grep -rl -- '{KEY}' {runs} > "$notes.files" 2>/dev/null
exit $status
"#,
            notes = notes.display(),
            program = program.display(),
            runs = state_home.join("awf/runs").display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn note(dir: &Path, kind: &str) -> String {
    std::fs::read_to_string(dir.join(format!("notes.{kind}"))).unwrap_or_default()
}

/// The header that carried the key to the model, per provider.
fn key_sent(r: &fake_model::Recorded) -> Option<String> {
    r.headers
        .get("x-api-key")
        .cloned()
        .or_else(|| {
            r.headers
                .get("authorization")
                .map(|v| v.trim_start_matches("Bearer ").to_string())
        })
        .or_else(|| r.headers.get("x-goog-api-key").cloned())
}

fn key_stays_with_awf(cli: &str) {
    let Some(program) = agent_cli(cli) else {
        return;
    };
    let receiver = otlp_receiver::Receiver::start();
    let fake = FakeModel::start(Script::new().call("Read", json!({"path": "docs/fixture.txt"})));
    let step = Step::new(&format!("relay-{cli}"));
    let wrapper = witness(&step.base, &program, &step.home.join(".local/state"));
    let opts = model_options(cli, Some(&wrapper), &fake);
    let run = run_workflow(
        &step,
        cli,
        &opts,
        "{enable: true}",
        None,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone())],
    );
    let ctx = format!(
        "status {}\n--- stderr ---\n{}\n--- fake model ---\n{}",
        run.status,
        run.stderr,
        fake.describe()
    );
    assert!(run.status.success(), "{cli}: {ctx}");
    // The model got the real key on every request.
    let requests = fake.requests();
    assert!(!requests.is_empty(), "{cli}: {ctx}");
    for r in &requests {
        assert_eq!(
            key_sent(r).as_deref(),
            Some(KEY),
            "{cli}: {} {}",
            r.method,
            r.path
        );
    }
    // The CLI had only the placeholder: not in its environment, its arguments, its files.
    let env = note(&step.base, "env");
    assert!(
        env.contains("awf-relay-"),
        "{cli}: no placeholder in\n{env}"
    );
    assert!(
        !env.contains(KEY),
        "{cli}: the key is in the CLI's environment"
    );
    assert!(
        !note(&step.base, "args").contains(KEY),
        "{cli}: the key is in its arguments"
    );
    assert_eq!(note(&step.base, "files"), "", "{cli}: files hold the key");
    assert_eq!(
        note(&step.base, "wrong"),
        "401",
        "{cli}: a wrong key was not refused"
    );

    // Every model turn: a span under the step's, with the tokens the model reported.
    let spans = receiver.spans();
    let step_span = spans
        .iter()
        .find(|s| s.name == "awf.step work")
        .unwrap_or_else(|| panic!("{cli}: no step span"));
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .collect();
    let main_turns = fake.main_requests().len();
    assert!(
        chats.len() >= main_turns && main_turns >= 2,
        "{cli}: {chats:#?}"
    );
    for c in &chats {
        assert_eq!(c.parent_span_id, step_span.span_id, "{cli}");
        assert_eq!(
            otlp_receiver::attr(c, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
    }
    let with_tokens = chats
        .iter()
        .filter(|c| otlp_receiver::attr(c, "gen_ai.usage.input_tokens").as_deref() == Some("11"))
        .count();
    assert!(with_tokens >= main_turns, "{cli}: {chats:#?}");
    let model = &run.state("work")["model"];
    assert_eq!(
        model["requests"].as_u64(),
        Some(chats.len() as u64),
        "{cli}: {model}"
    );
    assert!(
        model["input_tokens"].as_u64().unwrap() >= 11 * main_turns as u64,
        "{model}"
    );

    // The audit tells the whole loop.
    let kinds: Vec<&str> = run
        .audit
        .iter()
        .filter_map(|r| r["type"].as_str())
        .collect();
    let requests_n = kinds.iter().filter(|k| **k == "model.request").count();
    let responses: Vec<&Value> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "model.response")
        .collect();
    assert_eq!(requests_n, chats.len(), "{cli}: {kinds:?}");
    assert_eq!(responses.len(), chats.len(), "{cli}: {kinds:?}");
    assert!(
        responses
            .iter()
            .any(|r| r["input_tokens"] == 11 && r["status"] == 200),
        "{cli}: {responses:#?}"
    );
    assert!(
        !run.audit.iter().any(|r| r.to_string().contains(KEY)),
        "{cli}"
    );
}

#[test]
fn claude_holds_a_placeholder_and_its_model_turns_are_seen() {
    key_stays_with_awf("claude");
}

#[test]
fn codex_holds_a_placeholder_and_its_model_turns_are_seen() {
    key_stays_with_awf("codex");
}

#[test]
fn gemini_holds_a_placeholder_and_its_model_turns_are_seen() {
    key_stays_with_awf("gemini");
}

#[test]
fn opencode_holds_a_placeholder_and_its_model_turns_are_seen() {
    key_stays_with_awf("opencode");
}

#[test]
fn a_spent_request_budget_ends_the_step_with_execution_budget() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(Script::new().call("Read", json!({"path": "docs/fixture.txt"})));
    let step = Step::new("relay-budget");
    let mut opts = model_options("claude", Some(&program), &fake);
    opts["relay"] = json!(true);
    let run = run_workflow_with(&step, "claude", &opts, "budget: {requests: 1}", &[]);
    let work = run.state("work");
    assert_eq!(work["status"], "failure", "{work:#}\n{}", run.stderr);
    assert_eq!(work["error"]["code"], "EXECUTION.BUDGET", "{work:#}");
    assert_eq!(work["model"]["requests"], 1, "{work:#}");
    assert_eq!(work["model"]["budget_exhausted"], "requests", "{work:#}");
    // The model saw the one request the budget allowed.
    assert_eq!(fake.main_requests().len(), 1, "{}", fake.describe());
}

#[test]
fn openai_compatible_goes_through_the_relay_with_its_key_spans_and_budget() {
    let receiver = otlp_receiver::Receiver::start();
    let fake = FakeModel::start(Script::new().call("Read", json!({"path": "docs/fixture.txt"})));
    let step = Step::new("relay-openai");
    let opts = model_options("openai_compatible", None, &fake);
    let run = run_workflow(
        &step,
        "openai_compatible",
        &opts,
        "{enable: true}",
        None,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone())],
    );
    assert!(run.status.success(), "{}\n{}", run.stderr, fake.describe());
    for r in &fake.requests() {
        assert_eq!(key_sent(r).as_deref(), Some(KEY), "{} {}", r.method, r.path);
    }
    let spans = receiver.spans();
    let step_span = spans.iter().find(|s| s.name == "awf.step work").unwrap();
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "chat fake-model")
        .collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for c in &chats {
        assert_eq!(c.parent_span_id, step_span.span_id);
        assert_eq!(
            otlp_receiver::attr(c, "gen_ai.usage.output_tokens").as_deref(),
            Some("7")
        );
    }
    assert_eq!(run.state("work")["model"]["requests"], 2);
    // No prompt or answer on a span unless asked.
    for c in &chats {
        assert_eq!(otlp_receiver::attr(c, "gen_ai.input.messages"), None);
        assert_eq!(otlp_receiver::attr(c, "gen_ai.output.messages"), None);
    }

    // Asked: both, on each turn.
    let receiver = otlp_receiver::Receiver::start();
    let step = Step::new("relay-openai-content");
    let run = run_workflow_with(
        &step,
        "openai_compatible",
        &opts,
        "telemetry: {model_content: true}",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone())],
    );
    assert!(run.status.success(), "{}", run.stderr);
    let spans = receiver.spans();
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "chat fake-model")
        .collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let input = otlp_receiver::attr(chats[0], "gen_ai.input.messages").unwrap();
    assert!(input.contains("Read docs/fixture.txt"), "{input}");
    assert!(otlp_receiver::attr(chats[0], "gen_ai.output.messages").is_some());

    let step = Step::new("relay-openai-budget");
    let run = run_workflow_with(
        &step,
        "openai_compatible",
        &opts,
        "budget: {tokens: 10}",
        &[],
    );
    let work = run.state("work");
    assert_eq!(work["error"]["code"], "EXECUTION.BUDGET", "{work:#}");
    assert_eq!(work["model"]["budget_exhausted"], "tokens", "{work:#}");
    assert_eq!(work["model"]["requests"], 1, "{work:#}");
}

/// A TLS endpoint in front of the test model: a certificate for `localhost` signed by a
/// fresh test CA (written to `ca_pem`), terminating TLS and passing the bytes on.
/// Returns its port and how many connections it accepted.
fn tls_front(
    model_port: u16,
    ca_pem: &Path,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(ca_pem, ca.pem()).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let config = config.clone();
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut tls =
                    rustls::StreamOwned::new(rustls::ServerConnection::new(config).unwrap(), conn);
                let mut plain = std::net::TcpStream::connect(("127.0.0.1", model_port)).unwrap();
                // The test model answers one request per connection and closes: read the
                // request up to its body, pass it on, then pass the answer back.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                let mut body = vec![0u8; len];
                if tls.read_exact(&mut body).is_err() {
                    return;
                }
                plain.write_all(&head).unwrap();
                plain.write_all(&body).unwrap();
                let mut answer = Vec::new();
                let _ = plain.read_to_end(&mut answer);
                let _ = tls.write_all(&answer);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    (port, accepted)
}

#[test]
fn the_relay_reaches_an_https_endpoint_of_a_private_ca_named_by_ssl_cert_file() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(Script::new().call("Read", json!({"path": "docs/fixture.txt"})));
    let step = Step::new("relay-tls");
    let ca = step.base.join("test-ca.pem");
    let (port, accepted) = tls_front(fake.port(), &ca);
    let mut opts = model_options("claude", Some(&program), &fake);
    opts["base_url"] = json!(format!("https://localhost:{port}"));
    let run = run_workflow(
        &step,
        "claude",
        &opts,
        "{enable: true}",
        None,
        &[("SSL_CERT_FILE", ca.display().to_string())],
    );
    assert!(run.status.success(), "{}\n{}", run.stderr, fake.describe());
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    assert!(fake.main_requests().len() >= 2, "{}", fake.describe());
    for r in &fake.requests() {
        assert_eq!(key_sent(r).as_deref(), Some(KEY), "{} {}", r.method, r.path);
    }
}

#[test]
fn relay_false_hands_the_cli_the_key_itself_with_a_warning() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(Script::new().call("Read", json!({"path": "docs/fixture.txt"})));
    let step = Step::new("relay-off");
    let wrapper = witness(&step.base, &program, &step.home.join(".local/state"));
    let mut opts = model_options("claude", Some(&wrapper), &fake);
    opts["relay"] = json!(false);
    let run = run_workflow(&step, "claude", &opts, "{enable: true}", None, &[]);
    assert!(run.status.success(), "{}\n{}", run.stderr, fake.describe());
    let env = note(&step.base, "env");
    assert!(env.contains(&format!("ANTHROPIC_API_KEY={KEY}")), "{env}");
    assert!(!env.contains("awf-relay-"), "{env}");
    assert!(
        run.stderr.contains("WARN") && run.stderr.contains("options.relay is false"),
        "{}",
        run.stderr
    );
    assert!(run.state("work")["model"].is_null());
    assert!(!run.audit.iter().any(|r| r["type"] == "model.request"));
}
