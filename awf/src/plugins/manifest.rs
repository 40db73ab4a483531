//! `plugin.yaml`: what a plugin directory says about the plugin before anything is run.
//!
//! ```yaml
//! name: notes            # required, ^[a-z][a-z0-9-]*$, the prefix of its tool names
//! version: 0.1.0         # required
//! description: A small in-memory note store   # required
//! executable: bin/notes  # optional, relative to this directory; default: the name
//! env_passthrough: [NOTES_DB, NOTES_*]  # optional: variables of awf's environment it gets
//! ```
//!
//! A plugin starts from the same allowlisted environment as the agent's Bash
//! (`crate::child_env`: PATH, HOME, locale, TMPDIR, proxies...), never the whole of awf's
//! (which holds the model key); `env_passthrough` names what else it needs, by name or
//! `PREFIX*`, secret-looking names included.
//!
//! The executable defaults to a file named like the plugin beside the manifest, which is
//! what `cargo build` produces for a binary or example of that name; `executable` exists
//! for plugins built under another name or in a subdirectory. Unknown keys are errors, so
//! a misspelt `executable` cannot silently fall back to the default.

use crate::error::{AwfError, codes};
use std::path::{Component, Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

/// The manifest's file name inside a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.yaml";
/// The largest `plugin.yaml` read; a bigger one is refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// A checked manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub description: String,
    /// Absolute or relative to the current directory, like the directory it was found in;
    /// checked to exist and be executable.
    pub executable: PathBuf,
    /// The plugin directory (the manifest's parent).
    pub dir: PathBuf,
    /// Variables of awf's environment the plugin gets beyond the allowlist.
    pub env_passthrough: Vec<String>,
}

/// The plugin name rule: lowercase, starts with a letter, hyphens allowed. Underscores are
/// not, so that `<plugin>_<op>` splits back into plugin and operation unambiguously.
pub fn is_valid_plugin_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

const KEYS: [&str; 5] = [
    "name",
    "version",
    "description",
    "executable",
    "env_passthrough",
];

impl Manifest {
    /// Reads and checks `<dir>/plugin.yaml`. Every error names the file and the field.
    pub fn load(dir: &Path) -> Result<Manifest, AwfError> {
        use std::io::Read;
        let path = dir.join(MANIFEST_FILE);
        let cannot = |e: std::io::Error| {
            bad(
                &path,
                format!("cannot be read: {e}; every plugin directory needs a {MANIFEST_FILE}"),
            )
        };
        let file = std::fs::File::open(&path).map_err(cannot)?;
        // The size is checked before reading, and the read is bounded besides (the file
        // may grow in between).
        let size = file.metadata().map_err(cannot)?.len();
        let mut bytes = Vec::new();
        file.take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if size > MAX_MANIFEST_BYTES || bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(bad(
                &path,
                format!(
                    "is {} bytes, over the {} KiB a manifest may have; a manifest holds a \
                     name, a version, a description and a few fields",
                    size.max(bytes.len() as u64),
                    MAX_MANIFEST_BYTES >> 10
                ),
            ));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| bad(&path, "is not UTF-8 text; write it as UTF-8"))?;
        Manifest::parse(&text, dir)
    }

    /// Checks manifest text as if read from `<dir>/plugin.yaml`.
    pub fn parse(text: &str, dir: &Path) -> Result<Manifest, AwfError> {
        let path = dir.join(MANIFEST_FILE);
        // The limits of workflows first (nodes and text after aliases are expanded), so
        // that an alias bomb is refused before anything expands it.
        if let Err(e) = crate::workflow::yaml::parse(text) {
            return Err(bad(
                &path,
                format!("{} (line {}); {}", e.message, e.line, e.hint),
            ));
        }
        let docs = YamlLoader::load_from_str(text)
            .map_err(|e| bad(&path, format!("is not valid YAML: {e}")))?;
        let hash = match docs.as_slice() {
            [Yaml::Hash(h)] => h,
            [] => {
                return Err(bad(
                    &path,
                    "is empty; it needs name, version and description",
                ));
            }
            [_] => {
                return Err(bad(
                    &path,
                    "must be a mapping of `key: value` lines (name, version, description)",
                ));
            }
            _ => return Err(bad(&path, "holds several YAML documents; keep exactly one")),
        };
        for key in hash.keys() {
            match key.as_str() {
                Some(k) if KEYS.contains(&k) => {}
                _ => {
                    return Err(bad(
                        &path,
                        format!(
                            "has the unknown field {}; the fields are {}",
                            describe_key(key),
                            KEYS.join(", ")
                        ),
                    ));
                }
            }
        }
        let field = |key: &str, required: bool| -> Result<Option<String>, AwfError> {
            match hash.get(&Yaml::String(key.to_string())) {
                None if required => Err(bad(&path, format!("lacks the required field `{key}`"))),
                None => Ok(None),
                Some(Yaml::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
                // `version: 1.0` and `version: 2` are numbers to YAML; keep their text.
                Some(Yaml::Real(s)) if key == "version" => Ok(Some(s.clone())),
                Some(Yaml::Integer(n)) if key == "version" => Ok(Some(n.to_string())),
                Some(Yaml::String(_)) => Err(bad(&path, format!("field `{key}` is empty"))),
                Some(other) => Err(bad(
                    &path,
                    format!("field `{key}` must be text, not {}", describe_value(other)),
                )),
            }
        };
        let name = field("name", true)?.expect("required");
        if !is_valid_plugin_name(&name) {
            return Err(bad(
                &path,
                format!(
                    "field `name` is {name:?}, which does not match ^[a-z][a-z0-9-]*$ \
                     (lowercase letters, digits and hyphens, starting with a letter)"
                ),
            ));
        }
        let version = field("version", true)?.expect("required");
        let description = field("description", true)?.expect("required");
        let executable = executable(field("executable", false)?, &name, dir, &path)?;
        check_executable(&executable, &path)?;
        let env_passthrough =
            env_passthrough(hash.get(&Yaml::String("env_passthrough".into())), &path)?;
        Ok(Manifest {
            name,
            version,
            description,
            executable,
            dir: dir.to_path_buf(),
            env_passthrough,
        })
    }
}

