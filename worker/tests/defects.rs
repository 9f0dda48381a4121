//! The worker's defects of issue 11, each proven fixed in process over real
//! loopback gRPC:
//!
//! - a run task that panics gives its lease back with one recorded
//!   `worker_lost` attempt (it once stayed leased, renewed by the heartbeat,
//!   until the window closed), and the cohort ends;
//! - an artifact store that refuses an answer never makes the worker call
//!   the system again for that run: the answer waits in the spool, the run
//!   is final, the worker stops leasing, and the next start moves the spool
//!   into the store;
//! - a coordinator answer that is not an outage (`Internal`, as for a
//!   permanent ledger error) stops the worker with the call named, where it
//!   was once retried forever; `Unavailable` is still retried.
//!
//! The first two use the real coordinator on an SQLite ledger (as
//! `records.rs`); the last a fake coordinator that answers as scripted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod coordinator_support;

use coordinator_support::Cluster;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cohort_artifacts::{ArtifactStore, Backend, LocalBackend, Spool};
use cohort_clock::SystemClock;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::RunStateKind;
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_server::{Coordinator, CoordinatorServer};
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply};
use cohort_worker::{ArmRuntime, RunContext, WorkerConfig, WorkerError, WorkerSummary};
use tonic::{Request, Response, Status};

/// The run whose first attempt panics in `Panicky`.
const PANICKING_RUN: &str = "q2:a:1";

/// Answers every call, except that the first call for [`PANICKING_RUN`]
/// panics (a bug in an adapter, not an outage of the system). Counts the
/// calls per run.
#[derive(Debug, Default)]
struct Panicky {
    calls: Mutex<HashMap<String, u32>>,
}

#[async_trait]
impl Adapter for Panicky {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(request.run_id.clone()).or_default();
            *n += 1;
            *n
        };
        if request.run_id == PANICKING_RUN && n == 1 {
            panic!("a test adapter's bug, on its first call");
        }
        answer(&request.run_id)
    }
}

/// Answers every call and counts the calls per run.
#[derive(Debug, Default)]
struct Counting {
    calls: Mutex<HashMap<String, u32>>,
}

#[async_trait]
impl Adapter for Counting {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        *self.calls.lock().unwrap().entry(request.run_id.clone()).or_default() += 1;
        answer(&request.run_id)
    }
}

fn answer(run_id: &str) -> AdapterResponse {
    AdapterResponse {
        class: AttemptClass::Ok,
        http_status: 200,
        detail: String::new(),
        reply: Reply::Output(format!("The answer of {run_id}, with no citations.")),
        observed_version: None,
        usage: None,
        citations: cohort_core::scoring::ApiCitations::None,
        sources: Vec::new(),
        retry_after_ms: None,
    }
}

fn arm(id: &str) -> ArmConfig {
    ArmConfig {
        id: id.into(),
        label: id.to_uppercase(),
        adapter: AdapterKind::Command,
        pinned_version: format!("{id}-1"),
        vendor_lineage: "test".into(),
        concurrency: 2,
        optional: false,
        workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
        controls_not_disabled: Vec::new(),
        settings: serde_json::json!({}),
    }
}

fn arms(adapter: Arc<dyn Adapter>) -> HashMap<String, ArmRuntime> {
    ["a", "b"]
        .into_iter()
        .map(|id| (id.to_owned(), ArmRuntime { config: arm(id), adapter: Arc::clone(&adapter) }))
        .collect()
}

fn context(dir: &Path, store: ArtifactStore) -> RunContext {
    RunContext {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        run_timeout: Duration::from_secs(30),
        prices: None,
        store,
        spool: Spool::new(dir.join("spool")),
        clock: Arc::new(SystemClock),
        capturer: None,
        judge: None,
        pass: None,
        metrics: Default::default(),
    }
}

fn worker(url: &str, slots: u32, context: RunContext, arms: HashMap<String, ArmRuntime>) -> WorkerConfig {
    WorkerConfig {
        coordinator: url.to_owned(),
        name: "w".into(),
        slots,
        drain_grace: Duration::from_secs(5),
        store_outage_grace: Duration::ZERO,
        context,
        arms,
        token: None,
        tls: None,
    }
}

async fn run(config: WorkerConfig) -> Result<WorkerSummary, WorkerError> {
    tokio::time::timeout(Duration::from_secs(60), cohort_worker::run(config, std::future::pending()))
        .await
        .expect("the worker stops by itself")
}

