//! The judge proxy's benchmark (SPEC section 12): prints figures, asserts
//! nothing. Run with
//!
//! ```text
//! cargo bench -p cohort-judge-proxy --bench proxy
//! ```
//!
//! Everything runs in this one process over loopback: the mock provider
//! (the TEST DOUBLE), a proxy (local limiter), and the load. Figures:
//! 1. the passthrough's requests/s and the latency it adds over calling the
//!    mock directly (p50, p99), at a fixed concurrency, limits far away;
//! 2. gRPC `Judge` with 8 claims per request: requests/s, claims/s, p50/p99;
//! 3. demand at twice an upstream's quota: requests/s admitted, permits
//!    waited, mean wait, and callers turned away at their deadline;
//! 4. the same through a private `redis-server` (the shared store): Redis
//!    calls per granted permit (`INFO commandstats`; the commands the
//!    limiter's scripts run inside are not calls the proxy sends);
//! 5. the proxy alone in its own process (this benchmark re-executed with
//!    `COHORT_BENCH_PROXY_OF` set), driven open-loop at 5,000 requests/s:
//!    its CPU time per request (user + system, from `/proc/PID/stat`, so
//!    the mock and the load generator are not counted), its peak RSS
//!    (`VmHWM`), the share answered 200 and the latency p50/p99; with the
//!    runtime `cohort judge-proxy` uses by default (one event loop) and
//!    with two worker threads.

// A benchmark, not a service: a failed setup step should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cohort_judge_proxy::config::build_and_validate;
use cohort_judge_proxy::{DEFAULT_THREADS, Listeners, Proxy};
use cohort_mock_provider::{MockConfig, MockHandle};
use cohort_proto::v1 as pb;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

const TEAM_KEY: &str = "bench-team-key-0001";
const CONCURRENCY: usize = 16;
const REQUESTS: usize = 4000;
const JUDGE_REQUESTS: usize = 1000;
const QUOTA_RPM: u64 = 3000;
const QUOTA_RUN: Duration = Duration::from_secs(6);

