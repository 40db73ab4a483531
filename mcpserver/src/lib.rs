//! A small, fast server library for the Model Context Protocol (MCP), both eras of it —
//! the 2024-11-05 handshake and the stateless revision 2026-07-28, from one server
//! with no setting: register tools with typed handlers, then serve them over blocking
//! stdio — no async runtime, no macros, two dependencies (`serde`, `serde_json`).
//!
//! A complete server:
//!
//! ```no_run
//! use mcpserver::{CallContext, Server, Tool, ToolResult};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct EchoArgs { text: String }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let schema = serde_json::json!({
//!         "type": "object",
//!         "properties": { "text": { "type": "string" } },
//!         "required": ["text"]
//!     });
//!     Server::builder("echo", "1.0.0")
//!         .tool(Tool::new("echo", "Echo the text back", schema), |args: EchoArgs, _: &CallContext| {
//!             Ok::<_, String>(ToolResult::text(args.text))
//!         })
//!         .build()?
//!         .serve_stdio()?;
//!     Ok(())
//! }
//! ```
//!
//! What the library does for you, to the letter of the protocol:
//!
//! - **Framing**: one JSON message per line (`\r\n` accepted), compact output, nothing
//!   but protocol messages on the output; lines over [`ServerBuilder::max_message_size`]
//!   get an error answer and are skipped.
//! - **Lifecycle**: `initialize` (answered with 2024-11-05 whatever the client asked,
//!   unless [`ServerBuilder::accept_newer_revisions`]), `ping` at any time, an immediate
//!   error for other requests before `initialize`, `shutdown` and end of input both
//!   drain: every request read is answered before [`Server::serve`] returns.
//! - **The stateless era** ([`REVISION_2026_07_28`]): a request whose `_meta` names the
//!   revision is served by itself, before or after any `initialize`:
//!   `server/discover`, `tools/list` and `tools/call` with `resultType` and serverInfo,
//!   cache hints on the list, -32022 for a revision not served, and
//!   `subscriptions/listen` for list changes. A handshake client never sees any of it;
//!   [`ServerBuilder::revisions`] narrows what is served.
//! - **Errors**: -32700 for bad JSON or UTF-8 (and serving goes on), -32600 for
//!   messages that are not requests, -32601 for unknown methods, -32602 for unknown
//!   tools or arguments that do not fit. A handler's `Err` or panic becomes a result
//!   with `isError: true`; the server keeps serving.
//! - **Concurrency**: calls run concurrently up to [`ServerBuilder::max_concurrency`];
//!   `ping` is answered during a long call; `notifications/cancelled` raises the
//!   call's [`CancellationToken`]. The reading thread runs quick calls itself (no
//!   thread hand-off). With every slot busy one thread still reads: control messages
//!   are heard, and a further call is refused at once with -32001 naming the bound.
//! - **Speed**: a well-formed `tools/call` line is read in one pass by a strict scanner
//!   that hands anything unusual to the careful serde path (which words any error);
//!   answers are batched under a flood and flushed at once for a lone request.
//! - **Observability**: [`Hooks`] tell a host when a request arrives and when each call
//!   starts and ends, enough for a span, a log line and an audit record per call.
//! - **Tool policy**: a tool can be withheld at build time ([`ServerBuilder::withhold`])
//!   or while serving, from every session at once ([`Server::tool_gate`], a
//!   [`ToolGate`]): it leaves `tools/list`, and a call to it is refused with the
//!   reason. With [`ServerBuilder::notify_list_changed`], `initialize` announces
//!   `listChanged` and each initialized session writes
//!   `notifications/tools/list_changed` at once, between answers, even while it waits
//!   for input.
//!
//! Tests can serve in-process over [`memory::pair`], answer lines one at a time on the
//! calling thread with a [`Dispatcher`], or run one call with [`Server::call`] (which is
//! also how a host calls its tools in-process, hooks and all).
//!
//! The other side of the wire is here too, for clients and for proxies that speak to
//! another MCP server over its stdio: [`wire`] has the server's own line reader
//! ([`wire::LineReader`]), reads what a server sends ([`wire::classify_incoming`]:
//! answers, error answers, the server's requests and notifications, or why a line is
//! not a message), and writes requests, notifications and answers as one line each; the
//! error codes are in [`codes`].

// Inside, a `tools/call` goes: the transport's framing (`framing.rs`) → the session's
// scheduling (`session.rs`: which thread reads, runs, flushes) → the MCP methods
// (`methods.rs`: what the line asks, read by `jsonrpc.rs` and, for the common shape of a
// call, the strict scanner of `scan.rs`; the tool's lookup; the handler between the
// hooks) → the handler → the answer, written by the session. `dispatch.rs` and
// `Server::call` enter the methods without a session. `gate.rs` withholds tools while
// serving and tells the sessions (their monitors write the notification); `wire.rs`
// lends the framing and `jsonrpc.rs`'s reading and writing to clients.

mod builder;
mod context;
mod dispatch;
mod doorbell;
mod era;
mod framing;
mod gate;
mod hooks;
mod id;
mod jsonrpc;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod linux;
pub mod memory;
mod meta;
mod methods;
mod scan;
mod server;
mod session;
mod state;
mod swar;
#[cfg(unix)]
mod sys;
mod tool;
pub mod wire;

pub use builder::{
    BuildError, DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_MESSAGE_SIZE, ServerBuilder, check_name,
};
pub use context::{CallContext, CancellationToken, ClientInfo};
pub use dispatch::Dispatcher;
pub use gate::ToolGate;
pub use hooks::{CallOutcome, CallStatus, Hooks};
pub use id::RequestId;

/// The JSON-RPC error codes the server answers with, and a client of
/// [`wire`] reads and answers with.
pub mod codes {
    pub use crate::jsonrpc::{
        INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND,
        MISSING_REQUIRED_CLIENT_CAPABILITY, PARSE_ERROR, SERVER_BUSY, SERVER_BUSY_STATELESS,
        SERVER_NOT_INITIALIZED, UNSUPPORTED_PROTOCOL_VERSION,
    };
}
pub use server::{Server, StopHandle};
pub use state::StopReason;
pub use tool::{CallError, Content, Tool, ToolResult};

/// The protocol revision this library speaks by default.
pub const PROTOCOL_VERSION: &str = "2024-11-05";

/// Revision 2025-06-18: tool titles, annotations, output schemas, structured content.
pub const REVISION_2025_06_18: &str = "2025-06-18";

/// Revision 2025-11-25: as 2025-06-18, and arguments that do not fit a tool are answered
/// with an `isError` result the model can read, instead of -32602.
pub const REVISION_2025_11_25: &str = "2025-11-25";

/// Newer revisions of the handshake era a server may opt in to with
/// [`ServerBuilder::accept_newer_revisions`].
pub const NEWER_PROTOCOL_VERSIONS: [&str; 2] = [REVISION_2025_06_18, REVISION_2025_11_25];

/// Revision 2026-07-28, the stateless era: no `initialize`; each request names its
/// revision in `_meta`, `server/discover` tells what the server serves, every result
/// carries `resultType`, list results carry cache hints, and list changes reach the
/// clients that opened `subscriptions/listen`. Served by default beside the handshake
/// era (see [`ServerBuilder::revisions`]).
pub const REVISION_2026_07_28: &str = "2026-07-28";
