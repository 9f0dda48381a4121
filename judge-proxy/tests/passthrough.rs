//! The OpenAI-compatible passthrough: team keys, routing, served-model
//! headers, forced temperature for judges, OpenAI-shaped errors, and the
//! fairness of shared quotas between teams.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use cohort_mock_provider::MockConfig;
use common::*;
use serde_json::{Value, json};

async fn post(http: &str, key: &str, body: Value, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(format!("{http}/v1/chat/completions"))
        .header("authorization", format!("Bearer {key}"))
        .json(&body);
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

fn chat(model: &str) -> Value {
    json!({"model": model, "temperature": 0.7, "messages": [{"role": "user", "content": "hello there"}]})
}

/// A judge route answers with the provider's body, names the requested and
/// served model in headers, and forces temperature 0; an UPSTREAM/MODEL
/// route passes the client's temperature through.
#[tokio::test]
async fn passthrough_answers_and_records_the_served_model() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let r = post(&proxy.http, TEAM_A_KEY, chat("j"), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-requested-model"], "judge-1");
    assert_eq!(r.headers()["x-cohort-served-model"], "judge-1");
    assert_eq!(r.headers()["x-cohort-attempts"], "ok");
    let body: Value = r.json().await.unwrap();
    assert!(body["choices"][0]["message"]["content"].as_str().unwrap().starts_with("mock reply"));
    let r = post(&proxy.http, TEAM_B_KEY, chat("mock/some-model"), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-served-model"], "some-model");
    let calls = mock_calls(&mock).await;
    assert_eq!(calls[0].temperature, Some(0.0), "judges run at temperature 0");
    assert_eq!(calls[1].temperature, Some(0.7));
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(reqwest::get(format!("{}{path}", proxy.http)).await.unwrap().status(), 200, "{path}");
    }
}

/// Wrong key: 401 that does not echo it; unknown model: 404; streaming and
/// bad bodies: 400. Nothing reaches the provider.
#[tokio::test]
async fn passthrough_refuses_bad_requests_clearly() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let r = post(&proxy.http, "guessed-key-0000001", chat("j"), &[]).await;
    assert_eq!(r.status(), 401);
    let text = r.text().await.unwrap();
    assert!(text.contains("invalid_api_key") && !text.contains("guessed-key-0000001"), "{text}");
    let r = post(&proxy.http, TEAM_A_KEY, chat("nowhere/model"), &[]).await;
    assert_eq!(r.status(), 404);
    let mut streaming = chat("j");
    streaming["stream"] = json!(true);
    let r = post(&proxy.http, TEAM_A_KEY, streaming, &[]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("stream"));
    let r = post(&proxy.http, TEAM_A_KEY, json!({"model": "j"}), &[]).await;
    assert_eq!(r.status(), 400);
    assert_eq!(mock_stats(&mock).await.requests, 0);
}

/// Fault headers the config forwards reach the provider: a 500 then an
/// answer shows as `server_error,ok`; quota exhaustion is a final 402.
#[tokio::test]
async fn passthrough_retries_and_classifies() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let r = post(&proxy.http, TEAM_A_KEY, chat("j"), &[("x-mock-fault", "server_error;times=1")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-attempts"], "server_error,ok");
    let r = post(&proxy.http, TEAM_A_KEY, chat("j"), &[("x-mock-fault", "insufficient_quota")]).await;
    assert_eq!(r.status(), 402);
    assert_eq!(r.headers()["x-cohort-attempts"], "quota_exhausted");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
}

/// Team `a` floods an upstream of 120 rpm (a share of 60 rpm each) with
/// 16 requests at once and a 1.5 s deadline; team `b` sends one request a
/// second, within its share. Every `b` request succeeds; the `a` requests
/// beyond what the upstream can take wait, then get a 429 with
/// Retry-After and a message naming the team and the wait; the provider
/// never sends a 429.
#[tokio::test]
async fn a_team_over_its_share_waits_then_gets_429_while_the_other_flows() {
    let mock = mock(MockConfig { rpm: Some(120), burst: Some(4), ..Default::default() }).await;
    let text = config_text(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")
        .replace("rpm = 60000", "rpm = 120\nburst = 2");
    let proxy = ProxyHandle::start(parse(&text)).await;
    let http = proxy.http.clone();
    let flood = async {
        let requests = (0..16).map(|_| post(&http, TEAM_A_KEY, chat("j"), &[("x-cohort-deadline-ms", "1500")]));
        let mut out = Vec::new();
        for r in futures_join(requests).await {
            let status = r.status().as_u16();
            let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            out.push((status, retry_after, r.text().await.unwrap()));
        }
        out
    };
    let modest = async {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let r = post(&http, TEAM_B_KEY, chat("j"), &[("x-cohort-deadline-ms", "1500")]).await;
            statuses.push(r.status().as_u16());
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        statuses
    };
    let (flood, modest) = tokio::join!(flood, modest);
    assert_eq!(modest, vec![200, 200, 200], "team b flows");
    let ok = flood.iter().filter(|(s, ..)| *s == 200).count();
    let limited: Vec<_> = flood.iter().filter(|(s, ..)| *s == 429).collect();
    assert!(ok >= 1, "team a got some of the quota");
    assert_eq!(ok + limited.len(), 16, "{flood:?}");
    assert!(!limited.is_empty(), "team a was held back");
    for (_, retry_after, body) in &limited {
        assert!(retry_after.as_deref().is_some_and(|s| s.parse::<u64>().unwrap() >= 1), "{retry_after:?}");
        assert!(body.contains("team \\\"a\\\" waited") && body.contains("rate_limit_exceeded"), "{body}");
    }
    assert_eq!(mock_stats(&mock).await.enforced_429, 0, "the provider never had to refuse");
}

/// Runs futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F::Output: Send,
{
    let mut out = Vec::new();
    let pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut pending: Vec<_> = pinned.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, f) in pending.iter_mut().enumerate() {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    for r in results {
        out.push(r.unwrap());
    }
    out
}
