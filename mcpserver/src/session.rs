//! Serving one client over a reader and a writer: reading lines, the threads that run
//! calls, when answers are flushed, drain and stop. What each line means is
//! `methods.rs`'s business.
//!
//! Leader/followers over one reader: one thread at a time (the leader) reads. It
//! handles what it read itself, tools calls included, so a quick call costs no hand-off
//! between threads. When a call runs for longer than a tick (about a millisecond), a
//! monitor thread passes the leadership to an idle worker (spawning one, up to the
//! concurrency bound), which goes on reading: `ping` is answered and other calls run
//! while the slow one works. Never deaf: there is always one thread more than the bound
//! of calls, so that with `max_concurrency` calls running one still reads, answers `ping`,
//! acts on `notifications/cancelled` and end of input, and refuses a further call at once
//! with `SERVER_BUSY` (-32001, naming the bound). Memory stays bounded: nothing waits
//! unanswered beyond the calls that run.
//!
//! Answers are written whole under a lock. The leader flushes with an answer when no
//! further line is buffered (so a flood of requests gets batched writes, and a lone
//! request one write); a worker that is no longer leader flushes at once.
//!
//! `notifications/tools/list_changed` (with `notify_list_changed`) is written by the
//! monitor: the gate rings its doorbell, and it writes the line under the same lock and
//! flushes, while the leader may be blocked reading. So that it is there to do so, a
//! session that notifies starts its monitor when it answers `initialize` or
//! acknowledges a `subscriptions/listen`. When the session ends, every open
//! `subscriptions/listen` is answered before the last flush.

use std::cell::Cell;
use std::io::{self, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::{self, Scope};
use std::time::Duration;

use crate::doorbell::Doorbell;
use crate::framing::{Frame, LineReader};
use crate::gate::write_change;
use crate::methods::{Flow, Link, Protocol, lock};
use crate::state::{Inner, StopReason};

/// How long a call may keep the leadership before another thread takes over reading,
/// at first. While no call outlives a tick the monitor looks less often (up to
/// `MAX_TICK`), so quick calls are not disturbed by its wake-ups; a slow call brings it
/// back to `TICK`.
const TICK: Duration = Duration::from_millis(1);
const MAX_TICK: Duration = Duration::from_millis(16);
/// Idle ticks after which the monitor sleeps until the next call.
const MONITOR_IDLE_TICKS: u32 = 64;
const WRITE_BUFFER: usize = 8 * 1024;

struct Coord {
    /// Some thread holds the leadership (reads, or runs what it read).
    leader: bool,
    idle: usize,
    workers: usize,
    finished: bool,
    reason: Option<StopReason>,
    error: Option<io::Error>,
}

pub(crate) struct Session<'s, R, W: Write> {
    inner: &'s Inner,
    protocol: Protocol<'s>,
    reader: Mutex<LineReader<R>>,
    out: Mutex<BufWriter<W>>,
    coord: Mutex<Coord>,
    idle_cv: Condvar,
    /// Sequence number of the call the leader runs itself, 0 when none.
    leader_call: AtomicU64,
    next_seq: AtomicU64,
    /// The monitor thread was started (only the leader starts it).
    monitor: AtomicBool,
    monitor_sleeping: AtomicBool,
    /// Another complete line waits in the reader: the leader may leave its answer in
    /// the buffer (set by the leader after each read).
    more_buffered: AtomicBool,
    /// Answers wait in the output buffer.
    unflushed: AtomicBool,
    /// Handlers running now.
    running: AtomicUsize,
}

/// The link a leading thread lends the methods: it writes into the session's output
/// and runs handlers under the monitor's watch.
struct Leading<'scope, 'env, 's, R, W: Write> {
    session: &'scope Session<'s, R, W>,
    scope: &'scope Scope<'scope, 'env>,
    /// The leadership passed to another thread while this one ran a call.
    demoted: Cell<bool>,
}