/// The plugin's program: `executable`, a path inside the plugin directory, else the file
/// named as the plugin there.
fn executable(
    given: Option<String>,
    name: &str,
    dir: &Path,
    path: &Path,
) -> Result<PathBuf, AwfError> {
    let Some(rel) = given else {
        return Ok(dir.join(name));
    };
    let p = Path::new(&rel);
    // Inside the plugin directory only: a manifest must not point awf at an arbitrary
    // program elsewhere on the machine.
    if p.is_absolute()
        || p.components()
            .any(|c| matches!(c, Component::ParentDir | Component::RootDir))
    {
        return Err(bad(
            path,
            format!(
                "field `executable` is {rel:?}; it must be a path relative to {} that stays \
                 inside it",
                dir.display()
            ),
        ));
    }
    Ok(dir.join(p))
}

/// `env_passthrough: [NAME, PREFIX*]`, each pattern checked.
fn env_passthrough(value: Option<&Yaml>, path: &Path) -> Result<Vec<String>, AwfError> {
    match value {
        None | Some(Yaml::Null) => Ok(Vec::new()),
        Some(Yaml::Array(items)) => {
            let mut out = Vec::new();
            for item in items {
                let Yaml::String(p) = item else {
                    return Err(bad(
                        path,
                        format!(
                            "field `env_passthrough` holds {}; write variable names: [NAME, \
                             PREFIX*]",
                            describe_value(item)
                        ),
                    ));
                };
                crate::child_env::check_pattern(p)
                    .map_err(|e| bad(path, format!("field `env_passthrough`: {e}")))?;
                out.push(p.clone());
            }
            Ok(out)
        }
        Some(other) => Err(bad(
            path,
            format!(
                "field `env_passthrough` must be a list, not {}; write [NAME, PREFIX*]",
                describe_value(other)
            ),
        )),
    }
}

