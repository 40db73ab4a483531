//! A real OTLP/gRPC trace receiver for tests: a tonic server implementing the OTLP
//! TraceService from `opentelemetry-proto` on 127.0.0.1, keeping every span it is sent.
#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running receiver; it stops when dropped.
pub struct Receiver {
    _runtime: tokio::runtime::Runtime,
    collector: Collector,
    /// `http://127.0.0.1:PORT`, for OTEL_EXPORTER_OTLP_ENDPOINT.
    pub endpoint: String,
}

impl Receiver {
    pub fn start() -> Receiver {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let collector = Collector::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(collector.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Receiver {
            _runtime: runtime,
            collector,
            endpoint,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.collector.0.lock().unwrap().clone()
    }
}

/// A span attribute as text.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        })
}

/// Trace and span ids as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
