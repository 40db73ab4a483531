//! `step` states: the rendered command run by `/bin/sh -c` in the step's directory, with
//! its timeout; the exit code decides success. With `retry:`, a failed command runs again
//! after a wait (`workflow::Retry::delay`) that an interrupt cuts short. Template values
//! reach the shell as variables (`AWF_VALUE_1`, ...) that the command text refers to, so
//! no value is ever parsed as shell code (see `workflow::template::render_command`).
//!
//! Linux takes at most 128 KiB in one environment string (`MAX_ARG_STRLEN`) and about
//! 2 MiB in all of them with the arguments: a large value (a file's content, a long
//! output, a for_each item) would make the command fail to start. Such a value reaches the
//! shell through a sealed memory file instead, inherited as a descriptor: the command
//! text begins with an assignment that reads it (`AWF_VALUE_1=$(cat /proc/self/fd/N &&
//! echo x)`, then the `x` taken off, so trailing newlines are kept) and the variable is
//! the shell's, not exported (the commands it runs do not inherit it).

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use super::supervise::head_and_tail;
use crate::error::{AwfError, codes};
use crate::process::Launch;
use crate::workflow;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// What one argument or environment string may hold, its NUL included (`MAX_ARG_STRLEN`).
pub(super) const MAX_ARG_BYTES: usize = 128 * 1024;

/// Values above this size go through a memory file rather than the environment.
const ENV_VALUE_BYTES: usize = 32 * 1024;

/// What all values in the environment may hold together; the largest beyond it go through
/// memory files too (the rest of the 2 MiB is the arguments' and awf's own environment's).
const ENV_TOTAL_BYTES: usize = 256 * 1024;

