//! The conformance checks, and the runner that runs each in a fresh server process.
//!
//! A check is a function that drives one [`ServerProcess`] and returns `Ok(())` (PASS) or
//! a [`Verdict`] (FAIL with what was expected and what came, or SKIP with why). Where the
//! point is that something is *not* answered (a notification, a cancelled request), the
//! check sends a request afterwards (`ping`, or a `tools/list` in 2026-07-28, which has no
//! `ping`) and looks at what arrived before its answer: ordering, never a wall-clock wait,
//! decides.
//!
//! Each check belongs to one protocol revision ([`Revision`]); a run selects revisions
//! (2024-11-05 by default). The 2024-11-05 checks follow that revision and JSON-RPC 2.0,
//! and cover the framing and the process life for every revision; a few pin a choice the
//! specification leaves open (an answer to requests sent before `initialize`, -32600 for
//! batches, -32602 for unknown tools, an error for an over-long line), and their `about`
//! text says so. The checks of the later revisions test what those revisions change: the
//! negotiated handshake and the tool fields of 2025-06-18 and 2025-11-25, and the stateless
//! 2026-07-28 (`server/discover`, per-request `_meta`, caching hints, subscriptions, and a
//! server that serves both eras on one process).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::session::{ServerProcess, SessionError};

macro_rules! fail {
    ($($arg:tt)*) => { return Err($crate::checks::Verdict::Fail(format!($($arg)*))) };
}

mod support;
mod v2024_11_05;
mod v2025;
mod v2026_07_28;

/// A revision of the Model Context Protocol that the suite has checks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Revision {
    V2024_11_05,
    V2025_06_18,
    V2025_11_25,
    V2026_07_28,
}

impl Revision {
    /// Every revision, oldest first (the order of `--revision all`).
    pub const ALL: [Revision; 4] = [
        Revision::V2024_11_05,
        Revision::V2025_06_18,
        Revision::V2025_11_25,
        Revision::V2026_07_28,
    ];

    /// Its date, as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Revision::V2024_11_05 => "2024-11-05",
            Revision::V2025_06_18 => "2025-06-18",
            Revision::V2025_11_25 => "2025-11-25",
            Revision::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision named `text` (its date).
    pub fn parse(text: &str) -> Option<Revision> {
        Revision::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to run the suite against one server.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server command and its arguments.
    pub command: Vec<String>,
    /// Deadline of each check (a hang guard, not a performance requirement).
    pub timeout: Duration,
    /// A tool that returns its text argument; `None`: use a tool named `echo` if listed.
    pub echo_tool: Option<String>,
    /// Arguments for the echo tool; `None`: derived from its input schema.
    pub echo_args: Option<Value>,
    /// A tool that takes a while (for concurrency and cancellation checks).
    pub slow_tool: Option<String>,
    pub slow_args: Value,
    /// A tool whose call fails with an `isError` result.
    pub error_tool: Option<String>,
    pub error_args: Value,
    /// Arguments the echo tool must refuse; `None`: `{}` when its schema has required
    /// properties.
    pub bad_args: Option<Value>,
    /// A tool that declares an `outputSchema`, for the structured-content checks; `None`:
    /// the echo tool, when it declares one.
    pub structured_tool: Option<String>,
    /// Its arguments; `None`: derived from its input schema (the echo arguments for the
    /// echo tool).
    pub structured_args: Option<Value>,
    /// The server's line-size limit; the over-long-line check sends 1 MiB more.
    pub max_line_bytes: usize,
    /// How many checks run at the same time (each has its own server process).
    pub jobs: usize,
}

impl Config {
    /// Defaults for everything but the command.
    pub fn new(command: Vec<String>) -> Self {
        Config {
            command,
            timeout: Duration::from_secs(10),
            echo_tool: None,
            echo_args: None,
            slow_tool: None,
            slow_args: json!({}),
            error_tool: None,
            error_args: json!({}),
            bad_args: None,
            structured_tool: None,
            structured_args: None,
            max_line_bytes: 16 * 1024 * 1024,
            jobs: 4,
        }
    }
}

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Fail(String),
    Skip(String),
}

impl From<SessionError> for Verdict {
    fn from(e: SessionError) -> Self {
        Verdict::Fail(e.to_string())
    }
}

type Outcome = Result<(), Verdict>;

/// One check: its name (used by `--only`/`--skip` and in the expected-deviation lists),
/// the revision it belongs to, what it checks, and the function.
pub struct Check {
    pub name: &'static str,
    pub revision: Revision,
    pub about: &'static str,
    run: fn(&Ctx) -> Outcome,
}

