//! The OTLP trace request (`ExportTraceServiceRequest`,
//! opentelemetry-proto's `collector/trace/v1/trace_service.proto`) written
//! straight from the SDK's `SpanData` into protobuf bytes.
//!
//! Why not the protocol crate's messages: `opentelemetry-otlp` turns each
//! span into prost messages first (a `Vec` for each id, a `String` for
//! each name, attribute key and value) after copying the whole batch to
//! keep it for a retry, and only then encodes; at the coordinator's rate
//! that was most of what tracing cost (issue 24). Here a batch is read
//! once and written once, with no allocation per span beyond the output's
//! growth.
//!
//! The bytes are exactly the message the protocol crate's own conversion
//! (`opentelemetry_proto::transform::trace::tonic`) makes from the same
//! spans: one `ResourceSpans` with the process's resource, one
//! `ScopeSpans` per instrumentation scope in the order the scopes first
//! appear, the span flags with the "has is-remote" bit and the parent's
//! is-remote bit (OTLP 1.1), a status on every span. The tests decode
//! what this writes with the protocol's prost types and compare it with
//! that conversion, field by field, on generated spans.
//!
//! Protobuf as written here: a field is a key (its number and wire type)
//! and a value; proto3 scalars at their default are left out (as prost
//! leaves them out), a `oneof`'s value and a present sub-message never
//! are; a sub-message is length-prefixed, its length written once its
//! bytes are known ([`message`]).

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;

// === Wire primitives ===

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// Gives `put` the bytes of `value` as a varint, lowest group first.
fn varint_bytes(mut value: u64, mut put: impl FnMut(u8)) {
    while value >= 0x80 {
        put((value as u8) | 0x80);
        value >>= 7;
    }
    put(value as u8);
}

fn varint(buf: &mut Vec<u8>, value: u64) {
    varint_bytes(value, |b| buf.push(b));
}

fn key(buf: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(buf, u64::from(field << 3 | wire_type));
}

fn bytes_field(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(buf, field, LEN);
    varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// A string or bytes field, left out when empty (a proto3 default).
fn nonempty(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    if !bytes.is_empty() {
        bytes_field(buf, field, bytes);
    }
}

/// A varint field, left out when zero.
fn uint(buf: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(buf, field, VARINT);
        varint(buf, value);
    }
}

