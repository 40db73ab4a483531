//! `awf run`: the workflow state machine. Validation first (any problem stops the run
//! before anything executes), then from `initial`: `agent` states through their provider
//! (with the per-step tool proxy when `mcp_proxy.enable`), `step` states as shell commands,
//! each in its own process group with its timeout, until a `terminal` state. Ctrl-C and a
//! timeout take the same teardown path as a normal end. Progress goes to stderr; the
//! summary (human or JSON) to stdout.

use crate::error::{AwfError, codes};
use crate::process::{self, ProcessGroup};
use crate::providers::{self, AgentOutput, AgentRequest};
use crate::proxy::{ProxyReport, ToolProxyService};
use crate::tools::Cancellation;
use crate::workflow::check::InstalledPlugins;
use crate::workflow::template::{self, Ref};
use crate::workflow::{self, InputType, Prompt, StateKind, TerminalStatus, Workflow};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How many states one run may execute (loops through on_failure are allowed, forever is not).
const MAX_STEPS: usize = 1000;
/// Bytes kept of a process's stdout/stderr.
const OUTPUT_CAP: usize = 16 << 20;

pub struct RunOptions {
    pub inputs: Vec<String>,
    pub json: bool,
    /// Where per-step audit files go; default `$XDG_STATE_HOME/awf/audit/<run id>`.
    pub audit_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StateResult {
    pub state: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// success, failure, timeout, interrupted.
    pub status: String,
    pub output: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_calls: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorJson>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorJson {
    pub code: &'static str,
    pub message: String,
}

impl From<&AwfError> for ErrorJson {
    fn from(e: &AwfError) -> Self {
        ErrorJson {
            code: e.code(),
            message: e.message().to_string(),
        }
    }
}

/// Parses `k=v` inputs against the declared ones, applying defaults.
pub fn resolve_inputs(
    wf: &Workflow,
    given: &[String],
) -> Result<HashMap<String, String>, AwfError> {
    let mut out = HashMap::new();
    for kv in given {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {kv:?} is not KEY=VALUE"),
            ));
        };
        let Some(def) = wf.inputs.iter().find(|i| i.name == k) else {
            return Err(AwfError::new(
                codes::INPUT_UNKNOWN,
                format!(
                    "--input {k}: the workflow {} declares no input {k:?} (declared: {})",
                    wf.path.display(),
                    names_or_none(wf.inputs.iter().map(|i| i.name.as_str()))
                ),
            ));
        };
        let ok = match def.kind {
            InputType::String => true,
            InputType::Integer => v.parse::<i64>().is_ok(),
            InputType::Boolean => matches!(v, "true" | "false"),
        };
        if !ok {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {k}={v}: the input {k} is declared {:?}", def.kind),
            ));
        }
        out.insert(k.to_string(), v.to_string());
    }
    for def in &wf.inputs {
        if out.contains_key(&def.name) {
            continue;
        }
        match (&def.default, def.required) {
            (Some(d), _) => {
                out.insert(def.name.clone(), d.clone());
            }
            (None, true) => {
                return Err(AwfError::new(
                    codes::INPUT_MISSING,
                    format!(
                        "the input {} is required; pass --input {}=VALUE",
                        def.name, def.name
                    ),
                ));
            }
            (None, false) => {
                out.insert(def.name.clone(), String::new());
            }
        }
    }
    Ok(out)
}

fn names_or_none<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Prints validation problems (human) to stderr.
pub fn print_diagnostics(file: &Path, diags: &[workflow::Diagnostic]) {
    for d in diags {
        let at = match d.line {
            Some(l) => format!("{}:{l}", file.display()),
            None => file.display().to_string(),
        };
        let path = if d.path.is_empty() {
            String::new()
        } else {
            format!(" at {}", d.path)
        };
        eprintln!(
            "{at}: {} [{}]{path}\n    hint: {}",
            d.message, d.code, d.hint
        );
    }
}

