//! OTLP trace export, configured by the standard environment variables
//! (<https://opentelemetry.io/docs/specs/otel/protocol/exporter/>):
//! - on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set or `OTEL_TRACES_EXPORTER=otlp`;
//!   off by default, and off with `OTEL_TRACES_EXPORTER=none` or
//!   `OTEL_SDK_DISABLED=true`;
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`:
//!   `grpc` or `http/protobuf` (the specification's default);
//! - headers, timeout, compression, `OTEL_BSP_*` batching,
//!   `OTEL_TRACES_SAMPLER(_ARG)`, `OTEL_SERVICE_NAME` and
//!   `OTEL_RESOURCE_ATTRIBUTES` as the SDK and exporter read them.
//!
//! The SDK's batch processor exports from a thread of its own, where the
//! tonic and reqwest clients find no Tokio reactor; the exporter therefore
//! runs on a one-thread runtime this module owns ([`OnRuntime`]), whatever
//! runtime (if any) the role runs on. Neither ever runs on the role's own
//! runtime threads, and a request never waits for either: a span that
//! ends is handed to the processor's queue without blocking, and dropped
//! (counted by the SDK) when the queue is full.
//!
//! The queue is [`QUEUE_SIZE`] spans and an export carries up to
//! [`EXPORT_BATCH_SIZE`], unless `OTEL_BSP_MAX_QUEUE_SIZE` and
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` say otherwise ([`BatchSettings`], for
//! the SDK's processor and the direct spans' queue alike). The SDK's 2,048 and 512
//! lose spans at cohort's rates: the queue is 0.2 s of the judge proxy's
//! spans at 5,000 requests/s (two spans each), and the coordinator at
//! 17,000 lifecycles/s (2.5 spans each) dropped 17% of its spans in
//! 512-span exports, one after another, and none in 2,048-span ones
//! (`cargo bench -p cohort-cli --bench lifecycle`, `COHORT_BENCH_CONFIGS=tracing`).

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
};
use sha2::{Digest as _, Sha256};

use crate::TelemetryError;

/// The OTLP protocols this build carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Grpc,
    HttpProtobuf,
}

impl Protocol {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// Whether `OTEL_SDK_DISABLED=true` turns every signal off.
pub(crate) fn sdk_disabled() -> bool {
    env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The one-thread runtime an exporter runs on (see the module header),
/// its thread named `name`.
pub(crate) fn exporter_runtime(name: &str) -> Result<tokio::runtime::Runtime, TelemetryError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(TelemetryError::Runtime)
}

/// Whether the environment asks for OTLP trace export.
fn wanted() -> bool {
    if sdk_disabled() {
        return false;
    }
    match env("OTEL_TRACES_EXPORTER").map(|v| v.to_ascii_lowercase()) {
        Some(v) if v == "none" => false,
        Some(v) if v == "otlp" => true,
        _ => env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some(),
    }
}

/// The protocol of one signal: its own variable (`signal_var`), else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
pub(crate) fn protocol_for(signal_var: &'static str) -> Result<Protocol, TelemetryError> {
    for var in [signal_var, "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(value) = env(var) {
            return match value.as_str() {
                "grpc" => Ok(Protocol::Grpc),
                "http/protobuf" => Ok(Protocol::HttpProtobuf),
                _ => Err(TelemetryError::Protocol { var, value }),
            };
        }
    }
    Ok(Protocol::HttpProtobuf)
}

/// Whether the operator named the service (then `service_name` is not
/// applied over it).
fn service_named_by_env() -> bool {
    env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim().starts_with("service.name=")))
}

/// The resource every signal of this process carries: `service.name`
/// (`service_name` unless the operator named it), `service.version`, and
/// what `OTEL_RESOURCE_ATTRIBUTES` adds.
pub(crate) fn resource(service_name: &str) -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if !service_named_by_env() {
        resource = resource.with_service_name(service_name.to_owned());
    }
    resource.build()
}

/// The batch processor's queue, in spans, when `OTEL_BSP_MAX_QUEUE_SIZE`
/// does not set it (see the module header): about a second of the
/// coordinator's spans at its full rate, some 15 MB at most.
pub const QUEUE_SIZE: usize = 16_384;

