//! `codex`: OpenAI Codex CLI in exec mode (`codex exec --json`). The per-step proxy is one
//! `-c mcp_servers.awf={…}` override whose `env` table carries everything `awf mcp-serve`
//! needs (Codex passes only HOME, PATH, LANG and a few more to MCP servers) and whose
//! `default_tools_approval_mode = "approve"` lets our tools run without a prompt; the
//! server is started with `--serve-in-child`, as Codex kills it without grace. It is
//! `required`: Codex otherwise sends the first model request without waiting for the
//! server's tools (a step whose builtins are intercepted would run with no tools at all,
//! and say nothing), and with it Codex waits, or fails the step if the server cannot start.
//! Codex's own deadlines for it are lifted (`startup_timeout_sec`, `tool_timeout_sec`, see
//! [`STARTUP_TIMEOUT_SECS`]): awf bounds its start and every call itself, and the step's
//! timeout bounds the whole.
//! `--ignore-user-config --strict-config` keep the user's own config out of the step, and
//! the switches that would call github.com and chatgpt.com are set off.
//! With intercepted builtins the shell, image viewer, goals, web search and sub-agents are
//! disabled; what Codex cannot switch off is named in a warning. A `base_url` option
//! becomes a model provider of its own (`wire_api = "responses"`).

use super::shared::{agent_failed, extra_args, json_lines, opt_str};
use super::{AgentCommand, AgentOutput, AgentRequest, CliProvider, ProxyInjection};
use crate::error::AwfError;
use std::path::PathBuf;
use std::process::ExitStatus;

pub struct Codex;

/// Tools Codex 0.171 still offers with the shell and every switchable tool disabled; none
/// reads or writes files or runs commands.
pub const NON_REMOVABLE_TOOLS: &[&str] = &[
    "list_mcp_resources",
    "list_mcp_resource_templates",
    "read_mcp_resource",
    "request_user_input",
];

/// How long Codex waits for awf's server, `required`, to answer its start (Codex's
/// default is 10 s). awf's own start is bounded by its third-party servers' start
/// timeouts (30 s each by default, started side by side).
pub const STARTUP_TIMEOUT_SECS: u64 = 300;
/// How long Codex waits for one tool call (its default of 60 s would cut a Bash call that
/// awf lets run to its own timeout, up to `limits.bash_max_timeout_seconds`, and lose its
/// answer): a day, so that awf's bounds and the step's timeout are the ones that hold.
pub const TOOL_TIMEOUT_SECS: u64 = 86_400;

/// Config overrides that stop every connection Codex makes besides the model's.
const CALL_HOME_OFF: &[&str] = &[
    "features.plugins=false",
    "features.apps=false",
    "features.remote_plugin=false",
    "analytics.enabled=false",
    "check_for_update_on_startup=false",
];

/// The id under which a `base_url` option is registered as a Codex model provider.
const PROVIDER_ID: &str = "awf_model";

