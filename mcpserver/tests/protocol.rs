//! The protocol, point by point, over the in-memory transport.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{Client, object_schema};
use mcpserver::{
    CallContext, CallOutcome, Content, Hooks, RequestId, Server, ServerBuilder, StopReason, Tool,
    ToolResult,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Text {
    text: String,
}

fn echo_builder() -> ServerBuilder {
    Server::builder("test", "1.2.3")
        .tool(
            Tool::new("echo", "Echo", object_schema()),
            |a: Text, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool_raw(
            Tool::new("fail", "Always fails", json!({"type": "object"})),
            |_, _| Err::<ToolResult, _>("the disk is on fire"),
        )
        .tool_raw(
            Tool::new("boom", "Panics", json!({"type": "object"})),
            |_, _| -> Result<ToolResult, String> { panic!("kaboom") },
        )
}

fn echo_server() -> Server {
    echo_builder().build().unwrap()
}

// 1. Framing

#[test]
fn crlf_lines_are_accepted_and_answers_are_one_compact_line_each() {
    let mut c = Client::start(echo_server());
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n");
    assert_eq!(c.recv_line(), r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    c.request(2, "initialize", json!({}));
    let r = c.call(3, "echo", json!({"text": "two\nlines\r\nand \u{2028}"}));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "two\nlines\r\nand \u{2028}"
    );
}

#[test]
fn an_over_long_line_gets_an_error_and_serving_goes_on() {
    let mut c = Client::start(echo_builder().max_message_size(4096).build().unwrap());
    let mut big = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 100_000));
    big.extend_from_slice(b"\"}}\n");
    c.send_raw(&big);
    let e = c.recv();
    assert_eq!(e["id"], Value::Null);
    assert_eq!(e["error"]["code"], -32600);
    assert!(
        e["error"]["message"].as_str().unwrap().contains("4096"),
        "{e}"
    );
    assert_eq!(c.request(2, "ping", json!({}))["result"], json!({}));
}

// 2. Lifecycle

#[test]
fn initialize_answers_2024_11_05_whatever_was_asked() {
    for asked in ["2024-11-05", "2025-06-18", "2025-11-25", "1999-01-01"] {
        let mut c = Client::start(echo_builder().instructions("Use echo.").build().unwrap());
        let r = c.request(1, "initialize", json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}));
        let result = &r["result"];
        assert_eq!(result["protocolVersion"], "2024-11-05", "asked {asked}");
        assert_eq!(
            result["serverInfo"],
            json!({"name": "test", "version": "1.2.3"})
        );
        assert!(result["capabilities"]["tools"].is_object());
        assert_eq!(result["instructions"], "Use echo.");
    }
}

#[test]
fn ping_is_answered_before_and_after_initialize() {
    let mut c = Client::start(echo_server());
    assert_eq!(c.request(1, "ping", json!({}))["result"], json!({}));
    c.request(2, "initialize", json!({}));
    assert_eq!(c.request(3, "ping", Value::Null)["result"], json!({}));
}

#[test]
fn requests_before_initialize_get_an_immediate_error() {
    let mut c = Client::start(echo_server());
    for (i, method) in ["tools/list", "tools/call", "shutdown"].iter().enumerate() {
        let e = c.request(i as i64, method, json!({"name": "echo"}));
        assert_eq!(e["error"]["code"], -32002, "{method}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("initialize")
        );
    }
    // A probe for an unknown method is answered too, as unknown.
    assert_eq!(
        c.request(9, "resources/list", json!({}))["error"]["code"],
        -32601
    );
    // `server/discover` without a revision in `_meta` is a malformed request of
    // revision 2026-07-28 (a dual-era client's probe falls back on this as on -32601).
    assert_eq!(
        c.request(10, "server/discover", json!({}))["error"]["code"],
        -32602
    );
}

#[test]
fn a_second_initialize_is_an_error() {
    let mut c = Client::initialized(echo_server());
    let e = c.request(5, "initialize", json!({}));
    assert_eq!(e["error"]["code"], -32600);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already initialized")
    );
}

