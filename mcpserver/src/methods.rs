//! The MCP methods: what a line means and what to answer. `initialize`, `ping`,
//! `tools/list`, `tools/call`, `shutdown`, `notifications/cancelled` (the handshake
//! era), `server/discover` and `subscriptions/listen` (the stateless era, judged per
//! request by `era.rs`), and the error answers, whoever reads the lines and whichever
//! thread runs the calls.
//!
//! A session over a transport (`session.rs`) and the single-threaded
//! [`Dispatcher`](crate::Dispatcher) both hand each line to [`Protocol::handle_line`],
//! with a [`Link`] through which the methods write answers and run handlers. The one
//! path of a `tools/call` — find the tool, check the arguments' shape, run the handler
//! between the hooks — is here as well, and [`Server::call`](crate::Server::call) takes
//! it too.

use std::io::{self, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::PROTOCOL_VERSION;
use crate::context::{CallContext, CancellationToken, ClientInfo};
use crate::era::{self, Judged, Stateless};
use crate::hooks::{CallOutcome, CallStatus};
use crate::jsonrpc::{self, Call, CallParams, ErrorAnswer, Message, RequestId};
use crate::state::{Inner, Listener};
use crate::tool::{Outcome, Shape, Tool, ToolPage, ToolResult, with_tail};

/// Whether the session goes on reading after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// Read nothing more: the client sent `shutdown`, or can no longer read answers.
    Finished,
}

/// What the methods need from whoever reads the lines and schedules the calls.
pub(crate) trait Link {
    type Out: Write;

    /// Writes one whole answer line; [`Flow::Finished`] when it could not be written.
    fn write(&self, body: impl FnOnce(&mut Self::Out) -> io::Result<()>) -> Flow;

    /// Runs a tool's handler (the session may let another thread read meanwhile).
    fn run<T>(&self, handler: impl FnOnce() -> T) -> T;

    /// How many calls run now, when that is the session's bound (`max_concurrency`):
    /// a further call is refused at once rather than waiting unread.
    fn busy(&self) -> Option<usize> {
        None
    }

    /// `shutdown` was answered: read nothing more, finish the calls in flight.
    fn shut_down(&self);

    /// The session now has someone to tell of tool list changes (it answered
    /// `initialize`, or acknowledged a `subscriptions/listen`): a thread must be there
    /// to write them while the reader waits for input.
    fn listening(&self) {}
}

/// The protocol state of one session: what `initialize` agreed, the calls running, and
/// who is to be told of tool list changes.
pub(crate) struct Protocol<'s> {
    pub inner: &'s Inner,
    init: OnceLock<Agreement>,
    /// Registered with the gate with `notify_list_changed` only.
    pub listener: Arc<Listener>,
    /// The client a stateless request last named (one allocation per client).
    last_client: Mutex<Option<Arc<ClientInfo>>>,
    /// Calls running, with their cancellation flags (a few at most: a list beats a map).
    inflight: Mutex<Vec<(RequestId, CancellationToken)>>,
    /// Set when the calls were cancelled at end of input: they are still answered (every
    /// request read is), where a call the client cancelled is not.
    cancelled_at_end: std::sync::atomic::AtomicBool,
}

