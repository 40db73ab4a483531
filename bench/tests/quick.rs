//! Proves the benchmark program works end to end: a quick run (few calls, one round)
//! against the hand-written floor server must print every figure, and a server that
//! fails must make the program fail with a message naming it. No timing is asserted.

use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcp-bench"))
}

const QUICK: [&str; 12] = [
    "--rounds",
    "1",
    "--calls",
    "50",
    "--flood",
    "200",
    "--spawns",
    "1",
    "--big-runs",
    "1",
    "--big-size",
    "70000",
];

#[test]
fn quick_run_against_the_floor_prints_every_figure() {
    let floor = env!("CARGO_BIN_EXE_floor_echo");
    let out = bench()
        .args(QUICK)
        .args(["--only", "floor", "--server", &format!("floor={floor}")])
        .output()
        .expect("run mcp-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp-bench failed:\n{stderr}\n{stdout}"
    );
    for label in [
        "spawn → initialize answer (ms)",
        "RSS after initialize (MiB)",
        "echo p50, pinned (µs)",
        "echo p99, pinned (µs)",
        "pipelined calls/s, unpinned (k)",
        "pipelined calls/s, pinned (k)",
        "peak RSS in flood, VmHWM (MiB)",
        "68 KiB echo (ms)",
        "peak RSS with big echo (MiB)",
        "exit after end of input (ms)",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
        let value = row[label.len()..].split_whitespace().next().unwrap_or("");
        let number: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("row {label:?} has no figure: {row:?}"));
        assert!(number > 0.0, "row {label:?}: {row:?}");
    }
}

#[test]
fn a_server_that_does_not_answer_fails_the_run_by_name() {
    let out = bench()
        .args(QUICK)
        .args(["--only", "mute", "--server", "mute=/bin/true"])
        .output()
        .expect("run mcp-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a mute server must fail the run");
    assert!(
        stderr.contains("server `mute`") && stderr.contains("output ended"),
        "the error should name the server and the problem: {stderr}"
    );
}

#[test]
fn a_server_that_answers_with_errors_fails_the_run() {
    // The floor knows no tool named `nope`: every call gets an error, not a result.
    let floor = env!("CARGO_BIN_EXE_floor_echo");
    let out = bench()
        .args(QUICK)
        .args([
            "--only",
            "floor",
            "--server",
            &format!("floor={floor}"),
            "--tool",
            "nope",
        ])
        .output()
        .expect("run mcp-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "calls answered with errors must fail the run"
    );
    assert!(
        stderr.contains("server `floor`") && stderr.contains("-32602"),
        "{stderr}"
    );
}

#[test]
fn the_memory_map_adds_up_to_the_server_s_resident_memory() {
    let floor = env!("CARGO_BIN_EXE_floor_echo");
    let out = bench()
        .args(QUICK)
        .args(["--only", "floor", "--server", &format!("floor={floor}")])
        .arg("--memory-map")
        .output()
        .expect("run mcp-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let table = stdout
        .split("Resident KiB by mapping")
        .nth(1)
        .unwrap_or_else(|| panic!("no memory map in:\n{stdout}"));
    let kib = |label: &str| -> f64 {
        let row = table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{table}"));
        row[label.len()..].trim().parse().unwrap()
    };
    // The server's own code is named as such, and the rows add up to the total.
    assert!(kib("(binary) r-xp") > 0.0, "{table}");
    let rows: f64 = table
        .lines()
        .skip(3)
        .filter(|l| !l.starts_with("total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let total = kib("total");
    assert!(
        total > 1000.0 && (rows - total).abs() < 0.5,
        "{rows} vs {total}:\n{table}"
    );
}

#[test]
fn concurrent_run_reports_memory_per_server_against_a_baseline() {
    let floor = env!("CARGO_BIN_EXE_floor_echo");
    let mcport = env!("CARGO_BIN_EXE_mcport_echo");
    let out = bench()
        .args([
            "--concurrent",
            "4",
            "--rounds",
            "2",
            "--only",
            "floor,mcport",
        ])
        .args(["--server", &format!("floor={floor}")])
        .args(["--server", &format!("mcport={mcport}")])
        .args(["--ours", "floor"])
        .output()
        .expect("run mcp-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp-bench failed:\n{stderr}\n{stdout}"
    );
    assert!(
        stdout.contains("with 4 of each alive") && stdout.contains("floor/mcport"),
        "{stdout}"
    );
    // Per row: floor's figure, mcport's, and the ratio of the two.
    let row = |label: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
        let cells: Vec<f64> = line[label.len()..]
            .split_whitespace()
            .map(|c| c.parse().unwrap_or_else(|_| panic!("{label:?}: {line:?}")))
            .collect();
        assert_eq!(cells.len(), 3, "{line:?}");
        assert!(cells.iter().all(|c| *c > 0.0), "{line:?}");
        cells
    };
    let pss = row("PSS per server");
    let anon = row("anon PSS per server");
    let private = row("Private per server");
    for server in 0..2 {
        assert!(anon[server] <= pss[server], "{stdout}");
        assert!(anon[server] <= private[server], "{stdout}");
    }
}

#[test]
fn a_concurrent_run_with_a_server_that_does_not_answer_fails_by_name() {
    let out = bench()
        .args(["--concurrent", "3", "--rounds", "1"])
        .args(["--only", "mute", "--server", "mute=/bin/true"])
        .output()
        .expect("run mcp-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a mute server must fail the run");
    assert!(
        stderr.contains("server `mute`") && stderr.contains("output ended"),
        "{stderr}"
    );
}
