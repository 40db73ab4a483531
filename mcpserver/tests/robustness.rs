//! Any bytes in: the server never panics, writes only JSON-RPC lines, and keeps serving.
//! Cases: `PROPTEST_CASES` (CI runs the default; the fuzz target in `mcpserver/fuzz`
//! goes further).

use std::io::Cursor;

use mcpserver::{CallContext, Server, Tool, ToolResult};
use proptest::prelude::*;
use serde_json::{Value, json};

fn server() -> Server {
    Server::builder("fuzz", "1")
        .max_message_size(2048)
        .tool(
            Tool::new("echo", "Echo", json!({"type": "object"})),
            |a: Value, _: &CallContext| Ok::<_, String>(ToolResult::text(a.to_string())),
        )
        .tool_raw(
            Tool::new("boom", "Panics", json!({"type": "object"})),
            |_, _| -> Result<ToolResult, String> { panic!("boom") },
        )
        .build()
        .unwrap()
}

fn message() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        any::<i64>().prop_map(|i| json!(i)),
        "[a-z0-9]{0,8}".prop_map(|s| json!(s)),
        Just(Value::Null),
        any::<f64>().prop_map(|f| json!(f)),
        Just(json!([1])),
    ];
    let method = prop_oneof![
        Just("initialize"),
        Just("ping"),
        Just("tools/list"),
        Just("tools/call"),
        Just("notifications/initialized"),
        Just("notifications/cancelled"),
        Just("resources/list"),
        Just(""),
    ];
    let params = prop_oneof![
        Just(json!({})),
        Just(json!({"name": "echo", "arguments": {"x": 1}})),
        Just(json!({"name": "boom"})),
        Just(json!({"name": "echo", "arguments": 3})),
        Just(json!({"cursor": "zz"})),
        Just(json!({"requestId": 1})),
        Just(json!([1, 2])),
        Just(json!("text")),
    ];
    let structured =
        (id, method, params, any::<bool>()).prop_map(|(id, method, params, with_id)| {
            let mut m = json!({"jsonrpc": "2.0", "method": method, "params": params});
            if with_id {
                m["id"] = id;
            }
            serde_json::to_vec(&m).unwrap()
        });
    prop_oneof![
        4 => structured,
        2 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => "[\\[\\]{}\",:0-9a-z\\\\ ]{0,40}".prop_map(String::into_bytes),
        1 => proptest::collection::vec(Just(b'x'), 2040..2100),
    ]
}

proptest! {
    #[test]
    fn any_input_yields_only_json_rpc_lines_and_serving_goes_on(
        lines in proptest::collection::vec(message(), 0..40),
        crlf in any::<bool>(),
    ) {
        let mut input = Vec::new();
        for l in &lines {
            input.extend_from_slice(l);
            input.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        }
        let stops = String::from_utf8_lossy(&input).contains("shutdown");
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":\"final-ping\",\"method\":\"ping\"}\n");
        let mut out = Vec::new();
        let reason = server().serve(Cursor::new(input), &mut out);
        prop_assert!(reason.is_ok());
        let text = String::from_utf8(out).expect("output is UTF-8");
        let mut answered_final = false;
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("every output line is JSON");
            prop_assert_eq!(&v["jsonrpc"], "2.0");
            prop_assert!(v.get("result").is_some() != v.get("error").is_some(), "{}", line);
            answered_final |= v["id"] == "final-ping";
        }
        prop_assert!(text.is_empty() || text.ends_with('\n'));
        prop_assert!(answered_final || stops, "serving went on to the final ping");
    }
}
