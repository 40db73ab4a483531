//! Confinement of the agent's shell: what Bash may write, read, see and reach. The policy
//! comes from the step's `mcp_proxy.sandbox` ([`Policy`], in `policy.rs`); this module
//! resolves it once per session ([`Confinement::new`], which probes the kernel) and
//! prepares each call's [`Jail`] ([`Confinement::jail`]), which the command enters between
//! fork and exec; `describe.rs` says it in words:
//!
//! - writes: Landlock, beneath the root, the private temp directory ([`PrivateTmp`],
//!   Bash's TMPDIR), `/dev/null` and the `writable:` paths; every other mount read-only in
//!   Bash's mount namespace, so mode, owner and times cannot change outside either;
//! - reads ([`ReadMode`]): `confined` (the default) grants Landlock read rights beneath the
//!   writable paths, the system, the toolchains on PATH and git's configuration
//!   ([`readable`]) and the `readable:` paths; `host` reads what the user can. Under both,
//!   the secret locations ([`secrets`]) and the `hidden:` paths are covered by empty
//!   read-only mounts;
//! - processes: its own PID namespace with a fresh `/proc`, whose init kills what is left
//!   when the shell exits; Landlock's scopes refuse signals out of the call (ABI 6); the
//!   namespace's own `pid_max` caps how many live at once (Linux 6.14+);
//! - network ([`Network`]): under `deny` its own network namespace with loopback only;
//!   under a host list the same, whose only way out is the session's [`egress`] proxy,
//!   reached through a listener the call hands out of its namespace; where no namespace
//!   can be had, `deny` falls back to Landlock's TCP rights.
//!
//! What allocates is done here, in the parent; `namespaces` and `landlock` only make
//! syscalls in the child. Each layer the kernel lacks is one WARN, or an error where the
//! workflow asked for it explicitly.

pub mod bounds;
pub mod cgroup;
pub mod child;
mod describe;
pub mod egress;
mod fd_pass;
pub mod landlock;
pub mod machine;
pub mod namespaces;
mod network_ns;
mod policy;
pub mod readable;
pub mod seccomp;
pub mod secrets;
pub mod session_ns;
pub mod standby;
mod syscalls;
mod tmp;
pub mod unix_grants;

pub use namespaces::{Jail, NetJail, Support};
use policy::covers;
pub use policy::{
    DEFAULT_PROCESSES, Guarantee, MAX_PROCESSES, MIN_PROCESSES, Network, Policy, ReadMode, Role,
    Sandbox,
};
pub use tmp::PrivateTmp;

use crate::private_files::real_path;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directories to pin for `covers`: those strictly between a writable root and a
/// cover beneath it, outermost first (a rename there would move the cover's target away
/// from its name; outside the writable roots Landlock refuses renames already).
fn pins(covers: &[PathBuf], writable: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for c in covers {
        let Some(w) = writable.iter().find(|w| c.starts_with(w) && c != *w) else {
            continue;
        };
        let mut between: Vec<&Path> = c
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(w) && a != w)
            .collect();
        between.reverse();
        for a in between {
            if !out.iter().any(|o| o == a) {
                out.push(a.to_path_buf());
            }
        }
    }
    out.sort_by_key(|p| p.components().count());
    out
}

/// What Bash's network is, as enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetStatus {
    Allowed,
    /// Its own network namespace, loopback only: no route out, no UDP, no DNS.
    Isolated,
    /// Landlock refuses TCP connect and bind (no network namespace to be had), a seccomp
    /// filter every other IPv4 and IPv6 socket (UDP, raw).
    DeniedTcp,
    /// Its own network namespace whose only way out is awf's egress proxy, by host name.
    Hosts,
    /// Deny was the default but cannot be enforced (why).
    Unenforced(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Writes are confined; the kernel's Landlock ABI version.
    On(i64),
    /// Switched off in the config.
    Off,
    /// Wanted but the kernel does not offer it (why).
    Unavailable(String),
}

