//! cohort's OTLP trace exporter: the SDK's batches encoded once, straight
//! from `SpanData` to the protocol's bytes ([`encode`]), and sent over
//! OTLP/gRPC (tonic, the request's bytes as they are) or OTLP/HTTP with a
//! protobuf body (reqwest). Every span of a process goes through it: the
//! `tracing` spans through the SDK's batch processor, the coordinator's
//! direct spans ([`crate::direct`]) through their own queue ([`queue`]),
//! already encoded.
//!
//! Why not `opentelemetry-otlp`'s exporter: it copies every batch whole to
//! keep it for a retry, turns each span into the protocol crate's prost
//! messages (a `Vec` per id, a `String` per name, attribute key and value)
//! and only then encodes; on the coordinator that was most of what
//! tracing cost (issue 24: `cargo bench -p cohort-cli --bench lifecycle`
//! with `COHORT_BENCH_CONFIGS=tracing`). Here a retry resends the same
//! bytes. Metrics keep the SDK's exporter (a few hundred points a minute).
//!
//! Configured by the specification's variables
//! (<https://opentelemetry.io/docs/specs/otel/protocol/exporter/>), each
//! `OTEL_EXPORTER_OTLP_TRACES_*` before its `OTEL_EXPORTER_OTLP_*`:
//! - `ENDPOINT`: the traces' own URL as it is; the general one as it is
//!   for gRPC and with `/v1/traces` appended for HTTP; by default
//!   `http://localhost:4317` and `http://localhost:4318/v1/traces`;
//! - `HEADERS`: `key=value` pairs separated by commas, values
//!   percent-decoded; the traces' own win over the general ones;
//! - `TIMEOUT`: milliseconds per request, 10,000 by default;
//! - `COMPRESSION`: `none` (this build carries no gzip, and says so).
//!
//! Retries follow OTLP's rules
//! (<https://opentelemetry.io/docs/specs/otlp/#failures>), as the SDK's
//! exporter retries: gRPC `UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE`, `DATA_LOSS`, HTTP 429, 502, 503, 504 and a
//! request that got no answer are tried again, up to [`RETRIES`] times
//! with a backoff from 100 ms to 1.6 s (an HTTP `Retry-After` is
//! honoured instead, up to 30 s); anything else fails the batch at once.
//! An error names the endpoint's protocol and status, never a header's
//! value (headers carry collectors' tokens).

pub(crate) mod encode;
pub(crate) mod queue;

use std::str::FromStr as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable as _};
use bytes::{Buf as _, BufMut as _, Bytes};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::TelemetryError;
use crate::export::{Protocol, env};

use encode::EncodedResource;

/// Retries of one batch after its first try (the SDK's exporter's too).
pub const RETRIES: usize = 3;

/// The longest `Retry-After` waited for before a batch is tried again.
const MAX_THROTTLE: Duration = Duration::from_secs(30);

/// The gRPC method of OTLP's trace service.
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Where and how batches go, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) protocol: Protocol,
    pub(crate) endpoint: String,
    /// Header names (lowercase) and values, values decoded.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
}

impl Config {
    /// The configuration the environment gives `protocol` (see the module
    /// header); an error names the variable that is wrong.
    pub(crate) fn from_env(protocol: Protocol) -> Result<Config, TelemetryError> {
        Config::from_vars(protocol, env)
    }

