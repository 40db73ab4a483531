//! The documentation is checked: every ```yaml block of README.md and docs/*.md that is a
//! whole workflow (a line starting with `states:`) validates with the real `awf validate`,
//! as the example workflows do (`workflow_examples.rs`); every relative link (of those
//! pages and of the crates' and examples' READMEs) leads to a file that exists (and, into a page, to one of its headings); every docs page is on the
//! README's map; and the README keeps the test command CI reads.
//!
//! A block that is a fragment (no top-level `states:`) is not a workflow and is skipped. A
//! whole workflow that cannot validate here (it needs a plugin, say) is marked with the
//! line `<!-- not checked: REASON -->` right before its fence, and counted.

use crate::common;
use std::path::{Path, PathBuf};

/// Whole workflows the docs hold today: fewer means an example was lost (or marked).
const MIN_CHECKED: usize = 5;
/// Examples marked `<!-- not checked: ... -->`: they should stay few.
const MAX_NOT_CHECKED: usize = 3;

const TEST_COMMAND: &str =
    "**Test command** (what `.ci/run` runs after installing): `bash scripts/test`";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// README.md and every docs/*.md, in a stable order.
fn pages() -> Vec<PathBuf> {
    let root = repo();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("the docs/ directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no page");
    let mut all = vec![root.join("README.md")];
    all.extend(docs);
    all
}

/// The other READMEs a reader follows links in: the crates' and the examples'.
fn other_readmes() -> Vec<PathBuf> {
    let root = repo();
    [
        "examples/workflows",
        "mcpserver",
        "awf",
        "plugin-sdk",
        "conformance",
        "bench",
    ]
    .iter()
    .map(|d| root.join(d).join("README.md"))
    .filter(|p| p.exists())
    .collect()
}

fn name(page: &Path) -> String {
    page.strip_prefix(repo())
        .unwrap_or(page)
        .display()
        .to_string()
}

/// A fenced block: its info string, first line (1-based, the fence's), text, and the
/// reason of a `<!-- not checked: ... -->` line right before it.
struct Block {
    info: String,
    line: usize,
    text: String,
    not_checked: Option<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let body: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| !l.trim_start().starts_with("```"))
            .copied()
            .collect();
        let not_checked = start
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix("<!-- not checked:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|r| r.trim().to_string());
        i = start + body.len() + 2;
        out.push(Block {
            info: info.trim().to_string(),
            line: start + 1,
            text: body.join("\n") + "\n",
            not_checked,
        });
    }
    out
}

/// The page's text outside fenced blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter_map(|l| {
            let t = l.trim_start_matches('#');
            (t.len() < l.len() && t.starts_with(' ')).then(|| anchor(t))
        })
        .collect()
}

/// Targets of the page's inline links (`[text](target)`), outside fenced blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let joined = prose(text).join("\n");
    let mut rest = joined.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_whole_workflow_in_the_docs_validates() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("awf-docs-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut checked, mut not_checked, mut fragments) = (0, Vec::new(), 0);
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, b) in blocks(&text).into_iter().enumerate() {
            if b.info != "yaml" {
                continue;
            }
            let at = format!("{}:{}", name(&page), b.line);
            if !b.text.lines().any(|l| l.starts_with("states:")) {
                fragments += 1;
                continue;
            }
            if let Some(reason) = b.not_checked {
                assert!(!reason.is_empty(), "{at}: say why it is not checked");
                not_checked.push(format!("{at} ({reason})"));
                continue;
            }
            let stem = page.file_stem().unwrap().to_string_lossy().to_string();
            let file = dir.join(format!("{stem}-{n}.yaml"));
            std::fs::write(&file, &b.text).unwrap();
            let out = common::awf_validate(&dir, &file).output().unwrap();
            checked += 1;
            if out.status.code() != Some(0) {
                failures.push(format!(
                    "{at}: awf validate exited {:?}\n{}{}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    eprintln!(
        "{checked} whole workflows validated, {fragments} fragments skipped, {} not checked: {}",
        not_checked.len(),
        not_checked.join(", ")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        checked >= MIN_CHECKED,
        "only {checked} whole workflows in the docs, expected at least {MIN_CHECKED}"
    );
    assert!(
        not_checked.len() <= MAX_NOT_CHECKED,
        "too many examples are not checked: {not_checked:?}"
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages().into_iter().chain(other_readmes()) {
        let text = std::fs::read_to_string(&page).unwrap();
        let base = page.parent().unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                base.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target} (no {})", name(&page), file.display()));
                continue;
            }
            if let Some(f) = fragment
                && file.extension().is_some_and(|x| x == "md")
            {
                let heads = anchors(&std::fs::read_to_string(&file).unwrap());
                if !heads.iter().any(|h| h == f) {
                    broken.push(format!("{}: {target} (no such heading)", name(&page)));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_maps_every_page_and_keeps_the_test_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let linked = links(&readme);
    for page in pages().into_iter().skip(1) {
        let rel = name(&page);
        assert!(
            linked
                .iter()
                .any(|l| l.split('#').next() == Some(rel.as_str())),
            "README.md does not link {rel}"
        );
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(
            text.starts_with("# "),
            "{rel} does not start with its title"
        );
    }
    assert!(
        readme.lines().any(|l| l.contains(TEST_COMMAND)),
        "README.md lost its test command line: {TEST_COMMAND}"
    );
    // And it is what CI runs.
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.starts_with("bash scripts/test")),
        ".ci/run does not run the README's test command (bash scripts/test)"
    );
}

#[test]
fn blocks_and_anchors_are_read_as_github_reads_them() {
    let text = "\
a
<!-- not checked: needs a plugin -->
```yaml
states:
  x: 1
```
# t
```rust
#[derive(Debug)]
```
";
    let b = blocks(text);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].info, "yaml");
    assert_eq!(b[0].line, 3);
    assert_eq!(b[0].text, "states:\n  x: 1\n");
    assert_eq!(b[0].not_checked.as_deref(), Some("needs a plugin"));
    assert_eq!(b[1].not_checked, None);
    assert_eq!(anchors(text), ["t"]);
    assert_eq!(
        anchor("AWF's language in this `awf`"),
        "awfs-language-in-this-awf"
    );
    assert_eq!(
        anchor("The keys of `mcp_proxy.sandbox`"),
        "the-keys-of-mcp_proxysandbox"
    );
    assert_eq!(
        anchor("An agent: `retry` with `on`"),
        "an-agent-retry-with-on"
    );
}
