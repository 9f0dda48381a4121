//! The adaptive rate against a provider that says nothing but 429 (issue
//! 24): prints figures, asserts nothing. Run with
//!
//! ```text
//! cargo bench -p cohort-judge-proxy --bench adaptive_rate            # 90 s per case
//! cargo bench -p cohort-judge-proxy --bench adaptive_rate -- --quick # 30 s per case
//! ```
//!
//! Options after `--`: `--quick` (30 s per case), `--secs N` (N s per
//! case), `--burst N` (the provider's bucket, default 10: a one-second
//! bucket at 600 rpm; 600 is a minute's worth), `--replicas N` (N proxies
//! sharing a private `redis-server`, default 1: the local store), `--seed
//! N`, `--only bare|headers|drop`.
//!
//! The outside measurement of the issue, in one process over loopback:
//! the mock provider (the TEST DOUBLE, `cohort_mock_provider`) enforcing
//! 600 rpm, behind a front that strips `Retry-After`, `retry-after-ms` and
//! every `x-ratelimit-*` header from its answers (a bare 429, as many
//! providers send, or an account shared with clients outside cohort); the
//! proxy configured at 1,200 rpm; seeded Poisson arrivals at twice the real
//! quota (1,200 a minute) for the run. Cases:
//! 1. `bare`: 429s only;
//! 2. `headers`: the same provider sending `Retry-After` and OpenAI's
//!    `x-ratelimit-*-requests` headers (the reference);
//! 3. `drop`: 429s only, and the provider's limit drops to 300 rpm half-way
//!    (another client took half): the front switches to a second mock
//!    enforcing 300.
//!
//! Printed per case: the share of the real quota used (admitted by the
//! provider over what it allows in the same time), whole run and after the
//! first 10 s; upstream 429s and their share of upstream calls, likewise;
//! requests answered 200 (of those sent) and turned away by the proxy at
//! their deadline; the proxy's rate cuts and its effective rpm at the end.

// A benchmark, not a service: a failed setup step should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use cohort_judge_proxy::config::build_and_validate;
use cohort_judge_proxy::{Listeners, Proxy};
use cohort_mock_provider::{MockConfig, MockHandle, MockStats};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

const TEAM_KEY: &str = "bench-team-key-0024";
/// What the proxy is told.
const CONFIGURED_RPM: u64 = 1200;
/// What the provider allows (and, after a drop, allows then).
const REAL_RPM: u32 = 600;
const DROPPED_RPM: u32 = 300;
/// Demand: twice the real quota.
const DEMAND_RPM: f64 = 1200.0;
/// The figures "after the first 10 s" start here.
const SETTLE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Bare,
    Headers,
    Drop,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Bare => "bare",
            Case::Headers => "headers",
            Case::Drop => "drop",
        }
    }
}

struct Args {
    run: Duration,
    burst: u32,
    replicas: usize,
    seed: u64,
    cases: Vec<Case>,
}

