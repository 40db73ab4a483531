//! Hooks: how a host observes the server without the library depending on a logging or
//! tracing crate. A host implements [`Hooks`] to emit a span, a log line and an audit
//! record per call.

use std::time::Duration;

use crate::context::CallContext;
use crate::id::RequestId;
use crate::tool::ToolResult;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallStatus {
    /// The tool succeeded.
    Ok,
    /// The tool ran and reported failure (`isError: true`).
    ToolError,
    /// The arguments did not fit the tool (answered with -32602).
    InvalidArguments,
    /// The handler panicked (answered as an `isError` result).
    Panicked,
    /// The client cancelled the call; no answer was sent.
    Cancelled,
    /// The call was answered with an error before any handler ran: an unknown or
    /// withheld tool, arguments that are not an object, or a call before `initialize`.
    Rejected,
}

impl CallStatus {
    /// A short lowercase name: `ok`, `tool_error`, `invalid_arguments`, `panicked`,
    /// `cancelled`, `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::ToolError => "tool_error",
            CallStatus::InvalidArguments => "invalid_arguments",
            CallStatus::Panicked => "panicked",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Rejected => "rejected",
        }
    }
}

/// What a host learns when a call ends.
#[derive(Debug)]
#[non_exhaustive]
pub struct CallOutcome<'a> {
    /// Time spent in the handler (zero for a rejected call).
    pub duration: Duration,
    /// How the call ended.
    pub status: CallStatus,
    /// Why it failed, when it did.
    pub error: Option<&'a str>,
    /// The result sent (absent for invalid arguments and rejected calls).
    pub result: Option<&'a ToolResult>,
}

/// Observers of the server's work. Every method has an empty default.
///
/// `call_started` and `call_finished` run on the thread that runs the handler, one
/// right before it and one right after, so a host may keep per-call state in a
/// thread-local (an entered span, for instance). Every request that names a tool
/// reaches the hooks: one rejected before any handler ran goes to
/// [`Hooks::call_rejected`], which by default reports it as the same pair.
pub trait Hooks: Send + Sync {
    /// A request or notification was read (`id` is `None` for a notification).
    fn request_received(&self, method: &str, id: Option<&RequestId>) {
        let _ = (method, id);
    }

    /// A `tools/call` is about to run its handler (or to be rejected); `arguments` is
    /// the JSON text of the call's arguments (an object, unless the call is rejected for
    /// sending something else; `{}` when it sent none).
    fn call_started(&self, ctx: &CallContext, arguments: &str) {
        let _ = (ctx, arguments);
    }

    /// A `tools/call` ended.
    fn call_finished(&self, ctx: &CallContext, outcome: &CallOutcome<'_>) {
        let _ = (ctx, outcome);
    }

    /// A `tools/call` was answered with an error before any handler ran (unknown or
    /// withheld tool, arguments that are not an object, a call before `initialize`);
    /// `error` is the message sent. By default: [`Hooks::call_started`], then
    /// [`Hooks::call_finished`] with [`CallStatus::Rejected`], on the reading thread.
    fn call_rejected(&self, ctx: &CallContext, arguments: &str, error: &str) {
        self.call_started(ctx, arguments);
        self.call_finished(
            ctx,
            &CallOutcome {
                duration: Duration::ZERO,
                status: CallStatus::Rejected,
                error: Some(error),
                result: None,
            },
        );
    }
}

/// Shared hooks: a host keeps an `Arc` to read what its hooks gathered.
impl<H: Hooks + ?Sized> Hooks for std::sync::Arc<H> {
    fn request_received(&self, method: &str, id: Option<&RequestId>) {
        (**self).request_received(method, id)
    }

    fn call_started(&self, ctx: &CallContext, arguments: &str) {
        (**self).call_started(ctx, arguments)
    }

    fn call_finished(&self, ctx: &CallContext, outcome: &CallOutcome<'_>) {
        (**self).call_finished(ctx, outcome)
    }

    fn call_rejected(&self, ctx: &CallContext, arguments: &str, error: &str) {
        (**self).call_rejected(ctx, arguments, error)
    }
}
