//! `parallel` states through `awf run`: the three strategies (which branches are stopped,
//! the state's status and exit code, the branches' outputs after it), `max_concurrent`
//! (checked from the branches themselves), the state's timeout and Ctrl-C stopping every
//! branch with nothing left behind, and agent branches each with its own tool proxy,
//! audit file and span under the parallel state's.

use crate::common;
use crate::fake_model;
use crate::harness;
use crate::otlp_receiver;

use common::*;
use fake_model::{FakeModel, Script};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const AWF: &str = env!("CARGO_BIN_EXE_awf");

struct Case {
    dir: PathBuf,
    work: PathBuf,
}

fn case(tag: &str) -> Case {
    let dir = scratch(&format!("parallel-{tag}"));
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    Case { dir, work }
}

impl Case {
    fn workflow(&self, states: &str) -> PathBuf {
        let wf = self.dir.join("wf.yaml");
        std::fs::write(
            &wf,
            format!(
                "\
name: par
states:
  initial: review
{states}"
            ),
        )
        .unwrap();
        wf
    }

    fn command(&self, wf: &Path) -> Command {
        let mut c = Command::new(AWF);
        c.arg("run")
            .arg(wf)
            .args(["--output", "json", "--audit-dir"])
            .arg(self.dir.join("audit"))
            .current_dir(&self.work)
            .env("TMPDIR", fake_model::private_tmp(&self.dir.join("audit")))
            .env("AWF_PLUGINS_PATH", "")
            .env("XDG_STATE_HOME", self.dir.join("state"))
            .env_remove("TRACEPARENT");
        c
    }

    fn run(&self, wf: &Path) -> (i32, Value) {
        let out = self
            .command(wf)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), run_summary(&out))
    }
}

/// The states of a parallel `review` over step branches; `body` of each is its command.
fn steps(strategy: &str, extra: &str, branches: &[(&str, &str)]) -> String {
    let names: Vec<&str> = branches.iter().map(|(n, _)| *n).collect();
    let mut s = format!(
        "  review:
    type: parallel
    parallel: [{}]
    strategy: {strategy}
{extra}    on_success: done
    on_failure: failed
",
        names.join(", ")
    );
    for (name, command) in branches {
        s.push_str(&format!(
            "  {name}:
    type: step
    command: {command:?}
    on_success: done
"
        ));
    }
    s.push_str(
        "  done:
    type: terminal
    message: \"{{.states.a.Output}}\"
  failed:
    type: terminal
    status: failure
",
    );
    s
}

fn status<'a>(s: &'a Value, state: &str) -> &'a str {
    summary_state(s, state)["status"].as_str().unwrap()
}

/// Processes whose command line holds `marker`.
fn alive(marker: &str) -> Vec<i32> {
    pids_with_arg(marker)
}

#[test]
fn all_succeed_stops_the_others_at_the_first_failure() {
    let c = case("all");
    let marker = format!("900.{}1", std::process::id());
    let wf = c.workflow(&steps(
        "all_succeed",
        "",
        &[
            ("a", "echo from-a"),
            ("b", "sleep 0.2; echo broken >&2; exit 4"),
            ("slow", &format!("sleep {marker}")),
        ],
    ));
    let (code, s) = c.run(&wf);
    assert_ne!(code, 0, "{s:#}");
    assert_eq!(status(&s, "a"), "success", "{s:#}");
    assert_eq!(status(&s, "b"), "failure", "{s:#}");
    assert_eq!(status(&s, "slow"), "cancelled", "{s:#}");
    assert_eq!(status(&s, "review"), "failure", "{s:#}");
    let review = summary_state(&s, "review");
    assert!(
        review["error"]["message"]
            .as_str()
            .unwrap()
            .contains("b failure"),
        "{review:#}"
    );
    // Its output: each branch's, by name.
    let out: Value = serde_json::from_str(review["output"].as_str().unwrap()).unwrap();
    assert_eq!(out["a"], "from-a");
    assert_eq!(status(&s, "failed"), "failure");
    assert!(
        alive(&marker).is_empty(),
        "the cancelled branch's sleep is still alive"
    );
}

