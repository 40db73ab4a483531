//! The handshake revisions after 2024-11-05: 2025-06-18 and 2025-11-25.
//!
//! Each check negotiates its revision with `initialize`. A server may answer another
//! version it supports (the specification lets it; the client decides): then
//! `…-initialize` passes with a note saying so, and the other checks of that revision are
//! SKIP, since the session does not speak it. The framing and process checks are not
//! repeated here: they are the 2024-11-05 ones.
//!
//! What these revisions change for a tools server: tools gain `title`, `annotations`,
//! `outputSchema` (with `structuredContent` in results that fits it) and, in 2025-11-25,
//! `icons` and `execution`; in 2025-11-25 arguments that fail validation are a tool
//! execution error (`isError: true`), no longer a JSON-RPC error.

use serde_json::{Value, json};

use super::support::*;
use super::{Check, Ctx, Outcome, Revision, Verdict};
use crate::session::{ServerProcess, brief};

/// Every check of 2025-06-18 and of 2025-11-25, in the order they are reported.
pub(super) const CHECKS: &[Check] = &[
    Check {
        name: "v2025-06-18-initialize",
        revision: Revision::V2025_06_18,
        about: "initialize asking for 2025-06-18 gets a result naming it (or, noted, another version the server supports), capabilities.tools and serverInfo {name, version, title?}",
        run: initialize,
    },
    Check {
        name: "v2025-06-18-tools-list-shape",
        revision: Revision::V2025_06_18,
        about: "in a 2025-06-18 session every tool is well formed, title, annotations and outputSchema (an object schema) included",
        run: tools_list_shape,
    },
    Check {
        name: "v2025-06-18-tools-call",
        revision: Revision::V2025_06_18,
        about: "in a 2025-06-18 session the echo tool returns its text in a well-formed result",
        run: tools_call,
    },
    Check {
        name: "v2025-06-18-structured-content",
        revision: Revision::V2025_06_18,
        about: "a tool with an outputSchema (the echo tool, or --structured-tool) returns structuredContent: an object that fits the schema",
        run: structured_content,
    },
    Check {
        name: "v2025-11-25-initialize",
        revision: Revision::V2025_11_25,
        about: "initialize asking for 2025-11-25 gets a result naming it (or, noted, another version the server supports), capabilities.tools and serverInfo {name, version, title?, description?, icons?}",
        run: initialize,
    },
    Check {
        name: "v2025-11-25-tools-list-shape",
        revision: Revision::V2025_11_25,
        about: "in a 2025-11-25 session every tool is well formed, title, annotations, outputSchema, icons and execution included",
        run: tools_list_shape,
    },
    Check {
        name: "v2025-11-25-tools-call",
        revision: Revision::V2025_11_25,
        about: "in a 2025-11-25 session the echo tool returns its text in a well-formed result",
        run: tools_call,
    },
    Check {
        name: "v2025-11-25-structured-content",
        revision: Revision::V2025_11_25,
        about: "a tool with an outputSchema (the echo tool, or --structured-tool) returns structuredContent: an object that fits the schema",
        run: structured_content,
    },
    Check {
        name: "v2025-11-25-tools-call-bad-arguments",
        revision: Revision::V2025_11_25,
        about: "arguments that do not fit the schema give a result with isError: true (since 2025-11-25 an input validation error is a tool execution error), not a JSON-RPC error",
        run: tools_call_bad_arguments,
    },
    Check {
        name: "v2025-11-25-tools-call-unknown-tool",
        revision: Revision::V2025_11_25,
        about: "calling an unknown tool is still JSON-RPC error -32602 (a protocol error, not isError)",
        run: tools_call_unknown_tool,
    },
];

/// A server after a handshake that negotiated the check's revision; SKIP when the server
/// answered another version (which it may).
fn negotiated(ctx: &Ctx) -> Result<ServerProcess, Verdict> {
    let version = ctx.revision.as_str();
    let mut s = ctx.spawn()?;
    let response = s.handshake_as(version)?;
    let answered = response
        .pointer("/result/protocolVersion")
        .unwrap_or(&Value::Null);
    if answered != version {
        return Err(Verdict::Skip(format!(
            "the server answered initialize {version} with protocolVersion {answered}, another version (which it may); the {version} checks do not apply"
        )));
    }
    Ok(s)
}

