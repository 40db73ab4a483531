//! The model relay with the real agent CLIs against the test model: the CLI gets a
//! placeholder key that only the relay takes (a wrong one gets 401), the model gets the
//! real key, and the real key is nowhere in the CLI's environment, arguments or files;
//! every model turn is a `chat <model>` span under its step's span with the tokens the
//! model reported, and a `model.request` + `model.response` pair in the step's audit; a
//! step's `budget` ends it with EXECUTION.BUDGET once spent.

use crate::common;
use crate::fake_model;
use crate::harness;
use crate::otlp_receiver;

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

/// An `awf run` whose one agent step holds its route through the relay open: the step's
/// "CLI" is a script that notes the base URL and placeholder key it is given, then waits
/// until the test is done with the route. The test then speaks to the relay itself, as a
/// hostile or a busy agent would, while awf (the process hosting the relay) runs.
struct HeldStep {
    child: std::process::Child,
    step: Step,
    base_url: String,
    key: String,
}

impl HeldStep {
    fn start(name: &str, upstream: &str, state_extra: &str) -> HeldStep {
        use std::os::unix::fs::PermissionsExt;
        let step = Step::new(name);
        let notes = step.base.join("route");
        let go = step.base.join("go");
        let cli = step.base.join("held-cli.sh");
        std::fs::write(
            &cli,
            format!(
                "#!/bin/sh\nprintf '%s\\n%s\\n' \"$ANTHROPIC_BASE_URL\" \"$ANTHROPIC_API_KEY\" > {notes}.tmp\n\
                 mv {notes}.tmp {notes}\ni=0\n\
                 while [ ! -e {go} ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done\n",
                notes = notes.display(),
                go = go.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        let options = json!({"api_key_env": "AWF_TEST_FAKE_KEY", "model": "claude-sonnet-4-5",
                             "base_url": upstream, "command": cli});
        let wf = step.base.join("wf.yaml");
        std::fs::write(
            &wf,
            format!(
                "\
name: relay-held
states:
  initial: work
  work:
    type: agent
    provider: claude
    prompt: hold the route
    timeout: 300s
    options: {options}
    mcp_proxy: {{enable: true}}
    {state_extra}
    on_success: done
    on_failure: done
  done:
    type: terminal
    status: success
"
            ),
        )
        .unwrap();
        let audit_dir = step.base.join("run-audit");
        let child = common::awf_run(&step.root, &wf)
            .arg("--audit-dir")
            .arg(&audit_dir)
            .env("TMPDIR", fake_model::private_tmp(&audit_dir))
            .env("HOME", &step.home)
            .env("XDG_STATE_HOME", step.home.join(".local/state"))
            .env("AWF_TEST_FAKE_KEY", KEY)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn awf run");
        let mut held = HeldStep {
            child,
            step,
            base_url: String::new(),
            key: String::new(),
        };
        let started = std::time::Instant::now();
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&notes) {
                break t;
            }
            if let Ok(Some(status)) = held.child.try_wait() {
                panic!("awf run ended ({status}) before the step got its route");
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(120),
                "the step never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut lines = text.lines();
        held.base_url = lines.next().unwrap_or_default().to_string();
        held.key = lines.next().unwrap_or_default().to_string();
        assert!(
            held.base_url.contains("/s/") && held.key.starts_with("awf-relay-"),
            "{text}"
        );
        held
    }

    /// `host:port` of the relay.
    fn relay_addr(&self) -> String {
        let rest = self.base_url.trim_start_matches("http://");
        rest.split('/').next().unwrap().to_string()
    }

    /// A field of /proc/<awf>/status, in its unit (kB for memory).
    fn proc_status(&self, field: &str) -> u64 {
        proc_status(self.child.id(), field)
    }

    /// Lets the step end; returns awf's audit records.
    fn finish(mut self) -> Vec<Value> {
        std::fs::write(self.step.base.join("go"), "").unwrap();
        let out = std::mem::replace(
            &mut self.child,
            std::process::Command::new("true").spawn().unwrap(),
        )
        .wait_with_output()
        .unwrap();
        let _ = self.child.wait();
        assert!(
            !out.stdout.is_empty(),
            "awf run printed nothing\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut audit = Vec::new();
        for e in std::fs::read_dir(self.step.base.join("run-audit"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(e.path()).unwrap();
            audit.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        }
        audit
    }
}

impl Drop for HeldStep {
    fn drop(&mut self) {
        // A failed test still lets the step end, so awf and its CLI do not outlive it.
        let _ = std::fs::write(self.step.base.join("go"), "");
        let _ = self.child.wait();
    }
}

fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// What the relay answered one request: its status and body (empty when it answered none).
struct Answer {
    status: u16,
    body: String,
}

/// Sends a request with a body of `len` bytes (`body`, then spaces) and reads the answer
/// at the same time, so an answer that comes before the body is all sent is seen.
fn send(addr: &str, target: &str, key: &str, body: &[u8], len: usize) -> Answer {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let mut reading = conn.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let _ = reading.read_to_end(&mut got);
        got
    });
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: {addr}\r\nx-api-key: {key}\r\n\
         anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
         Content-Length: {len}\r\n\r\n"
    );
    let _ = conn.write_all(head.as_bytes()).and_then(|_| {
        conn.write_all(&body[..body.len().min(len)])?;
        let pad = vec![b' '; 1 << 20];
        let mut left = len.saturating_sub(body.len());
        while left > 0 {
            let n = left.min(pad.len());
            conn.write_all(&pad[..n])?;
            left -= n;
        }
        Ok(())
    });
    let got = reader.join().unwrap();
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Answer { status, body }
}

/// The path of a step's route (`/s/<id>`) in its base URL.
fn route_of(base_url: &str) -> String {
    let rest = base_url.trim_start_matches("http://");
    rest[rest.find('/').unwrap()..].to_string()
}

const MIB: usize = 1 << 20;

#[test]
fn unknown_routes_and_wrong_keys_are_refused_from_the_head_without_holding_their_bodies() {
    let fake = FakeModel::start(Script::new());
    let held = HeldStep::start("relay-flood", &fake.base_url(), "");
    let addr = held.relay_addr();
    let route = route_of(&held.base_url);
    let before = held.proc_status("VmHWM");
    // 8 agents at once, each sending 60 MiB: 4 to a route no step has, 4 with a wrong key.
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let addr = addr.clone();
            let target = if i % 2 == 0 {
                "/s/0123456789abcdef0123456789abcdef/v1/messages".to_string()
            } else {
                format!("{route}/v1/messages")
            };
            std::thread::spawn(move || {
                let a = send(
                    &addr,
                    &target,
                    "awf-relay-wrong",
                    b"{\"model\":\"m\"}",
                    60 * MIB,
                );
                (i, a)
            })
        })
        .collect();
    for c in clients {
        let (i, a) = c.join().unwrap();
        let want = if i % 2 == 0 { 404 } else { 401 };
        assert_eq!(a.status, want, "client {i}: {}", a.body);
        if want == 401 {
            let e: Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(e["error"]["type"], "authentication_error", "{e}");
        }
    }
    let flood_growth = held.proc_status("VmHWM").saturating_sub(before);
    eprintln!("peak memory growth under the flood: {flood_growth} kB");
    assert!(
        flood_growth < 48 * 1024,
        "8 refused 60 MiB requests grew awf's peak memory by {flood_growth} kB"
    );

    // A body over what a model endpoint takes is refused from its Content-Length.
    let over = send(
        &addr,
        &format!("{route}/v1/messages"),
        &held.key,
        b"{}",
        40 * MIB,
    );
    assert_eq!(over.status, 413, "{}", over.body);
    assert!(over.body.contains("32 MiB"), "{}", over.body);

    // A big legitimate body streams through: the model gets it whole, awf does not hold it.
    let before = held.proc_status("VmHWM");
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let big = send(
        &addr,
        &format!("{route}/v1/messages"),
        &held.key,
        body,
        24 * MIB,
    );
    assert_eq!(big.status, 200, "{}", big.body);
    let stream_growth = held.proc_status("VmHWM").saturating_sub(before);
    let audit = held.finish();
    eprintln!("peak memory growth through a streamed 24 MiB body: {stream_growth} kB");
    assert!(
        stream_growth < 16 * 1024,
        "a 24 MiB request grew awf's peak memory by {stream_growth} kB"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{}", fake.describe());
    let request = audit
        .iter()
        .find(|r| r["type"] == "model.request")
        .expect("a model.request record");
    assert_eq!(request["request_bytes"], 24 * MIB as u64, "{request}");
    assert_eq!(request["model"], "claude-sonnet-4-5", "{request}");
}

