//! The audit file as a hash chain, and `awf audit verify`.
//!
//! Every record starts with `"prev"`: the SHA-256 (hex) of the line before it, its bytes as
//! written without the newline. The first record's `prev` is the file's anchor, the SHA-256
//! of `awf audit v1`, its `run_id` and its `step_id` (each on a line of its own), so that a
//! file cannot lose its first records, nor pass for another step's. A record that was
//! changed, removed, inserted or moved breaks the link of the record after it, and
//! [`verify`] names the first such place. The last line's hash is the chain's *head*.
//!
//! A torn line (a writer that died mid-write) stays in the chain: the `audit.repaired`
//! record that closes it links to its bytes as they are, and its own `prev` (the field
//! comes first, so that a torn line keeps it unless it is torn within it) is checked too.
//! A file that ends mid-line, unrepaired, was cut there (or its writer died and no writer
//! opened it since): what comes before still verifies, and the report says so.
//!
//! What the chain cannot show alone: records cut from the end at a line boundary, or a
//! whole file rewritten with new links. The report says whether the file ends with its
//! server's `session.end`.

use crate::text::hex;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The hash of one line, or of the anchor.
pub type Hash = [u8; 32];

/// What a chained line starts with, before the 64 hex digits of its link.
const PREFIX: &[u8] = br#"{"prev":""#;
const HEX_LEN: usize = 64;

/// The `prev` of a file's first record: the chain anchored to its run and step.
pub fn anchor(record: &Value) -> Hash {
    let id = |k: &str| {
        record
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut h = Sha256::new();
    h.update(b"awf audit v1\n");
    h.update(id("run_id").as_bytes());
    h.update(b"\n");
    h.update(id("step_id").as_bytes());
    h.finalize().into()
}

/// The hash of a line as written (without its newline).
pub fn hash(line: &[u8]) -> Hash {
    Sha256::digest(line).into()
}

/// `body` (one serialized JSON object) with `"prev"` first, then its newline.
pub fn chained(prev: &Hash, body: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(body.len() + PREFIX.len() + HEX_LEN + 3);
    line.extend_from_slice(PREFIX);
    line.extend_from_slice(hex(prev).as_bytes());
    line.push(b'"');
    // `{}` gets no comma; any other object goes on after its `{`.
    let rest = body.strip_prefix(b"{").unwrap_or(body);
    if rest != b"}" {
        line.push(b',');
    }
    line.extend_from_slice(rest);
    line.push(b'\n');
    line
}

/// The link a line carries, if it starts as a chained line does (a torn line may still).
fn link(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(PREFIX)?;
    let digits = rest.get(..HEX_LEN)?;
    (rest.get(HEX_LEN) == Some(&b'"') && digits.iter().all(u8::is_ascii_hexdigit)).then_some(digits)
}

/// What [`verify`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Report {
    /// Complete lines read (records, and torn lines that were repaired).
    pub lines: usize,
    /// The hash of the last complete line, if any.
    pub head: Option<String>,
    /// The first place the chain breaks: what is wrong there, in words.
    pub broken: Option<String>,
    /// Bytes after the last newline: the file was cut mid-record (or its writer died).
    pub torn_tail: Option<u64>,
    /// The last record is its server's `session.end`.
    pub ends_with_session_end: bool,
}

impl Report {
    pub fn intact(&self) -> bool {
        self.broken.is_none() && self.torn_tail.is_none()
    }
}

