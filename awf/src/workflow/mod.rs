//! Workflows: the YAML model (`name`, `inputs`, `states: {initial, <name>: ...}` with
//! `agent`, `step` and `terminal` states), its parser that keeps every node's path and line,
//! and the checks behind `awf validate`. Problems are collected, never thrown one at a time:
//! a user fixing a workflow sees every problem of the file in one go.

pub mod check;
pub mod compat;
pub mod expr;
pub mod flow;
pub mod inputs;
pub mod parse;
pub mod retry;
pub mod template;
pub mod yaml;

use crate::error::codes;
pub use flow::{
    BUILTIN_OPERATIONS, CallWorkflowState, Conversation, HookAction, MaxIterations, OperationState,
    StateHooks, Transition, WhileState, WorkflowHooks, builtin_operations,
};
pub use inputs::{InputValidation, Pattern};
pub use retry::{Backoff, Retry, RetryOn};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name of the HTTP provider (`provider: openai_compatible`).
pub const OPENAI_COMPATIBLE: &str = "openai_compatible";

/// Every provider name a workflow may use (`provider:`).
pub const PROVIDER_NAMES: &[&str] = &["claude", "gemini", "codex", "opencode", OPENAI_COMPATIBLE];

/// An error makes the workflow invalid (nothing runs); a warning is printed and the
/// workflow still runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a workflow.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: &'static str,
    pub message: String,
    /// Where in the document, e.g. `states.review.mcp_proxy.plugin_tools[1].expose[0]`.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What to do about it.
    pub hint: String,
}

