//! The step span: one INTERNAL span per agent step (`awf.step <state>`), exported over OTLP
//! when the standard `OTEL_EXPORTER_OTLP_*` variables ask for it. Its context is the
//! step's TRACEPARENT, so the tool spans of `awf mcp-serve` (and of the in-process tool server)
//! nest under it. Without export, the step still gets a fresh traceparent, so tool spans
//! exported by a server configured on its own still group by step.

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Status};

use crate::telemetry::otel::{OtelExporter, export_requested, parse_traceparent};

/// The run's span exporter (built once, on the first proxied step, when export is asked):
/// the same OTLP pipeline as `awf mcp-serve`'s tool spans.
pub struct StepTracer(OtelExporter);

impl StepTracer {
    /// None when export is not requested or cannot be set up (a warning says why).
    pub fn from_env() -> Option<StepTracer> {
        if !export_requested() {
            return None;
        }
        match OtelExporter::from_env() {
            Ok(exporter) => Some(StepTracer(exporter)),
            Err(e) => {
                tracing::warn!("OpenTelemetry export of step spans is off: {e}");
                None
            }
        }
    }

    /// Starts a step span, child of `parent` (awf run's own TRACEPARENT) when given.
    pub fn start(&self, state: &str, parent: Option<&str>, attributes: Vec<KeyValue>) -> StepSpan {
        let parent = parent.and_then(parse_traceparent);
        StepSpan(self.0.start_span(
            format!("awf.step {state}"),
            SpanKind::Internal,
            parent.as_ref(),
            attributes,
        ))
    }

    /// Exports what is pending; called once at the end of the run.
    pub fn shutdown(&mut self) {
        self.0.shutdown();
    }
}

pub struct StepSpan(opentelemetry_sdk::trace::Span);

impl StepSpan {
    /// The W3C traceparent of this span, for `awf mcp-serve`.
    pub fn traceparent(&self) -> String {
        let sc = self.0.span_context();
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    }

    pub fn end(mut self, status: &str, tool_calls: u64, error: Option<&str>) {
        self.0
            .set_attribute(KeyValue::new("awf.step.status", status.to_string()));
        self.0
            .set_attribute(KeyValue::new("awf.step.tool_calls", tool_calls as i64));
        if let Some(e) = error {
            self.0.set_status(Status::error(e.to_string()));
        }
        self.0.end();
    }
}
