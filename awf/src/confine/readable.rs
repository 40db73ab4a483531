//! What Bash may read under `read: confined`: the system, the toolchains its PATH names, git's
//! own configuration, and nothing else of any home. Computed once per session from the
//! PATH Bash gets and the toolchain homes awf's environment declares.

use std::path::{Component, Path, PathBuf};

/// The system's read-only parts. `/proc` is added where Bash gets a fresh one (its own PID
/// namespace), `/dev` entries one by one: no other device is readable.
pub const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/sys",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
    "/dev/ptmx",
];

/// Files of /etc that commonly point elsewhere (into /run): their targets are readable too.
const ETC_LINKS: &[&str] = &["/etc/resolv.conf", "/etc/localtime", "/etc/mtab"];

/// Variables naming a toolchain's home, and the default beneath `$HOME` when unset.
const TOOLCHAIN_HOMES: &[(&str, Option<&str>)] = &[
    ("RUSTUP_HOME", Some(".rustup")),
    ("CARGO_HOME", Some(".cargo")),
    ("PYENV_ROOT", None),
    ("NVM_DIR", None),
    ("GOROOT", None),
];

/// The names of `TOOLCHAIN_HOMES`, which `awf run` passes to `awf mcp-serve` explicitly.
pub fn toolchain_vars() -> impl Iterator<Item = &'static str> {
    TOOLCHAIN_HOMES.iter().map(|(n, _)| *n)
}

/// True for a path beneath one of the [`SYSTEM`] trees.
fn in_system(p: &Path) -> bool {
    SYSTEM
        .iter()
        .filter(|s| !s.starts_with("/dev/"))
        .any(|s| p.starts_with(s))
}

/// The home directories of this machine: `$HOME` and those /etc/passwd names (existing,
/// not `/`, not a system tree).
pub fn homes(home: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().collect();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let Some(dir) = line.split(':').nth(5) else {
                continue;
            };
            let dir = PathBuf::from(dir);
            // Not a pseudo file system some system users call home (`/dev`, `/run/...`).
            let pseudo = ["/dev", "/proc", "/run", "/sys"]
                .iter()
                .any(|p| dir.starts_with(p));
            if dir.is_absolute()
                && dir != Path::new("/")
                && !in_system(&dir)
                && !pseudo
                && dir.is_dir()
            {
                out.push(dir);
            }
        }
    }
    let mut uniq: Vec<PathBuf> = Vec::new();
    for h in out {
        if !uniq.contains(&h) {
            uniq.push(h);
        }
    }
    uniq
}

/// Directories of a home that hold many programs' files (configurations, data, caches):
/// a PATH entry beneath one stands for its own tool's directory there, never the whole
/// (`~/.config/composer/vendor/bin` → `~/.config/composer`, not `~/.config` with gcloud's
/// and gh's logins in it).
pub const SHARED_IN_HOME: &[&str] = &[
    ".config",
    ".local/share",
    ".local/state",
    ".local/lib",
    ".cache",
    ".var/app",
];

/// The readable root a PATH entry stands for: nothing for a system tree (already readable),
/// a home itself or a shared directory of it ([`SHARED_IN_HOME`], `~/.local`); beneath a
/// shared directory, the tool's own directory in it; `~/.local/bin` (or any other entry
/// of `~/.local`) only itself; beneath a home otherwise, its top directory (`~/.cargo/bin`
/// → `~/.cargo`); elsewhere the entry itself. A secret location is never one.
pub fn toolchain_root(entry: &Path, homes: &[PathBuf]) -> Option<PathBuf> {
    if !entry.is_absolute() || in_system(entry) || !entry.exists() {
        return None;
    }
    let entry: PathBuf = entry.components().collect();
    // The deepest home first: /home/ci/sub beats /home/ci when both are homes.
    let mut by_depth: Vec<&PathBuf> = homes.iter().collect();
    by_depth.sort_by_key(|h| std::cmp::Reverse(h.components().count()));
    for home in by_depth {
        let Ok(rel) = entry.strip_prefix(home) else {
            continue;
        };
        let top = match rel.components().next() {
            Some(Component::Normal(top)) => top,
            _ => return None, // the home itself: reading all of it is not a toolchain
        };
        let root = if let Some(shared) = SHARED_IN_HOME.iter().find(|s| rel.starts_with(s)) {
            match rel.strip_prefix(shared).ok()?.components().next() {
                Some(Component::Normal(tool)) => home.join(shared).join(tool),
                _ => return None, // the shared directory itself
            }
        } else if top == ".local" {
            if rel == Path::new(".local") {
                return None;
            }
            entry.clone()
        } else {
            home.join(top)
        };
        // Within a secret location: refused. A secret within it (~/.cargo/credentials)
        // is covered by its mount.
        let secret = super::secrets::IN_HOME
            .iter()
            .any(|s| root.starts_with(home.join(s)));
        return (!secret).then_some(root);
    }
    Some(entry)
}