impl<R: Read + Send, W: Write + Send> Link for Leading<'_, '_, '_, R, W> {
    type Out = BufWriter<W>;

    #[inline]
    fn write(&self, body: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>) -> Flow {
        // A worker that is no longer leader flushes at once; the leader when no other
        // line is buffered.
        self.session.write(body, self.demoted.get())
    }

    #[inline]
    fn run<T>(&self, handler: impl FnOnce() -> T) -> T {
        let s = self.session;
        // Only the leader numbers calls (no read-modify-write needed).
        let seq = s.next_seq.load(Ordering::Relaxed);
        s.next_seq.store(seq + 1, Ordering::Relaxed);
        s.leader_call.store(seq, Ordering::SeqCst);
        // Watched at every bound, 1 too: another thread takes over reading.
        s.watch(self.scope);
        s.running.fetch_add(1, Ordering::SeqCst);
        let value = handler();
        s.running.fetch_sub(1, Ordering::SeqCst);
        let still_leader = s
            .leader_call
            .compare_exchange(seq, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !still_leader {
            self.demoted.set(true);
        }
        value
    }

    fn shut_down(&self) {
        self.session.finish(StopReason::Shutdown, None);
    }

    fn busy(&self) -> Option<usize> {
        let running = self.session.running.load(Ordering::SeqCst);
        (running >= self.session.inner.max_concurrency).then_some(running)
    }

    fn listening(&self) {
        let s = self.session;
        // Without a monitor (no thread to be had), the notification waits for the
        // first call, which tries again to start one.
        if !s.monitor.load(Ordering::Relaxed) {
            s.start_monitor(self.scope);
        }
    }
}

impl<'s, R: Read + Send, W: Write + Send> Session<'s, R, W> {
    pub(crate) fn new(inner: &'s Inner, reader: R, writer: W) -> Self {
        Session {
            inner,
            protocol: Protocol::new(inner),
            reader: Mutex::new(LineReader::new(reader, inner.max_message_size)),
            out: Mutex::new(BufWriter::with_capacity(WRITE_BUFFER, writer)),
            coord: Mutex::new(Coord {
                leader: false,
                idle: 0,
                workers: 1,
                finished: false,
                reason: None,
                error: None,
            }),
            idle_cv: Condvar::new(),
            leader_call: AtomicU64::new(0),
            next_seq: AtomicU64::new(1),
            monitor: AtomicBool::new(false),
            monitor_sleeping: AtomicBool::new(false),
            more_buffered: AtomicBool::new(false),
            unflushed: AtomicBool::new(false),
            running: AtomicUsize::new(0),
        }
    }

    /// Serves until end of input, `shutdown` or a stop; returns after every request
    /// read has been answered and the writer flushed.
    pub(crate) fn run(self) -> io::Result<StopReason> {
        thread::scope(|scope| self.worker(scope));
        self.protocol.close_subscriptions(&Closing(&self));
        let mut coord = lock(&self.coord);
        let flushed = lock(&self.out).flush();
        if let Some(e) = coord.error.take() {
            return Err(e);
        }
        flushed?;
        Ok(coord.reason.unwrap_or(StopReason::EndOfInput))
    }

