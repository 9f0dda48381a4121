//! The coordinator's gRPC service and its reconcile loop.
//!
//! The service is thin: every state change is one ledger call, so a killed
//! and restarted coordinator resumes from the ledger and loses nothing. What
//! it keeps in memory is the plan's constant-size part (cohort name,
//! manifest hash, suffix, arms) and a cache of each arm's accepted version
//! labels, refreshed from the ledger on every reconcile tick.
//!
//! The reconcile loop expires the leases of silent workers, closes the
//! collection window when it passes, and refreshes the version cache.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use cohort_core::cohort::prompt;
use cohort_core::http_class::error_chain;
use cohort_core::order::RunId;
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_server::{Coordinator, CoordinatorServer};
use cohort_telemetry::ops::OpsRole;
use cohort_telemetry::{DirectSpan, SpanBatch};
use tokio::net::TcpListener;
use tokio::sync::RwLock;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tracing::{error, info, info_span, warn};

use crate::convert;
use crate::metrics::{CoordinatorMetrics, CoordinatorOps};
use cohort_clock::Clock;
use cohort_ledger::{AttemptVerdict, LeaseGrant, Ledger, LedgerError, RunResult};

/// How long (the last backoff step, about half the whole wait) a lease
/// waits for the ledger to give a granted run's earlier attempts when it
/// is briefly unreachable, or when it has not got them all back yet.
const PREVIOUS_ATTEMPTS_PATIENCE: Duration = Duration::from_millis(1_600);

/// The earlier attempts of a grant, as a lease carries them, and whether
/// they could not be read: the one reading for a worker's lease and a
/// person's (`cohort pending`/`cohort submit`); nothing to read (and no
/// ledger call) on a first attempt. The grant is already made, so a ledger
/// error here must not fail the lease (the run would come back as
/// worker_lost and spend an attempt): the lease goes out flagged instead,
/// and the record says its attempt list is incomplete.
pub async fn previous_attempts(ledger: &dyn Ledger, grant: &LeaseGrant) -> (Vec<pb::PreviousAttempt>, bool) {
    previous_attempts_from(grant, || ledger.attempts(&grant.run_id)).await
}

/// [`previous_attempts`] over any reading of the run's attempts. The
/// reading is asked again, for about 3 s in all, while it fails in a way
/// that may heal (Redis restarting under the grant) and while it lacks one
/// of the attempts 1 to `attempt - 1`: a Redis that lost its last second
/// gets a run's acknowledged attempt back only when its worker replays its
/// journal, within the ledger's recovery grace, and a grant made just
/// before the loss may be read just after it. A gap that outlasts the
/// patience goes out as read; the worker's record then says its list is
/// incomplete (`attempts_of` checks the numbers).
async fn previous_attempts_from<F, Fut>(grant: &LeaseGrant, mut read: F) -> (Vec<pb::PreviousAttempt>, bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<cohort_ledger::AttemptRecord>, LedgerError>>,
{
    if grant.attempt <= 1 {
        return (Vec::new(), false);
    }
    let mut delay = Duration::from_millis(50);
    loop {
        let patient = delay <= PREVIOUS_ATTEMPTS_PATIENCE;
        match read().await {
            Ok(attempts) => {
                let mut earlier: Vec<u32> = attempts.iter().map(|a| a.attempt).filter(|&n| n < grant.attempt).collect();
                earlier.sort_unstable();
                let whole = earlier.iter().copied().eq(1..grant.attempt);
                if whole || !patient {
                    if !whole {
                        warn!(run_id = %grant.run_id, attempt = grant.attempt, held = ?earlier,
                            "the ledger lacks earlier attempts of a granted run; the lease goes out without them");
                    }
                    let earlier = attempts.iter().filter(|a| a.attempt < grant.attempt);
                    return (earlier.map(convert::previous_attempt_to_pb).collect(), false);
                }
            }
            Err(e) if e.is_transient() && patient => {}
            Err(e) => {
                warn!(run_id = %grant.run_id, error = %e, "cannot read earlier attempts; the lease goes out without them");
                return (Vec::new(), true);
            }
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
}

/// The lease message of `grant`, the one builder for a worker's lease and
/// a person's: the exact prompt (`cohort_core::cohort::prompt`), the
/// suffix, the grant's ids and token, the earlier attempts, and the run's
/// deadline. The deadline is the caller's rule: a worker's run has the
/// cohort's `run_timeout_secs` from the grant; a person's lease lasts to
/// the window's end (`LeaseGrant::expires_ms` of a manual grant).
pub fn lease_message(
    g: LeaseGrant,
    suffix: &str,
    deadline_unix_ms: i64,
    (previous_attempts, previous_attempts_unavailable): (Vec<pb::PreviousAttempt>, bool),
    traceparent: String,
) -> pb::Lease {
    pb::Lease {
        traceparent,
        prompt: prompt(&g.question_text, suffix),
        suffix: suffix.to_owned(),
        deadline_unix_ms,
        run_id: g.run_id,
        question_id: g.question_id,
        arm_id: g.arm_id,
        repeat: g.repeat,
        attempt: g.attempt,
        fencing_token: g.token,
        previous_attempts,
        previous_attempts_unavailable,
    }
}

/// The most results one `ReportResults` call may carry.
pub const MAX_RESULTS_PER_CALL: usize = 512;

/// Tunables of the coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long a lease lives without a heartbeat.
    pub lease_ttl_ms: i64,
    /// How often workers are told to heartbeat.
    pub heartbeat_interval_ms: u32,
    /// How often leases are expired and the window checked.
    pub reconcile_interval: Duration,
    /// How long a worker waits before asking again after an empty lease.
    pub empty_lease_retry_ms: u32,
    /// Whether workers journal their reports until the ledger says they
    /// are on disk.
    pub journal: JournalMode,
    /// The cluster token every call to the `Coordinator` service must carry
    /// (none: calls are not checked). `grpc.health.v1` stays open.
    pub auth: cohort_auth::RequireToken,
    /// TLS on the gRPC port, mutual when it names a client CA.
    pub tls: Option<cohort_auth::ServerTls>,
}

/// Whether workers keep a journal of their reports (ARCHITECTURE.md,
/// "Durable acknowledgements").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JournalMode {
    /// When the ledger says a crash can lose what it acknowledged
    /// ([`Ledger::acks_may_be_lost`]): Redis without `appendfsync always`.
    #[default]
    Auto,
    /// Always (a Redis whose replicas may take over, say).
    On,
    /// Never: an acknowledged report lost by the ledger is lost (and its
    /// run is executed again). For measuring what the journal costs.
    Off,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            lease_ttl_ms: 30_000,
            heartbeat_interval_ms: 5_000,
            reconcile_interval: Duration::from_millis(500),
            empty_lease_retry_ms: 200,
            journal: JournalMode::Auto,
            auth: cohort_auth::RequireToken::default(),
            tls: None,
        }
    }
}