/// Checks every link of an audit file's bytes.
pub fn verify(bytes: &[u8]) -> Report {
    let (complete, tail) = match bytes.iter().rposition(|b| *b == b'\n') {
        Some(i) => (&bytes[..=i], &bytes[i + 1..]),
        None => (&bytes[..0], bytes),
    };
    let mut report = Report {
        lines: 0,
        head: None,
        broken: None,
        torn_tail: (!tail.is_empty()).then_some(complete.len() as u64),
        ends_with_session_end: false,
    };
    let mut offset = 0u64;
    let mut previous: Option<(Hash, bool, u64)> = None; // its hash, torn, its offset
    let mut rest = complete;
    while let Some(end) = rest.iter().position(|b| *b == b'\n') {
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let n = report.lines + 1;
        let record: Option<Value> = serde_json::from_slice(line).ok();
        let kind = match &record {
            None => "torn line",
            Some(r) => r
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("a record without type"),
        }
        .to_string();
        let expected = match (&previous, &record) {
            (Some((h, _, _)), _) => Some(*h),
            (None, Some(r)) => Some(anchor(r)),
            (None, None) => None,
        };
        let problem = match (link(line), expected) {
            _ if record.is_none() && !line.starts_with(b"{") => Some(format!(
                "line {n} (offset {offset}) is not a record of awf's audit"
            )),
            (None, _) if record.is_some() => Some(format!(
                "line {n} (offset {offset}, {kind}) carries no link (\"prev\"): the file is not \
                 a chained awf audit, or the line was written by hand"
            )),
            (Some(got), Some(want)) if !got.eq_ignore_ascii_case(hex(&want).as_bytes()) => {
                Some(if previous.is_none() {
                    format!(
                        "line {n} (offset {offset}, {kind}) is not the first record of its step: \
                         records before it were removed, or it comes from another run or step"
                    )
                } else {
                    format!(
                        "line {n} (offset {offset}, {kind}) does not follow line {}: line {} was \
                         changed, or records were removed, inserted or reordered between them",
                        n - 1,
                        n - 1
                    )
                })
            }
            _ => None,
        };
        // A torn line must be closed by the record after it, naming where it starts (said
        // first: the link after it breaks too, but this says why).
        let torn = match &previous {
            Some((_, true, torn_at)) => {
                let repaired = record.as_ref().is_some_and(|r| {
                    r["type"] == "audit.repaired" && r["torn_offset"].as_u64() == Some(*torn_at)
                });
                (!repaired).then(|| {
                    format!(
                        "line {} (offset {torn_at}) is torn and line {n} does not repair it: bytes \
                         were cut from the middle of the file",
                        n - 1
                    )
                })
            }
            _ => None,
        };
        let problem = torn.or(problem);
        if problem.is_some() {
            report.broken = problem;
            break;
        }
        report.lines = n;
        report.ends_with_session_end = kind == "session.end";
        previous = Some((hash(line), record.is_none(), offset));
        offset += line.len() as u64 + 1;
    }
    if report.broken.is_none()
        && let Some((_, true, torn_at)) = previous
    {
        report.broken = Some(format!(
            "line {} (offset {torn_at}) is torn and nothing after it repairs it",
            report.lines
        ));
    }
    report.head = previous.map(|(h, _, _)| hex(&h));
    report
}

