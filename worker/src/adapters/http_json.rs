//! `http_json`: a system under test behind any HTTP JSON API, described by
//! its settings: a request template, JSON pointers (RFC 6901) to what the
//! answer holds, and optionally a job URL to poll for asynchronous APIs.
//!
//! The request body is the `body` template with values substituted, never
//! text pasted into JSON: a string value equal to `"{{conversation}}"`
//! becomes the conversation (an array of `{role, content}` objects, roles
//! `user` and `assistant`), and every `{{prompt}}` inside a string value
//! becomes the exact prompt (the first user turn). The template is a
//! `serde_json::Value` and the prompt is put in as a string, so quotes,
//! backslashes, newlines and even a literal `{{prompt}}` in the prompt
//! arrive as written; the prompt's own text is never scanned again.
//!
//! Header values may name environment variables as `${ENV:NAME}`, read
//! once when the adapter is built (an unset one stops the worker before
//! any run is leased); the values are sent marked sensitive and scrubbed
//! from every detail, and the settings (which are recorded) hold only the
//! names. An `authorization`-like header must come from the environment.
//!
//! Reading a 2xx answer (the create answer, or the last poll):
//! - `refusal_pointer` (optional): a non-blank string, or `true`, is
//!   `refused` (the string, else the output, kept as the text);
//! - `output_pointer`: a string; found nothing (or not a string) is
//!   `malformed`, blank is `empty_content`;
//! - `clarification_pointer` (optional): a non-blank string is the
//!   clarifying question, `true` means the output is one; else the
//!   `clarification` rule, when configured, decides (see
//!   [`super::ClarificationRule`]). A clarification needs `{{conversation}}`
//!   in the body: the follow-up must carry the exchange;
//! - `citations_pointer` (optional): an array of URL strings, or of objects
//!   with `url` (and `title`, `snippet`): the URLs become the citations, and
//!   entries with snippet text become system sources (never invented).
//!   The list is numbered: a `[n]` marker in the output is entry `n`
//!   (1-based), as Perplexity's `citations` are;
//! - `finish_pointer` (optional): why the answer ended; a string equal to
//!   one of `cut_off_values` (default `length`, `max_tokens`,
//!   `max_output_tokens`) means the output cap cut it: `client_error`, so
//!   the run is `failed` with the partial text kept, never scored (the
//!   rule of every adapter, [`cohort_core::http_class::cut_off`]);
//! - `version_pointer`: the observed version; found nothing is "not
//!   disclosed", never the requested model;
//! - `usage_input_pointer` / `usage_output_pointer`: token counts.
//!
//! Polling (all of `job_id_pointer`, `poll_url`, `status_pointer`,
//! `done_values` together): the job id is read from the create answer and
//! put into `poll_url`'s `{{job_id}}` (percent-encoded); the job URL is
//! fetched with `GET` (first 250 ms after the create, then waits doubling
//! up to `poll_interval_ms`) until `status_pointer` reads
//! one of `done_values` (the answer is then read from that body) or one of
//! `failed_values` (`server_error`: the provider failed its own job, an
//! outage retried under the cohort's policy). Outages on a poll are
//! retried at the next interval; past `timeout_secs` or the run's deadline
//! the attempt is a `timeout` naming the job id.
//!
//! Non-2xx answers are classified with [`cohort_core::http_class`] like
//! every HTTP adapter.

use std::time::Duration;

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::http::{self, Budget, Call, ClarificationRule, Polled, Secrets, check_url};
use super::settings::Settings;
use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply, TokenUsage};
use crate::score::SystemSource;
use cohort_core::scoring::ApiCitations;

/// The longest one call may take, polling included, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Time between polls by default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(2);

const KNOWN_SETTINGS: [&str; 21] = [
    "url",
    "method",
    "headers",
    "body",
    "output_pointer",
    "citations_pointer",
    "version_pointer",
    "usage_input_pointer",
    "usage_output_pointer",
    "clarification_pointer",
    "refusal_pointer",
    "clarification",
    "job_id_pointer",
    "poll_url",
    "status_pointer",
    "done_values",
    "failed_values",
    "poll_interval_ms",
    "timeout_secs",
    "finish_pointer",
    "cut_off_values",
];

const PROMPT: &str = "{{prompt}}";
const CONVERSATION: &str = "{{conversation}}";
const JOB_ID: &str = "{{job_id}}";

/// Header names whose values are credentials: they must come from the
/// environment, since settings are recorded.
const SECRET_HEADERS: [&str; 5] = ["authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"];

