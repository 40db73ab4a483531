//! The usage reader over every wire, fed whole and in every split, and the path table.

use super::*;

const SSE: Option<&str> = Some("text/event-stream; charset=utf-8");
const JSON: Option<&str> = Some("application/json");

const ANTHROPIC_STREAM: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":1024,"cache_read_input_tokens":20480,"output_tokens":2}}}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    "\n\n",
    "event: ping\n",
    r#"data: {"type": "ping"}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Héllo, 世界 — 👋"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\n",
    "event: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":87}}"#,
    "\n\n",
    "event: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

// Newer servers repeat the full counts in `message_delta`; those win.
const ANTHROPIC_STREAM_FULL_DELTA: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_01A","type":"message","role":"assistant","content":[],"model":"claude-opus-4-1-20250805","stop_reason":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
    "\n\n",
    "event: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":3,"cache_creation_input_tokens":5210,"cache_read_input_tokens":0,"output_tokens":4096}}"#,
    "\n\n",
    "event: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

const ANTHROPIC_JSON: &str = r#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-haiku-4-5-20251001","content":[{"type":"text","text":"Done — ça marche."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":3300,"output_tokens":6,"service_tier":"standard"}}"#;

const ANTHROPIC_ERROR_EVENT: &str = concat!(
    "event: error\n",
    r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    "\n\n",
);

const ANTHROPIC_ERROR_JSON: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed"},"request_id":"req_011CVkq3qDd7vNQm"}"#;

const RESPONSES_STREAM: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af1c","object":"response","created_at":1756300000,"status":"in_progress","model":"gpt-5-codex","output":[],"usage":null}}"#,
    "\n\n",
    "event: response.in_progress\n",
    r#"data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_68af1c","object":"response","created_at":1756300000,"status":"in_progress","model":"gpt-5-codex","output":[],"usage":null}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
    "\n\n",
    "event: response.output_text.delta\n",
    r#"data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Grüße 🚀"}"#,
    "\n\n",
    "event: response.completed\n",
    r#"data: {"type":"response.completed","sequence_number":4,"response":{"id":"resp_68af1c","object":"response","created_at":1756300000,"status":"completed","model":"gpt-5-codex-2025-09-15","output":[],"incomplete_details":null,"usage":{"input_tokens":9120,"input_tokens_details":{"cached_tokens":8064},"output_tokens":311,"output_tokens_details":{"reasoning_tokens":192},"total_tokens":9431}}}"#,
    "\n\n",
);

const RESPONSES_INCOMPLETE_STREAM: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_9","object":"response","status":"in_progress","model":"gpt-5","usage":null}}"#,
    "\n\n",
    "event: response.incomplete\n",
    r#"data: {"type":"response.incomplete","sequence_number":7,"response":{"id":"resp_9","object":"response","status":"incomplete","model":"gpt-5-2025-08-07","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":0},"output_tokens":128,"total_tokens":168}}}"#,
    "\n\n",
);

const RESPONSES_FAILED_STREAM: &str = concat!(
    "event: response.failed\n",
    r#"data: {"type":"response.failed","sequence_number":3,"response":{"id":"resp_f","object":"response","status":"failed","model":"gpt-5","error":{"code":"server_error","message":"The model failed"},"usage":null}}"#,
    "\n\n",
);

const RESPONSES_JSON: &str = r#"{"id":"resp_67ccd2bed1ec","object":"response","created_at":1741476542,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}],"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}"#;

const CHAT_STREAM: &str = concat!(
    ": keep-alive\n",
    "\n",
    r#"data: {"id":"chatcmpl-C1x","object":"chat.completion.chunk","created":1756300000,"model":"gpt-4.1-2025-04-14","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    // No space after the colon, and one event split over two data lines.
    r#"data:{"id":"chatcmpl-C1x","object":"chat.completion.chunk","#,
    "\n",
    r#"data: "model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{"content":"naïve café"},"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-C1x","object":"chat.completion.chunk","created":1756300000,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-C1x","object":"chat.completion.chunk","created":1756300000,"model":"gpt-4.1-2025-04-14","choices":[],"usage":{"prompt_tokens":1530,"completion_tokens":42,"total_tokens":1572,"prompt_tokens_details":{"cached_tokens":1280,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#,
    "\n\n",
    "data: [DONE]\n",
    "\n",
);

