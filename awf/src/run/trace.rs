//! The run's trace: one root span `awf.run <workflow>` and, under it, one span per state
//! that runs (`awf.step <state>`: agent with or without the proxy, step, terminal), exported
//! over OTLP when the standard `OTEL_EXPORTER_OTLP_*` variables ask for it. A run started
//! with `TRACEPARENT` nests under it. A step span's context is the step's TRACEPARENT, so
//! the tool spans of `awf mcp-serve` (and of the in-process tool server) nest under it.
//! Without export each step still gets a fresh traceparent (in the run's trace when
//! TRACEPARENT names one), so tool spans exported by a server set up on its own still
//! group by step.

use super::report::{StateResult, Status};
use crate::telemetry::otel::{OtelExporter, export_requested, parse_traceparent};
use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus};
use std::sync::Arc;

/// The run's root span and its exporter (the same OTLP pipeline as `awf mcp-serve`'s).
pub struct RunTrace {
    exporter: Option<Arc<OtelExporter>>,
    root: std::sync::Mutex<Option<opentelemetry_sdk::trace::Span>>,
    /// The root span's traceparent, else awf run's own TRACEPARENT.
    parent: Option<String>,
    run_id: String,
}

/// One state's span (or, without export, just the traceparent it hands on).
pub struct StepTrace {
    span: Option<opentelemetry_sdk::trace::Span>,
    pub traceparent: String,
}

fn traceparent_of(span: &opentelemetry_sdk::trace::Span) -> String {
    let sc = span.span_context();
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

impl RunTrace {
    /// Starts the root span; `inputs` are the names of the run's inputs (never values).
    pub fn start(workflow: &str, run_id: &str, inputs: &[&str]) -> RunTrace {
        let env_parent = std::env::var("TRACEPARENT").ok();
        let exporter = if export_requested() {
            match OtelExporter::from_env() {
                Ok(e) => Some(Arc::new(e)),
                Err(e) => {
                    tracing::warn!("OpenTelemetry export of the run's spans is off: {e}");
                    None
                }
            }
        } else {
            None
        };
        let root = exporter.as_ref().map(|e| {
            let parent = env_parent.as_deref().and_then(parse_traceparent);
            e.start_span(
                format!("awf.run {workflow}"),
                SpanKind::Internal,
                parent.as_ref(),
                vec![
                    KeyValue::new("awf.run_id", run_id.to_string()),
                    KeyValue::new("awf.workflow.name", workflow.to_string()),
                    KeyValue::new(
                        "awf.run.inputs",
                        opentelemetry::Value::Array(
                            inputs
                                .iter()
                                .map(|n| opentelemetry::StringValue::from(n.to_string()))
                                .collect::<Vec<_>>()
                                .into(),
                        ),
                    ),
                ],
            )
        });
        let parent = root.as_ref().map(traceparent_of).or(env_parent);
        RunTrace {
            exporter,
            root: std::sync::Mutex::new(root),
            parent,
            run_id: run_id.to_string(),
        }
    }

    /// The exporter, for the spans others start in this run (the relay's chat spans).
    pub fn exporter(&self) -> Option<Arc<OtelExporter>> {
        self.exporter.clone()
    }

    /// Starts the span of one state, child of the root.
    pub fn step(&self, state: &str, kind: &'static str, step_id: &str) -> StepTrace {
        self.step_under(self.parent.as_deref(), state, kind, step_id)
    }

    /// Starts the span of one state, child of `parent` (a parallel state's span for its
    /// branches).
    pub fn step_under(
        &self,
        parent: Option<&str>,
        state: &str,
        kind: &'static str,
        step_id: &str,
    ) -> StepTrace {
        let span = self.exporter.as_ref().map(|e| {
            let parent = parent.and_then(parse_traceparent);
            e.start_span(
                format!("awf.step {state}"),
                SpanKind::Internal,
                parent.as_ref(),
                vec![
                    KeyValue::new("awf.run_id", self.run_id.clone()),
                    KeyValue::new("awf.state", state.to_string()),
                    KeyValue::new("awf.step_id", step_id.to_string()),
                    KeyValue::new("awf.step.type", kind),
                ],
            )
        });
        let traceparent = match &span {
            Some(s) => traceparent_of(s),
            None => crate::tool_proxy::new_traceparent(parent),
        };
        StepTrace { span, traceparent }
    }

    /// Ends the root span with the run's exit code and status, and exports what is
    /// pending; called once at the end of the run.
    pub fn end(&self, exit_code: u8, error: Option<&str>) {
        let root = self.root.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut root) = root {
            root.set_attribute(KeyValue::new("awf.run.exit_code", i64::from(exit_code)));
            root.set_attribute(KeyValue::new(
                "awf.run.status",
                if exit_code == 0 { "success" } else { "failure" },
            ));
            if let Some(e) = error {
                root.set_status(SpanStatus::error(e.to_string()));
            }
            root.end();
        }
        if let Some(e) = &self.exporter {
            e.shutdown();
        }
    }
}

impl StepTrace {
    /// Marks the span as attempt `n` (from 1) of an agent state with `retry:`
    /// (`awf.attempt`).
    pub fn set_attempt(&mut self, n: u32) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new("awf.attempt", i64::from(n)));
        }
    }

    /// Ends the span with what the state's result says.
    pub fn end(self, r: &StateResult) {
        let Some(mut span) = self.span else { return };
        let tool_calls: u64 = r.tool_calls.values().sum();
        let mut attrs = vec![
            KeyValue::new("awf.step.status", r.status.as_str()),
            KeyValue::new("awf.step.duration_ms", r.duration_ms as i64),
            KeyValue::new("awf.step.tool_calls", tool_calls as i64),
        ];
        if let Some(c) = r.exit_code {
            attrs.push(KeyValue::new("awf.step.exit_code", i64::from(c)));
        }
        if let Some(head) = r.proxy.as_ref().and_then(|p| p.audit_head.clone()) {
            attrs.push(KeyValue::new("awf.audit.head", head));
        }
        if let Some(mac) = r.proxy.as_ref().and_then(|p| p.audit_head_mac.clone()) {
            attrs.push(KeyValue::new("awf.audit.head.mac", mac));
        }
        if let Some(p) = &r.provider {
            attrs.push(KeyValue::new("gen_ai.operation.name", "invoke_agent"));
            attrs.push(KeyValue::new("gen_ai.provider.name", p.clone()));
        }
        span.set_attributes(attrs);
        if r.status != Status::Success {
            let why = r
                .error
                .as_ref()
                .map_or_else(|| r.status.as_str().to_string(), |e| e.message.clone());
            span.set_attribute(KeyValue::new(
                "error.type",
                r.error.as_ref().map_or(r.status.as_str(), |e| e.code),
            ));
            span.set_status(SpanStatus::error(why));
        }
        span.end();
    }
}
