//! The command line: clap's model of every command and where each goes (the hidden `awf
//! mcp-serve` is spawned by agent CLIs; `awf tools list|call` are in `crate::tools_cli`).
//! Errors map to exit codes through the taxonomy.

use crate::error::{AwfError, codes};
use crate::mcp_serve;
use crate::telemetry::LogFormat;
pub use crate::tools_cli::Source;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(
    name = "awf",
    version,
    about = "AWF: run AI coding agents as workflow steps, every tool call observed"
)]
pub struct Cli {
    /// Log format on stderr (level from AWF_LOG or RUST_LOG, default info).
    #[arg(long, value_enum, global = true, default_value = "human")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Serve the step's tools over MCP on stdin/stdout (spawned by agent CLIs).
    #[command(hide = true)]
    McpServe {
        #[command(flatten)]
        source: Source,
        /// Append audit records to FILE (overrides the config's audit_path).
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// Serve in a forked child; this process only waits for it, so that a client's
        /// SIGKILL of the process it started leaves the server time to end its session.
        #[arg(long)]
        serve_in_child: bool,
    },
    /// List or call the tools an agent would get, through a real `awf mcp-serve`.
    #[command(subcommand)]
    Tools(ToolsCmd),
    /// Inspect the installed plugins (AWF_PLUGINS_PATH, else .awf/plugins and the XDG data dir).
    #[command(subcommand)]
    Plugins(PluginsCmd),
    /// What of Bash's sandbox this machine gives, and how to get the rest.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// Check an audit file's hash chain.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Check a workflow file and report every problem (code, path, line, hint).
    Validate {
        /// The workflow YAML file (several with --compat).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format (`--format` is another name of it).
        #[arg(long = "output", alias = "format", value_parser = ["human", "json"], default_value = "human")]
        format: String,
        /// Say which features of another workflow language each file uses and what this awf
        /// does with them (`awf`: AWF's), one line per file.
        #[arg(long, value_parser = ["awf"])]
        compat: Option<String>,
    },
    /// Run a workflow: its states from `initial`, agent steps with their tool proxy.
    Run {
        /// The workflow YAML file (`NAME` alone finds `NAME.yaml`, `NAME.yml` or AWF's
        /// `.awf/workflows/NAME.yaml`).
        file: PathBuf,
        /// An input value, KEY=VALUE (repeatable).
        #[arg(long = "input", value_name = "KEY=VALUE")]
        inputs: Vec<String>,
        /// Summary format on stdout.
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
        /// Do not show the steps' output as it comes (only each state's start and end).
        #[arg(long, short)]
        quiet: bool,
        /// Directory for the steps' audit files (default: $XDG_STATE_HOME/awf/audit/RUN_ID, i.e.
        /// ~/.local/state/awf/audit/RUN_ID); for a workflow with a proxied agent, outside the temp
        /// dir (and outside the workspace where Bash gets no mount namespace to hide it).
        #[arg(long, value_name = "DIR")]
        audit_dir: Option<PathBuf>,
        /// Run only the for_each items whose position mod COUNT is INDEX (one process of a
        /// run split over COUNT; merge them with `awf gather`).
        #[arg(long, value_name = "INDEX/COUNT")]
        shard: Option<String>,
    },
    /// Merge the shards of one run (`awf run --shard I/N`, one run id each): one summary and
    /// the outputs of every for_each in item order.
    Gather {
        /// The shards' run ids, one per shard, in any order.
        #[arg(required = true)]
        run_ids: Vec<String>,
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
    },
    /// Resume a run that died or was stopped: the states that ended keep their results, the
    /// one that was running runs again (at-least-once), then the rest.
    Resume {
        /// The run id (`awf run` prints it first; `awf history` lists them).
        run_id: String,
        /// Start at this state instead (also for a run that completed).
        #[arg(long, value_name = "STATE")]
        from: Option<String>,
        /// An input value given again, KEY=VALUE, over the run's own (repeatable).
        #[arg(long = "input", value_name = "KEY=VALUE")]
        inputs: Vec<String>,
        /// Resume although the workflow file changed since the run started.
        #[arg(long)]
        force: bool,
        /// Summary format on stdout.
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
        /// Do not show the steps' output as it comes (as for `awf run`).
        #[arg(long, short)]
        quiet: bool,
        /// Directory for the steps' audit files (as for `awf run`).
        #[arg(long, value_name = "DIR")]
        audit_dir: Option<PathBuf>,
    },
    /// One self-contained HTML file of a run: its graph, a timeline of its states (a lane per
    /// for_each item and parallel branch), each agent's model turns and tool calls, denials.
    Report {
        /// The run id (`awf run` prints it first; `awf history` lists them).
        run_id: String,
        /// Where the run's audit files are, when `awf run` was given `--audit-dir`.
        #[arg(long, value_name = "DIR")]
        audit_dir: Option<PathBuf>,
        /// The file to write (default: awf-run-RUN_ID.html here).
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A workflow's graph: its states and where each goes.
    Diagram {
        /// The workflow YAML file.
        workflow: PathBuf,
        /// dot (Graphviz), mermaid (Markdown renderers draw it) or svg (laid out here).
        #[arg(long, value_parser = ["dot", "mermaid", "svg"], default_value = "dot")]
        format: String,
    },
    /// A run's states: status, attempt, duration, tokens.
    Status {
        run_id: String,
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
    },
    /// The runs recorded here, newest first.
    History {
        /// Only runs of the workflow with this `name`.
        #[arg(long, value_name = "NAME")]
        workflow: Option<String>,
        /// Only runs with this status.
        #[arg(long, value_parser = ["succeeded", "failed", "cancelled", "died", "running"])]
        status: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCmd {
    /// Check every link of an audit file's hash chain: exit 0 when whole, 1 naming the first
    /// record changed, removed, inserted or moved, or where the file was cut. Given a run
    /// id, every step's file of the run, each held to the head its run state kept.
    Verify {
        /// The audit file (a step's `.jsonl`), or a run id.
        target: String,
        /// Where the run's audit files are, when it was run with `--audit-dir`.
        #[arg(long, value_name = "DIR")]
        audit_dir: Option<PathBuf>,
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum SandboxCmd {
    /// One line per layer of the sandbox: available, degraded (and why) or missing, what
    /// each guarantee falls back to, and the command that fixes it.
    Check {
        /// Output format (`--format` is another name of it).
        #[arg(long = "output", alias = "format", value_parser = ["human", "json"], default_value = "human")]
        format: String,
    },
    /// Print an AppArmor profile that lets this awf make user namespaces where Ubuntu
    /// restricts them (kernel.apparmor_restrict_unprivileged_userns=1), and how to load it.
    ApparmorProfile,
}

#[derive(Subcommand, Debug)]
pub enum PluginsCmd {
    /// List the discovered plugins, their state and their operations (each plugin is started).
    List {
        /// Project root whose .awf/plugins is searched (default: the current directory).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
        /// The same as `--output json` (kept for scripts that use it).
        #[arg(long, hide = true)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ToolsCmd {
    /// List the tools with their arguments.
    List {
        #[command(flatten)]
        source: Source,
        /// Output format (json: the raw tools/list result).
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
        /// The same as `--output json` (kept for scripts that use it).
        #[arg(long, hide = true)]
        json: bool,
    },
    /// Start each third-party server of a workflow (or of an `awf mcp-serve` config), show
    /// how its tools differ from their pins (the lock file), and pin them as they are now.
    Pin {
        /// The workflow YAML file.
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        workflow: Option<PathBuf>,
        /// An `awf mcp-serve` config (a gateway) instead: its `servers`, pinned in its
        /// `pins` file, by default the one beside it (`gw.json` → `gw.lock.json`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Only this server.
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
        /// Show the differences only (exit 1 when there are some); write nothing.
        #[arg(long)]
        check: bool,
    },
    /// Call one tool and print its result and the call's audit records.
    Call {
        /// Tool name, e.g. Read.
        name: String,
        /// Arguments as a JSON object, e.g. '{"path": "README.md"}'.
        arguments: Option<String>,
        #[command(flatten)]
        source: Source,
        /// Output format (json: {tool, is_error, result, audit}).
        #[arg(long, value_parser = ["human", "json"], default_value = "human")]
        output: String,
        /// The same as `--output json` (kept for scripts that use it).
        #[arg(long, hide = true)]
        json: bool,
    },
}

/// Runs a parsed command; the value is the process exit code.
pub fn run(cli: Cli) -> Result<u8, AwfError> {
    match cli.command {
        Cmd::McpServe {
            source,
            audit,
            serve_in_child,
        } => {
            if serve_in_child {
                mcp_serve::serve_in_child()?;
            }
            mcp_serve::run_from_flags(source.config, source.root, audit)?;
            Ok(0)
        }
        Cmd::Tools(tools) => run_tools(tools, cli.log_format),
        Cmd::Validate {
            files,
            format,
            compat,
        } => validate(&files, format == "json", compat.is_some()),
        Cmd::Run {
            file,
            inputs,
            output,
            quiet,
            audit_dir,
            shard,
        } => {
            crate::run::set_live_output(!quiet);
            // While awf is alone in its cgroup (nothing started yet): a delegated cgroup
            // v2 gets its leaf now, and the steps' servers theirs below it.
            crate::confine::bounds::Mechanism::detect();
            crate::run::run(
                &workflow_file(&file),
                &crate::run::RunOptions {
                    inputs,
                    json: output == "json",
                    audit_dir,
                    shard,
                },
            )
        }
        Cmd::Gather { run_ids, output } => crate::run::gather::gather(&run_ids, output == "json"),
        Cmd::Resume {
            run_id,
            from,
            inputs,
            force,
            output,
            quiet,
            audit_dir,
        } => {
            crate::run::set_live_output(!quiet);
            crate::confine::bounds::Mechanism::detect();
            crate::run::resume(&crate::run::ResumeOptions {
                run_id,
                from,
                inputs,
                force,
                json: output == "json",
                audit_dir,
            })
        }
        Cmd::Report {
            run_id,
            audit_dir,
            output,
        } => crate::picture::html::report_command(&run_id, audit_dir, output),
        Cmd::Diagram { workflow, format } => {
            crate::picture::diagram_command(&workflow_file(&workflow), &format)
        }
        Cmd::Status { run_id, output } => crate::run::history::status(&run_id, output == "json"),
        Cmd::History {
            workflow,
            status,
            limit,
            output,
        } => crate::run::history::history(
            &crate::run::history::Filter {
                workflow,
                status,
                limit,
            },
            output == "json",
        ),
        Cmd::Audit(AuditCmd::Verify {
            target,
            audit_dir,
            output,
        }) => crate::run::verify_audit(&target, audit_dir, output == "json"),
        Cmd::Sandbox(SandboxCmd::Check { format }) => crate::sandbox_check::check(format == "json"),
        Cmd::Sandbox(SandboxCmd::ApparmorProfile) => crate::sandbox_check::print_apparmor_profile(),
        Cmd::Plugins(PluginsCmd::List { root, output, json }) => crate::plugins::list::run(
            root.as_deref().unwrap_or(Path::new(".")),
            json || output == "json",
        ),
    }
}

/// `awf validate FILE`, or `--compat awf` over several.
fn validate(files: &[PathBuf], json: bool, compat: bool) -> Result<u8, AwfError> {
    match (compat, files) {
        (true, _) => crate::validate::compat_command(files, json),
        (false, [file]) => crate::validate::validate_command(&workflow_file(file), json),
        (false, _) => Err(AwfError::new(
            codes::INPUT_INVALID,
            "awf validate takes one workflow file; several with --compat awf",
        )),
    }
}

/// `awf tools list|pin|call`.
fn run_tools(cmd: ToolsCmd, log_format: LogFormat) -> Result<u8, AwfError> {
    match cmd {
        ToolsCmd::List {
            source,
            output,
            json,
        } => crate::tools_cli::list(&source, json || output == "json", log_format),
        ToolsCmd::Pin {
            workflow,
            config,
            server,
            check,
        } => match (workflow, config) {
            (_, Some(c)) => crate::tool_proxy::pin_tools::run_config(&c, server.as_deref(), check),
            (Some(w), None) => crate::tool_proxy::pin_tools::run(&w, server.as_deref(), check),
            (None, None) => Err(AwfError::new(
                codes::USAGE,
                "awf tools pin takes a workflow file or --config FILE",
            )),
        },
        ToolsCmd::Call {
            name,
            arguments,
            source,
            output,
            json,
        } => crate::tools_cli::call(
            &name,
            arguments.as_deref(),
            &source,
            json || output == "json",
            log_format,
        ),
    }
}

/// The workflow file a name stands for: the path as given when it exists; else, for a
/// name without an extension, `NAME.yaml`, `NAME.yml`, then AWF's `.awf/workflows/NAME.yaml`
/// (and `.yml`), the first that exists; else the path as given (its error names it).
pub fn workflow_file(given: &std::path::Path) -> PathBuf {
    if given.exists() || given.extension().is_some() {
        return given.to_path_buf();
    }
    let name = given.as_os_str().to_string_lossy();
    let mut candidates = vec![
        PathBuf::from(format!("{name}.yaml")),
        PathBuf::from(format!("{name}.yml")),
    ];
    if given.components().count() == 1 {
        let awf = std::path::Path::new(".awf").join("workflows");
        candidates.push(awf.join(format!("{name}.yaml")));
        candidates.push(awf.join(format!("{name}.yml")));
    }
    candidates
        .into_iter()
        .find(|c| c.is_file())
        .unwrap_or_else(|| given.to_path_buf())
}
