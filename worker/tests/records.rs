//! Run records end to end, in process over real loopback gRPC: a
//! coordinator on an SQLite ledger, the real worker loop, and a scripted
//! system under test whose first attempts are outages. A run retried after
//! an outage (or after a lost worker) must end with a record whose
//! `attempts` lists every attempt the ledger holds, in order, with the same
//! class, status, worker and times.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod coordinator_support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cohort_artifacts::ArtifactStore;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::RunStateKind;
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_client::CoordinatorClient;
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply};
use cohort_worker::record::{NOT_DISCLOSED, RECORD_VERSION, RunRecord, rfc3339_ms};
use cohort_worker::{ArmRuntime, RunContext, WorkerConfig};

/// Attempt 1 of every run: a 503. Attempt 2 of question q1's runs: a 429.
/// Anything else answers. Arm `a` reports its pinned label, arm `b` none.
#[derive(Debug)]
struct Scripted {
    version: Option<String>,
}

#[async_trait]
impl Adapter for Scripted {
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let answer = |class, http_status, detail: &str, reply| AdapterResponse {
            class,
            http_status,
            detail: detail.to_owned(),
            reply,
            observed_version: self.version.clone(),
            usage: None,
            citations: cohort_core::scoring::ApiCitations::None,
            sources: Vec::new(),
            retry_after_ms: None,
        };
        match (request.attempt, request.question_id.as_str()) {
            (1, _) => answer(AttemptClass::ServerError, 503, "HTTP 503: scripted outage", Reply::Nothing),
            (2, "q1") => answer(AttemptClass::RateLimited, 429, "HTTP 429: scripted rate limit", Reply::Nothing),
            _ => answer(AttemptClass::Ok, 200, "", Reply::Output("The answer, with no citations.".into())),
        }
    }
}

fn arm(id: &str, pinned: &str) -> ArmConfig {
    ArmConfig {
        id: id.into(),
        label: id.to_uppercase(),
        adapter: AdapterKind::Command,
        pinned_version: pinned.into(),
        vendor_lineage: "test".into(),
        concurrency: 2,
        optional: false,
        workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
        controls_not_disabled: Vec::new(),
        settings: serde_json::json!({}),
    }
}

