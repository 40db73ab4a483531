//! The MCP client side of one server link, over the server's stdio, on mcpserver's own
//! framing and JSON-RPC types ([`mcpserver::wire`]): requests from any thread, each
//! waiting for its answer by id with a deadline and the caller's cancellation (both sent
//! upstream as `notifications/cancelled`); one reader thread that routes answers, answers
//! the server's own `ping`, and hands `notifications/tools/list_changed` on. When the
//! server's output ends, every request still waiting fails at once with why.

use mcpserver::RequestId;
use mcpserver::wire::{self, Frame, Incoming};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::process::{ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The longest line read from a server: a bigger answer fails its request (results are
/// bounded further, to what the agent gets, once read).
pub const MAX_LINE: usize = 64 << 20;

/// The revision asked for; the server answers with the one it speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Revisions whose `initialize` answers are accepted.
const KNOWN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The server answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// No answer before the deadline (the request was cancelled upstream).
    TimedOut(Duration),
    /// The caller cancelled (and so was the request upstream).
    Cancelled,
    /// The link is down: the server's output ended or could not be written (why).
    Gone(String),
    /// The answer is not what the protocol says (why).
    Malformed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rpc { code, message } => write!(f, "error {code}: {message}"),
            Failure::TimedOut(d) => write!(f, "no answer within {} s", d.as_secs_f64()),
            Failure::Cancelled => f.write_str("cancelled"),
            Failure::Gone(why) => f.write_str(why),
            Failure::Malformed(why) => write!(f, "a malformed answer: {why}"),
        }
    }
}

type Answer = Result<Value, Failure>;

struct Shared {
    writer: Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<i64, mpsc::Sender<Answer>>>,
    /// Set once the link is down, with why.
    down: Mutex<Option<String>>,
}

/// One link to a server.
pub struct Client {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    /// The server's `initialize` result (after [`Client::initialize`]).
    pub server_info: Mutex<Value>,
}

impl Client {
    /// Starts the reader over `stdout`; `list_changed` runs (on the reader thread) for
    /// each `notifications/tools/list_changed`, `log` for each `notifications/message`.
    pub fn new(
        name: &str,
        stdin: ChildStdin,
        stdout: ChildStdout,
        list_changed: Box<dyn Fn() + Send>,
        log: Box<dyn Fn(&Value) + Send>,
    ) -> Client {
        let shared = Arc::new(Shared {
            writer: Mutex::new(Some(stdin)),
            pending: Mutex::new(HashMap::new()),
            down: Mutex::new(None),
        });
        let reader = shared.clone();
        let _ = std::thread::Builder::new()
            .name(format!("awf-server-{name}"))
            .spawn(move || read_loop(stdout, &reader, &*list_changed, &*log));
        Client {
            shared,
            next_id: AtomicI64::new(0),
            server_info: Mutex::new(Value::Null),
        }
    }

    /// Why the link is down, once it is.
    pub fn down(&self) -> Option<String> {
        self.shared
            .down
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `initialize`, then `notifications/initialized`.
    pub fn initialize(&self, deadline: Instant) -> Result<(), Failure> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "awf", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self.request("initialize", Some(params), deadline, &|| false)?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !KNOWN_VERSIONS.contains(&version) {
            return Err(Failure::Malformed(format!(
                "it answered initialize with protocolVersion {version:?}; awf speaks {}",
                KNOWN_VERSIONS.join(", ")
            )));
        }
        *self.server_info.lock().unwrap_or_else(|e| e.into_inner()) = result;
        self.notify("notifications/initialized", None)
    }

