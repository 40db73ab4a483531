//! Run state: what a run has done so far, kept so that a run killed at any instant can be
//! resumed (`awf resume`), looked up (`awf status`, `awf history`) and told from a live
//! one (its lease).
//!
//! One directory per run under awf's state directory (outside every path a step may
//! write, as the audit trail is): `runs-state/<run id>/` with `state.json`, a snapshot,
//! `journal.jsonl`, the transitions since, and `inputs.json` with the input values a resume
//! needs (all 0600, the directory 0700; the snapshot holds the inputs masked).
//!
//! Each transition — a top-level state started or ended (with the records of the units it
//! ran), a unit (a branch, an iteration of a for_each or a while) ended, the run ended —
//! is an entry: a JSON line appended to the journal, numbered one more than the one
//! before. Entries recorded together (the units that ended at once) are one write and one
//! fsync: a group commit. The snapshot says up to which entry it holds; when the journal
//! has grown past the snapshot's size (and 256 KiB), at the start of a run or a resume and
//! at its end, the journal is compacted: the snapshot is written whole (a temp file, fsync,
//! rename over the old one, fsync of the directory), then the journal is emptied. So the
//! bytes written stay in proportion to the transitions, never the run's size times them.
//!
//! A reader takes the snapshot, then the journal's entries after it, up to the first line
//! that is not whole or does not follow (a torn tail: the append a kill cut short, never
//! acknowledged): whenever the writer is killed, it reads each transition whose fsync
//! returned. A kill during a compaction leaves the old snapshot (and the journal whole)
//! or the new one (and entries it holds, which are skipped).
//!
//! Semantics are at-least-once, as LangGraph's and Temporal's: a state or unit that was
//! running when the run died runs again from its start on resume; one that had ended never
//! runs again.

use super::report::{StateResult, Status};
use crate::error::{AwfError, codes};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The format of `state.json` (2: with a journal beside it; 1, without, is read too); a file
/// of another version is refused with what to do.
pub const VERSION: u32 = 2;

/// Where the runs' state directories are.
pub fn runs_dir() -> PathBuf {
    crate::private_files::state_dir().join("runs-state")
}

/// How a run stands. `died` is never written: it is what a `running` run whose lease is
/// gone is shown as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// How a run that ended with `code` (and `error`) ended: cancelled when it was
    /// interrupted (Ctrl-C, SIGTERM), else by its code.
    pub fn of(code: u8, error: Option<&AwfError>) -> RunStatus {
        match (code, error.map(AwfError::code)) {
            (0, _) => RunStatus::Succeeded,
            (_, Some(c)) if c == codes::INTERRUPTED => RunStatus::Cancelled,
            _ => RunStatus::Failed,
        }
    }

    /// The word the run's summary says (`awf run --output json`'s `status`).
    pub fn summary_word(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "success",
            RunStatus::Failed => "failure",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// How one state stands in the run state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// Who holds a run: the process that writes its state. A run whose `status` is `running`
/// but whose lease names no live process died (killed, a crash, a reboot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot): a pid reused later by
    /// another process is told apart.
    pub start: u64,
    pub boot_id: String,
    pub host: String,
}

impl Lease {
    /// This process's lease.
    pub fn mine() -> Lease {
        let pid = std::process::id();
        Lease {
            pid,
            start: crate::session_dirs::process_start(pid).unwrap_or(0),
            boot_id: boot_id(),
            host: host_name(),
        }
    }

