//! `subscriptions/listen`: acknowledgement, tagging, cancellation, end of input.
//!
//! A subscription is a request that stays open: the server acknowledges it with
//! `notifications/subscriptions/acknowledged` (the first message tagged with the request's
//! id in `_meta` `io.modelcontextprotocol/subscriptionId`), sends the requested notifications
//! tagged the same way, and answers the request only when it ends the subscription itself.
//! We ask for `toolsListChanged` only. A server cannot be asked to change its tools, so the
//! tagging of a list change is judged only when one arrives while we listen.

use serde_json::{Value, json};

use super::expect_complete;
use crate::checks::support::result_of;
use crate::checks::{Ctx, Outcome, Verdict};
use crate::session::{META_SUBSCRIPTION_ID, ServerProcess, brief, is_notification, is_response};

const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// The notification types a `{toolsListChanged: true}` listen may deliver.
const REQUESTED: &[&str] = &["notifications/tools/list_changed"];

/// Opens a listen for tools-list changes; returns its id.
fn open_listen(s: &mut ServerProcess) -> Result<Value, Verdict> {
    Ok(s.request(
        "subscriptions/listen",
        Some(json!({"notifications": {"toolsListChanged": true}})),
    )?)
}

fn is_ack(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some(ACKNOWLEDGED)
}

/// The subscription a notification is tagged with.
fn tag_of(message: &Value) -> Option<&Value> {
    message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_SUBSCRIPTION_ID))
}

fn answers(message: &Value, id: &Value) -> bool {
    is_response(message) && message.get("id") == Some(id)
}

/// A server's `notifications/cancelled` of the subscription `id` (how it may end one).
fn cancels(message: &Value, id: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some("notifications/cancelled")
        && message.pointer("/params/requestId") == Some(id)
}

/// Whether `message` is about the subscription `id`: its answer, a notification tagged with
/// it, or the server's cancellation of it.
fn concerns(message: &Value, id: &Value) -> bool {
    answers(message, id) || tag_of(message) == Some(id) || cancels(message, id)
}

/// Opens a listen and reads until its acknowledgement (or an answer to it, which ends the
/// wait early); fails unless the acknowledgement came. Returns the listen's id and what
/// arrived, the acknowledgement last.
fn acknowledged_listen(s: &mut ServerProcess) -> Result<(Value, Vec<Value>), Verdict> {
    let id = open_listen(s)?;
    let seen = s.messages_until_match(
        &format!("{ACKNOWLEDGED} of subscriptions/listen {id}"),
        |m| is_ack(m) || answers(m, &id),
    )?;
    if let Some(answer) = seen.iter().find(|m| answers(m, &id)) {
        fail!(
            "expected subscriptions/listen to be acknowledged with {ACKNOWLEDGED} and stay open, got an answer: {}",
            brief(answer)
        )
    }
    Ok((id, seen))
}

pub(super) fn listen(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let id = open_listen(&mut s)?;
    // A later request's answer marks "not answered while open"; when the acknowledgement
    // has not come by then, we wait for it (or for an answer to the listen).
    let marker = s.request("tools/list", None)?;
    let mut seen = s.messages_until(&marker)?;
    if !seen.iter().any(|m| is_ack(m) || answers(m, &id)) {
        seen.extend(s.messages_until_match(
            &format!("{ACKNOWLEDGED} of subscriptions/listen {id}"),
            |m| is_ack(m) || answers(m, &id),
        )?);
    }
    if let Some(answer) = seen.iter().find(|m| answers(m, &id)) {
        fail!(
            "expected subscriptions/listen to stay open (acknowledged, not answered) until cancelled, got an answer: {}",
            brief(answer)
        )
    }
    let Some(position) = seen.iter().position(is_ack) else {
        fail!("expected {ACKNOWLEDGED} for subscriptions/listen {id}, got none")
    };
    let ack = &seen[position];
    if tag_of(ack) != Some(&id) {
        fail!(
            "expected the acknowledgement to carry _meta {META_SUBSCRIPTION_ID} {id} (the listen request's id, same type), got {}",
            brief(ack)
        )
    }
    if let Some(early) = seen[..position].iter().find(|m| tag_of(m) == Some(&id)) {
        fail!(
            "expected the acknowledgement to be the first message of subscription {id}, got this before it: {}",
            brief(early)
        )
    }
    let filter = ack.pointer("/params/notifications");
    let subset = filter.and_then(Value::as_object).is_some_and(|f| {
        f.iter()
            .all(|(key, value)| key == "toolsListChanged" && value.is_boolean())
    });
    if !subset {
        fail!(
            "expected params.notifications in the acknowledgement: the subset of {{\"toolsListChanged\": true}} the server honours, got {}",
            brief(ack)
        )
    }
    Ok(())
}

