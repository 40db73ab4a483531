//! Bash's writes are confined by Landlock: outside the root (and the session's private
//! temp directory) `touch` and `echo >` fail, inside they succeed; the shared temp
//! directory is not writable; the config switch turns it off.

mod common;
use common::*;
use serde_json::json;

/// The server makes each session's private temp directory under its temp directory: give
/// it one beside the root, so that "outside" is outside whatever the machine's temp
/// directory contains (CI may clone the project under /tmp).
fn private_tmp(base: &std::path::Path) -> String {
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp.to_str().unwrap().to_string()
}

fn confined(s: &mut Server) -> bool {
    let a = s.request("tools/list", json!({}));
    let desc = a["result"]["tools"][3]["description"]
        .as_str()
        .unwrap()
        .to_string();
    !desc.contains("NOT confined")
}

#[test]
fn bash_writes_outside_the_root_fail_inside_succeed() {
    let (base, root, outside) = workspace("landlock");
    let tmp = private_tmp(&base);
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("TMPDIR", &tmp)],
    );
    s.initialize();
    if !confined(&mut s) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Landlock unavailable on CI: {}",
            s.stderr()
        );
        eprintln!("SKIP: Landlock is not available on this kernel");
        return;
    }
    let o = outside.to_str().unwrap();
    let e = s.err("Bash", json!({"command": format!("touch {o}/touched")}));
    assert!(e.contains("Permission denied"), "{e}");
    let e = s.err("Bash", json!({"command": format!("echo x > {o}/echoed")}));
    assert!(e.contains("Permission denied"), "{e}");
    assert!(!outside.join("touched").exists() && !outside.join("echoed").exists());
    // Inside the root, the temp directory and /dev/null: allowed. Reads stay open.
    let out = s.ok(
        "Bash",
        json!({"command": "touch in.txt && echo y > in2.txt && mkdir -p d/e && echo z > /dev/null \
        && t=$(mktemp) && rm \"$t\" && cat /etc/hostname >/dev/null"}),
    );
    assert!(out.starts_with("exit code: 0"), "{out}");
    assert!(
        root.join("in.txt").exists() && root.join("in2.txt").exists() && root.join("d/e").is_dir()
    );
    s.finish();
}

#[test]
fn the_config_switch_turns_confinement_off_and_says_so() {
    let (base, root, outside) = workspace("landlock-off");
    let cfg = write_config(&base, &json!({"root": root, "landlock": false}));
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    assert!(!confined(&mut s));
    s.ok(
        "Bash",
        json!({"command": format!("touch {}/touched", outside.display())}),
    );
    assert!(outside.join("touched").exists());
    s.finish();
}

#[test]
fn extra_writable_paths_from_the_config() {
    let (base, root, outside) = workspace("landlock-extra");
    let cfg = write_config(&base, &json!({"root": root, "writable_paths": [outside]}));
    let tmp = private_tmp(&base);
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("TMPDIR", &tmp)],
    );
    s.initialize();
    if !confined(&mut s) {
        eprintln!("SKIP: Landlock is not available on this kernel");
        return;
    }
    s.ok(
        "Bash",
        json!({"command": format!("touch {}/extra", outside.display())}),
    );
    assert!(outside.join("extra").exists());
    let e = s.err(
        "Bash",
        json!({"command": format!("touch {}/nope", base.display())}),
    );
    assert!(e.contains("Permission denied"), "{e}");
    s.finish();
}

/// Bash's TMPDIR, from inside a command that also writes a file there.
fn bash_tmpdir(s: &mut Server) -> String {
    let out = s.ok(
        "Bash",
        json!({"command": "echo y > \"$TMPDIR/x\" && cat \"$TMPDIR/x\" && stat -c %a \"$TMPDIR\" && echo \"$TMPDIR\""}),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..4], ["exit code: 0", "stdout:", "y", "700"], "{out}");
    lines[4].to_string()
}

#[test]
fn bash_cannot_write_a_fresh_path_under_the_shared_tmp() {
    let (_base, root, _outside) = workspace("landlock-shared-tmp");
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("TMPDIR", "/tmp")],
    );
    s.initialize();
    if !confined(&mut s) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Landlock unavailable on CI: {}",
            s.stderr()
        );
        eprintln!("SKIP: Landlock is not available on this kernel");
        return;
    }
    let fresh = std::path::PathBuf::from(format!(
        "/tmp/awf-it-fresh-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let f = fresh.display();
    let e = s.err("Bash", json!({"command": format!("echo x > {f}")}));
    assert!(e.contains("Permission denied"), "{e}");
    let e = s.err("Bash", json!({"command": format!("mkdir {f}")}));
    assert!(e.contains("Permission denied"), "{e}");
    assert!(!fresh.exists(), "{f} was created");
    s.finish();
}

#[test]
fn bash_tmpdir_is_a_private_0700_dir_it_may_write() {
    let (base, root, _outside) = workspace("landlock-tmpdir");
    let tmp = private_tmp(&base);
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("TMPDIR", &tmp)],
    );
    s.initialize();
    let dir = bash_tmpdir(&mut s);
    // Its own directory beneath the server's temp dir, not the shared one itself.
    assert_ne!(dir, tmp);
    assert_ne!(dir, "/tmp");
    let parent = std::path::Path::new(&dir).parent().unwrap();
    assert_eq!(parent, std::path::Path::new(&tmp), "{dir}");
    s.finish();
}

#[test]
fn the_private_tmpdir_is_removed_when_the_server_exits() {
    let (base, root, _outside) = workspace("landlock-tmpdir-gone");
    let tmp = private_tmp(&base);
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("TMPDIR", &tmp)],
    );
    s.initialize();
    let dir = std::path::PathBuf::from(bash_tmpdir(&mut s));
    assert!(dir.join("x").is_file());
    // End of input ends the session.
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(!dir.exists(), "{} outlived the server", dir.display());
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}
