//! Building a server: tools, limits, hooks. Every tool is checked here, so a bad name
//! or schema is an error at startup, never at call time.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::CallContext;
use crate::era::Revisions;
use crate::hooks::Hooks;
use crate::server::Server;
use crate::state::{Gate, Inner, StopSignal};
use crate::tool::{self, CallError, Handler, Tool, ToolResult};

/// Default largest message accepted, in bytes.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;
/// Default number of tool calls that may run at once.
pub const DEFAULT_MAX_CONCURRENCY: usize = 8;

/// Collects a server's identity, limits and tools; [`ServerBuilder::build`] checks them.
pub struct ServerBuilder {
    name: String,
    version: String,
    instructions: Option<String>,
    max_message_size: usize,
    max_concurrency: usize,
    end_of_input_grace: Option<std::time::Duration>,
    page_size: Option<usize>,
    accept_newer: bool,
    revisions: Option<Vec<String>>,
    hooks: Option<Box<dyn Hooks>>,
    result_filter: Option<crate::state::ResultFilter>,
    tools: Vec<(Tool, Handler)>,
    withheld: Vec<(String, String)>,
    notify_list_changed: bool,
}

impl Server {
    /// Starts building a server that names itself `name` and `version` to clients.
    ///
    /// ```
    /// use mcpserver::{Server, Tool, ToolResult};
    /// #[derive(serde::Deserialize)]
    /// struct Args { text: String }
    /// let server = Server::builder("echo", "1.0.0")
    ///     .tool(
    ///         Tool::new("echo", "Echo the text", serde_json::json!({"type": "object"})),
    ///         |a: Args, _ctx: &mcpserver::CallContext| Ok::<_, String>(ToolResult::text(a.text)),
    ///     )
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(server.tools().count(), 1);
    /// ```
    pub fn builder(name: &str, version: &str) -> ServerBuilder {
        ServerBuilder::new(name, version)
    }
}

impl ServerBuilder {
    pub(crate) fn new(name: &str, version: &str) -> ServerBuilder {
        ServerBuilder {
            name: name.to_owned(),
            version: version.to_owned(),
            instructions: None,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            end_of_input_grace: None,
            page_size: None,
            accept_newer: false,
            revisions: None,
            hooks: None,
            result_filter: None,
            tools: Vec::new(),
            withheld: Vec::new(),
            notify_list_changed: false,
        }
    }

    /// Text for the client's model on how to use this server (sent in `initialize`).
    pub fn instructions(mut self, text: impl Into<String>) -> ServerBuilder {
        self.instructions = Some(text.into());
        self
    }

    /// The longest line accepted, in bytes (default 16 MiB). A longer line is answered
    /// with an error and skipped; serving goes on.
    pub fn max_message_size(mut self, bytes: usize) -> ServerBuilder {
        self.max_message_size = bytes;
        self
    }

    /// How many tool calls may run at once (default 8). When that many run, one more
    /// thread goes on reading: `ping`, `notifications/cancelled` and end of input are
    /// acted on at any load, and a further `tools/call` is answered at once with error
    /// -32001 (`server busy`, naming the bound), so memory stays bounded under any flood
    /// and the server is never deaf. `1` runs calls one at a time; a call that outlives
    /// about a millisecond hands the reading to a second thread (about 0.1 MiB).
    pub fn max_concurrency(mut self, calls: usize) -> ServerBuilder {
        self.max_concurrency = calls;
        self
    }

    /// Splits `tools/list` into pages of this many tools (default: one page).
    pub fn page_size(mut self, tools: Option<usize>) -> ServerBuilder {
        self.page_size = tools;
        self
    }

    /// Also accept protocol revisions 2025-06-18 and 2025-11-25 when a client asks for
    /// them in `initialize` (tool titles, annotations, output schemas, structured
    /// content). Off by default: 2024-11-05 is the contract of the handshake era.
    /// [`ServerBuilder::revisions`], when given, decides instead.
    pub fn accept_newer_revisions(mut self, accept: bool) -> ServerBuilder {
        self.accept_newer = accept;
        self
    }