#[derive(Debug, Clone)]
pub struct Confinement {
    status: Status,
    net: NetStatus,
    read: ReadMode,
    support: Support,
    processes: u32,
    /// Root (unless read-only), temp dir, /dev/null, then the `writable:` paths.
    writable: Vec<PathBuf>,
    /// How many of `writable` come before the `writable:` paths.
    fixed_writable: usize,
    /// Under `read: confined`: every read-only root (system, toolchains, `readable:`).
    readable: Vec<PathBuf>,
    /// The user's `readable:` paths, for the description.
    readable_extra: Vec<PathBuf>,
    homes: Vec<PathBuf>,
    hidden_extra: Vec<PathBuf>,
    tmp: PathBuf,
    /// The session's Landlock domain, cloned into each call's jail.
    plan: Option<landlock::Plan>,
    /// The session's egress proxy under a host list.
    egress: Option<Arc<egress::Egress>>,
    /// The filter that refuses Bash unix sockets ([`seccomp`]), or hands its connections
    /// to a supervisor where some are granted.
    unix_filter: Option<seccomp::Filter>,
    /// The `unix_sockets:` grants, as given (the supervisor looks each up per connection).
    unix_grants: Arc<Vec<PathBuf>>,
    /// Directories granted their listing only (no mount can cover a secret beneath them:
    /// their entries are granted one by one around it).
    listed: Vec<PathBuf>,
    /// Bash's per-call bounds.
    bounds: Option<bounds::Bounds>,
    /// Where each call gets a cgroup of its own (memory, pids), if anywhere.
    cgroups: Option<Arc<cgroup::Pool>>,
    /// What does not hold on this machine, in words (the WARN, the description, the JSON).
    degraded: Vec<String>,
    /// The session's namespace, whose TMPDIR is a tmpfs of `tmp_size` (Bash, where mounts
    /// work): made at the first call, shared by the clones of this value.
    session: Option<Arc<std::sync::OnceLock<Option<Arc<session_ns::SessionNs>>>>>,
    /// The jail made ahead for the next Bash call, where a call's jail has namespaces of
    /// its own to make ([`standby`]); shared by the clones of this value.
    ahead: Option<Arc<standby::Shelf>>,
}

/// What a call's jail hands out once the command is spawned.
pub struct Links {
    /// Under a host list: the call's end of the egress bridge, to
    /// [serve](egress::Bridge::serve).
    pub egress: Option<egress::Bridge>,
    /// With `unix_sockets:` grants: the call's supervisor, to
    /// [serve](unix_grants::Pending::serve).
    pub unix: Option<unix_grants::Pending>,
    /// The call's cgroup, to [finish](cgroup::CallCgroup::finish) once it ended.
    pub cgroup: Option<cgroup::CallCgroup>,
}

/// Landlock in force: off when the sandbox says so, else on where the kernel has it.
fn landlock_status(wanted: bool) -> Status {
    if !wanted {
        return Status::Off;
    }
    match landlock::kernel_abi() {
        Ok(v) => Status::On(v),
        Err(why) => Status::Unavailable(why),
    }
}

/// A hidden path must not hold a path Bash must write.
fn check_hidden(hidden: &[PathBuf], writable: &[PathBuf]) -> Result<(), String> {
    match hidden
        .iter()
        .find_map(|h| Some((h, writable.iter().find(|w| w.starts_with(h))?)))
    {
        Some((h, w)) => Err(format!(
            "hidden path {} holds {}, which Bash must reach; hide something narrower",
            h.display(),
            w.display()
        )),
        None => Ok(()),
    }
}

/// The pool of Bash's call cgroups, where a call's memory and processes are bounded by a
/// cgroup (a long-lived child stays in awf's).
fn call_cgroups(policy: &Policy, processes: u32) -> Option<Arc<cgroup::Pool>> {
    match policy.bounds().map(|b| (b, bounds::Mechanism::detect())) {
        // The waiter and the namespace's init count too.
        Some((b, bounds::Mechanism::Cgroup(home))) => {
            Some(cgroup::Pool::new(home, b.memory(), processes + 2))
        }
        _ => None,
    }
}