    /// As [`Config::from_env`], with the variables `var` gives.
    fn from_vars(protocol: Protocol, var: impl Fn(&str) -> Option<String>) -> Result<Config, TelemetryError> {
        let endpoint = match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            (Some(own), _) => own,
            (None, Some(general)) => match protocol {
                Protocol::Grpc => general,
                Protocol::HttpProtobuf => format!("{}/v1/traces", general.trim_end_matches('/')),
            },
            (None, None) => match protocol {
                Protocol::Grpc => "http://localhost:4317".to_owned(),
                Protocol::HttpProtobuf => "http://localhost:4318/v1/traces".to_owned(),
            },
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(config_error(protocol, format!("endpoint {endpoint:?} is not an http:// or https:// URL")));
        }
        if protocol == Protocol::Grpc && endpoint.starts_with("https://") {
            return Err(config_error(
                protocol,
                "OTLP/gRPC over TLS is not in this build: use http/protobuf for an https:// endpoint, or a \
                 collector on a trusted network"
                    .to_owned(),
            ));
        }
        let mut headers: Vec<(String, String)> = Vec::new();
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"] {
            for (key, value) in parse_headers(name, var(name).as_deref().unwrap_or_default())? {
                headers.retain(|(k, _)| *k != key);
                headers.push((key, value));
            }
        }
        let timeout = match ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
            .into_iter()
            .find_map(|name| var(name).map(|value| (name, value)))
        {
            Some((name, value)) => match value.parse::<u64>() {
                Ok(ms) => Duration::from_millis(ms),
                Err(_) => {
                    return Err(config_error(protocol, format!("{name}={value:?} is not a number of milliseconds")));
                }
            },
            None => Duration::from_secs(10),
        };
        let compression =
            var("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION").or_else(|| var("OTEL_EXPORTER_OTLP_COMPRESSION"));
        if let Some(c) = compression
            && !c.eq_ignore_ascii_case("none")
        {
            return Err(config_error(protocol, format!("compression {c:?} is not in this build (only none)")));
        }
        Ok(Config { protocol, endpoint, headers, timeout })
    }
}

fn config_error(protocol: Protocol, message: String) -> TelemetryError {
    TelemetryError::Exporter { protocol: protocol.name(), message }
}

/// `key=value,key2=value2` (W3C baggage's list, values percent-encoded),
/// names lowercased. A malformed entry is refused by its position, not
/// its text (a header's value is a secret).
fn parse_headers(var: &str, list: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut out = Vec::new();
    for (i, entry) in list.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let bad = || TelemetryError::Exporter {
            protocol: "otlp",
            message: format!("{var}: entry {} is not key=value with a valid header name and value", i + 1),
        };
        let (key, value) = entry.split_once('=').ok_or_else(bad)?;
        let key = key.trim().to_ascii_lowercase();
        let value = percent_decode(value.trim()).ok_or_else(bad)?;
        if http::HeaderName::from_str(&key).is_err() || http::HeaderValue::from_str(&value).is_err() {
            return Err(bad());
        }
        out.push((key, value));
    }
    Ok(out)
}

/// `%XX` escapes decoded; None when an escape is malformed or the result
/// is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// What carries a batch.
#[derive(Debug)]
enum Transport {
    Grpc { channel: tonic::transport::Channel, metadata: tonic::metadata::MetadataMap },
    Http { client: reqwest::Client, headers: http::HeaderMap },
}

/// The exporter the batch processor calls (on the export runtime:
/// `crate::export::OnRuntime`).
#[derive(Debug)]
pub(crate) struct OtlpTraceExporter {
    config: Config,
    transport: Transport,
    resource: EncodedResource,
    /// Batches of direct spans that could not be sent (their failures are
    /// logged here; the SDK's processor reports its own).
    failures: AtomicU64,
}

impl OtlpTraceExporter {
    /// The exporter `config` describes. For gRPC, call inside the runtime
    /// it will export on: the channel connects lazily on it.
    pub(crate) fn new(
        config: Config,
        resource: &opentelemetry_sdk::Resource,
    ) -> Result<OtlpTraceExporter, TelemetryError> {
        let transport = match config.protocol {
            Protocol::Grpc => {
                let channel = tonic::transport::Endpoint::from_shared(config.endpoint.clone())
                    .map_err(|e| config_error(config.protocol, format!("endpoint {:?}: {e}", config.endpoint)))?
                    .connect_lazy();
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (key, value) in &config.headers {
                    // Both checked as HTTP headers when read; gRPC metadata
                    // adds that names are not binary (`-bin`).
                    let key = tonic::metadata::MetadataKey::from_str(key).map_err(|_| {
                        config_error(config.protocol, format!("header {key:?} is not a gRPC metadata name"))
                    })?;
                    let value = tonic::metadata::MetadataValue::try_from(value.as_str()).map_err(|_| {
                        config_error(config.protocol, format!("header {key:?}: its value is not valid"))
                    })?;
                    metadata.insert(key, value);
                }
                Transport::Grpc { channel, metadata }
            }
            Protocol::HttpProtobuf => {
                let mut headers = http::HeaderMap::new();
                headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/x-protobuf"));
                for (key, value) in &config.headers {
                    // Checked when read (`parse_headers`).
                    if let (Ok(k), Ok(v)) = (http::HeaderName::from_str(key), http::HeaderValue::from_str(value)) {
                        headers.insert(k, v);
                    }
                }
                let client = reqwest::Client::builder()
                    .timeout(config.timeout)
                    .build()
                    .map_err(|e| config_error(config.protocol, format!("HTTP client: {e}")))?;
                Transport::Http { client, headers }
            }
        };
        Ok(OtlpTraceExporter {
            config,
            transport,
            resource: EncodedResource::new(resource),
            failures: AtomicU64::new(0),
        })
    }

