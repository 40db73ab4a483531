//! The physical limit: a line echo with no protocol work at all. Each line read from
//! stdin is written straight back (the benchmark takes it as the answer), with the
//! same output policy as the floor: flushed when no more input is buffered.

use std::io::{self, BufRead, BufReader, BufWriter, Write};

fn main() -> io::Result<()> {
    let mut input = BufReader::with_capacity(64 * 1024, io::stdin().lock());
    let mut output = BufWriter::with_capacity(64 * 1024, io::stdout().lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return output.flush();
        }
        output.write_all(&line)?;
        if input.buffer().is_empty() {
            output.flush()?;
        }
    }
}