/// The constant-size part of a frozen plan the coordinator serves.
#[derive(Debug, Clone)]
pub struct ServedPlan {
    pub cohort: String,
    pub manifest_sha256: String,
    /// The shared suffix, as the prompt uses it.
    pub suffix: String,
    /// The per-run deadline.
    pub run_timeout_ms: i64,
    /// Arm id -> pinned version label.
    pub pinned_versions: HashMap<String, String>,
    /// Arm id -> the other labels `cohort.toml` accepts from the start
    /// (`accepted_versions`; an arm without any may be left out). With the
    /// pinned label they fill the version cache until the first reconcile
    /// reads the ledger's, as the ledger was seeded with them.
    pub accepted_versions: HashMap<String, Vec<String>>,
}

/// An arm's accepted version labels and whether it is paused.
type ArmVersions = (Vec<String>, bool);

impl ServedPlan {
    /// The plan of a validated config, its suffix (as the prompt uses it)
    /// and its manifest's hash.
    pub fn from_config(
        config: &cohort_core::config::CohortConfig,
        suffix: String,
        manifest_sha256: String,
    ) -> ServedPlan {
        ServedPlan {
            cohort: config.name.clone(),
            manifest_sha256,
            suffix,
            run_timeout_ms: (config.run_timeout_secs as i64).saturating_mul(1000),
            pinned_versions: config.arms.iter().map(|a| (a.id.clone(), a.pinned_version.clone())).collect(),
            accepted_versions: config.accepted_versions.iter().map(|(a, v)| (a.clone(), v.clone())).collect(),
        }
    }
}

/// The gRPC `Coordinator` service over a ledger.
#[derive(Debug)]
pub struct CoordinatorService {
    ledger: Arc<dyn Ledger>,
    plan: Arc<ServedPlan>,
    clock: Arc<dyn Clock>,
    config: CoordinatorConfig,
    /// Arm id -> (accepted version labels, paused). A tokio RwLock because
    /// the reconcile loop holds it across the ledger call that refreshes it.
    arms: Arc<RwLock<HashMap<String, ArmVersions>>>,
    /// Distinguishes workers registered by this process.
    worker_seq: AtomicU64,
    /// What this process did, for `/metrics` ([`crate::metrics`]).
    metrics: Arc<CoordinatorMetrics>,
    /// The `cohort` span: this process's service of the cohort, from start
    /// to stop. Each run's trace links to it (a run is a trace of its own:
    /// one trace of a 48-hour cohort would be too large to read). Held so
    /// that it ends (and is exported) when the service stops.
    _cohort_span: tracing::Span,
    /// The cohort span's context, read once: every lease span links to it.
    cohort_link: cohort_telemetry::LinkTarget,
    /// Each run's trace and root span ids, derived from the manifest and
    /// the run (the manifest's part hashed once).
    run_roots: cohort_telemetry::RunRoots,
}

