//! The run's trace at a real OTLP/gRPC receiver: one root span `awf.run <workflow>` (child
//! of awf run's own TRACEPARENT), one `awf.step <state>` span under it for every state that
//! ran (agents, terminal), and the tool spans of each step under its span — whether the
//! tools ran in `awf mcp-serve` spawned by an agent CLI (transport `pipe`) or in-process
//! for `openai_compatible` (`inproc`).

use crate::common;
use crate::fake_model;
use crate::otlp_receiver;

use fake_model::{FakeModel, Script, private_tmp};
use otlp_receiver::{Receiver, attr, hex};
use serde_json::json;

const RUN_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const RUN_SPAN: &str = "00f067aa0ba902b7";

#[test]
fn tool_spans_nest_under_their_step_span_for_both_transports() {
    if !common::python_available() {
        return;
    }
    let receiver = Receiver::start();

    let dir = common::scratch("run-otlp");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("input.txt"), "input\n").unwrap();
    let model = FakeModel::start(Script::new().call("Read", json!({"path": "input.txt"})));
    let wf = dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            r#"
name: traced
states:
  initial: fix
  fix:
    type: agent
    provider: openai_compatible
    prompt: Read input.txt
    options: {{base_url: "{base}", model: m}}
    mcp_proxy: {{enable: true}}
    on_success: check
  check:
    type: step
    command: exit 3
    on_success: review
    on_failure: review
  review:
    type: agent
    provider: claude
    prompt: Read input.txt
    options: {{command: "{agent}"}}
    mcp_proxy: {{enable: true}}
    on_success: done
  done:
    type: terminal
