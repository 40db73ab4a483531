//! The conformance checks, and the runner that runs each in a fresh server process.
//!
//! A check is a function that drives one [`ServerProcess`] and returns `Ok(())` (PASS) or
//! a [`Verdict`] (FAIL with what was expected and what came, or SKIP with why). Where the
//! point is that something is *not* answered (a notification, a cancelled request), the
//! check sends a `ping` afterwards and looks at what arrived before the ping's answer:
//! ordering, never a wall-clock wait, decides.
//!
//! Most checks follow the MCP 2024-11-05 specification and JSON-RPC 2.0; a few pin a
//! choice the specification leaves open (an answer to requests sent before `initialize`,
//! -32600 for batches, -32602 for unknown tools, an error for an over-long line). Their
//! `about` text says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::session::{PROTOCOL_VERSION, ServerProcess, SessionError, brief};

/// How to run the suite against one server.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server command and its arguments.
    pub command: Vec<String>,
    /// Deadline of each check (a hang guard, not a performance requirement).
    pub timeout: Duration,
    /// A tool that returns its text argument; `None`: use a tool named `echo` if listed.
    pub echo_tool: Option<String>,
    /// Arguments for the echo tool; `None`: derived from its input schema.
    pub echo_args: Option<Value>,
    /// A tool that takes a while (for concurrency and cancellation checks).
    pub slow_tool: Option<String>,
    pub slow_args: Value,
    /// A tool whose call fails with an `isError` result.
    pub error_tool: Option<String>,
    pub error_args: Value,
    /// Arguments the echo tool must refuse; `None`: `{}` when its schema has required
    /// properties.
    pub bad_args: Option<Value>,
    /// The server's line-size limit; the over-long-line check sends 1 MiB more.
    pub max_line_bytes: usize,
    /// How many checks run at the same time (each has its own server process).
    pub jobs: usize,
}

impl Config {
    /// Defaults for everything but the command.
    pub fn new(command: Vec<String>) -> Self {
        Config {
            command,
            timeout: Duration::from_secs(10),
            echo_tool: None,
            echo_args: None,
            slow_tool: None,
            slow_args: json!({}),
            error_tool: None,
            error_args: json!({}),
            bad_args: None,
            max_line_bytes: 16 * 1024 * 1024,
            jobs: 4,
        }
    }
}

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Fail(String),
    Skip(String),
}

impl From<SessionError> for Verdict {
    fn from(e: SessionError) -> Self {
        Verdict::Fail(e.to_string())
    }
}

type Outcome = Result<(), Verdict>;

macro_rules! fail {
    ($($arg:tt)*) => { return Err(Verdict::Fail(format!($($arg)*))) };
}

/// One check: its name (used by `--only`/`--skip` and in the expected-deviation lists),
/// what it checks, and the function.
pub struct Check {
    pub name: &'static str,
    pub about: &'static str,
    run: fn(&Ctx) -> Outcome,
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone)]
pub struct CheckResult {
    pub name: &'static str,
    pub status: Status,
    /// Empty for a pass.
    pub message: String,
    /// For a failure: the end of what the server wrote to stderr (often says why).
    pub stderr: String,
    pub elapsed: Duration,
}

impl CheckResult {
    /// `PASS name`, `FAIL name: message` or `SKIP name: message`.
    pub fn line(&self) -> String {
        match self.status {
            Status::Pass => format!("PASS {}", self.name),
            Status::Fail => format!("FAIL {}: {}", self.name, self.message),
            Status::Skip => format!("SKIP {}: {}", self.name, self.message),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "status": self.status.as_str(), "message": self.message,
               "stderr": self.stderr, "elapsed_ms": self.elapsed.as_millis() as u64})
    }
}

/// Which checks to run.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// When not empty, only these run (the others are not reported).
    pub only: Vec<String>,
    /// These are reported as SKIP without running.
    pub skip: Vec<String>,
}

