//! `awf validate --compat awf`: which features of AWF's workflow language a workflow uses,
//! and what this awf does with each — so a user can check a directory of AWF workflows
//! before switching. Read from the YAML itself (not the parsed workflow), so that a
//! workflow this awf refuses is still described.

use super::yaml::{Kind, Node};
use serde::Serialize;

/// What this awf does with a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Support {
    /// It runs with AWF's meaning.
    Supported,
    /// Accepted and, as in AWF, without effect (a warning says so).
    NoEffect,
    /// Refused: the workflow does not validate here.
    Unsupported,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Supported => "supported",
            Support::NoEffect => "accepted, no effect",
            Support::Unsupported => "not supported",
        }
    }
}

/// One feature a workflow uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feature {
    pub name: &'static str,
    pub support: Support,
}

/// State keys and their feature (`None`: a key every workflow has).
const STATE_KEY_FEATURES: &[(&str, &str, Support)] = &[
    ("transitions", "transitions", Support::Supported),
    ("continue_on_error", "continue_on_error", Support::Supported),
    ("hooks", "state hooks (pre, post)", Support::Supported),
    ("retry", "retry", Support::Supported),
    ("break_when", "break_when", Support::Supported),
    ("script_file", "script_file", Support::Supported),
    ("capture", "capture", Support::NoEffect),
    ("depends_on", "depends_on", Support::NoEffect),
    ("mode", "agent mode: conversation", Support::Supported),
    (
        "resume",
        "agent resume: continue (claude, gemini)",
        Support::Supported,
    ),
    (
        "conversation",
        "agent conversation (continue_from)",
        Support::Unsupported,
    ),
    ("system_prompt", "agent system_prompt", Support::Unsupported),
    ("role", "agent role", Support::Unsupported),
    ("skills", "agent skills", Support::Unsupported),
    ("output_format", "agent output_format", Support::Unsupported),
    ("operation", "operation", Support::Supported),
    (
        "use_template",
        "step templates (use_template)",
        Support::Unsupported,
    ),
    ("env", "step env", Support::NoEffect),
    ("model", "agent model (state level)", Support::NoEffect),
    (
        "max_tokens",
        "agent max_tokens (state level)",
        Support::NoEffect,
    ),
];

const TYPE_FEATURES: &[(&str, &str, Support)] = &[
    ("while", "type: while", Support::Supported),
    ("for_each", "type: for_each", Support::Supported),
    ("parallel", "type: parallel", Support::Supported),
    ("call_workflow", "type: call_workflow", Support::Supported),
    ("agent", "type: agent", Support::Supported),
    ("command", "type: command", Support::Supported),
    ("operation", "type: operation", Support::Supported),
];

const TOP_KEY_FEATURES: &[(&str, &str, Support)] = &[
    (
        "author",
        "metadata (author, tags, version)",
        Support::Supported,
    ),
    (
        "tags",
        "metadata (author, tags, version)",
        Support::Supported,
    ),
    ("hooks", "workflow hooks", Support::Supported),
    ("env", "top-level env", Support::NoEffect),
    ("plugins", "plugin aliases", Support::Unsupported),
];

/// The AWF features `root` (a workflow's YAML) uses, each once, in a stable order.
pub fn features(root: &Node, text: &str) -> Vec<Feature> {
    let mut out: Vec<Feature> = Vec::new();
    let mut add = |name: &'static str, support: Support| {
        if !out.iter().any(|f| f.name == name) {
            out.push(Feature { name, support });
        }
    };
    let entries = |n: &Node| -> Vec<(String, Node)> {
        match &n.kind {
            Kind::Map(e) => e
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone())))
                .collect(),
            _ => Vec::new(),
        }
    };
    for (key, value) in entries(root) {
        if let Some((_, name, support)) = TOP_KEY_FEATURES.iter().find(|(k, ..)| *k == key) {
            add(name, *support);
        }
        if key == "inputs"
            && let Kind::Seq(items) = &value.kind
        {
            for input in items {
                for (k, _) in entries(input) {
                    if k == "validation" {
                        add("input validation", Support::Supported);
                    }
                }
            }
        }
        if key == "states" {
            for (name, state) in entries(&value) {
                if name == "initial" {
                    continue;
                }
                for (k, v) in entries(&state) {
                    if k == "type"
                        && let Some(t) = v.as_str()
                        && let Some((_, f, s)) = TYPE_FEATURES.iter().find(|(n, ..)| *n == t)
                    {
                        add(f, *s);
                    }
                    // `mode: single` is the default: only `mode: conversation` is a feature.
                    if k == "mode"
                        && v.as_str()
                            .is_some_and(|m| !m.eq_ignore_ascii_case("conversation"))
                    {
                        continue;
                    }
                    if let Some((_, f, s)) = STATE_KEY_FEATURES.iter().find(|(n, ..)| *n == k) {
                        add(f, *s);
                    }
                }
            }
        }
    }
    let dotless = regex::Regex::new(r"\{\{-?\s*(inputs|states|loop|env|workflow|context|error)\.")
        .expect("regex");
    if dotless.is_match(text) {
        add("templates without the leading dot", Support::Supported);
    }
    let namespaces =
        regex::Regex::new(r"\{\{-?\s*\.?(env|workflow|context|error)\.").expect("regex");
    if namespaces.is_match(text) {
        add(
            "env, workflow, context, error in templates",
            Support::Supported,
        );
    }
    let functions = regex::Regex::new(
        r"\{\{[^}]*\b(escape|json|split|join|readFile|trimSpace|printf|index|len)\b",
    )
    .expect("regex");
    if functions.is_match(text) {
        add(
            "template functions (escape, json, printf, ...)",
            Support::Unsupported,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_found_once_with_their_support() {
        let text = "name: x\nauthor: me\nenv: [A]\nstates:\n  initial: a\n  a:\n    type: while\n    \
                    while: 'true'\n    body: [b]\n    capture: {stdout: o}\n  b:\n    type: agent\n    \
                    mode: conversation\n    prompt: '{{inputs.x}}'\n    transitions: [{goto: a}]\n";
        let root = super::super::yaml::parse(text).unwrap().unwrap();
        let f = features(&root, text);
        let get = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.support);
        assert_eq!(
            get("metadata (author, tags, version)"),
            Some(Support::Supported)
        );
        assert_eq!(get("top-level env"), Some(Support::NoEffect));
        assert_eq!(get("type: while"), Some(Support::Supported));
        assert_eq!(get("capture"), Some(Support::NoEffect));
        assert_eq!(get("agent mode: conversation"), Some(Support::Supported));
        assert_eq!(get("transitions"), Some(Support::Supported));
        assert_eq!(
            get("templates without the leading dot"),
            Some(Support::Supported)
        );
        assert_eq!(get("operation"), None);
        let single = "name: y\nstates:\n  a:\n    type: agent\n    mode: single\n";
        let root = super::super::yaml::parse(single).unwrap().unwrap();
        assert!(
            features(&root, single)
                .iter()
                .all(|f| f.name != "agent mode: conversation")
        );
    }
}
