//! `--input KEY=VALUE`: the run's inputs, as AWF makes them (`prepareExecution` then
//! `validation.ValidateInputs`): the defaults of the declared inputs not given, every
//! given value (a name the workflow does not declare too, with a warning), then each
//! declared input checked against its type and `validation:` rules. Every problem is
//! reported at once, in AWF's words. Values stay the text given (a `boolean` given `yes`
//! is `yes` in templates).

use crate::error::{AwfError, codes};
use crate::workflow::inputs::{Pattern, file_extension, go_list, parse_boolean};
use crate::workflow::{InputDef, InputType, Workflow};
use std::collections::HashMap;

/// Parses `k=v` inputs, applies defaults and checks the declared inputs.
pub fn resolve_inputs(
    wf: &Workflow,
    given: &[String],
) -> Result<HashMap<String, String>, AwfError> {
    let mut provided: HashMap<String, String> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for kv in given {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {kv:?} is not KEY=VALUE"),
            ));
        };
        // AWF trims both sides and refuses an empty name.
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(AwfError::new(
                codes::INPUT_INVALID,
                format!("--input {kv:?} has an empty name; write KEY=VALUE"),
            ));
        }
        if !order.iter().any(|o| o == k) {
            order.push(k.to_string());
        }
        provided.insert(k.to_string(), v.to_string());
    }
    for k in &order {
        if !wf.inputs.iter().any(|i| &i.name == k) {
            // A typo of a declared input not given otherwise would run with its default.
            let untold: Vec<&str> = wf
                .inputs
                .iter()
                .map(|i| i.name.as_str())
                .filter(|n| !provided.contains_key(*n))
                .collect();
            if let Some(near) = crate::workflow::parse::closest(k, &untold) {
                return Err(AwfError::new(
                    codes::INPUT_INVALID,
                    format!(
                        "--input {k}: the workflow declares no input {k:?}; did you mean \
                         {near:?}? (--input {near}={})",
                        provided[k]
                    ),
                ));
            }
            eprintln!(
                "awf: WARN --input {k}: the workflow declares no input {k:?}; it is passed on \
                 as AWF does"
            );
        }
    }
    let mut out = provided.clone();
    let mut errors = Vec::new();
    let mut missing = Vec::new();
    for def in &wf.inputs {
        let Some(value) = provided.get(&def.name).or(def.default.as_ref()) else {
            if def.required {
                errors.push(format!("inputs.{}: required but not provided", def.name));
                missing.push(def.name.as_str());
            } else {
                // Not given and no default: an empty value in templates.
                out.insert(def.name.clone(), String::new());
            }
            continue;
        };
        out.insert(def.name.clone(), value.clone());
        if def.required && value.is_empty() {
            errors.push(format!("inputs.{}: required but empty", def.name));
        }
        check_value(def, value, &mut errors);
    }
    if errors.is_empty() {
        return Ok(out);
    }
    let mut message = match errors.as_slice() {
        [one] => format!("input validation failed: {one}"),
        many => format!(
            "input validation failed: {} errors:\n  - {}",
            many.len(),
            many.join("\n  - ")
        ),
    };
    if !missing.is_empty() {
        message.push_str(&format!(
            "\n  hint: pass {}",
            missing
                .iter()
                .map(|m| format!("--input {m}=VALUE"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    // Only required inputs missing: USER.INPUT.MISSING; any other problem: INVALID.
    let code = if missing.len() == errors.len() {
        codes::INPUT_MISSING
    } else {
        codes::INPUT_INVALID
    };
    Err(AwfError::new(code, message))
}

/// AWF's checks of one declared input's value, in its order: the type (nothing more is
/// checked when it fails), then the rules. As in AWF, `pattern`, `enum` and the file
/// rules apply to string inputs, `min`/`max` to integer ones.
fn check_value(def: &InputDef, value: &str, errors: &mut Vec<String>) {
    let name = &def.name;
    if let Some(t) = &def.unknown_type {
        errors.push(format!("inputs.{name}: unknown type {t:?}"));
        return;
    }
    let int = match def.kind {
        InputType::String => None,
        InputType::Integer => match value.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                errors.push(format!(
                    "inputs.{name}: cannot convert {value:?} to integer"
                ));
                return;
            }
        },
        InputType::Boolean => {
            if parse_boolean(value).is_none() {
                errors.push(format!(
                    "inputs.{name}: cannot convert {value:?} to boolean"
                ));
            }
            return;
        }
    };
    let Some(rules) = &def.validation else {
        return;
    };
    if let Some(n) = int {
        if let Some(min) = rules.min
            && n < min
        {
            errors.push(format!("inputs.{name}: value {n} is below minimum {min}"));
        } else if let Some(max) = rules.max
            && n > max
        {
            errors.push(format!("inputs.{name}: value {n} exceeds maximum {max}"));
        }
        return;
    }
    if let Some(p) = &rules.pattern {
        match Pattern::compile(p) {
            Ok(re) if re.is_match(value) => {}
            Ok(_) => errors.push(format!(
                "inputs.{name}: value {value:?} does not match pattern {p:?}"
            )),
            Err(e) => errors.push(format!("inputs.{name}: invalid regex pattern {p:?}: {e}")),
        }
    }
    if !rules.enum_values.is_empty() && !rules.enum_values.iter().any(|a| a == value) {
        errors.push(format!(
            "inputs.{name}: value {value:?} not in allowed values {}",
            go_list(&rules.enum_values)
        ));
    }
    if rules.file_exists {
        if value.is_empty() {
            errors.push(format!("inputs.{name}: file path cannot be empty"));
        } else if let Err(e) = std::fs::metadata(value) {
            if e.kind() == std::io::ErrorKind::NotFound {
                errors.push(format!("inputs.{name}: file does not exist: {value}"));
            } else {
                errors.push(format!("inputs.{name}: cannot access file: {value}: {e}"));
            }
        }
    }
    if !rules.file_extension.is_empty() && !value.is_empty() {
        let ext = file_extension(value);
        if ext.is_empty() {
            errors.push(format!(
                "inputs.{name}: file {value:?} has no extension, allowed: {}",
                go_list(&rules.file_extension)
            ));
        } else if !rules.file_extension.iter().any(|a| a == ext) {
            errors.push(format!(
                "inputs.{name}: file extension {ext:?} not in allowed extensions {}",
                go_list(&rules.file_extension)
            ));
        }
    }
}

/// Whether AWF masks the value of input `name`: its name, upper-cased, starts with
/// `SECRET_`, `API_KEY`, `PASSWORD` or `TOKEN` (`api_key_x`, `TOKENIZER` and `PASSWORD`
/// do; `MY_TOKEN` and `SECRET` do not).
pub fn is_secret_input(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["SECRET_", "API_KEY", "PASSWORD", "TOKEN"]
        .iter()
        .any(|p| upper.starts_with(p))
}

/// The fewest bytes a secret input's value must have to be masked: AWF masks any
/// non-empty value, but masking a `1` or a `yes` everywhere in a step's output would
/// garble it and tell which characters the secret is made of.
pub const MIN_MASKED_LEN: usize = 4;

/// The values to mask (replace with `***`) in what a run shows and keeps — step output,
/// the summary: those of the secret inputs ([`is_secret_input`]) of at least
/// [`MIN_MASKED_LEN`] bytes, longest first (so that a value containing another is
/// masked whole), each once.
pub fn secret_input_values(wf_inputs: &HashMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = wf_inputs
        .iter()
        .filter(|(k, v)| is_secret_input(k) && v.len() >= MIN_MASKED_LEN)
        .map(|(_, v)| v.clone())
        .collect();
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::InputValidation;
    use std::path::PathBuf;

    fn input(name: &str, kind: InputType, rules: Option<InputValidation>) -> InputDef {
        InputDef {
            name: name.into(),
            kind,
            required: false,
            default: None,
            description: None,
            validation: rules,
            line: 1,
            unknown_type: None,
        }
    }

    fn wf(inputs: Vec<InputDef>) -> Workflow {
        Workflow {
            name: "t".into(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs,
            initial: "done".into(),
            initial_line: 1,
            states: Vec::new(),
            hooks: Default::default(),
            path: PathBuf::from("wf.yaml"),
            unparsed_states: Vec::new(),
        }
    }

    fn given(kv: &[&str]) -> Vec<String> {
        kv.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_misspelt_input_is_refused_with_the_name_it_is_near() {
        let mut mode = input("mode", InputType::String, None);
        mode.default = Some("quick".into());
        let w = wf(vec![mode, input("target", InputType::String, None)]);
        let e = resolve_inputs(&w, &given(&["mdoe=full"])).unwrap_err();
        assert!(
            e.message()
                .contains("did you mean \"mode\"? (--input mode=full)"),
            "{}",
            e.message()
        );
        // Far from every name, or near one given too: passed on, as AWF does.
        let out = resolve_inputs(&w, &given(&["extra=1"])).unwrap();
        assert_eq!(out["extra"], "1");
        let out = resolve_inputs(&w, &given(&["mode=a", "mdoe=b"])).unwrap();
        assert_eq!((out["mode"].as_str(), out["mdoe"].as_str()), ("a", "b"));
    }

    #[test]
    fn every_problem_is_reported_at_once_in_awf_words() {
        let w = wf(vec![
            InputDef {
                required: true,
                ..input("target", InputType::String, None)
            },
            input(
                "env",
                InputType::String,
                Some(InputValidation {
                    pattern: Some("^[a-z]+$".into()),
                    enum_values: vec!["dev".into(), "prod".into()],
                    ..Default::default()
                }),
            ),
            input(
                "n",
                InputType::Integer,
                Some(InputValidation {
                    min: Some(10),
                    max: Some(100),
                    ..Default::default()
                }),
            ),
            input("flag", InputType::Boolean, None),
            input(
                "file",
                InputType::String,
                Some(InputValidation {
                    file_exists: true,
                    file_extension: vec![".go".into()],
                    ..Default::default()
                }),
            ),
        ]);
        let e = resolve_inputs(
            &w,
            &given(&["env=Stage1", "n=5", "flag=maybe", "file=no/such.txt"]),
        )
        .unwrap_err();
        assert_eq!(e.code(), codes::INPUT_INVALID);
        let m = e.message();
        for line in [
            "input validation failed: 7 errors:",
            "  - inputs.target: required but not provided",
            "  - inputs.env: value \"Stage1\" does not match pattern \"^[a-z]+$\"",
            "  - inputs.env: value \"Stage1\" not in allowed values [dev prod]",
            "  - inputs.n: value 5 is below minimum 10",
            "  - inputs.flag: cannot convert \"maybe\" to boolean",
            "  - inputs.file: file does not exist: no/such.txt",
            "  - inputs.file: file extension \".txt\" not in allowed extensions [.go]",
            "  hint: pass --input target=VALUE",
        ] {
            assert!(m.lines().any(|l| l == line), "{line:?} in\n{m}");
        }
    }

    #[test]
    fn one_problem_is_one_line() {
        let w = wf(vec![input(
            "n",
            InputType::Integer,
            Some(InputValidation {
                max: Some(100),
                ..Default::default()
            }),
        )]);
        let e = resolve_inputs(&w, &given(&["n=150"])).unwrap_err();
        assert_eq!(
            e.message(),
            "input validation failed: inputs.n: value 150 exceeds maximum 100"
        );
        let e = resolve_inputs(&w, &given(&["n=abc"])).unwrap_err();
        assert_eq!(
            e.message(),
            "input validation failed: inputs.n: cannot convert \"abc\" to integer"
        );
        assert!(resolve_inputs(&w, &given(&["n=+42"])).is_ok());
    }

    #[test]
    fn only_missing_inputs_keep_their_code() {
        let w = wf(vec![InputDef {
            required: true,
            ..input("who", InputType::String, None)
        }]);
        let e = resolve_inputs(&w, &[]).unwrap_err();
        assert_eq!(e.code(), codes::INPUT_MISSING);
        let e = resolve_inputs(&w, &given(&["who="])).unwrap_err();
        assert_eq!(e.code(), codes::INPUT_INVALID);
        assert!(e.message().contains("inputs.who: required but empty"));
    }

    #[test]
    fn booleans_as_awf_takes_them_and_values_kept_as_given() {
        let w = wf(vec![input("flag", InputType::Boolean, None)]);
        for v in ["true", "YES", "1", "False", "no", "0"] {
            let got = resolve_inputs(&w, &given(&[&format!("flag={v}")])).unwrap();
            assert_eq!(got["flag"], v);
        }
    }

    #[test]
    fn defaults_undeclared_names_and_trimming() {
        let mut d = input("n", InputType::Integer, None);
        d.default = Some("3".into());
        let w = wf(vec![d, input("opt", InputType::String, None)]);
        let got = resolve_inputs(&w, &given(&[" extra = x "])).unwrap();
        assert_eq!(got["n"], "3");
        assert_eq!(got["opt"], "");
        assert_eq!(got["extra"], "x");
        assert!(resolve_inputs(&w, &given(&["=x"])).is_err());
        assert!(resolve_inputs(&w, &given(&["novalue"])).is_err());
    }

    #[test]
    fn rules_not_for_the_type_are_skipped_as_in_awf() {
        // An integer input's pattern is not checked (AWF checks patterns on text only).
        let w = wf(vec![input(
            "n",
            InputType::Integer,
            Some(InputValidation {
                pattern: Some("^x$".into()),
                ..Default::default()
            }),
        )]);
        assert!(resolve_inputs(&w, &given(&["n=4"])).is_ok());
        // A file rule on an empty optional value: file_exists refuses it, the
        // extension rule skips it.
        let w = wf(vec![input(
            "f",
            InputType::String,
            Some(InputValidation {
                file_exists: true,
                file_extension: vec![".rs".into()],
                ..Default::default()
            }),
        )]);
        let e = resolve_inputs(&w, &given(&["f="])).unwrap_err();
        assert_eq!(
            e.message(),
            "input validation failed: inputs.f: file path cannot be empty"
        );
        // Not given and not required: no rule runs.
        assert!(resolve_inputs(&w, &[]).is_ok());
        let e = resolve_inputs(&w, &given(&["f=Cargo"])).unwrap_err();
        assert!(
            e.message()
                .contains("file \"Cargo\" has no extension, allowed: [.rs]")
        );
    }

    #[test]
    fn secret_names_and_values() {
        for (name, secret) in [
            ("API_KEY_DEPLOY", true),
            ("api_key_x", true),
            ("TOKENIZER", true),
            ("PASSWORD", true),
            ("secret_db", true),
            ("MY_TOKEN", false),
            ("SECRET", false),
            ("user", false),
        ] {
            assert_eq!(is_secret_input(name), secret, "{name}");
        }
        let inputs: HashMap<String, String> = [
            ("TOKEN_A", "abcd"),
            ("token_b", "abcdefgh"),
            ("PASSWORD", "1"),
            ("SECRET_C", "abcdefgh"),
            ("user", "someone"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(secret_input_values(&inputs), ["abcdefgh", "abcd"]);
    }
}
