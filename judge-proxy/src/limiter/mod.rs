//! Rate limits per upstream (requests/min and tokens/min), split among
//! teams by weight, work-conserving, first-come, and adapting to the
//! provider's real quota. Callers book a slot once and sleep until it.
//!
//! # Reservation, not polling
//!
//! The rule is [`gcra::book`] (GCRA with reservation; its module doc has
//! the arithmetic). A caller makes one booking: one atomic step in the
//! store returns the slot at which its permit is valid, or refuses at once
//! when that slot is after the caller's deadline (the refusal's
//! Retry-After is the true slot, not a polling interval). The caller then
//! sleeps until the slot with no further store call. Bookings are
//! serialised by the store, so the order is first-come across every
//! replica. Stores:
//! - [`LocalLimiter`]: in process, for a single replica;
//! - [`RedisLimiter`]: one Lua script (`book.lua`) against a Redis every
//!   replica shares, so N replicas together never exceed the quota.
//!
//! Shares: each team owns a timeline at its weight's share of the rate;
//! the shares add up to the upstream's rate, so the quota holds whoever
//! borrows. A booking takes the earliest slot of its own timeline or of
//! any other team's timeline that has capacity free now (the borrow
//! horizon, [`gcra::BORROW_HORIZON_US`], is 0), so a team alone gets the
//! whole quota, and an owner coming back waits at most its own interval
//! for what others borrowed.
//!
//! # Give-backs and token corrections
//!
//! A caller that leaves before its slot (its future dropped, or a local
//! pause beyond its deadline) gives the booking back: the charged timeline
//! moves back by what it was charged, never below now ([`BookingGuard`]
//! does it on drop). After the call, the token estimate is corrected: to
//! the provider's reported usage; to nothing on an HTTP error answer; to
//! the input estimate on a timeout or reset (output refunded). Small
//! corrections wait in this replica and ride on its next booking (so they
//! cost no Redis call); a correction of at least one tolerance is applied
//! at once. A replica thus withholds less than one tolerance of capacity
//! from the others at any time.
//!
//! # Adapting to the real quota
//!
//! The effective rate is a fraction of the configured one, shared by every
//! replica (`{P:jp:U}:rate`; in memory for the local store), set by the
//! controller of [`rate`]: every booking counts in its slot's second of a
//! one-second ring, every provider 429 on a granted permit comes out of it
//! and marks that second saturated; a 429 cuts to 97% of what the saturated
//! seconds admitted (0.9 of the rate with nothing measured yet, at most
//! halving, floored at [`gcra::FLOOR_PPM`]), at most once per
//! [`rate::GRACE_US`]; the rate then holds for [`rate::HOLD_US`] and probes
//! upward slowly (computed when read: no write per success); the
//! provider's `x-ratelimit-limit-requests` / `-tokens` headers cap it.
//! `Retry-After` / `retry-after-ms`, and `x-ratelimit-remaining-*: 0` with
//! a reset, pause the upstream for every replica: no booking starts before
//! the pause ends. Permits booked before a pause: the replica that saw the
//! 429 keeps a local pause-until its sleepers check before calling (no
//! Redis call); other replicas' permits go ahead, get their 429 and learn.
//!
//! # Redis calls
//!
//! One per booking (granted or refused); none while waiting; one per
//! provider signal (a 429, a changed header limit, remaining 0); one per
//! give-back or large correction.
//!
//! Why not `governor` for the local store: booking needs to look at every
//! timeline of the upstream and charge the one chosen, to refuse without a
//! change, and to give back; `governor` checks and charges one bucket, with
//! no reservation, peek or undo. One rule for both stores also lets one
//! conformance test hold them to the same decisions. (The mock provider
//! enforces its own RPM with `governor`, a plain single bucket.)

pub mod gcra;
mod local;
pub mod rate;
mod redis;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use self::gcra::{BookResult, Booking, FULL_PPM, UpstreamSpec};
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

/// A granted permit: what was booked, so the tokens can be corrected on
/// the timeline that was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// The timeline charged: a team index of the upstream.
    pub timeline: usize,
    /// Whether the team's own timeline was charged (else it borrowed).
    pub in_share: bool,
    /// The tokens it was charged at, corrected after the call.
    pub tokens: u64,
    /// How long the caller waited for it.
    pub waited: Duration,
    /// The rate fraction and the cut epoch it was booked at.
    pub ppm: i64,
    pub epoch: i64,
    /// Its slot (µs, the store's clock): a 429 on it is counted in that
    /// second of the success window.
    pub slot: i64,
}

