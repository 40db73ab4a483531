//! `ToolProxyService`: the per-step lifecycle of tool interception (ADR 017). `start`
//! resolves and checks the step's tool set (fatal `USER.MCP_PROXY.*` before any agent
//! starts), writes the private `awf mcp-serve` config (0600 in a 0700 per-step directory)
//! and builds the [`ProxyInjection`] a provider puts into its CLI. `close` guarantees that
//! nothing outlives the step (agent group and any `awf mcp-serve` left: SIGTERM, 5 s,
//! SIGKILL), removes the per-step files and summarises the step's audit records, reporting
//! a server that started but never ended (a crash). The in-process variant for
//! `openai_compatible` builds the same tool server, with the same telemetry, in this process.

use crate::error::{AwfError, codes};
use crate::mcp_serve::{self, ServeConfig};
use crate::plugins::PluginTools;
use crate::private_files::{check_private_location, private_dir, write_private};
use crate::process::{self, ProcessGroup};
use crate::providers::ProxyInjection;
use crate::workflow::McpProxy;
use crate::workflow::check::{PluginCatalog, proxy_problems};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Per-run settings of the service.
#[derive(Clone)]
pub struct ToolProxyService {
    /// The awf executable the agent CLI spawns as `awf mcp-serve`.
    pub exe: PathBuf,
    pub run_id: String,
    /// Private (0700) directory holding the per-step directories.
    pub run_dir: PathBuf,
    /// Where the audit files go (kept after the run).
    pub audit_dir: PathBuf,
    /// The sandbox root of the tools (the run's working directory).
    pub root: PathBuf,
}

/// One started proxy.
pub struct ProxySession {
    pub state: String,
    pub injection: ProxyInjection,
    pub config_path: PathBuf,
    pub audit_path: PathBuf,
    pub traceparent: String,
    serve_config: ServeConfig,
}

/// What `close` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProxyReport {
    /// Calls per tool name.
    pub tool_calls: BTreeMap<String, u64>,
    /// Calls that ended in an error, per tool name.
    pub tool_errors: BTreeMap<String, u64>,
    /// Sessions (`awf mcp-serve` processes) that wrote `session.start` but no `session.end`.
    pub crashed_sessions: Vec<String>,
    pub sessions: usize,
    /// Pids that needed SIGKILL at teardown.
    pub killed: Vec<i32>,
    pub audit_file: String,
    /// Model turns in the audit (`model.response`): requests, input and output tokens.
    #[serde(skip)]
    pub model: [u64; 3],
    /// Bash's connections through the egress proxy (`net.connect` records).
    #[serde(skip_serializing_if = "NetReport::is_empty")]
    pub net: NetReport,
}

/// The hosts a step's Bash reached, and what it was refused.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NetReport {
    /// Allowed connections per `host:port`.
    pub contacted: BTreeMap<String, u64>,
    /// Refused attempts per `host:port`, with the first reason given.
    pub denied: BTreeMap<String, NetDenied>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct NetDenied {
    pub attempts: u64,
    pub reason: String,
}

impl NetReport {
    pub fn is_empty(&self) -> bool {
        self.contacted.is_empty() && self.denied.is_empty()
    }
}

/// A fresh W3C traceparent for a step: a new trace unless `parent` (awf run's own
/// TRACEPARENT) names one to join.
pub fn new_traceparent(parent: Option<&str>) -> String {
    let trace = parent
        .and_then(crate::telemetry::otel::parse_traceparent)
        .map(|p| p.trace_id().to_string())
        .unwrap_or_else(|| {
            format!(
                "{}{}",
                crate::telemetry::new_session_id(),
                crate::telemetry::new_session_id()
            )
        });
    format!("00-{trace}-{}-01", crate::telemetry::new_session_id())
}

