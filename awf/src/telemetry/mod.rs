//! Telemetry adapters: logs through `tracing` to stderr (stdout belongs to MCP), the JSONL
//! audit trail, and OpenTelemetry spans. [`CallHooks`] is the tool server's
//! `mcpserver::Hooks`, so every call, whatever its transport, is seen the same way: one
//! span, one log line, a `tool.call` + `tool.result` audit pair.

pub mod audit;
pub mod audit_chain;
pub mod audit_key;
pub mod otel;

use crate::process::Shutdown;
use audit::{AuditLog, Masker};
use mcpserver::{CallContext, CallOutcome, CallStatus, Content, Hooks, ToolResult};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Installs the stderr logger. Level from `AWF_LOG`, else `RUST_LOG`, else `info`. Every
/// line is masked as audit records are, whatever its event put in it.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let spec = std::env::var("AWF_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        eprintln!("awf: ignoring the log level {spec:?} ({e}); using info");
        EnvFilter::new("info")
    });
    let masker = Arc::new(Masker::from_env(0));
    let lines = move || MaskedLine {
        text: Vec::new(),
        masker: masker.clone(),
        format,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(lines);
    let _ = match format {
        // Control characters in a field (a path, an error) are shown escaped; so the
        // lines carry no colour codes of their own either.
        LogFormat::Human => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// One log line on its way to stderr: kept until the event is written whole (the logger
/// makes one writer per event and drops it after), then masked and written at once.
struct MaskedLine {
    text: Vec<u8>,
    masker: Arc<Masker>,
    format: LogFormat,
}

impl std::io::Write for MaskedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for MaskedLine {
    fn drop(&mut self) {
        use std::io::Write;
        if self.text.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.text);
        // A line that cannot reach stderr has nowhere else to go.
        let _ = match self.format {
            LogFormat::Human => {
                crate::terminal::EscapedStderr.write_all(self.masker.mask_text(&text).as_bytes())
            }
            LogFormat::Json => {
                std::io::stderr().write_all(mask_json_strings(&self.masker, &text).as_bytes())
            }
        };
    }
}

/// `line` (JSON) with each string in it masked as a text (its escapes undone first), and
/// all else as it was: the fields keep their order.
fn mask_json_strings(masker: &Masker, line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let (mut copied, mut i) = (0, 0);
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < b.len() && b[i] != b'"' {
            // What a backslash escapes is ASCII in JSON: the skip stays on a boundary.
            i += if b[i] == b'\\' { 2 } else { 1 };
        }
        let end = (i + 1).min(b.len());
        i = end;
        let Ok(s) = serde_json::from_str::<String>(&line[start..end]) else {
            continue;
        };
        let masked = masker.mask_text(&s);
        if masked != s {
            out.push_str(&line[copied..start]);
            out.push_str(&Value::String(masked).to_string());
            copied = end;
        }
    }
    out.push_str(&line[copied..]);
    out
}

/// Identity of the step a server works for, copied into every record and span.
#[derive(Debug, Clone, Default)]
pub struct StepIds {
    pub run_id: Option<String>,
    pub step_id: Option<String>,
}

/// Longest argument value kept in an audit record.
const AUDIT_VALUE_BYTES: usize = 1024;

pub struct Telemetry {
    session_id: String,
    ids: StepIds,
    audit: Option<AuditLog>,
    otel: Mutex<Option<otel::OtelExporter>>,
    /// Spans go through this handle without taking the mutex (set once at start).
    otel_on: bool,
    parent: Option<SpanContext>,
    masker: Masker,
    ended: AtomicBool,
    /// The last call id's number.
    calls: AtomicU64,
}

