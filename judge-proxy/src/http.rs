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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;

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
        .route("/v1/models", get(models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(proxy)
}

/// Serves the routes on `listener` until `shutdown`.
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ProxyError> {
    // Without TCP_NODELAY small replies wait for the peer's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(proxy))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| ProxyError::Io(format!("the HTTP server failed: {e}")))
}

async fn ready(State(proxy): State<Arc<Proxy>>) -> Response {
    if proxy.upstreams().limiter().is_ready().await {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the shared rate-limit store does not answer").into_response()
    }
}

async fn metrics(State(proxy): State<Arc<Proxy>>) -> Response {
    ([("content-type", "text/plain; version=0.0.4")], proxy.metrics_text()).into_response()
}

async fn models(State(proxy): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    if let Err(e) = proxy.authenticate(header(&headers, "authorization")) {
        return error_response(&e, &[]);
    }
    let data: Vec<Value> =
        proxy.config().judges.iter().map(|j| json!({"id": j.name, "object": "model", "owned_by": "cohort"})).collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Where a `model` routes: (upstream, model to request, forced temperature,
/// pinned served model when it names a judge).
fn route(proxy: &Proxy, model: &str) -> Result<(String, String, Option<f64>, Option<String>), ProxyError> {
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
    let max_tokens = body.get("max_completion_tokens").or_else(|| body.get("max_tokens")).and_then(Value::as_u64);
    let call = ChatCall {
        model: upstream_model.clone(),
        messages: msgs,
        temperature: temperature.or_else(|| body.get("temperature").and_then(Value::as_f64)),
        max_tokens,
        raw_openai_body: Some(body),
    };
    let deadline_ms = header(&headers, DEADLINE_HEADER).and_then(|v| v.trim().parse::<u64>().ok());
    let deadline = proxy.deadline(deadline_ms.map(Duration::from_millis));
    let outcome = proxy.upstreams().call(&upstream, &team, &call, &headers, deadline).await;
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

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

fn classes(attempts: &[Attempt]) -> String {
    attempts.iter().map(|a| a.class.as_str()).collect::<Vec<_>>().join(",")
}

/// An OpenAI-shaped error reply, with `Retry-After` (whole seconds, rounded
/// up) and `retry-after-ms` when a retry time is known.
pub fn error_response(e: &ProxyError, attempts: &[Attempt]) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": e.to_string(), "type": e.error_type(), "code": e.error_type()}});
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
