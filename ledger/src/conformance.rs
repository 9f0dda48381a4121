//! The ledger conformance suite: the behaviour every [`Ledger`] must have.
//! Each case takes a fresh, empty ledger; `conformance_tests!` turns the
//! cases into one `#[tokio::test]` each for a given implementation (see
//! `coordinator/tests/ledger_conformance.rs`).
//!
//! It is test code that lives in the library so that every ledger, here or
//! elsewhere, can run it: a failed expectation panics, as in any test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cohort_core::config::RetryPolicy;
use cohort_core::lifecycle::CloseReason;
use cohort_core::lifecycle::check_final;
use cohort_core::order::{RunId, run_order};
use cohort_core::taxonomy::{AttemptClass, Outcome};

use super::*;

/// Lease time-to-live used by the cases.
pub const TTL: i64 = 1_000;

/// The plan every case seeds: questions q1..q4, arms `a` (cap 2) and `b`
/// (cap 1), one repeat, a 10 s window, 3 attempts.
pub fn header() -> PlanHeader {
    PlanHeader {
        cohort: "conformance".into(),
        manifest_sha256: "a".repeat(64),
        window_ms: 10_000,
        retry: RetryPolicy { max_attempts: 3, initial_backoff_ms: 100, max_backoff_ms: 400, max_total_secs: 3600 },
        arms: vec![
            ArmPlan { id: "a".into(), concurrency: 2, pinned_version: "a-1".into(), ..ArmPlan::default() },
            ArmPlan { id: "b".into(), concurrency: 1, pinned_version: "b-1".into(), ..ArmPlan::default() },
        ],
        rounds: 1,
        round_every_ms: 0,
    }
}

pub fn questions() -> Vec<(String, String)> {
    (1..=4).map(|i| (format!("q{i}"), format!("Question {i}?"))).collect()
}

pub fn order() -> Vec<String> {
    run_order(&["q1", "q2", "q3", "q4"], &["a", "b"], 1, 99).iter().map(ToString::to_string).collect()
}

async fn seeded(l: &dyn Ledger) {
    assert_eq!(l.seed(&header(), &questions(), &order(), 0).await.unwrap(), SeedOutcome::Seeded);
}

fn ok_attempt(at: i64) -> AttemptRecord {
    attempt(AttemptClass::Ok, at)
}

fn attempt(class: AttemptClass, at: i64) -> AttemptRecord {
    AttemptRecord {
        class,
        http_status: 0,
        detail: String::new(),
        started_ms: at,
        ended_ms: at + 1,
        observed_version: None,
        worker: String::new(),
        attempt: 0,
        token: 0,
        retry_after_ms: None,
    }
}

/// A completed result recorded at `at`.
pub fn completed(at: i64) -> RunResult {
    RunResult {
        outcome: Outcome::Completed,
        reason: String::new(),
        record_sha256: "b".repeat(64),
        observed_version: Some("a-1".into()),
        attempt: ok_attempt(at),
    }
}

fn lref(g: &LeaseGrant) -> LeaseRef {
    LeaseRef { run_id: g.run_id.clone(), token: g.token }
}

/// Checks the accounting identity: every planned run is pending, leased or
/// final, and the final ones add up by outcome, overall and per arm.
async fn assert_counts_add_up(l: &dyn Ledger) -> Status {
    let s = l.status().await.unwrap();
    assert_eq!(s.pending + s.leased + s.finished, s.planned, "{s:?}");
    assert_eq!(s.by_outcome.values().sum::<u64>(), s.finished, "{s:?}");
    let runs = l.runs().await.unwrap();
    assert_eq!(runs.len() as u64, s.planned);
    for arm in &s.arms {
        let finals = runs.iter().filter(|r| r.arm_id == arm.id && r.state == RunStateKind::Final).count() as u64;
        assert_eq!(arm.by_outcome.values().sum::<u64>(), finals, "arm {}", arm.id);
    }
    s
}

/// Seeding twice changes nothing; another manifest is refused.
pub async fn seed_is_idempotent(l: &dyn Ledger) {
    seeded(l).await;
    assert_eq!(l.seed(&header(), &questions(), &order(), 5).await.unwrap(), SeedOutcome::AlreadySeeded);
    let mut other = header();
    other.manifest_sha256 = "c".repeat(64);
    assert!(matches!(l.seed(&other, &questions(), &order(), 5).await, Err(LedgerError::ManifestMismatch { .. })));
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.planned, s.pending), (8, 8));
    let runs = l.runs().await.unwrap();
    assert_eq!(runs.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>(), order(), "runs come back in planned order");
}

/// Leases follow the planned order, within each arm's cap, and carry the
/// question text and a fresh fencing token.
pub async fn lease_follows_order_within_caps(l: &dyn Ledger) {
    seeded(l).await;
    let batch = l.lease("w1", 10, 100, TTL).await.unwrap();
    // Caps: at most 2 of arm a and 1 of arm b at once.
    let expected: Vec<String> = {
        let (mut a, mut b) = (0, 0);
        order()
            .into_iter()
            .filter(|id| {
                let arm = RunId::parse(id).unwrap().arm_id;
                let (n, cap) = if arm == "a" { (&mut a, 2) } else { (&mut b, 1) };
                *n += 1;
                *n <= cap
            })
            .collect()
    };
    let got: Vec<String> = batch.leases.iter().map(|g| g.run_id.clone()).collect();
    assert_eq!(got, expected);
    let first = &batch.leases[0];
    assert_eq!(first.attempt, 1);
    assert_eq!(first.question_text, format!("Question {}?", &first.question_id[1..]));
    assert_eq!(first.expires_ms, 100 + TTL);
    let mut tokens: Vec<u64> = batch.leases.iter().map(|g| g.token).collect();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "distinct tokens");
    assert!(l.lease("w2", 10, 101, TTL).await.unwrap().leases.is_empty(), "every arm at its cap");
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.leased, 3);
    assert_eq!(s.window_start_ms, Some(100));
    assert_eq!(s.window_end_ms, Some(100 + header().window_ms));
}

/// A final result is absorbing: the same result sent again (same token,
/// same record and outcome: a retried or replayed report) is acknowledged again and
/// changes nothing; another result, with the same token or another, is
/// refused and kept as discarded; counts move with the first.
pub async fn finish_is_absorbing(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w1", 1, 100, TTL).await.unwrap().leases.remove(0);
    // Every field of the attempt is kept as sent, whatever its text holds.
    let attempt = AttemptRecord {
        http_status: 200,
        detail: "a \"quoted\" detail \\ with \u{e9}, \u{2713} and a\nnew line".into(),
        observed_version: Some("a-1".into()),
        ..ok_attempt(150)
    };
    let first = RunResult { attempt: attempt.clone(), ..completed(150) };
    assert!(l.finish("w1", &lref(&g), &first, 200).await.unwrap());
    assert!(l.finish("w1", &lref(&g), &first, 201).await.unwrap(), "the same result is acknowledged again");
    let other_record = RunResult { record_sha256: "c".repeat(64), ..completed(150) };
    assert!(!l.finish("w1", &lref(&g), &other_record, 201).await.unwrap(), "another record is refused");
    let refused = result_of(Outcome::Refused, AttemptClass::Refused, 150);
    assert!(!l.finish("w1", &lref(&g), &refused, 202).await.unwrap(), "a final outcome never changes");
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&1));
    assert_eq!(s.by_outcome.get(&Outcome::Refused), None);
    assert_eq!(s.attempts_by_class.get(&AttemptClass::Ok), Some(&1));
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == g.run_id).unwrap();
    assert_eq!((row.state, row.outcome, row.attempts), (RunStateKind::Final, Some(Outcome::Completed), 1));
    assert_eq!(row.observed_version.as_deref(), Some("a-1"));
    assert_eq!(row.record_sha256, "b".repeat(64));
    let recorded = AttemptRecord { worker: "w1".into(), attempt: 1, token: g.token, ..attempt };
    assert_eq!(l.attempts(&g.run_id).await.unwrap(), vec![recorded], "the attempt as sent, numbered by the ledger");
    assert_eq!(l.discarded().await.unwrap().len(), 2, "both refused reports are kept for audit");
}

