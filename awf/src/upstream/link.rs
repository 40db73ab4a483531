//! A server link that outlives one crash: the running process and its client, started
//! with a deadline for telling its era (see [`super::era`]), opening it and `tools/list`,
//! and started again at most once per step when the server dies (in the era it was
//! found to speak). A remote server has no process: its link is [`super::remote`]'s.

use super::client::{Client, Failure};
use super::config::{DEFAULT_START_TIMEOUT, ServerSpec};
use super::era::{self, Era};
use super::probe::{self, Negotiated};
use super::process::{ServerProcess, StartContext, StderrSink, describe_status};
use serde_json::Value;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Restarts a server gets in one step.
const MAX_RESTARTS: u32 = 1;

struct Instance {
    /// None for a remote server.
    process: Option<ServerProcess>,
    client: Client,
}

/// How the process ended, for messages (`still running` while it runs; a remote server
/// has none).
fn status(process: &Option<ServerProcess>, wait: Duration) -> String {
    match process {
        Some(p) => describe_status(p.exit_status(wait)),
        None => "a remote server".into(),
    }
}

fn stop_process(process: &Option<ServerProcess>, grace: Duration) {
    if let Some(p) = process {
        p.stop(grace);
    }
}

/// What one start of the process came to.
enum Attempt {
    Started(Box<Instance>, Vec<Value>),
    /// It ended when probed (why): to be started again with `initialize` alone.
    ProbeEndedIt(String),
}

/// What a running server is told about and asks for.
pub struct Link {
    name: String,
    spec: ServerSpec,
    cx: Arc<StartContext>,
    stderr: StderrSink,
    /// Runs (on a thread of its own) when the server says its tool list changed.
    list_changed: Arc<dyn Fn() + Send + Sync>,
    current: Mutex<Option<Arc<Instance>>>,
    restarts: AtomicU32,
}

/// Why a call got no result, in words for the agent.
pub type CallFailure = String;

impl Link {
    /// Starts the server and lists its tools, within its start deadline.
    pub fn start(
        name: &str,
        spec: &ServerSpec,
        cx: Arc<StartContext>,
        stderr: StderrSink,
        list_changed: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<(Link, Vec<Value>), String> {
        let link = Link {
            name: name.to_string(),
            spec: spec.clone(),
            cx,
            stderr,
            list_changed,
            current: Mutex::new(None),
            restarts: AtomicU32::new(0),
        };
        let (instance, tools) = link.launch()?;
        *link.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(instance));
        Ok((link, tools))
    }

