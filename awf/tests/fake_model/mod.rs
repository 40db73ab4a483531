//! A fake model API for tests that drive real agent CLIs (and awf's own HTTP provider)
//! offline. It listens on 127.0.0.1 (ephemeral port), speaks the four wire formats the
//! CLIs use — Chat Completions, Anthropic Messages, OpenAI Responses, Gemini
//! `generateContent` — and plays a [`Script`]: call the scripted tools one after the other
//! (each bare name resolved against the tools the request offers: `mcp__awf__Read`,
//! `mcp_awf_Read`, `awf_Read`, Codex's namespace `mcp__awf` + `Read`), then answer with a
//! text quoting every tool result it received. Every request is recorded so a test can
//! assert what the model was offered and what it called.
//!
//! The script position is derived from the conversation the client sends (the number of
//! tool calls the assistant already made), not from a counter: retries and side requests
//! (title generation, token counting, model listing, routing checks) then cannot shift it.
//! A request is a script step only when it offers a tool the script can resolve; anything
//! else gets a short, well-formed answer and is recorded as a side request.
//!
//! Include it from a test file with `#[path = "fake_model/mod.rs"] mod fake_model;`.
//! The server stops when the [`FakeModel`] is dropped, or by itself after an idle period.
#![allow(dead_code)]

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Idle period after which the server stops by itself, so a leaked server (a test that
/// panicked while holding it in a static, say) cannot outlive the test run for long.
const IDLE_STOP: Duration = Duration::from_secs(600);

/// One scripted tool call: a bare tool name (`Read`) and its arguments.
#[derive(Debug, Clone)]
pub struct ScriptCall {
    pub tool: String,
    /// The arguments as sent on the wire (a JSON text; may be deliberately invalid).
    pub arguments: String,
}

/// What the fake model does over one conversation.
#[derive(Debug, Clone, Default)]
pub struct Script {
    pub calls: Vec<ScriptCall>,
    /// First line of the final answer; the tool results follow it.
    pub answer_prefix: String,
    /// When set, main requests get this HTTP status and body instead of an answer.
    pub fail_with: Option<(u16, String)>,
    /// When set, the first N main requests get this HTTP status and body; later ones are
    /// answered as the script says.
    pub fail_first: Option<(usize, u16, String)>,
    /// Headers sent with every failure (`fail_with`, `fail_first`), e.g. `Retry-After`.
    pub fail_headers: Vec<(String, String)>,
    /// When true, keep calling the first tool forever (to test loop guards).
    pub endless: bool,
}

impl Script {
    pub fn new() -> Script {
        Script {
            answer_prefix: "FAKE-MODEL-FINAL".to_string(),
            ..Script::default()
        }
    }

    /// Calls `tool` (a bare name) with `arguments`.
    pub fn call(mut self, tool: &str, arguments: Value) -> Script {
        self.calls.push(ScriptCall {
            tool: tool.to_string(),
            arguments: arguments.to_string(),
        });
        self
    }

    /// Calls `tool` with an arguments text sent verbatim (e.g. invalid JSON).
    pub fn call_raw(mut self, tool: &str, arguments: &str) -> Script {
        self.calls.push(ScriptCall {
            tool: tool.to_string(),
            arguments: arguments.to_string(),
        });
        self
    }

    pub fn answer_prefix(mut self, prefix: &str) -> Script {
        self.answer_prefix = prefix.to_string();
        self
    }

    pub fn fail_with(mut self, status: u16, body: &str) -> Script {
        self.fail_with = Some((status, body.to_string()));
        self
    }

    /// Fails the first `n` main requests with `status` and `body`, then plays the script.
    pub fn fail_first(mut self, n: usize, status: u16, body: &str) -> Script {
        self.fail_first = Some((n, status, body.to_string()));
        self
    }

    /// Sends `Retry-After: VALUE` with every failure.
    pub fn retry_after(mut self, value: &str) -> Script {
        self.fail_headers
            .push(("Retry-After".to_string(), value.to_string()));
        self
    }

    pub fn endless(mut self) -> Script {
        self.endless = true;
        self
    }
}

/// The wire format a request was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    ChatCompletions,
    Anthropic,
    Responses,
    Gemini,
    /// Model listing, token counting, telemetry, anything else.
    Other,
}

