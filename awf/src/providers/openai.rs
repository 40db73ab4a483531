//! `openai_compatible`: an agent step over HTTP Chat Completions, with the tools served
//! in-process by the same `mcpserver::Server` that `awf mcp-serve` serves
//! ([`tool_server`]: same assembly, sandbox, spans, log lines and audit records; transport
//! `inproc`), called through [`mcpserver::Server::call`]. No subprocess, no MCP on a
//! wire: the tool list goes in each request's `tools[]` (what the server offers at that
//! moment: a tool its gate withheld during the step is offered no more, as a CLI's
//! `tools/list` no longer lists it), and the multi-turn loop runs here:
//! model → `tool_calls` → one `role: "tool"` message per call → model, until it answers
//! with text or the turn limit (option `max_tool_turns`, default 25) is reached.
//!
//! The HTTP client is ureq (blocking, no async runtime; TLS through rustls), built per
//! request with the time left before the state's deadline as its global timeout.

use super::AgentOutput;
use crate::error::{AwfError, codes};
use crate::telemetry::Transport;
use crate::tool_server::assembly::{Prepared, build_server};
use mcpserver::{CallContext, CallError, CancellationToken, Content, RequestId, Server};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

pub const DEFAULT_MAX_TOOL_TURNS: usize = 25;
const OPTION_KEYS: &[&str] = &[
    "base_url",
    "model",
    "api_key_env",
    "system_prompt",
    "temperature",
    "max_completion_tokens",
    "max_tool_turns",
    "relay",
];

/// The state's options, checked.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    pub base_url: String,
    pub model: String,
    /// The API key's value (read from the variable `api_key_env` names), if any.
    pub api_key: Option<String>,
    pub system_prompt: Option<String>,
    pub temperature: Option<f64>,
    pub max_completion_tokens: Option<u64>,
    pub max_tool_turns: usize,
    /// The endpoint as the workflow names it, for messages, when requests go elsewhere
    /// (through the run's model relay).
    pub shown_url: Option<String>,
}

fn bad(state: &str, msg: String) -> AwfError {
    AwfError::new(codes::OPENAI_BAD_OPTION, format!("state {state:?}: {msg}"))
}

impl OpenAiOptions {
    pub fn from_map(state: &str, o: &Map<String, Value>) -> Result<OpenAiOptions, AwfError> {
        if let Some(k) = o.keys().find(|k| !OPTION_KEYS.contains(&k.as_str())) {
            return Err(bad(
                state,
                format!(
                    "openai_compatible has no option {k:?}; its options are {}",
                    OPTION_KEYS.join(", ")
                ),
            ));
        }
        if let Some(v) = o.get("relay")
            && !v.is_boolean()
        {
            return Err(bad(
                state,
                format!("option relay must be true or false, found {v}"),
            ));
        }
        let text = |k: &str| -> Result<Option<String>, AwfError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(bad(state, format!("option {k} must be text, found {v}"))),
            }
        };
        let base_url = text("base_url")?.ok_or_else(|| {
            bad(
                state,
                "openai_compatible needs options.base_url, e.g. http://127.0.0.1:11434/v1".into(),
            )
        })?;
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(bad(
                state,
                format!(
                    "base_url {base_url:?} is not an http:// or https:// URL, e.g. \
                     https://api.openai.com/v1 or http://127.0.0.1:11434/v1"
                ),
            ));
        }
        let model = text("model")?
            .ok_or_else(|| bad(state, "openai_compatible needs options.model".into()))?;
        let api_key = match text("api_key_env")? {
            Some(var) => match std::env::var(&var) {
                Ok(v) if !v.is_empty() => Some(v),
                _ => {
                    return Err(AwfError::new(
                        codes::OPENAI_MISSING_KEY,
                        format!(
                            "state {state:?}: the environment variable {var} (options.api_key_env) \
                             is not set; export it with the API key"
                        ),
                    ));
                }
            },
            // No variable named: the conventional one when present, else no key (local servers).
            None => std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|v| !v.is_empty()),
        };
        let temperature = match o.get("temperature") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_f64().ok_or_else(|| {
                bad(
                    state,
                    format!("option temperature must be a number, found {v}"),
                )
            })?),
        };
        let count = |k: &str| -> Result<Option<u64>, AwfError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                    bad(
                        state,
                        format!("option {k} must be a positive integer, found {v}"),
                    )
                }),
            }
        };
        Ok(OpenAiOptions {
            base_url,
            model,
            api_key,
            system_prompt: text("system_prompt")?,
            temperature,
            max_completion_tokens: count("max_completion_tokens")?,
            max_tool_turns: count("max_tool_turns")?.map_or(DEFAULT_MAX_TOOL_TURNS, |n| n as usize),
            shown_url: None,
        })
    }

    pub fn url(&self) -> String {
        let b = self.base_url.trim_end_matches('/');
        if b.ends_with("/chat/completions") {
            b.to_string()
        } else {
            format!("{b}/chat/completions")
        }
    }
}