    fn start_timeout(&self) -> Duration {
        self.spec
            .start_timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_START_TIMEOUT)
    }

    /// Starts the process and opens it in its era: the one known from an earlier start
    /// in this process, else the one the probe tells (remembered once it started).
    fn launch(&self) -> Result<(Instance, Vec<Value>), String> {
        let known = probe::recall(&self.name, &self.spec);
        let started = match self.attempt(known) {
            Ok(Attempt::ProbeEndedIt(why)) => {
                tracing::info!(
                    server = %self.name,
                    "server {} ended when probed with server/discover ({why}); starting it \
                     again and opening it with initialize",
                    self.name
                );
                self.attempt(Some(Era::Handshake))
            }
            other => other,
        };
        match started {
            Ok(Attempt::Started(instance, tools)) => {
                if let Some(era) = instance.client.era() {
                    probe::remember(&self.name, &self.spec, era);
                }
                Ok((*instance, tools))
            }
            Ok(Attempt::ProbeEndedIt(why)) => Err(format!("it ended at its start ({why})")),
            Err(why) => {
                probe::forget(&self.name, &self.spec);
                Err(why)
            }
        }
    }

    fn attempt(&self, known: Option<Era>) -> Result<Attempt, String> {
        let (process, stdin, stdout): (_, Box<dyn Write + Send>, Box<dyn Read + Send>) =
            if let Some(url) = &self.spec.url {
                let endpoint = super::remote::Endpoint {
                    url,
                    headers: &self.spec.headers,
                    env: &self.spec.env,
                    allow_private: self.spec.allow_private,
                };
                let (to, from) = super::remote::open(&self.name, &endpoint)?;
                (None, to, from)
            } else {
                let (p, stdin, stdout) =
                    ServerProcess::start(&self.name, &self.spec, &self.cx, self.stderr.clone())?;
                (Some(p), Box::new(stdin), Box::new(stdout))
            };
        let notify = self.list_changed.clone();
        let server = self.name.clone();
        let client = Client::new(
            &self.name,
            stdin,
            stdout,
            Box::new(move || {
                let notify = notify.clone();
                // Re-listing needs the reader thread that called this: not on it.
                let _ = std::thread::Builder::new()
                    .name("awf-server-relist".into())
                    .spawn(move || notify());
            }),
            Box::new(move |params: &Value| {
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let data = params.get("data").map(Value::to_string).unwrap_or_default();
                let cut = crate::text::floor_char_boundary(&data, 2048);
                tracing::info!(server = %server, level, "{}", &data[..cut]);
            }),
        );
        // A package runner that cannot reach its registry waits on it for good: it gets a
        // few seconds (a cache it uses without asking), then the ways out.
        let unreachable = super::runners::unreachable_registry(
            &self.spec.command,
            self.spec.sandbox.network.as_ref(),
        );
        let timeout = match &unreachable {
            Some(_) => self
                .start_timeout()
                .min(super::runners::UNREACHABLE_REGISTRY_WAIT),
            None => self.start_timeout(),
        };
        // The probe's wait comes on top: a server silent to it still has all of
        // start_timeout_seconds for initialize and tools/list.
        let probe_wait = if known.is_none() {
            probe::PROBE_WAIT.min(timeout)
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + probe_wait + timeout;
        let fail = |what: &str, f: Failure| {
            let exit = process
                .as_ref()
                .and_then(|p| p.exit_status(Duration::from_millis(300)));
            let exited = if exit.is_some() {
                format!("; it exited ({})", describe_status(exit))
            } else {
                String::new()
            };
            let tail = process
                .as_ref()
                .map(|p| format!("; {}", p.stderr_tail()))
                .unwrap_or_default();
            let failure = match (f, &unreachable) {
                (Failure::TimedOut(_), Some(why)) => format!(
                    "it did not answer {what} within {} s: {why}",
                    timeout.as_secs()
                ),
                (Failure::TimedOut(_), None) => format!(
                    "it did not answer {what} within {} s (start_timeout_seconds)",
                    timeout.as_secs()
                ),
                (other, _) => format!("{what} failed: {other}"),
            };
            format!("{failure}{exited}{tail}")
        };
        let opening = if known.is_none() {
            "server/discover or initialize"
        } else {
            "initialize"
        };
        let era = match probe::negotiate(&client, deadline, known, probe_wait) {
            Ok(Negotiated::Ready(era, how)) => {
                if known.is_none() {
                    let revision = match era {
                        Era::Stateless => era::REVISION,
                        Era::Handshake => "the handshake era",
                    };
                    tracing::info!(
                        server = %self.name,
                        "server {} speaks {revision}: {how}",
                        self.name
                    );
                }
                era
            }
            Ok(Negotiated::Restart(why)) => {
                stop_process(&process, Duration::from_millis(200));
                return Ok(Attempt::ProbeEndedIt(why));
            }
            Err(f) => return Err(fail(opening, f)),
        };
        if era == Era::Stateless
            && let Err(f) = client.listen()
        {
            return Err(fail("subscriptions/listen", f));
        }
        let tools = match client.list_tools(deadline) {
            Ok(t) => t,
            Err(f) => return Err(fail("tools/list", f)),
        };
        Ok(Attempt::Started(
            Box::new(Instance { process, client }),
            tools,
        ))
    }

    /// The live instance, started again (once per step) when the last one died.
    fn instance(&self) -> Result<Arc<Instance>, CallFailure> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = current.as_ref()
            && i.client.down().is_none()
        {
            return Ok(i.clone());
        }
        let status = current
            .as_ref()
            .map(|i| status(&i.process, Duration::from_millis(300)))
            .unwrap_or_else(|| "not running".into());
        if self.restarts.load(Ordering::SeqCst) >= MAX_RESTARTS {
            return Err(format!(
                "server {} is down ({status}) and was restarted once already in this step; its \
                 tools are unavailable for the rest of the step, the other tools still work",
                self.name
            ));
        }
        self.restarts.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(
            server = %self.name,
            "server {} is down ({status}); starting it again (once per step)",
            self.name
        );
        if let Some(old) = current.take() {
            old.client.close();
            stop_process(&old.process, Duration::from_millis(200));
        }
        match self.launch() {
            Ok((instance, _tools)) => {
                let instance = Arc::new(instance);
                *current = Some(instance.clone());
                // What it offers now is checked as on a list change (on a thread of its
                // own: the check asks this link, whose lock is held here).
                let check = self.list_changed.clone();
                let _ = std::thread::Builder::new()
                    .name("awf-server-relist".into())
                    .spawn(move || check());
                Ok(instance)
            }
            Err(why) => Err(format!(
                "server {} is down ({status}) and could not be started again: {why}",
                self.name
            )),
        }
    }

    /// `tools/call` of upstream `tool`, until `deadline` or `cancelled()`.
    pub fn call(
        &self,
        tool: &str,
        arguments: &Value,
        timeout: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Value, CallFailure> {
        let instance = self.instance()?;
        let params = serde_json::json!({"name": tool, "arguments": arguments});
        let deadline = Instant::now() + timeout;
        match instance
            .client
            .request("tools/call", Some(params), deadline, cancelled)
        {
            Ok(v) => Ok(v),
            Err(Failure::TimedOut(_)) => Err(format!(
                "{tool} of server {} did not answer within {} s and was cancelled (the server \
                 was sent notifications/cancelled); raise timeout_seconds of the server, or ask \
                 for less",
                self.name,
                timeout.as_secs()
            )),
            Err(Failure::Cancelled) => Err(format!("{tool} was cancelled")),
            Err(Failure::Gone(why)) => Err(format!(
                "server {} went down during this call ({why}; {}); it is started again at the \
                 next call, once per step",
                self.name,
                status(&instance.process, Duration::from_millis(500))
            )),
            Err(Failure::Rpc { code, message, .. }) => Err(format!(
                "server {} refused the call to {tool}: {message} ({code})",
                self.name
            )),
            Err(Failure::InputRequired(what)) => Err(format!(
                "server {} asked for input before it would finish {tool}: {what}; awf does not \
                 answer such requests yet (2026-07-28's multi round-trip requests), so the call \
                 was not completed",
                self.name
            )),
            Err(Failure::Era(why)) => Err(format!("server {}: {why}", self.name)),
            Err(Failure::Malformed(why)) => Err(format!(
                "server {} answered the call to {tool} with {why}",
                self.name
            )),
        }
    }

    /// The server's tools as it lists them now.
    pub fn list_tools(&self) -> Result<Vec<Value>, CallFailure> {
        let instance = self.instance()?;
        instance
            .client
            .list_tools(Instant::now() + self.start_timeout())
            .map_err(|f| format!("tools/list of server {} failed: {f}", self.name))
    }

    /// Sends `notifications/cancelled`-free end: closes its input, then stops it.
    pub fn stop(&self, grace: Duration) {
        if let Some(i) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            i.client.close();
            if let Some(p) = &i.process
                && p.exit_status(grace).is_none()
            {
                p.stop(grace);
            }
        }
    }
}
