//! `openai_chat`: a system under test behind an OpenAI-compatible chat
//! completions API (OpenAI, OpenRouter, vLLM, Ollama, Perplexity's API).
//!
//! One call is one `POST {base_url}/chat/completions` with the whole
//! conversation (`user` turns as `user`, `system_under_test` turns as
//! `assistant`), non-streaming. The answer is classified with the rules the
//! judge proxy uses ([`cohort_core::http_class`]), so an outage counts the
//! same on both sides of a cohort; transport errors are `timeout` (the
//! client's `timeout_secs`) or `connection_error`. The worker's per-run
//! deadline still bounds the whole run.
//!
//! What is read from a 2xx body: `choices[0].message.content` (the output;
//! blank is `empty_content`; `finish_reason: content_filter` or a
//! `refusal` field is `refused`, its text kept); the body's `model` as the
//! observed version (never the requested model: no `model`, no version);
//! `usage.prompt_tokens` / `completion_tokens`; what the API says the
//! answer cites ([`ApiCitations`]): the message's `url_citation`
//! annotations (spans of `content`, in code points: OpenAI's search
//! models), else Perplexity's top-level `citations`, which its `[n]`
//! markers index 1-based, else its `search_results` in the same order;
//! and `search_results` entries that carry `snippet` text (as system
//! sources, with their `date` as the source's publication date when given;
//! entries without text are skipped, never given invented text). A
//! `finish_reason` of `length` (the output cap cut the answer) is
//! `client_error` with the partial text kept ([`http_class::cut_off`]),
//! and a reply that is only a `<think>` block is `empty_content`. A clarification is reported only under a configured
//! `clarification` rule (off by default: whatever the system says is its
//! output; see [`ClarificationRule`] for why the rule is narrow); the
//! follow-up call carries the whole exchange as messages. A 429's
//! `Retry-After` is noted in the detail.
//!
//! Settings (in the arm's `settings` table; nothing else is accepted):
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | `base_url` | required | `http(s)://host[:port]/path`, e.g. `https://api.perplexity.ai` |
//! | `model` | required | the model requested |
//! | `api_key_env` | none | the environment variable holding the key, sent as a bearer token |
//! | `timeout_secs` | 600 | the client timeout of one call (fractions allowed) |
//! | `max_tokens` | unset | sent as `max_tokens` |
//! | `temperature` | unset | sent as `temperature`; omitted when unset |
//! | `extra_headers` | none | a table of headers sent with every call (recorded: no secrets) |
//! | `clarification` | off | the clarification rule: `{ max_chars, ends_with_question = true, phrases = [] }` |
//!
//! The key is read once, when the adapter is built, and is kept in an
//! [`ApiKey`] that never prints; it is scrubbed from every provider text
//! that reaches an attempt's detail (some providers echo a wrong key).

use std::time::Duration;

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::http_class;
use cohort_core::scoring::{ApiCitations, wire};
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::http::{self, ClarificationRule, Scrub};
use super::settings::Settings;
use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply, TokenUsage};
use crate::score::SystemSource;

/// The key type lives with what the HTTP adapters share; its public path
/// stays here, where it was first defined.
pub use super::http::ApiKey;

/// The client timeout of one call when `timeout_secs` is unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

const KNOWN_SETTINGS: [&str; 8] =
    ["base_url", "model", "api_key_env", "timeout_secs", "max_tokens", "temperature", "extra_headers", "clarification"];

/// An arm behind an OpenAI-compatible chat completions API.
#[derive(Debug)]
pub struct OpenAiChatAdapter {
    /// `{base_url}/chat/completions`.
    endpoint: String,
    model: String,
    api_key: Option<ApiKey>,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    /// `extra_headers` and the key's `Authorization`, checked when built.
    headers: HeaderMap,
    /// Built with the call timeout; one per arm, so connections are reused.
    client: reqwest::Client,
    /// `clarification`; `None`: no reply is a clarification.
    clarification: Option<ClarificationRule>,
}

impl OpenAiChatAdapter {
    /// The adapter of `arm`; reads the key from `api_key_env` now, so a
    /// missing key stops the worker before any run is leased.
    pub fn from_arm(arm: &ArmConfig) -> Result<OpenAiChatAdapter, AdapterError> {
        OpenAiChatAdapter::with_env(arm, |var| std::env::var(var).ok())
    }

