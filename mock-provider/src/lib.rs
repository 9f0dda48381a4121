//! TEST DOUBLE. A mock LLM provider for cohort's tests and benchmarks; it
//! is not a provider, judges nothing, and must never front a real cohort.
//!
//! It speaks OpenAI chat completions (`POST /v1/chat/completions`), the
//! OpenAI Responses API (`POST /v1/responses`, non-streaming, answered
//! through the chat path so faults and rpm apply alike) and Anthropic
//! Messages (`POST /v1/messages`) and answers judge prompts
//! (seed 000 section 3.3) with deterministic verdicts: a claim is YES when
//! its text, lowercased with punctuation dropped, occurs in one of its
//! evidence snippets, NO otherwise.
//!
//! Faults are injected per request, first match wins:
//! 1. the `x-mock-fault` request header;
//! 2. a marker `[[mock:SPEC]]` anywhere in the messages (reaches the mock
//!    through the judge proxy's gRPC path, which forwards no headers);
//! 3. the config's `fault`.
//!
//! A SPEC is `kind[;key=value...]`: see [`FaultKind`] for the kinds.
//! `times=N` applies the fault to the first N requests with the same SPEC
//! and body only (so "fails twice, then answers" is one marker), `ms=N`
//! sets a latency or stall, `retry_after=S` / `retry_after_ms=MS` /
//! `retry_after_date=S` set a 429's Retry-After, `model=NAME` the served
//! model of `alias`.
//!
//! The mock also enforces its own requests-per-minute (`rpm`, `burst`)
//! with `governor`, as a provider would, and counts every 429 it had to
//! send for it (`GET /mock/stats`); `GET /mock/calls` lists the calls it
//! answered with the model that served each.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How long a `stall` lasts when it sets no `ms`.
pub const DEFAULT_STALL_MS: u64 = 30_000;
/// The most calls `GET /mock/calls` keeps.
const MAX_CALLS_KEPT: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error("mock config: {0}")]
    Config(String),
    #[error("mock server: {0}")]
    Io(String),
}

/// The mock's config (TOML, or the binary's flags).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockConfig {
    /// Requests per minute the mock enforces (None: no limit).
    pub rpm: Option<u32>,
    /// Requests that may arrive back to back (with `rpm`); default 1.
    pub burst: Option<u32>,
    /// The key callers must present (`Authorization: Bearer` or
    /// `x-api-key`). A wrong key gets a 401 that echoes it back, as some
    /// providers do, so tests can check the proxy scrubs it.
    pub api_key: Option<String>,
    /// Latency added to every answer.
    #[serde(default)]
    pub latency_ms: u64,
    /// A fault SPEC applied to requests that carry none.
    pub fault: Option<String>,
    /// Send `x-served-model` and `x-served-provider` headers, as a router.
    #[serde(default)]
    pub router_headers: bool,
    /// With `rpm`: send OpenAI's rate-limit headers on every answer
    /// (`x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
    /// `x-ratelimit-reset-requests`, as a duration like `1s`, `6m0s`,
    /// `20ms`), as a provider does.
    #[serde(default)]
    pub ratelimit_headers: bool,
    /// Put the requested model (not the served one) in the body's `model`,
    /// as a router that echoes the alias does; then only the headers tell.
    #[serde(default)]
    pub body_echoes_requested_model: bool,
    /// Aliases that resolve per call.
    #[serde(default)]
    pub aliases: Vec<AliasConfig>,
}

/// A model alias that resolves to `models[0]`, except every `every`-th
/// call (the 3rd, 6th, ... with `every = 3`), which goes to `models[1]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasConfig {
    pub name: String,
    pub models: Vec<String>,
    pub every: u64,
}

/// The injectable faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `ms` of latency, then a normal answer.
    Latency,
    /// 429 with Retry-After (`rate_limit_exceeded`).
    RateLimit,
    /// 429 `insufficient_quota`.
    InsufficientQuota,
    /// 402.
    PaymentRequired,
    /// 500.
    ServerError,
    /// 503.
    Unavailable,
    /// 502 "Provider returned empty content".
    Empty502,
    /// 200 with empty content.
    Empty200,
    /// 200 with a JSON body cut short.
    TruncatedJson,
    /// 200 with the verdict of the last claim left out.
    Partial,
    /// 200 with prose instead of verdict lines.
    Prose,
    /// Sleeps `ms` (default 30 s) before answering: past any client timeout.
    Stall,
    /// Headers, then the connection dies mid-body.
    Reset,
    /// 400.
    BadRequest,
    /// A normal answer served by `model` instead of the requested one.
    Alias,
    /// A normal 200 whose content echoes the key the mock was sent, as a
    /// careless provider or logging router might, in the `form` given:
    /// `plain`, `b64` (the whole `authorization` value, standard base64,
    /// padded), `b64url` (the key, URL-safe, unpadded), `masked` (its first
    /// 7 characters, `****`, its last 4).
    EchoKey,
}

