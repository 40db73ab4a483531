//! The echo server: `echo` returns its text; `sleep` waits (and honours cancellation),
//! for testing concurrency; `fail` always fails, as a tool error (`isError`).
//! Run it under any MCP client:
//! `cargo run -p mcpserver --example echo`.

use mcpserver::{CallContext, Server, Tool, ToolResult};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Echo {
    text: String,
}

#[derive(Deserialize)]
struct Sleep {
    ms: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let ms = json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]});
    Server::builder("echo", env!("CARGO_PKG_VERSION"))
        .tool(
            Tool::new("echo", "Echo the text back", text),
            |a: Echo, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool(
            Tool::new("sleep", "Wait ms milliseconds, then say so", ms),
            sleep,
        )
        .tool_raw(
            Tool::new("fail", "Always fails", json!({"type": "object"})),
            |_, _| Err::<ToolResult, _>("this tool always fails"),
        )
        .build()?
        .serve_stdio()?;
    Ok(())
}

fn sleep(a: Sleep, ctx: &CallContext) -> Result<ToolResult, String> {
    let end = std::time::Instant::now() + std::time::Duration::from_millis(a.ms);
    while std::time::Instant::now() < end {
        if ctx.is_cancelled() {
            return Err("cancelled".into());
        }
        std::thread::sleep(
            std::time::Duration::from_millis(5).min(end - std::time::Instant::now()),
        );
    }
    Ok(ToolResult::text(format!("slept {} ms", a.ms)))
}
