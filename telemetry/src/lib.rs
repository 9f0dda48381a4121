//! Telemetry for every role (SPEC section 10), in one crate so the
//! coordinator, the worker, the judge proxy and the CLI set it up the same
//! way and share its pieces:
//! - logs: `tracing` events to stderr, filtered by `RUST_LOG`;
//! - traces: OpenTelemetry spans exported over OTLP ([`init`]), off unless
//!   the standard `OTEL_*` environment variables ask for them;
//! - W3C trace context carried through gRPC metadata, the lease and the
//!   HTTP calls to providers ([`propagation`]), and a run's trace id
//!   derived from the run ([`RunRoot`]), so every attempt of a run, on
//!   any worker, lands in one trace;
//! - the GenAI semantic-convention attributes of LLM calls ([`genai`]);
//! - Prometheus metrics and the operations endpoints (`/metrics`,
//!   `/healthz`, `/readyz`) every role serves.
//!
//! No prompt, output or key is ever put in a span attribute: spans carry
//! ids, names, counts, models and outcome classes.

mod direct;
mod export;
pub mod genai;
pub mod metrics;
pub mod ops;
mod otlp_metrics;
mod otlp_trace;
pub mod propagation;
mod spares;

use std::sync::OnceLock;

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use direct::{DirectSpan, SpanBatch};
pub use export::TraceExport;
pub use otlp_metrics::MetricsExport;