fn fixed64(buf: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(buf, field, FIXED64);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn fixed32(buf: &mut Vec<u8>, field: u32, value: u32) {
    if value != 0 {
        key(buf, field, FIXED32);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

/// A sub-message in field `field`, written by `body`. Its length goes
/// before it: one byte is set aside (a span's attribute or a status is
/// shorter than 128 bytes), and the body moved up when its length takes
/// more.
pub(crate) fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let at = buf.len();
    buf.push(0);
    body(buf);
    let len = buf.len() - at - 1;
    set_length(buf, at, 1, len);
}

/// A sub-message in field `field` whose length `len` is known before it
/// is written: no byte set aside, nothing moved. Should `body` write other
/// than `len` bytes (a test fails on it in debug builds), the length is
/// written again to match, so the message is never malformed.
pub(crate) fn sized_message(buf: &mut Vec<u8>, field: u32, len: usize, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let at = buf.len();
    varint(buf, len as u64);
    let start = buf.len();
    body(buf);
    let written = buf.len() - start;
    debug_assert_eq!(written, len, "a sized message wrote other than its length");
    if written != len {
        set_length(buf, at, start - at, written);
    }
}

/// Writes `len` as the length prefix at `at`, where `reserved` bytes were
/// set aside for it before the `len` bytes of body that end `buf`; the
/// body moves when the prefix takes another number of bytes.
fn set_length(buf: &mut Vec<u8>, at: usize, reserved: usize, len: usize) {
    let need = varint_len(len as u64);
    let body = at + reserved..at + reserved + len;
    if need > reserved {
        buf.resize(buf.len() + need - reserved, 0);
        buf.copy_within(body, at + need);
    } else if need < reserved {
        buf.copy_within(body, at + need);
        buf.truncate(buf.len() - (reserved - need));
    }
    let mut i = at;
    varint_bytes(len as u64, |b| {
        buf[i] = b;
        i += 1;
    });
}

// === Lengths, for a message whose length goes before it (`sized_message`) ===

fn key_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

fn bytes_field_len(field: u32, len: usize) -> usize {
    key_len(field) + varint_len(len as u64) + len
}

// === OTLP messages ===

/// `opentelemetry.proto.trace.v1.SpanFlags`: the context's is-remote bit
/// is known, and set when the parent (or the link's target) is remote.
const FLAGS_HAS_IS_REMOTE: u32 = 0x100;
const FLAGS_IS_REMOTE: u32 = 0x200;

fn flags(trace_flags: u8, remote: bool) -> u32 {
    u32::from(trace_flags) | FLAGS_HAS_IS_REMOTE | if remote { FLAGS_IS_REMOTE } else { 0 }
}

pub(crate) fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn trace_state(buf: &mut Vec<u8>, field: u32, state: &TraceState) {
    if *state != TraceState::NONE {
        nonempty(buf, field, state.header().as_bytes());
    }
}

/// `AnyValue`: a `oneof`, so its value is written even when it is the
/// type's default.
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => {
            key(buf, 2, VARINT);
            varint(buf, u64::from(*b));
        }
        Value::I64(i) => {
            key(buf, 3, VARINT);
            varint(buf, *i as u64);
        }
        Value::F64(f) => {
            key(buf, 4, FIXED64);
            buf.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::String(s) => bytes_field(buf, 1, s.as_str().as_bytes()),
        Value::Array(array) => message(buf, 5, |buf| array_value(buf, array)),
        // A kind of value a later API adds: as its text.
        other => bytes_field(buf, 1, other.to_string().as_bytes()),
    }
}

/// `ArrayValue`: each element an `AnyValue` in field 1.
fn array_value(buf: &mut Vec<u8>, array: &Array) {
    match array {
        Array::Bool(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::Bool(*v)))),
        Array::I64(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::I64(*v)))),
        Array::F64(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::F64(*v)))),
        Array::String(values) => {
            values.iter().for_each(|v| message(buf, 1, |buf| bytes_field(buf, 1, v.as_str().as_bytes())))
        }
        other => message(buf, 1, |buf| bytes_field(buf, 1, other.to_string().as_bytes())),
    }
}

/// `KeyValue`s in field `field`.
fn attributes<'a>(buf: &mut Vec<u8>, field: u32, attributes: impl IntoIterator<Item = (&'a str, &'a Value)>) {
    for (name, value) in attributes {
        message(buf, field, |buf| {
            nonempty(buf, 1, name.as_bytes());
            message(buf, 2, |buf| any_value(buf, value));
        });
    }
}

fn pairs(kvs: &[KeyValue]) -> impl Iterator<Item = (&str, &Value)> {
    kvs.iter().map(|kv| (kv.key.as_str(), &kv.value))
}

fn span_kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// `Span`.
fn span(buf: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes_field(buf, 1, &context.trace_id().to_bytes());
    bytes_field(buf, 2, &context.span_id().to_bytes());
    trace_state(buf, 3, context.trace_state());
    if span.parent_span_id != SpanId::INVALID {
        bytes_field(buf, 4, &span.parent_span_id.to_bytes());
    }
    nonempty(buf, 5, span.name.as_bytes());
    uint(buf, 6, span_kind(&span.span_kind));
    fixed64(buf, 7, nanos(span.start_time));
    fixed64(buf, 8, nanos(span.end_time));
    attributes(buf, 9, pairs(&span.attributes));
    uint(buf, 10, u64::from(span.dropped_attributes_count));
    for event in span.events.iter() {
        message(buf, 11, |buf| {
            fixed64(buf, 1, nanos(event.timestamp));
            nonempty(buf, 2, event.name.as_bytes());
            attributes(buf, 3, pairs(&event.attributes));
            uint(buf, 4, u64::from(event.dropped_attributes_count));
        });
    }
    uint(buf, 12, u64::from(span.events.dropped_count));
    for link in span.links.iter() {
        message(buf, 13, |buf| {
            let target = &link.span_context;
            bytes_field(buf, 1, &target.trace_id().to_bytes());
            bytes_field(buf, 2, &target.span_id().to_bytes());
            trace_state(buf, 3, target.trace_state());
            attributes(buf, 4, pairs(&link.attributes));
            uint(buf, 5, u64::from(link.dropped_attributes_count));
            fixed32(buf, 6, flags(target.trace_flags().to_u8(), target.is_remote()));
        });
    }
    uint(buf, 14, u64::from(span.links.dropped_count));
    message(buf, 15, |buf| match &span.status {
        Status::Unset => {}
        Status::Ok => uint(buf, 3, 1),
        Status::Error { description } => {
            nonempty(buf, 2, description.as_bytes());
            uint(buf, 3, 2);
        }
    });
    fixed32(buf, 16, flags(context.trace_flags().to_u8(), span.parent_span_is_remote));
}

