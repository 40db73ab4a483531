//! Pictures of workflows and of runs. `awf diagram` draws a workflow's states and where
//! each goes (Graphviz dot, Mermaid, or SVG laid out here by `layout-rs`, a Graphviz-dot
//! layout engine in Rust with no dependencies: no `dot` program needed); `awf report`
//! ([`html`]) writes one HTML file of a run, this graph included.

pub mod html;

use crate::error::{AwfError, codes};
use crate::workflow::{StateKind, Workflow};
use std::path::Path;

/// One arrow of the graph: `from` goes to `to` when `label` (`success`, `failure`, a
/// transition's condition), or runs it (`branch`, `body`, `item`: `inner`).
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub label: String,
    pub inner: bool,
}

/// Every arrow of `wf`, in the order of its states.
pub fn edges(wf: &Workflow) -> Vec<Edge> {
    let mut out = Vec::new();
    let mut add = |from: &str, to: &Option<String>, label: &str, inner: bool| {
        if let Some(to) = to {
            out.push(Edge {
                from: from.to_string(),
                to: to.clone(),
                label: label.to_string(),
                inner,
            });
        }
    };
    for s in &wf.states {
        for t in &s.transitions {
            let label = t.when.clone().unwrap_or_else(|| "always".into());
            add(&s.name, &Some(t.goto.clone()), &label, false);
        }
        match &s.kind {
            StateKind::Terminal(_) => {}
            StateKind::Agent(a) => {
                add(&s.name, &a.on_success, "success", false);
                add(&s.name, &a.on_failure, "failure", false);
            }
            StateKind::Step(st) => {
                add(&s.name, &st.on_success, "success", false);
                add(&s.name, &st.on_failure, "failure", false);
            }
            StateKind::Parallel(p) => {
                for b in &p.branches {
                    add(&s.name, &Some(b.clone()), "branch", true);
                }
                add(&s.name, &p.on_success, "success", false);
                add(&s.name, &p.on_failure, "failure", false);
            }
            StateKind::ForEach(f) => {
                for b in &f.body {
                    add(&s.name, &Some(b.clone()), "each item", true);
                }
                add(&s.name, &f.on_complete, "complete", false);
                add(&s.name, &f.on_failure, "failure", false);
            }
            StateKind::While(w) => {
                for b in &w.body {
                    add(&s.name, &Some(b.clone()), "body", true);
                }
                add(&s.name, &w.on_complete, "complete", false);
                add(&s.name, &w.on_failure, "failure", false);
            }
            StateKind::CallWorkflow(c) => {
                add(&s.name, &c.on_success, "success", false);
                add(&s.name, &c.on_failure, "failure", false);
            }
            StateKind::Operation(o) => {
                add(&s.name, &o.on_success, "success", false);
                add(&s.name, &o.on_failure, "failure", false);
            }
        }
    }
    out
}

fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The graph in Graphviz dot: a box per state (terminal states double-lined), its type
/// under its name; the states in `taken` (those a run went through) filled.
pub fn dot(wf: &Workflow, taken: &[String]) -> String {
    let mut out = format!("digraph {} {{\n  rankdir=TB;\n", quoted(&wf.name));
    for s in &wf.states {
        let shape = match s.kind {
            StateKind::Terminal(_) => "doubleoctagon",
            StateKind::Parallel(_) | StateKind::ForEach(_) | StateKind::While(_) => "box3d",
            _ => "box",
        };
        let fill = if taken.contains(&s.name) {
            ", style=filled, fillcolor=\"#cfe8ff\""
        } else {
            ""
        };
        out.push_str(&format!(
            "  {} [shape={shape}, label={}{fill}];\n",
            quoted(&s.name),
            quoted(&format!("{} ({})", s.name, s.kind.type_name()))
        ));
    }
    for e in edges(wf) {
        let style = if e.inner { ", style=dashed" } else { "" };
        out.push_str(&format!(
            "  {} -> {} [label={}{style}];\n",
            quoted(&e.from),
            quoted(&e.to),
            quoted(&e.label)
        ));
    }
    out.push_str("}\n");
    out
}

