//! The escape attempts the issue lists, each through the real server: every one is
//! refused with an `isError` result naming the path, and no byte of the secret outside
//! the root ever comes back.

use crate::common;
use common::*;
use serde_json::{Value, json};
use std::os::unix::fs::symlink;

fn refused(s: &mut Server, tool: &str, args: Value) -> String {
    let text = s.err(tool, args.clone());
    assert!(
        !text.contains("TOPSECRET"),
        "{tool} {args} leaked the secret: {text}"
    );
    text
}

fn outside_root(text: &str) -> bool {
    text.contains("outside the root")
}

#[test]
fn escape_attempts_are_refused() {
    let (_b, root, outside) = workspace("escapes");
    let out = outside.to_str().unwrap().to_string();
    symlink(outside.join("secret"), root.join("link-to-secret")).unwrap();
    symlink(&outside, root.join("link-to-dir")).unwrap();
    symlink(outside.join("planted"), root.join("dangling")).unwrap();
    std::fs::hard_link(outside.join("secret"), root.join("hardlink")).unwrap();
    let mut s = Server::root(&root);

    // 1. `..`
    let t = refused(&mut s, "Read", json!({"path": "../outside/secret"}));
    assert!(
        outside_root(&t) && t.contains("../outside/secret") && t.contains(root.to_str().unwrap()),
        "{t}"
    );
    // 2. absolute path outside
    assert!(outside_root(&refused(
        &mut s,
        "Read",
        json!({"path": format!("{out}/secret")})
    )));
    // 3. symlink to a file outside
    assert!(outside_root(&refused(
        &mut s,
        "Read",
        json!({"path": "link-to-secret"})
    )));
    assert!(outside_root(&refused(
        &mut s,
        "Edit",
        json!({"path": "link-to-secret", "old": "TOP", "new": "x"})
    )));
    // 4. symlink in a parent directory
    assert!(outside_root(&refused(
        &mut s,
        "Read",
        json!({"path": "link-to-dir/secret"})
    )));
    assert!(outside_root(&refused(
        &mut s,
        "Write",
        json!({"path": "link-to-dir/new.txt", "content": "x"})
    )));
    assert!(!outside.join("new.txt").exists());
    // 5. write through a dangling symlink
    assert!(outside_root(&refused(
        &mut s,
        "Write",
        json!({"path": "dangling", "content": "planted"})
    )));
    assert!(!outside.join("planted").exists());
    // 6. Glob rooted outside
    assert!(outside_root(&refused(
        &mut s,
        "Glob",
        json!({"pattern": "*", "cwd": out})
    )));
    assert!(outside_root(&refused(
        &mut s,
        "Glob",
        json!({"pattern": "*", "cwd": "link-to-dir"})
    )));
    assert!(
        refused(&mut s, "Glob", json!({"pattern": "../outside/*"})).contains("must not contain")
    );
    // 7. Grep rooted outside
    assert!(outside_root(&refused(
        &mut s,
        "Grep",
        json!({"pattern": "TOP", "path": "../outside"})
    )));
    assert!(outside_root(&refused(
        &mut s,
        "Grep",
        json!({"pattern": "TOP", "path": "link-to-secret"})
    )));
    // 8. Bash cwd outside
    assert!(outside_root(&refused(
        &mut s,
        "Bash",
        json!({"command": "cat secret", "cwd": out})
    )));
    // 9. a hard link to a file outside: not readable, and writing replaces the link only
    assert!(refused(&mut s, "Read", json!({"path": "hardlink"})).contains("hard links"));
    s.ok("Write", json!({"path": "hardlink", "content": "mine"}));
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "TOPSECRET\n"
    );
    // 10. /proc/self/root/...
    assert!(outside_root(&refused(
        &mut s,
        "Read",
        json!({"path": format!("/proc/self/root{out}/secret")})
    )));
    assert!(outside_root(&refused(
        &mut s,
        "Read",
        json!({"path": "/proc/self/root/etc/passwd"})
    )));
    // 11. a very long path
    assert!(
        refused(&mut s, "Read", json!({"path": "a/".repeat(3000)})).contains("limit is 4096 bytes")
    );
    assert!(
        refused(
            &mut s,
            "Write",
            json!({"path": "x".repeat(300), "content": ""})
        )
        .contains("limit is 255 bytes")
    );
    // 12. a NUL byte
    assert!(
        refused(
            &mut s,
            "Read",
            json!({"path": "link-to-dir/secret\u{0}.txt"})
        )
        .contains("NUL byte")
    );
    // 13. backslashes
    assert!(refused(&mut s, "Read", json!({"path": "..\\outside\\secret"})).contains("backslash"));

    // Grep over the whole root neither follows the symlinks nor reads the hard link's old target.
    std::fs::hard_link(outside.join("secret"), root.join("hardlink2")).unwrap();
    let out = s.ok("Grep", json!({"pattern": "TOPSECRET"}));
    assert!(
        !out.contains("TOPSECRET") || out.starts_with("no matches"),
        "{out}"
    );
    assert!(out.contains("hard links skipped"), "{out}");
    s.finish();
}

