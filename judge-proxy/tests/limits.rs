//! The limiter: bookings that sleep until their slot, refusals at once
//! with a true Retry-After, pauses that hold every team, give-backs, token
//! corrections (tokio's clock paused: no sleeping), and the Redis store
//! deciding exactly as the local one.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use cohort_judge_proxy::ProxyError;
use cohort_judge_proxy::limiter::gcra::{BookResult, UpstreamSpec};
use cohort_judge_proxy::limiter::rate::Limited;
use cohort_judge_proxy::limiter::{Limiter, LocalLimiter, PermitRequest, RedisLimiter, Store};
use cohort_judge_proxy::metrics::Metrics;
use cohort_judge_proxy::secret::Secret;
use common::*;
use tokio::time::Instant;

/// A config over upstream `mock` at `rpm`, burst 2, `tpm`; teams a and b.
fn limits_config(rpm: u32, tpm: u64) -> cohort_judge_proxy::ProxyConfig {
    let text = config_text("http://127.0.0.1:9/v1", "openai", "m", "m", "", "")
        .replace("rpm = 60000", &format!("rpm = {rpm}\nburst = 2"))
        .replace("tpm = 100000000", &format!("tpm = {tpm}"));
    parse(&text)
}

/// A local limiter over [`limits_config`].
fn limiter(rpm: u32, tpm: u64) -> (Limiter, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    (Limiter::new(&limits_config(rpm, tpm), Store::Local(LocalLimiter::new()), Arc::clone(&metrics)), metrics)
}

fn req(team: &str, tokens: u64) -> PermitRequest<'_> {
    PermitRequest { upstream: "mock", team, tokens }
}

/// At 60 rpm (burst 2), a lone team gets two permits at once (its own
/// timeline and the idle team's), then two every two seconds: it sleeps
/// for its slots instead of failing, and only those that slept count as
/// waited.
#[tokio::test(start_paused = true)]
async fn a_caller_sleeps_until_its_slot() {
    let (l, metrics) = limiter(60, 1_000_000);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(10);
    let mut at = Vec::new();
    for _ in 0..6 {
        l.acquire(req("a", 1), deadline).await.unwrap();
        at.push(start.elapsed().as_secs());
    }
    assert_eq!(at, vec![0, 0, 2, 2, 4, 4], "60 a minute, a burst of 2");
    let m = metrics.snapshot();
    assert_eq!((m.permits_granted, m.permits_waited, m.permit_deadlines), (6, 2, 0));
}

/// A booking whose slot is past the caller's deadline is refused at once
/// (no waiting), and its Retry-After is true: a caller that comes back
/// with that much patience gets its permit exactly then.
#[tokio::test(start_paused = true)]
async fn a_refusal_is_immediate_and_its_retry_after_true() {
    let (l, metrics) = limiter(6, 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    l.acquire(req("a", 1), deadline).await.unwrap();
    l.acquire(req("a", 1), deadline).await.unwrap();
    let start = Instant::now();
    let e = l.acquire(req("a", 1), Instant::now() + Duration::from_secs(3)).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO, "refused at once");
    let ProxyError::PermitDeadline { retry_after, .. } = &e else { panic!("{e}") };
    assert_eq!(*retry_after, Duration::from_secs(20), "6 rpm over two teams: its next slot is 20 s away");
    assert_eq!(e.http_status(), 429);
    assert_eq!(metrics.snapshot().permit_deadlines, 1);
    let p = l.acquire(req("a", 1), Instant::now() + *retry_after).await.unwrap();
    assert_eq!(p.waited, *retry_after);
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
/// its timeline for a minute, unless the correction to the real (small)
/// usage gives the difference back.
#[tokio::test(start_paused = true)]
async fn reconciliation_returns_overestimated_tokens() {
    let (reconciled, _) = limiter(6000, 1000);
    let (estimated, _) = limiter(6000, 1000);
    let deadline = Instant::now() + Duration::from_secs(120);
    let big = reconciled.acquire(req("a", 1000), deadline).await.unwrap();
    estimated.acquire(req("a", 1000), deadline).await.unwrap();
    reconciled.reconcile("mock", &big, 10).await.unwrap();
    // Team b takes its own timeline in both (so a cannot borrow it).
    reconciled.acquire(req("b", 1000), deadline).await.unwrap();
    estimated.acquire(req("b", 1000), deadline).await.unwrap();
    let soon = Instant::now() + Duration::from_secs(5);
    assert!(reconciled.acquire(req("a", 100), soon).await.is_ok());
    let e = estimated.acquire(req("a", 100), soon).await.unwrap_err();
    assert!(e.retry_after().unwrap() > Duration::from_secs(50), "{e}");
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
    assert!(a + b <= 64, "{a} + {b}: 60 a minute plus the burst of 2 plus one per team");
    assert!(a + b >= 59, "{a} + {b}: the quota is used");
    assert!(a.abs_diff(b) <= 4, "{a} vs {b}");
}

/// A caller that leaves before its slot (its future dropped) gives the
/// booking back: the next caller gets that slot, not the one after.
#[tokio::test(start_paused = true)]
async fn a_caller_that_leaves_gives_its_slot_back() {
    let (l, _) = limiter(60, 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    l.acquire(req("a", 1), deadline).await.unwrap();
    l.acquire(req("a", 1), deadline).await.unwrap();
    let start = Instant::now();
    let left = tokio::time::timeout(Duration::from_millis(500), l.acquire(req("a", 1), deadline)).await;
    assert!(left.is_err(), "it was still waiting for its slot at +2 s");
    let p = l.acquire(req("a", 1), deadline).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2), "the slot given back, at +2 s, is taken again");
    assert!(p.waited < Duration::from_secs(2));
}

