//! Test harness: spawns the real `awf` binary and speaks MCP (JSON lines) to it with a
//! deliberately independent, raw client (no code shared with the crate under test but
//! mcpserver's in-memory pipe, for in-process sessions). The one MCP client of awf's
//! tests: [`Server`] for a live session (with the `awf` process, or in-process with a
//! server awf assembles), [`Requests`] for messages written ahead to a file a server reads
//! as its stdin.
#![allow(dead_code)]

pub mod restricted;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const AWF: &str = env!("CARGO_BIN_EXE_awf");

/// A fresh directory with `root/` (the workspace) and `outside/` (holding a secret),
/// under the target's tmp dir, which is NOT the system temp dir (Bash may write there).
pub fn workspace(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "TOPSECRET\n").unwrap();
    (base, root, outside)
}

/// A JSON-RPC request.
pub fn request_message(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A JSON-RPC notification; `Value::Null` params are left out.
pub fn notification(method: &str, params: Value) -> Value {
    let mut message = json!({"jsonrpc": "2.0", "method": method});
    if !params.is_null() {
        message["params"] = params;
    }
    message
}

/// What this client says about itself in `initialize`.
pub fn initialize_params() -> Value {
    json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "awf-tests", "version": "0"}})
}

/// Messages written ahead, one per line, for a server whose stdin is a file (one started
/// by a step's shell, not by the test). Request ids count from 1, as [`Server`]'s do.
#[derive(Default)]
pub struct Requests {
    lines: String,
    next_id: i64,
}

impl Requests {
    /// `initialize` and `notifications/initialized`.
    pub fn initialized() -> Requests {
        Requests::default()
            .request("initialize", initialize_params())
            .notify("notifications/initialized", Value::Null)
    }

    pub fn request(mut self, method: &str, params: Value) -> Requests {
        self.next_id += 1;
        let message = request_message(self.next_id, method, params);
        self.push(&message)
    }

    pub fn notify(self, method: &str, params: Value) -> Requests {
        self.push(&notification(method, params))
    }

    pub fn call(self, tool: &str, args: Value) -> Requests {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    fn push(mut self, message: &Value) -> Requests {
        self.lines.push_str(&format!("{message}\n"));
        self
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, &self.lines).unwrap();
    }
}

/// What the client is connected to.
enum Peer {
    /// `awf` as a child process on pipes.
    Process(Child),
    /// An `mcpserver::Server` serving on a thread, over an in-memory pipe pair.
    InProcess(JoinHandle<std::io::Result<mcpserver::StopReason>>),
}

pub struct Server {
    peer: Peer,
    stdin: Option<Box<dyn Write + Send>>,
    stdout: BufReader<Box<dyn Read + Send>>,
    stderr: Arc<Mutex<String>>,
    /// Set once the child's stderr reached its end: [`Server::finish`] and [`Server::wait`]
    /// wait for it, so that the last lines the server wrote before it exited are not missed.
    stderr_read: Arc<AtomicBool>,
    next_id: i64,
    /// Messages [`Server::answer`] read past while waiting for its answer (notifications,
    /// the server's own requests), kept for [`Server::notification`].
    passed_over: Vec<Value>,
    /// Dropped with the server; until then the watchdog waits (see [`watchdog`]).
    _watchdog: Option<std::sync::mpsc::Sender<()>>,
}

/// How long one server of a test may live. Not a timing assertion: past it the server is
/// killed so that a test waiting on an answer that never comes fails (its read sees the end
/// of the output) rather than hanging the suite.
const SERVER_LIFETIME_BOUND: Duration = Duration::from_secs(600);

/// Kills `pid` with SIGKILL unless the returned sender is dropped first.
fn watchdog(pid: u32) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            rx.recv_timeout(SERVER_LIFETIME_BOUND)
        {
            eprintln!("watchdog: server {pid} still alive after {SERVER_LIFETIME_BOUND:?}: killed");
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    tx
}

