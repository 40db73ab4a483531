//! Diagnostic variant of the library's echo example with `max_concurrency(1)`: calls
//! run one at a time on the reading thread and no monitor thread exists. Compared with
//! the example (`--server c1=…/mcpserver_c1`), it isolates what the concurrency
//! machinery costs per call.

use mcpserver::{CallContext, Server, Tool, ToolResult};
use serde::Deserialize;

#[derive(Deserialize)]
struct Echo {
    text: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    Server::builder("echo", env!("CARGO_PKG_VERSION"))
        .max_concurrency(1)
        .tool(
            Tool::new("echo", "Echo the text back", schema),
            |a: Echo, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .build()?
        .serve_stdio()?;
    Ok(())
}
