//! One spawned server and the measurements made over its stdio: the client side of
//! the protocol, kept as thin as possible so that the figures are the server's.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::sys::{CpuSet, status_kib};

/// Linux's default pipe capacity.
const PIPE_CAPACITY: usize = 64 * 1024;

/// A server command to benchmark.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Echoes bytes back instead of speaking MCP: its answers are not checked.
    pub raw: bool,
    /// Spoken to as revision 2026-07-28: no `initialize` (startup is spawn →
    /// `server/discover` answer), and every request names the revision in `_meta`.
    pub stateless: bool,
}

impl ServerSpec {
    pub fn command_line(&self) -> String {
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// What every session sends: the tool call, pre-split around its id.
pub struct Workload {
    pub protocol: String,
    pub tool: String,
    /// The call's `arguments`, compact JSON.
    pub args: String,
    /// The text an `echo` call should get back, when the tool is `echo`.
    pub expect_text: Option<String>,
    pub show_stderr: bool,
    pub exit_timeout: Duration,
}

/// What a 2026-07-28 client puts in every request's `_meta`, as the official
/// TypeScript SDK's client sends it.
pub const STATELESS_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcp-bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

impl Workload {
    /// Appends one `tools/call` line with `id` and `args` to `out` (with the
    /// revision's `_meta` when `stateless`).
    pub fn call_line(&self, out: &mut Vec<u8>, id: u64, args: &str, stateless: bool) {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        out.extend_from_slice(id.to_string().as_bytes());
        out.extend_from_slice(b",\"method\":\"tools/call\",\"params\":{\"name\":");
        out.extend_from_slice(serde_json::to_string(&self.tool).unwrap().as_bytes());
        out.extend_from_slice(b",\"arguments\":");
        out.extend_from_slice(args.as_bytes());
        if stateless {
            out.push(b',');
            out.extend_from_slice(STATELESS_META.as_bytes());
        }
        out.extend_from_slice(b"}}\n");
    }
}

pub struct Session<'w> {
    pub spec: ServerSpec,
    work: &'w Workload,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    request: Vec<u8>,
    next_id: u64,
    /// Spawn to initialize answer.
    pub startup: Duration,
}

fn fail(spec: &ServerSpec, what: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!(
        "server `{}` ({}): {what}",
        spec.name,
        spec.command_line()
    ))
}

