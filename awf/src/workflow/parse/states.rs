//! `states:`: the initial state and every named state, read by its `type` (agent, step,
//! parallel, for_each, terminal) with the keys that type allows. An agent's `mcp_proxy`
//! block is read in `proxy`, its `budget` here, and the `retry` of a step or an agent here
//! too.

use super::context::{Ctx, join};
use super::mcp_proxy::parse_proxy;
use crate::error::codes;
use crate::workflow::retry::{MAX_ATTEMPTS_LIMIT, RetryOn};
use crate::workflow::yaml::{Kind, Node};
use crate::workflow::{
    AgentState, Backoff, CallWorkflowState, Conversation, DEFAULT_MAX_ITERATIONS, ForEachState,
    HookAction, MAX_ITERATIONS_LIMIT, MaxIterations, McpProxy, ParallelState, Prompt, Retry, State,
    StateHooks, StateKind, StepState, Strategy, TerminalState, TerminalStatus, Transition,
    WhileState,
};
use serde_json::{Map, Value};
use std::path::Path;

const AGENT_KEYS: &[&str] = &[
    "type",
    "description",
    "provider",
    "prompt",
    "prompt_file",
    "options",
    "timeout",
    "mcp_proxy",
    "budget",
    "telemetry",
    "retry",
    "on_success",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
    "conversation",
    "system_prompt",
    "mode",
    "resume",
];
const PARALLEL_KEYS: &[&str] = &[
    "type",
    "description",
    "parallel",
    "strategy",
    "max_concurrent",
    "timeout",
    "on_success",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
];
const FOR_EACH_KEYS: &[&str] = &[
    "type",
    "description",
    "items",
    "body",
    "max_iterations",
    "max_concurrent",
    "timeout",
    "on_complete",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
    "break_when",
];
const STEP_KEYS: &[&str] = &[
    "type",
    "description",
    "command",
    "dir",
    "timeout",
    "retry",
    "mcp_proxy",
    "on_success",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
    "script_file",
];
const RETRY_KEYS: &[&str] = &[
    "max_attempts",
    "initial_delay",
    "max_delay",
    "backoff",
    "multiplier",
    "jitter",
    "retryable_exit_codes",
    "on",
];
const WHILE_KEYS: &[&str] = &[
    "type",
    "description",
    "while",
    "body",
    "max_iterations",
    "break_when",
    "timeout",
    "on_complete",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
];
const CALL_KEYS: &[&str] = &[
    "type",
    "description",
    "workflow",
    "inputs",
    "outputs",
    "timeout",
    "on_success",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
    "call_workflow",
];
const OPERATION_KEYS: &[&str] = &[
    "type",
    "description",
    "operation",
    "network",
    "inputs",
    "operation_inputs",
    "timeout",
    "on_success",
    "on_failure",
    "transitions",
    "continue_on_error",
    "hooks",
    "capture",
    "depends_on",
    "env",
];
/// State keys AWF's docs and workflows write and AWF ignores (it reads states leniently),
/// with the way to get what they meant.
const AWF_IGNORED_STATE_KEYS: &[(&str, &str)] = &[
    (
        "pre_hook",
        "AWF ignores it too: write `hooks: {pre: [{command: ...}]}`",
    ),
    (
        "post_hook",
        "AWF ignores it too: write `hooks: {post: [{command: ...}]}`",
    ),
    (
        "when",
        "AWF ignores a state's `when` too: choose the next state with `transitions: [{when: \
         EXPR, goto: STATE}]` on the state before",
    ),
    (
        "outputs",
        "AWF ignores a state's `outputs` too; read its output with {{.states.NAME.Output}}",
    ),
    (
        "operation",
        "AWF ignores `operation` on this type of state too: use `type: operation`",
    ),
    (
        "model",
        "AWF ignores a state's `model` too: write `options: {model: haiku}`",
    ),
    (
        "max_tokens",
        "AWF ignores a state's `max_tokens` too: give it in `options` when the provider takes \
         one",
    ),
    (
        "loop",
        "AWF ignores a state's `loop` block too (older syntax: the command runs once); \
         iterate with `type: for_each` (`items`, `body`) or `type: while`",
    ),
];
const TERMINAL_KEYS: &[&str] = &["type", "description", "status", "message", "mcp_proxy"];

pub(super) fn parse_states(
    cx: &mut Ctx,
    node: &Node,
    wf_dir: &Path,
) -> (String, usize, Vec<State>) {
    let Some(fields) = cx.fields(node, "states", &[], codes::UNKNOWN_KEY) else {
        return (String::new(), node.line, Vec::new());
    };
    let mut initial = None;
    let mut initial_line = node.line;
    let mut states = Vec::new();
    for (key, n) in fields {
        let path = join("states", key);
        if key == "initial" {
            initial = cx.string(n, &path);
            initial_line = n.line;
            continue;
        }
        match parse_state(cx, key, n, &path, wf_dir) {
            Some(s) => states.push(s),
            None => cx.unparsed_states.push(key.to_string()),
        }
    }
    let initial = match initial {
        Some(i) => i,
        None => {
            cx.push(
                codes::MISSING_INITIAL,
                "states.initial",
                node.line,
                "the workflow has no initial state".into(),
                format!(
                    "add `initial: <state>` under states{}",
                    states
                        .first()
                        .map(|s| format!(", e.g. `initial: {}`", s.name))
                        .unwrap_or_default()
                ),
            );
            String::new()
        }
    };
    (initial, initial_line, states)
}

