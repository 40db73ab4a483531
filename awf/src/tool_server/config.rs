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
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
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
    /// `<server>_<tool>` (`crate::upstream`).
    #[serde(default)]
    pub servers: std::collections::BTreeMap<String, crate::upstream::ServerSpec>,
    /// The lock file of the servers' tool pins; absent: pins are neither read nor written.
    #[serde(default)]
    pub pins: Option<PathBuf>,
    /// Where this config came from, for error messages (`the config /path`, `--root`).
    #[serde(skip)]
    pub origin: String,
    /// JSONL audit file (appended); none means no audit trail.
    #[serde(default)]
    pub audit_path: Option<PathBuf>,
    /// The step's server registry (`crate::step_servers`): this server registers there
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
    /// Bash's jail: the keys of a step's `mcp_proxy.sandbox` ([`confine::Sandbox`]). The
    /// older spelling, each key at the top level (`landlock`, `writable_paths`,
    /// `readable_paths`, `hidden_paths`, `unix_sockets`, `read`, `network`, `processes`,
    /// `bounds`, `require`, `env`, `env_passthrough`), is still read ([`FLAT_SANDBOX_KEYS`]).
    #[serde(default)]
    pub sandbox: confine::Sandbox,
    /// What the kernel allows Bash's jail, as `awf run` probed it; absent: probed here.
    #[serde(default)]
    pub confine_support: Option<confine::Support>,
    /// Which tools the agent is offered (deny list, read-only).
    #[serde(default)]
    pub tools: ToolPolicy,
    /// What tools send back, scanned: secrets in results (default redact), descriptions
    /// and schemas of servers' tools (default warn); a server's own `scan` is over it.
    #[serde(default, skip_serializing_if = "crate::scan::Scan::is_unset")]
    pub scan: crate::scan::Scan,
}

fn yes() -> bool {
    true
}

impl ServeConfig {
    /// The config `--root DIR` stands for: builtins over DIR, defaults for the rest, and
    /// awf's own state directory hidden (as in every step of `awf run`): other runs' audit
    /// trails and the file `awf tools call` records its call in may lie beneath DIR (the
    /// default is `~/.local/state/awf`, and DIR may be the home directory).
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
            sandbox: confine::Sandbox {
                hidden: vec![crate::private_files::state_dir()],
                ..Default::default()
            },
            confine_support: None,
            tools: ToolPolicy::default(),
            scan: Default::default(),
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
        let invalid = |e: String| {
            AwfError::new(
                codes::CONFIG_INVALID,
                format!("the config {} is invalid: {e}", path.display()),
            )
        };
        // Read once from the text (an error then has its line and column); only a config in
        // the older spelling, which the strict read refuses, is read again, folded.
        let mut cfg: ServeConfig = match serde_json::from_str(&text) {
            Ok(cfg) => cfg,
            Err(e) => {
                let mut value = serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|_| invalid(e.to_string()))?;
                if !fold_flat_sandbox_keys(&mut value).map_err(invalid)? {
                    return Err(invalid(e.to_string()));
                }
                serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?
            }
        };
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
        let sb = &mut cfg.sandbox;
        for paths in [
            &mut sb.writable,
            &mut sb.readable,
            &mut sb.hidden,
            &mut sb.unix_sockets,
        ] {
            *paths = paths.iter().map(|p| abs(p)).collect();
        }
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
        self.sandbox
            .check()
            .map_err(|e| AwfError::new(codes::CONFIG_INVALID, format!("{origin}: {e}")))?;
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

/// The older spelling of the config's `sandbox`: its keys at the top level, under these
/// names (config key, sandbox key).
pub const FLAT_SANDBOX_KEYS: [(&str, &str); 12] = [
    ("landlock", "landlock"),
    ("writable_paths", "writable"),
    ("readable_paths", "readable"),
    ("hidden_paths", "hidden"),
    ("unix_sockets", "unix_sockets"),
    ("read", "read"),
    ("network", "network"),
    ("processes", "processes"),
    ("bounds", "bounds"),
    ("require", "require"),
    ("env", "env"),
    ("env_passthrough", "env_passthrough"),
];

