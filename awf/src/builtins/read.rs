//! Read: a text file's lines, `offset` (0-based line) and `limit` (lines, default 2,000),
//! long lines cut, the whole answer bounded; binary files refused. The file is streamed,
//! so reading the head of a huge log costs what the head costs.

use super::{BuiltinEnv, bound, schema};
use mcpserver::Tool;
use serde::Deserialize;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub limit: Option<usize>,
}

pub fn tool(env: &BuiltinEnv) -> Tool {
    Tool::new(
        "Read",
        format!(
            "Read a text file inside the workspace root. Returns its lines as they are (no line \
             numbers). offset = number of lines to skip (0-based), limit = lines to return \
             (default {}). Lines longer than {} bytes are cut; the answer is at most {} bytes and \
             ends with a note saying how to read on. Binary files are refused.",
            env.limits.read_lines, env.limits.line_bytes, env.limits.output_bytes
        ),
        schema(
            &[
                (
                    "path",
                    "string",
                    "File path, relative to the root (or absolute inside it)",
                ),
                (
                    "offset",
                    "integer",
                    "Lines to skip from the start (0-based line index)",
                ),
                ("limit", "integer", "Maximum number of lines to return"),
            ],
            &["path"],
        ),
    )
    .annotations(serde_json::json!({"readOnlyHint": true}))
}

/// Opens `input` for reading (beneath the root, no symlink followed on the way, without
/// blocking on a FIFO) and checks it is a regular, singly-linked file.
pub(crate) fn open_input(
    env: &BuiltinEnv,
    input: &str,
) -> Result<(File, std::fs::Metadata), String> {
    let (file, _) = env
        .workspace
        .open(input, libc::O_RDONLY | libc::O_NONBLOCK)?;
    check_regular(env, file, input)
}

fn check_regular(
    env: &BuiltinEnv,
    file: File,
    input: &str,
) -> Result<(File, std::fs::Metadata), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat \"{input}\": {e}"))?;
    if meta.is_dir() {
        return Err(format!(
            "\"{input}\" is a directory; use Glob to list its files"
        ));
    }
    if !meta.is_file() {
        return Err(format!(
            "\"{input}\" is not a regular file (a device, FIFO or socket); refused"
        ));
    }
    env.workspace.check_links(&meta, input).map_err(|e| e.0)?;
    Ok((file, meta))
}

pub fn run(env: &BuiltinEnv, args: Args) -> Result<String, String> {
    let (file, meta) = open_input(env, &args.path)?;
    let offset = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(env.limits.read_lines);
    if limit == 0 {
        return Err("limit must be at least 1".into());
    }
    // Read what the file held when it was opened (no read past its end to find it; a
    // size of 0 may be a file whose size is not known: read to its end).
    let size = meta.len();
    let file = file.take(if size == 0 { u64::MAX } else { size });
    let cap = if size == 0 {
        64 * 1024
    } else {
        size.clamp(1, 64 * 1024) as usize
    };
    let mut reader = BufReader::with_capacity(cap, file);
    if text_start(&mut reader, &args.path, meta.len())? {
        return Ok("[empty file]".into());
    }

    let budget = env.limits.output_bytes;
    let line_cap = env.limits.line_bytes;
    let mut out = String::new();
    // A line is kept up to the cut (plus one char to cut it cleanly), never whole: a file
    // of one 2 GiB line costs this buffer, not 2 GiB.
    let keep = line_cap + 4;
    let mut line = Vec::with_capacity(keep.min(64 * 1024));
    let mut index = 0usize; // lines seen so far
    let mut shown = 0usize;
    let mut cut_lines = 0usize;
    let mut stopped_for_size = false;
    loop {
        line.clear();
        let skipping = index < offset;
        let Some(total) =
            read_line_bounded(&mut reader, &mut line, if skipping { 0 } else { keep })
                .map_err(|e| format!("cannot read \"{}\": {e}", args.path))?
        else {
            break;
        };
        if skipping {
            index += 1;
            continue;
        }
        if shown == limit {
            // One more line exists after the window: say how to continue.
            out.push_str(&format!(
                "[showing lines {}-{}; more lines follow: call Read with offset={}]",
                offset + 1,
                offset + shown,
                offset + shown
            ));
            return Ok(out);
        }
        let (rendered, cut) = render_line(&line, total, line_cap);
        cut_lines += usize::from(cut);
        if out.len() + rendered.len() > budget && shown > 0 {
            stopped_for_size = true;
            break;
        }
        out.push_str(&rendered);
        index += 1;
        shown += 1;
    }
    if shown == 0 {
        return Ok(format!(
            "[offset {offset} is past the end: the file has {index} lines]"
        ));
    }
    if stopped_for_size {
        out.push_str(&format!(
            "[output cut at {} bytes: showing lines {}-{}; call Read with offset={} to continue]",
            budget,
            offset + 1,
            offset + shown,
            offset + shown
        ));
    } else if cut_lines > 0 {
        out.push_str(&format!(
            "[{cut_lines} long line(s) cut to {line_cap} bytes; use Grep or Bash (cut, fold) to see them whole]"
        ));
    }
    // Guard against a single enormous first line still exceeding the budget.
    Ok(bound::bound_text(
        out,
        budget + 200,
        "use offset/limit for less",
    ))
}

