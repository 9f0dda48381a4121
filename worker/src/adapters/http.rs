//! What the HTTP adapters (`openai_chat`, `openai_responses`, `http_json`)
//! share: the settings they read alike (`extra_headers`, `api_key_env`,
//! URLs, `poll_interval_ms`), the conversation as chat messages, the time
//! budget of one call (the adapter's `timeout_secs` and the run's deadline,
//! whichever comes first), one exchange and one polling loop within it,
//! `Retry-After` as a note in the detail, secret scrubbing, and the
//! configured clarification rule. One copy each, so an outage, a timeout or
//! a leaked key reads the same whichever adapter met it.

use std::fmt;
use std::time::Duration;

use cohort_core::http_class;
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::settings::Settings;
use super::{AdapterError, AdapterRequest, AdapterResponse, Reply};

/// The time last words get when no run deadline is near.
const LAST_WORDS: Duration = Duration::from_millis(500);

/// The time one call may use, and which bound it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// When the adapter stops waiting and reports a `timeout` itself.
    pub until: Instant,
    /// Whether `until` is the run's deadline (less a margin) rather than
    /// the adapter's `timeout_secs`.
    pub run_deadline: bool,
    /// How much earlier than the run's deadline `until` is: the time left
    /// for last words (a cancel request) before the worker drops the call.
    pub margin: Duration,
}

impl Budget {
    /// The budget of `request` under `timeout`. The adapter stops a margin
    /// before the run's deadline so that it, not the worker's drop of the
    /// call, reports the timeout: only the adapter knows the response id
    /// the record must keep. The margin is a twentieth of what is left,
    /// between 50 ms and 2 s.
    pub fn of(request: &AdapterRequest, timeout: Duration) -> Budget {
        let now = Instant::now();
        let own = now + timeout;
        match request.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(now);
                let margin = (left / 20).clamp(Duration::from_millis(50), Duration::from_secs(2));
                let cut = deadline.checked_sub(margin).unwrap_or(now).max(now);
                if cut < own {
                    Budget { until: cut, run_deadline: true, margin }
                } else {
                    Budget { until: own, run_deadline: false, margin: LAST_WORDS }
                }
            }
            None => Budget { until: own, run_deadline: false, margin: LAST_WORDS },
        }
    }

    /// What is left of it (zero when spent).
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    /// The bound, in words, for a timeout's detail.
    pub fn describe(&self, timeout: Duration) -> String {
        if self.run_deadline {
            "the run's deadline".to_owned()
        } else {
            format!("timeout_secs ({} s)", timeout.as_secs_f64())
        }
    }
}

// === settings the HTTP adapters read alike ===

