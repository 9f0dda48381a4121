//! `cohort run` on a copy of examples/quickstart judges its claims through
//! the judge proxy's built-in SIMULATED judge, in the same process, and
//! every record says so; a real `[judge]` without `--judge` warns that
//! support stays unmeasured.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cohort_core::taxonomy::Outcome;
use cohort_ledger::Ledger;
use cohort_ledger::sqlite::SqliteLedger;
use serde_json::Value;

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

/// The sentence the sim system writes for a claim its snippets do not
/// support (worker/src/adapters/sim.rs).
const PLANTED_UNSUPPORTED: &str = "although its source does not say so";

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The stored records of the runs that completed, with their arm.
async fn completed_records(dir: &Path) -> Vec<(String, Value)> {
    let ledger = SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap();
    let mut out = Vec::new();
    for run in ledger.runs().await.unwrap() {
        if run.outcome != Some(Outcome::Completed) {
            continue;
        }
        let path: PathBuf = dir.join(".cohort/artifacts/sha256").join(&run.record_sha256[..2]).join(&run.record_sha256);
        let record: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        out.push((record["arm"].as_str().unwrap().to_owned(), record));
    }
    out
}

/// Proves `cohort run examples/quickstart` (a copy) judges claims through
/// the in-process SIMULATED judge proxy: it says so; every completed run's
/// record has a judge summary with `simulated: true` and the served model;
/// every cited claim is judged, YES exactly when it is not one of the sim
/// system's planted unsupported claims; each judged claim has a trace
/// record with `"simulated": true`, the served model and the claim's own
/// cited indices; and support per arm comes out near 1 -
/// `unsupported_claim_rate` (0.1 careful, 0.4 hasty), not 0 or 1.
#[tokio::test]
async fn quickstart_is_judged_by_the_simulated_judge() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    let out = Command::new(COHORT).args(["run", dir.to_str().unwrap()]).output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("judge \"cohort-sim-judge-1\" is SIMULATED"), "{t}");
    assert!(t.contains("running in this process"), "{t}");
    assert!(!t.contains("support will be unmeasured"), "{t}");

    let records = completed_records(&dir).await;
    assert!(records.len() >= 10, "most of the 20 runs complete: {}", records.len());
    // (yes, judged) per arm.
    let mut support: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (arm, record) in &records {
        let scoring = &record["scoring"];
        let judge = &scoring["judge"];
        assert_eq!(judge["simulated"], true, "{judge}");
        assert_eq!(judge["served_models"], serde_json::json!(["cohort-sim-judge-1"]), "{judge}");
        assert_eq!(judge["requested_model"], "cohort-sim-judge-1");
        assert!(judge["error"].is_null(), "{judge}");
        let claims = scoring["report"]["claims"].as_array().unwrap();
        let traces = scoring["judge_traces"].as_array().unwrap();
        let mut judged = Vec::new();
        for claim in claims {
            if claim["cited"].as_array().unwrap().is_empty() {
                continue;
            }
            let claim_text = claim["text"].as_str().unwrap();
            let expected = if claim_text.contains(PLANTED_UNSUPPORTED) { "no" } else { "yes" };
            assert_eq!(claim["verdict"], expected, "{claim}");
            judged.push(claim);
            let entry = support.entry(arm.clone()).or_default();
            entry.1 += 1;
            if expected == "yes" {
                entry.0 += 1;
            }
        }
        assert_eq!(traces.len(), judged.len(), "one trace per judged claim");
        for (trace, claim) in traces.iter().zip(&judged) {
            assert_eq!(trace["simulated"], true, "{trace}");
            assert_eq!(trace["judge_model"], "cohort-sim-judge-1", "{trace}");
            assert_eq!(trace["cited_indices"], claim["cited"], "{trace} {claim}");
            let verdict = if claim["verdict"] == "yes" { "SUPPORTED" } else { "UNSUPPORTED" };
            assert_eq!(trace["judge_verdict"], verdict, "{trace}");
        }
        let s = &scoring["report"]["support"];
        assert_eq!(s["unjudged"], 0, "{s}");
        assert_eq!(s["judged"].as_u64().unwrap() as usize, judged.len(), "{s}");
    }
    let rate = |arm: &str| {
        let (yes, judged) = support[arm];
        f64::from(yes) / f64::from(judged)
    };
    let (careful, hasty) = (rate("sim-careful"), rate("sim-hasty"));
    eprintln!("support: sim-careful {careful:.3}, sim-hasty {hasty:.3} over {support:?}");
    assert!((0.75..1.0).contains(&careful), "careful {careful} (expected near 0.9)");
    assert!((0.4..0.8).contains(&hasty), "hasty {hasty} (expected near 0.6)");
}

/// Proves a real `[judge]` without `--judge` or `--judge-proxy-config` is
/// not called and the run warns that support will be unmeasured; records
/// have no judge summary.
#[tokio::test]
async fn a_real_judge_without_a_proxy_warns_support_is_unmeasured() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    let toml = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let toml = toml.replace("provider = \"sim\"", "provider = \"openai\"");
    assert!(toml.contains("provider = \"openai\""));
    fs::write(dir.join("cohort.toml"), toml).unwrap();
    let out = Command::new(COHORT).args(["run", dir.to_str().unwrap()]).output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("warning:") && t.contains("support will be unmeasured"), "{t}");
    assert!(!t.contains("is SIMULATED (the judge proxy"), "{t}");
    let records = completed_records(&dir).await;
    assert!(!records.is_empty());
    for (_, record) in &records {
        assert!(record["scoring"]["judge"].is_null(), "{}", record["scoring"]["judge"]);
        assert_eq!(record["scoring"]["report"]["support"]["rendered"], "n/a (unmeasured)");
    }
}

/// Proves `cohort run --judge` with the judge proxy down says so before
/// the first run, collects anyway (collection never waits on the judge),
/// records the judgeable claims unjudged(provider_error), and exits 3 with
/// the counts and how `cohort judge` fills them in, instead of exiting 0
/// with every claim silently unjudged. The team key is never printed.
#[tokio::test]
async fn run_with_an_unreachable_judge_collects_and_exits_3() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let judge = tmp.path().join("judge.toml");
    fs::write(
        &judge,
        format!("url = \"http://127.0.0.1:{port}\"\njudge = \"j\"\nkey_env = \"COHORT_TEST_DEAD_KEY\"\n"),
    )
    .unwrap();
    let out = Command::new(COHORT)
        .args(["run", dir.to_str().unwrap(), "--judge", judge.to_str().unwrap(), "--no-capture"])
        .env("COHORT_TEST_DEAD_KEY", "a-team-key-that-must-not-be-printed")
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(t.contains("warning:") && t.contains("not reachable"), "{t}");
    assert!(t.contains("provider_error") && t.contains("cohort judge"), "{t}");
    assert!(!t.contains("a-team-key-that-must-not-be-printed"), "{t}");
    let status = SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap().status().await.unwrap();
    assert!(status.done(), "{status:?}");
    let records = completed_records(&dir).await;
    assert!(!records.is_empty());
    for (_, record) in &records {
        for claim in record["scoring"]["report"]["claims"].as_array().unwrap() {
            if !claim["cited"].as_array().unwrap().is_empty() {
                assert_eq!(claim["unjudged_reason"], "provider_error", "{claim}");
            }
        }
    }
}
