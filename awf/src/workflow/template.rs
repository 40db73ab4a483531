//! The template subset of AWF's prompts and commands: `{{.inputs.x}}` and
//! `{{.states.s.Output}}` (also `.ExitCode` and `.Status`), with or without the leading dot
//! as AWF takes them (`{{inputs.x}}`), spaces inside the braces allowed,
//! and one filter, `{{.inputs.x | raw}}`. Anything else inside `{{ }}` is reported by
//! validation rather than silently kept.
//!
//! Prompts, `dir` and messages get values verbatim ([`render`]). A `step` command is shell
//! text, so there a value is never pasted: [`render_command`] writes a reference to an
//! environment variable (`AWF_VALUE_1`, `AWF_VALUE_2`, ... per command) that the caller
//! sets on the shell to the value (a large one through a file the shell reads, see
//! `run::step`), and the shell never parses a value. How the reference
//! is written depends on where the template stands in the command ([`Quoting`]), so that
//! `echo {{x}}`, `echo "{{x}}"` and `echo '{{x}}'` all print the value as one word.
//! `| raw` pastes the value into the command as shell text instead, for the rare command
//! that must be built from a trusted value.

/// A reference inside `{{ }}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ref {
    Input(String),
    State(String, String),
    /// `{{.loop.FIELD}}` in an iteration of a for_each or a while.
    Loop(String),
    /// `{{.env.NAME}}`: awf's own environment variable (empty when unset).
    Env(String),
    /// `{{.workflow.FIELD}}`: ID (the run id), Name, CurrentState, StartedAt, Duration.
    Workflow(String),
    /// `{{.context.FIELD}}`: WorkingDir, User, Hostname.
    Context(String),
    /// `{{.error.FIELD}}` in a `workflow_error` hook: Message, State, Type, ExitCode.
    Error(String),
}

/// One `{{ }}` expression: what it reads and whether it is pasted raw into a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub reference: Ref,
    pub raw: bool,
}

/// Why a `{{ }}` expression is not one this module renders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprError {
    /// The text inside the braces (before any filter) is no reference.
    NotAReference(String),
    /// A filter other than `raw`; the whole expression and the filter's name.
    UnknownFilter { expr: String, filter: String },
}

/// Fields of a state a template may read (AWF's `ValidStateProperties`): its output and
/// stderr, exit code and status; an agent's tokens (used, input, output, and whether they
/// are estimated); its output parsed as JSON (`JSON`, and `Response` when it is an object).
pub const STATE_FIELDS: &[&str] = &[
    "Output",
    "Stderr",
    "ExitCode",
    "Status",
    "Response",
    "TokensUsed",
    "TokensInput",
    "TokensOutput",
    "TokensEstimated",
    "JSON",
];

/// The field a lower-case (or snake case) spelling means, which AWF refuses naming it
/// (`output` → `Output`; its `lowercaseToUppercase` tables).
pub fn field_spelled_in_lower_case(field: &str) -> Option<&'static str> {
    Some(match field {
        "output" => "Output",
        "stderr" => "Stderr",
        "exit_code" | "exitcode" => "ExitCode",
        "status" => "Status",
        "response" => "Response",
        "tokens" | "tokensused" | "tokens_used" => "TokensUsed",
        "tokensinput" | "tokens_input" => "TokensInput",
        "tokensoutput" | "tokens_output" => "TokensOutput",
        "tokensestimated" | "tokens_estimated" => "TokensEstimated",
        "json" => "JSON",
        "message" => "Message",
        "state" => "State",
        "type" => "Type",
        "working_dir" | "workingdir" => "WorkingDir",
        "user" => "User",
        "hostname" => "Hostname",
        "id" => "ID",
        "name" => "Name",
        "current_state" => "CurrentState",
        "started_at" => "StartedAt",
        "duration" => "Duration",
        _ => return None,
    })
}
/// What `{{.loop.FIELD}}` may name.
pub const LOOP_FIELDS: &[&str] = &["Item", "Index", "Index1", "First", "Last", "Length"];
/// What `{{.workflow.*}}` gives.
pub const WORKFLOW_FIELDS: &[&str] = &["ID", "Name", "CurrentState", "StartedAt", "Duration"];
/// What `{{.context.*}}` gives.
pub const CONTEXT_FIELDS: &[&str] = &["WorkingDir", "User", "Hostname"];
/// What `{{.error.*}}` gives (in a `workflow_error` hook only).
pub const ERROR_FIELDS: &[&str] = &["Message", "State", "Type", "ExitCode"];

