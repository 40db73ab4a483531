//! The fake model server itself, spoken to over raw HTTP/1.1: each wire format's tool call
//! and final answer, the script position taken from the conversation, side requests that
//! never count as steps, chunked request bodies, scripted failures.

use crate::fake_model;

use fake_model::{FakeModel, Script, Wire};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;

/// One request; returns (status, content type, body).
fn http(
    fake: &FakeModel,
    method: &str,
    path: &str,
    body: Option<&Value>,
    chunked: bool,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", fake.port())).unwrap();
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Test: yes\r\n"
    );
    if chunked {
        req.push_str("Transfer-Encoding: chunked\r\n\r\n");
        let (a, b) = payload.split_at(payload.len() / 2);
        for part in [a, b] {
            req.push_str(&format!("{:x}\r\n{part}\r\n", part.len()));
        }
        req.push_str("0\r\n\r\n");
    } else {
        req.push_str(&format!(
            "Content-Length: {}\r\n\r\n{payload}",
            payload.len()
        ));
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or("")
        .to_string();
    (status, ctype, body.to_string())
}

/// One plain (not chunked) POST of `body`; returns the answer's JSON body.
fn post_json(fake: &FakeModel, path: &str, body: &Value) -> Value {
    let (_, _, answer) = http(fake, "POST", path, Some(body), false);
    serde_json::from_str(&answer).unwrap()
}

/// The `event:` names of an SSE body.
fn sse_events(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

/// The JSON `data:` payloads of an SSE body (without `[DONE]`).
fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn script() -> Script {
    Script::new()
        .call("Read", json!({"path": "a.txt"}))
        .call("Grep", json!({"pattern": "x"}))
}

fn chat_tools(names: &[&str]) -> Value {
    json!(names
        .iter()
        .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
        .collect::<Vec<_>>())
}

#[test]
fn chat_completions_streams_calls_then_quotes_the_results() {
    let fake = FakeModel::start(script());
    let tools = chat_tools(&["Read", "Grep", "Write"]);
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    let (status, ctype, body) = http(
        &fake,
        "POST",
        "/v1/chat/completions",
        Some(&json!({"model": "m", "stream": true, "tools": tools, "messages": messages})),
        false,
    );
    assert_eq!((status, ctype.as_str()), (200, "text/event-stream"));
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let chunks = sse_data(&body);
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "Read"
    );
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"a.txt\"}"
    );
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
    for (i, result) in ["RESULT-ONE", "RESULT-TWO"].iter().enumerate() {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "x", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": result}));
        let v = post_json(
            &fake,
            "/v1/chat/completions",
            &json!({"model": "m", "stream": false, "tools": tools, "messages": messages}),
        );
        if i == 0 {
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
            assert_eq!(
                v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
                "Grep"
            );
        } else {
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
            let text = v["choices"][0]["message"]["content"].as_str().unwrap();
            assert!(
                text.contains("RESULT-ONE") && text.contains("RESULT-TWO"),
                "{text}"
            );
        }
    }
    assert_eq!(fake.tool_calls().len(), 2);
    assert_eq!(fake.answers().len(), 1);
    let recorded = fake.requests();
    assert_eq!(recorded[0].headers["x-test"], "yes");
    assert_eq!(recorded[0].wire, Wire::ChatCompletions);
    assert_eq!(fake.offered_tools(), ["Grep", "Read", "Write"]);
}

#[test]
fn side_requests_get_answers_but_never_move_the_script() {
    let fake = FakeModel::start(script());
    // A title request (no tools), token counting, model listing, telemetry.
    let title = post_json(
        &fake,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "title?"}]}),
    );
    assert_eq!(title["choices"][0]["message"]["content"], "Fake title");
    let count = post_json(&fake, "/v1/messages/count_tokens", &json!({}));
    assert_eq!(count["input_tokens"], 11);
    let (_, _, models) = http(&fake, "GET", "/v1/models", None, false);
    assert!(serde_json::from_str::<Value>(&models).unwrap()["data"].is_array());
    let (status, _, _) = http(
        &fake,
        "POST",
        "/telemetry/v1/events",
        Some(&json!({"e": 1})),
        false,
    );
    assert_eq!(status, 200);
    // The first real step still calls the first tool, resolved to the CLI's prefix.
    let (_, _, body) = http(
        &fake,
        "POST",
        "/v1/chat/completions",
        Some(&json!({"model": "m", "tools": chat_tools(&["awf_Read", "bash"]), "messages": []})),
        true,
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "awf_Read"
    );
    assert_eq!(fake.main_requests().len(), 1);
    assert_eq!(fake.requests().len(), 5);
}

