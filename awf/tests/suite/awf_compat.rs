//! AWF's workflow language through the real binary, with workflows written for these tests
//! (not copied from AWF): `transitions` and `continue_on_error`, `while` (its conditions,
//! `break_when`, its limit, jumps inside its body), `for_each`'s `break_when`, state hooks,
//! `call_workflow` (inputs, output, cycles, depth, a failing child), `script_file`, the
//! template namespaces (`env`, `workflow`, `context`, dotless spellings), and the keys AWF
//! accepts without using them. Each test states the AWF behaviour it pins.

use crate::common;
use crate::fake_model;
use crate::harness;

use common::{run_summary, summary_state};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Case {
    dir: PathBuf,
    base: PathBuf,
}

impl Case {
    fn new(tag: &str) -> Case {
        let base = common::scratch(&format!("compat-{tag}"));
        let dir = base.join("work");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(base.join("state")).unwrap();
        std::fs::create_dir_all(base.join("tmp")).unwrap();
        std::fs::create_dir_all(base.join("home")).unwrap();
        Case { dir, base }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn awf(&self, args: &[&str]) -> Output {
        let plugins = self.base.join("plugins");
        common::awf(&self.dir)
            .args(args)
            .env("XDG_STATE_HOME", self.base.join("state"))
            .env("TMPDIR", self.base.join("tmp"))
            .env("AWF_PLUGINS_PATH", &plugins)
            .env("AWF_COMPAT_TEST_VAR", "from-the-environment")
            .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
            .env("HOME", self.base.join("home"))
            .output()
            .unwrap()
    }

    fn run(&self, wf: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
        let mut args = vec!["run", wf.to_str().unwrap(), "--output", "json"];
        args.extend_from_slice(extra);
        let out = self.awf(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), run_summary(&out), stderr)
    }

