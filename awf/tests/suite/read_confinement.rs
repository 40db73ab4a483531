//! What the agent's Bash can read and see, tried as an attacker would: secrets planted
//! where users keep them (`~/.ssh`, `~/.aws`, the agent CLIs' logins, `~/.netrc`), a
//! repository beside the workspace, the environment of an unrelated process of the same
//! user; and what it can signal. Under the default policy (`read: confined`) none of it is
//! reachable, while real toolchains still work; `readable:`, `read: host` and `hidden:`
//! do what they say. Each test speaks MCP to a real `awf mcp-serve`; the agent tests run
//! the same probe through every real CLI and `openai_compatible`.

use crate::common;
use crate::fake_model;
use crate::harness;

use common::{Server, pids_with_arg, write_config};
use fake_model::{FakeModel, Script};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Every planted secret holds this; the probe commands never spell it whole.
const MARK: &str = "SECRET-7q3";
/// The probe's way to name it without writing it: the shell joins the halves.
const MARK_SPLIT: &str = "SEC\"\"RET-7q3";

/// The files a user's home holds secrets in, relative to the home.
const PLANTED: &[&str] = &[
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".netrc",
    ".config/gh/hosts.yml",
    ".cargo/credentials.toml",
];

/// The kernel's Landlock ABI (0 without Landlock).
fn landlock_abi() -> i64 {
    // SAFETY: the documented version query takes no pointer.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    v.max(0)
}

/// Skips (or, with CI=true, fails) where the kernel cannot confine reads.
fn require_read_confinement() -> bool {
    if landlock_abi() >= 1 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI runs on a kernel with Landlock"
    );
    eprintln!("SKIP: no Landlock on this kernel");
    false
}

/// A home with planted secrets, a repository beside the workspace and an unrelated
/// process with a secret in its environment.
struct Victim {
    home: PathBuf,
    sibling: PathBuf,
    unrelated: Child,
    unrelated_marker: String,
}