impl Selection {
    /// Fails on a name that is no check, naming it and listing the valid ones.
    pub fn validate(&self) -> Result<(), String> {
        for name in self.only.iter().chain(&self.skip) {
            if !CHECKS.iter().any(|c| c.name == name) {
                let names: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
                return Err(format!(
                    "unknown check `{name}`; valid names: {}",
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// What a check gets: the configuration and its deadline; it keeps the stderr of the
/// servers it started, for the report of a failure.
struct Ctx<'a> {
    config: &'a Config,
    deadline: Instant,
    stderr: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
}

impl Ctx<'_> {
    fn spawn(&self) -> Result<ServerProcess, Verdict> {
        let server = ServerProcess::spawn(&self.config.command, self.deadline)?;
        self.stderr.lock().unwrap().push(server.stderr_handle());
        Ok(server)
    }

    /// The end of what the servers of this check wrote to stderr.
    fn stderr_tail(&self) -> String {
        let mut all = Vec::new();
        for buffer in self.stderr.lock().unwrap().iter() {
            all.extend_from_slice(&buffer.lock().unwrap());
        }
        let text = String::from_utf8_lossy(&all);
        let chars: Vec<char> = text.chars().collect();
        chars[chars.len().saturating_sub(2000)..].iter().collect()
    }

    fn started(&self) -> Result<ServerProcess, Verdict> {
        let mut s = self.spawn()?;
        s.handshake()?;
        Ok(s)
    }
}

/// Runs the selected checks, `config.jobs` at a time, and returns the results in suite
/// order.
pub fn run(config: &Config, selection: &Selection) -> Vec<CheckResult> {
    let mut out = Vec::new();
    run_with(config, selection, |r| out.push(r.clone()));
    out
}

/// Like [`run`], calling `report` for each result in suite order as soon as it and all
/// results before it are known.
pub fn run_with(config: &Config, selection: &Selection, mut report: impl FnMut(&CheckResult)) {
    let selected: Vec<&Check> = CHECKS
        .iter()
        .filter(|c| selection.only.is_empty() || selection.only.iter().any(|n| n == c.name))
        .collect();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, CheckResult)>();
    let tx = Mutex::new(tx);
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            let tx = tx.lock().unwrap().clone();
            let (next, selected) = (&next, &selected);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(check) = selected.get(i) else { break };
                    let result = if selection.skip.iter().any(|n| n == check.name) {
                        CheckResult {
                            name: check.name,
                            status: Status::Skip,
                            message: "skipped by --skip".into(),
                            stderr: String::new(),
                            elapsed: Duration::ZERO,
                        }
                    } else {
                        run_one(config, check)
                    };
                    if tx.send((i, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: Vec<Option<CheckResult>> = vec![None; selected.len()];
        let mut emitted = 0;
        for (i, result) in rx {
            pending[i] = Some(result);
            while emitted < pending.len() {
                let Some(result) = pending[emitted].take() else {
                    break;
                };
                report(&result);
                emitted += 1;
            }
        }
    });
}

fn run_one(config: &Config, check: &Check) -> CheckResult {
    let ctx = Ctx {
        config,
        deadline: Instant::now() + config.timeout,
        stderr: Mutex::new(Vec::new()),
    };
    let started = Instant::now();
    let (status, message) = match (check.run)(&ctx) {
        Ok(()) => (Status::Pass, String::new()),
        Err(Verdict::Fail(m)) => (Status::Fail, m),
        Err(Verdict::Skip(m)) => (Status::Skip, m),
    };
    let stderr = if status == Status::Fail {
        ctx.stderr_tail()
    } else {
        String::new()
    };
    CheckResult {
        name: check.name,
        status,
        message,
        stderr,
        elapsed: started.elapsed(),
    }
}

/// Every check, in the order they are reported.
pub const CHECKS: &[Check] = &[
    Check {
        name: "initialize-2024-11-05",
        about: "initialize asking for 2024-11-05 is answered with protocolVersion 2024-11-05",
        run: initialize_2024,
    },
    Check {
        name: "initialize-result-shape",
        about: "the initialize result has capabilities (with tools) and serverInfo {name, version}",
        run: initialize_result_shape,
    },
    Check {
        name: "initialize-newer-version",
        about: "initialize asking for 2025-06-18 gets a result naming a supported version (the client decides)",
        run: initialize_newer,
    },
    Check {
        name: "initialize-unknown-version",
        about: "initialize asking for an unknown version gets a result naming another, supported version",
        run: initialize_unknown,
    },
    Check {
        name: "initialize-extra-fields-accepted",
        about: "initialize with capabilities and fields the server does not know (as newer clients send) succeeds",
        run: initialize_extra_fields,
    },
    Check {
        name: "initialized-no-answer",
        about: "notifications/initialized gets no answer",
        run: initialized_no_answer,
    },
    Check {
        name: "ping-before-initialize",
        about: "ping as the first message is answered with {}",
        run: ping_before_initialize,
    },
    Check {
        name: "ping-after-initialize",
        about: "ping after the handshake is answered with {}",
        run: ping_after_initialize,
    },
    Check {
        name: "pre-init-request-rejected",
        about: "tools/list before initialize gets an immediate JSON-RPC error, never silence (strict: the spec only says clients should not send it)",
        run: pre_init_request_rejected,
    },
    Check {
        name: "pre-init-unknown-method-answered",
        about: "an unknown method before initialize (as newer clients probe with server/discover) is answered",
        run: pre_init_unknown_method_answered,
    },
    Check {
        name: "tools-list-shape",
        about: "tools/list returns tools[] of {name, inputSchema: {type: object}, description?}",
        run: tools_list_shape,
    },
    Check {
        name: "tool-names-valid",
        about: "tool names match ^[a-zA-Z0-9_-]{1,64}$ (what Claude and other clients accept)",
        run: tool_names_valid,
    },
    Check {
        name: "tools-list-pagination",
        about: "following nextCursor ends, every page is well formed, no tool name repeats",
        run: tools_list_pagination,
    },
    Check {
        name: "tools-list-invalid-cursor",
        about: "tools/list with an invalid cursor gets error -32602",
        run: tools_list_invalid_cursor,
    },
    Check {
        name: "tools-call-result-shape",
        about: "a tools/call result has content[] of typed items and a boolean isError if any",
        run: tools_call_result_shape,
    },
    Check {
        name: "tools-call-echo-text",
        about: "the echo tool returns the text it was given",
        run: tools_call_echo_text,
    },
    Check {
        name: "tools-call-meta-accepted",
        about: "tools/call with params._meta (a progressToken, a traceparent) is served as without it",
        run: tools_call_meta_accepted,
    },
    Check {
        name: "tools-call-tool-error",
        about: "a failing tool returns a result with isError: true and a text (needs --error-tool)",
        run: tools_call_tool_error,
    },
    Check {
        name: "tools-call-unknown-tool",
        about: "calling an unknown tool gets JSON-RPC error -32602 (a protocol error, not isError)",
        run: tools_call_unknown_tool,
    },
    Check {
        name: "tools-call-bad-arguments",
        about: "arguments that do not fit the schema get JSON-RPC error -32602",
        run: tools_call_bad_arguments,
    },
    Check {
        name: "tools-call-missing-name",
        about: "tools/call without a name gets JSON-RPC error -32602",
        run: tools_call_missing_name,
    },
    Check {
        name: "unknown-method",
        about: "an unknown method gets error -32601",
        run: unknown_method,
    },
    Check {
        name: "unknown-notification-no-answer",
        about: "an unknown notification gets no answer",
        run: unknown_notification,
    },
    Check {
        name: "parse-error-null-id",
        about: "malformed JSON gets error -32700 with id null",
        run: parse_error_null_id,
    },
    Check {
        name: "parse-error-keeps-serving",
        about: "after malformed JSON the server goes on serving",
        run: parse_error_keeps_serving,
    },
    Check {
        name: "invalid-utf8",
        about: "a line that is not UTF-8 gets error -32700 with id null, and serving goes on",
        run: invalid_utf8,
    },
    Check {
        name: "batch-rejected",
        about: "a JSON array (batch) gets one error -32600, not a batch answer",
        run: batch_rejected,
    },
    Check {
        name: "null-id-rejected",
        about: "a request with id null gets error -32600",
        run: null_id_rejected,
    },
    Check {
        name: "fractional-id-rejected",
        about: "a request with a fractional id gets error -32600",
        run: fractional_id_rejected,
    },
    Check {
        name: "wrong-jsonrpc-version",
        about: "\"jsonrpc\": \"1.0\" gets error -32600",
        run: wrong_jsonrpc_version,
    },
    Check {
        name: "non-object-message",
        about: "a JSON value that is not an object gets error -32600",
        run: non_object_message,
    },
    Check {
        name: "method-not-string",
        about: "a request whose method is not a string gets error -32600",
        run: method_not_string,
    },
    Check {
        name: "string-id-echoed",
        about: "string ids (also numeric-looking ones) come back as the same strings",
        run: string_id_echoed,
    },
    Check {
        name: "integer-id-echoed",
        about: "integer ids (also 0) come back as the same integers",
        run: integer_id_echoed,
    },
    Check {
        name: "large-integer-id-echoed",
        about: "integer ids beyond 2^53 and negative ones come back exactly (strict: no detour through a double)",
        run: large_integer_id_echoed,
    },
    Check {
        name: "crlf-accepted",
        about: "a message ending in \\r\\n is accepted",
        run: crlf_accepted,
    },
    Check {
        name: "over-long-line",
        about: "a line over the server's limit (--max-line-bytes) gets an error answer, and serving goes on",
        run: over_long_line,
    },
    Check {
        name: "stdout-only-jsonrpc",
        about: "every line on stdout is a well-formed JSON-RPC 2.0 message",
        run: stdout_only_jsonrpc,
    },
    Check {
        name: "shutdown",
        about: "shutdown (not in the spec) is answered: -32601, or a result and then the server exits 0 on its own",
        run: shutdown,
    },
    Check {
        name: "end-of-input",
        about: "at end of input every request read is answered, then the server exits 0",
        run: end_of_input,
    },
    Check {
        name: "sigterm-exit",
        about: "SIGTERM ends the server",
        run: sigterm_exit,
    },
    Check {
        name: "ping-during-slow-call",
        about: "ping is answered while a slow tool call runs (needs --slow-tool)",
        run: ping_during_slow_call,
    },
    Check {
        name: "ping-when-saturated",
        about: "ping is answered while more slow calls are in flight than a server runs at once (needs --slow-tool)",
        run: ping_when_saturated,
    },
    Check {
        name: "cancellation",
        about: "a request cancelled with notifications/cancelled is never answered (needs --slow-tool)",
        run: cancellation,
    },
    Check {
        name: "cancel-unknown-request-ignored",
        about: "notifications/cancelled for an id not in flight gets no answer, serving goes on",
        run: cancel_unknown_request_ignored,
    },
    Check {
        name: "second-initialize-rejected",
        about: "a second initialize gets an error",
        run: second_initialize_rejected,
    },
];

// ---------------------------------------------------------------- helpers

fn result_of<'v>(response: &'v Value, what: &str) -> Result<&'v Value, Verdict> {
    match response.get("result") {
        Some(result) if response.get("error").is_none() => Ok(result),
        _ => fail!("expected a result for {what}, got {}", brief(response)),
    }
}

/// The error object of `response`, checking its code when `code` is given.
fn error_of<'v>(response: &'v Value, code: Option<i64>, what: &str) -> Result<&'v Value, Verdict> {
    let Some(error) = response.get("error") else {
        let want = code.map_or("a JSON-RPC error".to_string(), |c| {
            format!("JSON-RPC error {c}")
        });
        fail!("expected {want} for {what}, got {}", brief(response))
    };
    if let Some(code) = code
        && error.get("code").and_then(Value::as_i64) != Some(code)
    {
        fail!(
            "expected error code {code} for {what}, got {}",
            brief(response)
        )
    }
    Ok(error)
}

