//! `openai_responses`: a system under test behind OpenAI's Responses API
//! (`POST {base_url}/responses`), the API of the deep-research models
//! (`o3-deep-research`, `o4-mini-deep-research`) with a web-search tool.
//!
//! One call creates one response with the whole conversation as `input`
//! (a list of `user` / `assistant` messages: the follow-up after a
//! clarification carries the exchange itself, so it needs no stored
//! state and sends exactly what the record keeps; `previous_response_id`
//! is not used). With `background: true` the create call answers at once
//! with `status: queued`, and the adapter polls `GET {base_url}/responses/{id}`
//! until a terminal status (the first poll 250 ms after the create, then
//! waits doubling up to `poll_interval_ms`, as the OpenAI SDKs back off:
//! a response done in a second is read within one), within the call's
//! budget: `timeout_secs` or the run's deadline, whichever comes first.
//! When the budget runs out the attempt is a `timeout` whose detail names
//! the response id (so the record says which response was abandoned), and
//! the adapter asks the API to cancel it (best effort; the detail says
//! whether that worked). A poll that meets an outage (connection error,
//! 5xx, 429) is retried at the next interval: a long research job is not
//! lost to one bad poll; a 401/403/404 on a poll ends the attempt.
//!
//! How a terminal response is read (SPEC section 4):
//! - `completed`: the output is the `output_text` parts of the `message`
//!   items, concatenated (parts of one message directly, messages separated
//!   by a blank line); `reasoning` and `web_search_call` items are not
//!   output. No text and a `refusal` part is `refused` (its text kept); no
//!   text at all is `empty_content`.
//! - `incomplete`: `incomplete_details.reason` `content_filter` is
//!   `refused` (the partial text kept); `max_output_tokens` (and any other
//!   reason) is `client_error`, so the run is `failed` with the partial text
//!   kept but never scored: the cap is our setting, and a retry under the
//!   same cap would only spend again.
//! - `failed`: `error.code` `rate_limit_exceeded` is `rate_limited`,
//!   `insufficient_quota` `quota_exhausted`, a code or message naming a
//!   usage policy (`invalid_prompt` flagged as such, `*_policy`) `refused`,
//!   `invalid_prompt` otherwise `client_error`, anything else
//!   `server_error` (the provider failed its own job: an outage, retried
//!   under the cohort's policy).
//! - `cancelled` (not by us): `client_error`.
//!
//! Citations: every `url_citation` annotation, its span moved from its
//! part's text to the joined output (code points), as
//! [`cohort_core::scoring::ApiCitations::Spans`]: the scorer gives each
//! the sentence its span covers. Their titles and spans are not made into
//! system sources: a system
//! source is evidence for the judge and the reviewers, and the span is the
//! system's own text (a claim would be checked against itself), the title
//! no evidence at all; the cited URLs are captured like any other.
//! The observed version is the body's `model` (the served snapshot, e.g.
//! `o3-deep-research-2025-06-26`), usage `usage.input_tokens` /
//! `output_tokens`. Non-2xx answers are classified with
//! [`cohort_core::http_class`] like `openai_chat` (a 429's `Retry-After` is
//! noted in the detail); the key is scrubbed from every detail.
//!
//! Settings (nothing else is accepted; docs/adapters.md):
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | `base_url` | `https://api.openai.com/v1` | the API root |
//! | `model` | required | the model requested |
//! | `api_key_env` | none | the environment variable holding the key (bearer) |
//! | `tools` | `[{ type = "web_search_preview" }]` | the tools sent, as given; a bare name `"x"` is `{ type = "x" }` |
//! | `background` | true for a model whose name contains `deep-research`, else false | create in background mode and poll |
//! | `poll_interval_ms` | 5000 | the longest wait between polls (at least 10); the first poll goes 250 ms after the create, and the waits double up to this |
//! | `timeout_secs` | 3600 | the longest one call may take, polling included |
//! | `max_output_tokens` | unset | sent as `max_output_tokens` |
//! | `reasoning_effort` | unset | sent as `reasoning.effort` (`minimal`, `low`, `medium`, `high`) |
//! | `extra_headers` | none | headers sent with every call (recorded: no secrets) |
//! | `clarification` | off | the clarification rule ([`super::ClarificationRule`]) |

use std::time::Duration;

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::http_class;
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::http::{self, Budget, Call, ClarificationRule, Outages, Polled, Secrets};
use super::settings::Settings;
use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply, TokenUsage};

/// The longest one call may take, polling included, by default: deep
/// research takes minutes to tens of minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest wait between polls by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const KNOWN_SETTINGS: [&str; 11] = [
    "base_url",
    "model",
    "api_key_env",
    "tools",
    "background",
    "poll_interval_ms",
    "timeout_secs",
    "max_output_tokens",
    "reasoning_effort",
    "extra_headers",
    "clarification",
];

