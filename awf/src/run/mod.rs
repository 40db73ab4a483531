//! `awf run`: validation first (any problem stops the run before anything executes), then
//! the state machine (`engine`) from `initial`: `agent` states through their provider
//! (`agent`, with the per-step tool proxy when `mcp_proxy.enable`), `step` states as shell
//! commands (`step`), each in its own process group with its timeout (`supervise`),
//! until a `terminal` state. Ctrl-C and a timeout take the same teardown path as a normal
//! end. Progress goes to stderr; the summary (`report`, human or JSON) to stdout.

mod agent;
mod call;
mod engine;
pub mod gather;
pub mod history;
mod inputs;
mod operation;
mod parallel;
mod report;
mod retry;
pub mod state;
mod step;
mod supervise;
pub use supervise::set_live_output;
mod trace;
mod while_loop;

pub use inputs::resolve_inputs;
pub use report::{ErrorJson, StateResult, Status};

use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::process;
use crate::tool_proxy::ToolProxyService;
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
    /// `--shard INDEX/COUNT`: run the for_each items whose position mod COUNT is INDEX.
    pub shard: Option<String>,
}

/// `awf resume`: which run, from where, and what may differ.
pub struct ResumeOptions {
    pub run_id: String,
    /// Start at this state rather than where the run stopped (any stopped run, a
    /// completed one too).
    pub from: Option<String>,
    /// Inputs given again (KEY=VALUE) over the run's own.
    pub inputs: Vec<String>,
    /// Resume although the workflow's text changed since the run started.
    pub force: bool,
    pub json: bool,
    pub audit_dir: Option<PathBuf>,
}

/// Loads and checks a workflow; `Err(code)` when it has errors (printed, as JSON too when
/// asked): nothing is run then.
fn load_checked(
    file: &Path,
    workdir: &Path,
    json: bool,
    given: &[String],
) -> Result<workflow::Workflow, u8> {
    let (wf, mut diags) = workflow::load(file, &mut InstalledPlugins::new(workdir));
    // A template of an undeclared input given with --input runs (AWF passes such inputs
    // on); `awf validate`, which has no inputs, still names it.
    diags.retain(|d| {
        d.code != codes::UNDECLARED_INPUT
            || !given.iter().any(|kv| {
                let name = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k).trim();
                d.message.starts_with(&format!("{{{{.inputs.{name}}}}} "))
            })
    });
    print_diagnostics(file, &diags); // warnings alone do not stop the run
    if !workflow::has_errors(&diags) {
        return Ok(wf.expect("a workflow without problems was built"));
    }
    if diags.iter().any(|d| d.code == codes::FILE) {
        eprintln!("awf: nothing was run");
    } else {
        eprintln!(
            "awf: {} has {} error(s); nothing was run (check with `awf validate {}`)",
            file.display(),
            diags.iter().filter(|d| d.is_error()).count(),
            file.display()
        );
    }
    if json {
        let out = json!({
            "workflow": wf.as_ref().map(|w| &w.name),
            "status": "invalid",
            "exit_code": workflow::exit_code(&diags),
            "problems": diags,
            "states": [],
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    }
    Err(workflow::exit_code(&diags))
}

fn current_dir() -> Result<PathBuf, AwfError> {
    std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))
}

fn read_workflow_text(file: &Path) -> Result<Vec<u8>, AwfError> {
    std::fs::read(file).map_err(|e| {
        AwfError::new(
            codes::FILE,
            format!("cannot read the workflow {}: {e}", file.display()),
        )
    })
}