/// Prefix of the environment variables that carry values into a step command.
pub const VALUE_VAR_PREFIX: &str = "AWF_VALUE_";

/// Every `{{ }}` of `text`, parsed.
pub fn refs(text: &str) -> Vec<Result<Expr, ExprError>> {
    pieces(text)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Text(_) => None,
            Piece::Expr(e) => Some(parse_expr(e)),
        })
        .collect()
}

/// Renders `text` with each value verbatim (`raw` or not), asking `lookup` for each
/// reference; an expression that is not one (validation reported it) is kept as written.
pub fn render(text: &str, lookup: &dyn Fn(&Ref) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    for p in pieces(text) {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Expr(e) => match parse_expr(e) {
                Ok(x) => out.push_str(&lookup(&x.reference)),
                Err(_) => keep(&mut out, e),
            },
        }
    }
    out
}

/// A `step` command ready for `/bin/sh -c`: the text, and the variables to set on the
/// shell's environment (name, value), one per template that is not `raw`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCommand {
    pub text: String,
    pub env: Vec<(String, String)>,
}

/// Renders a shell command: each template becomes a reference to a variable of
/// [`ShellCommand::env`] written for its [`Quoting`]; `raw` ones are pasted as they are.
/// Err when a template stands where no reference can be written safely (see
/// [`command_problems`], which validation reports beforehand).
pub fn render_command(text: &str, lookup: &dyn Fn(&Ref) -> String) -> Result<ShellCommand, String> {
    if let Some(p) = command_problems(text).into_iter().next() {
        return Err(p.message());
    }
    let mut cmd = ShellCommand {
        text: String::with_capacity(text.len()),
        env: Vec::new(),
    };
    let mut scanner = ShellScanner::default();
    for p in pieces(text) {
        match p {
            Piece::Text(t) => {
                scanner.feed(t);
                cmd.text.push_str(t);
            }
            Piece::Expr(e) => match parse_expr(e) {
                Ok(x) if x.raw => cmd.text.push_str(&lookup(&x.reference)),
                Ok(x) => {
                    let name = format!("{VALUE_VAR_PREFIX}{}", cmd.env.len() + 1);
                    cmd.text.push_str(&match scanner.quoting() {
                        Quoting::Double => format!("${{{name}}}"),
                        Quoting::Single => format!("'\"${{{name}}}\"'"),
                        // The others were refused above; unquoted is the safe form anyway.
                        _ => format!("\"${{{name}}}\""),
                    });
                    cmd.env.push((name, lookup(&x.reference)));
                    scanner.after_template();
                }
                Err(_) => keep(&mut cmd.text, e),
            },
        }
    }
    Ok(cmd)
}

/// A template of a command that stands where its value cannot be passed safely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandProblem {
    /// The expression as written inside the braces.
    pub expr: String,
    pub quoting: Quoting,
}

impl CommandProblem {
    pub fn message(&self) -> String {
        let e = format!("{{{{{}}}}}", self.expr);
        match self.quoting {
            Quoting::AfterBackslash => {
                format!("{e} follows a backslash in the command, which would escape the value")
            }
            _ => format!(
                "{e} stands inside shell arithmetic in the command ($((...)), $[...], ((...)) \
                 or let, at any depth), where the shell would evaluate the value as \
                 arithmetic (and bash runs commands found in it)"
            ),
        }
    }

    pub fn hint(&self) -> String {
        match self.quoting {
            Quoting::AfterBackslash => {
                "remove the backslash: the value reaches the command as one word already".into()
            }
            _ => "assign the value to a variable and check it first, e.g. \
                  n={{.inputs.n}}; case $n in ''|*[!0-9]*) exit 1;; esac; echo $((n + 1))"
                .into(),
        }
    }
}

/// The templates of a shell command (not `raw` ones) that stand after a backslash or in
/// an arithmetic expansion.
pub fn command_problems(text: &str) -> Vec<CommandProblem> {
    let mut out = Vec::new();
    let mut scanner = ShellScanner::default();
    for p in pieces(text) {
        match p {
            Piece::Text(t) => scanner.feed(t),
            Piece::Expr(e) => {
                if let Ok(x) = parse_expr(e)
                    && !x.raw
                {
                    let quoting = scanner.quoting();
                    if matches!(quoting, Quoting::AfterBackslash | Quoting::Arithmetic) {
                        out.push(CommandProblem {
                            expr: e.to_string(),
                            quoting,
                        });
                    }
                    scanner.after_template();
                }
            }
        }
    }
    out
}

