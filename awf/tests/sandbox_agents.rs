//! The sandbox seen by a real agent CLI through `awf run`: the agent's Bash gets a clean
//! environment, so neither the model key nor a secret exported to `awf run` reaches the
//! model in a Bash result.

#[path = "fake_model/mod.rs"]
mod fake_model;
#[path = "fake_model/agent_harness.rs"]
mod harness;

use fake_model::{FakeModel, Script};
use harness::*;
use serde_json::{Value, json};

const KEY: &str = "fake-key-for-the-fake-model";
const PLANTED: &str = "planted-secret-value-7q3";
/// The shell computes the marker, so it appears only in the Bash result, not in the call.
const ENV_COMMAND: &str = "echo ENV-BEGIN-$((6*7)); env; echo ENV-END";

/// Per CLI: its options with the base URL in the form it takes.
fn options(cli: &str, program: &std::path::Path, fake: &FakeModel) -> Value {
    let base = fake.base_url();
    let (model, url) = match cli {
        "claude" => ("claude-sonnet-4-5", base),
        "gemini" => ("gemini-2.5-flash", base),
        "codex" => ("gpt-5-codex", format!("{base}/v1")),
        "opencode" => ("fake-model", format!("{base}/v1")),
        other => panic!("no case for {other}"),
    };
    json!({"command": program, "api_key_env": "AWF_TEST_FAKE_KEY", "model": model, "base_url": url})
}

fn no_secret_in_bash(cli: &str) {
    let Some(program) = agent_cli(cli) else {
        return;
    };
    let fake = FakeModel::start(Script::new().call("Bash", json!({"command": ENV_COMMAND})));
    let step = Step::new(&format!("sandbox-env-{cli}"));
    let opts = options(cli, &program, &fake);
    let run = run_workflow(
        &step,
        cli,
        &opts,
        "{enable: true}",
        None,
        &[("AWF_PLANTED_SECRET_TOKEN", PLANTED.to_string())],
    );
    let seen: String = fake
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
    assert!(
        seen.contains("ENV-BEGIN-42") && seen.contains("PATH="),
        "{cli}: the Bash result never reached the model\n{ctx}"
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
