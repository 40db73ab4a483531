//! The relay's front door: one thread accepts every connection and reads its request
//! head, all of them at once (poll), by a deadline for the whole head; only a request the
//! head lets through gets a thread of its own, and a step's route has at most
//! [`Limits::per_route`] of them. A slow or silent connection costs a descriptor and a
//! head's bytes, never a thread, and when [`Limits::open`] connections wait at once the
//! oldest is closed for the newest: a client that sends its head at once (as an agent
//! CLI does) is read the moment it arrives, so a flood cannot keep it out.
//!
//! Refusals are answered from this thread too, and what the client still sends is read
//! and dropped for [`super::LINGER`] before the close (a close with bytes unread resets
//! the connection, and the reset can destroy the answer before it is read).

use super::workers::Workers;
use super::{Admitted, LINGER, Lease, Limits, MAX_HEAD, RawHead, parse_head, reply};
use crate::telemetry::otel::OtelExporter;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections accepted per turn of the loop, so heads already sent are read between
/// the accepts of a flood.
const ACCEPTS_PER_TURN: usize = 64;

struct Waiting {
    conn: TcpStream,
    /// The head's bytes so far; None: answered, the rest is read and dropped.
    head: Option<Vec<u8>>,
    deadline: Instant,
}

type Routes = Arc<Mutex<HashMap<String, Arc<Lease>>>>;

/// What the front door hands a request on to.
struct Door<'a> {
    routes: &'a Routes,
    exporter: &'a Arc<Option<Arc<OtelExporter>>>,
    workers: &'a Workers,
}

/// Runs the front door on `listener` until the process ends.
pub(super) fn run(
    listener: TcpListener,
    routes: Routes,
    exporter: Arc<Option<Arc<OtelExporter>>>,
    limits: Limits,
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut waiting: Vec<Waiting> = Vec::new();
    let workers = Workers::default();
    let door = Door {
        routes: &routes,
        exporter: &exporter,
        workers: &workers,
    };
    loop {
        let now = Instant::now();
        let timeout = waiting
            .iter()
            .map(|w| w.deadline.saturating_duration_since(now))
            .min()
            .map_or(-1, |d| d.as_millis().min(60_000) as i32 + 1);
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(waiting.iter().map(|w| w.conn.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a live array of `fds.len()` pollfd records.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let ready: Vec<bool> = fds[1..].iter().map(|p| p.revents != 0).collect();
        let mut kept = Vec::with_capacity(waiting.len());
        for (w, ready) in waiting.into_iter().zip(ready) {
            if let Some(w) = step(w, ready, &door, limits) {
                kept.push(w);
            }
        }
        waiting = kept;
        if fds[0].revents != 0 {
            for _ in 0..ACCEPTS_PER_TURN {
                match listener.accept() {
                    Ok((conn, _)) => {
                        if conn.set_nonblocking(true).is_err() {
                            continue;
                        }
                        let _ = conn.set_nodelay(true);
                        if waiting.len() >= limits.open {
                            // The oldest waiting connection makes room for the newest.
                            let _ = waiting.remove(0).conn.shutdown(Shutdown::Both);
                        }
                        let w = Waiting {
                            conn,
                            head: Some(Vec::new()),
                            deadline: Instant::now() + limits.head_deadline,
                        };
                        // An agent sends its head with the connection: read it now
                        // rather than after another poll.
                        if let Some(w) = step(w, true, &door, limits) {
                            waiting.push(w);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        // Out of descriptors, say: free one, or wait a moment.
                        if !waiting.is_empty() {
                            let _ = waiting.remove(0).conn.shutdown(Shutdown::Both);
                        } else {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// One waiting connection after a poll: still waiting, or gone (answered, handed to a
/// thread, or closed).
fn step(mut w: Waiting, ready: bool, door: &Door, limits: Limits) -> Option<Waiting> {
    let expired = Instant::now() >= w.deadline;
    let Some(head) = w.head.as_mut() else {
        // Answered: drop what comes until the client closes or the time is up.
        let mut sink = [0u8; 16 * 1024];
        loop {
            match (&w.conn).read(&mut sink) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        return (!expired).then_some(w);
    };
    if ready {
        let mut chunk = [0u8; 8192];
        loop {
            let room = (MAX_HEAD - head.len()).min(chunk.len());
            match (&w.conn).read(&mut chunk[..room]) {
                Ok(0) => return None,
                Ok(n) => {
                    head.extend_from_slice(&chunk[..n]);
                    match parse_head(head) {
                        Ok(Some(raw)) => return hand_on(w, raw, door),
                        Ok(None) if head.len() >= MAX_HEAD => {
                            return answer(w, 431, plain("the request head is over 64 KiB"));
                        }
                        Ok(None) => {}
                        Err((status, why)) => return answer(w, status, plain(&why)),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }
    if expired {
        let why = format!(
            "the request head did not come within {} s",
            limits.head_deadline.as_secs_f64()
        );
        reply(&w.conn, 408, &plain(&why));
        let _ = w.conn.shutdown(Shutdown::Both);
        return None;
    }
    Some(w)
}

fn plain(why: &str) -> Value {
    json!({"error": {"message": format!("awf relay: {why}")}})
}

/// Answers the connection from here and keeps it to drop what the client still sends.
fn answer(mut w: Waiting, status: u16, body: Value) -> Option<Waiting> {
    reply(&w.conn, status, &body);
    let _ = w.conn.shutdown(Shutdown::Write);
    w.head = None;
    w.deadline = Instant::now() + LINGER;
    Some(w)
}

/// A whole head: refused from here, or its request handed to a thread of its own (one
/// waiting in the pool when there is one, so no thread starts on the way to its answer).
fn hand_on(w: Waiting, raw: RawHead, door: &Door) -> Option<Waiting> {
    match super::judge(raw, door.routes) {
        Err((status, body)) => answer(w, status, body),
        Ok(admitted) => {
            if w.conn.set_nonblocking(false).is_err() {
                return None;
            }
            let exporter = door.exporter.clone();
            let conn = w.conn;
            // A thread that cannot start drops its request unanswered; its claim stays
            // taken (its finish never runs), which errs toward refusing.
            door.workers.run(Box::new(move || {
                let Admitted {
                    lease,
                    head,
                    wire,
                    claim,
                    slot,
                } = admitted;
                super::forward(conn, &lease, head, wire, claim, (*exporter).as_ref());
                drop(slot);
            }));
            None
        }
    }
}
