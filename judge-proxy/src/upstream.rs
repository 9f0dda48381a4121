//! Calls to the upstreams: a permit from the limiter, a slot of the
//! upstream's concurrency, the HTTP exchange with its own timeout, the
//! classification of what came back, and retries with exponential backoff
//! and jitter (`backon`) for the retryable classes, bounded by attempts and
//! total time. Every attempt is recorded with its class, the requested and
//! the served model, and counted.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use cohort_core::taxonomy::AttemptClass;
use reqwest::header::{HeaderMap, HeaderValue};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::config::{ProxyConfig, RetryConfig, UpstreamConfig, UpstreamKind};
use crate::error::ProxyError;
use crate::limiter::{Limiter, Permit, PermitRequest, RateHeaders};
use crate::metrics::Metrics;
use crate::provider::{self, AttemptFailure, ChatCall, ChatReply, TokenUsage};
use crate::secret::Redactor;

/// One attempt at an upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub class: AttemptClass,
    pub http_status: Option<u16>,
    /// The model the proxy asked for.
    pub requested_model: String,
    /// The model the upstream said served it; None when it said nothing.
    pub served_model: Option<String>,
    pub served_provider: Option<String>,
    /// Secret-free detail.
    pub detail: String,
    /// From sending the request to the end of the body.
    pub latency: Duration,
    /// How long this attempt waited for its rate-limit permit.
    pub permit_wait: Duration,
    /// Tokens, when the provider reported them (also on some failures).
    pub usage: Option<TokenUsage>,
}

/// What a call came to: the reply or the error, and every attempt.
#[derive(Debug)]
pub struct CallOutcome {
    pub result: Result<ChatReply, ProxyError>,
    pub attempts: Vec<Attempt>,
}

#[derive(Debug)]
struct UpstreamSlot {
    config: UpstreamConfig,
    /// Calls in flight at once from this replica (`max_concurrency`).
    concurrency: Arc<Semaphore>,
}

/// Every upstream, the shared HTTP client, the limiter and the retry policy.
#[derive(Debug)]
pub struct Upstreams {
    slots: HashMap<String, UpstreamSlot>,
    client: reqwest::Client,
    limiter: Arc<Limiter>,
    retry: RetryConfig,
    output_tokens_estimate: u64,
    redactor: Redactor,
    metrics: Arc<Metrics>,
}

