//! `openai_compatible` end to end: `awf run` on a workflow whose agent state talks Chat
//! Completions to the fake model server (tests/fake_model), which makes the model Read a
//! fixture file, Grep the work tree and Edit a file through the in-process tool server.
//! Asserted: the edit on disk, the three call/result pairs in the step's audit file, the
//! final output quoting the tool results, what the model was offered, and the message
//! shapes of the multi-turn loop; plus invalid arguments, the turn limit and HTTP errors.

use crate::common;
use crate::fake_model;

use fake_model::{FakeModel, Script, private_tmp};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const AWF: &str = env!("CARGO_BIN_EXE_awf");

struct Case {
    dir: PathBuf,
    work: PathBuf,
    audit_dir: PathBuf,
}

fn case(tag: &str) -> Case {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-openai-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(work.join("fixture.txt"), "the fixture says hello\n").unwrap();
    std::fs::write(
        work.join("src/lib.rs"),
        "// needle: find me\nfn main() {}\n",
    )
    .unwrap();
    std::fs::write(work.join("target.txt"), "status: before\n").unwrap();
    Case {
        audit_dir: dir.join("audit"),
        dir,
        work,
    }
}

impl Case {
    fn workflow(&self, model: &FakeModel, extra_options: &str, proxy: &str) -> PathBuf {
        let wf = self.dir.join("wf.yaml");
        std::fs::write(
            &wf,
            format!(
                r#"
name: openai-e2e
states:
  initial: fix
  fix:
    type: agent
    provider: openai_compatible
    prompt: Read fixture.txt, find the needle, then set the status to after.
    timeout: 60s
    options:
      base_url: {base}/v1
      model: fake-model
      api_key_env: AWF_TEST_OPENAI_KEY
      system_prompt: You are a careful coding agent.
      temperature: 0
      max_completion_tokens: 512
{extra_options}
    mcp_proxy:
{proxy}
    on_success: done
  done:
    type: terminal
"#,
                base = model.base_url()
            ),
        )
        .unwrap();
        wf
    }

    fn run(&self, wf: &Path) -> (Output, Value) {
        self.run_with(wf, &[])
    }

    fn run_with(&self, wf: &Path, extra_env: &[(&str, &str)]) -> (Output, Value) {
        let out = common::awf_run(&self.work, wf)
            .envs(extra_env.iter().copied())
            .arg("--audit-dir")
            .arg(&self.audit_dir)
            .env("TMPDIR", private_tmp(&self.audit_dir))
            .env("AWF_TEST_OPENAI_KEY", "sk-test-123456")
            .output()
            .unwrap();
        let s = common::run_summary(&out);
        (out, s)
    }

    fn audit(&self) -> Vec<Value> {
        common::audit_dir_lines(&self.audit_dir)
    }
}

fn fix(s: &Value) -> &Value {
    &s["states"][0]
}

const ON: &str = "      enable: true";