fn initialize(ctx: &Ctx) -> Outcome {
    let version = ctx.revision.as_str();
    let mut s = ctx.spawn()?;
    let response = s.initialize(version)?;
    let result = result_of(&response, &format!("initialize asking for {version}"))?;
    let answered = result.get("protocolVersion").unwrap_or(&Value::Null);
    if !is_date_version(answered) {
        fail!(
            "expected protocolVersion {version} (or another YYYY-MM-DD version the server supports), got {answered}"
        )
    }
    if answered != version {
        ctx.note(format!(
            "the server answered protocolVersion {answered}, another version it supports (allowed: the client decides); the other {version} checks are SKIP"
        ));
    }
    if !result
        .pointer("/capabilities/tools")
        .is_some_and(Value::is_object)
    {
        fail!(
            "expected capabilities.tools to be an object (the server offers tools), got {}",
            brief(result)
        )
    }
    let info = result.get("serverInfo").unwrap_or(&Value::Null);
    let string = |key: &str| info.get(key).is_some_and(Value::is_string);
    let optional_string = |key: &str| info.get(key).is_none_or(Value::is_string);
    let mut ok = string("name") && string("version") && optional_string("title");
    if ctx.revision >= Revision::V2025_11_25 {
        ok &= optional_string("description") && optional_string("websiteUrl");
        ok &= info.get("icons").is_none_or(icons_ok);
    }
    if !ok {
        fail!(
            "expected serverInfo with string name and version (and, when present, a string title{}), got {}",
            if ctx.revision >= Revision::V2025_11_25 {
                ", description, websiteUrl and well-formed icons"
            } else {
                ""
            },
            brief(info)
        )
    }
    if result.get("instructions").is_some_and(|i| !i.is_string()) {
        fail!(
            "expected instructions to be a string when present, got {}",
            brief(&result["instructions"])
        )
    }
    Ok(())
}

fn tools_list_shape(ctx: &Ctx) -> Outcome {
    let mut s = negotiated(ctx)?;
    for tool in list_all_tools(&mut s)? {
        if let Some(problem) = tool_problem(&tool, ctx.revision) {
            fail!("{problem}")
        }
    }
    Ok(())
}

fn tools_call(ctx: &Ctx) -> Outcome {
    let mut s = negotiated(ctx)?;
    let plan = echo_plan(ctx, &mut s)?;
    let result = expect_echo(&mut s, &plan)?;
    match call_result_problem(&result) {
        Some(problem) => fail!("{problem}"),
        None => Ok(()),
    }
}

fn structured_content(ctx: &Ctx) -> Outcome {
    let mut s = negotiated(ctx)?;
    expect_structured(ctx, &mut s)?;
    Ok(())
}

fn tools_call_bad_arguments(ctx: &Ctx) -> Outcome {
    let mut s = negotiated(ctx)?;
    let plan = echo_plan(ctx, &mut s)?;
    let bad = bad_arguments(ctx, &plan)?;
    let response = call_tool(&mut s, &plan.name, &bad)?;
    let result = result_of(
        &response,
        &format!(
            "arguments {bad} to `{}` (since 2025-11-25 input validation errors are tool execution errors: a result with isError: true)",
            plan.name
        ),
    )?;
    if result.get("isError") != Some(&json!(true)) {
        fail!(
            "expected isError: true for arguments {bad} to `{}`, got {}",
            plan.name,
            brief(result)
        )
    }
    Ok(())
}

fn tools_call_unknown_tool(ctx: &Ctx) -> Outcome {
    let mut s = negotiated(ctx)?;
    let response = call_tool(&mut s, "conformance-no-such-tool", &json!({}))?;
    if response.get("result").is_some() {
        fail!(
            "expected JSON-RPC error -32602 for an unknown tool (still a protocol error in {}), got a result: {}",
            ctx.revision,
            brief(&response)
        )
    }
    error_of(&response, Some(-32602), "an unknown tool")?;
    Ok(())
}
