//! The report's numbers on a small cohort built by hand (an embedded
//! ledger and run records written straight into the artifact store), each
//! checked against a value computed by hand: every denominator, "not
//! applicable" for zero claims, "unmeasured" for a judge that failed on
//! everything, failed runs lowering completion and staying out of the
//! completed pairs, and write-once report folders.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cohort_artifacts::ArtifactStore;
use cohort_coordinator::freeze::{FreezeOptions, freeze, load_frozen};
use cohort_core::scoring::{ParsedVerdict, RunFacts, ScoreReport, UnjudgedReason, Verdict, analyse};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{AttemptRecord, LeaseRef, Ledger, PlanHeader, RunResult};
use cohort_report::model::{RateKind, RateStatus, Summary};
use cohort_report::{FrozenCohort, ReportError, ReportOptions, write_report};
use serde_json::json;

const CONFIG: &str = r#"
name = "numbers"
seed = 5
categories = ["science", "history", "technology"]

[[arms]]
id = "a"
label = "Product A"
adapter = "command"
pinned_version = "a-1"
vendor_lineage = "vendor-a"
concurrency = 10
settings = { program = "true" }

[[arms]]
id = "b"
label = "Product B"
adapter = "command"
pinned_version = "b-1"
vendor_lineage = "vendor-b"
concurrency = 10
settings = { program = "true" }

[[arms]]
id = "c"
label = "Product A quick scan"
adapter = "command"
pinned_version = "c-1"
vendor_lineage = "vendor-a"
workflow = "quick_scan"
concurrency = 10
settings = { program = "true" }

[judge]
provider = "openai"
model = "judge-model"
vendor_lineage = "vendor-j"
temperature = 0

[publication]
commissioned_by = "The test suite"
internally_commissioned = true
"#;

const QUESTIONS: &str = r#"[
  {"id": "q1", "category": "science", "text": "Why does ice float?"},
  {"id": "q2", "category": "technology", "text": "What does HTTPS establish?"},
  {"id": "q3", "category": "history", "text": "When did the Wrights fly?"},
  {"id": "q4", "category": "history", "text": "When was the Gutenberg Bible printed?"}
]"#;

/// A passage captured from q1:a:1's source, planted in its record.
const CAPTURED_PASSAGE: &str = "PLANTED CAPTURED PASSAGE: the source states finding number zero verbatim";
/// A sentence of every output made by [`output`].
const OUTPUT_SENTENCE: &str = "Finding number 0 is stated in the source";

/// A report with `n` sentences citing [1], and its reference list.
fn output(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!("Finding number {i} is stated in the source [1]. "));
    }
    s.push_str("\n\n## References\n\n[1] https://example.org/source\n");
    s
}

/// [`output`] whose reference list also names `extra` URLs ([2], [3]...),
/// uncited in the text: more sources, the same claims and citations.
fn output_also_listing(n: usize, extra: &[&str]) -> String {
    let mut s = output(n);
    for (i, url) in extra.iter().enumerate() {
        s.push_str(&format!("[{}] {url}\n", i + 2));
    }
    s
}

/// A capture of `url` as the record keeps it: HTTP `status` (none: the
/// fetch never got an answer), accessible only for 200.
fn capture(url: &str, status: Option<u16>, at: &str) -> serde_json::Value {
    let accessible = status == Some(200);
    json!({
        "url": url, "final_url": url, "http_status": status, "accessible": accessible,
        "content_type": "text/html", "accessed_at": at, "published_at": if accessible { Some("2026-01-05") } else { None },
        "bytes": 10, "raw_sha256": null, "text_sha256": null,
        "error": if accessible { None } else { Some("planted failure") },
        "failure": if accessible { None } else if status.is_some() { Some("non_success") } else { Some("timeout") },
        "truncated": false
    })
}

/// The captures planted in each run's record (the source figures' test):
/// q1:a:1 one accessible and one 404; q1:b:1 one accessible; q2:b:1 one
/// timed out and one tried twice (503, then 200); every other source is
/// never captured.
fn planted_captures(run_id: &str) -> serde_json::Value {
    let source = "https://example.org/source";
    match run_id {
        "q1:a:1" => json!([
            capture(source, Some(200), "2026-11-01T10:00:00.000Z"),
            capture("https://example.org/other", Some(404), "2026-11-01T10:00:01.000Z")
        ]),
        "q1:b:1" => json!([capture(source, Some(200), "2026-11-01T10:01:00.000Z")]),
        "q2:b:1" => json!([
            capture(source, None, "2026-11-01T10:02:00.000Z"),
            capture("https://example.net/b-only", Some(503), "2026-11-01T10:02:01.000Z"),
            capture("https://example.net/b-only", Some(200), "2026-11-01T10:02:02.000Z")
        ]),
        _ => json!([]),
    }
}

/// The cost planted in each run's record: (the price-catalogue estimate,
/// its currency, a person's manual facts). q1:a:1 and q4:a:1 carry an
/// estimate; q1:b:1 and q2:b:1 were carried out by a person who reported
/// credits, the plan and (once) the region.
fn planted_cost(run_id: &str) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let manual = |credits: &str, region: Option<&str>| {
        json!({"holder": "manual:b", "offered_at": "", "submitted_at": "", "times_given": false,
               "plan": "Pro", "region": region, "settings": {}, "credits_debited": credits})
    };
    match run_id {
        "q1:a:1" => (json!(0.25), json!("USD"), json!(null)),
        "q4:a:1" => (json!(0.5), json!("USD"), json!(null)),
        "q1:b:1" => (json!(null), json!(null), manual("12.5", Some("EU"))),
        "q2:b:1" => (json!(null), json!(null), manual("3", None)),
        _ => (json!(null), json!(null), json!(null)),
    }
}

/// What each run becomes: outcome, and for completed runs the output and
/// each claim's verdict.
fn plan(run_id: &str) -> (Outcome, Option<(String, Vec<Verdict>)>) {
    use Verdict::{No, Unjudged, Yes};
    let pe = Unjudged(UnjudgedReason::ProviderError);
    match run_id {
        "q1:a:1" => {
            (Outcome::Completed, Some((output_also_listing(3, &["https://example.org/other"]), vec![Yes, Yes, No])))
        }
        // Zero claims: an output with no assertive sentence.
        "q2:a:1" => (Outcome::Completed, Some(("OK".to_owned(), vec![]))),
        "q3:a:1" => (Outcome::Failed, None),
        "q4:a:1" => (Outcome::Completed, Some((output(2), vec![pe, pe]))),
        "q1:b:1" => (Outcome::Completed, Some((output(1), vec![Yes]))),
        "q2:b:1" => {
            (Outcome::Completed, Some((output_also_listing(2, &["https://example.net/b-only"]), vec![Yes, No])))
        }
        "q3:b:1" => (Outcome::Completed, Some((output(1), vec![No]))),
        "q4:b:1" => (Outcome::NotRun, None),
        // Arm c: the judge failed on every claim.
        _ => (Outcome::Completed, Some((output(2), vec![pe, pe]))),
    }
}

