//! Where plugins are found: the search path and the scan of its directories.
//!
//! The search path is `AWF_PLUGINS_PATH` (colon-separated directories) when that variable is
//! set, even to an empty value (which disables plugins): it replaces the defaults rather than
//! adding to them, so a test or a CI job sees exactly the plugins it names. Otherwise it is
//! `<root>/.awf/plugins` (the project's plugins) then `$XDG_DATA_HOME/awf/plugins` (default
//! `~/.local/share/awf/plugins`, the user's). Each plugin is a subdirectory holding a
//! `plugin.yaml`; when two directories hold a plugin of the same name, the first in the
//! search path wins and the other is reported as shadowed.

use super::manifest::{MANIFEST_FILE, Manifest};
use crate::error::AwfError;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable that replaces the default search path.
pub const PATH_ENV: &str = "AWF_PLUGINS_PATH";

/// The search path for a project rooted at `root`, from this process's environment.
pub fn search_path(root: &Path) -> Vec<PathBuf> {
    search_path_from(
        std::env::var_os(PATH_ENV),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
        root,
    )
}

/// [`search_path`] with the environment passed in (testable without touching the process).
pub fn search_path_from(
    plugins_path: Option<OsString>,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
    root: &Path,
) -> Vec<PathBuf> {
    if let Some(list) = plugins_path {
        return std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    let mut dirs = vec![root.join(".awf").join("plugins")];
    // The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    let data = xdg_data_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| PathBuf::from(h).join(".local").join("share")));
    if let Some(data) = data {
        dirs.push(data.join("awf").join("plugins"));
    }
    dirs
}

/// One subdirectory of a search-path directory.
#[derive(Debug, Clone)]
pub enum Found {
    /// A valid plugin, the one used under its name.
    Plugin(Manifest),
    /// A valid plugin hidden by one of the same name earlier in the search path.
    Shadowed { manifest: Manifest, by: PathBuf },
    /// A directory whose manifest or executable is wrong; the error names the file and field.
    Invalid { dir: PathBuf, error: AwfError },
}

/// The result of scanning a search path.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub search_path: Vec<PathBuf>,
    pub found: Vec<Found>,
}

impl Discovery {
    /// Scans every directory of `search_path` (missing ones are skipped: having no plugins
    /// is normal), subdirectories in name order so the result is stable.
    pub fn scan(search_path: Vec<PathBuf>) -> Discovery {
        let mut found: Vec<Found> = Vec::new();
        for base in &search_path {
            let Ok(entries) = std::fs::read_dir(base) else {
                continue;
            };
            let mut dirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            dirs.sort();
            for dir in dirs {
                if !dir.join(MANIFEST_FILE).exists() {
                    found.push(Found::Invalid {
                        error: AwfError::new(
                            crate::error::codes::PLUGIN_MANIFEST,
                            format!(
                                "the plugin directory {} has no {MANIFEST_FILE}; add one \
                                 (name, version, description) or move the directory out of {}",
                                dir.display(),
                                base.display()
                            ),
                        ),
                        dir,
                    });
                    continue;
                }
                match Manifest::load(&dir) {
                    Err(error) => found.push(Found::Invalid { dir, error }),
                    Ok(manifest) => {
                        let first = found.iter().find_map(|f| match f {
                            Found::Plugin(m) if m.name == manifest.name => Some(m.dir.clone()),
                            _ => None,
                        });
                        found.push(match first {
                            Some(by) => Found::Shadowed { manifest, by },
                            None => Found::Plugin(manifest),
                        });
                    }
                }
            }
        }
        Discovery { search_path, found }
    }

    /// The plugin used under `name`.
    pub fn get(&self, name: &str) -> Option<&Manifest> {
        self.plugins().find(|m| m.name == name)
    }

    /// The valid, unshadowed plugins.
    pub fn plugins(&self) -> impl Iterator<Item = &Manifest> {
        self.found.iter().filter_map(|f| match f {
            Found::Plugin(m) => Some(m),
            _ => None,
        })
    }

    /// The error of an invalid plugin directory named `name`: the likely reason a plugin
    /// the user asked for is missing.
    pub fn invalid(&self, name: &str) -> Option<&AwfError> {
        self.found.iter().find_map(|f| match f {
            Found::Invalid { dir, error } if dir.file_name().is_some_and(|n| n == name) => {
                Some(error)
            }
            _ => None,
        })
    }

    /// `a:b` for messages.
    pub fn search_path_text(&self) -> String {
        if self.search_path.is_empty() {
            return format!("(empty: {PATH_ENV} is set to nothing)");
        }
        self.search_path
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_replaces_the_defaults() {
        let root = Path::new("/proj");
        assert_eq!(
            search_path_from(Some("/a::b".into()), None, Some("/home/u".into()), root),
            vec![PathBuf::from("/a"), PathBuf::from("b")]
        );
        assert!(search_path_from(Some("".into()), None, None, root).is_empty());
        assert_eq!(
            search_path_from(None, None, Some("/home/u".into()), root),
            vec![
                PathBuf::from("/proj/.awf/plugins"),
                PathBuf::from("/home/u/.local/share/awf/plugins")
            ]
        );
        assert_eq!(
            search_path_from(None, Some("/x".into()), Some("/home/u".into()), root)[1],
            PathBuf::from("/x/awf/plugins")
        );
        // A relative XDG_DATA_HOME is ignored, as the spec says.
        assert_eq!(
            search_path_from(None, Some("rel".into()), Some("/h".into()), root)[1],
            PathBuf::from("/h/.local/share/awf/plugins")
        );
    }

    fn plugin(base: &Path, dir: &str, name: &str) {
        use std::os::unix::fs::PermissionsExt;
        let d = base.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join(MANIFEST_FILE),
            format!("name: {name}\nversion: 1\ndescription: d\n"),
        )
        .unwrap();
        std::fs::write(d.join(name), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn scan_finds_shadows_and_reports() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-discovery-")
            .tempdir()
            .unwrap();
        let base = tmp.path().to_path_buf();
        let (a, b) = (base.join("a"), base.join("b"));
        plugin(&a, "notes", "notes");
        plugin(&b, "notes", "notes");
        plugin(&b, "other", "other");
        std::fs::create_dir_all(b.join("empty")).unwrap();
        std::fs::create_dir_all(b.join("broken")).unwrap();
        std::fs::write(b.join("broken").join(MANIFEST_FILE), "name: broken\n").unwrap();
        let d = Discovery::scan(vec![a.clone(), base.join("missing"), b.clone()]);
        assert_eq!(d.get("notes").unwrap().dir, a.join("notes"));
        assert_eq!(d.get("other").unwrap().dir, b.join("other"));
        assert!(d.found.iter().any(
            |f| matches!(f, Found::Shadowed { manifest, by } if manifest.dir == b.join("notes") && *by == a.join("notes"))
        ));
        assert!(d.invalid("broken").unwrap().message().contains("`version`"));
        assert!(
            d.invalid("empty")
                .unwrap()
                .message()
                .contains("has no plugin.yaml")
        );
        assert_eq!(d.plugins().count(), 2);
    }
}
