//! `awf sandbox check`: what of Bash's sandbox this machine gives, one line per layer —
//! available, degraded (and why: the sysctl, the AppArmor setting, the container's filter)
//! or missing — what each guarantee falls back to, and the command that fixes it. The
//! layers are probed as `awf run` probes them. `awf sandbox apparmor-profile`: the AppArmor
//! profile that lets the installed awf make user namespaces where Ubuntu restricts them.

use crate::confine::{Support, bounds, landlock, machine::Machine, namespaces};
use crate::error::AwfError;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Available,
    Degraded,
    Missing,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Available => "available",
            State::Degraded => "degraded",
            State::Missing => "missing",
        }
    }
}

struct Layer {
    name: &'static str,
    state: State,
    /// What it gives (available) or why not.
    why: String,
    falls_back_to: Option<String>,
    fix: Option<String>,
}

fn layers() -> (Machine, Option<i64>, Vec<Layer>) {
    let m = Machine::read();
    let root = std::env::temp_dir();
    let shell = Path::new(crate::builtins::bash::shell());
    let support = namespaces::support_fresh(shell, &root);
    let errors = namespaces::probe_errors();
    let error = |layer: &str| {
        errors
            .iter()
            .find(|(l, _)| *l == layer)
            .map_or_else(|| "not tried".to_string(), |(_, e)| e.clone())
    };
    let abi = landlock::kernel_abi();
    let mut out = Vec::new();

    let (ns_degraded, ns_why, ns_fix) = m.why_no_userns(&error("mounts"));
    let cgroup = bounds::Mechanism::detect();
    let by_cgroup = matches!(cgroup, bounds::Mechanism::Cgroup(_));
    let ns = (ns_degraded, ns_why, ns_fix);
    namespace_layers(&m, &support, &error, by_cgroup, &ns, &mut out);
    let net_abi = abi.as_ref().is_ok_and(|v| *v >= landlock::NET_ABI);
    network_layer(&support, &error, net_abi, &ns.2, &mut out);
    landlock_layers(&abi, net_abi, &mut out);
    bounds_layers(cgroup, &mut out);
    (m, abi.ok(), out)
}

/// The user and mount namespaces, the PID namespace and its process cap.
fn namespace_layers(
    m: &Machine,
    support: &Support,
    error: &dyn Fn(&str) -> String,
    by_cgroup: bool,
    ns: &(bool, String, String),
    out: &mut Vec<Layer>,
) {
    let (ns_degraded, ns_why, ns_fix) = (ns.0, &ns.1, &ns.2);
    out.push(if support.mounts {
        Layer {
            name: "user and mount namespaces",
            state: State::Available,
            why: "read-only system, secret locations covered, TMPDIR a tmpfs of tmp_size".into(),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "user and mount namespaces",
            state: if ns_degraded {
                State::Degraded
            } else {
                State::Missing
            },
            why: ns_why.clone(),
            falls_back_to: Some(
                "reads confined by Landlock alone, granted path by path around the secret \
                 locations present at the start (a hidden: path inside a writable path is NOT \
                 hidden); chmod, chown and utime outside the writable paths not refused; \
                 TMPDIR not size-limited (file_size still bounds each file)"
                    .into(),
            ),
            fix: Some(ns_fix.clone()),
        }
    });
    out.push(if support.pids {
        Layer {
            name: "PID namespace",
            state: State::Available,
            why: "a call sees and signals only its own processes; none outlives it".into(),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "PID namespace",
            state: State::Missing,
            why: if support.mounts {
                error("pids")
            } else {
                "it needs the user namespace (above)".into()
            },
            falls_back_to: Some(
                "other processes of the user visible in /proc (their environment and memory \
                 stay closed: Landlock's ptrace rule); signals out of the call refused by \
                 Landlock's scope (ABI 6); what a call leaves behind killed when it ends"
                    .into(),
            ),
            fix: Some(if support.mounts {
                "a kernel with PID namespaces (CONFIG_PID_NS)".into()
            } else {
                ns_fix.clone()
            }),
        }
    });
    out.push(if support.pid_max {
        Layer {
            name: "process cap (pid_max)",
            state: State::Available,
            why: "each call's PID namespace has a pid_max of its own (processes:)".into(),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "process cap (pid_max)",
            state: if by_cgroup {
                State::Degraded
            } else {
                State::Missing
            },
            why: if support.pids {
                format!(
                    "no pid_max per PID namespace on Linux {} (it needs 6.14+)",
                    m.kernel
                )
            } else {
                "it needs the PID namespace (above)".into()
            },
            falls_back_to: Some(if by_cgroup {
                "the call cgroup's pids.max (threads count)".into()
            } else {
                "processes NOT capped".into()
            }),
            fix: Some(
                "a Linux 6.14+ kernel, or a cgroup awf may use: systemd-run --user --scope -p \
                 Delegate=yes awf run ..."
                    .into(),
            ),
        }
    });
}

