//! The server process: shutdown, end of input, SIGTERM, concurrency and cancellation.

use serde_json::json;

use crate::checks::support::*;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::brief;

pub(super) fn shutdown(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let response = s.call("shutdown", None)?;
    if response.pointer("/error/code") == Some(&json!(-32601)) {
        return Ok(());
    }
    result_of(&response, "shutdown (or error -32601 when unsupported)")?;
    match s.wait_exit() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => fail!("expected exit status 0 after shutdown, got {status}"),
        Err(_) => fail!(
            "expected the server to exit on its own after answering shutdown, got still running at the deadline"
        ),
    }
}

pub(super) fn end_of_input(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    let mut ids = vec![s.request("ping", None)?, s.request("tools/list", None)?];
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
    if let Ok(params) = slow_call_params(ctx) {
        ids.push(s.request("tools/call", Some(params))?);
    }
    s.close_stdin();
    let (answers, closed) = s.drain_responses();
    for id in &ids {
        if !answers.iter().any(|a| a.get("id") == Some(id)) {
            fail!(
                "expected every request read before end of input to be answered, got no answer to id {id}"
            )
        }
    }
    closed?;
    match s.wait_exit()? {
        status if status.success() => Ok(()),
        status => fail!("expected exit status 0 at end of input, got {status}"),
    }
}

pub(super) fn sigterm_exit(ctx: &Ctx) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    let mut s = ctx.started()?;
    ping(&mut s, "before SIGTERM")?;
    s.terminate()?;
    let status = s.wait_exit().map_err(|_| {
        Verdict::Fail(
            "expected the server to exit on SIGTERM, got still running at the deadline".into(),
        )
    })?;
    if status.success() || status.signal() == Some(15) || status.code() == Some(143) {
        Ok(())
    } else {
        fail!("expected exit 0 or death by SIGTERM, got {status}")
    }
}

pub(super) fn ping_during_slow_call(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let slow_id = s.request("tools/call", Some(params))?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if let Some(slow) = answers.iter().find(|a| a.get("id") == Some(&slow_id)) {
        fail!(
            "expected the ping to be answered while the slow call runs, got the slow call's answer first: {}",
            brief(slow)
        )
    }
    Ok(())
}

pub(super) fn ping_when_saturated(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let mut slow = Vec::new();
    for _ in 0..SATURATING_CALLS {
        slow.push(s.request("tools/call", Some(params.clone()))?);
    }
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    // A call refused at once (an error naming a bound) is fine; a finished call before
    // the ping means the ping waited for a worker.
    if let Some(done) = answers
        .iter()
        .find(|a| a.get("result").is_some() && slow.iter().any(|id| a.get("id") == Some(id)))
    {
        fail!(
            "expected the ping to be answered while {SATURATING_CALLS} slow calls are in \
             flight, got a slow call's result first (the server stops reading when its \
             workers are busy): {}",
            brief(done)
        )
    }
    Ok(())
}

pub(super) fn cancellation(ctx: &Ctx) -> Outcome {
    let params = slow_call_params(ctx)?;
    let mut s = ctx.started()?;
    let cancelled = s.request("tools/call", Some(params.clone()))?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": cancelled, "reason": "conformance check"})),
    )?;
    // A second, identical call started after the first: if the first were still running it
    // would be answered before this one (or, on a serial server, certainly before).
    let marker = s.request("tools/call", Some(params))?;
    let mut answers = s.responses_until(&marker)?;
    // Then end of input, and whatever else comes before the server closes its stdout (a
    // server that stays up after end of input is `end-of-input`'s business, not ours).
    s.close_stdin();
    answers.extend(s.drain_responses().0);
    if let Some(answer) = answers.iter().find(|a| a.get("id") == Some(&cancelled)) {
        fail!(
            "expected no answer to the cancelled request {cancelled}, got {}",
            brief(answer)
        )
    }
    Ok(())
}

pub(super) fn cancel_unknown_request_ignored(ctx: &Ctx) -> Outcome {
    let mut s = ctx.started()?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": 999_999, "reason": "conformance check"})),
    )?;
    let ping_id = s.request("ping", None)?;
    let answers = s.responses_until(&ping_id)?;
    if answers.len() > 1 {
        fail!(
            "expected no answer to a cancellation of an unknown request, got {}",
            brief(&answers[0])
        )
    }
    Ok(())
}