#[test]
fn shutdown_answers_stops_reading_and_returns() {
    let mut c = Client::initialized(echo_server());
    c.send_request(1, "shutdown", json!({}));
    c.send_request(2, "ping", json!({}));
    assert_eq!(c.recv()["id"], 1);
    let (reason, rest) = c.finish();
    assert_eq!(reason, StopReason::Shutdown);
    assert!(rest.is_empty(), "nothing after shutdown: {rest:?}");
}

#[test]
fn end_of_input_answers_every_request_read_even_slow_ones() {
    let server = echo_builder()
        .tool_raw(
            Tool::new("slow", "Slow", json!({"type": "object"})),
            |_, _| {
                std::thread::sleep(Duration::from_millis(300));
                Ok::<_, String>(ToolResult::text("done"))
            },
        )
        .build()
        .unwrap();
    let mut c = Client::initialized(server);
    for id in 1..=3 {
        c.send_request(id, "tools/call", json!({"name": "slow"}));
    }
    c.send_request(4, "ping", json!({}));
    let (reason, mut rest) = c.finish();
    assert_eq!(reason, StopReason::EndOfInput);
    rest.sort_by_key(|v| v["id"].as_i64());
    let ids: Vec<i64> = rest.iter().map(|v| v["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
}

#[test]
fn stop_handle_stops_after_answering_calls_in_flight() {
    let (started_tx, started_rx) = mpsc::channel();
    let started_tx = Mutex::new(started_tx);
    let server = echo_builder()
        .tool_raw(
            Tool::new("slow", "Slow", json!({"type": "object"})),
            move |_, _| {
                started_tx.lock().unwrap().send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                Ok::<_, String>(ToolResult::text("done"))
            },
        )
        .build()
        .unwrap();
    let stop = server.stop_handle();
    let mut c = Client::initialized(server);
    c.send_request(1, "tools/call", json!({"name": "slow"}));
    started_rx.recv().unwrap();
    stop.stop();
    c.send_request(2, "ping", json!({})); // wakes the reader; must not be served
    assert_eq!(c.recv()["result"]["content"][0]["text"], "done");
    assert_eq!(c.join(), StopReason::Stopped);
}

// 3. tools/list and tools/call

#[test]
fn tools_list_pages_with_opaque_cursors() {
    let mut b = Server::builder("t", "1").page_size(Some(2));
    for i in 0..5 {
        b = b.tool_raw(
            Tool::new(format!("t{i}"), "d", json!({"type": "object"})),
            |_, _| Ok::<_, String>(ToolResult::text("")),
        );
    }
    let mut c = Client::initialized(b.build().unwrap());
    let mut names = Vec::new();
    let mut cursor = Value::Null;
    for page in 1.. {
        let params = if cursor.is_null() {
            json!({})
        } else {
            json!({"cursor": cursor})
        };
        let r = c.request(page, "tools/list", params);
        for t in r["result"]["tools"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_owned());
        }
        cursor = r["result"]["nextCursor"].clone();
        if cursor.is_null() {
            assert_eq!(page, 3);
            break;
        }
    }
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4"]);
    for bad in ["nonsense", "page:99", "page:0"] {
        let e = c.request(100, "tools/list", json!({"cursor": bad}));
        assert_eq!(e["error"]["code"], -32602, "{bad}");
        assert!(e["error"]["message"].as_str().unwrap().contains("cursor"));
    }
}

#[test]
fn tools_list_describes_each_tool() {
    let mut c = Client::initialized(echo_server());
    let r = c.request(1, "tools/list", json!({}));
    let tools = r["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert_eq!(
        tools[0],
        json!({"name": "echo", "description": "Echo", "inputSchema": object_schema()})
    );
    assert!(r["result"].get("nextCursor").is_none());
}

#[test]
fn results_carry_text_image_and_resource_content() {
    let server = Server::builder("t", "1")
        .tool_raw(
            Tool::new("mixed", "Mixed", json!({"type": "object"})),
            |_, _| {
                Ok::<_, String>(ToolResult::new(vec![
                    Content::text("hello"),
                    Content::Image {
                        data: "aGk=".into(),
                        mime_type: "image/png".into(),
                    },
                    Content::Resource {
                        resource: json!({"uri": "file:///a", "text": "A"}),
                    },
                ]))
            },
        )
        .build()
        .unwrap();
    let mut c = Client::initialized(server);
    let r = c.call(1, "mixed", json!({}));
    assert_eq!(
        r["result"],
        json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "A"}}
        ]})
    );
}

