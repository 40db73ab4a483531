//! Resources through the real server: a Read or Grep of a file holding one huge line
//! costs a bounded buffer, not the line (peak RSS of the server, VmHWM), and a server
//! killed in the middle of a Write leaves no temp file in the root.

use crate::common;
use common::*;
use serde_json::json;
use std::io::Write;

/// The bound the builtins promise for one Read or Grep, over the server's idle peak.
const EXTRA_RSS_BOUND_KIB: u64 = 64 * 1024;

fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn read_and_grep_of_a_huge_line_stay_within_the_memory_bound() {
    let (_b, root, _o) = workspace("huge-line");
    // 256 MiB of 'a' and no newline: four times the bound, so loading it whole shows.
    let mut f = std::fs::File::create(root.join("one-line.txt")).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..256 {
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    let mut s = Server::root(&root);
    let idle = peak_rss_kib(s.pid());

    let out = s.ok("Read", json!({"path": "one-line.txt"}));
    assert!(
        out.contains("[line cut: 2000 of 268435456 bytes shown]"),
        "{}",
        &out[out.len().saturating_sub(300)..]
    );
    let after_read = peak_rss_kib(s.pid());
    let one = s.ok("Grep", json!({"pattern": "b", "path": "one-line.txt"}));
    let all = s.ok("Grep", json!({"pattern": "b"}));
    let after_grep = peak_rss_kib(s.pid());
    eprintln!("VmHWM: idle {idle} KiB, after Read {after_read} KiB, after Grep {after_grep} KiB");
    assert!(
        after_read - idle < EXTRA_RSS_BOUND_KIB,
        "Read took {} KiB over the idle peak of {idle} KiB",
        after_read - idle
    );
    assert!(
        after_grep - idle < EXTRA_RSS_BOUND_KIB,
        "Grep took {} KiB over the idle peak of {idle} KiB",
        after_grep - idle
    );
    assert!(one.contains("a line is longer than"), "{one}");
    assert!(all.contains("a line is longer than"), "{all}");
    s.finish();
}

fn temp_files(dir: &std::path::Path) -> impl Iterator<Item = String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".awf-"))
}

#[test]
fn a_server_killed_during_write_leaves_no_temp_file() {
    let (_b, root, _o) = workspace("killed-write");
    let content = "x".repeat(8 << 20);
    for round in 0..20u64 {
        let mut s = Server::root(&root);
        s.send_request(
            "tools/call",
            json!({"name": "Write", "arguments": {"path": format!("f{round}"), "content": content}}),
        );
        // Kill mid-write: as soon as a temp file shows, else once the file is there
        // (a write that never shows a temp name can only be killed before or after).
        let target = root.join(format!("f{round}"));
        eventually(|| target.exists() || temp_files(&root).next().is_some());
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(s.pid(), libc::SIGKILL) };
        s.wait();
        let left: Vec<String> = temp_files(&root).collect();
        assert!(left.is_empty(), "round {round}: temp files left: {left:?}");
    }
}

/// Forks until the kernel refuses, children sleeping; prints how many it started.
const FORK_BOMB: &str = r#"python3 -c '
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
    print("started", n, "none refused")
except OSError as e:
    print("started", n, "then", e.strerror)
'"#;

#[test]
fn a_fork_bomb_meets_the_call_s_process_cap_and_the_next_call_is_free_again() {
    let (base, root, _o) = workspace("fork-cap");
    let cfg = write_config(&base, &json!({"root": root, "processes": 300}));
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    let list = s.request("tools/list", json!({}));
    let bash = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap()["description"]
        .as_str()
        .unwrap()
        .to_string();
    if !bash.contains("at most 300 processes and threads at once") {
        assert!(
            std::env::var("CI").as_deref() != Ok("true") && bash.contains("NOT capped"),
            "the description states no cap: {bash}"
        );
        eprintln!("skipping: this kernel has no pid_max per PID namespace ({bash})");
        return;
    }
    let out = s.ok("Bash", json!({"command": FORK_BOMB}));
    let started: usize = out
        .split("started ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {out:?}"));
    // PID 1 (the call's init), the shell and python itself take three of the 300.
    assert!(started <= 297, "{out}");
    assert!(started >= 200, "the cap refused too early: {out}");
    assert!(out.contains("Resource temporarily unavailable"), "{out}");
    // The cap is the call's: the next call starts with its full room, and sees none of the
    // sleepers of the last one (they died with its namespace).
    let again = s.ok(
        "Bash",
        json!({"command": "cat /proc/sys/kernel/pid_max; ls -d /proc/[0-9]* | wc -l"}),
    );
    let mut lines = again.lines().skip_while(|l| *l != "stdout:").skip(1);
    assert_eq!(lines.next(), Some("301"), "{again}");
    let visible: usize = lines.next().unwrap().trim().parse().unwrap();
    assert!(visible <= 5, "{again}");
    // The cap cannot be lifted from inside.
    let (lift, _) = s.call(
        "Bash",
        json!({"command": "echo 100000 > /proc/sys/kernel/pid_max; cat /proc/sys/kernel/pid_max"}),
    );
    assert!(lift.contains("stdout:\n301\n"), "{lift}");
    s.finish();
}