const CHAT_JSON: &str = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion","created":1741570283,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"A"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"B"},"finish_reason":"length"},{"index":2,"message":{"role":"assistant","content":"C"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0}}}"#;

const CHAT_ERROR_JSON: &str = r#"{"error":{"message":"Rate limit reached for gpt-4.1","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;

const GEMINI_STREAM: &str = concat!(
    r#"data: {"candidates": [{"content": {"parts": [{"text": "Bonjour"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8123,"candidatesTokenCount": 3,"totalTokenCount": 8200,"cachedContentTokenCount": 4096,"thoughtsTokenCount": 74},"modelVersion": "gemini-2.5-pro","responseId": "mJ2vaKXaBo-Hz7IP"}"#,
    "\n\n",
    r#"data: {"candidates": [{"content": {"parts": [{"text": " à tous ✨"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8123,"candidatesTokenCount": 12,"totalTokenCount": 8209,"cachedContentTokenCount": 4096,"thoughtsTokenCount": 74},"modelVersion": "gemini-2.5-pro","responseId": "mJ2vaKXaBo-Hz7IP"}"#,
    "\n\n",
);

const GEMINI_ARRAY: &str = concat!(
    "[{\n",
    r#"  "candidates": [{"content": {"parts": [{"text": "Hola"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 55,"candidatesTokenCount": 1,"totalTokenCount": 56},"modelVersion": "gemini-2.5-flash","responseId": "x1"#,
    "\"\n}\n,\r\n{\n",
    r#"  "candidates": [{"content": {"parts": [{"text": " señor"}],"role": "model"},"finishReason": "MAX_TOKENS","index": 0}],"usageMetadata": {"promptTokenCount": 55,"candidatesTokenCount": 9,"totalTokenCount": 64},"modelVersion": "gemini-2.5-flash","responseId": "x1"#,
    "\"\n}\n]",
);

const GEMINI_JSON: &str = r#"{"candidates":[{"content":{"parts":[{"text":"ok"}],"role":"model"},"finishReason":"STOP","avgLogprobs":-0.01}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12,"promptTokensDetails":[{"modality":"TEXT","tokenCount":10}]},"modelVersion":"gemini-2.0-flash-001","responseId":"aBcD"}"#;

// What the Code Assist endpoint streams: each response wrapped.
const GEMINI_CODE_ASSIST_STREAM: &str = concat!(
    r#"data: {"response": {"candidates": [{"content": {"parts": [{"text": "Hi"}],"role": "model"},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 900,"candidatesTokenCount": 4,"totalTokenCount": 904},"modelVersion": "gemini-2.5-flash"},"traceId": "7f3a"}"#,
    "\r\n\r\n",
);

const GEMINI_ERROR_JSON: &str = r#"[{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}]"#;

struct Case {
    name: &'static str,
    wire: Wire,
    content_type: Option<&'static str>,
    body: &'static str,
    want: Usage,
}

fn s(text: &str) -> Option<String> {
    Some(text.to_owned())
}

fn reasons(list: &[&str]) -> Vec<String> {
    list.iter().map(|r| r.to_string()).collect()
}