impl CliProvider for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn model_api(&self) -> super::ModelApi {
        super::ModelApi {
            endpoint: Some("https://api.openai.com/v1"),
            key_header: crate::relay::KeyHeader::Bearer,
            gen_ai: "openai",
        }
    }

    fn command(&self, req: &AgentRequest<'_>) -> Result<AgentCommand, AwfError> {
        let name = self.name();
        let mut cmd = AgentCommand::new(name, req.options);
        if let Some(proxy) = req.proxy {
            let home = codex_home(req, proxy, name)?;
            cmd.env
                .push(("CODEX_HOME".into(), home.to_string_lossy().into_owned()));
        }
        let args = &mut cmd.args;
        args.extend(["exec", "--json", "--skip-git-repo-check"].map(String::from));
        // A state of a conversation keeps its session (none else does).
        if req.conversation.is_none() {
            args.push("--ephemeral".into());
        }
        args.extend(["--ignore-user-config", "--strict-config"].map(String::from));
        // `--ignore-user-config` also drops the switches that keep Codex from calling home
        // (plugin and app lists on github.com and chatgpt.com, analytics, update check).
        for switch in CALL_HOME_OFF {
            args.extend(["-c".to_string(), switch.to_string()]);
        }
        if let Some(model) = opt_str(req.options, "model", name)? {
            args.extend(["-m".to_string(), model]);
        }
        if let Some(url) = req.base_url(name)? {
            add_model_provider(req, name, &url, &mut cmd)?;
        }
        if let Some(proxy) = req.proxy {
            add_proxy(proxy, &mut cmd);
        }
        cmd.args.extend(extra_args(req.options, name)?);
        add_prompt(req, &mut cmd.args);
        Ok(cmd)
    }

    fn parse_output(
        &self,
        stdout: &str,
        stderr: &str,
        status: ExitStatus,
    ) -> Result<AgentOutput, AwfError> {
        let mut text = None;
        let mut usage = None;
        let mut failure = None;
        let mut session_id = None;
        for ev in json_lines(stdout) {
            match ev["type"].as_str() {
                Some("thread.started") => {
                    session_id = ev["thread_id"].as_str().map(String::from);
                }
                Some("item.completed") if ev["item"]["type"] == "agent_message" => {
                    text = ev["item"]["text"].as_str().map(String::from);
                }
                Some("turn.completed") => usage = ev.get("usage").cloned(),
                Some("turn.failed") => {
                    failure = ev["error"]["message"].as_str().map(String::from);
                }
                Some("error") => {
                    failure = ev["message"].as_str().map(String::from);
                }
                _ => {}
            }
        }
        if let Some(f) = failure {
            return Err(agent_failed(
                "codex",
                &format!("failed: {}", super::shared::excerpt(&f)),
                stderr,
                status,
            ));
        }
        if !status.success() {
            return Err(agent_failed(
                "codex",
                "exited with a failure",
                stderr,
                status,
            ));
        }
        let Some(text) = text else {
            return Err(agent_failed(
                "codex",
                "printed no agent message",
                stderr,
                status,
            ));
        };
        Ok(AgentOutput {
            text,
            usage,
            cost_usd: None,
            session_id,
        })
    }
}

/// CODEX_HOME for a step with the proxy: its private dir, or the conversation's.
fn codex_home(
    req: &AgentRequest<'_>,
    proxy: &ProxyInjection,
    name: &str,
) -> Result<PathBuf, AwfError> {
    // Codex's home (sessions, logs, shell snapshots) in the step's private dir; a
    // login made with `codex login` is handed over when no key is configured. No
    // snapshot of its environment is written at all.
    let logins = if opt_str(req.options, "api_key_env", name)?.is_none() {
        vec![(
            super::cli_home("CODEX_HOME", ".codex").join("auth.json"),
            "auth.json",
        )]
    } else {
        Vec::new()
    };
    match req.conversation {
        // Its sessions where the run's later states find them.
        Some(c) => c.home(&logins),
        None => proxy.cli_state_dir("codex-home", &logins),
    }
}

/// A `base_url` as a model provider of its own, with the variable that holds its key.
fn add_model_provider(
    req: &AgentRequest<'_>,
    name: &str,
    url: &str,
    cmd: &mut AgentCommand,
) -> Result<(), AwfError> {
    let mut provider = format!(
        "{{name={},base_url={},wire_api=\"responses\"",
        toml_str("awf"),
        toml_str(url)
    );
    if let Some((var, value)) = req.key_var(name)? {
        provider.push_str(&format!(",env_key={}", toml_str(&var)));
        if let Some(v) = value {
            cmd.env.push((var, v));
        }
    }
    provider.push('}');
    let args = &mut cmd.args;
    args.push("-c".into());
    args.push(format!("model_providers.{PROVIDER_ID}={provider}"));
    args.push("-c".into());
    args.push(format!("model_provider={}", toml_str(PROVIDER_ID)));
    Ok(())
}

