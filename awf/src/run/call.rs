//! `call_workflow` states: another workflow run as part of this run — the same run id,
//! audit directory, workspace, sandbox rules and trace (the child's states are spans under
//! the calling state's) — with its inputs rendered from the caller's templates and checked
//! as `awf run` checks them. The child is found as AWF finds it when the caller was run by
//! its path: in the caller's directory (`.yaml` added when missing). Depth is bounded
//! ([`MAX_CALL_DEPTH`] below the run's workflow) and a workflow already in the call stack
//! is a cycle, both refused before the child starts and ending the run (as AWF's). The
//! state's output is the child's terminal message; its `timeout` (default 300 s, AWF's)
//! bounds the whole child.

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::workflow::flow::{DEFAULT_CALL_TIMEOUT, MAX_CALL_DEPTH};
use crate::workflow::{self, CallWorkflowState};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

impl Runner<'_> {
    pub(super) fn run_call(
        &mut self,
        name: &str,
        c: &CallWorkflowState,
        t0: Instant,
        traceparent: &str,
    ) -> StateResult {
        let mut r = StateResult::new(name, "call_workflow");
        if let Err(e) = self.call_inner(name, c, traceparent, &mut r) {
            if r.status == Status::Success {
                r.status = Status::Failure;
            }
            r.error = Some((&e).into());
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    /// Where `workflow:` names a file: from the caller's directory, `.yaml` added when the
    /// name has no extension and the file without it does not exist.
    fn child_path(&self, written: &str) -> PathBuf {
        let rendered = self.render(written);
        let p = self.wf.dir().join(&rendered);
        if p.exists() || p.extension().is_some() {
            return p;
        }
        p.with_extension("yaml")
    }

    fn call_inner(
        &mut self,
        name: &str,
        c: &CallWorkflowState,
        traceparent: &str,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        if self.calls.len() > MAX_CALL_DEPTH {
            return Err(AwfError::new(
                codes::CALL_DEPTH,
                format!(
                    "state {name:?}: maximum call_workflow nesting depth exceeded (depth: {}, max: \
                     {MAX_CALL_DEPTH})",
                    self.calls.len() - 1
                ),
            ));
        }
        let path = self.child_path(&c.workflow);
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let child = self.load_child(name, &path, &canonical)?;
        let given: Vec<String> = c
            .inputs
            .iter()
            .map(|(k, v)| format!("{k}={}", self.render(v)))
            .collect();
        let inputs = super::resolve_inputs(&child, &given).map_err(|e| {
            AwfError::new(
                e.code(),
                format!("state {name:?} calls {}: {}", path.display(), e.message()),
            )
        })?;
        // The child stops with this run (Ctrl-C), and at the state's timeout.
        let stop = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let watcher = watch(
            stop.clone(),
            self.interrupt.clone(),
            Instant::now() + c.timeout.unwrap_or(DEFAULT_CALL_TIMEOUT),
            timed_out.clone(),
            done.clone(),
        );
        let mut calls = self.calls.clone();
        calls.push(canonical);
        eprintln!(
            "awf: [{:>6.1}s] {name} calls {} ({})",
            self.started.elapsed().as_secs_f64(),
            child.name,
            path.display()
        );
        let mut runner = self.child_runner(&child, inputs, stop, calls, traceparent);
        let outcome = runner.drive_with_hooks(&child.initial);
        done.store(true, Ordering::SeqCst);
        let _ = watcher.join();
        r.output = runner
            .results
            .iter()
            .rev()
            .find(|x| x.kind == "terminal")
            .map(|x| x.output.clone())
            .unwrap_or_default();
        match outcome {
            Ok(()) => Ok(()),
            Err(e) if timed_out.load(Ordering::SeqCst) => {
                r.status = Status::Timeout;
                r.error = Some(ErrorJson {
                    code: codes::RUN_TIMEOUT,
                    message: format!(
                        "state {name:?}: the called workflow {} did not end within its timeout ({})",
                        child.name,
                        e.message()
                    ),
                });
                Ok(())
            }
            Err(e) if e.code() == codes::INTERRUPTED => {
                r.status = Status::Interrupted;
                Err(e)
            }
            Err(e) if e.code() == codes::CALL_DEPTH || e.code() == codes::CALL_CYCLE => Err(e),
            Err(e) => Err(AwfError::new(
                e.code(),
                format!(
                    "state {name:?}: the called workflow {} failed: {}",
                    child.name,
                    e.message()
                ),
            )),
        }
    }

    /// The runner of a called workflow: this run's proxy, relay, ids and trace, its own
    /// inputs, stop flag and call stack, its states under the calling state's span.
    fn child_runner<'c>(
        &self,
        child: &'c workflow::Workflow,
        inputs: std::collections::HashMap<String, String>,
        stop: Arc<AtomicBool>,
        calls: Vec<PathBuf>,
        traceparent: &str,
    ) -> Runner<'c> {
        self.derived(
            child,
            inputs,
            Vec::new(),
            stop,
            Some(traceparent.to_string()),
            calls,
        )
    }

    /// The called workflow, loaded and checked: not a call already on the stack, without
    /// errors, and its directories where a proxied state may have them.
    fn load_child(
        &self,
        name: &str,
        path: &std::path::Path,
        canonical: &std::path::Path,
    ) -> Result<workflow::Workflow, AwfError> {
        if self.calls.iter().any(|c| c == canonical) {
            return Err(AwfError::new(
                codes::CALL_CYCLE,
                // AWF's words (`ErrCircularWorkflowCall`), its call stack by workflow name.
                format!(
                    "step {name}: circular workflow call detected: workflow {:?} is already in \
                     call stack [{}] ({})",
                    stem(path),
                    self.calls
                        .iter()
                        .map(|p| stem(p))
                        .collect::<Vec<_>>()
                        .join(" "),
                    path.display()
                ),
            ));
        }
        let (child, diags) = workflow::load(path, &mut InstalledPlugins::new(&self.workdir));
        if workflow::has_errors(&diags) {
            let first = diags
                .iter()
                .filter(|d| d.is_error())
                .map(|d| format!("{} ({}): {}", d.path, d.code, d.message))
                .take(3)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(AwfError::new(
                codes::CALL_FAILED,
                format!(
                    "state {name:?}: the called workflow {} has errors (check it with `awf \
                     validate {}`): {first}",
                    path.display(),
                    path.display()
                ),
            ));
        }
        let child = child.expect("a workflow without errors was built");
        if child.has_proxied_state() {
            self.proxy.check_locations().map_err(|e| {
                AwfError::new(
                    e.code(),
                    format!("state {name:?} calls {}: {}", path.display(), e.message()),
                )
            })?;
        }
        Ok(child)
    }
}

/// Watches a called workflow until `done`: `stop` follows the caller's interrupt, and is
/// set (with `timed_out`) at `deadline`.
fn watch(
    stop: Arc<AtomicBool>,
    parent: Arc<AtomicBool>,
    deadline: Instant,
    timed_out: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(Ordering::SeqCst) {
            if parent.load(Ordering::SeqCst) {
                stop.store(true, Ordering::SeqCst);
            }
            if Instant::now() >= deadline {
                timed_out.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
}

/// A workflow file's name without its directory and extension, as AWF names a workflow.
fn stem(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
