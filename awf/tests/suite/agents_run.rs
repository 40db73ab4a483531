//! The four agent CLIs (pinned, real) through `awf run` on a workflow: an agent state with
//! `mcp_proxy` makes the fake model Read a fixture, Grep the tree and Edit a file through
//! the per-step `awf mcp-serve`; with `intercept_builtins: false` and the `notes` plugin,
//! the CLI's own tools are offered beside the plugin's tool.

use crate::fake_model;
use crate::harness;

use awf::providers::codex::NON_REMOVABLE_TOOLS;
use fake_model::FakeModel;
use harness::*;
use serde_json::{Value, json};

const INTERCEPT: &str = "{enable: true}";
const PLUGIN_ONLY: &str =
    "{enable: true, intercept_builtins: false, plugin_tools: [{plugin: notes, expose: [add]}]}";

/// Per CLI: the options of its state (base URL as the CLI wants it), the prefix its model
/// sees on our tools, and the native tools allowed beside ours with interception.
fn cli_case(
    cli: &str,
    program: &std::path::Path,
    fake: &FakeModel,
) -> (Value, &'static str, Vec<String>) {
    let base = fake.base_url();
    let mut options = json!({"command": program, "api_key_env": "AWF_TEST_FAKE_KEY"});
    let (model, url, prefix, allowed): (&str, String, &str, Vec<String>) = match cli {
        "claude" => ("claude-sonnet-4-5", base, "mcp__awf__", vec![]),
        "gemini" => ("gemini-2.5-flash", base, "mcp_awf_", vec![]),
        "codex" => (
            "gpt-5-codex",
            format!("{base}/v1"),
            "mcp__awf__",
            NON_REMOVABLE_TOOLS.iter().map(|s| s.to_string()).collect(),
        ),
        "opencode" => ("fake-model", format!("{base}/v1"), "awf_", vec![]),
        other => panic!("no case for {other}"),
    };
    options["model"] = json!(model);
    options["base_url"] = json!(url);
    (options, prefix, allowed)
}

fn intercepted(cli: &str) {
    let Some(program) = agent_cli(cli) else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new(&format!("run-{cli}"));
    let (options, prefix, allowed) = cli_case(cli, &program, &fake);
    let run = run_workflow(&step, cli, &options, INTERCEPT, None, &[]);
    assert_workflow_read_grep_edit(&step, &fake, &run, prefix);
    let offered = fake.offered_tools();
    let others: Vec<&String> = offered.iter().filter(|t| !t.starts_with(prefix)).collect();
    assert!(
        others.iter().all(|t| allowed.contains(t)),
        "{cli} offered native tools with interception: {others:?}"
    );
    eprintln!("{cli} via awf run offered: {offered:?}");
    if cli == "codex" {
        assert!(
            run.stderr.contains("request_user_input"),
            "no WARN naming Codex's remaining tools: {}",
            run.stderr
        );
    }
}

fn plugin_only(cli: &str, native: &[&str]) {
    let Some(program) = agent_cli(cli) else {
        return;
    };
    let fake = FakeModel::start(notes_add());
    let step = Step::new(&format!("run-{cli}-both"));
    let plugins = step.base.join("plugins");
    install_notes_plugin(&plugins);
    let (options, prefix, _) = cli_case(cli, &program, &fake);
    let run = run_workflow(&step, cli, &options, PLUGIN_ONLY, Some(&plugins), &[]);
    assert_workflow_notes_add(&fake, &run, prefix);
    let offered = fake.offered_tools();
    eprintln!("{cli} via awf run, no interception, offered: {offered:?}");
    for t in native {
        assert!(
            offered.contains(&t.to_string()),
            "{cli}: native {t} not offered: {offered:?}"
        );
    }
}

#[test]
fn claude_through_awf_run() {
    intercepted("claude");
}

#[test]
fn gemini_through_awf_run() {
    intercepted("gemini");
}

#[test]
fn codex_through_awf_run() {
    intercepted("codex");
}

#[test]
fn opencode_through_awf_run() {
    intercepted("opencode");
}

#[test]
fn claude_through_awf_run_without_interception() {
    plugin_only("claude", &["Read", "Edit", "Bash"]);
}

#[test]
fn gemini_through_awf_run_without_interception() {
    plugin_only("gemini", &["read_file", "grep_search"]);
}

#[test]
fn codex_through_awf_run_without_interception() {
    plugin_only("codex", &["exec_command"]);
}

#[test]
fn opencode_through_awf_run_without_interception() {
    plugin_only("opencode", &["read", "edit", "bash"]);
}

/// `mcp_proxy.tools.read_only: true`: Claude Code, through `awf run`, is offered awf's
/// Read, Glob and Grep and nothing else; the step reads through them.
#[test]
fn a_read_only_step_is_offered_read_glob_and_grep_only() {
    let Some(program) = agent_cli("claude") else {
        return;
    };
    let fake = FakeModel::start(
        fake_model::Script::new().call("Read", json!({"path": "docs/fixture.txt"})),
    );
    let step = Step::new("run-claude-read-only");
    let (options, prefix, _) = cli_case("claude", &program, &fake);
    let run = run_workflow(
        &step,
        "claude",
        &options,
        "{enable: true, tools: {read_only: true}}",
        None,
        &[],
    );
    assert!(run.status.success(), "{}\n{}", run.summary, run.stderr);
    let mut offered = fake.offered_tools();
    offered.sort();
    assert_eq!(
        offered,
        ["Glob", "Grep", "Read"].map(|t| format!("{prefix}{t}")),
        "{}",
        fake.describe()
    );
    let results: Vec<&Value> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .collect();
    assert_eq!(results.len(), 1, "{:#?}", run.audit);
    assert_eq!(
        (&results[0]["tool"], &results[0]["outcome"]),
        (&json!("Read"), &json!("ok"))
    );
}

/// A proxy that records the first line of every connection made to it (`CONNECT host:443`
/// or `GET http://…`) and closes it without an answer.
fn black_hole_proxy() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let _ = BufReader::new(&conn).read_line(&mut line);
            record.lock().unwrap().push(line.trim_end().to_string());
        }
    });
    (url, seen)
}

/// A codex step makes no connection but the one to the model: every other attempt (plugin
/// list, update check, analytics) would reach the proxy the environment names.
#[test]
fn a_codex_step_calls_nowhere_but_the_model() {
    let Some(program) = agent_cli("codex") else {
        return;
    };
    let fake = FakeModel::start(read_grep_edit());
    let step = Step::new("run-codex-offline");
    let (options, prefix, _) = cli_case("codex", &program, &fake);
    let (proxy, seen) = black_hole_proxy();
    let mut env = vec![("NO_PROXY", "127.0.0.1,localhost".to_string())];
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
    ] {
        env.push((name, proxy.clone()));
    }
    env.push(("no_proxy", "127.0.0.1,localhost".to_string()));
    let run = run_workflow(&step, "codex", &options, INTERCEPT, None, &env);
    assert_workflow_read_grep_edit(&step, &fake, &run, prefix);
    let attempts = seen.lock().unwrap().clone();
    assert!(
        attempts.is_empty(),
        "codex tried to reach {} place(s) besides the model: {attempts:?}",
        attempts.len()
    );
}