fn ledger_status(e: LedgerError) -> Status {
    match e {
        // Only an error that may heal is worth the worker's retries; a
        // permanent one (a script error, WRONGTYPE, a bad URL) stops it.
        LedgerError::Redis(_) if e.is_transient() => Status::unavailable(error_chain(&e)),
        LedgerError::Redis(_) => Status::internal(error_chain(&e)),
        LedgerError::NotSeeded => Status::failed_precondition(e.to_string()),
        // The caller's mistakes: retrying the same request cannot succeed.
        LedgerError::UnknownArm(_) | LedgerError::NotManual(_) | LedgerError::Unfit { .. } => {
            Status::invalid_argument(e.to_string())
        }
        _ => Status::internal(e.to_string()),
    }
}

impl CoordinatorService {
    pub fn new(
        ledger: Arc<dyn Ledger>,
        plan: ServedPlan,
        clock: Arc<dyn Clock>,
        config: CoordinatorConfig,
    ) -> CoordinatorService {
        ledger.set_recovery_grace(config.lease_ttl_ms);
        let arms = plan
            .pinned_versions
            .iter()
            .map(|(arm, pinned)| {
                let mut accepted = vec![pinned.clone()];
                accepted.extend(plan.accepted_versions.get(arm).into_iter().flatten().cloned());
                (arm.clone(), (accepted, false))
            })
            .collect();
        let cohort_span = info_span!(
            parent: None,
            "cohort",
            cohort.name = %plan.cohort,
            cohort.manifest_sha256 = %plan.manifest_sha256,
        );
        CoordinatorService {
            ledger,
            clock,
            config,
            cohort_link: cohort_telemetry::LinkTarget::of(&cohort_span),
            _cohort_span: cohort_span,
            run_roots: cohort_telemetry::RunRoots::new(&plan.manifest_sha256),
            arms: Arc::new(RwLock::new(arms)),
            plan: Arc::new(plan),
            worker_seq: AtomicU64::new(0),
            metrics: Arc::default(),
        }
    }

    /// The ledger's durability, as every answer to a worker carries it.
    fn durability(&self) -> Option<pb::Durability> {
        let d = self.ledger.durability();
        Some(pb::Durability { epoch: d.epoch, ack_seq: d.ack_seq, durable_seq: d.durable_seq })
    }

    /// Whether workers are asked to journal their reports.
    fn journal_reports(&self) -> bool {
        match self.config.journal {
            JournalMode::Auto => self.ledger.acks_may_be_lost(),
            JournalMode::On => true,
            JournalMode::Off => false,
        }
    }

    /// What the operations server answers for this coordinator: its
    /// metrics (the runs read from the ledger at each scrape) and its
    /// readiness, which follows the reconcile loop of [`run`].
    pub fn ops(&self) -> Arc<dyn OpsRole> {
        Arc::new(CoordinatorOps { ledger: Arc::clone(&self.ledger), metrics: Arc::clone(&self.metrics) })
    }

    /// One reconcile tick: expire leases, close the window if due, refresh
    /// the arms' accepted versions and pause states.
    pub async fn reconcile(&self) -> Result<(), LedgerError> {
        let now = self.clock.now_ms();
        let expired = self.ledger.expire(now).await?;
        if expired > 0 {
            warn!(expired, "leases expired: workers lost, attempts recorded as worker_lost");
        }
        let closed = self.ledger.close_window_if_due(now).await?;
        if closed > 0 {
            info!(closed, "collection window closed: pending runs finalised");
        }
        let status = self.ledger.status().await?;
        let mut arms = self.arms.write().await;
        for arm in status.arms {
            arms.insert(arm.id, (arm.accepted_versions, arm.paused.is_some()));
        }
        Ok(())
    }

