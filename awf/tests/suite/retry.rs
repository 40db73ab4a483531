//! `retry:` on `step` states through the real binary: a retryable exit code is retried
//! until the command succeeds, another exit code is not, the attempts are bounded by
//! `max_attempts`, a timeout counts as a failure, an interrupt during a wait ends the
//! state at once, and `awf validate` refuses each bad value naming its path. Each command
//! counts its runs in a file outside the workspace; waits are short and nothing is timed.
//!
//! And on `agent` states, an `openai_compatible` agent against the fake model
//! (tests/fake_model) through the run's relay: a model overloaded twice is retried after
//! the wait its `Retry-After` asks, a model that always limits the rate cannot make the
//! attempts spend more than the state's budget, `on` keeps the retries to its classes, an
//! endpoint that cannot be reached is a `server_error`, and `awf validate` refuses an
//! unknown class and `on` on a step.

use crate::common;
use crate::fake_model;

use common::{run_summary, summary_state};
use fake_model::{FakeModel, Script, private_tmp};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const AWF: &str = env!("CARGO_BIN_EXE_awf");

/// A workspace `root/` to run in, and the counter file beside it (outside the workspace).
fn dirs(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (base, root, _) = common::workspace(&format!("retry-{tag}"));
    let counter = base.join("counter");
    (base, root, counter)
}

/// A shell command that counts its runs in `counter`, then exits `codes[run - 1]` (the
/// last code for any later run), printing the run number.
fn counting(counter: &Path, codes: &[i32]) -> String {
    let mut cases = String::new();
    for (i, c) in codes.iter().enumerate() {
        cases.push_str(&format!("        {}) exit {c} ;;\n", i + 1));
    }
    format!(
        "|\n      n=$(cat '{c}' 2>/dev/null || echo 0)\n      n=$((n + 1))\n      echo \"$n\" > \
         '{c}'\n      echo \"run $n\"\n      case $n in\n{cases}        *) exit {last} ;;\n      \
         esac",
        c = counter.display(),
        last = codes.last().unwrap()
    )
}

/// A workflow whose state `build` runs `command` with the `retry` block given (YAML under
/// `retry:`, indented by six), then `done`, or `failed` on failure.
fn workflow(base: &Path, command: &str, retry: &str, extra: &str) -> PathBuf {
    let wf = base.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "name: retries
states:
  initial: build
  build:
    type: step
    command: {command}
{extra}    retry:
{retry}
    on_success: done
    on_failure: failed
  done:
    type: terminal
    message: \"built: {{{{.states.build.Output}}}}\"
  failed:
    type: terminal
    status: failure
"
        ),
    )
    .unwrap();
    wf
}

fn awf_run(root: &Path, wf: &Path) -> Output {
    common::awf_run(root, wf).output().unwrap()
}

