//! Third-party MCP servers behind the proxy: each started in its own jail, built by
//! [`crate::confine`] as Bash's calls get theirs ([`process`]), spoken to as an MCP
//! client on mcpserver's wire types ([`client`], in the revision [`era`] names and
//! [`probe`] tells, restarted once per step by [`link`]), its tools re-exported as
//! `<server>_<tool>` ([`source`]) and pinned by a hash of all an agent reads of them
//! ([`pins`]). A remote server (`url`) is the same link over Streamable HTTP instead of a
//! process's stdio ([`remote`]). [`start`] is what
//! `awf mcp-serve` calls for its config's `servers`: every server starts in parallel,
//! and one that fails fails the step (naming it, its command or URL and its stderr's
//! last lines) unless it is `optional`.

pub mod client;
pub mod config;
pub mod era;
pub mod link;
pub mod pins;
pub mod probe;
pub mod process;
pub mod remote;
pub mod runners;
pub mod source;

pub use config::{ServerSpec, ServerTools};
pub use source::ServerSource;

use crate::confine::child::Report;
use crate::error::{AwfError, codes};
use crate::telemetry::{CallScope, Telemetry};
use link::Link;
use opentelemetry::KeyValue;
use process::StartContext;
use serde_json::Value;
use source::{CLIENT_PREFIX, Exposed};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// What the servers of one step share.
pub struct Step<'a> {
    pub root: &'a Path,
    pub support: Option<crate::confine::Support>,
    pub processes: Option<u32>,
    /// The lock file of the tool pins, if pins are kept.
    pub pins: Option<&'a Path>,
    /// A call's deadline unless the server's `timeout_seconds` says otherwise.
    pub timeout: Duration,
    pub output_bytes: usize,
    pub shutdown: &'a crate::process::Shutdown,
    pub telemetry: &'a Arc<Telemetry>,
    /// Where the config came from, for messages.
    pub origin: &'a str,
    /// The step's scan settings (a server's own are over them).
    pub scan: crate::scan::Scan,
}

/// Starts every server of `servers` (in parallel) and returns their tool sources.
pub fn start(
    servers: &BTreeMap<String, ServerSpec>,
    step: &Step<'_>,
) -> Result<Vec<ServerSource>, AwfError> {
    if servers.is_empty() {
        return Ok(Vec::new());
    }
    for (name, spec) in servers {
        check_spec(name, spec, step.origin)?;
    }
    let mut pins = match step.pins {
        Some(p) => Some(pins::Pins::load(p).map_err(|e| AwfError::new(codes::CONFIG_INVALID, e))?),
        None => None,
    };
    let started: Vec<(String, Result<Started, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = servers
            .iter()
            .map(|(name, spec)| {
                let h = s.spawn(move || launch(name, spec, step));
                (name.clone(), h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, h)| {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err("its start panicked (a bug in awf)".into()));
                (name, r)
            })
            .collect()
    });
    // Every tool's name, as offered and as its server lists it: a description that names
    // another server's tool is a finding.
    let names: Vec<(String, String)> = started
        .iter()
        .filter_map(|(name, r)| r.as_ref().ok().map(|s| (name, s)))
        .flat_map(|(name, s)| {
            s.tools
                .iter()
                .filter_map(|t| t.get("name")?.as_str())
                .flat_map(move |t| {
                    [
                        (name.clone(), format!("{name}_{t}")),
                        (name.clone(), t.into()),
                    ]
                })
        })
        .collect();
    let mut out = Vec::new();
    let mut first_use = Vec::new();
    for (name, result) in started {
        let spec = &servers[&name];
        let started = match result {
            Ok(s) => s,
            Err(why) if spec.optional => {
                tracing::warn!(
                    server = %name,
                    "server {name} ({}) did not start and is optional, so its tools are absent: {why}",
                    spec.describe()
                );
                continue;
            }
            Err(why) => {
                return Err(AwfError::new(
                    codes::SERVER_FAILED,
                    format!(
                        "{}: server {name} ({}) did not start: {why}; fix its command, \
                         url or sandbox, or mark it optional: true",
                        step.origin,
                        spec.describe()
                    ),
                ));
            }
        };
        let verdicts = match &pins {
            Some(p) => {
                if !p.knows(&name) {
                    first_use.push((name.clone(), started.tools.clone()));
                }
                p.check(&name, &started.tools)
            }
            None => vec![pins::Verdict::Pinned; started.tools.len()],
        };
        let pins_path = step.pins.map(Path::to_path_buf).unwrap_or_default();
        let others: Vec<String> = names
            .iter()
            .filter(|(server, _)| *server != name)
            .map(|(_, tool)| tool.clone())
            .collect();
        let seen = Seen {
            verdicts: &verdicts,
            pins_path: &pins_path,
            others: &others,
        };
        out.push(expose(&name, spec, started, &seen, step)?);
    }
    if let Some(p) = pins.as_mut()
        && !first_use.is_empty()
    {
        for (name, tools) in &first_use {
            p.record(name, tools);
            tracing::info!(
                server = %name,
                "pinned the {} tools of server {name} in {} (first use): a later run withholds \
                 any of them that changes; commit the file",
                tools.len(),
                p.path().display()
            );
        }
        p.save()
            .map_err(|e| AwfError::new(codes::IO, format!("{}: {e}", step.origin)))?;
    }
    Ok(out)
}

