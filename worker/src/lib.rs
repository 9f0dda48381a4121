//! The cohort worker: leases runs from the coordinator, carries each out
//! through its arm's adapter ([`execute`]), and reports attempts and
//! results. It keeps its leases alive with heartbeats and drops a run the
//! moment the coordinator says the lease is gone. The lease loop speaks
//! gRPC; what it hands a run is plain data ([`wire::RunLease`], and the
//! run reports a [`wire::Attempt`]), converted in [`wire`] alone.
//!
//! When the coordinator is away it retries with backoff, and reports what it
//! finished once the coordinator is back (a report that arrives after its
//! lease expired is discarded by the ledger, never counted twice). On
//! shutdown it drains: it stops leasing, lets running runs finish within a
//! grace period, and gives back the rest unfinished.
//!
//! When the coordinator says its ledger can lose what it acknowledged
//! (Redis without `appendfsync always`), every report is journaled to disk
//! before it is sent and kept until the ledger has it on disk; after the
//! ledger recovers from a restart (its epoch moves) the reporter sends the
//! journal again, and a journal left by a worker that died here is sent
//! before this one leases ([`journal`]; ARCHITECTURE.md, "Durable
//! acknowledgements").
//!
//! Every task it starts is owned (STYLE rule 9): the runs in one `JoinSet`,
//! the heartbeat and the reporter in another, watched by the main loop and
//! joined before [`run`] returns. A run task that panics gives its lease
//! back with a recorded `worker_lost` attempt; a heartbeat or reporter that
//! ends early stops the worker with the reason.
//!
//! Only outages are retried: a coordinator that is away or busy
//! (`Unavailable`, `DeadlineExceeded`, `ResourceExhausted`, and the codes a
//! broken connection produces) is called again with backoff; any other
//! answer (`Internal` for a permanent ledger error, `InvalidArgument`, ...)
//! stops the worker with [`WorkerError::Coordinator`], naming the call.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_client::CoordinatorClient;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinError, JoinSet};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tracing::{Instrument as _, debug, error, info, info_span, warn};

pub mod adapters;
pub mod capture;
pub mod execute;
pub mod journal;
pub mod judging;
pub mod metrics;
/// The judging passes live with the records (`cohort-records`).
pub use cohort_records::passes;
pub mod preflight;
pub mod record;
pub mod score;
pub mod score_file;
pub mod wire;

/// The spool and the clock of a [`RunContext`], for its callers.
pub use cohort_artifacts::Spool;
pub use cohort_clock::{Clock, SystemClock};
pub use execute::{ArmRuntime, InlinePass, Report, RunContext};

/// How a worker is set up.
#[derive(Debug)]
pub struct WorkerConfig {
    /// The coordinator's URL (`http://127.0.0.1:7100`).
    pub coordinator: String,
    /// A name operators recognise.
    pub name: String,
    /// How many runs at once.
    pub slots: u32,
    /// How long running runs may take to finish on shutdown.
    pub drain_grace: Duration,
    /// How long leasing stays paused while the artifact store refuses
    /// answers (they wait in the spool) before the worker stops: the spool
    /// is offered to the store again every [`STORE_PROBE_EVERY`], and
    /// leasing resumes once it takes it. Zero stops at the first refusal.
    pub store_outage_grace: Duration,
    pub context: RunContext,
    /// Arm id -> runtime; the worker runs only these arms.
    pub arms: HashMap<String, ArmRuntime>,
    /// The cluster token sent on every call to the coordinator.
    pub token: Option<cohort_auth::ClusterToken>,
    /// TLS to the coordinator (an `https://` URL), with the worker's own
    /// certificate for mutual TLS when it has one.
    pub tls: Option<cohort_auth::ClientTls>,
}

/// The coordinator's client as the worker holds it: every call carries the
/// cluster token (when there is one).
/// The coordinator's gRPC client with the address it was made for (the
/// warnings name it); it dereferences to the tonic client.
#[derive(Clone)]
struct Client {
    grpc: CoordinatorClient<InterceptedService<Channel, cohort_auth::SendToken>>,
    url: Arc<str>,
}

impl std::ops::Deref for Client {
    type Target = CoordinatorClient<InterceptedService<Channel, cohort_auth::SendToken>>;
    fn deref(&self) -> &Self::Target {
        &self.grpc
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.grpc
    }
}

