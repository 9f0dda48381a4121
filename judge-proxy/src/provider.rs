//! The upstream wire protocols (OpenAI chat completions, the OpenAI
//! Responses API, Anthropic Messages; the SIMULATED `sim` kind speaks the
//! OpenAI chat one): building a request body, reading a reply, classifying
//! every answer with the classes of SPEC section 4, and finding the model
//! that actually served. Pure: the HTTP exchange itself (or the sim's
//! answer) is in [`crate::upstream`].
//!
//! **Which OpenAI API a call speaks** ([`Api`]) is read from the request
//! body and from the reply body rather than carried beside them, so that
//! the exchange in [`crate::upstream`] (which sees only the body) posts to
//! the right path without knowing about it. That is exact because the two
//! bodies cannot be confused: a chat body always has `messages`, and the
//! Responses passthrough ([`crate::responses`]) refuses a body with
//! `messages` and one without `input`; a Responses object always says
//! `"object": "response"`, a chat completion never does.

use std::time::{Duration, SystemTime};

use cohort_core::http_class;
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::config::{UpstreamConfig, UpstreamKind};

/// `max_tokens` sent to an Anthropic upstream (which requires it) when the
/// request sets none.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 1024;
/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.to_owned(), content: content.into() }
    }
}

/// The two OpenAI APIs the passthrough speaks to an `openai` upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST {base}/chat/completions`.
    Chat,
    /// `POST {base}/responses` (the Responses API).
    Responses,
}

impl Api {
    /// The API of a request body built by [`request_body`]: Responses when
    /// it has `input` and no `messages` (see the module doc).
    pub fn of_request(body: &Value) -> Api {
        if body.get("input").is_some() && body.get("messages").is_none() { Api::Responses } else { Api::Chat }
    }

    /// The API of a 2xx reply body: Responses when it says
    /// `"object": "response"`, or has an `output` array and no `choices`
    /// (an OpenAI-compatible provider that leaves `object` out).
    pub fn of_reply(body: &Value) -> Api {
        let says = body.get("object").and_then(Value::as_str) == Some("response");
        let looks = body.get("output").is_some_and(Value::is_array) && body.get("choices").is_none();
        if says || looks { Api::Responses } else { Api::Chat }
    }
}

/// A chat call in protocol-neutral form.
#[derive(Debug, Clone)]
pub struct ChatCall {
    /// The model requested from the upstream.
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u64>,
    /// For the OpenAI passthrough: the client's own body, sent as is but for
    /// `model` (and `temperature` when forced), so fields the proxy does not
    /// know still reach the provider. A chat completions body, or a
    /// Responses API body (then `messages` above is its `instructions` and
    /// `input` as text, for the token estimate only; see [`Api`]).
    pub raw_openai_body: Option<serde_json::Map<String, Value>>,
}

/// Tokens as the provider reported them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
}

/// A usable reply.
#[derive(Debug, Clone)]
pub struct ChatReply {
    /// The assistant's text (text blocks joined).
    pub content: String,
    /// The model that served: a configured router header, else the body's
    /// `model`; None when neither says.
    pub served_model: Option<String>,
    /// The provider that served, from the configured router headers.
    pub served_provider: Option<String>,
    pub usage: Option<TokenUsage>,
    pub finish_reason: Option<String>,
    /// The reply in OpenAI form: the provider's own body for OpenAI
    /// upstreams (a chat completion, or a Responses object when the call
    /// spoke the Responses API), a chat-completion translation for
    /// Anthropic ones.
    pub openai_body: Value,
}

/// A failed attempt, classified.
#[derive(Debug, Clone)]
pub struct AttemptFailure {
    pub class: AttemptClass,
    /// The HTTP status, when the provider answered.
    pub status: Option<u16>,
    /// What happened, secret-free once scrubbed (see `crate::upstream`).
    pub detail: String,
    /// From `retry-after-ms` or `Retry-After` (seconds or HTTP date).
    pub retry_after: Option<Duration>,
    /// The served model when the provider named one despite failing.
    pub served_model: Option<String>,
    /// Usage, if a failed reply still reported it (refusals do).
    pub usage: Option<TokenUsage>,
}

