//! `inputs:`: the values a run is given (`awf run --input name=value`), each with its type,
//! whether it is required, a default and a description. Both the list form (`- name: x`)
//! and the map form (`x: {type: ...}`) are read.

use super::context::{Ctx, join};
use crate::error::codes;
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{InputDef, InputType};

const INPUT_KEYS: &[&str] = &["name", "type", "required", "default", "description"];

pub(super) fn parse_inputs(cx: &mut Ctx, node: &Node) -> Vec<InputDef> {
    let mut out = Vec::new();
    // Both AWF's list form (`- name: x`) and a map form (`x: {type: ...}`) are accepted.
    let items: Vec<(String, Option<String>, &Node)> = match &node.kind {
        Kind::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("inputs[{i}]"), None, n))
            .collect(),
        Kind::Map(entries) => entries
            .iter()
            .map(|(k, v)| {
                let key = k.as_str().unwrap_or_default().to_string();
                (format!("inputs.{key}"), Some(key), v)
            })
            .collect(),
        _ => {
            cx.push(
                codes::WRONG_TYPE,
                "inputs",
                node.line,
                format!("inputs must be a list, found {}", node.describe()),
                "write `inputs:` then `- name: x` items",
            );
            return out;
        }
    };
    for (path, key_name, n) in items {
        let allowed: &[&str] = if key_name.is_some() {
            &INPUT_KEYS[1..]
        } else {
            INPUT_KEYS
        };
        // `x:` with nothing under it is a plain string input.
        let fields = if n.is_null() {
            Vec::new()
        } else {
            let Some(f) = cx.fields(n, &path, allowed, codes::UNKNOWN_KEY) else {
                continue;
            };
            f
        };
        let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let name = match (key_name, get("name")) {
            (Some(k), _) => k,
            (None, Some(v)) => cx.string(v, &join(&path, "name")).unwrap_or_default(),
            (None, None) => {
                cx.push(
                    codes::MISSING_FIELD,
                    &path,
                    n.line,
                    format!("{path} has no `name`"),
                    "add `name: <input name>`",
                );
                continue;
            }
        };
        let kind = match get("type").and_then(|v| v.as_str()) {
            None | Some("string") => InputType::String,
            Some("integer") | Some("int") => InputType::Integer,
            Some("boolean") | Some("bool") => InputType::Boolean,
            Some(other) => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(&path, "type"),
                    get("type").map_or(n.line, |t| t.line),
                    format!("input type {other:?} is not supported"),
                    "use string, integer or boolean",
                );
                InputType::String
            }
        };
        let required = get("required")
            .and_then(|v| cx.boolean(v, &join(&path, "required"), codes::WRONG_TYPE))
            .unwrap_or(false);
        let default = get("default").and_then(|v| cx.string(v, &join(&path, "default")));
        let description =
            get("description").and_then(|v| cx.string(v, &join(&path, "description")));
        if out.iter().any(|i: &InputDef| i.name == name) {
            cx.push(
                codes::DUPLICATE_KEY,
                &path,
                n.line,
                format!("input {name:?} is declared twice"),
                "keep one declaration",
            );
            continue;
        }
        out.push(InputDef {
            name,
            kind,
            required,
            default,
            description,
        });
    }
    out
}
