//! The per-step proxy lifecycle through `awf run`: an agent state with `mcp_proxy` whose
//! "CLI" is tests/fixtures/workflows/fake_agent.py (run as the `claude` provider via
//! options.command), which starts the real `awf mcp-serve` from the injected config and
//! calls Read. Checked: the call reaches the step's audit file and summary, the per-step
//! files are removed, and no process (agent, server, a server that escaped the group)
//! outlives the step for a normal end, a timeout and SIGINT; a server killed mid-step is
//! reported as a crash. A server started with `--serve-in-child` (as the codex provider
//! starts it) ends its session when the process the agent started is killed, even by a
//! SIGKILL right after the group's SIGTERM as Codex sends them, and a crash of its serving
//! child is still a crash.

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Case {
    dir: PathBuf,
    wf: PathBuf,
    pids: PathBuf,
    audit_dir: PathBuf,
    /// awf run's TMPDIR: the audit dir must not lie beneath it, wherever the checkout is.
    tmp: PathBuf,
}

/// A test case, or `None` (the test skips) without python3 outside CI.
fn case(tag: &str, timeout: &str) -> Option<Case> {
    if !common::python_available() {
        return None;
    }
    let dir = common::scratch(&format!("proxy-{tag}"));
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("input.txt"), "the input text\n").unwrap();
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: proxied
states:
  initial: review
  review:
    type: agent
    provider: claude
    prompt: Read input.txt
    timeout: {timeout}
    options:
      command: {agent}
    mcp_proxy:
      enable: true
    on_success: done
  done:
    type: terminal
    message: "{{{{.states.review.Output}}}}"
"#,
            agent = common::fake_agent().display()
        ),
    )
    .unwrap();
    Some(Case {
        pids: dir.join("pids"),
        audit_dir: dir.join("audit"),
        tmp: {
            let tmp = dir.join("tmp");
            std::fs::create_dir_all(&tmp).unwrap();
            tmp
        },
        dir,
        wf,
    })
}

impl Case {
    fn command(&self, mode: &str) -> Command {
        let mut c = common::awf_run(&self.dir.join("work"), &self.wf);
        c.arg("--audit-dir")
            .arg(&self.audit_dir)
            .env("TMPDIR", &self.tmp)
            .env("XDG_STATE_HOME", self.dir.join("state"))
            .env("FAKE_AGENT_MODE", mode)
            .env("FAKE_AGENT_PIDS", &self.pids);
        c
    }

    fn run(&self, mode: &str) -> (Output, Value) {
        self.run_command(self.command(mode))
    }

    /// The fake agent starts the server with `--serve-in-child`, as the codex provider does.
    fn run_in_child(&self, mode: &str) -> (Output, Value) {
        let mut c = self.command(mode);
        c.env("FAKE_AGENT_SERVE_IN_CHILD", "1");
        self.run_command(c)
    }

    fn run_command(&self, mut command: Command) -> (Output, Value) {
        let out = command.output().unwrap();
        let s = common::run_summary(&out);
        (out, s)
    }

    fn pids(&self) -> Vec<i32> {
        common::pids_in(&self.pids)
    }

    /// Nothing the step started is alive, and no process still names its config.
    fn assert_nothing_left(&self) {
        let pids = self.pids();
        assert!(
            pids.len() >= 2,
            "the fake agent recorded its pids: {pids:?}"
        );
        for pid in pids {
            assert!(common::dead(pid), "pid {pid} outlived the step");
        }
        assert!(
            mcp_serve_processes(&self.dir).is_empty(),
            "an awf mcp-serve of this test is still running"
        );
    }

    fn audit(&self) -> Vec<Value> {
        common::audit_dir_lines(&self.audit_dir)
    }
}

/// Exit code `code`, or a panic showing the summary and awf's stderr.
fn assert_exit(out: &Output, s: &Value, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The step's proxy sessions that crashed.
fn crashed_sessions(step: &Value) -> usize {
    step["proxy"]["crashed_sessions"].as_array().unwrap().len()
}

/// Live `awf mcp-serve` processes whose command line mentions a run of this test: their
/// config lives in the run's private dir, so match on the binary and "mcp-serve" and
/// check the cwd is under `dir`.
fn mcp_serve_processes(dir: &Path) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("mcp-serve")
            && cwd.starts_with(dir)
            && !common::dead(pid)
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn a_proxied_step_calls_through_awf_mcp_serve_and_cleans_up() {
    let Some(c) = case("call", "60s") else {
        return;
    };
    let (out, s) = c.run("call");
    assert_exit(&out, &s, 0);
    let review = common::summary_state(&s, "review");
    let output = review["output"].as_str().unwrap();
    assert!(
        output.starts_with("fake agent read:") && output.contains("the input text"),
        "{output:?}"
    );
    assert_eq!(review["tool_calls"]["Read"], 1, "{review:#}");
    assert_eq!(review["proxy"]["sessions"], 1);
    assert_eq!(crashed_sessions(review), 0);
    let audit = c.audit();
    let (calls, results) = (
        common::records(&audit, "tool.call"),
        common::records(&audit, "tool.result"),
    );
    assert_eq!((calls.len(), results.len()), (1, 1));
    assert_eq!(calls[0]["call_id"], results[0]["call_id"]);
    assert_eq!(calls[0]["step_id"], "1-review");
    // The step's traceparent reached the server through the injected env/config.
    assert!(audit.iter().any(|r| r["type"] == "session.end"));
    c.assert_nothing_left();
    // Per-step files (config, generated CLI config) are gone.
    let runs = c.dir.join("state/awf/runs");
    assert!(
        runs.is_dir(),
        "no run directory was made under {}",
        runs.display()
    );
    let leftovers: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy() == s["run_id"].as_str().unwrap())
        .collect();
    assert!(
        leftovers.is_empty(),
        "per-step directories left: {leftovers:?}"
    );
}