fn runs(counter: &Path) -> u32 {
    std::fs::read_to_string(counter)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

fn state_names(s: &Value) -> Vec<&str> {
    s["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["state"].as_str().unwrap())
        .collect()
}

#[test]
fn a_retryable_exit_code_is_retried_until_the_command_succeeds() {
    let (base, root, counter) = dirs("until-success");
    let wf = workflow(
        &base,
        &counting(&counter, &[75, 75, 0]),
        "      max_attempts: 5\n      initial_delay: 10ms\n      retryable_exit_codes: [75]",
        "",
    );
    let out = awf_run(&root, &wf);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(runs(&counter), 3);
    let build = summary_state(&s, "build");
    assert_eq!(build["status"], "success", "{s:#}");
    assert_eq!(build["attempts"], 3);
    assert_eq!(build["exit_code"], 0);
    assert_eq!(build["output"], "run 3");
    assert_eq!(state_names(&s), ["build", "done"]);
    assert_eq!(summary_state(&s, "done")["output"], "built: run 3");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("build attempt 1 of 5 failed (exit 75); next in")
            && err.contains("build attempt 2 of 5 failed (exit 75); next in")
            && !err.contains("attempt 3 of 5"),
        "{err}"
    );
}

#[test]
fn an_exit_code_not_listed_is_not_retried_and_on_failure_is_followed() {
    let (base, root, counter) = dirs("not-listed");
    let wf = workflow(
        &base,
        &counting(&counter, &[1, 0]),
        "      max_attempts: 5\n      initial_delay: 10ms\n      retryable_exit_codes: [75]",
        "",
    );
    let out = awf_run(&root, &wf);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(runs(&counter), 1);
    let build = summary_state(&s, "build");
    assert_eq!(build["status"], "failure");
    assert_eq!(build["exit_code"], 1);
    assert_eq!(build["attempts"], 1);
    assert_eq!(state_names(&s), ["build", "failed"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("build attempt 1 of 5 failed (exit 1); not retried"),
        "{err}"
    );
}

#[test]
fn max_attempts_bounds_the_runs_of_a_command_that_always_fails() {
    let (base, root, counter) = dirs("always-fails");
    let wf = workflow(
        &base,
        &counting(&counter, &[1]),
        "      max_attempts: 3\n      initial_delay: 10ms\n      backoff: linear\n      jitter: 0.5",
        "",
    );
    let out = awf_run(&root, &wf);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(runs(&counter), 3);
    let build = summary_state(&s, "build");
    assert_eq!(build["status"], "failure");
    assert_eq!(build["attempts"], 3);
    assert_eq!(build["output"], "run 3");
    let message = build["error"]["message"].as_str().unwrap();
    assert!(message.contains("attempt 3 of 3"), "{message}");
    assert_eq!(state_names(&s), ["build", "failed"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("build attempt 3 of 3 failed (exit 1); no attempt left"),
        "{err}"
    );
}

#[test]
fn a_timeout_is_a_failure_retried_when_no_exit_code_is_listed() {
    let (base, root, counter) = dirs("timeout");
    // Each run records itself, then outlives the step's timeout.
    let command = format!(
        "|\n      n=$(cat '{c}' 2>/dev/null || echo 0)\n      echo $((n + 1)) > '{c}'\n      exec \
         sleep 30",
        c = counter.display()
    );
    let wf = workflow(
        &base,
        &command,
        "      max_attempts: 2\n      initial_delay: 10ms",
        "    timeout: 200ms\n",
    );
    let out = awf_run(&root, &wf);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(runs(&counter), 2);
    let build = summary_state(&s, "build");
    assert_eq!(build["status"], "timeout");
    assert_eq!(build["attempts"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("build attempt 1 of 2 failed (timed out); next in"),
        "{err}"
    );
}

#[test]
fn a_step_without_retry_runs_once_and_reports_no_attempts() {
    let (base, root, counter) = dirs("no-retry");
    let wf = base.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: once
states:
  initial: build
  build:
    type: step
    command: {}
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
",
            counting(&counter, &[75])
        ),
    )
    .unwrap();
    let out = awf_run(&root, &wf);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(runs(&counter), 1);
    let build = summary_state(&s, "build");
    assert_eq!(build["exit_code"], 75);
    assert!(build.get("attempts").is_none(), "{build:#}");
}

#[test]
fn an_interrupt_during_a_wait_ends_the_state_interrupted() {
    let (base, root, counter) = dirs("interrupt");
    // A wait of an hour: only the interrupt can end it.
    let wf = workflow(
        &base,
        &counting(&counter, &[1]),
        "      max_attempts: 3\n      initial_delay: 1h\n      max_delay: 1h",
        "",
    );
    let mut child = common::awf_run(&root, &wf)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read stderr until the wait begins, then keep draining it.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("build attempt 1 of 3 failed (exit 1); next in 3600.0s") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv().expect("awf announces the wait before attempt 2");
    let (status, s) = common::interrupt_run(&mut child);
    assert_eq!(status.code(), Some(3), "{s:#}");
    assert_eq!(runs(&counter), 1);
    let build = summary_state(&s, "build");
    assert_eq!(build["status"], "interrupted", "{s:#}");
    assert_eq!(build["attempts"], 1);
    assert_eq!(build["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
    let message = build["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("while waiting for attempt 2 of 3"),
        "{message}"
    );
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
}

/// `awf validate --output json` of a workflow whose step `build` has the `retry` block
/// given (YAML indented by six); returns the exit code and the problems.
fn validate(tag: &str, retry: &str) -> (i32, Vec<Value>) {
    let (base, root, _) = dirs(&format!("validate-{tag}"));
    let wf = workflow(&base, "make", retry, "");
    validate_file(&root, &wf)
}

fn validate_file(root: &Path, wf: &Path) -> (i32, Vec<Value>) {
    let out = common::awf_validate(root, wf).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).expect("validate prints JSON");
    (
        out.status.code().unwrap(),
        json["problems"].as_array().unwrap().clone(),
    )
}

/// The only problem found, checked for its code, path, line and words of its hint.
fn refused(tag: &str, retry: &str, code: &str, path: &str, line: u64, hint: &str) -> Value {
    let (exit, problems) = validate(tag, retry);
    assert_eq!(problems.len(), 1, "one problem expected: {problems:#?}");
    let p = problems[0].clone();
    assert_eq!(exit, 2, "{p:#}");
    assert_eq!(p["severity"], "error", "{p:#}");
    assert_eq!(p["code"], code, "{p:#}");
    assert_eq!(p["path"], path, "{p:#}");
    assert_eq!(p["line"], line, "{p:#}");
    assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
    p
}

#[test]
fn a_full_retry_block_validates() {
    let (exit, problems) = validate(
        "full",
        "      max_attempts: 5\n      initial_delay: 500ms\n      max_delay: 1m\n      backoff: \
         exponential\n      multiplier: 1.5\n      jitter: 0.1\n      retryable_exit_codes: [75, \
         111]",
    );
    assert_eq!(exit, 0, "{problems:#?}");
    assert!(problems.is_empty(), "{problems:#?}");
    // Every key may be left out.
    let (exit, problems) = validate("empty", "      {}");
    assert_eq!(exit, 0, "{problems:#?}");
    assert!(problems.is_empty(), "{problems:#?}");
}

// The retry block's first key is on line 8 of the workflow.

#[test]
fn zero_attempts_are_refused() {
    let p = refused(
        "attempts",
        "      max_attempts: 0",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.max_attempts",
        8,
        "max_attempts: 3",
    );
    assert!(p["message"].as_str().unwrap().contains("1 to 100"), "{p:#}");
    refused(
        "attempts-many",
        "      max_attempts: 101",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.max_attempts",
        8,
        "max_attempts: 3",
    );
}

#[test]
fn jitter_above_one_is_refused() {
    refused(
        "jitter",
        "      jitter: 2",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.jitter",
        8,
        "jitter: 0.1",
    );
}

#[test]
fn an_unknown_backoff_is_refused() {
    refused(
        "backoff",
        "      backoff: fibonacci",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.backoff",
        8,
        "constant, linear or exponential",
    );
}

#[test]
fn a_max_delay_below_the_initial_delay_is_refused() {
    refused(
        "max-delay",
        "      initial_delay: 2s\n      max_delay: 1s",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.max_delay",
        9,
        "at least initial_delay",
    );
    // Against the default max_delay (60s), the initial delay is named.
    refused(
        "max-delay-default",
        "      initial_delay: 2m",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.initial_delay",
        8,
        "at least initial_delay",
    );
}

#[test]
fn a_non_integer_exit_code_is_refused() {
    refused(
        "exit-code",
        "      retryable_exit_codes: [75, soon]",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.retryable_exit_codes[1]",
        8,
        "retryable_exit_codes: [75, 111]",
    );
    refused(
        "exit-code-float",
        "      retryable_exit_codes: [1.5]",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.retryable_exit_codes[0]",
        8,
        "as numbers",
    );
    refused(
        "exit-code-zero",
        "      retryable_exit_codes: [0]",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.retryable_exit_codes[0]",
        8,
        "0 is a success",
    );
    refused(
        "exit-code-scalar",
        "      retryable_exit_codes: 75",
        "WORKFLOW.PARSE.WRONG_TYPE",
        "states.build.retry.retryable_exit_codes",
        8,
        "[75]",
    );
}

#[test]
fn other_bad_values_are_refused() {
    refused(
        "multiplier",
        "      multiplier: 1",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.multiplier",
        8,
        "multiplier: 2",
    );
    refused(
        "delay",
        "      initial_delay: soon",
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.retry.initial_delay",
        8,
        "500ms",
    );
}

#[test]
fn an_unknown_key_is_refused_with_a_suggestion() {
    refused(
        "unknown-key",
        "      max_attempt: 3",
        "WORKFLOW.PARSE.UNKNOWN_KEY",
        "states.build.retry.max_attempt",
        8,
        "did you mean `max_attempts`",
    );
}

#[test]
fn every_bad_value_is_reported_at_once() {
    let (exit, problems) = validate(
        "all",
        "      max_attempts: 0\n      jitter: 2\n      backoff: fibonacci\n      \
         retryable_exit_codes: [x]",
    );
    assert_eq!(exit, 2);
    let paths: Vec<&str> = problems
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "states.build.retry.max_attempts",
            "states.build.retry.jitter",
            "states.build.retry.backoff",
            "states.build.retry.retryable_exit_codes[0]",
        ]
    );
}

#[test]
fn an_agent_retry_block_validates() {
    let (base, root, _) = dirs("validate-agent");
    let wf = agent_workflow(
        &base,
        "http://127.0.0.1:9",
        "      max_attempts: 5\n      initial_delay: 2s\n      backoff: exponential\n      \
         on: [rate_limit, overloaded, server_error, timeout]",
        "",
    );
    let (exit, problems) = validate_file(&root, &wf);
    assert_eq!(exit, 0, "{problems:#?}");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn an_unknown_failure_class_is_refused() {
    let (base, root, _) = dirs("validate-on");
    let wf = agent_workflow(
        &base,
        "http://127.0.0.1:9",
        "      max_attempts: 3\n      on: [overloaded, bogus]",
        "",
    );
    let (exit, problems) = validate_file(&root, &wf);
    assert_eq!(exit, 2, "{problems:#?}");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert_eq!(p["code"], "WORKFLOW.PARSE.INVALID_VALUE", "{p:#}");
    assert_eq!(p["path"], "states.fix.retry.on[1]", "{p:#}");
    assert_eq!(p["line"], AGENT_RETRY_LINE + 1, "{p:#}");
    assert!(p["message"].as_str().unwrap().contains("bogus"), "{p:#}");
    assert!(
        p["hint"]
            .as_str()
            .unwrap()
            .contains("rate_limit, overloaded, server_error, timeout"),
        "{p:#}"
    );
    // A class alone, not in a list, is a wrong type.
    let wf = agent_workflow(&base, "http://127.0.0.1:9", "      on: overloaded", "");
    let (_, problems) = validate_file(&root, &wf);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0]["code"], "WORKFLOW.PARSE.WRONG_TYPE");
    assert_eq!(problems[0]["path"], "states.fix.retry.on");
}