/// A started server before its tools are checked.
struct Started {
    link: Arc<Link>,
    tools: Vec<Value>,
    withdrawn: Arc<Mutex<HashMap<String, String>>>,
    in_flight: Arc<Mutex<Vec<CallScope>>>,
    /// Upstream name → (hash, tool name) of the tools as offered, filled once known.
    offered: Arc<OnceLock<HashMap<String, (String, String)>>>,
    /// The gate of the server that serves the tools, once it is built.
    gate: Arc<OnceLock<mcpserver::ToolGate>>,
}

fn check_spec(name: &str, spec: &ServerSpec, origin: &str) -> Result<(), AwfError> {
    let at = format!("{origin}, servers.{name}");
    let bad = |why: String| Err(AwfError::new(codes::CONFIG_INVALID, format!("{at}: {why}")));
    let ok_name = name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !ok_name {
        return bad(format!(
            "the server name {name:?} is not letters, digits and hyphens (starting with a \
             letter, at most 32): it becomes the prefix `{name}_` of its tools' names; rename it"
        ));
    }
    match &spec.url {
        Some(url) => {
            if !spec.command.is_empty() {
                return bad("both command and url; a server is started (command) or \
                            reached (url): keep one"
                    .into());
            }
            if let Some(why) = remote::url_problem(url, spec.allow_private) {
                return bad(why);
            }
        }
        None if spec.command.is_empty() || spec.command[0].is_empty() => {
            return bad(
                "command is empty; give the server's argv, e.g. [npx, -y, package], or the \
                 url of a remote server"
                    .into(),
            );
        }
        None if !spec.headers.is_empty() => {
            return bad(
                "headers without url: headers are sent to a remote server; give \
                        its url, or pass values to a started server with env"
                    .into(),
            );
        }
        None => {}
    }
    if spec.timeout_seconds == Some(0) || spec.start_timeout_seconds == Some(0) {
        return bad("a timeout of 0 s; give at least 1, or leave it out for the default".into());
    }
    if spec.tools.allow.is_some() && !spec.tools.deny.is_empty() {
        return bad("tools has both allow and deny; keep one of them".into());
    }
    for p in spec
        .env_passthrough
        .iter()
        .chain(&spec.sandbox.env_passthrough)
    {
        crate::child_env::check_pattern(p).map_err(|e| {
            AwfError::new(codes::CONFIG_INVALID, format!("{at}: env_passthrough: {e}"))
        })?;
    }
    for n in spec.env.keys().chain(spec.sandbox.env.keys()) {
        crate::child_env::check_name(n)
            .map_err(|e| AwfError::new(codes::CONFIG_INVALID, format!("{at}: env: {e}")))?;
    }
    Ok(())
}

