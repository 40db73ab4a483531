//! The MCP client side of one server link, over the server's stdio (or a remote server's
//! HTTP, which [`super::remote`] turns into the same lines), on mcpserver's own
//! framing and JSON-RPC types ([`mcpserver::wire`]): requests from any thread, each
//! waiting for its answer by id with a deadline and the caller's cancellation (both sent
//! upstream as `notifications/cancelled`); one reader thread that routes answers, answers
//! the server's own `ping`, and hands `notifications/tools/list_changed` on. When the
//! server's output ends, every request still waiting fails at once with why.
//!
//! Both eras ([`Era`], told by [`super::era`]): the handshake era's `initialize`, and
//! revision 2026-07-28's `_meta` on every request, `resultType` read from every result,
//! and `subscriptions/listen` for list changes (only those of awf's subscription count).

use super::era::{self, Era};
use mcpserver::RequestId;
use mcpserver::wire::{self, Frame, Incoming};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The longest line read from a server: a bigger answer fails its request (results are
/// bounded further, to what the agent gets, once read).
pub const MAX_LINE: usize = 64 << 20;

/// The revision asked for; the server answers with the one it speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";

/// Revisions whose `initialize` answers are accepted.
pub const KNOWN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The `_meta` key of a subscription's notifications.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The server answered with a JSON-RPC error (its `data`, when it has one).
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// No answer before the deadline (the request was cancelled upstream).
    TimedOut(Duration),
    /// The caller cancelled (and so was the request upstream).
    Cancelled,
    /// The link is down: the server's output ended or could not be written (why).
    Gone(String),
    /// The answer is not what the protocol says (why).
    Malformed(String),
    /// No revision in common with the server (why).
    Era(String),
    /// A 2026-07-28 server asked for input before it would finish (what it asked for):
    /// a multi round-trip request, which awf does not answer.
    InputRequired(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rpc { code, message, .. } => write!(f, "error {code}: {message}"),
            Failure::TimedOut(d) => write!(f, "no answer within {} s", d.as_secs_f64()),
            Failure::Cancelled => f.write_str("cancelled"),
            Failure::Gone(why) | Failure::Era(why) => f.write_str(why),
            Failure::Malformed(why) => write!(f, "a malformed answer: {why}"),
            Failure::InputRequired(what) => write!(f, "it asked for input first: {what}"),
        }
    }
}

/// What a client writes its messages to and reads the server's from, a line each: a
/// server process's stdin and stdout, or a remote server's link.
pub type Pipes = (Box<dyn Write + Send>, Box<dyn Read + Send>);

/// An answer, or why there is none.
pub type Answer = Result<Value, Failure>;

struct Shared {
    writer: Mutex<Option<Box<dyn Write + Send>>>,
    pending: Mutex<HashMap<i64, mpsc::Sender<Answer>>>,
    /// Set once the link is down, with why.
    down: Mutex<Option<String>>,
    /// The id of awf's open `subscriptions/listen`, while it is open.
    listen: Mutex<Option<i64>>,
}

/// A request sent and not answered yet.
pub struct Pending {
    id: i64,
    rx: mpsc::Receiver<Answer>,
}

/// One link to a server.
pub struct Client {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    /// The era, once told; requests before it go as they are written.
    era: OnceLock<Era>,
    /// The server's `initialize` result, or its discovery result.
    pub server_info: Mutex<Value>,
}

/// `initialize`'s params: the handshake awf has always sent.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "awf", "version": env!("CARGO_PKG_VERSION")},
    })
}

