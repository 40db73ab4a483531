//! One server process, both eras: a dual-era server serves each request by how it comes
//! (2026-07-28 `_meta`, or a legacy session opened by `initialize`); a modern-only server
//! refuses `initialize`, naming the versions it supports, since a legacy client has no
//! other way to learn why it cannot connect.

use serde_json::Value;

use super::{cache_hint_problem, complete_result};
use crate::checks::support::*;
use crate::checks::{Ctx, Outcome};
use crate::session::{MODERN_VERSION, PROTOCOL_VERSION, brief};

/// The fields 2026-07-28 adds to results, which a 2024-11-05 client does not read.
const MODERN_FIELDS: &[&str] = &["resultType", "ttlMs", "cacheScope"];

pub(super) fn dual_era_after_initialize(ctx: &Ctx) -> Outcome {
    let mut s = ctx.spawn()?;
    let init = s.initialize(PROTOCOL_VERSION)?;
    if init.get("result").is_some() {
        s.notify("notifications/initialized", None)?;
    } else {
        ctx.note("initialize was refused (a modern-only server)");
    }
    s.speak_modern();
    let what = "a 2026-07-28 tools/list after a legacy initialize";
    let response = s.call("tools/list", None)?;
    let result = complete_result(&response, what)?;
    if let Some(problem) = cache_hint_problem(result, what) {
        fail!("{problem}")
    }
    Ok(())
}

pub(super) fn dual_era_legacy_client(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    // The process has served a 2026-07-28 request; the legacy client that comes next must
    // not notice.
    let response = s.call("server/discover", None)?;
    complete_result(&response, "server/discover")?;
    s.speak_legacy();
    let init = s.initialize(PROTOCOL_VERSION)?;
    let Some(result) = init.get("result") else {
        let error = init.get("error").unwrap_or(&Value::Null);
        if !error.to_string().contains(MODERN_VERSION) {
            fail!(
                "expected a modern-only server's error to initialize to name the versions it supports (SHOULD: a legacy client can only show this message), got {}",
                brief(&init)
            )
        }
        ctx.note(format!(
            "a modern-only server: initialize refused, naming {MODERN_VERSION}"
        ));
        return Ok(());
    };
    let version = result.get("protocolVersion").unwrap_or(&Value::Null);
    if !is_date_version(version) || version == MODERN_VERSION {
        fail!(
            "expected initialize to negotiate a legacy version (2026-07-28 has no handshake), got protocolVersion {version}"
        )
    }
    s.notify("notifications/initialized", None)?;
    // Served as 2024-11-05 at all is the point here; the shapes of its tools and results
    // are the 2024-11-05 checks' business.
    let legacy = "in a 2024-11-05 session (no _meta: the legacy client sends none)";
    let list = s.call("tools/list", None)?;
    let list = result_of(&list, &format!("tools/list {legacy}"))?.clone();
    if !list.get("tools").is_some_and(Value::is_array) {
        fail!(
            "expected a tools array in the tools/list result {legacy}, got {}",
            brief(&list)
        )
    }
    let plan = echo_plan(ctx, &mut s)?;
    let call = call_tool(&mut s, &plan.name, &plan.args)?;
    let call = result_of(&call, &format!("tools/call {} {legacy}", plan.name))?.clone();
    for result in [&list, &call] {
        if result.get("resultType").is_some_and(|t| t != "complete") {
            fail!(
                "expected no 2026-07-28 interim result in a 2024-11-05 session (its client cannot answer one), got {}",
                brief(result)
            )
        }
    }
    let modern: Vec<&str> = MODERN_FIELDS
        .iter()
        .copied()
        .filter(|f| list.get(f).is_some() || call.get(f).is_some())
        .collect();
    if !modern.is_empty() {
        ctx.note(format!(
            "the 2024-11-05 results carry 2026-07-28 fields ({}), which a 2024-11-05 client ignores",
            modern.join(", ")
        ));
    }
    if version != PROTOCOL_VERSION {
        ctx.note(format!(
            "initialize {PROTOCOL_VERSION} was answered with {version}, another legacy version"
        ));
    }
    Ok(())
}