/// A tool as offered in a request: `namespace` is set for Codex's namespaced MCP tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedTool {
    pub namespace: Option<String>,
    pub name: String,
}

impl OfferedTool {
    /// `mcp__awf__Read` style flat name (namespace and name joined by `__` unless the
    /// namespace already ends with a separator).
    pub fn flat(&self) -> String {
        match &self.namespace {
            Some(ns) if ns.ends_with('_') || ns.ends_with('.') => format!("{ns}{}", self.name),
            Some(ns) => format!("{ns}__{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One recorded HTTP request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path with query string.
    pub path: String,
    /// Header names lower-cased.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`Value::Null` when empty, a string when not JSON).
    pub body: Value,
    pub wire: Wire,
    /// True when this request was a step of the script (offered a resolvable tool).
    pub main: bool,
    /// Tools the request offered.
    pub tools: Vec<OfferedTool>,
    /// The tool call the fake model answered with, as (offered flat name, arguments text).
    pub answered_call: Option<(String, String)>,
    /// The final text the fake model answered with.
    pub answered_text: Option<String>,
}

struct Shared {
    script: Script,
    /// Main requests received so far (for `fail_first`).
    main_seen: AtomicUsize,
    records: Mutex<Vec<Recorded>>,
    last_activity: Mutex<Instant>,
    stop: AtomicBool,
}

/// A running fake model API; stops when dropped.
pub struct FakeModel {
    port: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl FakeModel {
    pub fn start(script: Script) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        // Non-blocking accept so the loop can notice a drop or the idle timeout.
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared {
            script,
            main_seen: AtomicUsize::new(0),
            records: Mutex::new(Vec::new()),
            last_activity: Mutex::new(Instant::now()),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::spawn(move || accept_loop(listener, sh));
        FakeModel {
            port,
            shared,
            thread: Some(thread),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` (no trailing slash, no `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.records.lock().unwrap().clone()
    }

    /// The requests that were steps of the script.
    pub fn main_requests(&self) -> Vec<Recorded> {
        self.requests().into_iter().filter(|r| r.main).collect()
    }

    /// Flat names of every tool offered by any main request, sorted and deduplicated.
    pub fn offered_tools(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .main_requests()
            .iter()
            .flat_map(|r| r.tools.iter().map(OfferedTool::flat))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The tool calls the fake model made, in order (offered name, arguments text).
    pub fn tool_calls(&self) -> Vec<(String, String)> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.answered_call)
            .collect()
    }

    /// The final texts the fake model answered with.
    pub fn answers(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.answered_text)
            .collect()
    }

    /// A short human summary of every request, for assertion messages.
    pub fn describe(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                format!(
                    "{} {} wire={:?} main={} tools={:?} call={:?} text={:?}",
                    r.method,
                    r.path,
                    r.wire,
                    r.main,
                    r.tools.iter().map(OfferedTool::flat).collect::<Vec<_>>(),
                    r.answered_call,
                    r.answered_text
                        .as_deref()
                        .map(|t| t.chars().take(80).collect::<String>())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if shared.last_activity.lock().unwrap().elapsed() > IDLE_STOP {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                *shared.last_activity.lock().unwrap() = Instant::now();
                let sh = shared.clone();
                std::thread::spawn(move || {
                    let _ = serve_connection(stream, &sh);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

struct HttpRequest {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<HttpRequest>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("/").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    if headers
        .get("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        reader
            .get_mut()
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if n == 0 {
                // Trailers until the empty line.
                loop {
                    let mut t = String::new();
                    if reader.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0; n];
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
            let mut crlf = String::new();
            reader.read_line(&mut crlf)?;
        }
    } else if let Some(len) = headers.get("content-length") {
        let n: usize = len.parse().unwrap_or(0);
        body = vec![0; n];
        reader.read_exact(&mut body)?;
    }
    Ok(Some(HttpRequest {
        method,
        path,
        headers,
        body,
    }))
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut reader = BufReader::new(stream);
    // One request per connection: every answer says `Connection: close`, so no client
    // reuses the socket and the server needs no keep-alive bookkeeping.
    let Some(req) = read_request(&mut reader)? else {
        return Ok(());
    };
    *shared.last_activity.lock().unwrap() = Instant::now();
    let reply = handle(&req, shared);
    let mut out = reader.into_inner();
    let reason = match reply.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    };
    let extra: String = reply
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\n{extra}Connection: close\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(reply.body.as_bytes())?;
    out.flush()?;
    let _ = out.shutdown(std::net::Shutdown::Both);
    Ok(())
}

struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
    /// Headers beyond the usual ones.
    headers: Vec<(String, String)>,
}

impl Reply {
    fn json(v: Value) -> Reply {
        Reply {
            status: 200,
            content_type: "application/json",
            body: v.to_string(),
            headers: Vec::new(),
        }
    }

    fn sse(events: Vec<(Option<&str>, Value)>) -> Reply {
        let mut body = String::new();
        for (event, data) in events {
            if let Some(e) = event {
                body.push_str(&format!("event: {e}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Reply {
            status: 200,
            content_type: "text/event-stream",
            body,
            headers: Vec::new(),
        }
    }
}

fn wire_of(method: &str, path: &str) -> Wire {
    let p = path.split('?').next().unwrap_or(path);
    if method != "POST" {
        return Wire::Other;
    }
    if p.ends_with("/chat/completions") {
        Wire::ChatCompletions
    } else if p.ends_with("/messages") {
        Wire::Anthropic
    } else if p.ends_with("/responses") {
        Wire::Responses
    } else if p.contains(":streamGenerateContent") || p.contains(":generateContent") {
        Wire::Gemini
    } else {
        Wire::Other
    }
}

/// The tools a request offers, per wire format.
fn offered_tools(wire: Wire, body: &Value) -> Vec<OfferedTool> {
    let mut out = Vec::new();
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    for t in &tools {
        match wire {
            Wire::Gemini => {
                for d in t["functionDeclarations"]
                    .as_array()
                    .or_else(|| t["function_declarations"].as_array())
                    .into_iter()
                    .flatten()
                {
                    if let Some(n) = d["name"].as_str() {
                        out.push(OfferedTool {
                            namespace: None,
                            name: n.to_string(),
                        });
                    }
                }
            }
            _ => {
                if let Some(n) = t["function"]["name"].as_str() {
                    out.push(OfferedTool {
                        namespace: None,
                        name: n.to_string(),
                    });
                } else if let (Some(ns), Some(sub)) = (t["name"].as_str(), t["tools"].as_array()) {
                    // Codex groups an MCP server's tools under a namespace.
                    for s in sub {
                        if let Some(n) = s["name"].as_str() {
                            out.push(OfferedTool {
                                namespace: Some(ns.to_string()),
                                name: n.to_string(),
                            });
                        }
                    }
                } else if let Some(n) = t["name"].as_str() {
                    out.push(OfferedTool {
                        namespace: None,
                        name: n.to_string(),
                    });
                } else if let Some(ty) = t["type"].as_str() {
                    // Hosted tools (web_search, ...) have only a type.
                    out.push(OfferedTool {
                        namespace: None,
                        name: ty.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// The offered tool a bare name stands for: the agent CLIs' MCP prefixes first, then the
/// bare name itself (awf's in-process provider offers bare names).
fn resolve(bare: &str, offered: &[OfferedTool]) -> Option<OfferedTool> {
    let flat_forms = [
        format!("mcp__awf__{bare}"),
        format!("mcp_awf_{bare}"),
        format!("awf_{bare}"),
    ];
    for form in &flat_forms {
        if let Some(t) = offered
            .iter()
            .find(|t| t.namespace.is_none() && &t.name == form)
        {
            return Some(t.clone());
        }
    }
    if let Some(t) = offered.iter().find(|t| {
        t.name == bare
            && t.namespace
                .as_deref()
                .is_some_and(|ns| ns.trim_end_matches(['_', '.']).ends_with("awf"))
    }) {
        return Some(t.clone());
    }
    offered
        .iter()
        .find(|t| t.namespace.is_none() && t.name == bare)
        .cloned()
}

/// Every string inside a JSON value, in order (tool results arrive in many shapes).
fn strings_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings_in(x, out)),
        // A content part says what it is in `type`; only its payload is result text.
        Value::Object(o) => match o.get("text") {
            Some(Value::String(t)) => out.push(t.clone()),
            _ => o
                .iter()
                .filter(|(k, _)| k.as_str() != "type")
                .for_each(|(_, x)| strings_in(x, out)),
        },
        _ => {}
    }
}

fn text_of(v: &Value) -> String {
    let mut parts = Vec::new();
    strings_in(v, &mut parts);
    parts.join("\n")
}

/// (number of tool calls the assistant already made, the tool results received).
fn conversation(wire: Wire, body: &Value) -> (usize, Vec<String>) {
    let mut calls = 0;
    let mut results = Vec::new();
    match wire {
        Wire::ChatCompletions => {
            for m in body["messages"].as_array().into_iter().flatten() {
                match m["role"].as_str() {
                    Some("assistant") => {
                        calls += m["tool_calls"].as_array().map_or(0, Vec::len);
                    }
                    Some("tool") => results.push(text_of(&m["content"])),
                    _ => {}
                }
            }
        }
        Wire::Anthropic => {
            for m in body["messages"].as_array().into_iter().flatten() {
                for b in m["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("tool_use") => calls += 1,
                        Some("tool_result") => results.push(text_of(&b["content"])),
                        _ => {}
                    }
                }
            }
        }
        Wire::Responses => {
            for item in body["input"].as_array().into_iter().flatten() {
                match item["type"].as_str() {
                    Some("function_call") | Some("custom_tool_call") => calls += 1,
                    Some("function_call_output") | Some("custom_tool_call_output") => {
                        results.push(text_of(&item["output"]))
                    }
                    _ => {}
                }
            }
        }
        Wire::Gemini => {
            for c in body["contents"].as_array().into_iter().flatten() {
                for p in c["parts"].as_array().into_iter().flatten() {
                    if p.get("functionCall").is_some() {
                        calls += 1;
                    }
                    if let Some(r) = p.get("functionResponse") {
                        results.push(text_of(&r["response"]));
                    }
                }
            }
        }
        Wire::Other => {}
    }
    (calls, results)
}

fn handle(req: &HttpRequest, shared: &Shared) -> Reply {
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    let wire = wire_of(&req.method, &req.path);
    let tools = offered_tools(wire, &body);
    let script = &shared.script;
    let first = script.calls.first().map(|c| c.tool.as_str());
    // A script step offers the first scripted tool (or any tool at all when the script has
    // no calls); title generation and other side requests offer none.
    let main = wire != Wire::Other
        && !tools.is_empty()
        && first.is_none_or(|t| resolve(t, &tools).is_some())
        && !is_non_streaming_gemini_side(wire, &req.path);
    let mut rec = Recorded {
        method: req.method.clone(),
        path: req.path.clone(),
        headers: req.headers.clone(),
        body: body.clone(),
        wire,
        main,
        tools: tools.clone(),
        answered_call: None,
        answered_text: None,
    };
    let model = model_of(wire, &body, &req.path);
    let seen = if main {
        shared.main_seen.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    let failure = script.fail_with.clone().or_else(|| {
        script
            .fail_first
            .as_ref()
            .filter(|(n, _, _)| seen < *n)
            .map(|(_, status, text)| (*status, text.clone()))
    });
    let reply = if !main {
        side_reply(wire, &req.method, &req.path, &body, &model, &mut rec)
    } else if let Some((status, text)) = failure {
        Reply {
            status,
            content_type: "application/json",
            body: text,
            headers: script.fail_headers.clone(),
        }
    } else {
        let (done, results) = conversation(wire, &body);
        let next = if script.endless {
            script.calls.first()
        } else {
            script.calls.get(done)
        };
        match next.and_then(|c| resolve(&c.tool, &tools).map(|t| (c, t))) {
            Some((call, tool)) => {
                let id = format!("call_{}", done + 1);
                rec.answered_call = Some((tool.flat(), call.arguments.clone()));
                tool_call_reply(wire, &body, &model, &id, &tool, &call.arguments)
            }
            None => {
                let mut text = script.answer_prefix.clone();
                for r in &results {
                    text.push('\n');
                    text.push_str(r);
                }
                rec.answered_text = Some(text.clone());
                text_reply(wire, &body, &model, &text)
            }
        }
    };
    shared.records.lock().unwrap().push(rec);
    reply
}

/// Gemini CLI asks `generateContent` (not streaming) for JSON side answers (next-speaker
/// check, routing); those are never script steps.
fn is_non_streaming_gemini_side(wire: Wire, path: &str) -> bool {
    wire == Wire::Gemini && !path.contains(":streamGenerateContent")
}

fn model_of(wire: Wire, body: &Value, path: &str) -> String {
    match wire {
        Wire::Gemini => path
            .split("/models/")
            .nth(1)
            .and_then(|s| s.split(':').next())
            .unwrap_or("fake-model")
            .to_string(),
        _ => body["model"].as_str().unwrap_or("fake-model").to_string(),
    }
}

/// A streamed Chat Completions answer: one chunk per (delta, finish_reason), then the
/// usage chunk and `[DONE]`.
fn chat_stream(model: &str, deltas: Vec<(Value, Value)>) -> Reply {
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
               "model": model, "choices": choices})
    };
    let mut events: Vec<(Option<&'static str>, Value)> = deltas
        .into_iter()
        .map(|(delta, finish)| {
            (
                None,
                chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}])),
            )
        })
        .collect();
    let mut usage = chunk(json!([]));
    usage["usage"] = usage_chat();
    events.push((None, usage));
    let mut r = Reply::sse(events);
    r.body.push_str("data: [DONE]\n\n");
    r
}

fn usage_chat() -> Value {
    json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})
}

fn tool_call_reply(
    wire: Wire,
    body: &Value,
    model: &str,
    id: &str,
    tool: &OfferedTool,
    arguments: &str,
) -> Reply {
    let streaming = body["stream"].as_bool().unwrap_or(false);
    match wire {
        Wire::ChatCompletions if streaming => chat_stream(
            model,
            vec![
                (
                    json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": id, "type": "function",
                            "function": {"name": tool.name, "arguments": ""}}]}),
                    Value::Null,
                ),
                (
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
                    Value::Null,
                ),
                (json!({}), json!("tool_calls")),
            ],
        ),
        Wire::ChatCompletions => Reply::json(json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": id, "type": "function", "function": {"name": tool.name, "arguments": arguments}}]}}],
            "usage": usage_chat()
        })),
        Wire::Anthropic => {
            let input: Value = serde_json::from_str(arguments).unwrap_or(json!({}));
            let block = json!({"type": "tool_use", "id": format!("toolu_{id}"), "name": tool.name, "input": {}});
            if !streaming {
                let mut full = block.clone();
                full["input"] = input;
                return Reply::json(anthropic_message(model, vec![full], "tool_use"));
            }
            Reply::sse(vec![
                anthropic_start(model),
                (
                    Some("content_block_start"),
                    json!({"type": "content_block_start", "index": 0, "content_block": block}),
                ),
                (
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                ),
                (
                    Some("content_block_stop"),
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                anthropic_delta("tool_use"),
                (Some("message_stop"), json!({"type": "message_stop"})),
            ])
        }
        Wire::Responses => {
            let mut item = json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                                  "name": tool.name, "arguments": arguments, "status": "completed"});
            if let Some(ns) = &tool.namespace {
                item["namespace"] = json!(ns);
            }
            responses_reply(model, item)
        }
        Wire::Gemini => {
            let args: Value = serde_json::from_str(arguments).unwrap_or(json!({}));
            gemini_reply(
                json!([{"functionCall": {"name": tool.name, "args": args}}]),
                model,
            )
        }
        Wire::Other => Reply::json(json!({})),
    }
}

