//! `while` states, with AWF's meaning: before each iteration `while` is evaluated (false
//! ends the loop), then the `body` states run in order in this runner (so later ones, the
//! conditions and later states see their results), then `break_when` is evaluated (true
//! ends the loop; an error in it is logged and ignored, as AWF does). A body state's own
//! transitions move inside the body: to a body state (a jump), to the loop or to nothing
//! (the next body state: AWF's loop treats a transition back to the loop so), or out of
//! the loop (the loop ends and the run goes there). At `max_iterations` the loop ends and goes to `on_complete`, unless it
//! never broke and a body state failed: then `on_complete` if set, else it fails. The
//! state's `timeout` bounds the whole loop; Ctrl-C stops it between body states (and the
//! running one, as any state).

use super::engine::{LoopVars, Runner};
use super::report::{ErrorJson, StateResult, Status};
use crate::error::codes;
use crate::workflow::expr::{Expr, ExprError};
use crate::workflow::{MaxIterations, WhileState};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Body states one iteration may run (jumps inside a body can go backwards).
const MAX_BODY_STEPS: usize = 1000;

/// How one iteration's body ended.
enum Iteration {
    /// Its last body state ran.
    Done,
    /// A body state failed and nothing handled it, or a transition could not be followed.
    Failed(String),
    Interrupted,
    Timeout,
    /// A transition left the loop for this state.
    Exit(String),
}

