//! The judge's evidence is the cited source as captured, the same way for
//! every arm (issue 20, docs/judging.md "Evidence"): a Perplexity-style run
//! (the real `openai_chat` adapter against a loopback server answering with
//! `citations` and `search_results`) goes through the worker's `execute`
//! with a real capturer fetching loopback pages and a recording TEST DOUBLE
//! of the `Judge` service, whose requests are the witness of what the judge
//! was shown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use cohort_artifacts::ArtifactStore;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::scoring::{UnjudgedReason, VerdictLabel};
use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_server::{Judge, JudgeServer};
use cohort_worker::adapters::openai_chat::OpenAiChatAdapter;
use cohort_worker::capture::{CaptureConfig, SourceCapturer};
use cohort_worker::record::RunRecord;
use cohort_worker::score::JudgeEndpoint;
use cohort_worker::{ArmRuntime, Report, RunContext};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

const ATTENDANCE: &str = "The Louvre welcomed 8.7 million visitors in 2024, slightly fewer than the year before";
const PYRAMID: &str = "The glass pyramid entrance opened to the public in 1989";
/// What the vendor returned as its snippets: they disagree with the pages.
const SNIPPET_A: &str = "Louvre attendance rose to 9.9 million in 2023 (vendor summary).";
const SNIPPET_B: &str = "The pyramid opened in 1988 (vendor summary).";

/// The recording judge: keeps every request and answers YES exactly when
/// one of a claim's snippets contains the claim's sentence (without its
/// final full stop), else NO. The pages contain the sentences; the
/// vendor's snippets do not, so the verdicts also tell which text it saw.
#[derive(Default, Clone)]
struct RecordingJudge {
    requests: Arc<Mutex<Vec<pb::JudgeRequest>>>,
}

#[tonic::async_trait]
impl Judge for RecordingJudge {
    async fn judge_claims(&self, request: Request<pb::JudgeRequest>) -> Result<Response<pb::JudgeResponse>, Status> {
        let request = request.into_inner();
        self.requests.lock().unwrap().push(request.clone());
        let verdicts = request
            .claims
            .iter()
            .map(|c| {
                let sentence = c.text.trim().trim_end_matches('.');
                let yes = c.snippets.iter().any(|s| s.text.contains(sentence));
                let verdict = if yes { pb::Verdict::Yes } else { pb::Verdict::No };
                pb::ClaimVerdict {
                    claim_id: c.claim_id.clone(),
                    verdict: verdict as i32,
                    reasoning: format!("Claim {}: {}", c.claim_id, if yes { "YES" } else { "NO" }),
                    served_model: "recording-judge-1".into(),
                    trace_record_json: json!({"claim_text": c.text, "judge_model": "recording-judge-1"}).to_string(),
                    ..pb::ClaimVerdict::default()
                }
            })
            .collect();
        Ok(Response::new(pb::JudgeResponse {
            verdicts,
            requested_model: "recording-judge-1".into(),
            served_models: vec!["recording-judge-1".into()],
            ..pb::JudgeResponse::default()
        }))
    }

    async fn describe_judge(
        &self,
        _: Request<pb::DescribeJudgeRequest>,
    ) -> Result<Response<pb::DescribeJudgeResponse>, Status> {
        Err(Status::unimplemented("not needed by these tests"))
    }
}

/// Starts the recording judge on a free loopback port; its gRPC URL.
async fn start_judge(judge: RecordingJudge) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    // Runs until the test's runtime ends.
    tokio::spawn(
        tonic::transport::Server::builder().add_service(JudgeServer::new(judge)).serve_with_incoming(incoming),
    );
    url
}

