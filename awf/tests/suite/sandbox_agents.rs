//! The sandbox seen by a real agent CLI through `awf run`: the agent's Bash gets a clean
//! environment, so neither the model key nor a secret exported to `awf run` reaches the
//! model in a Bash result, while what `env_passthrough` names does, under every CLI; and
//! with a host list (`network: {allow: [...]}`) Bash is pointed at the egress proxy while
//! the CLI itself, outside Bash's network namespace, still reaches its model.

use crate::fake_model;
use crate::harness;

use fake_model::{FakeModel, Script};
use harness::*;
use serde_json::json;

const KEY: &str = "fake-key-for-the-fake-model";
const PLANTED: &str = "planted-secret-value-7q3";
/// The shell computes the marker, so it appears only in the Bash result, not in the call.
const ENV_COMMAND: &str = "echo ENV-BEGIN-$((6*7)); env; echo ENV-END";

/// Every request body the model received (tool results included), and the context a
/// failed assertion prints.
fn what_the_model_saw(fake: &FakeModel, run: &WorkflowRun) -> (String, String) {
    let seen = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let ctx = format!(
        "status {}\n--- stderr ---\n{}\n--- fake model ---\n{}",
        run.status,
        run.stderr,
        fake.describe()
    );
    (seen, ctx)
}

fn no_secret_in_bash(cli: &str) {
    let Some(program) = agent_cli(cli) else {
        return;
    };
    let fake = FakeModel::start(Script::new().call("Bash", json!({"command": ENV_COMMAND})));
    let step = Step::new(&format!("sandbox-env-{cli}"));
    let opts = model_options(cli, Some(&program), &fake);
    let run = run_workflow(
        &step,
        cli,
        &opts,
        "{enable: true, sandbox: {env_passthrough: [\"AWF_WF_PASS_*\"], \
         network: {allow: [crates.io]}}}",
        None,
        &[
            ("AWF_PLANTED_SECRET_TOKEN", PLANTED.to_string()),
            ("AWF_WF_PASS_B", "wf-pass-value-3".to_string()),
        ],
    );
    let (seen, ctx) = what_the_model_saw(&fake, &run);
    assert!(
        seen.contains("ENV-BEGIN-42") && seen.contains("PATH="),
        "{cli}: the Bash result never reached the model\n{ctx}"
    );
    // Under a host list Bash's one way out is the proxy; the CLI, outside Bash's network
    // namespace, still reached its model.
    assert!(
        seen.contains("HTTPS_PROXY=http://127.0.0.1:3128"),
        "{cli}: Bash was not pointed at the egress proxy\n{ctx}"
    );
    // Every CLI the same way (codex starts its MCP servers with an environment of its own).
    assert!(
        seen.contains("AWF_WF_PASS_B=wf-pass-value-3"),
        "{cli}: env_passthrough did not reach Bash\n{ctx}"
    );
    assert!(
        !seen.contains(KEY),
        "{cli}: the model key reached the model\n{ctx}"
    );
    assert!(
        !seen.contains(PLANTED),
        "{cli}: a secret of awf run's environment reached the model\n{ctx}"
    );
}

#[test]
fn claude_bash_sees_no_secret() {
    no_secret_in_bash("claude");
}

#[test]
fn gemini_bash_sees_no_secret() {
    no_secret_in_bash("gemini");
}

#[test]
fn codex_bash_sees_no_secret() {
    no_secret_in_bash("codex");
}

#[test]
fn opencode_bash_sees_no_secret() {
    no_secret_in_bash("opencode");
}

/// A path under the shared temp dir that nothing has created.
fn fresh_shared_tmp_path(tag: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!(
        "/tmp/awf-it-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

/// claude through `awf run` with a `sandbox:` block: the listed writable path (created by
/// awf) takes a write; an unlisted directory, HOME and the shared /tmp do not; a TCP
/// connect is refused; `env` and `env_passthrough` reach Bash, an unnamed token does not.
#[test]
fn claude_bash_follows_the_workflow_sandbox() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let step = Step::new("sandbox-block-claude");
    let cache = step.base.join("cache/not-yet");
    let elsewhere = step.base.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let shared = fresh_shared_tmp_path("sandbox-block");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!(
        "env; echo w > {c}/f; echo e > {e}/f; echo h > \"$HOME/f\"; echo t > {s}; \
         (exec 3<>/dev/tcp/127.0.0.1/{port} && echo sent >&3); true",
        c = cache.display(),
        e = elsewhere.display(),
        s = shared.display()
    );
    let fake = FakeModel::start(Script::new().call("Bash", json!({"command": command})));
    let opts = model_options("claude", Some(&program), &fake);
    let proxy = format!(
        "{{enable: true, sandbox: {{writable: [\"{}\"], network: deny, \
         env: {{AWF_WF_SET: wf-set-value-1}}, env_passthrough: [\"AWF_WF_PASS_*\"]}}}}",
        cache.display()
    );
    let run = run_workflow(
        &step,
        "claude",
        &opts,
        &proxy,
        None,
        &[
            ("AWF_WF_PASS_A", "wf-pass-value-2".to_string()),
            ("AWF_PLANTED_SECRET_TOKEN", PLANTED.to_string()),
        ],
    );
    let (seen, ctx) = what_the_model_saw(&fake, &run);
    assert!(run.status.success(), "{ctx}");
    assert!(
        seen.contains("PATH="),
        "the Bash result never reached the model\n{ctx}"
    );
    assert!(seen.contains("AWF_WF_SET=wf-set-value-1"), "{ctx}");
    assert!(seen.contains("AWF_WF_PASS_A=wf-pass-value-2"), "{ctx}");
    assert!(!seen.contains(PLANTED) && !seen.contains(KEY), "{ctx}");
    assert_eq!(
        std::fs::read_to_string(cache.join("f")).ok().as_deref(),
        Some("w\n"),
        "the writable path did not take the write\n{ctx}"
    );
    assert!(!elsewhere.join("f").exists(), "{ctx}");
    assert!(!step.home.join("f").exists(), "HOME was written\n{ctx}");
    assert!(!shared.exists(), "the shared /tmp was written\n{ctx}");
    assert!(
        listener.accept().is_err(),
        "Bash reached the TCP listener\n{ctx}"
    );
}

/// `landlock: false` in the workflow: a WARN from `awf run`, and Bash writes the shared
/// /tmp.
#[test]
fn claude_with_landlock_off_writes_tmp_and_awf_warns() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let step = Step::new("sandbox-off-claude");
    let shared = fresh_shared_tmp_path("sandbox-off");
    let fake = FakeModel::start(Script::new().call(
        "Bash",
        json!({"command": format!("echo t > {}", shared.display())}),
    ));
    let opts = model_options("claude", Some(&program), &fake);
    let run = run_workflow(
        &step,
        "claude",
        &opts,
        "{enable: true, sandbox: {landlock: false}}",
        None,
        &[],
    );
    let written = std::fs::read_to_string(&shared).ok();
    let _ = std::fs::remove_file(&shared);
    let ctx = format!(
        "status {}\n--- stderr ---\n{}\n--- fake model ---\n{}",
        run.status,
        run.stderr,
        fake.describe()
    );
    assert!(run.status.success(), "{ctx}");
    assert_eq!(written.as_deref(), Some("t\n"), "{ctx}");
    assert!(
        run.stderr.contains("WARN") && run.stderr.contains("sandbox.landlock is false"),
        "{ctx}"
    );
}
