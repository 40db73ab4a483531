//! Revision 2026-07-28 beside the handshake era: a request whose `_meta` names the
//! revision is served by itself (with or without `initialize`), `server/discover`,
//! results with `resultType` and cache hints, -32022, `subscriptions/listen` and the
//! list changes it is told; a handshake client sees the server it always saw.

mod common;

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, PATIENCE, object_schema};
use mcpserver::{
    CallContext, Hooks, PROTOCOL_VERSION, REVISION_2025_11_25, REVISION_2026_07_28, Server,
    ServerBuilder, StopReason, Tool, ToolGate, ToolResult, codes,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Text {
    text: String,
}

#[derive(Deserialize)]
struct Sleep {
    ms: u64,
}

fn builder() -> ServerBuilder {
    Server::builder("era-test", "2.1")
        .instructions("Use echo.")
        .tool(
            Tool::new("echo", "Echo the text", object_schema()),
            |a: Text, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool(
            Tool::new(
                "sleep",
                "Wait",
                json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
            ),
            |a: Sleep, ctx: &CallContext| {
                let end = Instant::now() + Duration::from_millis(a.ms);
                while Instant::now() < end && !ctx.is_cancelled() {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok::<_, String>(ToolResult::text("slept"))
            },
        )
        .tool_raw(
            Tool::new("fetch", "Fetch a page", json!({"type": "object"})),
            |_, _| Ok::<_, String>(ToolResult::text("the page")),
        )
}

/// `_meta` of a 2026-07-28 request.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "modern-client", "version": "3"},
    })
}

/// Params of a 2026-07-28 request: `params` with `_meta`.
fn modern(mut params: Value) -> Value {
    params["_meta"] = meta();
    params
}

const SERVER_INFO: &str =
    r#"{"io.modelcontextprotocol/serverInfo":{"name":"era-test","version":"2.1"}}"#;

fn server_meta() -> Value {
    serde_json::from_str(SERVER_INFO).unwrap()
}

fn names(list: &Value) -> Vec<&str> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list answer: {list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_stateless_request_is_served_without_initialize() {
    let mut c = Client::start(builder().build().unwrap());
    let discover = c.request(1, "server/discover", modern(json!({})));
    assert_eq!(
        discover["result"],
        json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": false}},
            "instructions": "Use echo.",
            "ttlMs": 3_600_000,
            "cacheScope": "private",
            "_meta": server_meta(),
        }),
        "{discover}"
    );

    let list = c.request(2, "tools/list", modern(json!({})));
    let result = &list["result"];
    assert_eq!(result["resultType"], "complete", "{list}");
    assert_eq!(result["ttlMs"], 0, "{list}");
    assert_eq!(result["cacheScope"], "private", "{list}");
    assert_eq!(result["_meta"], server_meta(), "{list}");
    assert_eq!(
        names(&list),
        ["echo", "sleep", "fetch"],
        "registration order"
    );
    let again = c.request(3, "tools/list", modern(json!({})));
    assert_eq!(again["result"], list["result"], "a deterministic list");

    let call = c.request(
        4,
        "tools/call",
        modern(json!({"name": "echo", "arguments": {"text": "hi"}})),
    );
    assert_eq!(
        call["result"],
        json!({
            "content": [{"type": "text", "text": "hi"}],
            "resultType": "complete",
            "_meta": server_meta(),
        }),
        "{call}"
    );
    // Arguments that do not fit: a result the model can read, as from 2025-11-25 on.
    let misfit = c.request(
        5,
        "tools/call",
        modern(json!({"name": "echo", "arguments": {"text": 7}})),
    );
    assert_eq!(misfit["result"]["isError"], true, "{misfit}");
    assert_eq!(misfit["result"]["resultType"], "complete", "{misfit}");
    let unknown = c.request(
        6,
        "tools/call",
        modern(json!({"name": "nope", "arguments": {}})),
    );
    assert_eq!(unknown["error"]["code"], codes::INVALID_PARAMS, "{unknown}");
    let (reason, rest) = c.finish();
    assert_eq!((reason, rest), (StopReason::EndOfInput, vec![]));
}

