//! 2026-07-28 requests one by one: `server/discover`, tools, and the errors of the revision.

use serde_json::{Value, json};

use super::*;
use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Revision, Verdict};
use crate::session::{META_SERVER_INFO, MODERN_VERSION, brief};

pub(super) fn discover(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let response = s.call("server/discover", None)?;
    let result = complete_result(&response, "server/discover")?;
    let versions = result.get("supportedVersions").and_then(Value::as_array);
    let versions_ok = versions
        .is_some_and(|v| v.iter().all(Value::is_string) && v.iter().any(|v| v == MODERN_VERSION));
    if !versions_ok {
        fail!(
            "expected supportedVersions, an array of strings that lists {MODERN_VERSION}, got {}",
            brief(result)
        )
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
    if let Some(problem) = cache_hint_problem(result, "server/discover") {
        fail!("{problem}")
    }
    if result.get("instructions").is_some_and(|i| !i.is_string()) {
        fail!(
            "expected instructions to be a string when present, got {}",
            brief(result)
        )
    }
    // Its presence is a SHOULD, checked by modern-server-info; its shape when present, here.
    if let Some(info) = server_info_of(result)
        && !implementation_ok(info)
    {
        fail!(
            "expected _meta {META_SERVER_INFO} to be {{name, version}} (strings), got {}",
            brief(info)
        )
    }
    Ok(())
}

pub(super) fn tools_list(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let pages = list_pages(&mut s)?;
    let mut scope: Option<&Value> = None;
    let mut seen = std::collections::HashSet::new();
    for (n, page) in pages.iter().enumerate() {
        let what = format!("tools/list (page {})", n + 1);
        expect_complete(page, &what)?;
        if let Some(problem) = cache_hint_problem(page, &what) {
            fail!("{problem}")
        }
        let page_scope = &page["cacheScope"];
        if let Some(first) = scope
            && first != page_scope
        {
            fail!(
                "expected the same cacheScope on every page of one list (MUST), got {first} on page 1 and {page_scope} on page {}",
                n + 1
            )
        }
        scope = Some(page_scope);
        for tool in page["tools"].as_array().into_iter().flatten() {
            if let Some(problem) = tool_problem(tool, Revision::V2026_07_28) {
                fail!("{problem}")
            }
            let name = tool["name"].as_str().unwrap_or_default();
            if !seen.insert(name.to_string()) {
                fail!("expected each tool once over all pages, got {name:?} again")
            }
        }
    }
    Ok(())
}

pub(super) fn tools_list_deterministic(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let names = |tools: Vec<Value>| -> Vec<String> {
        tools
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let first = names(list_all_tools(&mut s)?);
    let second = names(list_all_tools(&mut s)?);
    if first != second {
        fail!(
            "expected two tools/list of an unchanged server to give the tools in the same order (SHOULD), got {first:?} then {second:?}"
        )
    }
    Ok(())
}

pub(super) fn tools_call(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let plan = echo_plan(ctx, &mut s)?;
    let result = expect_echo(&mut s, &plan)?;
    expect_complete(&result, &format!("tools/call {}", plan.name))?;
    match call_result_problem(&result) {
        Some(problem) => fail!("{problem}"),
        None => Ok(()),
    }
}

pub(super) fn structured_content(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    expect_structured(ctx, &mut s)?;
    Ok(())
}

pub(super) fn tools_call_unknown_tool(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
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
    let mut s = ctx.modern()?;
    let plan = echo_plan(ctx, &mut s)?;
    let bad = bad_arguments(ctx, &plan)?;
    let response = call_tool(&mut s, &plan.name, &bad)?;
    let what = format!(
        "arguments {bad} to `{}` (an input validation error is a tool execution error: a result with isError: true)",
        plan.name
    );
    let result = complete_result(&response, &what)?;
    if result.get("isError") != Some(&json!(true)) {
        fail!(
            "expected isError: true for arguments {bad} to `{}`, got {}",
            plan.name,
            brief(result)
        )
    }
    Ok(())
}

const UNSUPPORTED_VERSION: &str = "1900-01-01";

pub(super) fn unsupported_version(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let id = request_with_meta(
        &mut s,
        "tools/list",
        json!({}),
        meta_with_version(UNSUPPORTED_VERSION),
    )?;
    let response = s.wait_response(&id)?;
    let what = format!("a request naming protocolVersion {UNSUPPORTED_VERSION}");
    let error = error_of(&response, Some(-32022), &what)?;
    let data = error.get("data").unwrap_or(&Value::Null);
    let supported_ok = data
        .get("supported")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().all(Value::is_string) && v.iter().any(|v| v == MODERN_VERSION));
    if !supported_ok {
        fail!(
            "expected error.data.supported, an array of the versions the server supports (with {MODERN_VERSION}), for {what}, got {}",
            brief(&response)
        )
    }
    if data.get("requested") != Some(&json!(UNSUPPORTED_VERSION)) {
        fail!(
            "expected error.data.requested {UNSUPPORTED_VERSION:?} (the version asked for) for {what}, got {}",
            brief(&response)
        )
    }
    Ok(())
}

pub(super) fn missing_client_capabilities(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let id = request_with_meta(&mut s, "tools/list", json!({}), meta_without_capabilities())?;
    let response = s.wait_response(&id)?;
    error_of(
        &response,
        Some(-32602),
        "a request without io.modelcontextprotocol/clientCapabilities (a required _meta field)",
    )?;
    Ok(())
}

/// Decided here, since the revision only lists ping as removed: a removed method is an
/// unknown one, so JSON-RPC's -32601 is the expected answer; any error passes, because what
/// misleads a 2026-07-28 client is a success (a liveness probe the revision does not have),
/// and misused reserved codes are `modern-reserved-error-codes`' business.
pub(super) fn ping_removed(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let response = s.call("ping", None)?;
    if response.get("result").is_some() {
        fail!(
            "expected an error for ping with 2026-07-28 _meta (the revision removed ping; -32601), got a result: {}",
            brief(&response)
        )
    }
    error_of(&response, None, "ping with 2026-07-28 _meta")?;
    Ok(())
}

/// The codes a 2026-07-28 server may send in the range the spec reserves (-32020..-32099),
/// without -32020 (HeaderMismatch: HTTP headers, which stdio has none of).
const DEFINED_RESERVED: &[i64] = &[-32021, -32022];

pub(super) fn reserved_error_codes(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let version_probe = request_with_meta(
        &mut s,
        "tools/list",
        json!({}),
        meta_with_version(UNSUPPORTED_VERSION),
    )?;
    let mut probes = vec![(version_probe.clone(), "an unsupported protocolVersion")];
    let capabilities_probe =
        request_with_meta(&mut s, "tools/list", json!({}), meta_without_capabilities())?;
    probes.push((capabilities_probe, "a request without clientCapabilities"));
    let sent: [(&str, Value, &str); 5] = [
        ("conformance/no-such-method", json!({}), "an unknown method"),
        ("ping", json!({}), "ping"),
        (
            "tools/call",
            json!({"name": "conformance-no-such-tool", "arguments": {}}),
            "an unknown tool",
        ),
        (
            "tools/call",
            json!({"arguments": {}}),
            "tools/call without a name",
        ),
        (
            "tools/list",
            json!({"cursor": "conformance: not a cursor"}),
            "an invalid cursor",
        ),
    ];
    for (method, params, what) in sent {
        probes.push((s.request(method, Some(params))?, what));
    }
    for (id, what) in &probes {
        let response = s.wait_response(id)?;
        let Some(code) = response.pointer("/error/code").and_then(Value::as_i64) else {
            continue;
        };
        let reserved = (-32099..=-32020).contains(&code);
        let problem = if code == -32002 || code == -32042 {
            Some("a code of earlier revisions that 2026-07-28 servers MUST NOT send")
        } else if reserved && !DEFINED_RESERVED.contains(&code) {
            Some(
                "a code the MCP spec reserves but does not define (or, -32020, defines for HTTP headers)",
            )
        } else if code == -32022 && id != &version_probe {
            Some("UnsupportedProtocolVersion, for a request whose version is supported")
        } else if code == -32021
            && !response
                .pointer("/error/data/requiredCapabilities")
                .is_some_and(Value::is_object)
        {
            Some("MissingRequiredClientCapability without data.requiredCapabilities")
        } else {
            None
        };
        if let Some(problem) = problem {
            fail!(
                "expected only the error codes the spec defines, with their meanings, for {what}; got {code}, {problem}: {}",
                brief(&response)
            )
        }
    }
    Ok(())
}

/// A SHOULD made a check (a server may list it as a known deviation): the spec asks every
/// result to name the server, so that a stateless client can tell what answered.
pub(super) fn server_info(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let mut results = vec![(
        "server/discover".to_string(),
        s.call("server/discover", None)?,
    )];
    results.push(("tools/list".to_string(), s.call("tools/list", None)?));
    match echo_plan(ctx, &mut s) {
        Ok(plan) => results.push((
            format!("tools/call {}", plan.name),
            call_tool(&mut s, &plan.name, &plan.args)?,
        )),
        Err(Verdict::Skip(why)) => ctx.note(format!("tools/call not checked: {why}")),
        Err(fail) => return Err(fail),
    }
    for (what, response) in &results {
        let result = result_of(response, what)?;
        if !server_info_of(result).is_some_and(implementation_ok) {
            fail!(
                "expected _meta {META_SERVER_INFO} {{name, version}} in the result of {what} (SHOULD, on every result), got {}",
                brief(result)
            )
        }
    }
    Ok(())
}
