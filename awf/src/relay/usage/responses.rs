//! What an OpenAI Responses response (streamed or whole) says about its turn.

use super::{Usage, count, keep, keep_text, note_finish, text};
use serde_json::Value;

pub(super) fn apply(usage: &mut Usage, kind: Option<&str>, v: &Value) {
    match kind {
        // Lifecycle events carry the response object; deltas and output items
        // do not, and are skipped by the `get`.
        Some(t) if t.starts_with("response.") => {
            if let Some(response) = v.get("response") {
                response_object(usage, response);
            }
        }
        // A non-streamed body is the response object itself.
        None => response_object(usage, v),
        _ => {}
    }
}

fn response_object(usage: &mut Usage, r: &Value) {
    keep_text(&mut usage.response_id, text(r, "/id"));
    keep_text(&mut usage.response_model, text(r, "/model"));
    keep(&mut usage.input_tokens, count(r, "/usage/input_tokens"));
    keep(&mut usage.output_tokens, count(r, "/usage/output_tokens"));
    keep(
        &mut usage.cache_read_tokens,
        count(r, "/usage/input_tokens_details/cached_tokens"),
    );
    // `queued` / `in_progress` are not outcomes.
    let status = text(r, "/status")
        .filter(|s| matches!(*s, "completed" | "incomplete" | "failed" | "cancelled"));
    if status.is_some() {
        // The specific reason (e.g. `max_output_tokens`) says more than `incomplete`.
        note_finish(usage, text(r, "/incomplete_details/reason").or(status));
    }
}
