//! W3C trace context (`traceparent`, `tracestate`) in and out of the
//! carriers cohort uses: gRPC metadata (worker to judge proxy), a string
//! field of a protobuf message (the lease, coordinator to worker, and the
//! report, worker to coordinator: per run, where one call carries many),
//! and HTTP headers (to providers and systems under test, and into the
//! judge proxy's HTTP face). Without trace export nothing is written (the
//! global propagator is the no-op one, a span has no context). The string
//! field is written and read by the one rule `DirectSpan` uses
//! (`direct::format_traceparent`, `direct::parse_traceparent`).

use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `traceparent` of `span`, or an empty string when traces are off
/// (written as [`crate::DirectSpan::traceparent`] writes it).
pub fn traceparent(span: &tracing::Span) -> String {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = span.context();
    let current = cx.span();
    let context = current.span_context();
    if context.is_valid() { crate::direct::format_traceparent(context) } else { String::new() }
}

/// Makes `span` a child of the context a `traceparent` names (a string
/// carried in a message, read as [`crate::DirectSpan::under_traceparent`]
/// reads it); an empty or malformed one leaves it as it is.
pub fn set_parent_from_traceparent(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::trace::TraceContextExt as _;
    if let Some(parent) = crate::direct::parse_traceparent(traceparent) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
}

/// Writes `span`'s context into gRPC request metadata.
pub fn inject_metadata(span: &tracing::Span, metadata: &mut tonic::metadata::MetadataMap) {
    inject(span, &mut MetadataInjector(metadata));
}

/// Makes `span` a child of the context in gRPC request metadata.
pub fn set_parent_from_metadata(span: &tracing::Span, metadata: &tonic::metadata::MetadataMap) {
    set_parent(span, &MetadataExtractor(metadata));
}

/// Writes `span`'s context into HTTP request headers.
pub fn inject_headers(span: &tracing::Span, headers: &mut http::HeaderMap) {
    inject(span, &mut HeaderInjector(headers));
}

/// Makes `span` a child of the context in HTTP request headers.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    set_parent(span, &HeaderExtractor(headers));
}

fn inject(span: &tracing::Span, injector: &mut dyn Injector) {
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, injector));
}

fn set_parent(span: &tracing::Span, extractor: &dyn Extractor) {
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(extractor));
    if opentelemetry::trace::TraceContextExt::span(&cx).span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

// === impl carriers ===

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) =
            (tonic::metadata::MetadataKey::from_bytes(key.as_bytes()), tonic::metadata::MetadataValue::try_from(value))
        {
            self.0.insert(k, v);
        }
    }
}

struct MetadataExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value)) {
            self.0.insert(k, v);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
