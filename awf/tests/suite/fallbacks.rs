//! The sandbox on machines that restrict it, run for real here: awf started where no user
//! namespace can be made (the sysctl / Docker seccomp case), where no mount works (the
//! AppArmor restriction of Ubuntu 23.10+), with Landlock switched off, and where no cgroup
//! can be reached. Each test shows which guarantee held (the planted secrets stay unread,
//! UDP and TCP are refused under `network: deny`) and which was named (the WARN, Bash's
//! description); `sandbox.require` refuses to run rather than degrade.

use crate::common;

use common::restricted::{without_cgroups, without_mounts, without_user_namespaces};
use common::{Server, write_config};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every planted secret holds this; the probe commands never spell it whole.
const MARK: &str = "SECRET-5k2";
const MARK_SPLIT: &str = "SEC\"\"RET-5k2";

const PLANTED: &[&str] = &[
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".cargo/credentials.toml",
    ".claude/.credentials.json",
    ".netrc",
];

fn landlock_abi() -> i64 {
    // SAFETY: the documented version query takes no pointer.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    v.max(0)
}

/// Skips (or, with CI=true, fails) where the kernel has no Landlock: every fallback here
/// stands on it.
fn require_landlock() -> bool {
    if landlock_abi() >= 4 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI runs on a kernel with Landlock ABI 4+"
    );
    eprintln!("SKIP: no Landlock network rights on this kernel");
    false
}

/// A home with planted secrets and a toolchain root (`~/.cargo`, on PATH) holding one of
/// them beside a file a build reads.
struct Machine {
    base: PathBuf,
    home: PathBuf,
    root: PathBuf,
}