    /// Whether the holder may still be running: on this host and boot, its pid names a
    /// process started when the lease was taken. A lease of another host cannot be checked
    /// from here and is taken as alive.
    pub fn alive(&self) -> bool {
        if self.host != host_name() {
            return true;
        }
        if self.boot_id != boot_id() {
            return false;
        }
        crate::session_dirs::process_start(self.pid) == Some(self.start)
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// One state's record, in the order the states ran (a state run twice — a loop through
/// `on_failure`, a resume — has two).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateRecord {
    pub state: String,
    /// The iteration of a for_each this record is of (from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<usize>,
    /// The `for_each` or `parallel` state this record is a unit's state of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: StateStatus,
    /// How the state ended as `awf run` reports it (success, failure, timeout,
    /// interrupted, cancelled); none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The step id's number (`<n>-<state>`: its audit file and span).
    pub step: usize,
    /// Attempts made (1 unless the state retried).
    pub attempt: u32,
    pub started_ms: u64,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Input and output tokens of an agent state's model turns, where they were seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The head of the step's audit chain at its end (see `telemetry::audit_chain`):
    /// `awf audit verify RUN_ID` holds the file to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_head: Option<String>,
    /// That head signed with the audit key (`telemetry::audit_key`), when awf had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_head_mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agent CLI's session (a state with `conversation` or `resume: continue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    pub run_id: String,
    /// The workflow's `name`.
    pub workflow: String,
    pub workflow_path: PathBuf,
    /// `sha256:<hex>` of the workflow file's text when the run started.
    pub workflow_sha256: String,
    /// The directory the run was started in (the steps' workspace).
    pub workdir: PathBuf,
    /// The run's inputs, masked as the audit masks them (the values are in `inputs.json`).
    pub inputs: Map<String, Value>,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_ms: u64,
    pub updated_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    pub lease: Lease,
    /// How many times the run was resumed.
    #[serde(default)]
    pub resumes: u32,
    /// The top-level state that runs now, or runs next (a resume starts there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    pub states: Vec<StateRecord>,
    /// Of a `parallel` or `for_each` state that has not ended: the units (branches by
    /// position, iterations by index) that succeeded, with their states' records. A resume
    /// runs only the others.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, BTreeMap<usize, Vec<StateRecord>>>,
    /// `awf run --shard INDEX/COUNT`: this run ran the for_each items whose position mod
    /// COUNT is INDEX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The number of the last journal entry this state holds (a reader applies the
    /// journal's entries after it).
    #[serde(default)]
    pub journal: u64,
}

/// One shard of a run split over several processes (`--shard INDEX/COUNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Reads `INDEX/COUNT` (a Kubernetes Indexed Job passes `"$JOB_COMPLETION_INDEX/N"`).
    pub fn parse(text: &str) -> Result<Shard, AwfError> {
        let bad = |why: &str| {
            AwfError::new(
                codes::INPUT_INVALID,
                format!(
                    "--shard {text:?}: {why}; write INDEX/COUNT with 0 <= INDEX < COUNT, e.g. \
                     --shard 0/3 (a Kubernetes Indexed Job: --shard \"$JOB_COMPLETION_INDEX/3\")"
                ),
            )
        };
        let (i, n) = text.split_once('/').ok_or_else(|| bad("no '/'"))?;
        let index: usize = i
            .trim()
            .parse()
            .map_err(|_| bad("INDEX is no whole number"))?;
        let count: usize = n
            .trim()
            .parse()
            .map_err(|_| bad("COUNT is no whole number"))?;
        if count == 0 || index >= count {
            return Err(bad("INDEX must be below COUNT"));
        }
        Ok(Shard { index, count })
    }

    /// Whether item `position` of a for_each is this shard's.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count == self.index
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `sha256:<hex>` of a workflow's text.
pub fn workflow_hash(text: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", crate::text::hex(&sha2::Sha256::digest(text)))
}

impl RunState {
    /// The status to show: `died` for a run that says `running` but whose holder is gone.
    pub fn shown_status(&self) -> &'static str {
        status_shown(self.status, &self.lease)
    }

    /// Tokens of all the run's model turns seen so far.
    pub fn tokens(&self) -> u64 {
        self.states.iter().filter_map(|s| s.tokens).sum()
    }

    /// Milliseconds from start to end (or to the last write, for a run that has not ended).
    pub fn duration_ms(&self) -> u64 {
        self.ended_ms
            .unwrap_or(self.updated_ms)
            .saturating_sub(self.started_ms)
    }

    /// The highest step id number used so far: a resume goes on from there, so that each
    /// new step has a fresh id, audit file and span.
    pub fn last_step(&self) -> usize {
        self.states.iter().map(|s| s.step).max().unwrap_or(0)
    }

    /// The results a resume starts with: every state that ended, as `awf run` had them,
    /// so that templates see the outputs of completed states.
    pub fn results(&self) -> Vec<StateResult> {
        self.states
            .iter()
            .filter(|s| s.status != StateStatus::Running)
            .map(StateRecord::to_result)
            .collect()
    }
}

