//! `mcp_proxy.servers`: the third-party MCP servers of a step, each `<name>: {command, env,
//! env_passthrough, sandbox, tools, rename, timeout_seconds, start_timeout_seconds,
//! optional}`, or a remote one, `<name>: {url, headers, allow_private, tools, rename, ...}`. A server's name becomes the prefix of its tools (`<name>_<tool>`), so it
//! follows the rules that keep those names valid and unambiguous; its `sandbox` is read as
//! Bash's is, and that block's `env` and `env_passthrough` are merged with the server's own.

use super::context::{Ctx, join, seconds};
use super::sandbox;
use crate::confine::Sandbox;
use crate::error::codes;
use crate::upstream::ServerTools;
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{LONGEST_CLIENT_PREFIX, MAX_SERVER_NAME, McpServer};

const SERVER_KEYS: &[&str] = &[
    "command",
    "url",
    "headers",
    "allow_private",
    "scan",
    "env",
    "env_passthrough",
    "sandbox",
    "tools",
    "rename",
    "timeout_seconds",
    "start_timeout_seconds",
    "optional",
];
const SERVER_TOOLS_KEYS: &[&str] = &["allow", "deny"];

/// MCP's limit on a tool name, which a client's prefix counts toward.
const MAX_TOOL_NAME: usize = 64;

/// Why `name` cannot name a server, if it cannot.
fn server_name_problem(name: &str) -> Option<String> {
    let mut chars = name.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return Some(format!("{name:?} does not start with a letter"));
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
        return Some(format!("{name:?} contains {c:?}"));
    }
    (name.len() > MAX_SERVER_NAME).then(|| {
        format!(
            "{name:?} is {} characters long, over {MAX_SERVER_NAME}",
            name.len()
        )
    })
}

/// Every server of `servers:`, in file order; those whose name is invalid are reported and
/// left out.
pub(super) fn parse_servers(cx: &mut Ctx, node: &Node, path: &str) -> Vec<McpServer> {
    let mut out = Vec::new();
    if node.is_null() {
        return out;
    }
    if matches!(node.kind, Kind::Seq(_)) {
        // Unlike plugin_tools, a map: each server is named by its key.
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!("{path} must be a map of servers by name, found a list"),
            "write `servers:` then one `<name>: {command: [...]}` line per server, e.g. \
             `github: {command: [npx, -y, \"@modelcontextprotocol/server-github\"]}`",
        );
        return out;
    }
    let Some(entries) = cx.fields(node, path, &[], codes::PROXY_UNKNOWN_KEY) else {
        return out;
    };
    for (name, body) in entries {
        let spath = join(path, name);
        let named = match server_name_problem(name) {
            None => true,
            Some(why) => {
                cx.push(
                    codes::INVALID_TOOL_NAME,
                    &spath,
                    body.line,
                    format!("{spath}: {why}, so it cannot name a server"),
                    format!(
                        "name it with a letter then letters, digits and `-`, at most \
                         {MAX_SERVER_NAME} characters (e.g. `github`, `pg-main`): its tools are \
                         offered as `<name>_<tool>`, so an `_` in it would make the split into \
                         server and tool ambiguous, and a long name leaves no room for the \
                         tool's own name within MCP's {MAX_TOOL_NAME} characters"
                    ),
                );
                false
            }
        };
        if let Some(server) = parse_server(cx, name, body, &spath)
            && named
        {
            out.push(server);
        }
    }
    out
}