fn text_reply(wire: Wire, body: &Value, model: &str, text: &str) -> Reply {
    let streaming = body["stream"].as_bool().unwrap_or(false);
    match wire {
        Wire::ChatCompletions if streaming => chat_stream(
            model,
            vec![
                (json!({"role": "assistant", "content": ""}), Value::Null),
                (json!({"content": text}), Value::Null),
                (json!({}), json!("stop")),
            ],
        ),
        Wire::ChatCompletions => Reply::json(json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": usage_chat()
        })),
        Wire::Anthropic => {
            if !streaming {
                return Reply::json(anthropic_message(
                    model,
                    vec![json!({"type": "text", "text": text})],
                    "end_turn",
                ));
            }
            Reply::sse(vec![
                anthropic_start(model),
                (
                    Some("content_block_start"),
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                (
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                ),
                (
                    Some("content_block_stop"),
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                anthropic_delta("end_turn"),
                (Some("message_stop"), json!({"type": "message_stop"})),
            ])
        }
        Wire::Responses => responses_reply(
            model,
            json!({"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        ),
        Wire::Gemini => {
            if body.is_null() {
                return Reply::json(json!({}));
            }
            gemini_reply(json!([{"text": text}]), model)
        }
        Wire::Other => Reply::json(json!({})),
    }
}

fn anthropic_message(model: &str, content: Vec<Value>, stop: &str) -> Value {
    json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
           "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": 11, "output_tokens": 7}})
}