fn expect_empty_result(response: &Value, what: &str) -> Outcome {
    let result = result_of(response, what)?;
    if result.as_object().is_none_or(|o| !o.is_empty()) {
        fail!(
            "expected an empty result {{}} for {what}, got {}",
            brief(response)
        )
    }
    Ok(())
}

fn ping(s: &mut ServerProcess, after: &str) -> Outcome {
    let response = s
        .call("ping", None)
        .map_err(|e| Verdict::Fail(format!("expected ping to be answered {after}, but: {e}")))?;
    result_of(&response, &format!("ping {after}"))?;
    Ok(())
}

/// Sends `payload` as it is, then a ping; returns what answered the payload (every answer
/// that came before the ping's) and, when the ping was not answered (the server exited or
/// fell silent), why. Answers are objects without `method`, or arrays (a batch answer).
fn collect_answers(
    s: &mut ServerProcess,
    payload: &[u8],
) -> Result<(Vec<Value>, Option<SessionError>), Verdict> {
    s.send_raw(payload.to_vec())?;
    let ping_id = s.request("ping", None)?;
    let mut answers = Vec::new();
    loop {
        let message = match s.next_message_any() {
            Ok(m) => m,
            Err(e) => return Ok((answers, Some(e))),
        };
        if message.get("id") == Some(&ping_id) && message.get("method").is_none() {
            return Ok((answers, None));
        }
        if message.is_array() || (message.is_object() && message.get("method").is_none()) {
            answers.push(message);
        }
    }
}

