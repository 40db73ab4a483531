//! `ToolProxyService`: the per-step lifecycle of tool interception (ADR 017). `start`
//! resolves and checks the step's tool set (fatal `USER.MCP_PROXY.*` before any agent
//! starts), writes the private `awf mcp-serve` config (0600 in a 0700 per-step directory)
//! and builds the [`ProxyInjection`] a provider puts into its CLI. `close` guarantees that
//! nothing outlives the step (agent group and any `awf mcp-serve` left: SIGTERM, 5 s,
//! SIGKILL), removes the per-step files and summarises the step's audit records, reporting
//! a server that started but never ended (a crash). A step's third-party MCP servers are
//! passed on in the same config, each with the environment the workflow names resolved
//! here and awf's own directories hidden from it, as Bash's are. The in-process variant for
//! `openai_compatible` builds the same tool server, with the same telemetry, in this process.

pub mod pin_tools;

use crate::error::{AwfError, codes};
use crate::plugins::PluginTools;
use crate::private_files::{check_private_location, private_dir, write_private};
use crate::process::{self, ProcessGroup};
use crate::providers::ProxyInjection;
use crate::tool_server::ServeConfig;
use crate::tool_server::assembly;
use crate::upstream::ServerSpec;
use crate::workflow::check::{PluginCatalog, proxy_problems};
use crate::workflow::{McpProxy, McpServer};
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
    /// The hash of the audit file's last line at the step's end: its chain's head, which
    /// the run state keeps and `awf audit verify RUN_ID` holds the file to (none when the
    /// file is empty, or its chain breaks: then `audit_broken` says where).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_head: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_broken: Option<String>,
    /// The head signed with the audit key (`telemetry::audit_key`), when awf has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_head_mac: Option<String>,
    /// Model turns in the audit (`model.response`): requests, input and output tokens.
    #[serde(skip)]
    pub model: [u64; 3],
    /// Bash's connections through the egress proxy (`net.connect` records).
    #[serde(skip_serializing_if = "NetReport::is_empty")]
    pub net: NetReport,
    /// Third-party tools kept from the agent because they changed since pinned (or are
    /// new), with why (`tool.withheld` records).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub withheld: BTreeMap<String, String>,
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
    /// Refuses to run a proxied state when the run's private directory or the audit
    /// directory lies where the steps' Bash may write (see [`check_private_location`]):
    /// beneath the system temp dir, which anyone may write (each step's Bash writes only
    /// its own temp dir, made fresh under it); beneath the workspace only where the jail
    /// has no mount namespace. With one they are covered in every jail of the run (Bash,
    /// plugins, servers: awf's own dirs are hidden paths) and refused by
    /// the file tools, so an agent cannot reach them even there; Landlock alone cannot
    /// carve them out of a writable tree.
    pub fn check_locations(&self) -> Result<(), AwfError> {
        let covered = crate::confine::namespaces::support(
            std::path::Path::new(crate::builtins::bash::shell()),
            &self.root,
        )
        .mounts;
        let mut writable = vec![std::env::temp_dir()];
        if !covered {
            writable.insert(0, self.root.clone());
        }
        let (audit_fix, run_fix) = if covered {
            (
                "give --audit-dir (or XDG_STATE_HOME, where the default lies) a directory \
                 outside the temp directory",
                "set XDG_STATE_HOME to a directory outside the temp directory",
            )
        } else {
            (
                "give --audit-dir (or XDG_STATE_HOME, where the default lies) a directory \
                 outside the workspace and the temp directory (this machine gives Bash no \
                 mount namespace to hide it in)",
                "set XDG_STATE_HOME to a directory outside the workspace and the temp \
                 directory (this machine gives Bash no mount namespace to hide it in)",
            )
        };
        check_private_location("audit directory", &self.audit_dir, &writable, audit_fix)?;
        check_private_location("run directory", &self.run_dir, &writable, run_fix)
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
        cfg.scan = proxy.scan;
        cfg.tools = proxy.tools.clone();
        cfg.plugin_tools = proxy
            .plugin_tools
            .iter()
            .map(|p| PluginTools {
                plugin: p.plugin.clone(),
                expose: p.expose.clone(),
                timeout_seconds: p.timeout_seconds,
                // A plugin's jail has a server's defaults; awf's own files are hidden
                // from it as from Bash.
                sandbox: {
                    let mut sb = p.sandbox.clone().unwrap_or_default();
                    // Resolved here, as a server's: the CLI may start awf mcp-serve with
                    // fewer variables than awf has.
                    for (k, v) in crate::child_env::named_from_process(&sb.env_passthrough) {
                        sb.env.entry(k).or_insert(v);
                    }
                    sb.hidden.extend(self.own_dirs());
                    sb
                },
            })
            .collect();
        let mut sb = proxy.sandbox.clone();
        sb.hidden.extend(self.own_dirs());
        // Bash's environment is resolved here, from awf's: an agent CLI may start
        // `awf mcp-serve` with an environment of its own (codex keeps only a few variables),
        // and Bash must get what the workflow named whichever CLI runs it.
        let literal = std::mem::take(&mut sb.env);
        sb.env = crate::child_env::from_process(&sb.env_passthrough)
            .into_iter()
            .filter(|(k, _)| k != "TMPDIR")
            .chain(literal)
            .collect();
        cfg.sandbox = sb;
        cfg.servers = proxy
            .servers
            .iter()
            .map(|s| (s.name.clone(), self.server_spec(s)))
            .collect();
        // Without a server there is nothing to pin, and no lock file to make.
        if !proxy.servers.is_empty() {
            cfg.pins = Some(lock_file(proxy));
        }
        cfg.audit_path = Some(audit.to_path_buf());
        cfg.run_id = Some(self.run_id.clone());
        cfg.step_id = Some(format!("{seq}-{state}"));
        cfg.traceparent = Some(tp.to_string());
        cfg.origin = format!("mcp_proxy of state {state:?}");
        cfg
    }

    /// awf's own directories, hidden from Bash and from every server: the run's config and
    /// audit trail, other runs' too.
    fn own_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![
            crate::private_files::state_dir(),
            self.run_dir.clone(),
            self.audit_dir.clone(),
        ];
        // The audit key's file too, wherever it is.
        dirs.extend(crate::telemetry::audit_key::key_file());
        dirs
    }

    fn server_spec(&self, s: &McpServer) -> ServerSpec {
        server_spec(s, &self.own_dirs())
    }

    /// The step's `mcp_proxy.sandbox` and each server's `sandbox` made real: their writable
    /// paths exist (Landlock rules need an existing path) and none holds the run's private
    /// files or audit trail, nor, for a server, the lock file of its own pins.
    fn prepare_sandbox(&self, state: &str, proxy: &McpProxy) -> Result<(), AwfError> {
        let sb = &proxy.sandbox;
        if !sb.landlock() {
            tracing::warn!(
                state,
                "{}.sandbox.landlock is false: the agent's Bash may write anywhere awf may, \
                 and reach the network",
                proxy.path
            );
        }
        self.prepare_writable(&format!("{}.sandbox", proxy.path), &sb.writable)?;
        for s in &proxy.servers {
            let at = format!("{}.sandbox", s.path);
            if !s.sandbox.landlock() {
                tracing::warn!(
                    state,
                    server = %s.name,
                    "{at}.landlock is false: the server may write anywhere awf may, and reach \
                     the network"
                );
            }
            self.prepare_writable(&at, &s.sandbox.writable)?;
            check_private_location(
                "lock file of the tool pins",
                &lock_file(proxy),
                &s.sandbox.writable,
                &format!("remove it from {at}.writable, or set mcp_proxy.pins elsewhere"),
            )?;
        }
        Ok(())
    }

    /// `writable` (the list at `at`, for messages) created, and apart from awf's own files.
    fn prepare_writable(&self, at: &str, writable: &[PathBuf]) -> Result<(), AwfError> {
        for w in writable {
            std::fs::create_dir_all(w).map_err(|e| {
                AwfError::new(
                    codes::CONFIG_INVALID,
                    format!(
                        "{at}.writable: cannot create {}: {e}; create it or fix the path",
                        w.display()
                    ),
                )
            })?;
        }
        let fix = format!("remove it from {at}.writable");
        check_private_location("audit directory", &self.audit_dir, writable, &fix)?;
        check_private_location("run directory", &self.run_dir, writable, &fix)
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
        // What `awf mcp-serve` reads; the in-process server (openai_compatible) has no
        // registry of servers to join, and probes on its own.
        let mut written = cfg.clone();
        written.servers_dir = Some(servers_dir);
        // Probed once per run (a child that enters the namespaces), not once per step.
        written.confine_support = Some(crate::confine::namespaces::support(
            std::path::Path::new(crate::builtins::bash::shell()),
            &self.root,
        ));
        write_private(
            &config_path,
            &serde_json::to_vec_pretty(&written).expect("JSON"),
        )?;
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
            step_dir,
        };
        Ok(ProxySession {
            state: state.to_string(),
            injection,
            config_path,
            audit_path,
            serve_config: cfg,
        })
    }

    /// Prepares the in-process tools for `openai_compatible` (same sandbox and telemetry as
    /// `awf mcp-serve`); the caller ends its session with `session_end`.
    pub fn inproc(&self, session: &ProxySession) -> Result<assembly::Prepared, AwfError> {
        let prepared = assembly::prepare(&session.serve_config)?;
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
        if let (Some(head), Ok(Some(key))) =
            (&report.audit_head, crate::telemetry::audit_key::key())
        {
            let cfg = &session.serve_config;
            report.audit_head_mac = Some(crate::telemetry::audit_key::sign(
                key,
                cfg.run_id.as_deref().unwrap_or(""),
                cfg.step_id.as_deref().unwrap_or(""),
                head,
            ));
        }
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

/// The lock file of a step's tool pins, absolute: `awf mcp-serve` reads relative paths
/// of its config from the config's own directory, not from where the workflow lies.
fn lock_file(proxy: &McpProxy) -> PathBuf {
    let file = proxy.lock_file();
    std::path::absolute(&file).unwrap_or(file)
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
    let Ok(bytes) = std::fs::read(path) else {
        return r;
    };
    let chain = crate::telemetry::audit_chain::verify(&bytes);
    match (chain.broken, chain.torn_tail) {
        (Some(why), _) => r.audit_broken = Some(why),
        (None, Some(at)) => {
            r.audit_broken = Some(format!("the file ends mid-record at offset {at}"))
        }
        (None, None) => r.audit_head = chain.head,
    }
    if let Some(why) = &r.audit_broken {
        tracing::error!("the audit file {}: the chain breaks: {why}", path.display());
    }
    let text = String::from_utf8_lossy(&bytes);
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
            Some("tool.withheld") => {
                let why = rec["reason"].as_str().unwrap_or("").to_string();
                r.withheld.entry(tool).or_insert(why);
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

/// A workflow server as `awf mcp-serve` reads it: the variables its `env_passthrough`
/// names resolved from awf's environment into `env` (an agent CLI may start `awf
/// mcp-serve` with fewer variables than awf has, and the server must get what the
/// workflow named whichever CLI runs it), the literal values over them, and awf's own
/// directories (`own_dirs`) hidden.
pub fn server_spec(s: &McpServer, own_dirs: &[PathBuf]) -> ServerSpec {
    let sb = &s.sandbox;
    let mut env: std::collections::BTreeMap<String, String> =
        crate::child_env::named_from_process(&s.env_passthrough)
            .into_iter()
            .filter(|(k, _)| k != "TMPDIR")
            .collect();
    env.extend(s.env.iter().cloned());
    // A remote server's headers take their `${VAR}`s from awf's environment: resolved
    // here, as `env_passthrough` is, for the `awf mcp-serve` an agent CLI starts with
    // fewer variables than awf has.
    for (_, value) in &s.headers {
        for var in crate::upstream::remote::header_vars(value) {
            if let Ok(v) = std::env::var(&var) {
                env.insert(var, v);
            }
        }
    }
    let mut sandbox = sb.clone();
    sandbox.hidden.extend(own_dirs.iter().cloned());
    // Merged into the server's own by the parser.
    sandbox.env = Default::default();
    sandbox.env_passthrough = Vec::new();
    ServerSpec {
        command: s.command.clone(),
        url: s.url.clone(),
        headers: s.headers.iter().cloned().collect(),
        allow_private: s.allow_private,
        scan: s.scan,
        env,
        env_passthrough: s.env_passthrough.clone(),
        sandbox,
        tools: s.tools.clone(),
        rename: s.rename.iter().cloned().collect(),
        timeout_seconds: s.timeout_seconds,
        start_timeout_seconds: s.start_timeout_seconds,
        optional: s.optional,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::StateKind;

    struct NoPlugins;

    impl PluginCatalog for NoPlugins {
        fn operations(&mut self, plugin: &str) -> Result<Vec<String>, (&'static str, String)> {
            Err((codes::UNKNOWN_PLUGIN, format!("no plugin {plugin}")))
        }
    }

    /// A scratch directory with the workspace, the run and audit directories, and the
    /// service over them; the guard removes the directory when dropped.
    fn service(tag: &str) -> (tempfile::TempDir, PathBuf, ToolProxyService) {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("awf-proxy-{tag}-"))
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::create_dir_all(dir.join("flows")).unwrap();
        let service = ToolProxyService {
            exe: PathBuf::from("/bin/false"),
            run_id: "run-1".into(),
            run_dir: dir.join("run"),
            audit_dir: dir.join("audit"),
            root: dir.join("work"),
        };
        (tmp, dir, service)
    }

    /// The `mcp_proxy` of the one agent state of `dir/flows/fix.yaml`, whose proxy block is
    /// `lines` (each at the proxy's indentation); the workflow must be free of errors.
    fn proxy_of(dir: &Path, lines: &[&str]) -> McpProxy {
        let proxy: String = lines.iter().map(|l| format!("      {l}\n")).collect();
        let text = format!(
            "name: s\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    \
             prompt: p\n    mcp_proxy:\n{proxy}    on_success: done\n  done:\n    type: \
             terminal\n"
        );
        let (wf, diags) = crate::workflow::parse::parse(&text, &dir.join("flows/fix.yaml"));
        assert!(diags.is_empty(), "{diags:#?}");
        match &wf.unwrap().states[0].kind {
            StateKind::Agent(a) => a.mcp_proxy.clone().unwrap(),
            _ => unreachable!("the first state is the agent"),
        }
    }

    /// What `awf mcp-serve` reads of the config `start` wrote for `proxy`.
    fn written(service: &ToolProxyService, proxy: &McpProxy) -> Result<ServeConfig, AwfError> {
        let tp = new_traceparent(None);
        let session = service.start("a", 1, proxy, &mut NoPlugins, &tp)?;
        let cfg = ServeConfig::load(&session.config_path);
        std::fs::remove_dir_all(&session.injection.step_dir).unwrap();
        cfg
    }

    #[test]
    fn the_served_config_holds_each_server_with_its_environment_resolved_and_awf_hidden() {
        let (_tmp, dir, service) = service("servers");
        let cache = dir.join("cache/npm");
        let writable = format!("    writable: [{}]", cache.display());
        let proxy = proxy_of(
            &dir,
            &[
                "enable: true",
                "intercept_builtins: false",
                "servers:",
                "  gh:",
                "    command: [/bin/sh, -c, \"exec cat\"]",
                "    env: {LIT: own}",
                "    env_passthrough: [CARGO_PKG_*, AWF_TEST_UNSET_VARIABLE]",
                "    sandbox:",
                &format!("  {writable}"),
                "      hidden: [/opt/secret]",
                "      network: {allow: [api.github.com]}",
                "      env: {LIT: sandbox, SB: sb}",
                "    tools: {allow: [search]}",
                "    rename: {search_repositories: search}",
                "    timeout_seconds: 60",
                "    optional: true",
            ],
        );
        let cfg = written(&service, &proxy).unwrap();
        assert_eq!(cfg.servers.len(), 1, "{:#?}", cfg.servers);
        let gh = &cfg.servers["gh"];
        assert_eq!(gh.command, ["/bin/sh", "-c", "exec cat"]);
        // Resolved here from awf's own environment (cargo sets CARGO_PKG_* for its tests),
        // the literal values over them; an unset name adds nothing.
        assert_eq!(gh.env["CARGO_PKG_NAME"], env!("CARGO_PKG_NAME"));
        assert_eq!(gh.env["CARGO_PKG_VERSION"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            (gh.env["LIT"].as_str(), gh.env["SB"].as_str()),
            ("own", "sb")
        );
        assert!(
            gh.env
                .keys()
                .all(|k| k.starts_with("CARGO_PKG_") || k == "LIT" || k == "SB")
        );
        assert!(
            !gh.env.contains_key("PATH"),
            "the allowlist is not copied: {:?}",
            gh.env
        );
        assert_eq!(
            gh.env_passthrough,
            ["CARGO_PKG_*", "AWF_TEST_UNSET_VARIABLE"]
        );
        let sb = &gh.sandbox;
        assert_eq!(sb.writable, std::slice::from_ref(&cache));
        assert!(
            cache.is_dir(),
            "a server's writable path is made before it starts"
        );
        for want in [
            PathBuf::from("/opt/secret"),
            crate::private_files::state_dir(),
            service.run_dir.clone(),
            service.audit_dir.clone(),
        ] {
            assert!(
                sb.hidden.contains(&want),
                "{want:?} not hidden: {:?}",
                sb.hidden
            );
        }
        assert_eq!(
            sb.network,
            Some(crate::confine::Network::Hosts(vec![
                "api.github.com".into()
            ]))
        );
        assert_eq!((sb.read, sb.landlock()), (None, true));
        assert_eq!(gh.tools.allow, Some(vec!["search".to_string()]));
        assert_eq!(gh.rename["search_repositories"], "search");
        assert_eq!((gh.timeout_seconds, gh.optional), (Some(60), true));
        assert_eq!(cfg.pins, Some(dir.join("flows/fix.lock.json")));

        let pinned = proxy_of(
            &dir,
            &[
                "enable: true",
                "pins: ../pins.json",
                "servers: {gh: {command: [/bin/sh]}}",
            ],
        );
        assert_eq!(
            written(&service, &pinned).unwrap().pins,
            Some(dir.join("flows/../pins.json"))
        );
        let none = proxy_of(&dir, &["enable: true"]);
        let cfg = written(&service, &none).unwrap();
        assert!(cfg.servers.is_empty() && cfg.pins.is_none(), "{cfg:#?}");
    }

    #[test]
    fn a_plugin_s_sandbox_is_read_and_passed_on_with_awf_hidden() {
        let (_tmp, dir, service) = service("plugin-sandbox");
        let proxy = proxy_of(
            &dir,
            &[
                "enable: true",
                "plugin_tools:",
                "  - plugin: notes",
                "    expose: [add]",
                "    sandbox: {network: allow, env: {K: v}}",
            ],
        );
        // What `awf mcp-serve` reads, as an agent CLI starts it.
        struct Notes;
        impl PluginCatalog for Notes {
            fn operations(&mut self, _: &str) -> Result<Vec<String>, (&'static str, String)> {
                Ok(vec!["add".into()])
            }
        }
        let tp = new_traceparent(None);
        let session = service.start("a", 1, &proxy, &mut Notes, &tp).unwrap();
        let cfg = ServeConfig::load(&session.config_path).unwrap();
        std::fs::remove_dir_all(&session.injection.step_dir).unwrap();
        let spec = &cfg.plugin_tools[0].sandbox;
        assert_eq!(spec.network, Some(crate::confine::Network::Allow));
        assert_eq!(spec.env["K"], "v");
        assert!(
            spec.hidden.contains(&service.audit_dir),
            "{:?}",
            spec.hidden
        );
        // The step's own, for Bash, beside it.
        assert!(cfg.sandbox.hidden.contains(&service.audit_dir));
        let text = "name: s\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: \
                    claude\n    prompt: p\n    mcp_proxy:\n      enable: true\n      \
                    plugin_tools:\n        - plugin: notes\n          expose: [add]\n          \
                    sandbox: {netwrk: allow}\n    on_success: done\n  done:\n    type: \
                    terminal\n";
        let (_, diags) = crate::workflow::parse::parse(text, &dir.join("flows/fix.yaml"));
        assert!(
            diags
                .iter()
                .any(|d| d.path.ends_with("plugin_tools[0].sandbox.netwrk")),
            "{diags:#?}"
        );
    }

    #[test]
    fn a_server_that_may_write_awf_s_records_or_its_pins_is_refused() {
        let (_tmp, dir, service) = service("server-writable");
        for (writable, what) in [
            (dir.join("audit"), "audit directory"),
            (dir.clone(), "audit directory"),
            (dir.join("flows"), "lock file"),
        ] {
            let proxy = proxy_of(
                &dir,
                &[
                    "enable: true",
                    &format!(
                        "servers: {{gh: {{command: [/bin/sh], sandbox: {{writable: [{}]}}}}}}",
                        writable.display()
                    ),
                ],
            );
            let e = written(&service, &proxy).unwrap_err();
            assert_eq!(e.code(), codes::CONFIG_INVALID);
            assert!(e.to_string().contains(what), "{e}");
            assert!(
                e.to_string()
                    .contains("states.a.mcp_proxy.servers.gh.sandbox.writable"),
                "{e}"
            );
        }
    }
}