/// An http(s) URL with a host and no credentials (settings are recorded);
/// a `base_url` carries no query either.
pub(crate) fn check_url(s: &Settings<'_>, field: &str, value: &str) -> Result<url::Url, AdapterError> {
    let parsed = url::Url::parse(value).map_err(|e| s.bad(field, format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(s.bad(field, "must be an http:// or https:// URL with a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(s.bad(field, "must carry no credentials (settings are recorded): name the key's variable instead"));
    }
    if field == "base_url" && parsed.query().is_some() {
        return Err(s.bad(field, "must carry no query"));
    }
    Ok(parsed)
}

/// Every header a call sends: `extra_headers` (plain values, never
/// `authorization`), then `key` as the bearer `Authorization` (from
/// `api_key_env`), built once with the adapter.
pub(crate) fn extra_headers(s: &Settings<'_>, key: Option<&ApiKey>) -> Result<HeaderMap, AdapterError> {
    let mut headers = HeaderMap::new();
    for (name, value) in s.string_table("extra_headers")? {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| s.bad("extra_headers", format!("{name:?} is not a header name")))?;
        if header == AUTHORIZATION {
            return Err(s.bad(
                "extra_headers",
                "authorization is set from api_key_env (settings are recorded: no secrets here)",
            ));
        }
        let value = HeaderValue::from_str(&value)
            .map_err(|_| s.bad("extra_headers", format!("{name}: not a valid header value")))?;
        headers.insert(header, value);
    }
    if let Some(bearer) = key.and_then(ApiKey::bearer) {
        headers.insert(AUTHORIZATION, bearer);
    }
    Ok(headers)
}

/// The key named by `api_key_env`, read through `env` (trimmed); `None`
/// when the setting is unset, an error naming the variable when it is
/// set but the variable is not.
pub(crate) fn api_key(s: &Settings<'_>, env: impl Fn(&str) -> Option<String>) -> Result<Option<ApiKey>, AdapterError> {
    match s.string("api_key_env")? {
        None => Ok(None),
        Some(var) => match env(&var) {
            Some(key) if !key.trim().is_empty() => Ok(Some(ApiKey(key.trim().to_owned()))),
            _ => Err(s.bad("api_key_env", format!("the environment variable {var} is not set"))),
        },
    }
}

/// How long after the create call the first poll goes: a job that is done
/// at once is read at once (then the waits double, [`Call::poll`]).
pub const FIRST_POLL: Duration = Duration::from_millis(250);

/// The waits before each poll: [`FIRST_POLL`], then each twice the one
/// before, up to `max` (and `max` from then on).
pub(crate) fn poll_waits(max: Duration) -> impl Iterator<Item = Duration> {
    std::iter::successors(Some(FIRST_POLL.min(max)), move |w| Some((*w * 2).min(max)))
}

/// `poll_interval_ms`, else `default`: the longest wait between two polls.
pub(crate) fn poll_interval(s: &Settings<'_>, default: Duration) -> Result<Duration, AdapterError> {
    match s.whole("poll_interval_ms")? {
        None => Ok(default),
        Some(ms) if (10..=600_000).contains(&ms) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(s.bad("poll_interval_ms", format!("must be from 10 to 600000, got {ms}"))),
    }
}

/// The conversation as chat messages: the user's turns as `user`, the
/// system's as `assistant` (what every chat-shaped API calls them).
pub(crate) fn messages(request: &AdapterRequest) -> Vec<Value> {
    request
        .conversation
        .iter()
        .map(|t| {
            let role = if t.role == "system_under_test" { "assistant" } else { "user" };
            json!({"role": role, "content": t.text})
        })
        .collect()
}

/// `id` percent-encoded as one URL path segment or query value: an id is
/// the provider's text and must not add segments or a query.
pub(crate) fn encode_component(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// === secrets ===

/// What replaces a secret wherever provider text would show it.
const REDACTED: &str = "[redacted]";

/// Scrubs an adapter's secrets from provider text before it reaches a
/// detail.
pub(crate) trait Scrub {
    fn scrub(&self, text: &str) -> String;
}

/// An API key: its `Debug` never shows it, and it has no `Display`.
#[derive(Clone)]
pub struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl ApiKey {
    /// The `Authorization` value, marked sensitive so no `Debug` of the
    /// request shows it.
    pub(crate) fn bearer(&self) -> Option<HeaderValue> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.0)).ok()?;
        v.set_sensitive(true);
        Some(v)
    }
}

/// An adapter's optional key scrubs itself, whatever its length (unlike
/// [`Secrets`], which skips very short values).
impl Scrub for Option<ApiKey> {
    fn scrub(&self, text: &str) -> String {
        match self {
            Some(ApiKey(key)) if !key.is_empty() && text.contains(key.as_str()) => text.replace(key.as_str(), REDACTED),
            _ => text.to_owned(),
        }
    }
}

/// Secrets an adapter holds (keys, header values from the environment):
/// scrubbed from every provider text before it reaches a detail.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

impl Secrets {
    pub fn add(&mut self, secret: &str) {
        // Very short values would redact ordinary words; they are still
        // sent, never logged, but not worth scrubbing for.
        if secret.len() >= 4 && !self.0.iter().any(|s| s == secret) {
            self.0.push(secret.to_owned());
        }
    }

    /// `key` as a secret (under the same length rule as [`Secrets::add`]).
    pub fn add_key(&mut self, key: &ApiKey) {
        self.add(&key.0);
    }

    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }
}

impl Scrub for Secrets {
    fn scrub(&self, text: &str) -> String {
        Secrets::scrub(self, text)
    }
}

/// `retry-after-ms`, else `Retry-After` (seconds or an HTTP date).
/// (The one parser, [`http_class::retry_after`].)
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    http_class::retry_after(text("retry-after-ms"), text("retry-after"), std::time::SystemTime::now())
}

/// `detail` with the provider's retry time appended, when it gave one
/// (kept in the attempt record: the retry policy and the operator see it).
pub(crate) fn with_retry_note(detail: String, after: Option<Duration>) -> String {
    match after {
        Some(d) => format!("{detail} (retry after {} s)", d.as_secs_f64()),
        None => detail,
    }
}

