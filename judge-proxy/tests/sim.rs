//! The `sim` upstream kind through the proxy's real front doors: gRPC
//! `Judge` and the OpenAI-compatible passthrough, with the limiter, the
//! verdict parser and strict mode in the path, and every answer labelled
//! SIMULATED.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod common;

use cohort_judge_proxy::ProxyConfig;
use cohort_judge_proxy::config::{BuiltinSimJudge, build_and_validate};
use cohort_judge_proxy::secret::Secret;
use cohort_judge_proxy::sim::NO_CLAIMS_REPLY;
use cohort_proto::v1 as pb;
use common::{ProxyHandle, TEAM_A_KEY, env, parse, request, tally, with_key};

const SIM_CONFIG: &str = r#"
strict = true

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
batch_size = 2
"#;

fn snippet(index: u32, text: &str) -> pb::Snippet {
    pb::Snippet { index, source_url: format!("https://sim.cohort.invalid/source-{index}"), text: text.into() }
}

fn claim(id: &str, text: &str, snippets: Vec<pb::Snippet>, cited: &[u32]) -> pb::Claim {
    pb::Claim { claim_id: id.into(), text: text.into(), snippets, cited_indices: cited.to_vec() }
}

/// Proves a sim judge answers gRPC `Judge` through the real path: its
/// verdicts follow its word-overlap rule over the claims' own evidence (in
/// batches of two), the served model is the configured model, strict mode
/// passes, usage is counted, cost is unknown without a catalog, and the
/// response and every trace record say SIMULATED. Also the golden
/// `cited_indices`: a claim citing [1, 2] with two passages of source 1
/// and none of source 2 records [1, 2].
#[tokio::test]
async fn grpc_judge_with_a_sim_upstream_is_labelled_simulated() {
    let proxy = ProxyHandle::start(parse(SIM_CONFIG)).await;
    let mut client = proxy.client().await;
    let claims = vec![
        claim(
            "c0",
            "Source 1 reports finding number 0 for this question.",
            vec![
                snippet(1, "In a simulated study, source 1 reports finding number 0 for this question."),
                snippet(1, "Simulated source 1 covers background. (SIMULATED)"),
            ],
            &[1, 2],
        ),
        claim(
            "c1",
            "Finding number 1 is asserted here although its source does not say so.",
            vec![snippet(1, "In a simulated study, source 1 reports finding number 0 for this question.")],
            &[1],
        ),
        claim("c2", "Buses doubled in Oslo.", vec![snippet(3, "Oslo buses doubled, the city said.")], &[]),
    ];
    let resp = client.judge_claims(request("j", claims)).await.unwrap().into_inner();
    assert!(resp.simulated, "the response says SIMULATED");
    assert_eq!(tally(&resp), (2, 1, 0), "{:?}", resp.verdicts);
    let verdicts: Vec<pb::Verdict> = resp.verdicts.iter().map(pb::ClaimVerdict::verdict).collect();
    assert_eq!(verdicts, [pb::Verdict::Yes, pb::Verdict::No, pb::Verdict::Yes]);
    assert_eq!(resp.requested_model, "cohort-sim-judge-1");
    assert_eq!(resp.served_models, ["cohort-sim-judge-1"], "the served-model check passed in strict mode");
    assert_eq!(resp.attempts.len(), 2, "two batches of at most two claims");
    assert!(resp.attempts.iter().all(|a| a.class() == pb::AttemptClass::Ok && a.http_status == 200));
    let usage = resp.usage.clone().unwrap();
    assert!(usage.input_tokens > 100 && usage.output_tokens == 9, "{usage:?}");
    assert_eq!(usage.cost_micros, None, "no catalog: cost unknown");

    let traces: Vec<serde_json::Value> =
        resp.verdicts.iter().map(|v| serde_json::from_str(&v.trace_record_json).unwrap()).collect();
    for t in &traces {
        assert_eq!(t["simulated"], true, "{t}");
        assert_eq!(t["judge_model"], "cohort-sim-judge-1", "{t}");
    }
    assert_eq!(traces[0]["cited_indices"], serde_json::json!([1, 2]), "the claim's own indices");
    assert_eq!(traces[0]["cited_snippets"].as_array().unwrap().len(), 2);
    assert_eq!(traces[0]["judge_reasoning"], "Claim 1: YES");
    assert_eq!(traces[1]["judge_verdict"], "UNSUPPORTED");
    assert_eq!(traces[2]["cited_indices"], serde_json::json!([3]), "an older client: the snippets' indices");
}