/// One server's block; None when it has no usable `command` (reported).
fn parse_server(cx: &mut Ctx, name: &str, node: &Node, path: &str) -> Option<McpServer> {
    let example = "command: [npx, -y, \"@modelcontextprotocol/server-github\"]";
    if node.is_null() {
        cx.push(
            codes::MISSING_FIELD,
            &join(path, "command"),
            node.line,
            format!("{path} has no `command`"),
            format!("add `{example}` (the server's argv, run without a shell)"),
        );
        return None;
    }
    let fields = cx.fields(node, path, SERVER_KEYS, codes::PROXY_UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let cpath = join(path, "command");
    let remote = parse_remote(cx, path, &fields);
    let command = match get("command") {
        None if remote.url.is_some() => Some(Vec::new()),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                &cpath,
                node.line,
                format!("{path} has no `command`"),
                format!("add `{example}` (the server's argv, run without a shell)"),
            );
            None
        }
        Some(c) => parse_command(cx, c, &cpath, example),
    };
    let command_line = get("command").map_or(node.line, |c| c.line);
    let ServerEnv {
        sandbox,
        env,
        env_passthrough,
    } = parse_server_env(cx, path, &fields);
    let tools = get("tools")
        .filter(|t| !t.is_null())
        .map(|t| parse_tools(cx, t, &join(path, "tools")))
        .unwrap_or_default();
    let rename = get("rename")
        .map(|r| parse_rename(cx, name, r, &join(path, "rename")))
        .unwrap_or_default();
    let timeout_seconds = get("timeout_seconds").and_then(|t| {
        seconds(
            cx,
            t,
            &join(path, "timeout_seconds"),
            "write e.g. `timeout_seconds: 300` (the default is Bash's, 120)",
        )
    });
    let start_timeout_seconds = get("start_timeout_seconds").and_then(|t| {
        seconds(
            cx,
            t,
            &join(path, "start_timeout_seconds"),
            "write e.g. `start_timeout_seconds: 60` (the default is 30: the time the server \
             has to answer `initialize` and `tools/list`)",
        )
    });
    let optional = get("optional")
        .and_then(|o| cx.boolean(o, &join(path, "optional"), codes::WRONG_TYPE))
        .unwrap_or(false);
    if remote.url.is_none() && !remote.headers.is_empty() {
        cx.push(
            codes::INVALID_VALUE,
            &join(path, "headers"),
            node.line,
            format!("{path} has headers but no url"),
            "headers are sent to a remote server: give its `url`; a server awf starts gets \
             values through `env`",
        );
    }
    Some(McpServer {
        name: name.to_string(),
        command: command?,
        url: remote.url,
        headers: remote.headers,
        allow_private: remote.allow_private,
        scan: get("scan")
            .map(|n| super::scan::parse_scan(cx, n, &join(path, "scan")))
            .unwrap_or_default(),
        env,
        env_passthrough,
        sandbox,
        tools,
        rename,
        timeout_seconds,
        start_timeout_seconds,
        optional,
        path: path.to_string(),
        line: node.line,
        command_line,
    })
}

/// What reaches a remote server: its URL, headers and whether it may be private.
struct Remote {
    url: Option<String>,
    headers: Vec<(String, String)>,
    allow_private: bool,
}

/// `url`, `headers` and `allow_private`: the URL checked (https, a public host unless
/// allowed), each header's `${VAR}` set in awf's environment, and none of the keys that
/// only a server awf starts has.
fn parse_remote(cx: &mut Ctx, path: &str, fields: &[(&str, &Node)]) -> Remote {
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let allow_private = get("allow_private")
        .and_then(|o| cx.boolean(o, &join(path, "allow_private"), codes::WRONG_TYPE))
        .unwrap_or(false);
    let upath = join(path, "url");
    let url = get("url").and_then(|u| {
        let url = cx.string(u, &upath)?;
        if let Some(why) = crate::upstream::remote::url_problem(&url, allow_private) {
            cx.push(
                codes::INVALID_VALUE,
                &upath,
                u.line,
                format!("{upath}: {why}"),
                "write the server's MCP endpoint, e.g. `url: https://api.githubcopilot.com/mcp/`",
            );
        }
        if get("command").is_some() {
            cx.push(
                codes::INVALID_VALUE,
                &upath,
                u.line,
                format!("{path} has both command and url"),
                "keep `command` for a server awf starts, or `url` for a remote one",
            );
        }
        for key in ["sandbox", "env", "env_passthrough"] {
            if let Some(n) = get(key) {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, key),
                    n.line,
                    format!("{path}.{key} is for a server awf starts; this one is remote (url)"),
                    "remove it: a remote server runs elsewhere; its headers take `${VAR}` from \
                     awf's environment",
                );
            }
        }
        Some(url)
    });
    let headers = get("headers")
        .map(|h| parse_headers(cx, h, &join(path, "headers")))
        .unwrap_or_default();
    Remote {
        url,
        headers,
        allow_private,
    }
}

