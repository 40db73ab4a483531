//! The static check (expr's checker): the natures known before running, and the type errors
//! between literals and known function results that are errors at every evaluation.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nat {
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
    pub(super) fn go(self) -> &'static str {
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

    pub(super) fn kind(self) -> &'static str {
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
pub(super) fn check(n: &Node, builtins: bool) -> Result<Nat, PErr> {
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