    /// Validates and records final results in one ledger call, then checks
    /// the version labels of the accepted ones.
    async fn finish_results(
        &self,
        worker_id: &str,
        results: Vec<pb::ReportResultRequest>,
    ) -> Result<Vec<bool>, Status> {
        let mut batch = Vec::with_capacity(results.len());
        let mut spans = SpanBatch::with_capacity(results.len());
        // One span per result, a child of the worker's span the report
        // names; all of them timing the one ledger call that records them.
        let started = SystemTime::now();
        for r in results {
            let lease = convert::lease_ref_from_pb(r.lease.as_ref())?;
            let outcome = convert::outcome_from_pb(r.outcome)?;
            let attempt = convert::attempt_from_pb(r.attempt.as_ref())?;
            let observed_version = convert::version_from_pb(&r.observed_version)?;
            if !r.record_sha256.is_empty() && !cohort_core::hash::is_sha256_hex(&r.record_sha256) {
                return Err(Status::invalid_argument("record_sha256 must be 64 lowercase hex digits"));
            }
            let reason = r.reason.chars().take(1024).collect();
            let mut span = DirectSpan::under_traceparent(&r.traceparent, "record result", started);
            span.str("cohort.run.id", &lease.run_id).static_str("cohort.outcome", outcome.as_str());
            spans.push(span);
            batch.push((
                lease,
                RunResult { outcome, reason, record_sha256: r.record_sha256, observed_version, attempt },
            ));
        }
        let accepted = self.ledger.finish_many(worker_id, &batch, self.clock.now_ms()).await.map_err(ledger_status)?;
        self.metrics.results(&accepted);
        for (i, ok) in accepted.iter().enumerate() {
            spans.set_bool(i, "cohort.accepted", *ok);
        }
        spans.end();
        for ((lease, result), ok) in batch.iter().zip(&accepted) {
            if *ok {
                // Accepted, so the run id is one the ledger holds: it parses.
                let (_, arm, _) = RunId::split(&lease.run_id).map_err(|e| Status::internal(e.to_string()))?;
                self.check_version(&lease.run_id, arm, result.observed_version.as_deref())
                    .await
                    .map_err(ledger_status)?;
            }
        }
        Ok(accepted)
    }

    /// The span of one granted lease, from the ledger call that granted it
    /// (`started`) to the lease batch built: the top of this attempt's
    /// spans, a child of the run's root span (`cohort run`, made with the
    /// first attempt's lease and put in `ending`) in the run's own trace
    /// (both ids derived from the manifest and the run), so every attempt
    /// of a run, whichever coordinator process leased it, is one tree. The
    /// run's ids (cohort, run, question, arm) are the root's attributes,
    /// set once per run; the lease span carries what differs by attempt.
    /// Its context goes to the worker in the lease.
    fn lease_span(&self, worker_id: &str, g: &LeaseGrant, started: SystemTime, ending: &mut SpanBatch) -> DirectSpan {
        let root = self.run_roots.of(&g.run_id);
        if g.attempt == 1 {
            ending.push(cohort_telemetry::run_root_span(
                &root,
                &[
                    ("cohort.name", &self.plan.cohort),
                    ("cohort.run.id", &g.run_id),
                    ("cohort.question.id", &g.question_id),
                    ("cohort.arm.id", &g.arm_id),
                ],
                started,
            ));
        }
        let mut span = DirectSpan::under_root(&root, "lease run", started);
        span.int("cohort.attempt", i64::from(g.attempt)).str("cohort.worker.id", worker_id).link(&self.cohort_link);
        span
    }

    /// Pauses the arm of a run that reported a version label other than
    /// the accepted ones. A label that was not disclosed cannot be compared
    /// and never pauses.
    async fn check_version(&self, run_id: &str, arm: &str, observed: Option<&str>) -> Result<(), LedgerError> {
        let pinned = self.plan.pinned_versions.get(arm).cloned().unwrap_or_default();
        let reason = match self.arms.read().await.get(arm) {
            Some((accepted, paused)) => {
                cohort_ledger::version_pause_reason(run_id, &pinned, accepted, *paused, observed)
            }
            None => None,
        };
        let Some(reason) = reason else { return Ok(()) };
        warn!(arm, %reason, "pausing arm");
        self.ledger.pause_arm(arm, &reason, self.clock.now_ms()).await?;
        if let Some(entry) = self.arms.write().await.get_mut(arm) {
            entry.1 = true;
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn register(&self, request: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        let r = request.into_inner();
        if r.cohort != self.plan.cohort || r.manifest_sha256 != self.plan.manifest_sha256 {
            return Err(Status::failed_precondition(format!(
                "this coordinator serves cohort {:?} (manifest {}), not {:?} (manifest {})",
                self.plan.cohort, self.plan.manifest_sha256, r.cohort, r.manifest_sha256
            )));
        }
        let name: String =
            r.worker_name.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).take(64).collect();
        let seq = self.worker_seq.fetch_add(1, Ordering::Relaxed);
        self.metrics.worker_registered();
        let worker_id = format!("{}-{:x}-{seq}", if name.is_empty() { "worker" } else { &name }, self.clock.now_ms());
        info!(%worker_id, "worker registered");
        Ok(Response::new(pb::RegisterResponse {
            worker_id,
            lease_ttl_ms: self.config.lease_ttl_ms as u32,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            journal_reports: self.journal_reports(),
            durability: self.durability(),
            durable_after_ms: self
                .ledger
                .durable_after()
                .map_or(0, |d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX)),
        }))
    }