/// Where a position of a shell command stands, as far as writing a value there goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoting {
    /// Outside quotes (also at the top of `$(...)` and backticks, and in a comment).
    Unquoted,
    /// Inside `"..."`.
    Double,
    /// Inside `'...'`.
    Single,
    /// Right after a backslash that escapes the next character.
    AfterBackslash,
    /// Inside `$((...))`, `$[...]`, `((...))` or the arguments of `let`, at any depth.
    Arithmetic,
}

/// A small scanner of POSIX shell quoting, fed the command text around the templates: it
/// follows single and double quotes, backslash escapes, comments, `$(...)`, `$((...))` and
/// backticks (each opens a new unquoted level, closed by its parenthesis or backtick).
/// It knows nothing of here-documents, `case` patterns inside `$(...)` or `${...}`
/// nesting. A wrong guess cannot make the shell parse a value as code, since a value only
/// ever arrives by parameter expansion; at worst it is split into words or shown with
/// quotes. (What evaluates an expansion again — `eval`, `sh -c`, bash's `(( ))`, `$[ ]`,
/// `[[ -eq ]]` — is the command's own doing; arithmetic is recognised: `$((...))`,
/// `$[...]`, `((...))` and `let`, at any depth of nesting.)
#[derive(Debug)]
struct ShellScanner {
    /// The innermost level is the last; the command itself is the first.
    levels: Vec<Level>,
    escaped: bool,
    in_comment: bool,
    /// True where a `#` would start a comment.
    word_start: bool,
}

impl Default for ShellScanner {
    fn default() -> Self {
        ShellScanner {
            levels: vec![Level {
                quote: Quote::None,
                kind: LevelKind::Command,
                in_let: false,
            }],
            escaped: false,
            in_comment: false,
            word_start: true,
        }
    }
}

#[derive(Debug)]
struct Level {
    quote: Quote,
    kind: LevelKind,
    /// The arguments of a `let` command, up to the end of that command.
    in_let: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Double,
    Single,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LevelKind {
    Command,
    /// `$(`: open parentheses not yet closed.
    Substitution(usize),
    /// `$((` or `((`: open parentheses not yet closed (two for the opening).
    Arithmetic(usize),
    /// `$[`: open brackets not yet closed.
    ArithBracket(usize),
    Backtick,
}

impl ShellScanner {
    fn level(&mut self) -> &mut Level {
        self.levels
            .last_mut()
            .expect("the command level is never popped")
    }

    fn quoting(&self) -> Quoting {
        let level = self
            .levels
            .last()
            .expect("the command level is never popped");
        // Whatever the quoting inside it, a value within arithmetic is evaluated.
        let arithmetic = self.levels.iter().any(|l| {
            l.in_let
                || matches!(
                    l.kind,
                    LevelKind::Arithmetic(_) | LevelKind::ArithBracket(_)
                )
        });
        if self.escaped {
            Quoting::AfterBackslash
        } else if self.in_comment {
            Quoting::Unquoted
        } else if arithmetic {
            Quoting::Arithmetic
        } else {
            match (level.quote, level.kind) {
                (Quote::Single, _) => Quoting::Single,
                (Quote::Double, _) => Quoting::Double,
                (Quote::None, LevelKind::Arithmetic(_)) => Quoting::Arithmetic,
                (Quote::None, _) => Quoting::Unquoted,
            }
        }
    }

    /// A template was written at the current position: it is part of a word.
    fn after_template(&mut self) {
        self.escaped = false;
        self.word_start = false;
    }

    fn open(&mut self, kind: LevelKind) {
        self.levels.push(Level {
            quote: Quote::None,
            kind,
            in_let: false,
        });
    }