#[test]
fn any_succeed_stops_the_others_at_the_first_success_and_best_effort_runs_all() {
    let c = case("any");
    let marker = format!("900.{}2", std::process::id());
    let wf = c.workflow(&steps(
        "any_succeed",
        "",
        &[("a", "echo quick"), ("slow", &format!("sleep {marker}"))],
    ));
    let (code, s) = c.run(&wf);
    assert_eq!(code, 0, "{s:#}");
    assert_eq!(status(&s, "review"), "success");
    assert_eq!(status(&s, "slow"), "cancelled", "{s:#}");
    assert!(alive(&marker).is_empty());
    // The branch's output reaches the states after the parallel one.
    assert_eq!(status(&s, "done"), "success");
    assert_eq!(summary_state(&s, "done")["output"], "quick");

    let wf = c.workflow(&steps(
        "best_effort",
        "",
        &[("a", "exit 3"), ("b", "sleep 0.3; echo b-ran")],
    ));
    let (code, s) = c.run(&wf);
    assert_eq!(code, 0, "{s:#}");
    assert_eq!(status(&s, "review"), "success");
    assert_eq!(status(&s, "a"), "failure");
    assert_eq!(summary_state(&s, "a")["exit_code"], 3);
    assert_eq!(status(&s, "b"), "success");
    assert_eq!(summary_state(&s, "b")["output"], "b-ran");
}

#[test]
fn max_concurrent_is_never_exceeded() {
    let c = case("max");
    let running = c.dir.join("running");
    std::fs::create_dir_all(&running).unwrap();
    let seen = c.dir.join("seen");
    // Each branch notes how many branches are inside at once, while it is inside.
    let body = |n: &str| {
        format!(
            "mkdir {r}/{n}; ls {r} | wc -l >> {seen}; sleep 0.3; ls {r} | wc -l >> {seen}; rmdir {r}/{n}",
            r = running.display(),
            seen = seen.display()
        )
    };
    let names = ["a", "b2", "b3", "b4", "b5"];
    let bodies: Vec<String> = names.iter().map(|n| body(n)).collect();
    let branches: Vec<(&str, &str)> = names
        .iter()
        .copied()
        .zip(bodies.iter().map(String::as_str))
        .collect();
    let wf = c.workflow(&steps("all_succeed", "    max_concurrent: 2\n", &branches));
    // The branches write outside the workspace: the plain `step` states are not sandboxed.
    let (code, s) = c.run(&wf);
    assert_eq!(code, 0, "{s:#}");
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 10, "{counts:?}");
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");
    assert!(counts.contains(&2), "never two at once: {counts:?}");
}

#[test]
fn the_state_s_timeout_and_ctrl_c_stop_every_branch_and_leave_nothing() {
    let c = case("stop");
    let marker = format!("900.{}3", std::process::id());
    let wf = c.workflow(&steps(
        "best_effort",
        "    timeout: 1s\n",
        &[
            ("a", &format!("sleep {marker}")),
            ("b", &format!("sleep {marker}")),
        ],
    ));
    let (code, s) = c.run(&wf);
    assert_ne!(code, 0, "{s:#}");
    assert_eq!(status(&s, "review"), "timeout", "{s:#}");
    assert_eq!(
        summary_state(&s, "review")["error"]["code"],
        "EXECUTION.RUN.TIMEOUT"
    );
    assert!(alive(&marker).is_empty());

    let wf = c.workflow(&steps(
        "all_succeed",
        "",
        &[
            ("a", &format!("sleep {marker}")),
            ("b", &format!("sleep {marker}")),
        ],
    ));
    let mut child = c
        .command(&wf)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(|| alive(&marker).len() == 2),
        "the branches never started"
    );
    let (st, s) = interrupt_run(&mut child);
    assert_eq!(st.code(), Some(3), "{s:#}");
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
    // Said as `awf status` says it.
    assert_eq!(s["status"], "cancelled", "{s:#}");
    assert_eq!(status(&s, "review"), "interrupted", "{s:#}");
    assert!(alive(&marker).is_empty(), "a branch outlived Ctrl-C");
}