impl Machine {
    fn new(name: &str) -> Machine {
        let (base, root, _) = common::workspace(name);
        let home = base.join("home");
        for (i, rel) in PLANTED.iter().enumerate() {
            let p = home.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("{MARK}-file{i}\n")).unwrap();
        }
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::write(home.join(".cargo/config.toml"), "[build]\nCONFIG-OK\n").unwrap();
        std::fs::write(root.join("src.txt"), "WORKSPACE-OK\n").unwrap();
        Machine { base, home, root }
    }

    fn config(&self, extra: Value) -> PathBuf {
        let mut c = json!({"root": self.root});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        write_config(&self.base, &c)
    }

    /// The environment awf runs with: this home, its toolchain on PATH.
    fn env(&self, cmd: &mut Command) {
        let path = format!("{}/.cargo/bin:/usr/bin:/bin", self.home.display());
        cmd.env("HOME", &self.home)
            .env("PATH", path)
            .env("TMPDIR", self.base.join("tmp"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("TRACEPARENT");
        std::fs::create_dir_all(self.base.join("tmp")).unwrap();
    }

    /// Reads every planted secret and the files a build needs, tries UDP and TCP.
    fn probe(&self, port: u16) -> String {
        let files: Vec<String> = PLANTED.iter().map(|r| format!("~/{r}")).collect();
        format!(
            "P={MARK_SPLIT}; echo BEGIN-$((6*7)); for f in {files}; do cat \"$f\" 2>&1; done; \
             grep -rs \"$P\" ~ 2>/dev/null | head -3; cat ~/.cargo/config.toml src.txt; \
             (exec 3<>/dev/udp/127.0.0.1/9) 2>/dev/null && echo UDP-$((1+1))-OPEN || echo UDP-$((1+1))-REFUSED; \
             (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo TCP-$((1+1))-OPEN || echo TCP-$((1+1))-REFUSED; \
             echo END-$((6*7))",
            files = files.join(" "),
        )
    }
}

fn bash_description(s: &mut Server) -> String {
    let tools = s.request("tools/list", json!({}));
    tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap()["description"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Runs the probe through `cmd` (an `awf mcp-serve` on a restricted machine) and checks
/// that the secrets stayed unread, the build's files were read and the network was denied,
/// and that what does not hold was named.
fn probe_holds(m: &Machine, mut cmd: Command, named: &[&str]) {
    m.env(&mut cmd);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = Server::start_command(cmd);
    s.initialize();
    let description = bash_description(&mut s);
    let (out, _) = s.call("Bash", json!({ "command": m.probe(port) }));
    let ctx = format!(
        "{out}\n--- description: {description}\n--- stderr: {}",
        s.stderr()
    );
    assert!(out.contains("BEGIN-42") && out.contains("END-42"), "{ctx}");
    assert!(!out.contains(MARK), "a planted secret was read\n{ctx}");
    assert!(
        out.contains("CONFIG-OK") && out.contains("WORKSPACE-OK"),
        "{ctx}"
    );
    assert!(out.contains("UDP-2-REFUSED"), "UDP was open\n{ctx}");
    assert!(out.contains("TCP-2-REFUSED"), "TCP was open\n{ctx}");
    assert!(
        listener.accept().is_err(),
        "the host's listener saw a connection"
    );
    for n in named {
        assert!(description.contains(n), "{n:?} not named\n{ctx}");
    }
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("Bash's sandbox is degraded on this machine"),
        "no WARN\n{stderr}"
    );
}

#[test]
fn without_user_namespaces_reads_stay_confined_and_the_network_denied() {
    if !require_landlock() {
        return;
    }
    let m = Machine::new("fallback-nouserns");
    let cfg = m.config(json!({}));
    let cmd = without_user_namespaces(
        Path::new(common::AWF),
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
    );
    probe_holds(
        &m,
        cmd,
        &[
            "on this machine",
            "other processes of the user are visible",
            "are not covered by mounts",
            "UDP and raw sockets (seccomp)",
        ],
    );
}

#[test]
fn without_mounts_reads_stay_confined_and_the_network_denied() {
    if !require_landlock() {
        return;
    }
    let m = Machine::new("fallback-nomounts");
    let cfg = m.config(json!({}));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    without_mounts(&mut cmd);
    probe_holds(
        &m,
        cmd,
        &[
            "on this machine",
            "chmod, chown and utime",
            "not size-limited",
        ],
    );
}

#[test]
fn under_read_host_without_mounts_the_secrets_are_still_not_granted() {
    if !require_landlock() {
        return;
    }
    let m = Machine::new("fallback-host");
    let cfg = m.config(json!({"read": "host"}));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    without_mounts(&mut cmd);
    probe_holds(
        &m,
        cmd,
        &["read: host", "present at the start are not readable"],
    );
}

#[test]
fn with_landlock_off_the_mounts_still_hide_the_secrets() {
    let m = Machine::new("fallback-nolandlock");
    let cfg = m.config(json!({"landlock": false, "network": "allow"}));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    m.env(&mut cmd);
    let mut s = Server::start_command(cmd);
    s.initialize();
    let description = bash_description(&mut s);
    assert!(description.contains("NOT confined"), "{description}");
    let (out, _) = s.call("Bash", json!({ "command": m.probe(9) }));
    assert!(out.contains("END-42"), "{out}");
    assert!(!out.contains(MARK), "a planted secret was read\n{out}");
    assert!(out.contains("CONFIG-OK"), "{out}");
    s.finish();
}

/// What `awf mcp-serve` says when it refuses to start.
fn refusal(mut cmd: Command) -> String {
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "it started\n{stderr}");
    stderr
}

#[test]
fn required_guarantees_and_a_host_list_refuse_to_start_where_they_cannot_hold() {
    if !require_landlock() {
        return;
    }
    let m = Machine::new("fallback-require");
    for (extra, needle) in [
        (json!({"require": ["reads"]}), "require names reads"),
        (json!({"require": ["processes"]}), "require names processes"),
        (json!({"require": ["network"]}), "require names network"),
        (
            json!({"network": {"allow": ["crates.io"]}}),
            "network: {allow: [...]} cannot be enforced",
        ),
    ] {
        let cfg = m.config(extra.clone());
        let mut cmd = Command::new(common::AWF);
        cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
        m.env(&mut cmd);
        without_mounts(&mut cmd);
        let e = refusal(cmd);
        assert!(e.contains(needle), "{extra}: {e}");
        if needle.starts_with("require") {
            assert!(e.contains("awf sandbox check"), "{e}");
        }
    }
    // Where the machine has them all, the same requirements start.
    let cfg = m.config(json!({"require": ["reads", "processes", "network"]}));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    m.env(&mut cmd);
    let mut s = Server::start_command(cmd);
    s.initialize();
    assert!(
        s.ok("Bash", json!({"command": "true"}))
            .contains("exit code: 0")
    );
    s.finish();
}

/// The cgroup v1 memory cgroup this test runs in, below which awf makes its calls'.
fn memory_home() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, names, path) = (f.next()?, f.next()?, f.next()?);
        names.split(',').any(|n| n == "memory").then_some(path)
    })?;
    Some(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
}

