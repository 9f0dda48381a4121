//! Classifying a provider's HTTP answer with the attempt classes of SPEC
//! section 4. Shared by the judge proxy (judge calls) and the worker's
//! HTTP adapters (systems under test), so both sides of a cohort count an
//! outage the same way. Pure: callers do the HTTP exchange and hand over
//! the status and the body bytes.
//!
//! The rules, in order:
//! - a non-2xx answer: 401 and 403 are `auth_error` (the key or its
//!   permissions: our configuration); 402, and a 429 saying
//!   `insufficient_quota` or "quota exceeded", are `quota_exhausted`;
//!   other 429s `rate_limited`;
//!   408 `timeout`; a 502 saying "empty content" / "empty response" or with
//!   an empty body `empty_content`; other 5xx `server_error`; anything else
//!   `client_error` ([`classify_http`]);
//! - a 2xx whose body is not JSON, or not the expected shape, is
//!   `malformed` ([`parse_json`], [`read_openai_chat`]);
//! - a well-formed 2xx that refused (`finish_reason` `content_filter`, or a
//!   `refusal` field) is `refused`; one with no text is `empty_content`
//!   ([`reply_class`]); one the output cap cut (`finish_reason` `length`,
//!   `max_tokens`, `max_output_tokens`) is `client_error` ([`cut_off`],
//!   applied by the worker's adapters: a judge reply cut short is read as
//!   far as it goes);
//! - an OpenAI Responses object: its text, refusals and citations are read
//!   by [`read_responses_output`], and a `failed` one's error code is
//!   classed by [`responses_failed_class`].
//!
//! Details are secret-free only if the caller scrubs its secrets from the
//! body before classifying: a detail quotes the provider's message.

use serde_json::Value;

use crate::scoring::ApiSpan;
use crate::taxonomy::AttemptClass;

/// The longest provider text kept in an attempt's detail.
pub const MAX_DETAIL_CHARS: usize = 300;

/// The class and detail of a non-2xx answer. The detail is
/// `HTTP {status}: {message}`, the message being the body's
/// `error.message` (or `message`), else the body's text, cut to
/// [`MAX_DETAIL_CHARS`].
pub fn classify_http(status: u16, body: &[u8]) -> (AttemptClass, String) {
    let text = String::from_utf8_lossy(body);
    let lower = text.to_ascii_lowercase();
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message").or_else(|| v.get("message")).and_then(Value::as_str).map(str::to_owned)
        })
        .unwrap_or_else(|| text.trim().to_owned());
    let class = match status {
        401 | 403 => AttemptClass::AuthError,
        402 => AttemptClass::QuotaExhausted,
        429 if lower.contains("insufficient_quota") || lower.contains("quota exceeded") => AttemptClass::QuotaExhausted,
        429 => AttemptClass::RateLimited,
        408 => AttemptClass::Timeout,
        502 if lower.contains("empty content") || lower.contains("empty response") || text.trim().is_empty() => {
            AttemptClass::EmptyContent
        }
        500..=599 => AttemptClass::ServerError,
        _ => AttemptClass::ClientError,
    };
    (class, truncate_detail(&format!("HTTP {status}: {message}")))
}

/// A 2xx body as JSON, or `malformed`.
pub fn parse_json(body: &[u8]) -> Result<Value, (AttemptClass, String)> {
    serde_json::from_slice(body).map_err(|e| (AttemptClass::Malformed, format!("the body is not JSON: {e}")))
}

/// The parts of an OpenAI chat completion that classification and the
/// callers need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenAiChatReply {
    /// `choices[0].message.content`: a string, or the `text` of its parts
    /// joined; empty when null or absent.
    pub content: String,
    /// `choices[0].finish_reason`, or `refusal` when the message carries a
    /// non-empty `refusal` field.
    pub finish_reason: Option<String>,
    /// The text of the message's `refusal` field, when non-empty.
    pub refusal: Option<String>,
    /// The body's `model` (the model that served), when non-empty.
    pub model: Option<String>,
    /// `usage.prompt_tokens` and `usage.completion_tokens` (0 when only the
    /// former is given); `None` without `prompt_tokens`.
    pub usage: Option<(u64, u64)>,
    /// Whether the message carries tool calls.
    pub has_tool_calls: bool,
    /// `message.annotations` of type `url_citation` (chat completions with
    /// web search): `url_citation.start_index..end_index` of `content`, in
    /// code points. Read only when `content` is a string (offsets into
    /// parts would be ambiguous).
    pub annotations: Vec<ApiSpan>,
}

