//! `POST /v1/responses` through the proxy against the mock provider (a
//! TEST DOUBLE): answered with the provider's Responses object, the served
//! model in headers and body, usage counted, team keys required, what the
//! passthrough cannot do refused by field name before the provider sees
//! it, retries and classification as for chat, and the SIMULATED sim
//! upstream labelled.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cohort_mock_provider::{AliasConfig, MockConfig};
use common::*;
use serde_json::{Value, json};

const SERVED: &str = "gpt-5-mini-2025-08-07";

async fn post(http: &str, key: Option<&str>, body: Value, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().post(format!("{http}/v1/responses")).json(&body);
    if let Some(key) = key {
        r = r.header("authorization", format!("Bearer {key}"));
    }
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

/// A mock whose `gpt-5-mini` is served by a dated snapshot on every call.
async fn aliased_mock() -> cohort_mock_provider::MockHandle {
    let alias = AliasConfig { name: "gpt-5-mini".into(), models: vec![SERVED.into(), SERVED.into()], every: 1 };
    mock(MockConfig { aliases: vec![alias], ..Default::default() }).await
}

fn output_text(body: &Value) -> String {
    body["output"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "output_text")
        .map(|p| p["text"].as_str().unwrap().to_owned())
        .collect()
}

/// An `UPSTREAM/MODEL` route answers with the provider's Responses object;
/// the model the mock served (not the one requested) is in the headers and
/// the body; the provider's usage is what the proxy counts; the call went
/// to the provider's `/v1/responses`; a judge route forces temperature 0.
#[tokio::test]
async fn a_response_is_answered_and_names_the_served_model() {
    let mock = aliased_mock().await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "gpt-5-mini", SERVED, "", "")).await;
    let request = json!({
        "model": "mock/gpt-5-mini",
        "instructions": "Answer briefly.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello responses"}]}],
        "max_output_tokens": 64,
        "temperature": 0.5,
        "store": false,
    });
    let r = post(&proxy.http, Some(TEAM_A_KEY), request, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-requested-model"], "gpt-5-mini");
    assert_eq!(r.headers()["x-cohort-served-model"], SERVED);
    assert_eq!(r.headers()["x-cohort-attempts"], "ok");
    assert!(r.headers().get("x-cohort-simulated").is_none());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "response");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], SERVED);
    let text = output_text(&body);
    assert!(text.starts_with("mock reply to: Answer briefly.\nhello responses"), "{text}");
    let (input, output) =
        (body["usage"]["input_tokens"].as_u64().unwrap(), body["usage"]["output_tokens"].as_u64().unwrap());
    assert!(input > 0 && output > 0, "{body}");
    let m = proxy.proxy.metrics();
    assert_eq!((m.input_tokens, m.output_tokens), (input, output), "the provider's usage is what the proxy counts");

    let r =
        post(&proxy.http, Some(TEAM_B_KEY), json!({"model": "j", "input": "judge me", "temperature": 0.9}), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-served-model"], SERVED);
    let calls = mock_calls(&mock).await;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].temperature, Some(0.5), "a model route passes the client's temperature");
    assert_eq!(calls[1].temperature, Some(0.0), "judges run at temperature 0");
    assert!(calls.iter().all(|c| c.requested_model == "gpt-5-mini" && c.served_model == SERVED), "{calls:?}");
    let stats = mock_stats(&mock).await;
    assert_eq!((stats.requests, stats.responses_requests), (2, 2), "both went to the provider's /v1/responses");
}

/// No key or a wrong key: 401 that does not echo the key; nothing reaches
/// the provider.
#[tokio::test]
async fn a_team_key_is_required() {
    let mock = aliased_mock().await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "gpt-5-mini", SERVED, "", "")).await;
    let body = json!({"model": "mock/gpt-5-mini", "input": "hi"});
    let r = post(&proxy.http, None, body.clone(), &[]).await;
    assert_eq!(r.status(), 401);
    let r = post(&proxy.http, Some("guessed-key-0000001"), body, &[]).await;
    assert_eq!(r.status(), 401);
    let text = r.text().await.unwrap();
    assert!(text.contains("invalid_api_key") && !text.contains("guessed-key-0000001"), "{text}");
    assert_eq!(mock_stats(&mock).await.requests, 0);
}

