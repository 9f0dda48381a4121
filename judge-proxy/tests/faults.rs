//! Every fault class of the mock provider through the gRPC `Judge` door:
//! the attempt classes recorded, the retries made or not made, and the
//! denominators (YES, NO, unjudged) of the verdicts.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cohort_mock_provider::MockConfig;
use cohort_proto::v1 as pb;
use common::*;
use pb::AttemptClass as C;
use pb::UnjudgedReason as R;

/// Judges two claims (the first supported, the second not) whose first
/// claim carries `marker`; returns the response and the proxy's handle.
async fn judge_two(marker: &str, top: &str) -> (pb::JudgeResponse, ProxyHandle) {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", top, "")).await;
    let resp = proxy
        .client()
        .await
        .judge_claims(request("j", vec![claim("c1", true, marker), claim("c2", false, "")]))
        .await
        .unwrap()
        .into_inner();
    (resp, proxy)
}

fn reasons(resp: &pb::JudgeResponse) -> Vec<R> {
    resp.verdicts.iter().map(|v| v.unjudged_reason()).collect()
}

/// The clean path: one ok attempt, one YES and one NO, requested and served
/// model recorded on the response and the attempt, usage reported.
#[tokio::test]
async fn clean_call_judges_every_claim() {
    let (resp, _p) = judge_two("", "").await;
    assert_eq!(classes(&resp), vec![C::Ok]);
    assert_eq!(tally(&resp), (1, 1, 0));
    assert_eq!(resp.requested_model, "judge-1");
    assert_eq!(resp.served_models, vec!["judge-1"]);
    assert_eq!(resp.attempts[0].requested_model, "judge-1");
    assert_eq!(resp.attempts[0].served_model, "judge-1");
    let usage = resp.usage.unwrap();
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
    assert_eq!(usage.cost_micros, None, "no price catalog: cost unknown, not zero");
}

