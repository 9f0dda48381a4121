//! The operations endpoints of every role (SPEC section 10), across
//! processes: `cohort coordinator` and `cohort worker` with `--ops-listen
//! 127.0.0.1:0`, and `cohort judge-proxy` (whose HTTP face serves them),
//! each scraped over HTTP, each `/metrics` parsed by an independent parser
//! (the official Python client, `prometheus_client`, through
//! `scripts/check_metrics.py`), and the values checked against the ledger.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_support;
mod judge_proxy_support;

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster_support::{ARMS, Cluster, ClusterCohort, Product, SimCohort, cohort_bin, write_and_freeze_cohort};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_tests::RedisServer;
use serde_json::Value;

/// A safety bound only: the cohort normally takes a few seconds.
const DEADLINE: Duration = Duration::from_secs(180);
const QUESTIONS: usize = 12;
const TEAM_KEY: &str = "team-key-ops-endpoints-5d2c81";

/// `python3` with `prometheus_client` importable: installs it with pip
/// when missing (as `scripts/test.sh` does), and fails with a clear
/// message only if that fails.
fn python_with_prometheus_client() -> &'static str {
    let ready =
        || Command::new("python3").args(["-c", "import prometheus_client"]).output().is_ok_and(|o| o.status.success());
    if !ready() {
        let _ = Command::new("python3").args(["-m", "pip", "install", "--quiet", "prometheus-client"]).status();
    }
    assert!(
        ready(),
        "this test needs python3 with the `prometheus_client` package: `python3 -m pip install prometheus-client` failed"
    );
    "python3"
}

/// One HTTP/1.1 request on a fresh connection: (status, content type, body).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    s.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

/// `/metrics` of `addr`, parsed by `scripts/check_metrics.py`
/// (prometheus_client, plus the format's ordering rules): its families.
fn scrape(addr: &str, headers: &[(&str, &str)]) -> Value {
    let (status, content_type, text) = http(addr, "GET", "/metrics", headers, "");
    assert_eq!(status, 200, "{addr}/metrics: {text}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{addr}/metrics content type {content_type}");
    let script = cohort_tests::workspace_root().join("scripts/check_metrics.py");
    let mut child = Command::new(python_with_prometheus_client())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{addr}/metrics did not parse: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["families"].clone()
}

/// The value of the sample `name` whose labels include `labels`; panics
/// when there is none.
fn sample(families: &Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    try_sample(families, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?} in {families}"))
}

fn try_sample(families: &Value, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    families.as_object().unwrap().values().flat_map(|f| f["samples"].as_array().unwrap()).find_map(|s| {
        (s["name"] == name && labels.iter().all(|(k, v)| s["labels"][k] == *v)).then(|| s["value"].as_f64().unwrap())
    })
}

