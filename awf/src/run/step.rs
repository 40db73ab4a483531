//! `step` states: the rendered command run by `/bin/sh -c` in the step's directory, with
//! its timeout; the exit code decides success. Template values reach the shell as
//! environment variables (`AWF_VALUE_1`, ...) that the command text refers to, so no
//! value is ever parsed as shell code (see `workflow::template::render_command`).

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use super::supervise::last_lines;
use crate::error::{AwfError, codes};
use crate::workflow;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

impl Runner<'_> {
    pub(super) fn run_step(
        &mut self,
        name: &str,
        s: &workflow::StepState,
        t0: Instant,
    ) -> StateResult {
        let dir = match &s.dir {
            Some(d) => self.workdir.join(self.render(d)),
            None => self.workdir.clone(),
        };
        let mut r = StateResult::new(name, "step");
        let waited = self
            .shell(name, &s.command, &dir)
            .and_then(|cmd| self.spawn_and_wait(cmd, s.timeout, name));
        match waited {
            Err(e) => {
                r.status = Status::Failure;
                r.error = Some((&e).into());
            }
            Ok(p) => {
                r.output = p.stdout.trim_end_matches('\n').to_string();
                r.exit_code = p.code;
                r.status = p.status;
                if p.status == Status::Success && p.code != Some(0) {
                    r.status = Status::Failure;
                }
                if r.status != Status::Success {
                    let why = match p.status {
                        Status::Timeout => (
                            codes::RUN_TIMEOUT,
                            format!(
                                "step {name:?} timed out after {:?}",
                                s.timeout.unwrap_or_default()
                            ),
                        ),
                        Status::Interrupted => {
                            (codes::INTERRUPTED, format!("step {name:?} was interrupted"))
                        }
                        _ => (
                            codes::STATE_FAILED,
                            format!(
                                "step {name:?} exited with {}: {}",
                                p.code
                                    .map_or("a signal".to_string(), |c| format!("code {c}")),
                                last_lines(&p.stderr, 5)
                            ),
                        ),
                    };
                    r.error = Some(ErrorJson {
                        code: why.0,
                        message: why.1,
                    });
                }
            }
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    /// `/bin/sh -c COMMAND` in `dir`, the command's values in its environment.
    fn shell(&self, name: &str, command: &str, dir: &Path) -> Result<Command, AwfError> {
        // Checked here: a missing cwd would otherwise read as "cannot start /bin/sh".
        if !dir.is_dir() {
            return Err(AwfError::new(
                codes::STATE_FAILED,
                format!(
                    "the dir {} of step {name:?} is not an existing directory (dir is relative to \
                     the directory awf run was started in)",
                    dir.display()
                ),
            ));
        }
        let rendered = self
            .render_command(command)
            .map_err(|e| AwfError::new(codes::TEMPLATE_PLACE, format!("step {name:?}: {e}")))?;
        if rendered.env.iter().any(|(_, v)| v.contains('\0')) {
            return Err(AwfError::new(
                codes::STATE_FAILED,
                format!(
                    "a template value of step {name:?} contains a NUL byte, which a shell \
                     command cannot receive"
                ),
            ));
        }
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(&rendered.text)
            .envs(rendered.env)
            .current_dir(dir);
        Ok(cmd)
    }
}
