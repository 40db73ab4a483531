//! mcpserver depends on serde and serde_json only: third parties embed it, and its
//! stdio loop needs no runtime. This reads `cargo metadata` so a new dependency fails CI.

use std::process::Command;

use serde_json::Value;

#[test]
fn normal_dependencies_are_serde_and_serde_json_only() {
    let out = Command::new(env!("CARGO"))
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
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let package = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mcpserver")
        .expect("mcpserver in the metadata");
    let mut normal: Vec<&str> = package["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null())
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    normal.sort();
    assert_eq!(
        normal,
        ["serde", "serde_json"],
        "mcpserver may depend on serde and serde_json only"
    );
}
