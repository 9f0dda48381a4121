//! Spans recorded straight into the export queue, without `tracing`: the
//! coordinator's spans of every run (`cohort run`, `lease run`, `record
//! result`, `record attempt`), made at its full rate, thousands a second.
//!
//! A `tracing` span exported through `tracing-opentelemetry` costs the
//! registry's slot, a visitor formatting every field into a new string, the
//! layer's lock, a span builder and the SDK's tracer on top of the export
//! itself; with three such spans a lifecycle the coordinator spent 2.3x the
//! CPU of an untraced one (issue 24; `cargo bench -p cohort-cli --bench
//! lifecycle`, `COHORT_BENCH_CONFIGS=tracing`). A [`DirectSpan`] is the
//! span's exported form itself (the SDK's `SpanData`), filled in place and
//! handed to the same batch processor the SDK's spans go to when it is
//! dropped: the same exporter, queue, resource and scope (`cohort`), so
//! a collector sees no difference.
//!
//! Sampling is the parent's: a child of a run's root is kept when the root
//! is ([`crate::RunRoot`] carries the sampler's decision for the run's
//! trace), a child of a `traceparent` when its sampled flag is set, and a
//! span without a parent as the sampler decides its new trace id (the
//! SDK's `parentbased_*` samplers, its default, decide the same; so do
//! `always_on`, `always_off` and `traceidratio`, which decide by the trace
//! id alone and so keep or drop a trace whole). Without export every call
//! does nothing and nothing is allocated.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use opentelemetry::trace::{Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{BatchSpanProcessor, IdGenerator as _, RandomIdGenerator, SpanData, SpanLinks};
use opentelemetry_sdk::trace::{SpanEvents, SpanProcessor};

use crate::{LinkTarget, RunRoot, export};

/// The batch processor the provider exports through, shared with direct
/// spans; set once, by the exporting [`crate::init`].
static PROCESSOR: OnceLock<Arc<BatchSpanProcessor>> = OnceLock::new();

/// The instrumentation scope of every span cohort makes (the tracer
/// `tracing-opentelemetry` uses is `provider.tracer("cohort")`).
fn scope() -> &'static InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE.get_or_init(|| InstrumentationScope::builder("cohort").build())
}

/// Shares `processor` between the provider (which it returns for
/// `with_span_processor`) and direct spans.
pub(crate) fn share(processor: BatchSpanProcessor) -> Shared {
    let processor = Arc::new(processor);
    let _ = PROCESSOR.set(Arc::clone(&processor));
    Shared(processor)
}

/// The provider's handle on the shared batch processor. Its resource is
/// set before it is shared (`set_resource` needs the processor alone).
#[derive(Debug)]
pub(crate) struct Shared(Arc<BatchSpanProcessor>);

impl SpanProcessor for Shared {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: std::time::Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// One span, exported when dropped (its end time then). Nothing when
/// spans are not exported or its trace is not sampled.
#[derive(Debug)]
#[must_use = "a span is exported when dropped: keep it until the work it times ends"]
pub struct DirectSpan(Option<SpanData>);

impl DirectSpan {
    /// A span with the ids `context` gives and the parent `parent`
    /// (`SpanId::INVALID` for a trace's root), or nothing when spans are
    /// not exported or `context` is not sampled.
    fn new(name: &'static str, start: SystemTime, context: SpanContext, parent: SpanId, remote: bool) -> DirectSpan {
        if PROCESSOR.get().is_none() || !context.is_sampled() {
            return DirectSpan(None);
        }
        DirectSpan(Some(SpanData {
            span_context: context,
            parent_span_id: parent,
            parent_span_is_remote: remote,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(name),
            start_time: start,
            // Not ended yet: set by `end_at`, else by the drop.
            end_time: SystemTime::UNIX_EPOCH,
            attributes: Vec::with_capacity(8),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope().clone(),
        }))
    }

    /// The root span of a run's trace, with the ids `root` derived.
    pub(crate) fn run_root(root: &RunRoot, name: &'static str, start: SystemTime) -> DirectSpan {
        match &root.0 {
            Some(context) => {
                let own = SpanContext::new(
                    context.trace_id(),
                    context.span_id(),
                    context.trace_flags(),
                    false,
                    TraceState::NONE,
                );
                DirectSpan::new(name, start, own, SpanId::INVALID, false)
            }
            None => DirectSpan(None),
        }
    }

