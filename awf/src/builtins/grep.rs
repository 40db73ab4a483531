//! Grep: ripgrep's engine (grep-regex + grep-searcher) over the gitignore-aware walk.
//! Modes: `content` (`path:line:text`), `files_with_matches`, `count` (`path:count`);
//! optional `glob` filter (ripgrep's --glob semantics) and `case_insensitive`. Binary
//! files, symlinks and multiply-linked files are skipped. Results are sorted by path so
//! the answer is the same from run to run, and capped with a note.
//!
//! Bounds, for a hostile pattern or file: a counted repetition over [`MAX_REPEAT`], a
//! compiled regex over [`REGEX_SIZE_LIMIT`] or a lazy DFA over [`DFA_SIZE_LIMIT`] is refused
//! with the limit named (ripgrep's defaults, 100 MiB and 1 GiB, let `a{40000}` take 10 s and
//! 800 MiB); a line longer than [`LINE_HEAP_LIMIT`] is reported, not loaded; at most
//! [`THREADS`] files are searched at once. A call thus holds about 64 MiB at most, however
//! many run at once. Cancellation is checked between files and between reads of a file.

use super::{BuiltinEnv, bound, glob::walker, schema};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::WalkState;
use ignore::overrides::OverrideBuilder;
use mcpserver::{CancellationToken, Tool};
use serde::Deserialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Content,
    FilesWithMatches,
    Count,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub output_mode: Option<Mode>,
    #[serde(default)]
    pub case_insensitive: Option<bool>,
}

pub fn tool(env: &BuiltinEnv) -> Tool {
    let mut schema = schema(
        &[
            (
                "pattern",
                "string",
                "Regular expression (Rust/ripgrep syntax)",
            ),
            (
                "path",
                "string",
                "File or directory to search, relative to the root (default: the root)",
            ),
            (
                "glob",
                "string",
                "Only search files matching this glob, e.g. \"*.rs\" or \"src/**/*.go\"",
            ),
            (
                "output_mode",
                "string",
                "content (path:line:text, default), files_with_matches, or count",
            ),
            (
                "case_insensitive",
                "boolean",
                "Match case-insensitively (default false)",
            ),
        ],
        &["pattern"],
    );
    schema["properties"]["output_mode"]["enum"] =
        serde_json::json!(["content", "files_with_matches", "count"]);
    Tool::new(
        "Grep",
        format!(
            "Search file contents with a regular expression (ripgrep's engine) under the \
             workspace root. output_mode: content prints path:line:text for each matching line; \
             files_with_matches lists the files; count prints path:count. Honours .gitignore, \
             skips binary files. Sorted by path; at most {} lines/files are listed.",
            env.limits.grep_results
        ),
        schema,
    )
    .annotations(serde_json::json!({"readOnlyHint": true}))
}

/// What one file yielded.
struct FileHits {
    path: PathBuf,
    count: usize,
    lines: Vec<(u64, String)>,
}

/// Stored matched text is capped overall so a pattern matching everything in a huge tree
/// cannot exhaust memory; counts stay exact.
const STORE_BUDGET: usize = 16 * 1024 * 1024;

/// The most a searcher's buffer may grow to hold one line (grep-searcher's heap limit):
/// a file with a longer line is reported, not loaded whole.
pub const LINE_HEAP_LIMIT: usize = 4 * 1024 * 1024;

/// Files searched at once (each with its line buffer and DFA cache).
pub const THREADS: usize = 4;

/// The largest compiled regex (its NFA), in bytes.
pub const REGEX_SIZE_LIMIT: usize = 1024 * 1024;

/// The largest lazy DFA cache of one search thread, in bytes.
pub const DFA_SIZE_LIMIT: usize = 4 * 1024 * 1024;

/// The largest count of a counted repetition (`x{n}`, `x{n,m}`).
pub const MAX_REPEAT: u32 = 1000;

