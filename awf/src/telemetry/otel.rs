//! OpenTelemetry spans for tool calls, following the MCP semantic conventions
//! (`tools/call <tool>`, kind SERVER, `mcp.method.name`, `gen_ai.tool.name`, ...).
//! Exported over OTLP/gRPC only when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `..._TRACES_ENDPOINT`) variable is set: only then is a Tokio runtime started (tonic
//! needs one), so the plain serve path stays runtime-free and cheap to start.

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// True when the environment asks for OTLP trace export.
pub fn export_requested() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "none");
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

pub struct OtelExporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// Drives tonic's connection; must outlive the provider's shutdown.
    runtime: std::sync::Mutex<Option<tokio::runtime::Runtime>>,
}

impl OtelExporter {
    /// Builds the OTLP/gRPC pipeline from the standard environment variables.
    pub fn from_env() -> Result<OtelExporter, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("awf-otlp")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the OTLP runtime: {e}"))?;
        let exporter = runtime
            .block_on(async {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .build()
            })
            .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("awf");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("awf");
        Ok(OtelExporter {
            provider,
            tracer,
            runtime: std::sync::Mutex::new(Some(runtime)),
        })
    }

    /// Starts the SERVER span of one `tools/call`.
    pub fn start_call_span(
        &self,
        tool: &str,
        parent: Option<&SpanContext>,
        link: Option<SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> CallSpan {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(p.clone()),
            None => Context::new(),
        };
        let links = link
            .map(|l| vec![opentelemetry::trace::Link::with_context(l)])
            .unwrap_or_default();
        CallSpan(
            self.tracer
                .span_builder(format!("tools/call {tool}"))
                .with_kind(SpanKind::Server)
                .with_attributes(attributes)
                .with_links(links)
                .start_with_context(&self.tracer, &cx),
        )
    }

    /// Starts a span, child of a remote `parent` when given (a step span, a call span).
    pub fn start_span(
        &self,
        name: String,
        kind: SpanKind,
        parent: Option<&SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> opentelemetry_sdk::trace::Span {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(p.clone()),
            None => Context::new(),
        };
        self.tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &cx)
    }

    /// Exports what is pending and stops; called once before the process exits (spans
    /// started later, on another thread holding this exporter, are not exported).
    pub fn shutdown(&self) {
        let Some(rt) = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!("OTLP flush failed: {e}");
        }
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("OTLP shutdown failed: {e}");
        }
        rt.shutdown_timeout(std::time::Duration::from_secs(1));
    }
}

pub struct CallSpan(opentelemetry_sdk::trace::Span);

impl CallSpan {
    /// An event that happened during the call (at `at`, maybe on another thread).
    pub fn event(
        &mut self,
        name: &'static str,
        at: std::time::SystemTime,
        attributes: Vec<KeyValue>,
    ) {
        self.0.add_event_with_timestamp(name, at, attributes);
    }

    /// Ends the span; `error` is the `error.type` value and a description when it failed.
    pub fn end(mut self, attributes: Vec<KeyValue>, error: Option<(&'static str, String)>) {
        self.0.set_attributes(attributes);
        if let Some((kind, description)) = error {
            self.0.set_attribute(KeyValue::new("error.type", kind));
            self.0.set_status(Status::error(description));
        }
        self.0.end();
    }
}

/// Parses a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`) into a remote parent.
pub fn parse_traceparent(text: &str) -> Option<SpanContext> {
    let parts: Vec<&str> = text.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    if version.len() != 2
        || *version == "ff"
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parsing() {
        let sc =
            parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_sampled() && sc.is_remote());
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
        assert!(
            parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01").is_none()
        );
    }
}