impl Server {
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(AWF);
        cmd.args(args)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("TRACEPARENT");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Server::start_command(cmd)
    }

    /// Starts `cmd`, which runs `awf` (directly, or through a wrapper that execs it), with
    /// piped stdio.
    pub fn start_command(mut cmd: Command) -> Server {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn awf");
        let stdin = child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn Write + Send>);
        let stdout = BufReader::new(Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>);
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let stderr_read = Arc::new(AtomicBool::new(false));
        let read = stderr_read.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            read.store(true, Ordering::SeqCst);
        });
        let watchdog = Some(watchdog(child.id()));
        Server {
            peer: Peer::Process(child),
            stdin,
            stdout,
            stderr,
            stderr_read,
            next_id: 1,
            passed_over: Vec::new(),
            _watchdog: watchdog,
        }
    }

    /// Serves `server` on a thread of this test process, spoken to like a child's pipes.
    /// Not initialized: the test chooses what it asks for.
    pub fn in_process(server: mcpserver::Server) -> Server {
        let (client, server_end) = mcpserver::memory::pair();
        let serving = std::thread::spawn(move || {
            let (reader, writer) = server_end.split();
            server.serve(reader, writer)
        });
        let (reader, writer) = client.split();
        Server {
            peer: Peer::InProcess(serving),
            stdin: Some(Box::new(writer)),
            stdout: BufReader::new(Box::new(reader)),
            stderr: Arc::new(Mutex::new(String::new())),
            stderr_read: Arc::new(AtomicBool::new(true)),
            next_id: 1,
            passed_over: Vec::new(),
            _watchdog: None,
        }
    }

    fn child(&mut self) -> &mut Child {
        match &mut self.peer {
            Peer::Process(child) => child,
            Peer::InProcess(_) => panic!("an in-process server has no process"),
        }
    }

    pub fn root(root: &Path) -> Server {
        let mut s = Server::start(&["mcp-serve", "--root", root.to_str().unwrap()], &[]);
        s.initialize();
        s
    }

    pub fn pid(&self) -> i32 {
        match &self.peer {
            Peer::Process(child) => child.id() as i32,
            Peer::InProcess(_) => panic!("an in-process server has no pid"),
        }
    }

    pub fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn read_message(&mut self) -> Option<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Sends a request, returns the whole answer message.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.answer(id)
    }

    pub fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&request_message(id, method, params));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&notification(method, params));
    }

    pub fn answer(&mut self, id: i64) -> Value {
        loop {
            let msg = self
                .read_message()
                .unwrap_or_else(|| panic!("no answer to {id}; stderr: {}", self.stderr()));
            if msg["id"] == json!(id) {
                return msg;
            }
            self.passed_over.push(msg);
        }
    }

    /// The next notification named `method`, whether it came before an answer already
    /// read (a server may notify before it answers the call that caused it) or comes next.
    pub fn notification(&mut self, method: &str) -> Value {
        if let Some(i) = self.passed_over.iter().position(|m| m["method"] == method) {
            return self.passed_over.remove(i);
        }
        loop {
            let msg = self
                .read_message()
                .unwrap_or_else(|| panic!("no {method}; stderr: {}", self.stderr()));
            if msg["method"] == method && msg.get("id").is_none() {
                return msg;
            }
            self.passed_over.push(msg);
        }
    }

    pub fn initialize(&mut self) -> Value {
        let a = self.request("initialize", initialize_params());
        assert!(a.get("result").is_some(), "initialize failed: {a}");
        self.notify("notifications/initialized", Value::Null);
        a
    }

    /// Calls a tool; returns (text, isError). Panics on a protocol error.
    pub fn call(&mut self, tool: &str, args: Value) -> (String, bool) {
        let a = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let result = a
            .get("result")
            .unwrap_or_else(|| panic!("protocol error calling {tool}: {a}"));
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (text, result["isError"].as_bool().unwrap_or(false))
    }

    pub fn ok(&mut self, tool: &str, args: Value) -> String {
        let (text, err) = self.call(tool, args.clone());
        assert!(!err, "{tool} {args} failed: {text}");
        text
    }

    pub fn err(&mut self, tool: &str, args: Value) -> String {
        let (text, err) = self.call(tool, args.clone());
        assert!(err, "{tool} {args} should have failed but returned: {text}");
        text
    }

    /// Calls a tool whose arguments do not fit: expects JSON-RPC -32602, returns its message.
    pub fn invalid(&mut self, tool: &str, args: Value) -> String {
        let a = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_eq!(
            a["error"]["code"], -32602,
            "{tool} {args} should be refused with -32602: {a}"
        );
        a["error"]["message"].as_str().unwrap_or("").to_string()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn close_input(&mut self) {
        drop(self.stdin.take());
    }

    /// Closes stdin and waits for the exit; returns the status and the rest of stdout.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        self.close_input();
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let status = self.child().wait().unwrap();
        let stderr = self.stderr_to_its_end();
        (status, rest, stderr)
    }

    pub fn wait(mut self) -> (ExitStatus, String) {
        let status = self.child().wait().unwrap();
        let s = self.stderr_to_its_end();
        (status, s)
    }

    /// Everything the exited server wrote on stderr: the reader thread may still be taking
    /// the last lines out of the pipe when the exit is seen. Bounded, for a grandchild that
    /// kept the pipe open (the test then fails on what is missing, not by hanging).
    fn stderr_to_its_end(&self) -> String {
        eventually(|| self.stderr_read.load(Ordering::SeqCst));
        self.stderr()
    }

    /// Ends an in-process session: closes its input and expects the server to stop
    /// without error.
    pub fn finish_in_process(mut self) {
        self.close_input();
        match self.peer {
            Peer::InProcess(serving) => {
                serving.join().unwrap().unwrap();
            }
            Peer::Process(_) => panic!("finish_in_process on a child process"),
        }
    }
}