impl Telemetry {
    /// `parent_traceparent` is the step's TRACEPARENT (config, else environment).
    pub fn new(
        session_id: String,
        ids: StepIds,
        audit: Option<AuditLog>,
        parent_traceparent: Option<&str>,
    ) -> Telemetry {
        let parent = parent_traceparent.and_then(|t| {
            let p = otel::parse_traceparent(t);
            if p.is_none() {
                tracing::warn!(
                    "ignoring the malformed traceparent {t:?}; tool spans will start a new trace"
                );
            }
            p
        });
        let otel = if otel::export_requested() {
            match otel::OtelExporter::from_env() {
                Ok(o) => Some(o),
                Err(e) => {
                    tracing::warn!("OpenTelemetry export is off: {e}");
                    None
                }
            }
        } else {
            None
        };
        // Log lines are masked as the audit is, audit or not.
        let masker = Masker::from_env(AUDIT_VALUE_BYTES);
        Telemetry {
            session_id,
            ids,
            audit,
            otel_on: otel.is_some(),
            otel: Mutex::new(otel),
            parent,
            masker,
            ended: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// A fresh call id, `<session>-<n>`: unique across processes sharing an audit file.
    fn next_call_id(&self) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}-{n}", self.session_id)
    }

    fn base_record(&self, kind: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("ts".into(), audit::now_rfc3339().into());
        m.insert("type".into(), kind.into());
        m.insert("session_id".into(), self.session_id.clone().into());
        m.insert("run_id".into(), self.ids.run_id.clone().into());
        m.insert("step_id".into(), self.ids.step_id.clone().into());
        m
    }

    fn write(&self, record: serde_json::Map<String, Value>) {
        if let Some(a) = &self.audit
            && let Err(e) = a.append(&Value::Object(record))
        {
            tracing::error!("cannot append to the audit file: {e}");
        }
    }

    /// A `kind` audit record of the session outside any call (masked), with a log line
    /// left to the caller: what a third-party server's jail reports while none of its
    /// calls runs.
    pub fn record(&self, kind: &str, fields: serde_json::Map<String, Value>) {
        if self.audit.is_none() {
            return;
        }
        let mut r = self.base_record(kind);
        if let Value::Object(masked) = self.masker.mask(&Value::Object(fields)) {
            r.extend(masked);
        }
        self.write(r);
    }

    /// Masks `text` as audit records are masked (for log lines).
    pub fn mask_text(&self, text: &str) -> String {
        self.masker.mask_text(text)
    }

    /// `session.start`: who is serving what.
    pub fn session_start(&self, root: &str, tools: &[String]) {
        let mut r = self.base_record("session.start");
        r.insert("pid".into(), std::process::id().into());
        r.insert("version".into(), env!("CARGO_PKG_VERSION").into());
        r.insert("root".into(), root.into());
        r.insert("tools".into(), json!(tools));
        self.write(r);
    }

    /// `session.end` (once), then the span flush. `reason`: end_of_input, shutdown, signal.
    pub fn session_end(&self, reason: &str, detail: Option<&str>) {
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut r = self.base_record("session.end");
        r.insert("reason".into(), reason.into());
        if let Some(d) = detail {
            r.insert("detail".into(), d.into());
        }
        self.write(r);
        if let Some(o) = self.otel.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            o.shutdown();
        }
    }
}

/// How calls reach a server's tools: OpenTelemetry's `network.transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `awf mcp-serve`: MCP over the agent's stdio pipes.
    Pipe,
    /// The in-process HTTP provider calls the server itself.
    Inproc,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Inproc => "inproc",
        }
    }
}

/// The server's hooks: every request that names a tool (a call that reaches its handler,
/// and one the server rejects before that: unknown or withheld tool, arguments that are
/// not an object, a call before `initialize`) gets a span, a log line and a
/// `tool.call` + `tool.result` audit pair, numbered `<session>-<n>`.
pub struct CallHooks {
    telemetry: Arc<Telemetry>,
    /// Tool name → `builtin`, `plugin:<name>`.
    sources: Arc<HashMap<String, String>>,
    transport: Transport,
    /// A call that fails while awf shuts down was cancelled by the shutdown.
    shutdown: Shutdown,
    /// Tool name → the third-party server's own name of it.
    upstream: HashMap<String, String>,
}