/// Proves the passthrough answers with the same text the judge would,
/// names the configured model, counts whitespace tokens and says
/// `x-cohort-simulated: true`; a prompt without claims gets a reply that
/// decides nothing.
#[tokio::test]
async fn passthrough_with_a_sim_upstream() {
    let proxy = ProxyHandle::start(parse(SIM_CONFIG)).await;
    let prompt = "For each claim below, determine if it is supported by its cited evidence.\n\nClaim 1: Oslo buses doubled.\nEvidence 1:\n- Oslo buses doubled.";
    let http = reqwest::Client::new();
    for (model, content, expected) in
        [("j", prompt, "Claim 1: YES"), ("sim/any-model", prompt, "Claim 1: YES"), ("j", "hello", NO_CLAIMS_REPLY)]
    {
        let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": content}]});
        let r = http
            .post(format!("{}/v1/chat/completions", proxy.http))
            .bearer_auth(TEAM_A_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-cohort-simulated"], "true");
        let served = r.headers()["x-cohort-served-model"].to_str().unwrap().to_owned();
        let reply: serde_json::Value = r.json().await.unwrap();
        assert_eq!(reply["choices"][0]["message"]["content"], expected);
        assert_eq!(reply["model"], served.as_str());
        let words = content.split_whitespace().count();
        assert_eq!(reply["usage"]["prompt_tokens"], words);
    }
}

/// Proves the in-memory config of `cohort run` works end to end, and that
/// strict mode really checks the sim's served model: pinned to another
/// model, every claim is unjudged (model_mismatch).
#[tokio::test]
async fn builtin_sim_config_and_strict_mode() {
    let key = "builtin-team-key-0123456789";
    let judge = |served: &str| BuiltinSimJudge {
        name: "cohort-sim-judge-1".into(),
        model: "cohort-sim-judge-1".into(),
        served_model: served.into(),
        batch_size: 8,
        prices: None,
    };
    let one = || vec![claim("c", "Oslo buses doubled.", vec![snippet(1, "Oslo buses doubled.")], &[1])];
    let proxy = ProxyHandle::start(ProxyConfig::builtin_sim(judge("cohort-sim-judge-1"), Secret::new(key))).await;
    let req =
        |claims| with_key(pb::JudgeRequest { judge: "cohort-sim-judge-1".into(), claims, ..Default::default() }, key);
    let resp = proxy.client().await.judge_claims(req(one())).await.unwrap().into_inner();
    assert!(resp.simulated);
    assert_eq!(tally(&resp), (1, 0, 0));

    let pinned_elsewhere =
        ProxyHandle::start(ProxyConfig::builtin_sim(judge("some-other-model"), Secret::new(key))).await;
    let resp = pinned_elsewhere.client().await.judge_claims(req(one())).await.unwrap().into_inner();
    assert_eq!(resp.verdicts[0].unjudged_reason(), pb::UnjudgedReason::ModelMismatch);
    assert!(resp.verdicts[0].trace_record_json.is_empty());
}

/// Proves a sim upstream's config cannot suggest it calls anything: a
/// `base_url` or a key is refused with the field named, and a real kind
/// without `base_url` is told to set it.
#[test]
fn sim_config_refuses_url_and_key() {
    let problems = |text: &str| match build_and_validate(text, "p.toml", std::path::Path::new("."), &env) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    assert_eq!(problems(SIM_CONFIG), "");
    let with_url = SIM_CONFIG.replace("kind = \"sim\"", "kind = \"sim\"\nbase_url = \"http://127.0.0.1:1\"");
    assert!(problems(&with_url).contains("upstreams[0].base_url"), "{}", problems(&with_url));
    let with_key = SIM_CONFIG.replace("kind = \"sim\"", "kind = \"sim\"\napi_key_env = \"TEAM_A_KEY\"");
    assert!(problems(&with_key).contains("upstreams[0].api_key"), "{}", problems(&with_key));
    let openai = SIM_CONFIG.replace("kind = \"sim\"", "kind = \"openai\"");
    assert!(problems(&openai).contains("set base_url"), "{}", problems(&openai));
}
