//! Shared by the integration tests: where the pinned external tools are, the target
//! servers (how to build and start each, which suite options fit it, which failures are
//! expected of it), and how to run `mcp-conformance` against one.
//!
//! Adding a target is one line in [`TARGETS`] (plus, for a third-party server, its
//! `expected/<name>.txt`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// How a target server is started.
pub enum Launch {
    /// A cargo example of this workspace: built by the test itself, then run with `args`.
    CargoExample {
        package: &'static str,
        example: &'static str,
        args: &'static [&'static str],
    },
    /// A binary of this workspace: built by the test itself, then run with `args`.
    CargoBin {
        package: &'static str,
        bin: &'static str,
        args: &'static [&'static str],
    },
    /// A Node script under `$AWF_TOOLS_DIR/node/node_modules`, run with the pinned Node 22.
    Node {
        script: &'static str,
        args: &'static [&'static str],
    },
    /// A Python script under `conformance/`, run with the pinned venv's Python.
    Python {
        script: &'static str,
        args: &'static [&'static str],
    },
}

/// A server the suite runs against.
pub struct Target {
    /// Also the name of its expected-deviation list, `expected/<name>.txt`.
    pub name: &'static str,
    pub launch: Launch,
    /// Suite options that fit its tools (echo, slow, failing tool).
    pub options: &'static [&'static str],
    /// The revisions whose checks run against it (`--revision`: a date or `all`); its
    /// expected-deviation list covers those.
    pub revision: &'static str,
    /// Whether the real clients (Python SDK, TypeScript SDK, Inspector CLI) must drive it.
    pub real_clients: bool,
}

const ECHO_OPTIONS: &[&str] = &[
    "--slow-tool",
    "sleep",
    "--slow-args",
    r#"{"ms": 2000}"#,
    "--error-tool",
    "fail",
];

/// `awf mcp-serve` has no echo tool: Glob echoes the pattern it matched, Bash is slow,
/// and Read of a missing file is a tool error.
const AWF_OPTIONS: &[&str] = &[
    "--echo-tool",
    "Glob",
    "--echo-args",
    r#"{"pattern": "Cargo.toml"}"#,
    "--bad-args",
    r#"{"pattern": 5}"#,
    "--slow-tool",
    "Bash",
    "--slow-args",
    r#"{"command": "sleep 2"}"#,
    "--error-tool",
    "Read",
    "--error-args",
    r#"{"path": "no-such-file.txt"}"#,
];

/// Every target; one line each.
pub const TARGETS: &[Target] = &[
    Target {
        name: "mcpserver-echo",
        launch: Launch::CargoExample {
            package: "mcpserver",
            example: "echo",
            args: &[],
        },
        options: ECHO_OPTIONS,
        revision: "all",
        real_clients: true,
    },
    Target {
        name: "server-everything",
        launch: Launch::Node {
            script: "@modelcontextprotocol/server-everything/dist/index.js",
            args: &["stdio"],
        },
        options: &[
            "--slow-tool",
            "trigger-long-running-operation",
            "--slow-args",
            r#"{"duration": 2, "steps": 2}"#,
        ],
        revision: "2024-11-05",
        real_clients: false,
    },
    Target {
        name: "python-sdk",
        launch: Launch::Python {
            script: "fixtures/python_sdk_server.py",
            args: &[],
        },
        options: &[
            "--slow-tool",
            "sleep",
            "--slow-args",
            r#"{"ms": 2000}"#,
            "--error-tool",
            "fail",
            "--jobs",
            "2",
        ],
        revision: "2024-11-05",
        real_clients: false,
    },
    Target {
        name: "awf-mcp-serve",
        launch: Launch::CargoBin {
            package: "awf",
            bin: "awf",
            args: &["mcp-serve", "--root", "."],
        },
        options: AWF_OPTIONS,
        revision: "2024-11-05",
        real_clients: false,
    },
];

pub fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no target named {name}"))
}

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn repo_root() -> PathBuf {
    crate_dir()
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

/// `$AWF_TOOLS_DIR`, else `<repo>/.tools` (where .ci/run installs the pinned tools).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("AWF_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools"))
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `path` when it exists. When it does not: in CI (CI=true) the test fails; elsewhere it
/// prints why it skips and returns `None`.
pub fn required(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let message = format!(
        "{what} is missing at {}; run `bash .ci/run` (or set AWF_TOOLS_DIR) to install the pinned tools",
        path.display()
    );
    if in_ci() {
        panic!("{message}");
    }
    eprintln!("SKIP: {message}");
    None
}

pub fn node() -> Option<PathBuf> {
    required(
        tools_dir().join("node/node_modules/.bin/node"),
        "the pinned Node 22 binary",
    )
}

pub fn python() -> Option<PathBuf> {
    required(
        tools_dir().join("venv/bin/python"),
        "the pinned Python venv with mcp==2.3.0",
    )
}

/// Builds a cargo example (same cargo, profile and target dir as this test) once per test
/// process, and returns its executable. The build selects the whole workspace, as
/// `cargo test --workspace` does, so that the features resolve the same and nothing it
/// built is built again. (Target names are unique across the workspace; `package` says
/// whose it is.)
pub fn cargo_example(package: &str, example: &str) -> PathBuf {
    cargo_artifact(package, "--example", example)
}

/// Builds a binary of the workspace, like [`cargo_example`].
pub fn cargo_bin(package: &str, bin: &str) -> PathBuf {
    cargo_artifact(package, "--bin", bin)
}

fn cargo_artifact(package: &str, kind: &str, name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{package} {kind} {name}");
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let output = Command::new(env!("CARGO"))
        .current_dir(repo_root())
        .args([
            "build",
            "--workspace",
            kind,
            name,
            // An example in the same build, as in `cargo test`'s, makes cargo resolve the
            // features with the dev-dependencies: a bin built alone would rebuild a third
            // of the dependencies with fewer features.
            "--example",
            "reference-server",
            "--message-format=json-render-diagnostics",
        ])
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "cargo build --workspace {kind} {name} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let executable = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| {
            panic!("cargo build --workspace {kind} {name} named no {package} executable")
        });
    built.insert(key, executable.clone());
    executable
}

