//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
//! .ci/) judges `awf mcp-serve` in both eras, the handshake era through supergateway and
//! revision 2026-07-28 through `conformance/official/bridge.mjs`: every scenario that applies
//! to a tools-only server without the suite's fixture tools (conformance/official/README.md).

use crate::common;
use common::*;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn awf_mcp_serve_passes_the_official_suite_in_both_eras() {
    let repo = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let tools = tools_dir();
    let suite = tools.join("node/node_modules/mcp-conformance-0-2/dist/index.js");
    if !tool_available(&suite, "the official conformance suite") {
        return;
    }
    let (_base, root, _outside) = workspace("official-suite");
    let out = Command::new("bash")
        .arg(repo.join("conformance/official/run.sh"))
        .args(["--without-fixture-tools", "--"])
        .arg(AWF)
        .args(["mcp-serve", "--root"])
        .arg(&root)
        .env("AWF_TOOLS_DIR", &tools)
        .output()
        .expect("run conformance/official/run.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(" 0 failed"),
        "the official suite failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("PASS  0.2  stateless  server-stateless"),
        "{text}"
    );
}
