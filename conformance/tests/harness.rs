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
    let outcomes = run_suite_with_timeout("2", &["--jobs", "42"], &["sleep".into(), "3600".into()]);
    let ran = not_skipped(&outcomes);
    assert!(ran.len() >= 30, "{outcomes:?}");
    for outcome in ran {
        assert_eq!(outcome.status, "fail", "{outcome:?}");
        assert!(outcome.message.contains("deadline"), "{outcome:?}");
    }
}

#[test]
fn a_server_that_exits_at_once_fails_every_check() {
    let outcomes = run_suite_with_timeout("20", &["--jobs", "8"], &["true".into()]);
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
}
