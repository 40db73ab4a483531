//! A YAML document as a tree whose every node knows its line, so that a validation
//! problem can say where it is. Built from yaml-rust2's marked parser events (its own
//! `Yaml` type drops positions). Only what workflows use: one document of maps, sequences
//! and scalars; anchors are resolved by copying.

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

/// A YAML syntax error with its 1-based line.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    pub message: String,
    pub line: usize,
}

#[derive(Default)]
struct Builder {
    /// Open collections: the node and, for maps, a pending key.
    stack: Vec<(Node, Option<Node>)>,
    anchors: HashMap<usize, Node>,
    /// Anchor ids of the open collections, parallel to `stack`.
    stack_anchors: Vec<usize>,
    docs: Vec<Node>,
}

impl Builder {
    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
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
        match ev {
            Event::Scalar(text, style, anchor, _) => self.push_value(
                Node {
                    kind: Kind::Scalar(text, style == TScalarStyle::Plain),
                    line,
                },
                anchor,
            ),
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
                let node = self.anchors.get(&id).cloned().unwrap_or(Node {
                    kind: Kind::Scalar(String::new(), true),
                    line,
                });
                self.push_value(node, 0);
            }
            _ => {}
        }
    }
}

/// Parses one YAML document. An empty document is an empty map's absence: `Ok(None)`.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| SyntaxError {
        message: e.info().to_string(),
        line: e.marker().line().max(1),
    })?;
    if builder.docs.len() > 1 {
        return Err(SyntaxError {
            message: "the file holds several YAML documents (---); a workflow is one document"
                .into(),
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
}
