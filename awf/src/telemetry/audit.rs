//! The audit trail: JSONL records a parent (and a human) can read after the fact.
//! `session.start`, then per call a `tool.call` and a `tool.result` paired by `call_id`,
//! then `session.end` with its reason on a clean exit (a missing `session.end` means the
//! server crashed or was killed). Each record is one `write(2)` to a file opened with
//! O_APPEND, so several processes can share the file without interleaving lines.
//!
//! A writer that died mid-line (a short write on a full disk, a power cut) leaves a torn
//! last line; the next record would be glued to it and lost to every reader. So before a
//! log's first append (and after a short write of its own), the file's end is checked
//! and a torn line is closed with a newline followed by an `audit.repaired` record; the
//! torn bytes stay as they were, on their own line.
//!
//! The records are a hash chain ([`super::audit_chain`]): each starts with the SHA-256 of
//! the line before it, so that `awf audit verify` finds a record changed, removed, inserted
//! or moved. Every append holds the file's `flock` exclusively for its one write: the line
//! before it is this log's own last line while the file has not grown since (no read), and
//! is read back from the file when another writer (the relay of `awf run`, another server
//! of the step) appended in between. The lock also keeps the torn-line check from seeing a
//! live writer's line half-written.

use super::audit_chain::{self, Hash};
use regex::bytes::{Captures, Regex};
use serde_json::{Map, Value, json};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

pub struct AuditLog {
    file: File,
    /// Every string of every record goes through it, whoever built the record.
    masker: Masker,
    /// Held for each append: the file's lock belongs to the open file, shared by this
    /// process's threads, so one thread's unlock would end another's hold mid-write.
    appending: Mutex<Tail>,
}

/// What this log knows of the file's end.
#[derive(Default)]
struct Tail {
    /// This log's last write was short: its line is torn.
    torn: bool,
    /// Where this log's last line ended, and that line's hash: the link of the next record
    /// while the file is still that long.
    last: Option<(u64, Hash)>,
}

