//! Redis loses its last second of writes mid-cohort, as `appendfsync
//! everysec` allows on a power loss or a kernel crash: every result and
//! every attempt the coordinator acknowledged is still there at the end, at
//! the number its run record gives it, and no product was called again for
//! a run (ARCHITECTURE.md, "Durable acknowledgements").

// Test code: a failed unwrap is a failed test (the helpers below are not
// `#[test]` functions, which clippy's allow-unwrap-in-tests covers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_support;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use cluster_support::{
    Cluster, ClusterCohort, LedgerProbe, Product, check_ledger_of, read_calls, write_and_freeze_cohort,
};
use cohort_ledger::Ledger as _;
use cohort_ledger::redis::RedisLedger;
use cohort_tests::RedisServer;

/// A safety bound only: the cohort takes about 20-30 s.
const DEADLINE: Duration = Duration::from_secs(240);
/// The cut lands when this share of the plan is final (by progress, not
/// time, so it is always mid-cohort however fast the machine is).
const CUT_AT_PERCENT: u64 = 35;
/// Rollbacks in the run: the second one lands after the first recovery.
const CUTS: usize = 2;
const SECOND_CUT_AT_PERCENT: u64 = 65;
/// Each cut takes up to 2 s of writes: it lands at least this long after
/// the seeding (a cut that takes the seed too leaves no ledger to recover)
/// and after the previous cut (its recovery is then in service).
const CUT_GAP: Duration = Duration::from_secs(4);

