//! `awf validate` over the fixture workflows in tests/fixtures/workflows/: each problem
//! code with its message, path, line and the process exit code, through the real binary.
//! The plugin cases install the plugin-sdk `notes` example as a user would (a directory
//! with `plugin.yaml` and the executable, found through AWF_PLUGINS_PATH).

use crate::common;
use crate::harness::plugin_examples;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/workflows")
        .join(name)
}

/// A scratch directory (the validation's working directory, so no `.awf/plugins` of the
/// repository is picked up).
fn scratch(tag: &str) -> PathBuf {
    common::scratch(&format!("validate-{tag}"))
}

/// A plugins directory holding the `notes` example (installed once per test binary).
fn plugins_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("plugins").join("plugins");
        plugin_examples::install("notes", &dir);
        dir
    })
    .clone()
}

struct Validated {
    code: i32,
    json: Value,
    stderr: String,
}

fn validate(name: &str, plugins: Option<&Path>) -> Validated {
    // A directory per call: tests validating the same fixture at once must not remove
    // each other's working directory.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let cwd = scratch(&format!("{}-{n}", name.trim_end_matches(".yaml")));
    let empty = cwd.join("no-plugins");
    std::fs::create_dir_all(&empty).unwrap();
    let plugins = plugins.map_or(empty, Path::to_path_buf);
    let run = |format: &[&str]| {
        common::awf(&cwd)
            .arg("validate")
            .args(format)
            .arg(fixture(name))
            .env("AWF_PLUGINS_PATH", &plugins)
            .env_remove("XDG_STATE_HOME")
            .output()
            .unwrap()
    };
    let out = run(&["--output", "json"]);
    let human = run(&[]);
    assert_eq!(
        out.status.code(),
        human.status.code(),
        "both formats exit alike"
    );
    Validated {
        code: out.status.code().unwrap(),
        json: serde_json::from_slice(&out.stdout).expect("validate --output json prints JSON"),
        stderr: String::from_utf8_lossy(&human.stderr).into_owned(),
    }
}

impl Validated {
    fn problems(&self) -> &Vec<Value> {
        self.json["problems"].as_array().unwrap()
    }

    /// The only problem, checked for its code, path and line.
    fn single(&self, code: &str, path: &str, line: u64) -> &Value {
        let p = self.problems();
        assert_eq!(p.len(), 1, "exactly one problem expected: {:#}", self.json);
        let p = &p[0];
        assert_eq!(p["code"], code, "{p:#}");
        assert_eq!(p["path"], path, "{p:#}");
        assert_eq!(p["line"], line, "{p:#}");
        assert!(!p["hint"].as_str().unwrap().is_empty(), "{p:#}");
        // The human form names the same code and path.
        assert!(
            self.stderr.contains(code) && self.stderr.contains(path),
            "{}",
            self.stderr
        );
        p
    }

    /// [`Validated::single`], whose hint also contains `words`.
    fn single_with_hint(&self, code: &str, path: &str, line: u64, words: &str) -> &Value {
        let p = self.single(code, path, line);
        assert!(p["hint"].as_str().unwrap().contains(words), "{p:#}");
        p
    }

    fn message(&self) -> &str {
        self.problems()[0]["message"].as_str().unwrap()
    }
}

#[test]
fn a_clean_workflow_exits_zero() {
    let v = validate("valid_steps.yaml", None);
    assert_eq!(v.code, 0, "{:#}", v.json);
    assert_eq!(v.json["valid"], true);
    assert!(v.problems().is_empty());
}

#[test]
fn unknown_key_under_mcp_proxy() {
    let v = validate("proxy_unknown_key.yaml", None);
    assert_eq!(v.code, 1);
    v.single_with_hint(
        "USER.MCP_PROXY.UNKNOWN_KEY",
        "states.review.mcp_proxy.intercept_builtin",
        10,
        "did you mean `intercept_builtins`",
    );
    assert!(v.message().contains("intercept_builtin"));
}

#[test]
fn unknown_key_in_a_plugin_tools_entry() {
    let v = validate("proxy_unknown_key_entry.yaml", Some(&plugins_dir()));
    assert_eq!(v.code, 1);
    v.single(
        "USER.MCP_PROXY.UNKNOWN_KEY",
        "states.review.mcp_proxy.plugin_tools[0].exposes",
        13,
    );
}

