//! The example plugins as built executables, for the tests of every crate that runs them
//! (plugin-sdk's own, and awf's through `#[path]`). Only std and serde_json.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Path of a built example, building all examples once per test binary into this test's
/// target directory. `cargo test` already builds them, but `cargo test --test X` alone
/// (or a fresh clone) does not. The build selects the whole workspace (`--workspace`, each
/// example by name), as `cargo test --workspace` does, so that the features resolve the same
/// and what it built is not built again.
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        // <target>/<profile>/deps/<this test>: build into the same target directory.
        let exe = std::env::current_exe().unwrap();
        let target_dir = exe.ancestors().nth(3).unwrap().to_path_buf();
        let output = Command::new(env!("CARGO"))
            .args(["build", "--workspace", "--message-format=json"])
            .args(example_names().iter().flat_map(|n| ["--example", n]))
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cannot run cargo to build the example plugins");
        assert!(
            output.status.success(),
            "building the example plugins failed"
        );
        let mut found = HashMap::new();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let is_example = message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "example"));
            if let (true, Some(path)) = (is_example, message["executable"].as_str()) {
                let name = message["target"]["name"].as_str().unwrap().to_string();
                found.insert(name, PathBuf::from(path));
            }
        }
        found
    });
    built
        .get(name)
        .unwrap_or_else(|| panic!("cargo built no example named {name}: {built:?}"))
        .clone()
}

/// The names of the example plugins: `examples/<name>/` or `examples/<name>.rs`.
fn example_names() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir() || path.extension().is_some_and(|e| e == "rs"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The manifest that ships next to an example.
pub fn manifest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugin-sdk/examples")
        .join(name)
        .join("plugin.yaml")
}

/// Installs an example the way a user installs a plugin: `<plugins_dir>/<name>/` holding
/// its `plugin.yaml` and its executable.
#[allow(dead_code)] // not every test binary installs plugins
pub fn install(name: &str, plugins_dir: &Path) {
    let dir = plugins_dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(manifest(name), dir.join("plugin.yaml")).unwrap();
    place_executable(&example(name), &dir.join(name));
}

/// Puts a built executable into a plugin directory as a file of its own (a hard link, or a
/// copy across file systems): awf refuses an executable that is a symlink leading out of
/// the plugin's directory.
#[allow(dead_code)]
pub fn place_executable(built: &Path, at: &Path) {
    if std::fs::hard_link(built, at).is_err() {
        std::fs::copy(built, at).unwrap();
    }
}
