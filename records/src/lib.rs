//! The records of a cohort, as they are archived: the run record
//! (`record`, documented field by field in docs/records.md), what scoring
//! adds to it (`score`), the fetched sources (`capture`), and the judging
//! passes (`passes`: `PassStore`, the one merge rule `merge_claims`). Plain
//! data and the files they live in: the worker writes them, the result side
//! (`cohort-report`) reads them, and neither needs the other for it.

use serde::{Deserialize, Serialize};

/// One turn of the conversation with the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// `user` or `system_under_test`.
    pub role: String,
    pub text: String,
}

/// Token usage the provider reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

pub mod capture;
pub mod passes;
pub mod record;
pub mod score;
