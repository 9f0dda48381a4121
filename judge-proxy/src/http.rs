//! The HTTP front door: an OpenAI-compatible `POST /v1/chat/completions`
//! passthrough, authenticated by team key, so any OpenAI client shares its
//! team's quota; `GET /v1/models`; health (`/healthz` live, `/readyz`
//! ready: the shared-limit store answers); `GET /metrics` (Prometheus).
//!
//! Routing by the request's `model`: the name of a configured judge (its
//! upstream and model, temperature forced to 0), or `UPSTREAM/MODEL`. Every
//! reply carries `x-cohort-requested-model`, `x-cohort-served-model` and
//! `x-cohort-attempts` (the class of each attempt, in order), and
//! `x-cohort-simulated: true` when the upstream is the SIMULATED `sim`
//! kind; errors are OpenAI-shaped (`{"error": {"message", "type",
//! "code"}}`), a permit that did not come before the deadline is a 429
//! with `Retry-After`.
//!
//! The face is hardened against one client breaking it (see [`serve`] and
//! [`guard`]): header and body read timeouts, a cap on connections, a body
//! cap checked on `Content-Length` before the body is read, a per-team
//! admission bucket before any Redis call, an optional key for
//! `/metrics`, and every secret scrubbed from what goes back, 200 bodies
//! included.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use crate::Proxy;
use crate::error::ProxyError;
use crate::judge::NOT_DISCLOSED;
use crate::provider::{ChatCall, ChatMessage};
use crate::upstream::Attempt;

/// A request header that sets the caller's deadline in milliseconds
/// (waiting for a permit included); absent: the proxy's default.
pub const DEADLINE_HEADER: &str = "x-cohort-deadline-ms";

/// The HTTP routes of a proxy.
pub fn router(proxy: Arc<Proxy>) -> Router {
    let limit = proxy.config().max_request_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(crate::responses::create))
        .route("/v1/models", get(models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&proxy), guard))
        .with_state(proxy)
}

