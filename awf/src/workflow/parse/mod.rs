//! From the marked YAML tree to the [`Workflow`] model. Every shape problem becomes a
//! [`Diagnostic`] with the node's path and line, and parsing goes on past it so that one
//! run of `awf validate` lists them all.
//!
//! This module reads the top level of the document (`name`, `version`, `description`,
//! `author`, `tags`, `inputs`, `states`, and the keys AWF reads and does not use, each
//! with a warning); `states` reads each state by its type, `proxy` a state's
//! `mcp_proxy` block, `servers` its third-party servers and `sandbox` the
//! sandbox of Bash and of each server, `inputs` the inputs, and
//! `context` holds `Ctx`, through which every part reads nodes and reports.

mod context;
mod inputs;
mod mcp_proxy;
mod sandbox;
mod scan;
mod servers;
mod states;

pub(crate) use context::join;
pub use context::{closest, parse_duration};

use super::yaml;
use super::{Diagnostic, State, Workflow};
use crate::error::codes;
use context::Ctx;
use inputs::parse_inputs;
use states::parse_states;
use std::path::Path;

/// The top-level keys read into the workflow. Any other key is refused (UNKNOWN_KEY),
/// except those of [`NO_EFFECT_KEYS`]. Keys added by other parts of the model (such as
/// `hooks`) go in this list.
const TOP_KEYS: &[&str] = &[
    "name",
    "version",
    "description",
    "author",
    "tags",
    "inputs",
    "states",
    "hooks",
];

/// Top-level keys of AWF workflows that AWF reads (or its docs and fixtures write) and
/// never acts on: accepted with a warning, so that such a workflow runs unchanged.
const NO_EFFECT_KEYS: &[(&str, &str)] = &[
    (
        "env",
        "AWF parses `env:` and neither checks nor exports it; set variables in the step's \
         command (`FOO=bar cmd`) or in the environment of `awf run`",
    ),
    (
        "outputs",
        "AWF has no workflow `outputs:` either (its docs and fixtures write one, it is \
         ignored); read a state's output with {{.states.NAME.Output}}",
    ),
];

