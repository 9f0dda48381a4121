//! What the cluster commands share: opening a cohort's ledger (embedded
//! SQLite under `DIR/.cohort/` by default, or Redis), seeding it from the
//! frozen manifest, and building the coordinator's and workers' configs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cohort_artifacts::ArtifactStore;
use cohort_artifacts::{ArtifactsUrl, S3Config};
use cohort_clock::{SystemClock, now_ms};
use cohort_coordinator::freeze::load_frozen;
use cohort_coordinator::service::ServedPlan;
use cohort_core::ValidatedCohort;
use cohort_core::manifest::Manifest;
use cohort_ledger::redis::RedisLedger;
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger, PlanHeader, SeedOutcome};
use cohort_worker::capture::{CaptureConfig, SourceCapturer};
use cohort_worker::preflight::{self, Scope};
use cohort_worker::score::JudgeEndpoint;
use cohort_worker::{ArmRuntime, RunContext, adapters};

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
    /// The embedded ledger file of the cohort in `dir`: `--ledger`, or
    /// DIR/.cohort/ledger.sqlite.
    pub fn sqlite_path(&self, dir: &Path) -> PathBuf {
        self.ledger.clone().unwrap_or_else(|| dir.join(cohort_artifacts::STATE_DIR).join("ledger.sqlite"))
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
    /// Whether cited sources are fetched: when asked (`--capture`), or
    /// when a judge will read them, unless `--no-capture`. Without a
    /// judge, nothing is fetched from the web unasked.
    pub fn captures(&self, judged: bool) -> bool {
        self.capture || (judged && !self.no_capture)
    }

    /// The source capturer for runs judged (`judged`) or not, storing
    /// into `artifacts`; `None` when nothing is to be fetched.
    pub fn capturer(&self, judged: bool, artifacts: &ArtifactStore) -> anyhow::Result<Option<SourceCapturer>> {
        if !self.captures(judged) {
            return Ok(None);
        }
        let config =
            CaptureConfig { allow_private_addresses: self.capture_private_addresses, ..CaptureConfig::default() };
        Ok(Some(SourceCapturer::new(config, artifacts.clone()).context("cannot set up source capture")?))
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

pub fn load(dir: &Path) -> anyhow::Result<Frozen> {
    let (cohort, manifest, manifest_sha256) = load_frozen(dir)?;
    Ok(Frozen { dir: dir.to_owned(), cohort, manifest, manifest_sha256 })
}

pub async fn open_ledger(frozen: &Frozen, store: &StoreArgs) -> anyhow::Result<Arc<dyn Ledger>> {
    open_ledger_for(&frozen.dir, &frozen.manifest.cohort, store).await
}

/// The ledger of cohort `cohort` in `dir`, embedded or Redis.
pub async fn open_ledger_for(dir: &Path, cohort: &str, store: &StoreArgs) -> anyhow::Result<Arc<dyn Ledger>> {
    if let Some(url) = &store.redis {
        let ledger = RedisLedger::connect(url, cohort)
            .await
            .with_context(|| format!("cannot reach the Redis ledger at {}", redact_url(url)))?;
        return Ok(Arc::new(ledger));
    }
    let path = store.sqlite_path(dir);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let ledger = SqliteLedger::open(&path).with_context(|| format!("cannot open the ledger {}", path.display()))?;
    Ok(Arc::new(ledger))
}

/// A URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://***@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// The artifact store `--artifacts` names (DIR/.cohort/artifacts by
/// default); an s3:// store is read through DIR/.cohort/artifacts-cache.
pub fn artifact_store(frozen: &Frozen, store: &StoreArgs) -> anyhow::Result<ArtifactStore> {
    let s3 = S3Config { max_blob_bytes: store.artifacts_max_mib.saturating_mul(1024 * 1024), ..S3Config::default() };
    cohort_artifacts::open(store.artifacts.as_ref(), &frozen.dir, &s3).with_context(|| {
        let url = store.artifacts.as_ref().map_or_else(|| "the cohort's own store".to_owned(), ToString::to_string);
        format!("cannot open the artifact store (--artifacts {url})")
    })
}

/// Seeds the ledger from the manifest (idempotent).
pub async fn seed(ledger: &dyn Ledger, frozen: &Frozen) -> anyhow::Result<SeedOutcome> {
    let header = PlanHeader::for_cohort(&frozen.cohort.config, &frozen.manifest_sha256);
    let questions: Vec<(String, String)> =
        frozen.cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    Ok(ledger.seed(&header, &questions, &frozen.manifest.order, now_ms()).await?)
}

pub fn served_plan(frozen: &Frozen) -> ServedPlan {
    ServedPlan::from_config(&frozen.cohort.config, frozen.cohort.suffix.clone(), frozen.manifest_sha256.clone())
}

/// The plan a coordinator serves, read without loading the manifest's
/// order: cohort.toml, suffix.txt and the manifest's hash (streamed). Its
/// size does not depend on the cohort's; the files were verified against
/// the manifest when the ledger was seeded.
pub fn served_plan_from_files(dir: &Path) -> anyhow::Result<ServedPlan> {
    use std::io::Read as _;
    let toml_path = dir.join(cohort_core::config::FILE);
    let toml = std::fs::read_to_string(&toml_path).with_context(|| format!("cannot read {}", toml_path.display()))?;
    let config =
        cohort_core::config::build_and_validate(&toml).map_err(|problems| cohort_core::ValidationError { problems })?;
    let suffix_path = dir.join(cohort_core::cohort::SUFFIX_FILE);
    let suffix =
        std::fs::read_to_string(&suffix_path).with_context(|| format!("cannot read {}", suffix_path.display()))?;
    let manifest_path = dir.join(cohort_core::manifest::FILE);
    let mut file =
        std::fs::File::open(&manifest_path).with_context(|| format!("cannot read {}", manifest_path.display()))?;
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buffer).with_context(|| format!("cannot read {}", manifest_path.display()))?;
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

/// The runtimes of the arms this worker runs (`only`: all when empty).
pub fn arm_runtimes(frozen: &Frozen, only: &[String]) -> anyhow::Result<HashMap<String, ArmRuntime>> {
    let mut arms = HashMap::new();
    for arm in &frozen.cohort.config.arms {
        if !only.is_empty() && !only.contains(&arm.id) {
            continue;
        }
        let adapter = adapters::for_arm(arm)?;
        arms.insert(arm.id.clone(), ArmRuntime { config: arm.clone(), adapter });
    }
    if let Some(unknown) = only.iter().find(|a| frozen.cohort.config.arm(a).is_none()) {
        anyhow::bail!("--arms names {unknown:?}, which is not an arm of cohort {:?}", frozen.cohort.config.name);
    }
    Ok(arms)
}

pub fn run_context(frozen: &Frozen, store: &StoreArgs, scoring: &ScoringArgs) -> anyhow::Result<RunContext> {
    let c = &frozen.cohort.config;
    let artifacts = artifact_store(frozen, store)?;
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
        // `cohort run` sets the pass it writes (`local::inline_pass`).
        pass: None,
        // `cohort worker --ops-listen` serves these (`roles::worker`).
        metrics: Default::default(),
    })
}

