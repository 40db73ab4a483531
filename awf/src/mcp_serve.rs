//! `awf mcp-serve`: the per-step MCP server an agent CLI spawns. Reads the step's config
//! (written by the parent, or made from `--root`), assembles the step's [`ToolSet`]
//! (builtins and plugin operations) into an `mcpserver::Server` observed by the
//! telemetry's hooks, and serves stdio until end of input, `shutdown`, or SIGTERM/SIGINT,
//! answering everything read and flushing telemetry before it exits 0.

use crate::builtins::{BuiltinEnv, Builtins, Limits, sandbox::Sandbox};
use crate::confine;
use crate::error::{AwfError, codes};
use crate::plugins::PluginTools;
use crate::process::{self, Shutdown};
use crate::telemetry::{CallHooks, StepIds, Telemetry, Transport, audit::AuditLog};
use crate::tools::{ToolPolicy, ToolSet, ToolSource};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// The mcp-serve config (JSON). Unknown keys are errors: a typo must not silently turn a
/// safety switch back to its default.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The workspace root every builtin is confined to (absent: the directory `awf
    /// mcp-serve` starts in, or `--root`). Relative paths in this file are relative to the
    /// file's own directory.
    #[serde(default)]
    pub root: PathBuf,
    #[serde(default = "yes")]
    pub intercept_builtins: bool,
    /// Plugin operations to expose (`[{plugin, expose: [op...]}]`), started and checked by
    /// `crate::plugins::start_exposed` before serving.
    #[serde(default)]
    pub plugin_tools: Vec<PluginTools>,
    /// Third-party MCP servers to start, each in its own jail, their tools re-exported as
    /// `<server>_<tool>` ([`crate::mcp_servers`]).
    #[serde(default)]
    pub servers: std::collections::BTreeMap<String, crate::mcp_servers::ServerSpec>,
    /// The lock file of the servers' tool pins; absent: pins are neither read nor written.
    #[serde(default)]
    pub pins: Option<PathBuf>,
    /// Where this config came from, for error messages (`the config /path`, `--root`).
    #[serde(skip)]
    pub origin: String,
    /// JSONL audit file (appended); none means no audit trail.
    #[serde(default)]
    pub audit_path: Option<PathBuf>,
    /// The step's server registry ([`crate::step_servers`]): this server registers there
    /// before it serves, and stops at once if the step is closed already.
    #[serde(default)]
    pub servers_dir: Option<PathBuf>,
    #[serde(default)]
    pub run_id: Option<String>,
    #[serde(default)]
    pub step_id: Option<String>,
    /// The step span's W3C traceparent; the environment's TRACEPARENT when absent.
    #[serde(default)]
    pub traceparent: Option<String>,
    #[serde(default)]
    pub limits: Limits,
    /// Confine Bash's writes with Landlock (default true).
    #[serde(default = "yes")]
    pub landlock: bool,
    /// Extra paths Bash may write to, besides the root, the session's private temp directory
    /// and /dev/null.
    #[serde(default)]
    pub writable_paths: Vec<PathBuf>,
    /// Bash's TCP network; absent means deny where the kernel can enforce it.
    #[serde(default)]
    pub network: Option<confine::Network>,
    /// What Bash may read; absent means confined (host where `landlock` is false).
    #[serde(default)]
    pub read: Option<confine::ReadMode>,
    /// Extra paths Bash may read under `read: confined`.
    #[serde(default)]
    pub readable_paths: Vec<PathBuf>,
    /// Paths covered by empty mounts besides the built-in secret locations.
    #[serde(default)]
    pub hidden_paths: Vec<PathBuf>,
    /// The host's unix sockets Bash may connect to.
    #[serde(default)]
    pub unix_sockets: Vec<PathBuf>,
    /// Processes and threads one Bash call may have alive at once; absent means
    /// `confine::DEFAULT_PROCESSES`.
    #[serde(default)]
    pub processes: Option<u32>,
    /// Bash's per-call bounds (bytes, seconds, counts); absent ones take their defaults.
    #[serde(default)]
    pub bounds: confine::bounds::Bounds,
    /// Guarantees the step refuses to run without.
    #[serde(default)]
    pub require: Vec<confine::Guarantee>,
    /// What the kernel allows Bash's jail, as `awf run` probed it; absent: probed here.
    #[serde(default)]
    pub confine_support: Option<confine::Support>,
    /// Variables set in Bash's environment.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Variables of awf's environment passed to Bash (NAME or PREFIX*).
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// Which tools the agent is offered (deny list, read-only).
    #[serde(default)]
    pub tools: ToolPolicy,
}

