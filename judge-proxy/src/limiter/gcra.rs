//! The booking rule, pure: GCRA (the generic cell rate algorithm) with
//! reservation, over one pair of timelines (requests, tokens) per team of
//! an upstream, with work-conserving borrowing and an adaptive rate.
//! [`crate::limiter::LocalLimiter`] runs it in process; `book.lua` runs the
//! same arithmetic inside Redis. Keep the two in step: the conformance test
//! `local_and_redis_decide_alike` (judge-proxy/tests/limits.rs) feeds both
//! the same script of bookings, corrections and rate signals.
//!
//! A timeline's state is its theoretical arrival time (TAT, µs). Team `i`
//! of weight `w_i` (of `W` in all) owns a timeline at `w_i / W` of the
//! upstream's effective rate: its request increment is the upstream's
//! interval times `W / w_i`; every timeline has the same tolerance in time
//! (`burst` upstream intervals). The shares add up to the upstream's rate,
//! so no separate upstream bucket is needed and the quota holds whoever
//! borrows.
//!
//! Booking a request of team `i` at `now` (`base = max(now, pause_until)`):
//! - a pause (the provider said to wait) holds every booking until it ends
//!   and leaves the provider's bucket empty, not full, at its end: request
//!   TATs are taken as at least `pause_until + tol`, so bookings resume at
//!   the rate without a burst (a burst into an empty bucket is more 429s,
//!   more cuts);
//! - on timeline `j`, the request slot is `max(base, max(tat_r, base) +
//!   inc_r - tol)` (the reservation form: a share smaller than one burst
//!   waits `inc_r - tol` even when idle, so the sum of all shares' bursts
//!   is the upstream's burst) and the token slot `max(base, tat_t - tol)`
//!   (GCRA's virtual-scheduling form: a request larger than the tolerance
//!   passes an idle timeline and pays after, so a big request is not held
//!   for the minute its tokens take); the slot is the later of the two;
//! - candidates: team `i`'s own timeline (always: first-come order within
//!   the team) and any other team's whose slot is within the borrow horizon
//!   of `base` (capacity its owner is not using) and whose token TAT the
//!   booking leaves within one of the owner's request intervals of being
//!   free (so a huge request cannot hold another team's timeline); the
//!   earliest slot wins, the own timeline on a tie;
//! - a slot after `now + max_wait` is refused, nothing changes, and the
//!   slot is the true Retry-After; otherwise the chosen timeline's TATs
//!   move past the slot and the caller sleeps until it.
//!
//! An owner coming back to a timeline others borrowed finds it booked at
//! most one horizon (plus its own interval) ahead: that is all borrowing
//! can cost it. The horizon is [`BORROW_HORIZON_US`] (0: only capacity
//! free now is borrowed).
//!
//! The effective rate is `ppm / 1_000_000` of the configured one, set by
//! the controller of [`super::rate`] (a cut on an upstream 429 to just
//! below the rate the provider was measured to admit, a hold, a slow
//! probe, a cap from the provider's `x-ratelimit-limit-*` headers); a
//! booking counts in that controller's window ([`super::rate::SuccessWindow`]).
//! Every increment and tolerance is scaled by `1e6 / ppm` in doubles, with
//! the same operations in the same order in Lua, so both stores compute
//! the same integers.

/// Microseconds in a minute: limits are per minute.
pub const MINUTE_US: i64 = 60_000_000;
/// The rate fraction of a configured rate, in parts per million.
pub const FULL_PPM: i64 = 1_000_000;
/// The lowest fraction a cut can reach (1/20 of the configured rate): a
/// provider that 429s everything still gets probed.
pub const FLOOR_PPM: i64 = 50_000;

pub use super::rate::RateState;
/// How far past now a borrowed slot may be: 0, only capacity that is free
/// now. Why not one interval or one tolerance: an owner coming back to a
/// timeline others borrowed waits the horizon plus its own interval; with
/// 0 it waits at most its own interval, what it would wait anyway at its
/// share. Work conservation holds as long as borrowers keep asking: every
/// booking that finds an idle timeline's capacity free takes it, and
/// capacity left free builds up to one tolerance, taken by the next ones.
pub const BORROW_HORIZON_US: i64 = 0;