impl Victim {
    fn plant(base: &Path, tag: &str) -> Victim {
        let home = base.join("home");
        for (i, rel) in PLANTED.iter().enumerate() {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{MARK}-file{i}\n")).unwrap();
        }
        let sibling = base.join("sibling-repo");
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(sibling.join("secret.txt"), format!("{MARK}-sibling\n")).unwrap();
        let unrelated_marker = format!("985.{}{tag}", std::process::id());
        let unrelated = Command::new("sleep")
            .arg(&unrelated_marker)
            .env("AWF_UNRELATED_TOKEN", format!("{MARK}-environ"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        assert!(
            common::eventually(|| pids_with_arg(&unrelated_marker).len() == 1),
            "the unrelated sleep did not start"
        );
        Victim {
            home,
            sibling,
            unrelated,
            unrelated_marker,
        }
    }

    /// The probe: reads every planted secret, greps for the mark over the home, the
    /// sibling, /tmp and every process's environment, lists the processes and signals the
    /// unrelated one and its own parent. Markers the test looks for are computed by the
    /// shell, so they appear in the result only.
    fn probe(&self) -> String {
        let files: Vec<String> = PLANTED.iter().map(|r| format!("~/{r}")).collect();
        format!(
            "P={MARK_SPLIT}; echo PROBE-BEGIN-$((6*7)); \
             for f in {files} {sib}/secret.txt; do cat \"$f\" 2>&1; done; \
             grep -rs \"$P\" ~ {sib} /tmp 2>/dev/null | head -5; \
             cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep \"$P\"; \
             ls /proc | grep -c '^[0-9]' | sed \"s/^/PROCS$((1+1))-/\"; ps -eo args; \
             kill -0 {pid} 2>/dev/null && echo UNRELATED-$((1+1))-SIGNALLED || echo UNRELATED-$((1+1))-REFUSED; \
             kill -STOP $PPID 2>/dev/null && echo STOP-$((1+1))-SENT || echo STOP-$((1+1))-REFUSED; \
             kill -9 $PPID 2>/dev/null && echo KILL-$((1+1))-SENT || echo KILL-$((1+1))-REFUSED; \
             echo PROBE-END-$((6*7))",
            files = files.join(" "),
            sib = self.sibling.display(),
            pid = self.unrelated.id(),
        )
    }

    /// Checks a probe's output (the Bash result, or everything the model saw).
    fn assert_nothing_leaked(&self, seen: &str, ctx: &str) {
        assert!(
            seen.contains("PROBE-BEGIN-42") && seen.contains("PROBE-END-42"),
            "the probe did not run to its end\n{ctx}"
        );
        assert!(!seen.contains(MARK), "a planted secret was read\n{ctx}");
        assert!(
            !seen.contains(&self.unrelated_marker),
            "the unrelated process is visible\n{ctx}"
        );
        assert!(
            seen.contains("UNRELATED-2-REFUSED"),
            "the unrelated process could be signalled\n{ctx}"
        );
        // Few processes: the call's init, its shell and the probe's pipeline.
        let procs: usize = seen
            .split("PROCS2-")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no process count\n{ctx}"));
        assert!(procs <= 8, "{procs} processes visible\n{ctx}");
        if landlock_abi() >= 6 {
            // Landlock's signal scope: the call's init is outside its domain.
            assert!(
                seen.contains("STOP-2-REFUSED") && seen.contains("KILL-2-REFUSED"),
                "the shell could signal its parent\n{ctx}"
            );
        }
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.unrelated.kill();
        let _ = self.unrelated.wait();
    }
}

/// `awf mcp-serve ARGS` with HOME set to `home` and TMPDIR beside it, initialized.
fn serve(base: &Path, args: &[&str], home: Option<&Path>) -> Server {
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut env = vec![("TMPDIR", tmp.to_str().unwrap().to_string())];
    if let Some(h) = home {
        env.push(("HOME", h.to_str().unwrap().to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut s = Server::start(&[&["mcp-serve"], args].concat(), &env);
    s.initialize();
    s
}

fn text_of(s: &mut Server, command: &str) -> String {
    let (text, _) = s.call("Bash", json!({ "command": command }));
    text
}

#[test]
fn planted_secrets_other_processes_and_the_parent_are_out_of_reach() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-planted");
    let victim = Victim::plant(&base, "1");
    let mut s = serve(
        &base,
        &["--root", root.to_str().unwrap()],
        Some(&victim.home),
    );
    let out = text_of(&mut s, &victim.probe());
    victim.assert_nothing_leaked(&out, &out);
    // The workspace itself reads and the refusals say why.
    std::fs::write(root.join("mine.txt"), "MINE\n").unwrap();
    let out = text_of(
        &mut s,
        &format!(
            "cat mine.txt; cat {}/secret.txt; ls ~",
            victim.sibling.display()
        ),
    );
    assert!(out.contains("MINE"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    // The server answers on: the probe stopped and killed nothing of awf's.
    assert!(text_of(&mut s, "echo alive").contains("alive"));
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn the_tool_description_states_the_read_policy() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-describe");
    let mut s = serve(&base, &["--root", root.to_str().unwrap()], None);
    let tools = s.request("tools/list", json!({}));
    let bash = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap()["description"]
        .as_str()
        .unwrap()
        .to_string();
    for needle in [
        "read: confined",
        "toolchains on PATH",
        "read as empty",
        "PID namespace",
    ] {
        assert!(bash.contains(needle), "{needle:?} missing: {bash}");
    }
    s.finish();
}

/// Real toolchains under the default policy, with the machine's real home (where rustup,
/// pyenv and nvm keep their homes).
#[test]
fn real_toolchains_work_under_the_default_policy() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-toolchains");
    let krate = root.join("tiny");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/main.rs"),
        "fn main() { println!(\"TINY-{}\", 6 * 7); }\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&root)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "first commit of the tiny crate"]);
    let mut s = serve(&base, &["--root", root.to_str().unwrap()], None);
    let ok = |s: &mut Server, cmd: &str| -> String {
        let (text, is_error) = s.call("Bash", json!({ "command": cmd, "timeout_seconds": 300 }));
        assert!(!is_error, "{cmd}: {text}");
        text
    };
    assert!(ok(&mut s, "cargo --version").contains("cargo 1."));
    let out = ok(
        &mut s,
        "cd tiny && cargo build --offline -q 2>&1 && ./target/debug/tiny",
    );
    assert!(out.contains("TINY-42"), "{out}");
    let out = ok(&mut s, "python3 -c 'import json; print(json.dumps([6*7]))'");
    assert!(out.contains("[42]"), "{out}");
    if Command::new("node").arg("-e").arg("1").output().is_ok() {
        let out = ok(&mut s, "node -e 'console.log(6*7)'");
        assert!(out.contains("42"), "{out}");
    }
    let out = ok(&mut s, "git status --short && git log --oneline");
    assert!(out.contains("first commit of the tiny crate"), "{out}");
    s.finish();
}

#[test]
fn readable_paths_read_and_read_host_hides_the_secret_list_and_hidden_paths() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-modes");
    let victim = Victim::plant(&base, "2");
    let shared = base.join("shared-lib");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("lib.txt"), "SHARED-LIB\n").unwrap();
    std::fs::write(victim.home.join("notes.txt"), "HOME-NOTES\n").unwrap();
    let private = victim.home.join("private-project");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("plan.txt"), format!("{MARK}-hidden\n")).unwrap();
    let files = PLANTED
        .iter()
        .map(|r| format!("~/{r}"))
        .collect::<Vec<_>>()
        .join(" ");

    // confined + readable: the named directories read, the rest of the home does not,
    // and a secret inside a readable directory stays covered.
    std::fs::write(victim.home.join(".cargo/env"), "CARGO-ENV\n").unwrap();
    let cargo = victim.home.join(".cargo");
    let cfg = write_config(
        &base,
        &json!({"root": root, "readable_paths": [shared, cargo]}),
    );
    let mut s = serve(
        &base,
        &["--config", cfg.to_str().unwrap()],
        Some(&victim.home),
    );
    let out = text_of(
        &mut s,
        &format!(
            "cat {}/lib.txt; cat ~/notes.txt; cat ~/.cargo/env; cat ~/.cargo/credentials.toml",
            shared.display()
        ),
    );
    assert!(
        out.contains("SHARED-LIB") && out.contains("CARGO-ENV"),
        "{out}"
    );
    assert!(!out.contains("HOME-NOTES"), "{out}");
    assert!(!out.contains(MARK), "{out}");
    s.finish();

    // host: the home reads, but not the built-in secret list nor the `hidden:` paths.
    let cfg = base.join("host.json");
    std::fs::write(
        &cfg,
        json!({"root": root, "read": "host", "hidden_paths": [private]}).to_string(),
    )
    .unwrap();
    let mut s = serve(
        &base,
        &["--config", cfg.to_str().unwrap()],
        Some(&victim.home),
    );
    let out = text_of(
        &mut s,
        &format!(
            "P={MARK_SPLIT}; cat ~/notes.txt {}/secret.txt; for f in {files}; do cat \"$f\"; done; \
             ls ~/private-project | wc -l | sed 's/^/ENTRIES-/'; grep -rs \"$P\" ~ | head -3; \
             ls -a ~/.ssh | wc -l | sed 's/^/SSH-/'; echo END-$((6*7))",
            victim.sibling.display()
        ),
    );
    assert!(out.contains("END-42"), "{out}");
    assert!(
        out.contains("HOME-NOTES") && out.contains(&format!("{MARK}-sibling")),
        "read: host reads the home and beyond: {out}"
    );
    let leaked: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(MARK) && !l.contains("-sibling"))
        .collect();
    assert!(leaked.is_empty(), "hidden secrets read: {leaked:?}\n{out}");
    assert!(
        out.contains("ENTRIES-0"),
        "the hidden dir is not empty: {out}"
    );
    // `.` and `..` only: an empty cover.
    assert!(out.contains("SSH-2"), "~/.ssh is not covered: {out}");
    // The cover is read-only: nothing can be planted there either.
    let (text, is_error) = s.call("Bash", json!({"command": "touch ~/.ssh/x"}));
    assert!(is_error, "{text}");
    s.finish();
}

#[test]
fn a_bad_read_policy_is_refused_naming_the_way_out() {
    let (base, root, _) = common::workspace("read-bad");
    let cfg = write_config(
        &base,
        &json!({"root": root, "read": "confined", "landlock": false}),
    );
    let out = Command::new(common::AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("read is confined but landlock is false"),
        "{err}"
    );
    let cfg = write_config(&base, &json!({"root": root, "read": "everything"}));
    let out = Command::new(common::AWF)
        .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("everything"), "{err}");
}

