//! `parallel` states: the named branches (agent and step states) run at once, each in a
//! thread of its own with a runner of its own (its own step id, tool proxy, audit file,
//! private temp dir, sandbox and span, the span a child of the parallel state's), at most
//! `max_concurrent` at a time. The strategy decides when the state succeeds and which
//! branches it stops early: `all_succeed` stops the others at the first failure,
//! `any_succeed` at the first success, `best_effort` never. A branch is stopped the way an
//! interrupt stops a state (SIGTERM to its process group, the grace period, SIGKILL; its
//! `awf mcp-serve` and plugins with it) and ends `cancelled`; Ctrl-C, SIGTERM and the
//! state's `timeout` stop every branch. The branches' own transitions are not followed.

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use crate::error::codes;
use crate::plugins::InstalledPlugins;
use crate::workflow::{ParallelState, StateKind, Strategy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

impl Runner<'_> {
    /// A runner for one branch: the run's shared parts, and a stop flag of its own in
    /// place of the run's interrupt (which the parallel state passes on).
    fn branch(&self, stop: Arc<AtomicBool>, traceparent: String) -> Runner<'_> {
        Runner {
            wf: self.wf,
            inputs: self.inputs.clone(),
            results: self.results.clone(),
            interrupt: stop,
            proxy: self.proxy.clone(),
            plugins: InstalledPlugins::new(&self.workdir),
            workdir: self.workdir.clone(),
            started: self.started,
            trace: self.trace.clone(),
            step_traceparent: traceparent,
            relay: self.relay.clone(),
            ids: self.ids.clone(),
        }
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
        let n = p.branches.len();
        let limit = p.max_concurrent.unwrap_or(n).max(1);
        let deadline = p.timeout.map(|t| t0 + t);
        let stops: Vec<Arc<AtomicBool>> = (0..n).map(|_| Arc::default()).collect();
        let mut done: Vec<Option<StateResult>> = vec![None; n];
        let (mut interrupted, mut timed_out) = (false, false);
        let this = &*self;
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel::<(usize, StateResult)>();
            let (mut next, mut running, mut stopping) = (0, 0, false);
            loop {
                while running < limit && next < n && !stopping {
                    let i = next;
                    next += 1;
                    running += 1;
                    let state = this.wf.state(&p.branches[i]).expect("validated").clone();
                    let seq = this.next_id();
                    let trace = this.trace.step_under(
                        Some(traceparent),
                        &state.name,
                        state.kind.type_name(),
                        &format!("{seq}-{}", state.name),
                    );
                    let mut runner = this.branch(stops[i].clone(), trace.traceparent.clone());
                    let tx = tx.clone();
                    eprintln!(
                        "awf: [{:>6.1}s] → {} ({}, branch of {name})",
                        this.started.elapsed().as_secs_f64(),
                        state.name,
                        state.kind.type_name()
                    );
                    scope.spawn(move || {
                        let t = Instant::now();
                        let r = match &state.kind {
                            StateKind::Agent(a) => runner.run_agent(&state.name, seq, a, t),
                            StateKind::Step(s) => runner.run_step(&state.name, s, t),
                            _ => unreachable!("a branch is an agent or a step (validated)"),
                        };
                        trace.end(&r);
                        let _ = tx.send((i, r));
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
                    Ok((i, mut r)) => {
                        running -= 1;
                        if r.status == Status::Interrupted
                            && stops[i].load(Ordering::SeqCst)
                            && !interrupted
                            && !timed_out
                        {
                            r.status = Status::Cancelled;
                        }
                        eprintln!(
                            "awf: [{:>6.1}s] ← {} {} in {:.1}s (branch of {name})",
                            this.started.elapsed().as_secs_f64(),
                            r.state,
                            r.status,
                            r.duration_ms as f64 / 1000.0
                        );
                        let ends = match p.strategy {
                            Strategy::AllSucceed => r.status != Status::Success,
                            Strategy::AnySucceed => r.status == Status::Success,
                            Strategy::BestEffort => false,
                        };
                        if ends && !stopping {
                            stop_all(&mut stopping);
                        }
                        done[i] = Some(r);
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
                if this.interrupt.load(Ordering::SeqCst) && !interrupted {
                    interrupted = true;
                    stop_all(&mut stopping);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) && !timed_out {
                    timed_out = true;
                    stop_all(&mut stopping);
                }
            }
        });
        let branches: Vec<StateResult> = done
            .into_iter()
            .zip(&p.branches)
            .map(|(r, b)| {
                r.unwrap_or_else(|| {
                    let kind = self.wf.state(b).map_or("step", |s| s.kind.type_name());
                    StateResult {
                        status: Status::Cancelled,
                        ..StateResult::new(b, kind)
                    }
                })
            })
            .collect();
        let mut r = StateResult::new(name, "parallel");
        let ok = |s: &StateResult| s.status == Status::Success;
        let succeeded = match p.strategy {
            Strategy::AllSucceed => branches.iter().all(ok),
            Strategy::AnySucceed => branches.iter().any(ok),
            Strategy::BestEffort => true,
        };
        r.status = if interrupted {
            Status::Interrupted
        } else if timed_out {
            Status::Timeout
        } else if succeeded {
            Status::Success
        } else {
            Status::Failure
        };
        r.output = serde_json::Value::Object(
            branches
                .iter()
                .map(|b| (b.state.clone(), serde_json::Value::String(b.output.clone())))
                .collect(),
        )
        .to_string();
        for b in &branches {
            for (tool, n) in &b.tool_calls {
                *r.tool_calls.entry(tool.clone()).or_default() += n;
            }
        }
        r.error = match r.status {
            Status::Success => None,
            Status::Timeout => Some(ErrorJson {
                code: codes::RUN_TIMEOUT,
                message: format!(
                    "parallel state {name:?} timed out after {:?}; its branches were stopped",
                    p.timeout.unwrap_or_default()
                ),
            }),
            Status::Interrupted => Some(ErrorJson {
                code: codes::INTERRUPTED,
                message: format!("parallel state {name:?} was interrupted"),
            }),
            _ => {
                let failed: Vec<String> = branches
                    .iter()
                    .filter(|b| !matches!(b.status, Status::Success | Status::Cancelled))
                    .map(|b| format!("{} {}", b.state, b.status))
                    .collect();
                Some(ErrorJson {
                    code: codes::STATE_FAILED,
                    message: format!(
                        "parallel state {name:?} ({}) failed: {}",
                        match p.strategy {
                            Strategy::AllSucceed => "all_succeed",
                            Strategy::AnySucceed => "any_succeed",
                            Strategy::BestEffort => "best_effort",
                        },
                        failed.join(", ")
                    ),
                })
            }
        };
        r.duration_ms = t0.elapsed().as_millis() as u64;
        (branches, r)
    }
}
