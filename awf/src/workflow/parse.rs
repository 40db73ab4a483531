//! From the marked YAML tree to the [`Workflow`] model. Every shape problem becomes a
//! [`Diagnostic`] with the node's path and line, and parsing goes on past it so that one
//! run of `awf validate` lists them all.

mod sandbox;

use super::yaml::{self, Kind, Node};
use super::*;
use crate::tools::ToolPolicy;

const TOP_KEYS: &[&str] = &["name", "version", "description", "inputs", "states"];
const INPUT_KEYS: &[&str] = &["name", "type", "required", "default", "description"];
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
    "on_success",
    "on_failure",
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
];
const STEP_KEYS: &[&str] = &[
    "type",
    "description",
    "command",
    "dir",
    "timeout",
    "mcp_proxy",
    "on_success",
    "on_failure",
];
const TERMINAL_KEYS: &[&str] = &["type", "description", "status", "message", "mcp_proxy"];
const PROXY_KEYS: &[&str] = &[
    "enable",
    "intercept_builtins",
    "plugin_tools",
    "sandbox",
    "tools",
];
const TOOL_POLICY_KEYS: &[&str] = &["deny", "read_only"];
const PLUGIN_TOOLS_KEYS: &[&str] = &["plugin", "expose", "timeout_seconds"];

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[derive(Default)]
struct Ctx {
    diags: Vec<Diagnostic>,
}

impl Ctx {
    fn push(
        &mut self,
        code: &'static str,
        path: &str,
        line: usize,
        message: String,
        hint: impl Into<String>,
    ) {
        self.diags.push(Diagnostic::error(
            code,
            path.to_string(),
            line,
            message,
            hint.into(),
        ));
    }

    fn warn(
        &mut self,
        code: &'static str,
        path: &str,
        line: usize,
        message: String,
        hint: impl Into<String>,
    ) {
        self.diags.push(Diagnostic {
            severity: super::Severity::Warning,
            code,
            message,
            path: path.to_string(),
            line: Some(line),
            hint: hint.into(),
        });
    }

    /// The entries of a map node, with unknown and duplicate keys reported.
    fn fields<'a>(
        &mut self,
        node: &'a Node,
        path: &str,
        allowed: &[&str],
        unknown_code: &'static str,
    ) -> Option<Vec<(&'a str, &'a Node)>> {
        let Kind::Map(entries) = &node.kind else {
            self.push(
                codes::WRONG_TYPE,
                path,
                node.line,
                format!("{} must be a map, found {}", name_of(path), node.describe()),
                format!("write {} as `key: value` lines", name_of(path)),
            );
            return None;
        };
        let mut out: Vec<(&str, &Node)> = Vec::new();
        for (k, v) in entries {
            let Some(key) = k.as_str() else {
                self.push(
                    codes::WRONG_TYPE,
                    path,
                    k.line,
                    format!("a key of {} is {}, not text", name_of(path), k.describe()),
                    "keys are plain names",
                );
                continue;
            };
            let kpath = join(path, key);
            if out.iter().any(|(seen, _)| *seen == key) {
                self.push(
                    codes::DUPLICATE_KEY,
                    &kpath,
                    k.line,
                    format!("{kpath} is given twice"),
                    "keep one of them",
                );
                continue;
            }
            if !allowed.is_empty() && !allowed.contains(&key) {
                let hint = match closest(key, allowed) {
                    Some(s) => format!("did you mean `{s}`? allowed here: {}", allowed.join(", ")),
                    None => format!("allowed here: {}", allowed.join(", ")),
                };
                self.push(
                    unknown_code,
                    &kpath,
                    k.line,
                    format!("unknown key `{key}` in {}", name_of(path)),
                    hint,
                );
                continue;
            }
            out.push((key, v));
        }
        Some(out)
    }

    fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() => Some(s.clone()),
            _ => {
                self.push(
                    codes::WRONG_TYPE,
                    path,
                    node.line,
                    format!("{path} must be text, found {}", node.describe()),
                    "write a single value (quote it if it contains `: ` or starts with `{`)",
                );
                None
            }
        }
    }

    fn boolean(&mut self, node: &Node, path: &str, code: &'static str) -> Option<bool> {
        let b = node.as_bool();
        if b.is_none() {
            self.push(
                code,
                path,
                node.line,
                format!("{path} must be true or false, found {}", node.describe()),
                "write true or false, unquoted",
            );
        }
        b
    }

    fn timeout(&mut self, node: &Node, path: &str) -> Option<Duration> {
        let d = node.as_str().and_then(parse_duration);
        if d.is_none() {
            self.push(
                codes::INVALID_VALUE,
                path,
                node.line,
                format!(
                    "{path} must be a positive duration, found {}",
                    node.describe()
                ),
                "write seconds (300) or a number with a unit: 500ms, 30s, 5m, 1h",
            );
        }
        d
    }
}

