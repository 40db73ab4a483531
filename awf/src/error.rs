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

/// Codes used by this crate, kept in one place so they stay unique and greppable.
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
            codes::PLUGIN_MANIFEST,
            codes::PLUGIN_START,
            codes::TOOL_FAILED,
            codes::SERVER_FAILED,
            codes::PROTOCOL,
            codes::IO,
            codes::SPAWN,
            codes::AGENT_FAILED,
            codes::AGENT_OPTION,
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