#[test]
fn read_grep_edit_through_the_in_process_tool_server() {
    let c = case("e2e");
    let model = FakeModel::start(
        Script::new()
            .call("Read", json!({"path": "fixture.txt"}))
            .call(
                "Grep",
                json!({"pattern": "needle", "output_mode": "content"}),
            )
            .call(
                "Edit",
                json!({"path": "target.txt", "old": "before", "new": "after"}),
            ),
    );
    let (out, s) = c.run(&c.workflow(&model, "", ON));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        model.describe()
    );

    // The edit happened on disk.
    assert_eq!(
        std::fs::read_to_string(c.work.join("target.txt")).unwrap(),
        "status: after\n"
    );

    // Three call/result pairs, in order, paired by call id.
    let audit = c.audit();
    let calls: Vec<&Value> = audit.iter().filter(|r| r["type"] == "tool.call").collect();
    let results: Vec<&Value> = audit
        .iter()
        .filter(|r| r["type"] == "tool.result")
        .collect();
    let tools: Vec<&str> = calls.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["Read", "Grep", "Edit"]);
    assert_eq!(results.len(), 3);
    for (call, result) in calls.iter().zip(&results) {
        assert_eq!(call["call_id"], result["call_id"]);
        assert_eq!(result["is_error"], false, "{result}");
        assert_eq!(call["step_id"], "1-fix");
    }
    // The request ids are the model's tool_call ids.
    assert_eq!(calls[0]["request_id"], "call_1");
    assert!(audit.iter().any(|r| r["type"] == "session.start"));
    assert!(audit.iter().any(|r| r["type"] == "session.end"));

    // The final output is the model's answer, quoting every tool result.
    let output = fix(&s)["output"].as_str().unwrap();
    assert!(output.starts_with("FAKE-MODEL-FINAL"), "{output}");
    assert!(output.contains("the fixture says hello"), "{output}");
    assert!(output.contains("needle: find me"), "{output}");
    assert_eq!(
        fix(&s)["tool_calls"],
        json!({"Edit": 1, "Grep": 1, "Read": 1})
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Edit 1 · Grep 1 · Read 1"),
        "final progress line: {stderr}"
    );
    assert_eq!(
        fix(&s)["usage"]["total_tokens"],
        4 * 18,
        "usage summed over the 4 turns"
    );

    // What the model was offered and how the conversation was sent.
    let reqs = model.main_requests();
    assert_eq!(reqs.len(), 4, "{}", model.describe());
    assert_eq!(
        model.offered_tools(),
        ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]
    );
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.headers["authorization"], "Bearer sk-test-123456");
    assert_eq!(first.body["tool_choice"], "auto");
    assert_eq!(first.body["model"], "fake-model");
    assert_eq!(first.body["temperature"], 0.0);
    assert_eq!(first.body["max_completion_tokens"], 512);
    assert_eq!(first.body["messages"][0]["role"], "system");
    assert_eq!(first.body["messages"][1]["role"], "user");
    let last = &reqs[3].body["messages"];
    let roles: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool"
        ]
    );
    assert_eq!(last[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(last[3]["tool_call_id"], "call_1");
    assert!(
        last[3]["content"]
            .as_str()
            .unwrap()
            .contains("the fixture says hello")
    );
}

/// The in-process server's Bash starts from the allowlist too: neither the model key
/// (which awf holds and sends in the Authorization header) nor a token exported to
/// `awf run` reaches a Bash result, hence the model.
#[test]
fn the_model_key_never_reaches_a_bash_result() {
    let c = case("nokey");
    // The shell computes the marker: it appears only in the Bash result.
    let model = FakeModel::start(Script::new().call(
        "Bash",
        json!({"command": "echo ENV-BEGIN-$((6*7)); env; echo ENV-END"}),
    ));
    let wf = c.workflow(&model, "", ON);
    let planted = "planted-secret-value-5x8";
    let (out, _) = c.run_with(&wf, &[("AWF_PLANTED_SECRET_TOKEN", planted)]);
    let ctx = format!(
        "{}\n--- fake model ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        model.describe()
    );
    assert!(out.status.success(), "{ctx}");
    let requests = model.requests();
    assert!(
        requests.iter().any(|r| r
            .headers
            .get("authorization")
            .is_some_and(|a| a.contains("sk-test-123456"))),
        "the key was not in awf's hands at all\n{ctx}"
    );
    let bodies: String = requests.iter().map(|r| r.body.to_string()).collect();
    assert!(
        bodies.contains("ENV-BEGIN-42") && bodies.contains("PATH="),
        "the Bash result never reached the model\n{ctx}"
    );
    assert!(
        !bodies.contains("sk-test-123456"),
        "the key reached the model\n{ctx}"
    );
    assert!(
        !bodies.contains(planted),
        "a planted token reached the model\n{ctx}"
    );
}

#[test]
fn invalid_arguments_go_back_to_the_model_as_a_tool_error() {
    let c = case("badargs");
    let model = FakeModel::start(Script::new().call_raw("Read", "{\"path\": fixture.txt"));
    let (out, s) = c.run(&c.workflow(&model, "", ON));
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let reqs = model.main_requests();
    let msgs = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let tool = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    let text = tool["content"].as_str().unwrap();
    assert!(
        text.starts_with("ERROR:") && text.contains("not a JSON object"),
        "{text}"
    );
    // It never reached the tool server.
    assert!(c.audit().iter().all(|r| r["type"] != "tool.call"));
    assert!(
        fix(&s)["output"]
            .as_str()
            .unwrap()
            .contains("not a JSON object")
    );
}

/// Arguments that do not fit a tool go back to the model as an error naming the tool and
/// the field, and the call is audited as a pair (in-process as over MCP).
#[test]
fn arguments_that_do_not_fit_go_back_to_the_model_and_are_audited() {
    let c = case("misfit");
    let model = FakeModel::start(Script::new().call("Read", json!({"file_path": "fixture.txt"})));
    let (out, s) = c.run(&c.workflow(&model, "", ON));
    assert_eq!(out.status.code(), Some(0), "{s:#}\n{}", model.describe());
    let reqs = model.main_requests();
    let msgs = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let tool = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    let text = tool["content"].as_str().unwrap();
    assert!(
        text.starts_with("ERROR: invalid arguments for tool \"Read\"")
            && text.contains("file_path"),
        "{text}"
    );
    let audit = c.audit();
    let call = audit.iter().find(|r| r["type"] == "tool.call").unwrap();
    let result = audit.iter().find(|r| r["type"] == "tool.result").unwrap();
    assert_eq!(call["call_id"], result["call_id"]);
    assert_eq!(
        (&call["tool"], &call["source"]),
        (&json!("Read"), &json!("builtin"))
    );
    assert_eq!(call["request_id"], "call_1");
    assert_eq!(result["outcome"], "invalid_arguments");
    assert_eq!(result["is_error"], true);
}

#[test]
fn an_endless_tool_loop_stops_at_the_turn_limit_with_a_user_error() {
    let c = case("endless");
    let model = FakeModel::start(
        Script::new()
            .call("Glob", json!({"pattern": "*.txt"}))
            .endless(),
    );
    let (out, s) = c.run(&c.workflow(&model, "      max_tool_turns: 3", ON));
    assert_eq!(out.status.code(), Some(1), "{s:#}");
    assert_eq!(fix(&s)["error"]["code"], "USER.OPENAI.TOO_MANY_TOOL_TURNS");
    assert!(
        fix(&s)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tool_turns")
    );
    assert_eq!(fix(&s)["tool_calls"]["Glob"], 3);
    assert_eq!(model.main_requests().len(), 4);
}

#[test]
fn http_errors_are_execution_errors_with_status_and_body() {
    let c = case("http");
    let model = FakeModel::start(
        Script::new()
            .call("Read", json!({"path": "fixture.txt"}))
            .fail_with(503, r#"{"error": {"message": "model overloaded"}}"#),
    );
    let (out, s) = c.run(&c.workflow(&model, "", ON));
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    let e = &fix(&s)["error"];
    assert_eq!(e["code"], "EXECUTION.OPENAI.HTTP_ERROR");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("503") && msg.contains("model overloaded"),
        "{msg}"
    );
    // The endpoint the workflow names, not the relay's route it went through.
    assert!(
        msg.contains(&format!("{}/v1/chat/completions", model.base_url())),
        "{msg}"
    );
}

#[test]
fn a_proxy_error_stops_the_run_before_the_model_is_called() {
    let c = case("proxyerr");
    let model = FakeModel::start(Script::new().call("Read", json!({"path": "fixture.txt"})));
    let wf = c.workflow(
        &model,
        "",
        "      enable: true\n      intercept_builtins: false",
    );
    let (code, stderr) = {
        let out = common::awf(&c.work).arg("run").arg(&wf).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(1));
    assert!(stderr.contains("USER.MCP_PROXY.EMPTY_PROXY"), "{stderr}");
    assert!(
        model.requests().is_empty(),
        "the model was called: {}",
        model.describe()
    );
}

#[test]
fn a_model_that_never_answers_hits_the_state_timeout() {
    let c = case("silent");
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for s in listener.incoming().take(1) {
            conns.push(s);
        }
        std::thread::sleep(std::time::Duration::from_secs(30));
    });
    let wf = c.dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: silent