impl AttemptFailure {
    pub fn new(class: AttemptClass, status: Option<u16>, detail: impl Into<String>) -> AttemptFailure {
        AttemptFailure {
            class,
            status,
            detail: http_class::truncate_detail(&detail.into()),
            retry_after: None,
            served_model: None,
            usage: None,
        }
    }
}

/// The URL at `upstream` of a call whose body (from [`request_body`]) is
/// `request`: its [`Api`] decides the path of an `openai` upstream (the
/// passthrough never sends a Responses call to the other kinds).
pub fn endpoint(upstream: &UpstreamConfig, request: &Value) -> String {
    match upstream.kind {
        UpstreamKind::Openai if Api::of_request(request) == Api::Responses => {
            format!("{}/responses", upstream.base_url)
        }
        UpstreamKind::Openai => format!("{}/chat/completions", upstream.base_url),
        UpstreamKind::Anthropic => format!("{}/messages", upstream.base_url),
        UpstreamKind::Sim => upstream.base_url.clone(),
    }
}

/// The JSON body of `call` for an upstream of `kind`.
pub fn request_body(kind: UpstreamKind, call: &ChatCall) -> Value {
    match kind {
        // The sim reads exactly what an OpenAI-compatible provider would.
        UpstreamKind::Openai | UpstreamKind::Sim => {
            let mut body = call.raw_openai_body.clone().unwrap_or_else(|| {
                let messages: Vec<Value> =
                    call.messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
                let mut body = serde_json::Map::new();
                body.insert("messages".into(), Value::Array(messages));
                if let Some(max) = call.max_tokens {
                    body.insert("max_tokens".into(), json!(max));
                }
                body
            });
            body.insert("model".into(), json!(call.model));
            body.insert("stream".into(), json!(false));
            if let Some(t) = call.temperature {
                body.insert("temperature".into(), json!(t));
            }
            Value::Object(body)
        }
        UpstreamKind::Anthropic => {
            let system: Vec<&str> =
                call.messages.iter().filter(|m| m.role == "system").map(|m| m.content.as_str()).collect();
            let messages: Vec<Value> = call
                .messages
                .iter()
                .filter(|m| m.role != "system")
                .map(
                    |m| json!({"role": if m.role == "assistant" { "assistant" } else { "user" }, "content": m.content}),
                )
                .collect();
            let mut body = json!({
                "model": call.model,
                "max_tokens": call.max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS),
                "messages": messages,
            });
            if !system.is_empty() {
                body["system"] = json!(system.join("\n\n"));
            }
            if let Some(t) = call.temperature {
                body["temperature"] = json!(t);
            }
            body
        }
    }
}

/// Tokens a call will use, estimated before it is made: about one token
/// per 4 bytes of UTF-8 text, 4 more per message for the chat framing, and
/// `max_tokens` (or `default_output`) for the reply. Reconciled with the
/// provider's reported usage after the call, so the estimate only needs to
/// be close, not exact (see docs/judge-proxy.md, "Tokens").
pub fn estimate_tokens(messages: &[ChatMessage], max_tokens: Option<u64>, default_output: u64) -> u64 {
    let input: u64 = messages.iter().map(|m| (m.content.len() as u64).div_ceil(4) + 4).sum::<u64>() + 3;
    input + max_tokens.unwrap_or(default_output)
}