/// `x * 1e6 / ppm`, rounded up, in doubles (as `book.lua` computes it).
pub fn scale(x: i64, ppm: i64) -> i64 {
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let v = ((x as f64) * 1_000_000.0 / (ppm as f64)).ceil() as i64;
    v
}

/// The limits of one upstream, shared by its teams in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub rpm: u64,
    pub tpm: u64,
    /// Requests that may go back to back on an idle upstream (at least 1).
    pub burst: u64,
    /// Every team's weight, in config order (the timeline index).
    pub weights: Vec<u64>,
}

/// The increments (per timeline, at the configured rate), the tolerance
/// and the borrow horizon of one request, in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charges {
    pub req_inc: Vec<i64>,
    pub tok_inc: Vec<i64>,
    pub tol: i64,
    pub horizon: i64,
}

fn clamp(x: u128) -> i64 {
    // Far beyond any TAT that matters, and exact in doubles.
    i64::try_from(x).unwrap_or(i64::MAX).min(1 << 52)
}

impl UpstreamSpec {
    fn total(&self) -> u128 {
        u128::from(self.weights.iter().map(|w| (*w).max(1)).sum::<u64>().max(1))
    }

    /// The upstream's emission interval at the configured rate.
    pub fn interval_us(&self) -> i64 {
        clamp(u128::from(MINUTE_US.unsigned_abs()).div_ceil(u128::from(self.rpm.max(1))))
    }

    /// Microseconds of timeline `j`'s token capacity that `tokens` take.
    pub fn token_us(&self, j: usize, tokens: u64) -> i64 {
        let w = u128::from(self.weights.get(j).copied().unwrap_or(1).max(1));
        clamp(
            (u128::from(tokens) * u128::from(MINUTE_US.unsigned_abs()) * self.total())
                .div_ceil(u128::from(self.tpm.max(1)) * w),
        )
    }

    /// The charges of a request estimated at `tokens` tokens.
    pub fn charges(&self, tokens: u64) -> Charges {
        let minute = u128::from(MINUTE_US.unsigned_abs());
        let req_inc = (0..self.weights.len())
            .map(|j| {
                let w = u128::from(self.weights[j].max(1));
                clamp((minute * self.total()).div_ceil(u128::from(self.rpm.max(1)) * w))
            })
            .collect();
        let tok_inc = (0..self.weights.len()).map(|j| self.token_us(j, tokens)).collect();
        let tol = self.interval_us().saturating_mul(i64::try_from(self.burst.max(1)).unwrap_or(1));
        Charges { req_inc, tok_inc, tol, horizon: BORROW_HORIZON_US }
    }
}

/// One team's timeline (TATs, µs; 0: never used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeline {
    pub req: i64,
    pub tok: i64,
}

/// Every timeline of one upstream, its pause and its rate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamState {
    pub timelines: Vec<Timeline>,
    /// No booking starts before this (µs; 0: not paused).
    pub paused_until: i64,
    pub rate: RateState,
}

/// A booked slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booking {
    /// When the permit is valid (µs, the store's clock).
    pub slot: i64,
    /// The timeline charged (a team index): the caller's own, or one it
    /// borrowed.
    pub timeline: usize,
    /// The request and token increments charged (effective rate), for a
    /// give-back.
    pub req_inc: i64,
    pub tok_inc: i64,
    /// The rate fraction it was booked at, and the cut epoch.
    pub ppm: i64,
    pub epoch: i64,
}

/// What a booking came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookResult {
    Booked(Booking),
    /// The earliest slot is after the caller's deadline: nothing changed.
    Refused {
        slot: i64,
        ppm: i64,
        epoch: i64,
    },
}

impl BookResult {
    /// The rate fraction the store reported.
    pub fn ppm(&self) -> i64 {
        match self {
            BookResult::Booked(b) => b.ppm,
            BookResult::Refused { ppm, .. } => *ppm,
        }
    }
}

