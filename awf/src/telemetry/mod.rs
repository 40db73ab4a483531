//! Telemetry adapters: logs through `tracing` to stderr (stdout belongs to MCP), the JSONL
//! audit trail, and OpenTelemetry spans. [`Telemetry`] implements the router's
//! [`CallObserver`] port, so every call, whatever its transport, is seen the same way:
//! one span, one log line, a `tool.call` + `tool.result` audit pair.

pub mod audit;
pub mod otel;

use crate::tools::{
    CallInfo, CallMeta, CallObservation, CallObserver, CallOutcome, CallStatus, ToolOutput,
    ToolRouter,
};
use audit::{AuditLog, Masker};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// Installs the stderr logger. Level from `AWF_LOG`, else `RUST_LOG`, else `info`.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let spec = std::env::var("AWF_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        eprintln!("awf: ignoring the log level {spec:?} ({e}); using info");
        EnvFilter::new("info")
    });
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Human => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
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
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
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

struct Observation {
    span: Option<otel::CallSpan>,
    /// When the call started, for the audit record (only kept when there is an audit file).
    started_ts: Option<String>,
    telemetry: Arc<Telemetry>,
}

/// The router's view of [`Telemetry`]: shared, so each observation can hold it.
pub struct TelemetryObserver(pub Arc<Telemetry>);

impl CallObserver for TelemetryObserver {
    fn started(&self, call: &CallInfo, arguments: &Value) -> Box<dyn CallObservation> {
        let this = &self.0;
        this.call_started(call, arguments);
        let span = this.start_span(call);
        Box::new(Observation {
            span,
            started_ts: this.audit.is_some().then(audit::now_rfc3339),
            telemetry: this.clone(),
        })
    }
}

impl Telemetry {
    fn call_started(&self, call: &CallInfo, arguments: &Value) {
        if self.audit.is_some() {
            let mut r = self.base_record("tool.call");
            r.insert("call_id".into(), call.call_id.clone().into());
            r.insert("tool".into(), call.tool.clone().into());
            r.insert("source".into(), call.source.clone().into());
            r.insert("request_id".into(), call.meta.request_id.clone().into());
            r.insert("arguments".into(), self.masker.mask(arguments));
            self.write(r);
        }
    }

    fn start_span(&self, call: &CallInfo) -> Option<otel::CallSpan> {
        if self.otel_on {
            let parent = call
                .meta
                .traceparent
                .as_deref()
                .and_then(otel::parse_traceparent);
            let parent = parent.as_ref().or(self.parent.as_ref());
            let mut attrs = vec![
                KeyValue::new("mcp.method.name", "tools/call"),
                KeyValue::new("gen_ai.tool.name", call.tool.clone()),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("network.transport", call.meta.transport),
                KeyValue::new("awf.call_id", call.call_id.clone()),
                KeyValue::new("awf.tool.source", call.source.clone()),
            ];
            if let Some(id) = &call.meta.request_id {
                attrs.push(KeyValue::new("jsonrpc.request.id", id.clone()));
            }
            if let Some(v) = &call.meta.protocol_version {
                attrs.push(KeyValue::new("mcp.protocol.version", v.clone()));
            }
            if let Some(v) = &self.ids.run_id {
                attrs.push(KeyValue::new("awf.run_id", v.clone()));
            }
            if let Some(v) = &self.ids.step_id {
                attrs.push(KeyValue::new("awf.step_id", v.clone()));
            }
            self.otel
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|o| o.start_call_span(&call.tool, parent, attrs))
        } else {
            None
        }
    }
}

