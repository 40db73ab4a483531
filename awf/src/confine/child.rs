//! A child in a jail: one Bash call, a third-party MCP server or a plugin. [`spawn`] is the
//! one way each starts: `cmd` in the [`Jail`](super::Jail) of `confinement` (a call's in
//! its cgroup, forked on the cgroup's own thread; a long-lived child tied to awf, so that
//! it dies with awf, and with it whatever it started: its PID namespace), and the jail's
//! links served (the egress proxy under a host list, the unix-socket supervisor) for as long
//! as the child lives. A Bash call whose jail was made ahead starts through
//! [`Confinement::start_ahead`](super::Confinement::start_ahead) and has its links served
//! by [`serve`]. [`package_trees`] is what a long-lived child must read to run that no rule
//! grants otherwise.

use super::{Confinement, egress, unix_grants};
use crate::process::ProcessGroup;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the child is.
#[derive(Debug, Clone, Copy)]
pub enum Lifetime {
    /// One Bash call of `timeout` seconds: its rlimits and its cgroup, and the thread that
    /// starts it its parent.
    Call { timeout: u64 },
    /// A third-party server or a plugin: it lives as long as the session, and dies with awf.
    Session,
}

/// A child started in its jail.
pub struct Spawned {
    pub group: ProcessGroup,
    /// Its links, served; [`Links::stop`] once it ended.
    pub links: Links,
    /// A call's cgroup, to [finish](super::cgroup::CallCgroup::finish) once it ended.
    pub cgroup: Option<super::cgroup::CallCgroup>,
    /// Without a PID namespace of its own, what it starts may leave its group: the
    /// caller's orphan sweep has to run after it.
    pub may_leave_orphans: bool,
    /// When its jail was ready, before the fork.
    pub jailed: Instant,
}

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
    /// Once the child is gone: its proxy (given `grace` for the connections in flight) and
    /// supervisor end.
    pub fn stop(&self, grace: Duration) {
        if let Some(s) = self.egress.lock().unwrap_or_else(|e| e.into_inner()).take() {
            s.stop(grace);
        }
        if let Some(s) = self.unix.lock().unwrap_or_else(|e| e.into_inner()).take() {
            s.stop();
        }
    }
}

/// Starts `cmd` in the jail of `confinement` for `cwd` and serves its links; the reports of
/// its egress proxy and unix-socket supervisor go to `report`.
pub fn spawn(
    mut cmd: Command,
    confinement: &Confinement,
    cwd: &Path,
    lifetime: Lifetime,
    report: Reporter,
) -> Result<Spawned, String> {
    let timeout = match lifetime {
        Lifetime::Call { timeout } => Some(timeout),
        Lifetime::Session => None,
    };
    if timeout.is_some() {
        // Tied first: the shell dies with this server, and its orphans stay below it while
        // it runs. Then the jail (its namespaces fork: the shell is a grandchild of the
        // spawn).
        ProcessGroup::tie(&mut cmd);
    }
    let (jail, links) = confinement
        .jail(cwd, timeout)
        .map_err(|e| format!("cannot prepare the sandbox: {e}"))?
        .unzip();
    let may_leave_orphans = jail.as_ref().is_none_or(|j| !j.own_pids());
    if links.as_ref().is_some_and(|l| l.egress.is_some()) {
        cmd.envs(egress::proxy_env());
    }
    let program = cmd.get_program().to_string_lossy().into_owned();
    let jailed = Instant::now();
    let cgroup = links.as_ref().and_then(|l| l.cgroup.as_ref());
    let spawned = match (timeout, cgroup) {
        (Some(_), cgroup) => {
            if let Some(jail) = jail {
                jail.install(&mut cmd);
            }
            // The jail's end of the egress bridge is in the command now: ours closes with
            // `cmd`.
            let spawn = move || {
                let spawned = ProcessGroup::spawn(&mut cmd);
                drop(cmd);
                spawned
            };
            // Forked inside the call's cgroup where a thread waits there (see
            // confine::cgroup).
            match cgroup {
                Some(c) => c.spawn_inside(spawn).and_then(|s| s),
                None => spawn(),
            }
        }
        (None, _) => crate::process::spawn_dying_with_awf(cmd, move |cmd| {
            if let Some(jail) = jail {
                jail.install(cmd);
            }
        }),
    };
    let group = spawned.map_err(|e| {
        // The machine may have changed since its namespaces were probed: the next session
        // probes again.
        super::namespaces::forget_support();
        format!("cannot start {program}: {e}")
    })?;
    serve(group, links, confinement, report, jailed, may_leave_orphans)
}

/// Serves the links of a child started in its jail (`links`: none without a jail), its jail
/// ready at `jailed`; the child is killed if they cannot be.
pub fn serve(
    mut group: ProcessGroup,
    links: Option<super::Links>,
    confinement: &Confinement,
    report: Reporter,
    jailed: Instant,
    may_leave_orphans: bool,
) -> Result<Spawned, String> {
    let served = Links::default();
    let mut cgroup = None;
    if let Some(links) = links {
        cgroup = links.cgroup;
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
    Ok(Spawned {
        group,
        links: served,
        cgroup,
        may_leave_orphans,
        jailed,
    })
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
        let tmp = tempfile::Builder::new()
            .prefix("awf-pkgtree-")
            .tempdir()
            .unwrap();
        let d = tmp.path().to_path_buf();
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
    }
}
