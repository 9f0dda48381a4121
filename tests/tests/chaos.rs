//! Chaos, bounded and self-stopping: the cluster of `cluster.rs` while its
//! processes are killed with SIGKILL and restarted under it.

mod cluster_support;

use std::time::{Duration, Instant};

use cluster_support::{Cluster, LedgerProbe, PLANNED, Rng, SimCohort, check_ledger, write_and_freeze};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_tests::RedisServer;

/// A safety bound only: the cohort normally takes 20-40 s.
const DEADLINE: Duration = Duration::from_secs(180);
/// At most this many workers are killed.
const MAX_WORKER_KILLS: u32 = 8;
/// Progress (finished runs, in percent of the plan) at which the
/// coordinator is killed and restarted, and at which Redis is. Chaos is
/// triggered by progress, not by time, so that it always lands mid-run
/// however fast or slow the machine is.
const COORDINATOR_KILLS_AT_PERCENT: [u64; 2] = [15, 50];
const REDIS_RESTART_AT_PERCENT: u64 = 30;
/// Progress at which a worker is frozen (SIGSTOP) for longer than its
/// leases live, then resumed: its late reports must be discarded.
const WORKER_PAUSE_AT_PERCENT: u64 = 40;
const WORKER_PAUSE: Duration = Duration::from_secs(3);
/// Workers are not killed any more once this much is done.
const WORKER_KILLS_UNTIL_PERCENT: u64 = 95;

/// Proves that the cluster's invariants survive crashes of every process.
/// While 4 workers carry out the 500-run simulated cohort (with injected
/// refusals, failures, timeouts and outages): a random worker is SIGKILLed
/// and replaced every 2-3 s (at most 8 times); the coordinator is SIGKILLed
/// and restarted on the same port twice (it resumes from the ledger); Redis
/// is SIGKILLed and restarted once from its AOF; and one worker is frozen
/// (SIGSTOP) for twice its lease lifetime and then resumed, so that it
/// reports on leases it no longer holds. Every planned run still ends with
/// exactly one final outcome (none lost, none duplicated), the counts add up
/// to the plan, every attempt is recorded (a killed worker's leases expire
/// as `worker_lost` attempts and are retried under the policy), and every
/// obtained result has its run record. Late reports from lost leases are
/// kept as discarded reports, never counted.
#[test]
fn every_run_ends_exactly_once_while_workers_coordinator_and_redis_are_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_and_freeze(
        &dir,
        &SimCohort {
            // 250-750 ms per answer, 16 slots in all: the cohort lasts long
            // enough for every kill to land mid-run.
            latency_ms: 500,
            refusal_rate: 0.05,
            failure_rate: 0.05,
            timeout_rate: 0.02,
            outage_rate: 0.1,
            concurrency: 16,
            // Worker kills cost attempts: leave room so they rarely exhaust
            // the policy (an `unavailable` outcome would still be valid).
            max_attempts: 5,
        },
    );
    let mut redis = RedisServer::start_with(true).unwrap();
    let mut cluster = Cluster::new(&dir, &tmp.path().join("logs"), &redis.url(), 4);
    let mut rng = Rng::seeded();

    let started = Instant::now();
    let deadline = started + DEADLINE;
    cluster.start_coordinator();
    for _ in 0..4 {
        cluster.start_worker();
    }
    let probe = LedgerProbe::connect(&redis.url());
    let (mut worker_kills, mut coordinator_restarts, mut redis_restarts, mut worker_pauses) =
        (0u32, 0usize, 0u32, 0u32);
    let mut next_worker_kill = Instant::now() + Duration::from_millis(rng.range(2000, 3000));
    let mut percent = 0;
    while !cluster.workers_finished() {
        if Instant::now() > deadline {
            panic!(
                "chaos: the cohort did not finish within {DEADLINE:?} (worker kills {worker_kills}, coordinator \
                 restarts {coordinator_restarts}, redis restarts {redis_restarts}); the ledger says:\n{}",
                cluster.status_text()
            );
        }
        if let Some(finished) = probe.finished() {
            percent = finished * 100 / PLANNED;
        }
        if COORDINATOR_KILLS_AT_PERCENT.get(coordinator_restarts).is_some_and(|&at| percent >= at) {
            cluster.kill_coordinator();
            std::thread::sleep(Duration::from_millis(rng.range(500, 1000)));
            cluster.start_coordinator();
            coordinator_restarts += 1;
            println!(
                "chaos: coordinator killed and restarted at {percent} % ({:.1} s)",
                started.elapsed().as_secs_f64()
            );
        } else if redis_restarts == 0 && percent >= REDIS_RESTART_AT_PERCENT {
            redis.restart().unwrap();
            redis_restarts += 1;
            println!("chaos: redis killed and restarted at {percent} % ({:.1} s)", started.elapsed().as_secs_f64());
        } else if worker_pauses == 0 && percent >= WORKER_PAUSE_AT_PERCENT && cluster.running_workers() > 0 {
            let running = cluster.running_workers();
            let frozen = cluster.pause_worker(rng.range(0, running as u64) as usize, WORKER_PAUSE);
            worker_pauses += 1;
            println!(
                "chaos: worker {frozen} frozen for {WORKER_PAUSE:?} (leases live 1.5 s) at {percent} % ({:.1} s)",
                started.elapsed().as_secs_f64()
            );
        } else if worker_kills < MAX_WORKER_KILLS
            && percent < WORKER_KILLS_UNTIL_PERCENT
            && Instant::now() >= next_worker_kill
        {
            let running = cluster.running_workers();
            if running > 0 {
                let victim = cluster.kill_worker(rng.range(0, running as u64) as usize);
                cluster.start_worker();
                worker_kills += 1;
                println!(
                    "chaos: worker {victim} killed and replaced at {percent} % ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
            }
            next_worker_kill = Instant::now() + Duration::from_millis(rng.range(2000, 3000));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed();
    let failed_workers = cluster.wait_for_workers(deadline, "chaos");
    assert!(failed_workers.is_empty(), "workers that were not killed must exit cleanly: {failed_workers:?}");

    let f = check_ledger(&redis.url(), &dir);
    println!(
        "chaos: runs {}, worker kills {worker_kills}, coordinator restarts {coordinator_restarts}, redis restarts \
         {redis_restarts}, lost {}, duplicated {}, discarded {}, attempts {}",
        f.planned, f.lost, f.duplicated, f.discarded, f.attempts
    );
    println!(
        "chaos: completed {}, refused {}, failed {}, timed_out {}, unavailable {}; worker_lost attempts {}, retried \
         runs {}; worker pauses {worker_pauses}; discarded reports {:?}; in {:.1} s",
        f.outcome(Outcome::Completed),
        f.outcome(Outcome::Refused),
        f.outcome(Outcome::Failed),
        f.outcome(Outcome::TimedOut),
        f.outcome(Outcome::Unavailable),
        f.class(AttemptClass::WorkerLost),
        f.retried_runs,
        f.discarded_by,
        elapsed.as_secs_f64()
    );
    f.assert_clean();
    assert_eq!((f.planned, f.lost, f.duplicated), (PLANNED, 0, 0));
    assert_eq!(f.outcome(Outcome::NotRun), 0, "nothing closes the window or aborts this cohort");
    // The chaos happened as planned: otherwise the test proves less than it says.
    assert_eq!(coordinator_restarts, 2, "the cohort finished before both coordinator kills");
    assert_eq!(redis_restarts, 1, "the cohort finished before the Redis restart");
    assert_eq!(worker_pauses, 1, "the cohort finished before the worker pause");
    assert!(worker_kills >= 1, "no worker was killed");
}