/// A slow way to the test model: each connection is passed on after `delay`, so requests
/// the relay lets through are all in flight together. Returns its base URL.
fn slow_front(model_port: u16, delay: std::time::Duration) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                let Ok(model) = std::net::TcpStream::connect(("127.0.0.1", model_port)) else {
                    return;
                };
                let (mut up_in, mut up_out) =
                    (conn.try_clone().unwrap(), model.try_clone().unwrap());
                let up = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up_in, &mut up_out);
                });
                let (mut down_in, mut down_out) = (model, conn);
                let _ = std::io::copy(&mut down_in, &mut down_out);
                let _ = down_out.shutdown(std::net::Shutdown::Both);
                let _ = up.join();
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn a_request_budget_holds_however_many_requests_arrive_at_once() {
    let fake = FakeModel::start(Script::new());
    let upstream = slow_front(fake.port(), std::time::Duration::from_secs(1));
    let held = HeldStep::start("relay-budget-race", &upstream, "budget: {requests: 3}");
    let addr = held.relay_addr();
    let target = format!("{}/v1/messages", route_of(&held.base_url));
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (addr, target, key) = (addr.clone(), target.clone(), held.key.clone());
            std::thread::spawn(move || send(&addr, &target, &key, body, body.len()))
        })
        .collect();
    let answers: Vec<Answer> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    held.finish();
    let passed = answers.iter().filter(|a| a.status == 200).count();
    let refused: Vec<&Answer> = answers.iter().filter(|a| a.status == 400).collect();
    assert_eq!(fake.requests().len(), 3, "{}", fake.describe());
    assert_eq!((passed, refused.len()), (3, 7));
    for a in refused {
        let e: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(e["type"], "error", "{e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("budget is spent (requests: 3)"),
            "{e}"
        );
    }
}

