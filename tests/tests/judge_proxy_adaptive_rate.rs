//! Two `cohort judge-proxy` replicas on one Redis, configured at twice the
//! provider's real quota (1200 rpm against the mock's 600, a quota someone
//! else also uses, or a wrong config), with demand at the configured rate.
//! Proves (and prints): with the provider's `x-ratelimit-*` headers (as
//! OpenAI sends them), after the first ten seconds upstream 429s are at
//! most 5% of upstream calls and at least 90% of the real quota is used;
//! and with bare 429s (no `Retry-After`, no `x-ratelimit-*`: a front in
//! this test strips them from the mock's answers), the controller of
//! `cohort_judge_proxy::limiter::rate` cuts the rate below the configured
//! one, draws at most 5% 429s after ten seconds, and uses at least 75% of
//! the real quota there.
//!
//! Why 75% and not the target: this is what holds on a loaded CI machine.
//! The controller cuts to 97% of what the provider was measured to admit
//! and holds it for a minute: 97.0% and 90.0% after ten seconds in two
//! runs on a shared 2-core machine, with 0 429s; a stalled second can read
//! low and cut deeper (never below half per cut). The old sawtooth used
//! 52% with bare 429s (it cut on every new epoch while the provider's
//! bucket stayed empty, down to its floor, then climbed back at 0.5%/s),
//! so 75% still tells the two apart. The figure, over 90 s and with a
//! limit that drops, is the benchmark's: `cargo bench -p
//! cohort-judge-proxy --bench adaptive_rate`.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use std::time::Duration;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use cohort_tests::RedisServer;
use judge_proxy_support::{jittered_arrivals, mock, proxy};
use serde_json::{Value, json};
use tokio::time::Instant;

/// What the proxies are told.
const CONFIGURED_RPM: u64 = 1200;
/// What the mock enforces (a one-second bucket).
const REAL_RPM: u64 = 600;
const RUN: Duration = Duration::from_secs(25);
const SETTLE: Duration = Duration::from_secs(10);
const TEAM_KEY: &str = "team-adaptive-5e2a9c41";

struct Figures {
    calls_after: u64,
    limited_after: u64,
    used_after: f64,
    limited_first: u64,
    calls_first: u64,
    effective_rpm: f64,
}

/// A front to the mock that forwards everything and strips `Retry-After`,
/// `retry-after-ms` and `x-ratelimit-*` from its answers: bare 429s.
struct Front {
    client: reqwest::Client,
    target: String,
}

async fn forward(
    State(front): State<Arc<Front>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = front.client.request(method, format!("{}{path}", front.target)).body(body);
    for (name, value) in &headers {
        if name == "content-type" || name == "authorization" {
            request = request.header(name, value);
        }
    }
    let Ok(answer) = request.send().await else {
        return Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        let n = name.as_str();
        let rate = n == "retry-after" || n == "retry-after-ms" || n.starts_with("x-ratelimit-");
        if !rate && n != "content-length" && n != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(answer.bytes().await.unwrap_or_default())).unwrap()
}

/// Starts the front to `target` (the mock's base URL without `/v1`) in
/// `runtime`; returns its base URL with `/v1`. It serves until the runtime
/// is dropped.
fn start_front(runtime: &tokio::runtime::Runtime, target: &str) -> String {
    let front = Arc::new(Front { client: reqwest::Client::new(), target: target.to_owned() });
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(forward).with_state(front);
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/v1")
    })
}

