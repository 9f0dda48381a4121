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
//!  Leased ── attempt auth_error ──▶ Pending (at its place, no backoff,
//!            attempt excused) + arm paused
//! ```
//!
//! An `auth_error` (401/403 from a system under test) is our configuration,
//! not the product's answer: the attempt is recorded, but it is *excused*:
//! it does not count against the retry budget ([`RetryPolicy::decide`] and
//! [`closed_outcome`] take the counted attempts, the others), the run goes
//! back to its queue at once, and the arm is paused with a reason that says
//! how to go on ([`auth_pause_reason`]).
//!
//! A provider's `Retry-After` on an attempt sets that run's earliest next
//! attempt (`now + max(backoff, retry_after)`) and holds the whole arm
//! until `now + retry_after` ([`arm_hold_until`]): the provider asked
//! everyone to wait, not just this run.
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

/// The outcome a pending run gets when the cohort closes, given its
/// counted attempts (excused `auth_error` attempts left out).
///
/// A run never attempted is `not_run`; a run that was attempted and is
/// waiting for a retry of an outage is `unavailable`: the outage persisted
/// until no further attempt was possible. A run whose only attempts were
/// refused for our credentials never reached the product: `not_run`.
pub fn closed_outcome(counted_attempts: u32) -> Outcome {
    if counted_attempts == 0 { Outcome::NotRun } else { Outcome::Unavailable }
}

/// Whether an attempt of `class` is excused: recorded, but not counted
/// against the retry budget (it failed on our configuration).
pub fn excused(class: AttemptClass) -> bool {
    class == AttemptClass::AuthError
}

/// The reason an `auth_error` attempt pauses `arm` with: what happened and
/// what to do. `detail` is the attempt's secret-free detail (a leading
/// `HTTP {status}: ` is not repeated). The Redis scripts build the same
/// text (`common.lua`), and the conformance suite compares them.
pub fn auth_pause_reason(arm: &str, http_status: u16, detail: &str) -> String {
    let what = if http_status > 0 { format!("HTTP {http_status}") } else { "an authentication failure".to_owned() };
    let prefix = format!("HTTP {http_status}: ");
    let detail = detail.strip_prefix(&prefix).unwrap_or(detail);
    let detail = if detail.is_empty() { String::new() } else { format!(" ({detail})") };
    format!(
        "auth_error: {what} from the system under test{detail}; fix the key, then run \
         `cohort resume DIR --arm {arm} --ack \"key fixed\"`"
    )
}

/// Until when an arm is held for everyone after an attempt that carried a
/// `Retry-After` of `retry_after_ms` at `now_ms`; `None` without one.
pub fn arm_hold_until(now_ms: i64, retry_after_ms: Option<u64>) -> Option<i64> {
    let ms = retry_after_ms.filter(|ms| *ms > 0)?;
    Some(now_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)))
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
/// (or could not be) retried. An `auth_error` never ends a run by itself
/// (the arm is paused and the run waits); it maps to `unavailable` only so
/// that the function is total.
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
        | AttemptClass::WorkerLost
        | AttemptClass::AuthError => Outcome::Unavailable,
    }
}

/// What happens to a run after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Back to the queue, not to be leased before this instant (ms).
    RetryAt { not_before_ms: i64 },
    /// Final, with this outcome.
    Final(Outcome),
    /// Our configuration failed (`auth_error`): pause the arm with
    /// [`auth_pause_reason`] and put the run back in its queue at its
    /// place, at once, the attempt excused. (If the cohort has closed, the
    /// run gets its [`closed_outcome`] instead.)
    PauseArm,
}

impl RetryPolicy {
    /// The backoff before attempt `attempts + 1`, after `attempts` failed:
    /// `initial * 2^(attempts-1)`, capped at `max_backoff_ms`. Deterministic
    /// (no jitter) so that both ledgers compute the same instant.
    pub fn backoff_ms(&self, attempts: u32) -> u64 {
        let doublings = attempts.saturating_sub(1).min(32);
        self.initial_backoff_ms.saturating_mul(1u64 << doublings).min(self.max_backoff_ms)
    }