/// [`collect_answers`], failing unless the server goes on serving.
fn answers_before_ping(
    s: &mut ServerProcess,
    payload: &[u8],
    what: &str,
) -> Result<Vec<Value>, Verdict> {
    match collect_answers(s, payload)? {
        (answers, None) => Ok(answers),
        (_, Some(e)) => {
            fail!("expected the server to go on serving after {what} (a ping answered), but: {e}")
        }
    }
}

/// `answers` must be exactly one error object with `code`, whose id is null or
/// `allowed_id` (and present: a JSON-RPC response always has an id).
fn single_error(answers: &[Value], code: i64, allowed_id: Option<&Value>, what: &str) -> Outcome {
    let [answer] = answers else {
        if answers.is_empty() {
            fail!("expected error {code} for {what}, got no answer")
        }
        fail!(
            "expected one error {code} for {what}, got {} answers: {}",
            answers.len(),
            brief(&Value::Array(answers.to_vec()))
        )
    };
    if answer.is_array() {
        fail!(
            "expected one error object {code} for {what}, got a batch answer {}",
            brief(answer)
        )
    }
    error_of(answer, Some(code), what)?;
    let Some(id) = answer.get("id") else {
        fail!(
            "expected \"id\": null in the error for {what} (a response always has an id), got {}",
            brief(answer)
        )
    };
    if !id.is_null() && Some(id) != allowed_id {
        let allowed = allowed_id.map_or(String::new(), |v| format!(" or {v}"));
        fail!(
            "expected id null{allowed} in the error for {what}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

/// `payload` must get exactly one error answer with `code` (see [`single_error`]), and the
/// server must go on serving.
fn expect_single_error(
    s: &mut ServerProcess,
    payload: &[u8],
    code: i64,
    allowed_id: Option<&Value>,
    what: &str,
) -> Outcome {
    let answers = answers_before_ping(s, payload, what)?;
    single_error(&answers, code, allowed_id, what)
}

/// All tools over all pages (at most 1000 pages), checking each page's shape.
fn list_all_tools(s: &mut ServerProcess) -> Result<Vec<Value>, Verdict> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let response = s.call("tools/list", params)?;
        let result = result_of(&response, "tools/list")?;
        let Some(page) = result.get("tools").and_then(Value::as_array) else {
            fail!(
                "expected a tools array in the tools/list result, got {}",
                brief(result)
            )
        };
        tools.extend(page.iter().cloned());
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(tools),
            Some(Value::String(c)) => cursor = Some(c.clone()),
            Some(other) => fail!("expected nextCursor to be a string or absent, got {other}"),
        }
    }
    fail!("expected pagination to end, got more than 1000 pages of tools")
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The echo tool to call: its name, arguments and the text the answer must contain.
struct EchoPlan {
    name: String,
    args: Value,
    expected_text: Option<String>,
    schema: Value,
}

const ECHO_TEXT: &str = "conformance echo ✓ 42";

fn echo_plan(ctx: &Ctx, s: &mut ServerProcess) -> Result<EchoPlan, Verdict> {
    let tools = list_all_tools(s)?;
    let name = ctx
        .config
        .echo_tool
        .clone()
        .unwrap_or_else(|| "echo".to_string());
    let tool = tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(&name));
    let Some(tool) = tool else {
        if ctx.config.echo_tool.is_some() {
            fail!(
                "expected tools/list to list the --echo-tool `{name}`, got {} tools without it",
                tools.len()
            )
        }
        return Err(Verdict::Skip(
            "no tool named `echo`; name one with --echo-tool".into(),
        ));
    };
    let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
    if let Some(args) = &ctx.config.echo_args {
        return Ok(EchoPlan {
            name,
            args: args.clone(),
            expected_text: first_string(args),
            schema,
        });
    }
    // Fill the schema's required properties; the string ones carry the text to echo.
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut args = serde_json::Map::new();
    for prop in &required {
        let ty = schema
            .pointer(&format!("/properties/{prop}/type"))
            .and_then(Value::as_str);
        let value = match ty {
            Some("string") => json!(ECHO_TEXT),
            Some("integer") | Some("number") => json!(1),
            Some("boolean") => json!(true),
            _ => {
                return Err(Verdict::Skip(format!(
                    "cannot derive arguments for `{name}` (property `{prop}`); give --echo-args"
                )));
            }
        };
        args.insert(prop.clone(), value);
    }
    let expected_text = args
        .values()
        .any(|v| v == ECHO_TEXT)
        .then(|| ECHO_TEXT.to_string());
    Ok(EchoPlan {
        name,
        args: Value::Object(args),
        expected_text,
        schema,
    })
}

fn first_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.iter().find_map(first_string),
        Value::Object(map) => map.values().find_map(first_string),
        _ => None,
    }
}

