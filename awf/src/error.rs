//! The one error taxonomy of awf: every error a user can meet carries a code
//! `CATEGORY.SUB.SPECIFIC` whose category decides the process exit code
//! (USER 1, WORKFLOW 2, EXECUTION 3, SYSTEM 4), and a message that names the input and the fix.

use std::fmt;

/// The four categories; each maps to one exit code so scripts can tell "fix your input"
/// from "the workflow failed" from "a step failed" from "the machine failed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    User,
    Workflow,
    Execution,
    System,
}

impl Category {
    /// `user`, `workflow`, `execution`, `system` (`{{.error.Type}}`).
    pub fn name(self) -> &'static str {
        match self {
            Category::User => "user",
            Category::Workflow => "workflow",
            Category::Execution => "execution",
            Category::System => "system",
        }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            Category::User => 1,
            Category::Workflow => 2,
            Category::Execution => 3,
            Category::System => 4,
        }
    }

    fn from_code(code: &str) -> Category {
        match code.split('.').next() {
            Some("USER") => Category::User,
            Some("WORKFLOW") => Category::Workflow,
            Some("EXECUTION") => Category::Execution,
            _ => Category::System,
        }
    }
}

/// Every code awf emits, kept in this one module so they stay unique and greppable; the
/// category (first segment) maps to the exit code through [`Category::exit_code`].
pub mod codes {
    pub const CONFIG_MISSING: &str = "USER.CONFIG.MISSING";
    pub const CONFIG_INVALID: &str = "USER.CONFIG.INVALID";
    pub const CONFIG_BAD_ROOT: &str = "USER.CONFIG.BAD_ROOT";
    pub const USAGE: &str = "USER.CLI.USAGE";
    pub const UNKNOWN_TOOL: &str = "USER.TOOLS.UNKNOWN_TOOL";
    pub const BAD_ARGUMENTS: &str = "USER.TOOLS.BAD_ARGUMENTS";
    pub const INVALID_TOOL_NAME: &str = "USER.MCP_PROXY.INVALID_TOOL_NAME";
    pub const NAME_COLLISION: &str = "USER.MCP_PROXY.NAME_COLLISION";
    pub const EMPTY_PROXY: &str = "USER.MCP_PROXY.EMPTY_PROXY";
    pub const UNKNOWN_PLUGIN: &str = "USER.MCP_PROXY.UNKNOWN_PLUGIN";
    pub const UNKNOWN_OPERATION: &str = "USER.MCP_PROXY.UNKNOWN_OPERATION";
    /// A third-party server's `command[0]` is neither an executable path nor on its PATH.
    pub const SERVER_COMMAND: &str = "USER.MCP_PROXY.SERVER_COMMAND_NOT_FOUND";
    /// A server's command is a package runner (`npx`, `uvx`, …) its network keeps from its
    /// registry (a warning).
    pub const REGISTRY_UNREACHABLE: &str = "USER.MCP_PROXY.REGISTRY_UNREACHABLE";
    pub const PLUGIN_MANIFEST: &str = "USER.PLUGINS.BAD_MANIFEST";
    pub const PLUGIN_START: &str = "EXECUTION.PLUGINS.START_FAILED";
    pub const TOOL_FAILED: &str = "EXECUTION.TOOLS.TOOL_ERROR";
    pub const SERVER_FAILED: &str = "EXECUTION.MCP.SERVER_FAILED";
    pub const PROTOCOL: &str = "EXECUTION.MCP.PROTOCOL";
    pub const IO: &str = "SYSTEM.IO.FAILED";
    pub const SPAWN: &str = "SYSTEM.PROCESS.SPAWN_FAILED";
    /// An agent CLI failed, or its output could not be read (see the message for its stderr).
    pub const AGENT_FAILED: &str = "EXECUTION.AGENT.FAILED";
    /// A state option for an agent provider is wrong (type, missing API key variable, ...).
    pub const AGENT_OPTION: &str = "USER.AGENT.BAD_OPTION";
    // Workflow files: parsing and checking.
    pub const SYNTAX: &str = "WORKFLOW.PARSE.SYNTAX";
    /// The YAML expands (through aliases) past the node limit of `workflow::yaml`.
    pub const TOO_LARGE: &str = "WORKFLOW.PARSE.TOO_LARGE";
    pub const UNKNOWN_KEY: &str = "WORKFLOW.PARSE.UNKNOWN_KEY";
    pub const MISSING_FIELD: &str = "WORKFLOW.PARSE.MISSING_FIELD";
    pub const WRONG_TYPE: &str = "WORKFLOW.PARSE.WRONG_TYPE";
    pub const DUPLICATE_KEY: &str = "WORKFLOW.PARSE.DUPLICATE_KEY";
    pub const INVALID_VALUE: &str = "WORKFLOW.PARSE.INVALID_VALUE";
    pub const MISSING_INITIAL: &str = "WORKFLOW.STATE.MISSING_INITIAL";
    pub const UNKNOWN_STATE: &str = "WORKFLOW.STATE.UNKNOWN_TARGET";
    /// A warning: no path of transitions leads from the initial state to a terminal one.
    pub const NO_TERMINAL_REACHABLE: &str = "WORKFLOW.STATE.NO_TERMINAL_REACHABLE";
    /// A branch of a `parallel` state has transitions of its own, which are not followed.
    pub const BRANCH_TRANSITIONS: &str = "WORKFLOW.STATE.BRANCH_TRANSITIONS_IGNORED";
    /// A warning: a key AWF accepts and does not use (`capture`, `depends_on`, ...).
    pub const NO_EFFECT: &str = "WORKFLOW.PARSE.NO_EFFECT";
    /// A `when`, `while` or `break_when` expression that does not parse.
    pub const EXPRESSION: &str = "WORKFLOW.EXPRESSION.SYNTAX";
    pub const UNKNOWN_PROVIDER: &str = "WORKFLOW.AGENT.UNKNOWN_PROVIDER";
    pub const PROMPT_FILE: &str = "WORKFLOW.AGENT.PROMPT_FILE_UNREADABLE";
    pub const TEMPLATE: &str = "WORKFLOW.TEMPLATE.UNKNOWN_REFERENCE";
    /// `{{.inputs.X}}` of an input the workflow does not declare: refused by `awf
    /// validate`; `awf run` lets it through when `--input X=...` gives it (as AWF does).
    pub const UNDECLARED_INPUT: &str = "WORKFLOW.TEMPLATE.UNDECLARED_INPUT";
    pub const TEMPLATE_FILTER: &str = "WORKFLOW.TEMPLATE.UNKNOWN_FILTER";
    /// A template in a `step` command where its value cannot be passed safely.
    pub const TEMPLATE_PLACE: &str = "WORKFLOW.TEMPLATE.UNSAFE_PLACE";
    pub const FILE: &str = "USER.WORKFLOW.FILE_UNREADABLE";
    pub const PROXY_UNKNOWN_KEY: &str = "USER.MCP_PROXY.UNKNOWN_KEY";
    /// A warning: a sandbox path leads through a link; awf applies it where it leads.
    pub const SANDBOX_PATH_LINK: &str = "USER.MCP_PROXY.SANDBOX_PATH_IS_LINK";
    pub const UNSUPPORTED_PROVIDER: &str = "USER.MCP_PROXY.UNSUPPORTED_PROVIDER";
    // Running a workflow.
    pub const INPUT_UNKNOWN: &str = "USER.INPUT.UNKNOWN";
    pub const INPUT_MISSING: &str = "USER.INPUT.MISSING";
    pub const INPUT_INVALID: &str = "USER.INPUT.INVALID";
    pub const STATE_FAILED: &str = "EXECUTION.RUN.STATE_FAILED";
    pub const TERMINAL_FAILURE: &str = "EXECUTION.RUN.TERMINAL_FAILURE";
    pub const RUN_TIMEOUT: &str = "EXECUTION.RUN.TIMEOUT";
    pub const INTERRUPTED: &str = "EXECUTION.RUN.INTERRUPTED";
    /// A `when`, `while` or `break_when` expression that could not be evaluated.
    pub const EXPRESSION_FAILED: &str = "EXECUTION.EXPRESSION.FAILED";
    /// A `workflow_start` hook action failed: the run does not start.
    pub const HOOK_FAILED: &str = "EXECUTION.HOOK.FAILED";
    /// `call_workflow` deeper than `MAX_CALL_DEPTH`.
    pub const CALL_DEPTH: &str = "WORKFLOW.CALL.DEPTH_EXCEEDED";
    /// `call_workflow` of a workflow already in the call stack.
    pub const CALL_CYCLE: &str = "WORKFLOW.CALL.CYCLE";
    /// `call_workflow` of a workflow that cannot be read or has errors.
    pub const CALL_FAILED: &str = "EXECUTION.CALL.FAILED";
    /// `awf resume`/`awf status` of a run id that has no run state here.
    pub const RUN_NOT_FOUND: &str = "USER.RUN.NOT_FOUND";
    /// `awf resume` of a run that is alive, completed, or whose workflow changed.
    pub const RESUME_REFUSED: &str = "USER.RUN.RESUME_REFUSED";
    pub const PROVIDER_UNAVAILABLE: &str = "EXECUTION.PROVIDER.UNAVAILABLE";
    /// The step's model budget (`budget:`) was spent before the agent finished.
    pub const BUDGET: &str = "EXECUTION.BUDGET";
    pub const PROXY_CRASHED: &str = "EXECUTION.MCP_PROXY.SERVER_CRASHED";
    pub const TOO_MANY_STEPS: &str = "WORKFLOW.RUN.TOO_MANY_STEPS";
    // The openai_compatible provider (HTTP Chat Completions).
    pub const OPENAI_BAD_OPTION: &str = "USER.OPENAI.BAD_OPTION";
    pub const OPENAI_MISSING_KEY: &str = "USER.OPENAI.MISSING_API_KEY";
    pub const OPENAI_TOO_MANY_TURNS: &str = "USER.OPENAI.TOO_MANY_TOOL_TURNS";
    pub const OPENAI_HTTP: &str = "EXECUTION.OPENAI.HTTP_ERROR";
    pub const OPENAI_TIMEOUT: &str = "EXECUTION.OPENAI.TIMEOUT";
    pub const OPENAI_UNREACHABLE: &str = "EXECUTION.OPENAI.UNREACHABLE";
    pub const OPENAI_BAD_RESPONSE: &str = "EXECUTION.OPENAI.BAD_RESPONSE";
    pub const OPENAI_CANCELLED: &str = "EXECUTION.OPENAI.CANCELLED";
}