#[test]
fn a_server_left_running_outside_the_group_is_stopped_at_the_end_of_the_step() {
    let Some(c) = case("stray", "60s") else {
        return;
    };
    let (out, s) = c.run("stray");
    assert_exit(&out, &s, 0);
    let review = common::summary_state(&s, "review");
    assert_eq!(review["proxy"]["sessions"], 2, "{review:#}");
    // The stray got SIGTERM and ended its session cleanly: no crash.
    assert_eq!(crashed_sessions(review), 0, "{review:#}");
    let audit = c.audit();
    let ends = common::records(&audit, "session.end");
    assert!(ends.iter().any(|r| r["reason"] == "signal"), "{ends:?}");
    c.assert_nothing_left();
}

#[test]
fn a_timeout_stops_agent_and_server() {
    let Some(c) = case("timeout", "3s") else {
        return;
    };
    let (out, s) = c.run("hang");
    assert_exit(&out, &s, 3);
    let review = common::summary_state(&s, "review");
    assert_eq!(review["status"], "timeout");
    assert_eq!(review["tool_calls"]["Read"], 1);
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.TIMEOUT");
    // Progress named the step and its tool calls so far, read from the audit file.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("review") && stderr.contains("Read 1"),
        "{stderr}"
    );
    c.assert_nothing_left();
}

#[test]
fn sigint_stops_agent_and_server() {
    let Some(c) = case("sigint", "10m") else {
        return;
    };
    let mut child = c
        .command("hang")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = PathBuf::from(format!("{}.ready", c.pids.display()));
    // The agent writes the file after its tool call; no deadline needed.
    while !ready.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, s) = common::interrupt_run(&mut child);
    assert_eq!(status.code(), Some(3), "{s:#}");
    assert_eq!(common::summary_state(&s, "review")["status"], "interrupted");
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
    c.assert_nothing_left();
}

#[test]
fn a_server_crash_is_reported_in_the_step_result() {
    let Some(c) = case("crash", "60s") else {
        return;
    };
    let (out, s) = c.run("crash");
    let review = common::summary_state(&s, "review");
    assert_exit(&out, &s, 3);
    assert_eq!(review["status"], "failure");
    assert_eq!(
        review["error"]["code"],
        "EXECUTION.MCP_PROXY.SERVER_CRASHED"
    );
    assert_eq!(crashed_sessions(review), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("crashed"));
    c.assert_nothing_left();
}

#[test]
fn a_crash_of_the_serving_child_is_reported_in_the_step_result() {
    let Some(c) = case("crash-in-child", "60s") else {
        return;
    };
    let (out, s) = c.run_in_child("crash");
    let review = common::summary_state(&s, "review");
    assert_exit(&out, &s, 3);
    assert_eq!(
        review["error"]["code"], "EXECUTION.MCP_PROXY.SERVER_CRASHED",
        "{s:#}"
    );
    assert_eq!(crashed_sessions(review), 1);
    assert_eq!(
        c.pids().len(),
        3,
        "agent, waiter, serving child: {:?}",
        c.pids()
    );
    c.assert_nothing_left();
}

/// Codex's way to end its server: SIGTERM to the server's group and, at once, SIGKILL to
/// the pid it started. The waiter takes the SIGKILL; the serving child ends its session.
#[test]
fn a_server_killed_as_codex_kills_it_ends_its_session_when_it_serves_in_a_child() {
    let Some(c) = case("codex-exit", "60s") else {
        return;
    };
    let (out, s) = c.run_in_child("codex-exit");
    assert_exit(&out, &s, 0);
    let review = common::summary_state(&s, "review");
    assert_eq!(review["proxy"]["sessions"], 1, "{review:#}");
    assert_eq!(crashed_sessions(review), 0);
    let ends: Vec<Value> = c
        .audit()
        .into_iter()
        .filter(|r| r["type"] == "session.end")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["reason"], "signal", "{ends:?}");
    c.assert_nothing_left();
}

/// A SIGKILL of the waiter alone reaches the serving child as SIGTERM (its death signal):
/// the running Bash command is killed, its call answered, the session ended.
#[test]
fn a_sigkill_of_the_waiter_ends_the_serving_child_and_its_command() {
    let Some(c) = case("kill-waiter", "60s") else {
        return;
    };
    let (out, s) = c.run_in_child("kill-waiter");
    assert_exit(&out, &s, 0);
    let review = common::summary_state(&s, "review");
    assert_eq!(crashed_sessions(review), 0);
    let audit = c.audit();
    let bash: Vec<&Value> = audit
        .iter()
        .filter(|r| r["type"] == "tool.result" && r["tool"] == "Bash")
        .collect();
    assert_eq!(
        bash.len(),
        1,
        "the running Bash call was answered: {audit:?}"
    );
    assert!(
        audit
            .iter()
            .any(|r| r["type"] == "session.end" && r["reason"] == "signal"),
        "{audit:?}"
    );
    assert_eq!(
        c.pids().len(),
        4,
        "agent, waiter, serving child, sleep: {:?}",
        c.pids()
    );
    c.assert_nothing_left();
}
