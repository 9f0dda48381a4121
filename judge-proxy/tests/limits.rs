//! The limiter: waiting for a permit up to a deadline, pauses that hold
//! every team, token reconciliation (tokio's clock paused: no sleeping),
//! and the Redis store deciding exactly as the local one.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use cohort_judge_proxy::ProxyError;
use cohort_judge_proxy::limiter::gcra::{Decision, ShareSpec};
use cohort_judge_proxy::limiter::{Limiter, LocalLimiter, PermitRequest, RedisLimiter, Store};
use cohort_judge_proxy::metrics::Metrics;
use cohort_judge_proxy::secret::Secret;
use common::*;
use tokio::time::Instant;

/// A local limiter over upstream `mock` at `rpm`, burst 2, `tpm`.
fn limiter(rpm: u32, tpm: u64) -> (Limiter, Arc<Metrics>) {
    let text = config_text("http://127.0.0.1:9/v1", "openai", "m", "m", "", "")
        .replace("rpm = 60000", &format!("rpm = {rpm}\nburst = 2"))
        .replace("tpm = 100000000", &format!("tpm = {tpm}"));
    let metrics = Arc::new(Metrics::default());
    (Limiter::new(&parse(&text), Store::Local(LocalLimiter::new()), Arc::clone(&metrics)), metrics)
}

fn req(team: &str, tokens: u64) -> PermitRequest<'_> {
    PermitRequest { upstream: "mock", team, tokens }
}

/// At 60 rpm, requests after the first wait for their permits (about a
/// second each) instead of failing, and the waits are counted.
#[tokio::test(start_paused = true)]
async fn a_caller_waits_for_its_permit() {
    let (l, metrics) = limiter(60, 1_000_000);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(10);
    assert_eq!(l.acquire(req("a", 1), deadline).await.unwrap().waited, Duration::ZERO);
    for _ in 0..3 {
        let p = l.acquire(req("a", 1), deadline).await.unwrap();
        assert!(p.waited > Duration::ZERO && p.waited <= Duration::from_secs(1), "{:?}", p.waited);
    }
    assert_eq!(start.elapsed(), Duration::from_secs(3), "three more permits at one a second");
    let m = metrics.snapshot();
    assert_eq!((m.permits_granted, m.permits_waited, m.permit_deadlines), (4, 3, 0));
}

/// Past its deadline a caller gets PermitDeadline, a 429 that says how long
/// it waited and when to come back.
#[tokio::test(start_paused = true)]
async fn past_the_deadline_the_caller_gets_a_retryable_429() {
    let (l, metrics) = limiter(6, 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    l.acquire(req("a", 1), deadline).await.unwrap();
    l.acquire(req("a", 1), deadline).await.unwrap();
    let start = Instant::now();
    let e = l.acquire(req("a", 1), Instant::now() + Duration::from_secs(3)).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(3), "it waited until its deadline");
    let ProxyError::PermitDeadline { retry_after, waited, .. } = &e else { panic!("{e}") };
    assert_eq!(*waited, Duration::from_secs(3));
    assert!(*retry_after > Duration::ZERO && *retry_after <= Duration::from_secs(10), "{retry_after:?}");
    assert_eq!(e.http_status(), 429);
    assert_eq!(metrics.snapshot().permit_deadlines, 1);
}

/// A pause (a provider 429 with Retry-After) holds every team until it
/// ends.
#[tokio::test(start_paused = true)]
async fn a_pause_holds_every_team() {
    let (l, _) = limiter(6000, 1_000_000);
    l.pause("mock", Duration::from_secs(5)).await.unwrap();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let (a, b) = tokio::join!(l.acquire(req("a", 1), deadline), l.acquire(req("b", 1), deadline));
    assert!(a.unwrap().waited >= Duration::from_secs(5));
    assert!(b.unwrap().waited >= Duration::from_secs(5));
}