/// What the session agreed with the client in `initialize`.
struct Agreement {
    client: Option<Arc<ClientInfo>>,
    version: &'static str,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler never holds these locks; recover rather than cascade.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Deserialize, Default)]
struct InitParams {
    #[serde(default, rename = "protocolVersion")]
    protocol_version: Option<String>,
    #[serde(default, rename = "clientInfo")]
    client_info: Option<ClientInfoWire>,
}

#[derive(Deserialize)]
struct ClientInfoWire {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

#[derive(Deserialize, Default)]
struct ListParams {
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Deserialize)]
struct CancelParams {
    #[serde(rename = "requestId")]
    request_id: Value,
}

#[derive(Deserialize, Default)]
struct ListenParams {
    #[serde(default)]
    notifications: ListenFilter,
}

#[derive(Deserialize, Default)]
struct ListenFilter {
    #[serde(default, rename = "toolsListChanged")]
    tools_list_changed: bool,
}

impl<'s> Protocol<'s> {
    pub(crate) fn new(inner: &'s Inner) -> Protocol<'s> {
        Protocol {
            inner,
            init: OnceLock::new(),
            listener: if inner.notify_list_changed {
                inner.gate.listen()
            } else {
                Arc::new(Listener::new())
            },
            last_client: Mutex::new(None),
            inflight: Mutex::new(Vec::new()),
            cancelled_at_end: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Answers one line (without its terminator), running the call it may carry.
    // `#[inline]` here and on the call path below: these run once per call, and in a
    // module of their own they would land in another codegen unit than the session's
    // loop (measured: 167 more instructions per call without the hints, 98 with).
    #[inline]
    pub(crate) fn handle_line(&self, link: &impl Link, line: &[u8]) -> Flow {
        let (id, method, params) = match jsonrpc::classify(line) {
            Message::Invalid(e) => return answer_error(link, &e),
            Message::Response => return Flow::Continue,
            Message::Notification { method, params } => {
                if let Some(hooks) = &self.inner.hooks {
                    hooks.request_received(&method, None);
                }
                if method == "notifications/cancelled" {
                    self.cancel(params);
                }
                return Flow::Continue;
            }
            Message::Call { id, mut call } => {
                if let Some(hooks) = &self.inner.hooks {
                    hooks.request_received("tools/call", Some(&id));
                }
                return match self.judge_call(&id, &mut call) {
                    Judged::Handshake if self.init.get().is_none() => {
                        let message = not_initialized_message("tools/call");
                        self.reject_call(link, id, &call, jsonrpc::SERVER_NOT_INITIALIZED, message)
                    }
                    Judged::Handshake => self.run_call(link, id, call, None),
                    Judged::Stateless(request) => self.run_call(link, id, call, Some(request)),
                    Judged::Refused(e) => self.refuse_call(link, &call, e),
                };
            }
            Message::Request { id, method, params } => (id, method, params),
        };
        if let Some(hooks) = &self.inner.hooks {
            hooks.request_received(&method, Some(&id));
        }
        {
            match self.judge(&id, era::params_meta(params)) {
                // `server/discover` exists in the stateless era only: without a revision
                // in its `_meta` it is a malformed request of that era.
                Judged::Handshake
                    if method == "server/discover"
                        && !self.inner.revisions.stateless.is_empty() =>
                {
                    return answer_error(
                        link,
                        &ErrorAnswer::new(
                            Some(id),
                            jsonrpc::INVALID_PARAMS,
                            format!(
                                "invalid params: server/discover is a request of revision {}: its \"_meta\" needs \"{}\" and \"io.modelcontextprotocol/clientCapabilities\"",
                                self.inner.revisions.supported().join(", "),
                                era::VERSION_KEY
                            ),
                        ),
                    );
                }
                Judged::Handshake => {}
                Judged::Stateless(request) => {
                    return self.stateless(link, id, &method, params, request);
                }
                Judged::Refused(e) => {
                    if method == "tools/call"
                        && let Some(call) = params
                            .and_then(|p| serde_json::from_str::<CallParams<'_>>(p.get()).ok())
                    {
                        return self.refuse_call(link, &call.into(), e);
                    }
                    return answer_error(link, &e);
                }
            }
        }
        let initialized = self.init.get().is_some();
        match &*method {
            "ping" => answer(link, &id, |w| w.write_all(b"{}")),
            "initialize" => self.initialize(link, id, params),
            "tools/call" if !initialized => {
                match params.and_then(|p| serde_json::from_str::<CallParams<'_>>(p.get()).ok()) {
                    Some(call) => self.reject_call(
                        link,
                        id,
                        &call.into(),
                        jsonrpc::SERVER_NOT_INITIALIZED,
                        not_initialized_message("tools/call"),
                    ),
                    None => not_initialized(link, id, &method),
                }
            }
            "tools/list" | "shutdown" if !initialized => not_initialized(link, id, &method),
            "tools/list" => self.list(link, id, params, self.shape()),
            "tools/call" => self.call(link, id, params, None),
            "shutdown" => {
                self.close_subscriptions(link);
                answer(link, &id, |w| w.write_all(b"{}"));
                link.shut_down();
                Flow::Finished
            }
            _ => answer_error(
                link,
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "method not found: \"{method}\" (this server offers initialize, ping, tools/list, tools/call, shutdown)"
                    ),
                ),
            ),
        }
    }

    /// Answers a line longer than the limit, which the framing skipped.
    pub(crate) fn too_large(&self, link: &impl Link) -> Flow {
        answer_error(
            link,
            &ErrorAnswer::new(
                None,
                jsonrpc::INVALID_REQUEST,
                format!(
                    "message too large: a line is limited to {} bytes; it was skipped",
                    self.inner.max_message_size
                ),
            ),
        )
    }

    /// Which era a call is in: by what the scanner read of its `_meta`, else by the text.
    #[inline]
    fn judge_call<'a>(&self, id: &RequestId, call: &mut Call<'a>) -> Judged<'a> {
        match call.meta_read.take() {
            Some(read) => {
                let agreed = self.init.get().map(|a| a.version);
                era::judge_read(&self.inner.revisions, id, read, agreed)
            }
            None => self.judge(id, call.meta),
        }
    }