fn yes() -> bool {
    true
}

impl ServeConfig {
    /// The config `--root DIR` stands for: builtins over DIR, defaults for the rest.
    pub fn for_root(root: PathBuf) -> ServeConfig {
        ServeConfig {
            root,
            intercept_builtins: true,
            plugin_tools: Vec::new(),
            servers: Default::default(),
            pins: None,
            origin: "--root".into(),
            audit_path: None,
            servers_dir: None,
            run_id: None,
            step_id: None,
            traceparent: None,
            limits: Limits::default(),
            landlock: true,
            writable_paths: Vec::new(),
            network: None,
            read: None,
            readable_paths: Vec::new(),
            hidden_paths: Vec::new(),
            unix_sockets: Vec::new(),
            processes: None,
            bounds: Default::default(),
            require: Vec::new(),
            confine_support: None,
            env: Default::default(),
            env_passthrough: Vec::new(),
            tools: ToolPolicy::default(),
        }
    }

    /// Reads and checks a config file; every error names the file and the problem.
    pub fn load(path: &Path) -> Result<ServeConfig, AwfError> {
        Self::load_with_root(path, None)
    }

    /// [`ServeConfig::load`], with `root` (from `--root`) over the file's; without either,
    /// the current directory. With servers and no `pins`, the lock file is the one beside
    /// the config (`gw.json` → `gw.lock.json`), as `awf tools pin --config` writes it.
    pub fn load_with_root(path: &Path, root: Option<PathBuf>) -> Result<ServeConfig, AwfError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                codes::CONFIG_MISSING
            } else {
                codes::CONFIG_INVALID
            };
            AwfError::new(
                code,
                format!("cannot read the config {}: {e}", path.display()),
            )
        })?;
        let mut cfg: ServeConfig = serde_json::from_str(&text).map_err(|e| {
            AwfError::new(
                codes::CONFIG_INVALID,
                format!("the config {} is invalid: {e}", path.display()),
            )
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let abs = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        cfg.root = match root {
            Some(r) => r,
            None if cfg.root.as_os_str().is_empty() => std::env::current_dir().map_err(|e| {
                AwfError::new(
                    codes::IO,
                    format!("cannot read the current directory (the root): {e}"),
                )
            })?,
            None => abs(&cfg.root),
        };
        if cfg.pins.is_none() && !cfg.servers.is_empty() {
            cfg.pins = Some(crate::workflow::default_lock_file(path));
        }
        cfg.audit_path = cfg.audit_path.as_deref().map(abs);
        cfg.servers_dir = cfg.servers_dir.as_deref().map(abs);
        cfg.pins = cfg.pins.as_deref().map(abs);
        cfg.writable_paths = cfg.writable_paths.iter().map(|p| abs(p)).collect();
        cfg.readable_paths = cfg.readable_paths.iter().map(|p| abs(p)).collect();
        cfg.hidden_paths = cfg.hidden_paths.iter().map(|p| abs(p)).collect();
        cfg.unix_sockets = cfg.unix_sockets.iter().map(|p| abs(p)).collect();
        cfg.origin = format!("the config {}", path.display());
        cfg.check(&cfg.origin)?;
        Ok(cfg)
    }

    /// Semantic checks shared by files and `--root`.
    pub fn check(&self, origin: &str) -> Result<(), AwfError> {
        if !self.root.is_dir() {
            return Err(AwfError::new(
                codes::CONFIG_BAD_ROOT,
                format!(
                    "{origin}: root {} is not an existing directory; create it or fix root",
                    self.root.display()
                ),
            ));
        }
        if !self.intercept_builtins && self.plugin_tools.is_empty() && self.servers.is_empty() {
            return Err(AwfError::new(
                codes::EMPTY_PROXY,
                format!(
                    "{origin}: intercept_builtins is false and plugin_tools and servers are empty, so there is no tool to serve"
                ),
            ));
        }
        if let Some(t) = &self.traceparent
            && crate::telemetry::otel::parse_traceparent(t).is_none()
        {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}: traceparent {t:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"
                ),
            ));
        }
        if let Some(n) = self.processes
            && !(confine::MIN_PROCESSES..=confine::MAX_PROCESSES).contains(&n)
        {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}: processes is {n}; write a whole number from {} to {} (the \
                     default is {})",
                    confine::MIN_PROCESSES,
                    confine::MAX_PROCESSES,
                    confine::DEFAULT_PROCESSES
                ),
            ));
        }
        if let Err(e) = self.bounds.check() {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!("{origin}: {e}"),
            ));
        }
        if !self.landlock && self.read == Some(confine::ReadMode::Confined) {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}: read is confined but landlock is false, and reads are \
                     confined through Landlock; drop one of them"
                ),
            ));
        }
        if !self.landlock
            && matches!(
                self.network,
                Some(confine::Network::Deny | confine::Network::Hosts(_))
            )
        {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}: network is deny or a host list but landlock is false, which \
                     turns Bash's sandbox off; drop one of them"
                ),
            ));
        }
        for p in &self.env_passthrough {
            crate::child_env::check_pattern(p).map_err(|e| {
                AwfError::new(
                    codes::CONFIG_INVALID,
                    format!("{origin}: env_passthrough: {e}"),
                )
            })?;
        }
        for n in self.env.keys() {
            crate::child_env::check_name(n)
                .map_err(|e| AwfError::new(codes::CONFIG_INVALID, format!("{origin}: env: {e}")))?;
        }
        let l = &self.limits;
        if l.output_bytes < 1024
            || l.read_lines == 0
            || l.line_bytes == 0
            || l.glob_results == 0
            || l.grep_results == 0
        {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!("{origin}: limits must be positive (output_bytes at least 1024)"),
            ));
        }
        if l.bash_timeout_seconds == 0 || l.bash_timeout_seconds > l.bash_max_timeout_seconds {
            return Err(AwfError::new(
                codes::CONFIG_INVALID,
                format!(
                    "{origin}: limits.bash_timeout_seconds must be between 1 and limits.bash_max_timeout_seconds"
                ),
            ));
        }
        Ok(())
    }
}

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
}

