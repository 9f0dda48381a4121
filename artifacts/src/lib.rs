//! Where cohort keeps bytes. The content-addressed [`ArtifactStore`]
//! (frozen files, outputs, run records, captures, by SHA-256) is used by
//! the coordinator, the worker and the report alike, so it is a crate of
//! its own and the worker does not depend on the coordinator for it.
//!
//! - [`store`]: the store and its [`Backend`] trait; [`LocalBackend`] keeps
//!   blobs in a directory.
//! - [`s3`]: [`S3Backend`], blobs in an S3-compatible bucket through
//!   `object_store`, with its own retries, timeouts and upload cap.
//! - [`cache`]: [`CachedBackend`], a local read cache in front of a bucket.
//! - [`location`]: [`ArtifactsUrl`], the one parser of `--artifacts URL`;
//!   [`open`] turns it into a store.
//! - [`spool`]: answers the store could not take, kept on the worker's
//!   disk until it can (a system that answered is never called again
//!   because its answer could not be stored).
//! - [`files`]: write-once files and unique temporary names, the local
//!   primitives the store, the manifest and judging passes are written with.

use std::path::Path;
use std::sync::Arc;

pub mod cache;
pub mod files;
pub mod location;
pub mod s3;
pub mod spool;
pub mod store;

pub use cache::CachedBackend;
pub use location::{ArtifactsUrl, LocationError};
pub use s3::{S3Backend, S3Config, S3Error};
pub use spool::{Kept, Spool};
pub use store::{ArtifactStore, Backend, LocalBackend};

/// The folder inside a cohort directory that holds its state and results
/// (the embedded ledger, the artifact store, the spool, reports) by default.
pub const STATE_DIR: &str = ".cohort";

/// The read cache of a bucket store opened for a cohort:
/// `DIR/.cohort/artifacts-cache` (on the machine that reads, like the spool).
pub const CACHE_DIR: &str = "artifacts-cache";

/// The store `url` names for the cohort in `cohort_dir`: its own
/// `DIR/.cohort/artifacts` when `url` is `None`, a directory for `file://`,
/// a bucket for `s3://` (read through `DIR/.cohort/artifacts-cache`).
pub fn open(url: Option<&ArtifactsUrl>, cohort_dir: &Path, s3: &S3Config) -> Result<ArtifactStore, S3Error> {
    match url {
        None => Ok(ArtifactStore::for_cohort(cohort_dir)),
        Some(ArtifactsUrl::Local(root)) => Ok(ArtifactStore::local(root)),
        Some(ArtifactsUrl::S3 { bucket, prefix }) => {
            let remote = S3Backend::from_env(bucket, prefix, s3)?;
            let cache = LocalBackend::new(cohort_dir.join(STATE_DIR).join(CACHE_DIR));
            Ok(ArtifactStore::with_backend(Arc::new(CachedBackend::new(remote, cache))))
        }
    }
}
