//! What every role and cluster command starts from: a frozen cohort loaded
//! and verified, its ledger (embedded SQLite under `DIR/.cohort/` by
//! default, or Redis) opened and seeded from the manifest, its artifact
//! store, the plan a coordinator serves, and the run context and arms a
//! worker runs with. Plain values in, no command-line types: the CLI turns
//! its flags into [`StoreConfig`] and [`ScoringConfig`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cohort_artifacts::{ArtifactStore, ArtifactsUrl, S3Config};
use cohort_clock::{SystemClock, now_ms};
use cohort_coordinator::freeze::load_frozen;
use cohort_coordinator::service::ServedPlan;
use cohort_core::ValidatedCohort;
use cohort_core::manifest::Manifest;
use cohort_ledger::redis::RedisLedger;
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger, PlanHeader, SeedOutcome};
use cohort_worker::capture::{CaptureConfig, SourceCapturer};
use cohort_worker::preflight::{self, PreflightError, Scope};
use cohort_worker::score::JudgeEndpoint;
use cohort_worker::{ArmRuntime, RunContext, adapters};

use crate::ServeError;

/// Where a cohort's state lives: the ledger (Redis at `redis`, else the
/// embedded file `ledger` or DIR/.cohort/ledger.sqlite) and the artifact
/// store (`artifacts`, else DIR/.cohort/artifacts).
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// A Redis URL: redis://HOST:PORT/ or redis+cluster://HOST:PORT,...
    pub redis: Option<String>,
    /// The embedded ledger file, when not the default.
    pub ledger: Option<PathBuf>,
    /// The artifact store, when not the cohort's own.
    pub artifacts: Option<ArtifactsUrl>,
    /// The largest blob an s3:// store takes: a bigger one is refused
    /// before it is sent.
    pub artifacts_max_blob_bytes: u64,
}

/// The cohort's own stores: its embedded ledger and its artifact store,
/// with the default blob cap.
impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            redis: None,
            ledger: None,
            artifacts: None,
            artifacts_max_blob_bytes: cohort_artifacts::s3::DEFAULT_MAX_BLOB_BYTES,
        }
    }
}

impl StoreConfig {
    /// The embedded ledger file of the cohort in `dir`: `ledger`, or
    /// DIR/.cohort/ledger.sqlite.
    pub fn sqlite_path(&self, dir: &Path) -> PathBuf {
        self.ledger.clone().unwrap_or_else(|| dir.join(cohort_artifacts::STATE_DIR).join("ledger.sqlite"))
    }
}

/// How completed outputs are scored: the judge file, and whether cited
/// sources are fetched.
#[derive(Debug, Clone, Default)]
pub struct ScoringConfig {
    /// The judge proxy's file (url, judge, key, deadline); without it
    /// support stays unmeasured.
    pub judge: Option<PathBuf>,
    /// Fetch cited sources even without a judge.
    pub capture: bool,
    /// Never fetch cited sources, even with a judge.
    pub no_capture: bool,
    /// Let source capture reach loopback, private and link-local
    /// addresses (tests whose servers listen on 127.0.0.1 only).
    pub capture_private_addresses: bool,
}

impl ScoringConfig {
    /// Whether cited sources are fetched: when asked (`capture`), or when
    /// a judge will read them, unless `no_capture`. Without a judge,
    /// nothing is fetched from the web unasked.
    pub fn captures(&self, judged: bool) -> bool {
        self.capture || (judged && !self.no_capture)
    }

    /// The source capturer for runs judged (`judged`) or not, storing
    /// into `artifacts`; `None` when nothing is to be fetched.
    pub fn capturer(&self, judged: bool, artifacts: &ArtifactStore) -> Result<Option<SourceCapturer>, ServeError> {
        if !self.captures(judged) {
            return Ok(None);
        }
        let config =
            CaptureConfig { allow_private_addresses: self.capture_private_addresses, ..CaptureConfig::default() };
        Ok(Some(SourceCapturer::new(config, artifacts.clone()).map_err(ServeError::Capture)?))
    }
}

/// A frozen cohort, loaded and verified.
#[derive(Debug)]
pub struct Frozen {
    pub dir: PathBuf,
    pub cohort: ValidatedCohort,
    pub manifest: Manifest,
    pub manifest_sha256: String,
}