/// A failed attempt sent again (its token, class, start and end are the
/// run's last recorded attempt: a retried or replayed report) gets its
/// verdict again and changes nothing: no second attempt, no count, no
/// discarded report; the same for the attempt that ended the run.
pub async fn an_attempt_sent_again_changes_nothing(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    let outage = attempt(AttemptClass::ServerError, 100);
    let first = l.report_attempt("w", &lref(&g), &outage, 101).await.unwrap();
    assert!(matches!(first, AttemptVerdict::Retry { .. }), "{first:?}");
    let again = l.report_attempt("w", &lref(&g), &outage, 102).await.unwrap();
    assert!(matches!(again, AttemptVerdict::Retry { .. }), "{again:?}");
    assert_eq!(l.attempts(&g.run_id).await.unwrap().len(), 1);

    let q = l.lease("w", 1, 150, TTL).await.unwrap().leases.remove(0);
    let quota = attempt(AttemptClass::QuotaExhausted, 300);
    assert_eq!(
        l.report_attempt("w", &lref(&q), &quota, 301).await.unwrap(),
        AttemptVerdict::Final(Outcome::Unavailable)
    );
    assert_eq!(
        l.report_attempt("w", &lref(&q), &quota, 302).await.unwrap(),
        AttemptVerdict::Final(Outcome::Unavailable)
    );
    assert_eq!(l.attempts(&q.run_id).await.unwrap().len(), 1);
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.attempts_by_class.get(&AttemptClass::ServerError), Some(&1));
    assert_eq!(s.attempts_by_class.get(&AttemptClass::QuotaExhausted), Some(&1));
    assert_eq!(s.by_outcome.get(&Outcome::Unavailable), Some(&1));
    assert!(l.discarded().await.unwrap().is_empty(), "nothing sent again is discarded");
}

/// Idempotence keyed by the lease (issue 23): a worker's journal may replay
/// a run's attempt after the run went on to its next lease, and even after
/// it ended. The replay is acknowledged with the run's state (not kept as a
/// discarded report), changes nothing, and never renumbers: the attempts
/// keep the numbers their leases gave them (what the run records list), the
/// counts by class count each attempt once. A result replayed likewise.
pub async fn a_replayed_attempt_is_kept_once_at_its_number(l: &dyn Ledger) {
    seeded(l).await;
    let g1 = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    let run = g1.run_id.clone();
    let outage = AttemptRecord { attempt: g1.attempt, ..attempt(AttemptClass::ServerError, 100) };
    let v = l.report_attempt("w", &lref(&g1), &outage, 101).await.unwrap();
    assert!(matches!(v, AttemptVerdict::Retry { .. }), "{v:?}");
    let g2 = find_lease(l, &run, 300).await;
    assert_eq!(g2.attempt, 2);
    let busy = AttemptRecord { attempt: g2.attempt, ..attempt(AttemptClass::RateLimited, 300) };
    let v = l.report_attempt("w", &lref(&g2), &busy, 301).await.unwrap();
    assert!(matches!(v, AttemptVerdict::Retry { .. }), "{v:?}");
    // The first lease's report again, after the run moved on: the run is
    // waiting for its third attempt.
    let v = l.report_attempt("w", &lref(&g1), &outage, 302).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: 0 }, "acknowledged, not stale");
    let g3 = find_lease(l, &run, 700).await;
    assert_eq!(g3.attempt, 3);
    let done = RunResult { attempt: AttemptRecord { attempt: g3.attempt, ..ok_attempt(700) }, ..completed(700) };
    assert!(l.finish("w", &lref(&g3), &done, 701).await.unwrap());
    // Every report again, in any order, once the run is final.
    assert!(l.finish("w", &lref(&g3), &done, 702).await.unwrap());
    for (g, a) in [(&g2, &busy), (&g1, &outage)] {
        let v = l.report_attempt("w", &lref(g), a, 703).await.unwrap();
        assert_eq!(v, AttemptVerdict::Final(Outcome::Completed), "a replay after the end says the outcome");
    }
    let recorded: Vec<(u32, AttemptClass, u64)> =
        l.attempts(&run).await.unwrap().iter().map(|a| (a.attempt, a.class, a.token)).collect();
    assert_eq!(
        recorded,
        [
            (1, AttemptClass::ServerError, g1.token),
            (2, AttemptClass::RateLimited, g2.token),
            (3, AttemptClass::Ok, g3.token)
        ]
    );
    let s = assert_counts_add_up(l).await;
    for class in [AttemptClass::ServerError, AttemptClass::RateLimited, AttemptClass::Ok] {
        assert_eq!(s.attempts_by_class.get(&class), Some(&1), "{class}: {:?}", s.attempts_by_class);
    }
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == run).unwrap();
    assert_eq!((row.attempts, row.outcome), (3, Some(Outcome::Completed)));
    assert!(l.discarded().await.unwrap().is_empty(), "nothing replayed is discarded");
}

