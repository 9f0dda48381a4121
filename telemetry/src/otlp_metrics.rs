//! OTLP metrics export, the alternative to scraping `/metrics` (SPEC
//! section 10), through the same [`OpsRole`] every role already gives its
//! operations server: one source for both, so the two can never disagree.
//!
//! On only when `OTEL_METRICS_EXPORTER=otlp` (Prometheus `/metrics` is the
//! default way in; traces and metrics are asked for separately). The
//! endpoint, protocol, headers and timeout are the traces' standard
//! variables (`OTEL_EXPORTER_OTLP_[METRICS_]*`), the interval
//! `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default).
//!
//! Each family of the role's exposition becomes an asynchronous OTel
//! instrument whose callback reads the role's current figures: a counter
//! a cumulative sum, a gauge a gauge. OTel has no asynchronous histogram,
//! so a histogram goes out as Prometheus lays it out: the cumulative sums
//! `NAME_bucket` (with the `le` attribute), `NAME_sum` and `NAME_count`.
//! Label names become attribute names, values stay as they are.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};

use crate::TelemetryError;
use crate::export::{Protocol, env, exporter_runtime, protocol_for, resource, sdk_disabled};
use crate::ops::OpsRole;

/// How long one reading of the role's figures serves every instrument's
/// callback of a collection (they are called one after the other).
const READING_LIFETIME: Duration = Duration::from_millis(50);

/// One sample: its labels and value.
type Sample = (Vec<(String, String)>, f64);

/// One reading of a role's figures: samples by sample name.
type Reading = Arc<HashMap<String, Vec<Sample>>>;

/// The role's figures by sample name, read at most every
/// [`READING_LIFETIME`].
struct Readings {
    role: Arc<dyn OpsRole>,
    /// The role's runtime: its figures may be a future (the coordinator
    /// reads the ledger), driven from the reader's thread.
    handle: tokio::runtime::Handle,
    last: Mutex<Option<(Instant, Reading)>>,
}

impl Readings {
    fn now(&self) -> Reading {
        let Ok(mut last) = self.last.lock() else { return Arc::default() };
        if let Some((at, samples)) = last.as_ref()
            && at.elapsed() < READING_LIFETIME
        {
            return Arc::clone(samples);
        }
        // Called on the SDK's reader thread, never a runtime's: blocking
        // on the role's runtime here is allowed.
        let text = self.handle.block_on(self.role.metrics());
        let samples = Arc::new(parse_samples(&text));
        *last = Some((Instant::now(), Arc::clone(&samples)));
        samples
    }

    /// Makes the next callback read the role again (before the last
    /// export, so it carries the final figures).
    fn invalidate(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = None;
        }
    }

    fn observe(&self, name: &str) -> Vec<(f64, Vec<KeyValue>)> {
        let samples = self.now();
        samples
            .get(name)
            .map(|s| {
                s.iter()
                    .map(|(labels, v)| (*v, labels.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The families of an exposition: name and type, in order.
pub fn parse_families(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
        .collect()
}

/// The samples of an exposition by sample name (`NAME`, `NAME_bucket`,
/// ...). Lines that do not parse are left out.
pub fn parse_samples(text: &str) -> HashMap<String, Vec<Sample>> {
    let mut out: HashMap<String, Vec<Sample>> = HashMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line.rfind('}') else { continue };
                (&line[..open], parse_labels(&line[open + 1..close]), &line[close + 1..])
            }
            None => match line.split_once(' ') {
                Some((name, rest)) => (name, Some(Vec::new()), rest),
                None => continue,
            },
        };
        let value = match rest.split_whitespace().next() {
            Some("+Inf") => f64::INFINITY,
            Some("-Inf") => f64::NEG_INFINITY,
            Some(v) => match v.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue,
            },
            None => continue,
        };
        if let Some(labels) = labels {
            out.entry(name.to_owned()).or_default().push((labels, value));
        }
    }
    out
}

/// `a="x",b="y"` (with `\\`, `\"`, `\n` escapes); None when malformed.
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(labels);
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        labels.push((name.trim().to_owned(), value));
    }
}