impl FaultKind {
    fn parse(name: &str) -> Option<FaultKind> {
        Some(match name {
            "latency" => FaultKind::Latency,
            "rate_limit" => FaultKind::RateLimit,
            "insufficient_quota" => FaultKind::InsufficientQuota,
            "payment_required" => FaultKind::PaymentRequired,
            "server_error" => FaultKind::ServerError,
            "unavailable" => FaultKind::Unavailable,
            "empty_502" => FaultKind::Empty502,
            "empty_200" => FaultKind::Empty200,
            "truncated_json" => FaultKind::TruncatedJson,
            "partial" => FaultKind::Partial,
            "prose" => FaultKind::Prose,
            "stall" => FaultKind::Stall,
            "reset" => FaultKind::Reset,
            "bad_request" => FaultKind::BadRequest,
            "alias" => FaultKind::Alias,
            "echo_key" => FaultKind::EchoKey,
            _ => return None,
        })
    }
}

/// A parsed fault SPEC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub params: HashMap<String, String>,
    /// The SPEC as written (part of the `times` counter's key).
    pub spec: String,
}

impl Fault {
    /// Parses `kind[;key=value...]`.
    pub fn parse(spec: &str) -> Result<Fault, MockError> {
        let mut parts = spec.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let kind = FaultKind::parse(name).ok_or_else(|| MockError::Config(format!("unknown fault \"{name}\"")))?;
        let mut params = HashMap::new();
        for p in parts.filter(|p| !p.is_empty()) {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| MockError::Config(format!("fault parameter \"{p}\" is not key=value")))?;
            params.insert(k.trim().to_owned(), v.trim().to_owned());
        }
        Ok(Fault { kind, params, spec: spec.trim().to_owned() })
    }

    fn num(&self, key: &str) -> Option<u64> {
        self.params.get(key).and_then(|v| v.parse().ok())
    }
}

/// What `GET /mock/stats` returns.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MockStats {
    /// Every chat request that reached the mock.
    pub requests: u64,
    /// Requests answered 200 with usable content (verdicts or text).
    pub ok: u64,
    /// 429s the mock sent because its own `rpm` was exceeded.
    pub enforced_429: u64,
    /// Faults injected (any kind but `latency`).
    pub injected: u64,
    /// Requests the rpm limiter admitted.
    pub admitted: u64,
    /// Microseconds since the mock started of the first and the last
    /// admitted request (0 when none).
    pub first_admitted_us: u64,
    pub last_admitted_us: u64,
    /// The enforced rpm and burst (0 when none).
    pub rpm: u32,
    pub burst: u32,
    /// Requests that came to `POST /v1/responses` (also in `requests`), so
    /// a test can prove a client used the Responses API.
    #[serde(default)]
    pub responses_requests: u64,
}

/// One answered call, for `GET /mock/calls`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MockCall {
    pub seq: u64,
    pub requested_model: String,
    pub served_model: String,
    /// The claim texts of a judge prompt (markers removed), in order.
    pub claims: Vec<String>,
    /// The verdict lines sent.
    pub verdicts: Vec<String>,
    /// The fault applied, if any.
    pub fault: Option<String>,
    /// The request's `temperature`, if it set one.
    pub temperature: Option<f64>,
}

struct Mock {
    config: MockConfig,
    started: Instant,
    /// The middleware reports the bucket's state, for the rate headers.
    limiter: Option<RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>>,
    clock: DefaultClock,
    stats: Mutex<MockStats>,
    /// (SPEC, body hash) -> times seen, for `times=N`.
    fault_counts: Mutex<HashMap<(String, u64), u64>>,
    /// alias name -> calls so far.
    alias_counts: Mutex<HashMap<String, u64>>,
    calls: Mutex<Vec<MockCall>>,
    seq: AtomicU64,
}

