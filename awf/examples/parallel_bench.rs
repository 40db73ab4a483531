//! What many proxied agent steps at once cost: one `for_each` of N iterations (default
//! 200) with `max_concurrent: N`, each a proxied agent step that makes one tool call and
//! holds the step for HOLD ms (default 2000), run by `awf run`:
//!
//! - `cli`: the CLI is a minimal stand-in (this program, re-run as the `claude` provider's
//!   `options.command`) that starts `awf mcp-serve` from the config it is given, calls Read
//!   once, holds, and ends;
//! - `openai_compatible`: the in-process loop against a model server in this program that
//!   asks for one Read, then answers after HOLD ms;
//! - `claude`: the real Claude Code CLI (from `AWF_TOOLS_DIR`, default `.tools`) against
//!   the tests' fake model, one Read each, at most 20 at once (N capped at 20): the CLI's
//!   own cost apart from awf's.
//!
//! Each case runs twice: timed alone (the wall time, against the HOLD floor), then with the
//! sampler reading every process's memory ten times a second (its wall time is printed
//! too: on 2 cores the sampler slows what it measures). Printed per case: peak PSS of
//! awf's processes (awf run and every `awf mcp-serve`) over the peak number of steps at
//! once, the stand-ins' PSS apart, peak open descriptors of `awf run`, and the processes
//! left after both runs (0).
//!
//! `cargo build --release -p awf --bin awf --example parallel_bench &&
//! target/release/examples/parallel_bench [N] [HOLD_MS]`

#[path = "../tests/fake_model/mod.rs"]
mod fake_model;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STAND_IN: &str = "AWF_BENCH_STAND_IN_HOLD_MS";