fn config(base_url: &str, rpm: u64, redis: Option<&str>) -> cohort_judge_proxy::ProxyConfig {
    let redis = redis.map(|url| format!("redis_url = \"{url}\"")).unwrap_or_default();
    let text = format!(
        r#"
{redis}
default_deadline_ms = 2000
[retry]
max_attempts = 1
[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{base_url}"
rpm = {rpm}
tpm = 1000000000
max_concurrency = 256
burst = 8
[[teams]]
name = "bench"
key_env = "BENCH_TEAM_KEY"
# The HTTP face's per-key admission bucket would cap the load well below
# what the benchmark measures.
admission_rps = 1000000
[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
batch_size = 8
"#
    );
    let env = |name: &str| (name == "BENCH_TEAM_KEY").then(|| TEAM_KEY.to_owned());
    match build_and_validate(&text, "bench.toml", Path::new("."), &env) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// A proxy serving on free ports until the returned sender is dropped.
async fn start_proxy(rpm: u64, mock: &MockHandle) -> (Arc<Proxy>, String, String, tokio::sync::oneshot::Sender<()>) {
    start_proxy_with(rpm, mock, None).await
}

/// [`start_proxy`], with the limiter in the Redis at `redis` when given.
async fn start_proxy_with(
    rpm: u64,
    mock: &MockHandle,
    redis: Option<&str>,
) -> (Arc<Proxy>, String, String, tokio::sync::oneshot::Sender<()>) {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_url = format!("http://{}", grpc.local_addr().unwrap());
    let http_url = format!("http://{}", http.local_addr().unwrap());
    let proxy = Arc::new(Proxy::new(config(&mock.base_url(), rpm, redis)).await.unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let p = Arc::clone(&proxy);
    tokio::spawn(async move {
        let _ = cohort_judge_proxy::serve(p, Listeners { grpc, http }, async {
            let _ = stopped.await;
        })
        .await;
    });
    (proxy, grpc_url, http_url, stop)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `REQUESTS` chat completions at `concurrency` against `url`; returns the
/// sorted latencies and the wall time.
async fn chat_load(url: &str, key: Option<&str>, concurrency: usize) -> (Vec<Duration>, Duration) {
    let client = reqwest::Client::new();
    let body = json!({"model": "j", "messages": [{"role": "user", "content": "benchmark request"}]});
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let per_task = REQUESTS / concurrency;
    for _ in 0..concurrency {
        let client = client.clone();
        let body = body.clone();
        let url = format!("{url}/v1/chat/completions");
        let key = key.map(str::to_owned);
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let t = Instant::now();
                let mut r = client.post(&url).json(&body);
                if let Some(k) = &key {
                    r = r.bearer_auth(k);
                }
                let resp = r.send().await.unwrap();
                assert!(resp.status().is_success(), "{}", resp.status());
                let _ = resp.bytes().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        });
    }
    let mut all = Vec::with_capacity(REQUESTS);
    while let Some(l) = tasks.join_next().await {
        all.extend(l.unwrap());
    }
    let wall = start.elapsed();
    all.sort();
    (all, wall)
}

async fn passthrough_overhead() {
    let mock = MockHandle::start(MockConfig::default()).await.unwrap();
    let (_proxy, _grpc, http, _stop) = start_proxy(60_000_000, &mock).await;
    let direct_url = format!("http://{}", mock.addr);
    // Warm up both paths (connections, allocator).
    let _ = chat_load(&direct_url, None, CONCURRENCY).await;
    let _ = chat_load(&http, Some(TEAM_KEY), CONCURRENCY).await;
    let rps = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // Added latency: one request at a time, so queueing does not blur it.
    let (direct, _) = chat_load(&direct_url, None, 1).await;
    let (proxied, _) = chat_load(&http, Some(TEAM_KEY), 1).await;
    println!("passthrough, {REQUESTS} requests one at a time, limits far away:");
    println!(
        "  direct to mock: p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99))
    );
    println!(
        "  through proxy:  p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&proxied, 0.5)),
        ms(percentile(&proxied, 0.99))
    );
    println!(
        "  added latency:  p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&proxied, 0.5)) - ms(percentile(&direct, 0.5)),
        ms(percentile(&proxied, 0.99)) - ms(percentile(&direct, 0.99))
    );
    let (direct, direct_wall) = chat_load(&direct_url, None, CONCURRENCY).await;
    let (proxied, proxied_wall) = chat_load(&http, Some(TEAM_KEY), CONCURRENCY).await;
    println!(
        "passthrough throughput at concurrency {CONCURRENCY}: direct {:.0} req/s (p99 {:.2} ms), through proxy {:.0} req/s (p99 {:.2} ms)",
        rps(direct.len(), direct_wall),
        ms(percentile(&direct, 0.99)),
        rps(proxied.len(), proxied_wall),
        ms(percentile(&proxied, 0.99))
    );
}

async fn judge_throughput() {
    let mock = MockHandle::start(MockConfig::default()).await.unwrap();
    let (_proxy, grpc, _http, _stop) = start_proxy(60_000_000, &mock).await;
    let channel = tonic::transport::Channel::from_shared(grpc).unwrap().connect().await.unwrap();
    let claims: Vec<pb::Claim> = (0..8)
        .map(|i| pb::Claim {
            claim_id: format!("c{i}"),
            text: format!("Claim number {i} is supported."),
            snippets: vec![pb::Snippet {
                index: 1,
                source_url: "https://example.org".into(),
                text: format!("As shown, claim number {i} is supported."),
            }],
            cited_indices: vec![1],
        })
        .collect();
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..CONCURRENCY {
        let mut client = pb::judge_client::JudgeClient::new(channel.clone());
        let claims = claims.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            for _ in 0..JUDGE_REQUESTS / CONCURRENCY {
                let mut r = tonic::Request::new(pb::JudgeRequest {
                    judge: "j".into(),
                    claims: claims.clone(),
                    ..Default::default()
                });
                r.metadata_mut().insert("authorization", format!("Bearer {TEAM_KEY}").parse().unwrap());
                let t = Instant::now();
                let resp = client.judge_claims(r).await.unwrap().into_inner();
                assert!(resp.verdicts.iter().all(|v| v.verdict() == pb::Verdict::Yes));
                latencies.push(t.elapsed());
            }
            latencies
        });
    }
    let mut all = Vec::new();
    while let Some(l) = tasks.join_next().await {
        all.extend(l.unwrap());
    }
    let wall = start.elapsed();
    all.sort();
    println!(
        "gRPC Judge, 8 claims per request, concurrency {CONCURRENCY}: {:.0} req/s ({:.0} claims/s), p50 {:.2} ms, p99 {:.2} ms",
        all.len() as f64 / wall.as_secs_f64(),
        all.len() as f64 * 8.0 / wall.as_secs_f64(),
        percentile(&all, 0.5).as_secs_f64() * 1000.0,
        percentile(&all, 0.99).as_secs_f64() * 1000.0
    );
}

async fn demand_over_quota(redis: Option<&cohort_tests::RedisServer>) {
    let mock = MockHandle::start(MockConfig {
        rpm: Some(u32::try_from(QUOTA_RPM).unwrap()),
        burst: Some(32),
        ..Default::default()
    })
    .await
    .unwrap();
    let url = redis.map(cohort_tests::RedisServer::url);
    let (proxy, _grpc, http, _stop) = start_proxy_with(QUOTA_RPM, &mock, url.as_deref()).await;
    let before = redis.map(redis_calls);
    let client = reqwest::Client::new();
    let body = json!({"model": "j", "messages": [{"role": "user", "content": "quota"}]});
    let interval = Duration::from_micros(60_000_000 / (QUOTA_RPM * 2));
    let mut tick = tokio::time::interval(interval);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    while start.elapsed() < QUOTA_RUN {
        tick.tick().await;
        let r = client.post(format!("{http}/v1/chat/completions")).bearer_auth(TEAM_KEY).json(&body).send();
        tasks.spawn(async move { r.await.map(|r| r.status().as_u16()).unwrap_or(0) });
    }
    let (mut ok, mut limited, mut other) = (0u64, 0u64, 0u64);
    while let Some(s) = tasks.join_next().await {
        match s.unwrap() {
            200 => ok += 1,
            429 => limited += 1,
            _ => other += 1,
        }
    }
    let m = proxy.metrics();
    let redis_line = match (redis, before) {
        (Some(r), Some(before)) => {
            let calls = redis_calls(r) - before;
            format!(
                "\n  through a private Redis (the shared store): {calls} Redis calls for {} granted permits = {:.2} \
                 per permit ({} bookings refused at once)",
                m.permits_granted,
                calls as f64 / m.permits_granted.max(1) as f64,
                m.permit_deadlines
            )
        }
        _ => String::new(),
    };
    let stats: cohort_mock_provider::MockStats =
        reqwest::get(format!("http://{}/mock/stats", mock.addr)).await.unwrap().json().await.unwrap();
    let window = (stats.last_admitted_us - stats.first_admitted_us) as f64 / 1e6;
    println!(
        "demand at 2x a {QUOTA_RPM} rpm quota for {} s: admitted {ok} ({:.1} req/s over the {window:.2} s the mock saw them; \
         quota {:.1}/s), turned away at their deadline {limited}, other {other}; permits waited {} \
         (mean wait {:.1} ms); 429s sent by the mock {}{redis_line}",
        QUOTA_RUN.as_secs(),
        stats.admitted as f64 / window,
        QUOTA_RPM as f64 / 60.0,
        m.permits_waited,
        if m.permits_waited == 0 { 0.0 } else { m.permit_wait_us as f64 / m.permits_waited as f64 / 1000.0 },
        stats.enforced_429
    );
}

/// The calls `INFO commandstats` counted, but the commands the limiter's
/// scripts run inside and INFO itself: what the proxy sent.
fn redis_calls(redis: &cohort_tests::RedisServer) -> u64 {
    let inside = ["get", "set", "hmget", "hset", "pexpire", "time", "info"];
    redis.commandstats().unwrap().into_iter().filter(|(name, _)| !inside.contains(&name.as_str())).map(|(_, n)| n).sum()
}

/// The open-loop rate of figure 5, and how long it runs.
const OPEN_LOOP_RPS: u64 = 5000;
const OPEN_LOOP_RUN: Duration = Duration::from_secs(6);
/// Set in the environment of the re-executed benchmark: the mock's base URL
/// for a proxy that runs alone in that process.
const CHILD_ENV: &str = "COHORT_BENCH_PROXY_OF";
/// The runtime threads of that proxy (`cohort judge-proxy --threads`).
const THREADS_ENV: &str = "COHORT_BENCH_PROXY_THREADS";

/// The child of figure 5: a proxy in front of the mock at `base_url`; prints
/// its HTTP URL, serves until stdin closes.
async fn proxy_child(base_url: &str) {
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("http://{}", http.local_addr().unwrap());
    let proxy = Arc::new(Proxy::new(config(base_url, 60_000_000, None)).await.unwrap());
    // Without tokio's io-std feature: a blocking thread reads stdin to EOF.
    let stdin_closed = async {
        let _ = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
    };
    cohort_judge_proxy::serve(proxy, Listeners { grpc, http }, stdin_closed).await.unwrap();
}

/// The CPU time (user + system) and peak RSS (bytes) of process `pid`.
fn cpu_and_peak_rss(pid: u32) -> (Duration, u64) {
    (cohort_tests::proc::cpu_time(pid), cohort_tests::proc::status_kib(pid, "VmHWM") * 1024)
}

/// The CPU time of process `pid`'s trace-export threads: the SDK's batch
/// processor (`OpenTelemetry.Traces.BatchProcessor`, 15 characters of it
/// in `comm`) and the exporter's runtime (`otlp-export`).
fn export_cpu(pid: u32) -> Duration {
    cohort_tests::proc::threads_cpu_time(pid, &["OpenTelemetry", "otlp-export"])
}

/// Set in the environment of the re-executed benchmark that is figure 5's
/// OTLP receiver.
const RECEIVER_ENV: &str = "COHORT_BENCH_OTLP_RECEIVER";

/// The receiver child: `cohort_tests::otlp::Receiver` on a one-thread
/// runtime; prints its gRPC URL, then the spans received so far for every
/// line read on stdin, until stdin closes.
fn receiver_child() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let receiver = runtime.block_on(cohort_tests::otlp::Receiver::start());
    println!("{}", receiver.grpc_url);
    // The receiver's servers run on its runtime: driven by a thread of
    // their own while this one answers.
    std::thread::spawn(move || runtime.block_on(std::future::pending::<()>()));
    for line in std::io::stdin().lines() {
        if line.is_err() {
            break;
        }
        println!("{}", receiver.count());
    }
}