states:
  initial: ask
  ask:
    type: agent
    provider: openai_compatible
    prompt: hi
    timeout: 1s
    options: {{base_url: \"http://127.0.0.1:{port}/v1\", model: m}}
    mcp_proxy: {{enable: true}}
    on_success: done
  done:
    type: terminal
"
        ),
    )
    .unwrap();
    let (out, s) = c.run(&wf);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    let ask = fix(&s);
    assert_eq!(ask["status"], "timeout", "{ask:#}");
    assert!(
        ask["error"]["code"]
            .as_str()
            .unwrap()
            .starts_with("EXECUTION."),
        "{ask:#}"
    );
    drop(held);
}

#[test]
fn sigint_during_a_model_request_stops_the_run() {
    let c = case("sigint");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let conn = listener.incoming().next();
        tx.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(60));
        drop(conn);
    });
    let wf = c.dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: silent
states:
  initial: ask
  ask:
    type: agent
    provider: openai_compatible
    prompt: hi
    options: {{base_url: \"http://127.0.0.1:{port}/v1\", model: m}}
    mcp_proxy: {{enable: true}}
    on_success: done
  done:
    type: terminal
"
        ),
    )
    .unwrap();
    let mut child = common::awf_run(&c.work, &wf)
        .arg("--audit-dir")
        .arg(&c.audit_dir)
        .env("TMPDIR", private_tmp(&c.audit_dir))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The request is in flight once the server has accepted it.
    rx.recv().unwrap();
    let (status, s) = common::interrupt_run(&mut child);
    assert_eq!(status.code(), Some(3), "{s:#}");
    assert_eq!(fix(&s)["status"], "interrupted");
    assert_eq!(s["error"]["code"], "EXECUTION.RUN.INTERRUPTED");
    // The in-process session was ended (not a crash) and the step's files removed.
    assert_eq!(fix(&s)["proxy"]["crashed_sessions"], json!([]));
    assert_eq!(fix(&s)["proxy"]["sessions"], 1);
}