/// What a provider's response headers said about its quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// `x-ratelimit-limit-requests` (per minute).
    pub limit_requests: Option<u64>,
    /// `x-ratelimit-limit-tokens` (per minute).
    pub limit_tokens: Option<u64>,
    pub remaining_requests: Option<u64>,
    pub remaining_tokens: Option<u64>,
    pub reset_requests: Option<Duration>,
    pub reset_tokens: Option<Duration>,
}

/// The store a [`Limiter`] keeps its timelines in.
#[derive(Debug, Clone)]
pub enum Store {
    Local(LocalLimiter),
    Redis(RedisLimiter),
}

/// One upstream's limits and this replica's view of it.
#[derive(Debug)]
struct UpstreamLimits {
    spec: UpstreamSpec,
    /// The teams in timeline order, and their indexes.
    teams: Vec<String>,
    index: HashMap<String, usize>,
    /// Corrections waiting for this replica's next booking (timeline,
    /// request µs, token µs), merged per timeline. A std mutex: held for a
    /// few operations, never across an await.
    pending: Mutex<Vec<(usize, i64, i64)>>,
    /// Set when this replica saw a pause: its own sleepers check it before
    /// calling.
    paused_until: Mutex<Option<Instant>>,
    /// The fraction the store last reported (for the gauge and for header
    /// caps).
    ppm: AtomicI64,
    /// The header cap this replica last sent.
    cap_sent: AtomicI64,
}

/// The proxy's limiter: every upstream's limits, a store, and the booking.
#[derive(Debug)]
pub struct Limiter {
    store: Store,
    upstreams: HashMap<String, UpstreamLimits>,
    metrics: Arc<Metrics>,
}

/// Gives a booking back when dropped armed: the caller left before using
/// its slot.
#[derive(Debug)]
pub struct BookingGuard<'a> {
    limiter: &'a Limiter,
    upstream: &'a str,
    booking: Booking,
    armed: bool,
}

impl BookingGuard<'_> {
    fn disarm(mut self) -> Booking {
        self.armed = false;
        self.booking
    }
}

impl Drop for BookingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.limiter.release(self.upstream, &self.booking);
        }
    }
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4)
}

fn merge(pending: &mut Vec<(usize, i64, i64)>, j: usize, r: i64, t: i64) {
    match pending.iter_mut().find(|p| p.0 == j) {
        Some(p) => {
            p.1 += r;
            p.2 += t;
        }
        None => pending.push((j, r, t)),
    }
}

