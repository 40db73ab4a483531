//! `inputs:`: the values a run is given (`awf run --input name=value`), each with its type,
//! whether it is required, a default, a description and the rules its value must follow
//! (`validation:`). Both the list form (`- name: x`) and the map form (`x: {type: ...}`)
//! are read. AWF finds a wrong `type` or a bad rule only when a run starts (or never);
//! here they are reported by `awf validate`.

use super::context::{Ctx, join};
use crate::error::codes;
use crate::workflow::inputs::{InputValidation, Pattern, file_extension, parse_boolean};
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{InputDef, InputType};

const INPUT_KEYS: &[&str] = &[
    "name",
    "type",
    "required",
    "default",
    "description",
    "validation",
    // Older syntax AWF's own workflows still write; its YAML reader ignores it (a warning).
    "pattern",
];

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
        let (kind, unknown_type) = match get("type") {
            None => (InputType::String, None),
            Some(t) => input_type(cx, t, &join(&path, "type")),
        };
        let required = get("required")
            .and_then(|v| cx.boolean(v, &join(&path, "required"), codes::WRONG_TYPE))
            .unwrap_or(false);
        let default =
            get("default").and_then(|v| default_value(cx, v, &join(&path, "default"), &name));
        let description =
            get("description").and_then(|v| cx.string(v, &join(&path, "description")));
        let validation = get("validation")
            .and_then(|v| parse_validation(cx, v, &join(&path, "validation"), &name, kind));
        if let Some(p) = get("pattern") {
            warn_own_pattern(cx, p, &path, &name);
        }
        if let (Some(d), Some(t)) = (&default, get("default")) {
            check_default(cx, d, kind, t.line, &join(&path, "default"));
        }
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
            validation,
            line: n.line,
            unknown_type,
        });
    }
    out
}

/// `type:`, one of string, integer, boolean. Any other name is what AWF does with it: a
/// run that gives the input a value is refused (`inputs.X: unknown type "T"`), one that
/// does not runs; validate warns.
fn input_type(cx: &mut Ctx, t: &Node, path: &str) -> (InputType, Option<String>) {
    match t.as_str() {
        Some("string") => (InputType::String, None),
        Some("integer") => (InputType::Integer, None),
        Some("boolean") => (InputType::Boolean, None),
        other => {
            let hint = match other {
                Some("int" | "number" | "float") => {
                    "use integer (whole numbers; AWF has no decimal type: use string with a \
                     pattern)"
                }
                Some("bool") => "use boolean",
                _ => "use string, integer or boolean (a list or an object is passed as string)",
            };
            cx.warn(
                codes::INVALID_VALUE,
                path,
                t.line,
                format!(
                    "input type {} is not one of {}: as in AWF, a run that gives this input a \
                     value is refused",
                    t.describe(),
                    InputType::NAMES.join(", ")
                ),
                hint,
            );
            (InputType::String, Some(other.unwrap_or("").to_string()))
        }
    }
}

/// A default that the run would refuse for the input's type: a warning, since AWF only
/// finds it when a run uses the default.
/// An input's own `pattern:` (older syntax): AWF's reader ignores it, and so does awf.
fn warn_own_pattern(cx: &mut Ctx, p: &Node, path: &str, name: &str) {
    cx.warn(
        codes::NO_EFFECT,
        &join(path, "pattern"),
        p.line,
        format!("`pattern` of input {name:?} has no effect: AWF ignores it too"),
        "write it under `validation:` (`validation: {pattern: \"...\"}`), which AWF and awf \
         check",
    );
}

/// An input's `default`: one value, or a list of values as AWF passes it on (its inputs
/// are Go values, and a list prints as `[a b c]`), with a warning saying so.
fn default_value(cx: &mut Ctx, v: &Node, path: &str, name: &str) -> Option<String> {
    let Kind::Seq(items) = &v.kind else {
        return cx.string(v, path);
    };
    let mut words = Vec::with_capacity(items.len());
    for item in items {
        match &item.kind {
            _ if item.is_null() => words.push("<nil>".to_string()),
            Kind::Scalar(s, _) => words.push(s.clone()),
            _ => return cx.string(v, path),
        }
    }
    let value = format!("[{}]", words.join(" "));
    cx.warn(
        codes::NO_EFFECT,
        path,
        v.line,
        format!(
            "the list default of input {name:?} is passed as AWF passes it, as the text \
             {value:?}, not as a list a for_each can go through"
        ),
        "to iterate over the values, write them as a JSON array in a string: \
         default: '[\"one\", \"two\"]'",
    );
    Some(value)
}

