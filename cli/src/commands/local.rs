//! What the cluster commands share: the store and scoring flags, turned
//! into `cohort_serve`'s plain configs, and thin adapters over
//! `cohort_serve::local` (which loads a cohort, opens and seeds its ledger
//! and builds the coordinator's and workers' configs) for the commands
//! that hold the flags.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cohort_artifacts::{ArtifactStore, ArtifactsUrl};
use cohort_ledger::Ledger;
use cohort_serve::local::{ScoringConfig, StoreConfig};
use cohort_worker::preflight::Scope;

pub use cohort_serve::local::{load, lost_ledger, seed};
pub use cohort_serve::{Frozen, shutdown_signal};

/// Where a cohort's state lives.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Use the Redis ledger at this URL instead of the embedded store:
    /// redis://HOST:PORT/ for one server, redis+cluster://HOST:PORT,HOST:PORT
    /// for a Redis Cluster.
    #[arg(long, env = "COHORT_REDIS_URL")]
    pub redis: Option<String>,
    /// The embedded ledger file (default: DIR/.cohort/ledger.sqlite).
    #[arg(long, conflicts_with = "redis")]
    pub ledger: Option<PathBuf>,
    /// The artifact store: file:///absolute/path, or s3://bucket/prefix
    /// for an S3-compatible bucket (endpoint, region and credentials from
    /// AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    /// or ~/.aws/credentials; AWS_ALLOW_HTTP=true for plain HTTP). Default:
    /// DIR/.cohort/artifacts.
    #[arg(long, value_name = "URL", value_parser = ArtifactsUrl::parse)]
    pub artifacts: Option<ArtifactsUrl>,
    /// The largest blob an s3:// store takes, in MiB: a bigger one is
    /// refused before it is sent.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_MAX_MIB, value_parser = clap::value_parser!(u64).range(1..=5120))]
    pub artifacts_max_mib: u64,
}

/// `--artifacts-max-mib` by default: `cohort_artifacts::s3::DEFAULT_MAX_BLOB_BYTES`.
const DEFAULT_MAX_MIB: u64 = cohort_artifacts::s3::DEFAULT_MAX_BLOB_BYTES / (1024 * 1024);

impl StoreArgs {
    /// The flags as `cohort_serve`'s plain config.
    pub fn config(&self) -> StoreConfig {
        StoreConfig {
            redis: self.redis.clone(),
            ledger: self.ledger.clone(),
            artifacts: self.artifacts.clone(),
            artifacts_max_blob_bytes: self.artifacts_max_mib.saturating_mul(1024 * 1024),
        }
    }
}

/// How completed outputs are scored.
#[derive(Debug, Clone, clap::Args)]
pub struct ScoringArgs {
    /// The judge proxy to use (TOML: url, judge, key_env or key_file,
    /// deadline_secs). Without it claims and deterministic metrics are
    /// recorded and support stays unmeasured.
    #[arg(long, value_name = "FILE")]
    pub judge: Option<PathBuf>,
    /// Fetch the cited sources even without a judge (so that `cohort
    /// judge` later reads them as they were at collection time). With a
    /// judge, sources are fetched unless `--no-capture`.
    #[arg(long, conflicts_with = "no_capture")]
    pub capture: bool,
    /// Do not fetch cited sources, even with a judge (claims whose system
    /// returned no snippets stay unjudged, source_unavailable).
    #[arg(long)]
    pub no_capture: bool,
    /// Let source capture reach loopback, private and link-local
    /// addresses. For tests whose servers listen on 127.0.0.1 only: a cited
    /// URL must not reach the worker's own network.
    #[arg(long, hide = true)]
    pub capture_private_addresses: bool,
}

impl ScoringArgs {
    /// The flags as `cohort_serve`'s plain config.
    pub fn config(&self) -> ScoringConfig {
        ScoringConfig {
            judge: self.judge.clone(),
            capture: self.capture,
            no_capture: self.no_capture,
            capture_private_addresses: self.capture_private_addresses,
        }
    }
}

pub async fn open_ledger(frozen: &Frozen, store: &StoreArgs) -> anyhow::Result<Arc<dyn Ledger>> {
    Ok(cohort_serve::local::open_ledger(frozen, &store.config()).await?)
}

/// The artifact store `--artifacts` names (DIR/.cohort/artifacts by
/// default); an s3:// store is read through DIR/.cohort/artifacts-cache.
pub fn artifact_store(frozen: &Frozen, store: &StoreArgs) -> anyhow::Result<ArtifactStore> {
    Ok(cohort_serve::local::artifact_store(frozen, &store.config())?)
}

/// The store flags as arguments, to pass them on to a child `cohort`.
pub fn store_flags(store: &StoreArgs) -> Vec<std::ffi::OsString> {
    let mut flags = Vec::new();
    if let Some(url) = &store.redis {
        flags.extend(["--redis".into(), url.into()]);
    }
    if let Some(path) = &store.ledger {
        flags.extend(["--ledger".into(), path.clone().into_os_string()]);
    }
    if let Some(url) = &store.artifacts {
        flags.extend(["--artifacts".into(), url.to_string().into()]);
    }
    if store.artifacts_max_mib != DEFAULT_MAX_MIB {
        flags.extend(["--artifacts-max-mib".into(), store.artifacts_max_mib.to_string().into()]);
    }
    flags
}

/// The pre-flight ([`cohort_serve::local::preflight`]) over
/// `DIR/cohort.toml`, before anything is written: prints every problem and
/// fails with exit 2 when there is any; otherwise returns the warnings,
/// for the command to print after its own output.
pub fn preflight(
    dir: &Path,
    scope: Scope,
    only: &[String],
    judge: Option<&Path>,
) -> anyhow::Result<Vec<cohort_core::error::Problem>> {
    cohort_serve::local::preflight(dir, scope, only, judge).map_err(super::refuse)
}
