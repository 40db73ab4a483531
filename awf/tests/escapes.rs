//! The escape attempts the issue lists, each through the real server: every one is
//! refused with an `isError` result naming the path, and no byte of the secret outside
//! the root ever comes back.

mod common;
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
