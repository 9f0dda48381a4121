//! The cohort worker: leases runs from the coordinator, carries each out
//! through its arm's adapter ([`execute`]), and reports attempts and
//! results. It keeps its leases alive with heartbeats and drops a run the
//! moment the coordinator says the lease is gone.
//!
//! When the coordinator is away it retries with backoff, and reports what it
//! finished once the coordinator is back (a report that arrives after its
//! lease expired is discarded by the ledger, never counted twice). On
//! shutdown it drains: it stops leasing, lets running runs finish within a
//! grace period, and gives back the rest unfinished.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_client::CoordinatorClient;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

pub mod adapters;
pub mod capture;
pub mod execute;
pub mod passes;
pub mod preflight;
pub mod record;
pub mod score;

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
    pub context: RunContext,
    /// Arm id -> runtime; the worker runs only these arms.
    pub arms: HashMap<String, ArmRuntime>,
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
}

/// Leases held now: run id -> (lease, the task running it).
type Inflight = Arc<Mutex<HashMap<String, (pb::LeaseRef, AbortHandle)>>>;

/// A final result on its way to the coordinator, and where to say whether
/// it was accepted.
type Outgoing = (pb::ReportResultRequest, oneshot::Sender<Option<bool>>);

/// The most results sent in one `ReportResults` call.
const REPORT_BATCH: usize = 64;

/// Runs the worker until the cohort is done or `shutdown` resolves.
pub async fn run(config: WorkerConfig, shutdown: impl Future<Output = ()>) -> Result<WorkerSummary, WorkerError> {
    let endpoint = Endpoint::from_shared(config.coordinator.clone())
        .map_err(|e| WorkerError::BadUrl { url: config.coordinator.clone(), message: e.to_string() })?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30));
    // A lazy channel reconnects by itself after the coordinator restarts.
    let mut client = CoordinatorClient::new(endpoint.connect_lazy());
    tokio::pin!(shutdown);

    let register = pb::RegisterRequest {
        worker_name: config.name.clone(),
        arms: config.arms.keys().cloned().collect(),
        cohort: config.context.cohort.clone(),
        manifest_sha256: config.context.manifest_sha256.clone(),
    };
    let registered = tokio::select! {
        r = retry_until_ok(|| { let mut c = client.clone(); let req = register.clone(); async move { c.register(req).await } }) => r,
        () = &mut shutdown => return Ok(WorkerSummary::default()),
    };
    let registered = registered.map_err(|s| WorkerError::Refused(s.message().to_owned()))?;
    let worker_id = registered.worker_id.clone();
    info!(%worker_id, slots = config.slots, "worker registered");

    let inflight: Inflight = Arc::default();
    let heartbeat = tokio::spawn(heartbeat_loop(
        client.clone(),
        worker_id.clone(),
        Arc::clone(&inflight),
        Duration::from_millis(u64::from(registered.heartbeat_interval_ms.max(50))),
    ));
    // Final results go through one reporter task that sends whatever has
    // queued up as one `ReportResults` call: one round trip for many runs
    // when the worker is busy, no added delay when it is not.
    let (results_tx, results_rx) = mpsc::channel::<Outgoing>(1024);
    let mut reporter = tokio::spawn(reporter_loop(client.clone(), worker_id.clone(), results_rx));
    let context = Arc::new(config.context);
    let arms = Arc::new(config.arms);
    let mut tasks: JoinSet<(String, Option<bool>)> = JoinSet::new();
    let mut summary = WorkerSummary::default();
    let mut backoff = coordinator_backoff();
    let mut cohort_done = false;

    loop {
        // Collect finished tasks without waiting.
        while let Some(done) = tasks.try_join_next() {
            account(&mut summary, &inflight, done);
        }
        if cohort_done && tasks.is_empty() {
            break;
        }
        let free = config.slots.saturating_sub(tasks.len() as u32);
        let wait = if free == 0 || cohort_done {
            None
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
                    backoff = coordinator_backoff();
                    cohort_done = response.cohort_done;
                    let granted = response.leases.len();
                    for lease in response.leases {
                        summary.leased += 1;
                        spawn_run(&mut tasks, &inflight, &client, &results_tx, &worker_id, &context, &arms, lease);
                    }
                    (granted == 0 && !cohort_done)
                        .then(|| Duration::from_millis(u64::from(response.retry_after_ms.max(10))))
                }
                Err(status) => {
                    let delay = backoff.next().unwrap_or(Duration::from_secs(2));
                    debug!(error = %status.message(), ?delay, "lease failed; the coordinator may be away");
                    Some(delay)
                }
            }
        };
        // Done with nothing running: the select below would sleep forever.
        if cohort_done && tasks.is_empty() {
            break;
        }
        tokio::select! {
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => account(&mut summary, &inflight, done),
            () = sleep_or_forever(wait), if wait.is_some() || tasks.is_empty() => {}
        }
    }

    // Drain: no new leases; running runs get the grace period.
    let grace = tokio::time::sleep(config.drain_grace);
    tokio::pin!(grace);
    while !tasks.is_empty() {
        tokio::select! {
            Some(done) = tasks.join_next() => account(&mut summary, &inflight, done),
            () = &mut grace => break,
        }
    }
    tasks.abort_all();
    while let Some(done) = tasks.join_next().await {
        account(&mut summary, &inflight, done);
    }
    // Results already queued still go out before any lease is given back:
    // a completed answer is never orphaned (its run would be executed, and
    // the product called and charged, again). The reporter ends when the
    // queue is closed and empty.
    drop(results_tx);
    if tokio::time::timeout(REPORTER_FLUSH, &mut reporter).await.is_err() {
        reporter.abort();
        warn!("the coordinator did not take the queued results in time: their leases will expire");
    }
    let released: Vec<pb::LeaseRef> = lock(&inflight).drain().map(|(_, (l, _))| l).collect();
    if !released.is_empty() {
        let n = released.len() as u64;
        let request = pb::DrainRequest { worker_id: worker_id.clone(), released };
        match client.drain(request).await {
            Ok(r) => summary.released = u64::from(r.into_inner().requeued),
            Err(e) => warn!(error = %e.message(), leases = n, "drain failed: the leases will expire instead"),
        }
    }
    heartbeat.abort();
    info!(%worker_id, ?summary, "worker stopped");
    Ok(summary)
}

