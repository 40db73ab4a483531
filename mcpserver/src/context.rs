//! What a handler knows about the call it serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::id::RequestId;

/// The client, as it named itself in `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
}

/// A flag the server raises when the client cancels a call (`notifications/cancelled`).
///
/// Clone it into threads or child-process watchers that must stop when the call is
/// cancelled.
#[derive(Debug, Clone, Default)]
pub struct CancellationToken(Arc<AtomicBool>);

impl CancellationToken {
    /// A token that is not cancelled.
    pub fn new() -> CancellationToken {
        CancellationToken::default()
    }

    /// True once the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Raises the flag.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The context of one `tools/call`: given to the handler and to the hooks.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub(crate) request_id: RequestId,
    pub(crate) tool: Arc<str>,
    pub(crate) cancellation: CancellationToken,
    pub(crate) client: Option<Arc<ClientInfo>>,
    pub(crate) protocol_version: &'static str,
    pub(crate) meta: Option<Value>,
}

impl CallContext {
    /// A context for a call to `tool` made outside of a transport: by an in-process
    /// host through [`Server::call`](crate::Server::call), or by a test. It has no
    /// client info, revision 2024-11-05, no `_meta`, and a cancellation of its own.
    ///
    /// ```
    /// use mcpserver::{CallContext, CancellationToken, RequestId};
    /// let cancel = CancellationToken::new();
    /// let ctx = CallContext::new(RequestId::String("step-1/call-3".into()), "Read")
    ///     .with_meta(serde_json::json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
    ///     .with_cancellation(cancel.clone());
    /// cancel.cancel();
    /// assert!(ctx.is_cancelled());
    /// assert_eq!(ctx.meta().unwrap()["traceparent"].as_str().unwrap().len(), 55);
    /// ```
    pub fn new(request_id: RequestId, tool: &str) -> CallContext {
        CallContext {
            request_id,
            tool: Arc::from(tool),
            cancellation: CancellationToken::new(),
            client: None,
            protocol_version: crate::PROTOCOL_VERSION,
            meta: None,
        }
    }

    /// Sets what [`CallContext::meta`] returns, as a request's `params._meta` would (a
    /// W3C `traceparent`, say); `null` means no `_meta`, as on the wire.
    pub fn with_meta(mut self, meta: Value) -> CallContext {
        self.meta = (!meta.is_null()).then_some(meta);
        self
    }

    /// Makes the call cancellable by the host: raising `token` (from any thread) is what
    /// `notifications/cancelled` does to a call read from the transport.
    pub fn with_cancellation(mut self, token: CancellationToken) -> CallContext {
        self.cancellation = token;
        self
    }

    /// The JSON-RPC id of the `tools/call` request.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// The name of the tool called.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// True once the client has cancelled this call; a long handler should check it and
    /// return early (its answer is not sent).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled()
    }

    /// The call's cancellation flag, to hand to other threads.
    pub fn cancellation(&self) -> CancellationToken {
        self.cancellation.clone()
    }

    /// The client's name and version from `initialize`.
    pub fn client_info(&self) -> Option<&ClientInfo> {
        self.client.as_deref()
    }

    /// The protocol revision the call was served under: the one its `_meta` named
    /// (2026-07-28), else the one agreed in `initialize`.
    pub fn protocol_version(&self) -> &str {
        self.protocol_version
    }

    /// `params._meta` of the request, when the client sent one (for example a W3C
    /// `traceparent`). Of a request of revision 2026-07-28, without the members the
    /// library reads itself (`io.modelcontextprotocol/protocolVersion`,
    /// `…/clientCapabilities`, `…/clientInfo`: see [`CallContext::protocol_version`] and
    /// [`CallContext::client_info`]), and `None` when nothing else was in it.
    pub fn meta(&self) -> Option<&Value> {
        self.meta.as_ref()
    }

    /// The client's W3C trace context: `_meta.traceparent`, when it sent one (the
    /// span of the client's own call; a host may link or parent its span to it). Its
    /// form is the host's to check.
    pub fn trace_parent(&self) -> Option<&str> {
        self.meta_str("traceparent")
    }

    /// `_meta.tracestate`, the vendor part of the client's trace context.
    pub fn trace_state(&self) -> Option<&str> {
        self.meta_str("tracestate")
    }

    fn meta_str(&self, key: &str) -> Option<&str> {
        self.meta.as_ref()?.get(key)?.as_str()
    }
}
