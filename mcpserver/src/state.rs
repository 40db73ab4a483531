//! The state every part of a running server shares: the settings and tools a built
//! [`Server`](crate::Server) holds ([`Inner`]), the stop request, and why serving ended.
//! It imports nothing of the modules that use it (builder, server, session, methods,
//! dispatch): they all import it, one way.

use std::io;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

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
    pub stop: Arc<StopSignal>,
}

#[derive(Default)]
pub(crate) struct StopSignal {
    pub requested: AtomicBool,
    /// Wakes a stdio reader blocked in `poll` (set by `serve_stdio` when a handle exists).
    pub wake: Mutex<Option<io::PipeWriter>>,
    pub handle_taken: AtomicBool,
}
