//! Where cohort keeps bytes. The content-addressed [`ArtifactStore`]
//! (frozen files, outputs, run records, captures, by SHA-256) is used by
//! the coordinator, the worker and the report alike, so it is a crate of
//! its own and the worker does not depend on the coordinator for it.
//!
//! - [`store`]: the store and its [`Backend`] trait; [`LocalBackend`] keeps
//!   blobs in a directory (a second backend, object storage, plugs in
//!   behind the same trait).
//! - [`spool`]: answers the store could not take, kept on the worker's
//!   disk until it can (a system that answered is never called again
//!   because its answer could not be stored).
//! - [`files`]: write-once files and unique temporary names, the local
//!   primitives the store, the manifest and judging passes are written with.

pub mod files;
pub mod spool;
pub mod store;

pub use spool::{Kept, Spool};
pub use store::{ArtifactStore, Backend, LocalBackend};

/// The folder inside a cohort directory that holds its state and results
/// (the embedded ledger, the artifact store, the spool, reports) by default.
pub const STATE_DIR: &str = ".cohort";