/// The network namespace (`network: deny` and host lists).
fn network_layer(
    support: &Support,
    error: &dyn Fn(&str) -> String,
    net_abi: bool,
    ns_fix: &str,
    out: &mut Vec<Layer>,
) {
    out.push(if support.mounts && support.net {
        Layer {
            name: "network namespace",
            state: State::Available,
            why: "network: deny is loopback only (no UDP, no DNS); a host list goes through \
                  awf's egress proxy alone"
                .into(),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "network namespace",
            state: State::Missing,
            why: if support.mounts {
                error("net")
            } else {
                "it needs the user namespace (above)".into()
            },
            falls_back_to: Some(if net_abi {
                "network: deny by Landlock's TCP rights (connect and bind refused on every \
                 port) and a seccomp filter refusing UDP and raw sockets; a host list refuses \
                 to start"
                    .into()
            } else {
                "network: deny cannot be enforced (no Landlock network rights either); a host \
                 list refuses to start"
                    .into()
            }),
            fix: Some(if support.mounts {
                "a kernel with network namespaces (CONFIG_NET_NS)".into()
            } else {
                ns_fix.to_string()
            }),
        }
    });
}

/// Landlock: writes and reads, TCP, its scopes.
fn landlock_layers(abi: &Result<i64, String>, net_abi: bool, out: &mut Vec<Layer>) {
    let landlock_fix = "Linux 5.13+ with landlock in the lsm= boot parameter (e.g. \
                        lsm=landlock,lockdown,yama,integrity,apparmor,bpf)";
    out.push(match &abi {
        Ok(v) => Layer {
            name: "Landlock (files)",
            state: State::Available,
            why: format!("ABI {v}: writes and reads confined"),
            falls_back_to: None,
            fix: None,
        },
        Err(why) => Layer {
            name: "Landlock (files)",
            state: State::Missing,
            why: why.clone(),
            falls_back_to: Some(
                "writes and reads NOT confined; read: confined (the default) refuses to start: \
                 set read: host (secret locations stay covered where mounts work)"
                    .into(),
            ),
            fix: Some(landlock_fix.into()),
        },
    });
    let abi_v = *abi.as_ref().unwrap_or(&0);
    out.push(if net_abi {
        Layer {
            name: "Landlock network rights",
            state: State::Available,
            why: format!("ABI {abi_v} (4+): TCP connect and bind can be refused"),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "Landlock network rights",
            state: State::Missing,
            why: format!("ABI {abi_v}: network rights need ABI 4 (Linux 6.7+)"),
            falls_back_to: Some(
                "network: deny needs the network namespace; without it an explicit deny \
                 refuses to start"
                    .into(),
            ),
            fix: Some("a Linux 6.7+ kernel".into()),
        }
    });
    out.push(if abi_v >= landlock::SCOPE_ABI {
        Layer {
            name: "Landlock scopes",
            state: State::Available,
            why: format!(
                "ABI {abi_v} (6+): signals and abstract unix sockets out of a call refused"
            ),
            falls_back_to: None,
            fix: None,
        }
    } else {
        Layer {
            name: "Landlock scopes",
            state: State::Missing,
            why: format!("ABI {abi_v}: scopes need ABI 6 (Linux 6.12+)"),
            falls_back_to: Some(
                "signals kept in by the PID namespace, abstract unix sockets by the network \
                 namespace, where those are available"
                    .into(),
            ),
            fix: Some("a Linux 6.12+ kernel".into()),
        }
    });
}

