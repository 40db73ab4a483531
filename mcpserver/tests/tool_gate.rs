//! Tools withheld while serving, through `Server::tool_gate`: they leave `tools/list`,
//! calls to them are refused with the reason (the hooks see them rejected), and with
//! `notify_list_changed` every initialized session writes
//! `notifications/tools/list_changed` — over the in-memory transport, over OS pipes
//! while the session waits for input, through a `Dispatcher` and `Server::call`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

use common::{Client, PATIENCE, object_schema};
use mcpserver::{
    CallContext, CallError, CallOutcome, CallStatus, Hooks, RequestId, Server, ServerBuilder,
    StopReason, Tool, ToolResult,
};
use serde::Deserialize;
use serde_json::{Value, json};

const LIST_CHANGED: &str = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

#[derive(Deserialize)]
struct Text {
    text: String,
}

/// Every call's end: the tool, how the call ended, and why it failed if it did.
#[derive(Default)]
struct Recorder {
    ends: Mutex<Vec<(String, CallStatus, Option<String>)>>,
}

impl Hooks for Recorder {
    fn call_finished(&self, ctx: &CallContext, outcome: &CallOutcome<'_>) {
        self.ends.lock().unwrap().push((
            ctx.tool().to_owned(),
            outcome.status,
            outcome.error.map(str::to_owned),
        ));
    }
}

fn end(
    tool: &str,
    status: CallStatus,
    error: Option<&str>,
) -> (String, CallStatus, Option<String>) {
    (tool.to_owned(), status, error.map(str::to_owned))
}

fn builder(notify: bool) -> ServerBuilder {
    Server::builder("gate-test", "1")
        .notify_list_changed(notify)
        .tool(
            Tool::new("echo", "Echo", object_schema()),
            |a: Text, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool_raw(
            Tool::new("fetch", "Fetch a page", json!({"type": "object"})),
            |_, _| Ok::<_, String>(ToolResult::text("the page")),
        )
        .withhold("secret", "the host's policy denies it")
}

fn listed(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list answer: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

const REFUSED: &str =
    "tool \"fetch\" is not available: its description changed since it was approved";

#[test]
fn a_tool_withheld_mid_session_is_notified_unlisted_and_refused_with_its_reason() {
    let rec = Arc::new(Recorder::default());
    let server = builder(true).hooks(rec.clone()).build().unwrap();
    let gate = server.tool_gate();
    let mut c = Client::start(server);
    let init = c.request(0, "initialize", json!({"protocolVersion": "2024-11-05"}));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    c.notify("notifications/initialized", json!({}));
    assert_eq!(
        listed(&c.request(1, "tools/list", json!({}))),
        ["echo", "fetch"]
    );
    let page = c.call(2, "fetch", json!({}));
    assert_eq!(page["result"]["content"][0]["text"], "the page", "{page}");

    // The session is idle, waiting for input: the notification comes unasked.
    assert!(gate.withhold("fetch", "its description changed since it was approved"));
    assert_eq!(c.recv_line(), LIST_CHANGED);

    assert_eq!(listed(&c.request(3, "tools/list", json!({}))), ["echo"]);
    let refused = c.call(4, "fetch", json!({}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "tool \"fetch\" is not available: its description changed since it was approved"
    );
    // Refused exactly as a tool withheld at build time is.
    let secret = c.call(5, "secret", json!({}));
    assert_eq!(secret["error"]["code"], refused["error"]["code"]);
    assert_eq!(
        secret["error"]["message"],
        "tool \"secret\" is not available: the host's policy denies it"
    );

    // Unknown, withheld at build time, or withheld already: nothing changes.
    assert!(!gate.withhold("fetch", "a second reason"));
    assert!(!gate.withhold("nope", "never registered"));
    assert!(!gate.withhold("secret", "withheld at build time"));
    let again = c.call(6, "fetch", json!({}));
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("its description changed since it was approved"),
        "{again}"
    );
    let echo = c.call(7, "echo", json!({"text": "still here"}));
    assert_eq!(echo["result"]["content"][0]["text"], "still here", "{echo}");

    let (reason, rest) = c.finish();
    assert_eq!(reason, StopReason::EndOfInput);
    assert!(rest.is_empty(), "lines after the last answer: {rest:?}");
    assert_eq!(
        *rec.ends.lock().unwrap(),
        [
            end("fetch", CallStatus::Ok, None),
            end("fetch", CallStatus::Rejected, Some(REFUSED)),
            end(
                "secret",
                CallStatus::Rejected,
                Some("tool \"secret\" is not available: the host's policy denies it")
            ),
            end("fetch", CallStatus::Rejected, Some(REFUSED)),
            end("echo", CallStatus::Ok, None),
        ]
    );
}

#[test]
fn without_notify_list_changed_the_tool_is_withheld_and_nothing_is_written() {
    let server = builder(false).build().unwrap();
    let gate = server.tool_gate();
    let mut c = Client::start(server);
    let init = c.request(0, "initialize", json!({}));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], false,
        "{init}"
    );
    assert!(gate.withhold("fetch", "changed"));
    // The next line is the answer to the next request: no notification came first.
    assert_eq!(listed(&c.request(1, "tools/list", json!({}))), ["echo"]);
    let refused = c.call(2, "fetch", json!({}));
    assert_eq!(
        refused["error"]["message"],
        "tool \"fetch\" is not available: changed"
    );
    let (_, rest) = c.finish();
    assert!(rest.is_empty(), "lines after the last answer: {rest:?}");
}

