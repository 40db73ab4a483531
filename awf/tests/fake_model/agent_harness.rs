//! Shared harness of the `agents_*` tests: finds a pinned agent CLI, builds a work tree
//! with fixtures, writes the `awf mcp-serve` config, runs the CLI the way a provider's
//! [`AgentCommand`] says (against the fake model), and checks the step's outcome: the edit
//! on disk, the audit pairs, the answer quoting the tool results, the tools offered.
//! Included next to `fake_model` with `#[path = "fake_model/agent_harness.rs"]`.
#![allow(dead_code)]

use crate::fake_model::{FakeModel, Script, private_tmp};
use awf::providers::{AgentCommand, AgentOutput, AgentRequest, CliProvider, ProxyInjection};
use serde_json::{Map, Value, json};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../plugin-sdk/tests/support/examples.rs"]
pub mod plugin_examples;

pub const AWF: &str = env!("CARGO_BIN_EXE_awf");

/// One agent CLI at a time per test binary: each is a heavy process (a Node or Bun
/// runtime, an MCP server), and CI machines have few cores; parallel runs would only make
/// every run slower and closer to its time limit.
static ONE_CLI_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn cli_slot() -> std::sync::MutexGuard<'static, ()> {
    // A test that panicked while holding the lock poisons it; the lock guards nothing else.
    ONE_CLI_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Per-run limit for one CLI: starts take seconds; this only stops a hung run.
pub const RUN_LIMIT: Duration = Duration::from_secs(150);

/// The prompt of the direct CLI runs.
pub const PROMPT: &str =
    "Read docs/fixture.txt, grep the tree for the needle, then edit src/config.txt.";
/// Text of the fixture file the model reads; the answer must quote it.
pub const FIXTURE_TEXT: &str = "FIXTURE-LINE alpha-42: the model must quote this";
/// What the model greps for; found in `src/needle.rs` only.
pub const NEEDLE: &str = "NEEDLE_7731";

/// The pinned CLI `name` under the tools dir, or `None` (with a message) when it is not
/// installed; with CI=true a missing CLI fails the test instead.
pub fn agent_cli(name: &str) -> Option<PathBuf> {
    let tools = std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let path = tools.join("agents/node_modules/.bin").join(name);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{name} is not installed at {}; .ci/run installs the pinned agent CLIs there",
            path.display()
        );
    }
    eprintln!(
        "SKIP: {name} is not installed at {} (run .ci/run or npm install in .tools/agents)",
        path.display()
    );
    None
}

/// A work tree, a private step dir and the mcp-serve config of one test.
pub struct Step {
    pub base: PathBuf,
    pub root: PathBuf,
    pub home: PathBuf,
    pub step_dir: PathBuf,
    pub audit: PathBuf,
    pub serve_config: PathBuf,
}

