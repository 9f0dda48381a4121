//! Wire <-> domain conversions for the coordinator's gRPC service, in one
//! place. Bad wire input becomes `InvalidArgument` here, never a panic.

use cohort_proto::convert::{class_from_pb, class_to_pb};
pub use cohort_proto::convert::{outcome_from_pb, outcome_to_pb};
use cohort_proto::v1 as pb;
use tonic::Status;

use cohort_ledger::{AttemptRecord, LeaseRef};

/// The largest free-text field accepted from a worker.
const MAX_TEXT: usize = 4096;

fn bounded(field: &str, s: &str) -> Result<String, Status> {
    if s.len() > MAX_TEXT {
        return Err(Status::invalid_argument(format!("{field} is longer than {MAX_TEXT} bytes")));
    }
    Ok(s.to_owned())
}

pub fn lease_ref_from_pb(l: Option<&pb::LeaseRef>) -> Result<LeaseRef, Status> {
    let l = l.ok_or_else(|| Status::invalid_argument("lease is required"))?;
    if l.run_id.is_empty() || l.fencing_token == 0 {
        return Err(Status::invalid_argument("lease needs a run_id and a fencing_token"));
    }
    Ok(LeaseRef { run_id: bounded("lease.run_id", &l.run_id)?, token: l.fencing_token })
}

pub fn lease_ref_to_pb(l: &LeaseRef) -> pb::LeaseRef {
    pb::LeaseRef { run_id: l.run_id.clone(), fencing_token: l.token }
}

pub fn attempt_from_pb(a: Option<&pb::Attempt>) -> Result<AttemptRecord, Status> {
    let a = a.ok_or_else(|| Status::invalid_argument("attempt is required"))?;
    Ok(AttemptRecord {
        class: class_from_pb(a.class)?,
        http_status: u16::try_from(a.http_status).map_err(|_| Status::invalid_argument("http_status out of range"))?,
        detail: bounded("attempt.detail", &a.detail)?,
        started_ms: a.started_unix_ms,
        ended_ms: a.ended_unix_ms,
        observed_version: version_from_pb(&a.observed_version)?,
        worker: String::new(),
        // The lease's number as the worker's record has it (0: not said).
        attempt: a.number,
        token: 0,
        retry_after_ms: (a.retry_after_ms > 0).then_some(a.retry_after_ms),
    })
}

/// An earlier attempt of a run as a lease carries it (`Lease.previous_attempts`).
pub fn previous_attempt_to_pb(a: &AttemptRecord) -> pb::PreviousAttempt {
    pb::PreviousAttempt {
        attempt: a.attempt,
        class: class_to_pb(a.class) as i32,
        http_status: u32::from(a.http_status),
        detail: a.detail.clone(),
        started_unix_ms: a.started_ms,
        ended_unix_ms: a.ended_ms,
        worker: a.worker.clone(),
        observed_version: a.observed_version.clone().unwrap_or_default(),
    }
}

/// An empty label on the wire means "not disclosed".
pub fn version_from_pb(v: &str) -> Result<Option<String>, Status> {
    Ok(if v.is_empty() { None } else { Some(bounded("observed_version", v)?) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the longest version label `cohort.toml` accepts
    /// (`pinned_version`, `accepted_versions`) is one a worker may report,
    /// and a longer one is not: a frozen label can always be observed.
    #[test]
    fn the_longest_frozen_version_label_is_accepted_on_the_wire() {
        let longest = "v".repeat(cohort_core::config::MAX_VERSION_LABEL_BYTES);
        assert_eq!(version_from_pb(&longest).unwrap().as_deref(), Some(longest.as_str()));
        let code = version_from_pb(&format!("{longest}v")).unwrap_err().code();
        assert_eq!(code, tonic::Code::InvalidArgument);
    }

    #[test]
    fn bad_leases_are_invalid_arguments() {
        assert_eq!(lease_ref_from_pb(None).unwrap_err().code(), tonic::Code::InvalidArgument);
        let zero = pb::LeaseRef { run_id: "a:b:1".into(), fencing_token: 0 };
        assert_eq!(lease_ref_from_pb(Some(&zero)).unwrap_err().code(), tonic::Code::InvalidArgument);
    }
}