    /// A child of a run's root span (an attempt's lease): in the run's
    /// trace, kept when the root is.
    pub fn under_root(root: &RunRoot, name: &'static str, start: SystemTime) -> DirectSpan {
        match &root.0 {
            Some(parent) => DirectSpan::new(name, start, child_of(parent), parent.span_id(), true),
            None => DirectSpan(None),
        }
    }

    /// A child of the span a W3C `traceparent` names (the worker's, from a
    /// report); without a valid one, the root of a new trace.
    pub fn under_traceparent(traceparent: &str, name: &'static str, start: SystemTime) -> DirectSpan {
        if PROCESSOR.get().is_none() {
            return DirectSpan(None);
        }
        match parse_traceparent(traceparent) {
            Some(parent) => DirectSpan::new(name, start, child_of(&parent), parent.span_id(), true),
            None => {
                let ids = RandomIdGenerator::default();
                let trace_id = ids.new_trace_id();
                let flags = if export::root_sampled(trace_id) { TraceFlags::SAMPLED } else { TraceFlags::default() };
                let context = SpanContext::new(trace_id, ids.new_span_id(), flags, false, TraceState::NONE);
                DirectSpan::new(name, start, context, SpanId::INVALID, false)
            }
        }
    }

    /// Whether the span is recorded (exported and sampled).
    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    /// Sets a string attribute (copied only when the span is recorded,
    /// into a shared string: the OTLP exporter copies every span it exports
    /// once more, to keep it for a retry, and a shared string is copied by
    /// a count, not by its bytes).
    pub fn str(&mut self, key: &'static str, value: &str) -> &mut DirectSpan {
        if let Some(data) = &mut self.0 {
            data.attributes.push(KeyValue::new(key, Arc::<str>::from(value)));
        }
        self
    }

    /// Sets a string attribute whose value is a constant (never copied).
    pub fn static_str(&mut self, key: &'static str, value: &'static str) -> &mut DirectSpan {
        if let Some(data) = &mut self.0 {
            data.attributes.push(KeyValue::new(key, value));
        }
        self
    }

    /// Sets an integer attribute.
    pub fn int(&mut self, key: &'static str, value: i64) -> &mut DirectSpan {
        if let Some(data) = &mut self.0 {
            data.attributes.push(KeyValue::new(key, value));
        }
        self
    }

    /// Sets a boolean attribute.
    pub fn bool(&mut self, key: &'static str, value: bool) -> &mut DirectSpan {
        if let Some(data) = &mut self.0 {
            data.attributes.push(KeyValue::new(key, value));
        }
        self
    }

    /// Links the span to `to` (a span of another trace it belongs with).
    pub fn link(&mut self, to: &LinkTarget) -> &mut DirectSpan {
        if let Some(data) = &mut self.0
            && to.0.is_valid()
        {
            data.links.links.push(Link::with_context(to.0.clone()));
        }
        self
    }

    /// The span's W3C `traceparent`, for the worker to make its spans
    /// children of it; empty when the span is not recorded (as the
    /// no-op propagator writes nothing).
    pub fn traceparent(&self) -> String {
        self.0.as_ref().map(|data| format_traceparent(&data.span_context)).unwrap_or_default()
    }

    /// Ends the span now and exports it (as dropping it does).
    pub fn end(self) {}

    /// Ends the span at `end` and exports it.
    pub fn end_at(mut self, end: SystemTime) {
        if let Some(data) = &mut self.0 {
            data.end_time = end;
        }
    }
}

impl Drop for DirectSpan {
    fn drop(&mut self) {
        let Some(mut data) = self.0.take() else { return };
        if data.end_time == SystemTime::UNIX_EPOCH {
            data.end_time = SystemTime::now().max(data.start_time);
        }
        if let Some(processor) = PROCESSOR.get() {
            processor.on_end(data);
        }
    }
}

/// The context of a new span under `parent`: its trace, a new span id,
/// its sampling decision.
fn child_of(parent: &SpanContext) -> SpanContext {
    let flags = parent.trace_flags() & TraceFlags::SAMPLED;
    SpanContext::new(parent.trace_id(), RandomIdGenerator::default().new_span_id(), flags, false, TraceState::NONE)
}

/// `00-TRACE-SPAN-FLAGS`, as the W3C trace-context propagator writes it.
pub(crate) fn format_traceparent(context: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8())
}