/// Proves durable acknowledgements end to end, across real processes:
/// 500 runs answered by a product that logs every call (the real `command`
/// adapter running a script) and answers nothing to the first call of every
/// fourth question (124 runs: an `empty_content` outage, reported as an
/// attempt and retried), a coordinator and two workers on a Redis with
/// `appendfsync everysec`. Twice mid-cohort Redis is SIGKILLed, its AOF cut
/// back by the writes of at least its last second (`redis-check-aof
/// --truncate-to-timestamp`), and restarted: results and attempts the
/// workers had been told were accepted, and leases they held, are gone
/// from the ledger. The ledger detects each restart at its first call
/// (`ledger_restarted` in the audit log, with the acknowledgements it
/// lost), the workers take back their leases and replay their journals, and
/// at the end every planned run has exactly one final outcome, every
/// result has its run record, every run's attempts in the ledger are the
/// record's (number, class, worker), the counts by class hold exactly one
/// `empty_content` per outage run, and the product was called once per
/// attempt the record lists: nothing lost, nothing renumbered, nothing
/// executed again.
#[test]
fn acknowledged_results_survive_redis_losing_its_last_second() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    let cohort = ClusterCohort {
        questions: 250,
        product: Product::CountingWithOutages { latency_ms: 400, empty_first_every: 4 },
        concurrency: 12,
        max_attempts: 3,
    };
    let outage_runs = cohort.outage_runs();
    write_and_freeze_cohort(&dir, &cohort);
    let planned = cohort.planned();
    let mut redis = RedisServer::start_everysec().unwrap();
    let logs = tmp.path().join("logs");
    let mut cluster = Cluster::new(&dir, &logs, &redis.url(), 12).with_leases(2_000, 300);
    cluster.start_coordinator();
    cluster.start_worker();
    cluster.start_worker();
    let probe = LedgerProbe::connect(&redis.url());

    let started = Instant::now();
    let deadline = started + DEADLINE;
    let mut cuts = Vec::new();
    let mut last_cut = started;
    while !cluster.workers_finished() {
        assert!(
            Instant::now() < deadline,
            "the cohort did not finish within {DEADLINE:?} ({} cuts); the ledger says:\n{}",
            cuts.len(),
            cluster.status_text()
        );
        let percent = probe.finished().map_or(0, |f| f * 100 / planned);
        let due = [CUT_AT_PERCENT, SECOND_CUT_AT_PERCENT].get(cuts.len()).is_some_and(|&at| percent >= at)
            && last_cut.elapsed() >= CUT_GAP;
        // A second cut only once the first recovery's grace is over and
        // work goes on: each rollback then meets a ledger in normal service.
        if due && cuts.len() < CUTS {
            let cut = redis.kill_cut_restart(1).unwrap();
            println!(
                "rollback: redis killed at {percent} % ({:.1} s), AOF cut to second {} ({} of {} commands kept, {} bytes \
                 cut), restarted",
                started.elapsed().as_secs_f64(),
                cut.to_unix_secs,
                cut.commands_after,
                cut.commands_before,
                cut.bytes_cut
            );
            cuts.push(cut);
            last_cut = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed();
    let failed = cluster.wait_for_workers(deadline, "rollback");
    assert!(failed.is_empty(), "every worker exits cleanly: {failed:?}");
    assert_eq!(cuts.len(), CUTS, "the cohort finished before every cut");

    let figures = check_ledger_of(&redis.url(), &dir, &cohort);
    let calls = read_calls(&dir);
    let events = ledger_events(&redis.url());
    let restarts: Vec<&String> = events.iter().filter(|(k, _)| k == "ledger_restarted").map(|(_, d)| d).collect();
    let lost_acks: u64 = restarts.iter().map(|d| number_after(d, "acknowledged reports lost: ")).sum();
    let reclaimed = events.iter().filter(|(k, _)| k == "reclaimed").count();
    let replayed = replayed_reports(&logs);
    // A run is called once per attempt: twice for an outage run.
    let expected_calls = |run: &str| if outage_runs.iter().any(|r| r == run) { 2 } else { 1 };
    let called_again: Vec<(&String, &u64)> =
        calls.per_run.iter().filter(|(run, n)| **n > expected_calls(run)).collect();
    let restored = events.iter().filter(|(k, _)| k == "restored").count();
    let outages = figures.class(cohort_core::taxonomy::AttemptClass::EmptyContent);
    println!(
        "rollback: runs {}, rollbacks {}, acknowledged reports lost by redis {lost_acks}, reports replayed from \
         journals {replayed}, leases taken back {reclaimed}, attempts put back at their number {restored}, lost {}, \
         duplicated {}, product calls {}, runs called more than once per attempt {}, empty_content attempts \
         {outages} of {} outage runs, worker_lost attempts {}, discarded reports {}; in {:.1} s",
        figures.planned,
        restarts.len(),
        figures.lost,
        figures.duplicated,
        calls.total,
        called_again.len(),
        outage_runs.len(),
        figures.class(cohort_core::taxonomy::AttemptClass::WorkerLost),
        figures.discarded,
        elapsed.as_secs_f64()
    );
    for d in &restarts {
        println!("rollback: audit: ledger_restarted: {d}");
    }
    figures.assert_clean();
    assert_eq!((figures.planned, figures.lost, figures.duplicated), (planned, 0, 0));
    assert!(calls.unreadable.is_empty(), "{:?}", calls.unreadable);
    assert!(called_again.is_empty(), "runs executed again: {called_again:?}");
    let planned_calls = planned + outage_runs.len() as u64;
    assert_eq!((calls.per_run.len() as u64, calls.total), (planned, planned_calls), "one product call per attempt");
    // The failure taxonomy counts every outage once: none lost in a cut,
    // none turned into the reclaim's worker_lost, none counted twice.
    // (`assert_clean` has checked each run's attempts against its record.)
    assert_eq!(outages, outage_runs.len() as u64, "empty_content attempts: {:?}", figures.attempts_by_class);
    assert_eq!(restarts.len(), CUTS, "each rollback is in the audit log: {events:?}");
    // Otherwise the test proves less than it says: the cuts must have taken
    // acknowledged reports with them, and the journals must have put them back.
    assert!(lost_acks > 0, "no cut lost an acknowledged report: {restarts:?}");
    assert!(replayed as u64 >= lost_acks, "replayed {replayed} reports for {lost_acks} lost");
}

/// Every audit event's kind and detail.
fn ledger_events(redis_url: &str) -> Vec<(String, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let ledger = RedisLedger::connect(redis_url, cluster_support::COHORT_NAME).await.unwrap();
        ledger.events(200_000).await.unwrap().into_iter().map(|e| (e.kind, e.detail)).collect()
    })
}

/// The number after `prefix` in `text`, or 0.
fn number_after(text: &str, prefix: &str) -> u64 {
    text.split_once(prefix)
        .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The reports the workers say they replayed to the recovered ledger, from
/// their logs (`journal replayed to the recovered ledger reports=N`). The
/// logs are files, so they carry no ANSI colour codes.
fn replayed_reports(logs: &Path) -> usize {
    let mut n = 0;
    for entry in fs::read_dir(logs).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains('\u{1b}'), "{} holds ANSI escape codes although it is a file", path.display());
        for line in text.lines().filter(|l| l.contains("journal replayed to the recovered ledger")) {
            n += number_after(line, "reports=") as usize;
        }
    }
    n
}
