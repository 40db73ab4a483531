//! The official Python SDK client (PyPI `mcp`, pinned in .ci/requirements.txt) drives
//! the echo example: initialize, list, call, a bad call, an unknown tool.

mod common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn python() -> Option<PathBuf> {
    let dir = std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.tools")));
    let python = dir.join("venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the Python SDK is missing at {}: run .ci/run to install it",
        python.display()
    );
    eprintln!(
        "skipped: {} is missing (run .ci/run to install the pinned Python SDK)",
        python.display()
    );
    None
}

#[test]
fn the_python_sdk_client_drives_the_echo_server() {
    let Some(python) = python() else { return };
    let out = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/python_echo.py"
        ))
        .arg(common::echo_binary())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["protocolVersion"], "2024-11-05");
    assert_eq!(seen["serverName"], "echo");
    assert_eq!(seen["tools"], serde_json::json!(["echo", "fail", "sleep"]));
    assert_eq!(
        seen["echo"],
        serde_json::json!({"isError": false, "text": "hello from python"})
    );
    // In 2024-11-05 arguments that do not fit and unknown tools are protocol errors.
    assert_eq!(seen["bad_arguments"]["code"], -32602);
    assert!(
        seen["bad_arguments"]["message"]
            .as_str()
            .unwrap()
            .contains("\"echo\"")
    );
    assert_eq!(seen["unknown_tool"]["code"], -32602);
    assert!(
        seen["unknown_tool"]["message"]
            .as_str()
            .unwrap()
            .contains("no_such_tool")
    );
}