/// Gives `context` the judge `cohort run` started or chose itself (the
/// built-in SIMULATED judge, or `--judge-proxy-config`), and with it the
/// source capture a judge needs (unless `--no-capture`).
pub fn set_judge(context: &mut RunContext, judge: JudgeEndpoint, scoring: &ScoringArgs) -> anyhow::Result<()> {
    if context.capturer.is_none() {
        context.capturer = scoring.capturer(true, &context.store)?;
    }
    context.judge = Some(judge);
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM (Kubernetes stops pods with it): the one
/// shutdown signal of every command that runs until stopped.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// The pre-flight (`cohort_worker::preflight`) over `DIR/cohort.toml`,
/// before anything is written: prints every problem and fails with exit 2
/// when there is any; otherwise returns the warnings, for the command to
/// print after its own output (a refusal stays about what refused it). A
/// `cohort.toml` that does not parse is left to the command's own
/// validation, which names its problems with their lines.
pub fn preflight(
    dir: &Path,
    scope: Scope,
    only: &[String],
    judge: Option<&Path>,
) -> anyhow::Result<Vec<cohort_core::error::Problem>> {
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
    Err(super::refuse(preflight::PreflightError { problems }))
}

// === a judge proxy in this process ===

/// The `[judge] provider` that names the judge proxy's SIMULATED judge.
pub const SIM_JUDGE_PROVIDER: &str = "sim";

/// A judge proxy to start in this process (`cohort run`, `cohort judge`).
#[derive(Debug)]
pub struct InProcessJudge {
    pub config: cohort_judge_proxy::ProxyConfig,
    /// Where its config came from, for messages.
    pub origin: String,
    pub simulated: bool,
}

/// The built-in SIMULATED judge when the cohort's `[judge] provider` is
/// "sim" (else `None`): the proxy's sim upstream, named after the frozen
/// `[judge] model`, behind a fresh team key.
pub fn builtin_sim_judge(cohort: &cohort_core::config::CohortConfig) -> anyhow::Result<Option<InProcessJudge>> {
    let Some(judge) = cohort.judge.as_ref().filter(|j| j.provider == SIM_JUDGE_PROVIDER) else {
        return Ok(None);
    };
    let sim = cohort_judge_proxy::config::BuiltinSimJudge {
        name: judge.model.clone(),
        model: judge.model.clone(),
        served_model: judge.served_model.clone(),
        batch_size: judge.batch_size,
        // The cohort's catalog prices the sim judge only if it lists the
        // model (normally not: cost unknown, never invented).
        prices: cohort.prices.clone(),
    };
    let key = cohort_judge_proxy::secret::Secret::new(random_team_key()?);
    let config = cohort_judge_proxy::ProxyConfig::builtin_sim(sim, key);
    Ok(Some(InProcessJudge { config, origin: "the built-in sim judge".to_owned(), simulated: true }))
}

/// A fresh team key for a proxy that lives and dies with this process and
/// listens on loopback only: 32 random bytes, hex.
fn random_team_key() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the in-process judge proxy's team key")?;
    Ok(hex::encode(bytes))
}