/// Refuses a binary file (a NUL byte in its first 8 KiB, as git and ripgrep tell it);
/// true when the file is empty.
fn text_start(reader: &mut impl BufRead, path: &str, size: u64) -> Result<bool, String> {
    let head = reader
        .fill_buf()
        .map_err(|e| format!("cannot read \"{path}\": {e}"))?;
    if head[..head.len().min(8192)].contains(&0) {
        return Err(format!(
            "\"{path}\" is a binary file ({size} bytes); Read returns text only"
        ));
    }
    Ok(head.is_empty())
}

/// A line as shown (with its `\n`), cut to `line_cap` bytes when longer (`total` is its
/// whole length); true when it was cut.
fn render_line(line: &[u8], total: u64, line_cap: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(line);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let body = body.strip_suffix('\r').unwrap_or(body);
    // The kept bytes are the whole line when it was short: then its `\r` is not counted.
    let total = total - u64::from(line.len() as u64 == total && line.ends_with(b"\r"));
    let cut = total > line_cap as u64;
    let mut rendered = if cut {
        format!(
            "{} [line cut: {} of {} bytes shown]",
            &body[..crate::text::floor_char_boundary(body, line_cap)],
            line_cap,
            total
        )
    } else {
        body.to_string()
    };
    rendered.push('\n');
    (rendered, cut)
}

/// Reads one line (through its `\n`) from `reader`, appending at most `keep` bytes of it
/// to `line`; returns the line's length without the `\n` (None at the end of the input).
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<Option<u64>> {
    let mut total = 0u64;
    let mut any = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(any.then_some(total));
        }
        any = true;
        let (chunk, done) = match memchr_newline(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        total += chunk.len() as u64;
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(Some(total));
        }
    }
}

fn memchr_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// Reads a whole small text file (Edit), refusing binary content and sizes over `max`;
/// returns the text and the path it resolved to.
pub(crate) fn read_all(
    env: &BuiltinEnv,
    input: &str,
    max: usize,
) -> Result<(String, std::path::PathBuf), String> {
    let (file, path) = env
        .workspace
        .open(input, libc::O_RDONLY | libc::O_NONBLOCK)?;
    let (file, meta) = check_regular(env, file, input)?;
    if meta.len() as usize > max {
        return Err(format!(
            "\"{input}\" is {} bytes, over the {max}-byte limit for editing; use Bash (sed) for big files",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read \"{input}\": {e}"))?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err(format!(
            "\"{input}\" is a binary file; only text files can be edited"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        format!("\"{input}\" is not valid UTF-8; only UTF-8 text files can be edited")
    })?;
    Ok((text, path))
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn read(
        env: &BuiltinEnv,
        path: &str,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> Result<String, String> {
        run(
            env,
            Args {
                path: path.into(),
                offset,
                limit,
            },
        )
    }

    #[test]
    fn reads_lines_with_offset_and_limit() {
        let (_tmp, root) = testutil::root("read-lines");
        std::fs::write(root.join("f.txt"), "a\nb\nc\nd\n").unwrap();
        let env = testutil::env(&root);
        assert_eq!(read(&env, "f.txt", None, None).unwrap(), "a\nb\nc\nd\n");
        let out = read(&env, "f.txt", Some(1), Some(2)).unwrap();
        assert_eq!(
            out,
            "b\nc\n[showing lines 2-3; more lines follow: call Read with offset=3]"
        );
        assert_eq!(read(&env, "f.txt", Some(3), Some(2)).unwrap(), "d\n");
        assert!(
            read(&env, "f.txt", Some(10), None)
                .unwrap()
                .contains("has 4 lines")
        );
    }

    #[test]
    fn missing_binary_and_directory_are_errors() {
        let (_tmp, root) = testutil::root("read-errs");
        std::fs::write(root.join("bin"), b"ab\0cd").unwrap();
        let env = testutil::env(&root);
        let e = read(&env, "nope.txt", None, None).unwrap_err();
        assert!(
            e.contains("file not found") && e.contains("nope.txt"),
            "{e}"
        );
        assert!(
            read(&env, "bin", None, None)
                .unwrap_err()
                .contains("binary")
        );
        assert!(
            read(&env, ".", None, None)
                .unwrap_err()
                .contains("directory")
        );
    }

    #[test]
    fn long_lines_and_big_files_are_bounded() {
        let (_tmp, root) = testutil::root("read-bound");
        std::fs::write(root.join("long"), format!("{}\nshort\n", "x".repeat(5000))).unwrap();
        let big: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(root.join("big"), &big).unwrap();
        let env = testutil::env(&root);
        let out = read(&env, "long", None, None).unwrap();
        assert!(
            out.contains("[line cut: 2000 of 5000 bytes shown]"),
            "{out}"
        );
        assert!(out.contains("short\n"));
        let out = read(&env, "big", None, Some(50_000)).unwrap();
        assert!(out.len() < 100_400, "{}", out.len());
        assert!(
            out.contains("call Read with offset="),
            "{}",
            &out[out.len() - 200..]
        );
    }

    #[test]
    fn hard_links_are_refused() {
        let (_tmp, root) = testutil::root("read-hardlink");
        std::fs::write(root.join("a"), "x").unwrap();
        std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
        let env = testutil::env(&root);
        assert!(
            read(&env, "b", None, None)
                .unwrap_err()
                .contains("hard links")
        );
    }
}
