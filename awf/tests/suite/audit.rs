//! The audit file as a reader finds it after writers that died or were cut short: a torn
//! last line (a writer's short write on a full disk, a process killed mid-line) is closed
//! by the next writer, recorded as `audit.repaired`, and every later record parses, with
//! several writers at the file at once and with one still mid-append.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A workspace with a config whose audit file is `audit.jsonl`.
fn audited(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (base, root, _outside) = workspace(name);
    let audit = base.join("audit.jsonl");
    let cfg = write_config(&base, &json!({"root": root, "audit_path": audit}));
    (root, audit, cfg)
}

/// The lines after the first `skip` bytes of the audit file, each parsed (a panic names a
/// line that does not parse).
fn records_after(audit: &Path, skip: usize) -> Vec<Value> {
    let bytes = std::fs::read(audit).unwrap();
    String::from_utf8(bytes[skip..].to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

fn of_type<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["type"] == kind).collect()
}

/// One whole session with a Read call, on the real server.
fn session_with_a_call(root: &Path, cfg: &Path) {
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    s.initialize();
    s.ok("Read", json!({"path": "f.txt"}));
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_planted_torn_line_is_closed_and_the_next_session_reads_whole() {
    let (root, audit, cfg) = audited("audit-torn");
    let whole = "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"session.end\"}\n";
    let torn = "{\"ts\":\"2026-01-01T00:00:01.000Z\",\"type\":\"tool.call\",\"argu";
    std::fs::write(&audit, format!("{whole}{torn}")).unwrap();

    session_with_a_call(&root, &cfg);

    let text = std::fs::read_to_string(&audit).unwrap();
    // The torn bytes are kept, on a line of their own.
    assert!(text.starts_with(&format!("{whole}{torn}\n")), "{text}");
    let later = records_after(&audit, whole.len() + torn.len() + 1);
    assert_eq!(later[0]["type"], "audit.repaired", "{text}");
    assert_eq!(later[0]["torn_bytes"], torn.len());
    assert_eq!(later[0]["torn_offset"], whole.len());
    assert_eq!(later[1]["type"], "session.start");
    // The repair is the session's own: the same process.
    assert_eq!(later[0]["pid"], later[1]["pid"]);
    let kinds: Vec<&str> = later.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "audit.repaired",
            "session.start",
            "tool.call",
            "tool.result",
            "session.end"
        ]
    );

    // Closed once: the next session finds nothing to repair.
    session_with_a_call(&root, &cfg);
    let later = records_after(&audit, whole.len() + torn.len() + 1);
    assert_eq!(of_type(&later, "audit.repaired").len(), 1);
    assert_eq!(of_type(&later, "session.start").len(), 2);
}

/// A server on pipes whose writes to files stop at `file_limit` bytes (RLIMIT_FSIZE, as a
/// full disk would stop them: a short write, then EFBIG).
struct Limited {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: std::thread::JoinHandle<String>,
    next_id: i64,
}

