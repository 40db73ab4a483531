//! The semantic checks of a parsed workflow: the state graph (initial state, transition
//! targets), providers, prompt files, template references, and the `mcp_proxy` rules
//! (the `USER.MCP_PROXY.*` codes: plugins and their operations, name collisions, a
//! server's program that cannot be found). The proxy rules are also what
//! `ToolProxyService::start` relies on, so a run fails on them before any agent starts.
//! Installed plugins are known through the [`PluginCatalog`] port (the plugin host
//! implements it in `plugins::catalog`); this module starts no process.
//! A server's program is looked up as the kernel will (a path as it is, else on the
//! server's PATH), so that a missing `npx` stops `awf validate`, not the step.

use super::parse::join;
use super::template::{self, Ref};
use super::*;
use std::collections::HashMap;

/// What the proxy checks need to know about installed plugins.
pub trait PluginCatalog {
    /// Ok(operations) when the plugin is installed and answered; Err(code, message) else.
    fn operations(&mut self, plugin: &str) -> Result<Vec<String>, (&'static str, String)>;
}

/// All semantic checks; plugins are looked up in `plugins`.
pub fn check_with(wf: &Workflow, plugins: &mut dyn PluginCatalog) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    let names: Vec<&str> = wf.states.iter().map(|s| s.name.as_str()).collect();
    let list = names.join(", ");
    if !wf.initial.is_empty()
        && wf.state(&wf.initial).is_none()
        && !wf.unparsed_states.contains(&wf.initial)
    {
        push(
            &mut d,
            codes::MISSING_INITIAL,
            "states.initial".into(),
            wf.initial_line,
            format!("the initial state {:?} is not defined", wf.initial),
            format!("name one of the states: {list}"),
        );
    }
    // States run only as branches or loop bodies need no transitions of their own.
    let units: Vec<&str> = wf
        .states
        .iter()
        .flat_map(|s| match &s.kind {
            StateKind::Parallel(p) => p.branches.as_slice(),
            StateKind::ForEach(f) => f.body.as_slice(),
            StateKind::While(w) => w.body.as_slice(),
            _ => &[],
        })
        .map(String::as_str)
        .collect();
    // The workflow's hooks: {{.error.*}} only in workflow_error.
    for (key, actions) in [
        ("workflow_start", &wf.hooks.start),
        ("workflow_end", &wf.hooks.end),
        ("workflow_error", &wf.hooks.error),
        ("workflow_cancel", &wf.hooks.cancel),
    ] {
        for (i, a) in actions.iter().enumerate() {
            let text = match a {
                crate::workflow::HookAction::Log(t) | crate::workflow::HookAction::Command(t) => t,
            };
            for r in template::refs(text).into_iter().flatten() {
                let problem = match &r.reference {
                    Ref::Error(f) if !template::ERROR_FIELDS.contains(&f.as_str()) => {
                        Some(format!(
                            "{{{{.error.{f}}}}}: an error has no field {f:?} (use one of {})",
                            template::ERROR_FIELDS.join(", ")
                        ))
                    }
                    Ref::Error(f) if key != "workflow_error" => Some(outside_error_hook(f)),
                    Ref::State(st, _) if wf.state(st).is_none() => {
                        Some(format!("{{{{.states.{st}...}}}} names no state"))
                    }
                    _ => None,
                };
                if let Some(message) = problem {
                    push(
                        &mut d,
                        codes::TEMPLATE,
                        format!("hooks.{key}[{i}]"),
                        0,
                        message,
                        format!("states: {list}"),
                    );
                }
            }
        }
    }
    for s in &wf.states {
        check_state(wf, s, &list, &units, plugins, &mut d);
    }
    check_graph(wf, &mut d);
    check_package_runners(wf, &mut d);
    // A state the parse refused is in the file: its own error is said, and a reference
    // to it is no second error (each of these messages quotes the missing name).
    d.retain(|x| {
        x.code != codes::UNKNOWN_STATE
            || !wf
                .unparsed_states
                .iter()
                .any(|n| x.message.contains(&format!("{n:?}")))
    });
    d
}

/// A package runner (`npx`, `uvx`) whose network keeps it from its registry would wait
/// for good: a warning per such server.
fn check_package_runners(wf: &Workflow, d: &mut Vec<Diagnostic>) {
    for s in &wf.states {
        let StateKind::Agent(a) = &s.kind else {
            continue;
        };
        let Some(p) = a.mcp_proxy.as_ref().filter(|p| p.enable) else {
            continue;
        };
        for server in &p.servers {
            if let Some(why) = crate::upstream::runners::unreachable_registry(
                &server.command,
                server.sandbox.network.as_ref(),
            ) {
                d.push(Diagnostic::warning(
                    codes::REGISTRY_UNREACHABLE,
                    format!("{}.command", server.path),
                    server.command_line,
                    format!("server {:?} will not start: {why}", server.name),
                    "allow the registry host in the server's sandbox network, add the \
                     runner's offline flag, or install the package beforehand"
                        .into(),
                ));
            }
        }
    }
}

