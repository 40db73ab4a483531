//! `Server::call`, the in-process seam: the same answers and the same hooks as a call
//! read from the transport.

mod common;

use std::sync::{Arc, Mutex};

use common::{Client, object_schema};
use mcpserver::{
    CallContext, CallError, CallOutcome, CancellationToken, Hooks, RequestId, Server, Tool,
    ToolResult,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Text {
    text: String,
}

/// Records every call event the hooks see, as one line each.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
}

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl Hooks for Recorder {
    fn call_started(&self, ctx: &CallContext, arguments: &str) {
        self.events.lock().unwrap().push(format!(
            "start {} {} {}",
            ctx.tool(),
            ctx.request_id(),
            arguments
        ));
    }
    fn call_finished(&self, ctx: &CallContext, o: &CallOutcome<'_>) {
        self.events.lock().unwrap().push(format!(
            "end {} {} {} {}",
            ctx.tool(),
            o.status.as_str(),
            o.error.unwrap_or("-"),
            o.result.map_or(0, |r| r.content.len())
        ));
    }
}

fn server(hooks: Arc<Recorder>) -> Server {
    Server::builder("t", "1")
        .tool(
            Tool::new("echo", "Echo", object_schema()),
            |a: Text, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool_raw(
            Tool::new("fail", "Always fails", json!({"type": "object"})),
            |_, _| Err::<ToolResult, _>("the disk is on fire"),
        )
        .tool_raw(
            Tool::new("boom", "Panics", json!({"type": "object"})),
            |_, _| -> Result<ToolResult, String> { panic!("kaboom") },
        )
        .tool_raw(
            Tool::new("strict", "Checks its arguments", json!({"type": "object"})),
            |args: Value, _: &CallContext| match args.get("n").and_then(Value::as_i64) {
                Some(n) if n > 0 => Ok(ToolResult::text(n.to_string())),
                Some(_) => Err(CallError::failed("n must be positive")),
                None => Err(CallError::invalid_arguments(
                    "\"n\" (an integer) is required",
                )),
            },
        )
        .tool_raw(
            Tool::new(
                "context",
                "Tells what its context holds",
                json!({"type": "object"}),
            ),
            |_, ctx: &CallContext| {
                Ok::<_, String>(ToolResult::text(
                    json!({
                        "id": ctx.request_id().to_string(),
                        "meta": ctx.meta(),
                        "cancelled": ctx.is_cancelled(),
                        "version": ctx.protocol_version(),
                    })
                    .to_string(),
                ))
            },
        )
        .withhold("secret", "the host's policy denies it")
        .hooks(hooks)
        .build()
        .unwrap()
}

/// A seam answer as the wire would carry it: `{"result": …}` or `{"error": {code, message}}`.
fn as_wire(answer: Result<ToolResult, CallError>) -> Value {
    match answer {
        Ok(r) => {
            let mut result = json!({"content": r.content});
            if r.is_error {
                result["isError"] = true.into();
            }
            json!({"result": result})
        }
        Err(CallError::InvalidArguments(message)) => {
            json!({"error": {"code": -32602, "message": message}})
        }
        Err(other) => panic!("the seam never answers {other:?}"),
    }
}

fn call(server: &Server, id: i64, tool: &str, arguments: Value) -> Result<ToolResult, CallError> {
    server.call(&CallContext::new(RequestId::Number(id), tool), &arguments)
}

#[test]
fn every_kind_of_call_answers_and_hooks_as_over_the_transport() {
    let cases = [
        ("echo", json!({"text": "hi"})),
        ("echo", json!({"text": 5})),
        ("echo", json!({})),
        ("echo", json!([1])),
        ("echo", json!("text")),
        ("echo", Value::Null),
        ("nope", json!({"a": 1})),
        ("secret", json!({})),
        ("fail", json!({})),
        ("boom", json!({})),
        ("strict", json!({"n": 2})),
        ("strict", json!({"n": -1})),
        ("strict", json!({})),
    ];
    let wire_hooks = Arc::new(Recorder::default());
    let mut client = Client::initialized(server(wire_hooks.clone()));
    let seam_hooks = Arc::new(Recorder::default());
    let seam = server(seam_hooks.clone());
    for (id, (tool, arguments)) in (1..).zip(cases) {
        let wire = client.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        );
        let mut wire_answer = json!({});
        if let Some(result) = wire.get("result") {
            wire_answer["result"] = result.clone();
        } else {
            wire_answer["error"] =
                json!({"code": wire["error"]["code"], "message": wire["error"]["message"]});
        }
        let seam_answer = as_wire(call(&seam, id, tool, arguments.clone()));
        assert_eq!(seam_answer, wire_answer, "{tool} {arguments}");
        assert_eq!(
            seam_hooks.take(),
            wire_hooks.take(),
            "hooks of {tool} {arguments}"
        );
    }
}

#[test]
fn an_unknown_tool_is_invalid_arguments_and_reaches_the_hooks_as_rejected() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    assert_eq!(
        call(&server, 7, "nope", json!({"a": 1})),
        Err(CallError::InvalidArguments(
            "unknown tool \"nope\": tools/list names the tools of this server".into()
        ))
    );
    assert_eq!(
        hooks.take(),
        [
            r#"start nope 7 {"a":1}"#,
            r#"end nope rejected unknown tool "nope": tools/list names the tools of this server 0"#,
        ]
    );
}