    fn feed(&mut self, text: &str) {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if self.in_comment {
                self.in_comment = c != '\n';
                self.word_start = true;
                continue;
            }
            if self.escaped {
                self.escaped = false;
                self.word_start = false;
                continue;
            }
            let quote = self.level().quote;
            // Where a word may start next: after a blank or an operator, outside quotes.
            let mut word_start = false;
            match (quote, c) {
                (Quote::Single, '\'') => self.level().quote = Quote::None,
                (Quote::Single, _) => {}
                (_, '\\') => self.escaped = true,
                (Quote::Double, '"') => self.level().quote = Quote::None,
                (Quote::None, '"') => self.level().quote = Quote::Double,
                (Quote::None, '\'') => self.level().quote = Quote::Single,
                (Quote::None, '`') if self.level().kind == LevelKind::Backtick => {
                    self.levels.pop();
                }
                (_, '`') => {
                    self.open(LevelKind::Backtick);
                    word_start = true;
                }
                (_, '$') if chars.peek() == Some(&'[') => {
                    chars.next();
                    self.open(LevelKind::ArithBracket(1));
                    word_start = true;
                }
                (Quote::None, '[' | ']')
                    if matches!(self.level().kind, LevelKind::ArithBracket(_)) =>
                {
                    self.count_bracket(c)
                }
                // `((` where a command starts: bash's arithmetic command.
                (Quote::None, '(') if self.word_start && chars.peek() == Some(&'(') => {
                    chars.next();
                    self.open(LevelKind::Arithmetic(2));
                    word_start = true;
                }
                // `let` as a command word: its arguments are arithmetic.
                (Quote::None, 'l') if self.word_start && let_follows(&chars) => {
                    chars.next();
                    chars.next();
                    self.level().in_let = true;
                }
                (_, '$') if chars.peek() == Some(&'(') => {
                    chars.next();
                    if chars.peek() == Some(&'(') {
                        chars.next();
                        self.open(LevelKind::Arithmetic(2));
                    } else {
                        self.open(LevelKind::Substitution(1));
                    }
                    word_start = true;
                }
                (Quote::None, '(' | ')') => {
                    word_start = true;
                    self.count_paren(c);
                }
                (Quote::None, '#') if self.word_start => self.in_comment = true,
                (Quote::None, _) => {
                    // The end of a command ends a `let`.
                    if ";&|\n".contains(c) {
                        self.level().in_let = false;
                    }
                    word_start = c.is_whitespace() || ";&|<>".contains(c)
                }
                (Quote::Double, _) => {}
            }
            self.word_start = word_start;
        }
    }

    /// `[` or `]` within `$[`: one more bracket open, or one fewer; the last one closes it.
    fn count_bracket(&mut self, c: char) {
        if let LevelKind::ArithBracket(n) = &mut self.level().kind {
            if c == '[' {
                *n += 1;
            } else {
                *n -= 1;
                if *n == 0 {
                    self.levels.pop();
                }
            }
        }
    }

    /// `(` or `)` within `$(` or `((`: one more open, or one fewer; the last one closes it.
    fn count_paren(&mut self, c: char) {
        if let LevelKind::Substitution(n) | LevelKind::Arithmetic(n) = &mut self.level().kind {
            if c == '(' {
                *n += 1;
            } else {
                *n -= 1;
                if *n == 0 {
                    self.levels.pop();
                }
            }
        }
    }
}

/// True when `et` and a blank come next: the `l` just read starts the word `let`.
fn let_follows(chars: &std::iter::Peekable<std::str::Chars>) -> bool {
    let ahead: String = chars.clone().take(3).collect();
    ahead.len() == 3 && ahead.starts_with("et") && ahead.ends_with(char::is_whitespace)
}