    /// Narrows the protocol revisions served to these (any of
    /// [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION),
    /// [`REVISION_2025_06_18`](crate::REVISION_2025_06_18),
    /// [`REVISION_2025_11_25`](crate::REVISION_2025_11_25),
    /// [`REVISION_2026_07_28`](crate::REVISION_2026_07_28)); an unknown name or an
    /// empty list is a [`BuildError`].
    ///
    /// By default a server serves both eras: `initialize` agrees 2024-11-05 (or a
    /// newer handshake revision with
    /// [`accept_newer_revisions`](ServerBuilder::accept_newer_revisions)), and a
    /// request whose `_meta` names 2026-07-28 is served statelessly, with or without an
    /// `initialize` before it. With a list:
    ///
    /// - `initialize` agrees the revision the client asks for when it is listed, else
    ///   the oldest listed handshake revision; with none listed it is refused with
    ///   -32022, naming the revisions served;
    /// - without 2026-07-28, `_meta` is not read for a revision at all: the server is
    ///   the handshake-era server to the byte (`server/discover` is an unknown method,
    ///   requests before `initialize` are refused with -32002).
    ///
    /// ```
    /// use mcpserver::{PROTOCOL_VERSION, Server};
    /// // ADR 017's wire contract to the letter: 2024-11-05 only.
    /// let legacy = Server::builder("t", "1").revisions([PROTOCOL_VERSION]).build().unwrap();
    /// let mut session = legacy.dispatcher();
    /// let answer = session.dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#);
    /// assert!(answer.contains("-32601"), "{answer}");
    /// assert!(Server::builder("t", "1").revisions(["2025-03-26"]).build().is_err());
    /// ```
    pub fn revisions<I, S>(mut self, revisions: I) -> ServerBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.revisions = Some(
            revisions
                .into_iter()
                .map(|r| r.as_ref().to_owned())
                .collect(),
        );
        self
    }

    /// Observers of requests and calls.
    pub fn hooks(mut self, hooks: impl Hooks + 'static) -> ServerBuilder {
        self.hooks = Some(Box::new(hooks));
        self
    }

    /// Passes every tool's result, successful or not, through `filter` before it is sent
    /// and before [`Hooks::call_finished`] sees it: a host's redaction of secrets in what
    /// tools return, say. Without one, results go out as the handlers made them.
    ///
    /// ```
    /// use mcpserver::{Content, Server, Tool, ToolResult};
    /// let server = Server::builder("s", "1")
    ///     .tool_raw(Tool::new("say", "Say it", serde_json::json!({"type": "object"})),
    ///         |_, _: &mcpserver::CallContext| Ok::<_, String>(ToolResult::text("token=abc")))
    ///     .result_filter(|_ctx, result| {
    ///         for item in &mut result.content {
    ///             if let Content::Text { text } = item {
    ///                 *text = text.replace("abc", "[redacted]");
    ///             }
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let ctx = mcpserver::CallContext::new(mcpserver::RequestId::Number(1), "say");
    /// let result = server.call(&ctx, &serde_json::json!({})).unwrap();
    /// assert_eq!(result.first_text(), Some("token=[redacted]"));
    /// ```
    pub fn result_filter(
        mut self,
        filter: impl Fn(&CallContext, &mut ToolResult) + Send + Sync + 'static,
    ) -> ServerBuilder {
        self.result_filter = Some(Box::new(filter));
        self
    }

    /// Registers a tool whose handler takes typed arguments. Arguments that do not
    /// deserialize into `A` are answered with -32602 naming the tool and the problem;
    /// `Err(e)` becomes a result with `isError: true` and the text of `e` (any `Display`
    /// error), or -32602 for [`CallError::InvalidArguments`].
    pub fn tool<A, E, F>(mut self, tool: Tool, handler: F) -> ServerBuilder
    where
        A: DeserializeOwned,
        E: Into<CallError>,
        F: Fn(A, &CallContext) -> Result<ToolResult, E> + Send + Sync + 'static,
    {
        self.tools.push((tool, tool::typed(handler)));
        self
    }

    /// Registers a tool whose handler takes the arguments as a JSON value (always an
    /// object); it checks them itself and returns [`CallError::InvalidArguments`] when
    /// they do not fit.
    pub fn tool_raw<E, F>(mut self, tool: Tool, handler: F) -> ServerBuilder
    where
        E: Into<CallError>,
        F: Fn(Value, &CallContext) -> Result<ToolResult, E> + Send + Sync + 'static,
    {
        self.tools.push((tool, tool::typed::<Value, E, F>(handler)));
        self
    }

    /// Keeps a tool from this client: it is not listed, and a call to it is answered
    /// with -32602 `tool "NAME" is not available: WHY` (a host's tool policy, say) rather
    /// than "unknown tool"; hooks see it as [`CallStatus::Rejected`](crate::CallStatus::Rejected).
    /// To withdraw a registered tool while the server runs, use its
    /// [`ToolGate`](crate::ToolGate).
    pub fn withhold(mut self, name: impl Into<String>, why: impl Into<String>) -> ServerBuilder {
        self.withheld.push((name.into(), why.into()));
        self
    }

    /// Tells clients when the tool list changes while they are served: `initialize`
    /// announces `capabilities.tools.listChanged: true`, and when a tool is withheld
    /// through the server's [`ToolGate`](crate::ToolGate), every session that has
    /// answered `initialize` writes `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`
    /// (a whole line, between answers, flushed at once even while the session waits for
    /// input; a [`Dispatcher`](crate::Dispatcher) returns it with its next answer, or from
    /// [`Dispatcher::notifications`](crate::Dispatcher::notifications)). Withholding
    /// close together may share one notification.
    ///
    /// Off by default (`listChanged: false`, and no notification: the tool list still
    /// changes, the client is not told). The cost, on: a session keeps its monitor
    /// thread from `initialize` on (it writes the notification while the reading thread
    /// waits for input), where otherwise that thread starts with the first call.
    pub fn notify_list_changed(mut self, notify: bool) -> ServerBuilder {
        self.notify_list_changed = notify;
        self
    }

    /// At end of input, the calls still running get `grace` to answer; then their
    /// [`CancellationToken`](crate::CancellationToken)s are raised, as a client's
    /// `notifications/cancelled` would, and what their handlers then return is answered
    /// (every request read is answered). A client that closed the pipe waits a short while before it kills its
    /// server; without this a stuck call keeps the server alive for as long as the call
    /// runs. Off by default: every call read is run to its end.
    pub fn cancel_after_end_of_input(mut self, grace: std::time::Duration) -> ServerBuilder {
        self.end_of_input_grace = Some(grace);
        self
    }

    /// Checks every tool and limit and returns the server, or every problem found.
    pub fn build(self) -> Result<Server, BuildError> {
        let mut problems = Vec::new();
        if self.max_concurrency == 0 {
            problems.push("max_concurrency must be at least 1".to_owned());
        }
        if self.max_message_size < 1024 {
            problems.push(format!(
                "max_message_size {} is too small: use at least 1024 bytes",
                self.max_message_size
            ));
        }
        if self.page_size == Some(0) {
            problems.push("page_size must be at least 1 (or None for a single page)".to_owned());
        }
        for (i, (tool, _)) in self.tools.iter().enumerate() {
            if let Err(p) = check_name(&tool.name) {
                problems.push(p);
            }
            if tool.description.trim().is_empty() {
                problems.push(format!(
                    "tool \"{}\" has no description: models choose tools by their description, give it one",
                    tool.name
                ));
            }
            if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
                problems.push(format!(
                    "tool \"{}\": its input schema must be a JSON object schema such as {{\"type\": \"object\", \"properties\": {{...}}}}, got {}",
                    tool.name, tool.input_schema
                ));
            }
            // A scan, not a hash set: tool sets are small, and hashing would seed
            // std's random keys at startup.
            if self.tools[..i].iter().any(|(t, _)| t.name == tool.name) {
                problems.push(format!(
                    "tool \"{}\" is registered twice: tool names must be unique",
                    tool.name
                ));
            }
        }
        let revisions = match &self.revisions {
            None => Ok(Revisions::default_with(self.accept_newer)),
            Some(names) => Revisions::named(names),
        };
        let revisions = revisions.unwrap_or_else(|problem| {
            problems.push(problem);
            Revisions::default_with(false)
        });
        if !problems.is_empty() {
            return Err(BuildError { problems });
        }
        let (tools, handlers): (Vec<Tool>, Vec<Handler>) = self.tools.into_iter().unzip();
        let stateless = Stateless::new(
            &self.name,
            &self.version,
            self.instructions.as_deref(),
            self.notify_list_changed,
            &revisions,
        );
        let list_json = tool::list_results(tools.iter(), &stateless.list_tail);
        let gate = Gate::new(tools.len());
        Ok(Server {
            inner: Arc::new(Inner {
                name: self.name,
                version: self.version,
                instructions: self.instructions,
                max_message_size: self.max_message_size,
                max_concurrency: self.max_concurrency,
                end_of_input_grace: self.end_of_input_grace,
                page_size: self.page_size,
                revisions,
                hooks: self.hooks,
                result_filter: self.result_filter,
                tool_names: tools.iter().map(|t| Arc::from(t.name.as_str())).collect(),
                tools,
                handlers,
                list_json,
                server_meta: stateless.server_meta,
                list_tail: stateless.list_tail,
                discover_json: stateless.discover_json,
                withheld: self.withheld,
                notify_list_changed: self.notify_list_changed,
                gate,
                stop: Arc::new(StopSignal::default()),
            }),
        })
    }
}