impl Upstreams {
    pub fn new(
        config: &ProxyConfig,
        limiter: Arc<Limiter>,
        metrics: Arc<Metrics>,
        redactor: Redactor,
    ) -> Result<Upstreams, ProxyError> {
        let client = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ProxyError::Internal(format!("cannot build the HTTP client: {e}")))?;
        let slots = config
            .upstreams
            .iter()
            .map(|u| {
                let slot = UpstreamSlot {
                    config: u.clone(),
                    concurrency: Arc::new(Semaphore::new(usize::try_from(u.max_concurrency).unwrap_or(1))),
                };
                (u.name.clone(), slot)
            })
            .collect();
        Ok(Upstreams {
            slots,
            client,
            limiter,
            retry: config.retry.clone(),
            output_tokens_estimate: config.output_tokens_estimate,
            redactor,
            metrics,
        })
    }

    pub fn config(&self, upstream: &str) -> Option<&UpstreamConfig> {
        self.slots.get(upstream).map(|s| &s.config)
    }

    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// The scrubber of the proxy's secrets, for what leaves the proxy
    /// beside the attempts (the judge's kept prompts and replies).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Calls `upstream` for `team` until a usable reply, a final failure,
    /// the retry policy's end, or `deadline`.
    #[tracing::instrument(level = "debug", skip_all, fields(upstream, team, model = %call.model))]
    pub async fn call(
        &self,
        upstream: &str,
        team: &str,
        call: &ChatCall,
        forward: &HeaderMap,
        deadline: Instant,
    ) -> CallOutcome {
        let mut attempts = Vec::new();
        let Some(slot) = self.slots.get(upstream) else {
            let e = ProxyError::NotFound(format!("no upstream is named \"{upstream}\""));
            return CallOutcome { result: Err(e), attempts };
        };
        let input = provider::estimate_tokens(&call.messages, Some(0), 0);
        let tokens = match check_tokens(&slot.config, input, call.max_tokens, self.output_tokens_estimate) {
            Ok(t) => t,
            Err(e) => return CallOutcome { result: Err(e), attempts },
        };
        let body = provider::request_body(slot.config.kind, call);
        let mut backoff = backoff(&self.retry).build();
        let first = Instant::now();
        loop {
            // A permit granted at the deadline would leave the call no time:
            // the wait for one ends early enough to leave the call a quarter
            // of the remaining time (at most one attempt timeout).
            let remaining = deadline.saturating_duration_since(Instant::now());
            let permit_deadline = deadline - (remaining / 4).min(self.retry.attempt_timeout);
            let permit = match self.limiter.acquire(PermitRequest { upstream, team, tokens }, permit_deadline).await {
                Ok(p) => p,
                Err(e) => return CallOutcome { result: Err(e), attempts },
            };
            let (attempt, answer) = self.attempt(slot, call, &body, forward, permit, input, deadline).await;
            let retry_after = answer.as_ref().err().and_then(|f| f.retry_after);
            self.metrics.attempt(attempt.class);
            // One line per call is debug: at info it cost about 20% of a
            // call's CPU; info gets the periodic summary (metrics.rs).
            tracing::debug!(
                upstream,
                team,
                class = %attempt.class,
                status = attempt.http_status,
                requested_model = %attempt.requested_model,
                served_model = attempt.served_model.as_deref().unwrap_or(""),
                latency_ms = u64::try_from(attempt.latency.as_millis()).unwrap_or(u64::MAX),
                detail = %attempt.detail,
                "upstream attempt"
            );
            let class = attempt.class;
            let detail = attempt.detail.clone();
            attempts.push(attempt);
            let failure = match answer {
                Ok(reply) => return CallOutcome { result: Ok(reply), attempts },
                Err(f) => f,
            };
            // A provider 429 although the limiter granted the permit: the
            // real quota is lower than the configured one (or shared with
            // others). Cut the rate and pause as the provider said.
            if class == AttemptClass::RateLimited
                && let Err(e) = self.limiter.rate_limited(upstream, &permit, retry_after).await
            {
                return CallOutcome { result: Err(e), attempts };
            }
            let give_up = |attempts: &Vec<Attempt>| ProxyError::Upstream {
                upstream: upstream.to_owned(),
                class,
                attempts: attempts.len(),
                detail: detail.clone(),
                retry_after: failure.retry_after,
            };
            if !cohort_core::lifecycle::call_retryable(class) {
                return CallOutcome { result: Err(give_up(&attempts)), attempts };
            }
            let Some(delay) = backoff.next() else {
                return CallOutcome { result: Err(give_up(&attempts)), attempts };
            };
            let now = Instant::now();
            let resume = now + delay.max(retry_after.unwrap_or_default());
            if resume >= deadline || resume.duration_since(first) > self.retry.max_total {
                return CallOutcome { result: Err(give_up(&attempts)), attempts };
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: a concurrency slot, the exchange under the attempt's
    /// timeout, the provider's rate headers noted, the classified answer;
    /// the token charge corrected (`input_tokens`: the input estimate).
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        slot: &UpstreamSlot,
        call: &ChatCall,
        body: &serde_json::Value,
        forward: &HeaderMap,
        permit: Permit,
        input_tokens: u64,
        deadline: Instant,
    ) -> (Attempt, Result<ChatReply, AttemptFailure>) {
        let up = &slot.config;
        let span = cohort_telemetry::genai::llm_span(
            cohort_telemetry::genai::CHAT,
            provider_name(up),
            &call.model,
            call.temperature,
        );
        let start = Instant::now();
        let attempt_deadline = (start + self.retry.attempt_timeout).min(deadline);
        let answer = match tokio::time::timeout_at(attempt_deadline, slot.concurrency.acquire()).await {
            Err(_) => Err(AttemptFailure::new(
                AttemptClass::Timeout,
                None,
                "no concurrency slot of the upstream before the attempt's deadline",
            )),
            Ok(Err(_)) => Err(AttemptFailure::new(AttemptClass::ConnectionError, None, "the upstream is closed")),
            Ok(Ok(_slot)) => match tokio::time::timeout_at(
                attempt_deadline,
                self.exchange(up, body, forward).instrument(span.clone()),
            )
            .await
            {
                Err(_) => Err(AttemptFailure::new(
                    AttemptClass::Timeout,
                    None,
                    format!("no complete answer within {} ms", (attempt_deadline - start).as_millis()),
                )),
                Ok(Err(e)) => Err(transport_failure(&e)),
                Ok(Ok((status, headers, bytes))) => {
                    if let Some(h) = rate_headers(&headers)
                        && let Err(e) = self.limiter.observe(&up.name, &h).await
                    {
                        tracing::warn!(upstream = %up.name, error = %e, "recording the provider's rate headers failed");
                    }
                    provider::read_answer(up, status, &headers, &bytes, SystemTime::now())
                }
            },
        };
        let latency = start.elapsed();
        self.metrics.upstream_latency(&up.name, latency);
        // Correct the token charge, bounded either way: the reported usage
        // when there is one; nothing used when the provider answered with
        // an HTTP error; the input estimate (output refunded) when nobody
        // knows (timeouts, resets); the estimate (itself capped by the
        // upstream's limits) when a 200 reported no usage.
        let actual = match &answer {
            Ok(r) => r.usage.map(|u| u.input + u.output),
            Err(f) => f.usage.map(|u| u.input + u.output).or(match f.status {
                Some(s) if !(200..300).contains(&s) => Some(0),
                _ => Some(input_tokens.min(permit.tokens)),
            }),
        };
        if let Some(actual) = actual
            && let Err(e) = self.limiter.reconcile(&up.name, &permit, actual).await
        {
            tracing::warn!(error = %e, "token reconciliation failed");
        }
        if let Ok(r) = &answer {
            if let Some(u) = r.usage {
                self.metrics.tokens(u.input, u.output);
            }
            self.metrics.served(&up.name, &call.model, r.served_model.as_deref().unwrap_or("unknown"));
        }
        let (class, status, served_model, served_provider, detail, usage) = match &answer {
            Ok(r) => {
                (AttemptClass::Ok, Some(200), r.served_model.clone(), r.served_provider.clone(), String::new(), r.usage)
            }
            Err(f) => (f.class, f.status, f.served_model.clone(), None, self.redactor.scrub(&f.detail), f.usage),
        };
        cohort_telemetry::genai::record_response(
            &span,
            served_model.as_deref(),
            usage.map(|u| u.input),
            usage.map(|u| u.output),
        );
        if class != AttemptClass::Ok {
            cohort_telemetry::genai::mark_error(&span, class.as_str());
        }
        let answer = answer.map_err(|mut f| {
            f.detail = self.redactor.scrub(&f.detail);
            f
        });
        let attempt = Attempt {
            class,
            http_status: status,
            requested_model: call.model.clone(),
            served_model,
            served_provider,
            detail,
            latency,
            permit_wait: permit.waited,
            usage,
        };
        (attempt, answer)
    }

    async fn exchange(
        &self,
        up: &UpstreamConfig,
        body: &serde_json::Value,
        forward: &HeaderMap,
    ) -> Result<(u16, HeaderMap, Vec<u8>), reqwest::Error> {
        if up.kind == UpstreamKind::Sim {
            // The SIMULATED judge answers in process, as a provider's 200
            // would read, so everything after the exchange is the real path.
            let bytes = serde_json::to_vec(&crate::sim::answer(body)).unwrap_or_default();
            return Ok((200, HeaderMap::new(), bytes));
        }
        let mut headers = HeaderMap::new();
        for name in &up.forward_headers {
            if let Some(v) = forward.get(name.as_str())
                && let Ok(n) = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            {
                headers.insert(n, v.clone());
            }
        }
        if let Some(key) = &up.api_key {
            let (name, value) = match up.kind {
                UpstreamKind::Openai | UpstreamKind::Sim => {
                    (reqwest::header::AUTHORIZATION, format!("Bearer {}", key.expose()))
                }
                UpstreamKind::Anthropic => {
                    (reqwest::header::HeaderName::from_static("x-api-key"), key.expose().to_owned())
                }
            };
            if let Ok(mut v) = HeaderValue::from_str(&value) {
                v.set_sensitive(true);
                headers.insert(name, v);
            }
        }
        if up.kind == UpstreamKind::Anthropic
            && let Ok(v) = HeaderValue::from_str(&up.anthropic_version)
        {
            headers.insert("anthropic-version", v);
        }
        // The provider may trace too: the W3C context of this call's span.
        cohort_telemetry::propagation::inject_headers(&tracing::Span::current(), &mut headers);
        let response = self.client.post(provider::endpoint(up, body)).headers(headers).json(body).send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        Ok((status, headers, bytes.to_vec()))
    }
}

/// `gen_ai.provider.name` of an upstream: its host's well-known provider,
/// else the API it speaks (an OpenAI-compatible router is `openai`; the
/// served model and provider headers say who answered).
fn provider_name(up: &UpstreamConfig) -> &'static str {
    let api = match up.kind {
        UpstreamKind::Openai => "openai",
        UpstreamKind::Anthropic => "anthropic",
        UpstreamKind::Sim => return "cohort.sim",
    };
    cohort_telemetry::genai::provider_name(Some(&up.base_url), api)
}