impl StateRecord {
    fn of(r: &StateResult, step: usize) -> StateRecord {
        StateRecord {
            state: r.state.clone(),
            iteration: r.iteration,
            parent: None,
            kind: r.kind.to_string(),
            status: state_status(r.status),
            outcome: Some(r.status.as_str().to_string()),
            step,
            attempt: 1,
            started_ms: now_ms().saturating_sub(r.duration_ms),
            duration_ms: r.duration_ms,
            output: r.output.clone(),
            stderr: r.stderr.clone(),
            exit_code: r.exit_code,
            tokens: tokens_of(r),
            audit_head: r.proxy.as_ref().and_then(|p| p.audit_head.clone()),
            audit_head_mac: r.proxy.as_ref().and_then(|p| p.audit_head_mac.clone()),
            error: r.error.as_ref().map(|e| e.message.clone()),
            session_id: r.session_id.clone(),
        }
    }

    /// The result as `awf run` had it (what templates read of a state).
    pub fn to_result(&self) -> StateResult {
        let kind = match self.kind.as_str() {
            "agent" => "agent",
            "terminal" => "terminal",
            "for_each" => "for_each",
            "parallel" => "parallel",
            "while" => "while",
            "call_workflow" => "call_workflow",
            "operation" => "operation",
            _ => "step",
        };
        StateResult {
            status: parse_outcome(self.outcome.as_deref()),
            iteration: self.iteration,
            output: self.output.clone(),
            stderr: self.stderr.clone(),
            exit_code: self.exit_code,
            duration_ms: self.duration_ms,
            ..StateResult::new(&self.state, kind)
        }
    }
}

fn parse_outcome(outcome: Option<&str>) -> Status {
    match outcome {
        Some("success") => Status::Success,
        Some("timeout") => Status::Timeout,
        Some("interrupted") => Status::Interrupted,
        Some("cancelled") => Status::Cancelled,
        _ => Status::Failure,
    }
}

fn state_status(s: Status) -> StateStatus {
    match s {
        Status::Success => StateStatus::Succeeded,
        Status::Failure | Status::Timeout => StateStatus::Failed,
        Status::Interrupted | Status::Cancelled => StateStatus::Cancelled,
    }
}

/// Tokens of a state's usage, in the shape its provider reports: `input_tokens` +
/// `output_tokens` (Claude Code, Codex, Gemini CLI's stats), `prompt_tokens` +
/// `completion_tokens` (OpenAI-compatible APIs), `input` + `output` (OpenCode), else
/// `total_tokens`.
fn tokens_of(r: &StateResult) -> Option<u64> {
    tokens_in(r.usage.as_ref()?)
}

pub(super) fn tokens_in(u: &Value) -> Option<u64> {
    match token_parts(u) {
        (None, None) => count(u, &["total_tokens"]),
        (i, o) => Some(i.unwrap_or(0) + o.unwrap_or(0)),
    }
}

/// A usage's input and output tokens, each as its provider names it.
pub(super) fn token_parts(u: &Value) -> (Option<u64>, Option<u64>) {
    (
        count(u, &["input_tokens", "prompt_tokens", "input"]),
        count(u, &["output_tokens", "completion_tokens", "output"]),
    )
}

fn count(u: &Value, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| {
        let v = u.get(k)?;
        v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))
    })
}

/// One transition of the run state: a line of the journal, applied in order to the
/// snapshot it follows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Entry {
    /// A top-level state started: its record, `running`.
    Started { record: StateRecord },
    /// The running state `end.state` ended as `end` says, after its units' records
    /// (`units`, placed before its own); `next` runs next. `keep_units`: it was stopped by
    /// Ctrl-C, and the units that ended stay ended for a resume.
    Ended {
        end: StateRecord,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        units: Vec<StateRecord>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        keep_units: bool,
    },
    /// Unit `index` of the running `parent` ended (a branch, an iteration) with the
    /// records of its states: a resume does not run it again.
    Unit {
        parent: String,
        index: usize,
        records: Vec<StateRecord>,
    },
    /// The run ended.
    Finished {
        status: RunStatus,
        exit_code: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        ended_ms: u64,
    },
}

/// A line of `journal.jsonl`: the entry's number (one more than the line before; the
/// snapshot says up to which number it holds the entries), when it was written, the entry.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    seq: u64,
    at: u64,
    entry: Entry,
}

