//! Bash's writes are confined by Landlock: outside the root (and the session's private
//! temp directory) `touch` and `echo >` fail, inside they succeed; the shared temp
//! directory is not writable; the config switch turns it off.

use crate::common;
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

/// `awf mcp-serve ARGS` with `env`, initialized.
fn serve(args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut s = Server::start(&[&["mcp-serve"], args].concat(), env);
    s.initialize();
    s
}

/// A write outside is refused by Landlock (EACCES) or, first, by the read-only mount the
/// path lies on in Bash's mount namespace (EROFS).
fn refused(e: &str) -> bool {
    e.contains("Permission denied") || e.contains("Read-only file system")
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
    let mut s = serve(&["--root", root.to_str().unwrap()], &[("TMPDIR", &tmp)]);
    if !require_landlock(&mut s) {
        return;
    }
    let o = outside.to_str().unwrap();
    let e = s.err("Bash", json!({"command": format!("touch {o}/touched")}));
    assert!(refused(&e), "{e}");
    let e = s.err("Bash", json!({"command": format!("echo x > {o}/echoed")}));
    assert!(refused(&e), "{e}");
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
    let mut s = serve(&["--config", cfg.to_str().unwrap()], &[]);
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
    let mut s = serve(&["--config", cfg.to_str().unwrap()], &[("TMPDIR", &tmp)]);
    if !require_landlock(&mut s) {
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
    assert!(refused(&e), "{e}");
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
    let mut s = serve(&["--root", root.to_str().unwrap()], &[("TMPDIR", "/tmp")]);
    if !require_landlock(&mut s) {
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
    assert!(refused(&e), "{e}");
    let e = s.err("Bash", json!({"command": format!("mkdir {f}")}));
    assert!(refused(&e), "{e}");
    assert!(!fresh.exists(), "{f} was created");
    s.finish();
}

#[test]
fn bash_tmpdir_is_a_private_0700_dir_it_may_write() {
    let (base, root, _outside) = workspace("landlock-tmpdir");
    let tmp = private_tmp(&base);
    let mut s = serve(&["--root", root.to_str().unwrap()], &[("TMPDIR", &tmp)]);
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
    let mut s = serve(&["--root", root.to_str().unwrap()], &[("TMPDIR", &tmp)]);
    let dir = std::path::PathBuf::from(bash_tmpdir(&mut s));
    // What one call leaves there the next finds (on the host, or in the session's tmpfs
    // where mounts work: then nothing of it ever reaches the host's disk).
    let again = s.ok("Bash", json!({"command": "cat \"$TMPDIR/x\""}));
    assert!(again.contains("\ny\n"), "{again}");
    // End of input ends the session.
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(!dir.exists(), "{} outlived the server", dir.display());
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
}

/// Skips (or fails on CI) when the kernel cannot confine.
fn require_landlock(s: &mut Server) -> bool {
    if confined(s) {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "Landlock unavailable on CI: {}",
        s.stderr()
    );
    eprintln!("SKIP: Landlock is not available on this kernel");
    false
}

#[test]
fn bash_cannot_write_home_by_default() {
    let (base, root, _outside) = workspace("landlock-home");
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let tmp = private_tmp(&base);
    let mut s = serve(
        &["--root", root.to_str().unwrap()],
        &[("TMPDIR", &tmp), ("HOME", home.to_str().unwrap())],
    );
    if !require_landlock(&mut s) {
        return;
    }
    let e = s.err(
        "Bash",
        json!({"command": "echo x > \"$HOME/.profile-planted\""}),
    );
    assert!(refused(&e), "{e}");
    let e = s.err("Bash", json!({"command": "mkdir -p \"$HOME/.cache/x\""}));
    assert!(refused(&e), "{e}");
    assert_eq!(std::fs::read_dir(&home).unwrap().count(), 0);
    s.finish();
}

/// A TCP listener on 127.0.0.1 and a Bash command that connects to it; true when the
/// listener saw the connection.
fn bash_connects(s: &mut Server) -> (bool, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (text, _) = s.call(
        "Bash",
        json!({"command": format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo sent >&3")}),
    );
    // The command has ended: a connection it made is in the accept queue by now.
    (listener.accept().is_ok(), text)
}

/// Runs `check` on a confined server for each `network` setting (unset, deny, allow),
/// with whether that setting lets Bash use TCP.
fn for_each_network_setting(tag: &str, mut check: impl FnMut(&mut Server, Option<&str>, bool)) {
    let (base, root, _outside) = workspace(tag);
    let tmp = private_tmp(&base);
    for (network, open) in [(None, false), (Some("deny"), false), (Some("allow"), true)] {
        let mut cfg = json!({"root": root});
        if let Some(n) = network {
            cfg["network"] = json!(n);
        }
        let cfg = write_config(&base, &cfg);
        let mut s = serve(&["--config", cfg.to_str().unwrap()], &[("TMPDIR", &tmp)]);
        if !require_landlock(&mut s) {
            return;
        }
        check(&mut s, network, open);
        s.finish();
    }
}

#[test]
fn network_is_denied_by_default_and_when_set_allowed_when_set_to_allow() {
    for_each_network_setting("landlock-net", |s, network, open| {
        let a = s.request("tools/list", json!({}));
        let desc = a["result"]["tools"][3]["description"]
            .as_str()
            .unwrap()
            .to_string();
        let (connected, text) = bash_connects(s);
        assert_eq!(connected, open, "network {network:?}: {text}");
        if open {
            assert!(desc.contains("network allowed"), "{desc}");
            assert!(text.starts_with("exit code: 0"), "{text}");
        } else if desc.contains("namespace of the session's own with loopback only") {
            // The host's loopback is not the call's: nothing listens there.
            assert!(text.contains("Connection refused"), "{text}");
        } else {
            // Where no network namespace can be had: Landlock's TCP rights.
            assert!(desc.contains("TCP connect and bind are refused"), "{desc}");
            assert!(text.contains("Permission denied"), "{text}");
        }
    });
}

/// A Bash command that binds a free 127.0.0.1 port, listens and connects to itself; its
/// output says "bound" after the bind and "accepted" when all of it worked.
fn bash_listens(s: &mut Server) -> String {
    // A port free a moment ago, so that the bind at stake is to a port, not to port 0.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!(
        "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", {port})); print(\"bound\"); \
         s.listen(1); socket.create_connection((\"127.0.0.1\", {port})); s.accept(); \
         print(\"accepted\")"
    );
    s.call("Bash", json!({"command": format!("python3 -c '{script}'")}))
        .0
}

#[test]
fn bash_may_serve_itself_on_loopback_and_only_landlock_s_fallback_refuses_it() {
    for_each_network_setting("landlock-bind", |s, network, open| {
        let a = s.request("tools/list", json!({}));
        let isolated = a["result"]["tools"][3]["description"]
            .as_str()
            .unwrap()
            .contains("namespace of the session's own with loopback only");
        let text = bash_listens(s);
        if open || isolated {
            // Under deny, the call's loopback is its own: a server it starts is reachable.
            assert!(text.contains("accepted"), "network {network:?}: {text}");
        } else {
            // Refused at bind, before listen or connect are tried.
            assert!(
                !text.contains("bound") && text.contains("PermissionError"),
                "network {network:?}: {text}"
            );
        }
    });
}

#[test]
fn env_and_env_passthrough_reach_bash_other_secrets_do_not() {
    let (base, root, _outside) = workspace("landlock-env");
    let cfg = write_config(
        &base,
        &json!({"root": root, "env": {"AWF_SET_BY_WF": "set-value-1"},
                "env_passthrough": ["AWF_PASS_*", "AWF_NAMED_TOKEN"]}),
    );
    let tmp = private_tmp(&base);
    let mut s = serve(
        &["--config", cfg.to_str().unwrap()],
        &[
            ("TMPDIR", &tmp),
            ("AWF_PASS_ONE", "passed-value-2"),
            ("AWF_NAMED_TOKEN", "named-token-3"),
            ("AWF_OTHER_TOKEN", "other-token-4"),
            ("AWF_SET_BY_WF", "inherited-value-5"),
        ],
    );
    let out = s.ok("Bash", json!({"command": "env"}));
    for want in [
        "AWF_SET_BY_WF=set-value-1",
        "AWF_PASS_ONE=passed-value-2",
        "AWF_NAMED_TOKEN=named-token-3",
    ] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    assert!(!out.contains("other-token-4"), "{out}");
    assert!(!out.contains("inherited-value-5"), "{out}");
    s.finish();
}

#[test]
fn tools_list_states_the_sandbox_policy() {
    let (base, root, outside) = workspace("landlock-list");
    let tmp = private_tmp(&base);
    let cfg = write_config(&base, &json!({"root": root, "writable_paths": [outside]}));
    let out = std::process::Command::new(AWF)
        .args(["tools", "list", "--config", cfg.to_str().unwrap()])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Sandbox: "))
        .unwrap_or_else(|| panic!("no sandbox line:\n{text}"));
    assert!(line.contains(&outside.display().to_string()), "{line}");
    assert!(
        line.contains("network denied") || line.contains("NOT"),
        "{line}"
    );
    assert!(line.contains("environment"), "{line}");
}
