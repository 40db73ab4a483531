//! The model relay: one local HTTP server per run (127.0.0.1, started with the first CLI
//! agent step) between each agent CLI and its model endpoint. A step gets a `Lease`: a
//! route `/s/<id>/` that its CLI's base URL points at, and, when the workflow names a key
//! (`api_key_env`), a placeholder key that only this route accepts. The relay forwards each
//! request to the real endpoint (the step's `base_url`, else the provider's), over HTTPS
//! where the endpoint is, with the real key in the header the provider's API expects; the
//! CLI never holds the key. The response streams back as it arrives (event by event), while
//! [`usage`] reads the model, the tokens and the finish reasons out of it: each request is
//! a `chat <model>` span under the step's span and a `model.request` + `model.response`
//! pair in the step's audit file, and counts toward the step's budget. The status of an
//! error answer and the wait its `Retry-After` asks are kept in the step's figures
//! ([`ModelStats`]): what an agent's `retry` classes a failure by.
//!
//! A request is judged by its head before any of its body is read: a route no step has
//! (404), a key that is not the step's placeholder (401) or a body over 32 MiB
//! (413) is answered at once and its body read and dropped, never held. A body let
//! through streams upstream as the upstream reads it; the model it names is seen in
//! passing. One thread reads every head (`accept`); only a request let through gets one.

mod accept;
mod body;
mod routes;
pub mod usage;
mod workers;

use crate::telemetry::audit::{AuditLog, now_rfc3339};
use crate::telemetry::otel::{OtelExporter, parse_traceparent};
use body::UpstreamBody;
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use usage::{UsageReader, Wire};

/// The largest request head the relay reads.
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body the relay passes on: the most the providers' model endpoints
/// take (Anthropic's Messages API refuses a request over 32 MB; Gemini's and OpenAI's
/// inline limits are lower), so a bigger body could only be refused upstream. The body
/// streams through; this bounds what one request may send, not what the relay holds.
const MAX_BODY: u64 = 32 * 1024 * 1024;
/// How long a refused request's remaining bytes are read and dropped before the close.
const LINGER: Duration = Duration::from_secs(2);

/// The relay's bounds on its clients.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// The time a connection has to send its whole request head.
    head_deadline: Duration,
    /// Connections waiting for their head (or answered, their rest being dropped) at
    /// once: under the 1,024 descriptors a process commonly may open.
    open: usize,
    /// Requests in flight on one step's route: far more than an agent CLI runs at once
    /// (its subagents included); each is a thread.
    per_route: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_deadline: Duration::from_secs(10),
            open: 512,
            per_route: 32,
        }
    }
}

/// How a provider's API takes its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `x-api-key: KEY` (Anthropic).
    XApiKey,
    /// `Authorization: Bearer KEY` (OpenAI and compatible).
    Bearer,
    /// `x-goog-api-key: KEY` (Gemini; a `key=` query parameter is taken too).
    Goog,
}

/// What a step's lease is made of.
pub struct LeaseSpec {
    /// The real endpoint's base URL (no trailing slash): the CLI's paths are appended.
    pub upstream: String,
    /// The real key and how to send it; None: the CLI's own credentials pass through.
    pub key: Option<(KeyHeader, String)>,
    /// `gen_ai.provider.name` of the chat spans.
    pub provider: &'static str,
    /// The step span's context: chat spans are its children.
    pub traceparent: Option<String>,
    /// The step's audit file, when it has one.
    pub audit: Option<std::path::PathBuf>,
    pub budget: Budget,
    /// Record the prompt and the answer on the chat spans (`telemetry: {model_content:
    /// true}`), masked and cut to [`CONTENT_BYTES`]; off by default.
    pub model_content: bool,
}

/// The most of a prompt or an answer a chat span holds when content is recorded.
pub const CONTENT_BYTES: usize = 64 * 1024;

/// A step's limits on the model (`budget:` of the agent state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub requests: Option<u64>,
    pub tokens: Option<u64>,
}

impl Budget {
    /// What is left once `used` is spent (a limit it has not: none).
    pub fn less(self, used: &ModelStats) -> Budget {
        Budget {
            requests: self.requests.map(|n| n.saturating_sub(used.requests)),
            tokens: self.tokens.map(|n| n.saturating_sub(used.tokens())),
        }
    }

    /// The limit with nothing left, if one has: "requests" or "tokens".
    pub fn spent(self) -> Option<&'static str> {
        if self.requests == Some(0) {
            Some("requests")
        } else if self.tokens == Some(0) {
            Some("tokens")
        } else {
            None
        }
    }
}

