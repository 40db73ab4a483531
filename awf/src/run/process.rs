//! Process groups for steps: every agent CLI and shell step runs in its own group, and
//! teardown is SIGTERM to the group, a grace period, then SIGKILL — so nothing a step
//! started outlives it. `awf run` makes itself a child subreaper, so processes orphaned
//! inside a step's group are re-parented to it and reaped here, not left as zombies.

use std::collections::HashSet;
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(25);

/// Orphans of the run's steps are re-parented to this process (Linux only; harmless if
/// refused, teardown then relies on init to reap).
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// (pid, ppid, pgrp, state) of every process, from /proc/*/stat.
pub fn processes() -> Vec<(i32, i32, i32, char)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields start after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let state = f[0].chars().next().unwrap_or('?');
        let (Ok(ppid), Ok(pgrp)) = (f[1].parse(), f[2].parse()) else {
            continue;
        };
        out.push((pid, ppid, pgrp, state));
    }
    out
}

/// Live (non-zombie) members of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|p| p.2 == pgid && p.3 != 'Z' && p.3 != 'X')
        .map(|p| p.0)
        .collect()
}

/// Pids whose command line contains `needle` (e.g. a step's private config path).
pub fn pids_with_arg(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    processes()
        .into_iter()
        .filter(|p| p.0 != me && p.3 != 'Z')
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.0))
                .map(|c| {
                    c.split(|b| *b == 0).any(|a| {
                        a == needle.as_bytes() || String::from_utf8_lossy(a).contains(needle)
                    })
                })
                .unwrap_or(false)
        })
        .map(|p| p.0)
        .collect()
}

/// Reaps zombies that are our children (orphans re-parented to us), except `keep` (the
/// pids a `std::process::Child` still owns and will wait for itself).
pub fn reap_orphans(keep: &HashSet<i32>) {
    let me = std::process::id() as i32;
    for (pid, ppid, _, state) in processes() {
        if ppid == me && state == 'Z' && !keep.contains(&pid) {
            let mut status = 0;
            // SAFETY: waitpid on a specific zombie child of ours, non-blocking.
            unsafe {
                libc::waitpid(pid, &mut status, libc::WNOHANG);
            }
        }
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid or negative group id; no memory involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Ends a group and some extra pids: SIGTERM, up to `grace` for them to go, then SIGKILL.
/// `leader` is the group leader's Child when we own it (reaped here). Returns the pids that
/// needed SIGKILL.
pub fn terminate(
    pgid: Option<i32>,
    extra: &[i32],
    leader: Option<&mut Child>,
    grace: Duration,
) -> Vec<i32> {
    let mut leader = leader;
    let keep: HashSet<i32> = leader.as_ref().map(|c| c.id() as i32).into_iter().collect();
    let alive = |leader: &mut Option<&mut Child>| -> Vec<i32> {
        if let Some(c) = leader.as_mut() {
            let _ = c.try_wait();
        }
        reap_orphans(&keep);
        let mut v: Vec<i32> = pgid.map(group_members).unwrap_or_default();
        for p in extra {
            if std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rfind(')')
                    .is_some_and(|i| !s[i + 1..].trim_start().starts_with('Z'))
            }) && !v.contains(p)
            {
                v.push(*p);
            }
        }
        v
    };
    if alive(&mut leader).is_empty() {
        return Vec::new();
    }
    if let Some(g) = pgid {
        signal(-g, libc::SIGTERM);
    }
    for p in extra {
        signal(*p, libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    let mut left = alive(&mut leader);
    while !left.is_empty() && Instant::now() < end {
        std::thread::sleep(POLL);
        left = alive(&mut leader);
    }
    if !left.is_empty() {
        if let Some(g) = pgid {
            signal(-g, libc::SIGKILL);
        }
        for p in &left {
            signal(*p, libc::SIGKILL);
        }
        for _ in 0..200 {
            if alive(&mut leader).is_empty() {
                break;
            }
            std::thread::sleep(POLL);
        }
    }
    if let Some(c) = leader.as_mut() {
        let _ = c.wait();
    }
    reap_orphans(&keep);
    left
}

/// How a supervised process ended.
#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

/// Waits for `child` until it exits, `deadline` passes or `interrupt` is set, calling
/// `tick` about every 250 ms (progress). Does not kill: the caller tears down.
pub fn supervise(
    child: &mut Child,
    deadline: Option<Instant>,
    interrupt: &Arc<AtomicBool>,
    tick: &mut dyn FnMut(),
) -> Ended {
    let mut last_tick = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ended::Exited(status),
            Ok(None) => {}
            Err(_) => return Ended::Interrupted,
        }
        if interrupt.load(Ordering::SeqCst) {
            return Ended::Interrupted;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ended::TimedOut;
        }
        if last_tick.elapsed() >= Duration::from_millis(250) {
            tick();
            last_tick = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}