fn launch(name: &str, spec: &ServerSpec, step: &Step<'_>) -> Result<Started, String> {
    let withdrawn: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let in_flight: Arc<Mutex<Vec<CallScope>>> = Arc::default();
    let offered: Arc<OnceLock<HashMap<String, (String, String)>>> = Arc::default();
    let gate: Arc<OnceLock<mcpserver::ToolGate>> = Arc::default();
    let cx = Arc::new(StartContext {
        root: step.root.to_path_buf(),
        support: step.support,
        processes: step.processes,
        report: reporter(name, step.telemetry.clone(), in_flight.clone()),
    });
    let telemetry = step.telemetry.clone();
    let server = name.to_string();
    let stderr: process::StderrSink = Arc::new(move |line: &str| {
        tracing::info!(server = %server, stderr = %telemetry.mask_text(line), "server stderr");
    });
    let me: Arc<OnceLock<Weak<Link>>> = Arc::default();
    let list_changed = {
        let (me, withdrawn, offered, gate, server) = (
            me.clone(),
            withdrawn.clone(),
            offered.clone(),
            gate.clone(),
            name.to_string(),
        );
        let telemetry = step.telemetry.clone();
        Arc::new(move || {
            let Some(link) = me.get().and_then(Weak::upgrade) else {
                return;
            };
            let Some(offered) = offered.get() else { return };
            recheck(&server, &link, offered, &withdrawn, gate.get(), &telemetry);
        }) as Arc<dyn Fn() + Send + Sync>
    };
    let (link, tools) = Link::start(name, spec, cx, stderr, list_changed)?;
    let link = Arc::new(link);
    let _ = me.set(Arc::downgrade(&link));
    Ok(Started {
        link,
        tools,
        withdrawn,
        in_flight,
        offered,
        gate,
    })
}

/// After `notifications/tools/list_changed` (or a restart): every offered tool that is
/// gone or whose hash changed is withdrawn for the rest of the step.
fn recheck(
    server: &str,
    link: &Link,
    offered: &HashMap<String, (String, String)>,
    withdrawn: &Mutex<HashMap<String, String>>,
    gate: Option<&mcpserver::ToolGate>,
    telemetry: &Telemetry,
) {
    let tools = match link.list_tools() {
        Ok(t) => t,
        Err(why) => {
            tracing::warn!(server = %server, "cannot list the tools again after a change: {why}");
            return;
        }
    };
    let now: HashMap<&str, String> = tools
        .iter()
        .filter_map(|t| Some((t.get("name")?.as_str()?, pins::hash(t))))
        .collect();
    let mut w = withdrawn.lock().unwrap_or_else(|e| e.into_inner());
    for (upstream, (hash, tool)) in offered {
        let why = match now.get(upstream.as_str()) {
            None => "the server removed it during this run",
            Some(h) if h != hash => {
                "changed since pinned: the server changed its description, schema or \
                 annotations during this run"
            }
            Some(_) => continue,
        };
        if w.insert(upstream.clone(), why.to_string()).is_none() {
            tracing::warn!(server = %server, tool = %upstream, "withheld from now on: {why}");
            // Not listed from now on, refused as withheld, and the client told to list
            // again.
            if let Some(gate) = gate {
                gate.withhold(tool, why);
            }
            withheld_record(telemetry, server, tool, why);
        }
    }
}

/// The server's tools checked and named: the `tools` block, renames, pins, and the name
/// rules (valid MCP names that fit after the longest client prefix).
/// What is known of a started server's tools before they are offered: their pins'
/// verdicts (the lock file's path for messages) and the step's other tools' names.
struct Seen<'a> {
    verdicts: &'a [pins::Verdict],
    pins_path: &'a Path,
    others: &'a [String],
}

