//! The judge's calls kept (seed 000 section 7): every batch's prompt as the
//! upstream received it and its raw reply come back in `JudgeResponse.calls`,
//! for an OpenAI-compatible upstream, an Anthropic one and the SIMULATED
//! `sim` judge alike.
//!
//! The upstream here is a recording double of this file (not the shared mock
//! provider, which keeps only the claims it parsed): it keeps each request's
//! body as received and answers a fixed reply, so the test compares bytes,
//! not a re-reading of them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use cohort_proto::v1 as pb;
use common::{ProxyHandle, UPSTREAM_KEY, claim, config, parse, request};
use serde_json::{Value, json};

/// What the recording upstream answers, byte for byte (two verdict lines,
/// odd spacing and a trailing remark kept as sent).
const REPLY: &str = "Claim 1: YES\nClaim 2:  NO\n\n(remark: \"quoted\" \u{e9})";

/// The request bodies received, in order.
type Received = Arc<Mutex<Vec<Value>>>;

/// A recording upstream on a free loopback port: OpenAI chat completions
/// and Anthropic Messages, each answering [`REPLY`] as `served-1`.
async fn recording_upstream() -> (String, Received) {
    let received: Received = Arc::default();
    async fn openai(State(r): State<Received>, body: axum::Json<Value>) -> axum::Json<Value> {
        r.lock().unwrap().push(body.0);
        axum::Json(json!({"id": "c1", "object": "chat.completion", "model": "served-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}))
    }
    async fn anthropic(State(r): State<Received>, body: axum::Json<Value>) -> axum::Json<Value> {
        r.lock().unwrap().push(body.0);
        axum::Json(json!({"id": "m1", "type": "message", "role": "assistant", "model": "served-1",
            "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5}}))
    }
    let app = Router::new()
        .route("/v1/chat/completions", post(openai))
        .route("/v1/messages", post(anthropic))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), received)
}

/// Six claims in batches of four: two calls, each with its claim ids in
/// prompt order.
fn six_claims() -> Vec<pb::Claim> {
    (0..6).map(|i| claim(&format!("c{i}"), i % 2 == 0, "")).collect()
}

/// The (role, content) pairs an upstream of `kind` received in `body`.
fn received_messages(kind: &str, body: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    let mut out = Vec::new();
    if kind == "anthropic" {
        out.push(("system".to_owned(), text(&body["system"])));
    }
    for m in body["messages"].as_array().unwrap() {
        out.push((text(&m["role"]), text(&m["content"])));
    }
    out
}

/// Proves, for an OpenAI-compatible and an Anthropic upstream, that each
/// call kept in the response holds the messages exactly as the upstream
/// received them (system and user, byte for byte, in order), the raw reply
/// exactly as sent, the served model, one attempt, and the claim ids of its
/// batch in prompt order; and that no secret is in it.
#[tokio::test]
async fn kept_prompts_are_the_bytes_the_upstream_received() {
    for kind in ["openai", "anthropic"] {
        let (base, received) = recording_upstream().await;
        let proxy = ProxyHandle::start(config(&base, kind, "judge-model", "served-1", "", "")).await;
        let mut client = proxy.client().await;
        let resp = client.judge_claims(request("j", six_claims())).await.unwrap().into_inner();
        let bodies = received.lock().unwrap().clone();
        assert_eq!((resp.calls.len(), bodies.len()), (2, 2), "{kind}: one call per batch of four");
        let ids: Vec<Vec<String>> = resp.calls.iter().map(|c| c.claim_ids.clone()).collect();
        assert_eq!(ids, [vec!["c0", "c1", "c2", "c3"], vec!["c4", "c5"]], "{kind}");
        for call in &resp.calls {
            let kept: Vec<(String, String)> =
                call.messages.iter().map(|m| (m.role.clone(), m.content.clone())).collect();
            assert_eq!(kept.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(), ["system", "user"], "{kind}");
            // The batches run concurrently: find the body whose user prompt
            // is this call's, then compare every message byte for byte.
            let body = bodies
                .iter()
                .find(|b| received_messages(kind, b).last().map(|(_, c)| c) == kept.last().map(|(_, c)| c))
                .unwrap_or_else(|| panic!("{kind}: no request carried the kept user prompt"));
            assert_eq!(received_messages(kind, body), kept, "{kind}: the kept messages are those received");
            assert_eq!((call.replied, call.raw_reply.as_str()), (true, REPLY), "{kind}: the reply verbatim");
            assert_eq!((call.requested_model.as_str(), call.served_model.as_str()), ("judge-model", "served-1"));
            assert_eq!((call.attempts, call.outcome.as_str(), call.simulated), (1, "ok", false), "{kind}");
            assert!(call.started_at.ends_with('Z'), "{kind}: RFC 3339 UTC: {}", call.started_at);
            let all = format!("{call:?}");
            assert!(!all.contains(UPSTREAM_KEY) && !all.contains(common::TEAM_A_KEY), "{kind}: no secret kept");
        }
        // The verdicts are read from the same reply that was kept.
        assert_eq!(resp.verdicts[0].reasoning, "Claim 1: YES", "{kind}");
    }
}

/// Proves a call whose upstream never answers usably is kept too: its
/// prompt, no reply (`replied` false), every attempt counted and the last
/// attempt's class as its outcome.
#[tokio::test]
async fn a_failed_call_keeps_its_prompt_and_no_reply() {
    // A loopback port nothing listens on: every attempt is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let proxy = ProxyHandle::start(config(&base, "openai", "judge-model", "judge-model", "", "")).await;
    let mut client = proxy.client().await;
    let resp = client.judge_claims(request("j", six_claims()[..2].to_vec())).await.unwrap().into_inner();
    let [call] = resp.calls.as_slice() else { panic!("one call: {:?}", resp.calls) };
    assert_eq!(call.claim_ids, ["c0", "c1"]);
    assert!(call.messages.len() == 2 && call.messages[1].content.contains("Claim text c0 holds"));
    assert_eq!((call.replied, call.raw_reply.as_str(), call.served_model.as_str()), (false, "", ""));
    assert_eq!(call.attempts as usize, resp.attempts.len());
    assert!(call.attempts >= 1 && call.outcome != "ok", "{call:?}");
}

/// Proves the SIMULATED judge's calls are kept and labelled: the prompt is
/// the core's judge prompt of the batch, the reply its word-overlap rule's
/// text, and `simulated` is set.
#[tokio::test]
async fn the_sim_judges_calls_are_kept_and_labelled_simulated() {
    let config = parse(
        r#"
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
batch_size = 4
"#,
    );
    let proxy = ProxyHandle::start(config).await;
    let mut client = proxy.client().await;
    let claims = six_claims();
    let resp = client.judge_claims(request("j", claims.clone())).await.unwrap().into_inner();
    assert_eq!(resp.calls.len(), 2);
    let first = &resp.calls[0];
    let prompt_claims: Vec<cohort_core::scoring::JudgeClaim> = claims[..4]
        .iter()
        .map(|c| cohort_core::scoring::JudgeClaim {
            text: c.text.clone(),
            snippets: c.snippets.iter().map(|s| s.text.clone()).collect(),
        })
        .collect();
    let (system, user) = cohort_core::scoring::judge_prompt(&prompt_claims);
    assert_eq!((first.messages[0].content.as_str(), first.messages[1].content.as_str()), (&*system, &*user));
    assert!(first.replied && first.raw_reply.contains("Claim 1:"), "{first:?}");
    assert!(resp.calls.iter().all(|c| c.simulated && c.served_model == "cohort-sim-judge-1"));
}