/// A real coordinator on a seeded SQLite ledger (the conformance plan). The
/// lease ttl is far longer than any test, so an attempt it records was
/// reported, not expired.
async fn cluster(dir: &Path) -> Cluster {
    coordinator_support::cluster(dir, 600_000).await
}

/// Proves that a run task that panics on its first call gives its lease
/// back at once with one recorded `worker_lost` attempt held by this worker
/// (the lease ttl is ten minutes, so it was not expiry), is retried and
/// completes, while the worker goes on with the other runs and the cohort
/// ends with every run completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_run_gives_its_lease_back_with_a_worker_lost_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(dir.path()).await;
    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let adapter = Arc::new(Panicky::default());
    let summary =
        run(worker(&cluster.url, 4, context(dir.path(), store.clone()), arms(adapter.clone()))).await.unwrap();
    assert_eq!(summary.stale, 0, "{summary:?}");

    let runs = cluster.ledger.runs().await.unwrap();
    assert_eq!(runs.len(), 8);
    for run in &runs {
        assert_eq!((run.state, run.outcome), (RunStateKind::Final, Some(Outcome::Completed)), "{}", run.run_id);
        assert!(store.get(&run.record_sha256).unwrap().is_some(), "{}: the record is stored", run.run_id);
        let attempts = cluster.ledger.attempts(&run.run_id).await.unwrap();
        let classes: Vec<AttemptClass> = attempts.iter().map(|a| a.class).collect();
        if run.run_id == PANICKING_RUN {
            assert_eq!(classes, [AttemptClass::WorkerLost, AttemptClass::Ok]);
            assert!(attempts[0].detail.contains("panicked"), "{:?}", attempts[0].detail);
            assert!(!attempts[0].worker.is_empty(), "the attempt names the worker that held the lease");
            assert!(!attempts[0].detail.contains("test adapter's bug"), "the panic's text stays in the log");
        } else {
            assert_eq!(classes, [AttemptClass::Ok], "{}", run.run_id);
        }
    }
    let calls = adapter.calls.lock().unwrap().clone();
    assert_eq!(calls.get(PANICKING_RUN), Some(&2), "called again after the panic: nothing was obtained");
    assert!(calls.iter().filter(|(r, _)| *r != PANICKING_RUN).all(|(_, n)| *n == 1), "{calls:?}");
    cluster.stop().await;
}

/// A backend that refuses every write while `down` is set, and comes back
/// by itself after `up_after` refused writes when that is not 0 (an outage
/// that ends, without a clock).
#[derive(Debug)]
struct Switchable {
    down: AtomicBool,
    puts_refused: AtomicU32,
    up_after: u32,
    inner: LocalBackend,
}

/// A store that is down from the start (back after `up_after` refused
/// writes, when not 0), over a local backend in `dir`.
fn switchable(dir: &Path, up_after: u32) -> Arc<Switchable> {
    Arc::new(Switchable {
        down: AtomicBool::new(true),
        puts_refused: AtomicU32::new(0),
        up_after,
        inner: LocalBackend::new(dir.join("artifacts")),
    })
}

/// Every planned run of the cluster is completed, with one `ok` attempt,
/// its record and its output in `store`.
async fn every_run_completed_once_and_stored(cluster: &Cluster, store: &ArtifactStore) {
    let runs = cluster.ledger.runs().await.unwrap();
    assert_eq!(runs.len(), 8);
    for run in &runs {
        assert_eq!((run.state, run.outcome), (RunStateKind::Final, Some(Outcome::Completed)), "{}", run.run_id);
        let bytes = store.get(&run.record_sha256).unwrap().expect("every record is stored");
        let record: cohort_worker::record::RunRecord = serde_json::from_slice(&bytes).unwrap();
        let output = record.output_sha256.expect("a completed run has its output");
        assert!(store.get(&output).unwrap().is_some(), "{}: the output is stored", run.run_id);
        let attempts = cluster.ledger.attempts(&run.run_id).await.unwrap();
        assert_eq!(attempts.iter().map(|a| a.class).collect::<Vec<_>>(), [AttemptClass::Ok], "{}", run.run_id);
    }
}

