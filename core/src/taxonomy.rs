//! The outcome taxonomy of SPEC section 4: one final [`Outcome`] per planned
//! run, and an [`AttemptClass`] for every provider attempt.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The one final outcome of a planned run. Every outcome stays in the
/// denominators: a failed run is never dropped from the accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// An output was obtained (it may contain zero claims).
    Completed,
    /// The system declined, or a safety filter blocked it.
    Refused,
    /// The system answered with an error or unusable output.
    Failed,
    /// No complete output before the per-run deadline.
    TimedOut,
    /// An outage or quota exhaustion persisted through the retry policy.
    Unavailable,
    /// Never started: window closed, arm paused until close, cohort aborted.
    NotRun,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Completed,
        Outcome::Refused,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Unavailable,
        Outcome::NotRun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Unavailable => "unavailable",
            Outcome::NotRun => "not_run",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of one attempt at a provider (system under test or judge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptClass {
    Ok,
    /// HTTP 429, with or without Retry-After.
    RateLimited,
    /// Insufficient quota or HTTP 402.
    QuotaExhausted,
    /// HTTP 5xx.
    ServerError,
    /// A 200 or 502 with no content ("Provider returned empty content").
    EmptyContent,
    Timeout,
    ConnectionError,
    /// HTTP 4xx other than 429 and 402.
    ClientError,
    /// A body that could not be parsed.
    Malformed,
    Refused,
    /// The worker holding the lease was lost mid-run.
    WorkerLost,
    /// HTTP 401/403 from a system under test: our configuration (a wrong or
    /// expired key), not the product's answer. It pauses the arm and sends
    /// the run back to its queue without using up its retry budget, so a
    /// mistyped key never burns an arm's runs.
    AuthError,
}

impl AttemptClass {
    pub const ALL: [AttemptClass; 12] = [
        AttemptClass::Ok,
        AttemptClass::RateLimited,
        AttemptClass::QuotaExhausted,
        AttemptClass::ServerError,
        AttemptClass::EmptyContent,
        AttemptClass::Timeout,
        AttemptClass::ConnectionError,
        AttemptClass::ClientError,
        AttemptClass::Malformed,
        AttemptClass::Refused,
        AttemptClass::WorkerLost,
        AttemptClass::AuthError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptClass::Ok => "ok",
            AttemptClass::RateLimited => "rate_limited",
            AttemptClass::QuotaExhausted => "quota_exhausted",
            AttemptClass::ServerError => "server_error",
            AttemptClass::EmptyContent => "empty_content",
            AttemptClass::Timeout => "timeout",
            AttemptClass::ConnectionError => "connection_error",
            AttemptClass::ClientError => "client_error",
            AttemptClass::Malformed => "malformed",
            AttemptClass::Refused => "refused",
            AttemptClass::WorkerLost => "worker_lost",
            AttemptClass::AuthError => "auth_error",
        }
    }
}

impl fmt::Display for AttemptClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_serde_and_spec() {
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("\"{o}\""));
        }
        for c in AttemptClass::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
    }
}