    /// Which era a request is in, by its `_meta` text.
    #[inline]
    fn judge<'a>(&self, id: &RequestId, meta: Option<&'a str>) -> Judged<'a> {
        // A handshake request without `_meta` pays this one test.
        if meta.is_none() {
            return Judged::Handshake;
        }
        let agreed = self.init.get().map(|a| a.version);
        era::judge(&self.inner.revisions, id, meta, agreed)
    }

    /// Answers a request of the stateless era (revision 2026-07-28 and later).
    fn stateless(
        &self,
        link: &impl Link,
        id: RequestId,
        method: &str,
        params: Option<&RawValue>,
        request: Stateless<'_>,
    ) -> Flow {
        match method {
            "server/discover" => answer(link, &id, |w| {
                w.write_all(self.inner.discover_json.as_bytes())
            }),
            "tools/list" => self.list(link, id, params, Shape::Stateless),
            "tools/call" => self.call(link, id, params, Some(request)),
            "subscriptions/listen" => self.listen(link, id, params),
            _ => answer_error(
                link,
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::METHOD_NOT_FOUND,
                    format!(
                        "method not found: \"{method}\" (under revision {} this server offers server/discover, tools/list, tools/call, subscriptions/listen)",
                        request.version
                    ),
                ),
            ),
        }
    }

    /// `subscriptions/listen`: acknowledges the filter it honours (`toolsListChanged`
    /// when the server notifies list changes) and keeps the request open; it is
    /// answered when the session ends, and never after the client cancels it.
    fn listen(&self, link: &impl Link, id: RequestId, params: Option<&RawValue>) -> Flow {
        let params: ListenParams = match params_of("subscriptions/listen", params) {
            Ok(p) => p,
            Err(message) => return invalid_params(link, id, message),
        };
        if lock(&self.listener.subscriptions)
            .iter()
            .any(|(open, _)| *open == id)
        {
            return answer_error(
                link,
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::INVALID_REQUEST,
                    "a subscriptions/listen with this id is open: use a new id for each request",
                ),
            );
        }
        let told = params.notifications.tools_list_changed && self.inner.notify_list_changed;
        let flow = link.write(|w| {
            w.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":")?;
            id.write_json(w)?;
            w.write_all(if told {
                b"},\"notifications\":{\"toolsListChanged\":true}}}\n"
            } else {
                b"},\"notifications\":{}}}\n"
            })?;
            // Registered before the acknowledgement leaves (the writer is flushed after
            // this, under the same lock): no change after it goes untold, and none is
            // written before it.
            lock(&self.listener.subscriptions).push((id.clone(), told));
            Ok(())
        });
        if told && flow == Flow::Continue {
            link.listening();
        }
        flow
    }

    /// Answers every open `subscriptions/listen`: the session ends, and so do they.
    pub(crate) fn close_subscriptions(&self, link: &impl Link) {
        let open = std::mem::take(&mut *lock(&self.listener.subscriptions));
        for (id, _) in open {
            answer(link, &id, |w| {
                w.write_all(b"{\"resultType\":\"complete\",\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":")?;
                id.write_json(w)?;
                let server = self.inner.server_meta.get();
                // `,"io.modelcontextprotocol/serverInfo":{…}}}` from `{"…serverInfo":{…}}`.
                w.write_all(b",")?;
                w.write_all(&server.as_bytes()[1..])?;
                w.write_all(b"}")
            });
        }
    }

    fn initialize(&self, link: &impl Link, id: RequestId, params: Option<&RawValue>) -> Flow {
        if self.init.get().is_some() {
            return answer_error(
                link,
                &ErrorAnswer::new(
                    Some(id),
                    jsonrpc::INVALID_REQUEST,
                    "already initialized: \"initialize\" may be sent once per session",
                ),
            );
        }
        let params: InitParams = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let asked = params
            .protocol_version
            .as_deref()
            .unwrap_or(PROTOCOL_VERSION);
        let Some(version) = self.inner.revisions.agree(asked) else {
            // A server of the stateless era only: the client learns what it serves.
            let mut e = era::unsupported(&self.inner.revisions, Some(id), asked);
            e.message = format!(
                "{}; it has no initialize: send each request with \"_meta\".\"{}\"",
                e.message,
                era::VERSION_KEY
            );
            return answer_error(link, &e);
        };
        let client = params.client_info.map(|c| {
            Arc::new(ClientInfo {
                name: c.name,
                version: c.version,
            })
        });
        let _ = self.init.set(Agreement { client, version });
        let mut result = serde_json::json!({
            "protocolVersion": version,
            "capabilities": { "tools": { "listChanged": self.inner.notify_list_changed } },
            "serverInfo": { "name": self.inner.name, "version": self.inner.version },
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = Value::String(text.clone());
        }
        let notify = self.inner.notify_list_changed;
        let flow = answer(link, &id, |w| {
            serde_json::to_writer(&mut *w, &result).map_err(io::Error::from)?;
            // Told of changes from before the answer leaves (the writer is flushed after
            // this, under the same lock): a change the client makes as soon as it reads
            // the answer is told, and no notification comes before the answer.
            if notify {
                self.listener
                    .handshake
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(())
        });
        if notify && flow == Flow::Continue {
            link.listening();
        }
        flow
    }

    /// The shape of a handshake-era result in this session.
    fn shape(&self) -> Shape {
        self.init
            .get()
            .map_or(Shape::Legacy, |a| Shape::of(a.version))
    }

    fn list(
        &self,
        link: &impl Link,
        id: RequestId,
        params: Option<&RawValue>,
        shape: Shape,
    ) -> Flow {
        let newer = shape != Shape::Legacy;
        let params: ListParams = match params_of("tools/list", params) {
            Ok(p) => p,
            Err(message) => return invalid_params(link, id, message),
        };
        let gate = &self.inner.gate;
        let withheld = gate.any();
        let offered: Vec<&Tool>;
        let (tools, size) = match self.inner.page_size {
            None => (&[][..], 0),
            Some(size) => {
                offered = (self.inner.tools.iter().enumerate())
                    .filter(|(index, _)| !withheld || gate.reason(*index).is_none())
                    .map(|(_, tool)| tool)
                    .collect();
                (&offered[..], size)
            }
        };
        let total = tools.len();
        let start = match params.cursor.as_deref() {
            None => 0,
            Some(c) => match c
                .strip_prefix("page:")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(n) if n > 0 && n < total && self.inner.page_size.is_some() => n,
                _ => {
                    return answer_error(
                        link,
                        &ErrorAnswer::new(
                            Some(id),
                            jsonrpc::INVALID_PARAMS,
                            format!(
                                "invalid cursor {c:?}: pass the nextCursor of a previous tools/list answer, or no cursor for the first page"
                            ),
                        ),
                    );
                }
            },
        };
        if self.inner.page_size.is_none() {
            if withheld && let Some(lists) = gate.lists() {
                return answer(link, &id, |w| w.write_all(lists[shape as usize].as_bytes()));
            }
            let body = &self.inner.list_json[shape as usize];
            return answer(link, &id, |w| w.write_all(body.as_bytes()));
        }
        let end = (start + size).min(total);
        let page = ToolPage {
            tools: tools[start..end].iter().map(|t| t.listed(newer)).collect(),
            next_cursor: (end < total).then(|| format!("page:{end}")),
        };
        let mut body = serde_json::to_string(&page).expect("a tool list serializes");
        if shape == Shape::Stateless {
            body = with_tail(&body, &self.inner.list_tail);
        }
        answer(link, &id, |w| w.write_all(body.as_bytes()))
    }

    /// True while a call runs.
    pub(crate) fn calls_running(&self) -> bool {
        !lock(&self.inflight).is_empty()
    }

    /// Raises the cancellation of every call running; their answers are still written.
    pub(crate) fn cancel_all(&self) {
        self.cancelled_at_end
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for (_, token) in lock(&self.inflight).iter() {
            token.cancel();
        }
    }

    fn cancel(&self, params: Option<&RawValue>) {
        let Some(p) = params.and_then(|p| serde_json::from_str::<CancelParams>(p.get()).ok())
        else {
            return;
        };
        let id = match p.request_id {
            Value::String(s) => RequestId::String(s),
            Value::Number(n) => match n.as_i64() {
                Some(n) => RequestId::Number(n),
                None => return,
            },
            _ => return,
        };
        if let Some((_, token)) = lock(&self.inflight).iter().find(|(i, _)| *i == id) {
            token.cancel();
            return;
        }
        // A `subscriptions/listen` the client ends: it is not answered.
        lock(&self.listener.subscriptions).retain(|(open, _)| *open != id);
    }

    /// A `tools/call` the fast path did not read: its params, read carefully.
    fn call(
        &self,
        link: &impl Link,
        id: RequestId,
        params: Option<&RawValue>,
        stateless: Option<Stateless<'_>>,
    ) -> Flow {
        let bad =
            |message: String| ErrorAnswer::new(Some(id.clone()), jsonrpc::INVALID_PARAMS, message);
        let params: CallParams<'_> = match params.map(|p| serde_json::from_str(p.get())) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return answer_error(link, &bad(format!("invalid tools/call params: {e}")));
            }
            None => {
                return answer_error(
                    link,
                    &bad(
                        "tools/call needs params with the tool's \"name\" and its \"arguments\""
                            .into(),
                    ),
                );
            }
        };
        self.run_call(link, id, params.into(), stateless)
    }

    /// Runs a call whose params are read: finds the tool, checks the arguments' shape,
    /// runs the handler through the link and answers (unless the call was cancelled).
    /// `stateless` is the request's revision and client when `_meta` named them.
    #[inline]
    fn run_call(
        &self,
        link: &impl Link,
        id: RequestId,
        params: Call<'_>,
        stateless: Option<Stateless<'_>>,
    ) -> Flow {
        let found = self.inner.find_tool(&params.name).and_then(|index| {
            object_arguments(&params.name, params.arguments).map(|args| (index, args))
        });
        let (index, arguments) = match found {
            Ok(found) => found,
            Err(message) => {
                return self.reject_call_as(
                    link,
                    id,
                    &params,
                    jsonrpc::INVALID_PARAMS,
                    message,
                    stateless,
                );
            }
        };
        if let Some(running) = link.busy() {
            let message = format!(
                "server busy: {running} tool calls are running, the most this server runs at \
                 once (max_concurrency); retry when one has answered"
            );
            // The stateless era keeps implementation codes out of JSON-RPC's range.
            let code = match stateless {
                None => jsonrpc::SERVER_BUSY,
                Some(_) => jsonrpc::SERVER_BUSY_STATELESS,
            };
            return self.reject_call_as(link, id, &params, code, message, stateless);
        }
        let ctx = self.context_as(
            id,
            self.inner.tool_names[index].clone(),
            params.meta,
            stateless,
        );
        lock(&self.inflight).push((ctx.request_id.clone(), ctx.cancellation.clone()));
        let ran = link.run(|| self.inner.run_handler(index, &ctx, arguments));
        {
            let mut inflight = lock(&self.inflight);
            if let Some(i) = inflight.iter().position(|(i, _)| *i == ctx.request_id) {
                inflight.swap_remove(i);
            }
        }
        if ran.cancelled
            && !self
                .cancelled_at_end
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Flow::Continue;
        }
        match &ran.answer {
            Ok(result) => {
                let shape = Shape::of(ctx.protocol_version);
                let meta = &*self.inner.server_meta;
                answer(link, &ctx.request_id, |w| result.write_json(w, shape, meta))
            }
            Err(text) => answer_error(
                link,
                &ErrorAnswer::new(
                    Some(ctx.request_id.clone()),
                    jsonrpc::INVALID_PARAMS,
                    text.clone(),
                ),
            ),
        }
    }

    /// Answers a call that names a tool with an error before any handler runs, and
    /// reports it to the hooks as [`CallStatus::Rejected`] (so a host audits it too).
    fn reject_call(
        &self,
        link: &impl Link,
        id: RequestId,
        call: &Call<'_>,
        code: i64,
        message: String,
    ) -> Flow {
        self.reject_call_as(link, id, call, code, message, None)
    }

    /// [`Protocol::reject_call`] for a call of either era.
    fn reject_call_as(
        &self,
        link: &impl Link,
        id: RequestId,
        call: &Call<'_>,
        code: i64,
        message: String,
        stateless: Option<Stateless<'_>>,
    ) -> Flow {
        if self.inner.hooks.is_some() {
            let ctx = self.context_as(id.clone(), Arc::from(&*call.name), call.meta, stateless);
            self.inner.reject(&ctx, call.arguments, &message);
        }
        answer_error(link, &ErrorAnswer::new(Some(id), code, message))
    }

    /// Answers a call refused before any method (an unsupported revision, a missing
    /// `_meta` field), and tells the hooks, as every call that names a tool.
    fn refuse_call(&self, link: &impl Link, call: &Call<'_>, e: ErrorAnswer) -> Flow {
        if self.inner.hooks.is_some()
            && let Some(id) = e.id.clone()
        {
            let ctx = self.context_as(id, Arc::from(&*call.name), call.meta, None);
            self.inner.reject(&ctx, call.arguments, &e.message);
        }
        answer_error(link, &e)
    }

    /// The context of a call to `tool` in this session: of the revision its `_meta`
    /// named (`stateless`), else of what `initialize` agreed.
    #[inline]
    fn context_as(
        &self,
        id: RequestId,
        tool: Arc<str>,
        meta: Option<&str>,
        stateless: Option<Stateless<'_>>,
    ) -> CallContext {
        let agreement = self.init.get();
        let (client, protocol_version, meta) = match stateless {
            None => (
                agreement.and_then(|a| a.client.clone()),
                agreement.map_or(PROTOCOL_VERSION, |a| a.version),
                // Checked JSON: it reads as a Value.
                meta.filter(|m| *m != "null")
                    .and_then(|m| serde_json::from_str(m).ok()),
            ),
            Some(request) => (
                request
                    .client
                    .map(|c| c.share(&mut lock(&self.last_client))),
                request.version,
                meta.and_then(|m| era::meta_beyond_protocol(m, request.other_meta)),
            ),
        };
        CallContext {
            request_id: id,
            tool,
            cancellation: CancellationToken::new(),
            client,
            protocol_version,
            meta,
        }
    }
}

