//! The workspace's independent checker, `mcp-conformance`, passes on `awf mcp-serve`
//! (Bash as the slow tool for the concurrency and cancellation checks, a failing Read
//! as the error tool). The echo-only checks are skipped: awf has no echo tool.

mod common;
use common::*;
use std::path::PathBuf;
use std::process::Command;

fn conformance_bin() -> PathBuf {
    let bin = PathBuf::from(AWF).with_file_name("mcp-conformance");
    if !bin.exists() {
        // `cargo test -p awf` alone does not build other packages' binaries.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "conformance", "--bin", "mcp-conformance"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "building mcp-conformance failed");
    }
    bin
}

#[test]
fn mcp_conformance_passes_on_awf_mcp_serve() {
    let (_b, root, _o) = workspace("conformance");
    std::fs::write(root.join("f.txt"), "hi\n").unwrap();
    let out = Command::new(conformance_bin())
        .args([
            "--slow-tool",
            "Bash",
            "--slow-args",
            r#"{"command": "sleep 3"}"#,
        ])
        .args([
            "--error-tool",
            "Read",
            "--error-args",
            r#"{"path": "missing.txt"}"#,
        ])
        .args(["--", AWF, "mcp-serve", "--root", root.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or("");
    assert!(summary.contains(" 0 failed"), "{stdout}");
    assert!(
        stdout.contains("PASS sigterm-exit") && stdout.contains("PASS cancellation"),
        "{stdout}"
    );
}
