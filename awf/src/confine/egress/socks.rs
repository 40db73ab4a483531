//! SOCKS5 (RFC 1928) on the proxy's port, for tools that speak SOCKS only (`ssh` through
//! `nc -X 5`, `socks5h://` proxy URLs): the greeting, without authentication (the port is
//! the call's own), and one CONNECT request, by host name or address. What follows is the
//! proxy's, as for an HTTP CONNECT: the same allow list, the same checks of the tunnel's
//! first bytes, the same records.
//!
//! Names are resolved by the proxy (`socks5h`); a client that resolves them itself finds
//! no DNS in the sandbox.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, TcpStream};
use std::time::Instant;

/// The first byte of a SOCKS5 greeting.
pub const VERSION: u8 = 5;

/// The reply that opens the tunnel (the bound address is not told: none of the client's
/// business).
pub const SUCCEEDED: [u8; 10] = [VERSION, 0, 0, 1, 0, 0, 0, 0, 0, 0];

/// Reply codes (RFC 1928 §6).
pub mod reply {
    pub const GENERAL_FAILURE: u8 = 1;
    pub const NOT_ALLOWED: u8 = 2;
    pub const HOST_UNREACHABLE: u8 = 4;
    pub const COMMAND_NOT_SUPPORTED: u8 = 7;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 8;
}

/// The request of a client: where to, and any bytes it sent after it.
#[derive(Debug)]
pub struct Connect {
    /// Lowercase, no trailing dot; an address as text, IPv6 without brackets.
    pub host: String,
    pub port: u16,
    pub rest: Vec<u8>,
}

/// Reads the greeting and the request from `client`, whose first bytes are `first`;
/// answers the greeting, and a request that cannot be served. An error says why the
/// handshake ended without a request (its reply is sent already).
pub fn handshake(client: &TcpStream, first: Vec<u8>, deadline: Instant) -> Result<Connect, String> {
    let mut wire = Wire {
        client,
        buf: first,
        pos: 0,
        deadline,
    };
    let refuse = |code: u8, reason: String| {
        send(client, &reply_with(code));
        reason
    };

    let head = wire.take(2, "greeting")?;
    let methods = head[1] as usize;
    let methods = wire.take(methods, "greeting")?;
    if !methods.contains(&0) {
        send(client, &[VERSION, 0xff]);
        return Err(
            "the SOCKS5 client offers no method without authentication, the only one served".into(),
        );
    }
    send(client, &[VERSION, 0]);

    let request = wire.take(4, "request")?;
    let (version, command, address_type) = (request[0], request[1], request[3]);
    if version != VERSION {
        return Err(refuse(
            reply::GENERAL_FAILURE,
            format!("the SOCKS request has version {version}, not 5"),
        ));
    }
    if command != 1 {
        return Err(refuse(
            reply::COMMAND_NOT_SUPPORTED,
            format!("SOCKS command {command} is not served: only CONNECT (1) is"),
        ));
    }
    let host = match address_type {
        1 => {
            let a: [u8; 4] = wire.take(4, "request")?.try_into().unwrap();
            Ipv4Addr::from(a).to_string()
        }
        4 => {
            let a: [u8; 16] = wire.take(16, "request")?.try_into().unwrap();
            Ipv6Addr::from(a).to_string()
        }
        3 => {
            let len = wire.take(1, "request")?[0] as usize;
            let name = wire.take(len, "request")?;
            let ok = !name.is_empty()
                && name
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
            if !ok {
                return Err(refuse(
                    reply::GENERAL_FAILURE,
                    format!(
                        "the SOCKS request names \"{}\", not a host name",
                        String::from_utf8_lossy(&name).escape_debug()
                    ),
                ));
            }
            let lower = String::from_utf8(name).unwrap().to_ascii_lowercase();
            lower.strip_suffix('.').unwrap_or(&lower).to_string()
        }
        other => {
            return Err(refuse(
                reply::ADDRESS_TYPE_NOT_SUPPORTED,
                format!("SOCKS address type {other} is not served"),
            ));
        }
    };
    let port = wire.take(2, "request")?;
    let port = u16::from_be_bytes([port[0], port[1]]);
    Ok(Connect {
        host,
        port,
        rest: wire.buf.split_off(wire.pos),
    })
}

/// A refusal's reply for the proxy's own HTTP status of it.
pub fn reply_for(status: u16) -> [u8; 10] {
    reply_with(match status {
        403 => reply::NOT_ALLOWED,
        502 => reply::HOST_UNREACHABLE,
        _ => reply::GENERAL_FAILURE,
    })
}

fn reply_with(code: u8) -> [u8; 10] {
    let mut r = SUCCEEDED;
    r[1] = code;
    r
}

fn send(mut client: &TcpStream, bytes: &[u8]) {
    let _ = client.write_all(bytes);
}

/// The client's bytes, read as the handshake needs them, by a deadline.
struct Wire<'a> {
    client: &'a TcpStream,
    buf: Vec<u8>,
    pos: usize,
    deadline: Instant,
}

