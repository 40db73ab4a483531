//! Three clients nobody here wrote drive each target marked `real_clients`: the official
//! Python SDK client, the official TypeScript SDK client and the MCP Inspector CLI. Each
//! lists the tools and calls `echo`. Scripts are in `clients/`; with CI=true a missing
//! client is a failure, never a skip.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{TARGETS, command, crate_dir, node, python, tools_dir};

const TOOL: &str = "echo";
const ARGS: &str = r#"{"text": "hello from a real client ✓"}"#;
const EXPECTED: &str = "hello from a real client ✓";

fn drive(client: &str, interpreter: Option<PathBuf>, script: &str) {
    let Some(interpreter) = interpreter else {
        return;
    };
    for target in TARGETS.iter().filter(|t| t.real_clients) {
        let Some(server) = command(target) else {
            continue;
        };
        let output = Command::new(&interpreter)
            .arg(crate_dir().join("clients").join(script))
            .args([TOOL, ARGS, EXPECTED, "--"])
            .args(&server)
            .env("AWF_TOOLS_DIR", tools_dir())
            .output()
            .expect("run the client");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("OK"),
            "{client} against {}: {}\nstdout:\n{stdout}\nstderr:\n{}",
            target.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("{client} against {}:\n{stdout}", target.name);
    }
}

#[test]
fn python_sdk_client_lists_and_calls() {
    drive(
        "Python SDK client (mcp==2.3.0)",
        python(),
        "python_sdk_client.py",
    );
}

#[test]
fn typescript_sdk_client_lists_and_calls() {
    let sdk = common::required(
        tools_dir().join("node/node_modules/@modelcontextprotocol/sdk/package.json"),
        "@modelcontextprotocol/sdk",
    );
    drive(
        "TypeScript SDK client (@modelcontextprotocol/sdk)",
        sdk.and_then(|_| node()),
        "typescript_sdk_client.mjs",
    );
}

#[test]
fn inspector_cli_lists_and_calls() {
    let inspector = common::required(
        tools_dir().join("node/node_modules/@modelcontextprotocol/inspector/package.json"),
        "@modelcontextprotocol/inspector",
    );
    drive(
        "MCP Inspector CLI (@modelcontextprotocol/inspector --cli)",
        inspector.and_then(|_| node()),
        "inspector_cli.mjs",
    );
}
