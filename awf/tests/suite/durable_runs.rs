//! Durable runs through the real binary: `awf run` SIGKILLed at a chosen state and at
//! random instants, then `awf resume`; `awf status` and `awf history` of live, dead,
//! stopped and completed runs. Every state appends a line to a counter file outside the
//! workspace, so that what ran how many times is counted, not assumed.

use crate::common;
use crate::fake_model;
use crate::harness;

use common::{eventually, run_summary, summary_state};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const AWF: &str = env!("CARGO_BIN_EXE_awf");

/// A workspace, a state directory of its own (so `history` sees this test's runs only),
/// a counter file and a `go` file that blocking states wait for.
struct Case {
    dir: PathBuf,
    state: PathBuf,
    /// awf's TMPDIR: beside the state directory, never above it (awf refuses a state or
    /// audit directory beneath the temp dir, and the checkout may lie under /tmp).
    tmp: PathBuf,
    count: PathBuf,
    go: PathBuf,
}

impl Case {
    fn new(tag: &str) -> Case {
        let base = common::scratch(&format!("durable-{tag}"));
        let dir = base.join("work");
        let state = base.join("state");
        let tmp = base.join("tmp");
        std::fs::create_dir_all(base.join("home")).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        Case {
            dir,
            state,
            tmp,
            count: base.join("count.txt"),
            go: base.join("go"),
        }
    }

    fn workflow(&self, text: &str) -> PathBuf {
        let text = text
            .replace("COUNT", &self.count.display().to_string())
            .replace("GO", &self.go.display().to_string());
        let wf = self.dir.join("wf.yaml");
        std::fs::write(&wf, text).unwrap();
        wf
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(AWF);
        c.args(args)
            .current_dir(&self.dir)
            .env("XDG_STATE_HOME", &self.state)
            .env("HOME", self.state.with_file_name("home"))
            .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
            .env("TMPDIR", &self.tmp)
            .env("AWF_TEST_OPENAI_KEY", "sk-test-123456")
            .env("AWF_PLUGINS_PATH", "")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        c
    }

