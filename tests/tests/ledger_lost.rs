//! A ledger that lost its cohort is never silently seeded again (issue
//! 23): Redis emptied by FLUSHALL, and the embedded ledger file deleted,
//! after a cohort was collected. `cohort run` refuses (exit 2) with a
//! message naming the evidence (the cohort's seed marker) and the way on,
//! seeds nothing, calls no product again; `cohort status` says the same.

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
    assert!(t.contains(".cohort/ledger-seeded.json") && t.contains("Restore the ledger from its backup"), "{what}:\n{t}");
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
