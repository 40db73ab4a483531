//! What a Gemini `generateContent` response (SSE, JSON array or whole) says about its turn.

use super::{Usage, count, keep, keep_text, note_finish, text};
use serde_json::Value;

pub(super) fn apply(usage: &mut Usage, v: &Value) {
    // The Code Assist endpoint wraps each GenerateContentResponse in `response`.
    let v = match v.get("response") {
        Some(inner) if inner.is_object() && v.get("candidates").is_none() => inner,
        _ => v,
    };
    keep_text(&mut usage.response_id, text(v, "/responseId"));
    keep_text(&mut usage.response_model, text(v, "/modelVersion"));
    for candidate in v
        .get("candidates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        note_finish(usage, text(candidate, "/finishReason"));
    }
    let Some(meta) = v.get("usageMetadata") else {
        return;
    };
    keep(&mut usage.input_tokens, count(meta, "/promptTokenCount"));
    keep(
        &mut usage.cache_read_tokens,
        count(meta, "/cachedContentTokenCount"),
    );
    // Gemini counts thinking apart from the answer; the other wires include it
    // in their output figure, so add it back for a comparable number.
    let answer = count(meta, "/candidatesTokenCount");
    let thoughts = count(meta, "/thoughtsTokenCount");
    if answer.is_some() || thoughts.is_some() {
        usage.output_tokens = Some(answer.unwrap_or(0).saturating_add(thoughts.unwrap_or(0)));
    }
}
