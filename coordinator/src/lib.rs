//! The cohort coordinator: freezing a cohort directory ([`freeze`]), the
//! gRPC `Coordinator` service and its reconcile loop ([`service`]) over a
//! ledger (`cohort-ledger`), the conversions of its wire types
//! ([`convert`]) and its metrics. The artifact store, the clock and the
//! ledger are crates of their own, named directly by their users.
//!
//! The pure rules (validation, the order, the manifest) live in
//! `cohort-core`; this crate does the file I/O around them.

pub mod convert;
pub mod freeze;
pub mod metrics;
pub mod service;

pub use freeze::{FreezeError, FreezeOptions, FreezeReport, freeze};
