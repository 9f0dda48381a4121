//! The run lifecycle: one state per planned run, explicit transitions, and
//! absorbing final states (STYLE rule 4).
//!
//! ```text
//!            lease                     finish(outcome)
//!  Pending ─────────▶ Leased ──────────────────────────▶ Final(outcome)
//!     ▲  ▲              │ attempt failed, retry allowed        ▲
//!     │  └──────────────┤ lease expired (worker_lost), allowed  │
//!     │    release      │ ... retry not allowed ────────────────┘ (unavailable)
//!     └─────────────────┘
//!  Pending ── close(window_closed | arm_paused | aborted) ──▶ Final(not_run)
//! ```
//!
//! Both ledgers implement exactly these rules: the embedded store calls
//! [`RetryPolicy::decide`] and [`final_outcome_of`] directly, the Redis Lua
//! scripts mirror them, and one conformance suite holds both to them.

use serde::{Deserialize, Serialize};

use crate::config::RetryPolicy;
use crate::taxonomy::{AttemptClass, Outcome};

/// Why a run that never started ended as `not_run`, or why a started run
/// could not be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The collection window closed before the run started.
    WindowClosed,
    /// The run's arm was paused (version change) until the window closed.
    ArmPaused,
    /// An operator aborted the cohort.
    Aborted,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::WindowClosed => "window_closed",
            CloseReason::ArmPaused => "arm_paused",
            CloseReason::Aborted => "aborted",
        }
    }
}

/// The outcome a pending run gets when the cohort closes for `reason`.
///
/// A run never attempted is `not_run`; a run that was attempted and is
/// waiting for a retry of an outage is `unavailable`: the outage persisted
/// until no further attempt was possible.
pub fn closed_outcome(attempts: u32) -> Outcome {
    if attempts == 0 { Outcome::NotRun } else { Outcome::Unavailable }
}

/// Whether an attempt of `class` at a system under test may be retried.
/// Only infrastructure outages in which nothing was obtained qualify (SPEC
/// section 3): a timeout of the whole run is final (`timed_out`), quota
/// exhaustion does not heal by waiting, and any answer is final.
pub fn run_retryable(class: AttemptClass) -> bool {
    matches!(
        class,
        AttemptClass::RateLimited
            | AttemptClass::ServerError
            | AttemptClass::EmptyContent
            | AttemptClass::ConnectionError
            | AttemptClass::WorkerLost
    )
}

/// The final outcome of a run whose last attempt had `class` and was not
/// (or could not be) retried.
pub fn final_outcome_of(class: AttemptClass) -> Outcome {
    match class {
        AttemptClass::Ok => Outcome::Completed,
        AttemptClass::Refused => Outcome::Refused,
        AttemptClass::ClientError | AttemptClass::Malformed => Outcome::Failed,
        AttemptClass::Timeout => Outcome::TimedOut,
        AttemptClass::RateLimited
        | AttemptClass::QuotaExhausted
        | AttemptClass::ServerError
        | AttemptClass::EmptyContent
        | AttemptClass::ConnectionError
        | AttemptClass::WorkerLost => Outcome::Unavailable,
    }
}

/// What happens to a run after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Back to the queue, not to be leased before this instant (ms).
    RetryAt { not_before_ms: i64 },
    /// Final, with this outcome.
    Final(Outcome),
}

impl RetryPolicy {
    /// The backoff before attempt `attempts + 1`, after `attempts` failed:
    /// `initial * 2^(attempts-1)`, capped at `max_backoff_ms`. Deterministic
    /// (no jitter) so that both ledgers compute the same instant.
    pub fn backoff_ms(&self, attempts: u32) -> u64 {
        let doublings = attempts.saturating_sub(1).min(32);
        self.initial_backoff_ms.saturating_mul(1u64 << doublings).min(self.max_backoff_ms)
    }

    /// The decision after attempt number `attempts` (1-based) failed with
    /// `class` at `now_ms`, for a run first started at `first_started_ms`.
    pub fn decide(&self, class: AttemptClass, attempts: u32, first_started_ms: i64, now_ms: i64) -> RetryDecision {
        let within_time = now_ms.saturating_sub(first_started_ms) < (self.max_total_secs as i64).saturating_mul(1000);
        if run_retryable(class) && attempts < self.max_attempts && within_time {
            RetryDecision::RetryAt { not_before_ms: now_ms.saturating_add(self.backoff_ms(attempts) as i64) }
        } else {
            RetryDecision::Final(final_outcome_of(class))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { max_attempts: 3, initial_backoff_ms: 100, max_backoff_ms: 250, max_total_secs: 10 }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = policy();
        assert_eq!((p.backoff_ms(1), p.backoff_ms(2), p.backoff_ms(3), p.backoff_ms(60)), (100, 200, 250, 250));
    }

    #[test]
    fn outages_retry_until_attempts_or_time_run_out() {
        let p = policy();
        assert_eq!(p.decide(AttemptClass::ServerError, 1, 0, 1000), RetryDecision::RetryAt { not_before_ms: 1100 });
        assert_eq!(p.decide(AttemptClass::ServerError, 3, 0, 1000), RetryDecision::Final(Outcome::Unavailable));
        assert_eq!(p.decide(AttemptClass::WorkerLost, 1, 0, 10_000), RetryDecision::Final(Outcome::Unavailable));
    }

    #[test]
    fn answers_and_non_outages_are_final_at_once() {
        let p = policy();
        let cases = [
            (AttemptClass::Ok, Outcome::Completed),
            (AttemptClass::Refused, Outcome::Refused),
            (AttemptClass::ClientError, Outcome::Failed),
            (AttemptClass::Malformed, Outcome::Failed),
            (AttemptClass::Timeout, Outcome::TimedOut),
            (AttemptClass::QuotaExhausted, Outcome::Unavailable),
        ];
        for (class, outcome) in cases {
            assert_eq!(p.decide(class, 1, 0, 0), RetryDecision::Final(outcome), "{class}");
        }
    }

    #[test]
    fn closing_distinguishes_never_started_from_waiting_for_retry() {
        assert_eq!(closed_outcome(0), Outcome::NotRun);
        assert_eq!(closed_outcome(2), Outcome::Unavailable);
    }
}
