//! The roles run alone, for a cluster: `cohort coordinator` and
//! `cohort worker`. Both stop cleanly on Ctrl-C or SIGTERM (a worker drains).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cohort_clock::SystemClock;
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService};
use cohort_worker::WorkerConfig;

use super::local::{self, ScoringArgs, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The frozen cohort directory.
    pub dir: PathBuf,
    /// Where to listen for workers.
    #[arg(long, default_value = "127.0.0.1:7100")]
    pub listen: String,
    /// How long a lease lives without a heartbeat (ms).
    #[arg(long, default_value_t = 30_000)]
    pub lease_ttl_ms: i64,
    /// How often workers heartbeat (ms).
    #[arg(long, default_value_t = 5_000)]
    pub heartbeat_ms: u32,
    /// How often leases are expired and the window checked (ms).
    #[arg(long, default_value_t = 500)]
    pub reconcile_ms: u64,
    /// Whether workers journal their reports until the ledger has them on
    /// disk: `auto` when a crash of the ledger's server can lose what it
    /// acknowledged (Redis without `appendfsync always`), `on`, or `off`
    /// (a lost acknowledgement then loses the result and runs it again).
    #[arg(long, value_enum, default_value_t = Journal::Auto)]
    pub journal: Journal,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Serve `/healthz`, `/readyz` and `/metrics` (Prometheus) on this
    /// address (docs/operations.md); off when absent.
    #[arg(long, value_name = "ADDR")]
    pub ops_listen: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// How this role authenticates to the others (cohort-auth): the cluster
/// token and TLS files.
#[derive(Debug, clap::Args)]
pub struct AuthArgs {
    /// A file holding the cluster token (else the COHORT_CLUSTER_TOKEN
    /// variable): the coordinator refuses every call without it, workers
    /// send it. Never on the command line, where `ps` shows it.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// TLS: this role's certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS: this role's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TLS: a CA certificate (PEM). On the coordinator, the CA every
    /// worker's certificate must chain to (mutual TLS: a worker without
    /// one is refused); on a worker, the CA of the coordinator's.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
}

impl AuthArgs {
    fn token(&self) -> anyhow::Result<Option<cohort_auth::ClusterToken>> {
        Ok(cohort_auth::ClusterToken::load(self.token_file.as_deref())?)
    }

    /// The coordinator's TLS: none, or its certificate and key with the
    /// workers' CA when given.
    fn server_tls(&self) -> anyhow::Result<Option<cohort_auth::ServerTls>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(cohort_auth::ServerTls::from_files(cert, key, self.tls_ca.as_deref())?)),
            _ if self.tls_ca.is_some() => {
                anyhow::bail!(
                    "--tls-ca on the coordinator needs its own --tls-cert and --tls-key (TLS first, then mutual)"
                )
            }
            _ => Ok(None),
        }
    }

    /// A worker's TLS: when any file is given or the URL is `https://`.
    fn client_tls(&self, url: &str) -> anyhow::Result<Option<cohort_auth::ClientTls>> {
        if self.tls_ca.is_none() && self.tls_cert.is_none() && !url.starts_with("https://") {
            return Ok(None);
        }
        if !url.starts_with("https://") {
            anyhow::bail!("TLS files were given but --coordinator {url} is not an https:// URL");
        }
        Ok(Some(cohort_auth::ClientTls::from_files(
            self.tls_ca.as_deref(),
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
        )?))
    }
}

/// `--journal`: see [`service::JournalMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Journal {
    Auto,
    On,
    Off,
}

impl From<Journal> for service::JournalMode {
    fn from(j: Journal) -> service::JournalMode {
        match j {
            Journal::Auto => service::JournalMode::Auto,
            Journal::On => service::JournalMode::On,
            Journal::Off => service::JournalMode::Off,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The frozen cohort directory (the worker reads arms and settings).
    pub dir: PathBuf,
    /// The coordinator's URL.
    #[arg(long, default_value = "http://127.0.0.1:7100")]
    pub coordinator: String,
    /// Runs carried out at once.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// A name operators recognise (default: worker-PID).
    #[arg(long)]
    pub name: Option<String>,
    /// Only these arms (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub arms: Vec<String>,
    /// Seconds running runs may take to finish on shutdown.
    #[arg(long, default_value_t = 10)]
    pub drain_grace_secs: u64,
    /// Serve `/healthz`, `/readyz` (registered and not draining) and
    /// `/metrics` (Prometheus) on this address (docs/operations.md); off
    /// when absent.
    #[arg(long, value_name = "ADDR")]
    pub ops_listen: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub scoring: ScoringArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

pub fn coordinator(args: CoordinatorArgs) -> anyhow::Result<()> {
    local::preflight(&args.dir, cohort_worker::preflight::Scope::Run, &[], None)?;
    // Before anything starts: a missing token file or a bad certificate
    // stops here, naming the file.
    let auth = cohort_auth::RequireToken::new(args.auth.token()?);
    let tls = args.auth.server_tls()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        // Verifying the frozen files and seeding the ledger read the whole
        // manifest (its order): that happens in a child `cohort seed`, so
        // this long-lived process never holds memory that grows with the
        // cohort. The coordinator keeps only the plan's constant-size part.
        let exe = std::env::current_exe().context("cannot find the cohort executable to seed the ledger")?;
        let seeded = std::process::Command::new(exe)
            .arg("seed")
            .arg(&args.dir)
            .args(local::store_flags(&args.store))
            .stdout(std::process::Stdio::null())
            .status()
            .context("cannot run `cohort seed`")?;
        if !seeded.success() {
            anyhow::bail!("seeding the ledger failed (see the error above); the coordinator did not start");
        }
        let plan = local::served_plan_from_files(&args.dir)?;
        let ledger = local::open_ledger_for(&args.dir, &plan.cohort, &args.store).await?;
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        tracing::info!(
            %address,
            cohort = %plan.cohort,
            token = auth.enabled(),
            tls = tls.is_some(),
            mutual_tls = tls.as_ref().is_some_and(cohort_auth::ServerTls::mutual),
            "coordinator listening"
        );
        // The line tests and scripts wait for: where to connect.
        super::emit(&format!("coordinator listening on {address}\n"));
        let config = CoordinatorConfig {
            lease_ttl_ms: args.lease_ttl_ms,
            heartbeat_interval_ms: args.heartbeat_ms,
            reconcile_interval: Duration::from_millis(args.reconcile_ms.max(10)),
            journal: args.journal.into(),
            auth,
            tls,
            ..CoordinatorConfig::default()
        };
        let service = CoordinatorService::new(Arc::clone(&ledger), plan, Arc::new(SystemClock), config);
        let role = service.ops();
        let pushed = cohort_telemetry::MetricsExport::start("cohort-coordinator", Arc::clone(&role)).await?;
        let ops = OpsServer::start(args.ops_listen.as_deref(), role).await?;
        let served = service::run(service, listener, local::shutdown_signal()).await;
        OpsServer::stop(ops).await;
        stop_metrics_export(pushed).await;
        served?;
        if let Some(n) = ledger.round_trips() {
            super::emit(&format!("coordinator stopped: {n} ledger round trips\n"));
        }
        Ok(())
    })
}

#[derive(Debug, clap::Args)]
pub struct SeedArgs {
    /// The frozen cohort directory.
    pub dir: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `cohort seed DIR`: verifies the frozen cohort and seeds its ledger
/// (idempotent; a ledger seeded from another manifest refuses).
pub fn seed(args: SeedArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let frozen = local::load(&args.dir)?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        let outcome = local::seed(ledger.as_ref(), &frozen).await?;
        super::emit(&format!(
            "{outcome:?}: {} runs of cohort {:?}\n",
            frozen.manifest.run_count, frozen.manifest.cohort
        ));
        Ok(())
    })
}