/// How long in-flight requests may run on after shutdown begins; then
/// their connections are closed. Idle kept-alive connections close at
/// once.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How long the accept loop pauses after an accept error that is not one
/// connection's (out of file descriptors): retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves the routes on `listener` until `shutdown`, on hyper's HTTP/1.1
/// server directly (axum's `serve` has no header read timeout: 300
/// slowloris connections stayed open 45 s and more):
///
/// - a connection whose request headers are not all in within
///   `header_read_timeout` is closed (hyper's `header_read_timeout`; the
///   timer also runs while a kept-alive connection waits for its next
///   request, so it is the idle timeout too);
/// - at most `max_connections` are served at once: at the cap the loop
///   stops accepting until one closes, so further clients wait in the
///   kernel's listen backlog (and, when that is full, their connect times
///   out) rather than being accepted and dropped; a client never gets a
///   connection that is not served;
/// - on `shutdown` the listener closes, idle connections close, and
///   requests in flight get [`SHUTDOWN_GRACE`] to finish;
/// - TCP_NODELAY, or small replies wait for the peer's delayed ACK.
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ProxyError> {
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.timer(TokioTimer::new()).header_read_timeout(proxy.config().header_read_timeout).keep_alive(true);
    let service = TowerToHyperService::new(router(Arc::clone(&proxy)));
    let slots = Arc::new(Semaphore::new(proxy.config().max_connections));
    let (drain, draining) = watch::channel(false);
    // Every connection task is owned here: drained on shutdown, aborted
    // after the grace.
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                proxy.http_face().stats.connections_waited.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    () = &mut shutdown => break,
                    slot = Arc::clone(&slots).acquire_owned() => slot
                        .map_err(|_| ProxyError::Internal("the HTTP connection slots were closed".into()))?,
                }
            }
        };
        let tcp = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "the HTTP listener cannot accept connections");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let _ = tcp.set_nodelay(true);
        let conn = http1.serve_connection(TokioIo::new(tcp), service.clone());
        let mut draining = draining.clone();
        let face = Arc::clone(&proxy);
        connections.spawn(async move {
            let _slot = slot;
            let stats = &face.http_face().stats;
            stats.connections_open.fetch_add(1, Ordering::Relaxed);
            let mut conn = std::pin::pin!(conn);
            let ended = tokio::select! {
                ended = conn.as_mut() => ended,
                _ = draining.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            stats.connections_open.fetch_sub(1, Ordering::Relaxed);
            if let Err(e) = ended {
                if e.is_timeout() {
                    stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(error = %e, "an HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = drain.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        tracing::warn!(
            open = connections.len(),
            grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
            "HTTP connections still busy after the shutdown grace are closed"
        );
        connections.abort_all();
    }
    Ok(())
}

/// Errors of one connection that was being accepted (the peer left), not
/// of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

// === impl HttpFace ===

/// What the HTTP face keeps besides the proxy: each team key's admission
/// bucket and the face's counters.
///
/// The admission bucket is `governor`: one process's token bucket, lock
/// free, checked before any Redis call, so a runaway client is refused at
/// once and never reaches the shared limiter. The shared quota cannot be
/// one: it must be one atomic booking across replicas, with team shares
/// and refunds (docs/judge-proxy.md, "Admission").
#[derive(Debug)]
pub struct HttpFace {
    /// By team name: (its rate, its bucket). Teams are fixed by the config,
    /// so direct limiters (an atomic each) rather than a keyed map.
    admission: HashMap<String, (u32, DefaultDirectRateLimiter)>,
    clock: DefaultClock,
    pub stats: HttpFaceStats,
}

/// Counters of the HTTP face, appended to `GET /metrics`
/// (`cohort_judge_proxy_http_*`); relaxed atomics, as counters need no
/// ordering.
#[derive(Debug, Default)]
pub struct HttpFaceStats {
    /// Connections being served now.
    pub connections_open: AtomicU64,
    /// Times the accept loop found every connection slot taken and
    /// waited for one.
    pub connections_waited: AtomicU64,
    /// Connections closed because their request headers were too slow.
    pub header_timeouts: AtomicU64,
    /// Requests answered 408 because their body was too slow.
    pub body_timeouts: AtomicU64,
    /// Requests answered 413.
    pub too_large: AtomicU64,
    /// Requests answered 429 by a team's admission bucket.
    pub admission_refused: AtomicU64,
    /// Bodies and headers in which a secret was found and replaced.
    pub secrets_scrubbed: AtomicU64,
}

impl HttpFace {
    pub fn new(config: &crate::config::ProxyConfig) -> HttpFace {
        let admission = config
            .teams
            .iter()
            .filter_map(|t| {
                let rate = NonZeroU32::new(t.admission_rps)?;
                Some((
                    t.name.clone(),
                    (t.admission_rps, RateLimiter::direct(Quota::per_second(rate).allow_burst(rate))),
                ))
            })
            .collect();
        HttpFace { admission, clock: DefaultClock::default(), stats: HttpFaceStats::default() }
    }

    /// Admits one request of `team`, or says when its bucket has room.
    pub fn admit(&self, team: &str) -> Result<(), ProxyError> {
        let Some((rps, bucket)) = self.admission.get(team) else { return Ok(()) };
        bucket.check().map_err(|not_until| {
            self.stats.admission_refused.fetch_add(1, Ordering::Relaxed);
            ProxyError::AdmissionLimited {
                team: team.to_owned(),
                rps: *rps,
                retry_after: not_until.wait_time_from(self.clock.now()).max(Duration::from_millis(1)),
            }
        })
    }

    /// The counters in the Prometheus text format.
    pub(crate) fn render(&self) -> String {
        use cohort_telemetry::metrics::Exposition;
        let s = &self.stats;
        let load = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let mut e = Exposition::new();
        e.gauge(
            "cohort_judge_proxy_http_connections_open",
            "connections the HTTP face holds open now",
            load(&s.connections_open),
        );
        for (name, help, v) in [
            ("connections_waited_total", "times the accept loop stopped at the connection cap", &s.connections_waited),
            ("header_timeouts_total", "connections closed for headers not read in time", &s.header_timeouts),
            ("body_timeouts_total", "requests refused (408) for a body not read in time", &s.body_timeouts),
            ("too_large_total", "requests refused (413) above the body cap", &s.too_large),
            ("admission_refused_total", "requests refused (429) by a team's admission bucket", &s.admission_refused),
            ("secrets_scrubbed_total", "replies from which a secret was scrubbed", &s.secrets_scrubbed),
        ] {
            e.counter(&format!("cohort_judge_proxy_http_{name}"), help, load(v));
        }
        e.finish()
    }
}

/// The layer in front of every route: the `/metrics` key, the team's
/// admission bucket, the body cap and read timeout, and the secret scrub
/// of what goes back. One layer, so the routes (chat completions, the
/// Responses API, ...) need none of it themselves.
async fn guard(State(proxy): State<Arc<Proxy>>, request: Request, next: Next) -> Response {
    let face = proxy.http_face();
    let path = request.uri().path();
    if path == "/metrics"
        && let Some(key) = &proxy.config().metrics_key
        && !bearer(request.headers()).is_some_and(|presented| key.matches(presented))
    {
        let body = json!({"error": {
            "message": "missing or wrong metrics key: send `authorization: Bearer <metrics key>`",
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
        let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        set(response.headers_mut(), "www-authenticate", "Bearer");
        return response;
    }
    // Admission before anything else costs: a key that is not a team's
    // goes on to the route, which answers 401.
    if path.starts_with("/v1/")
        && let Ok(team) = proxy.authenticate(header(request.headers(), "authorization"))
        && let Err(e) = face.admit(&team.name)
    {
        return error_response(&e, &[]);
    }
    let limit = proxy.config().max_request_bytes;
    let declared = header(request.headers(), "content-length").and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        // Refused before a byte of the body is read; the connection closes,
        // as the unread body would otherwise be read as the next request.
        face.stats.too_large.fetch_add(1, Ordering::Relaxed);
        return closing(error_response(&ProxyError::RequestTooLarge { limit }, &[]));
    }
    let (parts, body) = request.into_parts();
    let timeout = proxy.config().body_read_timeout;
    let bytes = match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            face.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return closing(error_response(&ProxyError::RequestTooLarge { limit }, &[]));
        }
        Ok(Err(e)) => {
            let e = ProxyError::InvalidRequest(format!("the request body could not be read: {e}"));
            return closing(error_response(&e, &[]));
        }
        Err(_) => {
            face.stats.body_timeouts.fetch_add(1, Ordering::Relaxed);
            return closing(error_response(&ProxyError::BodyTimeout(timeout), &[]));
        }
    };
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    scrub_response(&proxy, response).await
}

/// A response after which the connection closes.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The key of an `authorization: Bearer <key>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let (scheme, key) = header(headers, "authorization")?.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// `response` with every secret scrubbed from its JSON body (a provider's
/// 200 body can echo a key, plainly, base64-encoded or masked) and from
/// its `x-cohort-*` headers (served model and provider come from the
/// provider's headers). A clean body, the common case, is not copied.
async fn scrub_response(proxy: &Proxy, response: Response) -> Response {
    let redactor = proxy.redactor();
    let (mut parts, body) = response.into_parts();
    let mut scrubbed = false;
    for (name, value) in parts.headers.iter_mut() {
        if name.as_str().starts_with("x-cohort-")
            && let std::borrow::Cow::Owned(clean) = redactor.scrub_bytes(value.as_bytes())
            && let Ok(clean) = HeaderValue::from_bytes(&clean)
        {
            *value = clean;
            scrubbed = true;
        }
    }
    let json = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let body = if json {
        // The routes' bodies are whole in memory (`axum::Json`): this
        // collects one frame, it does not wait on the network.
        match body.collect().await {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                match redactor.scrub_bytes(&bytes) {
                    std::borrow::Cow::Borrowed(_) => Body::from(bytes),
                    std::borrow::Cow::Owned(clean) => {
                        scrubbed = true;
                        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
                        Body::from(clean)
                    }
                }
            }
            Err(e) => {
                let e = ProxyError::Internal(format!("the reply body could not be read: {e}"));
                return error_response(&e, &[]);
            }
        }
    } else {
        body
    };
    if scrubbed {
        proxy.http_face().stats.secrets_scrubbed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("a reply carried a secret (plain, base64 or masked): replaced with [redacted]");
    }
    Response::from_parts(parts, body)
}

async fn ready(State(proxy): State<Arc<Proxy>>) -> Response {
    use cohort_telemetry::ops::OpsRole as _;
    match proxy.readiness().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn metrics(State(proxy): State<Arc<Proxy>>) -> Response {
    let text = cohort_telemetry::ops::OpsRole::metrics(&*proxy).await;
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

async fn models(State(proxy): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    if let Err(e) = proxy.authenticate(header(&headers, "authorization")) {
        return error_response(&e, &[]);
    }
    let data: Vec<Value> =
        proxy.config().judges.iter().map(|j| json!({"id": j.name, "object": "model", "owned_by": "cohort"})).collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Where a `model` routes: (upstream, model to request, forced temperature,
/// pinned served model when it names a judge).
pub(crate) fn route(proxy: &Proxy, model: &str) -> Result<(String, String, Option<f64>, Option<String>), ProxyError> {
    if let Some(j) = proxy.config().judge(model) {
        return Ok((j.upstream.clone(), j.model.clone(), Some(0.0), Some(j.served_model.clone())));
    }
    if let Some((upstream, m)) = model.split_once('/')
        && proxy.config().upstream(upstream).is_some()
        && !m.is_empty()
    {
        return Ok((upstream.to_owned(), m.to_owned(), None, None));
    }
    Err(ProxyError::NotFound(format!(
        "no route for model \"{model}\": use a judge name or UPSTREAM/MODEL with a configured upstream"
    )))
}

/// The messages of an OpenAI body, for token estimates and translation.
fn messages(body: &serde_json::Map<String, Value>) -> Result<Vec<ChatMessage>, ProxyError> {
    let list = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ProxyError::InvalidRequest("`messages` must be an array".into()))?;
    if list.is_empty() {
        return Err(ProxyError::InvalidRequest("`messages` is empty".into()));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| ProxyError::InvalidRequest(format!("messages[{i}].role must be a string")))?;
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
                }
                Some(Value::Null) | None => String::new(),
                Some(_) => {
                    return Err(ProxyError::InvalidRequest(format!("messages[{i}].content must be text or parts")));
                }
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

/// The server span of a passthrough request, a child of the caller's
/// `traceparent` when it sent one.
pub(crate) fn passthrough_span(route: &str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!("passthrough", otel.name = %format!("POST {route}"), otel.kind = "server", http.route = %route);
    cohort_telemetry::propagation::set_parent_from_headers(&span, headers);
    span
}

/// The output cap a request asks for, from the first of `fields` it sets
/// (`max_completion_tokens` before `max_tokens`, as OpenAI reads them): a
/// whole number of at least 1, else a 400 naming the field, as the
/// provider would refuse it. A cap the proxy passed on unread (a string,
/// a negative or a fractional number) was estimated at the default and
/// billed at the provider's reading, so it could spend past the team's
/// share. `null` is no cap.
pub(crate) fn output_cap(body: &serde_json::Map<String, Value>, fields: &[&str]) -> Result<Option<u64>, ProxyError> {
    for &field in fields {
        match body.get(field) {
            None | Some(Value::Null) => continue,
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v >= 1) => return Ok(n.as_u64()),
            Some(other) => {
                return Err(ProxyError::InvalidRequest(format!(
                    "`{field}` must be a whole number of at least 1, got {other}"
                )));
            }
        }
    }
    Ok(None)
}

async fn chat_completions(State(proxy): State<Arc<Proxy>>, headers: HeaderMap, body: Bytes) -> Response {
    let team = match proxy.authenticate(header(&headers, "authorization")) {
        Ok(t) => t.name.clone(),
        Err(e) => return error_response(&e, &[]),
    };
    let body: serde_json::Map<String, Value> = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ProxyError::InvalidRequest(format!("the body is not a JSON object: {e}")), &[]);
        }
    };
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        let e =
            ProxyError::InvalidRequest("streaming is not supported by the passthrough: send \"stream\": false".into());
        return error_response(&e, &[]);
    }
    let Some(model) = body.get("model").and_then(Value::as_str).map(str::to_owned) else {
        return error_response(&ProxyError::InvalidRequest("`model` must be a string".into()), &[]);
    };
    let (upstream, upstream_model, temperature, pinned) = match route(&proxy, &model) {
        Ok(r) => r,
        Err(e) => return error_response(&e, &[]),
    };
    let msgs = match messages(&body) {
        Ok(m) => m,
        Err(e) => return error_response(&e, &[]),
    };
    let max_tokens = match output_cap(&body, &["max_completion_tokens", "max_tokens"]) {
        Ok(m) => m,
        Err(e) => return error_response(&e, &[]),
    };
    let call = ChatCall {
        model: upstream_model.clone(),
        messages: msgs,
        temperature: temperature.or_else(|| body.get("temperature").and_then(Value::as_f64)),
        max_tokens,
        raw_openai_body: Some(body),
    };
    let deadline_ms = header(&headers, DEADLINE_HEADER).and_then(|v| v.trim().parse::<u64>().ok());
    let deadline = proxy.deadline(deadline_ms.map(Duration::from_millis));
    let span = passthrough_span("/v1/chat/completions", &headers);
    let outcome = proxy.upstreams().call(&upstream, &team, &call, &headers, deadline).instrument(span).await;
    let attempts = outcome.attempts;
    match outcome.result {
        Err(e) => {
            tracing::warn!(team = %team, upstream = %upstream, error = %e, "passthrough failed");
            error_response(&e, &attempts)
        }
        Ok(reply) => {
            let served = reply.served_model.clone().unwrap_or_else(|| NOT_DISCLOSED.to_owned());
            let mut response = axum::Json(reply.openai_body).into_response();
            let h = response.headers_mut();
            set(h, "x-cohort-requested-model", &upstream_model);
            set(h, "x-cohort-served-model", &served);
            if let Some(p) = &reply.served_provider {
                set(h, "x-cohort-served-provider", p);
            }
            if proxy.config().strict && pinned.is_some_and(|p| reply.served_model.as_deref() != Some(p.as_str())) {
                set(h, "x-cohort-model-mismatch", "true");
            }
            set(h, "x-cohort-attempts", &classes(&attempts));
            if proxy.config().upstream(&upstream).is_some_and(|u| u.kind == crate::config::UpstreamKind::Sim) {
                set(h, "x-cohort-simulated", "true");
            }
            response
        }
    }
}

pub(crate) fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

pub(crate) fn classes(attempts: &[Attempt]) -> String {
    attempts.iter().map(|a| a.class.as_str()).collect::<Vec<_>>().join(",")
}

/// An OpenAI-shaped error reply, with `Retry-After` (whole seconds, rounded
/// up) and `retry-after-ms` when a retry time is known.
pub fn error_response(e: &ProxyError, attempts: &[Attempt]) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body =
        json!({"error": {"message": e.to_string(), "type": e.error_type(), "param": null, "code": e.error_code()}});
    let mut response = (status, axum::Json(body)).into_response();
    let h = response.headers_mut();
    if let Some(after) = e.retry_after() {
        let secs = after.as_millis().div_ceil(1000).max(1);
        set(h, "retry-after", &secs.to_string());
        set(h, "retry-after-ms", &after.as_millis().to_string());
    }
    if !attempts.is_empty() {
        set(h, "x-cohort-attempts", &classes(attempts));
    }
    response
}
