//! The tool server of one step, assembled: the builtins (in their jail), the plugin
//! operations and the third-party servers of a checked [`ServeConfig`] become one
//! `ToolSet` under the step's policy, with the step's telemetry, and then one
//! `mcpserver::Server` whose hooks record every call and whose results are scanned for
//! secrets ([`crate::scan`]). `awf mcp-serve` serves it over stdio; the HTTP provider calls
//! it in-process.

use super::config::ServeConfig;
use crate::builtins::{BuiltinEnv, Builtins, paths::Workspace};
use crate::confine;
use crate::error::{AwfError, codes};
use crate::process::Shutdown;
use crate::telemetry::{CallHooks, StepIds, Telemetry, Transport, audit::AuditLog};
use crate::tools::{ToolSet, ToolSource};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything the serve path builds before serving (also used by tests in-process).
pub struct Prepared {
    /// The step's tools, checked (names, collisions, policy).
    pub tools: ToolSet,
    pub telemetry: Arc<Telemetry>,
    pub root: PathBuf,
    /// Begun on a signal: the builtins' running commands stop, new ones are refused.
    pub shutdown: Shutdown,
    /// Bash's private temp directory (when the builtins are served); removed when this is
    /// dropped, which is where the session ends, served or in-process.
    pub private_tmp: Option<confine::PrivateTmp>,
    /// What is done with a secret in a result: per tool of a server with its own `scan`,
    /// else the step's.
    pub scan_results: (
        crate::scan::Mode,
        std::collections::HashMap<String, crate::scan::Mode>,
    ),
}

/// Builds the tool sources, telemetry and tool set from a checked config.
pub fn prepare(cfg: &ServeConfig) -> Result<Prepared, AwfError> {
    let workspace = Workspace::new(&cfg.root).map_err(|e| {
        AwfError::new(
            codes::CONFIG_BAD_ROOT,
            format!("root {}: {e}", cfg.root.display()),
        )
    })?;
    let root = workspace.root().to_path_buf();
    let mut sources: Vec<Box<dyn ToolSource>> = Vec::new();
    let shutdown = Shutdown::new();
    let mut private_tmp = None;
    if cfg.intercept_builtins {
        let (builtins, tmp) = builtins(cfg, workspace, &shutdown)?;
        private_tmp = Some(tmp);
        sources.push(Box::new(builtins));
    }
    let audit = match &cfg.audit_path {
        Some(p) => Some(AuditLog::open(p).map_err(|e| {
            AwfError::new(
                codes::CONFIG_INVALID,
                format!("cannot open the audit file {}: {e}", p.display()),
            )
        })?),
        None => None,
    };
    let traceparent = cfg
        .traceparent
        .clone()
        .or_else(|| std::env::var("TRACEPARENT").ok());
    let telemetry = Arc::new(Telemetry::new(
        crate::telemetry::new_session_id(),
        StepIds {
            run_id: cfg.run_id.clone(),
            step_id: cfg.step_id.clone(),
        },
        audit,
        traceparent.as_deref(),
    ));
    // Plugins start (and their tools are checked) only when the config exposes some.
    let bounds = crate::plugins::CallBounds {
        timeout: std::time::Duration::from_secs(cfg.limits.bash_timeout_seconds),
        output_bytes: cfg.limits.output_bytes,
    };
    // AWF's own operations (`http.request`, ...) are served here; the rest are plugins'.
    let (builtin, plugin_tools): (Vec<_>, Vec<_>) = cfg
        .plugin_tools
        .iter()
        .cloned()
        .partition(|p| crate::operations::operations(&p.plugin).is_some());
    for p in &builtin {
        let timeout = p
            .timeout_seconds
            .map_or(bounds.timeout, std::time::Duration::from_secs);
        let ops = p.expose.iter().map(|op| (op.clone(), timeout)).collect();
        let source =
            crate::operations::BuiltinOperations::new(&p.plugin, ops, p.sandbox.network.as_ref())
                .map_err(|why| {
                AwfError::new(codes::CONFIG_INVALID, format!("{}: {why}", cfg.origin))
            })?;
        sources.push(Box::new(source));
    }
    for adapter in crate::plugins::start_exposed(
        &plugin_tools,
        &cfg.origin,
        &root,
        &shutdown,
        bounds,
        &crate::plugins::JailContext {
            root: root.clone(),
            support: cfg.confine_support,
            processes: cfg.sandbox.processes,
        },
    )? {
        sources.push(Box::new(adapter));
    }
    let step = crate::upstream::Step {
        root: &root,
        support: cfg.confine_support,
        processes: cfg.sandbox.processes,
        pins: cfg.pins.as_deref(),
        timeout: bounds.timeout,
        output_bytes: bounds.output_bytes,
        shutdown: &shutdown,
        telemetry: &telemetry,
        origin: &cfg.origin,
        scan: cfg.scan,
    };
    for server in crate::upstream::start(&cfg.servers, &step)? {
        sources.push(Box::new(server));
    }
    let tools = ToolSet::new(sources, &cfg.tools)
        .map_err(|e| AwfError::new(e.code(), format!("{}: {}", cfg.origin, e.message())))?;
    let own_modes = tools
        .sources()
        .iter()
        .filter_map(|(tool, source)| {
            let spec = cfg.servers.get(source.strip_prefix("server:")?)?;
            Some((tool.clone(), spec.scan.over(cfg.scan).results()))
        })
        .collect();
    Ok(Prepared {
        scan_results: (cfg.scan.results(), own_modes),
        tools,
        telemetry,
        root,
        shutdown,
        private_tmp,
    })
}

