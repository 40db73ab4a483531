//! The cost of a `tools/call` inside the library, against a floor measured in the same
//! run: sequential echo calls over OS pipes to a [`Server::serve`] on another thread
//! (p50 and p99 round trip) against a thread that echoes each line back raw over the same
//! pipes (no protocol: what the pipes and the threads cost), and the calls per second one
//! [`mcpserver::Dispatcher`] answers on the calling thread (no I/O at all: the per-call
//! path itself). The two kinds of blocks alternate, so a noisy machine hurts both alike.
//!
//! `cargo build --release -p mcpserver --example call_bench &&
//! taskset -c 0 target/release/examples/call_bench [ROUNDS] [CALLS_PER_BLOCK]`
//!
//! A third row serves the same calls after another tool was withheld through the
//! server's [`mcpserver::ToolGate`]: what a call costs once the gate is in use.
//!
//! `call_bench dispatch N` only answers N calls through a dispatcher, and `call_bench
//! serve N` (or `serve-withheld N`, another tool withheld) only serves N calls written
//! at once into a pipe, for counting instructions (`valgrind --tool=callgrind`) at two
//! values of N: the difference over the difference of N is the instructions per call.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use mcpserver::{CallContext, Server, Tool, ToolResult};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Echo {
    text: String,
}

/// The bench server, with the tool `other` withheld through its gate when `withheld`.
fn server_with(withheld: bool) -> Server {
    let server = server();
    if withheld {
        assert!(
            server
                .tool_gate()
                .withhold("other", "withheld for the bench")
        );
    }
    server
}

fn server() -> Server {
    let schema =
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    Server::builder("bench", "1")
        .tool(
            Tool::new("echo", "Echo the text back", schema),
            |a: Echo, _: &CallContext| Ok::<_, String>(ToolResult::text(a.text)),
        )
        .tool_raw(
            Tool::new("other", "Another tool", json!({"type": "object"})),
            |_, _| Ok::<_, String>(ToolResult::text("")),
        )
        .build()
        .expect("the bench server builds")
}

const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-11-05\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}}}\n";

fn call_line(id: u64) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\\nworld\\n\"}}}}}}\n"
    )
    .into_bytes()
}

/// One side of a round trip: the client's ends of two pipes and the thread serving them.
struct Peer {
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    next_id: u64,
}

impl Peer {
    fn start(
        serve: impl FnOnce(std::io::PipeReader, std::io::PipeWriter) + Send + 'static,
    ) -> Peer {
        let (server_in, to) = std::io::pipe().expect("a pipe");
        let (from, server_out) = std::io::pipe().expect("a pipe");
        std::thread::spawn(move || serve(server_in, server_out));
        Peer {
            to,
            from: BufReader::new(from),
            next_id: 1,
        }
    }

    /// Round trips of `calls` lines; each one's time in nanoseconds goes to `samples`.
    fn block(&mut self, calls: usize, samples: &mut Vec<u64>) {
        let mut answer = String::new();
        for _ in 0..calls {
            let line = call_line(self.next_id);
            self.next_id += 1;
            let started = Instant::now();
            self.to.write_all(&line).expect("the peer reads");
            answer.clear();
            self.from.read_line(&mut answer).expect("the peer answers");
            samples.push(started.elapsed().as_nanos() as u64);
            assert!(
                answer.ends_with('\n') && !answer.contains("\"error\""),
                "{answer}"
            );
        }
    }
}

