//! `cohort run`, `cohort report` and `cohort verify` as real processes on a
//! copy of the offline quickstart: the run ends with a report (judged
//! through the SIMULATED judge in the same process), the report verifies,
//! `scripts/rederive_report.py` (stdlib only) agrees with it, and editing a
//! report file or a run record makes `verify` fail, naming what changed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh copy of examples/quickstart, run to the end; returns the report
/// folder `cohort run` printed.
fn run_quickstart(tmp: &Path) -> (PathBuf, PathBuf) {
    let dir = tmp.join("quickstart");
    support::copy_example("quickstart", &dir);
    let out = cohort(&["run", dir.to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let line = t.lines().find(|l| l.starts_with("report: ")).unwrap_or_else(|| panic!("no report path in:\n{t}"));
    let report = PathBuf::from(line.trim_start_matches("report: ").trim());
    assert!(report.starts_with(dir.join("reports")), "{report:?}");
    (dir, report)
}

fn writable(path: &Path) {
    let mut perms = fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(path, perms).unwrap();
}

/// Proves the README's first command ends with a report that shows judged
/// support with its interval, every denominator and the SIMULATED labels,
/// and that the report verifies and re-derives without cohort's code.
#[test]
fn quickstart_ends_with_a_report_that_verifies_and_rederives() {
    let tmp = tempfile::tempdir().unwrap();
    let (_dir, report) = run_quickstart(tmp.path());
    let summary: serde_json::Value = serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["simulated"]["judge"], true, "the sim judge is labelled");
    for arm in summary["arms"].as_array().unwrap() {
        assert_eq!(arm["simulated"], true);
        assert_eq!(arm["counts"]["planned"], 10);
        let support = &arm["rates"]["support_micro"];
        assert_eq!(support["status"], "measured", "{support}");
        assert!(support["denominator"].as_f64().unwrap() > 0.0);
        assert!(support["ci_low"].as_f64().unwrap() <= support["value"].as_f64().unwrap());
    }
    // One seed-000 trace record per judged claim, one JSON object a line,
    // naming the model that served.
    let traces = fs::read_to_string(report.join("judge_traces.jsonl")).unwrap();
    let judged: u64 = summary["arms"].as_array().unwrap().iter().map(|a| a["claims"]["judged"].as_u64().unwrap()).sum();
    let records: Vec<serde_json::Value> = traces.lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len() as u64, judged);
    assert!(records.iter().all(|t| t["judge_model"] == "cohort-sim-judge-1" && t["simulated"] == true));
    let md = fs::read_to_string(report.join("summary.md")).unwrap();
    for column in ["planned", "attempted", "completed", "refused", "failed", "timed_out", "unavailable", "not_run"] {
        assert!(md.contains(&format!(" {column} |")), "summary.md has no {column} column");
    }
    assert!(md.contains("SIMULATED"));

    let verified = cohort(&["verify", report.to_str().unwrap()]);
    assert!(verified.status.success(), "{}", text(&verified));
    assert!(text(&verified).starts_with("verified: "), "{}", text(&verified));

    for extra in [&[][..], &["--intervals"][..]] {
        let mut args = vec![repo().join("scripts/rederive_report.py").to_str().unwrap().to_owned()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args.push(report.to_str().unwrap().to_owned());
        let out =
            Command::new("python3").args(&args).output().expect("python3 is needed (scripts/test.sh installs it)");
        assert!(out.status.success(), "rederive_report.py {extra:?}: {}", text(&out));
        assert!(text(&out).contains("all agree"), "{}", text(&out));
    }
}

/// Proves verify fails, naming what changed, when a report file or a run
/// record is edited, and that a second report goes to a new folder.
#[test]
fn verify_names_an_edited_file_and_an_edited_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, report) = run_quickstart(tmp.path());

    let second = cohort(&["report", dir.to_str().unwrap(), "--draws", "500"]);
    assert!(second.status.success(), "{}", text(&second));
    let folders = fs::read_dir(dir.join("reports")).unwrap().count();
    assert_eq!(folders, 2, "a second report goes to a new folder");

    // An edited report file.
    let csv = report.join("runs.csv");
    let original = fs::read(&csv).unwrap();
    writable(&csv);
    let mut edited = original.clone();
    edited.extend_from_slice(b"q:x:1,extra row\n");
    fs::write(&csv, &edited).unwrap();
    let out = cohort(&["verify", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("file runs.csv"), "{}", text(&out));
    fs::write(&csv, &original).unwrap();
    let out = cohort(&["verify", report.to_str().unwrap()]);
    assert!(out.status.success(), "restored: {}", text(&out));

    // An edited run record: its bytes no longer match its hash.
    let summary: serde_json::Value = serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    assert!(summary["arms"][0]["counts"]["completed"].as_u64().unwrap() > 0);
    let rows = fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = rows.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|c| *c == "record_sha256").unwrap();
    let outcome_col = header.iter().position(|c| *c == "outcome").unwrap();
    let row = rows.lines().skip(1).find(|l| l.split(',').nth(outcome_col) == Some("completed")).unwrap();
    let sha = row.split(',').nth(col).unwrap().to_owned();
    let run_id = row.split(',').nth(3).unwrap().to_owned();
    let record = dir.join(".cohort/artifacts/sha256").join(&sha[..2]).join(&sha);
    let mut bytes = fs::read(&record).unwrap();
    writable(&record);
    // Still valid JSON, other bytes: only the hash can tell.
    bytes.push(b' ');
    fs::write(&record, bytes).unwrap();
    let out = cohort(&["verify", report.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains(&run_id) && text(&out).contains("no longer match"), "{}", text(&out));

    // Not a report at all: exit 2.
    let out = cohort(&["verify", dir.to_str().unwrap(), "--cohort", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