#[test]
fn empty_proxy() {
    let v = validate("proxy_empty.yaml", None);
    assert_eq!(v.code, 1);
    v.single("USER.MCP_PROXY.EMPTY_PROXY", "states.review.mcp_proxy", 8);
    assert!(
        v.message().contains("intercept_builtins: false"),
        "{}",
        v.message()
    );
}

#[test]
fn a_plugin_listed_twice_is_a_name_collision() {
    let v = validate("proxy_name_collision.yaml", Some(&plugins_dir()));
    assert_eq!(v.code, 1);
    v.single(
        "USER.MCP_PROXY.NAME_COLLISION",
        "states.review.mcp_proxy.plugin_tools[1].plugin",
        13,
    );
    assert!(
        v.message().contains("\"notes\" is listed twice"),
        "{}",
        v.message()
    );
}

#[test]
fn unknown_plugin_names_the_search_path() {
    let v = validate("proxy_unknown_plugin.yaml", None);
    assert_eq!(v.code, 1);
    v.single(
        "USER.MCP_PROXY.UNKNOWN_PLUGIN",
        "states.review.mcp_proxy.plugin_tools[0].plugin",
        11,
    );
    assert!(
        v.message().contains("\"jira\"") && v.message().contains("no-plugins"),
        "{}",
        v.message()
    );
}

#[test]
fn unknown_operation_lists_what_the_plugin_offers() {
    let v = validate("proxy_unknown_operation.yaml", Some(&plugins_dir()));
    assert_eq!(v.code, 1);
    let p = v.single(
        "USER.MCP_PROXY.UNKNOWN_OPERATION",
        "states.review.mcp_proxy.plugin_tools[0].expose[1]",
        12,
    );
    assert!(v.message().contains("\"delete\""), "{}", v.message());
    let hint = p["hint"].as_str().unwrap();
    assert!(hint.contains("add") && hint.contains("search"), "{hint}");
}

#[test]
fn proxy_on_a_step_state_is_unsupported() {
    let v = validate("proxy_unsupported_provider.yaml", None);
    assert_eq!(v.code, 1);
    v.single(
        "USER.MCP_PROXY.UNSUPPORTED_PROVIDER",
        "states.build.mcp_proxy",
        7,
    );
}

#[test]
fn bad_yaml_is_a_workflow_error_with_its_line() {
    let v = validate("bad_yaml.yaml", None);
    assert_eq!(v.code, 2);
    let p = &v.problems()[0];
    assert_eq!(p["code"], "WORKFLOW.PARSE.SYNTAX");
    let line = p["line"].as_u64().unwrap();
    assert!(
        (6..=8).contains(&line),
        "the line of the unclosed list: {p:#}"
    );
}

