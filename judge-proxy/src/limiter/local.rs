//! The in-process store of the limiter: every bucket under one mutex.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::gcra::{self, BucketState, Charges, Decision, ShareSpec};

/// The buckets of one replica. Time comes from tokio's clock, so tests that
/// pause it (`tokio::time::pause`) control the limiter without sleeping.
#[derive(Debug)]
pub struct LocalLimiter {
    /// The zero of the buckets' microsecond clock.
    epoch: Instant,
    /// A std mutex: held for a few arithmetic operations, never across an
    /// await.
    upstreams: Mutex<HashMap<String, UpstreamBuckets>>,
}

#[derive(Debug, Default)]
struct UpstreamBuckets {
    req: i64,
    tok: i64,
    paused_until: i64,
    /// team -> (request TAT, token TAT).
    teams: HashMap<String, (i64, i64)>,
}

impl Default for LocalLimiter {
    fn default() -> Self {
        LocalLimiter::new()
    }
}

impl LocalLimiter {
    pub fn new() -> LocalLimiter {
        LocalLimiter { epoch: Instant::now(), upstreams: Mutex::new(HashMap::new()) }
    }

    fn now_us(&self) -> i64 {
        // Starts at 1 s so that "never used" (TAT 0) is in the past.
        i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX / 4) + 1_000_000
    }

    fn with<T>(&self, upstream: &str, f: impl FnOnce(&mut UpstreamBuckets) -> T) -> T {
        let mut map = self.upstreams.lock().unwrap_or_else(|e| e.into_inner());
        f(map.entry(upstream.to_owned()).or_default())
    }

    /// Applies the rule at `now` (µs; None: the clock's now).
    pub fn decide(&self, upstream: &str, team: &str, charges: &Charges, now: Option<i64>) -> Decision {
        let now = now.unwrap_or_else(|| self.now_us());
        self.with(upstream, |u| {
            let (team_req, team_tok) = u.teams.get(team).copied().unwrap_or_default();
            let mut state = BucketState {
                upstream_req: u.req,
                upstream_tok: u.tok,
                team_req,
                team_tok,
                paused_until: u.paused_until,
            };
            let decision = gcra::decide(&mut state, now, charges);
            u.req = state.upstream_req;
            u.tok = state.upstream_tok;
            u.teams.insert(team.to_owned(), (state.team_req, state.team_tok));
            decision
        })
    }

    pub fn reconcile(&self, upstream: &str, team: &str, spec: &ShareSpec, delta_tokens: i64, in_share: bool) {
        self.with(upstream, |u| {
            let (team_req, team_tok) = u.teams.get(team).copied().unwrap_or_default();
            let mut state =
                BucketState { upstream_req: u.req, upstream_tok: u.tok, team_req, team_tok, paused_until: 0 };
            gcra::reconcile(&mut state, spec, delta_tokens, in_share);
            u.tok = state.upstream_tok;
            u.teams.insert(team.to_owned(), (team_req, state.team_tok));
        });
    }

    pub fn pause(&self, upstream: &str, pause: Duration) {
        let until = self.now_us().saturating_add(i64::try_from(pause.as_micros()).unwrap_or(i64::MAX / 4));
        self.with(upstream, |u| u.paused_until = u.paused_until.max(until));
    }
}
