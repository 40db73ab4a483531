//! `mcp-conformance`: runs the MCP conformance checks of one revision (2024-11-05 by
//! default) or of all against a stdio server command and prints one line per check, then a
//! summary; exits 1 when a check fails.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use conformance::checks::{self, Config, Revision, Selection, Status};
use conformance::session::ServerProcess;
use serde_json::{Value, json};

/// Check an MCP stdio server against the MCP specification (2024-11-05 unless --revision).
///
/// Each check starts a fresh server process. Example:
///   mcp-conformance --slow-tool sleep --slow-args '{"ms": 3000}' -- ./my-server --stdio
///   mcp-conformance --revision all -- ./my-server --stdio
#[derive(Parser, Debug)]
#[command(name = "mcp-conformance", version, verbatim_doc_comment)]
struct Cli {
    /// A tool that returns its text argument (default: a tool named `echo`, if listed).
    #[arg(long, value_name = "NAME")]
    echo_tool: Option<String>,
    /// Arguments for the echo tool as JSON (default: derived from its input schema).
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    echo_args: Option<Value>,
    /// A tool that takes a few seconds, for the concurrency and cancellation checks.
    #[arg(long, value_name = "NAME")]
    slow_tool: Option<String>,
    /// Arguments for the slow tool as JSON.
    #[arg(long, value_name = "JSON", value_parser = parse_json, default_value = "{}")]
    slow_args: Value,
    /// A tool whose call fails (expected: a result with isError: true).
    #[arg(long, value_name = "NAME")]
    error_tool: Option<String>,
    /// Arguments for the failing tool as JSON.
    #[arg(long, value_name = "JSON", value_parser = parse_json, default_value = "{}")]
    error_args: Value,
    /// Arguments the echo tool must refuse: -32602 in 2024-11-05, an isError result from
    /// 2025-11-25 on (default: {} when it requires any).
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    bad_args: Option<Value>,
    /// A tool with an outputSchema, for the structured-content checks (default: the echo
    /// tool, when it declares one).
    #[arg(long, value_name = "NAME")]
    structured_tool: Option<String>,
    /// Arguments for that tool as JSON (default: derived from its input schema).
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    structured_args: Option<Value>,
    /// The server's maximum line size in bytes; the over-long-line check sends 1 MiB more.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    max_line_bytes: usize,
    /// Seconds each check may take before its server is killed and the check fails.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    timeout: f64,
    /// The protocol revision whose checks run: 2024-11-05, 2025-06-18, 2025-11-25,
    /// 2026-07-28, or all.
    #[arg(long, value_name = "REVISION", default_value = "2024-11-05", value_parser = parse_revisions)]
    revision: Revisions,
    /// Run only these checks (comma-separated or repeated).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    only: Vec<String>,
    /// Do not run these checks (reported as SKIP).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    skip: Vec<String>,
    /// How many checks run at once, each with its own server process.
    #[arg(long, value_name = "N", default_value_t = 4)]
    jobs: usize,
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
    /// List the checks of the selected revision, with their revision and what each one
    /// checks, then exit.
    #[arg(long)]
    list: bool,
    /// The server command and its arguments.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e}): {text}"))
}

/// What `--revision` selects: one revision, or every one.
#[derive(Debug, Clone)]
struct Revisions(Vec<Revision>);

fn parse_revisions(text: &str) -> Result<Revisions, String> {
    if text == "all" {
        return Ok(Revisions(Revision::ALL.to_vec()));
    }
    Revision::parse(text)
        .map(|r| Revisions(vec![r]))
        .ok_or_else(|| {
            let known: Vec<&str> = Revision::ALL.iter().map(|r| r.as_str()).collect();
            format!(
                "unknown revision `{text}`; use one of {} or all",
                known.join(", ")
            )
        })
}