#[test]
fn an_alias_bomb_is_refused_at_the_node_limit() {
    let v = validate("alias_bomb.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let p = &v.problems()[0];
    assert_eq!(p["code"], "WORKFLOW.PARSE.TOO_LARGE", "{p:#}");
    assert!(
        v.message()
            .contains("aliases expand to more than 100000 YAML nodes"),
        "{p:#}"
    );
    assert!(p["hint"].as_str().unwrap().contains("alias"), "{p:#}");
    assert!(
        v.stderr.contains("WORKFLOW.PARSE.TOO_LARGE"),
        "{}",
        v.stderr
    );
}

#[test]
fn unknown_key_elsewhere_is_a_workflow_error() {
    let v = validate("unknown_key.yaml", None);
    assert_eq!(v.code, 2);
    // The typo, and the missing `command` it causes.
    let codes: Vec<&str> = v
        .problems()
        .iter()
        .map(|p| p["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"WORKFLOW.PARSE.UNKNOWN_KEY"), "{codes:?}");
    let p = v
        .problems()
        .iter()
        .find(|p| p["code"] == "WORKFLOW.PARSE.UNKNOWN_KEY")
        .unwrap();
    assert_eq!(p["path"], "states.build.comand");
    assert_eq!(p["line"], 6);
    assert!(
        p["hint"]
            .as_str()
            .unwrap()
            .contains("did you mean `command`")
    );
}

#[test]
fn missing_initial_state() {
    let v = validate("missing_initial.yaml", None);
    assert_eq!(v.code, 2);
    v.single_with_hint(
        "WORKFLOW.STATE.MISSING_INITIAL",
        "states.initial",
        2,
        "initial: build",
    );
}

#[test]
fn transition_to_a_missing_state() {
    let v = validate("unknown_target.yaml", None);
    assert_eq!(v.code, 2);
    v.single(
        "WORKFLOW.STATE.UNKNOWN_TARGET",
        "states.build.on_success",
        7,
    );
    assert!(v.message().contains("\"deploy\""));
}

#[test]
fn every_problem_is_reported_at_once_and_the_worst_category_wins() {
    let v = validate("many_problems.yaml", None);
    let mut got: Vec<(String, String)> = v
        .problems()
        .iter()
        .map(|p| {
            (
                p["code"].as_str().unwrap().into(),
                p["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    got.sort();
    let want = [
        ("USER.MCP_PROXY.EMPTY_PROXY", "states.review.mcp_proxy"),
        ("WORKFLOW.PARSE.INVALID_VALUE", "states.test.timeout"),
        ("WORKFLOW.TEMPLATE.UNDECLARED_INPUT", "states.review.prompt"),
    ];
    assert_eq!(
        got,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(v.code, 2, "WORKFLOW (2) is more severe than USER (1)");
}

#[test]
fn a_valid_sandbox_block_validates_and_creates_nothing() {
    let v = validate("sandbox_valid.yaml", None);
    assert_eq!(v.code, 0, "{:#}", v.json);
    let home = std::env::var("HOME").unwrap();
    assert!(
        !Path::new(&home)
            .join(".cache/awf-validate-sandbox-not-created")
            .exists()
    );
}

#[test]
fn bad_sandbox_values_name_the_key_and_the_fix() {
    let v = validate("sandbox_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let find = |path: &str| -> &Value {
        v.problems()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json))
    };
    let base = "states.build.mcp_proxy.sandbox";
    // (path, code, line, words of the message, words of the hint)
    let want = [
        (
            "writable[0]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            12,
            "whole file system",
            "~/.cargo",
        ),
        (
            "writable[1]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            13,
            "cannot be created",
            "create it",
        ),
        (
            "writable[2]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            14,
            "relative",
            "absolute",
        ),
        (
            "writable[3]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            15,
            "state directory",
            "narrower",
        ),
        (
            "network",
            "WORKFLOW.PARSE.INVALID_VALUE",
            16,
            "allow, deny or a host list",
            "network: {allow: [crates.io",
        ),
        (
            "env_passthrough[0]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            17,
            "every variable",
            "CARGO_*",
        ),
        (
            "env.TMPDIR",
            "WORKFLOW.PARSE.INVALID_VALUE",
            18,
            "private temp",
            "writable",
        ),
        (
            "landlok",
            "USER.MCP_PROXY.UNKNOWN_KEY",
            19,
            "landlok",
            "did you mean `landlock`",
        ),
    ];
    for (path, code, line, msg, hint) in want {
        let p = find(&format!("{base}.{path}"));
        assert_eq!(p["code"], code, "{p:#}");
        assert_eq!(p["line"], line, "{p:#}");
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
        assert!(v.stderr.contains(&format!("{base}.{path}")), "{}", v.stderr);
    }
    assert_eq!(v.problems().len(), want.len(), "{:#}", v.json);
}

#[test]
fn network_deny_with_landlock_off_is_refused() {
    let v = validate("sandbox_deny_without_landlock.yaml", None);
    assert_eq!(v.code, 2);
    v.single_with_hint(
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.build.mcp_proxy.sandbox.network",
        10,
        "network: allow",
    );
}

#[test]
fn a_missing_file_is_a_user_error() {
    let out = common::awf(Path::new("/"))
        .args(["validate", "/nonexistent/wf.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/wf.yaml"));
}

/// The README's first command typed outside the checkout: the error says where a relative
/// path was looked for, and `awf run` does not send the user to validate a file it cannot
/// read.
#[test]
fn a_relative_path_not_found_names_the_directory_it_was_read_from() {
    let dir = scratch("relative-missing");
    let dir = dir.canonicalize().unwrap();
    for args in [
        &["run", "examples/workflows/first.yaml"][..],
        &["validate", "examples/workflows/first.yaml"],
    ] {
        let out = common::awf(&dir).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "a relative path is read from the current directory, {}",
                dir.display()
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("check with `awf validate"), "{args:?}: {err}");
    }
}

#[test]
fn unknown_key_in_the_tool_policy() {
    let v = validate("proxy_tools_unknown_key.yaml", None);
    assert_eq!(v.code, 1);
    v.single_with_hint(
        "USER.MCP_PROXY.UNKNOWN_KEY",
        "states.review.mcp_proxy.tools.read_olny",
        11,
        "did you mean `read_only`",
    );
}

#[test]
fn an_unknown_denied_tool_names_the_tools_of_the_step() {
    let v = validate("proxy_tools_unknown_deny.yaml", None);
    assert_eq!(v.code, 1);
    let p = v.single_with_hint(
        "USER.TOOLS.UNKNOWN_TOOL",
        "states.review.mcp_proxy.tools.deny[1]",
        11,
        "Read, Write, Edit, Bash, Glob, Grep",
    );
    assert!(v.message().contains("\"Wrte\""), "{p}");
}

#[test]
fn no_reachable_terminal_state_is_a_warning_that_keeps_the_workflow_valid() {
    let v = validate("no_terminal_reachable.yaml", None);
    assert_eq!(
        v.code, 0,
        "a warning does not fail validation: {:#}",
        v.json
    );
    assert_eq!(v.json["valid"], true);
    let p = v.single("WORKFLOW.STATE.NO_TERMINAL_REACHABLE", "states.initial", 3);
    assert_eq!(p["severity"], "warning");
    assert!(v.message().contains("\"build\""), "{}", v.message());
    assert!(
        v.stderr.contains("warning: no terminal state"),
        "{}",
        v.stderr
    );
    // A terminal state that can be reached: no warning; an error says it is one.
    assert!(validate("valid_steps.yaml", None).problems().is_empty());
    let e = validate("unknown_target.yaml", None);
    assert_eq!(e.problems()[0]["severity"], "error");
}

#[test]
fn an_unknown_template_filter_names_the_filter_and_the_fix() {
    let v = validate("template_unknown_filter.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let p = v.single_with_hint(
        "WORKFLOW.TEMPLATE.UNKNOWN_FILTER",
        "states.show.command",
        9,
        "| raw",
    );
    assert!(
        v.message().contains("\"upper\"") && v.message().contains("{{.inputs.file | upper}}"),
        "{p:#}"
    );
}

#[test]
fn templates_after_a_backslash_or_in_arithmetic_are_refused_in_commands() {
    let v = validate("template_unsafe_places.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let p = v.problems();
    assert_eq!(p.len(), 2, "{:#}", v.json);
    for x in p {
        assert_eq!(x["code"], "WORKFLOW.TEMPLATE.UNSAFE_PLACE", "{x:#}");
        assert_eq!(x["path"], "states.count.command", "{x:#}");
        assert_eq!(x["line"], 11, "{x:#}");
    }
    let msg = |i: usize| p[i]["message"].as_str().unwrap();
    assert!(msg(0).contains("backslash"), "{}", msg(0));
    assert!(
        p[0]["hint"]
            .as_str()
            .unwrap()
            .contains("remove the backslash"),
        "{:#}",
        p[0]
    );
    assert!(msg(1).contains("$((...))"), "{}", msg(1));
    assert!(
        p[1]["hint"].as_str().unwrap().contains("case $n in"),
        "{:#}",
        p[1]
    );
}

#[test]
fn validate_json_states_each_proxied_step_s_read_policy() {
    let v = validate("sandbox_read.yaml", None);
    assert_eq!(v.code, 0, "{:#}", v.json);
    let confined = &v.json["sandboxes"]["confined"];
    assert_eq!(confined["read"], "confined", "{:#}", v.json);
    let readable: Vec<&str> = confined["readable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for want in ["/usr", "/etc", "/proc", "/opt/awf-validate-shared-lib"] {
        assert!(readable.contains(&want), "{want} missing: {readable:?}");
    }
    let home = std::env::var("HOME").unwrap();
    assert!(!readable.contains(&home.as_str()), "{readable:?}");
    assert_eq!(confined["network"], "deny");
    let host = &v.json["sandboxes"]["host"];
    assert_eq!(host["read"], "host", "{:#}", v.json);
    assert_eq!(host["readable"], json!([]));
    assert_eq!(host["processes"], 2048);
    assert_eq!(confined["processes"], 1024, "the default cap");
}

#[test]
fn bad_read_policies_name_the_key_and_the_fix() {
    let v = validate("sandbox_read_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let base = "states.build.mcp_proxy.sandbox";
    let want = [
        (format!("{base}.read"), "confined or host", "read: host"),
        (
            format!("{base}.readable[0]"),
            "whole file system",
            "read: host",
        ),
        (format!("{base}.readable[1]"), "relative", "absolute"),
        (format!("{base}.hidden[0]"), "whole file system", "hide"),
        (
            format!("{base}.processes"),
            "from 300 to",
            "processes: 2048",
        ),
        (
            "states.off.mcp_proxy.sandbox.read".to_string(),
            "needs Landlock",
            "read: host",
        ),
    ];
    for (path, msg, hint) in &want {
        let p = v
            .problems()
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json));
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
    }
    assert_eq!(v.problems().len(), want.len(), "{:#}", v.json);
}

#[test]
fn a_host_list_is_stated_by_validate_and_each_bad_entry_named_with_the_fix() {
    let v = validate("sandbox_network.yaml", None);
    assert_eq!(v.code, 0, "{:#}", v.json);
    assert_eq!(
        v.json["sandboxes"]["build"]["network"],
        json!({"allow": ["crates.io", "*.crates.io", "github.com:443", "host.awf.internal:4873", "10.0.0.5:5000"]})
    );

    let v = validate("sandbox_network_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let base = "states.build.mcp_proxy.sandbox.network.allow";
    for (i, msg) in ["every host", "is a URL", "needs a port", "port"]
        .iter()
        .enumerate()
    {
        let path = format!("{base}[{i}]");
        let p = v
            .problems()
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json));
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
        assert!(
            p["hint"]
                .as_str()
                .unwrap()
                .contains("host.awf.internal:PORT"),
            "{p:#}"
        );
    }
    let p = v
        .problems()
        .iter()
        .find(|p| p["path"] == "states.other.mcp_proxy.sandbox.network.hosts")
        .unwrap_or_else(|| panic!("no problem for the unknown key: {:#}", v.json));
    assert!(p["code"].as_str().unwrap().contains("UNKNOWN_KEY"), "{p:#}");
}

#[test]
fn bad_budgets_and_telemetry_name_the_key_and_the_fix() {
    let v = validate("agent_budget_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    for (path, msg) in [
        ("states.build.budget.requests", "whole number from 1"),
        ("states.build.budget.tokns", "tokns"),
        ("states.build.telemetry.model_content", "true or false"),
        ("states.other.budget", "names no limit"),
    ] {
        let p = v
            .problems()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json));
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
    }
}

/// `awf validate --output json` of an agent state whose `mcp_proxy.sandbox` is `sandbox`
/// (YAML lines at the sandbox's indentation), written in `dir`, as [`validate_written`].
fn validate_sandbox(dir: &Path, sandbox: &str) -> (Option<i32>, Value) {
    let wf = dir.join("sandbox.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: s
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: p
    mcp_proxy:
      enable: true
      sandbox:
{sandbox}    on_success: done
  done:
    type: terminal
"
        ),
    )
    .unwrap();
    validate_written(dir, &wf)
}

/// `awf validate --output json` of `wf` in `dir`, with no plugins and awf's state directory
/// in `dir/state`: the exit code and the JSON.
fn validate_written(dir: &Path, wf: &Path) -> (Option<i32>, Value) {
    let out = common::awf_validate(dir, wf)
        .env("AWF_PLUGINS_PATH", dir.join("no-plugins"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).expect("validate --output json prints JSON"),
    )
}

#[test]
fn a_sandbox_path_through_a_link_is_a_warning_naming_where_it_leads() {
    let dir = scratch("links");
    let target = dir.join("real-keys");
    std::fs::create_dir_all(&target).unwrap();
    let link = dir.join("keys-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (code, json) = validate_sandbox(
        &dir,
        &format!(
            "        readable: [{0}]\n        hidden: [{0}/inner]\n",
            link.display()
        ),
    );
    assert_eq!(code, Some(0), "a warning only");
    let base = "states.a.mcp_proxy.sandbox";
    let real = std::fs::canonicalize(&target).unwrap();
    for path in [format!("{base}.readable[0]"), format!("{base}.hidden[0]")] {
        let p = json["problems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no warning at {path}: {json:#}"));
        assert_eq!(p["severity"], "warning", "{p:#}");
        assert_eq!(p["code"], "USER.MCP_PROXY.SANDBOX_PATH_IS_LINK", "{p:#}");
        assert!(
            p["message"]
                .as_str()
                .unwrap()
                .contains(&real.display().to_string()),
            "{p:#}"
        );
    }
}