/// Moves the top-level sandbox keys of a config (the older spelling) into its `sandbox`;
/// true when there were any. Both spellings at once are refused: which one holds would be
/// a guess.
fn fold_flat_sandbox_keys(config: &mut serde_json::Value) -> Result<bool, String> {
    let Some(top) = config.as_object_mut() else {
        return Ok(false);
    };
    let flat: Vec<_> = FLAT_SANDBOX_KEYS
        .iter()
        .filter(|(key, _)| top.contains_key(*key))
        .collect();
    let Some((first, _)) = flat.first() else {
        return Ok(false);
    };
    if top.contains_key("sandbox") {
        return Err(format!(
            "{first} is given beside sandbox; write it inside sandbox (as {:?}) and not at \
             the top level",
            flat[0].1
        ));
    }
    let mut sandbox = serde_json::Map::new();
    for (key, inner) in flat {
        if let Some(v) = top.remove(*key) {
            sandbox.insert((*inner).to_string(), v);
        }
    }
    top.insert("sandbox".into(), sandbox.into());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file with a `ws` beside it, in a temp dir that goes when this is dropped;
    /// derefs to the file's path.
    struct Cfg {
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl std::ops::Deref for Cfg {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.path
        }
    }

    fn write_cfg(name: &str, body: &str) -> Cfg {
        let dir = tempfile::Builder::new()
            .prefix(&format!("awf-cfg-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let path = dir.path().join("cfg.json");
        std::fs::write(&path, body).unwrap();
        Cfg { _dir: dir, path }
    }

    #[test]
    fn minimal_config_gets_defaults_and_relative_paths() {
        let p = write_cfg("min", r#"{"root": "ws", "audit_path": "a.jsonl"}"#);
        let c = ServeConfig::load(&p).unwrap();
        assert!(c.root.ends_with("ws") && c.root.is_absolute());
        assert_eq!(c.audit_path.unwrap(), p.parent().unwrap().join("a.jsonl"));
        assert!(c.intercept_builtins && c.sandbox.landlock());
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

    #[test]
    fn the_sandbox_is_one_key_and_the_older_top_level_keys_mean_the_same() {
        let nested = write_cfg(
            "nested",
            r#"{"root": "ws", "sandbox": {"writable": ["out"], "hidden": ["ws/.env"],
                "network": {"allow": ["crates.io"]}, "processes": 400, "env": {"A": "1"},
                "bounds": {"memory": 67108864}}}"#,
        );
        let flat = write_cfg(
            "flat",
            r#"{"root": "ws", "writable_paths": ["out"], "hidden_paths": ["ws/.env"],
                "network": {"allow": ["crates.io"]}, "processes": 400, "env": {"A": "1"},
                "bounds": {"memory": 67108864}}"#,
        );
        let (n, f) = (
            ServeConfig::load(&nested).unwrap(),
            ServeConfig::load(&flat).unwrap(),
        );
        // Relative paths are the file's directory's, and the two files lie apart.
        let relative = |c: &ServeConfig, file: &Path| {
            let mut sb = c.sandbox.clone();
            for paths in [&mut sb.writable, &mut sb.hidden] {
                *paths = paths
                    .iter()
                    .map(|p| {
                        p.strip_prefix(file.parent().unwrap())
                            .unwrap()
                            .to_path_buf()
                    })
                    .collect();
            }
            sb
        };
        assert_eq!(relative(&n, &nested), relative(&f, &flat));
        let base = nested.parent().unwrap();
        assert_eq!(n.sandbox.writable, vec![base.join("out")]);
        assert_eq!(n.sandbox.hidden, vec![base.join("ws/.env")]);
        assert_eq!(n.sandbox.bounds.memory, Some(67108864));
        // Written back (as `awf run` writes it), it reads the same.
        let again = write_cfg("again", &serde_json::to_string(&n).unwrap());
        assert_eq!(ServeConfig::load(&again).unwrap().sandbox, n.sandbox);
        // Both spellings at once: which one holds would be a guess.
        let both = write_cfg(
            "both",
            r#"{"root": "ws", "sandbox": {"read": "host"}, "hidden_paths": ["x"]}"#,
        );
        let e = ServeConfig::load(&both).unwrap_err();
        assert!(
            e.message().contains("hidden_paths is given beside sandbox")
                && e.message().contains("\"hidden\""),
            "{}",
            e.message()
        );
        // A misspelt key inside it is refused, as at the top level.
        let typo = write_cfg("typo", r#"{"root": "ws", "sandbox": {"writeable": []}}"#);
        let e = ServeConfig::load(&typo).unwrap_err();
        assert!(e.message().contains("writeable"), "{}", e.message());
        let contradiction = write_cfg(
            "contra",
            r#"{"root": "ws", "sandbox": {"landlock": false, "read": "confined"}}"#,
        );
        let e = ServeConfig::load(&contradiction).unwrap_err();
        assert!(e.message().contains("drop one of them"), "{}", e.message());
    }

    #[test]
    fn a_server_s_sandbox_takes_no_per_call_bounds() {
        let sandbox = confine::Sandbox {
            bounds: confine::bounds::Bounds {
                memory: Some(1 << 30),
                ..Default::default()
            },
            ..Default::default()
        };
        let server = confine::Policy::new(sandbox.clone(), confine::Role::Server, None);
        let e = server.check().unwrap_err();
        assert!(e.contains("each Bash call"), "{e}");
        assert!(
            confine::Policy::new(sandbox, confine::Role::Bash, None)
                .check()
                .is_ok()
        );
    }
}
