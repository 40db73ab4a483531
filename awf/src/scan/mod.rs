//! What tools send back, scanned before the model sees it, for builtins, plugins and
//! servers alike: secrets in results ([`secrets`]: redacted by default, each with a
//! `secret.redacted` audit record) and tool descriptions and schemas that hide or smuggle
//! something ([`descriptions`]: control and invisible characters, instructions aimed at the
//! model, other tools' names; a warning by default, `refuse` withholds the tool).
//!
//! The settings ([`Scan`]) are a step's (`mcp_proxy.scan`, the `awf mcp-serve` config's
//! `scan`) and a server's own (`servers.<name>.scan`, over the step's for its tools).

pub mod descriptions;
pub mod secrets;

use crate::telemetry::Telemetry;
use mcpserver::{CallContext, Content, ToolResult};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What is done with what a scan finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Not scanned.
    Off,
    /// Found, logged and audited; passed on as it is.
    Warn,
    /// Replaced by a marker naming its kind (results), and audited.
    Redact,
    /// The whole result (or tool) withheld, saying why, and audited.
    Refuse,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Warn => "warn",
            Mode::Redact => "redact",
            Mode::Refuse => "refuse",
        }
    }
}

/// `scan:` of a step or a server: one word for both, or each on its own. A word sets
/// results to it, and descriptions to it too (`redact`, which means nothing for a
/// description, to `warn`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "ScanInput")]
pub struct Scan {
    /// Secrets in tool results; absent: the step's, else `redact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Mode>,
    /// Tool descriptions and schemas; absent: the step's, else `warn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub descriptions: Option<Mode>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScanInput {
    Word(Mode),
    #[serde(rename_all = "snake_case")]
    Each {
        #[serde(default)]
        results: Option<Mode>,
        #[serde(default)]
        descriptions: Option<Mode>,
    },
}

impl From<ScanInput> for Scan {
    fn from(input: ScanInput) -> Scan {
        match input {
            ScanInput::Word(m) => Scan::word(m),
            ScanInput::Each {
                results,
                descriptions,
            } => Scan {
                results,
                descriptions,
            },
        }
    }
}

impl Scan {
    /// What one word (`scan: refuse`) sets.
    pub fn word(m: Mode) -> Scan {
        Scan {
            results: Some(m),
            descriptions: Some(if m == Mode::Redact { Mode::Warn } else { m }),
        }
    }

    /// Nothing set (every default).
    pub fn is_unset(&self) -> bool {
        self.results.is_none() && self.descriptions.is_none()
    }

    /// These settings over `base` (a server's over its step's).
    pub fn over(self, base: Scan) -> Scan {
        Scan {
            results: self.results.or(base.results),
            descriptions: self.descriptions.or(base.descriptions),
        }
    }

    pub fn results(self) -> Mode {
        self.results.unwrap_or(Mode::Redact)
    }

    /// `redact` is no mode for a description: it counts as `warn`.
    pub fn descriptions(self) -> Mode {
        match self.descriptions.unwrap_or(Mode::Warn) {
            Mode::Redact => Mode::Warn,
            m => m,
        }
    }
}

/// Builds the secret shapes on a thread of its own, off the first tool call's path (about
/// 1 ms, and as much again for their first search): a server calls it when it starts.
pub fn warm_up() {
    let _ = std::thread::Builder::new()
        .name("awf-scan-warm-up".into())
        .spawn(|| {
            secrets::find("export API_TOKEN=x\nAuthorization: Bearer y\n-----BEGIN KEY-----");
        });
}

/// The result filter of a step's server: each tool's result scanned for secrets as its
/// mode says (`modes`: a tool's own, from its server's `scan`; else `default`).
pub fn result_filter(
    default: Mode,
    modes: HashMap<String, Mode>,
    sources: Arc<HashMap<String, String>>,
    telemetry: Arc<Telemetry>,
) -> impl Fn(&CallContext, &mut ToolResult) + Send + Sync + 'static {
    move |ctx, result| {
        let mode = modes.get(ctx.tool()).copied().unwrap_or(default);
        if mode == Mode::Off {
            return;
        }
        let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
        let replace = mode == Mode::Redact;
        for item in &mut result.content {
            match item {
                Content::Text { text } => scan_text(text, replace, &mut kinds),
                Content::Resource { resource } => {
                    if let Some(Value::String(text)) = resource.get_mut("text") {
                        scan_text(text, replace, &mut kinds);
                    }
                }
                _ => {}
            }
        }
        if let Some(structured) = result.structured_content.as_mut() {
            scan_value(structured, replace, &mut kinds);
        }
        if kinds.is_empty() {
            return;
        }
        let listed = kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        let tool = ctx.tool();
        let source = sources.get(tool).cloned().unwrap_or_default();
        let (kind, action) = match mode {
            Mode::Warn => ("secret.found", "passed on (scan: warn)"),
            Mode::Refuse => (
                "secret.redacted",
                "withheld the whole result (scan: refuse)",
            ),
            _ => ("secret.redacted", "redacted"),
        };
        if mode == Mode::Refuse {
            *result = ToolResult::error(format!(
                "awf withheld the result of {tool}: it held a secret ({listed}); the step's scan \
                 setting is refuse"
            ));
        }
        tracing::warn!(tool = %tool, source = %source, "a secret in the result of {tool} ({listed}): {action}");
        let mut fields = Map::new();
        fields.insert("tool".into(), tool.into());
        fields.insert("source".into(), source.into());
        fields.insert("request_id".into(), ctx.request_id().to_string().into());
        fields.insert("mode".into(), mode.as_str().into());
        // A list, not a map by kind: the audit masks the value of a key that looks secret
        // (`github-token`).
        fields.insert(
            "found".into(),
            kinds
                .iter()
                .map(|(k, n)| serde_json::json!({"kind": k, "count": n}))
                .collect::<Vec<_>>()
                .into(),
        );
        telemetry.record(kind, fields);
    }
}

fn scan_text(text: &mut String, replace: bool, kinds: &mut BTreeMap<&'static str, usize>) {
    if replace {
        let (out, found) = secrets::redact(text);
        if !found.is_empty() {
            *text = out;
        }
        for f in found {
            *kinds.entry(f.kind).or_default() += 1;
        }
    } else {
        for f in secrets::find(text) {
            *kinds.entry(f.kind).or_default() += 1;
        }
    }
}

fn scan_value(value: &mut Value, replace: bool, kinds: &mut BTreeMap<&'static str, usize>) {
    match value {
        Value::String(s) => scan_text(s, replace, kinds),
        Value::Array(items) => items.iter_mut().for_each(|v| scan_value(v, replace, kinds)),
        Value::Object(map) => map.values_mut().for_each(|v| scan_value(v, replace, kinds)),
        _ => {}
    }
}
