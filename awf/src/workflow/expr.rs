//! The expression language of `when` (transitions), `while` and `break_when`: AWF evaluates
//! them with expr-lang/expr v1.17 (`pkg/expression/evaluator.go`), and this module follows
//! that evaluator, quirks included, for the part of expr's language workflows use. It is pure:
//! no I/O, no clock, no new dependency.
//!
//! [`Expr::parse`] reads an expression once; [`Expr::eval_bool`] evaluates it against an
//! environment the caller builds as a JSON object: `inputs` (string inputs coerced with
//! [`coerce_input`]), `states.S.{Output, Stderr, ExitCode, Status, Response, TokensUsed}`,
//! `env`, `workflow`, `context`, and `loop` / `error` only where they exist (absent keys are
//! nil, as expr's `AllowUndefinedVariables` makes them). [`Expr::references`] lists the
//! member paths an expression reads, for validation; [`Expr::check_transition`] is AWF's
//! load-time check of a transition's `when`.
//!
//! # Text
//! Before parsing, AWF rewrites `contains(a, b)` into `a contains b` with the regular
//! expression `contains\(([^,]+),\s*([^)]+)\)`, blindly (inside string literals too, and
//! `contains(f(x), y)` is mangled); so does this module, and error positions refer to the
//! rewritten text (messages then show both). `contains` is an operator, never a function: a
//! `contains(` the rewrite misses is a syntax error, as in AWF, and so is `contains(a, b)` for
//! [`Expr::check_transition`] (AWF's load-time check does not rewrite).
//!
//! # Grammar (expr-lang's, precedence lowest first)
//! `c ? a : b` and `c ?: b` · `or ||` · `and &&` · `== != < > <= >= in matches contains
//! startsWith endsWith` (each negatable by a leading `not`: `not in`, `not contains`, ...;
//! `a < b < c` means `a < b && b < c`) · `+ -` · `* / %` · unary `not !` (binding tighter than
//! comparisons: `not a == b` is `(not a) == b`) · unary `- +` · `** ^` (right-associative) ·
//! `??` (which may not be mixed with another operator without parentheses). Operands: integers
//! (`1_000`, `0x1f`, `0o17`, `0b101`), floats (`1.5`, `.5`, `1e3`), strings in `"…"` and `'…'`
//! (escapes `\n \t \r \a \b \f \v \\`, the quote itself, `\x41`, `\101`, `\u00e9`, `\u{1F600}`,
//! `\U0001F600`) and in `` `…` `` (raw; ``` `` ``` is a backquote), `true false nil`, arrays
//! `[a, b]`, maps `{k: v}`, member access `a.b`, `a["k"]`, `a[0]` (negative counts from the
//! end), slices `a[1:3]`, nil-safe `a?.b` and `a?.["k"]`, calls, parentheses, comments `//`
//! and `/* */`. Not supported (refused by [`Expr::parse`]): closures and the predicate
//! functions (`all`, `filter`, `#`...), the pipe `|`, ranges `..`, `let`, `if {} else {}`,
//! `;` sequences, method calls.
//!
//! Functions: `len` (characters of a string, elements, keys), `upper`, `lower`, `trim(s[,
//! cutset])`, `trimPrefix(s[, p])`, `trimSuffix(s[, p])` (default ` `), `split(s, sep[, n])`,
//! `int`, `float`, `string` (Go's `%v`), `abs`, `type`, `ceil`, `floor`, `round`,
//! `hasPrefix`, `hasSuffix`, `indexOf`, `lastIndexOf` (byte offsets), `replace(s, old, new[,
//! n])`, `join(list[, glue])`, and AWF's `has_prefix(s, p)` and `has_suffix(s, p)`. Any other
//! expr built-in is an error when called ("not supported"), as is an unknown function.
//!
//! # Semantics (expr's run time)
//! - `==`/`!=`: numbers compare across int and float; values of different kinds are unequal
//!   (`inputs.n == "5"` is false when `n` was coerced to 5); arrays and maps compare deeply,
//!   strictly by kind inside them (`[1] != [1.0]`); `nil == nil`.
//! - `< > <= >=`: numbers, or two strings (bytewise); anything else is an error
//!   (`invalid operation: string < int`).
//! - `+`: numbers, or two strings (concatenation); `-` `*` numbers; `/` and `**` always give a
//!   float (`7 / 2 == 3.5`, `1 / 0` is +Inf, `2 ** 4096` is +Inf); `%` integers only (by zero:
//!   error); integer overflow wraps as in Go.
//! - `and`/`or` short-circuit; the left operand must be a bool, the right one is returned as
//!   it is. `not`, `!` and a ternary's condition must be bools.
//! - `contains`, `startsWith`, `endsWith`, `matches` are false when either side is nil, an
//!   error when a side is not a string. A literal `matches` pattern is compiled by
//!   [`Expr::parse`] (a bad one is a syntax error there), a computed one at each evaluation;
//!   both with a 1 MiB size limit, in Rust's `regex` syntax (close to Go's RE2; `\d \w \s \b`
//!   are Unicode-aware here, ASCII in Go).
//! - `x in list` compares with `==`; `k in map` tests a key; `x in nil` is false; anything
//!   else is an error. Quirk of expr's optimizer, kept: when the list is a literal of strings
//!   only (`x in ["a", "b"]`), a needle that is neither a string nor nil is an error
//!   (`reflect.Value.MapIndex: value of type bool is not assignable to type string`), and nil
//!   is found when `""` is in the list.
//! - Member access: a missing map key is nil; a member of nil, a number or a bool is an error
//!   (`cannot fetch X from <nil>`), so are a name on a string or a list (`invalid operation:
//!   int(string)`) and an index out of range; `a?.b` is nil when `a` is nil (and then so is
//!   the rest of the chain, `a?.b.c`); `??` gives its right side when the left is nil (it
//!   does not make `a.b` nil-safe). `$env` is the whole environment.
//! - A string index gives the byte's value (Go's `reflect` behaviour); a string slice cuts
//!   bytes.
//! - Result: expr compiles with `AsBool()`, which turns a nil result into `false`; a result of
//!   another kind is an error ("did not return a boolean, got string").
//! - Type errors expr's checker finds before running (between literals and known function
//!   results: `1 + "a"`, `"a" < 1`, `not 1`, `upper(1)`, `len(1, 2)`, `1 == "1"`) are errors at
//!   every evaluation, whatever would short-circuit.
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
//!
//! # Bounds
//! An expression is at most [`MAX_EXPR_BYTES`] bytes, nests at most [`MAX_DEPTH`] levels
//! (parentheses, operands of operators — a chain of 65 `or`s too —, calls, brackets) and has
//! at most 10 000 nodes (`a ?: b` and `a < b < c` copy `a` and `b`); all checked by
//! [`Expr::parse`], so evaluation recursion is bounded and there are no loops: evaluation is
//! linear in the expression's size (and the data it reads). An operation that builds a
//! string (`+`, `upper`, `lower`, `replace`, `join`, `string`) may build at most
//! [`MAX_STRING_BYTES`], and one evaluation may build at most [`MAX_EVAL_BYTES`] (strings,
//! and 32 bytes for each element of a built array); `**` is a float power and never loops;
//! values are read from the environment without copying.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::OnceLock;

/// The longest expression [`Expr::parse`] reads, in bytes.
pub const MAX_EXPR_BYTES: usize = 4096;
/// The deepest nesting [`Expr::parse`] accepts.
pub const MAX_DEPTH: usize = 64;
/// The longest string one operation may build, in bytes.
pub const MAX_STRING_BYTES: usize = 1 << 20;
/// The most one evaluation may build in all, in bytes.
pub const MAX_EVAL_BYTES: usize = 16 << 20;
/// The most nodes a parsed expression may have (expr's default `MaxNodes`); copies made by
/// `a ?: b` and `a < b < c` count, so nesting them cannot blow the tree up.
const MAX_NODES: usize = 10_000;
/// Size limit of a compiled `matches` pattern.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// How deep values from the environment may nest for `==`, `in` and `string()`.
const MAX_VALUE_DEPTH: usize = 128;
/// What building one element of an array costs against [`MAX_EVAL_BYTES`].
const ELEMENT_COST: usize = 32;

/// Why an expression could not be read or evaluated. `message` names the expression and,
/// when known, where in it (`expression `states.x ==`: expected a value after `==` at
/// column 10`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    pub message: String,
    /// Byte offset in the expression as read (after the `contains(a, b)` rewrite).
    pub offset: Option<usize>,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExprError {}

/// A parsed expression.
#[derive(Debug, Clone)]
pub struct Expr {
    /// As written.
    text: String,
    /// After the `contains(a, b)` rewrite.
    source: String,
    root: Node,
    /// What expr's compiler (checker with the built-ins, `AsBool`) says at each evaluation.
    compile_error: Option<ExprError>,
    /// What AWF's load-time check of a transition says.
    load_error: Option<ExprError>,
}