/// Books the earliest slot for `team` at `now` that is within `max_wait`,
/// or refuses without a change (see the module doc).
pub fn book(state: &mut UpstreamState, now: i64, team: usize, c: &Charges, max_wait: i64) -> BookResult {
    let n = c.req_inc.len();
    if state.timelines.len() < n {
        state.timelines.resize(n, Timeline::default());
    }
    let ppm = state.rate.ppm(now);
    let epoch = state.rate.t_cut;
    let base = now.max(state.paused_until);
    let tol = scale(c.tol, ppm);
    let horizon = scale(c.horizon, ppm);
    // (slot, timeline, req_inc, tok_inc); own timeline first, so it wins ties.
    let mut best: Option<(i64, usize, i64, i64)> = None;
    // After a pause the provider's bucket is empty, not full: every
    // request timeline resumes at its rate, without a burst.
    let req_floor = if state.paused_until > 0 { state.paused_until + tol } else { 0 };
    for j in std::iter::once(team).chain((0..n).filter(|j| *j != team)) {
        let (ri, ti) = (scale(c.req_inc[j], ppm), scale(c.tok_inc[j], ppm));
        let t = state.timelines[j];
        let req = t.req.max(req_floor);
        let s = base.max(req.max(base) + ri - tol).max(t.tok - tol);
        // A borrowed booking may not leave the owner more than one of its
        // own intervals behind in tokens: a request whose tokens take longer
        // (a huge max_tokens) is charged to its own team's share.
        if j != team && (s > base + horizon || t.tok.max(s) + ti - tol > base + ri) {
            continue;
        }
        if best.is_none_or(|b| s < b.0) {
            best = Some((s, j, ri, ti));
        }
    }
    let Some((slot, j, ri, ti)) = best else {
        return BookResult::Refused { slot: i64::MAX / 4, ppm, epoch };
    };
    if slot - now > max_wait {
        return BookResult::Refused { slot, ppm, epoch };
    }
    let t = &mut state.timelines[j];
    t.req = t.req.max(req_floor);
    // Placed at `slot`: a share smaller than the tolerance keeps its TAT
    // `tol` past its slot (the next one comes `ri` later).
    t.req = t.req.max(base).max(slot - (ri - tol).max(0)) + ri;
    t.tok = t.tok.max(slot) + ti;
    state.rate.booked(now, slot);
    BookResult::Booked(Booking { slot, timeline: j, req_inc: ri, tok_inc: ti, ppm, epoch })
}

/// Moves timeline `j` by `req` and `tok` microseconds: positive charges
/// more (from now at the earliest), negative gives back (never below now,
/// so a give-back cannot create a burst above the tolerance).
pub fn adjust(state: &mut UpstreamState, now: i64, j: usize, req: i64, tok: i64) {
    if state.timelines.len() <= j {
        state.timelines.resize(j + 1, Timeline::default());
    }
    let shift = |tat: i64, d: i64| {
        if d == 0 {
            tat
        } else if d > 0 {
            tat.max(now) + d
        } else {
            (tat + d).max(now)
        }
    };
    let t = &mut state.timelines[j];
    t.req = shift(t.req, req);
    t.tok = shift(t.tok, tok);
}

