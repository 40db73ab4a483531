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

/// One shape: its kind, its pattern, which group is the secret (0: the whole match), and
/// whether the secret must also look random.
struct Shape {
    kind: &'static str,
    re: Regex,
    group: usize,
    random: bool,
}

fn shapes() -> &'static [Shape] {
    static SHAPES: OnceLock<Vec<Shape>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let shape = |kind, pattern: &str, group, random| Shape {
            kind,
            re: Regex::new(&format!("(?-u){pattern}")).expect("secret shapes compile"),
            group,
            random,
        };
        vec![
            shape(
                "private-key",
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*$)",
                0,
                false,
            ),
            shape(
                "aws-access-key-id",
                r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
                0,
                false,
            ),
            shape(
                "aws-secret-access-key",
                r#"(?i:aws_?secret_?access_?key|aws_?secret)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+]|$)"#,
                1,
                false,
            ),
            shape(
                "github-token",
                r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
                0,
                false,
            ),
            shape("gitlab-token", r"\bglpat-[A-Za-z0-9_-]{20,}", 0, false),
            shape("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0, false),
            shape(
                "slack-webhook",
                r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
                0,
                false,
            ),
            shape(
                "anthropic-key",
                r"\bsk-ant-(?:api|admin|oat)[0-9]{2}-[A-Za-z0-9_-]{20,}",
                0,
                false,
            ),
            shape(
                "openai-key",
                r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
                0,
                false,
            ),
            shape("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}(?:[^0-9A-Za-z_-]|$)", 0, false),
            shape("stripe-key", r"\b[rs]k_live_[0-9A-Za-z]{20,}\b", 0, false),
            shape("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b", 0, false),
            shape(
                "jwt",
                r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}",
                0,
                false,
            ),
            shape(
                "url-password",
                r"\b[a-z][a-z0-9+.-]*://[^/\s:@'`]+:([^/\s@'`<>{}$%]{8,})@[A-Za-z0-9]",
                1,
                true,
            ),
            shape(
                "bearer-token",
                r#"(?i:authorization)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?(?i:bearer|token)\s+([A-Za-z0-9._~+/=-]{16,})"#,
                1,
                true,
            ),
            // A name that says secret, assigned a quoted literal or (env style, upper
            // case) a bare one.
            shape(
                "secret-assignment",
                concat!(
                    r#"(?i:[A-Za-z0-9_.-]*(?:secret|token|passw(?:or)?d|api_?key|access_?key|private_?key|auth_?key|credentials?)[A-Za-z0-9_.-]*)"#,
                    r#"(?:\\?["'])?\s*(?::|=|:=)\s*(?:\\?["']([^"'\\\s]{12,})\\?["']|([^"'\\\s,;)\]}]{16,})(?:[\s,;)\]}]|$))"#,
                ),
                1,
                true,
            ),
        ]
    })
}

/// One secret found: its kind and where it is (bytes of the text).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: &'static str,
    pub range: Range<usize>,
}

/// Every secret in `text`, in order, none overlapping another.
pub fn find(text: &str) -> Vec<Found> {
    let bytes = text.as_bytes();
    let mut found: Vec<Found> = Vec::new();
    for shape in shapes() {
        for caps in shape.re.captures_iter(bytes) {
            let secret = if shape.kind == "secret-assignment" {
                caps.get(1).or_else(|| caps.get(2))
            } else {
                caps.get(shape.group)
            };
            let Some(m) = secret else { continue };
            let value = &text[m.range()];
            if shape.random && !looks_random(value) {
                continue;
            }
            if shape.kind == "private-key" && key_material(value) < MIN_KEY_MATERIAL {
                continue;
            }
            if shape.kind == "secret-assignment"
                && caps.get(2).is_some()
                && !bare_env_name(&bytes[caps.get(0).map_or(0, |c| c.start())..m.start()])
            {
                continue;
            }
            if found
                .iter()
                .any(|f| f.range.start < m.end() && m.start() < f.range.end)
            {
                continue;
            }
            found.push(Found {
                kind: shape.kind,
                range: m.range(),
            });
        }
    }
    found.sort_by_key(|f| f.range.start);
    found
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
