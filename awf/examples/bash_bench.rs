//! The cost of Bash's jail per call: `Bash {"command": "true"}` through `awf mcp-serve`
//! under each confinement, against the floor of spawning `bash -c true` directly from this
//! program, all in the same run, taking turns call by call (the machine is shared and
//! noisy: medians, and each figure next to the others). With a second awf executable (one
//! built from an earlier commit) its default policy is measured in the same turns: before
//! and after.
//!
//! Policies: `default` (writes and reads confined by Landlock, read-only mounts, secret
//! covers, a PID namespace with its own /proc and pid_max, signal scope, a network
//! namespace with loopback only), `read: host` (the same but reads), `landlock: false`
//! (namespaces and covers only), `network: allow` (the default without its network
//! namespace), `network: host list` (the default plus the listener handed to the egress
//! proxy), `unix_sockets: granted` (the default with its connect() calls handed to the
//! supervisor, which `true` never makes: the cost of the filter and the supervisor alone).
//! The default's seccomp filter (no unix socket of its own) is measured against the
//! earlier build's default.
//!
//! Beside them, where `bwrap` is installed (`apt-get install bubblewrap`), bubblewrap
//! started as Claude Code's and Codex's sandboxes start it (`--unshare-all
//! --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp
//! --bind WS WS bash -c true`), in the same turns.
//!
//! Then the calls an agent makes between model turns: each after a pause (`IDLE_CALLS` of
//! them, 0.5 s apart, default 60, 0 to skip), awf's default beside bubblewrap and the floor,
//! each in its own pause, taking turns. Last, where the default's time goes, back to back
//! and after a pause: the stages Bash records in its `tool.result` audit records (the jail
//! made, fork to exec, the command, the jail taken down) and the rest of the round trip
//! (the request read, the call's telemetry, the answer written and read), medians.
//!
//! `cargo build --release -p awf --bin awf --example bash_bench &&
//! target/release/examples/bash_bench [CALLS] [OTHER_AWF|-] [IDLE_CALLS]`

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let other = std::env::args()
        .nth(2)
        .filter(|a| a != "-")
        .map(PathBuf::from);
    let idle_calls: usize = std::env::args()
        .nth(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or(60);
    let exe = std::env::current_exe().unwrap();
    let awf = exe.parent().unwrap().parent().unwrap().join("awf");
    if !awf.exists() {
        eprintln!(
            "missing {}: build it first (see the doc comment)",
            awf.display()
        );
        std::process::exit(2);
    }
    let base = std::env::temp_dir().join(format!("awf-bash-bench-{}", std::process::id()));
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let config = |name: &str, extra: Value| -> PathBuf {
        let mut c = json!({"root": root});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let p = base.join(format!("{name}.json"));
        std::fs::write(&p, c.to_string()).unwrap();
        p
    };
    let audit = base.join("default-audit.jsonl");
    let mut servers: Vec<(String, Session)> = vec![
        (
            "default".into(),
            Session::start(&awf, &config("default", json!({"audit_path": audit}))),
        ),
        (
            "read: host".into(),
            Session::start(&awf, &config("host", json!({"read": "host"}))),
        ),
        (
            "landlock: false".into(),
            Session::start(&awf, &config("off", json!({"landlock": false}))),
        ),
        (
            "network: allow".into(),
            Session::start(&awf, &config("allow", json!({"network": "allow"}))),
        ),
        (
            "network: host list".into(),
            Session::start(
                &awf,
                &config("hosts", json!({"network": {"allow": ["crates.io"]}})),
            ),
        ),
        (
            "unix_sockets: granted".into(),
            Session::start(
                &awf,
                &config("unix", json!({"unix_sockets": [base.join("granted.sock")]})),
            ),
        ),
    ];
    if let Some(other) = &other {
        // An earlier build may not know the new keys: only the root.
        servers.push((
            format!("default, {}", other.display()),
            Session::start(other, &config("other", json!({}))),
        ));
    }
    let call = json!({"name": "Bash", "arguments": {"command": "true"}});
    for (_, s) in servers.iter_mut() {
        s.initialize();
        for _ in 0..5 {
            s.call(&call);
        }
    }
    let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let run_bwrap = |b: &str| {
        let t = Instant::now();
        let ok = Command::new(b)
            .args([
                "--unshare-all",
                "--die-with-parent",
                "--new-session",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--bind",
            ])
            .arg(&root)
            .arg(&root)
            .args(["/bin/bash", "-c", "true"])
            .stdin(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "bwrap failed");
        t.elapsed()
    };
    let run_floor = || {
        let t = Instant::now();
        let ok = Command::new("/bin/bash")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        t.elapsed()
    };
    // The default's round trips, in the order of its audit records (5 warm-up calls first).
    let mut default_trips: Vec<Duration> = Vec::new();
    let mut bwrap_times: Vec<Duration> = Vec::new();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); servers.len() + 1];
    for _ in 0..calls {
        if let Some(b) = bwrap {
            bwrap_times.push(run_bwrap(b));
        }
        times[0].push(run_floor());
        for (i, (_, s)) in servers.iter_mut().enumerate() {
            let t = Instant::now();
            s.call(&call);
            times[i + 1].push(t.elapsed());
        }
    }
    default_trips.extend(&times[1]);
    // After a pause each: the default (and the other build's), bubblewrap, the floor.
    let pause = Duration::from_millis(500);
    let idle_servers: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter(|(_, (n, _))| n == "default" || n.starts_with("default, "))
        .map(|(i, _)| i)
        .collect();
    let mut idle: Vec<Vec<Duration>> = vec![Vec::new(); idle_servers.len() + 2];
    for _ in 0..idle_calls {
        std::thread::sleep(pause);
        idle[0].push(run_floor());
        if let Some(b) = bwrap {
            std::thread::sleep(pause);
            idle[1].push(run_bwrap(b));
        }
        for (k, &i) in idle_servers.iter().enumerate() {
            std::thread::sleep(pause);
            let t = Instant::now();
            servers[i].1.call(&call);
            idle[k + 2].push(t.elapsed());
        }
    }
    default_trips.extend(&idle[2]);
    let idle_names: Vec<String> = idle_servers.iter().map(|&i| servers[i].0.clone()).collect();
    let servers_named: Vec<(String, ())> = servers
        .into_iter()
        .map(|(name, s)| {
            s.finish();
            (name, ())
        })
        .collect();
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "tool.result")
        .skip(5)
        .collect();
    let _ = std::fs::remove_dir_all(&base);
    let medians: Vec<f64> = times
        .into_iter()
        .map(|mut v| {
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e3
        })
        .collect();
    println!("Bash {{\"command\": \"true\"}}, median of {calls} calls (ms), taken in turns");
    println!("{:<44} {:>8} {:>14}", "", "ms", "over the floor");
    println!(
        "{:<44} {:>8.2} {:>14}",
        "floor: bash -c true spawned here", medians[0], "-"
    );
    let bwrap_median = (!bwrap_times.is_empty()).then(|| {
        bwrap_times.sort();
        bwrap_times[bwrap_times.len() / 2].as_secs_f64() * 1e3
    });
    if let Some(b) = bwrap_median {
        println!(
            "{:<44} {b:>8.2} {:>+13.2}",
            "bubblewrap as Claude Code and Codex start it",
            b - medians[0]
        );
    }
    for ((name, _), m) in servers_named.iter().zip(&medians[1..]) {
        println!("{name:<44} {m:>8.2} {:>+13.2}", m - medians[0]);
    }
    if let Some(b) = bwrap_median {
        println!("awf's default against bubblewrap: {:.2}x", medians[1] / b);
    }
    if idle_calls > 0 {
        let med = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e3
        };
        let p90 = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() * 9 / 10].as_secs_f64() * 1e3
        };
        println!();
        println!(
            "the same call after 0.5 s idle each, median of {idle_calls} (ms), taken in turns"
        );
        println!(
            "{:<44} {:>8} {:>8} {:>14}",
            "", "ms", "p90", "over the floor"
        );
        let floor = med(idle[0].clone());
        let mut rows = vec![("floor: bash -c true spawned here".to_string(), &idle[0])];
        if bwrap.is_some() {
            rows.push((
                "bubblewrap as Claude Code and Codex start it".into(),
                &idle[1],
            ));
        }
        for (k, n) in idle_names.iter().enumerate() {
            rows.push((n.clone(), &idle[k + 2]));
        }
        for (name, v) in rows {
            let m = med(v.clone());
            println!(
                "{name:<44} {m:>8.2} {:>8.2} {:>+13.2}",
                p90(v.clone()),
                m - floor
            );
        }
        if bwrap.is_some() {
            println!(
                "awf's default against bubblewrap after idle: {:.2}x",
                med(idle[2].clone()) / med(idle[1].clone())
            );
        }
    }
    // Stages of the default's calls, back to back and after idle.
    if records.len() == default_trips.len() {
        let stages = ["jail_us", "spawn_us", "run_us", "teardown_us"];
        let phases = [
            ("back to back", 0..calls),
            ("after idle", calls..records.len()),
        ];
        println!();
        println!("where the default's time goes, medians (ms)");
        println!(
            "{:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "jail", "spawn", "run", "teardown", "rest", "total"
        );
        for (name, range) in phases {
            if range.is_empty() {
                continue;
            }
            let column = |f: &dyn Fn(usize) -> f64| {
                let mut v: Vec<f64> = range.clone().map(f).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let stage = |i: usize, k: &str| records[i][k].as_f64().unwrap_or(0.0) / 1e3;
            let inside = |i: usize| stages.iter().map(|k| stage(i, k)).sum::<f64>();
            let total = |i: usize| default_trips[i].as_secs_f64() * 1e3;
            let mut line = format!("{name:<14}");
            for k in stages {
                line.push_str(&format!(" {:>9.2}", column(&|i| stage(i, k))));
            }
            line.push_str(&format!(
                " {:>9.2} {:>9.2}",
                column(&|i| total(i) - inside(i)),
                column(&total)
            ));
            println!("{line}");
        }
    }
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: i64,
}

impl Session {
    fn start(awf: &Path, config: &Path) -> Session {
        let mut child = Command::new(awf)
            .args(["mcp-serve", "--config"])
            .arg(config)
            .env("AWF_LOG", "error")
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

    fn request(&mut self, method: &str, params: Value) -> Value {
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
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"))
    }

    fn initialize(&mut self) {
        self.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
    }

    fn call(&mut self, call: &Value) {
        let a = self.request("tools/call", call.clone());
        assert!(
            a["result"]["isError"] != true && a["result"].is_object(),
            "{a}"
        );
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