/// What an entry does to the run state.
fn apply(s: &mut RunState, entry: &Entry) {
    match entry {
        Entry::Started { record } => {
            s.next = Some(record.state.clone());
            s.states.push(record.clone());
        }
        Entry::Ended {
            end,
            units,
            next,
            keep_units,
        } => {
            s.next = next.clone();
            let at = s
                .states
                .iter()
                .rposition(|x| x.state == end.state && x.status == StateStatus::Running);
            if let Some(at) = at {
                let rec = &mut s.states[at];
                rec.status = end.status;
                rec.outcome = end.outcome.clone();
                rec.attempt = end.attempt;
                rec.duration_ms = end.duration_ms;
                rec.output = end.output.clone();
                rec.exit_code = end.exit_code;
                rec.tokens = end.tokens;
                rec.audit_head = end.audit_head.clone();
                rec.audit_head_mac = end.audit_head_mac.clone();
                rec.error = end.error.clone();
                if end.session_id.is_some() {
                    rec.session_id = end.session_id.clone();
                }
            }
            let at = at.unwrap_or(s.states.len());
            s.states.splice(at..at, units.iter().cloned());
            // Its units are part of its result now; a later run of it runs them all.
            if !keep_units {
                s.units.remove(&end.state);
            }
        }
        Entry::Unit {
            parent,
            index,
            records,
        } => {
            s.units
                .entry(parent.clone())
                .or_default()
                .insert(*index, records.clone());
        }
        Entry::Finished {
            status,
            exit_code,
            error,
            ended_ms,
        } => {
            s.status = *status;
            s.exit_code = Some(*exit_code);
            s.error = error.clone();
            s.ended_ms = Some(*ended_ms);
            if s.status == RunStatus::Cancelled {
                // The state that was stopped runs again on resume.
                for rec in s.states.iter_mut() {
                    if rec.status == StateStatus::Running {
                        rec.status = StateStatus::Cancelled;
                    }
                }
            }
        }
    }
}

/// The journal's name in a run's directory.
const JOURNAL: &str = "journal.jsonl";

/// The journal is compacted into the snapshot once it holds more bytes than this, or than
/// the snapshot (so that the snapshot, which grows with the run, is rewritten a number of
/// times that grows with the log of its size: the bytes written stay in proportion to
/// the entries).
const COMPACT_AT: u64 = 256 * 1024;

/// The entries of `dir`'s journal after entry `after`, in order, up to the first line that
/// is not whole (a torn tail: the append that a kill cut short, never fsynced, so never
/// acknowledged), cannot be read, or does not follow the one before.
fn read_journal(dir: &Path, after: u64) -> Vec<Line> {
    let Ok(bytes) = std::fs::read(dir.join(JOURNAL)) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let mut last = after;
    for chunk in bytes.split_inclusive(|&b| b == b'\n') {
        let Some(text) = chunk.strip_suffix(b"\n") else {
            break;
        };
        let Ok(line) = serde_json::from_slice::<Line>(text) else {
            break;
        };
        // Entries the snapshot holds: a compaction was stopped before it emptied the journal.
        if line.seq <= after {
            continue;
        }
        if line.seq != last + 1 {
            break;
        }
        last = line.seq;
        lines.push(line);
    }
    lines
}

/// The run state of the run in progress, kept at each transition of the engine: an entry
/// appended to the journal, fsynced once for the entries recorded together; now and then
/// the journal is compacted into the snapshot `state.json`.
pub struct Recorder {
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// Of a resumed run: the sessions of the states it stopped in.
    interrupted: Mutex<HashMap<String, String>>,
}

struct Inner {
    state: RunState,
    /// The journal, open for appending (none: it could not be opened, and every transition
    /// is a compaction).
    journal: Option<std::fs::File>,
    /// The number of the last entry applied.
    seq: u64,
    /// Bytes in the journal since the last compaction.
    bytes: u64,
    /// The size of the last snapshot.
    snapshot: u64,
    /// The records of the units of the state that ends next (they go in its `Ended`).
    units: Vec<StateRecord>,
}

impl Recorder {
    /// Makes the run's directory, writes `inputs.json` and the first snapshot, and empties
    /// the journal.
    pub fn create(state: RunState, inputs: &HashMap<String, String>) -> Result<Recorder, AwfError> {
        let dir = runs_dir().join(&state.run_id);
        Recorder::create_in(dir, state, inputs)
    }

