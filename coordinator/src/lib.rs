//! The cohort coordinator. So far it owns freezing a cohort directory
//! ([`freeze`]) and the content-addressed artifact store ([`artifacts`])
//! where frozen files and, later, run artifacts are kept by SHA-256.
//!
//! The pure rules (validation, the order, the manifest) live in
//! `cohort-core`; this crate does the file I/O around them.

pub mod artifacts;
pub mod clock;
pub mod convert;
pub mod freeze;
pub mod metrics;
pub mod service;

/// The ledger is a crate of its own (`cohort-ledger`); this path stays for
/// the role code that names it through the coordinator.
pub use cohort_ledger as ledger;
pub use artifacts::ArtifactStore;
pub use freeze::{FreezeError, FreezeOptions, FreezeReport, freeze};

/// The folder inside a cohort directory that holds its state and results
/// (the embedded ledger, the artifact store, reports) by default; defined
/// in `cohort-artifacts`, whose store and spool live in it.
pub use cohort_artifacts::STATE_DIR;
