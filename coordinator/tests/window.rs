//! The collection window, driven by a fake clock through the real gRPC
//! service: runs not started by the window's close end as
//! not_run(window_closed) and stay in the counts; a run already started
//! may still finish.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::sync::Arc;
use std::time::Duration;

use cohort_clock::ManualClock;
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService, ServedPlan};
use cohort_core::taxonomy::Outcome;
use cohort_ledger::conformance::{header, order, questions};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger, RunStateKind};
use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_client::CoordinatorClient;

const T0: i64 = 1_800_000_000_000;

/// Proves the window closes at first start + window_ms on the injected
/// clock: leases stop, every pending run becomes not_run(window_closed),
/// the in-flight run still reports, and planned = sum of outcomes.
#[tokio::test]
async fn runs_not_started_by_the_close_are_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.path().join("l.sqlite")).unwrap());
    ledger.seed(&header(), &questions(), &order(), T0).await.unwrap();
    let clock = Arc::new(ManualClock::at(T0));
    let plan = ServedPlan {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        suffix: "Cite sources.".into(),
        run_timeout_ms: 60_000,
        pinned_versions: [("a".to_owned(), "a-1".to_owned()), ("b".to_owned(), "b-1".to_owned())].into(),
        accepted_versions: Default::default(),
    };
    let config = CoordinatorConfig { reconcile_interval: Duration::from_millis(20), ..CoordinatorConfig::default() };
    let service = CoordinatorService::new(Arc::clone(&ledger), plan, clock.clone(), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(service::run(service, listener, async move {
        let _ = stopped.await;
    }));
    let mut client = CoordinatorClient::connect(format!("http://{addr}")).await.unwrap();
    let worker_id = client
        .register(pb::RegisterRequest {
            worker_name: "w".into(),
            arms: vec![],
            cohort: "conformance".into(),
            manifest_sha256: "a".repeat(64),
        })
        .await
        .unwrap()
        .into_inner()
        .worker_id;

    // Two runs start in the window; one finishes there, one is still
    // running when it closes.
    let leases =
        client.lease(pb::LeaseRequest { worker_id: worker_id.clone(), max_runs: 2 }).await.unwrap().into_inner();
    assert_eq!(leases.leases.len(), 2);
    assert!(leases.leases[0].prompt.ends_with("\n\nCite sources."), "prompt = question, blank line, suffix");
    let finish = |l: &pb::Lease, at: i64| pb::ReportResultRequest {
        worker_id: worker_id.clone(),
        lease: Some(pb::LeaseRef { run_id: l.run_id.clone(), fencing_token: l.fencing_token }),
        outcome: pb::Outcome::Completed as i32,
        reason: String::new(),
        record_sha256: String::new(),
        observed_version: String::new(),
        attempt: Some(pb::Attempt {
            class: pb::AttemptClass::Ok as i32,
            started_unix_ms: at,
            ended_unix_ms: at,
            ..Default::default()
        }),
        traceparent: String::new(),
    };
    clock.advance(1_000);
    assert!(client.report_result(finish(&leases.leases[0], T0 + 1_000)).await.unwrap().into_inner().accepted);

    // The window is 10 s on the conformance plan: move past it and let
    // the reconcile loop close it.
    clock.advance(header().window_ms);
    let mut closed = false;
    for _ in 0..200 {
        let s = ledger.status().await.unwrap();
        if s.by_outcome.get(&Outcome::NotRun) == Some(&6) {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the reconcile loop closed the window");
    let after =
        client.lease(pb::LeaseRequest { worker_id: worker_id.clone(), max_runs: 8 }).await.unwrap().into_inner();
    assert!(after.leases.is_empty() && after.cohort_done, "no lease after the close");
    assert!(
        client.report_result(finish(&leases.leases[1], T0 + 11_000)).await.unwrap().into_inner().accepted,
        "a run started in the window may finish after it"
    );

    let status = ledger.status().await.unwrap();
    assert!(status.done());
    assert_eq!(status.planned, 8);
    assert_eq!(status.by_outcome.values().sum::<u64>(), 8, "planned = sum of outcomes");
    assert_eq!(status.by_outcome.get(&Outcome::Completed), Some(&2));
    let runs = ledger.runs().await.unwrap();
    let not_run: Vec<_> = runs.iter().filter(|r| r.outcome == Some(Outcome::NotRun)).collect();
    assert_eq!(not_run.len(), 6);
    assert!(not_run.iter().all(|r| r.reason == "window_closed" && r.state == RunStateKind::Final && r.attempts == 0));
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