/// The Perplexity-style API and the cited pages on one loopback server:
/// `/chat/completions` answers with the report, `citations` and
/// `search_results` (the vendor's snippets); `/src/a` is the page of [1];
/// `/src/b`, the page of [2], is served when `b_online`, else 404.
async fn start_site(b_online: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (a, b) = (format!("{base}/src/a"), format!("{base}/src/b"));
    let reply = json!({
        "id": "p1",
        "model": "sonar-deep-research",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
            "content": format!("{ATTENDANCE} [1].\n\n{PYRAMID} [1][2].")}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 34},
        "citations": [a, b],
        "search_results": [
            {"title": "Attendance", "url": a, "date": "2025-01-05", "snippet": SNIPPET_A},
            {"title": "Pyramid", "url": b, "date": "2019-03-29", "snippet": SNIPPET_B},
        ],
    });
    let page = |text: String| {
        (
            [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
            format!(
                "<!doctype html><html><head><title>Source</title></head><body><article>{text}</article></body></html>"
            ),
        )
    };
    let app = axum::Router::new()
        .route("/chat/completions", axum::routing::post(move || async move { axum::Json(reply) }))
        .route(
            "/src/a",
            axum::routing::get(move || async move {
                page(format!("<p>{ATTENDANCE}, the museum said.</p><p>{PYRAMID}, after six years of work.</p>"))
            }),
        )
        .route(
            "/src/b",
            axum::routing::get(move || async move {
                if b_online {
                    page(format!("<p>{PYRAMID}; I. M. Pei designed it.</p>")).into_response()
                } else {
                    (StatusCode::NOT_FOUND, "gone").into_response()
                }
            }),
        );
    // Runs until the test's runtime ends.
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn perplexity_arm(base: &str) -> ArmConfig {
    ArmConfig {
        id: "perplexity".into(),
        label: "Perplexity Research".into(),
        adapter: AdapterKind::OpenaiChat,
        pinned_version: "sonar-deep-research".into(),
        vendor_lineage: "perplexity".into(),
        concurrency: 1,
        optional: false,
        workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
        controls_not_disabled: Vec::new(),
        settings: json!({"base_url": format!("{base}/"), "model": "sonar-deep-research"}),
    }
}

/// One run of the Perplexity-style arm through `execute`, capturing and
/// judging inline; its record and the judge's requests.
async fn run_once(b_online: bool) -> (RunRecord, Vec<pb::JudgeRequest>) {
    let base = start_site(b_online).await;
    let judge = RecordingJudge::default();
    let judge_url = start_judge(judge.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path().join("artifacts"));
    let capture = CaptureConfig { allow_private_addresses: true, ..CaptureConfig::default() };
    let ctx = RunContext {
        cohort: "c".into(),
        manifest_sha256: "a".repeat(64),
        run_timeout: Duration::from_secs(60),
        prices: None,
        store: store.clone(),
        spool: cohort_worker::Spool::new(dir.path().join("spool")),
        clock: Arc::new(cohort_worker::SystemClock),
        capturer: Some(SourceCapturer::new(capture, store.clone()).unwrap()),
        judge: Some(JudgeEndpoint::new(judge_url, "j".into(), "team-key".into(), Duration::from_secs(30))),
        pass: None,
        metrics: Default::default(),
    };
    let arm = perplexity_arm(&base);
    let adapter = Arc::new(OpenAiChatAdapter::with_env(&arm, |_| None).unwrap());
    let lease = pb::Lease {
        run_id: "q1:perplexity:1".into(),
        question_id: "q1".into(),
        arm_id: arm.id.clone(),
        repeat: 1,
        attempt: 1,
        prompt: "How many people visited the Louvre in 2024?".into(),
        suffix: "Cite sources.".into(),
        ..pb::Lease::default()
    };
    let runtime = ArmRuntime { config: arm, adapter };
    let report =
        cohort_worker::execute::execute(&ctx, &runtime, &cohort_worker::wire::RunLease::from_pb(&lease), "w1").await;
    let Report::Result { record_sha256, .. } = &report else { panic!("no result: {report:?}") };
    let record: RunRecord = serde_json::from_slice(&store.get(record_sha256).unwrap().unwrap()).unwrap();
    let requests = judge.requests.lock().unwrap().clone();
    (record, requests)
}

fn claims(record: &RunRecord) -> Vec<Value> {
    let report = &record.scoring.as_ref().expect("scored").report;
    report.claims.iter().map(|c| serde_json::to_value(c).unwrap()).collect()
}

/// Proves issue 20's Must show: a Perplexity-style run whose
/// `search_results` snippets disagree with the cited pages is judged on
/// the captured pages. Every cited URL was fetched although the vendor
/// returned a snippet for it; every snippet the judge was sent is text of
/// a captured page and none is the vendor's; the verdicts follow the
/// pages (YES), where the snippets would have given NO; the record keeps
/// the vendor's snippets in `system_sources`, labelled as the system's,
/// and says each reference's evidence came from a `capture`.
#[tokio::test]
async fn a_perplexity_run_is_judged_on_the_captured_pages_not_the_vendor_snippets() {
    let (record, requests) = run_once(true).await;
    let scoring = record.scoring.as_ref().expect("scored");
    assert_eq!(scoring.captures.len(), 2, "both cited URLs captured: {:?}", scoring.captures);
    assert!(scoring.captures.iter().all(|c| c.accessible && c.text_sha256.is_some()), "{:?}", scoring.captures);
    let sources: Vec<(u32, &str)> = scoring.evidence_sources.iter().map(|e| (e.index, e.source.as_str())).collect();
    assert_eq!(sources, [(1, "capture"), (2, "capture")]);

    // The vendor's snippets are kept, as the vendor's.
    let kept: Vec<&str> = record.system_sources.iter().map(|s| s.snippet.as_str()).collect();
    assert_eq!(kept, [SNIPPET_A, SNIPPET_B]);

    // What the judge saw: the pages' text, never the vendor's snippets.
    assert_eq!(requests.len(), 1, "one inline judge request");
    let sent = &requests[0].claims;
    assert_eq!(sent.len(), 2);
    for claim in sent {
        assert!(!claim.snippets.is_empty());
        for s in &claim.snippets {
            assert!(!s.text.contains("vendor summary"), "the vendor's snippet was sent: {s:?}");
            assert!(s.text.contains(ATTENDANCE) || s.text.contains(PYRAMID), "not the page's text: {s:?}");
        }
    }
    let indices: Vec<u32> = sent[1].snippets.iter().map(|s| s.index).collect();
    assert!(indices.contains(&1) && indices.contains(&2), "the second claim's evidence spans both pages: {indices:?}");

    // The verdicts follow the pages.
    let verdicts: Vec<Option<VerdictLabel>> = scoring.report.claims.iter().map(|c| c.verdict).collect();
    assert_eq!(verdicts, [Some(VerdictLabel::Yes), Some(VerdictLabel::Yes)], "{:?}", claims(&record));
    assert_eq!((scoring.report.support.judged, scoring.report.support.yes), (2, 2));
    // The reference table keeps the passages used, from the pages.
    assert!(scoring.report.references.iter().all(|r| r.snippets.iter().all(|s| !s.contains("vendor summary"))));
}

/// Proves the every-source rule (issue 20): with [2]'s page gone (404),
/// the claim citing [1][2] is `unjudged(source_unavailable)` and names [2]
/// as the missing source, instead of being judged on [1] alone; it is not
/// sent to the judge, leaves the support denominator, and the claim citing
/// [1] alone is judged as before. The failed capture of [2] is kept as the
/// record of the access, and its evidence source is `none`.
#[tokio::test]
async fn a_claim_citing_a_source_without_text_is_unjudged_naming_it() {
    let (record, requests) = run_once(false).await;
    let scoring = record.scoring.as_ref().expect("scored");
    let b = scoring.captures.iter().find(|c| c.url.ends_with("/src/b")).expect("[2] was fetched");
    assert!(!b.accessible && b.http_status == Some(404), "{b:?}");
    let sources: Vec<(u32, &str)> = scoring.evidence_sources.iter().map(|e| (e.index, e.source.as_str())).collect();
    assert_eq!(sources, [(1, "capture"), (2, "none")]);

    let [one, two] = scoring.report.claims.as_slice() else { panic!("two claims: {:?}", claims(&record)) };
    assert_eq!((one.cited.as_slice(), one.verdict), (&[1][..], Some(VerdictLabel::Yes)));
    assert!(one.missing_sources.is_empty());
    assert_eq!(two.cited, [1, 2]);
    assert_eq!(
        (two.verdict, two.unjudged_reason, two.missing_sources.as_slice()),
        (Some(VerdictLabel::Unjudged), Some(UnjudgedReason::SourceUnavailable), &[2][..])
    );
    let json = serde_json::to_value(two).unwrap();
    assert_eq!(json["missing_sources"], json!([2]), "the record names the missing source: {json}");
    assert_eq!((scoring.report.support.judged, scoring.report.support.unjudged), (1, 1));

    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].claims.len(), 1, "only the claim whose every source has text is sent");
    assert!(requests[0].claims[0].text.starts_with(ATTENDANCE));
}
