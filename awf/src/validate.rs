//! `awf validate`: a workflow checked (parse, semantic checks, installed plugins) and its
//! problems printed; [`print_diagnostics`] is also how `awf run` shows why it refused.

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
            "valid": diags.is_empty(),
            "exit_code": code,
            "workflow": wf.as_ref().map(|w| &w.name),
            "problems": diags,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    } else if diags.is_empty() {
        let wf = wf.expect("built when clean");
        println!(
            "{}: workflow {} is valid ({} states, initial {})",
            file.display(),
            wf.name,
            wf.states.len(),
            wf.initial
        );
    } else {
        print_diagnostics(file, &diags);
        eprintln!("{}: {} problem(s)", file.display(), diags.len());
    }
    Ok(code)
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
        eprintln!(
            "{at}: {} [{}]{path}\n    hint: {}",
            d.message, d.code, d.hint
        );
    }
}
