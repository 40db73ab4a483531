//! `awf plugins list`: every plugin directory on the search path, whether it works, and
//! the tools it would give an agent. Valid plugins are started (in parallel) to ask them
//! for their operations, then stopped, so "ok" means the plugin really answered.

use super::discovery::{self, Discovery, Found};
use super::{PluginRuntime, start_all};
use crate::error::AwfError;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// The report as JSON: `{search_path: [..], plugins: [{name, version, description, dir,
/// executable, state: ok|failed|invalid|shadowed, error?, shadowed_by?, operations?}]}`.
pub fn report(root: &Path) -> Result<Value, AwfError> {
    let discovery = Discovery::scan(discovery::search_path(root));
    let valid: Vec<_> = discovery.plugins().collect();
    let started = if valid.is_empty() {
        Vec::new()
    } else {
        start_all(&valid, &Arc::new(PluginRuntime::new()?))
    };
    let mut started = valid.iter().map(|m| m.name.clone()).zip(started);
    let mut plugins = Vec::new();
    for found in &discovery.found {
        plugins.push(match found {
            Found::Plugin(m) => {
                let (_, result) = started.next().expect("one result per valid plugin");
                let mut entry = manifest_json(m);
                match result {
                    Ok(p) => {
                        entry["state"] = json!("ok");
                        entry["operations"] = p
                            .operations()
                            .iter()
                            .map(|o| {
                                json!({
                                    "name": o.name,
                                    "tool": crate::workflow::plugin_tool_name(&m.name, &o.name),
                                    "description": o.description,
                                    "input_schema": o.input_schema().unwrap_or(Value::Null),
                                })
                            })
                            .collect();
                    }
                    Err(e) => {
                        entry["state"] = json!("failed");
                        entry["error"] = json!(e.to_string());
                    }
                }
                entry
            }
            Found::Shadowed { manifest, by } => {
                let mut entry = manifest_json(manifest);
                entry["state"] = json!("shadowed");
                entry["shadowed_by"] = json!(by.display().to_string());
                entry
            }
            Found::Invalid { dir, error } => json!({
                "dir": dir.display().to_string(),
                "state": "invalid",
                "error": error.to_string(),
            }),
        });
    }
    Ok(json!({
        "search_path": discovery.search_path.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "plugins": plugins,
    }))
}

fn manifest_json(m: &super::Manifest) -> Value {
    json!({
        "name": m.name,
        "version": m.version,
        "description": m.description,
        "dir": m.dir.display().to_string(),
        "executable": m.executable.display().to_string(),
    })
}

/// Prints the report; exit status 0 even when some plugin is broken (the report says so).
pub fn run(root: &Path, as_json: bool) -> Result<u8, AwfError> {
    let report = report(root)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report).expect("JSON"));
        return Ok(0);
    }
    let search: Vec<&str> = report["search_path"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    println!("search path: {}", search.join(":"));
    let plugins = report["plugins"].as_array().cloned().unwrap_or_default();
    if plugins.is_empty() {
        println!("no plugins found");
    }
    for p in plugins {
        let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
        match s("state").as_str() {
            "invalid" => println!("(invalid) {}\n    {}", s("dir"), s("error")),
            state => {
                println!("{} {}  [{state}]  {}", s("name"), s("version"), s("dir"));
                println!("    {}", s("description"));
                if state == "failed" {
                    println!("    error: {}", s("error"));
                }
                if state == "shadowed" {
                    println!("    hidden by {}", s("shadowed_by"));
                }
                for op in p["operations"].as_array().into_iter().flatten() {
                    println!(
                        "    {}  {}",
                        op["tool"].as_str().unwrap_or(""),
                        op["description"].as_str().unwrap_or("")
                    );
                }
            }
        }
    }
    Ok(0)
}