/// A call between `call_started` and `call_finished`.
struct OpenCall {
    call_id: String,
    span: Option<otel::CallSpan>,
    /// What the call's handler reported on other threads, for its span.
    events: Arc<Mutex<Vec<SpanEvent>>>,
    /// Figures the handler measured (`awf.call.*`), for the result record and the span.
    figures: Arc<Mutex<Vec<(&'static str, i64)>>>,
    telemetry: Arc<Telemetry>,
    /// When the call started, for the audit record (only kept when there is an audit file).
    started_ts: Option<String>,
}

/// An event of a call's span, kept until the call ends.
struct SpanEvent {
    name: &'static str,
    at: std::time::SystemTime,
    attributes: Vec<KeyValue>,
}

/// The call the current thread's handler runs, for what it reports besides its result
/// (each connection of Bash's egress proxy, say): an audit record and a span event, from
/// any thread, while the call runs.
#[derive(Clone)]
pub struct CallScope {
    call_id: String,
    events: Arc<Mutex<Vec<SpanEvent>>>,
    figures: Arc<Mutex<Vec<(&'static str, i64)>>>,
    telemetry: Arc<Telemetry>,
}

impl CallScope {
    /// The scope of the call this thread runs, if a server's hooks opened one.
    pub fn current() -> Option<CallScope> {
        OPEN_CALLS.with_borrow(|open| {
            open.last().map(|c| CallScope {
                call_id: c.call_id.clone(),
                events: c.events.clone(),
                figures: c.figures.clone(),
                telemetry: c.telemetry.clone(),
            })
        })
    }

    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Appends a `kind` audit record (masked, with the call's id) and an event `kind` on
    /// the call's span.
    pub fn record(
        &self,
        kind: &'static str,
        fields: serde_json::Map<String, Value>,
        attributes: Vec<KeyValue>,
    ) {
        let t = &self.telemetry;
        if t.audit.is_some() {
            let mut r = t.base_record(kind);
            r.insert("call_id".into(), self.call_id.clone().into());
            if let Value::Object(masked) = t.masker.mask(&Value::Object(fields)) {
                r.extend(masked);
            }
            t.write(r);
        }
        if t.otel_on {
            let attributes = attributes
                .into_iter()
                .map(|kv| match &kv.value {
                    opentelemetry::Value::String(s) => {
                        KeyValue::new(kv.key.clone(), t.masker.mask_text(s.as_str()))
                    }
                    _ => kv,
                })
                .collect();
            self.events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(SpanEvent {
                    name: kind,
                    at: std::time::SystemTime::now(),
                    attributes,
                });
        }
    }

    /// Masks `text` as audit records are masked (for a log line of the same event).
    pub fn mask_text(&self, text: &str) -> String {
        self.telemetry.masker.mask_text(text)
    }

    /// A figure the call measured (`awf.call.max_rss_bytes`, say): an attribute of its
    /// span, and a field of its `tool.result` record without the `awf.call.` prefix.
    pub fn figure(&self, key: &'static str, value: i64) {
        self.figures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, value));
    }
}

thread_local! {
    /// The calls this thread runs (mcpserver starts and finishes a call on the thread that
    /// runs its handler, so the innermost open call is the one that finishes).
    static OPEN_CALLS: RefCell<Vec<OpenCall>> = const { RefCell::new(Vec::new()) };
}

impl CallHooks {
    pub fn new(
        telemetry: Arc<Telemetry>,
        sources: Arc<HashMap<String, String>>,
        transport: Transport,
        shutdown: Shutdown,
    ) -> CallHooks {
        CallHooks {
            telemetry,
            sources,
            transport,
            shutdown,
            upstream: HashMap::new(),
        }
    }

    /// Spans of third-party tools also name the tool as its server does
    /// (`awf.mcp.server.tool`).
    pub fn with_upstream_names(mut self, upstream: HashMap<String, String>) -> CallHooks {
        self.upstream = upstream;
        self
    }

    fn source(&self, tool: &str) -> &str {
        self.sources.get(tool).map_or("none", String::as_str)
    }

