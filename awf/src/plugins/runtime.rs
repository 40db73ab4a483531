//! The sync/async boundary of the plugin host. awf's tool path is blocking (`mcpserver`
//! has no runtime; `ToolProvider::call` blocks), while tonic needs Tokio. So the host owns
//! one small runtime, made only when a plugin is started (serving builtins alone starts
//! none), with a single worker thread that drives the gRPC connections; a blocking caller
//! hands it a future and waits on a plain channel, which lets it also give up at a deadline
//! or when its call is cancelled.

use crate::error::{AwfError, codes};
use crate::tools::Cancellation;
use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
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
    /// The future panicked (a bug, in tonic or here).
    Panicked,
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

    /// Runs `future` on the runtime and blocks this (non-runtime) thread until it ends,
    /// `deadline` passes or `cancel` fires; in the last two cases the future is dropped,
    /// which for a gRPC call resets its stream.
    pub fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
        deadline: Option<Instant>,
        cancel: Option<&Cancellation>,
    ) -> Result<T, Interrupted> {
        let (tx, rx) = mpsc::sync_channel(1);
        let task = self.runtime.spawn(async move {
            let _ = tx.send(future.await);
        });
        loop {
            let now = Instant::now();
            let mut wait = if cancel.is_some() {
                CANCEL_POLL
            } else {
                Duration::MAX
            };
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(now));
            }
            let got = if wait == Duration::MAX {
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                rx.recv_timeout(wait)
            };
            match got {
                Ok(value) => return Ok(value),
                Err(RecvTimeoutError::Disconnected) => return Err(Interrupted::Panicked),
                Err(RecvTimeoutError::Timeout) => {
                    if cancel.is_some_and(Cancellation::is_cancelled) {
                        task.abort();
                        return Err(Interrupted::Cancelled);
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        task.abort();
                        return Err(Interrupted::TimedOut);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn values_deadlines_and_cancellation() {
        let rt = PluginRuntime::new().unwrap();
        assert_eq!(rt.run(async { 7 }, None, None), Ok(7));
        let never = std::future::pending::<()>;
        let past = Some(Instant::now());
        assert_eq!(rt.run(never(), past, None), Err(Interrupted::TimedOut));
        let flag = Arc::new(AtomicBool::new(true));
        let f = flag.clone();
        let cancel = Cancellation::new(move || f.load(Ordering::SeqCst));
        assert_eq!(
            rt.run(never(), None, Some(&cancel)),
            Err(Interrupted::Cancelled)
        );
        flag.store(false, Ordering::SeqCst);
        assert_eq!(rt.run(async { 1 }, None, Some(&cancel)), Ok(1));
        assert_eq!(
            rt.run(
                async {
                    if true {
                        panic!("boom")
                    }
                },
                None,
                None
            ),
            Err(Interrupted::Panicked)
        );
    }
}
