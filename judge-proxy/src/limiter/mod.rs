//! Rate limits per upstream (requests/min and tokens/min), split among
//! teams by weight, work-conserving, with callers waiting for a permit up
//! to their deadline.
//!
//! The rule is [`gcra::decide`]; it runs in one of two stores:
//! - [`LocalLimiter`]: in process, for a single replica;
//! - [`RedisLimiter`]: one atomic Lua script (`acquire.lua`) against a
//!   Redis every replica shares, so N replicas together never exceed the
//!   upstream's quota.
//!
//! Why not `governor` for the local store: the borrowing rule needs to look
//! at the upstream's bucket at two tolerances and charge up to four buckets
//! in one step, or none. `governor` checks and charges one bucket at a time
//! with no peek or undo, so a refused second check would leak the first
//! charge. Keeping one rule for both stores also lets one conformance test
//! hold them to the same decisions. (The mock provider enforces its own RPM
//! with `governor`, a plain single bucket.)

pub mod gcra;
mod local;
mod redis;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::gcra::{Decision, ShareSpec};
pub use self::local::LocalLimiter;
pub use self::redis::RedisLimiter;
use crate::config::ProxyConfig;
use crate::error::ProxyError;
use crate::metrics::Metrics;

/// One request for a permit.
#[derive(Debug, Clone, Copy)]
pub struct PermitRequest<'a> {
    pub upstream: &'a str,
    pub team: &'a str,
    /// Estimated tokens of the call (input and output).
    pub tokens: u64,
}

/// A granted permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// Whether the team's own share was charged (else it borrowed).
    pub in_share: bool,
    /// The tokens it was charged at, reconciled after the call.
    pub tokens: u64,
    /// How long the caller waited for it.
    pub waited: Duration,
}

/// The store a [`Limiter`] keeps its buckets in.
#[derive(Debug)]
pub enum Store {
    Local(LocalLimiter),
    Redis(RedisLimiter),
}

/// The proxy's limiter: the rule's parameters per upstream and team, a
/// store, and the wait loop.
#[derive(Debug)]
pub struct Limiter {
    store: Store,
    /// (upstream, team) -> its share of the upstream.
    specs: HashMap<(String, String), ShareSpec>,
    metrics: Arc<Metrics>,
}

impl Limiter {
    pub fn new(config: &ProxyConfig, store: Store, metrics: Arc<Metrics>) -> Limiter {
        let total: u64 = config.teams.iter().map(|t| u64::from(t.weight)).sum();
        let mut specs = HashMap::new();
        for u in &config.upstreams {
            for t in &config.teams {
                specs.insert(
                    (u.name.clone(), t.name.clone()),
                    ShareSpec {
                        rpm: u64::from(u.rpm),
                        tpm: u.tpm,
                        burst: u64::from(u.burst),
                        team_weight: u64::from(t.weight),
                        total_weight: total,
                    },
                );
            }
        }
        Limiter { store, specs, metrics }
    }

    fn spec(&self, upstream: &str, team: &str) -> Result<&ShareSpec, ProxyError> {
        self.specs
            .get(&(upstream.to_owned(), team.to_owned()))
            .ok_or_else(|| ProxyError::Internal(format!("no limits for upstream \"{upstream}\" and team \"{team}\"")))
    }

    /// One decision now, without waiting.
    pub async fn try_acquire(&self, req: PermitRequest<'_>) -> Result<Decision, ProxyError> {
        let charges = self.spec(req.upstream, req.team)?.charges(req.tokens);
        match &self.store {
            Store::Local(l) => Ok(l.decide(req.upstream, req.team, &charges, None)),
            Store::Redis(r) => r.decide(req.upstream, req.team, &charges, None).await,
        }
    }

    /// Waits for a permit until `deadline`. Past it, a
    /// [`ProxyError::PermitDeadline`] says how long the caller waited and
    /// when to try again.
    pub async fn acquire(&self, req: PermitRequest<'_>, deadline: Instant) -> Result<Permit, ProxyError> {
        let start = Instant::now();
        loop {
            match self.try_acquire(req).await? {
                Decision::Admit { in_share } => {
                    let waited = start.elapsed();
                    self.metrics.permit_granted(waited);
                    return Ok(Permit { in_share, tokens: req.tokens, waited });
                }
                Decision::Wait { us } => {
                    let wait = Duration::from_micros(u64::try_from(us).unwrap_or(0).max(1));
                    let now = Instant::now();
                    if now >= deadline {
                        self.metrics.permit_deadline();
                        return Err(ProxyError::PermitDeadline {
                            team: req.team.to_owned(),
                            upstream: req.upstream.to_owned(),
                            waited: now - start,
                            retry_after: wait,
                        });
                    }
                    tokio::time::sleep_until((now + wait).min(deadline)).await;
                }
            }
        }
    }

    /// Corrects the token buckets once the provider reported `actual`
    /// tokens for a call charged at `permit.tokens`.
    pub async fn reconcile(&self, upstream: &str, team: &str, permit: &Permit, actual: u64) -> Result<(), ProxyError> {
        let delta = i64::try_from(actual).unwrap_or(i64::MAX) - i64::try_from(permit.tokens).unwrap_or(i64::MAX);
        if delta == 0 {
            return Ok(());
        }
        let spec = *self.spec(upstream, team)?;
        match &self.store {
            Store::Local(l) => {
                l.reconcile(upstream, team, &spec, delta, permit.in_share);
                Ok(())
            }
            Store::Redis(r) => r.reconcile(upstream, team, &spec, delta, permit.in_share).await,
        }
    }

    /// Pauses `upstream` for every caller (every replica, with Redis).
    pub async fn pause(&self, upstream: &str, pause: Duration) -> Result<(), ProxyError> {
        self.metrics.upstream_paused();
        match &self.store {
            Store::Local(l) => {
                l.pause(upstream, pause);
                Ok(())
            }
            Store::Redis(r) => r.pause(upstream, pause).await,
        }
    }

    /// Whether the store answers (readiness).
    pub async fn is_ready(&self) -> bool {
        match &self.store {
            Store::Local(_) => true,
            Store::Redis(r) => r.ping().await,
        }
    }
}