fn shorten(line: &[u8]) -> String {
    if line.len() > 300 {
        let head = String::from_utf8_lossy(&line[..300]);
        format!("{head}… ({} bytes)", line.len())
    } else {
        String::from_utf8_lossy(line).into_owned()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl<'w> Session<'w> {
    /// Spawns the server (on `pin` only, if given, from before `exec`, so every thread
    /// it starts inherits the pinning), initializes it and checks one call.
    pub fn start(spec: &ServerSpec, work: &'w Workload, pin: Option<usize>) -> io::Result<Self> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if work.show_stderr {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if let Some(cpu) = pin {
            let set = CpuSet::single(cpu);
            // SAFETY: the closure only makes one syscall, allowed between fork and exec.
            unsafe {
                cmd.pre_exec(move || set.apply_to_current_thread());
            }
        }
        let t0 = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(spec, format_args!("cannot start it: {e}")))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::with_capacity(256 * 1024, child.stdout.take().expect("piped"));
        let mut s = Session {
            spec: spec.clone(),
            work,
            child,
            stdin,
            stdout,
            line: Vec::with_capacity(4096),
            request: Vec::with_capacity(4096),
            next_id: 1,
            startup: Duration::ZERO,
        };
        let init = if spec.stateless {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"server/discover\",\"params\":{{{STATELESS_META}}}}}\n"
            )
        } else {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":{},\"capabilities\":{{}},\"clientInfo\":{{\"name\":\"mcp-bench\",\"version\":\"{}\"}}}}}}\n",
                serde_json::to_string(&work.protocol).unwrap(),
                env!("CARGO_PKG_VERSION")
            )
        };
        let answer = s.round_trip_bytes(init.as_bytes())?.to_vec();
        s.startup = t0.elapsed();
        if !spec.raw {
            let what = if spec.stateless {
                "server/discover"
            } else {
                "initialize"
            };
            let v: Value = serde_json::from_slice(&answer).map_err(|e| {
                fail(
                    spec,
                    format_args!("{what} answer is not JSON ({e}): {}", shorten(&answer)),
                )
            })?;
            if v.get("result").is_none() {
                s.kill();
                return Err(fail(
                    spec,
                    format_args!("{what} failed: {}", shorten(&answer)),
                ));
            }
            if !spec.stateless {
                s.stdin.write_all(
                    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
                )?;
            }
        }
        Ok(s)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `VmRSS` or `VmHWM` of the server, in KiB.
    pub fn memory_kib(&self, field: &str) -> io::Result<u64> {
        status_kib(self.pid(), field).map_err(|e| fail(&self.spec, e))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn round_trip_bytes(&mut self, request: &[u8]) -> io::Result<&[u8]> {
        let spec = &self.spec;
        // A broken pipe means the server exited: say so the same way as a read that found
        // its output ended, whichever of the two the race lets this thread see first.
        let write_error = |e: io::Error| match e.kind() {
            io::ErrorKind::BrokenPipe => fail(
                spec,
                "it exited before reading the request: its output ended before the answer \
                 (did it crash? rerun with --server-stderr)",
            ),
            _ => fail(spec, format_args!("writing a request: {e}")),
        };
        self.line.clear();
        let n = if request.len() <= PIPE_CAPACITY {
            self.stdin.write_all(request).map_err(write_error)?;
            self.stdout.read_until(b'\n', &mut self.line)?
        } else {
            // More than a pipe holds: a server that answers while it reads (the raw
            // echo) would block on its output while this thread blocks on its input.
            let (stdin, stdout, line) = (&mut self.stdin, &mut self.stdout, &mut self.line);
            thread::scope(|scope| -> io::Result<usize> {
                let writer = scope.spawn(move || stdin.write_all(request));
                let n = stdout.read_until(b'\n', line)?;
                writer.join().expect("writer thread").map_err(write_error)?;
                Ok(n)
            })?
        };
        if n == 0 {
            return Err(fail(
                spec,
                "its output ended before the answer (did it crash? rerun with --server-stderr)",
            ));
        }
        Ok(&self.line)
    }

    /// One call with `args`, checked cheaply (an answer with a `result`), timed.
    pub fn call(&mut self, args: Option<&str>) -> io::Result<Duration> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = std::mem::take(&mut self.request);
        request.clear();
        self.work.call_line(
            &mut request,
            id,
            args.unwrap_or(&self.work.args),
            self.spec.stateless,
        );
        let t0 = Instant::now();
        let raw = self.spec.raw;
        let answer = self.round_trip_bytes(&request)?;
        let took = t0.elapsed();
        if !raw && !contains(answer, b"\"result\"") {
            let shown = shorten(answer);
            return Err(fail(&self.spec, format_args!("call {id} failed: {shown}")));
        }
        self.request = request;
        Ok(took)
    }

    /// One call whose answer is fully parsed and compared with what echo must return.
    pub fn checked_call(
        &mut self,
        args: Option<&str>,
        expect_text: Option<&str>,
    ) -> io::Result<Duration> {
        let took = self.call(args)?;
        if self.spec.raw {
            return Ok(took);
        }
        let id = self.next_id - 1;
        let v: Value = serde_json::from_slice(&self.line).map_err(|e| {
            fail(
                &self.spec,
                format_args!("answer is not JSON ({e}): {}", shorten(&self.line)),
            )
        })?;
        let problem = if v.get("id").and_then(Value::as_u64) != Some(id) {
            Some("the id does not match the request's")
        } else if v.pointer("/result/isError") == Some(&Value::Bool(true)) {
            Some("the tool reported an error")
        } else if expect_text.is_some()
            && v.pointer("/result/content/0/text").and_then(Value::as_str) != expect_text
        {
            Some("the text is not the one sent")
        } else {
            None
        };
        match problem {
            Some(p) => Err(fail(
                &self.spec,
                format_args!("{p}: {}", shorten(&self.line)),
            )),
            None => Ok(took),
        }
    }

    /// Writes `batch` (`count` calls) from a writer thread while this thread reads the
    /// answers; returns the time from the first byte written to the last answer read.
    pub fn flood(&mut self, batch: &[u8], count: usize) -> io::Result<Duration> {
        let spec = self.spec.clone();
        let stdin = &mut self.stdin;
        let stdout = &mut self.stdout;
        let raw = spec.raw;
        let mut last = Vec::new();
        let took = thread::scope(|scope| -> io::Result<Duration> {
            let t0 = Instant::now();
            let writer = scope.spawn(move || stdin.write_all(batch));
            // Answers may come in any order: count lines, keep the last one to check.
            let mut need = count;
            while need > 1 {
                let buf = stdout.fill_buf()?;
                if buf.is_empty() {
                    return Err(fail(
                        &spec,
                        format_args!("output ended with {need} answers missing"),
                    ));
                }
                let mut used = buf.len();
                let mut at = 0;
                while let Some(p) = buf[at..].iter().position(|&b| b == b'\n') {
                    at += p + 1;
                    need -= 1;
                    if need == 1 {
                        used = at;
                        break;
                    }
                }
                stdout.consume(used);
            }
            if stdout.read_until(b'\n', &mut last)? == 0 {
                return Err(fail(&spec, "output ended with 1 answer missing"));
            }
            let took = t0.elapsed();
            writer
                .join()
                .expect("writer thread")
                .map_err(|e| fail(&spec, format_args!("writing the flood: {e}")))?;
            Ok(took)
        })?;
        if !raw && !contains(&last, b"\"result\"") {
            return Err(fail(
                &self.spec,
                format_args!("a flood answer failed: {}", shorten(&last)),
            ));
        }
        Ok(took)
    }

    /// Closes the server's input and times how long it takes to exit and be reaped.
    /// `None` if it had not exited after the workload's timeout (it is then killed).
    pub fn close(self) -> io::Result<Option<Duration>> {
        let Session {
            spec,
            work,
            mut child,
            stdin,
            stdout,
            ..
        } = self;
        let pid = child.id();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        // The waiter is blocked in wait() before the input closes, so the time it
        // reports is the exit itself, not a thread start-up.
        thread::spawn(move || {
            ready_tx.send(()).ok();
            let status = child.wait();
            done_tx.send((Instant::now(), status)).ok();
        });
        ready_rx.recv().ok();
        thread::sleep(Duration::from_millis(1));
        let t0 = Instant::now();
        drop(stdin);
        let result = match done_rx.recv_timeout(work.exit_timeout) {
            Ok((t1, status)) => {
                let status = status?;
                if !status.success() && !spec.raw {
                    eprintln!(
                        "note: server `{}` exited with {status} after end of input",
                        spec.name
                    );
                }
                Some(t1 - t0)
            }
            Err(_) => {
                // SAFETY: plain kill(2) of our own child; it is not reaped yet.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                let _ = done_rx.recv();
                None
            }
        };
        drop(stdout);
        Ok(result)
    }
}