// 4. Errors

#[test]
fn malformed_json_and_bad_utf8_get_parse_errors_with_null_id() {
    let mut c = Client::initialized(echo_server());
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\n");
    let e = c.recv();
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"x\":\"\xff\xfe\"}\n");
    let e = c.recv();
    assert_eq!(e["error"]["code"], -32700);
    assert!(e["error"]["message"].as_str().unwrap().contains("UTF-8"));
    assert_eq!(c.request(3, "ping", json!({}))["result"], json!({}));
}

#[test]
fn valid_json_that_is_not_a_request_is_invalid() {
    let server = echo_server();
    let mut session = server.dispatcher();
    session.dispatch(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#);
    for (line, id) in [
        (r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, Value::Null),
        ("[]", Value::Null),
        ("17", Value::Null),
        (r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#, json!(4)),
        (r#"{"id":5,"method":"ping"}"#, json!(5)),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":"s","method":7}"#, json!("s")),
    ] {
        let e: Value = serde_json::from_str(&session.dispatch(line.as_bytes())).unwrap();
        assert_eq!(e["error"]["code"], -32600, "{line}: {e}");
        assert_eq!(e["id"], id, "{line}");
    }
}

#[test]
fn ids_are_echoed_with_their_type() {
    let mut c = Client::initialized(echo_server());
    assert_eq!(c.request("42", "ping", json!({}))["id"], json!("42"));
    assert_eq!(c.request(42, "ping", json!({}))["id"], json!(42));
    assert_eq!(c.request(-7, "ping", json!({}))["id"], json!(-7));
    assert_eq!(c.request("", "ping", json!({}))["id"], json!(""));
}

#[test]
fn unknown_method_tool_and_bad_arguments() {
    let mut c = Client::initialized(echo_server());
    assert_eq!(
        c.request(1, "resources/list", json!({}))["error"]["code"],
        -32601
    );
    let e = c.call(2, "nope", json!({}));
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"].as_str().unwrap().contains("\"nope\""));
    let e = c.call(3, "echo", json!({"text": 5}));
    assert_eq!(e["error"]["code"], -32602);
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("\"echo\"") && msg.contains("invalid type"),
        "{msg}"
    );
    let e = c.request(4, "tools/call", json!({"name": "echo", "arguments": [1]}));
    assert_eq!(e["error"]["code"], -32602);
    let e = c.request(5, "tools/call", json!({"arguments": {}}));
    assert_eq!(e["error"]["code"], -32602);
}

#[test]
fn handler_errors_and_panics_become_is_error_results() {
    let mut c = Client::initialized(echo_server());
    let r = c.call(1, "fail", json!({}));
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": "the disk is on fire"}], "isError": true})
    );
    let r = c.call(2, "boom", json!({}));
    assert_eq!(r["result"]["isError"], true);
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("kaboom")
    );
    assert_eq!(
        c.call(3, "echo", json!({"text": "still here"}))["result"]["content"][0]["text"],
        "still here"
    );
}

#[test]
fn notifications_are_never_answered() {
    let mut c = Client::initialized(echo_server());
    c.notify("notifications/unknown", json!({}));
    c.notify(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    );
    c.notify("ping", json!({}));
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n"); // a stray response
    assert_eq!(
        c.request(1, "ping", json!({}))["id"],
        1,
        "the ping answer comes first"
    );
}

// 5. Concurrency

/// A tool that blocks until the test opens its gate, and reports when it starts.
struct Gate {
    started: Mutex<mpsc::Sender<String>>,
    open: Mutex<mpsc::Receiver<()>>,
}

