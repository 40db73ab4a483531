//! `awf gather RUN_ID...`: the shards of one run (each an `awf run --shard INDEX/COUNT`
//! process, on a Kubernetes Indexed Job's pods or a CI matrix's jobs) merged from their run
//! states into one summary and, for every `for_each`, its items' outputs in item order.
//! Shards of different workflows, a shard missing or given twice, and a shard that has not
//! ended are refused with what to do.

use super::state::{self, RunState, RunStatus};
use crate::error::{AwfError, codes};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

fn refuse(why: String) -> AwfError {
    AwfError::new(codes::INPUT_INVALID, why)
}

/// Checks that `shards` are every shard of one workflow's run, once each, all ended; they
/// come back in shard order.
fn check(mut shards: Vec<RunState>) -> Result<Vec<RunState>, AwfError> {
    for s in &shards {
        if s.shard.is_none() {
            return Err(refuse(format!(
                "run {} was not run with --shard: gather takes the run ids of `awf run --shard I/N`",
                s.run_id
            )));
        }
    }
    let first = &shards[0];
    let count = first.shard.expect("checked").count;
    for s in &shards[1..] {
        if s.workflow_sha256 != first.workflow_sha256 {
            return Err(refuse(format!(
                "runs {} ({}, {}) and {} ({}, {}) ran different workflows: the shards of one \
                 run run one workflow text",
                first.run_id,
                first.workflow_path.display(),
                &first.workflow_sha256[..19.min(first.workflow_sha256.len())],
                s.run_id,
                s.workflow_path.display(),
                &s.workflow_sha256[..19.min(s.workflow_sha256.len())],
            )));
        }
        let n = s.shard.expect("checked").count;
        if n != count {
            return Err(refuse(format!(
                "run {} is a shard of {n}, run {} of {count}: gather the shards of one split",
                s.run_id, first.run_id
            )));
        }
    }
    let mut by_index: Vec<Option<&RunState>> = vec![None; count];
    for s in &shards {
        let i = s.shard.expect("checked").index;
        if let Some(other) = by_index[i] {
            return Err(refuse(format!(
                "shard {i}/{count} is given twice (runs {} and {}): pass one run id per shard",
                other.run_id, s.run_id
            )));
        }
        by_index[i] = Some(s);
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| by_index[*i].is_none())
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(format!(
            "shard {} missing: pass the run id of every shard (`awf history --workflow {}` lists \
             the runs)",
            missing.join(", "),
            first.workflow
        )));
    }
    for s in &shards {
        match s.shown_status() {
            "running" => {
                return Err(refuse(format!(
                    "shard run {} is still running (pid {} on {}): gather once it has ended",
                    s.run_id, s.lease.pid, s.lease.host
                )));
            }
            "died" => {
                return Err(refuse(format!(
                    "shard run {} died before it ended: finish it with `awf resume {}`, then gather",
                    s.run_id, s.run_id
                )));
            }
            _ => {}
        }
    }
    shards.sort_by_key(|s| s.shard.expect("checked").index);
    Ok(shards)
}

/// Each for_each's iteration outputs by item position (the output of an iteration's last
/// body state, its latest run).
fn outputs(shards: &[RunState]) -> BTreeMap<String, BTreeMap<usize, String>> {
    let mut out: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for s in shards {
        let for_each: Vec<&str> = s
            .states
            .iter()
            .filter(|r| r.kind == "for_each" && r.parent.is_none())
            .map(|r| r.state.as_str())
            .collect();
        for r in &s.states {
            let (Some(parent), Some(i)) = (&r.parent, r.iteration) else {
                continue;
            };
            if for_each.contains(&parent.as_str()) && r.outcome.as_deref() == Some("success") {
                out.entry(parent.clone())
                    .or_default()
                    .insert(i, r.output.clone());
            }
        }
    }
    out
}

pub fn gather(run_ids: &[String], as_json: bool) -> Result<u8, AwfError> {
    let shards = run_ids
        .iter()
        .map(|id| state::load(id))
        .collect::<Result<Vec<_>, _>>()?;
    let shards = check(shards)?;
    let succeeded = shards.iter().all(|s| s.status == RunStatus::Succeeded);
    let code = shards
        .iter()
        .map(|s| s.exit_code.unwrap_or(3))
        .max()
        .unwrap_or(0);
    let outputs = outputs(&shards);
    // In item order; an item no shard finished is null.
    let listed: Map<String, Value> = outputs
        .iter()
        .map(|(name, items)| {
            let len = items.keys().max().map_or(0, |m| m + 1);
            let list = (0..len)
                .map(|i| items.get(&i).map_or(Value::Null, |o| json!(o)))
                .collect();
            (name.clone(), Value::Array(list))
        })
        .collect();
    let first = &shards[0];
    let summary = json!({
        "workflow": first.workflow,
        "workflow_path": first.workflow_path,
        "status": if succeeded { "succeeded" } else { "failed" },
        "exit_code": code,
        "tokens": shards.iter().map(RunState::tokens).sum::<u64>(),
        "shards": shards.iter().map(|s| json!({
            "shard": s.shard,
            "run_id": s.run_id,
            "status": s.shown_status(),
            "exit_code": s.exit_code,
            "duration_ms": s.duration_ms(),
            "tokens": s.tokens(),
        })).collect::<Vec<_>>(),
        "outputs": listed,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("JSON"));
    } else {
        println!(
            "{} shards of {} ({}): {}",
            shards.len(),
            first.workflow,
            first.workflow_path.display(),
            summary["status"].as_str().unwrap_or("")
        );
        for s in &shards {
            let shard = s.shard.expect("checked");
            println!(
                "  shard {}/{}  {}  {:<9} {:.1}s",
                shard.index,
                shard.count,
                s.run_id,
                s.shown_status(),
                s.duration_ms() as f64 / 1000.0
            );
        }
        for (name, list) in &listed {
            println!(
                "{name} ({} items): {}",
                list.as_array().map_or(0, Vec::len),
                serde_json::to_string(list).expect("JSON")
            );
        }
    }
    Ok(code)
}