/// Where a loop stands.
#[derive(Default)]
struct Progress {
    ran: usize,
    broke: bool,
    failed_body: bool,
    exit: Option<String>,
    error: Option<(&'static str, String)>,
}

impl Runner<'_> {
    pub(super) fn run_while(
        &mut self,
        name: &str,
        w: &WhileState,
        t0: Instant,
        traceparent: &str,
    ) -> (Vec<StateResult>, StateResult, Option<String>) {
        let mut r = StateResult::new(name, "while");
        let mut units = Vec::new();
        let (max, condition, breaker) = match self.while_bounds(name, w) {
            Ok(b) => b,
            Err((code, message)) => {
                r.status = Status::Failure;
                r.error = Some(ErrorJson { code, message });
                r.duration_ms = t0.elapsed().as_millis() as u64;
                return (units, r, w.on_failure.clone());
            }
        };
        let deadline = w.timeout.map(|t| t0 + t);
        let outer = self.loop_vars.take();
        // Each iteration is a unit of the run state: the body states it ran, recorded as it
        // ends. The body's own loops are part of their iteration (they record nothing), and
        // a resumed run restores the iterations that ended and goes on with the next.
        let record = self.record.take();
        let mut p = Progress::default();
        let first = self.restore_iterations(name, max, record.as_deref(), &mut units, &mut p);
        if first > 0 {
            // `break_when` as it was evaluated after the last restored iteration.
            self.loop_vars = Some(iteration_vars(first - 1));
            if let Some(Ok(b)) = &breaker {
                p.broke = b.eval_bool(&self.expr_env(b)).unwrap_or(false);
            }
        }
        let start = if p.broke { max } else { first };
        for i in start..max {
            self.loop_vars = Some(iteration_vars(i));
            match condition.eval_bool(&self.expr_env(&condition)) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    p.error = Some((
                        codes::EXPRESSION_FAILED,
                        format!("while {name:?}: evaluate condition {:?}: {e}", w.condition),
                    ));
                    break;
                }
            }
            p.ran += 1;
            let begin = units.len();
            let failure =
                match self.run_iteration(name, w, i, deadline, traceparent, &mut units, &mut p) {
                    Iteration::Done => None,
                    Iteration::Failed(e) => Some(e),
                    Iteration::Interrupted => {
                        r.status = Status::Interrupted;
                        break;
                    }
                    Iteration::Timeout => {
                        r.status = Status::Timeout;
                        break;
                    }
                    Iteration::Exit(target) => {
                        p.exit = Some(target);
                        break;
                    }
                };
            if let Some(record) = record.as_ref().filter(|_| failure.is_none()) {
                record.unit_succeeded(name, i, &units[begin..]);
            }
            if let Some(b) = &breaker {
                match b
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|b| b.eval_bool(&self.expr_env(b)))
                {
                    Ok(true) => {
                        p.broke = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(state = %name, "break_when cannot be evaluated: {e}");
                        eprintln!("awf: WARN while {name:?}: break_when cannot be evaluated: {e}");
                    }
                }
            }
            if let Some(e) = failure {
                p.error = Some((codes::STATE_FAILED, format!("while {name:?}: {e}")));
                break;
            }
        }
        self.loop_vars = outer;
        self.record = record;
        r.output = format!("completed {} iterations", p.ran);
        r.duration_ms = t0.elapsed().as_millis() as u64;
        let next = self.while_outcome(name, w, max, p, &mut r);
        (units, r, next)
    }

    /// `max_iterations` rendered, and `while` and `break_when` parsed (a `break_when` that
    /// does not parse is an error when it is evaluated, logged and ignored as AWF does).
    #[allow(clippy::type_complexity)]
    fn while_bounds(
        &mut self,
        name: &str,
        w: &WhileState,
    ) -> Result<(usize, Expr, Option<Result<Expr, ExprError>>), (&'static str, String)> {
        let max = match &w.max_iterations {
            MaxIterations::Fixed(n) => *n,
            MaxIterations::Template(t) => MaxIterations::resolve(&self.render(t)).map_err(|e| {
                (
                    codes::STATE_FAILED,
                    format!("while {name:?}: resolve max_iterations: {e}"),
                )
            })?,
        };
        let condition = Expr::parse(&w.condition)
            .map_err(|e| (codes::EXPRESSION_FAILED, format!("while {name:?}: {e}")))?;
        let breaker = w.break_when.as_deref().map(Expr::parse);
        Ok((max, condition, breaker))
    }

    /// The iterations a resumed run had ended, back in the results in order; how many.
    fn restore_iterations(
        &mut self,
        name: &str,
        max: usize,
        record: Option<&super::state::Recorder>,
        units: &mut Vec<StateResult>,
        p: &mut Progress,
    ) -> usize {
        let restored = record.map(|r| r.succeeded_units(name)).unwrap_or_default();
        let mut first = 0;
        for (k, results) in restored {
            if k != first || first >= max {
                break;
            }
            p.failed_body |= results.iter().any(|x| x.status != Status::Success);
            self.results.extend(results.iter().cloned());
            units.extend(results);
            p.ran += 1;
            first += 1;
        }
        if first > 0 {
            eprintln!(
                "awf: while {name:?} resumes after iteration {first} (its iterations 1 to {first} \
                 ended before the run stopped)"
            );
        }
        first
    }

    /// Iteration `i`'s body: its states in order, or as their transitions jump.
    #[allow(clippy::too_many_arguments)]
    fn run_iteration(
        &mut self,
        name: &str,
        w: &WhileState,
        i: usize,
        deadline: Option<Instant>,
        traceparent: &str,
        units: &mut Vec<StateResult>,
        p: &mut Progress,
    ) -> Iteration {
        let mut at = 0;
        let mut steps = 0;
        while at < w.body.len() {
            if self.interrupt.load(Ordering::SeqCst) {
                return Iteration::Interrupted;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Iteration::Timeout;
            }
            steps += 1;
            if steps > MAX_BODY_STEPS {
                return Iteration::Failed(format!(
                    "iteration {} ran {MAX_BODY_STEPS} body states: check the jumps of its \
                     transitions",
                    i + 1
                ));
            }
            let state = self.wf.state(&w.body[at]).expect("validated").clone();
            let (br, default_next) = self.run_body_state(name, &state, i, traceparent, units);
            let ok = br.status == Status::Success;
            if br.status == Status::Interrupted {
                return Iteration::Interrupted;
            }
            let next = match self.next_state(&state, default_next) {
                Ok(n) => n,
                Err(e) => return Iteration::Failed(e.message().to_string()),
            };
            p.failed_body |= !ok;
            match next {
                None if !ok => return Iteration::Failed(format!("step {:?} failed", state.name)),
                None => at += 1,
                // AWF's "retry pattern": back to the loop goes on with the next body
                // state (the body still runs to its end).
                Some(n) if n == name => at += 1,
                Some(n) => match w.body.iter().position(|b| *b == n) {
                    Some(p) => at = p,
                    None if !ok && !state.continue_on_error => {
                        return Iteration::Failed(format!(
                            "step {:?} failed{}",
                            state.name,
                            self.results
                                .last()
                                .and_then(|x| x.error.as_ref())
                                .map(|e| format!(": {}", e.message))
                                .unwrap_or_default()
                        ));
                    }
                    None => return Iteration::Exit(n),
                },
            }
        }
        Iteration::Done
    }

    /// One body state of iteration `i`, under its own span, its results recorded; its
    /// result and the state its transitions default to.
    fn run_body_state(
        &mut self,
        name: &str,
        state: &crate::workflow::State,
        i: usize,
        traceparent: &str,
        units: &mut Vec<StateResult>,
    ) -> (StateResult, Option<String>) {
        let seq = self.next_id();
        let trace = self.trace.step_under(
            Some(traceparent),
            &state.name,
            state.kind.type_name(),
            &format!("{seq}-{}", state.name),
        );
        let saved = std::mem::replace(&mut self.step_traceparent, trace.traceparent.clone());
        eprintln!(
            "awf: [{:>6.1}s] → {} ({}, iteration {} of {name})",
            self.started.elapsed().as_secs_f64(),
            state.name,
            state.kind.type_name(),
            i + 1
        );
        let t = Instant::now();
        let (inner, mut br, default_next) = self.run_with_hooks(state, seq, t, &trace.traceparent);
        self.step_traceparent = saved;
        br.iteration = Some(i);
        trace.end(&br);
        eprintln!(
            "awf: [{:>6.1}s] ← {} {} in {:.1}s (iteration {} of {name})",
            self.started.elapsed().as_secs_f64(),
            br.state,
            br.status,
            br.duration_ms as f64 / 1000.0,
            i + 1
        );
        if !matches!(state.kind, crate::workflow::StateKind::While(_)) {
            self.results.extend(inner.iter().cloned());
        }
        units.extend(inner);
        units.push(br.clone());
        self.results.push(br.clone());
        (br, default_next)
    }

    /// The loop's end: its status and error in `r`, and where the run goes.
    fn while_outcome(
        &self,
        name: &str,
        w: &WhileState,
        max: usize,
        p: Progress,
        r: &mut StateResult,
    ) -> Option<String> {
        if r.status != Status::Success {
            let (code, message) = match r.status {
                Status::Timeout => (
                    codes::RUN_TIMEOUT,
                    format!("while {name:?} reached its timeout"),
                ),
                _ => (
                    codes::INTERRUPTED,
                    format!("while {name:?} was interrupted"),
                ),
            };
            r.error = Some(ErrorJson { code, message });
            return w.on_failure.clone();
        }
        if let Some((code, message)) = p.error {
            r.status = Status::Failure;
            r.error = Some(ErrorJson { code, message });
            return w.on_failure.clone();
        }
        if let Some(target) = p.exit {
            return Some(target);
        }
        // At the limit without a break, after a failure in the body: AWF ends the loop as a
        // failure unless on_complete says where to go.
        let static_max = matches!(w.max_iterations, MaxIterations::Fixed(_));
        if p.ran == max && !p.broke && p.failed_body && static_max && w.on_complete.is_none() {
            r.status = Status::Failure;
            r.error = Some(ErrorJson {
                code: codes::STATE_FAILED,
                message: format!(
                    "while {name:?}: loop reached maximum iterations ({max}) with step failures"
                ),
            });
            return w.on_failure.clone();
        }
        if p.ran == max && !p.broke {
            eprintln!(
                "awf: while {name:?} reached max_iterations ({max}) and goes on to on_complete"
            );
        }
        w.on_complete.clone()
    }
}

/// The `loop` variables of iteration `i` of a `while` (no item, no length).
fn iteration_vars(i: usize) -> LoopVars {
    LoopVars {
        item: String::new(),
        index: i,
        index1: i + 1,
        length: -1,
    }
}
