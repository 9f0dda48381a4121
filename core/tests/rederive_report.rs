//! `scripts/rederive_report.py` on the hand-made report in
//! `tests/rederive_report_fixture/` (3 questions x 2 arms, with a not_run
//! run, a failed run, a run with zero claims, a run whose claims are all
//! unjudged, and measured, unmeasured and not-applicable rates; every count
//! and rate in its summary.json computed by hand).
//!
//! The fixture's intervals are checked here against `ClusterBootstrap`, and
//! the script re-derives them with its own pure-Python ChaCha20, so the two
//! implementations of `cohort-bootstrap-v1` must agree exactly. The script
//! must accept the fixture and reject copies with one number changed,
//! naming that number. python3 is required (`scripts/test.sh` installs it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cohort_core::stats::{ClusterBootstrap, Estimand};
use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn fixture() -> PathBuf {
    repo_root().join("tests/rederive_report_fixture")
}

fn rederive(dir: &Path, intervals: bool) -> (Output, String) {
    let mut command = Command::new("python3");
    command.arg(repo_root().join("scripts/rederive_report.py")).arg(dir);
    if intervals {
        command.arg("--intervals");
    }
    let output = command.output().unwrap_or_else(|e| {
        panic!("could not run python3 ({e}): install it ('apt-get install python3'; scripts/test.sh does)")
    });
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output, text)
}

/// A copy of the fixture in a fresh temporary folder, with `edit` applied
/// to the named file's text.
fn altered(name: &str, file: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cohort-rederive-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let edited = edit(text.clone());
    assert_ne!(text, edited, "the edit changed nothing");
    std::fs::write(dir.join(file), edited).unwrap();
    dir
}

fn expect_rejected(dir: &Path, intervals: bool, named: &str) {
    let (output, text) = rederive(dir, intervals);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains(named), "expected {named:?} in:\n{text}");
}

/// The fixture's intervals are what `ClusterBootstrap` gives for the
/// per-question counts of its runs and claims (clusters in summary.json's
/// question order: science-1, history-1, disputed-1).
#[test]
fn the_fixture_intervals_are_the_rust_bootstrap() {
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("summary.json")).unwrap()).unwrap();
    let v = |x: [f64; 3]| x.to_vec();
    let expected = [
        ("alpha", "completion", Estimand::ratio(v([1.0, 0.0, 1.0]), v([1.0, 1.0, 1.0]))),
        ("alpha", "support_micro", Estimand::ratio(v([2.0, 0.0, 0.0]), v([3.0, 0.0, 2.0]))),
        ("alpha", "support_macro", Estimand::macro_rate(&[2.0, 0.0, 0.0], &[3.0, 0.0, 2.0])),
        ("alpha", "resolution_micro", Estimand::ratio(v([4.0, 0.0, 0.0]), v([5.0, 0.0, 3.0]))),
        ("alpha", "resolution_macro", Estimand::macro_rate(&[4.0, 0.0, 0.0], &[5.0, 0.0, 3.0])),
        ("beta", "completion", Estimand::ratio(v([1.0, 1.0, 0.0]), v([1.0, 1.0, 1.0]))),
    ];
    let estimands: Vec<Estimand> = expected.iter().map(|(_, _, e)| e.clone()).collect();
    let intervals = ClusterBootstrap::new(3).try_intervals(&estimands).unwrap();
    for ((arm, rate, estimand), interval) in expected.iter().zip(&intervals) {
        let arm = summary["arms"].as_array().unwrap().iter().find(|a| a["id"] == *arm).unwrap();
        let reported = &arm["rates"][*rate];
        assert_eq!(reported["value"].as_f64(), estimand.point(), "{rate}");
        assert_eq!(reported["ci_low"].as_f64(), interval.ci_low, "{rate}");
        assert_eq!(reported["ci_high"].as_f64(), interval.ci_high, "{rate}");
    }
}

/// The script accepts the hand-made report, with and without intervals.
#[test]
fn the_script_agrees_with_the_hand_made_report() {
    for intervals in [false, true] {
        let (output, text) = rederive(&fixture(), intervals);
        assert!(output.status.success(), "{text}");
        assert!(text.contains("numbers, all agree"), "{text}");
    }
}

/// One rate changed in summary.json: the script fails naming it, with the
/// report's value and its own.
#[test]
fn a_changed_rate_is_named() {
    let dir = altered("rate", "summary.json", |s| {
        s.replacen(r#""value": 0.4, "numerator": 2"#, r#""value": 0.45, "numerator": 2"#, 1)
    });
    expect_rejected(&dir, false, "arms[alpha].rates.support_micro.value: report 0.45 vs rederived 0.4");
}

/// One count changed (a not_run hidden as failed in the summary).
#[test]
fn a_changed_count_is_named() {
    let dir = altered("count", "summary.json", |s| s.replacen(r#""attempted": 2"#, r#""attempted": 3"#, 1));
    expect_rejected(&dir, false, "arms[alpha].counts.attempted: report 3 vs rederived 2");
}

/// A status changed: unmeasured reported as not applicable.
#[test]
fn a_changed_status_is_named() {
    let dir = altered("status", "summary.json", |s| {
        s.replacen(r#""status": "unmeasured""#, r#""status": "not_applicable""#, 1)
    });
    expect_rejected(
        &dir,
        false,
        "arms[beta].rates.support_micro.status: report 'not_applicable' vs rederived 'unmeasured'",
    );
}

/// An interval end changed: caught only with --intervals, named there.
#[test]
fn a_changed_interval_is_named_with_intervals() {
    let edit = |s: String| s.replacen(r#""ci_high": 0.8000000000000002"#, r#""ci_high": 0.81"#, 1);
    let dir = altered("interval-plain", "summary.json", edit);
    let (output, text) = rederive(&dir, false);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(output.status.success(), "without --intervals the ends are not compared:\n{text}");
    let dir = altered("interval", "summary.json", edit);
    expect_rejected(
        &dir,
        true,
        "arms[alpha].rates.resolution_macro.ci_high: report 0.81 vs rederived 0.8000000000000002",
    );
}

/// runs.csv's judged column disagreeing with claims.jsonl is named by run.
#[test]
fn runs_csv_disagreeing_with_claims_is_named_by_run() {
    let dir = altered("runs", "runs.csv", |s| {
        s.replacen("alpha-2026-09,alpha-2026-09,4,3,2,", "alpha-2026-09,alpha-2026-09,4,2,2,", 1)
    });
    expect_rejected(&dir, false, "run science-1:alpha:1: judged '2' but claims.jsonl has 3");
}