#[test]
fn a_session_is_told_only_of_changes_after_it_answered_initialize() {
    let server = builder(true).build().unwrap();
    let gate = server.tool_gate();
    let mut c = Client::start(server);
    assert_eq!(c.request(1, "ping", json!({}))["result"], json!({}));
    // Withheld before this session's initialize: its first list already says so, and
    // nothing is written for it (the next line is the answer to initialize).
    assert!(gate.withhold("fetch", "changed before the client came"));
    let init = c.request(2, "initialize", json!({}));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    assert_eq!(listed(&c.request(3, "tools/list", json!({}))), ["echo"]);
    // After it: told.
    assert!(gate.withhold("echo", "changed while the client was there"));
    assert_eq!(c.recv_line(), LIST_CHANGED);
    assert_eq!(
        listed(&c.request(4, "tools/list", json!({}))),
        Vec::<String>::new()
    );
    let (_, rest) = c.finish();
    assert!(rest.is_empty(), "lines after the last answer: {rest:?}");
}

/// A client over OS pipes to `server.serve` on a thread: the server's reader blocks in
/// a real `read` while the client is quiet. Lines come through a channel, so a line
/// that never comes fails the test after `PATIENCE` instead of hanging it.
struct PipeClient {
    to_server: Option<std::io::PipeWriter>,
    lines: Receiver<String>,
}

impl PipeClient {
    fn start(server: Arc<Server>) -> (PipeClient, std::thread::JoinHandle<StopReason>) {
        let (server_in, to_server) = std::io::pipe().unwrap();
        let (from_server, server_out) = std::io::pipe().unwrap();
        let serving = std::thread::spawn(move || server.serve(server_in, server_out).unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(from_server).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let client = PipeClient {
            to_server: Some(to_server),
            lines,
        };
        (client, serving)
    }

    fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.to_server.as_mut().unwrap().write_all(&line).unwrap();
    }