/// A model's final text with terminal control sequences (a title, OSC 52 clipboard, a
/// screen clear) reaches the human summary escaped, and `--output json` as JSON escapes.
#[test]
fn control_sequences_in_the_model_s_text_reach_the_terminal_escaped() {
    let c = case("escapes");
    let hostile = "\u{1b}]0;PWNED\u{7}\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2JFINAL";
    let model = FakeModel::start(Script::new().answer_prefix(hostile));
    let wf = c.workflow(&model, "", ON);
    let out = common::awf(&c.work)
        .arg("run")
        .arg(&wf)
        .args(["--audit-dir"])
        .arg(&c.audit_dir)
        .env("TMPDIR", private_tmp(&c.audit_dir))
        .env("AWF_TEST_OPENAI_KEY", "sk-test-123456")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\\x1b]52;c;ZXZpbA==\\x07"), "{stdout}");
    for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "a raw control character on {name}: {text:?}"
        );
    }
    // JSON output keeps the text as it is, JSON-escaped.
    let (out, s) = c.run(&wf);
    assert!(out.status.success());
    assert!(
        fix(&s)["output"].as_str().unwrap().starts_with(hostile),
        "{s:#}"
    );
}

#[test]
fn a_third_party_server_s_tools_reach_the_model_and_are_audited() {
    let c = case("servers");
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/servers/hostile.py");
    let model = FakeModel::start(
        Script::new()
            .call("hostile_echo", json!({"text": "from the model"}))
            .call("hostile_read_file", json!({"path": "/etc/hostname"}))
            .call("Read", json!({"path": "fixture.txt"})),
    );
    let proxy = |variant: &str| {
        format!(
            "      enable: true\n      servers:\n        hostile:\n          command: [python3, {}]\n          env: {{HOSTILE_VARIANT: \"{variant}\"}}\n",
            hostile.display()
        )
    };
    let wf = c.workflow(&model, "", &proxy("1"));
    let (out, s) = c.run(&wf);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{s:#}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        model.describe()
    );
    let output = fix(&s)["output"].as_str().unwrap();
    assert!(output.contains("from the model"), "{output}");
    let audit = c.audit();
    let calls: Vec<(&str, &str)> = audit
        .iter()
        .filter(|r| r["type"] == "tool.call")
        .map(|r| (r["tool"].as_str().unwrap(), r["source"].as_str().unwrap()))
        .collect();
    assert_eq!(
        calls,
        [
            ("hostile_echo", "server:hostile"),
            ("hostile_read_file", "server:hostile"),
            ("Read", "builtin")
        ]
    );
    // The server's tools were pinned beside the workflow, on first use.
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(c.dir.join("wf.lock.json")).unwrap())
            .unwrap();
    assert!(
        lock["servers"]["hostile"]["echo"]["sha256"].is_string(),
        "{lock}"
    );

    // The server changed echo's description: the next run withholds it and says so.
    let model = FakeModel::start(Script::new().call("Read", json!({"path": "fixture.txt"})));
    let wf = c.workflow(&model, "", &proxy("2"));
    let (out, s) = c.run(&wf);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let withheld = &fix(&s)["proxy"]["withheld"];
    assert!(
        withheld["hostile_echo"]
            .as_str()
            .is_some_and(|w| w.contains("changed since pinned")),
        "{s:#}"
    );
    assert!(withheld.get("hostile_env").is_none(), "{withheld}");
}

