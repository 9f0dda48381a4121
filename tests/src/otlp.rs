//! An OTLP trace and metrics receiver for tests and benchmarks, built from the
//! protocol's own definitions (`opentelemetry-proto`: its tonic
//! `TraceService` server for OTLP/gRPC, its prost messages for
//! OTLP/HTTP with protobuf bodies), so what cohort exports is read by the
//! protocol as published, not by cohort's own code.

#![allow(clippy::expect_used)] // a test fixture: no port, no test

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;

/// One exported span with the service that sent it.
#[derive(Debug, Clone)]
pub struct Got {
    pub service: String,
    pub name: String,
    /// OTLP span kind: 2 server, 3 client.
    pub kind: i32,
    pub trace: Vec<u8>,
    pub id: Vec<u8>,
    pub parent: Vec<u8>,
    /// Start and end, nanoseconds since the Unix epoch.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The span's attributes as text, and the resource's under `resource.`.
    pub attributes: HashMap<String, String>,
}

/// What the receiver took: every span (`keep`) or only how many.
#[derive(Debug, Default)]
struct Taken {
    keep: bool,
    spans: Mutex<Vec<Got>>,
    received: AtomicUsize,
}

type Spans = Arc<Taken>;

/// One exported metric data point (a sum's or a gauge's), with the service
/// that sent it.
#[derive(Debug, Clone)]
pub struct Point {
    pub service: String,
    pub metric: String,
    /// `sum` (monotonic or not) or `gauge`.
    pub kind: &'static str,
    pub attributes: HashMap<String, String>,
    pub value: f64,
}

type Points = Arc<Mutex<Vec<Point>>>;

/// Keeps every sum and gauge point of a metrics export request.
fn collect_points(into: &Points, request: ExportMetricsServiceRequest) {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    let Ok(mut points) = into.lock() else { return };
    for rm in request.resource_metrics {
        let resource = rm.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for sm in rm.scope_metrics {
            for m in sm.metrics {
                let (kind, data_points) = match m.data {
                    Some(Data::Sum(sum)) => ("sum", sum.data_points),
                    Some(Data::Gauge(gauge)) => ("gauge", gauge.data_points),
                    _ => continue,
                };
                for p in data_points {
                    let value = match p.value {
                        Some(Value::AsDouble(v)) => v,
                        #[allow(clippy::cast_precision_loss)]
                        Some(Value::AsInt(v)) => v as f64,
                        None => continue,
                    };
                    points.push(Point {
                        service: service.clone(),
                        metric: m.name.clone(),
                        kind,
                        attributes: attributes(&p.attributes),
                        value,
                    });
                }
            }
        }
    }
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(kv.value.as_ref()))).collect()
}

/// Counts the spans of an export request, and keeps each one unless the
/// receiver only counts.
fn collect(into: &Spans, request: ExportTraceServiceRequest) {
    let n: usize = request.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum();
    into.received.fetch_add(n, Ordering::Relaxed);
    if !into.keep {
        return;
    }
    let Ok(mut spans) = into.spans.lock() else { return };
    for rs in request.resource_spans {
        let resource = rs.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                let mut attrs = attributes(&s.attributes);
                // Resource attributes are checked for secrets with the rest.
                for (k, v) in &resource {
                    attrs.entry(format!("resource.{k}")).or_insert_with(|| v.clone());
                }
                spans.push(Got {
                    service: service.clone(),
                    name: s.name,
                    kind: s.kind,
                    trace: s.trace_id,
                    id: s.span_id,
                    parent: s.parent_span_id,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: attrs,
                });
            }
        }
    }
}

/// The gRPC face of the metrics receiver.
struct MetricsCollector(Points);

#[tonic::async_trait]
impl MetricsService for MetricsCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        collect_points(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse { partial_success: None }))
    }
}

/// The gRPC face of the receiver.
struct Collector(Spans);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        collect(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A receiver on two loopback ports: OTLP/gRPC, and OTLP/HTTP with
/// protobuf bodies at `/v1/traces`. Its servers run on the runtime that
/// started it.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub grpc_url: String,
    pub http_url: String,
    spans: Spans,
    points: Points,
}

impl Receiver {
    pub async fn start() -> Receiver {
        Receiver::started(true).await
    }

    /// A receiver that decodes every request (as a collector does) but
    /// keeps only the number of spans, for benchmarks: the receiver shares
    /// the machine with what it measures, and keeping hundreds of
    /// thousands of spans, each with a map of its attributes, takes CPU
    /// from the process it traces (`cargo bench -p cohort-cli --bench
    /// lifecycle`, `COHORT_BENCH_KEEP_SPANS`).
    /// [`Receiver::spans`] is empty; [`Receiver::count`] counts.
    pub async fn start_counting() -> Receiver {
        Receiver::started(false).await
    }

    async fn started(keep: bool) -> Receiver {
        let spans: Spans = Arc::new(Taken { keep, ..Taken::default() });
        let points: Points = Arc::default();
        let (grpc_url, http_url) = serve(Arc::clone(&spans), Arc::clone(&points)).await;
        Receiver { grpc_url, http_url, spans, points }
    }

    /// Every metric data point received so far, in arrival order.
    pub fn points(&self) -> Vec<Point> {
        self.points.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Every span received so far (none for a counting receiver).
    pub fn spans(&self) -> Vec<Got> {
        self.spans.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// How many spans were received so far.
    pub fn count(&self) -> usize {
        self.spans.received.load(Ordering::Relaxed)
    }
}

async fn serve(spans: Spans, points: Points) -> (String, String) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port for OTLP/gRPC");
    let grpc_url = format!("http://{}", grpc.local_addr().expect("its address"));
    let service = TraceServiceServer::new(Collector(Arc::clone(&spans)));
    let metrics = MetricsServiceServer::new(MetricsCollector(Arc::clone(&points)));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .add_service(metrics)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc)),
    );
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port for OTLP/HTTP");
    let http_url = format!("http://{}", http.local_addr().expect("its address"));
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let spans = Arc::clone(&spans);
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        collect(&spans, request);
                        (
                            axum::http::StatusCode::OK,
                            ExportTraceServiceResponse { partial_success: None }.encode_to_vec(),
                        )
                    }
                    Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                }
            }
        }),
    );
    let app = app.route(
        "/v1/metrics",
        axum::routing::post(move |body: axum::body::Bytes| {
            let points = Arc::clone(&points);
            async move {
                match ExportMetricsServiceRequest::decode(body) {
                    Ok(request) => {
                        collect_points(&points, request);
                        (
                            axum::http::StatusCode::OK,
                            ExportMetricsServiceResponse { partial_success: None }.encode_to_vec(),
                        )
                    }
                    Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(http, app).await });
    (grpc_url, http_url)
}
