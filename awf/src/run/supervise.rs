//! The processes of a state: spawned in their own process group (stdin /dev/null, output
//! collected up to [`OUTPUT_CAP`]), waited for until exit, deadline or interrupt, with live
//! progress on stderr.

use super::engine::Runner;
use super::report::Status;
use crate::error::{AwfError, codes};
use crate::process::{self, Launch, ProcessGroup};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{ChildStderr, ChildStdout, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes kept of a process's stdout/stderr.
const OUTPUT_CAP: usize = 16 << 20;

/// What a state starts: an agent CLI (a `Command`, with its own `pre_exec` steps) or a shell
/// command (a [`Launch`], started without copying awf).
pub(super) enum Start {
    Command(Command),
    Launch(Launch),
}

impl Runner<'_> {
    pub(super) fn spawn_and_wait(
        &mut self,
        cmd: Launch,
        timeout: Option<Duration>,
        name: &str,
    ) -> Result<Waited, AwfError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (mut w, mut child) =
            self.spawn_and_supervise(Start::Launch(cmd), deadline, None, name)?;
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
        start: Start,
        deadline: Option<Instant>,
        audit: Option<&Path>,
        name: &str,
    ) -> Result<(Waited, ProcessGroup), AwfError> {
        let cannot = |program: &std::ffi::OsStr, e: std::io::Error| {
            AwfError::new(codes::SPAWN, format!("cannot start {program:?}: {e}"))
        };
        // This thread waits for it: when awf dies (by SIGKILL too), so does the command.
        let mut child = match start {
            Start::Command(mut cmd) => {
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                ProcessGroup::die_with_thread(&mut cmd);
                ProcessGroup::spawn(&mut cmd).map_err(|e| cannot(cmd.get_program(), e))?
            }
            Start::Launch(l) => {
                ProcessGroup::launch(&l).map_err(|e| cannot(l.program().as_os_str(), e))?
            }
        };
        let readers = drain(child.take_stdout(), child.take_stderr());
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
                readers: Some(readers),
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
    readers: Option<std::thread::JoinHandle<(String, String)>>,
}

impl Waited {
    /// Joins the output readers; call after teardown (a surviving grandchild would keep
    /// the pipes open).
    pub(super) fn collect(&mut self) {
        if let Some(r) = self.readers.take() {
            (self.stdout, self.stderr) = r.join().unwrap_or_default();
        }
    }
}

/// One thread drains both pipes to their ends (each kept up to `OUTPUT_CAP`): neither can
/// fill up and block the process while the other is read.
fn drain(
    out: Option<ChildStdout>,
    err: Option<ChildStderr>,
) -> std::thread::JoinHandle<(String, String)> {
    let open = |r: Box<dyn Read + Send>, fd: i32| Some((r, fd));
    // Index 0 is stdout, 1 stderr; `None` once at its end.
    let mut pipes: [Option<(Box<dyn Read + Send>, i32)>; 2] = [
        out.and_then(|o| {
            let fd = o.as_raw_fd();
            open(Box::new(o), fd)
        }),
        err.and_then(|e| {
            let fd = e.as_raw_fd();
            open(Box::new(e), fd)
        }),
    ];
    std::thread::spawn(move || {
        let mut kept: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
        let mut chunk = [0u8; 8192];
        loop {
            let open: Vec<usize> = (0..2).filter(|i| pipes[*i].is_some()).collect();
            if open.is_empty() {
                break;
            }
            let mut set: Vec<libc::pollfd> = open
                .iter()
                .filter_map(|i| pipes[*i].as_ref())
                .map(|(_, fd)| libc::pollfd {
                    fd: *fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: the pollfds are ours for the call; their fds stay open meanwhile.
            let r = unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, -1) };
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
            for (i, f) in open.into_iter().zip(&set) {
                if f.revents == 0 {
                    continue;
                }
                let Some((reader, _)) = pipes[i].as_mut() else {
                    continue;
                };
                match reader.read(&mut chunk) {
                    // At its end: no longer polled.
                    Ok(0) | Err(_) => pipes[i] = None,
                    Ok(n) if kept[i].len() < OUTPUT_CAP => kept[i].extend_from_slice(&chunk[..n]),
                    Ok(_) => {}
                }
            }
        }
        let [o, e] = kept;
        (
            String::from_utf8_lossy(&o).into_owned(),
            String::from_utf8_lossy(&e).into_owned(),
        )
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