struct Runner<'a> {
    wf: &'a Workflow,
    inputs: HashMap<String, String>,
    results: Vec<StateResult>,
    interrupt: Arc<AtomicBool>,
    proxy: ToolProxyService,
    plugins: InstalledPlugins,
    workdir: PathBuf,
    started: Instant,
}

/// Runs a workflow file; the value is the exit code.
pub fn run(file: &Path, opts: &RunOptions) -> Result<u8, AwfError> {
    let workdir = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let (wf, diags) = workflow::load(file, &workdir);
    if !diags.is_empty() {
        print_diagnostics(file, &diags);
        eprintln!(
            "awf: {} has {} problem(s); nothing was run (check with `awf validate {}`)",
            file.display(),
            diags.len(),
            file.display()
        );
        if opts.json {
            let out = json!({
                "workflow": wf.as_ref().map(|w| &w.name),
                "status": "invalid",
                "exit_code": workflow::exit_code(&diags),
                "problems": diags,
                "states": [],
            });
            println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        }
        return Ok(workflow::exit_code(&diags));
    }
    let wf = wf.expect("a workflow without problems was built");
    let inputs = resolve_inputs(&wf, &opts.inputs)?;
    let interrupt = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupt.clone()).map_err(|e| {
            AwfError::new(codes::IO, format!("cannot install the signal handler: {e}"))
        })?;
    }
    process::become_subreaper();
    let run_id = crate::telemetry::new_session_id();
    // Outside the workspace, which the steps' Bash may write, and the temp dir, where each
    // step's private one is made and anyone may write (checked below).
    let state = crate::proxy::state_dir();
    let run_dir = state.join("runs").join(&run_id);
    let audit_dir = opts
        .audit_dir
        .clone()
        .unwrap_or_else(|| state.join("audit").join(&run_id));
    let exe = std::env::current_exe()
        .map_err(|e| AwfError::new(codes::SPAWN, format!("cannot find the awf executable: {e}")))?;
    let mut runner = Runner {
        wf: &wf,
        inputs,
        results: Vec::new(),
        interrupt,
        proxy: ToolProxyService {
            exe,
            run_id: run_id.clone(),
            run_dir: run_dir.clone(),
            audit_dir: audit_dir.clone(),
            root: workdir.clone(),
            tracer: crate::proxy::span::StepTracer::from_env(),
        },
        plugins: InstalledPlugins::new(&workdir),
        workdir,
        started: Instant::now(),
    };
    runner.proxy.check_locations()?;
    crate::proxy::private_dir(&run_dir)?;
    eprintln!("awf: run {run_id} of {} ({})", wf.name, file.display());
    let outcome = runner.drive();
    process::kill_orphans();
    runner.proxy.shutdown();
    let _ = std::fs::remove_dir_all(&run_dir);
    let (code, error) = match &outcome {
        Ok(()) => (0, None),
        Err(e) => (e.exit_code(), Some(e.clone())),
    };
    let summary = json!({
        "workflow": wf.name,
        "run_id": run_id,
        "status": if code == 0 { "success" } else { "failure" },
        "exit_code": code,
        "duration_ms": runner.started.elapsed().as_millis() as u64,
        "error": error.as_ref().map(ErrorJson::from),
        "audit_dir": audit_dir,
        "states": runner.results,
    });
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("JSON"));
    } else {
        print_human(&summary);
    }
    if let Some(e) = &error {
        eprintln!("awf: {e}");
    }
    Ok(code)
}

