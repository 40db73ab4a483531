//! Reads the model responses the relay passes through and pulls out what each
//! model turn reports about itself: model, tokens, finish reasons, response id.
//!
//! Responses are read as they stream past, in whatever chunks the network
//! delivers, with bounded memory: the relay must never stall or balloon because
//! a response is large or malformed, and a response it cannot read simply
//! yields an empty [`Usage`].

mod anthropic;
mod chat;
mod gemini;
mod responses;
mod sse;
#[cfg(test)]
mod tests;

use serde_json::Value;
use sse::SseParser;

/// Largest single SSE event we buffer. Anything bigger is skipped: usage never
/// lives in huge events, and buffering them would let one response grow memory
/// without limit.
const EVENT_LIMIT: usize = 4 << 20;
/// Largest non-streamed body we keep for parsing at the end.
const BODY_LIMIT: usize = 16 << 20;
/// Buffers that grew for one large event are shrunk back to this afterwards, so
/// a long stream does not keep its peak allocation.
const KEEP_CAPACITY: usize = 64 << 10;
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The request/response format a model request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    AnthropicMessages,
    OpenAiResponses,
    ChatCompletions,
    Gemini,
}

/// What one model turn reported, as far as the response told us.
///
/// Counts are taken as each wire reports them. In particular Anthropic's
/// `input_tokens` excludes cache reads and writes, whereas OpenAI and Gemini
/// count cached tokens inside their input figure as well.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// The model that actually answered (may be more specific than the one asked for).
    pub response_model: Option<String>,
    pub input_tokens: Option<u64>,
    /// For Gemini this includes thinking tokens, as the other wires do.
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_creation_tokens: Option<u64>,
    /// Distinct reasons, in the order first seen.
    pub finish_reasons: Vec<String>,
    pub response_id: Option<String>,
}

/// Reads a model response as it streams, chunk by chunk, bounded memory.
pub struct UsageReader {
    wire: Wire,
    usage: Usage,
    body: Body,
}

enum Body {
    Sse(SseParser),
    Json(JsonBuffer),
}

impl UsageReader {
    /// `text/event-stream` (any parameters, any case) is read as SSE; anything
    /// else as one JSON document (or a sequence of them).
    pub fn new(wire: Wire, content_type: Option<&str>) -> UsageReader {
        let body = if content_type.is_some_and(is_event_stream) {
            Body::Sse(SseParser::default())
        } else {
            Body::Json(JsonBuffer::default())
        };
        UsageReader {
            wire,
            usage: Usage::default(),
            body,
        }
    }

    /// Accepts the next bytes of the body; chunk boundaries may fall anywhere,
    /// even inside a line or a UTF-8 sequence.
    pub fn feed(&mut self, chunk: &[u8]) {
        let wire = self.wire;
        match &mut self.body {
            Body::Sse(sse) => {
                let usage = &mut self.usage;
                sse.feed(chunk, &mut |event, data| {
                    apply_event(usage, wire, event, data)
                });
            }
            Body::Json(json) => json.push(chunk),
        }
    }

    /// Ends the body and returns what was learned; an unreadable or truncated
    /// body yields whatever was seen so far.
    pub fn finish(self) -> Usage {
        let UsageReader {
            wire,
            mut usage,
            body,
        } = self;
        match body {
            Body::Sse(mut sse) => {
                sse.finish(&mut |event, data| apply_event(&mut usage, wire, event, data))
            }
            Body::Json(json) => {
                if let Some(bytes) = json.into_bytes() {
                    apply_body(&mut usage, wire, &bytes);
                }
            }
        }
        usage
    }
}

fn is_event_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .eq_ignore_ascii_case("text/event-stream")
}

/// Appends `bytes` unless `buf` would then exceed `limit`. Capacity is grown by
/// hand so that the allocation, not just the length, stays within `limit`.
fn bounded_extend(buf: &mut Vec<u8>, bytes: &[u8], limit: usize) -> bool {
    let needed = buf.len() + bytes.len();
    if needed > limit {
        return false;
    }
    if needed > buf.capacity() {
        let target = buf.capacity().saturating_mul(2).max(needed).min(limit);
        buf.reserve_exact(target - buf.len());
    }
    buf.extend_from_slice(bytes);
    true
}

fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > KEEP_CAPACITY {
        buf.shrink_to(KEEP_CAPACITY);
    }
}

/// A non-streamed body, kept whole (up to [`BODY_LIMIT`]) and parsed at the end.
#[derive(Default)]
struct JsonBuffer {
    buf: Vec<u8>,
    overflowed: bool,
}

impl JsonBuffer {
    fn push(&mut self, chunk: &[u8]) {
        if !self.overflowed && !bounded_extend(&mut self.buf, chunk, BODY_LIMIT) {
            // Too big to be worth parsing: free it now rather than at finish.
            self.overflowed = true;
            self.buf = Vec::new();
        }
    }

    fn into_bytes(self) -> Option<Vec<u8>> {
        (!self.overflowed).then_some(self.buf)
    }
}