impl Wire<'_> {
    /// The next `n` bytes of the `part` being read.
    fn take(&mut self, n: usize, part: &str) -> Result<Vec<u8>, String> {
        while self.buf.len() - self.pos < n {
            let left = self
                .deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("the SOCKS5 {part} did not come within 10 s"))?;
            let _ = self.client.set_read_timeout(Some(left));
            let mut chunk = [0u8; 512];
            match (&*self.client).read(&mut chunk) {
                Ok(0) => return Err(format!("the client closed inside its SOCKS5 {part}")),
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return Err(format!("client gone: {e}")),
            }
        }
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    /// Runs the handshake on a loopback connection whose client writes `parts`, each
    /// on its own; returns what the handshake made of it and what the client got back.
    fn run(parts: &[&[u8]]) -> (Result<Connect, String>, Vec<u8>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
        let writer = std::thread::spawn(move || {
            for p in parts {
                // The handshake may end before the last parts (bytes past the request).
                let _ = c.write_all(&p);
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.shutdown(std::net::Shutdown::Write);
            let mut back = Vec::new();
            let _ = c.read_to_end(&mut back);
            back
        });
        let mut first = vec![0u8; 1];
        (&server).read_exact(&mut first).unwrap();
        let out = handshake(&server, first, Instant::now() + Duration::from_secs(10));
        // Read on to the client's end, so closing resets nothing it has yet to read.
        let _ = server.set_read_timeout(None);
        let _ = std::io::copy(&mut &server, &mut std::io::sink());
        drop(server);
        (out, writer.join().unwrap())
    }

    #[test]
    fn a_connect_by_name_in_any_pieces() {
        let name = b"Crates.IO.";
        // Two methods offered (2, 0); CONNECT by name; the tunnel's first bytes behind.
        let mut all = vec![5, 2, 2, 0, 5, 1, 0, 3, name.len() as u8];
        all.extend_from_slice(name);
        all.extend_from_slice(&443u16.to_be_bytes());
        all.extend_from_slice(b"\x16hello");
        for step in [1, 3, all.len()] {
            let parts: Vec<&[u8]> = all.chunks(step).collect();
            let (out, back) = run(&parts);
            let c = out.unwrap();
            assert_eq!((c.host.as_str(), c.port), ("crates.io", 443));
            // What came past the request in the reads that carried it.
            assert!(b"\x16hello".starts_with(&c.rest), "step {step}");
            if step == all.len() {
                assert_eq!(c.rest, b"\x16hello");
            }
            assert_eq!(back, [5, 0], "the greeting's answer, nothing else yet");
        }
    }

    #[test]
    fn a_connect_by_address() {
        let mut v4 = vec![5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 5];
        v4.extend_from_slice(&5000u16.to_be_bytes());
        let c = run(&[&v4]).0.unwrap();
        assert_eq!((c.host.as_str(), c.port), ("10.0.0.5", 5000));
        let mut v6 = vec![5, 1, 0, 5, 1, 0, 4];
        v6.extend_from_slice(&"fd00::5".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&80u16.to_be_bytes());
        let c = run(&[&v6]).0.unwrap();
        assert_eq!((c.host.as_str(), c.port), ("fd00::5", 80));
    }

    #[test]
    fn what_is_not_served_is_answered_with_its_code_and_named() {
        let cases: &[(&[u8], &[u8], &str)] = &[
            (&[5, 1, 2], &[5, 0xff], "no method without authentication"),
            (
                &[5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80],
                &[5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0],
                "command 2 is not served",
            ),
            (
                &[5, 1, 0, 5, 1, 0, 9],
                &[5, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0],
                "address type 9",
            ),
            (
                &[5, 1, 0, 5, 1, 0, 3, 3, b'a', b'/', b'b', 0, 80],
                &[5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0],
                "\"a/b\", not a host name",
            ),
            (
                &[5, 1, 0, 4, 1, 0, 1],
                &[5, 0, 5, 1, 0, 1, 0, 0, 0, 0, 0, 0],
                "version 4, not 5",
            ),
            (
                &[5, 1, 0, 5, 1, 0, 3, 9, b'a'],
                &[5, 0],
                "closed inside its SOCKS5 request",
            ),
        ];
        for (sent, want, why) in cases {
            let (out, back) = run(&[sent]);
            let err = out.unwrap_err();
            assert!(err.contains(why), "{sent:?}: {err}");
            assert_eq!(&back, want, "{sent:?}");
        }
    }

    #[test]
    fn refusals_of_the_proxy_map_to_socks_codes() {
        assert_eq!(reply_for(403)[1], reply::NOT_ALLOWED);
        assert_eq!(reply_for(502)[1], reply::HOST_UNREACHABLE);
        assert_eq!(reply_for(400)[1], reply::GENERAL_FAILURE);
        assert_eq!(reply_for(403)[..2], [5, 2]);
    }
}