/// How long a stopping worker waits for its queued results to be taken.
const REPORTER_FLUSH: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Records a finished task: `Some(accepted)` when it reported.
fn account(
    summary: &mut WorkerSummary,
    inflight: &Inflight,
    done: Result<(String, Option<bool>), tokio::task::JoinError>,
) {
    if let Ok((run_id, reported)) = done {
        lock(inflight).remove(&run_id);
        match reported {
            Some(true) => summary.reported += 1,
            Some(false) => summary.stale += 1,
            None => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn_run(
    tasks: &mut JoinSet<(String, Option<bool>)>,
    inflight: &Inflight,
    client: &CoordinatorClient<Channel>,
    results: &mpsc::Sender<Outgoing>,
    worker_id: &str,
    context: &Arc<RunContext>,
    arms: &Arc<HashMap<String, ArmRuntime>>,
    lease: pb::Lease,
) {
    let lease_ref = pb::LeaseRef { run_id: lease.run_id.clone(), fencing_token: lease.fencing_token };
    let (client, worker_id, context, arms) =
        (client.clone(), worker_id.to_owned(), Arc::clone(context), Arc::clone(arms));
    let results = results.clone();
    let (run_id, held) = (lease.run_id.clone(), lease_ref.clone());
    let handle = tasks.spawn(async move {
        let report = match arms.get(&lease.arm_id) {
            Some(arm) => execute::execute(&context, arm, &lease, &worker_id).await,
            None => {
                // Registered for other arms only: give the lease back untouched.
                let request = pb::DrainRequest { worker_id: worker_id.clone(), released: vec![lease_ref.clone()] };
                let _ = client.clone().drain(request).await;
                return (lease.run_id, None);
            }
        };
        let record_sha256 = match &report {
            Report::Result { record_sha256, .. } => Some(record_sha256.clone()),
            Report::Attempt(_) => None,
        };
        let accepted = send_report(client, &results, &worker_id, &lease_ref, report).await;
        // Only an accepted result's verdicts go into the pass: a discarded
        // (stale) report's record is not the run's.
        if accepted == Some(true)
            && let (Some(pass), Some(sha)) = (&context.pass, record_sha256)
        {
            merge_into_pass(&context, pass, &sha);
        }
        (lease.run_id, accepted)
    });
    // Inserted before the main loop can join the task (same thread), so
    // `account` always finds it.
    lock(inflight).insert(run_id, (held, handle));
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

/// Reports until the coordinator answers (it may be restarting).
async fn send_report(
    client: CoordinatorClient<Channel>,
    results: &mpsc::Sender<Outgoing>,
    worker_id: &str,
    lease: &pb::LeaseRef,
    report: Report,
) -> Option<bool> {
    let accepted = match report {
        Report::Attempt(attempt) => {
            let request = pb::ReportAttemptRequest {
                worker_id: worker_id.to_owned(),
                lease: Some(lease.clone()),
                attempt: Some(attempt),
            };
            retry_until_ok(|| {
                let mut c = client.clone();
                let r = request.clone();
                async move { c.report_attempt(r).await }
            })
            .await
            .map(|r| {
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
                attempt: Some(attempt),
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
            Some(false)
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

/// Sends queued final results in batches until the channel closes.
async fn reporter_loop(client: CoordinatorClient<Channel>, worker_id: String, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(first) = rx.recv().await {
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
        let response = retry_until_ok(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.report_results(r).await }
        })
        .await;
        match response {
            Ok(r) => {
                for ((_, tx), accepted) in batch.into_iter().zip(r.accepted.into_iter().chain(std::iter::repeat(false)))
                {
                    let _ = tx.send(Some(accepted));
                }
            }
            Err(status) => {
                warn!(error = %status.message(), results = batch.len(), "results refused");
                for (_, tx) in batch {
                    let _ = tx.send(Some(false));
                }
            }
        }
    }
}

/// Calls `f` until it succeeds or fails with an error that retrying cannot
/// fix; transport errors (the coordinator is away) are retried with
/// exponential backoff and jitter, without limit: the caller bounds it
/// (shutdown, task abort).
async fn retry_until_ok<T, F, Fut>(mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut backoff = coordinator_backoff();
    loop {
        match f().await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::Unknown
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                ) =>
            {
                let delay = backoff.next().unwrap_or(Duration::from_secs(2));
                debug!(error = %s.message(), ?delay, "coordinator unavailable; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(s) => return Err(s),
        }
    }
}

/// Sends the leases held now every `interval`; stops the runs whose lease
/// is gone (they must not report as final).
async fn heartbeat_loop(client: CoordinatorClient<Channel>, worker_id: String, inflight: Inflight, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        let leases: Vec<pb::LeaseRef> = lock(&inflight).values().map(|(l, _)| l.clone()).collect();
        if leases.is_empty() {
            continue;
        }
        let request = pb::HeartbeatRequest { worker_id: worker_id.clone(), leases };
        match client.clone().heartbeat(request).await {
            Ok(r) => {
                let mut held = lock(&inflight);
                for lost in r.into_inner().lost {
                    if let Some((_, handle)) = held.remove(&lost.run_id) {
                        warn!(run_id = %lost.run_id, "lease lost: stopping the run");
                        handle.abort();
                    }
                }
            }
            Err(e) => debug!(error = %e.message(), "heartbeat failed; the coordinator may be away"),
        }
    }
}
