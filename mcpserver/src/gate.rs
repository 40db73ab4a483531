//! Withholding tools while serving: a [`ToolGate`] takes a registered tool back from
//! every session of its server (it leaves `tools/list`, and a call to it is refused as
//! a tool withheld at build time is), and, with
//! [`ServerBuilder::notify_list_changed`](crate::ServerBuilder::notify_list_changed),
//! tells each initialized session to write `notifications/tools/list_changed`.
//!
//! The call path pays one atomic load for it while nothing is withheld
//! ([`Gate::withheld`]); the rest is on the withholding thread, the lists and the
//! sessions' monitors.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::methods::lock;
use crate::state::{Gate, Inner, Listener};
use crate::tool;

/// The notification a session of the handshake era writes when its tool list changed.
pub(crate) const LIST_CHANGED: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n";

/// Writes what the listener's session is to be told of a change: the handshake era's
/// notification, and one tagged with its subscription id for each open
/// `subscriptions/listen` that asked for `toolsListChanged`.
pub(crate) fn write_change(listener: &Listener, out: &mut impl Write) -> io::Result<()> {
    if listener.handshake.load(Ordering::SeqCst) {
        out.write_all(LIST_CHANGED)?;
    }
    for (id, _) in lock(&listener.subscriptions)
        .iter()
        .filter(|(_, told)| *told)
    {
        out.write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":",
        )?;
        id.write_json(out)?;
        out.write_all(b"}}}\n")?;
    }
    Ok(())
}

/// Withholds tools of a [`Server`](crate::Server) while it serves, from another thread
/// (the one that watches what a tool has become, say). Take it with
/// [`Server::tool_gate`](crate::Server::tool_gate); clones share the server.
///
/// ```
/// use mcpserver::{Server, Tool, ToolResult};
/// let server = Server::builder("t", "1")
///     .notify_list_changed(true)
///     .tool_raw(Tool::new("fetch", "Fetch a page", serde_json::json!({"type": "object"})), |_, _| {
///         Ok::<_, String>(ToolResult::text("page"))
///     })
///     .build()
///     .unwrap();
/// let gate = server.tool_gate();
/// let mut session = server.dispatcher();
/// session.dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#);
///
/// assert!(gate.withhold("fetch", "its description changed since it was approved"));
/// assert!(!gate.withhold("fetch", "again"), "already withheld");
/// assert!(!gate.withhold("nope", "never registered"));
///
/// let answer = session.dispatch(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
/// assert_eq!(
///     answer,
///     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\
///      {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[]}}\n"
/// );
/// let refused = session.dispatch(
///     br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"fetch","arguments":{}}}"#,
/// );
/// assert!(refused.contains(r#"tool \"fetch\" is not available: its description changed"#), "{refused}");
/// ```
#[derive(Clone)]
pub struct ToolGate {
    inner: Arc<Inner>,
}

impl fmt::Debug for ToolGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolGate")
            .field("server", &self.inner.name)
            .field(
                "withheld",
                &self.inner.gate.withheld.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl ToolGate {
    pub(crate) fn new(inner: Arc<Inner>) -> ToolGate {
        ToolGate { inner }
    }

    /// Withholds the registered tool `name` from every session of the server, for the
    /// rest of the server's life: true when it was offered and now is not; false when
    /// no tool of that name is registered (a tool withheld at build time is not) or it
    /// was already withheld (the first reason stays).
    ///
    /// Once this returns, `tools/list` leaves the tool out (and
    /// [`Server::tools`](crate::Server::tools) still names it: it is registered), and a
    /// `tools/call` of it, over any transport or through
    /// [`Server::call`](crate::Server::call), is refused before its handler runs exactly
    /// as a tool [withheld at build time](crate::ServerBuilder::withhold) is: -32602
    /// `tool "NAME" is not available: WHY`, and the hooks see
    /// [`CallStatus::Rejected`](crate::CallStatus::Rejected). A call already running
    /// runs to its end. With
    /// [`notify_list_changed`](crate::ServerBuilder::notify_list_changed), every session
    /// that has answered `initialize` writes `notifications/tools/list_changed`, and
    /// every open `subscriptions/listen` (revision 2026-07-28) that asked for
    /// `toolsListChanged` gets it tagged with its subscription id.
    pub fn withhold(&self, name: &str, why: impl Into<String>) -> bool {
        let inner = &*self.inner;
        let gate = &inner.gate;
        let Some(index) = inner.tools.iter().position(|t| t.name == name) else {
            return false;
        };
        if gate.reasons[index].set(why.into()).is_err() {
            return false;
        }
        {
            let mut lists = lock(&gate.lists);
            let offered = inner
                .tools
                .iter()
                .zip(&gate.reasons)
                .filter(|(_, why)| why.get().is_none())
                .map(|(t, _)| t);
            *lists = Some(Arc::new(tool::list_results(offered, &inner.list_tail)));
            // Under the lock: whoever sees the count finds the list without the tool.
            gate.withheld.fetch_add(1, Ordering::Release);
        }
        for listener in lock(&gate.listeners).iter().filter_map(Weak::upgrade) {
            if listener.wants_changes() {
                listener.pending.store(true, Ordering::SeqCst);
                listener.doorbell.ring();
            }
        }
        true
    }
}

impl Gate {
    pub(crate) fn new(tools: usize) -> Gate {
        Gate {
            withheld: 0.into(),
            reasons: (0..tools).map(|_| OnceLock::new()).collect(),
            lists: Mutex::new(None),
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// A listener for a new session, told of every change once it is ready.
    pub(crate) fn listen(&self) -> Arc<Listener> {
        let listener = Arc::new(Listener::new());
        let mut listeners = lock(&self.listeners);
        // Sessions that ended leave dead entries: drop them here, so the list stays as
        // long as the sessions alive.
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(Arc::downgrade(&listener));
        listener
    }

    /// True when some tool was withheld: the one load the call path pays.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.withheld.load(Ordering::Acquire) != 0
    }

    /// Why tool `index` was withheld, if it was.
    pub(crate) fn reason(&self, index: usize) -> Option<&str> {
        self.reasons[index].get().map(String::as_str)
    }

    /// The whole `tools/list` results without the withheld tools, once one is.
    pub(crate) fn lists(&self) -> Option<Arc<[String; 3]>> {
        lock(&self.lists).clone()
    }
}