    fn worker<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        loop {
            {
                let mut c = lock(&self.coord);
                loop {
                    if c.finished {
                        return;
                    }
                    if !c.leader {
                        c.leader = true;
                        break;
                    }
                    c.idle += 1;
                    c = self.idle_cv.wait(c).unwrap_or_else(|e| e.into_inner());
                    c.idle -= 1;
                }
            }
            self.lead(scope);
        }
    }

    /// Reads and handles lines until the input ends or the leadership passes on.
    fn lead<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        let leading = Leading {
            session: self,
            scope,
            demoted: Cell::new(false),
        };
        let mut line = Vec::new();
        loop {
            if self.inner.stop.requested.load(Ordering::SeqCst) {
                self.finish(StopReason::Stopped, None);
                return;
            }
            let frame = {
                let mut reader = lock(&self.reader);
                let frame = reader.next_frame(&mut || self.flush_unflushed());
                let frame = match frame {
                    Ok(Frame::Line(l)) => {
                        line.clear();
                        line.extend_from_slice(l);
                        Ok(true)
                    }
                    Ok(Frame::TooLong) => Ok(false),
                    Ok(Frame::Eof) => Err(None),
                    Err(e) => Err(Some(e)),
                };
                self.more_buffered
                    .store(reader.has_line(), Ordering::Relaxed);
                frame
            };
            let flow = match frame {
                Ok(true) => self.protocol.handle_line(&leading, &line),
                Ok(false) => self.protocol.too_large(&leading),
                Err(error) => {
                    let reason = if self.inner.stop.requested.load(Ordering::SeqCst) {
                        StopReason::Stopped
                    } else {
                        StopReason::EndOfInput
                    };
                    if let (StopReason::EndOfInput, Some(grace)) =
                        (reason, self.inner.end_of_input_grace)
                        && self.protocol.calls_running()
                    {
                        scope.spawn(move || {
                            let end = std::time::Instant::now() + grace;
                            while self.protocol.calls_running() {
                                let now = std::time::Instant::now();
                                if now >= end {
                                    self.protocol.cancel_all();
                                    break;
                                }
                                thread::sleep((end - now).min(Duration::from_millis(20)));
                            }
                        });
                    }
                    self.finish(reason, error);
                    Flow::Finished
                }
            };
            if flow == Flow::Finished {
                return;
            }
            if leading.demoted.replace(false) {
                // Lead again if nobody else does, else join the idle workers.
                let mut c = lock(&self.coord);
                if c.leader || c.finished {
                    return;
                }
                c.leader = true;
            }
        }
    }

    fn finish(&self, reason: StopReason, error: Option<io::Error>) {
        let mut c = lock(&self.coord);
        if !c.finished {
            c.finished = true;
            c.reason = Some(reason);
        }
        if c.error.is_none() {
            c.error = error;
        }
        c.leader = false;
        drop(c);
        self.idle_cv.notify_all();
        self.doorbell().ring();
    }

    fn doorbell(&self) -> &Doorbell {
        &self.protocol.listener.doorbell
    }

    /// Makes sure a monitor watches the call the leader just started.
    fn watch<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        if self.monitor.load(Ordering::Relaxed) {
            if self.monitor_sleeping.load(Ordering::SeqCst) {
                self.monitor_sleeping.store(false, Ordering::SeqCst);
                self.doorbell().ring();
            }
        } else {
            self.start_monitor(scope);
        }
    }

    /// Starts the monitor (the leader only, once).
    fn start_monitor<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        self.monitor.store(true, Ordering::Relaxed);
        let spawned = thread::Builder::new()
            .name("mcp-monitor".into())
            .spawn_scoped(scope, move || self.monitor(scope));
        // Without a monitor, calls simply run one at a time.
        if spawned.is_err() {
            self.monitor.store(false, Ordering::Relaxed);
        }
    }

    fn monitor<'scope>(&'scope self, scope: &'scope Scope<'scope, '_>) {
        let mut last = 0;
        let mut quiet = 0;
        let mut tick = TICK;
        loop {
            if lock(&self.coord).finished {
                return;
            }
            if self.announce_list_change() {
                // The gate's ring cut the tick short: wait it out before judging the call
                // (a call is handed on only once it has run for a whole tick).
                self.doorbell().wait(Some(tick));
                continue;
            }
            let current = self.leader_call.load(Ordering::SeqCst);
            if current == 0 {
                quiet += 1;
                tick = (tick * 2).min(MAX_TICK);
                if quiet >= MONITOR_IDLE_TICKS {
                    self.monitor_sleeping.store(true, Ordering::SeqCst);
                    if self.leader_call.load(Ordering::SeqCst) == 0 && !lock(&self.coord).finished {
                        self.doorbell().wait(None);
                    }
                    self.monitor_sleeping.store(false, Ordering::SeqCst);
                    quiet = 0;
                    tick = TICK;
                    // Rung by the gate, maybe: write at once.
                    self.announce_list_change();
                }
            } else {
                quiet = 0;
                if current == last {
                    self.promote(current, scope);
                    tick = TICK;
                } else {
                    tick = (tick * 2).min(MAX_TICK);
                }
            }
            last = current;
            self.doorbell().wait(Some(tick));
        }
    }

    /// The leader has run call `seq` for a tick: hand the reading to another worker.
    fn promote<'scope>(&'scope self, seq: u64, scope: &'scope Scope<'scope, '_>) {
        let mut c = lock(&self.coord);
        // One thread more than the calls that may run: the one that goes on reading.
        if c.finished || (c.idle == 0 && c.workers > self.inner.max_concurrency) {
            return;
        }
        if self
            .leader_call
            .compare_exchange(seq, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        c.leader = false;
        if c.idle > 0 {
            drop(c);
            self.idle_cv.notify_one();
            return;
        }
        c.workers += 1;
        drop(c);
        let spawned = thread::Builder::new()
            .name("mcp-worker".into())
            .spawn_scoped(scope, move || self.worker(scope));
        if spawned.is_err() {
            // No thread: the running call takes the leadership back when it ends.
            lock(&self.coord).workers -= 1;
        }
    }

    /// Writes and flushes `notifications/tools/list_changed` when the gate told of a
    /// change since the last one (the gate tells only once `initialize` was answered).
    /// True when it wrote.
    fn announce_list_change(&self) -> bool {
        let listener = &self.protocol.listener;
        let pending = &listener.pending;
        if !pending.load(Ordering::Relaxed) {
            return false;
        }
        // Taken under the output's lock, as an answer's write takes it: whoever sees the
        // change writes it, before any answer written after it.
        let mut out = lock(&self.out);
        if !pending.swap(false, Ordering::AcqRel) {
            return false;
        }
        let result = write_change(listener, &mut *out).and_then(|()| out.flush());
        // The flush took whatever answers the leader had left in the buffer.
        self.unflushed.store(false, Ordering::Release);
        drop(out);
        if let Err(e) = result {
            self.finish(StopReason::EndOfInput, Some(e));
        }
        true
    }

    /// Flushes answers the leader left in the buffer, before its read blocks.
    fn flush_unflushed(&self) -> io::Result<()> {
        if !self.unflushed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut out = lock(&self.out);
        self.unflushed.store(false, Ordering::Release);
        out.flush()
    }

    /// Writes an answer; `flush` is set by a worker that is no longer leader, and the
    /// leader flushes when no other line is buffered.
    fn write(&self, f: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>, flush: bool) -> Flow {
        let flush = flush || !self.more_buffered.load(Ordering::Relaxed);
        let mut out = lock(&self.out);
        // A change not yet told goes first: a call that changed the tool list (through
        // the gate, on this thread) has its answer after the notification, as the cause
        // before the effect. One load while nothing changed.
        let listener = &self.protocol.listener;
        let told = match listener.pending.load(Ordering::Relaxed)
            && listener.pending.swap(false, Ordering::AcqRel)
        {
            true => write_change(listener, &mut *out),
            false => Ok(()),
        };
        let result = told
            .and_then(|()| f(&mut out))
            .and_then(|()| if flush { out.flush() } else { Ok(()) });
        self.unflushed.store(!flush, Ordering::Release);
        drop(out);
        match result {
            Ok(()) => Flow::Continue,
            Err(e) => {
                // The client can no longer read answers: stop reading too.
                self.finish(StopReason::EndOfInput, Some(e));
                Flow::Finished
            }
        }
    }
}

/// The link of a session that has stopped reading: what is still written at its end
/// (the answers of open subscriptions) goes to the output, flushed by `run`.
struct Closing<'a, 's, R, W: Write>(&'a Session<'s, R, W>);

impl<R: Read + Send, W: Write + Send> Link for Closing<'_, '_, R, W> {
    type Out = BufWriter<W>;

    fn write(&self, body: impl FnOnce(&mut BufWriter<W>) -> io::Result<()>) -> Flow {
        let mut out = lock(&self.0.out);
        match body(&mut out) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Finished,
        }
    }

    fn run<T>(&self, handler: impl FnOnce() -> T) -> T {
        handler()
    }

    fn shut_down(&self) {}
}