    fn create_in(
        dir: PathBuf,
        mut state: RunState,
        inputs: &HashMap<String, String>,
    ) -> Result<Recorder, AwfError> {
        crate::private_files::private_dir(&dir)?;
        let values: Map<String, Value> = inputs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        write_atomically(
            &dir,
            "inputs.json",
            &serde_json::to_vec(&values).expect("JSON"),
        )?;
        state.version = VERSION;
        let seq = state.journal;
        let mut inner = Inner {
            state,
            journal: None,
            seq,
            bytes: 0,
            snapshot: 0,
            units: Vec::new(),
        };
        // The snapshot first (it holds every entry so far), then the journal emptied: a
        // kill between leaves entries the snapshot holds, which a reader skips.
        compact(&dir, &mut inner)?;
        let path = dir.join(JOURNAL);
        let journal = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| {
                AwfError::new(codes::IO, format!("cannot open {}: {e}", path.display()))
            })?;
        journal
            .set_len(0)
            .and_then(|()| journal.sync_all())
            .and_then(|()| std::fs::File::open(&dir)?.sync_all())
            .map_err(|e| {
                AwfError::new(codes::IO, format!("cannot empty {}: {e}", path.display()))
            })?;
        inner.journal = Some(journal);
        let r = Recorder {
            dir,
            inner: Mutex::new(inner),
            interrupted: Mutex::new(HashMap::new()),
        };
        r.index();
        Ok(r)
    }

    /// Takes over a stopped run's state (a resume): this process's lease, `running`.
    pub fn take_over(
        mut state: RunState,
        inputs: &HashMap<String, String>,
    ) -> Result<Recorder, AwfError> {
        state.lease = Lease::mine();
        state.status = RunStatus::Running;
        state.resumes += 1;
        state.ended_ms = None;
        state.exit_code = None;
        state.error = None;
        // What was running when the run died did not end: it runs again (an agent with
        // `resume: continue` in the session it had).
        let interrupted = state
            .states
            .iter()
            .filter(|s| s.status == StateStatus::Running || s.status == StateStatus::Cancelled)
            .filter_map(|s| Some((s.state.clone(), s.session_id.clone()?)))
            .collect();
        state.states.retain(|s| s.status != StateStatus::Running);
        // A terminal state that ended, in a run killed before its end was written, gives the
        // end again (it is recorded once).
        if state.next.is_none() && state.states.last().is_some_and(|s| s.kind == "terminal") {
            state.states.pop();
        }
        let r = Recorder::create(state, inputs)?;
        *r.interrupted.lock().unwrap_or_else(|e| e.into_inner()) = interrupted;
        Ok(r)
    }

    /// The session the state `name` had when the run stopped in it (once: the state's
    /// next run takes it).
    pub fn interrupted_session(&self, name: &str) -> Option<String> {
        self.interrupted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name)
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `entries` and makes them durable together: appended to the journal in one
    /// write and one fsync (a group commit), or, when the journal has grown past the
    /// snapshot (or `compact_now`), compacted into a new snapshot. A failure is said, and
    /// the run goes on (its state is a record, the steps' results do not depend on it).
    fn record(&self, entries: Vec<Entry>, compact_now: bool) {
        let mut inner = self.inner();
        let at = now_ms();
        let mut buf = Vec::new();
        for entry in entries {
            inner.seq += 1;
            let line = Line {
                seq: inner.seq,
                at,
                entry,
            };
            apply(&mut inner.state, &line.entry);
            serde_json::to_writer(&mut buf, &line).expect("JSON");
            buf.push(b'\n');
        }
        inner.state.updated_ms = at;
        let grown = inner.bytes + buf.len() as u64 > COMPACT_AT.max(inner.snapshot);
        let appended = if compact_now || grown || inner.journal.is_none() {
            Err(None)
        } else {
            let f = inner.journal.as_mut().expect("checked");
            f.write_all(&buf).and_then(|()| f.sync_data()).map_err(Some)
        };
        let result = match appended {
            Ok(()) => {
                inner.bytes += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Some(e) = e {
                    // A line written in part would end what a reader reads: the snapshot
                    // takes everything instead, and the journal starts again.
                    tracing::warn!("cannot append to the run state's journal: {e}");
                }
                compact(&self.dir, &mut inner)
            }
        };
        if let Err(e) = result {
            tracing::warn!("cannot write the run state: {e}");
            eprintln!("awf: WARN cannot write the run state: {e}");
        }
    }

    /// State `name` (step id `step`) starts.
    pub fn started(&self, name: &str, kind: &str, step: usize) {
        self.started_with(name, kind, step, None);
    }

    /// State `name` starts, its agent CLI under `session` (known before it starts, so that a
    /// resume can continue it).
    pub fn started_with(&self, name: &str, kind: &str, step: usize, session: Option<&str>) {
        let record = StateRecord {
            state: name.to_string(),
            iteration: None,
            parent: None,
            kind: kind.to_string(),
            status: StateStatus::Running,
            outcome: None,
            step,
            attempt: 1,
            started_ms: now_ms(),
            duration_ms: 0,
            output: String::new(),
            stderr: String::new(),
            exit_code: None,
            tokens: None,
            audit_head: None,
            audit_head_mac: None,
            error: None,
            session_id: session.map(str::to_string),
        };
        self.record(vec![Entry::Started { record }], false);
    }

    /// The running state ended with `r`; `next` runs next (none: the run ends).
    pub fn ended(&self, r: &StateResult, next: Option<&str>) {
        // A state stopped by Ctrl-C did not end: a resume runs it again, without the units
        // that ended, as after a kill.
        let stopped = r.status == Status::Interrupted;
        let units = std::mem::take(&mut self.inner().units);
        let end = StateRecord {
            attempt: r.attempts.unwrap_or(1),
            ..StateRecord::of(r, 0)
        };
        let next = if stopped {
            Some(r.state.clone())
        } else {
            next.map(str::to_string)
        };
        self.record(
            vec![Entry::Ended {
                end,
                units,
                next,
                keep_units: stopped,
            }],
            false,
        );
    }

    /// Unit `index` of the running `parent` state (a branch, an iteration) succeeded with
    /// `results`: a resume does not run it again.
    pub fn unit_succeeded(&self, parent: &str, index: usize, results: &[StateResult]) {
        self.units_succeeded(parent, &[(index, results.to_vec())]);
    }

    /// Units of the running `parent` state that succeeded at once, each with its results:
    /// one append, one fsync.
    pub fn units_succeeded(&self, parent: &str, units: &[(usize, Vec<StateResult>)]) {
        let entries = units
            .iter()
            .map(|(index, results)| Entry::Unit {
                parent: parent.to_string(),
                index: *index,
                records: results.iter().map(|r| StateRecord::of(r, 0)).collect(),
            })
            .collect();
        self.record(entries, false);
    }

    /// The states the units of `parent` (a for_each, parallel or while state) ran,
    /// recorded with `parent`'s own end: `awf status` lists them, `awf gather` reads the
    /// iterations' outputs from them.
    pub fn units_ended(&self, parent: &str, results: &[StateResult]) {
        self.inner().units = results
            .iter()
            .map(|r| StateRecord {
                parent: Some(parent.to_string()),
                ..StateRecord::of(r, 0)
            })
            .collect();
    }

    /// The units of `parent` that succeeded before the run stopped, by index.
    pub fn succeeded_units(&self, parent: &str) -> BTreeMap<usize, Vec<StateResult>> {
        self.inner()
            .state
            .units
            .get(parent)
            .map(|units| {
                units
                    .iter()
                    .map(|(i, recs)| (*i, recs.iter().map(StateRecord::to_result).collect()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The run ended with `code` (0: succeeded): the journal is compacted into the final
    /// snapshot.
    pub fn finished(&self, code: u8, error: Option<&AwfError>) {
        let status = RunStatus::of(code, error);
        self.record(
            vec![Entry::Finished {
                status,
                exit_code: code,
                error: error.map(|e| e.message().to_string()),
                ended_ms: now_ms(),
            }],
            true,
        );
        self.index();
    }

    /// The run's head, appended to the history index (after the run state, which stays
    /// the truth: a run whose index line is missing is still resumed and shown by `status`).
    fn index(&self) {
        let head = RunHead::of(&self.inner().state);
        if let Err(e) = append_index(&head) {
            tracing::warn!("cannot write the history index: {e}");
            eprintln!("awf: WARN cannot write the history index: {e}");
        }
    }
}

/// Writes the snapshot of every entry applied (`state.json`, whole, atomically), then
/// empties the journal.
fn compact(dir: &Path, inner: &mut Inner) -> Result<(), AwfError> {
    inner.state.journal = inner.seq;
    let bytes = serde_json::to_vec_pretty(&inner.state).expect("JSON");
    write_atomically(dir, "state.json", &bytes)?;
    inner.snapshot = bytes.len() as u64;
    inner.bytes = 0;
    if let Some(f) = &inner.journal
        && let Err(e) = f.set_len(0)
    {
        // Its entries are in the snapshot (a reader skips them); new ones could not follow.
        inner.journal = None;
        return Err(AwfError::new(
            codes::IO,
            format!("cannot empty {}: {e}", dir.join(JOURNAL).display()),
        ));
    }
    Ok(())
}

/// Writes `dir/name` whole or not at all: a fresh temp file (0600, never following a
/// symlink), fsync, rename over `name`, fsync of the directory.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), AwfError> {
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let target = dir.join(name);
    let io = |what: &str, e: std::io::Error| {
        AwfError::new(
            codes::IO,
            format!("cannot {what} {}: {e}", target.display()),
        )
    };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| io("create the temp file of", e))?;
    f.write_all(bytes).map_err(|e| io("write", e))?;
    f.sync_all().map_err(|e| io("sync", e))?;
    drop(f);
    std::fs::rename(&tmp, &target).map_err(|e| io("rename into", e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("sync the directory of", e))
}

/// A run's state as written last, with why it cannot be read.
pub fn load(run_id: &str) -> Result<RunState, AwfError> {
    if run_id.is_empty()
        || !run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(AwfError::new(
            codes::RUN_NOT_FOUND,
            format!(
                "{run_id:?} is no run id: a run id is the hex id `awf run` prints first (see `awf history`)"
            ),
        ));
    }
    let path = runs_dir().join(run_id).join("state.json");
    let text = std::fs::read(&path).map_err(|e| {
        AwfError::new(
            codes::RUN_NOT_FOUND,
            format!(
                "no run {run_id} here ({}: {e}); `awf history` lists the runs",
                path.display()
            ),
        )
    })?;
    let mut state: RunState = serde_json::from_slice(&text).map_err(|e| {
        AwfError::new(
            codes::IO,
            format!("the run state {} cannot be read: {e}", path.display()),
        )
    })?;
    if !(1..=VERSION).contains(&state.version) {
        return Err(AwfError::new(
            codes::IO,
            format!(
                "the run state {} is of format {}, this awf reads {VERSION}: use the awf that made it",
                path.display(),
                state.version
            ),
        ));
    }
    for line in read_journal(path.parent().expect("a run's directory"), state.journal) {
        apply(&mut state, &line.entry);
        state.journal = line.seq;
        state.updated_ms = line.at;
    }
    Ok(state)
}

/// The input values a resume needs (`inputs.json`, unmasked).
pub fn load_inputs(run_id: &str) -> Result<HashMap<String, String>, AwfError> {
    let path = runs_dir().join(run_id).join("inputs.json");
    let text = std::fs::read(&path)
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read {}: {e}", path.display())))?;
    let values: Map<String, Value> = serde_json::from_slice(&text)
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read {}: {e}", path.display())))?;
    Ok(values
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
        .collect())
}

/// What `awf history` shows of a run: one line of `runs-state/index.jsonl`, appended when
/// the run starts, is resumed and ends (the last line of a run id is its latest).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunHead {
    pub run_id: String,
    pub workflow: String,
    pub workflow_path: PathBuf,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    pub started_ms: u64,
    pub updated_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    pub tokens: u64,
    pub resumes: u32,
    pub lease: Lease,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

impl RunHead {
    pub fn of(s: &RunState) -> RunHead {
        RunHead {
            run_id: s.run_id.clone(),
            workflow: s.workflow.clone(),
            workflow_path: s.workflow_path.clone(),
            status: s.status,
            exit_code: s.exit_code,
            started_ms: s.started_ms,
            updated_ms: s.updated_ms,
            ended_ms: s.ended_ms,
            tokens: s.tokens(),
            resumes: s.resumes,
            lease: s.lease.clone(),
            shard: s.shard,
        }
    }

    /// As [`RunState::shown_status`].
    pub fn shown_status(&self) -> &'static str {
        status_shown(self.status, &self.lease)
    }

    pub fn duration_ms(&self) -> u64 {
        self.ended_ms
            .unwrap_or(self.updated_ms)
            .saturating_sub(self.started_ms)
    }
}

fn status_shown(status: RunStatus, lease: &Lease) -> &'static str {
    match status {
        RunStatus::Running if !lease.alive() => "died",
        RunStatus::Running => "running",
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
    }
}

