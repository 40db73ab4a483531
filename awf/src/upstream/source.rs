//! A server's tools as one [`ToolSource`] of a step's tool set: each upstream tool `t`
//! offered as `<server>_<t>` (or `<server>_<rename[t]>`) with its own description,
//! schemas and annotations; those its `tools` block or its pins keep back are withheld
//! with why. A call goes upstream with the call's deadline and cancellation, and its
//! result comes back bounded like the builtins'.

use super::link::Link;
use crate::telemetry::CallScope;
use crate::tools::ToolSource;
use mcpserver::{CallContext, CallError, Content, ServerBuilder, Tool, ToolResult};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest tool-name prefix a client adds (Claude Code's `mcp__<server>__`, with
/// awf's server name `awf`); a name must fit in 64 characters after it.
pub const CLIENT_PREFIX: &str = "mcp__awf__";

/// One re-exported tool.
#[derive(Clone)]
pub struct Exposed {
    pub tool: Tool,
    pub upstream: String,
    /// Its pinned hash, to tell a change during the run.
    pub hash: String,
    /// `annotations.readOnlyHint: true`.
    pub read_only: bool,
}

/// A started server's tools.
pub struct ServerSource {
    source: String,
    pub(super) link: Arc<Link>,
    pub(super) offered: Vec<Exposed>,
    /// (tool name, why), for tools the agent does not get.
    pub(super) withheld: Vec<(String, String)>,
    /// Tools withdrawn while the step runs (upstream name → why).
    pub(super) withdrawn: Arc<Mutex<HashMap<String, String>>>,
    /// The calls of this server in flight, for what its jail reports meanwhile.
    pub(super) in_flight: Arc<Mutex<Vec<CallScope>>>,
    pub(super) timeout: Duration,
    pub(super) output_bytes: usize,
    pub(super) shutdown: crate::process::Shutdown,
    /// The serving server's gate, once it is built.
    pub(super) gate: Arc<std::sync::OnceLock<mcpserver::ToolGate>>,
}

impl ServerSource {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        name: &str,
        link: Arc<Link>,
        offered: Vec<Exposed>,
        withheld: Vec<(String, String)>,
        withdrawn: Arc<Mutex<HashMap<String, String>>>,
        in_flight: Arc<Mutex<Vec<CallScope>>>,
        timeout: Duration,
        output_bytes: usize,
        shutdown: crate::process::Shutdown,
        gate: Arc<std::sync::OnceLock<mcpserver::ToolGate>>,
    ) -> ServerSource {
        ServerSource {
            source: format!("server:{name}"),
            link,
            offered,
            withheld,
            withdrawn,
            in_flight,
            timeout,
            output_bytes,
            shutdown,
            gate,
        }
    }
}

impl Drop for ServerSource {
    fn drop(&mut self) {
        self.link.stop(Duration::from_millis(500));
    }
}

impl ToolSource for ServerSource {
    fn source(&self) -> &str {
        &self.source
    }

