//! `awf tools list` and `awf tools call`: the tools a step's agent would get, listed or
//! called by hand, through a real `awf mcp-serve` spawned for the command and spoken to by
//! awf's own MCP client (so what is shown is what an agent meets: the policy, the jail, the
//! audit records).

use crate::client::McpClient;
use crate::error::{AwfError, codes};
use crate::telemetry::LogFormat;
use crate::tool_server::ServeConfig;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the tools come from: a config file or a root, as `awf mcp-serve` takes them.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// mcp-serve config file (JSON; docs/servers.md shows a whole one).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve over DIR (with --config: instead of the config's root; default: the config's
    /// root, else the current directory).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

fn serve_command(
    source: &Source,
    audit: Option<&Path>,
    log_format: LogFormat,
) -> Result<Command, AwfError> {
    let exe = std::env::current_exe()
        .map_err(|e| AwfError::new(codes::SPAWN, format!("cannot find the awf executable: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--log-format").arg(match log_format {
        LogFormat::Human => "human",
        LogFormat::Json => "json",
    });
    cmd.arg("mcp-serve");
    if let Some(c) = &source.config {
        // Checked here first: a config error is told as itself, not as a server that
        // ended before it answered.
        ServeConfig::load_with_root(c, source.root.clone())?;
        cmd.arg("--config").arg(c);
    }
    match (&source.config, &source.root) {
        (_, Some(r)) => cmd.arg("--root").arg(r),
        (Some(_), None) => &mut cmd,
        (None, None) => cmd.arg("--root").arg("."),
    };
    if let Some(a) = audit {
        cmd.arg("--audit").arg(a);
    }
    Ok(cmd)
}

pub fn list(source: &Source, as_json: bool, log_format: LogFormat) -> Result<u8, AwfError> {
    let mut client = McpClient::spawn(serve_command(source, None, log_format)?)?;
    client.initialize()?;
    let result = client.request("tools/list", json!({}))?.map_err(|e| {
        AwfError::new(
            codes::PROTOCOL,
            format!("tools/list failed: {} ({})", e.message, e.code),
        )
    })?;
    client.close()?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&result).expect("JSON"));
        return Ok(0);
    }
    for tool in result["tools"].as_array().into_iter().flatten() {
        println!("{}", signature(tool));
        let desc = tool["description"].as_str().unwrap_or("");
        println!(
            "    {}",
            desc.split(". ")
                .next()
                .unwrap_or(desc)
                .trim_end_matches('.')
        );
        // Bash's sandbox policy (writes, network, environment) is worth seeing in full.
        if let Some(i) = desc.find("Sandbox: ") {
            println!("    {}", &desc[i..]);
        }
    }
    Ok(0)
}

/// `Read(path, offset?, limit?)` from a tool's schema.
fn signature(tool: &Value) -> String {
    let required: Vec<&str> = tool["inputSchema"]["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let optional: Vec<String> = tool["inputSchema"]["properties"]
        .as_object()
        .map(|p| {
            p.keys()
                .filter(|n| !required.contains(&n.as_str()))
                .map(|n| format!("{n}?"))
                .collect()
        })
        .unwrap_or_default();
    // Required in the schema's order, then the optional ones.
    let params: Vec<String> = required
        .iter()
        .map(|s| s.to_string())
        .chain(optional)
        .collect();
    format!(
        "{}({})",
        tool["name"].as_str().unwrap_or("?"),
        params.join(", ")
    )
}

pub fn call(
    name: &str,
    arguments: Option<&str>,
    source: &Source,
    as_json: bool,
    log_format: LogFormat,
) -> Result<u8, AwfError> {
    let args: Value = match arguments {
        None => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            AwfError::new(
                codes::BAD_ARGUMENTS,
                format!("arguments {text:?} are not valid JSON: {e}"),
            )
        })?,
    };
    if !args.is_object() {
        return Err(AwfError::new(
            codes::BAD_ARGUMENTS,
            "arguments must be a JSON object, e.g. '{\"path\": \"README.md\"}'",
        ));
    }
    // Audit: the config's file when it names one, else a private file for this call.
    let configured = match &source.config {
        Some(c) => ServeConfig::load(c)?.audit_path,
        None => None,
    };
    // (Not in the temp dir: the call's Bash may write there.)
    let temp = match configured {
        Some(_) => None,
        None => {
            let dir = crate::private_files::state_dir().join("tools-call");
            crate::private_files::private_dir(&dir)?;
            Some(dir.join(format!(
                "{}-{}.jsonl",
                std::process::id(),
                crate::telemetry::new_session_id()
            )))
        }
    };
    let audit_path = configured
        .clone()
        .or_else(|| temp.clone())
        .expect("one of them");
    let outcome = (|| {
        let mut client = McpClient::spawn(serve_command(source, temp.as_deref(), log_format)?)?;
        let pid = client.pid();
        client.initialize()?;
        let answer = client.request("tools/call", json!({"name": name, "arguments": args}))?;
        client.close()?;
        Ok::<_, AwfError>((pid, answer))
    })();
    let records = outcome
        .as_ref()
        .ok()
        .map(|(pid, _)| audit_records(&audit_path, *pid))
        .unwrap_or_default();
    if let Some(t) = &temp {
        let _ = std::fs::remove_file(t);
    }
    let (_, answer) = outcome?;
    let result = answer.map_err(|e| {
        // -32602 is both "no such tool" and "arguments do not fit": tell them apart.
        let code = match e.code {
            -32602 if e.message.to_ascii_lowercase().contains("unknown tool") => {
                codes::UNKNOWN_TOOL
            }
            -32602 => codes::BAD_ARGUMENTS,
            _ => codes::PROTOCOL,
        };
        AwfError::new(
            code,
            format!("tools/call {name} failed: {} ({})", e.message, e.code),
        )
    })?;
    let is_error = result["isError"].as_bool().unwrap_or(false);
    if as_json {
        let out = json!({"tool": name, "is_error": is_error, "result": result, "audit": records});
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else {
        for item in result["content"].as_array().into_iter().flatten() {
            match item["text"].as_str() {
                Some(t) => println!("{}", crate::terminal::printable(t.trim_end_matches('\n'))),
                None => println!("{item}"),
            }
        }
        println!(
            "--- audit ({}) ---",
            if temp.is_some() {
                "temporary file".to_string()
            } else {
                audit_path.display().to_string()
            }
        );
        for r in &records {
            println!("{r}");
        }
    }
    if is_error {
        eprintln!("awf: {name} reported an error ({})", codes::TOOL_FAILED);
        return Ok(AwfError::new(codes::TOOL_FAILED, "").exit_code());
    }
    Ok(0)
}

/// The `tool.call`/`tool.result` records of the session served by process `pid`.
fn audit_records(path: &Path, pid: u32) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let Some(session) = records
        .iter()
        .rev()
        .find(|r| r["type"] == "session.start" && r["pid"] == json!(pid))
        .and_then(|r| r["session_id"].as_str().map(str::to_string))
    else {
        return Vec::new();
    };
    records
        .into_iter()
        .filter(|r| {
            r["session_id"] == json!(session)
                && (r["type"] == "tool.call" || r["type"] == "tool.result")
        })
        .collect()
}