/// [`Ledger::rebuild`] (issue 23, a ledger that lost its cohort): an empty
/// ledger is given the plan with the evidence's runs in their state, one
/// final with its record and numbered attempts, one pending with its
/// outage counted; the collection window where the evidence puts it (not
/// opened again now); counts that add up and count every attempt once;
/// tokens past the floor; only the runs without a result are leased, a
/// started one as its next attempt. A second rebuild, or one of a seeded
/// ledger, is refused and changes nothing; seeding afterwards finds it
/// seeded.
pub async fn rebuild_restores_the_evidence_and_keeps_the_window(l: &dyn Ledger) {
    let order = order();
    let numbered =
        |n: u32, class: AttemptClass, at: i64| AttemptRecord { attempt: n, worker: "w1".into(), ..attempt(class, at) };
    let rebuilt = Rebuild {
        window_start_ms: Some(50),
        token_floor: 1_000,
        epoch: 7,
        runs: vec![
            RestoredRun {
                run_id: order[0].clone(),
                attempts: vec![
                    AttemptRecord { token: 800, ..numbered(1, AttemptClass::ServerError, 60) },
                    AttemptRecord { token: 900, ..numbered(2, AttemptClass::Ok, 200) },
                ],
                result: Some(RestoredResult {
                    outcome: Outcome::Completed,
                    reason: String::new(),
                    record_sha256: "c".repeat(64),
                    observed_version: Some("a-1".into()),
                }),
            },
            RestoredRun {
                run_id: order[1].clone(),
                attempts: vec![numbered(1, AttemptClass::RateLimited, 70)],
                result: None,
            },
        ],
    };
    l.rebuild(&header(), &questions(), &order, &rebuilt, 5_000).await.unwrap();
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.planned, s.finished), (order.len() as u64, 1));
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&1));
    for class in [AttemptClass::ServerError, AttemptClass::RateLimited, AttemptClass::Ok] {
        assert_eq!(s.attempts_by_class.get(&class), Some(&1), "{class}: {:?}", s.attempts_by_class);
    }
    assert_eq!(s.window_start_ms, Some(50), "the window stays where it opened");
    assert_eq!(s.window_end_ms, Some(header().window_end_ms(50)));
    let rows = l.runs().await.unwrap();
    let row = |id: &str| rows.iter().find(|r| r.run_id == id).unwrap().clone();
    let done = row(&order[0]);
    assert_eq!((done.state, done.attempts, done.outcome), (RunStateKind::Final, 2, Some(Outcome::Completed)));
    assert_eq!(done.record_sha256, "c".repeat(64));
    let waiting = row(&order[1]);
    assert_eq!((waiting.state, waiting.attempts, waiting.outcome), (RunStateKind::Pending, 1, None));
    let numbers: Vec<(u32, AttemptClass)> =
        l.attempts(&order[0]).await.unwrap().iter().map(|a| (a.attempt, a.class)).collect();
    assert_eq!(numbers, [(1, AttemptClass::ServerError), (2, AttemptClass::Ok)]);

    // The journals' replays of the restored run's reports are the same
    // reports again: acknowledged, nothing changed, nothing discarded.
    let replayed =
        RunResult { record_sha256: "c".repeat(64), attempt: numbered(2, AttemptClass::Ok, 200), ..completed(200) };
    let (first, last) =
        (LeaseRef { run_id: order[0].clone(), token: 800 }, LeaseRef { run_id: order[0].clone(), token: 900 });
    assert!(l.finish("w1", &last, &replayed, 5_500).await.unwrap(), "the record's result again is accepted");
    let v = l.report_attempt("w1", &first, &numbered(1, AttemptClass::ServerError, 60), 5_500).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Completed));
    assert!(l.discarded().await.unwrap().is_empty(), "no replay is stale");
    assert_eq!(l.attempts(&order[0]).await.unwrap().len(), 2);

    let granted = l.lease("w", 8, 6_000, TTL).await.unwrap().leases;
    assert!(granted.iter().all(|g| g.run_id != order[0]), "a run with a record is never leased again: {granted:?}");
    assert!(granted.iter().all(|g| g.token > 1_000), "tokens start past the floor: {granted:?}");
    let again = granted.iter().find(|g| g.run_id == order[1]).expect("the started run is leased");
    assert_eq!(again.attempt, 2, "as its next attempt");
    assert_eq!(l.status().await.unwrap().window_start_ms, Some(50), "leasing does not move the window");

    let refused = l.rebuild(&header(), &questions(), &order, &rebuilt, 7_000).await.unwrap_err();
    assert!(matches!(refused, LedgerError::NotEmpty { .. }), "{refused:?}");
    assert_eq!(l.seed(&header(), &questions(), &order, 7_000).await.unwrap(), SeedOutcome::AlreadySeeded);
    assert_eq!(l.runs().await.unwrap().iter().filter(|r| r.state == RunStateKind::Final).count(), 1);
    let events = l.events(100).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.kind == "rebuilt").count(), 1, "{events:?}");
}

/// A final result of `outcome` whose last attempt has `class`.
fn result_of(outcome: Outcome, class: AttemptClass, at: i64) -> RunResult {
    RunResult { outcome, attempt: attempt(class, at), ..completed(at) }
}

/// Every (outcome, class) pair that `lifecycle::check_final` does not allow
/// is refused with `Unfit`, naming the run, the outcome and the class, and
/// changes nothing: the run stays leased under its token, no attempt or
/// count moves, nothing is kept as discarded (a caller's error, not a stale
/// report), with the current token or a stale one. A fitting result is
/// accepted afterwards.
pub async fn unfit_results_are_refused(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w1", 1, 100, TTL).await.unwrap().leases.remove(0);
    let before = assert_counts_add_up(l).await;
    let mut refused = 0;
    for outcome in Outcome::ALL {
        for class in AttemptClass::ALL {
            if check_final(outcome, class).is_ok() {
                continue;
            }
            refused += 1;
            let stale = LeaseRef { run_id: g.run_id.clone(), token: g.token + 1000 };
            for lease in [lref(&g), stale] {
                match l.finish("w1", &lease, &result_of(outcome, class, 150), 200).await {
                    Err(LedgerError::Unfit { run_id, outcome: o, class: c }) => {
                        assert_eq!((run_id.as_str(), o, c), (g.run_id.as_str(), outcome, class));
                    }
                    other => panic!("({outcome}, {class}) with token {}: {other:?}", lease.token),
                }
            }
        }
    }
    assert_eq!(refused, Outcome::ALL.len() * AttemptClass::ALL.len() - 6, "every unfit pair was tried");
    let e = l.finish("w1", &lref(&g), &result_of(Outcome::Completed, AttemptClass::ServerError, 150), 200).await;
    let text = e.unwrap_err().to_string();
    assert!(text.contains(&g.run_id) && text.contains("completed") && text.contains("server_error"), "{text}");
    let after = assert_counts_add_up(l).await;
    assert_eq!(after, before, "a refused result changes no count");
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == g.run_id).unwrap();
    assert_eq!((row.state, row.outcome, row.attempts), (RunStateKind::Leased, None, 1));
    assert!(l.attempts(&g.run_id).await.unwrap().is_empty(), "no attempt recorded");
    assert!(l.discarded().await.unwrap().is_empty(), "a refused result is not a stale report");
    assert!(l.heartbeat("w1", &[lref(&g)], 300, TTL).await.unwrap().is_empty(), "still leased under its token");
    let failed = result_of(Outcome::Failed, AttemptClass::Ok, 150);
    assert!(l.finish("w1", &lref(&g), &failed, 400).await.unwrap(), "a fitting result is accepted after");
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.finished, s.by_outcome.get(&Outcome::Failed)), (1, Some(&1)));
}

/// A worker cannot end a leased run as `not_run` (the ledger alone gives
/// it, when a run never started), alone or in a batch: one unfit result
/// refuses the whole batch, the fitting one in it too.
pub async fn not_run_for_a_leased_run_is_refused(l: &dyn Ledger) {
    seeded(l).await;
    let batch = l.lease("w1", 2, 100, TTL).await.unwrap().leases;
    let (g1, g2) = (&batch[0], &batch[1]);
    let not_run = result_of(Outcome::NotRun, AttemptClass::Ok, 150);
    assert!(matches!(
        l.finish("w1", &lref(g1), &not_run, 200).await,
        Err(LedgerError::Unfit { outcome: Outcome::NotRun, class: AttemptClass::Ok, .. })
    ));
    let both = [(lref(g1), completed(150)), (lref(g2), not_run.clone())];
    match l.finish_many("w1", &both, 200).await {
        Err(LedgerError::Unfit { run_id, outcome: Outcome::NotRun, .. }) => assert_eq!(run_id, g2.run_id),
        other => panic!("a batch with a not_run result: {other:?}"),
    }
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.leased, s.finished), (2, 0), "nothing in the refused batch was recorded");
    assert!(l.discarded().await.unwrap().is_empty());
    let accepted = l.finish_many("w1", &[(lref(g1), completed(150)), (lref(g2), completed(150))], 300).await;
    assert_eq!(accepted.unwrap(), vec![true, true]);
    assert_eq!(assert_counts_add_up(l).await.by_outcome.get(&Outcome::Completed), Some(&2));
}

