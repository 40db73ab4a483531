//! `awf validate`: a workflow checked (parse, semantic checks, installed plugins) and its
//! problems printed; [`print_diagnostics`] is also how `awf run` shows why it refused.

use crate::confine::Role;
use crate::error::{AwfError, codes};
use crate::plugins::InstalledPlugins;
use crate::workflow::{self, Diagnostic};
use std::path::Path;

/// `awf validate FILE [--format json]`: prints every problem (stderr for humans, stdout
/// for JSON) and returns the exit code: 0 clean, else the most severe category's.
pub fn validate_command(file: &Path, as_json: bool) -> Result<u8, AwfError> {
    let root = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let (wf, diags) = workflow::load(file, &mut InstalledPlugins::new(&root));
    let code = workflow::exit_code(&diags);
    if as_json {
        let out = serde_json::json!({
            "file": file.display().to_string(),
            "valid": !workflow::has_errors(&diags),
            "exit_code": code,
            "workflow": wf.as_ref().map(|w| &w.name),
            "sandboxes": wf.as_ref().map(sandboxes).unwrap_or_default(),
            "server_sandboxes": wf.as_ref().map(server_sandboxes).unwrap_or_default(),
            "problems": diags,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else if !workflow::has_errors(&diags) {
        print_diagnostics(file, &diags);
        let wf = wf.expect("built when free of errors");
        println!(
            "{}: workflow {} is valid ({} states, initial {})",
            file.display(),
            wf.name,
            wf.states.len(),
            wf.initial
        );
    } else {
        print_diagnostics(file, &diags);
        let errors = diags.iter().filter(|d| d.is_error()).count();
        eprintln!(
            "{}: {errors} error(s), {} warning(s)",
            file.display(),
            diags.len() - errors
        );
    }
    Ok(code)
}

/// `awf validate --compat awf FILE...`: per file, whether it validates here and which of
/// AWF's features it uses, each with what this awf does with it; one line per file (and,
/// for one file, a line per feature). The exit code is the worst file's.
pub fn compat_command(files: &[std::path::PathBuf], as_json: bool) -> Result<u8, AwfError> {
    let root = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let mut worst = 0;
    let mut report = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let features = match workflow::yaml::parse(&text) {
            Ok(Some(node)) => workflow::compat::features(&node, &text),
            _ => Vec::new(),
        };
        let (_, diags) = workflow::load(file, &mut InstalledPlugins::new(&root));
        let code = workflow::exit_code(&diags);
        worst = worst.max(code);
        let errors: Vec<&Diagnostic> = diags.iter().filter(|d| d.is_error()).collect();
        if as_json {
            report.push(serde_json::json!({
                "file": file.display().to_string(),
                "valid": errors.is_empty(),
                "exit_code": code,
                "features": features,
                "problems": errors,
            }));
            continue;
        }
        let uses = if features.is_empty() {
            "no AWF-specific feature".to_string()
        } else {
            features
                .iter()
                .map(|f| format!("{} ({})", f.name, f.support.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let verdict = if errors.is_empty() {
            "runs here".to_string()
        } else {
            format!(
                "does not validate here ({} error(s), first: {} {})",
                errors.len(),
                errors[0].path,
                errors[0].message
            )
        };
        println!("{}: {verdict}; uses {uses}", file.display());
        if files.len() == 1 {
            for f in &features {
                println!("  {:<50} {}", f.name, f.support.as_str());
            }
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
    }
    Ok(worst)
}

/// Per agent state with a tool proxy, the sandbox its Bash would get when run from here
/// (read mode and roots resolved against this PATH and HOME).
fn sandboxes(wf: &workflow::Workflow) -> serde_json::Map<String, serde_json::Value> {
    proxies(wf)
        .filter(|(_, p)| p.intercept_builtins)
        .map(|(state, p)| {
            let env: Vec<_> = p.sandbox.env.clone().into_iter().collect();
            (state.to_string(), stated(&p.sandbox, Role::Bash, &env))
        })
        .collect()
}

/// Per agent state with third-party servers, the jail of each (by server name), resolved
/// with a server's defaults (reads confined, network denied, nothing writable but what it
/// lists and its private TMPDIR and HOME, no per-call bounds).
fn server_sandboxes(wf: &workflow::Workflow) -> serde_json::Map<String, serde_json::Value> {
    proxies(wf)
        .filter(|(_, p)| !p.servers.is_empty())
        .map(|(state, p)| {
            let servers = p
                .servers
                .iter()
                .map(|s| {
                    let mut stated = stated(&s.sandbox, Role::Server, &s.env);
                    match &s.url {
                        // A remote server has no jail: what it is reached at instead.
                        Some(url) => {
                            stated = serde_json::json!({
                                "url": crate::upstream::remote::display_url(url),
                                "headers": s.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                                "allow_private": s.allow_private,
                            })
                        }
                        None => stated["command"] = serde_json::json!(s.command),
                    }
                    (s.name.clone(), stated)
                })
                .collect::<serde_json::Map<_, _>>();
            (state.to_string(), serde_json::Value::Object(servers))
        })
        .collect()
}

/// The agent states whose tool proxy is on, with it.
fn proxies(wf: &workflow::Workflow) -> impl Iterator<Item = (&str, &workflow::McpProxy)> {
    wf.states.iter().filter_map(|st| match &st.kind {
        workflow::StateKind::Agent(a) => a
            .mcp_proxy
            .as_ref()
            .filter(|p| p.enable)
            .map(|p| (st.name.as_str(), p)),
        _ => None,
    })
}

/// `sb` as `confine` states it, for a process whose environment sets `env` over awf's.
fn stated(sb: &crate::confine::Sandbox, role: Role, env: &[(String, String)]) -> serde_json::Value {
    let set = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let path = set("PATH").cloned().or_else(|| std::env::var("PATH").ok());
    let home = set("HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(std::path::PathBuf::from));
    let policy = crate::confine::Policy::new(sb.clone(), role, None);
    let var = |n: &str| std::env::var(n).ok();
    let mut stated = policy.stated(path.as_deref(), home.as_deref(), &var);
    // What this machine gives of it: probed as `awf run` would.
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let shell = std::path::Path::new(crate::builtins::bash::shell());
    let (key, value) = match crate::confine::Confinement::new(
        &policy,
        &cwd,
        &std::env::temp_dir(),
        shell,
        path.as_deref(),
        home.as_deref(),
        &var,
    ) {
        Ok(c) => ("degraded", serde_json::json!(c.degraded())),
        Err(e) => ("refused", serde_json::json!(e)),
    };
    stated[key] = value;
    stated
}

/// Prints validation problems (human) to stderr.
pub fn print_diagnostics(file: &Path, diags: &[Diagnostic]) {
    for d in diags {
        let at = match d.line {
            Some(l) => format!("{}:{l}", file.display()),
            None => file.display().to_string(),
        };
        let path = if d.path.is_empty() {
            String::new()
        } else {
            format!(" at {}", d.path)
        };
        let warning = if d.is_error() { "" } else { "warning: " };
        eprintln!(
            "{at}: {warning}{} [{}]{path}\n    hint: {}",
            d.message, d.code, d.hint
        );
    }
}
