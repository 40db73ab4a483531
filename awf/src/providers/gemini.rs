//! `gemini`: Gemini CLI in headless mode (`gemini -p`). The per-step proxy lives in a
//! private home (`GEMINI_CLI_HOME`) whose `.gemini/settings.json` declares the MCP server
//! (trusted, so its tools run without confirmation) and, when builtins are intercepted,
//! limits the core tools to ours (`mcp_awf_*`: builtins, plugin and third-party tools alike). `gemini mcp add` is never used: it
//! would change the user's own settings. A model is always passed, because without `-m`
//! Gemini CLI first makes a routing call.

use super::shared::{agent_failed, excerpt, extra_args, json_lines, opt_str, write_private};
use super::{AgentCommand, AgentOutput, AgentRequest, CliProvider};
use crate::error::AwfError;
use serde_json::json;
use std::process::ExitStatus;

pub struct Gemini;

/// Used when the state names no model.
pub const DEFAULT_MODEL: &str = "gemini-2.5-pro";

impl CliProvider for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn model_api(&self) -> super::ModelApi {
        super::ModelApi {
            endpoint: Some("https://generativelanguage.googleapis.com"),
            key_header: crate::relay::KeyHeader::Goog,
            gen_ai: "gcp.gemini",
        }
    }

    fn command(&self, req: &AgentRequest<'_>) -> Result<AgentCommand, AwfError> {
        let name = self.name();
        let mut cmd = AgentCommand::new(name, req.options);
        let model = opt_str(req.options, "model", name)?.unwrap_or_else(|| DEFAULT_MODEL.into());
        // `--prompt=` keeps a prompt that starts with `-` from being read as an option.
        let prompt = match req.conversation {
            // Gemini CLI has no system prompt of a session: it leads the first prompt, as
            // AWF gives it.
            Some(c) if !c.resume => match &c.system_prompt {
                Some(s) => format!("{s}\n\n{}", req.prompt),
                None => req.prompt.to_string(),
            },
            _ => req.prompt.to_string(),
        };
        cmd.args.push(format!("--prompt={prompt}"));
        match req.conversation {
            // A state of a conversation: a session under the id awf chose, or continued.
            Some(c) if c.resume => cmd.args.push(format!("--resume={}", c.session_id)),
            Some(c) => cmd.args.push(format!("--session-id={}", c.session_id)),
            None => {}
        }
        cmd.args
            .extend(["--output-format", "stream-json", "--skip-trust", "-m"].map(String::from));
        cmd.args.push(model);
        if let Some(proxy) = req.proxy {
            let env = proxy.env_object();
            let mut settings = json!({
                "mcpServers": {proxy.server_name.clone(): {
                    "command": proxy.command,
                    "args": proxy.args,
                    "env": env,
                    "trust": true,
                }},
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                // A workflow step sends nothing but model calls.
                "privacy": {"usageStatisticsEnabled": false},
                "telemetry": {"enabled": false},
            });
            if proxy.intercept_builtins {
                // Every tool of our server and nothing else: Gemini's core list registers
                // only the built-in tools it names (none here), and its policy allows the
                // MCP tools of server `awf` by this pattern (the tools of third-party
                // servers behind awf are known only once they start).
                settings["tools"] = json!({"core": [format!("mcp_{}_*", proxy.server_name)]});
            }
            // A conversation's states share one home (their sessions live there).
            let home = match req.conversation {
                Some(c) => c.state_dir.clone(),
                None => proxy.step_dir.join("gemini-home"),
            };
            let settings_file = home.join(".gemini").join("settings.json");
            // Each state's own settings (a conversation's earlier state wrote its own).
            let _ = std::fs::remove_file(&settings_file);
            write_private(
                &settings_file,
                &serde_json::to_string_pretty(&settings).expect("JSON"),
            )?;
            cmd.env.push((
                "GEMINI_CLI_HOME".into(),
                home.to_string_lossy().into_owned(),
            ));
        }
        cmd.args.extend(extra_args(req.options, name)?);
        if let Some(url) = req.base_url(name)? {
            cmd.env.push(("GOOGLE_GEMINI_BASE_URL".into(), url));
        }
        if let Some(key) = req.api_key(name)? {
            cmd.env.push(("GEMINI_API_KEY".into(), key));
        }
        Ok(cmd)
    }

    fn parse_output(
        &self,
        stdout: &str,
        stderr: &str,
        status: ExitStatus,
    ) -> Result<AgentOutput, AwfError> {
        // The answer is the assistant text after the last tool activity (text streamed
        // before a tool call is the model thinking aloud, not its answer).
        let mut text = String::new();
        let mut result = None;
        for ev in json_lines(stdout) {
            match ev["type"].as_str() {
                Some("message") if ev["role"] == "assistant" => {
                    if ev["delta"].as_bool() != Some(true) {
                        text.clear();
                    }
                    text.push_str(ev["content"].as_str().unwrap_or(""));
                }
                Some("tool_use") | Some("tool_result") => text.clear(),
                Some("result") => result = Some(ev),
                _ => {}
            }
        }
        let Some(result) = result else {
            return Err(agent_failed(
                "gemini",
                "printed no `result` event",
                stderr,
                status,
            ));
        };
        if result["status"].as_str().is_some_and(|s| s != "success") {
            let why = result["error"]["message"]
                .as_str()
                .map(excerpt)
                .unwrap_or_else(|| result.to_string());
            return Err(agent_failed(
                "gemini",
                &format!("ended with {}: {why}", result["status"]),
                stderr,
                status,
            ));
        }
        if !status.success() {
            return Err(agent_failed(
                "gemini",
                "exited with a failure",
                stderr,
                status,
            ));
        }
        Ok(AgentOutput {
            text,
            usage: result.get("stats").cloned(),
            cost_usd: None,
            session_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProxyInjection;
    use serde_json::{Map, Value};
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    #[test]
    fn settings_declare_a_trusted_server_and_only_our_core_tools() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-gemini-unit-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let proxy = ProxyInjection {
            server_name: "awf".into(),
            command: "/bin/awf".into(),
            args: vec!["mcp-serve".into()],
            env: vec![],
            intercept_builtins: true,
            step_dir: dir.clone(),
        };
        let options = Map::new();
        let req = AgentRequest {
            state: "s",
            prompt: "p",
            options: &options,
            workdir: Path::new("/w"),
            proxy: Some(&proxy),
            relay: None,
            conversation: None,
        };
        let cmd = Gemini.command(&req).unwrap();
        assert!(cmd.args.contains(&DEFAULT_MODEL.to_string()));
        let home = dir.join("gemini-home");
        assert!(
            cmd.env
                .contains(&("GEMINI_CLI_HOME".into(), home.to_string_lossy().into()))
        );
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(home.join(".gemini/settings.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(s["mcpServers"]["awf"]["trust"], true);
        assert_eq!(s["tools"]["core"], json!(["mcp_awf_*"]));
    }

    #[test]
    fn parse_output_keeps_the_text_after_the_last_tool() {
        let out = r#"{"type":"init"}
{"type":"message","role":"assistant","content":"let me look","delta":true}
{"type":"tool_use","tool_name":"mcp_awf_Read"}
{"type":"tool_result","status":"success"}
{"type":"message","role":"assistant","content":"the ","delta":true}
{"type":"message","role":"assistant","content":"answer","delta":true}
{"type":"result","status":"success","stats":{"total_tokens":9}}"#;
        let o = Gemini
            .parse_output(out, "", ExitStatus::from_raw(0))
            .unwrap();
        assert_eq!(o.text, "the answer");
        assert_eq!(o.usage.unwrap()["total_tokens"], 9);
    }
}
