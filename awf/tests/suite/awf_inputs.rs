//! AWF's workflow metadata and inputs through the real binary: `author`, `tags` and
//! `version` are read, `env:` is accepted with a warning (AWF never uses it), input types
//! and `validation:` rules are checked by `awf validate` (the rules themselves) and by
//! `awf run` (the values, every problem at once, in AWF's words), an `--input` the
//! workflow does not declare is passed on with a warning, and secret-named inputs are
//! masked in the run's state.

use crate::common;

use common::{run_summary, summary_state};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

/// A workflow file in a fresh directory (the run's working directory, with its own
/// state directory).
struct Case {
    dir: PathBuf,
    state: PathBuf,
    wf: PathBuf,
}

impl Case {
    fn new(tag: &str, text: &str) -> Case {
        let base = common::scratch(&format!("inputs-{tag}"));
        let dir = base.join("work");
        std::fs::create_dir_all(&dir).unwrap();
        let wf = dir.join("wf.yaml");
        std::fs::write(&wf, text).unwrap();
        Case {
            dir,
            state: base.join("state"),
            wf,
        }
    }

    fn awf(&self, args: &[&str]) -> Output {
        // awf's TMPDIR beside the state directory, never above it: awf refuses a state or
        // audit directory beneath the temp dir, and the checkout may lie under /tmp.
        let tmp = self.state.with_file_name("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        common::awf(&self.dir)
            .args(args)
            .env("XDG_STATE_HOME", &self.state)
            .env("TMPDIR", &tmp)
            .output()
            .unwrap()
    }

    fn run(&self, inputs: &[&str]) -> Output {
        let mut args = vec!["run", self.wf.to_str().unwrap(), "--output", "json"];
        for i in inputs {
            args.extend(["--input", i]);
        }
        self.awf(&args)
    }

    /// `awf validate --output json`: the exit code and the problems.
    fn validate(&self) -> (i32, Vec<Value>) {
        let out = self.awf(&["validate", "--output", "json", self.wf.to_str().unwrap()]);
        let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (
            out.status.code().unwrap(),
            json["problems"].as_array().unwrap().clone(),
        )
    }

    /// `awf status RUN_ID --output json` of a run's summary.
    fn status(&self, run: &Output) -> Value {
        let id = run_summary(run)["run_id"].as_str().unwrap().to_string();
        let out = self.awf(&["status", &id, "--output", "json"]);
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const DONE: &str = "  done:\n    type: terminal\n";

#[test]
fn metadata_keys_validate() {
    let c = Case::new(
        "metadata",
        &format!(
            "\
name: meta
version: 1.0
author: Jane Doe
tags: [ci, review, 2]
description: keys AWF reads
states:
  initial: done
{DONE}"
        ),
    );
    let (code, problems) = c.validate();
    assert_eq!(code, 0, "{problems:#?}");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn env_is_accepted_with_a_warning_and_unknown_keys_are_still_refused() {
    let c = Case::new(
        "env",
        &format!(
            "\
name: e
env: [FOO=1, BAR=2]
states:
  initial: done
{DONE}"
        ),
    );
    let (code, problems) = c.validate();
    assert_eq!(code, 0, "{problems:#?}");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert_eq!(p["severity"], "warning");
    assert_eq!(p["code"], "WORKFLOW.PARSE.NO_EFFECT");
    assert_eq!(p["path"], "env");
    assert_eq!(p["line"], 2);
    assert!(
        p["message"].as_str().unwrap().contains("no effect"),
        "{p:#}"
    );
    // The run goes on, with the warning on stderr.
    let out = c.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: `env` has no effect"));

    // A map, written to set variables: one error that says it sets none and where
    // variables go, no second warning.
    let c = Case::new(
        "env-map",
        &format!(
            "\
name: e
env:
  FOO: bar
states:
  initial: done
{DONE}"
        ),
    );
    let (code, problems) = c.validate();
    assert_ne!(code, 0);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert_eq!(p["severity"], "error");
    assert!(
        p["message"].as_str().unwrap().contains("sets no variables")
            && p["hint"].as_str().unwrap().contains("FOO=bar cmd"),
        "{p:#}"
    );

    let c = Case::new(
        "unknown-top",
        &format!(
            "\
name: e
tags: ci
bogus: 1
states:
  initial: done
{DONE}"
        ),
    );
    let (code, problems) = c.validate();
    assert_ne!(code, 0);
    let codes: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p["code"].as_str().unwrap(), p["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [
            ("WORKFLOW.PARSE.WRONG_TYPE", "tags"),
            ("WORKFLOW.PARSE.UNKNOWN_KEY", "bogus")
        ]
    );
}

const RULES: &str = r#"name: rules
inputs:
  - name: target
    required: true
  - name: stage
    validation: {pattern: '^[a-z]+$', enum: [dev, prod]}
  - name: retries
    type: integer
    default: 3
    validation: {min: 1, max: 9}
  - name: verbose
    type: boolean
  - name: config
    validation:
      file_exists: true
      file_extension: [.yaml, .yml]
states:
  initial: show
  show:
    type: step
    command: touch ran; printf '%s|%s|%s|%s' {{inputs.stage}} {{inputs.retries}} {{inputs.verbose}} {{inputs.config}}
    on_success: done
  done:
    type: terminal
"#;

#[test]
fn every_rule_is_checked_at_run_time_and_all_problems_reported_at_once() {
    let c = Case::new("rules", RULES);
    let (code, problems) = c.validate();
    assert_eq!(code, 0, "{problems:#?}");
    let out = c.run(&[
        "stage=Prod",
        "retries=12",
        "verbose=maybe",
        "config=missing.json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    for line in [
        "input validation failed: 7 errors:",
        "  - inputs.target: required but not provided",
        "  - inputs.stage: value \"Prod\" does not match pattern \"^[a-z]+$\"",
        "  - inputs.stage: value \"Prod\" not in allowed values [dev prod]",
        "  - inputs.retries: value 12 exceeds maximum 9",
        "  - inputs.verbose: cannot convert \"maybe\" to boolean",
        "  - inputs.config: file does not exist: missing.json",
        "  - inputs.config: file extension \".json\" not in allowed extensions [.yaml .yml]",
    ] {
        assert!(err.contains(line), "{line:?} in\n{err}");
    }
    assert!(err.contains("USER.INPUT.INVALID"), "{err}");
    assert!(!c.dir.join("ran").exists(), "nothing runs");

    // Each remaining message: below the minimum, not an integer, no extension, wrong
    // extension (the file exists, so only its extension is refused).
    std::fs::write(c.dir.join("conf.json"), "{}").unwrap();
    std::fs::write(c.dir.join("Makefile"), "").unwrap();
    for (given, message) in [
        ("retries=0", "inputs.retries: value 0 is below minimum 1"),
        (
            "retries=two",
            "inputs.retries: cannot convert \"two\" to integer",
        ),
        (
            "config=conf.json",
            "inputs.config: file extension \".json\" not in allowed extensions [.yaml .yml]",
        ),
        (
            "config=Makefile",
            "inputs.config: file \"Makefile\" has no extension, allowed: [.yaml .yml]",
        ),
    ] {
        let out = c.run(&["target=x", given]);
        assert_eq!(out.status.code(), Some(1), "{given}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("input validation failed: {message}")),
            "{given}: {}",
            stderr(&out)
        );
    }

    // All good, with a boolean given as AWF takes it (`yes`) and the value kept as given.
    std::fs::write(c.dir.join("conf.yml"), "{}").unwrap();
    let out = c.run(&["target=x", "stage=dev", "verbose=YES", "config=conf.yml"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#} {}", stderr(&out));
    assert_eq!(summary_state(&s, "show")["output"], "dev|3|YES|conf.yml");
}

#[test]
fn a_missing_required_input_keeps_its_code() {
    let c = Case::new("missing", RULES);
    let out = c.run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("input validation failed: inputs.target: required but not provided"),
        "{err}"
    );
    assert!(
        err.contains("--input target=VALUE") && err.contains("USER.INPUT.MISSING"),
        "{err}"
    );
    // `--output json` says it on stdout too.
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON summary ({e}): {:?}", out.stdout));
    assert_eq!(s["status"], "invalid", "{s:#}");
    assert_eq!(s["exit_code"], 1, "{s:#}");
    assert_eq!(s["error"]["code"], "USER.INPUT.MISSING", "{s:#}");
}

#[test]
fn bad_rules_are_refused_by_validate_with_their_path() {
    let c = Case::new(
        "bad-rules",
        r#"name: bad
inputs:
  - name: b
    validation: {pattern: '([a-z]+', min: 1}
  - name: c
    type: integer
    validation: {min: 10, max: 1}
  - name: d
    validation: {file_extension: [.rs, md], enum: dev}
states:
  initial: done
  done:
    type: terminal
"#,
    );
    let (code, problems) = c.validate();
    assert_eq!(code, 2, "{problems:#?}");
    let got: Vec<(&str, &str, u64)> = problems
        .iter()
        .map(|p| {
            assert_eq!(p["severity"], "error", "{p:#}");
            assert!(!p["hint"].as_str().unwrap().is_empty(), "{p:#}");
            (
                p["code"].as_str().unwrap(),
                p["path"].as_str().unwrap(),
                p["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "WORKFLOW.PARSE.INVALID_VALUE",
                "inputs[0].validation.pattern",
                4
            ),
            (
                "WORKFLOW.PARSE.INVALID_VALUE",
                "inputs[0].validation.min",
                4
            ),
            (
                "WORKFLOW.PARSE.INVALID_VALUE",
                "inputs[1].validation.min",
                7
            ),
            ("WORKFLOW.PARSE.WRONG_TYPE", "inputs[2].validation.enum", 9),
            (
                "WORKFLOW.PARSE.INVALID_VALUE",
                "inputs[2].validation.file_extension[1]",
                9
            ),
        ]
    );
    let ext = &problems[4];
    assert!(ext["hint"].as_str().unwrap().contains("\".md\""), "{ext:#}");
    // `awf run` refuses it too, before anything runs.
    let out = c.run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn an_undeclared_input_is_passed_on_with_a_warning() {
    let c = Case::new(
        "undeclared",
        &format!(
            "\
name: u
states:
  initial: done
{DONE}"
        ),
    );
    let out = c.run(&["foo=bar"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "awf: WARN --input foo: the workflow declares no input \"foo\"; it is passed on \
             as AWF does"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(c.status(&out)["inputs"]["foo"], "bar");
}

#[test]
fn a_misspelt_input_is_refused_naming_the_input_it_is_near() {
    let c = Case::new(
        "misspelt",
        &format!(
            "\
name: m
inputs:
  - name: mode
    type: string
    default: quick
states:
  initial: done
{DONE}"
        ),
    );
    let out = c.run(&["mdoe=full"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("did you mean \"mode\"? (--input mode=full)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_workflow_is_found_by_its_name() {
    let c = Case::new(
        "by-name",
        &format!(
            "\
name: n
states:
  initial: done
{DONE}"
        ),
    );
    // `awf run wf` finds wf.yaml beside it; `awf run fix` AWF's .awf/workflows/fix.yaml.
    let out = c.awf(&["run", "wf", "--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::create_dir_all(c.dir.join(".awf/workflows")).unwrap();
    std::fs::copy(&c.wf, c.dir.join(".awf/workflows/fix.yaml")).unwrap();
    let out = c.awf(&["run", "fix", "--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = c.awf(&["validate", "fix"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A name that is none of them still names what was given.
    let out = c.awf(&["run", "nothing"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("nothing"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing.yaml, nothing.yml or .awf/workflows/nothing.yaml"),
        "{}",
        stderr(&out)
    );
}

/// AWF passes an undeclared `--input` to templates; here the template check that `awf
/// run` shares with `awf validate` still refuses `{{inputs.foo}}` for an undeclared
/// `foo` (workflow/check.rs), so this waits for that check to let `awf run` through.
#[test]
fn an_undeclared_input_reaches_a_step_template() {
    let c = Case::new(
        "undeclared-template",
        "\
name: u
states:
  initial: show
  show:
    type: step
    command: printf %s {{inputs.foo}}
    on_success: done
  done:
    type: terminal
",
    );
    let out = c.run(&["foo=bar"]);
    let s = run_summary(&out);
    assert_eq!(out.status.code(), Some(0), "{s:#} {}", stderr(&out));
    assert_eq!(summary_state(&s, "show")["output"], "bar");
}

#[test]
fn secret_inputs_are_masked_in_the_run_state() {
    let c = Case::new(
        "secret",
        "\
name: s
inputs:
  - name: API_KEY_DEPLOY
  - name: token_x
  - name: user
states:
  initial: done
  done:
    type: terminal
",
    );
    let out = c.run(&[
        "API_KEY_DEPLOY=sk-live-0123456789",
        "token_x=tok-abcdef",
        "user=alice",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let inputs = &c.status(&out)["inputs"];
    assert_eq!(inputs["API_KEY_DEPLOY"], "***");
    assert_eq!(inputs["token_x"], "***");
    assert_eq!(inputs["user"], "alice");
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains("sk-live-0123456789"), "{all}");

    // What a step prints of a secret input's value is kept as ***, in its output and in
    // what later states read of it.
    let c = Case::new(
        "secret-output",
        r#"name: s
inputs:
  - name: PASSWORD_DB
states:
  initial: leak
  leak:
    type: step
    command: echo "pw={{inputs.PASSWORD_DB}}"
    on_success: done
  done:
    type: terminal
    message: "saw {{states.leak.Output}}"
"#,
    );
    let out = c.run(&["PASSWORD_DB=hunter2-secret"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains("hunter2-secret"), "{all}");
    assert!(all.contains("saw pw=***"), "{all}");

    // What a failing step writes of it to stderr: masked as it is shown live, in the
    // state's stderr and in its error.
    let c = Case::new(
        "secret-stderr",
        r#"name: s
inputs:
  - name: PASSWORD_DB
states:
  initial: leak
  leak:
    type: step
    command: echo "cannot log in with {{inputs.PASSWORD_DB}}" >&2; exit 1
    on_success: done
  done:
    type: terminal
"#,
    );
    let out = c.run(&["PASSWORD_DB=hunter2-secret"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!all.contains("hunter2-secret"), "{all}");
    assert!(all.contains("[leak!] cannot log in with ***"), "{all}");
    assert!(all.contains("  cannot log in with ***"), "{all}");
}

#[test]
fn an_unknown_type_is_refused_only_when_the_run_gives_the_input_a_value() {
    let c = Case::new(
        "unknown-type",
        "\
name: t
inputs:
  - name: a
    type: number
states:
  initial: done
  done:
    type: terminal
",
    );
    let (code, problems) = c.validate();
    assert_eq!(code, 0, "{problems:#?}");
    assert_eq!(problems[0]["severity"], "warning");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains("string, integer, boolean"),
        "{:#}",
        problems[0]
    );
    let out = c.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = c.run(&["a=1.5"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("inputs.a: unknown type \"number\""),
        "{}",
        stderr(&out)
    );
}