impl Step {
    pub fn new(name: &str) -> Step {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("awf-agents-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        let home = base.join("home");
        let step_dir = base.join("step");
        for d in [&root, &home, &step_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(&step_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("docs/fixture.txt"), format!("{FIXTURE_TEXT}\n")).unwrap();
        std::fs::write(
            root.join("src/needle.rs"),
            format!("// marker {NEEDLE} lives here\nfn main() {{}}\n"),
        )
        .unwrap();
        std::fs::write(root.join("src/config.txt"), "mode = OLD_VALUE\n").unwrap();
        let audit = base.join("audit.jsonl");
        let serve_config = step_dir.join("serve.json");
        std::fs::write(
            &serve_config,
            json!({"root": root, "audit_path": audit, "run_id": "agents-test", "step_id": name})
                .to_string(),
        )
        .unwrap();
        Step {
            base,
            root,
            home,
            step_dir,
            audit,
            serve_config,
        }
    }

    pub fn injection(&self, intercept_builtins: bool) -> ProxyInjection {
        ProxyInjection {
            server_name: "awf".into(),
            command: AWF.into(),
            args: vec![
                "mcp-serve".into(),
                "--config".into(),
                self.serve_config.to_string_lossy().into_owned(),
            ],
            env: vec![(
                "TRACEPARENT".into(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            )],
            intercept_builtins,
            step_dir: self.step_dir.clone(),
        }
    }

    /// The audit records (JSONL).
    pub fn audit_records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }
}

/// The script of every test: Read the fixture, Grep the tree, Edit a file, then answer.
pub fn read_grep_edit() -> Script {
    Script::new()
        .call("Read", json!({"path": "docs/fixture.txt"}))
        .call("Grep", json!({"pattern": NEEDLE, "output_mode": "content"}))
        .call(
            "Edit",
            json!({"path": "src/config.txt", "old": "OLD_VALUE", "new": "NEW_VALUE"}),
        )
}

/// What one CLI run left behind.
pub struct Run {
    pub command: AgentCommand,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub output: Result<AgentOutput, awf::error::AwfError>,
}

impl Run {
    /// Everything a failing assertion should show.
    pub fn context(&self, fake: &FakeModel) -> String {
        format!(
            "command: {:?} {:?}\nenv: {:?}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- fake model ---\n{}",
            self.command.program,
            self.command.args,
            self.command.env,
            self.status,
            tail(&self.stdout),
            tail(&self.stderr),
            fake.describe()
        )
    }
}

fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(6000);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Builds the provider's command and runs it in the work tree, as the runner does: own
/// process group, stdin from /dev/null, HOME in the test's dir (no user config leaks in).
pub fn run_cli(
    provider: &dyn CliProvider,
    program: &Path,
    step: &Step,
    options: Value,
    proxy: &ProxyInjection,
    extra_env: &[(&str, String)],
) -> Run {
    let options: Map<String, Value> = serde_json::from_value(options).unwrap();
    let mut options = options;
    options.insert("command".into(), json!(program));
    let req = AgentRequest {
        state: "edit",
        prompt: PROMPT,
        options: &options,
        workdir: &step.root,
        proxy: Some(proxy),
        relay: None,
        conversation: None,
    };
    let command = provider.command(&req).expect("provider builds its command");
    let _slot = cli_slot();
    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .current_dir(&step.root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // A clean, private home: no user settings, sessions or credentials join the test.
    cmd.env("HOME", &step.home)
        .env("XDG_CONFIG_HOME", step.home.join(".config"))
        .env("XDG_DATA_HOME", step.home.join(".local/share"))
        .env("XDG_CACHE_HOME", step.home.join(".cache"))
        .env("XDG_STATE_HOME", step.home.join(".local/state"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("TRACEPARENT");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    for (k, v) in &command.env {
        cmd.env(k, v);
    }
    for k in &command.env_remove {
        cmd.env_remove(k);
    }
    let mut child = cmd.spawn().expect("spawn the agent CLI");
    let pid = child.id() as i32;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > RUN_LIMIT {
            // SAFETY: signalling the process group this test created.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the CLI left in its group (an MCP server, a helper) goes with it.
    // SAFETY: as above; ESRCH when the group is already gone is fine.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    let output = provider.parse_output(&stdout, &stderr, status);
    Run {
        command,
        status,
        stdout,
        stderr,
        output,
    }
}

/// The tools the model was offered besides awf's six (named `<prefix><tool>`).
pub fn offered_beyond_awf(fake: &FakeModel, prefix: &str) -> Vec<String> {
    let ours: Vec<String> = ["Read", "Write", "Edit", "Bash", "Glob", "Grep"]
        .iter()
        .map(|t| format!("{prefix}{t}"))
        .collect();
    fake.offered_tools()
        .into_iter()
        .filter(|t| !ours.contains(t))
        .collect()
}

/// The checks every successful Read/Grep/Edit run must pass.
pub fn assert_read_grep_edit(step: &Step, fake: &FakeModel, run: &Run, prefix_forms: &str) {
    let ctx = run.context(fake);
    let output = match &run.output {
        Ok(o) => o,
        Err(e) => panic!("the agent run failed: {e}\n{ctx}"),
    };
    // The model called our three tools, in order.
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    let expected: Vec<String> = ["Read", "Grep", "Edit"]
        .iter()
        .map(|t| format!("{prefix_forms}{t}"))
        .collect();
    assert_eq!(calls, expected, "tool calls\n{ctx}");
    // The prompt reached the model whole (it follows `--` or `--prompt=` on the command line).
    let first = fake
        .main_requests()
        .first()
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(
        first.contains(PROMPT),
        "the prompt did not reach the model\n{ctx}"
    );
    let side: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| !r.main)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    eprintln!("side requests (not script steps): {side:?}");
    // The edit reached the disk.
    let edited = std::fs::read_to_string(step.root.join("src/config.txt")).unwrap();
    assert_eq!(edited, "mode = NEW_VALUE\n", "{ctx}");
    // The audit file holds the three call/result pairs.
    let records = step.audit_records();
    let calls: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .collect();
    let results: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .collect();
    let names: Vec<&str> = calls.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["Read", "Grep", "Edit"],
        "audit: {records:#?}\n{ctx}"
    );
    assert_eq!(results.len(), 3, "audit: {records:#?}");
    for (c, r) in calls.iter().zip(&results) {
        assert_eq!(c["call_id"], r["call_id"], "audit pair");
        assert_eq!(r["outcome"], "ok", "audit result: {r}");
    }
    // The final answer quotes what the tools returned.
    assert!(
        output.text.contains("FAKE-MODEL-FINAL"),
        "answer: {:?}\n{ctx}",
        output.text
    );
    assert!(
        output.text.contains(FIXTURE_TEXT),
        "answer lacks the Read result: {:?}\n{ctx}",
        output.text
    );
    assert!(
        output.text.contains("needle.rs"),
        "answer lacks the Grep result: {:?}\n{ctx}",
        output.text
    );
}

// ---- Through `awf run` ----------------------------------------------------------------

/// The plugin-sdk example `notes` as a user installs it (`<dir>/notes/{plugin.yaml,notes}`).
pub fn install_notes_plugin(plugins_dir: &Path) {
    plugin_examples::install("notes", plugins_dir);
}

/// What `awf run` left behind.
pub struct WorkflowRun {
    pub status: ExitStatus,
    pub summary: Value,
    pub stderr: String,
    pub audit: Vec<Value>,
}

impl WorkflowRun {
    /// The summary entry of one state.
    pub fn state(&self, name: &str) -> &Value {
        self.summary["states"]
            .as_array()
            .and_then(|s| s.iter().find(|x| x["state"] == name))
            .unwrap_or_else(|| panic!("no state {name} in the summary: {:#}", self.summary))
    }

    /// Checks that `awf run` succeeded; returns what a failed check should show: the
    /// summary, the end of awf's stderr and what the fake model saw.
    pub fn assert_success(&self, fake: &FakeModel) -> String {
        let ctx = format!(
            "summary: {:#}\n--- stderr ---\n{}\n--- fake model ---\n{}",
            self.summary,
            tail(&self.stderr),
            fake.describe()
        );
        assert!(
            self.status.success(),
            "awf run failed ({})\n{ctx}",
            self.status
        );
        ctx
    }
}

/// Runs `awf run` on a one-agent-state workflow (`provider`, `options`, `mcp_proxy` as
/// YAML flow mappings) in the step's work tree, with the test's private home and
/// `AWF_TEST_FAKE_KEY` as the API key variable the options may name.
pub fn run_workflow(
    step: &Step,
    provider: &str,
    options: &Value,
    mcp_proxy: &str,
    plugins_dir: Option<&Path>,
    extra_env: &[(&str, String)],
) -> WorkflowRun {
    run_workflow_full(
        step,
        provider,
        options,
        mcp_proxy,
        plugins_dir,
        extra_env,
        "",
    )
}

/// [`run_workflow`] with more keys for the agent state (`budget: {...}`, say).
#[allow(dead_code)]
pub fn run_workflow_with(
    step: &Step,
    provider: &str,
    options: &Value,
    state_extra: &str,
    extra_env: &[(&str, String)],
) -> WorkflowRun {
    run_workflow_full(
        step,
        provider,
        options,
        "{enable: true}",
        None,
        extra_env,
        state_extra,
    )
}

fn run_workflow_full(
    step: &Step,
    provider: &str,
    options: &Value,
    mcp_proxy: &str,
    plugins_dir: Option<&Path>,
    extra_env: &[(&str, String)],
    state_extra: &str,
) -> WorkflowRun {
    let wf = step.base.join("wf.yaml");
    let audit_dir = step.base.join("run-audit");
    // JSON is YAML: the options go in as a flow mapping.
    std::fs::write(
        &wf,
        format!(
            r#"name: agents-{provider}
description: one agent step whose tools go through awf
states:
  initial: work
  work:
    type: agent
    provider: {provider}
    prompt: "Read docs/fixture.txt, grep the tree for {NEEDLE}, then edit src/config.txt."
    timeout: 120s
    options: {options}
    mcp_proxy: {mcp_proxy}
    {state_extra}
    on_success: done
    on_failure: failed
  done:
    type: terminal
    status: success
  failed:
    type: terminal
    status: failure
"#
        ),
    )
    .unwrap();
    let mut cmd = crate::common::awf_run(&step.root, &wf);
    cmd.arg("--audit-dir")
        .arg(&audit_dir)
        .env("TMPDIR", private_tmp(&audit_dir))
        .env("HOME", &step.home)
        .env("XDG_CONFIG_HOME", step.home.join(".config"))
        .env("XDG_DATA_HOME", step.home.join(".local/share"))
        .env("XDG_CACHE_HOME", step.home.join(".cache"))
        .env("XDG_STATE_HOME", step.home.join(".local/state"))
        .env("AWF_TEST_FAKE_KEY", "fake-key-for-the-fake-model")
        .env(
            "AWF_PLUGINS_PATH",
            plugins_dir.map(Path::as_os_str).unwrap_or_default(),
        );
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = {
        let _slot = cli_slot();
        cmd.output().expect("spawn awf run")
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "awf run printed no JSON summary ({e}):\n{}\n--- stderr ---\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let mut audit = Vec::new();
    for e in std::fs::read_dir(&audit_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap();
        audit.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
        // The step's server and awf run's relay both append to it: one chain still.
        let verified = Command::new(AWF)
            .args(["audit", "verify"])
            .arg(e.path())
            .output()
            .expect("spawn awf audit verify");
        assert!(
            verified.status.success(),
            "awf audit verify {}: {}{}",
            e.path().display(),
            String::from_utf8_lossy(&verified.stdout),
            String::from_utf8_lossy(&verified.stderr)
        );
    }
    WorkflowRun {
        status: out.status,
        summary,
        stderr,
        audit,
    }
}

/// The checks of a Read/Grep/Edit step run through `awf run`.
pub fn assert_workflow_read_grep_edit(
    step: &Step,
    fake: &FakeModel,
    run: &WorkflowRun,
    prefix: &str,
) {
    let ctx = run.assert_success(fake);
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    let expected: Vec<String> = ["Read", "Grep", "Edit"]
        .iter()
        .map(|t| format!("{prefix}{t}"))
        .collect();
    assert_eq!(calls, expected, "tool calls\n{ctx}");
    assert_eq!(
        std::fs::read_to_string(step.root.join("src/config.txt")).unwrap(),
        "mode = NEW_VALUE\n",
        "{ctx}"
    );
    let tool_calls: Vec<&Value> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .collect();
    let results: Vec<&Value> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .collect();
    let names: Vec<&str> = tool_calls
        .iter()
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["Read", "Grep", "Edit"],
        "audit {:#?}\n{ctx}",
        run.audit
    );
    assert_eq!(results.len(), 3);
    for (c, r) in tool_calls.iter().zip(&results) {
        assert_eq!(c["call_id"], r["call_id"]);
        assert_eq!(r["outcome"], "ok", "{r}");
    }
    let work = run.state("work");
    let output = work["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("FAKE-MODEL-FINAL"),
        "output {output:?}\n{ctx}"
    );
    assert!(
        output.contains(FIXTURE_TEXT),
        "output lacks the Read result\n{ctx}"
    );
    assert!(
        output.contains("needle.rs"),
        "output lacks the Grep result\n{ctx}"
    );
    for t in ["Read", "Grep", "Edit"] {
        assert_eq!(work["tool_calls"][t], 1, "tool_calls of the summary\n{ctx}");
    }
}

/// The script of the no-interception runs: one plugin call through awf, then the answer.
pub fn notes_add() -> Script {
    Script::new().call(
        "notes_add",
        json!({"text": "remember the fixture", "tags": ["t"]}),
    )
}

/// The checks of a `notes_add` step run with `intercept_builtins: false`.
pub fn assert_workflow_notes_add(fake: &FakeModel, run: &WorkflowRun, prefix: &str) {
    let ctx = run.assert_success(fake);
    let calls: Vec<String> = fake.tool_calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(calls, [format!("{prefix}notes_add")], "{ctx}");
    let names: Vec<&str> = run
        .audit
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes_add"], "{ctx}");
    // The plugin's result reached the model: its text (with its data as JSON text after
    // it) in the handshake era; from revision 2026-07-28 on the data also goes as
    // structuredContent, which Claude Code (a client of that revision) shows the model
    // instead of the text.
    let revision = run
        .audit
        .iter()
        .find(|r| r["type"] == "tool.call")
        .and_then(|r| r["protocol_version"].as_str())
        .unwrap_or_default();
    let seen = match revision {
        "2026-07-28" => r#""text":"remember the fixture""#,
        _ => "added note 1",
    };
    let output = run.state("work")["output"].as_str().unwrap_or_default();
    assert!(
        output.contains(seen),
        "output {output:?} (revision {revision})\n{ctx}"
    );
    let offered = fake.offered_tools();
    assert!(
        !offered
            .iter()
            .any(|t| t.ends_with("Read") && t.starts_with(prefix)),
        "awf builtins offered although intercept_builtins is false: {offered:?}"
    );
}

/// The model answers every step with HTTP 400: the provider must report an agent failure
/// whose message carries the model's error text, not an empty success.
pub fn assert_model_error_is_an_agent_failure(
    provider: &dyn CliProvider,
    program: &Path,
    name: &str,
    options: impl Fn(&FakeModel) -> Value,
    extra_env: &[(&str, String)],
) {
    let fake = FakeModel::start(
        read_grep_edit().fail_with(400, r#"{"error":{"message":"MODEL-SAYS-NO","type":"invalid_request_error","code":400,"status":"INVALID_ARGUMENT"},"type":"error"}"#),
    );
    let step = Step::new(&format!("{name}-model-error"));
    let run = run_cli(
        provider,
        program,
        &step,
        options(&fake),
        &step.injection(true),
        extra_env,
    );
    let ctx = run.context(&fake);
    match &run.output {
        Ok(o) => panic!("a failed model call parsed as success: {:?}\n{ctx}", o.text),
        Err(e) => {
            assert_eq!(e.code(), "EXECUTION.AGENT.FAILED", "{e}");
            assert!(
                e.message().contains("MODEL-SAYS-NO"),
                "the error does not carry the model's message: {e}\n{ctx}"
            );
            eprintln!("{name} model error → {e}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(step.root.join("src/config.txt")).unwrap(),
        "mode = OLD_VALUE\n"
    );
}

/// A provider's options against the fake model: the base URL in the form each takes, a
/// model name, the test key variable and, for a CLI, its program.
pub fn model_options(provider: &str, program: Option<&Path>, fake: &FakeModel) -> Value {
    let base = fake.base_url();
    let (model, url) = match provider {
        "claude" => ("claude-sonnet-4-5", base),
        "gemini" => ("gemini-2.5-flash", base),
        "codex" => ("gpt-5-codex", format!("{base}/v1")),
        "opencode" | "openai_compatible" => ("fake-model", format!("{base}/v1")),
        other => panic!("no case for {other}"),
    };
    let mut o = json!({"api_key_env": "AWF_TEST_FAKE_KEY", "model": model, "base_url": url});
    if let Some(p) = program {
        o["command"] = json!(p);
    }
    o
}