/// Reads a provider's answer: a usable [`ChatReply`], or the classified
/// failure. `now` resolves a Retry-After given as an HTTP date.
pub fn read_answer(
    upstream: &UpstreamConfig,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<ChatReply, AttemptFailure> {
    let (header_model, served_provider) = router_headers(upstream, headers);
    if !(200..300).contains(&status) {
        let mut failure = classify_error(status, body);
        failure.retry_after = retry_after(headers, now);
        failure.served_model = header_model;
        return Err(failure);
    }
    let parsed: Value = match http_class::parse_json(body) {
        Ok(v) => v,
        Err((class, detail)) => {
            let mut f = AttemptFailure::new(class, Some(status), detail);
            f.served_model = header_model;
            return Err(f);
        }
    };
    let reply = match upstream.kind {
        UpstreamKind::Openai | UpstreamKind::Sim if Api::of_reply(&parsed) == Api::Responses => read_responses(parsed),
        UpstreamKind::Openai | UpstreamKind::Sim => read_openai(parsed),
        UpstreamKind::Anthropic => read_anthropic(parsed),
    };
    let mut reply = match reply {
        Ok(r) => r,
        Err(mut f) => {
            f.status = Some(status);
            if header_model.is_some() {
                f.served_model = header_model;
            }
            return Err(f);
        }
    };
    if header_model.is_some() {
        reply.served_model = header_model;
    }
    reply.served_provider = served_provider;
    // Tool calls without text answer a client that asked for tools (the
    // passthrough), so they count as content here.
    let has_tool_calls = has_tool_calls(&reply.openai_body);
    if let Some((class, detail)) =
        http_class::reply_class(reply.finish_reason.as_deref(), &reply.content, has_tool_calls)
    {
        let mut f = AttemptFailure::new(class, Some(status), detail);
        f.served_model = reply.served_model;
        f.usage = reply.usage;
        return Err(f);
    }
    Ok(reply)
}

/// The served model and provider named by the upstream's configured router
/// headers, first present wins.
fn router_headers(upstream: &UpstreamConfig, headers: &HeaderMap) -> (Option<String>, Option<String>) {
    let first = |names: &[String]| {
        names.iter().find_map(|n| {
            headers
                .get(n.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        })
    };
    (first(&upstream.served_model_headers), first(&upstream.served_provider_headers))
}

fn read_openai(body: Value) -> Result<ChatReply, AttemptFailure> {
    let r = http_class::read_openai_chat(&body).map_err(|(class, detail)| AttemptFailure::new(class, None, detail))?;
    Ok(ChatReply {
        content: r.content,
        served_model: r.model,
        served_provider: None,
        usage: r.usage.map(|(input, output)| TokenUsage { input, output }),
        finish_reason: r.finish_reason,
        openai_body: body,
    })
}

/// Whether a chat completion or a Responses object carries tool calls: the
/// message's `tool_calls`, or any `output` item that is neither a message
/// nor reasoning (`function_call`, `web_search_call`, ...).
fn has_tool_calls(body: &Value) -> bool {
    let chat = body.pointer("/choices/0/message/tool_calls").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let responses = body.get("output").and_then(Value::as_array).is_some_and(|items| {
        items.iter().any(|i| !matches!(i.get("type").and_then(Value::as_str), Some("message" | "reasoning") | None))
    });
    chat || responses
}

/// Reads a Responses object (the same rules as the worker's
/// `openai_responses` adapter, docs/judge-proxy.md "The Responses API"):
/// the text is the `output_text` parts of the `message` items (messages
/// apart by a blank line); `completed` is usable, or `refused` when the
/// only content is a `refusal` part; `incomplete` for `content_filter` is
/// `refused`, for any other reason (`max_output_tokens`) usable with what
/// it holds (the client's own cap, as a chat `finish_reason: length`), or a
/// final `client_error` when it holds nothing; `failed` is classed by its
/// `error.code`; `cancelled` is a `client_error`; `queued` / `in_progress`
/// (background mode, which the passthrough refuses) is `malformed`. A body
/// without `status` is read as `completed`.
fn read_responses(body: Value) -> Result<ChatReply, AttemptFailure> {
    let served_model = body.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_owned);
    let usage = body.get("usage").and_then(|u| {
        Some(TokenUsage {
            input: u.get("input_tokens")?.as_u64()?,
            output: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
        })
    });
    let id = body.get("id").and_then(Value::as_str).unwrap_or("(no id)").to_owned();
    let status = body.get("status").and_then(Value::as_str).unwrap_or("completed").to_owned();
    let fail = |class: AttemptClass, detail: String| {
        let mut f = AttemptFailure::new(class, None, detail);
        f.served_model.clone_from(&served_model);
        f.usage = usage;
        f
    };
    let (text, refusal) = match body.get("output").and_then(Value::as_array) {
        Some(items) => {
            let out = cohort_core::http_class::read_responses_output(items);
            (out.text, out.refusal)
        }
        None if matches!(status.as_str(), "failed" | "cancelled") => (String::new(), None),
        None => return Err(fail(AttemptClass::Malformed, format!("response {id} has no output array"))),
    };
    let finish_reason = match status.as_str() {
        "completed" if text.trim().is_empty() && refusal.is_some() => "refusal",
        "completed" => "stop",
        "incomplete" => {
            let reason = body.pointer("/incomplete_details/reason").and_then(Value::as_str).unwrap_or("not given");
            if reason == "content_filter" {
                "content_filter"
            } else if text.trim().is_empty() && !has_tool_calls(&body) {
                return Err(fail(
                    AttemptClass::ClientError,
                    format!("response {id} is incomplete ({reason}) with no output text: raise max_output_tokens"),
                ));
            } else {
                "length"
            }
        }
        "failed" => {
            let code = body.pointer("/error/code").and_then(Value::as_str).unwrap_or("");
            let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
            return Err(fail(
                cohort_core::http_class::responses_failed_class(code, message),
                format!("response {id} failed: {code}: {message}"),
            ));
        }
        "cancelled" => return Err(fail(AttemptClass::ClientError, format!("response {id} was cancelled"))),
        other => {
            return Err(fail(
                AttemptClass::Malformed,
                format!("response {id} has status {other:?}: the proxy does not wait for background responses"),
            ));
        }
    };
    Ok(ChatReply {
        content: text,
        served_model,
        served_provider: None,
        usage,
        finish_reason: Some(finish_reason.to_owned()),
        openai_body: body,
    })
}

fn read_anthropic(body: Value) -> Result<ChatReply, AttemptFailure> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| AttemptFailure::new(AttemptClass::Malformed, None, "the reply has no content array"))?;
    let content: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("");
    let usage = body.get("usage").and_then(|u| {
        Some(TokenUsage {
            input: u.get("input_tokens")?.as_u64()?,
            output: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
        })
    });
    let served_model = body.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_owned);
    let stop = body.get("stop_reason").and_then(Value::as_str).map(str::to_owned);
    let finish_reason = stop.map(|s| match s.as_str() {
        "end_turn" | "stop_sequence" => "stop".to_owned(),
        "max_tokens" => "length".to_owned(),
        _ => s,
    });
    let openai_body = json!({
        "id": body.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion",
        "created": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "model": served_model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason,
        }],
        "usage": usage.map(|u| json!({
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input + u.output,
        })),
    });
    Ok(ChatReply { content, served_model, served_provider: None, usage, finish_reason, openai_body })
}

