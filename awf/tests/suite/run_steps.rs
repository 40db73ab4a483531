//! `awf run` with `step` and `terminal` states through the real binary: transitions,
//! templates, inputs, exit codes, the JSON summary, and that no process a step started
//! outlives it — for a normal end, a timeout and SIGINT (checked in /proc). Hostile
//! template values (inputs, and an agent's final text from the fake model) reach step
//! commands as literal text in every quote context; `| raw` pastes them as shell text.

use crate::common;
use crate::fake_model;

use common::{pids_in, run_summary, summary_state};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn scratch(tag: &str) -> PathBuf {
    common::scratch(&format!("run-{tag}"))
}

fn awf_run(dir: &Path, wf: &Path, extra: &[&str]) -> Output {
    common::awf_run(dir, wf).args(extra).output().unwrap()
}

#[test]
fn steps_run_to_a_success_terminal_with_templates() {
    let dir = scratch("ok");
    let wf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workflows/valid_steps.yaml");
    let out = awf_run(&dir, &wf, &["--input", "who=bob"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(s["status"], "success");
    assert_eq!(summary_state(&s, "greet")["output"], "hello bob");
    assert_eq!(summary_state(&s, "greet")["exit_code"], 0);
    assert_eq!(summary_state(&s, "shout")["output"], "HELLO BOB");
    assert_eq!(summary_state(&s, "done")["output"], "HELLO BOB");
    let order: Vec<&str> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["state"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["greet", "shout", "done"]);
    // Progress on stderr names each state.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("→ greet (step)") && err.contains("→ done (terminal)"),
        "{err}"
    );
}

#[test]
fn a_failing_step_follows_on_failure_and_the_failure_terminal_exits_3() {
    let dir = scratch("fail");
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        r#"
name: fails
states:
  initial: check
  check:
    type: step
    command: echo checking; echo broken >&2; exit 4
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
    message: "check said {{.states.check.Output}} and exited {{.states.check.ExitCode}}"
"#,
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(summary_state(&s, "check")["status"], "failure");
    assert_eq!(summary_state(&s, "check")["exit_code"], 4);
    assert!(
        summary_state(&s, "check")["error"]["message"]
            .as_str()
            .unwrap()
            .contains("broken")
    );
    assert_eq!(
        summary_state(&s, "failed")["output"],
        "check said checking and exited 4"
    );
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.TERMINAL_FAILURE");
}

#[test]
fn inputs_are_checked_before_anything_runs() {
    let dir = scratch("inputs");
    let wf =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workflows/valid_steps.yaml");
    let out = awf_run(&dir, &wf, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("USER.INPUT.MISSING"));
    // An undeclared input is passed on, as AWF does, and said.
    let out = awf_run(&dir, &wf, &["--input", "who=x", "--input", "whom=y"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--input whom"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = awf_run(&dir, &wf, &["--input", "who"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
}

#[test]
fn an_invalid_workflow_runs_nothing() {
    let dir = scratch("invalid");
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        "\
name: x
states:
  initial: a
  a:
    type: step
    command: touch ran
    on_success: nowhere
",
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("WORKFLOW.STATE.UNKNOWN_TARGET"));
    assert!(!dir.join("ran").exists());
    let s = run_summary(&out);
    assert_eq!(s["status"], "invalid");
    assert_eq!(s["problems"][0]["path"], "states.a.on_success");
}

fn background_workflow(dir: &Path, timeout: &str, body: &str) -> PathBuf {
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: background
states:
  initial: work
  work:
    type: step
    command: |
{body}
    timeout: {timeout}
    on_success: done
  done:
    type: terminal
"#
        ),
    )
    .unwrap();
    wf
}

#[test]
fn a_normal_end_leaves_no_background_process() {
    let dir = scratch("bg");
    // The step exits at once but leaves a sleeper behind in its process group.
    let wf = background_workflow(
        &dir,
        "60s",
        "      sleep 300 &\n      echo $! > pids\n      echo started",
    );
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(summary_state(&s, "work")["output"], "started");
    let p = pids_in(&dir.join("pids"));
    assert_eq!(p.len(), 1);
    assert!(
        common::dead(p[0]),
        "the background sleep {} outlived its step",
        p[0]
    );
}

