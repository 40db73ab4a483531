//! conformance depends on serde, serde_json and clap only, and in particular not on
//! mcpserver: an independent reading of the spec is its point. This reads `cargo metadata`
//! so that a new dependency fails CI rather than a review.

use std::process::Command;

use serde_json::Value;

#[test]
fn normal_dependencies_are_serde_serde_json_and_clap_only() {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let package = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "conformance")
        .expect("conformance in the metadata");
    let mut normal: Vec<&str> = package["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .filter(|d| d["kind"].is_null())
        .map(|d| d["name"].as_str().expect("a name"))
        .collect();
    normal.sort_unstable();
    assert_eq!(
        normal,
        ["clap", "serde", "serde_json"],
        "conformance may depend on serde, serde_json and clap only (never on mcpserver: \
         the check suite must read the spec independently)"
    );
}