impl Backend for Switchable {
    fn put(&self, sha256: &str, bytes: &[u8]) -> io::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            let refused = self.puts_refused.fetch_add(1, Ordering::SeqCst) + 1;
            if self.up_after > 0 && refused >= self.up_after {
                self.down.store(false, Ordering::SeqCst);
            }
            return Err(io::Error::other("the artifact store is down"));
        }
        self.inner.put(sha256, bytes)
    }

    fn get(&self, sha256: &str) -> io::Result<Option<Vec<u8>>> {
        self.inner.get(sha256)
    }
}

/// Proves the rule for an artifact store that refuses answers: the system
/// is called once per run, never again for a run it answered (a failed put
/// was once a `connection_error` attempt, so the product was called and
/// charged again). The first answer is tried in the store a few times,
/// then kept in the spool; the run is final by its hashes; the worker
/// stops leasing and says why (`StoreFailed`, naming the spool). Started
/// again with the store back, the worker moves the spool into the store
/// before it leases, and the cohort ends with every run completed once,
/// every record stored and the spool empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_answer_waits_in_the_spool_and_the_system_is_not_called_again() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(dir.path()).await;
    let backend = switchable(dir.path(), 0);
    let store = ArtifactStore::with_backend(backend.clone());
    let adapter = Arc::new(Counting::default());

    let stopped = run(worker(&cluster.url, 1, context(dir.path(), store.clone()), arms(adapter.clone()))).await;
    let Err(WorkerError::StoreFailed { spool, state }) = stopped else {
        panic!("expected the worker to stop on the store, got {stopped:?}")
    };
    assert_eq!(spool, dir.path().join("spool"));
    assert!(state.contains("when the worker starts again"), "{state}");
    assert!(backend.puts_refused.load(Ordering::SeqCst) > 2, "the put was tried again before spooling");
    let runs = cluster.ledger.runs().await.unwrap();
    let finals: Vec<_> = runs.iter().filter(|r| r.state == RunStateKind::Final).collect();
    assert_eq!(finals.len(), 1, "one answer, then no more leases: {runs:?}");
    let answered = finals[0];
    assert_eq!(answered.outcome, Some(Outcome::Completed));
    let attempts = cluster.ledger.attempts(&answered.run_id).await.unwrap();
    assert_eq!(attempts.iter().map(|a| a.class).collect::<Vec<_>>(), [AttemptClass::Ok]);
    assert_eq!(store.get(&answered.record_sha256).unwrap(), None, "the record is not in the store yet");
    let waiting = Spool::new(&spool).pending().unwrap();
    assert!(waiting.contains(&answered.record_sha256), "the record waits in the spool: {waiting:?}");
    assert_eq!(waiting.len(), 2, "the output and the record");

    backend.down.store(false, Ordering::SeqCst);
    let summary =
        run(worker(&cluster.url, 2, context(dir.path(), store.clone()), arms(adapter.clone()))).await.unwrap();
    assert_eq!(summary.stale, 0, "{summary:?}");
    assert!(Spool::new(&spool).pending().unwrap().is_empty(), "the spool went into the store");
    every_run_completed_once_and_stored(&cluster, &store).await;
    let calls = adapter.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 8, "{calls:?}");
    assert!(calls.values().all(|n| *n == 1), "each system called once per run: {calls:?}");
    cluster.stop().await;
}

