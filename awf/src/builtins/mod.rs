//! The six builtin tools (Read, Write, Edit, Bash, Glob, Grep) as one [`ToolProvider`].
//! Every path goes through the [`sandbox`], every text answer through [`bound`], and Bash
//! runs under [`confine`] (Landlock) when the kernel offers it.

pub mod bash;
pub mod bound;
pub mod confine;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod mount_ns;
pub mod read;
pub mod sandbox;
pub mod write;

use crate::tools::{Cancellation, ToolOutput, ToolProvider, ToolSpec};
use sandbox::Sandbox;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;

/// Size and time limits; every field has a default so a config names only what it changes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Bound on every text result, in bytes.
    pub output_bytes: usize,
    /// Read: lines returned when no `limit` is given.
    pub read_lines: usize,
    /// Read: longer lines are cut to this many bytes.
    pub line_bytes: usize,
    /// Write/Edit: largest file content accepted, in bytes.
    pub write_bytes: usize,
    pub bash_timeout_seconds: u64,
    pub bash_max_timeout_seconds: u64,
    /// Glob: paths listed at most.
    pub glob_results: usize,
    /// Grep: lines (content) or files (other modes) listed at most.
    pub grep_results: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            output_bytes: 100_000,
            read_lines: 2000,
            line_bytes: 2000,
            write_bytes: 10 * 1024 * 1024,
            bash_timeout_seconds: 120,
            bash_max_timeout_seconds: 600,
            glob_results: 1000,
            grep_results: 1000,
        }
    }
}

/// Everything a builtin needs besides its arguments.
#[derive(Debug, Clone)]
pub struct BuiltinEnv {
    pub sandbox: Sandbox,
    pub limits: Limits,
    pub confine: confine::Confinement,
    /// What Bash's environment adds to the allowlist (the workflow's `env`, `env_passthrough`).
    pub bash_env: crate::child_env::ChildEnv,
    /// Set when the server goes down: running commands are killed, new ones refused.
    pub shutdown: crate::process::Shutdown,
}

pub struct Builtins {
    env: BuiltinEnv,
}

/// The builtins' names, in the order they are listed.
pub const NAMES: [&str; 6] = ["Read", "Write", "Edit", "Bash", "Glob", "Grep"];

impl Builtins {
    pub fn new(env: BuiltinEnv) -> Builtins {
        Builtins { env }
    }

    pub fn env(&self) -> &BuiltinEnv {
        &self.env
    }
}

impl ToolProvider for Builtins {
    fn source(&self) -> &str {
        "builtin"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            read::spec(&self.env),
            write::spec(&self.env),
            edit::spec(&self.env),
            bash::spec(&self.env),
            glob::spec(&self.env),
            grep::spec(&self.env),
        ]
    }

    fn call(&self, tool: &str, arguments: &Value, cancel: &Cancellation) -> ToolOutput {
        let env = &self.env;
        // Arguments that do not deserialize are the caller's mistake (MCP: -32602); what
        // goes wrong after that is the tool's (an `isError` result).
        let result = match tool {
            "Read" => parse(tool, arguments).map(|a| read::run(env, a)),
            "Write" => parse(tool, arguments).map(|a| write::run(env, a)),
            "Edit" => parse(tool, arguments).map(|a| edit::run(env, a)),
            "Bash" => parse(tool, arguments).map(|a| bash::run(env, a, cancel)),
            "Glob" => parse(tool, arguments).map(|a| glob::run(env, a)),
            "Grep" => parse(tool, arguments).map(|a| grep::run(env, a)),
            _ => Ok(Err(format!("unknown builtin {tool:?}"))),
        };
        match result {
            Err(why) => ToolOutput::invalid_arguments(why),
            Ok(Ok(text)) => ToolOutput::ok(text),
            Ok(Err(text)) => ToolOutput::error(bound::bound_text(
                text,
                env.limits.output_bytes,
                "the error text was cut",
            )),
        }
    }
}

/// Arguments that do not fit the schema become an error naming the tool and the field,
/// which a model can act on (e.g. "unknown field `file_path`, expected one of `path`...").
/// Reads the arguments in place: a Write's content is not copied before it is written.
fn parse<A: DeserializeOwned>(tool: &str, arguments: &Value) -> Result<A, String> {
    let parsed = if arguments.is_null() {
        A::deserialize(&Value::Object(Default::default()))
    } else {
        A::deserialize(arguments)
    };
    parsed.map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

/// Resolves a path argument or explains the refusal.
pub(crate) fn resolve(env: &BuiltinEnv, path: &str) -> Result<PathBuf, String> {
    env.sandbox.resolve(path).map_err(|e| e.0)
}

/// Builds an object schema from `(name, type, description)` triples.
pub(crate) fn schema(props: &[(&str, &str, &str)], required: &[&str]) -> Value {
    let mut map = serde_json::Map::new();
    for (name, ty, desc) in props {
        map.insert(
            name.to_string(),
            serde_json::json!({"type": ty, "description": desc}),
        );
    }
    serde_json::json!({
        "type": "object",
        "properties": map,
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use std::path::Path;

    /// A fresh root under the system temp dir, unique per test name.
    pub fn root(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("awf-bt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    pub fn env(root: &Path) -> BuiltinEnv {
        let sandbox = Sandbox::new(root).unwrap();
        // Unit tests do not confine: Landlock is covered by the integration tests.
        let confine = confine::Confinement::new(false, sandbox.root(), &std::env::temp_dir(), &[]);
        BuiltinEnv {
            sandbox,
            limits: Limits::default(),
            confine,
            bash_env: Default::default(),
            shutdown: Default::default(),
        }
    }
}