    fn names(&self) -> Vec<String> {
        self.offered
            .iter()
            .map(|e| e.tool.name().to_string())
            .chain(self.withheld.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    fn withheld(&self) -> Vec<(String, String)> {
        self.withheld.clone()
    }

    fn read_only(&self, name: &str) -> bool {
        self.offered
            .iter()
            .any(|e| e.tool.name() == name && e.read_only)
    }

    fn upstream_name(&self, name: &str) -> Option<String> {
        self.offered
            .iter()
            .find(|e| e.tool.name() == name)
            .map(|e| e.upstream.clone())
    }

    fn serving(&self, gate: &mcpserver::ToolGate) {
        let _ = self.gate.set(gate.clone());
        // What was withdrawn before the server was built is withheld now.
        for (upstream, why) in self
            .withdrawn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if let Some(e) = self.offered.iter().find(|e| &e.upstream == upstream) {
                gate.withhold(e.tool.name(), why.clone());
            }
        }
    }

    fn register(&self, mut b: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder {
        for e in &self.offered {
            if !offered(e.tool.name()) {
                continue;
            }
            let link = self.link.clone();
            let upstream = e.upstream.clone();
            let withdrawn = self.withdrawn.clone();
            let in_flight = self.in_flight.clone();
            let shutdown = self.shutdown.clone();
            let (timeout, output_bytes) = (self.timeout, self.output_bytes);
            b = b.tool(e.tool.clone(), move |args: Value, ctx: &CallContext| {
                if let Some(why) = withdrawn
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&upstream)
                {
                    return Err(CallError::Failed(format!(
                        "{} is withheld: {why}",
                        ctx.tool()
                    )));
                }
                let scope = CallScope::current();
                if let Some(s) = &scope {
                    in_flight
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(s.clone());
                }
                let answer = link.call(&upstream, &args, timeout, &|| {
                    ctx.is_cancelled() || shutdown.is_set()
                });
                if let Some(s) = &scope {
                    let mut open = in_flight.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(i) = open.iter().position(|o| o.call_id() == s.call_id()) {
                        open.remove(i);
                    }
                }
                match answer {
                    Ok(result) => Ok(to_result(&result, output_bytes)),
                    Err(why) => Err(CallError::Failed(why)),
                }
            });
        }
        b
    }
}

/// The upstream tool definition as the tool this server offers under `name`.
pub(super) fn tool_from(name: &str, upstream: &Value) -> Tool {
    let description = upstream
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let schema = match upstream.get("inputSchema") {
        Some(s) if s.is_object() => s.clone(),
        _ => json!({"type": "object"}),
    };
    let mut tool = Tool::new(name, description, schema);
    if let Some(t) = upstream.get("title").and_then(Value::as_str) {
        tool = tool.title(t);
    }
    if let Some(a) = upstream.get("annotations").filter(|a| a.is_object()) {
        tool = tool.annotations(a.clone());
    }
    if let Some(s) = upstream
        .get("outputSchema")
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
    {
        tool = tool.output_schema(s.clone());
    }
    tool
}

/// An upstream `tools/call` result as the agent gets it: its content in order until
/// `bound` bytes (text cut with a note, other items over the bound replaced by one), its
/// `isError`, and its structured content when it is an object within the bound.
pub fn to_result(result: &Value, bound: usize) -> ToolResult {
    let hint = "ask the tool for less (a narrower query, a page of results)";
    let mut left = bound;
    let mut content = Vec::new();
    let items = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        if left == 0 {
            content.push(Content::text(format!(
                "[{} more content item(s) left out: the result passed its {bound}-byte bound]",
                items.len() - i
            )));
            break;
        }
        match kind {
            "text" => {
                let text = item.get("text").and_then(Value::as_str).unwrap_or("");
                if text.len() > left {
                    content.push(Content::text(crate::builtins::bound::bound_text(
                        text.to_string(),
                        left,
                        hint,
                    )));
                    left = 0;
                } else {
                    left -= text.len();
                    content.push(Content::text(text));
                }
            }
            other => {
                let size = item.to_string().len();
                if size > left {
                    content.push(Content::text(format!(
                        "[{other} content of {size} bytes left out: over what is left of the \
                         result's {bound}-byte bound]"
                    )));
                    left = 0;
                    continue;
                }
                left -= size;
                content.push(match other {
                    "image" => Content::image(
                        item.get("data").and_then(Value::as_str).unwrap_or(""),
                        item.get("mimeType").and_then(Value::as_str).unwrap_or(""),
                    ),
                    "resource" => {
                        Content::resource(item.get("resource").cloned().unwrap_or(Value::Null))
                    }
                    // Audio, resource links and what later revisions add reach the model
                    // as their JSON.
                    _ => Content::text(item.to_string()),
                });
            }
        }
    }
    let mut out = ToolResult::new(content);
    out.is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if let Some(s) = result.get("structuredContent").filter(|s| s.is_object()) {
        let size = s.to_string().len();
        if size <= bound {
            out = out.with_structured(s.clone());
        } else {
            out.content.push(Content::text(format!(
                "[structured content left out: {size} bytes, over the {bound}-byte bound]"
            )));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(r: &ToolResult) -> String {
        r.content
            .iter()
            .map(|c| match c {
                Content::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
            .join("|")
    }

    #[test]
    fn results_keep_their_items_and_error_flag_within_the_bound() {
        let r = to_result(
            &json!({"content": [{"type": "text", "text": "hi"},
                                {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
                    "isError": true, "structuredContent": {"a": 1}}),
            4096,
        );
        assert!(r.is_error);
        assert_eq!(r.content[0], Content::text("hi"));
        assert_eq!(r.content[1], Content::image("AAAA", "image/png"));
        assert_eq!(r.structured_content, Some(json!({"a": 1})));
    }

    #[test]
    fn a_big_result_is_cut_with_a_note() {
        let big = "x".repeat(20_000_000);
        let r = to_result(
            &json!({"content": [{"type": "text", "text": big}, {"type": "text", "text": "after"}],
                    "structuredContent": {"big": "y".repeat(10_000)}}),
            8192,
        );
        let t = text_of(&r);
        assert!(t.len() < 10_000, "{}", t.len());
        assert!(t.contains("more content item(s) left out"), "{t}");
        assert!(t.contains("structured content left out"), "{t}");
        assert!(!r.is_error && r.structured_content.is_none());
    }

    #[test]
    fn tools_keep_their_upstream_fields() {
        let t = tool_from(
            "s_echo",
            &json!({"name": "echo", "description": "Echo", "title": "The echo",
                    "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true},
                    "outputSchema": {"type": "object"}}),
        );
        assert_eq!(t.name(), "s_echo");
        assert_eq!(t.description(), "Echo");
        assert_eq!(t.input_schema(), &json!({"type": "object"}));
        let bare = tool_from("s_x", &json!({"name": "x", "inputSchema": "nonsense"}));
        assert_eq!(bare.input_schema(), &json!({"type": "object"}));
    }
}
