//! What AWF's workflows say about where a run goes next and what runs around a state:
//! `transitions` (the first whose `when` holds picks the next state), `continue_on_error`,
//! `hooks` (a state's `pre`/`post`), and the loop and call state types `while` and
//! `call_workflow`. Expressions are kept as text here and read by [`super::expr`].

use std::time::Duration;

/// One `transitions` entry: `{when: EXPR, goto: STATE}`; without `when` it always matches.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub when: Option<String>,
    pub goto: String,
    pub line: usize,
}

/// One action of a hook: a log line or a shell command (templates in both).
#[derive(Debug, Clone, PartialEq)]
pub enum HookAction {
    Log(String),
    Command(String),
}

/// A state's `hooks: {pre: [...], post: [...]}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateHooks {
    pub pre: Vec<HookAction>,
    pub post: Vec<HookAction>,
}

/// The workflow's `hooks`: `workflow_start` (a failing action ends the run before any
/// state), `workflow_end` (after a success), `workflow_error` (after a failure, with
/// `{{.error.*}}`), `workflow_cancel` (after Ctrl-C, SIGTERM or a timeout).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkflowHooks {
    pub start: Vec<HookAction>,
    pub end: Vec<HookAction>,
    pub error: Vec<HookAction>,
    pub cancel: Vec<HookAction>,
}

/// `max_iterations` of a `while` or a `for_each`: a number, or a template giving one
/// (read once, before the first iteration): an input, a state's output, an environment
/// value, or arithmetic over them (`"{{.inputs.pages}} * 2"`), as AWF reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum MaxIterations {
    Fixed(usize),
    Template(String),
}

impl MaxIterations {
    /// The count a rendered template gives, in AWF's words when it gives none
    /// (`ResolveMaxIterations`): a whole number, or arithmetic (`+ - * / %`) evaluated,
    /// from 1 to [`super::MAX_ITERATIONS_LIMIT`].
    pub fn resolve(rendered: &str) -> Result<usize, String> {
        let text = rendered.trim();
        let value: i64 = match text.parse::<i64>() {
            Ok(n) => n,
            Err(_) if text.contains(['+', '-', '*', '/', '%']) => {
                let evaluated = if text.contains("++") {
                    Err("compile expression: invalid operator ++".to_string())
                } else if text.contains("**") {
                    Err("compile expression: invalid operator **".to_string())
                } else {
                    super::expr::Expr::parse(text)
                        .and_then(|e| e.eval_int(&serde_json::json!({})))
                        .map_err(|e| e.to_string())
                };
                evaluated.map_err(|e| {
                    format!("max_iterations expression {text:?} evaluation failed: {e}")
                })?
            }
            Err(_) => {
                return Err(format!(
                    "max_iterations value {text:?} is invalid: must be an integer"
                ));
            }
        };
        if value < 1 {
            return Err(format!("max_iterations value {value} must be at least 1"));
        }
        let limit = super::MAX_ITERATIONS_LIMIT;
        if value > limit as i64 {
            return Err(format!(
                "max_iterations value {value} exceeds maximum allowed limit of {limit}"
            ));
        }
        Ok(value as usize)
    }
}

/// A `while` state: its `body` states run in order while `while` holds (checked before
/// each iteration), until `break_when` holds (checked after each) or `max_iterations`.
#[derive(Debug, Clone, PartialEq)]
pub struct WhileState {
    pub condition: String,
    pub body: Vec<String>,
    pub max_iterations: MaxIterations,
    pub break_when: Option<String>,
    pub timeout: Option<Duration>,
    pub on_complete: Option<String>,
    pub on_failure: Option<String>,
}

/// A `call_workflow` state: another workflow run as part of this run (AWF's keys are flat
/// on the state: `workflow`, `inputs`, `timeout`).
#[derive(Debug, Clone, PartialEq)]
pub struct CallWorkflowState {
    /// As written: a path (relative to the calling workflow's directory) or a name.
    pub workflow: String,
    /// The child's inputs: name → template.
    pub inputs: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

/// How deep `call_workflow` may nest below the top workflow (AWF's limit).
pub const MAX_CALL_DEPTH: usize = 10;
/// A `call_workflow` state's timeout unless it sets one (AWF's default).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// An agent state's `conversation:` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conversation {
    /// The agent state whose session this one continues.
    pub continue_from: Option<String>,
}

/// A `type: operation` state: one operation of an installed plugin (`operation:
/// "plugin.op"`), called with `inputs` (templates in its strings) through the plugin host,
/// audited and traced as a tool call of the state.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationState {
    /// Empty when the name has no dot (refused when it runs, as AWF does).
    pub plugin: String,
    pub op: String,
    /// Where a builtin operation's requests may go (`network:`, Bash's syntax): absent,
    /// public addresses only.
    pub network: Option<crate::confine::Network>,
    /// A JSON object; its strings are templates.
    pub inputs: serde_json::Value,
    pub timeout: Option<Duration>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
}

/// AWF's own operation providers (`operation: http.request`), each with its operations:
/// part of the language, as AWF names them (`crate::operations` runs them).
pub const BUILTIN_OPERATIONS: &[(&str, &[&str])] = &[
    ("http", &["request"]),
    ("notify", &["send"]),
    (
        "github",
        &[
            "get_issue",
            "get_pr",
            "create_issue",
            "create_pr",
            "add_labels",
            "list_comments",
            "add_comment",
            "batch",
        ],
    ),
];

/// The operations of builtin provider `name`, when it is one.
pub fn builtin_operations(name: &str) -> Option<&'static [&'static str]> {
    BUILTIN_OPERATIONS
        .iter()
        .find(|(p, _)| *p == name)
        .map(|(_, ops)| *ops)
}