/// Checks the pattern's counted repetitions, then compiles it within the size limits.
fn build_matcher(pattern: &str, case_insensitive: bool) -> Result<RegexMatcher, String> {
    use regex_syntax::ast::{self, Ast, RepetitionKind, RepetitionRange};
    let hint = "narrow the pattern (a shorter repetition, fewer alternatives), or search \
                with Bash (grep -E)";
    let tree = ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
    struct Counts(u32);
    impl ast::Visitor for Counts {
        type Output = u32;
        type Err = ();
        fn finish(self) -> Result<u32, ()> {
            Ok(self.0)
        }
        fn visit_pre(&mut self, a: &Ast) -> Result<(), ()> {
            if let Ast::Repetition(r) = a
                && let RepetitionKind::Range(range) = &r.op.kind
            {
                let n = match range {
                    RepetitionRange::Exactly(n) | RepetitionRange::AtLeast(n) => *n,
                    RepetitionRange::Bounded(a, b) => (*a).max(*b),
                };
                self.0 = self.0.max(n);
            }
            Ok(())
        }
    }
    let biggest = ast::visit(&tree, Counts(0)).unwrap_or(0);
    if biggest > MAX_REPEAT {
        return Err(format!(
            "the pattern {pattern:?} repeats {{{biggest}}} times, over the {MAX_REPEAT} Grep \
             accepts; {hint}"
        ));
    }
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build(pattern)
        .map_err(|e| {
            let e = e.to_string();
            if e.contains("size limit") {
                format!(
                    "the pattern {pattern:?} compiles to more than {} KiB, the most Grep \
                     accepts; {hint}",
                    REGEX_SIZE_LIMIT >> 10
                )
            } else {
                format!("invalid regex {pattern:?}: {e}")
            }
        })
}

/// A file read that fails once the call is cancelled, so that a search stops between two
/// reads of a long file.
struct StopReader<'a, R> {
    inner: R,
    stop: &'a (dyn Fn() -> bool + Sync),
}

impl<R: std::io::Read> std::io::Read for StopReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if (self.stop)() {
            return Err(std::io::Error::other(CANCELLED));
        }
        self.inner.read(buf)
    }
}

const CANCELLED: &str = "the call was cancelled";