impl AuditLog {
    /// Opens (creating, mode 0600: arguments may be sensitive even when masked) for append,
    /// and repairs a torn last line. A symlink at the path is not followed, and what was
    /// opened must be a regular file of ours with one link: a planted symlink or hard link
    /// cannot send the records elsewhere.
    pub fn open(path: &Path) -> io::Result<AuditLog> {
        let file = OpenOptions::new()
            // Read too: the repair looks at the file's last line.
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => io::Error::other(format!(
                    "{} is a symbolic link; the audit file must be a regular file (remove the link)",
                    path.display()
                )),
                _ => e,
            })?;
        let meta = file.metadata()?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let why = if !meta.is_file() {
            Some("is not a regular file".to_string())
        } else if meta.nlink() != 1 {
            Some(format!(
                "has {} hard links (it may be another file's name)",
                meta.nlink()
            ))
        } else if meta.uid() != me {
            Some(format!(
                "is owned by uid {}, not by awf's uid {me}",
                meta.uid()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(io::Error::other(format!(
                "{} {why}; refused as the audit file (remove it or choose another path)",
                path.display()
            )));
        }
        let log = AuditLog {
            file,
            // Nothing cut here: the writers cut what they take from outside.
            masker: Masker::from_env(0),
            appending: Mutex::new(Tail::default()),
        };
        log.repair_torn_line().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot check or repair the last line of {}: {e}",
                    path.display()
                ),
            )
        })?;
        Ok(log)
    }

    /// Appends one record, its strings masked, as one line in one write, linked to the
    /// line before it.
    pub fn append(&self, record: &Value) -> io::Result<()> {
        let masked = self.masker.mask_strings(record);
        let body = serde_json::to_vec(&masked).map_err(io::Error::other)?;
        let mut tail = self.appending.lock().unwrap_or_else(|e| e.into_inner());
        let _exclusive = FileLock::take(&self.file, libc::LOCK_EX)?;
        let mut len = self.file.metadata()?.len();
        // A file that grew since this log's last line may end with another writer's torn
        // one (it died mid-write: under the lock, no write is half-done).
        let grown = tail.last.is_none_or(|(end, _)| end != len);
        if tail.torn || (len > 0 && grown && !self.ends_with_newline(len)?) {
            tail.last = self.repair_locked(len)?;
            tail.torn = false;
            len = self.file.metadata()?.len();
        }
        let prev = match tail.last {
            _ if len == 0 => audit_chain::anchor(&masked),
            Some((end, head)) if end == len => head,
            _ => audit_chain::hash(&self.read_last_line(len)?),
        };
        let line = audit_chain::chained(&prev, &body);
        // A single write on an O_APPEND file is atomic with respect to other appenders; a
        // short write (disk full) is reported rather than retried half-way, and the line
        // it tore is closed before this log's next record.
        let n = (&self.file).write(&line)?;
        if n != line.len() {
            tail.torn = true;
            tail.last = None;
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to the audit file ({n} of {} bytes)",
                    line.len()
                ),
            ));
        }
        tail.last = Some((len + n as u64, audit_chain::hash(&line[..n - 1])));
        Ok(())
    }

    fn ends_with_newline(&self, len: u64) -> io::Result<bool> {
        let mut last = [0u8; 1];
        self.file.read_exact_at(&mut last, len - 1)?;
        Ok(last[0] == b'\n')
    }

    /// The file's last line (it ends with a newline at `len`), without its newline: from
    /// one read of the file's last 4 KiB when the line fits (a record mostly does).
    fn read_last_line(&self, len: u64) -> io::Result<Vec<u8>> {
        let from = len.saturating_sub(4096);
        let mut tail = vec![0u8; (len - from) as usize];
        self.file.read_exact_at(&mut tail, from)?;
        let body = &tail[..tail.len() - 1];
        if let Some(i) = body.iter().rposition(|b| *b == b'\n') {
            return Ok(body[i + 1..].to_vec());
        }
        if from == 0 {
            return Ok(body.to_vec());
        }
        let start = self.line_start(len - 1)?;
        let mut line = vec![0u8; (len - 1 - start) as usize];
        self.file.read_exact_at(&mut line, start)?;
        Ok(line)
    }

    /// Closes a torn last line, if the file has one: see [`AuditLog::repair_locked`].
    fn repair_torn_line(&self) -> io::Result<()> {
        let _exclusive = FileLock::take(&self.file, libc::LOCK_EX)?;
        let len = self.file.metadata()?.len();
        let last = self.repair_locked(len)?;
        self.appending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last = last;
        Ok(())
    }

    /// A torn last line closed: a newline, then an `audit.repaired` record naming where
    /// the torn line starts and its length, linked to the torn bytes as they are, in one
    /// write. Under the exclusive lock, so no append is under way and no other log repairs
    /// the same line. Gives where the repair ends and its hash (None: nothing was torn).
    fn repair_locked(&self, len: u64) -> io::Result<Option<(u64, Hash)>> {
        if len == 0 || self.ends_with_newline(len)? {
            return Ok(None);
        }
        let start = self.line_start(len)?;
        let mut torn = vec![0u8; (len - start) as usize];
        self.file.read_exact_at(&mut torn, start)?;
        let record = json!({
            "ts": now_rfc3339(),
            "type": "audit.repaired",
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "torn_offset": start,
            "torn_bytes": len - start,
        });
        let mut repair = b"\n".to_vec();
        repair.extend(audit_chain::chained(
            &audit_chain::hash(&torn),
            &serde_json::to_vec(&record).map_err(io::Error::other)?,
        ));
        let n = (&self.file).write(&repair)?;
        if n != repair.len() {
            // Torn again (the disk is still full): the next log to open the file repairs it.
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write ({n} of {} bytes)", repair.len()),
            ));
        }
        Ok(Some((
            len + n as u64,
            audit_chain::hash(&repair[1..repair.len() - 1]),
        )))
    }

    /// The offset just past the last newline before `end`, or 0: where the last line starts.
    fn line_start(&self, end: u64) -> io::Result<u64> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut to = end;
        while to > 0 {
            let from = to.saturating_sub(buf.len() as u64);
            let chunk = &mut buf[..(to - from) as usize];
            self.file.read_exact_at(chunk, from)?;
            if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
                return Ok(from + i as u64 + 1);
            }
            to = from;
        }
        Ok(0)
    }
}

/// A `flock` held on an open file until dropped.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn take(file: &'a File, how: libc::c_int) -> io::Result<FileLock<'a>> {
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
                return Ok(FileLock(file));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as in take. Closing the file would release the lock as well.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Masks secrets and cuts long values before arguments are recorded.