/// Builds the tool sources, telemetry and tool set from a checked config.
pub fn prepare(cfg: &ServeConfig) -> Result<Prepared, AwfError> {
    let sandbox = Sandbox::new(&cfg.root).map_err(|e| {
        AwfError::new(
            codes::CONFIG_BAD_ROOT,
            format!("root {}: {e}", cfg.root.display()),
        )
    })?;
    let root = sandbox.root().to_path_buf();
    let mut sources: Vec<Box<dyn ToolSource>> = Vec::new();
    let shutdown = Shutdown::new();
    let mut private_tmp = None;
    if cfg.intercept_builtins {
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
            passthrough: cfg.env_passthrough.clone(),
            set: cfg.env.clone().into_iter().collect(),
        };
        let vars = bash_env.vars();
        let var = |name: &str| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let policy = confine::Policy {
            landlock: cfg.landlock,
            read: cfg.read,
            network: cfg.network.clone(),
            writable: cfg.writable_paths.clone(),
            readable: cfg.readable_paths.clone(),
            hidden: cfg.hidden_paths.clone(),
            unix_sockets: cfg.unix_sockets.clone(),
            processes: cfg.processes,
            support: cfg.confine_support,
            root_read_only: false,
            serves_unix_socket: false,
            bounds: Some(cfg.bounds),
            require: cfg.require.clone(),
        };
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
                    .hidden_paths
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
        private_tmp = Some(tmp);
        sources.push(Box::new(Builtins::new(BuiltinEnv {
            sandbox: sandbox.with_hidden(confinement.hidden_paths()),
            limits: cfg.limits.clone(),
            confine: confinement,
            bash_env,
            shutdown: shutdown.clone(),
        })));
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
    for adapter in crate::plugins::start_exposed(
        &cfg.plugin_tools,
        &cfg.origin,
        &root,
        &shutdown,
        bounds,
        &crate::plugins::JailContext {
            root: root.clone(),
            support: cfg.confine_support,
            processes: cfg.processes,
        },
    )? {
        sources.push(Box::new(adapter));
    }
    let step = crate::mcp_servers::Step {
        root: &root,
        support: cfg.confine_support,
        processes: cfg.processes,
        pins: cfg.pins.as_deref(),
        timeout: bounds.timeout,
        output_bytes: bounds.output_bytes,
        shutdown: &shutdown,
        telemetry: &telemetry,
        origin: &cfg.origin,
    };
    for server in crate::mcp_servers::start(&cfg.servers, &step)? {
        sources.push(Box::new(server));
    }
    let tools = ToolSet::new(sources, &cfg.tools)
        .map_err(|e| AwfError::new(e.code(), format!("{}: {}", cfg.origin, e.message())))?;
    Ok(Prepared {
        tools,
        telemetry,
        root,
        shutdown,
        private_tmp,
    })
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
        );
    if transport == Transport::Pipe {
        // A client that closed our input waits about this long before it kills us: a call
        // still running then (a stuck plugin, a hung server) is cancelled, not waited for.
        builder = builder.cancel_after_end_of_input(END_OF_INPUT_GRACE);
    }
    prepared.tools.build(builder)
}