/// How long a stateless client may keep a `tools/list` answer: 0, "ask again". The
/// tools are fixed when the server is built, but its [`ToolGate`](crate::ToolGate) may
/// withhold one at any moment, and a client that opened no `subscriptions/listen`
/// would not hear of it: 0 is the one value that stays true. A listening client is told
/// at once, and a call to a withheld tool is refused with the reason.
const LIST_TTL_MS: u64 = 0;
/// How long a stateless client may keep the `server/discover` answer: what it says
/// (revisions, capabilities, identity) is fixed for the life of the server process,
/// and a stdio client discovers again when it starts the server again.
const DISCOVER_TTL_MS: u64 = 3_600_000;
/// Who may keep those answers: `private`, never shared across callers. A host's tool
/// descriptions may name its own paths or policy (awf's do), which a cache shared
/// between users must not hand on; the library cannot know, so it says the safe thing.
const CACHE_SCOPE: &str = "private";

/// The stateless era's precomputed texts.
struct Stateless {
    server_meta: Box<serde_json::value::RawValue>,
    list_tail: String,
    discover_json: String,
}

impl Stateless {
    fn new(
        name: &str,
        version: &str,
        instructions: Option<&str>,
        notify_list_changed: bool,
        revisions: &Revisions,
    ) -> Stateless {
        let meta = serde_json::json!({
            "io.modelcontextprotocol/serverInfo": {"name": name, "version": version}
        })
        .to_string();
        let list_tail = format!(
            ",\"resultType\":\"complete\",\"ttlMs\":{LIST_TTL_MS},\"cacheScope\":\"{CACHE_SCOPE}\",\"_meta\":{meta}"
        );
        let mut discover = serde_json::json!({
            "resultType": "complete",
            "supportedVersions": revisions.supported(),
            "capabilities": {"tools": {"listChanged": notify_list_changed}},
            "ttlMs": DISCOVER_TTL_MS,
            "cacheScope": CACHE_SCOPE,
        });
        if let Some(text) = instructions {
            discover["instructions"] = Value::String(text.to_owned());
        }
        let discover_json = tool::with_tail(&discover.to_string(), &format!(",\"_meta\":{meta}"));
        Stateless {
            server_meta: serde_json::value::RawValue::from_string(meta)
                .expect("serverInfo is JSON"),
            list_tail,
            discover_json,
        }
    }
}

