//! Served-model recording under alias churn: a router alias that resolves
//! to another model on some calls. Every trace record names the model that
//! actually answered; strict mode makes exactly those calls' verdicts
//! unjudged (model_mismatch).

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use cohort_mock_provider::{AliasConfig, MockConfig};
use cohort_proto::v1 as pb;
use common::*;
use serde_json::Value;

const CALLS: usize = 12;

fn churning_mock(body_echoes_alias: bool) -> MockConfig {
    MockConfig {
        aliases: vec![AliasConfig {
            name: "judge-alias".into(),
            models: vec!["judge-1".into(), "judge-2".into()],
            every: 3,
        }],
        router_headers: true,
        body_echoes_requested_model: body_echoes_alias,
        ..Default::default()
    }
}

/// Sends CALLS requests of 3 claims each (one call each); returns every
/// verdict with the model the mock says served the call of its claim.
async fn run(strict: bool, body_echoes_alias: bool) -> (Vec<(pb::ClaimVerdict, String)>, Vec<pb::JudgeResponse>) {
    let mock = mock(churning_mock(body_echoes_alias)).await;
    let top = if strict { "strict = true" } else { "" };
    let proxy = ProxyHandle::start(config(&mock.base_url(), "openai", "judge-alias", "judge-1", top, "")).await;
    let mut client = proxy.client().await;
    let mut responses = Vec::new();
    for i in 0..CALLS {
        let claims = (0..3).map(|k| claim(&format!("r{i}k{k}"), k != 1, "")).collect();
        responses.push(client.judge_claims(request("j", claims)).await.unwrap().into_inner());
    }
    // The mock's own record of which model served each claim's call.
    let mut served_by_claim = HashMap::new();
    for call in mock_calls(&mock).await {
        for c in call.claims {
            served_by_claim.insert(c, call.served_model.clone());
        }
    }
    let mut out = Vec::new();
    for r in &responses {
        for v in &r.verdicts {
            let id = &v.claim_id;
            let text = format!("Claim text {id} holds");
            out.push((v.clone(), served_by_claim.get(&text).cloned().unwrap_or_else(|| panic!("no call for {text}"))));
        }
    }
    (out, responses)
}

fn trace(v: &pb::ClaimVerdict) -> Value {
    serde_json::from_str(&v.trace_record_json).unwrap()
}

/// Without strict mode: every claim is judged, and every trace record's
/// `judge_model` is the model that actually served its call (judge-2 on
/// every third call), never the requested alias. The record has the seed
/// 000 schema.
#[tokio::test]
async fn every_trace_record_names_the_model_that_answered() {
    let (verdicts, responses) = run(false, false).await;
    let mut by_model: HashMap<String, usize> = HashMap::new();
    for (v, served) in &verdicts {
        assert_ne!(v.verdict(), pb::Verdict::Unjudged);
        let t = trace(v);
        assert_eq!(t["judge_model"], served.as_str(), "{t}");
        assert_eq!(v.served_model, *served);
        *by_model.entry(served.clone()).or_default() += 1;
        let mut keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let schema = [
            "cited_indices",
            "cited_snippets",
            "claim_text",
            "judge_model",
            "judge_reasoning",
            "judge_verdict",
            "query_id",
            "system",
            "timestamp",
        ];
        assert_eq!(keys, schema, "the seed 000 trace schema");
        assert!(t["judge_verdict"] == "SUPPORTED" || t["judge_verdict"] == "UNSUPPORTED");
        assert_eq!(t["cited_snippets"][0]["index"], 1);
    }
    assert_eq!(by_model.get("judge-2"), Some(&(3 * CALLS / 3)), "every third call churned: {by_model:?}");
    assert_eq!(by_model.get("judge-1"), Some(&(3 * CALLS * 2 / 3)));
    // The attempts record requested and served model side by side.
    let churned = responses.iter().filter(|r| r.served_models == vec!["judge-2"]).count();
    assert_eq!(churned, CALLS / 3);
    assert!(
        responses.iter().all(|r| r.requested_model == "judge-alias" && r.attempts[0].requested_model == "judge-alias")
    );
}

/// Strict mode: exactly the verdicts of the calls served by judge-2 are
/// unjudged (model_mismatch); every other verdict is judged, with a trace
/// record naming judge-1.
#[tokio::test]
async fn strict_mode_unjudges_exactly_the_mismatched_calls() {
    let (verdicts, _) = run(true, false).await;
    let mut mismatched = 0;
    for (v, served) in &verdicts {
        if served == "judge-2" {
            assert_eq!(v.verdict(), pb::Verdict::Unjudged, "{v:?}");
            assert_eq!(v.unjudged_reason(), pb::UnjudgedReason::ModelMismatch);
            assert!(v.trace_record_json.is_empty());
            assert_eq!(v.served_model, "judge-2");
            mismatched += 1;
        } else {
            assert_ne!(v.verdict(), pb::Verdict::Unjudged, "{v:?}");
            assert_eq!(trace(v)["judge_model"], "judge-1");
        }
    }
    assert_eq!(mismatched, CALLS);
}

/// A router whose body echoes the alias: the configured router header is
/// what names the served model, so strict mode still catches the churn.
#[tokio::test]
async fn router_headers_win_over_a_body_that_echoes_the_alias() {
    let (verdicts, _) = run(true, true).await;
    let mismatched = verdicts.iter().filter(|(v, _)| v.unjudged_reason() == pb::UnjudgedReason::ModelMismatch).count();
    assert_eq!(mismatched, CALLS);
    for (v, served) in &verdicts {
        assert_eq!(v.served_model, *served);
    }
}
