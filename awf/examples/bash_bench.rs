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
//! `cargo build --release -p awf --bin awf --example bash_bench &&
//! target/release/examples/bash_bench [CALLS] [OTHER_AWF]`

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
    let other = std::env::args().nth(2).map(PathBuf::from);
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
    let mut servers: Vec<(String, Session)> = vec![
        (
            "default".into(),
            Session::start(&awf, &config("default", json!({}))),
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
    let mut bwrap_times: Vec<Duration> = Vec::new();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); servers.len() + 1];
    for _ in 0..calls {
        if let Some(b) = bwrap {
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
            bwrap_times.push(t.elapsed());
        }
        let t = Instant::now();
        let ok = Command::new("/bin/bash")
            .args(["-c", "true"])
            .stdin(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        times[0].push(t.elapsed());
        for (i, (_, s)) in servers.iter_mut().enumerate() {
            let t = Instant::now();
            s.call(&call);
            times[i + 1].push(t.elapsed());
        }
    }
    let servers_named: Vec<(String, ())> = servers
        .into_iter()
        .map(|(name, s)| {
            s.finish();
            (name, ())
        })
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