#[test]
fn a_unix_sockets_entry_that_is_no_socket_is_an_error_naming_it() {
    let dir = scratch("unix-sockets");
    std::fs::write(dir.join("plain.txt"), "x").unwrap();
    let (code, json) = validate_sandbox(
        &dir,
        &format!(
            "        unix_sockets: [{}, {}]\n",
            dir.join("plain.txt").display(),
            dir.join("not-yet.sock").display()
        ),
    );
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{json:#}");
    let p = &problems[0];
    assert_eq!(
        p["path"], "states.a.mcp_proxy.sandbox.unix_sockets[0]",
        "{p:#}"
    );
    assert!(
        p["message"].as_str().unwrap().contains("not a unix socket"),
        "{p:#}"
    );
    assert_eq!(code, Some(2));
}

#[test]
fn a_valid_servers_block_validates_clean_and_states_each_server_s_jail() {
    let v = validate("servers_valid.yaml", None);
    assert_eq!(v.code, 0, "{:#}", v.json);
    assert!(v.problems().is_empty(), "{:#}", v.json);
    let servers = &v.json["server_sandboxes"];
    let github = &servers["review"]["github"];
    assert_eq!(github["command"], json!(["sh", "-c", "exec cat"]));
    assert_eq!(github["read"], "confined", "{github:#}");
    assert_eq!(github["network"], json!({"allow": ["api.github.com"]}));
    assert_eq!(
        github["writable"],
        json!([]),
        "nothing but its own TMPDIR and HOME"
    );
    let readable: Vec<&str> = github["readable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        readable.contains(&"/opt/awf-validate-server-data"),
        "{readable:?}"
    );
    let home = std::env::var("HOME").unwrap();
    assert!(!readable.contains(&home.as_str()), "{readable:?}");
    assert_eq!(servers["review"]["Files-2"]["network"], "deny");
    // The step's Bash may reach the network; its server still may not.
    assert_eq!(v.json["sandboxes"]["build"]["network"], "allow");
    assert_eq!(servers["build"]["everything"]["network"], "deny");
    assert_eq!(servers["build"]["everything"]["processes"], 1024);
    // With intercept_builtins: false, Bash has no sandbox to state.
    assert!(v.json["sandboxes"].get("review").is_none(), "{:#}", v.json);
}

#[test]
fn bad_server_keys_name_the_path_line_and_fix() {
    let v = validate("servers_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let base = "states.review.mcp_proxy";
    // (path under base, code, line, words of the message, words of the hint)
    let want = [
        (
            "servers.github.comand",
            "USER.MCP_PROXY.UNKNOWN_KEY",
            12,
            "comand",
            "did you mean `command`",
        ),
        (
            "servers.github.command",
            "WORKFLOW.PARSE.MISSING_FIELD",
            11,
            "no `command`",
            "without a shell",
        ),
        (
            "servers.empty.command",
            "WORKFLOW.PARSE.INVALID_VALUE",
            14,
            "is empty",
            "command: [npx",
        ),
        (
            "servers.typed.command[1]",
            "WORKFLOW.PARSE.WRONG_TYPE",
            16,
            "must be text",
            "single value",
        ),
        (
            "servers.tools.tools.deny",
            "WORKFLOW.PARSE.INVALID_VALUE",
            19,
            "both allow and deny",
            "keep one",
        ),
        (
            "servers.timeouts.timeout_seconds",
            "WORKFLOW.PARSE.INVALID_VALUE",
            22,
            "from 1 to 86400",
            "timeout_seconds: 300",
        ),
        (
            "servers.environment.env.GITHUB-TOKEN",
            "WORKFLOW.PARSE.INVALID_VALUE",
            25,
            "GITHUB-TOKEN",
            "shell variable name",
        ),
        (
            "servers.environment.env_passthrough[0]",
            "WORKFLOW.PARSE.INVALID_VALUE",
            26,
            "GH_*_TOKEN",
            "trailing *",
        ),
        (
            "servers.git_hub",
            "USER.MCP_PROXY.INVALID_TOOL_NAME",
            27,
            "'_'",
            "<name>_<tool>",
        ),
        (
            "servers.renamed.rename.search_repositories",
            "USER.MCP_PROXY.INVALID_TOOL_NAME",
            31,
            "'.'",
            "renamed_<name>",
        ),
        (
            "servers.shell.command",
            "WORKFLOW.PARSE.WRONG_TYPE",
            33,
            "must be a list",
            "[sh, -c",
        ),
        (
            "pins",
            "WORKFLOW.PARSE.INVALID_VALUE",
            34,
            "does not exist",
            "existing directory",
        ),
    ];
    for (path, code, line, msg, hint) in want {
        let path = format!("{base}.{path}");
        let p = v
            .problems()
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json));
        assert_eq!(p["code"], code, "{p:#}");
        assert_eq!(p["line"], line, "{p:#}");
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
        assert!(v.stderr.contains(&path), "{}", v.stderr);
    }
    assert_eq!(v.problems().len(), want.len(), "{:#}", v.json);
}

