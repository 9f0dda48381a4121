//! The worker's one conversion between the coordinator's wire messages and
//! its domain types: a lease becomes a [`RunLease`] (its earlier attempts
//! as [`RecordedAttempt`]s), and an [`Attempt`] goes back as `pb::Attempt`.
//! The lease loop (`lib.rs`) speaks gRPC; everything it hands the run
//! (`execute`, `record`) is plain data.

use cohort_core::taxonomy::AttemptClass;
use cohort_proto::convert::{class_from_pb, class_to_pb};
use cohort_proto::v1 as pb;

use crate::record::RecordedAttempt;

/// A run leased to this worker (or to a person, for a manual arm).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunLease {
    pub run_id: String,
    pub question_id: String,
    pub arm_id: String,
    pub repeat: u32,
    /// This attempt's number, 1-based.
    pub attempt: u32,
    /// The fencing token every report of the lease carries.
    pub fencing_token: u64,
    /// The exact prompt (the question and the shared suffix).
    pub prompt: String,
    /// The suffix, the only reply to a clarifying question.
    pub suffix: String,
    /// When the lease ends (Unix ms).
    pub deadline_ms: i64,
    /// The run's earlier attempts, as the ledger has them.
    pub previous_attempts: Vec<RecordedAttempt>,
    /// The coordinator could not read the earlier attempts.
    pub previous_attempts_unavailable: bool,
    /// The W3C traceparent of the coordinator's lease span.
    pub traceparent: String,
}

impl RunLease {
    pub fn from_pb(lease: &pb::Lease) -> RunLease {
        RunLease {
            run_id: lease.run_id.clone(),
            question_id: lease.question_id.clone(),
            arm_id: lease.arm_id.clone(),
            repeat: lease.repeat,
            attempt: lease.attempt,
            fencing_token: lease.fencing_token,
            prompt: lease.prompt.clone(),
            suffix: lease.suffix.clone(),
            deadline_ms: lease.deadline_unix_ms,
            previous_attempts: lease.previous_attempts.iter().map(from_previous).collect(),
            previous_attempts_unavailable: lease.previous_attempts_unavailable,
            traceparent: lease.traceparent.clone(),
        }
    }

    /// The lease as the coordinator's reports name it.
    pub fn lease_ref(&self) -> pb::LeaseRef {
        pb::LeaseRef { run_id: self.run_id.clone(), fencing_token: self.fencing_token }
    }
}

/// One attempt as this worker made it: what the run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub class: AttemptClass,
    /// The HTTP status of the answer; 0 when there was none.
    pub http_status: u16,
    /// A short, secret-free description.
    pub detail: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// The label the system reported (`None`: none).
    pub observed_version: Option<String>,
    /// How long the provider asked to wait (`Retry-After`).
    pub retry_after_ms: Option<u64>,
}

impl Attempt {
    pub fn to_pb(&self) -> pb::Attempt {
        pb::Attempt {
            class: class_to_pb(self.class) as i32,
            http_status: u32::from(self.http_status),
            detail: self.detail.clone(),
            started_unix_ms: self.started_ms,
            ended_unix_ms: self.ended_ms,
            observed_version: self.observed_version.clone().unwrap_or_default(),
            retry_after_ms: self.retry_after_ms.unwrap_or(0),
            // The lease's number: set by the report that sends it (lib.rs `send_report`).
            number: 0,
        }
    }

    /// The attempt as the run record keeps it, number `attempt`, made by
    /// `worker`.
    pub fn recorded(&self, attempt: u32, worker: &str) -> RecordedAttempt {
        RecordedAttempt::new(
            attempt,
            self.class.to_string(),
            u32::from(self.http_status),
            &self.detail,
            (self.started_ms, self.ended_ms),
            worker,
            self.observed_version.as_deref().unwrap_or_default(),
        )
    }
}

/// A wire attempt class as the record names it: a class this version does
/// not know is recorded as such, not dropped (the attempt happened).
fn class_name(class: i32) -> String {
    class_from_pb(class).map_or_else(|_| format!("unknown class {class}"), |c| c.to_string())
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
