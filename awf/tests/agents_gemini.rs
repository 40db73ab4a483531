//! Gemini CLI (the pinned CLI) with the `gemini` provider's injection (a private
//! GEMINI_CLI_HOME), against the fake model (Gemini `streamGenerateContent`) and a real
//! `awf mcp-serve`: the model reads, greps and edits through our tools only.

#[path = "fake_model/mod.rs"]
mod fake_model;
#[path = "fake_model/agent_harness.rs"]
mod harness;

use awf::providers::gemini::Gemini;
use fake_model::FakeModel;
use harness::*;
use serde_json::json;

fn gemini_env() -> Vec<(&'static str, String)> {
    vec![("GEMINI_API_KEY", "fake-gemini-key".to_string())]
}

#[test]
fn gemini_reads_greps_and_edits_through_awf_only() {
    let Some(cli) = agent_cli("gemini") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("gemini");
    let run = run_cli(
        &Gemini,
        &cli,
        &step,
        json!({"model": "gemini-2.5-flash", "base_url": fake.base_url()}),
        &step.injection(true),
        &gemini_env(),
    );
    assert_read_grep_edit(&step, &fake, &run, "mcp_awf_");
    let offered = fake.offered_tools();
    eprintln!("gemini offered: {offered:?}");
    let beyond = offered_beyond_awf(&fake, "mcp_awf_");
    assert!(
        beyond.is_empty(),
        "offered beyond awf: {beyond:?}\n{}",
        run.context(&fake)
    );
}

#[test]
fn gemini_without_interception_offers_its_own_tools_beside_awf() {
    let Some(cli) = agent_cli("gemini") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("gemini-both");
    let run = run_cli(
        &Gemini,
        &cli,
        &step,
        json!({"model": "gemini-2.5-flash", "base_url": fake.base_url()}),
        &step.injection(false),
        &gemini_env(),
    );
    assert_read_grep_edit(&step, &fake, &run, "mcp_awf_");
    let offered = fake.offered_tools();
    eprintln!("gemini (no interception) offered: {offered:?}");
    assert!(offered.contains(&"mcp_awf_Read".to_string()), "{offered:?}");
    // Headless Gemini CLI leaves out its tools that would need a confirmation (shell,
    // write, edit); its read-only file tools stay.
    assert!(
        offered.contains(&"read_file".to_string()) && offered.contains(&"grep_search".to_string()),
        "gemini's own tools not offered: {offered:?}"
    );
}

#[test]
fn gemini_model_error_is_an_agent_failure() {
    let Some(cli) = agent_cli("gemini") else {
        return;
    };
    assert_model_error_is_an_agent_failure(
        &Gemini,
        &cli,
        "gemini",
        |f| json!({"model": "gemini-2.5-flash", "base_url": f.base_url()}),
        &gemini_env(),
    );
}