/// Every run a batch of results ends gets its own `final` event, in the
/// batch's order, at the call's time, its outcome the detail, however the
/// backend keeps its audit log (the Redis ledger writes a batch's finals
/// as one stream entry); `events(n)` is the last `n` events.
pub async fn a_batch_of_results_logs_a_final_event_per_run(l: &dyn Ledger) {
    seeded(l).await;
    let batch = l.lease("w1", 3, 100, TTL).await.unwrap().leases;
    assert_eq!(batch.len(), 3, "both arms' caps: {batch:?}");
    let results: Vec<_> = batch.iter().map(|g| (lref(g), completed(150))).collect();
    assert_eq!(l.finish_many("w1", &results, 200).await.unwrap(), vec![true; 3]);
    let ids: Vec<&str> = batch.iter().map(|g| g.run_id.as_str()).collect();
    let events = l.events(100).await.unwrap();
    let finals: Vec<_> = events.iter().filter(|e| e.kind == "final").collect();
    assert_eq!(finals.iter().map(|e| e.run_id.as_str()).collect::<Vec<_>>(), ids, "{events:?}");
    assert!(finals.iter().all(|e| e.at_ms == 200 && e.detail == "completed"), "{finals:?}");
    let last = l.events(2).await.unwrap();
    assert_eq!(
        last.iter().map(|e| (e.kind.as_str(), e.run_id.as_str())).collect::<Vec<_>>(),
        [("final", ids[1]), ("final", ids[2])]
    );
}

/// Seeding refuses a plan with a malformed run id, before anything is
/// written: the ledger stays unseeded.
pub async fn seed_refuses_a_malformed_run_id(l: &dyn Ledger) {
    let mut bad = order();
    bad[3] = "q1:a".into();
    match l.seed(&header(), &questions(), &bad, 0).await {
        Err(LedgerError::BadRunId(e)) => assert_eq!(e.id, "q1:a"),
        other => panic!("a malformed run id: {other:?}"),
    }
    seeded(l).await;
}

/// A lost worker's lease expires (worker_lost attempt, run re-queued at its
/// place in the order); its late report is discarded, not counted.
pub async fn expiry_fences_out_the_lost_worker(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("lost", 1, 100, TTL).await.unwrap().leases.remove(0);
    assert_eq!(l.expire(100 + TTL - 1).await.unwrap(), 0, "not before its time");
    assert_eq!(l.expire(100 + TTL).await.unwrap(), 1);
    let attempts = l.attempts(&g.run_id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].class, AttemptClass::WorkerLost);
    assert_eq!(attempts[0].worker, "lost");
    // Backoff after one failure is 100 ms.
    let now = 100 + TTL;
    let early = l.lease("w2", 1, now + 50, TTL).await.unwrap().leases;
    assert!(early.iter().all(|e| e.run_id != g.run_id), "not before its backoff");
    for e in &early {
        assert!(l.release("w2", &lref(e), now + 60).await.unwrap());
    }
    let again = l.lease("w2", 8, now + 100, TTL).await.unwrap().leases;
    let g2 = again.iter().find(|e| e.run_id == g.run_id).expect("re-leased after backoff").clone();
    assert_eq!(g2.attempt, 2);
    assert_ne!(g2.token, g.token);
    assert!(!l.finish("lost", &lref(&g), &completed(150), now + 120).await.unwrap(), "stale token refused");
    assert!(l.finish("w2", &lref(&g2), &completed(now + 110), now + 130).await.unwrap());
    let d = l.discarded().await.unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].worker.as_str(), d[0].token, d[0].kind.as_str()), ("lost", g.token, "result"));
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&1));
    assert_eq!(s.attempts_by_class.get(&AttemptClass::WorkerLost), Some(&1));
    assert_eq!(s.discarded, 1);
}

/// Outages retry under the policy until attempts run out, then the run is
/// unavailable; non-retryable classes are final at once.
pub async fn retries_follow_the_policy(l: &dyn Ledger) {
    seeded(l).await;
    let mut now = 100;
    let g = l.lease("w", 1, now, TTL).await.unwrap().leases.remove(0);
    let run = g.run_id.clone();
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: now + 1 + 100 });
    now += 101;
    let g = find_lease(l, &run, now).await;
    assert_eq!(g.attempt, 2);
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::RateLimited, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: now + 1 + 200 });
    now += 201;
    let g = find_lease(l, &run, now).await;
    assert_eq!(g.attempt, 3);
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::EmptyContent, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable));
    assert_eq!(
        l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, now), now + 2).await.unwrap(),
        AttemptVerdict::Stale
    );
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::Unavailable), Some(&1));
    assert_eq!(l.attempts(&run).await.unwrap().len(), 3);
    // The bulk read gives what the per-run read gives, in the order asked,
    // an empty list for a run without attempts.
    let ids: Vec<String> = l.runs().await.unwrap().into_iter().map(|r| r.run_id).collect();
    let asked: Vec<&str> = std::iter::once(run.as_str()).chain(ids.iter().map(String::as_str)).collect();
    let bulk = l.attempts_of(&asked).await.unwrap();
    assert_eq!(bulk.len(), asked.len());
    for (id, got) in asked.iter().zip(&bulk) {
        assert_eq!(got, &l.attempts(id).await.unwrap(), "{id}");
    }
    assert_eq!(bulk[0].len(), 3);
    assert!(l.attempts_of(&[]).await.unwrap().is_empty());
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == run).unwrap();
    assert_eq!((row.attempts, row.outcome), (3, Some(Outcome::Unavailable)));
    assert!(!row.reason.is_empty(), "the reason names the last class");

    // Quota exhaustion fails fast.
    let g = l.lease("w", 1, now + 10, TTL).await.unwrap().leases.remove(0);
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::QuotaExhausted, now), now + 11).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable));
}

async fn find_lease(l: &dyn Ledger, run: &str, now: i64) -> LeaseGrant {
    let batch = l.lease("w", 8, now, TTL).await.unwrap();
    let mut found = None;
    for g in batch.leases {
        if g.run_id == run {
            found = Some(g);
        } else {
            // Give the others back so caps do not interfere.
            assert!(l.release("w", &lref(&g), now).await.unwrap());
        }
    }
    found.unwrap_or_else(|| panic!("{run} was not leased at {now}"))
}

/// Draining gives a lease back without counting an attempt; the run is
/// leased again at its place in the order.
pub async fn release_requeues_without_an_attempt(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    assert!(l.release("w", &lref(&g), 110).await.unwrap());
    assert!(!l.release("w", &lref(&g), 111).await.unwrap(), "already released");
    assert!(l.attempts(&g.run_id).await.unwrap().is_empty());
    let again = l.lease("w", 1, 120, TTL).await.unwrap().leases.remove(0);
    assert_eq!(again.run_id, g.run_id, "first in order again");
    assert_eq!(again.attempt, 1, "a release is not an attempt");
    assert_counts_add_up(l).await;
}

/// Heartbeats extend current leases and name the ones that are gone.
pub async fn heartbeat_extends_and_names_lost_leases(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    let ghost = LeaseRef { run_id: g.run_id.clone(), token: g.token + 1000 };
    let lost = l.heartbeat("w", &[lref(&g), ghost.clone()], 900, TTL).await.unwrap();
    assert_eq!(lost, vec![ghost]);
    assert_eq!(l.expire(100 + TTL).await.unwrap(), 0, "extended to 900 + ttl");
    assert_eq!(l.expire(900 + TTL).await.unwrap(), 1);
    assert_eq!(l.heartbeat("w", &[lref(&g)], 901 + TTL, TTL).await.unwrap(), vec![lref(&g)]);
}