/// The fraction of `configured` per minute that a provider's reported
/// `limit` per minute allows (capped at the full rate).
pub fn cap_ppm(limit: u64, configured: u64) -> i64 {
    let ppm = u128::from(limit) * u128::from(FULL_PPM.unsigned_abs()) / u128::from(configured.max(1));
    i64::try_from(ppm).unwrap_or(FULL_PPM).clamp(FLOOR_PPM, FULL_PPM)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    fn spec(rpm: u64, burst: u64, weights: &[u64]) -> UpstreamSpec {
        UpstreamSpec { rpm, tpm: 1_000_000_000, burst, weights: weights.to_vec() }
    }

    /// Simulates `secs` seconds: every team in `demand` asks `per_s` times a
    /// second (evenly, offset per team) with `max_wait`; returns the slots
    /// granted per team and the waits.
    fn simulate(s: &UpstreamSpec, demand: &[(usize, u64)], secs: i64, max_wait: i64) -> (Vec<Vec<i64>>, Vec<i64>) {
        let c = s.charges(1);
        let mut state = UpstreamState::default();
        let mut granted = vec![Vec::new(); s.weights.len()];
        let mut waits = Vec::new();
        let mut arrivals: Vec<(i64, usize)> = Vec::new();
        for (k, (team, per_s)) in demand.iter().enumerate() {
            let gap = 1_000_000 / i64::try_from(*per_s).unwrap();
            let mut t = 1_000_000 + i64::try_from(k).unwrap() * 997;
            while t < 1_000_000 + secs * 1_000_000 {
                arrivals.push((t, *team));
                t += gap;
            }
        }
        arrivals.sort_unstable();
        for (now, team) in arrivals {
            if let BookResult::Booked(b) = book(&mut state, now, team, &c, max_wait) {
                granted[team].push(b.slot);
                waits.push(b.slot - now);
            }
        }
        (granted, waits)
    }

    /// The most slots in any window of `window` µs, over all teams.
    fn most_in_window(granted: &[Vec<i64>], window: i64) -> usize {
        let mut all: Vec<i64> = granted.iter().flatten().copied().collect();
        all.sort_unstable();
        let mut q = VecDeque::new();
        let mut most = 0;
        for s in all {
            q.push_back(s);
            while q.front().is_some_and(|f| s - f >= window) {
                q.pop_front();
            }
            most = most.max(q.len());
        }
        most
    }

    #[test]
    fn charges_split_the_rate_by_weight() {
        let c = UpstreamSpec { rpm: 60, tpm: 1_000_000, burst: 2, weights: vec![1, 3] }.charges(100);
        assert_eq!(c.req_inc, vec![4_000_000, 1_333_334], "a quarter share is one every four seconds");
        assert_eq!(c.tok_inc, vec![24_000, 8_000], "100 tokens of 1M tpm, times 4 and 4/3");
        assert_eq!((c.tol, c.horizon), (2_000_000, 0));
    }

    /// Equal demand above the quota: equal shares, the quota used.
    #[test]
    fn equal_demand_gets_equal_shares() {
        let s = spec(600, 5, &[1, 1, 1]);
        let (g, _) = simulate(&s, &[(0, 30), (1, 30), (2, 30)], 60, 5_000_000);
        let n: Vec<usize> = g.iter().map(Vec::len).collect();
        let total: usize = n.iter().sum();
        // 10 a second for 60 s, plus the 5 s of bookings made at the end,
        // plus the burst.
        assert!((645..=662).contains(&total), "{n:?}");
        assert!(n.iter().all(|k| k.abs_diff(total / 3) <= 3), "{n:?}");
    }

    /// Weighted demand above the quota: shares by weight.
    #[test]
    fn weighted_demand_gets_weighted_shares() {
        let s = spec(600, 5, &[1, 3]);
        let (g, _) = simulate(&s, &[(0, 30), (1, 30)], 60, 5_000_000);
        let (a, b) = (g[0].len(), g[1].len());
        assert!((645..=662).contains(&(a + b)), "{a} + {b}");
        assert!((3 * a).abs_diff(b) <= 12, "{a} vs {b}: one to three");
    }

    /// A lone team gets the whole quota (it borrows idle timelines), and
    /// no window ever holds more than rate * window + burst + one per team.
    #[test]
    fn a_lone_team_gets_the_whole_quota_and_no_more() {
        let s = spec(600, 5, &[1, 1, 1, 1]);
        let (g, _) = simulate(&s, &[(2, 50)], 60, 5_000_000);
        // While it asks (60 s), it gets the whole 10 a second; after, only
        // its own timeline's queue drains.
        let during = g[2].iter().filter(|s| **s < 61_000_000).count();
        assert!((598..=612).contains(&during), "{during}");
        for window_s in [1, 2, 5, 10] {
            let most = most_in_window(&g, window_s * 1_000_000);
            let bound = 10 * window_s + 5 + 4;
            assert!(most <= usize::try_from(bound).unwrap(), "{most} in {window_s} s");
        }
    }

    /// Never more than rate * window + burst + teams in any window, under
    /// any mix (here: unequal weights, everyone flooding).
    #[test]
    fn no_window_holds_more_than_the_rate_and_the_burst() {
        let s = spec(1200, 10, &[1, 2, 5]);
        let (g, _) = simulate(&s, &[(0, 50), (1, 50), (2, 50)], 30, 3_000_000);
        for window_ms in [100, 500, 1000, 3000] {
            let most = most_in_window(&g, window_ms * 1000);
            let bound = 20 * window_ms / 1000 + 10 + 3;
            assert!(most <= usize::try_from(bound).unwrap(), "{most} in {window_ms} ms");
        }
    }

    /// A team within its share waits at most one horizon plus its own
    /// interval while another team floods and borrows everything idle.
    #[test]
    fn an_in_share_team_is_not_starved_by_a_borrower() {
        let s = spec(600, 5, &[1, 1]);
        let c = s.charges(1);
        let mut state = UpstreamState::default();
        let mut modest = 0;
        let mut greedy = 0;
        for step in 0..6000i64 {
            let now = 1_000_000 + step * 10_000;
            if matches!(book(&mut state, now, 0, &c, 30_000_000), BookResult::Booked(_)) {
                greedy += 1;
            }
            // Team 1 asks once every 2 s (its share is 5 a second).
            if step % 200 == 0 {
                let BookResult::Booked(b) = book(&mut state, now, 1, &c, 30_000_000) else { panic!("refused") };
                let bound = c.horizon + c.req_inc[1];
                assert!(b.slot - now <= bound, "waited {} us (bound {bound})", b.slot - now);
                modest += 1;
            }
        }
        assert_eq!(modest, 30);
        // Its own 5 a second for 60 s plus its 30 s queue, and most of
        // what the modest team leaves idle.
        assert!(greedy >= 650, "the greedy team borrows the idle share: {greedy}");
    }

    /// A refused booking changes nothing and says the true wait: a booking
    /// with that much patience gets exactly that slot.
    #[test]
    fn a_refusal_changes_nothing_and_its_retry_after_is_true() {
        let s = spec(60, 1, &[1]);
        let c = s.charges(1);
        let mut state = UpstreamState::default();
        for _ in 0..5 {
            assert!(matches!(book(&mut state, 1_000_000, 0, &c, 10_000_000), BookResult::Booked(_)));
        }
        let before = state.clone();
        let BookResult::Refused { slot, .. } = book(&mut state, 1_000_000, 0, &c, 2_000_000) else { panic!() };
        assert_eq!(state, before);
        assert_eq!(slot, 6_000_000, "five booked at one a second: the sixth is at +5 s");
        let BookResult::Booked(b) = book(&mut state, 1_000_000, 0, &c, slot - 1_000_000) else { panic!() };
        assert_eq!(b.slot, slot);
    }

    /// Bookings are served first-come: slots never go backwards in the
    /// order they were booked, within a team.
    #[test]
    fn slots_follow_booking_order() {
        let s = spec(600, 5, &[1, 2]);
        let (g, _) = simulate(&s, &[(0, 40), (1, 40)], 20, 10_000_000);
        for slots in &g {
            assert!(slots.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn a_pause_holds_every_booking() {
        let s = spec(6000, 5, &[1, 1]);
        let c = s.charges(1);
        let mut state = UpstreamState { paused_until: 5_000_000, ..Default::default() };
        assert!(matches!(book(&mut state, 1_000_000, 0, &c, 1_000_000), BookResult::Refused { .. }));
        // 6000 rpm over two teams: one each every 20 ms after the pause, no
        // burst of five.
        let mut slots = Vec::new();
        for k in 0..6 {
            let BookResult::Booked(b) = book(&mut state, 1_000_000, k % 2, &c, 10_000_000) else { panic!() };
            slots.push(b.slot);
        }
        assert_eq!(slots, vec![5_020_000, 5_020_000, 5_040_000, 5_040_000, 5_060_000, 5_060_000]);
    }

    /// A request whose tokens would hold another team's timeline for long
    /// is not borrowed: it books its own team's timeline, and the other
    /// team's next request is not pushed back.
    #[test]
    fn a_huge_request_never_borrows_another_teams_timeline() {
        let s = UpstreamSpec { rpm: 600, tpm: 10_000, burst: 5, weights: vec![1, 1] };
        let mut state = UpstreamState::default();
        // Team 0's own timeline is busy with small requests...
        for _ in 0..4 {
            assert!(matches!(book(&mut state, 1_000_000, 0, &s.charges(10), 10_000_000), BookResult::Booked(_)));
        }
        let mut without = state.clone();
        // ...so a huge one of team 0 would rather borrow team 1's idle one.
        let BookResult::Booked(b) = book(&mut state, 1_000_000, 0, &s.charges(8000), 100_000_000) else { panic!() };
        assert_eq!(b.timeline, 0, "charged to its own team");
        let BookResult::Booked(other) = book(&mut state, 1_000_000, 1, &s.charges(10), 1_000_000) else { panic!() };
        let BookResult::Booked(alone) = book(&mut without, 1_000_000, 1, &s.charges(10), 1_000_000) else { panic!() };
        assert_eq!(other.slot, alone.slot, "team 1 is not held back by the huge request");
    }

    /// A request bigger than the tolerance passes an idle token timeline,
    /// then the next one waits for its tokens.
    #[test]
    fn a_big_request_passes_then_pays() {
        let s = UpstreamSpec { rpm: 600, tpm: 600, burst: 2, weights: vec![1] };
        let c = s.charges(100);
        let mut state = UpstreamState::default();
        let BookResult::Booked(b) = book(&mut state, 1_000_000, 0, &c, 60_000_000) else { panic!() };
        assert_eq!(b.slot, 1_000_000);
        let BookResult::Booked(b) = book(&mut state, 1_000_000, 0, &c, 60_000_000) else { panic!() };
        assert!(b.slot > 9_000_000, "100 tokens at 600/min take 10 s: {}", b.slot);
    }

    /// A give-back moves the timeline back by what was charged, never
    /// below now; a correction charges from now.
    #[test]
    fn adjust_gives_back_and_clamps_at_now() {
        let s = spec(60, 1, &[1]);
        let c = s.charges(1);
        let mut state = UpstreamState::default();
        let BookResult::Booked(a) = book(&mut state, 1_000_000, 0, &c, 10_000_000) else { panic!() };
        let BookResult::Booked(b) = book(&mut state, 1_000_000, 0, &c, 10_000_000) else { panic!() };
        assert_eq!((a.slot, b.slot), (1_000_000, 2_000_000));
        adjust(&mut state, 1_000_000, 0, -b.req_inc, -b.tok_inc);
        let BookResult::Booked(c2) = book(&mut state, 1_000_000, 0, &c, 10_000_000) else { panic!() };
        assert_eq!(c2.slot, 2_000_000, "the slot given back is taken again");
        adjust(&mut state, 50_000_000, 0, -10_000_000, -10_000_000);
        assert_eq!(state.timelines[0], Timeline { req: 50_000_000, tok: 50_000_000 });
    }

    /// At a cut rate, intervals stretch: half the rate, half the permits.
    #[test]
    fn a_cut_rate_stretches_the_intervals() {
        let s = spec(600, 1, &[1]);
        let c = s.charges(1);
        let mut state = UpstreamState::default();
        state.rate.cap_ppm = 500_000;
        let mut n = 0;
        let mut now = 1_000_000;
        while now < 61_000_000 {
            match book(&mut state, now, 0, &c, 0) {
                BookResult::Booked(_) => n += 1,
                BookResult::Refused { slot, .. } => now = slot,
            }
        }
        assert!((299..=302).contains(&n), "{n}");
    }
}
