//! `PluginToolAdapter`: a plugin's exposed operations as mcpserver tools (one
//! `ToolSource` of a step's tool set). Tool `<plugin>_<op>` takes the operation's input
//! schema and description, and its output schema when the plugin declares an object
//! schema; its result is the plugin's text followed by its structured data as JSON text
//! (what the model reads), plus that data as structured content when it is an object, and
//! is flagged `isError` when the plugin reports a failure or is down.

use super::process::{CallFailure, PluginProcess};
use crate::process::Shutdown;
use crate::tools::ToolSource;
use crate::workflow::plugin_tool_name;
use mcpserver::{CallContext, CallError, ServerBuilder, Tool, ToolResult};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct PluginToolAdapter {
    source: String,
    plugin: Arc<PluginProcess>,
    /// (tool, operation name, deadline of a call), in the order the config exposes them.
    tools: Vec<(Tool, String, Duration)>,
    /// The bound of a result's text, and of its structured content.
    output_bytes: usize,
    /// awf going down cancels the plugin calls in flight, as a client's cancel does.
    shutdown: Shutdown,
}

impl PluginToolAdapter {
    /// Exposes `operations` (already checked to exist) of a running plugin.
    pub fn new(
        plugin: Arc<PluginProcess>,
        operations: &[(String, Duration)],
        shutdown: Shutdown,
        output_bytes: usize,
    ) -> PluginToolAdapter {
        let tools = operations
            .iter()
            .filter_map(|(op, timeout)| {
                let found = plugin.operations().iter().find(|o| o.name == *op)?;
                let schema = match found.input_schema() {
                    Ok(s) if s.is_object() => s,
                    // MCP requires an object schema; a plugin sending something else
                    // still gets its tool, taking any object.
                    other => {
                        tracing::warn!(
                            plugin = %plugin.name(),
                            operation = %op,
                            "the operation's input schema is not a JSON object ({}); using {{\"type\":\"object\"}}",
                            other.map(|v| v.to_string()).unwrap_or_else(|e| e.to_string())
                        );
                        json!({"type": "object"})
                    }
                };
                let mut tool = Tool::new(
                    plugin_tool_name(plugin.name(), op),
                    found.description.clone(),
                    schema,
                );
                match found.output_schema() {
                    None => {}
                    // MCP's outputSchema (like its structuredContent) is an object.
                    Some(Ok(s)) if s.get("type").and_then(Value::as_str) == Some("object") => {
                        tool = tool.output_schema(s)
                    }
                    Some(other) => tracing::debug!(
                        plugin = %plugin.name(),
                        operation = %op,
                        "the operation's output schema is not an object schema ({}); the tool \
                         declares none (its data still reaches the model as text)",
                        other.map(|v| v.to_string()).unwrap_or_else(|e| e.to_string())
                    ),
                }
                Some((tool, op.clone(), *timeout))
            })
            .collect();
        PluginToolAdapter {
            source: format!("plugin:{}", plugin.name()),
            plugin,
            tools,
            output_bytes,
            shutdown,
        }
    }
}

impl ToolSource for PluginToolAdapter {
    fn source(&self) -> &str {
        &self.source
    }

    fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|(tool, _, _)| tool.name().to_string())
            .collect()
    }

    fn register(&self, mut b: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder {
        for (tool, op, timeout) in &self.tools {
            if !offered(tool.name()) {
                continue;
            }
            let plugin = self.plugin.clone();
            let shutdown = self.shutdown.clone();
            let op = op.clone();
            let bounds = (*timeout, self.output_bytes);
            // The plugin checks the arguments against its own schema.
            b = b.tool(tool.clone(), move |args: Value, ctx: &CallContext| {
                call(&plugin, &op, &args, ctx, &shutdown, bounds)
            });
        }
        b
    }
}

