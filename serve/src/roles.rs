//! The roles run alone, for a cluster: [`serve_coordinator`] and
//! [`serve_worker`], each with its operations server (`/healthz`,
//! `/readyz`, `/metrics`) beside it when asked and its metrics pushed over
//! OTLP when the `OTEL_*` variables ask, both stopped when the role stops.
//!
//! Seeding the ledger is not here: `cohort coordinator` seeds it in a
//! child `cohort seed` first (which reads the whole manifest), so the
//! long-lived coordinator process never holds memory that grows with the
//! cohort; [`serve_coordinator`] reads only the plan's constant-size part.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cohort_clock::SystemClock;
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService};
use cohort_telemetry::ops::{OpsError, OpsRole};
use cohort_worker::{WorkerConfig, WorkerSummary};

use crate::ServeError;
use crate::local::{self, ScoringConfig, StoreConfig};

/// Binds the coordinator's listener on `address`, or says where it cannot.
pub async fn bind(address: &str) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Listen { address: address.to_owned(), source })
}

/// What a role tells its caller while it starts.
#[derive(Debug)]
pub enum RoleEvent<'a> {
    /// The coordinator listens for workers at `address`.
    CoordinatorListening { address: SocketAddr, cohort: &'a str },
    /// The operations server listens at `address`.
    OpsListening { address: SocketAddr },
}

/// What [`serve_coordinator`] serves.
#[derive(Debug)]
pub struct CoordinatorRoleConfig {
    /// The frozen cohort directory (verified and seeded already).
    pub dir: PathBuf,
    pub store: StoreConfig,
    /// The service's own settings (leases, reconcile, journal, auth, TLS).
    pub service: CoordinatorConfig,
    /// Where to serve the operations endpoints; none when absent.
    pub ops_listen: Option<String>,
}

/// Serves the coordinator of the seeded cohort in `config.dir` on
/// `listener` (bound by the caller, as `cohort_judge_proxy::run` takes
/// its listeners: port 0 gives any free port, told in
/// [`RoleEvent::CoordinatorListening`]) until `shutdown` resolves; returns
/// the ledger's round trips when the ledger counts them.
pub async fn serve_coordinator(
    config: CoordinatorRoleConfig,
    listener: tokio::net::TcpListener,
    mut events: impl FnMut(RoleEvent<'_>),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Option<u64>, ServeError> {
    let plan = local::served_plan_from_files(&config.dir)?;
    let ledger = local::open_ledger_for(&config.dir, &plan.cohort, &config.store).await?;
    let address = listener.local_addr()?;
    let tls = config.service.tls.as_ref();
    tracing::info!(
        %address,
        cohort = %plan.cohort,
        token = config.service.auth.enabled(),
        tls = tls.is_some(),
        mutual_tls = tls.is_some_and(cohort_auth::ServerTls::mutual),
        "coordinator listening"
    );
    events(RoleEvent::CoordinatorListening { address, cohort: &plan.cohort });
    let service = CoordinatorService::new(Arc::clone(&ledger), plan, Arc::new(SystemClock), config.service);
    let role = service.ops();
    let pushed = cohort_telemetry::MetricsExport::start("cohort-coordinator", Arc::clone(&role)).await?;
    let ops = OpsServer::start(config.ops_listen.as_deref(), role, &mut events).await?;
    let served = service::run(service, listener, shutdown).await;
    OpsServer::stop(ops).await;
    stop_metrics_export(pushed).await;
    served?;
    Ok(ledger.round_trips())
}

/// What [`serve_worker`] runs.
#[derive(Debug)]
pub struct WorkerRoleConfig {
    /// The frozen cohort directory (the worker reads arms and settings).
    pub dir: PathBuf,
    /// The coordinator's URL.
    pub coordinator: String,
    /// A name operators recognise.
    pub name: String,
    /// Runs carried out at once (at least one).
    pub slots: u32,
    /// Only these arms (all when empty).
    pub arms: Vec<String>,
    /// How long running runs may take to finish on shutdown.
    pub drain_grace: Duration,
    /// How long leasing stays paused while the artifact store refuses answers.
    pub store_outage_grace: Duration,
    pub store: StoreConfig,
    pub scoring: ScoringConfig,
    /// The cluster token the worker sends, if any.
    pub token: Option<cohort_auth::ClusterToken>,
    /// The worker's TLS to the coordinator, if any.
    pub tls: Option<cohort_auth::ClientTls>,
    /// Where to serve the operations endpoints; none when absent.
    pub ops_listen: Option<String>,
}

/// Runs a worker of the frozen cohort in `config.dir` until `shutdown`
/// resolves (then it drains) or the coordinator stops it.
pub async fn serve_worker(
    config: WorkerRoleConfig,
    mut events: impl FnMut(RoleEvent<'_>),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<WorkerSummary, ServeError> {
    let frozen = local::load(&config.dir)?;
    let worker = WorkerConfig {
        token: config.token,
        tls: config.tls,
        coordinator: config.coordinator,
        name: config.name,
        slots: config.slots.max(1),
        drain_grace: config.drain_grace,
        store_outage_grace: config.store_outage_grace,
        context: local::run_context(&frozen, &config.store, &config.scoring)?,
        arms: local::arm_runtimes(&frozen, &config.arms)?,
    };
    let role: Arc<dyn OpsRole> = Arc::clone(&worker.context.metrics) as _;
    let pushed = cohort_telemetry::MetricsExport::start("cohort-worker", Arc::clone(&role)).await?;
    let ops = OpsServer::start(config.ops_listen.as_deref(), role, &mut events).await?;
    let ran = cohort_worker::run(worker, shutdown).await;
    OpsServer::stop(ops).await;
    stop_metrics_export(pushed).await;
    Ok(ran?)
}

/// The operations server beside a role: started before the role serves,
/// stopped when it stops. Owned here: [`OpsServer::stop`] ends and joins it.
#[derive(Debug)]
struct OpsServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), OpsError>>,
}

/// How long a stopping role waits for its operations server's requests in
/// flight (a scrape) before it leaves them.
const OPS_STOP_GRACE: Duration = Duration::from_secs(5);

impl OpsServer {
    /// Binds `address` (none: no server) and serves `role` there, telling
    /// where ([`RoleEvent::OpsListening`]: a port-0 address is found there).
    async fn start(
        address: Option<&str>,
        role: Arc<dyn OpsRole>,
        events: &mut impl FnMut(RoleEvent<'_>),
    ) -> Result<Option<OpsServer>, ServeError> {
        let Some(address) = address else { return Ok(None) };
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| ServeError::OpsListen { address: address.to_owned(), source })?;
        let address = listener.local_addr()?;
        tracing::info!(%address, "ops listening: /healthz, /readyz, /metrics");
        events(RoleEvent::OpsListening { address });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(cohort_telemetry::ops::serve(listener, role, async move {
            let _ = stopped.await;
        }));
        Ok(Some(OpsServer { stop, task }))
    }

    /// Stops the server and waits (briefly) for it; a failure is logged:
    /// the role's own result is what the caller reports.
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
