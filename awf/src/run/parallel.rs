//! `parallel` and `for_each` states: units of work run at once, each in a thread of its
//! own with a runner of its own. A unit is a branch of a `parallel` state (one agent or
//! step state) or an iteration of a `for_each` (its `body` states in order, with
//! `{{.loop.*}}` set). Every state a unit runs is a step of its own (its own step id, tool
//! proxy, audit file, private temp dir, sandbox and span, the span a child of the
//! parallel or for_each state's), at most `max_concurrent` units at a time.
//!
//! A `parallel` state's strategy decides when it succeeds and which branches it stops
//! early: `all_succeed` stops the others at the first failure, `any_succeed` at the first
//! success, `best_effort` never; a `for_each` stops the other iterations at the first
//! failure. A unit is stopped the way an interrupt stops a state (SIGTERM to its process
//! group, the grace period, SIGKILL; its `awf mcp-serve` and plugins with it) and ends
//! `cancelled`; Ctrl-C, SIGTERM and the state's `timeout` stop every unit. The states'
//! own transitions are not followed.

use super::engine::{LoopVars, Runner};
use super::report::{ErrorJson, StateResult, Status};
use crate::error::codes;
use crate::workflow::{ForEachState, ParallelState, StateKind, Strategy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One unit of work: the states it runs in order, and its loop variables.
struct Unit {
    states: Vec<String>,
    vars: Option<LoopVars>,
}

/// How a set of units ended.
struct Ran {
    /// Each unit's results, in the units' order (empty for one that never started).
    units: Vec<Vec<StateResult>>,
    interrupted: bool,
    timed_out: bool,
}

fn unit_ok(results: &[StateResult]) -> bool {
    !results.is_empty() && results.iter().all(|r| r.status == Status::Success)
}

impl Runner<'_> {
    /// A runner for one unit: the run's shared parts, and a stop flag of its own in place
    /// of the run's interrupt (which the parent state passes on).
    fn unit_runner(&self, stop: Arc<AtomicBool>, vars: Option<LoopVars>) -> Runner<'_> {
        let mut unit = self.derived(
            self.wf,
            self.inputs.clone(),
            self.results.clone(),
            stop,
            self.parent_span.clone(),
            self.calls.clone(),
        );
        unit.loop_vars = vars;
        unit
    }

    /// Runs `units`, at most `limit` at once, until they end, `stops_all` says a unit's
    /// results end the rest, the deadline passes or the run is interrupted.
    fn run_units(
        &self,
        parent: &str,
        traceparent: &str,
        units: Vec<Unit>,
        limit: usize,
        deadline: Option<Instant>,
        stops_all: &dyn Fn(&[StateResult]) -> bool,
    ) -> Ran {
        let n = units.len();
        let stops: Vec<Arc<AtomicBool>> = (0..n).map(|_| Arc::default()).collect();
        let mut done: Vec<Vec<StateResult>> = vec![Vec::new(); n];
        let (mut interrupted, mut timed_out) = (false, false);
        // Units that succeeded before a resumed run stopped keep their results and do not
        // run again; they count for the strategy as if they had just ended.
        let restored = self
            .record
            .as_ref()
            .map(|r| r.succeeded_units(parent))
            .unwrap_or_default();
        let mut stopping = false;
        for (i, results) in restored {
            if i < n {
                stopping |= stops_all(&results);
                done[i] = results;
            }
        }
        let skip: Vec<bool> = done.iter().map(|d| !d.is_empty()).collect();
        let mut queue = units.into_iter().enumerate().filter(|(i, _)| !skip[*i]);
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel::<(usize, Vec<StateResult>)>();
            let mut running = 0;
            loop {
                while running < limit.max(1) && !stopping {
                    let Some((i, unit)) = queue.next() else { break };
                    running += 1;
                    let mut runner = self.unit_runner(stops[i].clone(), unit.vars);
                    let tx = tx.clone();
                    scope.spawn(move || {
                        let results = runner.run_unit(parent, traceparent, &unit.states);
                        let _ = tx.send((i, results));
                    });
                }
                if running == 0 {
                    break;
                }
                let stop_all = |stopping: &mut bool| {
                    *stopping = true;
                    for s in &stops {
                        s.store(true, Ordering::SeqCst);
                    }
                };
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(first) => {
                        // With it, the units that ended meanwhile (while the last records
                        // were made durable): their records are one append and one fsync.
                        let mut ended = vec![first];
                        ended.extend(rx.try_iter());
                        let mut succeeded = Vec::new();
                        for (i, mut results) in ended {
                            running -= 1;
                            if stops[i].load(Ordering::SeqCst) && !interrupted && !timed_out {
                                for r in &mut results {
                                    if r.status == Status::Interrupted {
                                        r.status = Status::Cancelled;
                                    }
                                }
                            }
                            if !stopping && stops_all(&results) {
                                stop_all(&mut stopping);
                            }
                            if self.record.is_some() && unit_ok(&results) {
                                succeeded.push((i, results.clone()));
                            }
                            done[i] = results;
                        }
                        if let Some(record) = self.record.as_ref().filter(|_| !succeeded.is_empty())
                        {
                            record.units_succeeded(parent, &succeeded);
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
                if self.interrupt.load(Ordering::SeqCst) && !interrupted {
                    interrupted = true;
                    stop_all(&mut stopping);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) && !timed_out {
                    timed_out = true;
                    stop_all(&mut stopping);
                }
            }
        });
        Ran {
            units: done,
            interrupted,
            timed_out,
        }
    }

    /// One unit in its thread: its states in order, each a step with its span under the
    /// parent state's, until one does not succeed.
    fn run_unit(&mut self, parent: &str, traceparent: &str, states: &[String]) -> Vec<StateResult> {
        let mut results = Vec::new();
        for name in states {
            let state = self.wf.state(name).expect("validated").clone();
            let seq = self.next_id();
            let trace = self.trace.step_under(
                Some(traceparent),
                &state.name,
                state.kind.type_name(),
                &format!("{seq}-{}", state.name),
            );
            self.step_traceparent = trace.traceparent.clone();
            let of = match &self.loop_vars {
                Some(v) => format!("item {} of {parent}", v.index1),
                None => format!("branch of {parent}"),
            };
            eprintln!(
                "awf: [{:>6.1}s] → {} ({}, {of})",
                self.started.elapsed().as_secs_f64(),
                state.name,
                state.kind.type_name()
            );
            let t = Instant::now();
            // Any state but a terminal (a loop in a for_each's body: AWF's nested loops), with
            // its hooks; what a loop in it ran comes first in the iteration's results.
            let (inner, mut r, _) = self.run_with_hooks(&state, seq, t, &trace.traceparent);
            if !matches!(state.kind, StateKind::While(_)) {
                self.results.extend(inner.iter().cloned());
            }
            results.extend(inner);
            r.iteration = self.loop_vars.as_ref().map(|v| v.index);
            trace.end(&r);
            eprintln!(
                "awf: [{:>6.1}s] ← {} {} in {:.1}s ({of})",
                self.started.elapsed().as_secs_f64(),
                r.state,
                r.status,
                r.duration_ms as f64 / 1000.0
            );
            let ok = r.status == Status::Success;
            // The next state of the iteration sees this one's result.
            self.results.push(r.clone());
            results.push(r);
            if !ok {
                break;
            }
        }
        results
    }

    /// Runs the branches of `p`; returns their results (in the listed order) and the
    /// parallel state's own.
    pub(super) fn run_parallel(
        &mut self,
        name: &str,
        p: &ParallelState,
        t0: Instant,
        traceparent: &str,
    ) -> (Vec<StateResult>, StateResult) {
        let units = p
            .branches
            .iter()
            .map(|b| Unit {
                states: vec![b.clone()],
                vars: None,
            })
            .collect();
        let strategy = p.strategy;
        let ran = self.run_units(
            name,
            traceparent,
            units,
            p.max_concurrent.unwrap_or(p.branches.len()),
            p.timeout.map(|t| t0 + t),
            &|results| match strategy {
                Strategy::AllSucceed => !unit_ok(results),
                Strategy::AnySucceed => unit_ok(results),
                Strategy::BestEffort => false,
            },
        );
        let branches: Vec<StateResult> = ran
            .units
            .iter()
            .zip(&p.branches)
            .map(|(r, b)| r.first().cloned().unwrap_or_else(|| self.never_started(b)))
            .collect();
        let ok = |s: &StateResult| s.status == Status::Success;
        let succeeded = match p.strategy {
            Strategy::AllSucceed => branches.iter().all(ok),
            Strategy::AnySucceed => branches.iter().any(ok),
            Strategy::BestEffort => true,
        };
        let output = serde_json::Value::Object(
            branches
                .iter()
                .map(|b| (b.state.clone(), serde_json::Value::String(b.output.clone())))
                .collect(),
        );
        let strategy = match p.strategy {
            Strategy::AllSucceed => "all_succeed",
            Strategy::AnySucceed => "any_succeed",
            Strategy::BestEffort => "best_effort",
        };
        let r = summarise(
            name, "parallel", strategy, &ran, &branches, succeeded, output, p.timeout, t0,
        );
        (branches, r)
    }

    /// Runs the iterations of `f` over its items; returns every body state's result of
    /// every iteration (in the items' order) and the for_each state's own.
    pub(super) fn run_for_each(
        &mut self,
        name: &str,
        f: &ForEachState,
        t0: Instant,
        traceparent: &str,
    ) -> (Vec<StateResult>, StateResult) {
        let mut r = StateResult::new(name, "for_each");
        let items = match self.loop_items(name, f) {
            Ok(items) => items,
            Err(e) => {
                r.status = Status::Failure;
                r.error = Some(ErrorJson {
                    code: codes::STATE_FAILED,
                    message: e,
                });
                r.duration_ms = t0.elapsed().as_millis() as u64;
                return (Vec::new(), r);
            }
        };
        let length = items.len();
        // Under --shard, the items whose position is this shard's; `{{.loop.Index}}` stays
        // the item's position in the whole list.
        let shard = self.shard;
        let positions: Vec<usize> = (0..length)
            .filter(|i| shard.is_none_or(|s| s.holds(*i)))
            .collect();
        let units = items
            .into_iter()
            .enumerate()
            .filter(|(index, _)| shard.is_none_or(|s| s.holds(*index)))
            .map(|(index, item)| Unit {
                states: f.body.clone(),
                vars: Some(LoopVars {
                    item,
                    index,
                    index1: index + 1,
                    length: length as i64,
                }),
            })
            .collect();
        // `break_when`, checked as each iteration ends (AWF: after its body), with that
        // iteration's results and loop variables; an error in it is logged and ignored.
        let breaker = f
            .break_when
            .as_deref()
            .map(crate::workflow::expr::Expr::parse);
        let broke = std::cell::Cell::new(false);
        let breaks = |results: &[StateResult]| -> bool {
            let holds = self.break_when_holds(name, breaker.as_ref(), length, results);
            if holds {
                broke.set(true);
            }
            holds
        };
        let ran = self.run_units(
            name,
            traceparent,
            units,
            f.max_concurrent,
            f.timeout.map(|t| t0 + t),
            &|results| !unit_ok(results) || breaks(results),
        );
        let broke = broke.get();
        let mut ran = ran;
        if broke {
            // The iterations after the break never started: they are not part of the loop.
            ran.units.retain(|u| !u.is_empty());
        }
        let succeeded = ran.units.iter().all(|u| unit_ok(u));
        // Each iteration's output is that of its last body state.
        let output = serde_json::Value::Array(
            ran.units
                .iter()
                .map(|u| {
                    serde_json::Value::String(u.last().map_or(String::new(), |r| r.output.clone()))
                })
                .collect(),
        );
        // An iteration that never started is listed too, cancelled.
        let all: Vec<StateResult> = ran
            .units
            .iter()
            .enumerate()
            .flat_map(|(i, u)| {
                if u.is_empty() {
                    let mut r = self.never_started(&f.body[0]);
                    r.iteration = Some(positions[i]);
                    vec![r]
                } else {
                    u.clone()
                }
            })
            .collect();
        let r = summarise(
            name, "for_each", "for_each", &ran, &all, succeeded, output, f.timeout, t0,
        );
        (all, r)
    }

    /// A for_each's `break_when` after an iteration (`results`, with its loop variables);
    /// an error in it is said and counts as false.
    fn break_when_holds(
        &self,
        name: &str,
        breaker: Option<&Result<crate::workflow::expr::Expr, crate::workflow::expr::ExprError>>,
        length: usize,
        results: &[StateResult],
    ) -> bool {
        let expr = match breaker {
            None => return false,
            Some(Ok(expr)) => expr,
            Some(Err(e)) => {
                eprintln!("awf: WARN for_each {name:?}: break_when cannot be evaluated: {e}");
                return false;
            }
        };
        let mut env = self.expr_env(expr);
        for r in results {
            env["states"][r.state.as_str()] = super::engine::state_fields(r);
        }
        if let Some(i) = results.first().and_then(|r| r.iteration) {
            env["loop"] = serde_json::json!({
                "Index": i, "Index1": i + 1, "Length": length,
                "First": i == 0, "Last": i + 1 == length, "Parent": null,
            });
        }
        match expr.eval_bool(&env) {
            Ok(true) => true,
            Ok(false) => false,
            Err(e) => {
                eprintln!("awf: WARN for_each {name:?}: break_when cannot be evaluated: {e}");
                false
            }
        }
    }

    /// The items of a for_each: its `items` rendered, read as a JSON list; each item the
    /// text `{{.loop.Item}}` gives (a string as it is, anything else as JSON).
    fn loop_items(&self, name: &str, f: &ForEachState) -> Result<Vec<String>, String> {
        let text = self.render(&f.items);
        let value: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
            format!(
                "the items of for_each {name:?} are not a JSON list ({e}): {}",
                crate::providers::shared::excerpt(&text)
            )
        })?;
        let Some(list) = value.as_array() else {
            return Err(format!(
                "the items of for_each {name:?} are {}, not a JSON list",
                crate::providers::shared::excerpt(&text)
            ));
        };
        let max = match &f.max_iterations {
            crate::workflow::MaxIterations::Fixed(n) => *n,
            crate::workflow::MaxIterations::Template(t) => {
                crate::workflow::MaxIterations::resolve(&self.render(t))
                    .map_err(|e| format!("for_each {name:?}: resolve max_iterations: {e}"))?
            }
        };
        // As AWF: max_iterations runs the first items, it does not refuse the rest.
        if list.len() > max {
            eprintln!(
                "awf: for_each {name:?} has {} items; max_iterations is {max}, so the first {max} \
                 run and the other {} do not",
                list.len(),
                list.len() - max
            );
        }
        Ok(list
            .iter()
            .take(max)
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect())
    }

    fn never_started(&self, state: &str) -> StateResult {
        let kind = self.wf.state(state).map_or("step", |s| s.kind.type_name());
        StateResult {
            status: Status::Cancelled,
            ..StateResult::new(state, kind)
        }
    }
}