/// Runs a workflow file; the value is the exit code.
pub fn run(file: &Path, opts: &RunOptions) -> Result<u8, AwfError> {
    let workdir = current_dir()?;
    let wf = match load_checked(file, &workdir, opts.json, &opts.inputs) {
        Ok(wf) => wf,
        Err(code) => return Ok(code),
    };
    // What stops the run before it starts is said in the JSON summary too.
    let refused = |e: AwfError| {
        if opts.json {
            let out = json!({
                "workflow": wf.name,
                "status": "invalid",
                "exit_code": e.exit_code(),
                "error": ErrorJson::from(&e),
                "states": [],
            });
            println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        }
        e
    };
    let inputs = resolve_inputs(&wf, &opts.inputs).map_err(refused)?;
    let shard = opts
        .shard
        .as_deref()
        .map(state::Shard::parse)
        .transpose()
        .map_err(refused)?;
    let text = read_workflow_text(file).map_err(refused)?;
    let run_id = crate::telemetry::new_session_id();
    let masker = crate::telemetry::audit::Masker::from_env(4096);
    let masked = masker.mask(&serde_json::to_value(&inputs).expect("JSON"));
    let begin = state::RunState {
        version: state::VERSION,
        run_id: run_id.clone(),
        workflow: wf.name.clone(),
        workflow_path: std::fs::canonicalize(file).unwrap_or_else(|_| workdir.join(file)),
        workflow_sha256: state::workflow_hash(&text),
        workdir: workdir.clone(),
        inputs: masked.as_object().cloned().unwrap_or_default(),
        status: state::RunStatus::Running,
        exit_code: None,
        error: None,
        started_ms: state::now_ms(),
        updated_ms: 0,
        ended_ms: None,
        lease: state::Lease::mine(),
        resumes: 0,
        next: Some(wf.initial.clone()),
        states: Vec::new(),
        units: Default::default(),
        shard,
        journal: 0,
    };
    let start = wf.initial.clone();
    // An error here comes before the run starts (its summary is printed otherwise).
    execute(
        &wf,
        file,
        workdir,
        inputs,
        Begin::New(begin),
        &start,
        opts.json,
        opts.audit_dir.clone(),
    )
    .map_err(refused)
}