#[inline]
fn answer<L: Link>(
    link: &L,
    id: &RequestId,
    body: impl FnOnce(&mut L::Out) -> io::Result<()>,
) -> Flow {
    link.write(|w| {
        jsonrpc::write_result_head(w, id)?;
        body(w)?;
        w.write_all(b"}\n")
    })
}

fn answer_error(link: &impl Link, err: &ErrorAnswer) -> Flow {
    link.write(|w| jsonrpc::write_error(w, err))
}

fn invalid_params(link: &impl Link, id: RequestId, message: String) -> Flow {
    answer_error(
        link,
        &ErrorAnswer::new(Some(id), jsonrpc::INVALID_PARAMS, message),
    )
}

/// A request's params read into `T` (its default when there are none), or the -32602
/// message naming `method` and what is wrong.
fn params_of<'p, T: Deserialize<'p> + Default>(
    method: &str,
    params: Option<&'p RawValue>,
) -> Result<T, String> {
    params.map_or(Ok(T::default()), |p| {
        serde_json::from_str(p.get()).map_err(|e| format!("invalid {method} params: {e}"))
    })
}

fn not_initialized(link: &impl Link, id: RequestId, method: &str) -> Flow {
    answer_error(
        link,
        &ErrorAnswer::new(
            Some(id),
            jsonrpc::SERVER_NOT_INITIALIZED,
            not_initialized_message(method),
        ),
    )
}