fn check_executable(exe: &Path, manifest: &Path) -> Result<(), AwfError> {
    use std::os::unix::fs::PermissionsExt;
    // Symlinks are followed only as long as they stay in the plugin's directory: a
    // manifest must not point awf at a program elsewhere on the machine.
    let dir = manifest.parent().unwrap_or(Path::new("."));
    if let (Ok(real), Ok(real_dir)) = (std::fs::canonicalize(exe), std::fs::canonicalize(dir))
        && !real.starts_with(&real_dir)
    {
        return Err(AwfError::new(
            codes::PLUGIN_MANIFEST,
            format!(
                "the executable {} of the plugin manifest {} leads to {}, outside the plugin's \
                 directory {}; put the program itself (a copy or a hard link) into the \
                 directory",
                exe.display(),
                manifest.display(),
                real.display(),
                real_dir.display()
            ),
        ));
    }
    let problem = match std::fs::metadata(exe) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_string(),
        Err(e) => format!("cannot be read: {e}"),
        Ok(m) if !m.is_file() => "is not a file".to_string(),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            "is not executable (chmod +x it)".to_string()
        }
        Ok(_) => return Ok(()),
    };
    Err(AwfError::new(
        codes::PLUGIN_MANIFEST,
        format!(
            "the executable {} of the plugin manifest {} {problem}; build the plugin into that \
             path, or name its file with the manifest field `executable`",
            exe.display(),
            manifest.display()
        ),
    ))
}

fn bad(path: &Path, problem: impl std::fmt::Display) -> AwfError {
    AwfError::new(
        codes::PLUGIN_MANIFEST,
        format!("the plugin manifest {} {problem}", path.display()),
    )
}

fn describe_key(key: &Yaml) -> String {
    match key {
        Yaml::String(s) => format!("`{s}`"),
        other => describe_value(other).to_string(),
    }
}