/// Reads an OpenAI chat completion body, or says why it is `malformed`.
pub fn read_openai_chat(body: &Value) -> Result<OpenAiChatReply, (AttemptClass, String)> {
    let malformed = |what: &str| (AttemptClass::Malformed, what.to_owned());
    let choice = body.pointer("/choices/0").ok_or_else(|| malformed("the reply has no choices"))?;
    let message = choice.get("message").ok_or_else(|| malformed("the first choice has no message"))?;
    let mut annotations = Vec::new();
    let content = match message.get("content") {
        Some(Value::String(s)) => {
            for a in message.get("annotations").and_then(Value::as_array).into_iter().flatten() {
                if a.get("type").and_then(Value::as_str) != Some("url_citation") {
                    continue;
                }
                // Documented nested (`url_citation: {..}`); some compatible
                // servers put the fields on the annotation itself.
                let c = a.get("url_citation").unwrap_or(a);
                if let Some(span) = api_span(c) {
                    annotations.push(span);
                }
            }
            s.clone()
        }
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        Some(Value::Null) | None => String::new(),
        Some(_) => return Err(malformed("message.content is neither text nor parts")),
    };
    let refusal = message.get("refusal").and_then(Value::as_str).filter(|r| !r.is_empty()).map(str::to_owned);
    let finish_reason = if refusal.is_some() {
        Some("refusal".to_owned())
    } else {
        choice.get("finish_reason").and_then(Value::as_str).map(str::to_owned)
    };
    let usage = body.get("usage").and_then(|u| {
        Some((u.get("prompt_tokens")?.as_u64()?, u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0)))
    });
    let model = body.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_owned);
    let has_tool_calls = message.get("tool_calls").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    Ok(OpenAiChatReply { content, finish_reason, refusal, model, usage, has_tool_calls, annotations })
}

/// A `url_citation`'s span: `start_index`, `end_index` and `url` (and
/// `title`), or `None` when one is missing.
fn api_span(c: &Value) -> Option<ApiSpan> {
    let index = |k: &str| c.get(k).and_then(Value::as_u64).and_then(|v| usize::try_from(v).ok());
    let url = c.get("url").and_then(Value::as_str).map(str::trim).filter(|u| !u.is_empty())?;
    Some(ApiSpan {
        start: index("start_index")?,
        end: index("end_index")?,
        url: url.to_owned(),
        title: c.get("title").and_then(Value::as_str).map(str::to_owned),
    })
}

/// The one rule for an answer cut off by the output cap (SPEC section 6:
/// never completed): a chat `finish_reason` of `length` (OpenAI, Perplexity,
/// vLLM, Ollama), `max_tokens` (Anthropic's `stop_reason`, some routers) or
/// `max_output_tokens`, or a Responses object `incomplete` for
/// `max_output_tokens`. It is `client_error`: the run is `failed` with its
/// partial text kept but never scored, because the cap is the cohort's
/// setting and a retry under the same cap would only spend again.
/// `http_json` applies it through its `finish_pointer`.
pub fn cut_off(finish_reason: Option<&str>) -> Option<(AttemptClass, String)> {
    let reason = finish_reason?.trim();
    CUT_OFF_REASONS.contains(&reason).then(|| {
        (AttemptClass::ClientError, format!("the answer was cut off by the output cap (finish reason {reason:?})"))
    })
}

/// The finish reasons that mean the output cap cut the answer ([`cut_off`]).
pub const CUT_OFF_REASONS: [&str; 3] = ["length", "max_tokens", "max_output_tokens"];

/// The class of a well-formed 2xx reply, `None` when it is usable:
/// `refused` when `finish_reason` is `content_filter` or `refusal`;
/// `empty_content` when `content` is blank, unless `has_tool_calls` (a
/// client that asked for tools got an answer).
pub fn reply_class(finish_reason: Option<&str>, content: &str, has_tool_calls: bool) -> Option<(AttemptClass, String)> {
    if finish_reason.is_some_and(|r| matches!(r, "content_filter" | "refusal")) {
        return Some((AttemptClass::Refused, "the provider refused (content filter)".to_owned()));
    }
    if content.trim().is_empty() && !has_tool_calls {
        return Some((AttemptClass::EmptyContent, "a 200 with no content".to_owned()));
    }
    None
}