impl Expr {
    /// Reads `text`: its syntax, the limits, and literal `matches` patterns. An empty (or
    /// blank) expression is an error. Type errors that expr's compiler would find are kept
    /// for [`Expr::eval_bool`] (AWF reports them at evaluation) and
    /// [`Expr::check_transition`].
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        if text.trim().is_empty() {
            return Err(ExprError {
                message: "empty expression".into(),
                offset: None,
            });
        }
        if text.len() > MAX_EXPR_BYTES {
            return Err(ExprError {
                message: format!(
                    "expression `{}`: {} bytes long, over the limit of {MAX_EXPR_BYTES} bytes",
                    clip(text, 60),
                    text.len()
                ),
                offset: None,
            });
        }
        let source = rewrite_contains(text).into_owned();
        let root = parse_tree(&source, false).map_err(|(m, p)| located(text, &source, &m, p))?;
        let compile_error = match check(&root, true) {
            Err((m, p)) => Some(located(text, &source, &m, p)),
            Ok(nat) if nat != Nat::Unknown && nat != Nat::Bool => Some(not_bool(text, nat.kind())),
            Ok(_) => None,
        };
        // AWF's validator compiles the text as written, without expr's built-ins.
        let load_error = match parse_tree(text, true).and_then(|n| check(&n, false)) {
            Err((m, p)) => Some(located(text, text, &m, p)),
            Ok(_) => None,
        };
        Ok(Expr {
            text: text.to_string(),
            source,
            root,
            compile_error,
            load_error,
        })
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// AWF's load-time check of a transition's `when` (`ExprValidator.Compile`: expr without
    /// its built-ins, so `len(x)`, `trim(x)`, `upper(x)`... are refused as `unknown name`, and
    /// type errors between literals). AWF checks nothing else at load: `while` and
    /// `break_when` are only compiled when evaluated.
    pub fn check_transition(&self) -> Result<(), ExprError> {
        match &self.load_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Evaluates against `env` (a JSON object, see the module's documentation), with AWF's
    /// nil-safety rules.
    pub fn eval_bool(&self, env: &Value) -> Result<bool, ExprError> {
        if let Some(e) = &self.compile_error {
            return Err(e.clone());
        }
        let mut ev = Eval { env, built: 0 };
        match ev.eval(&self.root) {
            Ok(V::Bool(b)) => Ok(b),
            Ok(V::Nil) => Ok(false),
            Ok(other) => Err(not_bool(&self.text, other.kind())),
            Err(e) if nil_safe(&e, &self.source) => Ok(false),
            Err(e) => Err(located(&self.text, &self.source, &e.msg, e.pos)),
        }
    }

    /// The member paths the expression reads, in order, each once: `states.build.ExitCode`
    /// gives `["states", "build", "ExitCode"]`, `inputs["x"]` gives `["inputs", "x"]`; a path
    /// stops before a computed index (`a[i].b` gives `["a"]` and `["i"]`).
    pub fn references(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        collect_refs(&self.root, &mut out);
        out
    }
}

/// AWF's coercion of a string input for expressions (`coerceValue`): `true`, `True`, `TRUE`
/// and the same of `false` become bools; a base-10 integer (optional sign) an integer; what Go's
/// `ParseFloat` takes (`1.5`, `1e3`, `.5`) a float; anything else stays a string. Infinities
/// and NaN (Go floats for `inf`, `nan`) and hexadecimal floats stay strings: JSON has no such
/// numbers.
pub fn coerce_input(s: &str) -> Value {
    match s {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Value::from(i);
    }
    match go_parse_float(s).and_then(serde_json::Number::from_f64) {
        Some(n) => Value::Number(n),
        None => Value::String(s.to_string()),
    }
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal text: None when Go refuses it (underscores
/// without a base prefix, out of range). Hexadecimal floats are not read.
fn go_parse_float(s: &str) -> Option<f64> {
    if s.contains('_') || s.is_empty() {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    if f.is_infinite() {
        let t = s.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if t != "inf" && t != "infinity" {
            return None;
        }
    }
    Some(f)
}

// ------------------------------------------------------------------------------------------
// Errors and text

fn clip(s: &str, max: usize) -> String {
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

fn located(text: &str, source: &str, reason: &str, offset: usize) -> ExprError {
    ExprError {
        message: format!(
            "{}: {reason} {}",
            describe(text, source),
            position(source, offset)
        ),
        offset: Some(offset),
    }
}

fn not_bool(text: &str, kind: &str) -> ExprError {
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
fn nil_safe(e: &RtErr, source: &str) -> bool {
    let text = format!("{}\n | {}", e.msg, line_at(source, e.pos));
    (text.contains("invalid operation: <nil>")
        && (text.contains("inputs.") || text.contains("env.")))
        || (text.contains("cannot fetch") && text.contains("states."))
}

/// AWF's `preprocessExpression` (Go's `\s` is `[\t\n\f\r ]`).
fn rewrite_contains(text: &str) -> Cow<'_, str> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"contains\(([^,]+),[\t\n\x0C\r ]*([^)]+)\)").expect("a valid pattern")
    });
    re.replace_all(text, "${1} contains ${2}")
}

fn compile_regex(pattern: &str) -> Result<Regex, String> {
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

// ------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Op(String),
    Open(char),
    Close(char),
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    pos: usize,
}

/// A message and a byte offset.
type PErr = (String, usize);

fn is_alpha(c: char) -> bool {
    c == '_' || c == '$' || c.is_alphabetic()
}

fn is_alnum(c: char) -> bool {
    is_alpha(c) || c.is_numeric()
}

fn is_identifier(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(is_alpha) && cs.all(is_alnum)
}

fn lex(src: &str) -> Result<Vec<Token>, PErr> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = src[i..].chars().next() {
        let start = i;
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        let op = |s: &str| Tok::Op(s.to_string());
        let tok = match c {
            '\'' | '"' => {
                let (s, end) = lex_quoted(src, i, c)?;
                i = end;
                Tok::Str(s)
            }
            '`' => {
                let (s, end) = lex_raw(src, i)?;
                i = end;
                Tok::Str(s)
            }
            '0'..='9' => {
                i = lex_number(src, i, i)?;
                Tok::Num(src[start..i].to_string())
            }
            '.' if matches!(b.get(i + 1), Some(b'0'..=b'9')) => {
                i = lex_number(src, i, i + 1)?;
                Tok::Num(src[start..i].to_string())
            }
            '.' if b.get(i + 1) == Some(&b'.') => {
                i += 2;
                op("..")
            }
            '?' => {
                let s = match b.get(i + 1) {
                    Some(b'.') => "?.",
                    Some(b'?') => "??",
                    _ => "?",
                };
                i += s.len();
                op(s)
            }
            '/' if b.get(i + 1) == Some(&b'/') => {
                i = src[i..].find('\n').map_or(src.len(), |k| i + k + 1);
                continue;
            }
            '/' if b.get(i + 1) == Some(&b'*') => {
                match src[i + 2..].find("*/") {
                    Some(k) => i = i + 2 + k + 2,
                    None => return Err(("unclosed comment".into(), start)),
                }
                continue;
            }
            '|' | ':' => {
                let double = b.get(i + 1) == Some(&(c as u8));
                i += if double { 2 } else { 1 };
                op(&src[start..i])
            }
            '(' | '[' | '{' => {
                i += 1;
                Tok::Open(c)
            }
            ')' | ']' | '}' => {
                i += 1;
                Tok::Close(c)
            }
            '.' | ',' | ';' | '%' | '+' | '-' | '^' | '#' | '/' => {
                i += 1;
                op(&src[start..i])
            }
            '&' | '!' | '=' | '*' | '<' | '>' => {
                i += 1;
                if matches!(b.get(i), Some(b'&' | b'=' | b'*')) {
                    i += 1;
                }
                op(&src[start..i])
            }
            c if is_alpha(c) => {
                i += src[i..]
                    .find(|c: char| !is_alnum(c))
                    .unwrap_or(src.len() - i);
                let word = &src[start..i];
                match word {
                    "not" | "in" | "or" | "and" | "matches" | "contains" | "startsWith"
                    | "endsWith" | "let" | "if" | "else" => op(word),
                    _ => Tok::Ident(word.to_string()),
                }
            }
            c => {
                return Err((
                    format!("unrecognized character: U+{:04X} {c:?}", c as u32),
                    start,
                ));
            }
        };
        out.push(Token { tok, pos: start });
    }
    out.push(Token {
        tok: Tok::Eof,
        pos: src.len(),
    });
    Ok(out)
}

/// expr's `scanNumber` from `j` (a number starting at `start`): the end of the number.
fn lex_number(src: &str, start: usize, mut j: usize) -> Result<usize, PErr> {
    let b = src.as_bytes();
    let mut digits: &[u8] = b"0123456789_";
    if b.get(j) == Some(&b'0') {
        j += 1;
        match b.get(j) {
            Some(b'x' | b'X') => digits = b"0123456789abcdefABCDEF_",
            Some(b'o' | b'O') => digits = b"01234567_",
            Some(b'b' | b'B') => digits = b"01_",
            _ => j -= 1,
        }
        j += 1;
    }
    let run = |j: &mut usize, digits: &[u8]| {
        while b.get(*j).is_some_and(|c| digits.contains(c)) {
            *j += 1;
        }
    };
    run(&mut j, digits);
    if b.get(j) == Some(&b'.') {
        if b.get(j + 1) == Some(&b'.') {
            return Ok(j);
        }
        j += 1;
        run(&mut j, digits);
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        run(&mut j, digits);
    }
    if let Some(c) = src[j..].chars().next()
        && is_alnum(c)
    {
        return Err((
            format!("bad number syntax: {:?}", &src[start..j + c.len_utf8()]),
            start,
        ));
    }
    Ok(j)
}

/// A string in `quote`s from `start`: its value and the offset after it.
fn lex_quoted(src: &str, start: usize, quote: char) -> Result<(String, usize), PErr> {
    let not_terminated = || ("literal not terminated".to_string(), start);
    let mut out = String::new();
    let mut it = src[start + 1..]
        .char_indices()
        .map(|(k, c)| (start + 1 + k, c));
    loop {
        let (k, c) = it.next().ok_or_else(not_terminated)?;
        match c {
            c if c == quote => return Ok((out, k + 1)),
            '\n' => return Err(not_terminated()),
            '\r' => out.push('\n'),
            '\\' => {
                let (_, e) = it.next().ok_or_else(not_terminated)?;
                let bad = || ("invalid char escape".to_string(), k);
                let mut hex = |n: usize| -> Result<u32, PErr> {
                    let mut v = 0u32;
                    for _ in 0..n {
                        let d = it
                            .next()
                            .and_then(|(_, c)| c.to_digit(16))
                            .ok_or_else(bad)?;
                        v = v * 16 + d;
                    }
                    Ok(v)
                };
                let code = match e {
                    'a' => 7,
                    'b' => 8,
                    'f' => 12,
                    'n' => 10,
                    'r' => 13,
                    't' => 9,
                    'v' => 11,
                    '\\' => 92,
                    e if e == quote => e as u32,
                    '0'..='7' => {
                        let mut v = e as u32 - '0' as u32;
                        for _ in 0..2 {
                            let d = it.next().and_then(|(_, c)| c.to_digit(8)).ok_or_else(bad)?;
                            v = v * 8 + d;
                        }
                        if v > 0o377 {
                            return Err(("unable to unescape string".into(), k));
                        }
                        v
                    }
                    'x' => hex(2)?,
                    'U' => hex(8)?,
                    'u' if src[k + 2..].starts_with('{') => {
                        it.next();
                        let mut v = 0u32;
                        let mut n = 0;
                        loop {
                            let (_, c) = it.next().ok_or_else(bad)?;
                            if c == '}' && n > 0 {
                                break;
                            }
                            let d = c.to_digit(16).ok_or_else(bad)?;
                            n += 1;
                            if n > 6 {
                                return Err(bad());
                            }
                            v = v * 16 + d;
                        }
                        v
                    }
                    'u' => hex(4)?,
                    _ => return Err(bad()),
                };
                if code > 0x10FFFF {
                    return Err(("unable to unescape string".into(), k));
                }
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            c => out.push(c),
        }
    }
}

/// A raw string from `start` (a backquote): its value and the offset after it.
fn lex_raw(src: &str, start: usize) -> Result<(String, usize), PErr> {
    let mut out = String::new();
    let mut j = start + 1;
    loop {
        let k = j + src[j..]
            .find('`')
            .ok_or_else(|| ("literal not terminated".to_string(), start))?;
        out.push_str(&src[j..k]);
        if src[k + 1..].starts_with('`') {
            out.push('`');
            j = k + 2;
        } else {
            return Ok((out, k + 1));
        }
    }
}

// ------------------------------------------------------------------------------------------
// Syntax tree and parser (expr's `parser.go`, same precedence climbing)

#[derive(Debug, Clone)]
struct Node {
    kind: Kind,
    /// Byte offset of the token that made the node (an operator, a property name, ...).
    pos: usize,
    /// 0 for a leaf.
    depth: usize,
    /// Nodes in the tree, this one included (copies counted: `a ?: b` holds `a` twice).
    size: usize,
}

#[derive(Debug, Clone)]
enum Kind {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Ident(String),
    Member {
        obj: Box<Node>,
        prop: Box<Node>,
        optional: bool,
    },
    /// Where a nil-safe chain ends: a `?.` inside makes the whole chain nil.
    Chain(Box<Node>),
    Slice {
        obj: Box<Node>,
        from: Option<Box<Node>>,
        to: Option<Box<Node>>,
    },
    Unary(UnOp, Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    /// `x matches "literal"`, the pattern compiled once.
    Matches(Box<Node>, Box<Regex>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Call(String, Vec<Node>),
}

impl Kind {
    fn children(&self) -> Vec<&Node> {
        match self {
            Kind::Array(v) | Kind::Call(_, v) => v.iter().collect(),
            Kind::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
            Kind::Member { obj, prop, .. } | Kind::Binary(_, obj, prop) => vec![&**obj, &**prop],
            Kind::Chain(n) | Kind::Unary(_, n) | Kind::Matches(n, _) => vec![&**n],
            Kind::Slice { obj, from, to } => {
                let mut v = vec![&**obj];
                v.extend(from.as_deref());
                v.extend(to.as_deref());
                v
            }
            Kind::Cond(c, a, b) => vec![&**c, &**a, &**b],
            _ => Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnOp {
    Not,
    Neg,
    Plus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    In,
    Matches,
    Contains,
    StartsWith,
    EndsWith,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Coalesce,
}

impl BinOp {
    fn from_str(op: &str) -> Option<BinOp> {
        Some(match op {
            "or" | "||" => BinOp::Or,
            "and" | "&&" => BinOp::And,
            "==" => BinOp::Eq,
            "!=" => BinOp::Ne,
            "<" => BinOp::Lt,
            ">" => BinOp::Gt,
            "<=" => BinOp::Le,
            ">=" => BinOp::Ge,
            "in" => BinOp::In,
            "matches" => BinOp::Matches,
            "contains" => BinOp::Contains,
            "startsWith" => BinOp::StartsWith,
            "endsWith" => BinOp::EndsWith,
            "+" => BinOp::Add,
            "-" => BinOp::Sub,
            "*" => BinOp::Mul,
            "/" => BinOp::Div,
            "%" => BinOp::Mod,
            "**" | "^" => BinOp::Pow,
            "??" => BinOp::Coalesce,
            _ => return None,
        })
    }

    fn sym(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Gt => ">",
            BinOp::Le => "<=",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::Matches => "matches",
            BinOp::Contains => "contains",
            BinOp::StartsWith => "startsWith",
            BinOp::EndsWith => "endsWith",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
            BinOp::Coalesce => "??",
        }
    }
}

/// Precedence and right-associativity of a binary operator (expr's `operator.Binary`).
fn binary_info(op: &str) -> Option<(u16, bool)> {
    Some(match op {
        "|" => (0, false),
        "or" | "||" => (10, false),
        "and" | "&&" => (15, false),
        "==" | "!=" | "<" | ">" | ">=" | "<=" | "in" | "matches" | "contains" | "startsWith"
        | "endsWith" => (20, false),
        ".." => (25, false),
        "+" | "-" => (30, false),
        "*" | "/" | "%" => (60, false),
        "**" | "^" => (100, true),
        "??" => (500, false),
        _ => return None,
    })
}

fn unary_info(op: &str) -> Option<(u16, UnOp)> {
    match op {
        "not" | "!" => Some((50, UnOp::Not)),
        "-" => Some((90, UnOp::Neg)),
        "+" => Some((90, UnOp::Plus)),
        _ => None,
    }
}

/// Operators a `not` may precede (`not in`, ...).
const NEGATABLE: &[&str] = &["contains", "matches", "startsWith", "endsWith", "in"];

/// expr's predicate functions (closures): not supported.
#[rustfmt::skip]
const PREDICATES: &[&str] = &[
    "all", "none", "any", "one", "filter", "map", "count", "sum", "find", "findIndex",
    "findLast", "findLastIndex", "groupBy", "sortBy", "reduce",
];

/// expr v1.17's other built-in functions (AWF's load-time check knows none of them).
#[rustfmt::skip]
const EXPR_BUILTINS: &[&str] = &[
    "len", "type", "abs", "ceil", "floor", "round", "int", "float", "string", "trim",
    "trimPrefix", "trimSuffix", "upper", "lower", "split", "splitAfter", "replace", "repeat",
    "join", "indexOf", "lastIndexOf", "hasPrefix", "hasSuffix", "max", "min", "mean", "median",
    "toJSON", "fromJSON", "now", "duration", "date", "timezone", "first", "last", "get", "take",
    "keys", "values", "toPairs", "fromPairs", "reverse", "uniq", "concat", "flatten", "sort",
    "bitnot", "bitand", "bitor", "bitxor", "bitnand", "bitshl", "bitshr", "bitushr",
];

fn depth_error(pos: usize) -> PErr {
    (format!("nests deeper than {MAX_DEPTH} levels"), pos)
}

/// A node, refused when it nests too deep or the tree grows too big.
fn mk(kind: Kind, pos: usize) -> Result<Node, PErr> {
    let children = kind.children();
    let depth = children.iter().map(|c| c.depth + 1).max().unwrap_or(0);
    if depth > MAX_DEPTH {
        return Err(depth_error(pos));
    }
    let size = 1 + children.iter().map(|c| c.size).sum::<usize>();
    if size > MAX_NODES {
        return Err((format!("has more than {MAX_NODES} nodes"), pos));
    }
    Ok(Node {
        kind,
        pos,
        depth,
        size,
    })
}

fn parse_tree(src: &str, builtins_disabled: bool) -> Result<Node, PErr> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks: &toks,
        i: 0,
        frames: 0,
        builtins_disabled,
    };
    let node = p.parse_expression(0)?;
    match &p.cur().tok {
        Tok::Eof => Ok(node),
        Tok::Op(o) if o == ";" => Err(unsupported("sequences (`;`)", p.cur().pos)),
        _ => Err(p.unexpected()),
    }
}

fn unsupported(what: &str, pos: usize) -> PErr {
    (format!("{what} are not supported"), pos)
}

fn show(t: &Token) -> String {
    match &t.tok {
        Tok::Ident(s) | Tok::Num(s) | Tok::Op(s) => format!("`{s}`"),
        Tok::Str(_) => "a string".into(),
        Tok::Open(c) | Tok::Close(c) => format!("`{c}`"),
        Tok::Eof => "the end of the expression".into(),
    }
}

struct Parser<'t> {
    toks: &'t [Token],
    i: usize,
    /// Nested `parse_expression` calls (bounded by [`MAX_DEPTH`]).
    frames: usize,
    /// AWF's validator: expr's built-ins are unknown names.
    builtins_disabled: bool,
}

impl Parser<'_> {
    fn cur(&self) -> &Token {
        &self.toks[self.i]
    }

    fn peek(&self) -> &Token {
        &self.toks[(self.i + 1).min(self.toks.len() - 1)]
    }

    fn advance(&mut self) {
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
    }

    fn is_op(&self, s: &str) -> bool {
        matches!(&self.cur().tok, Tok::Op(o) if o == s)
    }

    fn is_open(&self, c: char) -> bool {
        self.cur().tok == Tok::Open(c)
    }

    fn is_close(&self, c: char) -> bool {
        self.cur().tok == Tok::Close(c)
    }

    fn unexpected(&self) -> PErr {
        let t = self.cur();
        match t.tok {
            Tok::Eof => ("unexpected end of expression".into(), t.pos),
            _ => (format!("unexpected token {}", show(t)), t.pos),
        }
    }

    /// Where an operand should be and is not.
    fn expected_value(&self) -> PErr {
        let t = self.cur();
        let prev = self.i.checked_sub(1).map(|k| &self.toks[k]);
        match (prev, &t.tok) {
            (
                Some(
                    p @ Token {
                        tok: Tok::Op(o), ..
                    },
                ),
                Tok::Eof,
            ) => (format!("expected a value after `{o}`"), p.pos),
            (
                Some(Token {
                    tok: Tok::Op(o), ..
                }),
                _,
            ) => (
                format!("expected a value after `{o}`, found {}", show(t)),
                t.pos,
            ),
            _ => self.unexpected(),
        }
    }

    fn expect(&mut self, ok: bool, what: &str) -> Result<(), PErr> {
        if ok {
            self.advance();
            Ok(())
        } else {
            let (m, p) = self.unexpected();
            Err((format!("{m}, expected {what}"), p))
        }
    }

    fn parse_expression(&mut self, prec: u16) -> Result<Node, PErr> {
        self.frames += 1;
        let r = if self.frames > MAX_DEPTH + 1 {
            Err(depth_error(self.cur().pos))
        } else {
            self.parse_expression_inner(prec)
        };
        self.frames -= 1;
        r
    }

    fn parse_expression_inner(&mut self, prec: u16) -> Result<Node, PErr> {
        if prec == 0 {
            if self.is_op("let") {
                return Err(unsupported("variables (`let`)", self.cur().pos));
            }
            if self.is_op("if") {
                return Err(unsupported("`if` blocks", self.cur().pos));
            }
        }
        let mut left = self.parse_primary()?;
        let mut prev: Option<String> = None;
        while let Tok::Op(first) = &self.cur().tok {
            let mut op = first.clone();
            let mut op_pos = self.cur().pos;
            let mut negated = false;
            if op == "not" {
                let next = self.peek().clone();
                match &next.tok {
                    Tok::Op(n) if NEGATABLE.contains(&n.as_str()) => {
                        if binary_info(n).is_some_and(|(p, _)| p >= prec) {
                            op = n.clone();
                            op_pos = next.pos;
                            negated = true;
                            self.advance();
                        } else {
                            break;
                        }
                    }
                    _ => {
                        return Err((format!("unexpected token {}", show(&next)), next.pos));
                    }
                }
            }
            let Some((p, right_assoc)) = binary_info(&op) else {
                break;
            };
            if p < prec {
                break;
            }
            self.advance();
            match op.as_str() {
                "|" => return Err(unsupported("pipes (`|`)", op_pos)),
                ".." => return Err(unsupported("ranges (`..`)", op_pos)),
                _ => {}
            }
            if prev.as_deref() == Some("??") && op != "??" {
                return Err((
                    format!(
                        "operator `{op}` and coalesce expressions (`??`) cannot be mixed: wrap \
                         either in parentheses"
                    ),
                    op_pos,
                ));
            }
            let bop =
                BinOp::from_str(&op).ok_or_else(|| (format!("unknown operator {op}"), op_pos))?;
            if matches!(bop, BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge) {
                left = self.parse_comparison(left, bop, op_pos, p)?;
            } else {
                let right = self.parse_expression(if right_assoc { p } else { p + 1 })?;
                left = binary_node(bop, left, right, op_pos)?;
                if negated {
                    left = mk(Kind::Unary(UnOp::Not, Box::new(left)), op_pos)?;
                }
            }
            prev = Some(op);
        }
        if prec == 0 {
            left = self.parse_conditional(left)?;
        }
        Ok(left)
    }

    /// `a < b < c` is `a < b && b < c`.
    fn parse_comparison(
        &mut self,
        mut left: Node,
        mut op: BinOp,
        mut pos: usize,
        prec: u16,
    ) -> Result<Node, PErr> {
        let mut root: Option<Node> = None;
        loop {
            let right = self.parse_expression(prec + 1)?;
            let cmp = binary_node(op, left, right.clone(), pos)?;
            root = Some(match root {
                None => cmp,
                Some(r) => mk(Kind::Binary(BinOp::And, Box::new(r), Box::new(cmp)), pos)?,
            });
            left = right;
            let next = match &self.cur().tok {
                Tok::Op(o) => BinOp::from_str(o),
                _ => None,
            };
            match next {
                Some(n @ (BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge)) => {
                    op = n;
                    pos = self.cur().pos;
                    self.advance();
                }
                _ => break,
            }
        }
        Ok(root.expect("one comparison at least"))
    }

    fn parse_conditional(&mut self, mut node: Node) -> Result<Node, PErr> {
        while self.is_op("?") {
            let pos = self.cur().pos;
            self.advance();
            let (then, otherwise) = if self.is_op(":") {
                self.advance();
                (node.clone(), self.parse_expression(0)?)
            } else {
                let then = self.parse_expression(0)?;
                let ok = self.is_op(":");
                self.expect(ok, "`:`")?;
                (then, self.parse_expression(0)?)
            };
            node = mk(
                Kind::Cond(Box::new(node), Box::new(then), Box::new(otherwise)),
                pos,
            )?;
        }
        Ok(node)
    }

    fn parse_primary(&mut self) -> Result<Node, PErr> {
        let t = self.cur().clone();
        match &t.tok {
            Tok::Op(o) if unary_info(o).is_some() => {
                let (prec, op) = unary_info(o).expect("checked");
                self.advance();
                let operand = self.parse_expression(prec)?;
                let node = mk(Kind::Unary(op, Box::new(operand)), t.pos)?;
                self.parse_postfix(node)
            }
            Tok::Open('(') => {
                self.advance();
                let inner = self.parse_expression(0)?;
                if self.is_op(";") {
                    return Err(unsupported("sequences (`;`)", self.cur().pos));
                }
                let ok = self.is_close(')');
                self.expect(ok, "`)`")?;
                self.parse_postfix(inner)
            }
            Tok::Op(o) if o == "#" => Err(unsupported("predicates (`#`)", t.pos)),
            Tok::Op(o) if o == "::" => Err(unsupported("`::` calls", t.pos)),
            _ => self.parse_secondary(),
        }
    }

    fn parse_secondary(&mut self) -> Result<Node, PErr> {
        let t = self.cur().clone();
        let node = match t.tok {
            Tok::Ident(name) => {
                self.advance();
                match name.as_str() {
                    "true" => return mk(Kind::Bool(true), t.pos),
                    "false" => return mk(Kind::Bool(false), t.pos),
                    "nil" => return mk(Kind::Nil, t.pos),
                    _ => {}
                }
                if self.is_open('(') {
                    self.parse_call(name, t.pos)?
                } else {
                    mk(Kind::Ident(name), t.pos)?
                }
            }
            Tok::Num(word) => {
                self.advance();
                return number_node(&word, t.pos);
            }
            Tok::Str(s) => {
                self.advance();
                mk(Kind::Str(s), t.pos)?
            }
            Tok::Open('[') => self.parse_array(t.pos)?,
            Tok::Open('{') => self.parse_map(t.pos)?,
            _ => return Err(self.expected_value()),
        };
        self.parse_postfix(node)
    }

    fn parse_call(&mut self, name: String, pos: usize) -> Result<Node, PErr> {
        let known = EXPR_BUILTINS.contains(&name.as_str());
        if PREDICATES.contains(&name.as_str()) || (known && self.builtins_disabled) {
            if self.builtins_disabled {
                return Err((format!("unknown name {name}"), pos));
            }
            return Err((format!("`{name}` (a predicate) is not supported"), pos));
        }
        self.advance(); // `(`
        let mut args = Vec::new();
        while !self.is_close(')') {
            if !args.is_empty() {
                let ok = self.is_op(",");
                self.expect(ok, "`,` or `)`")?;
                if self.is_close(')') {
                    break;
                }
            }
            args.push(self.parse_expression(0)?);
        }
        self.advance(); // `)`
        mk(Kind::Call(name, args), pos)
    }

    fn parse_array(&mut self, pos: usize) -> Result<Node, PErr> {
        self.advance(); // `[`
        let mut items = Vec::new();
        while !self.is_close(']') {
            if !items.is_empty() {
                let ok = self.is_op(",");
                self.expect(ok, "`,` or `]`")?;
                if self.is_close(']') {
                    break;
                }
            }
            items.push(self.parse_expression(0)?);
        }
        self.advance(); // `]`
        mk(Kind::Array(items), pos)
    }

    fn parse_map(&mut self, pos: usize) -> Result<Node, PErr> {
        self.advance(); // `{`
        let mut pairs = Vec::new();
        while !self.is_close('}') {
            if !pairs.is_empty() {
                let ok = self.is_op(",");
                self.expect(ok, "`,` or `}`")?;
                if self.is_close('}') {
                    break;
                }
            }
            let t = self.cur().clone();
            let key = match t.tok {
                Tok::Num(w) | Tok::Str(w) | Tok::Ident(w) => {
                    self.advance();
                    mk(Kind::Str(w), t.pos)?
                }
                Tok::Open('(') => self.parse_expression(0)?,
                _ => {
                    return Err((
                        format!(
                            "a map key must be a quoted string, a number, a name, or an \
                             expression in parentheses, found {}",
                            show(&t)
                        ),
                        t.pos,
                    ));
                }
            };
            let ok = self.is_op(":");
            self.expect(ok, "`:`")?;
            let value = self.parse_expression(0)?;
            pairs.push((key, value));
        }
        self.advance(); // `}`
        mk(Kind::Map(pairs), pos)
    }

    fn parse_postfix(&mut self, mut node: Node) -> Result<Node, PErr> {
        loop {
            let t = self.cur().clone();
            match &t.tok {
                Tok::Op(o) if o == "." || o == "?." => {
                    let optional = o == "?.";
                    self.advance();
                    if optional && self.is_open('[') {
                        let pos = self.cur().pos;
                        node = self.parse_index(node, true, pos)?;
                        continue;
                    }
                    let prop = self.cur().clone();
                    let name = match &prop.tok {
                        Tok::Ident(s) => s.clone(),
                        Tok::Op(s) if is_identifier(s) => s.clone(),
                        _ => {
                            return Err((
                                format!("expected a name after `{o}`, found {}", show(&prop)),
                                prop.pos,
                            ));
                        }
                    };
                    self.advance();
                    // `a?.b.c`: the chain goes on, and ends after `.c`.
                    let (base, in_chain) = match node {
                        Node {
                            kind: Kind::Chain(inner),
                            ..
                        } => (*inner, true),
                        other => (other, false),
                    };
                    let key = mk(Kind::Str(name), prop.pos)?;
                    let member = mk(
                        Kind::Member {
                            obj: Box::new(base),
                            prop: Box::new(key),
                            optional,
                        },
                        prop.pos,
                    )?;
                    if self.is_open('(') {
                        return Err(unsupported("method calls", prop.pos));
                    }
                    node = if in_chain || optional {
                        mk(Kind::Chain(Box::new(member)), prop.pos)?
                    } else {
                        member
                    };
                }
                Tok::Open('[') => node = self.parse_index(node, false, t.pos)?,
                _ => return Ok(node),
            }
        }
    }

    /// After `node`, at `[`: an index or a slice.
    fn parse_index(&mut self, node: Node, optional: bool, pos: usize) -> Result<Node, PErr> {
        self.advance(); // `[`
        let from = if self.is_op(":") {
            None
        } else {
            Some(self.parse_expression(0)?)
        };
        if self.is_op(":") {
            self.advance();
            let to = if self.is_close(']') {
                None
            } else {
                Some(Box::new(self.parse_expression(0)?))
            };
            let ok = self.is_close(']');
            self.expect(ok, "`]`")?;
            let from = from.map(Box::new);
            return mk(
                Kind::Slice {
                    obj: Box::new(node),
                    from,
                    to,
                },
                pos,
            );
        }
        let ok = self.is_close(']');
        self.expect(ok, "`]`")?;
        let member = mk(
            Kind::Member {
                obj: Box::new(node),
                prop: Box::new(from.expect("an index")),
                optional,
            },
            pos,
        )?;
        if optional {
            mk(Kind::Chain(Box::new(member)), pos)
        } else {
            Ok(member)
        }
    }
}

fn binary_node(op: BinOp, left: Node, right: Node, pos: usize) -> Result<Node, PErr> {
    if op == BinOp::Matches
        && let Kind::Str(pattern) = &right.kind
    {
        let re = compile_regex(pattern).map_err(|e| (e, pos))?;
        return mk(Kind::Matches(Box::new(left), Box::new(re)), pos);
    }
    mk(Kind::Binary(op, Box::new(left), Box::new(right)), pos)
}

/// An integer or float literal (expr's rules: `_` ignored, `0x` `0o` `0b` prefixes, a `.` or
/// an `e` makes a float).
fn number_node(word: &str, pos: usize) -> Result<Node, PErr> {
    let v: String = word.chars().filter(|c| *c != '_').collect();
    let lower = v.to_ascii_lowercase();
    let int = |digits: &str, radix: u32, what: &str| {
        i64::from_str_radix(digits, radix)
            .ok()
            .filter(|_| !digits.starts_with(['+', '-']))
            .ok_or_else(|| (format!("invalid {what} literal: {word}"), pos))
    };
    let kind = if let Some(h) = lower.strip_prefix("0x") {
        Kind::Int(int(h, 16, "hex")?)
    } else if lower.contains(['.', 'e']) {
        let f: f64 = v
            .parse()
            .map_err(|_| (format!("invalid float literal: {word}"), pos))?;
        if f.is_infinite() {
            return Err(("float literal is too large".into(), pos));
        }
        Kind::Float(f)
    } else if let Some(b) = lower.strip_prefix("0b") {
        Kind::Int(int(b, 2, "binary")?)
    } else if let Some(o) = lower.strip_prefix("0o") {
        Kind::Int(int(o, 8, "octal")?)
    } else {
        Kind::Int(int(&v, 10, "integer")?)
    };
    mk(kind, pos)
}

// ------------------------------------------------------------------------------------------
// Static check (expr's checker): natures known before running

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nat {
    Unknown,
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Array,
    Map,
}

impl Nat {
    fn num(self) -> bool {
        matches!(self, Nat::Int | Nat::Float)
    }

    /// Go's name of the type.
    fn go(self) -> &'static str {
        match self {
            Nat::Unknown => "interface {}",
            Nat::Nil => "nil",
            Nat::Bool => "bool",
            Nat::Int => "int",
            Nat::Float => "float64",
            Nat::Str => "string",
            Nat::Array => "[]interface {}",
            Nat::Map => "map[string]interface {}",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Nat::Unknown => "unknown",
            Nat::Nil => "nil",
            Nat::Bool => "bool",
            Nat::Int => "int",
            Nat::Float => "float",
            Nat::Str => "string",
            Nat::Array => "array",
            Nat::Map => "map",
        }
    }
}

/// The nature of `n`, or the first type error (in expr's order: operands first). With
/// `builtins`, calls of expr's built-ins have their types (the run-time compiler); without,
/// every call is unknown (AWF's validator).
fn check(n: &Node, builtins: bool) -> Result<Nat, PErr> {
    let at = |m: String| (m, n.pos);
    Ok(match &n.kind {
        Kind::Nil => Nat::Nil,
        Kind::Bool(_) => Nat::Bool,
        Kind::Int(_) => Nat::Int,
        Kind::Float(_) => Nat::Float,
        Kind::Str(_) => Nat::Str,
        Kind::Ident(_) => Nat::Unknown,
        Kind::Array(_) | Kind::Map(_) | Kind::Member { .. } | Kind::Slice { .. } => {
            for c in n.kind.children() {
                check(c, builtins)?;
            }
            match n.kind {
                Kind::Array(_) => Nat::Array,
                Kind::Map(_) => Nat::Map,
                _ => Nat::Unknown,
            }
        }
        Kind::Chain(inner) => check(inner, builtins)?,
        Kind::Unary(op, x) => {
            let t = check(x, builtins)?;
            match op {
                UnOp::Not if t == Nat::Bool || t == Nat::Unknown => Nat::Bool,
                UnOp::Neg | UnOp::Plus if t.num() || t == Nat::Unknown => t,
                _ => {
                    let sym = if *op == UnOp::Not { "not" } else { "-" };
                    return Err(at(format!(
                        "invalid operation: {sym} (mismatched type {})",
                        t.go()
                    )));
                }
            }
        }
        Kind::Matches(l, _) => {
            let t = check(l, builtins)?;
            binary_nature(BinOp::Matches, t, Nat::Str).map_err(at)?
        }
        Kind::Binary(op, l, r) => {
            let lt = check(l, builtins)?;
            let rt = check(r, builtins)?;
            binary_nature(*op, lt, rt).map_err(at)?
        }
        Kind::Cond(c, a, b) => {
            let ct = check(c, builtins)?;
            if ct != Nat::Bool && ct != Nat::Unknown {
                return Err((
                    format!("non-bool expression (type {}) used as condition", ct.go()),
                    c.pos,
                ));
            }
            let (t1, t2) = (check(a, builtins)?, check(b, builtins)?);
            match (t1, t2) {
                (Nat::Nil, t) | (t, Nat::Nil) => t,
                (t1, t2) if t1 == t2 => t1,
                _ => Nat::Unknown,
            }
        }
        Kind::Call(name, args) => {
            let mut nats = Vec::with_capacity(args.len());
            for a in args {
                nats.push(check(a, builtins)?);
            }
            if builtins {
                call_nature(name, &nats).map_err(at)?
            } else {
                Nat::Unknown
            }
        }
    })
}

fn binary_nature(op: BinOp, l: Nat, r: Nat) -> Result<Nat, String> {
    use Nat::*;
    // expr's `MaybeCompatible`: unknown on one side, the other unknown or fitting.
    let maybe = |ok: &dyn Fn(Nat) -> bool| match (l, r) {
        (Unknown, r) => r == Unknown || ok(r),
        (l, Unknown) => ok(l),
        _ => false,
    };
    let promote = if l == Int && r == Int { Int } else { Float };
    let res = match op {
        BinOp::Eq | BinOp::Ne => {
            let ok = l == Unknown || r == Unknown || l == Nil || r == Nil;
            (ok || (l.num() && r.num()) || l == r).then_some(Bool)
        }
        BinOp::And | BinOp::Or => {
            ((l == Bool && r == Bool) || maybe(&|t| t == Bool)).then_some(Bool)
        }
        BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => {
            let both = (l.num() && r.num()) || (l == Str && r == Str);
            (both || maybe(&|t| t.num() || t == Str)).then_some(Bool)
        }
        BinOp::Sub | BinOp::Mul => {
            if l.num() && r.num() {
                Some(promote)
            } else {
                maybe(&Nat::num).then_some(Unknown)
            }
        }
        BinOp::Div | BinOp::Pow => ((l.num() && r.num()) || maybe(&Nat::num)).then_some(Float),
        BinOp::Mod => ((l == Int && r == Int) || maybe(&|t| t == Int)).then_some(Int),
        BinOp::Add => {
            if l.num() && r.num() {
                Some(promote)
            } else if l == Str && r == Str {
                Some(Str)
            } else {
                maybe(&|t| t.num() || t == Str).then_some(Unknown)
            }
        }
        BinOp::In => match r {
            Map if l != Unknown && l != Str => {
                return Err(format!("cannot use {} as type string in map key", l.go()));
            }
            Map | Array | Unknown => Some(Bool),
            Str if l == Unknown => Some(Bool),
            _ => None,
        },
        BinOp::Matches | BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith => {
            ((l == Str && r == Str) || maybe(&|t| t == Str)).then_some(Bool)
        }
        BinOp::Coalesce => Some(match (l, r) {
            (Nil, t) | (t, Nil) => t,
            (l, r) if l == r => l,
            _ => Unknown,
        }),
    };
    res.ok_or_else(|| {
        format!(
            "invalid operation: {} (mismatched types {} and {})",
            op.sym(),
            l.go(),
            r.go()
        )
    })
}

/// The result of a call, as expr's checker types the built-ins (and AWF's `has_prefix`,
/// `has_suffix`); other names are unknown.
fn call_nature(name: &str, args: &[Nat]) -> Result<Nat, String> {
    use Nat::*;
    let n = args.len();
    let one = || {
        if n == 1 {
            Ok(args[0])
        } else {
            Err(format!("invalid number of arguments (expected 1, got {n})"))
        }
    };
    let invalid = |t: Nat| format!("invalid argument for {name} (type {})", t.go());
    // A Go signature: `min..=max` arguments of these types (Unknown: any).
    let typed = |min: usize, params: &[Nat], result: Nat| -> Result<Nat, String> {
        if n < min {
            return Err(format!("not enough arguments to call {name}"));
        }
        if n > params.len() {
            return Err(format!("too many arguments to call {name}"));
        }
        for (t, want) in args.iter().zip(params) {
            if *t != Unknown && *want != Unknown && t != want {
                return Err(format!(
                    "cannot use {} as argument (type {}) to call {name}",
                    t.go(),
                    want.go()
                ));
            }
        }
        Ok(result)
    };
    match name {
        "len" => match one()? {
            Array | Map | Str | Unknown => Ok(Int),
            t => Err(invalid(t)),
        },
        "abs" => match one()? {
            t if t.num() || t == Unknown => Ok(t),
            t => Err(invalid(t)),
        },
        "int" | "float" => match one()? {
            t if t.num() || t == Str || t == Unknown => Ok(if name == "int" { Int } else { Float }),
            t => Err(invalid(t)),
        },
        "ceil" | "floor" | "round" => match one()? {
            t if t.num() || t == Unknown => Ok(Float),
            t => Err(invalid(t)),
        },
        "string" | "type" => typed(1, &[Unknown], Str),
        "upper" | "lower" => typed(1, &[Str], Str),
        "trim" | "trimPrefix" | "trimSuffix" => typed(1, &[Str, Str], Str),
        "split" => typed(2, &[Str, Str, Int], Array),
        "hasPrefix" | "hasSuffix" | "has_prefix" | "has_suffix" => typed(2, &[Str, Str], Bool),
        "indexOf" | "lastIndexOf" => typed(2, &[Str, Str], Int),
        "replace" => typed(3, &[Str, Str, Str, Int], Str),
        "join" => typed(1, &[Array, Str], Str),
        _ => Ok(Unknown),
    }
}

// ------------------------------------------------------------------------------------------
// References

fn collect_refs(n: &Node, out: &mut Vec<Vec<String>>) {
    match &n.kind {
        Kind::Ident(_) | Kind::Member { .. } | Kind::Chain(_) => {
            // The links of the chain, from the root outwards.
            let mut props = Vec::new();
            let mut cur = n;
            loop {
                match &cur.kind {
                    Kind::Chain(inner) => cur = inner,
                    Kind::Member { obj, prop, .. } => {
                        props.push(&**prop);
                        cur = obj;
                    }
                    _ => break,
                }
            }
            props.reverse();
            match &cur.kind {
                Kind::Ident(name) => {
                    let mut path = Vec::new();
                    if name != "$env" {
                        path.push(name.clone());
                    }
                    for p in &props {
                        match &p.kind {
                            Kind::Str(s) => path.push(s.clone()),
                            _ => break,
                        }
                    }
                    if !path.is_empty() && !out.contains(&path) {
                        out.push(path);
                    }
                }
                _ => collect_refs(cur, out),
            }
            for p in props {
                if !matches!(p.kind, Kind::Str(_)) {
                    collect_refs(p, out);
                }
            }
        }
        _ => {
            for c in n.kind.children() {
                collect_refs(c, out);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Values

#[derive(Debug, Clone)]
enum V<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    List(List<'a>),
    Map(MapV<'a>),
}

#[derive(Debug, Clone)]
enum List<'a> {
    Json(&'a [Value]),
    Own(Vec<V<'a>>),
}

#[derive(Debug, Clone)]
enum MapV<'a> {
    Json(&'a Map<String, Value>),
    Own(BTreeMap<String, V<'a>>),
}

fn from_json(v: &Value) -> V<'_> {
    match v {
        Value::Null => V::Nil,
        Value::Bool(b) => V::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => V::Int(i),
            None => V::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => V::Str(Cow::Borrowed(s)),
        Value::Array(a) => V::List(List::Json(a)),
        Value::Object(m) => V::Map(MapV::Json(m)),
    }
}

impl<'a> List<'a> {
    fn len(&self) -> usize {
        match self {
            List::Json(a) => a.len(),
            List::Own(v) => v.len(),
        }
    }

    fn get(&self, i: usize) -> V<'a> {
        match self {
            List::Json(a) => from_json(&a[i]),
            List::Own(v) => v[i].clone(),
        }
    }

    fn items(&self) -> Box<dyn Iterator<Item = V<'a>> + '_> {
        match self {
            List::Json(a) => Box::new(a.iter().map(from_json)),
            List::Own(v) => Box::new(v.iter().cloned()),
        }
    }
}

impl<'a> MapV<'a> {
    fn len(&self) -> usize {
        match self {
            MapV::Json(m) => m.len(),
            MapV::Own(m) => m.len(),
        }
    }

    fn get(&self, k: &str) -> Option<V<'a>> {
        match self {
            MapV::Json(m) => m.get(k).map(from_json),
            MapV::Own(m) => m.get(k).cloned(),
        }
    }

    /// By key, as Go prints maps.
    fn sorted(&self) -> Vec<(&str, V<'a>)> {
        let mut v: Vec<(&str, V<'a>)> = match self {
            MapV::Json(m) => m.iter().map(|(k, v)| (k.as_str(), from_json(v))).collect(),
            MapV::Own(m) => m.iter().map(|(k, v)| (k.as_str(), v.clone())).collect(),
        };
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }
}

impl V<'_> {
    fn is_nil(&self) -> bool {
        matches!(self, V::Nil)
    }

    /// Go's `%T`.
    fn go_type(&self) -> &'static str {
        match self {
            V::Nil => "<nil>",
            V::Bool(_) => "bool",
            V::Int(_) => "int",
            V::Float(_) => "float64",
            V::Str(_) => "string",
            V::List(_) => "[]interface {}",
            V::Map(_) => "map[string]interface {}",
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            V::Nil => "nil",
            V::Bool(_) => "bool",
            V::Int(_) => "int",
            V::Float(_) => "float",
            V::Str(_) => "string",
            V::List(_) => "array",
            V::Map(_) => "map",
        }
    }
}

/// Go's message for a failed type assertion of `v` to `want`.
fn conv_err(v: &V, want: &str) -> String {
    let is = if v.is_nil() { "nil" } else { v.go_type() };
    format!("interface conversion: interface {{}} is {is}, not {want}")
}

fn as_str<'v>(v: &'v V) -> Result<&'v str, String> {
    match v {
        V::Str(s) => Ok(s),
        o => Err(conv_err(o, "string")),
    }
}

fn into_str(v: V<'_>) -> Result<Cow<'_, str>, String> {
    match v {
        V::Str(s) => Ok(s),
        o => Err(conv_err(&o, "string")),
    }
}

/// A part of `s` chosen by `f`, borrowed when `s` is.
fn sub<'a>(s: Cow<'a, str>, f: impl for<'x> Fn(&'x str) -> &'x str) -> Cow<'a, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(f(b)),
        Cow::Owned(o) => Cow::Owned(f(&o).to_string()),
    }
}

/// expr's `ToInt`.
fn to_int(v: &V) -> Result<i64, String> {
    match v {
        V::Int(i) => Ok(*i),
        V::Float(f) => Ok(*f as i64),
        o => Err(format!("invalid operation: int({})", o.go_type())),
    }
}

fn to_float(v: &V) -> Result<f64, String> {
    match v {
        V::Int(i) => Ok(*i as f64),
        V::Float(f) => Ok(*f),
        o => Err(format!("invalid operation: float({})", o.go_type())),
    }
}

/// Go's `%v` of a float64 (`%g` with the shortest digits): an exponent below 1e-4 and from
/// 1e6 on (`1e+06`, `1.234567e+06`, `1e-05`), plain digits between.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a number");
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', int_len - digits.len()));
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    } else {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
        out.push_str(&digits);
    }
    out
}

