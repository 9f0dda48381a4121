//! What the HTTP adapters (`openai_chat`, `openai_responses`, `http_json`)
//! share: the time budget of one call (the adapter's `timeout_secs` and the
//! run's deadline, whichever comes first), `Retry-After` as a note in the
//! detail, secret scrubbing, and the configured clarification rule.

use std::time::Duration;

use cohort_core::http_class;
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::HeaderMap;
use tokio::time::Instant;

use super::{AdapterRequest, AdapterResponse, Reply};

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

    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "[redacted]");
            }
        }
        out
    }
}

/// `retry-after-ms`, else `Retry-After` (seconds or an HTTP date).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|m| m.is_finite() && *m >= 0.0)
    {
        return Some(Duration::from_micros((ms * 1000.0) as u64));
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_millis((secs * 1000.0) as u64));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO))
}

/// `detail` with the provider's retry time appended, when it gave one
/// (kept in the attempt record: the retry policy and the operator see it).
pub(crate) fn with_retry_note(detail: String, after: Option<Duration>) -> String {
    match after {
        Some(d) => format!("{detail} (retry after {} s)", d.as_secs_f64()),
        None => detail,
    }
}

/// A classified non-2xx answer, the body scrubbed before classifying (a
/// key cut by the detail's truncation would no longer be found).
pub(crate) fn http_failure(status: u16, headers: &HeaderMap, body: &[u8], secrets: &Secrets) -> AdapterResponse {
    let text = secrets.scrub(&String::from_utf8_lossy(body));
    let (class, detail) = http_class::classify_http(status, text.as_bytes());
    let detail =
        if class == AttemptClass::RateLimited { with_retry_note(detail, retry_after(headers)) } else { detail };
    failure(class, status, detail)
}

/// A transport failure: `timeout` when the client timed out, else
/// `connection_error`, with the error's source chain as detail.
pub(crate) fn transport_failure(e: &reqwest::Error, status: u16, secrets: &Secrets) -> AdapterResponse {
    let class = if e.is_timeout() { AttemptClass::Timeout } else { AttemptClass::ConnectionError };
    failure(class, status, secrets.scrub(&http_class::error_chain(e)))
}

/// An attempt with nothing usable.
pub(crate) fn failure(class: AttemptClass, http_status: u16, detail: String) -> AdapterResponse {
    AdapterResponse {
        class,
        http_status,
        detail: http_class::truncate_detail(&detail),
        reply: Reply::Nothing,
        observed_version: None,
        usage: None,
        citations: Vec::new(),
        sources: Vec::new(),
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
        && rule.matches(text, request.conversation.len(), response.citations.len())
    {
        response.reply = Reply::Clarification(text.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

    use super::*;

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
}