/// Starts the judge proxy of `config` (from `origin`) on loopback ports, in
/// this process, and says how workers reach it: its first team's key, and
/// the judge whose model is the cohort's `[judge] model` (or the only
/// judge).
pub async fn start_judge_proxy(
    config: cohort_judge_proxy::ProxyConfig,
    origin: &str,
    frozen: &Frozen,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(JudgeEndpoint, tokio::task::JoinHandle<Result<(), cohort_judge_proxy::error::ProxyError>>)> {
    let team = config.teams.first().ok_or_else(|| anyhow::anyhow!("{origin}: the judge proxy needs a team"))?;
    let wanted = frozen.cohort.config.judge.as_ref().map(|j| j.model.as_str());
    let judge = match (wanted, config.judges.as_slice()) {
        (_, [only]) => only,
        (Some(model), judges) => judges
            .iter()
            .find(|j| j.model == model)
            .ok_or_else(|| anyhow::anyhow!("{origin}: no judge with model {model:?} (the cohort's [judge] model)"))?,
        (None, _) => anyhow::bail!("{origin}: several judges and the cohort names none"),
    };
    let endpoint_parts = (judge.name.clone(), team.key.expose().to_owned());
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port")?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port")?;
    let url = format!("http://{}", grpc.local_addr()?);
    let listeners = cohort_judge_proxy::Listeners { grpc, http };
    let task = tokio::spawn(cohort_judge_proxy::run(config, listeners, shutdown));
    let endpoint = JudgeEndpoint::new(url, endpoint_parts.0, endpoint_parts.1, Duration::from_secs(300));
    Ok((endpoint, task))
}