fn name_of(path: &str) -> String {
    if path.is_empty() {
        "the workflow".into()
    } else {
        path.to_string()
    }
}

/// `300`, `30s`, `5m`, `1h`, `500ms`; zero is refused (a step that may never run is a typo).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, "s"),
    };
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs > 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs))
}

/// The allowed key nearest to a typo, when it is near enough to be a typo.
fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(key, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min()
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Parses workflow text (from `path`, used for `prompt_file`s and messages).
pub fn parse(text: &str, path: &Path) -> (Option<Workflow>, Vec<Diagnostic>) {
    let mut cx = Ctx::default();
    let root = match yaml::parse(text) {
        Ok(Some(n)) => n,
        Ok(None) => {
            cx.push(
                codes::MISSING_FIELD,
                "",
                1,
                format!("{} is empty", path.display()),
                "a workflow needs at least `name` and `states`",
            );
            return (None, cx.diags);
        }
        Err(e) => {
            cx.push(
                e.code,
                "",
                e.line,
                format!("{} {}", path.display(), e.message),
                e.hint,
            );
            return (None, cx.diags);
        }
    };
    let Some(fields) = cx.fields(&root, "", TOP_KEYS, codes::UNKNOWN_KEY) else {
        return (None, cx.diags);
    };
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let name = match get("name") {
        Some(n) => cx.string(n, "name").unwrap_or_default(),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                "name",
                root.line,
                "the workflow has no `name`".into(),
                "add `name: my-workflow` at the top",
            );
            String::new()
        }
    };
    let version = get("version").and_then(|n| cx.string(n, "version"));
    let description = get("description").and_then(|n| cx.string(n, "description"));
    let inputs = get("inputs")
        .map(|n| parse_inputs(&mut cx, n))
        .unwrap_or_default();
    let wf_dir = path.parent().unwrap_or(Path::new("."));
    let (initial, initial_line, states) = match get("states") {
        Some(n) => parse_states(&mut cx, n, wf_dir),
        None => {
            cx.push(
                codes::MISSING_FIELD,
                "states",
                root.line,
                "the workflow has no `states`".into(),
                "add `states:` with `initial: <state>` and the states",
            );
            (String::new(), root.line, Vec::new())
        }
    };
    let wf = Workflow {
        initial_line,
        name,
        version,
        description,
        inputs,
        initial,
        states,
        path: path.to_path_buf(),
    };
    (Some(wf), cx.diags)
}

fn parse_inputs(cx: &mut Ctx, node: &Node) -> Vec<InputDef> {
    let mut out = Vec::new();
    // Both AWF's list form (`- name: x`) and a map form (`x: {type: ...}`) are accepted.
    let items: Vec<(String, Option<String>, &Node)> = match &node.kind {
        Kind::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("inputs[{i}]"), None, n))
            .collect(),
        Kind::Map(entries) => entries
            .iter()
            .map(|(k, v)| {
                let key = k.as_str().unwrap_or_default().to_string();
                (format!("inputs.{key}"), Some(key), v)
            })
            .collect(),
        _ => {
            cx.push(
                codes::WRONG_TYPE,
                "inputs",
                node.line,
                format!("inputs must be a list, found {}", node.describe()),
                "write `inputs:` then `- name: x` items",
            );
            return out;
        }
    };
    for (path, key_name, n) in items {
        let allowed: &[&str] = if key_name.is_some() {
            &INPUT_KEYS[1..]
        } else {
            INPUT_KEYS
        };
        // `x:` with nothing under it is a plain string input.
        let fields = if n.is_null() {
            Vec::new()
        } else {
            let Some(f) = cx.fields(n, &path, allowed, codes::UNKNOWN_KEY) else {
                continue;
            };
            f
        };
        let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let name = match (key_name, get("name")) {
            (Some(k), _) => k,
            (None, Some(v)) => cx.string(v, &join(&path, "name")).unwrap_or_default(),
            (None, None) => {
                cx.push(
                    codes::MISSING_FIELD,
                    &path,
                    n.line,
                    format!("{path} has no `name`"),
                    "add `name: <input name>`",
                );
                continue;
            }
        };
        let kind = match get("type").and_then(|v| v.as_str()) {
            None | Some("string") => InputType::String,
            Some("integer") | Some("int") => InputType::Integer,
            Some("boolean") | Some("bool") => InputType::Boolean,
            Some(other) => {
                cx.push(
                    codes::INVALID_VALUE,
                    &join(&path, "type"),
                    get("type").map_or(n.line, |t| t.line),
                    format!("input type {other:?} is not supported"),
                    "use string, integer or boolean",
                );
                InputType::String
            }
        };
        let required = get("required")
            .and_then(|v| cx.boolean(v, &join(&path, "required"), codes::WRONG_TYPE))
            .unwrap_or(false);
        let default = get("default").and_then(|v| cx.string(v, &join(&path, "default")));
        let description =
            get("description").and_then(|v| cx.string(v, &join(&path, "description")));
        if out.iter().any(|i: &InputDef| i.name == name) {
            cx.push(
                codes::DUPLICATE_KEY,
                &path,
                n.line,
                format!("input {name:?} is declared twice"),
                "keep one declaration",
            );
            continue;
        }
        out.push(InputDef {
            name,
            kind,
            required,
            default,
            description,
        });
    }
    out
}

