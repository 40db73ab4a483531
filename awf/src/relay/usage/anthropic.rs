//! What an Anthropic Messages response (streamed or whole) says about its turn.

use super::{Usage, count, keep, keep_text, note_finish, text};
use serde_json::Value;

pub(super) fn apply(usage: &mut Usage, kind: Option<&str>, v: &Value) {
    match kind {
        Some("message_start") => {
            if let Some(message) = v.get("message") {
                anthropic_message(usage, message);
            }
        }
        Some("message_delta") => {
            // Its counts are cumulative, so they simply overwrite.
            anthropic_counts(usage, v);
            note_finish(usage, text(v, "/delta/stop_reason"));
        }
        // A whole non-streamed message.
        Some("message") | None => anthropic_message(usage, v),
        _ => {}
    }
}

fn anthropic_message(usage: &mut Usage, m: &Value) {
    keep_text(&mut usage.response_id, text(m, "/id"));
    keep_text(&mut usage.response_model, text(m, "/model"));
    anthropic_counts(usage, m);
    note_finish(usage, text(m, "/stop_reason"));
}

fn anthropic_counts(usage: &mut Usage, v: &Value) {
    keep(&mut usage.input_tokens, count(v, "/usage/input_tokens"));
    keep(&mut usage.output_tokens, count(v, "/usage/output_tokens"));
    keep(
        &mut usage.cache_read_tokens,
        count(v, "/usage/cache_read_input_tokens"),
    );
    keep(
        &mut usage.cache_creation_tokens,
        count(v, "/usage/cache_creation_input_tokens"),
    );
}
