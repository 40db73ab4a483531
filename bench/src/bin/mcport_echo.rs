//! Baseline: the echo server written the way `mcport` 0.6 documents it (blocking,
//! single-threaded, `#[tool]` on a plain function).

use mcport::{McpServer, tool, tools};

/// Echo the text back.
#[tool]
fn echo(text: String) -> String {
    text
}

fn main() -> std::io::Result<()> {
    McpServer::new("mcport-echo", env!("CARGO_PKG_VERSION"))
        .tools(tools![echo])
        .serve()
}