/// The mock's routes for `config`.
pub fn router(config: MockConfig) -> Result<Router, MockError> {
    if let Some(spec) = &config.fault {
        Fault::parse(spec)?;
    }
    for a in &config.aliases {
        if a.models.len() != 2 || a.every == 0 {
            return Err(MockError::Config(format!("alias \"{}\": give two models and every >= 1", a.name)));
        }
    }
    let limiter = match config.rpm {
        None => None,
        Some(rpm) => {
            let rpm = NonZeroU32::new(rpm).ok_or_else(|| MockError::Config("rpm must be at least 1".into()))?;
            let burst = NonZeroU32::new(config.burst.unwrap_or(1).max(1)).unwrap_or(NonZeroU32::MIN);
            let period = Duration::from_micros(60_000_000 / u64::from(rpm.get()));
            let quota = Quota::with_period(period).ok_or_else(|| MockError::Config("rpm is too high".into()))?;
            Some(RateLimiter::direct(quota.allow_burst(burst)).with_middleware::<StateInformationMiddleware>())
        }
    };
    let stats = MockStats { rpm: config.rpm.unwrap_or(0), burst: config.burst.unwrap_or(1), ..Default::default() };
    let mock = Arc::new(Mock {
        config,
        started: Instant::now(),
        limiter,
        clock: DefaultClock::default(),
        stats: Mutex::new(stats),
        fault_counts: Mutex::new(HashMap::new()),
        alias_counts: Mutex::new(HashMap::new()),
        calls: Mutex::new(Vec::new()),
        seq: AtomicU64::new(0),
    });
    Ok(Router::new()
        .route("/v1/chat/completions", post(openai))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(anthropic))
        .route("/mock/stats", get(stats_handler))
        .route("/mock/calls", get(calls_handler))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(mock))
}

/// Serves the mock on `listener` until `shutdown`.
pub async fn run(
    config: MockConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), MockError> {
    let app = router(config)?;
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.map_err(|e| MockError::Io(e.to_string()))
}

/// A mock on a free loopback port, serving until dropped (for tests and
/// benchmarks in one process).
#[derive(Debug)]
pub struct MockHandle {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The server task; aborted on drop if it has not stopped.
    task: tokio::task::JoinHandle<Result<(), MockError>>,
}

impl MockHandle {
    /// Starts a mock on 127.0.0.1:0 in the current tokio runtime.
    pub async fn start(config: MockConfig) -> Result<MockHandle, MockError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| MockError::Io(e.to_string()))?;
        let addr = listener.local_addr().map_err(|e| MockError::Io(e.to_string()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(run(config, listener, async move {
            let _ = stopped.await;
        }));
        Ok(MockHandle { addr, stop: Some(stop), task })
    }

    /// `http://ADDR/v1`, the base URL of an OpenAI or Anthropic upstream.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Stalled handlers would hold a graceful shutdown open: end it.
        self.task.abort();
    }
}

async fn stats_handler(State(mock): State<Arc<Mock>>) -> Response {
    let stats = mock.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
    axum::Json(stats).into_response()
}

async fn calls_handler(State(mock): State<Arc<Mock>>) -> Response {
    let calls = mock.calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    axum::Json(calls).into_response()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    OpenAi,
    Anthropic,
}

async fn openai(State(mock): State<Arc<Mock>>, headers: HeaderMap, body: Bytes) -> Response {
    mock.handle(Api::OpenAi, &headers, &body).await
}

async fn anthropic(State(mock): State<Arc<Mock>>, headers: HeaderMap, body: Bytes) -> Response {
    mock.handle(Api::Anthropic, &headers, &body).await
}

/// `POST /v1/responses`: the request's `instructions` and `input` become
/// chat messages, the chat path answers them (faults, rpm, aliases, the
/// calls record: all as for chat), and a 200 comes back as the Responses
/// object OpenAI documents; errors keep the OpenAI error shape, which the
/// Responses API shares. A body cut short stays cut short, a reset stays
/// a reset.
async fn responses(State(mock): State<Arc<Mock>>, headers: HeaderMap, body: Bytes) -> Response {
    mock.stat(|s| s.responses_requests += 1);
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(Api::OpenAi, 400, "invalid_request_error", &format!("mock: body is not JSON: {e}")),
    };
    let chat = serde_json::to_vec(&responses_as_chat(&request)).unwrap_or_default();
    let answer = mock.handle(Api::OpenAi, &headers, &chat).await;
    if answer.status() != StatusCode::OK {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"{\"id\":\"resp_mock\",")),
            Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "mock: connection reset")),
        ];
        return Response::from_parts(parts, Body::from_stream(futures_util::stream::iter(chunks)));
    };
    let Ok(completion) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let reply = chat_as_response(&completion, &request);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(reply.to_string()))
}

