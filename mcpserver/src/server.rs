//! The serving loop: leader/followers over one reader.
//!
//! One thread at a time (the leader) reads. It handles what it read itself, tools
//! calls included, so a quick call costs no hand-off between threads. When a call
//! runs for longer than a tick (about a millisecond), a monitor thread passes the
//! leadership to an idle worker (spawning one, up to the concurrency bound), which
//! goes on reading: `ping` is answered and other calls run while the slow one works.
//! When every worker runs a call, nobody reads, so memory stays bounded.
//!
//! Answers are written whole under a lock. The leader flushes with an answer when no
//! further line is buffered (so a flood of requests gets batched writes, and a lone
//! request one write); a worker that is no longer leader flushes at once.

use std::io::{self, BufWriter, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, Scope};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::builder::ServerBuilder;
use crate::context::{CallContext, CancellationToken, ClientInfo};
use crate::doorbell::Doorbell;
use crate::framing::{Frame, LineReader};
use crate::hooks::{CallOutcome, CallStatus, Hooks};
use crate::jsonrpc::{self, Call, CallParams, ErrorAnswer, Message, RequestId};
use crate::tool::{CallError, Handler, Outcome, Tool, ToolPage, ToolResult};
use crate::{NEWER_PROTOCOL_VERSIONS, PROTOCOL_VERSION, REVISION_2025_11_25};

/// How long a call may keep the leadership before another thread takes over reading,
/// at first. While no call outlives a tick the monitor looks less often (up to
/// `MAX_TICK`), so quick calls are not disturbed by its wake-ups; a slow call brings it
/// back to `TICK`.
const TICK: Duration = Duration::from_millis(1);
const MAX_TICK: Duration = Duration::from_millis(16);
/// Idle ticks after which the monitor sleeps until the next call.
const MONITOR_IDLE_TICKS: u32 = 64;
const WRITE_BUFFER: usize = 8 * 1024;

/// Why [`Server::serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The input ended; every request read was answered.
    EndOfInput,
    /// The client sent `shutdown`; it was answered, as was every request before it.
    Shutdown,
    /// The host called [`StopHandle::stop`]; every call in flight was answered.
    Stopped,
}

impl StopReason {
    /// `end_of_input`, `shutdown` or `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndOfInput => "end_of_input",
            StopReason::Shutdown => "shutdown",
            StopReason::Stopped => "stopped",
        }
    }
}

/// An MCP server: a fixed set of tools, served over any reader and writer.
///
/// Build it with [`Server::builder`]; serve it with [`Server::serve_stdio`] or
/// [`Server::serve`].
pub struct Server {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
    pub max_message_size: usize,
    pub max_concurrency: usize,
    pub page_size: Option<usize>,
    pub accept_newer: bool,
    /// None when the host set none: the call path then skips the clock too.
    pub hooks: Option<Box<dyn Hooks>>,
    pub tools: Vec<Tool>,
    /// The tools' names, shared with every call's context.
    pub tool_names: Vec<Arc<str>>,
    pub handlers: Vec<Handler>,
    /// The whole `tools/list` result, for 2024-11-05 and for newer revisions.
    pub list_json: [String; 2],
    /// Tools the host keeps from this client, with why: a call to one is rejected
    /// with the reason instead of "unknown tool".
    pub withheld: Vec<(String, String)>,
    pub stop: Arc<StopSignal>,
}

#[derive(Default)]
pub(crate) struct StopSignal {
    pub requested: AtomicBool,
    /// Wakes a stdio reader blocked in `poll` (set by `serve_stdio` when a handle exists).
    pub wake: Mutex<Option<io::PipeWriter>>,
    pub handle_taken: AtomicBool,
}

/// Stops a running server from another thread (a signal handler thread, say).
#[derive(Clone)]
pub struct StopHandle {
    signal: Arc<StopSignal>,
}

impl StopHandle {
    /// Asks the server to stop: it reads nothing more, lets the calls in flight end and
    /// answers them, flushes, and `serve` returns [`StopReason::Stopped`].
    ///
    /// `serve_stdio` notices at once, even while blocked reading, when this handle was
    /// taken before it started; `serve` over another reader notices after its next line.
    pub fn stop(&self) {
        self.signal.requested.store(true, Ordering::SeqCst);
        if let Some(w) = self
            .signal
            .wake
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            let _ = w.write_all(b"x");
        }
    }
}

