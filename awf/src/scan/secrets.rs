//! Secrets in what a tool sends back: each found by its shape and named by its kind, so
//! that the text can go to the model with `[redacted: <kind>]` in its place.
//!
//! Precision comes first: a tool result is what the agent works on, and a false redaction
//! garbles code it must edit. So a kind is a shape that ordinary text does not take (a
//! provider's prefix and length, a PEM block, three base64url parts of which two open
//! with `eyJ`), and an assignment counts only when its name says secret, its value is a
//! literal (no call, no variable, no template) and looks random (letters and digits, and
//! at least [`MIN_ENTROPY`] bits a character). The kinds are [`KINDS`]; docs/scanning.md
//! has the corpora they are measured on.

use regex::bytes::Regex;
use std::ops::Range;
use std::sync::OnceLock;

/// The kinds found, in the order they are looked for (a longer, more specific shape
/// first: a private key's block before any token inside it). The planted corpus has one
/// of each; docs/scanning.md lists them.
#[allow(dead_code)] // read by the tests, which check the shapes against it
pub const KINDS: &[&str] = &[
    "private-key",
    "aws-access-key-id",
    "aws-secret-access-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "slack-webhook",
    "anthropic-key",
    "openai-key",
    "google-api-key",
    "stripe-key",
    "npm-token",
    "jwt",
    "url-password",
    "bearer-token",
    "secret-assignment",
];

/// Shannon entropy (bits a character) under which an assigned value or a bearer token is
/// taken for a word, a placeholder or an example rather than a secret.
pub const MIN_ENTROPY: f64 = 3.0;

/// One shape: its kind, its pattern (the secret, when not the whole match, in the group
/// `s`, or `t` for a second form), and whether the secret must also look random.
struct Shape {
    kind: &'static str,
    pattern: &'static str,
    random: bool,
}

/// Every shape in one pattern, each its own alternative (`k<i>`, its secret `s<i>` or
/// `t<i>`): one automaton and one search cache in a server, not one per shape (which cost
/// some 1.4 MiB resident and 2.5 ms to build).
struct Shapes {
    re: Regex,
    shapes: Vec<Shape>,
    /// Per shape, the index of its group `k<i>`, and of `s<i>` and `t<i>` when it has them.
    groups: Vec<(usize, Option<usize>, Option<usize>)>,
}

impl Shapes {
    /// Which shape a match is of, with its secret's group (`s`) and its bare form's (`t`).
    fn which<'h>(
        &self,
        caps: &regex::bytes::Captures<'h>,
    ) -> Option<(
        usize,
        Option<regex::bytes::Match<'h>>,
        Option<regex::bytes::Match<'h>>,
    )> {
        let (i, &(_, s, t)) = self
            .groups
            .iter()
            .enumerate()
            .find(|(_, (k, _, _))| caps.get(*k).is_some())?;
        Some((i, s.and_then(|g| caps.get(g)), t.and_then(|g| caps.get(g))))
    }
}

fn shapes() -> &'static Shapes {
    static SHAPES: OnceLock<Shapes> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let shapes = shape_list();
        let alternatives: Vec<String> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let p = s
                    .pattern
                    .replace("(?P<s>", &format!("(?P<s{i}>"))
                    .replace("(?P<t>", &format!("(?P<t{i}>"));
                format!("(?P<k{i}>{p})")
            })
            .collect();
        let re =
            Regex::new(&format!("(?-u){}", alternatives.join("|"))).expect("secret shapes compile");
        let index = |name: String| re.capture_names().position(|n| n == Some(name.as_str()));
        let groups = (0..shapes.len())
            .map(|i| {
                let k = index(format!("k{i}")).expect("every shape has its group");
                (k, index(format!("s{i}")), index(format!("t{i}")))
            })
            .collect();
        Shapes { re, shapes, groups }
    })
}