/// How a job is polled.
#[derive(Debug, Clone)]
struct Polling {
    job_id_pointer: String,
    /// With `{{job_id}}` in it.
    poll_url: String,
    status_pointer: String,
    done_values: Vec<String>,
    failed_values: Vec<String>,
    interval: Duration,
}

/// An arm behind an HTTP JSON API.
#[derive(Debug)]
pub struct HttpJsonAdapter {
    url: String,
    method: reqwest::Method,
    headers: HeaderMap,
    body: Value,
    output_pointer: String,
    citations_pointer: Option<String>,
    /// Where the answer says why it ended; one of `cut_off_values` there
    /// means the output cap cut it (`http_class::cut_off`'s rule).
    finish_pointer: Option<String>,
    cut_off_values: Vec<String>,
    version_pointer: Option<String>,
    usage_input_pointer: Option<String>,
    usage_output_pointer: Option<String>,
    clarification_pointer: Option<String>,
    refusal_pointer: Option<String>,
    clarification: Option<ClarificationRule>,
    polling: Option<Polling>,
    timeout: Duration,
    secrets: Secrets,
    client: reqwest::Client,
}

impl HttpJsonAdapter {
    /// The adapter of `arm`; reads `${ENV:NAME}` header values now.
    pub fn from_arm(arm: &ArmConfig) -> Result<HttpJsonAdapter, AdapterError> {
        HttpJsonAdapter::with_env(arm, |var| std::env::var(var).ok())
    }

