//! `cohort run`, `status` and `resume` as real processes on the embedded
//! store: a whole cohort runs offline, a version change pauses its arm and
//! says why, and resuming finishes the cohort with every label on record.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cohort_core::taxonomy::Outcome;
use cohort_ledger::Ledger;
use cohort_ledger::sqlite::SqliteLedger;

mod support;
use support::{COHORT, cohort, text};

fn write_cohort(dir: &Path, arms: &str) {
    support::write_cohort(dir, "run-test", 3, arms);
}

async fn ledger(dir: &Path) -> SqliteLedger {
    SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap()
}

/// Proves `cohort run` freezes and runs a whole sim cohort offline with
/// the embedded store: every planned run ends with one outcome, the table
/// shows the denominators, and each answered run has its record stored.
#[tokio::test]
async fn run_finishes_every_planned_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    write_cohort(
        &dir,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 4\nsettings = { refusal_rate = 0.2, outage_rate = 0.3 }\n\n[[arms]]\nid = \"b\"\nlabel = \"B\"\nadapter = \"sim\"\npinned_version = \"b-1\"\nvendor_lineage = \"y\"\nconcurrency = 2\nsettings = { failure_rate = 0.3 }\n",
    );
    let out = cohort(&["run", dir.to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("SIMULATED"), "{t}");
    assert!(t.contains("planned 24, attempted 24"), "{t}");
    // stderr is a pipe here: plain progress lines, the last one final, and
    // no terminal codes.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}'), "{err}");
    let last_a = err.lines().rfind(|l| l.starts_with("progress a: "));
    assert!(last_a.is_some_and(|l| l.starts_with("progress a: 12/12 final")), "{err}");
    assert!(err.lines().any(|l| l.starts_with("progress b: 12/12 final")), "{err}");
    let status = ledger(&dir).await.status().await.unwrap();
    assert!(status.done());
    assert_eq!(status.by_outcome.values().sum::<u64>(), 24);
    assert!(status.by_outcome.get(&Outcome::Refused).copied().unwrap_or(0) > 0, "{status:?}");
    assert!(status.by_outcome.get(&Outcome::Failed).copied().unwrap_or(0) > 0, "{status:?}");
    for run in ledger(&dir).await.runs().await.unwrap() {
        assert!(run.outcome.is_some(), "{run:?}");
        if matches!(run.outcome, Some(Outcome::Completed | Outcome::Refused | Outcome::Failed)) {
            let path = dir.join(".cohort/artifacts/sha256").join(&run.record_sha256[..2]).join(&run.record_sha256);
            let record: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            assert_eq!(record["run_id"], run.run_id.as_str());
            assert_eq!(record["simulated"], true);
        }
    }
    // Running again finds nothing to do and changes nothing.
    let again = cohort(&["run", dir.to_str().unwrap()]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(ledger(&dir).await.status().await.unwrap(), status);
}

/// Proves a mid-cohort version change pauses the arm, `cohort status` says
/// why, `cohort resume` (logged) lets the cohort finish, and the run rows
/// show which runs saw which label.
#[tokio::test]
async fn version_change_pauses_and_resume_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("c");
    write_cohort(
        &dir,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 1\nsettings = { version_change_after_runs = 3, changed_version = \"a-2\" }\n",
    );
    let d = dir.to_str().unwrap();
    let first = cohort(&["run", d, "--workers", "1"]);
    // It stops with the arm paused and runs not final: exit 4, not success.
    assert_eq!(first.status.code(), Some(4), "{}", text(&first));
    let t = text(&first);
    assert!(t.contains("arm a is PAUSED: version changed: pinned a-1, observed a-2 on run"), "{t}");
    assert!(t.contains("every run left belongs to a paused arm"), "{t}");

    let status = cohort(&["status", d]);
    let s = text(&status);
    assert!(s.contains("PAUSED: version changed: pinned a-1, observed a-2"), "{s}");
    assert!(s.contains("arm_paused"), "the audit log shows the pause: {s}");

    let resume =
        cohort(&["resume", d, "--arm", "a", "--ack", "vendor release notes checked", "--accept-version", "a-2"]);
    assert!(resume.status.success(), "{}", text(&resume));
    let second = cohort(&["run", d, "--workers", "1"]);
    assert!(second.status.success(), "{}", text(&second));

    let l = ledger(&dir).await;
    let status = l.status().await.unwrap();
    assert!(status.done(), "{status:?}");
    assert_eq!(status.by_outcome.get(&Outcome::Completed), Some(&12));
    let runs = l.runs().await.unwrap();
    let labels: Vec<&str> = runs.iter().filter_map(|r| r.observed_version.as_deref()).collect();
    assert_eq!(labels.len(), 12);
    assert!(labels.contains(&"a-1") && labels.contains(&"a-2"), "{labels:?}");
    let events = l.events(1000).await.unwrap();
    let paused = events.iter().find(|e| e.kind == "arm_paused").expect("pause logged");
    let pausing_run = paused.detail.rsplit("on run ").next().unwrap();
    let row = runs.iter().find(|r| r.run_id == pausing_run).expect("the pausing run is named");
    assert_eq!(row.observed_version.as_deref(), Some("a-2"));
    assert!(events.iter().any(|e| e.kind == "arm_resumed" && e.detail.contains("vendor release notes checked")));
}

/// Proves Ctrl-C on `cohort run` with runs in flight drains while the
/// in-process coordinator is still up: the interrupted run exits 4, no
/// attempt is charged as worker_lost, no lease is left behind, and the
/// rerun finishes the cohort with every run executed exactly once.
#[tokio::test]
async fn interrupted_run_drains_and_the_rerun_executes_nothing_twice() {
    use cohort_core::taxonomy::AttemptClass;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    write_cohort(
        &dir,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 3\nsettings = { latency_ms = 1200 }\n",
    );
    let d = dir.to_str().unwrap();
    let child = Command::new(COHORT)
        .args(["run", d, "--workers", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) until runs are in flight, then interrupt.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        assert!(std::time::Instant::now() < deadline, "no run was leased in time");
        if dir.join(".cohort/ledger.sqlite").exists()
            && let Ok(status) = ledger(&dir).await.status().await
            && status.leased > 0
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(4), "{t}");
    assert!(t.contains("interrupted"), "{t}");
    let status = ledger(&dir).await.status().await.unwrap();
    assert_eq!(status.leased, 0, "a lease was left behind: {status:?}\n{t}");
    assert!(!status.attempts_by_class.contains_key(&AttemptClass::WorkerLost), "{status:?}");
    assert!(!status.done(), "the interrupt came too late to test anything: {status:?}");

    let again = cohort(&["run", d, "--workers", "1"]);
    assert!(again.status.success(), "{}", text(&again));
    let l = ledger(&dir).await;
    assert!(l.status().await.unwrap().done());
    for run in l.runs().await.unwrap() {
        assert_eq!(run.attempts, 1, "{run:?} was executed more than once");
        assert_eq!(run.outcome, Some(Outcome::Completed), "{run:?}");
    }
}