fn gated_server(max: usize) -> (Server, mpsc::Receiver<String>, mpsc::Sender<()>) {
    let (started_tx, started_rx) = mpsc::channel();
    let (open_tx, open_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        started: Mutex::new(started_tx),
        open: Mutex::new(open_rx),
    });
    let server = echo_builder()
        .max_concurrency(max)
        .tool(
            Tool::new("wait", "Waits for the gate", object_schema()),
            move |a: Text, _: &CallContext| {
                gate.started.lock().unwrap().send(a.text.clone()).unwrap();
                gate.open.lock().unwrap().recv().unwrap();
                Ok::<_, String>(ToolResult::text(a.text))
            },
        )
        .tool(
            Tool::new("spin", "Runs until cancelled", object_schema()),
            |_: Value, ctx: &CallContext| {
                while !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err::<ToolResult, _>("cancelled")
            },
        )
        .build()
        .unwrap();
    (server, started_rx, open_tx)
}

#[test]
fn ping_and_other_calls_are_answered_while_a_call_runs() {
    let (server, started, open) = gated_server(4);
    let mut c = Client::initialized(server);
    c.send_request(
        1,
        "tools/call",
        json!({"name": "wait", "arguments": {"text": "slow"}}),
    );
    assert_eq!(started.recv().unwrap(), "slow");
    assert_eq!(c.request(2, "ping", json!({}))["result"], json!({}));
    // An answer out of order: call 3 ends before call 1.
    assert_eq!(
        c.call(3, "echo", json!({"text": "quick"}))["result"]["content"][0]["text"],
        "quick"
    );
    open.send(()).unwrap();
    assert_eq!(c.recv()["id"], 1);
}

#[test]
fn cancelled_calls_are_not_answered_and_the_handler_sees_it() {
    let (server, _started, _open) = gated_server(4);
    let mut c = Client::initialized(server);
    c.send_request("c1", "tools/call", json!({"name": "spin", "arguments": {}}));
    c.notify(
        "notifications/cancelled",
        json!({"requestId": "c1", "reason": "user"}),
    );
    // The spinning handler returns once it sees the flag; only the ping is answered.
    assert_eq!(c.request(2, "ping", json!({}))["id"], 2);
    let (_, rest) = c.finish();
    assert!(rest.is_empty(), "no answer for a cancelled call: {rest:?}");
}

/// With `max_concurrency` calls running (and two more sent), the server still reads:
/// `ping` is answered, a further call is refused at once naming the bound, a cancel
/// reaches its running handler, and a call is taken again once a slot is free.
#[test]
fn at_the_bound_the_server_still_hears_control_messages() {
    for max in [1, 2, 8] {
        let (server, _started, _open) = gated_server(max);
        let mut c = Client::initialized(server);
        for i in 0..max {
            c.send_request(
                format!("s{i}"),
                "tools/call",
                json!({"name": "spin", "arguments": {}}),
            );
        }
        // Each spin holds a slot until it is cancelled; two more calls beyond the bound.
        for extra in 0..2 {
            // The refusal may race with the spins' start: retry until every slot is full.
            let busy = loop {
                let a = c.call(100 + extra, "echo", json!({"text": "late"}));
                if a.get("error").is_some() {
                    break a;
                }
            };
            assert_eq!(busy["error"]["code"], -32001, "{busy}");
            let msg = busy["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains("server busy") && msg.contains("max_concurrency"),
                "{msg}"
            );
        }
        assert_eq!(
            c.request(2, "ping", json!({}))["result"],
            json!({}),
            "max {max}"
        );
        c.notify(
            "notifications/cancelled",
            json!({"requestId": "s0", "reason": "test"}),
        );
        // The cancelled spin ends unanswered, which frees its slot.
        let answer = loop {
            let a = c.call(3, "echo", json!({"text": "now"}));
            if a.get("result").is_some() {
                break a;
            }
        };
        assert_eq!(answer["result"]["content"][0]["text"], "now");
        for i in 1..max {
            c.notify(
                "notifications/cancelled",
                json!({"requestId": format!("s{i}")}),
            );
        }
        let (reason, rest) = c.finish();
        assert_eq!(reason, StopReason::EndOfInput);
        assert!(
            rest.is_empty(),
            "cancelled calls are not answered: {rest:?}"
        );
    }
}

