//! `mcp_proxy:` of a state: whether the proxy is on, whether it serves the built-in tools,
//! the plugin operations it exposes (`plugin_tools`), the third-party servers it starts
//! (`servers`, read in `servers`) and the lock file of their tool pins (`pins`), the tool
//! policy (`tools: {deny, read_only}`) and the Bash sandbox, which `sandbox` reads.

use super::context::{Ctx, join, seconds};
use super::sandbox;
use super::servers::parse_servers;
use crate::error::codes;
use crate::tools::ToolPolicy;
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{McpProxy, McpServer, PluginToolsEntry, plugin_tool_name};
use std::path::{Path, PathBuf};

const PROXY_KEYS: &[&str] = &[
    "enable",
    "intercept_builtins",
    "plugin_tools",
    "servers",
    "pins",
    "sandbox",
    "tools",
    "scan",
];
const TOOL_POLICY_KEYS: &[&str] = &["deny", "read_only"];
const PLUGIN_TOOLS_KEYS: &[&str] = &["plugin", "expose", "timeout_seconds", "sandbox"];

pub(super) fn parse_proxy(cx: &mut Ctx, node: &Node, path: &str) -> Option<McpProxy> {
    let fields = cx.fields(node, path, PROXY_KEYS, codes::PROXY_UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let enable = get("enable")
        .and_then(|v| cx.boolean(v, &join(path, "enable"), codes::WRONG_TYPE))
        .unwrap_or(false);
    let intercept_builtins = get("intercept_builtins")
        .and_then(|v| cx.boolean(v, &join(path, "intercept_builtins"), codes::WRONG_TYPE))
        .unwrap_or(true);
    let plugin_tools = get("plugin_tools")
        .filter(|n| !n.is_null())
        .map(|pt| parse_plugin_tools(cx, pt, &join(path, "plugin_tools")))
        .unwrap_or_default();
    let servers = get("servers")
        .map(|n| parse_servers(cx, n, &join(path, "servers")))
        .unwrap_or_default();
    let pins = get("pins").and_then(|n| pins_file(cx, n, &join(path, "pins")));
    let sandbox = get("sandbox")
        .map(|n| sandbox::parse_sandbox(cx, n, &join(path, "sandbox"), true))
        .unwrap_or_default();
    let tools = match get("tools").filter(|n| !n.is_null()) {
        Some(t) => parse_tool_policy(
            cx,
            t,
            &join(path, "tools"),
            intercept_builtins,
            &plugin_tools,
            &servers,
        ),
        None => ToolPolicy::default(),
    };
    let scan = get("scan")
        .map(|n| super::scan::parse_scan(cx, n, &join(path, "scan")))
        .unwrap_or_default();
    Some(McpProxy {
        scan,
        enable,
        intercept_builtins,
        plugin_tools,
        sandbox,
        tools,
        servers,
        pins,
        workflow_file: cx.file.clone(),
        path: path.to_string(),
        line: node.line,
    })
}

/// `plugin_tools:`: the list of plugins whose operations the agent is offered.
fn parse_plugin_tools(cx: &mut Ctx, pt: &Node, pt_path: &str) -> Vec<PluginToolsEntry> {
    let Kind::Seq(items) = &pt.kind else {
        cx.push(
            codes::WRONG_TYPE,
            pt_path,
            pt.line,
            format!("{pt_path} must be a list, found {}", pt.describe()),
            "write `plugin_tools:` then `- plugin: name` items with `expose: [op]`",
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| parse_plugin_entry(cx, item, &format!("{pt_path}[{i}]"), i))
        .collect()
}

/// One `plugin_tools` item: its plugin, the operations it exposes, their deadline and the
/// plugin's jail (a server's keys and defaults). None without a plugin.
fn parse_plugin_entry(
    cx: &mut Ctx,
    item: &Node,
    ipath: &str,
    i: usize,
) -> Option<PluginToolsEntry> {
    let f = cx.fields(item, ipath, PLUGIN_TOOLS_KEYS, codes::PROXY_UNKNOWN_KEY)?;
    let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let plugin = match get("plugin") {
        Some(p) => cx.string(p, &join(ipath, "plugin")),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                &join(ipath, "plugin"),
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
            &join(ipath, "expose"),
            other.line,
            format!("{ipath}.expose must be a list, found {}", other.describe()),
            "write `expose: [op1, op2]`",
        ),
        None => {}
    }
    if expose.is_empty() && get("expose").is_none_or(|e| matches!(e.kind, Kind::Seq(_))) {
        cx.push(
            codes::MISSING_FIELD,
            &join(ipath, "expose"),
            item.line,
            format!("{ipath} exposes no operation"),
            "list the operations the agent may call: `expose: [op]` (see `awf plugins list`)",
        );
    }
    let timeout_seconds = get("timeout_seconds").and_then(|t| {
        seconds(
            cx,
            t,
            &join(ipath, "timeout_seconds"),
            "write e.g. `timeout_seconds: 300` (the default is Bash's, 120)",
        )
    });
    // The plugin's jail: a server's keys and defaults.
    let sandbox =
        get("sandbox").map(|n| sandbox::parse_sandbox(cx, n, &join(ipath, "sandbox"), false));
    Some(PluginToolsEntry {
        plugin: plugin?,
        expose,
        timeout_seconds,
        sandbox,
        expose_lines,
        line: item.line,
        index: i,
    })
}

/// `pins: FILE`: the lock file of the servers' tool pins, relative to the workflow's
/// directory; awf writes it on the first run, so its directory must exist and the name must
/// not be a directory.
fn pins_file(cx: &mut Ctx, node: &Node, path: &str) -> Option<PathBuf> {
    let text = cx.string(node, path)?;
    let wf_dir = cx.file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let file = wf_dir.join(&text);
    let problem = if text.is_empty() {
        Some(format!("{path} is empty"))
    } else if file.is_dir() {
        Some(format!("{path}: {} is a directory", file.display()))
    } else if !file
        .parent()
        .is_some_and(|d| d.as_os_str().is_empty() || d.is_dir())
    {
        Some(format!(
            "{path}: the directory of {} does not exist, so the pins could not be recorded",
            file.display()
        ))
    } else {
        None
    };
    if let Some(message) = problem {
        cx.push(
            codes::INVALID_VALUE,
            path,
            node.line,
            message,
            "name a file in an existing directory, relative to the workflow's (e.g. \
             `pins: fix.lock.json`, the default beside fix.yaml); commit it like a package lock",
        );
        return None;
    }
    Some(file)
}

/// `mcp_proxy.tools`: `deny: [names]` (each a tool of the step) and `read_only: bool`.
fn parse_tool_policy(
    cx: &mut Ctx,
    node: &Node,
    path: &str,
    intercept_builtins: bool,
    plugin_tools: &[PluginToolsEntry],
    servers: &[McpServer],
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
                // A server's tools are known once it runs: any name after its prefix.
                let of_a_server = servers.iter().any(|s| {
                    name.strip_prefix(&s.name)
                        .is_some_and(|t| t.len() > 1 && t.starts_with('_'))
                });
                if !known.contains(&name) && !of_a_server {
                    let servers: Vec<String> = servers
                        .iter()
                        .map(|s| format!("{}_<tool>", s.name))
                        .collect();
                    cx.push(
                        codes::UNKNOWN_TOOL,
                        &ipath,
                        item.line,
                        format!("{ipath}: {name:?} is not a tool of this step"),
                        format!(
                            "deny one of the step's tools: {}",
                            known
                                .iter()
                                .chain(&servers)
                                .cloned()
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
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

#[cfg(test)]
mod tests {
    use crate::error::codes;
    use crate::workflow::{Diagnostic, McpProxy, StateKind, parse::parse};
    use std::path::Path;

    /// The `mcp_proxy` of an agent state (`proxy`: lines at the proxy's indentation) of
    /// the workflow file `file`.
    fn parse_proxy(file: &Path, proxy: &str) -> (Option<McpProxy>, Vec<Diagnostic>) {
        let text = format!(
            "name: s\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    \
             prompt: p\n    mcp_proxy:\n{proxy}    on_success: done\n  done:\n    type: \
             terminal\n"
        );
        let (wf, diags) = parse(&text, file);
        let proxy = wf.and_then(|wf| match &wf.states[0].kind {
            StateKind::Agent(a) => a.mcp_proxy.clone(),
            _ => None,
        });
        (proxy, diags)
    }

    #[test]
    fn the_lock_file_is_beside_the_workflow_unless_pins_names_one() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-pins-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("locks")).unwrap();
        let wf = dir.join("fix.yaml");
        let (p, diags) = parse_proxy(&wf, "      enable: true\n");
        assert!(diags.is_empty(), "{diags:#?}");
        let p = p.unwrap();
        assert_eq!((&p.pins, &p.workflow_file), (&None, &wf));
        assert_eq!(p.lock_file(), dir.join("fix.lock.json"));

        let (p, diags) = parse_proxy(&wf, "      enable: true\n      pins: locks/fix.json\n");
        assert!(diags.is_empty(), "{diags:#?}");
        assert_eq!(p.unwrap().lock_file(), dir.join("locks/fix.json"));

        for (pins, words) in [
            ("locks", "is a directory"),
            ("missing/fix.json", "does not exist"),
            ("\"\"", "is empty"),
        ] {
            let (p, diags) = parse_proxy(&wf, &format!("      enable: true\n      pins: {pins}\n"));
            assert_eq!(diags.len(), 1, "{pins}: {diags:#?}");
            let d = &diags[0];
            assert_eq!(d.code, codes::INVALID_VALUE);
            assert_eq!(d.path, "states.a.mcp_proxy.pins");
            assert_eq!(d.line, Some(10));
            assert!(d.message.contains(words), "{pins}: {d:#?}");
            assert!(d.hint.contains("existing directory"), "{d:#?}");
            assert_eq!(p.unwrap().pins, None);
        }
    }

    #[test]
    fn tools_deny_may_name_a_server_s_tools_by_their_prefix() {
        let wf = Path::new("/nowhere/wf.yaml");
        let (p, diags) = parse_proxy(
            wf,
            "      enable: true\n      servers:\n        gh:\n          command: [srv]\n      \
             tools: {deny: [gh_delete_repository, Bash]}\n",
        );
        assert!(diags.is_empty(), "{diags:#?}");
        assert_eq!(p.unwrap().tools.deny, ["gh_delete_repository", "Bash"]);
        for name in ["gh_", "gh", "ghx_tool", "other_tool"] {
            let (_, diags) = parse_proxy(
                wf,
                &format!(
                    "      enable: true\n      servers:\n        gh:\n          command: \
                     [srv]\n      tools: {{deny: [{name}]}}\n"
                ),
            );
            assert_eq!(diags.len(), 1, "{name}: {diags:#?}");
            assert_eq!(diags[0].code, codes::UNKNOWN_TOOL);
            assert!(diags[0].hint.contains("gh_<tool>"), "{:#?}", diags[0]);
        }
    }
}