/// Every root Bash may read besides its writable paths and the `readable:` ones: the
/// system, the toolchains of `path` (Bash's PATH), the toolchain homes `var` declares
/// (defaults beneath `home`), and git's configuration in `home`.
pub fn roots(
    path: Option<&str>,
    home: Option<&Path>,
    var: &dyn Fn(&str) -> Option<String>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = SYSTEM
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    for link in ETC_LINKS {
        if let Ok(real) = std::fs::canonicalize(link)
            && !in_system(&real)
        {
            out.push(real);
        }
    }
    let homes = homes(home);
    let add = |p: PathBuf, out: &mut Vec<PathBuf>| {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    };
    for entry in path
        .unwrap_or_default()
        .split(':')
        .filter(|e| !e.is_empty())
    {
        if let Some(root) = toolchain_root(Path::new(entry), &homes) {
            add(root, &mut out);
        }
    }
    for (name, default) in TOOLCHAIN_HOMES {
        let dir = match (var(name), default, home) {
            (Some(v), _, _) if Path::new(&v).is_absolute() => PathBuf::from(v),
            (None, Some(d), Some(h)) => h.join(d),
            _ => continue,
        };
        if dir.is_dir() && dir != Path::new("/") && !homes.contains(&dir) {
            add(dir, &mut out);
        }
    }
    if let Some(h) = home {
        for git in [".gitconfig", ".config/git"] {
            let p = h.join(git);
            if p.exists() {
                add(p, &mut out);
            }
        }
    }
    out
}

/// Where no mount can cover a secret: the read grants of `root` that leave every path of
/// `excluded` out, path by path. Returns (directories granted their listing only, trees
/// granted whole): `root` whole when nothing excluded lies beneath it; else, for each
/// directory on the way down to an excluded path, its listing, and each of its entries
/// whole but the one leading there (an entry that is a link is judged by where it leads).
/// An entry made later in a directory granted by listing only is not readable.
pub fn grant_around(root: &Path, excluded: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut listed = Vec::new();
    let mut whole = Vec::new();
    around(root, excluded, &mut listed, &mut whole, 0);
    (listed, whole)
}

/// How deep the walk goes before a directory is left out whole (a secret that deep is
/// rare; leaving it out errs on the side of the secret).
const MAX_AROUND_DEPTH: usize = 32;

