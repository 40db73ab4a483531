//! The plugin host: finds plugins ([`discovery`], [`manifest`]), starts them as processes
//! speaking gRPC over a Unix socket ([`process`], through the contract of `plugin-sdk`), and
//! exposes their operations as tools `<plugin>_<op>` of a step's tool set ([`adapter`]). [`start_exposed`] is what `awf mcp-serve` calls for its config's
//! `plugin_tools`: it checks the whole request (unknown plugin, unknown operation, name
//! collision: each fatal, naming the config entry) before anything is served.
//!
//! Costs nothing when unused: no plugin is started and no async runtime made unless the
//! config exposes plugin tools. Every plugin process ends with the `awf` process that
//! started it: stopped in order when awf exits, and through the stdin lifeline when awf is
//! killed.

pub mod adapter;
pub mod catalog;
pub mod discovery;
pub mod list;
pub mod manifest;
pub mod process;
pub mod runtime;
pub mod socket_dir;

pub use adapter::PluginToolAdapter;
pub use catalog::InstalledPlugins;
pub use discovery::{Discovery, Found};
pub use manifest::Manifest;
pub use process::PluginProcess;
pub use runtime::PluginRuntime;

use crate::error::{AwfError, codes};
use crate::process::Shutdown;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Which operations of one plugin to expose as tools (an `awf mcp-serve` config
/// `plugin_tools` entry).
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PluginTools {
    pub plugin: String,
    #[serde(default)]
    pub expose: Vec<String>,
    /// Seconds a call of these operations may take; absent: Bash's default timeout.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// The plugin's jail: the keys and defaults of a third-party server's (the workspace
    /// and the plugin's own directory readable, nothing writable but its private
    /// directory, network denied). The first entry naming a plugin sets it.
    #[serde(default)]
    pub sandbox: crate::confine::Sandbox,
}

/// Where the plugins of a step are jailed.
#[derive(Debug, Clone)]
pub struct JailContext {
    /// The workspace: readable, not writable, the plugin's working directory.
    pub root: std::path::PathBuf,
    pub support: Option<crate::confine::Support>,
    /// The step's process cap, when it sets one.
    pub processes: Option<u32>,
}

/// The bounds of plugin calls: the deadline of a call (unless its entry sets one) and the
/// output bound of its result, the builtins' own.
#[derive(Debug, Clone, Copy)]
pub struct CallBounds {
    pub timeout: std::time::Duration,
    pub output_bytes: usize,
}

/// Starts the plugins that `plugin_tools` names and returns one tool source per plugin.
/// `origin` says where the request came from (`the config /path/cfg.json`); `root` is the
/// project root whose `.awf/plugins` is searched; `shutdown` cancels the calls in flight.
/// Errors are fatal for the caller.
pub fn start_exposed(
    plugin_tools: &[PluginTools],
    origin: &str,
    root: &Path,
    shutdown: &Shutdown,
    bounds: CallBounds,
    jail: &JailContext,
) -> Result<Vec<PluginToolAdapter>, AwfError> {
    if plugin_tools.is_empty() {
        return Ok(Vec::new());
    }
    // What killed sessions' plugins left goes, while these start (once per process:
    // in-process sessions share one; on a thread of its own, off the start's path).
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(socket_dir::sweep_leftovers);
    let discovery = Discovery::scan(discovery::search_path(root));
    check_timeouts(plugin_tools, origin, bounds)?;
    let wanted = wanted_plugins(plugin_tools, origin, &discovery)?;
    let running = start_wanted(&wanted, plugin_tools, jail)?;

    let mut adapters = Vec::new();
    for (wanted, plugin) in wanted.iter().zip(running) {
        check_offered(origin, wanted, &plugin)?;
        let ops: Vec<(String, std::time::Duration)> = wanted
            .ops
            .iter()
            .map(|(op, i)| {
                let timeout = plugin_tools[*i]
                    .timeout_seconds
                    .map_or(bounds.timeout, std::time::Duration::from_secs);
                (op.to_string(), timeout)
            })
            .collect();
        adapters.push(PluginToolAdapter::new(
            plugin,
            &ops,
            shutdown.clone(),
            bounds.output_bytes,
        ));
    }
    Ok(adapters)
}

/// One plugin to start, and the operations to expose with the index of the entry asking.
struct Wanted<'a> {
    manifest: &'a Manifest,
    ops: Vec<(&'a str, usize)>,
}

/// Refuses an entry whose `timeout_seconds` is 0.
fn check_timeouts(
    plugin_tools: &[PluginTools],
    origin: &str,
    bounds: CallBounds,
) -> Result<(), AwfError> {
    for (i, entry) in plugin_tools.iter().enumerate() {
        if entry.timeout_seconds == Some(0) {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}, plugin_tools[{i}]: timeout_seconds is 0; give the calls at \
                     least 1 s, or leave it out for Bash's default ({} s)",
                    bounds.timeout.as_secs()
                ),
            ));
        }
    }
    Ok(())
}