impl Runner<'_> {
    /// Runs step `name`: its command once, or with `retry:` until an attempt succeeds, a
    /// failure is not retryable, the attempts are spent or the run is interrupted.
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
        let Some(retry) = &s.retry else {
            let (mut r, _) = self.run_attempt(name, s, &dir);
            r.duration_ms = t0.elapsed().as_millis() as u64;
            return r;
        };
        let max = retry.max_attempts;
        let mut attempt = 1;
        let mut r = loop {
            let (mut r, ran) = self.run_attempt(name, s, &dir);
            // When the command did not run (a missing dir, a template that cannot be
            // placed, a shell that cannot start), another attempt would not help.
            if !ran || !matches!(r.status, Status::Failure | Status::Timeout) {
                break r;
            }
            let how = match (r.status, r.exit_code) {
                (Status::Timeout, _) => "timed out".to_string(),
                (_, Some(c)) => format!("exit {c}"),
                _ => "killed by a signal".to_string(),
            };
            let code = if r.status == Status::Timeout {
                None
            } else {
                r.exit_code
            };
            if !retry.retries(code) {
                eprintln!(
                    "awf: {name} attempt {attempt} of {max} failed ({how}); not retried \
                     (retryable_exit_codes: {:?})",
                    retry.retryable_exit_codes
                );
                break r;
            }
            if attempt >= max {
                if max > 1 {
                    eprintln!(
                        "awf: {name} attempt {attempt} of {max} failed ({how}); no attempt left"
                    );
                }
                break r;
            }
            let wait = retry.delay(attempt, super::retry::random01());
            let next = if wait < Duration::from_secs(1) {
                format!("{}ms", wait.as_millis())
            } else {
                format!("{:.1}s", wait.as_secs_f64())
            };
            eprintln!("awf: {name} attempt {attempt} of {max} failed ({how}); next in {next}");
            if !super::retry::wait_unless(&self.interrupt, wait) {
                r.status = Status::Interrupted;
                r.error = Some(ErrorJson {
                    code: codes::INTERRUPTED,
                    message: format!(
                        "step {name:?} was interrupted while waiting for attempt {} of {max}",
                        attempt + 1
                    ),
                });
                break r;
            }
            attempt += 1;
        };
        // The last attempt's failure, said to be the last.
        if attempt > 1
            && matches!(r.status, Status::Failure | Status::Timeout)
            && let Some(e) = &mut r.error
        {
            e.message
                .push_str(&format!(" (attempt {attempt} of {max})"));
        }
        r.attempts = Some(attempt);
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    /// One run of the step's command: its result (without a duration), and whether the
    /// command ran at all.
    fn run_attempt(
        &mut self,
        name: &str,
        s: &workflow::StepState,
        dir: &Path,
    ) -> (StateResult, bool) {
        let (mut r, ran) = self.run_attempt_unmasked(name, s, dir);
        // As AWF: what a command printed of a secret input's value is kept as `***`, in
        // its output, its stderr and the error that quotes it.
        r.output = self.mask_secrets(r.output);
        r.stderr = self.mask_secrets(std::mem::take(&mut r.stderr));
        if let Some(e) = r.error.as_mut() {
            e.message = self.mask_secrets(std::mem::take(&mut e.message));
        }
        (r, ran)
    }

    fn run_attempt_unmasked(
        &mut self,
        name: &str,
        s: &workflow::StepState,
        dir: &Path,
    ) -> (StateResult, bool) {
        let mut r = StateResult::new(name, "step");
        // The memory files of large values stay open until the command has ended.
        let started = if s.script && s.command.starts_with("#!") {
            self.shebang_script(name, &s.command, dir)
        } else {
            self.shell(name, &s.command, dir)
        };
        let waited = started.and_then(|(cmd, _files)| self.spawn_and_wait(cmd, s.timeout, name));
        match waited {
            Err(e) => {
                r.status = Status::Failure;
                r.error = Some((&e).into());
                return (r, false);
            }
            Ok(p) => {
                r.output = p.stdout.trim_end_matches('\n').to_string();
                r.stderr = p.stderr.trim_end_matches('\n').to_string();
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
                                "step {name:?} exited with {}; {}",
                                p.code
                                    .map_or("a signal".to_string(), |c| format!("code {c}")),
                                head_and_tail(&p.stderr, 5)
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
        (r, true)
    }

    /// A `script_file` with a shebang, run as AWF runs it: its templates filled in as text,
    /// then the kernel starts the interpreter its first line names (`#!/usr/bin/env
    /// python3`), from a sealed memory file (nothing written to disk, gone when it ends).
    fn shebang_script(
        &self,
        name: &str,
        script: &str,
        dir: &Path,
    ) -> Result<(Launch, Vec<OwnedFd>), AwfError> {
        existing_dir(name, dir)?;
        let text = self.render(script);
        let file = sealed_memory_file(text.as_bytes()).map_err(|e| {
            AwfError::new(
                codes::SPAWN,
                format!("step {name:?}: cannot hold its script in a memory file: {e}"),
            )
        })?;
        let mut cmd = Launch::new(format!("/proc/self/fd/{}", file.as_raw_fd()));
        cmd.current_dir(dir).keep_fd(file.as_raw_fd());
        Ok((cmd, vec![file]))
    }

    /// `/bin/sh -c COMMAND` in `dir`, the command's values in its environment or, when
    /// large, in memory files it inherits (returned: to be kept open until it ends).
    pub(super) fn shell(
        &self,
        name: &str,
        command: &str,
        dir: &Path,
    ) -> Result<(Launch, Vec<OwnedFd>), AwfError> {
        // Checked here: a missing cwd would otherwise read as "cannot start /bin/sh".
        existing_dir(name, dir)?;
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
        let (env, large) = split_large(rendered.env);
        let mut text = String::new();
        let mut files = Vec::new();
        for (var, value) in &large {
            let file = sealed_memory_file(value.as_bytes()).map_err(|e| {
                AwfError::new(
                    codes::SPAWN,
                    format!(
                        "step {name:?}: cannot hold a template value of {} bytes in a memory \
                         file: {e}",
                        value.len()
                    ),
                )
            })?;
            let fd = file.as_raw_fd();
            // `&& echo x` and `%x`: `$(...)` drops trailing newlines, the value keeps them.
            text.push_str(&format!(
                "{var}=$(cat /proc/self/fd/{fd} && echo x) || {{ echo 'awf: cannot read the \
                 value of {var}' >&2; exit 125; }}\n{var}=${{{var}%x}}\n"
            ));
            files.push(file);
        }
        text.push_str(&rendered.text);
        // The text is one argument: `| raw` values pasted into it are bounded by that.
        if text.len() >= MAX_ARG_BYTES {
            return Err(AwfError::new(
                codes::STATE_FAILED,
                format!(
                    "the command of step {name:?} is {} bytes once its `| raw` values are \
                     pasted, above Linux's limit of {} bytes for one argument \
                     (MAX_ARG_STRLEN); pass large values without `| raw`, which has no such \
                     limit",
                    text.len(),
                    MAX_ARG_BYTES - 1
                ),
            ));
        }
        // Started without a copy of awf (a for_each starts thousands): see `Launch`.
        let mut cmd = Launch::new("/bin/sh");
        cmd.arg("-c").arg(&text).envs(env).current_dir(dir);
        // The memory files stay open in the command (`files` keeps them open here until it
        // has started).
        for f in &files {
            cmd.keep_fd(f.as_raw_fd());
        }
        Ok((cmd, files))
    }
}

/// `dir` of step `name` exists (else the error that says so, not a failed spawn).
fn existing_dir(name: &str, dir: &Path) -> Result<(), AwfError> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(AwfError::new(
        codes::STATE_FAILED,
        format!(
            "the dir {} of step {name:?} is not an existing directory (dir is relative to the \
             directory awf run was started in)",
            dir.display()
        ),
    ))
}