/// End of input while every slot is taken: the calls in flight finish and are answered
/// before `serve` returns.
#[test]
fn end_of_input_at_the_bound_drains_the_calls_in_flight() {
    let (server, started, open) = gated_server(2);
    let mut c = Client::initialized(server);
    c.send_request(
        1,
        "tools/call",
        json!({"name": "wait", "arguments": {"text": "a"}}),
    );
    c.send_request(
        2,
        "tools/call",
        json!({"name": "wait", "arguments": {"text": "b"}}),
    );
    started.recv().unwrap();
    started.recv().unwrap();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        open.send(()).unwrap();
        open.send(()).unwrap();
    });
    let (reason, rest) = c.finish();
    opener.join().unwrap();
    assert_eq!(reason, StopReason::EndOfInput);
    let mut ids: Vec<i64> = rest.iter().map(|a| a["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2], "{rest:?}");
}

#[test]
fn with_a_bound_of_one_a_ping_is_answered_while_the_call_runs() {
    let (server, started, open) = gated_server(1);
    let mut c = Client::initialized(server);
    c.send_request(
        1,
        "tools/call",
        json!({"name": "wait", "arguments": {"text": "a"}}),
    );
    started.recv().unwrap();
    assert_eq!(c.request(2, "ping", json!({}))["id"], 2);
    open.send(()).unwrap();
    assert_eq!(c.recv()["id"], 1);
}

// 7. Hooks and 8. the call context

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
    calls: AtomicUsize,
}

impl Hooks for Recorder {
    fn request_received(&self, method: &str, id: Option<&RequestId>) {
        let id = id.map_or("-".to_owned(), |i| i.to_string());
        self.events
            .lock()
            .unwrap()
            .push(format!("recv {method} {id}"));
    }
    fn call_started(&self, ctx: &CallContext, arguments: &str) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.events.lock().unwrap().push(format!(
            "start {} {} {}",
            ctx.tool(),
            ctx.request_id(),
            arguments
        ));
    }
    fn call_finished(&self, ctx: &CallContext, o: &CallOutcome<'_>) {
        self.events.lock().unwrap().push(format!(
            "end {} {} {} {}",
            ctx.tool(),
            o.status.as_str(),
            o.error.unwrap_or("-"),
            o.result.map_or(0, |r| r.content.len())
        ));
    }
}

#[test]
fn hooks_see_requests_and_every_call_outcome() {
    let rec = Arc::new(Recorder::default());
    let mut c = Client::initialized(echo_builder().hooks(rec.clone()).build().unwrap());
    c.call(1, "echo", json!({"text": "hi"}));
    c.call(2, "fail", json!({}));
    c.call(3, "boom", json!({}));
    c.call(4, "echo", json!({}));
    c.finish();
    let events = rec.events.lock().unwrap().clone();
    let want = [
        "recv initialize 0",
        "recv notifications/initialized -",
        "recv tools/call 1",
        r#"start echo 1 {"text":"hi"}"#,
        "end echo ok - 1",
        "recv tools/call 2",
        "start fail 2 {}",
        "end fail tool_error the disk is on fire 1",
        "recv tools/call 3",
        "start boom 3 {}",
    ];
    assert_eq!(&events[..want.len()], &want);
    assert!(
        events[10].starts_with(
            "end boom panicked tool \"boom\" failed unexpectedly (it panicked: kaboom)"
        ),
        "{}",
        events[10]
    );
    assert!(
        events[13].starts_with(
            "end echo invalid_arguments invalid arguments for tool \"echo\": missing field `text`"
        ),
        "{}",
        events[13]
    );
    assert_eq!(rec.calls.load(Ordering::SeqCst), 4);
}

#[test]
fn hooks_see_calls_rejected_before_any_handler() {
    let rec = Arc::new(Recorder::default());
    let server = echo_builder()
        .withhold("secret", "the host's policy denies it")
        .hooks(rec.clone())
        .build()
        .unwrap();
    let mut c = Client::start(server);
    let e = c.call(1, "echo", json!({"text": "early"}));
    assert_eq!(e["error"]["code"], -32002, "{e}");
    c.request(2, "initialize", json!({}));
    let e = c.call(3, "nope", json!({"a": 1}));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = c.request(4, "tools/call", json!({"name": "echo", "arguments": [1]}));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = c.call(5, "secret", json!({}));
    assert_eq!(e["error"]["code"], -32602, "{e}");
    assert_eq!(
        e["error"]["message"],
        "tool \"secret\" is not available: the host's policy denies it"
    );
    let list = c.request(6, "tools/list", json!({}));
    assert!(!list.to_string().contains("secret"), "{list}");
    c.finish();
    let events: Vec<String> = rec
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !e.starts_with("recv"))
        .cloned()
        .collect();
    assert_eq!(
        events,
        [
            r#"start echo 1 {"text":"early"}"#,
            r#"end echo rejected server not initialized: send "initialize" before "tools/call" 0"#,
            r#"start nope 3 {"a":1}"#,
            r#"end nope rejected unknown tool "nope": tools/list names the tools of this server 0"#,
            "start echo 4 [1]",
            r#"end echo rejected invalid arguments for tool "echo": "arguments" must be an object, got [1] 0"#,
            "start secret 5 {}",
            r#"end secret rejected tool "secret" is not available: the host's policy denies it 0"#,
        ]
    );
}