/// `after` in whole milliseconds, for the wire and the ledger.
pub(crate) fn as_millis(after: Duration) -> u64 {
    u64::try_from(after.as_millis()).unwrap_or(u64::MAX)
}

/// Puts the provider's Retry-After on a failed answer: in the detail of a
/// 429 (for the operator) and, for any failure, as `retry_after_ms` (for
/// the ledger's backoff and the arm's hold).
pub(crate) fn note_retry_after(r: &mut AdapterResponse, after: Option<Duration>) {
    if r.class == AttemptClass::Ok {
        return;
    }
    if r.class == AttemptClass::RateLimited {
        r.detail = with_retry_note(std::mem::take(&mut r.detail), after);
    }
    r.retry_after_ms = after.map(as_millis);
}

/// A classified non-2xx answer, the body scrubbed before classifying (a
/// key cut by the detail's truncation would no longer be found), with the
/// provider's Retry-After.
pub(crate) fn http_failure(status: u16, headers: &HeaderMap, body: &[u8], secrets: &impl Scrub) -> AdapterResponse {
    let text = secrets.scrub(&String::from_utf8_lossy(body));
    let (class, detail) = http_class::classify_http(status, text.as_bytes());
    let mut r = failure(class, status, detail);
    note_retry_after(&mut r, retry_after(headers));
    r
}

/// A transport failure: `timeout` when the client timed out, else
/// `connection_error`, with the error's source chain as detail.
pub(crate) fn transport_failure(e: &reqwest::Error, status: u16, secrets: &impl Scrub) -> AdapterResponse {
    let class = if e.is_timeout() { AttemptClass::Timeout } else { AttemptClass::ConnectionError };
    failure(class, status, secrets.scrub(&http_class::error_chain(e)))
}

/// An attempt with nothing usable.
pub(crate) fn failure(class: AttemptClass, http_status: u16, detail: String) -> AdapterResponse {
    AdapterResponse::nothing(class, http_status, http_class::truncate_detail(&detail))
}

/// `r` with `label` (`response ID`, `job ID`) before its detail.
fn labelled(mut r: AdapterResponse, label: &str) -> AdapterResponse {
    r.detail = http_class::truncate_detail(&format!("{label}: {}", r.detail));
    r
}

// === one call: exchanges and polling within its budget ===

/// What every exchange of one call shares: the client, the headers sent
/// with each request, the budget, the adapter's `timeout_secs` (named in a
/// timeout's detail) and the secrets scrubbed from every detail.
pub(crate) struct Call<'a> {
    pub client: &'a reqwest::Client,
    pub headers: HeaderMap,
    pub budget: Budget,
    pub timeout: Duration,
    pub secrets: &'a Secrets,
}

/// How polling ended.
pub(crate) enum Polled<T> {
    /// The reader stopped it with this.
    Answer(T),
    /// An answer that ends the attempt (a 4xx, a body that is not JSON),
    /// its detail labelled.
    Failed(AdapterResponse),
    /// The budget ran out with the job still running.
    OutOfTime(Outages),
}

/// The polls that met an outage (and were polled through).
#[derive(Debug, Default)]
pub(crate) struct Outages {
    pub count: u32,
    pub last: String,
}

impl Outages {
    /// What a timeout's detail adds about them (nothing when none).
    pub fn note(&self) -> String {
        if self.count > 0 {
            format!("; {} poll(s) met an outage, the last: {}", self.count, self.last)
        } else {
            String::new()
        }
    }
}