/// Loads and verifies the frozen cohort in `dir`.
pub fn load(dir: &Path) -> Result<Frozen, ServeError> {
    let (cohort, manifest, manifest_sha256) = load_frozen(dir)?;
    Ok(Frozen { dir: dir.to_owned(), cohort, manifest, manifest_sha256 })
}

/// The ledger of the frozen cohort, embedded or Redis.
pub async fn open_ledger(frozen: &Frozen, store: &StoreConfig) -> Result<Arc<dyn Ledger>, ServeError> {
    open_ledger_for(&frozen.dir, &frozen.manifest.cohort, store).await
}

/// The ledger of cohort `cohort` in `dir`, embedded or Redis.
pub async fn open_ledger_for(dir: &Path, cohort: &str, store: &StoreConfig) -> Result<Arc<dyn Ledger>, ServeError> {
    if let Some(url) = &store.redis {
        let ledger = RedisLedger::connect(url, cohort)
            .await
            .map_err(|source| ServeError::RedisLedger { url: redact_url(url), source })?;
        return Ok(Arc::new(ledger));
    }
    let path = store.sqlite_path(dir);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| ServeError::CreateDir { path: parent.to_owned(), source })?;
    }
    let ledger = SqliteLedger::open(&path).map_err(|source| ServeError::SqliteLedger { path: path.clone(), source })?;
    Ok(Arc::new(ledger))
}

/// A URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// The artifact store `store.artifacts` names (DIR/.cohort/artifacts by
/// default); an s3:// store is read through DIR/.cohort/artifacts-cache.
pub fn artifact_store(frozen: &Frozen, store: &StoreConfig) -> Result<ArtifactStore, ServeError> {
    let s3 = S3Config { max_blob_bytes: store.artifacts_max_blob_bytes, ..S3Config::default() };
    cohort_artifacts::open(store.artifacts.as_ref(), &frozen.dir, &s3).map_err(|source| {
        let url = store.artifacts.as_ref().map_or_else(|| "the cohort's own store".to_owned(), ToString::to_string);
        ServeError::ArtifactStore { url, source }
    })
}

/// Seeds the ledger from the manifest (idempotent), unless the ledger lost
/// the cohort: an empty ledger for a cohort that evidence says was seeded
/// before (its seed marker, [`SEED_MARKER`]; run records of its manifest;
/// the workers' journals) is refused ([`ServeError::LedgerLost`]), because
/// seeding it again would reopen the collection window and run every run
/// again, calling the products a second time for runs that have records.
/// The first seeding writes the marker.
pub async fn seed(ledger: &dyn Ledger, frozen: &Frozen) -> Result<SeedOutcome, ServeError> {
    if let Err(cohort_ledger::LedgerError::NotSeeded) = ledger.status().await
        && let Some(lost) = lost_ledger(frozen)
    {
        return Err(lost);
    }
    let header = PlanHeader::for_cohort(&frozen.cohort.config, &frozen.manifest_sha256);
    let questions: Vec<(String, String)> =
        frozen.cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let outcome = ledger.seed(&header, &questions, &frozen.manifest.order, now_ms()).await?;
    write_seed_marker(frozen)?;
    Ok(outcome)
}

/// Where a cohort records that its ledger was seeded: the evidence that
/// an empty ledger lost the cohort rather than never held it.
pub const SEED_MARKER: &str = ".cohort/ledger-seeded.json";

/// Writes the seed marker once (cohort, manifest, when).
pub(crate) fn write_seed_marker(frozen: &Frozen) -> Result<(), ServeError> {
    let path = frozen.dir.join(SEED_MARKER);
    if path.exists() {
        return Ok(());
    }
    let marker = serde_json::json!({
        "cohort": frozen.cohort.config.name,
        "manifest_sha256": frozen.manifest_sha256,
        "seeded_at": cohort_worker::record::rfc3339_ms(now_ms()),
    });
    let dir = path.parent().unwrap_or(&frozen.dir);
    std::fs::create_dir_all(dir).map_err(|source| ServeError::CreateDir { path: dir.to_path_buf(), source })?;
    let text = format!("{marker:#}\n");
    std::fs::write(&path, text).map_err(|source| ServeError::Write { path, source })
}

