//! The cost of run state per state: what the engine writes at one transition pair (the
//! state's start and its end: two entries appended to the journal, each fsynced, and now
//! and then a compaction into `state.json`) in a run that has already recorded `PRIOR`
//! states, against, in the same turns, the snapshot written twice without any fsync (what
//! a whole rewrite without durability would cost) — medians, since the machine is shared.
//!
//! It writes where awf does (`$XDG_STATE_HOME/awf/runs-state`, by default under
//! `~/.local/state`), in a directory of its own that it removes.
//!
//! Then `awf history` over `RUNS` runs (default 10,000, each made by the real recorder:
//! started, one state, ended), the whole process timed, against `awf --version` (the
//! process's own start) in the same turns.
//!
//! Then the cost curve of a for_each: `awf run` of a for_each over N items (body `true`,
//! `max_concurrent: 32`), the whole process timed, per item, for each N of `SIZES`
//! (default 100,1000,10000), and the bytes of the run's state directory at its end;
//! and the recorder alone (N units recorded in batches of 32, as the engine does when 32
//! end at once), per item.
//!
//! `cargo build --release -p awf --bin awf --example state_bench && target/release/examples/state_bench [ROUNDS] [PRIOR] [RUNS] [SIZES]`

use awf::run::StateResult;
use awf::run::state::{self, Lease, Recorder, RunState, RunStatus};
use std::collections::HashMap;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let prior: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let home = std::env::var_os("HOME").expect("HOME");
    let base = std::path::Path::new(&home)
        .join(".local/state")
        .join(format!("awf-state-bench-{}", std::process::id()));
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("XDG_STATE_HOME", &base) };
    let begin = RunState {
        version: state::VERSION,
        run_id: "bench".into(),
        workflow: "bench".into(),
        workflow_path: "/bench.yaml".into(),
        workflow_sha256: state::workflow_hash(b"bench"),
        workdir: "/".into(),
        inputs: Default::default(),
        status: RunStatus::Running,
        exit_code: None,
        error: None,
        started_ms: state::now_ms(),
        updated_ms: 0,
        ended_ms: None,
        lease: Lease::mine(),
        resumes: 0,
        next: None,
        states: Vec::new(),
        units: Default::default(),
        shard: None,
        journal: 0,
    };
    let template = begin.clone();
    let rec = Recorder::create(begin, &HashMap::new()).expect("run state");
    let output = "x".repeat(200);
    let result = |name: &str| StateResult {
        output: output.clone(),
        exit_code: Some(0),
        ..StateResult::new(name, "step")
    };
    for i in 0..prior {
        let name = format!("s{i}");
        rec.started(&name, "step", i + 1);
        rec.ended(&result(&name), Some("next"));
    }
    let file = state::runs_dir().join("bench").join("state.json");
    let bytes = std::fs::read(&file).unwrap();
    let plain = file.with_file_name("plain.json");
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let name = format!("r{}", i % 4);
        let t = Instant::now();
        rec.started(&name, "step", prior + i + 1);
        rec.ended(&result(&name), Some("next"));
        with.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        std::fs::write(&plain, &bytes).unwrap();
        std::fs::write(&plain, &bytes).unwrap();
        without.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(file.with_file_name("journal.jsonl"))
            .map(|m| m.len())
            .unwrap_or(0);
    let (w, wo) = (median(&mut with), median(&mut without));
    println!(
        "run state per state (start + end), {rounds} rounds in turns, snapshot and journal of {} KiB:",
        size / 1024
    );
    println!("  run state (2 journal appends, fsyncs) {w:>7.3} ms");
    println!("  the snapshot written twice, no fsync {wo:>7.3} ms");
    println!(
        "  difference                           {:>8.3} ms ({:.1}x)",
        w - wo,
        w / wo
    );
    drop(rec);

    let runs: usize = std::env::args()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let awf = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("awf");
    let t = Instant::now();
    for i in 0..runs {
        let rec = Recorder::create(
            RunState {
                run_id: format!("h{i:08}"),
                workflow: format!("wf{}", i % 7),
                started_ms: state::now_ms(),
                ..template.clone()
            },
            &HashMap::new(),
        )
        .expect("run state");
        rec.started("s", "step", 1);
        rec.ended(&result("s"), None);
        rec.finished(0, None);
    }
    println!(
        "made {runs} runs in {:.1} s ({:.2} ms a run: create, one state, end)",
        t.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64() * 1e3 / runs as f64
    );
    let time = |args: &[&str]| {
        let t = Instant::now();
        let out = std::process::Command::new(&awf)
            .args(args)
            .env("XDG_STATE_HOME", &base)
            .output()
            .expect("awf");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        t.elapsed().as_secs_f64() * 1e3
    };
    let (mut h, mut v) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        h.push(time(&["history"]));
        v.push(time(&["--version"]));
    }
    let (h, v) = (median(&mut h), median(&mut v));
    println!("awf history over {runs} runs (whole process)  {h:>8.2} ms");
    println!("awf --version (the process's start)          {v:>8.2} ms");
    println!(
        "history itself                                {:>8.2} ms",
        h - v
    );

    let sizes: Vec<usize> = std::env::args()
        .nth(4)
        .unwrap_or_else(|| "100,1000,10000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!("for_each over N items, body `true`, 32 at once (awf run, whole process):");
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    for &n in &sizes {
        let items: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        let wf = work.join(format!("each{n}.yaml"));
        std::fs::write(
            &wf,
            format!(
                "name: each{n}\nstates:\n  initial: all\n  all:\n    type: for_each\n    \
                 items: [{}]\n    max_iterations: {n}\n    max_concurrent: 32\n    \
                 body: [work]\n    on_complete: done\n  work:\n    type: step\n    \
                 command: \"true\"\n  done:\n    type: terminal\n",
                items.join(", ")
            ),
        )
        .unwrap();
        let t = Instant::now();
        let out = std::process::Command::new(&awf)
            .args(["run", wf.to_str().unwrap(), "--output", "json"])
            .current_dir(&work)
            .env("XDG_STATE_HOME", &base)
            .output()
            .expect("awf");
        let took = t.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let id = err
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("awf: run "))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_default()
            .to_string();
        let dir = state::runs_dir().join(&id);
        let bytes: u64 = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        println!(
            "  {n:>6} items  {took:>8.2} s  {:>6.3} ms an item  (run state at the end: {} KiB)",
            took * 1e3 / n as f64,
            bytes / 1024
        );
    }
    println!("the recorder alone, N units recorded in batches of 32:");
    for &n in &sizes {
        let rec = Recorder::create(
            RunState {
                run_id: format!("curve{n}"),
                started_ms: state::now_ms(),
                ..template.clone()
            },
            &HashMap::new(),
        )
        .expect("run state");
        rec.started("all", "for_each", 1);
        let t = Instant::now();
        let mut i = 0;
        while i < n {
            let batch: Vec<(usize, Vec<StateResult>)> = (i..(i + 32).min(n))
                .map(|k| {
                    (
                        k,
                        vec![StateResult {
                            iteration: Some(k),
                            ..result("work")
                        }],
                    )
                })
                .collect();
            rec.units_succeeded("all", &batch);
            i += 32;
        }
        let took = t.elapsed().as_secs_f64();
        println!(
            "  {n:>6} units  {:>8.3} s  {:>6.3} ms a unit",
            took,
            took * 1e3 / n as f64
        );
        rec.finished(0, None);
    }
    let _ = std::fs::remove_dir_all(&base);
}