impl Server {
    /// Starts building a server that names itself `name` and `version` to clients.
    ///
    /// ```
    /// use mcpserver::{Server, Tool, ToolResult};
    /// #[derive(serde::Deserialize)]
    /// struct Args { text: String }
    /// let server = Server::builder("echo", "1.0.0")
    ///     .tool(
    ///         Tool::new("echo", "Echo the text", serde_json::json!({"type": "object"})),
    ///         |a: Args, _ctx: &mcpserver::CallContext| Ok::<_, String>(ToolResult::text(a.text)),
    ///     )
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(server.tools().count(), 1);
    /// ```
    pub fn builder(name: &str, version: &str) -> ServerBuilder {
        ServerBuilder::new(name, version)
    }

    /// The registered tools, in registration order.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.inner.tools.iter()
    }

    /// A handle that stops the server from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.inner.stop.handle_taken.store(true, Ordering::SeqCst);
        StopHandle {
            signal: self.inner.stop.clone(),
        }
    }

    /// Runs one `tools/call` in-process on the calling thread, through the same path as a
    /// call read from the transport: name lookup, withheld tools, argument decoding, the
    /// handler, panic catching, and the hooks ([`Hooks::call_rejected`], or
    /// [`Hooks::call_started`] then [`Hooks::call_finished`]).
    ///
    /// The tool is the one [`CallContext::tool`] names; fill the context with
    /// [`CallContext::new`] and, as the call needs, [`CallContext::with_meta`] and
    /// [`CallContext::with_cancellation`]. The answer is what the wire would carry:
    ///
    /// - an unknown or withheld tool, `arguments` that are not an object (`null` counts as
    ///   `{}`), or arguments that do not fit the handler: `Err(`[`CallError::InvalidArguments`]`)`
    ///   with the message a client over stdio gets with -32602 (the hooks see
    ///   [`CallStatus::Rejected`] before any handler, [`CallStatus::InvalidArguments`] after);
    /// - a handler's `Err(`[`CallError::Failed`]`)` or panic: `Ok` with
    ///   [`ToolResult::is_error`] set and the text the wire carries;
    /// - otherwise the handler's result.
    ///
    /// A call whose cancellation was raised while it ran returns what the handler
    /// returned, and the hooks see [`CallStatus::Cancelled`] (the wire sends no answer).
    /// [`Hooks::request_received`] is not called: nothing was read. The context's
    /// protocol revision is 2024-11-05, so a handler's result is returned whole
    /// (structured content included) and misfit arguments are an `Err`.
    ///
    /// ```
    /// use mcpserver::{CallContext, CallError, RequestId, Server, Tool, ToolResult};
    /// #[derive(serde::Deserialize)]
    /// struct Args { text: String }
    /// let server = Server::builder("echo", "1.0.0")
    ///     .tool(
    ///         Tool::new("echo", "Echo the text", serde_json::json!({"type": "object"})),
    ///         |a: Args, _ctx: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
    ///     )
    ///     .build()
    ///     .unwrap();
    /// let ctx = CallContext::new(RequestId::Number(1), "echo");
    /// let result = server.call(&ctx, &serde_json::json!({"text": "hi"})).unwrap();
    /// assert_eq!(result.first_text(), Some("hi"));
    /// let missing = CallContext::new(RequestId::Number(2), "nope");
    /// assert!(matches!(
    ///     server.call(&missing, &serde_json::json!({})),
    ///     Err(CallError::InvalidArguments(m)) if m.starts_with("unknown tool \"nope\"")
    /// ));
    /// ```
    pub fn call(&self, ctx: &CallContext, arguments: &Value) -> Result<ToolResult, CallError> {
        let inner = &*self.inner;
        let text = match arguments {
            Value::Null => None,
            other => Some(other.to_string()),
        };
        let found = inner
            .find_tool(ctx.tool())
            .and_then(|index| object_arguments(ctx.tool(), text.as_deref()).map(|a| (index, a)));
        match found {
            Ok((index, arguments)) => inner
                .run_handler(index, ctx, arguments)
                .answer
                .map_err(CallError::InvalidArguments),
            Err(message) => {
                inner.reject(ctx, text.as_deref(), &message);
                Err(CallError::InvalidArguments(message))
            }
        }
    }

    /// Serves on standard input and output until end of input, `shutdown`, or a stop.
    ///
    /// On Unix, standard output is reserved for the protocol while serving: anything
    /// else printed to it (a stray `println!` in a handler) goes to standard error.
    pub fn serve_stdio(&self) -> io::Result<StopReason> {
        #[cfg(unix)]
        {
            let wake = if self.inner.stop.handle_taken.load(Ordering::SeqCst) {
                let (rx, tx) = io::pipe()?;
                *self
                    .inner
                    .stop
                    .wake
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(tx);
                Some(rx)
            } else {
                None
            };
            let (stdio, input, output) = crate::sys::Stdio::take()?;
            let reader = crate::sys::StdinReader::new(input, wake)?;
            let result = self.serve(reader, output);
            stdio.restore();
            result
        }
        #[cfg(not(unix))]
        {
            self.serve(io::stdin(), io::stdout())
        }
    }

    /// Serves one client over `reader` and `writer` until end of input, `shutdown`, or a
    /// stop. Returns after every request read has been answered and the writer flushed.
    ///
    /// The reader is buffered internally: pass a raw reader (a `File`, a pipe).
    pub fn serve<R, W>(&self, reader: R, writer: W) -> io::Result<StopReason>
    where
        R: Read + Send,
        W: Write + Send,
    {
        let session = Session {
            inner: &self.inner,
            reader: Mutex::new(LineReader::new(reader, self.inner.max_message_size)),
            out: Mutex::new(BufWriter::with_capacity(WRITE_BUFFER, writer)),
            coord: Mutex::new(Coord {
                leader: false,
                idle: 0,
                workers: 1,
                finished: false,
                reason: None,
                error: None,
            }),
            idle_cv: Condvar::new(),
            leader_call: AtomicU64::new(0),
            next_seq: AtomicU64::new(1),
            monitor: AtomicBool::new(false),
            doorbell: Doorbell::new(),
            monitor_sleeping: AtomicBool::new(false),
            more_buffered: AtomicBool::new(false),
            unflushed: AtomicBool::new(false),
            init: OnceLock::new(),
            inflight: Mutex::new(Vec::new()),
        };
        thread::scope(|scope| session.worker(scope));
        let mut coord = lock(&session.coord);
        let flushed = lock(&session.out).flush();
        if let Some(e) = coord.error.take() {
            return Err(e);
        }
        flushed?;
        Ok(coord.reason.unwrap_or(StopReason::EndOfInput))
    }
}