"#,
            base = model.base_url(),
            agent = common::fake_agent().display()
        ),
    )
    .unwrap();
    let out = common::awf(&work)
        .arg("run")
        .arg(&wf)
        .arg("--audit-dir")
        .arg(dir.join("audit"))
        .env("TMPDIR", private_tmp(&dir.join("audit")))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("TRACEPARENT", format!("00-{RUN_TRACE}-{RUN_SPAN}-01"))
        .env("FAKE_AGENT_MODE", "call")
        .env("FAKE_AGENT_PIDS", dir.join("pids"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every exporter flushed before its process (or step) ended.
    let spans = receiver.spans();
    let named = |n: &str| {
        spans
            .iter()
            .filter(|s| s.name == n)
            .cloned()
            .collect::<Vec<_>>()
    };
    let root = named("awf.run traced");
    assert_eq!(root.len(), 1, "{spans:#?}");
    let root = &root[0];
    assert_eq!(hex(&root.trace_id), RUN_TRACE);
    assert_eq!(hex(&root.parent_span_id), RUN_SPAN);
    assert_eq!(attr(root, "awf.run.exit_code").as_deref(), Some("0"));
    assert_eq!(attr(root, "awf.run.status").as_deref(), Some("success"));
    assert_eq!(attr(root, "awf.workflow.name").as_deref(), Some("traced"));
    let (fix, review, done) = (
        named("awf.step fix"),
        named("awf.step review"),
        named("awf.step done"),
    );
    assert_eq!(
        (fix.len(), review.len(), done.len()),
        (1, 1, 1),
        "{spans:#?}"
    );
    for step in [&fix[0], &review[0], &done[0]] {
        assert_eq!(hex(&step.trace_id), RUN_TRACE);
        assert_eq!(step.parent_span_id, root.span_id);
        assert_eq!(attr(step, "awf.step.status").as_deref(), Some("success"));
    }
    for (step, provider) in [(&fix[0], "openai_compatible"), (&review[0], "claude")] {
        assert_eq!(attr(step, "awf.step.tool_calls").as_deref(), Some("1"));
        // The head of the step's audit chain, as its run state keeps it.
        let head = attr(step, "awf.audit.head").unwrap_or_default();
        assert!(
            head.len() == 64 && head.bytes().all(|b| b.is_ascii_hexdigit()),
            "{head:?}"
        );
        assert_eq!(attr(step, "awf.step.type").as_deref(), Some("agent"));
        assert_eq!(
            attr(step, "gen_ai.provider.name").as_deref(),
            Some(provider)
        );
    }
    assert_eq!(attr(&done[0], "awf.step.type").as_deref(), Some("terminal"));
    // A step state that failed (and moved on by on_failure): its span says so.
    let check = named("awf.step check");
    assert_eq!(check.len(), 1, "{spans:#?}");
    assert_eq!(check[0].parent_span_id, root.span_id);
    assert_eq!(attr(&check[0], "awf.step.type").as_deref(), Some("step"));
    assert_eq!(attr(&check[0], "awf.step.exit_code").as_deref(), Some("3"));
    assert_eq!(
        attr(&check[0], "awf.step.status").as_deref(),
        Some("failure")
    );
    assert_eq!(
        check[0].status.as_ref().map(|s| s.code),
        Some(2),
        "an error status: {:?}",
        check[0].status
    );
    let reads = named("tools/call Read");
    assert_eq!(reads.len(), 2, "{spans:#?}");
    let inproc = reads
        .iter()
        .find(|s| attr(s, "network.transport").as_deref() == Some("inproc"))
        .unwrap();
    let pipe = reads
        .iter()
        .find(|s| attr(s, "network.transport").as_deref() == Some("pipe"))
        .unwrap();
    assert_eq!(inproc.parent_span_id, fix[0].span_id);
    assert_eq!(pipe.parent_span_id, review[0].span_id);
    assert_eq!(hex(&inproc.trace_id), RUN_TRACE);
    assert_eq!(hex(&pipe.trace_id), RUN_TRACE);
}

/// A called workflow is part of the run and of its trace: the child's states are spans
/// under the calling state's span, in the run's trace; a while's body states under the
/// while's.
#[test]
fn a_called_workflow_s_states_and_a_loop_s_body_nest_under_their_state() {
    let receiver = Receiver::start();
    let dir = common::scratch("run-otlp-call");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        work.join("child.yaml"),
        "\
name: child
states:
  initial: inner
  inner:
    type: step
    command: echo inner
    on_success: end
  end:
    type: terminal
",
    )
    .unwrap();
    let wf = work.join("parent.yaml");
    std::fs::write(
        &wf,
        "\
name: parent
states:
  initial: call
  call:
    type: call_workflow
    workflow: child
    on_success: again
  again:
    type: while
    while: 'loop.Index < 2'
    body: [tick]
    on_complete: done
  tick:
    type: step
    command: echo tick
    on_success: again
  done:
    type: terminal
",
    )
    .unwrap();
    let out = common::awf(&work)
        .arg("run")
        .arg(&wf)
        .arg("--audit-dir")
        .arg(dir.join("audit"))
        .env("TMPDIR", private_tmp(&dir.join("audit")))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("TRACEPARENT", format!("00-{RUN_TRACE}-{RUN_SPAN}-01"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    let named = |n: &str| {
        spans
            .iter()
            .filter(|s| s.name == n)
            .cloned()
            .collect::<Vec<_>>()
    };
    let root = &named("awf.run parent")[0];
    let call = &named("awf.step call")[0];
    assert_eq!(call.parent_span_id, root.span_id);
    for child in ["awf.step inner", "awf.step end"] {
        let s = named(child);
        assert_eq!(s.len(), 1, "{child}: {spans:#?}");
        assert_eq!(s[0].parent_span_id, call.span_id, "{child}");
        assert_eq!(hex(&s[0].trace_id), RUN_TRACE);
    }
    let again = &named("awf.step again")[0];
    let ticks = named("awf.step tick");
    assert_eq!(ticks.len(), 2, "{spans:#?}");
    assert!(ticks.iter().all(|t| t.parent_span_id == again.span_id));
}