impl Confinement {
    /// Resolves `policy` for a session over `root` whose Bash gets `tmp` as TMPDIR and
    /// `path`/`home` as PATH/HOME; `var` reads awf's environment (toolchain homes). Probes
    /// the kernel (Landlock version; namespaces by running `shell -c :` once per process).
    pub fn new(
        policy: &Policy,
        root: &Path,
        tmp: &Path,
        shell: &Path,
        path: Option<&str>,
        home: Option<&Path>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Confinement, String> {
        policy.check()?;
        let sb = &policy.sandbox;
        let mut writable = vec![real_path(tmp), PathBuf::from("/dev/null")];
        if !policy.root_read_only() {
            writable.insert(0, real_path(root));
        }
        let fixed_writable = writable.len();
        writable.extend(sb.writable.iter().map(|p| real_path(p)));
        let status = landlock_status(sb.landlock());
        let read = policy.read_mode()?;
        if let (ReadMode::Confined, Status::Unavailable(why)) = (read, &status) {
            return Err(format!(
                "Bash's reads cannot be confined: {why}; run on a kernel with Landlock \
                 (Linux 5.13+, `lsm=` including landlock), or set `read: host` in \
                 mcp_proxy.sandbox (secret locations stay hidden by mounts)"
            ));
        }
        // Secret locations are hidden and processes apart with Landlock switched off too.
        let support = policy
            .support
            .unwrap_or_else(|| namespaces::support(shell, root));
        let hidden: Vec<PathBuf> = sb.hidden.iter().map(|p| real_path(p)).collect();
        check_hidden(&hidden, &writable)?;
        let homes = readable::homes(home);
        let mut readable = policy.read_roots(read, path, home, var);
        if policy.root_read_only() && read == ReadMode::Confined {
            readable.push(real_path(root));
        }
        if let Some(b) = &policy.bounds() {
            b.check()?;
        }
        let processes = sb.processes.unwrap_or(DEFAULT_PROCESSES);
        let cgroups = call_cgroups(policy, processes);
        let mut c = Confinement {
            status,
            net: NetStatus::Allowed,
            read,
            support,
            processes,
            writable,
            fixed_writable,
            readable,
            readable_extra: sb.readable.clone(),
            homes,
            hidden_extra: hidden,
            tmp: tmp.to_path_buf(),
            plan: None,
            egress: None,
            unix_filter: Some(seccomp::Filter::new(
                !sb.unix_sockets.is_empty() || policy.serves_unix_socket(),
            )),
            unix_grants: Arc::new(sb.unix_sockets.clone()),
            listed: Vec::new(),
            bounds: policy.bounds(),
            cgroups,
            degraded: Vec::new(),
            session: None,
            ahead: (support.mounts && support.pids).then(Arc::default),
        };
        let read_handled = c.grant_reads_around_secrets();
        c.say_what_processes_lack();
        if policy.bounds().is_some() {
            if c.support.mounts {
                c.session = Some(Arc::default());
            } else {
                c.degraded.push(
                    "the private TMPDIR is not size-limited (no mount namespace); file_size \
                     still bounds each file"
                        .into(),
                );
            }
        }
        c.filter_unix_sockets(policy)?;
        let want = c.enforce_network(policy)?;
        c.require(&sb.require, &want)?;
        if let Network::Hosts(hosts) = &want
            && c.net == NetStatus::Hosts
        {
            c.egress = Some(Arc::new(egress::Egress::new(hosts)?));
        }
        c.plan_landlock(read_handled);
        c.warn_once();
        Ok(c)
    }

    /// Without a mount namespace no mount can cover a secret: under Landlock the secrets
    /// present now are left out of the read grants, path by path (under `read: host` too,
    /// whose grant is then `/`). True when Landlock's plan handles reads.
    fn grant_reads_around_secrets(&mut self) -> bool {
        let read = self.read;
        if self.support.mounts {
            return read == ReadMode::Confined;
        }
        if !matches!(self.status, Status::On(_)) {
            self.degraded
                .push("secret locations are NOT hidden (no mount namespace, no Landlock)".into());
            return read == ReadMode::Confined;
        }
        let excluded: Vec<PathBuf> = secrets::present(&self.homes, &self.hidden_extra);
        let roots = if read == ReadMode::Host {
            vec![PathBuf::from("/")]
        } else {
            std::mem::take(&mut self.readable)
        };
        for r in &roots {
            let (l, w) = readable::grant_around(r, &excluded);
            self.listed.extend(l);
            self.readable.extend(w);
        }
        self.degraded.push(
            "secret locations and hidden: paths are not covered by mounts (no mount \
             namespace): reads are granted path by path around those present now, so one \
             made later inside a readable tree is readable"
                .to_string(),
        );
        for e in &excluded {
            if let Some(w) = self.writable.iter().find(|w| e.starts_with(w)) {
                self.degraded.push(format!(
                    "{} lies in the writable path {} and is NOT hidden (no mount namespace)",
                    e.display(),
                    w.display()
                ));
            }
        }
        self.degraded.push(
            "chmod, chown and utime of files outside the writable paths are not refused \
             (no read-only mounts)"
                .into(),
        );
        true
    }

    /// What this machine lacks to keep a call's processes apart and capped, in words.
    fn say_what_processes_lack(&mut self) {
        if !self.support.pids {
            self.degraded.push(
                "other processes of the user are visible in /proc (their environment and \
                 memory stay closed: Landlock's ptrace rule); what a call leaves behind is \
                 killed when it ends"
                    .into(),
            );
        }
        if !(self.support.pids && self.support.pid_max) && self.cgroups.is_none() {
            self.degraded
                .push("processes are NOT capped (no pid_max of a PID namespace, no cgroup)".into());
        }
    }

    /// The filter of unix sockets: a child that serves one of its own goes unfiltered where
    /// connects cannot be supervised; grants there are refused.
    fn filter_unix_sockets(&mut self, policy: &Policy) -> Result<(), String> {
        let granted = !policy.sandbox.unix_sockets.is_empty();
        if !granted
            && policy.serves_unix_socket()
            && let Err(why) = unix_grants::supervisable()
        {
            // Refusing its unix sockets would refuse its own: it goes unfiltered.
            tracing::warn!("the child may reach the host's unix sockets: {why}");
            self.unix_filter = None;
        }
        if granted && let Err(why) = unix_grants::supervisable() {
            return Err(format!(
                "unix_sockets cannot be granted here: {why}; set it to 1 (sysctl \
                 kernel.yama.ptrace_scope=1), or remove unix_sockets"
            ));
        }
        Ok(())
    }

    /// The network the policy wants, and how this machine enforces it: refused where a
    /// stated deny or host list cannot hold; under Landlock's TCP rights only, UDP and raw
    /// sockets go to the filter.
    fn enforce_network(&mut self, policy: &Policy) -> Result<Network, String> {
        let network = policy.network();
        let want = network.clone().unwrap_or(Network::Deny);
        self.net = self.net_status(&want);
        match (&network, &self.net) {
            (Some(Network::Deny), NetStatus::Unenforced(why)) => {
                return Err(format!(
                    "network: deny cannot be enforced: {why}; set network: allow, or run where \
                     user namespaces are allowed or on a kernel with Landlock ABI {} or later \
                     (Linux 6.7+)",
                    landlock::NET_ABI
                ));
            }
            (Some(Network::Hosts(_)), NetStatus::Unenforced(why)) => {
                return Err(format!(
                    "network: {{allow: [...]}} cannot be enforced: {why}; set network: allow \
                     or deny, or run where user namespaces are allowed"
                ));
            }
            _ => {}
        }
        if self.net == NetStatus::DeniedTcp {
            // Landlock covers TCP only: UDP, raw and other sockets are the filter's.
            let supervised = self
                .unix_filter
                .as_ref()
                .is_some_and(seccomp::Filter::supervised);
            self.unix_filter = Some(seccomp::Filter::without_udp(supervised));
            self.degraded.push(
                "network: deny has no network namespace: TCP connect and bind are refused on \
                 every port (Landlock) and UDP and raw sockets (seccomp), so the call cannot \
                 serve on 127.0.0.1 either"
                    .into(),
            );
        }
        Ok(want)
    }

    /// Landlock's plan: the writable paths, the readable ones, and the directories listed
    /// around secrets.
    fn plan_landlock(&mut self, read_handled: bool) {
        if let Status::On(abi) = self.status {
            let mut plan = landlock::Plan::new(abi, read_handled, self.net == NetStatus::DeniedTcp);
            let all = landlock::READ | landlock::write_rights(abi);
            for p in &self.writable {
                plan.allow(p, all);
            }
            for p in &self.readable {
                plan.allow(p, landlock::READ);
            }
            for p in &self.listed {
                plan.allow(p, landlock::READ_DIR);
            }
            self.plan = Some(plan);
        }
    }

    /// Refuses what `require` names but this machine cannot give in full; the error says
    /// what is missing and where the fix is.
    fn require(&self, require: &[Guarantee], want: &Network) -> Result<(), String> {
        for g in require {
            let missing = match g {
                Guarantee::Reads => match (&self.status, self.support.mounts) {
                    (Status::On(_), true) => None,
                    (Status::On(_), false) => Some("no mount namespace to cover secret locations"),
                    _ => Some("no Landlock"),
                },
                Guarantee::Processes => {
                    if !self.support.pids {
                        Some("no PID namespace")
                    } else if !self.support.pid_max && self.cgroups.is_none() {
                        Some("no process cap (no pid_max of its own before Linux 6.14, no cgroup)")
                    } else {
                        None
                    }
                }
                Guarantee::Network => match (want, &self.net) {
                    (Network::Allow, _) | (_, NetStatus::Isolated | NetStatus::Hosts) => None,
                    _ => Some("no network namespace"),
                },
            };
            if let Some(why) = missing {
                return Err(format!(
                    "sandbox.require names {}, which this machine cannot give: {why}; `awf \
                     sandbox check` says why and prints the fix, or remove {} from require",
                    g.name(),
                    g.name()
                ));
            }
        }
        Ok(())
    }

    /// One WARN per thing that does not hold, once per process.
    fn warn_once(&self) {
        static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
        for d in &self.degraded {
            if !said.contains(d) {
                tracing::warn!("Bash's sandbox is degraded on this machine: {d}");
                said.push(d.clone());
            }
        }
    }

    /// What does not hold on this machine, in words.
    pub fn degraded(&self) -> &[String] {
        &self.degraded
    }

    /// The session's namespace, made at the first call; where it cannot be made, calls go
    /// on without (one WARN: the TMPDIR is not size-limited then).
    fn session_ns(&self) -> Option<Arc<session_ns::SessionNs>> {
        let once = self.session.as_ref()?;
        once.get_or_init(|| {
            match session_ns::SessionNs::new(
                &self.tmp,
                self.bounds().tmp_size(),
                self.net == NetStatus::Isolated,
            ) {
                Ok(s) => Some(Arc::new(s)),
                Err(e) => {
                    tracing::warn!(
                        "Bash's private TMPDIR is not size-limited: its tmpfs could not be made \
                         ({e}); file_size still bounds each file"
                    );
                    None
                }
            }
        })
        .clone()
    }

    /// Bash's per-call bounds (the defaults where none were stated).
    pub fn bounds(&self) -> bounds::Bounds {
        self.bounds.unwrap_or_default()
    }

    /// A session that confines nothing (unit tests of the tools).
    pub fn none(root: &Path, tmp: &Path) -> Confinement {
        Confinement {
            status: Status::Off,
            net: NetStatus::Unenforced("Landlock is switched off".into()),
            read: ReadMode::Host,
            support: Support {
                mounts: false,
                pids: false,
                pid_max: false,
                net: false,
            },
            processes: DEFAULT_PROCESSES,
            writable: vec![root.to_path_buf(), tmp.to_path_buf()],
            fixed_writable: 2,
            readable: Vec::new(),
            readable_extra: Vec::new(),
            homes: Vec::new(),
            hidden_extra: Vec::new(),
            tmp: tmp.to_path_buf(),
            plan: None,
            egress: None,
            unix_filter: None,
            unix_grants: Arc::default(),
            listed: Vec::new(),
            bounds: None,
            cgroups: None,
            degraded: Vec::new(),
            session: None,
            ahead: None,
        }
    }

    fn net_status(&self, want: &Network) -> NetStatus {
        let namespace = self.support.mounts && self.support.net;
        match (want, &self.status) {
            (Network::Allow, _) => NetStatus::Allowed,
            (_, Status::Off) => NetStatus::Unenforced("Landlock is switched off".into()),
            (Network::Deny, _) if namespace => NetStatus::Isolated,
            (Network::Hosts(_), _) if namespace => NetStatus::Hosts,
            (Network::Hosts(_), _) => NetStatus::Unenforced(
                "Bash cannot get a network namespace of its own (no user namespace)".into(),
            ),
            (Network::Deny, Status::On(v)) if *v >= landlock::NET_ABI => NetStatus::DeniedTcp,
            (Network::Deny, Status::On(v)) => NetStatus::Unenforced(format!(
                "no network namespace, and the kernel's Landlock ABI {v} has no network rights \
                 (they need ABI {})",
                landlock::NET_ABI
            )),
            (Network::Deny, Status::Unavailable(why)) => {
                NetStatus::Unenforced(format!("no network namespace, and {why}"))
            }
        }
    }

    pub fn net(&self) -> &NetStatus {
        &self.net
    }

    /// The session's egress proxy, under a host list.
    pub fn egress(&self) -> Option<&Arc<egress::Egress>> {
        self.egress.as_ref()
    }

    pub fn read(&self) -> ReadMode {
        self.read
    }

    pub fn support(&self) -> Support {
        self.support
    }

    /// The directory Bash gets as TMPDIR.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// Under `read: confined`, the roots Bash may read besides its writable paths.
    pub fn readable(&self) -> &[PathBuf] {
        &self.readable
    }

    /// The secret locations to cover for a call, found again each time (a file created
    /// since the last call is covered too). Under `read: confined` only those a read could
    /// reach: beneath a readable or writable root.
    pub fn hidden_now(&self) -> Vec<PathBuf> {
        covers(
            secrets::present(&self.homes, &self.hidden_extra),
            self.read,
            &self.readable,
            &self.writable,
        )
    }

    /// Every path the builtins must refuse as Bash cannot read it: the `hidden:` paths
    /// (also those that do not exist yet) and the secret locations present now.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut out = self.hidden_extra.clone();
        for p in secrets::present(&self.homes, &[]) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The `unix_sockets:` grants.
    pub fn unix_grants(&self) -> &Arc<Vec<PathBuf>> {
        &self.unix_grants
    }

    /// The confinement of one command run in `cwd`, or None when there is nothing to do;
    /// also what the jail hands out ([`Links`]), to serve once the command is spawned.
    /// A Bash call's (`timeout`: its timeout in seconds) gets the bounds too.
    pub fn jail(&self, cwd: &Path, timeout: Option<u64>) -> std::io::Result<Option<(Jail, Links)>> {
        let bounds = self.bounds.zip(timeout).map(|(b, t)| (b, Some(t)));
        self.jail_covering(cwd, bounds, &self.hidden_now())
    }

    /// [`Confinement::jail`] covering `hidden`; with `bounds` but no timeout, the cgroup
    /// but no rlimits (they come with the command: [`standby`]).
    fn jail_covering(
        &self,
        cwd: &Path,
        bounds: Option<(bounds::Bounds, Option<u64>)>,
        hidden: &[PathBuf],
    ) -> std::io::Result<Option<(Jail, Links)>> {
        if !self.support.mounts
            && self.plan.is_none()
            && self.unix_filter.is_none()
            && bounds.is_none()
        {
            return Ok(None);
        }
        let writable: &[PathBuf] = if self.status == Status::Off {
            &[]
        } else {
            &self.writable
        };
        let (net, bridge) = match self.net {
            NetStatus::Isolated => (NetJail::Empty, None),
            NetStatus::Hosts => {
                let (bridge, sock) = egress::Bridge::pair()?;
                (
                    NetJail::Proxied {
                        port: egress::PROXY_PORT,
                        sock,
                    },
                    Some(bridge),
                )
            }
            _ => (NetJail::Host, None),
        };
        let jail = Jail::new(
            self.support,
            self.processes,
            net,
            self.status != Status::Off,
            writable,
            hidden,
            cwd,
            self.plan.clone(),
        )
        .with_pins(&pins(hidden, &self.writable))
        .with_session(self.session_ns());
        let (jail, unix) = match &self.unix_filter {
            Some(f) if f.supervised() => {
                let (pending, sock) = unix_grants::Pending::pair()?;
                (jail.with_filter(Some(f.clone()), Some(sock)), Some(pending))
            }
            f => (jail.with_filter(f.clone(), None), None),
        };
        let (jail, cgroup) = match bounds {
            Some((b, timeout)) => {
                let cgroup = match &self.cgroups {
                    Some(pool) => Some(pool.take()?),
                    None => None,
                };
                let rlimits = timeout.map(|t| bounds::Rlimits::new(&b, t, cgroup.is_none()));
                let procs = cgroup.as_ref().map_or(&[][..], |c| c.procs()).to_vec();
                (jail.with_bounds(procs, rlimits), cgroup)
            }
            None => (jail, None),
        };
        Ok(Some((
            jail,
            Links {
                egress: bridge,
                unix,
                cgroup,
            },
        )))
    }

    /// Starts `cmd` (a Bash call's, of `timeout` seconds) in the jail made ahead for this
    /// session, where one is ready and covers what a fresh jail would now. None: start it
    /// fresh, in a [`Confinement::jail`].
    pub fn start_ahead(
        &self,
        cmd: &std::process::Command,
        timeout: u64,
    ) -> Option<(crate::process::ProcessGroup, Links)> {
        let shelf = self.ahead.as_ref()?;
        let ready = shelf.take()?;
        if !ready.matches(&self.hidden_now(), &self.writable_now()) {
            tracing::debug!("the jail made ahead no longer covers what it must: a fresh one");
            return None;
        }
        let rlimits = self
            .bounds
            .map(|b| bounds::Rlimits::new(&b, timeout, !ready.has_cgroup()));
        match ready.start(cmd, rlimits) {
            Ok(started) => Some(started),
            Err(standby::Refused::TooLarge(ready)) => {
                shelf.put_back(ready);
                None
            }
            Err(standby::Refused::Failed(e)) => {
                tracing::debug!("the jail made ahead did not start ({e}): none any more");
                shelf.switch_off();
                None
            }
        }
    }

    /// Has the next Bash call's jail made ahead ([`standby`]), unless one is there: once a
    /// call's processes are gone (made while one runs, its set-up would slow the call).
    pub fn make_next_ahead(&self) {
        if let Some(shelf) = &self.ahead {
            // Without the shelf: the session's end, which drops it, waits for this maker.
            let mut me = self.clone();
            me.ahead = None;
            shelf.refill(move || me.make_ahead());
        }
    }

    /// The next Bash call's jail, its process waiting for the command.
    fn make_ahead(&self) -> std::io::Result<standby::Standby> {
        let hidden = self.hidden_now();
        let writable = self.writable_now();
        let bounds = self.bounds.map(|b| (b, None));
        match self.jail_covering(&self.tmp, bounds, &hidden)? {
            Some((jail, links)) => standby::Standby::make(jail, links, hidden, writable),
            None => Err(std::io::Error::other("no jail to make")),
        }
    }

    /// Which writable paths exist now (a jail has a writable mount of those only).
    fn writable_now(&self) -> Vec<bool> {
        self.writable.iter().map(|p| p.exists()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(landlock: bool) -> Policy {
        Policy {
            sandbox: Sandbox {
                landlock: Some(landlock),
                ..Sandbox::default()
            },
            // As where the kernel has every namespace (the degraded ones have tests of
            // their own, with awf run where the machine lacks them).
            support: Some(Support {
                mounts: true,
                pids: true,
                pid_max: true,
                net: true,
            }),
            ..Policy::default()
        }
    }

    #[test]
    fn without_mounts_reads_are_granted_around_the_secrets_and_required_guarantees_refuse() {
        let Ok(abi) = landlock::kernel_abi() else {
            return; // no Landlock: nothing is granted at all
        };
        let tmp = tempfile::Builder::new()
            .prefix("awf-around-")
            .tempdir()
            .unwrap();
        let base = tmp.path().to_path_buf();
        let home = base.join("home");
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::write(home.join(".cargo/credentials.toml"), "t").unwrap();
        std::fs::write(home.join(".cargo/config.toml"), "c").unwrap();
        let home = std::fs::canonicalize(&home).unwrap();
        let bin = home.join(".cargo/bin");
        let mut p = policy(true);
        p.support = Some(Support {
            mounts: false,
            pids: false,
            pid_max: false,
            net: false,
        });
        let make = |p: &Policy| {
            Confinement::new(
                p,
                &base,
                &base,
                Path::new("/bin/sh"),
                Some(&format!("{}:/usr/bin", bin.display())),
                Some(&home),
                &|_| None,
            )
        };
        let c = make(&p).unwrap();
        let r = c.readable();
        assert!(r.contains(&home.join(".cargo/config.toml")), "{r:?}");
        assert!(r.contains(&home.join(".cargo/bin")), "{r:?}");
        assert!(
            !r.iter()
                .any(|p| p.ends_with(".cargo") || p.ends_with("credentials.toml"))
        );
        assert!(!c.degraded().is_empty());
        assert!(c.describe().contains("on this machine"), "{}", c.describe());
        if abi >= landlock::NET_ABI {
            assert_eq!(c.net(), &NetStatus::DeniedTcp);
        }
        for g in Guarantee::ALL {
            p.sandbox.require = vec![g];
            let e = make(&p).unwrap_err();
            assert!(
                e.contains(g.name()) && e.contains("awf sandbox check"),
                "{e}"
            );
        }
        p.sandbox.require = vec![Guarantee::Network];
        p.sandbox.network = Some(Network::Allow);
        assert!(make(&p).is_ok(), "network: allow needs no namespace");
    }

    fn new(p: &Policy) -> Result<Confinement, String> {
        Confinement::new(
            p,
            Path::new("/r"),
            Path::new("/t"),
            Path::new("/bin/sh"),
            Some("/usr/bin"),
            None,
            &|_| None,
        )
    }

    #[test]
    fn off_means_no_landlock_and_says_so() {
        let c = new(&policy(false)).unwrap();
        assert_eq!(c.status(), &Status::Off);
        assert_eq!(c.read(), ReadMode::Host);
        assert!(c.describe().contains("NOT confined"));
        assert!(matches!(c.net(), NetStatus::Unenforced(_)));
        let mut deny = policy(false);
        deny.sandbox.network = Some(Network::Deny);
        let e = new(&deny).unwrap_err();
        assert!(
            e.contains("landlock is false") && e.contains("drop one"),
            "{e}"
        );
        let mut confined = policy(false);
        confined.sandbox.read = Some(ReadMode::Confined);
        let e = new(&confined).unwrap_err();
        assert!(
            e.contains("landlock is false") && e.contains("drop one"),
            "{e}"
        );
    }

    #[test]
    fn nested_hidden_paths_are_covered_once_by_the_outer() {
        let tmp = tempfile::Builder::new()
            .prefix("awf-hidden-nest-")
            .tempdir()
            .unwrap();
        let base = tmp.path().to_path_buf();
        let inner = base.join("runs/r1");
        std::fs::create_dir_all(&inner).unwrap();
        let base = std::fs::canonicalize(&base).unwrap();
        let mut c = Confinement::none(Path::new("/r"), Path::new("/t"));
        c.hidden_extra = vec![inner.clone(), base.clone()];
        let hidden = c.hidden_now();
        assert!(hidden.contains(&base), "{hidden:?}");
        assert!(
            !hidden.iter().any(|p| p != &base && p.starts_with(&base)),
            "{hidden:?}"
        );
    }

    #[test]
    fn the_directories_above_a_cover_up_to_its_writable_root_are_pinned() {
        let p = |s: &str| PathBuf::from(s);
        let pinned = pins(
            &[
                p("/ws/proj/vault/token"),
                p("/ws/proj/.env"),
                p("/ws/top"),
                p("/home/u/.ssh"),
            ],
            &[p("/ws"), p("/t")],
        );
        assert_eq!(pinned, [p("/ws/proj"), p("/ws/proj/vault")]);
    }

    #[test]
    fn network_deny_is_a_namespace_else_landlock_abi_4_and_a_host_list_needs_the_namespace() {
        let mut c = Confinement::none(Path::new("/r"), Path::new("/t"));
        let hosts = Network::Hosts(vec!["crates.io".into()]);
        c.status = Status::On(3);
        assert!(matches!(
            c.net_status(&Network::Deny),
            NetStatus::Unenforced(_)
        ));
        c.status = Status::On(7);
        assert_eq!(c.net_status(&Network::Deny), NetStatus::DeniedTcp);
        assert_eq!(c.net_status(&Network::Allow), NetStatus::Allowed);
        assert!(matches!(c.net_status(&hosts), NetStatus::Unenforced(_)));
        c.support.mounts = true;
        c.support.net = true;
        assert_eq!(c.net_status(&Network::Deny), NetStatus::Isolated);
        assert_eq!(c.net_status(&hosts), NetStatus::Hosts);
        c.status = Status::On(3);
        assert_eq!(c.net_status(&Network::Deny), NetStatus::Isolated);
        c.status = Status::Off;
        assert!(matches!(c.net_status(&hosts), NetStatus::Unenforced(_)));
    }

    #[test]
    fn writable_holds_root_tmp_devnull_and_extras() {
        let mut p = policy(false);
        p.sandbox.writable = vec![PathBuf::from("/x")];
        let c = new(&p).unwrap();
        let w: Vec<_> = c
            .writable()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(w[..3], ["/r", "/t", "/dev/null"]);
        assert!(!w.contains(&std::env::temp_dir().display().to_string()));
        assert_eq!(w[3..], ["/x"]);
    }

    #[test]
    fn confined_reads_name_the_system_and_not_the_home() {
        let Ok(c) = new(&policy(true)) else {
            return; // no Landlock on this kernel: refused, as the next test shows
        };
        assert_eq!(c.read(), ReadMode::Confined);
        let r = c.readable();
        assert!(r.contains(&PathBuf::from("/usr")) && r.contains(&PathBuf::from("/etc")));
        assert!(r.contains(&PathBuf::from("/proc")));
        assert!(
            !r.iter()
                .any(|p| p == Path::new("/") || p == Path::new("/tmp"))
        );
        assert!(c.describe().contains("read: confined"), "{}", c.describe());
    }
}