/// Runs not started when the window closes are not_run(window_closed);
/// runs waiting for a retry are unavailable; in-flight runs may finish.
pub async fn window_close_finalises_pending_runs(l: &dyn Ledger) {
    seeded(l).await;
    let start = 1_000;
    let batch = l.lease("w", 2, start, TTL).await.unwrap();
    let (inflight, failing) = (&batch.leases[0], &batch.leases[1]);
    let v = l.report_attempt("w", &lref(failing), &attempt(AttemptClass::ServerError, start), start + 1).await.unwrap();
    assert!(matches!(v, AttemptVerdict::Retry { .. }));
    let end = start + header().window_ms;
    assert_eq!(l.close_window_if_due(end - 1).await.unwrap(), 0);
    assert_eq!(l.close_window_if_due(end).await.unwrap(), 7, "every pending run, the retrying one included");
    let batch = l.lease("w", 8, end + 1, TTL).await.unwrap();
    assert!(batch.leases.is_empty() && batch.closed);
    assert!(l.finish("w", &lref(inflight), &completed(end - 5), end + 2).await.unwrap(), "started before the close");
    let s = assert_counts_add_up(l).await;
    assert!(s.done());
    assert_eq!(s.by_outcome.get(&Outcome::NotRun), Some(&6));
    assert_eq!(s.by_outcome.get(&Outcome::Unavailable), Some(&1));
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&1));
    let runs = l.runs().await.unwrap();
    assert!(
        runs.iter()
            .filter(|r| r.outcome == Some(Outcome::NotRun))
            .all(|r| r.reason == CloseReason::WindowClosed.as_str())
    );
    assert!(l.lease("w", 1, end + 3, TTL).await.unwrap().done);
}

/// A lease call after the window's end closes it too (no reconcile needed).
pub async fn lease_after_the_window_closes_it(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 0, TTL).await.unwrap().leases.remove(0);
    assert!(l.finish("w", &lref(&g), &completed(1), 2).await.unwrap());
    let batch = l.lease("w", 8, header().window_ms, TTL).await.unwrap();
    assert!(batch.closed && batch.leases.is_empty());
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::NotRun), Some(&7));
}

/// A paused arm gets no leases; at the window's close its pending runs are
/// not_run(arm_paused); resume is logged and lets leasing continue.
pub async fn paused_arms_are_skipped_and_resume_is_logged(l: &dyn Ledger) {
    seeded(l).await;
    l.pause_arm("a", "version changed: pinned a-1, observed a-2", 10).await.unwrap();
    let batch = l.lease("w", 8, 20, TTL).await.unwrap();
    assert!(batch.leases.iter().all(|g| g.arm_id == "b"), "{batch:?}");
    let s = l.status().await.unwrap();
    let arm_a = s.arms.iter().find(|a| a.id == "a").unwrap();
    assert_eq!(arm_a.paused.as_deref(), Some("version changed: pinned a-1, observed a-2"));
    l.resume_arm("a", "checked release notes", Some("a-2"), 30).await.unwrap();
    let s = l.status().await.unwrap();
    let arm_a = s.arms.iter().find(|a| a.id == "a").unwrap();
    assert_eq!(arm_a.paused, None);
    assert_eq!(arm_a.accepted_versions, vec!["a-1".to_owned(), "a-2".to_owned()]);
    assert!(l.lease("w", 8, 40, TTL).await.unwrap().leases.iter().any(|g| g.arm_id == "a"));
    let events = l.events(100).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "arm_paused" && e.detail.contains("a-2")));
    assert!(events.iter().any(|e| e.kind == "arm_resumed" && e.detail.contains("checked release notes")));
    assert!(l.pause_arm("zzz", "x", 50).await.is_err(), "unknown arm");

    l.pause_arm("b", "version changed", 50).await.unwrap();
    l.close_window_if_due(20 + header().window_ms).await.unwrap();
    let runs = l.runs().await.unwrap();
    let b_not_run: Vec<&RunRow> =
        runs.iter().filter(|r| r.arm_id == "b" && r.outcome == Some(Outcome::NotRun)).collect();
    assert!(!b_not_run.is_empty());
    assert!(b_not_run.iter().all(|r| r.reason == CloseReason::ArmPaused.as_str()), "{b_not_run:?}");
}

/// An arm's accepted labels are seeded from its pinned label and
/// `cohort.toml`'s `accepted_versions`: a result reporting one of them does
/// not pause the arm by the rule the coordinator and `cohort submit` apply
/// to the ledger's labels (`version_pause_reason`), while another label
/// does; a label accepted on resume is added after the seeded ones.
pub async fn seeded_accepted_versions_do_not_pause_the_arm(l: &dyn Ledger) {
    let mut h = header();
    h.arms[0].accepted_versions = vec!["a-1-2026-06-26".into(), "a 1 (engine 7)".into()];
    assert_eq!(l.seed(&h, &questions(), &order(), 0).await.unwrap(), SeedOutcome::Seeded);
    let accepted = |s: &Status, arm: &str| s.arms.iter().find(|a| a.id == arm).unwrap().accepted_versions.clone();
    let s = l.status().await.unwrap();
    assert_eq!(accepted(&s, "a"), ["a-1", "a-1-2026-06-26", "a 1 (engine 7)"]);
    assert_eq!(accepted(&s, "b"), ["b-1"], "an arm without accepted_versions accepts its pinned label only");

    // What the coordinator does with each accepted result's label.
    let finish_and_check = |g: LeaseGrant, label: &'static str, at: i64| async move {
        let result = RunResult { observed_version: Some(label.to_owned()), ..completed(at) };
        assert!(l.finish("w", &lref(&g), &result, at + 1).await.unwrap());
        let s = l.status().await.unwrap();
        let arm = s.arms.iter().find(|a| a.id == g.arm_id).unwrap();
        let reason = version_pause_reason(&g.run_id, "a-1", &arm.accepted_versions, arm.paused.is_some(), Some(label));
        if let Some(reason) = &reason {
            l.pause_arm(&g.arm_id, reason, at + 2).await.unwrap();
        }
        reason
    };
    let mut a_runs = l.lease("w", 8, 100, TTL).await.unwrap().leases.into_iter().filter(|g| g.arm_id == "a");
    let (first, second) = (a_runs.next().unwrap(), a_runs.next().unwrap());
    assert_eq!(finish_and_check(first, "a-1-2026-06-26", 110).await, None, "a label frozen as accepted");
    let s = l.status().await.unwrap();
    assert_eq!(s.arms.iter().find(|a| a.id == "a").unwrap().paused, None);
    let reason = finish_and_check(second.clone(), "a-1-2026-07-01", 120).await;
    assert_eq!(
        reason.as_deref(),
        Some(format!("version changed: pinned a-1, observed a-1-2026-07-01 on run {}", second.run_id).as_str())
    );
    let s = l.status().await.unwrap();
    assert_eq!(s.arms.iter().find(|a| a.id == "a").unwrap().paused, reason, "another label pauses the arm");
    assert!(l.lease("w", 8, 130, TTL).await.unwrap().leases.iter().all(|g| g.arm_id != "a"));

    l.resume_arm("a", "new snapshot checked", Some("a-1-2026-07-01"), 140).await.unwrap();
    l.resume_arm("a", "again", Some("a-1-2026-06-26"), 150).await.unwrap();
    let s = l.status().await.unwrap();
    assert_eq!(accepted(&s, "a"), ["a-1", "a-1-2026-06-26", "a 1 (engine 7)", "a-1-2026-07-01"], "each once");
}