fn cases() -> Vec<Case> {
    let anthropic_stream = Usage {
        response_model: s("claude-sonnet-4-5-20250929"),
        input_tokens: Some(472),
        output_tokens: Some(87),
        cache_read_tokens: Some(20480),
        cache_creation_tokens: Some(1024),
        finish_reasons: reasons(&["tool_use"]),
        response_id: s("msg_01XFDUDYJgAACzvnptvVoYEL"),
    };
    let chat_stream = Usage {
        response_model: s("gpt-4.1-2025-04-14"),
        input_tokens: Some(1530),
        output_tokens: Some(42),
        cache_read_tokens: Some(1280),
        cache_creation_tokens: None,
        finish_reasons: reasons(&["tool_calls"]),
        response_id: s("chatcmpl-C1x"),
    };
    vec![
        Case {
            name: "anthropic stream",
            wire: Wire::AnthropicMessages,
            content_type: SSE,
            body: ANTHROPIC_STREAM,
            want: anthropic_stream.clone(),
        },
        Case {
            name: "anthropic stream, full counts in message_delta",
            wire: Wire::AnthropicMessages,
            content_type: Some("text/event-stream"),
            body: ANTHROPIC_STREAM_FULL_DELTA,
            want: Usage {
                response_model: s("claude-opus-4-1-20250805"),
                input_tokens: Some(3),
                output_tokens: Some(4096),
                cache_read_tokens: Some(0),
                cache_creation_tokens: Some(5210),
                finish_reasons: reasons(&["max_tokens"]),
                response_id: s("msg_01A"),
            },
        },
        Case {
            name: "anthropic json",
            wire: Wire::AnthropicMessages,
            content_type: JSON,
            body: ANTHROPIC_JSON,
            want: Usage {
                response_model: s("claude-haiku-4-5-20251001"),
                input_tokens: Some(12),
                output_tokens: Some(6),
                cache_read_tokens: Some(3300),
                cache_creation_tokens: Some(0),
                finish_reasons: reasons(&["end_turn"]),
                response_id: s("msg_013Zva2CMHLNnXjNJJKqJ2EF"),
            },
        },
        Case {
            name: "anthropic error event",
            wire: Wire::AnthropicMessages,
            content_type: SSE,
            body: ANTHROPIC_ERROR_EVENT,
            want: Usage::default(),
        },
        Case {
            name: "anthropic http error body",
            wire: Wire::AnthropicMessages,
            content_type: JSON,
            body: ANTHROPIC_ERROR_JSON,
            want: Usage::default(),
        },
        Case {
            name: "responses stream",
            wire: Wire::OpenAiResponses,
            content_type: SSE,
            body: RESPONSES_STREAM,
            want: Usage {
                response_model: s("gpt-5-codex-2025-09-15"),
                input_tokens: Some(9120),
                output_tokens: Some(311),
                cache_read_tokens: Some(8064),
                cache_creation_tokens: None,
                finish_reasons: reasons(&["completed"]),
                response_id: s("resp_68af1c"),
            },
        },
        Case {
            name: "responses stream, incomplete",
            wire: Wire::OpenAiResponses,
            content_type: SSE,
            body: RESPONSES_INCOMPLETE_STREAM,
            want: Usage {
                response_model: s("gpt-5-2025-08-07"),
                input_tokens: Some(40),
                output_tokens: Some(128),
                cache_read_tokens: Some(0),
                cache_creation_tokens: None,
                finish_reasons: reasons(&["max_output_tokens"]),
                response_id: s("resp_9"),
            },
        },
        Case {
            name: "responses stream, failed",
            wire: Wire::OpenAiResponses,
            content_type: SSE,
            body: RESPONSES_FAILED_STREAM,
            want: Usage {
                response_model: s("gpt-5"),
                finish_reasons: reasons(&["failed"]),
                response_id: s("resp_f"),
                ..Usage::default()
            },
        },
        Case {
            name: "responses json",
            wire: Wire::OpenAiResponses,
            content_type: JSON,
            body: RESPONSES_JSON,
            want: Usage {
                response_model: s("gpt-4.1-2025-04-14"),
                input_tokens: Some(36),
                output_tokens: Some(87),
                cache_read_tokens: Some(0),
                cache_creation_tokens: None,
                finish_reasons: reasons(&["completed"]),
                response_id: s("resp_67ccd2bed1ec"),
            },
        },
        Case {
            name: "chat stream",
            wire: Wire::ChatCompletions,
            content_type: SSE,
            body: CHAT_STREAM,
            want: chat_stream.clone(),
        },
        Case {
            name: "chat stream without a content type",
            wire: Wire::ChatCompletions,
            content_type: None,
            body: CHAT_STREAM,
            want: chat_stream,
        },
        Case {
            name: "chat json, several choices",
            wire: Wire::ChatCompletions,
            content_type: JSON,
            body: CHAT_JSON,
            want: Usage {
                response_model: s("gpt-4o-2024-08-06"),
                input_tokens: Some(1117),
                output_tokens: Some(46),
                cache_read_tokens: Some(1024),
                cache_creation_tokens: None,
                finish_reasons: reasons(&["stop", "length"]),
                response_id: s("chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"),
            },
        },
        Case {
            name: "chat http error body",
            wire: Wire::ChatCompletions,
            content_type: JSON,
            body: CHAT_ERROR_JSON,
            want: Usage::default(),
        },
        Case {
            name: "gemini sse stream",
            wire: Wire::Gemini,
            content_type: SSE,
            body: GEMINI_STREAM,
            want: Usage {
                response_model: s("gemini-2.5-pro"),
                input_tokens: Some(8123),
                output_tokens: Some(12 + 74),
                cache_read_tokens: Some(4096),
                cache_creation_tokens: None,
                finish_reasons: reasons(&["STOP"]),
                response_id: s("mJ2vaKXaBo-Hz7IP"),
            },
        },
        Case {
            name: "gemini json array stream",
            wire: Wire::Gemini,
            content_type: Some("application/json; charset=UTF-8"),
            body: GEMINI_ARRAY,
            want: Usage {
                response_model: s("gemini-2.5-flash"),
                input_tokens: Some(55),
                output_tokens: Some(9),
                finish_reasons: reasons(&["MAX_TOKENS"]),
                response_id: s("x1"),
                ..Usage::default()
            },
        },
        Case {
            name: "gemini generateContent json",
            wire: Wire::Gemini,
            content_type: JSON,
            body: GEMINI_JSON,
            want: Usage {
                response_model: s("gemini-2.0-flash-001"),
                input_tokens: Some(10),
                output_tokens: Some(2),
                finish_reasons: reasons(&["STOP"]),
                response_id: s("aBcD"),
                ..Usage::default()
            },
        },
        Case {
            name: "gemini code assist stream",
            wire: Wire::Gemini,
            content_type: SSE,
            body: GEMINI_CODE_ASSIST_STREAM,
            want: Usage {
                response_model: s("gemini-2.5-flash"),
                input_tokens: Some(900),
                output_tokens: Some(4),
                finish_reasons: reasons(&["STOP"]),
                ..Usage::default()
            },
        },
        Case {
            name: "gemini http error body",
            wire: Wire::Gemini,
            content_type: JSON,
            body: GEMINI_ERROR_JSON,
            want: Usage::default(),
        },
    ]
}

