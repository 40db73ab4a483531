//! `hidden:` holds for every tool and by the file, not by its name at the start of a call:
//! a secret planted inside the workspace and listed as hidden cannot be read by Read,
//! found by Grep, listed by Glob or changed by Write, and a Bash call that renames its
//! parent (`mv proj proj2`) fails, so the next call finds it covered still. Each test speaks
//! MCP to a real `awf mcp-serve`; Bash runs the real `cat`, `grep`, `mv` and `rm`.

use crate::common;

use common::{Server, write_config};
use serde_json::json;

/// Planted in every hidden file; the probes never spell it whole.
const MARK: &str = "HIDDEN-9k2";
const MARK_SPLIT: &str = "HID\"\"DEN-9k2";

#[test]
fn a_hidden_path_in_the_workspace_is_hidden_from_every_tool_and_survives_a_rename() {
    let (base, root, _) = common::workspace("hidden-all");
    let root = std::fs::canonicalize(&root).unwrap();
    std::fs::create_dir_all(root.join("proj/vault")).unwrap();
    std::fs::write(root.join("proj/vault/token"), format!("{MARK}-token\n")).unwrap();
    std::fs::write(root.join(".env"), format!("PASS={MARK}-env\n")).unwrap();
    std::fs::write(root.join("proj/readme.txt"), "VISIBLE\n").unwrap();
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg = write_config(
        &base,
        &json!({"root": root, "hidden_paths": [root.join("proj/vault/token"), root.join(".env")]}),
    );
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    s.initialize();

    // Read, Write, Grep and Glob.
    for path in ["proj/vault/token", ".env", "proj/../proj/vault/token"] {
        let (text, is_error) = s.call("Read", json!({ "path": path }));
        assert!(is_error, "Read {path}: {text}");
        assert!(!text.contains(MARK) && text.contains("hidden"), "{text}");
    }
    let (text, is_error) = s.call(
        "Write",
        json!({"path": "proj/vault/token", "content": "overwritten"}),
    );
    assert!(is_error, "{text}");
    assert!(
        std::fs::read_to_string(root.join("proj/vault/token"))
            .unwrap()
            .contains(MARK)
    );
    // A link in the workspace leading to it is no way around.
    std::os::unix::fs::symlink("proj/vault", root.join("v")).unwrap();
    let (text, is_error) = s.call("Read", json!({ "path": "v/token" }));
    assert!(is_error && !text.contains(MARK), "{text}");
    let (text, _) = s.call("Grep", json!({ "pattern": "HIDDEN-9", "path": "." }));
    assert!(!text.contains(MARK) && !text.contains("token"), "{text}");
    let (text, _) = s.call(
        "Grep",
        json!({ "pattern": "HIDDEN", "output_mode": "files_with_matches" }),
    );
    assert!(!text.contains("token") && !text.contains(".env"), "{text}");
    let (text, _) = s.call(
        "Grep",
        json!({ "pattern": "HIDDEN", "path": "proj/vault/token" }),
    );
    assert!(!text.contains(MARK), "{text}");
    let (text, _) = s.call("Glob", json!({ "pattern": "**/*" }));
    assert!(text.contains("readme.txt"), "{text}");
    assert!(!text.contains("token") && !text.contains(".env"), "{text}");

    // Bash: covered; the parents cannot be renamed or removed; covered again next call.
    let (out, _) = s.call(
        "Bash",
        json!({"command": format!(
            "P={MARK_SPLIT}; cat proj/vault/token .env; grep -rs \"$P\" . ; \
             mv proj proj2 2>&1; mv proj/vault proj/v2 2>&1; rm -rf proj 2>&1 | head -2; \
             ls proj/readme.txt; echo end-$((6*7))")}),
    );
    assert!(out.contains("end-42"), "{out}");
    assert!(!out.contains(MARK), "hidden content read: {out}");
    let (out, _) = s.call(
        "Bash",
        json!({"command": format!(
            "P={MARK_SPLIT}; cat proj/vault/token proj2/vault/token .env 2>&1; \
             grep -rs \"$P\" . ; echo end-$((6*7))")}),
    );
    assert!(out.contains("end-42"), "{out}");
    assert!(!out.contains(MARK), "uncovered after a rename: {out}");
    // The secret is where it was, whole.
    assert!(
        std::fs::read_to_string(root.join("proj/vault/token"))
            .unwrap()
            .contains(MARK)
    );
    s.finish();
}
