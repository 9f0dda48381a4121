//! `grpc.health.v1` on the coordinator's port, through the official health
//! protocol's client (tonic-health's generated `HealthClient`): SERVING for
//! the server and for `cohort.v1.Coordinator`, NOT_FOUND for a service it
//! does not serve.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::sync::Arc;

use cohort_clock::ManualClock;
use cohort_coordinator::service::{self, COORDINATOR_SERVICE, CoordinatorConfig, CoordinatorService, ServedPlan};
use cohort_ledger::Ledger;
use cohort_ledger::conformance::{header, order, questions};
use cohort_ledger::sqlite::SqliteLedger;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const T0: i64 = 1_800_000_000_000;

#[tokio::test]
async fn the_coordinator_answers_grpc_health_checks() {
    let dir = tempfile::tempdir().unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.path().join("l.sqlite")).unwrap());
    ledger.seed(&header(), &questions(), &order(), T0).await.unwrap();
    let plan = ServedPlan {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        suffix: "Cite sources.".into(),
        run_timeout_ms: 60_000,
        pinned_versions: [("a".to_owned(), "a-1".to_owned()), ("b".to_owned(), "b-1".to_owned())].into(),
        accepted_versions: Default::default(),
    };
    let service = CoordinatorService::new(ledger, plan, Arc::new(ManualClock::at(T0)), CoordinatorConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(service::run(service, listener, async move {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    for name in ["", COORDINATOR_SERVICE] {
        let reply = health.check(HealthCheckRequest { service: name.into() }).await.unwrap().into_inner();
        assert_eq!(reply.status(), ServingStatus::Serving, "service {name:?}");
    }
    let unknown = health.check(HealthCheckRequest { service: "no.such.Service".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}