/// Classifies a non-2xx answer with the shared rules of
/// [`cohort_core::http_class::classify_http`] (SPEC section 4).
pub fn classify_error(status: u16, body: &[u8]) -> AttemptFailure {
    let (class, detail) = http_class::classify_http(status, body);
    AttemptFailure::new(class, Some(status), detail)
}

/// The provider's Retry-After: `retry-after-ms` (OpenAI) first, then
/// `Retry-After` as seconds or as an HTTP date (RFC 9110 10.2.3).
/// (The one parser, [`http_class::retry_after`], shared with the worker's
/// adapters.)
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name| headers.get(name).and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok());
    http_class::retry_after(text("retry-after-ms"), text(reqwest::header::RETRY_AFTER.as_str()), now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn upstream(kind: UpstreamKind) -> UpstreamConfig {
        UpstreamConfig {
            name: "u".into(),
            kind,
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: None,
            rpm: 60,
            tpm: 1000,
            max_concurrency: 1,
            burst: 2,
            context_tokens: None,
            max_output_tokens: None,
            served_model_headers: vec!["x-served-model".into()],
            served_provider_headers: vec!["x-served-provider".into()],
            forward_headers: vec![],
            anthropic_version: "2023-06-01".into(),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn class(status: u16, body: &str) -> AttemptClass {
        read_answer(&upstream(UpstreamKind::Openai), status, &HeaderMap::new(), body.as_bytes(), SystemTime::now())
            .unwrap_err()
            .class
    }

    #[test]
    fn every_failure_gets_its_class() {
        assert_eq!(class(429, r#"{"error":{"type":"rate_limit_exceeded"}}"#), AttemptClass::RateLimited);
        assert_eq!(class(429, r#"{"error":{"code":"insufficient_quota"}}"#), AttemptClass::QuotaExhausted);
        assert_eq!(class(402, "{}"), AttemptClass::QuotaExhausted);
        assert_eq!(class(500, "oops"), AttemptClass::ServerError);
        assert_eq!(class(503, "busy"), AttemptClass::ServerError);
        assert_eq!(
            class(502, r#"{"error":{"message":"Provider returned empty content"}}"#),
            AttemptClass::EmptyContent
        );
        assert_eq!(class(502, "bad gateway"), AttemptClass::ServerError);
        assert_eq!(class(400, "bad"), AttemptClass::ClientError);
        assert_eq!(class(401, "who"), AttemptClass::AuthError);
        assert_eq!(class(200, r#"{"choices":[{"message":{"content":""}}]}"#), AttemptClass::EmptyContent);
        assert_eq!(class(200, r#"{"choices":[{"message":{"content":"Claim 1: Y"#), AttemptClass::Malformed);
        assert_eq!(class(200, r#"{"choices":[]}"#), AttemptClass::Malformed);
        assert_eq!(
            class(200, r#"{"choices":[{"message":{"content":"no"},"finish_reason":"content_filter"}]}"#),
            AttemptClass::Refused
        );
    }

    #[test]
    fn router_header_names_the_served_model_over_the_body() {
        let body = r#"{"model":"alias","choices":[{"message":{"content":"Claim 1: YES"}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
        let u = upstream(UpstreamKind::Openai);
        let r = read_answer(
            &u,
            200,
            &headers(&[("x-served-model", "real-1"), ("x-served-provider", "kr")]),
            body.as_bytes(),
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!((r.served_model.as_deref(), r.served_provider.as_deref()), (Some("real-1"), Some("kr")));
        assert_eq!(r.usage, Some(TokenUsage { input: 5, output: 2 }));
        let r = read_answer(&u, 200, &HeaderMap::new(), body.as_bytes(), SystemTime::now()).unwrap();
        assert_eq!(r.served_model.as_deref(), Some("alias"));
    }

    #[test]
    fn anthropic_reply_is_read_and_translated() {
        let body = r#"{"id":"m1","model":"claude-x","content":[{"type":"text","text":"Claim 1: NO"}],"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":3}}"#;
        let r =
            read_answer(&upstream(UpstreamKind::Anthropic), 200, &HeaderMap::new(), body.as_bytes(), SystemTime::now())
                .unwrap();
        assert_eq!(r.content, "Claim 1: NO");
        assert_eq!(r.served_model.as_deref(), Some("claude-x"));
        assert_eq!(r.openai_body["choices"][0]["message"]["content"], "Claim 1: NO");
        assert_eq!(r.openai_body["usage"]["total_tokens"], 12);
    }

    /// The Anthropic Messages answers of the wire corpus
    /// (`worker/tests/wire/anthropic_messages__*.json`, written from
    /// Anthropic's documentation): each gets its class, and a usable one its
    /// text (text blocks joined), served model and usage; a reply cut at
    /// `max_tokens` is read as far as it goes (the verdict parser leaves the
    /// claims it did not reach unjudged).
    #[test]
    fn anthropic_corpus_bodies_are_read() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../worker/tests/wire");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("anthropic_messages__") || !name.ends_with(".json") {
                continue;
            }
            let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let expect = &case["expect"];
            let status = case["status"].as_u64().unwrap() as u16;
            let body = case["body"].to_string();
            let read = read_answer(
                &upstream(UpstreamKind::Anthropic),
                status,
                &HeaderMap::new(),
                body.as_bytes(),
                SystemTime::now(),
            );
            let class = expect["class"].as_str().unwrap();
            match read {
                Ok(r) => {
                    assert_eq!(class, "ok", "{name}: read as ok");
                    assert_eq!(r.content, expect["text"].as_str().unwrap(), "{name}");
                    assert_eq!(r.served_model.as_deref(), expect["served_model"].as_str(), "{name}");
                    let usage = r.usage.unwrap();
                    assert_eq!(
                        (Some(usage.input), Some(usage.output)),
                        (expect["input_tokens"].as_u64(), expect["output_tokens"].as_u64()),
                        "{name}"
                    );
                    let verdicts = cohort_core::scoring::parse_verdicts(&r.content, 2).unwrap();
                    assert!(verdicts[0].line.is_some(), "{name}: claim 1 has its verdict line");
                }
                Err(f) => assert_eq!(f.class.as_str(), class, "{name}: {}", f.detail),
            }
            seen += 1;
        }
        assert!(seen >= 5, "only {seen} Anthropic cases in {}", dir.display());
    }

    #[test]
    fn anthropic_body_moves_system_out_of_messages() {
        let call = ChatCall {
            model: "m".into(),
            messages: vec![ChatMessage::new("system", "S"), ChatMessage::new("user", "U")],
            temperature: Some(0.0),
            max_tokens: None,
            raw_openai_body: None,
        };
        let b = request_body(UpstreamKind::Anthropic, &call);
        assert_eq!(b["system"], "S");
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        assert_eq!(b["max_tokens"], ANTHROPIC_DEFAULT_MAX_TOKENS);
        assert_eq!(b["temperature"], 0.0);
    }

    #[test]
    fn retry_after_in_seconds_ms_or_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "3")]), now), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")]), now),
            Some(Duration::from_millis(250))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &date)]), now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(&headers(&[("retry-after", &past)]), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
    }

    fn responses(status: &str, extra: Value, output: Value) -> Result<ChatReply, AttemptFailure> {
        let mut body = json!({
            "id": "resp_1", "object": "response", "status": status, "model": "gpt-5-2025-08-07",
            "output": output, "usage": {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15},
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        read_answer(
            &upstream(UpstreamKind::Openai),
            200,
            &HeaderMap::new(),
            body.to_string().as_bytes(),
            SystemTime::now(),
        )
    }

    fn message(parts: Value) -> Value {
        json!([{"type": "reasoning", "id": "rs_1", "summary": []},
               {"type": "message", "id": "m1", "status": "completed", "role": "assistant", "content": parts}])
    }

    /// A completed Responses object gives its `output_text` parts (not the
    /// reasoning), the served model from `model`, usage in Responses terms,
    /// and is kept whole as the reply body.
    #[test]
    fn a_completed_response_is_read() {
        let parts = json!([{"type": "output_text", "text": "Claim 1: ", "annotations": []},
                           {"type": "output_text", "text": "YES", "annotations": []}]);
        let r = responses("completed", json!({}), message(parts)).unwrap();
        assert_eq!(r.content, "Claim 1: YES");
        assert_eq!(r.served_model.as_deref(), Some("gpt-5-2025-08-07"));
        assert_eq!(r.usage, Some(TokenUsage { input: 11, output: 4 }));
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.openai_body["object"], "response");
        assert_eq!(Api::of_reply(&r.openai_body), Api::Responses);
    }

    /// Every status and failure gets its class; usage and the served model
    /// survive a failure, so the charge is reconciled.
    #[test]
    fn response_statuses_and_failures_get_their_class() {
        let text = message(json!([{"type": "output_text", "text": "partial", "annotations": []}]));
        let class = |status: &str, extra: Value, output: Value| responses(status, extra, output).unwrap_err().class;
        assert_eq!(class("completed", json!({}), message(json!([]))), AttemptClass::EmptyContent);
        assert_eq!(
            class("completed", json!({}), message(json!([{"type": "refusal", "refusal": "I can't"}]))),
            AttemptClass::Refused
        );
        let filtered = json!({"incomplete_details": {"reason": "content_filter"}});
        assert_eq!(class("incomplete", filtered, text.clone()), AttemptClass::Refused);
        let capped = json!({"incomplete_details": {"reason": "max_output_tokens"}});
        let r = responses("incomplete", capped.clone(), text.clone()).unwrap();
        assert_eq!((r.content.as_str(), r.finish_reason.as_deref()), ("partial", Some("length")));
        let f = responses("incomplete", capped, message(json!([]))).unwrap_err();
        assert_eq!(f.class, AttemptClass::ClientError);
        assert!(f.detail.contains("max_output_tokens"), "{}", f.detail);
        let failed = |code: &str| json!({"output": [], "error": {"code": code, "message": "m"}});
        assert_eq!(class("failed", failed("server_error"), json!([])), AttemptClass::ServerError);
        assert_eq!(class("failed", failed("rate_limit_exceeded"), json!([])), AttemptClass::RateLimited);
        assert_eq!(class("failed", failed("invalid_prompt"), json!([])), AttemptClass::ClientError);
        assert_eq!(class("failed", failed("image_too_large"), json!([])), AttemptClass::ClientError);
        assert_eq!(class("failed", failed("bio_policy"), json!([])), AttemptClass::Refused);
        assert_eq!(class("failed", failed("image_content_policy_violation"), json!([])), AttemptClass::Refused);
        assert_eq!(class("failed", failed("something_new"), json!([])), AttemptClass::ServerError);
        let f = responses("failed", failed("server_error"), json!([])).unwrap_err();
        assert_eq!(
            (f.usage, f.served_model.as_deref()),
            (Some(TokenUsage { input: 11, output: 4 }), Some("gpt-5-2025-08-07"))
        );
        assert_eq!(class("cancelled", json!({}), json!([])), AttemptClass::ClientError);
        assert_eq!(class("queued", json!({}), json!([])), AttemptClass::Malformed);
        let no_output = json!({"object": "response", "status": "completed", "model": "m"});
        let r = read_answer(
            &upstream(UpstreamKind::Openai),
            200,
            &HeaderMap::new(),
            no_output.to_string().as_bytes(),
            SystemTime::now(),
        );
        assert_eq!(r.unwrap_err().class, AttemptClass::Malformed);
        let tool = json!([{"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": "{}"}]);
        assert!(responses("completed", json!({}), tool).is_ok(), "a tool call answers a client that asked for tools");
    }

    /// The router header names the served model over the body's `model`;
    /// the request body picks the path.
    #[test]
    fn responses_paths_and_router_headers() {
        let body = json!({"object": "response", "status": "completed", "model": "alias",
                          "output": message(json!([{"type": "output_text", "text": "hi"}]))});
        let r = read_answer(
            &upstream(UpstreamKind::Openai),
            200,
            &headers(&[("x-served-model", "real-1")]),
            body.to_string().as_bytes(),
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(r.served_model.as_deref(), Some("real-1"));
        let u = upstream(UpstreamKind::Openai);
        assert_eq!(endpoint(&u, &json!({"model": "m", "input": "x"})), "http://127.0.0.1:1/v1/responses");
        assert_eq!(endpoint(&u, &json!({"model": "m", "messages": []})), "http://127.0.0.1:1/v1/chat/completions");
        let call = ChatCall {
            model: "routed".into(),
            messages: vec![ChatMessage::new("user", "x")],
            temperature: Some(0.0),
            max_tokens: Some(5),
            raw_openai_body:
                json!({"model": "j", "input": "x", "max_output_tokens": 5, "reasoning": {"effort": "low"}})
                    .as_object()
                    .cloned(),
        };
        let b = request_body(UpstreamKind::Openai, &call);
        assert_eq!(b["model"], "routed");
        assert_eq!(b["temperature"], 0.0);
        assert_eq!(b["reasoning"]["effort"], "low", "fields the proxy does not know reach the provider");
        assert!(b.get("messages").is_none() && b.get("max_tokens").is_none(), "{b}");
        assert_eq!(Api::of_request(&b), Api::Responses);
    }

    #[test]
    fn estimate_counts_text_framing_and_output() {
        let m = [ChatMessage::new("user", "abcdefgh")];
        assert_eq!(estimate_tokens(&m, Some(10), 99), 2 + 4 + 3 + 10);
        assert_eq!(estimate_tokens(&m, None, 99), 2 + 4 + 3 + 99);
    }
}