/// Echoes every line back as it is: the floor under any server over these pipes.
fn raw_echo(input: std::io::PipeReader, mut output: std::io::PipeWriter) {
    let mut lines = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if output.write_all(&line).is_err() {
                    return;
                }
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("dispatch") {
        let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
        let server = server();
        let mut session = server.dispatcher();
        session.dispatch(INITIALIZE);
        let mut bytes = 0;
        for id in 1..=n as u64 {
            bytes += session.dispatch(&call_line(id)).len();
        }
        println!("{n} calls, {bytes} bytes answered");
        return;
    }
    if let Some(mode @ ("serve" | "serve-withheld")) = first.as_deref() {
        let withheld = mode == "serve-withheld";
        let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
        let (server_in, mut to) = std::io::pipe().expect("a pipe");
        let (mut from, server_out) = std::io::pipe().expect("a pipe");
        let writer = std::thread::spawn(move || {
            to.write_all(INITIALIZE).unwrap();
            for id in 1..=n as u64 {
                to.write_all(&call_line(id)).unwrap();
            }
        });
        let reader = std::thread::spawn(move || {
            let mut answers = Vec::new();
            std::io::Read::read_to_end(&mut from, &mut answers).unwrap();
            answers.len()
        });
        server_with(withheld)
            .serve(server_in, server_out)
            .expect("serving ends at end of input");
        writer.join().unwrap();
        println!("{n} calls, {} bytes answered", reader.join().unwrap());
        return;
    }
    let rounds: usize = first.and_then(|a| a.parse().ok()).unwrap_or(20);
    let calls: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);

    let served = server();
    let mut serving = Peer::start(move |r, w| {
        let _ = served.serve(r, w);
    });
    serving.to.write_all(INITIALIZE).unwrap();
    let mut init = String::new();
    serving.from.read_line(&mut init).unwrap();
    let mut floor = Peer::start(raw_echo);
    let gated = server_with(true);
    let mut serving_gated = Peer::start(move |r, w| {
        let _ = gated.serve(r, w);
    });
    serving_gated.to.write_all(INITIALIZE).unwrap();
    init.clear();
    serving_gated.from.read_line(&mut init).unwrap();

    let dispatched = server();
    let mut session = dispatched.dispatcher();
    session.dispatch(INITIALIZE);
    let lines: Vec<Vec<u8>> = (1..=calls as u64).map(call_line).collect();

    // Warm-up, untimed.
    let mut scratch = Vec::new();
    serving.block(1000, &mut scratch);
    floor.block(1000, &mut scratch);
    serving_gated.block(1000, &mut scratch);

    let (mut server_ns, mut floor_ns, mut dispatch_rate) = (Vec::new(), Vec::new(), Vec::new());
    let mut gated_ns = Vec::new();
    for _ in 0..rounds {
        serving.block(calls, &mut server_ns);
        floor.block(calls, &mut floor_ns);
        serving_gated.block(calls, &mut gated_ns);
        let started = Instant::now();
        for line in &lines {
            let answer = session.dispatch(line);
            assert!(answer.ends_with('\n'));
        }
        let took = started.elapsed().max(Duration::from_nanos(1));
        dispatch_rate.push(calls as f64 / took.as_secs_f64() / 1000.0);
    }
    server_ns.sort_unstable();
    floor_ns.sort_unstable();
    gated_ns.sort_unstable();
    dispatch_rate.sort_by(f64::total_cmp);
    let median_rate = dispatch_rate[dispatch_rate.len() / 2];
    let (s50, s99) = (percentile(&server_ns, 0.5), percentile(&server_ns, 0.99));
    let (f50, f99) = (percentile(&floor_ns, 0.5), percentile(&floor_ns, 0.99));
    let (g50, g99) = (percentile(&gated_ns, 0.5), percentile(&gated_ns, 0.99));
    println!("{rounds} rounds of {calls} calls each");
    println!("figure                          server    floor  server/floor");
    println!(
        "echo round trip p50 (µs)    {s50:>10.2} {f50:>8.2} {:>13.3}",
        s50 / f50
    );
    println!(
        "echo round trip p99 (µs)    {s99:>10.2} {f99:>8.2} {:>13.3}",
        s99 / f99
    );
    println!(
        "  another tool withheld, p50{g50:>10.2} {f50:>8.2} {:>13.3}",
        g50 / f50
    );
    println!(
        "  another tool withheld, p99{g99:>10.2} {f99:>8.2} {:>13.3}",
        g99 / f99
    );
    println!(
        "dispatcher calls/s (k)      {median_rate:>10.0}        -             -   (no I/O: the per-call path; median over rounds)"
    );
}
