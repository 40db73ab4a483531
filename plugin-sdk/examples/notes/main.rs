//! Example awf plugin: an in-memory note store whose inputs are not flat scalars —
//! `add {text, tags: [string], meta: {string: string}}` and `search {query, tags, limit}` —
//! which is what JSON Schema inputs are for.
//!
//! Layout awf expects: a plugin directory holding this executable (named `notes`) and
//! `examples/notes/plugin.yaml`. Configuration (`Init`): `max_notes`, a positive integer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use plugin_sdk::{Info, Operation, Output, Plugin};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize)]
struct Note {
    id: u64,
    text: String,
    tags: Vec<String>,
    meta: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    text: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    meta: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    /// A note must carry all of these tags.
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    10
}

#[derive(Default)]
struct Notes {
    notes: Mutex<Vec<Note>>,
    max_notes: Mutex<Option<usize>>,
}

fn note_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": { "type": "integer" },
            "text": { "type": "string" },
            "tags": { "type": "array", "items": { "type": "string" } },
            "meta": { "type": "object", "additionalProperties": { "type": "string" } }
        },
        "required": ["id", "text", "tags", "meta"]
    })
}

impl Plugin for Notes {
    fn info(&self) -> Info {
        Info::new(
            "notes",
            env!("CARGO_PKG_VERSION"),
            "A small in-memory note store",
        )
    }

    fn operations(&self) -> Vec<Operation> {
        vec![
            Operation::new("add", "Store a note with optional tags and metadata")
                .input_schema(json!({
                    "type": "object",
                    "properties": {
                        "text": { "type": "string", "description": "The note itself" },
                        "tags": { "type": "array", "items": { "type": "string" } },
                        "meta": {
                            "type": "object",
                            "additionalProperties": { "type": "string" },
                            "description": "Free key/value metadata, e.g. {\"source\": \"call\"}"
                        }
                    },
                    "required": ["text"],
                    "additionalProperties": false
                }))
                .output_schema(note_schema()),
            Operation::new("search", "Find notes whose text contains a query")
                .input_schema(json!({
                    "type": "object",
                    "properties": {
                        "query": { "type": "string", "description": "Case-insensitive substring" },
                        "tags": {
                            "type": "array",
                            "items": { "type": "string" },
                            "description": "Only notes carrying all of these tags"
                        },
                        "limit": { "type": "integer", "minimum": 1, "default": 10 }
                    },
                    "required": ["query"],
                    "additionalProperties": false
                }))
                .output_schema(json!({ "type": "array", "items": note_schema() })),
        ]
    }

    fn init(&self, config: &HashMap<String, String>) -> Result<(), String> {
        if let Some(raw) = config.get("max_notes") {
            let max: usize = raw
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("max_notes must be a positive integer, got {raw:?}"))?;
            *self.max_notes.lock().unwrap() = Some(max);
        }
        Ok(())
    }

    fn execute(&self, operation: &str, args: Value) -> Result<Output, String> {
        match operation {
            "add" => {
                let args: AddArgs =
                    serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))?;
                let max = *self.max_notes.lock().unwrap();
                let mut notes = self.notes.lock().unwrap();
                if max.is_some_and(|max| notes.len() >= max) {
                    return Err(format!(
                        "the store is full ({} notes, max_notes = {})",
                        notes.len(),
                        max.unwrap_or_default()
                    ));
                }
                let note = Note {
                    id: notes.len() as u64 + 1,
                    text: args.text,
                    tags: args.tags,
                    meta: args.meta,
                };
                notes.push(note.clone());
                Ok(Output::text(format!("added note {}", note.id)).with_data(json!(note)))
            }
            "search" => {
                let args: SearchArgs =
                    serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))?;
                let query = args.query.to_lowercase();
                let notes = self.notes.lock().unwrap();
                let found: Vec<&Note> = notes
                    .iter()
                    .filter(|n| n.text.to_lowercase().contains(&query))
                    .filter(|n| args.tags.iter().all(|t| n.tags.contains(t)))
                    .take(args.limit)
                    .collect();
                let text = found
                    .iter()
                    .map(|n| format!("#{} {}", n.id, n.text))
                    .collect::<Vec<_>>()
                    .join("\n");
                Ok(Output::text(text).with_data(json!(found)))
            }
            other => Err(format!("unknown operation {other}")),
        }
    }
}

fn main() {
    plugin_sdk::serve(Notes::default())
}
