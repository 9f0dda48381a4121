//! The admission rule, pure: GCRA (the generic cell rate algorithm) over
//! four buckets per upstream and team, with work-conserving borrowing.
//! [`crate::limiter::LocalLimiter`] runs it in process; `acquire.lua` runs
//! the same arithmetic inside Redis. Keep the two in step: the conformance
//! test `local_and_redis_decide_alike` (judge-proxy/tests/limiter_redis.rs)
//! feeds both the same script of requests.
//!
//! A bucket's state is its theoretical arrival time (TAT), in microseconds.
//! A request costing `inc` microseconds of the bucket's capacity is
//! admitted when `max(tat, now) + inc - now <= tolerance`, and then moves
//! the TAT there. All increments and tolerances are computed here, in
//! integers, so the Lua side only adds and compares (exact in doubles).
//!
//! The rule for one request of team T at upstream U:
//! 1. U paused (a provider 429 with Retry-After): wait until the pause ends.
//! 2. In share: T's own request and token buckets (U's rate times T's
//!    weight share) and U's request and token buckets at full tolerance all
//!    admit it: all four are charged.
//! 3. Borrowed: U's two buckets admit it at the borrow tolerance (half the
//!    burst): only U's buckets are charged. What a team leaves unused is
//!    taken by others, but borrowers always leave half the burst to teams
//!    within their share, so an in-share request waits behind borrowers
//!    for about one emission interval at most.
//! 4. Otherwise: wait the shorter of the two paths' waits.
//!
//! U's buckets are charged by every admitted request, so U's quota is never
//! exceeded, whoever borrows.

/// Microseconds in a minute: limits are per minute.
pub const MINUTE_US: u64 = 60_000_000;

/// The increments and tolerances of one request, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charges {
    pub upstream_req_inc: i64,
    pub upstream_tok_inc: i64,
    /// The tolerance of the upstream's buckets for in-share requests.
    pub upstream_tol: i64,
    /// The tolerance of the upstream's buckets for borrowed requests.
    pub borrow_tol: i64,
    pub team_req_inc: i64,
    pub team_tok_inc: i64,
    pub team_tol: i64,
}

/// The limits of one upstream as seen by one team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSpec {
    pub rpm: u64,
    pub tpm: u64,
    /// Requests that may go back to back on an idle upstream (at least 2).
    pub burst: u64,
    pub team_weight: u64,
    pub total_weight: u64,
}

impl ShareSpec {
    /// The charges of a request estimated at `tokens` tokens.
    pub fn charges(&self, tokens: u64) -> Charges {
        let rpm = self.rpm.max(1);
        let tpm = self.tpm.max(1);
        let w = self.team_weight.max(1);
        let total = self.total_weight.max(w);
        let req_interval = MINUTE_US.div_ceil(rpm);
        let upstream_tol = req_interval.saturating_mul(self.burst.max(2));
        let borrow_tol = (upstream_tol / 2).max(req_interval);
        // Team rate = upstream rate * w / total, so its interval is the
        // upstream's * total / w. u128 keeps tokens * minute * weights exact.
        let team_req = (u128::from(MINUTE_US) * u128::from(total)).div_ceil(u128::from(rpm) * u128::from(w));
        let tok = |scale: u64, per: u64| -> u128 {
            (u128::from(tokens) * u128::from(MINUTE_US) * u128::from(scale)).div_ceil(u128::from(tpm) * u128::from(per))
        };
        let clamp = |x: u128| i64::try_from(x).unwrap_or(i64::MAX / 4).min(i64::MAX / 4);
        let team_req_inc = clamp(team_req);
        Charges {
            upstream_req_inc: clamp(u128::from(req_interval)),
            upstream_tok_inc: clamp(tok(1, 1)),
            upstream_tol: clamp(u128::from(upstream_tol)),
            borrow_tol: clamp(u128::from(borrow_tol)),
            team_req_inc,
            team_tok_inc: clamp(tok(total, w)),
            team_tol: clamp(u128::from(upstream_tol)).max(team_req_inc),
        }
    }
}

