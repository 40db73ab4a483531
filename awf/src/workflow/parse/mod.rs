//! From the marked YAML tree to the [`Workflow`] model. Every shape problem becomes a
//! [`Diagnostic`] with the node's path and line, and parsing goes on past it so that one
//! run of `awf validate` lists them all.
//!
//! This module reads the top level of the document (`name`, `version`, `description`,
//! `inputs`, `states`); `states` reads each state by its type, `proxy` a state's
//! `mcp_proxy` block, `servers` its third-party servers and `sandbox` the
//! sandbox of Bash and of each server, `inputs` the inputs, and
//! `context` holds `Ctx`, through which every part reads nodes and reports.

mod context;
mod inputs;
mod proxy;
mod sandbox;
mod servers;
mod states;

pub(crate) use context::join;
pub use context::parse_duration;

use super::yaml;
use super::{Diagnostic, Workflow};
use crate::error::codes;
use context::Ctx;
use inputs::parse_inputs;
use states::parse_states;
use std::path::Path;

const TOP_KEYS: &[&str] = &["name", "version", "description", "inputs", "states"];

/// Parses workflow text (from `path`, used for `prompt_file`s and messages).
pub fn parse(text: &str, path: &Path) -> (Option<Workflow>, Vec<Diagnostic>) {
    let mut cx = Ctx {
        file: path.to_path_buf(),
        ..Ctx::default()
    };
    let root = match yaml::parse(text) {
        Ok(Some(n)) => n,
        Ok(None) => {
            cx.push(
                codes::MISSING_FIELD,
                "",
                1,
                format!("{} is empty", path.display()),
                "a workflow needs at least `name` and `states`",
            );
            return (None, cx.diags);
        }
        Err(e) => {
            cx.push(
                e.code,
                "",
                e.line,
                format!("{} {}", path.display(), e.message),
                e.hint,
            );
            return (None, cx.diags);
        }
    };
    let Some(fields) = cx.fields(&root, "", TOP_KEYS, codes::UNKNOWN_KEY) else {
        return (None, cx.diags);
    };
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let name = match get("name") {
        Some(n) => cx.string(n, "name").unwrap_or_default(),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                "name",
                root.line,
                "the workflow has no `name`".into(),
                "add `name: my-workflow` at the top",
            );
            String::new()
        }
    };
    let version = get("version").and_then(|n| cx.string(n, "version"));
    let description = get("description").and_then(|n| cx.string(n, "description"));
    let inputs = get("inputs")
        .map(|n| parse_inputs(&mut cx, n))
        .unwrap_or_default();
    let wf_dir = path.parent().unwrap_or(Path::new("."));
    let (initial, initial_line, states) = match get("states") {
        Some(n) => parse_states(&mut cx, n, wf_dir),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                "states",
                root.line,
                "the workflow has no `states`".into(),
                "add `states:` with `initial: <state>` and the states",
            );
            (String::new(), root.line, Vec::new())
        }
    };
    let wf = Workflow {
        initial_line,
        name,
        version,
        description,
        inputs,
        initial,
        states,
        path: path.to_path_buf(),
    };
    (Some(wf), cx.diags)
}
