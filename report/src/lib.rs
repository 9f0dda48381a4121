//! The result side of cohort: `cohort report` and `cohort verify` (SPEC
//! section 9). A report is computed from the frozen cohort, the ledger and
//! the run records in the artifact store, and written write-once into a new
//! folder `DIR/reports/<UTC timestamp>/`.
//!
//! The data flow: [`gather`] reads every planned run (ledger row, attempts,
//! record) into a [`model::RunView`] and streams claims and traces to
//! their files; [`compute::summarise`] turns the runs into the numbers
//! ([`model::Summary`], with `cohort_core::stats` for the intervals); the
//! writers render them ([`markdown`], [`html`], [`plots`], [`write`]),
//! every rate as [`rates::RateKind`] defines it;
//! [`verify`] recomputes a written report and names what differs.
//!
//! Architecture Invariant: a report folder is never modified. It is built
//! under a hidden temporary name, every file written with `create_new`,
//! made read-only, and renamed into place only when complete; an existing
//! folder is never written into.

pub mod calibrate;
pub mod calibration_text;
pub mod compute;
pub mod csv;
pub mod gather;
pub mod html;
pub mod labels;
pub mod markdown;
pub mod model;
pub mod plots;
pub mod rates;
pub mod review;
pub mod verify;
pub mod write;

use std::io;

pub use gather::FrozenCohort;
pub use verify::{VerifyOutcome, verify_report};
pub use write::{ReportOptions, ReportWritten, write_report};

/// Why a report could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("ledger: {0}")]
    Ledger(#[from] cohort_ledger::LedgerError),
    #[error(
        "the ledger was seeded from manifest {ledger}, but the cohort's manifest.json is {manifest}: \
         point --ledger/--redis at this cohort's ledger"
    )]
    LedgerMismatch { ledger: String, manifest: String },
    #[error("the record of run {run_id} (artifact {sha256}) cannot be used: {why}")]
    CorruptRecord { run_id: String, sha256: String, why: String },
    #[error("the ledger and the frozen cohort disagree: {0}")]
    Inconsistent(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{path} already exists: a report folder is written once; run `cohort report` again for a new one")]
    Exists { path: String },
    #[error("{0}")]
    Plot(#[from] plots::PlotError),
    #[error(
        "the report is preliminary, not final: {}; `cohort report` without --final writes it labelled preliminary",
        missing.join("; ")
    )]
    NotFinal { missing: Vec<String> },
    #[error("{path} is not a cohort report: {why}")]
    NotAReport { path: String, why: String },
}

impl ReportError {
    pub(crate) fn io(what: &str, source: io::Error) -> ReportError {
        ReportError::Io { what: what.to_owned(), source }
    }
}