fn write_cohort(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("cohort.toml"), CONFIG).unwrap();
    fs::write(dir.join("questions.json"), QUESTIONS).unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# Protocol\n").unwrap();
    fs::write(dir.join("rubric.md"), "# Rubric\n").unwrap();
}

fn attempt(class: AttemptClass, at: i64) -> AttemptRecord {
    AttemptRecord {
        class,
        http_status: 200,
        detail: String::new(),
        started_ms: at,
        ended_ms: at + 500,
        observed_version: None,
        worker: String::new(),
        attempt: 0,
        token: 0,
        retry_after_ms: None,
    }
}

/// Freezes the cohort, seeds an embedded ledger and records every run as
/// [`plan`] says.
async fn build(dir: &Path) -> (FrozenCohort, Vec<u8>, Arc<dyn Ledger>, ArtifactStore) {
    build_with(dir, false).await
}

/// [`build`]; with `leave_pending`, q4:b:1 stays leased (no final outcome)
/// and the cohort is not aborted: the cohort is still running.
async fn build_with(dir: &Path, leave_pending: bool) -> (FrozenCohort, Vec<u8>, Arc<dyn Ledger>, ArtifactStore) {
    write_cohort(dir);
    freeze(dir, &FreezeOptions { now: UNIX_EPOCH + Duration::from_secs(1_790_000_000), amend: None }).unwrap();
    let (cohort, manifest, manifest_sha256) = load_frozen(dir).unwrap();
    let manifest_bytes = fs::read(dir.join("manifest.json")).unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.join("ledger.sqlite")).unwrap());
    let header = PlanHeader::for_cohort(&cohort.config, &manifest_sha256);
    let questions: Vec<(String, String)> = cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let t0 = 1_790_000_100_000;
    ledger.seed(&header, &questions, &manifest.order, t0).await.unwrap();
    let artifacts = ArtifactStore::local(dir.join("artifacts"));
    let batch = ledger.lease("w", 100, t0, 60_000).await.unwrap();
    assert_eq!(batch.leases.len(), 12);
    for (i, grant) in batch.leases.iter().enumerate() {
        let at = t0 + 1_000 * i as i64;
        let lease = LeaseRef { run_id: grant.run_id.clone(), token: grant.token };
        let (outcome, completed) = plan(&grant.run_id);
        if outcome == Outcome::NotRun {
            if !leave_pending {
                assert!(ledger.release("w", &lease, at).await.unwrap());
            }
            continue;
        }
        let record_sha256 = match &completed {
            Some((text, verdicts)) => {
                let analysis = analyse(text, None).unwrap();
                assert_eq!(analysis.claims.len(), verdicts.len(), "{}: claims", grant.run_id);
                let parsed: Vec<Option<ParsedVerdict>> =
                    verdicts.iter().map(|v| Some(ParsedVerdict { verdict: *v, line: None })).collect();
                let report = ScoreReport::assemble(analysis, &RunFacts::default(), &parsed);
                let output_sha = artifacts.put(text.as_bytes()).unwrap();
                let record = json!({
                    "record_version": 3, "cohort": "numbers", "manifest_sha256": manifest_sha256,
                    "metrics_version": 1, "run_id": grant.run_id, "question_id": grant.question_id,
                    "arm": grant.arm_id, "product": "P", "simulated": false, "repeat": 1, "attempt": 1,
                    "prompt": "the prompt", "conversation": [], "output_sha256": output_sha,
                    "citation_urls": ["https://example.org/source"], "observed_version": "not disclosed",
                    "pinned_version": "x", "settings": {}, "started_at": "", "ended_at": "", "duration_ms": 500,
                    "outcome": "completed", "failure_reason": null, "attempt_class": "ok", "token_usage": null,
                    "system_sources": [],
                    "scoring": {"report": report, "evidence_sources": [], "captures": planted_captures(&grant.run_id),
                                "judge": {"requested_model": "judge-model", "served_models": ["judge-model"],
                                          "input_tokens": 0, "output_tokens": 0, "cost_micros": null,
                                          "currency": "", "attempt_classes": [], "error": null},
                                "judge_traces": []},
                    "scoring_error": null
                });
                let mut record = record;
                let (cost, currency, manual) = planted_cost(&grant.run_id);
                record["cost"] = cost;
                record["currency"] = currency;
                record["manual"] = manual;
                if grant.run_id == "q1:a:1" {
                    // A captured passage, as the judge and the page see it.
                    record["scoring"]["report"]["references"][0]["snippets"] = json!([CAPTURED_PASSAGE]);
                    record["scoring"]["judge_traces"] = json!([{
                        "query_id": "q1", "system": "Product A", "claim_text": "Finding number 0 is stated in the source.",
                        "cited_indices": [1], "cited_snippets": [CAPTURED_PASSAGE], "judge_verdict": "SUPPORTED",
                        "judge_reasoning": "Claim 1: YES (the passage says so)", "judge_model": "judge-model",
                        "timestamp": "2026-11-01T10:00:00.000Z"
                    }]);
                }
                artifacts.put(serde_json::to_vec(&record).unwrap().as_slice()).unwrap()
            }
            None => String::new(),
        };
        let class = if outcome == Outcome::Failed { AttemptClass::ClientError } else { AttemptClass::Ok };
        let result = RunResult {
            outcome,
            reason: if outcome == Outcome::Failed { "400 bad request".into() } else { String::new() },
            record_sha256,
            observed_version: None,
            attempt: attempt(class, at),
        };
        assert!(ledger.finish("w", &lease, &result, at + 500).await.unwrap(), "{}", grant.run_id);
    }
    if !leave_pending {
        ledger.abort("test: q4:b:1 never ran", t0 + 60_000).await.unwrap();
    }
    let frozen = FrozenCohort { cohort, manifest, manifest_sha256, review: None, review_declared: false };
    (frozen, manifest_bytes, ledger, artifacts)
}

fn options(dir: &Path, secs: u64) -> ReportOptions {
    ReportOptions {
        draws: 2_000,
        now: UNIX_EPOCH + Duration::from_secs(secs),
        reports_root: dir.join("reports"),
        pass: None,
        require_final: false,
        redact: false,
    }
}

fn arm<'a>(s: &'a Summary, id: &str) -> &'a cohort_report::model::ArmSummary {
    s.arms.iter().find(|a| a.id == id).unwrap()
}

