//! Any line: the hot path's scanner answers it exactly as the careful path does. The
//! careful path reads the same line with an extra member (which the scanner declines).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpserver::{CallContext, Server, Tool, ToolResult};
use serde_json::{Value, json};

fn answers(line: &[u8]) -> Vec<Value> {
    let server = Server::builder("fuzz", "1")
        .tool(
            Tool::new("echo", "Echo", json!({"type": "object"})),
            |a: Value, _: &CallContext| Ok::<_, String>(ToolResult::text(a.to_string())),
        )
        .build()
        .unwrap();
    let mut session = server.dispatcher();
    let text = session
        .dispatch(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{}}")
        + &session.dispatch(line);
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            // Their wording depends on the whole line (positions, what came first).
            if let Some(e) = v.get_mut("error")
                && matches!(e["code"].as_i64(), Some(-32700 | -32600))
            {
                e["message"] = Value::Null;
            }
            v
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    if data.contains(&b'\n') || data.contains(&b'\r') {
        return;
    }
    // Lines that start as an object (the scanner's only kind).
    let Some(open) = data.iter().position(|b| !b.is_ascii_whitespace()) else {
        return;
    };
    if data[open] != b'{' {
        return;
    }
    let rest = &data[open + 1..];
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    let mut careful = data[..=open].to_vec();
    careful.extend_from_slice(if empty {
        b"\"x-careful\":0"
    } else {
        b"\"x-careful\":0,"
    });
    careful.extend_from_slice(rest);
    assert_eq!(answers(data), answers(&careful));
});