/// The call cgroups of the awf process `pid` in the cgroup v1 memory hierarchy this test
/// runs in (where awf makes them), or None where that is not where they would be.
fn call_cgroups(pid: i32) -> Option<Vec<String>> {
    let dir = memory_home()?;
    let prefix = format!("call-{pid}-");
    Some(
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect(),
    )
}

/// The threads of process `pid` whose memory and pids cgroups (v1) both end in `name`.
fn threads_in(pid: i32, name: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter(|t| {
            let cgroups = std::fs::read_to_string(t.path().join("cgroup")).unwrap_or_default();
            ["memory", "pids"].iter().all(|c| {
                cgroups.lines().any(|l| {
                    let mut f = l.splitn(3, ':');
                    let (_, names, path) = (f.next(), f.next(), f.next());
                    names.is_some_and(|n| n.split(',').any(|n| n == *c))
                        && path.is_some_and(|p| p.ends_with(&format!("/{name}")))
                })
            })
        })
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The tool.result records of an audit file.
fn results(audit: &Path) -> Vec<Value> {
    common::audit_lines(audit)
        .into_iter()
        .filter(|r| r["type"] == "tool.result")
        .collect()
}

#[test]
fn a_call_cgroup_left_by_an_awf_that_died_goes_when_the_next_one_makes_its_own() {
    // A pid that no longer runs, as an awf killed with SIGKILL leaves it.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let Some(stale) = memory_home().map(|d| d.join(format!("call-{dead}-3"))) else {
        eprintln!("no cgroup v1 memory hierarchy here: nothing to sweep");
        return;
    };
    if let Err(e) = std::fs::create_dir(&stale) {
        eprintln!("cannot make a cgroup here ({e}): awf makes none either");
        return;
    }
    let m = Machine::new("bounds-sweep");
    let cfg = m.config(json!({"bounds": {"memory": 1u64 << 30}}));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    m.env(&mut cmd);
    let mut s = Server::start_command(cmd);
    s.initialize();
    let description = bash_description(&mut s);
    assert!(
        s.ok("Bash", json!({"command": "echo FINE"}))
            .contains("FINE")
    );
    let swept = !stale.exists();
    let _ = std::fs::remove_dir(&stale);
    s.finish();
    if description.contains("a cgroup: past it the call is killed") {
        assert!(swept, "{} is still there", stale.display());
    }
}

#[test]
fn a_session_that_ends_while_the_next_jail_is_made_leaves_no_cgroup() {
    // The next call's jail is made right after a call; a client that closes the session
    // at once ends it while that jail is being made. Its cgroup goes with the session.
    let m = Machine::new("ends-making");
    // A jail of many covers takes a while to make: the session ends first.
    let hidden: Vec<PathBuf> = (0..400)
        .map(|i| {
            let p = m.root.join(format!("secret-{i}"));
            std::fs::write(&p, "s").unwrap();
            p
        })
        .collect();
    let cfg = m.config(json!({"sandbox": {"hidden": hidden}}));
    for round in 0..12 {
        let mut cmd = Command::new(common::AWF);
        cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
        m.env(&mut cmd);
        let mut s = Server::start_command(cmd);
        s.initialize();
        let pid = s.pid();
        let (out, is_error) = s.call("Bash", json!({"command": "echo made"}));
        assert!(!is_error && out.contains("made"), "{out}");
        // Where this test sees call cgroups, the call had one.
        let during = call_cgroups(pid);
        assert!(during.as_ref().is_none_or(|d| !d.is_empty()), "{during:?}");
        let (status, _, stderr) = s.finish();
        assert!(status.success(), "{stderr}");
        let Some(left) = call_cgroups(pid) else {
            return; // not where this test can see them (no cgroup v1 memory hierarchy)
        };
        assert!(
            left.is_empty(),
            "round {round}: left behind {left:?}\n{stderr}"
        );
    }
}

