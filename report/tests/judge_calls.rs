//! `judge_calls.jsonl` (seed 000 section 7: the judge's batch prompts and
//! raw replies published): a report holds every call its verdicts come
//! from, the record's own or the judging pass's, with the run, the pass, the
//! prompt and the raw reply; a redacted report keeps the calls' ids, models
//! and sizes and drops their prompts and replies; `cohort verify` and
//! scripts/rederive_report.py agree with both.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cohort_artifacts::ArtifactStore;
use cohort_coordinator::freeze::{FreezeOptions, freeze, load_frozen};
use cohort_core::scoring::{ParsedVerdict, RunFacts, ScoreReport, Verdict, analyse};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{AttemptRecord, LeaseRef, Ledger, PlanHeader, RunResult};
use cohort_records::passes::{PassClaim, PassConfig, PassJudge, PassRun, PassStore, PassVerdict};
use cohort_records::score::{JudgeCall, JudgeMessage};
use cohort_report::{FrozenCohort, ReportOptions, write_report};
use serde_json::{Value, json};

const CONFIG: &str = r#"
name = "calls"
seed = 3

[[arms]]
id = "a"
label = "Product A"
adapter = "command"
pinned_version = "a-1"
vendor_lineage = "vendor-a"
concurrency = 10
settings = { program = "true" }

[judge]
provider = "openai"
model = "judge-model"
vendor_lineage = "vendor-j"
temperature = 0
"#;

const QUESTIONS: &str = r#"[
  {"id": "q1", "category": "science", "text": "Why does ice float?"},
  {"id": "q2", "category": "history", "text": "When did the Wrights fly?"}
]"#;

/// A phrase of every planted prompt (a captured passage quoted to the
/// judge) and of every planted reply: what a redacted report must not hold.
const PROMPT_PASSAGE: &str = "PLANTED PROMPT PASSAGE quoted to the judge";
const REPLY_WORDS: &str = "PLANTED RAW REPLY";

fn planted_call(run_id: &str, claim_ids: &[&str], tag: &str) -> JudgeCall {
    JudgeCall {
        claim_ids: claim_ids.iter().map(|s| (*s).to_owned()).collect(),
        messages: vec![
            JudgeMessage { role: "system".into(), content: "You are a judge.".into() },
            JudgeMessage { role: "user".into(), content: format!("{run_id} {tag}: {PROMPT_PASSAGE}\n\"quoted\"") },
        ],
        raw_reply: Some(format!("Claim 1: YES\n{REPLY_WORDS} {tag}")),
        requested_model: "judge-model".into(),
        served_model: Some("judge-model-2026".into()),
        attempts: 2,
        started_at: "2026-11-01T10:00:00.000Z".into(),
        latency_ms: 1234,
        outcome: "ok".into(),
        simulated: false,
    }
}

