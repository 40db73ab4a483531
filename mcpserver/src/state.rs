//! The state every part of a running server shares: the settings and tools a built
//! [`Server`](crate::Server) holds ([`Inner`]), the tools withheld while serving and the
//! sessions to tell ([`Gate`]), the stop request, and why serving ended. It imports
//! nothing of the modules that use it (builder, server, gate, session, methods,
//! dispatch): they all import it, one way.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde_json::value::RawValue;

use crate::context::CallContext;
use crate::doorbell::Doorbell;
use crate::era::Revisions;
use crate::hooks::Hooks;
use crate::id::RequestId;
use crate::tool::{Handler, Tool, ToolResult};

/// Why [`Server::serve`](crate::Server::serve) returned (or a
/// [`Dispatcher`](crate::Dispatcher) stopped reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The input ended; every request read was answered.
    EndOfInput,
    /// The client sent `shutdown`; it was answered, as was every request before it.
    Shutdown,
    /// The host called [`StopHandle::stop`](crate::StopHandle::stop); every call in flight was answered.
    Stopped,
}

impl StopReason {
    /// `end_of_input`, `shutdown` or `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndOfInput => "end_of_input",
            StopReason::Shutdown => "shutdown",
            StopReason::Stopped => "stopped",
        }
    }
}

/// A host's pass over every tool result ([`crate::ServerBuilder::result_filter`]).
pub(crate) type ResultFilter = Box<dyn Fn(&CallContext, &mut ToolResult) + Send + Sync>;

pub(crate) struct Inner {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
    pub max_message_size: usize,
    pub max_concurrency: usize,
    /// How long calls may still run after end of input before they are cancelled.
    pub end_of_input_grace: Option<std::time::Duration>,
    pub page_size: Option<usize>,
    /// The revisions served, of either era.
    pub revisions: Revisions,
    /// None when the host set none: the call path then skips the clock too.
    pub hooks: Option<Box<dyn Hooks>>,
    /// What every result passes through before it is sent (and the hooks see it).
    pub result_filter: Option<ResultFilter>,
    pub tools: Vec<Tool>,
    /// The tools' names, shared with every call's context.
    pub tool_names: Vec<Arc<str>>,
    pub handlers: Vec<Handler>,
    /// The whole `tools/list` result, for 2024-11-05, for the newer revisions of the
    /// handshake era, and for the stateless era ([`Shape`](crate::tool::Shape)).
    pub list_json: [String; 3],
    /// `{"io.modelcontextprotocol/serverInfo":{…}}`: every stateless result's `_meta`.
    pub server_meta: Box<RawValue>,
    /// What a stateless `tools/list` result ends with: `resultType`, the cache hints
    /// and `_meta`.
    pub list_tail: String,
    /// The whole `server/discover` result.
    pub discover_json: String,
    /// Tools the host keeps from this client, with why: a call to one is rejected
    /// with the reason instead of "unknown tool".
    pub withheld: Vec<(String, String)>,
    /// `initialize` announces `listChanged`, and sessions are told when a tool is
    /// withheld while serving.
    pub notify_list_changed: bool,
    pub gate: Gate,
    pub stop: Arc<StopSignal>,
}

/// The registered tools withheld while serving (through a
/// [`ToolGate`](crate::ToolGate)), and the sessions to tell.
pub(crate) struct Gate {
    /// How many tools were withheld so far. While none is, a call's lookup costs one
    /// load of this more than a server without a gate.
    pub withheld: AtomicUsize,
    /// Why each registered tool (by index) was withheld, once it is.
    pub reasons: Box<[OnceLock<String>]>,
    /// The whole `tools/list` results (as `Inner::list_json`) without the withheld
    /// tools, once one is.
    pub lists: Mutex<Option<Arc<[String; 3]>>>,
    /// The sessions to tell (with `notify_list_changed` only).
    pub listeners: Mutex<Vec<Weak<Listener>>>,
}

/// A session's ear for changes of the tool list: who in the session is to be told.
pub(crate) struct Listener {
    /// The session answered `initialize` (with `notify_list_changed`): changes from
    /// now on are notified the handshake way. Set while the answer is written, before
    /// it is flushed, so that no change after the client read it goes untold.
    pub handshake: AtomicBool,
    /// The open `subscriptions/listen` requests (stateless era), by id, and whether
    /// each asked for `toolsListChanged` (and is told). Registered as their
    /// acknowledgement is written, as `handshake` is.
    pub subscriptions: Mutex<Vec<(RequestId, bool)>>,
    /// A change waits to be notified.
    pub pending: AtomicBool,
    /// Wakes the session's thread that writes the notification (its monitor).
    pub doorbell: Doorbell,
}

impl Listener {
    pub(crate) fn new() -> Listener {
        Listener {
            handshake: AtomicBool::new(false),
            subscriptions: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            doorbell: Doorbell::new(),
        }
    }

    /// True when someone in the session is to be told of a change.
    pub(crate) fn wants_changes(&self) -> bool {
        self.handshake.load(std::sync::atomic::Ordering::SeqCst)
            || self
                .subscriptions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|(_, told)| *told)
    }
}

#[derive(Default)]
pub(crate) struct StopSignal {
    pub requested: AtomicBool,
    /// Wakes a stdio reader blocked in `poll` (set by `serve_stdio` when a handle exists).
    pub wake: Mutex<Option<io::PipeWriter>>,
    pub handle_taken: AtomicBool,
}