/// Proves no run is final without a durable record (issue 23, a full
/// disk): with the artifact store down and the spool's disk refusing too,
/// the answered run is not reported (no final run, no attempt), its lease
/// goes back at once, the worker stops leasing and says why; started again
/// with room, the cohort ends with every run completed exactly once and
/// every record stored. The run whose answer could be kept nowhere is the
/// one run its system is called for twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_kept_nowhere_is_not_reported_and_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(dir.path()).await;
    let backend = switchable(dir.path(), 0);
    let store = ArtifactStore::with_backend(backend.clone());
    let adapter = Arc::new(Counting::default());
    // A spool under a regular file: its disk refuses every write.
    std::fs::write(dir.path().join("full"), b"").unwrap();
    let mut full = context(dir.path(), store.clone());
    full.spool = Spool::new(dir.path().join("full").join("spool"));

    let stopped = run(worker(&cluster.url, 1, full, arms(adapter.clone()))).await;
    let Err(WorkerError::StoreFailed { state, .. }) = stopped else {
        panic!("expected the worker to stop on the store, got {stopped:?}")
    };
    assert!(state.contains("were not reported and went back unfinished"), "{state}");
    let runs = cluster.ledger.runs().await.unwrap();
    assert!(runs.iter().all(|r| r.state != RunStateKind::Final), "a run is final without a durable record: {runs:?}");
    assert!(runs.iter().all(|r| r.state != RunStateKind::Leased), "the lease went back: {runs:?}");
    let answered: Vec<String> = adapter.calls.lock().unwrap().keys().cloned().collect();
    assert_eq!(answered.len(), 1, "one answer, then no more leases: {answered:?}");
    assert!(cluster.ledger.attempts(&answered[0]).await.unwrap().is_empty(), "nothing was reported for it");

    backend.down.store(false, Ordering::SeqCst);
    let summary =
        run(worker(&cluster.url, 2, context(dir.path(), store.clone()), arms(adapter.clone()))).await.unwrap();
    assert_eq!(summary.stale, 0, "{summary:?}");
    every_run_completed_once_and_stored(&cluster, &store).await;
    let calls = adapter.calls.lock().unwrap().clone();
    assert_eq!(calls.get(&answered[0]), Some(&2), "the answer kept nowhere is asked for again");
    assert!(calls.iter().filter(|(r, _)| **r != answered[0]).all(|(_, n)| *n == 1), "{calls:?}");
    cluster.stop().await;
}

/// Proves a store outage that ends does not take the worker out (issue
/// 23): the first answer waits in the spool, leasing pauses, the spool is
/// offered to the store again (the store comes back after a few refused
/// writes), leasing resumes, and the one run of the worker completes the
/// cohort: every run final once, every record stored, the spool empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasing_pauses_while_the_store_is_down_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster(dir.path()).await;
    // The output's tries, then two refused offers of the spool.
    let backend = switchable(dir.path(), 6);
    let store = ArtifactStore::with_backend(backend.clone());
    let adapter = Arc::new(Counting::default());
    let mut config = worker(&cluster.url, 1, context(dir.path(), store.clone()), arms(adapter.clone()));
    config.store_outage_grace = Duration::from_secs(60);
    let summary = run(config).await.unwrap();
    assert_eq!(summary.stale, 0, "{summary:?}");
    assert!(backend.puts_refused.load(Ordering::SeqCst) >= 6, "the store was down");
    assert!(Spool::new(dir.path().join("spool")).pending().unwrap().is_empty(), "the spool went into the store");
    every_run_completed_once_and_stored(&cluster, &store).await;
    let calls = adapter.calls.lock().unwrap().clone();
    assert!(calls.len() == 8 && calls.values().all(|n| *n == 1), "each system called once per run: {calls:?}");
    cluster.stop().await;
}

/// What the fake coordinator answers, and what it was sent.
#[derive(Debug, Default)]
struct Script {
    /// Lease calls answered `Unavailable` before the scripted answer.
    lease_unavailable: u32,
    /// Lease answers after those: `Internal` when set, else one run once.
    lease_internal: Option<&'static str>,
    /// `ReportResults` answers `Internal` with this message.
    results_internal: Option<&'static str>,
    lease_calls: AtomicU32,
    results_calls: AtomicU32,
    drained: Mutex<Vec<String>>,
    granted: AtomicBool,
}

#[derive(Debug, Clone)]
struct Fake(Arc<Script>);

#[tonic::async_trait]
impl Coordinator for Fake {
    async fn register(&self, _: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        Ok(Response::new(pb::RegisterResponse {
            worker_id: "w-1".into(),
            lease_ttl_ms: 600_000,
            heartbeat_interval_ms: 50,
            ..Default::default()
        }))
    }