#[derive(Debug, Clone, Default)]
pub struct Masker {
    /// Values of environment variables whose names look like secrets, longest first so
    /// that a secret containing another is masked whole.
    secrets: Vec<String>,
    max_value_bytes: usize,
}

const SECRET_NAME_PARTS: [&str; 9] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
];
/// Shorter values are too likely to be ordinary words ("1", "true") to mask everywhere.
const MIN_SECRET_LEN: usize = 6;
pub const MASK: &str = "***";

fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|p| upper.contains(p))
}

impl Masker {
    pub fn from_env(max_value_bytes: usize) -> Masker {
        Masker::new(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
            max_value_bytes,
        )
    }

    pub fn new(vars: impl IntoIterator<Item = (String, String)>, max_value_bytes: usize) -> Masker {
        let mut secrets: Vec<String> = vars
            .into_iter()
            .filter(|(k, v)| looks_secret(k) && v.len() >= MIN_SECRET_LEN)
            .map(|(_, v)| v)
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Masker {
            secrets,
            max_value_bytes,
        }
    }

    /// A copy of `value` with secret values masked (anywhere inside strings), values of
    /// keys that look secret masked whole, and long strings cut.
    pub fn mask(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.mask_str(s)),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.mask(v)).collect()),
            Value::Object(o) => {
                let mut out = Map::new();
                for (k, v) in o {
                    let masked = if looks_secret(k) && !v.is_null() && !v.is_boolean() {
                        Value::String(MASK.into())
                    } else {
                        self.mask(v)
                    };
                    out.insert(k.clone(), masked);
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }

    /// A copy of `value` with every string masked as text, names of fields too, wherever it
    /// lies; no value is masked whole for its field's name (a record's own fields, such as
    /// `input_tokens`, are no secrets).
    pub fn mask_strings(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.mask_str(s)),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.mask_strings(v)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (self.mask_str(k), self.mask_strings(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A copy of a text with secrets masked (as inside `mask`), for log lines too.
    pub fn mask_text(&self, s: &str) -> String {
        self.mask_str(s)
    }

    fn mask_str(&self, s: &str) -> String {
        // Shapes are looked for only where the text is kept (plus room for a token that
        // crosses the cut), so a 10 MiB Write costs no more than a short one.
        let window = if self.max_value_bytes == 0 {
            s
        } else {
            let end = (self.max_value_bytes + SHAPE_WINDOW).min(s.len());
            &s[..crate::text::floor_char_boundary(s, end)]
        };
        let mut text = mask_shapes(window);
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        if self.max_value_bytes > 0 && (text.len() > self.max_value_bytes || window.len() < s.len())
        {
            // The length the text has once masked (the part past the window counted as is).
            let total = text.len() + (s.len() - window.len());
            let cut = crate::text::floor_char_boundary(&text, self.max_value_bytes);
            text.truncate(cut);
            text.push_str(&format!("…[cut: {total} bytes]"));
        }
        text
    }
}

/// Bytes past the cut still searched for token shapes (a PEM private key fits).
const SHAPE_WINDOW: usize = 8192;

/// PEM and PGP private keys (one that runs past the searched window is masked to its end).
fn private_keys() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(concat!(
            r"(?-u)-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----",
            r"(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*$)",
        ))
        .expect("private key forms compile")
    })
}

/// Well-known token shapes, masked whatever the environment holds: a prefix at the start of
/// a word, then a run of the shape's characters: at least `min` of them, or exactly `min`
/// where `exact`. Found by a scan, not a regex: a pattern with these counted runs takes a
/// regex engine some 70 KiB in every server.
struct TokenShape {
    prefix: &'static [u8],
    body: fn(u8) -> bool,
    min: usize,
    exact: bool,
}