/// Counts, rates and statuses equal the hand-computed values.
#[tokio::test]
async fn every_denominator_and_status_is_as_computed_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let s = &written.summary;

    let a = arm(s, "a");
    assert_eq!((a.counts.planned, a.counts.attempted, a.counts.completed, a.counts.failed), (4, 4, 3, 1));
    assert_eq!((a.counts.scored, a.counts.judged_runs), (3, 1));
    // Claims: q1 3 (2 YES, 1 NO), q2 0, q4 2 unjudged.
    assert_eq!((a.claims.extracted, a.claims.cited, a.claims.judged, a.claims.supported), (5, 5, 3, 2));
    assert_eq!(a.claims.unjudged.get("provider_error"), Some(&2));
    // A failed run lowers completion: 3 / 4.
    assert_eq!(a.rates[RateKind::Completion].value, Some(0.75));
    assert_eq!((a.rates[RateKind::Completion].numerator, a.rates[RateKind::Completion].denominator), (3.0, 4.0));
    assert_eq!(a.rates[RateKind::SupportMicro].value, Some(2.0 / 3.0));
    assert_eq!((a.rates[RateKind::SupportMicro].numerator, a.rates[RateKind::SupportMicro].denominator), (2.0, 3.0));
    // Macro: only q1 has judged claims.
    assert_eq!(a.rates[RateKind::SupportMacro].value, Some(2.0 / 3.0));
    assert_eq!(a.rates[RateKind::SupportMacro].questions, Some(1));
    // Zero claims: not applicable, never 100% or 0.
    let tech = a.categories.iter().find(|c| c.category == "technology").unwrap();
    assert_eq!(tech.rates[RateKind::SupportMicro].status, RateStatus::NotApplicable);
    assert_eq!(tech.rates[RateKind::SupportMicro].value, None);
    assert_eq!(tech.rates[RateKind::ResolutionMicro].status, RateStatus::NotApplicable);
    assert_eq!(tech.rates[RateKind::Completion].value, Some(1.0));
    // Every citation resolves: 5 markers, reference [1] present.
    assert_eq!(a.rates[RateKind::ResolutionMicro].value, Some(1.0));
    assert_eq!(a.citations.total, 5);

    let b = arm(s, "b");
    assert_eq!((b.counts.planned, b.counts.attempted, b.counts.completed, b.counts.not_run), (4, 3, 3, 1));
    assert_eq!((b.claims.judged, b.claims.supported), (4, 2));
    assert_eq!(b.rates[RateKind::SupportMicro].value, Some(0.5));
    // Macro: q1 1/1, q2 1/2, q3 0/1 -> (1 + 0.5 + 0) / 3.
    assert_eq!(b.rates[RateKind::SupportMacro].value, Some(0.5));
    assert_eq!(b.rates[RateKind::SupportMacro].questions, Some(3));

    // A judge that failed on everything: unmeasured, never 0.
    let c = arm(s, "c");
    assert_eq!(c.rates[RateKind::SupportMicro].status, RateStatus::Unmeasured);
    assert_eq!(c.rates[RateKind::SupportMicro].value, None);
    assert_eq!(c.rates[RateKind::SupportMacro].status, RateStatus::Unmeasured);
    assert!(c.rates[RateKind::SupportMicro].reason.as_deref().unwrap().contains("provider_error"));

    // Only a and b share a workflow: one comparison, over the questions
    // both completed (q1, q2: a failed q3, b never ran q4).
    assert_eq!(s.comparisons.len(), 1);
    let cmp = &s.comparisons[0];
    assert_eq!((cmp.a.as_str(), cmp.b.as_str(), cmp.completed_pairs, cmp.questions), ("a", "b", 2, 4));
    // Support over the pairs: a 2/3 (q1; q2 has no claims), b 2/3 (q1 1/1, q2 1/2).
    let support = cmp.differences.get(RateKind::SupportMicro).unwrap();
    assert!(support.value.unwrap().abs() < 1e-15);
    assert!(support.statement.contains("cannot be told apart"), "{}", support.statement);
    // Completion over all questions: 3/4 vs 3/4.
    assert_eq!(cmp.differences.get(RateKind::Completion).unwrap().value, Some(0.0));
    assert_eq!(cmp.a_completion.value, Some(0.75));
    // Intervals exist and bracket the point values.
    let r = &b.rates[RateKind::SupportMicro];
    assert!(r.ci_low.unwrap() <= r.value.unwrap() && r.value.unwrap() <= r.ci_high.unwrap());

    // Method and publication blocks.
    assert!(s.publication.internally_commissioned);
    assert_eq!(s.method.judge.as_ref().unwrap().served_models.get("judge-model"), Some(&7));
    assert_eq!(s.method.question_sha256.len(), 4);
    assert!(s.simulated.arms.is_empty() && !s.simulated.judge);

    // Every run is in runs.csv, every claim in claims.jsonl.
    let csv = fs::read_to_string(written.path.join("runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 12);
    assert!(csv.lines().any(|l| l.contains("q4:b:1") && l.contains(",not_run,")));
    assert!(csv.lines().any(|l| l.contains("q3:a:1") && l.contains(",failed,")));
    let claims = fs::read_to_string(written.path.join("claims.jsonl")).unwrap();
    let header: serde_json::Value = serde_json::from_str(claims.lines().next().unwrap()).unwrap();
    assert_eq!(header["kind"], "header");
    assert_eq!(header["manifest_sha256"], frozen.manifest_sha256.as_str());
    assert_eq!(claims.lines().count(), 1 + 5 + 4 + 8);

    let md = fs::read_to_string(written.path.join("summary.md")).unwrap();
    assert!(md.contains("n/a (unmeasured)") && md.contains("not applicable"));
    assert!(md.contains("Internally commissioned"));
}

/// A second report goes to a new folder; a report never writes into an
/// existing one; the folder's files are read-only and listed with hashes.
#[tokio::test]
async fn reports_are_write_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let first = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let second = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_001)).await.unwrap();
    assert_ne!(first.path, second.path);
    let again = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await;
    assert!(matches!(again, Err(ReportError::Exists { .. })), "{again:?}");
    let listed: Vec<&str> = first.summary.files.iter().map(|f| f.name.as_str()).collect();
    for name in ["claims.jsonl", "index.html", "judge_traces.jsonl", "manifest.json", "runs.csv", "summary.md"] {
        assert!(listed.contains(&name), "{name} not listed in {listed:?}");
    }
    for entry in fs::read_dir(&first.path).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.metadata().unwrap().permissions().readonly(), "{:?}", entry.path());
    }
    // Nothing half-made is left behind.
    let leftovers: Vec<_> = fs::read_dir(dir.join("reports"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = SystemTime::now();
}

/// `verify` agrees with a fresh report and names a changed number.
#[tokio::test]
async fn verify_names_an_edited_number() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let ok = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(ok.ok(), "{:?}", ok.differences);
    assert!(ok.numbers_checked > 100, "{}", ok.numbers_checked);

    let path = written.path.join("summary.json");
    let mut perms = fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&path, perms).unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    json["arms"][1]["rates"]["support_micro"]["value"] = json!(0.9);
    fs::write(&path, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    let bad = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert_eq!(bad.differences.len(), 1, "{:?}", bad.differences);
    assert!(bad.differences[0].starts_with("arms[b].rates.support_micro.value"), "{:?}", bad.differences);
}