impl CallObservation for Observation {
    fn finish(self: Box<Self>, call: &CallInfo, outcome: &CallOutcome<'_>) {
        let t = &self.telemetry;
        let duration_ms = outcome.duration.as_secs_f64() * 1000.0;
        let error = (outcome.status != CallStatus::Ok)
            .then(|| t.masker.mask_text(&first_line(&outcome.output.text)));
        let output_bytes = outcome.output.text.len();
        match &error {
            None => tracing::info!(
                tool = %call.tool, source = %call.source, call_id = %call.call_id,
                duration_ms = format!("{duration_ms:.2}"), outcome = outcome.status.as_str(), output_bytes,
                "tool call"
            ),
            Some(e) => tracing::warn!(
                tool = %call.tool, source = %call.source, call_id = %call.call_id,
                duration_ms = format!("{duration_ms:.2}"), outcome = outcome.status.as_str(), output_bytes,
                error = %e, "tool call failed"
            ),
        }
        if t.audit.is_some() {
            let mut r = t.base_record("tool.result");
            r.insert("call_id".into(), call.call_id.clone().into());
            r.insert("tool".into(), call.tool.clone().into());
            r.insert("started".into(), self.started_ts.clone().into());
            r.insert(
                "duration_ms".into(),
                json!((duration_ms * 1000.0).round() / 1000.0),
            );
            r.insert("outcome".into(), outcome.status.as_str().into());
            r.insert("is_error".into(), outcome.output.is_error.into());
            r.insert("output_bytes".into(), output_bytes.into());
            if let Some(e) = &error {
                r.insert("error".into(), e.clone().into());
            }
            t.write(r);
        }
        if let Some(span) = self.span {
            let kind = match outcome.status {
                CallStatus::Ok => None,
                // The MCP conventions name a tool's own failure `tool_error`.
                CallStatus::ToolError => Some("tool_error"),
                // Answered with a JSON-RPC error: the conventions use its code.
                CallStatus::InvalidArguments => Some("-32602"),
                CallStatus::UnknownTool => Some("unknown_tool"),
                CallStatus::Cancelled => Some("cancelled"),
                CallStatus::Panicked => Some("panicked"),
                CallStatus::Rejected => Some("rejected"),
            };
            span.end(
                vec![KeyValue::new("awf.output_bytes", output_bytes as i64)],
                kind.map(|k| (k, error.clone().unwrap_or_default())),
            );
        }
    }
}

/// What an MCP call's context says about who asked and how.
pub fn mcp_call_meta(ctx: &mcpserver::CallContext) -> CallMeta {
    CallMeta {
        request_id: Some(ctx.request_id().to_string()),
        protocol_version: Some(ctx.protocol_version().to_string()),
        traceparent: ctx
            .meta()
            .and_then(|m| m.get("traceparent"))
            .and_then(|t| t.as_str())
            .map(str::to_string),
        transport: "pipe",
    }
}

/// The MCP server's hooks: a call that reaches a handler is observed by the router; one
/// the server rejects before that (unknown or withheld tool, arguments that are not an
/// object, a call before `initialize`) is recorded here, the same way. So every request
/// that names a tool leaves a `tool.call` + `tool.result` pair, a span and a log line.
pub struct RejectedCallHooks {
    pub telemetry: Arc<Telemetry>,
    /// Numbers rejected calls in the same sequence as the others.
    pub router: Arc<ToolRouter>,
}

impl mcpserver::Hooks for RejectedCallHooks {
    fn call_rejected(&self, ctx: &mcpserver::CallContext, arguments: &str, error: &str) {
        let info = CallInfo {
            call_id: self.router.next_call_id(),
            tool: ctx.tool().to_string(),
            source: "none".into(),
            meta: mcp_call_meta(ctx),
        };
        // The server checked the line: the arguments are JSON (maybe not an object).
        let arguments = serde_json::from_str(arguments).unwrap_or(Value::Null);
        let observation = TelemetryObserver(self.telemetry.clone()).started(&info, &arguments);
        observation.finish(
            &info,
            &CallOutcome {
                status: CallStatus::Rejected,
                duration: std::time::Duration::ZERO,
                output: &ToolOutput::invalid_arguments(error),
            },
        );
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let cut = crate::builtins::bound::floor_char_boundary(line, 300);
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