/// `headers: {Name: value}`: each name an HTTP header name, each `${VAR}` of a value set
/// in awf's environment (where awf takes it from at the step's start).
fn parse_headers(cx: &mut Ctx, node: &Node, path: &str) -> Vec<(String, String)> {
    let Some(entries) = cx.fields(node, path, &[], codes::PROXY_UNKNOWN_KEY) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, value) in entries {
        let hpath = join(path, name);
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            cx.push(
                codes::INVALID_VALUE,
                &hpath,
                value.line,
                format!("{hpath}: {name:?} is not an HTTP header name"),
                "use letters, digits and `-`, e.g. `Authorization`",
            );
            continue;
        }
        let Some(text) = cx.string(value, &hpath) else {
            continue;
        };
        for var in crate::upstream::remote::header_vars(&text) {
            if std::env::var_os(&var).is_none() {
                cx.push(
                    codes::INVALID_VALUE,
                    &hpath,
                    value.line,
                    format!("{hpath} uses ${{{var}}}, which is not set in awf's environment"),
                    format!(
                        "export {var} before awf runs (its value is sent to the server and \
                         masked everywhere else)"
                    ),
                );
            }
        }
        out.push((name.to_string(), text));
    }
    out
}

/// A server's sandbox, and the variables it is given and passed.
struct ServerEnv {
    sandbox: Sandbox,
    env: Vec<(String, String)>,
    env_passthrough: Vec<String>,
}

/// `sandbox`, `env` and `env_passthrough`: the server's own values win over its sandbox's.
fn parse_server_env(cx: &mut Ctx, path: &str, fields: &[(&str, &Node)]) -> ServerEnv {
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let mut env = Vec::new();
    let mut env_passthrough = Vec::new();
    let mut sandbox = Default::default();
    if let Some(s) = get("sandbox") {
        let mut sb = parse_server_sandbox(cx, s, &join(path, "sandbox"));
        env = std::mem::take(&mut sb.env).into_iter().collect();
        env_passthrough = std::mem::take(&mut sb.env_passthrough);
        sandbox = sb;
    }
    if let Some(e) = get("env") {
        // The server's own values win over its sandbox's.
        for (k, v) in sandbox::parse_env(cx, e, &join(path, "env")) {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        }
    }
    if let Some(p) = get("env_passthrough") {
        for pattern in sandbox::parse_passthrough(cx, p, &join(path, "env_passthrough")) {
            if !env_passthrough.contains(&pattern) {
                env_passthrough.push(pattern);
            }
        }
    }
    ServerEnv {
        sandbox,
        env,
        env_passthrough,
    }
}

/// A server's `sandbox`, read as Bash's is. Its `landlock: false` must say what it opens.
fn parse_server_sandbox(cx: &mut Ctx, s: &Node, sbpath: &str) -> Sandbox {
    let sb = sandbox::parse_sandbox(cx, s, sbpath, false);
    // Bash's defaults follow `landlock: false` (reads and network open); a server's
    // (confined, deny) cannot, so they must be given up in writing.
    if !sb.landlock() && (sb.read.is_none() || sb.network.is_none()) {
        cx.push(
            codes::INVALID_VALUE,
            &join(sbpath, "landlock"),
            s.line,
            format!(
                "{sbpath}: landlock: false turns the server's jail off, but its defaults \
                 (reads confined, network deny) need it"
            ),
            "write `read: host` and `network: allow` beside `landlock: false` to say what \
             the server may do, or remove `landlock: false`",
        );
    }
    sb
}

/// `command: [argv0, args...]`: a non-empty list of text whose first word is not empty.
fn parse_command(cx: &mut Ctx, node: &Node, path: &str, example: &str) -> Option<Vec<String>> {
    let Kind::Seq(items) = &node.kind else {
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!(
                "{path} must be a list (the argv, run without a shell), found {}",
                node.describe()
            ),
            format!("write `{example}`; for a shell line write [sh, -c, \"...\"]"),
        );
        return None;
    };
    if items.is_empty() {
        cx.push(
            codes::INVALID_VALUE,
            path,
            node.line,
            format!("{path} is empty: there is no program to start"),
            format!("write `{example}`"),
        );
        return None;
    }
    let mut argv = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match cx.string(item, &format!("{path}[{i}]")) {
            Some(s) => argv.push(s),
            None => ok = false,
        }
    }
    if argv.first().is_some_and(String::is_empty) {
        cx.push(
            codes::INVALID_VALUE,
            &format!("{path}[0]"),
            items[0].line,
            format!("{path}[0] is empty: there is no program to start"),
            format!("write `{example}`"),
        );
        return None;
    }
    ok.then_some(argv)
}

