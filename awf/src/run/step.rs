//! `step` states: the rendered command run by `/bin/sh -c` in the step's directory, with
//! its timeout; the exit code decides success.

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use super::supervise::last_lines;
use crate::error::{AwfError, codes};
use crate::workflow;
use std::process::Command;
use std::time::Instant;

impl Runner<'_> {
    pub(super) fn run_step(
        &mut self,
        name: &str,
        s: &workflow::StepState,
        t0: Instant,
    ) -> StateResult {
        let command = self.render(&s.command);
        let dir = match &s.dir {
            Some(d) => self.workdir.join(self.render(d)),
            None => self.workdir.clone(),
        };
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(&command).current_dir(&dir);
        let mut r = StateResult::new(name, "step");
        // Checked here: a missing cwd would otherwise read as "cannot start /bin/sh".
        let waited = if dir.is_dir() {
            self.spawn_and_wait(cmd, s.timeout, name)
        } else {
            Err(AwfError::new(
                codes::STATE_FAILED,
                format!(
                    "the dir {} of step {name:?} is not an existing directory (dir is relative to \
                     the directory awf run was started in)",
                    dir.display()
                ),
            ))
        };
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
}