fn keep(out: &mut String, expr: &str) {
    out.push_str("{{");
    out.push_str(expr);
    out.push_str("}}");
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

/// `REF ( | FILTER )*`, the pipeline syntax of Go templates, where the only filter is `raw`.
fn parse_expr(expr: &str) -> Result<Expr, ExprError> {
    let mut parts = expr.split('|');
    let reference = parts
        .next()
        .and_then(parse_ref)
        .ok_or_else(|| ExprError::NotAReference(expr.to_string()))?;
    let mut raw = false;
    for filter in parts.map(str::trim) {
        if filter != "raw" {
            return Err(ExprError::UnknownFilter {
                expr: expr.to_string(),
                filter: filter.to_string(),
            });
        }
        raw = true;
    }
    Ok(Expr { reference, raw })
}

fn parse_ref(expr: &str) -> Option<Ref> {
    let e = expr.trim();
    // AWF accepts both spellings, `{{.inputs.x}}` and `{{inputs.x}}` (the more common).
    let parts: Vec<&str> = e.strip_prefix('.').unwrap_or(e).split('.').collect();
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    match parts.as_slice() {
        ["inputs", name] if ident(name) => Some(Ref::Input(name.to_string())),
        ["loop", field] if ident(field) => Some(Ref::Loop(field.to_string())),
        ["env", name] if ident(name) => Some(Ref::Env(name.to_string())),
        ["workflow", field] if ident(field) => Some(Ref::Workflow(field.to_string())),
        ["context", field] if ident(field) => Some(Ref::Context(field.to_string())),
        ["error", field] if ident(field) => Some(Ref::Error(field.to_string())),
        ["states", state, field] if ident(state) && ident(field) => {
            Some(Ref::State(state.to_string(), field.to_string()))
        }
        // Into a state's parsed output, as AWF's templates go into a map:
        // `{{.states.issue.Response.title}}` (the field is `Response.title`).
        ["states", state, field @ ("Response" | "JSON"), rest @ ..]
            if ident(state) && rest.iter().all(|p| ident(p)) =>
        {
            Some(Ref::State(
                state.to_string(),
                std::iter::once(*field)
                    .chain(rest.iter().copied())
                    .collect::<Vec<_>>()
                    .join("."),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(r: Ref) -> Result<Expr, ExprError> {
        Ok(Expr {
            reference: r,
            raw: false,
        })
    }

    #[test]
    fn renders_inputs_and_outputs() {
        let text = "fix {{.inputs.file}} using {{ .states.plan.Output }}; {{.bogus}}";
        let out = render(text, &|r| match r {
            Ref::Input(n) => format!("<{n}>"),
            Ref::State(s, f) => format!("[{s}.{f}]"),
            Ref::Loop(f) => format!("({f})"),
            other => format!("{other:?}"),
        });
        assert_eq!(out, "fix <file> using [plan.Output]; {{.bogus}}");
        assert_eq!(
            refs(text),
            vec![
                plain(Ref::Input("file".into())),
                plain(Ref::State("plan".into(), "Output".into())),
                Err(ExprError::NotAReference(".bogus".into()))
            ]
        );
    }

    #[test]
    fn the_leading_dot_is_optional_as_in_awf() {
        assert_eq!(
            refs("{{inputs.file}} {{ states.plan.Output }} {{loop.Index1}} {{inputs.x | raw}}"),
            vec![
                plain(Ref::Input("file".into())),
                plain(Ref::State("plan".into(), "Output".into())),
                plain(Ref::Loop("Index1".into())),
                Ok(Expr {
                    reference: Ref::Input("x".into()),
                    raw: true
                }),
            ]
        );
        assert_eq!(
            refs("{{bogus}} {{plan.Output}}"),
            vec![
                Err(ExprError::NotAReference("bogus".into())),
                Err(ExprError::NotAReference("plan.Output".into()))
            ]
        );
    }

    #[test]
    fn unclosed_braces_are_text() {
        assert_eq!(render("a {{ b", &|_| String::new()), "a {{ b");
    }

    #[test]
    fn raw_is_the_only_filter() {
        assert_eq!(
            refs("{{.inputs.x | raw}} {{ .states.s.Output|raw }} {{.inputs.x | upper}}"),
            vec![
                Ok(Expr {
                    reference: Ref::Input("x".into()),
                    raw: true
                }),
                Ok(Expr {
                    reference: Ref::State("s".into(), "Output".into()),
                    raw: true
                }),
                Err(ExprError::UnknownFilter {
                    expr: ".inputs.x | upper".into(),
                    filter: "upper".into()
                }),
            ]
        );
        // Outside commands a raw value is the value, as any other.
        assert_eq!(
            render("a {{.inputs.x | raw}}", &|_| "$(v)".into()),
            "a $(v)"
        );
    }

    /// The command as `/bin/sh -c` gets it, with each value named by its input.
    fn shell(text: &str) -> ShellCommand {
        render_command(text, &|r| match r {
            Ref::Input(n) => format!("<{n}>"),
            Ref::State(s, f) => format!("[{s}.{f}]"),
            Ref::Loop(f) => format!("({f})"),
            other => format!("{other:?}"),
        })
        .unwrap()
    }

    fn quoting_of(text: &str) -> Vec<Quoting> {
        let mut scanner = ShellScanner::default();
        let mut out = Vec::new();
        for p in pieces(text) {
            match p {
                Piece::Text(t) => scanner.feed(t),
                Piece::Expr(_) => {
                    out.push(scanner.quoting());
                    scanner.after_template();
                }
            }
        }
        out
    }

    #[test]
    fn each_template_becomes_a_variable_reference_for_its_quote_context() {
        let c = shell("echo {{.inputs.a}} \"b {{.inputs.b}}\" 'c {{.states.s.Output}}'");
        assert_eq!(
            c.text,
            "echo \"${AWF_VALUE_1}\" \"b ${AWF_VALUE_2}\" 'c '\"${AWF_VALUE_3}\"''"
        );
        assert_eq!(
            c.env,
            [
                ("AWF_VALUE_1".to_string(), "<a>".to_string()),
                ("AWF_VALUE_2".to_string(), "<b>".to_string()),
                ("AWF_VALUE_3".to_string(), "[s.Output]".to_string()),
            ]
        );
    }

    #[test]
    fn raw_templates_are_pasted_and_take_no_number() {
        let c = shell("{{.inputs.a | raw}} {{.inputs.b}}");
        assert_eq!(c.text, "<a> \"${AWF_VALUE_1}\"");
        assert_eq!(c.env, [("AWF_VALUE_1".to_string(), "<b>".to_string())]);
    }

    #[test]
    fn the_scanner_follows_quotes_escapes_and_comments() {
        use Quoting::*;
        let t = "{{.inputs.x}}";
        let cases: &[(String, Vec<Quoting>)] = &[
            (format!("echo {t}"), vec![Unquoted]),
            (
                format!("echo \"{t}\" '{t}' {t}"),
                vec![Double, Single, Unquoted],
            ),
            // A quote of the other kind is a plain character.
            (format!("echo \"it's {t}\" {t}"), vec![Double, Unquoted]),
            (format!("echo 'say \"hi\" {t}' {t}"), vec![Single, Unquoted]),
            // Backslash escapes outside quotes and inside double quotes, not inside single.
            (format!("echo \\' {t}"), vec![Unquoted]),
            (format!("echo \"a \\\" {t}\""), vec![Double]),
            (format!("echo 'a\\' {t}"), vec![Unquoted]),
            (format!("echo \\{t}"), vec![AfterBackslash]),
            // A comment's quotes do not count; `#` inside a word is no comment.
            (format!("# don't {t}\necho '{t}'"), vec![Unquoted, Single]),
            (format!("echo a#b '{t}'"), vec![Single]),
            (format!("echo x;# it's\necho '{t}'"), vec![Single]),
        ];
        for (text, want) in cases {
            assert_eq!(&quoting_of(text), want, "{text}");
        }
    }

    #[test]
    fn the_scanner_opens_an_unquoted_level_in_substitutions_and_backticks() {
        use Quoting::*;
        let t = "{{.inputs.x}}";
        let cases: &[(String, Vec<Quoting>)] = &[
            (format!("echo \"$(echo {t}) {t}\""), vec![Unquoted, Double]),
            (format!("echo \"`echo {t}` {t}\""), vec![Unquoted, Double]),
            (format!("echo '$(' {t}"), vec![Unquoted]),
            (
                format!("echo $(echo \"(\" {t}) '{t}'"),
                vec![Unquoted, Single],
            ),
            (
                format!("echo \"$( (cd /; echo '{t}') ) {t}\""),
                vec![Single, Double],
            ),
            (format!("echo \"$(echo \"{t}\")\""), vec![Double]),
            (format!("echo `echo '{t}'` {t}"), vec![Single, Unquoted]),
            (
                format!("echo $(( {t} + 1 )) {t}"),
                vec![Arithmetic, Unquoted],
            ),
            (format!("echo $(( ({t}) )) '{t}'"), vec![Arithmetic, Single]),
        ];
        for (text, want) in cases {
            assert_eq!(&quoting_of(text), want, "{text}");
        }
    }

    #[test]
    fn a_template_anywhere_inside_arithmetic_is_a_problem() {
        let t = "{{.inputs.x}}";
        for cmd in [
            format!("echo $(( $(echo {t}) + 1 ))"),
            format!("echo $(( `echo {t}` + 1 ))"),
            format!("echo $(( \"$(echo \"{t}\")\" + 1 ))"),
            format!("echo $[ {t} + 1 ]"),
            format!("echo $[ $(echo {t}) ]"),
            format!("(( {t} > 1 )) && echo big"),
            format!("if (( $(echo {t}) )); then :; fi"),
            format!("let n={t}+1"),
            format!("true; let \"n = $(echo {t})\""),
        ] {
            let p = command_problems(&cmd);
            assert_eq!(p.len(), 1, "{cmd}: {p:?}");
            assert_eq!(p[0].quoting, Quoting::Arithmetic, "{cmd}");
        }
        // Not arithmetic: a subshell, a word starting with let, the command after a let.
        for cmd in [
            format!("( (echo {t}) )"),
            format!("letter {t}"),
            format!("let n=1; echo {t}"),
            format!("echo $(echo {t}) [x]"),
        ] {
            assert!(command_problems(&cmd).is_empty(), "{cmd}");
        }
    }

    /// What the refusal prevents, shown with bash: the value inside nested arithmetic
    /// runs a command. `render_command` refuses to render it.
    #[test]
    fn nested_arithmetic_would_run_the_value_under_bash_and_is_refused() {
        if !std::path::Path::new("/bin/bash").exists() {
            return;
        }
        let tmp = tempfile::Builder::new()
            .prefix("awf-arith-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let value = "x[$(touch PWNED)]";
        let ran = std::process::Command::new("/bin/bash")
            .arg("-c")
            .arg("x=0; echo $(( $(echo \"$V\") + 1 ))")
            .env("V", value)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(dir.join("PWNED").exists(), "bash evaluated it: {ran:?}");
        let e = render_command("echo $(( $(echo {{.inputs.x}}) + 1 ))", &|_| value.into());
        assert!(e.is_err());
    }

    #[test]
    fn templates_after_a_backslash_or_in_arithmetic_are_problems() {
        let p = command_problems(
            "echo \\{{.inputs.a}} $(( {{ .inputs.b }} )) $(( {{.inputs.c|raw}} ))",
        );
        assert_eq!(
            p,
            [
                CommandProblem {
                    expr: ".inputs.a".into(),
                    quoting: Quoting::AfterBackslash
                },
                CommandProblem {
                    expr: " .inputs.b ".into(),
                    quoting: Quoting::Arithmetic
                },
            ]
        );
        assert!(
            p[1].message().contains("{{ .inputs.b }}"),
            "{}",
            p[1].message()
        );
        assert!(render_command("echo \\{{.inputs.a}}", &|_| String::new()).is_err());
    }

    /// The real shell prints hostile values literally, in every context.
    #[test]
    fn the_shell_never_parses_a_value() {
        let hostile = [
            "$(echo PWNED)",
            "`echo PWNED`",
            "; echo PWNED",
            "ok\"; echo PWNED; echo \"",
            "it's'; echo PWNED; '",
            "a\\\" b\\\\ \n* ${HOME} $((1+1))",
        ];
        let commands = [
            ("printf %s {{.inputs.x}}", ""),
            ("printf %s \"<{{.inputs.x}}>\"", "<>"),
            ("printf %s '<{{.inputs.x}}>'", "<>"),
            ("printf %s \"$(printf %s {{.inputs.x}})\"", ""),
            ("printf %s \"`printf %s '{{.inputs.x}}'`\"", ""),
        ];
        // Under bash too, which evaluates arithmetic more eagerly than a POSIX sh.
        let shells: Vec<&str> = ["/bin/sh", "/bin/bash"]
            .into_iter()
            .filter(|s| std::path::Path::new(s).exists())
            .collect();
        for (value, shell) in hostile
            .iter()
            .flat_map(|v| shells.iter().map(move |s| (*v, *s)))
        {
            for (command, around) in commands {
                let c = render_command(command, &|_| value.to_string()).unwrap();
                let out = std::process::Command::new(shell)
                    .arg("-c")
                    .arg(&c.text)
                    .envs(c.env.iter().map(|(k, v)| (k, v)))
                    .output()
                    .unwrap();
                let want = if around.is_empty() {
                    value.to_string()
                } else {
                    format!("<{value}>")
                };
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    // Command substitution drops trailing newlines; none of these ends in one.
                    want,
                    "{shell}: {command} with {value:?} as {:?}: {}",
                    c.text,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}
