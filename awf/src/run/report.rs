//! What a run reports: each state's [`StateResult`] with its [`Status`], and the summary
//! printed to stdout at the end (human or JSON).

use crate::error::AwfError;
use crate::tool_proxy::ProxyReport;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// How a state ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Success,
    Failure,
    Timeout,
    Interrupted,
    /// A branch of a `parallel` state stopped (or never started) by its strategy.
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Failure => "failure",
            Status::Timeout => "timeout",
            Status::Interrupted => "interrupted",
            Status::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StateResult {
    pub state: String,
    /// The iteration of a for_each this result is of (from 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<usize>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: Status,
    pub output: String,
    /// What a step wrote to stderr (`{{.states.X.Stderr}}`), its head and tail kept as its
    /// output is.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The attempts a step with `retry:` made (None without `retry:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The attempts an agent state's `retry:` allows (`max_attempts`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The class of each failed attempt of an agent state that was followed by another
    /// (`rate_limit`, `overloaded`, `server_error`, `timeout`, or `other`), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<String>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_calls: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyReport>,
    /// The step's model turns as the relay saw them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::relay::ModelStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorJson>,
    /// The CLI session of an agent state with `conversation:`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl StateResult {
    /// A result that so far succeeded, with nothing recorded yet.
    pub fn new(state: &str, kind: &'static str) -> Self {
        StateResult {
            state: state.to_string(),
            iteration: None,
            kind,
            status: Status::Success,
            output: String::new(),
            stderr: String::new(),
            exit_code: None,
            attempts: None,
            max_attempts: None,
            retried: Vec::new(),
            duration_ms: 0,
            provider: None,
            tool_calls: BTreeMap::new(),
            proxy: None,
            model: None,
            usage: None,
            cost_usd: None,
            error: None,
            session_id: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorJson {
    pub code: &'static str,
    pub message: String,
}

impl From<&AwfError> for ErrorJson {
    fn from(e: &AwfError) -> Self {
        ErrorJson {
            code: e.code(),
            message: e.message().to_string(),
        }
    }
}

/// Prints the run's summary to stdout, as JSON or for a human.
pub fn print_summary(summary: &Value, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(summary).expect("JSON"));
    } else {
        print!("{}", human(summary));
    }
}

/// `2× overloaded, 1× rate_limit`: each class with its count, in the order first seen.
fn classes(retried: &[&str]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in retried {
        match counts.iter_mut().find(|(k, _)| k == c) {
            Some((_, n)) => *n += 1,
            None => counts.push((c, 1)),
        }
    }
    counts
        .iter()
        .map(|(c, n)| format!("{n}× {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary for a human: a line per state, then what it did and what went wrong.
fn human(s: &Value) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    // What a model, a tool or a workflow wrote reaches the terminal escaped.
    let p = |v: &Value| crate::terminal::printable(v.as_str().unwrap_or("")).into_owned();
    let _ = writeln!(
        text,
        "workflow {} — {} in {:.1}s",
        p(&s["workflow"]),
        s["status"].as_str().unwrap_or(""),
        s["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0
    );
    for st in s["states"].as_array().into_iter().flatten() {
        state_line(&mut text, st);
        model_and_proxy(&mut text, st);
        output_and_error(&mut text, st);
    }
    text
}

/// What a model, a tool or a workflow wrote, escaped for the terminal.
fn printable(v: &Value) -> String {
    crate::terminal::printable(v.as_str().unwrap_or("")).into_owned()
}

/// A state's line: its name, type, status and time, its attempts and its tool calls.
fn state_line(text: &mut String, st: &Value) {
    use std::fmt::Write;
    let p = printable;
    let calls = st["tool_calls"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}×{v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty())
        .map(|s| format!("  tools: {s}"))
        .unwrap_or_default();
    let retried: Vec<&str> = st["retried"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let attempts = match st["attempts"].as_u64() {
        Some(n) if !retried.is_empty() => format!(
            "  {} on attempt {n}{} ({})",
            if st["status"] == "success" {
                "succeeded"
            } else {
                "failed"
            },
            st["max_attempts"]
                .as_u64()
                .map(|m| format!(" of {m}"))
                .unwrap_or_default(),
            crate::terminal::printable(&classes(&retried))
        ),
        Some(1) => "  1 attempt".to_string(),
        Some(n) => format!("  {n} attempts"),
        None => String::new(),
    };
    let _ = writeln!(
        text,
        "  {:<20} {:<8} {:<11} {:>7.1}s{attempts}{calls}",
        p(&st["state"]),
        p(&st["type"]),
        p(&st["status"]),
        st["duration_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
    );
}

/// The model's figures, and what the tool proxy saw: the network, withheld tools, tool
/// errors, sessions that ended without a word.
fn model_and_proxy(text: &mut String, st: &Value) {
    use std::fmt::Write;
    let p = printable;
    let m = &st["model"];
    if let Some(n) = m["requests"].as_u64() {
        let _ = writeln!(
            text,
            "      model: {n} request{} · {} in / {} out tokens · {:.1}s in the model{}",
            if n == 1 { "" } else { "s" },
            m["input_tokens"].as_u64().unwrap_or(0),
            m["output_tokens"].as_u64().unwrap_or(0),
            m["model_ms"].as_u64().unwrap_or(0) as f64 / 1000.0,
            m["budget_exhausted"]
                .as_str()
                .map(|l| format!(" · budget spent ({l})"))
                .unwrap_or_default()
        );
    }
    let net = &st["proxy"]["net"];
    if let Some(hosts) = net["contacted"].as_object().filter(|m| !m.is_empty()) {
        let list: Vec<String> = hosts.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        let _ = writeln!(
            text,
            "      network: {}",
            crate::terminal::printable(&list.join(" "))
        );
    }
    if let Some(denied) = net["denied"].as_object().filter(|m| !m.is_empty()) {
        for (target, d) in denied {
            let _ = writeln!(
                text,
                "      network denied: {} ×{} ({})",
                crate::terminal::printable(target),
                d["attempts"].as_u64().unwrap_or(0),
                p(&d["reason"])
            );
        }
    }
    if let Some(withheld) = st["proxy"]["withheld"].as_object() {
        for (tool, why) in withheld {
            let _ = writeln!(
                text,
                "      withheld: {} ({})",
                crate::terminal::printable(tool),
                p(why)
            );
        }
    }
    if let Some(errors) = st["proxy"]["tool_errors"]
        .as_object()
        .filter(|m| !m.is_empty())
    {
        let list: Vec<String> = errors.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        let _ = writeln!(
            text,
            "      tool errors: {} (each call's error is in the audit file {})",
            crate::terminal::printable(&list.join(" ")),
            p(&st["proxy"]["audit_file"])
        );
    }
    if let Some(crashed) = st["proxy"]["crashed_sessions"]
        .as_array()
        .filter(|v| !v.is_empty())
    {
        let _ = writeln!(
            text,
            "      tool server sessions that ended without a word: {}",
            crashed.len()
        );
    }
}

/// The state's output (its first 20 lines) and its error.
fn output_and_error(text: &mut String, st: &Value) {
    use std::fmt::Write;
    let p = printable;
    let out = st["output"].as_str().unwrap_or("").trim();
    if !out.is_empty() {
        for line in out.lines().take(20) {
            let _ = writeln!(text, "      {}", crate::terminal::printable(line));
        }
        if out.lines().count() > 20 {
            let _ = writeln!(text, "      …");
        }
    }
    if let Some(e) = st["error"]["message"].as_str() {
        // A message of several lines (a failed step's stderr) stays indented under it.
        let message: Vec<String> = e
            .lines()
            .map(|l| crate::terminal::printable(l).into_owned())
            .collect();
        let _ = writeln!(
            text,
            "      error: {} ({})",
            message.join("\n        "),
            p(&st["error"]["code"])
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_human_summary_shows_the_tool_errors_the_json_has() {
        let s = serde_json::json!({
            "workflow": "w", "status": "failure", "duration_ms": 10,
            "states": [{"state": "fix", "type": "agent", "status": "failure", "duration_ms": 5,
                        "tool_calls": {"Bash": 3},
                        "proxy": {"tool_errors": {"Bash": 2}, "crashed_sessions": ["s1"],
                                  "audit_file": "/a/1-fix.audit.jsonl"}}]
        });
        let text = human(&s);
        assert!(
            text.contains(
                "tool errors: Bash×2 (each call's error is in the audit file /a/1-fix.audit.jsonl)"
            ),
            "{text}"
        );
        assert!(text.contains("ended without a word: 1"), "{text}");
    }

    #[test]
    fn retried_classes_are_counted_in_order() {
        assert_eq!(classes(&["overloaded", "overloaded"]), "2× overloaded");
        assert_eq!(
            classes(&["rate_limit", "overloaded", "rate_limit"]),
            "2× rate_limit, 1× overloaded"
        );
        assert_eq!(classes(&[]), "");
    }
}