/// `InstrumentationScope`.
fn scope(buf: &mut Vec<u8>, scope: &InstrumentationScope) {
    nonempty(buf, 1, scope.name().as_bytes());
    nonempty(buf, 2, scope.version().unwrap_or_default().as_bytes());
    attributes(buf, 3, scope.attributes().map(|kv| (kv.key.as_str(), &kv.value)));
}

/// The process's resource, encoded once: the body of a `Resource`
/// message and the resource's schema URL.
#[derive(Debug, Clone, Default)]
pub(crate) struct EncodedResource {
    body: Vec<u8>,
    schema_url: String,
}

impl EncodedResource {
    pub(crate) fn new(resource: &Resource) -> EncodedResource {
        let mut body = Vec::new();
        attributes(&mut body, 1, resource.iter().map(|(k, v)| (k.as_str(), v)));
        EncodedResource { body, schema_url: resource.schema_url().unwrap_or_default().to_owned() }
    }
}

/// The `ExportTraceServiceRequest` of `spans`, with `resource`.
pub(crate) fn request(resource: &EncodedResource, spans: &[SpanData]) -> Vec<u8> {
    // Spans grouped by scope, each scope's in the order they came: the
    // scopes (nearly always one, `cohort`) in the order they first appear.
    let mut scopes: Vec<(&InstrumentationScope, Vec<u8>)> = Vec::with_capacity(1);
    for s in spans {
        let at = match scopes.iter().position(|(scope, _)| *scope == &s.instrumentation_scope) {
            Some(at) => at,
            None => {
                scopes.push((&s.instrumentation_scope, Vec::with_capacity(spans.len() * 320)));
                scopes.len() - 1
            }
        };
        message(&mut scopes[at].1, 2, |buf| span(buf, s));
    }
    let scopes: Vec<(&InstrumentationScope, &[u8])> = scopes.iter().map(|(s, b)| (*s, b.as_slice())).collect();
    wrap(resource, &scopes)
}

/// The `ExportTraceServiceRequest` of spans already encoded, each scope's
/// as a run of `ScopeSpans.spans` fields ([`span`], [`direct_span`]).
/// The spans' bytes are copied once: every length around them is worked
/// out first.
pub(crate) fn wrap(resource: &EncodedResource, scopes: &[(&InstrumentationScope, &[u8])]) -> Vec<u8> {
    // The small pieces around the spans, each written apart.
    let mut resource_head = Vec::with_capacity(resource.body.len() + 8);
    message(&mut resource_head, 1, |buf| buf.extend_from_slice(&resource.body));
    let mut resource_tail = Vec::new();
    nonempty(&mut resource_tail, 3, resource.schema_url.as_bytes());
    let pieces: Vec<(Vec<u8>, &[u8], Vec<u8>)> = scopes
        .iter()
        .map(|(s, spans)| {
            let mut head = Vec::with_capacity(32);
            message(&mut head, 1, |buf| scope(buf, s));
            let mut tail = Vec::new();
            nonempty(&mut tail, 3, s.schema_url().unwrap_or_default().as_bytes());
            (head, *spans, tail)
        })
        .collect();
    let scope_len = |(head, spans, tail): &(Vec<u8>, &[u8], Vec<u8>)| head.len() + spans.len() + tail.len();
    let resource_spans_len = resource_head.len()
        + pieces.iter().map(|p| 1 + varint_len(scope_len(p) as u64) + scope_len(p)).sum::<usize>()
        + resource_tail.len();
    let mut out = Vec::with_capacity(resource_spans_len + 16);
    key(&mut out, 1, LEN);
    varint(&mut out, resource_spans_len as u64);
    out.extend_from_slice(&resource_head);
    for p in &pieces {
        key(&mut out, 2, LEN);
        varint(&mut out, scope_len(p) as u64);
        out.extend_from_slice(&p.0);
        out.extend_from_slice(p.1);
        out.extend_from_slice(&p.2);
    }
    out.extend_from_slice(&resource_tail);
    out
}

