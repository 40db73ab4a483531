//! JSON-RPC 2.0 framing as MCP uses it: parse errors, invalid requests, ids, line endings, stdout.

use serde_json::{Value, json};

use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::{ServerProcess, brief};

pub(super) fn unknown_method(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("conformance/no-such-method", None)?;
    error_of(&response, Some(-32601), "an unknown method")?;
    Ok(())
}

pub(super) fn unknown_notification(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.notify("notifications/conformance_unknown", Some(json!({})))?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to an unknown notification, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}

const MALFORMED: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 77, \"method\": \"ping\"\n";

pub(super) fn parse_error_null_id(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    // Whether serving goes on is the next check's business: judge what came, either way.
    let (answers, _) = collect_answers(&mut s, MALFORMED)?;
    single_error(&answers, -32700, None, "malformed JSON")
}

pub(super) fn parse_error_keeps_serving(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.send_raw(MALFORMED.to_vec())?;
    ping(&mut s, "after malformed JSON")
}

pub(super) fn invalid_utf8(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line =
        b"{\"jsonrpc\":\"2.0\",\"id\":78,\"method\":\"ping\",\"params\":{\"x\":\"\xff\xfe\"}}\n";
    expect_single_error(&mut s, line, -32700, None, "a line that is not UTF-8")
}

pub(super) fn batch_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"[{\"jsonrpc\":\"2.0\",\"id\":79,\"method\":\"ping\"}]\n";
    expect_single_error(&mut s, line, -32600, None, "a batch array")
}

pub(super) fn null_id_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n";
    expect_single_error(&mut s, line, -32600, None, "id null")
}

pub(super) fn fractional_id_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}\n";
    expect_single_error(&mut s, line, -32600, Some(&json!(1.5)), "id 1.5")
}

pub(super) fn wrong_jsonrpc_version(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"1.0\",\"id\":80,\"method\":\"ping\"}\n";
    expect_single_error(
        &mut s,
        line,
        -32600,
        Some(&json!(80)),
        "\"jsonrpc\": \"1.0\"",
    )
}

pub(super) fn non_object_message(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_single_error(&mut s, b"42\n", -32600, None, "the JSON value 42")
}

pub(super) fn method_not_string(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let line = b"{\"jsonrpc\":\"2.0\",\"id\":81,\"method\":5}\n";
    expect_single_error(
        &mut s,
        line,
        -32600,
        Some(&json!(81)),
        "a method that is a number",
    )
}

/// Sends pings with the given ids, then a marker ping; returns the ids of the answers that
/// came before the marker's.
fn ids_answered(s: &mut ServerProcess, ids: &[Value]) -> Result<Vec<Value>, Verdict> {
    for id in ids {
        s.request_with_id(id.clone(), "ping", None)?;
    }
    let marker = json!("conformance-marker");
    s.request_with_id(marker.clone(), "ping", None)?;
    let answers = s.responses_until(&marker)?;
    Ok(answers[..answers.len() - 1]
        .iter()
        .map(|a| a.get("id").cloned().unwrap_or(Value::Null))
        .collect())
}

fn expect_ids_echoed(s: &mut ServerProcess, ids: &[Value]) -> Outcome {
    let got = ids_answered(s, ids)?;
    for id in ids {
        if !got.contains(id) {
            fail!(
                "expected an answer with id {id} (same type and value), got ids {}",
                brief(&Value::Array(got.clone()))
            )
        }
    }
    Ok(())
}

pub(super) fn string_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!("conformance-id-é"), json!("7")])
}

pub(super) fn integer_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!(4242), json!(0)])
}

pub(super) fn large_integer_id_echoed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    expect_ids_echoed(&mut s, &[json!(9_007_199_254_740_993_i64), json!(-1)])
}

pub(super) fn crlf_accepted(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let id = json!(s.fresh_id());
    s.send_raw(format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\r\n"
    ))?;
    let response = s.wait_response(&id)?;
    result_of(&response, "a ping ending in \\r\\n")?;
    Ok(())
}

pub(super) fn over_long_line(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let size = ctx.config.max_line_bytes + 1024 * 1024;
    let id = json!(s.fresh_id());
    let head =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"params\":{{\"pad\":\"");
    let tail = "\"}}\n";
    // The padding made whole at once (a fill of bytes is one memset even in a debug build,
    // where growing the line byte by byte took most of a run's time).
    let mut line = vec![b'a'; size];
    line[..head.len()].copy_from_slice(head.as_bytes());
    line[size - tail.len()..].copy_from_slice(tail.as_bytes());
    let what = format!(
        "a {size}-byte line (limit {} bytes, --max-line-bytes)",
        ctx.config.max_line_bytes
    );
    let answers = answers_before_ping(&mut s, &line, &what)?;
    let [answer] = answers.as_slice() else {
        fail!(
            "expected one error answer for {what}, got {} answers",
            answers.len()
        )
    };
    error_of(answer, None, &what)?;
    let answer_id = answer.get("id").unwrap_or(&Value::Null);
    if !answer_id.is_null() && answer_id != &id {
        fail!(
            "expected id null or {id} in the error for {what}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

pub(super) fn stdout_only_jsonrpc(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.call("tools/list", None)?;
    if let Ok(plan) = echo_plan(ctx, &mut s) {
        call_tool(&mut s, &plan.name, &plan.args)?;
    }
    s.call("conformance/no-such-method", None)?;
    s.call("ping", None)?;
    for (n, line) in s.stdout_lines().iter().enumerate() {
        let text = String::from_utf8_lossy(&line.raw);
        let problem = match &line.value {
            None => Some("not JSON"),
            Some(v) => envelope_problem(v),
        };
        if let Some(problem) = problem {
            fail!(
                "expected only JSON-RPC 2.0 messages on stdout, got line {} ({problem}): {}",
                n + 1,
                crate::session::shorten(&text, 200)
            )
        }
    }
    Ok(())
}

/// What is wrong with a message as a JSON-RPC 2.0 request, notification or response.
fn envelope_problem(message: &Value) -> Option<&'static str> {
    let Some(object) = message.as_object() else {
        return Some("not a JSON object");
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Some("jsonrpc is not \"2.0\"");
    }
    if let Some(method) = object.get("method") {
        return (!method.is_string()).then_some("method is not a string");
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) => None,
        (None, Some(error)) => {
            let code_ok = error.get("code").is_some_and(|c| c.is_i64());
            let message_ok = error.get("message").is_some_and(Value::is_string);
            (!(code_ok && message_ok)).then_some("error lacks an integer code or a string message")
        }
        _ => Some("a response needs exactly one of result and error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_rules() {
        assert_eq!(
            envelope_problem(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            None
        );
        assert!(envelope_problem(&json!({"jsonrpc": "2.0", "id": 1})).is_some());
        assert!(
            envelope_problem(
                &json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1.5, "message": "x"}})
            )
            .is_some()
        );
        assert!(envelope_problem(&json!([1])).is_some());
    }
}
