//! `cohort-serve`: starting cohort's roles, the composition the CLI used
//! to hold (issue 22). `cohort run`, `cohort coordinator` and `cohort
//! worker` parse their arguments and call this crate; tests can call the
//! same functions in process.
//!
//! - [`local`]: a frozen cohort loaded and verified ([`Frozen`]), its
//!   ledger opened and seeded, its artifact store, the coordinator's plan
//!   and the workers' run context and arms, the pre-flight;
//! - [`run_local`] ([`run`]): a cohort run on this machine, coordinator,
//!   workers and judge proxy in one process (`cohort run`), progress told
//!   to a callback;
//! - [`roles`]: `cohort coordinator` and `cohort worker` alone, each with
//!   its operations server and OTLP metrics export
//!   ([`roles::serve_coordinator`], [`roles::serve_worker`]);
//! - [`judge`]: a judge proxy started in this process (the built-in
//!   SIMULATED judge, or a config file's);
//! - [`judge_stage`]: `cohort judge`'s stage opened (judge proxy, pass,
//!   runs, pre-flight, stores), ready for `cohort_worker::judging`;
//! - [`manual`]: the manual arm's stage, `cohort pending` and `cohort
//!   submit` (leases to a person, a submission checked, recorded and
//!   finished as a worker's result is);
//! - [`passes`]: the listing of `cohort passes`;
//! - [`status`]: the text and JSON of `cohort status` and the outcome
//!   table;
//! - [`shutdown_signal`]: the one shutdown signal (Ctrl-C or SIGTERM) of
//!   every command that runs until stopped.
//!
//! Errors are one thiserror enum, [`ServeError`], whose messages are the
//! ones the CLI printed before (its `anyhow` contexts, kept word for word
//! with the cause as `source`).

mod error;
pub mod judge;
pub mod judge_stage;
pub mod local;
pub mod manual;
pub mod passes;
pub mod rebuild;
pub mod roles;
pub mod run;
mod signal;
pub mod status;

pub use error::ServeError;
pub use local::Frozen;
pub use run::{LocalConfig, LocalEvent, LocalOutcome, run_local};
pub use signal::shutdown_signal;
