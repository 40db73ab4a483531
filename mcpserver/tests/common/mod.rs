//! An in-process client for protocol tests: a server on a thread, lines in, JSON out.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use mcpserver::memory::{self, MemoryWriter};
use mcpserver::{Server, StopReason};
use serde_json::{Value, json};

/// Long enough never to fire on a healthy run; only there so a broken server fails
/// the test instead of hanging it.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct Client {
    to_server: Option<MemoryWriter>,
    lines: Receiver<String>,
    serving: Option<JoinHandle<std::io::Result<StopReason>>>,
}

impl Client {
    /// Serves `server` (or a shared one, for several sessions) on a thread.
    pub fn start(server: impl Into<Arc<Server>>) -> Client {
        let server = server.into();
        let (client_end, server_end) = memory::pair();
        let serving = std::thread::spawn(move || {
            let (r, w) = server_end.split();
            server.serve(r, w)
        });
        let (reader, writer) = client_end.split();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Client {
            to_server: Some(writer),
            lines: rx,
            serving: Some(serving),
        }
    }

    /// A client that has already completed `initialize`.
    pub fn initialized(server: Server) -> Client {
        let mut c = Client::start(server);
        c.request(0, "initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "test-client", "version": "9.9"}}));
        c.notify("notifications/initialized", json!({}));
        c
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let w = self.to_server.as_mut().expect("input still open");
        w.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, msg: Value) {
        let mut line = serde_json::to_vec(&msg).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    pub fn send_request(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params}));
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its answer (which must be the next line).
    pub fn request(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Value {
        let id = id.into();
        self.send_request(id.clone(), method, params);
        let answer = self.recv();
        assert_eq!(answer["id"], id, "answer to another request: {answer}");
        answer
    }

    pub fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
    }

    pub fn recv_line(&mut self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .expect("the server should have answered")
    }

    /// The next answer, checked to be one compact JSON-RPC 2.0 object.
    pub fn recv(&mut self) -> Value {
        let line = self.recv_line();
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        assert_eq!(
            serde_json::to_string(&v).unwrap().len(),
            line.len(),
            "not compact: {line}"
        );
        v
    }

    /// True when nothing arrives within `wait` (used only to prove an absence).
    pub fn silent_for(&mut self, wait: Duration) -> bool {
        match self.lines.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => true,
            Ok(line) => panic!("expected no answer, got {line}"),
        }
    }

    /// Closes the input and returns why `serve` ended plus every line still written.
    pub fn finish(mut self) -> (StopReason, Vec<Value>) {
        self.to_server = None;
        let reason = self
            .serving
            .take()
            .unwrap()
            .join()
            .expect("serve must not panic")
            .expect("serve ok");
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            rest.push(serde_json::from_str(&line).unwrap());
        }
        (reason, rest)
    }

    pub fn join(mut self) -> StopReason {
        self.serving
            .take()
            .unwrap()
            .join()
            .expect("serve must not panic")
            .expect("serve ok")
    }
}

pub fn object_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

/// Builds the echo example once (with the cargo that runs the tests) and returns its path.
pub fn echo_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| example_binary("echo")).clone()
}

/// Builds an example of this crate (with the cargo that runs the tests) and returns its
/// path. `--workspace`: with the features `cargo test --workspace` resolves, so that what it
/// built is not built again.
pub fn example_binary(name: &str) -> PathBuf {
    let out = Command::new(env!("CARGO"))
        .args([
            "build",
            "--workspace",
            "--example",
            name,
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "building the {name} example failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo names the {name} executable"))
}