/// The graph as a whole, over a sound one only (a missing transition is already an
/// error).
fn check_graph(wf: &Workflow, d: &mut Vec<Diagnostic>) {
    let graph_errors = d
        .iter()
        .any(|x| x.code == codes::UNKNOWN_STATE || x.code == codes::MISSING_FIELD);
    for s in &wf.states {
        let units = match &s.kind {
            StateKind::Parallel(p) => &p.branches,
            StateKind::ForEach(f) => &f.body,
            _ => continue,
        };
        for b in units {
            let Some(branch) = wf.state(b) else { continue };
            let (on_success, on_failure) = match &branch.kind {
                StateKind::Agent(a) => (&a.on_success, &a.on_failure),
                StateKind::Step(st) => (&st.on_success, &st.on_failure),
                _ => continue,
            };
            if on_success.is_some() || on_failure.is_some() {
                d.push(Diagnostic {
                    severity: Severity::Warning,
                    code: codes::BRANCH_TRANSITIONS,
                    message: format!(
                        "state {b:?} runs inside the {} state {:?}: its on_success/on_failure \
                         are not followed there",
                        s.kind.type_name(),
                        s.name
                    ),
                    path: join(&join("states", b), "on_success"),
                    line: Some(branch.line),
                    hint: format!(
                        "the {} state's own transitions decide what comes after {:?}",
                        s.kind.type_name(),
                        s.name
                    ),
                });
            }
        }
    }
    if let Some(start) = wf.state(&wf.initial)
        && !graph_errors
        && !terminal_reachable(wf, start)
    {
        d.push(Diagnostic {
            severity: Severity::Warning,
            code: codes::NO_TERMINAL_REACHABLE,
            message: format!(
                "no terminal state can be reached from the initial state {:?}: a run ends \
                 only by a failure without on_failure, the step limit or a timeout",
                wf.initial
            ),
            path: "states.initial".into(),
            line: Some(wf.initial_line),
            hint: "let an on_success or on_failure on the way go to a `type: terminal` state"
                .into(),
        });
    }
}

/// One state's checks: what its type takes (provider, prompt, command, loop, operation,
/// call), its transitions and hooks, a way out, and the templates and shell commands it
/// holds.
fn check_state(
    wf: &Workflow,
    s: &State,
    list: &str,
    units: &[&str],
    plugins: &mut dyn PluginCatalog,
    d: &mut Vec<Diagnostic>,
) {
    let path = join("states", &s.name);
    let mut held = Held::default();
    check_kind(wf, s, &path, list, plugins, d, &mut held);
    let Held { mut texts, targets } = held;
    for (i, t) in s.transitions.iter().enumerate() {
        if wf.state(&t.goto).is_none() {
            push(
                d,
                codes::UNKNOWN_STATE,
                format!("{}[{i}].goto", join(&path, "transitions")),
                t.line,
                format!(
                    "a transition of state {:?} goes to {:?}, which is not defined",
                    s.name, t.goto
                ),
                format!("name one of the states: {list}"),
            );
        }
    }
    for (which, actions) in [("pre", &s.hooks.pre), ("post", &s.hooks.post)] {
        for (i, a) in actions.iter().enumerate() {
            let (key, text, shell) = match a {
                crate::workflow::HookAction::Log(t) => ("log", t, false),
                crate::workflow::HookAction::Command(t) => ("command", t, true),
            };
            texts.push((
                format!("{}.{which}[{i}].{key}", join(&path, "hooks")),
                text.clone(),
                s.line_of("hooks"),
                shell,
            ));
        }
    }
    // A while may leave only through on_failure (or a body's transition out).
    let while_with_exit = matches!(s.kind, StateKind::While(_)) && targets[1].1.is_some();
    if !matches!(s.kind, StateKind::Terminal(_))
        && !while_with_exit
        && targets[0].1.is_none()
        && !s.transitions.iter().any(|t| t.when.is_none())
        && !units.contains(&s.name.as_str())
    {
        let key = targets[0].0;
        push(
            d,
            codes::MISSING_FIELD,
            join(&path, key),
            s.line,
            format!(
                "state {:?} has no {key}: the run would not know where to go",
                s.name
            ),
            format!("add `{key}: <state>`; states: {list}"),
        );
    }
    for (key, target) in targets {
        if let Some(t) = target
            && wf.state(t).is_none()
        {
            push(
                d,
                codes::UNKNOWN_STATE,
                join(&path, key),
                s.line_of(key),
                format!(
                    "{key} of state {:?} goes to {t:?}, which is not defined",
                    s.name
                ),
                format!("name one of the states: {list}"),
            );
        }
    }
    check_texts(wf, list, texts, d);
}