pub(super) fn listen_tagging(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let (id, mut seen) = acknowledged_listen(&mut s)?;
    let marker = s.request("tools/list", None)?;
    seen.extend(s.messages_until(&marker)?);
    let mut judged = 0;
    for message in seen.iter().filter(|m| is_notification(m)) {
        let method = message["method"].as_str().unwrap_or_default();
        // The acknowledgement is modern-listen's; progress and log messages belong to a
        // request, not to the stream; a server's cancellation ends the stream.
        let request_scoped = ["notifications/progress", "notifications/message"].contains(&method);
        if is_ack(message) || request_scoped || cancels(message, &id) {
            continue;
        }
        judged += 1;
        if !REQUESTED.contains(&method) {
            fail!(
                "expected only the notification types subscribed to ({}), got {}",
                REQUESTED.join(", "),
                brief(message)
            )
        }
        if tag_of(message) != Some(&id) {
            fail!(
                "expected every notification on the stream to carry _meta {META_SUBSCRIPTION_ID} {id}, got {}",
                brief(message)
            )
        }
    }
    if judged == 0 {
        ctx.note(
            "no notification arrived while the listen was open (a server whose tools do not change has none to send): only the acknowledgement was seen",
        );
    }
    Ok(())
}

pub(super) fn listen_cancelled(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let (id, _) = acknowledged_listen(&mut s)?;
    s.notify(
        "notifications/cancelled",
        Some(json!({"requestId": id, "reason": "conformance check"})),
    )?;
    let marker = s.request("tools/list", None)?;
    let mut after = s.messages_until(&marker)?;
    // Then end of input, and whatever comes before the server closes its stdout (a server
    // that stays up is modern-listen-end-of-input's business, not ours).
    s.close_stdin();
    after.extend(s.drain_messages().0);
    if let Some(stray) = after.iter().find(|m| concerns(m, &id)) {
        fail!(
            "expected nothing more about subscription {id} after the client cancelled it (stdio: no further messages for a cancelled request), got {}",
            brief(stray)
        )
    }
    Ok(())
}

pub(super) fn listen_end_of_input(ctx: &Ctx) -> Outcome {
    let mut s = ctx.modern()?;
    let (id, _) = acknowledged_listen(&mut s)?;
    // Whatever the server had to say before end of input comes before this answer.
    let marker = s.request("tools/list", None)?;
    s.messages_until(&marker)?;
    s.close_stdin();
    let (after, closed) = s.drain_messages();
    closed.map_err(|e| {
        Verdict::Fail(format!(
            "expected the server to end at end of input with a subscription open, but: {e}"
        ))
    })?;
    let mut ending = "silently";
    for message in &after {
        if answers(message, &id) {
            let closing = "a result closing the subscription";
            let result = result_of(message, closing)?;
            expect_complete(result, closing)?;
            if result
                .get("_meta")
                .and_then(|m| m.get(META_SUBSCRIPTION_ID))
                != Some(&id)
            {
                fail!(
                    "expected the result closing subscription {id} to carry _meta {META_SUBSCRIPTION_ID} {id}, got {}",
                    brief(message)
                )
            }
            ending = "with a result closing it";
        } else if cancels(message, &id) {
            ending = "with notifications/cancelled of it";
        } else {
            fail!(
                "expected nothing at end of input but the end of subscription {id} (a result closing it, or notifications/cancelled), got {}",
                brief(message)
            )
        }
    }
    match s.wait_exit()? {
        status if status.success() => {
            ctx.note(format!("the server ended the open subscription {ending}"));
            Ok(())
        }
        status => fail!("expected exit status 0 at end of input, got {status}"),
    }
}