struct Collect<'a> {
    mode: Mode,
    per_file_cap: usize,
    line_bytes: usize,
    stored: &'a AtomicUsize,
    count: usize,
    lines: Vec<(u64, String)>,
    binary: bool,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        match self.mode {
            Mode::FilesWithMatches => return Ok(false), // one match is enough
            Mode::Count => return Ok(true),
            Mode::Content => {}
        }
        if self.lines.len() < self.per_file_cap
            && self.stored.load(Ordering::Relaxed) < STORE_BUDGET
        {
            let text = String::from_utf8_lossy(m.bytes());
            let text = text.trim_end_matches(['\n', '\r']);
            let text = if text.len() > self.line_bytes {
                format!(
                    "{} [line cut: {} of {} bytes shown]",
                    &text[..crate::text::floor_char_boundary(text, self.line_bytes)],
                    self.line_bytes,
                    text.len()
                )
            } else {
                text.to_string()
            };
            self.stored.fetch_add(text.len(), Ordering::Relaxed);
            self.lines.push((m.line_number().unwrap_or(0), text));
        }
        Ok(true)
    }

    fn binary_data(&mut self, _s: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

#[derive(Default)]
struct Results {
    files: Vec<FileHits>,
    binary_skipped: usize,
    linked_skipped: usize,
    changed_skipped: usize,
    errors: Vec<String>,
}

pub fn run(env: &BuiltinEnv, args: Args, cancel: &CancellationToken) -> Result<String, String> {
    let mode = args.output_mode.unwrap_or_default();
    let matcher = build_matcher(&args.pattern, args.case_insensitive.unwrap_or(false))?;
    let stop = || cancel.is_cancelled() || env.shutdown.is_set();
    let stop: &(dyn Fn() -> bool + Sync) = &stop;
    let path_input = args.path.as_deref().unwrap_or(".");
    let (target_file, target, meta) = open_target(env, path_input)?;
    let cap = env.limits.grep_results;
    let stored = AtomicUsize::new(0);
    let results = Mutex::new(Results::default());
    let search = Search {
        env,
        matcher: &matcher,
        mode,
        cap,
        stored: &stored,
        results: &results,
        stop,
    };

    if meta.is_file() {
        if let Some(g) = &args.glob
            && let Some(no_match) = glob_skips_file(g, &target, path_input)?
        {
            return Ok(no_match);
        }
        search.file(&mut new_searcher(mode), &target, Some(target_file));
    } else if meta.is_dir() {
        search.dir(&target, args.glob.as_deref())?;
    } else {
        return Err(format!(
            "\"{path_input}\" is neither a file nor a directory"
        ));
    }

    if stop() {
        return Err("cancelled: the search was stopped".into());
    }
    let r = results.into_inner().unwrap();
    let out = report(env, mode, &args.pattern, &target, r);
    let out = out.trim_end_matches('\n').to_string();
    Ok(bound::bound_text(
        out,
        env.limits.output_bytes,
        "narrow the pattern, path or glob",
    ))
}

/// Opens the file or directory to search, beneath the root, and reads its metadata.
fn open_target(
    env: &BuiltinEnv,
    path_input: &str,
) -> Result<(std::fs::File, PathBuf, std::fs::Metadata), String> {
    let (target_file, target) = env
        .workspace
        .open(path_input, libc::O_RDONLY | libc::O_NONBLOCK)
        .map_err(|e| {
            if e.starts_with("file not found") {
                format!(
                    "path \"{path_input}\" not found under the root {}",
                    env.workspace.root().display()
                )
            } else {
                e
            }
        })?;
    let meta = target_file
        .metadata()
        .map_err(|e| format!("cannot inspect \"{path_input}\": {e}"))?;
    Ok((target_file, target, meta))
}

/// The answer to give when a single file does not match the glob, as ripgrep would.
fn glob_skips_file(g: &str, target: &Path, path_input: &str) -> Result<Option<String>, String> {
    let m = globset::Glob::new(g)
        .map_err(|e| format!("invalid glob {g:?}: {e}"))?
        .compile_matcher();
    if !m.is_match(target.file_name().unwrap_or_default()) && !m.is_match(target) {
        return Ok(Some(format!(
            "no matches: \"{path_input}\" does not match the glob {g:?}"
        )));
    }
    Ok(None)
}

/// A searcher for one thread: quits on binary data, bounds its line buffer.
fn new_searcher(mode: Mode) -> Searcher {
    SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(LINE_HEAP_LIMIT))
        .line_number(mode == Mode::Content)
        .build()
}

/// One call's search: what it looks for and where it gathers what it finds.
struct Search<'a> {
    env: &'a BuiltinEnv,
    matcher: &'a RegexMatcher,
    mode: Mode,
    cap: usize,
    stored: &'a AtomicUsize,
    results: &'a Mutex<Results>,
    stop: &'a (dyn Fn() -> bool + Sync),
}