/// How long calls may still run once the client closed the server's input.
pub const END_OF_INPUT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// `--serve-in-child`: the process the client started forks at once and only waits; the
/// child serves. Codex ends its MCP server with SIGTERM to the server's process group and,
/// in the same instant, SIGKILL to the pid it started (tokio's kill-on-drop; its own 2 s
/// grace runs in a thread that dies with Codex), with no setting to change either. The
/// SIGKILL then hits this waiter: the serving child, still in the group, has the SIGTERM
/// and ends its session as on any signal, and if the serving child itself dies, the
/// session ends without `session.end`, a crash as before. Its death signal is SIGTERM, so
/// killing the waiter alone (without a group SIGTERM) ends it gracefully too. The waiter
/// costs a process (its memory is shared copy-on-write with the child's) for each step, so
/// only the clients that kill their server without grace ask for it.
///
/// Call it while the process has one thread. Returns in the serving child; the waiter exits
/// with the child's status (128 + the signal when a signal ended it).
pub fn serve_in_child() -> Result<(), AwfError> {
    // A fork copies only the calling thread: with another thread, a lock it held would stay
    // held in the child for ever.
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .map_err(|e| {
            AwfError::new(
                codes::SERVER_FAILED,
                format!(
                    "--serve-in-child: cannot count this process's threads in /proc/self/task \
                     ({e}); mount /proc, or start the server without --serve-in-child"
                ),
            )
        })?;
    if threads != 1 {
        return Err(AwfError::new(
            codes::SERVER_FAILED,
            format!(
                "--serve-in-child: the process already runs {threads} threads, so it cannot \
                 fork safely (a bug in awf: the fork must come first); start the server \
                 without --serve-in-child"
            ),
        ));
    }
    let waiter = std::process::id() as libc::pid_t;
    // SAFETY: the process has a single thread (checked above), so the child is a complete
    // copy in which no lock is held by a thread that does not exist there.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(AwfError::new(
            codes::SERVER_FAILED,
            format!(
                "--serve-in-child: cannot fork: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    if child == 0 {
        // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid take and touch no memory.
        let orphaned = unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            libc::getppid() != waiter
        };
        if orphaned {
            // The waiter died before its death signal was armed: nobody is left to serve.
            std::process::exit(0);
        }
        return Ok(());
    }
    // The waiter keeps no end of the client's pipes, so that the client sees end of output
    // when the serving child ends.
    // SAFETY: closing the standard input and output, which this process no longer uses.
    unsafe {
        libc::close(0);
        libc::close(1);
    }
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child; status is a valid int.
        if unsafe { libc::waitpid(child, &mut status, 0) } == child {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            eprintln!("awf: --serve-in-child: cannot wait for the serving child {child}: {e}");
            std::process::exit(1);
        }
    }
    std::process::exit(if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    })
}

/// `awf mcp-serve` from its flags: `--config FILE`, `--root DIR` or both (the root over the
/// config's), and `--audit FILE` (overrides the config's audit_path).
pub fn run_from_flags(
    config: Option<PathBuf>,
    root: Option<PathBuf>,
    audit: Option<PathBuf>,
) -> Result<(), AwfError> {
    let mut cfg = match (config, root) {
        (Some(c), root) => ServeConfig::load_with_root(&c, root)?,
        (None, Some(r)) => {
            let cfg = ServeConfig::for_root(r);
            cfg.check("--root")?;
            cfg
        }
        (None, None) => {
            return Err(AwfError::new(
                codes::CONFIG_MISSING,
                "awf mcp-serve needs --config FILE or --root DIR",
            ));
        }
    };
    if audit.is_some() {
        cfg.audit_path = audit;
    }
    run(cfg)
}

