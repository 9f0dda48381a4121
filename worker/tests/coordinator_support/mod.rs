//! What the worker tests that need a real coordinator share (`defects`,
//! `records`): the gRPC coordinator on a seeded SQLite ledger, on a free
//! loopback port, with the conformance plan (8 runs of arms `a` and `b`, 3
//! attempts, 100 ms backoff). Included with `mod coordinator_support;`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cohort_clock::{SystemClock, now_ms};
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService, ServedPlan};
use cohort_ledger::Ledger;
use cohort_ledger::conformance::{header, order, questions};
use cohort_ledger::sqlite::SqliteLedger;

/// A running coordinator and its ledger.
pub struct Cluster {
    pub ledger: Arc<dyn Ledger>,
    pub url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Starts a coordinator in `dir` whose leases last `lease_ttl_ms`.
pub async fn cluster(dir: &Path, lease_ttl_ms: i64) -> Cluster {
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.join("l.sqlite")).unwrap());
    ledger.seed(&header(), &questions(), &order(), now_ms()).await.unwrap();
    let plan = ServedPlan {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        suffix: "Cite sources.".into(),
        run_timeout_ms: 60_000,
        pinned_versions: [("a".to_owned(), "a-1".to_owned()), ("b".to_owned(), "b-1".to_owned())].into(),
        accepted_versions: Default::default(),
    };
    let config = CoordinatorConfig {
        lease_ttl_ms,
        heartbeat_interval_ms: 50,
        reconcile_interval: Duration::from_millis(20),
        empty_lease_retry_ms: 20,
        ..CoordinatorConfig::default()
    };
    let service = CoordinatorService::new(Arc::clone(&ledger), plan, Arc::new(SystemClock), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(service::run(service, listener, async move {
        let _ = stopped.await;
    }));
    Cluster { ledger, url, stop, server }
}

impl Cluster {
    /// Stops the coordinator and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap().unwrap();
    }
}
