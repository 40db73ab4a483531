//! `awf mcp-serve` against the library's echo example, in the same run: spawn →
//! initialize answer, RSS right after initialize, and sequential call latency (Read of a
//! small file for awf, echo for the example). The bench and its servers are pinned to one
//! CPU (on a 2-core machine, where the kernel puts two processes otherwise dominates a
//! round trip). Prints medians and the ratios.
//!
//! `cargo build --release -p awf --bin awf --example serve_bench && cargo build --release -p
//! mcpserver --example echo && target/release/examples/serve_bench [SPAWNS] [CALLS]`

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let spawns: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let calls: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    pin_to_cpu(0);
    let examples = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let awf = examples.parent().unwrap().join("awf");
    let echo = examples.join("echo");
    let root = std::env::temp_dir().join(format!("awf-serve-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "hello\nworld\n").unwrap();

    let awf_cmd = vec![
        awf.display().to_string(),
        "mcp-serve".into(),
        "--root".into(),
        root.display().to_string(),
    ];
    let echo_cmd = vec![echo.display().to_string()];
    let awf_call = json!({"name": "Read", "arguments": {"path": "small.txt"}});
    let echo_call = json!({"name": "echo", "arguments": {"text": "hello\nworld\n"}});
    for (cmd, _) in [(&awf_cmd, ()), (&echo_cmd, ())] {
        if !Path::new(&cmd[0]).exists() {
            eprintln!("missing {}: build it first (see the doc comment)", cmd[0]);
            std::process::exit(2);
        }
    }

    // Alternate the servers so that machine noise hurts both alike.
    let (mut a_start, mut e_start, mut a_rss, mut e_rss) = (vec![], vec![], vec![], vec![]);
    for _ in 0..spawns {
        let (t, r) = spawn_once(&awf_cmd);
        a_start.push(t);
        a_rss.push(r);
        let (t, r) = spawn_once(&echo_cmd);
        e_start.push(t);
        e_rss.push(r);
    }
    let [a_lat, e_lat] = latencies([(&awf_cmd, &awf_call), (&echo_cmd, &echo_call)], calls);
    let _ = std::fs::remove_dir_all(&root);

    println!(
        "{:<34} {:>10} {:>10} {:>7}",
        "(medians; pinned to CPU 0)", "awf", "echo", "ratio"
    );
    let row =
        |name: &str, a: f64, e: f64| println!("{name:<34} {a:>10.2} {e:>10.2} {:>6.2}x", a / e);
    row(
        "spawn -> initialize answer (ms)",
        ms(median_d(a_start)),
        ms(median_d(e_start)),
    );
    row(
        "RSS after initialize (MiB)",
        median_f(a_rss),
        median_f(e_rss),
    );
    row(
        "call p50, Read vs echo (us)",
        us(percentile(&a_lat, 50)),
        us(percentile(&e_lat, 50)),
    );
    row(
        "call p99, Read vs echo (us)",
        us(percentile(&a_lat, 99)),
        us(percentile(&e_lat, 99)),
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
fn median_d(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: i64,
}

impl Session {
    fn start(cmd: &[String]) -> Session {
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .env("AWF_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Session {
            child,
            stdin,
            stdout,
            id: 0,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> String {
        self.id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer
    }

    fn initialize(&mut self) {
        self.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
    }

    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn spawn_once(cmd: &[String]) -> (Duration, f64) {
    let t = Instant::now();
    let mut s = Session::start(cmd);
    s.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
    let elapsed = t.elapsed();
    let rss = s.rss_mib();
    s.finish();
    (elapsed, rss)
}

/// Sorted round-trip times of `calls` sequential calls (after a warm-up of a tenth).
/// Sequential call latency of each server, interleaved: both run at once and take turns
/// by blocks of calls (each block after a few untimed ones, as the other server's turn
/// left the caches cold), so machine noise hurts both alike.
fn latencies<const N: usize>(
    servers: [(&[String], &Value); N],
    calls: usize,
) -> [Vec<Duration>; N] {
    const BLOCK: usize = 500;
    const REWARM: usize = 50;
    let mut sessions = servers.map(|(cmd, call)| {
        let mut s = Session::start(cmd);
        s.initialize();
        for _ in 0..calls / 10 {
            s.request("tools/call", call.clone());
        }
        (s, call, Vec::with_capacity(calls))
    });
    let mut done = 0;
    while done < calls {
        let n = BLOCK.min(calls - done);
        for (s, call, v) in sessions.iter_mut() {
            for _ in 0..REWARM {
                s.request("tools/call", (*call).clone());
            }
            for _ in 0..n {
                let t = Instant::now();
                let answer = s.request("tools/call", (*call).clone());
                v.push(t.elapsed());
                assert!(
                    answer.contains("hello") && !answer.contains("\"isError\":true"),
                    "{answer}"
                );
            }
        }
        done += n;
    }
    sessions.map(|(s, _, mut v)| {
        s.finish();
        v.sort();
        v
    })
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("warning: could not pin to CPU {cpu}; figures will be noisier");
        }
    }
}