impl Search<'_> {
    /// Walks a directory in parallel and searches every regular file in it.
    fn dir(&self, target: &Path, glob: Option<&str>) -> Result<(), String> {
        let env = self.env;
        let stop = self.stop;
        let mut walk = walker(target, &env.workspace);
        walk.threads(THREADS);
        if let Some(g) = glob {
            let mut ob = OverrideBuilder::new(target);
            ob.add(g).map_err(|e| format!("invalid glob {g:?}: {e}"))?;
            walk.overrides(ob.build().map_err(|e| format!("invalid glob {g:?}: {e}"))?);
        }
        walk.build_parallel().run(|| {
            let mut searcher = new_searcher(self.mode);
            Box::new(move |entry| {
                if stop() {
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                // Regular files only: symlinks are not followed (they may lead out of the root).
                if entry.file_type().is_some_and(|t| t.is_file()) {
                    self.file(&mut searcher, entry.path(), None);
                }
                WalkState::Continue
            })
        });
        Ok(())
    }

    /// Searches one file and records what it yielded, or why it was skipped.
    fn file(&self, searcher: &mut Searcher, path: &Path, file: Option<std::fs::File>) {
        // Each file is opened again by fd beneath the root (never by the walker's path name,
        // which a rename race may have pointed outside), and checked on what was opened.
        let env = self.env;
        let results = self.results;
        let file = match file {
            Some(f) => f,
            None => match open_listed(&env.workspace, path) {
                Ok(f) => f,
                Err(Unopened::Changed) => {
                    results.lock().unwrap().changed_skipped += 1;
                    return;
                }
                Err(Unopened::Failed(e)) => {
                    let mut r = results.lock().unwrap();
                    r.errors.push(format!("{}: {e}", env.workspace.show(path)));
                    return;
                }
            },
        };
        let Ok(meta) = file.metadata() else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        if meta.nlink() > 1 {
            results.lock().unwrap().linked_skipped += 1;
            return;
        }
        let mut sink = Collect {
            mode: self.mode,
            per_file_cap: self.cap,
            line_bytes: env.limits.line_bytes,
            stored: self.stored,
            count: 0,
            lines: Vec::new(),
            binary: false,
        };
        let reader = StopReader {
            inner: &file,
            stop: self.stop,
        };
        let outcome = searcher.search_reader(self.matcher, reader, &mut sink);
        let mut r = results.lock().unwrap();
        match outcome {
            Err(e) if e.to_string().contains(CANCELLED) => {}
            Err(e) if e.to_string().contains("allocation limit") => r.errors.push(format!(
                "{}: a line is longer than {} MiB, the most Grep holds (use Bash with head -c or cut)",
                env.workspace.show(path),
                LINE_HEAP_LIMIT >> 20
            )),
            Err(e) => r.errors.push(format!("{}: {e}", env.workspace.show(path))),
            Ok(()) if sink.binary => r.binary_skipped += 1,
            Ok(()) if sink.count > 0 => r.files.push(FileHits {
                path: path.to_path_buf(),
                count: sink.count,
                lines: sink.lines,
            }),
            Ok(()) => {}
        }
    }
}

/// The answer: the hits sorted by path and capped, then notes on what was left out.
fn report(env: &BuiltinEnv, mode: Mode, pattern: &str, target: &Path, mut r: Results) -> String {
    let cap = env.limits.grep_results;
    r.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let total_files = r.files.len();
    let total_lines: usize = r.files.iter().map(|f| f.count).sum();
    let (mut out, listed) = list_hits(env, mode, cap, &r.files);
    if total_files == 0 {
        out.push_str(&format!(
            "no matches for {:?} under {}\n",
            pattern,
            env.workspace.show(target)
        ));
    }
    let unit_total = if mode == Mode::Content {
        total_lines
    } else {
        total_files
    };
    if listed < unit_total {
        out.push_str(&format!(
            "[{total_lines} matching lines in {total_files} files; showing the first {listed} {}; narrow the pattern, path or glob]\n",
            if mode == Mode::Content { "lines" } else { "files" }
        ));
    }
    push_skipped_notes(&mut out, r);
    out
}

/// Lists the hits, one line each, up to `cap` lines; gives the text and how many it listed.
fn list_hits(env: &BuiltinEnv, mode: Mode, cap: usize, files: &[FileHits]) -> (String, usize) {
    let mut out = String::new();
    let mut listed = 0usize;
    'files: for f in files {
        let shown = env.workspace.show(&f.path);
        match mode {
            Mode::Content => {
                for (n, text) in &f.lines {
                    if listed == cap {
                        break 'files;
                    }
                    out.push_str(&format!("{shown}:{n}:{text}\n"));
                    listed += 1;
                }
            }
            Mode::FilesWithMatches | Mode::Count => {
                if listed == cap {
                    break;
                }
                if mode == Mode::Count {
                    out.push_str(&format!("{shown}:{}\n", f.count));
                } else {
                    out.push_str(&format!("{shown}\n"));
                }
                listed += 1;
            }
        }
    }
    (out, listed)
}

