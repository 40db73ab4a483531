//! What the model relay costs a streamed answer: time to first byte through the relay
//! against going direct to the same local SSE server (median of 50, taken in turns), and
//! the peak memory (VmHWM) this process grows by while a 10 MB streamed answer passes
//! through the relay (the relay forwards as it reads: it should not hold the answer).
//!
//! `cargo build --release -p awf --example relay_bench && target/release/examples/relay_bench`

use awf::relay::{Budget, KeyHeader, LeaseSpec, Relay};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

const RUNS: usize = 50;
const BIG: usize = 10 * 1024 * 1024;

/// A model endpoint streaming Chat Completions events: `/small` one event and the usage,
/// `/big` about BIG bytes of events.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn));
        }
    });
    port
}

fn answer(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let len: usize = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    let _ = conn.read_exact(&mut body);
    let big = text.contains("/big");
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    );
    let event = |content: &str| {
        format!(
            "data: {{\"id\":\"c1\",\"model\":\"m\",\"choices\":[{{\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n"
        )
    };
    let _ = conn.write_all(event("first").as_bytes());
    if big {
        let chunk = event(&"x".repeat(10_000));
        let mut sent = 0;
        while sent < BIG {
            if conn.write_all(chunk.as_bytes()).is_err() {
                return;
            }
            sent += chunk.len();
        }
    }
    let _ = conn.write_all(
        b"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n",
    );
}

/// One streamed request; returns the time to its first body byte and the bytes read.
fn request(addr: &str, path: &str, key: &str) -> (Duration, usize) {
    let addr = addr.trim_start_matches("http://");
    let (host, rest) = addr.split_once('/').unwrap_or((addr, ""));
    let rest = if rest.is_empty() {
        String::new()
    } else {
        format!("/{rest}")
    };
    let body = r#"{"model":"m","stream":true,"messages":[]}"#;
    let t = Instant::now();
    let mut s = TcpStream::connect(host).unwrap();
    s.set_nodelay(true).unwrap();
    write!(
        s,
        "POST {rest}{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    let mut first = None;
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n;
        if first.is_none() {
            seen.extend_from_slice(&buf[..n]);
            if let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                && seen.len() > i + 4
            {
                first = Some(t.elapsed());
            }
        }
    }
    (first.unwrap_or_else(|| t.elapsed()), total)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let port = server();
    let direct = format!("http://127.0.0.1:{port}");
    let relay = Relay::start(None).unwrap();
    let lease = relay
        .lease(LeaseSpec {
            upstream: direct.clone(),
            key: Some((KeyHeader::Bearer, "the-real-key".into())),
            provider: "openai",
            traceparent: None,
            audit: None,
            budget: Budget::default(),
            model_content: false,
        })
        .unwrap();
    let placeholder = lease.placeholder().unwrap().to_string();
    let (mut d, mut r) = (Vec::new(), Vec::new());
    for i in 0..RUNS + 5 {
        let a = request(&direct, "/small/chat/completions", "the-real-key").0;
        let b = request(lease.base_url(), "/small/chat/completions", &placeholder).0;
        if i >= 5 {
            d.push(a);
            r.push(b);
        }
    }
    let (dm, rm) = (median(d), median(r));
    println!("time to first byte of a streamed answer, median of {RUNS} (ms)");
    println!("  direct          {:>8.3}", dm.as_secs_f64() * 1e3);
    println!("  through relay   {:>8.3}", rm.as_secs_f64() * 1e3);
    println!(
        "  added           {:>8.3}",
        (rm.as_secs_f64() - dm.as_secs_f64()) * 1e3
    );
    let before = vm_hwm_kib();
    let (_, bytes) = request(lease.base_url(), "/big/chat/completions", &placeholder);
    let after = vm_hwm_kib();
    println!(
        "a {:.1} MB streamed answer through the relay: peak RSS {} KiB before, {} KiB after (+{} KiB)",
        bytes as f64 / 1e6,
        before,
        after,
        after - before
    );
    let stats = lease.stats();
    println!(
        "the relay counted {} requests, {} input and {} output tokens",
        stats.requests, stats.input_tokens, stats.output_tokens
    );
}
