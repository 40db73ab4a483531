//! Every builtin through the real `awf mcp-serve` subprocess over MCP: what works, and
//! every refusal the issue lists (bad arguments, missing files, binary files, Edit's rules,
//! Bash exit codes and timeouts, bad regexes, caps).

use crate::common;
use common::*;
use serde_json::json;

#[test]
fn tools_list_names_the_six_builtins_with_schemas() {
    let (_b, root, _o) = workspace("list");
    let mut s = Server::root(&root);
    let a = s.request("tools/list", json!({}));
    let tools = a["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Read", "Write", "Edit", "Bash", "Glob", "Grep"]);
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(!t["description"].as_str().unwrap().is_empty());
    }
    let (status, _, _) = s.finish();
    assert!(status.success());
}

#[test]
fn read_write_edit_roundtrip() {
    let (_b, root, _o) = workspace("rwe");
    let mut s = Server::root(&root);
    assert_eq!(
        s.ok(
            "Write",
            json!({"path": "src/a.txt", "content": "one\ntwo\nthree\n"})
        ),
        "Created src/a.txt (14 bytes, 3 lines)"
    );
    assert_eq!(
        s.ok("Read", json!({"path": "src/a.txt"})),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        s.ok(
            "Read",
            json!({"path": "src/a.txt", "offset": 1, "limit": 1})
        ),
        "two\n[showing lines 2-2; more lines follow: call Read with offset=2]"
    );
    assert_eq!(
        s.ok(
            "Edit",
            json!({"path": "src/a.txt", "old": "two", "new": "2"})
        ),
        "Replaced 1 occurrence in src/a.txt"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
        "one\n2\nthree\n"
    );
    assert!(
        s.ok("Write", json!({"path": "src/a.txt", "content": "x"}))
            .starts_with("Replaced src/a.txt")
    );
    s.finish();
}

#[test]
fn read_refusals() {
    let (_b, root, _o) = workspace("read-refuse");
    std::fs::write(root.join("bin"), b"\x7fELF\0\0\0").unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    let mut s = Server::root(&root);
    let e = s.err("Read", json!({"path": "missing.txt"}));
    assert!(
        e.contains("file not found") && e.contains("missing.txt"),
        "{e}"
    );
    assert!(
        s.err("Read", json!({"path": "bin"}))
            .contains("binary file")
    );
    assert!(
        s.err("Read", json!({"path": "dir"}))
            .contains("is a directory")
    );
    let e = s.invalid("Read", json!({"file_path": "x"}));
    assert!(
        e.contains("invalid arguments for tool \"Read\"") && e.contains("file_path"),
        "{e}"
    );
    s.finish();
}

#[test]
fn read_output_is_bounded_with_a_way_to_continue() {
    let (_b, root, _o) = workspace("read-bound");
    let big: String = (0..100_000).map(|i| format!("line number {i}\n")).collect();
    std::fs::write(root.join("big.txt"), big).unwrap();
    let mut s = Server::root(&root);
    let out = s.ok("Read", json!({"path": "big.txt", "limit": 100000}));
    assert!(out.len() <= 100_300, "{} bytes", out.len());
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("[output cut at 100000 bytes") && last.contains("offset="),
        "{last}"
    );
    s.finish();
}