/// The per-step proxy as an MCP server of Codex; Codex's own tools off when intercepted.
fn add_proxy(proxy: &ProxyInjection, cmd: &mut AgentCommand) {
    let args = &mut cmd.args;
    args.extend([
        "-c".to_string(),
        "features.shell_snapshot=false".to_string(),
    ]);
    let env: Vec<String> = proxy
        .env
        .iter()
        .map(|(k, v)| format!("{}={}", toml_str(k), toml_str(v)))
        .collect();
    // Codex SIGKILLs the server in the instant it SIGTERMs its group: the server
    // serves in a child behind a waiter that takes the SIGKILL (see
    // `mcp_serve::serve_in_child`), so that its session still ends cleanly.
    let server_args: Vec<String> = proxy
        .args
        .iter()
        .map(String::as_str)
        .chain(["--serve-in-child"])
        .map(toml_str)
        .collect();
    args.push("-c".into());
    args.push(format!(
        "mcp_servers.{}={{command={},args=[{}],env={{{}}},default_tools_approval_mode=\"approve\",\
         required=true,startup_timeout_sec={STARTUP_TIMEOUT_SECS},tool_timeout_sec={TOOL_TIMEOUT_SECS}}}",
        proxy.server_name,
        toml_str(&proxy.command.to_string_lossy()),
        server_args.join(","),
        env.join(",")
    ));
    if proxy.intercept_builtins {
        for feature in ["shell_tool", "view_image", "goals"] {
            args.extend(["--disable".to_string(), feature.to_string()]);
        }
        args.extend(
            [
                "-c",
                "web_search=\"disabled\"",
                "-c",
                "agents.enabled=false",
            ]
            .map(String::from),
        );
        cmd.warnings.push(format!(
            "codex: with intercept_builtins, Codex still offers its non-file tools {} besides the awf tools; they cannot be disabled",
            NON_REMOVABLE_TOOLS.join(", ")
        ));
    }
}

/// The prompt, last: after the session it continues, or led by the system prompt.
fn add_prompt(req: &AgentRequest<'_>, args: &mut Vec<String>) {
    match req.conversation {
        // `codex exec [options] resume SESSION_ID PROMPT`.
        Some(c) if c.resume => {
            args.extend(["resume".to_string(), c.session_id.clone()]);
            args.push(req.prompt.to_string());
        }
        Some(c) => {
            let prompt = match &c.system_prompt {
                // Codex has no system prompt of a session: it leads the first prompt, as
                // AWF gives it.
                Some(s) => format!("{s}\n\n{}", req.prompt),
                None => req.prompt.to_string(),
            };
            args.extend(["--".to_string(), prompt]);
        }
        None => {
            args.push("--".to_string());
            args.push(req.prompt.to_string());
        }
    }
}

/// A TOML basic string (what `-c key=value` parses), escaping what TOML requires.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProxyInjection;
    use serde_json::{Map, Value, json};
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }

    #[test]
    fn command_carries_the_server_env_and_disables_native_tools() {
        let proxy = ProxyInjection {
            server_name: "awf".into(),
            command: "/bin/awf".into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/s/c.json".into()],
            env: vec![("TRACEPARENT".into(), "00-x".into())],
            intercept_builtins: true,
            step_dir: "/s".into(),
        };
        let options: Map<String, Value> =
            serde_json::from_value(json!({"model": "m", "base_url": "http://h/v1"})).unwrap();
        let req = AgentRequest {
            state: "s",
            prompt: "p",
            options: &options,
            workdir: Path::new("/w"),
            proxy: Some(&proxy),
            relay: None,
            conversation: None,
        };
        let cmd = Codex.command(&req).unwrap();
        assert!(cmd.args.contains(
            &"mcp_servers.awf={command=\"/bin/awf\",args=[\"mcp-serve\",\"--config\",\"/s/c.json\",\"--serve-in-child\"],env={\"TRACEPARENT\"=\"00-x\"},default_tools_approval_mode=\"approve\",required=true,startup_timeout_sec=300,tool_timeout_sec=86400}".to_string()
        ));
        assert!(cmd.args.contains(&"shell_tool".to_string()));
        assert!(
            cmd.args
                .contains(&"model_provider=\"awf_model\"".to_string())
        );
        assert_eq!(cmd.warnings.len(), 1);
        assert!(cmd.warnings[0].contains("request_user_input"));
    }

    #[test]
    fn parse_output_takes_the_last_agent_message() {
        let out = r#"{"type":"thread.started"}
{"type":"item.completed","item":{"type":"agent_message","text":"first"}}
{"type":"item.completed","item":{"type":"mcp_tool_call"}}
{"type":"item.completed","item":{"type":"agent_message","text":"last"}}
{"type":"turn.completed","usage":{"input_tokens":5}}"#;
        let o = Codex
            .parse_output(out, "", ExitStatus::from_raw(0))
            .unwrap();
        assert_eq!(o.text, "last");
        assert_eq!(o.usage.unwrap()["input_tokens"], 5);
        let e = Codex
            .parse_output(
                r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#,
                "",
                ExitStatus::from_raw(256),
            )
            .unwrap_err();
        assert!(e.message().contains("stream disconnected"));
    }
}