/// Proves that runs retried after outages (503, then 429 for q1) and after
/// a lost worker end completed with a record that lists every attempt of
/// the run, oldest first, exactly as the ledger recorded them (number,
/// class, HTTP status, worker, start and end to the millisecond), marked
/// complete; that the final attempt is the record's own; and that a
/// system reporting no version is "not disclosed" on every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_runs_record_every_attempt_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // A short lease ttl so the abandoned lease below expires quickly.
    let cluster = coordinator_support::cluster(dir.path(), 400).await;
    let (ledger, url) = (Arc::clone(&cluster.ledger), cluster.url.clone());

    // A worker that leases one run and goes silent: its attempt becomes
    // worker_lost when the lease expires.
    let mut client = CoordinatorClient::connect(url.clone()).await.unwrap();
    let register = pb::RegisterRequest {
        worker_name: "silent".into(),
        arms: vec![],
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
    };
    let silent = client.register(register).await.unwrap().into_inner().worker_id;
    let abandoned = client
        .lease(pb::LeaseRequest { worker_id: silent.clone(), max_runs: 1 })
        .await
        .unwrap()
        .into_inner()
        .leases
        .remove(0);
    assert!(abandoned.previous_attempts.is_empty(), "a first attempt carries no earlier attempts");
    let mut lost = false;
    for _ in 0..500 {
        if ledger.attempts(&abandoned.run_id).await.unwrap().iter().any(|a| a.class == AttemptClass::WorkerLost) {
            lost = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(lost, "the abandoned lease expired as worker_lost");

    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let context = RunContext {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        run_timeout: Duration::from_secs(30),
        prices: None,
        store: store.clone(),
        spool: cohort_worker::Spool::new(dir.path().join("spool")),
        clock: Arc::new(cohort_worker::SystemClock),
        capturer: None,
        judge: None,
        pass: None,
        metrics: Default::default(),
    };
    let arms: HashMap<String, ArmRuntime> = [
        (
            "a".to_owned(),
            ArmRuntime { config: arm("a", "a-1"), adapter: Arc::new(Scripted { version: Some("a-1".into()) }) },
        ),
        ("b".to_owned(), ArmRuntime { config: arm("b", "b-1"), adapter: Arc::new(Scripted { version: None }) }),
    ]
    .into();
    let worker = WorkerConfig {
        coordinator: url,
        name: "w".into(),
        slots: 4,
        drain_grace: Duration::from_secs(5),
        store_outage_grace: Duration::ZERO,
        context,
        arms,
        token: None,
        tls: None,
    };
    let summary = tokio::time::timeout(Duration::from_secs(60), cohort_worker::run(worker, std::future::pending()))
        .await
        .expect("the cohort finishes")
        .unwrap();
    assert_eq!(summary.stale, 0, "{summary:?}");

    let runs = ledger.runs().await.unwrap();
    assert_eq!(runs.len(), 8);
    let mut shapes = Vec::new();
    for run in &runs {
        assert_eq!((run.state, run.outcome), (RunStateKind::Final, Some(Outcome::Completed)), "{}", run.run_id);
        let bytes = store.get(&run.record_sha256).unwrap().expect("the record is stored");
        let record: RunRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(record.record_version, RECORD_VERSION);
        let ledger_attempts = ledger.attempts(&run.run_id).await.unwrap();
        assert!(record.attempts_complete, "{}", run.run_id);
        assert_eq!(record.attempts.len(), ledger_attempts.len(), "{}", run.run_id);
        assert_eq!(record.attempt as usize, ledger_attempts.len(), "the record is the last attempt's");
        for (r, l) in record.attempts.iter().zip(&ledger_attempts) {
            assert_eq!(r.attempt, l.attempt, "{}", run.run_id);
            assert_eq!(r.class, l.class.to_string(), "{}", run.run_id);
            assert_eq!(r.http_status, Some(l.http_status).filter(|&s| s != 0));
            assert_eq!(r.detail, l.detail);
            assert_eq!(r.worker, l.worker);
            assert_eq!(
                (r.started_at.as_str(), r.ended_at.as_str()),
                (rfc3339_ms(l.started_ms).as_str(), rfc3339_ms(l.ended_ms).as_str())
            );
            assert_eq!(r.duration_ms, l.ended_ms - l.started_ms);
            if run.arm_id == "b" {
                assert_eq!(r.observed_version, NOT_DISCLOSED);
            }
        }
        // The final attempt is the record's own run times.
        let last = record.attempts.last().unwrap();
        assert_eq!(
            (last.started_at.as_str(), last.ended_at.as_str()),
            (record.started_at.as_str(), record.ended_at.as_str())
        );
        assert_eq!(last.class, record.attempt_class.as_str());
        let classes: Vec<&str> = record.attempts.iter().map(|a| a.class.as_str()).collect();
        shapes.push((run.run_id.clone(), classes.join(",")));
    }
    let shape = |id: &str| shapes.iter().find(|(r, _)| r == id).map(|(_, s)| s.clone()).unwrap();
    // Runs not leased to the silent worker: outages, then the answer.
    for run in ["q1:b:1", "q2:a:1", "q3:b:1", "q4:a:1"].into_iter().filter(|r| *r != abandoned.run_id) {
        let want = if run.starts_with("q1:") { "server_error,rate_limited,ok" } else { "server_error,ok" };
        assert_eq!(shape(run), want, "{run}");
    }
    // The abandoned run: lost first, then the script from attempt 2 on.
    let want = if abandoned.run_id.starts_with("q1:") { "worker_lost,rate_limited,ok" } else { "worker_lost,ok" };
    assert_eq!(shape(&abandoned.run_id), want);
    let record: RunRecord = serde_json::from_slice(
        &store.get(&runs.iter().find(|r| r.run_id == abandoned.run_id).unwrap().record_sha256).unwrap().unwrap(),
    )
    .unwrap();
    assert_eq!(record.attempts[0].worker, silent, "the lost attempt names the worker that held the lease");

    cluster.stop().await;
}
