//! `while` states, with AWF's meaning: before each iteration `while` is evaluated (false
//! ends the loop), then the `body` states run in order in this runner (so later ones, the
//! conditions and later states see their results), then `break_when` is evaluated (true
//! ends the loop; an error in it is logged and ignored, as AWF does). A body state's own
//! transitions move inside the body: to a body state (a jump), to the loop (the next
//! iteration), to nothing (the next body state), or out of the loop (the loop ends and the
//! run goes there). At `max_iterations` the loop ends and goes to `on_complete`, unless it
//! never broke and a body state failed: then `on_complete` if set, else it fails. The
//! state's `timeout` bounds the whole loop; Ctrl-C stops it between body states (and the
//! running one, as any state).

use super::engine::{LoopVars, Runner};
use super::report::{ErrorJson, StateResult, Status};
use crate::error::codes;
use crate::workflow::expr::Expr;
use crate::workflow::{MaxIterations, WhileState};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Body states one iteration may run (jumps inside a body can go backwards).
const MAX_BODY_STEPS: usize = 1000;

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
        let fail = |r: &mut StateResult, code: &'static str, message: String| {
            r.status = Status::Failure;
            r.error = Some(ErrorJson { code, message });
        };
        let max = match &w.max_iterations {
            MaxIterations::Fixed(n) => Ok(*n),
            MaxIterations::Template(t) => {
                let text = self.render(t);
                match text.trim().parse::<usize>() {
                    Ok(n) if (1..=crate::workflow::MAX_ITERATIONS_LIMIT).contains(&n) => Ok(n),
                    _ => Err(format!(
                        "max_iterations value {:?} is invalid: it must be a whole number from 1 to {}",
                        text.trim(),
                        crate::workflow::MAX_ITERATIONS_LIMIT
                    )),
                }
            }
        };
        let (condition, breaker) = (
            Expr::parse(&w.condition),
            w.break_when.as_deref().map(Expr::parse),
        );
        let (max, condition) = match (max, condition) {
            (Ok(m), Ok(c)) => (m, c),
            (Err(e), _) => {
                fail(&mut r, codes::STATE_FAILED, format!("while {name:?}: {e}"));
                r.duration_ms = t0.elapsed().as_millis() as u64;
                return (units, r, w.on_failure.clone());
            }
            (_, Err(e)) => {
                fail(
                    &mut r,
                    codes::EXPRESSION_FAILED,
                    format!("while {name:?}: {e}"),
                );
                r.duration_ms = t0.elapsed().as_millis() as u64;
                return (units, r, w.on_failure.clone());
            }
        };
        let deadline = w.timeout.map(|t| t0 + t);
        let outer = self.loop_vars.take();
        let (mut ran, mut broke, mut failed_body) = (0, false, false);
        let mut exit: Option<String> = None;
        let mut error: Option<(&'static str, String)> = None;
        // Each iteration is a unit of the run state: the body states it ran, recorded as it
        // ends. The body's own loops are part of their iteration (they record nothing), and
        // a resumed run restores the iterations that ended and goes on with the next.
        let record = self.record.take();
        let restored = record
            .as_ref()
            .map(|r| r.succeeded_units(name))
            .unwrap_or_default();
        let mut first = 0;
        for (k, results) in restored {
            if k != first || first >= max {
                break;
            }
            failed_body |= results.iter().any(|x| x.status != Status::Success);
            self.results.extend(results.iter().cloned());
            units.extend(results);
            ran += 1;
            first += 1;
        }
        if first > 0 {
            eprintln!(
                "awf: while {name:?} resumes after iteration {first} (its iterations 1 to {first} \
                 ended before the run stopped)"
            );
            // `break_when` as it was evaluated after the last restored iteration.
            self.loop_vars = Some(LoopVars {
                item: String::new(),
                index: first - 1,
                index1: first,
                length: -1,
            });
            if let Some(Ok(b)) = &breaker {
                broke = b.eval_bool(&self.expr_env(b)).unwrap_or(false);
            }
        }
        let start = if broke { max } else { first };
        'iterations: for i in start..max {
            self.loop_vars = Some(LoopVars {
                item: String::new(),
                index: i,
                index1: i + 1,
                length: -1,
            });
            match condition.eval_bool(&self.expr_env(&condition)) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    error = Some((
                        codes::EXPRESSION_FAILED,
                        format!("while {name:?}: evaluate condition {:?}: {e}", w.condition),
                    ));
                    break;
                }
            }
            ran += 1;
            let begin = units.len();
            let mut iteration_error = None;
            let mut at = 0;
            let mut steps = 0;
            while at < w.body.len() {
                if self.interrupt.load(Ordering::SeqCst) {
                    r.status = Status::Interrupted;
                    break 'iterations;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    r.status = Status::Timeout;
                    break 'iterations;
                }
                steps += 1;
                if steps > MAX_BODY_STEPS {
                    iteration_error = Some(format!(
                        "iteration {} ran {MAX_BODY_STEPS} body states: check the jumps of its \
                         transitions",
                        i + 1
                    ));
                    break;
                }
                let state = self.wf.state(&w.body[at]).expect("validated").clone();
                let seq = self.next_id();
                let trace = self.trace.step_under(
                    Some(traceparent),
                    &state.name,
                    state.kind.type_name(),
                    &format!("{seq}-{}", state.name),
                );
                let saved =
                    std::mem::replace(&mut self.step_traceparent, trace.traceparent.clone());
                eprintln!(
                    "awf: [{:>6.1}s] → {} ({}, iteration {} of {name})",
                    self.started.elapsed().as_secs_f64(),
                    state.name,
                    state.kind.type_name(),
                    i + 1
                );
                let t = Instant::now();
                let (inner, mut br, default_next) =
                    self.run_with_hooks(&state, seq, t, &trace.traceparent);
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
                let ok = br.status == Status::Success;
                let interrupted = br.status == Status::Interrupted;
                if !matches!(state.kind, crate::workflow::StateKind::While(_)) {
                    self.results.extend(inner.iter().cloned());
                }
                units.extend(inner);
                units.push(br.clone());
                self.results.push(br);
                if interrupted {
                    r.status = Status::Interrupted;
                    break 'iterations;
                }
                let next = match self.next_state(&state, default_next) {
                    Ok(n) => n,
                    Err(e) => {
                        iteration_error = Some(e.message().to_string());
                        break;
                    }
                };
                if !ok {
                    failed_body = true;
                }
                match next {
                    None if !ok => {
                        iteration_error = Some(format!("step {:?} failed", state.name));
                        break;
                    }
                    None => at += 1,
                    Some(n) if n == name => break,
                    Some(n) => match w.body.iter().position(|b| *b == n) {
                        Some(p) => at = p,
                        None if !ok && !state.continue_on_error => {
                            iteration_error = Some(format!(
                                "step {:?} failed{}",
                                state.name,
                                self.results
                                    .last()
                                    .and_then(|x| x.error.as_ref())
                                    .map(|e| format!(": {}", e.message))
                                    .unwrap_or_default()
                            ));
                            break;
                        }
                        None => {
                            exit = Some(n);
                            break 'iterations;
                        }
                    },
                }
            }
            if let Some(record) = record.as_ref().filter(|_| iteration_error.is_none()) {
                record.unit_succeeded(name, i, &units[begin..]);
            }
            if let Some(b) = &breaker {
                match b
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|b| b.eval_bool(&self.expr_env(b)))
                {
                    Ok(true) => {
                        broke = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(state = %name, "break_when cannot be evaluated: {e}");
                        eprintln!("awf: WARN while {name:?}: break_when cannot be evaluated: {e}");
                    }
                }
            }
            if let Some(e) = iteration_error {
                error = Some((codes::STATE_FAILED, format!("while {name:?}: {e}")));
                break;
            }
        }
        self.loop_vars = outer;
        self.record = record;
        r.output = format!("completed {ran} iterations");
        r.duration_ms = t0.elapsed().as_millis() as u64;
        if r.status != Status::Success {
            let message = match r.status {
                Status::Timeout => format!("while {name:?} reached its timeout"),
                _ => format!("while {name:?} was interrupted"),
            };
            r.error = Some(ErrorJson {
                code: if r.status == Status::Timeout {
                    codes::RUN_TIMEOUT
                } else {
                    codes::INTERRUPTED
                },
                message,
            });
            return (units, r, w.on_failure.clone());
        }
        if let Some((code, message)) = error {
            fail(&mut r, code, message);
            return (units, r, w.on_failure.clone());
        }
        if let Some(target) = exit {
            return (units, r, Some(target));
        }
        // At the limit without a break, after a failure in the body: AWF ends the loop as a
        // failure unless on_complete says where to go.
        let static_max = matches!(w.max_iterations, MaxIterations::Fixed(_));
        if ran == max && !broke && failed_body && static_max && w.on_complete.is_none() {
            fail(
                &mut r,
                codes::STATE_FAILED,
                format!(
                    "while {name:?}: loop reached maximum iterations ({max}) with step failures"
                ),
            );
            return (units, r, w.on_failure.clone());
        }
        if ran == max && !broke {
            eprintln!(
                "awf: while {name:?} reached max_iterations ({max}) and goes on to on_complete"
            );
        }
        (units, r, w.on_complete.clone())
    }
}
