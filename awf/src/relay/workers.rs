//! The threads that serve admitted requests. Starting a thread costs more than the
//! relay's whole share of a small request's time to first byte, and the front door can
//! only start it once the head is read, so a thread whose request has ended waits a
//! while for the next one instead of exiting. At most [`MAX_IDLE`] wait at once and each
//! exits after [`IDLE_EXIT`] without work: the pool holds no more threads than the
//! requests in flight (bounded per route) and those few.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Threads kept waiting for a request: an agent CLI's requests mostly come one at a
/// time, its subagents' a few at once.
const MAX_IDLE: usize = 4;
/// How long a thread waits for a request before it exits: longer than the tool calls an
/// agent usually makes between two model turns.
const IDLE_EXIT: Duration = Duration::from_secs(60);

/// A request's work, run on a thread of its own.
pub(super) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub(super) struct Workers {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Jobs handed to waiting threads, not yet taken.
    jobs: VecDeque<Job>,
    /// Threads waiting that no job has been handed to yet.
    idle: usize,
}

impl Workers {
    /// Runs `job` on a waiting thread, or on a new one when none waits. A thread that
    /// cannot start drops its job.
    pub(super) fn run(&self, job: Job) {
        {
            let mut s = self.shared.state.lock().unwrap();
            if s.idle > 0 {
                // This thread is now spoken for: the next job goes to another.
                s.idle -= 1;
                s.jobs.push_back(job);
                drop(s);
                self.shared.wake.notify_one();
                return;
            }
        }
        let shared = self.shared.clone();
        let _ = std::thread::Builder::new()
            .name("awf-relay-conn".into())
            .spawn(move || work(&shared, job));
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.shared.state.lock().unwrap().idle
    }
}

fn work(shared: &Shared, first: Job) {
    let mut job = first;
    loop {
        job();
        let mut s = shared.state.lock().unwrap();
        if s.idle >= MAX_IDLE {
            return;
        }
        s.idle += 1;
        let deadline = Instant::now() + IDLE_EXIT;
        job = loop {
            // A job in the queue was counted against some waiting thread; whichever
            // takes it, the count stays right.
            if let Some(j) = s.jobs.pop_front() {
                break j;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.idle -= 1;
                return;
            }
            s = shared.wake.wait_timeout(s, left).unwrap().0;
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_thread_whose_job_ended_takes_the_next_and_no_more_than_max_idle_wait() {
        let workers = Workers::default();
        let (done, finished) = mpsc::channel();
        let (go, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        // MAX_IDLE + 2 jobs at once, each on its own thread: they all wait on the gate.
        for _ in 0..MAX_IDLE + 2 {
            let (done, gate) = (done.clone(), gate.clone());
            workers.run(Box::new(move || {
                let _ = gate.lock().unwrap().recv();
                done.send(std::thread::current().id()).unwrap();
            }));
        }
        for _ in 0..MAX_IDLE + 2 {
            go.send(()).unwrap();
        }
        let ids: Vec<_> = (0..MAX_IDLE + 2)
            .map(|_| finished.recv().unwrap())
            .collect();
        // The threads settle: MAX_IDLE of them wait, the others exit.
        while workers.idle() < MAX_IDLE {
            std::thread::yield_now();
        }
        assert_eq!(workers.idle(), MAX_IDLE);
        let done2 = done.clone();
        workers.run(Box::new(move || {
            done2.send(std::thread::current().id()).unwrap();
        }));
        let next = finished.recv().unwrap();
        assert!(
            ids.contains(&next),
            "the job ran on a new thread, not a waiting one"
        );
    }
}