/// What the `output` items of an OpenAI Responses object hold: the
/// `output_text` parts (parts of one message joined, messages apart by a
/// blank line), the `refusal` parts, and the `url_citation` annotations'
/// URLs (first-seen order, no repeats). Read by the worker's
/// `openai_responses` adapter and the judge proxy's `/v1/responses`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResponsesOutput {
    pub text: String,
    pub refusal: Option<String>,
    pub citations: Vec<String>,
    /// Every `url_citation` annotation, its span moved from its part's
    /// text to `text` (code points), in order, repeats kept.
    pub annotations: Vec<ApiSpan>,
}

/// Reads a Responses object's `output` items ([`ResponsesOutput`]).
pub fn read_responses_output(items: &[Value]) -> ResponsesOutput {
    let mut out = ResponsesOutput::default();
    let mut refusals = Vec::new();
    let mut text_chars = 0usize;
    for item in items.iter().filter(|i| i.get("type").and_then(Value::as_str) == Some("message")) {
        let mut message = String::new();
        let mut message_chars = 0usize;
        // Where this message's text will start in `text`: after a blank
        // line when a message came before.
        let base = text_chars + if out.text.is_empty() { 0 } else { 2 };
        for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
            match part.get("type").and_then(Value::as_str) {
                Some("output_text") => {
                    let part_text = part.get("text").and_then(Value::as_str).unwrap_or("");
                    let at = base + message_chars;
                    message.push_str(part_text);
                    message_chars += part_text.chars().count();
                    for a in part.get("annotations").and_then(Value::as_array).into_iter().flatten() {
                        if a.get("type").and_then(Value::as_str) != Some("url_citation") {
                            continue;
                        }
                        if let Some(span) = api_span(a) {
                            out.annotations.push(ApiSpan { start: at + span.start, end: at + span.end, ..span });
                        }
                        if let Some(url) = a.get("url").and_then(Value::as_str).map(str::trim).filter(|u| !u.is_empty())
                            && !out.citations.iter().any(|c| c == url)
                        {
                            out.citations.push(url.to_owned());
                        }
                    }
                }
                Some("refusal") => {
                    if let Some(r) = part.get("refusal").and_then(Value::as_str).filter(|r| !r.trim().is_empty()) {
                        refusals.push(r.to_owned());
                    }
                }
                _ => {}
            }
        }
        if !message.is_empty() {
            if !out.text.is_empty() {
                out.text.push_str("\n\n");
                text_chars += 2;
            }
            out.text.push_str(&message);
            text_chars += message_chars;
        }
    }
    out.refusal = (!refusals.is_empty()).then(|| refusals.join("\n\n"));
    out
}

/// The class of a `failed` Responses object's `error` (OpenAI documents
/// `server_error`, `rate_limit_exceeded`, `invalid_prompt`, the image
/// errors, the `*_policy` violations...): the request's own errors are
/// `client_error` (a retry fails the same way); `server_error` and any
/// code not known here are the provider's own failure, `server_error`.
pub fn responses_failed_class(code: &str, message: &str) -> AttemptClass {
    let lower = message.to_ascii_lowercase();
    if code == "rate_limit_exceeded" {
        AttemptClass::RateLimited
    } else if code == "insufficient_quota" || lower.contains("insufficient_quota") {
        AttemptClass::QuotaExhausted
    } else if code.ends_with("_policy")
        || code.ends_with("_policy_violation")
        || lower.contains("usage polic")
        || lower.contains("flagged")
    {
        AttemptClass::Refused
    } else if code.starts_with("invalid_") || code.contains("image") || code.ends_with("_mismatch") {
        // invalid_prompt, the image errors, data_residency_mismatch.
        AttemptClass::ClientError
    } else if code == "vector_store_timeout" {
        AttemptClass::Timeout
    } else {
        AttemptClass::ServerError
    }
}

/// The provider's Retry-After, the one parser of the worker's adapters and
/// the judge proxy: `retry-after-ms` (OpenAI's, in milliseconds, fractions
/// allowed) first, then `Retry-After` as seconds (fractions allowed) or an
/// HTTP date (RFC 9110 10.2.3), measured from `now` (a date in the past is
/// zero). Negative, non-finite or unreadable values are no Retry-After.
/// Callers hand over the header values as text (trimmed here).
pub fn retry_after(
    retry_after_ms: Option<&str>,
    retry_after: Option<&str>,
    now: std::time::SystemTime,
) -> Option<std::time::Duration> {
    use std::time::Duration;
    if let Some(ms) = retry_after_ms.and_then(|v| v.trim().parse::<f64>().ok()).filter(|m| m.is_finite() && *m >= 0.0) {
        return Some(Duration::from_micros((ms * 1000.0) as u64));
    }
    let value = retry_after?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_millis((secs * 1000.0) as u64));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `text` cut to [`MAX_DETAIL_CHARS`] characters, with `…` when cut.
