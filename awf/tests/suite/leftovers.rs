//! What a SIGKILLed `awf mcp-serve` leaves under the temp directory (Bash's private temp
//! directory, a plugin's socket directory) goes at the next session's start, with the real
//! binary: only the directories of dead owners (by pid and start time), never a live
//! session's, and never what a planted symlink of such a name points at.

use crate::common;
use crate::harness::plugin_examples;

use common::{Server, eventually, workspace, write_config};
use serde_json::json;
use std::path::{Path, PathBuf};

/// This test process's pid namespace, as awf writes it into its directories' names.
fn pid_namespace() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let s = link.to_str().unwrap();
    s.trim_start_matches("pid:[")
        .trim_end_matches(']')
        .parse()
        .unwrap()
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// The entries of `dir` whose names begin with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// What a test plants beside awf's directories, and checks after the next session's start.
struct Planted {
    /// Named after a pid that runs (this test) but with another start time: pid reuse.
    reused_pid: PathBuf,
    /// Named after this test process, start time and all: a live owner.
    live: PathBuf,
    /// Of a dead owner, but in another pid namespace: not ours to judge.
    other_namespace: PathBuf,
    /// Of a dead owner, holding a symlink to `target`.
    holding_a_link: PathBuf,
    /// A symlink of a dead owner's name, to `target`.
    link: PathBuf,
    /// A directory with a file, which neither symlink may cost.
    target: PathBuf,
}

fn plant(tmp: &Path, prefix: &str, dead_pid: u32, outside: &Path) -> Planted {
    let me = std::process::id();
    let ns = pid_namespace();
    let start = start_time(me);
    let target = outside.join("important");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("keep.txt"), "precious").unwrap();
    let dir = |name: String| {
        let p = tmp.join(name);
        std::fs::create_dir_all(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/f"), "x").unwrap();
        p
    };
    let p = Planted {
        reused_pid: dir(format!("{prefix}{me}-{}-{ns}-0", start + 1)),
        live: dir(format!("{prefix}{me}-{start}-{ns}-0")),
        other_namespace: dir(format!("{prefix}{dead_pid}-1-{}-0", ns + 1)),
        holding_a_link: dir(format!("{prefix}{dead_pid}-1-{ns}-1")),
        link: tmp.join(format!("{prefix}{dead_pid}-1-{ns}-2")),
        target,
    };
    std::os::unix::fs::symlink(&p.target, p.holding_a_link.join("sub/out")).unwrap();
    std::os::unix::fs::symlink(&p.target, &p.link).unwrap();
    p
}

fn check(p: &Planted) {
    assert!(!p.reused_pid.exists(), "{:?} was kept", p.reused_pid);
    assert!(
        !p.holding_a_link.exists(),
        "{:?} was kept",
        p.holding_a_link
    );
    assert!(p.live.join("sub/f").exists(), "{:?} went", p.live);
    assert!(p.other_namespace.join("sub/f").exists());
    // The symlink is no directory awf made: left as it is, and so is what it points at.
    assert!(p.link.symlink_metadata().unwrap().is_symlink());
    assert_eq!(
        std::fs::read_to_string(p.target.join("keep.txt")).unwrap(),
        "precious"
    );
}

/// Waits for the end of `server`'s sweep of `what` under `dir` (it runs beside the start,
/// and says so in a debug line).
fn wait_for_sweep(server: &Server, what: &str, dir: &Path) {
    let line = format!("swept {what} under {}:", dir.display());
    assert!(
        eventually(|| server.stderr().contains(&line)),
        "no {line:?} in {}",
        server.stderr()
    );
}

fn sigkill(server: Server) {
    // SAFETY: kill(2) on the pid of a child we spawned.
    assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGKILL) }, 0);
    server.wait();
}

