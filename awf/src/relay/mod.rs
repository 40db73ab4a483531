//! The model relay: one local HTTP server per run (127.0.0.1, started with the first CLI
//! agent step) between each agent CLI and its model endpoint. A step gets a `Lease`: a
//! route `/s/<id>/` that its CLI's base URL points at, and, when the workflow names a key
//! (`api_key_env`), a placeholder key that only this route accepts. The relay forwards each
//! request to the real endpoint (the step's `base_url`, else the provider's), over HTTPS
//! where the endpoint is, with the real key in the header the provider's API expects; the
//! CLI never holds the key. The response streams back as it arrives (event by event), while
//! [`usage`] reads the model, the tokens and the finish reasons out of it: each request is
//! a `chat <model>` span under the step's span and a `model.request` + `model.response`
//! pair in the step's audit file, and counts toward the step's budget.

pub mod usage;

use crate::telemetry::audit::{AuditLog, now_rfc3339};
use crate::telemetry::otel::{OtelExporter, parse_traceparent};
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use usage::{UsageReader, Wire};

/// The largest request head and body the relay takes (a model request with a long
/// conversation is a few MiB).
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;

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
}

struct Lease {
    placeholder: Option<String>,
    spec: LeaseSpec,
    /// Masks secrets in recorded content (awf's secret-looking variables, key shapes).
    masker: Option<crate::telemetry::audit::Masker>,
    audit: Option<AuditLog>,
    stats: Mutex<ModelStats>,
    refused: AtomicBool,
}

/// The run's relay.
pub struct Relay {
    addr: SocketAddr,
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
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let leases: Arc<Mutex<HashMap<String, Arc<Lease>>>> = Arc::default();
        let routes = leases.clone();
        let exporter = Arc::new(exporter);
        std::thread::Builder::new()
            .name("awf-relay".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let (routes, exporter) = (routes.clone(), exporter.clone());
                    let _ = std::thread::Builder::new()
                        .name("awf-relay-conn".into())
                        .spawn(move || serve(conn, &routes, exporter.as_ref().as_ref()));
                }
            })?;
        Ok(Relay { addr, leases })
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
            stats: Mutex::new(ModelStats::default()),
            refused: AtomicBool::new(false),
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
        self.lease.stats.lock().unwrap().clone()
    }
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        self.leases.lock().unwrap().remove(&self.id);
    }
}