/// What a step's model requests came to.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ModelStats {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// Time from each request to the end of its answer, summed.
    pub model_ms: u64,
    /// The limit the step ran into, when it did: "requests" or "tokens".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_exhausted: Option<&'static str>,
    /// The HTTP status of the latest model answer that was an error (400 and above), the
    /// relay's own 502 when it could not reach the endpoint included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error_status: Option<u16>,
    /// The wait that answer asked for (`retry-after-ms`, else `retry-after` in seconds),
    /// in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Whether the latest model answer was that error (a later success clears it): what
    /// an agent's `retry` classes its failure by. Not reported.
    #[serde(skip)]
    pub last_answer_failed: bool,
}

impl ModelStats {
    /// The tokens the budget counts: input and output.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds the figures of a later lease of the same state (another attempt): counts
    /// summed, the latest error and limit those of `later` when it has them.
    pub fn add(&mut self, later: &ModelStats) {
        self.requests += later.requests;
        self.input_tokens += later.input_tokens;
        self.output_tokens += later.output_tokens;
        self.cache_read_tokens += later.cache_read_tokens;
        self.model_ms += later.model_ms;
        if later.budget_exhausted.is_some() {
            self.budget_exhausted = later.budget_exhausted;
        }
        if later.last_error_status.is_some() {
            self.last_error_status = later.last_error_status;
            self.retry_after_ms = later.retry_after_ms;
        }
        if later.requests > 0 || later.last_error_status.is_some() {
            self.last_answer_failed = later.last_answer_failed;
        }
    }
}

struct Lease {
    placeholder: Option<String>,
    spec: LeaseSpec,
    /// Masks secrets in recorded content (awf's secret-looking variables, key shapes).
    masker: Option<crate::telemetry::audit::Masker>,
    audit: Option<AuditLog>,
    books: Mutex<Books>,
    refused: AtomicBool,
    /// Requests in flight on this route, each on its thread.
    active: AtomicUsize,
    per_route: usize,
}

/// The run's relay.
pub struct Relay {
    addr: SocketAddr,
    limits: Limits,
    leases: Arc<Mutex<HashMap<String, Arc<Lease>>>>,
}

/// A step's route through the relay; ends when dropped.
pub struct LeaseHandle {
    id: String,
    lease: Arc<Lease>,
    leases: Arc<Mutex<HashMap<String, Arc<Lease>>>>,
    base_url: String,
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut buf);
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

impl Relay {
    /// Listens on a free port of 127.0.0.1; `exporter` takes the chat spans.
    pub fn start(exporter: Option<Arc<OtelExporter>>) -> io::Result<Relay> {
        Relay::start_with(exporter, Limits::default())
    }

    fn start_with(exporter: Option<Arc<OtelExporter>>, limits: Limits) -> io::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let leases: Arc<Mutex<HashMap<String, Arc<Lease>>>> = Arc::default();
        let routes = leases.clone();
        let exporter = Arc::new(exporter);
        std::thread::Builder::new()
            .name("awf-relay".into())
            .spawn(move || accept::run(listener, routes, exporter, limits))?;
        Ok(Relay {
            addr,
            limits,
            leases,
        })
    }

    /// Opens a step's route.
    pub fn lease(&self, spec: LeaseSpec) -> io::Result<LeaseHandle> {
        let id = random_hex(16);
        let audit = match &spec.audit {
            Some(p) => Some(AuditLog::open(p)?),
            None => None,
        };
        let placeholder = spec
            .key
            .is_some()
            .then(|| format!("awf-relay-{}", random_hex(24)));
        let masker = spec
            .model_content
            .then(|| crate::telemetry::audit::Masker::from_env(CONTENT_BYTES));
        let lease = Arc::new(Lease {
            placeholder,
            masker,
            spec,
            audit,
            books: Mutex::default(),
            refused: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            per_route: self.limits.per_route,
        });
        self.leases
            .lock()
            .unwrap()
            .insert(id.clone(), lease.clone());
        Ok(LeaseHandle {
            base_url: format!("http://{}/s/{id}", self.addr),
            id,
            lease,
            leases: self.leases.clone(),
        })
    }
}

impl LeaseHandle {
    /// The base URL the step's CLI is given (the provider's own path goes after it).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The key the CLI is given in place of the real one, when a key is configured.
    pub fn placeholder(&self) -> Option<&str> {
        self.lease.placeholder.as_deref()
    }

    pub fn stats(&self) -> ModelStats {
        self.lease.books.lock().unwrap().stats.clone()
    }
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        self.leases.lock().unwrap().remove(&self.id);
    }
}