impl ToolProxyService {
    /// Refuses to start when the run's private directory or the audit directory lies where
    /// the steps' Bash may write (see [`check_private_location`]).
    pub fn check_locations(&self) -> Result<(), AwfError> {
        // The workspace, and the whole system temp dir: each step's Bash writes only its
        // own temp dir, made fresh under it, but anyone may write /tmp.
        let writable = [self.root.clone(), std::env::temp_dir()];
        let writable = &writable[..];
        check_private_location(
            "audit directory",
            &self.audit_dir,
            writable,
            "give --audit-dir (or XDG_STATE_HOME, where the default lies) a directory outside \
             the workspace and the temp directory",
        )?;
        check_private_location(
            "run directory",
            &self.run_dir,
            writable,
            "set XDG_STATE_HOME to a directory outside the workspace and the temp directory",
        )
    }

    fn serve_config(
        &self,
        state: &str,
        seq: usize,
        proxy: &McpProxy,
        audit: &Path,
        tp: &str,
    ) -> ServeConfig {
        let mut cfg = ServeConfig::for_root(self.root.clone());
        cfg.intercept_builtins = proxy.intercept_builtins;
        cfg.tools = proxy.tools.clone();
        cfg.plugin_tools = proxy
            .plugin_tools
            .iter()
            .map(|p| PluginTools {
                plugin: p.plugin.clone(),
                expose: p.expose.clone(),
                timeout_seconds: p.timeout_seconds,
            })
            .collect();
        let sb = &proxy.sandbox;
        cfg.landlock = sb.landlock;
        cfg.writable_paths = sb.writable.clone();
        cfg.readable_paths = sb.readable.clone();
        cfg.read = sb.read;
        // awf's own files: the run's config and audit trail, other runs' too.
        cfg.hidden_paths = sb.hidden.clone();
        cfg.hidden_paths.extend([
            crate::private_files::state_dir(),
            self.run_dir.clone(),
            self.audit_dir.clone(),
        ]);
        cfg.network = sb.network.clone();
        cfg.unix_sockets = sb.unix_sockets.clone();
        cfg.processes = sb.processes;
        // Bash's environment is resolved here, from awf's: an agent CLI may start
        // `awf mcp-serve` with an environment of its own (codex keeps only a few variables),
        // and Bash must get what the workflow named whichever CLI runs it.
        cfg.env = crate::child_env::from_process(&sb.env_passthrough)
            .into_iter()
            .filter(|(k, _)| k != "TMPDIR")
            .chain(sb.env.iter().cloned())
            .collect();
        cfg.env_passthrough = sb.env_passthrough.clone();
        cfg.audit_path = Some(audit.to_path_buf());
        cfg.run_id = Some(self.run_id.clone());
        cfg.step_id = Some(format!("{seq}-{state}"));
        cfg.traceparent = Some(tp.to_string());
        cfg.origin = format!("mcp_proxy of state {state:?}");
        cfg
    }

    /// The step's `mcp_proxy.sandbox` made real: its writable paths exist (Landlock rules
    /// need an existing path) and none holds the run's private files or audit trail.
    fn prepare_sandbox(&self, state: &str, proxy: &McpProxy) -> Result<(), AwfError> {
        let sb = &proxy.sandbox;
        if !sb.landlock {
            tracing::warn!(
                state,
                "{}.sandbox.landlock is false: the agent's Bash may write anywhere awf may, \
                 and reach the network",
                proxy.path
            );
        }
        for w in &sb.writable {
            std::fs::create_dir_all(w).map_err(|e| {
                AwfError::new(
                    codes::CONFIG_INVALID,
                    format!(
                        "{}.sandbox.writable: cannot create {}: {e}; create it or fix the path",
                        proxy.path,
                        w.display()
                    ),
                )
            })?;
        }
        let fix = format!("remove it from {}.sandbox.writable", proxy.path);
        check_private_location("audit directory", &self.audit_dir, &sb.writable, &fix)?;
        check_private_location("run directory", &self.run_dir, &sb.writable, &fix)
    }

