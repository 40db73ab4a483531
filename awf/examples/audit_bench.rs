//! The cost of one audit record: `AuditLog::append` (masked, linked to the line before it
//! by its SHA-256, under the file's exclusive lock, one write) of a typical `tool.result`,
//! against, in the same turns, the record serialized and written to an O_APPEND file with
//! no mask, no lock and no link (the floor of any JSONL log). Also the case where another
//! writer appended in between, so that the line before must be read back from the file
//! (as when `awf run`'s relay and the step's server share a file). Medians of `ROUNDS`
//! rounds of `RECORDS` records each, microseconds per record; the machine is shared.
//!
//! `cargo build --release -p awf --example audit_bench && target/release/examples/audit_bench [ROUNDS] [RECORDS]`

use awf::telemetry::audit::AuditLog;
use serde_json::{Value, json};
use std::io::Write;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn record(n: usize) -> Value {
    json!({
        "ts": "2026-12-06T16:36:49.477Z", "type": "tool.result", "tool": "Bash",
        "call_id": format!("57287d358a8952c7-{n}"), "session_id": "57287d358a8952c7",
        "run_id": "run-1", "step_id": "work", "outcome": "ok", "is_error": false,
        "duration_ms": 2.91, "output_bytes": 45, "cpu_ms": 1, "max_rss_bytes": 3_211_264,
        "jail_ahead": 1, "jail_us": 0, "spawn_us": 680, "run_us": 1530, "teardown_us": 100,
    })
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    let records: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("awf-audit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut chained, mut shared, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // The floor: serialize and append, nothing else.
        let path = dir.join(format!("floor-{round}.jsonl"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let t = Instant::now();
        for n in 0..records {
            let mut line = serde_json::to_vec(&record(n)).unwrap();
            line.push(b'\n');
            file.write_all(&line).unwrap();
        }
        floor.push(t.elapsed().as_secs_f64() * 1e6 / records as f64);

        // awf's log, the only writer: the link is the hash of its own last line.
        let path = dir.join(format!("chained-{round}.jsonl"));
        let log = AuditLog::open(&path).unwrap();
        let t = Instant::now();
        for n in 0..records {
            log.append(&record(n)).unwrap();
        }
        chained.push(t.elapsed().as_secs_f64() * 1e6 / records as f64);

        // Two logs of one file taking turns: each record's link read back from the file.
        let path = dir.join(format!("shared-{round}.jsonl"));
        let (a, b) = (
            AuditLog::open(&path).unwrap(),
            AuditLog::open(&path).unwrap(),
        );
        let t = Instant::now();
        for n in 0..records {
            if n % 2 == 0 { &a } else { &b }.append(&record(n)).unwrap();
        }
        shared.push(t.elapsed().as_secs_f64() * 1e6 / records as f64);
        let bytes = std::fs::read(&path).unwrap();
        assert!(awf::telemetry::audit_chain::verify(&bytes).intact());
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let f = median(&mut floor);
    let c = median(&mut chained);
    let s = median(&mut shared);
    println!("one tool.result record, median of {rounds} rounds of {records} (us per record)");
    println!("floor: serialize + O_APPEND write          {f:8.2}");
    println!(
        "awf: masked, linked, locked, one writer    {c:8.2}   +{:.2} over the floor",
        c - f
    );
    println!(
        "awf: two writers taking turns (read back)  {s:8.2}   +{:.2} over the floor",
        s - f
    );
}
