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
//! # Where each part lives
//! - `text`: errors, positions and the `contains(a, b)` rewrite; AWF's nil-safety filter;
//! - `lexer`: tokens;
//! - `parser`: the syntax tree and the grammar;
//! - `check`: what expr's checker finds before running (types of literals and results);
//! - `references`: the member paths an expression reads;
//! - `values`: values, their kinds, comparisons and Go's formatting;
//! - `eval`: evaluation and its semantics;
//! - `functions`: the functions an expression may call, one Rust function each.
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

mod check;
mod eval;
mod functions;
mod lexer;
mod parser;
mod references;
mod text;
mod values;

use check::*;
use eval::*;
use lexer::*;
use parser::*;
use references::*;
use text::*;
use values::*;

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

    /// Evaluates to a whole number, as AWF's `EvaluateInt` does: a float is cut to its
    /// whole part (a division by zero, an infinity, is an error), a bool or anything else
    /// is an error.
    pub fn eval_int(&self, env: &Value) -> Result<i64, ExprError> {
        let fail = |message: String| ExprError {
            message,
            offset: None,
        };
        let mut ev = Eval { env, built: 0 };
        match ev.eval(&self.root) {
            Ok(V::Int(i)) => Ok(i),
            Ok(V::Float(f)) if f.is_infinite() => Err(fail("division by zero".into())),
            Ok(V::Float(f)) if f.is_nan() => Err(fail("invalid arithmetic operation".into())),
            Ok(V::Float(f)) => Ok(f.trunc() as i64),
            Ok(V::Bool(_)) => Err(fail(
                "expression returned boolean, expected numeric value".into(),
            )),
            Ok(other) => Err(fail(format!(
                "expression did not return numeric value, got {}",
                other.kind()
            ))),
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

#[cfg(test)]
mod tests;
