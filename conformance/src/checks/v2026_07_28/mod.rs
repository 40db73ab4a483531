//! The 2026-07-28 checks: the stateless revision.
//!
//! There is no handshake: every request carries `_meta` with
//! `io.modelcontextprotocol/protocolVersion` = "2026-07-28", empty
//! `io.modelcontextprotocol/clientCapabilities` and our `clientInfo`, and the server answers
//! each on its own. Every result says `resultType`; list and discovery results carry the
//! caching hints `ttlMs` and `cacheScope`; `ping` is gone, so where a 2024-11-05 check
//! marks "nothing arrived before this" with a ping, these use a `tools/list`.
//!
//! - `stateless`, `server/discover`, tools, and the errors of the revision;
//! - `process`, cancellation, concurrency and end of input of 2026-07-28 requests;
//! - `subscriptions`, for `subscriptions/listen`;
//! - `dual_era`, one server process serving a legacy (`initialize`) client and a modern one.

mod dual_era;
mod process;
mod stateless;
mod subscriptions;

use serde_json::{Value, json};

use super::support::result_of;
use super::{Check, Revision, Verdict};
use crate::session::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, META_SERVER_INFO,
    MODERN_VERSION, ServerProcess, SessionError, brief,
};

use dual_era::*;
use process::*;
use stateless::*;
use subscriptions::*;

const R: Revision = Revision::V2026_07_28;

/// Every 2026-07-28 check, in the order they are reported.
pub(super) const CHECKS: &[Check] = &[
    Check {
        name: "modern-discover",
        revision: R,
        about: "server/discover (with no handshake) gets resultType complete, supportedVersions with 2026-07-28, capabilities.tools, ttlMs (an integer >= 0) and cacheScope (public|private)",
        run: discover,
    },
    Check {
        name: "modern-tools-list",
        revision: R,
        about: "tools/list without initialize: every page has resultType complete, ttlMs >= 0, the same cacheScope, and well-formed tools (title, annotations, outputSchema, icons included), each once",
        run: tools_list,
    },
    Check {
        name: "modern-tools-list-deterministic",
        revision: R,
        about: "two tools/list give the tools in the same order (SHOULD: it lets clients cache the list and models reuse their prompt cache)",
        run: tools_list_deterministic,
    },
    Check {
        name: "modern-tools-call",
        revision: R,
        about: "tools/call without initialize: the echo tool returns its text in a well-formed result with resultType complete",
        run: tools_call,
    },
    Check {
        name: "modern-structured-content",
        revision: R,
        about: "a tool with an outputSchema (the echo tool, or --structured-tool) returns structuredContent that fits it (any JSON value)",
        run: structured_content,
    },
    Check {
        name: "modern-tools-call-unknown-tool",
        revision: R,
        about: "calling an unknown tool gets JSON-RPC error -32602 (a protocol error, not isError)",
        run: tools_call_unknown_tool,
    },
    Check {
        name: "modern-tools-call-bad-arguments",
        revision: R,
        about: "arguments that do not fit the schema give a result with isError: true (an input validation error is a tool execution error)",
        run: tools_call_bad_arguments,
    },
    Check {
        name: "modern-unsupported-version",
        revision: R,
        about: "a request naming protocolVersion 1900-01-01 gets error -32022 with data.supported (listing 2026-07-28) and data.requested",
        run: unsupported_version,
    },
    Check {
        name: "modern-missing-client-capabilities",
        revision: R,
        about: "a request whose _meta lacks io.modelcontextprotocol/clientCapabilities gets error -32602 (a required field)",
        run: missing_client_capabilities,
    },
    Check {
        name: "modern-ping-removed",
        revision: R,
        about: "ping with 2026-07-28 _meta gets an error, not a result (2026-07-28 removed ping; -32601 expected, any error accepted)",
        run: ping_removed,
    },
    Check {
        name: "modern-reserved-error-codes",
        revision: R,
        about: "errors to 2026-07-28 requests use only the codes the spec defines in -32020..-32099 (-32021, -32022 for its meaning), never -32002 or -32042",
        run: reserved_error_codes,
    },
    Check {
        name: "modern-server-info",
        revision: R,
        about: "server/discover, tools/list and tools/call results name the server in _meta io.modelcontextprotocol/serverInfo {name, version} (SHOULD)",
        run: server_info,
    },
    Check {
        name: "modern-listen",
        revision: R,
        about: "subscriptions/listen {toolsListChanged} is acknowledged first (notifications/subscriptions/acknowledged tagged with the request's id, a subset of the filter) and not answered while open",
        run: listen,
    },
    Check {
        name: "modern-listen-tagging",
        revision: R,
        about: "notifications that arrive while a listen is open are of a requested type and tagged with its subscriptionId (noted when the server sends none)",
        run: listen_tagging,
    },
    Check {
        name: "modern-listen-cancelled",
        revision: R,
        about: "after notifications/cancelled of a listen, nothing more about it arrives (no answer, no tagged notification), then or at end of input",
        run: listen_cancelled,
    },
    Check {
        name: "modern-listen-end-of-input",
        revision: R,
        about: "at end of input with a listen open the server ends (exit 0), sending at most a result closing the subscription or notifications/cancelled of it",
        run: listen_end_of_input,
    },
    Check {
        name: "modern-cancellation",
        revision: R,
        about: "a 2026-07-28 call cancelled with notifications/cancelled is never answered (needs --slow-tool)",
        run: cancellation,
    },
    Check {
        name: "modern-list-during-slow-call",
        revision: R,
        about: "tools/list is answered while a slow 2026-07-28 call runs (needs --slow-tool)",
        run: list_during_slow_call,
    },
    Check {
        name: "modern-list-when-saturated",
        revision: R,
        about: "tools/list is answered while more slow calls are in flight than a server runs at once (needs --slow-tool)",
        run: list_when_saturated,
    },
    Check {
        name: "modern-end-of-input",
        revision: R,
        about: "at end of input every 2026-07-28 request read is answered, including a call still running, then the server exits 0",
        run: end_of_input,
    },
    Check {
        name: "modern-dual-era-after-initialize",
        revision: R,
        about: "a 2026-07-28 tools/list after a legacy initialize (answered or refused) is served as 2026-07-28: resultType, ttlMs, cacheScope",
        run: dual_era_after_initialize,
    },
    Check {
        name: "modern-dual-era-legacy-client",
        revision: R,
        about: "after a 2026-07-28 request, a legacy client (initialize 2024-11-05, tools/list, tools/call, no _meta) is served legacy results, no interim resultType (dual-era; 2026-07-28 fields in them are noted), or initialize gets an error naming the supported versions (modern-only, SHOULD)",
        run: dual_era_legacy_client,
    },
];