    fn validate(&self, wf: &Path) -> (Option<i32>, String) {
        let out = self.awf(&["validate", wf.to_str().unwrap()]);
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

/// The states of a summary in the order they ran.
fn order(s: &Value) -> Vec<String> {
    s["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["state"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn transitions_pick_the_first_match_on_success_and_on_failure_and_continue_on_error_goes_on() {
    let c = Case::new("transitions");
    let wf = c.file(
        "wf.yaml",
        r#"name: transitions
inputs:
  - name: mode
    default: full
states:
  initial: test
  test:
    type: step
    command: echo ran; exit 3
    transitions:
      - when: 'states.test.ExitCode == 0'
        goto: never
      - when: 'states.test.ExitCode == 3 and inputs.mode == "full"'
        goto: triage
      - goto: never
  triage:
    type: step
    command: "false"
    continue_on_error: true
    on_success: check
    on_failure: never
  check:
    type: step
    command: echo "{{states.triage.ExitCode}}"
    transitions:
      - goto: done
      - when: 'true'
        goto: never
  never:
    type: terminal
    status: failure
  done:
    type: terminal
    message: "{{.states.check.Output}}"
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(order(&s), ["test", "triage", "check", "done"]);
    assert_eq!(summary_state(&s, "done")["output"], "1");
    // A `when` that does not parse is refused by validate, with its path.
    let bad = c.file(
        "bad.yaml",
        "\
name: bad
states:
  initial: a
  a:
    type: step
    command: 'true'
    transitions:
      - when: 'states.a.ExitCode =='
        goto: done
      - goto: nowhere
  done:
    type: terminal
",
    );
    let (code, text) = c.validate(&bad);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("states.a.transitions[0].when"), "{text}");
    assert!(
        text.contains("transitions[1].goto") && text.contains("nowhere"),
        "{text}"
    );
}

#[test]
fn a_while_runs_until_break_when_and_at_its_limit_goes_on_to_on_complete() {
    let c = Case::new("while");
    let count = c.base.join("count.txt");
    let wf = c.file(
        "wf.yaml",
        &r#"name: while
inputs:
  - name: tries
    default: "7"
states:
  initial: poll
  poll:
    type: while
    while: "true"
    max_iterations: "{{inputs.tries}}"
    break_when: 'states.probe.Output == "3"'
    body: [probe]
    on_complete: capped
  probe:
    type: step
    command: echo x >> COUNT; wc -l < COUNT | tr -d ' '
    on_success: poll
  capped:
    type: while
    while: 'loop.Index < 100'
    max_iterations: 2
    body: [tick]
    on_complete: never_ran
  tick:
    type: step
    command: echo "tick {{.loop.Index1}}"
    on_success: capped
  never_ran:
    type: while
    while: 'states.inner.ExitCode == 0'
    body: [inner]
    on_complete: done
  inner:
    type: step
    command: "true"
    on_success: never_ran
  done:
    type: terminal
    message: "{{.states.poll.Output}}; {{.states.capped.Output}}; {{.states.never_ran.Output}}"
"#
        .replace("COUNT", &count.display().to_string()),
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    // break_when is checked after each body: 3 iterations, not the 7 allowed.
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 3);
    // At its limit the loop goes on to on_complete; a while whose condition reads a body
    // state that has not run yet runs zero times (AWF: that comparison is false).
    assert_eq!(
        summary_state(&s, "done")["output"],
        "completed 3 iterations; completed 2 iterations; completed 0 iterations",
        "{s:#}"
    );
    let ticks: Vec<&Value> = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["state"] == "tick")
        .collect();
    assert_eq!(ticks.len(), 2, "{s:#}");
    assert_eq!(ticks[1]["output"], "tick 2");
    assert!(err.contains("reached max_iterations (2)"), "{err}");
}

#[test]
fn a_while_at_its_limit_with_a_failing_body_fails_and_a_body_transition_out_ends_it() {
    let c = Case::new("while-fail");
    let wf = c.file(
        "wf.yaml",
        r#"name: while-fail
states:
  initial: loop
  loop:
    type: while
    while: "true"
    max_iterations: 2
    body: [flaky]
    on_failure: escape
  flaky:
    type: step
    command: "false"
    on_success: loop
    on_failure: loop
  escape:
    type: while
    while: "true"
    body: [first, second]
    on_complete: failed
  first:
    type: step
    command: echo first
    on_success: done
  second:
    type: step
    command: echo never
    on_success: escape
  done:
    type: terminal
  failed:
    type: terminal
    status: failure
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let loop_state = summary_state(&s, "loop");
    assert_eq!(loop_state["status"], "failure", "{s:#}");
    assert!(
        loop_state["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum iterations (2) with step failures"),
        "{loop_state:#}"
    );
    // `first` goes out of the loop: `second` never runs and the run goes to done.
    assert_eq!(
        order(&s).iter().filter(|n| *n == "second").count(),
        0,
        "{s:#}"
    );
    assert_eq!(order(&s).last().unwrap(), "done");
}

#[test]
fn state_hooks_run_around_the_state_and_a_failing_hook_is_only_a_warning() {
    let c = Case::new("hooks");
    let log = c.base.join("hooks.txt");
    let wf = c.file(
        "wf.yaml",
        &r#"name: hooks
states:
  initial: build
  build:
    type: step
    command: echo build >> LOG
    hooks:
      pre:
        - log: "building {{workflow.Name}}"
        - command: echo pre >> LOG
      post:
        - command: echo post >> LOG; exit 4
        - command: echo "after {{.states.build.ExitCode}}" >> LOG
    on_success: done
  done:
    type: terminal
"#
        .replace("LOG", &log.display().to_string()),
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "pre\nbuild\npost\nafter 0\n"
    );
    assert!(err.contains("building hooks"), "{err}");
    assert!(
        err.contains("WARN post hook of build failed (exit code 4)"),
        "{err}"
    );
}

#[test]
fn call_workflow_runs_the_child_with_its_inputs_and_refuses_cycles_and_depth() {
    let c = Case::new("call");
    c.file(
        "child.yaml",
        r#"name: child
inputs:
  - name: who
    required: true
states:
  initial: greet
  greet:
    type: step
    command: echo "hello {{inputs.who}}"
    on_success: done
  done:
    type: terminal
    message: "child said {{states.greet.Output}}"
"#,
    );
    let wf = c.file(
        "parent.yaml",
        r#"name: parent
inputs:
  - name: name
    default: bob
states:
  initial: call
  call:
    type: call_workflow
    workflow: child
    inputs:
      who: "{{inputs.name}}"
    on_success: after
  after:
    type: step
    command: echo "got {{states.call.Output}}"
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(
        summary_state(&s, "after")["output"],
        "got child said hello bob"
    );
    assert!(err.contains("call calls child"), "{err}");

    // A child that fails follows on_failure; its missing input is named.
    let wf = c.file(
        "missing.yaml",
        "\
name: missing
states:
  initial: call
  call:
    type: call_workflow
    workflow: child.yaml
    on_success: done
    on_failure: failed
  done:
    type: terminal
  failed:
    type: terminal
    message: \"{{states.call.Output}}\"
",
    );
    let (code, s, _) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}");
    let call = summary_state(&s, "call");
    assert_eq!(call["status"], "failure");
    assert!(
        call["error"]["message"].as_str().unwrap().contains("who"),
        "{call:#}"
    );

    // A → B → A is a cycle: the run stops, whatever on_failure says.
    c.file(
        "a.yaml",
        "\
name: a
states:
  initial: c
  c:
    type: call_workflow
    workflow: b.yaml
    on_success: done
    on_failure: done
  done:
    type: terminal
",
    );
    c.file(
        "b.yaml",
        "\
name: b
states:
  initial: c
  c:
    type: call_workflow
    workflow: a.yaml
    on_success: done
    on_failure: done
  done:
    type: terminal
",
    );
    let (code, s, err) = c.run(&c.dir.join("a.yaml"), &[]);
    assert_eq!(code, Some(2), "{s:#}\n{err}");
    assert!(
        err.contains(
            "step c: circular workflow call detected: workflow \"a\" is already in call stack [a b]"
        ),
        "{err}"
    );

    // A chain of 12 distinct workflows passes the depth limit of 10.
    for i in 0..12 {
        c.file(
            &format!("d{i}.yaml"),
            &format!(
                "\
name: d{i}
states:
  initial: c
  c:
    type: call_workflow
    workflow: d{}.yaml
    on_success: done
  done:
    type: terminal
",
                i + 1
            ),
        );
    }
    c.file(
        "d12.yaml",
        "\
name: d12
states:
  initial: done
  done:
    type: terminal
",
    );
    let (code, _, err) = c.run(&c.dir.join("d0.yaml"), &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("maximum call_workflow nesting depth"), "{err}");
    // Ten levels below are fine.
    let (code, _, err) = c.run(&c.dir.join("d2.yaml"), &[]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn template_namespaces_script_file_and_keys_awf_ignores() {
    let c = Case::new("namespaces");
    c.file("script.sh", "echo \"script sees {{inputs.x}}\"\n");
    let wf = c.file(
        "wf.yaml",
        r#"name: namespaces
inputs:
  - name: x
    default: "y z"
states:
  initial: env
  env:
    type: step
    command: echo "{{.env.AWF_COMPAT_TEST_VAR}} {{workflow.Name}} {{.context.WorkingDir}}"
    capture: {stdout: out}
    depends_on: [nothing]
    on_success: script
  script:
    type: step
    script_file: script.sh
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, text) = c.validate(&wf);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("`capture` of state \"env\" has no effect")
            && text.contains("`depends_on` of state \"env\" has no effect"),
        "{text}"
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let work = std::fs::canonicalize(&c.dir).unwrap();
    assert_eq!(
        summary_state(&s, "env")["output"],
        format!("from-the-environment namespaces {}", work.display())
    );
    assert_eq!(summary_state(&s, "script")["output"], "script sees y z");
    // {{.error.*}} outside a workflow_error hook is refused.
    let bad = c.file(
        "bad.yaml",
        "\
name: bad
states:
  initial: a
  a:
    type: step
    command: echo {{.error.Message}}
    on_success: done
  done:
    type: terminal
",
    );
    let (code, text) = c.validate(&bad);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("workflow_error"), "{text}");
    // In AWF's words too (its tests look for them): the reference, and where it may be.
    assert!(
        text.contains("error reference error.Message")
            && text.contains("outside of error hook context"),
        "{text}"
    );
}

#[test]
fn break_when_ends_a_for_each_after_the_iteration_that_satisfies_it() {
    let c = Case::new("each-break");
    let wf = c.file(
        "wf.yaml",
        r#"name: each-break
states:
  initial: each
  each:
    type: for_each
    items: [a, b, c, d, e]
    body: [work]
    break_when: 'loop.Index >= 2'
    on_complete: done
  work:
    type: step
    command: echo "item {{loop.Index}}"
  done:
    type: terminal
    message: "{{.states.each.Output}}"
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    // AWF: checked after each iteration, so `loop.Index >= 2` runs 3 items.
    assert_eq!(
        summary_state(&s, "done")["output"],
        r#"["item 0","item 1","item 2"]"#
    );
}

#[test]
fn workflow_hooks_run_at_start_end_and_error_and_a_failing_start_hook_runs_nothing() {
    let c = Case::new("wf-hooks");
    let log = c.base.join("log.txt");
    let wf = |start_cmd: &str, fail: bool| {
        c.file(
            "wf.yaml",
            &format!(
                r#"name: wf-hooks
hooks:
  workflow_start:
    - command: {start_cmd}
  workflow_end:
    - log: "ended {{{{workflow.Name}}}}"
    - command: echo end >> LOG
  workflow_error:
    - command: echo "error in {{{{.error.State}}}} ({{{{.error.Type}}}}) {{{{.error.Message}}}}" >> LOG
  workflow_cancel:
    - command: echo cancel >> LOG
states:
  initial: work
  work:
    type: step
    command: echo work >> LOG; {}
    on_success: done
  done:
    type: terminal
"#,
                if fail { "exit 5" } else { "true" }
            )
            .replace("LOG", &log.display().to_string()),
        )
    };
    let (code, s, err) = c.run(&wf(&format!("echo start >> {}", log.display()), false), &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start\nwork\nend\n");
    assert!(err.contains("ended wf-hooks"), "{err}");

    std::fs::remove_file(&log).unwrap();
    let (code, _, err) = c.run(&wf("'true'", true), &[]);
    assert_eq!(code, Some(3), "{err}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.starts_with("work\nerror in work (execution) ") && text.contains("exit"),
        "{text}"
    );

    // A failing workflow_start hook ends the run before any state.
    std::fs::remove_file(&log).unwrap();
    let (code, s, err) = c.run(&wf("exit 7", false), &[]);
    assert_eq!(code, Some(3), "{s:#}\n{err}");
    assert!(err.contains("workflow_start hook failed"), "{err}");
    assert!(!log.exists() || !std::fs::read_to_string(&log).unwrap().contains("work"));
}

#[test]
fn validate_compat_awf_describes_a_directory_of_mixed_workflows_one_line_each() {
    let c = Case::new("compat-dir");
    let dir = c.dir.join("awf-workflows");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plain.yaml"),
        "\
name: plain
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    std::fs::write(
        dir.join("loops.yaml"),
        "\
name: loops
author: someone
tags: [ci]
states:
  initial: w
  w:
    type: while
    while: 'true'
    break_when: 'states.a.ExitCode == 0'
    body: [a]
    on_complete: done
  a:
    type: step
    command: echo {{inputs.x}}
    capture: {stdout: out}
    on_success: w
  done:
    type: terminal
inputs:
  - name: x
    default: y
",
    )
    .unwrap();
    std::fs::write(
        dir.join("chat.yaml"),
        "\
name: chat
states:
  initial: talk
  talk:
    type: agent
    provider: claude
    mode: conversation
    use_template: review
    prompt: hi
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    files.sort();
    let mut args = vec!["validate", "--compat", "awf"];
    args.extend(files.iter().map(String::as_str));
    let out = c.awf(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "one line per file: {text}");
    // The worst file decides the exit code: chat does not validate here.
    assert_eq!(out.status.code(), Some(2), "{text}");
    let line = |name: &str| *lines.iter().find(|l| l.contains(name)).unwrap();
    assert!(
        line("plain.yaml").contains("runs here; uses no AWF-specific feature"),
        "{text}"
    );
    let loops = line("loops.yaml");
    assert!(loops.contains("runs here"), "{loops}");
    for want in [
        "type: while (supported)",
        "break_when (supported)",
        "capture (accepted, no effect)",
        "metadata (author, tags, version) (supported)",
        "templates without the leading dot (supported)",
    ] {
        assert!(loops.contains(want), "{want}: {loops}");
    }
    let chat = line("chat.yaml");
    assert!(
        chat.contains("does not validate here")
            && chat.contains("agent mode: conversation (supported)")
            && chat.contains("step templates (use_template) (not supported)"),
        "{chat}"
    );
    // JSON, for scripts.
    let mut args = vec!["validate", "--compat", "awf", "--format", "json"];
    args.extend(files.iter().map(String::as_str));
    let json: Value = serde_json::from_slice(&c.awf(&args).stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
}

/// AWF's user guide (`docs/user-guide/examples.md` at awf-project/cli) shows its examples
/// as snippets; the ones that run offline are written again here, in our own words, with
/// the outcome the guide describes. Checked: "Hello World" (a step and a terminal), "With
/// Inputs" (a required input and a default, templates without the dot), "Loop Over Files"
/// (for_each over a literal list, loop variables), "Conditional Branching" (transitions
/// on an exit code, with a local script instead of `./deploy.sh`), "Nested Loops" (a
/// for_each inside a while's body). Left out: the agent examples (a real model), "Retry
/// with Backoff" and "HTTP API Integration" (network), "Parallel Execution" (golangci-lint
/// and a Go toolchain).
#[test]
fn the_offline_examples_of_awf_s_user_guide_run_with_the_outcome_it_describes() {
    let c = Case::new("guide");
    let hello = c.file(
        "hello.yaml",
        "\
name: hello
version: \"1.0.0\"
states:
  initial: greet
  greet:
    type: step
    command: echo \"Hello, World!\"
    on_success: done
  done:
    type: terminal
",
    );
    let (code, s, _) = c.run(&hello, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(summary_state(&s, "greet")["output"], "Hello, World!");

    let inputs = c.file(
        "inputs.yaml",
        "\
name: greet
inputs:
  - name: name
    type: string
    required: true
  - name: greeting
    type: string
    default: Hello
states:
  initial: greet
  greet:
    type: step
    command: echo \"{{inputs.greeting}}, {{inputs.name}}!\"
    on_success: done
  done:
    type: terminal
",
    );
    let (code, s, _) = c.run(&inputs, &["--input", "name=Ada"]);
    assert_eq!(code, Some(0));
    assert_eq!(summary_state(&s, "greet")["output"], "Hello, Ada!");
    let out = c.awf(&["run", inputs.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "a required input is missing");
    assert!(String::from_utf8_lossy(&out.stderr).contains("inputs.name: required"));

    let files = c.file(
        "files.yaml",
        "\
name: files
states:
  initial: each
  each:
    type: for_each
    items: '[\"a.txt\", \"b.txt\", \"c.txt\"]'
    body: [count]
    on_complete: done
  count:
    type: step
    command: echo \"{{.loop.Index1}}/{{.loop.Length}} {{.loop.Item}}\"
  done:
    type: terminal
    message: \"{{.states.each.Output}}\"
",
    );
    let (code, s, _) = c.run(&files, &[]);
    assert_eq!(code, Some(0));
    assert_eq!(
        summary_state(&s, "done")["output"],
        r#"["1/3 a.txt","2/3 b.txt","3/3 c.txt"]"#
    );

    c.file("deploy.sh", "exit \"$1\"\n");
    let branch = c.file(
        "branch.yaml",
        "\
name: branch
inputs:
  - name: code
    default: \"0\"
states:
  initial: deploy
  deploy:
    type: step
    command: sh deploy.sh {{inputs.code}}
    transitions:
      - when: 'states.deploy.ExitCode == 0'
        goto: success
      - when: 'states.deploy.ExitCode == 2'
        goto: rollback
      - goto: failure
  rollback:
    type: step
    command: echo rolled back
    on_success: failure
  success:
    type: terminal
  failure:
    type: terminal
    status: failure
",
    );
    let (code, s, _) = c.run(&branch, &[]);
    assert_eq!(
        (code, order(&s)),
        (Some(0), vec!["deploy".into(), "success".into()])
    );
    let (code, s, _) = c.run(&branch, &["--input", "code=2"]);
    assert_eq!(code, Some(3));
    assert_eq!(order(&s), ["deploy", "rollback", "failure"]);

    let nested = c.file(
        "nested.yaml",
        "\
name: nested
states:
  initial: outer
  outer:
    type: while
    while: 'loop.Index < 2'
    body: [inner]
    on_complete: done
  inner:
    type: for_each
    items: [x, y, z]
    body: [cell]
    on_complete: outer
  cell:
    type: step
    command: echo \"{{.loop.Item}}\"
  done:
    type: terminal
",
    );
    let (code, s, err) = c.run(&nested, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let cells = s["states"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["state"] == "cell")
        .count();
    assert_eq!(cells, 6, "2 × 3 cells: {s:#}");
}

#[test]
fn an_operation_state_calls_a_plugin_through_the_plugin_host_audited() {
    let c = Case::new("operation");
    harness::install_notes_plugin(&c.base.join("plugins"));
    let wf = c.file(
        "wf.yaml",
        r#"name: operation
inputs:
  - name: what
    default: milk
states:
  initial: note
  note:
    type: operation
    operation: notes.add
    inputs:
      text: "buy {{inputs.what}}"
      tags: [shop]
    on_success: done
    on_failure: failed
  done:
    type: terminal
    message: "{{states.note.Output}}"
  failed:
    type: terminal
    status: failure
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let out = summary_state(&s, "done")["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(out.starts_with("added note 1"), "{out}");
    // The call is in the state's audit file, as an agent's tool call would be.
    let audit_dir = std::path::PathBuf::from(s["audit_dir"].as_str().unwrap());
    let records: Vec<Value> = std::fs::read_dir(&audit_dir)
        .unwrap()
        .flatten()
        .flat_map(|e| common::audit_lines(&e.path()))
        .collect();
    let call = records
        .iter()
        .find(|r| r["type"] == "tool.call" && r["tool"] == "notes_add")
        .unwrap_or_else(|| panic!("no audited call: {records:?}"));
    assert!(call.to_string().contains("buy milk"), "{call}");
    // An unknown operation is looked up when it runs, as AWF does: validate warns, naming
    // the plugin's operations, and the state fails then.
    let bad = c.file(
        "bad.yaml",
        "\
name: bad
states:
  initial: a
  a:
    type: operation
    operation: notes.nope
    on_success: done
  done:
    type: terminal
",
    );
    let (code, text) = c.validate(&bad);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("warning") && text.contains("nope") && text.contains("add"),
        "{text}"
    );
    let (code, s, _) = c.run(&bad, &[]);
    assert_ne!(code, Some(0));
    let a = summary_state(&s, "a")["error"]["message"].to_string();
    assert!(
        a.contains("step a: operation \\\"notes.nope\\\" not found"),
        "{a}"
    );
}

#[test]
fn loops_nest_in_a_for_each_body_as_in_awf() {
    let c = Case::new("nested-each");
    let wf = c.file(
        "wf.yaml",
        r#"name: nested-each
states:
  initial: rows
  rows:
    type: for_each
    items: [r1, r2]
    body: [cols, count]
    on_complete: done
  cols:
    type: for_each
    items: [a, b, c]
    body: [cell]
    on_complete: rows
  cell:
    type: step
    command: echo "{{.loop.Item}}"
  count:
    type: while
    while: 'loop.Index < 2'
    body: [tick]
    on_complete: rows
  tick:
    type: step
    command: echo tick
    on_success: count
  done:
    type: terminal
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let n = |name: &str| {
        s["states"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["state"] == name)
            .count()
    };
    // 2 rows × (3 cells + 2 ticks).
    assert_eq!(
        (n("cell"), n("tick"), n("cols"), n("count")),
        (6, 4, 2, 2),
        "{s:#}"
    );
}

#[test]
fn mode_conversation_takes_each_line_of_input_as_the_next_turn_until_an_empty_line() {
    let Some(claude) = harness::agent_cli("claude") else {
        return;
    };
    let c = Case::new("mode-conversation");
    let model = fake_model::FakeModel::start(fake_model::Script::new());
    let wf = c.file(
        "wf.yaml",
        &format!(
            r#"name: chat
states:
  initial: chat
  chat:
    type: agent
    provider: claude
    mode: conversation
    prompt: Remember the word PELICAN.
    options: {{command: "{}", model: claude-sonnet-4-5, base_url: "{}", api_key_env: AWF_TEST_FAKE_KEY}}
    mcp_proxy: {{enable: true}}
    on_success: done
  done:
    type: terminal
"#,
            claude.display(),
            model.base_url()
        ),
    );
    let run = |input: &str| {
        use std::io::Write;
        let mut child = common::awf_run(&c.dir, &wf)
            .env("XDG_STATE_HOME", c.base.join("state"))
            .env("TMPDIR", c.base.join("tmp"))
            .env("HOME", c.base.join("home"))
            .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run("Which word did I ask you to remember?\n\n");
    let s = run_summary(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let main = model.main_requests();
    assert_eq!(main.len(), 2, "two turns");
    let second = main[1].body.to_string();
    assert!(
        second.contains("Remember the word PELICAN") && second.contains("Which word did I ask"),
        "the second turn does not hold the first: {second}"
    );
    // As AWF: the input ending before the empty line fails the state.
    let out = run("one more\n");
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the input ended before the empty line"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_nested_call_workflow_block_of_awf_s_docs_and_keys_awf_ignores_on_states_are_taken() {
    let c = Case::new("nested-call");
    c.file(
        "child.yaml",
        "\
name: child
inputs:
  - name: n
states:
  initial: done
  done:
    type: terminal
    message: \"child got {{inputs.n}}\"
",
    );
    let wf = c.file(
        "wf.yaml",
        r#"name: nested-call
states:
  initial: call
  call:
    type: call_workflow
    call_workflow:
      workflow: child.yaml
      inputs: {n: "7"}
      outputs: [{name: x, from: done}]
      timeout: 30s
    pre_hook: echo ignored
    when: 'true'
    on_success: done
  done:
    type: terminal
    message: "{{states.call.Output}}"
"#,
    );
    let (code, text) = c.validate(&wf);
    assert_eq!(code, Some(0), "{text}");
    for key in ["pre_hook", "when"] {
        assert!(
            text.contains(&format!("`{key}` of state \"call\" has no effect")),
            "{key}: {text}"
        );
    }
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(summary_state(&s, "done")["output"], "child got 7");
}

/// AWF's older `loop:` block on a step (`over`, `break_when`, with `{{loop.Item}}` in the
/// command): AWF's YAML reader ignores the key, so AWF validates such a workflow and runs
/// the command once. So does awf, saying the block has no effect and what iterates instead.
#[test]
fn a_step_s_older_loop_block_is_taken_with_a_warning_and_the_command_runs_once() {
    let c = Case::new("loop-block");
    let wf = c.file(
        "wf.yaml",
        r#"name: loop-block
inputs:
  - name: items
    default: "one"
states:
  initial: each
  each:
    type: step
    loop:
      over: "{{inputs.items}}"
      break_when: 'loop.Index >= 2'
    command: 'echo "ran {{inputs.items}}" >> runs.txt'
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, text) = c.validate(&wf);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("`loop` of state \"each\" has no effect") && text.contains("type: for_each"),
        "{text}"
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let runs = std::fs::read_to_string(wf.parent().unwrap().join("runs.txt")).unwrap();
    assert_eq!(runs, "ran one\n");
}

/// An input's `pattern:` beside `validation` (older syntax in AWF's own workflows): AWF's
/// YAML reader ignores it, so a missing required input is still the error (exit 1, "required")
/// and a value the pattern would refuse runs. awf does the same, with a warning.
#[test]
fn an_input_s_pattern_key_is_taken_with_a_warning_and_checks_nothing_as_in_awf() {
    let c = Case::new("input-pattern");
    let wf = c.file(
        "wf.yaml",
        r#"name: input-pattern
inputs:
  - name: email
    type: string
    required: true
    pattern: '^[a-z]+@[a-z]+[.][a-z]{2,}$'
states:
  initial: s
  s:
    type: step
    command: 'echo "got {{inputs.email}}"'
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, text) = c.validate(&wf);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("`pattern` of input \"email\" has no effect") && text.contains("validation:"),
        "{text}"
    );
    let (code, _, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("required"), "{err}");
    let (code, s, err) = c.run(&wf, &["--input", "email=not-an-email"]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(summary_state(&s, "s")["output"], "got not-an-email");
}

/// A list `default` for an input (AWF's `expr-*` fixtures): AWF keeps it as a Go list, and
/// a template (or a `string` input's check) prints it as `[one two three]`. awf validates
/// such a workflow, as AWF does, and passes that same text, with a warning saying how to
/// write a list a for_each goes through.
#[test]
fn an_input_s_list_default_is_passed_as_awf_prints_it() {
    let c = Case::new("list-default");
    let wf = c.file(
        "wf.yaml",
        r#"name: list-default
inputs:
  - name: items
    default: ["one", "two", "three"]
states:
  initial: show
  show:
    type: step
    command: 'echo "all: {{inputs.items}}"'
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, text) = c.validate(&wf);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("the list default of input \"items\"") && text.contains("JSON array"),
        "{text}"
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    assert_eq!(summary_state(&s, "show")["output"], "all: [one two three]");
}

/// Two states of `provider` in one conversation (`model` and `base_url` as its options
/// want them): the second continues the first's session. The summary names one session for
/// both, and the second state's request holds the first state's turn (a session started
/// anew would not). Returns the case, its fake model and the options, for more checks.
fn continue_from_holds_the_earlier_turn(
    provider: &str,
    model_name: &str,
    url_suffix: &str,
) -> Option<(Case, fake_model::FakeModel, String)> {
    let program = harness::agent_cli(provider)?;
    let c = Case::new(&format!("continue-{provider}"));
    let model = fake_model::FakeModel::start(fake_model::Script::new());
    let options = format!(
        "{{command: \"{}\", model: {model_name}, base_url: \"{}{url_suffix}\", api_key_env: AWF_TEST_FAKE_KEY}}",
        program.display(),
        model.base_url()
    );
    let wf = c.file(
        "wf.yaml",
        &format!(
            r#"name: conversation
states:
  initial: seed
  seed:
    type: agent
    provider: {provider}
    system_prompt: You answer in one word.
    prompt: Remember the word PELICAN.
    options: {options}
    mcp_proxy: {{enable: true}}
    conversation: {{}}
    on_success: follow
  follow:
    type: agent
    provider: {provider}
    prompt: Which word did I ask you to remember?
    options: {options}
    mcp_proxy: {{enable: true}}
    conversation:
      continue_from: seed
    on_success: done
  done:
    type: terminal
"#
        ),
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{s:#}\n{err}");
    let seed = summary_state(&s, "seed")["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!seed.is_empty());
    assert_eq!(summary_state(&s, "follow")["session_id"], seed.as_str());
    let last = model
        .main_requests()
        .last()
        .expect("a request of the follow state")
        .body
        .to_string();
    assert!(
        last.contains("Remember the word PELICAN") && last.contains("Which word did I ask"),
        "the follow state's request does not hold the seed's turn: {last}"
    );
    Some((c, model, options))
}

#[test]
fn continue_from_resumes_the_claude_session_of_an_earlier_state() {
    let Some((c, model, options)) =
        continue_from_holds_the_earlier_turn("claude", "claude-sonnet-4-5", "")
    else {
        return;
    };
    // The system prompt went with the session's start.
    let first = model.main_requests().first().unwrap().body.to_string();
    assert!(first.contains("You answer in one word."), "{first}");
    // A continue_from of a state that kept no session is refused by validate.
    let bad = c.file(
        "bad.yaml",
        &format!(
            "\
name: bad
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: x
    options: {options}
    on_success: b
  b:
    type: agent
    provider: claude
    prompt: y
    options: {options}
    conversation: {{continue_from: a}}
    on_success: done
  done:
    type: terminal
"
        ),
    );
    let (code, text) = c.validate(&bad);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("keeps none"), "{text}");
}

#[test]
fn continue_from_resumes_the_codex_session_of_an_earlier_state() {
    continue_from_holds_the_earlier_turn("codex", "gpt-5-codex", "/v1");
}

#[test]
fn continue_from_resumes_the_gemini_session_of_an_earlier_state() {
    continue_from_holds_the_earlier_turn("gemini", "gemini-2.5-flash", "");
}

#[test]
fn continue_from_resumes_the_opencode_session_of_an_earlier_state() {
    continue_from_holds_the_earlier_turn("opencode", "fake-model", "/v1");
}

/// AWF's dynamic loop bounds (`ResolveMaxIterations`): `max_iterations` of a `for_each` or
/// a `while` as a template, with arithmetic, resolved when the loop starts; a `for_each`
/// runs its first items up to it (AWF slices, it does not refuse); a bad value fails the
/// loop in AWF's words; an undefined input there is refused by `awf validate`.
#[test]
fn max_iterations_is_a_template_with_arithmetic_resolved_when_the_loop_starts() {
    let c = Case::new("dynamic-bounds");
    let flow = |max_each: &str, max_while: &str| {
        format!(
            r#"name: bounds
inputs:
  - name: limit
    default: "3"
states:
  initial: each
  each:
    type: for_each
    items: '["a", "b", "c", "d", "e"]'
    max_iterations: "{max_each}"
    body: [item]
    on_complete: again
  item:
    type: step
    command: echo {{{{.loop.Item}}}}
  again:
    type: while
    while: "true"
    max_iterations: "{max_while}"
    body: [tick]
    on_complete: done
  tick:
    type: step
    command: echo tick
  done:
    type: terminal
"#
        )
    };
    let wf = c.file(
        "bounds.yaml",
        &flow("{{.inputs.limit}} - 1", "{{.inputs.limit}} * 2"),
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    let ran = |name: &str| -> Vec<String> {
        s["states"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["state"] == name)
            .map(|x| x["output"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(ran("item"), ["a", "b"], "{s:#}");
    assert_eq!(ran("tick").len(), 6, "{s:#}");
    assert!(
        err.contains("the first 2 run and the other 3 do not"),
        "{err}"
    );

    // A bad value fails the loop, in AWF's words.
    let wf = c.file("zero.yaml", &flow("{{.inputs.limit}} / 0", "2"));
    let (code, s, _) = c.run(&wf, &[]);
    assert_ne!(code, Some(0));
    let each = summary_state(&s, "each")["error"]["message"].to_string();
    assert!(
        each.contains("resolve max_iterations: max_iterations expression \\\"3 / 0\\\" evaluation failed: division by zero"),
        "{each}"
    );
    let wf = c.file("word.yaml", &flow("2", "{{.inputs.limit}} tries"));
    let (_, s, _) = c.run(&wf, &[]);
    let again = summary_state(&s, "again")["error"]["message"].to_string();
    assert!(
        again.contains("max_iterations value \\\"3 tries\\\" is invalid: must be an integer"),
        "{again}"
    );

    // A literal out of bounds, and an undefined input, are refused before anything runs.
    let wf = c.file("literal.yaml", &flow("0", "2"));
    let (code, out) = c.validate(&wf);
    assert_ne!(code, Some(0));
    assert!(
        out.contains("max_iterations value 0 must be at least 1"),
        "{out}"
    );
    let wf = c.file("undefined.yaml", &flow("{{.inputs.nope}}", "2"));
    let (code, out) = c.validate(&wf);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("nope") && out.contains("max_iterations"),
        "{out}"
    );
}

/// A state's fields as AWF reads them (`ValidStateProperties`): `JSON` and `Response` (its
/// output parsed), the token counts, in templates and expressions; a lower-case field is
/// refused in AWF's words, naming the one meant (F050).
#[test]
fn a_state_s_json_response_and_token_fields_are_read_and_lower_case_ones_refused() {
    let c = Case::new("state-fields");
    let wf = c.file(
        "fields.yaml",
        r#"name: fields
states:
  initial: a
  a:
    type: step
    command: |
      echo '{"k": 7, "list": [1, 2]}'
    transitions:
      - when: 'states.a.JSON.k == 7 and states.a.Response.list[1] == 2 and states.a.TokensUsed == 0'
        goto: b
      - goto: wrong
  b:
    type: step
    command: |
      echo "json={{.states.a.JSON}} tokens={{.states.a.TokensUsed}}/{{.states.a.TokensInput}}/{{.states.a.TokensOutput}} estimated={{.states.a.TokensEstimated}} stderr=[{{.states.a.Stderr}}]"
    on_success: done
  wrong:
    type: terminal
    status: failure
  done:
    type: terminal
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    assert_eq!(
        summary_state(&s, "b")["output"],
        r#"json={"k":7,"list":[1,2]} tokens=0/0/0 estimated=false stderr=[]"#,
        "{s:#}"
    );
    let wf = c.file(
        "lower.yaml",
        "\
name: lower
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: b
  b:
    type: step
    command: echo \"{{.states.a.output}} {{.states.a.exit_code}}\"
    on_success: done
  done:
    type: terminal
",
    );
    let (code, out) = c.validate(&wf);
    assert_ne!(code, Some(0));
    assert!(
        out.contains("invalid state property \"output\" for step \"a\", use 'Output' instead")
            && out.contains(
                "invalid state property \"exit_code\" for step \"a\", use 'ExitCode' instead"
            ),
        "{out}"
    );
}

/// An agent state's provider is looked up when it runs, as AWF does: an unknown one
/// (`anthropic`, which AWF's fixtures use) validates with a warning and fails its state
/// with AWF's words, and the workflow's failure path runs; a state's `model` and
/// `max_tokens` (which AWF's YAML reader drops) are taken with a warning.
#[test]
fn an_unknown_provider_fails_its_state_at_run_time_and_state_level_model_is_ignored() {
    let c = Case::new("provider-at-run");
    let wf = c.file(
        "anthropic.yaml",
        r#"name: anthropic
states:
  initial: ask
  ask:
    type: agent
    provider: anthropic
    model: haiku
    max_tokens: 100
    prompt: Say hello
    on_success: done
    on_failure: fallback
  fallback:
    type: step
    command: echo fell back
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, out) = c.validate(&wf);
    assert_eq!(code, Some(0), "{out}");
    for w in [
        "unknown provider \"anthropic\": it fails when it runs",
        "`model` of state \"ask\" has no effect",
        "`max_tokens` of state \"ask\" has no effect",
    ] {
        assert!(out.contains(w), "{w} not in {out}");
    }
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    let ask = summary_state(&s, "ask");
    assert_eq!(ask["status"], "failure", "{s:#}");
    assert!(
        ask["error"]["message"]
            .as_str()
            .unwrap()
            .contains("step ask: provider \"anthropic\" not found"),
        "{ask:#}"
    );
    assert_eq!(summary_state(&s, "fallback")["output"], "fell back");
}

/// A `script_file` with a shebang runs as its own program, as AWF runs it (`IsScriptFile`
/// with `#!`: the kernel starts the interpreter), its templates filled in as text; one
/// without a shebang goes to the shell as before.
#[test]
fn a_script_file_with_a_shebang_runs_its_own_interpreter() {
    if !common::python_available() {
        return;
    }
    let c = Case::new("shebang");
    std::fs::create_dir_all(c.dir.join("scripts")).unwrap();
    c.file(
        "scripts/hello.py",
        "#!/usr/bin/env python3\nimport sys\nprint('python', sys.version_info[0], 'to {{.inputs.who}}')\n",
    );
    c.file(
        "scripts/hello.sh",
        "#!/bin/bash\nwords=(bash arrays work)\necho \"${words[*]}\"\n",
    );
    c.file("scripts/plain.sh", "echo \"plain, run by $0\"\n");
    let wf = c.file(
        "scripts.yaml",
        r#"name: scripts
inputs:
  - name: who
    default: the reader
states:
  initial: py
  py:
    type: step
    script_file: scripts/hello.py
    on_success: sh
  sh:
    type: step
    script_file: scripts/hello.sh
    on_success: plain
  plain:
    type: step
    script_file: scripts/plain.sh
    on_success: done
  done:
    type: terminal
"#,
    );
    let (code, out) = c.validate(&wf);
    assert_eq!(code, Some(0), "{out}");
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    assert_eq!(summary_state(&s, "py")["output"], "python 3 to the reader");
    assert_eq!(summary_state(&s, "sh")["output"], "bash arrays work");
    assert_eq!(
        summary_state(&s, "plain")["output"],
        "plain, run by /bin/sh"
    );
}

/// A transition's `when` that AWF's load-time check refuses (it compiles without expr's
/// built-in functions) validates here with a warning saying so, and runs.
#[test]
fn a_transition_awf_refuses_at_load_is_a_warning_and_runs() {
    let c = Case::new("load-check");
    let wf = c.file(
        "len.yaml",
        "\
name: len
states:
  initial: a
  a:
    type: step
    command: echo hi
    transitions:
      - when: 'len(states.a.Output) > 0'
        goto: done
      - goto: wrong
  wrong:
    type: terminal
    status: failure
  done:
    type: terminal
",
    );
    let (code, out) = c.validate(&wf);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("AWF refuses it when it loads the workflow")
            && out.contains("unknown name len"),
        "{out}"
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    assert_eq!(summary_state(&s, "done")["status"], "success", "{s:#}");
}

/// AWF's loop treats a body state's transition back to the loop as "go on" (its retry
/// pattern): the next body state runs, a jump skips ahead, and `break_when` ends the loop
/// after the body; so a body whose states all say `on_success: <the loop>` still runs whole.
#[test]
fn a_body_state_that_goes_back_to_the_loop_goes_on_with_the_body() {
    let c = Case::new("while-retry-pattern");
    let wf = c.file(
        "green.yaml",
        r#"name: green
states:
  initial: loop
  loop:
    type: while
    while: "true"
    break_when: 'states.last.Output contains "STOP"'
    max_iterations: 3
    body: [first, check, skipped, last]
    on_complete: done
  first:
    type: step
    command: echo first
    on_success: loop
  check:
    type: step
    command: echo PASS
    transitions:
      - when: 'states.check.Output contains "PASS"'
        goto: last
      - goto: skipped
  skipped:
    type: step
    command: echo skipped
    on_success: loop
  last:
    type: step
    command: echo STOP
    on_success: loop
  done:
    type: terminal
"#,
    );
    let (code, s, err) = c.run(&wf, &[]);
    assert_eq!(code, Some(0), "{err}\n{s:#}");
    assert_eq!(
        order(&s),
        ["first", "check", "last", "loop", "done"],
        "{s:#}"
    );
}

/// The tests' plain-HTTP API (tests/fixtures/servers/http_api.py), until dropped.
struct HttpApi {
    server: common::PortServer,
    log: PathBuf,
}

impl HttpApi {
    fn start(base: &Path, token: &str) -> HttpApi {
        let log = base.join("http_api.log");
        let mut cmd = Command::new("python3");
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/http_api.py"))
            .env("LOG", &log)
            .env("TOKEN", token);
        HttpApi {
            server: common::PortServer::start(cmd),
            log,
        }
    }

    fn requests(&self) -> Vec<Value> {
        common::audit_lines(&self.log)
    }
}

/// AWF's builtin operations run here as AWF's workflows write them: `http.request`,
/// `github.*` (with the token the workflow passes) and `notify.send`'s webhook, each
/// audited as any operation, its outputs the state's `.Response`; their requests go only
/// where the state's `network` lets them (public addresses by default); an operation name
/// without a dot validates with a warning and fails when it runs, as in AWF.
#[test]
fn awf_s_builtin_operations_run_through_the_state_s_network() {
    if !common::python_available() {
        return;
    }
    let c = Case::new("builtin-ops");
    let api = HttpApi::start(&c.base, "from-the-environment");
    let p = api.server.port;
    let wf = c.file(
        "ops.yaml",
        &format!(
            r#"name: ops
states:
  initial: get
  get:
    type: operation
    operation: http.request
    network: {{allow: ["127.0.0.1:{p}"]}}
    inputs:
      url: "http://127.0.0.1:{p}/echo"
      method: post
      headers: {{X-Test: "yes"}}
      body: '{{"a": 1}}'
    transitions:
      - when: 'states.get.Response.status_code == 200 and states.get.Response.body contains "x_test"'
        goto: issue
      - goto: failed
  issue:
    type: operation
    operation: github.get_issue
    network: {{allow: ["127.0.0.1:{p}"]}}
    inputs: {{repo: o/r, number: 7, token: "{{{{.env.AWF_COMPAT_TEST_VAR}}}}", api_url: "http://127.0.0.1:{p}"}}
    on_success: comment
    on_failure: failed
  comment:
    type: operation
    operation: github.add_comment
    network: {{allow: ["127.0.0.1:{p}"]}}
    inputs: {{repo: o/r, number: 7, body: "Seen: {{{{.states.issue.Response.title}}}}", token: "{{{{.env.AWF_COMPAT_TEST_VAR}}}}", api_url: "http://127.0.0.1:{p}"}}
    on_success: hook
    on_failure: failed
  hook:
    type: operation
    operation: notify.send
    network: {{allow: ["127.0.0.1:{p}"]}}
    inputs: {{backend: webhook, message: "done", webhook_url: "http://127.0.0.1:{p}/hook"}}
    on_success: batch
    on_failure: failed
  batch:
    type: operation
    operation: github.batch
    network: {{allow: ["127.0.0.1:{p}"]}}
    inputs:
      repo: o/r
      token: "{{{{.env.AWF_COMPAT_TEST_VAR}}}}"
      api_url: "http://127.0.0.1:{p}"
      operations:
        - {{name: github.get_issue, inputs: {{number: 7}}}}
        - {{name: github.get_issue, inputs: {{number: 8}}}}
    on_success: private
    on_failure: failed
  private:
    type: operation
    operation: http.request
    inputs: {{url: "http://127.0.0.1:{p}/echo", method: GET}}
    on_success: failed
    on_failure: noop
  noop:
    type: operation
    operation: noop
    on_success: failed
    on_failure: done
  failed:
    type: terminal
    status: failure
  done:
    type: terminal
"#
        ),
    );
    let (code, out) = c.validate(&wf);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("operation \"noop\" is not PLUGIN.OPERATION"),
        "{out}"
    );
    let out = c.awf(&["run", wf.to_str().unwrap(), "--output", "json"]);
    let s = run_summary(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}\n{s:#}");
    assert_eq!(
        order(&s),
        [
            "get", "issue", "comment", "hook", "batch", "private", "noop", "done"
        ],
        "{s:#}"
    );
    let issue: Value =
        serde_json::from_str(summary_state(&s, "issue")["output"].as_str().unwrap()).unwrap();
    assert_eq!(issue["title"], "It breaks");
    assert_eq!(issue["labels"], serde_json::json!(["bug"]));
    let comment: Value =
        serde_json::from_str(summary_state(&s, "comment")["output"].as_str().unwrap()).unwrap();
    assert_eq!(comment["comment_id"], 99);
    let batch: Value =
        serde_json::from_str(summary_state(&s, "batch")["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&batch["total"], &batch["succeeded"], &batch["failed"]),
        (
            &serde_json::json!(2),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{batch:#}"
    );
    assert_eq!(batch["results"][0]["outputs"]["title"], "It breaks");
    let private = summary_state(&s, "private")["error"]["message"].to_string();
    assert!(
        private.contains("not a public address") && private.contains("network"),
        "{private}"
    );
    let noop = summary_state(&s, "noop")["error"]["message"].to_string();
    assert!(
        noop.contains("step noop: operation \\\"noop\\\" not found"),
        "{noop}"
    );
    // What the API saw: the POST's body and header, the token on GitHub's calls, the
    // comment's rendered body, the webhook's JSON; the private request never came.
    let seen = api.requests();
    assert_eq!(seen[0]["method"], "POST");
    assert_eq!(seen[0]["body"], "{\"a\": 1}");
    assert!(
        seen.iter()
            .filter(|r| r["path"].as_str().unwrap().starts_with("/repos/"))
            .all(|r| r["authorization"] == "Bearer from-the-environment"),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|r| r["body"].as_str().unwrap().contains("Seen: It breaks")),
        "{seen:#?}"
    );
    assert!(
        seen.iter().any(|r| r["path"] == "/hook"
            && r["body"].as_str().unwrap().contains("\"message\":\"done\"")),
        "{seen:#?}"
    );
    assert_eq!(
        seen.iter().filter(|r| r["path"] == "/echo").count(),
        1,
        "{seen:#?}"
    );
    // Audited as any operation: a tool call of its own source.
    let audit = common::audit_dir_lines(
        &c.base
            .join("state/awf/audit")
            .join(s["run_id"].as_str().unwrap()),
    );
    let calls: Vec<(&str, &str)> = audit
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .map(|r| {
            (
                r["tool"].as_str().unwrap(),
                r["source"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        calls.contains(&("http_request", "builtin:http")),
        "{calls:?}"
    );
    assert!(
        calls.contains(&("github_get_issue", "builtin:github")),
        "{calls:?}"
    );
    assert!(
        calls.contains(&("notify_send", "builtin:notify")),
        "{calls:?}"
    );
}
