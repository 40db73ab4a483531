//! What awf's own HTTPS requests (the model relay's, a remote MCP server's) check a
//! server's certificate against.

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