fn print_human(s: &Value) {
    println!(
        "workflow {} — {} in {:.1}s",
        s["workflow"].as_str().unwrap_or(""),
        s["status"].as_str().unwrap_or(""),
        s["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
    );
    for st in s["states"].as_array().into_iter().flatten() {
        let calls = st["tool_calls"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}×{v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|s| !s.is_empty())
            .map(|s| format!("  tools: {s}"))
            .unwrap_or_default();
        println!(
            "  {:<20} {:<8} {:<11} {:>7.1}s{calls}",
            st["state"].as_str().unwrap_or(""),
            st["type"].as_str().unwrap_or(""),
            st["status"].as_str().unwrap_or(""),
            st["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
        );
        let out = st["output"].as_str().unwrap_or("").trim();
        if !out.is_empty() {
            for line in out.lines().take(20) {
                println!("      {line}");
            }
            if out.lines().count() > 20 {
                println!("      …");
            }
        }
        if let Some(e) = st["error"]["message"].as_str() {
            println!(
                "      error: {e} ({})",
                st["error"]["code"].as_str().unwrap_or("")
            );
        }
    }
}

impl Runner<'_> {
    fn render(&self, text: &str) -> String {
        template::render(text, &|r| match r {
            Ref::Input(n) => self.inputs.get(n).cloned().unwrap_or_default(),
            Ref::State(s, f) => self
                .results
                .iter()
                .rev()
                .find(|r| &r.state == s)
                .map(|r| match f.as_str() {
                    "Output" => r.output.clone(),
                    "ExitCode" => r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    _ => r.status.clone(),
                })
                .unwrap_or_default(),
        })
    }

    fn drive(&mut self) -> Result<(), AwfError> {
        let mut current = self.wf.initial.clone();
        for seq in 1..=MAX_STEPS {
            if self.interrupt.load(Ordering::SeqCst) {
                return Err(AwfError::new(
                    codes::INTERRUPTED,
                    format!("interrupted before state {current:?} started"),
                ));
            }
            let state = self.wf.state(&current).expect("validated").clone();
            let t0 = Instant::now();
            eprintln!(
                "awf: [{:>6.1}s] → {} ({})",
                self.started.elapsed().as_secs_f64(),
                state.name,
                state.kind.type_name()
            );
            let (result, next) = match &state.kind {
                StateKind::Terminal(t) => {
                    let message = t
                        .message
                        .as_deref()
                        .map(|m| self.render(m))
                        .unwrap_or_default();
                    let ok = t.status == TerminalStatus::Success;
                    self.results.push(StateResult {
                        state: state.name.clone(),
                        kind: "terminal",
                        status: if ok { "success" } else { "failure" }.into(),
                        output: message.clone(),
                        exit_code: None,
                        duration_ms: 0,
                        provider: None,
                        tool_calls: BTreeMap::new(),
                        proxy: None,
                        usage: None,
                        cost_usd: None,
                        error: None,
                    });
                    return if ok {
                        Ok(())
                    } else {
                        Err(AwfError::new(
                            codes::TERMINAL_FAILURE,
                            format!(
                                "the workflow ended in the failure state {:?}{}",
                                state.name,
                                if message.is_empty() {
                                    String::new()
                                } else {
                                    format!(": {message}")
                                }
                            ),
                        ))
                    };
                }
                StateKind::Step(s) => {
                    let r = self.run_step(&state.name, s, t0);
                    let next = if r.status == "success" {
                        &s.on_success
                    } else {
                        &s.on_failure
                    };
                    (r, next.clone())
                }
                StateKind::Agent(a) => {
                    let r = self.run_agent(&state.name, seq, a, t0);
                    let next = if r.status == "success" {
                        &a.on_success
                    } else {
                        &a.on_failure
                    };
                    (r, next.clone())
                }
            };
            eprintln!(
                "awf: [{:>6.1}s] ← {} {} in {:.1}s",
                self.started.elapsed().as_secs_f64(),
                result.state,
                result.status,
                result.duration_ms as f64 / 1000.0
            );
            let status = result.status.clone();
            let error = result.error.clone();
            let name = result.state.clone();
            self.results.push(result);
            // The step's tool set could not be served (a plugin gone since validation, say):
            // like a validation error, this stops the run rather than following on_failure.
            if let Some(e) = error
                .as_ref()
                .filter(|e| e.code.starts_with("USER.MCP_PROXY."))
            {
                return Err(AwfError::new(e.code, e.message.clone()));
            }
            if status == "interrupted" {
                return Err(AwfError::new(
                    codes::INTERRUPTED,
                    format!("interrupted during state {name:?}; its processes were stopped"),
                ));
            }
            match next {
                Some(n) => current = n,
                None => {
                    let (code, msg) = error
                        .map(|e| (e.code, e.message))
                        .unwrap_or((codes::STATE_FAILED, format!("state {name:?} failed")));
                    return Err(AwfError::new(
                        code,
                        format!("{msg} (state {name:?} has no on_failure)"),
                    ));
                }
            }
        }
        Err(AwfError::new(
            codes::TOO_MANY_STEPS,
            format!(
                "the run executed {MAX_STEPS} states without reaching a terminal state; check the on_failure loops"
            ),
        ))
    }

    fn base(&self, name: &str, kind: &'static str, t0: Instant) -> StateResult {
        StateResult {
            state: name.to_string(),
            kind,
            status: "success".into(),
            output: String::new(),
            exit_code: None,
            duration_ms: t0.elapsed().as_millis() as u64,
            provider: None,
            tool_calls: BTreeMap::new(),
            proxy: None,
            usage: None,
            cost_usd: None,
            error: None,
        }
    }

    fn run_step(&mut self, name: &str, s: &workflow::StepState, t0: Instant) -> StateResult {
        let command = self.render(&s.command);
        let dir = match &s.dir {
            Some(d) => self.workdir.join(self.render(d)),
            None => self.workdir.clone(),
        };
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(&command).current_dir(&dir);
        let mut r = self.base(name, "step", t0);
        // Checked here: a missing cwd would otherwise read as "cannot start /bin/sh".
        let waited = if dir.is_dir() {
            self.spawn_and_wait(cmd, s.timeout, name)
        } else {
            Err(AwfError::new(
                codes::STATE_FAILED,
                format!(
                    "the dir {} of step {name:?} is not an existing directory (dir is relative to \
                     the directory awf run was started in)",
                    dir.display()
                ),
            ))
        };
        match waited {
            Err(e) => {
                r.status = "failure".into();
                r.error = Some((&e).into());
            }
            Ok(p) => {
                r.output = p.stdout.trim_end_matches('\n').to_string();
                r.exit_code = p.code;
                r.status = p.status.clone();
                if p.status == "success" && p.code != Some(0) {
                    r.status = "failure".into();
                }
                if r.status != "success" {
                    let why = match p.status.as_str() {
                        "timeout" => (
                            codes::RUN_TIMEOUT,
                            format!(
                                "step {name:?} timed out after {:?}",
                                s.timeout.unwrap_or_default()
                            ),
                        ),
                        "interrupted" => {
                            (codes::INTERRUPTED, format!("step {name:?} was interrupted"))
                        }
                        _ => (
                            codes::STATE_FAILED,
                            format!(
                                "step {name:?} exited with {}: {}",
                                p.code
                                    .map_or("a signal".to_string(), |c| format!("code {c}")),
                                last_lines(&p.stderr, 5)
                            ),
                        ),
                    };
                    r.error = Some(ErrorJson {
                        code: why.0,
                        message: why.1,
                    });
                }
            }
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    fn run_agent(
        &mut self,
        name: &str,
        seq: usize,
        a: &workflow::AgentState,
        t0: Instant,
    ) -> StateResult {
        let mut r = self.base(name, "agent", t0);
        r.provider = Some(a.provider.clone());
        let outcome = self.agent_inner(name, seq, a, &mut r);
        if let Err(e) = outcome {
            if r.status == "success" {
                r.status = "failure".into();
            }
            r.error = Some((&e).into());
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    fn agent_inner(
        &mut self,
        name: &str,
        seq: usize,
        a: &workflow::AgentState,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let prompt_text = match &a.prompt {
            Prompt::Inline(p) => p.clone(),
            Prompt::File(f) => std::fs::read_to_string(f).map_err(|e| {
                AwfError::new(
                    codes::IO,
                    format!("cannot read the prompt file {}: {e}", f.display()),
                )
            })?,
        };
        let prompt = self.render(&prompt_text);
        let session = match &a.mcp_proxy {
            Some(p) if p.enable => Some(self.proxy.start(name, seq, p, &mut self.plugins)?),
            _ => None,
        };
        let deadline = a.timeout.map(|t| Instant::now() + t);
        if a.provider == providers::OPENAI_COMPATIBLE {
            return self.openai_agent(name, a, &prompt, session, deadline, r);
        }
        let Some(provider) = providers::cli_provider(&a.provider) else {
            if let Some(s) = session {
                r.proxy = Some(self.proxy.close(s, None, "error"));
            }
            return Err(AwfError::new(
                codes::PROVIDER_UNAVAILABLE,
                format!(
                    "the provider {:?} is not available in this build of awf",
                    a.provider
                ),
            ));
        };
        let req = AgentRequest {
            state: name,
            prompt: &prompt,
            options: &a.options,
            workdir: &self.workdir,
            proxy: session.as_ref().map(|s| &s.injection),
        };
        let command = match provider.command(&req) {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = session {
                    r.proxy = Some(self.proxy.close(s, None, "error"));
                }
                return Err(e);
            }
        };
        for w in &command.warnings {
            tracing::warn!(state = name, provider = %a.provider, "{w}");
        }
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args).current_dir(&self.workdir);
        for k in &command.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &command.env {
            cmd.env(k, v);
        }
        let audit = session.as_ref().map(|s| s.audit_path.clone());
        let waited = self.spawn_and_supervise(cmd, deadline, audit.as_deref(), name);
        let (mut p, mut leader) = match waited {
            Ok(v) => v,
            Err(e) => {
                if let Some(s) = session {
                    r.proxy = Some(self.proxy.close(s, None, "error"));
                }
                return Err(AwfError::new(
                    codes::SPAWN,
                    format!(
                        "{}; install {} or set options.command or AWF_{}_BIN (state {name:?})",
                        e.message(),
                        a.provider,
                        a.provider.to_ascii_uppercase()
                    ),
                ));
            }
        };
        match session {
            // Teardown of a proxied step also finds `awf mcp-serve` processes by config path.
            Some(s) => {
                let report = self.proxy.close(s, Some(&mut leader), &p.status);
                p.collect();
                r.tool_calls = report.tool_calls.clone();
                let crashed = !report.crashed_sessions.is_empty();
                r.proxy = Some(report);
                if crashed && p.status == "success" {
                    r.status = "failure".into();
                    r.output = p.stdout.clone();
                    return Err(AwfError::new(
                        codes::PROXY_CRASHED,
                        format!(
                            "awf mcp-serve crashed during state {name:?} (a session.start without session.end in its audit file)"
                        ),
                    ));
                }
            }
            None => {
                leader.terminate(process::GRACE);
                process::kill_orphans();
                p.collect();
            }
        }
        r.status = p.status.clone();
        match p.status.as_str() {
            "timeout" => {
                return Err(AwfError::new(
                    codes::RUN_TIMEOUT,
                    format!(
                        "agent state {name:?} timed out after {:?}",
                        a.timeout.unwrap_or_default()
                    ),
                ));
            }
            "interrupted" => {
                return Err(AwfError::new(
                    codes::INTERRUPTED,
                    format!("agent state {name:?} was interrupted"),
                ));
            }
            _ => {}
        }
        let status = p.exit_status.expect("exited");
        let out: AgentOutput = provider
            .parse_output(&p.stdout, &p.stderr, status)
            .inspect_err(|_| {
                r.status = "failure".into();
            })?;
        r.output = out.text;
        r.usage = out.usage;
        r.cost_usd = out.cost_usd;
        r.exit_code = status.code();
        if !status.success() {
            r.status = "failure".into();
            return Err(AwfError::new(
                codes::AGENT_FAILED,
                format!(
                    "{} exited with {status}: {}",
                    a.provider,
                    last_lines(&p.stderr, 5)
                ),
            ));
        }
        r.status = "success".into();
        Ok(())
    }

    fn openai_agent(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
        prompt: &str,
        session: Option<crate::proxy::ProxySession>,
        deadline: Option<Instant>,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let opts = match providers::openai::OpenAiOptions::from_map(name, &a.options) {
            Ok(o) => o,
            Err(e) => {
                if let Some(s) = session {
                    r.proxy = Some(self.proxy.close(s, None, "error"));
                }
                return Err(e);
            }
        };
        let prepared = match &session {
            Some(s) => match self.proxy.inproc(s) {
                Ok(p) => Some(p),
                Err(e) => {
                    if let Some(s) = session {
                        r.proxy = Some(self.proxy.close(s, None, "error"));
                    }
                    return Err(e);
                }
            },
            None => None,
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = cancelled.clone();
        let cancel = Cancellation::new(move || flag.load(Ordering::SeqCst));
        let router = prepared.as_ref().map(|p| p.router.clone());
        let prompt = prompt.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let worker_cancel = cancel.clone();
        let worker = std::thread::spawn(move || {
            let out =
                providers::openai::run(&prompt, &opts, router.as_deref(), deadline, &worker_cancel);
            let _ = tx.send(out);
        });
        let audit = session.as_ref().map(|s| s.audit_path.clone());
        let mut progress = Progress::new(name, audit.as_deref());
        let result = loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(out) => break Some(out),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break None,
                Err(_) => {}
            }
            progress.tick();
            if self.interrupt.load(Ordering::SeqCst) {
                r.status = "interrupted".into();
                break None;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                r.status = "timeout".into();
                break None;
            }
        };
        progress.tick();
        if result.is_none() {
            // Tools see the cancellation; give the conversation the grace period to stop.
            cancelled.store(true, Ordering::SeqCst);
            let end = Instant::now() + process::GRACE;
            while !worker.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(25));
            }
        } else {
            let _ = worker.join();
        }
        if let Some(p) = &prepared {
            // Bash commands still running stop now (the in-process server goes down).
            p.shutdown.begin();
            p.telemetry.session_end(
                if result.is_some() {
                    "end_of_step"
                } else {
                    "cancelled"
                },
                None,
            );
        }
        drop(prepared);
        if let Some(s) = session {
            let outcome = match &result {
                Some(Ok(_)) => "success",
                Some(Err(_)) => "failure",
                None => r.status.as_str(),
            };
            let report = self.proxy.close(s, None, outcome);
            r.tool_calls = report.tool_calls.clone();
            r.proxy = Some(report);
        }
        match result {
            Some(Ok(out)) => {
                r.output = out.text;
                r.usage = out.usage;
                r.status = "success".into();
                Ok(())
            }
            Some(Err(e)) => {
                r.status = "failure".into();
                Err(e)
            }
            None if r.status == "timeout" => Err(AwfError::new(
                codes::RUN_TIMEOUT,
                format!(
                    "agent state {name:?} timed out after {:?}",
                    a.timeout.unwrap_or_default()
                ),
            )),
            None if r.status == "interrupted" => Err(AwfError::new(
                codes::INTERRUPTED,
                format!("agent state {name:?} was interrupted"),
            )),
            None => {
                r.status = "failure".into();
                Err(AwfError::new(
                    codes::AGENT_FAILED,
                    "the openai_compatible conversation thread panicked (a bug in awf)",
                ))
            }
        }
    }

    fn spawn_and_wait(
        &mut self,
        cmd: Command,
        timeout: Option<Duration>,
        name: &str,
    ) -> Result<Waited, AwfError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let (mut w, mut child) = self.spawn_and_supervise(cmd, deadline, None, name)?;
        // Whatever the end, nothing the step started outlives it.
        child.terminate(process::GRACE);
        // What left the group and was re-parented to this subreaper goes too, before
        // the output is collected (it may hold the pipes).
        process::kill_orphans();
        w.collect();
        Ok(w)
    }

    /// Spawns `cmd` in its own process group (stdin /dev/null, output collected) and waits
    /// for its exit, the deadline or an interrupt. Teardown is the caller's.
    fn spawn_and_supervise(
        &mut self,
        mut cmd: Command,
        deadline: Option<Instant>,
        audit: Option<&Path>,
        name: &str,
    ) -> Result<(Waited, ProcessGroup), AwfError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ProcessGroup::spawn(&mut cmd).map_err(|e| {
            AwfError::new(
                codes::SPAWN,
                format!("cannot start {:?}: {e}", cmd.get_program()),
            )
        })?;
        let out = reader(child.take_stdout());
        let err = reader(child.take_stderr());
        let mut progress = Progress::new(name, audit);
        let interrupt = self.interrupt.clone();
        let ended = child
            .supervise(deadline, Duration::from_millis(250), &mut || {
                progress.tick();
                interrupt.load(Ordering::SeqCst)
            })
            .unwrap_or(process::Ended::Interrupted);
        // The last calls before the end are shown too.
        progress.tick();
        let (status, exit_status) = match ended {
            process::Ended::Exited(s) => ("success", Some(s)),
            process::Ended::TimedOut => ("timeout", None),
            process::Ended::Interrupted => ("interrupted", None),
        };
        Ok((
            Waited {
                status: status.to_string(),
                code: exit_status.and_then(|s| s.code()),
                exit_status,
                stdout: String::new(),
                stderr: String::new(),
                readers: Some((out, err)),
            },
            child,
        ))
    }
}

