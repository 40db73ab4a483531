//! Grep and Glob through `awf mcp-serve` (a real MCP round trip) against `rg` and `fd` on
//! the same search over a generated tree of source-like files; prints medians and ratios.
//!
//! `cargo build --release -p awf --examples && target/release/examples/search_bench [MiB] [DIR]`
//! (default 200 MiB under the system temp dir; the tree is kept and reused). Needs `rg`
//! and `fd` (Debian: ripgrep, fd-find) on PATH; a missing one is reported and skipped.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNS: usize = 7;

fn main() {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = std::env::args()
        .nth(2)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("awf-search-bench-{mib}mib")));
    let files = generate(&dir, mib);
    println!("tree: {} ({files} files, {mib} MiB)", dir.display());
    let awf = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("awf");
    let mut server = Server::start(&awf, &dir);

    let searches: Vec<(&str, Value, Vec<&str>, &str)> = vec![
        (
            "Grep files_with_matches",
            json!({"name": "Grep", "arguments": {"pattern": "fn handle_[a-z]+_77\\b", "output_mode": "files_with_matches"}}),
            vec!["rg", "-l", "fn handle_[a-z]+_77\\b", "."],
            "rg -l",
        ),
        (
            "Grep content",
            json!({"name": "Grep", "arguments": {"pattern": "struct Widget9[0-9]{2}\\b", "output_mode": "content"}}),
            vec!["rg", "-n", "struct Widget9[0-9]{2}\\b", "."],
            "rg -n",
        ),
        (
            "Grep count, case-insensitive, glob",
            json!({"name": "Grep", "arguments": {"pattern": "todo", "output_mode": "count", "case_insensitive": true, "glob": "*.rs"}}),
            vec!["rg", "-c", "-i", "-g", "*.rs", "todo", "."],
            "rg -c -i -g",
        ),
        (
            "Glob **/mod_7*.rs",
            json!({"name": "Glob", "arguments": {"pattern": "**/mod_7*.rs"}}),
            vec!["fdfind", "-g", "mod_7*.rs", "."],
            "fd -g",
        ),
    ];
    println!(
        "{:<38} {:>10} {:>10} {:>8}  baseline",
        "search (median of 7, ms)", "awf", "baseline", "ratio"
    );
    for (name, call, cmd, label) in searches {
        let ours = median((0..RUNS).map(|_| server.time_call(&call)).collect());
        let theirs = match time_command(&cmd, &dir) {
            Some(t) => t,
            None => {
                println!(
                    "{name:<38} {:>10.1} {:>10} {:>8}  {label} (not installed)",
                    ms(ours),
                    "-",
                    "-"
                );
                continue;
            }
        };
        println!(
            "{name:<38} {:>10.1} {:>10.1} {:>7.2}x  {label}",
            ms(ours),
            ms(theirs),
            ours.as_secs_f64() / theirs.as_secs_f64()
        );
    }
    drop(server);
    cancel_latency(&awf, &dir);
}

/// How soon a cancelled Grep stops: a slow search over the tree, cancelled after 50 ms;
/// the time from the cancel to the server's log line of the cancelled call (a cancelled
/// call gets no answer), median of RUNS, beside the search's own time uncancelled.
fn cancel_latency(awf: &Path, dir: &Path) {
    let args = json!({"pattern": "(?i)\\w+ing\\s+\\w+\\s+xyz"});
    let mut server = Server::start(awf, dir);
    let full = median(
        (0..RUNS)
            .map(|_| server.time_call(&json!({"name": "Grep", "arguments": args})))
            .collect(),
    );
    drop(server);
    let mut child = Command::new(awf)
        .args(["mcp-serve", "--root"])
        .arg(dir)
        .env("AWF_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})).unwrap();
    let mut latencies = Vec::new();
    for id in 1..=RUNS as i64 {
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "Grep", "arguments": args}})).unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}})).unwrap();
        stdin.flush().unwrap();
        let cancelled = Instant::now();
        let mut line = String::new();
        loop {
            line.clear();
            if log.read_line(&mut line).unwrap() == 0 {
                panic!("the server ended before the cancelled call was logged");
            }
            if line.contains("outcome=\"cancelled\"") {
                break;
            }
        }
        latencies.push(cancelled.elapsed());
    }
    drop(stdin);
    let _ = child.wait();
    let stop = median(latencies);
    println!(
        "{:<38} {:>10.1} {:>10.1} {:>7.2}x  the same search uncancelled",
        "Grep cancelled at 50 ms: stop after",
        ms(stop),
        ms(full),
        ms(stop) / ms(full)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_command(cmd: &[&str], dir: &Path) -> Option<Duration> {
    // Output into a pipe that is drained, as awf's answer is read: ripgrep writing to
    // /dev/null stops at the first match (it has nobody to tell the rest).
    let run = || {
        let t = Instant::now();
        let out = Command::new(cmd[0])
            .args(&cmd[1..])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .output()
            .ok()?;
        let _ = out;
        Some(t.elapsed())
    };
    run()?; // warm-up (and existence check)
    Some(median((0..RUNS).filter_map(|_| run()).collect()))
}

struct Server {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    id: i64,
}

impl Server {
    fn start(awf: &Path, root: &Path) -> Server {
        let mut child = Command::new(awf)
            .args(["mcp-serve", "--root"])
            .arg(root)
            .env("AWF_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e} (build it with --release)",
                    awf.display()
                )
            });
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server {
            child,
            stdin,
            stdout,
            id: 0,
        };
        s.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        writeln!(
            s.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        s
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        )
        .unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    fn time_call(&mut self, params: &Value) -> Duration {
        let t = Instant::now();
        let a = self.request("tools/call", params.clone());
        let elapsed = t.elapsed();
        assert!(a["result"]["isError"] != true, "{a}");
        elapsed
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `mib` MiB of Rust-like files in nested directories (deterministic), unless the
/// tree is already there. Returns the number of files.
fn generate(dir: &Path, mib: u64) -> usize {
    const FILE_BYTES: u64 = 10 * 1024;
    let files = (mib * 1024 * 1024 / FILE_BYTES) as usize;
    let marker = dir.join(".complete");
    if marker.exists() {
        return files;
    }
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let words = [
        "handle", "parse", "render", "load", "store", "check", "build", "merge", "split", "emit",
    ];
    for i in 0..files {
        let sub = dir.join(format!("pkg_{:02}/mod_{:02}", i % 50, (i / 50) % 40));
        std::fs::create_dir_all(&sub).unwrap();
        let ext = if i % 5 == 0 { "go" } else { "rs" };
        let mut text = String::with_capacity(FILE_BYTES as usize + 200);
        while (text.len() as u64) < FILE_BYTES {
            let r = next();
            let w = words[(r % 10) as usize];
            match r % 7 {
                0 => text.push_str(&format!(
                    "pub fn {w}_{}_{}(input: &str) -> Result<(), Error> {{\n",
                    w,
                    (r >> 8) % 100
                )),
                1 => text.push_str(&format!(
                    "    let value_{} = {w}(input)?; // TODO check\n",
                    (r >> 8) % 1000
                )),
                2 => text.push_str(&format!(
                    "struct Widget{} {{ field: u64 }}\n",
                    (r >> 8) % 1000
                )),
                3 => text.push_str("    }\n}\n"),
                _ => text.push_str(&format!(
                    "    // {w} the {} items before returning\n",
                    (r >> 8) % 10_000
                )),
            }
        }
        std::fs::write(sub.join(format!("mod_{i}.{ext}")), text).unwrap();
    }
    std::fs::write(&marker, "").unwrap();
    files
}
