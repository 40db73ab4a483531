//! The functions an expression may call, one Rust function each; [`Eval::call`] finds
//! the one a name calls.
//!
//! Functions: `len` (characters of a string, elements, keys), `upper`, `lower`, `trim(s[,
//! cutset])`, `trimPrefix(s[, p])`, `trimSuffix(s[, p])` (default ` `), `split(s, sep[, n])`,
//! `int`, `float`, `string` (Go's `%v`), `abs`, `type`, `ceil`, `floor`, `round`,
//! `hasPrefix`, `hasSuffix`, `indexOf`, `lastIndexOf` (byte offsets), `replace(s, old, new[,
//! n])`, `join(list[, glue])`, and AWF's `has_prefix(s, p)` and `has_suffix(s, p)`. Any other
//! expr built-in is an error when called ("not supported"), as is an unknown function.

use super::*;

/// One call: its name as written, its arguments, and the evaluation it charges what it
/// builds to.
pub(super) struct Call<'e, 'a> {
    eval: &'e mut Eval<'a>,
    name: &'e str,
    args: Vec<V<'a>>,
}

type Function = for<'e, 'a> fn(&mut Call<'e, 'a>) -> Result<V<'a>, String>;

impl<'a> Eval<'a> {
    /// Calls the function `name` with `args`; an expr built-in this module does not have is
    /// "not supported", any other name unknown.
    pub(super) fn call(&mut self, name: &str, args: Vec<V<'a>>) -> Result<V<'a>, String> {
        let f: Function = match name {
            "len" => len,
            "upper" | "lower" => case,
            "trim" => trim,
            "trimPrefix" | "trimSuffix" => trim_affix,
            "split" => split,
            "int" => int,
            "float" => float,
            "string" => string,
            "abs" => abs,
            "type" => type_name,
            "ceil" | "floor" | "round" => rounded,
            "hasPrefix" | "hasSuffix" | "has_prefix" | "has_suffix" => has_affix,
            "indexOf" | "lastIndexOf" => index_of,
            "replace" => replace,
            "join" => join,
            _ if EXPR_BUILTINS.contains(&name) => {
                return Err(format!("function {name} is not supported"));
            }
            _ => return Err(format!("unknown function {name}")),
        };
        f(&mut Call {
            eval: self,
            name,
            args,
        })
    }
}

impl<'a> Call<'_, 'a> {
    /// At least `min` and at most `max` arguments, as expr counts them.
    fn arity(&self, min: usize, max: usize) -> Result<(), String> {
        let (n, name) = (self.args.len(), self.name);
        if n < min || n > max {
            return Err(format!(
                "invalid number of arguments for {name} (expected {min}{}, got {n})",
                if max > min {
                    format!(" to {max}")
                } else {
                    String::new()
                }
            ));
        }
        Ok(())
    }

    fn invalid(&self, v: &V) -> String {
        format!("invalid argument for {} (type {})", self.name, v.go_type())
    }

    /// The string argument `i`, or `default` when there is none.
    fn opt_str(&self, i: usize, default: &'static str) -> Result<String, String> {
        self.args
            .get(i)
            .map_or(Ok(default.to_string()), |v| as_str(v).map(str::to_string))
    }

    /// The first argument, taken (the call owns its arguments).
    fn take_first(&mut self) -> V<'a> {
        self.args.swap_remove(0)
    }
}

/// `len(x)`: the characters of a string, the elements of an array, the keys of a map.
fn len<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(V::Int(match &c.args[0] {
        V::Str(s) => s.chars().count(),
        V::List(l) => l.len(),
        V::Map(m) => m.len(),
        o => return Err(c.invalid(o)),
    } as i64))
}

/// `upper(s)`, `lower(s)`.
fn case<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    let s = map_case(as_str(&c.args[0])?, c.name == "upper");
    c.eval.built_str(s, c.name)
}

/// `trim(s[, cutset])`: white space, or the characters of `cutset`, at both ends.
fn trim<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 2)?;
    let whole = c.args.len() == 1;
    let cut = c.opt_str(1, "")?;
    let s = into_str(c.take_first())?;
    Ok(V::Str(if whole {
        sub(s, str::trim)
    } else {
        sub(s, |x| x.trim_matches(|ch| cut.contains(ch)))
    }))
}

/// `trimPrefix(s[, p])`, `trimSuffix(s[, p])` (`p` is a space by default).
fn trim_affix<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 2)?;
    let p = c.opt_str(1, " ")?;
    let prefix = c.name == "trimPrefix";
    let s = into_str(c.take_first())?;
    Ok(V::Str(if prefix {
        sub(s, |x| x.strip_prefix(p.as_str()).unwrap_or(x))
    } else {
        sub(s, |x| x.strip_suffix(p.as_str()).unwrap_or(x))
    }))
}

