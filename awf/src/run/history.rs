//! `awf status RUN_ID` and `awf history`: the runs' states as [`super::state`] keeps them,
//! a run whose holder is gone shown as `died`, never `running`.

use super::state::{self, RunHead};
use crate::error::AwfError;
use serde_json::{Value, json};

/// What `awf history` keeps.
pub struct Filter {
    pub workflow: Option<String>,
    pub status: Option<String>,
    pub limit: usize,
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a Unix time in milliseconds.
fn utc(ms: u64) -> String {
    crate::telemetry::audit::format_rfc3339((ms / 1000) as i64, 0).replace(".000Z", "Z")
}

fn run_json(s: &RunHead) -> Value {
    json!({
        "run_id": s.run_id,
        "workflow": s.workflow,
        "workflow_path": s.workflow_path,
        "status": s.shown_status(),
        "exit_code": s.exit_code,
        "started": utc(s.started_ms),
        "duration_ms": s.duration_ms(),
        "tokens": s.tokens,
        "resumes": s.resumes,
        "shard": s.shard,
        "pid": s.lease.pid,
        "host": s.lease.host,
    })
}

/// `awf status RUN_ID`: the run and each of its states (status, attempt, duration,
/// tokens). Exit code 0 when the run is found.
pub fn status(run_id: &str, as_json: bool) -> Result<u8, AwfError> {
    let s = state::load(run_id)?;
    if as_json {
        let mut out = run_json(&RunHead::of(&s));
        out["next"] = json!(s.next);
        out["inputs"] = Value::Object(s.inputs.clone());
        out["error"] = json!(s.error);
        out["states"] = s
            .states
            .iter()
            .map(|r| {
                json!({
                    "state": r.state,
                    "type": r.kind,
                    "status": r.status,
                    "outcome": r.outcome,
                    "attempt": r.attempt,
                    "step_id": format!("{}-{}", r.step, r.state),
                    "duration_ms": r.duration_ms,
                    "exit_code": r.exit_code,
                    "tokens": r.tokens,
                    "session_id": r.session_id,
                })
            })
            .collect();
        // Of a state that has not ended: the units (branches by position, iterations by
        // index) that ended, which a resume does not run again.
        out["units"] = s
            .units
            .iter()
            .map(|(parent, units)| (parent.clone(), json!(units.keys().collect::<Vec<_>>())))
            .collect::<serde_json::Map<_, _>>()
            .into();
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return Ok(0);
    }
    println!(
        "run {} of {} ({}): {}{}",
        s.run_id,
        s.workflow,
        s.workflow_path.display(),
        s.shown_status(),
        s.exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default()
    );
    // An ended run took its time; one still going (or died) has taken it so far.
    let took = match s.ended_ms {
        Some(_) => format!("took {}", seconds(s.duration_ms())),
        None => format!("{} so far", seconds(s.duration_ms())),
    };
    println!(
        "started {}, {took}{}, {} tokens",
        utc(s.started_ms),
        if s.resumes > 0 {
            format!(", resumed {}×", s.resumes)
        } else {
            String::new()
        },
        s.tokens()
    );
    for r in &s.states {
        let status = match (r.status, s.shown_status()) {
            (state::StateStatus::Running, "died") => "died".to_string(),
            (st, _) => serde_json::to_value(st)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        };
        println!(
            "  {:<24} {:<9} {:<10} attempt {}  {:>8}{}{}",
            r.state,
            r.kind,
            status,
            r.attempt,
            seconds(r.duration_ms),
            r.exit_code
                .map(|c| format!("  exit {c}"))
                .unwrap_or_default(),
            r.tokens
                .map(|t| format!("  {t} tokens"))
                .unwrap_or_default()
        );
    }
    match (s.shown_status(), &s.next) {
        ("died" | "cancelled", Some(n)) => {
            println!("resume with: awf resume {} (runs {n} again)", s.run_id)
        }
        ("failed", _) => {
            if let Some(e) = &s.error {
                println!("error: {}", crate::terminal::printable(e));
            }
        }
        _ => {}
    }
    Ok(0)
}

/// `awf history`: one line per run, newest first.
pub fn history(filter: &Filter, as_json: bool) -> Result<u8, AwfError> {
    let runs: Vec<RunHead> = state::all()
        .into_iter()
        .filter(|s| filter.workflow.as_ref().is_none_or(|w| &s.workflow == w))
        .filter(|s| {
            filter
                .status
                .as_ref()
                .is_none_or(|st| s.shown_status() == st)
        })
        .take(filter.limit)
        .collect();
    if as_json {
        let out: Vec<Value> = runs.iter().map(run_json).collect();
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return Ok(0);
    }
    if runs.is_empty() {
        eprintln!("awf: no runs recorded (in {})", state::runs_dir().display());
        return Ok(0);
    }
    println!(
        "{:<16}  {:<24} {:<9} {:<20} {:>9} {:>8}",
        "RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "TOKENS"
    );
    for s in &runs {
        println!(
            "{:<16}  {:<24} {:<9} {:<20} {:>9} {:>8}",
            s.run_id,
            s.workflow,
            s.shown_status(),
            utc(s.started_ms),
            seconds(s.duration_ms()),
            s.tokens
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc(1_796_493_499_729), "2026-12-05T17:58:19Z");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