/// `awf audit verify FILE`: one line (or a JSON object) saying whether the chain is whole,
/// and, given the head the run state kept (`kept`), whether the file still ends there; 0
/// when it is whole, 1 when not.
pub fn verify_command(
    path: &std::path::Path,
    kept: Option<&str>,
    json: bool,
) -> Result<u8, crate::error::AwfError> {
    let bytes = std::fs::read(path).map_err(|e| {
        crate::error::AwfError::new(
            crate::error::codes::USAGE,
            format!(
                "cannot read the audit file {}: {e} (give the path of a step's .jsonl)",
                path.display()
            ),
        )
    })?;
    let mut r = verify(&bytes);
    if let (None, Some(kept)) = (&r.broken, kept)
        && r.head.as_deref() != Some(kept)
    {
        r.broken = Some(format!(
            "its last line is not the head the run state kept at the step's end ({kept}): \
             records were cut from its end, or it was rewritten"
        ));
    }
    let name = path.display();
    if json {
        let out = serde_json::json!({
            "file": path, "intact": r.intact(), "records": r.lines, "head": r.head,
            "kept_head": kept,
            "broken": r.broken, "torn_tail_offset": r.torn_tail,
            "ends_with_session_end": r.ends_with_session_end,
        });
        println!("{out}");
    } else if let Some(why) = &r.broken {
        println!("{name}: the chain breaks: {why}");
    } else if let Some(at) = r.torn_tail {
        println!(
            "{name}: the file ends mid-record at offset {at} (cut there, or its writer died and \
             none opened it since); the {} lines before it are intact",
            r.lines
        );
    } else {
        let end = if r.ends_with_session_end {
            "ends with session.end"
        } else {
            "does not end with session.end (its server was killed, is still running, or \
             records were cut from the end)"
        };
        println!(
            "{name}: intact, {} lines, head {}; {end}",
            r.lines,
            r.head.as_deref().unwrap_or("-")
        );
    }
    Ok(if r.intact() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A chained file of `records` as awf writes it.
    fn file(records: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut prev = anchor(&records[0]);
        for r in records {
            let line = chained(&prev, &serde_json::to_vec(r).unwrap());
            prev = hash(&line[..line.len() - 1]);
            out.extend(line);
        }
        out
    }

    fn records() -> Vec<Value> {
        let r = |kind: &str, n: u64| json!({"type": kind, "run_id": "r1", "step_id": "s1", "n": n});
        vec![
            r("session.start", 0),
            r("tool.call", 1),
            r("tool.result", 2),
            r("tool.call", 3),
            r("tool.result", 4),
            r("session.end", 5),
        ]
    }

    fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn join(lines: &[Vec<u8>]) -> Vec<u8> {
        lines
            .iter()
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect()
    }

    #[test]
    fn an_untouched_file_verifies_and_names_its_head() {
        let bytes = file(&records());
        let r = verify(&bytes);
        assert!(r.intact(), "{r:?}");
        assert_eq!(r.lines, 6);
        assert!(r.ends_with_session_end);
        let last = lines(&bytes).pop().unwrap();
        assert_eq!(r.head, Some(hex(&hash(&last))));
        assert!(bytes.starts_with(br#"{"prev":""#));
    }

    #[test]
    fn an_edited_field_breaks_the_next_link() {
        let bytes = file(&records());
        let edited = String::from_utf8(bytes)
            .unwrap()
            .replacen(r#""n":2"#, r#""n":7"#, 1);
        let r = verify(edited.as_bytes());
        let why = r.broken.expect("found");
        assert!(
            why.starts_with("line 4 ") && why.contains("line 3 was changed"),
            "{why}"
        );
    }

    #[test]
    fn a_removed_an_inserted_and_a_moved_record_are_found() {
        let all = lines(&file(&records()));
        let mut removed = all.clone();
        removed.remove(2);
        let why = verify(&join(&removed)).broken.expect("removal found");
        assert!(why.starts_with("line 3 "), "{why}");

        // Inserted with a link that fits the line before it: the line after breaks.
        let mut inserted = all.clone();
        let forged = chained(
            &hash(&all[1]),
            &serde_json::to_vec(&json!({"type": "tool.call", "run_id": "r1", "step_id": "s1"}))
                .unwrap(),
        );
        inserted.insert(2, forged[..forged.len() - 1].to_vec());
        let why = verify(&join(&inserted)).broken.expect("insertion found");
        assert!(why.starts_with("line 4 "), "{why}");

        let mut swapped = all.clone();
        swapped.swap(3, 4);
        let why = verify(&join(&swapped)).broken.expect("swap found");
        assert!(why.starts_with("line 4 "), "{why}");

        let mut first_gone = all;
        first_gone.remove(0);
        let why = verify(&join(&first_gone))
            .broken
            .expect("first record's removal found");
        assert!(why.contains("not the first record"), "{why}");
    }

    #[test]
    fn a_file_cut_mid_record_is_found_and_a_repaired_torn_line_verifies() {
        let bytes = file(&records());
        let cut = &bytes[..bytes.len() - 20];
        let r = verify(cut);
        assert!(!r.intact());
        assert!(r.broken.is_none(), "{r:?}");
        assert_eq!(
            r.torn_tail,
            Some(lines(&bytes)[..5].iter().map(|l| l.len() as u64 + 1).sum())
        );
        assert_eq!(r.lines, 5);
        assert!(!r.ends_with_session_end);

        // As awf repairs it: a newline, then an audit.repaired record linked to the torn bytes.
        let torn_at = r.torn_tail.unwrap();
        let torn = &cut[torn_at as usize..];
        let mut repaired = cut.to_vec();
        repaired.push(b'\n');
        let record = json!({"type": "audit.repaired", "torn_offset": torn_at,
                            "torn_bytes": torn.len()});
        repaired.extend(chained(&hash(torn), &serde_json::to_vec(&record).unwrap()));
        let r = verify(&repaired);
        assert!(r.intact(), "{r:?}");
        assert_eq!(r.lines, 7);

        // A torn line that nothing repairs: bytes cut from the middle.
        let mut spliced = cut.to_vec();
        spliced.push(b'\n');
        spliced.extend(lines(&bytes)[5].iter().chain(b"\n"));
        let why = verify(&spliced).broken.expect("found");
        assert!(why.contains("does not repair it"), "{why}");
    }

    #[test]
    fn a_file_without_links_is_not_taken_for_a_chained_one() {
        let plain: Vec<u8> = records()
            .iter()
            .flat_map(|r| serde_json::to_vec(r).unwrap().into_iter().chain([b'\n']))
            .collect();
        let why = verify(&plain).broken.expect("found");
        assert!(why.contains("carries no link"), "{why}");
    }

    #[test]
    fn an_empty_object_is_chained_too() {
        let line = chained(&[0; 32], b"{}");
        assert_eq!(
            line,
            format!("{{\"prev\":\"{}\"}}\n", "0".repeat(64)).into_bytes()
        );
    }
}