fn expose(
    name: &str,
    spec: &ServerSpec,
    started: Started,
    seen: &Seen<'_>,
    step: &Step<'_>,
) -> Result<ServerSource, AwfError> {
    let (verdicts, pins_path) = (seen.verdicts, seen.pins_path);
    let descriptions = spec.scan.over(step.scan).descriptions();
    let mut offered = Vec::new();
    let mut withheld = Vec::new();
    let upstream_names: Vec<&str> = started
        .tools
        .iter()
        .filter_map(|t| t.get("name")?.as_str())
        .collect();
    warn_unlisted(name, spec, &upstream_names);
    for (def, verdict) in started.tools.iter().zip(verdicts) {
        let Some(upstream) = def.get("name").and_then(Value::as_str) else {
            tracing::warn!(server = %name, "the server listed a tool without a name: {def}");
            continue;
        };
        let short = spec.rename.get(upstream).map_or(upstream, String::as_str);
        let full = format!("{name}_{short}");
        check_exposed_name(name, upstream, &full, step.origin)?;
        let kept_back = if spec
            .tools
            .allow
            .as_ref()
            .is_some_and(|a| !a.iter().any(|t| t == upstream))
        {
            Some(format!("servers.{name}.tools.allow does not list it"))
        } else if spec.tools.deny.iter().any(|t| t == upstream) {
            Some(format!("servers.{name}.tools.deny denies it"))
        } else {
            verdict
                .withheld(pins_path)
                .or_else(|| scan_description(name, &full, def, seen.others, descriptions, step))
        };
        if let Some(why) = kept_back {
            if matches!(verdict, pins::Verdict::New | pins::Verdict::Changed(_)) {
                tracing::warn!(server = %name, tool = %upstream, "withheld: {why}");
                withheld_record(step.telemetry, name, &full, &why);
            }
            withheld.push((full, why));
            continue;
        }
        offered.push(Exposed {
            tool: source::tool_from(&full, def),
            upstream: upstream.to_string(),
            hash: pins::hash(def),
            read_only: def
                .get("annotations")
                .and_then(|a| a.get("readOnlyHint"))
                .and_then(Value::as_bool)
                == Some(true),
        });
    }
    let hashes = offered
        .iter()
        .map(|e| {
            (
                e.upstream.clone(),
                (e.hash.clone(), e.tool.name().to_string()),
            )
        })
        .collect();
    let _ = started.offered.set(hashes);
    Ok(ServerSource::new(
        name,
        started.link,
        offered,
        withheld,
        started.withdrawn,
        started.in_flight,
        spec.timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(step.timeout),
        step.output_bytes,
        step.shutdown.clone(),
        started.gate,
    ))
}

/// A tool the `tools` block or `rename` names that the server does not list: said, as a
/// likely typo.
fn warn_unlisted(name: &str, spec: &ServerSpec, upstream_names: &[&str]) {
    for listed in spec
        .tools
        .allow
        .iter()
        .flatten()
        .chain(&spec.tools.deny)
        .chain(spec.rename.keys())
    {
        if !upstream_names.contains(&listed.as_str()) {
            tracing::warn!(
                server = %name,
                "servers.{name} names the tool {listed:?}, which the server does not list (it \
                 lists {})",
                upstream_names.join(", ")
            );
        }
    }
}

/// The name a server's tool gets (`full`) must be a valid MCP name that fits in 64
/// characters after the longest client prefix.
fn check_exposed_name(
    name: &str,
    upstream: &str,
    full: &str,
    origin: &str,
) -> Result<(), AwfError> {
    if let Err(why) = mcpserver::check_name(full) {
        return Err(AwfError::new(
            codes::INVALID_TOOL_NAME,
            format!(
                "{origin}: tool {upstream:?} of server {name} would be {full:?}: {why}; add \
                 rename: {{{upstream}: <a shorter name of letters, digits, _ and ->}} to \
                 servers.{name}, or deny it in servers.{name}.tools"
            ),
        ));
    }
    if CLIENT_PREFIX.len() + full.len() > 64 {
        return Err(AwfError::new(
            codes::INVALID_TOOL_NAME,
            format!(
                "{origin}: tool {upstream:?} of server {name} would be {full:?}, {} characters: \
                 with the longest client prefix ({CLIENT_PREFIX}) it passes MCP's 64; give \
                 the server a shorter name, or add rename: {{{upstream}: <shorter>}} to \
                 servers.{name}",
                full.len()
            ),
        ));
    }
    Ok(())
}