fn parse_state(cx: &mut Ctx, name: &str, node: &Node, path: &str, wf_dir: &Path) -> Option<State> {
    let ty = state_type(cx, name, node, path)?;
    let (allowed, ignored) = state_keys(cx, name, path, ty)?;
    let fields = cx.fields(node, path, &allowed, codes::UNKNOWN_KEY)?;
    warn_awf_ignored_keys(cx, name, path, &ignored, &fields);
    let mut state = StateMap {
        name,
        path,
        node,
        ty: ty.as_str().unwrap_or(""),
        wf_dir,
        fields,
        timeout: None,
    };
    state.timeout = state
        .get("timeout")
        .and_then(|v| cx.timeout(v, &join(path, "timeout")));
    let get = |k: &str| state.get(k);
    let mcp_proxy = get("mcp_proxy").and_then(|v| parse_proxy(cx, v, &join(path, "mcp_proxy")));
    check_proxy_on_agent_only(cx, name, ty, mcp_proxy.as_ref());
    let kind = match ty.as_str() {
        Some("agent") => parse_agent(cx, &state, mcp_proxy)?,
        Some("for_each") => parse_for_each(cx, &state)?,
        Some("parallel") => parse_parallel(cx, &state)?,
        Some("step") | Some("command") => parse_step(cx, &state)?,
        Some("while") => parse_while_state(cx, &state)?,
        Some("operation") => parse_operation(cx, &state)?,
        Some("call_workflow") => parse_call_workflow(cx, &state)?,
        _ => parse_terminal(cx, &state)?,
    };
    warn_unused_common_keys(cx, &state);
    let transitions = get("transitions")
        .map(|t| parse_transitions(cx, t, &join(path, "transitions")))
        .unwrap_or_default();
    let continue_on_error = get("continue_on_error")
        .and_then(|v| cx.boolean(v, &join(path, "continue_on_error"), codes::WRONG_TYPE))
        .unwrap_or(false);
    let hooks = get("hooks")
        .map(|h| parse_state_hooks(cx, h, &join(path, "hooks")))
        .unwrap_or_default();
    Some(State {
        name: name.to_string(),
        line: node.line,
        field_lines: state
            .fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.line))
            .collect(),
        kind,
        transitions,
        continue_on_error,
        hooks,
    })
}

/// The state's `type` node. None when the state is not a map or has no `type` (reported).
fn state_type<'a>(cx: &mut Ctx, name: &str, node: &'a Node, path: &str) -> Option<&'a Node> {
    let Kind::Map(_) = &node.kind else {
        cx.fields(node, path, &[], codes::UNKNOWN_KEY);
        return None;
    };
    let ty = match &node.kind {
        Kind::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.as_str() == Some("type"))
            .map(|(_, v)| v),
        _ => None,
    };
    let Some(ty) = ty else {
        cx.push(
            codes::MISSING_FIELD,
            &join(path, "type"),
            node.line,
            format!("state {name:?} has no `type`"),
            "add `type: agent`, `type: step`, `type: parallel`, `type: for_each` or `type: terminal`",
        );
        return None;
    };
    Some(ty)
}

/// A warning for each key of `ignored` the state writes: AWF ignores it, and so do we.
fn warn_awf_ignored_keys(
    cx: &mut Ctx,
    name: &str,
    path: &str,
    ignored: &[&str],
    fields: &[(&str, &Node)],
) {
    for (key, hint) in AWF_IGNORED_STATE_KEYS {
        if !ignored.contains(key) {
            continue;
        }
        if let Some((_, v)) = fields.iter().find(|(k, _)| k == key) {
            cx.warn(
                codes::NO_EFFECT,
                &join(path, key),
                v.line,
                format!("`{key}` of state {name:?} has no effect"),
                *hint,
            );
        }
    }
}

/// An error when an enabled `mcp_proxy` sits on a state that is not an agent.
fn check_proxy_on_agent_only(cx: &mut Ctx, name: &str, ty: &Node, mcp_proxy: Option<&McpProxy>) {
    if let Some(p) = mcp_proxy
        && p.enable
        && ty.as_str() != Some("agent")
    {
        cx.push(
            codes::UNSUPPORTED_PROVIDER,
            &p.path,
            p.line,
            format!(
                "state {name:?} is a {} state: only agent states can use mcp_proxy",
                ty.as_str().unwrap_or("")
            ),
            "remove mcp_proxy from this state, or make it an agent state",
        );
    }
}

/// A warning for each of `capture`, `depends_on` and `env`: parsed, never used.
fn warn_unused_common_keys(cx: &mut Ctx, state: &StateMap) {
    let (name, path) = (state.name, state.path);
    for (key, hint) in [
        (
            "capture",
            "AWF parses it and does not use it either; read a state's output with \
             {{.states.NAME.Output}}",
        ),
        (
            "depends_on",
            "AWF parses it and does not use it either; the order comes from the transitions",
        ),
        (
            "env",
            "AWF ignores a state's env too; set variables in the command (`X=1 cmd`) or \
             read awf's own with {{.env.NAME}}",
        ),
    ] {
        if let Some(v) = state.get(key) {
            cx.warn(
                codes::NO_EFFECT,
                &join(path, key),
                v.line,
                format!("`{key}` of state {name:?} has no effect"),
                hint,
            );
        }
    }
}

/// The keys a state of type `ty` takes, and among them the keys AWF's docs and workflows
/// write on such a state that AWF itself ignores (accepted with a warning, so that such a
/// workflow runs here too); None for an unknown type (reported).
fn state_keys(
    cx: &mut Ctx,
    name: &str,
    path: &str,
    ty: &Node,
) -> Option<(Vec<&'static str>, Vec<&'static str>)> {
    let allowed = match ty.as_str() {
        Some("agent") => AGENT_KEYS,
        // AWF takes `command` as another name of `step`.
        Some("step") | Some("command") => STEP_KEYS,
        Some("while") => WHILE_KEYS,
        Some("call_workflow") => CALL_KEYS,
        Some("operation") => OPERATION_KEYS,
        Some("terminal") => TERMINAL_KEYS,
        Some("parallel") => PARALLEL_KEYS,
        Some("for_each") => FOR_EACH_KEYS,
        _ => {
            const TYPES: &[&str] = &[
                "agent",
                "step",
                "parallel",
                "for_each",
                "while",
                "call_workflow",
                "operation",
                "terminal",
            ];
            let near = ty
                .as_str()
                .and_then(|t| super::context::closest(t, TYPES))
                .map(|t| format!("did you mean `{t}`? "))
                .unwrap_or_default();
            cx.push(
                codes::INVALID_VALUE,
                &join(path, "type"),
                ty.line,
                format!("state {name:?} has the unknown type {}", ty.describe()),
                format!("{near}the types are {}", TYPES.join(", ")),
            );
            return None;
        }
    };
    let ty_name = ty.as_str().unwrap_or("");
    let ignored: Vec<&str> = AWF_IGNORED_STATE_KEYS
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| ty_name != "terminal" && !allowed.contains(k))
        .filter(|k| !(*k == "operation" && ty_name == "operation"))
        .filter(|k| !(*k == "outputs" && ty_name == "call_workflow"))
        .collect();
    let allowed: Vec<&str> = allowed
        .iter()
        .copied()
        .chain(ignored.iter().copied())
        .collect();
    Some((allowed, ignored))
}