/// Abort finalises every pending run as not_run(aborted) and stops leasing.
pub async fn abort_stops_the_cohort(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 10, TTL).await.unwrap().leases.remove(0);
    assert_eq!(l.abort("operator stopped it", 20).await.unwrap(), 7);
    let batch = l.lease("w", 8, 30, TTL).await.unwrap();
    assert!(batch.closed && batch.leases.is_empty());
    assert!(l.finish("w", &lref(&g), &completed(15), 40).await.unwrap(), "in-flight runs still report");
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.aborted.as_deref(), Some("operator stopped it"));
    assert_eq!(s.by_outcome.get(&Outcome::NotRun), Some(&7));
    assert!(
        l.runs().await.unwrap().iter().filter(|r| r.outcome == Some(Outcome::NotRun)).all(|r| r.reason == "aborted")
    );
}

/// A retry reported after the cohort closed can never run: the run is
/// unavailable at once, and the cohort still reaches done.
pub async fn no_retry_after_the_cohort_closed(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 10, TTL).await.unwrap().leases.remove(0);
    l.abort("stop", 20).await.unwrap();
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, 15), 30).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable));
    let s = assert_counts_add_up(l).await;
    assert!(s.done(), "{s:?}");
}

/// The window opens at the first start, not at a lease call that granted
/// nothing.
pub async fn window_opens_at_the_first_start(l: &dyn Ledger) {
    seeded(l).await;
    l.pause_arm("a", "hold", 1).await.unwrap();
    l.pause_arm("b", "hold", 1).await.unwrap();
    assert!(l.lease("w", 4, 100, TTL).await.unwrap().leases.is_empty());
    assert_eq!(l.status().await.unwrap().window_start_ms, None);
    l.resume_arm("a", "go", None, 200).await.unwrap();
    assert!(!l.lease("w", 4, 500, TTL).await.unwrap().leases.is_empty());
    assert_eq!(l.status().await.unwrap().window_start_ms, Some(500));
}

/// The plan of the manual-arm cases: questions q1..q4, automatic arm `a`
/// (cap 2) and manual arm `m` (cap 2), one repeat.
pub fn manual_header() -> PlanHeader {
    let mut h = header();
    h.arms[1] =
        ArmPlan { id: "m".into(), concurrency: 2, pinned_version: "m-1".into(), manual: true, ..ArmPlan::default() };
    h
}

pub fn manual_order() -> Vec<String> {
    run_order(&["q1", "q2", "q3", "q4"], &["a", "m"], 1, 99).iter().map(ToString::to_string).collect()
}

async fn seeded_manual(l: &dyn Ledger) {
    assert_eq!(l.seed(&manual_header(), &questions(), &manual_order(), 0).await.unwrap(), SeedOutcome::Seeded);
}

fn runs_of(arm: &str) -> Vec<String> {
    manual_order().into_iter().filter(|id| RunId::parse(id).unwrap().arm_id == arm).collect()
}

/// A worker's lease never grants a manual arm's run, even when nothing
/// else is left: the manual runs wait for their person.
pub async fn automatic_lease_never_grants_a_manual_arm(l: &dyn Ledger) {
    seeded_manual(l).await;
    let s = l.status().await.unwrap();
    let manual: Vec<(String, bool)> = s.arms.iter().map(|a| (a.id.clone(), a.manual)).collect();
    assert_eq!(manual, vec![("a".to_owned(), false), ("m".to_owned(), true)]);
    let mut now = 10;
    let mut granted = Vec::new();
    loop {
        let batch = l.lease("w", 8, now, TTL).await.unwrap();
        if batch.leases.is_empty() {
            assert!(!batch.done && !batch.closed, "the manual runs are still open: {batch:?}");
            break;
        }
        for g in &batch.leases {
            assert_eq!(g.arm_id, "a", "a worker was granted {}", g.run_id);
            granted.push(g.run_id.clone());
            assert!(l.finish("w", &lref(g), &completed(now), now + 1).await.unwrap());
        }
        now += 10;
    }
    assert_eq!(granted, runs_of("a"), "every automatic run, in planned order");
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.pending, s.finished), (4, 4));
}

/// A manual lease grants only its arm's runs, in planned order, within its
/// cap; it opens the window; `leases_held` returns them with their tokens;
/// finishing with a held token works; pause applies as to any arm.
pub async fn manual_lease_grants_only_its_arm_in_order(l: &dyn Ledger) {
    seeded_manual(l).await;
    let m = runs_of("m");
    let batch = l.lease_scoped("person", LeaseScope::Manual("m"), 10, 100, TTL).await.unwrap();
    let got: Vec<String> = batch.leases.iter().map(|g| g.run_id.clone()).collect();
    assert_eq!(got, m[..2].to_vec(), "the first two of arm m (its cap), in order");
    assert_eq!(l.status().await.unwrap().window_start_ms, Some(100), "a manual grant opens the window");
    assert!(
        l.lease_scoped("person", LeaseScope::Manual("m"), 10, 101, TTL).await.unwrap().leases.is_empty(),
        "arm m at its cap"
    );
    // A worker's lease in between takes arm a's runs and none of m's.
    let auto = l.lease("w", 10, 102, TTL).await.unwrap().leases;
    assert!(!auto.is_empty() && auto.iter().all(|g| g.arm_id == "a"), "{auto:?}");

    let held = l.leases_held("person").await.unwrap();
    assert_eq!(held, batch.leases, "the person's leases, in order, with their tokens");
    assert!(held.iter().all(|g| !g.question_text.is_empty() && g.attempt == 1));
    assert_eq!(l.leases_held("w").await.unwrap(), auto, "a worker holds only its own");
    assert!(l.leases_held("nobody").await.unwrap().is_empty());

    assert!(l.finish("person", &lref(&held[0]), &completed(150), 200).await.unwrap());
    assert_eq!(l.leases_held("person").await.unwrap(), held[1..].to_vec());
    let next = l.lease_scoped("person", LeaseScope::Manual("m"), 10, 210, TTL).await.unwrap().leases;
    assert_eq!(next.iter().map(|g| g.run_id.clone()).collect::<Vec<_>>(), vec![m[2].clone()], "room for one more");

    l.pause_arm("m", "hold", 220).await.unwrap();
    assert!(l.finish("person", &lref(&next[0]), &completed(215), 225).await.unwrap());
    assert!(
        l.lease_scoped("person", LeaseScope::Manual("m"), 10, 230, TTL).await.unwrap().leases.is_empty(),
        "a paused manual arm grants nothing"
    );
    l.resume_arm("m", "go", None, 240).await.unwrap();
    let last = l.lease_scoped("person", LeaseScope::Manual("m"), 10, 250, TTL).await.unwrap().leases;
    assert_eq!(last.iter().map(|g| g.run_id.clone()).collect::<Vec<_>>(), vec![m[3].clone()]);
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&2));
}

