//! Charges that cannot lock anyone out (issue 12): a request whose token
//! estimate no provider could serve is refused with 400 before it is
//! charged, and a request at the limit that times out changes no other
//! team's waits (it is charged to its own team's share, and only its input
//! once it timed out). In process: the mock provider (TEST DOUBLE) and a
//! proxy on loopback ports.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use cohort_mock_provider::MockConfig;
use common::*;
use serde_json::{Value, json};
use tokio::time::Instant;

/// 600 rpm (5 a second per team), 10,000 tokens a minute (5,000 per team),
/// output capped at 8,000 tokens; one attempt of at most 1 s.
async fn start() -> (cohort_mock_provider::MockHandle, ProxyHandle) {
    let mock = mock(MockConfig::default()).await;
    let text = config_text(&mock.base_url(), "openai", "judge-1", "judge-1", "", "max_output_tokens = 8000")
        .replace("rpm = 60000", "rpm = 600")
        .replace("tpm = 100000000", "tpm = 10000")
        .replace("max_attempts = 4", "max_attempts = 1")
        .replace("attempt_timeout_ms = 2000", "attempt_timeout_ms = 1000");
    let proxy = ProxyHandle::start(parse(&text)).await;
    (mock, proxy)
}

async fn chat(proxy: &ProxyHandle, key: &str, content: &str, max_tokens: u64, fault: Option<&str>) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", proxy.http))
        .bearer_auth(key)
        .header("x-cohort-deadline-ms", "3000")
        .json(&json!({"model": "j", "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}));
    if let Some(f) = fault {
        r = r.header("x-mock-fault", f);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// `max_tokens: 10^12` is a 400 naming the upstream's `max_output_tokens`;
/// a request whose input and output exceed one minute of the upstream's
/// tokens is a 400 naming its tpm. Neither reaches the provider.
#[tokio::test]
async fn an_estimate_no_provider_could_serve_is_refused_with_400() {
    let (mock, proxy) = start().await;
    let (status, body) = chat(&proxy, TEAM_A_KEY, "hello", 1_000_000_000_000, None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("max_output_tokens 8000"), "{body}");
    let long_input = "word ".repeat(3_200);
    let (status, body) = chat(&proxy, TEAM_A_KEY, &long_input, 7_000, None).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("tpm 10000"), "{body}");
    assert_eq!(mock_stats(&mock).await.requests, 0, "nothing reached the provider");
}

/// Proves an output cap the provider would refuse is refused here, with a
/// 400 naming the field, before anything is charged or sent (issue 23: a
/// `max_tokens` of `"999999999"`, -10^15 or 150000.0 was forwarded as is
/// and estimated at the default 512): on `/v1/chat/completions` for
/// `max_tokens` and `max_completion_tokens`, and on `/v1/responses` for
/// `max_output_tokens`.
#[tokio::test]
async fn output_caps_the_provider_would_refuse_are_400s_naming_the_field() {
    let (mock, proxy) = start().await;
    let client = reqwest::Client::new();
    let send = |path: &str, body: Value| {
        client.post(format!("{}{path}", proxy.http)).bearer_auth(TEAM_A_KEY).json(&body).send()
    };
    let messages = json!([{"role": "user", "content": "hello"}]);
    for (field, value) in [
        ("max_tokens", json!("999999999")),
        ("max_tokens", json!(-1_000_000_000_000_000_i64)),
        ("max_tokens", json!(150000.0)),
        ("max_tokens", json!(0)),
        ("max_completion_tokens", json!("64")),
    ] {
        let body = json!({"model": "j", "messages": messages, field: value});
        let r = send("/v1/chat/completions", body).await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 400, "{field}={value}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(&format!("`{field}`")), "{body}");
    }
    let r = send("/v1/responses", json!({"model": "j", "input": "hello", "max_output_tokens": "9"})).await.unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("`max_output_tokens`"), "{body}");
    assert_eq!(mock_stats(&mock).await.requests, 0, "nothing reached the provider");
    let (status, body) = chat(&proxy, TEAM_A_KEY, "hello", 64, None).await;
    assert_eq!(status, 200, "a whole number goes through: {body}");
}

/// Team b asks every 250 ms (about its token share) before, during and
/// after team a's request at the output limit (8,000 tokens: about 96 s of
/// a team's token share), made right after three small ones of a (so a's
/// own timeline is busy) and stalled by the provider past the attempt
/// timeout. Every b request is answered, and no b wait rises: each stays
/// below 300 ms (the call itself is about 30 ms). Team a is charged only
/// its input once the call timed out: its next request of 4,000 tokens
/// (which only its own timeline can take) goes at once, not 96 s later
/// (which its 3 s deadline would refuse). That the huge request
/// never borrows b's timeline, whatever the timing, is proven on the rule
/// itself (gcra.rs `a_huge_request_never_borrows_another_teams_timeline`).
#[tokio::test]
async fn a_huge_request_that_times_out_changes_no_other_teams_waits() {
    let (_mock, proxy) = start().await;
    let team_b = |n: usize| {
        let proxy = &proxy;
        async move {
            let mut waits = Vec::new();
            for _ in 0..n {
                let t = Instant::now();
                let (status, body) = chat(proxy, TEAM_B_KEY, "small", 10, None).await;
                assert_eq!(status, 200, "{body}");
                waits.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            waits
        }
    };
    let before = team_b(6).await;
    let team_a = async {
        for _ in 0..3 {
            assert_eq!(chat(&proxy, TEAM_A_KEY, "small", 10, None).await.0, 200);
        }
        let (status, body) = chat(&proxy, TEAM_A_KEY, "huge", 8_000, Some("stall;ms=3000")).await;
        assert_eq!(status, 504, "the stalled call timed out: {body}");
    };
    let ((), during) = tokio::join!(team_a, team_b(8));
    let after = team_b(6).await;
    let t = Instant::now();
    // 4,000 tokens (48 s of a share) cannot borrow b's timeline: it needs
    // a's own, free again only if the timed-out call was refunded.
    let (status, body) = chat(&proxy, TEAM_A_KEY, "medium", 4_000, None).await;
    let a_next = t.elapsed();
    let ms = |w: &[Duration]| w.iter().map(|d| d.as_millis()).collect::<Vec<_>>();
    println!(
        "team b waits (ms) before {:?}, during team a's huge timed-out call {:?}, after {:?}; team a's next call {} ms",
        ms(&before),
        ms(&during),
        ms(&after),
        a_next.as_millis()
    );
    let worst = |w: &[Duration]| w.iter().max().copied().unwrap();
    assert!(worst(&during) < Duration::from_millis(300), "team b was held back: {:?}", ms(&during));
    assert!(worst(&after) < Duration::from_millis(300), "team b was held back: {:?}", ms(&after));
    assert_eq!(status, 200, "team a was charged the whole estimate: {body}");
    assert!(a_next < Duration::from_secs(1), "{a_next:?}");
}
