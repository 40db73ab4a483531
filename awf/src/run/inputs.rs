//! `--input KEY=VALUE`: parsed and type-checked against the workflow's declared inputs,
//! with defaults applied and required ones enforced.

use crate::error::{AwfError, codes};
use crate::workflow::{InputType, Workflow};
use std::collections::HashMap;

/// Parses `k=v` inputs against the declared ones, applying defaults.
pub fn resolve_inputs(
    wf: &Workflow,
    given: &[String],
) -> Result<HashMap<String, String>, AwfError> {
    let mut out = HashMap::new();
    for kv in given {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {kv:?} is not KEY=VALUE"),
            ));
        };
        let Some(def) = wf.inputs.iter().find(|i| i.name == k) else {
            return Err(AwfError::new(
                codes::INPUT_UNKNOWN,
                format!(
                    "--input {k}: the workflow {} declares no input {k:?} (declared: {})",
                    wf.path.display(),
                    names_or_none(wf.inputs.iter().map(|i| i.name.as_str()))
                ),
            ));
        };
        let ok = match def.kind {
            InputType::String => true,
            InputType::Integer => v.parse::<i64>().is_ok(),
            InputType::Boolean => matches!(v, "true" | "false"),
        };
        if !ok {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {k}={v}: the input {k} is declared {:?}", def.kind),
            ));
        }
        out.insert(k.to_string(), v.to_string());
    }
    for def in &wf.inputs {
        if out.contains_key(&def.name) {
            continue;
        }
        match (&def.default, def.required) {
            (Some(d), _) => {
                out.insert(def.name.clone(), d.clone());
            }
            (None, true) => {
                return Err(AwfError::new(
                    codes::INPUT_MISSING,
                    format!(
                        "the input {} is required; pass --input {}=VALUE",
                        def.name, def.name
                    ),
                ));
            }
            (None, false) => {
                out.insert(def.name.clone(), String::new());
            }
        }
    }
    Ok(out)
}

fn names_or_none<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
