//! Values: their kinds (expr's natures), equality and order across int and float, Go's `%v`
//! formatting, and the bytes an evaluation may build.

use super::*;

#[derive(Debug, Clone)]
pub(super) enum V<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    List(List<'a>),
    Map(MapV<'a>),
}

#[derive(Debug, Clone)]
pub(super) enum List<'a> {
    Json(&'a [Value]),
    Own(Vec<V<'a>>),
}

#[derive(Debug, Clone)]
pub(super) enum MapV<'a> {
    Json(&'a Map<String, Value>),
    Own(BTreeMap<String, V<'a>>),
}

pub(super) fn from_json(v: &Value) -> V<'_> {
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
    pub(super) fn len(&self) -> usize {
        match self {
            List::Json(a) => a.len(),
            List::Own(v) => v.len(),
        }
    }

    pub(super) fn get(&self, i: usize) -> V<'a> {
        match self {
            List::Json(a) => from_json(&a[i]),
            List::Own(v) => v[i].clone(),
        }
    }

    pub(super) fn items(&self) -> Box<dyn Iterator<Item = V<'a>> + '_> {
        match self {
            List::Json(a) => Box::new(a.iter().map(from_json)),
            List::Own(v) => Box::new(v.iter().cloned()),
        }
    }
}

impl<'a> MapV<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            MapV::Json(m) => m.len(),
            MapV::Own(m) => m.len(),
        }
    }

    pub(super) fn get(&self, k: &str) -> Option<V<'a>> {
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
    pub(super) fn is_nil(&self) -> bool {
        matches!(self, V::Nil)
    }

    /// Go's `%T`.
    pub(super) fn go_type(&self) -> &'static str {
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

    pub(super) fn kind(&self) -> &'static str {
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
pub(super) fn conv_err(v: &V, want: &str) -> String {
    let is = if v.is_nil() { "nil" } else { v.go_type() };
    format!("interface conversion: interface {{}} is {is}, not {want}")
}

pub(super) fn as_str<'v>(v: &'v V) -> Result<&'v str, String> {
    match v {
        V::Str(s) => Ok(s),
        o => Err(conv_err(o, "string")),
    }
}

pub(super) fn into_str(v: V<'_>) -> Result<Cow<'_, str>, String> {
    match v {
        V::Str(s) => Ok(s),
        o => Err(conv_err(&o, "string")),
    }
}

/// A part of `s` chosen by `f`, borrowed when `s` is.
pub(super) fn sub<'a>(s: Cow<'a, str>, f: impl for<'x> Fn(&'x str) -> &'x str) -> Cow<'a, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(f(b)),
        Cow::Owned(o) => Cow::Owned(f(&o).to_string()),
    }
}

/// expr's `ToInt`.
pub(super) fn to_int(v: &V) -> Result<i64, String> {
    match v {
        V::Int(i) => Ok(*i),
        V::Float(f) => Ok(*f as i64),
        o => Err(format!("invalid operation: int({})", o.go_type())),
    }
}

pub(super) fn to_float(v: &V) -> Result<f64, String> {
    match v {
        V::Int(i) => Ok(*i as f64),
        V::Float(f) => Ok(*f),
        o => Err(format!("invalid operation: float({})", o.go_type())),
    }
}

/// Go's `%v` of a float64 (`%g` with the shortest digits): an exponent below 1e-4 and from
/// 1e6 on (`1e+06`, `1.234567e+06`, `1e-05`), plain digits between.
pub(super) fn go_float(f: f64) -> String {
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

pub(super) fn too_long(what: &str, len: usize) -> String {
    format!("{what} would build a string of {len} bytes, over the limit of {MAX_STRING_BYTES}")
}

/// Go's `%v` of `v` into `out`, refused past [`MAX_STRING_BYTES`].
pub(super) fn sprint(v: &V, out: &mut String, depth: usize) -> Result<(), String> {
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
pub(super) fn equal(a: &V, b: &V) -> Result<bool, String> {
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

pub(super) fn map_index_err(v: &V) -> String {
    format!(
        "reflect.Value.MapIndex: value of type {} is not assignable to type string",
        v.go_type()
    )
}

/// expr's `runtime.Fetch`: `o[k]`, `o.k`.
pub(super) fn fetch<'a>(o: V<'a>, k: &V<'a>) -> Result<V<'a>, String> {
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
pub(super) fn in_op(needle: &V, hay: &V) -> Result<bool, String> {
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

pub(super) fn compare(op: BinOp, a: &V, b: &V) -> Result<bool, String> {
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
pub(super) fn arith<'a>(op: BinOp, a: &V<'a>, b: &V<'a>) -> Result<V<'a>, String> {
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
pub(super) fn go_split<'x>(s: &'x str, sep: &str, n: i64) -> Vec<&'x str> {
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
pub(super) fn map_case(s: &str, upper: bool) -> String {
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
