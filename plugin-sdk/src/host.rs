//! The host side of the handshake: what awf needs to reach a plugin it started.
//!
//! The host starts the plugin with the variables of [`handshake_env`] and a piped stdin that
//! it keeps open (the lifeline), reads one line from the plugin's stdout within its start-up
//! deadline, parses it with [`parse_handshake`], and opens a gRPC channel with [`connect`];
//! the generated clients in [`crate::proto`] then run over that channel. After the plugin
//! died without cleaning up (SIGKILL, abort), [`remove_socket`] removes what it left.
//!
//! ```no_run
//! # async fn demo(line: &str) -> Result<(), Box<dyn std::error::Error>> {
//! use plugin_sdk::proto::{InfoRequest, plugin_service_client::PluginServiceClient};
//!
//! let endpoint = plugin_sdk::host::parse_handshake(line)?;
//! let channel = plugin_sdk::host::connect(&endpoint).await?;
//! let info = PluginServiceClient::new(channel).info(InfoRequest {}).await?.into_inner();
//! println!("{} {}", info.name, info.version);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::path::Path;

use tonic::transport::Channel;

use crate::{
    APP_PROTOCOL_VERSION, CORE_PROTOCOL_VERSION, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE,
    STDIN_LIFELINE_KEY,
};

/// The environment a host gives a plugin process: the cookie, and the request to stop at end
/// of file on stdin. With the latter, the host must start the plugin with a piped stdin and
/// keep the write end open for the plugin's lifetime (`Stdio::null()` would stop it at once).
pub fn handshake_env() -> [(&'static str, &'static str); 2] {
    [
        (MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE),
        (STDIN_LIFELINE_KEY, "1"),
    ]
}

/// Where a plugin serves: the Unix socket named in its handshake line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    // A String, not a PathBuf: it travels in a text line, so it is UTF-8 by construction.
    socket_path: String,
}

impl Endpoint {
    /// An endpoint for the Unix socket at `socket_path`.
    pub fn unix(socket_path: impl Into<String>) -> Self {
        Endpoint {
            socket_path: socket_path.into(),
        }
    }

    pub fn socket_path(&self) -> &Path {
        Path::new(&self.socket_path)
    }

    /// The line a plugin prints to announce this endpoint (without the newline).
    pub fn handshake_line(&self) -> String {
        format!(
            "{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|unix|{}|grpc",
            self.socket_path
        )
    }
}

/// Why a handshake line was refused. Each message quotes the line and says what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// Not `CORE|APP|NETWORK|ADDRESS|PROTOCOL` at all (or an empty address).
    Malformed { line: String },
    /// The handshake version is not [`CORE_PROTOCOL_VERSION`].
    CoreVersion { line: String, found: String },
    /// The wire contract version is not [`APP_PROTOCOL_VERSION`].
    AppVersion { line: String, found: String },
    /// The network is not `unix`.
    Network { line: String, found: String },
    /// The protocol is not `grpc`.
    Protocol { line: String, found: String },
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Malformed { line } => write!(
                f,
                "plugin handshake line {line:?} is not of the form \
                 `{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|unix|/path/to/socket|grpc`; \
                 the executable is probably not an awf plugin, or it printed something to \
                 stdout before its handshake (plugins must log to stderr)"
            ),
            HandshakeError::CoreVersion { line, found } => write!(
                f,
                "plugin handshake line {line:?} uses handshake version {found}, this awf \
                 speaks {CORE_PROTOCOL_VERSION}; rebuild the plugin with a plugin-sdk that \
                 matches this awf"
            ),
            HandshakeError::AppVersion { line, found } => write!(
                f,
                "plugin handshake line {line:?} speaks plugin protocol version {found}, this \
                 awf speaks {APP_PROTOCOL_VERSION} (awf.plugin.v{APP_PROTOCOL_VERSION}); \
                 rebuild the plugin with a plugin-sdk that matches this awf"
            ),
            HandshakeError::Network { line, found } => write!(
                f,
                "plugin handshake line {line:?} names network {found:?}; awf plugins must \
                 serve on a Unix socket (`unix`)"
            ),
            HandshakeError::Protocol { line, found } => write!(
                f,
                "plugin handshake line {line:?} names protocol {found:?}; awf plugins must \
                 speak `grpc`"
            ),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// Longest part of a bad line quoted in an error: a plugin that prints a megabyte of garbage
/// should not produce a megabyte of error message.
const QUOTE_LIMIT: usize = 200;