fn describe_value(v: &Yaml) -> &'static str {
    match v {
        Yaml::Real(_) => "a number",
        Yaml::Integer(_) => "a number",
        Yaml::String(_) => "text",
        Yaml::Boolean(_) => "a boolean",
        Yaml::Array(_) => "a list",
        Yaml::Hash(_) => "a mapping",
        Yaml::Alias(_) => "an alias",
        Yaml::Null => "empty (null)",
        Yaml::BadValue => "an invalid value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin directory `plugin` with an executable `exe` (mode 0755) and no manifest,
    /// in a temp dir that the returned guard removes when dropped.
    fn dir_with_exe(tag: &str, exe: &str) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::Builder::new()
            .prefix(&format!("awf-manifest-{tag}-"))
            .tempdir()
            .unwrap();
        let d = tmp.path().join("plugin");
        std::fs::create_dir_all(d.join("bin")).unwrap();
        let p = d.join(exe);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        (tmp, d)
    }

    #[test]
    fn an_executable_symlinked_out_of_the_directory_is_refused_naming_the_target() {
        let (tmp, d) = dir_with_exe("symlink", "inside");
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(&outside, d.join("notes")).unwrap();
        std::fs::write(
            d.join(MANIFEST_FILE),
            "name: notes\nversion: 1\ndescription: x\n",
        )
        .unwrap();
        let e = Manifest::load(&d).unwrap_err();
        assert!(
            e.message().contains("outside the plugin's directory"),
            "{e}"
        );
        assert!(e.message().contains(&outside.display().to_string()), "{e}");
        // A symlink that stays inside is followed.
        std::fs::remove_file(d.join("notes")).unwrap();
        std::os::unix::fs::symlink("inside", d.join("notes")).unwrap();
        assert!(Manifest::load(&d).is_ok());
    }

    #[test]
    fn an_alias_bomb_or_an_oversized_manifest_is_refused_naming_the_file() {
        let (_tmp, d) = dir_with_exe("bomb", "notes");
        let mut bomb = String::from(
            "name: notes\nversion: 1\ndescription: x\na0: &a0 [x, x, x, x, x, x, x, x, x]\n",
        );
        for level in 1..9 {
            let prev = format!("*a{}", level - 1);
            bomb.push_str(&format!(
                "a{level}: &a{level} [{}]\n",
                [prev.as_str(); 9].join(", ")
            ));
        }
        std::fs::write(d.join(MANIFEST_FILE), &bomb).unwrap();
        let e = Manifest::load(&d).unwrap_err();
        assert!(e.message().contains("YAML nodes"), "{e}");
        assert!(e.message().contains(MANIFEST_FILE), "{e}");
        let mut big = String::from("name: notes\nversion: 1\ndescription: x\n");
        big.push_str(&format!("# {}\n", "x".repeat(MAX_MANIFEST_BYTES as usize)));
        std::fs::write(d.join(MANIFEST_FILE), &big).unwrap();
        let e = Manifest::load(&d).unwrap_err();
        assert!(e.message().contains("over the 1024 KiB"), "{e}");
    }

    #[test]
    fn a_good_manifest_and_its_default_executable() {
        let (_tmp, d) = dir_with_exe("good", "notes");
        let m = Manifest::parse(
            "name: notes\nversion: 0.1.0\ndescription: \"Notes: a store\"\n",
            &d,
        )
        .unwrap();
        assert_eq!(m.name, "notes");
        assert_eq!(m.version, "0.1.0");
        assert_eq!(m.description, "Notes: a store");
        assert_eq!(m.executable, d.join("notes"));
    }

    #[test]
    fn the_executable_field_and_numeric_versions() {
        let (_tmp, d) = dir_with_exe("field", "bin/run");
        let m = Manifest::parse(
            "name: my-tool2\nversion: 1.0\ndescription: x\nexecutable: bin/run\n",
            &d,
        )
        .unwrap();
        assert_eq!(
            (m.version.as_str(), m.executable),
            ("1.0", d.join("bin/run"))
        );
    }

    #[test]
    fn env_passthrough_is_a_list_of_names_or_prefixes() {
        let (_tmp, d) = dir_with_exe("envpass", "notes");
        let head = "name: notes\nversion: 1\ndescription: x\n";
        let m =
            Manifest::parse(&format!("{head}env_passthrough: [NOTES_DB, NOTES_*]\n"), &d).unwrap();
        assert_eq!(m.env_passthrough, ["NOTES_DB", "NOTES_*"]);
        assert!(
            Manifest::parse(head, &d)
                .unwrap()
                .env_passthrough
                .is_empty()
        );
        for bad in [
            "env_passthrough: NOTES_DB",
            "env_passthrough: [\"*\"]",
            "env_passthrough: [1]",
        ] {
            let e = Manifest::parse(&format!("{head}{bad}\n"), &d).unwrap_err();
            assert!(e.message().contains("`env_passthrough`"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_error_names_the_file_and_the_field() {
        let (_tmp, d) = dir_with_exe("errors", "notes");
        let file = d.join(MANIFEST_FILE).display().to_string();
        for (text, expect) in [
            ("version: 1\ndescription: x\n", "`name`"),
            ("name: notes\ndescription: x\n", "`version`"),
            ("name: notes\nversion: 1\n", "`description`"),
            (
                "name: Notes\nversion: 1\ndescription: x\n",
                "field `name` is \"Notes\"",
            ),
            (
                "name: my_notes\nversion: 1\ndescription: x\n",
                "^[a-z][a-z0-9-]*$",
            ),
            (
                "name: notes\nversion: 1\ndescription: [a]\n",
                "`description` must be text, not a list",
            ),
            (
                "name: notes\nversion: 1\ndescription: x\nexecutabel: y\n",
                "unknown field `executabel`",
            ),
            (
                "name: notes\nversion: 1\ndescription: x\nexecutable: ../x\n",
                "field `executable`",
            ),
            (
                "name: notes\nversion: 1\ndescription: x\nexecutable: /bin/sh\n",
                "field `executable`",
            ),
            (
                "name: notes\nversion: 1\ndescription: \"\"\n",
                "`description` is empty",
            ),
            ("- name\n", "must be a mapping"),
            ("", "is empty"),
            ("name: [unclosed\n", "not valid YAML"),
        ] {
            let e = Manifest::parse(text, &d).unwrap_err();
            assert_eq!(e.code(), codes::PLUGIN_MANIFEST);
            assert!(e.message().contains(&file), "{text:?}: {e}");
            assert!(e.message().contains(expect), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_missing_or_non_executable_file_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let (_tmp, d) = dir_with_exe("missing", "other");
        let e = Manifest::parse("name: notes\nversion: 1\ndescription: x\n", &d).unwrap_err();
        assert!(
            e.message().contains(&d.join("notes").display().to_string()),
            "{e}"
        );
        assert!(e.message().contains("does not exist"), "{e}");
        std::fs::write(d.join("notes"), "x").unwrap();
        std::fs::set_permissions(d.join("notes"), std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Manifest::parse("name: notes\nversion: 1\ndescription: x\n", &d).unwrap_err();
        assert!(e.message().contains("not executable"), "{e}");
    }

    #[test]
    fn name_rule() {
        for ok in ["a", "notes", "my-plugin-2"] {
            assert!(is_valid_plugin_name(ok), "{ok}");
        }
        for bad in ["", "1a", "-a", "A", "a_b", "a.b", "a b", "é"] {
            assert!(!is_valid_plugin_name(bad), "{bad}");
        }
    }
}