fn anthropic_start(model: &str) -> (Option<&'static str>, Value) {
    (
        Some("message_start"),
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 11, "output_tokens": 1}}}),
    )
}

fn anthropic_delta(stop: &str) -> (Option<&'static str>, Value) {
    (
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 7}}),
    )
}

fn responses_reply(model: &str, item: Value) -> Reply {
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    let usage = json!({"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": 18});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_fake", "object": "response", "created_at": 1, "model": model,
               "status": status, "output": output, "usage": usage})
    };
    Reply::sse(vec![
        (
            Some("response.created"),
            json!({"type": "response.created", "sequence_number": 0,
                   "response": response("in_progress", json!([]), Value::Null)}),
        ),
        (
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": added}),
        ),
        (
            Some("response.output_item.done"),
            json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": item}),
        ),
        (
            Some("response.completed"),
            json!({"type": "response.completed", "sequence_number": 3,
                   "response": response("completed", json!([item]), usage)}),
        ),
    ])
}

fn gemini_reply(parts: Value, model: &str) -> Reply {
    Reply::sse(vec![(
        None,
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
               "modelVersion": model}),
    )])
}

/// Answers to requests that are not script steps: sensible, well-formed, never a tool call.
fn side_reply(
    wire: Wire,
    method: &str,
    path: &str,
    body: &Value,
    model: &str,
    rec: &mut Recorded,
) -> Reply {
    let p = path.split('?').next().unwrap_or(path);
    match wire {
        Wire::Gemini if !path.contains(":streamGenerateContent") => {
            // Gemini CLI's JSON side questions (next speaker, routing): a JSON text that
            // answers both.
            let text =
                json!({"reasoning": "fake model", "next_speaker": "user", "model_choice": "flash"})
                    .to_string();
            rec.answered_text = None;
            Reply::json(json!({
                "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
                "modelVersion": model}))
        }
        Wire::ChatCompletions | Wire::Anthropic | Wire::Responses | Wire::Gemini => {
            // Title generation and similar: a short text.
            text_reply(wire, body, model, "Fake title")
        }
        Wire::Other => {
            if p.ends_with("/count_tokens") {
                Reply::json(json!({"input_tokens": 11}))
            } else if p.contains(":countTokens") {
                Reply::json(json!({"totalTokens": 11}))
            } else if method == "GET" && p.ends_with("/models") {
                Reply::json(
                    json!({"object": "list", "data": [{"id": model, "object": "model", "created": 1, "owned_by": "fake"}], "models": []}),
                )
            } else {
                Reply::json(Value::Object(Map::new()))
            }
        }
    }
}

/// A temp dir for an `awf run` under test (its TMPDIR), beside its audit dir: `awf run`
/// refuses an audit dir beneath the temp dir, and the test dirs themselves lie under
/// /tmp when the checkout does.
pub fn private_tmp(audit_dir: &std::path::Path) -> std::path::PathBuf {
    let dir = audit_dir.with_extension("tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
