//! The processes of a state: spawned in their own process group (stdin /dev/null, output
//! collected up to [`OUTPUT_CAP`]), waited for until exit, deadline or interrupt, with live
//! progress on stderr.

use super::engine::Runner;
use super::report::Status;
use crate::error::{AwfError, codes};
use crate::process::{self, ProcessGroup};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes kept of a process's stdout/stderr.
const OUTPUT_CAP: usize = 16 << 20;

impl Runner<'_> {
    pub(super) fn spawn_and_wait(
        &mut self,
        cmd: Command,
        timeout: Option<Duration>,
        name: &str,
    ) -> Result<Waited, AwfError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (mut w, mut child) = self.spawn_and_supervise(cmd, deadline, None, name)?;
        // Whatever the end, nothing the step started outlives it.
        child.terminate(process::GRACE);
        // What left the group and was re-parented to this subreaper goes too, before
        // the output is collected (it may hold the pipes).
        process::kill_orphans();
        w.collect();
        Ok(w)
    }

    /// Spawns `cmd` in its own process group (stdin /dev/null, output collected) and waits
    /// for its exit, the deadline or an interrupt. Teardown is the caller's.
    pub(super) fn spawn_and_supervise(
        &mut self,
        mut cmd: Command,
        deadline: Option<Instant>,
        audit: Option<&Path>,
        name: &str,
    ) -> Result<(Waited, ProcessGroup), AwfError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ProcessGroup::spawn(&mut cmd).map_err(|e| {
            AwfError::new(
                codes::SPAWN,
                format!("cannot start {:?}: {e}", cmd.get_program()),
            )
        })?;
        let out = reader(child.take_stdout());
        let err = reader(child.take_stderr());
        let mut progress = Progress::new(name, audit);
        let interrupt = self.interrupt.clone();
        let ended = child
            .supervise(deadline, Duration::from_millis(250), &mut || {
                progress.tick();
                interrupt.load(Ordering::SeqCst)
            })
            .unwrap_or(process::Ended::Interrupted);
        // The last calls before the end are shown too.
        progress.tick();
        let (status, exit_status) = match ended {
            process::Ended::Exited(s) => (Status::Success, Some(s)),
            process::Ended::TimedOut => (Status::Timeout, None),
            process::Ended::Interrupted => (Status::Interrupted, None),
        };
        Ok((
            Waited {
                status,
                code: exit_status.and_then(|s| s.code()),
                exit_status,
                stdout: String::new(),
                stderr: String::new(),
                readers: Some((out, err)),
            },
            child,
        ))
    }
}

pub(super) struct Waited {
    pub(super) status: Status,
    pub(super) code: Option<i32>,
    pub(super) exit_status: Option<std::process::ExitStatus>,
    pub(super) stdout: String,
    pub(super) stderr: String,
    readers: Option<(
        std::thread::JoinHandle<String>,
        std::thread::JoinHandle<String>,
    )>,
}

impl Waited {
    /// Joins the output readers; call after teardown (a surviving grandchild would keep
    /// the pipes open).
    pub(super) fn collect(&mut self) {
        if let Some((o, e)) = self.readers.take() {
            self.stdout = o.join().unwrap_or_default();
            self.stderr = e.join().unwrap_or_default();
        }
    }
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let Some(mut r) = r else {
            return String::new();
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if buf.len() < OUTPUT_CAP {
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

pub(super) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(n);
    let s = lines[start..].join(" | ");
    if s.is_empty() { "no stderr".into() } else { s }
}

/// Live progress of a step on stderr: elapsed time and, for proxied steps, the tool calls
/// so far by tool (read from the step's audit file). Printed when the counts change, and
/// every 10 s as a heartbeat.
pub(super) struct Progress<'a> {
    name: &'a str,
    audit: Option<&'a Path>,
    t0: Instant,
    last: (BTreeMap<String, u64>, [u64; 3]),
    last_print: Instant,
}

impl<'a> Progress<'a> {
    pub(super) fn new(name: &'a str, audit: Option<&'a Path>) -> Self {
        Progress {
            name,
            audit,
            t0: Instant::now(),
            last: (BTreeMap::new(), [0; 3]),
            last_print: Instant::now(),
        }
    }

    pub(super) fn tick(&mut self) {
        if self.name.is_empty() && self.audit.is_none() {
            return;
        }
        let counts = self
            .audit
            .map(crate::proxy::live_counts)
            .unwrap_or_default();
        let changed = counts != self.last;
        if changed || self.last_print.elapsed() >= Duration::from_secs(10) {
            let (tools, [requests, tokens_in, tokens_out]) = &counts;
            let mut calls = if self.audit.is_none() {
                "running".to_string()
            } else if tools.is_empty() {
                "no tool calls yet".to_string()
            } else {
                tools
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(" · ")
            };
            if *requests > 0 {
                calls.push_str(&format!(
                    " · model {requests} ({tokens_in} in / {tokens_out} out tokens)"
                ));
            }
            eprintln!(
                "awf:   {} {:.0}s: {calls}",
                self.name,
                self.t0.elapsed().as_secs_f64()
            );
            self.last = counts;
            self.last_print = Instant::now();
        }
    }
}
