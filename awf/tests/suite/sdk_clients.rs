//! The official MCP SDK clients (Python `mcp`, TypeScript `@modelcontextprotocol/sdk`,
//! pinned and installed by .ci/run) call Read and Grep on the real `awf mcp-serve`.
//! The driver scripts are the conformance crate's. Without the tools: skipped with a
//! message, except on CI (CI=true), where a missing tool fails.

use crate::common;
use common::*;
use std::path::PathBuf;
use std::process::Command;

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/clients")
}

fn drive(
    interpreter: &std::path::Path,
    script: &str,
    tool: &str,
    args: &str,
    expected: &str,
    root: &std::path::Path,
) {
    let out = Command::new(interpreter)
        .arg(clients_dir().join(script))
        .args([
            tool,
            args,
            expected,
            "--",
            AWF,
            "mcp-serve",
            "--root",
            root.to_str().unwrap(),
        ])
        .env("AWF_TOOLS_DIR", tools_dir())
        .env("AWF_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "{script} {tool}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sample_root(name: &str) -> PathBuf {
    let (_b, root, _o) = workspace(name);
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("README.md"), "# quick start\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n").unwrap();
    root
}

#[test]
fn python_sdk_calls_read_and_grep() {
    let python = tools_dir().join("venv/bin/python");
    let script = clients_dir().join("python_sdk_client.py");
    if !tool_available(&python, "the Python MCP SDK venv")
        || !tool_available(&script, "the Python driver")
    {
        return;
    }
    let root = sample_root("py-sdk");
    drive(
        &python,
        "python_sdk_client.py",
        "Read",
        r#"{"path": "README.md"}"#,
        "# quick start",
        &root,
    );
    drive(
        &python,
        "python_sdk_client.py",
        "Grep",
        r#"{"pattern": "fn \\w+"}"#,
        "src/lib.rs:1:pub fn answer",
        &root,
    );
}

#[test]
fn typescript_sdk_calls_read_and_grep() {
    let node = tools_dir().join("node/node_modules/.bin/node");
    let script = clients_dir().join("typescript_sdk_client.mjs");
    if !tool_available(&node, "Node 22 from .tools")
        || !tool_available(&script, "the TypeScript driver")
    {
        return;
    }
    let root = sample_root("ts-sdk");
    drive(
        &node,
        "typescript_sdk_client.mjs",
        "Read",
        r#"{"path": "README.md"}"#,
        "# quick start",
        &root,
    );
    drive(
        &node,
        "typescript_sdk_client.mjs",
        "Grep",
        r#"{"pattern": "answer", "output_mode": "count"}"#,
        "src/lib.rs:1",
        &root,
    );
}
