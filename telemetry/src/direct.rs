//! Spans recorded straight into the export queue, without `tracing`: the
//! coordinator's spans of every run (`cohort run`, `lease run`, `record
//! result`, `record attempt`), made at its full rate, thousands a second.
//!
//! A `tracing` span exported through `tracing-opentelemetry` costs the
//! registry's slot, a visitor formatting every field into a new string, the
//! layer's lock, a span builder and the SDK's tracer on top of the export
//! itself; with three such spans a lifecycle the coordinator spent 2.3x the
//! CPU of an untraced one (issue 24; `cargo bench -p cohort-cli --bench
//! lifecycle`, `COHORT_BENCH_CONFIGS=tracing`). Going through the SDK's
//! `SpanData` and batch processor instead still cost about 2x: each span's
//! allocations made on the request's thread and freed on the export
//! thread, the whole span moved through a channel, then converted and
//! encoded. A [`DirectSpan`] writes its attributes and links as OTLP
//! protobuf fields as they are set, and the whole span into the open
//! batch of the direct spans' queue when it is dropped
//! (`crate::otlp_trace::queue`): the same exporter, resource and scope
//! (`cohort`) as the SDK's spans, so a collector sees no difference (the
//! encoding is tested against the protocol crate's own conversion of the
//! `SpanData` it stands for).
//!
//! Sampling is the parent's: a child of a run's root is kept when the root
//! is ([`crate::RunRoot`] carries the sampler's decision for the run's
//! trace), a child of a `traceparent` when its sampled flag is set, and a
//! span without a parent as the sampler decides its new trace id (the
//! SDK's `parentbased_*` samplers, its default, decide the same; so do
//! `always_on`, `always_off` and `traceidratio`, which decide by the trace
//! id alone and so keep or drop a trace whole). Without export every call
//! does nothing and nothing is allocated.

use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};

use crate::otlp_trace::encode::{self, DirectFields, Scalar};
use crate::otlp_trace::queue;
use crate::spares::Spares;
use crate::{LinkTarget, RunRoot, export};

/// The instrumentation scope of every span cohort makes (the tracer
/// `tracing-opentelemetry` uses is `provider.tracer("cohort")`).
pub(crate) fn scope() -> &'static InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE.get_or_init(|| InstrumentationScope::builder("cohort").build())
}

/// One span, exported when dropped (its end time then). Nothing when
/// spans are not exported or its trace is not sampled.
#[derive(Debug)]
#[must_use = "a span is exported when dropped: keep it until the work it times ends"]
pub struct DirectSpan(Option<Recording>);

/// A recorded span: its ids and times, its attributes and links already
/// written as OTLP fields.
#[derive(Debug)]
struct Recording {
    context: SpanContext,
    parent: SpanId,
    parent_is_remote: bool,
    name: &'static str,
    /// Start and end in nanoseconds since the Unix epoch (`encode::nanos`),
    /// converted once, when set.
    start_ns: u64,
    /// Set by `ending_at`, else when written.
    end_ns: Option<u64>,
    /// `Span.attributes` and `Span.links` fields (`encode::span_attribute`,
    /// `encode::span_link`): a few hundred bytes, taken from and given
    /// back to the spare bodies (`bodies`).
    body: Vec<u8>,
}

impl Recording {
    fn new(name: &'static str, start: SystemTime, context: SpanContext, parent: SpanId, remote: bool) -> Recording {
        let start_ns = encode::nanos(start);
        Recording { context, parent, parent_is_remote: remote, name, start_ns, end_ns: None, body: bodies::take() }
    }

    /// The span's fields, ending at its own end if it was given one, else
    /// at `end_ns`; never before its start.
    fn fields(&self, end_ns: u64) -> DirectFields<'_> {
        DirectFields {
            context: &self.context,
            parent: self.parent,
            parent_is_remote: self.parent_is_remote,
            name: self.name,
            start_ns: self.start_ns,
            end_ns: self.end_ns.unwrap_or(end_ns).max(self.start_ns),
            body: &self.body,
        }
    }
}