/// The state of one upstream and one team's buckets (TATs, µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketState {
    pub upstream_req: i64,
    pub upstream_tok: i64,
    pub team_req: i64,
    pub team_tok: i64,
    /// The upstream is paused until this time (0: not paused).
    pub paused_until: i64,
}

/// What the rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted; `in_share` says whether the team's buckets were charged.
    Admit { in_share: bool },
    /// Not now: ask again after this many microseconds.
    Wait { us: i64 },
}

/// One bucket's check: the new TAT, or how long until it would admit. A
/// request larger than the tolerance passes an idle bucket (so a big
/// request is never refused forever) and then pays its full cost.
fn check(tat: i64, now: i64, inc: i64, tol: i64) -> Result<i64, i64> {
    let new = tat.max(now).saturating_add(inc);
    let tol = tol.max(inc);
    if new - now <= tol { Ok(new) } else { Err(new - now - tol) }
}

/// Applies the rule at `now` (µs) and updates `state` when admitted.
pub fn decide(state: &mut BucketState, now: i64, c: &Charges) -> Decision {
    if state.paused_until > now {
        return Decision::Wait { us: state.paused_until - now };
    }
    let in_share = [
        check(state.team_req, now, c.team_req_inc, c.team_tol),
        check(state.team_tok, now, c.team_tok_inc, c.team_tol),
        check(state.upstream_req, now, c.upstream_req_inc, c.upstream_tol),
        check(state.upstream_tok, now, c.upstream_tok_inc, c.upstream_tol),
    ];
    if let [Ok(tr), Ok(tt), Ok(ur), Ok(ut)] = in_share {
        *state = BucketState { upstream_req: ur, upstream_tok: ut, team_req: tr, team_tok: tt, ..*state };
        return Decision::Admit { in_share: true };
    }
    let borrow = [
        check(state.upstream_req, now, c.upstream_req_inc, c.borrow_tol),
        check(state.upstream_tok, now, c.upstream_tok_inc, c.borrow_tol),
    ];
    if let [Ok(ur), Ok(ut)] = borrow {
        state.upstream_req = ur;
        state.upstream_tok = ut;
        return Decision::Admit { in_share: false };
    }
    let longest = |r: &[Result<i64, i64>]| r.iter().map(|x| x.err().unwrap_or(0)).max().unwrap_or(0);
    Decision::Wait { us: longest(&in_share).min(longest(&borrow)).max(1) }
}

