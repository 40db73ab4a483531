//! `mcp_proxy:` of a state: whether the proxy is on, whether it serves the built-in tools,
//! the plugin operations it exposes (`plugin_tools`), the tool policy (`tools: {deny,
//! read_only}`) and the Bash sandbox, which `sandbox` reads.

use super::context::{Ctx, join};
use super::sandbox;
use crate::error::codes;
use crate::tools::ToolPolicy;
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{McpProxy, PluginToolsEntry, plugin_tool_name};

const PROXY_KEYS: &[&str] = &[
    "enable",
    "intercept_builtins",
    "plugin_tools",
    "sandbox",
    "tools",
];
const TOOL_POLICY_KEYS: &[&str] = &["deny", "read_only"];
const PLUGIN_TOOLS_KEYS: &[&str] = &["plugin", "expose", "timeout_seconds"];

pub(super) fn parse_proxy(cx: &mut Ctx, node: &Node, path: &str) -> Option<McpProxy> {
    let fields = cx.fields(node, path, PROXY_KEYS, codes::PROXY_UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let enable = get("enable")
        .and_then(|v| cx.boolean(v, &join(path, "enable"), codes::WRONG_TYPE))
        .unwrap_or(false);
    let intercept_builtins = get("intercept_builtins")
        .and_then(|v| cx.boolean(v, &join(path, "intercept_builtins"), codes::WRONG_TYPE))
        .unwrap_or(true);
    let mut plugin_tools = Vec::new();
    if let Some(pt) = get("plugin_tools").filter(|n| !n.is_null()) {
        let pt_path = join(path, "plugin_tools");
        match &pt.kind {
            Kind::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    let ipath = format!("{pt_path}[{i}]");
                    let Some(f) =
                        cx.fields(item, &ipath, PLUGIN_TOOLS_KEYS, codes::PROXY_UNKNOWN_KEY)
                    else {
                        continue;
                    };
                    let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
                    let plugin = match get("plugin") {
                        Some(p) => cx.string(p, &join(&ipath, "plugin")),
                        None => {
                            cx.push(
                                codes::MISSING_FIELD,
                                &join(&ipath, "plugin"),
                                item.line,
                                format!("{ipath} has no `plugin`"),
                                "add `plugin: <plugin name>` (see `awf plugins list`)",
                            );
                            None
                        }
                    };
                    let mut expose = Vec::new();
                    let mut expose_lines = Vec::new();
                    match get("expose") {
                        Some(Node {
                            kind: Kind::Seq(ops),
                            ..
                        }) => {
                            for (j, op) in ops.iter().enumerate() {
                                if let Some(s) = cx.string(op, &format!("{ipath}.expose[{j}]")) {
                                    expose.push(s);
                                    expose_lines.push(op.line);
                                }
                            }
                        }
                        Some(other) => cx.push(
                            codes::WRONG_TYPE,
                            &join(&ipath, "expose"),
                            other.line,
                            format!("{ipath}.expose must be a list, found {}", other.describe()),
                            "write `expose: [op1, op2]`",
                        ),
                        None => {}
                    }
                    if expose.is_empty()
                        && get("expose").is_none_or(|e| matches!(e.kind, Kind::Seq(_)))
                    {
                        cx.push(
                            codes::MISSING_FIELD,
                            &join(&ipath, "expose"),
                            item.line,
                            format!("{ipath} exposes no operation"),
                            "list the operations the agent may call: `expose: [op]` (see `awf plugins list`)",
                        );
                    }
                    let timeout_seconds = get("timeout_seconds").and_then(|t| {
                        let tpath = join(&ipath, "timeout_seconds");
                        match t.as_str().and_then(|s| s.parse::<u64>().ok()) {
                            Some(n) if (1..=86_400).contains(&n) => Some(n),
                            _ => {
                                cx.push(
                                    codes::INVALID_VALUE,
                                    &tpath,
                                    t.line,
                                    format!(
                                        "{tpath} must be a whole number of seconds from 1 to \
                                         86400, found {}",
                                        t.describe()
                                    ),
                                    "write e.g. `timeout_seconds: 300` (the default is Bash's, 120)",
                                );
                                None
                            }
                        }
                    });
                    if let Some(plugin) = plugin {
                        plugin_tools.push(PluginToolsEntry {
                            plugin,
                            expose,
                            timeout_seconds,
                            expose_lines,
                            line: item.line,
                            index: i,
                        });
                    }
                }
            }
            _ => cx.push(
                codes::WRONG_TYPE,
                &pt_path,
                pt.line,
                format!("{pt_path} must be a list, found {}", pt.describe()),
                "write `plugin_tools:` then `- plugin: name` items with `expose: [op]`",
            ),
        }
    }
    let sandbox = get("sandbox")
        .map(|n| sandbox::parse_sandbox(cx, n, &join(path, "sandbox")))
        .unwrap_or_default();
    let tools = match get("tools").filter(|n| !n.is_null()) {
        Some(t) => parse_tool_policy(
            cx,
            t,
            &join(path, "tools"),
            intercept_builtins,
            &plugin_tools,
        ),
        None => ToolPolicy::default(),
    };
    Some(McpProxy {
        enable,
        intercept_builtins,
        plugin_tools,
        sandbox,
        tools,
        path: path.to_string(),
        line: node.line,
    })
}

/// `mcp_proxy.tools`: `deny: [names]` (each a tool of the step) and `read_only: bool`.
fn parse_tool_policy(
    cx: &mut Ctx,
    node: &Node,
    path: &str,
    intercept_builtins: bool,
    plugin_tools: &[PluginToolsEntry],
) -> ToolPolicy {
    let mut policy = ToolPolicy::default();
    let Some(fields) = cx.fields(node, path, TOOL_POLICY_KEYS, codes::PROXY_UNKNOWN_KEY) else {
        return policy;
    };
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    if let Some(v) = get("read_only") {
        policy.read_only = cx
            .boolean(v, &join(path, "read_only"), codes::WRONG_TYPE)
            .unwrap_or(false);
    }
    let mut known: Vec<String> = Vec::new();
    if intercept_builtins {
        known.extend(crate::builtins::NAMES.iter().map(|n| n.to_string()));
    }
    for p in plugin_tools {
        for op in &p.expose {
            known.push(plugin_tool_name(&p.plugin, op));
        }
    }
    match get("deny") {
        None => {}
        Some(Node {
            kind: Kind::Seq(items),
            ..
        }) => {
            for (i, item) in items.iter().enumerate() {
                let ipath = format!("{path}.deny[{i}]");
                let Some(name) = cx.string(item, &ipath) else {
                    continue;
                };
                if !known.contains(&name) {
                    cx.push(
                        codes::UNKNOWN_TOOL,
                        &ipath,
                        item.line,
                        format!("{ipath}: {name:?} is not a tool of this step"),
                        format!("deny one of the step's tools: {}", known.join(", ")),
                    );
                }
                policy.deny.push(name);
            }
        }
        Some(other) => cx.push(
            codes::WRONG_TYPE,
            &join(path, "deny"),
            other.line,
            format!("{path}.deny must be a list, found {}", other.describe()),
            "write `deny: [Bash, Write]`",
        ),
    }
    policy
}