// --- the same probe through every real agent CLI and openai_compatible -----------------

fn through_agent(provider: &str, tag: &str) {
    if !require_read_confinement() {
        return;
    }
    let program = if provider == "openai_compatible" {
        None
    } else {
        match harness::agent_cli(provider) {
            Some(p) => Some(p),
            None => return,
        }
    };
    let step = harness::Step::new(&format!("read-{provider}"));
    let victim = Victim::plant(&step.base, tag);
    // Planted in the step's home, which is the HOME `awf run` gets.
    assert_eq!(victim.home, step.home);
    // The codex shell snapshot: nothing of the CLI's state may be where Bash reads.
    let probe = format!(
        "{}; ls -a ~/.codex/shell_snapshots 2>&1 | head -3",
        victim.probe()
    );
    let fake = FakeModel::start(Script::new().call("Bash", json!({ "command": probe })));
    let opts = harness::model_options(provider, program.as_deref(), &fake);
    let run = harness::run_workflow(
        &step,
        provider,
        &opts,
        "{enable: true}",
        None,
        &[("AWF_PLANTED_SECRET_TOKEN", format!("{MARK}-awf-run-env"))],
    );
    let seen = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let ctx = format!(
        "{provider}: status {}\n--- stderr ---\n{}\n--- fake model ---\n{}",
        run.status,
        run.stderr,
        fake.describe()
    );
    victim.assert_nothing_leaked(&seen, &ctx);
    // The CLI wrote nothing of its own into the user's home.
    assert!(
        !step.home.join(".codex/shell_snapshots").exists(),
        "{provider}: a shell snapshot in the home\n{ctx}"
    );
    assert!(
        pids_with_arg(&victim.unrelated_marker).len() == 1,
        "{provider}: the unrelated process was touched\n{ctx}"
    );
}

