//! 2024-11-05 tools: tools/list (shape, names, pagination) and tools/call (results and errors).

use serde_json::{Value, json};

use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::brief;

pub(super) fn tools_list_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("tools/list", None)?;
    let result = result_of(&response, "tools/list")?;
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        fail!("expected a tools array, got {}", brief(result))
    };
    for tool in tools {
        if !tool.get("name").is_some_and(Value::is_string) {
            fail!(
                "expected every tool to have a string name, got {}",
                brief(tool)
            )
        }
        if tool.pointer("/inputSchema/type") != Some(&json!("object")) {
            fail!(
                "expected inputSchema to be an object schema ({{\"type\": \"object\", …}}), got {}",
                brief(tool)
            )
        }
        if tool.get("description").is_some_and(|d| !d.is_string()) {
            fail!(
                "expected description to be a string when present, got {}",
                brief(tool)
            )
        }
    }
    if result.get("nextCursor").is_some_and(|c| !c.is_string()) {
        fail!(
            "expected nextCursor to be a string when present, got {}",
            brief(result)
        )
    }
    Ok(())
}

pub(super) fn tool_names_valid(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let tools = list_all_tools(&mut s)?;
    for tool in &tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        if !valid_tool_name(name) {
            fail!("expected tool names matching ^[a-zA-Z0-9_-]{{1,64}}$, got {name:?}")
        }
    }
    Ok(())
}

pub(super) fn tools_list_pagination(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let tools = list_all_tools(&mut s)?;
    let mut seen = std::collections::HashSet::new();
    for tool in &tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        if !seen.insert(name.to_string()) {
            fail!("expected each tool once over all pages, got {name:?} again")
        }
    }
    Ok(())
}

pub(super) fn tools_list_invalid_cursor(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call(
        "tools/list",
        Some(json!({"cursor": "conformance: not a cursor"})),
    )?;
    error_of(&response, Some(-32602), "tools/list with an invalid cursor")?;
    Ok(())
}

pub(super) fn tools_call_result_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let response = call_tool(&mut s, &plan.name, &plan.args)?;
    let result = result_of(&response, &format!("tools/call {}", plan.name))?;
    match call_result_problem(result) {
        Some(problem) => fail!("{problem}"),
        None => Ok(()),
    }
}

pub(super) fn tools_call_echo_text(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    expect_echo(&mut s, &plan)?;
    Ok(())
}

pub(super) fn tools_call_meta_accepted(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let meta = json!({"progressToken": "conformance-progress",
                      "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let response = s.call(
        "tools/call",
        Some(json!({"name": plan.name, "arguments": plan.args, "_meta": meta})),
    )?;
    let result = result_of(
        &response,
        &format!("tools/call {} with params._meta", plan.name),
    )?;
    if result.get("isError") == Some(&json!(true)) {
        fail!(
            "expected the call with params._meta to succeed as without it, got {}",
            brief(result)
        )
    }
    Ok(())
}

pub(super) fn tools_call_tool_error(ctx: &Ctx) -> Outcome {
    let Some(name) = &ctx.config.error_tool else {
        return Err(Verdict::Skip(
            "no failing tool; name one with --error-tool".into(),
        ));
    };
    let mut s = ctx.started()?;
    let response = call_tool(&mut s, name, &ctx.config.error_args)?;
    let result = result_of(
        &response,
        &format!("tools/call {name} (a tool failure is a result, not a protocol error)"),
    )?;
    if result.get("isError") != Some(&json!(true)) {
        fail!(
            "expected isError: true from the failing tool, got {}",
            brief(result)
        )
    }
    let has_text = result
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|i| {
                i.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| !t.is_empty())
            })
        });
    if !has_text {
        fail!(
            "expected a text saying why the tool failed, got {}",
            brief(result)
        )
    }
    Ok(())
}

pub(super) fn tools_call_unknown_tool(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = call_tool(&mut s, "conformance-no-such-tool", &json!({}))?;
    if response.get("result").is_some() {
        fail!(
            "expected JSON-RPC error -32602 for an unknown tool (a protocol error), got a result: {}",
            brief(&response)
        )
    }
    error_of(&response, Some(-32602), "an unknown tool")?;
    Ok(())
}

pub(super) fn tools_call_bad_arguments(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let plan = echo_plan(ctx, &mut s)?;
    let bad = bad_arguments(ctx, &plan)?;
    let response = call_tool(&mut s, &plan.name, &bad)?;
    if response.get("result").is_some() {
        fail!(
            "expected JSON-RPC error -32602 for arguments {bad} to `{}`, got a result: {}",
            plan.name,
            brief(&response)
        )
    }
    error_of(&response, Some(-32602), "bad arguments")?;
    Ok(())
}

pub(super) fn tools_call_missing_name(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("tools/call", Some(json!({"arguments": {}})))?;
    error_of(&response, Some(-32602), "tools/call without a name")?;
    Ok(())
}