fn call(
    plugin: &PluginProcess,
    op: &str,
    arguments: &Value,
    ctx: &CallContext,
    shutdown: &Shutdown,
    (timeout, output_bytes): (Duration, usize),
) -> Result<ToolResult, CallError> {
    let (name, tool) = (plugin.name(), ctx.tool());
    let hint = "ask the operation for less (a narrower query, a page of results)";
    let bound = |text: String| crate::builtins::bound::bound_text(text, output_bytes, hint);
    match plugin.execute(op, arguments, timeout, &|| {
        ctx.is_cancelled() || shutdown.is_set()
    }) {
        Ok(r) if r.success => {
            let mut text = bound(join_text_and_data(&r.output, &r.data_json));
            // Structured content is the same data again: within the bound, or left out
            // (the text above holds what fits, with its note).
            let data = structured(&r.data_json).filter(|_| {
                let fits = r.data_json.len() <= output_bytes;
                if !fits {
                    text.push_str(&format!(
                        "\n[structured content left out: {} bytes, over the {output_bytes}-byte bound]",
                        r.data_json.len()
                    ));
                }
                fits
            });
            let result = ToolResult::text(text);
            Ok(match data {
                Some(data) => result.with_structured(data),
                None => result,
            })
        }
        Ok(r) => {
            let why = if r.error.is_empty() {
                "the operation failed without saying why"
            } else {
                &r.error
            };
            Err(CallError::Failed(bound(join_text_and_data(
                why,
                &r.data_json,
            ))))
        }
        Err(CallFailure::TimedOut(after)) => Err(CallError::Failed(format!(
            "{tool} did not answer within {} s and was cancelled (plugin {name} was told to \
             stop the call); raise timeout_seconds of its plugin_tools entry, or ask for less",
            after.as_secs()
        ))),
        Err(CallFailure::Crashed(why)) => Err(CallError::Failed(format!(
            "plugin {name} crashed during this call to {tool}: {why}. Its tools are \
             unavailable for the rest of this session; the other tools still work."
        ))),
        Err(CallFailure::Down(why)) => Err(CallError::Failed(format!(
            "plugin {name} is down ({why}), so {tool} cannot run; the other tools still work."
        ))),
        Err(CallFailure::Rejected(why)) => Err(CallError::Failed(format!(
            "plugin {name} refused the call to {tool}: {why}"
        ))),
        Err(CallFailure::Cancelled) => Err(CallError::Failed(format!("{tool} was cancelled"))),
    }
}

/// The operation's data as structured content: a JSON object (what MCP's
/// `structuredContent` is); other data reaches the model as text only.
fn structured(data_json: &str) -> Option<Value> {
    serde_json::from_str::<Value>(data_json.trim())
        .ok()
        .filter(Value::is_object)
}

/// The text, then the structured data as compact JSON text after a blank line (either may
/// be absent). Data that is not valid JSON is passed as the plugin sent it.
fn join_text_and_data(text: &str, data_json: &str) -> String {
    let data = data_json.trim();
    if data.is_empty() {
        return text.to_string();
    }
    let data = serde_json::from_str::<Value>(data)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| data.to_string());
    if text.is_empty() {
        data
    } else {
        format!("{}\n\n{data}", text.trim_end_matches('\n'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_data_are_joined() {
        assert_eq!(join_text_and_data("hi", ""), "hi");
        assert_eq!(join_text_and_data("", "{\"a\": 1}"), "{\"a\":1}");
        assert_eq!(join_text_and_data("hi\n", "[1, 2]"), "hi\n\n[1,2]");
        assert_eq!(join_text_and_data("hi", "not json"), "hi\n\nnot json");
    }

    #[test]
    fn only_object_data_is_structured_content() {
        assert_eq!(structured("{\"a\": 1}"), Some(json!({"a": 1})));
        assert_eq!(structured(" {} \n"), Some(json!({})));
        assert_eq!(structured("[1, 2]"), None);
        assert_eq!(structured(""), None);
        assert_eq!(structured("not json"), None);
    }

    #[test]
    fn tool_names_keep_hyphens() {
        assert_eq!(plugin_tool_name("my-plugin", "do_it"), "my-plugin_do_it");
        assert!(mcpserver::check_name(&plugin_tool_name("my-plugin", "do-it")).is_ok());
    }
}