/// The templates a state holds (prompts, commands, paths, inputs): each reference must
/// name what exists where the state runs, and a shell command must parse (`sh -n`).
fn check_texts(
    wf: &Workflow,
    list: &str,
    texts: Vec<(String, String, usize, bool)>,
    d: &mut Vec<Diagnostic>,
) {
    for (tpath, text, tline, shell) in texts {
        for r in template::refs(&text) {
            let problem = match &r {
                Ok(x) => match &x.reference {
                    Ref::Input(n) if !wf.inputs.iter().any(|i| &i.name == n) => Some((
                        codes::UNDECLARED_INPUT,
                        format!("{{{{.inputs.{n}}}}} names no declared input"),
                        format!(
                            "declare it under inputs (declared: {})",
                            if wf.inputs.is_empty() {
                                "none".to_string()
                            } else {
                                wf.inputs
                                    .iter()
                                    .map(|i| i.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ),
                    )),
                    Ref::State(st, _) if wf.state(st).is_none() => Some((
                        codes::TEMPLATE,
                        format!("{{{{.states.{st}...}}}} names no state"),
                        format!("name one of the states: {list}"),
                    )),
                    Ref::Loop(f) if !template::LOOP_FIELDS.contains(&f.as_str()) => Some((
                        codes::TEMPLATE,
                        format!("{{{{.loop.{f}}}}}: a loop has no field {f:?}"),
                        format!("use one of {}", template::LOOP_FIELDS.join(", ")),
                    )),
                    Ref::Workflow(f) if !template::WORKFLOW_FIELDS.contains(&f.as_str()) => Some((
                        codes::TEMPLATE,
                        format!("{{{{.workflow.{f}}}}}: the workflow has no field {f:?}"),
                        format!("use one of {}", template::WORKFLOW_FIELDS.join(", ")),
                    )),
                    Ref::Context(f) if !template::CONTEXT_FIELDS.contains(&f.as_str()) => Some((
                        codes::TEMPLATE,
                        format!("{{{{.context.{f}}}}}: the context has no field {f:?}"),
                        format!("use one of {}", template::CONTEXT_FIELDS.join(", ")),
                    )),
                    Ref::Error(f) if !template::ERROR_FIELDS.contains(&f.as_str()) => Some((
                        codes::TEMPLATE,
                        format!("{{{{.error.{f}}}}}: an error has no field {f:?}"),
                        format!("use one of {}", template::ERROR_FIELDS.join(", ")),
                    )),
                    Ref::Error(f) => Some((
                        codes::TEMPLATE,
                        outside_error_hook(f),
                        "move it into `hooks: {workflow_error: [...]}` at the top level"
                            .to_string(),
                    )),
                    Ref::State(st, f)
                        if !template::STATE_FIELDS.contains(&f.split('.').next().unwrap_or("")) =>
                    {
                        match template::field_spelled_in_lower_case(f) {
                            // AWF's words (F050: lower-case fields never worked).
                            Some(up) if template::STATE_FIELDS.contains(&up) => Some((
                                codes::TEMPLATE,
                                format!(
                                    "{{{{.states.{st}.{f}}}}}: invalid state property {f:?} for \
                                     step {st:?}, use '{up}' instead"
                                ),
                                format!("write {{{{.states.{st}.{up}}}}}"),
                            )),
                            _ => Some((
                                codes::TEMPLATE,
                                format!("{{{{.states.{st}.{f}}}}}: a state has no field {f:?}"),
                                format!("use one of {}", template::STATE_FIELDS.join(", ")),
                            )),
                        }
                    }
                    _ => None,
                },
                Err(template::ExprError::NotAReference(e)) => Some((
                    codes::TEMPLATE,
                    format!("{{{{{e}}}}} is not a supported template expression"),
                    "use {{.inputs.NAME}}, {{.states.STATE.Output}}, {{.loop.Item}}, \
                     {{.env.NAME}}, {{.workflow.Name}} or {{.context.WorkingDir}}"
                        .to_string(),
                )),
                Err(template::ExprError::UnknownFilter { expr, filter }) => Some((
                    codes::TEMPLATE_FILTER,
                    format!("{{{{{expr}}}}} uses the unknown filter {filter:?}"),
                    "the only filter is raw ({{.inputs.NAME | raw}} pastes the value into a \
                     step command as shell text, unquoted); remove the filter"
                        .to_string(),
                )),
            };
            if let Some((code, msg, hint)) = problem {
                push(d, code, tpath.clone(), tline, msg, hint);
            }
        }
        if shell {
            for p in template::command_problems(&text) {
                push(
                    d,
                    codes::TEMPLATE_PLACE,
                    tpath.clone(),
                    tline,
                    p.message(),
                    p.hint(),
                );
            }
        }
    }
}

/// What a state's type holds that the state's checks read: the texts to check as templates
/// (path, text, line, whether it is a shell command) and the transitions it names.
#[derive(Default)]
struct Held<'s> {
    texts: Vec<(String, String, usize, bool)>,
    targets: Vec<(&'s str, &'s Option<String>)>,
}

/// The checks of what a state's type takes; what it holds goes to `held`.
fn check_kind<'s>(
    wf: &Workflow,
    s: &'s State,
    path: &str,
    list: &str,
    plugins: &mut dyn PluginCatalog,
    d: &mut Vec<Diagnostic>,
    held: &mut Held<'s>,
) {
    match &s.kind {
        StateKind::Agent(a) => check_agent(wf, s, a, path, plugins, d, held),
        StateKind::Step(st) => check_step(s, st, path, d, held),
        StateKind::ForEach(f) => {
            held.targets.push(("on_complete", &f.on_complete));
            held.targets.push(("on_failure", &f.on_failure));
            held.texts.push((
                join(path, "items"),
                f.items.clone(),
                s.line_of("items"),
                false,
            ));
            if let crate::workflow::MaxIterations::Template(t) = &f.max_iterations {
                held.texts.push((
                    join(path, "max_iterations"),
                    t.clone(),
                    s.line_of("max_iterations"),
                    false,
                ));
            }
            check_units(wf, s, "body", &f.body, &mut |c, p, l, m, h| {
                push(d, c, p, l, m, h)
            });
        }
        StateKind::Parallel(par) => {
            held.targets.push(("on_success", &par.on_success));
            held.targets.push(("on_failure", &par.on_failure));
            check_units(wf, s, "parallel", &par.branches, &mut |c, p, l, m, h| {
                push(d, c, p, l, m, h)
            });
        }
        StateKind::While(w) => check_while(wf, s, w, path, list, d, held),
        StateKind::Operation(o) => check_operation(s, o, path, plugins, d, held),
        StateKind::CallWorkflow(c) => {
            held.targets.push(("on_success", &c.on_success));
            held.targets.push(("on_failure", &c.on_failure));
            for (k, v) in &c.inputs {
                held.texts.push((
                    join(&join(path, "inputs"), k),
                    v.clone(),
                    s.line_of("inputs"),
                    false,
                ));
            }
        }
        StateKind::Terminal(t) => {
            if let Some(m) = &t.message {
                held.texts.push((
                    join(path, "message"),
                    m.clone(),
                    s.line_of("message"),
                    false,
                ));
            }
        }
    }
}