fn apply_event(usage: &mut Usage, wire: Wire, event: Option<&str>, data: &[u8]) {
    if data.trim_ascii() == b"[DONE]" {
        return;
    }
    if let Ok(doc) = serde_json::from_slice::<Value>(data) {
        apply_document(usage, wire, event, &doc);
    }
}

/// A non-streamed body: normally one JSON value, but a sequence of values is
/// read too, and a body that turns out to be SSE despite its content type is
/// read as SSE.
fn apply_body(usage: &mut Usage, wire: Wire, bytes: &[u8]) {
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let mut parsed_any = false;
    for doc in serde_json::Deserializer::from_slice(bytes).into_iter::<Value>() {
        let Ok(doc) = doc else { break };
        apply_document(usage, wire, None, &doc);
        parsed_any = true;
    }
    if !parsed_any {
        let mut sse = SseParser::default();
        let mut on_event = |event: Option<&str>, data: &[u8]| apply_event(usage, wire, event, data);
        sse.feed(bytes, &mut on_event);
        sse.finish(&mut on_event);
    }
}

/// One parsed JSON value; a top-level array (Gemini's streamed form without
/// `alt=sse`) is a list of responses.
fn apply_document(usage: &mut Usage, wire: Wire, event: Option<&str>, doc: &Value) {
    match doc {
        Value::Array(items) => items
            .iter()
            .for_each(|item| apply_object(usage, wire, event, item)),
        _ => apply_object(usage, wire, event, doc),
    }
}

fn apply_object(usage: &mut Usage, wire: Wire, event: Option<&str>, v: &Value) {
    if !v.is_object() {
        return;
    }
    // The JSON `type` is authoritative; the SSE `event:` name is a fallback.
    let kind = v.get("type").and_then(Value::as_str).or(event);
    match wire {
        Wire::AnthropicMessages => anthropic::apply(usage, kind, v),
        Wire::OpenAiResponses => responses::apply(usage, kind, v),
        Wire::ChatCompletions => chat::apply(usage, v),
        Wire::Gemini => gemini::apply(usage, v),
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)?.as_str().filter(|s| !s.is_empty())
}

fn count(v: &Value, pointer: &str) -> Option<u64> {
    let n = v.pointer(pointer)?;
    // Some gateways re-serialise counts as floats (`12.0`).
    n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// Later reports replace earlier ones; absent values leave them alone.
fn keep<T>(slot: &mut Option<T>, value: Option<T>) {
    if value.is_some() {
        *slot = value;
    }
}

fn keep_text(slot: &mut Option<String>, value: Option<&str>) {
    keep(slot, value.map(str::to_owned));
}

fn note_finish(usage: &mut Usage, reason: Option<&str>) {
    if let Some(reason) = reason.filter(|r| !r.is_empty())
        && !usage.finish_reasons.iter().any(|seen| seen == reason)
    {
        usage.finish_reasons.push(reason.to_owned());
    }
}

/// Which wire a request path speaks, and the model the path names (Gemini's do; the
/// others name it in the body, which the relay reads as it streams upstream).
///
/// `path` is the request target as received: any prefix before the API path
/// (a session route, a provider base path) and any query are allowed. Requests
/// that are not model turns (token counting, model listing) give `None`.
pub fn classify(path: &str) -> Option<(Wire, Option<String>)> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let path = path.strip_suffix('/').unwrap_or(path);
    let mut segments = path.rsplit('/');
    let last = segments.next().unwrap_or_default();
    let parent = segments.next();

    if let Some((target, method)) = split_method(last) {
        if method != "generateContent" && method != "streamGenerateContent" {
            return None;
        }
        // Code Assist (`/v1internal:streamGenerateContent`) names the model in the body.
        let model = (parent == Some("models"))
            .then(|| target.to_owned())
            .filter(|m| !m.is_empty());
        return Some((Wire::Gemini, model));
    }

    let wire = if path.ends_with("/v1/messages") {
        Wire::AnthropicMessages
    } else if last == "responses" {
        Wire::OpenAiResponses
    } else if last == "completions" && parent == Some("chat") {
        Wire::ChatCompletions
    } else {
        return None;
    };
    Some((wire, None))
}

/// Splits a Gemini `<target>:<method>` segment; clients may percent-encode the colon.
pub(super) fn split_method(segment: &str) -> Option<(&str, &str)> {
    if let Some(colon) = segment.rfind(':') {
        return Some((&segment[..colon], &segment[colon + 1..]));
    }
    let at = segment.to_ascii_lowercase().rfind("%3a")?;
    Some((&segment[..at], &segment[at + 3..]))
}

/// The model a request asks for: the one its path names, else the one its body names
/// (Code Assist spells it `models/<name>`).
pub(crate) fn requested_model(
    wire: Wire,
    path_model: Option<String>,
    body_model: Option<String>,
) -> Option<String> {
    path_model.or_else(|| {
        let named = body_model?;
        Some(match (wire, named.strip_prefix("models/")) {
            (Wire::Gemini, Some(bare)) => bare.to_string(),
            _ => named,
        })
    })
}
