//! Agent providers: how a workflow `agent` state talks to a model. CLI providers
//! (claude, gemini, codex, opencode) turn a request into an [`AgentCommand`] that the runner
//! spawns and tears down, then parse the CLI's output; `openai_compatible` ([`openai`]) speaks
//! HTTP Chat Completions and serves tools in-process. The trait is the contract between the
//! runner (awf/src/run/) and the per-CLI modules.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use crate::error::AwfError;

pub mod claude;
pub mod codex;
pub mod gemini;
pub mod openai;
pub mod opencode;
pub mod shared;

/// What the runner hands a provider for one agent step.
pub struct AgentRequest<'a> {
    /// State name, for titles and logs.
    pub state: &'a str,
    /// The rendered prompt.
    pub prompt: &'a str,
    /// `state.options` (model, base_url, api_key_env, extra_args, command, ...).
    pub options: &'a serde_json::Map<String, serde_json::Value>,
    /// The step's working directory (= the proxy's sandbox root).
    pub workdir: &'a Path,
    /// The per-step tool proxy, when the state uses one.
    pub proxy: Option<&'a ProxyInjection>,
    /// The step's route through the run's model relay, when it has one.
    pub relay: Option<&'a RelayRoute>,
    /// A session the CLI keeps (a state with `conversation:`), when there is one.
    pub conversation: Option<&'a ConversationRequest>,
}

/// A CLI session a state starts or continues (`conversation:`): its id, known before the
/// CLI starts, and where the CLI keeps its sessions for the whole run.
#[derive(Debug, Clone)]
pub struct ConversationRequest {
    /// The session's id: chosen by awf (Claude Code), or, for a CLI that names its own
    /// sessions (Codex), empty when it starts and the id it reported when it continues.
    pub session_id: String,
    /// Continue the session `session_id` (`continue_from`) rather than start it.
    pub resume: bool,
    /// The CLI's state directory shared by the run's states (sessions live there).
    pub state_dir: std::path::PathBuf,
    /// Given when the session starts.
    pub system_prompt: Option<String>,
}

impl ConversationRequest {
    /// The CLI's home for the states of a conversation (their sessions live there), with
    /// the user's logins copied in the first time (`(from, to)` as for a step's home).
    pub fn home(&self, logins: &[(PathBuf, &str)]) -> Result<PathBuf, AwfError> {
        for (from, to) in logins {
            if let Ok(bytes) = std::fs::read(from)
                && !self.state_dir.join(to).exists()
            {
                crate::private_files::write_private(&self.state_dir.join(to), &bytes)?;
            }
        }
        Ok(self.state_dir.clone())
    }
}

/// What the model relay gives a step's CLI in place of the endpoint and the key.
#[derive(Debug, Clone)]
pub struct RelayRoute {
    pub base_url: String,
    /// The placeholder key, when the workflow names a key (`api_key_env`).
    pub key: Option<String>,
}

/// The variable through which the CLI's placeholder key is handed over, for CLIs that are
/// told a variable's name (the real key's variable is removed from their environment).
pub const RELAY_KEY_VAR: &str = "AWF_MODEL_KEY";

impl AgentRequest<'_> {
    /// The model endpoint the CLI is given: the relay's route, else `options.base_url`.
    pub fn base_url(&self, provider: &str) -> Result<Option<String>, AwfError> {
        match self.relay {
            Some(r) => Ok(Some(r.base_url.clone())),
            None => shared::opt_str(self.options, "base_url", provider),
        }
    }

    /// The key the CLI is given: the relay's placeholder, else the one `api_key_env` names.
    pub fn api_key(&self, provider: &str) -> Result<Option<String>, AwfError> {
        match self.relay {
            Some(r) if r.key.is_some() => Ok(r.key.clone()),
            _ => shared::api_key(self.options, provider),
        }
    }

    /// For a CLI told the name of the variable holding its key: that name, and the value
    /// to set in it (the placeholder; None: the variable is the user's own, inherited).
    pub fn key_var(&self, provider: &str) -> Result<Option<(String, Option<String>)>, AwfError> {
        match self.relay {
            Some(RelayRoute { key: Some(k), .. }) => {
                Ok(Some((RELAY_KEY_VAR.to_string(), Some(k.clone()))))
            }
            _ => match shared::opt_str(self.options, "api_key_env", provider)? {
                Some(var) => {
                    // Checked here so a missing key fails before the CLI starts.
                    shared::api_key(self.options, provider)?;
                    Ok(Some((var, None)))
                }
                None => Ok(None),
            },
        }
    }
}

/// What the per-step proxy offers the provider (built by `ToolProxyService::start`).
#[derive(Debug, Clone)]
pub struct ProxyInjection {
    /// MCP server name as the agent sees it: "awf".
    pub server_name: String,
    /// Absolute path of the awf executable.
    pub command: PathBuf,
    /// `["mcp-serve", "--config", "<private config path>"]`.
    pub args: Vec<String>,
    /// TRACEPARENT, AWF_LOG, ...: put them in the server entry's explicit env, because
    /// agent CLIs do not reliably pass their own environment to MCP servers.
    pub env: Vec<(String, String)>,
    /// When true, the agent's own builtin tools are to be disabled in favour of ours.
    pub intercept_builtins: bool,
    /// Private per-step dir (0700) for generated config files and homes; removed at close.
    pub step_dir: PathBuf,
}

