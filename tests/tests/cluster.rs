//! A whole cluster as separate processes: a private Redis, one
//! `cohort coordinator` and four `cohort worker`s carrying out a 500-run
//! simulated cohort with injected refusals, failures, timeouts and outages.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{Cluster, DEFAULT_FAULTS, PLANNED, SimCohort, check_ledger, write_and_freeze};
use cohort_core::taxonomy::Outcome;
use cohort_tests::RedisServer;

/// A safety bound only: the cohort normally takes a few seconds.
const DEADLINE: Duration = Duration::from_secs(180);

/// Proves that a coordinator and 4 worker processes sharing one Redis
/// ledger bring all 500 planned runs to exactly one final outcome each,
/// with injected refusals, failures, timeouts and outages: the counts by
/// outcome add up to the plan (overall and per arm), every attempt is
/// recorded (per run and in the counts by class, numbered without gaps,
/// the last one matching the outcome), every obtained result has its run
/// record in the artifact store, and no run has two final events.
#[test]
fn four_workers_finish_a_500_run_cohort_with_faults_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_and_freeze(&dir, &SimCohort { latency_ms: 35, ..DEFAULT_FAULTS });
    let redis = RedisServer::start().unwrap();
    let mut cluster = Cluster::new(&dir, &tmp.path().join("logs"), &redis.url(), 8);

    let started = Instant::now();
    cluster.start_coordinator();
    for _ in 0..4 {
        cluster.start_worker();
    }
    let failed_workers = cluster.wait_for_workers(started + DEADLINE, "cluster");
    let elapsed = started.elapsed();
    assert!(failed_workers.is_empty(), "workers failed: {failed_workers:?}");

    let f = check_ledger(&redis.url(), &dir);
    println!(
        "cluster: runs {}, completed {}, refused {}, failed {}, timed_out {}, unavailable {}, attempts {}, \
         retried runs {}, discarded {}, lost {}, duplicated {}, in {:.1} s",
        f.planned,
        f.outcome(Outcome::Completed),
        f.outcome(Outcome::Refused),
        f.outcome(Outcome::Failed),
        f.outcome(Outcome::TimedOut),
        f.outcome(Outcome::Unavailable),
        f.attempts,
        f.retried_runs,
        f.discarded,
        f.lost,
        f.duplicated,
        elapsed.as_secs_f64()
    );
    f.assert_clean();
    assert_eq!((f.planned, f.lost, f.duplicated), (PLANNED, 0, 0));
    assert_eq!(f.outcome(Outcome::NotRun), 0, "nothing closes the window or aborts this cohort");
}
