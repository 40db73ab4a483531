//! The harness itself: it never hangs on a server that does not answer, reports a server
//! that exits or cannot start, and refuses bad command lines with a message that says what
//! to fix.

mod common;

use std::process::Command;

use common::{Outcome, run_suite_with_timeout};

fn not_skipped(outcomes: &[Outcome]) -> Vec<&Outcome> {
    outcomes.iter().filter(|o| o.status != "skip").collect()
}

#[test]
fn a_server_that_never_answers_fails_every_check_without_hanging() {
    // `sleep` reads nothing and writes nothing: every wait must end at the deadline.
    let outcomes = run_suite_with_timeout(
        "2",
        &["--jobs", "42", "--revision", "all"],
        &["sleep".into(), "3600".into()],
    );
    let ran = not_skipped(&outcomes);
    assert!(ran.len() >= 60, "{outcomes:?}");
    for outcome in ran {
        assert_eq!(outcome.status, "fail", "{outcome:?}");
        assert!(outcome.message.contains("deadline"), "{outcome:?}");
    }
}

#[test]
fn a_server_that_exits_at_once_fails_every_check() {
    let outcomes = run_suite_with_timeout(
        "20",
        &["--jobs", "8", "--revision", "all"],
        &["true".into()],
    );
    for outcome in not_skipped(&outcomes) {
        assert_eq!(outcome.status, "fail", "{outcome:?}");
    }
}

#[test]
fn a_command_that_cannot_start_is_named() {
    let outcomes = run_suite_with_timeout(
        "20",
        &["--only", "ping-before-initialize"],
        &["/nonexistent/mcp-server".into()],
    );
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].status, "fail");
    assert!(
        outcomes[0]
            .message
            .contains("cannot start server `/nonexistent/mcp-server`"),
        "{:?}",
        outcomes[0]
    );
}

fn usage_error(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-conformance"))
        .args(args)
        .output()
        .expect("run mcp-conformance");
    assert_eq!(
        output.status.code(),
        Some(2),
        "{args:?} must be a usage error"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_command_lines_say_what_to_fix() {
    let message = usage_error(&["--only", "no-such-check", "--", "true"]);
    assert!(
        message.contains("unknown check `no-such-check`")
            && message.contains("ping-before-initialize"),
        "{message}"
    );
    let message = usage_error(&[]);
    assert!(message.contains("put it after `--`"), "{message}");
    let message = usage_error(&["--echo-args", "{not json", "--", "true"]);
    assert!(message.contains("not valid JSON"), "{message}");
    let message = usage_error(&["--revision", "2099-01-01", "--", "true"]);
    assert!(
        message.contains("unknown revision `2099-01-01`") && message.contains("2026-07-28"),
        "{message}"
    );
    let message = usage_error(&["--only", "modern-discover", "--", "true"]);
    assert!(message.contains("--revision 2026-07-28"), "{message}");
}

fn list(args: &[&str]) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-conformance"))
        .arg("--list")
        .args(args)
        .output()
        .expect("run mcp-conformance --list");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn list_shows_each_check_with_its_revision() {
    let default = list(&[]);
    assert!(
        default
            .iter()
            .all(|l| l.split_whitespace().nth(1) == Some("2024-11-05")),
        "the default is 2024-11-05 alone: {default:?}"
    );
    let all = list(&["--revision", "all"]);
    let mut each = 0;
    for revision in ["2024-11-05", "2025-06-18", "2025-11-25", "2026-07-28"] {
        let listed = list(&["--revision", revision]);
        assert!(!listed.is_empty(), "{revision}");
        assert!(
            listed
                .iter()
                .all(|l| l.split_whitespace().nth(1) == Some(revision)),
            "{listed:?}"
        );
        each += listed.len();
    }
    assert_eq!(each, all.len(), "all is every revision's checks");
    let modern = list(&["--revision", "2026-07-28"]);
    assert!(
        modern.iter().all(|l| l.starts_with("modern-")),
        "{modern:?}"
    );
}

#[test]
fn a_tool_name_the_server_does_not_list_is_a_usage_error_naming_its_tools() {
    // A typo in --slow-tool would make a correct server fail the concurrency checks.
    let server = common::cargo_example("conformance", "reference-server")
        .display()
        .to_string();
    let message = usage_error(&["--slow-tool", "sleeep", "--", &server]);
    assert!(
        message.contains("--slow-tool sleeep: the server lists no tool named \"sleeep\"")
            && message.contains("sleep"),
        "{message}"
    );
    let message = usage_error(&["--error-tool", "fial", "--", &server, "--modern-only"]);
    assert!(
        message.contains("--error-tool fial") && message.contains("fail"),
        "{message}"
    );
}