#[test]
fn on_is_for_agent_states() {
    let p = refused(
        "on-step",
        "      max_attempts: 3\n      on: [overloaded]",
        "WORKFLOW.PARSE.UNKNOWN_KEY",
        "states.build.retry.on",
        9,
        "retryable_exit_codes",
    );
    assert!(
        p["message"].as_str().unwrap().contains("agent states"),
        "{p:#}"
    );
}

/// The line of an agent workflow's first `retry` key (see [`agent_workflow`]).
const AGENT_RETRY_LINE: u64 = 15;

/// A workflow whose agent state `fix` talks to the model at `base` (its `/v1`) with the
/// tool proxy on (the fake model's main requests are those offering tools), with the
/// `retry` block given (YAML indented by six) and `extra` keys (indented by four); then
/// `done`, or `failed` on failure.
fn agent_workflow(base: &Path, model: &str, retry: &str, extra: &str) -> PathBuf {
    let wf = base.join("agent.yaml");
    std::fs::write(
        &wf,
        format!(
            "name: agent-retries
states:
  initial: fix
  fix:
    type: agent
    provider: openai_compatible
    prompt: fix the build
    options:
      base_url: {model}/v1
      model: fake-model
      api_key_env: AWF_TEST_OPENAI_KEY
    mcp_proxy:
      enable: true
{extra}    retry:
{retry}
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"
        ),
    )
    .unwrap();
    wf
}

