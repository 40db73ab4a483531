//! Bash's writes are confined by Landlock: outside the root (and the temp directory)
//! `touch` and `echo >` fail, inside they succeed; the config switch turns it off.

mod common;
use common::*;
use serde_json::json;

/// The server's temp directory is writable: give it a private one beside the root, so
/// that "outside" is outside whatever the machine's temp directory contains (CI may
/// clone the project under /tmp).
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