/// A request's head from a CLI, checked before any of its body is read.
struct Head {
    method: String,
    /// The path after `/s/<id>`, with its query.
    rest: String,
    /// Names lowercase.
    headers: Vec<(String, String)>,
    /// The body's length (Content-Length; 0 without one).
    len: u64,
    /// The bytes of the body that came with the head.
    early: Vec<u8>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A request head as it came, before it is checked.
struct RawHead {
    method: String,
    target: String,
    /// Names lowercase.
    headers: Vec<(String, String)>,
    /// The bytes of the body that came with the head.
    early: Vec<u8>,
}

/// The head in `buf` once it is whole.
fn parse_head(buf: &[u8]) -> Result<Option<RawHead>, (u16, String)> {
    let mut hs = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut hs);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            Ok(Some(RawHead {
                method: req.method.unwrap_or("GET").to_string(),
                target: req.path.unwrap_or("/").to_string(),
                headers,
                early: buf[len..].to_vec(),
            }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            Err((431, "the request has more than 128 header fields".into()))
        }
        Err(e) => Err((400, format!("not an HTTP request: {e}"))),
    }
}

/// What the head says is let through: the step's lease and the request, or the answer
/// that refuses it. Nothing of the body has been read yet.
fn admit(
    raw: RawHead,
    routes: &Mutex<HashMap<String, Arc<Lease>>>,
) -> Result<(Arc<Lease>, Head), (u16, Value)> {
    let RawHead {
        method,
        target,
        headers,
        early,
    } = raw;
    let plain = |why: String| json!({"error": {"message": format!("awf relay: {why}")}});
    let Some(after) = target.strip_prefix("/s/") else {
        return Err((404, plain(format!("{target} is not a step's route"))));
    };
    let (id, rest) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let Some(lease) = routes.lock().unwrap().get(id).cloned() else {
        return Err((
            404,
            plain("no step has this route (the step ended?)".into()),
        ));
    };
    let mut head = Head {
        method,
        rest: if rest.starts_with('/') || rest.is_empty() {
            rest.to_string()
        } else {
            format!("/{rest}")
        },
        headers,
        len: 0,
        early,
    };
    let provider = lease.spec.provider;
    let refuse = |status: u16, kind: &str, why: String| {
        (
            status,
            provider_error(provider, status, kind, &format!("awf relay: {why}")),
        )
    };
    if let Some(p) = &lease.placeholder
        && !sent_key(&head).is_some_and(|k| same(&k, p))
    {
        return Err(refuse(
            401,
            "authentication_error",
            "this key is not the step's; the relay takes only the key awf gave the step".into(),
        ));
    }
    if head.header("transfer-encoding").is_some() {
        return Err(refuse(
            411,
            "invalid_request_error",
            "send the request with a Content-Length".into(),
        ));
    }
    head.len = match head
        .header("content-length")
        .map(|v| v.trim().parse::<u64>())
    {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return Err(refuse(
                400,
                "invalid_request_error",
                "a bad Content-Length".into(),
            ));
        }
    };
    if head.len > MAX_BODY {
        return Err(refuse(
            413,
            "request_too_large",
            format!(
                "the request body is {} bytes, over the {} MiB a model request may be",
                head.len,
                MAX_BODY >> 20
            ),
        ));
    }
    Ok((lease, head))
}

fn reply(mut conn: &TcpStream, status: u16, body: &Value) {
    let text = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        reason(status),
        text.len()
    );
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "",
    }
}

/// An error in the shape the provider's own API uses, so the CLI reports it as such.
fn provider_error(provider: &str, status: u16, kind: &str, message: &str) -> Value {
    match provider {
        "anthropic" => json!({"type": "error", "error": {"type": kind, "message": message}}),
        "gcp.gemini" => json!({"error": {"code": status, "message": message, "status": kind}}),
        _ => json!({"error": {"message": message, "type": kind, "code": kind}}),
    }
}

/// Whether two keys are equal, in a time that does not tell how much of them matched.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The key the CLI sent, in whichever form its provider takes.
fn sent_key(req: &Head) -> Option<String> {
    let header = |name: &str| req.header(name).map(|v| v.trim().to_string());
    header("x-api-key")
        .or_else(|| {
            header("authorization").and_then(|v| v.strip_prefix("Bearer ").map(String::from))
        })
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| {
            let query = req.rest.split_once('?')?.1;
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix("key=").map(String::from))
        })
}

/// The path and query for upstream: a `key=` parameter (the placeholder) dropped.
fn upstream_path(rest: &str) -> String {
    let Some((path, query)) = rest.split_once('?') else {
        return rest.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("key="))
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// Headers never forwarded: hop-by-hop ones, the framing (the relay frames anew), the
/// encoding (the answer comes back as it is, readable), and every form of key.
const DROPPED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "accept-encoding",
];
const KEY_HEADERS: &[&str] = &["x-api-key", "authorization", "x-goog-api-key"];