    async fn lease(&self, request: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseResponse>, Status> {
        let r = request.into_inner();
        if r.worker_id.is_empty() {
            return Err(Status::invalid_argument("worker_id is required: register first"));
        }
        let _timer = self.metrics.lease_timer();
        let max = r.max_runs.min(1_000);
        let now = self.clock.now_ms();
        let started = SystemTime::now();
        let batch = self.ledger.lease(&r.worker_id, max, now, self.config.lease_ttl_ms).await.map_err(ledger_status)?;
        self.metrics.leases_granted(batch.leases.len());
        let mut leases: Vec<pb::Lease> = Vec::with_capacity(batch.leases.len());
        // The lease spans and the runs' roots, ended together.
        let mut spans = SpanBatch::with_capacity(2 * batch.leases.len());
        for g in batch.leases {
            let span = self.lease_span(&r.worker_id, &g, started, &mut spans);
            let previous = previous_attempts(self.ledger.as_ref(), &g).await;
            let traceparent = span.traceparent();
            spans.push(span);
            let deadline = now + self.plan.run_timeout_ms;
            leases.push(lease_message(g, &self.plan.suffix, deadline, previous, traceparent));
        }
        spans.end();
        let retry_after_ms = if leases.is_empty() && !batch.closed { self.config.empty_lease_retry_ms } else { 0 };
        Ok(Response::new(pb::LeaseResponse {
            leases,
            retry_after_ms,
            cohort_done: batch.closed,
            durability: self.durability(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let r = request.into_inner();
        let leases = r.leases.iter().map(|l| convert::lease_ref_from_pb(Some(l))).collect::<Result<Vec<_>, _>>()?;
        let lost = self
            .ledger
            .heartbeat(&r.worker_id, &leases, self.clock.now_ms(), self.config.lease_ttl_ms)
            .await
            .map_err(ledger_status)?;
        Ok(Response::new(pb::HeartbeatResponse {
            lost: lost.iter().map(convert::lease_ref_to_pb).collect(),
            durability: self.durability(),
        }))
    }

    async fn report_attempt(
        &self,
        request: Request<pb::ReportAttemptRequest>,
    ) -> Result<Response<pb::ReportAttemptResponse>, Status> {
        let r = request.into_inner();
        let lease = convert::lease_ref_from_pb(r.lease.as_ref())?;
        let attempt = convert::attempt_from_pb(r.attempt.as_ref())?;
        let mut span = DirectSpan::under_traceparent(&r.traceparent, "record attempt", SystemTime::now());
        span.str("cohort.run.id", &lease.run_id).static_str("cohort.attempt.class", attempt.class.as_str());
        let verdict = self
            .ledger
            .report_attempt(&r.worker_id, &lease, &attempt, self.clock.now_ms())
            .await
            .map_err(ledger_status)?;
        span.bool("cohort.accepted", !matches!(verdict, AttemptVerdict::Stale));
        span.end();
        self.metrics.attempt(&verdict);
        let durability = self.durability();
        let response = match verdict {
            AttemptVerdict::Stale => pb::ReportAttemptResponse { accepted: false, durability, ..Default::default() },
            AttemptVerdict::Retry { .. } => {
                pb::ReportAttemptResponse { accepted: true, retry: true, durability, ..Default::default() }
            }
            AttemptVerdict::ArmPaused => {
                pb::ReportAttemptResponse { accepted: true, arm_paused: true, durability, ..Default::default() }
            }
            AttemptVerdict::Final(o) => pb::ReportAttemptResponse {
                accepted: true,
                final_outcome: convert::outcome_to_pb(o) as i32,
                durability,
                ..Default::default()
            },
        };
        Ok(Response::new(response))
    }

    async fn report_result(
        &self,
        request: Request<pb::ReportResultRequest>,
    ) -> Result<Response<pb::ReportResultResponse>, Status> {
        let r = request.into_inner();
        let worker_id = r.worker_id.clone();
        let accepted = self.finish_results(&worker_id, vec![r]).await?;
        Ok(Response::new(pb::ReportResultResponse {
            accepted: accepted.first().copied().unwrap_or(false),
            durability: self.durability(),
        }))
    }

    async fn report_results(
        &self,
        request: Request<pb::ReportResultsRequest>,
    ) -> Result<Response<pb::ReportResultsResponse>, Status> {
        let r = request.into_inner();
        if r.results.len() > MAX_RESULTS_PER_CALL {
            return Err(Status::invalid_argument(format!("at most {MAX_RESULTS_PER_CALL} results per call")));
        }
        let accepted = self.finish_results(&r.worker_id, r.results).await?;
        Ok(Response::new(pb::ReportResultsResponse { accepted, durability: self.durability() }))
    }

    async fn drain(&self, request: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        let r = request.into_inner();
        let mut requeued = 0;
        for l in &r.released {
            let lease = convert::lease_ref_from_pb(Some(l))?;
            if self.ledger.release(&r.worker_id, &lease, self.clock.now_ms()).await.map_err(ledger_status)? {
                requeued += 1;
            }
        }
        info!(worker_id = %r.worker_id, requeued, "worker drained");
        Ok(Response::new(pb::DrainResponse { requeued }))
    }
}

/// Serves the coordinator on `listener` until `shutdown` resolves, with its
/// reconcile loop and `grpc.health.v1` on the same port. The ledger must
/// already be seeded. Health says SERVING (for `""` and
/// `cohort.v1.Coordinator`) while the reconcile loop reaches the ledger,
/// NOT_SERVING from a failed reconcile until the next one succeeds, so a
/// readiness probe takes a coordinator whose ledger is gone out of
/// service.
pub async fn run(
    service: CoordinatorService,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    // TLS is done by cohort-auth (`ServerTls::incoming`), so a refused
    // handshake is logged with its peer; its configuration was built and
    // checked when its files were read.
    let mut server = tonic::transport::Server::builder();
    let tls = service.config.tls.clone();
    let service = Arc::new(service);
    let reconciler = Arc::clone(&service);
    let interval = service.config.reconcile_interval;
    // The reconcile loop is owned by this function: it is aborted when the
    // server returns, whatever the reason.
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<CoordinatorServer<CoordinatorService>>().await;
    let reconcile = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut serving = true;
        loop {
            tick.tick().await;
            let started = std::time::Instant::now();
            let ok = match reconciler.reconcile().await {
                Ok(()) => {
                    reconciler.metrics.reconciled(started.elapsed(), None);
                    true
                }
                Err(LedgerError::NotSeeded) => {
                    // The ledger held the cohort when this coordinator
                    // started (it seeds first): it lost it. Said once, at
                    // ERROR; nothing is leased meanwhile (every ledger call
                    // fails the same way) and the coordinator will not
                    // seed it again when restarted.
                    reconciler.metrics.reconciled(started.elapsed(), Some(LedgerError::NotSeeded.to_string()));
                    if serving {
                        error!(
                            cohort = %reconciler.plan.cohort,
                            "the ledger no longer holds the cohort it was serving (Redis emptied by FLUSHALL or \
                             restarted on an empty data folder?): nothing is leased; restore the ledger from its \
                             backup and restart the coordinator, which will not seed it again"
                        );
                    }
                    false
                }
                Err(e) => {
                    reconciler.metrics.reconciled(started.elapsed(), Some(e.to_string()));
                    warn!(error = %e, "reconcile failed; retrying on the next tick");
                    false
                }
            };
            if ok != serving {
                serving = ok;
                let status = if ok { ServingStatus::Serving } else { ServingStatus::NotServing };
                reporter.set_service_status("", status).await;
                reporter.set_service_status(COORDINATOR_SERVICE, status).await;
            }
        }
    });
    let auth = service.config.auth.clone();
    let router =
        server.add_service(health).add_service(InterceptedService::new(CoordinatorServer::from_arc(service), auth));
    let result = match tls {
        None => router.serve_with_incoming_shutdown(tokio_stream_listener(listener), shutdown).await,
        Some(tls) => {
            let incoming = tokio_stream::wrappers::ReceiverStream::new(tls.incoming(listener));
            router.serve_with_incoming_shutdown(incoming, shutdown).await
        }
    };
    reconcile.abort();
    result
}

/// The gRPC service name of the coordinator, as health checks name it.
pub const COORDINATOR_SERVICE: &str = "cohort.v1.Coordinator";

/// The listener as the stream of connections tonic serves, each with
/// TCP_NODELAY set (tonic's `TcpIncoming`, as the judge proxy serves): a
/// gRPC answer is a few small writes (headers, message, trailers), and
/// with Nagle's algorithm on, one waits for the peer to acknowledge the one
/// before, which a peer delays. Without it the lifecycle bench ran at half
/// the rate with the machine half idle (`cargo bench -p cohort-cli --bench
/// lifecycle`, issue 24). The TLS path sets it in `ServerTls::incoming`.
fn tokio_stream_listener(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod listener_tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

    use tokio_stream::StreamExt as _;

    use super::*;

    /// Proves every connection the coordinator accepts has TCP_NODELAY
    /// set (the socket option read back from the accepted socket), so no
    /// answer waits on Nagle's algorithm.
    #[tokio::test]
    async fn accepted_connections_have_nodelay_set() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut incoming = Box::pin(tokio_stream_listener(listener));
        for _ in 0..2 {
            let _client = tokio::net::TcpStream::connect(address).await.unwrap();
            let accepted = incoming.next().await.unwrap().unwrap();
            assert!(accepted.nodelay().unwrap(), "TCP_NODELAY on the accepted socket");
        }
    }
}

#[cfg(test)]
mod ledger_status_tests {
    use cohort_core::taxonomy::{AttemptClass, Outcome};
    use tonic::Code;

    use super::*;

    /// A result that does not fit is the caller's error; only a Redis error
    /// that may heal is `Unavailable` (the worker retries it), a permanent
    /// one is `Internal` (the worker stops with the message).
    #[test]
    fn ledger_errors_get_the_code_that_says_whether_to_retry() {
        let unfit = LedgerError::Unfit { run_id: "q1:a:1".into(), outcome: Outcome::NotRun, class: AttemptClass::Ok };
        assert_eq!(ledger_status(unfit).code(), Code::InvalidArgument);
        let gone = LedgerError::Redis(::redis::RedisError::from((::redis::ErrorKind::Io, "connection reset")));
        assert_eq!(ledger_status(gone).code(), Code::Unavailable);
        let config = ::redis::RedisError::from((::redis::ErrorKind::InvalidClientConfig, "bad url"));
        let status = ledger_status(LedgerError::Redis(config));
        assert_eq!(status.code(), Code::Internal);
        assert!(
            status.message().contains("would again: check the redis url") && status.message().contains(": bad url")
        );
    }
}

#[cfg(test)]
mod version_cache_tests {
    use super::*;

    /// Proves a label `cohort.toml` accepts (`accepted_versions`) does not
    /// pause its arm even before the first reconcile has read the ledger's
    /// labels (the cache starts from the plan, as the ledger was seeded),
    /// and that another label does.
    #[tokio::test]
    #[allow(clippy::unwrap_used)] // test code: a failure panics
    async fn the_version_cache_starts_with_the_accepted_labels_of_the_plan() {
        use cohort_ledger::conformance::{header, order, questions};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let ledger: Arc<dyn Ledger> = Arc::new(cohort_ledger::sqlite::SqliteLedger::open(&path).unwrap());
        let mut header = header();
        header.arms[0].accepted_versions = vec!["a-1-2026-06-26".into()];
        ledger.seed(&header, &questions(), &order(), 0).await.unwrap();
        let plan = ServedPlan {
            cohort: header.cohort.clone(),
            manifest_sha256: header.manifest_sha256.clone(),
            suffix: "Cite sources.".into(),
            run_timeout_ms: 60_000,
            pinned_versions: [("a".to_owned(), "a-1".to_owned()), ("b".to_owned(), "b-1".to_owned())].into(),
            accepted_versions: [("a".to_owned(), vec!["a-1-2026-06-26".to_owned()])].into(),
        };
        let clock = Arc::new(cohort_clock::ManualClock::at(1_000));
        let service = CoordinatorService::new(Arc::clone(&ledger), plan, clock, CoordinatorConfig::default());
        let paused = |arm: &'static str| {
            let ledger = Arc::clone(&ledger);
            async move { ledger.status().await.unwrap().arms.into_iter().find(|a| a.id == arm).unwrap().paused }
        };
        service.check_version("q1:a:1", "a", Some("a-1-2026-06-26")).await.unwrap();
        service.check_version("q2:a:1", "a", Some("a-1")).await.unwrap();
        assert_eq!(paused("a").await, None, "the pinned and the accepted label");
        service.check_version("q3:a:1", "a", Some("a-1-2026-07-01")).await.unwrap();
        service.check_version("q1:b:1", "b", Some("a-1-2026-06-26")).await.unwrap();
        assert_eq!(
            paused("a").await.as_deref(),
            Some("version changed: pinned a-1, observed a-1-2026-07-01 on run q3:a:1")
        );
        assert!(paused("b").await.is_some(), "another arm's accepted label is not this arm's");
    }
}

#[cfg(test)]
mod previous_attempts_tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

