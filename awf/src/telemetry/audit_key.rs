//! The audit key: a secret awf alone holds, from `AWF_AUDIT_KEY` (its value) or
//! `AWF_AUDIT_KEY_FILE` (a file only its owner may read), that signs each step's audit
//! head (HMAC-SHA256 of the head, the run id and the step id), so that even someone who can
//! rewrite an audit file and the run state whole cannot make a head `awf audit verify`
//! takes. No child awf starts gets it: the variables are removed from the agent CLIs' and
//! the shell steps' environments (Bash, plugins and servers start from an allowlist), and
//! the file is hidden from every jail.

use ring::hmac;
use std::path::PathBuf;
use std::sync::OnceLock;

pub use crate::child_env::{AUDIT_KEY_FILE_VAR as KEY_FILE_VAR, AUDIT_KEY_VAR as KEY_VAR};
/// The shortest key taken: shorter ones are guessed.
const MIN_KEY_BYTES: usize = 16;

/// The key file, when one is named (hidden from every jail).
pub fn key_file() -> Option<PathBuf> {
    std::env::var_os(KEY_FILE_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The key of this process (read once): none when neither variable is set; an error
/// naming the fix when one is set and unusable.
pub fn key() -> Result<Option<&'static [u8]>, String> {
    static KEY: OnceLock<Result<Option<Vec<u8>>, String>> = OnceLock::new();
    KEY.get_or_init(load)
        .as_ref()
        .map(|k| k.as_deref())
        .map_err(Clone::clone)
}

fn load() -> Result<Option<Vec<u8>>, String> {
    let key = match (
        std::env::var(KEY_VAR).ok().filter(|v| !v.is_empty()),
        key_file(),
    ) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "both {KEY_VAR} and {KEY_FILE_VAR} are set; keep one"
            ));
        }
        (Some(v), None) => v.into_bytes(),
        (None, Some(file)) => {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(&file)
                .map_err(|e| format!("{KEY_FILE_VAR}: cannot read {}: {e}", file.display()))?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "{KEY_FILE_VAR}: {} may be read by others (mode {:o}); chmod 600 it",
                    file.display(),
                    meta.permissions().mode() & 0o777
                ));
            }
            let mut bytes = std::fs::read(&file)
                .map_err(|e| format!("{KEY_FILE_VAR}: cannot read {}: {e}", file.display()))?;
            while bytes.last().is_some_and(|b| b.is_ascii_whitespace()) {
                bytes.pop();
            }
            bytes
        }
        (None, None) => return Ok(None),
    };
    if key.len() < MIN_KEY_BYTES {
        return Err(format!(
            "the audit key has {} bytes, under {MIN_KEY_BYTES}; make one with `openssl rand \
             -hex 32`",
            key.len()
        ));
    }
    Ok(Some(key))
}

/// What is signed: the head and whose it is, one a line.
fn message(run_id: &str, step_id: &str, head: &str) -> String {
    format!("awf audit head v1\n{run_id}\n{step_id}\n{head}")
}

/// The signature (hex HMAC-SHA256) of step `step_id`'s head in run `run_id`.
pub fn sign(key: &[u8], run_id: &str, step_id: &str, head: &str) -> String {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    crate::text::hex(hmac::sign(&k, message(run_id, step_id, head).as_bytes()).as_ref())
}

/// Whether `mac` is the signature of that head (compared in constant time).
pub fn check(key: &[u8], run_id: &str, step_id: &str, head: &str, mac: &str) -> bool {
    let Some(bytes) = unhex(mac) else {
        return false;
    };
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::verify(&k, message(run_id, step_id, head).as_bytes(), &bytes).is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_head_run_and_step_only() {
        let key = b"0123456789abcdef0123456789abcdef";
        let mac = sign(key, "run-1", "1-work", "aa11");
        assert_eq!(mac.len(), 64);
        assert!(check(key, "run-1", "1-work", "aa11", &mac));
        assert!(!check(key, "run-1", "1-work", "aa12", &mac), "another head");
        assert!(!check(key, "run-2", "1-work", "aa11", &mac), "another run");
        assert!(!check(key, "run-1", "2-work", "aa11", &mac), "another step");
        assert!(!check(
            b"another key, 32 bytes long......",
            "run-1",
            "1-work",
            "aa11",
            &mac
        ));
        assert!(!check(key, "run-1", "1-work", "aa11", "zz"));
    }
}