#[test]
fn the_context_carries_client_info_meta_and_version() {
    let seen = Arc::new(Mutex::new(Value::Null));
    let s = seen.clone();
    let server = Server::builder("t", "1")
        .tool_raw(
            Tool::new("ctx", "Context", json!({"type": "object"})),
            move |args, ctx| {
                *s.lock().unwrap() = json!({
                    "args": args,
                    "client": ctx.client_info().map(|c| format!("{} {}", c.name, c.version)),
                    "meta": ctx.meta(),
                    "version": ctx.protocol_version(),
                    "id": ctx.request_id().to_string(),
                });
                Ok::<_, String>(ToolResult::text("ok"))
            },
        )
        .build()
        .unwrap();
    let mut c = Client::initialized(server);
    c.request(
        "r1",
        "tools/call",
        json!({"name": "ctx", "arguments": {"a": [1]}, "_meta": {"traceparent": "00-abc-def-01"}}),
    );
    assert_eq!(
        *seen.lock().unwrap(),
        json!({"args": {"a": [1]}, "client": "test-client 9.9", "meta": {"traceparent": "00-abc-def-01"}, "version": "2024-11-05", "id": "r1"})
    );
}

// 10. Newer revisions, opt-in

fn rich_server(accept: bool) -> Server {
    Server::builder("t", "1")
        .accept_newer_revisions(accept)
        .tool(
            Tool::new("sum", "Adds", json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}))
                .title("Sum")
                .annotations(json!({"readOnlyHint": true}))
                .output_schema(json!({"type": "object", "properties": {"sum": {"type": "integer"}}})),
            |a: Sum, _: &CallContext| Ok::<_, String>(ToolResult::text((a.a + a.b).to_string()).with_structured(json!({"sum": a.a + a.b}))),
        )
        .build()
        .unwrap()
}

#[derive(Deserialize)]
struct Sum {
    a: i64,
    b: i64,
}

fn init_with(server: Server, version: &str) -> (Client, Value) {
    let mut c = Client::start(server);
    let r = c.request(
        0,
        "initialize",
        json!({"protocolVersion": version, "capabilities": {}}),
    );
    (c, r["result"]["protocolVersion"].clone())
}

#[test]
fn newer_revisions_are_off_by_default() {
    let (mut c, v) = init_with(rich_server(false), "2025-06-18");
    assert_eq!(v, "2024-11-05");
    let tool = c.request(1, "tools/list", json!({}))["result"]["tools"][0].clone();
    assert!(
        tool.get("title").is_none()
            && tool.get("outputSchema").is_none()
            && tool.get("annotations").is_none()
    );
    let r = c.call(2, "sum", json!({"a": 1, "b": 2}));
    assert!(r["result"].get("structuredContent").is_none());
}

#[test]
fn newer_revisions_when_accepted_carry_the_newer_fields() {
    for version in ["2025-06-18", "2025-11-25"] {
        let (mut c, v) = init_with(rich_server(true), version);
        assert_eq!(v, version);
        let tool = c.request(1, "tools/list", json!({}))["result"]["tools"][0].clone();
        assert_eq!(tool["title"], "Sum");
        assert_eq!(tool["annotations"]["readOnlyHint"], true);
        assert_eq!(tool["outputSchema"]["type"], "object");
        let r = c.call(2, "sum", json!({"a": 1, "b": 2}));
        assert_eq!(r["result"]["structuredContent"], json!({"sum": 3}));
        let bad = c.call(3, "sum", json!({"a": "x"}));
        if version == "2025-11-25" {
            assert_eq!(bad["result"]["isError"], true, "{bad}");
        } else {
            assert_eq!(bad["error"]["code"], -32602, "{bad}");
        }
    }
    let (_, v) = init_with(rich_server(true), "2031-01-01");
    assert_eq!(v, "2024-11-05");
}