#[test]
fn a_timeout_stops_the_whole_group_even_when_it_ignores_sigterm() {
    let dir = scratch("timeout");
    // The shell and its child ignore SIGTERM: only the SIGKILL after the grace period ends them.
    let wf = background_workflow(
        &dir,
        "1s",
        "      trap '' TERM\n      echo $$ > pids\n      sleep 300 &\n      echo $! >> pids\n      wait",
    );
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    assert_eq!(summary_state(&s, "work")["status"], "timeout");
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.TIMEOUT");
    let p = pids_in(&dir.join("pids"));
    assert_eq!(p.len(), 2);
    for pid in p {
        assert!(common::dead(pid), "pid {pid} outlived the timed-out step");
    }
}

#[test]
fn sigint_stops_the_step_and_the_run() {
    let dir = scratch("sigint");
    let wf = background_workflow(
        &dir,
        "10m",
        "      echo $$ > pids\n      sleep 300 &\n      echo $! >> pids\n      wait",
    );
    let mut child = common::awf_run(&dir, &wf)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (no deadline: the step writes both pids first thing) until the step runs.
    while pids_in(&dir.join("pids")).len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (status, s) = common::interrupt_run(&mut child);
    assert_eq!(status.code(), Some(3), "{s:#}");
    assert_eq!(summary_state(&s, "work")["status"], "interrupted");
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
    for pid in pids_in(&dir.join("pids")) {
        assert!(common::dead(pid), "pid {pid} outlived the interrupted step");
    }
}

/// Three steps that echo the input `x` unquoted, in double and in single quotes.
fn echo_workflow(dir: &Path, value_template: &str) -> PathBuf {
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: echo-values
inputs:
  - name: x
states:
  initial: bare
  bare:
    type: step
    command: echo {value_template}
    on_success: double
  double:
    type: step
    command: echo "{value_template}"
    on_success: single
  single:
    type: step
    command: echo '{value_template}'
    on_success: done
  done:
    type: terminal
"#
        ),
    )
    .unwrap();
    wf
}

#[test]
fn hostile_inputs_reach_step_commands_as_literal_text() {
    for (i, value) in [
        "$(touch PWNED)",
        "`touch PWNED`",
        "; touch PWNED",
        "x'; touch PWNED; '",
    ]
    .into_iter()
    .enumerate()
    {
        let dir = scratch(&format!("hostile-input-{i}"));
        let wf = echo_workflow(&dir, "{{.inputs.x}}");
        let out = awf_run(&dir, &wf, &["--input", &format!("x={value}")]);
        let s = run_summary(&out);
        assert_eq!(out.status.code(), Some(0), "{value}: {s:#}");
        assert!(
            !dir.join("PWNED").exists(),
            "the input {value:?} ran as shell code"
        );
        for step in ["bare", "double", "single"] {
            assert_eq!(summary_state(&s, step)["output"], value, "{step}: {s:#}");
        }
    }
}