/// What a worker did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSummary {
    pub leased: u64,
    pub reported: u64,
    /// Reports the coordinator did not accept (the lease had moved on).
    pub stale: u64,
    pub released: u64,
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid coordinator url {url:?}: {message}")]
    BadUrl { url: String, message: String },
    #[error("the coordinator refused to register this worker: {0}")]
    Refused(String),
    /// An answer retrying cannot fix (a permanent ledger error is
    /// `Internal`): the worker stopped leasing, gave its leases back, and
    /// says which call failed and how.
    #[error("the coordinator answered {call} with {code:?}: {message}; this is not an outage, so the worker stopped")]
    Coordinator { call: &'static str, code: tonic::Code, message: String },
    /// The heartbeat or the reporter panicked or ended early: without it
    /// leases expire or results go unreported, so the worker stopped.
    #[error("the worker's {task} task stopped: {message}")]
    TaskFailed { task: &'static str, message: String },
    /// The artifact store refused answers; they were kept in the spool (no
    /// system is called again for a run it answered) and the worker stopped
    /// leasing. `state` says where the spooled answers are now.
    #[error("the artifact store refused answers, kept in the spool {}: the worker stopped leasing; {state}", spool.display())]
    StoreFailed { spool: PathBuf, state: String },
    /// Answers spooled by an earlier run of the worker could not be moved
    /// into the artifact store, so the worker did not start leasing.
    #[error(
        "the spool {} holds answers the artifact store refuses ({source}): fix the store, then start the worker again",
        spool.display()
    )]
    Spool {
        spool: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The coordinator asked for a journal of reports (its ledger can lose
    /// acknowledged writes) and the journal's directory refused it, so the
    /// worker did not start leasing.
    #[error("cannot keep the journal of reports in {}: {source}", dir.display())]
    Journal {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Leases held now: run id -> (lease, the task acting on it: the run, or
/// the report of its panic, and whether that task has its report already:
/// then a lease the heartbeat finds gone is not a run to stop, only a
/// report on its way, which the ledger answers).
type Inflight = Arc<Mutex<HashMap<String, (pb::LeaseRef, AbortHandle, Arc<AtomicBool>)>>>;

/// Where any task sends the error that stops the worker (a coordinator
/// answer that is not an outage); the main loop stops at the first.
type Fatal = mpsc::UnboundedSender<WorkerError>;

/// What a run task ends with: its run id and what became of its lease.
type RunDone = (String, Ended);

/// What became of a run task's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Reported: accepted, or not (the lease had moved on).
    Reported(bool),
    /// Nothing reported and nothing to give back: the lease was handed
    /// back already (an arm this worker does not run) or is left to expire
    /// (the report of a panic that did not get through).
    Released,
    /// Nothing reported because the worker is stopping on a refusal: the
    /// lease stays held, so the drain gives it back.
    Held,
}

/// A final result on its way to the coordinator, and where to say whether
/// it was accepted.
type Outgoing = (pb::ReportResultRequest, oneshot::Sender<Option<bool>>);

/// The most results sent in one `ReportResults` call.
const REPORT_BATCH: usize = 64;

/// Runs the worker until the cohort is done or `shutdown` resolves.
pub async fn run(config: WorkerConfig, shutdown: impl Future<Output = ()>) -> Result<WorkerSummary, WorkerError> {
    let bad_url = |message: String| WorkerError::BadUrl { url: config.coordinator.clone(), message };
    let mut endpoint = Endpoint::from_shared(config.coordinator.clone())
        .map_err(|e| bad_url(e.to_string()))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30));
    if let Some(tls) = &config.tls {
        endpoint = endpoint.tls_config(tls.config()).map_err(|e| bad_url(format!("TLS: {e}")))?;
        // A refused client certificate looks like an outage to gRPC (the
        // connection closes): find it out before the retries would hide it.
        let uri = endpoint.uri();
        if let (Some(host), Some(port)) = (uri.host(), uri.port_u16().or(Some(443))) {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            tls.probe(host, port).await.map_err(|e| WorkerError::Refused(e.to_string()))?;
        }
    }
    // A lazy channel reconnects by itself after the coordinator restarts.
    let mut client = Client {
        grpc: CoordinatorClient::with_interceptor(
            endpoint.connect_lazy(),
            cohort_auth::SendToken::new(config.token.clone()),
        ),
        url: Arc::from(config.coordinator.as_str()),
    };
    tokio::pin!(shutdown);
    // Answers an earlier run could not store go into the store first: a
    // worker whose store fails leases nothing.
    flush_spool(&config.context)?;

    let register = pb::RegisterRequest {
        worker_name: config.name.clone(),
        arms: config.arms.keys().cloned().collect(),
        cohort: config.context.cohort.clone(),
        manifest_sha256: config.context.manifest_sha256.clone(),
    };
    let registered = tokio::select! {
        r = retry_until_ok(&client.url, || { let mut c = client.clone(); let req = register.clone(); async move { c.register(req).await } }) => r,
        () = &mut shutdown => return Ok(WorkerSummary::default()),
    };
    let registered = registered.map_err(|s| {
        WorkerError::Refused(if cohort_auth::is_tls_refusal(&s) {
            format!("TLS: {} (check --tls-ca, --tls-cert and --tls-key)", cohort_core::http_class::error_chain(&s))
        } else {
            s.message().to_owned()
        })
    })?;
    // What the spool held when leasing last went on, and since when the
    // store has refused answers (leasing paused).
    let mut kept_seen = config.context.spool.kept_here();
    let mut store_down_since: Option<tokio::time::Instant> = None;
    let worker_id = registered.worker_id.clone();
    info!(%worker_id, slots = config.slots, journal = registered.journal_reports, "worker registered");
    config.context.metrics.set_state(metrics::WorkerState::Registered);
    let journaling = Arc::new(if registered.journal_reports {
        // Reports journaled by workers that died here go out first.
        let root = journal_root(&config.context);
        tokio::select! {
            r = replay_leftovers(&client, &worker_id, &root) => r?,
            () = &mut shutdown => return Ok(WorkerSummary::default()),
        }
        let journal = journal::Journal::open(&root, &journal_tag(&worker_id))
            .map_err(|source| WorkerError::Journal { dir: root.clone(), source })?;
        Journaling::new(Some(journal), registered.durability.as_ref())
    } else {
        Journaling::new(None, registered.durability.as_ref())
    });

    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<WorkerError>();
    let inflight: Inflight = Arc::default();
    // The heartbeat and the reporter are owned like the runs: the loop
    // watches them (neither ends on its own while the worker runs, so one
    // that ends has failed) and shutdown joins them.
    let mut services: JoinSet<()> = JoinSet::new();
    let heartbeat = services.spawn(heartbeat_loop(
        client.clone(),
        worker_id.clone(),
        Arc::clone(&inflight),
        Duration::from_millis(u64::from(registered.heartbeat_interval_ms.max(50))),
        fatal_tx.clone(),
        Arc::clone(&journaling),
    ));
    // Final results go through one reporter task that sends whatever has
    // queued up as one `ReportResults` call: one round trip for many runs
    // when the worker is busy, no added delay when it is not.
    let (results_tx, results_rx) = mpsc::channel::<Outgoing>(1024);
    let reporter = services.spawn(reporter_loop(
        client.clone(),
        worker_id.clone(),
        results_rx,
        fatal_tx.clone(),
        Arc::clone(&journaling),
    ));
    let crew = Crew {
        client: client.clone(),
        worker_id: worker_id.clone(),
        inflight: Arc::clone(&inflight),
        results: results_tx,
        fatal: fatal_tx,
        context: Arc::new(config.context),
        arms: Arc::new(config.arms),
        journaling: Arc::clone(&journaling),
    };
    let mut tasks: JoinSet<RunDone> = JoinSet::new();
    let mut summary = WorkerSummary::default();
    let mut backoff = coordinator_backoff();
    let mut cohort_done = false;
    let mut failure: Option<WorkerError> = None;

    loop {
        // Collect finished tasks without waiting.
        while let Some(done) = tasks.try_join_next_with_id() {
            crew.account(&mut summary, &mut tasks, done);
        }
        if let Ok(e) = fatal_rx.try_recv() {
            failure = Some(e);
            break;
        }
        // The store refused an answer (it waits in the spool): lease
        // nothing while it fails; offer it the spool again, and lease again
        // once it takes it, within the operator's bound.
        let store_down = crew.context.spool.kept_here() > kept_seen && {
            let since = *store_down_since.get_or_insert_with(|| {
                warn!(
                    grace = ?config.store_outage_grace,
                    "the artifact store refuses answers (kept in the spool): leasing paused until it takes them"
                );
                tokio::time::Instant::now()
            });
            if flush_spool(&crew.context).is_ok() && crew.context.spool.held_in_memory() == 0 {
                info!(paused = ?since.elapsed(), "the artifact store took the spool: leasing again");
                kept_seen = crew.context.spool.kept_here();
                store_down_since = None;
                false
            } else {
                true
            }
        };
        if store_down && store_down_since.is_some_and(|since| since.elapsed() >= config.store_outage_grace) {
            break;
        }
        if cohort_done && tasks.is_empty() {
            break;
        }
        let free = config.slots.saturating_sub(tasks.len() as u32);
        let wait = if free == 0 || cohort_done {
            None
        } else if store_down {
            Some(STORE_PROBE_EVERY)
        } else {
            let request = pb::LeaseRequest { worker_id: worker_id.clone(), max_runs: free };
            let mut lease_client = client.clone();
            let lease_call = lease_client.lease(request);
            tokio::pin!(lease_call);
            let leased = tokio::select! {
                r = &mut lease_call => r,
                () = &mut shutdown => {
                    // The coordinator may already have granted runs: take
                    // its answer (briefly) and give them back at once, so no
                    // run stays leased to a worker that is stopping (it would
                    // expire later as a worker_lost attempt).
                    if let Ok(Ok(response)) = tokio::time::timeout(Duration::from_secs(2), &mut lease_call).await {
                        let released: Vec<pb::LeaseRef> = response
                            .into_inner()
                            .leases
                            .iter()
                            .map(|l| pb::LeaseRef { run_id: l.run_id.clone(), fencing_token: l.fencing_token })
                            .collect();
                        if !released.is_empty() {
                            let n = released.len();
                            let request = pb::DrainRequest { worker_id: worker_id.clone(), released };
                            if let Err(e) = client.drain(request).await {
                                warn!(error = %e.message(), leases = n, "drain failed: the leases will expire instead");
                            }
                        }
                    }
                    break;
                }
            };
            match leased {
                Ok(response) => {
                    let response = response.into_inner();
                    journaling.observe(response.durability.as_ref());
                    backoff = coordinator_backoff();
                    cohort_done = response.cohort_done;
                    let granted = response.leases.len();
                    for lease in response.leases {
                        summary.leased += 1;
                        crew.context.metrics.leased();
                        crew.spawn_run(&mut tasks, &lease);
                    }
                    (granted == 0 && !cohort_done)
                        .then(|| Duration::from_millis(u64::from(response.retry_after_ms.max(10))))
                }
                Err(status) if is_outage(&status) => {
                    let delay = backoff.next().unwrap_or(Duration::from_secs(2));
                    debug!(error = %status.message(), ?delay, "lease failed; the coordinator may be away");
                    Some(delay)
                }
                Err(status) => {
                    failure = Some(refusal("Lease", &status));
                    break;
                }
            }
        };
        // Done with nothing running: the select below would sleep forever.
        if cohort_done && tasks.is_empty() {
            break;
        }
        tokio::select! {
            () = &mut shutdown => break,
            Some(e) = fatal_rx.recv() => {
                failure = Some(e);
                break;
            }
            Some(ended) = services.join_next_with_id() => {
                // A task that stops on a refusal says why before it ends.
                failure = Some(fatal_rx.try_recv().unwrap_or_else(|_| service_failed(ended, heartbeat.id())));
                break;
            }
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => crew.account(&mut summary, &mut tasks, done),
            () = sleep_or_forever(wait), if wait.is_some() || tasks.is_empty() => {}
        }
    }
    if let Some(e) = &failure {
        error!(%worker_id, error = %e, "the worker is stopping");
    }

    // Drain: no new leases; running runs get the grace period.
    crew.context.metrics.set_state(metrics::WorkerState::Draining);
    let grace = tokio::time::sleep(config.drain_grace);
    tokio::pin!(grace);
    while !tasks.is_empty() {
        tokio::select! {
            Some(done) = tasks.join_next_with_id() => crew.account(&mut summary, &mut tasks, done),
            () = &mut grace => break,
        }
    }
    tasks.abort_all();
    while let Some(done) = tasks.join_next_with_id().await {
        crew.account(&mut summary, &mut tasks, done);
    }
    // Results already queued still go out before any lease is given back:
    // a completed answer is never orphaned (its run would be executed, and
    // the product called and charged, again). The reporter ends when the
    // queue is closed and empty; the heartbeat keeps the leases alive
    // meanwhile.
    let Crew { results, context, fatal, .. } = crew;
    drop((results, fatal));
    let flushed = tokio::time::timeout(REPORTER_FLUSH, async {
        loop {
            match services.join_next_with_id().await {
                Some(Ok((id, ()))) if id == reporter.id() => return,
                Some(ended) => {
                    let was_reporter = ended.as_ref().map_or_else(JoinError::id, |(id, ())| *id) == reporter.id();
                    let e = fatal_rx.try_recv().unwrap_or_else(|_| service_failed(ended, heartbeat.id()));
                    error!(error = %e, "a worker task failed while the queued results were sent");
                    failure.get_or_insert(e);
                    if was_reporter {
                        return;
                    }
                }
                None => return,
            }
        }
    })
    .await;
    if flushed.is_err() {
        reporter.abort();
        warn!("the coordinator did not take the queued results in time: their leases will expire");
    }
    // Refusals that came in while the worker drained: the first reason
    // it stopped for is the one returned.
    while let Ok(e) = fatal_rx.try_recv() {
        failure.get_or_insert(e);
    }
    let released: Vec<pb::LeaseRef> = lock(&inflight).drain().map(|(_, (l, _, _))| l).collect();
    if !released.is_empty() {
        let n = released.len() as u64;
        let request = pb::DrainRequest { worker_id: worker_id.clone(), released };
        match client.drain(request).await {
            Ok(r) => summary.released = u64::from(r.into_inner().requeued),
            Err(e) => warn!(error = %e.message(), leases = n, "drain failed: the leases will expire instead"),
        }
    }
    // The journal waits (briefly) for the ledger to have its reports on
    // disk; what is still held stays for the next worker here to replay.
    let settle = Duration::from_millis(u64::from(registered.durable_after_ms))
        + 2 * Duration::from_millis(u64::from(registered.heartbeat_interval_ms));
    settle_journal(&client, &worker_id, &journaling, (registered.durable_after_ms > 0).then_some(settle)).await;
    services.abort_all();
    while let Some(ended) = services.join_next_with_id().await {
        if let Err(e) = ended
            && e.is_panic()
        {
            failure.get_or_insert(service_failed(Err(e), heartbeat.id()));
        }
    }
    if context.spool.kept_here() > kept_seen {
        let spool = context.spool.dir().to_owned();
        let state = match flush_spool_patiently(&context).await {
            Ok(()) => "the store took them at shutdown; start the worker again".to_owned(),
            Err(e) => match context.spool.held_in_memory() {
                0 => format!("they go into the store when the worker starts again ({e})"),
                n => format!(
                    "{n} of them, which the spool's disk refused too, were held in memory only and are lost when \
                     this process exits: their runs were not reported and went back unfinished, to be run again \
                     once the store or the disk has room ({e})"
                ),
            },
        };
        failure.get_or_insert(WorkerError::StoreFailed { spool, state });
    }
    info!(%worker_id, ?summary, "worker stopped");
    match failure {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// How long a stopping worker waits for its queued results to be taken.
const REPORTER_FLUSH: Duration = Duration::from_secs(10);

/// The journals' directory: beside the spool, `DIR/.cohort/journal`.
fn journal_root(context: &RunContext) -> PathBuf {
    context.spool.dir().with_file_name("journal")
}

/// A directory name for this process's journal: the worker id, with
/// anything but `[A-Za-z0-9._-]` replaced.
fn journal_tag(worker_id: &str) -> String {
    let tag: String =
        worker_id.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    format!("{tag}-{}", std::process::id())
}

/// The journal of reports (when the coordinator asked for one) and what the
/// worker knows of the ledger's epoch (see [`journal`]).
#[derive(Debug)]
struct Journaling {
    journal: Option<Mutex<journal::Journal>>,
    /// The highest ledger epoch seen in an answer.
    epoch: std::sync::atomic::AtomicU64,
    /// Woken when the epoch moves: the reporter replays the journal.
    replay: tokio::sync::Notify,
}

impl Journaling {
    fn new(journal: Option<journal::Journal>, durability: Option<&pb::Durability>) -> Journaling {
        Journaling {
            journal: journal.map(Mutex::new),
            epoch: std::sync::atomic::AtomicU64::new(durability.map_or(1, |d| d.epoch)),
            replay: tokio::sync::Notify::new(),
        }
    }

    fn enabled(&self) -> bool {
        self.journal.is_some()
    }

    fn held(&self) -> usize {
        self.journal.as_ref().map_or(0, |j| lock(j).len())
    }

    /// Writes `entries` to disk before they are sent (on the blocking
    /// pool: it syncs). A journal the disk refuses is logged and the
    /// reports go out all the same: not sending them would lose them for
    /// sure.
    async fn write(self: &Arc<Self>, entries: Vec<journal::Entry>) -> Vec<journal::EntryId> {
        if !self.enabled() {
            return Vec::new();
        }
        let me = Arc::clone(self);
        let written = tokio::task::spawn_blocking(move || match &me.journal {
            Some(j) => lock(j).append(entries),
            None => Ok(Vec::new()),
        })
        .await;
        match written {
            Ok(Ok(ids)) => ids,
            Ok(Err(e)) => {
                error!(error = %e, "the journal of reports refused a write: these reports are sent unjournaled");
                Vec::new()
            }
            Err(e) => {
                error!(error = %e, "the journal's write task failed: these reports are sent unjournaled");
                Vec::new()
            }
        }
    }

    /// The ledger acknowledged `ids` in an answer carrying `durability`.
    fn acked(&self, ids: &[journal::EntryId], durability: Option<&pb::Durability>) {
        if let (Some(j), Some(d)) = (&self.journal, durability) {
            lock(j).acked(ids, journal::Ack { epoch: d.epoch, seq: d.ack_seq });
        }
        self.observe(durability);
    }

    /// What an answer says of the ledger: a new epoch wakes the replay;
    /// what is durable is forgotten.
    fn observe(&self, durability: Option<&pb::Durability>) {
        let Some(d) = durability else { return };
        let before = self.epoch.fetch_max(d.epoch, Ordering::Relaxed);
        if d.epoch > before {
            warn!(epoch = d.epoch, "the ledger recovered from a restart of its server: replaying the journal");
            self.replay.notify_one();
        }
        if let Some(j) = &self.journal
            && let Err(e) = lock(j).forget_durable(d.epoch, d.durable_seq)
        {
            warn!(error = %e, "the journal could not delete a segment whose reports are durable");
        }
    }
}

/// Sends the reports in `entries` again (results in batches, attempts one
/// by one), retrying outages; returns each one's id with the durability of
/// the answer that acknowledged it, or the refusal that stopped it.
async fn resend(
    client: &Client,
    worker_id: &str,
    entries: Vec<(journal::EntryId, journal::Entry)>,
) -> Result<Vec<(journal::EntryId, Option<pb::Durability>)>, (&'static str, tonic::Status)> {
    let mut acked = Vec::with_capacity(entries.len());
    let mut results = Vec::new();
    for (id, entry) in entries {
        match entry {
            journal::Entry::Result(r) => results.push((id, r)),
            journal::Entry::Attempt(mut a) => {
                a.worker_id = worker_id.to_owned();
                let r = retry_until_ok(&client.url, || {
                    let mut c = client.clone();
                    let r = a.clone();
                    async move { c.report_attempt(r).await }
                })
                .await
                .map_err(|s| ("ReportAttempt", s))?;
                acked.push((id, r.durability));
            }
        }
    }
    for batch in results.chunks(REPORT_BATCH) {
        let request = pb::ReportResultsRequest {
            worker_id: worker_id.to_owned(),
            results: batch.iter().map(|(_, r)| r.clone()).collect(),
        };
        let r = retry_until_ok(&client.url, || {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.report_results(r).await }
        })
        .await
        .map_err(|s| ("ReportResults", s))?;
        acked.extend(batch.iter().map(|(id, _)| (*id, r.durability)));
    }
    Ok(acked)
}

/// Replays the journals of workers that died on this machine (nobody holds
/// their lock) before this one leases, then deletes them. A journal whose
/// reports the coordinator refuses (not an outage) is kept and logged.
async fn replay_leftovers(client: &Client, worker_id: &str, root: &std::path::Path) -> Result<(), WorkerError> {
    let leftovers =
        journal::Journal::leftovers(root).map_err(|source| WorkerError::Journal { dir: root.to_owned(), source })?;
    for left in leftovers {
        let n = left.entries.len();
        let entries = left.entries.iter().cloned().enumerate().map(|(i, e)| (i as u64, e)).collect();
        match resend(client, worker_id, entries).await {
            Ok(_) => {
                info!(reports = n, journal = %left.dir.display(), "replayed the journal of a worker that stopped here");
                let dir = left.dir.clone();
                if let Err(e) = left.remove() {
                    warn!(error = %e, journal = %dir.display(), "a replayed journal could not be deleted");
                }
            }
            Err((call, status)) => {
                warn!(journal = %left.dir.display(), call, error = %status.message(), "a journal's reports were refused: it is kept");
            }
        }
    }
    Ok(())
}

/// At shutdown: asks the coordinator (empty heartbeats) until the ledger
/// has every journaled report on disk, for at most `settle` (none: the
/// ledger never says so); then deletes the journal if it is empty, or says
/// where it waits.
async fn settle_journal(client: &Client, worker_id: &str, journaling: &Arc<Journaling>, settle: Option<Duration>) {
    if !journaling.enabled() {
        return;
    }
    let deadline = tokio::time::Instant::now() + settle.unwrap_or_default();
    while journaling.held() > 0 && tokio::time::Instant::now() < deadline {
        let request = pb::HeartbeatRequest { worker_id: worker_id.to_owned(), leases: Vec::new() };
        if let Ok(r) = client.clone().heartbeat(request).await {
            journaling.observe(r.into_inner().durability.as_ref());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let Some(j) = &journaling.journal else { return };
    let held = lock(j).len();
    if held > 0 {
        warn!(
            reports = held,
            journal = %lock(j).dir().display(),
            "reports the ledger may not have on disk yet stay in the journal: the next worker started here replays them"
        );
    } else {
        let dir = lock(j).dir().to_owned();
        // Emptied in place: the directory goes when the process ends (the
        // lock is held until then).
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            debug!(error = %e, "the empty journal could not be deleted");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Moves what the spool holds into the artifact store.
fn flush_spool(context: &RunContext) -> Result<(), WorkerError> {
    let spool = &context.spool;
    match spool.flush_into(&context.store) {
        Ok(0) => Ok(()),
        Ok(blobs) => {
            info!(blobs, spool = %spool.dir().display(), "spooled answers moved into the artifact store");
            Ok(())
        }
        Err(source) => Err(WorkerError::Spool { spool: spool.dir().to_owned(), source }),
    }
}

/// [`flush_spool`], tried a few times with backoff (a store that blipped
/// may be back by the time the worker stops).
async fn flush_spool_patiently(context: &RunContext) -> Result<(), WorkerError> {
    let backoff = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(SPOOL_FLUSH_TRIES - 1)
        .build();
    let mut delays = backoff;
    loop {
        match flush_spool(context) {
            Ok(()) => return Ok(()),
            Err(e) => match delays.next() {
                Some(delay) => {
                    warn!(error = %e, ?delay, "the spool could not be moved into the store yet; trying again");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(e),
            },
        }
    }
}

/// How often a worker whose store refuses answers offers it the spool
/// again while leasing is paused.
pub const STORE_PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long leasing stays paused for a refusing store by default (the
/// worker's `--store-outage-secs`).
pub const DEFAULT_STORE_OUTAGE_GRACE: Duration = Duration::from_secs(300);

/// How often a stopping worker tries to move its spool into the store.
const SPOOL_FLUSH_TRIES: usize = 5;

/// How long the report of a panicked run may take; past it, its lease is
/// left to expire, which the ledger records as `worker_lost` all the same.
const PANIC_REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which background task ended, and how, as the error that stops the
/// worker (they never end on their own while it runs).
fn service_failed(ended: Result<(tokio::task::Id, ()), JoinError>, heartbeat: tokio::task::Id) -> WorkerError {
    let id = ended.as_ref().map_or_else(JoinError::id, |(id, ())| *id);
    let task = if id == heartbeat { "heartbeat" } else { "reporter" };
    let message = match ended {
        Ok(_) => "it ended while the worker was running".to_owned(),
        Err(e) if e.is_panic() => format!("it panicked: {}", panic_message(e)),
        Err(_) => "it was cancelled".to_owned(),
    };
    WorkerError::TaskFailed { task, message }
}

/// The text of a panic, when it has one.
fn panic_message(e: JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// What every run task shares: the coordinator, the worker's name, the
/// leases held, where final results and stopping errors go, the cohort and
/// its arms.
struct Crew {
    client: Client,
    worker_id: String,
    inflight: Inflight,
    results: mpsc::Sender<Outgoing>,
    fatal: Fatal,
    context: Arc<RunContext>,
    arms: Arc<HashMap<String, ArmRuntime>>,
    journaling: Arc<Journaling>,
}

impl Crew {
    /// Records a finished task (see [`Ended`]). A run
    /// task that panicked still holds its lease: it is taken out of the
    /// heartbeat at once and given back with a recorded attempt by a task
    /// of its own ([`Crew::report_panic`]). A task that was aborted (its
    /// lease lost, or the drain's grace over) is left as it is: a lost
    /// lease is already gone, a drained one is given back by the drain.
    fn account(
        &self,
        summary: &mut WorkerSummary,
        tasks: &mut JoinSet<RunDone>,
        done: Result<(tokio::task::Id, RunDone), JoinError>,
    ) {
        match done {
            Ok((_, (run_id, ended))) => {
                if ended != Ended::Held {
                    lock(&self.inflight).remove(&run_id);
                }
                match ended {
                    Ended::Reported(true) => summary.reported += 1,
                    Ended::Reported(false) => summary.stale += 1,
                    Ended::Released | Ended::Held => {}
                }
            }
            Err(e) if e.is_panic() => {
                let id = e.id();
                let held = {
                    let mut inflight = lock(&self.inflight);
                    let run_id = inflight.iter().find(|(_, (_, task, _))| task.id() == id).map(|(r, _)| r.clone());
                    run_id.and_then(|r| inflight.remove(&r).map(|(lease, _, _)| (r, lease)))
                };
                let message = panic_message(e);
                match held {
                    Some((run_id, lease)) => {
                        error!(%run_id, panic = %message, "a run task panicked: its lease is given back as worker_lost");
                        self.report_panic(tasks, run_id, lease);
                    }
                    None => error!(panic = %message, "a task of the worker panicked after its lease was gone"),
                }
            }
            Err(_) => {}
        }
    }

    /// Reports a panicked run's attempt as `worker_lost`: the run task, the
    /// worker's own code, died, so nothing usable was obtained from the
    /// system by this worker, as when a worker process dies mid-run (which
    /// the ledger records as `worker_lost` when the lease expires). Not
    /// `connection_error`, which says the system was unreachable, nor a
    /// class that blames the system for our fault. The retry policy then
    /// decides as for a lost worker. The panic's text stays in the log: it
    /// is the worker's, and may hold anything.
    fn report_panic(&self, tasks: &mut JoinSet<RunDone>, run_id: String, lease: pb::LeaseRef) {
        let now = self.context.clock.now_ms();
        let attempt = wire::Attempt {
            class: cohort_core::taxonomy::AttemptClass::WorkerLost,
            http_status: 0,
            detail: "the worker's run task panicked (the message is in the worker's log)".to_owned(),
            started_ms: now,
            ended_ms: now,
            observed_version: None,
            retry_after_ms: None,
        };
        let (client, results, fatal, worker_id) =
            (self.client.clone(), self.results.clone(), self.fatal.clone(), self.worker_id.clone());
        let journaling = Arc::clone(&self.journaling);
        let held = lease.clone();
        let id = run_id.clone();
        let handle = tasks.spawn(async move {
            let report =
                // The panicked task's lease number is not kept: the ledger numbers it.
                send_report(client, &results, &fatal, &worker_id, (&lease, 0), Report::Attempt(attempt), &journaling);
            let accepted = tokio::time::timeout(PANIC_REPORT_TIMEOUT, report).await.ok().flatten();
            (id, accepted.map_or(Ended::Released, Ended::Reported))
        });
        // Held until reported, so a drain meanwhile still gives it back.
        lock(&self.inflight).insert(run_id, (held, handle, Arc::new(AtomicBool::new(true))));
    }

    fn spawn_run(&self, tasks: &mut JoinSet<RunDone>, lease: &pb::Lease) {
        let lease = wire::RunLease::from_pb(lease);
        let lease_ref = lease.lease_ref();
        let (client, worker_id, context, arms) =
            (self.client.clone(), self.worker_id.clone(), Arc::clone(&self.context), Arc::clone(&self.arms));
        let (results, fatal) = (self.results.clone(), self.fatal.clone());
        let journaling = Arc::clone(&self.journaling);
        let (run_id, held) = (lease.run_id.clone(), lease_ref.clone());
        let answered = Arc::new(AtomicBool::new(false));
        let has_report = Arc::clone(&answered);
        let span = run_span(&lease);
        let recorded = span.clone();
        let handle = tasks.spawn(
            async move {
                let _in_flight = context.metrics.in_flight();
                let report = match arms.get(&lease.arm_id) {
                    Some(arm) => execute::execute(&context, arm, &lease, &worker_id).await,
                    None => {
                        // Registered for other arms only: give the lease back untouched.
                        let request =
                            pb::DrainRequest { worker_id: worker_id.clone(), released: vec![lease_ref.clone()] };
                        let _ = client.clone().drain(request).await;
                        return (lease.run_id, Ended::Released);
                    }
                };
                if let Report::NotKept { detail } = &report {
                    // No durable record: nothing to report. The lease goes
                    // back unfinished at once (not a worker_lost attempt
                    // later), and the spool's use stops the leasing.
                    warn!(run_id = %lease.run_id, %detail, "the run's answer could not be kept: its lease goes back");
                    let request = pb::DrainRequest { worker_id: worker_id.clone(), released: vec![lease_ref.clone()] };
                    let _ = client.clone().drain(request).await;
                    return (lease.run_id, Ended::Released);
                }
                has_report.store(true, Ordering::Relaxed);
                let record_sha256 = match &report {
                    Report::Result { record_sha256, outcome, .. } => {
                        recorded.record("cohort.outcome", outcome.as_str());
                        Some(record_sha256.clone())
                    }
                    Report::Attempt(attempt) => {
                        cohort_telemetry::genai::mark_error(&recorded, attempt.class.as_str());
                        None
                    }
                    Report::NotKept { .. } => None,
                };
                let number = lease.attempt;
                let accepted =
                    send_report(client, &results, &fatal, &worker_id, (&lease_ref, number), report, &journaling).await;
                if let Some(a) = accepted {
                    context.metrics.reported(record_sha256.is_some(), a);
                }
                // Only an accepted result's verdicts go into the pass: a discarded
                // (stale) report's record is not the run's.
                if accepted == Some(true)
                    && let (Some(pass), Some(sha)) = (&context.pass, record_sha256)
                {
                    merge_into_pass(&context, pass, &sha);
                }
                (lease.run_id, accepted.map_or(Ended::Held, Ended::Reported))
            }
            .instrument(span),
        );
        // Inserted before the main loop can join the task (same thread), so
        // `account` always finds it.
        lock(&self.inflight).insert(run_id, (held, handle, answered));
    }
}

/// The span of one attempt at a run on this worker, from the lease to the
/// coordinator's answer to its report: a child of the coordinator's lease
/// span, so it lies in the run's trace; the adapter call, source capture
/// and judge batches are its children.
fn run_span(lease: &wire::RunLease) -> tracing::Span {
    let span = info_span!(
        parent: None,
        "run",
        cohort.run.id = %lease.run_id,
        cohort.question.id = %lease.question_id,
        cohort.arm.id = %lease.arm_id,
        cohort.attempt = lease.attempt,
        cohort.outcome = tracing::field::Empty,
    );
    cohort_telemetry::propagation::set_parent_from_traceparent(&span, &lease.traceparent);
    span
}

/// Merges an accepted run's inline verdicts into the pass (`cohort run
/// --judge` writes the same pass as `cohort judge`). A failure is logged:
/// the verdicts stay in the record, and `cohort judge` fills the pass in.
/// Public for `cohort submit --judge`, whose manual runs go into the pass
/// the same way.
pub fn merge_into_pass(context: &RunContext, pass: &InlinePass, record_sha256: &str) {
    let record = match context.store.get(record_sha256) {
        Ok(Some(bytes)) => serde_json::from_slice::<record::RunRecord>(&bytes).map_err(|e| e.to_string()),
        Ok(None) => Err("the record is not in the artifact store".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    let merged = record.and_then(|record| {
        match passes::PassRun::from_record(record_sha256, &record, &pass.served_model_expected, pass.strict) {
            Some(run) if !run.claims.is_empty() => pass.store.merge_run(&run).map(|_| ()).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    });
    if let Err(e) = merged {
        warn!(record = record_sha256, error = %e, "the run's verdicts did not go into the pass; `cohort judge` fills it in");
    }
}

/// Reports until the coordinator answers (it may be restarting); an answer
/// that is not an outage stops the worker (`fatal`) and reports nothing.
/// The report carries the lease's attempt `number` (0: not known), as the
/// run record numbers the attempt: journaled with it, a replay after the
/// ledger lost writes puts the attempt back at that number.
async fn send_report(
    client: Client,
    results: &mpsc::Sender<Outgoing>,
    fatal: &Fatal,
    worker_id: &str,
    (lease, number): (&pb::LeaseRef, u32),
    report: Report,
    journaling: &Arc<Journaling>,
) -> Option<bool> {
    let accepted = match report {
        // Given back by the run task; never sent (see `spawn_run`).
        Report::NotKept { .. } => return None,
        Report::Attempt(attempt) => {
            let request = pb::ReportAttemptRequest {
                worker_id: worker_id.to_owned(),
                lease: Some(lease.clone()),
                attempt: Some(pb::Attempt { number, ..attempt.to_pb() }),
                traceparent: cohort_telemetry::propagation::traceparent(&tracing::Span::current()),
            };
            let ids = journaling.write(vec![journal::Entry::Attempt(request.clone())]).await;
            retry_until_ok(&client.url, || {
                let mut c = client.clone();
                let r = request.clone();
                async move { c.report_attempt(r).await }
            })
            .await
            .map(|r| {
                journaling.acked(&ids, r.durability.as_ref());
                if r.arm_paused {
                    log_arm_paused(&lease.run_id, request.attempt.as_ref());
                }
                r.accepted
            })
        }
        Report::Result { outcome, reason, record_sha256, observed_version, attempt } => {
            let request = pb::ReportResultRequest {
                worker_id: worker_id.to_owned(),
                lease: Some(lease.clone()),
                outcome: execute::outcome_wire(outcome),
                reason,
                record_sha256,
                observed_version,
                attempt: Some(pb::Attempt { number, ..attempt.to_pb() }),
                traceparent: cohort_telemetry::propagation::traceparent(&tracing::Span::current()),
            };
            let (tx, rx) = oneshot::channel();
            if results.send((request, tx)).await.is_err() {
                return None;
            }
            return rx.await.ok().flatten();
        }
    };
    match accepted {
        Ok(a) => Some(a),
        Err(status) => {
            warn!(run_id = %lease.run_id, error = %status.message(), "report refused");
            let _ = fatal.send(refusal("ReportAttempt", &status));
            None
        }
    }
}

/// Says that a run's attempt paused its arm (an `auth_error`: the system
/// refused our key). The run is back in its queue, not final; the operator
/// fixes the key and resumes the arm. The detail is the attempt's, already
/// scrubbed of the key.
fn log_arm_paused(run_id: &str, attempt: Option<&pb::Attempt>) {
    // A run id is `{question}:{arm}:{repeat}`.
    let arm = cohort_core::order::RunId::split(run_id).map(|(_, arm, _)| arm).unwrap_or_default();
    let detail = attempt.map(|a| a.detail.as_str()).unwrap_or_default();
    warn!(
        arm,
        run_id,
        detail,
        "arm paused: the system under test refused the credentials; the run is back in the queue. \
         Fix the arm's key, then run `cohort resume DIR --arm {arm} --ack \"key fixed\"`"
    );
}

/// The backoff between calls to a coordinator that is away: exponential
/// from 50 ms to 2 s, with jitter, without limit (callers bound it).
fn coordinator_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .build()
}

/// Sends queued final results in batches until the channel closes, or
/// until the coordinator refuses a batch with an answer that is not an
/// outage: then the worker stops (`fatal`), and the batch's runs are not
/// reported (their leases are given back or expire).
async fn reporter_loop(
    client: Client,
    worker_id: String,
    mut rx: mpsc::Receiver<Outgoing>,
    fatal: Fatal,
    journaling: Arc<Journaling>,
) {
    loop {
        let first = tokio::select! {
            next = rx.recv() => match next {
                Some(first) => first,
                None => return,
            },
            () = journaling.replay.notified() => {
                let epoch = journaling.epoch.load(Ordering::Relaxed);
                let entries = journaling.journal.as_ref().map(|j| lock(j).to_replay(epoch)).unwrap_or_default();
                let n = entries.len();
                match resend(&client, &worker_id, entries).await {
                    Ok(acked) => {
                        for (id, durability) in &acked {
                            journaling.acked(&[*id], durability.as_ref());
                        }
                        info!(reports = n, epoch, "journal replayed to the recovered ledger");
                    }
                    Err((call, status)) => {
                        warn!(error = %status.message(), reports = n, "the journal's replay was refused");
                        let _ = fatal.send(refusal(call, &status));
                        return;
                    }
                }
                continue;
            }
        };
        let mut batch = vec![first];
        while batch.len() < REPORT_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let request = pb::ReportResultsRequest {
            worker_id: worker_id.clone(),
            results: batch.iter().map(|(r, _)| r.clone()).collect(),
        };
        let ids = journaling.write(request.results.iter().cloned().map(journal::Entry::Result).collect()).await;
        let response = retry_until_ok(&client.url, || {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.report_results(r).await }
        })
        .await;
        match response {
            Ok(r) => {
                journaling.acked(&ids, r.durability.as_ref());
                for ((_, tx), accepted) in batch.into_iter().zip(r.accepted.into_iter().chain(std::iter::repeat(false)))
                {
                    let _ = tx.send(Some(accepted));
                }
            }
            Err(status) => {
                warn!(error = %status.message(), results = batch.len(), "results refused");
                let _ = fatal.send(refusal("ReportResults", &status));
                for (_, tx) in batch {
                    let _ = tx.send(None);
                }
                return;
            }
        }
    }
}

/// Calls `f` until it succeeds or fails with an error that retrying cannot
/// fix ([`retryable`]); outages (the coordinator is away or busy) are
/// retried with exponential backoff and jitter, without limit: the caller
/// bounds it (shutdown, task abort).
async fn retry_until_ok<T, F, Fut>(coordinator: &str, mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut backoff = coordinator_backoff();
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        match f().await {
            Ok(r) => {
                if warned.is_some() {
                    info!(coordinator, "coordinator reachable again");
                }
                return Ok(r.into_inner());
            }
            Err(s) if is_outage(&s) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(2));
                let error = cohort_core::http_class::error_chain(&s);
                // Said at WARN the first time and then every
                // UNREACHABLE_WARN_EVERY while it lasts, so an operator sees a
                // worker that cannot reach its coordinator (a wrong address,
                // http:// on a TLS port) without a flood.
                if warned.is_none_or(|at| at.elapsed() >= UNREACHABLE_WARN_EVERY) {
                    warn!(coordinator, %error, "cannot reach the coordinator; retrying");
                    warned = Some(tokio::time::Instant::now());
                } else {
                    debug!(coordinator, %error, ?delay, "coordinator unavailable; retrying");
                }
                tokio::time::sleep(delay).await;
            }
            Err(s) => return Err(s),
        }
    }
}

/// How often a worker that still cannot reach its coordinator says so
/// again at WARN.
const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(30);

/// Whether a failed gRPC call (to the coordinator, or to the judge proxy)
/// is an outage, worth calling again: the one rule of every gRPC client in
/// cohort (the worker's lease loop, heartbeats and reports; the judge
/// pre-flight of `cohort run` and `cohort judge`). The statuses a server
/// that is away, restarting or busy answers (`Unavailable`, which it also answers for a transient ledger
/// error; `DeadlineExceeded`; `ResourceExhausted`; `Aborted`; `Cancelled`,
/// which tonic gives a call whose timeout expired), and any status made on
/// this side of the wire from a broken connection (it carries the transport
/// error as its source; a status the coordinator sent has none), whatever
/// code tonic gave it (a reset mid-call can come out `Unknown` or
/// `Internal`). Everything the coordinator itself answers otherwise
/// (`Internal` for a permanent ledger error, `InvalidArgument`,
/// `FailedPrecondition`, ...) is not retried, and neither is a TLS
/// handshake the coordinator refused (no or an unknown client certificate,
/// a server certificate that does not verify): configuration, not outage.
pub fn is_outage(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    (status.source().is_some() && !cohort_auth::is_tls_refusal(status))
        || matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::ResourceExhausted
                | tonic::Code::Aborted
                | tonic::Code::Cancelled
        )
}

/// The error that stops the worker after the coordinator answered `call`
/// with `status`, which is not an outage.
fn refusal(call: &'static str, status: &tonic::Status) -> WorkerError {
    WorkerError::Coordinator { call, code: status.code(), message: status.message().to_owned() }
}

/// Sends the leases held now every `interval`; stops the runs whose lease
/// is gone (they must not report as final). An answer that is not an
/// outage stops the worker (`fatal`) and ends the heartbeat.
async fn heartbeat_loop(
    client: Client,
    worker_id: String,
    inflight: Inflight,
    interval: Duration,
    fatal: Fatal,
    journaling: Arc<Journaling>,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let leases: Vec<pb::LeaseRef> = lock(&inflight).values().map(|(l, _, _)| l.clone()).collect();
        // With nothing leased, a heartbeat still tells a journal what is durable.
        if leases.is_empty() && journaling.held() == 0 {
            continue;
        }
        let request = pb::HeartbeatRequest { worker_id: worker_id.clone(), leases };
        match client.clone().heartbeat(request).await {
            Ok(r) => {
                let r = r.into_inner();
                journaling.observe(r.durability.as_ref());
                let mut held = lock(&inflight);
                for lost in r.lost {
                    // A run whose report is on its way (the ledger may have
                    // taken it already) is left to its answer.
                    if held.get(&lost.run_id).is_some_and(|(_, _, answered)| answered.load(Ordering::Relaxed)) {
                        continue;
                    }
                    if let Some((_, handle, _)) = held.remove(&lost.run_id) {
                        warn!(run_id = %lost.run_id, "lease lost: stopping the run");
                        handle.abort();
                    }
                }
            }
            Err(e) if is_outage(&e) => debug!(error = %e.message(), "heartbeat failed; the coordinator may be away"),
            Err(e) => {
                let _ = fatal.send(refusal("Heartbeat", &e));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the retry rule on the statuses it must tell apart: what a
    /// coordinator that is away or busy answers is retried, what it answers
    /// for a permanent error is not, and a status tonic made from a broken
    /// connection is retried whatever its code.
    #[test]
    fn only_outages_of_the_coordinator_are_retried() {
        for s in [
            tonic::Status::unavailable("redis: connection refused"),
            tonic::Status::deadline_exceeded("slow"),
            tonic::Status::resource_exhausted("busy"),
            tonic::Status::cancelled("timeout expired"),
        ] {
            assert!(is_outage(&s), "{s:?}");
        }
        for s in [
            tonic::Status::internal("WRONGTYPE Operation against a key holding the wrong kind of value"),
            tonic::Status::invalid_argument("outcome does not fit its class"),
            tonic::Status::failed_precondition("not seeded"),
            tonic::Status::unknown("a coordinator's own unknown answer"),
            tonic::Status::unimplemented("no such call"),
        ] {
            assert!(!is_outage(&s), "{s:?}");
        }
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        let broken = tonic::Status::from_error(Box::new(reset));
        assert!(is_outage(&broken), "{broken:?}");
    }

    /// Proves that the error naming a refused call says the call, the code
    /// and the coordinator's message.
    #[test]
    fn a_refusal_names_the_call_code_and_message() {
        let e = refusal("Heartbeat", &tonic::Status::internal("lease script failed: ERR user_script:3"));
        let text = e.to_string();
        assert!(text.contains("Heartbeat") && text.contains("Internal") && text.contains("user_script:3"), "{text}");
    }
}
