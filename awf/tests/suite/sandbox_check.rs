//! `awf sandbox check` tells the truth on this machine and on each simulated one (no user
//! namespaces, no mounts, no cgroups): the layer that is gone is said to be, with the
//! fallback and the fix; `awf sandbox apparmor-profile` names the installed binary.

use crate::common;

use common::restricted::{without_cgroups, without_mounts, without_user_namespaces};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn report(mut cmd: Command) -> Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn layer<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == name)
        .unwrap_or_else(|| panic!("no layer {name}: {r:#}"))
}

const ARGS: &[&str] = &["sandbox", "check", "--format", "json"];

fn here() -> Value {
    let mut cmd = Command::new(common::AWF);
    cmd.args(ARGS);
    report(cmd)
}

#[test]
fn on_this_machine_every_layer_is_reported_with_a_fix_for_what_is_missing() {
    let r = here();
    let layers = r["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 9, "{r:#}");
    for l in layers {
        let status = l["status"].as_str().unwrap();
        assert!(
            ["available", "degraded", "missing"].contains(&status),
            "{l}"
        );
        if status != "available" {
            assert!(
                l["fix"].is_string() && l["falls_back_to"].is_string(),
                "{l}"
            );
        }
    }
    // The human form says the same, a line per layer.
    let out = Command::new(common::AWF)
        .args(["sandbox", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for l in layers {
        let name = l["layer"].as_str().unwrap();
        let line = text
            .lines()
            .find(|t| t.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        assert!(line.contains(l["status"].as_str().unwrap()), "{line}");
    }
}

#[test]
fn without_user_namespaces_the_namespaces_are_missing_and_the_sysctl_is_named() {
    let r = report(without_user_namespaces(Path::new(common::AWF), ARGS));
    let ns = layer(&r, "user and mount namespaces");
    assert_eq!(ns["status"], "missing", "{r:#}");
    assert!(
        ns["why"]
            .as_str()
            .unwrap()
            .contains("max_user_namespaces is 0"),
        "{ns}"
    );
    assert!(
        ns["fix"]
            .as_str()
            .unwrap()
            .contains("sysctl -w user.max_user_namespaces"),
        "{ns}"
    );
    assert!(
        ns["falls_back_to"]
            .as_str()
            .unwrap()
            .contains("path by path"),
        "{ns}"
    );
    for name in ["PID namespace", "network namespace"] {
        assert_eq!(layer(&r, name)["status"], "missing", "{r:#}");
    }
    // Landlock needs no namespace: as here.
    let h = here();
    assert_eq!(
        layer(&r, "Landlock (files)")["status"],
        layer(&h, "Landlock (files)")["status"]
    );
}

#[test]
fn without_mounts_the_namespaces_are_missing_with_the_filter_named() {
    let mut cmd = Command::new(common::AWF);
    cmd.args(ARGS);
    without_mounts(&mut cmd);
    let r = report(cmd);
    let ns = layer(&r, "user and mount namespaces");
    assert_ne!(ns["status"], "available", "{r:#}");
    assert!(
        ns["why"].as_str().unwrap().contains("seccomp filter"),
        "{ns}"
    );
    assert!(ns["fix"].as_str().unwrap().contains("seccomp"), "{ns}");
    assert_eq!(r["seccomp_filtered"], true, "{r:#}");
    let net = layer(&r, "network namespace");
    assert!(
        net["falls_back_to"]
            .as_str()
            .unwrap()
            .contains("seccomp filter refusing UDP"),
        "{net}"
    );
}

#[test]
fn without_cgroups_memory_falls_back_to_rlimits() {
    let r = report(without_cgroups(Path::new(common::AWF), ARGS));
    let cg = layer(&r, "cgroup (memory, processes)");
    assert_eq!(cg["status"], "missing", "{r:#}");
    assert!(
        cg["falls_back_to"].as_str().unwrap().contains("RLIMIT_AS"),
        "{cg}"
    );
    assert!(cg["fix"].as_str().unwrap().contains("Delegate=yes"), "{cg}");
}

#[test]
fn the_apparmor_profile_names_the_installed_binary_and_grants_userns() {
    let out = Command::new(common::AWF)
        .args(["sandbox", "apparmor-profile"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let exe = std::fs::canonicalize(common::AWF).unwrap();
    assert!(
        text.contains(&format!(
            "profile awf {} flags=(unconfined) {{",
            exe.display()
        )),
        "{text}"
    );
    assert!(text.contains("\n  userns,\n"), "{text}");
    assert!(
        text.contains("apparmor_parser -r /etc/apparmor.d/awf"),
        "{text}"
    );
}

/// One spelling for JSON on every command that prints it: `--output json`, the older
/// `--format json` and `--json` kept as other names of it.
#[test]
fn every_command_that_prints_json_takes_output_json() {
    let wf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflows/first.yaml");
    let wf = wf.to_str().unwrap();
    let dir = std::env::temp_dir();
    let json = |args: &[&str]| -> serde_json::Value {
        let out = std::process::Command::new(common::AWF)
            .args(args)
            .current_dir(&dir)
            .env("AWF_PLUGINS_PATH", dir.join("no-such-plugins-dir"))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?}: not JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    };
    assert_eq!(
        json(&["validate", "--output", "json", wf]),
        json(&["validate", "--format", "json", wf])
    );
    assert!(json(&["sandbox", "check", "--output", "json"])["layers"].is_array());
    assert!(json(&["sandbox", "check", "--format", "json"])["layers"].is_array());
    let root = dir.to_str().unwrap();
    for old in ["--json", "--output"] {
        let mut args = vec!["tools", "list", "--root", root, old];
        if old == "--output" {
            args.push("json");
        }
        assert!(json(&args)["tools"].is_array(), "{args:?}");
    }
    json(&["plugins", "list", "--output", "json"]);
}