/// Groups the entries by plugin, in first-mention order, and checks each entry.
fn wanted_plugins<'a>(
    plugin_tools: &'a [PluginTools],
    origin: &str,
    discovery: &'a Discovery,
) -> Result<Vec<Wanted<'a>>, AwfError> {
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut tool_entries: HashMap<String, usize> = HashMap::new();
    for (i, entry) in plugin_tools.iter().enumerate() {
        let at = format!("{origin}, plugin_tools[{i}]");
        let Some(manifest) = discovery.get(&entry.plugin) else {
            return Err(unknown_plugin(discovery, &entry.plugin, &at));
        };
        if entry.expose.is_empty() {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{at}: plugin {} exposes no operation; list the operations the agent may \
                     call, e.g. expose: [op]",
                    entry.plugin
                ),
            ));
        }
        let slot = slot_for(&mut wanted, manifest, plugin_tools, entry, &at)?;
        for op in &entry.expose {
            let tool = crate::workflow::plugin_tool_name(&entry.plugin, op);
            if mcpserver::check_name(&tool).is_err() {
                return Err(AwfError::new(
                    codes::INVALID_TOOL_NAME,
                    format!(
                        "{at}: operation {op:?} of plugin {} would be the tool {tool:?}, which \
                         is not a valid MCP tool name (^[a-zA-Z0-9_-]{{1,64}}$); leave it out of \
                         expose",
                        entry.plugin
                    ),
                ));
            }
            if let Some(first) = tool_entries.insert(tool.clone(), i) {
                return Err(AwfError::new(
                    codes::NAME_COLLISION,
                    format!(
                        "{at}: operation {op:?} of plugin {} is already exposed by \
                         plugin_tools[{first}] as the tool {tool:?}; expose each operation once",
                        entry.plugin
                    ),
                ));
            }
            wanted[slot].ops.push((op.as_str(), i));
        }
    }
    Ok(wanted)
}

/// Where `entry`'s plugin is in `wanted` (added if new); one plugin may have one sandbox.
fn slot_for<'a>(
    wanted: &mut Vec<Wanted<'a>>,
    manifest: &'a Manifest,
    plugin_tools: &[PluginTools],
    entry: &PluginTools,
    at: &str,
) -> Result<usize, AwfError> {
    match wanted.iter().position(|w| w.manifest.name == manifest.name) {
        Some(p) => {
            // One process per plugin, so one jail: two entries may not ask for two.
            if let Some(&(_, first)) = wanted[p].ops.first()
                && plugin_tools[first].sandbox != entry.sandbox
            {
                return Err(AwfError::new(
                    codes::CONFIG_INVALID,
                    format!(
                        "{at}: plugin {} has another sandbox in plugin_tools[{first}]; one \
                         plugin runs in one jail: give both entries the same sandbox, or \
                         one entry with every operation",
                        entry.plugin
                    ),
                ));
            }
            Ok(p)
        }
        None => {
            wanted.push(Wanted {
                manifest,
                ops: Vec::new(),
            });
            Ok(wanted.len() - 1)
        }
    }
}