fn around(
    dir: &Path,
    excluded: &[PathBuf],
    listed: &mut Vec<PathBuf>,
    whole: &mut Vec<PathBuf>,
    depth: usize,
) {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if excluded.iter().any(|e| real.starts_with(e)) {
        return;
    }
    if !excluded.iter().any(|e| e.starts_with(&real)) {
        whole.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_AROUND_DEPTH || !real.is_dir() {
        return;
    }
    listed.push(dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(&real) else {
        return;
    };
    for e in entries.flatten() {
        around(&e.path(), excluded, listed, whole, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn grants_around_leave_each_excluded_path_out_and_the_rest_whole() {
        let (_tmp, base) = tree("around", &["cargo/bin", "cargo/registry/x", "other"]);
        std::fs::write(base.join("cargo/credentials.toml"), "t").unwrap();
        std::fs::write(base.join("cargo/config.toml"), "c").unwrap();
        std::os::unix::fs::symlink(base.join("cargo/credentials.toml"), base.join("cargo/link"))
            .unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let secret = base.join("cargo/credentials.toml");
        let (listed, whole) = grant_around(&base, std::slice::from_ref(&secret));
        assert_eq!(listed, [base.clone(), base.join("cargo")]);
        for w in ["cargo/bin", "cargo/registry", "cargo/config.toml", "other"] {
            assert!(whole.contains(&base.join(w)), "{w}: {whole:?}");
        }
        assert!(
            !whole
                .iter()
                .any(|w| w.ends_with("credentials.toml") || w.ends_with("link")),
            "{whole:?}"
        );
        let (l, w) = grant_around(&base.join("other"), &[secret]);
        assert!(l.is_empty() && w == [base.join("other")]);
    }

    use super::*;

    /// `dirs` beneath a fresh temp dir, and the guard that removes it when dropped.
    fn tree(name: &str, dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let guard = tempfile::Builder::new()
            .prefix(&format!("awf-readable-{name}-"))
            .tempdir()
            .unwrap();
        let base = guard.path().to_path_buf();
        for d in dirs {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        (guard, base)
    }

    #[test]
    fn a_path_entry_stands_for_its_toolchain() {
        let (_tmp, base) = tree(
            "entry",
            &[
                "me/.cargo/bin",
                "me/.local/bin",
                "ci/.pyenv/shims",
                "opt-node/bin",
                "me/.ssh/bin",
                "me/.config/composer/vendor/bin",
                "me/.local/share/pnpm",
                "me/.cache/tool/bin",
                "me/.config/gh/bin",
            ],
        );
        let homes = vec![base.join("me"), base.join("ci")];
        let root = |e: &str| toolchain_root(&base.join(e), &homes);
        assert_eq!(root("me/.cargo/bin"), Some(base.join("me/.cargo")));
        assert_eq!(root("me/.local/bin"), Some(base.join("me/.local/bin")));
        assert_eq!(root("ci/.pyenv/shims"), Some(base.join("ci/.pyenv")));
        assert_eq!(root("opt-node/bin"), Some(base.join("opt-node/bin")));
        // Beneath a directory many programs share, the tool's own directory only.
        assert_eq!(
            root("me/.config/composer/vendor/bin"),
            Some(base.join("me/.config/composer"))
        );
        assert_eq!(
            root("me/.local/share/pnpm"),
            Some(base.join("me/.local/share/pnpm"))
        );
        assert_eq!(
            root("me/.cache/tool/bin"),
            Some(base.join("me/.cache/tool"))
        );
        assert_eq!(root("me/.config"), None);
        assert_eq!(root("me/.local/share"), None);
        assert_eq!(root("me/.local"), None);
        assert_eq!(root("me/.config/gh/bin"), None);
        // A home itself, a secret location, a system tree, a missing dir: none.
        assert_eq!(root("me"), None);
        assert_eq!(root("me/.ssh/bin"), None);
        assert_eq!(toolchain_root(Path::new("/usr/bin"), &homes), None);
        assert_eq!(root("me/nope"), None);
        assert_eq!(toolchain_root(Path::new("bin"), &homes), None);
    }

    #[test]
    fn roots_hold_the_system_toolchains_and_gitconfig_not_the_home() {
        let (_tmp, base) = tree(
            "roots",
            &["h/.cargo/bin", "h/.rustup", "h/.config/git", "py"],
        );
        let home = base.join("h");
        std::fs::write(home.join(".gitconfig"), "[user]\n").unwrap();
        let path = format!("{}:/usr/bin", home.join(".cargo/bin").display());
        let py = base.join("py");
        let var = |n: &str| (n == "PYENV_ROOT").then(|| py.display().to_string());
        let r = roots(Some(&path), Some(&home), &var);
        for want in [
            home.join(".cargo"),
            home.join(".rustup"),
            home.join(".gitconfig"),
            home.join(".config/git"),
            py.clone(),
            PathBuf::from("/usr"),
            PathBuf::from("/etc"),
        ] {
            assert!(r.contains(&want), "{want:?} not in {r:?}");
        }
        assert!(!r.contains(&home), "{r:?}");
        assert_eq!(r.iter().filter(|p| **p == home.join(".cargo")).count(), 1);
    }
}
