//! Three `cohort judge-proxy` replicas share one upstream quota through one
//! Redis, against the mock provider enforcing that quota with a one-second
//! bucket, as a provider does. Each replica gets the same open-loop demand,
//! the quota's worth each, so three times the quota in all. Proves (and
//! prints): each replica gets a third of the permits (within 10%), the
//! replicas' median waits are within 3 s of each other, no upstream 429
//! after the first second, at least 97% of the quota used, the p99 wait no
//! more than first-come order over the same arrivals implies plus one
//! second, and at most 3 Redis calls per granted permit.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use std::collections::HashMap;
use std::time::Duration;

use cohort_tests::RedisServer;
use judge_proxy_support::{jittered_arrivals, mock, proxy};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The upstream's quota: 3000 requests a minute, 50 a second (enough
/// permits in 20 s for a replica's share to be measured within a few %).
const RPM: u64 = 3000;
/// How long the load runs (the queue then drains for up to the permit
/// deadline).
const RUN: Duration = Duration::from_secs(20);
/// The callers' deadline; the proxy leaves a quarter of it (1.5 s) to the
/// call, so a permit may be booked up to 4.5 s ahead.
const DEADLINE_MS: u64 = 6000;
const PERMIT_WAIT: Duration = Duration::from_millis(4500);
const TEAM_A_KEY: &str = "team-a-shared-7c1d2e9f";
const TEAM_B_KEY: &str = "team-b-shared-0b8a4c6d";

/// Commands a Lua script of the limiter runs inside: `INFO commandstats`
/// counts them too, but they are not calls the replicas send.
const INSIDE_SCRIPTS: [&str; 6] = ["get", "set", "hmget", "hset", "pexpire", "time"];

/// See the module doc. The proxies use the default burst (half the mock's
/// one-second bucket of 20).
#[test]
fn three_replicas_share_one_quota_fairly_first_come_and_without_polling() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start().unwrap();
    let bucket = (RPM / 60).to_string();
    let (mock_proc, mock_url) = mock(dir.path(), &["--rpm", &RPM.to_string(), "--burst", &bucket], &[]);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
redis_url = "{redis}"
redis_key_prefix = "shared-test"
default_deadline_ms = {DEADLINE_MS}

[retry]
max_attempts = 1