fn shape_list() -> Vec<Shape> {
    let shape = |kind, pattern, random| Shape {
        kind,
        pattern,
        random,
    };
    vec![
        shape(
            "private-key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*$)",
            false,
        ),
        shape(
            "aws-access-key-id",
            r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
            false,
        ),
        shape(
            "aws-secret-access-key",
            r#"(?i:aws_?secret_?access_?key|aws_?secret)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?(?P<s>[A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#,
            false,
        ),
        shape(
            "github-token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
            false,
        ),
        shape("gitlab-token", r"\bglpat-[A-Za-z0-9_-]{20,}", false),
        shape("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", false),
        shape(
            "slack-webhook",
            r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
            false,
        ),
        shape(
            "anthropic-key",
            r"\bsk-ant-(?:api|admin|oat)[0-9]{2}-[A-Za-z0-9_-]{20,}",
            false,
        ),
        shape(
            "openai-key",
            r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
            false,
        ),
        shape(
            "google-api-key",
            r"\bAIza[0-9A-Za-z_-]{35}(?:[^0-9A-Za-z_-]|$)",
            false,
        ),
        shape("stripe-key", r"\b[rs]k_live_[0-9A-Za-z]{20,}\b", false),
        shape("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b", false),
        shape(
            "jwt",
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}",
            false,
        ),
        shape(
            "url-password",
            r"\b[a-z][a-z0-9+.-]*://[^/\s:@'`]+:(?P<s>[^/\s@'`<>{}$%]{8,})@[A-Za-z0-9]",
            true,
        ),
        shape(
            "bearer-token",
            r#"(?i:authorization)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?(?i:bearer|token)\s+(?P<s>[A-Za-z0-9._~+/=-]{16,})"#,
            true,
        ),
        // A name that says secret, assigned a quoted literal or (env style, upper
        // case) a bare one.
        shape(
            "secret-assignment",
            concat!(
                r#"(?i:[A-Za-z0-9_.-]*(?:secret|token|passw(?:or)?d|api_?key|access_?key|private_?key|auth_?key|credentials?)[A-Za-z0-9_.-]*)"#,
                r#"(?:\\?["'])?\s*(?::|=|:=)\s*(?:\\?["'](?P<s>[^"'\\\s]{12,})\\?["']|(?P<t>[^"'\\\s,;)\]}]{16,})(?:[\s,;)\]}]|$))"#,
            ),
            true,
        ),
    ]
}

/// One secret found: its kind and where it is (bytes of the text).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: &'static str,
    pub range: Range<usize>,
}

/// Every secret in `text`, in order, none overlapping another.
pub fn find(text: &str) -> Vec<Found> {
    let all = shapes();
    let (re, shapes) = (&all.re, &all.shapes);
    let bytes = text.as_bytes();
    let mut found: Vec<Found> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(caps) = re.captures_at(bytes, at) else {
            break;
        };
        let whole = caps.get(0).expect("a match");
        let Some((i, quoted, bare)) = all.which(&caps) else {
            break;
        };
        let shape = &shapes[i];
        let secret = quoted.or(bare).unwrap_or(whole);
        // Past this match when it is taken; else one byte on, for another shape there.
        at = whole.start() + 1;
        let Some(value) = text.get(secret.range()) else {
            continue;
        };
        if shape.random && !looks_random(value) {
            continue;
        }
        if shape.kind == "private-key" && key_material(value) < MIN_KEY_MATERIAL {
            continue;
        }
        if bare.is_some() && !bare_env_name(&bytes[whole.start()..secret.start()]) {
            continue;
        }
        at = whole.end().max(at);
        found.push(specific(text, shape.kind, secret.range()));
    }
    found
}

/// A secret an assignment, a URL or a header holds, named by its own shape when it has
/// one (`"CLAUDE_KEY": "sk-ant-…"` is an `anthropic-key`).
fn specific(text: &str, kind: &'static str, range: Range<usize>) -> Found {
    if matches!(kind, "secret-assignment" | "bearer-token" | "url-password") {
        let all = shapes();
        let inner = &text.as_bytes()[range.clone()];
        if let Some(caps) = all.re.captures(inner)
            && caps.get(0).is_some_and(|m| m.range() == (0..inner.len()))
            && let Some((i, _, _)) = all.which(&caps)
            && !all.shapes[i].random
        {
            return Found {
                kind: all.shapes[i].kind,
                range,
            };
        }
    }
    Found { kind, range }
}

/// Base64 characters a private key's block holds at the least: an example's (`QQ==`) has
/// next to none, the smallest real key (Ed25519, PEM) some 120.
const MIN_KEY_MATERIAL: usize = 64;