/// The span context a W3C `traceparent` names, or None when it is empty
/// or malformed (<https://www.w3.org/TR/trace-context/#traceparent-header>):
/// a version of two lowercase hex digits other than `ff` (version 00 has
/// exactly four fields; a later one may carry more), a 32-digit trace id
/// and a 16-digit parent id in lowercase hex and not all zeros, flags of
/// two hex digits of which only the sampled bit is kept. The SDK's
/// propagator reads the same fields by the same rules (a test compares
/// the two), without building a map for a carrier.
pub(crate) fn parse_traceparent(value: &str) -> Option<SpanContext> {
    fn hex(s: &str, len: usize) -> Option<&str> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(s)
    }
    let mut fields = value.trim().split('-');
    let version = u8::from_str_radix(hex(fields.next()?, 2)?, 16).ok()?;
    let trace_id = TraceId::from_hex(hex(fields.next()?, 32)?).ok()?;
    let span_id = SpanId::from_hex(hex(fields.next()?, 16)?).ok()?;
    let flags = u8::from_str_radix(hex(fields.next()?, 2)?, 16).ok()?;
    if version == 0xff || (version == 0 && fields.next().is_some()) {
        return None;
    }
    let context =
        SpanContext::new(trace_id, span_id, TraceFlags::new(flags) & TraceFlags::SAMPLED, true, TraceState::NONE);
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    use super::*;

    /// The SDK's own reading of a `traceparent`.
    fn sdk_parse(value: &str) -> Option<SpanContext> {
        let carrier = HashMap::from([("traceparent".to_owned(), value.to_owned())]);
        let cx = TraceContextPropagator::new().extract(&carrier);
        let context = cx.span().span_context().clone();
        context.is_valid().then_some(context)
    }

    #[test]
    fn traceparents_are_read_as_the_sdk_reads_them() {
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = "00f067aa0ba902b7";
        let cases = [
            format!("00-{trace}-{span}-01"),
            format!("00-{trace}-{span}-00"),
            format!("00-{trace}-{span}-09"),
            format!("  00-{trace}-{span}-01  "),
            format!("01-{trace}-{span}-01-what-comes-later"),
            format!("00-{trace}-{span}-01-extra"),
            format!("ff-{trace}-{span}-01"),
            format!("00-{}-{span}-01", trace.to_uppercase()),
            format!("00-{trace}-{}-01", span.to_uppercase()),
            format!("00-{trace}-{span}-0A"),
            format!("00-{}-{span}-01", "0".repeat(32)),
            format!("00-{trace}-{}-01", "0".repeat(16)),
            format!("00-{trace}-{span}"),
            format!("0x-{trace}-{span}-01"),
            format!("00-{trace}-{span}-zz"),
            String::new(),
            "garbage".to_owned(),
        ];
        for case in &cases {
            let ours = parse_traceparent(case);
            let theirs = sdk_parse(case);
            assert_eq!(
                ours.as_ref().map(|c| (c.trace_id(), c.span_id(), c.trace_flags())),
                theirs.as_ref().map(|c| (c.trace_id(), c.span_id(), c.trace_flags())),
                "{case:?}"
            );
        }
        assert!(parse_traceparent(&format!("00-{trace}-{span}-01")).is_some_and(|c| c.is_sampled()));
    }

    #[test]
    fn ids_of_the_wrong_length_are_refused() {
        // W3C fixes the lengths; the SDK's parser reads shorter hex too.
        assert_eq!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"), None);
        assert_eq!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01"), None);
        assert_eq!(parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"), None);
    }

    #[test]
    fn a_traceparent_is_written_as_the_sdk_writes_it() {
        for flags in [TraceFlags::SAMPLED, TraceFlags::default()] {
            let context = SpanContext::new(
                TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap(),
                SpanId::from_hex("b7ad6b7169203331").unwrap(),
                flags,
                false,
                TraceState::NONE,
            );
            let mut carrier = HashMap::new();
            let cx = opentelemetry::Context::new().with_remote_span_context(context.clone());
            TraceContextPropagator::new().inject_context(&cx, &mut carrier);
            assert_eq!(Some(&format_traceparent(&context)), carrier.get("traceparent"));
            let back = parse_traceparent(&format_traceparent(&context)).unwrap();
            assert_eq!(
                (back.trace_id(), back.span_id(), back.trace_flags()),
                (context.trace_id(), context.span_id(), flags)
            );
        }
    }

    #[test]
    fn without_export_a_span_records_nothing() {
        // No exporting `init` in unit tests: nothing is recorded.
        let mut span = DirectSpan::under_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "record result",
            SystemTime::now(),
        );
        span.str("cohort.run.id", "q1:a:1").bool("cohort.accepted", true);
        assert!(!span.is_recording());
        assert_eq!(span.traceparent(), "");
    }
}