/// `awf run` of an agent workflow in `root` with its audit in `audit`; `json` asks for
/// the JSON summary.
fn agent_run(root: &Path, wf: &Path, audit: &Path, json: bool) -> Output {
    let mut cmd = Command::new(AWF);
    cmd.arg("run").arg(wf);
    if json {
        cmd.args(["--output", "json"]);
    }
    cmd.arg("--audit-dir")
        .arg(audit)
        .current_dir(root)
        .env("TMPDIR", private_tmp(audit))
        .env("AWF_PLUGINS_PATH", "")
        .env("AWF_TEST_OPENAI_KEY", "sk-test-123456")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap()
}

/// The audit files of state `fix`, by name.
fn fix_audits(audit: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(audit)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-fix.audit.jsonl"))
        .collect();
    names.sort();
    names
}

#[test]
fn an_overloaded_model_is_retried_after_the_wait_it_asks_for() {
    let (base, root, _) = dirs("agent-overloaded");
    let audit = base.join("audit");
    let model = FakeModel::start(
        Script::new()
            .fail_first(2, 529, r#"{"error": {"message": "overloaded"}}"#)
            .retry_after("1"),
    );
    // A backoff of 10 ms: only the model's Retry-After makes the wait a second.
    let wf = agent_workflow(
        &base,
        &model.base_url(),
        "      max_attempts: 5\n      initial_delay: 10ms",
        "",
    );
    let out = agent_run(&root, &wf, &audit, true);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{err}\n{}",
        model.describe()
    );
    let fix = summary_state(&s, "fix");
    assert_eq!(fix["status"], "success", "{s:#}");
    assert_eq!(fix["attempts"], 3, "{s:#}");
    assert_eq!(fix["max_attempts"], 5, "{s:#}");
    assert_eq!(
        fix["retried"],
        serde_json::json!(["overloaded", "overloaded"])
    );
    assert!(
        fix["output"]
            .as_str()
            .unwrap()
            .starts_with("FAKE-MODEL-FINAL"),
        "{fix:#}"
    );
    assert_eq!(model.main_requests().len(), 3, "{}", model.describe());
    // The relay's figures count every attempt, and keep the last error it saw.
    assert_eq!(fix["model"]["requests"], 3, "{fix:#}");
    assert_eq!(fix["model"]["last_error_status"], 529, "{fix:#}");
    assert_eq!(fix["model"]["retry_after_ms"], 1000, "{fix:#}");
    for n in 1..=2 {
        assert!(
            err.contains(&format!(
                "fix attempt {n} of 5 failed (overloaded, HTTP 529); next in 1.0s (Retry-After)"
            )),
            "{err}"
        );
    }
    assert!(!err.contains("attempt 3 of 5"), "{err}");
    // Each attempt is a step of its own, with its own audit file.
    let audits = fix_audits(&audit);
    assert_eq!(audits.len(), 3, "{audits:?}");
    let statuses: Vec<Value> = audits
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(audit.join(f))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|r| r["type"] == "model.response")
                .map(|r| r["status"].clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(statuses, [529, 529, 200], "{audits:?}");
}