#[test]
fn the_fast_path_serves_a_stateless_call_as_the_careful_path_does() {
    let server = builder().build().unwrap();
    let mut session = server.dispatcher();
    let meta = meta().to_string();
    // The same call, once in the scanner's shape and once with a member it leaves to serde.
    let fast = session.dispatch(
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}},"_meta":{meta}}}}}"#)
            .as_bytes(),
    );
    let careful = session.dispatch(
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ec\u0068o","arguments":{{"text":"x"}},"_meta":{meta}}}}}"#)
            .as_bytes(),
    );
    assert_eq!(fast, careful);
    assert!(fast.contains(r#""resultType":"complete""#), "{fast}");
}

#[test]
fn revisions_not_served_and_required_meta_are_refused_with_the_modern_codes() {
    let server = builder().build().unwrap();
    let mut s = server.dispatcher();
    let mut ask = |line: Value| -> Value {
        serde_json::from_str(&s.dispatch(line.to_string().as_bytes())).unwrap()
    };
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = "1900-01-01".into();
    let e =
        ask(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": old}}));
    assert_eq!(e["error"]["code"], -32022, "{e}");
    assert_eq!(
        e["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "1900-01-01"})
    );
    let mut bare = meta();
    bare.as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let e = ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": bare}}),
    );
    assert_eq!(e["error"]["code"], codes::INVALID_PARAMS, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{e}"
    );
    // `server/discover` without the revision or the capabilities in `_meta`: -32602
    // (a handshake client never sends it; a dual-era client's probe falls back on it).
    for params in [
        json!({}),
        json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    ] {
        let e =
            ask(json!({"jsonrpc": "2.0", "id": 9, "method": "server/discover", "params": params}));
        assert_eq!(e["error"]["code"], codes::INVALID_PARAMS, "{params}: {e}");
        assert_eq!(e["id"], 9);
    }
    // A narrowed server that does not serve 2026-07-28 knows no such method.
    let legacy = builder().revisions([PROTOCOL_VERSION]).build().unwrap();
    let e = legacy
        .dispatcher()
        .dispatch(br#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#);
    assert!(e.contains("-32601"), "{e}");
    // `initialize` and `ping` are not methods of 2026-07-28; a handshake `ping` is still
    // answered at any time.
    let e = ask(
        json!({"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "_meta": meta()}}),
    );
    assert_eq!(e["error"]["code"], codes::METHOD_NOT_FOUND, "{e}");
    let e = ask(json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": meta()}}));
    assert_eq!(e["error"]["code"], codes::METHOD_NOT_FOUND, "{e}");
    let pong = ask(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(pong["result"], json!({}), "{pong}");
}

#[test]
fn a_handshake_client_sees_the_server_it_always_saw() {
    // The same handshake session against a server of both eras (the default) and one
    // narrowed to 2024-11-05: every answer byte for byte the same.
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "clientInfo": {"name": "c", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "shutdown"}),
    ];
    let both = builder().build().unwrap();
    let legacy = builder().revisions([PROTOCOL_VERSION]).build().unwrap();
    let (mut a, mut b) = (both.dispatcher(), legacy.dispatcher());
    for line in &lines {
        let line = line.to_string();
        let (x, y) = (a.dispatch(line.as_bytes()), b.dispatch(line.as_bytes()));
        assert_eq!(x, y, "{line}");
        assert!(!x.contains("resultType"), "{x}");
    }
    assert_eq!(a.stopped(), Some(StopReason::Shutdown));
}

#[test]
fn each_request_is_judged_by_itself_after_initialize_too() {
    let server = builder().accept_newer_revisions(true).build().unwrap();
    let mut s = server.dispatcher();
    let mut ask = |line: Value| -> Value {
        serde_json::from_str(&s.dispatch(line.to_string().as_bytes())).unwrap()
    };
    let init = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let modern_list = ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta()}}),
    );
    assert_eq!(
        modern_list["result"]["resultType"], "complete",
        "{modern_list}"
    );
    let handshake_list = ask(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert!(handshake_list["result"].get("resultType").is_none());
    // A handshake client that also names its agreed revision in `_meta` stays one.
    let tagged = ask(
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}}),
    );
    assert_eq!(tagged["result"], handshake_list["result"], "{tagged}");
}

