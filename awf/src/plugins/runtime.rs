//! The sync/async boundary of the plugin host. awf's tool path is blocking (`mcpserver`
//! has no runtime; a tool handler blocks), while tonic needs Tokio. So the host owns
//! one small runtime, made only when a plugin is started (serving builtins alone starts
//! none), with a single worker thread that drives the gRPC connections' sockets and the
//! timers; a blocking caller polls its own call's future (`Handle::block_on`), checking
//! its deadline and cancellation flag while it waits.

use crate::error::{AwfError, codes};
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a waiting caller looks at its cancellation flag (it is polled, not signalled).
const CANCEL_POLL: Duration = Duration::from_millis(50);

pub struct PluginRuntime {
    runtime: tokio::runtime::Runtime,
}

/// Why [`PluginRuntime::run`] returned without the future's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupted {
    TimedOut,
    Cancelled,
}

impl PluginRuntime {
    pub fn new() -> Result<PluginRuntime, AwfError> {
        // One worker: plugin traffic is a few calls at a time, and the blocking callers do
        // the waiting; more threads would only cost start-up time and memory.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("awf-plugins")
            .enable_all()
            .build()
            .map_err(|e| {
                AwfError::new(
                    codes::PLUGIN_START,
                    format!("cannot start the plugin host's runtime: {e}"),
                )
            })?;
        Ok(PluginRuntime { runtime })
    }

    /// Runs `future` to completion on this (non-runtime) thread and returns its value, or
    /// gives up when `deadline` passes or `cancelled` says so (the call's cancellation
    /// token, or awf's shutdown); the future is then dropped, which
    /// for a gRPC call resets its stream. The future is polled right here (the runtime's
    /// worker only drives the sockets and timers), which saves a thread hop per call.
    pub fn run<T>(
        &self,
        future: impl Future<Output = T>,
        deadline: Option<Instant>,
        cancelled: Option<&dyn Fn() -> bool>,
    ) -> Result<T, Interrupted> {
        self.runtime.handle().block_on(async {
            let mut future = std::pin::pin!(future);
            if deadline.is_none() && cancelled.is_none() {
                return Ok(future.await);
            }
            loop {
                let now = Instant::now();
                let mut wake = now + CANCEL_POLL;
                if let Some(d) = deadline {
                    wake = wake.min(d);
                }
                if let Ok(value) = tokio::time::timeout_at(wake.into(), &mut future).await {
                    return Ok(value);
                }
                if cancelled.is_some_and(|c| c()) {
                    return Err(Interrupted::Cancelled);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Interrupted::TimedOut);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpserver::CancellationToken;

    #[test]
    fn values_deadlines_and_cancellation() {
        let rt = PluginRuntime::new().unwrap();
        assert_eq!(rt.run(async { 7 }, None, None), Ok(7));
        let never = std::future::pending::<()>;
        let past = Some(Instant::now());
        assert_eq!(rt.run(never(), past, None), Err(Interrupted::TimedOut));
        let token = CancellationToken::new();
        let cancelled = || token.is_cancelled();
        assert_eq!(rt.run(async { 1 }, None, Some(&cancelled)), Ok(1));
        token.cancel();
        assert_eq!(
            rt.run(never(), None, Some(&cancelled)),
            Err(Interrupted::Cancelled)
        );
    }
}