/// The bytes `varint` writes for `value`.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

// === Direct spans (`crate::direct`) ===

/// One attribute value of a direct span: what the coordinator sets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar<'a> {
    Str(&'a str),
    I64(i64),
    Bool(bool),
}

/// A span attribute (`Span.attributes`, field 9), written as the
/// protocol crate writes `KeyValue::new(name, value)`.
pub(crate) fn span_attribute(buf: &mut Vec<u8>, name: &str, value: Scalar<'_>) {
    // Both lengths are known before the bytes are written (no byte set
    // aside, nothing moved: a direct span sets several of these a lifecycle).
    let value_len = match value {
        Scalar::Str(s) => bytes_field_len(1, s.len()),
        Scalar::Bool(b) => key_len(2) + varint_len(u64::from(b)),
        Scalar::I64(i) => key_len(3) + varint_len(i as u64),
    };
    let name_len = if name.is_empty() { 0 } else { bytes_field_len(1, name.len()) };
    let pair_len = name_len + bytes_field_len(2, value_len);
    // The usual string attribute, every length one byte: its bytes in five
    // copies rather than a dozen writes (the coordinator sets several a
    // lifecycle). The general path below writes the same bytes.
    if let Scalar::Str(text) = value
        && !name.is_empty()
        && pair_len < 0x80
    {
        // Lengths below 0x80 are one-byte varints, and each is at most
        // `pair_len`. Keys: KeyValue in Span.attributes (9), its key (1),
        // its AnyValue (2), the AnyValue's string_value (1), all LEN.
        buf.reserve(2 + pair_len);
        buf.extend_from_slice(&[9 << 3 | LEN as u8, pair_len as u8, 1 << 3 | LEN as u8, name.len() as u8]);
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(&[2 << 3 | LEN as u8, value_len as u8, 1 << 3 | LEN as u8, text.len() as u8]);
        buf.extend_from_slice(text.as_bytes());
        return;
    }
    sized_message(buf, 9, pair_len, |buf| {
        nonempty(buf, 1, name.as_bytes());
        sized_message(buf, 2, value_len, |buf| match value {
            Scalar::Str(s) => bytes_field(buf, 1, s.as_bytes()),
            Scalar::Bool(b) => {
                key(buf, 2, VARINT);
                varint(buf, u64::from(b));
            }
            Scalar::I64(i) => {
                key(buf, 3, VARINT);
                varint(buf, i as u64);
            }
        });
    });
}

/// A link without attributes (`Span.links`, field 13) to `target`.
pub(crate) fn span_link(buf: &mut Vec<u8>, target: &SpanContext) {
    message(buf, 13, |buf| {
        bytes_field(buf, 1, &target.trace_id().to_bytes());
        bytes_field(buf, 2, &target.span_id().to_bytes());
        trace_state(buf, 3, target.trace_state());
        fixed32(buf, 6, flags(target.trace_flags().to_u8(), target.is_remote()));
    });
}

/// What a direct span is: an internal span with no events and an unset
/// status, its attributes and links already written ([`span_attribute`],
/// [`span_link`]).
#[derive(Debug)]
pub(crate) struct DirectFields<'a> {
    pub(crate) context: &'a SpanContext,
    pub(crate) parent: SpanId,
    pub(crate) parent_is_remote: bool,
    pub(crate) name: &'a str,
    /// Start and end, in nanoseconds since the Unix epoch ([`nanos`]).
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    /// Encoded `Span.attributes` and `Span.links` fields, in the order set
    /// (protobuf reads a message's fields in any order).
    pub(crate) body: &'a [u8],
}

