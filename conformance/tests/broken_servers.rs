//! Every check can fail: the reference fixture server passes the whole suite, and
//! `--break CHECK` (which breaks the one rule CHECK tests) makes exactly that check fail
//! while every other check still passes.

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

fn reference(broken: Option<&str>) -> Vec<Outcome> {
    let mut command = vec![
        cargo_example("conformance", "reference-server")
            .display()
            .to_string(),
    ];
    if let Some(check) = broken {
        command.extend(["--break".to_string(), check.to_string()]);
    }
    // The reference server starts in a millisecond, so a shorter hang guard than for
    // third-party servers still never fires on a healthy run; it bounds the broken
    // modes whose fault is silence.
    run_suite_with_timeout("15", OPTIONS, &command)
}

#[test]
fn reference_server_passes_every_check() {
    let outcomes = reference(None);
    let not_passed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status != "pass")
        .map(|o| format!("{} {}: {}", o.status, o.name, o.message))
        .collect();
    assert!(
        not_passed.is_empty(),
        "the reference server must pass every check:\n{}",
        not_passed.join("\n")
    );
    assert_eq!(outcomes.len(), check_names().len(), "every check ran");
}

#[test]
fn each_broken_server_fails_exactly_its_check() {
    let checks = check_names();
    assert!(
        checks.len() >= 30,
        "at least 30 checks, got {}",
        checks.len()
    );
    let next = Mutex::new(checks.iter());
    let problems = Mutex::new(Vec::new());
    // A few suites at a time: most of a run is waiting on the slow tool.
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                loop {
                    let Some(check) = next.lock().unwrap().next() else {
                        break;
                    };
                    let outcomes = reference(Some(check));
                    let failed: Vec<&Outcome> =
                        outcomes.iter().filter(|o| o.status != "pass").collect();
                    let exactly_it =
                        failed.len() == 1 && failed[0].name == *check && failed[0].status == "fail";
                    if !exactly_it {
                        let got: Vec<String> = failed
                            .iter()
                            .map(|o| format!("{} {}: {}", o.status, o.name, o.message))
                            .collect();
                        problems.lock().unwrap().push(format!(
                            "--break {check}: expected only FAIL {check}, got [{}]",
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