fn too_long(what: &str, len: usize) -> String {
    format!("{what} would build a string of {len} bytes, over the limit of {MAX_STRING_BYTES}")
}

/// Go's `%v` of `v` into `out`, refused past [`MAX_STRING_BYTES`].
fn sprint(v: &V, out: &mut String, depth: usize) -> Result<(), String> {
    if depth > MAX_VALUE_DEPTH {
        return Err("value nests too deeply".into());
    }
    let room = |out: &String, more: usize| {
        if out.len() + more > MAX_STRING_BYTES {
            Err(too_long("string()", out.len() + more))
        } else {
            Ok(())
        }
    };
    match v {
        V::Nil => out.push_str("<nil>"),
        V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        V::Int(i) => {
            let _ = write!(out, "{i}");
        }
        V::Float(f) => out.push_str(&go_float(*f)),
        V::Str(s) => {
            room(out, s.len())?;
            out.push_str(s);
        }
        V::List(l) => {
            out.push('[');
            for (k, item) in l.items().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                sprint(&item, out, depth + 1)?;
                room(out, 0)?;
            }
            out.push(']');
        }
        V::Map(m) => {
            out.push_str("map[");
            for (k, (key, val)) in m.sorted().into_iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                room(out, key.len() + 1)?;
                out.push_str(key);
                out.push(':');
                sprint(&val, out, depth + 1)?;
            }
            out.push(']');
        }
    }
    room(out, 0)
}