fn run_at_twice_the_quota(headers: bool) -> Figures {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start().unwrap();
    let mut args = vec!["--rpm".to_owned(), REAL_RPM.to_string(), "--burst".to_owned(), (REAL_RPM / 60).to_string()];
    if headers {
        args.push("--ratelimit-headers".to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mock_proc, mock_url) = mock(dir.path(), &args, &[]);
    // With headers, the proxies call the mock; without, its bare front.
    let upstream_url = if headers { mock_url.clone() } else { start_front(&runtime, mock_url.trim_end_matches("/v1")) };
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
redis_url = "{redis}"
redis_key_prefix = "adaptive-test"
default_deadline_ms = 5000

[retry]
max_attempts = 1

[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{upstream_url}"
rpm = {CONFIGURED_RPM}
tpm = 100000000
max_concurrency = 64

[[teams]]
name = "a"
key_env = "TEAM_KEY"

[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
"#,
            redis = redis.url()
        ),
    )
    .unwrap();
    let envs = [("TEAM_KEY", TEAM_KEY), ("RUST_LOG", "warn")];
    let replicas: Vec<_> = (0..2).map(|i| proxy(&config, &envs, dir.path().join(format!("proxy{i}.log")))).collect();
    let urls: Vec<String> = replicas.iter().map(|(_, _, http)| http.clone()).collect();
    let stats_url = format!("{}/mock/stats", mock_url.trim_end_matches("/v1"));

    let settled: Value = runtime.block_on(async {
        let client = reqwest::Client::new();
        // Each replica gets half the configured rate, jittered.
        let interval = Duration::from_micros(60_000_000 * urls.len() as u64 / CONFIGURED_RPM);
        let start = Instant::now();
        let at_settle = {
            let (client, url) = (client.clone(), stats_url.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(start + SETTLE).await;
                client.get(url).send().await.unwrap().json::<Value>().await.unwrap()
            })
        };
        let mut senders = tokio::task::JoinSet::new();
        for (i, url) in urls.iter().enumerate() {
            let (client, url) = (client.clone(), url.clone());
            senders.spawn(async move {
                let mut tasks = tokio::task::JoinSet::new();
                let seed = 0x2545_f491_4f6c_dd1d ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                for (offset, _) in jittered_arrivals(seed, interval, RUN) {
                    tokio::time::sleep_until(start + offset).await;
                    let request = client
                        .post(format!("{url}/v1/chat/completions"))
                        .bearer_auth(TEAM_KEY)
                        .json(&json!({"model": "j", "messages": [{"role": "user", "content": "load"}]}))
                        .send();
                    tasks.spawn(async move { request.await.map(|r| r.status().as_u16()).unwrap_or(0) });
                }
                tasks.join_all().await
            });
        }
        for statuses in senders.join_all().await {
            assert!(statuses.iter().all(|s| [200, 429].contains(s)), "{statuses:?}");
        }
        at_settle.await.unwrap()
    });
    let end: Value = get_json(&stats_url);
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    let window_s = (n(&end, "last_admitted_us") - n(&settled, "last_admitted_us")) as f64 / 1e6;
    let admitted_after = n(&end, "admitted") - n(&settled, "admitted");
    let metrics = get_text(&format!("{}/metrics", urls[0]));
    let effective_rpm = metrics
        .lines()
        .find_map(|l| l.strip_prefix("cohort_judge_proxy_effective_rpm{upstream=\"mock\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    drop(mock_proc);
    Figures {
        calls_after: n(&end, "requests") - n(&settled, "requests"),
        limited_after: n(&end, "enforced_429") - n(&settled, "enforced_429"),
        used_after: admitted_after as f64 / (REAL_RPM as f64 / 60.0 * window_s) * 100.0,
        limited_first: n(&settled, "enforced_429"),
        calls_first: n(&settled, "requests"),
        effective_rpm,
    }
}

fn print(what: &str, f: &Figures) -> f64 {
    let share = f.limited_after as f64 / f.calls_after.max(1) as f64 * 100.0;
    println!(
        "{what}: configured {CONFIGURED_RPM} rpm, real {REAL_RPM}, demand {CONFIGURED_RPM} rpm over 2 replicas for {} s: \
         first {} s: {} upstream 429s of {} calls; after: {} upstream 429s of {} calls = {share:.1}%, {:.1}% of the \
         real quota used; effective rpm at the end {:.0}",
        RUN.as_secs(),
        SETTLE.as_secs(),
        f.limited_first,
        f.calls_first,
        f.limited_after,
        f.calls_after,
        f.used_after,
        f.effective_rpm
    );
    share
}

/// See the module doc: with the provider's headers.
#[test]
fn twice_the_real_quota_with_rate_headers_settles_on_the_real_quota() {
    let f = run_at_twice_the_quota(true);
    let share = print("with x-ratelimit headers", &f);
    assert!(share <= 5.0, "{share:.1}% of upstream calls got 429 after {} s", SETTLE.as_secs());
    assert!(f.used_after >= 90.0, "only {:.1}% of the real quota used", f.used_after);
}

/// See the module doc: bare 429s alone (no Retry-After, no headers).
#[test]
fn twice_the_real_quota_without_headers_cuts_the_rate_on_429s() {
    let f = run_at_twice_the_quota(false);
    let share = print("bare 429s, no headers", &f);
    assert!(f.limited_first > 0, "the provider never said 429: the test measures nothing");
    assert!(f.effective_rpm < CONFIGURED_RPM as f64, "the rate was never cut: {}", f.effective_rpm);
    assert!(share <= 5.0, "{share:.1}% of upstream calls got 429 after {} s", SETTLE.as_secs());
    // A floor that holds on a loaded machine (see the module doc): the
    // figure is printed, the target is the benchmark's.
    assert!(f.used_after >= 75.0, "only {:.1}% of the real quota used", f.used_after);
}

fn get_text(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { reqwest::get(url).await.unwrap().text().await.unwrap() })
}

fn get_json(url: &str) -> Value {
    serde_json::from_str(&get_text(url)).unwrap()
}
