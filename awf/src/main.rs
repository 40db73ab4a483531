//! The `awf` executable: parses the command line, installs logging, runs, and turns the
//! error taxonomy into the exit code (USER 1, WORKFLOW 2, EXECUTION 3, SYSTEM 4).

use awf::cli::{self, Cli};
use awf::error::{AwfError, codes};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(fast) = awf::mcp_serve::fast_serve_args(&args) {
        // Before anything starts a thread: the fork must copy the only one.
        if fast.serve_in_child
            && let Err(e) = awf::mcp_serve::serve_in_child()
        {
            return finish(Err(e));
        }
        awf::telemetry::init_logging(fast.log_format);
        return finish(
            awf::mcp_serve::run_from_flags(fast.config, fast.root, fast.audit).map(|()| 0),
        );
    }
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
    finish(cli::run(cli))
}

fn finish(result: Result<u8, AwfError>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("awf: {}", awf::terminal::printable(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
