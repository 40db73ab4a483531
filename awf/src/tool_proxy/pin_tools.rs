//! `awf tools pin (WORKFLOW | --config FILE) [--server NAME] [--check]`: starts each third-party server of
//! the workflow as a step would (in its jail, from the current directory), shows how its
//! tools differ from their pins — the pinned and the current description and schemas one
//! above the other — and, unless `--check`, writes the current ones as the new pins.

use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::upstream::pins::{self, Pins, Verdict};
use crate::workflow::{self, McpServer, StateKind};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Returns the exit code: 0 when the pins hold (or were updated), 1 under `--check` when
/// some tool differs from its pin.
pub fn run(file: &Path, only: Option<&str>, check: bool) -> Result<u8, AwfError> {
    let root = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let (wf, diags) = workflow::load(file, &mut InstalledPlugins::new(&root));
    let Some(wf) = wf.filter(|_| !workflow::has_errors(&diags)) else {
        crate::validate::print_diagnostics(file, &diags);
        return Err(AwfError::new(
            codes::CONFIG_INVALID,
            format!(
                "{} has problems (above); fix them with `awf validate` first",
                file.display()
            ),
        ));
    };
    // Each server once per lock file, as its first state defines it.
    let mut servers: Vec<(PathBuf, McpServer)> = Vec::new();
    for st in &wf.states {
        let StateKind::Agent(a) = &st.kind else {
            continue;
        };
        let Some(p) = a.mcp_proxy.as_ref().filter(|p| p.enable) else {
            continue;
        };
        for s in &p.servers {
            let lock = p.lock_file();
            if only.is_some_and(|n| n != s.name)
                || servers.iter().any(|(l, o)| *l == lock && o.name == s.name)
            {
                continue;
            }
            servers.push((lock, s.clone()));
        }
    }
    if servers.is_empty() {
        return Err(AwfError::new(
            codes::CONFIG_INVALID,
            match only {
                Some(n) => format!(
                    "{} has no server {n:?} in an enabled mcp_proxy; `awf validate` lists them",
                    file.display()
                ),
                None => format!(
                    "{} has no mcp_proxy.servers, so there is nothing to pin",
                    file.display()
                ),
            },
        ));
    }
    let servers = servers
        .into_iter()
        .map(|(lock, server)| {
            let spec = super::server_spec(&server, &[crate::private_files::state_dir()]);
            (lock, server.name, spec)
        })
        .collect();
    pin(servers, &root, check)
}

/// `awf tools pin --config FILE`: the servers of an `awf mcp-serve` config (a gateway),
/// pinned in its lock file (its `pins`, by default the one beside it).
pub fn run_config(file: &Path, only: Option<&str>, check: bool) -> Result<u8, AwfError> {
    let cfg = crate::tool_server::ServeConfig::load(file)?;
    let lock = cfg
        .pins
        .clone()
        .unwrap_or_else(|| workflow::default_lock_file(file));
    let servers: Vec<(PathBuf, String, crate::upstream::ServerSpec)> = cfg
        .servers
        .iter()
        .filter(|(name, _)| only.is_none_or(|n| n == name.as_str()))
        .map(|(name, spec)| (lock.clone(), name.clone(), spec.clone()))
        .collect();
    if servers.is_empty() {
        return Err(AwfError::new(
            codes::CONFIG_INVALID,
            match only {
                Some(n) => format!("{} has no server {n:?} in `servers`", file.display()),
                None => format!(
                    "{} has no `servers`, so there is nothing to pin",
                    file.display()
                ),
            },
        ));
    }
    pin(servers, &cfg.root, check)
}

/// Lists each server's tools, says how they differ from their pins and, unless `check`,
/// writes the lock files.
fn pin(
    servers: Vec<(PathBuf, String, crate::upstream::ServerSpec)>,
    root: &Path,
    check: bool,
) -> Result<u8, AwfError> {
    let mut differs = false;
    let mut by_lock: Vec<(PathBuf, Pins)> = Vec::new();
    let mut listed = Vec::new();
    for (lock, name, spec) in &servers {
        let tools = crate::upstream::list_once(name, spec, root).map_err(|why| {
            AwfError::new(
                codes::SERVER_FAILED,
                format!("server {name} ({}) did not start: {why}", spec.describe()),
            )
        })?;
        listed.push((lock, name, tools));
    }
    for (lock, name, tools) in &listed {
        if !by_lock.iter().any(|(l, _)| l == *lock) {
            let p = Pins::load(lock).map_err(|e| AwfError::new(codes::CONFIG_INVALID, e))?;
            by_lock.push(((*lock).clone(), p));
        }
        let pins = &mut by_lock.iter_mut().find(|(l, _)| l == *lock).unwrap().1;
        differs |= report(name, pins, tools);
        let others: Vec<String> = listed
            .iter()
            .filter(|(_, other, _)| other != name)
            .flat_map(|(_, other, tools)| {
                names(tools)
                    .into_iter()
                    .flat_map(move |t| [format!("{other}_{t}"), t.to_string()])
            })
            .collect();
        report_findings(name, tools, &others);
        pins.record(name, tools);
    }
    if check {
        return Ok(u8::from(differs));
    }
    for (lock, pins) in &by_lock {
        pins.save().map_err(|e| AwfError::new(codes::IO, e))?;
        println!("wrote {}", lock.display());
    }
    Ok(0)
}

/// Prints how `tools` compare with the pins of `server`; true when anything differs.
fn report(server: &str, pins: &Pins, tools: &[Value]) -> bool {
    if !pins.knows(server) {
        println!(
            "server {server}: not pinned yet; {} tools to pin: {}",
            tools.len(),
            names(tools).join(", ")
        );
        return true;
    }
    let mut differs = false;
    for (tool, verdict) in tools.iter().zip(pins.check(server, tools)) {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        match verdict {
            Verdict::Pinned | Verdict::FirstUse => {}
            Verdict::New => {
                differs = true;
                println!("server {server}: + {name} (new since pinned)");
                println!("{}", indent(&pretty(&pins::pinned_view(tool))));
            }
            Verdict::Changed(old) => {
                differs = true;
                println!("server {server}: ~ {name} (changed since pinned)");
                let now = pins::pinned_view(tool);
                for field in pins::PINNED_FIELDS {
                    let (was, is) = (old.tool.get(field), now.get(field));
                    if was != is {
                        println!("  {field}, pinned:");
                        println!("{}", indent(&was.map(pretty).unwrap_or("(none)".into())));
                        println!("  {field}, now:");
                        println!("{}", indent(&is.map(pretty).unwrap_or("(none)".into())));
                    }
                }
            }
        }
    }
    let listed = names(tools);
    for gone in pins.of(server).keys() {
        if !listed.contains(&gone.as_str()) {
            differs = true;
            println!("server {server}: - {gone} (pinned, no longer listed)");
        }
    }
    if !differs {
        println!("server {server}: {} tools, as pinned", tools.len());
    }
    differs
}

/// Prints what the scan of descriptions finds in each tool (hidden characters, words
/// aimed at the model, other servers' tools named): a step warns of them, or withholds the
/// tool with `scan: {descriptions: refuse}`.
fn report_findings(server: &str, tools: &[Value], others: &[String]) {
    for tool in tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        for finding in crate::scan::descriptions::scan_tool(tool, others) {
            println!("server {server}: ! {name}: {finding}");
        }
    }
}

fn names(tools: &[Value]) -> Vec<&str> {
    tools
        .iter()
        .filter_map(|t| t.get("name")?.as_str())
        .collect()
}

fn pretty(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