fn call_tool(s: &mut ServerProcess, name: &str, args: &Value) -> Result<Value, Verdict> {
    Ok(s.call("tools/call", Some(json!({"name": name, "arguments": args})))?)
}

fn slow_call_params(ctx: &Ctx) -> Result<Value, Verdict> {
    match &ctx.config.slow_tool {
        Some(name) => Ok(json!({"name": name, "arguments": ctx.config.slow_args})),
        None => Err(Verdict::Skip(
            "no slow tool; name one with --slow-tool and --slow-args".into(),
        )),
    }
}

fn is_date_version(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        let b = s.as_bytes();
        b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
    })
}

// ---------------------------------------------------------------- lifecycle

fn initialize_2024(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    let result = result_of(&response, "initialize")?;
    if result.get("protocolVersion") != Some(&json!(PROTOCOL_VERSION)) {
        fail!(
            "expected protocolVersion \"{PROTOCOL_VERSION}\" (the version asked for), got {}",
            brief(result)
        )
    }
    Ok(())
}

fn initialize_result_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    let result = result_of(&response, "initialize")?;
    if !result.get("capabilities").is_some_and(Value::is_object) {
        fail!("expected a capabilities object, got {}", brief(result))
    }
    if !result
        .pointer("/capabilities/tools")
        .is_some_and(Value::is_object)
    {
        fail!(
            "expected capabilities.tools to be an object (the server offers tools), got {}",
            brief(&result["capabilities"])
        )
    }
    let info = result.get("serverInfo");
    let name_ok = info
        .and_then(|i| i.get("name"))
        .is_some_and(Value::is_string);
    let version_ok = info
        .and_then(|i| i.get("version"))
        .is_some_and(Value::is_string);
    if !name_ok || !version_ok {
        fail!(
            "expected serverInfo with string name and version, got {}",
            info.map_or("nothing".into(), brief)
        )
    }
    if result.get("instructions").is_some_and(|i| !i.is_string()) {
        fail!(
            "expected instructions to be a string when present, got {}",
            brief(&result["instructions"])
        )
    }
    Ok(())
}

fn initialize_newer(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize("2025-06-18")?;
    let result = result_of(&response, "initialize asking for 2025-06-18")?;
    let version = result.get("protocolVersion").unwrap_or(&Value::Null);
    if !is_date_version(version) {
        fail!(
            "expected protocolVersion to be a YYYY-MM-DD version the server supports, got {version}"
        )
    }
    Ok(())
}

fn initialize_unknown(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let asked = "1999-01-01";
    let response = s.initialize(asked)?;
    let result = result_of(
        &response,
        &format!("initialize asking for {asked} (the server must answer a version it supports)"),
    )?;
    let version = result.get("protocolVersion").unwrap_or(&Value::Null);
    if version == asked || !is_date_version(version) {
        fail!(
            "expected protocolVersion to name a version the server supports (not {asked}), got {version}"
        )
    }
    Ok(())
}

fn initialize_extra_fields(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call(
        "initialize",
        Some(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {
                "roots": {"listChanged": true},
                "sampling": {},
                "elicitation": {},
                "experimental": {"conformance": {}},
                "conformance-unknown-capability": {"x": 1},
            },
            "clientInfo": {"name": "mcp-conformance", "title": "MCP conformance", "version": "1.0.0"},
            "_meta": {"conformance": true},
            "conformanceUnknownField": 42,
        })),
    )?;
    let result = result_of(
        &response,
        "initialize with fields the server does not know (ignore them)",
    )?;
    if !is_date_version(result.get("protocolVersion").unwrap_or(&Value::Null)) {
        fail!(
            "expected a protocolVersion in the initialize result, got {}",
            brief(result)
        )
    }
    Ok(())
}

fn initialized_no_answer(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    result_of(&response, "initialize")?;
    s.notify("notifications/initialized", None)?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to notifications/initialized, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}

fn ping_before_initialize(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call("ping", None)?;
    expect_empty_result(&response, "ping before initialize")
}

fn ping_after_initialize(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("ping", None)?;
    expect_empty_result(&response, "ping after initialize")
}

fn pre_init_request_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call("tools/list", None)?;
    error_of(&response, None, "tools/list before initialize")?;
    Ok(())
}

fn pre_init_unknown_method_answered(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    s.call("server/discover", None).map_err(|e| {
        Verdict::Fail(format!("expected an answer to server/discover before initialize (newer clients wait for it), but: {e}"))
    })?;
    Ok(())
}

fn second_initialize_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    error_of(&response, None, "a second initialize")?;
    Ok(())
}

// ---------------------------------------------------------------- tools

fn tools_list_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("tools/list", None)?;
    let result = result_of(&response, "tools/list")?;
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        fail!("expected a tools array, got {}", brief(result))
    };
    for tool in tools {
        if !tool.get("name").is_some_and(Value::is_string) {
            fail!(
                "expected every tool to have a string name, got {}",
                brief(tool)
            )
        }
        if tool.pointer("/inputSchema/type") != Some(&json!("object")) {
            fail!(
                "expected inputSchema to be an object schema ({{\"type\": \"object\", …}}), got {}",
                brief(tool)
            )
        }
        if tool.get("description").is_some_and(|d| !d.is_string()) {
            fail!(
                "expected description to be a string when present, got {}",
                brief(tool)
            )
        }
    }
    if result.get("nextCursor").is_some_and(|c| !c.is_string()) {
        fail!(
            "expected nextCursor to be a string when present, got {}",
            brief(result)
        )
    }
    Ok(())
}