/// `awf audit verify ARGS…` as the run's user: whether it passed, and what it printed.
fn audit_verify(args: &[&str]) -> (bool, String) {
    let out = Command::new(AWF)
        .args(["audit", "verify"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The head of the step's audit chain is kept in the run state (and the summary); by run
/// id, `awf audit verify` holds the file to it, and so finds records cut from its end at a
/// line boundary, which the chain alone cannot show.
#[test]
fn the_run_state_keeps_the_audit_head_and_verify_by_run_id_finds_a_cut_end() {
    let c = case("audit-head");
    let model = FakeModel::start(Script::new().call("Read", json!({"path": "fixture.txt"})));
    let (out, s) = c.run(&c.workflow(&model, "", ON));
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let run_id = s["run_id"].as_str().expect("run_id").to_string();
    let head = fix(&s)["proxy"]["audit_head"]
        .as_str()
        .unwrap_or_else(|| panic!("no audit_head: {s:#}"))
        .to_string();
    let file = PathBuf::from(fix(&s)["proxy"]["audit_file"].as_str().unwrap());
    let dir = c.audit_dir.to_str().unwrap();

    let (ok, said) = audit_verify(&[&run_id, "--audit-dir", dir]);
    assert!(
        ok && said.contains(": intact,") && said.contains(&head),
        "{said}"
    );
    // The run had --audit-dir: without it, where the file was looked for, and the fix.
    let (ok, said) = audit_verify(&[&run_id]);
    assert!(!ok && said.contains("give it here too"), "{said}");

    // The end cut at a line boundary, from the server's session.end on (the relay's last
    // record may come before or after it): a chain still, but not the kept head.
    let text = std::fs::read_to_string(&file).unwrap();
    let cut = text
        .rfind("\"type\":\"session.end\"")
        .and_then(|at| text[..at].rfind('\n'))
        .map(|nl| nl + 1)
        .unwrap_or_else(|| panic!("no session.end after the first line in {text}"));
    std::fs::write(&file, &text[..cut]).unwrap();
    let (ok, said) = audit_verify(&[file.to_str().unwrap()]);
    assert!(
        ok && said.contains("does not end with session.end"),
        "{said}"
    );
    let (ok, said) = audit_verify(&[&run_id, "--audit-dir", dir]);
    assert!(
        !ok && said.contains("not the head the run state kept"),
        "{said}"
    );

    let (ok, said) = audit_verify(&["no-such-run-or-file"]);
    assert!(
        !ok && said.contains("neither an audit file nor a run awf knows"),
        "{said}"
    );
}

/// With an audit key (`AWF_AUDIT_KEY`), each step's head is signed in the run state; `awf
/// audit verify RUN_ID` with the key finds an audit file and run state rewritten whole (a
/// record changed, the chain and the kept head made anew), which the chain and the kept
/// head alone cannot; without the key it says the signature went unchecked; with another
/// key, it fails. The key reaches no child: not Bash, not a shell step.
#[test]
fn a_signed_head_finds_an_audit_file_and_run_state_rewritten_whole() {
    use awf::telemetry::audit_chain::{anchor, chained, hash};
    const KEY: &str = "k3y-of-the-audit-heads-0123456789abcdef";
    let c = case("audit-key");
    let model = FakeModel::start(
        Script::new()
            .call("Read", json!({"path": "fixture.txt"}))
            .call("Bash", json!({"command": "env"})),
    );
    let state_home = c.dir.join("state");
    std::fs::create_dir_all(&state_home).unwrap();
    let state = state_home.to_str().unwrap();
    let (out, s) = c.run_with(
        &c.workflow(&model, "", ON),
        &[("AWF_AUDIT_KEY", KEY), ("XDG_STATE_HOME", state)],
    );
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let run_id = s["run_id"].as_str().unwrap().to_string();
    let head = fix(&s)["proxy"]["audit_head"].as_str().unwrap().to_string();
    let mac = fix(&s)["proxy"]["audit_head_mac"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(mac.len(), 64, "{s:#}");
    // Bash's env did not have it (the model saw the output).
    let seen: String = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(seen.contains("PATH="), "Bash's env did not run: {seen}");
    assert!(!seen.contains(KEY), "the key reached Bash");

    let dir = c.audit_dir.to_str().unwrap().to_string();
    let verify = |key: Option<&str>| {
        let mut cmd = Command::new(AWF);
        cmd.args(["audit", "verify", &run_id, "--audit-dir", &dir])
            .env("XDG_STATE_HOME", state)
            .env_remove("AWF_AUDIT_KEY");
        if let Some(k) = key {
            cmd.env("AWF_AUDIT_KEY", k);
        }
        let out = cmd.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    let (ok, said) = verify(Some(KEY));
    assert!(
        ok && said.contains("signed with the audit key: verified"),
        "{said}"
    );
    let (ok, said) = verify(None);
    assert!(ok && said.contains("set AWF_AUDIT_KEY"), "{said}");
    let (ok, said) = verify(Some("another-key-0123456789abcdef"));
    assert!(
        !ok && said.contains("does not match its signature"),
        "{said}"
    );

    // Rewritten whole: the Read's path changed, every link made anew, the new head put in
    // the run state.
    let file = PathBuf::from(fix(&s)["proxy"]["audit_file"].as_str().unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    let mut forged = Vec::new();
    let mut prev = None;
    for line in text.lines() {
        let mut record: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
        record.remove("prev");
        if record["type"] == "tool.call" && record["tool"] == "Read" {
            record.insert("arguments".into(), json!({"path": "innocent.txt"}));
        }
        let body = serde_json::to_vec(&Value::Object(record.clone())).unwrap();
        let link = prev.unwrap_or_else(|| anchor(&Value::Object(record)));
        let out = chained(&link, &body);
        prev = Some(hash(&out[..out.len() - 1]));
        forged.extend_from_slice(&out);
    }
    std::fs::write(&file, &forged).unwrap();
    let new_head: String = prev.unwrap().iter().map(|b| format!("{b:02x}")).collect();
    let runs = state_home.join("awf/runs-state").join(&run_id);
    let mut replaced = 0;
    for entry in std::fs::read_dir(&runs).unwrap().flatten() {
        let Ok(t) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if t.contains(&head) {
            std::fs::write(entry.path(), t.replace(&head, &new_head)).unwrap();
            replaced += 1;
        }
    }
    assert!(replaced > 0, "the head is in no file of {}", runs.display());
    // The chain and the kept head take it; the signature does not.
    let (ok, said) = verify(None);
    assert!(ok && said.contains(": intact,"), "{said}");
    let (ok, said) = verify(Some(KEY));
    assert!(
        !ok && said.contains("does not match its signature"),
        "{said}"
    );
}

/// A key that is too short stops the run before anything runs, naming the fix; a shell
/// step's environment has no key.
#[test]
fn a_bad_audit_key_stops_the_run_and_a_shell_step_never_gets_the_key() {
    let c = case("audit-key-env");
    let wf = c.dir.join("env.yaml");
    std::fs::write(
        &wf,
        "\
name: env
states:
  initial: s
  s:
    type: step
    command: env > env.txt
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    let (out, _) = c.run_with(&wf, &[("AWF_AUDIT_KEY", "short")]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        said.contains("under 16") && said.contains("openssl rand"),
        "{said}"
    );
    let (out, s) = c.run_with(&wf, &[("AWF_AUDIT_KEY", "a-good-key-0123456789abcdef")]);
    assert_eq!(out.status.code(), Some(0), "{s:#}");
    let env = std::fs::read_to_string(c.work.join("env.txt")).unwrap();
    assert!(
        env.contains("PATH=") && !env.contains("AWF_AUDIT_KEY"),
        "{env}"
    );
}

/// A model server that is not running (the README's openai_compatible example with no local
/// model): the step says it cannot reach the endpoint and where to look, in awf's words,
/// not that the model answered HTTP 502 (the relay's own answer, told apart by its header).
#[test]
fn a_model_that_is_not_running_is_unreachable_not_an_http_502() {
    let c = case("unreachable");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let wf = c.dir.join("wf.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: nobody-home
states:
  initial: ask
  ask:
    type: agent
    provider: openai_compatible
    prompt: hi
    options: {{base_url: \"http://127.0.0.1:{port}/v1\", model: m}}
    on_success: done
  done:
    type: terminal
"
        ),
    )
    .unwrap();
    let (out, s) = c.run(&wf);
    assert_eq!(out.status.code(), Some(3), "{s:#}");
    let error = &fix(&s)["error"];
    assert_eq!(error["code"], "EXECUTION.OPENAI.UNREACHABLE", "{s:#}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "cannot reach http://127.0.0.1:{port}/v1/chat/completions: "
        )) && message.ends_with("is the model server at options.base_url running?"),
        "{message}"
    );
    assert!(
        !message.contains("HTTP 502") && !message.contains("awf relay"),
        "{message}"
    );
}