/// What became of a call that reached its handler.
pub(crate) struct Ran {
    /// The result to send, or the message of the -32602 error to send instead.
    pub answer: Result<ToolResult, String>,
    /// The call's cancellation was raised while it ran: the wire sends no answer.
    pub cancelled: bool,
}

// The one path of a `tools/call`, shared by the transport and `Server::call`: find the
// tool, check the arguments' shape, run the handler between the hooks.
impl Inner {
    /// The index of the tool `name`, or the -32602 message saying why there is none.
    pub(crate) fn find_tool(&self, name: &str) -> Result<usize, String> {
        if let Some(index) = self.tools.iter().position(|t| t.name == name) {
            return Ok(index);
        }
        Err(match self.withheld.iter().find(|(n, _)| n == name) {
            Some((name, why)) => format!("tool \"{name}\" is not available: {why}"),
            None => format!("unknown tool \"{name}\": tools/list names the tools of this server"),
        })
    }

    /// Tells the hooks about a call answered with `message` before any handler ran.
    pub(crate) fn reject(&self, ctx: &CallContext, arguments: Option<&str>, message: &str) {
        if let Some(hooks) = self.hooks.as_deref() {
            hooks.call_rejected(ctx, arguments.unwrap_or("{}"), message);
        }
    }

    /// Runs tool `index`'s handler on `arguments` (an object's JSON text), between the
    /// `call_started` and `call_finished` hooks; a panic becomes an `isError` result.
    pub(crate) fn run_handler(&self, index: usize, ctx: &CallContext, arguments: &str) -> Ran {
        let hooks = self.hooks.as_deref();
        if let Some(hooks) = hooks {
            hooks.call_started(ctx, arguments);
        }
        let started = hooks.map(|_| Instant::now());
        let handler = &self.handlers[index];
        let outcome = catch_unwind(AssertUnwindSafe(|| handler(arguments, ctx)));
        let duration = started.map(|s| s.elapsed()).unwrap_or_default();

        let tool = &ctx.tool;
        // `Err` is a protocol error (-32602); a tool's failure is an `isError` result.
        let (answer, status): (Result<ToolResult, String>, CallStatus) = match outcome {
            Ok(Outcome::Done(result)) if result.is_error => (Ok(result), CallStatus::ToolError),
            Ok(Outcome::Done(result)) => (Ok(result), CallStatus::Ok),
            Ok(Outcome::Failed(text)) => (Ok(ToolResult::error(text)), CallStatus::ToolError),
            Ok(Outcome::BadArguments(e)) => {
                let text = format!("invalid arguments for tool \"{tool}\": {e}");
                // From 2025-11-25 on, the model gets to read (and fix) its mistake.
                if ctx.protocol_version == REVISION_2025_11_25 {
                    (Ok(ToolResult::error(text)), CallStatus::InvalidArguments)
                } else {
                    (Err(text), CallStatus::InvalidArguments)
                }
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".to_owned());
                let text = format!("tool \"{tool}\" failed unexpectedly (it panicked: {what})");
                (Ok(ToolResult::error(text)), CallStatus::Panicked)
            }
        };
        let cancelled = ctx.is_cancelled();
        let status = if cancelled {
            CallStatus::Cancelled
        } else {
            status
        };
        if let Some(hooks) = hooks {
            hooks.call_finished(
                ctx,
                &CallOutcome {
                    duration,
                    status,
                    error: match &answer {
                        Ok(result) if result.is_error => result.first_text(),
                        Ok(_) => None,
                        Err(text) => Some(text),
                    },
                    result: answer.as_ref().ok(),
                },
            );
        }
        Ran { answer, cancelled }
    }
}

