//! The application core of tool interception (ADR 017's names): a [`ToolProvider`] lists
//! and calls tools; the [`ToolRouter`] puts several providers in one name space, checks
//! names and collisions once, and wraps every call in observation (span, log line, audit
//! records) through the [`CallObserver`] port. Nothing here knows about MCP: `mcp_serve`
//! adapts the router to the `mcpserver` library, and the HTTP provider can call the very
//! same router in-process.

mod policy;
mod router;

pub use policy::ToolPolicy;
pub use router::{ToolRouter, is_valid_tool_name};

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What a provider says about one of its tools (the MCP `Tool` fields we use).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub input_schema: Value,
    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, ...), when known.
    pub annotations: Option<Value>,
}

/// A tool's answer: text for the model, flagged as an error when the tool failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// The arguments did not fit the tool's schema (MCP answers -32602; `is_error` is
    /// also set, for callers that only look at that).
    pub invalid_arguments: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
            invalid_arguments: false,
        }
    }
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: true,
            invalid_arguments: false,
        }
    }
    /// Arguments that do not deserialize into what the tool takes; the text says why.
    pub fn invalid_arguments(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: true,
            invalid_arguments: true,
        }
    }
}

/// Tells a running tool that its caller gave up (client cancel, shutdown). Polled: tools
/// that can block for long (Bash) check it and stop early.
#[derive(Clone)]
pub struct Cancellation(Arc<dyn Fn() -> bool + Send + Sync>);

impl Cancellation {
    pub fn new(f: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Cancellation(Arc::new(f))
    }
    pub fn never() -> Self {
        Cancellation::new(|| false)
    }
    pub fn is_cancelled(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancellation")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// The port every tool source implements (builtins, plugin adapter).
pub trait ToolProvider: Send + Sync {
    /// Where calls go, for logs and audit: `builtin`, `plugin:<name>`.
    fn source(&self) -> &str;
    fn tools(&self) -> Vec<ToolSpec>;
    /// Runs one call. Failures are `is_error` outputs whose text says why: the model reads
    /// them and can correct itself.
    fn call(&self, tool: &str, arguments: &Value, cancel: &Cancellation) -> ToolOutput;
}

/// Who asked and how, as far as the caller knows (MCP fills all of it, the in-process
/// HTTP provider only some).
#[derive(Debug, Clone, Default)]
pub struct CallMeta {
    /// The JSON-RPC request id, as text.
    pub request_id: Option<String>,
    pub protocol_version: Option<String>,
    /// W3C traceparent sent by the client in `params._meta`, which wins over the step's.
    pub traceparent: Option<String>,
    /// OpenTelemetry `network.transport`: `pipe` for stdio MCP, `inproc` in-process.
    pub transport: &'static str,
}

/// How a call ended, for observers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    Ok,
    ToolError,
    InvalidArguments,
    UnknownTool,
    Cancelled,
    Panicked,
    /// Answered with an error before reaching the router (MCP: unknown or withheld tool,
    /// arguments that are not an object, a call before `initialize`).
    Rejected,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::ToolError => "tool_error",
            CallStatus::InvalidArguments => "invalid_arguments",
            CallStatus::UnknownTool => "unknown_tool",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Panicked => "panicked",
            CallStatus::Rejected => "rejected",
        }
    }
}

/// The facts about one call that observers record.
#[derive(Debug, Clone)]
pub struct CallInfo {
    /// Unique across processes sharing an audit file: `<session>-<n>`.
    pub call_id: String,
    pub tool: String,
    pub source: String,
    pub meta: CallMeta,
}

#[derive(Debug, Clone)]
pub struct CallOutcome<'a> {
    pub status: CallStatus,
    pub duration: Duration,
    pub output: &'a ToolOutput,
}

/// The observation port: the router calls `started` before and `finish` after every call.
pub trait CallObserver: Send + Sync {
    fn started(&self, call: &CallInfo, arguments: &Value) -> Box<dyn CallObservation>;
}

/// One call being observed (holds e.g. its open span).
pub trait CallObservation: Send {
    fn finish(self: Box<Self>, call: &CallInfo, outcome: &CallOutcome<'_>);
}

/// An observer that records nothing (tests, or callers that observe elsewhere).
pub struct NoObserver;

impl CallObserver for NoObserver {
    fn started(&self, _call: &CallInfo, _arguments: &Value) -> Box<dyn CallObservation> {
        Box::new(NoObserver)
    }
}

impl CallObservation for NoObserver {
    fn finish(self: Box<Self>, _call: &CallInfo, _outcome: &CallOutcome<'_>) {}
}