#[test]
fn a_server_named_like_an_exposed_plugin_is_a_name_collision() {
    let v = validate("servers_collision.yaml", Some(&plugins_dir()));
    assert_eq!(v.code, 1);
    v.single_with_hint(
        "USER.MCP_PROXY.NAME_COLLISION",
        "states.review.mcp_proxy.servers.notes",
        14,
        "rename the server",
    );
    assert!(
        v.message().contains("plugin_tools[0]") && v.message().contains("notes_<tool>"),
        "{}",
        v.message()
    );
}

#[test]
fn a_server_whose_program_is_not_found_names_the_server_the_command_and_the_fix() {
    let v = validate("servers_command_not_found.yaml", None);
    assert_eq!(v.code, 1, "{:#}", v.json);
    let base = "states.review.mcp_proxy.servers";
    // (server, line, words of the message, words of the hint); the state whose proxy is
    // off names the same missing program and is not checked.
    let want = [
        (
            "github",
            12,
            "\"awf-no-such-server-program\" is not found on PATH",
            "install awf-no-such-server-program",
        ),
        (
            "local",
            14,
            "\"/nonexistent/awf-server\" is not an executable file",
            "fix the path",
        ),
        ("nopath", 16, "on PATH (/nonexistent-bin)", "absolute path"),
    ];
    for (server, line, msg, hint) in want {
        let path = format!("{base}.{server}.command[0]");
        let p = v
            .problems()
            .iter()
            .find(|p| p["path"] == path.as_str())
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json));
        assert_eq!(
            p["code"], "USER.MCP_PROXY.SERVER_COMMAND_NOT_FOUND",
            "{p:#}"
        );
        assert_eq!(p["line"], line, "{p:#}");
        let message = p["message"].as_str().unwrap();
        assert!(message.contains(&format!("server {server:?}")), "{p:#}");
        assert!(message.contains(msg), "{p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
    }
    assert_eq!(v.problems().len(), want.len(), "{:#}", v.json);
}