    /// [`OpenAiChatAdapter::from_arm`] with `env` looking up environment
    /// variables (tests inject the key without touching the process).
    pub fn with_env(arm: &ArmConfig, env: impl Fn(&str) -> Option<String>) -> Result<OpenAiChatAdapter, AdapterError> {
        let s = Settings::new(arm, "openai_chat", &KNOWN_SETTINGS)?;
        let base_url = s.required_string("base_url")?;
        let parsed = url::Url::parse(&base_url).map_err(|e| s.bad("base_url", format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(s.bad("base_url", "must be an http:// or https:// URL with a host"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
            return Err(s.bad(
                "base_url",
                "must carry no credentials and no query (settings are recorded): name the key's variable in api_key_env",
            ));
        }
        let model = s.required_string("model")?;
        let api_key = http::api_key(&s, env)?;
        let temperature = s.number("temperature")?;
        if temperature.is_some_and(|t| t < 0.0) {
            return Err(s.bad("temperature", "must not be negative"));
        }
        let headers = http::extra_headers(&s, api_key.as_ref())?;
        let timeout = s.seconds("timeout_secs", DEFAULT_TIMEOUT)?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| s.bad("timeout_secs", format!("cannot build the HTTP client: {e}")))?;
        Ok(OpenAiChatAdapter {
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            model,
            api_key,
            max_tokens: s.whole("max_tokens")?,
            temperature,
            headers,
            client,
            clarification: s.clarification()?,
        })
    }

    /// The JSON body of a call with `request`'s conversation.
    pub fn request_body(&self, request: &AdapterRequest) -> Value {
        let mut body = json!({"model": self.model, "messages": http::messages(request), "stream": false});
        if let Some(max) = self.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        body
    }

    /// Classifies and reads an answer (`status`, `body`).
    pub fn read_answer(&self, status: u16, body: &[u8]) -> AdapterResponse {
        if !(200..300).contains(&status) {
            // Scrubbed before classifying: the detail quotes the body, and a
            // key cut by truncation would no longer be found.
            // The retry note is added by `call`, after the truncation, so a
            // long body never cuts it off.
            let text = self.api_key.scrub(&String::from_utf8_lossy(body));
            let (class, detail) = http_class::classify_http(status, text.as_bytes());
            return http::failure(class, status, detail);
        }
        let parsed = match http_class::parse_json(body) {
            Ok(v) => v,
            Err((class, detail)) => return http::failure(class, status, detail),
        };
        let reply = match http_class::read_openai_chat(&parsed) {
            Ok(r) => r,
            Err((class, detail)) => return http::failure(class, status, detail),
        };
        // A research system's answer is its text: tool calls alone are not
        // one, and neither is a reasoning block with nothing after it.
        let answer_blank = wire::is_reasoning_only(&reply.content);
        let verdict = http_class::reply_class(reply.finish_reason.as_deref(), &reply.content, false)
            .or_else(|| http_class::cut_off(reply.finish_reason.as_deref()))
            .or_else(|| {
                answer_blank.then(|| (AttemptClass::EmptyContent, "only a reasoning block, no answer".to_owned()))
            });
        let (class, detail, text) = match verdict {
            None => (AttemptClass::Ok, String::new(), Some(reply.content)),
            Some((AttemptClass::Refused, detail)) => {
                let text = if reply.content.trim().is_empty() { reply.refusal } else { Some(reply.content) };
                (AttemptClass::Refused, detail, text.filter(|t| !t.trim().is_empty()))
            }
            // Cut off: failed, the partial text kept (never scored).
            Some((AttemptClass::ClientError, detail)) => {
                (AttemptClass::ClientError, detail, Some(reply.content).filter(|t| !t.trim().is_empty()))
            }
            Some((class, detail)) => (class, detail, None),
        };
        let citations =
            if reply.annotations.is_empty() { citation_list(&parsed) } else { ApiCitations::spans(reply.annotations) };
        AdapterResponse {
            class,
            http_status: status,
            detail: self.api_key.scrub(&detail),
            reply: text.map_or(Reply::Nothing, Reply::Output),
            observed_version: reply.model,
            usage: reply.usage.map(|(input_tokens, output_tokens)| TokenUsage { input_tokens, output_tokens }),
            citations,
            sources: search_results(&parsed),
            retry_after_ms: None,
        }
    }
}

#[async_trait]
impl Adapter for OpenAiChatAdapter {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let sent = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .json(&self.request_body(request))
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return http::transport_failure(&e, 0, &self.api_key),
        };
        let status = response.status().as_u16();
        let retry = http::retry_after(response.headers());
        match response.bytes().await {
            Ok(body) => {
                let mut r = http::apply_rule(self.clarification.as_ref(), request, self.read_answer(status, &body));
                http::note_retry_after(&mut r, retry);
                r
            }
            Err(e) => http::transport_failure(&e, status, &self.api_key),
        }
    }
}