const TOKEN_SHAPES: &[TokenShape] = &[
    // GitHub: ghp_, gho_, ghu_, ghs_, ghr_ and fine-grained tokens.
    TokenShape {
        prefix: b"ghp_",
        body: alnum,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"gho_",
        body: alnum,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghu_",
        body: alnum,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghs_",
        body: alnum,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"ghr_",
        body: alnum,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"github_pat_",
        body: word,
        min: 20,
        exact: false,
    },
    // GitLab, OpenAI-style, Slack.
    TokenShape {
        prefix: b"glpat-",
        body: word_or_dash,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"sk-",
        body: word_or_dash,
        min: 20,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxa-",
        body: alnum_or_dash,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxb-",
        body: alnum_or_dash,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxp-",
        body: alnum_or_dash,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxr-",
        body: alnum_or_dash,
        min: 10,
        exact: false,
    },
    TokenShape {
        prefix: b"xoxs-",
        body: alnum_or_dash,
        min: 10,
        exact: false,
    },
    // AWS access key ids, Google API keys.
    TokenShape {
        prefix: b"AKIA",
        body: upper_or_digit,
        min: 16,
        exact: true,
    },
    TokenShape {
        prefix: b"AIza",
        body: word_or_dash,
        min: 35,
        exact: true,
    },
];

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}
fn word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn word_or_dash(b: u8) -> bool {
    word(b) || b == b'-'
}
fn alnum_or_dash(b: u8) -> bool {
    alnum(b) || b == b'-'
}
fn upper_or_digit(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

/// The end of the token shape that starts at `at` of `text`, if one does.
fn token_at(text: &[u8], at: usize) -> Option<usize> {
    let rest = &text[at..];
    TOKEN_SHAPES.iter().find_map(|t| {
        let body = rest.strip_prefix(t.prefix)?;
        let run = body.iter().take_while(|b| (t.body)(**b)).count();
        let len = if t.exact { t.min } else { run };
        (run >= t.min).then_some(at + t.prefix.len() + len)
    })
}

/// `text` with every token shape replaced by [`MASK`]; a shape starts a word (what comes
/// before it is no ASCII letter, digit or `_`).
fn mask_tokens(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let starts_word = i == 0 || !word(text[i - 1]);
        match starts_word.then(|| token_at(text, i)).flatten() {
            Some(end) => {
                out.extend_from_slice(MASK.as_bytes());
                i = end;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

/// Credentials in command lines and URLs, each with the part to keep first and the
/// secret second: `--password X`, `--password=X` (not `--password-file`), `-pX` after
/// mysql, `curl -u user:X`, `scheme://user:X@host`.
fn credential_forms() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(concat!(
            "(?-u)",
            r"(?i:(--?(?:password|passwd|pass|secret|token|api[-_]key)(?:=|\s+))([^\s'\x22]+)",
            r"|(\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n|;&]*?\s-p)([^\s'\x22]+)",
            r"|((?:\s|^)(?:-u|--user)(?:=|\s+)[^\s:'\x22]+:)([^\s'\x22]+)",
            r"|(\b[a-z][a-z0-9+.-]*://[^/\s:@'\x22]+:)([^/\s@'\x22]+)@)",
        ))
        .expect("credential forms compile")
    })
}

/// `Authorization: Bearer x` and `NAME=value` / `name: "value"` forms: the value goes
/// when the name looks secret (`AWS_SECRET_ACCESS_KEY=…`, `password=…`, `DB_PASS=…`); a
/// quoted value goes whole, spaces and all. A credential (a token, base64) holds no closing
/// bracket: one ends it (`(… Bearer x)`). Quotes may come escaped (`\"password\": \"x\"`,
/// as text quoted inside a quoted string shows them).
fn assignments() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(concat!(
            "(?-u)",
            r#"(?i:(\bauthorization(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?(?:bearer|basic|token)?\s*)"#,
            // Not from a `[`: a credential has none, and `[redacted: bearer-token]` (the
            // scan of results has been there) is no credential.
            r#"(?:[^\s"'\\,;)\[\]}>]|\\[^"'])+"#,
            r#"|\b([A-Za-z_][A-Za-z0-9_.-]*)((?:\\?["'])?\s*[:=]\s*)"#,
            r#"(\\"(?:[^"\\\n]|\\[^"\n])*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"#,
            r#"|\b([A-Za-z_][A-Za-z0-9_.-]*)((?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)"#,
            r#"(?:[^\s"'\\,;&]|\\[^"'])+)"#,
        ))
        .expect("assignment forms compile")
    })
}

