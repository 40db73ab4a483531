//! 2026-07-28 requests over one process: cancellation, concurrency and end of input, as
//! the 2024-11-05 process checks, with a `tools/list` where those send a `ping`.

use serde_json::json;

use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::brief;

pub(super) fn cancellation(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.modern()?;
    let cancelled = s.request("tools/call", Some(params.clone()))?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": cancelled, "reason": "conformance check"})),
    )?;
    // As in 2024-11-05's `cancellation`: an identical call started after the first would
    // be answered after it, were the first still running.
    let marker = s.request("tools/call", Some(params))?;
    let mut answers = s.responses_until(&marker)?;
    s.close_stdin();
    answers.extend(s.drain_responses().0);
    if let Some(answer) = answers.iter().find(|a| a.get("id") == Some(&cancelled)) {
        fail!(
            "expected no answer to the cancelled request {cancelled} (stdio: the server MUST NOT send any further messages for it), got {}",
            brief(answer)
        )
    }
    Ok(())
}

pub(super) fn list_during_slow_call(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.modern()?;
    let slow_id = s.request("tools/call", Some(params))?;
    let list_id = s.request("tools/list", None)?;
    let answers = s.responses_until(&list_id)?;
    if let Some(slow) = answers.iter().find(|a| a.get("id") == Some(&slow_id)) {
        fail!(
            "expected tools/list to be answered while the slow call runs, got the slow call's answer first: {}",
            brief(slow)
        )
    }
    Ok(())
}

pub(super) fn list_when_saturated(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.modern()?;
    let mut slow = Vec::new();
    for _ in 0..SATURATING_CALLS {
        slow.push(s.request("tools/call", Some(params.clone()))?);
    }
    let list_id = s.request("tools/list", None)?;
    let answers = s.responses_until(&list_id)?;
    // As in `ping-when-saturated`: a call refused at once is fine, a finished one is not.
    if let Some(done) = answers
        .iter()
        .find(|a| a.get("result").is_some() && slow.iter().any(|id| a.get("id") == Some(id)))
    {
        fail!(
            "expected tools/list to be answered while {SATURATING_CALLS} slow calls are in \
             flight, got a slow call's result first (the server stops reading when its \
             workers are busy): {}",
            brief(done)
        )
    }
    Ok(())
}

pub(super) fn end_of_input(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let mut ids = vec![
        s.request("server/discover", None)?,
        s.request("tools/list", None)?,
    ];
    // Whether this call succeeds does not matter here, only that it is answered.
    let name = ctx
        .config
        .echo_tool
        .clone()
        .unwrap_or_else(|| "echo".into());
    let args = ctx
        .config
        .echo_args
        .clone()
        .unwrap_or(json!({"text": ECHO_TEXT}));
    ids.push(s.request("tools/call", Some(json!({"name": name, "arguments": args})))?);
    match slow_call_params(ctx) {
        Ok(params) => ids.push(s.request("tools/call", Some(params))?),
        Err(Verdict::Skip(_)) => {
            ctx.note("no call was still running at end of input: give --slow-tool")
        }
        Err(fail) => return Err(fail),
    }
    s.close_stdin();
    let (answers, closed) = s.drain_responses();
    if let Some(id) = ids
        .iter()
        .find(|id| !answers.iter().any(|a| a.get("id") == Some(id)))
    {
        let then = closed
            .err()
            .map(|e| format!("; then {e}"))
            .unwrap_or_default();
        fail!(
            "expected every request read before end of input to be answered, got no answer to id {id}{then}"
        )
    }
    closed?;
    match s.wait_exit()? {
        status if status.success() => Ok(()),
        status => fail!("expected exit status 0 at end of input, got {status}"),
    }
}
