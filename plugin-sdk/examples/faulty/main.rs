//! Example awf plugin that misbehaves on purpose, for testing hosts:
//! `fail` returns an error, `panic` panics (the SDK turns it into a failed result),
//! `crash` aborts the whole process mid-call, `sleep {ms}` is slow, `print {text}`
//! writes to stdout after the handshake (which the SDK sends to stderr), and `env {name}`
//! answers a variable of its environment (what the host passed it).
//!
//! `big {bytes}` answers that many bytes of text and of structured data; `connect {path |
//! addr}` connects to a unix socket or a TCP address and answers what it reached.
//!
//! Environment variables make it misbehave before serving, for host tests:
//! `FAULTY_START_DELAY_MS=N` waits N ms before the handshake (a slow start),
//! `FAULTY_BAD_HANDSHAKE=1` prints a garbage line instead of a handshake and then hangs,
//! `FAULTY_ANNOUNCE=PATH` announces PATH as its socket and then hangs, and
//! `FAULTY_IGNORE_STDIN=1` serves on when its stdin (the host's lifeline) closes.

use std::time::Duration;

use plugin_sdk::{Info, Operation, Output, Plugin};
use serde_json::{Value, json};

struct Faulty;

/// A connection `connect` speaks over, unix or TCP.
trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

impl Plugin for Faulty {
    fn info(&self) -> Info {
        Info::new("faulty", env!("CARGO_PKG_VERSION"), "Misbehaves on purpose")
    }

    fn operations(&self) -> Vec<Operation> {
        vec![
            Operation::new("fail", "Always fails with the given message").input_schema(json!({
                "type": "object",
                "properties": { "message": { "type": "string" } }
            })),
            Operation::new("panic", "Panics inside the operation"),
            Operation::new(
                "crash",
                "Aborts the plugin process in the middle of the call",
            ),
            Operation::new("sleep", "Sleeps, then answers").input_schema(json!({
                "type": "object",
                "properties": { "ms": { "type": "integer", "minimum": 0 } },
                "required": ["ms"]
            })),
            Operation::new("env", "Answers the value of a variable of its environment")
                .input_schema(json!({
                    "type": "object",
                    "properties": { "name": { "type": "string" } },
                    "required": ["name"]
                })),
            Operation::new("big", "Answers `bytes` bytes of text and of data").input_schema(
                json!({
                    "type": "object",
                    "properties": { "bytes": { "type": "integer", "minimum": 0 } },
                    "required": ["bytes"]
                }),
            ),
            Operation::new(
                "connect",
                "Connects to a unix socket (`path`) or a TCP address (`addr`), sends an HTTP \
                 GET and answers the reply's first line",
            )
            .input_schema(json!({
                "type": "object",
                "properties": { "path": { "type": "string" }, "addr": { "type": "string" } }
            })),
            Operation::new("read", "Answers the first bytes of the file at `path`").input_schema(
                json!({
                    "type": "object",
                    "properties": { "path": { "type": "string" } },
                    "required": ["path"]
                }),
            ),
            Operation::new("write", "Writes `text` to the file at `path`").input_schema(json!({
                "type": "object",
                "properties": { "path": { "type": "string" }, "text": { "type": "string" } },
                "required": ["path", "text"]
            })),
            Operation::new("print", "Prints text on stdout").input_schema(json!({
                "type": "object",
                "properties": { "text": { "type": "string" } },
                "required": ["text"]
            })),
        ]
    }

    fn execute(&self, operation: &str, args: Value) -> Result<Output, String> {
        match operation {
            "fail" => Err(args["message"]
                .as_str()
                .unwrap_or("this operation always fails")
                .to_string()),
            "panic" => panic!("faulty panicked on purpose"),
            "crash" => std::process::abort(),
            "sleep" => {
                let ms = args["ms"]
                    .as_u64()
                    .ok_or("`ms` must be a non-negative integer")?;
                // Logged so a test knows the call is under way before it stops the plugin.
                eprintln!("sleeping {ms} ms");
                std::thread::sleep(Duration::from_millis(ms));
                Ok(Output::text(format!("slept {ms} ms")).with_data(json!({ "slept_ms": ms })))
            }
            "big" => {
                let n = args["bytes"]
                    .as_u64()
                    .ok_or("`bytes` must be a non-negative integer")?
                    as usize;
                Ok(Output::text("x".repeat(n)).with_data(json!({ "blob": "y".repeat(n) })))
            }
            "print" => {
                let text = args["text"].as_str().ok_or("`text` must be a string")?;
                println!("{text}");
                Ok(Output::text("printed"))
            }
            "connect" => {
                use std::io::{BufRead, Write};
                let exchange = |mut s: Box<dyn ReadWrite>| -> std::io::Result<String> {
                    s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
                    let mut line = String::new();
                    std::io::BufReader::new(s).read_line(&mut line)?;
                    Ok(line.trim_end().to_string())
                };
                let got = match (args["path"].as_str(), args["addr"].as_str()) {
                    (Some(p), _) => std::os::unix::net::UnixStream::connect(p)
                        .and_then(|s| exchange(Box::new(s))),
                    (None, Some(a)) => {
                        std::net::TcpStream::connect(a).and_then(|s| exchange(Box::new(s)))
                    }
                    _ => return Err("give `path` or `addr`".into()),
                };
                got.map(|l| Output::text(format!("reached: {l}")))
                    .map_err(|e| format!("refused: {e}"))
            }
            "read" => {
                let path = args["path"].as_str().ok_or("`path` must be a string")?;
                let bytes = std::fs::read(path).map_err(|e| format!("refused: {e}"))?;
                let head = &bytes[..bytes.len().min(4096)];
                Ok(Output::text(format!(
                    "read: {}",
                    String::from_utf8_lossy(head)
                )))
            }
            "write" => {
                let path = args["path"].as_str().ok_or("`path` must be a string")?;
                let text = args["text"].as_str().ok_or("`text` must be a string")?;
                std::fs::write(path, text).map_err(|e| format!("refused: {e}"))?;
                Ok(Output::text("written"))
            }
            "env" => {
                let name = args["name"].as_str().ok_or("`name` must be a string")?;
                Ok(Output::text(
                    std::env::var(name).unwrap_or_else(|_| format!("{name} is not set")),
                ))
            }
            other => Err(format!("unknown operation {other}")),
        }
    }
}

fn main() {
    if let Some(ms) = std::env::var("FAULTY_START_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    if std::env::var_os("FAULTY_BAD_HANDSHAKE").is_some_and(|v| v == "1") {
        println!("hello, I am not a handshake");
        std::thread::sleep(Duration::from_secs(3600));
    }
    if let Ok(path) = std::env::var("FAULTY_ANNOUNCE") {
        println!(
            "{}",
            plugin_sdk::host::Endpoint::unix(path).handshake_line()
        );
        std::thread::sleep(Duration::from_secs(3600));
    }
    if std::env::var_os("FAULTY_IGNORE_STDIN").is_some_and(|v| v == "1") {
        // SAFETY: no other thread runs yet; nothing reads the environment concurrently.
        unsafe { std::env::remove_var(plugin_sdk::STDIN_LIFELINE_KEY) };
    }
    plugin_sdk::serve(Faulty)
}
