//! A YAML document as a tree whose every node knows its line, so that a validation
//! problem can say where it is. Built from yaml-rust2's marked parser events (its own
//! `Yaml` type drops positions). Only what workflows use: one document of maps, sequences
//! and scalars; anchors are resolved by copying, within a budget of [`MAX_NODES`] nodes and
//! [`MAX_EXPANDED_BYTES`] bytes of scalar text, so that neither nested aliases (a "billion
//! laughs" file) nor a few aliases of one huge string can expand to gigabytes.

use crate::error::codes;
use serde_json::Value;
use std::collections::HashMap;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// The text and whether it was plain (unquoted: `true`, `3`, `~` then have their YAML meaning).
    Scalar(String, bool),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: Kind,
    /// 1-based line of the node's start.
    pub line: usize,
}

impl Node {
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar(s, _) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar(s, true) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.kind {
            Kind::Scalar(s, true) => match s.as_str() {
                "true" | "True" | "TRUE" => Some(true),
                "false" | "False" | "FALSE" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }

    /// What the node names in a message: `a map`, `a list`, `"text"`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Scalar(s, _) => format!("{s:?}"),
            Kind::Seq(_) => "a list".into(),
            Kind::Map(_) => "a map".into(),
        }
    }

    /// The node as JSON, plain scalars typed the YAML 1.2 core way (options pass through
    /// to providers, which expect numbers and booleans as such).
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Scalar(s, false) => Value::String(s.clone()),
            Kind::Scalar(s, true) => {
                if self.is_null() {
                    Value::Null
                } else if let Some(b) = self.as_bool() {
                    Value::Bool(b)
                } else if let Ok(i) = s.parse::<i64>() {
                    Value::from(i)
                } else if let Some(f) = s.parse::<f64>().ok().filter(|f| f.is_finite()) {
                    Value::from(f)
                } else {
                    Value::String(s.clone())
                }
            }
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// The most nodes a document may hold once its aliases are expanded. Real workflows hold
/// hundreds to a few thousand; this leaves room for a hundredfold of that while keeping
/// the expanded tree to a few megabytes.
pub const MAX_NODES: usize = 100_000;

/// The most bytes of scalar text a document may hold once its aliases are expanded: a few
/// aliases of a 1 MiB string are 10 GiB otherwise, in few nodes.
pub const MAX_EXPANDED_BYTES: usize = 64 * 1024 * 1024;

/// Which budget an alias broke.
#[derive(Debug, Clone, Copy)]
enum Over {
    Nodes,
    Bytes,
}

/// A YAML document awf refuses: a syntax error, or too many nodes once aliases are expanded.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    /// The code from [`crate::error::codes`]: `SYNTAX` or `TOO_LARGE`.
    pub code: &'static str,
    /// What is wrong, to follow the file's name ("is not valid YAML: ...").
    pub message: String,
    /// How to fix it.
    pub hint: &'static str,
    /// 1-based line.
    pub line: usize,
}

/// How many nodes a tree holds (itself, its items, keys and values) and the bytes of its
/// scalars.
fn measure(node: &Node) -> (usize, usize) {
    match &node.kind {
        Kind::Scalar(s, _) => (1, s.len()),
        Kind::Seq(items) => items.iter().map(measure).fold((1, 0), add),
        Kind::Map(entries) => entries
            .iter()
            .map(|(k, v)| add(measure(k), measure(v)))
            .fold((1, 0), add),
    }
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 + b.0, a.1 + b.1)
}

#[derive(Default)]
struct Builder {
    /// Open collections: the node and, for maps, a pending key.
    stack: Vec<(Node, Option<Node>)>,
    /// Anchored nodes with their node counts and scalar bytes.
    anchors: HashMap<usize, (Node, (usize, usize))>,
    /// Nodes built so far, aliases counted at their expanded size.
    nodes: usize,
    /// Bytes of scalar text so far, likewise.
    bytes: usize,
    /// Set when `nodes` passed [`MAX_NODES`] or `bytes` [`MAX_EXPANDED_BYTES`]: the line of
    /// the alias that did it; later events are ignored (the parser cannot be stopped from
    /// a receiver).
    over_budget: Option<(usize, Over)>,
    /// Anchor ids of the open collections, parallel to `stack`.
    stack_anchors: Vec<usize>,
    docs: Vec<Node>,
}