/// Two replicas on one Redis: what one books, the other sees (first-come
/// across replicas), and a booking dropped on one is given back to both.
#[tokio::test]
async fn replicas_share_bookings_and_give_backs_through_redis() {
    let redis = cohort_tests::RedisServer::start().unwrap();
    replicas_share_bookings_and_give_backs(redis.url()).await;
}

/// The same on a 3-master Redis Cluster (`redis+cluster://`): an
/// upstream's keys are in one slot, so the scripts run there and the
/// replicas share one quota as on a single server.
#[tokio::test]
async fn replicas_share_bookings_and_give_backs_through_a_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(|| cohort_tests::RedisCluster::start(3, 0).unwrap()).await.unwrap();
    replicas_share_bookings_and_give_backs(cluster.url()).await;
}

async fn replicas_share_bookings_and_give_backs(url: String) {
    let config = limits_config(60, 1_000_000);
    let replica = || async {
        let store = RedisLimiter::connect(&Secret::new(url.clone()), "share").await.unwrap();
        Limiter::new(&config, Store::Redis(store), Arc::new(Metrics::default()))
    };
    let (one, two) = (replica().await, replica().await);
    let deadline = Instant::now() + Duration::from_secs(30);
    one.acquire(req("a", 1), deadline).await.unwrap();
    one.acquire(req("a", 1), deadline).await.unwrap();
    // Both timelines are used now: replica two's next slot is about 2 s away.
    let e = two.acquire(req("a", 1), Instant::now() + Duration::from_millis(500)).await.unwrap_err();
    let wait = e.retry_after().unwrap();
    assert!(wait > Duration::from_millis(1500) && wait <= Duration::from_secs(2), "{wait:?}");
    // A booking on replica one, dropped before its slot, is given back.
    let left = tokio::time::timeout(Duration::from_millis(200), one.acquire(req("a", 1), deadline)).await;
    assert!(left.is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let e = two.acquire(req("a", 1), Instant::now() + Duration::from_millis(100)).await.unwrap_err();
    let again = e.retry_after().unwrap();
    assert!(again < wait, "the slot replica one gave back is the next one again: {again:?} vs {wait:?}");
}

/// The Redis store (book.lua, adjust.lua, adapt.lua) and the local one
/// (gcra.rs) make the same decision for every step of a fixed script of 600
/// steps: bookings by three teams of unequal weight with sizes, patience
/// and gaps varying, give-backs, token corrections riding on bookings,
/// rate cuts, header caps and pauses.
#[tokio::test]
async fn local_and_redis_decide_alike() {
    let redis = cohort_tests::RedisServer::start().unwrap();
    local_and_redis_decide_alike_at(redis.url()).await;
}

/// The same 600 steps decide alike on a 3-master Redis Cluster
/// (`redis+cluster://`): every script names its keys, all in the
/// upstream's slot, so the team shares, borrowing, cuts and pauses hold
/// there as on one server.
#[tokio::test]
async fn local_and_redis_cluster_decide_alike() {
    let cluster = tokio::task::spawn_blocking(|| cohort_tests::RedisCluster::start(3, 0).unwrap()).await.unwrap();
    local_and_redis_decide_alike_at(cluster.url()).await;
}

async fn local_and_redis_decide_alike_at(url: String) {
    let r = RedisLimiter::connect(&Secret::new(url), "conformance").await.unwrap();
    let local = LocalLimiter::new();
    let teams: Vec<String> = ["a", "b", "c"].iter().map(|t| (*t).to_owned()).collect();
    let spec = UpstreamSpec { rpm: 600, tpm: 60_000, burst: 4, weights: vec![1, 2, 5] };
    let mut now: i64 = 1_000_000_000;
    let mut x: u64 = 12345;
    let (mut booked, mut refused, mut borrowed, mut cuts) = (0, 0, 0, 0);
    let mut last: Option<(usize, i64, i64, i64, i64)> = None;
    let mut last_ppm = 1_000_000;
    for step in 0..600 {
        // A fixed linear congruential sequence: the same script every run.
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let team = usize::try_from((x >> 33) % 3).unwrap();
        let tokens = 1 + (x >> 40) % 400;
        now += i64::try_from((x >> 20) % 150_000).unwrap();
        let what = (x >> 50) % 20;
        if what == 0 {
            let (epoch, slot) = last.map_or((0, now), |l| (l.3, l.4));
            let limited = Some(Limited { epoch, slot, rpm: spec.rpm });
            let a = local.adapt("u", limited, 0, None, Some(now));
            let b = r.adapt("u", limited, 0, None, Some(now)).await.unwrap();
            assert_eq!(a, b, "step {step}: cut");
            if a < last_ppm {
                cuts += 1;
            }
            last_ppm = a;
            continue;
        }
        if what == 1 {
            let cap = Some(i64::try_from(300_000 + (x >> 30) % 700_000).unwrap());
            let pause = i64::try_from((x >> 25) % 300_000).unwrap();
            let a = local.adapt("u", None, pause, cap, Some(now));
            let b = r.adapt("u", None, pause, cap, Some(now)).await.unwrap();
            assert_eq!(a, b, "step {step}: cap and pause");
            continue;
        }
        let corrections: Vec<(usize, i64, i64)> = match (what, last) {
            (2, Some((j, ri, ti, _, _))) => vec![(j, -ri, -ti)],
            (3 | 4, Some((j, _, ti, _, _))) => vec![(j, 0, -ti / 2), ((j + 1) % 3, 0, 5_000)],
            _ => Vec::new(),
        };
        let max_wait = i64::try_from((x >> 10) % 3_000_000).unwrap();
        let c = spec.charges(tokens);
        let (l, _) = local.book("u", team, &c, max_wait, &corrections, Some(now));
        let (d, _) = r.book("u", &teams, team, &c, max_wait, &corrections, Some(now)).await.unwrap();
        assert_eq!(l, d, "step {step}: team {team}, {tokens} tokens at {now}");
        match l {
            BookResult::Booked(b) => {
                booked += 1;
                last_ppm = b.ppm;
                if b.timeline != team {
                    borrowed += 1;
                }
                last = Some((b.timeline, b.req_inc, b.tok_inc, b.epoch, b.slot));
            }
            BookResult::Refused { .. } => refused += 1,
        }
    }
    assert!(booked > 50 && refused > 50, "the script exercises both answers: {booked} booked, {refused} refused");
    assert!(borrowed > 5 && cuts > 5, "and borrowing and cuts: {borrowed} borrowed, {cuts} cuts");
    // Every key carries the upstream's hash tag.
    let keys = [r.timeline_keys("u", "a").to_vec(), r.upstream_keys("u").to_vec()].concat();
    assert!(keys.iter().all(|k| k.starts_with("{conformance:jp:u}:")));
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

/// `redis_url` takes a Redis Cluster (`redis+cluster://HOST:PORT,...`)
/// through the same parser as the ledger, and a URL that names neither a
/// server nor a cluster is refused with a message that does not repeat it
/// (it may hold a password).
#[test]
fn redis_url_names_a_server_or_a_cluster() {
    let text =
        |url: &str| config_text("http://127.0.0.1:9/v1", "openai", "m", "m", &format!("redis_url = \"{url}\""), "");
    let c = parse(&text("redis+cluster://127.0.0.1:7000,127.0.0.1:7001"));
    assert!(c.redis_url.is_some());
    let bad = text("redis+cluster://user:hunter2@127.0.0.1");
    let e = cohort_judge_proxy::config::build_and_validate(&bad, "test.toml", std::path::Path::new("."), &env)
        .unwrap_err()
        .to_string();
    assert!(e.contains("redis_url") && e.contains("HOST:PORT"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
}