/// Moves token TATs by `delta_tokens` once the provider reported the real
/// usage (negative: the estimate was too high, capacity is returned).
pub fn reconcile(state: &mut BucketState, spec: &ShareSpec, delta_tokens: i64, in_share: bool) {
    let per = |tokens: u64| spec.charges(tokens);
    let c = per(delta_tokens.unsigned_abs());
    let sign = if delta_tokens < 0 { -1 } else { 1 };
    state.upstream_tok = state.upstream_tok.saturating_add(sign * c.upstream_tok_inc);
    if in_share {
        state.team_tok = state.team_tok.saturating_add(sign * c.team_tok_inc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(weight: u64, total: u64) -> ShareSpec {
        ShareSpec { rpm: 60, tpm: 1_000_000, burst: 2, team_weight: weight, total_weight: total }
    }

    #[test]
    fn charges_split_the_rate_by_weight() {
        let c = spec(1, 4).charges(100);
        assert_eq!(c.upstream_req_inc, 1_000_000, "60 rpm is one request a second");
        assert_eq!(c.team_req_inc, 4_000_000, "a quarter share is one every four seconds");
        assert_eq!(c.upstream_tok_inc, 6_000, "100 tokens of 1M tpm");
        assert_eq!(c.team_tok_inc, 24_000);
        assert_eq!((c.upstream_tol, c.borrow_tol), (2_000_000, 1_000_000));
    }

    /// Over a simulated minute, a greedy team alone gets the whole rate
    /// (work-conserving), and never more.
    #[test]
    fn a_lone_team_borrows_the_whole_quota_and_no_more() {
        let c = spec(1, 2).charges(1);
        let mut s = BucketState::default();
        let mut admitted = 0;
        let mut now = 0;
        while now < 60_000_000 {
            match decide(&mut s, now, &c) {
                Decision::Admit { .. } => admitted += 1,
                Decision::Wait { us } => now += us,
            }
        }
        // 60 per minute plus the initial burst of 2.
        assert!((60..=62).contains(&admitted), "{admitted}");
    }

    /// A team within its share waits at most one upstream interval, even
    /// while another team takes all the capacity it can borrow, and its
    /// requests count against its share.
    #[test]
    fn in_share_requests_are_not_starved_by_borrowers() {
        let c = spec(1, 2).charges(1);
        // Upstream TATs are shared; team TATs are each team's own.
        let (mut greedy, mut modest) = (BucketState::default(), BucketState::default());
        let run = |me: &mut BucketState, other: &mut BucketState, now: i64| {
            let d = decide(me, now, &c);
            other.upstream_req = me.upstream_req;
            other.upstream_tok = me.upstream_tok;
            d
        };
        let (mut greedy_admitted, mut modest_admitted) = (0, 0);
        // 100 ms steps over a minute; the greedy team asks every step, the
        // modest one every 2.5 s (its share is one per 2 s) until admitted.
        let mut modest_due: Option<i64> = Some(0);
        for step in 0..600i64 {
            let now = step * 100_000;
            if matches!(run(&mut greedy, &mut modest, now), Decision::Admit { .. }) {
                greedy_admitted += 1;
            }
            if step % 25 == 0 {
                modest_due.get_or_insert(now);
            }
            if let Some(since) = modest_due {
                match run(&mut modest, &mut greedy, now) {
                    Decision::Admit { in_share } => {
                        assert!(in_share);
                        assert!(now - since <= 1_000_000, "waited {} us", now - since);
                        modest_admitted += 1;
                        modest_due = None;
                    }
                    Decision::Wait { .. } => {}
                }
            }
        }
        assert_eq!(modest_admitted, 24);
        assert!(greedy_admitted + modest_admitted <= 62, "{greedy_admitted} + {modest_admitted}");
        assert!(greedy_admitted >= 30, "the greedy team borrows what is left: {greedy_admitted}");
    }

    #[test]
    fn pause_holds_everyone() {
        let c = spec(1, 1).charges(1);
        let mut s = BucketState { paused_until: 5_000_000, ..Default::default() };
        assert_eq!(decide(&mut s, 1_000_000, &c), Decision::Wait { us: 4_000_000 });
        assert_eq!(decide(&mut s, 5_000_000, &c), Decision::Admit { in_share: true });
    }

    #[test]
    fn an_oversized_request_passes_an_idle_bucket_then_pays() {
        let c = ShareSpec { rpm: 600, tpm: 600, burst: 2, team_weight: 1, total_weight: 1 }.charges(100);
        let mut s = BucketState::default();
        assert!(matches!(decide(&mut s, 0, &c), Decision::Admit { .. }));
        // 100 tokens at 600/min take 10 s to repay.
        assert!(matches!(decide(&mut s, 1_000_000, &c), Decision::Wait { us } if us > 8_000_000));
    }

    #[test]
    fn reconcile_returns_overestimated_tokens() {
        let spec = ShareSpec { rpm: 600, tpm: 600, burst: 2, team_weight: 1, total_weight: 1 };
        let mut s = BucketState { upstream_tok: 10_000_000, team_tok: 10_000_000, ..Default::default() };
        reconcile(&mut s, &spec, -50, true);
        assert_eq!((s.upstream_tok, s.team_tok), (5_000_000, 5_000_000));
        reconcile(&mut s, &spec, 10, false);
        assert_eq!((s.upstream_tok, s.team_tok), (6_000_000, 5_000_000));
    }
}