/// A manual lease for an arm that is not manual, or not in the plan, is
/// refused by name and grants nothing.
pub async fn manual_lease_refuses_other_arms(l: &dyn Ledger) {
    seeded_manual(l).await;
    match l.lease_scoped("person", LeaseScope::Manual("a"), 1, 10, TTL).await {
        Err(LedgerError::NotManual(arm)) => assert_eq!(arm, "a"),
        other => panic!("expected NotManual, got {other:?}"),
    }
    match l.lease_scoped("person", LeaseScope::Manual("zzz"), 1, 10, TTL).await {
        Err(LedgerError::UnknownArm(arm)) => assert_eq!(arm, "zzz"),
        other => panic!("expected UnknownArm, got {other:?}"),
    }
    let s = assert_counts_add_up(l).await;
    assert_eq!((s.leased, s.window_start_ms), (0, None));
}

/// The window's close and an abort apply to manual runs as to any: a
/// manual lease after the end closes the window and grants nothing.
pub async fn manual_runs_close_with_the_window(l: &dyn Ledger) {
    seeded_manual(l).await;
    let g = l.lease("w", 1, 0, TTL).await.unwrap().leases.remove(0);
    assert!(l.finish("w", &lref(&g), &completed(1), 2).await.unwrap());
    let batch = l.lease_scoped("person", LeaseScope::Manual("m"), 4, header().window_ms, TTL).await.unwrap();
    assert!(batch.closed && batch.leases.is_empty(), "{batch:?}");
    let runs = l.runs().await.unwrap();
    assert!(
        runs.iter()
            .filter(|r| r.arm_id == "m")
            .all(|r| r.outcome == Some(Outcome::NotRun) && r.reason == CloseReason::WindowClosed.as_str()),
        "{runs:?}"
    );
}

/// A provider's Retry-After: the run is not leased again before it, and
/// its arm is held for everyone until then while other arms go on.
pub async fn retry_after_holds_the_run_and_its_arm(l: &dyn Ledger) {
    seeded(l).await;
    let batch = l.lease("w", 8, 100, TTL).await.unwrap();
    let (limited, others): (Vec<_>, Vec<_>) = batch.leases.iter().partition(|g| g.arm_id == "a");
    let (g, rest) = limited.split_first().expect("a run of arm a");
    for other in rest.iter().chain(others.iter()) {
        assert!(l.release("w", &lref(other), 150).await.unwrap());
    }
    let mut rate_limited = attempt(AttemptClass::RateLimited, 190);
    rate_limited.http_status = 429;
    rate_limited.retry_after_ms = Some(2_000);
    let v = l.report_attempt("w", &lref(g), &rate_limited, 200).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: 2_200 }, "Retry-After 2000 ms beats the 100 ms backoff");
    let s = l.status().await.unwrap();
    assert_eq!(s.arms.iter().find(|a| a.id == "a").unwrap().held_until_ms, Some(2_200));
    assert_eq!(s.arms.iter().find(|a| a.id == "b").unwrap().held_until_ms, None);
    assert!(l.events(100).await.unwrap().iter().any(|e| e.kind == "arm_held" && e.detail.contains("2200")));

    let during = l.lease("w", 8, 2_199, TTL).await.unwrap().leases;
    assert!(during.iter().all(|x| x.arm_id != "a"), "arm a is held at +1999 ms: {during:?}");
    assert!(during.iter().any(|x| x.arm_id == "b"), "arm b is not held");
    let after = l.lease("w", 8, 2_200, TTL).await.unwrap().leases;
    let again = after.iter().find(|x| x.run_id == g.run_id).expect("leased again at +2000 ms");
    assert_eq!(again.attempt, 2);
    assert_eq!(l.attempts(&g.run_id).await.unwrap()[0].retry_after_ms, Some(2_000), "kept in the attempt record");
    assert_counts_add_up(l).await;
}

fn auth_error(at: i64) -> AttemptRecord {
    let mut a = attempt(AttemptClass::AuthError, at);
    a.http_status = 401;
    a.detail = "HTTP 401: Incorrect API key provided: sk-wr****1234".into();
    a
}

/// An auth_error is recorded but excused: the arm is paused with a reason
/// that says what to do, the run is pending again at its place, and its
/// retry budget is untouched; after resume it is leased again.
pub async fn auth_error_pauses_the_arm_and_keeps_the_budget(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    let (run, arm) = (g.run_id.clone(), g.arm_id.clone());
    assert_eq!(l.report_attempt("w", &lref(&g), &auth_error(100), 110).await.unwrap(), AttemptVerdict::ArmPaused);
    let s = assert_counts_add_up(l).await;
    let status = s.arms.iter().find(|a| a.id == arm).unwrap();
    let reason = cohort_core::lifecycle::auth_pause_reason(&arm, 401, &auth_error(0).detail);
    assert_eq!(status.paused.as_deref(), Some(reason.as_str()));
    assert!(reason.contains("cohort resume") && reason.contains("Incorrect API key"), "{reason}");
    assert_eq!(s.attempts_by_class.get(&AttemptClass::AuthError), Some(&1));
    assert_eq!(s.finished, 0);
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == run).unwrap();
    assert_eq!((row.state, row.attempts, row.started_ms), (RunStateKind::Pending, 1, 0), "not started: excused");
    assert!(l.lease("w", 8, 120, TTL).await.unwrap().leases.iter().all(|x| x.arm_id != arm), "the arm is paused");
    assert!(l.events(100).await.unwrap().iter().any(|e| e.kind == "arm_paused" && e.detail.contains("auth_error")));

    l.resume_arm(&arm, "fixed the key", None, 130).await.unwrap();
    // Three counted attempts are allowed: the auth_error is not one of them.
    let mut now = 200;
    let g = find_lease(l, &run, now).await;
    assert_eq!(g.attempt, 2);
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: now + 1 + 100 }, "first counted attempt: 100 ms");
    now += 101;
    let g = find_lease(l, &run, now).await;
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Retry { not_before_ms: now + 1 + 200 }, "second counted attempt: still retried");
    now += 201;
    let g = find_lease(l, &run, now).await;
    assert_eq!(g.attempt, 4);
    let v = l.report_attempt("w", &lref(&g), &attempt(AttemptClass::ServerError, now), now + 1).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable), "third counted attempt ends it");
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == run).unwrap();
    assert_eq!((row.attempts, row.started_ms), (4, 200), "started at its first counted attempt");
    assert_counts_add_up(l).await;
}

/// A run sent back by an auth_error whose arm stays paused until the
/// window closes never reached the product: not_run (arm_paused).
pub async fn window_close_during_an_auth_pause_is_not_run(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 100, TTL).await.unwrap().leases.remove(0);
    assert_eq!(l.report_attempt("w", &lref(&g), &auth_error(100), 110).await.unwrap(), AttemptVerdict::ArmPaused);
    l.close_window_if_due(100 + header().window_ms).await.unwrap();
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == g.run_id).unwrap();
    assert_eq!((row.outcome, row.reason.as_str()), (Some(Outcome::NotRun), CloseReason::ArmPaused.as_str()));
    assert!(assert_counts_add_up(l).await.done());
}

/// An auth_error reported after the cohort closed cannot wait for a
/// resume: the run gets its closing outcome at once.
pub async fn auth_error_after_abort_is_final(l: &dyn Ledger) {
    seeded(l).await;
    let g = l.lease("w", 1, 10, TTL).await.unwrap().leases.remove(0);
    l.abort("stop", 20).await.unwrap();
    let v = l.report_attempt("w", &lref(&g), &auth_error(15), 30).await.unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::NotRun), "no counted attempt: never reached the product");
    let row = l.runs().await.unwrap().into_iter().find(|r| r.run_id == g.run_id).unwrap();
    assert_eq!(row.reason, "aborted");
    assert!(assert_counts_add_up(l).await.done());
}

