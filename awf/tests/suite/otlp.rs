//! Spans reach a real OTLP/gRPC receiver (a tonic server implementing the OTLP
//! TraceService from `opentelemetry-proto`), with the MCP semantic-convention name, kind
//! and attributes, parented by the step's TRACEPARENT with the client's
//! `params._meta.traceparent` as a link (its parent when there is no step); and they are
//! flushed before the server exits.

use crate::common;
use crate::otlp_receiver;
use common::*;
use otlp_receiver::{Receiver, attr, hex};
use serde_json::json;

const STEP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const STEP_SPAN: &str = "00f067aa0ba902b7";
const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

#[test]
fn tool_spans_reach_an_otlp_receiver_with_the_right_parent() {
    let receiver = Receiver::start();

    let (_b, root, _o) = workspace("otlp");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let endpoint = receiver.endpoint.clone();
    let traceparent = format!("00-{STEP_TRACE}-{STEP_SPAN}-01");
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("TRACEPARENT", &traceparent),
        ],
    );
    s.initialize();
    s.ok("Read", json!({"path": "f.txt"}));
    // A call of revision 2026-07-28 (its `_meta` names it), with the client's span.
    let a = s.request(
        "tools/call",
        json!({"name": "Grep", "arguments": {"pattern": "x"},
        "_meta": {
            "traceparent": format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"),
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }}),
    );
    assert_eq!(a["result"]["resultType"], "complete", "{a}");
    assert!(
        a["result"]["content"].is_array() && a["result"]["isError"] != true,
        "{a}"
    );
    s.err("Read", json!({"path": "missing"}));
    let rejected = s.request("tools/call", json!({"name": "Nope", "arguments": {}}));
    assert_eq!(rejected["error"]["code"], -32602, "{rejected}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");

    // The server flushed before exiting, and the receiver stored before answering.
    let mut spans = receiver.spans();
    // A call rejected before any tool ran (unknown tool) has its span too.
    let nope = spans
        .iter()
        .position(|s| s.name == "tools/call Nope")
        .expect("a span for the rejected call");
    let nope = spans.remove(nope);
    assert_eq!(attr(&nope, "error.type").as_deref(), Some("rejected"));
    assert_eq!(hex(&nope.parent_span_id), STEP_SPAN);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let by_name = |n: &str| {
        spans
            .iter()
            .filter(|s| s.name == n)
            .cloned()
            .collect::<Vec<_>>()
    };
    let reads = by_name("tools/call Read");
    let greps = by_name("tools/call Grep");
    assert_eq!((reads.len(), greps.len()), (2, 1));
    for span in &spans {
        assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
        assert_eq!(attr(span, "mcp.method.name").as_deref(), Some("tools/call"));
        assert_eq!(attr(span, "network.transport").as_deref(), Some("pipe"));
        assert!(attr(span, "jsonrpc.request.id").is_some());
    }
    for read in &reads {
        assert_eq!(
            attr(read, "mcp.protocol.version").as_deref(),
            Some("2024-11-05")
        );
    }
    assert_eq!(
        attr(&greps[0], "mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(attr(&reads[0], "gen_ai.tool.name").as_deref(), Some("Read"));
    // Parent: the step's TRACEPARENT when the client sent none...
    for r in &reads {
        assert_eq!(hex(&r.trace_id), STEP_TRACE);
        assert_eq!(hex(&r.parent_span_id), STEP_SPAN);
    }
    // ...and when it sent its own: the step stays the parent, the client's span is a link.
    assert_eq!(hex(&greps[0].trace_id), STEP_TRACE);
    assert_eq!(hex(&greps[0].parent_span_id), STEP_SPAN);
    let links: Vec<(String, String)> = greps[0]
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(links, [(CLIENT_TRACE.to_string(), CLIENT_SPAN.to_string())]);
    assert!(reads.iter().all(|r| r.links.is_empty()));
    // error.type only on the failed call.
    let failed: Vec<_> = reads
        .iter()
        .filter(|r| attr(r, "error.type").is_some())
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(attr(failed[0], "error.type").as_deref(), Some("tool_error"));
    assert_eq!(
        failed[0].status.as_ref().map(|s| s.code),
        Some(2),
        "STATUS_CODE_ERROR"
    );
    assert!(attr(&greps[0], "error.type").is_none());
}

#[test]
fn without_a_step_the_client_s_span_is_the_parent() {
    let receiver = Receiver::start();
    let (_b, root, _o) = workspace("otlp-gateway");
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)],
    );
    s.initialize();
    let a = s.request(
        "tools/call",
        json!({"name": "Glob", "arguments": {"pattern": "*"},
               "_meta": {"traceparent": format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")}}),
    );
    assert!(a["result"]["content"].is_array(), "{a}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let spans = receiver.spans();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(hex(&spans[0].trace_id), CLIENT_TRACE);
    assert_eq!(hex(&spans[0].parent_span_id), CLIENT_SPAN);
    assert!(spans[0].links.is_empty());
}

#[test]
fn without_an_endpoint_nothing_is_exported_and_calls_work() {
    let (_b, root, _o) = workspace("otlp-off");
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("TRACEPARENT", "garbage")],
    );
    s.initialize();
    s.ok("Glob", json!({"pattern": "*"}));
    let (status, _, stderr) = s.finish();
    assert!(status.success());
    assert!(stderr.contains("malformed traceparent"), "{stderr}");
}

#[test]
fn a_bash_call_s_span_holds_its_peak_memory_and_cpu_time() {
    let receiver = Receiver::start();
    let (_b, root, _o) = workspace("otlp-usage");
    let mut s = Server::start(
        &["mcp-serve", "--root", root.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)],
    );
    s.initialize();
    // About 64 MiB touched, and a little CPU.
    s.ok(
        "Bash",
        json!({"command": "python3 -c 'a = bytearray(64 << 20); print(sum(a[::4096]))'"}),
    );
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let spans = receiver.spans();
    let bash = spans
        .iter()
        .find(|s| s.name == "tools/call Bash")
        .expect("a span for the call");
    let num = |k: &str| -> u64 {
        attr(bash, k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{k} missing: {bash:#?}"))
    };
    assert!(num("awf.call.max_rss_bytes") >= 64 << 20, "{bash:#?}");
    assert!(num("awf.call.cpu_ms") > 0, "{bash:#?}");
}

#[test]
fn a_third_party_server_s_calls_are_spans_under_the_step() {
    if !python_available() {
        return;
    }
    let receiver = Receiver::start();
    let (base, root, _o) = workspace("otlp-servers");
    let hostile =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/hostile.py");
    let site = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = site.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in site.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let cfg = write_config(
        &base,
        &json!({"root": root, "intercept_builtins": false, "servers": {"hostile": {
            "command": ["python3", hostile],
            "sandbox": {"network": {"allow": [format!("host.awf.internal:{port}")]}}}}}),
    );
    let traceparent = format!("00-{STEP_TRACE}-{STEP_SPAN}-01");
    let mut s = Server::start(
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("TRACEPARENT", &traceparent),
        ],
    );
    s.initialize();
    s.ok("hostile_echo", json!({"text": "x"}));
    let got = s.ok(
        "hostile_fetch",
        json!({"url": format!("http://host.awf.internal:{port}/")}),
    );
    assert!(got.starts_with("FETCHED:200"), "{got}");
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let spans = receiver.spans();
    let echo = spans
        .iter()
        .find(|s| s.name == "tools/call hostile_echo")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(attr(echo, "awf.mcp.server").as_deref(), Some("hostile"));
    assert_eq!(attr(echo, "awf.mcp.server.tool").as_deref(), Some("echo"));
    assert_eq!(
        attr(echo, "awf.tool.source").as_deref(),
        Some("server:hostile")
    );
    assert_eq!(hex(&echo.trace_id), STEP_TRACE);
    assert_eq!(hex(&echo.parent_span_id), STEP_SPAN);
    let fetch = spans
        .iter()
        .find(|s| s.name == "tools/call hostile_fetch")
        .expect("the fetch span");
    assert_eq!(attr(fetch, "awf.mcp.server").as_deref(), Some("hostile"));
}