#[test]
fn a_server_of_the_stateless_era_only_refuses_initialize_naming_what_it_serves() {
    let server = builder().revisions([REVISION_2026_07_28]).build().unwrap();
    let mut s = server.dispatcher();
    let e: Value = serde_json::from_str(&s.dispatch(
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#,
    ))
    .unwrap();
    assert_eq!(e["error"]["code"], -32022, "{e}");
    assert_eq!(
        e["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2026-07-28"),
        "{e}"
    );
    // And an `initialize` on a server of both eras that asks for 2026-07-28 agrees the
    // handshake revision the server serves.
    let both = builder()
        .revisions([REVISION_2025_11_25, REVISION_2026_07_28])
        .build()
        .unwrap();
    let agreed: Value = serde_json::from_str(&both.dispatcher().dispatch(
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28"}}"#,
    ))
    .unwrap();
    assert_eq!(
        agreed["result"]["protocolVersion"], "2025-11-25",
        "{agreed}"
    );
}

const TAGGED: &str = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}"#;

#[test]
fn a_listening_client_is_told_of_changes_tagged_until_it_cancels() {
    let server = Arc::new(builder().notify_list_changed(true).build().unwrap());
    let gate = server.tool_gate();
    let mut c = Client::start(server.clone());
    c.send_request(
        "L1",
        "subscriptions/listen",
        modern(json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}})),
    );
    let ack = c.recv();
    assert_eq!(
        ack,
        json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "_meta": {"io.modelcontextprotocol/subscriptionId": "L1"},
                "notifications": {"toolsListChanged": true},
            },
        })
    );
    // A second subscription that asked for nothing the server sends.
    c.send_request(
        "L2",
        "subscriptions/listen",
        modern(json!({"notifications": {"resourcesListChanged": true}})),
    );
    assert_eq!(c.recv()["params"]["notifications"], json!({}));

    assert!(gate.withhold("fetch", "changed"));
    assert_eq!(c.recv_line(), TAGGED, "only L1 asked for tool list changes");
    let list = c.request(3, "tools/list", modern(json!({})));
    assert_eq!(names(&list), ["echo", "sleep"]);

    c.notify("notifications/cancelled", json!({"requestId": "L1"}));
    // Lines are read in order: once a later request is answered, the cancel was acted on.
    c.request(4, "tools/list", modern(json!({})));
    assert!(gate.withhold("echo", "changed too"));
    // L1 is no longer told, and never answered; L2 is answered when the input ends.
    let (reason, rest) = c.finish();
    assert_eq!(reason, StopReason::EndOfInput);
    assert_eq!(
        rest,
        vec![json!({
            "jsonrpc": "2.0",
            "id": "L2",
            "result": {
                "resultType": "complete",
                "_meta": {
                    "io.modelcontextprotocol/subscriptionId": "L2",
                    "io.modelcontextprotocol/serverInfo": {"name": "era-test", "version": "2.1"},
                },
            },
        })]
    );
}

#[test]
fn a_stateless_call_is_cancelled_and_not_answered() {
    let mut c = Client::start(builder().build().unwrap());
    c.send_request(
        9,
        "tools/call",
        modern(json!({"name": "sleep", "arguments": {"ms": 60_000}})),
    );
    std::thread::sleep(Duration::from_millis(50));
    c.notify("notifications/cancelled", json!({"requestId": 9}));
    // The list is answered while the call ends; the call never is.
    let list = c.request(10, "tools/list", modern(json!({})));
    assert_eq!(list["result"]["resultType"], "complete");
    let (reason, rest) = c.finish();
    assert_eq!((reason, rest), (StopReason::EndOfInput, vec![]));
}

/// A call as the hooks saw it: its revision, client and traceparent.
type SeenCall = (String, Option<String>, Option<String>);

#[derive(Default)]
struct Seen {
    calls: Mutex<Vec<SeenCall>>,
}

impl Hooks for Seen {
    fn call_started(&self, ctx: &CallContext, _: &str) {
        self.calls.lock().unwrap().push((
            ctx.protocol_version().to_owned(),
            ctx.client_info()
                .map(|c| format!("{} {}", c.name, c.version)),
            ctx.trace_parent().map(str::to_owned),
        ));
    }
}

