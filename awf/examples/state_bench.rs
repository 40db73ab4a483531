//! The cost of run state per state: what the engine writes at one transition pair (the
//! state's start and its end: two whole `state.json` writes, each a temp file, fsync,
//! rename and fsync of the directory) in a run that has already recorded `PRIOR` states,
//! against, in the same turns, the same bytes written twice without any fsync (what the
//! durability costs) — medians, since the machine is shared.
//!
//! It writes where awf does (`$XDG_STATE_HOME/awf/runs-state`, by default under
//! `~/.local/state`), in a directory of its own that it removes.
//!
//! Then `awf history` over `RUNS` runs (default 10,000, each made by the real recorder:
//! started, one state, ended), the whole process timed, against `awf --version` (the
//! process's own start) in the same turns.
//!
//! `cargo build --release -p awf --bin awf --example state_bench && target/release/examples/state_bench [ROUNDS] [PRIOR] [RUNS]`

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
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let (w, wo) = (median(&mut with), median(&mut without));
    println!(
        "run state per state (start + end), {rounds} rounds in turns, state.json of {} KiB:",
        size / 1024
    );
    println!("  run state (2 atomic writes, fsyncs)  {w:>8.3} ms");
    println!("  the same bytes written, no fsync     {wo:>8.3} ms");
    println!(
        "  durability costs                     {:>8.3} ms ({:.1}x)",
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
    let _ = std::fs::remove_dir_all(&base);
}