/// The retry schedule of `policy`: exponential from the initial backoff,
/// capped per delay and in total, with jitter seeded per call (every
/// replica and call jitters differently).
pub fn backoff(policy: &RetryConfig) -> ExponentialBuilder {
    let mut b = ExponentialBuilder::default()
        .with_min_delay(policy.initial_backoff)
        .with_max_delay(policy.max_backoff)
        .with_max_times(usize::try_from(policy.max_attempts.saturating_sub(1)).unwrap_or(0))
        .with_total_delay(Some(policy.max_total));
    if policy.jitter {
        b = b.with_jitter().with_jitter_seed(RandomState::new().hash_one(Instant::now()));
    }
    b
}

/// The token estimate of a call, or a 400 when no provider could serve it:
/// `max_tokens` above the upstream's `max_output_tokens`, input plus output
/// above its `context_tokens`, or more than one minute of its tokens (the
/// estimate is what the limiter charges: an unbounded one would hold every
/// team's share for years).
fn check_tokens(
    up: &UpstreamConfig,
    input: u64,
    max_tokens: Option<u64>,
    default_output: u64,
) -> Result<u64, ProxyError> {
    if let (Some(asked), Some(limit)) = (max_tokens, up.max_output_tokens)
        && asked > limit
    {
        return Err(ProxyError::InvalidRequest(format!(
            "max_tokens {asked} is above the max_output_tokens {limit} of upstream \"{}\"",
            up.name
        )));
    }
    let output = max_tokens.unwrap_or(default_output);
    let tokens = input.saturating_add(output);
    if let Some(limit) = up.context_tokens
        && tokens > limit
    {
        return Err(ProxyError::InvalidRequest(format!(
            "the request's input (about {input} tokens) plus max_tokens {output} is above the context_tokens {limit} \
             of upstream \"{}\"",
            up.name
        )));
    }
    if tokens > up.tpm {
        return Err(ProxyError::InvalidRequest(format!(
            "the request's input (about {input} tokens) plus max_tokens {output} is above the tpm {} of upstream \
             \"{}\" (one minute of its tokens): lower max_tokens",
            up.tpm, up.name
        )));
    }
    Ok(tokens)
}

