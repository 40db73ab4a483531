//! The rules an input's value must follow (`validation:` under an input), as AWF checks
//! them when a run starts: `pattern` (a regular expression, unanchored), `enum` (the
//! allowed values, exact), `min`/`max` (for `type: integer`), `file_exists` (a path from
//! the current directory) and `file_extension` (the allowed extensions, with their dot,
//! case-sensitive). `awf validate` checks the rules themselves; `awf run` checks the
//! values against them (`run::resolve_inputs`).

/// `validation:` of an input. An empty list (`enum`, `file_extension`) or an empty
/// `pattern` checks nothing, as in AWF.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InputValidation {
    /// A regular expression the value must match somewhere (unanchored: write `^…$` for
    /// the whole value). Checked on string inputs only.
    pub pattern: Option<String>,
    /// `enum:` the allowed values, compared exactly. Checked on string inputs only.
    pub enum_values: Vec<String>,
    /// Bounds of a `type: integer` input, both included.
    pub min: Option<i64>,
    pub max: Option<i64>,
    /// The value names a file or directory that exists (from the current directory).
    pub file_exists: bool,
    /// The value's extension (from its last `.` in its last path component, dot
    /// included) is one of these, compared case-sensitively.
    pub file_extension: Vec<String>,
}

impl InputValidation {
    /// The keys of `validation:`.
    pub const KEYS: &'static [&'static str] = &[
        "pattern",
        "enum",
        "min",
        "max",
        "file_exists",
        "file_extension",
    ];
}

/// A compiled `pattern`. AWF's regular expressions are Go's (RE2), which the `regex`
/// crate follows. Without the crate's Unicode case tables, a pattern it cannot compile
/// in Unicode mode (such as `(?i)…`) is compiled again without Unicode: `\d`, `\w`, `\s`
/// and case folding are then ASCII, as they are in Go except for case folding.
pub enum Pattern {
    Text(regex::Regex),
    Bytes(regex::bytes::Regex),
}

impl Pattern {
    /// The compiled pattern, or the compiler's reason for refusing it.
    pub fn compile(pattern: &str) -> Result<Pattern, String> {
        match regex::Regex::new(pattern) {
            Ok(r) => Ok(Pattern::Text(r)),
            Err(first) => regex::bytes::RegexBuilder::new(pattern)
                .unicode(false)
                .build()
                .map(Pattern::Bytes)
                .map_err(|_| first.to_string()),
        }
    }

    /// Whether the pattern matches somewhere in `value` (Go's `MatchString`).
    pub fn is_match(&self, value: &str) -> bool {
        match self {
            Pattern::Text(r) => r.is_match(value),
            Pattern::Bytes(r) => r.is_match(value.as_bytes()),
        }
    }
}

/// The extension of a path as Go's `filepath.Ext` gives it: from the last `.` of the
/// last path component, dot included; empty when that component has no dot.
pub fn file_extension(path: &str) -> &str {
    for (i, c) in path.char_indices().rev() {
        if c == '/' {
            break;
        }
        if c == '.' {
            return &path[i..];
        }
    }
    ""
}

/// A `boolean` input's value as AWF reads it: true/yes/1 or false/no/0, in any case.
pub fn parse_boolean(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// A list as Go's `%v` prints a `[]string`: `[a b c]`.
pub fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_are_taken_as_go_takes_them() {
        assert_eq!(file_extension("main.go"), ".go");
        assert_eq!(file_extension("a/b.tar.gz"), ".gz");
        assert_eq!(file_extension("dir.d/file"), "");
        assert_eq!(file_extension(".bashrc"), ".bashrc");
        assert_eq!(file_extension("x."), ".");
        assert_eq!(file_extension("README"), "");
    }

    #[test]
    fn patterns_are_unanchored_and_case_folding_compiles() {
        let p = Pattern::compile("[a-z]+").unwrap();
        assert!(p.is_match("ABC def"));
        assert!(!p.is_match("123"));
        let p = Pattern::compile("(?i)^(dev|prod)$").unwrap();
        assert!(p.is_match("PROD") && !p.is_match("staging"));
        assert!(Pattern::compile(r"^\d+$").unwrap().is_match("42"));
        assert!(Pattern::compile("(unclosed").is_err());
    }

    #[test]
    fn lists_print_as_go_prints_them() {
        assert_eq!(go_list(&["a".into(), "b".into()]), "[a b]");
        assert_eq!(go_list(&[]), "[]");
    }
}