impl Diagnostic {
    /// An error found at `path`, on `line` of the document.
    pub fn error(
        code: &'static str,
        path: String,
        line: usize,
        message: String,
        hint: String,
    ) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message,
            path,
            line: Some(line),
            hint,
        }
    }

    /// A warning found at `path`, on `line` of the document: printed, the workflow runs.
    pub fn warning(
        code: &'static str,
        path: String,
        line: usize,
        message: String,
        hint: String,
    ) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, path, line, message, hint)
        }
    }

    /// 0 for a warning.
    pub fn exit_code(&self) -> u8 {
        match self.severity {
            Severity::Error => crate::error::AwfError::new(self.code, "").exit_code(),
            Severity::Warning => 0,
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// The highest exit code among `diags` (WORKFLOW 2 beats USER 1); 0 when there is no error.
pub fn exit_code(diags: &[Diagnostic]) -> u8 {
    diags.iter().map(Diagnostic::exit_code).max().unwrap_or(0)
}

pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub name: String,
    /// Any scalar, kept as written (`version: 1.0` is "1.0").
    pub version: Option<String>,
    pub description: Option<String>,
    /// `author:` and `tags:`, metadata AWF keeps and does not act on.
    pub author: Option<String>,
    pub tags: Vec<String>,
    pub inputs: Vec<InputDef>,
    pub initial: String,
    /// Line of `initial` (or of `states` when it is missing).
    pub initial_line: usize,
    /// In file order.
    pub states: Vec<State>,
    /// `hooks:` of the workflow: at its start, end, error and cancellation.
    pub hooks: WorkflowHooks,
    /// The workflow file; relative `prompt_file`s are resolved from its directory.
    pub path: PathBuf,
    /// States the file has but the parse refused (their errors are said): a reference to
    /// one is not reported again as a state that is not defined.
    pub unparsed_states: Vec<String>,
}

impl State {
    /// The line of `field` when given, else the state's.
    pub fn line_of(&self, field: &str) -> usize {
        self.field_lines
            .iter()
            .find(|(f, _)| f == field)
            .map_or(self.line, |(_, l)| *l)
    }
}

impl Workflow {
    pub fn state(&self, name: &str) -> Option<&State> {
        self.states.iter().find(|s| s.name == name)
    }

    /// True when an agent state of it has `mcp_proxy.enable: true`.
    pub fn has_proxied_state(&self) -> bool {
        self.states.iter().any(|s| {
            matches!(&s.kind, StateKind::Agent(a) if a.mcp_proxy.as_ref().is_some_and(|p| p.enable))
        })
    }

    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// An input's `type:` (none is `string`). A value is checked against it when the run
/// starts and kept as given: `integer` takes what Go's `strconv.Atoi` takes, `boolean`
/// true/yes/1/false/no/0 in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    String,
    Integer,
    Boolean,
}

impl InputType {
    /// The names `type:` takes.
    pub const NAMES: &'static [&'static str] = &["string", "integer", "boolean"];

    pub fn name(self) -> &'static str {
        match self {
            InputType::String => "string",
            InputType::Integer => "integer",
            InputType::Boolean => "boolean",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InputDef {
    pub name: String,
    pub kind: InputType,
    pub required: bool,
    /// Any scalar, as text.
    pub default: Option<String>,
    pub description: Option<String>,
    /// `validation:`, checked on the value when the run starts.
    pub validation: Option<InputValidation>,
    /// Line of the input, for messages.
    pub line: usize,
    /// A `type:` that is none of AWF's three: AWF refuses it only when a run gives the input
    /// a value, and so does this awf (validate warns).
    pub unknown_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub name: String,
    pub line: usize,
    /// Line of each field given, for messages about it.
    pub field_lines: Vec<(String, usize)>,
    pub kind: StateKind,
    /// `transitions`: evaluated in order when the state ends; the first that matches picks
    /// the next state, before `on_success`/`on_failure`.
    pub transitions: Vec<Transition>,
    /// `continue_on_error`: a failure follows `on_success` (when no transition matched).
    pub continue_on_error: bool,
    /// `hooks: {pre, post}`.
    pub hooks: StateHooks,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StateKind {
    /// Boxed: an agent state (options, proxy, sandbox and tool policy) is several times
    /// the size of the others.
    Agent(Box<AgentState>),
    Step(StepState),
    Terminal(TerminalState),
    Parallel(ParallelState),
    ForEach(ForEachState),
    While(WhileState),
    CallWorkflow(CallWorkflowState),
    Operation(OperationState),
}

/// The most iterations a for_each may be allowed (`max_iterations`).
pub const MAX_ITERATIONS_LIMIT: usize = 10_000;
/// A for_each's `max_iterations` unless it says otherwise.
pub const DEFAULT_MAX_ITERATIONS: usize = 100;

/// A `for_each` state: its `body` states run in order once per item of `items`.
#[derive(Debug, Clone, PartialEq)]
pub struct ForEachState {
    /// A JSON list, or a template that gives one.
    pub items: String,
    /// Checked after each iteration: when it holds, no further iteration starts.
    pub break_when: Option<String>,
    pub body: Vec<String>,
    /// At most this many items run (the first ones), as AWF does.
    pub max_iterations: MaxIterations,
    /// Iterations at once (default 1: one after another).
    pub max_concurrent: usize,
    pub timeout: Option<Duration>,
    pub on_complete: Option<String>,
    pub on_failure: Option<String>,
}

/// A `parallel` state: its branches (agent and step states, named) run at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ParallelState {
    pub branches: Vec<String>,
    pub strategy: Strategy,
    /// At most this many branches run at once (default: all).
    pub max_concurrent: Option<usize>,
    pub timeout: Option<Duration>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

/// When a `parallel` state succeeds, and which branches it stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Every branch must succeed; the first failure cancels the others.
    #[default]
    AllSucceed,
    /// One success is enough; the first success cancels the others.
    AnySucceed,
    /// Every branch runs to its end; the state succeeds whatever they do.
    BestEffort,
}

impl StateKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            StateKind::Agent(_) => "agent",
            StateKind::Step(_) => "step",
            StateKind::Terminal(_) => "terminal",
            StateKind::Parallel(_) => "parallel",
            StateKind::ForEach(_) => "for_each",
            StateKind::While(_) => "while",
            StateKind::CallWorkflow(_) => "call_workflow",
            StateKind::Operation(_) => "operation",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Inline(String),
    /// Resolved against the workflow's directory.
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentState {
    pub provider: String,
    pub prompt: Prompt,
    pub options: Map<String, Value>,
    pub timeout: Option<Duration>,
    pub mcp_proxy: Option<McpProxy>,
    /// Limits on the model (`budget:`), kept by the run's model relay.
    pub budget: Option<crate::relay::Budget>,
    /// `telemetry: {model_content: true}`: prompts and answers on the chat spans, masked.
    pub model_content: bool,
    /// `retry:`: further attempts after a failure (of the classes `on` lists, when it
    /// does); None runs the agent once.
    pub retry: Option<Retry>,
    /// `conversation:`: the CLI keeps its session, and `continue_from` goes on with the
    /// session of an earlier agent state (AWF's single mode; Claude Code here).
    pub conversation: Option<Conversation>,
    /// `system_prompt:`: given when a session starts (not when one is continued).
    pub system_prompt: Option<String>,
    /// `resume: continue`: when `awf resume` runs this state again after the run died in
    /// it, the CLI continues its interrupted session (Claude Code here) rather than starting
    /// afresh (`resume: restart`, the default).
    pub resume_continue: bool,
    /// `mode: conversation`: after the first turn, each line awf reads on its standard
    /// input is the next turn of the same session, until an empty line (AWF's).
    pub interactive: bool,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepState {
    pub command: String,
    /// The command is a `script_file`'s text: with a shebang (`#!`) it runs as its own
    /// program, as AWF runs it, instead of through `/bin/sh -c`.
    pub script: bool,
    pub dir: Option<String>,
    pub timeout: Option<Duration>,
    /// `retry:`: further attempts after a failure; None runs the command once.
    pub retry: Option<Retry>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalStatus {
    Success,
    Failure,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TerminalState {
    pub status: TerminalStatus,
    pub message: Option<String>,
}

/// The tool name under which operation `op` of plugin `plugin` is exposed.
pub fn plugin_tool_name(plugin: &str, op: &str) -> String {
    format!("{plugin}_{op}")
}

#[derive(Debug, Clone, PartialEq)]
pub struct McpProxy {
    pub enable: bool,
    /// Default true when enabled.
    pub intercept_builtins: bool,
    pub plugin_tools: Vec<PluginToolsEntry>,
    pub sandbox: crate::confine::Sandbox,
    /// Which of those tools the agent is offered (`tools: {deny, read_only}`).
    pub tools: crate::tools::ToolPolicy,
    /// Third-party MCP servers (`servers:`), in file order.
    pub servers: Vec<McpServer>,
    /// What tools send back, scanned (`scan:`).
    pub scan: crate::scan::Scan,
    /// `pins: FILE`, resolved against the workflow's directory; None: [`McpProxy::lock_file`]
    /// names the default beside the workflow.
    pub pins: Option<PathBuf>,
    /// The workflow file the block was read from (the default lock file lies beside it).
    pub workflow_file: PathBuf,
    /// Path of the `mcp_proxy` node, for messages.
    pub path: String,
    pub line: usize,
}

impl McpProxy {
    /// The lock file of the servers' tool pins: `pins:` when given, else the file beside
    /// the workflow named after it (`fix.yaml` → `fix.lock.json`), which a user commits.
    pub fn lock_file(&self) -> PathBuf {
        self.pins
            .clone()
            .unwrap_or_else(|| default_lock_file(&self.workflow_file))
    }
}

/// `fix.yaml` → `fix.lock.json`, in the same directory.
pub fn default_lock_file(workflow_file: &Path) -> PathBuf {
    let stem = workflow_file
        .file_stem()
        .map_or_else(|| "workflow".into(), |s| s.to_string_lossy().into_owned());
    workflow_file.with_file_name(format!("{stem}.lock.json"))
}

/// The longest prefix an agent CLI puts before a tool of awf's server (Claude Code's
/// `mcp__<server>__`): a server's tool name plus this must fit MCP's 64 characters.
pub const LONGEST_CLIENT_PREFIX: &str = "mcp__awf__";

/// The most characters a server name may have: its tools are `<name>_<tool>`, and room
/// must be left for the tool's own name within 64 characters with the client's prefix.
pub const MAX_SERVER_NAME: usize = 32;

/// `mcp_proxy.servers.<name>`: a third-party MCP server the step's proxy starts in a jail
/// of its own (Bash's, with tighter defaults), whose tools the agent is offered as
/// `<name>_<tool>`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    /// argv, run without a shell; empty for a remote server.
    pub command: Vec<String>,
    /// A remote server's MCP endpoint (Streamable HTTP), instead of a command.
    pub url: Option<String>,
    /// HTTP headers of a remote server, `${VAR}` unexpanded (from awf's environment).
    pub headers: Vec<(String, String)>,
    /// A remote server may be at a private address, and over plain http.
    pub allow_private: bool,
    /// Its own `scan:`, over the step's.
    pub scan: crate::scan::Scan,
    /// Literal values: `sandbox.env` with the server's own `env` over it.
    pub env: Vec<(String, String)>,
    /// `env_passthrough` and `sandbox.env_passthrough`, each pattern once.
    pub env_passthrough: Vec<String>,
    /// Its jail (`env` and `env_passthrough` are merged into the fields above). Unset
    /// `read` and `network` mean the server's defaults: confined, deny.
    pub sandbox: crate::confine::Sandbox,
    /// Which upstream tools are offered, by their own names.
    pub tools: crate::upstream::ServerTools,
    /// Upstream name → the name after the prefix.
    pub rename: Vec<(String, String)>,
    pub timeout_seconds: Option<u64>,
    pub start_timeout_seconds: Option<u64>,
    pub optional: bool,
    /// Path of the server's node (`states.x.mcp_proxy.servers.github`), for messages.
    pub path: String,
    pub line: usize,
    /// Line of `command`.
    pub command_line: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PluginToolsEntry {
    pub plugin: String,
    pub expose: Vec<String>,
    /// The deadline of each call, when the entry sets one.
    pub timeout_seconds: Option<u64>,
    /// The plugin's jail, when the entry widens it (a server's keys and defaults).
    pub sandbox: Option<crate::confine::Sandbox>,
    /// Line of each `expose` item.
    pub expose_lines: Vec<usize>,
    pub line: usize,
    /// Position in the YAML list (entries without a plugin are dropped from the model).
    pub index: usize,
}

/// Reads, parses and checks a workflow file. The workflow is returned when it could be
/// built, even with problems (the caller decides; `awf run` refuses any problem).
pub fn load(
    path: &Path,
    plugins: &mut dyn check::PluginCatalog,
) -> (Option<Workflow>, Vec<Diagnostic>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return (
                None,
                vec![Diagnostic {
                    severity: Severity::Error,
                    code: codes::FILE,
                    message: format!("cannot read the workflow {}: {e}", path.display()),
                    path: String::new(),
                    line: None,
                    hint: if path.extension().is_none() && e.kind() == std::io::ErrorKind::NotFound
                    {
                        // `awf run NAME` looked for these first (cli::workflow_file).
                        let n = path.display();
                        format!(
                            "no file {n}, {n}.yaml, {n}.yml or .awf/workflows/{n}.yaml here; \
                             check the name"
                        )
                    } else if e.kind() == std::io::ErrorKind::NotFound && path.is_relative() {
                        let here = std::env::current_dir().map_or_else(
                            |_| "the current directory".into(),
                            |d| d.display().to_string(),
                        );
                        format!(
                            "a relative path is read from the current directory, {here}: give \
                             the file's path from there, or an absolute one"
                        )
                    } else {
                        "check the file name and its permissions".into()
                    },
                }],
            );
        }
    };
    let (wf, mut diags) = parse::parse(&text, path);
    if let Some(wf) = &wf {
        diags.extend(check::check_with(wf, plugins));
    }
    diags.sort_by_key(|d| d.line.unwrap_or(0));
    (wf, diags)
}
