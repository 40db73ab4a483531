//! Benchmark of the plugin host: latency of a plugin tool call through `awf mcp-serve`
//! (MCP over stdio, then gRPC over a Unix socket to the `notes` example plugin) against a
//! builtin call (`Read`) served by the same process in the same run, interleaved so both
//! see the same machine load; plus the start-up cost (spawn to `initialize` answered) with
//! and without a plugin. Prints figures and ratios; asserts nothing.
//!
//! ```sh
//! cargo build --release -p awf --bin awf --example plugin_call_bench
//! cargo build --release -p plugin-sdk --examples
//! target/release/examples/plugin_call_bench target/release/awf target/release/examples/notes 5000
//! ```

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl Server {
    fn start(awf: &Path, config: &Path, plugins: &Path) -> Server {
        let mut child = Command::new(awf)
            .args(["mcp-serve", "--config"])
            .arg(config)
            .env("AWF_PLUGINS_PATH", plugins)
            .env("AWF_LOG", "warn")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot start awf mcp-serve");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn initialize(&mut self) {
        let a = self.request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        assert!(a.get("result").is_some(), "{a}");
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
    }

    fn call(&mut self, tool: &str, args: &Value) -> Duration {
        let t = Instant::now();
        let a = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let took = t.elapsed();
        // isError is left out when false.
        assert!(
            a["result"].is_object() && a["result"]["isError"] != true,
            "{tool}: {a}"
        );
        took
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!(
            "usage: plugin_call_bench <awf binary> <notes plugin binary> [calls, default 5000]"
        );
        std::process::exit(2);
    }
    let awf = std::fs::canonicalize(&args[1]).expect("awf binary");
    let notes = std::fs::canonicalize(&args[2]).expect("notes binary");
    let n: usize = args.get(3).map_or(5000, |s| s.parse().expect("calls"));

    let base = std::env::temp_dir().join(format!("awf-plugin-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let plugins = base.join("plugins");
    std::fs::create_dir_all(plugins.join("notes")).unwrap();
    std::fs::write(
        plugins.join("notes/plugin.yaml"),
        "name: notes\nversion: 0.1.0\ndescription: bench\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&notes, plugins.join("notes/notes")).unwrap();
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "one line of text\n".repeat(5)).unwrap();
    let write = |name: &str, cfg: Value| -> PathBuf {
        let p = base.join(name);
        std::fs::write(&p, cfg.to_string()).unwrap();
        p
    };
    let with_plugin = write(
        "with-plugin.json",
        json!({"root": root, "landlock": false, "plugin_tools": [{"plugin": "notes", "expose": ["add", "search"]}]}),
    );
    let builtins_only = write("builtins.json", json!({"root": root, "landlock": false}));

    // Start-up: spawn to initialize answered, then a clean stop (not timed).
    let startup = |cfg: &Path| {
        let mut times: Vec<Duration> = (0..15)
            .map(|_| {
                let t = Instant::now();
                let mut s = Server::start(&awf, cfg, &plugins);
                s.initialize();
                let took = t.elapsed();
                s.finish();
                took
            })
            .collect();
        times.sort();
        percentile(&times, 0.5)
    };
    let start_plain = startup(&builtins_only);
    let start_plugin = startup(&with_plugin);

    let mut s = Server::start(&awf, &with_plugin, &plugins);
    s.initialize();
    for i in 0..20 {
        s.call(
            "notes_add",
            &json!({"text": format!("note {i} about bench"), "tags": ["t", "bench"], "meta": {"i": i.to_string()}}),
        );
    }
    let read = json!({"path": "small.txt"});
    let search = json!({"query": "note 1", "tags": ["bench"], "limit": 3});
    for _ in 0..200 {
        s.call("Read", &read);
        s.call("notes_search", &search);
    }
    let (mut builtin, mut plugin) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        builtin.push(s.call("Read", &read));
        plugin.push(s.call("notes_search", &search));
    }
    s.finish();
    builtin.sort();
    plugin.sort();

    println!("awf mcp-serve, {n} interleaved calls each (after 200 warm-up):");
    for (name, v) in [("builtin Read", &builtin), ("plugin notes_search", &plugin)] {
        println!(
            "  {name:<20} p50 {:>8.1} µs   p90 {:>8.1} µs   p99 {:>8.1} µs",
            micros(percentile(v, 0.5)),
            micros(percentile(v, 0.9)),
            micros(percentile(v, 0.99)),
        );
    }
    let (b50, p50) = (percentile(&builtin, 0.5), percentile(&plugin, 0.5));
    println!(
        "  plugin/builtin p50 ratio {:.2}x (plugin adds {:.1} µs)",
        p50.as_secs_f64() / b50.as_secs_f64(),
        micros(p50) - micros(b50)
    );
    println!(
        "start-up to initialize answered, p50 of 15: builtins only {:.1} ms, with the notes plugin {:.1} ms",
        start_plain.as_secs_f64() * 1e3,
        start_plugin.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&base);
}