#[test]
fn the_raw_filter_pastes_the_value_as_shell_text() {
    let dir = scratch("raw");
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        r#"
name: raw
inputs:
  - name: x
states:
  initial: build
  build:
    type: step
    command: echo {{.inputs.x | raw}} "{{.inputs.x}}"
    on_success: done
  done:
    type: terminal
"#,
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &["--input", "x=a; touch RAN; echo b"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert!(dir.join("RAN").exists(), "a raw value is shell text");
    assert_eq!(
        summary_state(&s, "build")["output"],
        "a\nb a; touch RAN; echo b"
    );
}

#[test]
fn an_agent_final_text_reaches_later_step_commands_as_literal_text() {
    let hostile = r#"ok"; echo PWNED > f; echo "$(touch PWNED2)'"#;
    let model = fake_model::FakeModel::start(fake_model::Script::new().answer_prefix(hostile));
    let dir = scratch("hostile-agent");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let audit_dir = dir.join("audit");
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: agent-then-steps
states:
  initial: ask
  ask:
    type: agent
    provider: openai_compatible
    prompt: Say something.
    timeout: 60s
    options:
      base_url: {base}/v1
      model: fake-model
      api_key_env: AWF_TEST_OPENAI_KEY
    mcp_proxy:
      enable: true
    on_success: bare
  bare:
    type: step
    command: echo {{{{.states.ask.Output}}}}
    on_success: double
  double:
    type: step
    command: echo "{{{{.states.ask.Output}}}}"
    on_success: single
  single:
    type: step
    command: echo '{{{{ .states.ask.Output }}}}'
    on_success: done
  done:
    type: terminal
"#,
            base = model.base_url()
        ),
    )
    .unwrap();
    let out = common::awf_run(&work, &wf)
        .arg("--audit-dir")
        .arg(&audit_dir)
        .env("TMPDIR", fake_model::private_tmp(&audit_dir))
        .env("AWF_TEST_OPENAI_KEY", "sk-test-123456")
        .output()
        .unwrap();
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    assert_eq!(
        summary_state(&s, "ask")["output"],
        hostile,
        "{}",
        model.describe()
    );
    for f in ["f", "PWNED2"] {
        assert!(
            !work.join(f).exists(),
            "the agent's text ran as shell code ({f} exists)"
        );
    }
    for step in ["bare", "double", "single"] {
        assert_eq!(summary_state(&s, step)["output"], hostile, "{step}: {s:#}");
    }
}

/// A 1 MiB and a 200 KiB value (beyond Linux's 128 KiB for one environment string), with
/// quotes, shell code and trailing newlines: what a step command must receive exactly.
fn large_values() -> (String, String) {
    let line = "a line with 'quotes', \"double\" ones, $(touch PWNED) and `touch PWNED`\n";
    let big = line.repeat((1 << 20) / line.len() + 1) + "\n\n";
    let mid = line.repeat((200 << 10) / line.len() + 1) + "\n";
    (big, mid)
}

/// `s` as a YAML double-quoted scalar.
fn yaml_quoted(s: &str) -> String {
    format!(
        "\"{}\"",
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    )
}

#[test]
fn large_inputs_and_for_each_items_reach_step_commands_exactly() {
    let dir = scratch("large-values");
    let (big, mid) = large_values();
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: large-values
inputs:
  - name: big
    default: {big}
  - name: mid
    default: {mid}
states:
  initial: inputs
  inputs:
    type: step
    command: printf %s {{{{.inputs.big}}}} > big-bare && printf %s "{{{{.inputs.big}}}}" > big-double && printf %s '{{{{.inputs.mid}}}}' > mid-single
    on_success: make
  make:
    type: step
    command: |
      a=$(head -c 1048576 /dev/zero | tr '\0' a); b=$(head -c 204800 /dev/zero | tr '\0' b)
      printf '["%s $(touch PWNED)\\n\\n", "%s\\n"]' "$a" "$b"
    on_success: each
  each:
    type: for_each
    items: "{{{{.states.make.Output}}}}"
    body: [keep]
    on_complete: done
  keep:
    type: step
    command: printf %s {{{{.loop.Item}}}} > item-{{{{.loop.Index}}}}
    on_success: done
  done:
    type: terminal
"#,
            big = yaml_quoted(&big),
            mid = yaml_quoted(&mid),
        ),
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    assert!(read("big-bare") == big, "{} bytes", read("big-bare").len());
    assert!(read("big-double") == big);
    assert!(read("mid-single") == mid);
    let item0 = "a".repeat(1 << 20) + " $(touch PWNED)\n\n";
    let item1 = "b".repeat(200 << 10) + "\n";
    assert!(read("item-0") == item0, "{} bytes", read("item-0").len());
    assert!(read("item-1") == item1, "{} bytes", read("item-1").len());
    assert!(!dir.join("PWNED").exists());
}

#[test]
fn a_prompt_too_long_for_an_argument_is_refused_naming_the_state_its_size_and_the_limit() {
    let dir = scratch("large-prompt");
    let (_, mid) = large_values();
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: large-prompt
inputs:
  - name: text
    default: {mid}
states:
  initial: review
  review:
    type: agent
    provider: claude
    prompt: "Review this: {{{{.inputs.text}}}}"
    options:
      command: /bin/echo
    on_success: done
    on_failure: done
  done:
    type: terminal
"#,
            mid = yaml_quoted(&mid),
        ),
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    let message = summary_state(&s, "review")["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let size = "Review this: ".len() + mid.len();
    for part in [
        "the prompt of state \"review\"".to_string(),
        format!("{size} bytes"),
        "131071 bytes (MAX_ARG_STRLEN)".to_string(),
    ] {
        assert!(message.contains(&part), "no {part:?} in {message:?}");
    }
}