#[test]
fn a_withheld_tool_is_refused_with_the_reason() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    assert_eq!(
        call(&server, 1, "secret", json!({})),
        Err(CallError::InvalidArguments(
            "tool \"secret\" is not available: the host's policy denies it".into()
        ))
    );
    assert_eq!(
        hooks.take(),
        [
            "start secret 1 {}",
            r#"end secret rejected tool "secret" is not available: the host's policy denies it 0"#,
        ]
    );
}

#[test]
fn arguments_that_are_not_an_object_or_do_not_fit_are_invalid_arguments() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    assert_eq!(
        call(&server, 1, "echo", json!([1])),
        Err(CallError::InvalidArguments(
            "invalid arguments for tool \"echo\": \"arguments\" must be an object, got [1]".into()
        ))
    );
    assert_eq!(
        call(&server, 2, "echo", json!({"text": 5})),
        Err(CallError::InvalidArguments(
            "invalid arguments for tool \"echo\": invalid type: integer `5`, expected a string at line 1 column 9".into()
        ))
    );
    assert_eq!(
        call(&server, 3, "strict", json!({})),
        Err(CallError::InvalidArguments(
            "invalid arguments for tool \"strict\": \"n\" (an integer) is required".into()
        ))
    );
    assert_eq!(
        hooks.take(),
        [
            "start echo 1 [1]",
            r#"end echo rejected invalid arguments for tool "echo": "arguments" must be an object, got [1] 0"#,
            r#"start echo 2 {"text":5}"#,
            "end echo invalid_arguments invalid arguments for tool \"echo\": invalid type: integer `5`, expected a string at line 1 column 9 0",
            "start strict 3 {}",
            r#"end strict invalid_arguments invalid arguments for tool "strict": "n" (an integer) is required 0"#,
        ]
    );
}

#[test]
fn a_failure_or_a_panic_is_an_is_error_result_and_calls_go_on() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    assert_eq!(
        call(&server, 1, "fail", json!({})),
        Ok(ToolResult::error("the disk is on fire"))
    );
    assert_eq!(
        call(&server, 2, "boom", json!({})),
        Ok(ToolResult::error(
            "tool \"boom\" failed unexpectedly (it panicked: kaboom)"
        ))
    );
    assert_eq!(
        call(&server, 3, "echo", json!({"text": "still here"})),
        Ok(ToolResult::text("still here"))
    );
    assert_eq!(
        hooks.take(),
        [
            "start fail 1 {}",
            "end fail tool_error the disk is on fire 1",
            "start boom 2 {}",
            r#"end boom panicked tool "boom" failed unexpectedly (it panicked: kaboom) 1"#,
            r#"start echo 3 {"text":"still here"}"#,
            "end echo ok - 1",
        ]
    );
}

#[test]
fn a_typed_handler_gets_its_decoded_arguments() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    let result = call(&server, 1, "echo", json!({"text": "a \"quoted\"\nline"})).unwrap();
    assert_eq!(result.first_text(), Some("a \"quoted\"\nline"));
    assert!(!result.is_error);
    // Arguments may be left out, as on the wire: a handler that needs none gets `{}`.
    assert_eq!(
        call(&server, 2, "strict", Value::Null),
        Err(CallError::InvalidArguments(
            "invalid arguments for tool \"strict\": \"n\" (an integer) is required".into()
        ))
    );
    assert_eq!(hooks.take()[2], "start strict 2 {}");
}

#[test]
fn meta_and_cancellation_reach_the_handler_and_the_hooks() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let ctx = CallContext::new(RequestId::String("c1".into()), "context")
        .with_meta(json!({"traceparent": traceparent}));
    let seen: Value =
        serde_json::from_str(server.call(&ctx, &json!({})).unwrap().first_text().unwrap()).unwrap();
    assert_eq!(
        seen,
        json!({"id": "c1", "meta": {"traceparent": traceparent}, "cancelled": false, "version": "2024-11-05"})
    );

    let token = CancellationToken::new();
    let ctx = CallContext::new(RequestId::Number(2), "context")
        .with_meta(Value::Null)
        .with_cancellation(token.clone());
    token.cancel();
    let seen: Value =
        serde_json::from_str(server.call(&ctx, &json!({})).unwrap().first_text().unwrap()).unwrap();
    assert_eq!(seen["meta"], Value::Null);
    assert_eq!(seen["cancelled"], true);
    let events = hooks.take();
    assert_eq!(events[3], "end context cancelled - 1", "{events:?}");
}

#[test]
fn calls_from_many_threads_at_once_each_get_their_own_answer() {
    let hooks = Arc::new(Recorder::default());
    let server = server(hooks.clone());
    std::thread::scope(|s| {
        for t in 0..4 {
            let server = &server;
            s.spawn(move || {
                for i in 0..50 {
                    let text = format!("{t}/{i}");
                    let result = call(server, i, "echo", json!({"text": text})).unwrap();
                    assert_eq!(result.first_text(), Some(text.as_str()));
                }
            });
        }
    });
    let events = hooks.take();
    assert_eq!(events.len(), 4 * 50 * 2);
    assert_eq!(
        events.iter().filter(|e| *e == "end echo ok - 1").count(),
        200
    );
}