struct Waited {
    status: String,
    code: Option<i32>,
    exit_status: Option<std::process::ExitStatus>,
    stdout: String,
    stderr: String,
    readers: Option<(
        std::thread::JoinHandle<String>,
        std::thread::JoinHandle<String>,
    )>,
}

impl Waited {
    /// Joins the output readers; call after teardown (a surviving grandchild would keep
    /// the pipes open).
    fn collect(&mut self) {
        if let Some((o, e)) = self.readers.take() {
            self.stdout = o.join().unwrap_or_default();
            self.stderr = e.join().unwrap_or_default();
        }
    }
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let Some(mut r) = r else {
            return String::new();
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if buf.len() < OUTPUT_CAP {
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(n);
    let s = lines[start..].join(" | ");
    if s.is_empty() { "no stderr".into() } else { s }
}

/// Live progress of a step on stderr: elapsed time and, for proxied steps, the tool calls
/// so far by tool (read from the step's audit file). Printed when the counts change, and
/// every 10 s as a heartbeat.
struct Progress<'a> {
    name: &'a str,
    audit: Option<&'a Path>,
    t0: Instant,
    last: BTreeMap<String, u64>,
    last_print: Instant,
}

impl<'a> Progress<'a> {
    fn new(name: &'a str, audit: Option<&'a Path>) -> Self {
        Progress {
            name,
            audit,
            t0: Instant::now(),
            last: BTreeMap::new(),
            last_print: Instant::now(),
        }
    }

    fn tick(&mut self) {
        if self.name.is_empty() && self.audit.is_none() {
            return;
        }
        let counts = self
            .audit
            .map(crate::proxy::live_counts)
            .unwrap_or_default();
        let changed = counts != self.last;
        if changed || self.last_print.elapsed() >= Duration::from_secs(10) {
            let calls = if self.audit.is_none() {
                "running".to_string()
            } else if counts.is_empty() {
                "no tool calls yet".to_string()
            } else {
                counts
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(" · ")
            };
            eprintln!(
                "awf:   {} {:.0}s: {calls}",
                self.name,
                self.t0.elapsed().as_secs_f64()
            );
            self.last = counts;
            self.last_print = Instant::now();
        }
    }
}
