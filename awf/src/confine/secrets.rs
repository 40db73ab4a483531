//! Where secrets live: the one list of locations Bash never reads, under either read mode.
//! Under `read: confined` most of them lie outside every readable root already (Landlock
//! refuses them); the rest, and all of them under `read: host`, are covered by empty
//! read-only mounts in Bash's mount namespace (see `super::namespaces`). The list is
//! matched again at every Bash call, so a file that appears later is hidden too.

use std::path::{Path, PathBuf};

/// Beneath each home directory: logins of clouds, registries, package managers, agent
/// CLIs, keys and shells' histories.
pub const IN_HOME: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".config/pip/pip.conf",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".pgpass",
    ".my.cnf",
    ".config/gh",
    ".config/hub",
    ".config/rclone",
    ".password-store",
    ".local/share/keyrings",
    // The agent CLIs' own logins and state.
    ".claude",
    ".claude.json",
    ".codex",
    ".gemini",
    ".config/opencode",
    ".local/share/opencode",
    // Browser profiles.
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    // What was typed, keys and tokens included.
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
];

/// In the system: password hashes, host keys, TLS private keys, Kerberos and Wi-Fi keys.
/// (`/etc/shadow` is unreadable to other users, but not to root, who owns it.)
pub const IN_SYSTEM: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssl/private",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wpa_supplicant",
];

/// The secret locations that exist now, beneath the given homes and in the system: the
/// built-in list, the host keys of /etc/ssh (`ssh_host_*_key`), and `extra` (the
/// workflow's `hidden:`, awf's run and audit directories). Symlinks are resolved: what is
/// hidden is what a read would reach.
pub fn present(homes: &[PathBuf], extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        // Most are absent: one lstat says so, where resolving the path takes one per
        // component (this runs at every Bash call).
        if std::fs::symlink_metadata(&p).is_err() {
            return;
        }
        if let Ok(real) = std::fs::canonicalize(&p)
            && real != Path::new("/")
            && !out.contains(&real)
        {
            out.push(real);
        }
    };
    for home in homes {
        // One listing of the home says which first components exist: the rest of the
        // list needs no lookup (this runs at every Bash call, over every home).
        let names: Option<std::collections::HashSet<std::ffi::OsString>> = std::fs::read_dir(home)
            .ok()
            .map(|d| d.flatten().map(|e| e.file_name()).collect());
        for rel in IN_HOME {
            let first = rel.split('/').next().unwrap_or(rel);
            if names
                .as_ref()
                .is_some_and(|n| !n.contains(std::ffi::OsStr::new(first)))
            {
                continue;
            }
            push(home.join(rel));
        }
    }
    for p in IN_SYSTEM {
        push(PathBuf::from(p));
    }
    if let Ok(dir) = std::fs::read_dir("/etc/ssh") {
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("ssh_host_") && name.ends_with("_key") {
                push(e.path());
            }
        }
    }
    for p in extra {
        push(p.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_exists_beneath_a_home_and_resolves_links() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-secrets-")
            .tempdir()
            .unwrap();
        let home = tmp.path().to_path_buf();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".cargo")).unwrap();
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap();
        std::fs::write(home.join("real-netrc"), "machine x").unwrap();
        std::os::unix::fs::symlink(home.join("real-netrc"), home.join(".netrc")).unwrap();
        let found = present(std::slice::from_ref(&home), &[]);
        let home = std::fs::canonicalize(&home).unwrap();
        assert!(found.contains(&home.join(".ssh")));
        assert!(found.contains(&home.join(".cargo/credentials.toml")));
        assert!(found.contains(&home.join("real-netrc")), "{found:?}");
        assert!(!found.contains(&home.join(".cargo")));
        assert!(!found.iter().any(|p| p.ends_with(".aws")));
    }
}