fn index_path() -> PathBuf {
    runs_dir().join("index.jsonl")
}

/// Appends the run's head to the index: one line, one `write(2)` on an `O_APPEND` file,
/// so that runs appending at once do not interleave; a line torn by a crash is skipped by
/// the reader.
fn append_index(head: &RunHead) -> Result<(), AwfError> {
    let mut line = serde_json::to_vec(head).expect("JSON");
    line.push(b'\n');
    let path = index_path();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| AwfError::new(codes::IO, format!("cannot open {}: {e}", path.display())))?;
    f.write_all(&line)
        .map_err(|e| AwfError::new(codes::IO, format!("cannot write {}: {e}", path.display())))
}

/// Every run of the index, its latest head each, newest first.
pub fn all() -> Vec<RunHead> {
    let Ok(text) = std::fs::read(index_path()) else {
        return Vec::new();
    };
    let mut latest: HashMap<String, RunHead> = HashMap::new();
    for line in text.split(|&b| b == b'\n') {
        if let Ok(head) = serde_json::from_slice::<RunHead>(line) {
            latest.insert(head.run_id.clone(), head);
        }
    }
    let mut runs: Vec<RunHead> = latest.into_values().collect();
    runs.sort_by(|a, b| {
        b.started_ms
            .cmp(&a.started_ms)
            .then(b.run_id.cmp(&a.run_id))
    });
    runs
}