/// The arguments' JSON text as a handler gets it: an object, `{}` when the call sent
/// none or `null`; anything else is the -32602 message.
pub(crate) fn object_arguments<'a>(
    tool: &str,
    arguments: Option<&'a str>,
) -> Result<&'a str, String> {
    match arguments {
        Some(a) if a.starts_with('{') => Ok(a),
        None | Some("null") => Ok("{}"),
        Some(a) => Err(format!(
            "invalid arguments for tool \"{tool}\": \"arguments\" must be an object, got {a}"
        )),
    }
}

/// What the session agreed with the client in `initialize`.
struct Agreement {
    client: Option<Arc<ClientInfo>>,
    version: &'static str,
}

struct Coord {
    /// Some thread holds the leadership (reads, or runs what it read).
    leader: bool,
    idle: usize,
    workers: usize,
    finished: bool,
    reason: Option<StopReason>,
    error: Option<io::Error>,
}

enum Flow {
    Continue,
    /// The leadership passed to another thread while this one ran a call.
    Demoted,
    Finished,
}

struct Session<'s, R, W: Write> {
    inner: &'s Inner,
    reader: Mutex<LineReader<R>>,
    out: Mutex<BufWriter<W>>,
    coord: Mutex<Coord>,
    idle_cv: Condvar,
    /// Sequence number of the call the leader runs itself, 0 when none.
    leader_call: AtomicU64,
    next_seq: AtomicU64,
    /// The monitor thread was started (only the leader starts it).
    monitor: AtomicBool,
    /// Where the monitor sleeps between ticks.
    doorbell: Doorbell,
    monitor_sleeping: AtomicBool,
    /// Another complete line waits in the reader: the leader may leave its answer in
    /// the buffer (set by the leader after each read).
    more_buffered: AtomicBool,
    /// Answers wait in the output buffer.
    unflushed: AtomicBool,
    init: OnceLock<Agreement>,
    /// Calls running, with their cancellation flags (a few at most: a list beats a map).
    inflight: Mutex<Vec<(RequestId, CancellationToken)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler never holds these locks; recover rather than cascade.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Deserialize, Default)]
struct InitParams {
    #[serde(default, rename = "protocolVersion")]
    protocol_version: Option<String>,
    #[serde(default, rename = "clientInfo")]
    client_info: Option<ClientInfoWire>,
}