    /// [`HttpJsonAdapter::from_arm`] with `env` looking up environment
    /// variables.
    pub fn with_env(arm: &ArmConfig, env: impl Fn(&str) -> Option<String>) -> Result<HttpJsonAdapter, AdapterError> {
        let s = Settings::new(arm, "http_json", &KNOWN_SETTINGS)?;
        let url = s.required_string("url")?;
        check_url(&s, "url", &url)?;
        let method = match s.string("method")?.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("POST") => reqwest::Method::POST,
            Some("PUT") => reqwest::Method::PUT,
            Some("PATCH") => reqwest::Method::PATCH,
            Some(other) => {
                return Err(s.bad(
                    "method",
                    format!("must be POST, PUT or PATCH (the prompt goes in the body), got {other:?}"),
                ));
            }
        };
        let mut secrets = Secrets::default();
        let mut headers = HeaderMap::new();
        for (name, template) in s.string_table("headers")? {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| s.bad("headers", format!("{name:?} is not a header name")))?;
            let (value, from_env) = resolve_env(&s, &name, &template, &env, &mut secrets)?;
            if SECRET_HEADERS.contains(&header.as_str()) && !from_env {
                return Err(s.bad(
                    "headers",
                    format!("{name}: a credential must be read from the environment as ${{ENV:NAME}} (settings are recorded)"),
                ));
            }
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| s.bad("headers", format!("{name}: not a valid header value")))?;
            value.set_sensitive(from_env);
            headers.insert(header, value);
        }
        let body = s.raw("body").cloned().ok_or_else(|| s.bad("body", "is required: the request's JSON template"))?;
        let (has_prompt, has_conversation) = placeholders(&body);
        if !has_prompt && !has_conversation {
            return Err(s.bad("body", "must hold \"{{prompt}}\" in a string or \"{{conversation}}\" as a value"));
        }
        let pointer = |field: &str| -> Result<Option<String>, AdapterError> {
            match s.raw(field) {
                None => Ok(None),
                Some(Value::String(p)) if p.is_empty() || p.starts_with('/') => Ok(Some(p.clone())),
                Some(v) => {
                    Err(s
                        .bad(field, format!("must be a JSON pointer (RFC 6901: \"\" or starting with \"/\"), got {v}")))
                }
            }
        };
        let output_pointer = pointer("output_pointer")?.ok_or_else(|| s.bad("output_pointer", "is required"))?;
        let clarification_pointer = pointer("clarification_pointer")?;
        let clarification = s.clarification()?;
        if (clarification_pointer.is_some() || clarification.is_some()) && !has_conversation {
            return Err(s.bad(
                "body",
                "a clarification (clarification_pointer or clarification) needs \"{{conversation}}\" in the body: the follow-up must carry the exchange",
            ));
        }
        let poll_fields = ["job_id_pointer", "poll_url", "status_pointer", "done_values"];
        let set: Vec<&str> = poll_fields.iter().copied().filter(|f| s.raw(f).is_some()).collect();
        let polling = if set.is_empty() {
            for f in ["failed_values", "poll_interval_ms"] {
                if s.raw(f).is_some() {
                    return Err(
                        s.bad(f, "is used only with polling (job_id_pointer, poll_url, status_pointer, done_values)")
                    );
                }
            }
            None
        } else {
            if let Some(missing) = poll_fields.iter().find(|f| !set.contains(f)) {
                return Err(s.bad(
                    missing,
                    format!("is required with {} (polling needs all of {})", set.join(", "), poll_fields.join(", ")),
                ));
            }
            let poll_url = s.required_string("poll_url")?;
            if !poll_url.contains(JOB_ID) {
                return Err(s.bad("poll_url", "must hold {{job_id}}"));
            }
            check_url(&s, "poll_url", &poll_url.replace(JOB_ID, "job"))?;
            let done_values = s.strings("done_values")?;
            if done_values.is_empty() {
                return Err(s.bad("done_values", "must name at least one status"));
            }
            let interval = http::poll_interval(&s, DEFAULT_POLL_INTERVAL)?;
            Some(Polling {
                job_id_pointer: pointer("job_id_pointer")?.unwrap_or_default(),
                poll_url,
                status_pointer: pointer("status_pointer")?.unwrap_or_default(),
                done_values,
                failed_values: s.strings("failed_values")?,
                interval,
            })
        };
        let finish_pointer = pointer("finish_pointer")?;
        let cut_off_values = match s.raw("cut_off_values") {
            None => cohort_core::http_class::CUT_OFF_REASONS.map(str::to_owned).to_vec(),
            Some(_) if finish_pointer.is_none() => {
                return Err(s.bad("cut_off_values", "is used only with finish_pointer"));
            }
            Some(_) => s.strings("cut_off_values")?,
        };
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| s.bad("url", format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpJsonAdapter {
            url,
            method,
            headers,
            body,
            output_pointer,
            citations_pointer: pointer("citations_pointer")?,
            finish_pointer: finish_pointer.clone(),
            cut_off_values,
            version_pointer: pointer("version_pointer")?,
            usage_input_pointer: pointer("usage_input_pointer")?,
            usage_output_pointer: pointer("usage_output_pointer")?,
            clarification_pointer,
            refusal_pointer: pointer("refusal_pointer")?,
            clarification,
            polling,
            timeout: s.seconds("timeout_secs", DEFAULT_TIMEOUT)?,
            secrets,
            client,
        })
    }

    /// The request body for `request`: the template with its values
    /// substituted.
    pub fn request_body(&self, request: &AdapterRequest) -> Value {
        let prompt = request.conversation.first().map(|t| t.text.as_str()).unwrap_or("");
        substitute(&self.body, prompt, &Value::Array(http::messages(request)))
    }

    /// Polls job `id` until a done or failed status or the budget's end.
    async fn poll(&self, polling: &Polling, id: &str, call: &Call<'_>) -> Result<(u16, Value), AdapterResponse> {
        let url = polling.poll_url.replace(JOB_ID, &http::encode_component(id));
        let read = |status, parsed: Value| match job_status(polling, &parsed) {
            JobStatus::Done => Some(Ok((status, parsed))),
            JobStatus::Failed(s) => Some(Err(http::failure(
                AttemptClass::ServerError,
                status,
                self.secrets.scrub(&format!("job {id} failed: status {s:?}")),
            ))),
            JobStatus::Running => None,
            JobStatus::Unreadable => Some(Err(http::failure(
                AttemptClass::Malformed,
                status,
                format!("job {id}: status_pointer {} found no string status", polling.status_pointer),
            ))),
        };
        match call.poll(&url, polling.interval, &format!("job {id}"), read).await {
            Polled::Answer(answer) => answer,
            Polled::Failed(r) => Err(r),
            Polled::OutOfTime(outages) => Err(http::failure(
                AttemptClass::Timeout,
                0,
                format!("job {id} still running at {}{}", call.budget.describe(self.timeout), outages.note()),
            )),
        }
    }

    /// Classifies and reads a 2xx answer.
    pub fn read_answer(&self, http_status: u16, body: &Value) -> AdapterResponse {
        let text_at = |p: &Option<String>| p.as_deref().and_then(|p| body.pointer(p));
        let output = body.pointer(&self.output_pointer).and_then(Value::as_str);
        let mut r = http::failure(AttemptClass::Ok, http_status, String::new());
        r.observed_version = text_at(&self.version_pointer)
            .and_then(|v| match v {
                Value::String(s) => Some(s.trim().to_owned()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|v| !v.is_empty());
        r.usage = text_at(&self.usage_input_pointer).and_then(Value::as_u64).map(|input_tokens| TokenUsage {
            input_tokens,
            output_tokens: text_at(&self.usage_output_pointer).and_then(Value::as_u64).unwrap_or(0),
        });
        match self.citations(body) {
            Ok((citations, sources)) => {
                r.citations = ApiCitations::numbered(citations);
                r.sources = sources;
            }
            Err(detail) => {
                r.class = AttemptClass::Malformed;
                r.detail = detail;
                return r;
            }
        }
        match text_at(&self.refusal_pointer) {
            Some(Value::String(why)) if !why.trim().is_empty() => {
                r.class = AttemptClass::Refused;
                r.detail = "the system refused (refusal_pointer)".to_owned();
                r.reply = Reply::Output(self.secrets.scrub(why));
                return r;
            }
            Some(Value::Bool(true)) => {
                r.class = AttemptClass::Refused;
                r.detail = "the system refused (refusal_pointer)".to_owned();
                r.reply =
                    output.filter(|t| !t.trim().is_empty()).map_or(Reply::Nothing, |t| Reply::Output(t.to_owned()));
                return r;
            }
            _ => {}
        }
        if let Some(Value::String(q)) = text_at(&self.clarification_pointer)
            && !q.trim().is_empty()
        {
            r.reply = Reply::Clarification(q.clone());
            return r;
        }
        let Some(text) = output else {
            r.class = AttemptClass::Malformed;
            r.detail = format!("output_pointer {} found no string in the answer", self.output_pointer);
            return r;
        };
        if text.trim().is_empty() {
            r.class = AttemptClass::EmptyContent;
            r.detail = "a 2xx answer with blank output".to_owned();
            return r;
        }
        // A reasoning block with nothing after it is no answer (as in
        // `openai_chat`): the block is the model's, not the report.
        if cohort_core::scoring::wire::is_reasoning_only(text) {
            r.class = AttemptClass::EmptyContent;
            r.detail = "only a reasoning block, no answer".to_owned();
            return r;
        }
        let finish = text_at(&self.finish_pointer).and_then(Value::as_str).map(str::trim);
        if let Some(reason) = finish.filter(|f| self.cut_off_values.iter().any(|v| v == f)) {
            // The one rule of every adapter (`http_class::cut_off`): failed,
            // the partial text kept, never scored.
            r.class = AttemptClass::ClientError;
            r.detail = format!("the answer was cut off by the output cap (finish_pointer reads {reason:?})");
            r.reply = Reply::Output(text.to_owned());
            return r;
        }
        r.reply = if text_at(&self.clarification_pointer) == Some(&Value::Bool(true)) {
            Reply::Clarification(text.to_owned())
        } else {
            Reply::Output(text.to_owned())
        };
        r
    }

    /// The citation list (URL and title per entry, in order: `[n]` markers
    /// index it 1-based, so no entry is dropped or merged) and the system
    /// sources with text, or why the configured pointer's value is not a
    /// citation list.
    #[allow(clippy::type_complexity)]
    fn citations(&self, body: &Value) -> Result<(Vec<(String, Option<String>)>, Vec<SystemSource>), String> {
        let Some(pointer) = &self.citations_pointer else { return Ok((Vec::new(), Vec::new())) };
        let items = match body.pointer(pointer) {
            None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(format!("citations_pointer {pointer} found something that is not an array")),
        };
        let (mut urls, mut sources) = (Vec::new(), Vec::new());
        let text = |v: &Value, k: &str| {
            v.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
        };
        for item in items {
            let url = match item {
                Value::String(u) => Some(u.trim().to_owned()).filter(|u| !u.is_empty()),
                Value::Object(_) => text(item, "url"),
                _ => None,
            };
            let Some(url) = url else {
                urls.push((String::new(), None));
                continue;
            };
            if let Some(snippet) = text(item, "snippet") {
                sources.push(SystemSource {
                    url: url.clone(),
                    title: text(item, "title"),
                    snippet,
                    published_at: text(item, "date"),
                });
            }
            urls.push((url, text(item, "title")));
        }
        Ok((urls, sources))
    }
}

#[async_trait]
impl Adapter for HttpJsonAdapter {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let call = Call {
            client: &self.client,
            headers: self.headers.clone(),
            budget: Budget::of(request, self.timeout),
            timeout: self.timeout,
            secrets: &self.secrets,
        };
        let create = self.client.request(self.method.clone(), &self.url).json(&self.request_body(request));
        let (status, parsed) = match call.exchange_json(create).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        let (status, answer) = match &self.polling {
            None => (status, parsed),
            Some(polling) if matches!(job_status(polling, &parsed), JobStatus::Done) => (status, parsed),
            Some(polling) => {
                let id = match parsed.pointer(&polling.job_id_pointer) {
                    Some(Value::String(id)) if !id.trim().is_empty() => id.trim().to_owned(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => {
                        return http::failure(
                            AttemptClass::Malformed,
                            status,
                            format!("job_id_pointer {} found no job id in the answer", polling.job_id_pointer),
                        );
                    }
                };
                match self.poll(polling, &id, &call).await {
                    Ok(x) => x,
                    Err(r) => return r,
                }
            }
        };
        let response = self.read_answer(status, &answer);
        if self.clarification_pointer.is_some() {
            // The API says itself whether it asks: no rule second-guesses it.
            return response;
        }
        http::apply_rule(self.clarification.as_ref(), request, response)
    }
}

enum JobStatus {
    Done,
    Failed(String),
    Running,
    Unreadable,
}

fn job_status(polling: &Polling, body: &Value) -> JobStatus {
    match body.pointer(&polling.status_pointer).and_then(Value::as_str) {
        None => JobStatus::Unreadable,
        Some(s) if polling.done_values.iter().any(|d| d == s) => JobStatus::Done,
        Some(s) if polling.failed_values.iter().any(|f| f == s) => JobStatus::Failed(s.to_owned()),
        Some(_) => JobStatus::Running,
    }
}

/// A header template with every `${ENV:NAME}` replaced by the variable's
/// value (an unset one is an error naming it); also says whether any was.
fn resolve_env(
    s: &Settings<'_>,
    name: &str,
    template: &str,
    env: &impl Fn(&str) -> Option<String>,
    secrets: &mut Secrets,
) -> Result<(String, bool), AdapterError> {
    let mut out = String::new();
    let mut rest = template;
    let mut from_env = false;
    while let Some(start) = rest.find("${ENV:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 6..];
        let Some(end) = after.find('}') else {
            return Err(s.bad("headers", format!("{name}: ${{ENV: without a closing }}")));
        };
        let var = &after[..end];
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(s.bad("headers", format!("{name}: {var:?} is not an environment variable name")));
        }
        match env(var) {
            Some(v) if !v.trim().is_empty() => {
                secrets.add(v.trim());
                out.push_str(v.trim());
            }
            _ => return Err(s.bad("headers", format!("{name}: the environment variable {var} is not set"))),
        }
        from_env = true;
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, from_env))
}

