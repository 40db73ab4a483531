//! `opencode`: OpenCode's one-shot mode (`opencode run --format json`). The per-step proxy
//! is a config file named by `OPENCODE_CONFIG` that declares the MCP server as a local
//! server with an explicit environment, and, when builtins are intercepted, a permission
//! table that denies every tool but ours (`awf_*`), which also keeps the denied tools out of
//! what the model is offered. A `base_url` option becomes an OpenAI-compatible provider in
//! the same file (`-m awf-model/<model>`).

use super::shared::{agent_failed, excerpt, extra_args, json_lines, opt_str, write_private};
use super::{AgentCommand, AgentOutput, AgentRequest, CliProvider, ProxyInjection};
use crate::error::{AwfError, codes};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitStatus;

pub struct OpenCode;

/// The provider id a `base_url` option is registered under.
const PROVIDER_ID: &str = "awf-model";

impl CliProvider for OpenCode {
    fn name(&self) -> &'static str {
        "opencode"
    }

    fn model_api(&self) -> super::ModelApi {
        // Its endpoint comes from its model catalogue unless base_url names one.
        super::ModelApi {
            endpoint: None,
            key_header: crate::relay::KeyHeader::Bearer,
            gen_ai: "openai",
        }
    }

    fn command(&self, req: &AgentRequest<'_>) -> Result<AgentCommand, AwfError> {
        let name = self.name();
        let mut cmd = AgentCommand::new(name, req.options);
        let model = opt_str(req.options, "model", name)?;
        let base_url = req.base_url(name)?;
        // No undo snapshots: OpenCode would copy the work tree into a git store in its data
        // dir at every start, which costs seconds and disk for nothing in a one-shot step.
        let mut config = json!({"$schema": "https://opencode.ai/config.json", "snapshot": false});
        // The model id: with base_url, ours; else as given ("provider/model").
        let model_ref = match (&base_url, &model) {
            (Some(url), Some(m)) => {
                config["provider"] = provider_config(req, name, url, m, &mut cmd.env)?;
                Some(format!("{PROVIDER_ID}/{m}"))
            }
            (Some(_), None) => {
                return Err(AwfError::new(
                    codes::AGENT_OPTION,
                    "provider opencode: option base_url needs option model (the model id at that endpoint)",
                ));
            }
            (None, m) => m.clone(),
        };
        if let Some(proxy) = req.proxy {
            add_proxy_server(proxy, &mut config);
            let file = proxy.step_dir.join("opencode.json");
            write_private(&file, &serde_json::to_string_pretty(&config).expect("JSON"))?;
            cmd.env.push((
                "OPENCODE_CONFIG".into(),
                file.to_string_lossy().into_owned(),
            ));
            let xdg = seed_config_home(&proxy.step_dir)?;
            cmd.env
                .push(("XDG_CONFIG_HOME".into(), xdg.to_string_lossy().into_owned()));
            let data = data_home(req, proxy)?;
            cmd.env
                .push(("XDG_DATA_HOME".into(), data.to_string_lossy().into_owned()));
        } else {
            // No step dir without a proxy: the config goes in through the environment.
            cmd.env
                .push(("OPENCODE_CONFIG_CONTENT".into(), config.to_string()));
        }
        // A workflow step must not update OpenCode or share sessions.
        cmd.env
            .push(("OPENCODE_DISABLE_AUTOUPDATE".into(), "1".into()));
        cmd.env.push(("OPENCODE_DISABLE_SHARE".into(), "1".into()));
        if base_url.is_some() {
            // The model is fully described here: no need for the models.dev catalogue,
            // which OpenCode would otherwise fetch at start.
            cmd.env
                .push(("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()));
        }
        cmd.args
            .extend(["run", "--format", "json", "--title"].map(String::from));
        cmd.args.push(format!("awf {}", req.state));
        // OpenCode takes its project directory from PWD, which the runner's own process
        // passes on unchanged: name the step's directory explicitly.
        cmd.args.extend([
            "--dir".to_string(),
            req.workdir.to_string_lossy().into_owned(),
        ]);
        cmd.env
            .push(("PWD".into(), req.workdir.to_string_lossy().into_owned()));
        if let Some(m) = model_ref {
            cmd.args.extend(["-m".to_string(), m]);
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
        // Text parts after the last tool call form the answer; step_finish parts carry
        // tokens and cost, summed over the run's model calls.
        let mut text = String::new();
        let mut cost = None::<f64>;
        let mut tokens: Option<Value> = None;
        let mut failure = None;
        let mut seen = false;
        let mut session_id = None;
        for ev in json_lines(stdout) {
            seen = true;
            if session_id.is_none() {
                session_id = ev["sessionID"]
                    .as_str()
                    .or_else(|| ev["part"]["sessionID"].as_str())
                    .map(String::from);
            }
            match ev["type"].as_str() {
                Some("text") => {
                    if let Some(t) = ev["part"]["text"].as_str() {
                        text.push_str(t);
                    }
                }
                Some("tool_use") => text.clear(),
                Some("step_finish") => {
                    if let Some(c) = ev["part"]["cost"].as_f64() {
                        *cost.get_or_insert(0.0) += c;
                    }
                    if let Some(t) = ev["part"].get("tokens") {
                        tokens = Some(add_tokens(tokens.take(), t));
                    }
                }
                Some("error") => {
                    failure = Some(
                        ev["error"]["data"]["message"]
                            .as_str()
                            .or_else(|| ev["error"]["message"].as_str())
                            .map(String::from)
                            .unwrap_or_else(|| ev["error"].to_string()),
                    );
                }
                _ => {}
            }
        }
        if let Some(f) = failure {
            return Err(agent_failed(
                "opencode",
                &format!("failed: {}", excerpt(&f)),
                stderr,
                status,
            ));
        }
        if !status.success() || !seen {
            return Err(agent_failed(
                "opencode",
                if seen {
                    "exited with a failure"
                } else {
                    "printed no JSON event"
                },
                stderr,
                status,
            ));
        }
        Ok(AgentOutput {
            text,
            usage: tokens,
            cost_usd: cost,
            session_id,
        })
    }
}

/// The provider a `base_url` option becomes: OpenAI-compatible, with the one model named.
fn provider_config(
    req: &AgentRequest<'_>,
    name: &str,
    url: &str,
    model: &str,
    env: &mut Vec<(String, String)>,
) -> Result<Value, AwfError> {
    let mut options = json!({"baseURL": url});
    if let Some((var, value)) = req.key_var(name)? {
        options["apiKey"] = json!(format!("{{env:{var}}}"));
        if let Some(v) = value {
            env.push((var, v));
        }
    }
    Ok(json!({PROVIDER_ID: {
        "npm": "@ai-sdk/openai-compatible",
        "name": "awf model",
        "options": options,
        "models": {model: {"name": model}},
    }}))
}

/// The per-step proxy as a local MCP server; all tools but its own denied when intercepting.
fn add_proxy_server(proxy: &ProxyInjection, config: &mut Value) {
    let environment = proxy.env_object();
    let mut command = vec![proxy.command.to_string_lossy().into_owned()];
    command.extend(proxy.args.iter().cloned());
    config["mcp"] = json!({proxy.server_name.clone(): {
        "type": "local",
        "command": command,
        "environment": environment,
        "enabled": true,
    }});
    if proxy.intercept_builtins {
        config["permission"] = json!({"*": "deny", format!("{}_*", proxy.server_name): "allow"});
    }
}

/// XDG_DATA_HOME: the step's private dir, or the conversation's.
fn data_home(req: &AgentRequest<'_>, proxy: &ProxyInjection) -> Result<PathBuf, AwfError> {
    // Its data (sessions, logs, logins) in the step's private dir; a login made
    // with `opencode auth login` is handed over by copy.
    let login = (
        super::cli_home("XDG_DATA_HOME", ".local/share").join("opencode/auth.json"),
        "opencode/auth.json",
    );
    match req.conversation {
        // A conversation's states share their data (their sessions live there).
        Some(c) => c.home(&[login]),
        None => proxy.cli_state_dir("opencode-data", &[login]),
    }
}

/// The prompt, last: after the session it continues, or led by the system prompt.
fn add_prompt(req: &AgentRequest<'_>, args: &mut Vec<String>) {
    let prompt = match req.conversation {
        // A continued session: `-s ID` (the id OpenCode reported).
        Some(c) if c.resume => {
            args.extend(["--session".to_string(), c.session_id.clone()]);
            req.prompt.to_string()
        }
        // OpenCode has no system prompt of a session: it leads the first prompt, as AWF
        // gives it.
        Some(c) => match &c.system_prompt {
            Some(s) => format!("{s}\n\n{}", req.prompt),
            None => req.prompt.to_string(),
        },
        None => req.prompt.to_string(),
    };
    args.push("--".to_string());
    args.push(prompt);
}

/// A private config home for the step, so OpenCode reads no global config and installs
/// nothing. At every start OpenCode installs its plugin helper package
/// (`@opencode-ai/plugin`, with ~25 MB of dependencies, from the npm registry) into each
/// config folder whose `package.json`/`package-lock.json` do not both list it, in the
/// background; a one-shot run exits before it finishes, so it starts over at every step
/// and needs the network. A folder that lists it in both files, with a `node_modules`
/// folder, is left alone. Nothing here needs the package itself: it serves user-written
/// OpenCode plugins, and the step's config names none.
fn seed_config_home(step_dir: &std::path::Path) -> Result<std::path::PathBuf, AwfError> {
    let home = step_dir.join("opencode-config-home");
    let dir = home.join("opencode");
    crate::private_files::private_dir(&dir.join("node_modules"))?;
    let deps = json!({HELPER_PACKAGE: HELPER_VERSION});
    write_private(
        &dir.join("package.json"),
        &json!({"dependencies": deps}).to_string(),
    )?;
    write_private(
        &dir.join("package-lock.json"),
        &json!({"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}).to_string(),
    )?;
    Ok(home)
}

/// The helper package OpenCode wants in every config folder, and the version it asks for
/// (its own, 1.18.33 when pinned; any listed version satisfies its check).
const HELPER_PACKAGE: &str = "@opencode-ai/plugin";
const HELPER_VERSION: &str = "*";

/// Sums two token records field by field (numbers, nested objects such as `cache`).
fn add_tokens(acc: Option<Value>, t: &Value) -> Value {
    match (acc, t) {
        (None, t) => t.clone(),
        (Some(Value::Object(mut a)), Value::Object(b)) => {
            for (k, v) in b {
                let prev = a.remove(k);
                a.insert(k.clone(), add_tokens(prev, v));
            }
            Value::Object(a)
        }
        (Some(Value::Number(a)), Value::Number(b)) => {
            json!(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0))
        }
        (Some(_), t) => t.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProxyInjection;
    use serde_json::Map;
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;

    #[test]
    fn config_declares_the_server_the_permissions_and_the_provider() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-opencode-unit-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let proxy = ProxyInjection {
            server_name: "awf".into(),
            command: "/bin/awf".into(),
            args: vec!["mcp-serve".into(), "--config".into(), "/c".into()],
            env: vec![("AWF_LOG".into(), "debug".into())],
            intercept_builtins: true,
            step_dir: dir.clone(),
        };
        let options: Map<String, Value> =
            serde_json::from_value(json!({"model": "m", "base_url": "http://h/v1"})).unwrap();
        let req = AgentRequest {
            state: "review",
            prompt: "p",
            options: &options,
            workdir: Path::new("/w"),
            proxy: Some(&proxy),
            relay: None,
            conversation: None,
        };
        let cmd = OpenCode.command(&req).unwrap();
        assert!(cmd.args.windows(2).any(|w| w == ["-m", "awf-model/m"]));
        let c: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("opencode.json")).unwrap())
                .unwrap();
        assert_eq!(
            c["mcp"]["awf"]["command"],
            json!(["/bin/awf", "mcp-serve", "--config", "/c"])
        );
        assert_eq!(c["mcp"]["awf"]["environment"]["AWF_LOG"], "debug");
        assert_eq!(c["permission"], json!({"*": "deny", "awf_*": "allow"}));
        assert_eq!(
            c["provider"]["awf-model"]["options"]["baseURL"],
            "http://h/v1"
        );
        let seeded = dir.join("opencode-config-home/opencode");
        assert!(seeded.join("node_modules").is_dir());
        let lock: Value = serde_json::from_str(
            &std::fs::read_to_string(seeded.join("package-lock.json")).unwrap(),
        )
        .unwrap();
        assert!(lock["packages"][""]["dependencies"]["@opencode-ai/plugin"].is_string());
    }

    #[test]
    fn parse_output_sums_cost_and_keeps_the_final_text() {
        let out = r#"{"type":"step_start","part":{}}
{"type":"text","part":{"text":"thinking"}}
{"type":"tool_use","part":{"tool":"awf_Read"}}
{"type":"step_finish","part":{"cost":0.25,"tokens":{"input":3,"cache":{"read":1}}}}
{"type":"text","part":{"text":"done"}}
{"type":"step_finish","part":{"cost":0.5,"tokens":{"input":4,"cache":{"read":2}}}}"#;
        let o = OpenCode
            .parse_output(out, "", ExitStatus::from_raw(0))
            .unwrap();
        assert_eq!(o.text, "done");
        assert_eq!(o.cost_usd, Some(0.75));
        assert_eq!(
            o.usage.unwrap(),
            json!({"input": 7.0, "cache": {"read": 3.0}})
        );
    }
}