/// The exact argument shapes agent CLIs use to start the server
/// (`[--log-format F] mcp-serve (--config F | --root D) [--audit F] [--serve-in-child]`),
/// parsed without clap: building the whole CLI definition costs start-up time and memory
/// on every agent step.
/// Anything else (help, typos, other commands) returns None and goes through clap.
pub struct FastServeArgs {
    pub log_format: crate::telemetry::LogFormat,
    pub config: Option<PathBuf>,
    pub root: Option<PathBuf>,
    pub audit: Option<PathBuf>,
    /// See [`serve_in_child`].
    pub serve_in_child: bool,
}

pub fn fast_serve_args(args: &[std::ffi::OsString]) -> Option<FastServeArgs> {
    let mut out = FastServeArgs {
        log_format: Default::default(),
        config: None,
        root: None,
        audit: None,
        serve_in_child: false,
    };
    let mut it = args.iter();
    let mut seen_command = false;
    while let Some(a) = it.next() {
        match a.to_str()? {
            "mcp-serve" if !seen_command => seen_command = true,
            "--log-format" => {
                out.log_format = match it.next()?.to_str()? {
                    "human" => crate::telemetry::LogFormat::Human,
                    "json" => crate::telemetry::LogFormat::Json,
                    _ => return None,
                }
            }
            "--config" if seen_command && out.config.is_none() => {
                out.config = Some(it.next()?.into())
            }
            "--root" if seen_command && out.root.is_none() => out.root = Some(it.next()?.into()),
            "--audit" if seen_command && out.audit.is_none() => out.audit = Some(it.next()?.into()),
            "--serve-in-child" if seen_command && !out.serve_in_child => out.serve_in_child = true,
            _ => return None,
        }
    }
    // A source; clap reports the other cases with its usual messages.
    (seen_command && (out.config.is_some() || out.root.is_some())).then_some(out)
}