impl Call<'_> {
    /// One exchange within the budget: the status, headers and body, or
    /// the attempt a transport failure makes (a timeout names the bound).
    pub async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(u16, HeaderMap, Vec<u8>), AdapterResponse> {
        let left = self.budget.left();
        if left.is_zero() {
            return Err(failure(AttemptClass::Timeout, 0, format!("{} passed", self.budget.describe(self.timeout))));
        }
        let mut headers = self.headers.clone();
        // The system under test may trace too: W3C `traceparent` of the
        // adapter call's span (nothing when traces are off).
        cohort_telemetry::propagation::inject_headers(&tracing::Span::current(), &mut headers);
        let response = match request.headers(headers).timeout(left).send().await {
            Ok(r) => r,
            Err(e) => return Err(self.transport(&e, 0)),
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        match response.bytes().await {
            Ok(body) => Ok((status, headers, body.to_vec())),
            Err(e) => Err(self.transport(&e, status)),
        }
    }

    fn transport(&self, e: &reqwest::Error, status: u16) -> AdapterResponse {
        let mut r = transport_failure(e, status, self.secrets);
        if r.class == AttemptClass::Timeout {
            r.detail = http_class::truncate_detail(&format!(
                "no answer within {}: {}",
                self.budget.describe(self.timeout),
                r.detail
            ));
        }
        r
    }

    /// One exchange whose answer must be a 2xx JSON body: the status and
    /// the body, or the classified attempt.
    pub async fn exchange_json(&self, request: reqwest::RequestBuilder) -> Result<(u16, Value), AdapterResponse> {
        let (status, headers, body) = self.exchange(request).await?;
        if !(200..300).contains(&status) {
            return Err(http_failure(status, &headers, &body, self.secrets));
        }
        match http_class::parse_json(&body) {
            Ok(v) => Ok((status, v)),
            Err((class, detail)) => Err(failure(class, status, detail)),
        }
    }

    /// `GET url` until `read` stops it with an answer or the budget runs
    /// out: the first poll [`FIRST_POLL`] after the create, each wait after
    /// it twice the one before, up to `max_interval` (the `poll_interval_ms`
    /// setting), as the OpenAI SDKs back off, so a job that finishes in a
    /// second is read within one, and a long one costs a poll every
    /// `max_interval`. A poll that meets an outage (transport error,
    /// 5xx, 429, an empty 502) is polled through at the next interval (a
    /// 429's `Retry-After` lengthening the wait): a long job is not lost to
    /// one bad poll. Any other non-2xx, or a body that is not JSON, ends
    /// polling with its detail labelled `label` (`job ID`).
    pub async fn poll<T>(
        &self,
        url: &str,
        max_interval: Duration,
        label: &str,
        mut read: impl FnMut(u16, Value) -> Option<T>,
    ) -> Polled<T> {
        let mut outages = Outages::default();
        let mut waits = poll_waits(max_interval);
        let mut wait = waits.next().unwrap_or(max_interval);
        loop {
            let left = self.budget.left();
            if left <= wait {
                tokio::time::sleep(left).await;
                return Polled::OutOfTime(outages);
            }
            tokio::time::sleep(wait).await;
            wait = waits.next().unwrap_or(max_interval);
            let (status, headers, body) = match self.exchange(self.client.get(url)).await {
                Ok(x) => x,
                Err(r) if r.class == AttemptClass::Timeout => return Polled::OutOfTime(outages),
                Err(r) => {
                    outages.count += 1;
                    outages.last = r.detail;
                    continue;
                }
            };
            if !(200..300).contains(&status) {
                let r = http_failure(status, &headers, &body, self.secrets);
                if matches!(r.class, AttemptClass::ServerError | AttemptClass::RateLimited | AttemptClass::EmptyContent)
                {
                    outages.count += 1;
                    outages.last = r.detail;
                    wait = wait.max(retry_after(&headers).unwrap_or_default());
                    continue;
                }
                return Polled::Failed(labelled(r, label));
            }
            let parsed = match http_class::parse_json(&body) {
                Ok(v) => v,
                Err((class, detail)) => return Polled::Failed(labelled(failure(class, status, detail), label)),
            };
            if let Some(answer) = read(status, parsed) {
                return Polled::Answer(answer);
            }
        }
    }
}

// === the clarification rule ===

/// When a reply counts as a clarifying question (the `clarification`
/// setting of the HTTP adapters; docs/adapters.md).
///
/// Off unless configured: a false positive would send the suffix and score
/// the system's second reply instead of its first answer, a second chance
/// no other arm gets. So a configured rule is narrow on purpose: it
/// applies only to the first reply of a run (after the suffix, whatever
/// the system says is its output), never to a reply that cites anything
/// (a research answer cites; a question before research does not), only
/// to replies of at most `max_chars` characters, and every configured test
/// must hold (`ends_with_question`, and one of `phrases` when given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClarificationRule {
    pub max_chars: usize,
    pub ends_with_question: bool,
    /// Lowercased; the reply must contain one (when any are given).
    pub phrases: Vec<String>,
}

/// The most `max_chars` may be: longer replies are reports, not questions.
pub const MAX_CLARIFICATION_CHARS: usize = 4000;

