//! The parse context: [`Ctx`] gathers the diagnostics of one document and reads its nodes
//! (a map's fields with unknown and duplicate keys reported, text, booleans, durations), so
//! that every part of the parser words its problems the same way. Also the path helpers
//! (`join`, `name_of`) and the typo suggestion behind "did you mean".

use crate::error::codes;
use crate::workflow::Diagnostic;
use crate::workflow::yaml::{Kind, Node};
use std::time::Duration;

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[derive(Default)]
pub(super) struct Ctx {
    pub(super) diags: Vec<Diagnostic>,
    /// The workflow file being read (relative paths in it are from its directory).
    pub(super) file: std::path::PathBuf,
    /// States whose parse failed (see `Workflow::unparsed_states`).
    pub(super) unparsed_states: Vec<String>,
}

impl Ctx {
    pub(super) fn push(
        &mut self,
        code: &'static str,
        path: &str,
        line: usize,
        message: String,
        hint: impl Into<String>,
    ) {
        self.diags.push(Diagnostic::error(
            code,
            path.to_string(),
            line,
            message,
            hint.into(),
        ));
    }

    pub(super) fn warn(
        &mut self,
        code: &'static str,
        path: &str,
        line: usize,
        message: String,
        hint: impl Into<String>,
    ) {
        self.diags.push(Diagnostic::warning(
            code,
            path.to_string(),
            line,
            message,
            hint.into(),
        ));
    }

    /// The entries of a map node, with unknown and duplicate keys reported.
    pub(super) fn fields<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        allowed: &[&str],
        unknown_code: &'static str,
    ) -> Option<Vec<(&'a str, &'a Node)>> {
        let Kind::Map(entries) = &node.kind else {
            self.push(
                codes::WRONG_TYPE,
                path,
                node.line,
                format!("{} must be a map, found {}", name_of(path), node.describe()),
                format!("write {} as `key: value` lines", name_of(path)),
            );
            return None;
        };
        let mut out: Vec<(&str, &Node)> = Vec::new();
        for (k, v) in entries {
            let Some(key) = k.as_str() else {
                self.push(
                    codes::WRONG_TYPE,
                    path,
                    k.line,
                    format!("a key of {} is {}, not text", name_of(path), k.describe()),
                    "keys are plain names",
                );
                continue;
            };
            let kpath = join(path, key);
            if out.iter().any(|(seen, _)| *seen == key) {
                self.push(
                    codes::DUPLICATE_KEY,
                    &kpath,
                    k.line,
                    format!("{kpath} is given twice"),
                    "keep one of them",
                );
                continue;
            }
            if !allowed.is_empty() && !allowed.contains(&key) {
                let hint = match closest(key, allowed) {
                    Some(s) => format!("did you mean `{s}`? allowed here: {}", allowed.join(", ")),
                    None => format!("allowed here: {}", allowed.join(", ")),
                };
                self.push(
                    unknown_code,
                    &kpath,
                    k.line,
                    format!("unknown key `{key}` in {}", name_of(path)),
                    hint,
                );
                continue;
            }
            out.push((key, v));
        }
        Some(out)
    }

    pub(super) fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() => Some(s.clone()),
            _ => {
                self.push(
                    codes::WRONG_TYPE,
                    path,
                    node.line,
                    format!("{path} must be text, found {}", node.describe()),
                    "write a single value (quote it if it contains `: ` or starts with `{`)",
                );
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, node: &Node, path: &str, code: &'static str) -> Option<bool> {
        let b = node.as_bool();
        if b.is_none() {
            self.push(
                code,
                path,
                node.line,
                format!("{path} must be true or false, found {}", node.describe()),
                "write true or false, unquoted",
            );
        }
        b
    }

    pub(super) fn timeout(&mut self, node: &Node, path: &str) -> Option<Duration> {
        let d = node.as_str().and_then(parse_duration);
        if d.is_none() {
            self.push(
                codes::INVALID_VALUE,
                path,
                node.line,
                format!(
                    "{path} must be a positive duration, found {}",
                    node.describe()
                ),
                "write seconds (300) or a number with a unit: 500ms, 30s, 5m, 1h",
            );
        }
        d
    }
}

fn name_of(path: &str) -> String {
    if path.is_empty() {
        "the workflow".into()
    } else {
        path.to_string()
    }
}

/// `300`, `30s`, `5m`, `1h`, `500ms`; zero is refused (a step that may never run is a typo).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, "s"),
    };
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs > 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs))
}

/// The allowed key nearest to a typo, when it is near enough to be a typo.
pub fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(key, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min()
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A whole number of seconds from 1 to a day (`timeout_seconds` and the like).
pub(super) fn seconds(cx: &mut Ctx, node: &Node, path: &str, hint: &str) -> Option<u64> {
    match node.as_str().and_then(|s| s.parse::<u64>().ok()) {
        Some(n) if (1..=86_400).contains(&n) => Some(n),
        _ => {
            cx.push(
                codes::INVALID_VALUE,
                path,
                node.line,
                format!(
                    "{path} must be a whole number of seconds from 1 to 86400, found {}",
                    node.describe()
                ),
                hint,
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), None);
        assert_eq!(parse_duration("3 weeks"), None);
    }
}
