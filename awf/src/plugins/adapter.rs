//! `PluginToolAdapter`: a plugin's exposed operations as tools behind the router's
//! [`ToolProvider`] port. Tool `<plugin>_<op>` takes the operation's input schema and
//! description; its result is the plugin's text followed by its structured data as JSON
//! text, flagged `isError` when the plugin reports a failure or is down.

use super::process::{CallFailure, PluginProcess};
use crate::tools::{Cancellation, ToolOutput, ToolProvider, ToolSpec};
use crate::workflow::plugin_tool_name;
use serde_json::{Value, json};
use std::sync::Arc;

pub struct PluginToolAdapter {
    source: String,
    plugin: Arc<PluginProcess>,
    /// (tool spec, operation name), in the order the config exposes them.
    tools: Vec<(ToolSpec, String)>,
}

impl PluginToolAdapter {
    /// Exposes `operations` (already checked to exist) of a running plugin.
    pub fn new(plugin: Arc<PluginProcess>, operations: &[String]) -> PluginToolAdapter {
        let tools = operations
            .iter()
            .filter_map(|op| {
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
                Some((
                    ToolSpec {
                        name: plugin_tool_name(plugin.name(), op),
                        description: found.description.clone(),
                        input_schema: schema,
                        annotations: None,
                    },
                    op.clone(),
                ))
            })
            .collect();
        PluginToolAdapter {
            source: format!("plugin:{}", plugin.name()),
            plugin,
            tools,
        }
    }
}

impl ToolProvider for PluginToolAdapter {
    fn source(&self) -> &str {
        &self.source
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|(spec, _)| spec.clone()).collect()
    }

    fn call(&self, tool: &str, arguments: &Value, cancel: &Cancellation) -> ToolOutput {
        let Some((_, op)) = self.tools.iter().find(|(spec, _)| spec.name == tool) else {
            return ToolOutput::error(format!("{} has no tool {tool:?}", self.source));
        };
        let name = self.plugin.name();
        match self.plugin.execute(op, arguments, cancel) {
            Ok(r) if r.success => ToolOutput::ok(join_text_and_data(&r.output, &r.data_json)),
            Ok(r) => {
                let why = if r.error.is_empty() {
                    "the operation failed without saying why"
                } else {
                    &r.error
                };
                ToolOutput::error(join_text_and_data(why, &r.data_json))
            }
            Err(CallFailure::Crashed(why)) => ToolOutput::error(format!(
                "plugin {name} crashed during this call to {tool}: {why}. Its tools are \
                 unavailable for the rest of this session; the other tools still work."
            )),
            Err(CallFailure::Down(why)) => ToolOutput::error(format!(
                "plugin {name} is down ({why}), so {tool} cannot run; the other tools still work."
            )),
            Err(CallFailure::Rejected(why)) => {
                ToolOutput::error(format!("plugin {name} refused the call to {tool}: {why}"))
            }
            Err(CallFailure::Cancelled) => ToolOutput::error(format!("{tool} was cancelled")),
        }
    }
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
    fn tool_names_keep_hyphens() {
        assert_eq!(plugin_tool_name("my-plugin", "do_it"), "my-plugin_do_it");
        assert!(crate::tools::is_valid_tool_name(&plugin_tool_name(
            "my-plugin",
            "do-it"
        )));
    }
}
