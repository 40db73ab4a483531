//! What the CLI providers share: their options read (strings, extra arguments, the model
//! key from `api_key_env`) and their output read (JSON lines, an excerpt for an error, the
//! failure of a CLI that exited badly), and the private files they write.

use crate::error::{AwfError, codes};
use serde_json::{Map, Value};
use std::path::Path;
use std::process::ExitStatus;

/// A string option, `None` when absent; any other type is a USER error naming the option.
pub(crate) fn opt_str(
    options: &Map<String, Value>,
    key: &str,
    provider: &str,
) -> Result<Option<String>, AwfError> {
    match options.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(AwfError::new(
            codes::AGENT_OPTION,
            format!("option {key} of provider {provider} must be a string, not {other}"),
        )),
    }
}

/// `extra_args`: a list of strings appended to the CLI's arguments before the prompt.
pub(super) fn extra_args(
    options: &Map<String, Value>,
    provider: &str,
) -> Result<Vec<String>, AwfError> {
    match options.get("extra_args") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(String::from).ok_or_else(|| {
                    AwfError::new(
                        codes::AGENT_OPTION,
                        format!(
                            "option extra_args of provider {provider} must list strings; {v} is not one"
                        ),
                    )
                })
            })
            .collect(),
        Some(other) => Err(AwfError::new(
            codes::AGENT_OPTION,
            format!("option extra_args of provider {provider} must be a list of strings, not {other}"),
        )),
    }
}

/// The API key named by option `api_key_env` (the name of an environment variable, so the
/// key itself never sits in a workflow file). `None` when the option is absent.
pub(crate) fn api_key(
    options: &Map<String, Value>,
    provider: &str,
) -> Result<Option<String>, AwfError> {
    let Some(var) = opt_str(options, "api_key_env", provider)? else {
        return Ok(None);
    };
    match std::env::var(&var) {
        Ok(v) if !v.is_empty() => Ok(Some(v)),
        _ => Err(AwfError::new(
            codes::AGENT_OPTION,
            format!(
                "provider {provider}: option api_key_env names {var}, but that environment variable is not set; export it or fix api_key_env"
            ),
        )),
    }
}

/// Writes a generated per-step file (new, 0600, in a private directory; it may hold keys).
pub(super) fn write_private(path: &Path, contents: &str) -> Result<(), AwfError> {
    crate::private_files::write_private(path, contents.as_bytes())
}

pub(super) fn json_lines(stdout: &str) -> impl Iterator<Item = Value> + '_ {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
}

/// The last 600 characters of a text, on one line, for error messages.
pub(crate) fn excerpt(text: &str) -> String {
    let t = text.trim();
    let chars: Vec<char> = t.chars().collect();
    let start = chars.len().saturating_sub(600);
    let tail: String = chars[start..].iter().collect();
    let tail = tail.replace('\n', " | ");
    if start > 0 {
        format!("…{tail}")
    } else {
        tail
    }
}

/// An EXECUTION error for a failed agent run, with the exit status and stderr's tail.
pub(super) fn agent_failed(
    provider: &str,
    what: &str,
    stderr: &str,
    status: ExitStatus,
) -> AwfError {
    let err = excerpt(stderr);
    AwfError::new(
        codes::AGENT_FAILED,
        format!(
            "the {provider} agent {what} ({status}){}",
            if err.is_empty() {
                String::new()
            } else {
                format!("; stderr: {err}")
            }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_key_env_names_a_missing_variable() {
        let options: Map<String, Value> =
            serde_json::from_value(json!({"api_key_env": "AWF_TEST_SURELY_UNSET_KEY"})).unwrap();
        let e = api_key(&options, "claude").unwrap_err();
        assert_eq!(e.code(), codes::AGENT_OPTION);
        assert!(e.message().contains("AWF_TEST_SURELY_UNSET_KEY"));
    }
}