/// The most spans one export carries, when
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` does not set it (see the module
/// header). The SDK lowers it to the queue's size when the queue is
/// smaller.
pub const EXPORT_BATCH_SIZE: usize = 2_048;

/// How spans are batched, for the SDK's batch processor and the direct
/// spans' queue alike: `OTEL_BSP_MAX_QUEUE_SIZE` (else [`QUEUE_SIZE`]),
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (else [`EXPORT_BATCH_SIZE`], and never
/// more than the queue, as the SDK rules) and `OTEL_BSP_SCHEDULE_DELAY`
/// in milliseconds (else the specification's 5,000). A value that is not
/// a positive number is ignored, as the SDK ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSettings {
    pub(crate) max_queue: usize,
    pub(crate) max_batch: usize,
    pub(crate) delay: Duration,
}

impl BatchSettings {
    pub(crate) fn from_env() -> BatchSettings {
        let read = |name: &str| env(name).and_then(|v| v.parse::<u64>().ok()).filter(|n| *n > 0);
        let max_queue = read("OTEL_BSP_MAX_QUEUE_SIZE").map_or(QUEUE_SIZE, |n| n as usize);
        let max_batch = read("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").map_or(EXPORT_BATCH_SIZE, |n| n as usize).min(max_queue);
        let delay = Duration::from_millis(read("OTEL_BSP_SCHEDULE_DELAY").unwrap_or(5_000));
        BatchSettings { max_queue, max_batch, delay }
    }

    fn sdk(self) -> opentelemetry_sdk::trace::BatchConfig {
        BatchConfigBuilder::default()
            .with_max_queue_size(self.max_queue)
            .with_max_export_batch_size(self.max_batch)
            .with_scheduled_delay(self.delay)
            .build()
    }
}

/// The running export: the SDK's provider, the direct spans' queue and
/// the runtime their exporter runs on.
#[derive(Debug)]
pub struct TraceExport {
    provider: SdkTracerProvider,
    direct: Option<crate::otlp_trace::queue::Running>,
    runtime: tokio::runtime::Runtime,
}

impl TraceExport {
    /// The export the environment asks for, or None when it asks for none.
    pub fn from_env(service_name: &str) -> Result<Option<TraceExport>, TelemetryError> {
        if !wanted() {
            return Ok(None);
        }
        let protocol = protocol_for("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?;
        let config = crate::otlp_trace::Config::from_env(protocol)?;
        let settings = BatchSettings::from_env();
        let runtime = exporter_runtime("otlp-export")?;
        let resource = resource(service_name);
        // One exporter (its resource set here) for both paths: the SDK's
        // batch processor, which the provider's `tracing` spans go
        // through, and the direct spans' queue (`crate::direct`).
        // tonic's lazy channel starts its worker on the current runtime.
        let exporter = {
            let _entered = runtime.enter();
            Arc::new(crate::otlp_trace::OtlpTraceExporter::new(config, &resource)?)
        };
        let processor =
            BatchSpanProcessor::builder(OnRuntime { inner: Arc::clone(&exporter), handle: runtime.handle().clone() })
                .with_batch_config(settings.sdk())
                .build();
        let direct = crate::otlp_trace::queue::start(runtime.handle(), exporter, settings);
        let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Some(TraceExport { provider, direct, runtime }))
    }

    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer("cohort")
    }

    /// Exports what is still batched, then stops. Safe inside or outside
    /// an async runtime.
    pub fn shutdown(self) {
        let TraceExport { provider, direct, runtime } = self;
        if let Some(direct) = direct {
            direct.shutdown(Duration::from_secs(5));
        }
        if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: trace export did not finish: {e}");
        }
        runtime.shutdown_background();
    }
}

/// A span exporter whose calls run on `handle`'s runtime (see the module
/// header).
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    handle: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let inner = Arc::clone(&self.inner);
        let task = self.handle.spawn(async move { inner.export(batch).await });
        async move { task.await.unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string()))) }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.force_flush()
    }

    // No `set_resource`: the exporter is shared with the direct spans'
    // queue and was given the resource when it was built.
}

/// How a run's trace and root span ids are derived from its key (the
/// cohort's manifest hash, `:`, the run id): the trace id is the first 16
/// bytes of SHA-256 over `cohort-run-trace\0` and the key, the root span
/// id the first 8 bytes of SHA-256 over `cohort-run-root\0` and the key
/// (neither ever the invalid all-zero id). The head of the key is absorbed
/// when made: the ids of `head` followed by `tail` hash only the tail. A coordinator absorbs its cohort's part of every run's
/// key once (`RunRoots`), and the first of the two SHA-256 blocks a run's
/// key takes is then never compressed again.
#[derive(Debug, Clone)]
pub(crate) struct RunKeyHashers {
    trace: Sha256,
    root: Sha256,
}

impl RunKeyHashers {
    pub(crate) fn new(head: &str) -> RunKeyHashers {
        RunKeyHashers {
            trace: Sha256::new().chain_update(b"cohort-run-trace\0").chain_update(head.as_bytes()),
            root: Sha256::new().chain_update(b"cohort-run-root\0").chain_update(head.as_bytes()),
        }
    }

    pub(crate) fn trace_id(&self, tail: &str) -> TraceId {
        TraceId::from_bytes(id_bytes(&self.trace, tail))
    }

    pub(crate) fn root_span_id(&self, tail: &str) -> SpanId {
        SpanId::from_bytes(id_bytes(&self.root, tail))
    }
}

/// The first `N` bytes of the digest of `head` (absorbed) and `tail`,
/// never all zeros (the invalid id): the last byte is then 1.
fn id_bytes<const N: usize>(head: &Sha256, tail: &str) -> [u8; N] {
    let digest = head.clone().chain_update(tail.as_bytes()).finalize();
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&digest[..N]);
    if bytes == [0u8; N] {
        bytes[N - 1] = 1;
    }
    bytes
}

/// Whether the sampler `OTEL_TRACES_SAMPLER(_ARG)` names keeps the trace
/// `trace_id` at its root, decided as the SDK's own samplers decide, so
/// the spans of a run made as children of its root (which may be exported
/// by another process, or not yet) are kept or dropped with it.
pub(crate) fn root_sampled(trace_id: TraceId) -> bool {
    use opentelemetry::trace::SpanKind;
    use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample as _};
    // Read once: every lease asks.
    static SAMPLER: std::sync::OnceLock<Sampler> = std::sync::OnceLock::new();
    let sampler = SAMPLER.get_or_init(|| {
        let ratio = || env("OTEL_TRACES_SAMPLER_ARG").and_then(|a| a.trim().parse::<f64>().ok()).unwrap_or(1.0);
        match env("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            Some("always_off" | "parentbased_always_off") => Sampler::AlwaysOff,
            Some("traceidratio" | "parentbased_traceidratio") => Sampler::TraceIdRatioBased(ratio()),
            _ => Sampler::AlwaysOn,
        }
    });
    let result = sampler.should_sample(None, trace_id, "cohort run", &SpanKind::Internal, &[], &[]);
    result.decision == SamplingDecision::RecordAndSample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_key_gives_one_trace_id_and_one_root_span_id_and_others_differ() {
        let ids = RunKeyHashers::new("m:");
        assert_eq!(ids.trace_id("q1:a:1"), ids.trace_id("q1:a:1"));
        assert_ne!(ids.trace_id("q1:a:1"), ids.trace_id("q1:a:2"));
        assert_ne!(ids.trace_id("q1:a:1"), TraceId::INVALID);
        assert_eq!(ids.root_span_id("q1:a:1"), ids.root_span_id("q1:a:1"));
        assert_ne!(ids.root_span_id("q1:a:1"), ids.root_span_id("q1:a:2"));
        assert_ne!(ids.root_span_id("q1:a:1"), SpanId::INVALID);
    }

    /// The ids are SHA-256 of the prefix and the whole key, wherever the
    /// key is cut between the part absorbed once and the run's part: a
    /// run keeps its trace whichever coordinator (or version) leases it.
    #[test]
    fn ids_from_an_absorbed_head_are_the_digest_of_the_whole_key() {
        let manifest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let run = "question-with-a-long-id:arm:17";
        let key = format!("{manifest}:{run}");
        let whole = |prefix: &[u8]| Sha256::new().chain_update(prefix).chain_update(key.as_bytes()).finalize();
        let trace = whole(b"cohort-run-trace\0");
        let root = whole(b"cohort-run-root\0");
        for cut in [0, 1, 40, manifest.len(), manifest.len() + 1, key.len()] {
            let hashers = RunKeyHashers::new(&key[..cut]);
            assert_eq!(hashers.trace_id(&key[cut..]).to_bytes(), trace[..16], "cut at {cut}");
            assert_eq!(hashers.root_span_id(&key[cut..]).to_bytes(), root[..8], "cut at {cut}");
        }
    }
}
