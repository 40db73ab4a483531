//! awf's own files against an agent that plants symlinks or edits them from its Bash:
//! the audit file and the run's private files live where Bash cannot write, are created
//! without following a symlink, and a planted link makes awf refuse, not write through it.

mod common;
use common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

fn trivial_workflow(dir: &Path) -> PathBuf {
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        "name: t\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    on_success: done\n  done:\n    type: terminal\n    status: success\n",
    )
    .unwrap();
    wf
}

/// `awf run` in `root` with `tmp` as its temp dir and `state` as XDG_STATE_HOME.
fn awf_run(root: &Path, tmp: &Path, state: &Path, extra: &[&str]) -> std::process::Output {
    let wf = trivial_workflow(root.parent().unwrap());
    Command::new(AWF)
        .arg("run")
        .arg(&wf)
        .args(["--output", "json"])
        .args(extra)
        .current_dir(root)
        .env("TMPDIR", tmp)
        .env("XDG_STATE_HOME", state)
        .env("AWF_PLUGINS_PATH", "")
        .output()
        .unwrap()
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

#[test]
fn awf_run_refuses_an_audit_dir_that_bash_may_write() {
    let (base, root, _o) = workspace("audit-inside");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for dir in [root.join("audit"), tmp.join("audit")] {
        let out = awf_run(
            &root,
            &tmp,
            &base.join("state"),
            &["--audit-dir", dir.to_str().unwrap()],
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
    }
    // A relative --audit-dir (from the workspace) and a dangling symlink into the
    // workspace: refused before anything runs, and nothing made in the workspace.
    let out = awf_run(
        &root,
        &tmp,
        &base.join("state"),
        &["--audit-dir", "rel-audit"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rel-audit") && err.contains("Bash may write"),
        "{err}"
    );
    assert!(
        !root.join("rel-audit").exists(),
        "a relative audit dir was made"
    );
    let link = base.join("audit-link");
    std::os::unix::fs::symlink(root.join("not-yet"), &link).unwrap();
    let out = awf_run(
        &root,
        &tmp,
        &base.join("state"),
        &["--audit-dir", link.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Bash may write"), "{err}");
    assert!(
        !root.join("not-yet").exists(),
        "the audit dir was made through the link"
    );
    // The run directory (under XDG_STATE_HOME) is checked the same way.
    let out = awf_run(&root, &tmp, &tmp.join("state"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("XDG_STATE_HOME"), "{err}");
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