/// Whether `template` holds `{{prompt}}` in a string and `{{conversation}}`
/// as a value.
fn placeholders(template: &Value) -> (bool, bool) {
    match template {
        Value::String(s) => (s.contains(PROMPT), s == CONVERSATION),
        Value::Array(items) => items.iter().map(placeholders).fold((false, false), |a, b| (a.0 || b.0, a.1 || b.1)),
        Value::Object(m) => m.values().map(placeholders).fold((false, false), |a, b| (a.0 || b.0, a.1 || b.1)),
        _ => (false, false),
    }
}

/// `template` with its placeholders replaced by values (keys untouched).
fn substitute(template: &Value, prompt: &str, conversation: &Value) -> Value {
    match template {
        Value::String(s) if s == CONVERSATION => conversation.clone(),
        // One pass over the template's own text: the prompt is inserted,
        // never scanned for placeholders itself.
        Value::String(s) => Value::String(s.replace(PROMPT, prompt)),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, prompt, conversation)).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), substitute(v, prompt, conversation))).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The prompt goes in as a value: a prompt holding quotes, backslashes
    /// and `{{prompt}}` itself arrives as written, and the conversation
    /// replaces only a whole `"{{conversation}}"` value.
    #[test]
    fn substitution_is_by_value() {
        let template =
            json!({"q": "Q: {{prompt}}", "raw": "{{prompt}}", "msgs": "{{conversation}}", "n": 3, "{{prompt}}": "k"});
        let prompt = "say \"hi\" \\ {{prompt}} {{conversation}}";
        let conv = json!([{"role": "user", "content": prompt}]);
        let body = substitute(&template, prompt, &conv);
        assert_eq!(body["q"], format!("Q: {prompt}"));
        assert_eq!(body["raw"], prompt);
        assert_eq!(body["msgs"], conv);
        assert_eq!(body["n"], 3);
        assert_eq!(body["{{prompt}}"], "k", "keys are not substituted");
        assert_eq!(placeholders(&template), (true, true));
    }
}
