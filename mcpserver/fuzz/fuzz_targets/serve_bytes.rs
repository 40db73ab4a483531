//! Any bytes in: no panic, only JSON-RPC lines out, and a ping after the input is answered.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use mcpserver::{CallContext, Server, Tool, ToolResult};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    let server = Server::builder("fuzz", "1")
        .max_message_size(4096)
        .tool(
            Tool::new("echo", "Echo", json!({"type": "object"})),
            |a: Value, _: &CallContext| Ok::<_, String>(ToolResult::text(a.to_string())),
        )
        .build()
        .unwrap();
    let mut input = data.to_vec();
    input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":\"final-ping\",\"method\":\"ping\"}\n");
    let stops = String::from_utf8_lossy(data).contains("shutdown");
    let mut out = Vec::new();
    server.serve(Cursor::new(input), &mut out).expect("serving to memory cannot fail");
    let text = std::str::from_utf8(&out).expect("output is UTF-8");
    let mut final_answered = false;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("every output line is JSON");
        assert_eq!(v["jsonrpc"], "2.0");
        final_answered |= v["id"] == "final-ping";
    }
    assert!(final_answered || stops, "serving went on");
});