#[test]
fn anthropic_messages_stream_a_tool_use_block() {
    let fake = FakeModel::start(script());
    let tools = json!([{"name": "mcp__awf__Read", "input_schema": {}}, {"name": "Bash", "input_schema": {}}]);
    let (_, ctype, body) = http(
        &fake,
        "POST",
        "/v1/messages?beta=true",
        Some(
            &json!({"model": "c", "stream": true, "tools": tools, "messages": [{"role": "user", "content": "go"}]}),
        ),
        false,
    );
    assert_eq!(ctype, "text/event-stream");
    let events = sse_events(&body);
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data = sse_data(&body);
    assert_eq!(data[1]["content_block"]["name"], "mcp__awf__Read");
    assert_eq!(data[2]["delta"]["type"], "input_json_delta");
    assert_eq!(data[4]["delta"]["stop_reason"], "tool_use");
    // After two tool results, the answer quotes them (text blocks, not their `type`).
    let messages = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1", "content": [{"type": "text", "text": "R1"}]}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "2", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "2", "content": "R2"}]}
    ]);
    let v = post_json(
        &fake,
        "/v1/messages",
        &json!({"model": "c", "stream": false, "tools": tools, "messages": messages}),
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["content"][0]["text"], "FAKE-MODEL-FINAL\nR1\nR2");
}

#[test]
fn responses_call_codex_namespaced_tools_with_their_namespace() {
    let fake = FakeModel::start(script());
    let tools = json!([
        {"type": "function", "name": "request_user_input", "parameters": {}},
        {"type": "namespace", "name": "mcp__awf", "tools": [{"type": "function", "name": "Read"}, {"type": "function", "name": "Grep"}]}
    ]);
    let (_, _, body) = http(
        &fake,
        "POST",
        "/v1/responses",
        Some(&json!({"model": "g", "stream": true, "tools": tools, "input": []})),
        false,
    );
    let events = sse_events(&body);
    assert_eq!(
        events,
        [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = &sse_data(&body)[2]["item"];
    assert_eq!(
        (
            item["type"].as_str(),
            item["namespace"].as_str(),
            item["name"].as_str()
        ),
        (Some("function_call"), Some("mcp__awf"), Some("Read"))
    );
    assert_eq!(
        fake.offered_tools(),
        ["mcp__awf__Grep", "mcp__awf__Read", "request_user_input"]
    );
}

#[test]
fn gemini_streams_one_function_call_event() {
    let fake = FakeModel::start(script());
    let tools =
        json!([{"functionDeclarations": [{"name": "mcp_awf_Read"}, {"name": "read_file"}]}]);
    let (_, _, body) = http(
        &fake,
        "POST",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        Some(&json!({"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": tools})),
        false,
    );
    let data = sse_data(&body);
    assert_eq!(data.len(), 1);
    assert_eq!(
        data[0]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"],
        "mcp_awf_Read"
    );
    assert_eq!(
        data[0]["candidates"][0]["content"]["parts"][0]["functionCall"]["args"]["path"],
        "a.txt"
    );
    // A non-streaming JSON side question is answered with JSON text, not a step.
    let v = post_json(
        &fake,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &json!({"contents": [], "tools": tools}),
    );
    let text = v["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap()["next_speaker"],
        "user"
    );
    assert_eq!(fake.main_requests().len(), 1);
}

#[test]
fn a_scripted_failure_answers_main_requests_with_its_status() {
    let fake = FakeModel::start(script().fail_with(400, "{\"error\":{\"message\":\"bad model\"}}"));
    let (status, _, body) = http(
        &fake,
        "POST",
        "/v1/chat/completions",
        Some(&json!({"model": "m", "tools": chat_tools(&["Read"]), "messages": []})),
        false,
    );
    assert_eq!(status, 400);
    assert!(body.contains("bad model"));
}

#[test]
fn the_server_stops_when_dropped() {
    let fake = FakeModel::start(Script::new());
    let port = fake.port();
    drop(fake);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}
