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

/// A `tools/call` line in the shapes clients write, with noise: member order, spacing,
/// escapes, odd ids and arguments, and now and then a damaged byte.
fn call_line() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<bool>().prop_map(|b| json!(b)),
        Just(Value::Null),
        "\\PC{0,12}".prop_map(|s| json!(s)),
        "[a-z\"\\\\/\n\t\u{1}é]{0,8}".prop_map(|s| json!(s)),
    ];
    let value = leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z\"]{0,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let id = prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        "[a-z0-9\"\\\\]{0,6}".prop_map(|s| json!(s).to_string()),
        Just("1.0".to_owned()),
        Just("-0".to_owned()),
        Just("null".to_owned()),
    ];
    let name = prop_oneof![
        4 => Just("echo".to_owned()),
        1 => Just("ech\\u006f".to_owned()),
        1 => "[a-z_]{0,5}".prop_map(|s| s),
    ];
    let spacing = prop_oneof![Just(""), Just(" "), Just("\t "), Just("\r")];
    let noise = prop_oneof![
        Just(""),
        Just("x"),
        Just(","),
        Just("}"),
        Just("]"),
        Just("0"),
        Just("\""),
        Just("\\"),
        Just("\\u"),
        Just("\\uZZZZ"),
        Just("\\u0041"),
        Just("-"),
        Just("."),
        Just("e"),
        Just("01"),
        Just("{}"),
        Just("[1,]"),
        Just(":"),
        Just("tru"),
        Just("\u{7f}"),
        Just("1."),
        Just("1e"),
        Just("2E+"),
        Just("-x"),
    ];
    (
        (
            id,
            name,
            proptest::option::of(value.clone()),
            proptest::option::of(value),
        ),
        spacing,
        any::<proptest::sample::Index>(),
        any::<proptest::sample::Index>(),
        noise,
        0..6u8,
    )
        .prop_map(|((id, name, arguments, meta), sp, order, at, noise, how)| {
            let mut params = vec![format!("\"name\"{sp}:{sp}\"{name}\"")];
            if let Some(a) = arguments {
                params.push(format!("\"arguments\":{sp}{a}"));
            }
            if let Some(m) = meta {
                params.push(format!("{sp}\"_meta\":{m}"));
            }
            if how == 3 {
                params.push(params[order.index(params.len())].clone());
            }
            let mut members = vec![
                "\"jsonrpc\":\"2.0\"".to_owned(),
                format!("\"id\":{sp}{id}"),
                "\"method\":\"tools/call\"".to_owned(),
                format!("\"params\":{{{}}}", params.join(",")),
            ];
            // Now and then a member twice (a client bug the careful path refuses).
            if how == 4 {
                members.push(members[order.index(4)].clone());
            }
            members.rotate_left(order.index(4));
            let mut line = format!("{sp}{{{}}}{sp}", members.join(&format!(",{sp}")));
            // Noise: inserted at a random place, after a digit or where a value starts,
            // put in place of a byte, or appended.
            let mut i = at.index(line.len() + 1);
            while !line.is_char_boundary(i) {
                i -= 1;
            }
            let marks: Vec<usize> = if order.index(2) == 0 {
                line.match_indices(|c: char| c.is_ascii_digit())
                    .map(|(i, _)| i + 1)
                    .collect()
            } else {
                line.match_indices([':', '[']).map(|(i, _)| i + 1).collect()
            };
            match how {
                0 => line.insert_str(i, noise),
                2 if !marks.is_empty() => line.insert_str(marks[at.index(marks.len())], noise),
                1 if i < line.len() && line.is_char_boundary(i + 1) => {
                    line.replace_range(i..i + 1, noise)
                }
                5 => line.push_str(noise),
                _ => {}
            }
            line
        })
}

fn answers(line: &str) -> Vec<Value> {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
    let server = server();
    let mut session = server.dispatcher();
    let out = session.dispatch(init.as_bytes()) + &session.dispatch(line.as_bytes());
    // The wording of a parse error or an invalid request (a position, what serde_json
    // met first) depends on the whole line: compare their codes and ids only.
    let mut answers = Vec::new();
    for line in out.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if let Some(e) = v.get_mut("error")
            && matches!(e["code"].as_i64(), Some(-32700 | -32600))
        {
            e["message"] = Value::Null;
        }
        answers.push(v);
    }
    answers
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The hot path's scanner answers every line exactly as the careful path does: the
    /// same line with an extra member (which only the careful path reads) gets the same
    /// answer, errors included.
    #[test]
    fn the_fast_path_answers_as_the_careful_path(line in call_line()) {
        // The extra member goes first in the object (as the object's only member when it
        // is empty, so that it adds no error of its own).
        let careful = match line.find(|c: char| !c.is_ascii_whitespace()) {
            Some(i) if line[i..].starts_with('{') => {
                let rest = &line[i + 1..];
                let comma = if rest.trim_start().starts_with('}') { "" } else { "," };
                format!("{}\"x-careful\":0{comma}{rest}", &line[..=i])
            }
            _ => line.clone(),
        };
        prop_assert_eq!(answers(&line), answers(&careful), "line: {}", line);
    }
}
