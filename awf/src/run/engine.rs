//! The state machine of `awf run`: from `initial`, each state runs (a shell step, an agent
//! or a terminal), its result is recorded, and `on_success`/`on_failure` picks the next,
//! until a terminal state, an interrupt or [`MAX_STEPS`].

use super::report::{StateResult, Status};
use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::tool_proxy::ToolProxyService;
use crate::workflow::template::{self, Ref, ShellCommand};
use crate::workflow::{HookAction, State, StateKind, TerminalStatus, Workflow};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// How many states one run may execute (loops through on_failure are allowed, forever is not).
const MAX_STEPS: usize = 1000;

pub(super) struct Runner<'a> {
    pub(super) wf: &'a Workflow,
    pub(super) inputs: HashMap<String, String>,
    pub(super) results: Vec<StateResult>,
    pub(super) interrupt: Arc<AtomicBool>,
    pub(super) proxy: ToolProxyService,
    pub(super) plugins: InstalledPlugins,
    pub(super) workdir: PathBuf,
    pub(super) started: Instant,
    pub(super) trace: Arc<super::trace::RunTrace>,
    /// The running state's span context, for its tool proxy and its model turns.
    pub(super) step_traceparent: String,
    /// The run's model relay, started with the first step that uses it.
    pub(super) relay: Arc<std::sync::Mutex<Option<crate::relay::Relay>>>,
    /// The last step id's number (states and branches alike: `<n>-<state>`).
    pub(super) ids: Arc<std::sync::atomic::AtomicUsize>,
    /// In an iteration of a for_each: `{{.loop.*}}`.
    pub(super) loop_vars: Option<LoopVars>,
    /// The run state, written before and after each top-level state (the top-level
    /// runner's only: branches and iterations are part of their state).
    pub(super) record: Option<Arc<super::state::Recorder>>,
    /// `--shard INDEX/COUNT`: the for_each items this run runs.
    pub(super) shard: Option<super::state::Shard>,
    /// The span the states of this runner go under: none for the run's own, the calling
    /// state's for a `call_workflow` child.
    pub(super) parent_span: Option<String>,
    /// How deep this runner's workflow is called (0: the run's own), and the workflow
    /// files above it, for `call_workflow`'s depth limit and cycles.
    pub(super) calls: Vec<std::path::PathBuf>,
    /// The state that ran last (`workflow.CurrentState`).
    pub(super) last_state: Option<String>,
    /// When the run started (`workflow.StartedAt`), RFC 3339.
    pub(super) started_at: String,
    /// `{{.error.*}}` while the `workflow_error` hooks run.
    pub(super) error_vars: Option<serde_json::Value>,
    /// The CLI session the next agent state runs under, and whether it continues it
    /// (`resume: continue` after the run stopped in that state).
    pub(super) session_plan: Option<(String, bool)>,
}

/// What `{{.loop.Item}}`, `.Index`, `.Index1`, `.First`, `.Last` and `.Length` give in an
/// iteration of a for_each or a while (whose `Length` is -1 and `Item` empty, as AWF's).
#[derive(Debug, Clone)]
pub(super) struct LoopVars {
    pub item: String,
    pub index: usize,
    pub index1: usize,
    pub length: i64,
}

impl LoopVars {
    pub(super) fn get(&self, field: &str) -> String {
        match field {
            "Item" => self.item.clone(),
            "Index" => self.index.to_string(),
            "Index1" => self.index1.to_string(),
            "First" => (self.index == 0).to_string(),
            "Last" => (self.index1 as i64 == self.length).to_string(),
            _ => self.length.to_string(),
        }
    }
}

