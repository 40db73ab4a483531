//! A small blocking MCP client over a child process's stdio, for `awf tools list|call`:
//! it spawns `awf mcp-serve` for real, so those commands exercise the exact path an
//! agent CLI uses (the quick start needs no model).

use crate::error::{AwfError, codes};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

pub struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

/// A JSON-RPC error answer.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl McpClient {
    /// Starts `command` with piped stdin/stdout (stderr is inherited: the server's logs
    /// and error messages reach the user).
    pub fn spawn(mut command: Command) -> Result<McpClient, AwfError> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                AwfError::new(
                    codes::SPAWN,
                    format!("cannot start {:?}: {e}", command.get_program()),
                )
            })?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(McpClient {
            child,
            stdin,
            stdout,
            next_id: 1,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, message: &Value) -> Result<(), AwfError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| AwfError::new(codes::PROTOCOL, "input already closed"))?;
        let mut line = serde_json::to_vec(message).expect("JSON value serializes");
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|_| stdin.flush())
            .map_err(|e| self.died(&format!("cannot write to the server: {e}")))
    }

    fn died(&mut self, what: &str) -> AwfError {
        // The server's own message went to stderr; say how it ended.
        drop(self.stdin.take());
        match self.child.wait() {
            Ok(status) => {
                let code = match status.code() {
                    Some(1) => codes::CONFIG_INVALID,
                    _ => codes::SERVER_FAILED,
                };
                AwfError::new(
                    code,
                    format!("{what}; awf mcp-serve exited ({status}) (see its message above)"),
                )
            }
            Err(e) => AwfError::new(
                codes::SERVER_FAILED,
                format!("{what}; cannot wait for the server: {e}"),
            ),
        }
    }

    /// Sends a request and waits for its answer (skipping notifications).
    pub fn request(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<Result<Value, RpcError>, AwfError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| self.died(&format!("cannot read from the server: {e}")))?;
            if n == 0 {
                return Err(self.died(&format!(
                    "the server closed its output before answering {method}"
                )));
            }
            let msg: Value = serde_json::from_str(line.trim_end()).map_err(|e| {
                AwfError::new(
                    codes::PROTOCOL,
                    format!(
                        "the server sent a line that is not JSON ({e}): {}",
                        line.trim_end()
                    ),
                )
            })?;
            if msg.get("id") != Some(&json!(id)) {
                continue; // a notification or an unrelated answer
            }
            if let Some(err) = msg.get("error") {
                return Ok(Err(RpcError {
                    code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: err
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                }));
            }
            return Ok(Ok(msg.get("result").cloned().unwrap_or(Value::Null)));
        }
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), AwfError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }

    /// The MCP handshake: `initialize` then `notifications/initialized`.
    pub fn initialize(&mut self) -> Result<Value, AwfError> {
        let result = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2024-11-05",
                    "capabilities": {},
                    "clientInfo": {"name": "awf-tools", "version": env!("CARGO_PKG_VERSION")}
                }),
            )?
            .map_err(|e| {
                AwfError::new(
                    codes::PROTOCOL,
                    format!("initialize failed: {} ({})", e.message, e.code),
                )
            })?;
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    /// Closes the server's input (its signal to drain and exit) and waits for it.
    pub fn close(mut self) -> Result<ExitStatus, AwfError> {
        drop(self.stdin.take());
        self.child.wait().map_err(|e| {
            AwfError::new(
                codes::SERVER_FAILED,
                format!("cannot wait for the server: {e}"),
            )
        })
    }
}
