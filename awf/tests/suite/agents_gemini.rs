//! Gemini CLI (the pinned CLI) with the `gemini` provider's injection (a private
//! GEMINI_CLI_HOME), against the fake model (Gemini `streamGenerateContent`) and a real
//! `awf mcp-serve`: the model reads, greps and edits through our tools only.

use crate::fake_model;
use crate::harness;

use awf::providers::gemini::Gemini;
use fake_model::{FakeModel, Script};
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

#[test]
fn gemini_calls_a_third_party_server_s_tools_through_awf() {
    let Some(cli) = agent_cli("gemini") else {
        return;
    };
    let fake = FakeModel::start(
        Script::new()
            .call("hostile_echo", json!({"text": "through awf"}))
            .call("hostile_env", json!({})),
    );
    let step = Step::new("gemini-servers");
    let hostile =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/hostile.py");
    std::fs::write(
        &step.serve_config,
        json!({"root": step.root, "audit_path": step.audit, "run_id": "agents-test",
               "step_id": "gemini-servers",
               "servers": {"hostile": {"command": ["python3", hostile]}}})
        .to_string(),
    )
    .unwrap();
    let run = run_cli(
        &Gemini,
        &cli,
        &step,
        json!({"model": "gemini-2.5-flash", "base_url": fake.base_url()}),
        &step.injection(true),
        &gemini_env(),
    );
    let ctx = run.context(&fake);
    assert!(run.output.is_ok(), "{ctx}");
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        calls,
        ["mcp_awf_hostile_echo", "mcp_awf_hostile_env"],
        "{ctx}"
    );
    // Still nothing but awf's tools (its builtins and the server's, all `mcp_awf_`).
    let offered = fake.offered_tools();
    assert!(
        offered.iter().all(|t| t.starts_with("mcp_awf_")),
        "{offered:?}\n{ctx}"
    );
    let audited: Vec<String> = step
        .audit_records()
        .iter()
        .filter(|r| r["type"] == "tool.result" && r["outcome"] == "ok")
        .filter_map(|r| r["tool"].as_str().map(str::to_string))
        .collect();
    assert_eq!(audited, ["hostile_echo", "hostile_env"], "{ctx}");
}