/// A cohort of two runs; q1:a:1's record carries two judge calls, q2:a:1's
/// record none (an older record: the field is absent).
async fn build(dir: &Path) -> (FrozenCohort, Vec<u8>, Arc<dyn Ledger>, ArtifactStore) {
    fs::create_dir_all(dir).unwrap();
    for (name, text) in [
        ("cohort.toml", CONFIG),
        ("questions.json", QUESTIONS),
        ("suffix.txt", "Cite sources.\n"),
        ("protocol.md", "# Protocol\n"),
        ("rubric.md", "# Rubric\n"),
    ] {
        fs::write(dir.join(name), text).unwrap();
    }
    freeze(dir, &FreezeOptions { now: UNIX_EPOCH + Duration::from_secs(1_790_000_000), amend: None }).unwrap();
    let (cohort, manifest, manifest_sha256) = load_frozen(dir).unwrap();
    let manifest_bytes = fs::read(dir.join("manifest.json")).unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.join("ledger.sqlite")).unwrap());
    let header = PlanHeader::for_cohort(&cohort.config, &manifest_sha256);
    let questions: Vec<(String, String)> = cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let t0 = 1_790_000_100_000;
    ledger.seed(&header, &questions, &manifest.order, t0).await.unwrap();
    let artifacts = ArtifactStore::local(dir.join("artifacts"));
    let text = "Finding one is stated in the source [1]. Finding two is stated too [1].\n\n\
                ## References\n\n[1] https://example.org/source\n";
    let batch = ledger.lease("w", 10, t0, 60_000).await.unwrap();
    assert_eq!(batch.leases.len(), 2);
    for grant in &batch.leases {
        let analysis = analyse(text, None).unwrap();
        let parsed = vec![Some(ParsedVerdict { verdict: Verdict::Yes, line: None }); analysis.claims.len()];
        let report = ScoreReport::assemble(analysis, &RunFacts::default(), &parsed);
        let mut record = json!({
            "record_version": 3, "cohort": "calls", "manifest_sha256": manifest_sha256,
            "metrics_version": 1, "run_id": grant.run_id, "question_id": grant.question_id,
            "arm": grant.arm_id, "product": "P", "simulated": false, "repeat": 1, "attempt": 1,
            "prompt": "the prompt", "conversation": [], "output_sha256": artifacts.put(text.as_bytes()).unwrap(),
            "citation_urls": [], "observed_version": "v", "pinned_version": "a-1", "settings": {},
            "started_at": "", "ended_at": "", "duration_ms": 500, "outcome": "completed", "failure_reason": null,
            "attempt_class": "ok", "token_usage": null, "system_sources": [], "cost": null, "currency": null,
            "scoring": {"report": report, "evidence_sources": [], "captures": [],
                        "judge": {"requested_model": "judge-model", "served_models": ["judge-model-2026"],
                                  "input_tokens": 0, "output_tokens": 0, "cost_micros": null,
                                  "currency": "", "attempt_classes": [], "error": null},
                        "judge_traces": []},
            "scoring_error": null
        });
        if grant.run_id == "q1:a:1" {
            let calls = [planted_call("q1:a:1", &["1"], "first"), planted_call("q1:a:1", &["2"], "second")];
            record["scoring"]["judge_calls"] = serde_json::to_value(calls).unwrap();
        }
        // Stored pretty-printed, as the worker stores records.
        let sha = artifacts.put(&serde_json::to_vec_pretty(&record).unwrap()).unwrap();
        let lease = LeaseRef { run_id: grant.run_id.clone(), token: grant.token };
        let attempt = AttemptRecord {
            class: AttemptClass::Ok,
            http_status: 200,
            detail: String::new(),
            started_ms: t0,
            ended_ms: t0 + 500,
            observed_version: None,
            worker: String::new(),
            attempt: 0,
            token: 0,
            retry_after_ms: None,
        };
        let result = RunResult {
            outcome: Outcome::Completed,
            reason: String::new(),
            record_sha256: sha,
            observed_version: None,
            attempt,
        };
        assert!(ledger.finish("w", &lease, &result, t0 + 500).await.unwrap());
    }
    let frozen = FrozenCohort { cohort, manifest, manifest_sha256, review: None, review_declared: false };
    (frozen, manifest_bytes, ledger, artifacts)
}

fn options(dir: &Path, secs: u64) -> ReportOptions {
    ReportOptions {
        draws: 200,
        now: UNIX_EPOCH + Duration::from_secs(secs),
        reports_root: dir.join("reports"),
        pass: None,
        require_final: false,
        redact: false,
    }
}

/// The lines of a report's `judge_calls.jsonl` after its header.
fn call_lines(report: &Path) -> Vec<Value> {
    let text = fs::read_to_string(report.join("judge_calls.jsonl")).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(header["kind"], "header");
    lines.map(|l| serde_json::from_str(l).unwrap()).collect()
}

async fn verifies(path: &Path, dir: &Path, frozen: &FrozenCohort, ledger: &Arc<dyn Ledger>, store: &ArtifactStore) {
    let ok = cohort_report::verify_report(path, dir, frozen, ledger, store).await.unwrap();
    assert!(ok.ok(), "{}: {:?}", path.display(), ok.differences);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rederive_report.py");
    let out = std::process::Command::new("python3").arg(&script).arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("all agree"), "{}: {text}", path.display());
}

