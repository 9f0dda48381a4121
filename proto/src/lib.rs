//! The wire contracts of cohort, generated from `proto/cohort/v1/*.proto`.
//!
//! These are wire types only. Each crate that speaks gRPC converts them to
//! its domain types in one module of its own, turning bad wire input into
//! `InvalidArgument` there (see ARCHITECTURE.md, "Wire and domain types").

/// Version 1 of the contracts: `cohort.v1`.
#[allow(missing_debug_implementations, clippy::all)]
pub mod v1 {
    tonic::include_proto!("cohort.v1");
}

pub mod convert;