/// One request from a CLI, read whole (a model request is one JSON body).
struct Request {
    method: String,
    /// The path after `/s/<id>`, with its query.
    rest: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(conn: &mut TcpStream) -> Result<(String, Request), (u16, String)> {
    conn.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    let (head_len, method, path, headers) = loop {
        let n = conn
            .read(&mut chunk)
            .map_err(|e| (400, format!("cannot read the request: {e}")))?;
        if n == 0 {
            return Err((400, "the connection ended inside the request head".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut hs = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut hs);
        match req.parse(&buf) {
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
                    .collect::<Vec<_>>();
                break (
                    len,
                    req.method.unwrap_or("GET").to_string(),
                    req.path.unwrap_or("/").to_string(),
                    headers,
                );
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err((431, "the request head is too large".into()));
            }
            Err(e) => return Err((400, format!("not an HTTP request: {e}"))),
        }
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some() {
        return Err((411, "send the request with a Content-Length".into()));
    }
    let len: usize = header("content-length")
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| (400, "a bad Content-Length".to_string()))
        })
        .transpose()?
        .unwrap_or(0);
    if len > MAX_BODY {
        return Err((
            413,
            format!("the request body is over {} MiB", MAX_BODY >> 20),
        ));
    }
    let mut body = buf[head_len..].to_vec();
    while body.len() < len {
        let n = conn
            .read(&mut chunk)
            .map_err(|e| (400, format!("cannot read the request body: {e}")))?;
        if n == 0 {
            return Err((400, "the connection ended inside the request body".into()));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    let Some(after) = path.strip_prefix("/s/") else {
        return Err((404, format!("{path} is not a step's route")));
    };
    let (id, rest) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    Ok((
        id.to_string(),
        Request {
            method,
            rest: if rest.starts_with('/') || rest.is_empty() {
                rest.to_string()
            } else {
                format!("/{rest}")
            },
            headers,
            body,
        },
    ))
}

fn reply(conn: &mut TcpStream, status: u16, body: &Value) {
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
        404 => "Not Found",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
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
fn sent_key(req: &Request) -> Option<String> {
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
    };
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

fn serve(
    mut conn: TcpStream,
    routes: &Mutex<HashMap<String, Arc<Lease>>>,
    exporter: Option<&Arc<OtelExporter>>,
) {
    let _ = conn.set_nodelay(true);
    let (id, req) = match read_request(&mut conn) {
        Ok(r) => r,
        Err((status, why)) => {
            reply(
                &mut conn,
                status,
                &json!({"error": {"message": format!("awf relay: {why}")}}),
            );
            return;
        }
    };
    let Some(lease) = routes.lock().unwrap().get(&id).cloned() else {
        reply(
            &mut conn,
            404,
            &json!({"error": {"message": "awf relay: no step has this route (the step ended?)"}}),
        );
        return;
    };
    let provider = lease.spec.provider;
    if let Some(p) = &lease.placeholder
        && !sent_key(&req).is_some_and(|k| same(&k, p))
    {
        reply(
            &mut conn,
            401,
            &provider_error(
                provider,
                401,
                "authentication_error",
                "awf relay: this key is not the step's; the relay takes only the key awf gave the step",
            ),
        );
        return;
    }
    let (wire, model) = match usage::classify(&req.rest, &req.body) {
        Some((w, m)) => (Some(w), m),
        None => (None, None),
    };
    // Only model turns count and are seen; a token count or a model list passes quietly.
    if wire.is_some()
        && let Some(limit) = over_budget(&lease)
    {
        lease.refused.store(true, Ordering::SeqCst);
        lease.stats.lock().unwrap().budget_exhausted = Some(limit);
        let message = format!(
            "awf: the step's model budget is spent ({limit}: {}); no further request is sent",
            match limit {
                "requests" => lease.spec.budget.requests.unwrap_or(0),
                _ => lease.spec.budget.tokens.unwrap_or(0),
            }
        );
        reply(
            &mut conn,
            400,
            &provider_error(provider, 400, "invalid_request_error", &message),
        );
        return;
    }
    forward(conn, &lease, req, wire, model, exporter);
}

fn over_budget(lease: &Lease) -> Option<&'static str> {
    let s = lease.stats.lock().unwrap();
    let b = lease.spec.budget;
    if b.requests.is_some_and(|n| s.requests >= n) {
        return Some("requests");
    }
    if b.tokens
        .is_some_and(|n| s.input_tokens + s.output_tokens >= n)
    {
        return Some("tokens");
    }
    None
}

fn forward(
    mut conn: TcpStream,
    lease: &Lease,
    req: Request,
    wire: Option<Wire>,
    model: Option<String>,
    exporter: Option<&Arc<OtelExporter>>,
) {
    let url = format!("{}{}", lease.spec.upstream, upstream_path(&req.rest));
    let started = Instant::now();
    let provider = lease.spec.provider;
    let (host, port) = server_of(&lease.spec.upstream);
    let mut span = wire.and(exporter).map(|e| {
        let parent = lease
            .spec
            .traceparent
            .as_deref()
            .and_then(parse_traceparent);
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider),
            KeyValue::new("server.address", host.clone()),
            KeyValue::new("server.port", i64::from(port)),
        ];
        if let Some(m) = &model {
            attrs.push(KeyValue::new("gen_ai.request.model", m.clone()));
        }
        if let Some(masker) = &lease.masker {
            attrs.push(KeyValue::new(
                "gen_ai.input.messages",
                masker.mask_text(&cut(&String::from_utf8_lossy(&req.body))),
            ));
        }
        e.start_span(
            format!("chat {}", model.as_deref().unwrap_or(""))
                .trim_end()
                .to_string(),
            SpanKind::Client,
            parent.as_ref(),
            attrs,
        )
    });
    if wire.is_some()
        && let Some(a) = &lease.audit
    {
        let _ = a.append(&json!({
            "ts": now_rfc3339(), "type": "model.request", "provider": provider,
            "model": model, "server": host, "path": req.rest.split('?').next().unwrap_or(""),
            "request_bytes": req.body.len(),
        }));
    }
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
    if let Some((how, key)) = &lease.spec.key {
        builder = match how {
            KeyHeader::XApiKey => builder.header("x-api-key", key.as_str()),
            KeyHeader::Bearer => builder.header("authorization", format!("Bearer {key}")),
            KeyHeader::Goog => builder.header("x-goog-api-key", key.as_str()),
        };
    }
    let outcome = builder
        .body(req.body)
        .map_err(|e| e.to_string())
        .and_then(|r| agent.run(r).map_err(|e| e.to_string()));
    let resp = match outcome {
        Ok(r) => r,
        Err(e) => {
            let message = format!("awf relay: cannot reach {url}: {e}");
            reply(
                &mut conn,
                502,
                &provider_error(provider, 502, "api_error", &message),
            );
            finish(
                lease,
                span.take(),
                wire,
                None,
                502,
                started,
                None,
                Some(&message),
            );
            return;
        }
    };
    let status = resp.status().as_u16();
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
    if conn.write_all(head.as_bytes()).is_ok() {
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
                    if conn.write_all(&buf[..n]).is_err() {
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
        wire,
        used,
        status,
        started,
        first_byte,
        failed.as_deref(),
    );
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
    let end = crate::builtins::bound::floor_char_boundary(text, CONTENT_BYTES);
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

/// Records one model turn: the step's counts, its span, its audit record.
#[allow(clippy::too_many_arguments)]
fn finish(
    lease: &Lease,
    span: Option<opentelemetry_sdk::trace::Span>,
    wire: Option<Wire>,
    used: Option<usage::Usage>,
    status: u16,
    started: Instant,
    first_byte: Option<Duration>,
    failed: Option<&str>,
) {
    if wire.is_none() {
        return;
    }
    let elapsed = started.elapsed();
    let u = used.unwrap_or_default();
    {
        let mut s = lease.stats.lock().unwrap();
        s.requests += 1;
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