/// `tools: {allow: [...]}` or `tools: {deny: [...]}`, by the server's own tool names.
fn parse_tools(cx: &mut Ctx, node: &Node, path: &str) -> ServerTools {
    let mut out = ServerTools::default();
    let Some(fields) = cx.fields(node, path, SERVER_TOOLS_KEYS, codes::PROXY_UNKNOWN_KEY) else {
        return out;
    };
    let names = |cx: &mut Ctx, v: &Node, key: &str| -> Vec<String> {
        let kpath = join(path, key);
        let example = format!("{key}: [search_repositories, get_file_contents]");
        sandbox::list(cx, v, &kpath, &example)
            .into_iter()
            .filter_map(|(i, item)| {
                let ipath = format!("{kpath}[{i}]");
                let name = cx.string(item, &ipath)?;
                if name.is_empty() {
                    cx.push(
                        codes::INVALID_VALUE,
                        &ipath,
                        item.line,
                        format!("{ipath} is empty"),
                        "name a tool as the server lists it (`awf tools list`)",
                    );
                    return None;
                }
                Some(name)
            })
            .collect()
    };
    let mut allow_line = None;
    for (key, v) in &fields {
        if *key == "allow" {
            allow_line = Some(v.line);
            let list = names(cx, v, key);
            let written_empty = v.is_null() || matches!(&v.kind, Kind::Seq(i) if i.is_empty());
            if written_empty {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, key),
                    v.line,
                    format!("{path}.allow is empty, so none of the server's tools is offered"),
                    "list the tools the agent may call, or remove the server",
                );
            }
            out.allow = Some(list);
        } else {
            out.deny = names(cx, v, key);
        }
    }
    if let (Some(_), Some((_, deny))) = (allow_line, fields.iter().find(|(k, _)| *k == "deny")) {
        cx.push(
            codes::INVALID_VALUE,
            &join(path, "deny"),
            deny.line,
            format!("{path} has both allow and deny"),
            "keep one: `allow` offers only the tools it lists, `deny` all but those",
        );
    }
    out
}