/// Proves the report publishes the record's calls (one line per call, in
/// order, with its run, `pass: null`, the messages and raw reply exactly as
/// recorded) and nothing for a record without the field; that the redacted
/// report holds neither prompt nor reply text in any file but keeps each
/// call's claim ids, models, attempts and sizes; and that both verify.
#[tokio::test]
async fn the_record_calls_are_published_and_redaction_drops_their_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("calls");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let full = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let lines = call_lines(&full.path);
    assert_eq!(lines.len(), 2, "two calls of q1:a:1, none of q2:a:1 (no field)");
    for (i, (line, tag)) in lines.iter().zip(["first", "second"]).enumerate() {
        assert_eq!(
            (&line["kind"], &line["run_id"], &line["pass"]),
            (&json!("judge_call"), &json!("q1:a:1"), &Value::Null)
        );
        assert_eq!(line["call_index"], i);
        let call: JudgeCall = serde_json::from_value(line["call"].clone()).unwrap();
        let ids: Vec<&str> = if i == 0 { vec!["1"] } else { vec!["2"] };
        assert_eq!(call, planted_call("q1:a:1", &ids, tag), "the call exactly as recorded");
    }
    assert!(full.summary.files.iter().any(|f| f.name == "judge_calls.jsonl"), "listed in summary.json");
    verifies(&full.path, &dir, &frozen, &ledger, &artifacts).await;

    let mut opts = options(&dir, 1_790_001_001);
    opts.redact = true;
    let redacted = write_report(&frozen, &manifest, &ledger, &artifacts, &opts).await.unwrap();
    for entry in fs::read_dir(&redacted.path).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&fs::read(&path).unwrap()).into_owned();
        assert!(!text.contains(PROMPT_PASSAGE) && !text.contains(REPLY_WORDS), "{} holds judge text", path.display());
    }
    let lines = call_lines(&redacted.path);
    assert_eq!(lines.len(), 2);
    let call = &lines[0]["call"];
    assert_eq!((call.get("messages"), call.get("raw_reply")), (None, None));
    let planted = planted_call("q1:a:1", &["1"], "first");
    let prompt_bytes: usize = planted.messages.iter().map(|m| m.content.len()).sum();
    assert_eq!(
        (&call["claim_ids"], &call["served_model"], &call["attempts"], &call["message_count"]),
        (&json!(["1"]), &json!("judge-model-2026"), &json!(2), &json!(2))
    );
    assert_eq!(
        (&call["prompt_bytes"], &call["reply_bytes"]),
        (&json!(prompt_bytes), &json!(planted.raw_reply.unwrap().len()))
    );
    verifies(&redacted.path, &dir, &frozen, &ledger, &artifacts).await;
}

/// Proves a report from a judging pass publishes the pass's calls (those
/// `cohort judge` kept in the pass's run file), named by the pass, and not
/// the record's own.
#[tokio::test]
async fn a_report_from_a_pass_publishes_the_pass_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("calls");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let judge = PassJudge {
        proxy_judge: "j".into(),
        requested_model: "judge-model".into(),
        served_model_expected: "judge-model-2026".into(),
        vendor_lineage: "vendor-j".into(),
        strict: false,
    };
    let store = PassStore::create_or_open(&dir, PassConfig::judge("second", judge)).unwrap();
    let row = ledger.runs().await.unwrap().into_iter().find(|r| r.run_id == "q2:a:1").unwrap();
    let claim = |id| PassClaim {
        claim_id: id,
        verdict: PassVerdict::No,
        unjudged_reason: None,
        judge_model: Some("judge-model-2026".into()),
        judge_line: Some(format!("Claim {id}: NO")),
    };
    let call = planted_call("q2:a:1", &["1", "2"], "pass");
    store
        .merge_run(&PassRun {
            run_id: "q2:a:1".into(),
            record_sha256: row.record_sha256,
            claims: vec![claim(1), claim(2)],
            traces: Vec::new(),
            captures: Vec::new(),
            calls: vec![call.clone()],
            updated_at: String::new(),
        })
        .unwrap();
    let mut opts = options(&dir, 1_790_002_000);
    opts.pass = Some(Arc::new(store));
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &opts).await.unwrap();
    let lines = call_lines(&written.path);
    assert_eq!(lines.len(), 1, "the pass's one call; q1:a:1's record calls are not the pass's: {lines:?}");
    assert_eq!((&lines[0]["run_id"], &lines[0]["pass"]), (&json!("q2:a:1"), &json!("second")));
    assert_eq!(serde_json::from_value::<JudgeCall>(lines[0]["call"].clone()).unwrap(), call);
}