impl Limited {
    fn start(cfg: &Path, file_limit: u64) -> Limited {
        let mut cmd = Command::new(AWF);
        cmd.args(["mcp-serve", "--config", cfg.to_str().unwrap()])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: file_limit,
                    rlim_max: libc::RLIM_INFINITY,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A write past the limit fails with EFBIG instead of killing the writer.
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
            text
        });
        Limited {
            child,
            stdin,
            stdout,
            stderr,
            next_id: 1,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        writeln!(self.stdin, "{}", request_message(id, method, params)).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    fn initialize(&mut self) {
        self.request("initialize", initialize_params());
        writeln!(
            self.stdin,
            "{}",
            notification("notifications/initialized", Value::Null)
        )
        .unwrap();
    }

    /// Lifts the file size limit, as space freed on the disk would.
    fn lift_limit(&self) {
        let unlimited = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: prlimit on our own child, with a valid limit and no old-limit pointer.
        let rc = unsafe {
            libc::prlimit(
                self.child.id() as libc::pid_t,
                libc::RLIMIT_FSIZE,
                &unlimited,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    /// Closes its input; its exit status and stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        (status, self.stderr.join().unwrap())
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// A writer cut short mid-line by a full disk and then killed leaves a torn line; the
/// next session closes it and records the repair with the torn line's length.
#[test]
fn a_writer_killed_after_a_short_write_leaves_a_line_the_next_session_closes() {
    let (root, audit, cfg) = audited("audit-killed");
    session_with_a_call(&root, &cfg);
    let whole = file_len(&audit);
    let mut cut = Limited::start(&cfg, whole + 40);
    // Its session.start stops 40 bytes in.
    assert!(eventually(|| file_len(&audit) == whole + 40));
    cut.child.kill().unwrap();
    cut.child.wait().unwrap();
    let bytes = std::fs::read(&audit).unwrap();
    assert_ne!(bytes.last(), Some(&b'\n'), "the line was not torn");
    assert!(
        String::from_utf8_lossy(&bytes[whole as usize..]).starts_with("{\""),
        "{}",
        String::from_utf8_lossy(&bytes)
    );

    session_with_a_call(&root, &cfg);
    let after = std::fs::read(&audit).unwrap();
    assert!(after.starts_with(&bytes), "the torn bytes were changed");
    assert_eq!(after[bytes.len()], b'\n', "the torn line was not closed");
    let later = records_after(&audit, bytes.len() + 1);
    assert_eq!(later[0]["type"], "audit.repaired");
    assert_eq!(later[0]["torn_bytes"], 40);
    assert_eq!(later[0]["torn_offset"], whole);
    assert_eq!(later[1]["type"], "session.start");
    assert_eq!(later.last().unwrap()["type"], "session.end");
}

/// A writer whose write was cut short and which lives on closes its own torn line before
/// its next record, once the disk has room again.
#[test]
fn a_writer_cut_short_closes_its_torn_line_before_its_next_record() {
    let (root, audit, cfg) = audited("audit-short");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let mut s = Limited::start(&cfg, 50);
    assert!(eventually(|| file_len(&audit) == 50));
    s.lift_limit();
    s.initialize();
    let answer = s.request(
        "tools/call",
        json!({"name": "Read", "arguments": {"path": "f.txt"}}),
    );
    assert_eq!(answer["result"]["content"][0]["text"], "x\n", "{answer}");
    let (status, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("short write to the audit file"), "{stderr}");

    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(text.starts_with("{\""), "{text}");
    let later = records_after(&audit, 51);
    let kinds: Vec<&str> = later.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["audit.repaired", "tool.call", "tool.result", "session.end"],
        "{text}"
    );
    assert_eq!(later[0]["torn_bytes"], 50);
    assert_eq!(later[0]["torn_offset"], 0);
}

/// Several sessions starting at once over one torn line: it is closed once, and every
/// session's records parse.
#[test]
fn sessions_starting_together_repair_a_torn_line_once() {
    let (_root, audit, cfg) = audited("audit-together");
    let torn = "{\"ts\":\"2026-01-01T00:00:01.000Z\",\"ty";
    std::fs::write(&audit, torn).unwrap();
    let children: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(AWF)
                .args(["mcp-serve", "--config", cfg.to_str().unwrap()])
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let later = records_after(&audit, torn.len() + 1);
    assert_eq!(of_type(&later, "audit.repaired").len(), 1, "{later:?}");
    assert_eq!(later[0]["type"], "audit.repaired");
    assert_eq!(later[0]["torn_bytes"], torn.len());
    assert_eq!(of_type(&later, "session.start").len(), 4);
    assert_eq!(of_type(&later, "session.end").len(), 4);
}

/// Whether `/proc/locks` shows process `pid` waiting for a lock on the file `inode`.
fn waits_for_lock(pid: u32, inode: u64) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.get(1) == Some(&"->")
            && words.contains(&pid.to_string().as_str())
            && words.iter().any(|w| w.ends_with(&format!(":{inode}")))
    })
}

/// A writer mid-append (holding the shared lock, half its line written) is waited for:
/// the line it finishes is not taken for a torn one.
#[test]
fn a_line_being_appended_is_waited_for_not_repaired() {
    let (root, audit, cfg) = audited("audit-live");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let mut writer = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&audit)
        .unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_SH) }, 0);
    writer
        .write_all(b"{\"ts\":\"2026-01-01T00:00:00.000Z\",")
        .unwrap();
    let inode = writer.metadata().unwrap().ino();

    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    assert!(
        eventually(|| waits_for_lock(s.pid() as u32, inode)),
        "the server did not wait for the writer's lock: {}",
        std::fs::read_to_string(&audit).unwrap()
    );
    writer.write_all(b"\"type\":\"mid-append\"}\n").unwrap();
    // SAFETY: as above.
    unsafe { libc::flock(writer.as_raw_fd(), libc::LOCK_UN) };

    s.initialize();
    s.ok("Read", json!({"path": "f.txt"}));
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let records = records_after(&audit, 0);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "mid-append",
            "session.start",
            "tool.call",
            "tool.result",
            "session.end"
        ]
    );
}

/// Secrets planted in a missing path (the error quotes it, then says where it looked),
/// in an unknown tool's name and in the environment: no planted value reaches the audit
/// file or a log line, in either log format.
#[test]
fn secrets_in_error_texts_are_masked_in_the_audit_and_the_log_lines() {
    let planted = ["pw-planted-0001", "bearer.planted.0002", "env-planted-0003"];
    let path = format!(
        "db password={} user=bob Authorization: Bearer {}",
        planted[0], planted[1]
    );
    for format in ["human", "json"] {
        let (_root, audit, cfg) = audited(&format!("audit-mask-{format}"));
        let mut s = Server::start(
            &[
                "mcp-serve",
                "--config",
                cfg.to_str().unwrap(),
                "--log-format",
                format,
            ],
            &[("AWF_TEST_DB_PASSWORD", planted[2])],
        );
        s.initialize();
        s.err("Read", json!({"path": path}));
        s.err("Read", json!({"path": format!("key {}", planted[2])}));
        s.invalid(&path, json!({}));
        let (status, _, stderr) = s.finish();
        assert!(status.success(), "{stderr}");
        let records = std::fs::read_to_string(&audit).unwrap();
        // The failures are there, masked.
        assert_eq!(stderr.matches("tool call failed").count(), 3, "{stderr}");
        let errors: Vec<Value> = audit_lines(&audit)
            .into_iter()
            .filter_map(|r| r["error"].as_str().map(|e| json!(e)))
            .collect();
        assert_eq!(errors.len(), 3, "{records}");
        // The bearer token was redacted in the result before the audit saw it (the scan
        // of results); the password, no shape of a secret, is masked by the audit.
        assert!(
            errors[0].as_str().unwrap().starts_with(
                "file not found: \"db password=*** user=bob Authorization: Bearer \
                 [redacted: bearer-token]\""
            ),
            "{errors:?}"
        );
        for secret in planted {
            assert!(
                !records.contains(secret),
                "{secret} in the audit: {records}"
            );
            assert!(
                !stderr.contains(secret),
                "{secret} in the {format} log: {stderr}"
            );
        }
        if format == "json" {
            for line in stderr.lines() {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("log line not JSON ({e}): {line}"));
            }
        }
    }
}