/// The result of a 2026-07-28 response, which must say `resultType: "complete"`.
fn complete_result<'v>(response: &'v Value, what: &str) -> Result<&'v Value, Verdict> {
    let result = result_of(response, what)?;
    expect_complete(result, what)?;
    Ok(result)
}

/// Fails unless `result` says `resultType: "complete"`.
fn expect_complete(result: &Value, what: &str) -> Result<(), Verdict> {
    match result.get("resultType") {
        Some(t) if t == "complete" => Ok(()),
        other => fail!(
            "expected resultType \"complete\" in the result of {what} (every 2026-07-28 result says it), got {}: {}",
            other.map_or("none".to_string(), Value::to_string),
            brief(result)
        ),
    }
}

/// What is wrong with the caching hints of a cacheable result: `ttlMs` must be an integer
/// >= 0 and `cacheScope` "public" or "private" (both required in 2026-07-28).
fn cache_hint_problem(result: &Value, what: &str) -> Option<String> {
    let ttl = result.get("ttlMs");
    if !ttl.is_some_and(|t| t.is_u64()) {
        return Some(format!(
            "expected ttlMs, an integer >= 0 (milliseconds), in the result of {what}, got {}",
            ttl.map_or("none".to_string(), Value::to_string)
        ));
    }
    match result.get("cacheScope").and_then(Value::as_str) {
        Some("public") | Some("private") => None,
        _ => Some(format!(
            "expected cacheScope \"public\" or \"private\" in the result of {what}, got {}",
            result
                .get("cacheScope")
                .map_or("none".to_string(), Value::to_string)
        )),
    }
}

/// `_meta["io.modelcontextprotocol/serverInfo"]` of a result, when it is present.
fn server_info_of(result: &Value) -> Option<&Value> {
    result.get("_meta").and_then(|m| m.get(META_SERVER_INFO))
}

/// Whether `info` is an Implementation: string name and version.
fn implementation_ok(info: &Value) -> bool {
    info.get("name").is_some_and(Value::is_string)
        && info.get("version").is_some_and(Value::is_string)
}

/// Sends `method` with exactly `meta` as `params._meta` (not the session's usual keys), for
/// the checks of malformed or unsupported requests; returns the request's id.
fn request_with_meta(
    s: &mut ServerProcess,
    method: &str,
    mut params: Value,
    meta: Value,
) -> Result<Value, SessionError> {
    let id = json!(s.fresh_id());
    params["_meta"] = meta;
    s.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
    Ok(id)
}

/// `_meta` naming another protocol version, with the other keys as usual.
fn meta_with_version(version: &str) -> Value {
    json!({
        META_PROTOCOL_VERSION: version,
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "mcp-conformance", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// `_meta` without the required clientCapabilities.
fn meta_without_capabilities() -> Value {
    json!({
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_INFO: {"name": "mcp-conformance", "version": env!("CARGO_PKG_VERSION")},
    })
}