// === rounds of a repeated-run cohort ===

/// The plan of the round cases: questions q1..q3, one arm `a` (cap 100),
/// 3 rounds opening 1 s apart, each with a 1.5 s window.
pub fn rounds_header(every_ms: i64) -> PlanHeader {
    let mut h = header();
    h.arms = vec![ArmPlan { id: "a".into(), concurrency: 100, pinned_version: "a-1".into(), ..ArmPlan::default() }];
    h.window_ms = 1_500;
    h.rounds = 3;
    h.round_every_ms = every_ms;
    h
}

async fn seeded_rounds(l: &dyn Ledger, every_ms: i64) {
    let order: Vec<String> = run_order(&["q1", "q2", "q3"], &["a"], 3, 99).iter().map(ToString::to_string).collect();
    let questions: Vec<(String, String)> = questions().into_iter().take(3).collect();
    assert_eq!(l.seed(&rounds_header(every_ms), &questions, &order, 0).await.unwrap(), SeedOutcome::Seeded);
}

fn repeats(batch: &LeaseBatch) -> Vec<u32> {
    batch.leases.iter().map(|g| g.repeat).collect()
}

/// Round k is leased only from its opening, (k-1) x every after the first
/// start; its own window closes its pending runs (not_run, window_closed)
/// while later rounds go on; a retry after its round closed is final; the
/// cohort's window is the last round's.
pub async fn rounds_open_on_their_schedule_with_their_own_windows(l: &dyn Ledger) {
    seeded_rounds(l, 1_000).await;
    let first = l.lease("w", 10, 0, TTL).await.unwrap();
    assert_eq!(repeats(&first), vec![1, 1, 1], "before the first start only round 1 can start the cohort");
    for g in &first.leases {
        assert!(l.finish("w", &lref(g), &completed(1), 2).await.unwrap());
    }
    assert_eq!(l.status().await.unwrap().window_end_ms, Some(2 * 1_000 + 1_500), "the last round's window");
    let early = l.lease("w", 10, 999, TTL).await.unwrap();
    assert!(early.leases.is_empty() && !early.closed, "round 2 is not open at +999 ms");
    let second = l.lease("w", 2, 1_000, TTL).await.unwrap();
    assert_eq!(repeats(&second), vec![2, 2], "round 2 opens at +1000 ms");

    // Round 2's window (1000..2500) closes its one run still pending.
    assert_eq!(l.close_window_if_due(2_499).await.unwrap(), 0);
    assert_eq!(l.close_window_if_due(2_500).await.unwrap(), 1);
    let closed: Vec<RunRow> = l.runs().await.unwrap().into_iter().filter(|r| r.state == RunStateKind::Final).collect();
    let not_run: Vec<&RunRow> = closed.iter().filter(|r| r.outcome == Some(Outcome::NotRun)).collect();
    assert_eq!(not_run.len(), 1);
    assert!(not_run[0].run_id.ends_with(":2") && not_run[0].reason == CloseReason::WindowClosed.as_str());
    assert!(l.events(100).await.unwrap().iter().any(|e| e.kind == "round_closed"), "logged");

    // Round 3 (2000..3500) is still open; round 2's leased runs still report.
    let third = l.lease("w", 10, 2_600, TTL).await.unwrap();
    assert_eq!(repeats(&third), vec![3, 3, 3]);
    let v = l
        .report_attempt("w", &lref(&second.leases[0]), &attempt(AttemptClass::ServerError, 2_700), 2_700)
        .await
        .unwrap();
    assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable), "no retry after its round's window");
    assert!(l.finish("w", &lref(&second.leases[1]), &completed(2_701), 2_702).await.unwrap(), "started inside");
    for g in &third.leases {
        assert!(l.finish("w", &lref(g), &completed(2_800), 2_801).await.unwrap());
    }
    let s = assert_counts_add_up(l).await;
    assert!(s.done());
    assert_eq!(s.by_outcome.get(&Outcome::Completed), Some(&7));
    assert_eq!((s.by_outcome.get(&Outcome::NotRun), s.by_outcome.get(&Outcome::Unavailable)), (Some(&1), Some(&1)));
}

/// An abort closes the runs of rounds that have not opened yet too.
pub async fn abort_closes_rounds_not_open_yet(l: &dyn Ledger) {
    seeded_rounds(l, 1_000).await;
    let first = l.lease("w", 10, 0, TTL).await.unwrap();
    assert_eq!(first.leases.len(), 3);
    assert_eq!(l.abort("stopped", 10).await.unwrap(), 6, "rounds 2 and 3, never opened");
    let s = assert_counts_add_up(l).await;
    assert_eq!(s.by_outcome.get(&Outcome::NotRun), Some(&6));
    assert!(l.lease("w", 10, 1_000, TTL).await.unwrap().leases.is_empty());
}

/// `every = 0`: every round opens at the first start, in one window.
pub async fn rounds_at_once_share_one_window(l: &dyn Ledger) {
    seeded_rounds(l, 0).await;
    let all = l.lease("w", 10, 0, TTL).await.unwrap();
    let mut reps = repeats(&all);
    reps.sort_unstable();
    assert_eq!(reps, vec![1, 1, 1, 2, 2, 2, 3, 3, 3]);
    assert_eq!(l.status().await.unwrap().window_end_ms, Some(1_500));
}

/// Generates one `#[tokio::test]` per conformance case for a ledger made
/// by `$make` (an async expression returning the ledger and a guard that
/// must live as long as the test).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            seed_is_idempotent,
            lease_follows_order_within_caps,
            finish_is_absorbing,
            an_attempt_sent_again_changes_nothing,
            a_replayed_attempt_is_kept_once_at_its_number,
            rebuild_restores_the_evidence_and_keeps_the_window,
            unfit_results_are_refused,
            not_run_for_a_leased_run_is_refused,
            a_batch_of_results_logs_a_final_event_per_run,
            seed_refuses_a_malformed_run_id,
            expiry_fences_out_the_lost_worker,
            retries_follow_the_policy,
            release_requeues_without_an_attempt,
            heartbeat_extends_and_names_lost_leases,
            window_close_finalises_pending_runs,
            lease_after_the_window_closes_it,
            paused_arms_are_skipped_and_resume_is_logged,
            seeded_accepted_versions_do_not_pause_the_arm,
            abort_stops_the_cohort,
            no_retry_after_the_cohort_closed,
            window_opens_at_the_first_start,
            automatic_lease_never_grants_a_manual_arm,
            manual_lease_grants_only_its_arm_in_order,
            manual_lease_refuses_other_arms,
            manual_runs_close_with_the_window,
            retry_after_holds_the_run_and_its_arm,
            auth_error_pauses_the_arm_and_keeps_the_budget,
            window_close_during_an_auth_pause_is_not_run,
            auth_error_after_abort_is_final,
            rounds_open_on_their_schedule_with_their_own_windows,
            abort_closes_rounds_not_open_yet,
            rounds_at_once_share_one_window,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (ledger, _guard) = $make.await;
                $crate::conformance::$case(&ledger).await;
            }
        )*
    };
}