#[test]
fn with_a_budget_only_listed_paths_reach_the_model_and_without_one_unlisted_paths_are_audited() {
    let fake = FakeModel::start(Script::new());
    let held = HeldStep::start("relay-unlisted", &fake.base_url(), "budget: {requests: 1}");
    let (addr, route) = (held.relay_addr(), route_of(&held.base_url));
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let ask = |path: &str| {
        send(
            &addr,
            &format!("{route}{path}"),
            &held.key,
            body,
            body.len(),
        )
    };
    assert_eq!(ask("/v1/messages").status, 200);
    assert_eq!(ask("/v1/messages").status, 400, "the budget is spent");
    for path in [
        "/v1/messages/batches",
        "/v1/complete",
        "/v1/files",
        "/v2/anything",
    ] {
        let a = ask(path);
        assert_eq!(a.status, 403, "{path}: {}", a.body);
        let e: Value = serde_json::from_str(&a.body).unwrap();
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("POST {path} is not a path")) && message.contains("budget"),
            "{message}"
        );
    }
    // Counting tokens costs nothing: it passes a spent budget.
    assert_eq!(ask("/v1/messages/count_tokens").status, 200);
    let audit = held.finish();
    let reached: Vec<String> = fake.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(reached, ["/v1/messages", "/v1/messages/count_tokens"]);
    let refused: Vec<&Value> = audit
        .iter()
        .filter(|r| r["type"] == "model.refused")
        .collect();
    assert_eq!(refused.len(), 4, "{audit:#?}");
    assert_eq!(refused[0]["path"], "/v1/messages/batches");

    // No budget: an unlisted path passes, and the audit says so.
    let fake = FakeModel::start(Script::new());
    let held = HeldStep::start("relay-unlisted-free", &fake.base_url(), "");
    let (addr, route) = (held.relay_addr(), route_of(&held.base_url));
    let a = send(
        &addr,
        &format!("{route}/v1/complete"),
        &held.key,
        body,
        body.len(),
    );
    assert_ne!(a.status, 403, "{}", a.body);
    let audit = held.finish();
    assert_eq!(fake.requests().len(), 1, "{}", fake.describe());
    assert!(
        audit
            .iter()
            .any(|r| r["type"] == "model.unlisted" && r["path"] == "/v1/complete"),
        "{audit:#?}"
    );
}

#[test]
fn a_slow_head_is_closed_at_its_deadline_and_a_flood_of_connections_makes_no_threads() {
    use std::io::{Read, Write};
    let fake = FakeModel::start(Script::new());
    let held = HeldStep::start("relay-slowloris", &fake.base_url(), "");
    let addr = held.relay_addr();
    let threads_before = held.proc_status("Threads");

    // 1,100 connections that send nothing, all open at once.
    let flood: Vec<std::net::TcpStream> = (0..1100)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    // Then a head sent one byte a second: the relay must close it (at its 10 s deadline for the
    // whole head); the wait here is only there to end the test if it never does.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut conn = std::net::TcpStream::connect(&addr).unwrap();
            let mut reading = conn.try_clone().unwrap();
            reading
                .set_read_timeout(Some(std::time::Duration::from_secs(90)))
                .unwrap();
            let dribble = std::thread::spawn(move || {
                for b in b"POST /s/0123/v1/messages HTTP/1.1\r\nHost: x\r\nX-Pad: "
                    .iter()
                    .cycle()
                {
                    if conn.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            });
            let mut got = Vec::new();
            let end = reading.read_to_end(&mut got);
            drop(reading);
            let _ = dribble.join();
            (
                end.map_err(|e| e.kind()),
                String::from_utf8_lossy(&got).into_owned(),
            )
        })
    };

    // Meanwhile the step's own agent is still answered.
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let target = format!("{}/v1/messages", route_of(&held.base_url));
    let answer = send(&addr, &target, &held.key, body, body.len());
    let threads_during = held.proc_status("Threads");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        threads_during < threads_before + 32 + 16,
        "awf went from {threads_before} to {threads_during} threads under a flood of 1,100 connections"
    );
    drop(flood);

    let (end, got) = slow.join().unwrap();
    let closed = matches!(
        end,
        Ok(_) | Err(std::io::ErrorKind::ConnectionReset) | Err(std::io::ErrorKind::BrokenPipe)
    );
    assert!(
        closed,
        "the slow head was still open after 90 s: {end:?} {got}"
    );
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 408"), "{got}");
    held.finish();
}