/// A request let through by its head, with what it holds: its claim on the budget and
/// its place among the route's requests in flight.
struct Admitted {
    lease: Arc<Lease>,
    head: Head,
    wire: Option<(Wire, Option<String>)>,
    claim: Option<Claim>,
    slot: Slot,
}

/// A place among a route's requests in flight, given back when dropped.
struct Slot(Arc<Lease>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Everything the relay decides from a request's head, before any of its body is read:
/// the route, the key, the size, the path's cost, the route's requests in flight, the
/// budget. A refusal is the status and the body to answer.
fn judge(
    raw: RawHead,
    routes: &Mutex<HashMap<String, Arc<Lease>>>,
) -> Result<Admitted, (u16, Value)> {
    let (lease, head) = admit(raw, routes)?;
    let provider = lease.spec.provider;
    let path = head.rest.split('?').next().unwrap_or("").to_string();
    let wire = match routes::route(provider, &head.rest) {
        routes::Route::Billable(w, m) => Some((w, m)),
        // A token count or a model list passes quietly.
        routes::Route::Free => None,
        routes::Route::Unlisted if lease.spec.budget == Budget::default() => {
            lease.note(json!({"type": "model.unlisted", "method": head.method, "path": path}));
            None
        }
        routes::Route::Unlisted => {
            let (billable, free) = routes::listed(provider);
            let message = format!(
                "awf relay: {} {path} is not a path whose cost the relay can count, so with \
                 a model budget set it is not sent; the step's budget lets through model \
                 turns ({billable}) and free calls ({free})",
                head.method
            );
            lease.note(
                json!({"type": "model.refused", "method": head.method, "path": path,
                              "reason": message}),
            );
            return Err((
                403,
                provider_error(provider, 403, "permission_error", &message),
            ));
        }
    };
    // Only this thread lets requests in, so the count cannot pass the cap between the
    // check and the add.
    if lease.active.load(Ordering::SeqCst) >= lease.per_route {
        let message = format!(
            "awf relay: the step already has {} model requests in flight; try again when \
             one has ended",
            lease.per_route
        );
        return Err((
            429,
            provider_error(provider, 429, "rate_limit_error", &message),
        ));
    }
    lease.active.fetch_add(1, Ordering::SeqCst);
    let slot = Slot(lease.clone());
    // Only model turns count and are seen.
    let claim = match wire {
        None => None,
        Some(_) => match lease.claim(head.len) {
            Ok(c) => Some(c),
            Err(limit) => {
                lease.refused.store(true, Ordering::SeqCst);
                lease.books.lock().unwrap().stats.budget_exhausted = Some(limit);
                let message = format!(
                    "awf: the step's model budget is spent ({limit}: {}); no further request \
                     is sent",
                    match limit {
                        "requests" => lease.spec.budget.requests.unwrap_or(0),
                        _ => lease.spec.budget.tokens.unwrap_or(0),
                    }
                );
                return Err((
                    400,
                    provider_error(provider, 400, "invalid_request_error", &message),
                ));
            }
        },
    };
    Ok(Admitted {
        lease,
        head,
        wire,
        claim,
        slot,
    })
}

/// What a step's model requests came to, and what the requests in flight hold of its
/// budget: one budget check and one claim under one lock, so however many requests
/// arrive at once, no more pass than the budget allows.
#[derive(Default)]
struct Books {
    stats: ModelStats,
    /// Model requests let through: those answered and those in flight.
    admitted: u64,
    /// The token estimates of the requests in flight.
    held_tokens: u64,
}

/// A model request's claim on the step's budget, taken when its head is let through: a
/// request, and an estimate of its tokens that its answer's own figure replaces.
struct Claim {
    tokens: u64,
}

/// A request's tokens until its answer tells: its input at 4 bytes a token (the usual
/// rule of thumb for text and code; the JSON around a conversation makes it an
/// overestimate, which errs toward refusing), at least one. Its output cannot be known
/// before it is written, so the last request let through may go over a token budget, by
/// its own answer only.
fn token_estimate(body_len: u64) -> u64 {
    body_len.div_ceil(4).max(1)
}

impl Lease {
    /// Notes the status of a model answer (and the wait it asks for): an error's is the
    /// step's latest error, a success clears `last_answer_failed`.
    fn answered(&self, status: u16, retry_after_ms: Option<u64>) {
        let s = &mut self.books.lock().unwrap().stats;
        s.last_answer_failed = status >= 400;
        if status >= 400 {
            s.last_error_status = Some(status);
            s.retry_after_ms = retry_after_ms;
        }
    }

    /// Appends a record about this step's model traffic to its audit, when it has one.
    fn note(&self, mut record: Value) {
        if let Some(a) = &self.audit {
            record["ts"] = json!(now_rfc3339());
            record["provider"] = json!(self.spec.provider);
            let _ = a.append(&record);
        }
    }

    /// Takes a claim for a model request with a body of `body_len` bytes, or names the
    /// limit it would pass: a request is let through while the requests admitted are
    /// under `requests`, and the tokens used and held under `tokens`.
    fn claim(&self, body_len: u64) -> Result<Claim, &'static str> {
        let mut b = self.books.lock().unwrap();
        let budget = self.spec.budget;
        if budget.requests.is_some_and(|n| b.admitted >= n) {
            return Err("requests");
        }
        let used = b.stats.input_tokens + b.stats.output_tokens;
        if budget.tokens.is_some_and(|n| used + b.held_tokens >= n) {
            return Err("tokens");
        }
        let tokens = token_estimate(body_len);
        b.admitted += 1;
        b.held_tokens += tokens;
        Ok(Claim { tokens })
    }
}