    /// One try of one batch.
    async fn send(&self, body: Bytes) -> Result<(), Failure> {
        match &self.transport {
            Transport::Grpc { channel, metadata } => {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                grpc.ready().await.map_err(|e| Failure::retryable(format!("not connected: {e}")))?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() = metadata.clone();
                request.set_timeout(self.config.timeout);
                let path = http::uri::PathAndQuery::from_static(GRPC_PATH);
                match grpc.unary(request, path, RawCodec).await {
                    Ok(answer) => partial_success(answer.get_ref()),
                    Err(status) => Err(Failure::of_grpc(&status)),
                }
            }
            Transport::Http { client, headers } => {
                let answer = client
                    .post(&self.config.endpoint)
                    .headers(headers.clone())
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| Failure::retryable(format!("no answer: {}", e.without_url())))?;
                let status = answer.status();
                if status.is_success() {
                    let body = answer.bytes().await.unwrap_or_default();
                    return partial_success(&body);
                }
                let retry_after = answer
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s).min(MAX_THROTTLE));
                let retryable = matches!(status.as_u16(), 429 | 502 | 503 | 504);
                Err(Failure { message: format!("HTTP {status}"), retryable, after: retry_after.filter(|_| retryable) })
            }
        }
    }

    /// Sends one encoded request, retrying as the module header says.
    async fn send_with_retries(&self, body: Bytes) -> OTelSdkResult {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_millis(1600))
            .with_max_times(RETRIES)
            .with_jitter();
        (|| self.send(body.clone()))
            .retry(backoff)
            .when(|f| f.retryable)
            .adjust(|f, backoff| f.after.or(backoff))
            .await
            .map_err(|f| {
                OTelSdkError::InternalFailure(format!(
                    "OTLP {} export to {}: {}",
                    self.config.protocol.name(),
                    self.config.endpoint,
                    f.message
                ))
            })
    }

    /// Sends a batch of direct spans ([`queue`]), in cohort's scope, its
    /// buffer given back to the queue once wrapped. A failure is logged
    /// (the first, then every time the count doubles).
    pub(crate) async fn export_encoded(&self, batch: queue::Batch) {
        let body = encode::wrap(&self.resource, &[(crate::direct::scope(), &batch.bytes)]);
        queue::recycle(batch);
        if let Err(e) = self.send_with_retries(Bytes::from(body)).await {
            let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(target: "cohort_telemetry::export", failed_batches = n, "trace export failed: {e}");
            }
        }
    }
}

impl SpanExporter for OtlpTraceExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let body = encode::request(&self.resource, &batch);
        drop(batch);
        self.send_with_retries(Bytes::from(body)).await
    }

    // No `set_resource`: the resource is given when the exporter is built
    // (`OtlpTraceExporter::new`), before the SDK's processor and the direct
    // spans' queue share it.
}

/// Why one try failed, and whether to try again (and when).
#[derive(Debug)]
struct Failure {
    message: String,
    retryable: bool,
    /// The collector's own delay (HTTP `Retry-After`).
    after: Option<Duration>,
}

impl Failure {
    fn retryable(message: String) -> Failure {
        Failure { message, retryable: true, after: None }
    }

    /// OTLP/gRPC's retryable codes (`RESOURCE_EXHAUSTED` only with a
    /// `RetryInfo`, which this exporter does not read: not retried).
    fn of_grpc(status: &tonic::Status) -> Failure {
        use tonic::Code;
        let retryable = matches!(
            status.code(),
            Code::Unavailable
                | Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::OutOfRange
                | Code::DataLoss
        );
        // The status's message may echo what the request carried: the code only.
        Failure { message: format!("gRPC status {:?}", status.code()), retryable, after: None }
    }
}

