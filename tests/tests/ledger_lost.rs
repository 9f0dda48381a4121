//! A ledger that lost its cohort is never silently seeded again (issue
//! 23): Redis emptied by FLUSHALL, and the embedded ledger file deleted,
//! after a cohort was collected. `cohort run` refuses (exit 2) with a
//! message naming the evidence (the cohort's seed marker, its run records)
//! and the way on (`cohort ledger rebuild`, or a backup), seeds nothing,
//! calls no product again; `cohort status` says the same. The embedded
//! ledger is then rebuilt, and the rerun calls no product again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::path::Path;
use std::process::{Command, Output};

use cohort_tests::{RedisServer, cargo_bin, workspace_root};

fn cohort(args: &[&str]) -> Output {
    Command::new(cargo_bin("cohort-cli", "cohort")).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn quickstart(dir: &Path) {
    let from = workspace_root().join("examples/quickstart");
    std::fs::create_dir_all(dir).unwrap();
    for f in ["cohort.toml", "questions.json", "suffix.txt", "protocol.md", "rubric.md"] {
        std::fs::copy(from.join(f), dir.join(f)).unwrap();
    }
}

/// The refusal both commands give, checked: exit 2, the evidence, the way on.
fn assert_lost(what: &str, out: &Output) {
    let t = text(out);
    assert_eq!(out.status.code(), Some(2), "{what}:\n{t}");
    assert!(t.contains("the ledger holds nothing of cohort \"quickstart\", but it was seeded at"), "{what}:\n{t}");
    assert!(t.contains(".cohort/ledger-seeded.json") && t.contains("run records of its manifest"), "{what}:\n{t}");
    assert!(
        t.contains("cohort ledger rebuild DIR") && t.contains("restore the ledger from its backup"),
        "{what}:\n{t}"
    );
}

/// Proves a Redis emptied after collection (FLUSHALL) is refused by `cohort
/// run` and `cohort status` and stays empty (nothing seeded, no window
/// reopened, no product called).
#[test]
fn an_emptied_redis_is_not_seeded_again() {
    let redis = RedisServer::start().unwrap();
    let url = redis.url();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    quickstart(&dir);
    let d = dir.to_str().unwrap();
    let first = cohort(&["run", d, "--redis", &url]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(dir.join(".cohort/ledger-seeded.json").is_file(), "the first seeding writes the marker");

    let flushed = Command::new("redis-cli").args(["-p", &redis.port().to_string(), "FLUSHALL"]).output().unwrap();
    assert!(flushed.status.success(), "{}", text(&flushed));
    assert_lost("run", &cohort(&["run", d, "--redis", &url]));
    assert_lost("status", &cohort(&["status", d, "--redis", &url]));
    let size = Command::new("redis-cli").args(["-p", &redis.port().to_string(), "DBSIZE"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), "0", "the refused run wrote to the ledger");
}

/// Proves the same for the embedded ledger file deleted after collection:
/// refused, and no ledger seeded in its place.
#[test]
fn a_deleted_embedded_ledger_is_not_seeded_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    quickstart(&dir);
    let d = dir.to_str().unwrap();
    let first = cohort(&["run", d]);
    assert!(first.status.success(), "{}", text(&first));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!(".cohort/ledger.sqlite{suffix}")));
    }
    assert_lost("run", &cohort(&["run", d]));
    assert_lost("status", &cohort(&["status", d]));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        use cohort_ledger::Ledger as _;
        let ledger = cohort_ledger::sqlite::SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap();
        assert!(matches!(ledger.status().await, Err(cohort_ledger::LedgerError::NotSeeded)), "a ledger was seeded");
    });
}

/// Proves `cohort ledger rebuild` brings a deleted embedded ledger back to
/// what the records prove: every run with a record final as before, with
/// its record and its attempts; a run that ended without one (the retry
/// policy's `unavailable`: no record, and the embedded ledger keeps no
/// journal) pending again; the window where it opened, not reopened at the
/// rebuild; a second rebuild refused (exit 2); `cohort run` afterwards runs
/// only what has no record.
#[test]
fn a_deleted_embedded_ledger_is_rebuilt_from_the_records() {
    use cohort_ledger::Ledger as _;
    type Row = (String, Option<cohort_core::taxonomy::Outcome>, String, u32);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    quickstart(&dir);
    let d = dir.to_str().unwrap();
    let first = cohort(&["run", d]);
    assert!(first.status.success(), "{}", text(&first));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let path = dir.join(".cohort/ledger.sqlite");
    let read = |path: &Path| {
        rt.block_on(async {
            let ledger = cohort_ledger::sqlite::SqliteLedger::open(path).unwrap();
            let runs: Vec<Row> = ledger
                .runs()
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.run_id, r.outcome, r.record_sha256, r.attempts))
                .collect();
            (runs, ledger.status().await.unwrap())
        })
    };
    let (before, status_before) = read(&path);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!(".cohort/ledger.sqlite{suffix}")));
    }
    let deleted_at = cohort_clock::now_ms();
    let rebuilt = cohort(&["ledger", "rebuild", d]);
    assert!(rebuilt.status.success(), "{}", text(&rebuilt));
    assert!(text(&rebuilt).contains("rebuilt from"), "{}", text(&rebuilt));
    let (after, status_after) = read(&path);
    let recorded = |rows: &[Row]| -> Vec<Row> { rows.iter().filter(|r| r.2.len() == 64).cloned().collect() };
    assert!(!recorded(&before).is_empty());
    assert_eq!(recorded(&after), recorded(&before), "every run with a record as the records prove it");
    for (run, outcome, _, _) in before.iter().filter(|r| r.2.is_empty()) {
        let now = after.iter().find(|r| &r.0 == run).unwrap();
        assert_eq!(now.1, None, "{run} ended {outcome:?} without a record: pending again");
    }
    let (start_before, start_after) = (status_before.window_start_ms.unwrap(), status_after.window_start_ms.unwrap());
    assert!(start_after >= start_before && start_after < deleted_at, "window {start_before} -> {start_after}");

    let again = cohort(&["ledger", "rebuild", d]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("a rebuild writes only an empty ledger"), "{}", text(&again));
    let rerun = cohort(&["run", d]);
    assert!(rerun.status.success(), "{}", text(&rerun));
    let (last, _) = read(&path);
    for row in recorded(&before) {
        assert!(last.contains(&row), "the rerun left {} as it was", row.0);
    }
}