/// Checks a tool name against `^[a-zA-Z0-9_-]{1,64}$`, saying why when it fails.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a tool name is empty: names are 1 to 64 characters of a-z A-Z 0-9 _ -".into());
    }
    if name.len() > 64 {
        return Err(format!(
            "tool name \"{name}\" is {} characters long: the limit is 64",
            name.len()
        ));
    }
    if name.contains('.') {
        return Err(format!(
            "tool name \"{name}\" contains '.': clients such as Claude refuse dots in tool names, and one bad name can hide every tool of the server; use '_' or '-' instead"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "tool name \"{name}\" contains {c:?}: names may only use a-z A-Z 0-9 _ -"
        ));
    }
    Ok(())
}

/// Why a server could not be built: every problem found, each naming the tool or
/// limit and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    problems: Vec<String>,
}

impl BuildError {
    /// Each problem, one sentence each.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problems.join("; "))
    }
}

impl std::error::Error for BuildError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Server;
    use serde_json::json;

    fn obj() -> Value {
        json!({"type": "object"})
    }

    fn build_with(tools: Vec<Tool>) -> Result<Server, BuildError> {
        let mut b = Server::builder("t", "1");
        for t in tools {
            b = b.tool_raw(t, |_, _| Ok::<_, String>(ToolResult::text("")));
        }
        b.build()
    }

    #[test]
    fn names_follow_the_mcp_rule() {
        assert!(check_name("Read").is_ok());
        assert!(check_name("my-plugin_op2").is_ok());
        assert!(check_name(&"a".repeat(64)).is_ok());
        assert!(check_name(&"a".repeat(65)).unwrap_err().contains("64"));
        assert!(check_name("").is_err());
        let dot = check_name("fs.read").unwrap_err();
        assert!(dot.contains("'.'") && dot.contains("Claude"), "{dot}");
        assert!(check_name("a b").unwrap_err().contains("' '"));
        assert!(check_name("é").is_err());
    }

    #[test]
    fn build_reports_every_problem() {
        let err = build_with(vec![
            Tool::new("ok", "fine", obj()),
            Tool::new("ok", "again", obj()),
            Tool::new("no.dots", "d", obj()),
            Tool::new("nodesc", "  ", obj()),
            Tool::new("array", "a", json!({"type": "array"})),
        ])
        .err()
        .expect("must fail");
        let all = err.to_string();
        assert_eq!(err.problems().len(), 4, "{all}");
        assert!(all.contains("registered twice"));
        assert!(all.contains("no.dots"));
        assert!(all.contains("no description"));
        assert!(all.contains("object schema"));
    }

    #[test]
    fn limits_are_checked() {
        let err = Server::builder("t", "1")
            .max_concurrency(0)
            .page_size(Some(0))
            .max_message_size(10)
            .build()
            .err()
            .unwrap();
        assert_eq!(err.problems().len(), 3);
    }
}