/// Figure 5's OTLP receiver in a process of its own (this benchmark
/// re-executed with [`RECEIVER_ENV`]), as a collector beside the proxy
/// would be: decoding the spans costs the load generator's runtime
/// nothing, and its CPU is counted apart.
struct ReceiverProcess {
    child: tokio::process::Child,
    pid: u32,
    grpc_url: String,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl ReceiverProcess {
    async fn start() -> ReceiverProcess {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .env(RECEIVER_ENV, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let grpc_url = lines.next_line().await.unwrap().unwrap();
        ReceiverProcess { child, pid, grpc_url, stdin, lines }
    }

    /// The spans received so far.
    async fn count(&mut self) -> usize {
        use tokio::io::AsyncWriteExt as _;
        self.stdin.write_all(b"count\n").await.unwrap();
        self.lines.next_line().await.unwrap().unwrap().parse().unwrap()
    }

    /// Its CPU time (user + system) so far.
    fn cpu(&self) -> Duration {
        cpu_and_peak_rss(self.pid).0
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// What one open-loop run of the proxy child measured.
#[derive(Debug, Default)]
struct OpenLoop {
    sent: u64,
    ok: u64,
    latencies: Vec<Duration>,
    wall: Duration,
    cpu: Duration,
    /// The part of `cpu` spent on the trace-export threads.
    export_cpu: Duration,
    peak_rss: u64,
    /// Spans the receiver got from this child, the warm-up's included.
    spans: usize,
    /// Requests of the warm-up before the measured run.
    warm_up: u64,
    /// The receiver's CPU over the run, the warm-up's included.
    receiver_cpu: Duration,
}

impl OpenLoop {
    /// `other` folded in: a mode measured in several rounds reads as one
    /// run (latencies merged, CPU summed, the highest peak).
    fn merge(&mut self, other: OpenLoop) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.latencies.extend(other.latencies);
        self.latencies.sort();
        self.wall += other.wall;
        self.cpu += other.cpu;
        self.export_cpu += other.export_cpu;
        self.peak_rss = self.peak_rss.max(other.peak_rss);
        self.spans += other.spans;
        self.warm_up += other.warm_up;
        self.receiver_cpu += other.receiver_cpu;
    }

    fn p50_ms(&self) -> f64 {
        percentile(&self.latencies, 0.5).as_secs_f64() * 1000.0
    }

    fn p99_ms(&self) -> f64 {
        percentile(&self.latencies, 0.99).as_secs_f64() * 1000.0
    }

    fn cpu_ms_per_request(&self) -> f64 {
        self.cpu.as_secs_f64() * 1000.0 / self.sent.max(1) as f64
    }

    fn line(&self) -> String {
        let sent = self.sent as f64;
        format!(
            "sent {sent:.0} ({:.0} req/s), answered 200 {:.2}%, p50 {:.2} ms, p99 {:.2} ms; proxy CPU {:.2} s = {:.3} ms per \
             request ({:.3} ms on the export threads); proxy peak RSS {:.1} MB",
            sent / self.wall.as_secs_f64(),
            self.ok as f64 / sent * 100.0,
            self.p50_ms(),
            self.p99_ms(),
            self.cpu.as_secs_f64(),
            self.cpu_ms_per_request(),
            self.export_cpu.as_secs_f64() * 1000.0 / self.sent.max(1) as f64,
            self.peak_rss as f64 / 1e6
        )
    }
}

/// One open-loop run of a proxy child with `threads` runtime threads.
/// `traced`: the child exports its spans over OTLP/gRPC to this receiver
/// (the child's telemetry is set up as `cohort judge-proxy`'s, at `info`,
/// either way).
async fn open_loop_cost(threads: usize, mut traced: Option<&mut ReceiverProcess>) -> OpenLoop {
    use tokio::io::AsyncBufReadExt as _;
    let mock = MockHandle::start(MockConfig::default()).await.unwrap();
    let otel = traced.as_ref().map(|r| {
        [("OTEL_EXPORTER_OTLP_ENDPOINT", r.grpc_url.clone()), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned())]
    });
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, mock.base_url())
        .env(THREADS_ENV, threads.to_string())
        .env("BENCH_TEAM_KEY", TEAM_KEY)
        .envs(otel.into_iter().flatten())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let http = lines.next_line().await.unwrap().unwrap();
    for _ in 0..200 {
        if reqwest::get(format!("{http}/healthz")).await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let client = reqwest::Client::builder().pool_max_idle_per_host(1024).build().unwrap();
    let body = json!({"model": "j", "messages": [{"role": "user", "content": "benchmark request"}]});
    let url = format!("{http}/v1/chat/completions");
    let drive = |run: Duration| {
        let (client, body, url) = (client.clone(), body.clone(), url.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / OPEN_LOOP_RPS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let start = Instant::now();
            let mut tasks = JoinSet::new();
            while start.elapsed() < run {
                tick.tick().await;
                let r = client.post(&url).bearer_auth(TEAM_KEY).json(&body).send();
                tasks.spawn(async move {
                    let t = Instant::now();
                    let ok = match r.await {
                        Ok(resp) => resp.status().is_success() && resp.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    (ok, t.elapsed())
                });
            }
            let (mut ok, mut latencies) = (0u64, Vec::new());
            while let Some(r) = tasks.join_next().await {
                let (good, latency) = r.unwrap();
                ok += u64::from(good);
                latencies.push(latency);
            }
            latencies.sort();
            (ok, latencies, start.elapsed())
        }
    };
    // Warm up connections and the allocator, then measure.
    let (spans_at_start, receiver_cpu_at_start) = match traced.as_mut() {
        Some(r) => (r.count().await, r.cpu()),
        None => (0, Duration::ZERO),
    };
    let (_, warm_up, _) = drive(Duration::from_secs(1)).await;
    let ((cpu_before, _), export_before) = (cpu_and_peak_rss(pid), export_cpu(pid));
    let (ok, latencies, wall) = drive(OPEN_LOOP_RUN).await;
    let ((cpu_after, peak_rss), export_after) = (cpu_and_peak_rss(pid), export_cpu(pid));
    drop(child.stdin.take());
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    // The child flushed its last spans as it stopped.
    let (spans, receiver_cpu) = match traced {
        Some(r) => (r.count().await - spans_at_start, r.cpu() - receiver_cpu_at_start),
        None => (0, Duration::ZERO),
    };
    OpenLoop {
        sent: latencies.len() as u64,
        ok,
        latencies,
        wall,
        cpu: cpu_after - cpu_before,
        export_cpu: export_after - export_before,
        peak_rss,
        spans,
        warm_up: warm_up.len() as u64,
        receiver_cpu,
    }
}

/// Rounds of figure 5's traced-against-untraced comparison, alternated so
/// a noisy neighbour weighs on both modes alike.
const TRACING_ROUNDS: usize = 2;

/// Figure 5: the proxy at [`OPEN_LOOP_RPS`] untraced and traced, in
/// alternating rounds of this one run, and their ratios beside the targets
/// (issue 24: p99 within 2x, CPU per request within 1.3x; printed, never
/// asserted); then the untraced proxy on two worker threads.
async fn open_loop_figures() {
    let mut receiver = ReceiverProcess::start().await;
    let (mut off, mut on) = (OpenLoop::default(), OpenLoop::default());
    for _ in 0..TRACING_ROUNDS {
        off.merge(open_loop_cost(DEFAULT_THREADS, None).await);
        on.merge(open_loop_cost(DEFAULT_THREADS, Some(&mut receiver)).await);
    }
    receiver.stop().await;
    let head = format!(
        "the proxy alone in its own process ({DEFAULT_THREADS} runtime thread), open loop at {OPEN_LOOP_RPS} req/s, \
         {TRACING_ROUNDS} alternating rounds of {} s per mode",
        OPEN_LOOP_RUN.as_secs()
    );
    println!("{head}:");
    println!("  traces off:                          {}", off.line());
    let requests = (on.sent + on.warm_up).max(1) as f64;
    println!(
        "  traces EXPORTED over OTLP/gRPC ({} spans received, {:.2} per request; the receiver, a process of its own, \
         {:.3} ms CPU per request): {}",
        on.spans,
        on.spans as f64 / requests,
        on.receiver_cpu.as_secs_f64() * 1000.0 / requests,
        on.line()
    );
    println!(
        "  traced / untraced: p99 {:.2}x (target <= 2x), CPU per request {:.2}x (target <= 1.3x), p50 {:.2}x, \
         peak RSS {:.2}x",
        on.p99_ms() / off.p99_ms(),
        on.cpu_ms_per_request() / off.cpu_ms_per_request(),
        on.p50_ms() / off.p50_ms(),
        on.peak_rss as f64 / off.peak_rss.max(1) as f64
    );
    let two = open_loop_cost(2, None).await;
    println!(
        "the proxy alone in its own process (2 runtime threads, traces off), open loop at {OPEN_LOOP_RPS} req/s for {} s: {}",
        OPEN_LOOP_RUN.as_secs(),
        two.line()
    );
}

fn main() {
    if std::env::var_os(RECEIVER_ENV).is_some() {
        receiver_child();
        return;
    }
    if let Ok(base_url) = std::env::var(CHILD_ENV) {
        let threads = std::env::var(THREADS_ENV).ok().and_then(|t| t.parse().ok()).unwrap_or(DEFAULT_THREADS);
        // As `cohort judge-proxy` sets it up: logs at info, and traces
        // when the OTEL_* variables ask for them.
        let telemetry = cohort_telemetry::init("cohort-judge-proxy", "info").unwrap();
        let runtime = cohort_judge_proxy::runtime(threads).unwrap();
        runtime.block_on(proxy_child(&base_url));
        drop(runtime);
        drop(telemetry);
        return;
    }
    // `cargo bench` passes `--bench`; nothing to parse.
    // `COHORT_BENCH_ONLY=tracing`: figure 5 alone.
    let only_tracing = std::env::var("COHORT_BENCH_ONLY").is_ok_and(|v| v == "tracing");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        println!("judge proxy benchmark (mock provider, proxy and load in one process, 2 worker threads, loopback)");
        if !only_tracing {
            passthrough_overhead().await;
            judge_throughput().await;
            demand_over_quota(None).await;
            match cohort_tests::RedisServer::start() {
                Ok(redis) => demand_over_quota(Some(&redis)).await,
                Err(e) => println!("  (no redis-server for the shared-store figure: {e})"),
            }
        }
        open_loop_figures().await;
    });
}
