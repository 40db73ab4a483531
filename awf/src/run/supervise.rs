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
        // A step's output is shown as it comes, behind its name (and its item's index).
        let shown = match self.loop_vars.as_ref().map(|v| v.get("Index")) {
            Some(i) if !i.is_empty() => format!("{name}#{i}"),
            _ => name.to_string(),
        };
        let secrets = super::inputs::secret_input_values(&self.inputs);
        let echo = Echo::of(&shown, secrets);
        let (mut w, mut child) =
            self.spawn_and_supervise(Start::Launch(cmd), deadline, None, name, echo)?;
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
        echo: Option<Echo>,
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
        let readers = drain(child.take_stdout(), child.take_stderr(), echo);
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

/// One thread drains both pipes to their ends (each kept as [`Kept`] keeps it): neither
/// can fill up and block the process while the other is read. With `echo`, each line is
/// also shown as it comes ([`Echo`]).
fn drain(
    out: Option<ChildStdout>,
    err: Option<ChildStderr>,
    mut echo: Option<Echo>,
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
        let mut kept: [Kept; 2] = [Kept::default(), Kept::default()];
        let mut chunk = [0u8; 16384];
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
                    Ok(n) => {
                        kept[i].push(&chunk[..n]);
                        if let Some(e) = echo.as_mut() {
                            e.push(i, &chunk[..n]);
                        }
                    }
                }
            }
        }
        if let Some(e) = echo.as_mut() {
            e.finish();
        }
        let [o, e] = kept;
        (o.into_text(), e.into_text())
    })
}

/// Bytes of a stream kept from its start, and from its end: a step's first error lines
/// (`error[E0308]`, the file and line) and its last (the summary) both survive any flood,
/// in bounded memory. Up to [`OUTPUT_CAP`] in all the stream is kept whole.
#[derive(Default)]
struct Kept {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    /// Bytes between the head and the tail that were let go.
    dropped: u64,
}

const HEAD_CAP: usize = OUTPUT_CAP / 2;
const TAIL_CAP: usize = OUTPUT_CAP - HEAD_CAP;