pub fn worker(args: WorkerArgs) -> anyhow::Result<()> {
    local::preflight(&args.dir, cohort_worker::preflight::Scope::Run, &args.arms, args.scoring.judge.as_deref())?;
    let token = args.auth.token()?;
    let tls = args.auth.client_tls(&args.coordinator)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let frozen = local::load(&args.dir)?;
        let config = WorkerConfig {
            token,
            tls,
            coordinator: args.coordinator.clone(),
            name: args.name.clone().unwrap_or_else(|| format!("worker-{}", std::process::id())),
            slots: args.slots.max(1),
            drain_grace: Duration::from_secs(args.drain_grace_secs),
            context: local::run_context(&frozen, &args.store, &args.scoring)?,
            arms: local::arm_runtimes(&frozen, &args.arms)?,
        };
        let role: Arc<dyn cohort_telemetry::ops::OpsRole> = Arc::clone(&config.context.metrics) as _;
        let pushed = cohort_telemetry::MetricsExport::start("cohort-worker", Arc::clone(&role)).await?;
        let ops = OpsServer::start(args.ops_listen.as_deref(), role).await?;
        let ran = cohort_worker::run(config, local::shutdown_signal()).await;
        OpsServer::stop(ops).await;
        stop_metrics_export(pushed).await;
        let summary = ran?;
        super::emit(&format!(
            "worker done: leased {}, reported {}, stale {}, released {}\n",
            summary.leased, summary.reported, summary.stale, summary.released
        ));
        Ok(())
    })
}

/// The operations server beside a role (`--ops-listen`): started before
/// the role serves, stopped when it stops. Owned here: [`OpsServer::stop`]
/// ends and joins it.
#[derive(Debug)]
struct OpsServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), cohort_telemetry::ops::OpsError>>,
}

/// How long a stopping role waits for its operations server's requests in
/// flight (a scrape) before it leaves them.
const OPS_STOP_GRACE: Duration = Duration::from_secs(5);

impl OpsServer {
    /// Binds `address` (none: no server) and serves `role` there, saying
    /// where on stdout (`ops listening on ADDR`: a port-0 address is found
    /// there, as the coordinator's is).
    async fn start(
        address: Option<&str>,
        role: Arc<dyn cohort_telemetry::ops::OpsRole>,
    ) -> anyhow::Result<Option<OpsServer>> {
        let Some(address) = address else { return Ok(None) };
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address} for the operations endpoints (--ops-listen)"))?;
        let address = listener.local_addr()?;
        tracing::info!(%address, "ops listening: /healthz, /readyz, /metrics");
        super::emit(&format!("ops listening on {address}\n"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(cohort_telemetry::ops::serve(listener, role, async move {
            let _ = stopped.await;
        }));
        Ok(Some(OpsServer { stop, task }))
    }

    /// Stops the server and waits (briefly) for it; a failure is logged:
    /// the role's own result is what the command reports.
    async fn stop(server: Option<OpsServer>) {
        let Some(OpsServer { stop, mut task }) = server else { return };
        let _ = stop.send(());
        match tokio::time::timeout(OPS_STOP_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the operations server failed"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the operations server's task failed"),
            Err(_) => {
                task.abort();
                tracing::warn!("the operations server did not stop in time; its connections were dropped");
            }
        }
    }
}

/// Sends a role's last metrics over OTLP (when they are exported) and
/// stops the export, off the runtime's threads (it blocks).
async fn stop_metrics_export(pushed: Option<cohort_telemetry::MetricsExport>) {
    if let Some(pushed) = pushed {
        let _ = tokio::task::spawn_blocking(move || pushed.shutdown()).await;
    }
}