/// `text` with the values of [`assignments`] whose names look secret masked. The value
/// of any other name is searched too, not passed over: it may hold a form of its own (the
/// quoted path in `not found: "db password=x"`, `opts=password=x`).
fn mask_assignments(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    // `text[..copied]` is in `out`; the search goes on from `from`.
    let (mut copied, mut from) = (0, 0);
    while let Some(c) = assignments().captures_at(text, from) {
        let whole = c.get(0).expect("a match");
        if let Some(auth) = c.get(1) {
            if is_scheme(&text[auth.end()..whole.end()]) {
                // `Authorization: Bearer [redacted: …]`: the scheme is no secret, and
                // what follows it was redacted already.
                from = whole.end();
                continue;
            }
            out.extend_from_slice(&text[copied..auth.end()]);
            out.extend_from_slice(MASK.as_bytes());
            (copied, from) = (whole.end(), whole.end());
            continue;
        }
        let (name, sep, quoted) = match (c.get(2), c.get(5)) {
            (Some(name), _) => (name, c.get(3), c.get(4)),
            (None, Some(name)) => (name, c.get(6), None),
            _ => unreachable!("every other branch names"),
        };
        let sep = sep.expect("a name has its separator");
        if secret_assignment(&String::from_utf8_lossy(name.as_bytes()))
            && !is_scheme(&text[sep.end()..whole.end()])
        {
            let q = quoted.map_or(&b""[..], |q| {
                let q = q.as_bytes();
                &q[..if q[0] == b'\\' { 2 } else { 1 }]
            });
            out.extend_from_slice(&text[copied..sep.end()]);
            for part in [q, MASK.as_bytes(), q] {
                out.extend_from_slice(part);
            }
            (copied, from) = (whole.end(), whole.end());
        } else {
            // Past the name and its separator only (never empty: a name has a letter).
            from = sep.end();
        }
    }
    out.extend_from_slice(&text[copied..]);
    out
}

/// An authorization scheme's word alone (`Bearer`), whose credential is not there.
fn is_scheme(value: &[u8]) -> bool {
    matches!(
        value.to_ascii_lowercase().as_slice(),
        b"bearer" | b"basic" | b"token"
    )
}

/// A name whose value is a secret in an assignment: [`looks_secret`], or `PASS` as its
/// last part (`DB_PASS`, `smtp.pass`; not `bypass`).
fn secret_assignment(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    looks_secret(name)
        || upper == "PASS"
        || ["_PASS", "-PASS", ".PASS"]
            .iter()
            .any(|s| upper.ends_with(s))
}

/// `text` with token shapes, credentials and secret-looking assignments replaced by
/// [`MASK`].
///
/// The forms are ASCII, and so are the patterns (`(?-u)`: ASCII classes, word boundaries
/// and case), matched over the text's bytes: their tables are a fraction of the Unicode
/// ones in every server's memory. Each match starts and ends at an ASCII byte or at an end
/// of the text, so what is kept stays valid UTF-8; non-ASCII letters count as non-word, so
/// a form next to one is masked, not passed over.
fn mask_shapes(text: &str) -> String {
    let text = private_keys().replace_all(text.as_bytes(), MASK.as_bytes());
    let text = mask_tokens(&text);
    let text = credential_forms().replace_all(&text, |c: &Captures<'_>| {
        let keep = [1, 3, 5, 7].into_iter().find_map(|i| c.get(i));
        let at: &[u8] = if c.get(7).is_some() { b"@" } else { b"" };
        [keep.map_or(&b""[..], |k| k.as_bytes()), MASK.as_bytes(), at].concat()
    });
    let text = mask_assignments(&text);
    // Valid by the boundaries above; lossy all the same, never a panic in the audit path.
    match String::from_utf8(text) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Now as RFC 3339 UTC with milliseconds, e.g. `2026-12-02T12:44:04.123Z`.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format_rfc3339(d.as_secs() as i64, d.subsec_millis())
}