/// A state's map as the parser of its type reads it: its name, where it is, its type and
/// fields, and the `timeout` every type but `terminal` takes.
struct StateMap<'a> {
    name: &'a str,
    path: &'a str,
    node: &'a Node,
    ty: &'a str,
    wf_dir: &'a Path,
    fields: Vec<(&'a str, &'a Node)>,
    timeout: Option<std::time::Duration>,
}

impl<'a> StateMap<'a> {
    fn get(&self, k: &str) -> Option<&'a Node> {
        self.fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    /// `k` as a string, when it is there.
    fn str_field(&self, cx: &mut Ctx, k: &str) -> Option<String> {
        self.get(k).and_then(|v| cx.string(v, &join(self.path, k)))
    }

    /// `k` as a string; its absence is an error with `hint`.
    fn require(&self, cx: &mut Ctx, k: &str, hint: &str) -> Option<String> {
        match self.get(k) {
            Some(v) => cx.string(v, &join(self.path, k)),
            None => {
                cx.push(
                    codes::MISSING_FIELD,
                    &join(self.path, k),
                    self.node.line,
                    format!("{} state {:?} has no `{k}`", self.ty, self.name),
                    hint,
                );
                None
            }
        }
    }
}

/// What a `agent` state takes beyond the keys every state has.
fn parse_agent(cx: &mut Ctx, state: &StateMap, mcp_proxy: Option<McpProxy>) -> Option<StateKind> {
    let path = state.path;
    let provider = state.require(
        cx,
        "provider",
        "add `provider: claude` (or gemini, codex, opencode, openai_compatible)",
    );
    let prompt = agent_prompt(cx, state);
    let options = agent_options(cx, state);
    let interactive = agent_interactive(cx, state);
    let budget = state
        .get("budget")
        .and_then(|b| parse_budget(cx, b, &join(path, "budget")));
    let model_content = state.get("telemetry").is_some_and(|t| {
        let tpath = join(path, "telemetry");
        cx.fields(t, &tpath, &["model_content"], codes::UNKNOWN_KEY)
            .and_then(|f| f.into_iter().find(|(k, _)| *k == "model_content"))
            .and_then(|(_, v)| cx.boolean(v, &join(&tpath, "model_content"), codes::WRONG_TYPE))
            .unwrap_or(false)
    });
    Some(StateKind::Agent(Box::new(AgentState {
        provider: provider.unwrap_or_default(),
        prompt: prompt.unwrap_or(Prompt::Inline(String::new())),
        options,
        timeout: state.timeout,
        mcp_proxy,
        budget,
        model_content,
        retry: state
            .get("retry")
            .and_then(|r| parse_retry(cx, r, &join(path, "retry"), true)),
        conversation: state
            .get("conversation")
            .map(|c| agent_conversation(cx, c, path)),
        system_prompt: state.str_field(cx, "system_prompt"),
        interactive,
        resume_continue: agent_resume_continue(cx, state),
        on_success: state.str_field(cx, "on_success"),
        on_failure: state.str_field(cx, "on_failure"),
    })))
}

/// An agent's prompt: `prompt` inline or `prompt_file` beside the workflow, exactly one.
fn agent_prompt(cx: &mut Ctx, state: &StateMap) -> Option<Prompt> {
    let (name, path, node) = (state.name, state.path, state.node);
    match (state.get("prompt"), state.get("prompt_file")) {
        (Some(p), None) => cx.string(p, &join(path, "prompt")).map(Prompt::Inline),
        (None, Some(f)) => cx
            .string(f, &join(path, "prompt_file"))
            .map(|f| Prompt::File(state.wf_dir.join(f))),
        (Some(_), Some(f)) => {
            cx.push(
                codes::INVALID_VALUE,
                &join(path, "prompt_file"),
                f.line,
                format!("state {name:?} has both `prompt` and `prompt_file`"),
                "keep one of them",
            );
            None
        }
        (None, None) => {
            cx.push(
                codes::MISSING_FIELD,
                &join(path, "prompt"),
                node.line,
                format!("agent state {name:?} has no `prompt`"),
                "add `prompt: ...` or `prompt_file: FILE`",
            );
            None
        }
    }
}

/// An agent's `options`: any keys (the provider checks them), as a JSON map.
fn agent_options(cx: &mut Ctx, state: &StateMap) -> Map<String, Value> {
    match state.get("options") {
        None => Map::new(),
        Some(o) if o.is_null() => Map::new(),
        Some(o) => {
            // Options are provider-specific: any keys, checked by the provider.
            cx.fields(o, &join(state.path, "options"), &[], codes::UNKNOWN_KEY);
            match o.to_json() {
                Value::Object(m) => m,
                _ => Map::new(),
            }
        }
    }
}