/// Perplexity's numbered citations: the top-level `citations` (URL
/// strings) that its `[n]` markers index 1-based, else `search_results`
/// (its newer field, in the same order, with titles). Every entry keeps its
/// place, so the markers after a blank one still point right.
fn citation_list(body: &Value) -> ApiCitations {
    let list = |key: &str| body.get(key).and_then(Value::as_array).filter(|a| !a.is_empty());
    if let Some(urls) = list("citations") {
        return ApiCitations::numbered(urls.iter().map(|u| match u {
            Value::String(u) => (u.clone(), None),
            // Some compatible servers send objects here.
            other => (
                other.get("url").and_then(Value::as_str).unwrap_or_default().to_owned(),
                other.get("title").and_then(Value::as_str).map(str::to_owned),
            ),
        }));
    }
    match list("search_results") {
        Some(results) => ApiCitations::numbered(results.iter().map(|r| {
            (
                r.get("url").and_then(Value::as_str).unwrap_or_default().to_owned(),
                r.get("title").and_then(Value::as_str).map(str::to_owned),
            )
        })),
        None => ApiCitations::None,
    }
}

/// Perplexity's `search_results` that carry text in `snippet`; entries
/// without a URL or without text are skipped (a title is not evidence).
fn search_results(body: &Value) -> Vec<SystemSource> {
    body.get("search_results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let url = r.get("url").and_then(Value::as_str).map(str::trim).filter(|u| !u.is_empty())?;
            let snippet = r.get("snippet").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())?;
            let title = r.get("title").and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty());
            // `date` is the publication date Perplexity gives for the result,
            // kept as given; `last_updated` is a modification date, not one.
            let date = r.get("date").and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty());
            Some(SystemSource {
                url: url.to_owned(),
                title: title.map(str::to_owned),
                snippet: snippet.to_owned(),
                published_at: date.map(str::to_owned),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use super::*;

    /// Built directly: `read_answer` needs no settings, and the arm config's
    /// fields change more often than this adapter's.
    fn adapter() -> OpenAiChatAdapter {
        OpenAiChatAdapter {
            endpoint: "http://127.0.0.1:9/chat/completions".into(),
            model: "sonar".into(),
            api_key: None,
            max_tokens: None,
            temperature: None,
            headers: HeaderMap::new(),
            client: reqwest::Client::new(),
            clarification: None,
        }
    }

    /// Proves a search result's `date` becomes its source's publication
    /// date as given, that `last_updated` is never taken for it, and that a
    /// result without a date has none (never invented).
    #[test]
    fn search_result_dates_are_kept_as_given() {
        let body = json!({
            "model": "sonar-deep-research",
            "choices": [{"message": {"content": "Answer [1]."}, "finish_reason": "stop"}],
            "search_results": [
                {"url": "https://a.example/1", "snippet": "Alpha.", "date": "2024-01-01", "last_updated": "2025-02-02"},
                {"url": "https://b.example/2", "snippet": "Beta.", "last_updated": "2025-02-03"},
                {"url": "https://c.example/3", "snippet": "Gamma.", "date": "  "},
            ],
        });
        let r = adapter().read_answer(200, body.to_string().as_bytes());
        assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
        let dates: Vec<Option<&str>> = r.sources.iter().map(|s| s.published_at.as_deref()).collect();
        assert_eq!(dates, [Some("2024-01-01"), None, None]);
    }

    /// Proves a reply that is only a reasoning block is `empty_content`
    /// (no answer was obtained), and one with an answer after it is `ok`.
    #[test]
    fn a_reasoning_block_alone_is_no_answer() {
        let body = |content: &str| {
            json!({"model": "sonar-reasoning-pro", "choices": [{"message": {"content": content}, "finish_reason": "stop"}]})
                .to_string()
        };
        let r = adapter().read_answer(200, body("<think>\nI will search.\n</think>\n\n").as_bytes());
        assert_eq!(r.class, AttemptClass::EmptyContent, "{}", r.detail);
        let r = adapter().read_answer(200, body("<think>\nI will search.\n</think>\n\nSales grew [1].").as_bytes());
        assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    }
}
