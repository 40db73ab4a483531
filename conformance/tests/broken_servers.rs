//! Every check can fail: the reference fixture server passes the checks of every revision,
//! and `--break CHECK` (which breaks the one rule CHECK tests) makes exactly that check fail
//! while every other check, of every revision, still passes. The 2026-07-28 checks are also
//! run against the fixture's `--modern-only` mode, a server without the legacy era.

mod common;

use std::sync::Mutex;

use common::{Outcome, cargo_example, check_names, run_suite_with_timeout};

const OPTIONS: &[&str] = &[
    "--slow-tool",
    "sleep",
    "--slow-args",
    r#"{"ms": 1000}"#,
    "--error-tool",
    "fail",
];

/// Where two checks test one rule, breaking it fails both. `initialize-newer-version` asks
/// initialize for 2025-06-18 and wants a result; every 2025-06-18 check starts with that
/// very initialize.
const ALSO_FAILS: &[(&str, &[&str])] = &[(
    "initialize-newer-version",
    &[
        "v2025-06-18-initialize",
        "v2025-06-18-tools-list-shape",
        "v2025-06-18-tools-call",
        "v2025-06-18-structured-content",
    ],
)];

/// The suite of `revision` (a date or `all`) against the reference server started with
/// `server_args`.
fn reference(revision: &str, server_args: &[&str]) -> Vec<Outcome> {
    let mut command = vec![
        cargo_example("conformance", "reference-server")
            .display()
            .to_string(),
    ];
    command.extend(server_args.iter().map(|a| a.to_string()));
    let mut options = vec!["--revision", revision];
    options.extend(OPTIONS);
    // The reference server starts in a millisecond and answers at once (but for the slow
    // tool's second), so a hang guard far shorter than for third-party servers still never
    // fires on a healthy run; it bounds the broken modes whose fault is silence (four
    // cases wait for it in full).
    run_suite_with_timeout("5", &options, &command)
}

fn not_passed(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| o.status != "pass")
        .map(|o| format!("{} {}: {}", o.status, o.name, o.message))
        .collect()
}

#[test]
fn reference_server_passes_every_check_of_every_revision() {
    let outcomes = reference("all", &[]);
    let not_passed = not_passed(&outcomes);
    assert!(
        not_passed.is_empty(),
        "the reference server must pass every check:\n{}",
        not_passed.join("\n")
    );
    assert_eq!(outcomes.len(), check_names("all").len(), "every check ran");
}

#[test]
fn modern_only_reference_server_passes_every_2026_07_28_check() {
    let outcomes = reference("2026-07-28", &["--modern-only"]);
    let not_passed = not_passed(&outcomes);
    assert!(
        not_passed.is_empty(),
        "the modern-only reference server must pass every 2026-07-28 check:\n{}",
        not_passed.join("\n")
    );
    assert_eq!(outcomes.len(), check_names("2026-07-28").len());
}

/// One suite run of [`each_broken_server_fails_exactly_its_check`]: the revision, the server's
/// arguments (a `--break`), and the checks that must fail (all others must pass).
struct Case {
    revision: &'static str,
    server_args: Vec<String>,
    must_fail: Vec<String>,
}

fn cases(revision: &'static str, server_args: &[&str]) -> Vec<Case> {
    let checks = check_names(revision);
    assert!(!checks.is_empty(), "revision {revision} has checks");
    checks
        .iter()
        .map(|check| {
            let mut must_fail = vec![check.clone()];
            for (broken, also) in ALSO_FAILS {
                if broken == check && revision == "all" {
                    must_fail.extend(also.iter().map(|c| c.to_string()));
                }
            }
            let mut args: Vec<String> = server_args.iter().map(|a| a.to_string()).collect();
            args.extend(["--break".to_string(), check.clone()]);
            Case {
                revision,
                server_args: args,
                must_fail,
            }
        })
        .collect()
}

#[test]
fn each_broken_server_fails_exactly_its_check() {
    let mut all = cases("all", &[]);
    assert!(all.len() >= 70, "at least 70 checks, got {}", all.len());
    all.extend(cases("2026-07-28", &["--modern-only"]));
    let next = Mutex::new(all.iter());
    let problems = Mutex::new(Vec::new());
    // Eight suites at a time: most of a run is waiting, on the slow tool or (for a broken
    // mode that keeps silent) on the hang guard.
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                loop {
                    let Some(case) = next.lock().unwrap().next() else {
                        break;
                    };
                    let args: Vec<&str> = case.server_args.iter().map(String::as_str).collect();
                    let outcomes = reference(case.revision, &args);
                    let failed: Vec<&Outcome> =
                        outcomes.iter().filter(|o| o.status != "pass").collect();
                    let mut failed_names: Vec<&str> =
                        failed.iter().map(|o| o.name.as_str()).collect();
                    let mut must_fail: Vec<&str> =
                        case.must_fail.iter().map(String::as_str).collect();
                    failed_names.sort_unstable();
                    must_fail.sort_unstable();
                    let only_fails = failed.iter().all(|o| o.status == "fail");
                    if failed_names != must_fail || !only_fails {
                        let got: Vec<String> = failed
                            .iter()
                            .map(|o| format!("{} {}: {}", o.status, o.name, o.message))
                            .collect();
                        problems.lock().unwrap().push(format!(
                            "{} (--revision {}): expected FAIL of exactly {}, got [{}]",
                            case.server_args.join(" "),
                            case.revision,
                            must_fail.join(", "),
                            got.join("; ")
                        ));
                    }
                }
            });
        }
    });
    let problems = problems.into_inner().unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