/// A Responses request as the chat request the mock answers.
fn responses_as_chat(request: &Value) -> Value {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    };
    let item = |i: &Value| {
        let role = i.get("role").and_then(Value::as_str).unwrap_or("user");
        json!({"role": role, "content": i.get("content").or_else(|| i.get("output")).map(text).unwrap_or_default()})
    };
    let mut messages = Vec::new();
    match request.get("instructions") {
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(items)) => messages.extend(items.iter().map(item)),
        _ => {}
    }
    match request.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => messages.extend(items.iter().map(item)),
        _ => {}
    }
    let mut chat = json!({"model": request.get("model").cloned().unwrap_or(Value::Null), "messages": messages});
    if let Some(t) = request.get("temperature").filter(|t| t.is_number()) {
        chat["temperature"] = t.clone();
    }
    chat
}

/// The Responses object (as OpenAI documents it) of the mock's chat
/// `completion` to `request`: one completed assistant message with one
/// `output_text` part, the served `model`, the usage in Responses terms.
fn chat_as_response(completion: &Value, request: &Value) -> Value {
    let id = completion.get("id").and_then(Value::as_str).unwrap_or("mock");
    let text = completion.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or_default();
    let input = completion.pointer("/usage/prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
    let output = completion.pointer("/usage/completion_tokens").and_then(Value::as_u64).unwrap_or(0);
    let given = |k: &str| request.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "id": format!("resp_{id}"),
        "object": "response",
        "created_at": completion.get("created").cloned().unwrap_or(json!(0)),
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "instructions": given("instructions"),
        "max_output_tokens": given("max_output_tokens"),
        "model": completion.get("model").cloned().unwrap_or(Value::Null),
        "output": [{
            "type": "message",
            "id": format!("msg_{id}"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }],
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": request.get("store").and_then(Value::as_bool).unwrap_or(true),
        "temperature": request.get("temperature").and_then(Value::as_f64).unwrap_or(1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        },
        "user": null,
        "metadata": {},
    })
}