#[test]
fn each_call_is_bounded_in_memory_cpu_tmp_files_and_threads() {
    let m = Machine::new("bounds");
    let audit = m.base.join("audit.jsonl");
    let cfg = m.config(json!({
        "bounds": {"memory": 1u64 << 30, "cpu_seconds": 2, "tmp_size": 100u64 << 20,
                   "file_size": 150u64 << 20, "open_files": 64},
        "processes": 300,
        "audit_path": audit,
    }));
    let mut cmd = Command::new(common::AWF);
    cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()]);
    m.env(&mut cmd);
    let mut s = Server::start_command(cmd);
    s.initialize();
    let s_pid = s.pid();
    let description = bash_description(&mut s);
    let by_cgroup = description.contains("a cgroup: past it the call is killed");
    // 6 GiB allocated and touched under memory: 1GiB.
    let (out, is_error) = s.call(
        "Bash",
        json!({"command": "python3 -c 'a = bytearray(6 << 30); print(len(a))'"}),
    );
    assert!(is_error, "{out}");
    if by_cgroup {
        assert!(
            out.contains("killed: the call reached its memory limit of 1GiB"),
            "{out}"
        );
    } else {
        assert!(out.contains("MemoryError"), "{out}");
    }
    // The server and the next call are fine.
    assert!(
        s.ok("Bash", json!({"command": "echo FINE"}))
            .contains("FINE")
    );
    // A busy loop ends at cpu_seconds.
    let (out, is_error) = s.call("Bash", json!({"command": "while :; do :; done"}));
    assert!(is_error, "{out}");
    assert!(out.contains("CPU time limit of 2 s"), "{out}");
    // 2 GiB into TMPDIR under tmp_size: 100MiB, where mounts work; files past file_size.
    let (out, _) = s.call(
        "Bash",
        json!({"command": "head -c 2G /dev/zero > \"$TMPDIR/big\"; ls -l \"$TMPDIR/big\" | cut -d' ' -f5"}),
    );
    if description.contains("not size-limited") {
        assert!(out.contains("File size limit exceeded"), "{out}");
    } else {
        assert!(out.contains("No space left on device"), "{out}");
        assert!(out.contains("\n104857600\n"), "{out}");
    }
    let out = s.ok(
        "Bash",
        json!({"command": "rm -f \"$TMPDIR/big\"; head -c 160M /dev/zero > f; stat -c %s f; rm f; ulimit -n"}),
    );
    assert!(out.contains("File size limit exceeded"), "{out}");
    assert!(out.contains("\n157286400\n64\n"), "{out}");
    // 2,000 threads under processes: 300 stop at the cap.
    let out = s.ok(
        "Bash",
        json!({"command": "python3 -c '\nimport threading, time\nn = 0\ntry:\n    for i in range(2000):\n        threading.Thread(target=time.sleep, args=(2,)).start(); n += 1\nexcept RuntimeError:\n    pass\nprint(\"THREADS\", n)'"}),
    );
    let n: usize = out
        .split("THREADS ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!((100..300).contains(&n), "{n} threads\n{out}");
    // One cgroup served all six calls, and it goes with the session.
    let mine = call_cgroups(s.pid());
    if by_cgroup && let Some(found) = &mine {
        assert_eq!(found.len(), 1, "{found:?}");
        // Under v1 one thread of awf's waits inside it, in memory and pids both, to fork
        // the next call's process there (no move on the call's path); awf itself is not
        // in it, and the 6 GiB call above was killed, not awf.
        let inside = threads_in(s.pid(), &found[0]);
        assert_eq!(
            inside.len(),
            1,
            "threads of awf in {}: {inside:?}",
            found[0]
        );
        let own = std::fs::read_to_string(format!("/proc/{}/cgroup", s.pid())).unwrap();
        assert!(!own.contains(&found[0]), "{own}");
    }
    s.finish();
    if let Some(found) = call_cgroups(s_pid) {
        assert!(found.is_empty(), "left behind: {found:?}");
    }
    // Each call's peak memory and CPU are in its record.
    let r = results(&audit);
    assert_eq!(r.len(), 6, "{r:?}");
    let big = &r[0];
    assert!(big["max_rss_bytes"].as_u64().unwrap() > 500 << 20, "{big}");
    // The busy loop ran until its 2 s of CPU. The record's figure is wait4's rusage, which
    // on a loaded virtual machine (tick accounting, steal time) was seen to say 1.75 s for
    // a process the kernel's CPU limit had stopped at 2: a bound, not an equality.
    assert!(r[2]["cpu_ms"].as_u64().unwrap() >= 1500, "{}", r[2]);
    assert!(
        r.iter()
            .all(|x| x["cpu_ms"].is_u64() && x["max_rss_bytes"].is_u64())
    );
}