    /// Checks the step's proxy, writes its config and returns the session; its tool spans
    /// nest under `traceparent` (the step span's).
    pub fn start(
        &self,
        state: &str,
        seq: usize,
        proxy: &McpProxy,
        plugins: &mut dyn PluginCatalog,
        traceparent: &str,
    ) -> Result<ProxySession, AwfError> {
        check_proxy(proxy, plugins)?;
        self.prepare_sandbox(state, proxy)?;
        let step_dir = self.run_dir.join(format!("step-{seq}-{state}"));
        private_dir(&step_dir)?;
        private_dir(&self.audit_dir)?;
        let audit_path = self.audit_dir.join(format!("{seq}-{state}.audit.jsonl"));
        let traceparent = traceparent.to_string();
        let cfg = self.serve_config(state, seq, proxy, &audit_path, &traceparent);
        let config_path = step_dir.join("mcp-serve.json");
        let servers_dir = step_dir.join("servers");
        private_dir(&servers_dir)?;
        let json = serde_json::json!({
            "root": cfg.root,
            "intercept_builtins": cfg.intercept_builtins,
            "plugin_tools": proxy.plugin_tools.iter()
                .map(|p| serde_json::json!({
                    "plugin": p.plugin,
                    "expose": p.expose,
                    "timeout_seconds": p.timeout_seconds,
                }))
                .collect::<Vec<_>>(),
            "tools": {"deny": proxy.tools.deny, "read_only": proxy.tools.read_only},
            "audit_path": audit_path,
            "servers_dir": servers_dir,
            "run_id": cfg.run_id,
            "step_id": cfg.step_id,
            "traceparent": traceparent,
            "landlock": cfg.landlock,
            "writable_paths": cfg.writable_paths,
            "read": cfg.read.map(crate::confine::ReadMode::name),
            "readable_paths": cfg.readable_paths,
            "hidden_paths": cfg.hidden_paths,
            "unix_sockets": cfg.unix_sockets,
            "network": cfg.network.as_ref().map(crate::confine::Network::to_json),
            "processes": cfg.processes,
            // Probed once per run (a child that enters the namespaces), not once per step.
            "confine_support": crate::confine::namespaces::support(
                std::path::Path::new(crate::builtins::bash::shell()),
                &self.root,
            ),
            "env": cfg.env,
            "env_passthrough": cfg.env_passthrough,
        });
        write_private(
            &config_path,
            &serde_json::to_vec_pretty(&json).expect("JSON"),
        )?;
        let mut tool_names: Vec<String> = Vec::new();
        if proxy.intercept_builtins {
            tool_names.extend(crate::builtins::NAMES.iter().map(|s| s.to_string()));
        }
        for p in &proxy.plugin_tools {
            for op in &p.expose {
                tool_names.push(crate::workflow::plugin_tool_name(&p.plugin, op));
            }
        }
        // The agent CLI allows only what the server offers.
        tool_names.retain(|name| proxy.tools.withheld(name, false).is_none());
        let mut env = vec![("TRACEPARENT".to_string(), traceparent.clone())];
        for k in [
            "AWF_LOG",
            "AWF_PLUGINS_PATH",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_SERVICE_NAME",
        ]
        .into_iter()
        .chain(crate::confine::readable::toolchain_vars())
        {
            if let Ok(v) = std::env::var(k) {
                env.push((k.to_string(), v));
            }
        }
        let injection = ProxyInjection {
            server_name: "awf".into(),
            command: self.exe.clone(),
            args: vec![
                "mcp-serve".into(),
                "--config".into(),
                config_path.display().to_string(),
            ],
            env,
            intercept_builtins: proxy.intercept_builtins,
            tool_names,
            step_dir,
        };
        Ok(ProxySession {
            state: state.to_string(),
            injection,
            config_path,
            audit_path,
            traceparent,
            serve_config: cfg,
        })
    }

    /// Prepares the in-process tools for `openai_compatible` (same sandbox and telemetry as
    /// `awf mcp-serve`); the caller ends its session with `session_end`.
    pub fn inproc(&self, session: &ProxySession) -> Result<mcp_serve::Prepared, AwfError> {
        let prepared = mcp_serve::prepare(&session.serve_config)?;
        prepared.telemetry.session_start(
            &prepared.root.display().to_string(),
            prepared.tools.offered(),
        );
        Ok(prepared)
    }

