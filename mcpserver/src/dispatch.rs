//! The single-threaded seam: one JSON-RPC line in, its answer lines out, through the
//! same methods as a session over a transport, with no reader, no threads and no
//! buffering of its own — for tests, fuzzing, and hosts that own their transport.

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::gate::write_change;
use crate::methods::{Flow, Link, Protocol};
use crate::state::{Inner, Listener, StopReason};

/// One client's session, driven a line at a time on the calling thread.
///
/// [`Dispatcher::dispatch`] answers a line exactly as [`Server::serve`](crate::Server::serve)
/// would answer it at that point of a session: the `initialize` state is kept from line
/// to line, the hooks are called, and the answer text is the bytes `serve` writes. What
/// it leaves out is the transport's scheduling: each call runs to its end on the calling
/// thread before `dispatch` returns, so no other line is read meanwhile (a
/// `notifications/cancelled` can only name a call that is not running; use `serve` for
/// calls that run concurrently).
///
/// This type is public API: the crate's own tests and fuzz targets drive the protocol
/// through it, and a host whose transport is not a byte stream (a message queue, a
/// WebSocket) can use it to serve.
///
/// With [`ServerBuilder::notify_list_changed`](crate::ServerBuilder::notify_list_changed),
/// a tool withheld through the [`ToolGate`](crate::ToolGate) after this session answered
/// `initialize` puts `notifications/tools/list_changed` before the next answer `dispatch`
/// returns; a host that must not wait for the next line takes it with
/// [`Dispatcher::notifications`] (when the gate's user tells it to, say).
///
/// ```
/// use mcpserver::{Server, StopReason};
/// let server = Server::builder("t", "1").build().unwrap();
/// let mut session = server.dispatcher();
/// let early = session.dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
/// assert!(early.contains("-32002"), "{early}");
/// session.dispatch(br#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}"#);
/// assert_eq!(
///     session.dispatch(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\r\n"),
///     "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}\n"
/// );
/// assert_eq!(session.dispatch(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), "");
/// session.dispatch(br#"{"jsonrpc":"2.0","id":4,"method":"shutdown"}"#);
/// assert_eq!(session.stopped(), Some(StopReason::Shutdown));
/// ```
pub struct Dispatcher<'s> {
    protocol: Protocol<'s>,
    output: Output,
}

/// The link a dispatcher lends the methods: answers are collected, handlers run here.
struct Output {
    lines: RefCell<Vec<u8>>,
    stopped: Cell<Option<StopReason>>,
    /// The protocol's, for the changes to tell before an answer.
    listener: Arc<Listener>,
}

impl Link for Output {
    type Out = Vec<u8>;

    fn write(&self, body: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> Flow {
        // A change not yet told goes before the answer, as over a transport.
        self.take_list_change();
        let mut lines = self.lines.borrow_mut();
        let before = lines.len();
        match body(&mut lines) {
            Ok(()) => Flow::Continue,
            Err(_) => {
                // Only a serializer can fail here; `serve` would stop on a failed write.
                lines.truncate(before);
                self.stop(StopReason::EndOfInput);
                Flow::Finished
            }
        }
    }

    fn run<T>(&self, handler: impl FnOnce() -> T) -> T {
        handler()
    }

    fn shut_down(&self) {
        self.stop(StopReason::Shutdown);
    }
}

impl Output {
    fn stop(&self, reason: StopReason) {
        if self.stopped.get().is_none() {
            self.stopped.set(Some(reason));
        }
    }

    /// Puts `notifications/tools/list_changed` in the output (for the handshake and for
    /// each subscription told) if the gate told of a change since the last one.
    fn take_list_change(&self) {
        let listener = &*self.listener;
        let pending = &listener.pending;
        if pending.load(Ordering::Relaxed) && pending.swap(false, Ordering::AcqRel) {
            // Writing into a Vec does not fail.
            let _ = write_change(listener, &mut *self.lines.borrow_mut());
        }
    }

    fn take_lines(&self) -> String {
        let lines = std::mem::take(&mut *self.lines.borrow_mut());
        // The methods write JSON only, which is UTF-8.
        String::from_utf8(lines).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }
}

impl<'s> Dispatcher<'s> {
    pub(crate) fn new(inner: &'s Inner) -> Dispatcher<'s> {
        let protocol = Protocol::new(inner);
        let listener = protocol.listener.clone();
        Dispatcher {
            protocol,
            output: Output {
                lines: RefCell::new(Vec::new()),
                stopped: Cell::new(None),
                listener,
            },
        }
    }

    /// Answers one message line: returns the answer lines `serve` would write for it,
    /// each ending in `\n` (one for a request, none for a notification or a response),
    /// after a `notifications/tools/list_changed` line if the tool list changed since the
    /// last one (see [`Dispatcher::notifications`]).
    ///
    /// `line` is one line as the transport frames it: a final `\n` or `\r\n` is
    /// optional; a line over [`ServerBuilder::max_message_size`](crate::ServerBuilder::max_message_size)
    /// gets the same error as over a transport. Once the session has stopped (the client
    /// sent `shutdown`, or [`StopHandle::stop`](crate::StopHandle::stop) was called),
    /// nothing more is read: every line gets an empty answer.
    pub fn dispatch(&mut self, line: &[u8]) -> String {
        if self.protocol.inner.stop.requested.load(Ordering::SeqCst) {
            self.output.stop(StopReason::Stopped);
        }
        if self.output.stopped.get().is_some() {
            return String::new();
        }
        self.output.take_list_change();
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > self.protocol.inner.max_message_size {
            self.protocol.too_large(&self.output);
        } else {
            self.protocol.handle_line(&self.output, line);
        }
        self.output.take_lines()
    }

    /// The lines the session has to send without being asked: a
    /// `notifications/tools/list_changed` line (`\n`-terminated) when a tool was
    /// withheld through the [`ToolGate`](crate::ToolGate) since this session answered
    /// `initialize` and the last notification (only with
    /// [`ServerBuilder::notify_list_changed`](crate::ServerBuilder::notify_list_changed));
    /// otherwise, and once the session has stopped, an empty string. A line taken here
    /// is not returned again by [`Dispatcher::dispatch`].
    pub fn notifications(&mut self) -> String {
        if self.output.stopped.get().is_some() {
            return String::new();
        }
        self.output.take_list_change();
        self.output.take_lines()
    }

    /// Why the session stopped reading, once it has: [`StopReason::Shutdown`] after a
    /// `shutdown` request, [`StopReason::Stopped`] after a [`StopHandle`](crate::StopHandle)
    /// stop.
    pub fn stopped(&self) -> Option<StopReason> {
        self.output.stopped.get()
    }
}