#[test]
fn claude_bash_reads_no_secret_and_sees_no_process() {
    through_agent("claude", "31");
}

#[test]
fn codex_bash_reads_no_secret_and_sees_no_process() {
    through_agent("codex", "32");
}

#[test]
fn gemini_bash_reads_no_secret_and_sees_no_process() {
    through_agent("gemini", "33");
}

#[test]
fn opencode_bash_reads_no_secret_and_sees_no_process() {
    through_agent("opencode", "34");
}

#[test]
fn openai_compatible_bash_reads_no_secret_and_sees_no_process() {
    through_agent("openai_compatible", "35");
}

/// `awf run --input token=…`: the agent's Bash (in-process for openai_compatible, so the
/// call's init is a fork of `awf run` itself) cannot read it from any command line.
#[test]
fn an_input_of_awf_run_is_not_readable_from_any_command_line() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-input");
    let probe = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; ps -eo args; \
                 echo PROBE-END-$((6*7))";
    let fake = FakeModel::start(Script::new().call("Bash", json!({ "command": probe })));
    let wf = base.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: input-probe
inputs:
  - name: token
states:
  initial: work
  work:
    type: agent
    provider: openai_compatible
    prompt: go
    timeout: 60s
    options: {{base_url: \"{}/v1\", model: m}}
    mcp_proxy: {{enable: true}}
    on_success: done
  done:
    type: terminal
",
            fake.base_url()
        ),
    )
    .unwrap();
    let audit = base.join("audit");
    let out = common::awf_run(&root, &wf)
        .arg("--input")
        .arg(format!("token={MARK}-input"))
        .arg("--audit-dir")
        .arg(&audit)
        .env("TMPDIR", fake_model::private_tmp(&audit))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        seen.contains("PROBE-END-42") && seen.contains("awf-init"),
        "{seen}"
    );
    assert!(
        !seen.contains(MARK),
        "the input was read from a command line: {seen}"
    );
}

#[test]
fn a_readable_entry_that_is_a_link_keeps_the_secrets_it_leads_to_covered() {
    if !require_read_confinement() {
        return;
    }
    let (base, root, _) = common::workspace("read-links");
    let victim = Victim::plant(&base, "4");
    std::fs::write(victim.home.join("notes.txt"), "HOME-NOTES\n").unwrap();
    // One link to a secret location, one to the whole home; the mark is planted in every
    // listed secret location, reached here through the links.
    let ssh_link = victim.home.join("ssh-link");
    let home_link = base.join("home-link");
    std::os::unix::fs::symlink(victim.home.join(".ssh"), &ssh_link).unwrap();
    std::os::unix::fs::symlink(&victim.home, &home_link).unwrap();
    let cfg = write_config(
        &base,
        &json!({"root": root, "readable_paths": [ssh_link, home_link]}),
    );
    let mut s = serve(
        &base,
        &["--config", cfg.to_str().unwrap()],
        Some(&victim.home),
    );
    let through: Vec<String> = PLANTED
        .iter()
        .map(|r| format!("{}/{r}", home_link.display()))
        .collect();
    let out = text_of(
        &mut s,
        &format!(
            "P={MARK_SPLIT}; cat {}/id_ed25519; for f in {}; do cat \"$f\"; done; \
             cat {}/notes.txt; grep -rs \"$P\" {}/ {}/ | head -3; echo END-$((6*7))",
            ssh_link.display(),
            through.join(" "),
            home_link.display(),
            ssh_link.display(),
            home_link.display(),
        ),
    );
    assert!(out.contains("END-42"), "{out}");
    // The link to the home grants the home (as written), but not its secrets.
    assert!(out.contains("HOME-NOTES"), "{out}");
    assert!(
        !out.contains(MARK),
        "a secret was read through a link: {out}"
    );
    s.finish();
}
