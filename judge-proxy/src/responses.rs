//! `POST /v1/responses`: the OpenAI Responses API passthrough, beside the
//! chat completions one in [`crate::http`], because current OpenAI clients
//! and eval tools (Inspect AI among them) call it by default.
//!
//! It is the chat passthrough in every way that matters for the quota: the
//! same team keys, the same routing by `model` (a judge name, its
//! temperature forced to 0, or `UPSTREAM/MODEL`), the same deadline header,
//! and the same [`crate::upstream::Upstreams::call`], so permits, team
//! shares, retries, classification and served-model recording are the
//! chat path's own. The client's body goes to `{base}/responses` unchanged
//! but for the routed `model` (and a forced `temperature`); the provider's
//! Responses object comes back unchanged, with the chat path's reply
//! headers (`x-cohort-requested-model`, `x-cohort-served-model`,
//! `x-cohort-attempts`, `x-cohort-simulated`).
//!
//! What it cannot do is refused with a 400 `invalid_request_error` naming
//! the field, before any permit is taken:
//! - `stream: true`: the passthrough answers whole replies only;
//! - `background: true`, `previous_response_id`, `conversation`: they need
//!   state kept between calls, and the proxy keeps none (a follow-up call
//!   may reach another replica, and the provider never saw the id of a
//!   response stored elsewhere): send the whole conversation in `input`;
//! - `messages` (a chat completions field) or no `input`;
//! - an upstream of kind `anthropic`: it has no Responses API; use
//!   `/v1/chat/completions` for it.
//!
//! An upstream of the SIMULATED `sim` kind answers the call's text as a
//! chat call (the sim reads chat requests only), and the reply is given
//! back as a Responses object built from the sim's answer, labelled
//! simulated in `x-cohort-simulated: true` and in its `metadata`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::Proxy;
use crate::config::UpstreamKind;
use crate::error::ProxyError;
use crate::http::{DEADLINE_HEADER, classes, error_response, header, route, set};
use crate::judge::NOT_DISCLOSED;
use crate::provider::{ChatCall, ChatMessage, ChatReply};

/// The handler of `POST /v1/responses`.
pub async fn create(State(proxy): State<Arc<Proxy>>, headers: HeaderMap, body: Bytes) -> Response {
    let team = match proxy.authenticate(header(&headers, "authorization")) {
        Ok(t) => t.name.clone(),
        Err(e) => return error_response(&e, &[]),
    };
    let request = match Request::parse(&proxy, &body) {
        Ok(r) => r,
        Err(e) => return error_response(&e, &[]),
    };
    let deadline_ms = header(&headers, DEADLINE_HEADER).and_then(|v| v.trim().parse::<u64>().ok());
    let deadline = proxy.deadline(deadline_ms.map(Duration::from_millis));
    let span = crate::http::passthrough_span("/v1/responses", &headers);
    let outcome =
        proxy.upstreams().call(&request.upstream, &team, &request.call, &headers, deadline).instrument(span).await;
    let attempts = outcome.attempts;
    let reply = match outcome.result {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(team = %team, upstream = %request.upstream, error = %e, "responses passthrough failed");
            return error_response(&e, &attempts);
        }
    };
    let served = reply.served_model.clone().unwrap_or_else(|| NOT_DISCLOSED.to_owned());
    let mismatch =
        proxy.config().strict && request.pinned.as_deref().is_some_and(|p| reply.served_model.as_deref() != Some(p));
    let body = if request.simulated { simulated_body(&reply, &served) } else { reply.openai_body };
    let mut response = axum::Json(body).into_response();
    let h = response.headers_mut();
    set(h, "x-cohort-requested-model", &request.call.model);
    set(h, "x-cohort-served-model", &served);
    if let Some(p) = &reply.served_provider {
        set(h, "x-cohort-served-provider", p);
    }
    if mismatch {
        set(h, "x-cohort-model-mismatch", "true");
    }
    set(h, "x-cohort-attempts", &classes(&attempts));
    if request.simulated {
        set(h, "x-cohort-simulated", "true");
    }
    response
}

/// A Responses request the proxy can pass through, routed.
#[derive(Debug)]
struct Request {
    upstream: String,
    /// The served model a judge route is pinned to (strict mode checks it).
    pinned: Option<String>,
    /// Whether the upstream is the SIMULATED `sim` kind.
    simulated: bool,
    call: ChatCall,
}

impl Request {
    /// Validates and routes a request body; every refusal names its field.
    fn parse(proxy: &Proxy, body: &[u8]) -> Result<Request, ProxyError> {
        let invalid = |m: String| ProxyError::InvalidRequest(m);
        let body: Map<String, Value> =
            serde_json::from_slice(body).map_err(|e| invalid(format!("the body is not a JSON object: {e}")))?;
        refuse_unsupported(&body)?;
        let model =
            body.get("model").and_then(Value::as_str).ok_or_else(|| invalid("`model` must be a string".into()))?;
        let (upstream, upstream_model, temperature, pinned) = route(proxy, model)?;
        let kind = proxy.config().upstream(&upstream).map(|u| u.kind);
        if kind == Some(UpstreamKind::Anthropic) {
            return Err(invalid(format!(
                "`model`: \"{model}\" routes to upstream \"{upstream}\" of kind anthropic, which has no Responses \
                 API: send this call to /v1/chat/completions"
            )));
        }
        let simulated = kind == Some(UpstreamKind::Sim);
        let messages = messages(&body)?;
        let max_tokens = crate::http::output_cap(&body, &["max_output_tokens"])?;
        let temperature = temperature.or_else(|| body.get("temperature").and_then(Value::as_f64));
        // The sim reads chat requests only: it gets the call's text as
        // messages (what `request_body` builds without a raw body).
        let raw_openai_body = (!simulated).then_some(body);
        let call = ChatCall { model: upstream_model, messages, temperature, max_tokens, raw_openai_body };
        Ok(Request { upstream, pinned, simulated, call })
    }
}

