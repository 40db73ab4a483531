//! Glob: files matching a `**`-capable pattern (globset) under a directory of the root,
//! found by a gitignore-aware parallel walk (ignore), listed relative to the root,
//! sorted, capped with a note.

use super::{BuiltinEnv, bound, resolve, schema};
use globset::GlobBuilder;
use ignore::{WalkBuilder, WalkState};
use mcpserver::Tool;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Mutex;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub pattern: String,
    #[serde(default)]
    pub cwd: Option<String>,
}

pub fn tool(env: &BuiltinEnv) -> Tool {
    Tool::new(
        "Glob",
        format!(
            "Find files by name pattern under cwd (default: the workspace root). `*` matches \
             within one directory, `**` across directories (e.g. \"**/*.rs\", \"src/**/mod.rs\", \
             \"*.{{toml,lock}}\"). Files ignored by .gitignore and the .git directory are skipped. \
             Paths are relative to the root, sorted; at most {} are listed.",
            env.limits.glob_results
        ),
        schema(
            &[
                ("pattern", "string", "Glob pattern, relative to cwd"),
                (
                    "cwd",
                    "string",
                    "Directory to search in, relative to the root (default: the root)",
                ),
            ],
            &["pattern"],
        ),
    )
    .annotations(serde_json::json!({"readOnlyHint": true}))
}

/// The walk both Glob and Grep use: dot files included (agents need `.github/...`),
/// `.gitignore` honoured even outside a git checkout, `.git` itself skipped, symlinks not
/// followed (a link could lead out of the root), and the workspace's hidden paths neither
/// listed nor entered (the walk's paths are physical: `base` is, and no link is followed).
pub(crate) fn walker(base: &std::path::Path, workspace: &super::paths::Workspace) -> WalkBuilder {
    let hidden = workspace.hidden();
    let mut b = WalkBuilder::new(base);
    b.hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            e.file_name() != ".git" && !hidden.iter().any(|h| e.path().starts_with(h))
        });
    b
}

/// Whether `path` names an entry beneath the root now, with no symlink on the way.
fn beneath_root(workspace: &super::paths::Workspace, path: &std::path::Path) -> bool {
    workspace
        .open_at(
            workspace.root_fd(),
            workspace.relative(path),
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )
        .is_ok()
}

pub fn run(env: &BuiltinEnv, args: Args) -> Result<String, String> {
    if args.pattern.starts_with('/') || args.pattern.split('/').any(|c| c == "..") {
        return Err(format!(
            "pattern {:?} must be relative to cwd and must not contain \"..\"; set cwd to search elsewhere inside the root",
            args.pattern
        ));
    }
    let matcher = GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob pattern {:?}: {e}", args.pattern))?
        .compile_matcher();
    let cwd_input = args.cwd.as_deref().unwrap_or(".");
    let base = resolve(env, cwd_input)?;
    if !base.is_dir() {
        return Err(format!(
            "cwd \"{cwd_input}\" is not a directory inside the root"
        ));
    }
    let found: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    walker(&base, &env.workspace).build_parallel().run(|| {
        let base = &base;
        let matcher = &matcher;
        let workspace = &env.workspace;
        let found = &found;
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if entry.file_type().is_some_and(|t| t.is_dir()) {
                return WalkState::Continue;
            }
            // The walker lists by path name, which a rename race may point outside for
            // a moment: a match is kept only if it exists beneath the root, by fd.
            if let Ok(rel) = entry.path().strip_prefix(base)
                && matcher.is_match(rel)
                && beneath_root(workspace, entry.path())
            {
                found.lock().unwrap().push(entry.into_path());
            }
            WalkState::Continue
        })
    });
    let mut found = found.into_inner().unwrap();
    if found.is_empty() {
        return Ok(format!(
            "no files match {:?} under {}",
            args.pattern,
            env.workspace.show(&base)
        ));
    }
    found.sort_unstable();
    let total = found.len();
    let cap = env.limits.glob_results;
    let mut out = String::new();
    for p in found.iter().take(cap) {
        out.push_str(&env.workspace.show(p));
        out.push('\n');
    }
    if total > cap {
        out.push_str(&format!(
            "[{total} files match; showing the first {cap} in sorted order; use a narrower pattern or cwd]"
        ));
    }
    Ok(bound::bound_text(
        out,
        env.limits.output_bytes,
        "use a narrower pattern or cwd",
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn glob(env: &BuiltinEnv, pattern: &str, cwd: Option<&str>) -> Result<String, String> {
        run(
            env,
            Args {
                pattern: pattern.into(),
                cwd: cwd.map(Into::into),
            },
        )
    }

    #[test]
    fn double_star_sorted_relative_and_gitignore_aware() {
        let (_tmp, root) = testutil::root("glob");
        for f in [
            "src/b.rs",
            "src/a.rs",
            "src/deep/c.rs",
            "README.md",
            "target/x.rs",
            ".git/y.rs",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        let env = testutil::env(&root);
        assert_eq!(
            glob(&env, "**/*.rs", None).unwrap(),
            "src/a.rs\nsrc/b.rs\nsrc/deep/c.rs\n"
        );
        assert_eq!(
            glob(&env, "*.rs", Some("src")).unwrap(),
            "src/a.rs\nsrc/b.rs\n"
        );
        assert!(
            glob(&env, "*.zig", None)
                .unwrap()
                .starts_with("no files match")
        );
        assert!(glob(&env, "../*", None).is_err());
        assert!(
            glob(&env, "*", Some("/"))
                .unwrap_err()
                .contains("outside the root")
        );
        assert!(glob(&env, "a[", None).unwrap_err().contains("invalid glob"));
    }

    #[test]
    fn results_are_capped_with_a_note() {
        let (_tmp, root) = testutil::root("glob-cap");
        for i in 0..30 {
            std::fs::write(root.join(format!("f{i:02}")), "").unwrap();
        }
        let mut env = testutil::env(&root);
        env.limits.glob_results = 10;
        let out = glob(&env, "f*", None).unwrap();
        assert_eq!(out.lines().count(), 11);
        assert!(out.starts_with("f00\n"));
        assert!(out.ends_with(
            "[30 files match; showing the first 10 in sorted order; use a narrower pattern or cwd]"
        ));
    }
}