impl DirectSpan {
    /// A span with the ids `context` gives and the parent `parent`
    /// (`SpanId::INVALID` for a trace's root), or nothing when spans are
    /// not exported or `context` is not sampled.
    fn new(name: &'static str, start: SystemTime, context: SpanContext, parent: SpanId, remote: bool) -> DirectSpan {
        if !queue::active() || !context.is_sampled() {
            return DirectSpan(None);
        }
        DirectSpan(Some(Recording::new(name, start, context, parent, remote)))
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
        if !queue::active() {
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

    fn attribute(&mut self, key: &str, value: Scalar<'_>) -> &mut DirectSpan {
        if let Some(r) = &mut self.0 {
            encode::span_attribute(&mut r.body, key, value);
        }
        self
    }

    /// Sets a string attribute (written only when the span is recorded).
    pub fn str(&mut self, key: &'static str, value: &str) -> &mut DirectSpan {
        self.attribute(key, Scalar::Str(value))
    }

    /// Sets a string attribute whose value is a constant.
    pub fn static_str(&mut self, key: &'static str, value: &'static str) -> &mut DirectSpan {
        self.attribute(key, Scalar::Str(value))
    }

    /// Sets an integer attribute.
    pub fn int(&mut self, key: &'static str, value: i64) -> &mut DirectSpan {
        self.attribute(key, Scalar::I64(value))
    }

    /// Sets a boolean attribute.
    pub fn bool(&mut self, key: &'static str, value: bool) -> &mut DirectSpan {
        self.attribute(key, Scalar::Bool(value))
    }

    /// Links the span to `to` (a span of another trace it belongs with).
    pub fn link(&mut self, to: &LinkTarget) -> &mut DirectSpan {
        if let Some(r) = &mut self.0
            && to.0.is_valid()
        {
            encode::span_link(&mut r.body, &to.0);
        }
        self
    }

    /// The span's W3C `traceparent`, for the worker to make its spans
    /// children of it; empty when the span is not recorded (as the
    /// no-op propagator writes nothing).
    pub fn traceparent(&self) -> String {
        self.0.as_ref().map(|r| format_traceparent(&r.context)).unwrap_or_default()
    }

    /// Ends the span now and exports it (as dropping it does).
    pub fn end(self) {}

    /// Sets the span's end, kept when it is exported (dropped, or ended
    /// with a [`SpanBatch`]).
    pub(crate) fn ending_at(mut self, end: SystemTime) -> DirectSpan {
        if let Some(r) = &mut self.0 {
            r.end_ns = Some(encode::nanos(end));
        }
        self
    }
}

/// Spare span bodies: a body goes back when its span has been written,
/// and the next span takes it. The coordinator holds a report's worth of
/// spans at once (dozens), more than the allocator's per-thread cache
/// keeps of one size; and a span is often made on one runtime thread and
/// written on the other (its task moved while it awaited the ledger), so
/// one thread's bodies pile up while the other's run out. Each thread keeps
/// its own, and hands a run of them to a pool both share when it has too
/// many, or takes a run from it when it has none: one lock per [`MOVED`]
/// spans, and no body allocated on one thread and freed on another.
mod bodies {
    use std::cell::RefCell;
    use std::sync::Mutex;

    /// Room for the largest span's attributes (a run's root: four).
    const ROOM: usize = 384;
    /// The largest body kept.
    const LARGEST: usize = 4 * ROOM;
    /// The most spare bodies a thread keeps before it hands [`MOVED`] of
    /// them to the shared pool; the run taken or handed at once.
    const KEPT: usize = 128;
    const MOVED: usize = 64;
    /// The most bodies the shared pool holds (more are freed).
    const SHARED_MAX: usize = 1024;

    static SHARED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    thread_local! {
        static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn take() -> Vec<u8> {
        SPARE
            .with(|spare| {
                let mut spare = spare.borrow_mut();
                if spare.is_empty()
                    && let Ok(mut shared) = SHARED.lock()
                {
                    let from = shared.len().saturating_sub(MOVED);
                    spare.extend(shared.drain(from..));
                }
                spare.pop()
            })
            .unwrap_or_else(|| Vec::with_capacity(ROOM))
    }

    pub(super) fn give_back(mut body: Vec<u8>) {
        if body.capacity() > LARGEST {
            return;
        }
        body.clear();
        SPARE.with(|spare| {
            let mut spare = spare.borrow_mut();
            spare.push(body);
            if spare.len() >= KEPT
                && let Ok(mut shared) = SHARED.lock()
            {
                let room = SHARED_MAX.saturating_sub(shared.len()).min(MOVED);
                let from = spare.len() - MOVED;
                shared.extend(spare.drain(from..from + room));
                spare.truncate(from);
            }
        });
    }
}

impl Drop for DirectSpan {
    fn drop(&mut self) {
        let Some(r) = self.0.take() else { return };
        let end = r.end_ns.unwrap_or_else(|| encode::nanos(SystemTime::now()));
        let written = [Some(r)];
        write_all(&written, end);
        let [Some(r)] = written else { return };
        bodies::give_back(r.body);
    }
}

/// Exports the recorded ones of `spans` under one lock of the queue, each
/// ended at the end it was given (a run's root: [`DirectSpan::ending_at`])
/// or else at `end_ns`, and gives their bodies back.
fn write_all(spans: &[Option<Recording>], end_ns: u64) {
    queue::record_all(
        spans,
        |r| r.as_ref().map(|r| encode::direct_span_len(&r.fields(end_ns))),
        |buf, r| {
            if let Some(r) = r {
                encode::direct_span(buf, &r.fields(end_ns));
            }
        },
    );
}

/// Spans that end together, exported together: one clock reading and
/// one lock of the queue for all of them (a lease batch's spans, the
/// result spans of one report), where ending each on its own takes one
/// of each a span. Its list comes from a pool and goes back to it: nothing
/// is allocated for a batch once the pool holds a list.
#[derive(Debug)]
pub struct SpanBatch(Vec<Option<Recording>>);

/// Emptied lists of [`SpanBatch`]es, for the next ones (a few: one per
/// call in flight), of up to 4,096 spans.
static LISTS: Spares<Option<Recording>> = Spares::new(16, 4096);

impl SpanBatch {
    /// Room for `n` spans (nothing when spans are not exported).
    pub fn with_capacity(n: usize) -> SpanBatch {
        if !queue::active() {
            return SpanBatch(Vec::new());
        }
        let mut list = LISTS.take().unwrap_or_default();
        list.reserve(n);
        SpanBatch(list)
    }

    /// Adds `span`, the batch's `len()`th, to end with the others.
    pub fn push(&mut self, mut span: DirectSpan) {
        if queue::active() {
            self.0.push(span.0.take());
        }
    }

    /// Sets a boolean attribute on the `i`th span pushed (when recorded).
    pub fn set_bool(&mut self, i: usize, key: &'static str, value: bool) {
        if let Some(Some(r)) = self.0.get_mut(i) {
            encode::span_attribute(&mut r.body, key, Scalar::Bool(value));
        }
    }

    /// Ends every span now (a span given its own end keeps it) and
    /// exports them all, as dropping the batch does.
    pub fn end(self) {}
}

impl Drop for SpanBatch {
    /// Every span ends now (a span given its own end keeps it) and is
    /// exported; the list goes back to the pool.
    fn drop(&mut self) {
        if self.0.iter().any(Option::is_some) {
            write_all(&self.0, encode::nanos(SystemTime::now()));
        }
        let mut list = std::mem::take(&mut self.0);
        for r in list.drain(..).flatten() {
            bodies::give_back(r.body);
        }
        LISTS.give(list);
    }
}

/// The context of a new span under `parent`: its trace, a new span id,
/// its sampling decision.
fn child_of(parent: &SpanContext) -> SpanContext {
    let flags = parent.trace_flags() & TraceFlags::SAMPLED;
    SpanContext::new(parent.trace_id(), RandomIdGenerator::default().new_span_id(), flags, false, TraceState::NONE)
}

/// `00-TRACE-SPAN-FLAGS`, as the W3C trace-context propagator writes it
/// (lowercase hex; written byte by byte, as it is once per lease).
pub(crate) fn format_traceparent(context: &SpanContext) -> String {
    fn hex(out: &mut Vec<u8>, bytes: &[u8]) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for b in bytes {
            out.push(DIGITS[usize::from(b >> 4)]);
            out.push(DIGITS[usize::from(b & 0xf)]);
        }
    }
    let mut out = Vec::with_capacity(55);
    out.extend_from_slice(b"00-");
    hex(&mut out, &context.trace_id().to_bytes());
    out.push(b'-');
    hex(&mut out, &context.span_id().to_bytes());
    out.push(b'-');
    hex(&mut out, &[context.trace_flags().to_u8()]);
    // Only ASCII hex digits and hyphens were written.
    String::from_utf8(out).unwrap_or_default()
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
    // A digit's value, or 0x80 for any byte that is not a lowercase hex
    // digit (the specification allows no other).
    const HEX: [u8; 256] = {
        let mut table = [0x80u8; 256];
        let mut d = 0;
        while d < 10 {
            table[b'0' as usize + d] = d as u8;
            d += 1;
        }
        let mut d = 0;
        while d < 6 {
            table[b'a' as usize + d] = 10 + d as u8;
            d += 1;
        }
        table
    };
    // Up to 16 digits; None if any is not one.
    fn hex(digits: &[u8]) -> Option<u64> {
        let mut n = 0u64;
        let mut bad = 0u8;
        for &b in digits {
            let d = HEX[usize::from(b)];
            bad |= d;
            n = n << 4 | u64::from(d & 0x0f);
        }
        (bad & 0x80 == 0).then_some(n)
    }
    // version "-" trace-id "-" parent-id "-" flags: 55 bytes; a later
    // version may add fields after a further "-", version 00 may not.
    let v = value.trim().as_bytes();
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex(&v[0..2])?;
    let trace_id = TraceId::from(u128::from(hex(&v[3..19])?) << 64 | u128::from(hex(&v[19..35])?));
    let span_id = SpanId::from(hex(&v[36..52])?);
    let flags = hex(&v[53..55])? as u8;
    if version == 0xff || (v.len() > 55 && (version == 0 || v[55] != b'-')) {
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

    /// A direct span's bytes decode to exactly what the protocol crate's
    /// own conversion makes of the `SpanData` it stands for: ids, parent
    /// and its remoteness, flags, times, attributes of each type, a link.
    #[test]
    fn a_direct_span_is_the_message_the_protocol_crate_makes_of_its_span_data() {
        use std::borrow::Cow;
        use std::time::Duration;

        use opentelemetry::KeyValue;
        use opentelemetry::trace::{Link, SpanKind, Status};
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
        use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
        use opentelemetry_sdk::Resource;
        use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
        use prost::Message as _;

        let resource =
            Resource::builder_empty().with_attributes([KeyValue::new("service.name", "cohort-coordinator")]).build();
        let start = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_765_000_000_123_456_789);
        let end = start + Duration::from_micros(250);
        let cohort_span =
            SpanContext::new(TraceId::from(7u128), SpanId::from(9u64), TraceFlags::SAMPLED, false, TraceState::NONE);
        let cases = [
            // A root (no parent), not remote; a child of a remote parent,
            // sampled or not (an unsampled one is never recorded, but its
            // bytes are still checked).
            (SpanId::INVALID, false, TraceFlags::SAMPLED),
            (SpanId::from(0x00f0_67aa_0ba9_02b7u64), true, TraceFlags::SAMPLED),
            (SpanId::from(3u64), true, TraceFlags::default()),
        ];
        for (parent, remote, flags) in cases {
            let context = SpanContext::new(
                TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736u128),
                SpanId::from(0xb7ad_6b71_6920_3331u64),
                flags,
                false,
                TraceState::NONE,
            );
            let mut r = Recording::new("lease run", start, context.clone(), parent, remote);
            for (key, value) in [
                ("cohort.run.id", Scalar::Str("q1:a:1")),
                ("cohort.empty", Scalar::Str("")),
                ("cohort.attempt", Scalar::I64(2)),
                ("cohort.negative", Scalar::I64(-5)),
                ("cohort.accepted", Scalar::Bool(true)),
                ("cohort.refused", Scalar::Bool(false)),
            ] {
                encode::span_attribute(&mut r.body, key, value);
            }
            encode::span_link(&mut r.body, &cohort_span);
            let mut bytes = Vec::new();
            let fields = r.fields(encode::nanos(end));
            encode::sized_message(&mut bytes, 2, encode::direct_span_len(&fields), |buf| {
                encode::direct_span(buf, &fields);
            });
            let ours = ExportTraceServiceRequest::decode(
                crate::otlp_trace::encode::wrap(
                    &crate::otlp_trace::encode::EncodedResource::new(&resource),
                    &[(scope(), &bytes)],
                )
                .as_slice(),
            )
            .unwrap();

            let mut links = SpanLinks::default();
            links.links.push(Link::with_context(cohort_span.clone()));
            let data = SpanData {
                span_context: context,
                parent_span_id: parent,
                parent_span_is_remote: remote,
                span_kind: SpanKind::Internal,
                name: Cow::Borrowed("lease run"),
                start_time: start,
                end_time: end,
                attributes: vec![
                    KeyValue::new("cohort.run.id", "q1:a:1"),
                    KeyValue::new("cohort.empty", ""),
                    KeyValue::new("cohort.attempt", 2),
                    KeyValue::new("cohort.negative", -5),
                    KeyValue::new("cohort.accepted", true),
                    KeyValue::new("cohort.refused", false),
                ],
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links,
                status: Status::Unset,
                instrumentation_scope: scope().clone(),
            };
            let official = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(
                    vec![data],
                    &ResourceAttributesWithSchema::from(&resource),
                ),
            };
            assert_eq!(ours, official, "parent {parent:?}, remote {remote}");
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
