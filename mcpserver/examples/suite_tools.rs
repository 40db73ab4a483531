//! The tools the official MCP conformance suite's scenarios call (`test_simple_text`,
//! `test_image_content`, …), served by this library in both eras, so that the suite judges
//! what a server built on it sends for each kind of content, for errors, for a JSON Schema
//! 2020-12 input schema, and for a tool list that changes while a client listens
//! (`test_trigger_tool_change` withholds one more of eight spare tools through the server's
//! `ToolGate`: the suite runs its scenarios against one process, and a gate only takes
//! tools away, so each call needs a tool of its own to take). Run by
//! `mcpserver/tests/official_suite.rs`; the expected texts are the suite's
//! (conformance/official/README.md).
//!
//! Not here: `test_tool_with_progress` (the library sends no progress notifications) and the
//! diagnostic tools of the 2026-07-28 `server-stateless` scenario (`test_missing_capability`
//! needs error -32021 from a tool, which a handler cannot raise).

use std::sync::OnceLock;

use mcpserver::{CallContext, Content, Server, Tool, ToolGate, ToolResult};
use serde_json::{Value, json};

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// 10 ms of silence: an 8 kHz mono 8-bit WAV.
const WAV: &str = "UklGRnQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YVAAAACAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgA==";

static GATE: OnceLock<ToolGate> = OnceLock::new();

/// What `test_trigger_tool_change` takes away, one per call.
const SPARES: [&str; 8] = [
    "test_spare_1",
    "test_spare_2",
    "test_spare_3",
    "test_spare_4",
    "test_spare_5",
    "test_spare_6",
    "test_spare_7",
    "test_spare_8",
];

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The input schema of the `json-schema-2020-12` scenario, verbatim.
fn schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    })
}

type Handler = fn(Value, &CallContext) -> Result<ToolResult, String>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The first tool takes no arguments: `http-header-validation` calls it with `{}`.
    let tools: [(&str, &str, Value, Handler); 8] = [
        (
            "test_simple_text",
            "Returns a simple text",
            no_arguments(),
            |_, _| {
                Ok(ToolResult::text(
                    "This is a simple text response for testing.",
                ))
            },
        ),
        (
            "test_image_content",
            "Returns an image",
            no_arguments(),
            |_, _| Ok(ToolResult::new(vec![Content::image(PNG, "image/png")])),
        ),
        (
            "test_audio_content",
            "Returns audio",
            no_arguments(),
            |_, _| Ok(ToolResult::new(vec![Content::audio(WAV, "audio/wav")])),
        ),
        (
            "test_embedded_resource",
            "Returns an embedded resource",
            no_arguments(),
            |_, _| {
                Ok(ToolResult::new(vec![Content::resource(json!({
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content."
                }))]))
            },
        ),
        (
            "test_multiple_content_types",
            "Returns text, an image and a resource",
            no_arguments(),
            |_, _| {
                Ok(ToolResult::new(vec![
                    Content::text("Multiple content types test:"),
                    Content::image(PNG, "image/png"),
                    Content::resource(json!({
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": "{\"test\":\"data\",\"value\":123}"
                    })),
                ]))
            },
        ),
        (
            "test_error_handling",
            "Always fails (an isError result)",
            no_arguments(),
            |_, _| Err("This tool intentionally returns an error for testing".into()),
        ),
        (
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            schema_2020_12(),
            |args, _| {
                Ok(ToolResult::text(format!(
                    "JSON Schema 2020-12 tool called with: {args}"
                )))
            },
        ),
        (
            "test_trigger_tool_change",
            "Changes the tool list (a listening client is told)",
            no_arguments(),
            |_, _| {
                let taken = GATE.get().is_some_and(|gate| {
                    SPARES
                        .iter()
                        .any(|spare| gate.withhold(spare, "test_trigger_tool_change took it"))
                });
                match taken {
                    true => Ok(ToolResult::text("Mutation triggered")),
                    false => Err("no spare tool is left to take away".into()),
                }
            },
        ),
    ];
    let mut builder = Server::builder("mcpserver-suite-tools", env!("CARGO_PKG_VERSION"))
        .accept_newer_revisions(true)
        .notify_list_changed(true);
    for (name, description, schema, handler) in tools {
        builder = builder.tool_raw(Tool::new(name, description, schema), handler);
    }
    for spare in SPARES {
        builder = builder.tool_raw(
            Tool::new(
                spare,
                "Withheld by test_trigger_tool_change",
                no_arguments(),
            ),
            |_, _| Ok::<_, String>(ToolResult::text("still here")),
        );
    }
    let server = builder.build()?;
    let _ = GATE.set(server.tool_gate());
    server.serve_stdio()?;
    Ok(())
}
