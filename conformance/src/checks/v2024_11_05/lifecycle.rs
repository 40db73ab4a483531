//! 2024-11-05 lifecycle: initialize, version negotiation, ping, requests before initialize.

use serde_json::{Value, json};

use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::{PROTOCOL_VERSION, brief};

pub(super) fn initialize_2024(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    let result = result_of(&response, "initialize")?;
    if result.get("protocolVersion") != Some(&json!(PROTOCOL_VERSION)) {
        fail!(
            "expected protocolVersion \"{PROTOCOL_VERSION}\" (the version asked for), got {}",
            brief(result)
        )
    }
    Ok(())
}

pub(super) fn initialize_result_shape(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    let result = result_of(&response, "initialize")?;
    if !result.get("capabilities").is_some_and(Value::is_object) {
        fail!("expected a capabilities object, got {}", brief(result))
    }
    if !result
        .pointer("/capabilities/tools")
        .is_some_and(Value::is_object)
    {
        fail!(
            "expected capabilities.tools to be an object (the server offers tools), got {}",
            brief(&result["capabilities"])
        )
    }
    let info = result.get("serverInfo");
    let name_ok = info
        .and_then(|i| i.get("name"))
        .is_some_and(Value::is_string);
    let version_ok = info
        .and_then(|i| i.get("version"))
        .is_some_and(Value::is_string);
    if !name_ok || !version_ok {
        fail!(
            "expected serverInfo with string name and version, got {}",
            info.map_or("nothing".into(), brief)
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

pub(super) fn initialize_newer(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize("2025-06-18")?;
    let result = result_of(&response, "initialize asking for 2025-06-18")?;
    let version = result.get("protocolVersion").unwrap_or(&Value::Null);
    if !is_date_version(version) {
        fail!(
            "expected protocolVersion to be a YYYY-MM-DD version the server supports, got {version}"
        )
    }
    Ok(())
}

pub(super) fn initialize_unknown(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let asked = "1999-01-01";
    let response = s.initialize(asked)?;
    let result = result_of(
        &response,
        &format!("initialize asking for {asked} (the server must answer a version it supports)"),
    )?;
    let version = result.get("protocolVersion").unwrap_or(&Value::Null);
    if version == asked || !is_date_version(version) {
        fail!(
            "expected protocolVersion to name a version the server supports (not {asked}), got {version}"
        )
    }
    Ok(())
}

pub(super) fn initialize_extra_fields(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call(
        "initialize",
        Some(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {
                "roots": {"listChanged": true},
                "sampling": {},
                "elicitation": {},
                "experimental": {"conformance": {}},
                "conformance-unknown-capability": {"x": 1},
            },
            "clientInfo": {"name": "mcp-conformance", "title": "MCP conformance", "version": "1.0.0"},
            "_meta": {"conformance": true},
            "conformanceUnknownField": 42,
        })),
    )?;
    let result = result_of(
        &response,
        "initialize with fields the server does not know (ignore them)",
    )?;
    if !is_date_version(result.get("protocolVersion").unwrap_or(&Value::Null)) {
        fail!(
            "expected a protocolVersion in the initialize result, got {}",
            brief(result)
        )
    }
    Ok(())
}

pub(super) fn initialized_no_answer(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    result_of(&response, "initialize")?;
    s.notify("notifications/initialized", None)?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to notifications/initialized, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}

pub(super) fn ping_before_initialize(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call("ping", None)?;
    expect_empty_result(&response, "ping before initialize")
}

pub(super) fn ping_after_initialize(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("ping", None)?;
    expect_empty_result(&response, "ping after initialize")
}

pub(super) fn pre_init_request_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let response = s.call("tools/list", None)?;
    error_of(&response, None, "tools/list before initialize")?;
    Ok(())
}

pub(super) fn pre_init_unknown_method_answered(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    s.call("server/discover", None).map_err(|e| {
        Verdict::Fail(format!("expected an answer to server/discover before initialize (newer clients wait for it), but: {e}"))
    })?;
    Ok(())
}

pub(super) fn second_initialize_rejected(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.initialize(PROTOCOL_VERSION)?;
    error_of(&response, None, "a second initialize")?;
    Ok(())
}