fn forward(
    conn: TcpStream,
    lease: &Lease,
    mut req: Head,
    wire: Option<(Wire, Option<String>)>,
    claim: Option<Claim>,
    exporter: Option<&Arc<OtelExporter>>,
) {
    let url = format!("{}{}", lease.spec.upstream, upstream_path(&req.rest));
    let started = Instant::now();
    let provider = lease.spec.provider;
    let (host, port) = server_of(&lease.spec.upstream);
    let (wire, path_model) = match wire {
        Some((w, m)) => (Some(w), m),
        None => (None, None),
    };
    // The span starts with the request; the model it names is known once its body is
    // sent (the body streams upstream, so it is read only as the upstream takes it).
    let mut span = wire.and(exporter).map(|e| {
        let parent = lease
            .spec
            .traceparent
            .as_deref()
            .and_then(parse_traceparent);
        e.start_span(
            "chat".to_string(),
            SpanKind::Client,
            parent.as_ref(),
            vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", provider),
                KeyValue::new("server.address", host.clone()),
                KeyValue::new("server.port", i64::from(port)),
            ],
        )
    });
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(30)))
        .tls_config(tls_config().clone())
        .build()
        .into();
    let mut builder = ureq::http::Request::builder()
        .method(req.method.as_str())
        .uri(&url);
    for (k, v) in &req.headers {
        if DROPPED.contains(&k.as_str())
            || (lease.placeholder.is_some() && KEY_HEADERS.contains(&k.as_str()))
        {
            continue;
        }
        builder = builder.header(k.as_str(), v.as_str());
    }
    if req.header("content-length").is_some() {
        builder = builder.header("content-length", req.len.to_string());
    }
    if let Some((how, key)) = &lease.spec.key {
        builder = match how {
            KeyHeader::XApiKey => builder.header("x-api-key", key.as_str()),
            KeyHeader::Bearer => builder.header("authorization", format!("Bearer {key}")),
            KeyHeader::Goog => builder.header("x-goog-api-key", key.as_str()),
        };
    }
    // A body that came whole with its head goes up in one write with the head: the
    // time to first byte of a small request is not spent on a second packet.
    let came_whole = req.len <= req.early.len() as u64;
    let mut body = UpstreamBody::new(
        std::mem::take(&mut req.early),
        &conn,
        req.len,
        lease.masker.as_ref().map(|_| CONTENT_BYTES),
    );
    let outcome = if req.len == 0 {
        send(&agent, builder.body(()))
    } else if came_whole {
        let mut bytes = Vec::new();
        let _ = body.read_to_end(&mut bytes);
        send(&agent, builder.body(&bytes[..]))
    } else {
        send(&agent, builder.body(ureq::SendBody::from_reader(&mut body)))
    };
    let sent = body.complete();
    let request_bytes = body.sent;
    let broken = body.broken.take();
    let prefix = body.prefix.take();
    let scanned = std::mem::take(&mut body.scan).model();
    let model = wire.and_then(|w| usage::requested_model(w, path_model, scanned));
    if let Some(span) = span.as_mut() {
        if let Some(m) = &model {
            span.update_name(format!("chat {m}"));
            span.set_attribute(KeyValue::new("gen_ai.request.model", m.clone()));
        }
        if let (Some(masker), Some(p)) = (&lease.masker, &prefix) {
            span.set_attribute(KeyValue::new(
                "gen_ai.input.messages",
                masker.mask_text(&cut(&String::from_utf8_lossy(p))),
            ));
        }
    }
    if wire.is_some()
        && let Some(a) = &lease.audit
    {
        let _ = a.append(&json!({
            "ts": now_rfc3339(), "type": "model.request", "provider": provider,
            "model": model, "server": host, "path": req.rest.split('?').next().unwrap_or(""),
            "request_bytes": request_bytes,
        }));
    }
    let turn = Turn {
        wire,
        sent,
        claim,
        started,
    };
    let resp = match outcome {
        Ok(r) if sent => r,
        Ok(_) | Err(_) if broken.is_some() => {
            // The agent is gone before its request was whole: no answer to give, and no
            // model turn happened.
            let _ = conn.shutdown(Shutdown::Both);
            finish(lease, span, &turn, None, 400, None, broken.as_deref());
            return;
        }
        Ok(r) => r,
        Err(e) => {
            let message = format!("awf relay: cannot reach {url}: {e}");
            if wire.is_some() {
                lease.answered(502, None);
            }
            reply(
                &conn,
                502,
                &provider_error(provider, 502, "api_error", &message),
            );
            let _ = conn.shutdown(Shutdown::Both);
            finish(lease, span, &turn, None, 502, None, Some(&message));
            return;
        }
    };
    let status = resp.status().as_u16();
    if wire.is_some() {
        lease.answered(status, retry_after_ms(resp.headers()));
    }
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\n",
        resp.status().canonical_reason().unwrap_or("")
    );
    for (k, v) in resp.headers() {
        let k = k.as_str();
        if DROPPED.contains(&k) || k == "content-encoding" {
            continue;
        }
        head.push_str(&format!(
            "{k}: {}\r\n",
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    // The answer ends when the connection does: no framing to hold a stream back.
    head.push_str("Connection: close\r\n\r\n");
    let mut reader = wire.map(|w| UsageReader::new(w, content_type.as_deref()));
    let mut content = lease.masker.as_ref().map(|_| Vec::new());
    let mut first_byte = None;
    let mut failed = None;
    let mut out = &conn;
    if out.write_all(head.as_bytes()).is_ok() {
        let mut body = resp.into_body().into_reader();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    first_byte.get_or_insert_with(|| started.elapsed());
                    if let Some(r) = reader.as_mut() {
                        r.feed(&buf[..n]);
                    }
                    if let Some(c) = content.as_mut() {
                        let room = CONTENT_BYTES.saturating_sub(c.len());
                        c.extend_from_slice(&buf[..n.min(room)]);
                    }
                    if out.write_all(&buf[..n]).is_err() {
                        failed = Some("the agent closed the connection".to_string());
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failed = Some(format!("the answer broke off: {e}"));
                    break;
                }
            }
        }
    }
    let _ = conn.shutdown(Shutdown::Both);
    let used = reader.map(UsageReader::finish);
    if let (Some(span), Some(c), Some(masker)) = (span.as_mut(), &content, &lease.masker) {
        span.set_attribute(KeyValue::new(
            "gen_ai.output.messages",
            masker.mask_text(&cut(&String::from_utf8_lossy(c))),
        ));
    }
    finish(
        lease,
        span,
        &turn,
        used,
        status,
        first_byte,
        failed.as_deref(),
    );
}

