//! The example workflows in examples/workflows/ are valid: `awf validate` exits 0 on each,
//! and there is one per provider.

use std::path::Path;
use std::process::Command;

#[test]
fn every_example_workflow_validates_and_every_provider_has_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows");
    let mut providers = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_awf"))
            .args(["validate", "--format", "json"])
            .arg(&path)
            .env("AWF_PLUGINS_PATH", "")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        let text = std::fs::read_to_string(&path).unwrap();
        providers.extend(
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("provider: "))
                .map(str::to_string),
        );
    }
    providers.sort();
    providers.dedup();
    assert_eq!(
        providers,
        ["claude", "codex", "gemini", "openai_compatible", "opencode"]
    );
}
