//! `awf run`: validation first (any problem stops the run before anything executes), then
//! the state machine (`engine`) from `initial`: `agent` states through their provider
//! (`agent`, with the per-step tool proxy when `mcp_proxy.enable`), `step` states as shell
//! commands (`step`), each in its own process group with its timeout (`supervise`),
//! until a `terminal` state. Ctrl-C and a timeout take the same teardown path as a normal
//! end. Progress goes to stderr; the summary (`report`, human or JSON) to stdout.

mod agent;
mod engine;
mod inputs;
mod parallel;
mod report;
mod step;
mod supervise;
mod trace;

pub use inputs::resolve_inputs;
pub use report::{ErrorJson, StateResult, Status};

use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::process;
use crate::proxy::ToolProxyService;
use crate::validate::print_diagnostics;
use crate::workflow;
use engine::Runner;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

pub struct RunOptions {
    pub inputs: Vec<String>,
    pub json: bool,
    /// Where per-step audit files go; default `$XDG_STATE_HOME/awf/audit/<run id>`.
    pub audit_dir: Option<PathBuf>,
}

/// Runs a workflow file; the value is the exit code.
pub fn run(file: &Path, opts: &RunOptions) -> Result<u8, AwfError> {
    let workdir = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let (wf, diags) = workflow::load(file, &mut InstalledPlugins::new(&workdir));
    if !workflow::has_errors(&diags) {
        print_diagnostics(file, &diags); // warnings only: they do not stop the run
    } else {
        print_diagnostics(file, &diags);
        eprintln!(
            "awf: {} has {} error(s); nothing was run (check with `awf validate {}`)",
            file.display(),
            diags.iter().filter(|d| d.is_error()).count(),
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
    let state = crate::private_files::state_dir();
    let run_dir = state.join("runs").join(&run_id);
    // A relative --audit-dir is taken from the current directory, and checked as such
    // below (before anything runs), not found out when the first agent step starts.
    let audit_dir = match opts.audit_dir.clone() {
        Some(d) if d.is_relative() => std::env::current_dir()
            .map_err(|e| {
                AwfError::new(codes::IO, format!("cannot read the current directory: {e}"))
            })?
            .join(d),
        Some(d) => d,
        None => state.join("audit").join(&run_id),
    };
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
        },
        trace: Arc::new(trace::RunTrace::start(
            &wf.name,
            &run_id,
            &wf.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>(),
        )),
        step_traceparent: String::new(),
        relay: Arc::default(),
        ids: Arc::default(),
        loop_vars: None,
        plugins: InstalledPlugins::new(&workdir),
        workdir,
        started: Instant::now(),
    };
    runner.proxy.check_locations()?;
    crate::private_files::private_dir(&run_dir)?;
    eprintln!("awf: run {run_id} of {} ({})", wf.name, file.display());
    let outcome = runner.drive();
    process::kill_orphans();
    let _ = std::fs::remove_dir_all(&run_dir);
    let (code, error) = match &outcome {
        Ok(()) => (0, None),
        Err(e) => (e.exit_code(), Some(e.clone())),
    };
    runner.trace.end(code, error.as_ref().map(|e| e.message()));
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
    report::print_summary(&summary, opts.json);
    if let Some(e) = &error {
        eprintln!("awf: {}", crate::terminal::printable(&e.to_string()));
    }
    Ok(code)
}