/// The sum of every sample `name` (all label sets).
fn total(families: &Value, name: &str) -> f64 {
    families
        .as_object()
        .unwrap()
        .values()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .filter(|s| s["name"] == name)
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

/// `/healthz` and `/readyz` both answer 200.
fn assert_healthy_and_ready(addr: &str, who: &str) {
    let (status, _, body) = http(addr, "GET", "/healthz", &[], "");
    assert_eq!(status, 200, "{who} /healthz: {body}");
    let (status, _, body) = http(addr, "GET", "/readyz", &[], "");
    assert_eq!(status, 200, "{who} /readyz: {body}");
}

/// The address after `ops listening on ` in a role's stdout file, once it
/// is there.
fn ops_address(stdout: &Path, deadline: Instant) -> String {
    loop {
        let text = std::fs::read_to_string(stdout).unwrap_or_default();
        if let Some(rest) = text.split("ops listening on ").nth(1) {
            return rest.split_whitespace().next().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no `ops listening on` line in {}:\n{text}", stdout.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cohort status --json` of the cohort.
fn status(dir: &Path, redis_url: &str) -> Value {
    let out = Command::new(cohort_bin())
        .args(["status", dir.to_str().unwrap(), "--json", "--redis", redis_url])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cohort status --json: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn arm<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["arms"].as_array().unwrap().iter().find(|a| a["id"] == id).unwrap()
}

/// Runs `cohort ARGS` and asserts it succeeded.
fn cohort(args: &[&str]) {
    let out = Command::new(cohort_bin()).args(args).output().unwrap();
    assert!(out.status.success(), "cohort {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Proves every role's `/metrics` is valid Prometheus text to an
/// independent parser and says what the ledger says, and that `/healthz`
/// and `/readyz` answer 200 on each:
/// - a sim cohort (two arms, injected refusals, failures and outages) runs
///   with arm `sim-b` paused, so the worker stays up once `sim-a` is done:
///   the worker's attempts by class equal the ledger's, class by class; its
///   runs leased and its accepted reports equal the attempts, and nothing
///   is in flight; the coordinator's leases granted equal them too, and its
///   runs are `sim-a` all final and `sim-b` all pending and paused;
/// - resumed, the cohort runs to the end: the coordinator's final runs by
///   arm and outcome equal the ledger's and add up to the plan, nothing is
///   pending or leased, its reconcile loop ran without failure, and every
///   Lease call was timed;
/// - the judge proxy, after one chat completion through its sim upstream,
///   has its families (attempts by class with that one `ok`, permits, the
///   upstream's latency histogram, the HTTP face's counters).
#[test]
fn every_role_serves_metrics_a_real_parser_reads_and_that_match_the_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    let sim = SimCohort {
        latency_ms: 5,
        refusal_rate: 0.15,
        failure_rate: 0.1,
        timeout_rate: 0.0,
        outage_rate: 0.25,
        concurrency: 4,
        max_attempts: 3,
    };
    let cohort_def =
        ClusterCohort { questions: QUESTIONS, product: Product::Sim(sim), concurrency: 4, max_attempts: 3 };
    write_and_freeze_cohort(&dir, &cohort_def);
    let per_arm = QUESTIONS as f64;
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let d = dir.to_str().unwrap();
    let mut cluster = Cluster::new(&dir, &tmp.path().join("logs"), &url, 4);
    let ops_args = vec!["--ops-listen".to_owned(), "127.0.0.1:0".to_owned()];
    cluster.coordinator_args = ops_args.clone();
    cluster.worker_args = ops_args;
    let deadline = Instant::now() + DEADLINE;

    cluster.start_coordinator();
    let coordinator = ops_address(&cluster.coordinator.as_ref().unwrap().stdout, deadline);
    cohort(&["pause", d, "--arm", ARMS[1], "--reason", "held back by the ops test", "--redis", &url]);
    cluster.start_worker();
    let worker = ops_address(&cluster.workers[0].stdout, deadline);

    // sim-a runs to the end; sim-b waits, paused, so the worker stays up.
    loop {
        let s = status(&dir, &url);
        if arm(&s, ARMS[0])["finished"].as_u64() == Some(QUESTIONS as u64) {
            break;
        }
        assert!(Instant::now() < deadline, "sim-a did not finish:\n{}", cluster.status_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let w = loop {
        let w = scrape(&worker, &[]);
        if sample(&w, "cohort_worker_runs_in_flight", &[]) == 0.0 {
            break w;
        }
        assert!(Instant::now() < deadline, "the worker still has runs in flight");
        std::thread::sleep(Duration::from_millis(50));
    };
    let s = status(&dir, &url);
    let mut ledger_attempts = 0.0;
    for class in AttemptClass::ALL {
        let recorded = s["attempts_by_class"][class.as_str()].as_f64().unwrap_or(0.0);
        ledger_attempts += recorded;
        let counted = sample(&w, "cohort_worker_attempts_total", &[("class", class.as_str())]);
        assert_eq!(counted, recorded, "attempts of class {class}: the worker counted {counted}, the ledger {recorded}");
    }
    assert!(ledger_attempts >= per_arm, "{s}");
    assert_eq!(sample(&w, "cohort_worker_runs_leased_total", &[]), ledger_attempts);
    let accepted = sample(&w, "cohort_worker_reports_total", &[("kind", "result"), ("verdict", "accepted")])
        + try_sample(&w, "cohort_worker_reports_total", &[("kind", "attempt"), ("verdict", "accepted")]).unwrap_or(0.0);
    assert_eq!(accepted, ledger_attempts, "every report accepted, none stale");
    assert_eq!(sample(&w, "cohort_worker_adapter_duration_seconds_count", &[("arm", ARMS[0])]), ledger_attempts);
    assert_eq!(sample(&w, "cohort_worker_ready", &[]), 1.0);
    assert!(w.get("cohort_worker_captures").is_some(), "the captures family is present: {w}");
    assert_healthy_and_ready(&worker, "worker");

    let c = scrape(&coordinator, &[]);
    assert_eq!(sample(&c, "cohort_coordinator_leases_granted_total", &[]), ledger_attempts);
    assert_eq!(sample(&c, "cohort_coordinator_runs", &[("arm", ARMS[0]), ("state", "final")]), per_arm);
    assert_eq!(sample(&c, "cohort_coordinator_runs", &[("arm", ARMS[1]), ("state", "pending")]), per_arm);
    assert_eq!(sample(&c, "cohort_coordinator_arm_paused", &[("arm", ARMS[1])]), 1.0);
    assert_eq!(total(&c, "cohort_coordinator_ledger_attempts"), ledger_attempts);
    assert_healthy_and_ready(&coordinator, "coordinator");

    // The rest of the cohort, to the end.
    cohort(&["resume", d, "--arm", ARMS[1], "--ack", "released by the ops test", "--redis", &url]);
    let failed = cluster.wait_for_workers(deadline, "ops endpoints");
    assert!(failed.is_empty(), "workers failed: {failed:?}");
    let s = status(&dir, &url);
    assert_eq!(s["done"], true, "{s}");
    let c = scrape(&coordinator, &[]);
    for a in ARMS {
        let mut finals = 0.0;
        for outcome in Outcome::ALL {
            let n = sample(&c, "cohort_coordinator_runs_final", &[("arm", a), ("outcome", outcome.as_str())]);
            let recorded = arm(&s, a)["by_outcome"][outcome.as_str()].as_f64().unwrap_or(0.0);
            assert_eq!(n, recorded, "arm {a}, outcome {outcome}");
            finals += n;
        }
        assert_eq!(finals, per_arm, "arm {a}: the final runs add up to the plan");
        assert_eq!(sample(&c, "cohort_coordinator_runs_planned", &[("arm", a)]), per_arm);
        assert_eq!(sample(&c, "cohort_coordinator_runs", &[("arm", a), ("state", "final")]), per_arm);
        assert_eq!(sample(&c, "cohort_coordinator_runs", &[("arm", a), ("state", "pending")]), 0.0);
        assert_eq!(sample(&c, "cohort_coordinator_runs", &[("arm", a), ("state", "leased")]), 0.0);
    }
    let all_attempts: f64 = s["attempts_by_class"].as_object().unwrap().values().map(|v| v.as_f64().unwrap()).sum();
    assert_eq!(sample(&c, "cohort_coordinator_leases_granted_total", &[]), all_attempts);
    assert!(sample(&c, "cohort_coordinator_lease_duration_seconds_count", &[]) >= all_attempts.min(1.0));
    assert!(sample(&c, "cohort_coordinator_reconcile_runs_total", &[]) > 0.0);
    assert_eq!(sample(&c, "cohort_coordinator_reconcile_failures_total", &[]), 0.0);
    assert_eq!(sample(&c, "cohort_coordinator_ledger_up", &[]), 1.0);
    assert_eq!(sample(&c, "cohort_coordinator_ready", &[]), 1.0);
    assert_healthy_and_ready(&coordinator, "coordinator");

    // The judge proxy: one chat completion through its sim upstream.
    let config = tmp.path().join("proxy.toml");
    std::fs::write(
        &config,
        "[[upstreams]]\nname = \"sim\"\nkind = \"sim\"\nrpm = 600\ntpm = 1000000\n\n\
         [[teams]]\nname = \"ops\"\nkey_env = \"OPS_TEAM_KEY\"\n\n\
         [[judges]]\nname = \"j\"\nupstream = \"sim\"\nmodel = \"cohort-sim-judge-1\"\n",
    )
    .unwrap();
    let (_proxy, _grpc, http_url) =
        judge_proxy_support::proxy(&config, &[("OPS_TEAM_KEY", TEAM_KEY)], tmp.path().join("proxy.log"));
    let proxy = http_url.trim_start_matches("http://").to_owned();
    let body = serde_json::json!({"model": "j", "messages": [{"role": "user", "content": "hello"}]}).to_string();
    let bearer = format!("Bearer {TEAM_KEY}");
    let headers = [("authorization", bearer.as_str()), ("content-type", "application/json")];
    let (status, _, reply) = http(&proxy, "POST", "/v1/chat/completions", &headers, &body);
    assert_eq!(status, 200, "{reply}");
    let p = scrape(&proxy, &[]);
    assert_eq!(sample(&p, "cohort_judge_proxy_attempts_total", &[("class", "ok")]), 1.0);
    assert_eq!(total(&p, "cohort_judge_proxy_attempts_total"), 1.0);
    assert_eq!(sample(&p, "cohort_judge_proxy_permits_granted_total", &[]), 1.0);
    assert_eq!(sample(&p, "cohort_judge_proxy_upstream_latency_seconds_count", &[("upstream", "sim")]), 1.0);
    for family in [
        "cohort_judge_proxy_permit_wait_seconds",
        "cohort_judge_proxy_served",
        "cohort_judge_proxy_http_connections_open",
    ] {
        assert!(p.get(family).is_some(), "{family} missing from the proxy's families: {p}");
    }
    assert_healthy_and_ready(&proxy, "judge proxy");
}