fn not_initialized_message(method: &str) -> String {
    format!("server not initialized: send \"initialize\" before \"{method}\"")
}

/// The -32602 message of a call to a withheld tool, withheld at build time or since.
#[cold]
fn not_available(name: &str, why: &str) -> String {
    format!("tool \"{name}\" is not available: {why}")
}

/// What became of a call that reached its handler.
pub(crate) struct Ran {
    /// The result to send, or the message of the -32602 error to send instead.
    pub answer: Result<ToolResult, String>,
    /// The call's cancellation was raised while it ran: the wire sends no answer.
    pub cancelled: bool,
}

// The one path of a `tools/call`, shared by the transport and `Server::call`: find the
// tool, check the arguments' shape, run the handler between the hooks.
impl Inner {
    /// The index of the tool `name`, or the -32602 message saying why there is none.
    #[inline]
    pub(crate) fn find_tool(&self, name: &str) -> Result<usize, String> {
        match self.tools.iter().position(|t| t.name == name) {
            // While no tool was withheld at run time, the gate costs this one load.
            Some(index) if !self.gate.any() => Ok(index),
            found => self.find_tool_further(name, found),
        }
    }

    /// `find_tool` for a name that is not registered, or once some tool was withheld
    /// while serving. Out of line: the common call path keeps its shape.
    #[cold]
    #[inline(never)]
    fn find_tool_further(&self, name: &str, found: Option<usize>) -> Result<usize, String> {
        if let Some(index) = found {
            return match self.gate.reason(index) {
                None => Ok(index),
                Some(why) => Err(not_available(name, why)),
            };
        }
        Err(match self.withheld.iter().find(|(n, _)| n == name) {
            Some((name, why)) => not_available(name, why),
            None => format!("unknown tool \"{name}\": tools/list names the tools of this server"),
        })
    }