/// The command line that starts `target`, or `None` when a tool it needs is missing
/// outside CI.
pub fn command(target: &Target) -> Option<Vec<String>> {
    let text = |p: &Path| p.display().to_string();
    let command = match &target.launch {
        Launch::CargoExample {
            package,
            example,
            args,
        } => {
            let mut c = vec![text(&cargo_example(package, example))];
            c.extend(args.iter().map(|a| a.to_string()));
            return Some(c);
        }
        Launch::CargoBin { package, bin, args } => {
            let mut c = vec![text(&cargo_bin(package, bin))];
            c.extend(args.iter().map(|a| a.to_string()));
            return Some(c);
        }
        Launch::Node { script, args } => {
            let script = required(tools_dir().join("node/node_modules").join(script), script)?;
            let mut c = vec![text(&node()?), text(&script)];
            c.extend(args.iter().map(|a| a.to_string()));
            c
        }
        Launch::Python { script, args } => {
            let mut c = vec![text(&python()?), text(&crate_dir().join(script))];
            c.extend(args.iter().map(|a| a.to_string()));
            c
        }
    };
    Some(command)
}

/// One check's outcome as `mcp-conformance --json` reports it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub status: String,
    pub message: String,
}

/// Per-check deadline for the runs: long enough never to fire on a healthy server under a
/// loaded CI machine; it only turns a hang into a failure.
pub const TIMEOUT_SECS: &str = "60";

/// Runs the `mcp-conformance` binary with `options` against `command`.
pub fn run_suite(options: &[&str], command: &[String]) -> Vec<Outcome> {
    run_suite_with_timeout(TIMEOUT_SECS, options, command)
}

/// [`run_suite`] with another per-check deadline.
pub fn run_suite_with_timeout(
    timeout_secs: &str,
    options: &[&str],
    command: &[String],
) -> Vec<Outcome> {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-conformance"))
        .args(["--json", "--timeout", timeout_secs])
        .args(options)
        .arg("--")
        .args(command)
        .output()
        .expect("run mcp-conformance");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "mcp-conformance printed no JSON report ({e}); stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let outcomes: Vec<Outcome> = report["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .map(|c| Outcome {
            name: c["name"].as_str().unwrap().to_string(),
            status: c["status"].as_str().unwrap().to_string(),
            message: c["message"].as_str().unwrap().to_string(),
        })
        .collect();
    let failed = outcomes.iter().any(|o| o.status == "fail");
    assert_eq!(
        output.status.success(),
        !failed,
        "exit status {} does not match the report",
        output.status
    );
    outcomes
}

/// The names of the checks `mcp-conformance --list --revision REVISION` shows (a revision's
/// date, or `all`).
pub fn check_names(revision: &str) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-conformance"))
        .args(["--list", "--revision", revision])
        .output()
        .expect("run mcp-conformance --list");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// An entry of an expected-deviation list.
#[derive(Debug, Clone)]
pub struct Deviation {
    pub reason: String,
    /// Written `? check-name: reason`: the server is racy here, so the check may pass or
    /// fail from run to run; the reason must say why.
    pub sometimes: bool,
}

/// `expected/<name>.txt`: `check-name: reason` lines (`? check-name: reason` for a racy
/// deviation); `#` starts a comment. A missing file means no deviation is expected.
pub fn expected_failures(name: &str) -> BTreeMap<String, Deviation> {
    let path = crate_dir().join("expected").join(format!("{name}.txt"));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return BTreeMap::new();
    };
    let mut expected = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (sometimes, line) = match line.strip_prefix('?') {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        let (check, reason) = line.split_once(':').unwrap_or_else(|| {
            panic!(
                "{}:{}: expected `check-name: reason`, got {line:?}",
                path.display(),
                n + 1
            )
        });
        assert!(
            !reason.trim().is_empty(),
            "{}:{}: give the reason this check is expected to fail",
            path.display(),
            n + 1
        );
        expected.insert(
            check.trim().to_string(),
            Deviation {
                reason: reason.trim().to_string(),
                sometimes,
            },
        );
    }
    expected
}
