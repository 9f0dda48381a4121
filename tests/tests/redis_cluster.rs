//! The ledger on a real Redis Cluster (`redis+cluster://`): a cohort run by
//! a coordinator and worker processes on 3 masters with a replica each,
//! while the master that holds the cohort's slot is killed and its replica
//! takes over.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{
    COHORT_NAME, Cluster, ClusterCohort, LedgerProbe, Product, check_ledger_of, read_calls, write_and_freeze_cohort,
};
use cohort_tests::RedisCluster;

/// A safety bound only: the cohort takes about 15-30 s.
const DEADLINE: Duration = Duration::from_secs(240);
/// The master is killed when this share of the plan is final (by
/// progress, not time, so it always lands mid-cohort).
const KILL_AT_PERCENT: u64 = 35;

/// Proves that a cohort survives a Redis Cluster failover of its slot:
/// 300 runs answered by a product that logs every call, a coordinator and
/// two workers on a 3-master/3-replica cluster (`cluster-node-timeout`
/// 1 s). When a third of the plan is final, the master that serves the
/// cohort's slot is SIGKILLed; its replica is promoted (replication is
/// asynchronous, so it may lack the last acknowledged writes). The
/// ledger's guard sees a new server run id on the slot's master at its
/// first call and recovers (a new epoch), workers take back their leases
/// and replay their journals (on a cluster every report is journalled),
/// and at the end every planned run has exactly one final outcome, none
/// is lost or duplicated, every result has its run record, and the
/// product was called exactly once per run.
#[test]
fn a_cohort_survives_the_failover_of_its_slots_master() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    let cohort = ClusterCohort {
        questions: 150,
        product: Product::Counting { latency_ms: 300 },
        concurrency: 12,
        max_attempts: 3,
    };
    write_and_freeze_cohort(&dir, &cohort);
    let planned = cohort.planned();
    let mut redis = RedisCluster::start(3, 1).unwrap();
    let meta = format!("cohort:{{{COHORT_NAME}}}:meta");
    let logs = tmp.path().join("logs");
    let mut cluster = Cluster::new(&dir, &logs, &redis.url(), 12).with_leases(2_000, 300);
    cluster.start_coordinator();
    cluster.start_worker();
    cluster.start_worker();
    let probe = LedgerProbe::connect(&redis.url());

    let started = Instant::now();
    let deadline = started + DEADLINE;
    let mut failover = None;
    while !cluster.workers_finished() {
        assert!(
            Instant::now() < deadline,
            "the cohort did not finish within {DEADLINE:?} (failover: {failover:?}); the ledger says:\n{}",
            cluster.status_text()
        );
        let percent = probe.finished().map_or(0, |f| f * 100 / planned);
        if failover.is_none() && percent >= KILL_AT_PERCENT {
            let at = started.elapsed();
            let (killed, promoted) = redis.kill_master_of(&meta).unwrap();
            println!(
                "redis cluster: master :{killed} of the cohort's slot killed at {percent} % ({:.1} s); replica \
                 :{promoted} serves it {:.1} s later",
                at.as_secs_f64(),
                (started.elapsed() - at).as_secs_f64()
            );
            failover = Some((killed, promoted, percent));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let failed = cluster.wait_for_workers(deadline, "redis cluster");
    assert!(failed.is_empty(), "every worker exits cleanly: {failed:?}");
    assert!(failover.is_some(), "the cohort finished before the master was killed");

    // The checks read the slot's master directly: the whole cohort is there.
    let master = redis.master_url_of(&meta).unwrap();
    let calls = read_calls(&dir);
    let mut f = check_ledger_of(&master, &dir, &cohort);
    f.add_calls(&calls);
    let called_twice = calls.per_run.values().filter(|&&n| n > 1).count();
    println!(
        "redis cluster: runs {}, master kills 1, lost {}, duplicated {}, attempts {}, product calls {}, runs called \
         twice {called_twice}, discarded {}, in {:.1} s",
        f.planned,
        f.lost,
        f.duplicated,
        f.attempts,
        calls.total,
        f.discarded,
        started.elapsed().as_secs_f64()
    );
    f.assert_clean();
    assert_eq!((f.planned, f.lost, f.duplicated), (planned, 0, 0));
    assert!(calls.unreadable.is_empty(), "{:?}", calls.unreadable);
    assert_eq!((calls.per_run.len() as u64, calls.total), (planned, planned), "one product call per planned run");
}