    fn awf(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `awf run` in the background; its run id from the first line of its stderr.
    fn spawn_run(&self, wf: &Path) -> (Child, String) {
        let mut child = self
            .command(&["run", wf.to_str().unwrap(), "--output", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        std::io::BufRead::read_line(&mut err, &mut first).unwrap();
        // The rest of stderr is drained so that awf never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let id = first
            .strip_prefix("awf: run ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no run id on the first line: {first:?}"))
            .to_string();
        (child, id)
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.count)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn times(&self, what: &str) -> usize {
        self.lines().iter().filter(|l| *l == what).count()
    }

    /// Waits until the counter holds `what`, then SIGKILLs the run and reaps it.
    fn kill_when(&self, child: &mut Child, what: &str) {
        assert!(
            eventually(|| self.times(what) > 0),
            "{what} never started: {:?}",
            self.lines()
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn status(&self, id: &str) -> Value {
        let out = self.awf(&["status", id, "--output", "json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        // Releases any blocking state a failed test left waiting.
        let _ = std::fs::write(&self.go, "");
    }
}

const FIVE: &str = r#"name: five
inputs:
  - name: who
    default: world
states:
  initial: one
  one:
    type: step
    command: echo one >> COUNT; echo "ONE {{.inputs.who}}"
    on_success: two
  two:
    type: step
    command: echo two >> COUNT; echo TWO
    on_success: three
  three:
    type: step
    command: echo three >> COUNT; while [ ! -e GO ]; do sleep 0.02; done; echo THREE
    on_success: four
  four:
    type: step
    command: echo four >> COUNT; echo "four saw {{.states.one.Output}} and {{.states.two.Output}}"
    on_success: five
  five:
    type: step
    command: echo five >> COUNT; echo FIVE
    on_success: done
  done:
    type: terminal
    message: "{{.states.four.Output}}"
"#;

#[test]
fn a_run_killed_during_state_3_resumes_at_3_and_never_reruns_1_and_2() {
    let c = Case::new("five");
    let wf = c.workflow(FIVE);
    let (mut child, id) = c.spawn_run(&wf);
    // While it runs: status says running, and resume refuses.
    assert!(eventually(|| c.times("three") > 0));
    assert_eq!(c.status(&id)["status"], "running");
    let refused = c.awf(&["resume", &id]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("still running") && err.contains("RESUME_REFUSED"),
        "{err}"
    );
    c.kill_when(&mut child, "three");
    // The step's shell died with awf: nothing waits on for the go file.
    let go = c.go.display().to_string();
    assert!(
        eventually(|| processes_naming(&go).is_empty()),
        "left running: {:?}",
        processes_naming(&go)
    );

    // Dead: status and history say died, never running.
    let s = c.status(&id);
    assert_eq!(s["status"], "died", "{s:#}");
    let states: Vec<(&str, &str)> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["state"].as_str().unwrap(), x["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("one", "succeeded"),
            ("two", "succeeded"),
            ("three", "running")
        ]
    );
    let human = String::from_utf8_lossy(&c.awf(&["status", &id]).stdout).into_owned();
    assert!(
        human.contains("died") && human.contains("awf resume") && human.contains(" so far"),
        "{human}"
    );
    let h: Value = serde_json::from_slice(
        &c.awf(&["history", "--status", "died", "--output", "json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(h.as_array().unwrap().len(), 1, "{h:#}");
    assert_eq!(h[0]["run_id"], id.as_str());

    std::fs::write(&c.go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let summary = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{summary:#}");
    assert_eq!(summary["run_id"], id.as_str());
    let human = String::from_utf8_lossy(&c.awf(&["status", &id]).stdout).into_owned();
    assert!(
        human.contains("succeeded") && human.contains(", took ") && !human.contains("so far"),
        "{human}"
    );
    // 1 and 2 ran once, 3 twice (it was running: at-least-once), 4 and 5 once.
    assert_eq!(
        c.lines(),
        ["one", "two", "three", "three", "four", "five"],
        "{summary:#}"
    );
    // The outputs of 1 and 2 reached 4's template.
    assert_eq!(
        summary_state(&summary, "four")["output"],
        "four saw ONE world and TWO"
    );
    assert_eq!(
        summary_state(&summary, "done")["output"],
        "four saw ONE world and TWO"
    );
    let s = c.status(&id);
    assert_eq!(s["status"], "succeeded");
    assert_eq!(s["resumes"], 1);
    // Once in the history, with its latest status.
    let h: Value = serde_json::from_slice(&c.awf(&["history", "--output", "json"]).stdout).unwrap();
    assert_eq!(h.as_array().unwrap().len(), 1, "{h:#}");
    assert_eq!(h[0]["status"], "succeeded");
    // A completed run is not resumed; --from runs it again from a state.
    let again = c.awf(&["resume", &id]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert!(err.contains("completed") && err.contains("--from"), "{err}");
    let out = c.awf(&["resume", &id, "--from", "four"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(c.times("four"), 2);
    assert_eq!(c.times("one"), 1);
}

#[test]
fn a_changed_workflow_is_refused_without_force() {
    let c = Case::new("changed");
    let wf = c.workflow(FIVE);
    let (mut child, id) = c.spawn_run(&wf);
    c.kill_when(&mut child, "three");
    std::fs::write(&c.go, "").unwrap();
    let mut text = std::fs::read_to_string(&wf).unwrap();
    text = text.replace("echo FIVE", "echo FIVE CHANGED");
    std::fs::write(&wf, text).unwrap();
    let out = c.awf(&["resume", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("changed since run") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(c.times("four"), 0, "nothing ran");
    let out = c.awf(&["resume", &id, "--force", "--output", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("WARN") && err.contains("changed"), "{err}");
    assert_eq!(
        summary_state(&run_summary(&out), "five")["output"],
        "FIVE CHANGED"
    );
    // Unknown runs and bad ids name the fix.
    let out = c.awf(&["resume", "0123456789abcdef"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no run") && err.contains("awf history"),
        "{err}"
    );
    let out = c.awf(&["status", "../../etc"]);
    assert!(!out.status.success());
}

#[test]
fn parallel_killed_after_one_branch_succeeded_resumes_the_other_two() {
    let c = Case::new("parallel");
    let wf = c.workflow(
        r#"name: par
states:
  initial: fan
  fan:
    type: parallel
    parallel: [a, b, c]
    strategy: all_succeed
    max_concurrent: 3
    on_success: done
  a:
    type: step
    command: echo a >> COUNT
  b:
    type: step
    command: echo b >> COUNT; while [ ! -e GO ]; do sleep 0.02; done
  c:
    type: step
    command: echo c >> COUNT; while [ ! -e GO ]; do sleep 0.02; done
  done:
    type: terminal
"#,
    );
    let (mut child, id) = c.spawn_run(&wf);
    assert!(eventually(|| c.times("b") == 1 && c.times("c") == 1));
    // a succeeded and its record was written before the kill.
    assert!(eventually(
        || c.status(&id)["units"]["fan"] == serde_json::json!([0])
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::write(&c.go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(c.times("a"), 1, "{:?}", c.lines());
    assert_eq!(c.times("b"), 2);
    assert_eq!(c.times("c"), 2);
}

#[test]
fn for_each_of_10_killed_after_6_resumes_the_other_4() {
    let c = Case::new("each");
    let wf = c.workflow(
        r#"name: each
states:
  initial: all
  all:
    type: for_each
    items: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    body: [work]
    on_complete: done
  work:
    type: step
    command: echo "item {{.loop.Item}}" >> COUNT; if [ {{.loop.Item}} = 6 ]; then while [ ! -e GO ]; do sleep 0.02; done; fi; echo "did {{.loop.Item}}"
  done:
    type: terminal
    message: "{{.states.all.Output}}"
"#,
    );
    let (mut child, id) = c.spawn_run(&wf);
    c.kill_when(&mut child, "item 6");
    std::fs::write(&c.go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    for i in 0..10 {
        let expected = if i == 6 { 2 } else { 1 };
        assert_eq!(c.times(&format!("item {i}")), expected, "{:?}", c.lines());
    }
    // The iterations' outputs in item order, the restored ones included.
    let all: Value =
        serde_json::from_str(summary_state(&s, "all")["output"].as_str().unwrap()).unwrap();
    let want: Vec<String> = (0..10).map(|i| format!("did {i}")).collect();
    assert_eq!(all, serde_json::json!(want));
}

#[test]
fn a_while_killed_in_iteration_3_of_4_resumes_in_iteration_3() {
    let c = Case::new("while");
    let wf = c.workflow(
        r#"name: loop
states:
  initial: fix
  fix:
    type: while
    while: "true"
    max_iterations: 4
    body: [work]
    on_complete: done
  work:
    type: step
    command: echo "iteration {{.loop.Index1}}" >> COUNT; if [ {{.loop.Index1}} = 3 ]; then while [ ! -e GO ]; do sleep 0.02; done; fi; echo "did {{.loop.Index1}}"
  done:
    type: terminal
    message: "{{.states.fix.Output}}, last {{.states.work.Output}}"
"#,
    );
    let (mut child, id) = c.spawn_run(&wf);
    c.kill_when(&mut child, "iteration 3");
    std::fs::write(&c.go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    // Iterations 1 and 2 had ended: they never run again; 3 was running: it runs again.
    for (i, want) in [(1, 1), (2, 1), (3, 2), (4, 1)] {
        assert_eq!(
            c.times(&format!("iteration {i}")),
            want,
            "iteration {i}: {:?}",
            c.lines()
        );
    }
    assert_eq!(summary_state(&s, "fix")["type"], "while", "{s:#}");
    assert_eq!(summary_state(&s, "fix")["output"], "completed 4 iterations");
    // The restored iterations are in the summary, in order, the body's outputs as they were.
    let did: Vec<&str> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["state"] == "work")
        .map(|x| x["output"].as_str().unwrap().trim())
        .collect();
    assert_eq!(did, ["did 1", "did 2", "did 3", "did 4"], "{s:#}");
    assert_eq!(
        summary_state(&s, "done")["output"],
        "completed 4 iterations, last did 4"
    );
}

#[test]
fn a_while_that_ended_before_the_kill_is_a_while_on_resume_with_its_body_outputs() {
    let c = Case::new("while-ended");
    let wf = c.workflow(
        r#"name: loop
states:
  initial: fix
  fix:
    type: while
    while: "true"
    max_iterations: 2
    body: [work]
    on_complete: after
  work:
    type: step
    command: echo "iteration {{.loop.Index1}}" >> COUNT; echo "did {{.loop.Index1}}"
  after:
    type: step
    command: echo after >> COUNT; while [ ! -e GO ]; do sleep 0.02; done; echo "after {{.states.work.Output}}"
    on_success: done
  done:
    type: terminal
    message: "{{.states.after.Output}}"
"#,
    );
    let (mut child, id) = c.spawn_run(&wf);
    c.kill_when(&mut child, "after");
    std::fs::write(&c.go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(c.times("iteration 1"), 1, "{:?}", c.lines());
    assert_eq!(c.times("iteration 2"), 1, "{:?}", c.lines());
    assert_eq!(c.times("after"), 2, "{:?}", c.lines());
    assert_eq!(summary_state(&s, "fix")["type"], "while", "{s:#}");
    assert_eq!(summary_state(&s, "done")["output"], "after did 2", "{s:#}");
}

/// A for_each over `n` items, `concurrent` at once; each item counts itself and prints
/// 6 KB (so that the journal outgrows 256 KiB and is compacted into the snapshot several
/// times in a run), its number last.
fn big_for_each(c: &Case, n: usize, concurrent: usize, then: &str) -> PathBuf {
    let items = (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    c.workflow(&format!(
        r#"name: big
states:
  initial: all
  all:
    type: for_each
    items: [{items}]
    max_iterations: {n}
    max_concurrent: {concurrent}
    body: [work]
    on_complete: {then}
  work:
    type: step
    command: echo "item {{{{.loop.Item}}}}" >> COUNT; head -c 6000 /dev/zero | tr '\0' x; echo " {{{{.loop.Item}}}}"
  wait:
    type: step
    command: echo wait >> COUNT; while [ ! -e GO ]; do sleep 0.02; done
    on_success: done
  done:
    type: terminal
"#
    ))
}

#[test]
fn a_for_each_killed_mid_append_or_mid_compaction_never_reruns_a_recorded_item() {
    let c = Case::new("journal");
    let n = 150;
    let wf = big_for_each(&c, n, 4, "done");
    let mut seed = std::process::id() as u64 ^ 0x2545_f491_4f6c_dd1d;
    eprintln!("seed {seed}");
    for round in 0..6 {
        let _ = std::fs::remove_file(&c.count);
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let (mut child, id) = c.spawn_run(&wf);
        // Killed at a random instant once some items ran: mid-item, mid-append of the
        // journal or mid-compaction, whichever it falls on.
        let at = 1 + (seed >> 33) as usize % (n - 20);
        assert!(eventually(|| c.lines().len() >= at), "{:?}", c.lines());
        let _ = child.kill();
        child.wait().unwrap();
        let dir = c.state.join("awf/runs-state").join(&id);
        let journal = dir.join("journal.jsonl");
        let text = std::fs::read(&journal).unwrap();
        match round % 3 {
            // A torn tail: the last append cut in its middle, as a kill or a crash of the
            // machine leaves it before its fsync returned.
            1 if text.ends_with(b"\n") && text.len() > 1 => {
                let start = text[..text.len() - 1]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                let cut = start + (text.len() - start) / 2;
                std::fs::write(&journal, &text[..cut]).unwrap();
            }
            // Stopped mid-compaction: a temp snapshot never renamed, and a journal that
            // still holds an entry the snapshot holds (it was not emptied yet) — here one
            // that names an item that never ran, which must not count as done.
            2 => {
                let snapshot: Value =
                    serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap())
                        .unwrap();
                let held = snapshot["journal"].as_u64().unwrap();
                let never = (0..n)
                    .rev()
                    .find(|i| c.times(&format!("item {i}")) == 0)
                    .unwrap();
                let stale = format!(
                    "{{\"seq\":{held},\"at\":0,\"entry\":{{\"op\":\"unit\",\"parent\":\"all\",\"index\":{never},\"records\":[{{\"state\":\"work\",\"type\":\"step\",\"status\":\"succeeded\",\"outcome\":\"success\",\"step\":0,\"attempt\":1,\"started_ms\":0,\"output\":\"stale\"}}]}}}}\n"
                );
                std::fs::write(&journal, [stale.as_bytes(), &text].concat()).unwrap();
                let snap = std::fs::read(dir.join("state.json")).unwrap();
                std::fs::write(dir.join(".state.json.tmp-1"), &snap[..snap.len() / 2]).unwrap();
            }
            _ => {}
        }
        let before = c.status(&id);
        if before["status"] == "succeeded" {
            continue;
        }
        let recorded: Vec<u64> = before["units"]["all"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_u64().unwrap()).collect())
            .unwrap_or_default();
        let out = c.awf(&["resume", &id, "--output", "json"]);
        let s = run_summary(&out);
        assert_eq!(out.status.code(), Some(0), "round {round}: {s:#}");
        for i in 0..n {
            let times = c.times(&format!("item {i}"));
            if recorded.contains(&(i as u64)) {
                assert_eq!(times, 1, "round {round}: item {i} was recorded as done");
            } else {
                assert!(
                    (1..=2).contains(&times),
                    "round {round}: item {i} ran {times}×"
                );
            }
        }
        // Every iteration's output, restored or run again, in item order.
        let all: Vec<String> =
            serde_json::from_str(summary_state(&s, "all")["output"].as_str().unwrap()).unwrap();
        assert_eq!(all.len(), n, "round {round}");
        for (i, o) in all.iter().enumerate() {
            assert!(
                o.trim_end().ends_with(&format!(" {i}")),
                "round {round}: {i}: {o}"
            );
        }
        assert_eq!(c.status(&id)["status"], "succeeded");
    }
}

#[test]
fn a_for_each_of_1000_items_writes_its_run_state_in_proportion_to_its_items() {
    let c = Case::new("journal-bytes");
    let n = 1000;
    let items = (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
    let wf = c.workflow(&format!(
        "\
name: many
states:
  initial: all
  all:
    type: for_each
    items: [{items}]
    max_iterations: {n}
    max_concurrent: 32
    body: [work]
    on_complete: wait
  work:
    type: step
    command: \"true\"
  wait:
    type: step
    command: echo wait >> COUNT; while [ ! -e GO ]; do sleep 0.02; done
    on_success: done
  done:
    type: terminal
"
    ));
    let (mut child, _id) = c.spawn_run(&wf);
    // The summary of 1000 items outgrows a pipe: it is drained.
    let mut stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    assert!(eventually(|| c.times("wait") == 1));
    // What awf itself wrote so far (the run state, its progress lines): a run state
    // rewritten whole after each item wrote about 150 MB here (n² / 2 records).
    let io = std::fs::read_to_string(format!("/proc/{}/io", child.id())).unwrap();
    let written: u64 = io
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eprintln!("awf wrote {written} bytes for {n} items");
    std::fs::write(&c.go, "").unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        written < 20 << 20,
        "awf wrote {written} bytes for {n} items"
    );
}

#[test]
fn a_run_killed_at_random_instants_always_resumes_and_never_reruns_a_completed_state() {
    let c = Case::new("random");
    let mut states = String::new();
    let names = ["s1", "s2", "s3", "s4", "s5", "s6"];
    for (i, n) in names.iter().enumerate() {
        let next = names.get(i + 1).copied().unwrap_or("done");
        states.push_str(&format!(
            "  {n}:
    type: step
    command: echo {n} >> COUNT; sleep 0.03; echo {n}
    on_success: {next}
"
        ));
    }
    let wf = c.workflow(&format!(
        "\
name: random
states:
  initial: s1
{states}  done:
    type: terminal
"
    ));
    // A small LCG: instants spread over the run without a dependency; the seed is printed.
    let mut seed = std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    eprintln!("seed {seed}");
    for round in 0..20 {
        let _ = std::fs::remove_file(&c.count);
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let delay = std::time::Duration::from_millis((seed >> 33) % 400);
        let (mut child, id) = c.spawn_run(&wf);
        std::thread::sleep(delay);
        let _ = child.kill();
        child.wait().unwrap();
        // The state file always parses, whatever instant the kill came at.
        let before = c.status(&id);
        let done: Vec<String> = before["states"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] == "succeeded")
            .map(|s| s["state"].as_str().unwrap().to_string())
            .collect();
        let out = if before["status"] == "succeeded" {
            None
        } else {
            let out = c.awf(&["resume", &id, "--output", "json"]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round} ({delay:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(out)
        };
        for n in names {
            let times = c.times(n);
            if done.iter().any(|d| d == n) {
                assert_eq!(times, 1, "round {round}: {n} had completed\n{before:#}");
            } else {
                assert!((1..=2).contains(&times), "round {round}: {n} ran {times}×");
            }
        }
        assert_eq!(c.status(&id)["status"], "succeeded", "{out:?}");
    }
}

#[test]
fn an_openai_compatible_agent_step_killed_mid_tool_call_runs_again_on_resume() {
    let c = Case::new("agent");
    // The agent's Bash writes in the workspace (its only writable place).
    let count = c.dir.join("agent-count.txt");
    let go = c.dir.join("agent-go");
    let model = fake_model::FakeModel::start(fake_model::Script::new().call(
        "Bash",
        serde_json::json!({"command": format!(
            "echo agent >> {}; while [ ! -e {} ]; do sleep 0.02; done; echo released",
            count.display(), go.display())}),
    ));
    let wf = c.workflow(&format!(
        r#"name: agent-five
states:
  initial: one
  one:
    type: step
    command: echo one >> COUNT; echo ONE
    on_success: two
  two:
    type: step
    command: echo two >> COUNT; echo TWO
    on_success: three
  three:
    type: agent
    provider: openai_compatible
    prompt: Wait for the go file.
    timeout: 60s
    options:
      base_url: {base}/v1
      model: fake-model
      api_key_env: AWF_TEST_OPENAI_KEY
    mcp_proxy:
      enable: true
    on_success: four
  four:
    type: step
    command: echo four >> COUNT; echo "four saw {{{{.states.one.Output}}}} {{{{.states.two.Output}}}}"
    on_success: five
  five:
    type: step
    command: echo five >> COUNT
    on_success: done
  done:
    type: terminal
"#,
        base = model.base_url()
    ));
    let (mut child, id) = c.spawn_run(&wf);
    let agent_ran = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(eventually(|| agent_ran() == 1), "{:?}", c.lines());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(c.status(&id)["status"], "died");
    std::fs::write(&go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(c.lines(), ["one", "two", "four", "five"], "{s:#}");
    assert_eq!(agent_ran(), 2, "the agent step ran again from its start");
    assert_eq!(summary_state(&s, "four")["output"], "four saw ONE TWO");
    assert!(
        summary_state(&s, "three")["output"]
            .as_str()
            .unwrap()
            .contains("released"),
        "{s:#}"
    );
}

const TEN: &str = r#"name: ten
states:
  initial: all
  all:
    type: for_each
    items: [a, b, c, d, e, f, g, h, i, j]
    body: [work]
    max_concurrent: 2
    on_complete: done
  work:
    type: step
    command: echo "item {{.loop.Index}}" >> COUNT; echo "out {{.loop.Item}} at {{.loop.Index}}"
  done:
    type: terminal
"#;

#[test]
fn three_shards_of_a_for_each_run_each_item_once_and_gather_in_item_order() {
    let c = Case::new("shards");
    let wf = c.workflow(TEN);
    // Three processes at once, as three pods of an Indexed Job would be.
    let runs: Vec<_> = (0..3)
        .map(|i| {
            c.command(&[
                "run",
                wf.to_str().unwrap(),
                "--shard",
                &format!("{i}/3"),
                "--output",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let ids: Vec<String> = runs
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            let s = run_summary(&out);
            assert_eq!(out.status.code(), Some(0), "{s:#}");
            s["run_id"].as_str().unwrap().to_string()
        })
        .collect();
    for i in 0..10 {
        assert_eq!(c.times(&format!("item {i}")), 1, "{:?}", c.lines());
    }
    // Any order of the run ids.
    let out = c.awf(&["gather", &ids[2], &ids[0], &ids[1], "--output", "json"]);
    let g: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{g:#}");
    assert_eq!(g["status"], "succeeded");
    let want: Vec<String> = "abcdefghij"
        .chars()
        .enumerate()
        .map(|(i, ch)| format!("out {ch} at {i}"))
        .collect();
    assert_eq!(g["outputs"]["all"], serde_json::json!(want), "{g:#}");
    let human =
        String::from_utf8_lossy(&c.awf(&["gather", &ids[0], &ids[1], &ids[2]]).stdout).into_owned();
    assert!(
        human.contains("3 shards of ten") && human.contains("all (10 items)"),
        "{human}"
    );

    // A missing shard, a shard twice, and a shard of another workflow are refused.
    let out = c.awf(&["gather", &ids[0], &ids[2]]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("shard 1/3 missing"),
        "{err}"
    );
    let out = c.awf(&["gather", &ids[0], &ids[0], &ids[1], &ids[2]]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("given twice"), "{err}");
    let other = c.workflow(&TEN.replace("echo \"out", "echo \"other"));
    let out = c
        .command(&[
            "run",
            other.to_str().unwrap(),
            "--shard",
            "1/3",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    let odd = run_summary(&out)["run_id"].as_str().unwrap().to_string();
    let out = c.awf(&["gather", &ids[0], &odd, &ids[2]]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("different workflows"), "{err}");
    // A bad --shard names the fix.
    let out = c.awf(&["run", wf.to_str().unwrap(), "--shard", "3/3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("INDEX/COUNT"),
        "{err}"
    );
}

#[test]
fn a_claude_step_killed_mid_tool_call_runs_again_on_resume() {
    let Some(claude) = harness::agent_cli("claude") else {
        return;
    };
    let c = Case::new("claude");
    let count = c.dir.join("agent-count.txt");
    let go = c.dir.join("agent-go");
    let model = fake_model::FakeModel::start(fake_model::Script::new().call(
        "Bash",
        serde_json::json!({"command": format!(
            "echo agent >> {}; while [ ! -e {} ]; do sleep 0.02; done; echo released",
            count.display(), go.display())}),
    ));
    let wf = c.workflow(&format!(
        r#"name: claude-resume
states:
  initial: one
  one:
    type: step
    command: echo one >> COUNT; echo ONE
    on_success: two
  two:
    type: agent
    provider: claude
    prompt: Wait for the go file.
    timeout: 120s
    options: {{command: "{program}", model: claude-sonnet-4-5, base_url: "{base}", api_key_env: AWF_TEST_FAKE_KEY}}
    mcp_proxy:
      enable: true
    on_success: three
  three:
    type: step
    command: echo three >> COUNT; echo "three saw {{{{.states.one.Output}}}}"
    on_success: done
  done:
    type: terminal
"#,
        program = claude.display(),
        base = model.base_url()
    ));
    let (mut child, id) = c.spawn_run(&wf);
    let agent_ran = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(
        eventually(|| agent_ran() == 1),
        "claude never called Bash: {}",
        model.describe()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(c.status(&id)["status"], "died");
    // The CLI died with awf (and its awf mcp-serve with it): nothing goes on calling the
    // model for a run that is gone.
    assert!(
        eventually(|| processes_naming(&id).is_empty()),
        "left running: {:?}",
        processes_naming(&id)
    );
    std::fs::write(&go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.lines(), ["one", "three"], "{s:#}");
    assert_eq!(agent_ran(), 2, "the claude step ran again from its start");
    assert_eq!(summary_state(&s, "three")["output"], "three saw ONE");
    assert!(
        summary_state(&s, "two")["output"]
            .as_str()
            .unwrap()
            .contains("released"),
        "{s:#}"
    );
}

/// The files named `name` anywhere below `dir`.
fn files_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            } else if entry.file_name() == name {
                found.push(path);
            }
        }
    }
    found
}

/// The command lines of the processes that name `needle` in theirs.
fn processes_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(needle).then_some(text)
        })
        .collect()
}

/// A `provider` state with `resume: continue` killed while its Bash call waits: the session
/// was named before the CLI started (the run state has it), and `awf resume` continues it:
/// the model gets the interrupted turn back (its tool call, in the wire's `tool_call` form),
/// so Bash is not called again.
fn resume_continue_goes_on_in_the_session(provider: &str, model_name: &str, tool_call: &str) {
    let Some(program) = harness::agent_cli(provider) else {
        return;
    };
    let c = Case::new(&format!("{provider}-continue"));
    let count = c.dir.join("agent-count.txt");
    let go = c.dir.join("agent-go");
    let model = fake_model::FakeModel::start(fake_model::Script::new().call(
        "Bash",
        serde_json::json!({"command": format!(
            "echo agent >> {}; while [ ! -e {} ]; do sleep 0.02; done; echo released",
            count.display(), go.display())}),
    ));
    let wf = c.workflow(&format!(
        r#"name: {provider}-continue
states:
  initial: work
  work:
    type: agent
    provider: {provider}
    prompt: Wait for the go file, then say done.
    timeout: 120s
    resume: continue
    options: {{command: "{program}", model: {model_name}, base_url: "{base}", api_key_env: AWF_TEST_FAKE_KEY}}
    mcp_proxy:
      enable: true
    on_success: done
  done:
    type: terminal
"#,
        program = program.display(),
        base = model.base_url()
    ));
    let (mut child, id) = c.spawn_run(&wf);
    let agent_ran = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(eventually(|| agent_ran() == 1), "{}", model.describe());
    // The session was named before the CLI started: the run state has it.
    let before = c.status(&id);
    let session = before["states"][0]["session_id"].clone();
    assert!(session.is_string(), "{before:#}");
    // Killed once the CLI has written the turn to its session (Claude Code writes its
    // transcript a moment after it starts the call; on a loaded machine later than the
    // call reaches Bash): a session the CLI never wrote cannot be continued.
    if provider == "claude" {
        let transcript = format!("{}.jsonl", session.as_str().unwrap());
        assert!(
            eventually(|| files_named(&c.state, &transcript)
                .iter()
                .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(tool_call)))),
            "Claude Code never wrote {transcript} under {}",
            c.state.display()
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let asked_before = model.main_requests().len();
    std::fs::write(&go, "").unwrap();
    let out = c.awf(&["resume", &id, "--output", "json"]);
    let s = run_summary(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary_state(&s, "work")["session_id"], session);
    // The model got the interrupted conversation back (its Bash call was in it), so it did
    // not call Bash a second time: the session went on rather than starting afresh.
    let after = model.main_requests();
    let resumed = after[asked_before].body.to_string();
    assert!(
        resumed.contains("Wait for the go file") && resumed.contains(tool_call),
        "the resumed request does not hold the interrupted turn: {resumed}"
    );
    assert_eq!(agent_ran(), 1, "{}", model.describe());
}

#[test]
fn a_claude_step_with_resume_continue_goes_on_in_its_session_after_a_kill() {
    resume_continue_goes_on_in_the_session("claude", "claude-sonnet-4-5", "tool_use");
}

#[test]
fn a_gemini_step_with_resume_continue_goes_on_in_its_session_after_a_kill() {
    resume_continue_goes_on_in_the_session("gemini", "gemini-2.5-flash", "functionCall");
}
