//! Three `cohort judge-proxy` replicas share one upstream quota through one
//! Redis, against the mock provider enforcing that quota. Demand is three
//! times the quota. Proves: the mock sends no 429 (no overshoot), and the
//! replicas together use at least 95% of the quota. Prints both figures.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use std::time::Duration;

use cohort_tests::RedisServer;
use judge_proxy_support::{mock, proxy};
use serde_json::{Value, json};

/// The upstream's quota: 1200 requests a minute, 20 a second.
const RPM: u64 = 1200;
/// How long the load runs.
const RUN: Duration = Duration::from_secs(8);
/// The upstream's burst in the proxies' config.
const PROXY_BURST: u64 = 4;
const TEAM_A_KEY: &str = "team-a-shared-7c1d2e9f";
const TEAM_B_KEY: &str = "team-b-shared-0b8a4c6d";

/// See the module doc. The mock tolerates a burst of 12 (600 ms of arrival
/// jitter between the proxies' admission in Redis and its own clock); the
/// proxies are configured with a burst of 4.
#[test]
fn three_replicas_share_one_quota_without_overshoot() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start().unwrap();
    let (mock_proc, mock_url) = mock(dir.path(), &["--rpm", &RPM.to_string(), "--burst", "12"], &[]);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
redis_url = "{redis}"
redis_key_prefix = "shared-test"
default_deadline_ms = 2000

[retry]
max_attempts = 1

[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{mock_url}"
rpm = {RPM}
burst = {PROXY_BURST}
tpm = 100000000
max_concurrency = 64

[[teams]]
name = "a"
key_env = "TEAM_A_KEY"

[[teams]]
name = "b"
key_env = "TEAM_B_KEY"
weight = 2

[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
"#,
            redis = redis.url()
        ),
    )
    .unwrap();
    let envs = [("TEAM_A_KEY", TEAM_A_KEY), ("TEAM_B_KEY", TEAM_B_KEY), ("RUST_LOG", "warn")];
    let replicas: Vec<_> = (0..3).map(|i| proxy(&config, &envs, dir.path().join(format!("proxy{i}.log")))).collect();
    let urls: Vec<String> = replicas.iter().map(|(_, _, http)| http.clone()).collect();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (sent, ok, limited) = runtime.block_on(async {
        let client = reqwest::Client::new();
        // Open-loop load: each replica gets one request every 1/RPS s,
        // so each alone asks for the whole quota and all three for 3x.
        let interval = Duration::from_micros(60_000_000 / RPM);
        let start = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let mut sent = 0u64;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        while start.elapsed() < RUN {
            tick.tick().await;
            for (i, url) in urls.iter().enumerate() {
                let key = if (sent + i as u64).is_multiple_of(3) { TEAM_A_KEY } else { TEAM_B_KEY };
                let request = client
                    .post(format!("{url}/v1/chat/completions"))
                    .bearer_auth(key)
                    .json(&json!({"model": "j", "messages": [{"role": "user", "content": "load"}]}))
                    .send();
                tasks.spawn(async move { request.await.map(|r| r.status().as_u16()).unwrap_or(0) });
                sent += 1;
            }
        }
        let (mut ok, mut limited) = (0u64, 0u64);
        while let Some(status) = tasks.join_next().await {
            match status.unwrap() {
                200 => ok += 1,
                429 => limited += 1,
                other => panic!("unexpected status {other}"),
            }
        }
        (sent, ok, limited)
    });

    let stats: Value = blocking::get_json(&format!("{}/mock/stats", mock_url.trim_end_matches("/v1")));
    let enforced_429 = stats["enforced_429"].as_u64().unwrap();
    let admitted = stats["admitted"].as_u64().unwrap();
    let window_us = stats["last_admitted_us"].as_u64().unwrap() - stats["first_admitted_us"].as_u64().unwrap();
    // The quota over the window the mock saw requests in: RPM/60 a second,
    // plus the upstream's burst (the requests an idle upstream takes at once).
    let quota = RPM as f64 / 60.0 * (window_us as f64 / 1e6) + PROXY_BURST as f64;
    let used = admitted as f64 / quota * 100.0;
    let mut waited = 0u64;
    for url in &urls {
        let metrics = blocking::get_text(&format!("{url}/metrics"));
        waited += metric(&metrics, "cohort_judge_proxy_permits_waited_total");
    }
    println!(
        "3 replicas, shared Redis quota {RPM} rpm, demand 3x for {} s: sent {sent}, answered {ok}, \
         proxy 429 {limited}; the mock admitted {admitted} over {:.2} s = {used:.1}% of the quota \
         ({quota:.1} requests); 429s sent by the mock: {enforced_429}; permits waited: {waited}",
        RUN.as_secs(),
        window_us as f64 / 1e6
    );
    assert_eq!(enforced_429, 0, "the replicas together overshot the upstream quota");
    assert!(used >= 95.0, "the replicas used only {used:.1}% of the quota");
    assert_eq!(ok, admitted, "every admitted request was answered");
    assert!(limited > 0, "demand was above the quota, so some callers hit their deadline");
    drop(mock_proc);
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Small blocking helpers over a throwaway runtime (the test body is sync).
mod blocking {
    pub fn get_text(url: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async { reqwest::get(url).await.unwrap().text().await.unwrap() })
    }

    pub fn get_json(url: &str) -> serde_json::Value {
        serde_json::from_str(&get_text(url)).unwrap()
    }
}
