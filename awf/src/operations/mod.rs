//! AWF's own operations, beside the plugins' ones: `http.request` ([`http`]),
//! `notify.send` ([`notify`]) and `github.*` ([`github`]). An `operation` state names them
//! as it names a plugin's (`operation: http.request`); they are served as the tools
//! `<provider>_<op>` of the step's `awf mcp-serve` ([`BuiltinOperations`], a
//! [`ToolSource`]), so each call is audited and traced as any operation's, and the result
//! is its outputs as a JSON object (the state's output; `.JSON` and `.Response` read it).
//!
//! Their requests go through the state's `network` (the egress rules Bash's
//! `network:` takes): absent, public addresses only; `{allow: [hosts]}`, those hosts
//! only (a private address written as one); `deny`, nothing; `allow`, anywhere.

pub mod github;
pub mod http;
pub mod notify;

use crate::confine::Network;
use crate::https::Reach;
use crate::tools::ToolSource;
use mcpserver::{CallContext, ServerBuilder, Tool, ToolResult};
use serde_json::{Map, Value, json};
use std::time::Duration;

pub use crate::workflow::{BUILTIN_OPERATIONS as PROVIDERS, builtin_operations as operations};

/// What one operation gives back: its outputs, and why it failed when it did.
pub struct Outcome {
    pub outputs: Map<String, Value>,
    pub error: Option<String>,
}

impl Outcome {
    pub fn ok(outputs: Map<String, Value>) -> Outcome {
        Outcome {
            outputs,
            error: None,
        }
    }

    pub fn failed(why: impl Into<String>) -> Outcome {
        Outcome {
            outputs: Map::new(),
            error: Some(why.into()),
        }
    }
}

/// Where an operation's requests may go, from its state's `network`.
pub fn reach(network: Option<&Network>) -> Result<Reach, String> {
    Ok(match network {
        None => Reach::Public(
            "an operation reaches public addresses only unless its state allows the host: \
             `network: {allow: [\"10.0.0.5:8080\"]}`",
        ),
        Some(Network::Allow) => Reach::Any,
        Some(Network::Deny) => Reach::Nowhere,
        Some(Network::Hosts(hosts)) => {
            Reach::Hosts(crate::confine::egress::rules::AllowList::parse(hosts)?)
        }
    })
}

/// One provider's operations a step exposes, as tools.
pub struct BuiltinOperations {
    provider: &'static str,
    source: String,
    ops: Vec<(String, Duration)>,
    reach: Reach,
}

impl BuiltinOperations {
    /// The operations `ops` (with their deadlines) of builtin provider `provider`.
    pub fn new(
        provider: &str,
        ops: Vec<(String, Duration)>,
        network: Option<&Network>,
    ) -> Result<BuiltinOperations, String> {
        let (name, known) = PROVIDERS
            .iter()
            .find(|(p, _)| *p == provider)
            .ok_or_else(|| format!("{provider} is no builtin provider"))?;
        if let Some((op, _)) = ops.iter().find(|(op, _)| !known.contains(&op.as_str())) {
            return Err(format!(
                "operation \"{provider}.{op}\" not found; {provider} has {}",
                known.join(", ")
            ));
        }
        Ok(BuiltinOperations {
            provider: name,
            source: format!("builtin:{name}"),
            ops,
            reach: reach(network)?,
        })
    }
}

impl ToolSource for BuiltinOperations {
    fn source(&self) -> &str {
        &self.source
    }

    fn names(&self) -> Vec<String> {
        self.ops
            .iter()
            .map(|(op, _)| crate::workflow::plugin_tool_name(self.provider, op))
            .collect()
    }

    fn register(&self, mut b: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder {
        for (op, timeout) in &self.ops {
            let name = crate::workflow::plugin_tool_name(self.provider, op);
            if !offered(&name) {
                continue;
            }
            let tool = Tool::new(
                &name,
                format!("AWF's builtin operation {}.{op}", self.provider),
                json!({"type": "object"}),
            );
            let (provider, op, timeout, reach) =
                (self.provider, op.clone(), *timeout, self.reach.clone());
            b = b.tool_raw(tool, move |args: Value, _ctx: &CallContext| {
                let outcome = run(provider, &op, &args, &reach, timeout);
                let text = Value::Object(outcome.outputs.clone()).to_string();
                Ok::<_, String>(match outcome.error {
                    None => ToolResult::text(text),
                    Some(why) if outcome.outputs.is_empty() => ToolResult::error(why),
                    Some(why) => ToolResult::error(format!("{why}\n{text}")),
                })
            });
        }
        b
    }
}

/// Runs one operation.
pub fn run(provider: &str, op: &str, inputs: &Value, reach: &Reach, timeout: Duration) -> Outcome {
    let empty = Map::new();
    let inputs = inputs.as_object().unwrap_or(&empty);
    match provider {
        "http" => http::request(inputs, reach, timeout),
        "notify" => notify::send(inputs, reach, timeout),
        "github" => github::run(op, inputs, reach, timeout),
        other => Outcome::failed(format!("{other} is no builtin provider")),
    }
}