#[test]
fn with_the_proxy_off_a_server_is_checked_for_its_keys_only() {
    let v = validate("servers_disabled_bad_key.yaml", None);
    assert_eq!(v.code, 1, "{:#}", v.json);
    v.single_with_hint(
        "USER.MCP_PROXY.UNKNOWN_KEY",
        "states.review.mcp_proxy.servers.github.timout_seconds",
        13,
        "did you mean `timeout_seconds`",
    );
}

/// `awf validate --output json` of an agent state whose one server `s` has the sandbox
/// `sandbox` (YAML lines at the sandbox's indentation), written in `dir`, as
/// [`validate_written`].
fn validate_server_sandbox(dir: &Path, sandbox: &str) -> (Option<i32>, Value) {
    let wf = dir.join("server.yaml");
    std::fs::write(
        &wf,
        format!(
            "\
name: s
states:
  initial: a
  a:
    type: agent
    provider: claude
    prompt: p
    mcp_proxy:
      enable: true
      servers:
        s:
          command: [sh]
          sandbox:
{sandbox}    on_success: done
  done:
    type: terminal
"
        ),
    )
    .unwrap();
    validate_written(dir, &wf)
}

#[test]
fn a_server_s_sandbox_paths_are_checked_as_bash_s() {
    let dir = scratch("server-sandbox");
    let target = dir.join("real-data");
    std::fs::create_dir_all(&target).unwrap();
    let link = dir.join("data-link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let base = "states.a.mcp_proxy.servers.s.sandbox";

    let (code, json) = validate_server_sandbox(
        &dir,
        &format!("            readable: [{}]\n", link.display()),
    );
    assert_eq!(code, Some(0), "a warning only: {json:#}");
    let p = &json["problems"][0];
    assert_eq!(p["severity"], "warning", "{json:#}");
    assert_eq!(p["code"], "USER.MCP_PROXY.SANDBOX_PATH_IS_LINK", "{p:#}");
    assert_eq!(p["path"], format!("{base}.readable[0]"), "{p:#}");
    assert_eq!(p["line"], 14, "{p:#}");
    let real = std::fs::canonicalize(&target).unwrap();
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains(&real.display().to_string()),
        "{p:#}"
    );

    let (code, json) = validate_server_sandbox(
        &dir,
        &format!(
            "            writable: [{}, relative/dir]\n",
            dir.join("state").display()
        ),
    );
    assert_eq!(code, Some(2), "{json:#}");
    let problems = json["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{json:#}");
    for (i, (msg, hint)) in [("state directory", "narrower"), ("relative", "absolute")]
        .iter()
        .enumerate()
    {
        let p = &problems[i];
        assert_eq!(p["path"], format!("{base}.writable[{i}]"), "{p:#}");
        assert_eq!(p["code"], "WORKFLOW.PARSE.INVALID_VALUE", "{p:#}");
        assert!(p["message"].as_str().unwrap().contains(msg), "{p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{p:#}");
    }
}

