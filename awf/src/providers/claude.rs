//! `claude`: Claude Code in print mode (`claude -p`). The per-step proxy is injected with
//! `--mcp-config FILE --strict-mcp-config` (so no user or project MCP server joins in),
//! `--allowedTools mcp__awf` (our tools run without a permission prompt) and, when builtins
//! are intercepted, `--tools ""` (Claude Code's own file and shell tools are not offered).
//! The output is `--output-format stream-json --verbose`, whose final `result` event
//! carries the answer, the cost and the usage.

use super::shared::{agent_failed, excerpt, extra_args, json_lines, opt_str, write_private};
use super::{AgentCommand, AgentOutput, AgentRequest, CliProvider};
use crate::error::AwfError;
use serde_json::json;
use std::process::ExitStatus;

pub struct Claude;

impl CliProvider for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn model_api(&self) -> super::ModelApi {
        super::ModelApi {
            endpoint: Some("https://api.anthropic.com"),
            key_header: crate::relay::KeyHeader::XApiKey,
            gen_ai: "anthropic",
        }
    }

    fn command(&self, req: &AgentRequest<'_>) -> Result<AgentCommand, AwfError> {
        let name = self.name();
        let mut cmd = AgentCommand::new(name, req.options);
        let args = &mut cmd.args;
        // A step is one-shot: its transcript is the workflow's output, not a session the
        // user would resume, so none is written to ~/.claude (Codex: --ephemeral).
        args.extend(["-p", "--output-format", "stream-json", "--verbose"].map(String::from));
        match req.conversation {
            // A state of a conversation: its session is kept (in the run's directory, which
            // goes with the run) and started under an id awf chose, or continued.
            Some(c) if c.resume => args.extend(["--resume".into(), c.session_id.clone()]),
            Some(c) => {
                args.extend(["--session-id".into(), c.session_id.clone()]);
                if let Some(p) = &c.system_prompt {
                    args.push(format!("--system-prompt={p}"));
                }
            }
            None => args.push("--no-session-persistence".into()),
        }
        if let Some(model) = opt_str(req.options, "model", name)? {
            args.extend(["--model".to_string(), model]);
        }
        if let Some(proxy) = req.proxy {
            let env = proxy.env_object();
            let config = json!({"mcpServers": {proxy.server_name.clone(): {
                "type": "stdio",
                "command": proxy.command,
                "args": proxy.args,
                "env": env,
            }}});
            let file = proxy.step_dir.join("claude-mcp.json");
            write_private(&file, &serde_json::to_string_pretty(&config).expect("JSON"))?;
            // `=` forms: these options take several values, and a bare value after them
            // would swallow whatever follows.
            args.push(format!("--mcp-config={}", file.display()));
            args.push("--strict-mcp-config".to_string());
            args.push(format!("--allowedTools=mcp__{}", proxy.server_name));
            if proxy.intercept_builtins {
                args.push("--tools=".to_string());
            }
            // Its config, sessions and logs in the step's private dir, not in ~/.claude
            // (which the agent's Bash cannot read either); a login made with `claude
            // login` is handed over when no key is configured.
            let logins = if opt_str(req.options, "api_key_env", name)?.is_none() {
                vec![(
                    super::cli_home("CLAUDE_CONFIG_DIR", ".claude").join(".credentials.json"),
                    ".credentials.json",
                )]
            } else {
                Vec::new()
            };
            let config_dir = match req.conversation {
                // Where the run's states find each other's sessions.
                Some(c) => c.home(&logins)?,
                None => proxy.cli_state_dir("claude-config", &logins)?,
            };
            cmd.env.push((
                "CLAUDE_CONFIG_DIR".into(),
                config_dir.to_string_lossy().into_owned(),
            ));
            // Beside its own tools, Claude Code would hide MCP tools behind a ToolSearch
            // tool (the model sees a placeholder until it searches); offer ours directly.
            cmd.env.push(("ENABLE_TOOL_SEARCH".into(), "false".into()));
        }
        args.extend(extra_args(req.options, name)?);
        args.push("--".to_string());
        args.push(req.prompt.to_string());

        if let Some(url) = req.base_url(name)? {
            cmd.env.push(("ANTHROPIC_BASE_URL".into(), url));
        }
        if let Some(key) = req.api_key(name)? {
            cmd.env.push(("ANTHROPIC_API_KEY".into(), key));
        }
        // No update checks, telemetry or other background calls from a workflow step.
        cmd.env.push((
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ));
        Ok(cmd)
    }

    fn parse_output(
        &self,
        stdout: &str,
        stderr: &str,
        status: ExitStatus,
    ) -> Result<AgentOutput, AwfError> {
        let result = json_lines(stdout).filter(|v| v["type"] == "result").last();
        let Some(result) = result else {
            return Err(agent_failed(
                "claude",
                "printed no `result` event",
                stderr,
                status,
            ));
        };
        let text = result["result"].as_str().unwrap_or("").to_string();
        if result["is_error"].as_bool().unwrap_or(false)
            || result["subtype"].as_str().is_some_and(|s| s != "success")
        {
            let why = match result["subtype"].as_str() {
                Some(sub) if sub != "success" => format!("ended with {sub}: {}", excerpt(&text)),
                _ => format!("reported an error: {}", excerpt(&text)),
            };
            return Err(agent_failed("claude", &why, stderr, status));
        }
        if !status.success() {
            return Err(agent_failed(
                "claude",
                "exited with a failure",
                stderr,
                status,
            ));
        }
        Ok(AgentOutput {
            text,
            usage: result.get("usage").cloned(),
            cost_usd: result["total_cost_usd"].as_f64(),
            session_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use crate::providers::ProxyInjection;
    use serde_json::{Map, Value};
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    fn ok() -> ExitStatus {
        ExitStatus::from_raw(0)
    }

    #[test]
    fn command_injects_the_proxy_and_removes_builtins() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-claude-unit-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let proxy = ProxyInjection {
            server_name: "awf".into(),
            command: "/bin/awf".into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/s/c.json".into()],
            env: vec![("TRACEPARENT".into(), "00-x".into())],
            intercept_builtins: true,
            step_dir: dir.clone(),
        };
        let options: Map<String, Value> = serde_json::from_value(
            json!({"model": "m1", "base_url": "http://h", "extra_args": ["--x"]}),
        )
        .unwrap();
        let req = AgentRequest {
            state: "s",
            prompt: "-do it",
            options: &options,
            workdir: Path::new("/w"),
            proxy: Some(&proxy),
            relay: None,
            conversation: None,
        };
        let cmd = Claude.command(&req).unwrap();
        let file = dir.join("claude-mcp.json");
        assert!(
            cmd.args
                .contains(&format!("--mcp-config={}", file.display()))
        );
        assert!(cmd.args.contains(&"--tools=".to_string()));
        assert!(cmd.args.contains(&"--allowedTools=mcp__awf".to_string()));
        assert_eq!(&cmd.args[cmd.args.len() - 3..], ["--x", "--", "-do it"]);
        assert!(
            cmd.env
                .contains(&("ANTHROPIC_BASE_URL".into(), "http://h".into()))
        );
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(written["mcpServers"]["awf"]["args"][2], "/s/c.json");
        assert_eq!(written["mcpServers"]["awf"]["env"]["TRACEPARENT"], "00-x");
    }

    #[test]
    fn a_planted_config_symlink_is_refused_and_its_target_untouched() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-claude-planted-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let step_dir = dir.join("step");
        std::fs::create_dir(&step_dir).unwrap();
        std::os::unix::fs::symlink(&victim, step_dir.join("claude-mcp.json")).unwrap();
        let proxy = ProxyInjection {
            server_name: "awf".into(),
            command: "/bin/awf".into(),
            args: vec![],
            env: vec![],
            intercept_builtins: true,
            step_dir: step_dir.clone(),
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
        let e = Claude.command(&req).unwrap_err();
        assert!(e.message().contains("claude-mcp.json"), "{}", e.message());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        // A step directory that is itself a planted symlink is refused too.
        std::fs::remove_dir_all(&step_dir).unwrap();
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &step_dir).unwrap();
        assert!(Claude.command(&req).is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn parse_output_reads_the_result_event() {
        let out = "{\"type\":\"system\"}\nnot json\n{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"total_cost_usd\":0.5,\"usage\":{\"input_tokens\":3}}\n";
        let o = Claude.parse_output(out, "", ok()).unwrap();
        assert_eq!(o.text, "done");
        assert_eq!(o.cost_usd, Some(0.5));
        assert_eq!(o.usage.unwrap()["input_tokens"], 3);
        let e = Claude
            .parse_output(
                "{\"type\":\"result\",\"subtype\":\"error_max_turns\",\"is_error\":true}",
                "boom",
                ok(),
            )
            .unwrap_err();
        assert_eq!(e.code(), codes::AGENT_FAILED);
        assert!(e.message().contains("error_max_turns") && e.message().contains("boom"));
        assert!(Claude.parse_output("", "", ok()).is_err());
    }
}