#[test]
fn symlinks_that_stay_inside_are_followed() {
    let (_b, root, _o) = workspace("inside-links");
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/f.txt"), "inside\n").unwrap();
    symlink("real", root.join("alias")).unwrap();
    symlink(root.join("real/f.txt"), root.join("abs-alias")).unwrap();
    let mut s = Server::root(&root);
    assert_eq!(s.ok("Read", json!({"path": "alias/f.txt"})), "inside\n");
    assert_eq!(s.ok("Read", json!({"path": "abs-alias"})), "inside\n");
    // Writing through an inside symlink writes its target and keeps the link.
    s.ok(
        "Write",
        json!({"path": "abs-alias", "content": "changed\n"}),
    );
    assert!(
        std::fs::symlink_metadata(root.join("abs-alias"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("real/f.txt")).unwrap(),
        "changed\n"
    );
    s.finish();
}

/// From the second Bash call of a session on, the call's jail was made ahead, while no call
/// ran (`confine::standby`): it must be the jail a fresh call gets — a PID namespace and
/// /proc of its own, the system read-only, the working directory, environment and rlimits
/// of this call, its exit status and streams — and a secret written since it was made is
/// covered all the same (that call starts fresh). When the session ends, the jail waiting
/// for a call goes with it.
#[test]
fn a_jail_made_ahead_is_the_jail_a_fresh_call_gets_and_goes_with_the_session() {
    let (base, root, _) = workspace("ahead");
    let root = std::fs::canonicalize(&root).unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let audit = base.join("audit.jsonl");
    let cfg = write_config(
        &base,
        &json!({"root": root, "audit_path": audit, "bounds": {"cpu_seconds": 77},
                "hidden_paths": [root.join(".env")]}),
    );
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("HOME", home.to_str().unwrap())],
    );
    s.initialize();
    s.ok("Bash", json!({"command": "true"}));
    let probe = "echo pid=$$; echo procs=$(ls /proc | grep -c '^[0-9]'); pwd; ulimit -t; \
                 echo tmp=$TMPDIR; touch /etc/awf-ahead-probe 2>&1; echo to-stderr >&2; exit 3";
    let out = s.err("Bash", json!({"command": probe, "cwd": "sub"}));
    assert!(out.starts_with("exit code: 3\n"), "{out}");
    // The shell is the second process of its namespace (the init is the first), and the
    // namespace holds a handful of processes, not the machine's.
    assert!(out.contains("pid=2\n"), "{out}");
    let procs: usize = out
        .split("procs=")
        .nth(1)
        .and_then(|r| r.lines().next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(procs <= 6, "{out}");
    assert!(
        out.contains(&format!("\n{}\n77\n", root.join("sub").display())),
        "{out}"
    );
    assert!(out.contains("tmp=/"), "{out}");
    assert!(!root.join("etc").exists() && !std::path::Path::new("/etc/awf-ahead-probe").exists());
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("stderr:\nto-stderr\n"), "{out}");

    // Waiting for the next call: a process of the server's (the jail made ahead).
    let server = s.pid();
    let children = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                    st.rsplit_once(") ")
                        .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<i32>().ok())
                        == Some(server)
                })
            })
            .collect()
    };
    assert!(
        eventually(|| !children().is_empty()),
        "no jail made ahead is waiting"
    );
    // A secret that appears once the next jail is made: that jail does not cover it, so
    // the next call starts fresh; the one after gets a jail made ahead that covers it.
    std::fs::write(root.join(".env"), "PASSWORD=ENV-3k9\n").unwrap();
    for _ in 0..2 {
        let (out, _) = s.call("Bash", json!({"command": "cat .env; echo done"}));
        assert!(out.contains("done") && !out.contains("ENV-3k9"), "{out}");
    }

    // The jail made ahead goes with the session.
    assert!(eventually(|| !children().is_empty()));
    let children = children();
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(
        eventually(|| children.iter().all(|&p| dead(p))),
        "left running: {children:?}"
    );
    let ahead: Vec<i64> = audit_lines(&audit)
        .iter()
        .filter(|r| r["type"] == "tool.result" && r["tool"] == "Bash")
        .map(|r| r["jail_ahead"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(
        ahead,
        [0, 1, 0, 1],
        "fresh, ahead, fresh (a secret since), ahead"
    );
}