#[test]
fn hooks_see_each_calls_revision_client_and_trace_context() {
    let seen = Arc::new(Seen::default());
    let server = builder().hooks(seen.clone()).build().unwrap();
    let mut s = server.dispatcher();
    let mut m = meta();
    m["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into();
    m["tracestate"] = "vendor=1".into();
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "a"}, "_meta": m}});
    s.dispatch(line.to_string().as_bytes());
    s.dispatch(br#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"clientInfo":{"name":"old","version":"1"}}}"#);
    s.dispatch(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"b"}}}"#);
    assert_eq!(
        *seen.calls.lock().unwrap(),
        [
            (
                "2026-07-28".to_owned(),
                Some("modern-client 3".to_owned()),
                Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned())
            ),
            ("2024-11-05".to_owned(), Some("old 1".to_owned()), None),
        ]
    );
}

/// A writer that withholds a tool the moment it is handed the line that holds
/// `trigger`, as a client that acts on that answer the instant it reads it would:
/// whatever the server has not yet marked by then is lost.
struct ActsOnRead {
    seen: Arc<Mutex<Vec<u8>>>,
    gate: ToolGate,
    trigger: &'static str,
    fired: bool,
}

impl Write for ActsOnRead {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.seen.lock().unwrap().extend_from_slice(buf);
        if !self.fired && String::from_utf8_lossy(buf).contains(self.trigger) {
            self.fired = true;
            assert!(
                self.gate
                    .withhold("fetch", "changed as the answer was read")
            );
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Serves `first` and waits (bounded) until the output holds `told`: a change made as
/// the answer to `first` leaves the server must be told, after that answer.
fn a_change_as_the_answer_leaves_is_told(first: Value, trigger: &'static str, told: &str) {
    let server = Arc::new(builder().notify_list_changed(true).build().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let writer = ActsOnRead {
        seen: seen.clone(),
        gate: server.tool_gate(),
        trigger,
        fired: false,
    };
    let (server_in, mut to_server) = std::io::pipe().unwrap();
    let serving = {
        let server = server.clone();
        std::thread::spawn(move || server.serve(server_in, writer))
    };
    let mut line = first.to_string().into_bytes();
    line.push(b'\n');
    to_server.write_all(&line).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let text = loop {
        let text = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        if text.contains(told) || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(to_server);
    serving.join().unwrap().unwrap();
    let answer_at = text.find(trigger).expect("the answer was written");
    let told_at = text
        .find(told)
        .unwrap_or_else(|| panic!("the change was never told: {text}"));
    assert!(answer_at < told_at, "told before the answer: {text}");
}

#[test]
fn a_change_made_as_the_initialize_answer_is_read_is_told_after_it() {
    a_change_as_the_answer_leaves_is_told(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        r#""id":1,"result""#,
        r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
    );
}

#[test]
fn a_change_made_as_the_listen_acknowledgement_is_read_is_told_after_it() {
    a_change_as_the_answer_leaves_is_told(
        json!({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen", "params": modern(json!({"notifications": {"toolsListChanged": true}}))}),
        "notifications/subscriptions/acknowledged",
        TAGGED,
    );
}

#[test]
fn a_change_a_call_makes_is_told_before_the_call_s_answer() {
    // A tool that withholds another through the gate while it runs: the client reads the
    // change before the result that caused it, over a transport and through a dispatcher.
    let gate = Arc::new(std::sync::OnceLock::<ToolGate>::new());
    let in_handler = gate.clone();
    let server = Arc::new(
        builder()
            .notify_list_changed(true)
            .tool_raw(
                Tool::new("change", "Withholds fetch", json!({"type": "object"})),
                move |_, _| {
                    assert!(
                        in_handler
                            .get()
                            .unwrap()
                            .withhold("fetch", "changed by a call")
                    );
                    Ok::<_, String>(ToolResult::text("changed"))
                },
            )
            .build()
            .unwrap(),
    );
    gate.set(server.tool_gate()).unwrap();
    let mut c = Client::start(server.clone());
    c.send_request(
        "L1",
        "subscriptions/listen",
        modern(json!({"notifications": {"toolsListChanged": true}})),
    );
    c.recv();
    c.send_request(
        2,
        "tools/call",
        modern(json!({"name": "change", "arguments": {}})),
    );
    assert_eq!(c.recv_line(), TAGGED, "the change first");
    assert_eq!(c.recv()["id"], 2, "then the call's answer");
    c.finish();
}
