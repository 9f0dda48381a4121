//! The content-addressed artifact store, re-exported from
//! `cohort-artifacts` (its own crate, so the worker and the report use it
//! without the coordinator): `cohort_coordinator::ArtifactStore` and
//! `cohort_coordinator::artifacts::ArtifactStore` keep working.

pub use cohort_artifacts::store::{ArtifactStore, Backend, LocalBackend};