/// The graph as a Mermaid flowchart (Markdown renderers draw it).
pub fn mermaid(wf: &Workflow) -> String {
    // Mermaid ids: the state's index; its name in the label.
    let id = |name: &str| {
        wf.states
            .iter()
            .position(|s| s.name == name)
            .map_or_else(|| "missing".to_string(), |i| format!("s{i}"))
    };
    let label = |t: &str| t.replace('"', "#quot;");
    let mut out = String::from("flowchart TD\n");
    for (i, s) in wf.states.iter().enumerate() {
        let text = label(&format!("{} ({})", s.name, s.kind.type_name()));
        out.push_str(&match s.kind {
            StateKind::Terminal(_) => format!("  s{i}([\"{text}\"])\n"),
            _ => format!("  s{i}[\"{text}\"]\n"),
        });
    }
    for e in edges(wf) {
        let arrow = if e.inner { "-.->" } else { "-->" };
        out.push_str(&format!(
            "  {} {arrow}|\"{}\"| {}\n",
            id(&e.from),
            label(&e.label),
            id(&e.to)
        ));
    }
    out
}

/// The graph as SVG, laid out by `layout-rs` from [`dot`].
pub fn svg(wf: &Workflow, taken: &[String]) -> Result<String, String> {
    use layout::backends::svg::SVGWriter;
    use layout::gv::{DotParser, GraphBuilder};
    let text = dot(wf, taken);
    let mut parser = DotParser::new(&text);
    let graph = parser
        .process()
        .map_err(|e| format!("cannot lay out the graph: {e}"))?;
    let mut builder = GraphBuilder::new();
    builder.visit_graph(&graph);
    let mut visual = builder.get();
    let mut writer = SVGWriter::new();
    visual.do_it(false, false, false, &mut writer);
    Ok(writer.finalize())
}

/// `awf diagram FILE --format dot|mermaid|svg`: the graph on stdout.
pub fn diagram_command(file: &Path, format: &str) -> Result<u8, AwfError> {
    let root = std::env::current_dir()
        .map_err(|e| AwfError::new(codes::IO, format!("cannot read the current directory: {e}")))?;
    let (wf, diags) =
        crate::workflow::load(file, &mut crate::plugins::InstalledPlugins::new(&root));
    let Some(wf) = wf else {
        crate::validate::print_diagnostics(file, &diags);
        return Ok(crate::workflow::exit_code(&diags));
    };
    let text = match format {
        "mermaid" => mermaid(&wf),
        "svg" => svg(&wf, &[]).map_err(|e| AwfError::new(codes::IO, e))?,
        _ => dot(&wf, &[]),
    };
    print!("{text}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(text: &str) -> Workflow {
        let (wf, diags) = crate::workflow::parse::parse(text, Path::new("wf.yaml"));
        assert!(!crate::workflow::has_errors(&diags), "{diags:?}");
        wf.unwrap()
    }

    const FLOW: &str = "name: f\nstates:\n  initial: each\n  each:\n    type: for_each\n    \
        items: [a, b]\n    body: [work]\n    on_complete: review\n  work:\n    type: step\n    \
        command: echo hi\n  review:\n    type: parallel\n    parallel: [x, y]\n    \
        on_success: done\n    on_failure: failed\n  x:\n    type: step\n    command: 'true'\n  \
        y:\n    type: step\n    command: 'true'\n  done:\n    type: terminal\n  failed:\n    \
        type: terminal\n    status: failure\n";

    #[test]
    fn every_state_and_where_it_goes_is_drawn() {
        let w = wf(FLOW);
        let e = edges(&w);
        let has = |f: &str, t: &str, l: &str, inner: bool| {
            e.iter()
                .any(|x| x.from == f && x.to == t && x.label == l && x.inner == inner)
        };
        assert!(has("each", "work", "each item", true));
        assert!(has("each", "review", "complete", false));
        assert!(has("review", "x", "branch", true) && has("review", "y", "branch", true));
        assert!(has("review", "failed", "failure", false));
        let d = dot(&w, &["each".into()]);
        assert!(d.contains("\"each\" [shape=box3d, label=\"each (for_each)\", style=filled"));
        assert!(d.contains("\"done\" [shape=doubleoctagon"));
        assert!(d.contains("\"review\" -> \"x\" [label=\"branch\", style=dashed];"));
        let m = mermaid(&w);
        assert!(m.starts_with("flowchart TD\n"));
        assert!(m.contains("s0 -.->|\"each item\"| s1"), "{m}");
        let s = svg(&w, &[]).unwrap();
        assert!(s.contains("<svg") && s.contains("review (parallel)"), "{s}");
    }
}
