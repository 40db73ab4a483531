//! The six builtin tools (Read, Write, Edit, Bash, Glob, Grep), registered as mcpserver
//! tools with typed arguments (one [`ToolSource`] of a step's tool set).
//! Every path goes through the [`paths`], every text answer through [`bound`], and Bash
//! runs under [`crate::confine`] (Landlock, namespaces) as the kernel offers it.

pub mod bash;
pub mod bound;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod paths;
pub mod read;
pub mod write;

use crate::tools::ToolSource;
use mcpserver::{CallContext, CallError, ServerBuilder, Tool, ToolResult};
use paths::Workspace;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// Size and time limits; every field has a default so a config names only what it changes.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
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
    pub workspace: Workspace,
    pub limits: Limits,
    pub confine: crate::confine::Confinement,
    /// What Bash's environment adds to the allowlist (the workflow's `env`, `env_passthrough`).
    pub bash_env: crate::child_env::ChildEnv,
    /// Set when the server goes down: running commands are killed, new ones refused.
    pub shutdown: crate::process::Shutdown,
}

/// The six builtins, as a source of the step's tools.
pub struct Builtins {
    env: Arc<BuiltinEnv>,
}

/// The builtins' names, in the order they are listed.
pub const NAMES: [&str; 6] = ["Read", "Write", "Edit", "Bash", "Glob", "Grep"];

impl Builtins {
    pub fn new(env: BuiltinEnv) -> Builtins {
        Builtins { env: Arc::new(env) }
    }
}

impl ToolSource for Builtins {
    fn source(&self) -> &str {
        "builtin"
    }

    fn names(&self) -> Vec<String> {
        NAMES.map(String::from).to_vec()
    }

    fn register(&self, b: ServerBuilder, offered: &dyn Fn(&str) -> bool) -> ServerBuilder {
        let env = &self.env;
        // Arguments that do not deserialize are the caller's mistake (mcpserver answers
        // -32602 naming the tool and the field); what goes wrong after that is the tool's
        // (an `isError` result).
        let b = offer(b, offered, read::tool(env), answering(env, read::run));
        let b = offer(b, offered, write::tool(env), answering(env, write::run));
        let b = offer(b, offered, edit::tool(env), answering(env, edit::run));
        let bash_env = env.clone();
        let b = offer(
            b,
            offered,
            bash::tool(env),
            move |args: bash::Args, ctx: &CallContext| {
                answer(&bash_env, bash::run(&bash_env, args, &ctx.cancellation()))
            },
        );
        let b = offer(b, offered, glob::tool(env), answering(env, glob::run));
        let grep_env = env.clone();
        offer(
            b,
            offered,
            grep::tool(env),
            move |args: grep::Args, ctx: &CallContext| {
                answer(&grep_env, grep::run(&grep_env, args, &ctx.cancellation()))
            },
        )
    }
}

/// Registers `tool` when the step offers it.
fn offer<A, F>(
    b: ServerBuilder,
    offered: &dyn Fn(&str) -> bool,
    tool: Tool,
    handler: F,
) -> ServerBuilder
where
    A: DeserializeOwned,
    F: Fn(A, &CallContext) -> Result<ToolResult, CallError> + Send + Sync + 'static,
{
    if offered(tool.name()) {
        b.tool(tool, handler)
    } else {
        b
    }
}

/// The handler of a builtin that runs to its end (Bash and Grep watch for cancellation).
fn answering<A: 'static>(
    env: &Arc<BuiltinEnv>,
    run: fn(&BuiltinEnv, A) -> Result<String, String>,
) -> impl Fn(A, &CallContext) -> Result<ToolResult, CallError> + Send + Sync + 'static {
    let env = env.clone();
    move |args, _ctx| answer(&env, run(&env, args))
}

/// A builtin's text as a result; a failure's text is bounded like any answer.
fn answer(env: &BuiltinEnv, outcome: Result<String, String>) -> Result<ToolResult, CallError> {
    match outcome {
        Ok(text) => Ok(ToolResult::text(text)),
        Err(text) => Err(CallError::Failed(bound::bound_text(
            text,
            env.limits.output_bytes,
            "the error text was cut",
        ))),
    }
}

/// Resolves a path argument or explains the refusal.
pub(crate) fn resolve(env: &BuiltinEnv, path: &str) -> Result<PathBuf, String> {
    env.workspace.resolve(path).map_err(|e| e.0)
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

    /// A fresh root under the system temp dir, and the guard that removes it when dropped.
    pub fn root(name: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::Builder::new()
            .prefix(&format!("awf-bt-{name}-"))
            .tempdir()
            .unwrap();
        let path = d.path().to_path_buf();
        (d, path)
    }

    pub fn env(root: &Path) -> BuiltinEnv {
        let workspace = Workspace::new(root).unwrap();
        // Unit tests do not confine: Landlock is covered by the integration tests.
        let confine = crate::confine::Confinement::none(workspace.root(), &std::env::temp_dir());
        BuiltinEnv {
            workspace,
            limits: Limits::default(),
            confine,
            bash_env: Default::default(),
            shutdown: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpserver::Server;

    #[test]
    fn registers_the_offered_builtins_in_listing_order() {
        let (_tmp, root) = testutil::root("register");
        let builtins = Builtins::new(testutil::env(&root));
        assert_eq!(builtins.names(), NAMES);
        let names = |offered: &dyn Fn(&str) -> bool| {
            let server = builtins
                .register(Server::builder("t", "1"), offered)
                .build()
                .unwrap();
            server
                .tools()
                .map(|t| t.name().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&|_| true), NAMES);
        assert_eq!(names(&|n| n == "Grep" || n == "Read"), ["Read", "Grep"]);
    }
}