/// Notes the files that were skipped (binary, linked, changed) or could not be read.
fn push_skipped_notes(out: &mut String, mut r: Results) {
    if r.binary_skipped > 0 {
        out.push_str(&format!("[{} binary files skipped]\n", r.binary_skipped));
    }
    if r.linked_skipped > 0 {
        out.push_str(&format!(
            "[{} files with several hard links skipped: they may be files outside the root]\n",
            r.linked_skipped
        ));
    }
    if r.changed_skipped > 0 {
        out.push_str(&format!(
            "[{} files skipped: they changed (were moved, removed or replaced by a symlink) while being searched]\n",
            r.changed_skipped
        ));
    }
    if !r.errors.is_empty() {
        r.errors.sort_unstable();
        out.push_str(&format!(
            "[{} files could not be read: {}]\n",
            r.errors.len(),
            r.errors.join("; ")
        ));
    }
}

/// Why a listed file was not opened.
#[derive(Debug)]
enum Unopened {
    /// Gone or replaced since it was listed: the name may have been listed through a
    /// symlink from outside the root (a directory swapped for one mid-walk), so it is never
    /// shown, only counted.
    Changed,
    /// It is there, beneath the root, and cannot be read: the name is the root's own.
    Failed(std::io::Error),
}

/// Opens a file the walker listed, by fd beneath the root (never by the listed path name,
/// which a rename race may have pointed outside).
fn open_listed(
    workspace: &super::paths::Workspace,
    path: &Path,
) -> Result<std::fs::File, Unopened> {
    let flags = libc::O_RDONLY | libc::O_NONBLOCK;
    let err = match workspace.open_at(workspace.root_fd(), workspace.relative(path), flags, 0) {
        Ok(f) => return Ok(f),
        Err(e) => e,
    };
    let swapped = err.kind() == std::io::ErrorKind::NotFound
        || matches!(
            err.raw_os_error(),
            Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR)
        );
    // Any other error names the file only if its directory is the root's now.
    let parent = path.parent().unwrap_or(Path::new("."));
    let dir_inside = workspace
        .open_at(
            workspace.root_fd(),
            workspace.relative(parent),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .is_ok();
    if swapped || !dir_inside {
        Err(Unopened::Changed)
    } else {
        Err(Unopened::Failed(err))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil;
    use super::*;

    fn grep(env: &BuiltinEnv, pattern: &str, f: impl FnOnce(&mut Args)) -> Result<String, String> {
        let mut a = Args {
            pattern: pattern.into(),
            path: None,
            glob: None,
            output_mode: None,
            case_insensitive: None,
        };
        f(&mut a);
        run(env, a, &CancellationToken::new())
    }

    #[test]
    fn hostile_patterns_are_refused_naming_the_limit() {
        let (_tmp, root, env) = tree("grep-hostile");
        std::fs::write(root.join("long.txt"), "a".repeat(40_000)).unwrap();
        let e = grep(&env, "a{40000}", |_| {}).unwrap_err();
        assert!(e.contains("over the 1000 Grep accepts"), "{e}");
        let e = grep(&env, "(\\w{200}){4}", |_| {}).unwrap_err();
        assert!(e.contains("KiB, the most Grep accepts"), "{e}");
        // Within the limits: found.
        assert!(grep(&env, "a{1000}", |_| {}).unwrap().contains("long.txt"));
    }

    #[test]
    fn a_cancelled_search_stops_and_says_so() {
        let (_tmp, root, env) = tree("grep-cancel");
        for i in 0..50 {
            std::fs::write(root.join(format!("f{i}.txt")), "main\n".repeat(1000)).unwrap();
        }
        let token = CancellationToken::new();
        token.cancel();
        let args = Args {
            pattern: "main".into(),
            path: None,
            glob: None,
            output_mode: None,
            case_insensitive: None,
        };
        let e = run(&env, args, &token).unwrap_err();
        assert!(e.starts_with("cancelled"), "{e}");
    }

    #[test]
    fn a_read_after_cancellation_fails() {
        use std::io::Read;
        let stopped = std::sync::atomic::AtomicBool::new(false);
        let stop = || stopped.load(Ordering::Relaxed);
        let mut r = StopReader {
            inner: &b"abcdef"[..],
            stop: &stop,
        };
        let mut buf = [0u8; 3];
        assert_eq!(r.read(&mut buf).unwrap(), 3);
        stopped.store(true, Ordering::Relaxed);
        assert!(
            r.read(&mut buf)
                .unwrap_err()
                .to_string()
                .contains(CANCELLED)
        );
    }

    /// A small tree to search, the guard that removes it, and an env rooted there.
    fn tree(name: &str) -> (tempfile::TempDir, PathBuf, BuiltinEnv) {
        let (tmp, root) = testutil::root(name);
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "fn main() {}\nlet x = Main;\n").unwrap();
        std::fs::write(root.join("src/b.txt"), "main here\n").unwrap();
        std::fs::write(root.join("bin.dat"), b"main\0\0binary").unwrap();
        let env = testutil::env(&root);
        (tmp, root, env)
    }

    #[test]
    fn a_name_listed_through_a_swapped_directory_is_never_shown() {
        let (_tmp, root, env) = tree("grep-swapped");
        let (_outside_tmp, outside) = testutil::root("grep-swapped-outside");
        std::fs::write(outside.join("outside_only.txt"), "main\n").unwrap();
        let listed = root.join("d/outside_only.txt");
        // `d` was a symlink to outside when the walker listed it, a file when opened.
        std::fs::write(root.join("d"), "now a file\n").unwrap();
        assert!(matches!(
            open_listed(&env.workspace, &listed),
            Err(Unopened::Changed)
        ));
        // Still the symlink when opened: refused beneath the root, and not shown either.
        std::fs::remove_file(root.join("d")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        assert!(matches!(
            open_listed(&env.workspace, &listed),
            Err(Unopened::Changed)
        ));
        // A file of the root's own that cannot be opened keeps its name in the note.
        let long = root.join("src").join("n".repeat(300));
        match open_listed(&env.workspace, &long) {
            Err(Unopened::Failed(e)) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert!(open_listed(&env.workspace, &root.join("src/a.rs")).is_ok());
    }

    #[test]
    fn modes() {
        let (_tmp, _, env) = tree("grep-modes");
        assert_eq!(
            grep(&env, "main", |_| {}).unwrap(),
            "src/a.rs:1:fn main() {}\nsrc/b.txt:1:main here\n[1 binary files skipped]"
        );
        assert_eq!(
            grep(&env, "main", |a| {
                a.output_mode = Some(Mode::Count);
                a.case_insensitive = Some(true);
            })
            .unwrap(),
            "src/a.rs:2\nsrc/b.txt:1\n[1 binary files skipped]"
        );
        assert_eq!(
            grep(&env, "main", |a| {
                a.output_mode = Some(Mode::FilesWithMatches);
                a.glob = Some("*.rs".into());
            })
            .unwrap(),
            "src/a.rs"
        );
        assert_eq!(
            grep(&env, "here", |a| a.path = Some("src/b.txt".into())).unwrap(),
            "src/b.txt:1:main here"
        );
    }

    #[test]
    fn errors_and_caps() {
        let (_tmp, _, mut env) = tree("grep-errs");
        assert!(
            grep(&env, "(", |_| {})
                .unwrap_err()
                .contains("invalid regex")
        );
        assert!(
            grep(&env, "x", |a| a.path = Some("/etc".into()))
                .unwrap_err()
                .contains("outside the root")
        );
        assert!(grep(&env, "zzz", |_| {}).unwrap().starts_with("no matches"));
        env.limits.grep_results = 1;
        let out = grep(&env, "main", |a| a.case_insensitive = Some(true)).unwrap();
        assert!(
            out.starts_with(
                "src/a.rs:1:fn main() {}\n[3 matching lines in 2 files; showing the first 1 lines"
            ),
            "{out}"
        );
    }
}