#[test]
fn without_cgroups_memory_bounds_each_process_by_its_address_space() {
    let m = Machine::new("bounds-nocgroup");
    let cfg = m.config(json!({"bounds": {"memory": 512u64 << 20}}));
    let cmd = without_cgroups(
        Path::new(common::AWF),
        &["mcp-serve", "--config", cfg.to_str().unwrap()],
    );
    let mut cmd = cmd;
    m.env(&mut cmd);
    let mut s = Server::start_command(cmd);
    s.initialize();
    let description = bash_description(&mut s);
    assert!(description.contains("RLIMIT_AS"), "{description}");
    let (out, is_error) = s.call(
        "Bash",
        json!({"command": "python3 -c 'a = bytearray(2 << 30)'"}),
    );
    assert!(is_error && out.contains("MemoryError"), "{out}");
    assert!(
        s.ok("Bash", json!({"command": "echo FINE"}))
            .contains("FINE")
    );
    s.finish();
}

#[test]
fn validate_json_names_what_degrades_and_what_is_refused_on_this_machine() {
    if !require_landlock() {
        return;
    }
    let m = Machine::new("fallback-validate");
    let wf = m.base.join("wf.yaml");
    std::fs::write(
        &wf,
        "\
name: degraded
states:
  initial: build
  build:
    type: agent
    provider: claude
    prompt: Build it.
    mcp_proxy:
      enable: true
      sandbox:
        memory: 2GiB
    on_success: strict
  strict:
    type: agent
    provider: claude
    prompt: Check it.
    mcp_proxy:
      enable: true
      sandbox:
        require: [reads]
    on_success: done
  done:
    type: terminal
",
    )
    .unwrap();
    let json = |restricted: bool| -> Value {
        let mut cmd = common::awf_validate(&m.base, &wf);
        m.env(&mut cmd);
        if restricted {
            without_mounts(&mut cmd);
        }
        let out = cmd.output().unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let here = json(false);
    let sb = &here["sandboxes"];
    assert_eq!(sb["build"]["degraded"], json!([]), "{here:#}");
    assert_eq!(sb["strict"]["degraded"], json!([]), "{here:#}");
    let there = json(true);
    let sb = &there["sandboxes"];
    let degraded = sb["build"]["degraded"].to_string();
    assert!(degraded.contains("not covered by mounts"), "{there:#}");
    let refused = sb["strict"]["refused"].as_str().unwrap_or_default();
    assert!(refused.contains("require names reads"), "{there:#}");
}