/// A step state's checks: its command must be valid shell; it and `dir` go to `held`.
fn check_step<'s>(
    s: &'s State,
    st: &'s StepState,
    path: &str,
    d: &mut Vec<Diagnostic>,
    held: &mut Held<'s>,
) {
    held.targets.push(("on_success", &st.on_success));
    held.targets.push(("on_failure", &st.on_failure));
    // A script_file with a shebang is its interpreter's, not the shell's.
    let own_program = st.script && st.command.starts_with("#!");
    if !own_program && let Some(why) = shell_syntax_error(&st.command) {
        push(
            d,
            codes::INVALID_VALUE,
            join(path, "command"),
            s.line_of("command"),
            format!(
                "the command of state {:?} is not valid shell: {why}",
                s.name
            ),
            "close the quote, bracket or `if`/`do` it opens (`sh -n -c '...'` shows \
             the same)"
                .into(),
        );
    }
    held.texts.push((
        join(path, "command"),
        st.command.clone(),
        s.line_of("command"),
        !own_program,
    ));
    if let Some(dir) = &st.dir {
        held.texts
            .push((join(path, "dir"), dir.clone(), s.line_of("dir"), false));
    }
}

/// A while state's checks: each state of its body is defined and not a terminal state.
fn check_while<'s>(
    wf: &Workflow,
    s: &'s State,
    w: &'s WhileState,
    path: &str,
    list: &str,
    d: &mut Vec<Diagnostic>,
    held: &mut Held<'s>,
) {
    held.targets.push(("on_complete", &w.on_complete));
    held.targets.push(("on_failure", &w.on_failure));
    if let crate::workflow::MaxIterations::Template(t) = &w.max_iterations {
        held.texts.push((
            join(path, "max_iterations"),
            t.clone(),
            s.line_of("max_iterations"),
            false,
        ));
    }
    for (i, b) in w.body.iter().enumerate() {
        match wf.state(b) {
            None => push(
                d,
                codes::UNKNOWN_STATE,
                format!("{}[{i}]", join(path, "body")),
                s.line_of("body"),
                format!("{b:?} in while state {:?} is not defined", s.name),
                format!("name one of the states: {list}"),
            ),
            Some(st) if matches!(st.kind, StateKind::Terminal(_)) => push(
                d,
                codes::INVALID_VALUE,
                format!("{}[{i}]", join(path, "body")),
                s.line_of("body"),
                format!("{b:?} in while state {:?} is a terminal state", s.name),
                "a loop's body runs agent, step, loop and call states".into(),
            ),
            Some(_) => {}
        }
    }
}

