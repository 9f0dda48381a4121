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
//! Each rule is written once, here: which classes are retried
//! ([`run_retryable`]), which go back as attempts rather than results
//! ([`reported_as_attempt`]), the outcome each final class gives
//! ([`final_outcome_of`]) and which (outcome, class) pairs a final result
//! may carry ([`check_final`]). The embedded store calls them directly; the
//! Redis ledger generates its Lua tables from them when it loads its
//! scripts; one conformance suite holds both ledgers to them.

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

/// Whether a failed attempt of `class` at a system under test may be
/// retried: the one rule of retrying a run (Architecture Invariant; the
/// Redis scripts' `RETRYABLE` table is generated from it). Only
/// infrastructure outages in which nothing was obtained qualify (SPEC
/// section 3): a timeout of the whole run is its deadline, a final
/// `timed_out` with no answer; quota exhaustion does not heal by waiting;
/// an auth error pauses the arm instead; any answer is final.
pub fn run_retryable(class: AttemptClass) -> bool {
    match class {
        AttemptClass::RateLimited
        | AttemptClass::ServerError
        | AttemptClass::EmptyContent
        | AttemptClass::ConnectionError
        | AttemptClass::WorkerLost => true,
        AttemptClass::Ok
        | AttemptClass::QuotaExhausted
        | AttemptClass::Timeout
        | AttemptClass::ClientError
        | AttemptClass::Malformed
        | AttemptClass::Refused
        | AttemptClass::AuthError => false,
    }
}

/// Whether one provider *call* that failed with `class` may be tried again
/// within its caller's deadline (the judge proxy, SPEC section 8): the run
/// rule ([`run_retryable`]) plus `timeout`, because a call's timeout is not
/// the run's deadline (the proxy's own deadline bounds the retries).
pub fn call_retryable(class: AttemptClass) -> bool {
    run_retryable(class) || class == AttemptClass::Timeout
}

/// Whether a worker reports an attempt of `class` to the ledger as an
/// *attempt* (the ledger's retry policy decides: retry, `unavailable`, or
/// pause the arm) rather than as a final result: the retryable outages,
/// quota exhaustion (an outage that ends `unavailable`) and `auth_error`
/// (excused, [`RetryDecision::PauseArm`]). Every other class is an answer
/// (or the run's deadline) and goes as a final result that
/// [`check_final`] accepts.
pub fn reported_as_attempt(class: AttemptClass) -> bool {
    run_retryable(class) || matches!(class, AttemptClass::QuotaExhausted | AttemptClass::AuthError)
}

/// The final outcome of a run whose last attempt had `class` and was not
/// (or could not be) retried. An `auth_error` never ends a run by itself
/// (the arm is paused and the run waits); it maps to `unavailable` only so
/// that the function is total. The Redis scripts' `FINAL_OF` table is
/// generated from it.
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

/// Why a final result's (outcome, attempt class) pair is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// `unavailable` comes only from the retry policy or closing, `not_run`
    /// only from closing: the ledger decides them, no worker reports them.
    #[error("outcome {outcome} is never reported as a result (the ledger gives it), here with class {class}")]
    NotReportable { outcome: Outcome, class: AttemptClass },
    /// An outage, quota or auth class goes to the ledger as an attempt.
    #[error("class {class} is reported as an attempt for the retry policy, not as a final result ({outcome})")]
    AttemptClass { outcome: Outcome, class: AttemptClass },
    /// An answer class with an outcome it does not give.
    #[error("outcome {outcome} does not fit class {class}, which ends a run as {expected}")]
    Mismatch { outcome: Outcome, class: AttemptClass, expected: &'static str },
}

