//! `agent` states: the prompt rendered, the step's tool proxy started when
//! `mcp_proxy.enable`, then the provider runs: a CLI agent spawned and supervised like a
//! step, or the `openai_compatible` conversation in a thread with the tools in-process.
//! The proxy is closed on every path, and its report joins the state's result.
//!
//! With `retry:`, a failed attempt is followed by another after a wait (the backoff's, or
//! the model's `Retry-After` when longer) that an interrupt cuts short. A failure is
//! classed by what the run's model relay saw of the attempt's last model answer (429:
//! `rate_limit`; 529, 503: `overloaded`; other 5xx: `server_error`) or by the state's
//! timeout; `on` keeps the retries to those classes. Each attempt is a step of its own
//! (a step id, an audit file, a span under the state's with `awf.attempt`), and all of
//! them share the state's `budget`: each attempt's lease gets what the earlier ones left.

use super::engine::Runner;
use super::report::{ErrorJson, StateResult, Status};
use super::retry::{random01, wait_unless};
use super::supervise::{Progress, head_and_tail};
use crate::error::{AwfError, codes};
use crate::process;
use crate::providers::{self, AgentOutput, AgentRequest, CliProvider, Provider, RelayRoute};
use crate::relay::{KeyHeader, LeaseHandle, LeaseSpec, ModelStats, Relay};
use crate::tool_proxy::ProxySession;
use crate::workflow::{self, Prompt, Retry, RetryOn};
use mcpserver::CancellationToken;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How a failed attempt ended, as `retry` sees it.
struct Failure {
    /// Its class, None for a failure of none (`other`).
    class: Option<RetryOn>,
    /// The model answer's HTTP status it was classed by, when it was.
    http: Option<u16>,
    /// The wait that answer asked for.
    retry_after: Option<Duration>,
    /// Why it is never retried, when it is not.
    never: Option<&'static str>,
}

impl Failure {
    /// The failure of attempt `r`, by its status, its error and what the relay saw.
    fn of(r: &StateResult) -> Failure {
        let code = r.error.as_ref().map_or("", |e| e.code);
        let never = if r.status == Status::Interrupted || code == codes::INTERRUPTED {
            Some("interrupted")
        } else if code == codes::BUDGET {
            Some("its model budget is spent")
        } else if code.starts_with("USER.MCP_PROXY.") {
            Some("a tool proxy error")
        } else if code.starts_with("USER.")
            || code.starts_with("WORKFLOW.")
            || code == codes::SPAWN
            || code == codes::PROVIDER_UNAVAILABLE
        {
            Some("an error in the workflow or the setup")
        } else {
            None
        };
        let answer = r
            .model
            .as_ref()
            .filter(|m| m.last_answer_failed)
            .and_then(|m| Some((m.last_error_status?, m.retry_after_ms)));
        match answer {
            _ if r.status == Status::Timeout => Failure {
                class: Some(RetryOn::Timeout),
                http: None,
                retry_after: None,
                never,
            },
            Some((status, after)) => Failure {
                class: RetryOn::of_status(status),
                http: Some(status),
                retry_after: after.map(Duration::from_millis),
                never,
            },
            None => Failure {
                class: None,
                http: None,
                retry_after: None,
                never,
            },
        }
    }

    /// The class's name, `other` for none.
    fn name(&self) -> &'static str {
        self.class.map_or("other", RetryOn::as_str)
    }

    /// What the stderr line says of it: `overloaded, HTTP 529`, `timeout`,
    /// `EXECUTION.AGENT.FAILED, exit 1`.
    fn describe(&self, r: &StateResult) -> String {
        let mut parts = vec![match self.class {
            Some(c) => c.as_str().to_string(),
            None => r
                .error
                .as_ref()
                .map_or_else(|| r.status.to_string(), |e| e.code.to_string()),
        }];
        if let Some(s) = self.http {
            parts.push(format!("HTTP {s}"));
        }
        if let Some(c) = r.exit_code {
            parts.push(format!("exit {c}"));
        }
        parts.join(", ")
    }
}