impl Limiter {
    pub fn new(config: &ProxyConfig, store: Store, metrics: Arc<Metrics>) -> Limiter {
        let teams: Vec<String> = config.teams.iter().map(|t| t.name.clone()).collect();
        let index: HashMap<String, usize> = teams.iter().enumerate().map(|(i, t)| (t.clone(), i)).collect();
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| {
                let spec = UpstreamSpec {
                    rpm: u64::from(u.rpm),
                    tpm: u.tpm,
                    burst: u64::from(u.burst),
                    weights: config.teams.iter().map(|t| u64::from(t.weight)).collect(),
                };
                metrics.effective_rpm(&u.name, f64::from(u.rpm));
                let limits = UpstreamLimits {
                    spec,
                    teams: teams.clone(),
                    index: index.clone(),
                    pending: Mutex::new(Vec::new()),
                    paused_until: Mutex::new(None),
                    ppm: AtomicI64::new(FULL_PPM),
                    cap_sent: AtomicI64::new(FULL_PPM),
                };
                (u.name.clone(), limits)
            })
            .collect();
        Limiter { store, upstreams, metrics }
    }

    fn limits(&self, upstream: &str) -> Result<&UpstreamLimits, ProxyError> {
        self.upstreams
            .get(upstream)
            .ok_or_else(|| ProxyError::Internal(format!("no limits for upstream \"{upstream}\"")))
    }

    fn team_index(&self, limits: &UpstreamLimits, upstream: &str, team: &str) -> Result<usize, ProxyError> {
        limits
            .index
            .get(team)
            .copied()
            .ok_or_else(|| ProxyError::Internal(format!("no limits for upstream \"{upstream}\" and team \"{team}\"")))
    }

    /// Records the fraction the store reported; the gauge moves only on a
    /// change.
    fn saw_ppm(&self, upstream: &str, limits: &UpstreamLimits, ppm: i64) {
        if limits.ppm.swap(ppm, Ordering::Relaxed) != ppm {
            #[allow(clippy::cast_precision_loss)]
            self.metrics.effective_rpm(upstream, limits.spec.rpm as f64 * ppm as f64 / FULL_PPM as f64);
        }
    }

    /// Books a permit valid before `deadline` and waits for its slot; or,
    /// when the earliest slot is later, refuses at once with a
    /// [`ProxyError::PermitDeadline`] whose Retry-After is that slot.
    pub async fn acquire(&self, req: PermitRequest<'_>, deadline: Instant) -> Result<Permit, ProxyError> {
        let limits = self.limits(req.upstream)?;
        let team = self.team_index(limits, req.upstream, req.team)?;
        let charges = limits.spec.charges(req.tokens);
        let start = Instant::now();
        let max_wait = micros(deadline.saturating_duration_since(start));
        let corrections = std::mem::take(&mut *limits.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let (result, store_now) = match &self.store {
            Store::Local(l) => l.book(req.upstream, team, &charges, max_wait, &corrections, None),
            // On a failed call the corrections are lost: at most one
            // tolerance of capacity, and the proxy fails closed anyway.
            Store::Redis(r) => {
                r.book(req.upstream, &limits.teams, team, &charges, max_wait, &corrections, None).await?
            }
        };
        self.saw_ppm(req.upstream, limits, result.ppm());
        let booking = match result {
            BookResult::Refused { slot, .. } => {
                self.metrics.permit_deadline();
                return Err(ProxyError::PermitDeadline {
                    team: req.team.to_owned(),
                    upstream: req.upstream.to_owned(),
                    waited: start.elapsed(),
                    retry_after: Duration::from_micros(u64::try_from(slot - store_now).unwrap_or(0).max(1)),
                });
            }
            BookResult::Booked(b) => b,
        };
        let wait = Duration::from_micros(u64::try_from(booking.slot - store_now).unwrap_or(0));
        let guard = BookingGuard { limiter: self, upstream: req.upstream, booking, armed: true };
        if !wait.is_zero() {
            tokio::time::sleep_until(start + wait).await;
        }
        // A pause this replica learned after booking holds its own sleepers.
        let local_pause = *limits.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(until) = local_pause
            && until > Instant::now()
        {
            if until > deadline {
                drop(guard);
                self.metrics.permit_deadline();
                return Err(ProxyError::PermitDeadline {
                    team: req.team.to_owned(),
                    upstream: req.upstream.to_owned(),
                    waited: start.elapsed(),
                    retry_after: until - Instant::now(),
                });
            }
            tokio::time::sleep_until(until).await;
        }
        let booking = guard.disarm();
        let waited = start.elapsed();
        self.metrics.permit_granted(waited, !wait.is_zero());
        Ok(Permit {
            timeline: booking.timeline,
            in_share: booking.timeline == team,
            tokens: req.tokens,
            waited,
            ppm: booking.ppm,
            epoch: booking.epoch,
            slot: booking.slot,
        })
    }

    /// Gives `booking` back (its caller left before its slot). The local
    /// store applies it at once; with Redis it is sent in a task of its own
    /// (a drop cannot wait; the task ends within the Redis timeout and
    /// needs no owner: losing it loses one give-back), or, outside a
    /// runtime, rides on the next booking.
    fn release(&self, upstream: &str, booking: &Booking) {
        let Ok(limits) = self.limits(upstream) else { return };
        let correction = (booking.timeline, -booking.req_inc, -booking.tok_inc);
        match &self.store {
            Store::Local(l) => l.adjust(upstream, &[correction], None),
            Store::Redis(r) => match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    let (r, upstream, teams) = (r.clone(), upstream.to_owned(), limits.teams.clone());
                    handle.spawn(async move {
                        if let Err(e) = r.adjust(&upstream, &teams, &[correction], None).await {
                            tracing::warn!(upstream, error = %e, "giving a booking back failed");
                        }
                    });
                }
                Err(_) => {
                    let mut pending = limits.pending.lock().unwrap_or_else(|e| e.into_inner());
                    merge(&mut pending, correction.0, correction.1, correction.2);
                }
            },
        }
    }

    /// Corrects the token charge of `permit` to `actual` tokens (see the
    /// module doc: small corrections ride on the next booking).
    pub async fn reconcile(&self, upstream: &str, permit: &Permit, actual: u64) -> Result<(), ProxyError> {
        if actual == permit.tokens {
            return Ok(());
        }
        let limits = self.limits(upstream)?;
        let full = limits.spec.token_us(permit.timeline, actual.abs_diff(permit.tokens));
        let us = gcra::scale(full, permit.ppm.max(gcra::FLOOR_PPM));
        let us = if actual < permit.tokens { -us } else { us };
        let tol = gcra::scale(limits.spec.charges(0).tol, permit.ppm.max(gcra::FLOOR_PPM));
        let flush = {
            let mut pending = limits.pending.lock().unwrap_or_else(|e| e.into_inner());
            merge(&mut pending, permit.timeline, 0, us);
            if pending.iter().any(|p| p.1.abs() >= tol || p.2.abs() >= tol) {
                std::mem::take(&mut *pending)
            } else {
                Vec::new()
            }
        };
        if flush.is_empty() {
            return Ok(());
        }
        match &self.store {
            Store::Local(l) => {
                l.adjust(upstream, &flush, None);
                Ok(())
            }
            Store::Redis(r) => r.adjust(upstream, &limits.teams, &flush, None).await,
        }
    }

    /// A provider 429 on `permit` (granted by this limiter): counted, a cut
    /// when the controller says (at most once per overshoot: see
    /// [`rate`]), and a pause for `retry_after` when the provider said.
    pub async fn rate_limited(
        &self,
        upstream: &str,
        permit: &Permit,
        retry_after: Option<Duration>,
    ) -> Result<(), ProxyError> {
        let limits = self.limits(upstream)?;
        let pause = retry_after.map_or(0, micros);
        if pause > 0 {
            self.metrics.upstream_paused();
            self.pause_locally(limits, pause);
        }
        self.metrics.rate_cut();
        let limited = rate::Limited { epoch: permit.epoch, slot: permit.slot, rpm: limits.spec.rpm };
        let ppm = self.adapt(upstream, Some(limited), pause, None).await?;
        self.saw_ppm(upstream, limits, ppm);
        Ok(())
    }

    /// What a provider's headers said: a limit below the configured one
    /// caps the rate (sent when it changed, or when the store's fraction is
    /// above it, as after the key expired); nothing remaining pauses until
    /// one request or token is back (the reset, at most one interval at the
    /// reported limit).
    pub async fn observe(&self, upstream: &str, h: &RateHeaders) -> Result<(), ProxyError> {
        let limits = self.limits(upstream)?;
        let mut cap = None;
        if h.limit_requests.is_some() || h.limit_tokens.is_some() {
            let by_req = h.limit_requests.map_or(FULL_PPM, |l| gcra::cap_ppm(l, limits.spec.rpm));
            let by_tok = h.limit_tokens.map_or(FULL_PPM, |l| gcra::cap_ppm(l, limits.spec.tpm));
            let c = by_req.min(by_tok);
            if c != limits.cap_sent.load(Ordering::Relaxed) || limits.ppm.load(Ordering::Relaxed) > c {
                cap = Some(c);
            }
        }
        let empty = |remaining: Option<u64>, reset: Option<Duration>, limit: Option<u64>| match (remaining, reset) {
            (Some(0), Some(reset)) => {
                let interval = Duration::from_micros(60_000_000 / limit.unwrap_or(60).max(1));
                reset.min(interval)
            }
            _ => Duration::ZERO,
        };
        let pause = empty(h.remaining_requests, h.reset_requests, h.limit_requests)
            .max(empty(h.remaining_tokens, h.reset_tokens, None).min(Duration::from_secs(1)));
        if cap.is_none() && pause.is_zero() {
            return Ok(());
        }
        // Not a local pause: this replica's permits are paced already; holding
        // its sleepers would bunch them after the pause.
        let ppm = self.adapt(upstream, None, micros(pause), cap).await?;
        if let Some(c) = cap {
            limits.cap_sent.store(c, Ordering::Relaxed);
        }
        self.saw_ppm(upstream, limits, ppm);
        Ok(())
    }

    /// Pauses `upstream` for every caller (every replica, with Redis).
    pub async fn pause(&self, upstream: &str, pause: Duration) -> Result<(), ProxyError> {
        let limits = self.limits(upstream)?;
        self.metrics.upstream_paused();
        self.pause_locally(limits, micros(pause));
        self.adapt(upstream, None, micros(pause), None).await.map(|_| ())
    }

    fn pause_locally(&self, limits: &UpstreamLimits, pause_us: i64) {
        let until = Instant::now() + Duration::from_micros(u64::try_from(pause_us).unwrap_or(0));
        let mut p = limits.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        *p = Some(p.map_or(until, |old| old.max(until)));
    }

    async fn adapt(
        &self,
        upstream: &str,
        limited: Option<rate::Limited>,
        pause: i64,
        cap: Option<i64>,
    ) -> Result<i64, ProxyError> {
        match &self.store {
            Store::Local(l) => Ok(l.adapt(upstream, limited, pause, cap, None)),
            Store::Redis(r) => r.adapt(upstream, limited, pause, cap, None).await,
        }
    }

    /// The effective rate of `upstream` as this replica last saw it
    /// (requests per minute).
    pub fn effective_rpm(&self, upstream: &str) -> Option<f64> {
        let l = self.upstreams.get(upstream)?;
        #[allow(clippy::cast_precision_loss)]
        Some(l.spec.rpm as f64 * l.ppm.load(Ordering::Relaxed) as f64 / FULL_PPM as f64)
    }

    /// Whether the store answers (readiness).
    pub async fn is_ready(&self) -> bool {
        match &self.store {
            Store::Local(_) => true,
            Store::Redis(r) => r.ping().await,
        }
    }
}