    fn start_span(&self, ctx: &CallContext, call_id: &str) -> Option<otel::CallSpan> {
        let t = &self.telemetry;
        if !t.otel_on {
            return None;
        }
        // The step's span is the parent; the client's own span (`_meta.traceparent`)
        // is a link, so a tool call is found both from the step and from the client's
        // trace. Without a step (a gateway), the client's span is the parent.
        let client = ctx.trace_parent().and_then(otel::parse_traceparent);
        let (parent, link) = match t.parent.as_ref() {
            Some(step) => (Some(step.clone()), client),
            None => (client, None),
        };
        let parent = parent.as_ref();
        // The client names the tool (an unknown one too) and the request.
        let tool = t.masker.mask_text(ctx.tool());
        let mut attrs = vec![
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("gen_ai.tool.name", tool.clone()),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("network.transport", self.transport.as_str()),
            KeyValue::new("awf.call_id", call_id.to_string()),
            KeyValue::new("awf.tool.source", self.source(ctx.tool()).to_string()),
            KeyValue::new(
                "jsonrpc.request.id",
                t.masker.mask_text(&ctx.request_id().to_string()),
            ),
        ];
        if let Some(server) = self.source(ctx.tool()).strip_prefix("server:") {
            attrs.push(KeyValue::new("awf.mcp.server", server.to_string()));
            if let Some(own) = self.upstream.get(ctx.tool()) {
                attrs.push(KeyValue::new("awf.mcp.server.tool", own.clone()));
            }
        }
        if self.transport == Transport::Pipe {
            attrs.push(KeyValue::new(
                "mcp.protocol.version",
                ctx.protocol_version().to_string(),
            ));
        }
        if let Some(v) = &t.ids.run_id {
            attrs.push(KeyValue::new("awf.run_id", v.clone()));
        }
        if let Some(v) = &t.ids.step_id {
            attrs.push(KeyValue::new("awf.step_id", v.clone()));
        }
        t.otel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|o| o.start_call_span(&tool, parent, link, attrs))
    }
}

impl Hooks for CallHooks {
    fn call_started(&self, ctx: &CallContext, arguments: &str) {
        let t = &self.telemetry;
        let call_id = t.next_call_id();
        if t.audit.is_some() {
            // The server checked the text: it is JSON (an object, unless the call is
            // rejected for sending something else).
            let arguments = serde_json::from_str(arguments).unwrap_or(Value::Null);
            let mut r = t.base_record("tool.call");
            r.insert("call_id".into(), call_id.clone().into());
            r.insert("tool".into(), ctx.tool().into());
            r.insert("source".into(), self.source(ctx.tool()).into());
            r.insert("request_id".into(), ctx.request_id().to_string().into());
            // The revision the call came in: what `initialize` agreed, or what the
            // request's `_meta` named (2026-07-28).
            r.insert(
                "protocol_version".into(),
                ctx.protocol_version().to_string().into(),
            );
            r.insert("arguments".into(), t.masker.mask(&arguments));
            t.write(r);
        }
        let call = OpenCall {
            span: self.start_span(ctx, &call_id),
            events: Arc::new(Mutex::new(Vec::new())),
            figures: Arc::new(Mutex::new(Vec::new())),
            telemetry: t.clone(),
            started_ts: t.audit.is_some().then(audit::now_rfc3339),
            call_id,
        };
        OPEN_CALLS.with_borrow_mut(|open| open.push(call));
    }