impl Kept {
    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < HEAD_CAP {
            let n = bytes.len().min(HEAD_CAP - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > TAIL_CAP {
            let excess = self.tail.len() - TAIL_CAP;
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    fn into_text(self) -> String {
        let mut bytes = self.head;
        if self.dropped > 0 {
            bytes.extend_from_slice(
                format!(
                    "\n[awf: {} bytes cut here; the first and the last {} MiB are kept]\n",
                    self.dropped,
                    HEAD_CAP >> 20
                )
                .as_bytes(),
            );
        }
        bytes.extend(self.tail);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Whether steps' output is shown as it comes (`awf run --quiet` turns it off).
static LIVE_OUTPUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn set_live_output(on: bool) {
    LIVE_OUTPUT.store(on, Ordering::SeqCst);
}

/// A step's output lines shown on stderr as they come, each behind the step's name
/// (`[build]` for stdout, `[build!]` for stderr), cut to [`Echo::LINE_CHARS`] characters
/// and escaped for the terminal. At most [`Echo::BURST`] lines at once and
/// [`Echo::PER_SECOND`] a second after that: a flood is counted, not shown, and neither the
/// step nor the run waits for the terminal. Everything stays in the run's result.
pub(super) struct Echo {
    prefix: String,
    /// Values of secret inputs, shown as `***` (as the run's result keeps them).
    secrets: Vec<String>,
    partial: [Vec<u8>; 2],
    tokens: f64,
    refilled: Instant,
    skipped: u64,
}

impl Echo {
    const LINE_CHARS: usize = 400;
    const BURST: f64 = 200.0;
    const PER_SECOND: f64 = 50.0;

    /// The echo of the step `name`, unless live output is off.
    pub(super) fn of(name: &str, secrets: Vec<String>) -> Option<Echo> {
        LIVE_OUTPUT.load(Ordering::SeqCst).then(|| Echo {
            prefix: crate::terminal::printable(name).into_owned(),
            secrets,
            partial: [Vec::new(), Vec::new()],
            tokens: Self::BURST,
            refilled: Instant::now(),
            skipped: 0,
        })
    }

    fn push(&mut self, stream: usize, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            if self.partial[stream].is_empty() {
                self.line(stream, &rest[..pos]);
            } else {
                let mut line = std::mem::take(&mut self.partial[stream]);
                line.extend_from_slice(&rest[..pos]);
                self.line(stream, &line);
            }
            rest = &rest[pos + 1..];
        }
        // A line with no end in sight: what is kept of it is shown once it ends.
        let room = (64 * 1024usize).saturating_sub(self.partial[stream].len());
        self.partial[stream].extend_from_slice(&rest[..rest.len().min(room)]);
    }

    fn line(&mut self, stream: usize, line: &[u8]) {
        if self.tokens < 1.0 {
            // Out of lines to show: the clock is read again every 256 lines let go, so that
            // a flood costs a count per line.
            if self.skipped.is_multiple_of(256) {
                let now = Instant::now();
                self.tokens = (self.tokens
                    + now.duration_since(self.refilled).as_secs_f64() * Self::PER_SECOND)
                    .min(Self::BURST);
                self.refilled = now;
            }
            if self.tokens < 1.0 {
                self.skipped += 1;
                return;
            }
        }
        self.tokens -= 1.0;
        let tag = if stream == 0 { "" } else { "!" };
        let mut err = std::io::stderr().lock();
        use std::io::Write;
        if self.skipped > 0 {
            let _ = writeln!(
                err,
                "  [{}] … {} lines not shown",
                self.prefix, self.skipped
            );
            self.skipped = 0;
        }
        let mut text = String::from_utf8_lossy(line).into_owned();
        for s in &self.secrets {
            if !s.is_empty() && text.contains(s.as_str()) {
                text = text.replace(s.as_str(), "***");
            }
        }
        let text = text.trim_end_matches('\r');
        let cut: String = text.chars().take(Self::LINE_CHARS).collect();
        let more = if cut.len() < text.len() { " …" } else { "" };
        let _ = writeln!(
            err,
            "  [{}{tag}] {}{more}",
            self.prefix,
            crate::terminal::printable(&cut)
        );
    }

    fn finish(&mut self) {
        for stream in 0..2 {
            if !self.partial[stream].is_empty() {
                let line = std::mem::take(&mut self.partial[stream]);
                self.line(stream, &line);
            }
        }
        if self.skipped > 0 {
            eprintln!("  [{}] … {} lines not shown", self.prefix, self.skipped);
        }
    }
}

/// What a failed command wrote to stderr, for its error message: its first `n` lines
/// and its last `n` (a compiler's first error and its summary), each on a line of its
/// own; "no stderr" when it wrote nothing.
pub(super) fn head_and_tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    if lines.is_empty() {
        return "no stderr".into();
    }
    let shown: Vec<String> = if lines.len() <= 2 * n {
        lines.iter().map(|l| format!("  {l}")).collect()
    } else {
        lines[..n]
            .iter()
            .map(|l| format!("  {l}"))
            .chain(std::iter::once(format!(
                "  … ({} lines)",
                lines.len() - 2 * n
            )))
            .chain(lines[lines.len() - n..].iter().map(|l| format!("  {l}")))
            .collect()
    };
    format!("stderr:\n{}", shown.join("\n"))
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
            .map(crate::tool_proxy::live_counts)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_kept_whole_up_to_the_cap_then_head_and_tail() {
        let mut k = Kept::default();
        k.push(b"hello ");
        k.push(b"world");
        assert_eq!(k.into_text(), "hello world");
        let mut k = Kept::default();
        let line = b"0123456789abcdef";
        // 48 MiB: three times the cap.
        for _ in 0..(3 * OUTPUT_CAP / line.len()) {
            k.push(line);
        }
        k.push(b"THE END");
        let text = k.into_text();
        assert!(text.starts_with("0123456789abcdef0123"));
        assert!(text.ends_with("0123456789abcdefTHE END"));
        assert!(
            text.contains(&format!("[awf: {} bytes cut here;", 2 * OUTPUT_CAP + 7)),
            "{}",
            &text[HEAD_CAP - 10..HEAD_CAP + 100]
        );
        assert!(text.len() < OUTPUT_CAP + 200);
    }

    #[test]
    fn a_failure_shows_the_first_and_the_last_lines_of_stderr() {
        assert_eq!(head_and_tail("", 2), "no stderr");
        assert_eq!(head_and_tail("a\nb\n", 2), "stderr:\n  a\n  b");
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        assert_eq!(
            head_and_tail(&text, 2),
            "stderr:\n  l1\n  l2\n  … (6 lines)\n  l9\n  l10"
        );
    }
}