/// A report fed from a judging pass counts the pass's verdicts and only
/// those: a run the pass has not reached is not judged in it, even though
/// its record carries inline verdicts; verify re-reads the same pass.
#[tokio::test]
async fn a_report_from_a_pass_counts_only_the_pass_verdicts() {
    use cohort_records::passes::{PassClaim, PassConfig, PassJudge, PassRun, PassStore, PassVerdict};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let config = PassConfig::judge(
        "second-judge",
        PassJudge {
            proxy_judge: "j2".into(),
            requested_model: "judge-model".into(),
            served_model_expected: "judge-model".into(),
            vendor_lineage: "vendor-j".into(),
            strict: true,
        },
    );
    let store = PassStore::create_or_open(&dir, config).unwrap();
    // The pass judges only q4:a:1, whose inline verdicts were both
    // provider_error: now one YES and one NO.
    let row = ledger.runs().await.unwrap().into_iter().find(|r| r.run_id == "q4:a:1").unwrap();
    let claim = |id: u32, verdict: PassVerdict, line: &str| PassClaim {
        claim_id: id,
        verdict,
        unjudged_reason: None,
        judge_model: Some("judge-model".into()),
        judge_line: Some(line.into()),
    };
    let trace = |text: &str, verdict: &str| {
        json!({"query_id": "q4", "system": "Product A", "claim_text": text, "cited_indices": [1],
               "cited_snippets": [], "judge_verdict": verdict, "judge_reasoning": "", "judge_model": "judge-model",
               "timestamp": "2026-12-01T00:00:00.000Z"})
    };
    store
        .merge_run(&PassRun {
            run_id: "q4:a:1".into(),
            record_sha256: row.record_sha256.clone(),
            claims: vec![claim(1, PassVerdict::Yes, "Claim 1: YES"), claim(2, PassVerdict::No, "Claim 2: NO")],
            traces: vec![
                trace("Finding number 0 is stated in the source.", "SUPPORTED"),
                trace("Finding number 1 is stated in the source.", "UNSUPPORTED"),
            ],
            captures: Vec::new(),
            calls: Vec::new(),
            updated_at: String::new(),
        })
        .unwrap();
    let mut opts = options(&dir, 1_790_001_000);
    opts.pass = cohort_report::write::resolve_pass(&dir, Some("second-judge")).unwrap();
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &opts).await.unwrap();
    let s = &written.summary;
    assert_eq!(s.method.judge_pass.as_ref().map(|p| p.name.as_str()), Some("second-judge"));
    let a = arm(s, "a");
    // q1:a:1's inline YES, YES, NO do not count: the pass never judged it.
    assert_eq!((a.claims.judged, a.claims.supported), (2, 1));
    assert_eq!(a.claims.unjudged.get("not_sent"), Some(&3));
    assert_eq!(a.rates[RateKind::SupportMicro].value, Some(0.5));
    let b = arm(s, "b");
    assert_eq!(b.claims.judged, 0);
    assert_eq!(b.rates[RateKind::SupportMicro].status, RateStatus::Unmeasured);
    let traces = fs::read_to_string(written.path.join("judge_traces.jsonl")).unwrap();
    assert_eq!(traces.lines().count(), 1 + 2);
    // Verify re-reads the pass the report names.
    let ok = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(ok.ok(), "{:?}", ok.differences);
    // Without a pass named and no `default` pass, the records' own verdicts.
    assert!(cohort_report::write::resolve_pass(&dir, None).unwrap().is_none());
    assert!(cohort_report::write::resolve_pass(&dir, Some("missing")).is_err());
}

/// The first line of a file.
fn first_line(path: &Path) -> String {
    fs::read_to_string(path).unwrap().lines().next().unwrap().to_owned()
}

/// A cohort with a run still pending, or one that declares a human review
/// (a review was exported) without an adjudicated one, is `preliminary` on
/// the first line of summary.md, index.html and summary.json, with what is
/// missing, and its comparisons say "Preliminary"; `require_final`
/// (`cohort report --final`) refuses it naming what is missing and writes
/// nothing. With every run final and no review declared, the same cohort
/// is `final` and `require_final` writes it.
#[tokio::test]
async fn a_report_is_preliminary_until_runs_and_a_declared_review_are_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let check_preliminary = |path: &Path, why: &str| {
        let md = first_line(&path.join("summary.md"));
        assert!(md.contains("Publication state: preliminary") && md.contains(why), "summary.md: {md}");
        let html = first_line(&path.join("index.html"));
        assert!(html.starts_with("<!--") && html.contains("preliminary") && html.contains(why), "index.html: {html}");
        let json = first_line(&path.join("summary.json"));
        assert!(json.starts_with("{\"publication_state\":{\"state\":\"preliminary\""), "summary.json: {json}");
        assert!(json.contains(why), "summary.json: {json}");
        let page = fs::read_to_string(path.join("index.html")).unwrap();
        let state = page.find("id=\"publication-state\"").unwrap();
        assert!(state < page.find("<section id=\"method\">").unwrap(), "the state comes before the method block");
    };

    // Still running: q4:b:1 has no final outcome.
    let dir = tmp.path().join("running");
    let (frozen, manifest, ledger, artifacts) = build_with(&dir, true).await;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let s = &written.summary;
    assert_eq!(s.publication_state.state, "preliminary");
    assert_eq!(s.publication_state.missing, ["1 planned run(s) have no final outcome yet"]);
    check_preliminary(&written.path, "no final outcome");
    for (_, d) in s.comparisons[0].differences.iter() {
        assert!(d.statement.starts_with("Preliminary (not for publication): "), "{}", d.statement);
    }
    let md = fs::read_to_string(written.path.join("summary.md")).unwrap();
    assert!(!md.lines().any(|l| l.starts_with("- a and b cannot")), "no comparison reads as final");
    let mut strict = options(&dir, 1_790_001_001);
    strict.require_final = true;
    let refused = write_report(&frozen, &manifest, &ledger, &artifacts, &strict).await;
    match refused {
        Err(ReportError::NotFinal { missing }) => assert_eq!(missing, ["1 planned run(s) have no final outcome yet"]),
        other => panic!("{other:?}"),
    }
    let folders: Vec<_> = fs::read_dir(dir.join("reports")).unwrap().collect();
    assert_eq!(folders.len(), 1, "the refused report wrote nothing");
    let verified = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(verified.ok(), "{:?}", verified.differences);

    // Every run final, a review declared, none imported.
    let dir = tmp.path().join("declared");
    let (mut frozen, manifest, ledger, artifacts) = build(&dir).await;
    frozen.review_declared = true;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    assert_eq!(written.summary.publication_state.state, "preliminary");
    check_preliminary(&written.path, "no reviewer's labels are imported");
    let mut strict = options(&dir, 1_790_001_001);
    strict.require_final = true;
    let refused = write_report(&frozen, &manifest, &ledger, &artifacts, &strict).await.unwrap_err();
    assert!(refused.to_string().contains("no reviewer's labels are imported"), "{refused}");

    // Every run final, no review declared: final, and --final writes it.
    frozen.review_declared = false;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &strict).await.unwrap();
    assert!(written.summary.publication_state.is_final());
    assert!(first_line(&written.path.join("summary.md")).contains("Publication state: final"));
    assert!(first_line(&written.path.join("summary.json")).starts_with("{\"publication_state\":{\"state\":\"final\""));
    assert!(first_line(&written.path.join("index.html")).contains("Publication state: final"));
    let cannot = &written.summary.comparisons[0].differences.get(RateKind::SupportMicro).unwrap().statement;
    assert!(cannot.starts_with("a and b cannot be told apart"), "{cannot}");
    // summary.json is one JSON value, whatever its first line looks like.
    let parsed: Summary = serde_json::from_slice(&fs::read(written.path.join("summary.json")).unwrap()).unwrap();
    assert_eq!(parsed.publication_state, written.summary.publication_state);
}