#[test]
fn write_refusals_and_mode_kept() {
    use std::os::unix::fs::PermissionsExt;
    let (_b, root, _o) = workspace("write");
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("script.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        root.join("script.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let mut s = Server::root(&root);
    assert!(
        s.err("Write", json!({"path": "d", "content": "x"}))
            .contains("is a directory")
    );
    assert!(
        s.invalid("Write", json!({"path": "f"}))
            .contains("missing field `content`")
    );
    s.ok(
        "Write",
        json!({"path": "script.sh", "content": "#!/bin/sh\necho hi\n"}),
    );
    let mode = std::fs::metadata(root.join("script.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
    s.finish();
}

#[test]
fn write_over_the_limit_is_refused() {
    let (base, root, _o) = workspace("write-limit");
    let cfg = write_config(&base, &json!({"root": root, "limits": {"write_bytes": 10}}));
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    let e = s.err("Write", json!({"path": "f", "content": "01234567890"}));
    assert!(e.contains("11 bytes, over the 10-byte limit"), "{e}");
    assert!(!root.join("f").exists());
    s.finish();
}

#[test]
fn edit_rules() {
    let (_b, root, _o) = workspace("edit");
    std::fs::write(root.join("f.rs"), "let a = 1;\nlet a = 1;\n").unwrap();
    let mut s = Server::root(&root);
    let e = s.err(
        "Edit",
        json!({"path": "f.rs", "old": "let a = 1;", "new": "let b = 2;"}),
    );
    assert!(
        e.contains("occurs 2 times") && e.contains("replace_all"),
        "{e}"
    );
    assert!(
        s.err("Edit", json!({"path": "f.rs", "old": "nope", "new": "x"}))
            .contains("not found")
    );
    assert!(
        s.err("Edit", json!({"path": "f.rs", "old": "a", "new": "a"}))
            .contains("same")
    );
    assert!(
        s.err("Edit", json!({"path": "nofile", "old": "a", "new": "b"}))
            .contains("not found")
    );
    assert_eq!(
        s.ok(
            "Edit",
            json!({"path": "f.rs", "old": "let a = 1;", "new": "let b = 2;", "replace_all": true})
        ),
        "Replaced 2 occurrences in f.rs"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("f.rs")).unwrap(),
        "let b = 2;\nlet b = 2;\n"
    );
    s.finish();
}

#[test]
fn bash_runs_reports_and_fails() {
    let (_b, root, _o) = workspace("bash");
    std::fs::create_dir(root.join("sub")).unwrap();
    let mut s = Server::root(&root);
    let out = s.ok(
        "Bash",
        json!({"command": "echo out; echo err >&2; read x; echo \"stdin=[$x]\""}),
    );
    assert!(
        out.starts_with("exit code: 0\nstdout:\nout\nstdin=[]\n"),
        "{out}"
    );
    assert!(out.contains("stderr:\nerr\n"), "{out}");
    let out = s.ok("Bash", json!({"command": "pwd", "cwd": "sub"}));
    assert!(out.contains("/root/sub\n"), "{out}");
    let e = s.err("Bash", json!({"command": "echo partial; exit 7"}));
    assert!(
        e.starts_with("exit code: 7\n") && e.contains("partial"),
        "{e}"
    );
    assert!(
        s.err("Bash", json!({"command": "true", "timeout_seconds": 601}))
            .contains("between 1 and 600")
    );
    let out = s.ok("Bash", json!({"command": "yes | head -c 300000"}));
    assert!(
        out.contains("[stdout cut: showing the first 50000 of 300000 bytes"),
        "{}",
        &out[out.len() - 300..]
    );
    s.finish();
}

/// A `sleep` argument no other process has, to find the process from outside Bash's PID
/// namespace.
fn unique_sleep(n: u32) -> String {
    format!("982.{}{n}", std::process::id())
}

#[test]
fn bash_timeout_kills_the_whole_group() {
    let (_b, root, _o) = workspace("bash-timeout");
    let mut s = Server::root(&root);
    let bg = unique_sleep(1);
    let e = s.err(
        "Bash",
        json!({"command": format!("sleep {bg} & sleep 1000"), "timeout_seconds": 1}),
    );
    assert!(e.starts_with("timed out after 1 s"), "{e}");
    assert!(
        eventually(|| common::pids_with_arg(&bg).is_empty()),
        "background sleep {bg} survived the timeout"
    );
    s.finish();
}

#[test]
fn bash_background_children_do_not_outlive_the_call() {
    let (_b, root, _o) = workspace("bash-bg");
    let mut s = Server::root(&root);
    let bg = unique_sleep(2);
    s.ok(
        "Bash",
        json!({"command": format!("sleep {bg} & sleep 0.3; [ -d /proc/$! ] && echo started")}),
    );
    assert!(
        eventually(|| common::pids_with_arg(&bg).is_empty()),
        "background sleep {bg} outlived the call"
    );
    s.finish();
}

#[test]
fn bash_cancellation_kills_the_group() {
    let (_b, root, _o) = workspace("bash-cancel");
    let mut s = Server::root(&root);
    let fg = unique_sleep(3);
    let id = s.send_request(
        "tools/call",
        json!({"name": "Bash", "arguments": {"command": format!("sleep {fg}")}}),
    );
    assert!(eventually(|| !common::pids_with_arg(&fg).is_empty()));
    s.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    assert!(
        eventually(|| common::pids_with_arg(&fg).is_empty()),
        "cancelled command {fg} still runs"
    );
    // The server goes on serving.
    assert!(
        s.ok("Bash", json!({"command": "echo alive"}))
            .contains("alive")
    );
    s.finish();
}

#[test]
fn glob_and_grep() {
    let (_b, root, _o) = workspace("search");
    for (p, c) in [
        ("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n"),
        ("src/lib/util.rs", "pub fn hello() {}\n"),
        ("docs/guide.md", "hello docs\n"),
        ("target/gen.rs", "fn hello() {}\n"),
        ("img.bin", "hello\0\0\0"),
    ] {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    let mut s = Server::root(&root);
    assert_eq!(
        s.ok("Glob", json!({"pattern": "**/*.rs"})),
        "src/lib/util.rs\nsrc/main.rs\n"
    );
    assert_eq!(
        s.ok("Glob", json!({"pattern": "*.rs", "cwd": "src"})),
        "src/main.rs\n"
    );
    assert!(
        s.ok("Glob", json!({"pattern": "*.zig"}))
            .starts_with("no files match")
    );
    assert_eq!(
        s.ok(
            "Grep",
            json!({"pattern": "hello", "case_insensitive": true})
        ),
        "docs/guide.md:1:hello docs\nsrc/lib/util.rs:1:pub fn hello() {}\nsrc/main.rs:2:    println!(\"Hello\");\n[1 binary files skipped]"
    );
    assert_eq!(
        s.ok(
            "Grep",
            json!({"pattern": "hello", "output_mode": "files_with_matches", "glob": "*.rs"})
        ),
        "src/lib/util.rs"
    );
    assert_eq!(
        s.ok(
            "Grep",
            json!({"pattern": "fn", "output_mode": "count", "path": "src"})
        ),
        "src/lib/util.rs:1\nsrc/main.rs:1"
    );
    let e = s.err("Grep", json!({"pattern": "fn(", "path": "src"}));
    assert!(e.contains("invalid regex"), "{e}");
    assert!(
        s.invalid("Grep", json!({"pattern": "x", "output_mode": "lines"}))
            .contains("unknown variant")
    );
    s.finish();
}

#[test]
fn glob_and_grep_are_capped_with_a_note() {
    let (base, root, _o) = workspace("caps");
    for i in 0..50 {
        std::fs::write(root.join(format!("f{i:02}.txt")), "match\nmatch\n").unwrap();
    }
    let cfg = write_config(
        &base,
        &json!({"root": root, "limits": {"glob_results": 5, "grep_results": 7}}),
    );
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    let out = s.ok("Glob", json!({"pattern": "*.txt"}));
    assert_eq!(out.lines().count(), 6);
    assert!(
        out.ends_with(
            "[50 files match; showing the first 5 in sorted order; use a narrower pattern or cwd]"
        ),
        "{out}"
    );
    let out = s.ok("Grep", json!({"pattern": "match"}));
    assert_eq!(out.lines().count(), 8);
    assert!(out.ends_with("[100 matching lines in 50 files; showing the first 7 lines; narrow the pattern, path or glob]"), "{out}");
    s.finish();
}
