//! The mcp-serve config: what one step's server serves (its root, tools, plugins, servers,
//! sandbox, limits and telemetry), read from the JSON file the parent writes or made from
//! `--root`, and checked as a whole before anything starts.

use crate::builtins::Limits;
use crate::confine;
use crate::error::{AwfError, codes};
use crate::plugins::PluginTools;
use crate::tools::ToolPolicy;
use serde::Deserialize;
use std::path::{Path, PathBuf};

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