#[test]
fn agent_branches_each_get_their_own_proxy_audit_and_span() {
    if !python_available() {
        return;
    }
    let receiver = otlp_receiver::Receiver::start();
    let c = case("agents");
    let models: Vec<FakeModel> = ["one", "two", "three"]
        .iter()
        .map(|n| {
            FakeModel::start(Script::new().call(
                "Write",
                json!({"path": format!("{n}.txt"), "content": format!("{n}\n")}),
            ))
        })
        .collect();
    let mut states = String::from(
        "  review:
    type: parallel
    parallel: [one, two, three]
    on_success: done
",
    );
    for (n, m) in ["one", "two", "three"].iter().zip(&models) {
        states.push_str(&format!(
            "  {n}:
    type: agent
    provider: openai_compatible
    prompt: Write {n}.txt
    options: {{base_url: \"{}/v1\", model: fake-model}}
    mcp_proxy: {{enable: true}}
    on_success: done
",
            m.base_url()
        ));
    }
    states.push_str("  done:\n    type: terminal\n");
    let wf = c.workflow(&states);
    let out = c
        .command(&wf)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .output()
        .unwrap();
    let s = run_summary(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in ["one", "two", "three"] {
        assert_eq!(
            std::fs::read_to_string(c.work.join(format!("{n}.txt"))).unwrap(),
            format!("{n}\n")
        );
        assert_eq!(summary_state(&s, n)["tool_calls"]["Write"], 1, "{s:#}");
    }
    // Three audit files, each with its one call (call and result).
    let mut files: Vec<PathBuf> = std::fs::read_dir(c.dir.join("audit"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".audit.jsonl"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in &files {
        let records = audit_lines(f);
        assert_eq!(
            records.iter().filter(|r| r["type"] == "tool.call").count(),
            1,
            "{f:?}"
        );
        assert_eq!(
            records
                .iter()
                .filter(|r| r["type"] == "tool.result")
                .count(),
            1,
            "{f:?}"
        );
    }
    let spans = receiver.spans();
    let review = spans
        .iter()
        .find(|s| s.name == "awf.step review")
        .expect("the parallel state's span");
    for n in ["one", "two", "three"] {
        let step = spans
            .iter()
            .find(|s| s.name == format!("awf.step {n}"))
            .unwrap_or_else(|| panic!("no span of {n}"));
        assert_eq!(step.parent_span_id, review.span_id, "{n}");
        let write = spans
            .iter()
            .find(|s| s.name == "tools/call Write" && s.parent_span_id == step.span_id);
        assert!(write.is_some(), "no Write span under {n}");
    }
}

#[test]
fn validate_names_unknown_branches_terminal_branches_and_ignored_transitions() {
    let c = case("validate");
    let wf = c.workflow(
        "  review:
    type: parallel
    parallel: [ghost, done, a]
    strategy: most
    max_concurrent: 0
    on_success: done
  a:
    type: step
    command: \"true\"
    on_success: done
  done:
    type: terminal
",
    );
    let out = common::awf_validate(&c.dir, &wf).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].as_array().unwrap();
    let find = |path: &str| {
        problems
            .iter()
            .find(|p| p["path"] == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {v:#}"))
    };
    assert!(
        find("states.review.parallel[0]")["message"]
            .as_str()
            .unwrap()
            .contains("not defined")
    );
    assert!(
        find("states.review.parallel[0]")["hint"]
            .as_str()
            .unwrap()
            .contains("a")
    );
    assert!(
        find("states.review.parallel[1]")["message"]
            .as_str()
            .unwrap()
            .contains("terminal")
    );
    assert!(
        find("states.review.strategy")["hint"]
            .as_str()
            .unwrap()
            .contains("any_succeed")
    );
    assert!(
        find("states.review.max_concurrent")["message"]
            .as_str()
            .unwrap()
            .contains("from 1")
    );
    let w = find("states.a.on_success");
    assert_eq!(w["severity"], "warning", "{w:#}");
    assert!(
        w["message"].as_str().unwrap().contains("not followed"),
        "{w:#}"
    );
    assert_eq!(out.status.code(), Some(2), "{v:#}");
}

#[test]
fn for_each_runs_its_body_per_item_with_the_loop_variables() {
    let c = case("each");
    let wf = c.workflow(
        r#"  review:
    type: step
    command: "echo '[\"x\", \"y z\", \"$(touch PWNED)\"]'"
    on_success: each
  each:
    type: for_each
    items: "{{.states.review.Output}}"
    body: [show, upper]
    on_complete: done
  show:
    type: step
    command: "echo {{.loop.Index1}}/{{.loop.Length}} {{.loop.Item}} first={{.loop.First}} last={{.loop.Last}} index={{.loop.Index}}"
    on_success: done
  upper:
    type: step
    command: "echo {{.states.show.Output}} | tr a-z A-Z"
    on_success: done
  done:
    type: terminal
    message: "{{.states.each.Output}}"
"#,
    );
    let (code, s) = c.run(&wf);
    assert_eq!(code, 0, "{s:#}");
    let shows: Vec<&Value> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "show")
        .collect();
    assert_eq!(shows.len(), 3, "{s:#}");
    assert_eq!(shows[0]["output"], "1/3 x first=true last=false index=0");
    assert_eq!(shows[1]["output"], "2/3 y z first=false last=false index=1");
    // An item is text, never shell code.
    assert_eq!(
        shows[2]["output"],
        "3/3 $(touch PWNED) first=false last=true index=2"
    );
    assert!(!c.work.join("PWNED").exists());
    assert_eq!(shows[2]["iteration"], 2);
    // Each iteration's output is its last body state's; the next body state saw this
    // iteration's result.
    let out: Value =
        serde_json::from_str(summary_state(&s, "each")["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        out,
        json!([
            "1/3 X FIRST=TRUE LAST=FALSE INDEX=0",
            "2/3 Y Z FIRST=FALSE LAST=FALSE INDEX=1",
            "3/3 $(TOUCH PWNED) FIRST=FALSE LAST=TRUE INDEX=2"
        ])
    );
}

#[test]
fn for_each_over_a_literal_list_respects_max_concurrent_and_stops_at_a_failure() {
    let c = case("each-max");
    let running = c.dir.join("running");
    std::fs::create_dir_all(&running).unwrap();
    let seen = c.dir.join("seen");
    let wf = c.workflow(&format!(
        r#"  review:
    type: for_each
    items: [a, b, c, d, e, f]
    max_concurrent: 3
    body: [work]
    on_complete: done
  work:
    type: step
    command: "mkdir {r}/{{{{.loop.Item}}}}; ls {r} | wc -l >> {seen}; sleep 0.3; ls {r} | wc -l >> {seen}; rmdir {r}/{{{{.loop.Item}}}}"
    on_success: done
  done:
    type: terminal
"#,
        r = running.display(),
        seen = seen.display()
    ));
    let (code, s) = c.run(&wf);
    assert_eq!(code, 0, "{s:#}");
    let counts: Vec<usize> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 12, "{counts:?}");
    assert!(counts.iter().all(|&n| n <= 3), "{counts:?}");
    assert!(
        counts.iter().any(|&n| n >= 2),
        "never two at once: {counts:?}"
    );

    // One after another (the default), a failure stops the iterations after it.
    let wf = c.workflow(
        r#"  review:
    type: for_each
    items: '[1, 2, 3, 4]'
    body: [work]
    on_complete: done
    on_failure: failed
  work:
    type: step
    command: "test {{.loop.Item}} -lt 2"
    on_success: done
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"#,
    );
    let (code, s) = c.run(&wf);
    assert_ne!(code, 0, "{s:#}");
    let works: Vec<&str> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "work")
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        works,
        ["success", "failure", "cancelled", "cancelled"],
        "{s:#}"
    );
    let review = summary_state(&s, "review");
    assert!(
        review["error"]["message"]
            .as_str()
            .unwrap()
            .contains("work (item 2) failure"),
        "{review:#}"
    );

    // More items than max_iterations: the first ones run, the rest do not (as AWF).
    let wf = c.workflow(
        "  review:
    type: for_each
    items: [1, 2, 3]
    max_iterations: 2
    body: [work]
    on_complete: done
    on_failure: done
  work:
    type: step
    command: \"echo item {{.loop.Item}}\"
    on_success: done
  done:
    type: terminal
",
    );
    let (_, s) = c.run(&wf);
    let review = summary_state(&s, "review");
    assert_eq!(review["status"], "success", "{s:#}");
    let ran: Vec<&str> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["state"] == "work")
        .filter_map(|x| x["output"].as_str())
        .collect();
    assert_eq!(ran, ["item 1", "item 2"], "{s:#}");
}

#[test]
fn three_claude_branches_edit_their_own_files_and_ctrl_c_leaves_nothing() {
    let Some(program) = harness::agent_cli("claude") else {
        return;
    };
    let c = case("claude");
    let models: Vec<FakeModel> = ["one", "two", "three"]
        .iter()
        .map(|n| {
            FakeModel::start(Script::new().call(
                "Write",
                json!({"path": format!("{n}.txt"), "content": format!("{n}\n")}),
            ))
        })
        .collect();
    let workflow = |models: &[FakeModel]| {
        let mut states = String::from(
            "  review:
    type: parallel
    parallel: [one, two, three]
    on_success: done
",
        );
        for (n, m) in ["one", "two", "three"].iter().zip(models) {
            let opts = harness::model_options("claude", Some(&program), m);
            states.push_str(&format!(
                "  {n}:
    type: agent
    provider: claude
    prompt: Write {n}.txt
    options: {opts}
    mcp_proxy: {{enable: true}}
    on_success: done
"
            ));
        }
        states.push_str("  done:\n    type: terminal\n");
        c.workflow(&states)
    };
    let wf = workflow(&models);
    let out = c
        .command(&wf)
        .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let s = run_summary(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in ["one", "two", "three"] {
        assert_eq!(
            std::fs::read_to_string(c.work.join(format!("{n}.txt"))).unwrap(),
            format!("{n}\n")
        );
        assert_eq!(summary_state(&s, n)["tool_calls"]["Write"], 1, "{s:#}");
    }
    let audits = std::fs::read_dir(c.dir.join("audit"))
        .unwrap()
        .flatten()
        .count();
    assert_eq!(audits, 3);

    // Models that never answer: the three CLIs hang until Ctrl-C, then nothing is left.
    let hanging: Vec<FakeModel> = (0..3)
        .map(|_| FakeModel::start(Script::new().endless()))
        .collect();
    let wf = workflow(&hanging);
    let mut child = c
        .command(&wf)
        .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let root = child.id() as i32;
    assert!(
        eventually(|| hanging.iter().all(|m| !m.requests().is_empty())),
        "the three CLIs never asked their models"
    );
    let config_dir = c.dir.join("state").display().to_string();
    let (st, s) = interrupt_run(&mut child);
    assert_eq!(st.code(), Some(3), "{s:#}");
    assert_eq!(status(&s, "review"), "interrupted", "{s:#}");
    let _ = root;
    assert!(
        eventually(|| pids_with_arg(&config_dir).is_empty()),
        "processes of the run outlived Ctrl-C: {:?}",
        pids_with_arg(&config_dir)
    );
}

/// Three openai_compatible branches of one run, each with its own in-process tool server,
/// each making its Bash calls (`calls[branch]`, one model turn each) at the same time as the
/// others: every branch's calls run as if alone, whatever the interleaving. `rounds` runs;
/// each must end (the state's timeout would say a hang). Returns the last round's case
/// and summary.
fn bash_branches(tag: &str, rounds: usize, calls: [&[&str]; 3]) -> (Case, Value) {
    let mut last = None;
    for round in 0..rounds {
        let c = case(&format!("{tag}-{round}"));
        let models: Vec<FakeModel> = calls
            .iter()
            .map(|commands| {
                let script = commands.iter().fold(Script::new(), |s, command| {
                    s.call("Bash", json!({"command": command}))
                });
                FakeModel::start(script)
            })
            .collect();
        let mut states = String::from(
            "  review:
    type: parallel
    parallel: [one, two, three]
    timeout: 120s
    on_success: done
",
        );
        for (n, m) in ["one", "two", "three"].iter().zip(&models) {
            states.push_str(&format!(
                "  {n}:
    type: agent
    provider: openai_compatible
    prompt: Run it
    options: {{base_url: \"{}/v1\", model: fake-model}}
    mcp_proxy: {{enable: true}}
    on_success: done
",
                m.base_url()
            ));
        }
        states.push_str("  done:\n    type: terminal\n");
        let wf = c.workflow(&states);
        let (code, s) = c.run(&wf);
        assert_eq!(code, 0, "round {round}: {s:#}");
        for (n, commands) in ["one", "two", "three"].iter().zip(calls) {
            assert_eq!(
                summary_state(&s, n)["tool_calls"]["Bash"],
                commands.len(),
                "round {round}: {s:#}"
            );
        }
        last = Some((c, s));
    }
    last.expect("at least one round")
}

/// When the last Bash call of `branch` ended, from its audit file (RFC 3339 times in UTC
/// compare as text).
fn last_result(c: &Case, branch: &str) -> String {
    let files: Vec<PathBuf> = std::fs::read_dir(c.dir.join("audit"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.to_string_lossy()
                .ends_with(&format!("{branch}.audit.jsonl"))
        })
        .collect();
    assert_eq!(files.len(), 1, "the audit file of {branch}: {files:?}");
    audit_lines(&files[0])
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .filter_map(|r| r["ts"].as_str().map(str::to_owned))
        .max()
        .unwrap_or_else(|| panic!("no tool.result of {branch}"))
}

#[test]
fn parallel_openai_branches_with_quick_bash_calls_never_hang_each_other() {
    bash_branches(
        "bash-quick",
        100,
        [&["echo one"], &["echo two"], &["echo three"]],
    );
}

#[test]
fn a_branch_in_a_long_call_does_not_hold_up_the_others() {
    let quick: &[&str] = &["echo a"; 10];
    let (c, _) = bash_branches("bash-slow", 1, [&["sleep 3"], quick, quick]);
    let slow = last_result(&c, "one");
    for quick in ["two", "three"] {
        assert!(
            last_result(&c, quick) < slow,
            "{quick}'s ten calls ended after the sleeping branch's one"
        );
    }
}

#[test]
fn a_branch_flooding_its_process_cap_does_not_hold_up_the_others() {
    let flood = "for i in $(seq 1000); do sleep 4 & done 2>/dev/null; wait";
    let quick: &[&str] = &["echo a"; 5];
    let (c, _) = bash_branches("bash-flood", 1, [&[flood], quick, quick]);
    let flooding = last_result(&c, "one");
    for quick in ["two", "three"] {
        assert!(
            last_result(&c, quick) < flooding,
            "{quick}'s calls ended after the flooding branch's"
        );
    }
}
