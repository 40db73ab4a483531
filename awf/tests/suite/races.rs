//! Rename races through the real server: while a thread swaps a directory `d` of the root
//! with a symlink `dl -> outside` (renameat2 RENAME_EXCHANGE, which the agent's own Bash
//! may do inside the root), Write, Edit, Read, Grep and Glob on paths under `d` must never
//! touch, create, read or list anything outside.

use crate::common;
use common::*;
use serde_json::json;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long each attack runs: the unfixed code lost within the first second here.
const ATTACK: Duration = Duration::from_secs(4);

/// Swaps `a` and `b` in a loop until dropped; counts the swaps.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(a: &Path, b: &Path) -> Swapper {
        let a = CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = CString::new(b.as_os_str().as_bytes()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), swaps.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                // SAFETY: two valid C strings; renameat2 only renames.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
                n.fetch_add(1, Ordering::Relaxed);
            }
        });
        Swapper {
            stop,
            swaps,
            thread: Some(thread),
        }
    }

    /// Stops and leaves an even number of swaps (`d` a directory again).
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.swaps.load(Ordering::Relaxed)
    }
}

/// What the outside directory holds: every entry (recursively) with its inode and content.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u64, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let content = if m.is_file() {
                std::fs::read_to_string(&p).unwrap()
            } else {
                String::new()
            };
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push((p, m.ino(), content));
        }
    }
    out.sort();
    out
}

fn race_workspace(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (base, root, outside) = workspace(name);
    std::fs::write(outside.join(".bashrc"), "ORIGINAL outside\n").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/.bashrc"), "ORIGINAL inside\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("dl")).unwrap();
    (base, root, outside)
}

#[test]
fn write_and_edit_never_land_outside_during_a_swap_race() {
    let (_b, root, outside) = race_workspace("race-write");
    let before = snapshot(&outside);
    let mut s = Server::root(&root);
    let swapper = Swapper::start(&root.join("d"), &root.join("dl"));
    let end = Instant::now() + ATTACK;
    let mut calls = 0u64;
    let mut landed = 0u64;
    while Instant::now() < end {
        let (_, err) = s.call(
            "Write",
            json!({"path": "d/.bashrc", "content": "ORIGINAL inside\n"}),
        );
        landed += u64::from(!err);
        s.call(
            "Edit",
            json!({"path": "d/.bashrc", "old": "ORIGINAL", "new": "PWNED"}),
        );
        let (_, err) = s.call(
            "Write",
            json!({"path": format!("d/made/n{calls}/f"), "content": "PWNED"}),
        );
        landed += u64::from(!err);
        calls += 3;
        if snapshot(&outside) != before {
            break;
        }
    }
    let swaps = swapper.stop();
    let after = snapshot(&outside);
    assert_eq!(
        after, before,
        "the outside directory changed after {calls} calls ({swaps} swaps)"
    );
    // The race was real: calls went through while the swapper ran.
    assert!(swaps > 100 && landed > 0, "swaps {swaps}, writes {landed}");
    eprintln!("{calls} calls, {landed} writes inside, {swaps} swaps: nothing outside");
    s.finish();
}

#[test]
fn read_grep_and_glob_never_see_outside_during_a_swap_race() {
    let (_b, root, outside) = race_workspace("race-read");
    std::fs::remove_file(root.join("d/.bashrc")).unwrap();
    std::fs::write(root.join("d/secret"), "inside\n").unwrap();
    let mut s = Server::root(&root);
    let swapper = Swapper::start(&root.join("d"), &root.join("dl"));
    let end = Instant::now() + ATTACK;
    let mut calls = 0u64;
    let mut leak = None;
    while Instant::now() < end && leak.is_none() {
        for (tool, args) in [
            ("Read", json!({"path": "d/secret"})),
            ("Grep", json!({"pattern": "SECRET|outside", "path": "d"})),
            ("Grep", json!({"pattern": "SECRET", "path": "d/secret"})),
            ("Glob", json!({"pattern": "*", "cwd": "d"})),
            ("Glob", json!({"pattern": "d/.bash*"})),
        ] {
            let (text, _) = s.call(tool, args.clone());
            calls += 1;
            // `.bashrc` exists only outside; TOPSECRET and "ORIGINAL outside" are outside contents.
            if text.contains("TOPSECRET") || text.contains("outside\n") || text.contains(".bashrc")
            {
                leak = Some(format!("{tool} {args} after {calls} calls: {text}"));
                break;
            }
        }
    }
    let swaps = swapper.stop();
    assert!(leak.is_none(), "{}", leak.unwrap());
    assert!(swaps > 100, "swaps {swaps}");
    let _ = outside;
    eprintln!("{calls} calls, {swaps} swaps: nothing outside seen");
    s.finish();
}
