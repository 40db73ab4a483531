//! The `awf mcp-serve` processes of one proxied step, found for its teardown without
//! looking through every process on the machine.
//!
//! A server started with the step's config registers itself before it serves: an empty
//! file named after its pid in the step's `servers/` directory. The teardown first marks
//! the step closed (a file `closed` there), then lists the directory. Each side writes
//! before it reads, so of a server and the teardown at least one sees the other: either
//! the teardown finds the server's file, or the server, registered after the listing,
//! finds the mark and stops before it serves. A server that left the agent's process
//! group (`setsid`) is found all the same.

use std::io;
use std::path::Path;

const CLOSED: &str = "closed";

/// Registers this process as one of the step's servers. `Ok(false)`: the step is closed
/// already, so this server must stop before it serves.
pub fn register(dir: &Path) -> io::Result<bool> {
    std::fs::write(dir.join(std::process::id().to_string()), b"")?;
    Ok(!dir.join(CLOSED).exists())
}

/// Marks the step closed and returns the pids of its registered servers that still run
/// with `config` among their arguments (a pid the kernel gave to another process since is
/// not one of them).
pub fn close(dir: &Path, config: &str) -> Vec<i32> {
    if let Err(e) = std::fs::write(dir.join(CLOSED), b"") {
        tracing::warn!("cannot mark {} closed: {e}", dir.display());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| runs_with(*pid, config))
        .collect()
}

fn runs_with(pid: i32, arg: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh step directory, and the guard that removes it when dropped.
    fn dir(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let guard = tempfile::Builder::new()
            .prefix(&format!("awf-servers-{name}-"))
            .tempdir()
            .unwrap();
        let d = guard.path().to_path_buf();
        (guard, d)
    }

    #[test]
    fn a_server_registered_before_the_close_is_found_and_one_after_it_is_told_to_stop() {
        let (_tmp, d) = dir("order");
        assert!(register(&d).unwrap());
        // This test process runs with its own executable as argument 0.
        let me = std::env::args().next().unwrap();
        assert_eq!(close(&d, &me), vec![std::process::id() as i32]);
        assert!(!register(&d).unwrap(), "registered after the close");
    }

    #[test]
    fn a_pid_that_no_longer_runs_with_the_config_is_not_returned() {
        let (_tmp, d) = dir("reused");
        std::fs::write(d.join(std::process::id().to_string()), b"").unwrap();
        // A pid that runs, but not with this argument; and one that does not run.
        std::fs::write(d.join("1"), b"").unwrap();
        std::fs::write(d.join(i32::MAX.to_string()), b"").unwrap();
        assert!(close(&d, "/no/such/config.json").is_empty());
    }
}