#[test]
fn the_budget_holds_across_attempts() {
    let (base, root, _) = dirs("agent-budget");
    let audit = base.join("audit");
    let model =
        FakeModel::start(Script::new().fail_with(429, r#"{"error": {"message": "slow down"}}"#));
    let wf = agent_workflow(
        &base,
        &model.base_url(),
        "      max_attempts: 3\n      initial_delay: 10ms",
        "    budget: {requests: 2}\n",
    );
    let out = agent_run(&root, &wf, &audit, true);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{s:#}\n{err}");
    let fix = summary_state(&s, "fix");
    assert_eq!(fix["status"], "failure", "{s:#}");
    // Two requests in all, whatever the attempts: the third is never made.
    let sent = model.main_requests().len();
    assert!(sent <= 2, "{sent} requests: {}", model.describe());
    assert_eq!(fix["model"]["requests"], sent, "{fix:#}");
    assert_eq!(fix["attempts"], 2, "{fix:#}");
    assert_eq!(fix["retried"], serde_json::json!(["rate_limit"]));
    assert_eq!(fix["error"]["code"], "EXECUTION.BUDGET", "{fix:#}");
    assert_eq!(fix["model"]["budget_exhausted"], "requests", "{fix:#}");
    assert!(
        err.contains("fix attempt 1 of 3 failed (rate_limit, HTTP 429); next in")
            && err.contains("fix attempt 2 of 3 failed (rate_limit, HTTP 429); the model budget"),
        "{err}"
    );
    assert_eq!(state_names(&s), ["fix", "failed"]);
}

#[test]
fn an_attempt_gets_only_the_budget_the_earlier_ones_left() {
    let (base, root, _) = dirs("agent-budget-left");
    let audit = base.join("audit");
    std::fs::write(root.join("fixture.txt"), "hello\n").unwrap();
    // Attempt 1: one request, rate-limited. Attempt 2 may make one more: the model's
    // tool call; the request that would carry its result is refused.
    let model = FakeModel::start(
        Script::new()
            .fail_first(1, 429, r#"{"error": {"message": "slow down"}}"#)
            .call("Read", serde_json::json!({"path": "fixture.txt"})),
    );
    let wf = agent_workflow(
        &base,
        &model.base_url(),
        "      max_attempts: 3\n      initial_delay: 10ms",
        "    budget: {requests: 2}\n",
    );
    let out = agent_run(&root, &wf, &audit, true);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{s:#}\n{err}");
    let fix = summary_state(&s, "fix");
    assert_eq!(model.main_requests().len(), 2, "{}", model.describe());
    assert_eq!(model.tool_calls().len(), 1, "{}", model.describe());
    assert_eq!(fix["attempts"], 2, "{fix:#}");
    assert_eq!(fix["error"]["code"], "EXECUTION.BUDGET", "{fix:#}");
    assert_eq!(fix["model"]["requests"], 2, "{fix:#}");
    assert_eq!(fix["model"]["budget_exhausted"], "requests", "{fix:#}");
    assert!(
        err.contains(
            "fix attempt 2 of 3 failed (EXECUTION.BUDGET); not retried (its model budget is spent)"
        ),
        "{err}"
    );
}

#[test]
fn on_keeps_the_retries_to_its_classes() {
    let (base, root, _) = dirs("agent-on");
    let audit = base.join("audit");
    let model = FakeModel::start(
        Script::new().fail_with(500, r#"{"error": {"message": "internal error"}}"#),
    );
    let wf = agent_workflow(
        &base,
        &model.base_url(),
        "      max_attempts: 3\n      initial_delay: 10ms\n      on: [overloaded]",
        "",
    );
    let out = agent_run(&root, &wf, &audit, true);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{s:#}\n{err}");
    assert_eq!(model.main_requests().len(), 1, "{}", model.describe());
    let fix = summary_state(&s, "fix");
    assert_eq!(fix["attempts"], 1, "{fix:#}");
    assert!(fix.get("retried").is_none(), "{fix:#}");
    assert_eq!(
        fix["error"]["code"], "EXECUTION.OPENAI.HTTP_ERROR",
        "{fix:#}"
    );
    assert!(
        err.contains(
            "fix attempt 1 of 3 failed (server_error, HTTP 500); not retried (on: [overloaded])"
        ),
        "{err}"
    );
    assert_eq!(fix_audits(&audit).len(), 1);
}

#[test]
fn a_timeout_is_retried_when_on_names_it() {
    let (base, root, _) = dirs("agent-timeout");
    let audit = base.join("audit");
    // A model that takes the connection and never answers (it is never accepted: the
    // kernel's backlog holds it).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let wf = agent_workflow(
        &base,
        &format!("http://127.0.0.1:{port}"),
        "      max_attempts: 2\n      initial_delay: 10ms\n      on: [timeout]",
        "    timeout: 300ms\n",
    );
    let out = agent_run(&root, &wf, &audit, true);
    drop(silent);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{s:#}\n{err}");
    let fix = summary_state(&s, "fix");
    assert_eq!(fix["status"], "timeout", "{fix:#}");
    assert_eq!(fix["attempts"], 2, "{fix:#}");
    assert_eq!(fix["retried"], serde_json::json!(["timeout"]));
    assert!(
        err.contains("fix attempt 1 of 2 failed (timeout); next in 10ms")
            && err.contains("fix attempt 2 of 2 failed (timeout); no attempt left"),
        "{err}"
    );
}

#[test]
fn an_endpoint_that_cannot_be_reached_is_a_server_error() {
    let (base, root, _) = dirs("agent-unreachable");
    let audit = base.join("audit");
    // A port nothing listens on any more: the relay answers 502 itself.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let wf = agent_workflow(
        &base,
        &format!("http://127.0.0.1:{port}"),
        "      max_attempts: 2\n      initial_delay: 10ms\n      on: [server_error]",
        "",
    );
    // The summary for a human says how the attempts went.
    let out = agent_run(&root, &wf, &audit, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{err}");
    assert!(
        err.contains("fix attempt 1 of 2 failed (server_error, HTTP 502); next in 10ms")
            && err.contains("fix attempt 2 of 2 failed (server_error, HTTP 502); no attempt left"),
        "{err}"
    );
    assert!(
        stdout.contains("failed on attempt 2 of 2 (1× server_error)"),
        "{stdout}"
    );
    assert_eq!(fix_audits(&audit).len(), 2);
}
