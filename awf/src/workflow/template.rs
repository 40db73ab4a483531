//! The template subset of AWF's prompts and commands: `{{.inputs.x}}` and
//! `{{.states.s.Output}}` (also `.ExitCode` and `.Status`), spaces inside the braces allowed.
//! Anything else inside `{{ }}` is reported by validation rather than silently kept.

/// A reference inside `{{ }}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    Input(String),
    State(String, String),
}

/// Fields of a state a template may read.
pub const STATE_FIELDS: &[&str] = &["Output", "ExitCode", "Status"];

/// Every `{{ }}` of `text`: the reference, or the raw expression when it is not one.
pub fn refs(text: &str) -> Vec<Result<Ref, String>> {
    pieces(text)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Text(_) => None,
            Piece::Expr(e) => Some(parse_ref(e).ok_or_else(|| e.to_string())),
        })
        .collect()
}

/// Renders `text`, asking `lookup` for each reference; an expression that is not a
/// reference (validation reported it) is kept as written.
pub fn render(text: &str, lookup: &dyn Fn(&Ref) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    for p in pieces(text) {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Expr(e) => match parse_ref(e) {
                Some(r) => out.push_str(&lookup(&r)),
                None => {
                    out.push_str("{{");
                    out.push_str(e);
                    out.push_str("}}");
                }
            },
        }
    }
    out
}

enum Piece<'a> {
    Text(&'a str),
    Expr(&'a str),
}

fn pieces(mut text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    while let Some(start) = text.find("{{") {
        let Some(len) = text[start + 2..].find("}}") else {
            break;
        };
        if start > 0 {
            out.push(Piece::Text(&text[..start]));
        }
        out.push(Piece::Expr(&text[start + 2..start + 2 + len]));
        text = &text[start + 2 + len + 2..];
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

fn parse_ref(expr: &str) -> Option<Ref> {
    let e = expr.trim();
    let parts: Vec<&str> = e.strip_prefix('.')?.split('.').collect();
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    match parts.as_slice() {
        ["inputs", name] if ident(name) => Some(Ref::Input(name.to_string())),
        ["states", state, field] if ident(state) && ident(field) => {
            Some(Ref::State(state.to_string(), field.to_string()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_inputs_and_outputs() {
        let text = "fix {{.inputs.file}} using {{ .states.plan.Output }}; {{.bogus}}";
        let out = render(text, &|r| match r {
            Ref::Input(n) => format!("<{n}>"),
            Ref::State(s, f) => format!("[{s}.{f}]"),
        });
        assert_eq!(out, "fix <file> using [plan.Output]; {{.bogus}}");
        assert_eq!(
            refs(text),
            vec![
                Ok(Ref::Input("file".into())),
                Ok(Ref::State("plan".into(), "Output".into())),
                Err(".bogus".into())
            ]
        );
    }

    #[test]
    fn unclosed_braces_are_text() {
        assert_eq!(render("a {{ b", &|_| String::new()), "a {{ b");
    }
}
