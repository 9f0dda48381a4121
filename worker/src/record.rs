//! The run record's attempts from the wire: the one place the worker turns
//! the coordinator's attempt messages into `RecordedAttempt`s (the record
//! itself is plain data, in `cohort-records`).

use cohort_proto::convert::class_from_pb;
use cohort_proto::v1 as pb;

pub use cohort_records::record::*;

/// A wire attempt class as the record names it: a class this version does
/// not know is recorded as such, not dropped (the attempt happened).
fn class_name(class: i32) -> String {
    class_from_pb(class).map_or_else(|_| format!("unknown class {class}"), |c| c.to_string())
}

/// An attempt as it went (or goes) on the wire, made by `worker`.
pub fn from_wire(attempt: u32, a: &pb::Attempt, worker: &str) -> RecordedAttempt {
    RecordedAttempt::new(
        attempt,
        class_name(a.class),
        a.http_status,
        &a.detail,
        (a.started_unix_ms, a.ended_unix_ms),
        worker,
        &a.observed_version,
    )
}

/// An earlier attempt as the coordinator sent it with the lease.
pub fn from_previous(a: &pb::PreviousAttempt) -> RecordedAttempt {
    RecordedAttempt::new(
        a.attempt,
        class_name(a.class),
        a.http_status,
        &a.detail,
        (a.started_unix_ms, a.ended_unix_ms),
        &a.worker,
        &a.observed_version,
    )
}

/// Every attempt of the run: the earlier ones the lease carries, then
/// `last` (the attempt of this record). `(attempts, complete)`: complete is
/// false when the coordinator said it could not read the earlier ones, or
/// when their numbers do not run 1, 2, ... up to `last` (an attempt is
/// missing from what the ledger had).
pub fn attempts_of(lease: &pb::Lease, last: RecordedAttempt) -> (Vec<RecordedAttempt>, bool) {
    let mut attempts: Vec<RecordedAttempt> =
        lease.previous_attempts.iter().filter(|a| a.attempt < last.attempt).map(from_previous).collect();
    attempts.sort_by_key(|a| a.attempt);
    attempts.push(last);
    let numbered = attempts.iter().zip(1u32..).all(|(a, n)| a.attempt == n);
    (attempts, numbered && !lease.previous_attempts_unavailable)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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
    /// could read them; an unknown class and status 0 are kept honestly.
    #[test]
    fn attempts_list_every_attempt_in_order() {
        let last_wire = pb::Attempt {
            class: pb::AttemptClass::Ok as i32,
            http_status: 200,
            detail: String::new(),
            started_unix_ms: 5_000,
            ended_unix_ms: 5_432,
            observed_version: "m-2".into(),
            retry_after_ms: 0,
        };
        let lease = pb::Lease {
            attempt: 3,
            previous_attempts: vec![
                previous(2, pb::AttemptClass::WorkerLost, 0),
                previous(1, pb::AttemptClass::ServerError, 503),
            ],
            ..pb::Lease::default()
        };
        let (attempts, complete) = attempts_of(&lease, from_wire(3, &last_wire, "w3"));
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

        let gap = pb::Lease {
            attempt: 3,
            previous_attempts: vec![previous(2, pb::AttemptClass::Timeout, 0)],
            ..lease.clone()
        };
        assert!(!attempts_of(&gap, from_wire(3, &last_wire, "w3")).1, "attempt 1 is missing");
        let unread = pb::Lease { previous_attempts: Vec::new(), previous_attempts_unavailable: true, ..lease };
        let (attempts, complete) = attempts_of(&unread, from_wire(3, &last_wire, "w3"));
        assert_eq!((attempts.len(), complete), (1, false));

        let odd = pb::Attempt { class: 99, http_status: 0, ..last_wire };
        let a = from_wire(1, &odd, "w");
        assert_eq!((a.class.as_str(), a.http_status), ("unknown class 99", None));
    }
}
