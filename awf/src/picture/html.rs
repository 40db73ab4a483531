//! `awf report RUN_ID [-o FILE]`: one self-contained HTML file of a run, from its run state
//! and its audit files — no script, no server, no request (its Content-Security-Policy
//! allows none): it opens from disk and can be attached to a ticket.
//!
//! What it shows: the run's status and times; the workflow's graph with the states the run
//! went through filled ([`super::svg`]); a timeline of the states, a lane per for_each item
//! and parallel branch, retries and resumes marked; then per agent state its model turns
//! (tokens, duration) and tool calls (arguments as the audit masked them, duration,
//! outcome, error), denials (`net.connect` denied, withheld and rejected tools) in red.

use crate::error::{AwfError, codes};
use crate::run::state::{RunState, StateRecord};
use serde_json::Value;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// HTML text: `&`, `<`, `>`, `"` and `'` escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `n` characters of `text`, `…` when cut.
fn cut(text: &str, n: usize) -> String {
    let mut s: String = text.chars().take(n).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The records of each audit file of the run, by step id (`3-fix`).
fn audits(dir: &Path) -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(step) = name.strip_suffix(".audit.jsonl") else {
            continue;
        };
        let records = std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        out.push((step.to_string(), records));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The lane a state's record is drawn in: the run's own, or its for_each item's or
/// parallel branch's.
fn lane(r: &StateRecord) -> String {
    match (&r.parent, r.iteration) {
        (Some(p), Some(i)) => format!("{p} · item {i}"),
        (Some(p), None) => format!("{p} · {}", r.state),
        (None, Some(i)) => format!("item {i}"),
        (None, None) => "run".to_string(),
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:24px;color:#222}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
.meta span{margin-right:18px}.ok{color:#176b2c}.bad{color:#b3261e}\
.graph svg{max-width:100%;height:auto;border:1px solid #ddd}\
.lane{display:flex;align-items:center;margin:2px 0}.lane .name{width:180px;font-size:12px;\
color:#555;overflow:hidden;white-space:nowrap;text-overflow:ellipsis}\
.track{position:relative;flex:1;height:18px;background:#f4f4f4}\
.bar{position:absolute;top:2px;height:14px;border-radius:3px;font-size:10px;color:#fff;\
overflow:hidden;white-space:nowrap;padding-left:3px;box-sizing:border-box}\
.bar.success{background:#2e7d32}.bar.failure,.bar.timeout{background:#c62828}\
.bar.interrupted,.bar.cancelled{background:#8d6e63}.bar.running{background:#1565c0}\
.bar.retry{outline:2px dashed #f9a825}\
table{border-collapse:collapse;margin:6px 0;font-size:12px}\
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}\
tr.denied td{background:#fdecea;color:#b3261e}code{font-size:11px;white-space:pre-wrap}";

/// The HTML of `state`, its audit records and the graph `svg` (None: the workflow file is
/// gone or changed).
pub fn render(state: &RunState, audits: &[(String, Vec<Value>)], svg: Option<&str>) -> String {
    let mut h = String::new();
    let start = state.started_ms;
    let end = state.ended_ms.unwrap_or(state.updated_ms).max(start + 1);
    let total = (end - start) as f64;
    head(&mut h, state, total);
    if let Some(svg) = svg {
        // The SVG is ours (layout-rs from the state names, escaped by it); its XML prolog
        // is not HTML.
        let body = svg.find("<svg").map_or(svg, |i| &svg[i..]);
        let _ = write!(h, "<h2>Graph</h2><div class=\"graph\">{body}</div>");
    }
    timeline(&mut h, state, start, total);
    // States: outputs, errors, and for agents their model turns and tool calls.
    h.push_str("<h2>States</h2>");
    for r in &state.states {
        state_section(&mut h, r, audits);
    }
    h.push_str("</body></html>\n");
    h
}

/// Writes the page's head, then the run's status, duration, states, resumes and directory.
fn head(h: &mut String, state: &RunState, total: f64) {
    let status = state.shown_status();
    let ok = status == "succeeded";
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\
         <title>awf run {id} — {wf}</title><style>{STYLE}</style></head><body>\
         <h1>{wf} <small>run {id}</small></h1><div class=\"meta\">\
         <span class=\"{cls}\">{status}</span><span>{secs:.1} s</span>\
         <span>{n} states</span><span>resumed {resumes}×</span><span>{dir}</span></div>",
        id = esc(&state.run_id),
        wf = esc(&state.workflow),
        cls = if ok { "ok" } else { "bad" },
        status = esc(status),
        secs = total / 1000.0,
        n = state.states.len(),
        resumes = state.resumes,
        dir = esc(&state.workdir.display().to_string()),
    );
    if let Some(e) = &state.error {
        let _ = write!(h, "<p class=\"bad\">{}</p>", esc(e));
    }
}

/// Writes the timeline: a lane per for_each item and parallel branch, the run's own first.
fn timeline(h: &mut String, state: &RunState, start: u64, total: f64) {
    h.push_str("<h2>Timeline</h2><div class=\"timeline\">");
    let mut lanes: Vec<(String, Vec<&StateRecord>)> = Vec::new();
    for r in &state.states {
        let l = lane(r);
        match lanes.iter_mut().find(|(n, _)| *n == l) {
            Some((_, v)) => v.push(r),
            None => lanes.push((l, vec![r])),
        }
    }
    // The run's own lane first, then the others in the order they started.
    lanes.sort_by_key(|(n, _)| n != "run");
    for (name, records) in &lanes {
        let _ = write!(
            h,
            "<div class=\"lane\"><div class=\"name\" title=\"{n}\">{n}</div><div class=\"track\">",
            n = esc(name)
        );
        for r in records {
            let left = (r.started_ms.saturating_sub(start)) as f64 / total * 100.0;
            let width = (r.duration_ms as f64 / total * 100.0).max(0.4);
            let outcome = r.outcome.as_deref().unwrap_or("running");
            let retry = if r.attempt > 1 { " retry" } else { "" };
            let _ = write!(
                h,
                "<div class=\"bar {outcome}{retry}\" data-state=\"{s}\" style=\"left:{left:.3}%;\
                 width:{width:.3}%\" title=\"{s} ({kind}) {outcome} in {ms} ms, attempt {a}, \
                 step {step}\">{s}</div>",
                s = esc(&r.state),
                kind = esc(&r.kind),
                ms = r.duration_ms,
                a = r.attempt,
                step = r.step,
            );
        }
        h.push_str("</div></div>");
    }
    h.push_str("</div>");
}

/// Writes one state: its heading, error and output, then its model turns and tool calls.
fn state_section(h: &mut String, r: &StateRecord, audits: &[(String, Vec<Value>)]) {
    let step_id = format!("{}-{}", r.step, r.state);
    let _ = write!(
        h,
        "<h3 id=\"{id}\">{s} <small>{kind} · {outcome} · {ms} ms{item}</small></h3>",
        id = esc(&step_id),
        s = esc(&r.state),
        kind = esc(&r.kind),
        outcome = esc(r.outcome.as_deref().unwrap_or("running")),
        ms = r.duration_ms,
        item = r
            .iteration
            .map(|i| format!(" · item {i}"))
            .unwrap_or_default(),
    );
    if let Some(e) = &r.error {
        let _ = write!(
            h,
            "<p class=\"bad\"><code>{}</code></p>",
            esc(&cut(e, 2000))
        );
    }
    if !r.output.is_empty() {
        let _ = write!(h, "<p><code>{}</code></p>", esc(&cut(&r.output, 2000)));
    }
    let Some((_, records)) = audits.iter().find(|(id, _)| *id == step_id) else {
        return;
    };
    model_turns(h, records);
    h.push_str(
        "<table class=\"calls\"><tr><th>tool call</th><th>arguments</th><th>ms</th>\
         <th>outcome</th><th>error / bytes</th></tr>",
    );
    for x in records {
        call_row(h, x, records);
    }
    h.push_str("</table>");
}

/// Writes the table of a step's model turns (tokens in and out, duration), when it has any.
fn model_turns(h: &mut String, records: &[Value]) {
    let turns: Vec<&Value> = records
        .iter()
        .filter(|x| x["type"] == "model.response")
        .collect();
    if !turns.is_empty() {
        h.push_str(
            "<table class=\"turns\"><tr><th>model turn</th><th>model</th><th>in</th>\
             <th>out</th><th>ms</th></tr>",
        );
        for (i, t) in turns.iter().enumerate() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                i + 1,
                esc(t["model"].as_str().unwrap_or("")),
                t["input_tokens"].as_u64().unwrap_or(0),
                t["output_tokens"].as_u64().unwrap_or(0),
                t["duration_ms"].as_f64().unwrap_or(0.0).round()
            );
        }
        h.push_str("</table>");
    }
}

/// Writes the calls table's row of audit record `x`: a tool call or a denial (else nothing).
fn call_row(h: &mut String, x: &Value, records: &[Value]) {
    match x["type"].as_str() {
        Some("tool.call") => {
            let id = &x["call_id"];
            let result = records
                .iter()
                .find(|y| y["type"] == "tool.result" && y["call_id"] == *id);
            let outcome = result
                .and_then(|y| y["outcome"].as_str())
                .unwrap_or("no result");
            let class = if outcome == "ok" {
                ""
            } else {
                " class=\"denied\""
            };
            let detail = result.map_or(String::new(), |y| match y["error"].as_str() {
                Some(e) => cut(e, 400),
                None => format!("{} bytes", y["output_bytes"].as_u64().unwrap_or(0)),
            });
            let _ = write!(
                h,
                "<tr{class} data-tool=\"{t}\"><td>{t}</td><td><code>{a}</code></td>\
                 <td>{ms}</td><td>{o}</td><td><code>{d}</code></td></tr>",
                t = esc(x["tool"].as_str().unwrap_or("")),
                a = esc(&cut(&x["arguments"].to_string(), 400)),
                ms = result
                    .and_then(|y| y["duration_ms"].as_f64())
                    .unwrap_or(0.0)
                    .round(),
                o = esc(outcome),
                d = esc(&detail),
            );
        }
        Some("net.connect") if x["decision"] == "denied" => {
            let _ = write!(
                h,
                "<tr class=\"denied\"><td>net.connect</td><td><code>{}:{}</code></td>\
                 <td></td><td>denied</td><td><code>{}</code></td></tr>",
                esc(x["host"].as_str().unwrap_or("")),
                x["port"].as_u64().unwrap_or(0),
                esc(x["reason"].as_str().unwrap_or(""))
            );
        }
        Some(kind @ ("tool.withheld" | "tool.rejected")) => {
            let _ = write!(
                h,
                "<tr class=\"denied\"><td>{}</td><td><code>{}</code></td><td></td>\
                 <td>{}</td><td><code>{}</code></td></tr>",
                esc(x["tool"].as_str().unwrap_or("")),
                esc(kind),
                esc(kind.trim_start_matches("tool.")),
                esc(&cut(
                    x["reason"].as_str().or(x["why"].as_str()).unwrap_or(""),
                    400
                ))
            );
        }
        _ => {}
    }
}

/// `awf report RUN_ID [--audit-dir DIR] [-o FILE]`: writes the report (default
/// `awf-run-RUN_ID.html` in the current directory) and says where.
pub fn report_command(
    run_id: &str,
    audit_dir: Option<PathBuf>,
    out: Option<PathBuf>,
) -> Result<u8, AwfError> {
    let state = crate::run::state::load(run_id)?;
    let dir = audit_dir.unwrap_or_else(|| {
        crate::private_files::state_dir()
            .join("audit")
            .join(&state.run_id)
    });
    let records = audits(&dir);
    // The graph, where the workflow file is still there as the run had it.
    let taken: Vec<String> = state.states.iter().map(|r| r.state.clone()).collect();
    let svg = std::fs::read(&state.workflow_path)
        .ok()
        .filter(|text| crate::run::state::workflow_hash(text) == state.workflow_sha256)
        .and_then(|_| {
            let root = state.workdir.clone();
            let (wf, _) = crate::workflow::load(
                &state.workflow_path,
                &mut crate::plugins::InstalledPlugins::new(&root),
            );
            super::svg(&wf?, &taken).ok()
        });
    let html = render(&state, &records, svg.as_deref());
    let out = out.unwrap_or_else(|| PathBuf::from(format!("awf-run-{}.html", state.run_id)));
    std::fs::write(&out, html).map_err(|e| {
        AwfError::new(
            codes::IO,
            format!("cannot write the report {}: {e}", out.display()),
        )
    })?;
    println!("wrote {}", out.display());
    Ok(0)
}