/// `[rate_limit, overloaded]`: the classes `on` lists.
fn on_list(retry: &Retry) -> String {
    let names: Vec<&str> = retry.on.iter().map(|c| c.as_str()).collect();
    format!("[{}]", names.join(", "))
}

/// A wait as the stderr lines say it: `250ms`, `2.0s`.
fn shown(wait: Duration) -> String {
    if wait < Duration::from_secs(1) {
        format!("{}ms", wait.as_millis())
    } else {
        format!("{:.1}s", wait.as_secs_f64())
    }
}

/// The CLIs take the prompt as an argument, which the kernel bounds: say so rather than
/// "Argument list too long".
fn check_argument_sizes(
    name: &str,
    a: &workflow::AgentState,
    prompt: &str,
    args: &[String],
) -> Result<(), AwfError> {
    let Some(arg) = args
        .iter()
        .find(|arg| arg.len() >= super::step::MAX_ARG_BYTES)
    else {
        return Ok(());
    };
    let what = if arg.contains(prompt) {
        format!("the prompt of state {name:?} is {} bytes", prompt.len())
    } else {
        format!(
            "an argument of state {name:?} for the {} CLI is {} bytes",
            a.provider,
            arg.len()
        )
    };
    Err(AwfError::new(
        codes::SPAWN,
        format!(
            "{what}; the {} CLI takes it as a command-line argument, which Linux limits to \
             {} bytes (MAX_ARG_STRLEN): make it shorter, e.g. write the large text to a \
             file in a step before and let the prompt name the file",
            a.provider,
            super::step::MAX_ARG_BYTES - 1
        ),
    ))
}

/// The end of an `openai_compatible` conversation (None: it did not end by itself) as the
/// state's status and output, or its error.
fn conversation_outcome(
    name: &str,
    a: &workflow::AgentState,
    result: Option<Result<crate::providers::AgentOutput, AwfError>>,
    r: &mut StateResult,
) -> Result<(), AwfError> {
    match result {
        Some(Ok(out)) => {
            r.output = out.text;
            r.usage = out.usage;
            r.status = Status::Success;
            Ok(())
        }
        Some(Err(e)) => {
            if r.status != Status::Timeout {
                r.status = Status::Failure;
            }
            Err(e)
        }
        None if r.status == Status::Timeout => Err(AwfError::new(
            codes::RUN_TIMEOUT,
            format!(
                "agent state {name:?} timed out after {:?}",
                a.timeout.unwrap_or_default()
            ),
        )),
        None if r.status == Status::Interrupted => Err(AwfError::new(
            codes::INTERRUPTED,
            format!("agent state {name:?} was interrupted"),
        )),
        None => {
            r.status = Status::Failure;
            Err(AwfError::new(
                codes::AGENT_FAILED,
                "the openai_compatible conversation thread panicked (a bug in awf)",
            ))
        }
    }
}

/// After failed attempt `attempt` (`how` it failed): true when there is no next one, and
/// why is said on stderr (the result says it too when the budget is spent).
#[allow(clippy::too_many_arguments)]
fn no_next_attempt(
    name: &str,
    a: &workflow::AgentState,
    retry: &workflow::Retry,
    attempt: u32,
    failure: &Failure,
    how: &str,
    model: Option<&ModelStats>,
    r: &mut StateResult,
) -> bool {
    let max = retry.max_attempts;
    let not_retried = if let Some(why) = failure.never {
        Some(why.to_string())
    } else if !retry.retries_agent(failure.class, r.exit_code) {
        Some(
            if !retry.on.is_empty() && !failure.class.is_some_and(|c| retry.on.contains(&c)) {
                format!("on: {}", on_list(retry))
            } else {
                format!("retryable_exit_codes: {:?}", retry.retryable_exit_codes)
            },
        )
    } else {
        None
    };
    if let Some(why) = not_retried {
        eprintln!("awf: {name} attempt {attempt} of {max} failed ({how}); not retried ({why})");
        return true;
    }
    if attempt >= max {
        if max > 1 {
            eprintln!("awf: {name} attempt {attempt} of {max} failed ({how}); no attempt left");
        }
        return true;
    }
    // Every attempt counts against the state's budget: none is made without some of it
    // left.
    if let (Some(b), Some(used)) = (a.budget, model)
        && let Some(limit) = b.less(used).spent()
    {
        eprintln!(
            "awf: {name} attempt {attempt} of {max} failed ({how}); the model budget is spent \
             ({limit}), no attempt left"
        );
        if let Some(m) = &mut r.model {
            m.budget_exhausted = Some(limit);
        }
        r.status = Status::Failure;
        r.error = Some(ErrorJson {
            code: codes::BUDGET,
            message: format!(
                "agent state {name:?} spent its model budget ({limit}) in {attempt} attempt{}; \
                 attempt {} of {max} is not made (attempt {attempt}: {})",
                if attempt == 1 { "" } else { "s" },
                attempt + 1,
                r.error.as_ref().map_or(how, |e| e.message.as_str())
            ),
        });
        return true;
    }
    false
}