#[test]
fn a_sigkilled_session_s_temp_dir_goes_at_the_next_start_and_live_ones_stay() {
    let (base, root, outside) = workspace("leftover-tmp");
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_s = tmp.to_str().unwrap().to_string();
    let serve = || {
        let mut s = Server::start(
            &["mcp-serve", "--root", root.to_str().unwrap()],
            &[("TMPDIR", &tmp_s), ("AWF_LOG", "debug")],
        );
        s.initialize();
        s
    };
    let tmpdir_of = |s: &mut Server| {
        let out = s.ok(
            "Bash",
            json!({"command": "mkdir -p \"$TMPDIR/build/deep\" && echo x > \"$TMPDIR/build/deep/o\" && printf %s \"$TMPDIR\""}),
        );
        // The result is `exit code: 0`, then `stdout:` and the printed path.
        let path = out.lines().skip_while(|l| *l != "stdout:").nth(1);
        PathBuf::from(path.unwrap_or_else(|| panic!("no stdout in {out:?}")))
    };
    let mut killed = serve();
    let killed_pid = killed.pid() as u32;
    let killed_dir = tmpdir_of(&mut killed);
    assert!(killed_dir.starts_with(&tmp), "{killed_dir:?}");
    let mut live = serve();
    let live_dir = tmpdir_of(&mut live);
    sigkill(killed);
    // Where mounts work the call's files lived in the session's tmpfs (gone with it); a
    // build's tree left on the disk is what a session without them leaves.
    std::fs::create_dir_all(killed_dir.join("build/deep")).unwrap();
    std::fs::write(killed_dir.join("build/deep/o"), "x").unwrap();
    let planted = plant(&tmp, "awf-tmp-", killed_pid, &outside);

    let mut next = serve();
    wait_for_sweep(&next, "temp directories", &tmp);
    assert!(
        !killed_dir.exists(),
        "the killed session's {killed_dir:?} is left"
    );
    assert!(live_dir.exists(), "the live {live_dir:?} went");
    let seen = live.ok("Bash", json!({"command": "cat \"$TMPDIR/build/deep/o\""}));
    assert!(
        seen.contains("\nx\n"),
        "the live session lost its files: {seen}"
    );
    check(&planted);
    // The new session's own directory is there and works.
    assert!(tmpdir_of(&mut next).starts_with(&tmp));
    next.close_input();
    next.wait();
    live.close_input();
    live.wait();
    assert!(!live_dir.exists());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_sigkilled_session_s_plugin_socket_dir_goes_at_the_next_start_and_live_ones_stay() {
    let (base, root, outside) = workspace("leftover-sockets");
    let plugins = base.join("plugins");
    plugin_examples::install("notes", &plugins);
    // Short, so that the socket directories are made here rather than under /tmp.
    let tmp = std::env::temp_dir().join(format!("awf-lo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg = write_config(
        &base,
        &json!({
            "root": root,
            "plugin_tools": [{"plugin": "notes", "expose": ["add"]}],
            "landlock": false,
        }),
    );
    let env = [
        ("AWF_PLUGINS_PATH", plugins.to_str().unwrap()),
        ("TMPDIR", tmp.to_str().unwrap()),
        ("AWF_LOG", "debug"),
    ];
    let serve = || {
        let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &env);
        s.initialize();
        s.ok("notes_add", json!({"text": "x"}));
        s
    };
    let killed = serve();
    let killed_pid = killed.pid() as u32;
    let killed_dirs = named(&tmp, "awf-p-");
    assert_eq!(killed_dirs.len(), 1, "{killed_dirs:?}");
    let mut live = serve();
    let live_dirs: Vec<PathBuf> = named(&tmp, "awf-p-")
        .into_iter()
        .filter(|d| !killed_dirs.contains(d))
        .collect();
    assert_eq!(live_dirs.len(), 1, "{live_dirs:?}");
    sigkill(killed);
    assert!(killed_dirs[0].exists());
    let planted = plant(&tmp, "awf-p-", killed_pid, &outside);

    let mut next = serve();
    wait_for_sweep(&next, "plugin socket directories", &tmp);
    assert!(!killed_dirs[0].exists(), "{:?} is left", killed_dirs[0]);
    assert!(live_dirs[0].exists(), "the live {:?} went", live_dirs[0]);
    check(&planted);
    next.close_input();
    next.wait();
    live.close_input();
    live.wait();
    assert!(!live_dirs[0].exists());
    std::fs::remove_dir_all(&tmp).unwrap();
    std::fs::remove_dir_all(&base).unwrap();
}
