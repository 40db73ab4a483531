//! The cost of a third-party MCP server behind `awf mcp-serve`, against the same server
//! started bare, in the same run: spawn → `tools/list` answer (awf starts the server in
//! its jail, initializes it and lists its tools before it answers), sequential call
//! latency (interleaved by blocks, so machine noise hurts both alike), and the memory of
//! awf's own processes per proxied server (PSS of awf and each jail's two small
//! processes, the server's own excluded; measured with one and with two servers). The
//! server is the library's echo example; the same echo as a remote server (Streamable
//! HTTP, answered by a thread of this bench at once) gives the cost of the HTTP link
//! against the stdio one. Prints medians and the differences.
//!
//! `cargo build --release -p awf --bin awf --example server_bench && cargo build --release
//! -p mcpserver --example echo && target/release/examples/server_bench [SPAWNS] [CALLS]`

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (spawns, calls) = (arg(1, 20), arg(2, 3000));
    let examples = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let awf = examples.parent().unwrap().join("awf");
    let echo = examples.join("echo");
    for p in [&awf, &echo] {
        if !p.exists() {
            eprintln!(
                "missing {}: build it first (see the doc comment)",
                p.display()
            );
            std::process::exit(2);
        }
    }
    let dir = std::env::temp_dir().join(format!("awf-server-bench-{}", std::process::id()));
    let root = dir.join("ws");
    std::fs::create_dir_all(&root).unwrap();
    // `awf mcp-serve` over a config named `name` with these `servers`.
    let serve = |name: &str, servers: Value| {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(
            &path,
            json!({"root": root, "intercept_builtins": false, "servers": servers}).to_string(),
        )
        .unwrap();
        vec![
            awf.display().to_string(),
            "mcp-serve".into(),
            "--config".into(),
            path.display().to_string(),
        ]
    };
    let config = |servers: &[&str]| {
        let map: serde_json::Map<String, Value> = servers
            .iter()
            .map(|n| (n.to_string(), json!({"command": [echo]})))
            .collect();
        serve(&servers.len().to_string(), Value::Object(map))
    };
    let through = config(&["echo"]);
    let two = config(&["echo", "second"]);
    let url = format!("http://127.0.0.1:{}/mcp", http_echo());
    let remote = serve(
        "remote",
        json!({"echo": {"url": url, "allow_private": true}}),
    );
    let bare = vec![echo.display().to_string()];

    let (mut t_start, mut b_start) = (vec![], vec![]);
    for _ in 0..spawns {
        t_start.push(spawn_to_list(&through));
        b_start.push(spawn_to_list(&bare));
    }
    let [t_lat, r_lat, b_lat] = latencies(
        [
            (
                &through,
                json!({"name": "echo_echo", "arguments": {"text": "hello"}}),
            ),
            (
                &remote,
                json!({"name": "echo_echo", "arguments": {"text": "hello"}}),
            ),
            (
                &bare,
                json!({"name": "echo", "arguments": {"text": "hello"}}),
            ),
        ],
        calls,
    );
    let (mut one_pss, mut two_pss) = (vec![], vec![]);
    for _ in 0..5 {
        one_pss.push(awf_pss_kib(&through, &echo));
        two_pss.push(awf_pss_kib(&two, &echo));
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "{:<40} {:>10} {:>10} {:>10}",
        "(medians)", "via awf", "bare", "added"
    );
    let row =
        |name: &str, a: f64, b: f64| println!("{name:<40} {a:>10.2} {b:>10.2} {:>10.2}", a - b);
    row(
        "spawn -> tools/list answer (ms)",
        ms(median(t_start)),
        ms(median(b_start)),
    );
    row(
        "call p50, echo (us)",
        us(percentile(&t_lat, 50)),
        us(percentile(&b_lat, 50)),
    );
    row(
        "call p99, echo (us)",
        us(percentile(&t_lat, 99)),
        us(percentile(&b_lat, 99)),
    );
    println!(
        "{:<40} {:>10.2} {:>10.2} {:>10.2}",
        "call p50, echo as a remote server (us)",
        us(percentile(&r_lat, 50)),
        us(percentile(&t_lat, 50)),
        us(percentile(&r_lat, 50)) - us(percentile(&t_lat, 50))
    );
    println!("  (the remote row's second column is the stdio server's, via awf)");
    let (one, two) = (median_f(one_pss), median_f(two_pss));
    println!(
        "awf's own PSS (KiB): {one:.0} with one server, {two:.0} with two: {:.0} per added \
         server (goals: start +20 ms, call +200 us, 1024 KiB per server)",
        two - one
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
fn median(mut v: Vec<Duration>) -> Duration {
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
        self.request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn spawn_to_list(cmd: &[String]) -> Duration {
    let t = Instant::now();
    let mut s = Session::start(cmd);
    s.initialize();
    let list = s.request("tools/list", json!({}));
    let elapsed = t.elapsed();
    assert!(list.contains("echo"), "{list}");
    s.finish();
    elapsed
}

/// Sorted round-trip times of `calls` sequential calls of each server, taken in turns by
/// blocks (each after a few untimed calls), after a warm-up of a tenth.
fn latencies<const N: usize>(
    servers: [(&Vec<String>, Value); N],
    calls: usize,
) -> [Vec<Duration>; N] {
    const BLOCK: usize = 300;
    const REWARM: usize = 30;
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
                s.request("tools/call", call.clone());
            }
            for _ in 0..n {
                let t = Instant::now();
                let answer = s.request("tools/call", call.clone());
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

/// PSS of the processes of a started `awf mcp-serve` (itself and every descendant but
/// the servers, whose program is `server`), once its servers are up.
fn awf_pss_kib(cmd: &[String], server: &Path) -> f64 {
    let mut s = Session::start(cmd);
    s.initialize();
    s.request("tools/list", json!({}));
    let server = server.display().to_string();
    let mut total = 0.0;
    let mut todo = vec![s.child.id()];
    while let Some(pid) = todo.pop() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        if program != server.as_bytes() {
            total += pss_kib(pid);
        }
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            todo.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    s.finish();
    total
}

fn pss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// An echo MCP server of the handshake era over Streamable HTTP (plain, on 127.0.0.1),
/// answering each POST at once on a thread per connection; its port.
fn http_echo() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve_http(conn));
        }
    });
    port
}

fn serve_http(conn: std::net::TcpStream) {
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if std::io::Read::read_exact(&mut reader, &mut body).is_err() {
            return;
        }
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = msg.get("id").cloned();
        let result = match (msg["method"].as_str().unwrap_or(""), &id) {
            (_, None) => None,
            ("initialize", _) => Some(json!({"protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}})),
            ("tools/list", _) => Some(json!({"tools": [{"name": "echo",
                "description": "Echo the text", "inputSchema": {"type": "object"}}]})),
            ("tools/call", _) => Some(json!({"content": [{"type": "text",
                "text": msg["params"]["arguments"]["text"]}]})),
            ("ping", _) => Some(json!({})),
            _ => {
                let _ = out.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                continue;
            }
        };
        let response = match result {
            None => "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_string(),
            Some(r) => {
                let body = json!({"jsonrpc": "2.0", "id": id, "result": r}).to_string();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: b\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        };
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}
