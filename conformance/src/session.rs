//! A client session with one MCP server child process over its stdio.
//!
//! Everything is bounded by a deadline so that a check can never hang: reads wait on a
//! channel fed by a reader thread, writes go through a writer thread (a server that stops
//! reading cannot block us), and dropping the session kills the child.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The protocol revision this client speaks in its handshake by default.
pub const PROTOCOL_VERSION: &str = "2024-11-05";

/// The stateless revision: no handshake, every request names its version in `_meta`.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The `_meta` keys of a 2026-07-28 request and result.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// What a 2026-07-28 request carries in `params._meta`: the version, no client
/// capabilities, and who we are.
pub fn modern_meta() -> Value {
    json!({
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "mcp-conformance", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Why an exchange with the server did not produce what the caller waited for.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionError {
    /// The deadline passed; the text says what we were waiting for.
    Timeout(String),
    /// The server closed its stdout (usually: it exited) while we waited.
    Closed(String),
    /// The process could not be started or written to.
    Io(String),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Timeout(what) => {
                write!(
                    f,
                    "expected {what}, got nothing before the deadline (--timeout)"
                )
            }
            SessionError::Closed(what) => {
                write!(
                    f,
                    "expected {what}, got the end of the server's stdout (did it exit?)"
                )
            }
            SessionError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SessionError {}

/// One line the server wrote to stdout, as bytes (without the `\n`), and its parse.
#[derive(Debug, Clone)]
pub struct Line {
    pub raw: Vec<u8>,
    /// `None` when the line is not JSON (which is itself a protocol violation).
    pub value: Option<Value>,
}

enum Event {
    Line(Line),
    Eof,
}

/// A running server and the client side of its stdio.
pub struct ServerProcess {
    child: Child,
    writer: Option<Sender<Vec<u8>>>,
    events: Receiver<Event>,
    /// Messages received but not consumed yet, in arrival order.
    inbox: VecDeque<Value>,
    transcript: Arc<Mutex<Vec<Line>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    eof: bool,
    deadline: Instant,
    next_id: i64,
    exit: Option<ExitStatus>,
    /// When set, every request sent with [`ServerProcess::request`] carries these keys in
    /// `params._meta` (see [`ServerProcess::speak_modern`]).
    request_meta: Option<Value>,
}

impl ServerProcess {
    /// Starts `command[0]` with the remaining arguments; every wait in this session ends at
    /// `deadline`.
    pub fn spawn(command: &[String], deadline: Instant) -> Result<Self, SessionError> {
        let (program, args) = command.split_first().ok_or_else(|| {
            SessionError::Io("no server command given (put it after `--`)".into())
        })?;
        // Its own process group, so that a wrapper (a shell, npx, uv run) and the server it
        // starts can be killed together.
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(program)
            .args(args)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SessionError::Io(format!("cannot start server `{program}`: {e}")))?;

        let mut stdin = child.stdin.take().expect("stdin is piped");
        let (write_tx, write_rx) = mpsc::channel::<Vec<u8>>();
        thread::spawn(move || {
            for chunk in write_rx {
                // A server that exited or closed stdin: later writes cannot matter.
                if stdin.write_all(&chunk).and_then(|_| stdin.flush()).is_err() {
                    break;
                }
            }
            // Dropping stdin here is the end of input the server sees.
        });

        let stdout = child.stdout.take().expect("stdout is piped");
        let transcript = Arc::new(Mutex::new(Vec::new()));
        let (event_tx, events) = mpsc::channel();
        let transcript_writer = Arc::clone(&transcript);
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut raw = Vec::new();
                match reader.read_until(b'\n', &mut raw) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if raw.last() == Some(&b'\n') {
                            raw.pop();
                        }
                        let value = serde_json::from_slice(&raw).ok();
                        let line = Line { raw, value };
                        transcript_writer.lock().unwrap().push(line.clone());
                        if event_tx.send(Event::Line(line)).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = event_tx.send(Event::Eof);
        });

        let stderr_buf = Arc::new(Mutex::new(Vec::new()));
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let stderr_writer = Arc::clone(&stderr_buf);
        thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                stderr_writer.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });

        Ok(ServerProcess {
            child,
            writer: Some(write_tx),
            events,
            inbox: VecDeque::new(),
            transcript,
            stderr: stderr_buf,
            eof: false,
            deadline,
            next_id: 1,
            exit: None,
            request_meta: None,
        })
    }

    /// The child's process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A fresh integer id for a request.
    pub fn fresh_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Writes bytes as they are (the caller supplies any line ending).
    pub fn send_raw(&mut self, bytes: impl Into<Vec<u8>>) -> Result<(), SessionError> {
        let writer = self
            .writer
            .as_ref()
            .ok_or_else(|| SessionError::Io("stdin is already closed".into()))?;
        writer.send(bytes.into()).map_err(|_| {
            SessionError::Io(
                "expected to write to the server's stdin, got a closed pipe (did it exit?)".into(),
            )
        })
    }

    /// Writes one message as compact JSON and a `\n`.
    pub fn send(&mut self, message: &Value) -> Result<(), SessionError> {
        let mut line = serde_json::to_vec(message).expect("a Value always serializes");
        line.push(b'\n');
        self.send_raw(line)
    }

    /// Sends a request with a fresh integer id and returns that id.
    pub fn request(&mut self, method: &str, params: Option<Value>) -> Result<Value, SessionError> {
        let id = json!(self.fresh_id());
        self.request_with_id(id.clone(), method, params)?;
        Ok(id)
    }

    /// Sends a request with the given id (any JSON value, valid or not). After
    /// [`ServerProcess::speak_modern`] its params carry the 2026-07-28 `_meta` keys (keys
    /// the caller put in `params._meta` win).
    pub fn request_with_id(
        &mut self,
        id: Value,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), SessionError> {
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        let params = match (&self.request_meta, params) {
            (Some(meta), params) => Some(with_meta(params.unwrap_or_else(|| json!({})), meta)),
            (None, params) => params,
        };
        if let Some(params) = params {
            message["params"] = params;
        }
        self.send(&message)
    }

    /// From now on every request is a 2026-07-28 request: its params carry
    /// [`modern_meta`]. There is no handshake in that revision.
    pub fn speak_modern(&mut self) {
        self.request_meta = Some(modern_meta());
    }

    /// Back to requests without `_meta` (the handshake revisions).
    pub fn speak_legacy(&mut self) {
        self.request_meta = None;
    }

    /// Sends a notification (no id).
    pub fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), SessionError> {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        self.send(&message)
    }

    /// Sends a request and waits for the answer with the same id.
    pub fn call(&mut self, method: &str, params: Option<Value>) -> Result<Value, SessionError> {
        let id = self.request(method, params)?;
        self.wait_response(&id)
    }

    /// `initialize` asking for `version`; returns the whole response (result or error).
    pub fn initialize(&mut self, version: &str) -> Result<Value, SessionError> {
        self.call(
            "initialize",
            Some(json!({
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "mcp-conformance", "version": env!("CARGO_PKG_VERSION")},
            })),
        )
    }

    /// `initialize` (2024-11-05), `notifications/initialized`, then a `ping` whose answer
    /// (of any kind) marks the end of the handshake: whatever arrived before it is dropped,
    /// so a stray answer to the notification cannot be mistaken for an answer to what a
    /// check sends next. Fails unless initialize is answered with a result.
    pub fn handshake(&mut self) -> Result<Value, SessionError> {
        self.handshake_as(PROTOCOL_VERSION)
    }

    /// [`ServerProcess::handshake`] asking for `version`; returns the whole initialize
    /// response (whose `protocolVersion` may name another version the server supports).
    pub fn handshake_as(&mut self, version: &str) -> Result<Value, SessionError> {
        let response = self.initialize(version)?;
        if response.get("result").is_none() {
            return Err(SessionError::Io(format!(
                "expected a result for initialize, got {}",
                brief(&response)
            )));
        }
        self.notify("notifications/initialized", None)?;
        let marker = self.request("ping", None)?;
        self.responses_until(&marker)?;
        self.inbox.clear();
        Ok(response)
    }

    /// The next message (response, request or notification) the server sent, skipping
    /// lines that are not JSON (the transcript keeps them).
    fn next_message(&mut self, waiting_for: &str) -> Result<Value, SessionError> {
        loop {
            if self.eof {
                return Err(SessionError::Closed(waiting_for.to_string()));
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(line)) => {
                    if let Some(value) = line.value {
                        if is_server_request(&value) {
                            self.refuse_server_request(&value);
                        }
                        return Ok(value);
                    }
                }
                Ok(Event::Eof) | Err(RecvTimeoutError::Disconnected) => self.eof = true,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(SessionError::Timeout(waiting_for.to_string()));
                }
            }
        }
    }

    /// The next message of any kind (object, array or scalar JSON), kept ones first.
    pub fn next_message_any(&mut self) -> Result<Value, SessionError> {
        if let Some(message) = self.inbox.pop_front() {
            return Ok(message);
        }
        self.next_message("the next message")
    }

    /// We declare no client capabilities, so a request from the server gets "method not
    /// found" rather than silence (which would stall a server waiting for it).
    fn refuse_server_request(&mut self, request: &Value) {
        let answer = json!({"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": -32601, "message": "mcp-conformance declares no client capabilities"}});
        let _ = self.send(&answer);
    }

    /// The next response (a message with `result` or `error`), in arrival order;
    /// notifications and server requests are skipped.
    pub fn next_response(&mut self) -> Result<Value, SessionError> {
        if let Some(pos) = self.inbox.iter().position(is_response) {
            return Ok(self.inbox.remove(pos).expect("position is valid"));
        }
        loop {
            let message = self.next_message("a response")?;
            if is_response(&message) {
                return Ok(message);
            }
        }
    }

    /// The response whose id equals `id` (same JSON type and value); other messages that
    /// arrive meanwhile are kept for later.
    pub fn wait_response(&mut self, id: &Value) -> Result<Value, SessionError> {
        if let Some(pos) = self
            .inbox
            .iter()
            .position(|m| is_response(m) && m.get("id") == Some(id))
        {
            return Ok(self.inbox.remove(pos).expect("position is valid"));
        }
        let waiting_for = format!("the answer to request id {id}");
        loop {
            let message = self.next_message(&waiting_for)?;
            if is_response(&message) && message.get("id") == Some(id) {
                return Ok(message);
            }
            self.inbox.push_back(message);
        }
    }

    /// Every response that arrives up to and including the one with `id`, in order
    /// (responses already received come first). Used to show that something was *not*
    /// answered without waiting for a time: a later request's answer marks the point.
    pub fn responses_until(&mut self, id: &Value) -> Result<Vec<Value>, SessionError> {
        let mut out: Vec<Value> = Vec::new();
        while let Some(pos) = self.inbox.iter().position(is_response) {
            let message = self.inbox.remove(pos).expect("position is valid");
            let done = message.get("id") == Some(id);
            out.push(message);
            if done {
                return Ok(out);
            }
        }
        let waiting_for = format!("the answer to request id {id}");
        loop {
            let message = self.next_message(&waiting_for)?;
            if is_response(&message) {
                let done = message.get("id") == Some(id);
                out.push(message);
                if done {
                    return Ok(out);
                }
            }
        }
    }

    /// Every message (responses and notifications alike) that arrives up to and including
    /// the response with `id`, in arrival order, messages already received first.
    pub fn messages_until(&mut self, id: &Value) -> Result<Vec<Value>, SessionError> {
        let waiting_for = format!("the answer to request id {id}");
        self.messages_until_match(&waiting_for, |m| is_response(m) && m.get("id") == Some(id))
    }

    /// The first message, kept ones first, for which `wanted` holds; every message before it
    /// is returned too, in arrival order (the wanted one last). `what` names it for the
    /// error when the deadline or the end of stdout comes first.
    pub fn messages_until_match(
        &mut self,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Result<Vec<Value>, SessionError> {
        let mut out: Vec<Value> = self.inbox.drain(..).collect();
        if let Some(end) = out.iter().position(&wanted) {
            self.inbox.extend(out.drain(end + 1..));
            return Ok(out);
        }
        loop {
            let message = self.next_message(what)?;
            let done = wanted(&message);
            out.push(message);
            if done {
                return Ok(out);
            }
        }
    }

    /// Closes the server's stdin (end of input) after everything queued is written.
    pub fn close_stdin(&mut self) {
        self.writer = None;
    }

    /// Reads until the server closes stdout, returning every response not consumed yet,
    /// and an error when the deadline came first (with the responses that came until then).
    pub fn drain_responses(&mut self) -> (Vec<Value>, Result<(), SessionError>) {
        let (messages, closed) = self.drain_messages();
        (messages.into_iter().filter(is_response).collect(), closed)
    }

    /// [`ServerProcess::drain_responses`], keeping notifications too.
    pub fn drain_messages(&mut self) -> (Vec<Value>, Result<(), SessionError>) {
        let mut out: Vec<Value> = self.inbox.drain(..).collect();
        loop {
            match self.next_message("the server to close its stdout") {
                Ok(message) => out.push(message),
                Err(SessionError::Closed(_)) => return (out, Ok(())),
                Err(e) => return (out, Err(e)),
            }
        }
    }

    /// Waits for the process to exit, until the deadline (then it is killed and this is an
    /// error).
    pub fn wait_exit(&mut self) -> Result<ExitStatus, SessionError> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.exit = Some(status);
                    return Ok(status);
                }
                Ok(None) if Instant::now() >= self.deadline => {
                    self.kill_group();
                    self.exit = Some(
                        self.child
                            .wait()
                            .map_err(|e| SessionError::Io(e.to_string()))?,
                    );
                    return Err(SessionError::Timeout("the server to exit".into()));
                }
                Ok(None) => thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(SessionError::Io(format!("waiting for the server: {e}"))),
            }
        }
    }

    /// Sends SIGTERM.
    pub fn terminate(&mut self) -> Result<(), SessionError> {
        signal(self.pid() as i32, SIGTERM)
            .map_err(|e| SessionError::Io(format!("SIGTERM to {}: {e}", self.pid())))
    }

    /// Every line the server wrote to stdout so far.
    pub fn stdout_lines(&self) -> Vec<Line> {
        self.transcript.lock().unwrap().clone()
    }

    /// A handle on the server's stderr buffer that outlives the session.
    pub fn stderr_handle(&self) -> Arc<Mutex<Vec<u8>>> {
        Arc::clone(&self.stderr)
    }

    /// Everything the server wrote to stderr so far (lossy UTF-8).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
}

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// `kill(2)`: the signal `sig` to `pid`, or to the process group `-pid`. Called directly (the
/// C library is linked by std anyway) rather than through the `kill` program: a check starts
/// and ends a server thousands of times a run, and a process for each signal was a tenth of a
/// run's time. The crate keeps to serde, serde_json and clap.
fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    unsafe extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) takes two integers and touches no memory of this process.
    if unsafe { kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl ServerProcess {
    /// SIGKILL to the server's whole process group, then reap it.
    fn kill_group(&mut self) {
        let _ = signal(-(self.pid() as i32), SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.writer = None;
        if self.exit.is_none() && !matches!(self.child.try_wait(), Ok(Some(_))) {
            self.kill_group();
        }
    }
}

/// A response carries `result` or `error` and no `method`.
pub fn is_response(message: &Value) -> bool {
    message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// A notification: a `method` and no `id`.
pub fn is_notification(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_none()
}

/// `params` (an object) with `meta`'s keys added to its `_meta` where it has none of its own.
fn with_meta(mut params: Value, meta: &Value) -> Value {
    let Some(object) = params.as_object_mut() else {
        return params;
    };
    let target = object.entry("_meta").or_insert_with(|| json!({}));
    if let (Some(target), Some(meta)) = (target.as_object_mut(), meta.as_object()) {
        for (key, value) in meta {
            target.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    params
}

fn is_server_request(message: &Value) -> bool {
    message.get("method").is_some() && message.get("id").is_some()
}

/// A message shortened for a one-line report.
pub fn brief(value: &Value) -> String {
    let text = value.to_string();
    shorten(&text, 300)
}

/// `text` cut to at most `max` characters, saying how much was cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}… ({} bytes in all)", text.len())
}