    fn call_finished(&self, ctx: &CallContext, outcome: &CallOutcome<'_>) {
        let Some(call) = OPEN_CALLS.with_borrow_mut(Vec::pop) else {
            tracing::error!(tool = %ctx.tool(), "a call finished that never started (a bug in awf)");
            return;
        };
        let t = &self.telemetry;
        let status = match outcome.status {
            CallStatus::ToolError if self.shutdown.is_set() => CallStatus::Cancelled,
            s => s,
        };
        let (tool, source, call_id) = (ctx.tool(), self.source(ctx.tool()), &call.call_id);
        let duration_ms = outcome.duration.as_secs_f64() * 1000.0;
        let text = outcome.result.and_then(ToolResult::first_text);
        let error = (status != CallStatus::Ok).then(|| {
            t.masker
                .mask_text(&first_line(outcome.error.or(text).unwrap_or("")))
        });
        let output_bytes = match outcome.result {
            Some(r) => r
                .content
                .iter()
                .map(|c| match c {
                    Content::Text { text } => text.len(),
                    _ => 0,
                })
                .sum(),
            None => outcome.error.map_or(0, str::len),
        };
        let is_error = outcome.result.is_none_or(|r| r.is_error);
        let figures = std::mem::take(&mut *call.figures.lock().unwrap_or_else(|e| e.into_inner()));
        match &error {
            None => tracing::info!(
                tool = %tool, source = %source, call_id = %call_id,
                duration_ms = format!("{duration_ms:.2}"), outcome = status.as_str(), output_bytes,
                "tool call"
            ),
            Some(e) => tracing::warn!(
                tool = %tool, source = %source, call_id = %call_id,
                duration_ms = format!("{duration_ms:.2}"), outcome = status.as_str(), output_bytes,
                error = %e, "tool call failed"
            ),
        }
        if t.audit.is_some() {
            let mut r = t.base_record("tool.result");
            r.insert("call_id".into(), call_id.clone().into());
            r.insert("tool".into(), tool.into());
            r.insert("started".into(), call.started_ts.clone().into());
            r.insert(
                "duration_ms".into(),
                json!((duration_ms * 1000.0).round() / 1000.0),
            );
            r.insert("outcome".into(), status.as_str().into());
            r.insert("is_error".into(), is_error.into());
            r.insert("output_bytes".into(), output_bytes.into());
            if let Some(e) = &error {
                r.insert("error".into(), e.clone().into());
            }
            for (k, v) in &figures {
                r.insert(k.trim_start_matches("awf.call.").into(), (*v).into());
            }
            t.write(r);
        }
        if let Some(mut span) = call.span {
            for e in call
                .events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                span.event(e.name, e.at, e.attributes);
            }
            let kind = match status {
                CallStatus::Ok => None,
                // The MCP conventions name a tool's own failure `tool_error`.
                CallStatus::ToolError => Some("tool_error"),
                // Answered with a JSON-RPC error: the conventions use its code.
                CallStatus::InvalidArguments => Some("-32602"),
                other => Some(other.as_str()),
            };
            let mut attributes = vec![KeyValue::new("awf.output_bytes", output_bytes as i64)];
            attributes.extend(figures.iter().map(|(k, v)| KeyValue::new(*k, *v)));
            span.end(
                attributes,
                kind.map(|k| (k, error.clone().unwrap_or_default())),
            );
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let cut = crate::text::floor_char_boundary(line, 300);
    line[..cut].to_string()
}

/// A fresh 16-hex-digit id, unique enough to tell sessions sharing an audit file apart.
pub fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpserver::{CallError, RequestId, Server, Tool};