/// Runs `awf mcp-serve` to completion. Returns Ok on every clean stop.
pub fn run(cfg: ServeConfig) -> Result<(), AwfError> {
    if cfg.intercept_builtins {
        // Off the way to `initialize`'s answer as far as it can be: what follows overlaps it.
        confine::namespaces::prefetch(
            Path::new(crate::builtins::bash::shell()),
            &cfg.root,
            cfg.confine_support.is_none(),
        );
    }
    if let Some(dir) = &cfg.servers_dir {
        let open = crate::step_servers::register(dir).map_err(|e| {
            AwfError::new(
                codes::IO,
                format!(
                    "cannot register in the step's server directory {} ({e}): {} was written \
                     by `awf run` for one step; start the server while that step runs",
                    dir.display(),
                    cfg.origin
                ),
            )
        })?;
        if !open {
            return Err(AwfError::new(
                codes::SERVER_FAILED,
                format!(
                    "the step {} was written for has ended: nothing to serve",
                    cfg.origin
                ),
            ));
        }
    }
    // Processes that escape a Bash command's group are re-parented here, to be killed.
    process::become_subreaper();
    let prepared = prepare(&cfg)?;
    let server = build_server(&prepared, Transport::Pipe)?;
    let stop = server.stop_handle();
    let signal = Arc::new(AtomicI32::new(0));
    // Set in the handler itself, at delivery: a signal that came before end of input was
    // read is told even when the thread below had not run yet (a loaded machine).
    let delivered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_usize(sig, delivered.clone(), sig as usize).map_err(|e| {
            AwfError::new(codes::IO, format!("cannot install signal handlers: {e}"))
        })?;
    }
    {
        let signal = signal.clone();
        let shutdown = prepared.shutdown.clone();
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])
        .map_err(|e| AwfError::new(codes::IO, format!("cannot install signal handlers: {e}")))?;
        std::thread::Builder::new()
            .name("awf-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    signal.store(sig, Ordering::SeqCst);
                    // Running commands are killed so their calls are answered at once;
                    // the server then stops reading, answers what it read and returns.
                    shutdown.begin();
                    stop.stop();
                }
            })
            .map_err(|e| {
                AwfError::new(codes::IO, format!("cannot start the signal thread: {e}"))
            })?;
    }
    let tools = prepared.tools.offered();
    prepared
        .telemetry
        .session_start(&prepared.root.display().to_string(), tools);
    tracing::debug!(root = %prepared.root.display(), tools = ?tools, "serving");
    let result = server.serve_stdio();
    // Every call has ended; whatever escaped and was re-parented here goes too.
    process::kill_orphans();
    let sig = match signal.load(Ordering::SeqCst) {
        0 => delivered.load(Ordering::SeqCst) as i32,
        sig => sig,
    };
    match result {
        Ok(reason) => {
            let (reason, detail) = if sig != 0 {
                ("signal", Some(process::signal_name(sig)))
            } else {
                (reason.as_str(), None)
            };
            prepared.telemetry.session_end(reason, detail);
            tracing::debug!(reason, "stopped");
            Ok(())
        }
        Err(e) => {
            prepared
                .telemetry
                .session_end("error", Some(&e.to_string()));
            Err(AwfError::new(
                codes::SERVER_FAILED,
                format!("serving stdio failed: {e}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_cfg(name: &str, body: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("awf-cfg-{name}-{}", std::process::id()));
        std::fs::create_dir_all(d.join("ws")).unwrap();
        let p = d.join("cfg.json");
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn fast_path_takes_only_the_exact_serve_shapes() {
        let v = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let f = fast_serve_args(&v(&["mcp-serve", "--root", "/w"])).unwrap();
        assert_eq!(f.root.unwrap(), PathBuf::from("/w"));
        let f = fast_serve_args(&v(&[
            "--log-format",
            "json",
            "mcp-serve",
            "--config",
            "c.json",
            "--audit",
            "a",
        ]))
        .unwrap();
        assert!(
            f.config.is_some()
                && f.audit.is_some()
                && f.log_format == crate::telemetry::LogFormat::Json
                && !f.serve_in_child
        );
        let f = fast_serve_args(&v(&["mcp-serve", "--config", "c", "--serve-in-child"])).unwrap();
        assert!(f.serve_in_child);
        // Both: the root over the config's.
        let f = fast_serve_args(&v(&["mcp-serve", "--root", "a", "--config", "b"])).unwrap();
        assert!(f.root.is_some() && f.config.is_some());
        for bad in [
            &["mcp-serve"][..],
            &["mcp-serve", "--help"],
            &["mcp-serve", "--root"],
            &["tools", "list"],
            &["mcp-serve", "--root", "a", "--root", "b"],
            &["--log-format", "xml", "mcp-serve", "--root", "a"],
            &["--serve-in-child", "mcp-serve", "--root", "a"],
            &[
                "mcp-serve",
                "--root",
                "a",
                "--serve-in-child",
                "--serve-in-child",
            ],
        ] {
            assert!(fast_serve_args(&v(bad)).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn minimal_config_gets_defaults_and_relative_paths() {
        let p = write_cfg("min", r#"{"root": "ws", "audit_path": "a.jsonl"}"#);
        let c = ServeConfig::load(&p).unwrap();
        assert!(c.root.ends_with("ws") && c.root.is_absolute());
        assert_eq!(c.audit_path.unwrap(), p.parent().unwrap().join("a.jsonl"));
        assert!(c.intercept_builtins && c.landlock);
        assert_eq!(c.limits, Limits::default());
    }

    #[test]
    fn config_errors_name_the_problem() {
        let e = ServeConfig::load(Path::new("/nonexistent/cfg.json")).unwrap_err();
        assert_eq!(e.code(), codes::CONFIG_MISSING);
        let e = ServeConfig::load(&write_cfg("unk", r#"{"root": "ws", "rooot": 1}"#)).unwrap_err();
        assert!(e.message().contains("unknown field `rooot`"), "{e}");
        let e = ServeConfig::load(&write_cfg("bad", r#"{"root": "nope"}"#)).unwrap_err();
        assert_eq!(e.code(), codes::CONFIG_BAD_ROOT);
        let e = ServeConfig::load(&write_cfg(
            "empty",
            r#"{"root": "ws", "intercept_builtins": false}"#,
        ))
        .unwrap_err();
        assert_eq!(e.code(), codes::EMPTY_PROXY);
        let e = ServeConfig::load(&write_cfg("tp", r#"{"root": "ws", "traceparent": "x"}"#))
            .unwrap_err();
        assert!(e.message().contains("traceparent"));
        let e = ServeConfig::load(&write_cfg(
            "lim",
            r#"{"root": "ws", "limits": {"bash_timeout_seconds": 0}}"#,
        ))
        .unwrap_err();
        assert!(e.message().contains("bash_timeout_seconds"));
        assert_eq!(e.exit_code(), 1);
    }
}
