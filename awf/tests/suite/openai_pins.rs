//! `openai_compatible`'s `tools[]` follows the pins (issue #39): a third-party server that
//! changes a tool during the step gets it withheld (refused, audited), and every model
//! request after that no longer offers it, as a CLI's `tools/list` no longer lists it.
//! `awf run` drives the fake model (tests/fake_model) with the in-process tool server and
//! tests/fixtures/servers/midrun.py, which changes `echo` when its `change` is called and
//! answers that call only once awf has listed its tools again.

use crate::common;
use crate::fake_model;

use fake_model::{FakeModel, Script, Wire, private_tmp};
use serde_json::{Value, json};
use std::path::Path;

#[test]
fn a_tool_changed_during_the_step_leaves_the_next_model_request() {
    if !common::python_available() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-openai-pins-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("fixture.txt"), "the fixture says hello\n").unwrap();
    let audit_dir = dir.join("audit");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/midrun.py");

    // Turn 1: the model calls `change` (echo changes on the server); turn 2: Read; turn 3:
    // echo, if it is still offered (a stale tool list), else the final answer.
    let model = FakeModel::start(
        Script::new()
            .call("midrun_change", json!({}))
            .call("Read", json!({"path": "fixture.txt"}))
            .call("midrun_echo", json!({"text": "stale"})),
    );
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: openai-pins
states:
  initial: fix
  fix:
    type: agent
    provider: openai_compatible
    prompt: Change echo, read fixture.txt, then echo.
    timeout: 60s
    options:
      base_url: {base}/v1
      model: fake-model
    mcp_proxy:
      enable: true
      servers:
        midrun:
          command: [python3, {server}]
    on_success: done
  done:
    type: terminal
"#,
            base = model.base_url(),
            server = server.display()
        ),
    )
    .unwrap();
    let out = common::awf_run(&work, &wf)
        .arg("--audit-dir")
        .arg(&audit_dir)
        .env("TMPDIR", private_tmp(&audit_dir))
        .output()
        .unwrap();
    let s = common::run_summary(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{stderr}\n{}",
        model.describe()
    );

    // What each model request offered, in order.
    let offered: Vec<Vec<String>> = model
        .requests()
        .iter()
        .filter(|r| r.wire == Wire::ChatCompletions)
        .map(|r| r.tools.iter().map(|t| t.flat()).collect())
        .collect();
    let has = |tools: &[String], name: &str| tools.iter().any(|t| t == name);
    assert!(offered.len() >= 2, "{}", model.describe());
    assert!(
        has(&offered[0], "midrun_echo") && has(&offered[0], "midrun_change"),
        "the first request offers the server's tools as pinned: {:?}",
        offered[0]
    );
    // The server changed echo during turn 1 (and awf listed its tools again before the
    // answer to `change` came back: the fixture waits for it).
    let output = s["states"][0]["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("changed") && !output.contains("nobody listed again"),
        "{s:#}"
    );
    // Every later request leaves echo out, and keeps the rest.
    for (i, tools) in offered.iter().enumerate().skip(1) {
        assert!(
            !has(tools, "midrun_echo"),
            "request {} still offers the changed tool midrun_echo: {tools:?}\n{}",
            i + 1,
            model.describe()
        );
        assert!(
            has(tools, "midrun_change") && has(tools, "Read"),
            "request {} lost tools that did not change: {tools:?}",
            i + 1
        );
    }
    // Two tool turns, then the final answer: echo was never offered to be called.
    assert_eq!(offered.len(), 3, "{}", model.describe());
    let calls: Vec<String> = model.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(calls, ["midrun_change", "Read"]);
    assert!(output.contains("the fixture says hello"), "{output}");

    // awf said why: the change is on record, and the summary lists it as withheld.
    let audit = common::audit_dir_lines(&audit_dir);
    let withheld: Vec<&Value> = audit
        .iter()
        .filter(|r| r["type"] == "tool.withheld")
        .collect();
    assert!(
        withheld.iter().any(|r| r["tool"] == "midrun_echo"
            && r["reason"]
                .as_str()
                .is_some_and(|w| w.contains("changed since pinned"))),
        "{audit:#?}"
    );
    assert!(
        !audit
            .iter()
            .any(|r| r["type"] == "tool.call" && r["tool"] == "midrun_echo"),
        "{audit:#?}"
    );
}
