//! Evaluation (expr's run time) over a JSON environment.
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

use super::*;

/// A run-time error (expr's panic message) and where.
pub(super) struct RtErr {
    pub(super) msg: String,
    pub(super) pos: usize,
}

pub(super) struct Eval<'a> {
    pub(super) env: &'a Value,
    /// Bytes built so far (strings, array elements).
    pub(super) built: usize,
}

impl<'a> Eval<'a> {
    pub(super) fn charge(&mut self, bytes: usize) -> Result<(), String> {
        self.built = self.built.saturating_add(bytes);
        if self.built > MAX_EVAL_BYTES {
            return Err(format!(
                "the expression builds more than {MAX_EVAL_BYTES} bytes"
            ));
        }
        Ok(())
    }

    /// A string an operation built.
    pub(super) fn built_str(&mut self, s: String, what: &str) -> Result<V<'a>, String> {
        if s.len() > MAX_STRING_BYTES {
            return Err(too_long(what, s.len()));
        }
        self.charge(s.len())?;
        Ok(V::Str(Cow::Owned(s)))
    }

    pub(super) fn eval(&mut self, n: &'a Node) -> Result<V<'a>, RtErr> {
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
                self.slice(obj, from.as_deref(), to.as_deref(), n.pos)?
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

    /// `obj[from:to]` of a list or a string; a negative index counts from the end.
    fn slice(
        &mut self,
        obj: &'a Node,
        from: Option<&'a Node>,
        to: Option<&'a Node>,
        pos: usize,
    ) -> Result<V<'a>, RtErr> {
        let at = |msg: String| RtErr { msg, pos };
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
                Ok(V::List(List::Own((a..b).map(|i| l.get(i)).collect())))
            }
            V::Str(s) => Ok(V::Str(match s {
                Cow::Borrowed(s) if s.is_char_boundary(a) && s.is_char_boundary(b) => {
                    Cow::Borrowed(&s[a..b])
                }
                s => Cow::Owned(String::from_utf8_lossy(&s.as_bytes()[a..b]).into_owned()),
            })),
            _ => Err(at(format!("cannot slice {from}"))),
        }
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
    pub(super) fn binary(
        &mut self,
        op: BinOp,
        l: &'a Node,
        r: &'a Node,
        pos: usize,
    ) -> Result<V<'a>, RtErr> {
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