    async fn lease(&self, _: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseResponse>, Status> {
        let n = self.0.lease_calls.fetch_add(1, Ordering::SeqCst);
        if n < self.0.lease_unavailable {
            return Err(Status::unavailable("redis: connection refused (transient)"));
        }
        if let Some(message) = self.0.lease_internal {
            return Err(Status::internal(message));
        }
        let leases = if self.0.granted.swap(true, Ordering::SeqCst) {
            Vec::new()
        } else {
            vec![pb::Lease {
                run_id: "q1:a:1".into(),
                question_id: "q1".into(),
                arm_id: "a".into(),
                repeat: 1,
                attempt: 1,
                fencing_token: 7,
                prompt: "Question 1?".into(),
                suffix: "Cite sources.".into(),
                ..pb::Lease::default()
            }]
        };
        Ok(Response::new(pb::LeaseResponse { leases, retry_after_ms: 20, ..Default::default() }))
    }

    async fn heartbeat(&self, _: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        Ok(Response::new(pb::HeartbeatResponse::default()))
    }

    async fn report_attempt(
        &self,
        _: Request<pb::ReportAttemptRequest>,
    ) -> Result<Response<pb::ReportAttemptResponse>, Status> {
        Ok(Response::new(pb::ReportAttemptResponse { accepted: true, ..Default::default() }))
    }

    async fn report_result(
        &self,
        _: Request<pb::ReportResultRequest>,
    ) -> Result<Response<pb::ReportResultResponse>, Status> {
        Ok(Response::new(pb::ReportResultResponse { accepted: true, ..Default::default() }))
    }

    async fn report_results(
        &self,
        request: Request<pb::ReportResultsRequest>,
    ) -> Result<Response<pb::ReportResultsResponse>, Status> {
        self.0.results_calls.fetch_add(1, Ordering::SeqCst);
        if let Some(message) = self.0.results_internal {
            return Err(Status::internal(message));
        }
        Ok(Response::new(pb::ReportResultsResponse {
            accepted: vec![true; request.into_inner().results.len()],
            ..Default::default()
        }))
    }

    async fn drain(&self, request: Request<pb::DrainRequest>) -> Result<Response<pb::DrainResponse>, Status> {
        let released = request.into_inner().released;
        self.0.drained.lock().unwrap().extend(released.iter().map(|l| l.run_id.clone()));
        Ok(Response::new(pb::DrainResponse { requeued: released.len() as u32 }))
    }
}

/// Serves `script` on a free loopback port; its URL.
async fn fake(script: Arc<Script>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    // Runs until the test's runtime ends.
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(CoordinatorServer::new(Fake(script)))
            .serve_with_incoming(incoming),
    );
    url
}

/// Proves that `Unavailable` (a transient ledger error) is retried and
/// `Internal` (a permanent one: a Lua error, WRONGTYPE) is not: the worker
/// calls Lease three times (two outages, then the refusal) and stops with
/// an error naming the call, the code and the coordinator's message.
#[tokio::test]
async fn internal_from_lease_stops_the_worker_and_unavailable_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let script = Arc::new(Script {
        lease_unavailable: 2,
        lease_internal: Some("lease script failed: WRONGTYPE Operation against a key holding the wrong kind of value"),
        ..Script::default()
    });
    let url = fake(Arc::clone(&script)).await;
    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let stopped = run(worker(&url, 2, context(dir.path(), store), arms(Arc::new(Counting::default())))).await;
    let Err(e @ WorkerError::Coordinator { call, code, .. }) = &stopped else {
        panic!("expected the worker to stop on the coordinator's answer, got {stopped:?}")
    };
    assert_eq!((*call, *code), ("Lease", tonic::Code::Internal));
    let message = e.to_string();
    assert!(message.contains("Lease") && message.contains("WRONGTYPE"), "{message}");
    assert_eq!(script.lease_calls.load(Ordering::SeqCst), 3, "two outages retried, the refusal not");
}

/// Proves that a refused `ReportResults` (`Internal`) stops the worker with
/// the call named, after one call (not retried), and that the run's lease
/// is given back by the drain rather than left to expire.
#[tokio::test]
async fn internal_from_report_results_stops_the_worker_and_gives_the_lease_back() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        Arc::new(Script { results_internal: Some("report script failed: ERR user_script:1"), ..Script::default() });
    let url = fake(Arc::clone(&script)).await;
    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let stopped = run(worker(&url, 2, context(dir.path(), store), arms(Arc::new(Counting::default())))).await;
    let Err(WorkerError::Coordinator { call, code, message }) = &stopped else {
        panic!("expected the worker to stop on the coordinator's answer, got {stopped:?}")
    };
    assert_eq!((*call, *code), ("ReportResults", tonic::Code::Internal));
    assert!(message.contains("user_script"), "{message}");
    assert_eq!(script.results_calls.load(Ordering::SeqCst), 1, "a refusal is not retried");
    assert_eq!(*script.drained.lock().unwrap(), ["q1:a:1"], "the unreported run's lease is given back");
}
