//! The syntax tree and its parser (expr's `parser.go`, the same precedence climbing).
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

use super::*;

#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) kind: Kind,
    /// Byte offset of the token that made the node (an operator, a property name, ...).
    pub(super) pos: usize,
    /// 0 for a leaf.
    pub(super) depth: usize,
    /// Nodes in the tree, this one included (copies counted: `a ?: b` holds `a` twice).
    pub(super) size: usize,
}

#[derive(Debug, Clone)]
pub(super) enum Kind {
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
    pub(super) fn children(&self) -> Vec<&Node> {
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
pub(super) enum UnOp {
    Not,
    Neg,
    Plus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BinOp {
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

    pub(super) fn sym(self) -> &'static str {
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
pub(super) const EXPR_BUILTINS: &[&str] = &[
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

pub(super) fn parse_tree(src: &str, builtins_disabled: bool) -> Result<Node, PErr> {
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

pub(super) fn unsupported(what: &str, pos: usize) -> PErr {
    (format!("{what} are not supported"), pos)
}

pub(super) fn show(t: &Token) -> String {
    match &t.tok {
        Tok::Ident(s) | Tok::Num(s) | Tok::Op(s) => format!("`{s}`"),
        Tok::Str(_) => "a string".into(),
        Tok::Open(c) | Tok::Close(c) => format!("`{c}`"),
        Tok::Eof => "the end of the expression".into(),
    }
}

struct Parser<'t> {
    toks: &'t [Token],
    pub(super) i: usize,
    /// Nested `parse_expression` calls (bounded by [`MAX_DEPTH`]).
    frames: usize,
    /// AWF's validator: expr's built-ins are unknown names.
    builtins_disabled: bool,
}

impl Parser<'_> {
    pub(super) fn cur(&self) -> &Token {
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

    pub(super) fn unexpected(&self) -> PErr {
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

    pub(super) fn expect(&mut self, ok: bool, what: &str) -> Result<(), PErr> {
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
