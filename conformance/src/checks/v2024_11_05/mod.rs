//! The 2024-11-05 checks: the lifecycle and tools of that revision, and the JSON-RPC
//! framing and process life that every revision shares (the later revisions do not repeat
//! them).

mod jsonrpc;
mod lifecycle;
mod process;
mod tools;

use jsonrpc::*;
use lifecycle::*;
use process::*;
use tools::*;

use super::{Check, Revision};

/// Every 2024-11-05 check, in the order they are reported.
pub(super) const CHECKS: &[Check] = &[
    Check {
        name: "initialize-2024-11-05",
        revision: Revision::V2024_11_05,
        about: "initialize asking for 2024-11-05 is answered with protocolVersion 2024-11-05",
        run: initialize_2024,
    },
    Check {
        name: "initialize-result-shape",
        revision: Revision::V2024_11_05,
        about: "the initialize result has capabilities (with tools) and serverInfo {name, version}",
        run: initialize_result_shape,
    },
    Check {
        name: "initialize-newer-version",
        revision: Revision::V2024_11_05,
        about: "initialize asking for 2025-06-18 gets a result naming a supported version (the client decides)",
        run: initialize_newer,
    },
    Check {
        name: "initialize-unknown-version",
        revision: Revision::V2024_11_05,
        about: "initialize asking for an unknown version gets a result naming another, supported version",
        run: initialize_unknown,
    },
    Check {
        name: "initialize-extra-fields-accepted",
        revision: Revision::V2024_11_05,
        about: "initialize with capabilities and fields the server does not know (as newer clients send) succeeds",
        run: initialize_extra_fields,
    },
    Check {
        name: "initialized-no-answer",
        revision: Revision::V2024_11_05,
        about: "notifications/initialized gets no answer",
        run: initialized_no_answer,
    },
    Check {
        name: "ping-before-initialize",
        revision: Revision::V2024_11_05,
        about: "ping as the first message is answered with {}",
        run: ping_before_initialize,
    },
    Check {
        name: "ping-after-initialize",
        revision: Revision::V2024_11_05,
        about: "ping after the handshake is answered with {}",
        run: ping_after_initialize,
    },
    Check {
        name: "pre-init-request-rejected",
        revision: Revision::V2024_11_05,
        about: "tools/list before initialize gets an immediate JSON-RPC error, never silence (strict: the spec only says clients should not send it)",
        run: pre_init_request_rejected,
    },
    Check {
        name: "pre-init-unknown-method-answered",
        revision: Revision::V2024_11_05,
        about: "an unknown method before initialize (as newer clients probe with server/discover) is answered",
        run: pre_init_unknown_method_answered,
    },
    Check {
        name: "tools-list-shape",
        revision: Revision::V2024_11_05,
        about: "tools/list returns tools[] of {name, inputSchema: {type: object}, description?}",
        run: tools_list_shape,
    },
    Check {
        name: "tool-names-valid",
        revision: Revision::V2024_11_05,
        about: "tool names match ^[a-zA-Z0-9_-]{1,64}$ (what Claude and other clients accept)",
        run: tool_names_valid,
    },
    Check {
        name: "tools-list-pagination",
        revision: Revision::V2024_11_05,
        about: "following nextCursor ends, every page is well formed, no tool name repeats",
        run: tools_list_pagination,
    },
    Check {
        name: "tools-list-invalid-cursor",
        revision: Revision::V2024_11_05,
        about: "tools/list with an invalid cursor gets error -32602",
        run: tools_list_invalid_cursor,
    },
    Check {
        name: "tools-call-result-shape",
        revision: Revision::V2024_11_05,
        about: "a tools/call result has content[] of typed items and a boolean isError if any",
        run: tools_call_result_shape,
    },
    Check {
        name: "tools-call-echo-text",
        revision: Revision::V2024_11_05,
        about: "the echo tool returns the text it was given",
        run: tools_call_echo_text,
    },
    Check {
        name: "tools-call-meta-accepted",
        revision: Revision::V2024_11_05,
        about: "tools/call with params._meta (a progressToken, a traceparent) is served as without it",
        run: tools_call_meta_accepted,
    },
    Check {
        name: "tools-call-tool-error",
        revision: Revision::V2024_11_05,
        about: "a failing tool returns a result with isError: true and a text (needs --error-tool)",
        run: tools_call_tool_error,
    },
    Check {
        name: "tools-call-unknown-tool",
        revision: Revision::V2024_11_05,
        about: "calling an unknown tool gets JSON-RPC error -32602 (a protocol error, not isError)",
        run: tools_call_unknown_tool,
    },
    Check {
        name: "tools-call-bad-arguments",
        revision: Revision::V2024_11_05,
        about: "arguments that do not fit the schema get JSON-RPC error -32602",
        run: tools_call_bad_arguments,
    },
    Check {
        name: "tools-call-missing-name",
        revision: Revision::V2024_11_05,
        about: "tools/call without a name gets JSON-RPC error -32602",
        run: tools_call_missing_name,
    },
    Check {
        name: "unknown-method",
        revision: Revision::V2024_11_05,
        about: "an unknown method gets error -32601",
        run: unknown_method,
    },
    Check {
        name: "unknown-notification-no-answer",
        revision: Revision::V2024_11_05,
        about: "an unknown notification gets no answer",
        run: unknown_notification,
    },
    Check {
        name: "parse-error-null-id",
        revision: Revision::V2024_11_05,
        about: "malformed JSON gets error -32700 with id null",
        run: parse_error_null_id,
    },
    Check {
        name: "parse-error-keeps-serving",
        revision: Revision::V2024_11_05,
        about: "after malformed JSON the server goes on serving",
        run: parse_error_keeps_serving,
    },
    Check {
        name: "invalid-utf8",
        revision: Revision::V2024_11_05,
        about: "a line that is not UTF-8 gets error -32700 with id null, and serving goes on",
        run: invalid_utf8,
    },
    Check {
        name: "batch-rejected",
        revision: Revision::V2024_11_05,
        about: "a JSON array (batch) gets one error -32600, not a batch answer",
        run: batch_rejected,
    },
    Check {
        name: "null-id-rejected",
        revision: Revision::V2024_11_05,
        about: "a request with id null gets error -32600",
        run: null_id_rejected,
    },
    Check {
        name: "fractional-id-rejected",
        revision: Revision::V2024_11_05,
        about: "a request with a fractional id gets error -32600",
        run: fractional_id_rejected,
    },
    Check {
        name: "wrong-jsonrpc-version",
        revision: Revision::V2024_11_05,
        about: "\"jsonrpc\": \"1.0\" gets error -32600",
        run: wrong_jsonrpc_version,
    },
    Check {
        name: "non-object-message",
        revision: Revision::V2024_11_05,
        about: "a JSON value that is not an object gets error -32600",
        run: non_object_message,
    },
    Check {
        name: "method-not-string",
        revision: Revision::V2024_11_05,
        about: "a request whose method is not a string gets error -32600",
        run: method_not_string,
    },
    Check {
        name: "string-id-echoed",
        revision: Revision::V2024_11_05,
        about: "string ids (also numeric-looking ones) come back as the same strings",
        run: string_id_echoed,
    },
    Check {
        name: "integer-id-echoed",
        revision: Revision::V2024_11_05,
        about: "integer ids (also 0) come back as the same integers",
        run: integer_id_echoed,
    },
    Check {
        name: "large-integer-id-echoed",
        revision: Revision::V2024_11_05,
        about: "integer ids beyond 2^53 and negative ones come back exactly (strict: no detour through a double)",
        run: large_integer_id_echoed,
    },
    Check {
        name: "crlf-accepted",
        revision: Revision::V2024_11_05,
        about: "a message ending in \\r\\n is accepted",
        run: crlf_accepted,
    },
    Check {
        name: "over-long-line",
        revision: Revision::V2024_11_05,
        about: "a line over the server's limit (--max-line-bytes) gets an error answer, and serving goes on",
        run: over_long_line,
    },
    Check {
        name: "stdout-only-jsonrpc",
        revision: Revision::V2024_11_05,
        about: "every line on stdout is a well-formed JSON-RPC 2.0 message",
        run: stdout_only_jsonrpc,
    },
    Check {
        name: "shutdown",
        revision: Revision::V2024_11_05,
        about: "shutdown (not in the spec) is answered: -32601, or a result and then the server exits 0 on its own",
        run: shutdown,
    },
    Check {
        name: "end-of-input",
        revision: Revision::V2024_11_05,
        about: "at end of input every request read is answered, then the server exits 0",
        run: end_of_input,
    },
    Check {
        name: "sigterm-exit",
        revision: Revision::V2024_11_05,
        about: "SIGTERM ends the server",
        run: sigterm_exit,
    },
    Check {
        name: "ping-during-slow-call",
        revision: Revision::V2024_11_05,
        about: "ping is answered while a slow tool call runs (needs --slow-tool)",
        run: ping_during_slow_call,
    },
    Check {
        name: "ping-when-saturated",
        revision: Revision::V2024_11_05,
        about: "ping is answered while more slow calls are in flight than a server runs at once (needs --slow-tool)",
        run: ping_when_saturated,
    },
    Check {
        name: "cancellation",
        revision: Revision::V2024_11_05,
        about: "a request cancelled with notifications/cancelled is never answered (needs --slow-tool)",
        run: cancellation,
    },
    Check {
        name: "cancel-unknown-request-ignored",
        revision: Revision::V2024_11_05,
        about: "notifications/cancelled for an id not in flight gets no answer, serving goes on",
        run: cancel_unknown_request_ignored,
    },
    Check {
        name: "second-initialize-rejected",
        revision: Revision::V2024_11_05,
        about: "a second initialize gets an error",
        run: second_initialize_rejected,
    },
];