/// The tools the server lists (through its handshake, else as a 2026-07-28 server), or
/// None when it could not be asked: the checks then say what is wrong with it.
fn listed_tools(config: &Config) -> Option<Vec<String>> {
    let list = |modern: bool| -> Option<Vec<String>> {
        let deadline = Instant::now() + config.timeout;
        let mut s = ServerProcess::spawn(&config.command, deadline).ok()?;
        if modern {
            s.speak_modern();
        } else {
            s.handshake().ok()?;
        }
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        // Bounded: a server that pages for ever is the checks' to report.
        for _ in 0..100 {
            let params = cursor.as_ref().map(|c| json!({"cursor": c}));
            let r = s.call("tools/list", params).ok()?;
            let result = r.get("result")?;
            names.extend(
                result["tools"]
                    .as_array()?
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(String::from)),
            );
            match result["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return Some(names),
            }
        }
        Some(names)
    };
    list(false).or_else(|| list(true))
}

/// Refuses a `--*-tool` name the server does not list (a typo would make a correct server
/// fail its checks), naming the server's tools.
fn named_tools_exist(config: &Config) -> Result<(), String> {
    let named: Vec<(&str, &str)> = [
        ("--echo-tool", &config.echo_tool),
        ("--slow-tool", &config.slow_tool),
        ("--error-tool", &config.error_tool),
        ("--structured-tool", &config.structured_tool),
    ]
    .into_iter()
    .filter_map(|(flag, name)| Some((flag, name.as_deref()?)))
    .collect();
    if named.is_empty() {
        return Ok(());
    }
    let Some(tools) = listed_tools(config) else {
        return Ok(());
    };
    for (flag, name) in named {
        if !tools.iter().any(|t| t == name) {
            return Err(format!(
                "{flag} {name}: the server lists no tool named {name:?}; its tools: {}",
                if tools.is_empty() {
                    "(none)".to_string()
                } else {
                    tools.join(", ")
                }
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let selection = Selection {
        revisions: cli.revision.0,
        only: cli.only,
        skip: cli.skip,
    };
    if cli.list {
        let width = selection.checks().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = std::io::stdout().lock();
        for check in selection.checks() {
            let line = format!(
                "{:<width$}  {}  {}",
                check.name, check.revision, check.about
            );
            // A closed pipe (`| head`) ends the list quietly.
            if writeln!(out, "{line}").is_err() {
                break;
            }
        }
        return ExitCode::SUCCESS;
    }
    if cli.command.is_empty() {
        eprintln!(
            "mcp-conformance: no server command; put it after `--`, e.g. `mcp-conformance -- ./my-server`"
        );
        return ExitCode::from(2);
    }
    if !(cli.timeout.is_finite() && cli.timeout > 0.0) {
        eprintln!(
            "mcp-conformance: --timeout must be a positive number of seconds, got {}",
            cli.timeout
        );
        return ExitCode::from(2);
    }
    if let Err(e) = selection.validate() {
        eprintln!("mcp-conformance: {e}");
        return ExitCode::from(2);
    }
    let config = Config {
        command: cli.command,
        timeout: Duration::from_secs_f64(cli.timeout),
        echo_tool: cli.echo_tool,
        echo_args: cli.echo_args,
        slow_tool: cli.slow_tool,
        slow_args: cli.slow_args,
        error_tool: cli.error_tool,
        error_args: cli.error_args,
        bad_args: cli.bad_args,
        structured_tool: cli.structured_tool,
        structured_args: cli.structured_args,
        max_line_bytes: cli.max_line_bytes,
        jobs: cli.jobs,
    };
    if let Err(e) = named_tools_exist(&config) {
        eprintln!("mcp-conformance: {e}");
        return ExitCode::from(2);
    }
    // Write errors (a closed pipe, as with `| head`) are ignored: the exit status still
    // tells the outcome.
    let mut out = std::io::stdout().lock();
    let mut results = Vec::new();
    checks::run_with(&config, &selection, |result| {
        if !cli.json {
            let _ = writeln!(out, "{}", result.line()).and_then(|_| out.flush());
        }
        results.push(result.clone());
    });
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    let (passed, failed, skipped) = (
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip),
    );
    if cli.json {
        let doc = json!({
            "checks": results.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
            "passed": passed, "failed": failed, "skipped": skipped,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serializable")
        );
    } else {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