fn parse_args() -> Args {
    let mut a = Args {
        run: Duration::from_secs(90),
        burst: REAL_RPM / 60,
        replicas: 1,
        seed: 24,
        cases: vec![Case::Bare, Case::Headers, Case::Drop],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--quick" => a.run = Duration::from_secs(30),
            "--secs" => a.run = Duration::from_secs(value().parse().unwrap()),
            "--burst" => a.burst = value().parse().unwrap(),
            "--replicas" => a.replicas = value().parse().unwrap(),
            "--seed" => a.seed = value().parse().unwrap(),
            "--only" => {
                let v = value();
                a.cases = [Case::Bare, Case::Headers, Case::Drop].into_iter().filter(|c| c.name() == v).collect();
                assert!(!a.cases.is_empty(), "--only bare|headers|drop");
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

// === The provider: the mock behind a front ===

/// What the front forwards to: the mocks' addresses, the one in use, and
/// whether it strips the rate headers.
struct Front {
    client: reqwest::Client,
    targets: Vec<String>,
    current: AtomicUsize,
    strip: bool,
}

/// The headers a bare 429 does not have.
fn is_rate_header(name: &str) -> bool {
    name == "retry-after" || name == "retry-after-ms" || name.starts_with("x-ratelimit-")
}

async fn forward(
    State(front): State<Arc<Front>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let target = &front.targets[front.current.load(Ordering::Relaxed)];
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = front.client.request(method, format!("{target}{path}")).body(body);
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
        if !(front.strip && is_rate_header(name.as_str())) && name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response.body(Body::from(bytes)).unwrap()
}

/// Serves the front on a free port; returns its base URL (`.../v1`).
async fn start_front(front: Arc<Front>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(forward).with_state(front);
    // Lives as long as the benchmark's runtime: nothing to shut down.
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

async fn stats(mock: &MockHandle) -> MockStats {
    reqwest::get(format!("http://{}/mock/stats", mock.addr)).await.unwrap().json().await.unwrap()
}

// === The proxy ===

/// `redis`: the store's URL and a key prefix of the case's own.
fn proxy_config(base_url: &str, redis: Option<(&str, &str)>) -> cohort_judge_proxy::ProxyConfig {
    let redis = redis
        .map(|(url, prefix)| format!("redis_url = \"{url}\"\nredis_key_prefix = \"{prefix}\""))
        .unwrap_or_default();
    // As the CI test (tests/tests/judge_proxy_adaptive_rate.rs): one
    // attempt per request, so every upstream 429 is one request's answer.
    let text = format!(
        r#"
{redis}
default_deadline_ms = 5000
[retry]
max_attempts = 1
[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{base_url}"
rpm = {CONFIGURED_RPM}
tpm = 100000000
max_concurrency = 64
[[teams]]
name = "bench"
key_env = "BENCH_TEAM_KEY"
admission_rps = 1000000
[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
"#
    );
    let env = |name: &str| (name == "BENCH_TEAM_KEY").then(|| TEAM_KEY.to_owned());
    match build_and_validate(&text, "bench.toml", Path::new("."), &env) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

async fn start_proxy(
    base_url: &str,
    redis: Option<(&str, &str)>,
) -> (Arc<Proxy>, String, tokio::sync::oneshot::Sender<()>) {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_url = format!("http://{}", http.local_addr().unwrap());
    let proxy = Arc::new(Proxy::new(proxy_config(base_url, redis)).await.unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let p = Arc::clone(&proxy);
    tokio::spawn(async move {
        let _ = cohort_judge_proxy::serve(p, Listeners { grpc, http }, async {
            let _ = stopped.await;
        })
        .await;
    });
    (proxy, http_url, stop)
}

// === The load ===

/// Seeded Poisson arrivals at `per_min` for `run` (xorshift64*, exponential
/// gaps): the same schedule for every case and every run with one seed.
fn poisson_arrivals(seed: u64, per_min: f64, run: Duration) -> Vec<Duration> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let rate_per_s = per_min / 60.0;
    let (mut t, mut out) = (0.0f64, Vec::new());
    loop {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let u = ((x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        t += -u.ln() / rate_per_s;
        if t >= run.as_secs_f64() {
            return out;
        }
        out.push(Duration::from_secs_f64(t));
    }
}

/// The provider's counts, summed over its mocks.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    requests: u64,
    limited: u64,
    admitted: u64,
}

impl Counts {
    fn minus(self, o: Counts) -> Counts {
        Counts {
            requests: self.requests - o.requests,
            limited: self.limited - o.limited,
            admitted: self.admitted - o.admitted,
        }
    }
}

async fn counts(mocks: &[MockHandle]) -> Counts {
    let mut c = Counts::default();
    for m in mocks {
        let s = stats(m).await;
        c.requests += s.requests;
        c.limited += s.enforced_429;
        c.admitted += s.admitted;
    }
    c
}

fn pct(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64 * 100.0
}

async fn run_case(case: Case, args: &Args, redis: Option<&cohort_tests::RedisServer>) {
    let mock_config = |rpm: u32| MockConfig {
        rpm: Some(rpm),
        burst: Some(args.burst.min(rpm)),
        ratelimit_headers: case == Case::Headers,
        ..Default::default()
    };
    let mut mocks = vec![MockHandle::start(mock_config(REAL_RPM)).await.unwrap()];
    if case == Case::Drop {
        mocks.push(MockHandle::start(mock_config(DROPPED_RPM)).await.unwrap());
    }
    let front = Arc::new(Front {
        client: reqwest::Client::new(),
        targets: mocks.iter().map(|m| format!("http://{}", m.addr)).collect(),
        current: AtomicUsize::new(0),
        strip: case != Case::Headers,
    });
    let base_url = start_front(Arc::clone(&front)).await;
    // Every case starts from a provider the proxies know nothing of: keys
    // of its own.
    let url = redis.map(cohort_tests::RedisServer::url);
    let prefix = format!("bench-adaptive-{}", case.name());
    let mut proxies = Vec::new();
    for _ in 0..args.replicas {
        proxies.push(start_proxy(&base_url, url.as_deref().map(|u| (u, prefix.as_str()))).await);
    }
    let client = reqwest::Client::new();
    let body = json!({"model": "j", "messages": [{"role": "user", "content": "adaptive rate"}]});
    let drop_at = args.run / 2;
    let start = Instant::now();
    let snapshot_at = |at: Duration| {
        let mocks_addr: Vec<std::net::SocketAddr> = mocks.iter().map(|m| m.addr).collect();
        async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(start + at)).await;
            let mut c = Counts::default();
            for addr in mocks_addr {
                let s: MockStats =
                    reqwest::get(format!("http://{addr}/mock/stats")).await.unwrap().json().await.unwrap();
                c.requests += s.requests;
                c.limited += s.enforced_429;
                c.admitted += s.admitted;
            }
            (c, start.elapsed())
        }
    };
    let settled = tokio::spawn(snapshot_at(SETTLE));
    let at_drop = tokio::spawn(snapshot_at(drop_at));
    let after_drop = tokio::spawn(snapshot_at(drop_at + SETTLE));
    let switch = {
        let front = Arc::clone(&front);
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(start + drop_at)).await;
            if case == Case::Drop {
                front.current.store(1, Ordering::Relaxed);
            }
        })
    };
    let mut tasks = JoinSet::new();
    let arrivals = poisson_arrivals(args.seed, DEMAND_RPM, args.run);
    let sent = arrivals.len();
    for (k, at) in arrivals.into_iter().enumerate() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(start + at)).await;
        let http = &proxies[k % proxies.len()].1;
        let r = client.post(format!("{http}/v1/chat/completions")).bearer_auth(TEAM_KEY).json(&body).send();
        tasks.spawn(async move { r.await.map(|r| r.status().as_u16()).unwrap_or(0) });
    }
    let (mut ok, mut turned_away, mut other) = (0u64, 0u64, 0u64);
    while let Some(s) = tasks.join_next().await {
        match s.unwrap() {
            200 => ok += 1,
            429 => turned_away += 1,
            _ => other += 1,
        }
    }
    let wall = start.elapsed();
    let end = counts(&mocks).await;
    let (settled, t_settled) = settled.await.unwrap();
    let (at_drop, t_drop) = at_drop.await.unwrap();
    let (after_drop, t_after_drop) = after_drop.await.unwrap();
    switch.await.unwrap();
    let per_s = |rpm: u32| f64::from(rpm) / 60.0;
    // What the provider allowed in a span of the run.
    let allowed = |from: Duration, to: Duration| -> f64 {
        if case != Case::Drop {
            return per_s(REAL_RPM) * (to - from).as_secs_f64();
        }
        let before = to.min(t_drop).saturating_sub(from).as_secs_f64();
        let after = to.saturating_sub(from.max(t_drop)).as_secs_f64();
        per_s(REAL_RPM) * before + per_s(DROPPED_RPM) * after
    };
    let used = |c: Counts, from: Duration, to: Duration| c.admitted as f64 / allowed(from, to) * 100.0;
    let cuts: u64 = proxies.iter().map(|p| p.0.metrics().rate_cuts).sum();
    let effective: f64 = proxies[0]
        .0
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("cohort_judge_proxy_effective_rpm{upstream=\"mock\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    let after = end.minus(settled);
    let what = match case {
        Case::Bare => "bare 429s (no Retry-After, no x-ratelimit-*)".to_owned(),
        Case::Headers => "with Retry-After and x-ratelimit-* headers".to_owned(),
        Case::Drop => format!("bare 429s, the limit dropping to {DROPPED_RPM} rpm at {} s", drop_at.as_secs()),
    };
    println!(
        "{}: {what}; provider {REAL_RPM} rpm (bucket {}), proxy configured at {CONFIGURED_RPM} rpm, {} replica{}, \
         Poisson demand at {DEMAND_RPM:.0}/min (2x) for {:.0} s",
        case.name(),
        args.burst,
        args.replicas,
        if args.replicas == 1 { "" } else { "s" },
        wall.as_secs_f64()
    );
    println!(
        "  whole run:     {:.1}% of the real quota used; upstream 429s {} of {} upstream calls = {:.1}%",
        used(end, Duration::ZERO, wall),
        end.limited,
        end.requests,
        pct(end.limited, end.requests)
    );
    println!(
        "  after {} s:    {:.1}% of the real quota used; upstream 429s {} of {} = {:.1}%",
        SETTLE.as_secs(),
        used(after, t_settled, wall),
        after.limited,
        after.requests,
        pct(after.limited, after.requests)
    );
    if case == Case::Drop {
        let before = at_drop.minus(settled);
        let late = end.minus(after_drop);
        let around = after_drop.minus(at_drop);
        println!(
            "  {}-{} s (600 rpm): {:.1}% used, 429s {:.1}%; {}-{} s (the drop): {} upstream 429s; {}-{} s (300 rpm): {:.1}% used, 429s {:.1}%",
            t_settled.as_secs(),
            t_drop.as_secs(),
            used(before, t_settled, t_drop),
            pct(before.limited, before.requests),
            t_drop.as_secs(),
            t_after_drop.as_secs(),
            around.limited,
            t_after_drop.as_secs(),
            wall.as_secs(),
            used(late, t_after_drop, wall),
            pct(late.limited, late.requests)
        );
    }
    println!(
        "  requests: sent {sent}, answered 200 {ok} ({:.1}%), turned away at their deadline {turned_away}, other {other}; \
         upstream 429s the proxy saw {cuts}; effective rpm at the end {effective:.0}",
        pct(ok, sent as u64)
    );
    for (_, _, stop) in proxies {
        drop(stop);
    }
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        println!(
            "adaptive rate benchmark (issue 24): mock provider (TEST DOUBLE), front, proxy and load in one process, \
             2 worker threads, loopback; seed {}",
            args.seed
        );
        let redis = if args.replicas > 1 { Some(cohort_tests::RedisServer::start().unwrap()) } else { None };
        for case in &args.cases {
            run_case(*case, &args, redis.as_ref()).await;
        }
    });
}