/// The builtins of a session: Bash's jail resolved from the config's sandbox (what it
/// cannot confine on this machine said once), its private temp directory, and the audit
/// file checked out of Bash's reach.
fn builtins(
    cfg: &ServeConfig,
    workspace: Workspace,
    shutdown: &Shutdown,
) -> Result<(Builtins, confine::PrivateTmp), AwfError> {
    let root = workspace.root().to_path_buf();
    // What killed sessions left goes, while this one starts (once per process:
    // in-process sessions share one; on a thread of its own, off the start's path).
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(confine::PrivateTmp::sweep_leftovers);
    let tmp = confine::PrivateTmp::create().map_err(|e| {
        AwfError::new(
            codes::IO,
            format!(
                "cannot create a private temp directory under {}: {e}; make it writable \
                 or point TMPDIR at a directory that is",
                std::env::temp_dir().display()
            ),
        )
    })?;
    let bash_env = crate::child_env::ChildEnv {
        passthrough: cfg.sandbox.env_passthrough.clone(),
        set: cfg.sandbox.env.clone().into_iter().collect(),
    };
    let vars = bash_env.vars();
    let var = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let policy = confine::Policy::new(
        cfg.sandbox.clone(),
        confine::Role::Bash,
        cfg.confine_support,
    );
    let confinement = confine::Confinement::new(
        &policy,
        &root,
        tmp.path(),
        std::path::Path::new(crate::builtins::bash::shell()),
        var("PATH"),
        var("HOME").map(Path::new),
        &|name| std::env::var(name).ok(),
    )
    .map_err(|e| AwfError::new(codes::CONFIG_INVALID, format!("{}: {e}", cfg.origin)))?;
    match confinement.status() {
        confine::Status::Unavailable(why) => {
            tracing::warn!("Bash writes are NOT confined: {why}")
        }
        confine::Status::Off => {
            tracing::warn!(
                "Bash writes are NOT confined: Landlock is switched off (landlock: false)"
            )
        }
        confine::Status::On(_) => {}
    }
    if let (confine::NetStatus::Unenforced(why), true) = (
        confinement.net(),
        confinement.status() != &confine::Status::Off,
    ) {
        tracing::warn!("Bash's network is NOT restricted: {why}");
    }
    // Bash must not be able to forge or delete the records of its own calls: the audit
    // file lies outside what it may write, or in a hidden path its mounts cover.
    let covered = |dir: &Path| {
        let dir = crate::private_files::real_path(dir);
        confinement.support().mounts
            && cfg
                .sandbox
                .hidden
                .iter()
                .any(|h| dir.starts_with(crate::private_files::real_path(h)))
    };
    if let Some(dir) = cfg
        .audit_path
        .as_deref()
        .and_then(Path::parent)
        .filter(|d| !covered(d))
    {
        crate::private_files::check_private_location(
            "audit file's directory",
            dir,
            confinement.writable(),
            "give the audit file (--audit or audit_path) a place outside the root and the \
             writable paths",
        )?;
    }
    let builtins = Builtins::new(BuiltinEnv {
        workspace: workspace.with_hidden(confinement.hidden_paths()),
        limits: cfg.limits.clone(),
        confine: confinement,
        bash_env,
        shutdown: shutdown.clone(),
    });
    Ok((builtins, tmp))
}

/// Assembles the step's tools into one `mcpserver::Server` whose hooks record every call
/// (span, log line, audit pair), rejected ones too; `transport` is how its calls arrive
/// (`awf mcp-serve` serves stdio, the HTTP provider calls it in-process).
pub fn build_server(
    prepared: &Prepared,
    transport: Transport,
) -> Result<mcpserver::Server, AwfError> {
    let mut builder = mcpserver::Server::builder("awf", env!("CARGO_PKG_VERSION"))
        .instructions(format!(
            "AWF workspace tools. Every path is inside the workspace root {} (relative paths \
             are relative to it); paths leading outside are refused.",
            prepared.root.display()
        ))
        .hooks(
            CallHooks::new(
                prepared.telemetry.clone(),
                prepared.tools.sources(),
                transport,
                prepared.shutdown.clone(),
            )
            .with_upstream_names(prepared.tools.upstream_names()),
        )
        .result_filter(crate::scan::result_filter(
            prepared.scan_results.0,
            prepared.scan_results.1.clone(),
            prepared.tools.sources(),
            prepared.telemetry.clone(),
        ));
    let (default, own) = &prepared.scan_results;
    if *default != crate::scan::Mode::Off || own.values().any(|m| *m != crate::scan::Mode::Off) {
        crate::scan::warm_up();
    }
    if transport == Transport::Pipe {
        // A client that closed our input waits about this long before it kills us: a call
        // still running then (a stuck plugin, a hung server) is cancelled, not waited for.
        builder = builder.cancel_after_end_of_input(END_OF_INPUT_GRACE);
    }
    prepared.tools.build(builder)
}

/// How long calls may still run once the client closed the server's input.
pub const END_OF_INPUT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