    use std::cell::Cell;

    use cohort_core::taxonomy::AttemptClass;
    use cohort_ledger::AttemptRecord;

    use super::*;

    fn grant(attempt: u32) -> LeaseGrant {
        LeaseGrant {
            run_id: "q24:a:1".into(),
            question_id: "q24".into(),
            arm_id: "a".into(),
            repeat: 1,
            attempt,
            token: 7,
            question_text: "What is known?".into(),
            expires_ms: 9_000,
        }
    }

    fn held(numbers: &[u32]) -> Vec<AttemptRecord> {
        numbers
            .iter()
            .map(|&attempt| AttemptRecord {
                class: AttemptClass::EmptyContent,
                http_status: 0,
                detail: String::new(),
                started_ms: 0,
                ended_ms: 0,
                observed_version: None,
                worker: "w".into(),
                attempt,
                token: u64::from(attempt),
                retry_after_ms: None,
            })
            .collect()
    }

    /// Proves the flake of `ledger_rollback` (a record listing attempt 2
    /// without attempt 1) is closed: a grant read while the ledger lacks an
    /// earlier attempt (Redis lost it in a rollback; the worker's journal
    /// puts it back within the grace) is read again until the list runs
    /// 1, 2, ..., so the lease carries every earlier attempt.
    #[tokio::test(start_paused = true)]
    async fn a_gap_in_the_earlier_attempts_is_read_again_until_it_fills() {
        let reads = Cell::new(0);
        let read = || {
            reads.set(reads.get() + 1);
            let numbers: &[u32] = if reads.get() < 3 { &[2] } else { &[2, 1, 3] };
            std::future::ready(Ok(held(numbers)))
        };
        let started = tokio::time::Instant::now();
        let (earlier, unavailable) = previous_attempts_from(&grant(3), read).await;
        let numbers: Vec<u32> = earlier.iter().map(|a| a.attempt).collect();
        assert_eq!((numbers, unavailable, reads.get()), (vec![2, 1], false, 3));
        assert_eq!(started.elapsed(), Duration::from_millis(150), "two waits, 50 and 100 ms");
    }