/// `%v` for a message (clipped).
fn show_value(v: &V) -> String {
    let mut s = String::new();
    // Past the limit, what was printed so far is enough for a message.
    let _ = sprint(v, &mut s, 0);
    clip(&s, 100)
}

/// expr's `runtime.Equal`.
fn equal(a: &V, b: &V) -> Result<bool, String> {
    Ok(match (a, b) {
        (V::Int(x), V::Int(y)) => x == y,
        (V::Int(x), V::Float(y)) | (V::Float(y), V::Int(x)) => *x as f64 == *y,
        _ => deep_equal(a, b, 0)?,
    })
}

/// Go's `reflect.DeepEqual` on these values: kinds must match (`1` and `1.0` differ).
fn deep_equal(a: &V, b: &V, depth: usize) -> Result<bool, String> {
    if depth > MAX_VALUE_DEPTH {
        return Err("values nest too deeply to compare".into());
    }
    Ok(match (a, b) {
        (V::Nil, V::Nil) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        (V::Float(x), V::Float(y)) => x == y,
        (V::Str(x), V::Str(y)) => x == y,
        (V::List(x), V::List(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.items().zip(y.items()) {
                if !deep_equal(&p, &q, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        (V::Map(x), V::Map(y)) => {
            if x.len() != y.len() {
                return Ok(false);
            }
            for (k, p) in x.sorted() {
                match y.get(k) {
                    Some(q) if deep_equal(&p, &q, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        _ => false,
    })
}

fn map_index_err(v: &V) -> String {
    format!(
        "reflect.Value.MapIndex: value of type {} is not assignable to type string",
        v.go_type()
    )
}

/// expr's `runtime.Fetch`: `o[k]`, `o.k`.
fn fetch<'a>(o: V<'a>, k: &V<'a>) -> Result<V<'a>, String> {
    let index = |len: usize| -> Result<usize, String> {
        let i = to_int(k)?;
        let i = if i < 0 {
            i.saturating_add(len as i64)
        } else {
            i
        };
        if i < 0 || i >= len as i64 {
            return Err(format!("index out of range: {i} (array length is {len})"));
        }
        Ok(i as usize)
    };
    match o {
        V::List(l) => Ok(l.get(index(l.len())?)),
        V::Str(s) => Ok(V::Int(i64::from(s.as_bytes()[index(s.len())?]))),
        V::Map(m) => match k {
            V::Nil => Ok(m.get("").unwrap_or(V::Nil)),
            V::Str(s) => Ok(m.get(s).unwrap_or(V::Nil)),
            other => Err(map_index_err(other)),
        },
        o => Err(format!(
            "cannot fetch {} from {}",
            show_value(k),
            o.go_type()
        )),
    }
}

/// expr's `runtime.In`.
fn in_op(needle: &V, hay: &V) -> Result<bool, String> {
    match hay {
        V::Nil => Ok(false),
        V::List(l) => {
            for item in l.items() {
                if equal(&item, needle)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        V::Map(m) => match needle {
            V::Nil => Ok(m.get("").is_some()),
            V::Str(s) => Ok(m.get(s).is_some()),
            other => Err(map_index_err(other)),
        },
        other => Err(format!(
            "operator \"in\" not defined on {}",
            other.go_type()
        )),
    }
}

fn compare(op: BinOp, a: &V, b: &V) -> Result<bool, String> {
    use std::cmp::Ordering::*;
    let ord = match (a, b) {
        (V::Int(x), V::Int(y)) => Some(x.cmp(y)),
        (V::Int(_) | V::Float(_), V::Int(_) | V::Float(_)) => {
            to_float(a)?.partial_cmp(&to_float(b)?)
        }
        (V::Str(x), V::Str(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => {
            return Err(format!(
                "invalid operation: {} {} {}",
                a.go_type(),
                op.sym(),
                b.go_type()
            ));
        }
    };
    Ok(match op {
        BinOp::Lt => ord == Some(Less),
        BinOp::Gt => ord == Some(Greater),
        BinOp::Le => matches!(ord, Some(Less | Equal)),
        _ => matches!(ord, Some(Greater | Equal)),
    })
}

/// `- * / % **` (and `+` on numbers).
fn arith<'a>(op: BinOp, a: &V<'a>, b: &V<'a>) -> Result<V<'a>, String> {
    let mismatch = || {
        format!(
            "invalid operation: {} {} {}",
            a.go_type(),
            op.sym(),
            b.go_type()
        )
    };
    match op {
        BinOp::Pow => Ok(V::Float(to_float(a)?.powf(to_float(b)?))),
        BinOp::Mod => match (a, b) {
            (V::Int(_), V::Int(0)) => Err("runtime error: integer divide by zero".into()),
            (V::Int(x), V::Int(y)) => Ok(V::Int(x.wrapping_rem(*y))),
            _ => Err(mismatch()),
        },
        _ => match (a, b) {
            (V::Int(x), V::Int(y)) if op != BinOp::Div => Ok(V::Int(match op {
                BinOp::Add => x.wrapping_add(*y),
                BinOp::Sub => x.wrapping_sub(*y),
                _ => x.wrapping_mul(*y),
            })),
            (V::Int(_) | V::Float(_), V::Int(_) | V::Float(_)) => {
                let (x, y) = (to_float(a)?, to_float(b)?);
                Ok(V::Float(match op {
                    BinOp::Add => x + y,
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    _ => x / y,
                }))
            }
            _ => Err(mismatch()),
        },
    }
}

/// Go's `strings.Split` / `SplitN` (`n < 0`: all).
fn go_split<'x>(s: &'x str, sep: &str, n: i64) -> Vec<&'x str> {
    if n == 0 {
        return Vec::new();
    }
    let limit = if n < 0 { usize::MAX } else { n as usize };
    if sep.is_empty() {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if out.len() + 1 == limit {
                break;
            }
            out.push(&rest[..c.len_utf8()]);
            rest = &rest[c.len_utf8()..];
        }
        if !rest.is_empty() {
            out.push(rest);
        }
        return out;
    }
    s.splitn(limit, sep).collect()
}

/// Go's `unicode.ToUpper`/`ToLower` per character: a character whose mapping is several
/// characters stays as it is.
fn map_case(s: &str, upper: bool) -> String {
    s.chars()
        .map(|c| {
            let mut m: Vec<char> = if upper {
                c.to_uppercase().collect()
            } else {
                c.to_lowercase().collect()
            };
            if m.len() == 1 {
                m.pop().unwrap_or(c)
            } else {
                c
            }
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Evaluation

/// A run-time error (expr's panic message) and where.
struct RtErr {
    msg: String,
    pos: usize,
}

struct Eval<'a> {
    env: &'a Value,
    /// Bytes built so far (strings, array elements).
    built: usize,
}

impl<'a> Eval<'a> {
    fn charge(&mut self, bytes: usize) -> Result<(), String> {
        self.built = self.built.saturating_add(bytes);
        if self.built > MAX_EVAL_BYTES {
            return Err(format!(
                "the expression builds more than {MAX_EVAL_BYTES} bytes"
            ));
        }
        Ok(())
    }

    /// A string an operation built.
    fn built_str(&mut self, s: String, what: &str) -> Result<V<'a>, String> {
        if s.len() > MAX_STRING_BYTES {
            return Err(too_long(what, s.len()));
        }
        self.charge(s.len())?;
        Ok(V::Str(Cow::Owned(s)))
    }

    fn eval(&mut self, n: &'a Node) -> Result<V<'a>, RtErr> {
        let at = |msg: String| RtErr { msg, pos: n.pos };
        Ok(match &n.kind {
            Kind::Nil => V::Nil,
            Kind::Bool(b) => V::Bool(*b),
            Kind::Int(i) => V::Int(*i),
            Kind::Float(f) => V::Float(*f),
            Kind::Str(s) => V::Str(Cow::Borrowed(s)),
            Kind::Array(items) => {
                self.charge(items.len() * ELEMENT_COST).map_err(at)?;
                let mut out = Vec::with_capacity(items.len());
                for i in items {
                    out.push(self.eval(i)?);
                }
                V::List(List::Own(out))
            }
            Kind::Map(pairs) => {
                self.charge(pairs.len() * ELEMENT_COST).map_err(at)?;
                let mut out = BTreeMap::new();
                for (k, v) in pairs {
                    let key = into_str(self.eval(k)?).map_err(at)?.into_owned();
                    out.insert(key, self.eval(v)?);
                }
                V::Map(MapV::Own(out))
            }
            Kind::Ident(name) if name == "$env" => from_json(self.env),
            Kind::Ident(name) => self.env.get(name).map_or(V::Nil, from_json),
            Kind::Member { .. } | Kind::Chain(_) => {
                let inner = match &n.kind {
                    Kind::Chain(inner) => inner,
                    _ => n,
                };
                self.link(inner)?.unwrap_or(V::Nil)
            }
            Kind::Slice { obj, from, to } => {
                let o = self.eval(obj)?;
                let len = match &o {
                    V::List(l) => l.len(),
                    V::Str(s) => s.len(),
                    V::Map(m) => m.len(),
                    other => {
                        return Err(at(format!(
                            "invalid argument for len (type {})",
                            other.go_type()
                        )));
                    }
                } as i64;
                let to = match to {
                    Some(t) => to_int(&self.eval(t)?).map_err(at)?,
                    None => len,
                };
                let from = match from {
                    Some(f) => to_int(&self.eval(f)?).map_err(at)?,
                    None => 0,
                };
                let clamp = |i: i64| (if i < 0 { len + i } else { i }).clamp(0, len) as usize;
                let b = clamp(to);
                let a = clamp(from).min(b);
                match o {
                    V::List(l) => {
                        self.charge((b - a) * ELEMENT_COST).map_err(at)?;
                        V::List(List::Own((a..b).map(|i| l.get(i)).collect()))
                    }
                    V::Str(s) => V::Str(match s {
                        Cow::Borrowed(s) if s.is_char_boundary(a) && s.is_char_boundary(b) => {
                            Cow::Borrowed(&s[a..b])
                        }
                        s => Cow::Owned(String::from_utf8_lossy(&s.as_bytes()[a..b]).into_owned()),
                    }),
                    _ => return Err(at(format!("cannot slice {from}"))),
                }
            }
            Kind::Unary(op, x) => {
                let v = self.eval(x)?;
                match (op, v) {
                    (UnOp::Not, V::Bool(b)) => V::Bool(!b),
                    (UnOp::Not, o) => return Err(at(conv_err(&o, "bool"))),
                    (UnOp::Plus, v) => v,
                    (UnOp::Neg, V::Int(i)) => V::Int(i.wrapping_neg()),
                    (UnOp::Neg, V::Float(f)) => V::Float(-f),
                    (UnOp::Neg, o) => {
                        return Err(at(format!("invalid operation: - {}", o.go_type())));
                    }
                }
            }
            Kind::Matches(l, re) => match self.eval(l)? {
                V::Nil => V::Bool(false),
                V::Str(s) => V::Bool(re.is_match(&s)),
                o => return Err(at(conv_err(&o, "[]uint8"))),
            },
            Kind::Binary(op, l, r) => self.binary(*op, l, r, n.pos)?,
            Kind::Cond(c, a, b) => match self.eval(c)? {
                V::Bool(true) => self.eval(a)?,
                V::Bool(false) => self.eval(b)?,
                o => return Err(at(conv_err(&o, "bool"))),
            },
            Kind::Call(name, args) => {
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(a)?);
                }
                self.call(name, vals).map_err(at)?
            }
        })
    }

    /// A member access inside a chain: None when a `?.` met nil (the whole chain is nil).
    fn link(&mut self, n: &'a Node) -> Result<Option<V<'a>>, RtErr> {
        let Kind::Member {
            obj,
            prop,
            optional,
        } = &n.kind
        else {
            return self.eval(n).map(Some);
        };
        let o = match &obj.kind {
            Kind::Member { .. } => match self.link(obj)? {
                Some(v) => v,
                None => return Ok(None),
            },
            _ => self.eval(obj)?,
        };
        if *optional && o.is_nil() {
            return Ok(None);
        }
        let k = self.eval(prop)?;
        fetch(o, &k)
            .map(Some)
            .map_err(|msg| RtErr { msg, pos: n.pos })
    }

    /// `l op r`, the operator at `pos`.
    fn binary(&mut self, op: BinOp, l: &'a Node, r: &'a Node, pos: usize) -> Result<V<'a>, RtErr> {
        let at = |msg: String| RtErr { msg, pos };
        match op {
            BinOp::And | BinOp::Or => {
                return match self.eval(l)? {
                    V::Bool(b) if b == (op == BinOp::Or) => Ok(V::Bool(b)),
                    V::Bool(_) => self.eval(r),
                    o => Err(at(conv_err(&o, "bool"))),
                };
            }
            BinOp::Coalesce => {
                let a = self.eval(l)?;
                return if a.is_nil() { self.eval(r) } else { Ok(a) };
            }
            BinOp::In => {
                // expr's optimizer turns a literal list of strings into a set of strings.
                if let Kind::Array(items) = &r.kind
                    && !items.is_empty()
                    && items.iter().all(|i| matches!(i.kind, Kind::Str(_)))
                {
                    let needle = self.eval(l)?;
                    let key = match &needle {
                        V::Nil => "",
                        V::Str(s) => s,
                        other => return Err(at(map_index_err(other))),
                    };
                    let found = items
                        .iter()
                        .any(|i| matches!(&i.kind, Kind::Str(s) if s == key));
                    return Ok(V::Bool(found));
                }
            }
            _ => {}
        }
        let a = self.eval(l)?;
        let b = self.eval(r)?;
        let v = match op {
            BinOp::Eq => equal(&a, &b).map(V::Bool),
            BinOp::Ne => equal(&a, &b).map(|e| V::Bool(!e)),
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge => compare(op, &a, &b).map(V::Bool),
            BinOp::In => in_op(&a, &b).map(V::Bool),
            BinOp::Contains | BinOp::StartsWith | BinOp::EndsWith | BinOp::Matches => {
                str_op(op, &a, &b).map(V::Bool)
            }
            BinOp::Add => match (&a, &b) {
                (V::Str(x), V::Str(y)) => {
                    let len = x.len() + y.len();
                    if len > MAX_STRING_BYTES {
                        Err(too_long("`+`", len))
                    } else {
                        self.built_str(format!("{x}{y}"), "`+`")
                    }
                }
                _ => arith(op, &a, &b),
            },
            _ => arith(op, &a, &b),
        };
        v.map_err(at)
    }

    fn call(&mut self, name: &str, mut a: Vec<V<'a>>) -> Result<V<'a>, String> {
        let n = a.len();
        let arity = |min: usize, max: usize| {
            if n < min || n > max {
                Err(format!(
                    "invalid number of arguments for {name} (expected {min}{}, got {n})",
                    if max > min {
                        format!(" to {max}")
                    } else {
                        String::new()
                    }
                ))
            } else {
                Ok(())
            }
        };
        let invalid = |v: &V| format!("invalid argument for {name} (type {})", v.go_type());
        let opt_str = |a: &[V<'a>], i: usize, default: &'static str| -> Result<String, String> {
            a.get(i)
                .map_or(Ok(default.to_string()), |v| as_str(v).map(str::to_string))
        };
        Ok(match name {
            "len" => {
                arity(1, 1)?;
                V::Int(match &a[0] {
                    V::Str(s) => s.chars().count(),
                    V::List(l) => l.len(),
                    V::Map(m) => m.len(),
                    o => return Err(invalid(o)),
                } as i64)
            }
            "upper" | "lower" => {
                arity(1, 1)?;
                let s = map_case(as_str(&a[0])?, name == "upper");
                self.built_str(s, name)?
            }
            "trim" => {
                arity(1, 2)?;
                let cut = opt_str(&a, 1, "")?;
                let s = into_str(a.swap_remove(0))?;
                V::Str(if n == 1 {
                    sub(s, str::trim)
                } else {
                    sub(s, |x| x.trim_matches(|c| cut.contains(c)))
                })
            }
            "trimPrefix" | "trimSuffix" => {
                arity(1, 2)?;
                let p = opt_str(&a, 1, " ")?;
                let s = into_str(a.swap_remove(0))?;
                V::Str(if name == "trimPrefix" {
                    sub(s, |x| x.strip_prefix(p.as_str()).unwrap_or(x))
                } else {
                    sub(s, |x| x.strip_suffix(p.as_str()).unwrap_or(x))
                })
            }
            "split" => {
                arity(2, 3)?;
                let limit = match a.get(2) {
                    Some(v) => to_int(v)?,
                    None => -1,
                };
                let sep = as_str(&a[1])?.to_string();
                let s = into_str(a.swap_remove(0))?;
                let pieces: Vec<V<'a>> = match s {
                    Cow::Borrowed(b) => go_split(b, &sep, limit)
                        .into_iter()
                        .map(|p| V::Str(Cow::Borrowed(p)))
                        .collect(),
                    Cow::Owned(o) => go_split(&o, &sep, limit)
                        .into_iter()
                        .map(|p| V::Str(Cow::Owned(p.to_string())))
                        .collect(),
                };
                self.charge(pieces.len() * ELEMENT_COST)?;
                V::List(List::Own(pieces))
            }
            "int" => {
                arity(1, 1)?;
                match &a[0] {
                    V::Str(s) => V::Int(
                        s.parse()
                            .map_err(|_| format!("invalid operation: int({})", clip(s, 100)))?,
                    ),
                    V::Nil => {
                        return Err("reflect: call of reflect.Value.Type on zero Value".into());
                    }
                    v => V::Int(to_int(v)?),
                }
            }
            "float" => {
                arity(1, 1)?;
                match &a[0] {
                    V::Str(s) => V::Float(
                        go_parse_float(s)
                            .ok_or_else(|| format!("invalid operation: float({})", clip(s, 100)))?,
                    ),
                    v => V::Float(to_float(v)?),
                }
            }
            "string" => {
                arity(1, 1)?;
                match a.swap_remove(0) {
                    s @ V::Str(_) => s,
                    v => {
                        let mut out = String::new();
                        sprint(&v, &mut out, 0)?;
                        self.built_str(out, name)?
                    }
                }
            }
            "abs" => {
                arity(1, 1)?;
                match &a[0] {
                    V::Int(i) => V::Int(i.wrapping_abs()),
                    V::Float(f) => V::Float(if *f < 0.0 { -f } else { *f }),
                    o => return Err(invalid(o)),
                }
            }
            "type" => {
                arity(1, 1)?;
                V::Str(Cow::Borrowed(a[0].kind()))
            }
            "ceil" | "floor" | "round" => {
                arity(1, 1)?;
                let f = match &a[0] {
                    V::Int(i) => *i as f64,
                    V::Float(f) => match name {
                        "ceil" => f.ceil(),
                        "floor" => f.floor(),
                        _ => f.round(),
                    },
                    o => return Err(invalid(o)),
                };
                V::Float(f)
            }
            "hasPrefix" | "hasSuffix" | "has_prefix" | "has_suffix" => {
                arity(2, 2)?;
                let (s, p) = (as_str(&a[0])?, as_str(&a[1])?);
                V::Bool(if name.contains("refix") {
                    s.starts_with(p)
                } else {
                    s.ends_with(p)
                })
            }
            "indexOf" | "lastIndexOf" => {
                arity(2, 2)?;
                let (s, p) = (as_str(&a[0])?, as_str(&a[1])?);
                let found = if name == "indexOf" {
                    s.find(p)
                } else {
                    s.rfind(p)
                };
                V::Int(found.map_or(-1, |i| i as i64))
            }
            "replace" => {
                arity(3, 4)?;
                let limit = match a.get(3) {
                    Some(v) => to_int(v)?,
                    None => -1,
                };
                let (s, old, new) = (as_str(&a[0])?, as_str(&a[1])?, as_str(&a[2])?);
                let found = if old.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(old).count()
                };
                let count = if limit < 0 {
                    found
                } else {
                    found.min(limit as usize)
                };
                let len = (s.len() + count * new.len()).saturating_sub(count * old.len());
                if len > MAX_STRING_BYTES {
                    return Err(too_long(name, len));
                }
                let out = if limit < 0 {
                    s.replace(old, new)
                } else {
                    s.replacen(old, new, count)
                };
                self.built_str(out, name)?
            }
            "join" => {
                arity(1, 2)?;
                let glue = opt_str(&a, 1, "")?;
                let V::List(l) = &a[0] else {
                    return Err(format!(
                        "invalid argument for join (type {})",
                        a[0].go_type()
                    ));
                };
                let mut out = String::new();
                for (k, item) in l.items().enumerate() {
                    let s = as_str(&item)?;
                    let more = s.len() + if k > 0 { glue.len() } else { 0 };
                    if out.len() + more > MAX_STRING_BYTES {
                        return Err(too_long(name, out.len() + more));
                    }
                    if k > 0 {
                        out.push_str(&glue);
                    }
                    out.push_str(s);
                }
                self.built_str(out, name)?
            }
            _ if EXPR_BUILTINS.contains(&name) => {
                return Err(format!("function {name} is not supported"));
            }
            _ => return Err(format!("unknown function {name}")),
        })
    }
}

/// `contains`, `startsWith`, `endsWith`, `matches` (a computed pattern).
fn str_op(op: BinOp, a: &V, b: &V) -> Result<bool, String> {
    if a.is_nil() || b.is_nil() {
        return Ok(false);
    }
    if op == BinOp::Matches {
        let pattern = as_str(b)?;
        let s = match a {
            V::Str(s) => s,
            o => return Err(conv_err(o, "[]uint8")),
        };
        return Ok(compile_regex(pattern)?.is_match(s));
    }
    let (x, y) = (as_str(a)?, as_str(b)?);
    Ok(match op {
        BinOp::Contains => x.contains(y),
        BinOp::StartsWith => x.starts_with(y),
        _ => x.ends_with(y),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> Value {
        json!({
            "inputs": {"mode": "full", "n": 5, "flag": true, "ratio": 0.5, "name": "Ada",
                       "empty": ""},
            "states": {
                "build": {"Output": "ok\n", "Stderr": "", "ExitCode": 0, "Status": "completed",
                          "Response": {"k": "v", "items": [1, 2, 3]}, "TokensUsed": 0},
                "test": {"Output": "WARN: flaky\nline 2\n", "Stderr": "oops", "ExitCode": 2,
                         "Status": "failed", "Response": null, "TokensUsed": 12}
            },
            "env": {"HOME": "/home/u", "CI": "true"},
            "workflow": {"ID": "id-1", "Name": "wf", "CurrentState": "build", "Duration": "1.2s"},
            "context": {"WorkingDir": "/w", "User": "u", "Hostname": "h"}
        })
    }

    fn with_loop() -> Value {
        let mut e = env();
        e["loop"] = json!({"Index": 2, "Index1": 3, "Item": "b", "Length": 4, "First": false,
                           "Last": false, "Parent": {"Index": 0, "Item": "x"}});
        e
    }

    fn ev(text: &str) -> Result<bool, ExprError> {
        Expr::parse(text)?.eval_bool(&env())
    }

    #[track_caller]
    fn yes(text: &str) {
        assert_eq!(ev(text), Ok(true), "{text}");
    }

    #[track_caller]
    fn no(text: &str) {
        assert_eq!(ev(text), Ok(false), "{text}");
    }

    #[track_caller]
    fn fails(text: &str) -> String {
        match ev(text) {
            Err(e) => e.message,
            Ok(b) => panic!("{text} gave {b}, expected an error"),
        }
    }

    #[test]
    fn precedence_follows_expr_lang() {
        yes("1 + 2 * 3 == 7");
        yes("(1 + 2) * 3 == 9");
        yes("not true or true");
        no("not (true or true)");
        yes("!false && true");
        no("true and false or false");
        yes("false and false or true");
        yes("2 ** 3 ** 2 == 512");
        yes("2 ^ 3 == 8");
        yes("-2 ** 2 == -4");
        yes("10 - 2 - 3 == 5");
        yes("1 < 2 < 3");
        no("3 > 2 > 2");
        yes("1 + 2 * 3 > 6 ? true : false");
        yes("(not false) == true");
        // `not` binds tighter than `==`: `(not 1) == 2` is a type error.
        assert!(fails("not 1 == 2").contains("invalid operation: not"));
    }

    #[test]
    fn comparisons_across_kinds() {
        yes("1 == 1.0");
        yes("2.5 > 2");
        yes("inputs.n == 5");
        no("inputs.n == \"5\"");
        yes("inputs.n != \"5\"");
        no("inputs.flag == \"true\"");
        yes("inputs.flag == true");
        no("states.build.Output == 0");
        yes("\"abc\" < \"abd\"");
        yes("nil == nil");
        no("inputs.mode == nil");
        yes("[1, 2] == [1, 2]");
        no("[1] == [1.0]");
        yes("states.build.Response == {k: \"v\", items: [1, 2, 3]}");
        assert!(fails("states.build.Output < 5").contains("invalid operation: string < int"));
        // Between literals, expr's checker refuses before running.
        assert!(fails("1 == \"1\"").contains("mismatched types int and string"));
        assert!(fails("\"a\" < 1").contains("mismatched types string and int"));
        assert!(fails("false and \"a\" < 1").contains("mismatched types"));
    }

    #[test]
    fn arithmetic() {
        yes("7 / 2 == 3.5");
        yes("7 % 3 == 1");
        yes("-7 % 3 == -1");
        yes("1 / 0 > 1000");
        yes("2 ** 100000 > 0");
        yes("inputs.ratio * 2 == 1");
        yes("9223372036854775807 + 1 < 0");
        assert!(fails("inputs.ratio % 2 == 0").contains("invalid operation: float64 % int"));
        assert!(fails("states.test.ExitCode % 0 == 0").contains("integer divide by zero"));
        assert!(fails("1 + \"a\" == 2").contains("mismatched types int and string"));
    }

    #[test]
    fn string_operators() {
        yes("states.test.Output contains \"WARN\"");
        yes("states.test.Output startsWith 'WARN'");
        yes("states.build.Output endsWith \"\\n\"");
        yes("states.test.Output not contains \"ERROR\"");
        yes("inputs.name + \"!\" == 'Ada!'");
        yes("`a\\n` == \"a\\\\n\"");
        yes(r#"'it\'s' == "it's" and "say \"hi\"" == `say "hi"`"#);
        assert!(
            Expr::parse(r#""it\'s" == 'x'"#)
                .unwrap_err()
                .message
                .contains("invalid char escape")
        );
        yes("\"\\u00e9\\x41\\101\\t\" == \"éAA\t\"");
        no("inputs.nope contains \"x\"");
        no("\"x\" startsWith inputs.nope");
        assert!(
            fails("states.test.ExitCode contains \"2\"")
                .contains("interface {} is int, not string")
        );
    }

    #[test]
    fn string_functions() {
        yes("trim(states.build.Output) == \"ok\"");
        yes("trim('xxhixx', 'x') == 'hi'");
        yes("len(\"héllo\") == 5");
        yes("len(states.build.Response.items) == 3");
        yes("len(states.build.Response) == 2");
        yes("upper(inputs.name) == \"ADA\" and lower(inputs.name) == \"ada\"");
        yes("trimPrefix(\"prefix-x\", \"prefix-\") == \"x\"");
        yes("trimSuffix(\"x.yaml\", \".yaml\") == \"x\"");
        yes("trimPrefix(\" x\") == \"x\"");
        yes("split(\"a,b,c\", \",\")[1] == \"b\"");
        yes("split(\"a,b,c\", \",\", 2)[1] == \"b,c\"");
        yes("split(\"abc\", \"\") == [\"a\", \"b\", \"c\"]");
        yes("split(states.test.Output, \"\\n\")[-2] == \"line 2\"");
        yes("has_prefix(states.test.Output, \"WARN\")");
        yes("has_suffix(inputs.name, \"da\")");
        yes("hasPrefix(\"abc\", \"a\")");
        yes("int(\"42\") == 42 and int(3.9) == 3");
        yes("float(\"1.5\") == 1.5");
        yes("string(1.5) == \"1.5\" and string(1000000.0) == \"1e+06\"");
        yes("string(123456.0) == \"123456\" and string(0.0001) == \"0.0001\"");
        yes("string(0.00001) == \"1e-05\" and string(-2.5e-7) == \"-2.5e-07\"");
        yes("string([1, \"a\", nil, true]) == \"[1 a <nil> true]\"");
        yes("string(states.build.Response) == \"map[items:[1 2 3] k:v]\"");
        yes("abs(-3) == 3 and abs(-2.5) == 2.5");
        yes("replace(\"a-b-c\", \"-\", \"+\") == \"a+b+c\"");
        yes("join(split(\"a b\", \" \"), \",\") == \"a,b\"");
        yes("indexOf(\"héllo\", \"l\") == 3");
        yes("type(inputs.n) == \"int\"");
        assert!(fails("int(\"x\") == 1").contains("invalid operation: int(x)"));
        assert!(fails("upper(1) == \"1\"").contains("cannot use int as argument"));
        assert!(fails("len(1, 2) == 1").contains("invalid number of arguments"));
        assert!(fails("upper(inputs.nope) == \"\"").contains("interface {} is nil, not string"));
        assert!(fails("max(1, 2) == 2").contains("not supported"));
        assert!(fails("frobnicate(1)").contains("unknown function frobnicate"));
    }

    #[test]
    fn contains_as_a_call_is_rewritten() {
        yes("contains(states.test.Output, \"WARN\")");
        yes("contains(states.test.Output, \"WARN\") and contains(inputs.name, 'A')");
        // Rewritten to `not a contains b`, which is `(not a) contains b`: AWF fails too.
        let m = fails("not contains(inputs.name, \"A\")");
        assert!(
            m.contains("read as `not inputs.name contains \"A\"`"),
            "{m}"
        );
        // The rewrite is blind; `contains` is an operator, never a function.
        let e = Expr::parse("contains(\"a,b\", \"b\")").unwrap_err();
        assert!(
            e.message.contains("read as `\"a contains b\", \"b\"`"),
            "{}",
            e.message
        );
        let e = Expr::parse("contains(inputs.name)").unwrap_err();
        assert!(
            e.message
                .contains("unexpected token `contains` at column 1"),
            "{}",
            e.message
        );
    }

    #[test]
    fn matches_regex() {
        yes("states.test.Output matches \"^WARN\"");
        yes("states.test.Output matches \"(?m)^line \\\\d$\"");
        yes("inputs.name matches \"(?i)^ada$\"");
        no("inputs.nope matches \"x\"");
        yes("\"abc\" matches \"b\" + \"c\"");
        let e = Expr::parse("inputs.name matches \"(\"").unwrap_err();
        assert!(e.message.contains("error parsing regexp"), "{}", e.message);
        assert!(fails("\"abc\" matches inputs.name + \"(\"").contains("error parsing regexp"));
    }

    #[test]
    fn in_operator() {
        yes("2 in [1, 2, 3]");
        yes("2.0 in [1, 2, 3]");
        yes("\"k\" in states.build.Response");
        no("\"zz\" in states.build.Response");
        yes("3 in states.build.Response.items");
        yes("inputs.mode in [\"full\", \"quick\"]");
        yes("inputs.mode not in [\"quick\"]");
        no("1 in inputs.nope");
        yes("\"build\" in states");
        // expr's optimizer: a literal list of strings is a set of strings.
        assert!(
            fails("inputs.flag in [\"true\", \"false\"]")
                .contains("value of type bool is not assignable to type string")
        );
        yes("inputs.nope in [\"\", \"x\"]");
        assert!(fails("1 in \"abc\"").contains("mismatched types"));
        assert!(fails("inputs.n in \"abc\"").contains("operator \"in\" not defined on string"));
    }

    #[test]
    fn coalesce_optional_chaining_and_ternary() {
        yes("(inputs.nope ?? \"d\") == \"d\"");
        yes("(inputs.mode ?? \"d\") == \"full\"");
        yes("states.never?.ExitCode == nil");
        yes("(states.never?.Response.k ?? 1) == 1");
        yes("states.build?.Response?.k == \"v\"");
        yes("states.build.Response?.[\"k\"] == \"v\"");
        yes("(inputs.n > 3 ? \"big\" : \"small\") == \"big\"");
        yes("(inputs.n > 9 ? \"big\" : inputs.n > 4 ? \"mid\" : \"small\") == \"mid\"");
        yes("inputs.flag ?: false");
        assert!(fails("inputs.n ? true : false").contains("interface {} is int, not bool"));
        assert!(fails("inputs.flag ? 1 : 2").contains("did not return a boolean, got int"));
        let e = Expr::parse("inputs.a ?? inputs.b == 1").unwrap_err();
        assert!(e.message.contains("cannot be mixed"), "{}", e.message);
    }

    #[test]
    fn member_paths_on_the_env() {
        yes("states.build.ExitCode == 0 and inputs.mode == \"full\"");
        yes("states[\"build\"][\"ExitCode\"] == 0");
        yes("states.build.Response.items[0] == 1 and states.build.Response.items[-1] == 3");
        yes("workflow.Name == \"wf\" and workflow.Duration == \"1.2s\"");
        yes("context.User == \"u\" and env.CI == \"true\"");
        yes("$env.inputs.n == 5");
        yes("states.build.Response.items[1:] == [2, 3]");
        yes("\"hello\"[1:3] == \"el\"");
        no("states.build.output == \"ok\\n\"");
        let e =
            Expr::parse("loop.Index == 2 and loop.Parent.Item == \"x\" and loop.First == false")
                .unwrap();
        assert!(e.eval_bool(&with_loop()).unwrap());
        assert!(fails("states.build.Response.items[5] == 1").contains("index out of range"));
    }

    #[test]
    fn nil_safety_follows_awf() {
        no("states.never.ExitCode == 0");
        no("states.never.ExitCode != 0");
        no("inputs.nope == \"x\"");
        yes("inputs.nope != \"x\"");
        no("inputs.nope > 5");
        no("inputs.nope + 1 > 2");
        no("env.NOPE > 5");
        let m = fails("5 < inputs.nope");
        assert!(m.contains("invalid operation: int < <nil>"), "{m}");
        let m = fails("loop.Index == 0");
        assert!(m.contains("cannot fetch Index from <nil>"), "{m}");
        assert!(fails("error.Message == \"\"").contains("cannot fetch Message"));
        // Any `cannot fetch` in an expression that mentions `states.` is false.
        no("loop.Index == 0 or states.build.ExitCode == 0");
        // A name on a string is an index that is no number: another message, an error.
        assert!(fails("states.build.Output.x == 1").contains("invalid operation: int(string)"));
        no("states.build.ExitCode.x == 1");
        // Not a nil on the left: an error.
        assert!(fails("-inputs.nope > 5").contains("invalid operation: - <nil>"));
        // A nil result is false (AsBool), another kind an error.
        no("inputs.nope");
        let m = fails("states.build.Output");
        assert!(m.contains("did not return a boolean, got string"), "{m}");
        assert!(fails("1 + 2").contains("did not return a boolean, got int"));
        // The filter reads the line where the error happened.
        let e = Expr::parse("states.build.ExitCode == 0 and\nloop.Index == 0").unwrap();
        assert!(e.eval_bool(&env()).is_err());
        let e = Expr::parse("inputs.mode == \"x\" or\nstates.never.ExitCode == 0").unwrap();
        assert_eq!(e.eval_bool(&env()), Ok(false));
    }

    #[test]
    fn empty_expression_is_an_error() {
        assert_eq!(Expr::parse("").unwrap_err().message, "empty expression");
        assert_eq!(Expr::parse("  \n").unwrap_err().message, "empty expression");
    }

    #[test]
    fn coerce_input_follows_awf() {
        assert_eq!(coerce_input("true"), json!(true));
        assert_eq!(coerce_input("True"), json!(true));
        assert_eq!(coerce_input("FALSE"), json!(false));
        assert_eq!(coerce_input("tRUE"), json!("tRUE"));
        assert_eq!(coerce_input("42"), json!(42));
        assert_eq!(coerce_input("-7"), json!(-7));
        assert_eq!(coerce_input("+7"), json!(7));
        assert_eq!(coerce_input("1.5"), json!(1.5));
        assert_eq!(coerce_input("1e3"), json!(1000.0));
        assert_eq!(coerce_input(".5"), json!(0.5));
        assert_eq!(coerce_input("99999999999999999999"), json!(1e20));
        assert_eq!(coerce_input("1e400"), json!("1e400"));
        assert_eq!(coerce_input("1_000"), json!("1_000"));
        assert_eq!(coerce_input("inf"), json!("inf"));
        assert_eq!(coerce_input(""), json!(""));
        assert_eq!(coerce_input(" 1"), json!(" 1"));
        assert_eq!(coerce_input("yes"), json!("yes"));
    }

    #[test]
    fn limits_are_enforced() {
        let long = format!("true{}", " ".repeat(MAX_EXPR_BYTES - 4));
        assert!(Expr::parse(&long).is_ok());
        let longer = format!("{long} ");
        let e = Expr::parse(&longer).unwrap_err();
        assert!(
            e.message.contains("over the limit of 4096 bytes"),
            "{}",
            e.message
        );

        let nest = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
        assert!(Expr::parse(&nest(MAX_DEPTH)).is_ok());
        let e = Expr::parse(&nest(MAX_DEPTH + 1)).unwrap_err();
        assert!(
            e.message.contains("nests deeper than 64 levels"),
            "{}",
            e.message
        );
        let e = Expr::parse(&format!("{}true", "!".repeat(MAX_DEPTH + 1))).unwrap_err();
        assert!(e.message.contains("nests deeper than 64"), "{}", e.message);
        let ors = vec!["false"; MAX_DEPTH + 2].join(" or ");
        assert!(
            Expr::parse(&ors)
                .unwrap_err()
                .message
                .contains("nests deeper")
        );
        let ors = vec!["false"; MAX_DEPTH + 1].join(" or ");
        assert_eq!(Expr::parse(&ors).unwrap().eval_bool(&env()), Ok(false));
        // `a ?: b` holds `a` twice: nesting it doubles the tree.
        let mut doubling = "inputs.flag".to_string();
        for _ in 0..20 {
            doubling = format!("({doubling} ?: true)");
        }
        let e = Expr::parse(&doubling).unwrap_err();
        assert!(e.message.contains("more than 10000 nodes"), "{}", e.message);

        let mut big = env();
        big["inputs"]["s"] = json!("x".repeat(600 * 1024));
        let e = Expr::parse("len(inputs.s + inputs.s) > 0").unwrap();
        let m = e.eval_bool(&big).unwrap_err().message;
        assert!(m.contains("over the limit"), "{m}");
        let e = Expr::parse("len(inputs.s + \"x\") > 0").unwrap();
        assert_eq!(e.eval_bool(&big), Ok(true));
        let e = Expr::parse("len(replace(inputs.s, \"x\", \"xx\")) > 0").unwrap();
        assert!(
            e.eval_bool(&big)
                .unwrap_err()
                .message
                .contains("over the limit")
        );
        // Many strings each under the limit: the evaluation's budget.
        let parts = vec!["inputs.s + \"y\""; 30].join(", ");
        let e = Expr::parse(&format!("len([{parts}]) > 0")).unwrap();
        let m = e.eval_bool(&big).unwrap_err().message;
        assert!(m.contains("builds more than"), "{m}");
    }

    #[test]
    fn syntax_errors_name_their_position() {
        let e = Expr::parse("states.x ==").unwrap_err();
        assert_eq!(
            e.message,
            "expression `states.x ==`: expected a value after `==` at column 10"
        );
        assert_eq!(e.offset, Some(9));
        let e = Expr::parse("inputs.a == \"x").unwrap_err();
        assert!(
            e.message.contains("literal not terminated at column 13"),
            "{}",
            e.message
        );
        let e = Expr::parse("inputs.a @ 1").unwrap_err();
        assert!(
            e.message
                .contains("unrecognized character: U+0040 '@' at column 10")
        );
        let e = Expr::parse("(inputs.a == 1").unwrap_err();
        assert!(e.message.contains("expected `)`"), "{}", e.message);
        let e = Expr::parse("inputs.a ==\n  == 2").unwrap_err();
        assert!(e.message.contains("at line 2, column 3"), "{}", e.message);
        let e = Expr::parse("{{.inputs.x}} == 'a'").unwrap_err();
        assert!(e.message.contains("column 2"), "{}", e.message);
        let e = Expr::parse("1 + * 2").unwrap_err();
        assert!(e.message.contains("expected a value after `+`, found `*`"));
        for unsupported in [
            "all(x, # > 1)",
            "x | len()",
            "1..3",
            "let a = 1; a",
            "a.b()",
        ] {
            let e = Expr::parse(unsupported).unwrap_err();
            assert!(
                e.message.contains("not supported"),
                "{unsupported}: {}",
                e.message
            );
        }
        let e = Expr::parse("12abc == 1").unwrap_err();
        assert!(e.message.contains("bad number syntax"), "{}", e.message);
        yes("0x1f == 31 and 0b101 == 5 and 0o17 == 15 and 1_000 == 1000 and .5 == 0.5");
        yes("1 == 1 // a comment");
        yes("/* a comment */ 1 == 1");
    }

    #[test]
    fn references_list_member_paths() {
        let e = Expr::parse(
            "states.build.ExitCode == 0 and inputs[\"mode\"] == 'x' or \
             len(states.test.Output) > 0 and states.build.ExitCode != 1 and \
             loop.Parent?.Index == 0 and states.build.Response.items[inputs.i].x",
        )
        .unwrap();
        let refs = e.references();
        let refs: Vec<Vec<&str>> = refs
            .iter()
            .map(|p| p.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(
            refs,
            vec![
                vec!["states", "build", "ExitCode"],
                vec!["inputs", "mode"],
                vec!["states", "test", "Output"],
                vec!["loop", "Parent", "Index"],
                vec!["states", "build", "Response", "items"],
                vec!["inputs", "i"],
            ]
        );
        let e = Expr::parse("contains(states.s.Output, inputs.x)").unwrap();
        assert_eq!(
            e.references(),
            vec![vec!["states", "s", "Output"], vec!["inputs", "x"]]
        );
    }

    #[test]
    fn transition_check_is_awfs_load_check() {
        let ok = |t: &str| Expr::parse(t).unwrap().check_transition();
        assert!(ok("states.build.ExitCode == 0 and inputs.mode == \"full\"").is_ok());
        // AWF's validator does not rewrite `contains(a, b)`: a syntax error at load.
        assert!(ok("contains(states.a.Output, \"x\")").is_err());
        assert!(ok("states.a.Output contains \"x\"").is_ok());
        assert!(ok("has_prefix(states.a.Output, \"x\")").is_ok());
        assert!(ok("inputs.n > 10 ? 'high' : 'low'").is_ok());
        let e = ok("trim(states.test.Output) startsWith \"WARN\"").unwrap_err();
        assert!(
            e.message.contains("unknown name trim at column 1"),
            "{}",
            e.message
        );
        assert!(ok("len(x) > 0").is_err());
        assert!(ok("1 + \"a\" == 2").is_err());
        // The same expressions evaluate (built-ins exist at run time).
        yes("trim(states.test.Output) startsWith \"WARN\"");
    }

    #[test]
    fn go_float_formatting() {
        for (f, s) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (100.0, "100"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (0.00001, "1e-05"),
            (f64::INFINITY, "+Inf"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
    }
}