/// A review planted by hand on the numbers cohort: two reviewers who agree
/// on every label (nothing to adjudicate), over the six completed outputs
/// of arms a and b (per question: a q1 3 claims, q2 none, q4 1; b q1 1,
/// q2 2, q3 1, each claim with one cited pair).
fn planted_review() -> cohort_report::review::ReviewInput {
    use cohort_report::review::import::{ClaimDecision, PairVerdict, ReviewerLabels};
    use cohort_report::review::{ExportIndex, ExportedItem, ItemKind, ReviewInput};
    // (run, claim item, label, its pair supports, reason)
    let claims: [(&str, &str, &str, bool, &str); 8] = [
        ("q1:a:1", "c1", "fully_supported", true, ""),
        ("q1:a:1", "c2", "fully_supported", false, "broken"),
        ("q1:a:1", "c3", "unsupported", false, "irrelevant"),
        ("q4:a:1", "c4", "partially_supported", true, ""),
        ("q1:b:1", "c5", "fully_supported", true, ""),
        ("q2:b:1", "c6", "unsupported", false, "irrelevant"),
        ("q2:b:1", "c7", "fully_supported", true, ""),
        ("q3:b:1", "c8", "unverifiable", false, "inaccessible"),
    ];
    let outputs = ["q1:a:1", "q2:a:1", "q4:a:1", "q1:b:1", "q2:b:1", "q3:b:1"];
    let item = |id: String, kind: ItemKind, run: &str, claim: Option<&str>| {
        let (q, arm) = (run.split(':').next().unwrap(), run.split(':').nth(1).unwrap());
        ExportedItem {
            item_id: id,
            kind,
            run_id: run.into(),
            arm: arm.into(),
            question_id: q.into(),
            output: format!("OUT-{run}"),
            claim_item: claim.map(str::to_owned),
            claim_id: Some(1),
            citation: Some(1),
            url: Some("https://example.org/source".into()),
            citations: Default::default(),
        }
    };
    let mut items: Vec<ExportedItem> =
        outputs.iter().map(|r| item(format!("u-{r}"), ItemKind::Uncertainty, r, None)).collect();
    for (run, c, ..) in &claims {
        items.push(item((*c).into(), ItemKind::Claim, run, None));
        items.push(item(format!("p-{c}"), ItemKind::Pair, run, Some(c)));
    }
    let reviewer = |who: &str| ReviewerLabels {
        reviewer: who.into(),
        file: format!("reviewer-{who}.csv"),
        claims: claims
            .iter()
            .map(|(_, c, l, ..)| ((*c).into(), ClaimDecision::Label { label: (*l).into(), reason: "seen".into() }))
            .collect(),
        // c8's source (q3:b:1) is labelled only secondary by both.
        pairs: claims
            .iter()
            .map(|(_, c, _, s, r)| {
                (format!("p-{c}"), PairVerdict { parts: vec![(*s, (*r).into())], secondary: *c == "c8" })
            })
            .collect(),
        uncertainty: outputs.iter().map(|r| (format!("u-{r}"), (2, false))).collect(),
        added: Vec::new(),
        missing_original: Default::default(),
    };
    ReviewInput {
        index: ExportIndex {
            kind: "cohort-review-export".into(),
            manifest_sha256: String::new(),
            exported_at: "2026-12-02T00:00:00.000Z".into(),
            reviewers: vec!["alice".into(), "bob".into()],
            folder: String::new(),
            items,
            extraction_check: None,
        },
        reviewers: vec![reviewer("alice"), reviewer("bob")],
        adjudication: None,
        imported_files: vec![("reviewer-alice.csv".into(), b"planted".to_vec())],
    }
}