/// Waits (bounded) until `cond` holds; returns whether it did. Not a timing assertion:
/// the bound only keeps a broken build from hanging the suite.
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The live (non-zombie) processes, as this test sees them, with `arg` among their
/// arguments: how a test finds a process the agent's Bash started (in its own PID
/// namespace, `$$` and `$!` are numbers of that namespace).
pub fn pids_with_arg(arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let args = std::fs::read(e.path().join("cmdline")).ok()?;
            (!dead(pid) && args.split(|b| *b == 0).any(|a| a == arg.as_bytes())).then_some(pid)
        })
        .collect()
}

/// True when process `pid` is gone or a zombie (killed, not yet reaped).
pub fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

pub fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line not JSON ({e}): {l}"))
        })
        .collect()
}

pub fn write_config(dir: &Path, config: &Value) -> PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, serde_json::to_vec_pretty(config).unwrap()).unwrap();
    p
}

/// `awf` as every test starts it, its arguments still to add: in `dir`, stdin closed, and
/// nothing of the test's own environment that would change what it does: no plugins of the
/// machine (`AWF_PLUGINS_PATH` empty), no OTLP endpoint or trace parent, no OpenAI key. A
/// test sets what it needs after (the last setting of a variable wins).
pub fn awf(dir: &Path) -> Command {
    let mut cmd = Command::new(AWF);
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .env("AWF_PLUGINS_PATH", "")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("TRACEPARENT")
        .env_remove("OPENAI_API_KEY");
    cmd
}

/// `awf run WF --output json` in `dir`, as [`awf`]: the summary [`run_summary`] reads.
pub fn awf_run(dir: &Path, wf: &Path) -> Command {
    let mut cmd = awf(dir);
    cmd.arg("run").arg(wf).args(["--output", "json"]);
    cmd
}

/// `awf validate WF --output json` in `dir`, as [`awf`].
pub fn awf_validate(dir: &Path, wf: &Path) -> Command {
    let mut cmd = awf(dir);
    cmd.arg("validate").arg(wf).args(["--output", "json"]);
    cmd
}

/// Sends SIGINT to a running `awf run --output json` (stdout piped), waits for it and
/// returns its exit status and its JSON summary.
pub fn interrupt_run(child: &mut Child) -> (ExitStatus, Value) {
    // SAFETY: kill has no memory preconditions; the pid is our unreaped child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let summary = serde_json::from_str(&stdout).unwrap();
    (status, summary)
}

/// A fresh empty directory `awf-<name>-<pid>` under the target's tmp dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("awf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `python3` runs: the fake agent CLI ([`fake_agent`]) is a Python script. Its
/// absence skips the test, except in CI where it fails it.
pub fn python_available() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is required in CI"
        );
        eprintln!("skipping: python3 not found (the fake agent CLI is a Python script)");
    }
    ok
}

/// The fake agent CLI: started as a provider's `options.command`, it starts the injected
/// `awf mcp-serve` and behaves as `FAKE_AGENT_MODE` says.
pub fn fake_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workflows/fake_agent.py")
}

/// The JSON summary of `awf run --output json`; panics showing both streams if there is
/// none.
pub fn run_summary(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON summary ({e}): stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The entry of state `name` in an `awf run` summary.
pub fn summary_state<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["state"] == name)
        .unwrap_or_else(|| panic!("no state {name} in {summary:#}"))
}

/// The pids written one per line to `file`; none when it does not exist.
pub fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The audit records of type `kind` (`tool.call`, `tool.result`, `session.end`).
pub fn records<'a>(audit: &'a [Value], kind: &str) -> Vec<&'a Value> {
    audit.iter().filter(|r| r["type"] == kind).collect()
}

/// Every record of every JSONL file in `dir` (the audit files of a run).
pub fn audit_dir_lines(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        out.extend(audit_lines(&e.path()));
    }
    out
}

/// Where .ci/run installs the pinned tools the tests drive: `AWF_TOOLS_DIR`, else the
/// repository's `.tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

/// True when the pinned tool at `path` is installed; otherwise a skip with a message, or a
/// failure in CI (`CI=true`), where every tool must be there.
pub fn tool_available(path: &Path, what: &str) -> bool {
    if path.exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{what} is missing at {} (CI=true)",
        path.display()
    );
    eprintln!(
        "SKIP: {what} is missing at {} (run .ci/run to install it)",
        path.display()
    );
    false
}

/// A server of these tests' own (a fixture that prints the port it listens on as its first
/// line of stdout), killed when dropped.
pub struct PortServer {
    child: Child,
    pub port: u16,
}

impl PortServer {
    pub fn start(mut cmd: Command) -> PortServer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the test server");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the test server said {first:?}, not its port"));
        PortServer { child, port }
    }
}

impl Drop for PortServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