/// An operation state's checks: its plugin is installed and has the operation.
fn check_operation<'s>(
    s: &'s State,
    o: &'s OperationState,
    path: &str,
    plugins: &mut dyn PluginCatalog,
    d: &mut Vec<Diagnostic>,
    held: &mut Held<'s>,
) {
    held.targets.push(("on_success", &o.on_success));
    held.targets.push(("on_failure", &o.on_failure));
    // As AWF: an operation is looked up when the state runs; a name not found here is a
    // warning, and the state fails then.
    let not_found = |what: String, hint: String| {
        Diagnostic::warning(
            codes::UNKNOWN_OPERATION,
            join(path, "operation"),
            s.line_of("operation"),
            format!(
                "{what}: state {:?} fails when it runs (as in AWF: operation \"{}.{}\" not \
                 found)",
                s.name, o.plugin, o.op
            ),
            hint,
        )
    };
    if let Some(ops) = crate::workflow::builtin_operations(&o.plugin) {
        if !ops.contains(&o.op.as_str()) {
            d.push(not_found(
                format!("awf's {} operations have no {:?}", o.plugin, o.op),
                format!("its operations: {}", ops.join(", ")),
            ));
        }
    } else if !o.plugin.is_empty() {
        match plugins.operations(&o.plugin) {
            Ok(ops) if ops.iter().any(|x| x == &o.op) => {}
            Ok(ops) => d.push(not_found(
                format!("plugin {} has no operation {:?}", o.plugin, o.op),
                format!("its operations: {}", ops.join(", ")),
            )),
            Err((_, message)) => d.push(not_found(
                message,
                "install the plugin (`awf plugins list` shows the installed ones), or use one \
                 of awf's own: http.request, notify.send, github.*"
                    .into(),
            )),
        }
    }
    let mut strings = Vec::new();
    collect_strings(&o.inputs, &mut strings);
    for text in strings {
        held.texts
            .push((join(path, "inputs"), text, s.line_of("inputs"), false));
    }
}

/// An agent state's checks: its provider and its options, its conversation, its prompt,
/// its `mcp_proxy`.
fn check_agent<'s>(
    wf: &Workflow,
    s: &'s State,
    a: &'s AgentState,
    path: &str,
    plugins: &mut dyn PluginCatalog,
    d: &mut Vec<Diagnostic>,
    held: &mut Held<'s>,
) {
    if a.resume_continue && !matches!(a.provider.as_str(), "claude" | "gemini" | "") {
        push(
            d,
            codes::UNSUPPORTED_PROVIDER,
            join(path, "resume"),
            s.line_of("resume"),
            format!(
                "state {:?}: resume: continue works with providers claude and \
                 gemini in this awf (their session is named before they start), not {}",
                s.name, a.provider
            ),
            "remove it (the state then starts afresh on awf resume)".into(),
        );
    }
    if let Some(c) = &a.conversation {
        check_conversation(wf, s, a, c, path, d);
    }
    held.targets.push(("on_success", &a.on_success));
    held.targets.push(("on_failure", &a.on_failure));
    check_provider(s, a, path, d);
    match &a.prompt {
        Prompt::Inline(p) => {
            held.texts
                .push((join(path, "prompt"), p.clone(), s.line_of("prompt"), false))
        }
        Prompt::File(f) => match std::fs::read_to_string(f) {
            Ok(t) => held.texts.push((
                join(path, "prompt_file"),
                t,
                s.line_of("prompt_file"),
                false,
            )),
            Err(e) => push(
                d,
                codes::PROMPT_FILE,
                join(path, "prompt_file"),
                s.line_of("prompt_file"),
                format!("cannot read the prompt file {}: {e}", f.display()),
                "prompt_file is relative to the workflow file's directory".into(),
            ),
        },
    }
    if let Some(p) = &a.mcp_proxy
        && p.enable
    {
        d_extend_proxy(&mut |c, p, l, m, h| push(d, c, p, l, m, h), p, plugins);
    }
}

