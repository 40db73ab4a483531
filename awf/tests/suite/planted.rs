//! awf's own files against an agent that plants symlinks or edits them from its Bash:
//! the audit file and the run's private files live where Bash cannot write, are created
//! without following a symlink, and a planted link makes awf refuse, not write through it.

use crate::common;
use crate::fake_model;
use common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

fn trivial_workflow(dir: &Path) -> PathBuf {
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        "\
name: t
states:
  initial: a
  a:
    type: step
    command: echo hi
    on_success: done
  done:
    type: terminal
    status: success
",
    )
    .unwrap();
    wf
}

/// `awf run` of the trivial workflow in `root` with `tmp` as its temp dir and `state` as
/// XDG_STATE_HOME.
fn awf_run(root: &Path, tmp: &Path, state: &Path, extra: &[&str]) -> std::process::Output {
    let wf = trivial_workflow(root.parent().unwrap());
    awf_run_of(&wf, root, tmp, state, extra, false)
}

/// `awf run` of `wf` in `root`, as [`awf_run`]; `no_mounts`: where Bash gets no mount
/// namespace.
fn awf_run_of(
    wf: &Path,
    root: &Path,
    tmp: &Path,
    state: &Path,
    extra: &[&str],
    no_mounts: bool,
) -> std::process::Output {
    let mut cmd = common::awf_run(root, wf);
    cmd.args(extra)
        .env("TMPDIR", tmp)
        .env("XDG_STATE_HOME", state);
    if no_mounts {
        common::restricted::without_mounts(&mut cmd);
    }
    cmd.output().unwrap()
}