#[test]
fn a_raw_value_too_long_for_the_command_is_refused_naming_the_step_its_size_and_the_limit() {
    let dir = scratch("large-raw");
    let wf = dir.join("wf.yaml");
    let text = "x".repeat(200 << 10);
    std::fs::write(
        &wf,
        format!(
            r#"
name: large-raw
inputs:
  - name: text
    default: {text}
states:
  initial: paste
  paste:
    type: step
    command: "echo {{{{.inputs.text | raw}}}} > /dev/null"
    on_success: done
    on_failure: done
  done:
    type: terminal
"#
        ),
    )
    .unwrap();
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    let message = summary_state(&s, "paste")["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let size = "echo  > /dev/null".len() + text.len();
    for part in [
        "the command of step \"paste\"".to_string(),
        format!("{size} bytes"),
        "131071 bytes for one argument (MAX_ARG_STRLEN)".to_string(),
    ] {
        assert!(message.contains(&part), "no {part:?} in {message:?}");
    }
}

/// A workflow file in `dir` with `text`.
fn workflow(dir: &Path, text: &str) -> PathBuf {
    let wf = dir.join("wf.yaml");
    std::fs::write(&wf, text).unwrap();
    wf
}

const COMPILER: &str = r#"name: out
states:
  initial: build
  build:
    type: step
    command: |
      echo compiling
      echo "error[E0308]: mismatched types" >&2
      echo "  --> src/lib.rs:10:5" >&2
      i=0; while [ $i -lt 30 ]; do echo "note $i" >&2; i=$((i+1)); done
      echo "error: could not compile" >&2
      exit 1
    on_success: done
    on_failure: report
  report:
    type: step
    command: 'printf "first: %s\n" "$(printf "%s\n" "{{.states.build.Stderr}}" | head -1)"'
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn a_step_s_output_is_shown_as_it_comes_and_its_stderr_kept_head_and_tail() {
    let dir = scratch("live");
    let wf = workflow(&dir, COMPILER);
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{s:#}\n{err}");
    // Live, behind the state's name: stdout as [build], stderr as [build!], in order with
    // the progress lines.
    let build_start = err.find("→ build (step)").unwrap();
    let shown = err.find("  [build] compiling").expect(&err);
    let shown_err = err
        .find("  [build!] error[E0308]: mismatched types")
        .expect(&err);
    let build_end = err.find("← build failure").unwrap();
    assert!(
        build_start < shown && shown < build_end && shown_err < build_end,
        "{err}"
    );
    // The failure says the first lines and the last, each on its own line.
    let build = summary_state(&s, "build");
    let message = build["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exited with code 1; stderr:\n  error[E0308]: mismatched types\n    --> src/lib.rs:10:5\n")
            && message.contains("lines)\n")
            && message.ends_with("  error: could not compile"),
        "{message}"
    );
    // {{.states.X.Stderr}}, as AWF has it.
    assert_eq!(
        summary_state(&s, "report")["output"],
        "first: error[E0308]: mismatched types"
    );
    assert!(
        build["stderr"].as_str().unwrap().contains("note 29"),
        "{build:#}"
    );
    // --quiet: the progress lines only.
    let out = awf_run(&dir, &wf, &["--quiet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("→ build (step)") && !err.contains("[build"),
        "{err}"
    );
}

#[test]
fn a_flood_of_output_is_counted_not_shown_and_kept_in_the_result() {
    let dir = scratch("flood");
    let wf = workflow(
        &dir,
        "\
name: flood
states:
  initial: a
  a:
    type: step
    command: seq 1 20000
    on_success: done
  done:
    type: terminal
",
    );
    let out = awf_run(&dir, &wf, &[]);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let shown = err.lines().filter(|l| l.starts_with("  [a] ")).count();
    assert!(shown < 1000, "{shown} lines shown");
    assert!(err.contains("  [a] 1\n"), "{err}");
    assert!(err.contains("lines not shown"), "{err}");
    let output = summary_state(&s, "a")["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(output.lines().count(), 20000);
    assert!(
        output.ends_with("\n20000"),
        "{}",
        &output[output.len() - 20..]
    );
}

/// Debian's `chromium` (installed by .ci/run), or None (and a note) where it is missing,
/// a failure in CI.
fn chromium() -> Option<PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::var("PATH").unwrap_or_default().split(':') {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "chromium is required in CI (run .ci/run)"
    );
    eprintln!("skipping: no chromium on PATH");
    None
}

/// `awf report` of a run with a parallel, a for_each and a proxied agent, opened in a
/// real headless Chromium: it loads with no console message and no request, the timeline
/// holds every state of every lane and the agent's tool calls, and a screenshot is taken.
#[test]
fn a_run_s_report_opens_in_chromium_with_every_state_and_call() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = scratch("report");
    let state = dir.join("state");
    let model = fake_model::FakeModel::start(
        fake_model::Script::new()
            .call(
                "Bash",
                serde_json::json!({"command": "echo from-the-agent"}),
            )
            .call("Read", serde_json::json!({"path": "missing.txt"})),
    );
    let wf = workflow(
        &dir,
        &format!(
            "\
name: pictured
states:
  initial: each
  each:
    type: for_each
    items: [a, b, c]
    body: [item]
    on_complete: both
  item:
    type: step
    command: echo item {{{{.loop.Item}}}}
  both:
    type: parallel
    parallel: [left, right]
    on_success: agent
  left:
    type: step
    command: echo left
  right:
    type: step
    command: echo right
  agent:
    type: agent
    provider: openai_compatible
    prompt: work
    timeout: 60s
    options:
      base_url: {}/v1
      model: fake-model
    mcp_proxy:
      enable: true
    on_success: done
  done:
    type: terminal
",
            model.base_url()
        ),
    );
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let awf = |args: &[&str]| {
        common::awf(&dir)
            .args(args)
            .env("XDG_STATE_HOME", &state)
            .env("TMPDIR", &tmp)
            .output()
            .unwrap()
    };
    let out = awf(&["run", wf.to_str().unwrap(), "--output", "json", "--quiet"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#}\n{}", model.describe());
    let run_id = s["run_id"].as_str().unwrap().to_string();
    let html = dir.join("run.html");
    let out = awf(&["report", &run_id, "-o", html.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing to fetch, and a policy that would refuse it.
    assert!(!text.contains("src="), "a source in the page");
    assert_eq!(
        text.matches("href=\"").count(),
        text.matches("href=\"#").count(),
        "a link out of the page"
    );
    assert!(text.contains("default-src 'none'"));
    let url = format!("file://{}", html.display());
    let browse = |extra: &[&str]| {
        Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.join("chromium").display()
            ))
            .args(extra)
            .arg(&url)
            .output()
            .unwrap()
    };
    let out = browse(&["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    for message in ["CONSOLE", "Uncaught", "Refused to"] {
        assert!(
            !log.contains(message),
            "{message} in chromium's log:\n{log}"
        );
    }
    // Every state of every lane (the three items, both branches), and the agent's calls.
    for st in ["each", "item", "both", "left", "right", "agent", "done"] {
        assert!(
            dom.contains(&format!("data-state=\"{st}\"")),
            "no {st} in the timeline"
        );
    }
    assert_eq!(
        dom.matches("data-state=\"item\"").count(),
        3,
        "one bar per item"
    );
    for lane in ["item 0", "item 1", "item 2", "both · left", "both · right"] {
        assert!(dom.contains(lane), "no lane {lane}");
    }
    assert!(dom.contains("data-tool=\"Bash\"") && dom.contains("data-tool=\"Read\""));
    assert!(dom.contains("from-the-agent"), "the call's arguments");
    assert!(dom.contains("<svg"), "the graph");
    let shot = dir.join("report.png");
    let out = browse(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1280,1400",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "no screenshot");
}