/// [`ServeError::LedgerLost`] when anything says the cohort's ledger held
/// it before: its seed marker (for this manifest), run records of its
/// manifest in the cohort's own artifact store or spool, or reports in the
/// workers' journals ([`crate::rebuild::Evidence`]); `None` otherwise (a
/// cohort never run). Not the marker alone: a ledger restarted on an empty
/// data folder, with the cohort folder restored from elsewhere, is refused
/// on the records and journals.
pub fn lost_ledger(frozen: &Frozen) -> Option<ServeError> {
    let path = frozen.dir.join(SEED_MARKER);
    let marker = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .filter(|m| m["manifest_sha256"].as_str() == Some(frozen.manifest_sha256.as_str()));
    let evidence = crate::rebuild::Evidence::gather(frozen, &StoreConfig::default()).unwrap_or_default();
    if marker.is_none() && !evidence.any() {
        return None;
    }
    let seeded = match &marker {
        Some(m) => {
            format!("it was seeded at {} ({})", m["seeded_at"].as_str().unwrap_or("an earlier run"), path.display())
        }
        None => format!("it was seeded before (its seed marker {} is gone)", path.display()),
    };
    Some(ServeError::LedgerLost { cohort: frozen.cohort.config.name.clone(), seeded, evidence: evidence.describe() })
}

/// The plan a coordinator serves for the frozen cohort.
pub fn served_plan(frozen: &Frozen) -> ServedPlan {
    ServedPlan::from_config(&frozen.cohort.config, frozen.cohort.suffix.clone(), frozen.manifest_sha256.clone())
}

/// The plan a coordinator serves, read without loading the manifest's
/// order: cohort.toml, suffix.txt and the manifest's hash (streamed). Its
/// size does not depend on the cohort's; the files were verified against
/// the manifest when the ledger was seeded.
pub fn served_plan_from_files(dir: &Path) -> Result<ServedPlan, ServeError> {
    use std::io::Read as _;
    fn read(path: &Path) -> impl Fn(std::io::Error) -> ServeError + '_ {
        move |source| ServeError::Read { path: path.to_owned(), source }
    }
    let toml_path = dir.join(cohort_core::config::FILE);
    let toml = std::fs::read_to_string(&toml_path).map_err(read(&toml_path))?;
    let config =
        cohort_core::config::build_and_validate(&toml).map_err(|problems| cohort_core::ValidationError { problems })?;
    let suffix_path = dir.join(cohort_core::cohort::SUFFIX_FILE);
    let suffix = std::fs::read_to_string(&suffix_path).map_err(read(&suffix_path))?;
    let manifest_path = dir.join(cohort_core::manifest::FILE);
    let mut file = std::fs::File::open(&manifest_path).map_err(read(&manifest_path))?;
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer).map_err(read(&manifest_path))?;
        if n == 0 {
            break;
        }
        sha2::Digest::update(&mut hasher, &buffer[..n]);
    }
    Ok(ServedPlan::from_config(
        &config,
        cohort_core::cohort::suffix_for_prompt(&suffix).to_owned(),
        hex::encode(sha2::Digest::finalize(hasher)),
    ))
}

/// The runtimes of the arms this worker runs (`only`: all when empty).
pub fn arm_runtimes(frozen: &Frozen, only: &[String]) -> Result<HashMap<String, ArmRuntime>, ServeError> {
    let mut arms = HashMap::new();
    for arm in &frozen.cohort.config.arms {
        if !only.is_empty() && !only.contains(&arm.id) {
            continue;
        }
        let adapter = adapters::for_arm(arm)?;
        arms.insert(arm.id.clone(), ArmRuntime { config: arm.clone(), adapter });
    }
    if let Some(unknown) = only.iter().find(|a| frozen.cohort.config.arm(a).is_none()) {
        return Err(ServeError::UnknownArm { arm: unknown.clone(), cohort: frozen.cohort.config.name.clone() });
    }
    Ok(arms)
}

