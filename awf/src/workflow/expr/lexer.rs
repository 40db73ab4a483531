//! The lexer: tokens of expr's language (numbers in every base, the three kinds of string
//! literal and their escapes, operators, comments).

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Op(String),
    Open(char),
    Close(char),
    Eof,
}

#[derive(Debug, Clone)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) pos: usize,
}

/// A message and a byte offset.
pub(super) type PErr = (String, usize);

fn is_alpha(c: char) -> bool {
    c == '_' || c == '$' || c.is_alphabetic()
}

fn is_alnum(c: char) -> bool {
    is_alpha(c) || c.is_numeric()
}

pub(super) fn is_identifier(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(is_alpha) && cs.all(is_alnum)
}

pub(super) fn lex(src: &str) -> Result<Vec<Token>, PErr> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = src[i..].chars().next() {
        let start = i;
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if let Some(end) = comment_end(src, i)? {
            i = end;
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
                let (word, end) = lex_word(src, i);
                i = end;
                word
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

/// The end of a comment (`//`, `/* */`) starting at `i`; an unclosed `/*` is an error.
fn comment_end(src: &str, i: usize) -> Result<Option<usize>, PErr> {
    let b = src.as_bytes();
    if b.get(i) != Some(&b'/') {
        return Ok(None);
    }
    match b.get(i + 1) {
        Some(b'/') => Ok(Some(src[i..].find('\n').map_or(src.len(), |k| i + k + 1))),
        Some(b'*') => match src[i + 2..].find("*/") {
            Some(k) => Ok(Some(i + 2 + k + 2)),
            None => Err(("unclosed comment".into(), i)),
        },
        _ => Ok(None),
    }
}

/// The word at `start` (a keyword operator such as `not`, or a name) and its end.
fn lex_word(src: &str, start: usize) -> (Tok, usize) {
    let end = start
        + src[start..]
            .find(|c: char| !is_alnum(c))
            .unwrap_or(src.len() - start);
    let word = &src[start..end];
    let tok = match word {
        "not" | "in" | "or" | "and" | "matches" | "contains" | "startsWith" | "endsWith"
        | "let" | "if" | "else" => Tok::Op(word.to_string()),
        _ => Tok::Ident(word.to_string()),
    };
    (tok, end)
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