fn tool_names_valid(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let tools = list_all_tools(&mut s)?;
    for tool in &tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        if !valid_tool_name(name) {
            fail!("expected tool names matching ^[a-zA-Z0-9_-]{{1,64}}$, got {name:?}")
        }
    }
    Ok(())
}

fn tools_list_pagination(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let tools = list_all_tools(&mut s)?;
    let mut seen = std::collections::HashSet::new();
    for tool in &tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        if !seen.insert(name.to_string()) {
            fail!("expected each tool once over all pages, got {name:?} again")
        }
    }
    Ok(())
}

fn tools_list_invalid_cursor(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call(
        "tools/list",
        Some(json!({"cursor": "conformance: not a cursor"})),
    )?;
    error_of(&response, Some(-32602), "tools/list with an invalid cursor")?;
    Ok(())
}

fn tools_call_result_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let response = call_tool(&mut s, &plan.name, &plan.args)?;
    let result = result_of(&response, &format!("tools/call {}", plan.name))?;
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        fail!(
            "expected a content array in the tools/call result, got {}",
            brief(result)
        )
    };
    for item in content {
        let ok = match item.get("type").and_then(Value::as_str) {
            Some("text") => item.get("text").is_some_and(Value::is_string),
            Some("image") | Some("audio") => {
                item.get("data").is_some_and(Value::is_string)
                    && item.get("mimeType").is_some_and(Value::is_string)
            }
            Some("resource") => item.get("resource").is_some_and(Value::is_object),
            Some(_) => true,
            None => false,
        };
        if !ok {
            fail!(
                "expected content items of a known shape (text has a string text, …), got {}",
                brief(item)
            )
        }
    }
    match result.get("isError") {
        None | Some(Value::Bool(false)) => Ok(()),
        Some(Value::Bool(true)) => fail!(
            "expected the echo call to succeed, got isError: true: {}",
            brief(result)
        ),
        Some(other) => fail!("expected isError to be a boolean, got {other}"),
    }
}

fn tools_call_echo_text(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let Some(expected) = plan.expected_text else {
        return Err(Verdict::Skip(
            "the echo arguments hold no string to look for".into(),
        ));
    };
    let response = call_tool(&mut s, &plan.name, &plan.args)?;
    let result = result_of(&response, &format!("tools/call {}", plan.name))?;
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if !texts.iter().any(|t| t.contains(&expected)) {
        fail!(
            "expected a text content containing {expected:?}, got {}",
            brief(result)
        )
    }
    Ok(())
}

fn tools_call_meta_accepted(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let meta = json!({"progressToken": "conformance-progress",
                      "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let response = s.call(
        "tools/call",
        Some(json!({"name": plan.name, "arguments": plan.args, "_meta": meta})),
    )?;
    let result = result_of(
        &response,
        &format!("tools/call {} with params._meta", plan.name),
    )?;
    if result.get("isError") == Some(&json!(true)) {
        fail!(
            "expected the call with params._meta to succeed as without it, got {}",
            brief(result)
        )
    }
    Ok(())
}

fn tools_call_tool_error(ctx: &Ctx) -> Outcome {
    let Some(name) = &ctx.config.error_tool else {
        return Err(Verdict::Skip(
            "no failing tool; name one with --error-tool".into(),
        ));
    };
    let mut s = ctx.started()?;
    let response = call_tool(&mut s, name, &ctx.config.error_args)?;
    let result = result_of(
        &response,
        &format!("tools/call {name} (a tool failure is a result, not a protocol error)"),
    )?;
    if result.get("isError") != Some(&json!(true)) {
        fail!(
            "expected isError: true from the failing tool, got {}",
            brief(result)
        )
    }
    let has_text = result
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|i| {
                i.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.is_empty())
            })
        });
    if !has_text {
        fail!(
            "expected a text saying why the tool failed, got {}",
            brief(result)
        )
    }
    Ok(())
}

fn tools_call_unknown_tool(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = call_tool(&mut s, "conformance-no-such-tool", &json!({}))?;
    if response.get("result").is_some() {
        fail!(
            "expected JSON-RPC error -32602 for an unknown tool (a protocol error), got a result: {}",
            brief(&response)
        )
    }
    error_of(&response, Some(-32602), "an unknown tool")?;
    Ok(())
}

fn tools_call_bad_arguments(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let bad = match &ctx.config.bad_args {
        Some(bad) => bad.clone(),
        None if plan
            .schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty()) =>
        {
            json!({})
        }
        None => {
            return Err(Verdict::Skip(
                "the echo tool requires nothing; give --bad-args".into(),
            ));
        }
    };
    let response = call_tool(&mut s, &plan.name, &bad)?;
    if response.get("result").is_some() {
        fail!(
            "expected JSON-RPC error -32602 for arguments {bad} to `{}`, got a result: {}",
            plan.name,
            brief(&response)
        )
    }
    error_of(&response, Some(-32602), "bad arguments")?;
    Ok(())
}

fn tools_call_missing_name(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("tools/call", Some(json!({"arguments": {}})))?;
    error_of(&response, Some(-32602), "tools/call without a name")?;
    Ok(())
}

// ---------------------------------------------------------------- JSON-RPC

fn unknown_method(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("conformance/no-such-method", None)?;
    error_of(&response, Some(-32601), "an unknown method")?;
    Ok(())
}

fn unknown_notification(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.notify("notifications/conformance_unknown", Some(json!({})))?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to an unknown notification, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}

const MALFORMED: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 77, \"method\": \"ping\"\n";