    /// Every tool of `tools/list`, page by page (at most 100 pages).
    pub fn list_tools(&self, deadline: Instant) -> Result<Vec<Value>, Failure> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
            let page = self.request("tools/list", params, deadline, &|| false)?;
            let Some(items) = page.get("tools").and_then(Value::as_array) else {
                return Err(Failure::Malformed(
                    "its tools/list result has no \"tools\" array".into(),
                ));
            };
            tools.extend(items.iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
                _ => return Ok(tools),
            }
        }
        Err(Failure::Malformed(
            "its tools/list went on for more than 100 pages".into(),
        ))
    }

    /// A request; waits for its answer until `deadline` or until `cancelled()` (checked
    /// every 20 ms), and tells the server when it gives up.
    pub fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel();
        {
            // Registered before the line goes out: the answer may come at once.
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(why) = self.down() {
                return Err(Failure::Gone(why));
            }
            pending.insert(id, tx);
        }
        let mut line = Vec::new();
        wire::write_request(&mut line, &RequestId::Number(id), method, params.as_ref())
            .map_err(|e| Failure::Malformed(format!("cannot encode the request: {e}")))?;
        if let Err(why) = self.send(&line) {
            self.forget(id);
            return Err(Failure::Gone(why));
        }
        let started = Instant::now();
        loop {
            let now = Instant::now();
            if now >= deadline {
                self.forget(id);
                self.cancel_upstream(id, "the call's deadline passed");
                return Err(Failure::TimedOut(started.elapsed()));
            }
            if cancelled() {
                self.forget(id);
                self.cancel_upstream(id, "the client cancelled the call");
                return Err(Failure::Cancelled);
            }
            match rx.recv_timeout((deadline - now).min(Duration::from_millis(20))) {
                Ok(answer) => return answer,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Failure::Gone(
                        self.down().unwrap_or_else(|| "the link closed".into()),
                    ));
                }
            }
        }
    }

    /// A notification to the server.
    pub fn notify(&self, method: &str, params: Option<Value>) -> Result<(), Failure> {
        let mut line = Vec::new();
        wire::write_notification(&mut line, method, params.as_ref())
            .map_err(|e| Failure::Malformed(format!("cannot encode the notification: {e}")))?;
        self.send(&line).map_err(Failure::Gone)
    }

    /// Closes the server's input (a server ends at end of input).
    pub fn close(&self) {
        self.shared
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    fn send(&self, line: &[u8]) -> Result<(), String> {
        let mut writer = self.shared.writer.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = writer.as_mut() else {
            return Err("its input is closed".into());
        };
        w.write_all(line)
            .and_then(|()| w.flush())
            .map_err(|e| format!("cannot write to its input: {e}"))
    }

    fn forget(&self, id: i64) {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    fn cancel_upstream(&self, id: i64, reason: &str) {
        let _ = self.notify(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
    }
}

fn read_loop(stdout: ChildStdout, shared: &Shared, list_changed: &dyn Fn(), log: &dyn Fn(&Value)) {
    let mut reader = wire::LineReader::new(stdout, MAX_LINE);
    let why = loop {
        let frame = match reader.next_frame(&mut || Ok(())) {
            Ok(f) => f,
            Err(e) => break format!("cannot read its output: {e}"),
        };
        match frame {
            Frame::Eof => break "its output ended (the server exited or closed it)".into(),
            Frame::TooLong => {
                // Which request it answered cannot be told: fail those waiting.
                let waiting: Vec<_> = shared
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .drain()
                    .collect();
                for (_, tx) in waiting {
                    let _ = tx.send(Err(Failure::Malformed(format!(
                        "it sent a message over {} MiB, which was skipped",
                        MAX_LINE >> 20
                    ))));
                }
            }
            Frame::Line(line) => match wire::classify_incoming(line) {
                Incoming::Response { id, result } => {
                    let answer = serde_json::from_str::<Value>(result.get())
                        .map_err(|e| Failure::Malformed(e.to_string()));
                    deliver(shared, &id, answer);
                }
                Incoming::ErrorResponse {
                    id, code, message, ..
                } => match id {
                    Some(id) => deliver(shared, &id, Err(Failure::Rpc { code, message })),
                    None => {
                        tracing::warn!(code, %message, "the server sent an error without an id")
                    }
                },
                Incoming::Request { id, method, .. } => {
                    let mut out = Vec::new();
                    let written = if method == "ping" {
                        wire::write_result(&mut out, &id, &json!({}))
                    } else {
                        wire::write_error(
                            &mut out,
                            Some(&id),
                            mcpserver::codes::METHOD_NOT_FOUND,
                            &format!("awf does not offer {method:?} to the servers it proxies"),
                        )
                    };
                    if written.is_ok() {
                        let mut w = shared.writer.lock().unwrap_or_else(|e| e.into_inner());
                        if let Some(w) = w.as_mut() {
                            let _ = w.write_all(&out).and_then(|()| w.flush());
                        }
                    }
                }
                Incoming::Notification { method, params } => match &*method {
                    "notifications/tools/list_changed" => list_changed(),
                    "notifications/message" => {
                        let params = params
                            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                            .unwrap_or(Value::Null);
                        log(&params);
                    }
                    _ => {}
                },
                Incoming::Invalid(why) => {
                    tracing::debug!(%why, "the server wrote a line that is not JSON-RPC")
                }
            },
        }
    };
    // Down first, under the pending lock: a request registered after this sees it.
    let waiting: Vec<_> = {
        let mut pending = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        *shared.down.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
        pending.drain().collect()
    };
    for (_, tx) in waiting {
        let _ = tx.send(Err(Failure::Gone(why.clone())));
    }
}

fn deliver(shared: &Shared, id: &RequestId, answer: Answer) {
    let RequestId::Number(n) = id else { return };
    let tx = shared
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(n);
    if let Some(tx) = tx {
        let _ = tx.send(answer);
    }
}
