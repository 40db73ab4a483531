//! The example workflows in examples/workflows/ are valid: `awf validate` exits 0 on each,
//! and there is one per provider.

use crate::common;
use std::path::Path;

#[test]
fn every_example_workflow_validates_and_every_provider_has_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows");
    let mut providers = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let out = common::awf_validate(&dir, &path).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        let text = std::fs::read_to_string(&path).unwrap();
        providers.extend(
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("provider: "))
                .map(str::to_string),
        );
    }
    providers.sort();
    providers.dedup();
    assert_eq!(
        providers,
        ["claude", "codex", "gemini", "openai_compatible", "opencode"]
    );
}

/// The README's first command, as a new user runs it: from the repository's root, and
/// from a home directory with the default state directory (`~/.local/state`, beneath the
/// workspace then), with no key and no XDG variable set.
#[test]
fn the_readme_s_first_run_works_from_the_checkout_and_from_home() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let first = repo
        .join("examples/workflows/first.yaml")
        .canonicalize()
        .unwrap();
    let home = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-first-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    for (cwd, state) in [
        (repo.as_path(), Some(home.join("state"))),
        (home.as_path(), None),
    ] {
        // The human summary, as the README shows it.
        let mut cmd = common::awf(cwd);
        cmd.arg("run")
            .arg(&first)
            .env("HOME", &home)
            .env_remove("XDG_STATE_HOME");
        if let Some(s) = &state {
            cmd.env("XDG_STATE_HOME", s);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "from {}: {stdout}\n{}",
            cwd.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Rust files under ."), "{stdout}");
    }
    assert!(home.join(".local/state/awf").is_dir());
}
