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

use crate::config::{ProxyConfig, RetryConfig, UpstreamConfig, UpstreamKind};
use crate::error::ProxyError;
use crate::limiter::{Limiter, Permit, PermitRequest};
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
        let tokens = provider::estimate_tokens(&call.messages, call.max_tokens, self.output_tokens_estimate);
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
            let (attempt, answer) = self.attempt(slot, team, call, &body, forward, permit, deadline).await;
            let retry_after = answer.as_ref().err().and_then(|f| f.retry_after);
            self.metrics.attempt(attempt.class);
            tracing::info!(
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
            if class == AttemptClass::RateLimited
                && let Some(pause) = retry_after
                && let Err(e) = self.limiter.pause(upstream, pause).await
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
    /// timeout, the classified answer; tokens reconciled with the usage.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        slot: &UpstreamSlot,
        team: &str,
        call: &ChatCall,
        body: &serde_json::Value,
        forward: &HeaderMap,
        permit: Permit,
        deadline: Instant,
    ) -> (Attempt, Result<ChatReply, AttemptFailure>) {
        let up = &slot.config;
        let start = Instant::now();
        let attempt_deadline = (start + self.retry.attempt_timeout).min(deadline);
        let answer = match tokio::time::timeout_at(attempt_deadline, slot.concurrency.acquire()).await {
            Err(_) => Err(AttemptFailure::new(
                AttemptClass::Timeout,
                None,
                "no concurrency slot of the upstream before the attempt's deadline",
            )),
            Ok(Err(_)) => Err(AttemptFailure::new(AttemptClass::ConnectionError, None, "the upstream is closed")),
            Ok(Ok(_slot)) => match tokio::time::timeout_at(attempt_deadline, self.exchange(up, body, forward)).await {
                Err(_) => Err(AttemptFailure::new(
                    AttemptClass::Timeout,
                    None,
                    format!("no complete answer within {} ms", (attempt_deadline - start).as_millis()),
                )),
                Ok(Err(e)) => Err(transport_failure(&e)),
                Ok(Ok((status, headers, bytes))) => {
                    provider::read_answer(up, status, &headers, &bytes, SystemTime::now())
                }
            },
        };
        let latency = start.elapsed();
        // Reconcile the token estimate: the reported usage when there is
        // one; nothing used when the provider answered with an HTTP error;
        // the estimate stands when nobody knows (timeouts, resets).
        let actual = match &answer {
            Ok(r) => r.usage.map(|u| u.input + u.output),
            Err(f) => f.usage.map(|u| u.input + u.output).or(match f.status {
                Some(s) if !(200..300).contains(&s) => Some(0),
                _ => None,
            }),
        };
        if let Some(actual) = actual
            && let Err(e) = self.limiter.reconcile(&up.name, team, &permit, actual).await
        {
            tracing::warn!(error = %e, "token reconciliation failed");
        }
        if let Ok(r) = &answer
            && let Some(u) = r.usage
        {
            self.metrics.tokens(u.input, u.output);
        }
        let (class, status, served_model, served_provider, detail, usage) = match &answer {
            Ok(r) => {
                (AttemptClass::Ok, Some(200), r.served_model.clone(), r.served_provider.clone(), String::new(), r.usage)
            }
            Err(f) => (f.class, f.status, f.served_model.clone(), None, self.redactor.scrub(&f.detail), f.usage),
        };
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
        let response = self.client.post(provider::endpoint(up)).headers(headers).json(body).send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        Ok((status, headers, bytes.to_vec()))
    }
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

fn transport_failure(e: &reqwest::Error) -> AttemptFailure {
    let class = if e.is_timeout() { AttemptClass::Timeout } else { AttemptClass::ConnectionError };
    AttemptFailure::new(class, None, cohort_core::http_class::error_chain(e))
}
