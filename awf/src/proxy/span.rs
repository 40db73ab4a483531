//! The step span: one INTERNAL span per agent step (`awf.step <state>`), exported over OTLP
//! when the standard `OTEL_EXPORTER_OTLP_*` variables ask for it. Its context is the
//! step's TRACEPARENT, so the tool spans of `awf mcp-serve` (and of the in-process router)
//! nest under it. Without export, the step still gets a fresh traceparent, so tool spans
//! exported by a server configured on its own still group by step.

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// The run's span exporter (built once, on the first proxied step, when export is asked).
pub struct StepTracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    runtime: Option<tokio::runtime::Runtime>,
}

impl StepTracer {
    /// None when export is not requested or cannot be set up (a warning says why).
    pub fn from_env() -> Option<StepTracer> {
        if !crate::telemetry::otel::export_requested() {
            return None;
        }
        let build = || -> Result<StepTracer, String> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("awf-run-otlp")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let exporter = runtime
                .block_on(async {
                    opentelemetry_otlp::SpanExporter::builder()
                        .with_tonic()
                        .build()
                })
                .map_err(|e| e.to_string())?;
            let mut resource = opentelemetry_sdk::Resource::builder();
            if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
                resource = resource.with_service_name("awf");
            }
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build();
            let tracer = provider.tracer("awf.run");
            Ok(StepTracer {
                provider,
                tracer,
                runtime: Some(runtime),
            })
        };
        match build() {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("OpenTelemetry export of step spans is off: {e}");
                None
            }
        }
    }

    /// Starts a step span, child of `parent` (awf run's own TRACEPARENT) when given.
    pub fn start(&self, state: &str, parent: Option<&str>, attributes: Vec<KeyValue>) -> StepSpan {
        let cx = match parent.and_then(crate::telemetry::otel::parse_traceparent) {
            Some(p) => Context::new().with_remote_span_context(p),
            None => Context::new(),
        };
        let span = self
            .tracer
            .span_builder(format!("awf.step {state}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &cx);
        StepSpan(span)
    }

    /// Exports what is pending; called once at the end of the run.
    pub fn shutdown(&mut self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
        }
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