/// Resumes a stopped run where it stopped (or `--from` a state): the states that ended
/// keep their results, the one that was running runs again, then the rest.
pub fn resume(opts: &ResumeOptions) -> Result<u8, AwfError> {
    let prior = state::load(&opts.run_id)?;
    let refuse = |why: String| Err(AwfError::new(codes::RESUME_REFUSED, why));
    match prior.shown_status() {
        "running" => {
            return refuse(format!(
                "run {} is still running (pid {} on {}); stop it first (Ctrl-C or SIGTERM), or wait",
                prior.run_id, prior.lease.pid, prior.lease.host
            ));
        }
        done @ ("succeeded" | "failed") if opts.from.is_none() => {
            return refuse(format!(
                "run {} completed ({done}, exit code {}); nothing is left to resume: pass \
                 --from STATE to run it again from a state, or start a new run",
                prior.run_id,
                prior.exit_code.unwrap_or(0)
            ));
        }
        _ => {}
    }
    let file = prior.workflow_path.clone();
    let text = read_workflow_text(&file)?;
    let now = state::workflow_hash(&text);
    if now != prior.workflow_sha256 {
        let what = format!(
            "the workflow {} changed since run {} started ({} then, {} now)",
            file.display(),
            prior.run_id,
            &prior.workflow_sha256[..19.min(prior.workflow_sha256.len())],
            &now[..19]
        );
        if !opts.force {
            return refuse(format!(
                "{what}; its completed states may not match the new text: pass --force to \
                 resume anyway, or start a new run"
            ));
        }
        eprintln!("awf: WARN {what}; resuming anyway (--force)");
    }
    let workdir = prior.workdir.clone();
    let mut given: Vec<String> = state::load_inputs(&prior.run_id)?
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    given.extend(opts.inputs.iter().cloned());
    let wf = match load_checked(&file, &workdir, opts.json, &given) {
        Ok(wf) => wf,
        Err(code) => return Ok(code),
    };
    let inputs = resolve_inputs(&wf, &given)?;
    let start = match &opts.from {
        Some(s) => {
            if wf.state(s).is_none() {
                return Err(AwfError::new(
                    codes::INPUT_INVALID,
                    format!(
                        "--from {s}: the workflow has no state {s:?} (its states: {})",
                        wf.states
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            s.clone()
        }
        None => match (&prior.next, prior.states.last()) {
            (Some(n), _) if wf.state(n).is_some() => n.clone(),
            (Some(n), _) => {
                return refuse(format!(
                    "run {} stopped at {n:?}, which the workflow no longer has: pass --from STATE",
                    prior.run_id
                ));
            }
            // Killed after its terminal state, before its end was written: the terminal
            // (which has no side effect) gives the run's end again.
            (None, Some(last)) if last.kind == "terminal" && wf.state(&last.state).is_some() => {
                last.state.clone()
            }
            (None, last) => {
                return refuse(format!(
                    "run {} had ended (its last state {:?} has no next state) when it was \
                     killed: pass --from STATE to run it again from a state",
                    prior.run_id,
                    last.map(|l| l.state.as_str()).unwrap_or("")
                ));
            }
        },
    };
    let audit_dir = opts.audit_dir.clone();
    execute(
        &wf,
        &file,
        workdir,
        inputs,
        Begin::Resume(prior),
        &start,
        opts.json,
        audit_dir,
    )
}

/// A new run's first state, or a stopped run's.
enum Begin {
    New(state::RunState),
    Resume(state::RunState),
}

/// Set on Ctrl-C and SIGTERM: the run stops between states (and the running one, as any).
fn interrupt_on_signals() -> Result<Arc<AtomicBool>, AwfError> {
    let interrupt = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupt.clone()).map_err(|e| {
            AwfError::new(codes::IO, format!("cannot install the signal handler: {e}"))
        })?;
    }
    Ok(interrupt)
}

/// `awf audit verify FILE|RUN_ID`: a file's chain; or, for a run, each of its steps' files
/// (in `audit_dir`, else the run's default) held to the head its run state kept, which
/// also finds records cut from a file's end and a file rewritten whole.
pub fn verify_audit(target: &str, audit_dir: Option<PathBuf>, json: bool) -> Result<u8, AwfError> {
    use crate::telemetry::audit_chain;
    let as_file = Path::new(target);
    if as_file.is_dir() {
        return Err(AwfError::new(
            codes::USAGE,
            format!(
                "{target} is a directory; give one step's audit file in it (`<n>-<state>.audit.jsonl`) \
                 or the run's id"
            ),
        ));
    }
    // A run id is hex: anything with a `/` or a `.` is a file (and a missing one says so).
    if as_file.is_file() || target.contains(['/', '.']) {
        return audit_chain::verify_command(as_file, None, json);
    }
    let state = state::load(target).map_err(|e| {
        AwfError::new(
            codes::USAGE,
            format!(
                "{target} is neither an audit file nor a run awf knows: {}",
                e.message()
            ),
        )
    })?;
    let (_, dir) = run_dirs(target, audit_dir)?;
    let mut worst = 0;
    let mut seen = 0;
    let units = state.units.values().flat_map(|u| u.values().flatten());
    for record in state.states.iter().chain(units) {
        let Some(head) = &record.audit_head else {
            continue;
        };
        seen += 1;
        let file = dir.join(format!("{}-{}.audit.jsonl", record.step, record.state));
        if !file.is_file() {
            return Err(AwfError::new(
                codes::USAGE,
                format!(
                    "the audit file of state {:?} of run {target} is not at {}; if the run was \
                     started with --audit-dir, give it here too",
                    record.state,
                    file.display()
                ),
            ));
        }
        worst = worst.max(audit_chain::verify_command(&file, Some(head), json)?);
        worst = worst.max(check_signature(target, record, head, json)?);
    }
    if seen == 0 && !json {
        println!(
            "run {target}: no step of it kept an audit head (no proxied agent step, or a run \
             of an awf before the chain)"
        );
    }
    Ok(worst)
}

/// A step's head held to its signature when awf has the audit key: a head of the run
/// state rewritten with its file (chain and all) is found here. Without the key, a signed
/// head is said to be unchecked; with it, an unsigned one fails (its signature was
/// removed, or the run had no key).
fn check_signature(
    run_id: &str,
    record: &state::StateRecord,
    head: &str,
    json: bool,
) -> Result<u8, AwfError> {
    use crate::telemetry::audit_key;
    let key = audit_key::key().map_err(|why| AwfError::new(codes::USAGE, why))?;
    let step_id = format!("{}-{}", record.step, record.state);
    let (ok, said) = match (key, &record.audit_head_mac) {
        (None, None) => return Ok(0),
        (None, Some(_)) => (
            true,
            format!(
                "the head of {step_id} is signed; set {} or {} to check the signature",
                audit_key::KEY_VAR,
                audit_key::KEY_FILE_VAR
            ),
        ),
        (Some(_), None) => (
            false,
            format!(
                "the head of {step_id} is not signed, though an audit key is given: the run \
                 state was rewritten, or the run had no key"
            ),
        ),
        (Some(k), Some(mac)) if audit_key::check(k, run_id, &step_id, head, mac) => (
            true,
            format!("the head of {step_id} is signed with the audit key: verified"),
        ),
        (Some(_), Some(_)) => (
            false,
            format!(
                "the head of {step_id} does not match its signature: the run state (and its \
                 audit file) were rewritten, or the key is another"
            ),
        ),
    };
    if json {
        println!(
            "{}",
            json!({"step": step_id, "signature_verified": ok && key.is_some(), "said": said})
        );
    } else {
        println!("{said}");
    }
    Ok(u8::from(!ok))
}

/// The run's directory and its audit directory.
fn run_dirs(run_id: &str, audit_dir: Option<PathBuf>) -> Result<(PathBuf, PathBuf), AwfError> {
    // Outside the workspace, which the steps' Bash may write, and the temp dir, where each
    // step's private one is made and anyone may write (checked below).
    let state = crate::private_files::state_dir();
    let run_dir = state.join("runs").join(run_id);
    // A relative --audit-dir is taken from the current directory, and checked as such
    // below (before anything runs), not found out when the first agent step starts.
    let audit_dir = match audit_dir {
        Some(d) if d.is_relative() => current_dir()?.join(d),
        Some(d) => d,
        None => state.join("audit").join(run_id),
    };
    Ok((run_dir, audit_dir))
}

/// The run's first line: new (and its shard), or resumed at `resumed_at`.
fn say_start(
    wf: &workflow::Workflow,
    file: &Path,
    run_id: &str,
    resumed_at: Option<&str>,
    shard: Option<state::Shard>,
) {
    match resumed_at {
        Some(start) => eprintln!(
            "awf: run {run_id} of {} ({}) resumed at {start}",
            wf.name,
            file.display()
        ),
        None => eprintln!(
            "awf: run {run_id} of {} ({}){}",
            wf.name,
            file.display(),
            shard
                .map(|s| format!(", shard {}/{}", s.index, s.count))
                .unwrap_or_default()
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn execute(
    wf: &workflow::Workflow,
    file: &Path,
    workdir: PathBuf,
    inputs: std::collections::HashMap<String, String>,
    begin: Begin,
    start: &str,
    json: bool,
    audit_dir: Option<PathBuf>,
) -> Result<u8, AwfError> {
    let interrupt = interrupt_on_signals()?;
    // A key set and unusable stops the run before anything runs: its heads would go
    // unsigned.
    crate::telemetry::audit_key::key().map_err(|why| AwfError::new(codes::USAGE, why))?;
    process::become_subreaper();
    let (run_id, results, last_step, shard) = match &begin {
        Begin::New(s) => (s.run_id.clone(), Vec::new(), 0, s.shard),
        Begin::Resume(s) => (s.run_id.clone(), s.results(), s.last_step(), s.shard),
    };
    let (run_dir, audit_dir) = run_dirs(&run_id, audit_dir)?;
    let exe = std::env::current_exe()
        .map_err(|e| AwfError::new(codes::SPAWN, format!("cannot find the awf executable: {e}")))?;
    let mut runner = Runner {
        wf,
        inputs: inputs.clone(),
        results,
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
        ids: Arc::new(std::sync::atomic::AtomicUsize::new(last_step)),
        loop_vars: None,
        plugins: InstalledPlugins::new(&workdir),
        workdir,
        started: Instant::now(),
        record: None,
        shard,
        parent_span: None,
        calls: vec![std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf())],
        last_state: None,
        started_at: crate::telemetry::audit::now_rfc3339(),
        error_vars: None,
        session_plan: None,
    };
    // Before anything runs, where a state of this workflow is proxied (a called
    // workflow's are checked before it runs); a workflow without one has no agent to keep
    // from awf's files.
    if wf.has_proxied_state() {
        runner.proxy.check_locations()?;
    }
    crate::private_files::private_dir(&run_dir)?;
    let resumed = matches!(begin, Begin::Resume(_));
    let record = match begin {
        Begin::New(s) => state::Recorder::create(s, &inputs)?,
        Begin::Resume(s) => state::Recorder::take_over(s, &inputs)?,
    };
    let record = Arc::new(record);
    runner.record = Some(record.clone());
    say_start(wf, file, &run_id, resumed.then_some(start), shard);
    let outcome = runner.drive_with_hooks(start);
    process::kill_orphans();
    let _ = std::fs::remove_dir_all(&run_dir);
    let (code, error) = match &outcome {
        Ok(()) => (0, None),
        Err(e) => (e.exit_code(), Some(e.clone())),
    };
    record.finished(code, error.as_ref());
    runner.trace.end(code, error.as_ref().map(|e| e.message()));
    let summary = json!({
        "workflow": wf.name,
        "run_id": run_id,
        // As `awf status` says it: an interrupted run was cancelled, not failed.
        "status": state::RunStatus::of(code, error.as_ref()).summary_word(),
        "exit_code": code,
        "duration_ms": runner.started.elapsed().as_millis() as u64,
        "error": error.as_ref().map(ErrorJson::from),
        "audit_dir": audit_dir,
        "shard": shard,
        "states": runner.results,
    });
    report::print_summary(&summary, json);
    if let Some(e) = &error {
        eprintln!("awf: {}", crate::terminal::printable(&e.to_string()));
    }
    Ok(code)
}
