//! The run record's attempts: the earlier ones a lease carries and the
//! final one (the record itself is plain data, in `cohort-records`; the
//! wire's attempt messages become `RecordedAttempt`s in [`crate::wire`]).

pub use cohort_records::record::*;

use crate::wire::RunLease;

/// Every attempt of the run: the earlier ones the lease carries, then
/// `last` (the attempt of this record). `(attempts, complete)`: complete is
/// false when the coordinator said it could not read the earlier ones, or
/// when their numbers do not run 1, 2, ... up to `last` (an attempt is
/// missing from what the ledger had).
pub fn attempts_of(lease: &RunLease, last: RecordedAttempt) -> (Vec<RecordedAttempt>, bool) {
    let mut attempts: Vec<RecordedAttempt> =
        lease.previous_attempts.iter().filter(|a| a.attempt < last.attempt).cloned().collect();
    attempts.sort_by_key(|a| a.attempt);
    attempts.push(last);
    let numbered = attempts.iter().zip(1u32..).all(|(a, n)| a.attempt == n);
    (attempts, numbered && !lease.previous_attempts_unavailable)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use cohort_core::taxonomy::AttemptClass;
    use cohort_proto::v1 as pb;

    use super::*;
    use crate::wire::{Attempt, from_previous};

    fn previous(attempt: u32, class: pb::AttemptClass, status: u32) -> pb::PreviousAttempt {
        pb::PreviousAttempt {
            attempt,
            class: class as i32,
            http_status: status,
            detail: format!("attempt {attempt}"),
            started_unix_ms: 1_000 * i64::from(attempt),
            ended_unix_ms: 1_000 * i64::from(attempt) + 250,
            worker: format!("w{attempt}"),
            observed_version: String::new(),
        }
    }

    /// Proves the attempt list: earlier attempts in order, then the final
    /// one; complete only when numbered without gaps and the coordinator
    /// could read them; an unknown class on the wire and status 0 are kept
    /// honestly.
    #[test]
    fn attempts_list_every_attempt_in_order() {
        let last = Attempt {
            class: AttemptClass::Ok,
            http_status: 200,
            detail: String::new(),
            started_ms: 5_000,
            ended_ms: 5_432,
            observed_version: Some("m-2".into()),
            retry_after_ms: None,
        };
        let wire = pb::Lease {
            attempt: 3,
            previous_attempts: vec![
                previous(2, pb::AttemptClass::WorkerLost, 0),
                previous(1, pb::AttemptClass::ServerError, 503),
            ],
            ..pb::Lease::default()
        };
        let lease = RunLease::from_pb(&wire);
        let (attempts, complete) = attempts_of(&lease, last.recorded(3, "w3"));
        assert!(complete);
        let seen: Vec<(u32, &str, Option<u16>, &str)> =
            attempts.iter().map(|a| (a.attempt, a.class.as_str(), a.http_status, a.worker.as_str())).collect();
        assert_eq!(
            seen,
            [(1, "server_error", Some(503), "w1"), (2, "worker_lost", None, "w2"), (3, "ok", Some(200), "w3")]
        );
        assert_eq!(attempts[0].started_at, "1970-01-01T00:00:01.000Z");
        assert_eq!(attempts[0].duration_ms, 250);
        assert_eq!(attempts[0].observed_version, NOT_DISCLOSED);
        assert_eq!((attempts[2].duration_ms, attempts[2].observed_version.as_str()), (432, "m-2"));

        let gap = RunLease::from_pb(&pb::Lease {
            attempt: 3,
            previous_attempts: vec![previous(2, pb::AttemptClass::Timeout, 0)],
            ..wire.clone()
        });
        assert!(!attempts_of(&gap, last.recorded(3, "w3")).1, "attempt 1 is missing");
        let unread = RunLease::from_pb(&pb::Lease {
            previous_attempts: Vec::new(),
            previous_attempts_unavailable: true,
            ..wire
        });
        let (attempts, complete) = attempts_of(&unread, last.recorded(3, "w3"));
        assert_eq!((attempts.len(), complete), (1, false));

        let odd = pb::PreviousAttempt { class: 99, http_status: 0, ..previous(1, pb::AttemptClass::Ok, 0) };
        let a = from_previous(&odd);
        assert_eq!((a.class.as_str(), a.http_status), ("unknown class 99", None));
    }

    /// Proves an attempt goes back on the wire as it was made: every field,
    /// no label as empty, no Retry-After as 0.
    #[test]
    fn attempts_go_on_the_wire_as_made() {
        let a = Attempt {
            class: AttemptClass::RateLimited,
            http_status: 429,
            detail: "slow down".into(),
            started_ms: 1,
            ended_ms: 2,
            observed_version: None,
            retry_after_ms: Some(1_500),
        };
        let wire = a.to_pb();
        assert_eq!(wire.class, pb::AttemptClass::RateLimited as i32);
        assert_eq!((wire.http_status, wire.detail.as_str(), wire.retry_after_ms), (429, "slow down", 1_500));
        assert_eq!((wire.started_unix_ms, wire.ended_unix_ms, wire.observed_version.as_str()), (1, 2, ""));
        let none = Attempt { retry_after_ms: None, ..a }.to_pb();
        assert_eq!(none.retry_after_ms, 0);
    }
}