    /// A server auditing to a file in a temp dir; the dir goes when the guard is dropped.
    fn audited_server(
        name: &str,
        shutdown: &Shutdown,
    ) -> (tempfile::TempDir, Server, std::path::PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("awf-hooks-{name}-"))
            .tempdir()
            .unwrap();
        let path = dir.path().join("audit.jsonl");
        let telemetry = Arc::new(Telemetry::new(
            "sess".into(),
            StepIds::default(),
            Some(AuditLog::open(&path).unwrap()),
            None,
        ));
        let sources = HashMap::from([
            ("notes_add".to_string(), "plugin:notes".to_string()),
            ("Bash".to_string(), "builtin".to_string()),
        ]);
        let server = Server::builder("t", "1")
            .hooks(CallHooks::new(
                telemetry,
                Arc::new(sources),
                Transport::Inproc,
                shutdown.clone(),
            ))
            .withhold("Bash", "denied")
            .tool(
                Tool::new("notes_add", "d", json!({"type": "object"})),
                |args: Value, _: &CallContext| match args.get("fail") {
                    Some(_) => Err(CallError::failed("it failed\nsecond line")),
                    None => Ok(ToolResult::text("added")),
                },
            )
            .build()
            .unwrap();
        (dir, server, path)
    }

    fn records(path: &std::path::Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn call(server: &Server, tool: &str, args: Value) {
        let _ = server.call(
            &CallContext::new(RequestId::String("c1".into()), tool),
            &args,
        );
    }

    #[test]
    fn every_call_is_an_audit_pair_with_its_id_source_and_outcome() {
        let (_tmp, server, path) = audited_server("pairs", &Shutdown::new());
        call(&server, "notes_add", json!({"text": "x"}));
        call(&server, "notes_add", json!({"fail": true}));
        call(&server, "Nope", json!({}));
        call(&server, "Bash", json!({"command": "true"}));
        let r = records(&path);
        let kinds: Vec<&str> = r.iter().map(|r| r["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["tool.call", "tool.result"].repeat(4));
        for (i, pair) in r.chunks(2).enumerate() {
            assert_eq!(pair[0]["call_id"], format!("sess-{}", i + 1));
            assert_eq!(pair[1]["call_id"], pair[0]["call_id"]);
            assert_eq!(pair[0]["request_id"], "c1");
        }
        assert_eq!(r[0]["source"], "plugin:notes");
        assert_eq!(r[0]["arguments"], json!({"text": "x"}));
        assert_eq!(
            (&r[1]["outcome"], &r[1]["is_error"], &r[1]["output_bytes"]),
            (&json!("ok"), &json!(false), &json!(5))
        );
        assert_eq!(r[3]["outcome"], "tool_error");
        assert_eq!(r[3]["error"], "it failed");
        assert_eq!(r[4]["source"], "none");
        assert_eq!(r[5]["outcome"], "rejected");
        assert_eq!(r[5]["is_error"], true);
        assert!(r[5]["error"].as_str().unwrap().contains("unknown tool"));
        // A withheld tool's refused call keeps its source.
        assert_eq!(r[6]["source"], "builtin");
        assert_eq!(r[7]["outcome"], "rejected");
    }

    /// Secret values planted in the forms the README lists as masked.
    const PLANTED: [&str; 3] = [
        "pw-planted-0001",
        "bearer.planted.0002",
        "ghp_planted0003abcdefghijklmnop",
    ];

    /// A text holding every planted secret.
    fn planted() -> String {
        format!(
            "db password={} user=bob Authorization: Bearer {} {}",
            PLANTED[0], PLANTED[1], PLANTED[2]
        )
    }

    /// An error text as the builtins word one: the input quoted, then where it was looked for.
    fn quoted() -> String {
        format!(
            "file not found: \"{}\" (looked for /w/{})",
            planted(),
            planted()
        )
    }

    /// A server whose audit file is `path`: `fails` fails with [`quoted`], `connects`
    /// records a `net.connect` with planted secrets in its fields and attributes.
    fn planted_server(path: &std::path::Path) -> (Arc<Telemetry>, Server) {
        let _ = std::fs::remove_file(path);
        let telemetry = Arc::new(Telemetry::new(
            "sess".into(),
            StepIds {
                run_id: Some(planted()),
                step_id: Some(quoted()),
            },
            Some(AuditLog::open(path).unwrap()),
            None,
        ));
        let server = Server::builder("t", "1")
            .hooks(CallHooks::new(
                telemetry.clone(),
                Arc::new(HashMap::new()),
                Transport::Inproc,
                Shutdown::new(),
            ))
            .tool(
                Tool::new("fails", "d", json!({"type": "object"})),
                |_: Value, _: &CallContext| Err::<ToolResult, _>(CallError::failed(quoted())),
            )
            .tool(
                Tool::new("connects", "d", json!({"type": "object"})),
                |_: Value, _: &CallContext| {
                    let mut fields = serde_json::Map::new();
                    fields.insert("host".into(), planted().into());
                    fields.insert("decision".into(), "denied".into());
                    fields.insert("reason".into(), quoted().into());
                    fields.insert("rule".into(), quoted().into());
                    CallScope::current().unwrap().record(
                        "net.connect",
                        fields,
                        vec![KeyValue::new("awf.net.reason", quoted())],
                    );
                    Ok::<_, CallError>(ToolResult::text("done"))
                },
            )
            .build()
            .unwrap();
        (telemetry, server)
    }

    fn planted_call(server: &Server, tool: &str) {
        let args = json!({"path": quoted(), planted(): [quoted()]});
        let _ = server.call(&CallContext::new(RequestId::String(planted()), tool), &args);
    }

    /// Every record type the audit writes, each with secrets planted in every string
    /// field it has (error texts with their quoted copy, names the client gives, the
    /// step's ids): no planted value reaches the file.
    #[test]
    fn no_planted_secret_reaches_any_record_type() {
        type Writes = fn(&std::path::Path);
        let cases: [(&str, Writes); 8] = [
            ("session.start", |p| {
                planted_server(p).0.session_start(&quoted(), &[planted()]);
            }),
            ("tool.call", |p| planted_call(&planted_server(p).1, "fails")),
            ("tool.result", |p| {
                let (_, server) = planted_server(p);
                planted_call(&server, "fails");
                // Rejected: the unknown tool's name is quoted in the error.
                planted_call(&server, &planted());
            }),
            ("net.connect", |p| {
                planted_call(&planted_server(p).1, "connects")
            }),
            ("session.end", |p| {
                planted_server(p).0.session_end("error", Some(&quoted()));
            }),
            // The relay's records, with the fields it gives them.
            ("model.request", |p| {
                let _ = std::fs::remove_file(p);
                AuditLog::open(p)
                    .unwrap()
                    .append(&json!({
                        "ts": audit::now_rfc3339(), "type": "model.request",
                        "provider": planted(), "model": quoted(), "server": planted(),
                        "path": quoted(), "request_bytes": 10,
                    }))
                    .unwrap();
            }),
            ("model.response", |p| {
                let _ = std::fs::remove_file(p);
                AuditLog::open(p)
                    .unwrap()
                    .append(&json!({
                        "ts": audit::now_rfc3339(), "type": "model.response",
                        "provider": planted(), "model": quoted(), "status": 401,
                        "input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 0,
                        "finish_reasons": [planted()], "duration_ms": 1.5,
                        "time_to_first_byte_ms": null, "error": quoted(),
                    }))
                    .unwrap();
            }),
            // The torn line holds the secrets; the record says where it is, not what.
            ("audit.repaired", |p| {
                std::fs::write(p, quoted()).unwrap();
                drop(AuditLog::open(p).unwrap());
            }),
        ];
        for (i, (kind, writes)) in cases.into_iter().enumerate() {
            let dir = tempfile::Builder::new()
                .prefix(&format!("awf-planted-{i}-"))
                .tempdir()
                .unwrap();
            let path = dir.path().join("audit.jsonl");
            writes(&path);
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|r| r["type"] == *kind))
                .collect();
            assert!(!lines.is_empty(), "no {kind} record: {text}");
            for line in lines {
                for secret in PLANTED {
                    assert!(!line.contains(secret), "{secret} in {kind}: {line}");
                }
                if kind != "audit.repaired" {
                    assert!(line.contains("password=***"), "{kind}: {line}");
                }
            }
        }
    }

    #[test]
    fn json_log_lines_are_masked_string_by_string_in_their_order() {
        let m = Masker::new([("AWF_X_TOKEN".to_string(), "envsecret99".to_string())], 0);
        let line = format!(
            "{{\"timestamp\":\"t\",\"level\":\"WARN\",\"error\":{},\"n\":3,\"k\":\"envsecret99\"}}\n",
            Value::String(quoted())
        );
        let got = mask_json_strings(&m, &line);
        for secret in PLANTED.iter().chain(&["envsecret99"]) {
            assert!(!got.contains(secret), "{secret}: {got}");
        }
        assert!(
            got.starts_with("{\"timestamp\":\"t\",\"level\":\"WARN\",\"error\":\"file not found: \\\"db password=***"),
            "{got}"
        );
        assert!(got.ends_with(",\"n\":3,\"k\":\"***\"}\n"), "{got}");
        // Lines with nothing to mask, or no JSON at all, are kept as they are.
        for same in ["{\"a\":\"b\\\"c\",\"d\":[1,\"e\"]}\n", "plain \"unclosed"] {
            assert_eq!(mask_json_strings(&m, same), same);
        }
    }

    #[test]
    fn a_call_failing_while_awf_shuts_down_was_cancelled() {
        let shutdown = Shutdown::new();
        let (_tmp, server, path) = audited_server("shutdown", &shutdown);
        shutdown.begin();
        call(&server, "notes_add", json!({"fail": true}));
        call(&server, "notes_add", json!({}));
        let r = records(&path);
        assert_eq!(r[1]["outcome"], "cancelled");
        assert_eq!(r[3]["outcome"], "ok");
    }
}