impl ClarificationRule {
    /// Whether `text`, the reply to a request of `turns` turns that came
    /// with `citations` citations, is a clarifying question.
    pub fn matches(&self, text: &str, turns: usize, citations: usize) -> bool {
        let text = text.trim();
        if turns != 1 || citations > 0 || text.is_empty() || text.chars().count() > self.max_chars {
            return false;
        }
        if self.ends_with_question && !text.ends_with('?') {
            return false;
        }
        let lower = text.to_lowercase();
        self.phrases.is_empty() || self.phrases.iter().any(|p| lower.contains(p.as_str()))
    }
}

/// `response` with an `ok` output turned into a clarification when `rule`
/// says it is one.
pub(crate) fn apply_rule(
    rule: Option<&ClarificationRule>,
    request: &AdapterRequest,
    mut response: AdapterResponse,
) -> AdapterResponse {
    if let (Some(rule), AttemptClass::Ok, Reply::Output(text)) = (rule, response.class, &response.reply)
        && rule.matches(text, request.conversation.len(), response.citations.urls().len())
    {
        response.reply = Reply::Clarification(text.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

    use super::*;

    /// A job done at once is read 250 ms after the create (a Responses run
    /// that completes after one poll is over well within 2 s); the waits
    /// then double up to the setting, and a setting below 250 ms is every
    /// wait.
    #[test]
    fn polls_start_soon_and_back_off_to_the_interval() {
        let ms = |max: u64, n: usize| -> Vec<u128> {
            poll_waits(Duration::from_millis(max)).take(n).map(|d| d.as_millis()).collect()
        };
        assert_eq!(ms(5000, 7), [250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(ms(2000, 5), [250, 500, 1000, 2000, 2000]);
        assert_eq!(ms(10, 3), [10, 10, 10]);
    }

    fn rule() -> ClarificationRule {
        ClarificationRule { max_chars: 200, ends_with_question: true, phrases: Vec::new() }
    }

    /// The rule fires only on a short, uncited first reply ending with a
    /// question mark; phrases narrow it further.
    #[test]
    fn the_rule_is_narrow() {
        let r = rule();
        assert!(r.matches("Which time period do you mean?", 1, 0));
        assert!(!r.matches("Which time period do you mean?", 3, 0), "after the suffix: output");
        assert!(!r.matches("Which time period do you mean?", 1, 1), "a cited reply is an answer");
        assert!(!r.matches("The answer is 4.", 1, 0));
        assert!(!r.matches(&format!("{}?", "x".repeat(200)), 1, 0), "too long");
        let r = ClarificationRule { phrases: vec!["clarify".into()], ..rule() };
        assert!(r.matches("Could you CLARIFY the scope?", 1, 0));
        assert!(!r.matches("Is that all?", 1, 0));
    }

    /// Retry-After in seconds, as an HTTP date, and retry-after-ms.
    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(30));
        h.insert("retry-after", later.parse().unwrap());
        assert!(retry_after(&h).is_some_and(|d| d > Duration::from_secs(25) && d <= Duration::from_secs(30)));
        h.insert("retry-after-ms", "150".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
    }

    /// No-op scrubber for the failure tests (their bodies hold no secret).
    struct NoSecrets;

    impl Scrub for NoSecrets {
        fn scrub(&self, text: &str) -> String {
            text.to_owned()
        }
    }

    /// A 429 with `Retry-After: 2` carries 2000 ms for the ledger (and a
    /// note in its detail); a 401 is an auth_error with no retry time.
    #[test]
    fn failures_carry_the_retry_after() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        let r = http_failure(429, &h, br#"{"error":{"message":"Rate limit reached"}}"#, &NoSecrets);
        assert_eq!((r.class, r.retry_after_ms), (AttemptClass::RateLimited, Some(2_000)));
        assert!(r.detail.contains("retry after 2 s"), "{}", r.detail);
        let r = http_failure(503, &h, b"busy", &NoSecrets);
        assert_eq!((r.class, r.retry_after_ms), (AttemptClass::ServerError, Some(2_000)));
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-wr****1234","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let r = http_failure(401, &HeaderMap::new(), body, &NoSecrets);
        assert_eq!((r.class, r.http_status, r.retry_after_ms), (AttemptClass::AuthError, 401, None));
        assert_eq!(r.detail, "HTTP 401: Incorrect API key provided: sk-wr****1234");
    }
}