/// A CLI agent invocation, ready to spawn. The runner spawns it in its own process group
/// with stdin from /dev/null, enforces the timeout and SIGINT, and tears it down.
#[derive(Debug, Clone, Default)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Added to the inherited environment.
    pub env: Vec<(String, String)>,
    pub env_remove: Vec<String>,
    /// Logged as WARN by the runner (e.g. Codex's non-removable tools).
    pub warnings: Vec<String>,
}

impl AgentCommand {
    /// Provider `name`'s command with no argument yet: its program is [`program_path`].
    pub fn new(name: &str, options: &serde_json::Map<String, serde_json::Value>) -> Self {
        AgentCommand {
            program: program_path(name, options),
            ..AgentCommand::default()
        }
    }
}

impl ProxyInjection {
    /// A private directory for the CLI's own state (config, logins, sessions, snapshots),
    /// `step_dir/<name>`: the CLI keeps what it writes there, where the agent's Bash cannot
    /// read it (the run directory is hidden from it), and none of it lands in the user's
    /// home. Each login file of `logins` (a path in the user's home, a path inside the new
    /// directory) that exists is handed over by copy, so a subscription login still works.
    pub fn cli_state_dir(
        &self,
        name: &str,
        logins: &[(PathBuf, &str)],
    ) -> Result<PathBuf, AwfError> {
        let dir = self.step_dir.join(name);
        crate::private_files::private_dir(&dir)?;
        for (from, to) in logins {
            // A login that cannot be read is the CLI's to report: it fails as without one.
            if let Ok(bytes) = std::fs::read(from) {
                crate::private_files::write_private(&dir.join(to), &bytes)?;
            }
        }
        Ok(dir)
    }

    /// [`Self::env`] as the JSON object a CLI's MCP server entry takes.
    pub fn env_object(&self) -> serde_json::Map<String, serde_json::Value> {
        self.env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect()
    }
}

/// The result of one agent step.
#[derive(Debug, Clone, Default)]
pub struct AgentOutput {
    /// The agent's final text = the state's Output.
    pub text: String,
    pub usage: Option<serde_json::Value>,
    pub cost_usd: Option<f64>,
    /// The session the CLI reported (Codex's thread), for a later `continue_from`.
    pub session_id: Option<String>,
}

/// Where a CLI's model API is and how it takes its key, for the model relay.
#[derive(Debug, Clone, Copy)]
pub struct ModelApi {
    /// The API's base URL when `base_url` names none (None: the CLI's own catalogue says).
    pub endpoint: Option<&'static str>,
    /// How the key is sent.
    pub key_header: crate::relay::KeyHeader,
    /// `gen_ai.provider.name` of the chat spans.
    pub gen_ai: &'static str,
}

pub trait CliProvider: Send + Sync {
    /// "claude", "gemini", "codex", "opencode".
    fn name(&self) -> &'static str;
    /// Its model API, as the run's model relay reaches it.
    fn model_api(&self) -> ModelApi;
    /// Writes any per-step files into `proxy.step_dir` and returns the command.
    fn command(&self, req: &AgentRequest<'_>) -> Result<AgentCommand, AwfError>;
    /// Parses the CLI's stdout (JSON lines) into the final text; exit status given.
    fn parse_output(
        &self,
        stdout: &str,
        stderr: &str,
        status: ExitStatus,
    ) -> Result<AgentOutput, AwfError>;
}

// The names are the workflow language's (`provider:`); this module gives each its code.
pub use crate::workflow::{OPENAI_COMPATIBLE, PROVIDER_NAMES};

/// A provider a workflow names: a CLI the runner spawns and supervises, or the HTTP
/// conversation that runs in awf's process with the tools served in-process.
pub enum Provider {
    Cli(Box<dyn CliProvider>),
    OpenAiCompatible,
}

/// Looks up a provider by the name a workflow gives it.
/// The per-CLI modules register themselves here with one match arm each.
pub fn provider(name: &str) -> Option<Provider> {
    let cli: Box<dyn CliProvider> = match name {
        OPENAI_COMPATIBLE => return Some(Provider::OpenAiCompatible),
        "claude" => Box::new(claude::Claude),
        "codex" => Box::new(codex::Codex),
        "gemini" => Box::new(gemini::Gemini),
        "opencode" => Box::new(opencode::OpenCode),
        _ => return None,
    };
    Some(Provider::Cli(cli))
}

/// The user's home, for the login files a CLI keeps there.
pub fn user_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// A directory a CLI takes from `var` when set (absolute), else `default` in the home.
pub fn cli_home(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| user_home().join(default))
}

/// Program path of a CLI: option `command`, else env `AWF_<NAME>_BIN`, else the name on PATH.
pub fn program_path(name: &str, options: &serde_json::Map<String, serde_json::Value>) -> PathBuf {
    if let Some(cmd) = options.get("command").and_then(|v| v.as_str()) {
        return PathBuf::from(cmd);
    }
    let var = format!("AWF_{}_BIN", name.to_ascii_uppercase());
    match std::env::var_os(&var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(name),
    }
}