/// The state's result after its attempts: the last failure said to be the last, and the
/// model figures of every attempt (the budget's limit the last one's).
fn sum_attempts(r: &mut StateResult, attempt: u32, max: u32, model: Option<ModelStats>) {
    if attempt > 1
        && matches!(r.status, Status::Failure | Status::Timeout)
        && let Some(e) = &mut r.error
        && e.code != codes::BUDGET
    {
        e.message
            .push_str(&format!(" (attempt {attempt} of {max})"));
    }
    if model.is_some() {
        let exhausted = r.model.as_ref().and_then(|m| m.budget_exhausted);
        r.model = model.map(|mut m| {
            m.budget_exhausted = exhausted;
            m
        });
    }
}

impl Runner<'_> {
    /// Runs agent state `name` (step id `seq`): once, or with `retry:` until an attempt
    /// succeeds, a failure is not retryable, the attempts or the budget are spent, or the
    /// run is interrupted.
    pub(super) fn run_agent(
        &mut self,
        name: &str,
        seq: usize,
        a: &workflow::AgentState,
        t0: Instant,
    ) -> StateResult {
        if a.interactive {
            return self.run_conversation_mode(name, seq, a, t0);
        }
        let Some(retry) = &a.retry else {
            let mut r = self.agent_attempt(name, seq, a);
            r.duration_ms = t0.elapsed().as_millis() as u64;
            return r;
        };
        let max = retry.max_attempts;
        // Each attempt's span is a child of the state's; the state's context comes back
        // at the end.
        let state_traceparent = self.step_traceparent.clone();
        let mut attempt = 1;
        let mut id = seq;
        // What the attempts so far came to (None: no attempt had a relay lease).
        let mut model: Option<ModelStats> = None;
        let mut tool_calls = std::collections::BTreeMap::new();
        let mut retried = Vec::new();
        let mut r = loop {
            let mut this = a.clone();
            this.budget = a
                .budget
                .map(|b| model.as_ref().map_or(b, |used| b.less(used)));
            let mut trace = self.trace.step_under(
                Some(&state_traceparent),
                name,
                "agent",
                &format!("{id}-{name}"),
            );
            trace.set_attempt(attempt);
            self.step_traceparent = trace.traceparent.clone();
            let started = Instant::now();
            let mut r = self.agent_attempt(name, id, &this);
            r.duration_ms = started.elapsed().as_millis() as u64;
            trace.end(&r);
            let failure = Failure::of(&r);
            for (tool, n) in &r.tool_calls {
                *tool_calls.entry(tool.clone()).or_insert(0) += n;
            }
            if let Some(m) = &r.model {
                model.get_or_insert_with(ModelStats::default).add(m);
            }
            if !matches!(r.status, Status::Failure | Status::Timeout) {
                break r;
            }
            let how = failure.describe(&r);
            if no_next_attempt(
                name,
                a,
                retry,
                attempt,
                &failure,
                &how,
                model.as_ref(),
                &mut r,
            ) {
                break r;
            }
            let (wait, asked) = retry.agent_delay(attempt, random01(), failure.retry_after);
            eprintln!(
                "awf: {name} attempt {attempt} of {max} failed ({how}); next in {}{}",
                shown(wait),
                if asked { " (Retry-After)" } else { "" }
            );
            retried.push(failure.name().to_string());
            if !wait_unless(&self.interrupt, wait) {
                r.status = Status::Interrupted;
                r.error = Some(ErrorJson {
                    code: codes::INTERRUPTED,
                    message: format!(
                        "agent state {name:?} was interrupted while waiting for attempt {} of \
                         {max}",
                        attempt + 1
                    ),
                });
                break r;
            }
            attempt += 1;
            id = self.next_id();
        };
        self.step_traceparent = state_traceparent;
        sum_attempts(&mut r, attempt, max, model);
        r.tool_calls = tool_calls;
        r.attempts = Some(attempt);
        r.max_attempts = Some(max);
        r.retried = retried;
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    /// One run of the agent (step id `seq`): its result, without a duration.
    /// `mode: conversation` (AWF's): the first turn with the state's prompt, then each line
    /// read on awf's standard input is the next turn of the same CLI session, until an
    /// empty line; the end of input before it fails the state, as AWF's does. The state's
    /// output is the last turn's answer.
    fn run_conversation_mode(
        &mut self,
        name: &str,
        seq: usize,
        a: &workflow::AgentState,
        t0: Instant,
    ) -> StateResult {
        use std::io::BufRead;
        // A session of its own unless it continues another state's.
        let mut turn = a.clone();
        if turn.conversation.is_none() {
            turn.conversation = Some(workflow::Conversation::default());
        }
        let mut r = self.agent_attempt(name, seq, &turn);
        let mut turns = 1;
        while r.status == Status::Success {
            eprint!("awf: [{name}] > ");
            let mut line = String::new();
            match std::io::stdin().lock().read_line(&mut line) {
                Ok(0) | Err(_) => {
                    r.status = Status::Failure;
                    r.error = Some(super::report::ErrorJson {
                        code: codes::AGENT_FAILED,
                        message: format!(
                            "agent state {name:?} (mode: conversation): the input ended before \
                             the empty line that ends the conversation, after {turns} turn(s)"
                        ),
                    });
                    break;
                }
                Ok(_) if line.trim().is_empty() => break,
                Ok(_) => {}
            }
            let Some(session) = r.session_id.clone() else {
                break;
            };
            eprintln!();
            // The next turn: the line, in the same session (not a template).
            let mut next = turn.clone();
            next.prompt = Prompt::Inline(line.trim_end().replace("{{", "{ {"));
            next.system_prompt = None;
            self.session_plan = Some((session, true));
            let id = self.next_id();
            r = self.agent_attempt(name, id, &next);
            turns += 1;
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        r
    }

    fn agent_attempt(&mut self, name: &str, seq: usize, a: &workflow::AgentState) -> StateResult {
        let mut r = StateResult::new(name, "agent");
        r.provider = Some(a.provider.clone());
        let outcome = self.agent_inner(name, seq, a, &mut r);
        if let Err(e) = outcome {
            if r.status == Status::Success {
                r.status = Status::Failure;
            }
            r.error = Some((&e).into());
        }
        r
    }

    fn agent_inner(
        &mut self,
        name: &str,
        seq: usize,
        a: &workflow::AgentState,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let prompt_text = match &a.prompt {
            Prompt::Inline(p) => p.clone(),
            Prompt::File(f) => std::fs::read_to_string(f).map_err(|e| {
                AwfError::new(
                    codes::IO,
                    format!("cannot read the prompt file {}: {e}", f.display()),
                )
            })?,
        };
        let prompt = self.render(&prompt_text);
        // Known before the proxy starts, so that nothing is to close on this way out.
        let Some(provider) = providers::provider(&a.provider) else {
            // AWF's words (its agent registry's), which `awf validate` warned of.
            return Err(AwfError::new(
                codes::PROVIDER_UNAVAILABLE,
                format!(
                    "step {name}: provider {:?} not found; use one of: {}",
                    a.provider,
                    crate::workflow::PROVIDER_NAMES.join(", ")
                ),
            ));
        };
        let session = match &a.mcp_proxy {
            Some(p) if p.enable => {
                Some(
                    self.proxy
                        .start(name, seq, p, &mut self.plugins, &self.step_traceparent)?,
                )
            }
            _ => None,
        };
        match provider {
            Provider::Cli(provider) => {
                self.cli_agent(name, a, provider.as_ref(), &prompt, session, r)
            }
            Provider::OpenAiCompatible => self.openai_agent(name, a, &prompt, session, r),
        }
    }

    /// The step's route through the run's model relay (started with the first), or None
    /// where the step has none: `options.relay: false` (the CLI then holds the key, with a
    /// WARN), or neither a key nor a base_url to relay (the CLI's own login to its own
    /// endpoint, which awf does not redirect).
    fn model_lease(
        &mut self,
        a: &workflow::AgentState,
        provider: &dyn CliProvider,
        session: Option<&ProxySession>,
    ) -> Result<Option<LeaseHandle>, AwfError> {
        let cli = provider.name();
        let key_env = providers::shared::opt_str(&a.options, "api_key_env", cli)?;
        match a.options.get("relay") {
            None | Some(serde_json::Value::Bool(true)) => {}
            Some(serde_json::Value::Bool(false)) => {
                if key_env.is_some() {
                    tracing::warn!(
                        provider = cli,
                        "options.relay is false: the agent CLI holds the model key itself \
                         (its Bash cannot read it only because of the sandbox)"
                    );
                }
                return Ok(None);
            }
            Some(other) => {
                return Err(AwfError::new(
                    codes::AGENT_OPTION,
                    format!("provider {cli}: option relay must be true or false, found {other}"),
                ));
            }
        }
        let base_url = providers::shared::opt_str(&a.options, "base_url", cli)?;
        let api = provider.model_api();
        if key_env.is_none() && base_url.is_none() {
            return Ok(None);
        }
        let Some(upstream) = base_url.or(api.endpoint.map(String::from)) else {
            return Ok(None);
        };
        let key = providers::shared::api_key(&a.options, cli)?.map(|k| (api.key_header, k));
        self.open_lease(a, upstream, key, api.gen_ai, session)
            .map(Some)
    }

    /// A route through the run's model relay (started with the first one).
    fn open_lease(
        &mut self,
        a: &workflow::AgentState,
        upstream: String,
        key: Option<(KeyHeader, String)>,
        provider: &'static str,
        session: Option<&ProxySession>,
    ) -> Result<LeaseHandle, AwfError> {
        let mut relay = self.relay.lock().unwrap_or_else(|e| e.into_inner());
        if relay.is_none() {
            *relay = Some(Relay::start(self.trace.exporter()).map_err(|e| {
                AwfError::new(codes::SPAWN, format!("cannot start the model relay: {e}"))
            })?);
        }
        let spec = LeaseSpec {
            upstream: upstream.trim_end_matches('/').to_string(),
            key,
            provider,
            traceparent: Some(self.step_traceparent.clone()),
            audit: session.map(|s| s.audit_path.clone()),
            budget: a.budget.unwrap_or_default(),
            model_content: a.model_content,
        };
        relay
            .as_ref()
            .expect("started above")
            .lease(spec)
            .map_err(|e| AwfError::new(codes::IO, format!("cannot open the model relay: {e}")))
    }

    /// The step's model figures; a spent budget makes the step fail with EXECUTION.BUDGET.
    fn model_result(
        name: &str,
        lease: Option<&LeaseHandle>,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        // The relay records an answer a moment after the client has it whole.
        settle(lease);
        let Some(l) = lease else { return Ok(()) };
        let stats = l.stats();
        let spent = stats.budget_exhausted;
        r.model = Some(stats);
        match spent {
            Some(limit) if r.status != Status::Interrupted => {
                r.status = Status::Failure;
                Err(AwfError::new(
                    codes::BUDGET,
                    format!(
                        "agent state {name:?} spent its model budget ({limit}); the relay \
                         refused the next request"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The session a state with `conversation:` starts (a fresh id, known before the CLI
    /// starts) or continues (`continue_from`: the id of that state's latest run), with the
    /// CLI's state directory the run's states share. As AWF: continuing a state that has not
    /// run, or that kept no session, is an error.
    fn conversation(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
    ) -> Result<Option<providers::ConversationRequest>, AwfError> {
        // `resume: continue`: the session the engine named for this run of the state (the
        // one it had when the run stopped in it, then continued).
        let plan = self.session_plan.take();
        let continue_from = a
            .conversation
            .as_ref()
            .and_then(|c| c.continue_from.clone());
        let (session_id, resume) = match (plan, continue_from) {
            (Some((id, true)), _) => (id, true),
            (Some((id, false)), None) => (id, false),
            (None, None) if a.conversation.is_none() => return Ok(None),
            // Claude Code and Gemini CLI take the id awf chooses; Codex and OpenCode name their
            // own (reported at their end).
            (None, None) if !matches!(a.provider.as_str(), "codex" | "opencode") => {
                (super::state::new_session_uuid(), false)
            }
            (None, None) => (String::new(), false),
            (_, Some(from)) => {
                let found = self.results.iter().rev().find(|x| x.state == from);
                match found.map(|x| x.session_id.clone()) {
                    Some(Some(id)) => (id, true),
                    Some(None) => {
                        return Err(AwfError::new(
                            codes::AGENT_OPTION,
                            format!(
                                "agent state {name:?}: continue_from {from:?}, which kept no \
                                 session (give it `conversation: {{}}`)"
                            ),
                        ));
                    }
                    None => {
                        return Err(AwfError::new(
                            codes::AGENT_OPTION,
                            format!(
                                "agent state {name:?}: continue_from {from:?}, which has not \
                                 run yet in this run"
                            ),
                        ));
                    }
                }
            }
        };
        let state_dir = self.proxy.run_dir.join(format!("{}-sessions", a.provider));
        crate::private_files::private_dir(&state_dir)?;
        Ok(Some(providers::ConversationRequest {
            session_id,
            resume,
            state_dir,
            system_prompt: a.system_prompt.as_ref().map(|p| self.render(p)),
        }))
    }

    /// A CLI agent: spawned and supervised like a step; with a proxy, the teardown also
    /// finds the `awf mcp-serve` processes it started.
    fn cli_agent(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
        provider: &dyn CliProvider,
        prompt: &str,
        session: Option<ProxySession>,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let deadline = a.timeout.map(|t| Instant::now() + t);
        // Whatever stops the CLI from starting, the proxy is closed here, once.
        let started =
            self.cli_agent_start(name, a, provider, prompt, session.as_ref(), deadline, r);
        let (mut p, mut leader, lease) = match started {
            Ok(v) => v,
            Err(e) => {
                if let Some(s) = session {
                    r.proxy = Some(self.proxy.close(s, None));
                }
                return Err(e);
            }
        };
        match session {
            // Teardown of a proxied step also finds `awf mcp-serve` processes by config path.
            Some(s) => {
                settle(lease.as_ref());
                let report = self.proxy.close(s, Some(&mut leader));
                p.collect();
                r.tool_calls = report.tool_calls.clone();
                let crashed = !report.crashed_sessions.is_empty();
                r.proxy = Some(report);
                if crashed && p.status == Status::Success {
                    r.status = Status::Failure;
                    r.output = p.stdout.clone();
                    return Err(AwfError::new(
                        codes::PROXY_CRASHED,
                        format!(
                            "awf mcp-serve crashed during state {name:?} (a session.start without session.end in its audit file)"
                        ),
                    ));
                }
            }
            None => {
                leader.terminate(process::GRACE);
                process::kill_orphans();
                p.collect();
            }
        }
        r.status = p.status;
        if let Err(e) = Self::model_result(name, lease.as_ref(), r) {
            r.output = p.stdout.clone();
            return Err(e);
        }
        match p.status {
            Status::Timeout => {
                return Err(AwfError::new(
                    codes::RUN_TIMEOUT,
                    format!(
                        "agent state {name:?} timed out after {:?}",
                        a.timeout.unwrap_or_default()
                    ),
                ));
            }
            Status::Interrupted => {
                return Err(AwfError::new(
                    codes::INTERRUPTED,
                    format!("agent state {name:?} was interrupted"),
                ));
            }
            _ => {}
        }
        let status = p.exit_status.expect("exited");
        let out: AgentOutput = provider
            .parse_output(&p.stdout, &p.stderr, status)
            .inspect_err(|_| {
                r.status = Status::Failure;
            })?;
        r.output = out.text;
        r.usage = out.usage;
        r.cost_usd = out.cost_usd;
        if r.session_id.as_deref().is_none_or(str::is_empty) && out.session_id.is_some() {
            r.session_id = out.session_id;
        }
        r.exit_code = status.code();
        if !status.success() {
            r.status = Status::Failure;
            return Err(AwfError::new(
                codes::AGENT_FAILED,
                format!(
                    "{} exited with {status}; {}",
                    a.provider,
                    head_and_tail(&p.stderr, 5)
                ),
            ));
        }
        r.status = Status::Success;
        Ok(())
    }

    /// The CLI of an agent state, started under its lease of the model relay and supervised
    /// until it ends; an error before it started leaves the proxy to the caller to close.
    #[allow(clippy::too_many_arguments)]
    fn cli_agent_start(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
        provider: &dyn CliProvider,
        prompt: &str,
        session: Option<&ProxySession>,
        deadline: Option<Instant>,
        r: &mut StateResult,
    ) -> Result<
        (
            super::supervise::Waited,
            process::ProcessGroup,
            Option<LeaseHandle>,
        ),
        AwfError,
    > {
        let lease = self.model_lease(a, provider, session)?;
        let route = lease.as_ref().map(|l| RelayRoute {
            base_url: l.base_url().to_string(),
            key: l.placeholder().map(String::from),
        });
        let conversation = self.conversation(name, a)?;
        r.session_id = conversation
            .as_ref()
            .map(|c| c.session_id.clone())
            .filter(|id| !id.is_empty());
        let req = AgentRequest {
            conversation: conversation.as_ref(),
            state: name,
            prompt,
            options: &a.options,
            workdir: &self.workdir,
            proxy: session.map(|s| &s.injection),
            relay: route.as_ref(),
        };
        let command = provider.command(&req).and_then(|mut c| {
            // The real key's variable stays with awf: the CLI has the placeholder.
            if lease.as_ref().is_some_and(|l| l.placeholder().is_some())
                && let Some(var) = providers::shared::opt_str(&a.options, "api_key_env", name)?
            {
                c.env_remove.push(var);
            }
            Ok(c)
        })?;
        for w in &command.warnings {
            tracing::warn!(state = name, provider = %a.provider, "{w}");
        }
        check_argument_sizes(name, a, prompt, &command.args)?;
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args).current_dir(&self.workdir);
        for k in &command.env_remove {
            cmd.env_remove(k);
        }
        crate::child_env::without_audit_key(&mut cmd);
        for (k, v) in &command.env {
            cmd.env(k, v);
        }
        let audit = session.map(|s| s.audit_path.clone());
        let (p, leader) = self
            .spawn_and_supervise(
                super::supervise::Start::Command(cmd),
                deadline,
                audit.as_deref(),
                name,
                // An agent CLI's stdout is its event stream: not shown line by line.
                None,
            )
            .map_err(|e| {
                AwfError::new(
                    codes::SPAWN,
                    format!(
                        "{}; install {} or set options.command or AWF_{}_BIN (state {name:?})",
                        e.message(),
                        a.provider,
                        a.provider.to_ascii_uppercase()
                    ),
                )
            })?;
        Ok((p, leader, lease))
    }

    /// The `openai_compatible` conversation: in a thread, with the step's tools served
    /// in-process; a timeout or interrupt cancels it and gives it the grace period to stop.
    fn openai_agent(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
        prompt: &str,
        session: Option<ProxySession>,
        r: &mut StateResult,
    ) -> Result<(), AwfError> {
        let deadline = a.timeout.map(|t| Instant::now() + t);
        // Whatever stops the conversation from starting, the proxy is closed here, once.
        let (opts, lease, prepared) = match self.openai_prepare(name, a, session.as_ref()) {
            Ok(v) => v,
            Err(e) => {
                if let Some(s) = session {
                    r.proxy = Some(self.proxy.close(s, None));
                }
                return Err(e);
            }
        };
        let (prepared, server) = prepared.unzip();
        let cancel = CancellationToken::new();
        let prompt = prompt.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let worker_cancel = cancel.clone();
        let worker = std::thread::spawn(move || {
            let out =
                providers::openai::run(&prompt, &opts, server.as_ref(), deadline, &worker_cancel);
            let _ = tx.send(out);
        });
        let audit = session.as_ref().map(|s| s.audit_path.clone());
        let mut progress = Progress::new(name, audit.as_deref());
        let result = loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(out) => break Some(out),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break None,
                Err(_) => {}
            }
            progress.tick();
            if self.interrupt.load(Ordering::SeqCst) {
                r.status = Status::Interrupted;
                break None;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                r.status = Status::Timeout;
                break None;
            }
        };
        progress.tick();
        if result.is_none() {
            // Tools see the cancellation; give the conversation the grace period to stop.
            cancel.cancel();
            let end = Instant::now() + process::GRACE;
            while !worker.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(25));
            }
        } else {
            let _ = worker.join();
        }
        if let Some(p) = &prepared {
            // Bash commands still running stop now (the in-process server goes down).
            p.shutdown.begin();
            p.telemetry.session_end(
                if result.is_some() {
                    "end_of_step"
                } else {
                    "cancelled"
                },
                None,
            );
        }
        drop(prepared);
        // Each request's own timeout is the time left before the state's deadline, so the
        // conversation may report the deadline before the loop above sees it: the same
        // timeout either way.
        if let Some(Err(e)) = &result
            && deadline.is_some()
            && e.code() == codes::OPENAI_TIMEOUT
        {
            r.status = Status::Timeout;
        }
        if let Some(s) = session {
            settle(lease.as_ref());
            let report = self.proxy.close(s, None);
            r.tool_calls = report.tool_calls.clone();
            r.proxy = Some(report);
        }
        Self::model_result(name, lease.as_ref(), r)?;
        conversation_outcome(name, a, result, r)
    }

    /// The options of an `openai_compatible` state (its base URL and key put behind the
    /// run's relay unless `relay: false`) and, with a proxy, its tool server in-process.
    #[allow(clippy::type_complexity)]
    fn openai_prepare(
        &mut self,
        name: &str,
        a: &workflow::AgentState,
        session: Option<&ProxySession>,
    ) -> Result<
        (
            providers::openai::OpenAiOptions,
            Option<LeaseHandle>,
            Option<(crate::tool_server::assembly::Prepared, mcpserver::Server)>,
        ),
        AwfError,
    > {
        // Its requests go through the run's relay too (unless `relay: false`): the same
        // chat spans, audit records and budget as a CLI's, from one place.
        let relayed = a.options.get("relay") != Some(&serde_json::Value::Bool(false));
        let opts =
            providers::openai::OpenAiOptions::from_map(name, &a.options).and_then(|mut o| {
                if !relayed {
                    return Ok((o, None));
                }
                o.shown_url = Some(o.url());
                let upstream = o.base_url.trim_end_matches('/');
                let upstream = upstream
                    .strip_suffix("/chat/completions")
                    .unwrap_or(upstream);
                let key = o.api_key.take().map(|k| (KeyHeader::Bearer, k));
                let lease = self.open_lease(a, upstream.to_string(), key, "openai", session)?;
                o.base_url = lease.base_url().to_string();
                o.api_key = lease.placeholder().map(String::from);
                Ok((o, Some(lease)))
            });
        let (opts, lease) = opts?;
        let prepared = match session {
            Some(s) => {
                let p = self.proxy.inproc(s)?;
                let server = providers::openai::tool_server(&p)?;
                Some((p, server))
            }
            None => None,
        };
        Ok((opts, lease, prepared))
    }
}

/// The step's model requests ended (their records written) before its audit head is read.
fn settle(lease: Option<&LeaseHandle>) {
    if let Some(l) = lease {
        l.settle(Duration::from_secs(2));
    }
}
