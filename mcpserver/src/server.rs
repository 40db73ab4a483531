//! The server: its fixed set of tools and settings, and the ways to serve them — over a
//! transport ([`Server::serve`], scheduled by `session.rs`), one line at a time
//! ([`Server::dispatcher`]), or one call at a time in-process ([`Server::call`]). Its
//! state lives in `state.rs`; the builder (`builder.rs`) makes it.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use crate::context::CallContext;
use crate::dispatch::Dispatcher;
use crate::gate::ToolGate;
use crate::methods::object_arguments;
use crate::session::Session;
use crate::state::{Inner, StopReason, StopSignal};
use crate::tool::{CallError, Tool, ToolResult};

/// An MCP server: a fixed set of tools, served over any reader and writer.
///
/// Build it with [`Server::builder`]; serve it with [`Server::serve_stdio`] or
/// [`Server::serve`], drive it a line at a time with [`Server::dispatcher`], or call one
/// of its tools in-process with [`Server::call`]; withhold tools while it serves with
/// [`Server::tool_gate`].
pub struct Server {
    pub(crate) inner: Arc<Inner>,
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
    /// The registered tools, in registration order (a tool withheld through the
    /// [`ToolGate`] stays registered: it is here, and not in `tools/list`).
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.inner.tools.iter()
    }

    /// The tools the server offers now, in registration order: the ones `tools/list`
    /// names at this moment, that is [`Server::tools`] without those withheld through
    /// the [`ToolGate`] so far. For a host that offers the tools by other means than
    /// `tools/list` (a model request's `tools[]`, say) and is to follow the gate as an
    /// MCP client does: read it again before each offer. A tool withheld never comes
    /// back, so the count only falls.
    ///
    /// Cheap: while nothing is withheld, one atomic load more than [`Server::tools`];
    /// afterwards, one more load per tool. Nothing is allocated or locked.
    ///
    /// ```
    /// use mcpserver::{Server, Tool, ToolResult};
    /// let tool = |name: &str| Tool::new(name, "A tool", serde_json::json!({"type": "object"}));
    /// let server = Server::builder("t", "1")
    ///     .tool_raw(tool("echo"), |_, _| Ok::<_, String>(ToolResult::text("hi")))
    ///     .tool_raw(tool("fetch"), |_, _| Ok::<_, String>(ToolResult::text("page")))
    ///     .build()
    ///     .unwrap();
    /// let names = |s: &Server| s.offered_tools().map(|t| t.name().to_string()).collect::<Vec<_>>();
    /// assert_eq!(names(&server), ["echo", "fetch"]);
    ///
    /// server.tool_gate().withhold("echo", "its description changed since it was approved");
    /// assert_eq!(names(&server), ["fetch"]);
    /// // Still registered.
    /// assert_eq!(server.tools().count(), 2);
    /// ```
    pub fn offered_tools(&self) -> impl Iterator<Item = &Tool> {
        let inner = &*self.inner;
        let gated = inner.gate.any();
        inner
            .tools
            .iter()
            .enumerate()
            .filter(move |(index, _)| !gated || inner.gate.reason(*index).is_none())
            .map(|(_, tool)| tool)
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
    ///   [`CallStatus::Rejected`](crate::CallStatus::Rejected) before any handler,
    ///   [`CallStatus::InvalidArguments`](crate::CallStatus::InvalidArguments) after). The
    ///   message is the variant's field, word for word; the error's `Display` puts
    ///   `invalid arguments: ` before it;
    /// - a handler's `Err(`[`CallError::Failed`]`)` or panic: `Ok` with
    ///   [`ToolResult::is_error`] set and the text the wire carries;
    /// - otherwise the handler's result.
    ///
    /// A call whose cancellation was raised while it ran returns what the handler
    /// returned, and the hooks see [`CallStatus::Cancelled`](crate::CallStatus::Cancelled)
    /// (the wire sends no answer). [`Hooks::request_received`] is not called: nothing was
    /// read. Calls may run from many threads at once. The context's
    /// protocol revision is 2024-11-05, so a handler's result is returned whole
    /// (structured content included) and misfit arguments are an `Err`.
    ///
    /// [`Hooks::call_rejected`]: crate::Hooks::call_rejected
    /// [`Hooks::call_started`]: crate::Hooks::call_started
    /// [`Hooks::call_finished`]: crate::Hooks::call_finished
    /// [`Hooks::request_received`]: crate::Hooks::request_received
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

    /// A handle that withholds tools from every session of this server while it serves
    /// (they leave `tools/list`, calls to them are refused with the reason), and, with
    /// [`ServerBuilder::notify_list_changed`](crate::ServerBuilder::notify_list_changed),
    /// tells the clients. See [`ToolGate`].
    pub fn tool_gate(&self) -> ToolGate {
        ToolGate::new(self.inner.clone())
    }

    /// A single-threaded session: hand it one line at a time and get the answer lines
    /// back, as a client over [`Server::serve`] would, with the `initialize` state kept
    /// from line to line. See [`Dispatcher`].
    pub fn dispatcher(&self) -> Dispatcher<'_> {
        Dispatcher::new(&self.inner)
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
        Session::new(&self.inner, reader, writer).run()
    }
}