/// An agent's `conversation`: its provider must keep sessions, and so must `continue_from`.
fn check_conversation(
    wf: &Workflow,
    s: &State,
    a: &AgentState,
    c: &Conversation,
    path: &str,
    d: &mut Vec<Diagnostic>,
) {
    if !matches!(
        a.provider.as_str(),
        "claude" | "codex" | "gemini" | "opencode" | ""
    ) {
        push(
            d,
            codes::UNSUPPORTED_PROVIDER,
            join(path, "conversation"),
            s.line_of("conversation"),
            format!(
                "state {:?}: conversation (a session kept across states) works \
                 with the agent CLIs (claude, codex, gemini, opencode), not {}",
                s.name, a.provider
            ),
            "remove `conversation`, or use an agent CLI".into(),
        );
    }
    if let Some(from) = &c.continue_from {
        match wf.state(from).map(|x| &x.kind) {
            Some(StateKind::Agent(f)) if f.conversation.is_some() => {}
            Some(StateKind::Agent(_)) => push(
                d,
                codes::INVALID_VALUE,
                join(path, "conversation.continue_from"),
                s.line_of("conversation"),
                format!(
                    "state {:?} continues the session of {from:?}, which keeps \
                     none",
                    s.name
                ),
                format!("add `conversation: {{}}` to state {from:?}"),
            ),
            _ => push(
                d,
                codes::UNKNOWN_STATE,
                join(path, "conversation.continue_from"),
                s.line_of("conversation"),
                format!(
                    "state {:?} continues the session of {from:?}, which is no \
                     agent state",
                    s.name
                ),
                format!("name one of the states: {}", state_names(wf)),
            ),
        }
    }
}

/// An agent's provider must be known, and able to take the MCP proxy when it is enabled.
fn check_provider(s: &State, a: &AgentState, path: &str, d: &mut Vec<Diagnostic>) {
    let proxied = a.mcp_proxy.as_ref().is_some_and(|p| p.enable);
    if !a.provider.is_empty() && !PROVIDER_NAMES.contains(&a.provider.as_str()) {
        let (code, msg) = if proxied {
            (
                codes::UNSUPPORTED_PROVIDER,
                format!(
                    "provider {:?} of state {:?} cannot take the MCP proxy",
                    a.provider, s.name
                ),
            )
        } else {
            // As AWF: the provider is looked up when the state runs (`provider "x" not
            // found` then), so the workflow validates and its other paths run.
            d.push(Diagnostic::warning(
                codes::UNKNOWN_PROVIDER,
                join(path, "provider"),
                s.line_of("provider"),
                format!(
                    "state {:?} uses the unknown provider {:?}: it fails when it runs (as in \
                     AWF: provider {:?} not found)",
                    s.name, a.provider, a.provider
                ),
                format!("use one of: {}", PROVIDER_NAMES.join(", ")),
            ));
            return;
        };
        push(
            d,
            code,
            join(path, "provider"),
            s.line_of("provider"),
            msg,
            format!("use one of: {}", PROVIDER_NAMES.join(", ")),
        );
    }
}

/// The workflow's state names, for a hint.
fn state_names(wf: &Workflow) -> String {
    let names: Vec<&str> = wf.states.iter().map(|s| s.name.as_str()).collect();
    names.join(", ")
}

fn push(
    d: &mut Vec<Diagnostic>,
    code: &'static str,
    path: String,
    line: usize,
    message: String,
    hint: String,
) {
    d.push(Diagnostic::error(code, path, line, message, hint))
}

/// The proxy rules of one enabled `mcp_proxy` block alone: what the per-step proxy checks
/// again when the step starts (a plugin may have gone since validation).
pub fn proxy_problems(p: &McpProxy, plugins: &mut dyn PluginCatalog) -> Vec<Diagnostic> {
    let mut d = Vec::new();
    let mut push = |code, path: String, line: usize, message: String, hint: String| {
        d.push(Diagnostic::error(code, path, line, message, hint))
    };
    d_extend_proxy(&mut push, p, plugins);
    d
}

/// What `/bin/sh -n` (the shell steps run in, reading without running) says of `command`,
/// its template actions read as one word each; None when it parses, or when no shell
/// could be asked. Each text is asked once per process: `awf run` loads a called workflow
/// at every call (a for_each of calls would start a shell per step per item).
fn shell_syntax_error(command: &str) -> Option<String> {
    type Seen = std::collections::HashMap<String, Option<String>>;
    static SEEN: std::sync::OnceLock<std::sync::Mutex<Seen>> = std::sync::OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(known) = seen.lock().unwrap_or_else(|e| e.into_inner()).get(command) {
        return known.clone();
    }
    let found = ask_sh_n(command);
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(command.to_string(), found.clone());
    found
}