/// Why telemetry could not be set up: an `OTEL_*` setting this tool cannot
/// honour. Named with the variable, so the operator knows what to change.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}={value:?} is not supported: use `grpc` or `http/protobuf`")]
    Protocol { var: &'static str, value: String },
    #[error("cannot build the OTLP trace exporter ({protocol}): {message}")]
    Exporter { protocol: &'static str, message: String },
    #[error("cannot start the OTLP export thread: {0}")]
    Runtime(std::io::Error),
}

/// What [`init`] set up. Dropping it flushes the spans still batched and
/// stops the exporter: keep it alive for the process's life (in `main`,
/// outside any async runtime).
#[derive(Debug)]
#[must_use = "dropping the guard stops trace export"]
pub struct Telemetry {
    export: Option<TraceExport>,
}

impl Telemetry {
    /// Whether spans are exported (the `OTEL_*` variables asked for it).
    pub fn exporting(&self) -> bool {
        self.export.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(export) = self.export.take() {
            export.shutdown();
        }
    }
}

/// The crates whose spans are exported: cohort's own, at `info` and above
/// (the spans named in SPEC section 10). The libraries' own spans (hyper,
/// h2, tonic internals) would be many and say little.
const TRACED_TARGETS: [&str; 6] =
    ["cohort", "cohort_coordinator", "cohort_worker", "cohort_judge_proxy", "cohort_telemetry", "cohort_cli"];

/// Installs the process's subscriber once (later calls do nothing and
/// return a guard that exports nothing):
/// - stderr logs filtered by `RUST_LOG` (else `default_level`), coloured
///   only when stderr is a terminal;
/// - when the standard variables ask for it ([`TraceExport::from_env`]),
///   cohort's spans exported over OTLP with `service_name` as the default
///   `service.name` (`OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
///   override it), sampled as `OTEL_TRACES_SAMPLER` says, and the W3C
///   trace-context propagator installed.
pub fn init(service_name: &str, default_level: &str) -> Result<Telemetry, TelemetryError> {
    static ONCE: OnceLock<()> = OnceLock::new();
    if ONCE.set(()).is_err() {
        return Ok(Telemetry { export: None });
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour only for a person at a terminal: a log file or a pipe gets
    // plain text (no ANSI codes for grep, log shippers and tests).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi).with_filter(filter);
    let export = TraceExport::from_env(service_name)?;
    // The span layer has its own filter: `RUST_LOG=warn` quiets the logs
    // of a command whose stdout is its result, not its traces.
    let spans = export.as_ref().map(|e| {
        let targets = TRACED_TARGETS
            .iter()
            .fold(tracing_subscriber::filter::Targets::new(), |t, name| t.with_target(*name, tracing::Level::INFO));
        // What a request pays for a span is kept to the span itself: no
        // busy/idle timing (two clock reads and a lock on every poll of an
        // instrumented future, two attributes) and no OpenTelemetry context
        // made current on every poll (a parent is found through `tracing`'s
        // own current span; cohort propagates from the span, never from
        // the ambient context).
        tracing_opentelemetry::layer()
            .with_tracer(e.tracer())
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_context_activation(false)
            .with_filter(targets)
    });
    let _ = tracing_subscriber::registry().with(logs).with(spans).try_init();
    EXPORTING.store(export.is_some(), std::sync::atomic::Ordering::Relaxed);
    Ok(Telemetry { export })
}

/// Whether [`init`] set up span export. Without it no run's trace ids are
/// derived ([`RunRoots::of`]): an untraced coordinator pays nothing for them.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The root of one run's trace: the trace id and the root span id, both
/// derived from the run's key (the cohort's manifest hash and the run id),
/// and the sampler's decision for that trace, worked out once per lease and
/// given to [`run_root_span`] and [`DirectSpan::under_root`] ([`RunRoots::of`]).
/// Empty (nothing derived) when spans are not exported.
#[derive(Debug, Clone)]
pub struct RunRoot(Option<opentelemetry::trace::SpanContext>);

/// Derives the [`RunRoot`]s of one cohort's runs: a run's key is the
/// cohort's manifest hash, `:` and the run id, and the cohort's part is
/// hashed once, here, not once per lease.
#[derive(Debug, Clone)]
pub struct RunRoots(export::RunKeyHashers);

impl RunRoots {
    /// The roots of the runs of the cohort whose manifest has SHA-256
    /// `manifest_sha256`.
    pub fn new(manifest_sha256: &str) -> RunRoots {
        RunRoots(export::RunKeyHashers::new(&format!("{manifest_sha256}:")))
    }

    /// The root of run `run_id`; empty when spans are not exported.
    pub fn of(&self, run_id: &str) -> RunRoot {
        use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
        if !EXPORTING.load(std::sync::atomic::Ordering::Relaxed) {
            return RunRoot(None);
        }
        let trace_id = self.0.trace_id(run_id);
        let flags = if export::root_sampled(trace_id) { TraceFlags::SAMPLED } else { TraceFlags::default() };
        RunRoot(Some(SpanContext::new(trace_id, self.0.root_span_id(run_id), flags, true, TraceState::NONE)))
    }
}

/// The root span of a run's trace, `cohort run`, with the ids [`RunRoot`]
/// derived (the parent [`DirectSpan::under_root`] gives its attempts) and
/// `attributes`, exported when dropped or ended with a [`SpanBatch`]. The
/// coordinator makes it once, when it leases the run's first attempt: a
/// span of no duration at `at`, the lease's start, marking the run's
/// start (the attempts below it carry the time). So every attempt of a
/// run, leased by any coordinator process, lands in one tree, and a ratio
/// sampler (`OTEL_TRACES_SAMPLER=traceidratio`) keeps or drops a run whole.
/// Nothing without export.
pub fn run_root_span(root: &RunRoot, attributes: &[(&'static str, &str)], at: std::time::SystemTime) -> DirectSpan {
    let mut span = DirectSpan::run_root(root, "cohort run", at);
    for (key, value) in attributes {
        span.str(key, value);
    }
    span.ending_at(at)
}

/// A span another span links to ([`DirectSpan::link`]), its context read once:
/// the coordinator links every lease to the cohort's span.
#[derive(Debug, Clone)]
pub struct LinkTarget(opentelemetry::trace::SpanContext);

impl LinkTarget {
    /// The target `span` is (read once; [`DirectSpan::link`] links to it).
    pub fn of(span: &tracing::Span) -> LinkTarget {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        LinkTarget(span.context().span().span_context().clone())
    }
}