/// The fields of a direct span's `Span` message (the caller puts them in
/// `ScopeSpans.spans`: `message(buf, 2, ..)`). The same bytes, field for
/// field, as [`span`] writes for the `SpanData` it stands for.
pub(crate) fn direct_span(buf: &mut Vec<u8>, s: &DirectFields<'_>) {
    let at = buf.len();
    direct_span_fields(buf, s);
    debug_assert_eq!(buf.len() - at, direct_span_len(s), "direct_span_len disagrees with direct_span");
}

/// The bytes [`direct_span`] writes for `s`, known before it writes them,
/// so a span goes into a batch with its length first ([`sized_message`])
/// and is never moved.
pub(crate) fn direct_span_len(s: &DirectFields<'_>) -> usize {
    let state = s.context.trace_state();
    let state_len = if *state == TraceState::NONE {
        0
    } else {
        match state.header().len() {
            0 => 0,
            n => bytes_field_len(3, n),
        }
    };
    let parent = if s.parent == SpanId::INVALID { 0 } else { bytes_field_len(4, 8) };
    let name = if s.name.is_empty() { 0 } else { bytes_field_len(5, s.name.len()) };
    let time = |field: u32, ns: u64| if ns == 0 { 0 } else { key_len(field) + 8 };
    bytes_field_len(1, 16)
        + bytes_field_len(2, 8)
        + state_len
        + parent
        + name
        + key_len(6)
        + varint_len(span_kind(&SpanKind::Internal))
        + time(7, s.start_ns)
        + time(8, s.end_ns)
        + s.body.len()
        + bytes_field_len(15, 0)
        + key_len(16)
        + 4
}