/// Every check, in the order they are reported: revision by revision, oldest first.
pub fn all() -> impl Iterator<Item = &'static Check> {
    v2024_11_05::CHECKS
        .iter()
        .chain(v2025::CHECKS)
        .chain(v2026_07_28::CHECKS)
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone)]
pub struct CheckResult {
    pub name: &'static str,
    pub revision: Revision,
    pub status: Status,
    /// Why, for a failure or a skip; for a pass, empty unless the check noted something
    /// the specification allows but a reader should know (another version negotiated, a
    /// SHOULD not observable on this server).
    pub message: String,
    /// For a failure: the end of what the server wrote to stderr (often says why).
    pub stderr: String,
    pub elapsed: Duration,
}

impl CheckResult {
    /// `PASS name`, `PASS name: note`, `FAIL name: message` or `SKIP name: message`.
    pub fn line(&self) -> String {
        match self.status {
            Status::Pass if self.message.is_empty() => format!("PASS {}", self.name),
            Status::Pass => format!("PASS {}: {}", self.name, self.message),
            Status::Fail => format!("FAIL {}: {}", self.name, self.message),
            Status::Skip => format!("SKIP {}: {}", self.name, self.message),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "revision": self.revision.as_str(),
               "status": self.status.as_str(), "message": self.message,
               "stderr": self.stderr, "elapsed_ms": self.elapsed.as_millis() as u64})
    }
}

/// Which checks to run.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The revisions whose checks run (2024-11-05 by default).
    pub revisions: Vec<Revision>,
    /// When not empty, only these run (the others are not reported).
    pub only: Vec<String>,
    /// These are reported as SKIP without running.
    pub skip: Vec<String>,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            revisions: vec![Revision::V2024_11_05],
            only: Vec::new(),
            skip: Vec::new(),
        }
    }
}

impl Selection {
    /// Fails on a name that is no check, naming it and listing the valid ones, and on an
    /// `only` name of a revision that is not selected, naming the option that adds it.
    pub fn validate(&self) -> Result<(), String> {
        for name in self.only.iter().chain(&self.skip) {
            let Some(check) = all().find(|c| c.name == name) else {
                let names: Vec<&str> = self.checks().map(|c| c.name).collect();
                return Err(format!(
                    "unknown check `{name}`; valid names: {}",
                    names.join(", ")
                ));
            };
            if self.only.contains(name) && !self.revisions.contains(&check.revision) {
                return Err(format!(
                    "check `{name}` belongs to revision {}; add `--revision {}` (or `--revision all`)",
                    check.revision, check.revision
                ));
            }
        }
        Ok(())
    }

    /// The checks of the selected revisions, in suite order (before `only`).
    pub fn checks(&self) -> impl Iterator<Item = &'static Check> + '_ {
        all().filter(|c| self.revisions.contains(&c.revision))
    }
}

/// What a check gets: the configuration, its revision and its deadline; it keeps the
/// stderr of the servers it started, for the report of a failure, and the notes of a pass.
struct Ctx<'a> {
    config: &'a Config,
    revision: Revision,
    deadline: Instant,
    stderr: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    notes: Mutex<Vec<String>>,
}

impl Ctx<'_> {
    fn spawn(&self) -> Result<ServerProcess, Verdict> {
        let server = ServerProcess::spawn(&self.config.command, self.deadline)?;
        self.stderr.lock().unwrap().push(server.stderr_handle());
        Ok(server)
    }

    /// The end of what the servers of this check wrote to stderr.
    fn stderr_tail(&self) -> String {
        let mut all = Vec::new();
        for buffer in self.stderr.lock().unwrap().iter() {
            all.extend_from_slice(&buffer.lock().unwrap());
        }
        let text = String::from_utf8_lossy(&all);
        let chars: Vec<char> = text.chars().collect();
        chars[chars.len().saturating_sub(2000)..].iter().collect()
    }

    fn started(&self) -> Result<ServerProcess, Verdict> {
        let mut s = self.spawn()?;
        s.handshake()?;
        Ok(s)
    }

    /// A server whose every request is a 2026-07-28 request (no handshake).
    fn modern(&self) -> Result<ServerProcess, Verdict> {
        let mut s = self.spawn()?;
        s.speak_modern();
        Ok(s)
    }

    /// Something a pass should say (it becomes the pass's message).
    fn note(&self, text: impl Into<String>) {
        self.notes.lock().unwrap().push(text.into());
    }
}