/// The base64 characters of a PEM block's body: between its header and its end line,
/// header fields (`Proc-Type: …`) and JSON's `\n` escapes left out.
fn key_material(block: &str) -> usize {
    let body = block
        .split_once("KEY-----")
        .or_else(|| block.split_once("BLOCK-----"))
        .map_or("", |(_, rest)| rest);
    let body = body.split("-----END").next().unwrap_or("");
    body.replace("\\n", "\n")
        .lines()
        .filter(|l| !l.contains(':'))
        .map(|l| {
            l.bytes()
                .filter(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
                .count()
        })
        .sum()
}

/// `text` with each secret replaced by `[redacted: <kind>]`, and what was replaced.
pub fn redact(text: &str) -> (String, Vec<Found>) {
    let found = find(text);
    if found.is_empty() {
        return (text.to_string(), found);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in &found {
        out.push_str(&text[at..f.range.start]);
        out.push_str(&format!("[redacted: {}]", f.kind));
        at = f.range.end;
    }
    out.push_str(&text[at..]);
    (out, found)
}

/// A bare (unquoted) assignment counts only in the environment's style: an upper-case
/// name (`API_TOKEN=…`), so that code (`token = next_token_for(user)`) does not.
fn bare_env_name(name_and_sep: &[u8]) -> bool {
    let name: Vec<u8> = name_and_sep
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .collect();
    !name.is_empty()
        && name
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

/// Letters and digits, no placeholder or template, and at least [`MIN_ENTROPY`] bits a
/// character: a generated value, not a word, a path or an example.
fn looks_random(value: &str) -> bool {
    let has_letter = value.bytes().any(|b| b.is_ascii_alphabetic());
    let has_digit = value.bytes().any(|b| b.is_ascii_digit());
    if !(has_letter && has_digit) {
        return false;
    }
    let lower = value.to_ascii_lowercase();
    const PLACEHOLDERS: &[&str] = &[
        "example",
        "changeme",
        "password",
        "xxxx",
        "your",
        "dummy",
        "placeholder",
        "redacted",
        "masked",
        "secret",
        "token",
        "sample",
        "test",
        "fake",
        "1234",
    ];
    if PLACEHOLDERS.iter().any(|p| lower.contains(p)) {
        return false;
    }
    if value.contains("..") || value.starts_with('/') || value.contains("://") {
        return false;
    }
    entropy(value) >= MIN_ENTROPY
}

/// Shannon entropy of `s`, in bits a character.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
pub(crate) mod corpus;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_found_in_its_context_and_redacted_whole() {
        let planted = corpus::planted();
        let kinds: std::collections::BTreeSet<&str> = planted.iter().map(|p| p.kind).collect();
        assert_eq!(kinds.len(), KINDS.len(), "a kind without a planted sample");
        for p in &planted {
            let (out, found) = redact(&p.text);
            assert!(
                found.iter().any(|f| f.kind == p.kind),
                "{}: not found in {:?} (found {found:?})",
                p.kind,
                p.text
            );
            assert!(
                !out.contains(&p.secret),
                "{}: the secret is still in {out:?}",
                p.kind
            );
            assert!(out.contains(&format!("[redacted: {}]", p.kind)), "{out}");
        }
    }

    #[test]
    fn code_placeholders_and_words_are_left_alone() {
        for text in [
            "let token = self.next_token()?;",
            "password: String,",
            "api_key = os.environ[\"OPENAI_API_KEY\"]",
            "TOKEN=${GITHUB_TOKEN}",
            "export API_TOKEN=changeme-please-1234",
            "postgres://user:password@localhost:5432/db",
            "https://user:${PASS}@example.com",
            "Authorization: Bearer <token>",
            "secret_key: \"your-secret-key-here\"",
            "sk-learn is a library; ghp_ is a prefix",
            "the AKIA prefix marks an access key id",
            "access_key = \"some/relative/path/to/file\"",
            "auth_token_ttl = 3600",
        ] {
            assert_eq!(find(text), [], "{text}");
        }
    }

    #[test]
    fn the_ordinary_corpus_has_no_false_redaction() {
        let (files, bytes, false_found) = corpus::scan_ordinary(find);
        eprintln!("ordinary corpus: {files} files, {bytes} bytes");
        assert!(
            files > 500 && bytes > 10 << 20,
            "{files} files, {bytes} bytes"
        );
        assert!(
            false_found.is_empty(),
            "false redactions in the ordinary corpus:\n{}",
            false_found.join("\n")
        );
    }
}
