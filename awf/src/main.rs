//! The `awf` executable: parses the command line, installs logging, runs, and turns the
//! error taxonomy into the exit code (USER 1, WORKFLOW 2, EXECUTION 3, SYSTEM 4).

use awf::cli::{self, Cli};
use awf::error::{AwfError, codes};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help / --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // A usage error is a USER error (exit 1), not clap's default 2 (WORKFLOW here).
            let _ = e.print();
            return ExitCode::from(AwfError::new(codes::USAGE, "").exit_code());
        }
    };
    awf::telemetry::init_logging(cli.log_format);
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("awf: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