fn error(api: Api, status: u16, kind: &str, message: &str) -> Response {
    let body = match api {
        Api::OpenAi => json!({"error": {"message": message, "type": kind, "code": kind}}),
        Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

/// OpenAI's request rate-limit headers: the limit per minute, what is left
/// of the bucket, and how long until it is full again.
fn add_rate_headers(h: &mut HeaderMap, rpm: u32, remaining: u32, reset: Duration) {
    for (name, value) in [
        ("x-ratelimit-limit-requests", rpm.to_string()),
        ("x-ratelimit-remaining-requests", remaining.to_string()),
        ("x-ratelimit-reset-requests", openai_duration(reset)),
    ] {
        if let Ok(v) = value.parse() {
            h.insert(name, v);
        }
    }
}

/// A duration as OpenAI writes its resets: `20ms`, `1.5s`, `6m0s`.
pub fn openai_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        format!("{}s", (d.as_secs_f64() * 1000.0).round() / 1000.0)
    } else {
        format!("{}m{}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

impl Mock {
    /// The time one request takes to come back to the bucket.
    fn bucket_period(&self) -> Duration {
        Duration::from_micros(60_000_000 / u64::from(self.config.rpm.unwrap_or(1).max(1)))
    }

    fn since_start_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn stat(&self, f: impl FnOnce(&mut MockStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }

    async fn handle(&self, api: Api, headers: &HeaderMap, body: &[u8]) -> Response {
        self.stat(|s| s.requests += 1);
        let mut rate_headers = None;
        if let Some(limiter) = &self.limiter {
            let snapshot = match limiter.check() {
                Ok(s) => s,
                Err(not_until) => {
                    let wait = not_until.wait_time_from(self.clock.now());
                    self.stat(|s| s.enforced_429 += 1);
                    let mut r =
                        error(api, 429, "rate_limit_exceeded", "mock: rate limit reached for requests per minute");
                    let h = r.headers_mut();
                    if let Ok(v) = wait.as_millis().max(1).to_string().parse() {
                        h.insert("retry-after-ms", v);
                    }
                    if let Ok(v) = wait.as_secs().max(1).to_string().parse() {
                        h.insert("retry-after", v);
                    }
                    if self.config.ratelimit_headers {
                        let full = self.bucket_period() * self.config.burst.unwrap_or(1).max(1);
                        add_rate_headers(h, self.config.rpm.unwrap_or(0), 0, full.max(wait));
                    }
                    return r;
                }
            };
            if self.config.ratelimit_headers {
                let burst = self.config.burst.unwrap_or(1).max(1);
                let remaining = snapshot.remaining_burst_capacity().min(burst);
                rate_headers = Some((remaining, self.bucket_period() * (burst - remaining)));
            }
            let now = self.since_start_us();
            self.stat(|s| {
                s.admitted += 1;
                if s.first_admitted_us == 0 {
                    s.first_admitted_us = now.max(1);
                }
                s.last_admitted_us = now;
            });
        }
        if let Some(expected) = &self.config.api_key {
            let presented = headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
                .or_else(|| {
                    headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "))
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            if presented != *expected {
                return error(api, 401, "invalid_api_key", &format!("Incorrect API key provided: {presented}"));
            }
        }
        let request: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return error(api, 400, "invalid_request_error", &format!("mock: body is not JSON: {e}")),
        };
        let requested_model = request.get("model").and_then(Value::as_str).unwrap_or_default().to_owned();
        let text = all_text(api, &request);
        let fault = match self.fault(headers, &text, body) {
            Ok(f) => f,
            Err(e) => return error(api, 400, "invalid_request_error", &e.to_string()),
        };
        if self.config.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.config.latency_ms)).await;
        }
        let mut served_model = self.resolve(&requested_model);
        if let Some(f) = &fault {
            if f.kind != FaultKind::Latency {
                self.stat(|s| s.injected += 1);
            }
            match f.kind {
                FaultKind::Latency => tokio::time::sleep(Duration::from_millis(f.num("ms").unwrap_or(100))).await,
                FaultKind::RateLimit => {
                    let mut r = error(api, 429, "rate_limit_exceeded", "mock: rate limit reached (injected)");
                    let h = r.headers_mut();
                    if let Some(v) = f.params.get("retry_after").and_then(|v| v.parse().ok()) {
                        h.insert("retry-after", v);
                    }
                    if let Some(v) = f.params.get("retry_after_ms").and_then(|v| v.parse().ok()) {
                        h.insert("retry-after-ms", v);
                    }
                    if let Some(secs) = f.num("retry_after_date")
                        && let Ok(v) = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(secs)).parse()
                    {
                        h.insert("retry-after", v);
                    }
                    return r;
                }
                FaultKind::InsufficientQuota => {
                    return error(
                        api,
                        429,
                        "insufficient_quota",
                        "You exceeded your current quota, please check your plan and billing details.",
                    );
                }
                FaultKind::PaymentRequired => return error(api, 402, "payment_required", "mock: payment required"),
                FaultKind::ServerError => return error(api, 500, "server_error", "mock: internal error (injected)"),
                FaultKind::Unavailable => return error(api, 503, "overloaded", "mock: service unavailable (injected)"),
                FaultKind::Empty502 => return error(api, 502, "bad_gateway", "Provider returned empty content"),
                FaultKind::BadRequest => {
                    return error(api, 400, "invalid_request_error", "mock: bad request (injected)");
                }
                FaultKind::Stall => {
                    tokio::time::sleep(Duration::from_millis(f.num("ms").unwrap_or(DEFAULT_STALL_MS))).await;
                }
                FaultKind::Reset => {
                    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                        Ok(Bytes::from_static(b"{\"id\":\"mock\",")),
                        Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "mock: connection reset")),
                    ];
                    let mut r = Response::new(Body::from_stream(futures_util::stream::iter(chunks)));
                    if let Ok(v) = "application/json".parse() {
                        r.headers_mut().insert("content-type", v);
                    }
                    return r;
                }
                FaultKind::Alias => {
                    served_model = f.params.get("model").cloned().unwrap_or_else(|| format!("{requested_model}-other"));
                }
                FaultKind::Empty200
                | FaultKind::TruncatedJson
                | FaultKind::Partial
                | FaultKind::Prose
                | FaultKind::EchoKey => {}
            }
        }
        let (claims, mut verdicts) = judge(&text);
        let content = match fault.as_ref().map(|f| f.kind) {
            Some(FaultKind::Empty200) => String::new(),
            Some(FaultKind::Prose) => "I have reviewed the claims and they look broadly reasonable.".to_owned(),
            Some(FaultKind::EchoKey) => {
                echo_key(headers, fault.as_ref().and_then(|f| f.params.get("form")).map_or("plain", String::as_str))
            }
            Some(FaultKind::Partial) => {
                verdicts.pop();
                verdicts.join("\n")
            }
            _ if claims.is_empty() => format!("mock reply to: {}", text.chars().take(60).collect::<String>()),
            _ => verdicts.join("\n"),
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let body_model = if self.config.body_echoes_requested_model { &requested_model } else { &served_model };
        let prompt_tokens = (text.len() as u64).div_ceil(4) + 8;
        let completion_tokens = (content.len() as u64).div_ceil(4).max(1);
        let reply = match api {
            Api::OpenAi => json!({
                "id": format!("mock-{seq}"),
                "object": "chat.completion",
                "created": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
                "model": body_model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens},
            }),
            Api::Anthropic => json!({
                "id": format!("msg_mock_{seq}"),
                "type": "message",
                "role": "assistant",
                "model": body_model,
                "content": [{"type": "text", "text": content}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
            }),
        };
        {
            let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            if calls.len() < MAX_CALLS_KEPT {
                calls.push(MockCall {
                    seq,
                    requested_model: requested_model.clone(),
                    served_model: served_model.clone(),
                    claims,
                    verdicts: content.lines().map(str::to_owned).collect(),
                    fault: fault.as_ref().map(|f| f.spec.clone()),
                    temperature: request.get("temperature").and_then(Value::as_f64),
                });
            }
        }
        let usable = !matches!(
            fault.as_ref().map(|f| f.kind),
            Some(FaultKind::Empty200 | FaultKind::TruncatedJson | FaultKind::Prose | FaultKind::Partial)
        );
        if usable {
            self.stat(|s| s.ok += 1);
        }
        let mut response = if fault.as_ref().is_some_and(|f| f.kind == FaultKind::TruncatedJson) {
            let full = reply.to_string();
            let cut: String = full.chars().take(full.chars().count() / 2).collect();
            let mut r = Response::new(Body::from(cut));
            if let Ok(v) = "application/json".parse() {
                r.headers_mut().insert("content-type", v);
            }
            r
        } else {
            axum::Json(reply).into_response()
        };
        if let Some((remaining, reset)) = rate_headers {
            add_rate_headers(response.headers_mut(), self.config.rpm.unwrap_or(0), remaining, reset);
        }
        if self.config.router_headers {
            let h = response.headers_mut();
            if let Ok(v) = served_model.parse() {
                h.insert("x-served-model", v);
            }
            if let Ok(v) = "mockco".parse() {
                h.insert("x-served-provider", v);
            }
        }
        response
    }

    /// The fault for this request: header, then marker, then config.
    fn fault(&self, headers: &HeaderMap, text: &str, body: &[u8]) -> Result<Option<Fault>, MockError> {
        let spec = headers
            .get("x-mock-fault")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| marker(text))
            .or_else(|| self.config.fault.clone());
        let Some(spec) = spec else { return Ok(None) };
        let fault = Fault::parse(&spec)?;
        if let Some(times) = fault.num("times") {
            let mut hasher = DefaultHasher::new();
            body.hash(&mut hasher);
            let key = (fault.spec.clone(), hasher.finish());
            let mut counts = self.fault_counts.lock().unwrap_or_else(|e| e.into_inner());
            let seen = counts.entry(key).or_insert(0);
            *seen += 1;
            if *seen > times {
                return Ok(None);
            }
        }
        Ok(Some(fault))
    }

    /// The model that serves `requested`: an alias resolves per call.
    fn resolve(&self, requested: &str) -> String {
        let Some(alias) = self.config.aliases.iter().find(|a| a.name == requested) else {
            return requested.to_owned();
        };
        let mut counts = self.alias_counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(alias.name.clone()).or_insert(0);
        *n += 1;
        let i = usize::from(n.is_multiple_of(alias.every));
        alias.models.get(i).cloned().unwrap_or_else(|| requested.to_owned())
    }
}

