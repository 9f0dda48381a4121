//! The roles run alone, for a cluster: `cohort coordinator` and
//! `cohort worker`, their flags turned into `cohort_serve::roles`' configs.
//! Both stop cleanly on Ctrl-C or SIGTERM (a worker drains).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use cohort_coordinator::service::{self, CoordinatorConfig};
use cohort_serve::roles::{CoordinatorRoleConfig, RoleEvent, WorkerRoleConfig, serve_coordinator, serve_worker};

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

    /// The coordinator's TLS ([`cohort_auth::ServerTls::from_flags`]).
    fn server_tls(&self) -> anyhow::Result<Option<cohort_auth::ServerTls>> {
        Ok(cohort_auth::ServerTls::from_flags(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_ca.as_deref(),
        )?)
    }

    /// A worker's TLS ([`cohort_auth::ClientTls::for_url`]).
    fn client_tls(&self, url: &str) -> anyhow::Result<Option<cohort_auth::ClientTls>> {
        let (ca, cert, key) = (self.tls_ca.as_deref(), self.tls_cert.as_deref(), self.tls_key.as_deref());
        Ok(cohort_auth::ClientTls::for_url(url, ca, cert, key)?)
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
    /// Seconds leasing stays paused while the artifact store refuses answers
    /// (they wait in the spool) before the worker stops; 0 stops at once.
    #[arg(long, default_value_t = cohort_worker::DEFAULT_STORE_OUTAGE_GRACE.as_secs())]
    pub store_outage_secs: u64,
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
        let config = CoordinatorRoleConfig {
            dir: args.dir.clone(),
            store: args.store.config(),
            service: CoordinatorConfig {
                lease_ttl_ms: args.lease_ttl_ms,
                heartbeat_interval_ms: args.heartbeat_ms,
                reconcile_interval: Duration::from_millis(args.reconcile_ms.max(10)),
                journal: args.journal.into(),
                auth,
                tls,
                ..CoordinatorConfig::default()
            },
            ops_listen: args.ops_listen.clone(),
        };
        let listener = cohort_serve::roles::bind(&args.listen).await?;
        let round_trips = serve_coordinator(config, listener, show_role_event, local::shutdown_signal()).await?;
        if let Some(n) = round_trips {
            super::emit(&format!("coordinator stopped: {n} ledger round trips\n"));
        }
        Ok(())
    })
}

/// Prints what a role says while it starts: the lines tests and scripts
/// wait for (where to connect).
fn show_role_event(event: RoleEvent<'_>) {
    match event {
        RoleEvent::CoordinatorListening { address, .. } => {
            super::emit(&format!("coordinator listening on {address}\n"));
        }
        RoleEvent::OpsListening { address } => super::emit(&format!("ops listening on {address}\n")),
    }
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
        let config = WorkerRoleConfig {
            dir: args.dir.clone(),
            coordinator: args.coordinator.clone(),
            name: args.name.clone().unwrap_or_else(|| format!("worker-{}", std::process::id())),
            slots: args.slots,
            arms: args.arms.clone(),
            drain_grace: Duration::from_secs(args.drain_grace_secs),
            store_outage_grace: Duration::from_secs(args.store_outage_secs),
            store: args.store.config(),
            scoring: args.scoring.config(),
            token,
            tls,
            ops_listen: args.ops_listen.clone(),
        };
        let summary = serve_worker(config, show_role_event, local::shutdown_signal()).await?;
        super::emit(&format!(
            "worker done: leased {}, reported {}, stale {}, released {}\n",
            summary.leased, summary.reported, summary.stale, summary.released
        ));
        Ok(())
    })
}