    fn recv_line(&mut self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .expect("the server should have written a line")
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let answer: Value = serde_json::from_str(&self.recv_line()).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

#[test]
fn every_serving_session_is_told_even_one_blocked_reading_a_pipe() {
    let server = Arc::new(builder(true).build().unwrap());
    let gate = server.tool_gate();
    let (mut piped, serving) = PipeClient::start(server.clone());
    piped.request(0, "initialize", json!({}));
    let mut in_memory = Client::start(server.clone());
    let init = in_memory.request(0, "initialize", json!({}));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    let mut dispatcher = server.dispatcher();
    dispatcher.dispatch(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#);

    assert!(gate.withhold("fetch", "changed"));
    assert_eq!(piped.recv_line(), LIST_CHANGED);
    assert_eq!(in_memory.recv_line(), LIST_CHANGED);
    assert_eq!(dispatcher.notifications(), format!("{LIST_CHANGED}\n"));

    // Each change is told again, to each session.
    assert!(gate.withhold("echo", "changed too"));
    assert_eq!(piped.recv_line(), LIST_CHANGED);
    assert_eq!(
        listed(&piped.request(1, "tools/list", json!({}))),
        Vec::<String>::new()
    );
    piped.to_server = None;
    assert_eq!(serving.join().unwrap(), StopReason::EndOfInput);
    assert_eq!(in_memory.recv_line(), LIST_CHANGED);
    let (reason, rest) = in_memory.finish();
    assert_eq!(reason, StopReason::EndOfInput);
    assert!(rest.is_empty(), "lines after the last answer: {rest:?}");
    assert_eq!(dispatcher.notifications(), format!("{LIST_CHANGED}\n"));
}

#[test]
fn notifications_written_during_a_flood_of_answers_are_whole_lines_between_them() {
    let mut b = Server::builder("flood", "1")
        .notify_list_changed(true)
        .tool(
            Tool::new("echo", "Echo", object_schema()),
            |a: Text, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        );
    for i in 0..20 {
        b = b.tool_raw(
            Tool::new(
                format!("t{i}"),
                "A tool to withhold",
                json!({"type": "object"}),
            ),
            |_, _| Ok::<_, String>(ToolResult::text("")),
        );
    }
    let server = Arc::new(b.build().unwrap());
    let gate = server.tool_gate();
    let (mut client, serving) = PipeClient::start(server);
    client.request(0, "initialize", json!({}));

    const CALLS: i64 = 2000;
    let text = "x".repeat(3000);
    let mut to_server = client.to_server.take().unwrap();
    let writer = std::thread::spawn(move || {
        for id in 1..=CALLS {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}});
            let mut line = serde_json::to_vec(&call).unwrap();
            line.push(b'\n');
            to_server.write_all(&line).unwrap();
        }
        to_server
    });
    let (mut answers, mut notices) = (0, 0);
    while answers < CALLS || notices == 0 {
        let line = client.recv_line();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not one whole JSON line ({e}): {line:.200}"));
        if line == LIST_CHANGED {
            notices += 1;
        } else {
            assert_eq!(
                v["result"]["content"][0]["text"].as_str().map(str::len),
                Some(3000)
            );
            answers += 1;
            // Withheld while answers stream: the notification must find its way
            // between them.
            if answers % 100 == 0 {
                assert!(gate.withhold(&format!("t{}", answers / 100 - 1), "changed"));
            }
        }
    }
    drop(writer.join().unwrap());
    assert_eq!(serving.join().unwrap(), StopReason::EndOfInput);
    while let Ok(line) = client.lines.recv_timeout(PATIENCE) {
        assert_eq!(line, LIST_CHANGED);
    }
}