/// Streaming, background mode, `previous_response_id`, `conversation`,
/// a chat `messages` body, a missing `input` and an Anthropic upstream are
/// each a 400 `invalid_request_error` naming the field (and why), and
/// none reaches the provider; an unknown route is a 404.
#[tokio::test]
async fn what_is_not_supported_is_a_400_naming_the_field() {
    let mock = aliased_mock().await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "gpt-5-mini", SERVED, "", "")).await;
    let base = json!({"model": "mock/gpt-5-mini", "input": "hi"});
    let cases: [(&str, Value, &str); 6] = [
        ("stream", json!(true), "streaming is not supported"),
        ("background", json!(true), "no state"),
        ("previous_response_id", json!("resp_123"), "no state"),
        ("conversation", json!("conv_123"), "no state"),
        ("messages", json!([{"role": "user", "content": "hi"}]), "takes `input`"),
        ("input", Value::Null, "`input` must be"),
    ];
    for (field, value, why) in cases {
        let mut body = base.clone();
        if value.is_null() {
            body.as_object_mut().unwrap().remove(field);
        } else {
            body[field] = value;
        }
        let r = post(&proxy.http, Some(TEAM_A_KEY), body, &[]).await;
        assert_eq!(r.status(), 400, "{field}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{field}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{field}`")) && message.contains(why), "{field}: {message}");
    }
    let r = post(&proxy.http, Some(TEAM_A_KEY), json!({"model": "nowhere/x", "input": "hi"}), &[]).await;
    assert_eq!(r.status(), 404);
    assert_eq!(mock_stats(&mock).await.requests, 0);

    let anthropic = ProxyHandle::start(config(&mock.base_url(), "anthropic", "claude-x", "claude-x", "", "")).await;
    let r = post(&anthropic.http, Some(TEAM_A_KEY), json!({"model": "j", "input": "hi"}), &[]).await;
    assert_eq!(r.status(), 400);
    let message = r.text().await.unwrap();
    assert!(
        message.contains("`model`") && message.contains("anthropic") && message.contains("/v1/chat/completions"),
        "{message}"
    );
    assert_eq!(mock_stats(&mock).await.requests, 0);
}

/// A 500 then an answer is `server_error,ok` and answered; quota
/// exhaustion is a final 402 `insufficient_quota`; a 200 with empty text
/// and a reset are `empty_content` and `connection_error`, retried; a body
/// cut short is `malformed`, final (502): all as for chat.
#[tokio::test]
async fn a_5xx_is_retried_and_failures_are_classified() {
    let mock = aliased_mock().await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "gpt-5-mini", SERVED, "", "")).await;
    let body = json!({"model": "mock/gpt-5-mini", "input": "retry me"});
    let r = post(&proxy.http, Some(TEAM_A_KEY), body.clone(), &[("x-mock-fault", "server_error;times=1")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-attempts"], "server_error,ok");
    assert_eq!(r.headers()["x-cohort-served-model"], SERVED);
    let answered: Value = r.json().await.unwrap();
    assert_eq!(answered["object"], "response");
    let r = post(&proxy.http, Some(TEAM_A_KEY), body.clone(), &[("x-mock-fault", "insufficient_quota")]).await;
    assert_eq!(r.status(), 402);
    assert_eq!(r.headers()["x-cohort-attempts"], "quota_exhausted");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "insufficient_quota");
    let r = post(&proxy.http, Some(TEAM_A_KEY), body.clone(), &[("x-mock-fault", "empty_200;times=1")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-attempts"], "empty_content,ok");
    let r = post(&proxy.http, Some(TEAM_A_KEY), body.clone(), &[("x-mock-fault", "truncated_json")]).await;
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["x-cohort-attempts"], "malformed");
    let r = post(&proxy.http, Some(TEAM_A_KEY), body, &[("x-mock-fault", "reset;times=1")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-attempts"], "connection_error,ok");
    assert_eq!(mock_stats(&mock).await.responses_requests, 8);
}

/// A sim upstream answers a Responses call with a Responses object built
/// from the SIMULATED judge's reply, labelled simulated in the header and
/// the metadata, `model` the requested one (the sim serves what it is
/// asked for).
#[tokio::test]
async fn a_sim_upstream_answers_a_labelled_response() {
    let text = r#"
[[upstreams]]
name = "sim"
kind = "sim"
rpm = 600
tpm = 1000000

[[teams]]
name = "a"
key_env = "TEAM_A_KEY"

[[judges]]
name = "j"
upstream = "sim"
model = "cohort-sim-judge-1"
"#;
    let proxy = ProxyHandle::start(parse(text)).await;
    let input = "Claim 1: Sales of buses doubled.\nEvidence 1:\n- Sales of buses doubled.";
    let r = post(&proxy.http, Some(TEAM_A_KEY), json!({"model": "j", "input": input}), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-cohort-simulated"], "true");
    assert_eq!(r.headers()["x-cohort-served-model"], "cohort-sim-judge-1");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "response");
    assert_eq!(body["model"], "cohort-sim-judge-1");
    assert_eq!(body["metadata"]["cohort_simulated"], "true");
    assert_eq!(output_text(&body), "Claim 1: YES");
    assert!(body["usage"]["total_tokens"].as_u64().unwrap() > 0);
}
