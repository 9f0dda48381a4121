//! Redis empties mid-cohort (FLUSHALL, then a restart on an empty data
//! folder) under a running coordinator and its workers (issue 23): nothing
//! is seeded again, the coordinator and `cohort status` say what happened,
//! a restarted coordinator refuses on the evidence (the run records and the
//! workers' journals, the seed marker deleted too), and `cohort ledger
//! rebuild` brings the ledger back to what the records prove, so the cohort
//! finishes with no product called again for a run that has a record
//! (docs/operations.md, "A lost ledger").

// Test code: a failed unwrap is a failed test (the helpers below are not
// `#[test]` functions, which clippy's allow-unwrap-in-tests covers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_support;

use std::fs;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cluster_support::{
    Cluster, ClusterCohort, LedgerProbe, Product, check_ledger_of, cohort_bin, read_calls, write_and_freeze_cohort,
};
use cohort_ledger::Ledger as _;
use cohort_tests::RedisServer;

/// A safety bound only: each phase takes seconds.
const DEADLINE: Duration = Duration::from_secs(240);
/// The flush lands when this share of the plan is final.
const FLUSH_AT_PERCENT: u64 = 40;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn redis_cli(redis: &RedisServer, args: &[&str]) -> String {
    let out = Command::new("redis-cli").arg("-p").arg(redis.port().to_string()).args(args).output().unwrap();
    assert!(out.status.success(), "redis-cli {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Every log line of the processes the cluster started, from its logs folder.
fn logs_text(logs: &std::path::Path) -> String {
    let mut all = String::new();
    for entry in fs::read_dir(logs).unwrap() {
        all.push_str(&fs::read_to_string(entry.unwrap().path()).unwrap_or_default());
    }
    all
}

/// Proves a lost ledger is never re-seeded and is rebuilt without running
/// anything twice: 400 runs answered by the call-counting product, a
/// coordinator and two workers on Redis. At 40 % final, FLUSHALL: the
/// running coordinator logs at ERROR that the ledger lost the cohort (and
/// not `reconcile failed`), leases nothing more, seeds nothing (the
/// database stays empty); `cohort status` refuses naming the evidence; the
/// workers stop. Redis is restarted (empty) and the seed marker deleted: a
/// restarted coordinator refuses on the run records and the journals, and
/// writes nothing. `cohort ledger rebuild` rebuilds the ledger with the
/// window where it opened; a new coordinator and workers finish the cohort;
/// then every run is final once, every record's attempts are the ledger's,
/// no run restored from its record was called again, and every other call is
/// one of the ledger's recorded attempts.
#[test]
fn a_flushed_redis_is_refused_and_rebuilt_without_running_anything_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    let d = dir.display().to_string();
    let cohort = ClusterCohort {
        questions: 200,
        product: Product::Counting { latency_ms: 300 },
        concurrency: 8,
        max_attempts: 3,
    };
    write_and_freeze_cohort(&dir, &cohort);
    let planned = cohort.planned();
    let mut redis = RedisServer::start_everysec().unwrap();
    let url = redis.url();
    let logs = tmp.path().join("logs");
    let mut cluster = Cluster::new(&dir, &logs, &url, 8);
    cluster.start_coordinator();
    cluster.start_worker();
    cluster.start_worker();
    let probe = LedgerProbe::connect(&url);
    let deadline = Instant::now() + DEADLINE;
    let mut finished_before = 0;
    while finished_before * 100 / planned < FLUSH_AT_PERCENT {
        assert!(Instant::now() < deadline, "the cohort did not reach {FLUSH_AT_PERCENT} %:\n{}", cluster.status_text());
        finished_before = probe.finished().unwrap_or(0);
        std::thread::sleep(Duration::from_millis(50));
    }
    let window_before = probe_window(&url);
    let flushed_at = cohort_clock::now_ms();
    assert_eq!(redis_cli(&redis, &["FLUSHALL"]), "OK");

    // The running coordinator stops leasing and says why; the workers stop.
    while !logs_text(&logs).contains("the ledger no longer holds the cohort it was serving") {
        assert!(Instant::now() < deadline, "the coordinator never said the ledger was lost:\n{}", logs_text(&logs));
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = cluster.wait_for_workers(deadline, "flushed");
    let status = Command::new(cohort_bin()).args(["status", &d, "--redis", &url]).output().unwrap();
    assert_eq!(status.status.code(), Some(2), "{}", text(&status));
    assert!(text(&status).contains("the ledger holds nothing of cohort"), "{}", text(&status));
    let log = logs_text(&logs);
    let said: Vec<&str> = log.lines().filter(|l| l.contains("the ledger no longer holds the cohort")).collect();
    assert!(said.iter().all(|l| l.contains("ERROR")), "the loss is logged at ERROR: {said:?}");
    assert_eq!(said.len(), 1, "said once: {said:?}");
    assert!(!log.contains("reconcile failed"), "the loss is not a reconcile failure every tick");
    assert_eq!(redis_cli(&redis, &["DBSIZE"]), "0", "nothing was seeded again under the running coordinator");
    cluster.kill_coordinator();

    // Restarted empty, the seed marker gone: refused on the records and journals.
    redis.restart().unwrap();
    fs::remove_file(dir.join(".cohort/ledger-seeded.json")).unwrap();
    let refused = Command::new(cohort_bin())
        .args(["coordinator", &d, "--redis", &url, "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let why = text(&refused);
    assert!(!refused.status.success(), "{why}");
    assert!(why.contains("the ledger holds nothing of cohort") && why.contains("run records of its manifest"), "{why}");
    assert!(why.contains("its seed marker") && why.contains("cohort ledger rebuild"), "{why}");
    assert_eq!(redis_cli(&redis, &["DBSIZE"]), "0", "the refused coordinator wrote nothing");

    let rebuilt = Command::new(cohort_bin()).args(["ledger", "rebuild", &d, "--redis", &url]).output().unwrap();
    assert!(rebuilt.status.success(), "{}", text(&rebuilt));
    println!("flushed: {}", text(&rebuilt).trim());
    let window_after = probe_window(&url);
    // What the rebuild restored final, and the product's calls by then:
    // none of those runs may be called again.
    let final_at_rebuild = final_runs(&url);
    let calls_at_rebuild = read_calls(&dir);
    println!(
        "flushed: {finished_before} of {planned} final at the flush, workers stopped: {stopped:?}, window \
         {window_before:?} -> {window_after:?} (flushed at {flushed_at})"
    );
    let (before, after) = (window_before.unwrap(), window_after.unwrap());
    assert!(after >= before && after < flushed_at, "the window is not opened again: {before} -> {after}");

    cluster.start_coordinator();
    cluster.start_worker();
    cluster.start_worker();
    let failed = cluster.wait_for_workers(deadline, "rebuilt");
    let failed_after: Vec<&String> = failed.iter().filter(|f| !stopped.contains(f)).collect();
    assert!(failed_after.is_empty(), "every worker after the rebuild exits cleanly: {failed_after:?}");
    let mut figures = check_ledger_of(&url, &dir, &cohort);
    let calls = read_calls(&dir);
    figures.add_calls(&calls);
    let called_again: Vec<&String> =
        final_at_rebuild.iter().filter(|run| calls.per_run.get(*run) != calls_at_rebuild.per_run.get(*run)).collect();
    println!(
        "flushed: runs {}, restored final {}, lost {}, duplicated {}, product calls {} ({} runs called more than \
         once, each explained by a recorded worker_lost: {}), runs with a record called again after the rebuild {}, \
         discarded reports {}",
        figures.planned,
        final_at_rebuild.len(),
        figures.lost,
        figures.duplicated,
        calls.total,
        figures.runs_called_more_than_once,
        figures.unexplained_reexecutions == 0,
        called_again.len(),
        figures.discarded
    );
    // A lease that expires on a loaded machine (a starved heartbeat) runs
    // its run again, recorded as worker_lost: `assert_clean` holds every
    // call to a recorded attempt. What the rebuild must never do is call a
    // product again for a run it restored from its record.
    figures.assert_clean();
    assert_eq!((figures.planned, figures.finished, figures.lost, figures.duplicated), (planned, planned, 0, 0));
    assert!(final_at_rebuild.len() as u64 > finished_before, "the runs final at the flush, and more, were restored");
    assert!(called_again.is_empty(), "runs with a record called again after the rebuild: {called_again:?}");
    assert_eq!(calls.per_run.len() as u64, planned, "every run called");

    // The report of the rebuilt cohort counts every run once.
    let out = tmp.path().join("report");
    let report = Command::new(cohort_bin())
        .args(["report", &d, "--redis", &url, "--draws", "100", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report));
    // `--out` is the reports' root: the report is its one folder.
    let folder = fs::read_dir(&out).unwrap().next().unwrap().unwrap().path();
    let csv = fs::read_to_string(folder.join("runs.csv")).unwrap();
    let column = csv.lines().next().unwrap().split(',').position(|c| c == "run_id").unwrap();
    // The columns before run_id (versions, the manifest hash) hold no comma.
    let ids: Vec<&str> = csv.lines().skip(1).filter_map(|l| l.split(',').nth(column)).collect();
    let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!((ids.len() as u64, unique.len() as u64), (planned, planned), "runs.csv lists every run once");
}

/// The runs final in the ledger now.
fn final_runs(url: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let ledger = cohort_ledger::redis::RedisLedger::connect(url, cluster_support::COHORT_NAME).await.unwrap();
        let runs = ledger.runs().await.unwrap();
        runs.into_iter().filter(|r| r.state == cohort_ledger::RunStateKind::Final).map(|r| r.run_id).collect()
    })
}

/// When the cohort's collection window opened, as the ledger says.
fn probe_window(url: &str) -> Option<i64> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let ledger = cohort_ledger::redis::RedisLedger::connect(url, cluster_support::COHORT_NAME).await.ok()?;
        ledger.status().await.ok()?.window_start_ms
    })
}