    /// Tears the step down: the agent's group (`leader`, when there is one)
    /// and any `awf mcp-serve` still running with this step's config, then the files.
    pub fn close(&self, session: ProxySession, leader: Option<&mut ProcessGroup>) -> ProxyReport {
        // Closed first: a server registering from here on stops by itself.
        let strays = crate::step_servers::close(
            &session.injection.step_dir.join("servers"),
            &session.config_path.display().to_string(),
        );
        let killed = process::terminate(leader, &strays, process::GRACE);
        // Anything else that left the agent's group and was re-parented to this subreaper.
        process::kill_orphans();
        let mut report = summarise_audit(&session.audit_path);
        report.killed = killed;
        if let Err(e) = std::fs::remove_dir_all(&session.injection.step_dir) {
            tracing::warn!(
                "cannot remove the step directory {}: {e}",
                session.injection.step_dir.display()
            );
        }
        for s in &report.crashed_sessions {
            tracing::error!(
                state = %session.state, session = %s,
                "awf mcp-serve crashed during the step (session.start without session.end in {})",
                session.audit_path.display()
            );
        }
        report
    }
}

/// The proxy rules for one state, as an error (the first fatal problem) for the runner.
pub fn check_proxy(proxy: &McpProxy, plugins: &mut dyn PluginCatalog) -> Result<(), AwfError> {
    if !proxy.enable {
        return Ok(());
    }
    match proxy_problems(proxy, plugins).into_iter().next() {
        None => Ok(()),
        Some(d) => Err(AwfError::new(
            d.code,
            format!("{} ({}): {}", d.message, d.path, d.hint),
        )),
    }
}

/// Counts of calls by tool, errors, and crashed sessions, from an audit file.
pub fn summarise_audit(path: &Path) -> ProxyReport {
    let mut r = ProxyReport {
        audit_file: path.display().to_string(),
        ..Default::default()
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return r;
    };
    let mut started: Vec<String> = Vec::new();
    let mut ended: Vec<String> = Vec::new();
    for rec in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let tool = rec["tool"].as_str().unwrap_or("?").to_string();
        let sid = rec["session_id"].as_str().unwrap_or("").to_string();
        match rec["type"].as_str() {
            Some("session.start") => started.push(sid),
            Some("session.end") => ended.push(sid),
            Some("tool.call") => *r.tool_calls.entry(tool).or_default() += 1,
            Some("tool.result") if rec["is_error"] == true => {
                *r.tool_errors.entry(tool).or_default() += 1
            }
            Some("model.response") => {
                r.model[0] += 1;
                r.model[1] += rec["input_tokens"].as_u64().unwrap_or(0);
                r.model[2] += rec["output_tokens"].as_u64().unwrap_or(0);
            }
            Some("net.connect") => {
                let target = format!(
                    "{}:{}",
                    rec["host"].as_str().unwrap_or("?"),
                    rec["port"].as_u64().unwrap_or(0)
                );
                if rec["decision"] == "allowed" {
                    *r.net.contacted.entry(target).or_default() += 1;
                } else {
                    let d = r.net.denied.entry(target).or_insert_with(|| NetDenied {
                        attempts: 0,
                        reason: rec["reason"].as_str().unwrap_or("").to_string(),
                    });
                    d.attempts += 1;
                }
            }
            _ => {}
        }
    }
    r.sessions = started.len();
    r.crashed_sessions = started.into_iter().filter(|s| !ended.contains(s)).collect();
    r
}

/// Live counts for progress: calls per tool so far, and the model turns seen by the
/// relay (requests, input tokens, output tokens).
pub fn live_counts(path: &Path) -> (BTreeMap<String, u64>, [u64; 3]) {
    let r = summarise_audit(path);
    (r.tool_calls, r.model)
}
