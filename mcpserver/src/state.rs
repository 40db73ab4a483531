//! The state every part of a running server shares: the settings and tools a built
//! [`Server`](crate::Server) holds ([`Inner`]), the tools withheld while serving and the
//! sessions to tell ([`Gate`]), the stop request, and why serving ended. It imports
//! nothing of the modules that use it (builder, server, gate, session, methods,
//! dispatch): they all import it, one way.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::doorbell::Doorbell;
use crate::hooks::Hooks;
use crate::tool::{Handler, Tool};

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

pub(crate) struct Inner {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
    pub max_message_size: usize,
    pub max_concurrency: usize,
    /// How long calls may still run after end of input before they are cancelled.
    pub end_of_input_grace: Option<std::time::Duration>,
    pub page_size: Option<usize>,
    pub accept_newer: bool,
    /// None when the host set none: the call path then skips the clock too.
    pub hooks: Option<Box<dyn Hooks>>,
    pub tools: Vec<Tool>,
    /// The tools' names, shared with every call's context.
    pub tool_names: Vec<Arc<str>>,
    pub handlers: Vec<Handler>,
    /// The whole `tools/list` result, for 2024-11-05 and for newer revisions.
    pub list_json: [String; 2],
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
    pub lists: Mutex<Option<Arc<[String; 2]>>>,
    /// The sessions to tell (with `notify_list_changed` only).
    pub listeners: Mutex<Vec<Weak<Listener>>>,
}

/// A session's ear for changes of the tool list.
pub(crate) struct Listener {
    /// The session has answered `initialize`: changes from now on are notified.
    pub ready: AtomicBool,
    /// A change waits to be notified.
    pub pending: AtomicBool,
    /// Wakes the session's thread that writes the notification (its monitor).
    pub doorbell: Doorbell,
}

impl Listener {
    pub(crate) fn new() -> Listener {
        Listener {
            ready: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            doorbell: Doorbell::new(),
        }
    }
}

#[derive(Default)]
pub(crate) struct StopSignal {
    pub requested: AtomicBool,
    /// Wakes a stdio reader blocked in `poll` (set by `serve_stdio` when a handle exists).
    pub wake: Mutex<Option<io::PipeWriter>>,
    pub handle_taken: AtomicBool,
}