/// Runs the selected checks, `config.jobs` at a time, and returns the results in suite
/// order.
pub fn run(config: &Config, selection: &Selection) -> Vec<CheckResult> {
    let mut out = Vec::new();
    run_with(config, selection, |r| out.push(r.clone()));
    out
}

/// Like [`run`], calling `report` for each result in suite order as soon as it and all
/// results before it are known.
pub fn run_with(config: &Config, selection: &Selection, mut report: impl FnMut(&CheckResult)) {
    let selected: Vec<&Check> = selection
        .checks()
        .filter(|c| selection.only.is_empty() || selection.only.iter().any(|n| n == c.name))
        .collect();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, CheckResult)>();
    let tx = Mutex::new(tx);
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            let tx = tx.lock().unwrap().clone();
            let (next, selected) = (&next, &selected);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(check) = selected.get(i) else { break };
                    let result = if selection.skip.iter().any(|n| n == check.name) {
                        CheckResult {
                            name: check.name,
                            revision: check.revision,
                            status: Status::Skip,
                            message: "skipped by --skip".into(),
                            stderr: String::new(),
                            elapsed: Duration::ZERO,
                        }
                    } else {
                        run_one(config, check)
                    };
                    if tx.send((i, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut pending: Vec<Option<CheckResult>> = vec![None; selected.len()];
        let mut emitted = 0;
        for (i, result) in rx {
            pending[i] = Some(result);
            while emitted < pending.len() {
                let Some(result) = pending[emitted].take() else {
                    break;
                };
                report(&result);
                emitted += 1;
            }
        }
    });
}

fn run_one(config: &Config, check: &Check) -> CheckResult {
    let ctx = Ctx {
        config,
        revision: check.revision,
        deadline: Instant::now() + config.timeout,
        stderr: Mutex::new(Vec::new()),
        notes: Mutex::new(Vec::new()),
    };
    let started = Instant::now();
    let (status, message) = match (check.run)(&ctx) {
        Ok(()) => (Status::Pass, ctx.notes.lock().unwrap().join("; ")),
        Err(Verdict::Fail(m)) => (Status::Fail, m),
        Err(Verdict::Skip(m)) => (Status::Skip, m),
    };
    let stderr = if status == Status::Fail {
        ctx.stderr_tail()
    } else {
        String::new()
    };
    CheckResult {
        name: check.name,
        revision: check.revision,
        status,
        message,
        stderr,
        elapsed: started.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_unique_and_prefixed_by_era() {
        let mut names: Vec<&str> = all().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all().count(), "duplicate check names");
        assert!(
            v2024_11_05::CHECKS.len() >= 30,
            "only {} checks",
            v2024_11_05::CHECKS.len()
        );
        for check in all() {
            let prefix = match check.revision {
                Revision::V2024_11_05 => "",
                Revision::V2025_06_18 => "v2025-06-18-",
                Revision::V2025_11_25 => "v2025-11-25-",
                Revision::V2026_07_28 => "modern-",
            };
            assert!(check.name.starts_with(prefix), "{}", check.name);
        }
    }

    #[test]
    fn every_revision_has_checks_in_order() {
        let revisions: Vec<Revision> = all().map(|c| c.revision).collect();
        assert!(
            revisions.is_sorted(),
            "checks grouped by revision, oldest first"
        );
        for revision in Revision::ALL {
            assert!(revisions.contains(&revision), "{revision}");
            assert_eq!(Revision::parse(revision.as_str()), Some(revision));
        }
    }

    #[test]
    fn selection_rejects_unknown_names() {
        let selection = Selection {
            only: vec!["no-such-check".into()],
            ..Selection::default()
        };
        let error = selection.validate().unwrap_err();
        assert!(
            error.contains("no-such-check") && error.contains("ping-before-initialize"),
            "{error}"
        );
    }

    #[test]
    fn selection_names_the_revision_of_a_check_it_does_not_run() {
        let selection = Selection {
            only: vec!["modern-discover".into()],
            ..Selection::default()
        };
        let error = selection.validate().unwrap_err();
        assert!(error.contains("--revision 2026-07-28"), "{error}");
        let all_revisions = Selection {
            revisions: Revision::ALL.to_vec(),
            only: vec!["modern-discover".into()],
            skip: vec!["ping-before-initialize".into()],
        };
        assert_eq!(all_revisions.validate(), Ok(()));
        assert_eq!(all_revisions.checks().count(), all().count());
        assert_eq!(
            Selection::default().checks().count(),
            v2024_11_05::CHECKS.len(),
            "the default is 2024-11-05 alone"
        );
    }
}