    /// Tells the hooks about a call answered with `message` before any handler ran.
    pub(crate) fn reject(&self, ctx: &CallContext, arguments: Option<&str>, message: &str) {
        if let Some(hooks) = self.hooks.as_deref() {
            hooks.call_rejected(ctx, arguments.unwrap_or("{}"), message);
        }
    }

    /// Runs tool `index`'s handler on `arguments` (an object's JSON text), between the
    /// `call_started` and `call_finished` hooks; a panic becomes an `isError` result.
    #[inline]
    pub(crate) fn run_handler(&self, index: usize, ctx: &CallContext, arguments: &str) -> Ran {
        let hooks = self.hooks.as_deref();
        if let Some(hooks) = hooks {
            hooks.call_started(ctx, arguments);
        }
        let started = hooks.map(|_| Instant::now());
        let handler = &self.handlers[index];
        let outcome = catch_unwind(AssertUnwindSafe(|| handler(arguments, ctx)));
        let duration = started.map(|s| s.elapsed()).unwrap_or_default();

        let tool = &ctx.tool;
        // `Err` is a protocol error (-32602); a tool's failure is an `isError` result.
        let (answer, status): (Result<ToolResult, String>, CallStatus) = match outcome {
            Ok(Outcome::Done(result)) if result.is_error => (Ok(result), CallStatus::ToolError),
            Ok(Outcome::Done(result)) => (Ok(result), CallStatus::Ok),
            Ok(Outcome::Failed(text)) => (Ok(ToolResult::error(text)), CallStatus::ToolError),
            Ok(Outcome::BadArguments(e)) => {
                let text = format!("invalid arguments for tool \"{tool}\": {e}");
                // From 2025-11-25 on, the model gets to read (and fix) its mistake.
                if era::misfit_arguments_are_results(ctx.protocol_version) {
                    (Ok(ToolResult::error(text)), CallStatus::InvalidArguments)
                } else {
                    (Err(text), CallStatus::InvalidArguments)
                }
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".to_owned());
                let text = format!("tool \"{tool}\" failed unexpectedly (it panicked: {what})");
                (Ok(ToolResult::error(text)), CallStatus::Panicked)
            }
        };
        let mut answer = answer;
        if let (Some(filter), Ok(result)) = (&self.result_filter, answer.as_mut()) {
            filter(ctx, result);
        }
        let cancelled = ctx.is_cancelled();
        let status = if cancelled {
            CallStatus::Cancelled
        } else {
            status
        };
        if let Some(hooks) = hooks {
            hooks.call_finished(
                ctx,
                &CallOutcome {
                    duration,
                    status,
                    error: match &answer {
                        Ok(result) if result.is_error => result.first_text(),
                        Ok(_) => None,
                        Err(text) => Some(text),
                    },
                    result: answer.as_ref().ok(),
                },
            );
        }
        Ran { answer, cancelled }
    }
}

/// The arguments' JSON text as a handler gets it: an object, `{}` when the call sent
/// none or `null`; anything else is the -32602 message.
#[inline]
pub(crate) fn object_arguments<'a>(
    tool: &str,
    arguments: Option<&'a str>,
) -> Result<&'a str, String> {
    match arguments {
        Some(a) if a.starts_with('{') => Ok(a),
        None | Some("null") => Ok("{}"),
        Some(a) => Err(format!(
            "invalid arguments for tool \"{tool}\": \"arguments\" must be an object, got {a}"
        )),
    }
}
