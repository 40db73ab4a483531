//! `operation` states: one operation of an installed plugin, called as an agent's tool call
//! would be — through the step's own `awf mcp-serve` (the plugin started in the jail plugins
//! get, the call audited in the state's audit file and traced as a span under the state's)
//! — with the state's `inputs` (the templates in their strings rendered) as arguments. The
//! state's output is the operation's result text; an error result fails the state.

use super::engine::Runner;
use super::report::{StateResult, Status};
use crate::client::McpClient;
use crate::error::{AwfError, codes};
use crate::workflow::check::PluginCatalog;
use crate::workflow::{self, McpProxy, OperationState, PluginToolsEntry};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Instant;

impl Runner<'_> {
    pub(super) fn run_operation(
        &mut self,
        name: &str,
        seq: usize,
        o: &OperationState,
        t0: Instant,
    ) -> StateResult {
        let mut r = StateResult::new(name, "operation");
        if let Err(e) = self.operation_inner(name, seq, o, &mut r) {
            r.status = Status::Failure;
            r.error = Some((&e).into());
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    /// `inputs` with the templates in its strings rendered.
    fn render_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.render(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.render_value(x)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (k.clone(), self.render_value(x)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn operation_inner(
        &mut self,
        name: &str,
        seq: usize,
        o: &OperationState,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let state = self.wf.state(name).expect("validated");
        // Looked up now, as AWF does (`awf validate` warned of it).
        let known = match crate::operations::operations(&o.plugin) {
            Some(ops) => ops.contains(&o.op.as_str()),
            None if o.plugin.is_empty() => false,
            None => self
                .plugins
                .operations(&o.plugin)
                .is_ok_and(|ops| ops.iter().any(|x| x == &o.op)),
        };
        if !known {
            let written = if o.plugin.is_empty() {
                o.op.clone()
            } else {
                format!("{}.{}", o.plugin, o.op)
            };
            return Err(AwfError::new(
                codes::TOOL_FAILED,
                format!("step {name}: operation {written:?} not found"),
            ));
        }
        // awf's own operations reach only what the state's network lets them.
        let sandbox = crate::operations::operations(&o.plugin).map(|_| crate::confine::Sandbox {
            network: o.network.clone(),
            ..Default::default()
        });
        let proxy = McpProxy {
            enable: true,
            intercept_builtins: false,
            plugin_tools: vec![PluginToolsEntry {
                plugin: o.plugin.clone(),
                expose: vec![o.op.clone()],
                timeout_seconds: o.timeout.map(|t| t.as_secs().max(1)),
                sandbox,
                expose_lines: vec![state.line_of("operation")],
                line: state.line_of("operation"),
                index: 0,
            }],
            sandbox: Default::default(),
            tools: Default::default(),
            servers: Vec::new(),
            // No model reads an operation's result: the workflow does, as it is.
            scan: crate::scan::Scan::word(crate::scan::Mode::Off),
            pins: None,
            workflow_file: self.wf.path.clone(),
            path: format!("states.{name}"),
            line: state.line,
        };
        let arguments = self.render_value(&o.inputs);
        let session =
            self.proxy
                .start(name, seq, &proxy, &mut self.plugins, &self.step_traceparent)?;
        let tool = workflow::plugin_tool_name(&o.plugin, &o.op);
        let mut cmd = Command::new(&session.injection.command);
        crate::child_env::without_audit_key(&mut cmd)
            .args(&session.injection.args)
            .envs(session.injection.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.workdir);
        let called = (|| {
            let mut client = McpClient::spawn(cmd)?;
            client.initialize()?;
            let answer =
                client.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
            let _ = client.close();
            Ok::<_, AwfError>(answer)
        })();
        r.proxy = Some(self.proxy.close(session, None));
        let result = called?.map_err(|e| {
            AwfError::new(
                codes::TOOL_FAILED,
                format!(
                    "operation {}.{} of state {name:?} was refused: {} ({})",
                    o.plugin, o.op, e.message, e.code
                ),
            )
        })?;
        let text: String = result["content"]
            .as_array()
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        r.output = self.mask_secrets(text.trim_end_matches('\n').to_string());
        if result["isError"].as_bool() == Some(true) {
            return Err(AwfError::new(
                codes::TOOL_FAILED,
                format!(
                    "operation {}.{} of state {name:?} failed: {}",
                    o.plugin,
                    o.op,
                    crate::terminal::printable(&r.output)
                ),
            ));
        }
        Ok(())
    }
}