/// A random UUID (version 4 form) for a CLI session awf starts.
pub fn new_session_uuid() -> String {
    use std::hash::BuildHasher;
    let a = std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    let b = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        ["8", "9", "a", "b"][(b & 3) as usize],
        &hex[17..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_read_in_each_provider_s_shape() {
        use serde_json::json;
        for (usage, tokens) in [
            (
                json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 99}),
                Some(15),
            ),
            (
                json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}),
                Some(10),
            ),
            (
                json!({"input": 7.0, "output": 2.0, "cache": {"read": 3.0}}),
                Some(9),
            ),
            (json!({"total_tokens": 9}), Some(9)),
            (json!({}), None),
        ] {
            assert_eq!(super::tokens_in(&usage), tokens, "{usage}");
        }
    }

    use super::*;

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temp_file() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-state-test-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        write_atomically(&dir, "state.json", b"{\"a\":1}").unwrap();
        write_atomically(&dir, "state.json", b"{\"a\":2}").unwrap();
        assert_eq!(std::fs::read(dir.join("state.json")).unwrap(), b"{\"a\":2}");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn the_journal_is_read_after_the_snapshot_up_to_a_torn_or_broken_tail() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-journal-test-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let unit = |seq: u64, index: usize| {
            let mut line = serde_json::to_vec(&Line {
                seq,
                at: seq,
                entry: Entry::Unit {
                    parent: "all".into(),
                    index,
                    records: Vec::new(),
                },
            })
            .unwrap();
            line.push(b'\n');
            line
        };
        let seqs =
            |after: u64| -> Vec<u64> { read_journal(&dir, after).iter().map(|l| l.seq).collect() };
        // Entries 3 and 4 (a compaction stopped before it emptied the journal: the snapshot
        // holds up to 4), then 5 and 6, then the first half of 7 (a torn append).
        let mut text = [unit(3, 0), unit(4, 1), unit(5, 2), unit(6, 3)].concat();
        let seven = unit(7, 4);
        text.extend_from_slice(&seven[..seven.len() / 2]);
        std::fs::write(dir.join(JOURNAL), &text).unwrap();
        assert_eq!(seqs(4), [5, 6]);
        assert_eq!(seqs(2), [3, 4, 5, 6]);
        // A gap (the snapshot holds up to 1, the journal starts at 3) ends the reading.
        assert_eq!(seqs(1), Vec::<u64>::new());
        // A whole line that does not parse, or does not follow, ends it too.
        let mut text = [unit(1, 0), b"{\"seq\":2,garbage\n".to_vec(), unit(3, 2)].concat();
        std::fs::write(dir.join(JOURNAL), &text).unwrap();
        assert_eq!(seqs(0), [1]);
        text = [unit(1, 0), unit(3, 2)].concat();
        std::fs::write(dir.join(JOURNAL), &text).unwrap();
        assert_eq!(seqs(0), [1]);
    }

    #[test]
    fn this_process_holds_a_live_lease_and_a_dead_pid_does_not() {
        let mine = Lease::mine();
        assert!(mine.alive());
        let gone = Lease {
            start: mine.start + 1,
            ..mine.clone()
        };
        assert!(!gone.alive(), "another start time is another process");
        let rebooted = Lease {
            boot_id: "another-boot".into(),
            ..mine
        };
        assert!(!rebooted.alive());
    }

    #[test]
    fn session_ids_are_uuids_of_version_4_and_differ() {
        let (a, b) = (new_session_uuid(), new_session_uuid());
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(
            parts[2].starts_with('4') && "89ab".contains(&parts[3][..1]),
            "{a}"
        );
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }

    #[test]
    fn the_hash_is_sha256_of_the_text() {
        assert_eq!(
            workflow_hash(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