/// Whether an agent's `mode` is `conversation` (which takes `prompt`, not `prompt_file`).
fn agent_interactive(cx: &mut Ctx, state: &StateMap) -> bool {
    let (name, path) = (state.name, state.path);
    match state.get("mode") {
        None => false,
        Some(m) => match m.as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("single") => false,
            Some("conversation") => {
                if state.get("prompt_file").is_some() {
                    cx.push(
                        codes::INVALID_VALUE,
                        &join(path, "prompt_file"),
                        m.line,
                        format!(
                            "agent state {name:?} in mode: conversation takes `prompt`, \
                             not `prompt_file` (as AWF)"
                        ),
                        "write the first turn in `prompt`",
                    );
                }
                true
            }
            _ => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, "mode"),
                    m.line,
                    format!("mode {} is not known", m.describe()),
                    "use single (the default) or conversation",
                );
                false
            }
        },
    }
}

/// An agent's `conversation:` block, `c`; it takes `continue_from` alone.
fn agent_conversation(cx: &mut Ctx, c: &Node, path: &str) -> Conversation {
    let cpath = join(path, "conversation");
    if c.is_null() {
        return Conversation::default();
    }
    let fields = cx
        .fields(c, &cpath, &["continue_from"], codes::UNKNOWN_KEY)
        .unwrap_or_default();
    Conversation {
        continue_from: fields
            .iter()
            .find(|(k, _)| *k == "continue_from")
            .and_then(|(_, v)| cx.string(v, &join(&cpath, "continue_from"))),
    }
}

/// Whether an agent's `resume` is `continue` (the default is `restart`).
fn agent_resume_continue(cx: &mut Ctx, state: &StateMap) -> bool {
    match state.get("resume") {
        None => false,
        Some(v) => match v.as_str() {
            Some("continue") => true,
            Some("restart") => false,
            _ => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(state.path, "resume"),
                    v.line,
                    format!("resume {} is not known", v.describe()),
                    "use restart (the default: a state that was running starts a \
                     fresh session on `awf resume`) or continue (its CLI session goes on)",
                );
                false
            }
        },
    }
}

