//! Package runners as server commands — `npx -y pkg`, `bunx pkg`, `uvx pkg`, `pipx run
//! pkg`, the form every server's README gives. Each fetches the package (or checks it is
//! current) from its registry before the server starts, and under a network that does not
//! reach the registry it waits on the network for good, saying nothing. What a server's
//! network cannot do is known before it starts: `awf validate` warns, and the start gives
//! up in seconds with the ways out, instead of after `start_timeout_seconds`.

use crate::confine::Network;
use std::time::Duration;

/// How long a package runner that cannot reach its registry gets to answer anyway (a
/// filled cache it uses without asking).
pub const UNREACHABLE_REGISTRY_WAIT: Duration = Duration::from_secs(5);

/// (program, registry hosts, the flag that runs from the cache alone)
const RUNNERS: &[(&str, &[&str], &str)] = &[
    ("npx", &["registry.npmjs.org"], "--offline"),
    ("bunx", &["registry.npmjs.org"], "--no-install"),
    ("pnpx", &["registry.npmjs.org"], "--offline"),
    ("uvx", &["pypi.org", "files.pythonhosted.org"], "--offline"),
    (
        "pipx",
        &["pypi.org", "files.pythonhosted.org"],
        "--pip-args=--no-index",
    ),
];

/// Flags with which a runner uses its cache without asking the registry.
const OFFLINE: &[&str] = &[
    "--offline",
    "--prefer-offline",
    "--no-install",
    "--pip-args=--no-index",
];

/// Why `command` will not start under `network` (None: the server's default, deny), with
/// the three ways out; None when it is no package runner, runs offline, or may reach its
/// registry.
pub fn unreachable_registry(command: &[String], network: Option<&Network>) -> Option<String> {
    let program = command.first()?.rsplit('/').next()?;
    let &(runner, hosts, flag) = RUNNERS.iter().find(|(p, _, _)| *p == program)?;
    if runner == "pipx" && command.get(1).map(String::as_str) != Some("run") {
        return None;
    }
    if command.iter().any(|a| OFFLINE.contains(&a.as_str())) {
        return None;
    }
    let reaches = match network.unwrap_or(&Network::Deny) {
        Network::Allow => true,
        Network::Deny => false,
        // As the egress proxy will judge them (HTTPS to the registry).
        Network::Hosts(allowed) => crate::confine::egress::rules::AllowList::parse(allowed)
            .is_ok_and(|list| hosts.iter().all(|h| list.find(h, 443).is_some())),
    };
    if reaches {
        return None;
    }
    let list = hosts.join(", ");
    Some(format!(
        "{runner} fetches the package from {list} before the server starts, and the server's \
         network does not reach it (it waits there for good); allow it (`sandbox: {{network: \
         {{allow: [{list}]}}}}`), run from a filled cache (add `{flag}` after {runner}), or \
         install the package beforehand and give its program as the command"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_runner_that_cannot_reach_its_registry_is_told_with_the_ways_out() {
        let npx = cmd(&["npx", "-y", "@modelcontextprotocol/server-github"]);
        let why = unreachable_registry(&npx, None).unwrap();
        assert!(
            why.contains("registry.npmjs.org") && why.contains("--offline"),
            "{why}"
        );
        let hosts = Network::Hosts(vec!["api.github.com".into()]);
        assert!(unreachable_registry(&npx, Some(&hosts)).is_some());
        assert!(
            unreachable_registry(&cmd(&["/usr/bin/uvx", "mcp-server-git"]), None)
                .unwrap()
                .contains("pypi.org")
        );
        assert!(unreachable_registry(&cmd(&["pipx", "run", "mcp-server-git"]), None).is_some());
    }

    #[test]
    fn a_runner_that_may_reach_its_registry_or_runs_offline_is_not() {
        let npx = cmd(&["npx", "-y", "pkg"]);
        assert!(unreachable_registry(&npx, Some(&Network::Allow)).is_none());
        let hosts = Network::Hosts(vec!["registry.npmjs.org".into()]);
        assert!(unreachable_registry(&npx, Some(&hosts)).is_none());
        let wildcard = Network::Hosts(vec!["*.npmjs.org".into()]);
        assert!(unreachable_registry(&npx, Some(&wildcard)).is_none());
        assert!(unreachable_registry(&cmd(&["npx", "--offline", "-y", "pkg"]), None).is_none());
        assert!(unreachable_registry(&cmd(&["node", "server.js"]), None).is_none());
        assert!(unreachable_registry(&cmd(&["pipx", "install", "x"]), None).is_none());
    }
}