#[test]
fn untyped_handlers_report_invalid_arguments_as_protocol_errors() {
    use mcpserver::CallError;
    let server = Server::builder("t", "1")
        .tool_raw(
            Tool::new("strict", "Checks its arguments", json!({"type": "object"})),
            |args: Value, _: &CallContext| match args.get("n").and_then(Value::as_i64) {
                Some(n) if n > 0 => Ok(ToolResult::text(n.to_string())),
                Some(_) => Err(CallError::failed("n must be positive")),
                None => Err(CallError::invalid_arguments(
                    "\"n\" (an integer) is required",
                )),
            },
        )
        .build()
        .unwrap();
    let mut c = Client::initialized(server);
    assert_eq!(
        c.call(1, "strict", json!({"n": 2}))["result"]["content"][0]["text"],
        "2"
    );
    let e = c.call(2, "strict", json!({}));
    assert_eq!(e["error"]["code"], -32602);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"n\" (an integer) is required"),
        "{e}"
    );
    assert_eq!(
        c.call(3, "strict", json!({"n": -1}))["result"]["isError"],
        true
    );
}

// 11. The single-threaded seam

/// Every kind of line, in the order a confused client might send them.
fn script() -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"early"}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":"#,
        r#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"2024-11-05","clientInfo":{"name":"c","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":5}}}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"fail"}}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"boom","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#,
        r#"{"params":{"arguments":{"text":"careful"},"name":"echo","x":0},"method":"tools/call","id":"s14","jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":16,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}"#,
        r#"{"jsonrpc":"2.0","id":17,"method":"tools/list","params":{"cursor":"page:9"}}"#,
        r#"{"jsonrpc":"2.0","id":"p18","method":"ping"}"#,
    ]
    .iter()
    .map(|l| l.as_bytes().to_vec())
    .collect();
    lines.insert(4, b"{\"jsonrpc\":\"2.0\",\"id\":2,\"x\":\"\xff\"}".to_vec());
    lines.push(vec![b'x'; 1500]);
    lines.push(br#"{"jsonrpc":"2.0","id":19,"method":"shutdown"}"#.to_vec());
    lines.push(br#"{"jsonrpc":"2.0","id":20,"method":"ping"}"#.to_vec());
    lines
}

/// A client that sends line `i` once `answered_before[i]` answers have come back.
struct Paced {
    lines: Vec<Vec<u8>>,
    answered_before: Vec<usize>,
    next: usize,
    pending: Vec<u8>,
    output: Arc<(Mutex<Vec<u8>>, Condvar)>,
}

impl std::io::Read for Paced {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            let Some(line) = self.lines.get(self.next) else {
                return Ok(0);
            };
            let due = self.answered_before[self.next];
            let (written, grew) = &*self.output;
            let mut written = written.lock().unwrap();
            while written.iter().filter(|&&b| b == b'\n').count() < due {
                written = grew.wait(written).unwrap();
            }
            self.pending = line.clone();
            self.pending.push(b'\n');
            self.next += 1;
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        Ok(n)
    }
}

/// The served side's output, waking [`Paced`] at every write.
struct Sink(Arc<(Mutex<Vec<u8>>, Condvar)>);