/// The parallel or for_each state's own result, from its units'.
#[allow(clippy::too_many_arguments)]
fn summarise(
    name: &str,
    kind: &'static str,
    rule: &str,
    ran: &Ran,
    results: &[StateResult],
    succeeded: bool,
    output: serde_json::Value,
    timeout: Option<Duration>,
    t0: Instant,
) -> StateResult {
    let mut r = StateResult::new(name, kind);
    r.status = if ran.interrupted {
        Status::Interrupted
    } else if ran.timed_out {
        Status::Timeout
    } else if succeeded {
        Status::Success
    } else {
        Status::Failure
    };
    r.output = output.to_string();
    for b in results {
        for (tool, n) in &b.tool_calls {
            *r.tool_calls.entry(tool.clone()).or_default() += n;
        }
    }
    r.error = match r.status {
        Status::Success => None,
        Status::Timeout => Some(ErrorJson {
            code: codes::RUN_TIMEOUT,
            message: format!(
                "{kind} state {name:?} timed out after {:?}; its units were stopped",
                timeout.unwrap_or_default()
            ),
        }),
        Status::Interrupted => Some(ErrorJson {
            code: codes::INTERRUPTED,
            message: format!("{kind} state {name:?} was interrupted"),
        }),
        _ => {
            let failed: Vec<String> = results
                .iter()
                .filter(|b| !matches!(b.status, Status::Success | Status::Cancelled))
                .map(|b| match b.iteration {
                    Some(i) => format!("{} (item {}) {}", b.state, i + 1, b.status),
                    None => format!("{} {}", b.state, b.status),
                })
                .collect();
            Some(ErrorJson {
                code: codes::STATE_FAILED,
                message: format!(
                    "{kind} state {name:?} ({rule}) failed: {}",
                    failed.join(", ")
                ),
            })
        }
    };
    r.duration_ms = t0.elapsed().as_millis() as u64;
    r
}