/// The review rates of a planted review equal the hand computation:
/// claim fidelity, citation precision and coverage, micro and
/// equal-question macro, per arm and category, and the paired micro
/// differences over the completed pairs (q1, q2), each with its
/// cluster-bootstrap interval; scripts/rederive_report.py --intervals
/// (stdlib Python, its own implementation of cohort-bootstrap-v1) re-derives
/// every one of them, paired differences included, from the published
/// files alone; review.jsonl and the imported files are published; verify
/// agrees.
#[tokio::test]
async fn planted_review_rates_equal_the_hand_computation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (mut frozen, manifest, ledger, artifacts) = build(&dir).await;
    frozen.review = Some(planted_review());
    frozen.review_declared = true;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let s = &written.summary;
    let close = |got: Option<f64>, want: f64| assert!((got.unwrap() - want).abs() < 1e-12, "{got:?} vs {want}");
    use RateKind::*;
    let a = arm(s, "a");
    // a: q1 fully 2/3, pairs 1/3, covered 1/3; q2 no claims; q4 0/1, 1/1, 1/1.
    for (kind, num, den, value) in [
        (ClaimFidelityMicro, 2.0, 4.0, 0.5),
        (CitationPrecisionMicro, 2.0, 4.0, 0.5),
        (CitationCoverageMicro, 2.0, 4.0, 0.5),
        (ClaimFidelityMacro, 2.0 / 3.0, 2.0, 1.0 / 3.0),
        (CitationPrecisionMacro, 4.0 / 3.0, 2.0, 2.0 / 3.0),
        (CitationCoverageMacro, 4.0 / 3.0, 2.0, 2.0 / 3.0),
    ] {
        let r = &a.rates[kind];
        assert_eq!(r.status, RateStatus::Measured, "{kind:?}: {r:?}");
        close(Some(r.numerator), num);
        assert_eq!(r.denominator, den, "{kind:?}");
        close(r.value, value);
        assert!(r.ci_low.unwrap() <= r.value.unwrap() && r.value.unwrap() <= r.ci_high.unwrap(), "{kind:?}");
    }
    assert_eq!(a.rates[ClaimFidelityMacro].questions, Some(2));
    // b: q1 1/1 each; q2 fully 1/2, pairs 1/2, covered 1/2; q3 0/1 each.
    let b = arm(s, "b");
    for kind in [ClaimFidelityMicro, CitationPrecisionMicro, CitationCoverageMicro] {
        assert_eq!((b.rates[kind].numerator, b.rates[kind].denominator), (2.0, 4.0), "{kind:?}");
    }
    close(b.rates[ClaimFidelityMacro].value, (1.0 + 0.5 + 0.0) / 3.0);
    // Category history (q3, q4): a fidelity 0/1, b 0/1.
    let hist = |arm: &cohort_report::model::ArmSummary| {
        arm.categories.iter().find(|c| c.category == "history").unwrap().rates[ClaimFidelityMicro].clone()
    };
    assert_eq!((hist(a).numerator, hist(a).denominator, hist(a).value), (0.0, 1.0, Some(0.0)));
    assert_eq!((hist(b).numerator, hist(b).denominator), (0.0, 1.0));
    // c was not reviewed: unmeasured, never 0.
    let c = arm(s, "c");
    assert_eq!(c.rates[ClaimFidelityMicro].status, RateStatus::Unmeasured);
    // Secondary-only sources (the reviewers' label), one source per output
    // and URL: b's q3 source only secondary, of b's q1, q2 and q3 sources;
    // a none of its q1 and q4 sources; each with its hand interval.
    let draws = options(&dir, 1_790_001_000).draws;
    for (who, num, den) in [(b, [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]), (a, [0.0; 4], [1.0, 0.0, 0.0, 1.0])] {
        let r = &who.rates[SecondaryOnlySources];
        assert_eq!(r.status, RateStatus::Measured, "{}: {r:?}", who.id);
        let (n, d): (f64, f64) = (num.iter().sum(), den.iter().sum());
        assert_eq!((r.numerator, r.denominator), (n, d), "{}", who.id);
        close(r.value, n / d);
        let (lo, hi) = hand_interval(&num, &den, draws);
        close(r.ci_low, lo);
        close(r.ci_high, hi);
    }
    // The review section's figures are the same rates.
    let review = s.review.as_ref().unwrap();
    let fb = &review.arms[1].figures;
    assert_eq!((fb.reviewed_sources, fb.secondary_only_sources, fb.unresolved_sources), (3, 1, 0));
    // Every factual claim of b but c8's (its only source secondary) cites
    // an original: c8 counts as missing its original citation.
    assert_eq!(fb.missing_original_citation, 1);
    assert_eq!(review.arms[0].figures.claim_fidelity, a.rates[ClaimFidelityMicro]);
    // Paired over q1, q2: a fidelity 2/3, b (1 + 1)/(1 + 2) = 2/3; precision a 1/3,
    // b 2/3; coverage a 1/3, b 2/3.
    let cmp = &s.comparisons[0];
    let fid = cmp.differences.get(ClaimFidelityMicro).unwrap();
    close(fid.value, 0.0);
    assert_eq!(fid.questions, 1, "q1 is the only completed pair where both have factual claims");
    assert!(fid.statement.contains("cannot be told apart"), "{}", fid.statement);
    close(cmp.differences.get(CitationPrecisionMicro).unwrap().value, 1.0 / 3.0 - 2.0 / 3.0);
    close(cmp.differences.get(CitationCoverageMicro).unwrap().value, 1.0 / 3.0 - 2.0 / 3.0);
    // Two reviewers, nothing unresolved, every run final: final.
    assert!(s.publication_state.is_final(), "{:?}", s.publication_state);
    // Published: review.jsonl (header, 6 outputs, 8 claims, 8 pairs) and the imported files.
    let lines = fs::read_to_string(written.path.join("review.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 1 + 6 + 8 + 8);
    assert_eq!(fs::read(written.path.join("review-imported-reviewer-alice.csv")).unwrap(), b"planted");
    let ok = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(ok.ok(), "{:?}", ok.differences);
    // The independent re-derivation, intervals and paired differences included.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rederive_report.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&written.path)
        .arg("--intervals")
        .output()
        .expect("python3 is needed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("all agree"), "{text}");
}

/// A cluster-bootstrap interval computed by hand from the draws of
/// `cohort-bootstrap-v1` (`ClusterBootstrap::multiplicities`): per draw
/// sum m[q] * num[q] / sum m[q] * den[q] over the questions in frozen
/// order, undefined draws left out, then the linear 2.5% and 97.5%
/// percentiles.
fn hand_interval(num: &[f64], den: &[f64], draws: u32) -> (f64, f64) {
    let boot = cohort_core::stats::ClusterBootstrap::new(num.len());
    let boot = cohort_core::stats::ClusterBootstrap { draws, ..boot };
    let mut values = Vec::new();
    for b in 0..draws {
        let m = boot.multiplicities(b);
        let (mut n, mut d) = (0.0, 0.0);
        for q in 0..num.len() {
            n += f64::from(m[q]) * num[q];
            d += f64::from(m[q]) * den[q];
        }
        if d != 0.0 {
            values.push(n / d);
        }
    }
    values.sort_by(f64::total_cmp);
    let p = |x| cohort_core::stats::percentile_linear(&values, x).unwrap();
    (p(0.025), p(0.975))
}

/// The source figures of planted captures equal the hand computation
/// (seed 004: unique sources per product and category, the
/// inaccessible-source rate, secondary-only sources): per output a source
/// is a distinct URL of its reference table, accessible when any capture
/// of it answered 200 (q2:b:1's b-only source failed with 503, then
/// answered), inaccessible when captured and never accessible, uncaptured
/// otherwise; unique sources count a URL cited by several outputs once;
/// every interval is the hand-computed cluster bootstrap; the
/// secondary-only rate is unmeasured with its reason, never 0; sources.jsonl
/// holds one line per output and source with its access time;
/// scripts/rederive_report.py --intervals re-derives all of it from the
/// published files; verify agrees.
#[tokio::test]
async fn planted_source_figures_equal_the_hand_computation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let opts = options(&dir, 1_790_001_000);
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &opts).await.unwrap();
    let s = &written.summary;
    let draws = opts.draws;
    use RateKind::{InaccessibleSources, SecondaryOnlySources, SourcesPerOutput};
    let check = |rate: &cohort_report::model::Rate, num: &[f64], den: &[f64], what: &str| {
        let (n, d): (f64, f64) = (num.iter().sum(), den.iter().sum());
        assert_eq!(rate.status, RateStatus::Measured, "{what}: {rate:?}");
        assert_eq!((rate.numerator, rate.denominator), (n, d), "{what}");
        assert!((rate.value.unwrap() - n / d).abs() < 1e-12, "{what}: {:?} vs {}", rate.value, n / d);
        let (lo, hi) = hand_interval(num, den, draws);
        assert!((rate.ci_low.unwrap() - lo).abs() < 1e-12, "{what}: ci_low {:?} vs {lo}", rate.ci_low);
        assert!((rate.ci_high.unwrap() - hi).abs() < 1e-12, "{what}: ci_high {:?} vs {hi}", rate.ci_high);
    };
    // Questions in frozen order q1 q2 q3 q4.
    // a: q1 lists source (200) and other (404); q2 no reference; q3 failed;
    // q4 source, never captured.
    let a = arm(s, "a");
    assert_eq!(
        (a.sources.cited, a.sources.unique, a.sources.accessible, a.sources.inaccessible, a.sources.uncaptured),
        (3, 2, 1, 1, 1)
    );
    check(&a.rates[SourcesPerOutput], &[2.0, 0.0, 0.0, 1.0], &[1.0, 1.0, 0.0, 1.0], "a sources per output");
    check(&a.rates[InaccessibleSources], &[1.0, 0.0, 0.0, 0.0], &[2.0, 0.0, 0.0, 0.0], "a inaccessible");
    let reason = a.rates[InaccessibleSources].reason.clone().unwrap();
    assert!(reason.contains("2 captured of 3") && reason.contains("1 were never captured"), "{reason}");
    // b: q1 source (200); q2 source (timed out) and b-only (503, then 200);
    // q3 source never captured; q4 not run. source is cited three times, once.
    let b = arm(s, "b");
    assert_eq!(
        (b.sources.cited, b.sources.unique, b.sources.accessible, b.sources.inaccessible, b.sources.uncaptured),
        (4, 2, 2, 1, 1)
    );
    check(&b.rates[SourcesPerOutput], &[1.0, 2.0, 1.0, 0.0], &[1.0, 1.0, 1.0, 0.0], "b sources per output");
    check(&b.rates[InaccessibleSources], &[0.0, 1.0, 0.0, 0.0], &[1.0, 2.0, 0.0, 0.0], "b inaccessible");
    // Per category: a's history (q3 failed, q4 uncaptured) has nothing
    // captured: unmeasured, never 0; its technology output cites nothing.
    let cat = |arm: &cohort_report::model::ArmSummary, c: &str| {
        arm.categories.iter().find(|x| x.category == c).unwrap().clone()
    };
    let (science, technology, history) = (cat(a, "science"), cat(a, "technology"), cat(a, "history"));
    assert_eq!((science.sources.cited, science.sources.unique, science.sources.inaccessible), (2, 2, 1));
    check(&science.rates[InaccessibleSources], &[1.0, 0.0, 0.0, 0.0], &[2.0, 0.0, 0.0, 0.0], "a science");
    assert_eq!(history.rates[InaccessibleSources].status, RateStatus::Unmeasured);
    assert_eq!(history.rates[InaccessibleSources].value, None);
    assert!(history.rates[InaccessibleSources].reason.as_deref().unwrap().contains("none of the 1 cited source"));
    assert_eq!(technology.rates[InaccessibleSources].status, RateStatus::NotApplicable);
    check(&technology.rates[SourcesPerOutput], &[0.0, 0.0, 0.0, 0.0], &[0.0, 1.0, 0.0, 0.0], "a technology");
    let b_hist = cat(b, "history");
    assert_eq!((b_hist.sources.cited, b_hist.sources.unique, b_hist.sources.uncaptured), (1, 1, 1));
    // c: four outputs citing the same never-captured source.
    let c = arm(s, "c");
    assert_eq!((c.sources.cited, c.sources.unique, c.sources.uncaptured), (4, 1, 4));
    assert_eq!(c.rates[InaccessibleSources].status, RateStatus::Unmeasured);
    // Secondary-only: a reviewer's label, and no review was imported here:
    // unmeasured with the reason, never 0.
    for arm in [a, b, c] {
        let r = &arm.rates[SecondaryOnlySources];
        assert_eq!((r.status, r.value), (RateStatus::Unmeasured, None), "{}", arm.id);
        assert!(r.reason.as_deref().unwrap().contains("no human review imported"), "{:?}", r.reason);
    }
    let md = fs::read_to_string(written.path.join("summary.md")).unwrap();
    assert!(md.contains("| secondary-only source rate | n/a (unmeasured) |"), "summary.md");
    assert!(md.contains("| a | 3 | 2 | 1 | 1 | 1 |"), "summary.md's sources table");
    // sources.jsonl: one line per output and source, with what was found.
    let lines: Vec<serde_json::Value> = fs::read_to_string(written.path.join("sources.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "header");
    assert_eq!(lines.len(), 1 + 3 + 4 + 4);
    let b_only = lines.iter().find(|l| l["url"] == "https://example.net/b-only").unwrap();
    assert_eq!(
        (&b_only["run_id"], &b_only["status"], &b_only["http_status"], &b_only["accessed_at"], &b_only["indices"]),
        (&json!("q2:b:1"), &json!("accessible"), &json!(200), &json!("2026-11-01T10:02:02.000Z"), &json!([2]))
    );
    let timed_out = lines.iter().find(|l| l["run_id"] == "q2:b:1" && l["url"] == "https://example.org/source").unwrap();
    assert_eq!((&timed_out["status"], &timed_out["failure"]), (&json!("inaccessible"), &json!("timeout")));
    // runs.csv carries the per-run counts the script checks.
    let csv = fs::read_to_string(written.path.join("runs.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let row: Vec<&str> = csv.lines().find(|l| l.contains("q2:b:1")).unwrap().split(',').collect();
    assert_eq!(
        (row[col("sources")], row[col("inaccessible_sources")], row[col("uncaptured_sources")]),
        ("2", "1", "0")
    );
    let ok = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(ok.ok(), "{:?}", ok.differences);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rederive_report.py");
    let out =
        std::process::Command::new("python3").arg(&script).arg(&written.path).arg("--intervals").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("all agree"), "{text}");
}

/// Costs are kept apart and labelled (seed 004: "Record actual marginal
/// cost ... credits and subscription plan cost separately"; "Unknown
/// provider costs stay unknown"): the price-catalogue estimate is
/// "estimated cost", summed over the completed runs that have one, the
/// others counted unknown; no run reports an actual charge, so the actual
/// cost is unknown, never 0 and never the estimate; a person's credits are
/// summed as credits (never money), with the plan and region by run; all
/// of it in runs.csv, summary.json, summary.md and index.html.
#[tokio::test]
async fn planted_costs_are_labelled_and_kept_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (frozen, manifest, ledger, artifacts) = build(&dir).await;
    let written = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let s = &written.summary;
    // a: q1 0.25 + q4 0.5 USD estimated; q2 completed without one.
    let a = &arm(s, "a").time_cost;
    assert_eq!((a.estimated_cost, a.estimated_cost_currency.as_deref()), (Some(0.75), Some("USD")));
    assert_eq!((a.estimated_cost_runs, a.unknown_estimated_cost_runs), (2, 1));
    assert_eq!((a.actual_cost, a.actual_cost_runs, a.unknown_actual_cost_runs), (None, 0, 3));
    assert_eq!((a.credits_runs, a.credits_debited), (0, None));
    // b: no estimate; credits 12.5 + 3 reported by the person; plan Pro twice, region once.
    let b = &arm(s, "b").time_cost;
    assert_eq!((b.estimated_cost, b.estimated_cost_runs, b.unknown_estimated_cost_runs), (None, 0, 3));
    assert_eq!((b.credits_runs, b.credits_debited), (2, Some(15.5)));
    assert_eq!(b.plans, std::collections::BTreeMap::from([("Pro".to_owned(), 2)]));
    assert_eq!(b.regions, std::collections::BTreeMap::from([("EU".to_owned(), 1)]));
    assert_eq!(b.actual_text(), "unknown (3 run(s): not reported)");
    // runs.csv: one labelled column each, empty when unknown.
    let csv = fs::read_to_string(written.path.join("runs.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert!(!header.contains(&"cost"), "the estimate is never called plain cost: {header:?}");
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    let row = |run: &str| -> Vec<String> {
        csv.lines().find(|l| l.contains(run)).unwrap().split(',').map(str::to_owned).collect()
    };
    let q1a = row("q1:a:1");
    assert_eq!((q1a[col("estimated_cost")].as_str(), q1a[col("estimated_cost_currency")].as_str()), ("0.25", "USD"));
    assert_eq!((q1a[col("actual_cost")].as_str(), q1a[col("credits_debited")].as_str()), ("", ""));
    let q1b = row("q1:b:1");
    assert_eq!(
        (q1b[col("credits_debited")].as_str(), q1b[col("plan")].as_str(), q1b[col("region")].as_str()),
        ("12.5", "Pro", "EU")
    );
    assert_eq!(row("q2:b:1")[col("region")], "");
    // The summaries say "estimated cost" and keep the rest apart.
    let md = fs::read_to_string(written.path.join("summary.md")).unwrap();
    assert!(md.contains("| estimated cost (price catalogue) | actual cost | credits debited | plan | region |"));
    assert!(
        md.contains("| 0.7500 USD (2 run(s); 1 unknown) | unknown (3 run(s): not reported) | not reported |"),
        "{md}"
    );
    assert!(md.contains("| 15.5 credits (2 run(s)) | Pro: 2 | EU: 1 |"), "{md}");
    assert!(!md.contains("total cost"), "summary.md");
    let page = fs::read_to_string(written.path.join("index.html")).unwrap();
    assert!(page.contains("estimated cost (price catalogue)") && page.contains("15.5 credits (2 run(s))"));
    assert!(!page.contains("total known cost"));
    let json = fs::read_to_string(written.path.join("summary.json")).unwrap();
    assert!(json.contains("\"estimated_cost\": 0.75") && !json.contains("total_cost"), "summary.json");
    let ok = cohort_report::verify_report(&written.path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
    assert!(ok.ok(), "{:?}", ok.differences);
}

/// Every file of a report folder as text.
fn folder_text(path: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned(),
            )
        })
        .collect();
    files.sort();
    files
}

/// `cohort report --redact` (seed 004: "Publish only material authorized
/// for release"): the full report of the planted cohort holds the planted
/// output sentence and captured passage (claims, traces, page); the
/// redacted folder holds neither in any file, says REDACTED on the first
/// line of summary.md, index.html and summary.json, keeps the claim ids
/// and verdicts and every number (the same as the full report's), leaves
/// out the imported review files, and `cohort verify` and
/// scripts/rederive_report.py agree with it as with the full one.
#[tokio::test]
async fn a_redacted_report_has_no_output_or_captured_text_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("numbers");
    let (mut frozen, manifest, ledger, artifacts) = build(&dir).await;
    frozen.review = Some(planted_review());
    frozen.review_declared = true;
    let full = write_report(&frozen, &manifest, &ledger, &artifacts, &options(&dir, 1_790_001_000)).await.unwrap();
    let full_files = folder_text(&full.path);
    let holding = |files: &[(String, String)], needle: &str| -> Vec<String> {
        files.iter().filter(|(_, text)| text.contains(needle)).map(|(name, _)| name.clone()).collect()
    };
    // The plants are there to find: the full report publishes them.
    for name in ["claims.jsonl", "index.html"] {
        assert!(holding(&full_files, OUTPUT_SENTENCE).contains(&name.to_owned()), "{name} lacks the output");
    }
    for name in ["judge_traces.jsonl", "index.html"] {
        assert!(holding(&full_files, CAPTURED_PASSAGE).contains(&name.to_owned()), "{name} lacks the passage");
    }
    let mut opts = options(&dir, 1_790_001_001);
    opts.redact = true;
    let redacted = write_report(&frozen, &manifest, &ledger, &artifacts, &opts).await.unwrap();
    let files = folder_text(&redacted.path);
    assert!(holding(&files, OUTPUT_SENTENCE).is_empty(), "output text in {:?}", holding(&files, OUTPUT_SENTENCE));
    assert!(holding(&files, CAPTURED_PASSAGE).is_empty(), "captured text in {:?}", holding(&files, CAPTURED_PASSAGE));
    assert!(
        holding(&files, "https://example.org/other").is_empty(),
        "a source URL in {:?}",
        holding(&files, "https://example.org/other")
    );
    assert!(!files.iter().any(|(n, _)| n.starts_with("review-imported-")), "imported review files are not copied");
    for name in ["summary.md", "index.html", "summary.json"] {
        let first = first_line(&redacted.path.join(name));
        assert!(first.contains("REDACTED"), "{name}: {first}");
        assert!(!first_line(&full.path.join(name)).contains("REDACTED"), "{name} of the full report");
    }
    // Claim ids and verdicts stay; the numbers are the full report's.
    let claims: Vec<serde_json::Value> = fs::read_to_string(redacted.path.join("claims.jsonl"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(claims.len(), 5 + 4 + 8);
    let first = claims.iter().find(|c| c["run_id"] == "q1:a:1" && c["claim_index"] == 1).unwrap();
    assert_eq!(
        (&first["run_id"], &first["claim_index"], &first["verdict"], &first["text"]),
        (&json!("q1:a:1"), &json!(1), &json!("YES"), &json!(null))
    );
    let trace: serde_json::Value = serde_json::from_str(
        fs::read_to_string(redacted.path.join("judge_traces.jsonl")).unwrap().lines().nth(1).unwrap(),
    )
    .unwrap();
    assert_eq!((&trace["judge_verdict"], trace.get("cited_snippets")), (&json!("SUPPORTED"), None));
    assert_eq!(redacted.summary.arms, full.summary.arms);
    assert_eq!(redacted.summary.comparisons, full.summary.comparisons);
    assert_eq!(redacted.summary.review, full.summary.review);
    for path in [&full.path, &redacted.path] {
        let ok = cohort_report::verify_report(path, &dir, &frozen, &ledger, &artifacts).await.unwrap();
        assert!(ok.ok(), "{}: {:?}", path.display(), ok.differences);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rederive_report.py");
        let out = std::process::Command::new("python3").arg(&script).arg(path).arg("--intervals").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("all agree"), "{}: {text}", path.display());
    }
}