impl std::io::Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.0.lock().unwrap().extend_from_slice(buf);
        self.0.1.notify_all();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_dispatcher_answers_each_line_as_serve_does() {
    let build = |hooks: Arc<Recorder>| {
        echo_builder()
            .max_message_size(1024)
            .max_concurrency(1)
            .hooks(hooks)
            .build()
            .unwrap()
    };
    let lines = script();
    let dispatched_hooks = Arc::new(Recorder::default());
    let server = build(dispatched_hooks.clone());
    let mut session = server.dispatcher();
    let mut dispatched = String::new();
    let mut answered_before = Vec::new();
    for line in &lines {
        answered_before.push(dispatched.lines().count());
        let answer = session.dispatch(line);
        assert!(
            answer.is_empty() || (answer.ends_with('\n') && answer.lines().count() == 1),
            "one line per request: {answer:?}"
        );
        dispatched.push_str(&answer);
    }

    // The served side gets the same lines from a client that waits for each answer, so
    // that no call finds the one slot still taken by the call before it.
    let served_hooks = Arc::new(Recorder::default());
    let output = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
    let client = Paced {
        lines: lines.clone(),
        answered_before,
        next: 0,
        pending: Vec::new(),
        output: output.clone(),
    };
    let reason = build(served_hooks.clone())
        .serve(client, Sink(output.clone()))
        .unwrap();
    let served = std::mem::take(&mut *output.0.lock().unwrap());
    assert_eq!(reason, StopReason::Shutdown);
    assert_eq!(session.stopped(), Some(StopReason::Shutdown));
    assert_eq!(dispatched, String::from_utf8(served).unwrap());
    assert_eq!(dispatched.lines().count(), 22, "{dispatched}");
    assert_eq!(
        *dispatched_hooks.events.lock().unwrap(),
        *served_hooks.events.lock().unwrap()
    );
}

#[test]
fn the_dispatcher_keeps_what_initialize_agreed() {
    let server = rich_server(true);
    let mut session = server.dispatcher();
    let mut answer = |line: Value| -> Value {
        let text = session.dispatch(serde_json::to_string(&line).unwrap().as_bytes());
        serde_json::from_str(&text).unwrap()
    };
    let init = answer(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    // Under 2025-11-25, arguments that do not fit are a result the model can read.
    let bad = answer(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sum", "arguments": {"a": "x"}}}),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let sum = answer(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "sum", "arguments": {"a": 1, "b": 2}}}),
    );
    assert_eq!(sum["result"]["structuredContent"], json!({"sum": 3}));
}

#[test]
fn a_stop_handle_stops_the_dispatcher() {
    let server = echo_server();
    let stop = server.stop_handle();
    let mut session = server.dispatcher();
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    assert_eq!(
        session.dispatch(ping),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"
    );
    assert_eq!(session.stopped(), None);
    stop.stop();
    assert_eq!(session.dispatch(ping), "");
    assert_eq!(session.stopped(), Some(StopReason::Stopped));
}

// 12. End of input with calls still running

/// A server whose `wait` tool runs until it is cancelled (or 60 s pass).
fn waiting_server(hooks: Arc<Recorder>, grace: Option<Duration>) -> Server {
    let mut b = Server::builder("test", "1").hooks(hooks).tool_raw(
        Tool::new("wait", "Waits to be cancelled", json!({"type": "object"})),
        |_: Value, ctx: &CallContext| {
            let end = std::time::Instant::now() + Duration::from_secs(60);
            while !ctx.is_cancelled() && std::time::Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok::<_, String>(ToolResult::text(if ctx.is_cancelled() {
                "cancelled"
            } else {
                "waited"
            }))
        },
    );
    if let Some(g) = grace {
        b = b.cancel_after_end_of_input(g);
    }
    b.build().unwrap()
}

#[test]
fn after_end_of_input_calls_still_running_are_cancelled_after_the_grace() {
    let hooks = Arc::new(Recorder::default());
    let server = waiting_server(hooks.clone(), Some(Duration::from_millis(100)));
    let mut input = String::new();
    for line in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}),
    ] {
        input.push_str(&line.to_string());
        input.push('\n');
    }
    let mut out = Vec::new();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let reason = server.serve(std::io::Cursor::new(input), &mut out);
        let _ = tx.send((reason.map_err(|e| e.to_string()), out));
    });
    // Without the grace the call would run its 60 s; the bound only keeps a broken build
    // from hanging the suite.
    let (reason, out) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve returned after the grace");
    assert_eq!(reason.unwrap(), StopReason::EndOfInput);
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("\"id\":2") && out.contains("cancelled"),
        "the cancelled call is answered with what its handler returned: {out}"
    );
    let events = hooks.events.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.starts_with("end wait cancelled")),
        "{events:?}"
    );
}
