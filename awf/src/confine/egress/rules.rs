//! The egress allow list: which hosts the sandbox may open connections to.
//!
//! Rules name hosts, not addresses, because the agent thinks in host names
//! and addresses behind a name change. Addresses are allowed only when they
//! are written literally, so that a name can never lead into a private
//! network by way of DNS.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host machine's own loopback, seen from the sandbox.
pub const INTERNAL_HOST: &str = "host.awf.internal";

/// What a rule's host part matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// One host name: lowercase, no trailing dot.
    Name(String),
    /// From `*.example.com`: any subdomain of `example.com`, not the apex.
    Suffix(String),
    /// An address written literally; v4-mapped IPv6 is stored as IPv4.
    Ip(IpAddr),
    /// `host.awf.internal`: the host machine, always with an explicit port.
    Internal,
}

/// One entry of the allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub host: Host,
    /// `None` allows ports 80 and 443, the ports a bare host name implies.
    pub port: Option<u16>,
    /// The entry as written, to name it in reports.
    pub text: String,
}

impl Rule {
    /// Parses one entry; the error is a sentence telling what to write instead.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let written = text.trim();
        if written.is_empty() {
            return Err(
                "an empty entry allows nothing: write a host such as crates.io, or remove it"
                    .to_string(),
            );
        }
        if written == "*" || written.starts_with("*:") {
            return Err(format!(
                "\"{written}\" allows every host; write the hosts, or network: allow"
            ));
        }
        if let Some((_, rest)) = written.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            return Err(if authority.is_empty() {
                format!("\"{written}\" is a URL; write the host alone, such as crates.io")
            } else {
                format!("\"{written}\" is a URL; write the host alone: {authority}")
            });
        }
        if let Some(at) = written.find(['/', '?', '#']) {
            return Err(format!(
                "\"{written}\" has a path; write the host alone: {}",
                &written[..at]
            ));
        }

        let (host_part, port_part) = split_host_port(written)?;
        let port = match port_part {
            None => None,
            Some(p) => Some(parse_port(written, p)?),
        };

        let host = if let Some(inner) = host_part.strip_prefix('[') {
            let inner = inner.strip_suffix(']').unwrap_or(inner);
            match inner.parse::<Ipv6Addr>() {
                Ok(v6) => Host::Ip(canonical(IpAddr::V6(v6))),
                Err(_) => {
                    return Err(format!(
                        "\"{written}\" is not an IPv6 address in brackets; write one like [2001:db8::1] or [2001:db8::1]:443"
                    ));
                }
            }
        } else if let Ok(v4) = host_part.parse::<Ipv4Addr>() {
            Host::Ip(IpAddr::V4(v4))
        } else {
            let lower = host_part.to_ascii_lowercase();
            let name = lower.strip_suffix('.').unwrap_or(&lower);
            if name == INTERNAL_HOST {
                if port.is_none() {
                    return Err(format!(
                        "{INTERNAL_HOST} needs a port: write {INTERNAL_HOST}:PORT"
                    ));
                }
                Host::Internal
            } else if name.contains('*') && name.strip_prefix("*.").is_none_or(|b| b.contains('*'))
            {
                return Err(format!(
                    "\"{written}\" has a \"*\" inside; \"*\" may only begin an entry, as in *.example.com"
                ));
            } else if let Some(base) = name.strip_prefix("*.") {
                check_name(written, base)?;
                if !base.contains('.') {
                    return Err(format!(
                        "\"{written}\" would allow every host under .{base}; write at least two labels after \"*.\", as in *.example.com"
                    ));
                }
                Host::Suffix(base.to_string())
            } else {
                check_name(written, name)?;
                if name == "localhost" || name.ends_with(".localhost") {
                    return Err(format!(
                        "\"{written}\" is the sandbox itself; to reach the host machine write {INTERNAL_HOST}:PORT"
                    ));
                }
                Host::Name(name.to_string())
            }
        };
        Ok(Rule {
            host,
            port,
            text: written.to_string(),
        })
    }

    /// Whether this rule allows `port`.
    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => port == 80 || port == 443,
        }
    }
}

/// The whole allow list; the first matching rule wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    pub rules: Vec<Rule>,
}