pub fn truncate_detail(text: &str) -> String {
    if text.chars().count() <= MAX_DETAIL_CHARS {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(MAX_DETAIL_CHARS).collect();
    out.push('…');
    out
}

/// An error and its source chain on one line (`error: cause: cause`): what
/// a transport failure really was (reset, refused, closed early).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    detail
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A failed Responses object's error code picks its class (the one
    /// rule of the worker's adapter and the proxy's `/v1/responses`).
    #[test]
    fn responses_failed_codes() {
        let c = responses_failed_class;
        assert_eq!(c("rate_limit_exceeded", ""), AttemptClass::RateLimited);
        assert_eq!(c("server_error", "The model failed"), AttemptClass::ServerError);
        assert_eq!(c("bio_policy", ""), AttemptClass::Refused);
        assert_eq!(c("invalid_prompt", "flagged as potentially violating our usage policy"), AttemptClass::Refused);
        assert_eq!(c("invalid_prompt", "input too long"), AttemptClass::ClientError);
        assert_eq!(c("invalid_image_url", ""), AttemptClass::ClientError);
        assert_eq!(c("data_residency_mismatch", ""), AttemptClass::ClientError);
        assert_eq!(c("vector_store_timeout", ""), AttemptClass::Timeout);
        assert_eq!(c("something_new", ""), AttemptClass::ServerError);
    }

    /// Text of every message, refusals, and url citations once each.
    #[test]
    fn responses_output_items() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[
              {"type": "reasoning", "summary": []},
              {"type": "message", "content": [
                {"type": "output_text", "text": "One ", "annotations": [
                  {"type": "url_citation", "url": "https://a.example/ "},
                  {"type": "file_citation", "file_id": "f"}]},
                {"type": "output_text", "text": "two.", "annotations": [
                  {"type": "url_citation", "url": "https://a.example/"}]}]},
              {"type": "message", "content": [{"type": "refusal", "refusal": "No."},
                                              {"type": "output_text", "text": "Three."}]}
            ]"#,
        )
        .unwrap();
        let out = read_responses_output(&items);
        assert_eq!(out.text, "One two.\n\nThree.");
        assert_eq!(out.refusal.as_deref(), Some("No."));
        assert_eq!(out.citations, ["https://a.example/"]);
    }

    /// Annotation spans are offsets into their own part: moved to the
    /// joined text (parts of a message directly, messages apart by a blank
    /// line), in code points.
    #[test]
    fn responses_annotations_move_to_the_joined_text() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[
              {"type": "message", "content": [
                {"type": "output_text", "text": "Café rose. ", "annotations": [
                  {"type": "url_citation", "start_index": 0, "end_index": 10, "url": "https://a.example/", "title": "A"}]},
                {"type": "output_text", "text": "Tea fell.", "annotations": [
                  {"type": "url_citation", "start_index": 0, "end_index": 9, "url": "https://b.example/"}]}]},
              {"type": "message", "content": [{"type": "output_text", "text": "€ held.", "annotations": [
                  {"type": "url_citation", "start_index": 2, "end_index": 7, "url": "https://c.example/"}]}]}
            ]"#,
        )
        .unwrap();
        let out = read_responses_output(&items);
        let chars: Vec<char> = out.text.chars().collect();
        let spanned: Vec<String> = out.annotations.iter().map(|a| chars[a.start..a.end].iter().collect()).collect();
        assert_eq!(spanned, ["Café rose.", "Tea fell.", "held."]);
        assert_eq!(out.annotations[0].title.as_deref(), Some("A"));
    }

    /// The one Retry-After parser: milliseconds first, then seconds or an
    /// HTTP date from `now`; what cannot be a wait is none.
    #[test]
    fn retry_after_forms() {
        use std::time::{Duration, SystemTime};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(Some(" 1500.5 "), Some("9"), now), Some(Duration::from_micros(1_500_500)));
        assert_eq!(retry_after(None, Some("2.5"), now), Some(Duration::from_millis(2500)));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(None, Some(&date), now), Some(Duration::from_secs(7)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(None, Some(&past), now), Some(Duration::ZERO));
        assert_eq!(retry_after(Some("-1"), Some("-3"), now), None);
        assert_eq!(retry_after(Some("NaN"), Some("soon"), now), None);
        assert_eq!(retry_after(None, None, now), None);
    }

    /// A cut-off answer is `client_error` whatever the API calls it; a
    /// finished one is not cut off.
    #[test]
    fn cut_off_answers_are_client_errors() {
        for reason in ["length", "max_tokens", "max_output_tokens"] {
            assert_eq!(cut_off(Some(reason)).unwrap().0, AttemptClass::ClientError, "{reason}");
        }
        assert_eq!(cut_off(Some("stop")), None);
        assert_eq!(cut_off(None), None);
    }

    fn class(status: u16, body: &str) -> AttemptClass {
        classify_http(status, body.as_bytes()).0
    }

    /// Every non-2xx status gets the class SPEC section 4 gives it, and the
    /// detail quotes the provider's message.
    #[test]
    fn statuses_get_their_classes() {
        assert_eq!(class(429, r#"{"error":{"type":"rate_limit_exceeded"}}"#), AttemptClass::RateLimited);
        assert_eq!(class(429, r#"{"error":{"code":"insufficient_quota"}}"#), AttemptClass::QuotaExhausted);
        assert_eq!(class(429, "Quota exceeded for today"), AttemptClass::QuotaExhausted);
        assert_eq!(class(402, "{}"), AttemptClass::QuotaExhausted);
        assert_eq!(class(408, ""), AttemptClass::Timeout);
        assert_eq!(class(500, "oops"), AttemptClass::ServerError);
        assert_eq!(class(503, "busy"), AttemptClass::ServerError);
        assert_eq!(
            class(502, r#"{"error":{"message":"Provider returned empty content"}}"#),
            AttemptClass::EmptyContent
        );
        assert_eq!(class(502, "  "), AttemptClass::EmptyContent);
        assert_eq!(class(502, "bad gateway"), AttemptClass::ServerError);
        assert_eq!(class(400, "bad"), AttemptClass::ClientError);
        assert_eq!(class(401, "who"), AttemptClass::AuthError);
        assert_eq!(class(403, r#"{"error":{"message":"not allowed"}}"#), AttemptClass::AuthError);
        assert_eq!(class(404, "no such model"), AttemptClass::ClientError);
        let (_, detail) = classify_http(400, br#"{"error":{"message":"model not found"}}"#);
        assert_eq!(detail, "HTTP 400: model not found");
        let (_, detail) = classify_http(500, "x".repeat(1000).as_bytes());
        assert_eq!(detail.chars().count(), MAX_DETAIL_CHARS + 1);
    }

    /// 2xx bodies: not JSON or the wrong shape is malformed; refusals and
    /// blank text are classified; text and tool calls are usable.
    #[test]
    fn replies_get_their_classes() {
        assert_eq!(parse_json(br#"{"choices":[{"message":{"content":"Cl"#).unwrap_err().0, AttemptClass::Malformed);
        let read = |s: &str| read_openai_chat(&parse_json(s.as_bytes()).unwrap());
        assert_eq!(read(r#"{"choices":[]}"#).unwrap_err().0, AttemptClass::Malformed);
        assert_eq!(read(r#"{"choices":[{}]}"#).unwrap_err().0, AttemptClass::Malformed);
        assert_eq!(read(r#"{"choices":[{"message":{"content":7}}]}"#).unwrap_err().0, AttemptClass::Malformed);

        let r = read(r#"{"model":"m-1","choices":[{"message":{"content":[{"text":"a"},{"text":"b"}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#).unwrap();
        assert_eq!((r.content.as_str(), r.model.as_deref(), r.usage), ("ab", Some("m-1"), Some((3, 4))));
        assert_eq!(reply_class(r.finish_reason.as_deref(), &r.content, r.has_tool_calls), None);

        let r = read(r#"{"choices":[{"message":{"content":"","refusal":"I can't."}}]}"#).unwrap();
        assert_eq!(r.refusal.as_deref(), Some("I can't."));
        assert_eq!(reply_class(r.finish_reason.as_deref(), &r.content, false).unwrap().0, AttemptClass::Refused);
        assert_eq!(reply_class(Some("content_filter"), "partial", false).unwrap().0, AttemptClass::Refused);
        assert_eq!(reply_class(Some("stop"), " \n", false).unwrap().0, AttemptClass::EmptyContent);
        assert_eq!(reply_class(Some("tool_calls"), "", true), None);
    }
}