fn check_default(cx: &mut Ctx, value: &str, kind: InputType, line: usize, path: &str) {
    let ok = match kind {
        InputType::String => true,
        InputType::Integer => value.parse::<i64>().is_ok(),
        InputType::Boolean => parse_boolean(value).is_some(),
    };
    if !ok {
        cx.warn(
            codes::INVALID_VALUE,
            path,
            line,
            format!(
                "default {value:?} is not a valid {}: a run that uses it fails",
                kind.name()
            ),
            match kind {
                InputType::Integer => "write a whole number",
                _ => "write true, yes, 1, false, no or 0",
            },
        );
    }
}

/// `validation: {pattern, enum, min, max, file_exists, file_extension}`.
fn parse_validation(
    cx: &mut Ctx,
    node: &Node,
    path: &str,
    name: &str,
    kind: InputType,
) -> Option<InputValidation> {
    if node.is_null() {
        return None;
    }
    let fields = cx.fields(node, path, InputValidation::KEYS, codes::UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let mut v = InputValidation::default();
    if let Some(p) = get("pattern") {
        let ppath = join(path, "pattern");
        v.pattern = cx.string(p, &ppath).filter(|s| !s.is_empty());
        if let Some(text) = &v.pattern
            && let Err(e) = Pattern::compile(text)
        {
            cx.push(
                codes::INVALID_VALUE,
                &ppath,
                p.line,
                format!("{ppath}: {text:?} is not a valid regular expression: {e}"),
                "write a Go (RE2) regular expression; it may match anywhere in the value, \
                 anchor it with ^…$ to match the whole value",
            );
        }
    }
    if let Some(e) = get("enum") {
        v.enum_values = text_list(cx, e, &join(path, "enum"));
    }
    for (key, slot) in [("min", &mut v.min), ("max", &mut v.max)] {
        let Some(n) = get(key) else { continue };
        let kpath = join(path, key);
        match n.as_str().filter(|_| !n.is_null()).map(str::parse::<i64>) {
            Some(Ok(x)) => *slot = Some(x),
            _ => cx.push(
                codes::WRONG_TYPE,
                &kpath,
                n.line,
                format!("{kpath} must be a whole number, found {}", n.describe()),
                format!("write `{key}: 10`"),
            ),
        }
        if kind != InputType::Integer {
            cx.push(
                codes::INVALID_VALUE,
                &kpath,
                n.line,
                format!(
                    "{kpath}: {key} applies to `type: integer` inputs only, and {name:?} is a \
                     {} input: AWF would never check it",
                    kind.name()
                ),
                format!("set `type: integer` on the input, or remove `{key}`"),
            );
        }
    }
    if let (Some(lo), Some(hi)) = (v.min, v.max)
        && lo > hi
    {
        let line = get("min").map_or(node.line, |n| n.line);
        cx.push(
            codes::INVALID_VALUE,
            &join(path, "min"),
            line,
            format!("{path}: min {lo} is above max {hi}: no value can pass"),
            "swap them, or fix the bound",
        );
    }
    if let Some(f) = get("file_exists") {
        v.file_exists = cx
            .boolean(f, &join(path, "file_exists"), codes::WRONG_TYPE)
            .unwrap_or(false);
    }
    if let Some(e) = get("file_extension") {
        v.file_extension = file_extensions(cx, e, &join(path, "file_extension"));
    }
    // String rules on an input whose value is not text: AWF skips them silently.
    if kind != InputType::String {
        for key in ["pattern", "enum", "file_exists", "file_extension"] {
            let Some(n) = get(key) else { continue };
            cx.warn(
                codes::NO_EFFECT,
                &join(path, key),
                n.line,
                format!(
                    "{key} of the {} input {name:?} has no effect: AWF checks it on string \
                     inputs only",
                    kind.name()
                ),
                "remove it, or make the input `type: string`",
            );
        }
    }
    Some(v)
}

/// `file_extension: [".go", ...]`, each refused that can never equal a file's extension
/// (AWF compares with the last dot, case-sensitively).
fn file_extensions(cx: &mut Ctx, e: &Node, epath: &str) -> Vec<String> {
    let extensions = text_list(cx, e, epath);
    let items: Vec<&Node> = match &e.kind {
        Kind::Seq(items) => items.iter().collect(),
        _ => Vec::new(),
    };
    for (i, (ext, item)) in extensions.iter().zip(items).enumerate() {
        if ext.starts_with('.') && file_extension(ext) == ext.as_str() {
            continue;
        }
        let ipath = format!("{epath}[{i}]");
        let hint = if ext.is_empty() || ext.contains('/') {
            "write an extension with its dot, such as \".go\"".to_string()
        } else {
            format!(
                "write \".{}\": AWF compares the file's extension with its dot, \
                 case-sensitively",
                ext.trim_start_matches('.')
                    .rsplit('.')
                    .next()
                    .unwrap_or_default()
            )
        };
        cx.push(
            codes::INVALID_VALUE,
            &ipath,
            item.line,
            format!(
                "{ipath}: {ext:?} can never equal a file's extension, which starts with its \
                 last dot"
            ),
            hint,
        );
    }
    extensions
}

/// A list of scalars as text (`enum`, `file_extension`): YAML numbers become their text,
/// as in AWF.
fn text_list(cx: &mut Ctx, node: &Node, path: &str) -> Vec<String> {
    let Kind::Seq(items) = &node.kind else {
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!("{path} must be a list, found {}", node.describe()),
            format!(
                "write `{}: [a, b]`",
                path.rsplit('.').next().unwrap_or(path)
            ),
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
    use crate::workflow::parse::parse;
    use crate::workflow::{Diagnostic, InputType, Workflow};
    use std::path::Path;

    const STATES: &str = "states:\n  initial: done\n  done:\n    type: terminal\n";

    fn parsed(inputs: &str) -> (Workflow, Vec<Diagnostic>) {
        let text = format!("name: t\ninputs:\n{inputs}{STATES}");
        let (wf, d) = parse(&text, Path::new("wf.yaml"));
        (wf.expect("built"), d)
    }

    fn only(d: &[Diagnostic]) -> &Diagnostic {
        assert_eq!(d.len(), 1, "{d:#?}");
        &d[0]
    }

    #[test]
    fn rules_are_read() {
        let (wf, d) = parsed(
            "  - name: env\n    validation: {pattern: '^[a-z]+$', enum: [dev, 1]}\n  \
             - name: n\n    type: integer\n    default: 3\n    validation: {min: 1, max: 9}\n  \
             - name: f\n    validation:\n      file_exists: true\n      file_extension: [.rs, .go]\n",
        );
        assert!(d.is_empty(), "{d:#?}");
        let v = wf.inputs[0].validation.as_ref().unwrap();
        assert_eq!(v.pattern.as_deref(), Some("^[a-z]+$"));
        assert_eq!(v.enum_values, ["dev", "1"]);
        let v = wf.inputs[1].validation.as_ref().unwrap();
        assert_eq!((v.min, v.max), (Some(1), Some(9)));
        assert_eq!(wf.inputs[1].kind, InputType::Integer);
        let v = wf.inputs[2].validation.as_ref().unwrap();
        assert!(v.file_exists);
        assert_eq!(v.file_extension, [".rs", ".go"]);
    }

    #[test]
    fn an_unknown_type_names_the_three_and_is_refused_only_with_a_value() {
        let (wf, d) = parsed("  - name: n\n    type: number\n");
        let p = only(&d);
        assert_eq!(p.path, "inputs[0].type");
        assert!(p.message.contains("string, integer, boolean"), "{p:?}");
        // As AWF: a warning now, a refusal when a run gives the input a value.
        assert!(!p.is_error());
        assert_eq!(wf.inputs[0].unknown_type.as_deref(), Some("number"));
    }

    #[test]
    fn bad_rules_are_refused_with_their_path() {
        for (inputs, path) in [
            (
                "    validation: {pattern: '(a'}\n",
                "inputs[0].validation.pattern",
            ),
            ("    validation: {min: 1}\n", "inputs[0].validation.min"),
            (
                "    type: integer\n    validation: {min: 5, max: 1}\n",
                "inputs[0].validation.min",
            ),
            (
                "    type: integer\n    validation: {max: 1.5}\n",
                "inputs[0].validation.max",
            ),
            (
                "    validation: {file_extension: [.rs, go]}\n",
                "inputs[0].validation.file_extension[1]",
            ),
            ("    validation: {enum: dev}\n", "inputs[0].validation.enum"),
            ("    validation: {regex: x}\n", "inputs[0].validation.regex"),
        ] {
            let (_, d) = parsed(&format!("  - name: x\n{inputs}"));
            let p = only(&d);
            assert!(p.is_error(), "{inputs}: {p:?}");
            assert_eq!(p.path, path, "{inputs}: {p:?}");
        }
        let (_, d) = parsed("  - name: x\n    validation: {file_extension: [go]}\n");
        assert!(only(&d).hint.contains("\".go\""), "{d:?}");
    }

    #[test]
    fn string_rules_on_other_types_warn() {
        let (_, d) = parsed("  - name: n\n    type: integer\n    validation: {enum: [1, 2]}\n");
        let p = only(&d);
        assert!(!p.is_error());
        assert_eq!(p.path, "inputs[0].validation.enum");
    }

    #[test]
    fn a_default_of_the_wrong_type_warns() {
        let (_, d) = parsed("  - name: n\n    type: boolean\n    default: maybe\n");
        assert!(!only(&d).is_error());
        let (_, d) = parsed("  - name: n\n    type: boolean\n    default: yes\n");
        assert!(d.is_empty(), "{d:?}");
    }
}