impl AllowList {
    /// Parses every entry, stopping at the first error.
    pub fn parse<I, S>(entries: I) -> Result<AllowList, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let rules = entries
            .into_iter()
            .map(|e| Rule::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AllowList { rules })
    }

    /// The rule allowing a connection to `host` (a name or an address, IPv6
    /// with or without brackets) on `port`, if any.
    pub fn find(&self, host: &str, port: u16) -> Option<&Rule> {
        let host = host.trim();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let ip = canonical(ip);
            return self
                .rules
                .iter()
                .find(|r| r.host == Host::Ip(ip) && r.allows_port(port));
        }
        let name = normalize_name(host)?;
        if name == INTERNAL_HOST {
            return self
                .rules
                .iter()
                .find(|r| r.host == Host::Internal && r.port == Some(port));
        }
        self.rules.iter().find(|r| {
            let host_matches = match &r.host {
                Host::Name(n) => *n == name,
                Host::Suffix(s) => {
                    name.len() > s.len() + 1
                        && name.ends_with(s.as_str())
                        && name.as_bytes()[name.len() - s.len() - 1] == b'.'
                }
                Host::Ip(_) | Host::Internal => false,
            };
            host_matches && r.allows_port(port)
        })
    }
}

/// Lowercases a requested host name and drops one trailing dot; `None` when
/// it is not a well-formed name, so odd bytes can never match a suffix rule.
pub(crate) fn normalize_name(host: &str) -> Option<String> {
    let lower = host.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name_problem(name).is_some() || name.contains('*') {
        return None;
    }
    Some(name.to_string())
}

/// Maps v4-mapped IPv6 addresses to IPv4, so both spellings compare equal.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// Whether `ip` is a globally routed unicast address. Everything else (the
/// host's loopback, private networks, link-local metadata services, ...) is
/// reachable only through a rule that writes the address literally.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let private = a == 0 // "this network", including 0.0.0.0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // deprecated 6to4 relay anycast
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224; // multicast 224/4, reserved 240/4, broadcast
    !private
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // Forms that carry an IPv4 address are judged by that address, since
    // they end up reaching it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    if s[..6] == [0; 6] {
        // :: and ::1, then the deprecated IPv4-compatible ::a.b.c.d
        if ip.is_unspecified() || ip.is_loopback() {
            return false;
        }
        return is_public_v4(embedded_v4(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64 well-known prefix 64:ff9b::/96
        return is_public_v4(embedded_v4(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        // 6to4 2002:V4ADDR::/48
        return is_public_v4(embedded_v4(s[1], s[2]));
    }
    // Only 2000::/3 is allocated for global unicast; ULA fc00::/7,
    // link-local fe80::/10, site-local fec0::/10, multicast ff00::/8,
    // NAT64 local-use 64:ff9b:1::/48 and discard 100::/64 all lie outside.
    if s[0] & 0xe000 != 0x2000 {
        return false;
    }
    // Documentation 2001:db8::/32 and 3fff::/20, benchmarking 2001:2::/48,
    // ORCHID 2001:10::/28 and 2001:20::/28.
    let documentation = (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] < 0x1000);
    let benchmarking = s[0] == 0x2001 && s[1] == 0x0002 && s[2] == 0;
    let orchid = s[0] == 0x2001 && matches!(s[1] & 0xfff0, 0x0010 | 0x0020);
    !(documentation || benchmarking || orchid)
}

fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)
}

/// Splits `host[:port]` or `[v6][:port]`.
fn split_host_port(written: &str) -> Result<(&str, Option<&str>), String> {
    if written.starts_with('[') {
        return match written.find(']') {
            Some(close) => {
                let (host, rest) = written.split_at(close + 1);
                match rest {
                    "" => Ok((host, None)),
                    _ => match rest.strip_prefix(':') {
                        Some(port) => Ok((host, Some(port))),
                        None => Err(format!(
                            "\"{written}\" has text after \"]\"; write [ADDRESS] or [ADDRESS]:PORT"
                        )),
                    },
                }
            }
            None => Err(format!(
                "\"{written}\" opens \"[\" without closing it; write [ADDRESS] or [ADDRESS]:PORT"
            )),
        };
    }
    match written.matches(':').count() {
        0 => Ok((written, None)),
        1 => {
            let (host, port) = written.split_once(':').unwrap_or((written, ""));
            Ok((host, Some(port)))
        }
        _ => Err(if written.parse::<Ipv6Addr>().is_ok() {
            format!(
                "\"{written}\" looks like an IPv6 address; write it in brackets: [{written}] or [{written}]:PORT"
            )
        } else {
            format!("\"{written}\" has more than one \":\"; write host or host:PORT")
        }),
    }
}

fn parse_port(written: &str, port: &str) -> Result<u16, String> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "\"{written}\" has a port that is not a number; write host:PORT with PORT from 1 to 65535"
        ));
    }
    match port.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(p as u16),
        _ => Err(format!(
            "\"{written}\" has port {port}; a port goes from 1 to 65535"
        )),
    }
}

/// Checks a lowercase host name, naming what is wrong with it.
fn check_name(written: &str, name: &str) -> Result<(), String> {
    match name_problem(name) {
        None => Ok(()),
        Some(problem) => Err(format!("\"{written}\" {problem}")),
    }
}

fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("has no host name; write one such as crates.io".to_string());
    }
    if name.len() > 253 {
        return Some("is longer than a host name may be (253 characters)".to_string());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.'))
    {
        return Some(format!(
            "has {bad:?}, which cannot be in a host name; use letters, digits, \"-\" and \".\""
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some("has an empty label (\"..\" or a leading \".\")".to_string());
        }
        if label.len() > 63 {
            return Some("has a label longer than 63 characters".to_string());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!(
                "has the label \"{label}\", which may not begin or end with \"-\""
            ));
        }
    }
    // Resolvers read numeric names such as 10.1 or 127.0.0.01 as addresses.
    let last = name.rsplit('.').next().unwrap_or(name);
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Some(
            "is not a full IPv4 address nor a host name; write an address as four numbers, like 10.0.0.5"
                .to_string(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Rule::parse(text).unwrap().host
    }

    #[test]
    fn parses_each_valid_shape() {
        let cases: &[(&str, Host, Option<u16>)] = &[
            ("crates.io", Host::Name("crates.io".into()), None),
            ("CRATES.io.", Host::Name("crates.io".into()), None),
            ("*.crates.io", Host::Suffix("crates.io".into()), None),
            ("github.com:443", Host::Name("github.com".into()), Some(443)),
            (
                "*.example.com:8443",
                Host::Suffix("example.com".into()),
                Some(8443),
            ),
            ("host.awf.internal:4873", Host::Internal, Some(4873)),
            ("HOST.awf.internal.:1", Host::Internal, Some(1)),
            (
                "10.0.0.5:5000",
                Host::Ip("10.0.0.5".parse().unwrap()),
                Some(5000),
            ),
            ("10.0.0.5", Host::Ip("10.0.0.5".parse().unwrap()), None),
            ("[::1]:8080", Host::Ip("::1".parse().unwrap()), Some(8080)),
            (
                "[2001:db8::1]",
                Host::Ip("2001:db8::1".parse().unwrap()),
                None,
            ),
            (
                "[::ffff:10.0.0.5]:80",
                Host::Ip("10.0.0.5".parse().unwrap()),
                Some(80),
            ),
            (
                "my_host-1.example.com:65535",
                Host::Name("my_host-1.example.com".into()),
                Some(65535),
            ),
        ];
        for (text, want_host, want_port) in cases {
            let rule = Rule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(&rule.host, want_host, "{text}");
            assert_eq!(&rule.port, want_port, "{text}");
            assert_eq!(rule.text, text.trim(), "{text}");
        }
        assert_eq!(Rule::parse("  crates.io ").unwrap().text, "crates.io");
    }

    #[test]
    fn refuses_each_error_shape_with_a_fix() {
        // (entry, words the sentence must contain)
        let cases: &[(&str, &[&str])] = &[
            ("", &["empty entry", "crates.io"]),
            ("   ", &["empty entry"]),
            ("*", &["\"*\" allows every host", "network: allow"]),
            ("*:443", &["allows every host"]),
            (
                "host.awf.internal",
                &["host.awf.internal needs a port", "host.awf.internal:PORT"],
            ),
            ("crates.io:0", &["\"crates.io:0\"", "port 0", "1 to 65535"]),
            ("crates.io:65536", &["port 65536", "1 to 65535"]),
            ("crates.io:99999999999", &["1 to 65535"]),
            ("crates.io:", &["not a number"]),
            ("crates.io:+80", &["not a number"]),
            ("crates.io:http", &["not a number"]),
            (
                "https://x.example/y",
                &["is a URL", "write the host alone: x.example"],
            ),
            (
                "http://x.example:8080",
                &["write the host alone: x.example:8080"],
            ),
            (
                "x.example/y",
                &["has a path", "write the host alone: x.example"],
            ),
            ("ex ample.com", &["' '", "cannot be in a host name"]),
            ("exa$mple.com", &["'$'"]),
            ("*.com", &["every host under .com", "*.example.com"]),
            ("foo*.example.com", &["\"*\" may only begin an entry"]),
            ("*foo.example.com", &["\"*\" may only begin an entry"]),
            ("*.*.example.com", &["\"*\" may only begin an entry"]),
            ("a..example.com", &["empty label"]),
            ("-a.example.com", &["may not begin or end with \"-\""]),
            ("::1", &["looks like an IPv6 address", "[::1]"]),
            ("a:b:c", &["more than one \":\""]),
            ("[::1", &["without closing"]),
            ("[xyz]:80", &["not an IPv6 address in brackets"]),
            ("[::1]80", &["text after \"]\""]),
            ("10.0.0", &["four numbers"]),
            (
                "localhost:8080",
                &["sandbox itself", "host.awf.internal:PORT"],
            ),
        ];
        for (text, words) in cases {
            let err = Rule::parse(text).expect_err(text);
            for w in *words {
                assert!(err.contains(w), "{text:?}: {err:?} lacks {w:?}");
            }
        }
    }

    #[test]
    fn suffix_needs_two_labels_but_not_a_known_tld() {
        assert_eq!(host("*.co.uk"), Host::Suffix("co.uk".into()));
    }

    #[test]
    fn matching_table() {
        let list = AllowList::parse([
            "crates.io",
            "*.github.com",
            "example.org:8080",
            "host.awf.internal:4873",
            "10.0.0.5:5000",
            "[2001:db8::1]",
            "192.0.2.7",
        ])
        .unwrap();
        // (host, port, text of the matching rule)
        let cases: &[(&str, u16, Option<&str>)] = &[
            ("crates.io", 443, Some("crates.io")),
            ("crates.io", 80, Some("crates.io")),
            ("CRATES.IO.", 443, Some("crates.io")),
            ("crates.io", 8443, None),
            ("static.crates.io", 443, None),
            ("api.github.com", 443, Some("*.github.com")),
            ("a.b.GitHub.com", 80, Some("*.github.com")),
            ("github.com", 443, None),
            ("evilgithub.com", 443, None),
            ("example.org", 8080, Some("example.org:8080")),
            ("example.org", 80, None),
            ("host.awf.internal", 4873, Some("host.awf.internal:4873")),
            ("host.awf.internal.", 4873, Some("host.awf.internal:4873")),
            ("host.awf.internal", 80, None),
            ("127.0.0.1", 4873, None),
            ("10.0.0.5", 5000, Some("10.0.0.5:5000")),
            ("::ffff:10.0.0.5", 5000, Some("10.0.0.5:5000")),
            ("[::ffff:10.0.0.5]", 5000, Some("10.0.0.5:5000")),
            ("10.0.0.5", 80, None),
            ("10.0.0.6", 5000, None),
            ("2001:db8::1", 443, Some("[2001:db8::1]")),
            ("[2001:DB8:0::1]", 80, Some("[2001:db8::1]")),
            ("2001:db8::2", 443, None),
            ("192.0.2.7", 443, Some("192.0.2.7")),
            ("192.0.2.7", 22, None),
            // Odd bytes never match, even when a suffix would.
            ("evil\0.github.com", 443, None),
            ("evil .github.com", 443, None),
            ("", 443, None),
        ];
        for (h, port, want) in cases {
            let got = list.find(h, *port).map(|r| r.text.as_str());
            assert_eq!(got, *want, "{h:?}:{port}");
        }
    }

    #[test]
    fn internal_host_matches_only_internal_rules() {
        let list = AllowList::parse(["*.awf.internal:4873", "host.awf.internal:9000"]).unwrap();
        assert_eq!(list.find("host.awf.internal", 4873), None);
        assert_eq!(
            list.find("x.awf.internal", 4873).map(|r| r.text.as_str()),
            Some("*.awf.internal:4873")
        );
        assert!(list.find("host.awf.internal", 9000).is_some());
    }

    #[test]
    fn public_addresses_table() {
        let cases: &[(&str, bool)] = &[
            ("1.1.1.1", true),
            ("8.8.8.8", true),
            ("151.101.1.1", true),
            ("100.63.255.255", true),
            ("100.128.0.0", true),
            ("172.15.0.1", true),
            ("172.32.0.1", true),
            ("223.255.255.255", true),
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("127.0.0.1", false),
            ("127.255.0.9", false),
            ("10.1.2.3", false),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("192.168.1.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("192.0.0.8", false),
            ("192.0.2.1", false),
            ("198.51.100.1", false),
            ("203.0.113.1", false),
            ("198.18.0.1", false),
            ("224.0.0.1", false),
            ("239.255.255.250", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            ("2606:4700::1111", true),
            ("2a00:1450:4001::200e", true),
            ("::ffff:1.1.1.1", true),
            ("64:ff9b::101:101", true),
            ("::", false),
            ("::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.1", false),
            ("::ffff:169.254.169.254", false),
            ("::127.0.0.1", false),
            ("::10.0.0.1", false),
            ("64:ff9b::a00:1", false),
            ("2002:a00:1::1", false),
            ("2002:101:101::1", true),
            ("fc00::1", false),
            ("fd12:3456::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff05::2", false),
            ("2001:db8::1", false),
            ("3fff::1", false),
            ("100::1", false),
            ("64:ff9b:1::1", false),
        ];
        for (text, want) in cases {
            let ip: IpAddr = text.parse().unwrap();
            assert_eq!(is_public(ip), *want, "{text}");
        }
    }
}