/// Tokens per minute: a call estimated at the whole minute's tokens holds
/// the next one back for a minute, unless reconciliation with the real
/// (small) usage gives the difference back.
#[tokio::test(start_paused = true)]
async fn reconciliation_returns_overestimated_tokens() {
    let (reconciled, _) = limiter(6000, 1000);
    let (estimated, _) = limiter(6000, 1000);
    let deadline = Instant::now() + Duration::from_secs(120);
    let big = reconciled.acquire(req("a", 1000), deadline).await.unwrap();
    estimated.acquire(req("a", 1000), deadline).await.unwrap();
    reconciled.reconcile("mock", "a", &big, 10).await.unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(matches!(reconciled.try_acquire(req("a", 100)).await.unwrap(), Decision::Admit { .. }));
    assert!(matches!(estimated.try_acquire(req("a", 100)).await.unwrap(), Decision::Wait { us } if us > 50_000_000));
}

/// Two teams of equal weight, both greedy: each gets about half the
/// upstream's requests, and together never more than the quota.
#[tokio::test(start_paused = true)]
async fn greedy_teams_split_the_quota_by_weight() {
    let (l, _) = limiter(60, 1_000_000);
    let l = Arc::new(l);
    let end = Instant::now() + Duration::from_secs(60);
    let count = |team: &'static str| {
        let l = Arc::clone(&l);
        async move {
            let mut n: u32 = 0;
            while l.acquire(req(team, 1), end).await.is_ok() {
                n += 1;
            }
            n
        }
    };
    let (a, b) = tokio::join!(count("a"), count("b"));
    assert!(a + b <= 62, "{a} + {b}: 60 a minute plus the burst of 2");
    assert!(a + b >= 59, "{a} + {b}: the quota is used");
    assert!(a.abs_diff(b) <= 4, "{a} vs {b}");
}

/// The Redis store (acquire.lua) and the local one (gcra.rs) make the same
/// decision for every request of a fixed script of 400 requests by three
/// teams of unequal weight, sizes and gaps varying.
#[tokio::test]
async fn local_and_redis_decide_alike() {
    let redis = cohort_tests::RedisServer::start().unwrap();
    let r = RedisLimiter::connect(&Secret::new(redis.url()), "conformance").await.unwrap();
    let local = LocalLimiter::new();
    let weights = [("a", 1), ("b", 2), ("c", 5)];
    let mut now: i64 = 1_000_000_000;
    let mut x: u64 = 12345;
    let mut admitted = 0;
    for step in 0..400 {
        // A fixed linear congruential sequence: the same script every run.
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (team, w) = weights[(x >> 33) as usize % 3];
        let tokens = 1 + (x >> 40) % 400;
        now += i64::try_from((x >> 20) % 150_000).unwrap();
        let spec = ShareSpec { rpm: 600, tpm: 60_000, burst: 4, team_weight: w, total_weight: 8 };
        let c = spec.charges(tokens);
        let l = local.decide("u", team, &c, Some(now));
        let d = r.decide("u", team, &c, Some(now)).await.unwrap();
        assert_eq!(l, d, "step {step}: team {team}, {tokens} tokens at {now}");
        if matches!(l, Decision::Admit { .. }) {
            admitted += 1;
        }
    }
    assert!((50..350).contains(&admitted), "the script exercises both answers: {admitted} admitted");
    // Every key carries the upstream's hash tag.
    assert!(r.keys("u", "a").iter().all(|k| k.starts_with("{conformance:jp:u}:")));
}

/// The example config in examples/ is valid (with its keys in the
/// environment and its key files present).
#[test]
fn the_example_config_is_valid() {
    let path = cohort_tests::workspace_root().join("examples/judge-proxy.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/anthropic.key"), "sk-ant-example-000000").unwrap();
    std::fs::write(dir.path().join("secrets/adhoc.key"), "adhoc-example-000000").unwrap();
    let env = |name: &str| match name {
        "OPENROUTER_API_KEY" => Some("sk-or-example-000000".to_owned()),
        "COHORT_TEAM_EVALUATION_KEY" => Some("evaluation-example-000000".to_owned()),
        _ => None,
    };
    let c = cohort_judge_proxy::config::build_and_validate(&text, "judge-proxy.toml", dir.path(), &env).unwrap();
    assert_eq!((c.upstreams.len(), c.teams.len(), c.judges.len()), (2, 2, 2));
    assert!(c.strict && c.prices.is_some());
}
