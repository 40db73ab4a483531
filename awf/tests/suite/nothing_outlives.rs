//! A process that leaves its group on purpose (`setsid sleep … &`, as an agent would run
//! it through its own Bash) must not outlive the Bash call, a SIGTERM or a SIGKILL of
//! `awf mcp-serve`, nor the end of `awf run` (step and agent states). Each test starts a
//! `sleep` with a unique argument and looks for it in /proc (bounded wait).

use crate::common;
use crate::fake_model;
use crate::harness;

use common::{Server, eventually, workspace};
use fake_model::{FakeModel, Script};
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

/// A `sleep` argument no other process has: `981.<pid><n>`.
fn marker(n: u32) -> String {
    format!("981.{}{n}", std::process::id())
}

/// True while a live (non-zombie) process runs with `marker` as an argument.
fn marker_alive(marker: &str) -> bool {
    !common::pids_with_arg(marker).is_empty()
}

fn escape(marker: &str) -> String {
    format!(
        "setsid sleep {marker} >/dev/null 2>&1 </dev/null & sleep 0.3; [ -d /proc/$! ] && echo started"
    )
}

#[test]
fn a_setsid_background_process_is_gone_when_the_bash_call_returns() {
    let (_base, root, _) = workspace("outlive-call");
    let m = marker(1);
    let mut s = Server::root(&root);
    let out = s.ok("Bash", json!({"command": escape(&m)}));
    assert!(out.contains("started"), "{out}");
    assert!(
        eventually(|| !marker_alive(&m)),
        "sleep {m} outlived its Bash call"
    );
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_setsid_background_process_is_gone_after_sigterm_of_mcp_serve() {
    let (_base, root, _) = workspace("outlive-sigterm");
    let m = marker(2);
    let mut s = Server::root(&root);
    let id = s.send_request(
        "tools/call",
        json!({"name": "Bash", "arguments": {"command": format!("{}; sleep 1000", escape(&m))}}),
    );
    assert!(eventually(|| marker_alive(&m)), "sleep {m} never started");
    unsafe { libc::kill(s.pid(), libc::SIGTERM) };
    let answer = s.answer(id);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let (status, stderr) = s.wait();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        eventually(|| !marker_alive(&m)),
        "sleep {m} outlived SIGTERM of awf mcp-serve"
    );
}

fn awf_run(dir: &Path, wf_body: &str) -> std::process::Output {
    let wf = dir.join("wf.yaml");
    std::fs::write(&wf, wf_body).unwrap();
    common::awf_run(dir, &wf).output().unwrap()
}

fn one_step(command: &str) -> String {
    format!(
        "\
name: outlive
states:
  initial: work
  work:
    type: step
    command: |
      {}
    timeout: 60s
    on_success: done
    on_failure: done
  done:
    type: terminal
",
        command.replace('\n', "\n      ")
    )
}

#[test]
fn a_setsid_background_process_is_gone_after_sigkill_of_mcp_serve() {
    // No awf run above the server to clean up: the kernel must end the call (the parent-
    // death signals of its waiter and init, and the end of its PID namespace).
    let (_base, root, _) = workspace("outlive-sigkill");
    let (m, shell_sleep) = (marker(3), marker(33));
    let mut s = Server::root(&root);
    s.send_request(
        "tools/call",
        json!({"name": "Bash", "arguments": {"command": format!("{}; sleep {shell_sleep}", escape(&m))}}),
    );
    assert!(eventually(|| marker_alive(&m)), "sleep {m} never started");
    unsafe { libc::kill(s.pid(), libc::SIGKILL) };
    let (status, _) = s.wait();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        eventually(|| !marker_alive(&m) && !marker_alive(&shell_sleep)),
        "sleep {m} outlived SIGKILL of awf mcp-serve"
    );
}

#[test]
fn a_setsid_background_process_of_a_step_is_gone_when_awf_run_ends() {
    let (_base, root, _) = workspace("outlive-step");
    let m = marker(4);
    let out = awf_run(&root, &one_step(&escape(&m)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("started"), "{stdout}");
    assert!(
        eventually(|| !marker_alive(&m)),
        "sleep {m} outlived the step and awf run"
    );
}

#[test]
fn a_step_s_command_dies_with_a_sigkill_of_awf_run() {
    // Nothing of awf's runs after a SIGKILL: the kernel ends the command (its parent-death
    // signal, armed by the child awf starts it as) and the run resumes it later.
    let (_base, root, _) = workspace("step-sigkill");
    let m = marker(7);
    let wf = root.join("wf.yaml");
    // `exec`: the command is the process awf started (what the shell forks is the
    // group's, which a SIGKILL of awf run does not reach).
    std::fs::write(&wf, one_step(&format!("exec sleep {m}"))).unwrap();
    let mut child = common::awf(&root)
        .arg("run")
        .arg(&wf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(|| marker_alive(&m)), "the step never started");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        eventually(|| !marker_alive(&m)),
        "sleep {m} outlived a SIGKILL of awf run"
    );
}

#[test]
fn a_setsid_background_process_of_an_agent_is_gone_when_awf_run_ends() {
    let Some(program) = harness::agent_cli("claude") else {
        return;
    };
    let m = marker(5);
    let fake = FakeModel::start(Script::new().call("Bash", json!({"command": escape(&m)})));
    let step = harness::Step::new("outlive-agent");
    let options = json!({
        "command": program,
        "api_key_env": "AWF_TEST_FAKE_KEY",
        "model": "claude-sonnet-4-5",
        "base_url": fake.base_url(),
    });
    let run = harness::run_workflow(&step, "claude", &options, "{enable: true}", None, &[]);
    assert!(
        run.audit
            .iter()
            .any(|r| r["type"] == "tool.result" && r["tool"] == "Bash"),
        "the agent made no Bash call: {:#}\n{}",
        run.summary,
        run.stderr
    );
    assert!(
        fake.answers().iter().any(|a| a.contains("started")),
        "the escape did not start: {}",
        fake.describe()
    );
    assert!(
        eventually(|| !marker_alive(&m)),
        "sleep {m} outlived the agent step and awf run"
    );
}
