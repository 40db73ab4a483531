//! The floor: the least an MCP echo server can do, written by hand on one thread.
//!
//! One `serde_json::Value` per line, answers built with `json!`, a `BufWriter`
//! flushed only when no more input is buffered (so a flood is answered in batches
//! and a lone call costs one write). No validation beyond what echo needs: this is
//! the cost of the protocol itself, the baseline every library pays on top of.

use std::io::{self, BufRead, BufReader, BufWriter, Write};

use serde_json::{Value, json};

fn main() -> io::Result<()> {
    let mut input = BufReader::with_capacity(64 * 1024, io::stdin().lock());
    let mut output = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Some(answer) = answer(&line) {
            serde_json::to_writer(&mut output, &answer)?;
            output.write_all(b"\n")?;
        }
        if input.buffer().is_empty() {
            output.flush()?;
        }
    }
    output.flush()
}

fn answer(line: &[u8]) -> Option<Value> {
    let Ok(request) = serde_json::from_slice::<Value>(line) else {
        return Some(error(Value::Null, -32700, "parse error"));
    };
    // Notifications (no id) get no answer.
    let id = request.get("id")?.clone();
    let params = request.get("params");
    let result = match request.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "floor-echo", "version": "1"},
        }),
        Some("ping") => json!({}),
        Some("tools/list") => json!({"tools": [{
            "name": "echo",
            "description": "Echo the text back",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        }]}),
        Some("tools/call") => {
            let text = params
                .and_then(|p| p.pointer("/arguments/text"))
                .and_then(Value::as_str);
            match (
                params.and_then(|p| p.get("name")).and_then(Value::as_str),
                text,
            ) {
                (Some("echo"), Some(text)) => {
                    json!({"content": [{"type": "text", "text": text}], "isError": false})
                }
                _ => return Some(error(id, -32602, "unknown tool or missing text")),
            }
        }
        _ => return Some(error(id, -32601, "method not found")),
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}
