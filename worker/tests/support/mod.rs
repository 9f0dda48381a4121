//! What the loopback adapter tests (`adapters_http_json`,
//! `adapters_responses`) share: scripted answers and the axum plumbing
//! that replays them, the request and prompt of a run, the key check, and
//! one lease run through the worker's `execute`. Each test file keeps its
//! own routes, arm and API bodies (the test data), and includes this with
//! `mod support;`.

// Each test binary includes the whole module and uses a different part.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use cohort_artifacts::ArtifactStore;
use cohort_core::config::ArmConfig;
use cohort_proto::v1 as pb;
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Turn};
use cohort_worker::record::RunRecord;
use cohort_worker::{ArmRuntime, Report, RunContext};
use serde_json::Value;

pub const PROMPT: &str = "What is known about topic 1? Cite sources.";
pub const SUFFIX: &str = "Cite sources.";

/// One scripted answer: status, extra headers, raw body.
#[derive(Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    /// Held this long before answering.
    pub delay: Duration,
}

pub fn ok(body: Value) -> Canned {
    Canned { status: 200, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

pub fn status(status: u16, body: Value) -> Canned {
    Canned { status, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

/// The next answer of `queue`; the last one repeats.
pub fn next(queue: &mut VecDeque<Canned>) -> Canned {
    if queue.len() > 1 { queue.pop_front().unwrap() } else { queue.front().cloned().unwrap() }
}

/// `c` as a JSON response, after its delay.
pub async fn answer(c: Canned) -> Response {
    tokio::time::sleep(c.delay).await;
    let mut r = (StatusCode::from_u16(c.status).unwrap(), c.body).into_response();
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    for (k, v) in c.headers {
        r.headers_mut().insert(k, v.parse().unwrap());
    }
    r
}

/// The value of header `name`, as text.
pub fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Serves `app` on a free loopback port; returns its `/v1` base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Runs until the test's runtime ends.
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// A request of run `q1:{arm}:1` with `turns`, its deadline `deadline`
/// from now.
pub fn request(arm: &str, turns: &[(&str, &str)], deadline: Option<Duration>) -> AdapterRequest {
    AdapterRequest {
        run_id: format!("q1:{arm}:1"),
        question_id: "q1".into(),
        attempt: 1,
        conversation: turns.iter().map(|(role, text)| Turn { role: (*role).into(), text: (*text).into() }).collect(),
        deadline: deadline.map(|d| tokio::time::Instant::now() + d),
    }
}

/// No response, detail or Debug shows `key`.
pub fn keyless(r: &AdapterResponse, key: &str) {
    assert!(!format!("{r:?}").contains(key), "the key leaked: {r:?}");
}

/// Runs one lease of arm `arm` (run `q1:{arm.id}:1`) through the worker's
/// `execute` with `adapter` and a per-run deadline of `timeout`; the
/// report and the stored record.
pub async fn execute(arm: ArmConfig, adapter: Arc<dyn Adapter>, timeout: Duration) -> (Report, Option<RunRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let ctx = RunContext {
        cohort: "c".into(),
        manifest_sha256: "a".repeat(64),
        run_timeout: timeout,
        prices: None,
        store: store.clone(),
        spool: cohort_worker::Spool::new(dir.path().join("spool")),
        clock: Arc::new(cohort_worker::SystemClock),
        capturer: None,
        judge: None,
        pass: None,
        metrics: Default::default(),
    };
    let lease = pb::Lease {
        run_id: format!("q1:{}:1", arm.id),
        question_id: "q1".into(),
        arm_id: arm.id.clone(),
        repeat: 1,
        attempt: 1,
        prompt: PROMPT.into(),
        suffix: SUFFIX.into(),
        ..pb::Lease::default()
    };
    let runtime = ArmRuntime { config: arm, adapter };
    let report =
        cohort_worker::execute::execute(&ctx, &runtime, &cohort_worker::wire::RunLease::from_pb(&lease), "w1").await;
    let record = match &report {
        Report::Result { record_sha256, .. } => {
            Some(serde_json::from_slice(&store.get(record_sha256).unwrap().unwrap()).unwrap())
        }
        Report::Attempt(_) | Report::NotKept { .. } => None,
    };
    (report, record)
}