fn parse_error_null_id(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    // Whether serving goes on is the next check's business: judge what came, either way.
    let (answers, _) = collect_answers(&mut s, MALFORMED)?;
    single_error(&answers, -32700, None, "malformed JSON")
}

fn parse_error_keeps_serving(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.send_raw(MALFORMED.to_vec())?;
    ping(&mut s, "after malformed JSON")
}

fn invalid_utf8(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line =
        b"{\"jsonrpc\":\"2.0\",\"id\":78,\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\"}}\n";
    expect_single_error(&mut s, line, -32700, None, "a line that is not UTF-8")
}

fn batch_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"[{\"jsonrpc\":\"2.0\",\"id\":79,\"method\":\"ping\"}]\n";
    expect_single_error(&mut s, line, -32600, None, "a batch array")
}

fn null_id_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n";
    expect_single_error(&mut s, line, -32600, None, "id null")
}

fn fractional_id_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}\n";
    expect_single_error(&mut s, line, -32600, Some(&json!(1.5)), "id 1.5")
}

fn wrong_jsonrpc_version(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"1.0\",\"id\":80,\"method\":\"ping\"}\n";
    expect_single_error(
        &mut s,
        line,
        -32600,
        Some(&json!(80)),
        "\"jsonrpc\": \"1.0\"",
    )
}

fn non_object_message(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_single_error(&mut s, b"42\n", -32600, None, "the JSON value 42")
}

fn method_not_string(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":81,\"method\":5}\n";
    expect_single_error(
        &mut s,
        line,
        -32600,
        Some(&json!(81)),
        "a method that is a number",
    )
}

/// Sends pings with the given ids, then a marker ping; returns the ids of the answers that
/// came before the marker's.
fn ids_answered(s: &mut ServerProcess, ids: &[Value]) -> Result<Vec<Value>, Verdict> {
    for id in ids {
        s.request_with_id(id.clone(), "ping", None)?;
    }
    let marker = json!("conformance-marker");
    s.request_with_id(marker.clone(), "ping", None)?;
    let answers = s.responses_until(&marker)?;
    Ok(answers[..answers.len() - 1]
        .iter()
        .map(|a| a.get("id").cloned().unwrap_or(Value::Null))
        .collect())
}

fn expect_ids_echoed(s: &mut ServerProcess, ids: &[Value]) -> Outcome {
    let got = ids_answered(s, ids)?;
    for id in ids {
        if !got.contains(id) {
            fail!(
                "expected an answer with id {id} (same type and value), got ids {}",
                brief(&Value::Array(got.clone()))
            )
        }
    }
    Ok(())
}

fn string_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!("conformance-id-é"), json!("7")])
}

fn integer_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!(4242), json!(0)])
}

fn large_integer_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!(9_007_199_254_740_993_i64), json!(-1)])
}

fn crlf_accepted(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let id = json!(s.fresh_id());
    s.send_raw(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\r\n"
    ))?;
    let response = s.wait_response(&id)?;
    result_of(&response, "a ping ending in \\r\\n")?;
    Ok(())
}

fn over_long_line(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let size = ctx.config.max_line_bytes + 1024 * 1024;
    let id = json!(s.fresh_id());
    let head =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"params\":{{\"pad\":\"");
    let tail = "\"}}\n";
    let mut line = Vec::with_capacity(size);
    line.extend_from_slice(head.as_bytes());
    line.resize(size - tail.len(), b'a');
    line.extend_from_slice(tail.as_bytes());
    let what = format!(
        "a {size}-byte line (limit {} bytes, --max-line-bytes)",
        ctx.config.max_line_bytes
    );
    let answers = answers_before_ping(&mut s, &line, &what)?;
    let [answer] = answers.as_slice() else {
        fail!(
            "expected one error answer for {what}, got {} answers",
            answers.len()
        )
    };
    error_of(answer, None, &what)?;
    let answer_id = answer.get("id").unwrap_or(&Value::Null);
    if !answer_id.is_null() && answer_id != &id {
        fail!(
            "expected id null or {id} in the error for {what}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

fn stdout_only_jsonrpc(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.call("tools/list", None)?;
    if let Ok(plan) = echo_plan(ctx, &mut s) {
        call_tool(&mut s, &plan.name, &plan.args)?;
    }
    s.call("conformance/no-such-method", None)?;
    s.call("ping", None)?;
    for (n, line) in s.stdout_lines().iter().enumerate() {
        let text = String::from_utf8_lossy(&line.raw);
        let problem = match &line.value {
            None => Some("not JSON"),
            Some(v) => envelope_problem(v),
        };
        if let Some(problem) = problem {
            fail!(
                "expected only JSON-RPC 2.0 messages on stdout, got line {} ({problem}): {}",
                n + 1,
                crate::session::shorten(&text, 200)
            )
        }
    }
    Ok(())
}

/// What is wrong with a message as a JSON-RPC 2.0 request, notification or response.
fn envelope_problem(message: &Value) -> Option<&'static str> {
    let Some(object) = message.as_object() else {
        return Some("not a JSON object");
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Some("jsonrpc is not \"2.0\"");
    }
    if let Some(method) = object.get("method") {
        return (!method.is_string()).then_some("method is not a string");
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) => None,
        (None, Some(error)) => {
            let code_ok = error.get("code").is_some_and(|c| c.is_i64());
            let message_ok = error.get("message").is_some_and(Value::is_string);
            (!(code_ok && message_ok)).then_some("error lacks an integer code or a string message")
        }
        _ => Some("a response needs exactly one of result and error"),
    }
}