#[test]
fn each_call_s_record_names_the_revision_it_came_in() {
    let (root, audit, cfg) = audited("audit-revision");
    std::fs::write(root.join("f.txt"), "x\n").unwrap();
    let mut s = Server::start(&["mcp-serve", "--config", cfg.to_str().unwrap()], &[]);
    // A stateless call first (no initialize needed), then a handshake session's.
    let modern = s.request(
        "tools/call",
        json!({"name": "Read", "arguments": {"path": "f.txt"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }}),
    );
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    s.initialize();
    s.ok("Read", json!({"path": "f.txt"}));
    let (status, _, stderr) = s.finish();
    assert!(status.success(), "{stderr}");
    let records = records_after(&audit, 0);
    let revisions: Vec<&Value> = of_type(&records, "tool.call")
        .iter()
        .map(|r| &r["protocol_version"])
        .collect();
    assert_eq!(revisions, [&json!("2026-07-28"), &json!("2024-11-05")]);
}

/// `awf audit verify` on a copy of `bytes`: whether it passed, and what it printed.
fn verify_copy(dir: &Path, bytes: &[u8]) -> (bool, String) {
    let copy = dir.join("copy.jsonl");
    std::fs::write(&copy, bytes).unwrap();
    let out = Command::new(AWF)
        .args(["audit", "verify"])
        .arg(&copy)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn awf_audit_verify_passes_what_awf_wrote_and_finds_each_kind_of_tampering() {
    let (root, audit, cfg) = audited("audit-verify");
    let dir = audit.parent().unwrap().to_path_buf();
    // Two sessions, one after the other, and a third after a writer died mid-line.
    session_with_a_call(&root, &cfg);
    session_with_a_call(&root, &cfg);
    let two = std::fs::read(&audit).unwrap();
    let (ok, out) = verify_copy(&dir, &two);
    assert!(
        ok && out.contains(": intact, 8 lines") && out.contains("ends with session.end"),
        "{out}"
    );

    let lines: Vec<&[u8]> = two
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let join = |ls: &[&[u8]]| -> Vec<u8> {
        ls.iter()
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect()
    };
    let text = String::from_utf8(two.clone()).unwrap();

    let edited = text.replacen("\"f.txt\"", "\"g.txt\"", 1);
    assert_ne!(edited, text);
    let (ok, out) = verify_copy(&dir, edited.as_bytes());
    assert!(
        !ok && out.contains("does not follow line 2: line 2 was changed"),
        "{out}"
    );

    let mut removed = lines.clone();
    removed.remove(3);
    let (ok, out) = verify_copy(&dir, &join(&removed));
    assert!(!ok && out.contains("line 4 (offset"), "{out}");

    let mut swapped = lines.clone();
    swapped.swap(1, 2);
    let (ok, out) = verify_copy(&dir, &join(&swapped));
    assert!(!ok && out.contains("line 2 (offset"), "{out}");

    let mut inserted = lines.clone();
    inserted.insert(6, lines[1]);
    let (ok, out) = verify_copy(&dir, &join(&inserted));
    assert!(!ok && out.contains("line 7 (offset"), "{out}");

    let mut first_gone = lines.clone();
    first_gone.remove(0);
    let (ok, out) = verify_copy(&dir, &join(&first_gone));
    assert!(
        !ok && out.contains("not the first record of its step"),
        "{out}"
    );

    let (ok, out) = verify_copy(&dir, &two[..two.len() - 25]);
    assert!(!ok && out.contains("ends mid-record"), "{out}");

    // A writer that died mid-line: the next session repairs the line, and the chain holds.
    std::fs::write(&audit, &two[..two.len() - 25]).unwrap();
    session_with_a_call(&root, &cfg);
    let repaired = std::fs::read(&audit).unwrap();
    assert!(String::from_utf8_lossy(&repaired).contains("\"audit.repaired\""));
    let (ok, out) = verify_copy(&dir, &repaired);
    assert!(ok && out.contains(": intact, 13 lines"), "{out}");
}