/// Reads an `ExportTraceServiceResponse` (the protocol crate's message):
/// a `partial_success` with rejected spans or a message fails the batch
/// without a retry, as OTLP says. An answer that does not decode is taken
/// as a success (the collector took the request; OTLP/HTTP allows any
/// body with a 2xx).
fn partial_success(response: &[u8]) -> Result<(), Failure> {
    use prost::Message as _;
    let Ok(ExportTraceServiceResponse { partial_success: Some(partial) }) =
        ExportTraceServiceResponse::decode(response)
    else {
        return Ok(());
    };
    if partial.rejected_spans == 0 && partial.error_message.is_empty() {
        return Ok(());
    }
    Err(Failure {
        message: format!("the collector rejected {} spans: {}", partial.rejected_spans, partial.error_message),
        retryable: false,
        after: None,
    })
}

/// A gRPC codec that sends the request's bytes as they are and keeps the
/// answer's bytes (the message is already protobuf: [`encode`]).
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(protocol: Protocol, vars: &[(&str, &str)]) -> Result<Config, TelemetryError> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::from_vars(protocol, |name| vars.get(name).cloned())
    }

    #[test]
    fn endpoints_follow_the_specification() {
        assert_eq!(config(Protocol::Grpc, &[]).unwrap().endpoint, "http://localhost:4317");
        assert_eq!(config(Protocol::HttpProtobuf, &[]).unwrap().endpoint, "http://localhost:4318/v1/traces");
        let general = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")];
        assert_eq!(config(Protocol::HttpProtobuf, &general).unwrap().endpoint, "http://collector:4318/v1/traces");
        assert_eq!(config(Protocol::Grpc, &general).unwrap().endpoint, "http://collector:4318/");
        let own =
            [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2/x")];
        assert_eq!(config(Protocol::HttpProtobuf, &own).unwrap().endpoint, "http://b:2/x");
        assert!(config(Protocol::Grpc, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]).is_err());
        assert!(config(Protocol::Grpc, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317")]).is_err());
    }

    #[test]
    fn headers_are_decoded_and_the_traces_own_win() {
        let c = config(
            Protocol::HttpProtobuf,
            &[
                ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20general, x-team = a"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20traces"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.headers,
            vec![("x-team".to_owned(), "a".to_owned()), ("authorization".to_owned(), "Bearer traces".to_owned())]
        );
    }

    #[test]
    fn a_bad_header_is_named_by_position_never_by_its_value() {
        let err = config(Protocol::HttpProtobuf, &[("OTEL_EXPORTER_OTLP_HEADERS", "ok=1,secret-token-xyz")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_HEADERS: entry 2"), "{err}");
        assert!(!err.contains("secret-token-xyz"), "{err}");
        assert!(config(Protocol::HttpProtobuf, &[("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz")]).is_err());
    }

    #[test]
    fn timeout_and_compression() {
        assert_eq!(config(Protocol::Grpc, &[]).unwrap().timeout, Duration::from_secs(10));
        let t = [("OTEL_EXPORTER_OTLP_TIMEOUT", "500"), ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250")];
        assert_eq!(config(Protocol::Grpc, &t).unwrap().timeout, Duration::from_millis(250));
        let err = config(Protocol::Grpc, &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]).unwrap_err().to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_TIMEOUT"), "{err}");
        assert!(config(Protocol::Grpc, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "none")]).is_ok());
        let err = config(Protocol::Grpc, &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]).unwrap_err().to_string();
        assert!(err.contains("gzip"), "{err}");
    }

    #[test]
    fn a_partial_success_fails_the_batch_and_an_empty_answer_does_not() {
        use opentelemetry_proto::tonic::collector::trace::v1::{ExportTracePartialSuccess, ExportTraceServiceResponse};
        use prost::Message as _;
        assert!(partial_success(&[]).is_ok());
        let empty = ExportTraceServiceResponse { partial_success: Some(ExportTracePartialSuccess::default()) };
        assert!(partial_success(&empty.encode_to_vec()).is_ok());
        let rejected = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess { rejected_spans: 3, error_message: "too old".to_owned() }),
        };
        let failure = partial_success(&rejected.encode_to_vec()).unwrap_err();
        assert_eq!(failure.message, "the collector rejected 3 spans: too old");
        assert!(!failure.retryable);
    }
}