/// Starts the wanted plugins, each in its jail; if one fails, stops the others.
fn start_wanted(
    wanted: &[Wanted],
    plugin_tools: &[PluginTools],
    jail: &JailContext,
) -> Result<Vec<Arc<PluginProcess>>, AwfError> {
    let runtime = Arc::new(PluginRuntime::new()?);
    let manifests: Vec<&Manifest> = wanted.iter().map(|w| w.manifest).collect();
    let jails: Vec<Jailed> = wanted
        .iter()
        .map(|w| Jailed {
            at: jail.clone(),
            sandbox: plugin_tools[w.ops.first().map_or(0, |(_, i)| *i)]
                .sandbox
                .clone(),
        })
        .collect();
    let started = start_all_jailed(&manifests, &runtime, &jails);
    let mut running = Vec::new();
    let mut first_error = None;
    for result in started {
        match result {
            Ok(p) => running.push(Arc::new(p)),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        // `running` is dropped here: the plugins that did start are stopped.
        return Err(e);
    }
    Ok(running)
}

/// Refuses an operation to expose that the started plugin does not offer.
fn check_offered(origin: &str, wanted: &Wanted, plugin: &PluginProcess) -> Result<(), AwfError> {
    for (op, i) in &wanted.ops {
        if !plugin.operations().iter().any(|o| o.name == *op) {
            let offered: Vec<&str> = plugin
                .operations()
                .iter()
                .map(|o| o.name.as_str())
                .collect();
            return Err(AwfError::new(
                codes::UNKNOWN_OPERATION,
                format!(
                    "{origin}, plugin_tools[{i}]: plugin {} has no operation {op:?}; it \
                     offers: {}. Fix the name in expose",
                    wanted.manifest.name,
                    if offered.is_empty() {
                        "none".to_string()
                    } else {
                        offered.join(", ")
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// Starts `manifests` in parallel (each may take up to its start-up timeout), results in
/// the same order.
pub fn start_all(
    manifests: &[&Manifest],
    runtime: &Arc<PluginRuntime>,
) -> Vec<Result<PluginProcess, AwfError>> {
    start_each(manifests, runtime, |_| None)
}

/// A plugin's jail: where, and its `sandbox`.
pub struct Jailed {
    pub at: JailContext,
    pub sandbox: crate::confine::Sandbox,
}

/// As [`start_all`], each plugin in its jail (`jails[i]` for `manifests[i]`).
pub fn start_all_jailed(
    manifests: &[&Manifest],
    runtime: &Arc<PluginRuntime>,
    jails: &[Jailed],
) -> Vec<Result<PluginProcess, AwfError>> {
    start_each(manifests, runtime, |i| jails.get(i))
}

fn start_each<'a>(
    manifests: &[&Manifest],
    runtime: &Arc<PluginRuntime>,
    jail_of: impl Fn(usize) -> Option<&'a Jailed> + Sync,
) -> Vec<Result<PluginProcess, AwfError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = manifests
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let runtime = runtime.clone();
                let jail = jail_of(i);
                s.spawn(move || PluginProcess::start(m, runtime, HashMap::new(), jail))
            })
            .collect();
        handles
            .into_iter()
            .zip(manifests)
            .map(|(h, m)| {
                h.join().unwrap_or_else(|_| {
                    Err(AwfError::new(
                        codes::PLUGIN_START,
                        format!("starting plugin {} panicked (a bug in awf)", m.name),
                    ))
                })
            })
            .collect()
    })
}

fn unknown_plugin(discovery: &Discovery, plugin: &str, at: &str) -> AwfError {
    if let Some(e) = discovery.invalid(plugin) {
        return AwfError::new(
            codes::UNKNOWN_PLUGIN,
            format!(
                "{at}: plugin {plugin:?} cannot be used because its directory is invalid: {}",
                e.message()
            ),
        );
    }
    let known: Vec<&str> = discovery.plugins().map(|m| m.name.as_str()).collect();
    AwfError::new(
        codes::UNKNOWN_PLUGIN,
        format!(
            "{at}: no plugin named {plugin:?} is installed (searched {}; found {}); install it \
             as <dir>/{plugin}/plugin.yaml plus its executable, or fix the name",
            discovery.search_path_text(),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ),
    )
}