#[test]
fn bash_cannot_edit_or_delete_the_audit_in_its_default_place() {
    let (base, root, _o) = workspace("audit-sed");
    let tmp = base.join("tmp");
    let state = base.join("state");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = awf_run(&root, &tmp, &state, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let audit_dir = PathBuf::from(summary["audit_dir"].as_str().unwrap());
    // (A step with mcp_proxy creates it; this workflow has none.)
    std::fs::create_dir_all(&audit_dir).unwrap();
    // The audit of a step, recorded by a server whose Bash has the steps' Landlock domain.
    let audit = audit_dir.join("1-a.audit.jsonl");
    let mut s = Server::start(
        &[
            "mcp-serve",
            "--root",
            root.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    s.initialize();
    s.ok("Glob", json!({"pattern": "*"}));
    let before = std::fs::read_to_string(&audit).unwrap();
    assert!(before.contains("\"Glob\""), "{before}");
    let a = audit.display();
    let (text, _) = s.call(
        "Bash",
        json!({"command": format!("sed -i s/Glob/Forged/ {a}; rm -f {a}; echo x >> {a}")}),
    );
    assert_eq!(
        std::fs::read_to_string(&audit).unwrap().get(..before.len()),
        Some(before.as_str()),
        "the audit was changed from Bash: {text}"
    );
    // Refused by Landlock (EACCES) or, first, by the read-only mount (EROFS).
    assert!(
        text.contains("Permission denied") || text.contains("Read-only file system"),
        "{text}"
    );
    s.finish();
}

/// A workflow whose one state is an agent with `mcp_proxy` (its model never answers: the
/// run is refused before it starts, or the state fails).
fn proxied_workflow(dir: &Path) -> PathBuf {
    let wf = dir.join("proxied.yaml");
    std::fs::write(
        &wf,
        "\
name: p
states:
  initial: a
  a:
    type: agent
    provider: openai_compatible
    prompt: hi
    timeout: 5s
    options:
      base_url: http://127.0.0.1:9/v1
      model: m
    mcp_proxy:
      enable: true
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    wf
}

fn awf_run_proxied(
    root: &Path,
    tmp: &Path,
    state: &Path,
    extra: &[&str],
    no_mounts: bool,
) -> std::process::Output {
    let wf = proxied_workflow(root.parent().unwrap());
    awf_run_of(&wf, root, tmp, state, extra, no_mounts)
}

#[test]
fn a_workflow_without_a_proxied_agent_is_never_refused_for_its_audit_or_state_dir() {
    let (base, root, _o) = workspace("no-agent-dirs");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // The docs' first command from the project directory (state under the workspace), an
    // audit dir in the workspace or the temp dir: no agent, nothing to keep them from.
    for (state, extra) in [
        (root.join(".state"), vec![]),
        (base.join("state"), vec!["--audit-dir", "audit/"]),
        (tmp.join("state"), vec![]),
    ] {
        let out = awf_run(&root, &tmp, &state, &extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{state:?} {extra:?}: {err}");
    }
}

#[test]
fn awf_run_refuses_an_audit_dir_that_bash_may_write() {
    let (base, root, _o) = workspace("audit-inside");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // Beneath the temp dir, which anyone may write: refused for a proxied workflow.
    let dir = tmp.join("audit");
    let out = awf_run_proxied(
        &root,
        &tmp,
        &base.join("state"),
        &["--audit-dir", dir.to_str().unwrap()],
        false,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("the audit directory {}", dir.display()))
            && err.contains("Bash may write")
            && err.contains("--audit-dir"),
        "{err}"
    );
    assert!(!dir.exists(), "{} was created", dir.display());
    // The run directory (under XDG_STATE_HOME) is checked the same way.
    let out = awf_run_proxied(&root, &tmp, &tmp.join("state"), &[], false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("XDG_STATE_HOME"), "{err}");

    // Beneath the workspace where Bash gets no mount namespace (Landlock cannot carve a
    // hole in a writable tree): refused before anything runs, nothing made there, the
    // reason said. A relative --audit-dir and a dangling symlink into the workspace too.
    let link = base.join("audit-link");
    std::os::unix::fs::symlink(root.join("not-yet"), &link).unwrap();
    for (dir, made) in [
        (root.join("audit"), root.join("audit")),
        (PathBuf::from("rel-audit"), root.join("rel-audit")),
        (link.clone(), root.join("not-yet")),
    ] {
        let out = awf_run_proxied(
            &root,
            &tmp,
            &base.join("state"),
            &["--audit-dir", dir.to_str().unwrap()],
            true,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&dir.display().to_string())
                && err.contains("Bash may write")
                && err.contains("no mount namespace"),
            "{err}"
        );
        assert!(!made.exists(), "{} was created", made.display());
    }
}

#[test]
fn a_called_workflow_with_a_proxied_agent_is_checked_before_it_runs() {
    let (base, root, _o) = workspace("called-proxied");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    proxied_workflow(&base);
    let parent = base.join("parent.yaml");
    std::fs::write(
        &parent,
        "\
name: parent
states:
  initial: call
  call:
    type: call_workflow
    workflow: proxied.yaml
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    let dir = tmp.join("audit");
    let out = common::awf_run(&root, &parent)
        .arg("--audit-dir")
        .arg(&dir)
        .env("TMPDIR", &tmp)
        .env("XDG_STATE_HOME", base.join("state"))
        .output()
        .unwrap();
    let s = run_summary(&out);
    let text = s.to_string();
    assert_ne!(out.status.code(), Some(0), "{s:#}");
    assert!(
        text.contains("calls") && text.contains("Bash may write"),
        "{s:#}"
    );
    assert!(!dir.exists(), "{} was created", dir.display());
}

#[test]
fn an_audit_and_state_dir_in_the_workspace_are_covered_from_the_agent() {
    let (base, root, _o) = workspace("state-in-workspace");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let state = root.join(".state");
    // The agent looks for awf's files beneath the workspace and tries to forge them.
    let model = fake_model::FakeModel::start(fake_model::Script::new().call(
        "Bash",
        json!({"command": "ls -A .state/awf; touch .state/awf/planted; \
                for f in $(find .state -type f); do echo FORGED >> \"$f\"; done; echo BASH-RAN"}),
    ));
    let wf = base.join("agent.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: a
states:
  initial: a
  a:
    type: agent
    provider: openai_compatible
    prompt: hi
    timeout: 60s
    options:
      base_url: {}/v1
      model: m
    mcp_proxy:
      enable: true
    on_success: done
  done:
    type: terminal
",
            model.base_url()
        ),
    )
    .unwrap();
    let out = common::awf_run(&root, &wf)
        .env("TMPDIR", &tmp)
        .env("XDG_STATE_HOME", &state)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let covered = !err.contains("no mount namespace");
    if !covered {
        // This machine gives Bash no mount namespace: refused, as the test above checks.
        assert_eq!(out.status.code(), Some(1), "{err}");
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{err}\n{}", model.describe());
    let answers = model.answers().join("\n");
    assert!(answers.contains("BASH-RAN"), "{}", model.describe());
    // Its cover is an empty read-only directory.
    assert!(
        answers.contains("Read-only file system") || answers.contains("Permission denied"),
        "{answers}"
    );
    // Nothing of awf's was visible, writable or changed from the agent's Bash.
    assert!(!state.join("awf/planted").exists());
    let mut files = Vec::new();
    let mut dirs = vec![state.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    let audits: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".audit.jsonl"))
        .collect();
    assert!(
        !audits.is_empty(),
        "no audit under {}: {files:?}",
        state.display()
    );
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(
            !text.contains("FORGED\n") || text.contains("echo FORGED"),
            "{} was changed",
            f.display()
        );
    }
    // The Bash call itself is on record there.
    let audit = std::fs::read_to_string(audits[0]).unwrap();
    assert!(audit.contains("BASH-RAN"), "{audit}");
}

#[test]
fn a_planted_audit_symlink_or_hard_link_is_refused_and_the_victim_untouched() {
    let (base, root, outside) = workspace("audit-planted");
    let victim = outside.join("secret");
    let dir = base.join("audit");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("sym.jsonl")).unwrap();
    std::fs::hard_link(&victim, dir.join("hard.jsonl")).unwrap();
    for name in ["sym.jsonl", "hard.jsonl"] {
        let planted = dir.join(name);
        let out = Command::new(AWF)
            .args(["mcp-serve", "--root"])
            .arg(&root)
            .arg("--audit")
            .arg(&planted)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: the server started: {err}");
        assert!(
            err.contains("refused") || err.contains("symbolic link"),
            "{name}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "TOPSECRET\n");
    }
}

#[test]
fn mcp_serve_refuses_an_audit_file_that_bash_may_write() {
    let (_base, root, _o) = workspace("serve-audit-inside");
    let audit = root.join("audit.jsonl");
    let out = Command::new(AWF)
        .args(["mcp-serve", "--root"])
        .arg(&root)
        .arg("--audit")
        .arg(&audit)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the server started: {err}");
    assert!(
        err.contains(&root.display().to_string())
            && err.contains("Bash may write")
            && err.contains("--audit"),
        "{err}"
    );
    assert!(!audit.exists());
}