/// A worker's run context for the frozen cohort: its artifact store, the
/// judge of `scoring.judge` and the source capture it asks for.
pub fn run_context(frozen: &Frozen, store: &StoreConfig, scoring: &ScoringConfig) -> Result<RunContext, ServeError> {
    let c = &frozen.cohort.config;
    let artifacts = artifact_store(frozen, store)?;
    remove_stale_temporaries(&artifacts);
    let judge = scoring.judge.as_deref().map(JudgeEndpoint::from_file).transpose()?;
    // `cohort run` may add a judge of its own afterwards (`set_judge`).
    let capturer = scoring.capturer(judge.is_some(), &artifacts)?;
    Ok(RunContext {
        cohort: c.name.clone(),
        manifest_sha256: frozen.manifest_sha256.clone(),
        run_timeout: Duration::from_secs(c.run_timeout_secs),
        prices: c.prices.clone(),
        store: artifacts,
        // On this machine's disk whatever store `--artifacts` names: where
        // an answer waits when the store refuses it.
        spool: cohort_worker::Spool::for_cohort(&frozen.dir),
        clock: Arc::new(SystemClock),
        capturer,
        judge,
        // `cohort run` sets the pass it writes (`judging::inline_pass`).
        pass: None,
        // `cohort worker --ops-listen` serves these.
        metrics: Default::default(),
    })
}

/// How old a temporary file of the artifact store must be before a
/// starting worker takes it for a killed writer's: a blob's write takes
/// milliseconds to seconds, so a write still in flight on another worker
/// sharing the store is never this old.
pub const STALE_TEMPORARY_AGE: Duration = Duration::from_secs(15 * 60);

/// Removes the temporary files killed writers left in the artifact store
/// (a worker SIGKILLed between a blob's write and its rename), as a role
/// that writes blobs starts; says what it removed, and warns when it
/// cannot (the store still works: the files only take space).
fn remove_stale_temporaries(artifacts: &ArtifactStore) {
    match artifacts.remove_stale_temporaries(STALE_TEMPORARY_AGE) {
        Ok(0) => {}
        Ok(n) => tracing::info!(removed = n, "removed temporary files that killed writers left in the artifact store"),
        Err(e) => tracing::warn!(error = %e, "cannot clean the artifact store's stale temporary files"),
    }
}

/// Gives `context` the judge `cohort run` started or chose itself (the
/// built-in SIMULATED judge, or `--judge-proxy-config`), and with it the
/// source capture a judge needs (unless `no_capture`).
pub fn set_judge(context: &mut RunContext, judge: JudgeEndpoint, scoring: &ScoringConfig) -> Result<(), ServeError> {
    if context.capturer.is_none() {
        context.capturer = scoring.capturer(true, &context.store)?;
    }
    context.judge = Some(judge);
    Ok(())
}

/// The pre-flight (`cohort_worker::preflight`) over `DIR/cohort.toml`,
/// before anything is written: every problem in the error, or the
/// warnings, for the command to print after its own output (a refusal
/// stays about what refused it). A `cohort.toml` that does not parse is
/// left to the command's own validation, which names its problems with
/// their lines.
pub fn preflight(
    dir: &Path,
    scope: Scope,
    only: &[String],
    judge: Option<&Path>,
) -> Result<Vec<cohort_core::error::Problem>, PreflightError> {
    let Ok(text) = std::fs::read_to_string(dir.join(cohort_core::config::FILE)) else { return Ok(Vec::new()) };
    let Ok(config) = cohort_core::config::build_and_validate(&text) else { return Ok(Vec::new()) };
    let findings = preflight::check_arms(&config, &text, scope, only, &|var| std::env::var(var).ok());
    let mut problems = findings.problems;
    if let Some(problem) = judge.and_then(preflight::check_judge_file) {
        problems.push(problem);
    }
    if problems.is_empty() {
        return Ok(findings.warnings);
    }
    Err(PreflightError { problems })
}

#[cfg(test)]
mod tests {
    /// Proves a URL's password never reaches a message, and a URL without
    /// one is kept whole.
    #[test]
    fn redact_url_hides_the_password() {
        assert_eq!(super::redact_url("redis://user:secret@host:6379/"), "redis://***@host:6379/");
        assert_eq!(super::redact_url("redis://host:6379/"), "redis://host:6379/");
    }
}