fn ask_sh_n(command: &str) -> Option<String> {
    let mut text = String::with_capacity(command.len());
    let mut rest = command;
    while let Some(open) = rest.find("{{") {
        text.push_str(&rest[..open]);
        match rest[open..].find("}}") {
            Some(close) => {
                text.push('x');
                rest = &rest[open + close + 2..];
            }
            None => {
                // An unclosed action is the template check's to report.
                return None;
            }
        }
    }
    text.push_str(rest);
    let out = std::process::Command::new("/bin/sh")
        .args(["-n", "-c"])
        .arg(&text)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .ok()?;
    if out.status.success() {
        return None;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().last().unwrap_or("a syntax error").trim();
    // dash: "/bin/sh: 1: Syntax error: ..."; bash: "/bin/sh: -c: line 1: ...".
    let why = line
        .rsplit_once("Syntax error: ")
        .map(|(_, w)| w)
        .or_else(|| line.split_once(": line ").map(|(_, w)| w))
        .unwrap_or(line);
    Some(why.to_string())
}

/// True when some `terminal` state can be reached from `start` through transitions.
fn terminal_reachable(wf: &Workflow, start: &State) -> bool {
    let mut seen = vec![start.name.as_str()];
    let mut todo = vec![start];
    while let Some(s) = todo.pop() {
        let (on_success, on_failure) = match &s.kind {
            StateKind::Terminal(_) => return true,
            StateKind::Agent(a) => (&a.on_success, &a.on_failure),
            StateKind::Step(st) => (&st.on_success, &st.on_failure),
            StateKind::Parallel(p) => (&p.on_success, &p.on_failure),
            StateKind::ForEach(f) => (&f.on_complete, &f.on_failure),
            StateKind::While(w) => (&w.on_complete, &w.on_failure),
            StateKind::CallWorkflow(c) => (&c.on_success, &c.on_failure),
            StateKind::Operation(o) => (&o.on_success, &o.on_failure),
        };
        let gotos = s.transitions.iter().map(|t| Some(t.goto.clone()));
        let body: Vec<Option<String>> = match &s.kind {
            StateKind::While(w) => w.body.iter().cloned().map(Some).collect(),
            _ => Vec::new(),
        };
        let own = [on_success.clone(), on_failure.clone()];
        for next in own.iter().cloned().chain(gotos).chain(body).flatten() {
            let next = &next;
            if let Some(next) = wf.state(next)
                && !seen.contains(&next.name.as_str())
            {
                seen.push(&next.name);
                todo.push(next);
            }
        }
    }
    false
}

/// The proxy rules of one enabled `mcp_proxy` block.
fn d_extend_proxy(
    push: &mut dyn FnMut(&'static str, String, usize, String, String),
    p: &McpProxy,
    plugins: &mut dyn PluginCatalog,
) {
    if !p.intercept_builtins && p.plugin_tools.is_empty() && p.servers.is_empty() {
        push(
            codes::EMPTY_PROXY,
            p.path.clone(),
            p.line,
            "mcp_proxy is enabled with intercept_builtins: false, no plugin_tools and no \
             servers, so the agent would get no tool from it"
                .into(),
            "expose plugin operations under plugin_tools, add servers, set \
             intercept_builtins: true, or remove mcp_proxy"
                .into(),
        );
    }
    for s in &p.servers {
        // Both would offer tools named `<name>_...`.
        if let Some(e) = p.plugin_tools.iter().find(|e| e.plugin == s.name) {
            push(
                codes::NAME_COLLISION,
                s.path.clone(),
                s.line,
                format!(
                    "server {:?} has the name of the plugin exposed in {}.plugin_tools[{}]: the \
                     tools of both would be named {}_<tool>",
                    s.name, p.path, e.index, s.name
                ),
                format!(
                    "rename the server (e.g. `{}-mcp`), or expose the plugin's operations only",
                    s.name
                ),
            );
        }
        check_server_program(push, s);
    }
    check_plugin_tools(push, p, plugins);
}

/// A server's program must be found: a path as it is, else on the server's PATH (a
/// remote server has none).
fn check_server_program(
    push: &mut dyn FnMut(&'static str, String, usize, String, String),
    s: &McpServer,
) {
    let Some(program) = s.command.first() else {
        return;
    };
    let path_var = s
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("PATH").ok());
    if find_program(program, path_var.as_deref()).is_none() {
        let cpath = format!("{}.command[0]", s.path);
        let (message, hint) = if program.contains('/') {
            (
                format!(
                    "server {:?}: its command {program:?} is not an executable file",
                    s.name
                ),
                "fix the path (a relative one is from the directory awf runs in) or make \
                 the file executable"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "server {:?}: its command {program:?} is not found on PATH ({})",
                    s.name,
                    path_var.as_deref().unwrap_or("unset")
                ),
                format!(
                    "install {program} (its package, or the server itself beforehand), or \
                     give the absolute path of the program in command[0]"
                ),
            )
        };
        push(codes::SERVER_COMMAND, cpath, s.command_line, message, hint);
    }
}

/// A proxy's `plugin_tools`: each plugin listed once, each tool exposed once.
fn check_plugin_tools(
    push: &mut dyn FnMut(&'static str, String, usize, String, String),
    p: &McpProxy,
    plugins: &mut dyn PluginCatalog,
) {
    let mut seen_plugins: HashMap<&str, usize> = HashMap::new();
    let mut seen_tools: HashMap<String, String> = HashMap::new();
    for e in &p.plugin_tools {
        let epath = format!("{}.plugin_tools[{}]", p.path, e.index);
        if let Some(first) = seen_plugins.insert(e.plugin.as_str(), e.index) {
            push(
                codes::NAME_COLLISION,
                join(&epath, "plugin"),
                e.line,
                format!(
                    "plugin {:?} is listed twice (plugin_tools[{first}] and plugin_tools[{}])",
                    e.plugin, e.index
                ),
                "list each plugin once, with all its operations under one expose".into(),
            );
            continue;
        }
        for (j, op) in e.expose.iter().enumerate() {
            let tool = plugin_tool_name(&e.plugin, op);
            let opath = format!("{epath}.expose[{j}]");
            if let Some(first) = seen_tools.insert(tool.clone(), opath.clone()) {
                push(
                    codes::NAME_COLLISION,
                    opath.clone(),
                    e.expose_lines[j],
                    format!("the tool {tool:?} is exposed twice ({first} and {opath})"),
                    "expose each operation once".into(),
                );
            }
        }
        check_exposed_operations(push, e, &epath, plugins);
    }
}

/// A `plugin_tools` entry's plugin must be installed and offer each operation it exposes.
fn check_exposed_operations(
    push: &mut dyn FnMut(&'static str, String, usize, String, String),
    e: &PluginToolsEntry,
    epath: &str,
    plugins: &mut dyn PluginCatalog,
) {
    // awf's own operations (`http.request`, ...) are known without a plugin.
    let known = match crate::workflow::builtin_operations(&e.plugin) {
        Some(ops) => Ok(ops.iter().map(|o| o.to_string()).collect()),
        None => plugins.operations(&e.plugin),
    };
    match known {
        Err((code, msg)) => push(
            code,
            join(epath, "plugin"),
            e.line,
            msg,
            if code == codes::UNKNOWN_PLUGIN {
                "install it as <plugins dir>/<name>/plugin.yaml plus its executable, or fix \
                 the name (see `awf plugins list`)"
                    .into()
            } else {
                "run `awf plugins list` to see why the plugin does not start".into()
            },
        ),
        Ok(ops) => {
            for (j, op) in e.expose.iter().enumerate() {
                if !ops.contains(op) {
                    push(
                        codes::UNKNOWN_OPERATION,
                        format!("{epath}.expose[{j}]"),
                        e.expose_lines[j],
                        format!("plugin {:?} has no operation {op:?}", e.plugin),
                        format!(
                            "it offers: {}",
                            if ops.is_empty() {
                                "none".to_string()
                            } else {
                                ops.join(", ")
                            }
                        ),
                    );
                }
            }
        }
    }
}

/// Where `program` would be started from: a path (holding a `/`) as it is, else the first
/// entry of `path` (a PATH value) holding an executable file of that name.
pub fn find_program(program: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// The states a parallel or for_each state runs (`key`: `parallel` or `body`): each an
/// agent or a step, each once.
fn check_units(
    wf: &Workflow,
    s: &State,
    key: &str,
    units: &[String],
    push: &mut dyn FnMut(&'static str, String, usize, String, String),
) {
    // A for_each's body may hold loops, calls and operations too (AWF's nested loops); a
    // parallel's branches are agents and steps.
    let fits = |k: &StateKind| match key {
        "body" => !matches!(k, StateKind::Terminal(_)),
        _ => matches!(k, StateKind::Agent(_) | StateKind::Step(_)),
    };
    let runnable: Vec<&str> = wf
        .states
        .iter()
        .filter(|b| fits(&b.kind))
        .map(|b| b.name.as_str())
        .collect();
    let path = join(&join("states", &s.name), key);
    let line = s.line_of(key);
    for (i, b) in units.iter().enumerate() {
        let bpath = format!("{path}[{i}]");
        match wf.state(b).map(|st| &st.kind) {
            Some(k) if fits(k) => {}
            Some(other) => push(
                codes::INVALID_VALUE,
                bpath.clone(),
                line,
                format!(
                    "{b:?} in {} state {:?} is a {} state, which does not run there",
                    s.kind.type_name(),
                    s.name,
                    other.type_name()
                ),
                format!("name one of: {}", runnable.join(", ")),
            ),
            None => push(
                codes::UNKNOWN_STATE,
                bpath.clone(),
                line,
                format!(
                    "{b:?} in {} state {:?} is not defined",
                    s.kind.type_name(),
                    s.name
                ),
                format!("name agent or step states: {}", runnable.join(", ")),
            ),
        }
        if units[..i].contains(b) {
            push(
                codes::INVALID_VALUE,
                bpath,
                line,
                format!("{b:?} is listed twice"),
                "list each state once".into(),
            );
        }
    }
}

/// Every string inside a JSON value (an operation's inputs, whose strings are templates).
fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

/// An `{{.error.*}}` reference where no error is: in AWF's words (its message names the
/// error reference and "error hook context"), then where one is defined.
fn outside_error_hook(field: &str) -> String {
    format!(
        "the error reference error.{field} is used outside of error hook context: \
         {{{{.error.*}}}} is defined only in a workflow_error hook"
    )
}