/// Registers the instruments of one family on `meter`.
fn register(meter: &Meter, readings: &Arc<Readings>, name: &str, kind: &str) {
    let sums: Vec<String> = match kind {
        "counter" => vec![name.to_owned()],
        "histogram" => vec![format!("{name}_bucket"), format!("{name}_sum"), format!("{name}_count")],
        _ => Vec::new(),
    };
    for sample in sums {
        let readings = Arc::clone(readings);
        let key = sample.clone();
        let _ = meter
            .f64_observable_counter(sample)
            .with_callback(move |observer| {
                for (v, attrs) in readings.observe(&key) {
                    observer.observe(v, &attrs);
                }
            })
            .build();
    }
    if kind == "gauge" || kind == "untyped" {
        let readings = Arc::clone(readings);
        let key = name.to_owned();
        let _ = meter
            .f64_observable_gauge(name.to_owned())
            .with_callback(move |observer| {
                for (v, attrs) in readings.observe(&key) {
                    observer.observe(v, &attrs);
                }
            })
            .build();
    }
}

/// The running OTLP metrics export of one role. Stop it with
/// [`MetricsExport::shutdown`] (it sends the last figures).
#[derive(Debug)]
pub struct MetricsExport {
    provider: SdkMeterProvider,
    runtime: tokio::runtime::Runtime,
    readings: Arc<Readings>,
}

impl std::fmt::Debug for Readings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readings")
    }
}

impl MetricsExport {
    /// Starts exporting `role`'s metrics when `OTEL_METRICS_EXPORTER=otlp`
    /// (None otherwise). Called on the role's runtime.
    pub async fn start(service_name: &str, role: Arc<dyn OpsRole>) -> Result<Option<MetricsExport>, TelemetryError> {
        let wanted = env("OTEL_METRICS_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("otlp")) && !sdk_disabled();
        if !wanted {
            return Ok(None);
        }
        let protocol = protocol_for("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")?;
        let families = parse_families(&role.metrics().await);
        let runtime = exporter_runtime("otlp-metrics")?;
        let exporter = {
            let _entered = runtime.enter();
            let built = match protocol {
                Protocol::Grpc => opentelemetry_otlp::MetricExporter::builder().with_tonic().build(),
                Protocol::HttpProtobuf => opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .build(),
            };
            built.map_err(|e| TelemetryError::Exporter { protocol: protocol.name(), message: e.to_string() })?
        };
        let exporter = OnRuntime { inner: exporter, handle: runtime.handle().clone() };
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter).build())
            .with_resource(resource(service_name))
            .build();
        let meter = provider.meter("cohort");
        let readings = Arc::new(Readings { role, handle: tokio::runtime::Handle::current(), last: Mutex::new(None) });
        for (name, kind) in &families {
            register(&meter, &readings, name, kind);
        }
        Ok(Some(MetricsExport { provider, runtime, readings }))
    }

    /// Sends the last figures and stops. Blocks: call it from a blocking
    /// thread (`spawn_blocking`) when on a runtime.
    pub fn shutdown(self) {
        let MetricsExport { provider, runtime, readings } = self;
        readings.invalidate();
        if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: metrics export did not finish: {e}");
        }
        runtime.shutdown_background();
    }
}

/// A metric exporter whose calls run on `handle`'s runtime: the SDK's
/// reader calls it from a thread of its own, where tonic and reqwest find
/// no reactor.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: E,
    handle: tokio::runtime::Handle,
}

impl<E: PushMetricExporter> PushMetricExporter for OnRuntime<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let result = self.handle.block_on(self.inner.export(metrics));
        std::future::ready(result)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn expositions_parse_into_families_and_samples() {
        let text = "# HELP a_total what\n# TYPE a_total counter\na_total{class=\"ok\",arm=\"x\\\"y\"} 3\na_total{class=\"timeout\"} 1\n\
                    # TYPE d_seconds histogram\nd_seconds_bucket{le=\"0.5\"} 2\nd_seconds_bucket{le=\"+Inf\"} 4\nd_seconds_sum 1.25\nd_seconds_count 4\n\
                    # TYPE up gauge\nup 1\n";
        assert_eq!(
            parse_families(text),
            vec![
                ("a_total".to_owned(), "counter".to_owned()),
                ("d_seconds".to_owned(), "histogram".to_owned()),
                ("up".to_owned(), "gauge".to_owned())
            ]
        );
        let s = parse_samples(text);
        assert_eq!(s["a_total"][0], (vec![("class".into(), "ok".into()), ("arm".into(), "x\"y".into())], 3.0));
        assert_eq!(s["a_total"].len(), 2);
        assert_eq!(s["d_seconds_bucket"][1], (vec![("le".into(), "+Inf".into())], 4.0));
        assert_eq!(s["d_seconds_sum"][0].1, 1.25);
        assert_eq!(s["up"][0], (Vec::new(), 1.0));
    }
}