[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{mock_url}"
rpm = {RPM}
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
    let stats_url = format!("{}/mock/stats", mock_url.trim_end_matches("/v1"));
    let redis_before = redis.commandstats().unwrap();

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // (replica, arrival since start, status, latency)
    let (results, stats_at_1s) = runtime.block_on(async {
        let client = reqwest::Client::new();
        // Open-loop load: each replica gets one request every 1/RPS s, so
        // each alone asks for the whole quota and all three for 3x.
        let interval = Duration::from_micros(60_000_000 / RPM);
        let start = Instant::now();
        let first_second = {
            let client = client.clone();
            let url = stats_url.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_secs(1)).await;
                client.get(url).send().await.unwrap().json::<Value>().await.unwrap()
            })
        };
        // Each replica's arrivals are jittered within their interval
        // (a fixed xorshift sequence per replica), and one in three is team
        // a's (demand in the teams' 1:2 weights): strictly periodic
        // arrivals resonate with the slots and always favour one replica.
        let mut senders = tokio::task::JoinSet::new();
        for (i, url) in urls.iter().enumerate() {
            let (client, url) = (client.clone(), url.clone());
            senders.spawn(async move {
                let mut tasks = tokio::task::JoinSet::new();
                let seed = 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                for (offset, x) in jittered_arrivals(seed, interval, RUN) {
                    tokio::time::sleep_until(start + offset).await;
                    let key = if (x >> 20).is_multiple_of(3) { TEAM_A_KEY } else { TEAM_B_KEY };
                    let request = client
                        .post(format!("{url}/v1/chat/completions"))
                        .bearer_auth(key)
                        .json(&json!({"model": "j", "messages": [{"role": "user", "content": "load"}]}))
                        .send();
                    let arrival = start.elapsed();
                    tasks.spawn(async move {
                        let t = Instant::now();
                        let status = request.await.map(|r| r.status().as_u16()).unwrap_or(0);
                        (i, arrival, status, t.elapsed())
                    });
                }
                tasks.join_all().await
            });
        }
        let results: Vec<_> = senders.join_all().await.into_iter().flatten().collect();
        (results, first_second.await.unwrap())
    });
    let redis_after = redis.commandstats().unwrap();
    let stats: Value = blocking::get_json(&stats_url);

    // Shares and waits per replica (a granted call's latency is its wait
    // plus the mock's ~1 ms).
    let mut per_replica: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut limited = 0;
    for (i, _, status, latency) in &results {
        match status {
            200 => per_replica.entry(*i).or_default().push(latency.as_secs_f64()),
            429 => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    let ok: usize = per_replica.values().map(Vec::len).sum();
    let mut all_waits: Vec<f64> = per_replica.values().flatten().copied().collect();
    let shares: Vec<f64> = (0..3).map(|i| per_replica[&i].len() as f64 / ok as f64).collect();
    let medians: Vec<f64> = (0..3).map(|i| quantile(per_replica.get_mut(&i).unwrap(), 0.5)).collect();
    let p99 = quantile(&mut all_waits, 0.99);
    let ideal_p99 = first_come_p99(&results);

    let enforced_429 = stats["enforced_429"].as_u64().unwrap();
    let late_429 = enforced_429 - stats_at_1s["enforced_429"].as_u64().unwrap();
    let admitted = stats["admitted"].as_u64().unwrap();
    let window_us = stats["last_admitted_us"].as_u64().unwrap() - stats["first_admitted_us"].as_u64().unwrap();
    // The quota over the window the mock saw requests in: RPM/60 a second,
    // plus the proxies' burst (what an idle upstream takes at once).
    let proxy_burst = (RPM / 120) as f64;
    let quota = RPM as f64 / 60.0 * (window_us as f64 / 1e6) + proxy_burst;
    let used = admitted as f64 / quota * 100.0;

    let mut granted = 0;
    let mut waited = 0;
    for url in &urls {
        let metrics = blocking::get_text(&format!("{url}/metrics"));
        granted += metric(&metrics, "cohort_judge_proxy_permits_granted_total");
        waited += metric(&metrics, "cohort_judge_proxy_permits_waited_total");
    }
    // The commands the replicas sent: every command INFO commandstats
    // counted between the two snapshots, but those run inside the
    // limiter's scripts (each script call, EVALSHA or EVAL, counts once)
    // and the test's own INFO.
    let mut calls = 0;
    let mut by_command = Vec::new();
    for (name, after) in &redis_after {
        let n = after - redis_before.get(name).copied().unwrap_or(0);
        if n > 0 && !INSIDE_SCRIPTS.contains(&name.as_str()) && name != "info" {
            calls += n;
            by_command.push(format!("{name}={n}"));
        }
    }
    let calls_per_permit = calls as f64 / granted as f64;

    println!(
        "3 replicas, shared Redis quota {RPM} rpm (mock bucket {bucket}), demand 3x for {} s, deadline {DEADLINE_MS} ms: \
         sent {}, answered {ok}, refused 429 {limited}; replica shares {:.1}% {:.1}% {:.1}%; median waits \
         {:.2} s {:.2} s {:.2} s; p99 wait {p99:.2} s (first-come order over the same arrivals: {ideal_p99:.2} s); \
         the mock admitted {admitted} over {:.2} s = {used:.1}% of the quota ({quota:.1}); upstream 429s {enforced_429} \
         ({late_429} after the first second); permits granted {granted}, waited {waited}; Redis calls {calls} \
         ({}) = {calls_per_permit:.2} per granted permit",
        RUN.as_secs(),
        results.len(),
        shares[0] * 100.0,
        shares[1] * 100.0,
        shares[2] * 100.0,
        medians[0],
        medians[1],
        medians[2],
        window_us as f64 / 1e6,
        by_command.join(" "),
    );
    for s in &shares {
        assert!((s - 1.0 / 3.0).abs() <= 0.1 / 3.0, "a replica's share {:.1}% is not within 10% of a third", s * 100.0);
    }
    let spread = medians.iter().copied().fold(f64::MIN, f64::max) - medians.iter().copied().fold(f64::MAX, f64::min);
    assert!(spread <= 3.0, "the replicas' median waits are {spread:.2} s apart");
    assert_eq!(late_429, 0, "the replicas together overshot the upstream quota");
    assert!(used >= 97.0, "the replicas used only {used:.1}% of the quota");
    assert!(p99 <= ideal_p99 + 1.0, "p99 wait {p99:.2} s against {ideal_p99:.2} s in first-come order");
    assert!(calls_per_permit <= 3.0, "{calls_per_permit:.2} Redis calls per granted permit");
    assert_eq!(ok as u64, admitted, "every admitted request was answered");
    assert!(limited > 0, "demand was above the quota, so some callers were refused");
    drop(mock_proc);
}

/// The p99 wait of the served requests if one queue at the quota's rate
/// served every arrival in order, refusing those it could not serve within
/// the permit wait (the proxies' own bound).
fn first_come_p99(results: &[(usize, Duration, u16, Duration)]) -> f64 {
    let mut arrivals: Vec<f64> = results.iter().map(|r| r.1.as_secs_f64()).collect();
    arrivals.sort_by(f64::total_cmp);
    let interval = 60.0 / RPM as f64;
    let mut next = f64::MIN;
    let mut waits = Vec::new();
    for a in arrivals {
        let slot = next.max(a);
        if slot - a <= PERMIT_WAIT.as_secs_f64() {
            waits.push(slot - a);
            next = slot + interval;
        }
    }
    quantile(&mut waits, 0.99)
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
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