impl Builder {
    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            let size = measure(&node);
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some((parent, pending)) => match &mut parent.kind {
                Kind::Seq(items) => items.push(node),
                Kind::Map(entries) => match pending.take() {
                    None => *pending = Some(node),
                    Some(key) => {
                        // A map or list value is located at the key that names it (the
                        // parser marks its start at its first item, a line later).
                        let mut node = node;
                        if !matches!(node.kind, Kind::Scalar(..)) {
                            node.line = key.line;
                        }
                        entries.push((key, node))
                    }
                },
                Kind::Scalar(..) => unreachable!("scalars are never open"),
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line().max(1);
        if self.over_budget.is_some() {
            return;
        }
        if matches!(
            ev,
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..)
        ) {
            self.nodes += 1;
        }
        match ev {
            Event::Scalar(text, style, anchor, _) => {
                self.bytes += text.len();
                self.push_value(
                    Node {
                        kind: Kind::Scalar(text, style == TScalarStyle::Plain),
                        line,
                    },
                    anchor,
                )
            }
            Event::SequenceStart(anchor, _) => {
                self.stack.push((
                    Node {
                        kind: Kind::Seq(Vec::new()),
                        line,
                    },
                    None,
                ));
                self.stack_anchors.push(anchor);
            }
            Event::MappingStart(anchor, _) => {
                self.stack.push((
                    Node {
                        kind: Kind::Map(Vec::new()),
                        line,
                    },
                    None,
                ));
                self.stack_anchors.push(anchor);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let (Some((node, _)), Some(anchor)) =
                    (self.stack.pop(), self.stack_anchors.pop())
                {
                    self.push_value(node, anchor);
                }
            }
            Event::Alias(id) => {
                // Counted before copying, so an over-budget alias is never expanded.
                let (nodes, bytes) = self.anchors.get(&id).map_or((1, 0), |(_, size)| *size);
                self.nodes += nodes;
                self.bytes += bytes;
                if self.nodes > MAX_NODES {
                    self.over_budget = Some((line, Over::Nodes));
                    return;
                }
                if self.bytes > MAX_EXPANDED_BYTES {
                    self.over_budget = Some((line, Over::Bytes));
                    return;
                }
                let node = self.anchors.get(&id).map_or(
                    Node {
                        kind: Kind::Scalar(String::new(), true),
                        line,
                    },
                    |(node, _)| node.clone(),
                );
                self.push_value(node, 0);
            }
            _ => {}
        }
    }
}

const SYNTAX_HINT: &str =
    "fix the YAML syntax at that line (indentation, a missing `:` or bracket)";