/// The step's tools as the server the conversation calls: the one `awf mcp-serve` would
/// serve, observed as `inproc`.
pub fn tool_server(prepared: &Prepared) -> Result<Server, AwfError> {
    build_server(prepared, Transport::Inproc)
}

/// The tools `server` offers now as Chat Completions `tools[]`: those its `tools/list`
/// names at this moment ([`Server::offered_tools`]), so a tool withheld through its
/// [`ToolGate`](mcpserver::ToolGate) (a third-party tool changed during the step) is left
/// out, as a CLI's `tools/list` leaves it out.
pub fn tool_definitions(server: &Server) -> Vec<Value> {
    server
        .offered_tools()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name(), "description": t.description(), "parameters": t.input_schema()}})
        })
        .collect()
}

/// The `tools[]` of each model request, read from the server's gate before each one:
/// what it offers then. Withholding only ever removes tools, so the same count of offered
/// tools is the same set, and the definitions are rebuilt only when it falls (a request
/// costs one atomic load while nothing is withheld, one per tool afterwards, and no
/// allocation unless the set changed).
struct Offer<'a> {
    server: Option<&'a Server>,
    definitions: Vec<Value>,
}

impl<'a> Offer<'a> {
    fn new(server: Option<&'a Server>) -> Offer<'a> {
        Offer {
            server,
            definitions: server.map(tool_definitions).unwrap_or_default(),
        }
    }

    /// The tools to offer in the next request.
    fn now(&mut self) -> &[Value] {
        if let Some(server) = self.server
            && server.offered_tools().count() != self.definitions.len()
        {
            self.definitions = tool_definitions(server);
        }
        &self.definitions
    }
}

/// Runs the conversation. `deadline` bounds every request; `cancel` is checked between
/// turns and passed to tools.
pub fn run(
    prompt: &str,
    opts: &OpenAiOptions,
    server: Option<&Server>,
    deadline: Option<Instant>,
    cancel: &CancellationToken,
) -> Result<AgentOutput, AwfError> {
    let mut messages = Vec::new();
    if let Some(s) = &opts.system_prompt {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": prompt}));
    // Read before each request: a tool withheld during the step is offered no more.
    let mut offer = Offer::new(server);
    let sent_to = opts.url();
    let url = opts.shown_url.clone().unwrap_or_else(|| sent_to.clone());
    let mut usage = Usage::default();
    let mut turns = 0usize;
    loop {
        if cancel.is_cancelled() {
            return Err(AwfError::new(
                codes::OPENAI_CANCELLED,
                "the conversation was stopped (timeout or interrupt)",
            ));
        }
        let body = request_body(opts, &messages, offer.now());
        let answer = post(&sent_to, &url, opts.api_key.as_deref(), &body, deadline)?;
        usage.add(&answer["usage"]);
        let message = answer["choices"][0]["message"].clone();
        if !message.is_object() {
            return Err(AwfError::new(
                codes::OPENAI_BAD_RESPONSE,
                format!(
                    "{url} answered without choices[0].message: {}",
                    excerpt(&answer.to_string())
                ),
            ));
        }
        let calls = message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if calls.is_empty() {
            return Ok(AgentOutput {
                text: content_text(&message["content"]),
                usage: usage.to_json(),
                cost_usd: None,
                session_id: None,
            });
        }
        turns += 1;
        if turns > opts.max_tool_turns {
            return Err(AwfError::new(
                codes::OPENAI_TOO_MANY_TURNS,
                format!(
                    "the model asked for tools in more than {} consecutive turns; raise \
                     options.max_tool_turns or make the prompt more direct",
                    opts.max_tool_turns
                ),
            ));
        }
        // The assistant turn goes back verbatim (with its tool_calls), then one answer per call.
        let mut assistant = json!({"role": "assistant", "tool_calls": calls});
        assistant["content"] = message.get("content").cloned().unwrap_or(Value::Null);
        messages.push(assistant);
        for call in &calls {
            messages.push(answer_call(call, server, cancel));
        }
    }
}

/// The body of the next request: the conversation so far, the tools offered now, the options.
fn request_body(opts: &OpenAiOptions, messages: &[Value], tools: &[Value]) -> Value {
    let mut body = json!({"model": opts.model, "messages": messages, "stream": false});
    if !tools.is_empty() {
        body["tools"] = json!(tools);
        body["tool_choice"] = json!("auto");
    }
    if let Some(t) = opts.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = opts.max_completion_tokens {
        body["max_completion_tokens"] = json!(n);
    }
    body
}

/// The `role: "tool"` message that answers one tool call: the tool's result, or why none.
fn answer_call(call: &Value, server: Option<&Server>, cancel: &CancellationToken) -> Value {
    let id = call["id"].as_str().unwrap_or_default().to_string();
    let name = call["function"]["name"].as_str().unwrap_or_default();
    let raw = &call["function"]["arguments"];
    let content = match parse_arguments(raw) {
        Err(why) => format!(
            "ERROR: the arguments of {name} are not a JSON object ({why}); call it again \
             with valid JSON arguments"
        ),
        Ok(args) => match server {
            None => format!("ERROR: no tools are available in this step (tool {name})"),
            Some(server) => {
                let ctx = CallContext::new(RequestId::String(id.clone()), name)
                    .with_cancellation(cancel.clone());
                match server.call(&ctx, &args) {
                    Ok(result) if result.is_error => {
                        format!("ERROR: {}", text(&result.content))
                    }
                    Ok(result) => text(&result.content),
                    // Unknown or withheld tool, arguments that do not fit: the
                    // model reads why and can call again.
                    Err(CallError::InvalidArguments(why) | CallError::Failed(why)) => {
                        format!("ERROR: {why}")
                    }
                    Err(e) => format!("ERROR: {e}"),
                }
            }
        },
    };
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

fn parse_arguments(raw: &Value) -> Result<Value, String> {
    let v = match raw {
        Value::String(s) if s.trim().is_empty() => json!({}),
        Value::String(s) => serde_json::from_str(s).map_err(|e| e.to_string())?,
        // Some servers send the object itself rather than its JSON text.
        Value::Object(_) => raw.clone(),
        Value::Null => json!({}),
        other => return Err(format!("found {other}")),
    };
    if v.is_object() {
        Ok(v)
    } else {
        Err(format!("found {v}"))
    }
}

/// A tool result's text items, as the one text a `role: "tool"` message holds.
fn text(content: &[Content]) -> String {
    let mut texts = content.iter().filter_map(|c| match c {
        Content::Text { text } => Some(text.as_str()),
        _ => None,
    });
    let first = texts.next().unwrap_or_default().to_string();
    texts.fold(first, |all, t| all + "\n" + t)
}

/// `content` is a string, or (newer servers) a list of `{type: "text", text}` parts.
fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

#[derive(Default)]
struct Usage {
    prompt: u64,
    completion: u64,
    seen: bool,
}

impl Usage {
    fn add(&mut self, u: &Value) {
        if let (Some(p), Some(c)) = (u["prompt_tokens"].as_u64(), u["completion_tokens"].as_u64()) {
            self.prompt += p;
            self.completion += c;
            self.seen = true;
        }
    }
    fn to_json(&self) -> Option<Value> {
        self.seen.then(|| {
            json!({"prompt_tokens": self.prompt, "completion_tokens": self.completion,
                   "total_tokens": self.prompt + self.completion})
        })
    }
}

fn excerpt(text: &str) -> String {
    let t = text.trim();
    let cut = crate::text::floor_char_boundary(t, 500);
    if cut < t.len() {
        format!("{}…", &t[..cut])
    } else {
        t.to_string()
    }
}

fn post(
    url: &str,
    shown: &str,
    key: Option<&str>,
    body: &Value,
    deadline: Option<Instant>,
) -> Result<Value, AwfError> {
    // Without a state timeout, one request may take up to 10 minutes (slow local models).
    let timeout = deadline
        .map(|d| d.saturating_duration_since(Instant::now()))
        .unwrap_or(Duration::from_secs(600));
    if timeout.is_zero() {
        return Err(AwfError::new(
            codes::OPENAI_TIMEOUT,
            format!("no time left to call {shown}"),
        ));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.post(url).header("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.header("Authorization", format!("Bearer {k}"));
    }
    let resp = req.send(body.to_string()).map_err(|e| match e {
        ureq::Error::Timeout(_) => AwfError::new(
            codes::OPENAI_TIMEOUT,
            format!(
                "{shown} did not answer within {:.0?} (the state's timeout)",
                timeout
            ),
        ),
        other => AwfError::new(
            codes::OPENAI_UNREACHABLE,
            format!("cannot reach {shown}: {other}"),
        ),
    })?;
    let status = resp.status().as_u16();
    let relays_own = resp.headers().contains_key(crate::relay::OWN_ANSWER_HEADER);
    let text = resp.into_body().read_to_string().map_err(|e| match e {
        ureq::Error::Timeout(_) => AwfError::new(
            codes::OPENAI_TIMEOUT,
            format!("{shown} did not finish its answer within {:.0?}", timeout),
        ),
        other => AwfError::new(
            codes::OPENAI_BAD_RESPONSE,
            format!("reading the answer of {shown}: {other}"),
        ),
    })?;
    if relays_own {
        return Err(relay_refusal(status, &text));
    }
    if !(200..300).contains(&status) {
        return Err(AwfError::new(
            codes::OPENAI_HTTP,
            format!("{shown} answered HTTP {status}: {}", excerpt(&text)),
        ));
    }
    serde_json::from_str(&text).map_err(|e| {
        AwfError::new(
            codes::OPENAI_BAD_RESPONSE,
            format!(
                "{shown} answered HTTP {status} with invalid JSON ({e}): {}",
                excerpt(&text)
            ),
        )
    })
}

/// awf's model relay answered itself, not the model: its own words, and for a model it
/// could not reach (502) where to look.
fn relay_refusal(status: u16, text: &str) -> AwfError {
    let why = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| excerpt(text));
    let why = why.strip_prefix("awf relay: ").unwrap_or(&why);
    if status == 502 {
        AwfError::new(
            codes::OPENAI_UNREACHABLE,
            format!("{why}; is the model server at options.base_url running?"),
        )
    } else {
        AwfError::new(
            codes::OPENAI_HTTP,
            format!("awf's model relay refused the request: {why}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let o = OpenAiOptions::from_map(
            "s",
            &m(json!({"base_url": "http://h/v1/", "model": "m", "temperature": 0.2})),
        )
        .unwrap();
        assert_eq!(o.url(), "http://h/v1/chat/completions");
        assert_eq!(o.max_tool_turns, DEFAULT_MAX_TOOL_TURNS);
        let e = OpenAiOptions::from_map(
            "s",
            &m(json!({"base_url": "http://h", "model": "m", "modle": 1})),
        )
        .unwrap_err();
        assert!(e.message().contains("modle"), "{e}");
        let e = OpenAiOptions::from_map(
            "s",
            &m(json!({"base_url": "http://h", "model": "m", "api_key_env": "AWF_TEST_SURELY_UNSET"})),
        )
        .unwrap_err();
        assert_eq!(e.code(), codes::OPENAI_MISSING_KEY);
        assert!(OpenAiOptions::from_map("s", &m(json!({"model": "m"}))).is_err());
        assert!(
            OpenAiOptions::from_map("s", &m(json!({"base_url": "ftp://h", "model": "m"}))).is_err()
        );
        assert!(
            OpenAiOptions::from_map("s", &m(json!({"base_url": "https://h/v1", "model": "m"})))
                .is_ok()
        );
    }

    #[test]
    fn the_offer_follows_the_gate() {
        use mcpserver::{Tool, ToolResult};
        let tool = |name: &str| Tool::new(name, "A tool", json!({"type": "object"}));
        let server = Server::builder("t", "1")
            .tool_raw(tool("echo"), |_, _| Ok::<_, String>(ToolResult::text("hi")))
            .tool_raw(tool("change"), |_, _| {
                Ok::<_, String>(ToolResult::text("ok"))
            })
            .build()
            .unwrap();
        let names = |tools: &[Value]| -> Vec<String> {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        let mut offer = Offer::new(Some(&server));
        assert_eq!(names(offer.now()), ["echo", "change"]);
        server.tool_gate().withhold("echo", "changed since pinned");
        assert_eq!(names(offer.now()), ["change"]);
        server.tool_gate().withhold("change", "removed");
        assert!(offer.now().is_empty());
        assert!(Offer::new(None).now().is_empty());
    }

    #[test]
    fn arguments_must_be_objects() {
        assert!(parse_arguments(&json!("{\"a\":1}")).is_ok());
        assert!(parse_arguments(&json!("{bad")).is_err());
        assert!(parse_arguments(&json!("[1]")).is_err());
        assert_eq!(parse_arguments(&json!("")).unwrap(), json!({}));
    }
}
