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
            "valid": !workflow::has_errors(&diags),
            "exit_code": code,
            "workflow": wf.as_ref().map(|w| &w.name),
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