/// Parses one YAML document. An empty document is an empty map's absence: `Ok(None)`.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| SyntaxError {
        code: codes::SYNTAX,
        message: format!(
            "is not valid YAML: {} (column {})",
            e.info(),
            e.marker().col() + 1
        ),
        // The usual cause: an unquoted value holding `: ` (`command: echo key: value`).
        hint: if e.info().starts_with("mapping values are not allowed") {
            "a value holding `: ` must be quoted: write it in quotes (\"...\" or '...') or as a \
             block (`command: |` and the text indented on the next lines)"
        } else {
            SYNTAX_HINT
        },
        line: e.marker().line().max(1),
    })?;
    if let Some((line, over)) = builder.over_budget {
        let message = match over {
            Over::Nodes => format!(
                "is refused: its aliases expand to more than {MAX_NODES} YAML nodes (the limit awf accepts)"
            ),
            Over::Bytes => format!(
                "is refused: its aliases expand to more than {} MiB of text (the limit awf accepts)",
                MAX_EXPANDED_BYTES >> 20
            ),
        };
        return Err(SyntaxError {
            code: codes::TOO_LARGE,
            message,
            hint: "write the repeated parts out, or use fewer and shallower `*alias` references (nested aliases multiply)",
            line,
        });
    }
    if builder.docs.len() > 1 {
        return Err(SyntaxError {
            code: codes::SYNTAX,
            message: "is not valid YAML: the file holds several YAML documents (---); a workflow is one document"
                .into(),
            hint: SYNTAX_HINT,
            line: builder.docs[1].line,
        });
    }
    Ok(builder.docs.pop())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_types() {
        let n = parse("a: 1\nb:\n  - x\n  - 'true'\nc: true\n")
            .unwrap()
            .unwrap();
        let Kind::Map(entries) = &n.kind else {
            panic!()
        };
        assert_eq!(entries[0].0.line, 1);
        assert_eq!(entries[1].0.line, 2);
        let Kind::Seq(items) = &entries[1].1.kind else {
            panic!()
        };
        assert_eq!(items[1].line, 4);
        assert_eq!(
            n.to_json(),
            serde_json::json!({"a": 1, "b": ["x", "true"], "c": true})
        );
    }

    #[test]
    fn syntax_errors_have_lines() {
        let e = parse("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(e.line >= 2, "{e:?}");
        assert!(parse("").unwrap().is_none());
    }

    /// Nine levels of nine aliases each: 9^9 (387 million) scalars from a few hundred bytes.
    fn alias_bomb() -> String {
        let mut text = String::from("name: bomb\na0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for level in 1..9 {
            let prev = format!("*a{}", level - 1);
            let items = [prev.as_str(); 9].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        text
    }

    #[test]
    fn nested_aliases_past_the_node_limit_are_refused() {
        let e = parse(&alias_bomb()).unwrap_err();
        assert_eq!(e.code, codes::TOO_LARGE);
        assert!(
            e.message
                .contains(&format!("expand to more than {MAX_NODES} YAML nodes")),
            "{e:?}"
        );
        assert!(e.hint.contains("alias"), "{e:?}");
        // The alias that crossed the limit: one of the deepest levels, not the first line.
        assert!((7..=10).contains(&e.line), "{e:?}");
    }

    #[test]
    fn a_wide_alias_of_a_large_string_is_refused_by_its_expanded_size() {
        // A 1 MiB string aliased 4 x 10 times: few nodes, 40 GiB of text.
        let big = "x".repeat(1 << 20);
        let mut text =
            format!("s: &s \"{big}\"\nl1: &l1 [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n");
        for level in 2..=4 {
            let prev = format!("*l{}", level - 1);
            let items = [prev.as_str(); 10].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{items}]\n"));
        }
        let e = parse(&text).unwrap_err();
        assert_eq!(e.code, codes::TOO_LARGE);
        assert!(e.message.contains("MiB of text"), "{e:?}");
        // Sixty aliases of it (60 MiB) still pass.
        let ok = format!("s: &s \"{big}\"\nl: [{}]\n", ["*s"; 60].join(", "));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn a_few_aliases_are_expanded() {
        let n = parse("base: &b {image: x, env: [A, B]}\none: *b\ntwo: [*b, *b]\n")
            .unwrap()
            .unwrap();
        let base = serde_json::json!({"image": "x", "env": ["A", "B"]});
        assert_eq!(
            n.to_json(),
            serde_json::json!({"base": base, "one": base, "two": [base, base]})
        );
    }

    #[test]
    fn the_limit_counts_expanded_nodes() {
        // The root map, key `a` and its list of 9 scalars: 12 nodes; each `kN: *a` adds 11.
        let mut text = format!("a: &a [{}]\n", ["x"; 9].join(", "));
        let aliases = (MAX_NODES - 12) / 11;
        for i in 0..aliases {
            text.push_str(&format!("k{i}: *a\n"));
        }
        assert!(
            parse(&text).is_ok(),
            "{} nodes are accepted",
            12 + 11 * aliases
        );
        text.push_str("last: *a\n");
        assert_eq!(parse(&text).unwrap_err().code, codes::TOO_LARGE);
    }
}