/// The provider's rate-limit headers (OpenAI's `x-ratelimit-*`), when it
/// sent any.
fn rate_headers(h: &HeaderMap) -> Option<RateHeaders> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let num = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
    let dur = |name: &str| text(name).and_then(parse_reset);
    let r = RateHeaders {
        limit_requests: num("x-ratelimit-limit-requests"),
        limit_tokens: num("x-ratelimit-limit-tokens"),
        remaining_requests: num("x-ratelimit-remaining-requests"),
        remaining_tokens: num("x-ratelimit-remaining-tokens"),
        reset_requests: dur("x-ratelimit-reset-requests"),
        reset_tokens: dur("x-ratelimit-reset-tokens"),
    };
    (r != RateHeaders::default()).then_some(r)
}

/// A reset duration as OpenAI writes it: `1s`, `6m0s`, `20ms`, `1h2m3.5s`
/// (a bare number: seconds).
pub fn parse_reset(v: &str) -> Option<Duration> {
    if let Ok(secs) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let mut total = 0.0;
    let mut rest = v;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "\u{b5}s" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

fn transport_failure(e: &reqwest::Error) -> AttemptFailure {
    let class = if e.is_timeout() { AttemptClass::Timeout } else { AttemptClass::ConnectionError };
    AttemptFailure::new(class, None, cohort_core::http_class::error_chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(context: Option<u64>, max_output: Option<u64>) -> UpstreamConfig {
        UpstreamConfig {
            name: "u".into(),
            kind: UpstreamKind::Openai,
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: None,
            rpm: 60,
            tpm: 10_000,
            max_concurrency: 1,
            burst: 1,
            context_tokens: context,
            max_output_tokens: max_output,
            served_model_headers: vec![],
            served_provider_headers: vec![],
            forward_headers: vec![],
            anthropic_version: "2023-06-01".into(),
        }
    }

    /// Every estimate the limiter charges is bounded: a request above the
    /// upstream's output, context or one-minute token limit is a 400 that
    /// names the limit.
    #[test]
    fn token_estimates_are_bounded_by_the_upstreams_limits() {
        let refused = |up: &UpstreamConfig, input: u64, max: Option<u64>| match check_tokens(up, input, max, 512) {
            Err(e @ ProxyError::InvalidRequest(_)) => {
                assert_eq!(e.http_status(), 400);
                e.to_string()
            }
            other => panic!("{other:?}"),
        };
        let open = upstream(None, None);
        assert!(refused(&open, 10, Some(1_000_000_000_000)).contains("tpm 10000"));
        assert_eq!(check_tokens(&open, 10, Some(9_000), 512).ok(), Some(9_010));
        assert_eq!(check_tokens(&open, 10, None, 512).ok(), Some(522));
        let limited = upstream(Some(4_000), Some(1_000));
        assert!(refused(&limited, 10, Some(1_001)).contains("max_output_tokens 1000"));
        assert!(refused(&limited, 3_500, Some(1_000)).contains("context_tokens 4000"));
        assert_eq!(check_tokens(&limited, 2_000, Some(1_000), 512).ok(), Some(3_000));
    }

    #[test]
    fn reset_durations_read_as_openai_writes_them() {
        let ms = |v: &str| parse_reset(v).map(|d| d.as_millis());
        assert_eq!(ms("1s"), Some(1000));
        assert_eq!(ms("6m0s"), Some(360_000));
        assert_eq!(ms("20ms"), Some(20));
        assert_eq!(ms("1h2m3.5s"), Some(3_723_500));
        assert_eq!(ms("0.25"), Some(250));
        assert_eq!(ms("soon"), None);
    }
}