#[derive(Deserialize)]
struct ClientInfoWire {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

#[derive(Deserialize, Default)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Deserialize)]
struct CancelParams {
    #[serde(rename = "requestId")]
    request_id: Value,
}

impl<'s, R: Read + Send, W: Write + Send> Session<'s, R, W> {
    fn worker<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        loop {
            {
                let mut c = lock(&self.coord);
                loop {
                    if c.finished {
                        return;
                    }
                    if !c.leader {
                        c.leader = true;
                        break;
                    }
                    c.idle += 1;
                    c = self.idle_cv.wait(c).unwrap_or_else(|e| e.into_inner());
                    c.idle -= 1;
                }
            }
            self.lead(scope);
        }
    }

    /// Reads and handles lines until the input ends or the leadership passes on.
    fn lead<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        let mut line = Vec::new();
        loop {
            if self.inner.stop.requested.load(Ordering::SeqCst) {
                self.finish(StopReason::Stopped, None);
                return;
            }
            let frame = {
                let mut reader = lock(&self.reader);
                let frame = reader.next_frame(&mut || self.flush_unflushed());
                let frame = match frame {
                    Ok(Frame::Line(l)) => {
                        line.clear();
                        line.extend_from_slice(l);
                        Ok(true)
                    }
                    Ok(Frame::TooLong) => Ok(false),
                    Ok(Frame::Eof) => Err(None),
                    Err(e) => Err(Some(e)),
                };
                self.more_buffered
                    .store(reader.has_line(), Ordering::Relaxed);
                frame
            };
            let flow = match frame {
                Ok(true) => self.handle_line(&line, scope),
                Ok(false) => self.answer_error(
                    &ErrorAnswer::new(
                        None,
                        jsonrpc::INVALID_REQUEST,
                        format!(
                            "message too large: a line is limited to {} bytes; it was skipped",
                            self.inner.max_message_size
                        ),
                    ),
                    false,
                ),
                Err(error) => {
                    let reason = if self.inner.stop.requested.load(Ordering::SeqCst) {
                        StopReason::Stopped
                    } else {
                        StopReason::EndOfInput
                    };
                    self.finish(reason, error);
                    Flow::Finished
                }
            };
            match flow {
                Flow::Continue => {}
                Flow::Demoted | Flow::Finished => return,
            }
        }
    }

    fn finish(&self, reason: StopReason, error: Option<io::Error>) {
        let mut c = lock(&self.coord);
        if !c.finished {
            c.finished = true;
            c.reason = Some(reason);
        }
        if c.error.is_none() {
            c.error = error;
        }
        c.leader = false;
        drop(c);
        self.idle_cv.notify_all();
        self.doorbell.ring();
    }

    fn handle_line<'scope>(&'scope self, line: &[u8], scope: &'scope Scope<'scope, '_>) -> Flow {
        let (id, method, params) = match jsonrpc::classify(line) {
            Message::Invalid(e) => return self.answer_error(&e, false),
            Message::Response => return Flow::Continue,
            Message::Notification { method, params } => {
                if let Some(hooks) = &self.inner.hooks {
                    hooks.request_received(&method, None);
                }
                if method == "notifications/cancelled" {
                    self.cancel(params);
                }
                return Flow::Continue;
            }
            Message::Call { id, call } => {
                if let Some(hooks) = &self.inner.hooks {
                    hooks.request_received("tools/call", Some(&id));
                }
                if self.init.get().is_none() {
                    let message = not_initialized_message("tools/call");
                    return self.reject_call(id, &call, jsonrpc::SERVER_NOT_INITIALIZED, message);
                }
                return self.run_call(id, call, scope);
            }
            Message::Request { id, method, params } => (id, method, params),
        };
        if let Some(hooks) = &self.inner.hooks {
            hooks.request_received(&method, Some(&id));
        }
        let initialized = self.init.get().is_some();
        match &*method {
            "ping" => self.answer(&id, |w| w.write_all(b"{}")),
            "initialize" => self.initialize(id, params),
            "tools/call" if !initialized => {
                match params.and_then(|p| serde_json::from_str::<CallParams<'_>>(p.get()).ok()) {
                    Some(call) => self.reject_call(
                        id,
                        &call.into(),
                        jsonrpc::SERVER_NOT_INITIALIZED,
                        not_initialized_message("tools/call"),
                    ),
                    None => self.not_initialized(id, &method),
                }
            }
            "tools/list" | "shutdown" if !initialized => self.not_initialized(id, &method),
            "tools/list" => self.list(id, params),
            "tools/call" => self.call(id, params, scope),
            "shutdown" => {
                let flow = self.answer(&id, |w| w.write_all(b"{}"));
                self.finish(StopReason::Shutdown, None);
                match flow {
                    Flow::Continue => Flow::Finished,
                    other => other,
                }
            }
            _ => self.answer_error(
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::METHOD_NOT_FOUND,
                    format!("method not found: \"{method}\" (this server offers initialize, ping, tools/list, tools/call, shutdown)"),
                ),
                false,
            ),
        }
    }

    fn not_initialized(&self, id: RequestId, method: &str) -> Flow {
        self.answer_error(
            &ErrorAnswer::new(
                Some(id),
                jsonrpc::SERVER_NOT_INITIALIZED,
                not_initialized_message(method),
            ),
            false,
        )
    }

    /// Answers a call that names a tool with an error before any handler runs, and
    /// reports it to the hooks as [`CallStatus::Rejected`] (so a host audits it too).
    fn reject_call(&self, id: RequestId, call: &Call<'_>, code: i64, message: String) -> Flow {
        if self.inner.hooks.is_some() {
            let ctx = self.context(id.clone(), Arc::from(&*call.name), call.meta);
            self.inner.reject(&ctx, call.arguments, &message);
        }
        self.answer_error(&ErrorAnswer::new(Some(id), code, message), false)
    }

    /// The context of a call to `tool` in this session.
    fn context(&self, id: RequestId, tool: Arc<str>, meta: Option<&str>) -> CallContext {
        let agreement = self.init.get();
        CallContext {
            request_id: id,
            tool,
            cancellation: CancellationToken::new(),
            client: agreement.and_then(|a| a.client.clone()),
            protocol_version: agreement.map_or(PROTOCOL_VERSION, |a| a.version),
            // Checked JSON: it reads as a Value.
            meta: meta
                .filter(|m| *m != "null")
                .and_then(|m| serde_json::from_str(m).ok()),
        }
    }

    fn initialize(&self, id: RequestId, params: Option<&RawValue>) -> Flow {
        if self.init.get().is_some() {
            return self.answer_error(
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::INVALID_REQUEST,
                    "already initialized: \"initialize\" may be sent once per session",
                ),
                false,
            );
        }
        let params: InitParams = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let asked = params
            .protocol_version
            .as_deref()
            .unwrap_or(PROTOCOL_VERSION);
        let version = match NEWER_PROTOCOL_VERSIONS.iter().find(|v| **v == asked) {
            Some(v) if self.inner.accept_newer => v,
            _ => PROTOCOL_VERSION,
        };
        let client = params.client_info.map(|c| {
            Arc::new(ClientInfo {
                name: c.name,
                version: c.version,
            })
        });
        let _ = self.init.set(Agreement { client, version });
        let mut result = serde_json::json!({
            "protocolVersion": version,
            "capabilities": { "tools": { "listChanged": false } },
            "serverInfo": { "name": self.inner.name, "version": self.inner.version },
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = Value::String(text.clone());
        }
        self.answer(&id, |w| {
            serde_json::to_writer(w, &result).map_err(io::Error::from)
        })
    }

    fn newer(&self) -> bool {
        self.init
            .get()
            .is_some_and(|a| a.version != PROTOCOL_VERSION)
    }

    fn list(&self, id: RequestId, params: Option<&RawValue>) -> Flow {
        let newer = self.newer();
        let params: ListParams = match params.map(|p| serde_json::from_str(p.get())) {
            None => ListParams::default(),
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return self.answer_error(
                    &ErrorAnswer::new(
                        Some(id),
                        jsonrpc::INVALID_PARAMS,
                        format!("invalid tools/list params: {e}"),
                    ),
                    false,
                );
            }
        };
        let total = self.inner.tools.len();
        let start = match params.cursor.as_deref() {
            None => 0,
            Some(c) => match c
                .strip_prefix("page:")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(n) if n > 0 && n < total && self.inner.page_size.is_some() => n,
                _ => {
                    return self.answer_error(
                        &ErrorAnswer::new(
                            Some(id),
                            jsonrpc::INVALID_PARAMS,
                            format!("invalid cursor {c:?}: pass the nextCursor of a previous tools/list answer, or no cursor for the first page"),
                        ),
                        false,
                    );
                }
            },
        };
        let Some(size) = self.inner.page_size else {
            let body = &self.inner.list_json[newer as usize];
            return self.answer(&id, |w| w.write_all(body.as_bytes()));
        };
        let end = (start + size).min(total);
        let page = ToolPage {
            tools: self.inner.tools[start..end]
                .iter()
                .map(|t| t.listed(newer))
                .collect(),
            next_cursor: (end < total).then(|| format!("page:{end}")),
        };
        self.answer(&id, |w| {
            serde_json::to_writer(w, &page).map_err(io::Error::from)
        })
    }

    fn cancel(&self, params: Option<&RawValue>) {
        let Some(p) = params.and_then(|p| serde_json::from_str::<CancelParams>(p.get()).ok())
        else {
            return;
        };
        let id = match p.request_id {
            Value::String(s) => RequestId::String(s),
            Value::Number(n) => match n.as_i64() {
                Some(n) => RequestId::Number(n),
                None => return,
            },
            _ => return,
        };
        if let Some((_, token)) = lock(&self.inflight).iter().find(|(i, _)| *i == id) {
            token.cancel();
        }
    }

    fn call<'scope>(
        &'scope self,
        id: RequestId,
        params: Option<&RawValue>,
        scope: &'scope Scope<'scope, '_>,
    ) -> Flow {
        let bad =
            |message: String| ErrorAnswer::new(Some(id.clone()), jsonrpc::INVALID_PARAMS, message);
        let params: CallParams<'_> = match params.map(|p| serde_json::from_str(p.get())) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return self.answer_error(&bad(format!("invalid tools/call params: {e}")), false);
            }
            None => {
                return self.answer_error(
                    &bad(
                        "tools/call needs params with the tool's \"name\" and its \"arguments\""
                            .into(),
                    ),
                    false,
                );
            }
        };
        self.run_call(id, params.into(), scope)
    }

    /// Runs a call whose params are read: finds the tool, checks the arguments' shape,
    /// runs the handler (the leadership may pass on meanwhile) and answers.
    fn run_call<'scope>(
        &'scope self,
        id: RequestId,
        params: Call<'_>,
        scope: &'scope Scope<'scope, '_>,
    ) -> Flow {
        let found = self.inner.find_tool(&params.name).and_then(|index| {
            object_arguments(&params.name, params.arguments).map(|args| (index, args))
        });
        let (index, arguments) = match found {
            Ok(found) => found,
            Err(message) => {
                return self.reject_call(id, &params, jsonrpc::INVALID_PARAMS, message);
            }
        };
        let ctx = self.context(id, self.inner.tool_names[index].clone(), params.meta);
        lock(&self.inflight).push((ctx.request_id.clone(), ctx.cancellation.clone()));

        // Only the leader numbers calls (no read-modify-write needed).
        let seq = self.next_seq.load(Ordering::Relaxed);
        self.next_seq.store(seq + 1, Ordering::Relaxed);
        self.leader_call.store(seq, Ordering::SeqCst);
        if self.inner.max_concurrency > 1 {
            self.watch(scope);
        }
        let ran = self.inner.run_handler(index, &ctx, arguments);
        let still_leader = self
            .leader_call
            .compare_exchange(seq, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        {
            let mut inflight = lock(&self.inflight);
            if let Some(i) = inflight.iter().position(|(i, _)| *i == ctx.request_id) {
                inflight.swap_remove(i);
            }
        }

        let flow = if ran.cancelled {
            Flow::Continue
        } else {
            let newer = ctx.protocol_version != PROTOCOL_VERSION;
            match &ran.answer {
                Ok(result) => self.answer_with(
                    &ctx.request_id,
                    |w| result.write_json(w, newer),
                    !still_leader,
                ),
                Err(text) => self.answer_error(
                    &ErrorAnswer::new(
                        Some(ctx.request_id.clone()),
                        jsonrpc::INVALID_PARAMS,
                        text.clone(),
                    ),
                    !still_leader,
                ),
            }
        };
        if still_leader || matches!(flow, Flow::Finished) {
            return flow;
        }
        // Demoted: lead again if nobody else does, else join the idle workers.
        let mut c = lock(&self.coord);
        if !c.leader && !c.finished {
            c.leader = true;
            Flow::Continue
        } else {
            Flow::Demoted
        }
    }

    /// Makes sure a monitor watches the call the leader just started.
    fn watch<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        if self.monitor.load(Ordering::Relaxed) {
            if self.monitor_sleeping.load(Ordering::SeqCst) {
                self.monitor_sleeping.store(false, Ordering::SeqCst);
                self.doorbell.ring();
            }
        } else {
            self.monitor.store(true, Ordering::Relaxed);
            let spawned = thread::Builder::new()
                .name("mcp-monitor".into())
                .spawn_scoped(scope, move || self.monitor(scope));
            // Without a monitor, calls simply run one at a time.
            if spawned.is_err() {
                self.monitor.store(false, Ordering::Relaxed);
            }
        }
    }

    fn monitor<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        let mut last = 0;
        let mut quiet = 0;
        let mut tick = TICK;
        loop {
            if lock(&self.coord).finished {
                return;
            }
            let current = self.leader_call.load(Ordering::SeqCst);
            if current == 0 {
                quiet += 1;
                tick = (tick * 2).min(MAX_TICK);
                if quiet >= MONITOR_IDLE_TICKS {
                    self.monitor_sleeping.store(true, Ordering::SeqCst);
                    if self.leader_call.load(Ordering::SeqCst) == 0 && !lock(&self.coord).finished {
                        self.doorbell.wait(None);
                    }
                    self.monitor_sleeping.store(false, Ordering::SeqCst);
                    quiet = 0;
                    tick = TICK;
                }
            } else {
                quiet = 0;
                if current == last {
                    self.promote(current, scope);
                    tick = TICK;
                } else {
                    tick = (tick * 2).min(MAX_TICK);
                }
            }
            last = current;
            self.doorbell.wait(Some(tick));
        }
    }

    /// The leader has run call `seq` for a tick: hand the reading to another worker.
    fn promote<'scope>(&'scope self, seq: u64, scope: &'scope Scope<'scope, '_>) {
        let mut c = lock(&self.coord);
        if c.finished || (c.idle == 0 && c.workers >= self.inner.max_concurrency) {
            return;
        }
        if self
            .leader_call
            .compare_exchange(seq, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        c.leader = false;
        if c.idle > 0 {
            drop(c);
            self.idle_cv.notify_one();
            return;
        }
        c.workers += 1;
        drop(c);
        let spawned = thread::Builder::new()
            .name("mcp-worker".into())
            .spawn_scoped(scope, move || self.worker(scope));
        if spawned.is_err() {
            // No thread: the running call takes the leadership back when it ends.
            lock(&self.coord).workers -= 1;
        }
    }

    fn answer(
        &self,
        id: &RequestId,
        body: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>,
    ) -> Flow {
        self.answer_with(id, body, false)
    }

    fn answer_with(
        &self,
        id: &RequestId,
        body: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>,
        flush: bool,
    ) -> Flow {
        self.write(
            |w| {
                jsonrpc::write_result_head(w, id)?;
                body(w)?;
                w.write_all(b"}\n")
            },
            flush,
        )
    }

    /// Flushes answers the leader left in the buffer, before its read blocks.
    fn flush_unflushed(&self) -> io::Result<()> {
        if !self.unflushed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut out = lock(&self.out);
        self.unflushed.store(false, Ordering::Release);
        out.flush()
    }

    fn answer_error(&self, err: &ErrorAnswer, flush: bool) -> Flow {
        self.write(|w| jsonrpc::write_error(w, err), flush)
    }

    /// Writes an answer; `flush` is set by a worker that is no longer leader, and the
    /// leader flushes when no other line is buffered.
    fn write(&self, f: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>, flush: bool) -> Flow {
        let flush = flush || !self.more_buffered.load(Ordering::Relaxed);
        let mut out = lock(&self.out);
        let result = f(&mut out).and_then(|()| if flush { out.flush() } else { Ok(()) });
        self.unflushed.store(!flush, Ordering::Release);
        drop(out);
        match result {
            Ok(()) => Flow::Continue,
            Err(e) => {
                // The client can no longer read answers: stop reading too.
                self.finish(StopReason::EndOfInput, Some(e));
                Flow::Finished
            }
        }
    }
}

fn not_initialized_message(method: &str) -> String {
    format!("server not initialized: send \"initialize\" before \"{method}\"")
}