/// 429 with Retry-After: rate_limited, the upstream paused for everyone
/// (one pause counted, the retry waited for its permit), then retried.
#[tokio::test]
async fn rate_limited_pauses_the_upstream_then_retries() {
    let (resp, proxy) = judge_two("[[mock:rate_limit;retry_after_ms=300;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::RateLimited, C::Ok]);
    assert_eq!(resp.attempts[0].http_status, 429);
    assert_eq!(tally(&resp), (1, 1, 0));
    assert_eq!(proxy.proxy.metrics().upstream_pauses, 1);
    assert!(resp.attempts[1].permit_wait_ms >= 250, "the retry waited out the pause: {:?}", resp.attempts[1]);
}

/// Retry-After as an HTTP date is honoured too (whole seconds: one second).
#[tokio::test]
async fn rate_limited_with_an_http_date_pauses_too() {
    let (resp, proxy) = judge_two("[[mock:rate_limit;retry_after_date=1;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::RateLimited, C::Ok]);
    assert_eq!(proxy.proxy.metrics().upstream_pauses, 1);
}

/// 429 insufficient_quota fails fast: one attempt, no retry storm, every
/// claim unjudged (provider_error), nothing counted as YES or NO.
#[tokio::test]
async fn insufficient_quota_fails_fast() {
    let (resp, proxy) = judge_two("[[mock:insufficient_quota]]", "").await;
    assert_eq!(classes(&resp), vec![C::QuotaExhausted]);
    assert_eq!(tally(&resp), (0, 0, 2));
    assert_eq!(reasons(&resp), vec![R::ProviderError, R::ProviderError]);
    assert_eq!(proxy.proxy.metrics().attempts_of(cohort_core::taxonomy::AttemptClass::QuotaExhausted), 1);
}

/// 402 is quota_exhausted too, and not retried.
#[tokio::test]
async fn payment_required_is_quota_exhausted() {
    let (resp, _p) = judge_two("[[mock:payment_required]]", "").await;
    assert_eq!(classes(&resp), vec![C::QuotaExhausted]);
    assert_eq!(resp.attempts[0].http_status, 402);
    assert_eq!(tally(&resp), (0, 0, 2));
}

/// 500 twice, then an answer: two server_error attempts, then ok.
#[tokio::test]
async fn server_errors_are_retried() {
    let (resp, _p) = judge_two("[[mock:server_error;times=2]]", "").await;
    assert_eq!(classes(&resp), vec![C::ServerError, C::ServerError, C::Ok]);
    assert_eq!(tally(&resp), (1, 1, 0));
}

/// 503 is a server_error, retried.
#[tokio::test]
async fn unavailable_is_a_retried_server_error() {
    let (resp, _p) = judge_two("[[mock:unavailable;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::ServerError, C::Ok]);
    assert_eq!(resp.attempts[0].http_status, 503);
}

/// A server error that persists uses up the attempts (4) and leaves every
/// claim unjudged (provider_error).
#[tokio::test]
async fn persistent_server_error_exhausts_the_attempts() {
    let (resp, proxy) = judge_two("[[mock:server_error]]", "").await;
    assert_eq!(classes(&resp), vec![C::ServerError; 4]);
    assert_eq!(tally(&resp), (0, 0, 2));
    assert_eq!(reasons(&resp), vec![R::ProviderError, R::ProviderError]);
    let m = proxy.proxy.metrics();
    assert_eq!(m.attempts_of(cohort_core::taxonomy::AttemptClass::ServerError), 4);
}

/// 502 "Provider returned empty content" is empty_content, retried.
#[tokio::test]
async fn empty_502_is_empty_content() {
    let (resp, _p) = judge_two("[[mock:empty_502;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::EmptyContent, C::Ok]);
    assert_eq!(resp.attempts[0].http_status, 502);
    assert_eq!(tally(&resp), (1, 1, 0));
}

/// A 200 with empty content is empty_content, retried.
#[tokio::test]
async fn empty_200_is_empty_content() {
    let (resp, _p) = judge_two("[[mock:empty_200;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::EmptyContent, C::Ok]);
    assert_eq!(resp.attempts[0].http_status, 200);
}

/// Truncated JSON is malformed: not retried, claims unjudged.
#[tokio::test]
async fn truncated_json_is_malformed_and_final() {
    let (resp, _p) = judge_two("[[mock:truncated_json]]", "").await;
    assert_eq!(classes(&resp), vec![C::Malformed]);
    assert_eq!(tally(&resp), (0, 0, 2));
}

/// A partial verdict list: the attempt is ok, the claim with no line is
/// unjudged (partial_reply), the other is judged. Denominator: 1 judged.
#[tokio::test]
async fn partial_reply_leaves_the_missing_claim_unjudged() {
    let (resp, _p) = judge_two("[[mock:partial]]", "").await;
    assert_eq!(classes(&resp), vec![C::Ok]);
    assert_eq!(tally(&resp), (1, 0, 1));
    assert_eq!(resp.verdicts[1].unjudged_reason(), R::PartialReply);
    assert!(resp.verdicts[1].trace_record_json.is_empty(), "no trace record for an unjudged claim");
    assert!(!resp.verdicts[0].trace_record_json.is_empty());
}

/// Prose instead of verdicts: every claim unjudged (unparseable), none
/// counted.
#[tokio::test]
async fn prose_is_unparseable() {
    let (resp, _p) = judge_two("[[mock:prose]]", "").await;
    assert_eq!(classes(&resp), vec![C::Ok]);
    assert_eq!(tally(&resp), (0, 0, 2));
    assert_eq!(reasons(&resp), vec![R::Unparseable, R::Unparseable]);
}

/// A stall past the attempt timeout is a timeout, retried.
#[tokio::test]
async fn stall_is_a_timeout_then_retried() {
    let (resp, _p) = judge_two("[[mock:stall;ms=5000;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::Timeout, C::Ok]);
    assert_eq!(resp.attempts[0].http_status, 0, "nothing came back");
    assert_eq!(tally(&resp), (1, 1, 0));
}

/// A connection reset mid-body is a connection_error, retried.
#[tokio::test]
async fn reset_is_a_connection_error_then_retried() {
    let (resp, _p) = judge_two("[[mock:reset;times=1]]", "").await;
    assert_eq!(classes(&resp), vec![C::ConnectionError, C::Ok]);
    assert_eq!(tally(&resp), (1, 1, 0));
}

/// A connection refused (no upstream listening) is a connection_error,
/// retried until the attempts run out.
#[tokio::test]
async fn refused_connection_is_a_connection_error() {
    let port = cohort_tests::free_port().unwrap();
    let proxy =
        ProxyHandle::start(config(&format!("http://127.0.0.1:{port}/v1"), "openai", "judge-1", "judge-1", "", ""))
            .await;
    let resp = proxy.client().await.judge_claims(request("j", vec![claim("c1", true, "")])).await.unwrap().into_inner();
    assert_eq!(classes(&resp), vec![C::ConnectionError; 4]);
    assert_eq!(tally(&resp), (0, 0, 1));
}

/// A 400 is a client_error: not retried.
#[tokio::test]
async fn bad_request_is_a_client_error_and_final() {
    let (resp, _p) = judge_two("[[mock:bad_request]]", "").await;
    assert_eq!(classes(&resp), vec![C::ClientError]);
    assert_eq!(resp.attempts[0].http_status, 400);
    assert_eq!(tally(&resp), (0, 0, 2));
}

/// Latency alone is no fault: one ok attempt.
#[tokio::test]
async fn latency_is_not_a_fault() {
    let (resp, _p) = judge_two("[[mock:latency;ms=200]]", "").await;
    assert_eq!(classes(&resp), vec![C::Ok]);
    assert!(resp.attempts[0].latency_ms >= 200);
}

/// Claims without captured evidence are never sent: unjudged
/// (source_unavailable), and no upstream attempt is made for them.
#[tokio::test]
async fn claims_without_evidence_are_not_sent() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let mut c = claim("c1", true, "");
    c.snippets[0].text = "  ".into();
    let resp = proxy.client().await.judge_claims(request("j", vec![c])).await.unwrap().into_inner();
    assert!(resp.attempts.is_empty());
    assert_eq!(resp.verdicts[0].unjudged_reason(), R::SourceUnavailable);
    assert_eq!(mock_stats(&mock).await.requests, 0);
}

/// Batching: 10 claims at batch size 4 make 3 calls, verdicts in request
/// order; every judge call is made at temperature 0.
#[tokio::test]
async fn claims_are_batched_in_order_at_temperature_zero() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let claims: Vec<_> = (0..10).map(|i| claim(&format!("c{i}"), i % 3 == 0, "")).collect();
    let resp = proxy.client().await.judge_claims(request("j", claims)).await.unwrap().into_inner();
    assert_eq!(resp.attempts.len(), 3);
    let got: Vec<_> = resp.verdicts.iter().map(|v| (v.claim_id.clone(), v.verdict())).collect();
    let want: Vec<_> =
        (0..10).map(|i| (format!("c{i}"), if i % 3 == 0 { pb::Verdict::Yes } else { pb::Verdict::No })).collect();
    assert_eq!(got, want);
    let calls = mock_calls(&mock).await;
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.temperature == Some(0.0)), "{calls:?}");
}

/// An Anthropic upstream: the Messages body is read, the served model
/// comes from its `model` field.
#[tokio::test]
async fn anthropic_upstream_judges() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "anthropic", "claude-judge", "claude-judge", "", "")).await;
    let resp = proxy
        .client()
        .await
        .judge_claims(request("j", vec![claim("c1", true, ""), claim("c2", false, "")]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(classes(&resp), vec![C::Ok]);
    assert_eq!(tally(&resp), (1, 1, 0));
    assert_eq!(resp.served_models, vec!["claude-judge"]);
}

/// Unknown judge, missing team key, bad input: the right gRPC codes.
#[tokio::test]
async fn bad_requests_get_clear_statuses() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-1", "judge-1", "", "")).await;
    let mut client = proxy.client().await;
    let e = client.judge_claims(request("nope", vec![claim("c1", true, "")])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let e = client
        .judge_claims(with_key(
            pb::JudgeRequest { judge: "j".into(), claims: vec![claim("c", true, "")], ..Default::default() },
            "wrong-key-123456",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let e = client.judge_claims(request("j", vec![])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(mock_stats(&mock).await.requests, 0);
}
