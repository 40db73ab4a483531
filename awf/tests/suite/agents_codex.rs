//! Codex (the pinned CLI) with the `codex` provider's injection, against the fake model
//! (OpenAI Responses, namespaced MCP tools) and a real `awf mcp-serve`: the model reads,
//! greps and edits through our tools; only Codex's few non-removable, non-file tools remain.

use crate::fake_model;
use crate::harness;

use awf::providers::codex::{Codex, NON_REMOVABLE_TOOLS};
use fake_model::{FakeModel, Script};
use harness::*;
use serde_json::json;

fn codex_env(step: &Step) -> Vec<(&'static str, String)> {
    // Codex keeps its state in CODEX_HOME; the test's private one.
    vec![(
        "CODEX_HOME",
        step.home.join(".codex").to_string_lossy().into_owned(),
    )]
}

/// Codex on the Read/Grep/Edit script, in its own CODEX_HOME, with or without
/// interception; `None` when the CLI is not installed.
fn run_codex(tag: &str, intercept: bool) -> Option<(FakeModel, Step, Run)> {
    let cli = agent_cli("codex")?;
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new(tag);
    std::fs::create_dir_all(step.home.join(".codex")).unwrap();
    let run = run_cli(
        &Codex,
        &cli,
        &step,
        json!({"model": "gpt-5-codex", "base_url": format!("{}/v1", fake.base_url())}),
        &step.injection(intercept),
        &codex_env(&step),
    );
    Some((fake, step, run))
}

#[test]
fn codex_reads_greps_and_edits_through_awf_with_its_shell_disabled() {
    let Some((fake, step, run)) = run_codex("codex", true) else {
        return;
    };
    assert_read_grep_edit(&step, &fake, &run, "mcp__awf__");
    let offered = fake.offered_tools();
    eprintln!("codex offered: {offered:?}");
    let others = offered_beyond_awf(&fake, "mcp__awf__");
    assert!(
        others
            .iter()
            .all(|t| NON_REMOVABLE_TOOLS.contains(&t.as_str())),
        "codex offered native tools beyond the non-removable ones: {others:?}\n{}",
        run.context(&fake)
    );
    assert_eq!(run.command.warnings.len(), 1);
    // Codex groups our tools under the MCP server's namespace, and the calls it accepted
    // named that namespace.
    let first = &fake.main_requests()[0];
    assert!(
        first
            .tools
            .iter()
            .any(|t| t.namespace.as_deref() == Some("mcp__awf") && t.name == "Read"),
        "no namespaced Read in {:?}",
        first.tools
    );
}

#[test]
fn codex_without_interception_offers_its_shell_beside_awf() {
    let Some((fake, step, run)) = run_codex("codex-both", false) else {
        return;
    };
    assert_read_grep_edit(&step, &fake, &run, "mcp__awf__");
    let offered = fake.offered_tools();
    eprintln!("codex (no interception) offered: {offered:?}");
    assert!(
        offered.contains(&"mcp__awf__Read".to_string()),
        "{offered:?}"
    );
    assert!(
        offered
            .iter()
            .any(|t| t == "shell" || t == "exec_command" || t == "shell_command"),
        "no shell tool offered: {offered:?}"
    );
    assert!(run.command.warnings.is_empty());
}

#[test]
fn codex_model_error_is_an_agent_failure() {
    let Some(cli) = agent_cli("codex") else {
        return;
    };
    let home = Step::new("codex-model-error-home");
    std::fs::create_dir_all(home.home.join(".codex")).unwrap();
    assert_model_error_is_an_agent_failure(
        &Codex,
        &cli,
        "codex",
        |f| json!({"model": "gpt-5-codex", "base_url": format!("{}/v1", f.base_url())}),
        &codex_env(&home),
    );
}

#[test]
fn codex_calls_a_third_party_server_s_tools_through_awf() {
    third_party_server_through_awf("codex-servers", &[]);
}

/// A third-party server that takes 3 s to start (an `npx -y` download, a cold JVM take
/// longer): awf's server answers only once it is up. Codex is told that awf's server is
/// required, so its first request already offers the tools; before, it sent that request
/// at once without them, and the step went on with none. (Its start deadline, lifted past
/// its default 10 s, is checked where the override is written.)
#[test]
fn codex_waits_for_awf_while_a_third_party_server_starts_slowly() {
    third_party_server_through_awf(
        "codex-slow-server",
        &["sh", "-c", "sleep 3; exec \"$0\" \"$@\""],
    );
}

/// Codex calls the tests' hostile server's two tools through awf, the server started by
/// `launcher` (a command that execs the rest of its arguments) or directly.
fn third_party_server_through_awf(step_name: &str, launcher: &[&str]) {
    let Some(cli) = agent_cli("codex") else {
        return;
    };
    let fake = FakeModel::start(
        Script::new()
            .call("hostile_echo", json!({"text": "through awf"}))
            .call("hostile_env", json!({})),
    );
    let step = Step::new(step_name);
    std::fs::create_dir_all(step.home.join(".codex")).unwrap();
    let hostile =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/hostile.py");
    let mut command: Vec<String> = launcher.iter().map(|a| a.to_string()).collect();
    command.extend(["python3".to_string(), hostile.display().to_string()]);
    std::fs::write(
        &step.serve_config,
        json!({"root": step.root, "audit_path": step.audit, "run_id": "agents-test",
               "step_id": step_name,
               "servers": {"hostile": {"command": command}}})
        .to_string(),
    )
    .unwrap();
    let run = run_cli(
        &Codex,
        &cli,
        &step,
        json!({"model": "gpt-5-codex", "base_url": format!("{}/v1", fake.base_url())}),
        &step.injection(true),
        &codex_env(&step),
    );
    let ctx = run.context(&fake);
    assert!(run.output.is_ok(), "{ctx}");
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        calls,
        ["mcp__awf__hostile_echo", "mcp__awf__hostile_env"],
        "{ctx}"
    );
    let audited: Vec<String> = step
        .audit_records()
        .iter()
        .filter(|r| r["type"] == "tool.result" && r["outcome"] == "ok")
        .filter_map(|r| r["tool"].as_str().map(str::to_string))
        .collect();
    assert_eq!(audited, ["hostile_echo", "hostile_env"], "{ctx}");
}