/// What a `for_each` state takes beyond the keys every state has.
fn parse_for_each(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, node, timeout) = (state.name, state.path, state.node, state.timeout);
    let bpath = join(path, "body");
    let mut body = Vec::new();
    match state.get("body").map(|n| (n, &n.kind)) {
        Some((_, Kind::Seq(items))) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if let Some(b) = cx.string(item, &format!("{bpath}[{i}]")) {
                    body.push(b);
                }
            }
        }
        other => cx.push(
            codes::MISSING_FIELD,
            &bpath,
            other.map_or(node.line, |(n, _)| n.line),
            format!("for_each state {name:?} has no body"),
            "list the states each iteration runs: `body: [review_one]`",
        ),
    }
    let items = match state.get("items") {
        Some(v) if matches!(v.kind, Kind::Seq(_)) => Some(v.to_json().to_string()),
        Some(v) => cx.string(v, &join(path, "items")),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                &join(path, "items"),
                node.line,
                format!("for_each state {name:?} has no items"),
                "write `items: [a, b]`, `items: '[\"a\", \"b\"]'` or a template giving \
                 a JSON list: `items: \"{{.states.list.Output}}\"`",
            );
            None
        }
    };
    let count = |cx: &mut Ctx, key: &str, max: usize, default: usize, example: &str| {
        state.get(key).map_or(default, |v| {
            match v.as_str().and_then(|s| s.parse::<usize>().ok()) {
                Some(n) if (1..=max).contains(&n) => n,
                _ => {
                    cx.push(
                        codes::INVALID_VALUE,
                        &join(path, key),
                        v.line,
                        format!(
                            "{key} must be a whole number from 1 to {max}, found {}",
                            v.describe()
                        ),
                        example,
                    );
                    default
                }
            }
        })
    };
    let max_iterations = max_iterations(cx, state.get("max_iterations"), path);
    let max_concurrent = count(
        cx,
        "max_concurrent",
        MAX_ITERATIONS_LIMIT,
        1,
        "write e.g. `max_concurrent: 4` (the default 1 runs iterations one after another)",
    );
    expression(cx, state.get("break_when"), &join(path, "break_when"));
    Some(StateKind::ForEach(ForEachState {
        break_when: state.str_field(cx, "break_when"),
        items: items.unwrap_or_default(),
        body,
        max_iterations,
        max_concurrent,
        timeout,
        on_complete: state.str_field(cx, "on_complete"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `parallel` state takes beyond the keys every state has.
fn parse_parallel(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, node, timeout) = (state.name, state.path, state.node, state.timeout);
    let ppath = join(path, "parallel");
    let mut branches = Vec::new();
    match state.get("parallel").map(|n| (n, &n.kind)) {
        Some((_, Kind::Seq(items))) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if let Some(b) = cx.string(item, &format!("{ppath}[{i}]")) {
                    branches.push(b);
                }
            }
        }
        other => cx.push(
            codes::MISSING_FIELD,
            &ppath,
            other.map_or(node.line, |(n, _)| n.line),
            format!("parallel state {name:?} names no branch"),
            "list the states to run at once: `parallel: [security, tests, style]`",
        ),
    }
    let strategy = match state.get("strategy").map(|v| (v, v.as_str())) {
        None => Strategy::AllSucceed,
        Some((_, Some("all_succeed"))) => Strategy::AllSucceed,
        Some((_, Some("any_succeed"))) => Strategy::AnySucceed,
        Some((_, Some("best_effort"))) => Strategy::BestEffort,
        Some((v, _)) => {
            cx.push(
                codes::INVALID_VALUE,
                &join(path, "strategy"),
                v.line,
                format!("strategy {} is not known", v.describe()),
                "use all_succeed (the default), any_succeed or best_effort",
            );
            Strategy::AllSucceed
        }
    };
    let max_concurrent = state.get("max_concurrent").and_then(|v| {
        match v.as_str().and_then(|s| s.parse::<usize>().ok()) {
            Some(n) if n >= 1 => Some(n),
            _ => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, "max_concurrent"),
                    v.line,
                    format!(
                        "max_concurrent must be a whole number from 1, found {}",
                        v.describe()
                    ),
                    "write e.g. `max_concurrent: 3` (the default: every branch at once)",
                );
                None
            }
        }
    });
    Some(StateKind::Parallel(ParallelState {
        branches,
        strategy,
        max_concurrent,
        timeout,
        on_success: state.str_field(cx, "on_success"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `step` state takes beyond the keys every state has.
fn parse_step(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, wf_dir, timeout) = (state.name, state.path, state.wf_dir, state.timeout);
    let script = state.get("command").is_none() && state.get("script_file").is_some();
    Some(StateKind::Step(StepState {
        script,
        command: match (state.get("command"), state.get("script_file")) {
            (None, Some(f)) => {
                script_file(cx, f, &join(path, "script_file"), wf_dir).unwrap_or_default()
            }
            (Some(_), Some(f)) => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, "script_file"),
                    f.line,
                    format!("state {name:?} has both `command` and `script_file`"),
                    "keep one of them",
                );
                String::new()
            }
            _ => state
                .require(
                    cx,
                    "command",
                    "add `command: <shell command>` or `script_file: FILE`",
                )
                .unwrap_or_default(),
        },
        dir: state.str_field(cx, "dir"),
        timeout,
        retry: state
            .get("retry")
            .and_then(|r| parse_retry(cx, r, &join(path, "retry"), false)),
        on_success: state.str_field(cx, "on_success"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `while` state takes beyond the keys every state has.
fn parse_while_state(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, node, timeout) = (state.name, state.path, state.node, state.timeout);
    let body = names_list(cx, state.get("body"), &join(path, "body"), node.line, name);
    let condition = state
        .require(
            cx,
            "while",
            "add `while: EXPR` (AWF's idiom: `while: \"true\"` with `break_when: EXPR`)",
        )
        .unwrap_or_default();
    expression(cx, state.get("while"), &join(path, "while"));
    expression(cx, state.get("break_when"), &join(path, "break_when"));
    let max_iterations = max_iterations(cx, state.get("max_iterations"), path);
    Some(StateKind::While(WhileState {
        condition,
        body,
        max_iterations,
        break_when: state.str_field(cx, "break_when"),
        timeout,
        on_complete: state.str_field(cx, "on_complete"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `operation` state takes beyond the keys every state has.
fn parse_operation(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, node, timeout) = (state.name, state.path, state.node, state.timeout);
    let written = state
        .require(
            cx,
            "operation",
            "add `operation: plugin.op` (an operation of an installed plugin)",
        )
        .unwrap_or_default();
    let (plugin, op) = match written.split_once('.') {
        Some((p, o)) if !p.is_empty() && !o.is_empty() => (p.to_string(), o.to_string()),
        _ => {
            // As AWF: a name without a dot (its diagrams write `operation: noop`) is
            // looked up when the state runs, and fails then.
            if !written.is_empty() {
                cx.warn(
                    codes::INVALID_VALUE,
                    &join(path, "operation"),
                    state.get("operation").map_or(node.line, |v| v.line),
                    format!(
                        "operation {written:?} is not PLUGIN.OPERATION: state {name:?} fails \
                         when it runs (as in AWF: operation {written:?} not found)"
                    ),
                    "write e.g. `operation: http.request` or `operation: notes.add` (`awf \
                     plugins list` shows the plugins')",
                );
            }
            (String::new(), written.clone())
        }
    };
    let network = state.get("network").and_then(|n| {
        let mut sb = crate::confine::Sandbox::default();
        super::sandbox::parse_network(cx, n, &join(path, "network"), &mut sb);
        sb.network
    });
    // AWF takes the parameters in `inputs`, or in `operation_inputs`.
    let inputs = match (state.get("operation_inputs"), state.get("inputs")) {
        (Some(v), _) | (None, Some(v)) => match v.to_json() {
            Value::Object(m) => Value::Object(m),
            Value::Null => Value::Object(Map::new()),
            _ => {
                cx.push(
                    codes::WRONG_TYPE,
                    &join(path, "inputs"),
                    v.line,
                    format!("the inputs of operation state {name:?} must be a map"),
                    "write `inputs: {text: \"...\"}`",
                );
                Value::Object(Map::new())
            }
        },
        (None, None) => Value::Object(Map::new()),
    };
    Some(StateKind::Operation(crate::workflow::OperationState {
        plugin,
        op,
        network,
        inputs,
        timeout,
        on_success: state.str_field(cx, "on_success"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `call_workflow` state takes beyond the keys every state has.
fn parse_call_workflow(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let (name, path, node, timeout) = (state.name, state.path, state.node, state.timeout);
    // AWF's docs nest the keys in a `call_workflow:` block (its code reads them flat
    // on the state): both are taken.
    let nested: Vec<(&str, &Node)> = state
        .get("call_workflow")
        .and_then(|b| {
            cx.fields(
                b,
                &join(path, "call_workflow"),
                &["workflow", "inputs", "outputs", "timeout"],
                codes::UNKNOWN_KEY,
            )
        })
        .unwrap_or_default();
    let get = |k: &str| {
        nested
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| *v)
            .or_else(|| state.get(k))
    };
    let timeout = nested
        .iter()
        .find(|(n, _)| *n == "timeout")
        .and_then(|(_, v)| cx.timeout(v, &join(path, "call_workflow.timeout")))
        .or(timeout);
    let workflow = match get("workflow") {
        Some(v) => cx.string(v, &join(path, "workflow")),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                &join(path, "workflow"),
                node.line,
                format!("call_workflow state {name:?} has no `workflow`"),
                "add `workflow: child.yaml` (a path from this workflow's directory)",
            );
            None
        }
    }
    .unwrap_or_default();
    let mut inputs = Vec::new();
    if let Some(n) = get("inputs") {
        let ipath = join(path, "inputs");
        for (k, v) in cx
            .fields(n, &ipath, &[], codes::UNKNOWN_KEY)
            .unwrap_or_default()
        {
            let value = match &v.kind {
                Kind::Seq(_) | Kind::Map(_) => Some(v.to_json().to_string()),
                _ => cx.string(v, &join(&ipath, k)),
            };
            if let Some(value) = value {
                inputs.push((k.to_string(), value));
            }
        }
    }
    if let Some(o) = get("outputs") {
        cx.warn(
            codes::NO_EFFECT,
            &join(path, "outputs"),
            o.line,
            format!("`outputs` of call_workflow state {name:?} has no effect"),
            "AWF reads no value back from the called workflow either; use the child's \
             final message: {{.states.<this state>.Output}}",
        );
    }
    Some(StateKind::CallWorkflow(CallWorkflowState {
        workflow,
        inputs,
        timeout,
        on_success: state.str_field(cx, "on_success"),
        on_failure: state.str_field(cx, "on_failure"),
    }))
}

/// What a `terminal` state takes beyond the keys every state has.
fn parse_terminal(cx: &mut Ctx, state: &StateMap) -> Option<StateKind> {
    let path = state.path;
    let status = match state.get("status") {
        None => TerminalStatus::Success,
        Some(v) => match v.as_str() {
            Some("success") => TerminalStatus::Success,
            Some("failure") | Some("failed") => TerminalStatus::Failure,
            _ => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, "status"),
                    v.line,
                    format!("terminal status {} is not known", v.describe()),
                    "use success or failure",
                );
                TerminalStatus::Failure
            }
        },
    };
    Some(StateKind::Terminal(TerminalState {
        status,
        message: state.str_field(cx, "message"),
    }))
}

/// A list of state names (`body: [a, b]`), not empty.
fn names_list(
    cx: &mut Ctx,
    node: Option<&Node>,
    path: &str,
    line: usize,
    name: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    match node.map(|n| (n, &n.kind)) {
        Some((_, Kind::Seq(items))) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if let Some(b) = cx.string(item, &format!("{path}[{i}]")) {
                    out.push(b);
                }
            }
        }
        other => cx.push(
            codes::MISSING_FIELD,
            path,
            other.map_or(line, |(n, _)| n.line),
            format!("state {name:?} has no body"),
            "list the states each iteration runs: `body: [check, wait]`",
        ),
    }
    out
}

/// An expression (`when`, `while`, `break_when`): its syntax checked now, with its path.
fn expression(cx: &mut Ctx, node: Option<&Node>, path: &str) {
    let Some(n) = node else { return };
    let Some(text) = cx.string(n, path) else {
        return;
    };
    if let Err(e) = crate::workflow::expr::Expr::parse(&text) {
        cx.push(
            codes::EXPRESSION,
            path,
            n.line,
            format!("{path}: {e}"),
            "write an expression as AWF does, without braces: `states.build.ExitCode == 0 and \
             inputs.mode == \"full\"`",
        );
    }
}

/// `transitions: [{when: EXPR, goto: STATE}, ...]`.
fn parse_transitions(cx: &mut Ctx, node: &Node, path: &str) -> Vec<Transition> {
    let Kind::Seq(items) = &node.kind else {
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!("{path} must be a list"),
            "write `transitions: [{when: 'states.s.ExitCode == 0', goto: next}, {goto: other}]`",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        let Some(fields) = cx.fields(item, &ipath, &["when", "goto"], codes::UNKNOWN_KEY) else {
            continue;
        };
        let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        expression(cx, get("when"), &join(&ipath, "when"));
        let when = get("when").and_then(|w| cx.string(w, &join(&ipath, "when")));
        // AWF compiles a transition's `when` at load, without expr's built-in functions:
        // what it refuses there, awf runs, and says so.
        if let (Some(text), Some(node)) = (&when, get("when"))
            && let Ok(e) = crate::workflow::expr::Expr::parse(text)
            && let Err(why) = e.check_transition()
        {
            cx.warn(
                codes::EXPRESSION,
                &join(&ipath, "when"),
                node.line,
                format!(
                    "{ipath}.when: AWF refuses it when it loads the workflow ({why}); awf runs it"
                ),
                "for a workflow that must also run under AWF, compare fields without functions \
                 (`states.s.Output contains \"x\"` rather than `contains(states.s.Output, \"x\")` \
                 or `len(...)`)",
            );
        }
        match get("goto").and_then(|g| cx.string(g, &join(&ipath, "goto"))) {
            Some(goto) => out.push(Transition {
                when,
                goto,
                line: item.line,
            }),
            None => cx.push(
                codes::MISSING_FIELD,
                &join(&ipath, "goto"),
                item.line,
                format!("{ipath} has no `goto`"),
                "add `goto: STATE`",
            ),
        }
    }
    out
}

/// `hooks: {pre: [...], post: [...]}`, each action `{log: TEXT}` or `{command: SHELL}`.
fn parse_state_hooks(cx: &mut Ctx, node: &Node, path: &str) -> StateHooks {
    let mut hooks = StateHooks::default();
    let Some(fields) = cx.fields(node, path, &["pre", "post"], codes::UNKNOWN_KEY) else {
        return hooks;
    };
    for (key, v) in fields {
        let actions = parse_hook_actions(cx, v, &join(path, key));
        if key == "pre" {
            hooks.pre = actions;
        } else {
            hooks.post = actions;
        }
    }
    hooks
}

/// A hook's actions: a list of `{log: TEXT}` or `{command: SHELL}`.
pub(super) fn parse_hook_actions(cx: &mut Ctx, node: &Node, path: &str) -> Vec<HookAction> {
    let Kind::Seq(items) = &node.kind else {
        cx.push(
            codes::WRONG_TYPE,
            path,
            node.line,
            format!("{path} must be a list of actions"),
            "write e.g. `[{log: \"building\"}, {command: \"echo done >> log.txt\"}]`",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        let Some(fields) = cx.fields(item, &ipath, &["log", "command"], codes::UNKNOWN_KEY) else {
            continue;
        };
        let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        // As AWF: an action with both runs its `log` only.
        if let Some(l) = get("log").and_then(|l| cx.string(l, &join(&ipath, "log"))) {
            out.push(HookAction::Log(l));
        } else if let Some(c) = get("command").and_then(|c| cx.string(c, &join(&ipath, "command")))
        {
            out.push(HookAction::Command(c));
        } else if fields.is_empty() {
            cx.push(
                codes::MISSING_FIELD,
                &ipath,
                item.line,
                format!("{ipath} is empty"),
                "write `{log: TEXT}` or `{command: SHELL}`",
            );
        }
    }
    out
}

/// A step's `script_file`: the file's text (from the workflow's directory), its command.
fn script_file(cx: &mut Ctx, node: &Node, path: &str, wf_dir: &Path) -> Option<String> {
    let name = cx.string(node, path)?;
    let file = wf_dir.join(&name);
    match std::fs::metadata(&file) {
        Ok(m) if m.len() > 1 << 20 => {
            cx.push(
                codes::INVALID_VALUE,
                path,
                node.line,
                format!("{path}: {} is over 1 MiB", file.display()),
                "keep a script under 1 MiB, or run it with `command: ./script.sh`",
            );
            None
        }
        _ => match std::fs::read_to_string(&file) {
            Ok(text) => Some(text),
            Err(e) => {
                cx.push(
                    codes::FILE,
                    path,
                    node.line,
                    format!("{path}: cannot read {}: {e}", file.display()),
                    "give a path from the workflow's directory",
                );
                None
            }
        },
    }
}

/// `budget: {tokens: N, requests: N}` of an agent state: at least one, each a whole
/// number from 1.
fn parse_budget(cx: &mut Ctx, node: &Node, path: &str) -> Option<crate::relay::Budget> {
    let fields = cx.fields(node, path, &["tokens", "requests"], codes::UNKNOWN_KEY)?;
    let mut budget = crate::relay::Budget::default();
    for (key, v) in fields {
        let kpath = join(path, key);
        match v.as_str().and_then(|s| s.parse::<u64>().ok()) {
            Some(n) if n >= 1 => {
                if key == "tokens" {
                    budget.tokens = Some(n);
                } else {
                    budget.requests = Some(n);
                }
            }
            _ => cx.push(
                codes::INVALID_VALUE,
                &kpath,
                v.line,
                format!(
                    "{kpath} must be a whole number from 1, found {}",
                    v.describe()
                ),
                "write e.g. `budget: {tokens: 200000, requests: 50}`",
            ),
        }
    }
    if budget == crate::relay::Budget::default() {
        cx.push(
            codes::MISSING_FIELD,
            path,
            node.line,
            format!("{path} names no limit"),
            "write `budget: {tokens: N}`, `budget: {requests: N}` or both",
        );
        return None;
    }
    Some(budget)
}

/// `retry:` of a step state, or of an agent state (`agent`, which alone takes `on`): every
/// key optional (see [`Retry::default`]), each value checked, and `max_delay` no shorter
/// than `initial_delay`.
fn parse_retry(cx: &mut Ctx, node: &Node, path: &str, agent: bool) -> Option<Retry> {
    let fields = cx.fields(node, path, RETRY_KEYS, codes::UNKNOWN_KEY)?;
    let mut retry = Retry::default();
    // Any problem below drops the block (the workflow does not run anyway).
    let problems = cx.diags.len();
    let bad = |cx: &mut Ctx, kpath: &str, line: usize, message: String, hint: &str| {
        cx.push(codes::INVALID_VALUE, kpath, line, message, hint);
    };
    let mut max_delay_line = None;
    for (key, v) in &fields {
        let kpath = join(path, key);
        match *key {
            "max_attempts" => match v.as_str().and_then(|s| s.trim().parse::<u32>().ok()) {
                Some(n) if (1..=MAX_ATTEMPTS_LIMIT).contains(&n) => retry.max_attempts = n,
                _ => bad(
                    cx,
                    &kpath,
                    v.line,
                    format!(
                        "{kpath} must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, found {}",
                        v.describe()
                    ),
                    "write e.g. `max_attempts: 3`: the attempts in all, the first included \
                     (1 runs the command once)",
                ),
            },
            "initial_delay" | "max_delay" => match cx.timeout(v, &kpath) {
                Some(d) if *key == "initial_delay" => retry.initial_delay = d,
                Some(d) => {
                    retry.max_delay = d;
                    max_delay_line = Some(v.line);
                }
                None => {}
            },
            "backoff" => match v.as_str().and_then(Backoff::from_name) {
                Some(b) => retry.backoff = b,
                None => bad(
                    cx,
                    &kpath,
                    v.line,
                    format!("backoff {} is not known", v.describe()),
                    "use constant, linear or exponential (the default)",
                ),
            },
            "multiplier" => match number(v) {
                Some(m) if m > 1.0 && m.is_finite() => retry.multiplier = m,
                _ => bad(
                    cx,
                    &kpath,
                    v.line,
                    format!("{kpath} must be a number above 1, found {}", v.describe()),
                    "write e.g. `multiplier: 2` (the default): each wait is the one before \
                     times it",
                ),
            },
            "jitter" => match number(v) {
                Some(j) if (0.0..=1.0).contains(&j) => retry.jitter = j,
                _ => bad(
                    cx,
                    &kpath,
                    v.line,
                    format!(
                        "{kpath} must be a number from 0 to 1, found {}",
                        v.describe()
                    ),
                    "write e.g. `jitter: 0.1`: each wait is multiplied by a random factor \
                     between 0.9 and 1.1 (the default 0 keeps waits exact)",
                ),
            },
            "on" if !agent => cx.push(
                codes::UNKNOWN_KEY,
                &kpath,
                v.line,
                format!(
                    "{kpath} is for agent states: it names classes of model failures \
                     ({}), which a step does not have",
                    RetryOn::NAMES.join(", ")
                ),
                "remove `on`; a step's retry chooses its failures by exit code: \
                 `retryable_exit_codes: [75]`",
            ),
            "on" => retry_on(cx, v, &kpath, &mut retry.on),
            _ => retry_exit_codes(cx, v, &kpath, &mut retry.retryable_exit_codes),
        }
    }
    if retry.max_delay < retry.initial_delay {
        let initial_delay_line = fields
            .iter()
            .find(|(k, _)| *k == "initial_delay")
            .map_or(node.line, |(_, v)| v.line);
        delays_out_of_order(cx, path, &retry, max_delay_line, initial_delay_line);
    }
    (cx.diags.len() == problems).then_some(retry)
}

/// A retry's `on`: the classes of model failures to retry, each kept once.
fn retry_on(cx: &mut Ctx, v: &Node, kpath: &str, on: &mut Vec<RetryOn>) {
    match &v.kind {
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str().and_then(RetryOn::from_name) {
                    Some(c) => {
                        if !on.contains(&c) {
                            on.push(c);
                        }
                    }
                    None => cx.push(
                        codes::INVALID_VALUE,
                        &format!("{kpath}[{i}]"),
                        item.line,
                        format!(
                            "{kpath}[{i}] is not a class of failure: {}",
                            item.describe()
                        ),
                        format!(
                            "use {}, e.g. `on: [rate_limit, overloaded]`",
                            RetryOn::NAMES.join(", ")
                        ),
                    ),
                }
            }
        }
        _ if v.is_null() => {}
        _ => cx.push(
            codes::WRONG_TYPE,
            kpath,
            v.line,
            format!(
                "{kpath} must be a list of failure classes, found {}",
                v.describe()
            ),
            format!(
                "write a list of {}, e.g. `on: [overloaded]` (left out or empty: any \
                 failure is retried)",
                RetryOn::NAMES.join(", ")
            ),
        ),
    }
}

/// A retry's `retryable_exit_codes`: exit codes from 1 to 255, each kept once.
fn retry_exit_codes(cx: &mut Ctx, v: &Node, kpath: &str, exit_codes: &mut Vec<i32>) {
    match &v.kind {
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str().and_then(|s| s.trim().parse::<i32>().ok()) {
                    Some(c) if (1..=255).contains(&c) => {
                        if !exit_codes.contains(&c) {
                            exit_codes.push(c);
                        }
                    }
                    found => cx.push(
                        codes::INVALID_VALUE,
                        &format!("{kpath}[{i}]"),
                        item.line,
                        format!(
                            "{kpath}[{i}] must be an exit code, a whole number from 1 \
                             to 255, found {}",
                            item.describe()
                        ),
                        if found == Some(0) {
                            "0 is a success, never retried: list the exit codes of \
                             failures worth another attempt, e.g. `[75]`"
                        } else {
                            "list exit codes as numbers, e.g. \
                             `retryable_exit_codes: [75, 111]`"
                        },
                    ),
                }
            }
        }
        _ if v.is_null() => {}
        _ => {
            cx.push(
                codes::WRONG_TYPE,
                kpath,
                v.line,
                format!(
                    "{kpath} must be a list of exit codes, found {}",
                    v.describe()
                ),
                "write a list, e.g. `retryable_exit_codes: [75]` (left out or empty: \
                 any failure is retried)",
            );
        }
    }
}

/// Reports a `max_delay` shorter than `initial_delay`, at whichever of them is written.
fn delays_out_of_order(
    cx: &mut Ctx,
    path: &str,
    retry: &Retry,
    max_delay_line: Option<usize>,
    initial_delay_line: usize,
) {
    let (kpath, line) = match max_delay_line {
        Some(l) => (join(path, "max_delay"), l),
        None => (join(path, "initial_delay"), initial_delay_line),
    };
    cx.push(
        codes::INVALID_VALUE,
        &kpath,
        line,
        format!(
            "{path}.max_delay ({:?}{}) is shorter than initial_delay ({:?})",
            retry.max_delay,
            if max_delay_line.is_none() {
                ", the default"
            } else {
                ""
            },
            retry.initial_delay
        ),
        "max_delay caps every wait: make it at least initial_delay, or shorten \
         initial_delay",
    );
}

/// A plain number (`2`, `1.5`, `0.1`) of a scalar node.
fn number(node: &Node) -> Option<f64> {
    node.as_str()?.trim().parse::<f64>().ok()
}

/// `max_iterations` of a `while` or a `for_each`: a whole number from 1 to the limit, or a
/// template (with arithmetic, as AWF reads it) resolved when the loop starts.
fn max_iterations(cx: &mut Ctx, node: Option<&Node>, path: &str) -> MaxIterations {
    let Some(v) = node else {
        return MaxIterations::Fixed(DEFAULT_MAX_ITERATIONS);
    };
    match v.as_str() {
        Some(t) if t.contains("{{") => MaxIterations::Template(t.to_string()),
        Some(t) => match MaxIterations::resolve(t) {
            Ok(n) => MaxIterations::Fixed(n),
            Err(why) => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(path, "max_iterations"),
                    v.line,
                    format!("{why} (max_iterations must be a whole number from 1 to {MAX_ITERATIONS_LIMIT}, arithmetic, or a template)"),
                    "write e.g. `max_iterations: 20` or `max_iterations: \"{{.inputs.tries}}\"` (default 100)",
                );
                MaxIterations::Fixed(DEFAULT_MAX_ITERATIONS)
            }
        },
        None => MaxIterations::Fixed(DEFAULT_MAX_ITERATIONS),
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::closest;
    use super::*;

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(closest("promt", AGENT_KEYS), Some("prompt"));
        assert_eq!(closest("zzzzzz", AGENT_KEYS), None);
    }
}