/// The wait an answer asks for, in milliseconds: `retry-after-ms` (milliseconds), else
/// `retry-after` in seconds (whole or not); an HTTP date is not read.
fn retry_after_ms(headers: &ureq::http::HeaderMap) -> Option<u64> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    number("retry-after-ms")
        .or_else(|| number("retry-after").map(|s| s * 1000.0))
        .map(|ms| ms.round() as u64)
}

fn send(
    agent: &ureq::Agent,
    request: Result<ureq::http::Request<impl ureq::AsSendBody>, ureq::http::Error>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    agent
        .run(request.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// The certificates HTTPS endpoints are checked against: those of `SSL_CERT_FILE` when it
/// names a PEM bundle (as OpenSSL and curl take it: instead of the built-in roots; a
/// private CA's endpoint, say), else the built-in web roots.
fn tls_config() -> &'static ureq::tls::TlsConfig {
    static CONFIG: std::sync::OnceLock<ureq::tls::TlsConfig> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        let Some(file) = std::env::var_os("SSL_CERT_FILE") else {
            return ureq::tls::TlsConfig::default();
        };
        let certs: Result<Vec<_>, String> = std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|pem| {
                ureq::tls::parse_pem(&pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                        Ok(_) => None,
                        Err(e) => Some(Err(e.to_string())),
                    })
                    .collect()
            });
        match certs {
            Ok(certs) if !certs.is_empty() => ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                .build(),
            Ok(_) | Err(_) => {
                tracing::warn!(
                    "SSL_CERT_FILE {} holds no readable certificate; the model relay checks \
                     HTTPS endpoints against the built-in roots",
                    std::path::Path::new(&file).display()
                );
                ureq::tls::TlsConfig::default()
            }
        }
    })
}