/// `split(s, sep[, n])`, as Go's `strings.SplitN`.
fn split<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(2, 3)?;
    let limit = match c.args.get(2) {
        Some(v) => to_int(v)?,
        None => -1,
    };
    let sep = as_str(&c.args[1])?.to_string();
    let s = into_str(c.take_first())?;
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
    c.eval.charge(pieces.len() * ELEMENT_COST)?;
    Ok(V::List(List::Own(pieces)))
}

/// `int(x)`: a number truncated, or a string parsed.
fn int<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(match &c.args[0] {
        V::Str(s) => V::Int(
            s.parse()
                .map_err(|_| format!("invalid operation: int({})", clip(s, 100)))?,
        ),
        V::Nil => return Err("reflect: call of reflect.Value.Type on zero Value".into()),
        v => V::Int(to_int(v)?),
    })
}

/// `float(x)`: a number, or a string parsed as Go parses it.
fn float<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(match &c.args[0] {
        V::Str(s) => V::Float(
            go_parse_float(s)
                .ok_or_else(|| format!("invalid operation: float({})", clip(s, 100)))?,
        ),
        v => V::Float(to_float(v)?),
    })
}

/// `string(x)`: Go's `%v` of any value.
fn string<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    match c.take_first() {
        s @ V::Str(_) => Ok(s),
        v => {
            let mut out = String::new();
            sprint(&v, &mut out, 0)?;
            c.eval.built_str(out, c.name)
        }
    }
}

/// `abs(x)` (an integer's wraps, as in Go).
fn abs<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(match &c.args[0] {
        V::Int(i) => V::Int(i.wrapping_abs()),
        V::Float(f) => V::Float(if *f < 0.0 { -f } else { *f }),
        o => return Err(c.invalid(o)),
    })
}

/// `type(x)`: expr's name of its kind.
fn type_name<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(V::Str(Cow::Borrowed(c.args[0].kind())))
}

/// `ceil(x)`, `floor(x)`, `round(x)`: always a float.
fn rounded<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 1)?;
    Ok(V::Float(match &c.args[0] {
        V::Int(i) => *i as f64,
        V::Float(f) => match c.name {
            "ceil" => f.ceil(),
            "floor" => f.floor(),
            _ => f.round(),
        },
        o => return Err(c.invalid(o)),
    }))
}

/// `hasPrefix(s, p)`, `hasSuffix(s, p)` and AWF's `has_prefix`, `has_suffix`.
fn has_affix<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(2, 2)?;
    let (s, p) = (as_str(&c.args[0])?, as_str(&c.args[1])?);
    Ok(V::Bool(if c.name.contains("refix") {
        s.starts_with(p)
    } else {
        s.ends_with(p)
    }))
}

/// `indexOf(s, p)`, `lastIndexOf(s, p)`: byte offsets, -1 when absent.
fn index_of<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(2, 2)?;
    let (s, p) = (as_str(&c.args[0])?, as_str(&c.args[1])?);
    let found = if c.name == "indexOf" {
        s.find(p)
    } else {
        s.rfind(p)
    };
    Ok(V::Int(found.map_or(-1, |i| i as i64)))
}

/// `replace(s, old, new[, n])`: the first `n` (all when negative or absent), within the
/// bound of a built string, checked before building it.
fn replace<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(3, 4)?;
    let limit = match c.args.get(3) {
        Some(v) => to_int(v)?,
        None => -1,
    };
    let (s, old, new) = (
        as_str(&c.args[0])?,
        as_str(&c.args[1])?,
        as_str(&c.args[2])?,
    );
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
        return Err(too_long(c.name, len));
    }
    let out = if limit < 0 {
        s.replace(old, new)
    } else {
        s.replacen(old, new, count)
    };
    c.eval.built_str(out, c.name)
}

/// `join(list[, glue])`: a list of strings.
fn join<'a>(c: &mut Call<'_, 'a>) -> Result<V<'a>, String> {
    c.arity(1, 2)?;
    let glue = c.opt_str(1, "")?;
    let V::List(l) = &c.args[0] else {
        return Err(format!(
            "invalid argument for join (type {})",
            c.args[0].go_type()
        ));
    };
    let mut out = String::new();
    for (k, item) in l.items().enumerate() {
        let s = as_str(&item)?;
        let more = s.len() + if k > 0 { glue.len() } else { 0 };
        if out.len() + more > MAX_STRING_BYTES {
            return Err(too_long(c.name, out.len() + more));
        }
        if k > 0 {
            out.push_str(&glue);
        }
        out.push_str(s);
    }
    c.eval.built_str(out, c.name)
}