    /// Proves the wait is bounded: a gap that never fills goes out as read
    /// after about 3 s (the worker's record then says its list is
    /// incomplete), an unreachable ledger sends the lease out flagged, and
    /// a first attempt or a whole list costs one read or none.
    #[tokio::test(start_paused = true)]
    async fn a_gap_that_stays_or_a_ledger_that_stays_down_waits_about_three_seconds() {
        let reads = Cell::new(0);
        let started = tokio::time::Instant::now();
        let (earlier, unavailable) = previous_attempts_from(&grant(3), || {
            reads.set(reads.get() + 1);
            std::future::ready(Ok(held(&[2])))
        })
        .await;
        assert_eq!((earlier.len(), unavailable, reads.get()), (1, false, 7));
        assert_eq!(started.elapsed(), Duration::from_millis(3_150));

        let down = || {
            let e = ::redis::RedisError::from((::redis::ErrorKind::Io, "connection refused"));
            std::future::ready(Err(LedgerError::Redis(e)))
        };
        let started = tokio::time::Instant::now();
        assert_eq!(previous_attempts_from(&grant(2), down).await, (Vec::new(), true));
        assert_eq!(started.elapsed(), Duration::from_millis(3_150));

        reads.set(0);
        let count = || {
            reads.set(reads.get() + 1);
            std::future::ready(Ok(held(&[1])))
        };
        assert_eq!(previous_attempts_from(&grant(1), count).await, (Vec::new(), false));
        assert_eq!(previous_attempts_from(&grant(2), count).await.0.len(), 1);
        assert_eq!(reads.get(), 1, "no read for a first attempt, one for a whole list");
    }
}

