//! awf's own HTTP requests (the model relay's, a remote MCP server's, the builtin
//! operations'): what a server's certificate is checked against, and where a request may
//! go ([`Reach`]), checked where the connection is made: after DNS resolution, at every
//! request and every redirect, so that a name cannot lead where its address may not.

use crate::confine::egress::rules::{AllowList, is_public};
use std::net::IpAddr;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Where requests may go.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Anywhere.
    Any,
    /// Public addresses only; the text says what to do about a refused one.
    Public(&'static str),
    /// The hosts of an allow list only (egress rules, as Bash's `network: {allow: [...]}`):
    /// a name must resolve to public addresses; a private address must be written as one.
    Hosts(AllowList),
    /// Nowhere (`network: deny`).
    Nowhere,
}

/// An agent whose connections go only where `reach` allows (its resolver checks them).
pub fn agent(config: ureq::config::Config, reach: Reach) -> ureq::Agent {
    ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::new(),
        Guard {
            reach,
            inner: DefaultResolver::default(),
        },
    )
}

/// Why `ip` (of `url`) is refused as not public, and `what_to_do`.
pub fn not_public(ip: IpAddr, url: &str, what_to_do: &str) -> String {
    format!(
        "{url} is at {ip}, which is not a public address (loopback, private, link-local or \
         another reserved range: a cloud's metadata service is one); {what_to_do}"
    )
}

/// Resolves as ureq does, then refuses what `reach` does not allow.
#[derive(Debug)]
struct Guard {
    reach: Reach,
    inner: DefaultResolver,
}

impl Resolver for Guard {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let refuse = |why: String| {
            Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                why,
            )))
        };
        let host = uri.host().unwrap_or("");
        let shown = format!(
            "{}://{host}{}",
            uri.scheme_str().unwrap_or("?"),
            uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default()
        );
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("http") {
                80
            } else {
                443
            });
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok();
        match &self.reach {
            Reach::Nowhere => {
                return refuse(format!(
                    "{shown}: the state's network is deny; allow the host with `network: \
                     {{allow: [{host}]}}`"
                ));
            }
            Reach::Hosts(list) if list.find(host, port).is_none() => {
                return refuse(format!(
                    "{host}:{port} is not in the state's network allow list; add it to \
                     `network: {{allow: [...]}}`"
                ));
            }
            _ => {}
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        let bad = addrs.iter().find(|a| !is_public(a.ip()));
        match (&self.reach, bad) {
            (Reach::Public(what), Some(a)) => refuse(not_public(a.ip(), &shown, what)),
            (Reach::Hosts(_), Some(a)) if !literal => refuse(not_public(
                a.ip(),
                &shown,
                "a host name must lead to public addresses; write the address itself in the \
                 allow list to reach it",
            )),
            _ => Ok(addrs),
        }
    }
}

/// The certificates HTTPS endpoints are checked against: those of `SSL_CERT_FILE` when it
/// names a PEM bundle (as OpenSSL and curl take it: instead of the built-in roots; a
/// private CA's endpoint, say), else the built-in web roots.
pub fn tls_config() -> &'static ureq::tls::TlsConfig {
    static CONFIG: std::sync::OnceLock<ureq::tls::TlsConfig> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        let Some(file) = std::env::var_os("SSL_CERT_FILE") else {
            return ureq::tls::TlsConfig::default();
        };
        let certs: Result<Vec<_>, String> = std::fs::read(&file)
            .map_err(|e| e.to_string())
            .and_then(|pem| {
                ureq::tls::parse_pem(&pem)
                    .filter_map(|item| match item {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                        Ok(_) => None,
                        Err(e) => Some(Err(e.to_string())),
                    })
                    .collect()
            });
        match certs {
            Ok(certs) if !certs.is_empty() => ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                .build(),
            Ok(_) | Err(_) => {
                tracing::warn!(
                    "SSL_CERT_FILE {} holds no readable certificate; awf checks HTTPS \
                     endpoints against the built-in roots",
                    std::path::Path::new(&file).display()
                );
                ureq::tls::TlsConfig::default()
            }
        }
    })
}