fn parse_states(cx: &mut Ctx, node: &Node, wf_dir: &Path) -> (String, usize, Vec<State>) {
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
        if let Some(s) = parse_state(cx, key, n, &path, wf_dir) {
            states.push(s);
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
    let allowed = match ty.as_str() {
        Some("agent") => AGENT_KEYS,
        Some("step") => STEP_KEYS,
        Some("terminal") => TERMINAL_KEYS,
        Some("parallel") => PARALLEL_KEYS,
        Some("for_each") => FOR_EACH_KEYS,
        _ => {
            cx.push(
                codes::INVALID_VALUE,
                &join(path, "type"),
                ty.line,
                format!("state {name:?} has the unknown type {}", ty.describe()),
                "use agent, step, parallel, for_each or terminal",
            );
            return None;
        }
    };
    let fields = cx.fields(node, path, allowed, codes::UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let str_field = |cx: &mut Ctx, k: &str| get(k).and_then(|v| cx.string(v, &join(path, k)));
    let require = |cx: &mut Ctx, k: &str, hint: &str| -> Option<String> {
        match get(k) {
            Some(v) => cx.string(v, &join(path, k)),
            None => {
                cx.push(
                    codes::MISSING_FIELD,
                    &join(path, k),
                    node.line,
                    format!("{} state {name:?} has no `{k}`", ty.as_str().unwrap_or("")),
                    hint,
                );
                None
            }
        }
    };
    let timeout = get("timeout").and_then(|v| cx.timeout(v, &join(path, "timeout")));
    let mcp_proxy = get("mcp_proxy").and_then(|v| parse_proxy(cx, v, &join(path, "mcp_proxy")));
    if let Some(p) = &mcp_proxy
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
    let kind = match ty.as_str() {
        Some("agent") => {
            let provider = require(
                cx,
                "provider",
                "add `provider: claude` (or gemini, codex, opencode, openai_compatible)",
            );
            let prompt = match (get("prompt"), get("prompt_file")) {
                (Some(p), None) => cx.string(p, &join(path, "prompt")).map(Prompt::Inline),
                (None, Some(f)) => cx
                    .string(f, &join(path, "prompt_file"))
                    .map(|f| Prompt::File(wf_dir.join(f))),
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
            };
            let options = match get("options") {
                None => Map::new(),
                Some(o) if o.is_null() => Map::new(),
                Some(o) => {
                    // Options are provider-specific: any keys, checked by the provider.
                    cx.fields(o, &join(path, "options"), &[], codes::UNKNOWN_KEY);
                    match o.to_json() {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    }
                }
            };
            let budget = get("budget").and_then(|b| parse_budget(cx, b, &join(path, "budget")));
            let model_content = get("telemetry").is_some_and(|t| {
                let tpath = join(path, "telemetry");
                cx.fields(t, &tpath, &["model_content"], codes::UNKNOWN_KEY)
                    .and_then(|f| f.into_iter().find(|(k, _)| *k == "model_content"))
                    .and_then(|(_, v)| {
                        cx.boolean(v, &join(&tpath, "model_content"), codes::WRONG_TYPE)
                    })
                    .unwrap_or(false)
            });
            StateKind::Agent(Box::new(AgentState {
                provider: provider.unwrap_or_default(),
                prompt: prompt.unwrap_or(Prompt::Inline(String::new())),
                options,
                timeout,
                mcp_proxy,
                budget,
                model_content,
                on_success: str_field(cx, "on_success"),
                on_failure: str_field(cx, "on_failure"),
            }))
        }
        Some("for_each") => {
            let bpath = join(path, "body");
            let mut body = Vec::new();
            match get("body").map(|n| (n, &n.kind)) {
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
            let items = match get("items") {
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
                get(key).map_or(default, |v| {
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
            let max_iterations = count(
                cx,
                "max_iterations",
                MAX_ITERATIONS_LIMIT,
                DEFAULT_MAX_ITERATIONS,
                "write e.g. `max_iterations: 500` (the default is 100, the limit 10000)",
            );
            let max_concurrent = count(
                cx,
                "max_concurrent",
                MAX_ITERATIONS_LIMIT,
                1,
                "write e.g. `max_concurrent: 4` (the default 1 runs iterations one after another)",
            );
            StateKind::ForEach(ForEachState {
                items: items.unwrap_or_default(),
                body,
                max_iterations,
                max_concurrent,
                timeout,
                on_complete: str_field(cx, "on_complete"),
                on_failure: str_field(cx, "on_failure"),
            })
        }
        Some("parallel") => {
            let ppath = join(path, "parallel");
            let mut branches = Vec::new();
            match get("parallel").map(|n| (n, &n.kind)) {
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
            let strategy = match get("strategy").map(|v| (v, v.as_str())) {
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
            let max_concurrent = get("max_concurrent").and_then(|v| {
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
            StateKind::Parallel(ParallelState {
                branches,
                strategy,
                max_concurrent,
                timeout,
                on_success: str_field(cx, "on_success"),
                on_failure: str_field(cx, "on_failure"),
            })
        }
        Some("step") => StateKind::Step(StepState {
            command: require(cx, "command", "add `command: <shell command>`").unwrap_or_default(),
            dir: str_field(cx, "dir"),
            timeout,
            on_success: str_field(cx, "on_success"),
            on_failure: str_field(cx, "on_failure"),
        }),
        _ => {
            let status = match get("status") {
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
            StateKind::Terminal(TerminalState {
                status,
                message: str_field(cx, "message"),
            })
        }
    };
    Some(State {
        name: name.to_string(),
        line: node.line,
        field_lines: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.line))
            .collect(),
        kind,
    })
}

fn parse_proxy(cx: &mut Ctx, node: &Node, path: &str) -> Option<McpProxy> {
    let fields = cx.fields(node, path, PROXY_KEYS, codes::PROXY_UNKNOWN_KEY)?;
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let enable = get("enable")
        .and_then(|v| cx.boolean(v, &join(path, "enable"), codes::WRONG_TYPE))
        .unwrap_or(false);
    let intercept_builtins = get("intercept_builtins")
        .and_then(|v| cx.boolean(v, &join(path, "intercept_builtins"), codes::WRONG_TYPE))
        .unwrap_or(true);
    let mut plugin_tools = Vec::new();
    if let Some(pt) = get("plugin_tools").filter(|n| !n.is_null()) {
        let pt_path = join(path, "plugin_tools");
        match &pt.kind {
            Kind::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    let ipath = format!("{pt_path}[{i}]");
                    let Some(f) =
                        cx.fields(item, &ipath, PLUGIN_TOOLS_KEYS, codes::PROXY_UNKNOWN_KEY)
                    else {
                        continue;
                    };
                    let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
                    let plugin = match get("plugin") {
                        Some(p) => cx.string(p, &join(&ipath, "plugin")),
                        None => {
                            cx.push(
                                codes::MISSING_FIELD,
                                &join(&ipath, "plugin"),
                                item.line,
                                format!("{ipath} has no `plugin`"),
                                "add `plugin: <plugin name>` (see `awf plugins list`)",
                            );
                            None
                        }
                    };
                    let mut expose = Vec::new();
                    let mut expose_lines = Vec::new();
                    match get("expose") {
                        Some(Node {
                            kind: Kind::Seq(ops),
                            ..
                        }) => {
                            for (j, op) in ops.iter().enumerate() {
                                if let Some(s) = cx.string(op, &format!("{ipath}.expose[{j}]")) {
                                    expose.push(s);
                                    expose_lines.push(op.line);
                                }
                            }
                        }
                        Some(other) => cx.push(
                            codes::WRONG_TYPE,
                            &join(&ipath, "expose"),
                            other.line,
                            format!("{ipath}.expose must be a list, found {}", other.describe()),
                            "write `expose: [op1, op2]`",
                        ),
                        None => {}
                    }
                    if expose.is_empty()
                        && get("expose").is_none_or(|e| matches!(e.kind, Kind::Seq(_)))
                    {
                        cx.push(
                            codes::MISSING_FIELD,
                            &join(&ipath, "expose"),
                            item.line,
                            format!("{ipath} exposes no operation"),
                            "list the operations the agent may call: `expose: [op]` (see `awf plugins list`)",
                        );
                    }
                    let timeout_seconds = get("timeout_seconds").and_then(|t| {
                        let tpath = join(&ipath, "timeout_seconds");
                        match t.as_str().and_then(|s| s.parse::<u64>().ok()) {
                            Some(n) if (1..=86_400).contains(&n) => Some(n),
                            _ => {
                                cx.push(
                                    codes::INVALID_VALUE,
                                    &tpath,
                                    t.line,
                                    format!(
                                        "{tpath} must be a whole number of seconds from 1 to \
                                         86400, found {}",
                                        t.describe()
                                    ),
                                    "write e.g. `timeout_seconds: 300` (the default is Bash's, 120)",
                                );
                                None
                            }
                        }
                    });
                    if let Some(plugin) = plugin {
                        plugin_tools.push(PluginToolsEntry {
                            plugin,
                            expose,
                            timeout_seconds,
                            expose_lines,
                            line: item.line,
                            index: i,
                        });
                    }
                }
            }
            _ => cx.push(
                codes::WRONG_TYPE,
                &pt_path,
                pt.line,
                format!("{pt_path} must be a list, found {}", pt.describe()),
                "write `plugin_tools:` then `- plugin: name` items with `expose: [op]`",
            ),
        }
    }
    let sandbox = get("sandbox")
        .map(|n| sandbox::parse_sandbox(cx, n, &join(path, "sandbox")))
        .unwrap_or_default();
    let tools = match get("tools").filter(|n| !n.is_null()) {
        Some(t) => parse_tool_policy(
            cx,
            t,
            &join(path, "tools"),
            intercept_builtins,
            &plugin_tools,
        ),
        None => ToolPolicy::default(),
    };
    Some(McpProxy {
        enable,
        intercept_builtins,
        plugin_tools,
        sandbox,
        tools,
        path: path.to_string(),
        line: node.line,
    })
}

/// `mcp_proxy.tools`: `deny: [names]` (each a tool of the step) and `read_only: bool`.
fn parse_tool_policy(
    cx: &mut Ctx,
    node: &Node,
    path: &str,
    intercept_builtins: bool,
    plugin_tools: &[PluginToolsEntry],
) -> ToolPolicy {
    let mut policy = ToolPolicy::default();
    let Some(fields) = cx.fields(node, path, TOOL_POLICY_KEYS, codes::PROXY_UNKNOWN_KEY) else {
        return policy;
    };
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    if let Some(v) = get("read_only") {
        policy.read_only = cx
            .boolean(v, &join(path, "read_only"), codes::WRONG_TYPE)
            .unwrap_or(false);
    }
    let mut known: Vec<String> = Vec::new();
    if intercept_builtins {
        known.extend(crate::builtins::NAMES.iter().map(|n| n.to_string()));
    }
    for p in plugin_tools {
        for op in &p.expose {
            known.push(plugin_tool_name(&p.plugin, op));
        }
    }
    match get("deny") {
        None => {}
        Some(Node {
            kind: Kind::Seq(items),
            ..
        }) => {
            for (i, item) in items.iter().enumerate() {
                let ipath = format!("{path}.deny[{i}]");
                let Some(name) = cx.string(item, &ipath) else {
                    continue;
                };
                if !known.contains(&name) {
                    cx.push(
                        codes::UNKNOWN_TOOL,
                        &ipath,
                        item.line,
                        format!("{ipath}: {name:?} is not a tool of this step"),
                        format!("deny one of the step's tools: {}", known.join(", ")),
                    );
                }
                policy.deny.push(name);
            }
        }
        Some(other) => cx.push(
            codes::WRONG_TYPE,
            &join(path, "deny"),
            other.line,
            format!("{path}.deny must be a list, found {}", other.describe()),
            "write `deny: [Bash, Write]`",
        ),
    }
    policy
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), None);
        assert_eq!(parse_duration("3 weeks"), None);
    }

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(closest("promt", AGENT_KEYS), Some("prompt"));
        assert_eq!(closest("zzzzzz", AGENT_KEYS), None);
    }
}