fn main() {
    if let Ok(hold) = std::env::var(STAND_IN) {
        stand_in(hold.parse().unwrap_or(2000));
        return;
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let hold: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let exe = std::env::current_exe().unwrap();
    let awf = exe.parent().unwrap().parent().unwrap().join("awf");
    // Beside the executable: awf's state and audit directories may not lie under /tmp.
    let base = exe
        .parent()
        .unwrap()
        .join(format!("awf-parallel-bench-{}", std::process::id()));
    println!("{n} proxied agent steps at once, each holding {hold} ms");
    println!(
        "{:<18} {:>7} {:>7} {:>8} {:>6} {:>15} {:>10} {:>10} {:>10} {:>5} {:>5}",
        "case",
        "wall s",
        "× floor",
        "sampled",
        "steps",
        "awf run MiB",
        "serve/step",
        "awf/step",
        "stand-in",
        "fds",
        "left"
    );
    println!(
        "{:<18} {:>7} {:>7} {:>8} {:>6} {:>15} {:>10} {:>10} {:>10} {:>5} {:>5}",
        "",
        "",
        "",
        "wall s",
        "at once",
        "PSS min→peak",
        "PSS KiB",
        "PSS KiB",
        "KiB/step",
        "peak",
        ""
    );
    let model = model_server(hold);
    let tools = std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let claude = tools.join("agents/node_modules/.bin/claude");
    let fake = fake_model::FakeModel::start(
        fake_model::Script::new().call("Read", json!({"path": "input.txt"})),
    );
    let mut cases = vec!["cli", "openai_compatible"];
    if claude.exists() {
        cases.push("claude");
    } else {
        println!(
            "(no claude CLI at {}: that case is skipped)",
            claude.display()
        );
    }
    for case in cases {
        let n = if case == "claude" { n.min(20) } else { n };
        let dir = base.join(case);
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("input.txt"), "input\n").unwrap();
        let body = match case {
            "claude" => format!(
                "    type: agent\n    provider: claude\n    prompt: Read input.txt\n    options: {{command: \"{}\", base_url: \"{}\", model: claude-sonnet-4-5, api_key_env: AWF_BENCH_KEY}}\n",
                claude.display(),
                fake.base_url()
            ),
            "cli" => format!(
                "    type: agent\n    provider: claude\n    prompt: Read input.txt\n    options: {{command: \"{}\"}}\n",
                exe.display()
            ),
            _ => format!(
                "    type: agent\n    provider: openai_compatible\n    prompt: Read input.txt\n    options: {{base_url: \"http://127.0.0.1:{model}/v1\", model: m}}\n"
            ),
        };
        let items: Vec<usize> = (0..n).collect();
        let wf = dir.join("wf.yaml");
        std::fs::write(
            &wf,
            format!(
                "name: bench\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: {}\n    max_iterations: {n}\n    max_concurrent: {n}\n    body: [work]\n    on_complete: done\n  work:\n{body}    mcp_proxy: {{enable: true}}\n    on_success: done\n  done:\n    type: terminal\n",
                json!(items)
            ),
        )
        .unwrap();
        // Timed alone: the sampler below reads every process's smaps_rollup ten times a
        // second, which on 2 cores would slow the run it measures.
        let timed = run_case(&awf, case, &wf, &dir, &work, hold, None);
        let left = leftovers(&dir);
        let mut m = Sampled::default();
        let sampled = run_case(&awf, case, &wf, &dir, &work, hold, Some((&mut m, &exe)));
        let wall = timed.wall;
        let ok = timed.ok && sampled.ok;
        let left = left + leftovers(&dir);
        let Sampled {
            peak_awf,
            peak_serve,
            peak_stand,
            peak_steps,
            peak_fds,
            run_min,
            run_peak,
        } = m;
        let per = |kib: u64| {
            if peak_steps > 0 {
                kib as f64 / peak_steps as f64
            } else {
                0.0
            }
        };
        println!(
            "{:<18} {:>7.2} {:>7.2} {:>8.2} {:>6} {:>15} {:>10.0} {:>10.0} {:>10.0} {:>5} {:>5}{}",
            case,
            wall,
            wall / (hold as f64 / 1000.0),
            sampled.wall,
            peak_steps,
            format!(
                "{:.1}→{:.1}",
                run_min as f64 / 1024.0,
                run_peak as f64 / 1024.0
            ),
            per(peak_serve),
            // awf's own cost of a step at once: the servers, and what awf run grew by.
            per(peak_awf.saturating_sub(run_min)),
            per(peak_stand),
            peak_fds,
            left,
            if ok { "" } else { "  (the run failed)" }
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Peaks seen by the sampler over one run.
#[derive(Default)]
struct Sampled {
    peak_awf: u64,
    peak_serve: u64,
    peak_stand: u64,
    peak_steps: usize,
    peak_fds: usize,
    run_min: u64,
    run_peak: u64,
}

struct Outcome {
    wall: f64,
    ok: bool,
}

/// One `awf run` of the case's workflow; with `sample`, its process tree is sampled every
/// 100 ms (`exe`: the stand-in's executable, told apart from awf's).
fn run_case(
    awf: &Path,
    case: &str,
    wf: &Path,
    dir: &Path,
    work: &Path,
    hold: u64,
    sample: Option<(&mut Sampled, &PathBuf)>,
) -> Outcome {
    let _ = std::fs::remove_dir_all(dir.join("audit"));
    let _ = std::fs::remove_dir_all(dir.join("state"));
    let t = Instant::now();
    let mut child = Command::new(awf)
        .arg("run")
        .arg(wf)
        .args(["--output", "json", "--audit-dir"])
        .arg(dir.join("audit"))
        .current_dir(work)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env(STAND_IN, hold.to_string())
        .env("AWF_BENCH_KEY", "bench-key")
        .env("AWF_LOG", "warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let root = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let Some((m, exe)) = sample else {
        let _ = child.wait();
        let wall = t.elapsed().as_secs_f64();
        let summary: Value = serde_json::from_str(&reader.join().unwrap()).unwrap_or(Value::Null);
        return Outcome {
            wall,
            ok: summary["status"] == "success",
        };
    };
    m.run_min = u64::MAX;
    while child.try_wait().unwrap().is_none() {
        let tree = tree_of(root);
        let (mut serve_pss, mut stand_pss, mut steps) = (0u64, 0u64, 0usize);
        let run_pss = pss_kib(root);
        for pid in &tree {
            let exe_of = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if exe_of == awf && *pid != root && cmdline(*pid).contains("mcp-serve") {
                serve_pss += pss_kib(*pid);
                steps += 1;
            } else if exe_of == *exe || (case == "claude" && exe_of != awf) {
                // The stand-in, or the real CLI (node) and whatever it runs.
                stand_pss += pss_kib(*pid);
            }
        }
        if case == "openai_compatible" {
            // Tools in-process: a step at once is a conversation the model holds.
            steps = model_holding();
        }
        if run_pss > 0 {
            m.run_min = m.run_min.min(run_pss);
            m.run_peak = m.run_peak.max(run_pss);
        }
        if steps >= m.peak_steps {
            m.peak_steps = steps;
            m.peak_awf = m.peak_awf.max(run_pss + serve_pss);
            m.peak_serve = m.peak_serve.max(serve_pss);
            m.peak_stand = m.peak_stand.max(stand_pss);
        }
        let fds = std::fs::read_dir(format!("/proc/{root}/fd")).map_or(0, |d| d.count());
        m.peak_fds = m.peak_fds.max(fds);
        std::thread::sleep(Duration::from_millis(100));
    }
    let wall = t.elapsed().as_secs_f64();
    let summary: Value = serde_json::from_str(&reader.join().unwrap()).unwrap_or(Value::Null);
    Outcome {
        wall,
        ok: summary["status"] == "success",
    }
}

/// `pid` and its descendants.
fn tree_of(root: i32) -> Vec<i32> {
    let mut parent = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid: i32 = stat[close + 2..]
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        parent.insert(pid, ppid);
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

fn pss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Processes still naming the case's directory (its run's configs live there).
fn leftovers(dir: &Path) -> usize {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| *pid != std::process::id() as i32 && cmdline(*pid).contains(&needle))
        .count()
}

/// The stand-in CLI: the server from `--mcp-config=FILE`, one Read, the hold, the end.
fn stand_in(hold: u64) {
    let cfg = std::env::args()
        .find_map(|a| a.strip_prefix("--mcp-config=").map(PathBuf::from))
        .expect("--mcp-config=FILE");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(cfg).unwrap()).unwrap();
    let server = &v["mcpServers"]["awf"];
    let mut cmd = Command::new(server["command"].as_str().unwrap());
    for a in server["args"].as_array().unwrap() {
        cmd.arg(a.as_str().unwrap());
    }
    for (k, val) in server["env"].as_object().into_iter().flatten() {
        cmd.env(k, val.as_str().unwrap_or(""));
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut ask = |msg: Value, answer: bool| {
        writeln!(stdin, "{msg}").unwrap();
        if answer {
            line.clear();
            out.read_line(&mut line).unwrap();
        }
    };
    ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "stand-in", "version": "0"}}}),
        true,
    );
    ask(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    );
    ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Read", "arguments": {"path": "input.txt"}}}),
        true,
    );
    std::thread::sleep(Duration::from_millis(hold));
    drop(stdin);
    let _ = child.wait();
    println!(
        "{}",
        json!({"type": "result", "subtype": "success", "is_error": false, "result": "ok"})
    );
}

static HOLDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn model_holding() -> usize {
    HOLDING.load(std::sync::atomic::Ordering::SeqCst)
}

/// A Chat Completions model: asks for one Read, then, once the tool's answer is there,
/// holds for `hold` ms and answers.
fn model_server(hold: u64) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn, hold));
        }
    });
    port
}

fn answer(mut conn: TcpStream, hold: u64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        if h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answered = req["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|x| x["role"] == "tool"));
    let message = if answered {
        HOLDING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(hold));
        HOLDING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        json!({"role": "assistant", "content": "ok"})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\": \"input.txt\"}"}}]})
    };
    let text = json!({"id": "r", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": if answered {"stop"} else {"tool_calls"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}
