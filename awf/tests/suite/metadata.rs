//! Bash cannot change mode, owner or times of a file outside its writable paths (Landlock
//! does not cover chmod, chown and utime; every other mount is read-only in Bash's own
//! mount namespace), while the same commands inside the root keep working; and the shell
//! holds no capability with which to make a mount writable again.

use crate::common;
use common::*;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn server(base: &Path, root: &Path, extra: &[&Path]) -> Server {
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg = write_config(base, &json!({"root": root, "writable_paths": extra}));
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    s.initialize();
    s
}

/// Mode, owner, group and modification time: what the attack tries to change.
fn meta(p: &Path) -> (u32, u32, u32, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.mode(), m.uid(), m.gid(), m.mtime())
}

#[test]
fn bash_cannot_change_mode_owner_or_times_outside_the_root() {
    let (base, root, outside) = workspace("metadata-outside");
    let victim = outside.join("victim.sh");
    std::fs::write(&victim, "echo hi\n").unwrap();
    let before = meta(&victim);
    let mut s = server(&base, &root, &[]);
    let v = victim.display();
    for command in [
        format!("chmod 777 {v}"),
        format!("chmod +x {v}"),
        format!("chgrp 4242 {v}"),
        format!("chown 4242:4242 {v}"),
        // An owner may always chown to itself: this one fails only because of the mount.
        format!("chown $(id -u):$(id -g) {v}"),
        format!("touch -d 2000-01-01 {v}"),
        format!("touch -m -t 200001010000 {v}"),
    ] {
        let e = s.err("Bash", json!({ "command": command }));
        assert!(e.contains("Read-only file system"), "{command}: {e}");
    }
    assert_eq!(meta(&victim), before);
    s.finish();
}

#[test]
fn mode_owner_and_times_inside_the_root_and_tmp_still_change() {
    let (base, root, outside) = workspace("metadata-inside");
    let extra = outside.join("cache");
    std::fs::create_dir_all(&extra).unwrap();
    let mut s = server(&base, &root, &[&extra]);
    let out = s.ok(
        "Bash",
        json!({"command": format!(
            "echo 'echo built' > build.sh && chmod +x build.sh && ./build.sh \
             && touch -d 2001-02-03 old && chown $(id -u):$(id -g) old && chgrp $(id -g) old \
             && cp -p old kept && tar cf a.tar old && mkdir x && tar xf a.tar -C x \
             && t=$(mktemp) && chmod 600 \"$t\" && touch -d 2001-02-03 \"$t\" && rm \"$t\" \
             && touch -d 2001-02-03 {0}/c && chmod 640 {0}/c",
            extra.display()
        )}),
    );
    assert!(out.contains("built"), "{out}");
    assert_ne!(meta(&root.join("build.sh")).0 & 0o111, 0);
    let old = meta(&root.join("old")).3;
    assert_eq!(meta(&root.join("kept")).3, old);
    assert_eq!(meta(&root.join("x/old")).3, old);
    assert_eq!(meta(&extra.join("c")).0 & 0o777, 0o640);
    s.finish();
}

#[test]
fn the_shell_has_no_capability_and_cannot_make_a_mount_writable_again() {
    let (base, root, outside) = workspace("metadata-remount");
    let victim = outside.join("victim");
    std::fs::write(&victim, "x").unwrap();
    let before = meta(&victim);
    let mut s = server(&base, &root, &[]);
    let out = s.ok("Bash", json!({"command": "grep CapEff /proc/self/status"}));
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    let v = victim.display();
    // Directly, and from a nested user namespace (with and without a uid map).
    for attempt in [
        "mount -o remount,bind,rw /".to_string(),
        "mount -o remount,rw /".to_string(),
        "unshare -Ur sh -c 'mount -o remount,bind,rw /'".to_string(),
        "unshare -Um sh -c 'mount -o remount,bind,rw /'".to_string(),
        format!("unshare -Um sh -c 'mount -o remount,bind,rw / ; chmod 777 {v}'"),
    ] {
        let e = s.err("Bash", json!({ "command": attempt }));
        assert!(e.starts_with("exit code: "), "{attempt}: {e}");
        let e = s.err("Bash", json!({"command": format!("chmod 777 {v}")}));
        assert!(e.contains("Read-only file system"), "after {attempt}: {e}");
    }
    assert_eq!(meta(&victim), before);
    s.finish();
}