/// Parses workflow text (from `path`, used for `prompt_file`s and messages).
pub fn parse(text: &str, path: &Path) -> (Option<Workflow>, Vec<Diagnostic>) {
    let mut cx = Ctx {
        file: path.to_path_buf(),
        ..Ctx::default()
    };
    let Some(root) = parse_document(&mut cx, text, path) else {
        return (None, cx.diags);
    };
    let allowed: Vec<&str> = TOP_KEYS
        .iter()
        .copied()
        .chain(NO_EFFECT_KEYS.iter().map(|(k, _)| *k))
        .collect();
    let Some(fields) = cx.fields(&root, "", &allowed, codes::UNKNOWN_KEY) else {
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
    let author = get("author").and_then(|n| cx.string(n, "author"));
    let tags = get("tags")
        .map(|n| text_list(&mut cx, n, "tags"))
        .unwrap_or_default();
    warn_no_effect_keys(&mut cx, &fields);
    let inputs = get("inputs")
        .map(|n| parse_inputs(&mut cx, n))
        .unwrap_or_default();
    let hooks = get("hooks")
        .map(|n| parse_workflow_hooks(&mut cx, n))
        .unwrap_or_default();
    let wf_dir = path.parent().unwrap_or(Path::new("."));
    let (initial, initial_line, states) = top_states(&mut cx, get("states"), &root, wf_dir);
    let wf = Workflow {
        initial_line,
        name,
        version,
        description,
        author,
        tags,
        inputs,
        initial,
        states,
        hooks,
        path: path.to_path_buf(),
        unparsed_states: std::mem::take(&mut cx.unparsed_states),
    };
    (Some(wf), cx.diags)
}

/// The document's root node. None when the text is empty or is not YAML (reported).
fn parse_document(cx: &mut Ctx, text: &str, path: &Path) -> Option<yaml::Node> {
    match yaml::parse(text) {
        Ok(Some(n)) => Some(n),
        Ok(None) => {
            cx.push(
                codes::MISSING_FIELD,
                "",
                1,
                format!("{} is empty", path.display()),
                "a workflow needs at least `name` and `states`",
            );
            None
        }
        Err(e) => {
            cx.push(
                e.code,
                "",
                e.line,
                format!("{} {}", path.display(), e.message),
                e.hint,
            );
            None
        }
    }
}

/// A warning for each top-level key AWF reads and never uses; an `env:` map is an error.
fn warn_no_effect_keys(cx: &mut Ctx, fields: &[(&str, &yaml::Node)]) {
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    for (key, hint) in NO_EFFECT_KEYS {
        let Some(n) = get(key) else { continue };
        if *key == "env" && matches!(n.kind, yaml::Kind::Map(_)) {
            // `env: {FOO: bar}` is written to set variables, which it would not do even
            // where it parsed (AWF reads a list of text and refuses a map): one error that
            // says so and where variables go instead.
            cx.push(
                codes::WRONG_TYPE,
                key,
                n.line,
                "a top-level `env:` map sets no variables: awf, like AWF, reads `env` as a \
                 list of text and uses it for nothing"
                    .into(),
                *hint,
            );
            continue;
        }
        if *key == "env" {
            // Read as AWF reads it (a list of text), so a wrong shape is still reported.
            text_list(cx, n, key);
        }
        cx.warn(
            codes::NO_EFFECT,
            key,
            n.line,
            format!("`{key}` has no effect: awf, like AWF, does not use it"),
            *hint,
        );
    }
}

/// `states:`: the initial state, its line and the states. Its absence is an error.
fn top_states(
    cx: &mut Ctx,
    node: Option<&yaml::Node>,
    root: &yaml::Node,
    wf_dir: &Path,
) -> (String, usize, Vec<State>) {
    match node {
        Some(n) => parse_states(cx, n, wf_dir),
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
    }
}

/// `hooks: {workflow_start, workflow_end, workflow_error, workflow_cancel}`, each a list of
/// `{log}`/`{command}` actions.
fn parse_workflow_hooks(cx: &mut Ctx, node: &yaml::Node) -> crate::workflow::WorkflowHooks {
    let mut hooks = crate::workflow::WorkflowHooks::default();
    let keys = [
        "workflow_start",
        "workflow_end",
        "workflow_error",
        "workflow_cancel",
    ];
    let Some(fields) = cx.fields(node, "hooks", &keys, codes::UNKNOWN_KEY) else {
        return hooks;
    };
    for (key, v) in fields {
        let actions = states::parse_hook_actions(cx, v, &context::join("hooks", key));
        match key {
            "workflow_start" => hooks.start = actions,
            "workflow_end" => hooks.end = actions,
            "workflow_error" => hooks.error = actions,
            _ => hooks.cancel = actions,
        }
    }
    hooks
}

/// A list of scalars as text (`tags:`, `env:`): AWF reads any scalar into a string.
fn text_list(cx: &mut Ctx, node: &yaml::Node, path: &str) -> Vec<String> {
    let yaml::Kind::Seq(items) = &node.kind else {
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!("{path} must be a list, found {}", node.describe()),
            format!("write `{path}: [a, b]` or one `- item` per line"),
        );
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, n)| cx.string(n, &format!("{path}[{i}]")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::path::Path;

    const STATES: &str = "states:\n  initial: done\n  done:\n    type: terminal\n";

    #[test]
    fn metadata_is_kept_as_written() {
        let text = format!("name: m\nversion: 1.0\nauthor: Jane\ntags: [ci, 2]\n{STATES}");
        let (wf, d) = parse(&text, Path::new("wf.yaml"));
        assert!(d.is_empty(), "{d:?}");
        let wf = wf.unwrap();
        assert_eq!(wf.version.as_deref(), Some("1.0"));
        assert_eq!(wf.author.as_deref(), Some("Jane"));
        assert_eq!(wf.tags, ["ci", "2"]);
    }

    #[test]
    fn keys_awf_ignores_warn_and_unknown_ones_are_refused() {
        let text = format!("name: m\nenv: [A=1]\noutputs: [{{name: x}}]\nbogus: 1\n{STATES}");
        let (_, d) = parse(&text, Path::new("wf.yaml"));
        let got: Vec<(&str, bool)> = d.iter().map(|p| (p.path.as_str(), p.is_error())).collect();
        assert_eq!(got, [("bogus", true), ("env", false), ("outputs", false)]);
        let (_, d) = parse(
            &format!("name: m\nenv: A=1\n{STATES}"),
            Path::new("wf.yaml"),
        );
        assert_eq!(d.iter().filter(|p| p.is_error()).count(), 1, "{d:?}");
    }
}