impl Runner<'_> {
    /// A runner of `wf` that shares this run's proxy, relay, step ids, trace and start,
    /// with its own inputs, results so far, stop flag, parent span and call stack, and
    /// nothing recorded: a branch or iteration (`parallel.rs`) or a called workflow
    /// (`call.rs`).
    pub(super) fn derived<'w>(
        &self,
        wf: &'w Workflow,
        inputs: HashMap<String, String>,
        results: Vec<StateResult>,
        stop: Arc<AtomicBool>,
        parent_span: Option<String>,
        calls: Vec<PathBuf>,
    ) -> Runner<'w> {
        Runner {
            wf,
            inputs,
            results,
            interrupt: stop,
            proxy: self.proxy.clone(),
            plugins: InstalledPlugins::new(&self.workdir),
            workdir: self.workdir.clone(),
            started: self.started,
            trace: self.trace.clone(),
            step_traceparent: String::new(),
            relay: self.relay.clone(),
            ids: self.ids.clone(),
            loop_vars: None,
            record: None,
            shard: None,
            parent_span,
            calls,
            last_state: None,
            started_at: self.started_at.clone(),
            error_vars: None,
            session_plan: None,
        }
    }

    /// Renders a template (a prompt, a `dir`, a message) with the run's inputs and the
    /// latest result of each state, values verbatim.
    pub(super) fn render(&self, text: &str) -> String {
        template::render(text, &|r| self.value(r))
    }

    /// Renders a `step` command: values travel in environment variables, never in the text.
    pub(super) fn render_command(&self, text: &str) -> Result<ShellCommand, String> {
        template::render_command(text, &|r| self.value(r))
    }

    fn value(&self, r: &Ref) -> String {
        match r {
            Ref::Input(n) => self.inputs.get(n).cloned().unwrap_or_default(),
            Ref::Env(n) => std::env::var(n).unwrap_or_default(),
            Ref::Workflow(f) if f == "StartedAt" => self.started_at.clone(),
            Ref::Workflow(f) => json_text(&self.workflow_fields()[f.as_str()]),
            Ref::Context(f) => json_text(&context_fields(&self.workdir)[f.as_str()]),
            Ref::Error(f) => self
                .error_vars
                .as_ref()
                .map(|e| json_text(&e[f.as_str()]))
                .unwrap_or_default(),
            Ref::Loop(f) => self
                .loop_vars
                .as_ref()
                .map(|v| v.get(f))
                .unwrap_or_default(),
            Ref::State(s, f) => self
                .results
                .iter()
                .rev()
                .find(|r| &r.state == s)
                .map(|r| match f.as_str() {
                    "Output" => r.output.clone(),
                    "Stderr" => r.stderr.clone(),
                    "ExitCode" => r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    "Status" => r.status.to_string(),
                    // `Response.title`: into the parsed output, key by key (an index into
                    // a list).
                    other => {
                        let fields = state_fields(r);
                        let mut at = &fields;
                        for part in other.split('.') {
                            at = match (at, part.parse::<usize>()) {
                                (serde_json::Value::Array(items), Ok(i)) => {
                                    items.get(i).unwrap_or(&serde_json::Value::Null)
                                }
                                _ => &at[part],
                            };
                        }
                        json_text(at)
                    }
                })
                .unwrap_or_default(),
        }
    }

    /// `text` with the values of the secret inputs (named SECRET_*, API_KEY*, PASSWORD*,
    /// TOKEN*, as AWF's) replaced by `***`.
    pub(super) fn mask_secrets(&self, mut text: String) -> String {
        for secret in super::inputs::secret_input_values(&self.inputs) {
            if text.contains(&secret) {
                text = text.replace(&secret, "***");
            }
        }
        text
    }

    /// A fresh step id number.
    pub(super) fn next_id(&self) -> usize {
        self.ids.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Runs the state machine from `start` (`initial`, or where a resumed run stopped).
    pub(super) fn drive(&mut self, start: &str) -> Result<(), AwfError> {
        let mut current = start.to_string();
        for _ in 1..=MAX_STEPS {
            let seq = self.next_id();
            if self.interrupt.load(Ordering::SeqCst) {
                return Err(AwfError::new(
                    codes::INTERRUPTED,
                    format!("interrupted before state {current:?} started"),
                ));
            }
            let state = self.wf.state(&current).expect("validated").clone();
            let t0 = Instant::now();
            let step_trace = self.start_step(&state, seq);
            if let StateKind::Terminal(t) = &state.kind {
                return self.end_at_terminal(&state, t, step_trace);
            }
            let traceparent = step_trace.traceparent.clone();
            let (units, result, default_next) = self.run_with_hooks(&state, seq, t0, &traceparent);
            if let Some(record) = &self.record
                && matches!(
                    state.kind,
                    StateKind::ForEach(_) | StateKind::Parallel(_) | StateKind::While(_)
                )
            {
                record.units_ended(&state.name, &units);
            }
            if !matches!(state.kind, StateKind::While(_)) {
                self.results.extend(units);
            }
            eprintln!(
                "awf: [{:>6.1}s] ← {} {} in {:.1}s",
                self.started.elapsed().as_secs_f64(),
                result.state,
                result.status,
                result.duration_ms as f64 / 1000.0
            );
            let status = result.status;
            let error = result.error.clone();
            let name = result.state.clone();
            step_trace.end(&result);
            self.results.push(result);
            // A fatal error (the step's tool set could not be served, a call_workflow
            // cycle or depth) stops the run rather than following on_failure.
            if let Some(e) = error.as_ref().filter(|e| is_fatal(e.code)) {
                if let Some(record) = &self.record {
                    record.ended(self.results.last().expect("pushed"), None);
                }
                return Err(AwfError::new(e.code, e.message.clone()));
            }
            let next = match self.next_state(&state, default_next) {
                Ok(n) => n,
                Err(e) => {
                    if let Some(record) = &self.record {
                        record.ended(self.results.last().expect("pushed"), None);
                    }
                    return Err(e);
                }
            };
            if let Some(record) = &self.record {
                record.ended(self.results.last().expect("pushed"), next.as_deref());
            }
            if status == Status::Interrupted {
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
}

impl Runner<'_> {
    /// A state's start: its span (under the calling state's in a called workflow), the
    /// session an agent with `resume: continue` runs under, its record and its line.
    fn start_step(&mut self, state: &State, seq: usize) -> super::trace::StepTrace {
        let step_id = format!("{seq}-{}", state.name);
        let step_trace = match self.parent_span.as_deref() {
            // A called workflow's states go under the calling state's span.
            Some(p) => {
                self.trace
                    .step_under(Some(p), &state.name, state.kind.type_name(), &step_id)
            }
            None => self
                .trace
                .step(&state.name, state.kind.type_name(), &step_id),
        };
        self.step_traceparent = step_trace.traceparent.clone();
        // An agent with `resume: continue` runs under a session awf names before it
        // starts (recorded, so that a resume after a crash continues it).
        self.session_plan = match &state.kind {
            StateKind::Agent(a) if a.resume_continue => Some(
                match self
                    .record
                    .as_ref()
                    .and_then(|r| r.interrupted_session(&state.name))
                {
                    Some(id) => (id, true),
                    None => (super::state::new_session_uuid(), false),
                },
            ),
            _ => None,
        };
        if let Some(record) = &self.record {
            let session = self.session_plan.as_ref().map(|(id, _)| id.as_str());
            record.started_with(&state.name, state.kind.type_name(), seq, session);
        }
        eprintln!(
            "awf: [{:>6.1}s] → {} ({})",
            self.started.elapsed().as_secs_f64(),
            state.name,
            state.kind.type_name()
        );
        step_trace
    }

    /// The run's end at a terminal state: its message, its result recorded, and an error
    /// when it is a failure state.
    fn end_at_terminal(
        &mut self,
        state: &State,
        t: &crate::workflow::TerminalState,
        step_trace: super::trace::StepTrace,
    ) -> Result<(), AwfError> {
        let message = t
            .message
            .as_deref()
            .map(|m| self.mask_secrets(self.render(m)))
            .unwrap_or_default();
        let ok = t.status == TerminalStatus::Success;
        let result = StateResult {
            status: if ok { Status::Success } else { Status::Failure },
            output: message.clone(),
            ..StateResult::new(&state.name, "terminal")
        };
        step_trace.end(&result);
        if let Some(record) = &self.record {
            record.ended(&result, None);
        }
        self.results.push(result);
        if ok {
            return Ok(());
        }
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
    }
}

/// Errors that stop the run whatever the state's transitions say.
fn is_fatal(code: &str) -> bool {
    code.starts_with("USER.MCP_PROXY.") || code == codes::CALL_DEPTH || code == codes::CALL_CYCLE
}

impl Runner<'_> {
    /// Runs a non-terminal state with its `pre` and `post` hooks: the results of the units
    /// it ran (branches, iterations, loop bodies), its own result, and where it goes next
    /// by its own rule (`on_success`, `on_failure`, `on_complete`, a loop's early exit).
    pub(super) fn run_with_hooks(
        &mut self,
        state: &State,
        seq: usize,
        t0: Instant,
        traceparent: &str,
    ) -> (Vec<StateResult>, StateResult, Option<String>) {
        self.run_hook(&state.name, "pre", &state.hooks.pre);
        let (units, r, next) = self.run_kind(state, seq, t0, traceparent);
        self.last_state = Some(state.name.clone());
        if !state.hooks.post.is_empty() {
            // The post hook sees the state's result, as AWF's does.
            self.results.push(r);
            self.run_hook(&state.name, "post", &state.hooks.post);
            let r = self.results.pop().expect("pushed above");
            return (units, r, next);
        }
        (units, r, next)
    }

    fn run_kind(
        &mut self,
        state: &State,
        seq: usize,
        t0: Instant,
        traceparent: &str,
    ) -> (Vec<StateResult>, StateResult, Option<String>) {
        let ok_or = |r: &StateResult, ok: &Option<String>, failed: &Option<String>| {
            if r.status == Status::Success
                || (state.continue_on_error && r.status == Status::Failure)
            {
                ok.clone()
            } else {
                failed.clone()
            }
        };
        match &state.kind {
            StateKind::Step(s) => {
                let r = self.run_step(&state.name, s, t0);
                let next = ok_or(&r, &s.on_success, &s.on_failure);
                (Vec::new(), r, next)
            }
            StateKind::Agent(a) => {
                let r = self.run_agent(&state.name, seq, a, t0);
                let next = ok_or(&r, &a.on_success, &a.on_failure);
                (Vec::new(), r, next)
            }
            StateKind::ForEach(f) => {
                let (iterations, r) = self.run_for_each(&state.name, f, t0, traceparent);
                let next = ok_or(&r, &f.on_complete, &f.on_failure);
                (iterations, r, next)
            }
            StateKind::Parallel(p) => {
                let (branches, r) = self.run_parallel(&state.name, p, t0, traceparent);
                let next = ok_or(&r, &p.on_success, &p.on_failure);
                (branches, r, next)
            }
            // Its body's results are in `results` already (its conditions read them): the
            // callers do not add them again.
            StateKind::While(w) => self.run_while(&state.name, w, t0, traceparent),
            StateKind::CallWorkflow(c) => {
                let r = self.run_call(&state.name, c, t0, traceparent);
                let next = ok_or(&r, &c.on_success, &c.on_failure);
                (Vec::new(), r, next)
            }
            StateKind::Operation(o) => {
                let r = self.run_operation(&state.name, seq, o, t0);
                let next = ok_or(&r, &o.on_success, &o.on_failure);
                (Vec::new(), r, next)
            }
            StateKind::Terminal(_) => unreachable!("terminal states end the run in drive"),
        }
    }

    /// Where the run goes after `state` (its result is the last of `results`): the first
    /// of its `transitions` whose `when` holds (as AWF: on success, and for `step` states on
    /// failure too; never for loops), else `default` (its own rule).
    pub(super) fn next_state(
        &self,
        state: &State,
        default: Option<String>,
    ) -> Result<Option<String>, AwfError> {
        let r = self.results.last().expect("the state's result");
        let evaluated = match &state.kind {
            StateKind::While(_) | StateKind::ForEach(_) => false,
            StateKind::Step(_) => r.status != Status::Interrupted,
            _ => r.status == Status::Success,
        };
        if evaluated && !state.transitions.is_empty() {
            for (i, t) in state.transitions.iter().enumerate() {
                let Some(when) = &t.when else {
                    return Ok(Some(t.goto.clone()));
                };
                let holds = crate::workflow::expr::Expr::parse(when)
                    .and_then(|e| e.eval_bool(&self.expr_env(&e)))
                    .map_err(|e| {
                        AwfError::new(
                            codes::EXPRESSION_FAILED,
                            format!(
                                "states.{}.transitions[{i}].when: cannot evaluate {when:?}: {e}",
                                state.name
                            ),
                        )
                    })?;
                if holds {
                    return Ok(Some(t.goto.clone()));
                }
            }
        }
        Ok(default)
    }

    /// What `expr` (a `when`, `while` or `break_when`) reads, as AWF gives it: `inputs`
    /// (string values read as booleans and numbers where they are ones), `states.S` (the
    /// latest result of each), `env`, `workflow`, `context` and, in a loop, `loop`. Only the
    /// states and variables the expression names are looked up (each from the end of the
    /// results), so that a loop's conditions do not cost more as its results grow.
    pub(super) fn expr_env(&self, expr: &crate::workflow::expr::Expr) -> serde_json::Value {
        use crate::workflow::expr::coerce_input;
        use serde_json::{Map, Value, json};
        let refs = expr.references();
        // The names a namespace is read by; None: all of it (a computed index).
        let named = |ns: &str| -> Option<Vec<&str>> {
            let mut names = Vec::new();
            for r in refs.iter().filter(|r| r[0] == ns) {
                names.push(r.get(1)?.as_str());
            }
            Some(names)
        };
        let inputs: Map<String, Value> = self
            .inputs
            .iter()
            .map(|(k, v)| (k.clone(), coerce_input(v)))
            .collect();
        let mut states = Map::new();
        let mut add = |r: &StateResult| {
            states
                .entry(r.state.clone())
                .or_insert_with(|| state_fields(r));
        };
        match named("states") {
            Some(names) => {
                for name in names {
                    if let Some(r) = self.results.iter().rev().find(|r| r.state == name) {
                        add(r);
                    }
                }
            }
            None => self.results.iter().rev().for_each(&mut add),
        }
        let env: Map<String, Value> = match named("env") {
            Some(names) => names
                .into_iter()
                .filter_map(|n| Some((n.to_string(), Value::String(std::env::var(n).ok()?))))
                .collect(),
            None => std::env::vars()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        };
        let mut out = json!({
            "inputs": inputs,
            "states": states,
            "env": env,
            "workflow": self.workflow_fields(),
            "context": context_fields(&self.workdir),
        });
        if let Some(v) = &self.loop_vars {
            out["loop"] = json!({
                "Index": v.index,
                "Index1": v.index1,
                "Item": v.item,
                "Length": v.length,
                "First": v.index == 0,
                "Last": v.length >= 0 && v.index1 as i64 == v.length,
                "Parent": Value::Null,
            });
        }
        out
    }

    /// `workflow.*` of templates and expressions: ID, Name, CurrentState, Duration.
    pub(super) fn workflow_fields(&self) -> serde_json::Value {
        serde_json::json!({
            "ID": self.proxy.run_id,
            "Name": self.wf.name,
            "CurrentState": self.last_state.clone().unwrap_or_default(),
            "Duration": format!("{:.3}s", self.started.elapsed().as_secs_f64()),
        })
    }

    /// Runs the state machine from `start` with the workflow's hooks around it, as AWF:
    /// `workflow_start` first (a failing action ends the run before any state),
    /// `workflow_end` after a success, `workflow_cancel` after Ctrl-C, SIGTERM or a
    /// timeout, `workflow_error` after any other failure (with `{{.error.*}}`); a failing
    /// action of the last three is logged and changes nothing.
    pub(super) fn drive_with_hooks(&mut self, start: &str) -> Result<(), AwfError> {
        let hooks = self.wf.hooks.clone();
        if let Err(why) = self.run_hook_actions("workflow", "workflow_start", &hooks.start, true) {
            return Err(AwfError::new(
                codes::HOOK_FAILED,
                format!("the workflow_start hook failed: {why}"),
            ));
        }
        let outcome = self.drive(start);
        match &outcome {
            Ok(()) => {
                let _ = self.run_hook_actions("workflow", "workflow_end", &hooks.end, false);
            }
            Err(e) if e.code() == codes::INTERRUPTED || e.code() == codes::RUN_TIMEOUT => {
                let _ = self.run_hook_actions("workflow", "workflow_cancel", &hooks.cancel, false);
            }
            Err(e) => {
                self.error_vars = Some(serde_json::json!({
                    "Message": e.message(),
                    "State": self.last_state.clone().unwrap_or_default(),
                    "Type": e.category().name(),
                    // AWF never sets it.
                    "ExitCode": 0,
                }));
                let _ = self.run_hook_actions("workflow", "workflow_error", &hooks.error, false);
                self.error_vars = None;
            }
        }
        outcome
    }

    /// A state's hook (AWF: a failing action is logged, the state goes on).
    pub(super) fn run_hook(&mut self, state: &str, which: &str, actions: &[HookAction]) {
        let _ = self.run_hook_actions(state, which, actions, false);
    }

    /// Runs a hook's actions: a `log` is a line on stderr, a `command` runs as a `step`
    /// command does (templates through the environment, in the workspace, in its own
    /// process group). A failing action is a WARN; with `stop_at_failure` the rest are not
    /// run and the failure is returned.
    fn run_hook_actions(
        &mut self,
        state: &str,
        which: &str,
        actions: &[HookAction],
        stop_at_failure: bool,
    ) -> Result<(), String> {
        let mut failed = None;
        for action in actions {
            match action {
                HookAction::Log(text) => {
                    let line = self.render(text);
                    tracing::info!(state = %state, hook = %which, "{line}");
                    eprintln!(
                        "awf: [{state} {which}] {}",
                        crate::terminal::printable(&line)
                    );
                }
                HookAction::Command(cmd) => {
                    let dir = self.workdir.clone();
                    let name = format!("{state}.{which}");
                    let waited = self
                        .shell(&name, cmd, &dir)
                        .and_then(|(c, _files)| self.spawn_and_wait(c, Some(HOOK_TIMEOUT), &name));
                    let (why, stderr) = match waited {
                        Ok(w) if w.code == Some(0) => continue,
                        Ok(w) => (
                            w.code
                                .map_or("no exit code".into(), |c| format!("exit code {c}")),
                            crate::terminal::printable(w.stderr.trim()).to_string(),
                        ),
                        Err(e) => (e.to_string(), String::new()),
                    };
                    eprintln!("awf: WARN {which} hook of {state} failed ({why}): {stderr}");
                    failed.get_or_insert(why);
                    if stop_at_failure {
                        break;
                    }
                }
            }
        }
        match failed {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

/// A hook command's bound (hooks have no timeout key in AWF).
const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// A JSON value as template text: a string as it is, anything else as JSON.
fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `states.S` of expressions: a state's result as AWF's expressions see it.
pub(super) fn state_fields(r: &StateResult) -> serde_json::Value {
    use serde_json::Value;
    let (input, output, total) = token_counts(r);
    // AWF's JSON (and Response, an object): the output when it is JSON.
    let json = serde_json::from_str::<Value>(r.output.trim())
        .ok()
        .filter(|v| v.is_object() || v.is_array());
    serde_json::json!({
        "Output": r.output,
        "Stderr": r.stderr,
        "ExitCode": r.exit_code.unwrap_or(if r.status == Status::Success { 0 } else { -1 }),
        "Status": awf_status(r.status),
        "Response": json.as_ref().filter(|j| j.is_object()).cloned().unwrap_or(Value::Null),
        "TokensUsed": total,
        "TokensInput": input,
        "TokensOutput": output,
        // From the provider's own counts (or the model relay's), never estimated.
        "TokensEstimated": false,
        "JSON": json.unwrap_or(Value::Null),
    })
}

/// A state's tokens, input, output and in all: the model relay's counts, else the
/// provider's usage (whose total may come alone).
fn token_counts(r: &StateResult) -> (u64, u64, u64) {
    if let Some(m) = &r.model
        && m.requests > 0
    {
        return (
            m.input_tokens,
            m.output_tokens,
            m.input_tokens + m.output_tokens,
        );
    }
    let Some(u) = &r.usage else {
        return (0, 0, 0);
    };
    let (i, o) = super::state::token_parts(u);
    (
        i.unwrap_or(0),
        o.unwrap_or(0),
        super::state::tokens_in(u).unwrap_or(0),
    )
}

/// A state's status as AWF names it in expressions.
fn awf_status(s: Status) -> &'static str {
    match s {
        Status::Success => "completed",
        Status::Failure | Status::Timeout => "failed",
        Status::Interrupted | Status::Cancelled => "cancelled",
    }
}

/// `context.*`: WorkingDir, User, Hostname.
pub(super) fn context_fields(workdir: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "WorkingDir": workdir.display().to_string(),
        "User": std::env::var("USER").unwrap_or_default(),
        "Hostname": std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    })
}
