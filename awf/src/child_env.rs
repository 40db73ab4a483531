//! The environment a process awf starts on the agent's behalf (Bash, a plugin) begins with:
//! an allowlist of harmless variables from awf's own environment, never the whole of it.
//! `awf run` holds the model key and whatever the user exported (cloud credentials, tokens);
//! a child that inherited them would hand them to the model with one `env`.
//!
//! Kept at the crate root: it is about any child awf starts for the agent, not about one
//! adapter (`builtins::bash` uses it).

/// The audit key's variables (`telemetry::audit_key`): kept from every child, whatever
/// else it gets.
pub const AUDIT_KEY_VAR: &str = "AWF_AUDIT_KEY";
pub const AUDIT_KEY_FILE_VAR: &str = "AWF_AUDIT_KEY_FILE";

/// Whether `name` is one of the audit key's variables.
pub fn is_audit_key_var(name: &std::ffi::OsStr) -> bool {
    name == AUDIT_KEY_VAR || name == AUDIT_KEY_FILE_VAR
}

/// `cmd` without the audit key's variables (a child that inherits awf's environment).
pub fn without_audit_key(cmd: &mut std::process::Command) -> &mut std::process::Command {
    cmd.env_remove(AUDIT_KEY_VAR).env_remove(AUDIT_KEY_FILE_VAR)
}

/// Variables passed through by name.
const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "USER",
    "LOGNAME",
    "SHELL",
    "TZ",
    "TMPDIR",
    // Proxies and CA bundles: tools behind a corporate proxy need them to reach anything.
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

/// Variables passed through by prefix (locale categories).
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Parts of a name that mark it as a secret; such a variable is dropped even when the
/// allowlist would pass it (e.g. a proxy URL is fine, `HTTPS_PROXY_PASSWORD` is not).
const SECRET_MARKS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

/// True when `name` looks like it holds a secret.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKS.iter().any(|m| upper.contains(m))
}

fn allowed(name: &str) -> bool {
    (ALLOWED.contains(&name) || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p)))
        && !looks_secret(name)
}

/// True when `name` matches a passthrough pattern: an exact name, or a prefix ending in `*`.
fn named(name: &str, passthrough: &[String]) -> bool {
    passthrough.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p,
    })
}

/// The environment for a child: the allowlisted variables of `from`, plus those matched by
/// `passthrough` (exact names or `PREFIX*`; a variable named this way passes even when it
/// looks secret: the workflow asked for it).
pub fn filtered<I>(from: I, passthrough: &[String]) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (String, String)>,
{
    from.into_iter()
        .filter(|(k, _)| allowed(k) || named(k, passthrough))
        .collect()
}

/// [`filtered`] applied to awf's own environment (variables that are not UTF-8 are dropped).
pub fn from_process(passthrough: &[String]) -> Vec<(String, String)> {
    filtered(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        passthrough,
    )
}

/// The variables of awf's own environment that `passthrough` names, without the
/// allowlist: what a workflow asked to pass on, resolved where awf runs.
pub fn named_from_process(passthrough: &[String]) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| named(k, passthrough))
        .collect()
}

/// What a workflow or a plugin manifest adds to the allowlist: variables passed through
/// by name or `PREFIX*`, and variables set to a value (these win over inherited ones).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildEnv {
    pub passthrough: Vec<String>,
    pub set: Vec<(String, String)>,
}

impl ChildEnv {
    /// The child's whole environment, from awf's own.
    pub fn vars(&self) -> Vec<(String, String)> {
        let mut v = from_process(&self.passthrough);
        v.retain(|(k, _)| !self.set.iter().any(|(n, _)| n == k));
        v.extend(self.set.iter().cloned());
        v
    }
}

/// Checks a passthrough entry: a variable name, or a name prefix ending in `*`.
pub fn check_pattern(p: &str) -> Result<(), String> {
    let name = p.strip_suffix('*').unwrap_or(p);
    if name.is_empty() {
        return Err(format!(
            "{p:?} would pass every variable; name them (NAME or PREFIX*)"
        ));
    }
    check_name(name).map_err(|_| {
        format!("{p:?} is not a variable name or a PREFIX* pattern (only a trailing * is a glob)")
    })
}

/// Checks a variable name: letters, digits and `_`, not starting with a digit.
pub fn check_name(n: &str) -> Result<(), String> {
    let ok = n
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{n:?} is not a variable name (letters, digits and _, not starting with a digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn names(v: Vec<(String, String)>) -> Vec<String> {
        v.into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn only_the_allowlist_passes_and_never_a_secret_name() {
        let from = env(&[
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("LC_ALL", "C"),
            ("HTTPS_PROXY", "http://p"),
            ("ANTHROPIC_API_KEY", "sk-1"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("GITHUB_TOKEN", "g"),
            ("DB_PASSWORD", "p"),
            ("LC_TOKEN", "t"),
            ("RANDOM_THING", "x"),
        ]);
        assert_eq!(
            names(filtered(from, &[])),
            ["PATH", "HOME", "LC_ALL", "HTTPS_PROXY"]
        );
    }

    #[test]
    fn patterns_are_names_or_prefixes() {
        assert!(check_pattern("CARGO_*").is_ok() && check_pattern("NPM_TOKEN").is_ok());
        for bad in ["*", "A*B", "1X", "A-B", ""] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passthrough_names_and_globs_pass_even_secret_looking_ones() {
        let from = env(&[
            ("CARGO_HOME", "/c"),
            ("CARGO_TARGET_DIR", "/t"),
            ("NPM_TOKEN", "n"),
            ("OTHER_TOKEN", "o"),
        ]);
        let pass = vec!["CARGO_*".to_string(), "NPM_TOKEN".to_string()];
        assert_eq!(
            names(filtered(from, &pass)),
            ["CARGO_HOME", "CARGO_TARGET_DIR", "NPM_TOKEN"]
        );
    }
}