/// Parses the handshake line a plugin printed (a trailing newline is ignored).
///
/// The socket path may itself contain `|`: the three fields before it are split off the
/// left and the protocol off the right.
pub fn parse_handshake(line: &str) -> Result<Endpoint, HandshakeError> {
    let line = line.trim_end_matches(['\n', '\r']);
    let quoted = || quote(line);

    let mut left = line.splitn(4, '|');
    let (Some(core), Some(app), Some(network), Some(rest)) =
        (left.next(), left.next(), left.next(), left.next())
    else {
        return Err(HandshakeError::Malformed { line: quoted() });
    };
    let Some((address, protocol)) = rest.rsplit_once('|') else {
        return Err(HandshakeError::Malformed { line: quoted() });
    };

    if core.parse::<u32>().ok() != Some(CORE_PROTOCOL_VERSION) {
        // A non-number here means the line is not a handshake at all.
        return Err(if core.parse::<u32>().is_ok() {
            HandshakeError::CoreVersion {
                line: quoted(),
                found: core.to_string(),
            }
        } else {
            HandshakeError::Malformed { line: quoted() }
        });
    }
    if app.parse::<u32>().ok() != Some(APP_PROTOCOL_VERSION) {
        return Err(HandshakeError::AppVersion {
            line: quoted(),
            found: quote(app),
        });
    }
    if network != "unix" {
        return Err(HandshakeError::Network {
            line: quoted(),
            found: quote(network),
        });
    }
    if protocol != "grpc" {
        return Err(HandshakeError::Protocol {
            line: quoted(),
            found: quote(protocol),
        });
    }
    if address.is_empty() {
        return Err(HandshakeError::Malformed { line: quoted() });
    }
    Ok(Endpoint::unix(address))
}

fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

/// Opens a gRPC channel to the plugin at `endpoint`. The connection is made now, so a
/// plugin that announced a socket it does not serve fails here rather than at the first call.
pub async fn connect(endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
    // tonic dials `unix:` endpoints itself; the path needs no URI escaping in this form.
    tonic::transport::Endpoint::from_shared(format!("unix:{}", endpoint.socket_path))?
        .connect()
        .await
}

/// Removes the socket a plugin announced, and its private directory if that is then empty.
/// For after a plugin died without its own cleanup; a no-op when it did clean up. Never
/// removes anything but that one socket file and one empty directory.
pub fn remove_socket(endpoint: &Endpoint) -> std::io::Result<()> {
    let socket = endpoint.socket_path();
    match std::fs::remove_file(socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match socket.parent().map(std::fs::remove_dir) {
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_line_a_plugin_prints() {
        let endpoint = Endpoint::unix("/tmp/awf-plugin-1-0/plugin.sock");
        let line = format!("{}\n", endpoint.handshake_line());
        assert_eq!(line, "1|1|unix|/tmp/awf-plugin-1-0/plugin.sock|grpc\n");
        assert_eq!(parse_handshake(&line), Ok(endpoint));
    }

    #[test]
    fn a_socket_path_may_contain_the_separator() {
        let endpoint = parse_handshake("1|1|unix|/tmp/a|b/plugin.sock|grpc").unwrap();
        assert_eq!(endpoint.socket_path(), Path::new("/tmp/a|b/plugin.sock"));
    }

    #[test]
    fn garbage_is_malformed_and_quoted() {
        for line in [
            "",
            "hello world",
            "1|1|unix",
            "1|1|unix||grpc",
            "x|1|unix|/s|grpc",
        ] {
            let err = parse_handshake(line).unwrap_err();
            assert_eq!(
                err,
                HandshakeError::Malformed {
                    line: line.to_string()
                },
                "{line:?}"
            );
            assert!(err.to_string().contains(&format!("{line:?}")), "{err}");
        }
    }

    #[test]
    fn long_garbage_is_cut_in_the_message() {
        let line = "x".repeat(10_000);
        let message = parse_handshake(&line).unwrap_err().to_string();
        assert!(message.len() < 1_000, "{} bytes", message.len());
    }

    #[test]
    fn each_wrong_field_is_named() {
        assert!(matches!(
            parse_handshake("2|1|unix|/s|grpc"),
            Err(HandshakeError::CoreVersion { found, .. }) if found == "2"
        ));
        assert!(matches!(
            parse_handshake("1|7|unix|/s|grpc"),
            Err(HandshakeError::AppVersion { found, .. }) if found == "7"
        ));
        assert!(matches!(
            parse_handshake("1|1|tcp|127.0.0.1:1234|grpc"),
            Err(HandshakeError::Network { found, .. }) if found == "tcp"
        ));
        assert!(matches!(
            parse_handshake("1|1|unix|/s|netrpc"),
            Err(HandshakeError::Protocol { found, .. }) if found == "netrpc"
        ));
        let message = parse_handshake("1|7|unix|/s|grpc").unwrap_err().to_string();
        assert!(message.contains("version 7") && message.contains("rebuild the plugin"));
    }
}
