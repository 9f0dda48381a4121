//! The extraction check before scoring (seed 004: "An independent second
//! reviewer checks the extraction before scoring"), through the library
//! entry points on a cohort built by hand (an embedded ledger, one run
//! record written straight into the artifact store, `[review]
//! extraction_check = true`): the scorers' export is refused until a check
//! is imported; a check that splits, merges, marks not factual and adds a
//! claim gives the scorers exactly the checked units (ids, wordings,
//! pairs); a check file of another check and a checker who is a scorer are
//! refused writing nothing; the review figures from the scorers' labels on
//! those units equal the test's own count.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cohort_artifacts::ArtifactStore;
use cohort_coordinator::freeze::{FreezeOptions, freeze, load_frozen};
use cohort_core::scoring::{ParsedVerdict, RunFacts, ScoreReport, Verdict, analyse};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{AttemptRecord, LeaseRef, Ledger, PlanHeader, RunResult};
use cohort_report::FrozenCohort;
use cohort_report::review::check::CHECK_COLUMNS;
use cohort_report::review::export::{ExportOptions, export};
use cohort_report::review::{ReviewError, import, load, state_dir, summarise_review};
use serde_json::{Value, json};

const CONFIG: &str = r#"
name = "checked"
seed = 3

[[arms]]
id = "a"
label = "Product A"
adapter = "command"
pinned_version = "a-1"
vendor_lineage = "vendor-a"
concurrency = 10
settings = { program = "true" }

[review]
extraction_check = true
"#;

const QUESTIONS: &str = r#"[{"id": "q1", "category": "science", "text": "Why does ice float?"}]"#;
const KEY: &str = r#"[{"question_id": "q1", "answerable": true, "required_caveats": [], "known_disputes": [], "sources": ["a textbook"]}]"#;

/// The output: a conjunction (split by the check), a claim, a paraphrase of
/// it citing one of its sources and a new one (merged), an opinion (not
/// factual); the check adds a claim the extraction missed, citing [2].
const S1: &str = "Ice floats because it is less dense than water and it expands when it freezes [1].";
const S2: &str = "Ice is less dense than liquid water [1][2].";
const S3: &str = "Liquid water is denser than ice [1][3].";
const S4: &str = "In my opinion this is the most elegant fact in chemistry [2].";
const ADDED: &str = "Water is densest near 4 degrees Celsius.";
const PART_1: &str = "Ice floats because it is less dense than water";
const PART_2: &str = "Ice expands when it freezes";

struct Cohort {
    dir: PathBuf,
    frozen: FrozenCohort,
    ledger: Arc<dyn Ledger>,
    artifacts: ArtifactStore,
}

async fn build(dir: &Path) -> Cohort {
    fs::create_dir_all(dir).unwrap();
    for (name, text) in [
        ("cohort.toml", CONFIG),
        ("questions.json", QUESTIONS),
        ("uncertainty_key.json", KEY),
        ("suffix.txt", "Cite sources.\n"),
        ("protocol.md", "# Protocol\n"),
        ("rubric.md", "# Rubric\n"),
    ] {
        fs::write(dir.join(name), text).unwrap();
    }
    freeze(dir, &FreezeOptions { now: UNIX_EPOCH + Duration::from_secs(1_790_000_000), amend: None }).unwrap();
    let (cohort, manifest, manifest_sha256) = load_frozen(dir).unwrap();
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.join("ledger.sqlite")).unwrap());
    let header = PlanHeader::for_cohort(&cohort.config, &manifest_sha256);
    let questions: Vec<(String, String)> = cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let t0 = 1_790_000_100_000;
    ledger.seed(&header, &questions, &manifest.order, t0).await.unwrap();
    let artifacts = ArtifactStore::local(dir.join("artifacts"));
    let text = format!(
        "{S1} {S2} {S3} {S4}\n\n## References\n\n[1] https://example.org/a\n[2] https://example.org/b\n[3] https://example.org/c\n"
    );
    let batch = ledger.lease("w", 10, t0, 60_000).await.unwrap();
    assert_eq!(batch.leases.len(), 1);
    let grant = &batch.leases[0];
    let analysis = analyse(&text, None).unwrap();
    let parsed = vec![Some(ParsedVerdict { verdict: Verdict::Yes, line: None }); analysis.claims.len()];
    let report = ScoreReport::assemble(analysis, &RunFacts::default(), &parsed);
    let record = json!({
        "record_version": 3, "cohort": "checked", "manifest_sha256": manifest_sha256,
        "metrics_version": 1, "run_id": grant.run_id, "question_id": grant.question_id,
        "arm": grant.arm_id, "product": "P", "simulated": false, "repeat": 1, "attempt": 1,
        "prompt": "the prompt", "conversation": [], "output_sha256": artifacts.put(text.as_bytes()).unwrap(),
        "citation_urls": [], "observed_version": "v", "pinned_version": "a-1", "settings": {},
        "started_at": "", "ended_at": "", "duration_ms": 500, "outcome": "completed", "failure_reason": null,
        "attempt_class": "ok", "token_usage": null, "system_sources": [], "cost": null, "currency": null,
        "scoring": {"report": report, "evidence_sources": [], "captures": [],
                    "judge": {"requested_model": "judge-model", "served_models": ["judge-model"],
                              "input_tokens": 0, "output_tokens": 0, "cost_micros": null,
                              "currency": "", "attempt_classes": [], "error": null},
                    "judge_traces": []},
        "scoring_error": null
    });
    let sha = artifacts.put(&serde_json::to_vec_pretty(&record).unwrap()).unwrap();
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
    let lease = LeaseRef { run_id: grant.run_id.clone(), token: grant.token };
    assert!(ledger.finish("w", &lease, &result, t0 + 500).await.unwrap());
    let frozen = FrozenCohort { cohort, manifest, manifest_sha256, review: None, review_declared: true };
    Cohort { dir: dir.to_owned(), frozen, ledger, artifacts }
}