/// Seconds since the epoch (and milliseconds) as RFC 3339 UTC.
pub fn format_rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian), by 400-year eras.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_env_secrets_secret_keys_and_cuts_long_values() {
        let m = Masker::new(
            [
                ("GITHUB_TOKEN".to_string(), "ghp_abcdef123".to_string()),
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("API_KEY".to_string(), "x".to_string()), // too short to mask everywhere
            ],
            20,
        );
        let got = m.mask(&json!({
            "command": "curl -H 'token ghp_abcdef123' /usr/bin:/bin",
            "api_key": "anything",
            "n": 3,
            "content": "0123456789012345678901234",
        }));
        assert_eq!(got["command"], "curl -H 'token ***' …[cut: 33 bytes]");
        assert_eq!(got["api_key"], MASK);
        assert_eq!(got["n"], 3);
        assert_eq!(got["content"], "01234567890123456789…[cut: 25 bytes]");
    }

    #[test]
    fn masks_token_shapes_and_secret_assignments_in_any_text() {
        let m = Masker::new([], 4096);
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----";
        for (input, want) in [
            (
                "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY",
                "export AWS_SECRET_ACCESS_KEY=***",
            ),
            (
                "curl -H 'Authorization: Bearer eyJhbGciOi.x.y' https://h",
                "curl -H 'Authorization: Bearer ***' https://h",
            ),
            (
                "git push https://ghp_0123456789abcdefghijABCDEFGHIJ@github.example",
                "git push https://***@github.example",
            ),
            ("db password=hunter2 user=bob", "db password=*** user=bob"),
            (
                r#"{"api_key": "abc123", "n": 1}"#,
                r#"{"api_key": "***", "n": 1}"#,
            ),
            ("id AKIAIOSFODNN7EXAMPLE ok", "id *** ok"),
            ("token = sk-proj-abcdefghijklmnopqrstuv", "token = ***"),
            (&format!("key:\n{pem}\nend"), "key:\n***\nend"),
        ] {
            assert_eq!(m.mask_text(input), want, "{input}");
        }
        // In a Write's content too.
        let got = m.mask(&json!({"path": "env.sh", "content": "GITHUB_TOKEN=abcdef\n"}));
        assert_eq!(got["content"], "GITHUB_TOKEN=***\n");
    }

    /// The scan finds what the regex of the shapes (counted runs and all) finds, on texts
    /// built from the shapes' prefixes and characters around their edges.
    #[test]
    fn the_token_scan_masks_exactly_what_the_shapes_regex_matches() {
        let shapes = Regex::new(concat!(
            r"(?-u)\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}",
            r"|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}",
            r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35})",
        ))
        .unwrap();
        let pieces: &[&str] = &[
            "ghp_",
            "ghs_",
            "gha_",
            "github_pat_",
            "glpat-",
            "sk-",
            "xoxb-",
            "xoxz-",
            "AKIA",
            "AIza",
            "a",
            "Z",
            "7",
            "_",
            "-",
            " ",
            ".",
            "é",
            "=",
            "0123456789",
            "ABCDEFGHIJ",
            "abcdefghij",
            "-_-_-",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut masked = 0;
        for _ in 0..20_000 {
            let n = 1 + (next() % 12) as usize;
            let text: String = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            let want = shapes.replace_all(text.as_bytes(), MASK.as_bytes());
            masked += usize::from(shapes.is_match(text.as_bytes()));
            assert_eq!(
                String::from_utf8_lossy(&mask_tokens(text.as_bytes())),
                String::from_utf8_lossy(&want),
                "{text}"
            );
        }
        // The texts reach the shapes often, not only their near misses.
        assert!(masked > 1_000, "{masked} of 20000 texts hold a token");
    }

    #[test]
    fn text_around_and_inside_a_masked_form_may_be_any_unicode() {
        let m = Masker::new([], 4096);
        for (input, want) in [
            ("café password=sëcrét naïve", "café password=*** naïve"),
            // A non-ASCII letter is no word character: the name after it still counts.
            ("éAPI_TOKEN=abc ü", "éAPI_TOKEN=*** ü"),
            ("日本 --password 秘密の鍵 終", "日本 --password *** 終"),
            ("ключ sk-abcdefghijklmnopqrstuvwx конец", "ключ *** конец"),
            ("PASSWORD: \"a\\\"é b\" ok", "PASSWORD: \"***\" ok"),
        ] {
            assert_eq!(m.mask_text(input), want, "{input}");
        }
    }

    #[test]
    fn credentials_in_commands_urls_quotes_and_pgp_blocks_are_masked() {
        let m = Masker::new([], 4096);
        let pgp = "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----";
        for (input, want) in [
            ("DB_PASS=hunter2xx psql", "DB_PASS=*** psql"),
            ("export SMTP_PASS='s3cr3t pw'", "export SMTP_PASS='***'"),
            ("mytool --password hunter2xx -v", "mytool --password *** -v"),
            ("mytool --password=hunter2xx -v", "mytool --password=*** -v"),
            ("mysql -u root -phunter2xx db", "mysql -u root -p*** db"),
            (
                "mysqldump -h h -pS3cret! db > x",
                "mysqldump -h h -p*** db > x",
            ),
            (
                "curl -u alice:hunter2xx https://h/x",
                "curl -u alice:*** https://h/x",
            ),
            (
                "curl --user alice:hunter2xx https://h",
                "curl --user alice:*** https://h",
            ),
            (
                "git clone https://bob:hunter2xx@git.example/r.git",
                "git clone https://bob:***@git.example/r.git",
            ),
            (
                r#"{"password": "two words here"}"#,
                r#"{"password": "***"}"#,
            ),
            (&format!("k:\n{pgp}\nend"), "k:\n***\nend"),
        ] {
            assert_eq!(m.mask_text(input), want, "{input}");
        }
        // What must stay as it is.
        for text in [
            "mytool --password-file /run/secrets/pw",
            "see https://example.org:8443/path?q=1",
            "git clone https://git.example/r.git",
            "mysql -u root db < dump.sql",
            "curl -u alice https://h",
            "cp -p a b; bypass=1",
        ] {
            assert_eq!(m.mask_text(text), text);
        }
    }

    /// A form inside another name's value, quoted or not, is masked: the value of a name
    /// that is no secret is searched, not passed over.
    #[test]
    fn forms_inside_quoted_and_assigned_values_are_masked() {
        let m = Masker::new([], 4096);
        for (input, want) in [
            (
                r#"file not found: "db password=X1 user=bob" (looked for /w/db password=*** user=bob)"#,
                r#"file not found: "db password=*** user=bob" (looked for /w/db password=*** user=bob)"#,
            ),
            (
                r#"file not found: "h Authorization: Bearer tok.x.y" (looked for h Authorization: Bearer ***)"#,
                r#"file not found: "h Authorization: Bearer ***" (looked for h Authorization: Bearer ***)"#,
            ),
            ("name='x password=hunter2 y'", "name='x password=*** y'"),
            ("opts=password=hunter2,x", "opts=password=***,x"),
            ("a: b: token=abc", "a: b: token=***"),
            // Quotes escaped, as a quoted text shows the quotes it holds.
            (
                r#"args="{\"password\": \"two words\", \"n\": 1}""#,
                r#"args="{\"password\": \"***\", \"n\": 1}""#,
            ),
            (
                r#"cmd="curl -H \"Authorization: Bearer abc.def\" h""#,
                r#"cmd="curl -H \"Authorization: Bearer ***\" h""#,
            ),
            (r#"e="DB_PASS=\"s3cr3t\"""#, r#"e="DB_PASS=\"***\"""#),
        ] {
            assert_eq!(m.mask_text(input), want, "{input}");
        }
        for text in [
            r#"file not found: "src/main.rs" (looked for /w/src/main.rs)"#,
            r#"path="a\\b" mode=0644"#,
            "user=bob host=h",
        ] {
            assert_eq!(m.mask_text(text), text);
        }
    }

    #[test]
    fn a_private_key_longer_than_the_searched_window_is_masked_to_its_end() {
        let m = Masker::new([], 100);
        let body = "A".repeat(12 * 1024);
        let text = format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----"
        );
        let got = m.mask_text(&text);
        assert!(!got.contains("AAAA"), "{}", &got[..got.len().min(200)]);
        assert!(got.starts_with(MASK), "{got}");
    }

    #[test]
    fn ordinary_text_is_left_as_it_is() {
        let m = Masker::new([], 4096);
        for text in [
            "fn main() { let x = 1; println!(\"{x}\"); }",
            "see https://example.org/a?b=c&d=e for details",
            "name: build\nstates:\n  initial: test\n  timeout: 30s",
            "a sk-short or ghp_short is no token; AKIA alone neither",
            "mode=0644 owner=root path=/etc/hosts",
        ] {
            assert_eq!(m.mask_text(text), text);
        }
    }

    #[test]
    fn a_secret_just_past_the_cut_is_masked_and_long_writes_are_cut() {
        let m = Masker::new([], 20);
        let text = format!("{}password=hunter2", "a".repeat(15));
        let got = m.mask_text(&text);
        assert!(!got.contains("hunter"), "{got}");
        let big = "x".repeat(10 * 1024 * 1024);
        let got = m.mask_text(&big);
        assert!(
            got.ends_with("…[cut: 10485760 bytes]"),
            "{}",
            &got[got.len() - 40..]
        );
    }

    /// A record as written, without its link.
    fn unlinked(line: &str) -> Value {
        let mut v: Value = serde_json::from_str(line).unwrap();
        assert!(
            v.as_object_mut().unwrap().remove("prev").is_some(),
            "{line}"
        );
        v
    }

    #[test]
    fn two_writers_append_whole_lines_in_one_chain() {
        let dir = tempfile::Builder::new()
            .prefix("awf-audit-test-")
            .tempdir()
            .unwrap();
        let p = dir.path().join("audit.jsonl");
        let a = AuditLog::open(&p).unwrap();
        let b = AuditLog::open(&p).unwrap();
        a.append(&json!({"n": 1, "run_id": "r", "step_id": "s"}))
            .unwrap();
        b.append(&json!({"n": 2})).unwrap();
        a.append(&json!({"n": 3})).unwrap();
        a.append(&json!({"n": 4})).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let records: Vec<Value> = text.lines().map(unlinked).collect();
        assert_eq!(
            records,
            [
                json!({"n": 1, "run_id": "r", "step_id": "s"}),
                json!({"n": 2}),
                json!({"n": 3}),
                json!({"n": 4})
            ]
        );
        // Each writer linked to the other's line when the other wrote last.
        let report = audit_chain::verify(&bytes);
        assert!(report.intact(), "{report:?}\n{text}");
        assert_eq!(report.lines, 4);
    }

    /// An audit file holding `content`, in a temp dir removed when the guard is dropped.
    fn fresh(name: &str, content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("awf-audit-{name}-"))
            .tempdir()
            .unwrap();
        let p = dir.path().join("audit.jsonl");
        std::fs::write(&p, content).unwrap();
        (dir, p)
    }

    #[test]
    fn a_torn_last_line_is_closed_and_recorded_before_the_first_record() {
        let torn = br#"{"ts":"2026-01-01T00:00:00.000Z","type":"tool.ca"#;
        let before = [&b"{\"n\":1}\n"[..], torn].concat();
        let (_tmp, p) = fresh("torn", &before);
        let log = AuditLog::open(&p).unwrap();
        log.append(&json!({"n": 2})).unwrap();
        let after = std::fs::read(&p).unwrap();
        // The torn bytes are kept as they were, their line closed.
        assert!(
            after.starts_with(&before),
            "{}",
            String::from_utf8_lossy(&after)
        );
        let text = String::from_utf8(after[before.len()..].to_vec()).unwrap();
        let lines: Vec<&str> = text.strip_prefix('\n').unwrap().lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        let repaired: Value = serde_json::from_str(lines[0]).unwrap();
        // Linked to the torn bytes as they are, and the next record to the repair.
        assert_eq!(repaired["prev"], crate::text::hex(&audit_chain::hash(torn)));
        let next: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(
            next["prev"],
            crate::text::hex(&audit_chain::hash(lines[0].as_bytes()))
        );
        assert_eq!(repaired["type"], "audit.repaired");
        assert_eq!(repaired["torn_bytes"], torn.len());
        assert_eq!(repaired["torn_offset"], 8);
        assert_eq!(repaired["pid"], std::process::id());
        assert!(repaired["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(unlinked(lines[1]), json!({"n": 2}));
        // Once closed, the next log finds nothing to repair.
        drop(AuditLog::open(&p).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), after);
    }

    #[test]
    fn a_file_that_is_one_torn_line_is_repaired_from_its_start() {
        let (_tmp, p) = fresh("torn-whole", b"{\"ts\":\"20");
        drop(AuditLog::open(&p).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("{\"ts\":\"20"));
        let repaired: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            (&repaired["torn_offset"], &repaired["torn_bytes"]),
            (&json!(0), &json!(9))
        );
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn a_torn_line_longer_than_the_scan_chunk_is_measured_whole() {
        let torn = "x".repeat(200 * 1024);
        let (_tmp, p) = fresh("torn-long", format!("{{}}\n{torn}").as_bytes());
        drop(AuditLog::open(&p).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        let repaired: Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
        assert_eq!(repaired["torn_bytes"], torn.len());
        assert_eq!(repaired["torn_offset"], 3);
    }

    #[test]
    fn whole_and_empty_files_are_left_as_they_are() {
        for content in [&b""[..], b"{\"n\":1}\n"] {
            let (_tmp, p) = fresh("whole", content);
            drop(AuditLog::open(&p).unwrap());
            assert_eq!(std::fs::read(&p).unwrap(), content);
        }
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            format_rfc3339(1_796_215_444, 123),
            "2026-12-02T12:44:04.123Z"
        );
    }
}