/// The seccomp filter and the bounds of a call (cgroup or rlimits).
fn bounds_layers(cgroup: &bounds::Mechanism, out: &mut Vec<Layer>) {
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")));
    out.push(Layer {
        name: "seccomp",
        state: if seccomp {
            State::Available
        } else {
            State::Missing
        },
        why: if seccomp {
            "the host's unix sockets refused (docker.sock, ssh-agent, D-Bus), and UDP where \
             there is no network namespace"
                .into()
        } else {
            "the kernel has no seccomp (CONFIG_SECCOMP_FILTER)".into()
        },
        falls_back_to: (!seccomp).then(|| "the host's unix sockets reachable".into()),
        fix: (!seccomp).then(|| "a kernel with CONFIG_SECCOMP_FILTER".into()),
    });
    out.push(match cgroup {
        bounds::Mechanism::Cgroup(home) => Layer {
            name: "cgroup (memory, processes)",
            state: State::Available,
            why: format!(
                "a cgroup per call, {}: memory limited over all its processes, pids.max",
                home.describe()
            ),
            falls_back_to: None,
            fix: None,
        },
        bounds::Mechanism::Rlimits(why) => Layer {
            name: "cgroup (memory, processes)",
            state: State::Missing,
            why: why.clone(),
            falls_back_to: Some(
                "rlimits per process: memory bounds each process's address space (RLIMIT_AS), \
                 not the call's total; cpu_seconds, file_size and open_files are rlimits \
                 everywhere"
                    .into(),
            ),
            fix: Some("systemd-run --user --scope -p Delegate=yes awf run ...".into()),
        },
    });
}

/// `awf sandbox check`.
pub fn check(json: bool) -> Result<u8, AwfError> {
    let (m, abi, layers) = layers();
    if json {
        let v = json!({
            "kernel": m.kernel,
            "landlock_abi": abi,
            "container": m.container,
            "wsl": m.wsl,
            "seccomp_filtered": m.seccomp_filtered,
            "apparmor_restrict_unprivileged_userns": m.apparmor_restricts_userns,
            "layers": layers.iter().map(|l| json!({
                "layer": l.name,
                "status": l.state.name(),
                "why": l.why,
                "falls_back_to": l.falls_back_to,
                "fix": l.fix,
            })).collect::<Vec<Value>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(0);
    }
    let mut head = format!("Linux {}", m.kernel);
    if let Some(c) = &m.container {
        head.push_str(&format!(", in a {c} container"));
    }
    if m.wsl {
        head.push_str(", WSL");
    }
    println!("awf sandbox check ({head})");
    let width = layers.iter().map(|l| l.name.len()).max().unwrap_or(0);
    for l in &layers {
        println!(
            "  {:width$}  {:9}  {}",
            l.name,
            l.state.name(),
            l.why,
            width = width
        );
        if let Some(f) = &l.falls_back_to {
            println!(
                "  {:width$}  {:9}  falls back to: {f}",
                "",
                "",
                width = width
            );
        }
        if let Some(f) = &l.fix {
            println!("  {:width$}  {:9}  fix: {f}", "", "", width = width);
        }
    }
    Ok(0)
}

/// The profile for the awf at `exe`.
pub fn apparmor_profile(exe: &Path) -> String {
    let path = exe.display();
    format!(
        "# AppArmor profile for awf: lets it make the user namespaces of Bash's sandbox where\n\
         # kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10+), as Ubuntu's\n\
         # bwrap-userns-restrict does for bubblewrap. Load it with:\n\
         #   awf sandbox apparmor-profile | sudo tee /etc/apparmor.d/awf\n\
         #   sudo apparmor_parser -r /etc/apparmor.d/awf\n\
         # It names this binary's path: make it again if awf moves.\n\
         abi <abi/4.0>,\n\
         include <tunables/global>\n\
         \n\
         profile awf {path} flags=(unconfined) {{\n\
         \x20 userns,\n\
         \n\
         \x20 # Site-specific additions and overrides.\n\
         \x20 include if exists <local/awf>\n\
         }}\n"
    )
}

/// `awf sandbox apparmor-profile`.
pub fn print_apparmor_profile() -> Result<u8, AwfError> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .unwrap_or_else(|_| PathBuf::from("/usr/local/bin/awf"));
    print!("{}", apparmor_profile(&exe));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_names_the_binary_and_grants_userns() {
        let p = apparmor_profile(Path::new("/opt/awf/bin/awf"));
        assert!(p.contains("profile awf /opt/awf/bin/awf flags=(unconfined) {"));
        assert!(p.contains("\n  userns,\n"));
        assert!(p.contains("abi <abi/4.0>,"));
        assert!(p.trim_end().ends_with('}'));
    }
}
