//! The state machine of `awf run`: from `initial`, each state runs (a shell step, an agent
//! or a terminal), its result is recorded, and `on_success`/`on_failure` picks the next,
//! until a terminal state, an interrupt or [`MAX_STEPS`].

use super::report::{StateResult, Status};
use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::proxy::ToolProxyService;
use crate::workflow::template::{self, Ref, ShellCommand};
use crate::workflow::{StateKind, TerminalStatus, Workflow};
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
}

/// What `{{.loop.Item}}`, `.Index`, `.Index1`, `.First`, `.Last` and `.Length` give in an
/// iteration of a for_each.
#[derive(Debug, Clone)]
pub(super) struct LoopVars {
    pub item: String,
    pub index: usize,
    pub index1: usize,
    pub length: usize,
}

impl LoopVars {
    fn get(&self, field: &str) -> String {
        match field {
            "Item" => self.item.clone(),
            "Index" => self.index.to_string(),
            "Index1" => self.index1.to_string(),
            "First" => (self.index == 0).to_string(),
            "Last" => (self.index1 == self.length).to_string(),
            _ => self.length.to_string(),
        }
    }
}

impl Runner<'_> {
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
                    "ExitCode" => r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                    _ => r.status.to_string(),
                })
                .unwrap_or_default(),
        }
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
            let step_trace = self.trace.step(
                &state.name,
                state.kind.type_name(),
                &format!("{seq}-{}", state.name),
            );
            self.step_traceparent = step_trace.traceparent.clone();
            if let Some(record) = &self.record {
                record.started(&state.name, state.kind.type_name(), seq);
            }
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
                    let next = if r.status == Status::Success {
                        &s.on_success
                    } else {
                        &s.on_failure
                    };
                    (r, next.clone())
                }
                StateKind::Agent(a) => {
                    let r = self.run_agent(&state.name, seq, a, t0);
                    let next = if r.status == Status::Success {
                        &a.on_success
                    } else {
                        &a.on_failure
                    };
                    (r, next.clone())
                }
                StateKind::ForEach(f) => {
                    let (iterations, r) =
                        self.run_for_each(&state.name, f, t0, &step_trace.traceparent);
                    if let Some(record) = &self.record {
                        record.units_ended(&state.name, &iterations);
                    }
                    self.results.extend(iterations);
                    let next = if r.status == Status::Success {
                        &f.on_complete
                    } else {
                        &f.on_failure
                    };
                    (r, next.clone())
                }
                StateKind::Parallel(p) => {
                    let (branches, r) =
                        self.run_parallel(&state.name, p, t0, &step_trace.traceparent);
                    if let Some(record) = &self.record {
                        record.units_ended(&state.name, &branches);
                    }
                    self.results.extend(branches);
                    let next = if r.status == Status::Success {
                        &p.on_success
                    } else {
                        &p.on_failure
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
            let status = result.status;
            let error = result.error.clone();
            let name = result.state.clone();
            step_trace.end(&result);
            if let Some(record) = &self.record {
                record.ended(&result, next.as_deref());
            }
            self.results.push(result);
            // The step's tool set could not be served (a plugin gone since validation, say):
            // like a validation error, this stops the run rather than following on_failure.
            if let Some(e) = error
                .as_ref()
                .filter(|e| e.code.starts_with("USER.MCP_PROXY."))
            {
                return Err(AwfError::new(e.code, e.message.clone()));
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