#[cfg(test)]
mod lease_message_tests {
    use super::*;

    /// Proves the one lease builder (issue 22: `cohort submit` rebuilt a
    /// lease of its own): the prompt is the question, a blank line and the
    /// suffix; ids, token and earlier attempts come from the grant; the
    /// deadline is the caller's (a worker's run timeout, a person's window
    /// end), and a person's lease has no traceparent.
    #[test]
    fn a_lease_is_built_in_one_place() {
        let grant = LeaseGrant {
            run_id: "q1:m:1".into(),
            question_id: "q1".into(),
            arm_id: "m".into(),
            repeat: 1,
            attempt: 2,
            token: 41,
            question_text: "What is known?".into(),
            expires_ms: 9_000,
        };
        let earlier = vec![pb::PreviousAttempt { attempt: 1, ..Default::default() }];
        let lease = lease_message(grant.clone(), "Cite sources.", grant.expires_ms, (earlier, false), String::new());
        assert_eq!(lease.prompt, "What is known?\n\nCite sources.");
        assert_eq!((lease.run_id.as_str(), lease.fencing_token, lease.attempt), ("q1:m:1", 41, 2));
        assert_eq!((lease.deadline_unix_ms, lease.previous_attempts.len()), (9_000, 1));
        assert!(lease.traceparent.is_empty() && !lease.previous_attempts_unavailable);
    }
}