// ---------------------------------------------------------------- process life

fn shutdown(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("shutdown", None)?;
    if response.pointer("/error/code") == Some(&json!(-32601)) {
        return Ok(());
    }
    result_of(&response, "shutdown (or error -32601 when unsupported)")?;
    match s.wait_exit() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => fail!("expected exit status 0 after shutdown, got {status}"),
        Err(_) => fail!(
            "expected the server to exit on its own after answering shutdown, got still running at the deadline"
        ),
    }
}

fn end_of_input(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let mut ids = vec![s.request("ping", None)?, s.request("tools/list", None)?];
    // Whether this call succeeds does not matter here, only that it is answered.
    let name = ctx
        .config
        .echo_tool
        .clone()
        .unwrap_or_else(|| "echo".into());
    let args = ctx
        .config
        .echo_args
        .clone()
        .unwrap_or(json!({"text": ECHO_TEXT}));
    ids.push(s.request("tools/call", Some(json!({"name": name, "arguments": args})))?);
    if let Ok(params) = slow_call_params(ctx) {
        ids.push(s.request("tools/call", Some(params))?);
    }
    s.close_stdin();
    let (answers, closed) = s.drain_responses();
    for id in &ids {
        if !answers.iter().any(|a| a.get("id") == Some(id)) {
            fail!(
                "expected every request read before end of input to be answered, got no answer to id {id}"
            )
        }
    }
    closed?;
    match s.wait_exit()? {
        status if status.success() => Ok(()),
        status => fail!("expected exit status 0 at end of input, got {status}"),
    }
}

fn sigterm_exit(ctx: &Ctx) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let mut s = ctx.started()?;
    ping(&mut s, "before SIGTERM")?;
    s.terminate()?;
    let status = s.wait_exit().map_err(|_| {
        Verdict::Fail(
            "expected the server to exit on SIGTERM, got still running at the deadline".into(),
        )
    })?;
    if status.success() || status.signal() == Some(15) || status.code() == Some(143) {
        Ok(())
    } else {
        fail!("expected exit 0 or death by SIGTERM, got {status}")
    }
}

fn ping_during_slow_call(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let slow_id = s.request("tools/call", Some(params))?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if let Some(slow) = answers.iter().find(|a| a.get("id") == Some(&slow_id)) {
        fail!(
            "expected the ping to be answered while the slow call runs, got the slow call's answer first: {}",
            brief(slow)
        )
    }
    Ok(())
}

/// Slow calls sent at once by `ping-when-saturated`: past the usual bounds of concurrent
/// calls (8 for mcpserver), so that a server that stops reading at its bound shows it.
const SATURATING_CALLS: usize = 16;

fn ping_when_saturated(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let mut slow = Vec::new();
    for _ in 0..SATURATING_CALLS {
        slow.push(s.request("tools/call", Some(params.clone()))?);
    }
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    // A call refused at once (an error naming a bound) is fine; a finished call before
    // the ping means the ping waited for a worker.
    if let Some(done) = answers
        .iter()
        .find(|a| a.get("result").is_some() && slow.iter().any(|id| a.get("id") == Some(id)))
    {
        fail!(
            "expected the ping to be answered while {SATURATING_CALLS} slow calls are in \
             flight, got a slow call's result first (the server stops reading when its \
             workers are busy): {}",
            brief(done)
        )
    }
    Ok(())
}

fn cancellation(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let cancelled = s.request("tools/call", Some(params.clone()))?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": cancelled, "reason": "conformance check"})),
    )?;
    // A second, identical call started after the first: if the first were still running it
    // would be answered before this one (or, on a serial server, certainly before).
    let marker = s.request("tools/call", Some(params))?;
    let mut answers = s.responses_until(&marker)?;
    // Then end of input, and whatever else comes before the server closes its stdout (a
    // server that stays up after end of input is `end-of-input`'s business, not ours).
    s.close_stdin();
    answers.extend(s.drain_responses().0);
    if let Some(answer) = answers.iter().find(|a| a.get("id") == Some(&cancelled)) {
        fail!(
            "expected no answer to the cancelled request {cancelled}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

fn cancel_unknown_request_ignored(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": 999_999, "reason": "conformance check"})),
    )?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to a cancellation of an unknown request, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_unique_and_at_least_thirty() {
        let mut names: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CHECKS.len(), "duplicate check names");
        assert!(CHECKS.len() >= 30, "only {} checks", CHECKS.len());
    }

    #[test]
    fn tool_name_rule() {
        assert!(valid_tool_name("Read"));
        assert!(valid_tool_name("get-sum_2"));
        assert!(!valid_tool_name("fs.read"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }

    #[test]
    fn envelope_rules() {
        assert_eq!(
            envelope_problem(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            None
        );
        assert!(envelope_problem(&json!({"jsonrpc": "2.0", "id": 1})).is_some());
        assert!(
            envelope_problem(
                &json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1.5, "message": "x"}})
            )
            .is_some()
        );
        assert!(envelope_problem(&json!([1])).is_some());
    }

    #[test]
    fn selection_rejects_unknown_names() {
        let selection = Selection {
            only: vec!["no-such-check".into()],
            skip: vec![],
        };
        let error = selection.validate().unwrap_err();
        assert!(
            error.contains("no-such-check") && error.contains("ping-before-initialize"),
            "{error}"
        );
    }

    #[test]
    fn date_versions() {
        assert!(is_date_version(&json!("2024-11-05")));
        assert!(!is_date_version(&json!("2024-11")));
        assert!(!is_date_version(&json!(20241105)));
    }
}
