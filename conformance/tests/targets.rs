//! The suite against every target in `common::TARGETS`: our own servers must pass every
//! check; a third-party server must fail exactly the checks listed, with a reason, in its
//! `expected/<name>.txt` (so a list that goes stale in either direction fails CI).

mod common;

use std::sync::Mutex;

use common::{TARGETS, check_names, command, expected_failures, run_suite};

#[test]
fn every_target_fails_exactly_its_expected_deviations() {
    let problems = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for target in TARGETS {
            let problems = &problems;
            scope.spawn(move || {
                let Some(command) = command(target) else {
                    return;
                };
                let mut options = vec!["--revision", target.revision];
                options.extend(target.options);
                let outcomes = run_suite(&options, &command);
                let expected = expected_failures(target.name);
                let mut report = Vec::new();
                for outcome in &outcomes {
                    match (outcome.status.as_str(), expected.get(&outcome.name)) {
                        ("fail", None) => report.push(format!(
                            "  unexpected FAIL {}: {}",
                            outcome.name, outcome.message
                        )),
                        ("pass", Some(deviation)) if !deviation.sometimes => report.push(format!(
                            "  {} passes now but expected/{}.txt lists it ({}): remove that line",
                            outcome.name, target.name, deviation.reason
                        )),
                        _ => {}
                    }
                }
                let summary: Vec<String> = outcomes
                    .iter()
                    .map(|o| format!("{} {}", o.status, o.name))
                    .collect();
                eprintln!("{}: {}", target.name, summary.join(", "));
                if !report.is_empty() {
                    problems.lock().unwrap().push(format!(
                        "{} ({}):\n{}",
                        target.name,
                        command.join(" "),
                        report.join("\n")
                    ));
                }
            });
        }
    });
    let problems = problems.into_inner().unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn expected_lists_name_existing_checks() {
    for target in TARGETS {
        let checks = check_names(target.revision);
        for name in expected_failures(target.name).keys() {
            assert!(
                checks.contains(name),
                "expected/{}.txt names `{name}`, which is no check; valid: {}",
                target.name,
                checks.join(", ")
            );
        }
    }
}