#[test]
fn a_call_running_when_its_tool_is_withheld_runs_to_its_end() {
    let (started_tx, started) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let (started_tx, release_rx) = (Mutex::new(started_tx), Mutex::new(release_rx));
    let server = Server::builder("running", "1")
        .notify_list_changed(true)
        .tool_raw(
            Tool::new("slow", "Waits to be released", json!({"type": "object"})),
            move |_, _| {
                started_tx.lock().unwrap().send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
                Ok::<_, String>(ToolResult::text("done"))
            },
        )
        .build()
        .unwrap();
    let gate = server.tool_gate();
    let mut c = Client::start(server);
    c.request(0, "initialize", json!({}));
    c.send_request(1, "tools/call", json!({"name": "slow", "arguments": {}}));
    started.recv_timeout(PATIENCE).unwrap();
    assert!(gate.withhold("slow", "changed while it ran"));
    // Told while the call runs (the reading thread is busy with it).
    assert_eq!(c.recv_line(), LIST_CHANGED);
    release.send(()).unwrap();
    let done = c.recv();
    assert_eq!(
        (&done["id"], &done["result"]["content"][0]["text"]),
        (&json!(1), &json!("done"))
    );
    let refused = c.call(2, "slow", json!({}));
    assert_eq!(
        refused["error"]["message"],
        "tool \"slow\" is not available: changed while it ran"
    );
    c.finish();
}

#[test]
fn a_dispatcher_returns_the_notification_once_and_only_after_initialize() {
    let server = builder(true).build().unwrap();
    let quiet = builder(false).build().unwrap();
    let gate = server.tool_gate();
    let mut told = server.dispatcher();
    let mut early = server.dispatcher();
    let mut off = quiet.dispatcher();
    let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
    told.dispatch(init);
    off.dispatch(init);
    assert_eq!(told.notifications(), "");

    assert!(gate.withhold("fetch", "changed"));
    assert!(quiet.tool_gate().withhold("fetch", "changed"));
    assert_eq!(told.notifications(), format!("{LIST_CHANGED}\n"));
    assert_eq!(told.notifications(), "", "taken once");
    assert_eq!(off.notifications(), "");
    assert!(!early.dispatch(init).contains("list_changed"));
    assert_eq!(early.notifications(), "");

    // With the next answer, before it.
    assert!(gate.withhold("echo", "changed"));
    let ping = told.dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(
        ping,
        format!("{LIST_CHANGED}\n{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{}}}}\n")
    );
    assert_eq!(early.notifications(), format!("{LIST_CHANGED}\n"));
    let list = off.dispatch(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert!(
        !list.contains("list_changed") && !list.contains("fetch"),
        "{list}"
    );
}

#[test]
fn server_call_refuses_a_tool_withheld_while_serving_and_the_hooks_see_it_rejected() {
    let rec = Arc::new(Recorder::default());
    let server = builder(false).hooks(rec.clone()).build().unwrap();
    let ctx = CallContext::new(RequestId::Number(1), "fetch");
    assert!(server.call(&ctx, &json!({})).is_ok());
    assert!(server.tool_gate().withhold("fetch", "changed"));
    match server.call(&ctx, &json!({})) {
        Err(CallError::InvalidArguments(m)) => {
            assert_eq!(m, "tool \"fetch\" is not available: changed")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.tools().count(), 2, "still registered");
    assert_eq!(
        *rec.ends.lock().unwrap(),
        [
            end("fetch", CallStatus::Ok, None),
            end(
                "fetch",
                CallStatus::Rejected,
                Some("tool \"fetch\" is not available: changed")
            ),
        ]
    );
}

#[test]
fn pages_of_tools_list_leave_withheld_tools_out() {
    let mut b = Server::builder("paged", "1").page_size(Some(2));
    for name in ["a", "b", "c", "d", "e"] {
        b = b.tool_raw(
            Tool::new(name, "A tool", json!({"type": "object"})),
            |_, _| Ok::<_, String>(ToolResult::text("")),
        );
    }
    let server = b.build().unwrap();
    assert!(server.tool_gate().withhold("b", "changed"));
    let mut c = Client::start(server);
    c.request(0, "initialize", json!({}));
    let first = c.request(1, "tools/list", json!({}));
    assert_eq!(listed(&first), ["a", "c"]);
    let cursor = first["result"]["nextCursor"].clone();
    let second = c.request(2, "tools/list", json!({"cursor": cursor}));
    assert_eq!(listed(&second), ["d", "e"]);
    assert!(second["result"].get("nextCursor").is_none(), "{second}");
    c.finish();
}