    /// The decision after counted attempt number `attempts` (1-based,
    /// excused attempts left out) failed with `class` at `now_ms`, for a run
    /// first started at `first_started_ms`. A retry waits the policy's
    /// backoff or the provider's `Retry-After` (`retry_after_ms`), whichever
    /// is longer.
    pub fn decide(
        &self,
        class: AttemptClass,
        attempts: u32,
        first_started_ms: i64,
        now_ms: i64,
        retry_after_ms: Option<u64>,
    ) -> RetryDecision {
        if excused(class) {
            return RetryDecision::PauseArm;
        }
        let within_time = now_ms.saturating_sub(first_started_ms) < (self.max_total_secs as i64).saturating_mul(1000);
        if run_retryable(class) && attempts < self.max_attempts && within_time {
            let wait = self.backoff_ms(attempts).max(retry_after_ms.unwrap_or(0));
            RetryDecision::RetryAt { not_before_ms: now_ms.saturating_add(i64::try_from(wait).unwrap_or(i64::MAX)) }
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
        assert_eq!(
            p.decide(AttemptClass::ServerError, 1, 0, 1000, None),
            RetryDecision::RetryAt { not_before_ms: 1100 }
        );
        assert_eq!(p.decide(AttemptClass::ServerError, 3, 0, 1000, None), RetryDecision::Final(Outcome::Unavailable));
        assert_eq!(p.decide(AttemptClass::WorkerLost, 1, 0, 10_000, None), RetryDecision::Final(Outcome::Unavailable));
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
            assert_eq!(p.decide(class, 1, 0, 0, None), RetryDecision::Final(outcome), "{class}");
        }
    }

    /// A Retry-After longer than the backoff sets the next attempt; a
    /// shorter one does not shorten the backoff.
    #[test]
    fn retry_after_stretches_the_backoff() {
        let p = policy();
        let d = p.decide(AttemptClass::RateLimited, 1, 0, 1000, Some(2000));
        assert_eq!(d, RetryDecision::RetryAt { not_before_ms: 3000 });
        let d = p.decide(AttemptClass::RateLimited, 1, 0, 1000, Some(10));
        assert_eq!(d, RetryDecision::RetryAt { not_before_ms: 1100 });
        assert_eq!(arm_hold_until(1000, Some(2000)), Some(3000));
        assert_eq!((arm_hold_until(1000, Some(0)), arm_hold_until(1000, None)), (None, None));
    }

    /// An auth error pauses the arm whatever the budget says, and the
    /// reason names the status, the provider's message and the way on.
    #[test]
    fn auth_errors_pause_the_arm() {
        let p = policy();
        assert_eq!(p.decide(AttemptClass::AuthError, 1, 0, 0, None), RetryDecision::PauseArm);
        assert_eq!(p.decide(AttemptClass::AuthError, 99, 0, 1_000_000, None), RetryDecision::PauseArm);
        assert!(excused(AttemptClass::AuthError) && !excused(AttemptClass::ServerError));
        assert_eq!(
            auth_pause_reason("pplx", 401, "HTTP 401: Incorrect API key provided"),
            "auth_error: HTTP 401 from the system under test (Incorrect API key provided); \
             fix the key, then run `cohort resume DIR --arm pplx --ack \"key fixed\"`"
        );
        assert_eq!(
            auth_pause_reason("a", 0, ""),
            "auth_error: an authentication failure from the system under test; \
             fix the key, then run `cohort resume DIR --arm a --ack \"key fixed\"`"
        );
    }

    #[test]
    fn closing_distinguishes_never_started_from_waiting_for_retry() {
        assert_eq!(closed_outcome(0), Outcome::NotRun);
        assert_eq!(closed_outcome(2), Outcome::Unavailable);
    }
}