impl Client {
    /// Starts the reader over `stdout` (the server's answers, a line each); `stdin` takes
    /// the requests. `list_changed` runs (on the reader thread) for each
    /// `notifications/tools/list_changed`, `log` for each `notifications/message`.
    pub fn new(
        name: &str,
        stdin: Box<dyn Write + Send>,
        stdout: Box<dyn Read + Send>,
        list_changed: Box<dyn Fn() + Send>,
        log: Box<dyn Fn(&Value) + Send>,
    ) -> Client {
        let shared = Arc::new(Shared {
            writer: Mutex::new(Some(stdin)),
            pending: Mutex::new(HashMap::new()),
            down: Mutex::new(None),
            listen: Mutex::new(None),
        });
        let reader = shared.clone();
        let server = name.to_string();
        let _ = std::thread::Builder::new()
            .name(format!("awf-server-{name}"))
            .spawn(move || read_loop(stdout, &reader, &server, &*list_changed, &*log));
        Client {
            shared,
            next_id: AtomicI64::new(0),
            era: OnceLock::new(),
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

    /// The era its requests are written in, once told.
    pub fn era(&self) -> Option<Era> {
        self.era.get().copied()
    }

    pub(super) fn set_era(&self, era: Era) {
        let _ = self.era.set(era);
    }

    pub(super) fn set_server_info(&self, info: Value) {
        *self.server_info.lock().unwrap_or_else(|e| e.into_inner()) = info;
    }

    /// `initialize`, then `notifications/initialized`; the revision it answered with.
    pub fn initialize(&self, deadline: Instant) -> Result<String, Failure> {
        let result = self.request("initialize", Some(initialize_params()), deadline, &|| false)?;
        self.finish_initialize(result)
    }

    /// After `initialize`'s `result`: its revision checked, `notifications/initialized`
    /// sent, the handshake era set.
    pub fn finish_initialize(&self, result: Value) -> Result<String, Failure> {
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !KNOWN_VERSIONS.contains(&version.as_str()) {
            return Err(Failure::Malformed(format!(
                "it answered initialize with protocolVersion {version:?}; awf speaks {}",
                KNOWN_VERSIONS.join(", ")
            )));
        }
        self.set_server_info(result);
        self.set_era(Era::Handshake);
        self.notify("notifications/initialized", None)?;
        Ok(version)
    }

    /// Opens awf's `subscriptions/listen` for tool list changes (2026-07-28: a server
    /// tells its changes only to a client that listens). Not waited for: its
    /// acknowledgement and the changes come as notifications tagged with its id.
    pub fn listen(&self) -> Result<(), Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let params = json!({"notifications": {"toolsListChanged": true}, "_meta": era::meta()});
        let mut line = Vec::new();
        wire::write_request(
            &mut line,
            &RequestId::Number(id),
            "subscriptions/listen",
            Some(&params),
        )
        .map_err(|e| Failure::Malformed(format!("cannot encode the request: {e}")))?;
        *self.shared.listen.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
        self.send(&line).map_err(Failure::Gone)
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

    /// A request in the server's era (2026-07-28: `_meta` added, `resultType` read);
    /// waits for its answer until `deadline` or until `cancelled()` (checked every
    /// 20 ms), and tells the server when it gives up.
    pub fn request(
        &self,
        method: &str,
        params: Option<Value>,
        deadline: Instant,
        cancelled: &dyn Fn() -> bool,
    ) -> Answer {
        let stateless = self.era() == Some(Era::Stateless);
        let params = if stateless {
            let mut p = match params {
                Some(Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            p.insert("_meta".into(), era::meta());
            Some(Value::Object(p))
        } else {
            params
        };
        let pending = self.start(method, params)?;
        let started = Instant::now();
        loop {
            if Instant::now() >= deadline {
                self.abandon(&pending, Some("the call's deadline passed"));
                return Err(Failure::TimedOut(started.elapsed()));
            }
            if cancelled() {
                self.abandon(&pending, Some("the client cancelled the call"));
                return Err(Failure::Cancelled);
            }
            let step = deadline.min(Instant::now() + Duration::from_millis(20));
            if let Some(answer) = self.answer_by(&pending, step) {
                return match answer {
                    Ok(result) if stateless => complete(method, result),
                    other => other,
                };
            }
        }
    }

    /// Sends a request as it is; its answer is waited for with [`Client::answer_by`].
    pub fn start(&self, method: &str, params: Option<Value>) -> Result<Pending, Failure> {
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
        if let Err(e) =
            wire::write_request(&mut line, &RequestId::Number(id), method, params.as_ref())
        {
            self.forget(id);
            return Err(Failure::Malformed(format!(
                "cannot encode the request: {e}"
            )));
        }
        if let Err(why) = self.send(&line) {
            self.forget(id);
            return Err(Failure::Gone(why));
        }
        Ok(Pending { id, rx })
    }

    /// The answer to `pending` if it comes by `until` (at once when `until` has passed);
    /// `None` leaves it waiting.
    pub fn answer_by(&self, pending: &Pending, until: Instant) -> Option<Answer> {
        let wait = until.saturating_duration_since(Instant::now());
        match pending.rx.recv_timeout(wait) {
            Ok(answer) => Some(answer),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Err(Failure::Gone(
                self.down().unwrap_or_else(|| "the link closed".into()),
            ))),
        }
    }

    /// Stops waiting for `pending`; with a reason, the server is told to stop too.
    pub fn abandon(&self, pending: &Pending, cancel: Option<&str>) {
        self.forget(pending.id);
        if let Some(reason) = cancel {
            self.cancel_upstream(pending.id, reason);
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
        // awf's subscription ends as 2026-07-28 ends one: cancelled by its id.
        let listen = self
            .shared
            .listen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(id) = listen {
            self.cancel_upstream(id, "awf is done with the server");
        }
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

/// A 2026-07-28 result as its `resultType` says: `complete` (or absent, as the revision
/// asks of a client) is the result; `input_required` is what the server asked for.
fn complete(method: &str, result: Value) -> Answer {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(result),
        Some("input_required") if method == "tools/call" => {
            Err(Failure::InputRequired(era::asked_for(&result)))
        }
        Some(other) => Err(Failure::Malformed(format!(
            "its {method} result has resultType {other:?}, which awf does not take there"
        ))),
    }
}

fn read_loop(
    stdout: Box<dyn Read + Send>,
    shared: &Shared,
    server: &str,
    list_changed: &dyn Fn(),
    log: &dyn Fn(&Value),
) {
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
                    if !listen_ended(shared, server, &id, &answer) {
                        deliver(shared, &id, answer);
                    }
                }
                Incoming::ErrorResponse {
                    id,
                    code,
                    message,
                    data,
                } => match id {
                    Some(id) => {
                        let data = data.and_then(|d| serde_json::from_str(d.get()).ok());
                        let answer = Err(Failure::Rpc {
                            code,
                            message,
                            data,
                        });
                        if !listen_ended(shared, server, &id, &answer) {
                            deliver(shared, &id, answer);
                        }
                    }
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
                    "notifications/tools/list_changed" if ours(shared, params.map(|p| p.get())) => {
                        list_changed();
                    }
                    "notifications/subscriptions/acknowledged" => {
                        acknowledged(shared, server, params.map(|p| p.get()));
                    }
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

/// The `io.modelcontextprotocol/subscriptionId` a notification is tagged with.
fn subscription(params: Option<&str>) -> Option<Value> {
    let params = serde_json::from_str::<Value>(params?).ok()?;
    params.get("_meta")?.get(SUBSCRIPTION_ID).cloned()
}

/// Whether a notification belongs to awf: untagged (the handshake era's), or tagged with
/// the id of awf's subscription (2026-07-28 tags each with the `subscriptions/listen` it
/// answers; another's is not awf's).
fn ours(shared: &Shared, params: Option<&str>) -> bool {
    match subscription(params) {
        None => true,
        Some(tag) => {
            let listen = *shared.listen.lock().unwrap_or_else(|e| e.into_inner());
            listen.is_some_and(|id| tag.as_i64() == Some(id))
        }
    }
}

/// `notifications/subscriptions/acknowledged` of awf's subscription: said in the log
/// when it leaves tool list changes out (changes during the run then go unseen).
fn acknowledged(shared: &Shared, server: &str, params: Option<&str>) {
    if subscription(params).is_none() || !ours(shared, params) {
        return;
    }
    let honoured = params
        .and_then(|p| serde_json::from_str::<Value>(p).ok())
        .and_then(|p| p.get("notifications")?.get("toolsListChanged")?.as_bool())
        == Some(true);
    if honoured {
        tracing::debug!(server = %server, "the server tells awf of tool list changes");
    } else {
        tracing::info!(
            server = %server,
            "server {server} does not tell of tool list changes (its subscription leaves them \
             out): a tool it changes during the run is seen at its next start"
        );
    }
}

/// An answer to awf's `subscriptions/listen` (the server ended it, or refused it): said,
/// and the subscription forgotten. False for any other answer.
fn listen_ended(shared: &Shared, server: &str, id: &RequestId, answer: &Answer) -> bool {
    let mut listen = shared.listen.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!((*listen, id), (Some(l), RequestId::Number(n)) if l == *n) {
        return false;
    }
    *listen = None;
    match answer {
        Ok(_) => tracing::info!(
            server = %server,
            "server {server} ended awf's subscription to its tool list changes"
        ),
        Err(why) => tracing::info!(
            server = %server,
            "server {server} refused a subscription to its tool list changes ({why}): a tool \
             it changes during the run is seen at its next start"
        ),
    }
    true
}
