//! An in-memory transport: two connected ends, for testing a server in-process.
//!
//! ```
//! use std::io::{BufRead, BufReader, Write};
//! use mcpserver::{memory, Server};
//!
//! let server = Server::builder("demo", "1").build().unwrap();
//! let (client, server_end) = memory::pair();
//! let serving = std::thread::spawn(move || {
//!     let (reader, writer) = server_end.split();
//!     server.serve(reader, writer)
//! });
//! let (mut lines, mut to_server) = { let (r, w) = client.split(); (BufReader::new(r), w) };
//! to_server.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n").unwrap();
//! let mut answer = String::new();
//! lines.read_line(&mut answer).unwrap();
//! assert_eq!(answer, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
//! drop(to_server); // end of input
//! serving.join().unwrap().unwrap();
//! ```

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct Pipe {
    state: Mutex<PipeState>,
    ready: Condvar,
}

#[derive(Default)]
struct PipeState {
    bytes: VecDeque<u8>,
    closed: bool,
}

/// The reading half of an in-memory connection.
pub struct MemoryReader {
    pipe: Arc<Pipe>,
}

/// The writing half of an in-memory connection; dropping it ends the peer's input.
pub struct MemoryWriter {
    pipe: Arc<Pipe>,
}

/// One end of an in-memory connection.
pub struct Endpoint {
    reader: MemoryReader,
    writer: MemoryWriter,
}

impl Endpoint {
    /// The end's reading and writing halves.
    pub fn split(self) -> (MemoryReader, MemoryWriter) {
        (self.reader, self.writer)
    }
}

/// Two connected ends: what one writes, the other reads.
pub fn pair() -> (Endpoint, Endpoint) {
    let a_to_b = Arc::new(Pipe::default());
    let b_to_a = Arc::new(Pipe::default());
    (
        Endpoint {
            reader: MemoryReader {
                pipe: b_to_a.clone(),
            },
            writer: MemoryWriter {
                pipe: a_to_b.clone(),
            },
        },
        Endpoint {
            reader: MemoryReader { pipe: a_to_b },
            writer: MemoryWriter { pipe: b_to_a },
        },
    )
}

impl Read for MemoryReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut state = self.pipe.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.bytes.is_empty() && !state.closed {
            state = self
                .pipe
                .ready
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        let n = buf.len().min(state.bytes.len());
        for (slot, byte) in buf.iter_mut().zip(state.bytes.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

impl Write for MemoryWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = self.pipe.state.lock().unwrap_or_else(|e| e.into_inner());
        state.bytes.extend(buf);
        self.pipe.ready.notify_all();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        let mut state = self.pipe.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        self.pipe.ready.notify_all();
    }
}