/// A template value for the shell: the variable's name and the value.
type Value = (String, String);

/// The values to pass in the environment, and those to pass in memory files: every value
/// above [`ENV_VALUE_BYTES`], then the largest until the rest fits [`ENV_TOTAL_BYTES`].
fn split_large(values: Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    let (mut env, mut large): (Vec<_>, Vec<_>) = values
        .into_iter()
        .partition(|(_, v)| v.len() <= ENV_VALUE_BYTES);
    let size = |vs: &[Value]| vs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut total: usize = size(&env);
    while total > ENV_TOTAL_BYTES {
        let Some(i) = (0..env.len()).max_by_key(|&i| env[i].1.len()) else {
            break;
        };
        let moved = env.swap_remove(i);
        total -= moved.0.len() + moved.1.len() + 2;
        large.push(moved);
    }
    (env, large)
}

/// A memory file holding `bytes`, sealed against any change, closed on exec unless the
/// caller says otherwise.
fn sealed_memory_file(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    use std::io::Write;
    // SAFETY: a NUL-terminated name; the descriptor returned is owned below.
    let fd = unsafe {
        libc::memfd_create(
            c"awf-value".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    (&file).write_all(bytes)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(sizes: &[usize]) -> Vec<Value> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (format!("AWF_VALUE_{}", i + 1), "v".repeat(n)))
            .collect()
    }

    #[test]
    fn large_values_and_then_the_largest_leave_the_environment() {
        let (env, large) = split_large(values(&[10, 200 * 1024, 20]));
        assert_eq!(env.len(), 2);
        assert_eq!(large[0].0, "AWF_VALUE_2");
        // Ten values of 30 KiB fit one by one, not together: the largest go until they do.
        let (env, large) = split_large(values(&[30 * 1024; 10]));
        let in_env: usize = env.iter().map(|(_, v)| v.len()).sum();
        assert!(in_env <= ENV_TOTAL_BYTES, "{in_env}");
        assert_eq!(env.len() + large.len(), 10);
        assert!(!large.is_empty());
    }
}