/// `text` cut to [`CONTENT_BYTES`] on a character boundary.
fn cut(text: &str) -> String {
    let end = crate::text::floor_char_boundary(text, CONTENT_BYTES);
    text[..end].to_string()
}

/// The endpoint's host and port, for `server.address` and `server.port`.
fn server_of(base: &str) -> (String, u16) {
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or("");
    let default = if scheme == "https" { 443 } else { 80 };
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
            h.trim_matches(['[', ']']).to_string(),
            p.parse().unwrap_or(default),
        ),
        _ => (authority.to_string(), default),
    }
}

/// One request on its way: what it speaks, and whether the upstream got it whole.
struct Turn {
    wire: Option<Wire>,
    /// The whole body went upstream: a model turn happened (or was refused by the model).
    sent: bool,
    claim: Option<Claim>,
    started: Instant,
}

/// Records one model turn: the step's counts, its span, its audit record.
fn finish(
    lease: &Lease,
    span: Option<opentelemetry_sdk::trace::Span>,
    turn: &Turn,
    used: Option<usage::Usage>,
    status: u16,
    first_byte: Option<Duration>,
    failed: Option<&str>,
) {
    if turn.wire.is_none() {
        return;
    }
    let elapsed = turn.started.elapsed();
    let u = used.unwrap_or_default();
    {
        let mut b = lease.books.lock().unwrap();
        // The answer's figures replace the estimate; a request the upstream never got
        // whole gives its claim back.
        if let Some(c) = &turn.claim {
            b.held_tokens -= c.tokens;
            if !turn.sent {
                b.admitted -= 1;
            }
        }
        let s = &mut b.stats;
        s.requests += u64::from(turn.sent);
        s.input_tokens += u.input_tokens.unwrap_or(0);
        s.output_tokens += u.output_tokens.unwrap_or(0);
        s.cache_read_tokens += u.cache_read_tokens.unwrap_or(0);
        s.model_ms += elapsed.as_millis() as u64;
    }
    if let Some(mut span) = span {
        let mut attrs = Vec::new();
        if let Some(m) = &u.response_model {
            attrs.push(KeyValue::new("gen_ai.response.model", m.clone()));
        }
        if let Some(id) = &u.response_id {
            attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
        }
        for (k, v) in [
            ("gen_ai.usage.input_tokens", u.input_tokens),
            ("gen_ai.usage.output_tokens", u.output_tokens),
            ("gen_ai.usage.cache_read.input_tokens", u.cache_read_tokens),
            (
                "gen_ai.usage.cache_creation.input_tokens",
                u.cache_creation_tokens,
            ),
        ] {
            if let Some(n) = v {
                attrs.push(KeyValue::new(k, n as i64));
            }
        }
        if !u.finish_reasons.is_empty() {
            attrs.push(KeyValue::new(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(
                    u.finish_reasons
                        .iter()
                        .map(|r| opentelemetry::StringValue::from(r.clone()))
                        .collect::<Vec<_>>()
                        .into(),
                ),
            ));
        }
        attrs.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(t) = first_byte {
            attrs.push(KeyValue::new(
                "awf.model.time_to_first_byte_ms",
                t.as_secs_f64() * 1000.0,
            ));
        }
        span.set_attributes(attrs);
        if status >= 400 || failed.is_some() {
            span.set_attribute(KeyValue::new(
                "error.type",
                if status >= 400 {
                    status.to_string()
                } else {
                    "stream_error".into()
                },
            ));
            span.set_status(SpanStatus::error(
                failed
                    .unwrap_or("the model answered with an error")
                    .to_string(),
            ));
        }
        span.end();
    }
    if let Some(a) = &lease.audit {
        let _ = a.append(&json!({
            "ts": now_rfc3339(), "type": "model.response", "provider": lease.spec.provider,
            "model": u.response_model, "status": status,
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "finish_reasons": u.finish_reasons,
            "duration_ms": (elapsed.as_secs_f64() * 1e6).round() / 1000.0,
            "time_to_first_byte_ms": first_byte.map(|t| (t.as_secs_f64() * 1e6).round() / 1000.0),
            "error": failed,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease_with(budget: Budget) -> (Relay, LeaseHandle) {
        let relay = Relay::start(None).unwrap();
        let lease = relay
            .lease(LeaseSpec {
                upstream: "http://127.0.0.1:9".into(),
                key: None,
                provider: "anthropic",
                traceparent: None,
                audit: None,
                budget,
                model_content: false,
            })
            .unwrap();
        (relay, lease)
    }

    fn answered(lease: &Lease, claim: Claim, sent: bool, input: u64, output: u64) {
        let turn = Turn {
            wire: Some(Wire::AnthropicMessages),
            sent,
            claim: Some(claim),
            started: Instant::now(),
        };
        let used = usage::Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            ..Default::default()
        };
        finish(lease, None, &turn, Some(used), 200, None, None);
    }

    #[test]
    fn a_token_claim_holds_its_estimate_until_the_answer_tells_the_real_figure() {
        let (_relay, handle) = lease_with(Budget {
            requests: None,
            tokens: Some(1000),
        });
        let lease = &handle.lease;
        // 4 bytes a token: a 2,000-byte body holds 500, two of them the whole budget.
        let first = lease.claim(2000).unwrap();
        let second = lease.claim(2000).unwrap();
        assert_eq!(lease.claim(10).err(), Some("tokens"));
        // The answers say far fewer: the estimates go back, the real figures count.
        answered(lease, first, true, 30, 10);
        answered(lease, second, true, 50, 10);
        assert_eq!(
            handle.stats().input_tokens + handle.stats().output_tokens,
            100
        );
        assert!(lease.claim(10).is_ok());
    }

    #[test]
    fn a_request_the_upstream_never_got_whole_gives_its_claim_back() {
        let (_relay, handle) = lease_with(Budget {
            requests: Some(1),
            tokens: None,
        });
        let lease = &handle.lease;
        let c = lease.claim(100).unwrap();
        assert_eq!(lease.claim(100).err(), Some("requests"));
        answered(lease, c, false, 0, 0);
        let c = lease.claim(100).unwrap();
        answered(lease, c, true, 1, 1);
        assert_eq!(lease.claim(100).err(), Some("requests"));
        assert_eq!(handle.stats().requests, 1);
    }

    #[test]
    fn retry_after_is_read_in_milliseconds_or_seconds() {
        use ureq::http::{HeaderMap, HeaderValue};
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "2")])),
            Some(2000)
        );
        assert_eq!(
            retry_after_ms(&headers(&[("retry-after", "0.5")])),
            Some(500)
        );
        assert_eq!(
            retry_after_ms(&headers(&[
                ("retry-after-ms", "1234"),
                ("retry-after", "2")
            ])),
            Some(1234)
        );
        assert_eq!(
            retry_after_ms(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            None
        );
        assert_eq!(retry_after_ms(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(retry_after_ms(&headers(&[])), None);
    }

    #[test]
    fn errors_are_noted_and_a_success_clears_the_latest() {
        let (_relay, handle) = lease_with(Budget::default());
        handle.lease.answered(529, Some(1000));
        let s = handle.stats();
        assert_eq!(
            (s.last_error_status, s.retry_after_ms, s.last_answer_failed),
            (Some(529), Some(1000), true)
        );
        handle.lease.answered(200, None);
        let s = handle.stats();
        assert_eq!(
            (s.last_error_status, s.retry_after_ms, s.last_answer_failed),
            (Some(529), Some(1000), false)
        );
        handle.lease.answered(502, None);
        assert_eq!(handle.stats().retry_after_ms, None);
    }

    #[test]
    fn a_budget_less_what_was_used() {
        let used = ModelStats {
            requests: 2,
            input_tokens: 30,
            output_tokens: 10,
            ..ModelStats::default()
        };
        let b = Budget {
            requests: Some(3),
            tokens: Some(100),
        };
        assert_eq!(
            b.less(&used),
            Budget {
                requests: Some(1),
                tokens: Some(60)
            }
        );
        assert_eq!(b.less(&used).spent(), None);
        let b = Budget {
            requests: Some(2),
            tokens: None,
        };
        assert_eq!(b.less(&used).spent(), Some("requests"));
        assert_eq!(Budget::default().less(&used), Budget::default());
        assert_eq!(
            Budget {
                requests: None,
                tokens: Some(40)
            }
            .less(&used)
            .spent(),
            Some("tokens")
        );
    }

    #[test]
    fn a_head_is_bounded_by_one_deadline_however_often_its_bytes_come() {
        use std::io::{Read, Write};
        let limits = Limits {
            head_deadline: Duration::from_millis(400),
            ..Limits::default()
        };
        let relay = Relay::start_with(None, limits).unwrap();
        let mut conn = TcpStream::connect(relay.addr).unwrap();
        let mut reading = conn.try_clone().unwrap();
        // A byte every 50 ms: no single read ever waits long, the head never ends.
        let dribble = std::thread::spawn(move || {
            for b in b"GET /s/x/v1/models HTTP/1.1\r\nX-Pad: ".iter().cycle() {
                if conn.write_all(&[*b]).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        });
        reading
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut got = Vec::new();
        let end = reading.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        assert!(end.is_ok(), "{end:?} {text}");
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(text.contains("within 0.4 s"), "{text}");
        assert!(
            dribble.join().unwrap(),
            "the relay kept reading the slow head"
        );
    }
}
