//! Errors and the text of an expression: positions, clipping, the `contains(a, b)` rewrite,
//! AWF's nil-safety filter on run-time errors, and regexes.
//!
//! # Text
//! Before parsing, AWF rewrites `contains(a, b)` into `a contains b` with the regular
//! expression `contains\(([^,]+),\s*([^)]+)\)`, blindly (inside string literals too, and
//! `contains(f(x), y)` is mangled); so does this module, and error positions refer to the
//! rewritten text (messages then show both). `contains` is an operator, never a function: a
//! `contains(` the rewrite misses is a syntax error, as in AWF, and so is `contains(a, b)` for
//! [`Expr::check_transition`] (AWF's load-time check does not rewrite).
//!
//! # Nil-safety (AWF's filter on expr's run-time errors, exactly)
//! A run-time error is turned into the result `false` when its text — expr's message plus
//! the source line where it happened, which for a one-line expression is the whole
//! expression — contains:
//! 1. `invalid operation: <nil>` **and** (`inputs.` or `env.`): a nil on the *left* of an
//!    operator (`inputs.nope > 5`, `inputs.nope + 1 > 2` are false; `5 < inputs.nope` stays an
//!    error, since the message is then `invalid operation: int < <nil>`);
//! 2. `cannot fetch` **and** `states.`: a member of nil, so `states.never_ran.ExitCode == 0`
//!    *and* `states.never_ran.ExitCode != 0` are both false; so is any other `cannot fetch` in
//!    an expression that mentions `states.` (`loop.Index` outside a loop next to a `states.`
//!    reference).
//!
//! Every other run-time error is an error: `loop.Index` outside a loop and `error.Message`
//! outside a `workflow_error` hook (`cannot fetch Index from <nil>`) when the text does not
//! mention `states.`. Compile-time type errors (above) and syntax errors are never filtered.
//! Where an error goes is the caller's business (AWF: transition → step error, `while` → loop
//! error, `break_when` → logged and ignored).

use super::*;

pub(super) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn describe(text: &str, source: &str) -> String {
    if text == source {
        format!("expression `{text}`")
    } else {
        format!("expression `{text}` (read as `{source}`)")
    }
}

/// `at column C`, or `at line L, column C` in a text of several lines (1-based, characters).
fn position(source: &str, offset: usize) -> String {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    if source.contains('\n') {
        format!("at line {line}, column {column}")
    } else {
        format!("at column {column}")
    }
}

pub(super) fn located(text: &str, source: &str, reason: &str, offset: usize) -> ExprError {
    ExprError {
        message: format!(
            "{}: {reason} {}",
            describe(text, source),
            position(source, offset)
        ),
        offset: Some(offset),
    }
}

pub(super) fn not_bool(text: &str, kind: &str) -> ExprError {
    ExprError {
        message: format!("expression `{text}` did not return a boolean, got {kind}"),
        offset: None,
    }
}

/// The line of `source` holding `offset`.
fn line_at(source: &str, offset: usize) -> &str {
    let offset = offset.min(source.len());
    let start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = source[offset..]
        .find('\n')
        .map_or(source.len(), |i| offset + i);
    &source[start..end]
}

/// AWF's filter (see the module's documentation): true when the error makes the result false.
pub(super) fn nil_safe(e: &RtErr, source: &str) -> bool {
    let text = format!("{}\n | {}", e.msg, line_at(source, e.pos));
    (text.contains("invalid operation: <nil>")
        && (text.contains("inputs.") || text.contains("env.")))
        || (text.contains("cannot fetch") && text.contains("states."))
}

/// AWF's `preprocessExpression` (Go's `\s` is `[\t\n\f\r ]`).
pub(super) fn rewrite_contains(text: &str) -> Cow<'_, str> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"contains\(([^,]+),[\t\n\x0C\r ]*([^)]+)\)").expect("a valid pattern")
    });
    re.replace_all(text, "${1} contains ${2}")
}

pub(super) fn compile_regex(pattern: &str) -> Result<Regex, String> {
    let build = |unicode: bool| {
        RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .unicode(unicode)
            .build()
    };
    // Without Unicode case tables, `(?i)` needs ASCII mode; a pattern that then matches
    // outside UTF-8 is refused again, and the first error is the one to show.
    build(true)
        .or_else(|first| build(false).map_err(|_| first))
        .map_err(|e| {
            let detail = e.to_string();
            let detail = detail
                .lines()
                .map(str::trim)
                .rfind(|l| !l.is_empty() && !l.starts_with('^') && !l.chars().all(|c| c == '~'))
                .unwrap_or("invalid pattern")
                .to_string();
            format!("error parsing regexp {}: {detail}", clip(pattern, 80))
        })
}