/// An error with its taxonomy code. Display is `message (CODE)` so the code is always visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwfError {
    code: &'static str,
    message: String,
}

impl AwfError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        AwfError {
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn category(&self) -> Category {
        Category::from_code(self.code)
    }

    pub fn exit_code(&self) -> u8 {
        self.category().exit_code()
    }
}

impl fmt::Display for AwfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for AwfError {}

pub type Result<T, E = AwfError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_map_to_exit_codes() {
        assert_eq!(AwfError::new(codes::CONFIG_INVALID, "x").exit_code(), 1);
        assert_eq!(AwfError::new("WORKFLOW.STATE.UNKNOWN", "x").exit_code(), 2);
        assert_eq!(AwfError::new(codes::TOOL_FAILED, "x").exit_code(), 3);
        assert_eq!(AwfError::new(codes::IO, "x").exit_code(), 4);
    }

    #[test]
    fn display_shows_message_and_code() {
        let e = AwfError::new(codes::CONFIG_MISSING, "config /x not found");
        assert_eq!(e.to_string(), "config /x not found (USER.CONFIG.MISSING)");
    }

    #[test]
    fn every_code_has_three_parts_and_a_known_category() {
        for code in [
            codes::CONFIG_MISSING,
            codes::CONFIG_INVALID,
            codes::CONFIG_BAD_ROOT,
            codes::USAGE,
            codes::UNKNOWN_TOOL,
            codes::BAD_ARGUMENTS,
            codes::INVALID_TOOL_NAME,
            codes::NAME_COLLISION,
            codes::EMPTY_PROXY,
            codes::UNKNOWN_PLUGIN,
            codes::UNKNOWN_OPERATION,
            codes::SERVER_COMMAND,
            codes::PLUGIN_MANIFEST,
            codes::PLUGIN_START,
            codes::TOOL_FAILED,
            codes::SERVER_FAILED,
            codes::PROTOCOL,
            codes::IO,
            codes::SPAWN,
            codes::AGENT_FAILED,
            codes::AGENT_OPTION,
            codes::SYNTAX,
            codes::UNKNOWN_KEY,
            codes::MISSING_FIELD,
            codes::WRONG_TYPE,
            codes::DUPLICATE_KEY,
            codes::INVALID_VALUE,
            codes::MISSING_INITIAL,
            codes::UNKNOWN_STATE,
            codes::UNKNOWN_PROVIDER,
            codes::PROMPT_FILE,
            codes::TEMPLATE,
            codes::TEMPLATE_FILTER,
            codes::TEMPLATE_PLACE,
            codes::FILE,
            codes::PROXY_UNKNOWN_KEY,
            codes::UNSUPPORTED_PROVIDER,
            codes::INPUT_UNKNOWN,
            codes::INPUT_MISSING,
            codes::INPUT_INVALID,
            codes::STATE_FAILED,
            codes::TERMINAL_FAILURE,
            codes::RUN_TIMEOUT,
            codes::INTERRUPTED,
            codes::PROVIDER_UNAVAILABLE,
            codes::PROXY_CRASHED,
            codes::TOO_MANY_STEPS,
        ] {
            assert_eq!(code.split('.').count(), 3, "{code}");
            let first = code.split('.').next().unwrap();
            assert!(
                ["USER", "WORKFLOW", "EXECUTION", "SYSTEM"].contains(&first),
                "{code}"
            );
        }
    }
}