#[test]
fn bounds_and_require_are_checked_with_path_line_and_hint() {
    let v = validate("sandbox_bounds_bad.yaml", None);
    assert_eq!(v.code, 2, "{:#}", v.json);
    let base = "states.build.mcp_proxy.sandbox";
    let find = |path: &str| -> &Value {
        v.problems()
            .iter()
            .find(|p| p["path"] == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {:#}", v.json))
    };
    for (key, line, message, hint) in [
        ("memory", 11, "unit \\\"GB\\\"", "4GiB"),
        ("cpu_seconds", 12, "above 0", "cpu_seconds: 600"),
        ("tmp_size", 13, "not a size", "tmp_size: 1GiB"),
        (
            "require[1]",
            15,
            "\\\"sockets\\\"",
            "reads, processes, network",
        ),
    ] {
        let p = find(&format!("{base}.{key}"));
        assert_eq!(p["code"], "WORKFLOW.PARSE.INVALID_VALUE", "{p:#}");
        assert_eq!(p["line"], line, "{p:#}");
        let m = p["message"].to_string();
        assert!(m.contains(message), "{key}: {p:#}");
        assert!(p["hint"].as_str().unwrap().contains(hint), "{key}: {p:#}");
    }
    // open_files: 8 is below the least (16).
    let p = find(base);
    assert!(
        p["message"].as_str().unwrap().contains("open_files is 8"),
        "{p:#}"
    );
    // A server's sandbox takes no per-call bound.
    let p = find("states.build.mcp_proxy.servers.files.sandbox.memory");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("bounds each Bash call"),
        "{p:#}"
    );

    let ok = validate("sandbox_bounds.yaml", None);
    assert_eq!(ok.code, 0, "{:#}", ok.json);
    let sb = &ok.json["sandboxes"]["build"];
    assert_eq!(sb["bounds"]["memory"], 2u64 << 30, "{sb:#}");
    assert_eq!(sb["bounds"]["tmp_size"], 512u64 << 20, "{sb:#}");
    assert_eq!(sb["bounds"]["open_files"], 4096, "{sb:#}");
}

#[test]
fn a_misspelt_type_says_what_it_is_near_and_nothing_else() {
    // The state with the bad type is still a state: `initial: a` is no second error.
    let v = validate("type_misspelt.yaml", None);
    assert_eq!(v.code, 2, "workflow errors exit 2");
    v.single_with_hint(
        "WORKFLOW.PARSE.INVALID_VALUE",
        "states.a.type",
        5,
        "did you mean `step`?",
    );
}

#[test]
fn a_command_that_is_not_valid_shell_is_refused_before_it_runs() {
    let v = validate("command_unclosed_quote.yaml", None);
    assert_eq!(v.code, 2, "workflow errors exit 2");
    v.single("WORKFLOW.PARSE.INVALID_VALUE", "states.a.command", 6);
    assert!(
        v.message().contains("is not valid shell"),
        "{}",
        v.message()
    );
    assert!(v.message().contains("quoted string"), "{}", v.message());
}

#[test]
fn an_unquoted_colon_in_a_value_gets_the_hint_for_it_and_a_column() {
    let v = validate("command_unquoted_colon.yaml", None);
    assert_eq!(v.code, 2, "workflow errors exit 2");
    v.single_with_hint("WORKFLOW.PARSE.SYNTAX", "", 6, "must be quoted");
    assert!(v.message().contains("(column 22)"), "{}", v.message());
}
