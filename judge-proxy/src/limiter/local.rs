//! The in-process store of the limiter: every upstream's timelines, pause
//! and rate under one mutex.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::gcra::{self, BookResult, Charges, UpstreamState};
use super::rate::Limited;

/// The timelines of one replica. Time comes from tokio's clock, so tests
/// that pause it (`tokio::time::pause`) control the limiter without
/// sleeping. Cheap to clone (a handle to the same state).
#[derive(Debug, Clone)]
pub struct LocalLimiter {
    /// The zero of the timelines' microsecond clock.
    epoch: Instant,
    /// A std mutex: held for a few arithmetic operations, never across an
    /// await.
    upstreams: Arc<Mutex<HashMap<String, UpstreamState>>>,
}

impl Default for LocalLimiter {
    fn default() -> Self {
        LocalLimiter::new()
    }
}

impl LocalLimiter {
    pub fn new() -> LocalLimiter {
        LocalLimiter { epoch: Instant::now(), upstreams: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// The store's clock (µs). Starts at 1 s so that "never used" (TAT 0)
    /// is in the past.
    pub fn now_us(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX / 4) + 1_000_000
    }

    fn with<T>(&self, upstream: &str, f: impl FnOnce(&mut UpstreamState) -> T) -> T {
        let mut map = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        f(map.entry(upstream.to_owned()).or_default())
    }

    /// Applies `corrections` (timeline, request µs, token µs), then books
    /// (see [`gcra::book`]) at `now` (None: the clock's now).
    pub fn book(
        &self,
        upstream: &str,
        team: usize,
        charges: &Charges,
        max_wait: i64,
        corrections: &[(usize, i64, i64)],
        now: Option<i64>,
    ) -> (BookResult, i64) {
        let now = now.unwrap_or_else(|| self.now_us());
        let result = self.with(upstream, |u| {
            for (j, r, t) in corrections {
                gcra::adjust(u, now, *j, *r, *t);
            }
            gcra::book(u, now, team, charges, max_wait)
        });
        (result, now)
    }

    pub fn adjust(&self, upstream: &str, corrections: &[(usize, i64, i64)], now: Option<i64>) {
        let now = now.unwrap_or_else(|| self.now_us());
        self.with(upstream, |u| {
            for (j, r, t) in corrections {
                gcra::adjust(u, now, *j, *r, *t);
            }
        });
    }

    /// A provider signal: a 429 on a permit (counted, and a cut when the
    /// controller says: [`super::rate::RateState::limited`]), a pause of
    /// `pause_us`, a cap. Returns the fraction in force afterwards.
    pub fn adapt(
        &self,
        upstream: &str,
        limited: Option<Limited>,
        pause_us: i64,
        cap_ppm: Option<i64>,
        now: Option<i64>,
    ) -> i64 {
        let now = now.unwrap_or_else(|| self.now_us());
        self.with(upstream, |u| {
            if let Some(cap) = cap_ppm {
                u.rate.set_cap(now, cap);
            }
            if let Some(l) = limited {
                u.rate.limited(now, l);
            }
            if pause_us > 0 {
                u.paused_until = u.paused_until.max(now + pause_us);
            }
            u.rate.ppm(now)
        })
    }
}
