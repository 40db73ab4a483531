//! `awf::process` in a subreaper, as `awf run` and `awf mcp-serve` are: cleaning up after
//! one group never takes the exit status of, nor kills, a child another owner waits for.
//! (Its own test binary: the subreaper flag is for the whole process; its tests take turns.)

use awf::process::{self, GRACE, ProcessGroup};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sh(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c").arg(script).stdin(Stdio::null());
    c
}

/// The sweeps are for the whole process: one test at a time, or one would sweep the
/// other's orphans.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn cleanup_spares_the_children_other_owners_wait_for() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert!(process::become_subreaper());
    // A child that exits on its own while its owner is busy elsewhere.
    let mut exited = ProcessGroup::spawn(&mut sh("exit 7")).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !zombie(exited.pid()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(zombie(exited.pid()), "the child never exited");
    let mut running = ProcessGroup::spawn(&mut sh("sleep 1000")).unwrap();
    // Another group's teardown and the orphan sweep run meanwhile.
    let mut other = ProcessGroup::spawn(&mut sh("sleep 1000")).unwrap();
    other.terminate(GRACE);
    assert!(process::kill_orphans().is_empty());
    assert_eq!(
        exited
            .wait()
            .expect("the exit status was taken by someone else")
            .code(),
        Some(7)
    );
    assert!(
        matches!(running.try_wait(), Ok(None)),
        "a running group was killed"
    );
    // A real orphan (its parent gone, its group left) is killed and reaped.
    let mut c = sh("setsid sleep 1000 & echo $!");
    c.stdout(Stdio::piped());
    let mut parent = ProcessGroup::spawn(&mut c).unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.take_stdout().unwrap()),
        &mut line,
    )
    .unwrap();
    let orphan: i32 = line.trim().parse().unwrap();
    parent.wait().unwrap();
    assert_eq!(process::kill_orphans(), vec![orphan]);
    assert!(!std::path::Path::new(&format!("/proc/{orphan}")).exists());
    assert!(matches!(running.try_wait(), Ok(None)));
}

/// Callers at once share sweeps, but none returns before a sweep that started after it
/// asked has ended: every caller finds the orphans it was asked about gone.
#[test]
fn callers_at_once_each_return_only_once_their_orphans_are_gone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert!(process::become_subreaper());
    let mut orphans = Vec::new();
    for _ in 0..3 {
        let mut c = sh("setsid sleep 1000 & echo $!");
        c.stdout(Stdio::piped());
        let mut parent = ProcessGroup::spawn(&mut c).unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(parent.take_stdout().unwrap()),
            &mut line,
        )
        .unwrap();
        orphans.push(line.trim().parse::<i32>().unwrap());
        parent.wait().unwrap();
    }
    let gone = |pid: i32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                process::kill_orphans();
                for pid in &orphans {
                    assert!(gone(*pid), "{pid} still there when a caller returned");
                }
            });
        }
    });
}