/// A `tool.withheld` audit record: what the step's summary lists as kept from the agent.
/// The findings of a tool's description and schema ([`crate::scan::descriptions`]):
/// logged and audited (`tool.suspicious`) unless the scan is off; with `refuse`, why the
/// tool is withheld.
fn scan_description(
    server: &str,
    full: &str,
    def: &Value,
    others: &[String],
    mode: crate::scan::Mode,
    step: &Step<'_>,
) -> Option<String> {
    use crate::scan::Mode;
    if mode == Mode::Off {
        return None;
    }
    let findings = crate::scan::descriptions::scan_tool(def, others);
    if findings.is_empty() {
        return None;
    }
    tracing::warn!(
        server = %server,
        tool = %full,
        "the description of {full} is suspicious: {}",
        findings.join("; ")
    );
    let mut r = serde_json::Map::new();
    r.insert("tool".into(), full.into());
    r.insert("source".into(), format!("server:{server}").into());
    r.insert("findings".into(), findings.clone().into());
    r.insert("mode".into(), mode.as_str().into());
    step.telemetry.record("tool.suspicious", r);
    (mode == Mode::Refuse).then(|| {
        format!(
            "its description or schema is suspicious ({}), and the scan of descriptions is \
             refuse",
            findings.join("; ")
        )
    })
}

fn withheld_record(telemetry: &Telemetry, server: &str, tool: &str, why: &str) {
    let mut r = serde_json::Map::new();
    r.insert("tool".into(), tool.into());
    r.insert("source".into(), format!("server:{server}").into());
    r.insert("reason".into(), why.into());
    telemetry.record("tool.withheld", r);
}

/// Where a server's jail reports go: a log line each, and an audit record (with the
/// server's name) and span event of the server's call in flight, or a record of the
/// session when none is.
fn reporter(
    server: &str,
    telemetry: Arc<Telemetry>,
    in_flight: Arc<Mutex<Vec<CallScope>>>,
) -> crate::confine::child::Reporter {
    let server = server.to_string();
    Arc::new(move |report: Report| {
        let (mut record, mut attributes, allowed, what) = match &report {
            Report::Egress(a) => {
                let attributes = vec![
                    KeyValue::new("server.address", a.host.clone()),
                    KeyValue::new("server.port", i64::from(a.port)),
                    KeyValue::new("awf.net.decision", a.decision_name()),
                ];
                (
                    a.record(),
                    attributes,
                    a.decision_name() == "allowed",
                    format!("{}:{}", a.host, a.port),
                )
            }
            Report::Unix(a) => {
                let attributes = vec![
                    KeyValue::new("network.transport", "unix"),
                    KeyValue::new("server.address", a.path.clone()),
                    KeyValue::new("awf.net.decision", a.decision_name()),
                ];
                (a.record(), attributes, a.allowed, a.path.clone())
            }
        };
        record.insert("server".into(), server.clone().into());
        attributes.push(KeyValue::new("awf.mcp.server", server.clone()));
        let why = record
            .get("rule")
            .or(record.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let why = telemetry.mask_text(&why);
        if allowed {
            tracing::info!(server = %server, to = %what, rule = %why, "net.connect allowed");
        } else {
            tracing::warn!(server = %server, to = %what, reason = %why, "net.connect denied");
        }
        let scope = in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned();
        match scope {
            Some(scope) => scope.record("net.connect", record, attributes),
            None => telemetry.record("net.connect", record),
        }
    })
}

/// Starts server `name` as a step would (its jail over `root`), lists its tools and stops
/// it: what `awf tools pin` compares with the pins.
pub fn list_once(name: &str, spec: &ServerSpec, root: &Path) -> Result<Vec<Value>, String> {
    let telemetry = Arc::new(Telemetry::new(
        crate::telemetry::new_session_id(),
        crate::telemetry::StepIds::default(),
        None,
        None,
    ));
    let cx = Arc::new(StartContext {
        root: root.to_path_buf(),
        support: None,
        processes: None,
        report: reporter(name, telemetry.clone(), Arc::default()),
    });
    let server = name.to_string();
    let stderr: process::StderrSink = Arc::new(move |line: &str| {
        tracing::debug!(server = %server, stderr = %telemetry.mask_text(line), "server stderr");
    });
    let (link, tools) = Link::start(name, spec, cx, stderr, Arc::new(|| {}))?;
    link.stop(Duration::from_secs(2));
    Ok(tools)
}