fn read<'a>(
    wire: Wire,
    content_type: Option<&str>,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Usage {
    let mut reader = UsageReader::new(wire, content_type);
    for chunk in chunks {
        reader.feed(chunk);
    }
    reader.finish()
}

/// Deterministic pseudo-random chunk sizes (1..=29 bytes), so splits land
/// inside lines, CRLF pairs and UTF-8 sequences.
fn uneven_splits(bytes: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed;
    let mut rest = bytes;
    let mut chunks = Vec::new();
    while !rest.is_empty() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let size = ((state >> 33) % 29 + 1) as usize;
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

fn check_all_feedings(case: &Case, body: &[u8], label: &str) {
    let whole = read(case.wire, case.content_type, [body]);
    assert_eq!(whole, case.want, "{} ({label}), fed whole", case.name);
    let bytewise = read(case.wire, case.content_type, body.chunks(1));
    assert_eq!(bytewise, case.want, "{} ({label}), byte by byte", case.name);
    for seed in 1..=12 {
        let split = read(case.wire, case.content_type, uneven_splits(body, seed));
        assert_eq!(
            split, case.want,
            "{} ({label}), split seed {seed}",
            case.name
        );
    }
    // Empty chunks are harmless.
    let with_empties = read(
        case.wire,
        case.content_type,
        body.chunks(7).flat_map(|chunk| [&b""[..], chunk]),
    );
    assert_eq!(
        with_empties, case.want,
        "{} ({label}), empty chunks",
        case.name
    );
}

#[test]
fn table_with_lf_line_endings() {
    for case in cases() {
        check_all_feedings(&case, case.body.as_bytes(), "LF");
    }
}

#[test]
fn table_with_crlf_line_endings() {
    for case in cases() {
        let body = case.body.replace("\r\n", "\n").replace('\n', "\r\n");
        check_all_feedings(&case, body.as_bytes(), "CRLF");
    }
}

#[test]
fn table_with_cr_line_endings() {
    for case in cases() {
        let body = case.body.replace("\r\n", "\n").replace('\n', "\r");
        check_all_feedings(&case, body.as_bytes(), "CR");
    }
}

#[test]
fn table_with_leading_bom() {
    for case in cases() {
        let body = format!("\u{FEFF}{}", case.body);
        check_all_feedings(&case, body.as_bytes(), "BOM");
    }
}

#[test]
fn truncated_bodies_never_panic() {
    for case in cases() {
        let body = case.body.as_bytes();
        for end in (0..body.len()).step_by(5) {
            read(
                case.wire,
                case.content_type,
                uneven_splits(&body[..end], end as u64),
            );
        }
    }
}

#[test]
fn stream_cut_before_final_blank_line_still_counts() {
    let body = ANTHROPIC_STREAM_FULL_DELTA
        .split("event: message_stop")
        .next()
        .unwrap()
        .trim_end();
    let usage = read(Wire::AnthropicMessages, SSE, [body.as_bytes()]);
    assert_eq!(usage.output_tokens, Some(4096));
    assert_eq!(usage.finish_reasons, reasons(&["max_tokens"]));
}

#[test]
fn stream_cut_mid_message_keeps_what_was_seen() {
    let cut = ANTHROPIC_STREAM.find("event: message_delta").unwrap();
    let usage = read(
        Wire::AnthropicMessages,
        SSE,
        [&ANTHROPIC_STREAM.as_bytes()[..cut]],
    );
    assert_eq!(usage.input_tokens, Some(472));
    assert_eq!(usage.output_tokens, Some(2));
    assert!(usage.finish_reasons.is_empty());
}

fn chat_chunk(content: &str) -> String {
    format!(
        r#"data: {{"id":"chatcmpl-big","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}]}}"#
    )
}

const CHAT_USAGE_TAIL: &str = concat!(
    r#"data: {"id":"chatcmpl-big","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-big","object":"chat.completion.chunk","model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

fn chat_tail_usage() -> Usage {
    Usage {
        response_model: s("gpt-4.1"),
        input_tokens: Some(7),
        output_tokens: Some(5),
        cache_read_tokens: Some(0),
        cache_creation_tokens: None,
        finish_reasons: reasons(&["stop"]),
        response_id: s("chatcmpl-big"),
    }
}

#[test]
fn oversized_event_is_skipped_and_later_events_still_count() {
    // Were the big event read, its finish reason would show up.
    let big = chat_chunk(&"x".repeat(5 << 20))
        .replace(r#""finish_reason":null"#, r#""finish_reason":"huge""#);
    let body = format!("{}\n\n{big}\n\n{CHAT_USAGE_TAIL}", chat_chunk("hi"));
    for chunk_size in [1 << 16, 4093, body.len()] {
        let mut reader = UsageReader::new(Wire::ChatCompletions, SSE);
        for chunk in body.as_bytes().chunks(chunk_size) {
            reader.feed(chunk);
            if let Body::Sse(sse) = &reader.body {
                assert!(sse.line.capacity() + sse.data.capacity() <= 2 * EVENT_LIMIT);
                assert!(sse.line.len() + sse.data.len() <= EVENT_LIMIT);
            }
        }
        assert_eq!(reader.finish(), chat_tail_usage(), "chunks of {chunk_size}");
    }
}

#[test]
fn oversized_multiline_event_is_skipped() {
    // Many modest data lines that only together pass the limit, and that
    // joined would be valid JSON: were it read, "huge" would show up.
    let line = format!("data: {}\n", "0,".repeat(1 << 19));
    let big = format!(
        "event: huge\n{}\n{}{}\n",
        r#"data: {"choices":[{"finish_reason":"huge"}],"pad":["#,
        line.repeat(5),
        "data: 0]}"
    );
    let body = format!("{big}\n{CHAT_USAGE_TAIL}");
    let usage = read(Wire::ChatCompletions, SSE, body.as_bytes().chunks(1 << 15));
    assert_eq!(usage, chat_tail_usage());
    // The same shape under the limit is read, so the test above means something.
    let small = big.replacen(&line.repeat(5), &line, 1);
    let usage = read(Wire::ChatCompletions, SSE, small.as_bytes().chunks(1 << 15));
    assert_eq!(usage.finish_reasons, reasons(&["huge"]));
}

#[test]
fn large_event_under_the_limit_is_read() {
    let big = chat_chunk(&"z".repeat(3 << 20)).replace("gpt-4.1", "gpt-large");
    let body = format!("{big}\n\n");
    let usage = read(Wire::ChatCompletions, SSE, body.as_bytes().chunks(1 << 16));
    assert_eq!(usage.response_model, s("gpt-large"));
}

#[test]
fn oversized_json_body_is_not_parsed_and_memory_stays_bounded() {
    let padding = "p".repeat(BODY_LIMIT);
    let body = format!(
        r#"{{"id":"msg_big","type":"message","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{padding}"}}],"stop_reason":"end_turn","usage":{{"input_tokens":1,"output_tokens":2}}}}"#
    );
    let mut reader = UsageReader::new(Wire::AnthropicMessages, JSON);
    for chunk in body.as_bytes().chunks(1 << 20) {
        reader.feed(chunk);
        if let Body::Json(json) = &reader.body {
            assert!(json.buf.capacity() <= BODY_LIMIT);
        }
    }
    assert_eq!(reader.finish(), Usage::default());
}

#[test]
fn json_body_at_the_limit_is_parsed() {
    let mut body = ANTHROPIC_JSON.as_bytes().to_vec();
    body.resize(BODY_LIMIT, b' ');
    let usage = read(Wire::AnthropicMessages, JSON, body.chunks(1 << 20));
    assert_eq!(usage.response_id, s("msg_013Zva2CMHLNnXjNJJKqJ2EF"));
}

#[test]
fn done_marker_is_ignored() {
    let only_done = read(Wire::ChatCompletions, SSE, [&b"data: [DONE]\n\n"[..]]);
    assert_eq!(only_done, Usage::default());
    // Whatever follows a stray [DONE] is still read.
    let body = format!("data: [DONE]\n\n{CHAT_USAGE_TAIL}");
    let usage = read(Wire::ChatCompletions, SSE, [body.as_bytes()]);
    assert_eq!(usage, chat_tail_usage());
}

#[test]
fn garbage_gives_empty_usage() {
    let inputs: [&[u8]; 6] = [
        b"",
        b"\xff\xfe\x00garbage",
        b"<html><body>502 Bad Gateway</body></html>",
        b"data: {not json\n\ndata: 42\n\ndata: \"text\"\n\n",
        b"data\n\nevent: message_start\n\n:\n\n\n\n",
        b"{\"usage\": {\"input_tokens\": -3, \"output_tokens\": \"many\"}}",
    ];
    let wires = [
        Wire::AnthropicMessages,
        Wire::OpenAiResponses,
        Wire::ChatCompletions,
        Wire::Gemini,
    ];
    for wire in wires {
        for content_type in [SSE, JSON, None] {
            for input in inputs {
                assert_eq!(read(wire, content_type, [input]), Usage::default());
            }
        }
    }
}

#[test]
fn finish_reasons_are_deduplicated_in_order() {
    let body = concat!(
        r#"data: {"choices":[{"index":0,"finish_reason":"length"},{"index":1,"finish_reason":""}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":1,"finish_reason":"stop"},{"index":2,"finish_reason":"length"}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":3,"finish_reason":"stop"},{"index":4,"finish_reason":null}]}"#,
        "\n\n",
    );
    let usage = read(Wire::ChatCompletions, SSE, [body.as_bytes()]);
    assert_eq!(usage.finish_reasons, reasons(&["length", "stop"]));
}

#[test]
fn float_counts_are_accepted() {
    let body = r#"{"usage":{"prompt_tokens":12.0,"completion_tokens":3}}"#;
    let usage = read(Wire::ChatCompletions, JSON, [body.as_bytes()]);
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (Some(12), Some(3))
    );
}

#[test]
fn content_type_selects_framing() {
    assert!(is_event_stream("text/event-stream"));
    assert!(is_event_stream("Text/Event-Stream ; charset=utf-8"));
    assert!(!is_event_stream("application/json"));
    assert!(!is_event_stream("text/event-streamx"));
    assert!(!is_event_stream(""));
    assert!(matches!(
        UsageReader::new(Wire::Gemini, SSE).body,
        Body::Sse(_)
    ));
    assert!(matches!(
        UsageReader::new(Wire::Gemini, JSON).body,
        Body::Json(_)
    ));
    assert!(matches!(
        UsageReader::new(Wire::Gemini, None).body,
        Body::Json(_)
    ));
}

/// Path, request body, expected wire and model.
type ClassifyRow = (
    &'static str,
    &'static [u8],
    Option<(Wire, Option<&'static str>)>,
);

#[test]
fn classify_table() {
    let anthropic_body =
        br#"{"model":"claude-sonnet-4-5-20250929","max_tokens":32000,"stream":true,"messages":[]}"#;
    let openai_body = br#"{"model":"gpt-5-codex","stream":true,"input":[]}"#;
    let code_assist_body =
        br#"{"model":"gemini-2.5-pro","project":"p-1","request":{"contents":[]}}"#;
    let table: &[ClassifyRow] = &[
        (
            "/v1/messages",
            anthropic_body,
            Some((Wire::AnthropicMessages, Some("claude-sonnet-4-5-20250929"))),
        ),
        (
            "/s/abc/v1/messages?beta=true",
            anthropic_body,
            Some((Wire::AnthropicMessages, Some("claude-sonnet-4-5-20250929"))),
        ),
        (
            "/v1/messages/",
            anthropic_body,
            Some((Wire::AnthropicMessages, Some("claude-sonnet-4-5-20250929"))),
        ),
        (
            "/v1/messages",
            b"not json",
            Some((Wire::AnthropicMessages, None)),
        ),
        ("/v1/messages", b"", Some((Wire::AnthropicMessages, None))),
        (
            "/v1/messages",
            br#"{"model":""}"#,
            Some((Wire::AnthropicMessages, None)),
        ),
        (
            "/v1/messages",
            br#"{"model":7}"#,
            Some((Wire::AnthropicMessages, None)),
        ),
        ("/v1/messages/count_tokens?beta=true", anthropic_body, None),
        ("/s/abc/v1/messages/count_tokens", anthropic_body, None),
        ("/messages", anthropic_body, None),
        (
            "/v1/responses",
            openai_body,
            Some((Wire::OpenAiResponses, Some("gpt-5-codex"))),
        ),
        (
            "/s/abc/backend-api/codex/responses",
            openai_body,
            Some((Wire::OpenAiResponses, Some("gpt-5-codex"))),
        ),
        ("/v1/responses/resp_123", b"", None),
        ("/v1/responses/input_tokens", openai_body, None),
        (
            "/v1/chat/completions",
            br#"{"model":"gpt-4.1","messages":[]}"#,
            Some((Wire::ChatCompletions, Some("gpt-4.1"))),
        ),
        (
            "/api/openai/v1/chat/completions?api-version=1",
            b"{",
            Some((Wire::ChatCompletions, None)),
        ),
        (
            "/v1/completions",
            br#"{"model":"gpt-3.5-turbo-instruct"}"#,
            None,
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            b"{}",
            Some((Wire::Gemini, Some("gemini-2.5-pro"))),
        ),
        (
            "/s/abc/v1beta/models/gemini-2.5-flash:generateContent",
            b"{}",
            Some((Wire::Gemini, Some("gemini-2.5-flash"))),
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
            b"{}",
            Some((Wire::Gemini, Some("gemini-2.5-pro"))),
        ),
        (
            "/v1beta/models/gemini-2.5-pro%3AstreamGenerateContent?alt=sse",
            b"{}",
            Some((Wire::Gemini, Some("gemini-2.5-pro"))),
        ),
        (
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent",
            b"{}",
            Some((Wire::Gemini, Some("gemini-2.5-pro"))),
        ),
        (
            "/v1internal:streamGenerateContent?alt=sse",
            code_assist_body,
            Some((Wire::Gemini, Some("gemini-2.5-pro"))),
        ),
        (
            "/v1internal:generateContent",
            br#"{"model":"models/gemini-2.5-flash"}"#,
            Some((Wire::Gemini, Some("gemini-2.5-flash"))),
        ),
        ("/v1beta/models/gemini-2.5-pro:countTokens", b"{}", None),
        ("/v1internal:countTokens", code_assist_body, None),
        ("/v1beta/models", b"", None),
        ("/v1/models", b"", None),
        ("/models", b"", None),
        ("/", b"", None),
        ("", b"", None),
    ];
    for (path, body, want) in table {
        let want = want.map(|(wire, model)| (wire, model.map(str::to_owned)));
        let got = classify(path).map(|(wire, path_model)| {
            let mut scan = crate::relay::body::ModelScan::default();
            scan.feed(body);
            (wire, requested_model(wire, path_model, scan.model()))
        });
        assert_eq!(got, want, "{path}");
    }
}
