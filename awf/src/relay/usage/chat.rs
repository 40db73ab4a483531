//! What a Chat Completions response (streamed or whole) says about its turn.

use super::{Usage, count, keep, keep_text, note_finish, text};
use serde_json::Value;

pub(super) fn apply(usage: &mut Usage, v: &Value) {
    keep_text(&mut usage.response_id, text(v, "/id"));
    keep_text(&mut usage.response_model, text(v, "/model"));
    for choice in v
        .get("choices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        note_finish(usage, text(choice, "/finish_reason"));
    }
    keep(&mut usage.input_tokens, count(v, "/usage/prompt_tokens"));
    keep(
        &mut usage.output_tokens,
        count(v, "/usage/completion_tokens"),
    );
    keep(
        &mut usage.cache_read_tokens,
        count(v, "/usage/prompt_tokens_details/cached_tokens"),
    );
}
