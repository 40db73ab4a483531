//! OpenCode (the pinned CLI) with the `opencode` provider's injection (OPENCODE_CONFIG),
//! against the fake model (Chat Completions through @ai-sdk/openai-compatible) and a real
//! `awf mcp-serve`: the model reads, greps and edits through our tools only.

use crate::fake_model;
use crate::harness;

use awf::providers::opencode::OpenCode;
use fake_model::FakeModel;
use harness::*;
use serde_json::json;

#[test]
fn opencode_reads_greps_and_edits_through_awf_only() {
    let Some(cli) = agent_cli("opencode") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("opencode");
    let run = run_cli(
        &OpenCode,
        &cli,
        &step,
        json!({"model": "fake-model", "base_url": format!("{}/v1", fake.base_url())}),
        &step.injection(true),
        &[],
    );
    assert_read_grep_edit(&step, &fake, &run, "awf_");
    assert_installed_nothing(&step);
    let offered = fake.offered_tools();
    eprintln!("opencode offered: {offered:?}");
    let beyond = offered_beyond_awf(&fake, "awf_");
    assert!(
        beyond.is_empty(),
        "offered beyond awf: {beyond:?}\n{}",
        run.context(&fake)
    );
}

#[test]
fn opencode_without_interception_offers_its_own_tools_beside_awf() {
    let Some(cli) = agent_cli("opencode") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("opencode-both");
    let run = run_cli(
        &OpenCode,
        &cli,
        &step,
        json!({"model": "fake-model", "base_url": format!("{}/v1", fake.base_url())}),
        &step.injection(false),
        &[],
    );
    assert_read_grep_edit(&step, &fake, &run, "awf_");
    assert_installed_nothing(&step);
    let offered = fake.offered_tools();
    eprintln!("opencode (no interception) offered: {offered:?}");
    assert!(offered.contains(&"awf_Read".to_string()), "{offered:?}");
    assert!(
        offered.contains(&"bash".to_string()) && offered.contains(&"read".to_string()),
        "opencode's own tools not offered: {offered:?}"
    );
}

/// OpenCode installs its plugin helper package into every config folder lacking it; the
/// provider's private, pre-seeded config home must keep it from downloading anything.
fn assert_installed_nothing(step: &Step) {
    for leftover in [".npm", ".config/opencode", ".bun"] {
        assert!(
            !step.home.join(leftover).exists(),
            "OpenCode installed something under {leftover} in the step's home"
        );
    }
}

#[test]
fn opencode_model_error_is_an_agent_failure() {
    let Some(cli) = agent_cli("opencode") else {
        return;
    };
    assert_model_error_is_an_agent_failure(
        &OpenCode,
        &cli,
        "opencode",
        |f| json!({"model": "fake-model", "base_url": format!("{}/v1", f.base_url())}),
        &[],
    );
}