/// Which (outcome, attempt class) pairs a final result may carry: the one
/// table both ledgers enforce on `finish` (the Redis scripts' `FITS` table
/// is generated from it) and the cross-process harness checks records
/// with. `completed` only with `ok`; `refused` with `refused`; `failed`
/// with `client_error`, `malformed`, or `ok` (a worker's verdict on an
/// unusable output or a second request for clarification); `timed_out`
/// with `timeout`; `unavailable` and `not_run` never.
pub fn check_final(outcome: Outcome, class: AttemptClass) -> Result<(), LifecycleError> {
    use AttemptClass as C;
    use Outcome as O;
    match (outcome, class) {
        (O::Completed, C::Ok)
        | (O::Refused, C::Refused)
        | (O::Failed, C::ClientError | C::Malformed | C::Ok)
        | (O::TimedOut, C::Timeout) => Ok(()),
        (O::Unavailable | O::NotRun, _) => Err(LifecycleError::NotReportable { outcome, class }),
        _ if reported_as_attempt(class) => Err(LifecycleError::AttemptClass { outcome, class }),
        _ => {
            let expected = match class {
                C::Ok => "completed or failed",
                _ => final_outcome_of(class).as_str(),
            };
            Err(LifecycleError::Mismatch { outcome, class, expected })
        }
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

    /// The whole table of final results, over every (outcome, class)
    /// pair: exactly these six fit, and each agrees with the other rules
    /// (a fitting class is never reported as an attempt, and its outcome is
    /// the one `final_outcome_of` gives, or `failed` from an `ok` class).
    #[test]
    fn check_final_over_every_pair() {
        use AttemptClass as C;
        use Outcome as O;
        let fitting = [
            (O::Completed, C::Ok),
            (O::Refused, C::Refused),
            (O::Failed, C::ClientError),
            (O::Failed, C::Malformed),
            (O::Failed, C::Ok),
            (O::TimedOut, C::Timeout),
        ];
        let mut refused = 0;
        for outcome in Outcome::ALL {
            for class in AttemptClass::ALL {
                let got = check_final(outcome, class);
                assert_eq!(got.is_ok(), fitting.contains(&(outcome, class)), "({outcome}, {class}): {got:?}");
                match got {
                    Ok(()) => {
                        assert!(!reported_as_attempt(class), "{class}");
                        assert!(final_outcome_of(class) == outcome || class == C::Ok, "({outcome}, {class})");
                    }
                    Err(e) => {
                        refused += 1;
                        let text = e.to_string();
                        assert!(text.contains(outcome.as_str()) && text.contains(class.as_str()), "{text}");
                    }
                }
            }
        }
        assert_eq!(refused, Outcome::ALL.len() * AttemptClass::ALL.len() - fitting.len());
        assert_eq!(
            check_final(O::Completed, C::ServerError).unwrap_err().to_string(),
            "class server_error is reported as an attempt for the retry policy, not as a final result (completed)"
        );
        assert_eq!(
            check_final(O::NotRun, C::Ok).unwrap_err().to_string(),
            "outcome not_run is never reported as a result (the ledger gives it), here with class ok"
        );
        assert_eq!(
            check_final(O::Refused, C::Timeout).unwrap_err().to_string(),
            "outcome refused does not fit class timeout, which ends a run as timed_out"
        );
    }

    /// Every class is either an attempt (the ledger decides) or ends a run
    /// as a result some outcome fits; retryable classes are attempts; the
    /// judge's call rule adds only `timeout` to the run rule.
    #[test]
    fn every_class_is_an_attempt_or_a_result() {
        for class in AttemptClass::ALL {
            let fits_some = Outcome::ALL.iter().any(|o| check_final(*o, class).is_ok());
            assert_ne!(reported_as_attempt(class), fits_some, "{class}");
            assert!(!run_retryable(class) || reported_as_attempt(class), "{class}");
            assert_eq!(call_retryable(class), run_retryable(class) || class == AttemptClass::Timeout, "{class}");
        }
        let attempts: Vec<&str> =
            AttemptClass::ALL.into_iter().filter(|c| reported_as_attempt(*c)).map(AttemptClass::as_str).collect();
        assert_eq!(
            attempts,
            [
                "rate_limited",
                "quota_exhausted",
                "server_error",
                "empty_content",
                "connection_error",
                "worker_lost",
                "auth_error"
            ]
        );
        assert!(!run_retryable(AttemptClass::Timeout), "a run's deadline is final (SPEC section 3)");
    }

    #[test]
    fn closing_distinguishes_never_started_from_waiting_for_retry() {
        assert_eq!(closed_outcome(0), Outcome::NotRun);
        assert_eq!(closed_outcome(2), Outcome::Unavailable);
    }
}