/// Every message's text (and Anthropic's `system`), joined by newlines.
fn all_text(api: Api, request: &Value) -> String {
    let mut parts = Vec::new();
    if api == Api::Anthropic
        && let Some(s) = request.get("system").and_then(Value::as_str)
    {
        parts.push(s.to_owned());
    }
    for m in request.get("messages").and_then(Value::as_array).into_iter().flatten() {
        match m.get("content") {
            Some(Value::String(s)) => parts.push(s.clone()),
            Some(Value::Array(blocks)) => {
                parts.extend(blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).map(str::to_owned));
            }
            _ => {}
        }
    }
    parts.join("\n")
}

/// The content of an `echo_key` answer: the key the mock was sent, in
/// `form`.
fn echo_key(headers: &HeaderMap, form: &str) -> String {
    let value = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let key = value.strip_prefix("Bearer ").unwrap_or(value);
    const STD: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b64 = |bytes: &[u8], alphabet: &[u8], pad: bool| {
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= c.len() {
                    out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
                } else if pad {
                    out.push('=');
                }
            }
        }
        out
    };
    let echoed = match form {
        "b64" => b64(value.as_bytes(), STD, true),
        "b64url" => b64(key.as_bytes(), URL, false),
        "masked" if key.len() > 11 && key.is_ascii() => format!("{}****{}", &key[..7], &key[key.len() - 4..]),
        _ => key.to_owned(),
    };
    format!("mock: the key I was sent is {echoed}")
}