/// The 400s for what the passthrough cannot do (see the module doc).
fn refuse_unsupported(body: &Map<String, Value>) -> Result<(), ProxyError> {
    let given = |field: &str| body.get(field).is_some_and(|v| !v.is_null() && *v != Value::Bool(false));
    let refuse = |m: &str| Err(ProxyError::InvalidRequest(m.to_owned()));
    if given("stream") {
        return refuse("`stream`: streaming is not supported by the passthrough: send \"stream\": false");
    }
    if given("background") {
        return refuse(
            "`background`: background responses are not supported: the proxy keeps no state between calls, so \
             it cannot be polled for one; send \"background\": false",
        );
    }
    if given("previous_response_id") {
        return refuse(
            "`previous_response_id` is not supported: the proxy keeps no state between calls (a follow-up may \
             reach another replica or upstream): send the whole conversation in `input`",
        );
    }
    if given("conversation") {
        return refuse(
            "`conversation` is not supported: the proxy keeps no state between calls: send the whole \
             conversation in `input`",
        );
    }
    if body.contains_key("messages") {
        return refuse(
            "`messages` is a chat completions field: the Responses API takes `input` (or send this body to \
             /v1/chat/completions)",
        );
    }
    if !body.get("input").is_some_and(|i| i.is_string() || i.is_array()) {
        return refuse("`input` must be a string or a list of input items");
    }
    Ok(())
}

/// The call's text as messages: `instructions` as a system message, then
/// `input` (a string is one user message; a list gives one message per
/// item, its `content` string or parts' `text`, and for tool items their
/// `output` or `arguments`). Used for the token estimate, and as the
/// request of a `sim` upstream.
fn messages(body: &Map<String, Value>) -> Result<Vec<ChatMessage>, ProxyError> {
    let mut out = Vec::new();
    match body.get("instructions") {
        Some(Value::String(s)) => out.push(ChatMessage::new("system", s.clone())),
        Some(Value::Array(items)) => out.extend(items.iter().map(item_message)),
        Some(Value::Null) | None => {}
        Some(_) => {
            return Err(ProxyError::InvalidRequest("`instructions` must be a string or a list of input items".into()));
        }
    }
    match body.get("input") {
        Some(Value::String(s)) => out.push(ChatMessage::new("user", s.clone())),
        Some(Value::Array(items)) => out.extend(items.iter().map(item_message)),
        _ => return Err(ProxyError::InvalidRequest("`input` must be a string or a list of input items".into())),
    }
    Ok(out)
}

/// One input item as a message (role `user` when it names none).
fn item_message(item: &Value) -> ChatMessage {
    let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    };
    let content = ["content", "output", "arguments"].iter().filter_map(|k| item.get(*k)).map(text).collect::<String>();
    ChatMessage::new(role, content)
}

/// The Responses object of a `sim` answer: one completed message with the
/// sim's text, its usage, `model` the served one, and fixed ids and time
/// (the sim's answer is a function of the request alone).
fn simulated_body(reply: &ChatReply, served: &str) -> Value {
    let (input, output) = reply.usage.map_or((0, 0), |u| (u.input, u.output));
    json!({
        "id": "resp_cohort_sim",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "model": served,
        "output": [{
            "type": "message",
            "id": "msg_cohort_sim",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
        }],
        "parallel_tool_calls": false,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {"cohort_simulated": "true", "cohort_note": "cohort-sim-judge (SIMULATED): not a model"},
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn refusal(v: Value) -> String {
        match refuse_unsupported(&body(v)) {
            Err(e) => e.to_string(),
            Ok(()) => String::new(),
        }
    }

    /// Each unsupported field is refused by name; `false` and `null` are
    /// what the proxy does anyway and pass.
    #[test]
    fn unsupported_fields_are_named() {
        let base = json!({"model": "j", "input": "hi"});
        for field in ["stream", "background", "previous_response_id", "conversation", "messages"] {
            let mut b = base.clone();
            b[field] =
                if field == "previous_response_id" || field == "conversation" { json!("x") } else { json!(true) };
            if field == "messages" {
                b[field] = json!([]);
            }
            let m = refusal(b);
            assert!(m.contains(&format!("`{field}`")), "{field}: {m}");
        }
        assert!(refusal(json!({"model": "j"})).contains("`input`"));
        assert!(refusal(json!({"model": "j", "input": 3})).contains("`input`"));
        assert_eq!(refusal(json!({"model": "j", "input": "hi", "stream": false, "background": null})), "");
        assert!(refusal(json!({"model": "j", "input": "hi", "previous_response_id": "r1"})).contains("no state"));
    }

    /// Instructions and every kind of input item count for the estimate.
    #[test]
    fn the_text_of_instructions_and_input_items() {
        let m = messages(&body(json!({
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "plain"},
                {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"x\":1}"},
                {"type": "function_call_output", "call_id": "c", "output": "42"},
            ],
        })))
        .unwrap_or_default();
        let texts: Vec<(&str, &str)> = m.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(
            texts,
            [("system", "be brief"), ("user", "plain"), ("user", "ab"), ("user", "{\"x\":1}"), ("user", "42")]
        );
        let m = messages(&body(json!({"input": "hello"}))).unwrap_or_default();
        assert_eq!(m, [ChatMessage::new("user", "hello")]);
    }
}