fn direct_span_fields(buf: &mut Vec<u8>, s: &DirectFields<'_>) {
    bytes_field(buf, 1, &s.context.trace_id().to_bytes());
    bytes_field(buf, 2, &s.context.span_id().to_bytes());
    trace_state(buf, 3, s.context.trace_state());
    if s.parent != SpanId::INVALID {
        bytes_field(buf, 4, &s.parent.to_bytes());
    }
    nonempty(buf, 5, s.name.as_bytes());
    uint(buf, 6, span_kind(&SpanKind::Internal));
    fixed64(buf, 7, s.start_ns);
    fixed64(buf, 8, s.end_ns);
    buf.extend_from_slice(s.body);
    // An unset status, present (empty) as the protocol crate writes it.
    bytes_field(buf, 15, &[]);
    fixed32(buf, 16, flags(s.context.trace_flags().to_u8(), s.parent_is_remote));
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{Event, Link, SpanContext, TraceFlags, TraceId};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use proptest::prelude::*;
    use prost::Message as _;

    use super::*;

    /// What the protocol crate's own conversion makes of `spans`.
    fn official(resource: &Resource, spans: &[SpanData]) -> ExportTraceServiceRequest {
        let resource = ResourceAttributesWithSchema::from(resource);
        ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(spans.to_vec(), &resource) }
    }

    fn ours(resource: &Resource, spans: &[SpanData]) -> ExportTraceServiceRequest {
        let bytes = request(&EncodedResource::new(resource), spans);
        ExportTraceServiceRequest::decode(bytes.as_slice()).expect("our bytes decode as the protocol's message")
    }

    fn value() -> impl Strategy<Value = Value> {
        let text = "[a-zA-Z0-9 é\u{1F600}]{0,200}";
        prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::I64),
            any::<f64>().prop_filter("NaN is not equal to itself", |f| !f.is_nan()).prop_map(Value::F64),
            text.prop_map(Value::from),
            proptest::collection::vec(any::<i64>(), 0..4).prop_map(|v| Value::Array(Array::I64(v))),
            proptest::collection::vec(any::<bool>(), 0..4).prop_map(|v| Value::Array(Array::Bool(v))),
            proptest::collection::vec(-1e9f64..1e9, 0..4).prop_map(|v| Value::Array(Array::F64(v))),
            proptest::collection::vec("[a-z]{0,8}", 0..4)
                .prop_map(|v| Value::Array(Array::String(v.into_iter().map(Into::into).collect()))),
        ]
    }

    fn key_values(max: usize) -> impl Strategy<Value = Vec<KeyValue>> {
        proptest::collection::vec(("[a-z.]{0,40}", value()), 0..max)
            .prop_map(|kvs| kvs.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())
    }

    fn context() -> impl Strategy<Value = SpanContext> {
        (any::<u128>(), any::<u64>(), any::<bool>(), any::<bool>(), prop::option::of("[a-z]{1,5}=[a-z0-9]{1,5}"))
            .prop_map(|(t, s, sampled, remote, state)| {
                let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
                let state = state
                    .and_then(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                    .and_then(|kv| TraceState::from_key_value([kv]).ok())
                    .unwrap_or(TraceState::NONE);
                SpanContext::new(TraceId::from(t.max(1)), SpanId::from(s.max(1)), flags, remote, state)
            })
    }

    fn time() -> impl Strategy<Value = SystemTime> {
        (0u64..4_000_000_000, 0u32..1_000_000_000).prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n))
    }

    fn scope_of(which: u8) -> InstrumentationScope {
        match which {
            0 => InstrumentationScope::builder("cohort").build(),
            1 => InstrumentationScope::builder("other").with_version("1.2.3").with_schema_url("https://s/1").build(),
            _ => InstrumentationScope::builder("third").with_attributes([KeyValue::new("k", 7)]).build(),
        }
    }

    prop_compose! {
        fn span_data()(
            ids in (context(), prop_oneof![Just(0u64), any::<u64>()], any::<bool>()),
            head in (0usize..5, "[a-z ]{0,30}", time(), time()),
            attributes in (key_values(8), 0u32..3),
            events in (proptest::collection::vec(("[a-z]{0,10}", time(), key_values(3), 0u32..2), 0..3), 0u32..2),
            links in (proptest::collection::vec((context(), key_values(3), 0u32..2), 0..3), 0u32..2),
            tail in (0u8..4, "[a-z ]{0,20}", 0u8..3),
        ) -> SpanData {
            let (context, parent, remote) = ids;
            let (kind, name, start, end) = head;
            let (attributes, dropped) = attributes;
            let (status, description, scope) = tail;
            let mut span_events = SpanEvents::default();
            span_events.events = events.0.into_iter().map(|(n, t, a, d)| Event::new(n, t, a, d)).collect();
            span_events.dropped_count = events.1;
            let mut span_links = SpanLinks::default();
            span_links.links = links
                .0
                .into_iter()
                .map(|(c, a, d)| {
                    let mut link = Link::new(c, a, 0);
                    link.dropped_attributes_count = d;
                    link
                })
                .collect();
            span_links.dropped_count = links.1;
            let kinds = [SpanKind::Internal, SpanKind::Server, SpanKind::Client, SpanKind::Producer, SpanKind::Consumer];
            SpanData {
                span_context: context,
                parent_span_id: SpanId::from(parent),
                parent_span_is_remote: remote,
                span_kind: kinds[kind].clone(),
                name: Cow::Owned(name),
                start_time: start,
                end_time: end,
                attributes,
                dropped_attributes_count: dropped,
                events: span_events,
                links: span_links,
                status: match status {
                    0 => Status::Unset,
                    1 => Status::Ok,
                    2 => Status::error(description),
                    _ => Status::error(""),
                },
                instrumentation_scope: scope_of(scope),
            }
        }
    }

    fn resource() -> impl Strategy<Value = Resource> {
        (key_values(6), prop::option::of("https://schema/[a-z]{1,5}")).prop_map(|(kvs, schema)| match schema {
            Some(url) => Resource::builder_empty().with_schema_url(kvs, url).build(),
            None => Resource::builder_empty().with_attributes(kvs).build(),
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every batch decodes, with the protocol's own prost types, to
        /// exactly what the protocol crate's conversion makes of it.
        #[test]
        fn a_batch_is_the_message_the_protocol_crate_makes(
            resource in resource(),
            spans in proptest::collection::vec(span_data(), 0..12),
        ) {
            prop_assert_eq!(ours(&resource, &spans), official(&resource, &spans));
        }
    }

    /// A length prefix rewritten over more or fewer bytes than were set
    /// aside: the body moves and the prefix is the length's varint.
    #[test]
    fn a_length_is_rewritten_over_the_room_set_aside() {
        for (reserved, len) in [(1, 5), (1, 300), (2, 5), (3, 200), (2, 20_000), (2, 300)] {
            let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut buf = vec![0xAA];
            buf.resize(1 + reserved, 0);
            buf.extend_from_slice(&body);
            set_length(&mut buf, 1, reserved, len);
            let mut expected = vec![0xAA];
            varint(&mut expected, len as u64);
            expected.extend_from_slice(&body);
            assert_eq!(buf, expected, "{reserved} bytes set aside for {len}");
        }
    }

    #[test]
    fn varint_len_is_what_varint_writes() {
        for value in [0, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            varint(&mut buf, value);
            assert_eq!(varint_len(value), buf.len(), "{value}");
        }
    }

    /// A span long enough that its length, and the batch's, take several
    /// bytes (the body moved up behind its length).
    #[test]
    fn long_messages_get_their_full_length() {
        let long = "x".repeat(70_000);
        let span = SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(2),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("long"),
            start_time: UNIX_EPOCH + Duration::from_secs(1),
            end_time: UNIX_EPOCH + Duration::from_secs(2),
            attributes: vec![KeyValue::new("a", long.clone()), KeyValue::new("b", 1)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Ok,
            instrumentation_scope: scope_of(0),
        };
        let resource = Resource::builder_empty().with_attributes([KeyValue::new("service.name", "x")]).build();
        let spans = vec![span.clone(), span];
        assert_eq!(ours(&resource, &spans), official(&resource, &spans));
    }
}

#[cfg(test)]
mod attribute_tests {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use prost::Message as _;

    use super::*;

    /// A span attribute, read back by the protocol crate's own types:
    /// strings whose KeyValue is just under, at and over the one-byte
    /// length (the short path and the general one), empty ones, and the
    /// other scalar types.
    #[test]
    fn a_span_attribute_is_the_key_value_the_protocol_crate_reads() {
        let long = "x".repeat(300);
        let mut cases: Vec<(String, Scalar<'_>)> = vec![
            ("cohort.run.id".into(), Scalar::Str("q1:a:1")),
            ("cohort.empty".into(), Scalar::Str("")),
            (String::new(), Scalar::Str("no key")),
            ("cohort.attempt".into(), Scalar::I64(2)),
            ("cohort.negative".into(), Scalar::I64(-5)),
            ("cohort.accepted".into(), Scalar::Bool(true)),
            ("cohort.refused".into(), Scalar::Bool(false)),
            ("k".into(), Scalar::Str(&long)),
        ];
        // KeyValue length = (2 + name) + (2 + 2 + value) for short ones:
        // 127 is the longest one-byte length.
        for value_len in 110..=125 {
            cases.push(("a.key".into(), Scalar::Str(&long[..value_len])));
        }
        for (name, value) in cases {
            let mut buf = Vec::new();
            span_attribute(&mut buf, &name, value);
            // Span.attributes is field 9: read the one field written.
            let mut bytes = buf.as_slice();
            let (tag, wire) = prost::encoding::decode_key(&mut bytes).unwrap();
            assert_eq!((tag, wire), (9, prost::encoding::WireType::LengthDelimited));
            let len = prost::encoding::decode_varint(&mut bytes).unwrap() as usize;
            assert_eq!(len, bytes.len(), "{name:?}: the length written is the body's");
            let got = KeyValue::decode(bytes).unwrap();
            let expected = KeyValue {
                key: name.clone(),
                value: Some(AnyValue {
                    value: Some(match value {
                        Scalar::Str(s) => any_value::Value::StringValue(s.to_owned()),
                        Scalar::I64(i) => any_value::Value::IntValue(i),
                        Scalar::Bool(b) => any_value::Value::BoolValue(b),
                    }),
                }),
                ..KeyValue::default()
            };
            assert_eq!(got, expected, "{name:?}");
        }
    }
}