/// `rename: {upstream_name: short}`: each `short` a valid tool name that, as
/// `<server>_<short>` behind the longest client prefix, fits MCP's limit; no two the same.
fn parse_rename(cx: &mut Ctx, server: &str, node: &Node, path: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    if node.is_null() {
        return out;
    }
    let Some(entries) = cx.fields(node, path, &[], codes::PROXY_UNKNOWN_KEY) else {
        return out;
    };
    // 0 for a server name too long to leave any room: an error of its own, reported already.
    let room = MAX_TOOL_NAME.saturating_sub(LONGEST_CLIENT_PREFIX.len() + server.len() + 1);
    for (upstream, v) in entries {
        let rpath = join(path, upstream);
        let Some(short) = cx.string(v, &rpath) else {
            continue;
        };
        let full = format!("{server}_{short}");
        let problem = if let Err(why) = mcpserver::check_name(&short) {
            Some(why)
        } else {
            (room > 0 && short.len() > room).then(|| {
                format!(
                    "{short:?} is {} characters long: {LONGEST_CLIENT_PREFIX}{full} would pass \
                     MCP's {MAX_TOOL_NAME}",
                    short.len()
                )
            })
        };
        if let Some(why) = problem {
            cx.push(
                codes::INVALID_TOOL_NAME,
                &rpath,
                v.line,
                format!("{rpath}: {why}"),
                format!(
                    "rename it to at most {room} characters of a-z A-Z 0-9 _ - (it is offered \
                     as {server}_<name>, and clients put up to {} characters before that)",
                    LONGEST_CLIENT_PREFIX.len()
                ),
            );
            continue;
        }
        if let Some((first, _)) = out.iter().find(|(_, s)| *s == short) {
            cx.push(
                codes::NAME_COLLISION,
                &rpath,
                v.line,
                format!("{rpath}: {first:?} and {upstream:?} are both renamed to {short:?}"),
                "give each tool a name of its own",
            );
            continue;
        }
        out.push((upstream.to_string(), short));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::{Diagnostic, Workflow, parse::parse};
    use std::path::Path;

    /// An agent state whose `mcp_proxy` is `proxy` (lines at the proxy's indentation).
    fn parse_proxy(proxy: &str) -> (Option<Workflow>, Vec<Diagnostic>) {
        let text = format!(
            "name: s\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    \
             prompt: p\n    mcp_proxy:\n{proxy}    on_success: done\n  done:\n    type: \
             terminal\n"
        );
        parse(&text, Path::new("/work/flows/fix.yaml"))
    }

    /// `parse_proxy` of an enabled proxy whose `servers:` block is `lines` (each at the
    /// indentation of a server's name).
    fn parse_servers_block(lines: &[&str]) -> (Option<Workflow>, Vec<Diagnostic>) {
        let mut proxy = "      enable: true\n      servers:\n".to_string();
        for l in lines {
            proxy.push_str(&format!("        {l}\n"));
        }
        parse_proxy(&proxy)
    }

    fn servers(wf: &Option<Workflow>) -> Vec<McpServer> {
        match &wf.as_ref().unwrap().states[0].kind {
            crate::workflow::StateKind::Agent(a) => a.mcp_proxy.clone().unwrap().servers,
            _ => unreachable!("the first state is the agent"),
        }
    }

    fn only(diags: &[Diagnostic]) -> &Diagnostic {
        assert_eq!(diags.len(), 1, "{diags:#?}");
        &diags[0]
    }

    #[test]
    fn names_follow_the_prefix_rule() {
        assert_eq!(server_name_problem("github"), None);
        assert_eq!(server_name_problem("Pg-main2"), None);
        assert_eq!(server_name_problem(&"a".repeat(MAX_SERVER_NAME)), None);
        assert!(server_name_problem("git_hub").unwrap().contains("'_'"));
        assert!(server_name_problem("2fa").unwrap().contains("letter"));
        assert!(server_name_problem("-x").unwrap().contains("letter"));
        assert!(server_name_problem("a.b").unwrap().contains("'.'"));
        assert!(
            server_name_problem(&"a".repeat(MAX_SERVER_NAME + 1))
                .unwrap()
                .contains("over 32")
        );
    }

    #[test]
    fn a_full_server_is_read_in_file_order_with_its_sandbox_env_merged() {
        let (wf, diags) = parse_servers_block(&[
            "zeta:",
            "  command: [npx, -y, \"@scope/server\", 8080]",
            "  env: {A: own, B: \"2\"}",
            "  env_passthrough: [TOKEN_*, SHARED]",
            "  sandbox:",
            "    network: {allow: [api.github.com]}",
            "    read: host",
            "    env: {A: sandbox, C: c}",
            "    env_passthrough: [SHARED, SB_ONLY]",
            "  tools: {deny: [delete_repository]}",
            "  rename: {search_repositories: search}",
            "  timeout_seconds: 60",
            "  start_timeout_seconds: 5",
            "  optional: true",
            "alpha:",
            "  command: [/usr/bin/srv]",
        ]);
        assert!(diags.is_empty(), "{diags:#?}");
        let s = servers(&wf);
        assert_eq!(
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["zeta", "alpha"]
        );
        let z = &s[0];
        assert_eq!(z.command, ["npx", "-y", "@scope/server", "8080"]);
        assert_eq!(
            z.env,
            [
                ("C".to_string(), "c".to_string()),
                ("A".into(), "own".into()),
                ("B".into(), "2".into())
            ]
        );
        assert_eq!(z.env_passthrough, ["SHARED", "SB_ONLY", "TOKEN_*"]);
        assert!(z.sandbox.env.is_empty() && z.sandbox.env_passthrough.is_empty());
        assert_eq!(
            z.sandbox.network,
            Some(crate::confine::Network::Hosts(vec![
                "api.github.com".into()
            ]))
        );
        assert_eq!(z.sandbox.read, Some(crate::confine::ReadMode::Host));
        assert_eq!(z.tools.deny, ["delete_repository"]);
        assert_eq!(z.tools.allow, None);
        assert_eq!(z.rename, [("search_repositories".into(), "search".into())]);
        assert_eq!(
            (z.timeout_seconds, z.start_timeout_seconds, z.optional),
            (Some(60), Some(5), true)
        );
        assert_eq!(z.path, "states.a.mcp_proxy.servers.zeta");
        assert_eq!((z.line, z.command_line), (11, 12));
        let a = &s[1];
        assert_eq!(a.sandbox, crate::confine::Sandbox::default());
        assert!(!a.optional && a.tools == ServerTools::default());
    }

    #[test]
    fn an_over_long_name_with_a_rename_is_reported_not_a_panic() {
        let name = "a".repeat(60);
        let (wf, diags) = parse_servers_block(&[
            &format!("{name}:"),
            "  command: [srv]",
            "  rename: {long_upstream_name: short}",
        ]);
        let d = only(&diags);
        assert_eq!(d.code, codes::INVALID_TOOL_NAME);
        assert!(d.message.contains("over 32"), "{d:#?}");
        assert!(servers(&wf).is_empty());
    }

    #[test]
    fn bad_names_are_refused_with_the_reason_in_the_hint() {
        let (wf, diags) = parse_servers_block(&["git_hub:", "  command: [srv]"]);
        let d = only(&diags);
        assert_eq!(d.code, codes::INVALID_TOOL_NAME);
        assert_eq!(d.path, "states.a.mcp_proxy.servers.git_hub");
        assert_eq!(d.line, Some(11));
        assert!(d.hint.contains("<name>_<tool>"), "{d:#?}");
        assert!(servers(&wf).is_empty());
    }

    #[test]
    fn command_must_be_a_non_empty_argv_of_text() {
        for (command, code, path, words) in [
            ("", codes::MISSING_FIELD, "command", "has no `command`"),
            ("command: []", codes::INVALID_VALUE, "command", "is empty"),
            (
                "command: \"npx -y x\"",
                codes::WRONG_TYPE,
                "command",
                "must be a list",
            ),
            (
                "command: [\"\", x]",
                codes::INVALID_VALUE,
                "command[0]",
                "is empty",
            ),
            (
                "command: [npx, {a: b}]",
                codes::WRONG_TYPE,
                "command[1]",
                "must be text",
            ),
            (
                "command: [npx, ~]",
                codes::WRONG_TYPE,
                "command[1]",
                "must be text",
            ),
        ] {
            let body = if command.is_empty() {
                "  optional: true".to_string()
            } else {
                format!("  {command}")
            };
            let (wf, diags) = parse_servers_block(&["gh:", &body]);
            let d = only(&diags);
            assert_eq!(d.code, code, "{command}: {d:#?}");
            assert_eq!(d.path, format!("states.a.mcp_proxy.servers.gh.{path}"));
            assert!(d.message.contains(words), "{command}: {d:#?}");
            assert!(!d.hint.is_empty());
            assert!(
                servers(&wf).is_empty(),
                "{command}: no server without a command"
            );
        }
        let (_, diags) = parse_servers_block(&["gh:"]);
        assert_eq!(only(&diags).code, codes::MISSING_FIELD);
    }

    #[test]
    fn landlock_off_must_give_up_a_server_s_defaults_in_writing() {
        let (_, diags) = parse_servers_block(&[
            "gh:",
            "  command: [srv]",
            "  sandbox: {landlock: false, read: host}",
        ]);
        let d = only(&diags);
        assert_eq!(d.code, codes::INVALID_VALUE);
        assert_eq!(d.path, "states.a.mcp_proxy.servers.gh.sandbox.landlock");
        assert_eq!(d.line, Some(13));
        assert!(d.hint.contains("network: allow"), "{d:#?}");
        let (wf, diags) = parse_servers_block(&[
            "gh:",
            "  command: [srv]",
            "  sandbox: {landlock: false, read: host, network: allow}",
        ]);
        assert!(diags.is_empty(), "{diags:#?}");
        assert!(!servers(&wf)[0].sandbox.landlock());
    }

    #[test]
    fn servers_written_as_a_list_are_shown_the_map_form() {
        let (wf, diags) = parse_servers_block(&["- command: [srv]"]);
        let d = only(&diags);
        assert_eq!(d.code, codes::WRONG_TYPE);
        assert_eq!(d.path, "states.a.mcp_proxy.servers");
        assert!(d.hint.contains("<name>: {command:"), "{d:#?}");
        assert!(servers(&wf).is_empty());
    }

    #[test]
    fn tools_allow_or_deny_not_both() {
        let (_, diags) = parse_servers_block(&[
            "gh:",
            "  command: [srv]",
            "  tools: {allow: [a], deny: [b]}",
        ]);
        let d = only(&diags);
        assert_eq!(d.code, codes::INVALID_VALUE);
        assert_eq!(d.path, "states.a.mcp_proxy.servers.gh.tools.deny");
        assert!(d.hint.contains("keep one"), "{d:#?}");
        let (_, diags) = parse_servers_block(&["gh:", "  command: [srv]", "  tools: {allow: []}"]);
        assert!(only(&diags).message.contains("none of the server's tools"));
        let (_, diags) = parse_servers_block(&["gh:", "  command: [srv]", "  tools: {alow: [a]}"]);
        let d = only(&diags);
        assert_eq!(d.code, codes::PROXY_UNKNOWN_KEY);
        assert!(d.hint.contains("did you mean `allow`"), "{d:#?}");
    }

    #[test]
    fn rename_targets_are_tool_names_that_fit_behind_the_client_prefix() {
        // mcp__awf__ (10) + "gh_" (3) leaves 51 characters.
        let fits = "x".repeat(51);
        let over = "x".repeat(52);
        let (wf, diags) = parse_servers_block(&[
            "gh:",
            "  command: [srv]",
            &format!("  rename: {{a: {fits}, b: \"has.dot\", c: {over}, d: {fits}}}"),
        ]);
        assert_eq!(diags.len(), 3, "{diags:#?}");
        let at = |k: &str| {
            diags
                .iter()
                .find(|d| d.path == format!("states.a.mcp_proxy.servers.gh.rename.{k}"))
                .unwrap_or_else(|| panic!("no problem at rename.{k}: {diags:#?}"))
        };
        assert_eq!(at("b").code, codes::INVALID_TOOL_NAME);
        assert!(at("b").message.contains("'.'"));
        assert_eq!(at("c").code, codes::INVALID_TOOL_NAME);
        assert!(at("c").hint.contains("at most 51"), "{:#?}", at("c"));
        assert_eq!(at("d").code, codes::NAME_COLLISION);
        assert_eq!(servers(&wf)[0].rename, [("a".to_string(), fits)]);
    }

    #[test]
    fn bad_values_name_their_key() {
        let (_, diags) = parse_servers_block(&[
            "gh:",
            "  command: [srv]",
            "  timeout_seconds: 0",
            "  start_timeout_seconds: soon",
            "  optional: maybe",
            "  env: {\"1X\": a, TMPDIR: /t}",
            "  env_passthrough: [\"*\"]",
            "  sandbox: {writable: [relative/dir], netwrk: deny}",
            "  commands: x",
        ]);
        let base = "states.a.mcp_proxy.servers.gh";
        let mut got: Vec<(&str, &str)> = diags
            .iter()
            .map(|d| (d.path.strip_prefix(base).unwrap(), d.code))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                (".commands", codes::PROXY_UNKNOWN_KEY),
                (".env.1X", codes::INVALID_VALUE),
                (".env.TMPDIR", codes::INVALID_VALUE),
                (".env_passthrough[0]", codes::INVALID_VALUE),
                (".optional", codes::WRONG_TYPE),
                (".sandbox.netwrk", codes::PROXY_UNKNOWN_KEY),
                (".sandbox.writable[0]", codes::INVALID_VALUE),
                (".start_timeout_seconds", codes::INVALID_VALUE),
                (".timeout_seconds", codes::INVALID_VALUE),
            ]
        );
    }
}