/// The SPEC of the first `[[mock:SPEC]]` marker in `text`.
fn marker(text: &str) -> Option<String> {
    let start = text.find("[[mock:")? + "[[mock:".len();
    let end = text[start..].find("]]")? + start;
    Some(text[start..end].to_owned())
}

fn strip_markers(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(start) = out.find("[[mock:") {
        let Some(len) = out[start..].find("]]") else { break };
        out.replace_range(start..start + len + 2, "");
    }
    out.trim().to_owned()
}

fn normalise(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The claims of a judge prompt and the mock's verdict lines for them.
fn judge(text: &str) -> (Vec<String>, Vec<String>) {
    let mut claims: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Claim ")
            && let Some((n, claim)) = rest.split_once(':')
            && n.trim().parse::<u32>().is_ok()
            && !claim.trim().is_empty()
            && !claim.contains("\"Claim N")
        {
            claims.push((strip_markers(claim), Vec::new()));
        } else if let Some(snippet) = trimmed.strip_prefix("- ")
            && let Some(last) = claims.last_mut()
        {
            last.1.push(snippet.to_owned());
        }
    }
    let verdicts = claims
        .iter()
        .enumerate()
        .map(|(i, (claim, snippets))| {
            let c = normalise(claim);
            let yes = !c.is_empty() && snippets.iter().any(|s| normalise(s).contains(&c));
            format!("Claim {}: {}", i + 1, if yes { "YES" } else { "NO" })
        })
        .collect();
    (claims.into_iter().map(|(c, _)| c).collect(), verdicts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_evidence() {
        let prompt = "For each claim below...\nAnswer with one line per claim in format: \"Claim N: YES\" or \"Claim N: NO\"\n\n\
Claim 1: The sky is blue. [[mock:partial]]\nEvidence 1:\n- Everyone knows the SKY is blue, mostly.\n\n\
Claim 2: Water is dry.\nEvidence 2:\n- Water is wet.\n";
        let (claims, verdicts) = judge(prompt);
        assert_eq!(claims, vec!["The sky is blue.", "Water is dry."]);
        assert_eq!(verdicts, vec!["Claim 1: YES", "Claim 2: NO"]);
        assert_eq!(marker(prompt).as_deref(), Some("partial"));
    }

    #[test]
    fn fault_specs_parse() {
        let f = Fault::parse("rate_limit; retry_after_ms=200;times=2").unwrap();
        assert_eq!(f.kind, FaultKind::RateLimit);
        assert_eq!(f.num("times"), Some(2));
        assert!(Fault::parse("meteor").is_err());
        assert!(Fault::parse("latency;ms").is_err());
    }
}
