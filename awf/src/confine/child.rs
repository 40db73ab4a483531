//! A long-lived child in the jail Bash's calls get: a third-party MCP server or a plugin.
//! [`spawn`] starts `cmd` tied to awf (it dies with awf, and with it whatever it started:
//! its PID namespace), in the [`Jail`](super::Jail) of `confinement`, and serves the
//! jail's links (the egress proxy under a host list, the unix-socket supervisor) for as
//! long as the child lives. [`package_trees`] is what such a child must read to run that
//! no rule grants otherwise.

use super::{Confinement, egress, unix_grants};
use crate::process::ProcessGroup;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a child's jail reports while it runs.
pub enum Report {
    Egress(egress::proxy::Attempt),
    Unix(unix_grants::Attempt),
}

/// Where a child's reports go.
pub type Reporter = Arc<dyn Fn(Report) + Send + Sync>;

/// The jail's links of a running child, served until [`Links::stop`].
#[derive(Default)]
pub struct Links {
    egress: Mutex<Option<egress::Serving>>,
    unix: Mutex<Option<unix_grants::Supervisor>>,
}

impl Links {
    /// Once the child is gone: its proxy and supervisor end.
    pub fn stop(&self) {
        if let Some(s) = self.egress.lock().unwrap_or_else(|e| e.into_inner()).take() {
            s.stop(Duration::from_millis(200));
        }
        if let Some(s) = self.unix.lock().unwrap_or_else(|e| e.into_inner()).take() {
            s.stop();
        }
    }
}

/// Spawns `cmd` (its environment, stdio and working directory set) in the jail of
/// `confinement` over `root`; the proxy's environment is added under a host list.
pub fn spawn(
    mut cmd: Command,
    confinement: &Confinement,
    root: &Path,
    report: Reporter,
) -> Result<(ProcessGroup, Links), String> {
    let jail = confinement
        .jail(root, None)
        .map_err(|e| format!("cannot prepare its sandbox: {e}"))?;
    let (jail, links) = match jail {
        Some((jail, links)) => (Some(jail), Some(links)),
        None => (None, None),
    };
    if links.as_ref().is_some_and(|l| l.egress.is_some()) {
        cmd.envs(egress::proxy_env());
    }
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut group = crate::process::spawn_dying_with_awf(cmd, move |cmd| {
        if let Some(jail) = jail {
            jail.install(cmd);
        }
    })
    .map_err(|e| format!("cannot start {program}: {e}"))?;
    let served = Links::default();
    if let Some(links) = links {
        if let (Some(bridge), Some(proxy)) = (links.egress, confinement.egress()) {
            let report = report.clone();
            let reporter: egress::Reporter = Arc::new(move |a| report(Report::Egress(a)));
            match bridge.serve(proxy.clone(), reporter) {
                Ok(s) => *served.egress.lock().unwrap() = Some(s),
                Err(e) => {
                    group.kill();
                    return Err(format!("cannot reach its network namespace: {e}"));
                }
            }
        }
        if let Some(pending) = links.unix {
            let reporter: unix_grants::Reporter = Arc::new(move |a| report(Report::Unix(a)));
            match pending.serve(confinement.unix_grants().clone(), reporter) {
                Ok(s) => *served.unix.lock().unwrap() = Some(s),
                Err(e) => {
                    group.kill();
                    return Err(format!("cannot supervise its unix sockets: {e}"));
                }
            }
        }
    }
    Ok((group, served))
}

/// What a child must read to run that no rule grants otherwise: the program and the
/// script files among its arguments (relative to `root`), and the package trees they lie
/// in (the outermost `node_modules` directory, a Python virtual environment).
pub fn package_trees(program: &Path, args: &[String], root: &Path) -> Vec<PathBuf> {
    let mut files = vec![program.to_path_buf()];
    for a in args {
        if a.starts_with('-') {
            continue;
        }
        let p = root.join(a);
        if p.is_file() {
            files.push(p);
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for f in files {
        for p in [f.clone(), crate::private_files::real_path(&f)] {
            let tree = p
                .ancestors()
                .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
                .last()
                .or_else(|| p.ancestors().find(|a| a.join("pyvenv.cfg").is_file()))
                .map(Path::to_path_buf)
                .unwrap_or(p);
            if !out.contains(&tree) {
                out.push(tree);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_trees_are_the_outermost_node_modules_or_the_venv() {
        let d = std::env::temp_dir().join(format!("awf-pkgtree-{}", std::process::id()));
        let script = d.join("proj/node_modules/@scope/pkg/node_modules/dep/index.js");
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::write(&script, "").unwrap();
        let venv = d.join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(venv.join("bin/python"), "").unwrap();
        let trees = package_trees(
            &venv.join("bin/python"),
            &["-m".into(), script.display().to_string()],
            Path::new("/"),
        );
        let real = |p: PathBuf| crate::private_files::real_path(&p);
        assert!(trees.contains(&real(venv.clone())), "{trees:?}");
        assert!(
            trees.contains(&real(d.join("proj/node_modules"))),
            "{trees:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