async fn export_for(c: &Cohort, out: &Path, reviewers: &[&str], checker: Option<&str>) -> Result<(), ReviewError> {
    let options = ExportOptions {
        reviewers: reviewers.iter().map(|r| (*r).to_owned()).collect(),
        out: Some(out.to_owned()),
        now: SystemTime::now(),
        label_studio: false,
        extraction_checker: checker.map(str::to_owned),
    };
    let f = &c.frozen;
    export(&c.dir, &f.cohort, &f.manifest_sha256, &c.ledger, &c.artifacts, &options, &|_, _| {}).await.map(|_| ())
}

fn rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n']) { format!("\"{}\"", v.replace('"', "\"\"")) } else { v.to_owned() }
}

fn write_csv(path: &Path, header: &[&str], rows: &[BTreeMap<String, String>]) {
    let mut out = header.join(",") + "\n";
    for r in rows {
        let fields: Vec<String> = header.iter().map(|h| csv_field(r.get(*h).map_or("", String::as_str))).collect();
        out.push_str(&(fields.join(",") + "\n"));
    }
    fs::write(path, out).unwrap();
}

fn refusal(result: Result<impl std::fmt::Debug, ReviewError>) -> String {
    match result {
        Err(e @ (ReviewError::Refused(_) | ReviewError::BadInput { .. } | ReviewError::BadFile { .. })) => {
            e.to_string()
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Proves the whole check, as the module docs say.
#[tokio::test]
async fn a_checked_extraction_is_what_the_scorers_label() {
    let tmp = tempfile::tempdir().unwrap();
    let c = build(&tmp.path().join("cohort")).await;
    let state = state_dir(&c.dir);

    // Declared and not imported: the scorers' export is refused, nothing written.
    let scorers = tmp.path().join("scorers");
    let why = refusal(export_for(&c, &scorers, &["alice", "bob"], None).await);
    assert!(why.contains("extraction_check = true") && why.contains("--extraction-checker"), "{why}");
    assert!(!scorers.exists() && !state.exists(), "nothing written on refusal");

    // Phase 1: carol's check file.
    let check_out = tmp.path().join("check");
    export_for(&c, &check_out, &[], Some("carol")).await.unwrap();
    let mut check = rows(&check_out.join("carol/check.jsonl"));
    let claim_rows: Vec<&BTreeMap<String, String>> = check.iter().filter(|r| r["kind"] == "claim").collect();
    let wordings: Vec<&str> = claim_rows.iter().map(|r| r["claim"].as_str()).collect();
    assert_eq!(wordings, [S1, S2, S3, S4], "one row per extracted claim, as written");
    assert_eq!(claim_rows[2]["cited"], "1;3");
    let output = check.iter().find(|r| r["kind"] == "output").unwrap();
    assert!(output["output_text"].contains(S4), "the checker reads the output");
    assert!(!output["output_text"].contains("Product A"));
    let id = |n: usize| check.iter().filter(|r| r["kind"] == "claim").nth(n).unwrap()["item_id"].clone();
    let (c1, c2, c3, c4) = (id(0), id(1), id(2), id(3));
    let output_code = output["output"].clone();
    for r in &mut check {
        if r["item_id"] == c1 {
            r.insert("split".into(), format!("{PART_1} || {PART_2}"));
        } else if r["item_id"] == c3 {
            r.insert("merge_with".into(), c2.clone());
        } else if r["item_id"] == c4 {
            r.insert("not_factual".into(), "opinion".into());
        }
    }
    let mut added = check[0].clone();
    for (k, v) in [("item_id", "m1"), ("kind", "added"), ("claim", ADDED), ("cited", "2"), ("line", ""), ("split", "")]
    {
        added.insert(k.into(), v.into());
    }
    check.push(added);

    // A check file of another check: refused, naming both hashes, nothing kept.
    let mut other = check.clone();
    let real_sha = other[0]["check_sha256"].clone();
    other.iter_mut().for_each(|r| {
        r.insert("check_sha256".into(), "0".repeat(64));
    });
    let other_file = tmp.path().join("other-check.csv");
    write_csv(&other_file, &CHECK_COLUMNS, &other);
    let why = refusal(import::import(&c.dir, std::slice::from_ref(&other_file)));
    assert!(why.contains("field `check_sha256`") && why.contains(&real_sha) && why.contains(&"0".repeat(64)), "{why}");
    assert!(!state.join("imported").exists(), "nothing kept on refusal");

    let check_file = tmp.path().join("carol-check.csv");
    write_csv(&check_file, &CHECK_COLUMNS, &check);
    let imported = import::import(&c.dir, std::slice::from_ref(&check_file)).unwrap();
    assert_eq!(imported.checker.as_deref(), Some("carol"));
    assert!(state.join("imported/extraction-check.csv").is_file());

    // The checker as a scorer: refused naming both, nothing written.
    let why = refusal(export_for(&c, &scorers, &["Carol", "bob"], None).await);
    assert!(why.contains("\"Carol\"") && why.contains("\"carol\""), "{why}");
    assert!(!scorers.exists() && !state.join("export.json").exists());

    // Phase 2: the scorers' items are exactly the checked units.
    export_for(&c, &scorers, &["alice", "bob"], None).await.unwrap();
    let items = rows(&scorers.join("alice/items.jsonl"));
    let claims: Vec<(String, String, String)> = items
        .iter()
        .filter(|r| r["kind"] == "claim")
        .map(|r| (r["item_id"].clone(), r["claim"].clone(), r["cited"].clone()))
        .collect();
    let expected = |id: &str, text: &str, cited: &str| (id.to_owned(), text.to_owned(), cited.to_owned());
    assert_eq!(
        claims,
        [
            expected(&format!("{c1}.1"), PART_1, "1"),
            expected(&format!("{c1}.2"), PART_2, "1"),
            // S3's [1] is S2's own pair (counted once); its [3] is S2's now.
            expected(&c2, S2, "1;2;3"),
            expected("a0001", ADDED, "2"),
        ]
    );
    let pairs: Vec<(String, String)> =
        items.iter().filter(|r| r["kind"] == "pair").map(|r| (r["claim_item"].clone(), r["urls"].clone())).collect();
    let pair = |claim: &str, url: &str| (claim.to_owned(), format!("https://example.org/{url}"));
    assert_eq!(
        pairs,
        [
            pair(&format!("{c1}.1"), "a"),
            pair(&format!("{c1}.2"), "a"),
            pair(&c2, "a"),
            pair(&c2, "b"),
            pair(&c2, "c"),
            pair("a0001", "b"),
        ]
    );
    let index: Value = serde_json::from_slice(&fs::read(state.join("export.json")).unwrap()).unwrap();
    let record = &index["extraction_check"];
    assert_eq!(record["checker"], "carol");
    let file_sha = cohort_core::hash::sha256_hex(&fs::read(&check_file).unwrap());
    assert_eq!(record["file_sha256"], file_sha.as_str());
    assert_eq!(
        (&record["split"], &record["merged"], &record["not_factual"], &record["added"]),
        (&json!(1), &json!(1), &json!(1), &json!(1))
    );
    let c2_claim_id =
        index["items"].as_array().unwrap().iter().find(|i| i["item_id"] == c2).unwrap()["claim_id"].clone();
    assert_eq!(c2_claim_id, 2, "an unchanged claim keeps its id in the run's score");

    // Scorers agree on everything; labels planted per unit and pair.
    let label = BTreeMap::from([
        (format!("{c1}.1"), "fully_supported"),
        (format!("{c1}.2"), "unsupported"),
        (c2.clone(), "fully_supported"),
        ("a0001".to_owned(), "fully_supported"),
    ]);
    let supports = |claim: &str, url: &str| !(claim.ends_with(".2") || url.ends_with("/c"));
    let header: Vec<String> = fs::read_to_string(scorers.join("alice/items.csv"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut files = Vec::new();
    for who in ["alice", "bob"] {
        let mut filled = Vec::new();
        for r in rows(&scorers.join(who).join("items.jsonl")) {
            let mut r = r.clone();
            match r["kind"].as_str() {
                "claim" => {
                    r.insert("label".into(), label[&r["item_id"]].into());
                }
                "pair" => {
                    let yes = supports(&r["claim_item"], &r["urls"]);
                    r.insert("supports".into(), if yes { "yes" } else { "no" }.into());
                    r.insert("reason".into(), if yes { "" } else { "irrelevant" }.into());
                    r.insert("secondary".into(), "no".into());
                }
                _ => {
                    r.insert("uncertainty".into(), "2".into());
                }
            }
            filled.push(r);
        }
        let path = tmp.path().join(format!("{who}.csv"));
        write_csv(&path, &header, &filled);
        files.push(path);
    }
    import::import(&c.dir, &files).unwrap();
    let input = load(&c.dir).unwrap().unwrap();
    let parts = summarise_review(&c.frozen, Some(&input), 200).unwrap();
    let f = &parts.summary.arms[0].figures;
    // By hand: 4 factual units (2 parts, S2, the added claim), 3 fully
    // supported; 6 pairs, 4 supporting (part 2's and S2's [3] do not);
    // covered: part 1, S2, the added claim; S3 merged and S4 not factual
    // excluded.
    assert_eq!((f.factual_claims, f.labels["fully_supported"], f.labels["unsupported"]), (4, 3, 1));
    assert_eq!((f.pairs, f.supporting_pairs, f.covered_claims, f.excluded_claims), (6, 4, 3, 2));
    assert_eq!(f.pair_reasons["irrelevant"], 2);
    let check_figures = parts.summary.extraction_check.as_ref().unwrap();
    assert_eq!(check_figures.checker, "carol");
    assert_eq!(check_figures.file_sha256, file_sha);
    let excluded: Vec<(&str, &str)> = parts
        .lines
        .iter()
        .filter(|l| l.get("extraction_check").is_some())
        .map(|l| (l["item_id"].as_str().unwrap(), l["status"].as_str().unwrap()))
        .collect();
    assert_eq!(excluded, [(c3.as_str(), "excluded_merged"), (c4.as_str(), "excluded_not_factual")]);
    assert!(output_code.contains("-q1-1"));

    // Publication: the imported check meets the declaration (and the
    // agreed review, the final runs, the real arm: the report is final);
    // the same review without a check is preliminary, saying why.
    let status = c.ledger.status().await.unwrap();
    let simulated = cohort_report::model::Simulated::default();
    let state_of = |summary: &cohort_report::review::ReviewSummary| {
        cohort_report::compute::publication_state(&c.frozen, &status, &simulated, Some(summary))
    };
    let checked = state_of(&parts.summary);
    assert_eq!((checked.state.as_str(), checked.missing.len()), ("final", 0), "{:?}", checked.missing);
    let unchecked = cohort_report::review::ReviewSummary { extraction_check: None, ..parts.summary.clone() };
    let unchecked = state_of(&unchecked);
    assert_eq!(unchecked.state, "preliminary");
    assert!(
        unchecked.missing.iter().any(|m| m.contains("extraction_check = true") && m.contains("--extraction-checker")),
        "{:?}",
        unchecked.missing
    );
}