const REASONING_EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// An arm behind the Responses API.
#[derive(Debug)]
pub struct OpenAiResponsesAdapter {
    /// `{base_url}/responses`.
    endpoint: String,
    model: String,
    tools: Vec<Value>,
    background: bool,
    poll_interval: Duration,
    timeout: Duration,
    max_output_tokens: Option<u64>,
    reasoning_effort: Option<String>,
    /// `extra_headers` and the key's `Authorization`.
    headers: HeaderMap,
    clarification: Option<ClarificationRule>,
    secrets: Secrets,
    /// No client-wide timeout: every request gets what is left of the
    /// call's budget.
    client: reqwest::Client,
}

impl OpenAiResponsesAdapter {
    /// The adapter of `arm`; reads the key from `api_key_env` now.
    pub fn from_arm(arm: &ArmConfig) -> Result<OpenAiResponsesAdapter, AdapterError> {
        OpenAiResponsesAdapter::with_env(arm, |var| std::env::var(var).ok())
    }

    /// [`OpenAiResponsesAdapter::from_arm`] with `env` looking up
    /// environment variables.
    pub fn with_env(
        arm: &ArmConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<OpenAiResponsesAdapter, AdapterError> {
        let s = Settings::new(arm, "openai_responses", &KNOWN_SETTINGS)?;
        let base_url = s.string("base_url")?.unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        http::check_url(&s, "base_url", &base_url)?;
        let model = s.required_string("model")?;
        let mut secrets = Secrets::default();
        let api_key = http::api_key(&s, env)?;
        if let Some(key) = &api_key {
            secrets.add_key(key);
        }
        let tools = match s.raw("tools") {
            None => vec![json!({"type": "web_search_preview"})],
            // A bare name is shorthand for `{ type = NAME }`.
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, t)| match t {
                    Value::String(ty) if !ty.trim().is_empty() => Ok(json!({"type": ty.trim()})),
                    Value::Object(_)
                        if t.get("type").and_then(Value::as_str).is_some_and(|ty| !ty.trim().is_empty()) =>
                    {
                        Ok(t.clone())
                    }
                    _ => {
                        Err(s.bad("tools", format!("item {i}: must be a tool name or a table with a `type`, got {t}")))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(s.bad("tools", format!("must be an array of tool names or tables, got {v}"))),
        };
        // Deep-research models only run in background mode in practice (a
        // foreground call would hold one connection for up to an hour);
        // the rule is the model's name, and the setting overrides it.
        let background = s.boolean("background")?.unwrap_or_else(|| model.contains("deep-research"));
        let poll_interval = http::poll_interval(&s, DEFAULT_POLL_INTERVAL)?;
        let reasoning_effort = s.string("reasoning_effort")?;
        if let Some(e) = &reasoning_effort
            && !REASONING_EFFORTS.contains(&e.as_str())
        {
            return Err(
                s.bad("reasoning_effort", format!("must be one of {}, got {e:?}", REASONING_EFFORTS.join(", ")))
            );
        }
        let headers = http::extra_headers(&s, api_key.as_ref())?;
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| s.bad("base_url", format!("cannot build the HTTP client: {e}")))?;
        Ok(OpenAiResponsesAdapter {
            endpoint: format!("{}/responses", base_url.trim_end_matches('/')),
            model,
            tools,
            background,
            poll_interval,
            timeout: s.seconds("timeout_secs", DEFAULT_TIMEOUT)?,
            max_output_tokens: s.whole("max_output_tokens")?,
            reasoning_effort,
            headers,
            clarification: s.clarification()?,
            secrets,
            client,
        })
    }

    /// The JSON body that creates a response for `request`'s conversation.
    pub fn request_body(&self, request: &AdapterRequest) -> Value {
        let mut body = json!({"model": self.model, "input": http::messages(request), "tools": self.tools});
        if self.background {
            // Background responses must be stored (the API refuses
            // `background` with `store: false`): polling reads them back.
            body["background"] = json!(true);
            body["store"] = json!(true);
        }
        if let Some(max) = self.max_output_tokens {
            body["max_output_tokens"] = json!(max);
        }
        if let Some(effort) = &self.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        body
    }

    /// Polls response `id` until a terminal status or the budget's end.
    async fn poll(&self, id: &str, call: &Call<'_>) -> AdapterResponse {
        let url = format!("{}/{}", self.endpoint, http::encode_component(id));
        let read = |status, parsed: Value| match parsed.get("status").and_then(Value::as_str) {
            Some("queued" | "in_progress") => None,
            _ => Some(self.read_response(status, &parsed)),
        };
        match call.poll(&url, self.poll_interval, &format!("response {id}"), read).await {
            Polled::Answer(r) | Polled::Failed(r) => r,
            Polled::OutOfTime(outages) => self.abandon(id, call, &outages).await,
        }
    }

    /// The attempt when the budget ran out while response `id` was still
    /// running: a `timeout` naming the id, after a cancel request.
    async fn abandon(&self, id: &str, call: &Call<'_>, outages: &Outages) -> AdapterResponse {
        // The cancel gets a short bound of its own: the worker's deadline
        // is close, and an uncancelled response only costs, it is never
        // read again.
        let cancel = self
            .client
            .post(format!("{}/{}/cancel", self.endpoint, http::encode_component(id)))
            .headers(call.headers.clone())
            .timeout(call.budget.margin / 2)
            .send()
            .await;
        let cancelled = match cancel {
            Ok(r) if r.status().is_success() => "cancel requested".to_owned(),
            Ok(r) => format!("cancel refused with HTTP {}", r.status().as_u16()),
            Err(e) => format!("cancel failed: {}", self.secrets.scrub(&http_class::error_chain(&e))),
        };
        let detail = format!(
            "response {id} still running at {}; {cancelled}{}",
            call.budget.describe(self.timeout),
            outages.note()
        );
        http::failure(AttemptClass::Timeout, 0, detail)
    }

    /// Classifies and reads a 2xx Responses API body in a terminal status
    /// (or a foreground answer).
    pub fn read_response(&self, http_status: u16, body: &Value) -> AdapterResponse {
        let id = body.get("id").and_then(Value::as_str).unwrap_or("(no id)");
        let Some(status) = body.get("status").and_then(Value::as_str) else {
            return http::failure(AttemptClass::Malformed, http_status, format!("response {id} has no status"));
        };
        let Some(output) = body.get("output").and_then(Value::as_array).or_else(|| {
            // A failed or cancelled response may carry no output at all.
            matches!(status, "failed" | "cancelled").then_some(&EMPTY)
        }) else {
            return http::failure(AttemptClass::Malformed, http_status, format!("response {id} has no output array"));
        };
        let read = cohort_core::http_class::read_responses_output(output);
        let observed_version = body.get("model").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
        let usage = body.get("usage").and_then(|u| {
            Some(TokenUsage {
                input_tokens: u.get("input_tokens")?.as_u64()?,
                output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
            })
        });
        let (class, detail, text) = match status {
            "completed" if !read.text.trim().is_empty() => (AttemptClass::Ok, String::new(), Some(read.text)),
            "completed" => match read.refusal {
                Some(r) => (AttemptClass::Refused, format!("response {id} refused"), Some(r)),
                None => (AttemptClass::EmptyContent, format!("response {id} completed with no output text"), None),
            },
            "incomplete" => {
                let reason = body.pointer("/incomplete_details/reason").and_then(Value::as_str).unwrap_or("not given");
                let partial = Some(read.text).filter(|t| !t.trim().is_empty()).or(read.refusal);
                if reason == "content_filter" {
                    (AttemptClass::Refused, format!("response {id} incomplete: content_filter"), partial)
                } else {
                    (AttemptClass::ClientError, format!("response {id} incomplete: {reason}"), partial)
                }
            }
            "failed" => {
                let code = body.pointer("/error/code").and_then(Value::as_str).unwrap_or("");
                let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
                let class = cohort_core::http_class::responses_failed_class(code, message);
                let detail = self.secrets.scrub(&format!("response {id} failed: {code}: {message}"));
                (class, detail, None)
            }
            "cancelled" => (AttemptClass::ClientError, format!("response {id} was cancelled (not by cohort)"), None),
            other => (AttemptClass::Malformed, format!("response {id} has an unknown status {other:?}"), None),
        };
        AdapterResponse {
            class,
            http_status,
            detail: http_class::truncate_detail(&detail),
            reply: text.map_or(Reply::Nothing, Reply::Output),
            observed_version: observed_version.map(str::to_owned),
            usage,
            citations: cohort_core::scoring::ApiCitations::spans(read.annotations),
            sources: Vec::new(),
            retry_after_ms: None,
        }
    }
}

static EMPTY: Vec<Value> = Vec::new();

#[async_trait]
impl Adapter for OpenAiResponsesAdapter {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let call = Call {
            client: &self.client,
            headers: self.headers.clone(),
            budget: Budget::of(request, self.timeout),
            timeout: self.timeout,
            secrets: &self.secrets,
        };
        let create = self.client.post(&self.endpoint).json(&self.request_body(request));
        let (status, parsed) = match call.exchange_json(create).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let response = match parsed.get("status").and_then(Value::as_str) {
            Some("queued" | "in_progress") => match parsed.get("id").and_then(Value::as_str) {
                Some(id) if !id.trim().is_empty() => self.poll(id, &call).await,
                _ => http::failure(AttemptClass::Malformed, status, "a running response without an id".to_owned()),
            },
            _ => self.read_response(status, &parsed),
        };
        http::apply_rule(self.clarification.as_ref(), request, response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids are sent as one path segment, whatever they hold.
    #[test]
    fn ids_are_one_segment() {
        assert_eq!(http::encode_component("resp_68af4030592c8193"), "resp_68af4030592c8193");
        assert_eq!(http::encode_component("a/../b?c"), "a%2F..%2Fb%3Fc");
    }
}
