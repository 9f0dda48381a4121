//! The embedded ledger (SQLite): the [`Ledger`] for single-machine runs
//! (`cohort run`), one file next to the cohort.
//!
//! # Schema
//!
//! The schema lives in `sqlite_schema.sql` (version 2, kept in
//! `PRAGMA user_version`) and is applied on the first open; a version 1
//! file is migrated in place by `sqlite_migrate_1_2.sql`:
//!
//! - `cohort`: one row (id = 1) with the cohort name, the manifest hash, the
//!   [`PlanHeader`] as JSON, the last fencing token handed out, the window
//!   (start, end, when it was closed) and the abort reason. One typed row
//!   rather than a key-value table, so the mutable cohort state is read and
//!   written as one unit.
//! - `questions(id, text)` and `arms(id, position, concurrency,
//!   pinned_version, paused_reason, accepted_versions JSON, held_until_ms)`
//!   (`accepted_versions` seeded with [`super::ArmPlan::seeded_versions`], the
//!   pinned label and `cohort.toml`'s `accepted_versions`, then grown by
//!   each label accepted on resume; `held_until_ms` the hold a provider's
//!   Retry-After put on the arm).
//! - `runs`: one row per planned run, keyed by its position in the planned
//!   order, with its state (`pending`, `leased`, `final`), attempt count
//!   and how many of those were excused (`auth_error`),
//!   retry backoff (`not_before_ms`), current lease (token, worker, grant,
//!   expiry), first start, end, outcome, reason, record hash and observed
//!   version. Indexed on (state, position) for leasing and closing and on
//!   (state, expires_ms) for expiry.
//! - `attempts`: every recorded attempt (the [`AttemptRecord`] as JSON, its
//!   class in a column of its own for the counts by class).
//! - `discarded`: reports that arrived with a stale lease, as JSON.
//! - `events`: the audit log.
//! - `run_counts` (runs per arm, state and outcome), `attempt_counts` (per
//!   class) and `discarded_count`: what `status` reads.
//!
//! Whether an arm is manual is read from the plan header (JSON, `manual`
//! defaulting to false), so a ledger seeded before the flag existed needs
//! no migration and reads as automatic.
//!
//! Counts (by state, by outcome, by class, per arm) are stored, so that
//! `status`, which `cohort run` polls every few hundred milliseconds, costs
//! O(arms) rather than a scan of every run and attempt. They are updated
//! in the transaction of the change they count: `count_runs` by every
//! change of a run's state or outcome (lease, requeue, finish, finalise,
//! `close_pending`, which counts per arm and outcome rather than per run),
//! `record_attempt` and `discard`. `seed` writes each arm's pending count
//! with the runs; the 1 -> 2 migration fills them from the rows. Explicit
//! updates, not SQLite triggers: a trigger on the runs table made closing
//! the pending runs of a large cohort about 2.5 times slower (measured on
//! 200,000 runs with SQLite 3.40: 34 us per run instead of 14), where
//! `close_pending` does one count update per (arm, outcome). Moving more runs out of a bucket than it holds is
//! refused as corrupt; the test `stored_counts_follow_every_change`
//! recounts the rows after every kind of change.
//!
//! # Atomicity and durability
//!
//! Every [`Ledger`] method runs in one `BEGIN IMMEDIATE` transaction: a
//! run's state, its attempts, the cohort state and the audit events it
//! moves are committed together or not at all (an error or a panic rolls
//! the transaction back). IMMEDIATE takes the write lock at `BEGIN`, so a
//! read-then-write (the fencing check, the token counter) can never be
//! interleaved with another writer, even one in another process. The file
//! is in WAL mode with `synchronous = FULL`: a committed transaction
//! survives a process crash and a power loss, and reopening the file
//! resumes the cohort where it stood.
//!
//! # Threads
//!
//! Every call does its SQLite work on tokio's blocking pool
//! (`spawn_blocking`, in `blocking`), never on the runtime's worker
//! threads: a commit waits for its fsync, and in `cohort run` those
//! threads also serve the workers, the gRPC service and the judge proxy.
//!
//! The lifecycle rules are not re-implemented here: retries are decided by
//! [`RetryPolicy::decide`] and closing outcomes by [`closed_outcome`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use cohort_core::lifecycle::{CloseReason, RetryDecision, arm_hold_until, auth_pause_reason, closed_outcome};
use cohort_core::order::RunId;
use cohort_core::taxonomy::{AttemptClass, Outcome};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::{
    ArmStatus, AttemptRecord, AttemptVerdict, DiscardedReport, LeaseBatch, LeaseGrant, LeaseRef, LeaseScope, Ledger,
    LedgerError, LedgerEvent, PlanHeader, Rebuild, RunResult, RunRow, RunStateKind, SeedOutcome, Status, check_results,
    rebuilt_detail,
};

/// The schema, applied once to an empty file.
const SCHEMA: &str = include_str!("sqlite_schema.sql");

/// Brings a version 1 file to version 2 (excused attempts, arm holds).
const MIGRATE_1_2: &str = include_str!("sqlite_migrate_1_2.sql");

/// The schema version this code reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 2;

/// How long a call waits for another connection's write lock (another
/// process on the same file, e.g. `cohort status` or `cohort pause`) before
/// it fails with "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The embedded ledger. See the module documentation for the schema and
/// the atomicity guarantee.
pub struct SqliteLedger {
    /// Shared with the blocking task of each call (see [`blocking`]). A std
    /// (not tokio) Mutex: it is taken only on the blocking thread, for one
    /// synchronous SQLite transaction, never across an `.await`. SQLite
    /// serialises writers anyway; one connection avoids lock contention
    /// between our own calls.
    inner: Arc<Mutex<Inner>>,
    /// The file, for `Debug` and error messages; `None` in memory.
    path: Option<PathBuf>,
}

/// What the mutex guards.
struct Inner {
    conn: Connection,
    /// The seeded plan header, cached after its first committed read: it
    /// never changes once seeded, and lease and report need it on every
    /// call.
    header: Option<PlanHeader>,
}

impl fmt::Debug for SqliteLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLedger").field("path", &self.path).finish_non_exhaustive()
    }
}

// === impl SqliteLedger ===

impl SqliteLedger {
    /// Opens the ledger file at `path`, creating the file and its schema if
    /// missing; an existing ledger is resumed as it stands.
    pub fn open(path: &Path) -> Result<SqliteLedger, LedgerError> {
        let conn = Connection::open(path).sql()?;
        conn.busy_timeout(BUSY_TIMEOUT).sql()?;
        // WAL: readers (status from another process) never block the
        // coordinator's writes, and a commit appends to the log instead of
        // rewriting pages.
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).sql()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(LedgerError::Sqlite(format!(
                "{} cannot use the WAL journal (got {mode}): put the ledger on a local filesystem",
                path.display()
            )));
        }
        // FULL, not NORMAL: in WAL mode NORMAL skips the fsync at commit, so
        // a power loss may roll back the last commits. Here a rolled-back
        // `lease` or `finish` would hand the same run out again, a second
        // attempt SPEC section 3 forbids; an fsync per commit costs far less
        // than one run (minutes of model calls).
        conn.pragma_update(None, "synchronous", "FULL").sql()?;
        Self::init(conn, Some(path.to_path_buf()))
    }

    /// An ephemeral ledger in memory (tests, dry runs): nothing survives
    /// the process.
    pub fn in_memory() -> Result<SqliteLedger, LedgerError> {
        Self::init(Connection::open_in_memory().sql()?, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<SqliteLedger, LedgerError> {
        conn.pragma_update(None, "foreign_keys", "ON").sql()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).sql()?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0)).sql()?;
        match version {
            0 => tx.execute_batch(SCHEMA).sql()?,
            1 => tx.execute_batch(MIGRATE_1_2).sql()?,
            SCHEMA_VERSION => {}
            other => {
                return Err(LedgerError::Corrupt(format!(
                    "schema version {other}, this version reads {SCHEMA_VERSION}: use the cohort version that wrote it"
                )));
            }
        }
        tx.commit().sql()?;
        Ok(SqliteLedger { inner: Arc::new(Mutex::new(Inner { conn, header: None })), path })
    }

    /// Runs `f` in one IMMEDIATE transaction, committed if `f` succeeds and
    /// rolled back otherwise, on a blocking thread ([`blocking`]).
    async fn write<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>, &mut Option<PlanHeader>) -> Result<T, LedgerError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let mut guard = lock(&inner);
            let Inner { conn, header } = &mut *guard;
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).sql()?;
            let out = f(&tx, header)?;
            tx.commit().sql()?;
            Ok(out)
        })
        .await
    }

    /// Runs `f` in one read transaction (a consistent snapshot across the
    /// several queries of `status`), on a blocking thread ([`blocking`]).
    async fn read<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T, LedgerError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let mut guard = lock(&inner);
            let tx = guard.conn.transaction_with_behavior(TransactionBehavior::Deferred).sql()?;
            let out = f(&tx)?;
            tx.commit().sql()?;
            Ok(out)
        })
        .await
    }
}

/// The guarded connection. A poisoned lock is taken over: the panic that
/// poisoned it dropped its transaction, which rolled back, so the database
/// is as the last commit left it.
fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one ledger call's SQLite work on tokio's blocking pool, not on the
/// runtime's worker threads: a transaction waits for its fsync (and maybe
/// for another process's write lock, up to [`BUSY_TIMEOUT`]), and in
/// `cohort run` those threads also drive the workers, the gRPC service and
/// the judge proxy. A panic inside is re-raised in the caller, as when the
/// work ran inline. Once started, the work runs to its commit or rollback
/// even if the caller stops waiting (a dropped future): the transaction is
/// never cut off halfway, and an outcome the caller did not see is the
/// same as an answer lost on the wire (an unseen lease expires).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, LedgerError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(LedgerError::Sqlite(format!("the ledger call did not run (the runtime is shutting down): {e}"))),
    }
}

// === impl Ledger ===

#[async_trait]
impl Ledger for SqliteLedger {
    async fn seed(
        &self,
        header: &PlanHeader,
        questions: &[(String, String)],
        order: &[String],
        now_ms: i64,
    ) -> Result<SeedOutcome, LedgerError> {
        let (header, questions, order) = (header.clone(), questions.to_vec(), order.to_vec());
        self.write(move |tx, _| seed(tx, &header, &questions, &order, now_ms)).await
    }

    async fn rebuild(
        &self,
        header: &PlanHeader,
        questions: &[(String, String)],
        order: &[String],
        rebuilt: &Rebuild,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        let (header, questions, order, rebuilt) = (header.clone(), questions.to_vec(), order.to_vec(), rebuilt.clone());
        self.write(move |tx, _| rebuild(tx, &header, &questions, &order, &rebuilt, now_ms)).await
    }

    async fn lease_scoped(
        &self,
        worker: &str,
        scope: LeaseScope<'_>,
        max: u32,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<LeaseBatch, LedgerError> {
        let worker = worker.to_owned();
        let manual = match scope {
            LeaseScope::Automatic => None,
            LeaseScope::Manual(arm) => Some(arm.to_owned()),
        };
        self.write(move |tx, cache| {
            let plan = plan(tx, cache)?;
            let scope = manual.as_deref().map_or(LeaseScope::Automatic, LeaseScope::Manual);
            let eligible = eligible_arms(plan, scope)?;
            lease(tx, plan, &eligible, &worker, max, now_ms, ttl_ms)
        })
        .await
    }

    async fn leases_held(&self, worker: &str) -> Result<Vec<LeaseGrant>, LedgerError> {
        let worker = worker.to_owned();
        self.read(move |tx| {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT r.run_id, r.question_id, r.arm_id, r.rep, r.attempts, r.token, r.expires_ms, q.text \
                     FROM runs r JOIN questions q ON q.id = r.question_id \
                     WHERE r.state = 'leased' AND r.worker = ?1 ORDER BY r.position",
                )
                .sql()?;
            let mut rows = stmt.query(params![worker]).sql()?;
            let mut held = Vec::new();
            while let Some(row) = rows.next().sql()? {
                held.push(LeaseGrant {
                    run_id: row.get(0).sql()?,
                    question_id: row.get(1).sql()?,
                    arm_id: row.get(2).sql()?,
                    repeat: to_unsigned("repeat", row.get(3).sql()?)?,
                    attempt: to_unsigned("attempts", row.get(4).sql()?)?,
                    token: to_unsigned("token", row.get(5).sql()?)?,
                    expires_ms: row.get(6).sql()?,
                    question_text: row.get(7).sql()?,
                });
            }
            Ok(held)
        })
        .await
    }

    async fn heartbeat(
        &self,
        _worker: &str,
        leases: &[LeaseRef],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Vec<LeaseRef>, LedgerError> {
        // The fencing token alone identifies a lease: it is unique across
        // the cohort, so the worker name adds nothing to the check. A lease
        // whose time has passed but that `expire` has not reaped yet is
        // still current and is extended: its worker is evidently alive.
        let leases = leases.to_vec();
        self.write(move |tx, _| {
            let mut stmt = tx
                .prepare_cached("UPDATE runs SET expires_ms = ?3 WHERE run_id = ?1 AND state = 'leased' AND token = ?2")
                .sql()?;
            let mut lost = Vec::new();
            for lease in &leases {
                let extended = match i64::try_from(lease.token) {
                    Ok(token) => stmt.execute(params![lease.run_id, token, now_ms.saturating_add(ttl_ms)]).sql()? == 1,
                    Err(_) => false,
                };
                if !extended {
                    lost.push(lease.clone());
                }
            }
            Ok(lost)
        })
        .await
    }

    async fn report_attempt(
        &self,
        worker: &str,
        lease: &LeaseRef,
        attempt: &AttemptRecord,
        now_ms: i64,
    ) -> Result<AttemptVerdict, LedgerError> {
        let (worker, lease, attempt) = (worker.to_owned(), lease.clone(), attempt.clone());
        self.write(move |tx, cache| {
            let (worker, lease, attempt) = (worker.as_str(), &lease, &attempt);
            let plan = plan(tx, cache)?;
            if let Some(verdict) = attempt_again(tx, lease, attempt)? {
                return Ok(verdict);
            }
            let Some(run) = leased_run(tx, lease)? else {
                let report = discarded_report(worker, lease, "attempt", now_ms, Some(attempt.class), None);
                discard(tx, &report)?;
                return Ok(AttemptVerdict::Stale);
            };
            let record = AttemptRecord {
                worker: worker.to_owned(),
                attempt: run.attempts,
                token: lease.token,
                ..attempt.clone()
            };
            record_attempt(tx, &run.run_id, &record)?;
            apply_failure(tx, plan, &run, attempt, now_ms)
        })
        .await
    }

    async fn finish(
        &self,
        worker: &str,
        lease: &LeaseRef,
        result: &RunResult,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        check_results([(lease, result)])?;
        let (worker, lease, result) = (worker.to_owned(), lease.clone(), result.clone());
        self.write(move |tx, _| {
            let (worker, lease, result) = (worker.as_str(), &lease, &result);
            if result_again(tx, lease, result)? {
                return Ok(true);
            }
            let Some(run) = leased_run(tx, lease)? else {
                let report =
                    discarded_report(worker, lease, "result", now_ms, Some(result.attempt.class), Some(result.outcome));
                discard(tx, &report)?;
                return Ok(false);
            };
            let record = AttemptRecord {
                worker: worker.to_owned(),
                attempt: run.attempts,
                token: lease.token,
                ..result.attempt.clone()
            };
            record_attempt(tx, &run.run_id, &record)?;
            tx.execute(
                "UPDATE runs SET state = 'final', outcome = ?2, reason = ?3, record_sha256 = ?4, \
                 observed_version = ?5, ended_ms = ?6, expires_ms = 0 WHERE position = ?1",
                params![
                    run.position,
                    result.outcome.as_str(),
                    result.reason,
                    result.record_sha256,
                    result.observed_version,
                    now_ms
                ],
            )
            .sql()?;
            count_runs(tx, &run.arm_id, Bucket::Leased, Bucket::Final(result.outcome), 1)?;
            log_event(tx, now_ms, "final", &run.run_id, &final_detail(result.outcome, &result.reason))?;
            Ok(true)
        })
        .await
    }

    async fn release(&self, worker: &str, lease: &LeaseRef, now_ms: i64) -> Result<bool, LedgerError> {
        let (worker, lease) = (worker.to_owned(), lease.clone());
        self.write(move |tx, cache| {
            let Some(run) = leased_run(tx, &lease)? else {
                discard(tx, &discarded_report(&worker, &lease, "release", now_ms, None, None))?;
                return Ok(false);
            };
            // A release is not an attempt: the count goes back, and the run
            // keeps its place in the order with no backoff.
            requeue(tx, plan(tx, cache)?, &run, run.attempts.saturating_sub(1), 0, now_ms)?;
            Ok(true)
        })
        .await
    }

    async fn expire(&self, now_ms: i64) -> Result<u64, LedgerError> {
        self.write(move |tx, cache| {
            let expired: Vec<(LiveRun, i64)> = {
                let mut stmt = tx
                    .prepare_cached(&format!(
                        "SELECT {LIVE_RUN_COLUMNS}, expires_ms FROM runs \
                         WHERE state = 'leased' AND expires_ms <= ?1 ORDER BY expires_ms, position"
                    ))
                    .sql()?;
                let rows = stmt.query_map(params![now_ms], |row| Ok((LiveRun::from_row(row)?, row.get(9)?))).sql()?;
                rows.collect::<Result<_, _>>().sql()?
            };
            if expired.is_empty() {
                return Ok(0);
            }
            let plan = plan(tx, cache)?;
            for (run, expires_ms) in &expired {
                let record = AttemptRecord {
                    class: AttemptClass::WorkerLost,
                    http_status: 0,
                    detail: format!("lease expired at {expires_ms}"),
                    started_ms: run.leased_ms,
                    ended_ms: now_ms,
                    observed_version: None,
                    worker: run.worker.clone(),
                    attempt: run.attempts,
                    token: run.token,
                    retry_after_ms: None,
                };
                record_attempt(tx, &run.run_id, &record)?;
                log_event(
                    tx,
                    now_ms,
                    "expired",
                    &run.run_id,
                    &format!("worker {:?}, token {}, attempt {}", run.worker, run.token, run.attempts),
                )?;
                apply_failure(tx, plan, run, &record, now_ms)?;
            }
            Ok(expired.len() as u64)
        })
        .await
    }

    async fn close_window_if_due(&self, now_ms: i64) -> Result<u64, LedgerError> {
        self.write(move |tx, cache| {
            let Some(cohort) = cohort_state(tx)? else {
                return Ok(0);
            };
            let plan = plan(tx, cache)?;
            if !cohort.window_due(now_ms) {
                return close_rounds_if_due(tx, plan, &cohort, now_ms);
            }
            Ok(close_window_if_due(tx, plan, &cohort, now_ms)?.unwrap_or(0))
        })
        .await
    }

    async fn pause_arm(&self, arm: &str, reason: &str, now_ms: i64) -> Result<(), LedgerError> {
        let (arm, reason) = (arm.to_owned(), reason.to_owned());
        self.write(move |tx, _| {
            let (arm, reason) = (arm.as_str(), reason.as_str());
            let changed = tx.execute("UPDATE arms SET paused_reason = ?2 WHERE id = ?1", params![arm, reason]).sql()?;
            if changed == 0 {
                return Err(LedgerError::UnknownArm(arm.to_owned()));
            }
            log_event(tx, now_ms, "arm_paused", "", &format!("arm {arm}: {reason}"))?;
            tracing::warn!(arm, reason, "arm paused");
            Ok(())
        })
        .await
    }

    async fn resume_arm(
        &self,
        arm: &str,
        acknowledgement: &str,
        accept_version: Option<&str>,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        let (arm, acknowledgement) = (arm.to_owned(), acknowledgement.to_owned());
        let accept_version = accept_version.map(str::to_owned);
        self.write(move |tx, _| {
            let (arm, acknowledgement) = (arm.as_str(), acknowledgement.as_str());
            let accept_version = accept_version.as_deref();
            let accepted: Option<String> = tx
                .query_row("SELECT accepted_versions FROM arms WHERE id = ?1", params![arm], |row| row.get(0))
                .optional()
                .sql()?;
            let accepted = accepted.ok_or_else(|| LedgerError::UnknownArm(arm.to_owned()))?;
            let mut accepted: Vec<String> = from_json("accepted versions", &accepted)?;
            if let Some(version) = accept_version
                && !accepted.iter().any(|v| v == version)
            {
                accepted.push(version.to_owned());
            }
            tx.execute(
                "UPDATE arms SET paused_reason = NULL, accepted_versions = ?2 WHERE id = ?1",
                params![arm, to_json(&accepted)?],
            )
            .sql()?;
            let mut detail = format!("arm {arm}: {acknowledgement}");
            if let Some(version) = accept_version {
                detail.push_str(&format!("; accepted version {version}"));
            }
            log_event(tx, now_ms, "arm_resumed", "", &detail)?;
            tracing::info!(arm, acknowledgement, accept_version, "arm resumed");
            Ok(())
        })
        .await
    }

    async fn abort(&self, reason: &str, now_ms: i64) -> Result<u64, LedgerError> {
        let reason = reason.to_owned();
        self.write(move |tx, _| {
            let reason = reason.as_str();
            cohort_state(tx)?.ok_or(LedgerError::NotSeeded)?;
            // The first reason stands: a second abort only sweeps up.
            tx.execute("UPDATE cohort SET aborted = COALESCE(aborted, ?1) WHERE id = 1", params![reason]).sql()?;
            let closed = close_pending(tx, Closing::Abort, now_ms, u32::MAX)?;
            log_event(tx, now_ms, "aborted", "", &format!("{reason} ({closed} pending runs finalised)"))?;
            tracing::warn!(reason, closed, "cohort aborted");
            Ok(closed)
        })
        .await
    }

    async fn status(&self) -> Result<Status, LedgerError> {
        self.read(status).await
    }

    async fn runs(&self) -> Result<Vec<RunRow>, LedgerError> {
        self.read(|tx| {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT run_id, position, arm_id, state, attempts, outcome, reason, record_sha256, \
                     observed_version, started_ms, ended_ms FROM runs ORDER BY position",
                )
                .sql()?;
            let mut rows = stmt.query([]).sql()?;
            let mut runs = Vec::new();
            while let Some(row) = rows.next().sql()? {
                let outcome: Option<String> = row.get(5).sql()?;
                runs.push(RunRow {
                    run_id: row.get(0).sql()?,
                    position: to_unsigned("position", row.get(1).sql()?)?,
                    arm_id: row.get(2).sql()?,
                    state: parse_state(&row.get::<_, String>(3).sql()?)?,
                    attempts: to_unsigned("attempts", row.get(4).sql()?)?,
                    outcome: outcome.as_deref().map(parse_outcome).transpose()?,
                    reason: row.get(6).sql()?,
                    record_sha256: row.get(7).sql()?,
                    observed_version: row.get(8).sql()?,
                    started_ms: row.get(9).sql()?,
                    ended_ms: row.get(10).sql()?,
                });
            }
            Ok(runs)
        })
        .await
    }

    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, LedgerError> {
        let run_id = run_id.to_owned();
        self.read(move |tx| {
            let mut stmt = tx.prepare_cached("SELECT record FROM attempts WHERE run_id = ?1 ORDER BY id").sql()?;
            let records = stmt.query_map(params![run_id], |row| row.get::<_, String>(0)).sql()?;
            records.map(|json| from_json("attempt record", &json.sql()?)).collect()
        })
        .await
    }

    /// One read transaction for the whole list (one trip to the blocking
    /// pool and one snapshot, instead of one of each per run), the cached
    /// statement run per run id on the `attempts_by_run` index.
    async fn attempts_of(&self, run_ids: &[&str]) -> Result<Vec<Vec<AttemptRecord>>, LedgerError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let run_ids: Vec<String> = run_ids.iter().map(|&id| id.to_owned()).collect();
        self.read(move |tx| {
            let mut stmt = tx.prepare_cached("SELECT record FROM attempts WHERE run_id = ?1 ORDER BY id").sql()?;
            run_ids
                .iter()
                .map(|run_id| -> Result<Vec<AttemptRecord>, LedgerError> {
                    let records = stmt.query_map(params![run_id], |row| row.get::<_, String>(0)).sql()?;
                    records.map(|json| from_json("attempt record", &json.sql()?)).collect()
                })
                .collect()
        })
        .await
    }

    async fn discarded(&self) -> Result<Vec<DiscardedReport>, LedgerError> {
        self.read(|tx| {
            let mut stmt = tx.prepare_cached("SELECT record FROM discarded ORDER BY id").sql()?;
            let records = stmt.query_map([], |row| row.get::<_, String>(0)).sql()?;
            records.map(|json| from_json("discarded report", &json.sql()?)).collect()
        })
        .await
    }

    async fn events(&self, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.read(move |tx| {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT at_ms, kind, run_id, detail FROM \
                     (SELECT * FROM events ORDER BY seq DESC LIMIT ?1) ORDER BY seq",
                )
                .sql()?;
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let events = stmt
                .query_map(params![limit], |row| {
                    Ok(LedgerEvent { at_ms: row.get(0)?, kind: row.get(1)?, run_id: row.get(2)?, detail: row.get(3)? })
                })
                .sql()?;
            events.collect::<Result<_, _>>().sql()
        })
        .await
    }
}

// === the operations, inside their transaction ===

fn seed(
    tx: &Transaction<'_>,
    header: &PlanHeader,
    questions: &[(String, String)],
    order: &[String],
    now_ms: i64,
) -> Result<SeedOutcome, LedgerError> {
    let existing: Option<(String, String)> = tx
        .query_row("SELECT name, manifest_sha256 FROM cohort WHERE id = 1", [], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .sql()?;
    if let Some((found_cohort, found)) = existing {
        if found == header.manifest_sha256 {
            return Ok(SeedOutcome::AlreadySeeded);
        }
        return Err(LedgerError::ManifestMismatch { found_cohort, found, expected: header.manifest_sha256.clone() });
    }

    // The plan is valid by construction; a mistake here would otherwise
    // surface as a bare foreign-key failure.
    let question_ids: HashSet<&str> = questions.iter().map(|(id, _)| id.as_str()).collect();
    let arm_ids: HashSet<&str> = header.arms.iter().map(|a| a.id.as_str()).collect();
    for run_id in order {
        let (question, arm, _) = RunId::split(run_id)?;
        if !arm_ids.contains(arm) {
            return Err(LedgerError::UnknownArm(arm.to_owned()));
        }
        if !question_ids.contains(question) {
            return Err(LedgerError::Corrupt(format!("the plan's run {run_id} names a question that is not in it")));
        }
    }

    tx.execute(
        "INSERT INTO cohort (id, name, manifest_sha256, header) VALUES (1, ?1, ?2, ?3)",
        params![header.cohort, header.manifest_sha256, to_json(header)?],
    )
    .sql()?;
    {
        let mut stmt = tx.prepare_cached("INSERT INTO questions (id, text) VALUES (?1, ?2)").sql()?;
        for (id, text) in questions {
            stmt.execute(params![id, text]).sql()?;
        }
    }
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO arms (id, position, concurrency, pinned_version, accepted_versions) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .sql()?;
        for (position, arm) in header.arms.iter().enumerate() {
            let accepted = to_json(&arm.seeded_versions())?;
            stmt.execute(params![arm.id, position as i64, arm.concurrency, arm.pinned_version, accepted]).sql()?;
        }
    }
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO runs (position, run_id, question_id, arm_id, rep, state) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending')",
            )
            .sql()?;
        for (position, run_id) in order.iter().enumerate() {
            let (question, arm, repeat) = RunId::split(run_id)?;
            stmt.execute(params![position as i64, run_id, question, arm, repeat]).sql()?;
        }
    }
    // The runs' counts: every run starts pending (the triggers count what
    // follows). Counted here rather than by an insert trigger, so seeding
    // a large plan does one upsert per arm, not per run.
    {
        let mut pending: HashMap<&str, i64> = header.arms.iter().map(|a| (a.id.as_str(), 0)).collect();
        for run_id in order {
            let (_, arm, _) = RunId::split(run_id)?;
            *pending.entry(arm).or_default() += 1;
        }
        let mut stmt = tx
            .prepare_cached("INSERT INTO run_counts (arm_id, state, outcome, n) VALUES (?1, 'pending', '', ?2)")
            .sql()?;
        for (arm, n) in pending {
            stmt.execute(params![arm, n]).sql()?;
        }
    }
    log_event(
        tx,
        now_ms,
        "seeded",
        "",
        &format!("cohort {}, manifest {}, {} runs", header.cohort, header.manifest_sha256, order.len()),
    )?;
    Ok(SeedOutcome::Seeded)
}

/// [`Ledger::rebuild`] in one transaction: nothing of it is seen until all
/// of it is written.
fn rebuild(
    tx: &Transaction<'_>,
    header: &PlanHeader,
    questions: &[(String, String)],
    order: &[String],
    rebuilt: &Rebuild,
    now_ms: i64,
) -> Result<(), LedgerError> {
    let held: Option<String> =
        tx.query_row("SELECT name FROM cohort WHERE id = 1", [], |r| r.get(0)).optional().sql()?;
    if let Some(cohort) = held {
        return Err(LedgerError::NotEmpty { cohort });
    }
    seed(tx, header, questions, order, now_ms)?;
    let planned: HashSet<&str> = order.iter().map(String::as_str).collect();
    let mut finals = 0;
    for run in &rebuilt.runs {
        if !planned.contains(run.run_id.as_str()) {
            return Err(LedgerError::Corrupt(format!("the rebuilt run {} is not in the plan", run.run_id)));
        }
        let (_, arm, _) = RunId::split(&run.run_id)?;
        for a in &run.attempts {
            record_attempt(tx, &run.run_id, a)?;
        }
        let attempts = run.attempts.iter().map(|a| a.attempt).max().unwrap_or(0).max(run.attempts.len() as u32);
        let excused = run.attempts.iter().filter(|a| cohort_core::lifecycle::excused(a.class)).count() as i64;
        let started = run.attempts.first().map_or(0, |a| a.started_ms);
        // The last lease's token and holder, where the evidence names them:
        // a journal's replay of its report is then the same report again.
        let (token, worker) = run.attempts.last().map_or((0, ""), |a| (a.token, a.worker.as_str()));
        let token = i64::try_from(token).map_err(|_| LedgerError::Corrupt(format!("token {token}")))?;
        tx.execute(
            "UPDATE runs SET attempts = ?2, excused = ?3, started_ms = ?4, token = ?5, worker = ?6 WHERE run_id = ?1",
            params![run.run_id, attempts, excused, started, token, worker],
        )
        .sql()?;
        if let Some(r) = &run.result {
            let ended = run.attempts.last().map_or(now_ms, |a| a.ended_ms);
            tx.execute(
                "UPDATE runs SET state = 'final', ended_ms = ?2, outcome = ?3, reason = ?4, record_sha256 = ?5, \
                 observed_version = ?6 WHERE run_id = ?1",
                params![run.run_id, ended, r.outcome.as_str(), r.reason, r.record_sha256, r.observed_version],
            )
            .sql()?;
            count_runs(tx, arm, Bucket::Pending, Bucket::Final(r.outcome), 1)?;
            log_event(tx, now_ms, "final", &run.run_id, &final_detail(r.outcome, &r.reason))?;
            finals += 1;
        }
    }
    let token = i64::try_from(rebuilt.token_floor)
        .map_err(|_| LedgerError::Corrupt(format!("token floor {}", rebuilt.token_floor)))?;
    tx.execute(
        "UPDATE cohort SET window_start_ms = ?1, window_end_ms = ?2, last_token = ?3 WHERE id = 1",
        params![rebuilt.window_start_ms, rebuilt.window_start_ms.map(|s| header.window_end_ms(s)), token],
    )
    .sql()?;
    log_event(tx, now_ms, "rebuilt", "", &rebuilt_detail(rebuilt, finals))?;
    Ok(())
}

/// One arm's room for leases during a lease call.
struct ArmSlot {
    /// Paused, or held by a provider's Retry-After until after now.
    paused: bool,
    /// Leases it may still take (its cap minus its current leases).
    free: u32,
}

impl ArmSlot {
    fn blocked(&self) -> bool {
        self.paused || self.free == 0
    }
}

/// The arms a lease of `scope` may grant from: every automatic arm, or the
/// one manual arm named (an unknown or automatic arm is refused).
fn eligible_arms(plan: &PlanHeader, scope: LeaseScope<'_>) -> Result<HashSet<String>, LedgerError> {
    match scope {
        LeaseScope::Automatic => Ok(plan.arms.iter().filter(|a| !a.manual).map(|a| a.id.clone()).collect()),
        LeaseScope::Manual(id) => match plan.arms.iter().find(|a| a.id == id) {
            None => Err(LedgerError::UnknownArm(id.to_owned())),
            Some(arm) if !arm.manual => Err(LedgerError::NotManual(id.to_owned())),
            Some(arm) => Ok(HashSet::from([arm.id.clone()])),
        },
    }
}

fn lease(
    tx: &Transaction<'_>,
    plan: &PlanHeader,
    eligible: &HashSet<String>,
    worker: &str,
    max: u32,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<LeaseBatch, LedgerError> {
    let cohort = cohort_state(tx)?.ok_or(LedgerError::NotSeeded)?;
    // Closing is part of leasing: no reconcile loop has to run first.
    if close_window_if_due(tx, plan, &cohort, now_ms)?.is_some() || cohort.aborted.is_some() {
        return Ok(LeaseBatch { leases: Vec::new(), closed: true, done: all_final(tx)? });
    }

    let mut arms: HashMap<String, ArmSlot> = HashMap::new();
    {
        let mut stmt = tx
            .prepare_cached(
                "SELECT a.id, a.paused_reason IS NOT NULL OR COALESCE(a.held_until_ms, 0) > ?1, a.concurrency, \
                 COALESCE((SELECT c.n FROM run_counts c \
                           WHERE c.arm_id = a.id AND c.state = 'leased' AND c.outcome = ''), 0) FROM arms a",
            )
            .sql()?;
        let mut rows = stmt.query(params![now_ms]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let id: String = row.get(0).sql()?;
            if !eligible.contains(&id) {
                // Out of this call's scope: its runs are skipped below.
                continue;
            }
            let cap: u32 = to_unsigned("concurrency", row.get(2).sql()?)?;
            let leased: u32 = to_unsigned("leased count", row.get(3).sql()?)?;
            arms.insert(id, ArmSlot { paused: row.get(1).sql()?, free: cap.saturating_sub(leased) });
        }
    }
    let mut blocked = arms.values().filter(|slot| slot.blocked()).count();

    // Walk pending runs in order through the (state, position) index: the
    // work is the runs granted plus the runs skipped before the batch is
    // full or every arm is blocked, never the whole table.
    let mut picked: Vec<PendingRun> = Vec::new();
    if max > 0 && blocked < arms.len() {
        let mut stmt = tx
            .prepare_cached(
                "SELECT position, run_id, question_id, arm_id, rep, attempts FROM runs \
                 WHERE state = 'pending' AND not_before_ms <= ?1 AND rep <= ?2 ORDER BY position",
            )
            .sql()?;
        // A round's runs are leased only once it has opened (its frozen
        // start); before the first start only round 1 can start the cohort.
        let rounds_open = plan.rounds_open(cohort.window_start_ms, now_ms);
        let mut rows = stmt.query(params![now_ms, rounds_open]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let arm_id: String = row.get(3).sql()?;
            let Some(slot) = arms.get_mut(&arm_id) else { continue };
            if slot.blocked() {
                continue;
            }
            slot.free -= 1;
            if slot.blocked() {
                blocked += 1;
            }
            picked.push(PendingRun {
                position: row.get(0).sql()?,
                run_id: row.get(1).sql()?,
                question_id: row.get(2).sql()?,
                arm_id,
                repeat: to_unsigned("repeat", row.get(4).sql()?)?,
                attempts: to_unsigned("attempts", row.get(5).sql()?)?,
            });
            if picked.len() as u64 >= u64::from(max) || blocked == arms.len() {
                break;
            }
        }
    }

    if picked.is_empty() {
        let done = all_final(tx)?;
        return Ok(LeaseBatch { leases: Vec::new(), closed: done, done });
    }

    // SPEC section 3: the window runs from the first start, so it opens
    // with the first lease actually granted.
    if cohort.window_start_ms.is_none() {
        let end = plan.window_end_ms(now_ms);
        tx.execute("UPDATE cohort SET window_start_ms = ?1, window_end_ms = ?2 WHERE id = 1", params![now_ms, end])
            .sql()?;
        log_event(tx, now_ms, "window_opened", "", &format!("closes at {end}"))?;
        tracing::info!(start_ms = now_ms, end_ms = end, "collection window opened");
    }

    let expires_ms = now_ms.saturating_add(ttl_ms);
    let mut token = cohort.last_token;
    let mut leases = Vec::with_capacity(picked.len());
    {
        let mut grant = tx
            .prepare_cached(
                "UPDATE runs SET state = 'leased', attempts = attempts + 1, token = ?2, worker = ?3, \
                 leased_ms = ?4, expires_ms = ?5, \
                 started_ms = CASE WHEN attempts = excused THEN ?4 ELSE started_ms END \
                 WHERE position = ?1",
            )
            .sql()?;
        let mut per_arm: HashMap<&str, i64> = HashMap::new();
        for run in &picked {
            *per_arm.entry(run.arm_id.as_str()).or_default() += 1;
        }
        for (arm, n) in per_arm {
            count_runs(tx, arm, Bucket::Pending, Bucket::Leased, n)?;
        }
        let mut text = tx.prepare_cached("SELECT text FROM questions WHERE id = ?1").sql()?;
        for run in picked {
            token += 1;
            grant.execute(params![run.position, token, worker, now_ms, expires_ms]).sql()?;
            let question_text: String = text.query_row(params![run.question_id], |row| row.get(0)).sql()?;
            leases.push(LeaseGrant {
                run_id: run.run_id,
                question_id: run.question_id,
                arm_id: run.arm_id,
                repeat: run.repeat,
                attempt: run.attempts + 1,
                token: to_unsigned("token", token)?,
                question_text,
                expires_ms,
            });
        }
    }
    tx.execute("UPDATE cohort SET last_token = ?1 WHERE id = 1", params![token]).sql()?;
    Ok(LeaseBatch { leases, closed: false, done: false })
}

/// A pending run picked for a lease.
struct PendingRun {
    position: i64,
    run_id: String,
    question_id: String,
    arm_id: String,
    repeat: u32,
    attempts: u32,
}

/// The queries `status` runs, named so that the test
/// `status_reads_counts_not_runs` can check every one of them with
/// `EXPLAIN QUERY PLAN`: none reads the runs or attempts tables, so status
/// costs O(arms) however large the cohort.
const STATUS_COHORT: &str = "SELECT name, manifest_sha256, header FROM cohort WHERE id = 1";
const STATUS_ARMS: &str = "SELECT id, paused_reason, accepted_versions, held_until_ms FROM arms ORDER BY position";
const STATUS_RUN_COUNTS: &str = "SELECT arm_id, state, outcome, n FROM run_counts WHERE n <> 0";
const STATUS_ATTEMPT_COUNTS: &str = "SELECT class, n FROM attempt_counts WHERE n <> 0";
const STATUS_DISCARDED: &str = "SELECT n FROM discarded_count WHERE id = 1";
#[cfg(test)]
const STATUS_QUERIES: [&str; 6] =
    [STATUS_COHORT, COHORT_STATE, STATUS_ARMS, STATUS_RUN_COUNTS, STATUS_ATTEMPT_COUNTS, STATUS_DISCARDED];

/// The cohort's state and counts, read from the count tables the triggers
/// keep (see `sqlite_schema.sql`), never by a scan of the runs.
fn status(tx: &Transaction<'_>) -> Result<Status, LedgerError> {
    let (cohort, manifest_sha256, header): (String, String, String) = tx
        .query_row(STATUS_COHORT, [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()
        .sql()?
        .ok_or(LedgerError::NotSeeded)?;
    let state = cohort_state(tx)?.ok_or(LedgerError::NotSeeded)?;
    let mut status = Status {
        cohort,
        manifest_sha256,
        window_start_ms: state.window_start_ms,
        window_end_ms: state.window_end_ms,
        aborted: state.aborted,
        ..Status::default()
    };

    let header: PlanHeader = from_json("plan header", &header)?;
    let manual: HashSet<&str> = header.arms.iter().filter(|a| a.manual).map(|a| a.id.as_str()).collect();
    let mut arms: Vec<ArmStatus> = Vec::new();
    {
        let mut stmt = tx.prepare_cached(STATUS_ARMS).sql()?;
        let mut rows = stmt.query([]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let id: String = row.get(0).sql()?;
            arms.push(ArmStatus {
                manual: manual.contains(id.as_str()),
                id,
                paused: row.get(1).sql()?,
                accepted_versions: from_json("accepted versions", &row.get::<_, String>(2).sql()?)?,
                held_until_ms: row.get(3).sql()?,
                ..ArmStatus::default()
            });
        }
    }
    let arm_index: HashMap<String, usize> = arms.iter().enumerate().map(|(i, a)| (a.id.clone(), i)).collect();
    let arm_of = |id: &str| {
        arm_index
            .get(id)
            .copied()
            .ok_or_else(|| LedgerError::Corrupt(format!("a run names arm {id:?}, not in the plan")))
    };

    {
        let mut stmt = tx.prepare_cached(STATUS_RUN_COUNTS).sql()?;
        let mut rows = stmt.query([]).sql()?;
        while let Some(row) = rows.next().sql()? {
            let arm = arm_of(&row.get::<_, String>(0).sql()?)?;
            let state = parse_state(&row.get::<_, String>(1).sql()?)?;
            let outcome: String = row.get(2).sql()?;
            let n: u64 = to_unsigned("run count", row.get(3).sql()?)?;
            status.planned += n;
            arms[arm].planned += n;
            match state {
                RunStateKind::Pending => status.pending += n,
                RunStateKind::Leased => {
                    status.leased += n;
                    arms[arm].leased += n;
                }
                RunStateKind::Final => {
                    status.finished += n;
                    if outcome.is_empty() {
                        return Err(LedgerError::Corrupt("a final run has no outcome".to_owned()));
                    }
                    let outcome = parse_outcome(&outcome)?;
                    *status.by_outcome.entry(outcome).or_default() += n;
                    *arms[arm].by_outcome.entry(outcome).or_default() += n;
                }
            }
        }
    }
    {
        let mut stmt = tx.prepare_cached(STATUS_ATTEMPT_COUNTS).sql()?;
        let mut rows = stmt.query([]).sql()?;
        let mut by_class = BTreeMap::new();
        while let Some(row) = rows.next().sql()? {
            let class = parse_class(&row.get::<_, String>(0).sql()?)?;
            by_class.insert(class, to_unsigned("attempt count", row.get(1).sql()?)?);
        }
        status.attempts_by_class = by_class;
    }
    status.discarded = to_unsigned("discarded count", tx.query_row(STATUS_DISCARDED, [], |row| row.get(0)).sql()?)?;
    status.arms = arms;
    Ok(status)
}

// === the lifecycle moves shared by the operations ===

/// The mutable cohort state (the `cohort` row without the plan).
struct CohortState {
    last_token: i64,
    window_start_ms: Option<i64>,
    window_end_ms: Option<i64>,
    window_closed: bool,
    aborted: Option<String>,
    /// Rounds `1..=n` whose own window has been closed.
    rounds_closed: u32,
}

impl CohortState {
    /// Whether the window has opened and its end has come.
    fn window_due(&self, now_ms: i64) -> bool {
        self.window_end_ms.is_some_and(|end| now_ms >= end)
    }
}

/// The query [`cohort_state`] runs.
const COHORT_STATE: &str = "SELECT last_token, window_start_ms, window_end_ms, window_closed_ms IS NOT NULL, \
                            aborted, rounds_closed FROM cohort WHERE id = 1";

fn cohort_state(conn: &Connection) -> Result<Option<CohortState>, LedgerError> {
    conn.query_row(COHORT_STATE, [], |row| {
        Ok(CohortState {
            last_token: row.get(0)?,
            window_start_ms: row.get(1)?,
            window_end_ms: row.get(2)?,
            window_closed: row.get(3)?,
            aborted: row.get(4)?,
            rounds_closed: row.get(5)?,
        })
    })
    .optional()
    .sql()
}

/// The seeded plan header, read once and then cached (it never changes).
fn plan<'h>(conn: &Connection, cache: &'h mut Option<PlanHeader>) -> Result<&'h PlanHeader, LedgerError> {
    if cache.is_none() {
        let json: Option<String> =
            conn.query_row("SELECT header FROM cohort WHERE id = 1", [], |row| row.get(0)).optional().sql()?;
        *cache = Some(from_json("plan header", &json.ok_or(LedgerError::NotSeeded)?)?);
    }
    cache.as_ref().ok_or(LedgerError::NotSeeded)
}

/// Every planned run has its final outcome.
fn all_final(conn: &Connection) -> Result<bool, LedgerError> {
    // Two EXISTS probes of the state index, not a count of the open runs.
    conn.query_row(
        "SELECT NOT EXISTS (SELECT 1 FROM runs WHERE state = 'pending') \
         AND NOT EXISTS (SELECT 1 FROM runs WHERE state = 'leased')",
        [],
        |row| row.get(0),
    )
    .sql()
}

/// Closes the window if it has opened and its end has come: every pending
/// run gets its closing outcome. `None` when not due; otherwise how many
/// runs it finalised (0 when it was already closed). The `window_closed`
/// event is logged once.
fn close_window_if_due(
    conn: &Connection,
    plan: &PlanHeader,
    cohort: &CohortState,
    now_ms: i64,
) -> Result<Option<u64>, LedgerError> {
    if !cohort.window_due(now_ms) {
        close_rounds_if_due(conn, plan, cohort, now_ms)?;
        return Ok(None);
    }
    // The cohort's window closes every round still open with it.
    let closed = close_pending(conn, Closing::Window, now_ms, u32::MAX)?;
    if !cohort.window_closed {
        conn.execute("UPDATE cohort SET window_closed_ms = ?1 WHERE id = 1", params![now_ms]).sql()?;
        log_event(conn, now_ms, "window_closed", "", &format!("{closed} pending runs finalised"))?;
        tracing::info!(closed, "collection window closed");
    }
    Ok(Some(closed))
}

/// Closes the rounds whose own window has passed before the cohort's
/// (a repeated-run cohort with a schedule): their pending runs get their
/// closing outcome as at the window's end, once per round (`round_closed`
/// is logged). Returns how many runs it finalised.
fn close_rounds_if_due(
    conn: &Connection,
    plan: &PlanHeader,
    cohort: &CohortState,
    now_ms: i64,
) -> Result<u64, LedgerError> {
    let due = plan.rounds_closed(cohort.window_start_ms, now_ms);
    // The last round closes with the cohort's window.
    if due <= cohort.rounds_closed || due >= plan.rounds {
        return Ok(0);
    }
    let closed = close_pending(conn, Closing::Window, now_ms, due)?;
    conn.execute("UPDATE cohort SET rounds_closed = ?1 WHERE id = 1", params![due]).sql()?;
    for round in cohort.rounds_closed + 1..=due {
        log_event(conn, now_ms, "round_closed", "", &format!("round {round}'s window closed"))?;
    }
    tracing::info!(rounds = due, closed, "round windows closed");
    Ok(closed)
}

/// What is closing the pending runs.
#[derive(Clone, Copy)]
enum Closing {
    /// The window: `arm_paused` for the runs of a paused arm, else
    /// `window_closed`.
    Window,
    Abort,
}

/// Finalises every pending run of rounds `1..=max_round` with
/// [`closed_outcome`]; returns how many.
fn close_pending(conn: &Connection, closing: Closing, now_ms: i64, max_round: u32) -> Result<u64, LedgerError> {
    let paused = paused_arms(conn)?;
    let pending: Vec<(i64, String, u32)> = {
        let mut stmt = conn
            .prepare_cached(
                "SELECT position, arm_id, attempts - excused FROM runs WHERE state = 'pending' AND rep <= ?1 \
                 ORDER BY position",
            )
            .sql()?;
        let mut rows = stmt.query(params![max_round]).sql()?;
        let mut pending = Vec::new();
        while let Some(row) = rows.next().sql()? {
            pending.push((row.get(0).sql()?, row.get(1).sql()?, to_unsigned("attempts", row.get(2).sql()?)?));
        }
        pending
    };
    let mut stmt = conn
        .prepare_cached(
            "UPDATE runs SET state = 'final', outcome = ?2, reason = ?3, ended_ms = ?4, not_before_ms = 0 \
             WHERE position = ?1",
        )
        .sql()?;
    // Counted per (arm, outcome), one update each, not one per run: a
    // window closing on a large cohort finalises most of its runs here.
    let mut moved: HashMap<(&str, Outcome), i64> = HashMap::new();
    for (position, arm, counted) in &pending {
        let reason = match closing {
            Closing::Abort => CloseReason::Aborted,
            Closing::Window if paused.contains(arm) => CloseReason::ArmPaused,
            Closing::Window => CloseReason::WindowClosed,
        };
        let outcome = closed_outcome(*counted);
        stmt.execute(params![position, outcome.as_str(), reason.as_str(), now_ms]).sql()?;
        *moved.entry((arm.as_str(), outcome)).or_default() += 1;
    }
    for ((arm, outcome), n) in moved {
        count_runs(conn, arm, Bucket::Pending, Bucket::Final(outcome), n)?;
    }
    Ok(pending.len() as u64)
}

fn paused_arms(conn: &Connection) -> Result<HashSet<String>, LedgerError> {
    let mut stmt = conn.prepare_cached("SELECT id FROM arms WHERE paused_reason IS NOT NULL").sql()?;
    let ids = stmt.query_map([], |row| row.get(0)).sql()?;
    ids.collect::<Result<_, _>>().sql()
}

/// A leased run, as the fencing check reads it.
#[derive(Clone)]
struct LiveRun {
    position: i64,
    run_id: String,
    arm_id: String,
    attempts: u32,
    token: u64,
    worker: String,
    leased_ms: i64,
    started_ms: i64,
    /// Of `attempts`, the excused ones (auth_error).
    excused: u32,
}

impl LiveRun {
    /// The attempts that count against the retry budget.
    fn counted(&self) -> u32 {
        self.attempts.saturating_sub(self.excused)
    }
}

/// The columns [`LiveRun::from_row`] reads, in order.
const LIVE_RUN_COLUMNS: &str = "position, run_id, arm_id, attempts, token, worker, leased_ms, started_ms, excused";

impl LiveRun {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<LiveRun> {
        let attempts: i64 = row.get(3)?;
        let token: i64 = row.get(4)?;
        Ok(LiveRun {
            position: row.get(0)?,
            run_id: row.get(1)?,
            arm_id: row.get(2)?,
            attempts: u32::try_from(attempts).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(3, attempts))?,
            token: u64::try_from(token).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(4, token))?,
            worker: row.get(5)?,
            leased_ms: row.get(6)?,
            started_ms: row.get(7)?,
            excused: {
                let excused: i64 = row.get(8)?;
                u32::try_from(excused).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(8, excused))?
            },
        })
    }
}

/// The fencing check: the run, if `lease` is its current lease.
fn leased_run(conn: &Connection, lease: &LeaseRef) -> Result<Option<LiveRun>, LedgerError> {
    // A token beyond i64 was never handed out: stale.
    let Ok(token) = i64::try_from(lease.token) else { return Ok(None) };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {LIVE_RUN_COLUMNS} FROM runs WHERE run_id = ?1 AND state = 'leased' AND token = ?2"
        ))
        .sql()?;
    stmt.query_row(params![lease.run_id, token], LiveRun::from_row).optional().sql()
}

/// Whether the run already has this result, under this lease's token, with
/// this record and outcome (a report sent again, or replayed from a worker's
/// journal): acknowledged again, nothing changes.
fn result_again(conn: &Connection, lease: &LeaseRef, result: &RunResult) -> Result<bool, LedgerError> {
    let Ok(token) = i64::try_from(lease.token) else { return Ok(false) };
    let mut stmt = conn
        .prepare_cached(
            "SELECT 1 FROM runs WHERE run_id = ?1 AND state = 'final' AND token = ?2 AND record_sha256 = ?3 \
             AND outcome = ?4",
        )
        .sql()?;
    stmt.exists(params![lease.run_id, token, result.record_sha256, result.outcome.as_str()]).sql()
}

/// The verdict again when one of the run's recorded attempts is this one
/// (its token, class, start and end: a report sent again, or replayed from
/// a worker's journal, even after the run went on to another lease): the
/// final outcome if the run is final, else a retry. `None` when it is a
/// new report. (This ledger syncs every change before it answers, so it
/// never loses an acknowledged attempt that a replay would have to put
/// back, as the Redis ledger's `attempt.lua` does.)
fn attempt_again(
    conn: &Connection,
    lease: &LeaseRef,
    attempt: &AttemptRecord,
) -> Result<Option<AttemptVerdict>, LedgerError> {
    let Ok(token) = i64::try_from(lease.token) else { return Ok(None) };
    // Any attempt of the run under this lease, not only the last: a report
    // replayed after the run moved on to another lease is the same report.
    let mut stmt = conn.prepare_cached("SELECT record FROM attempts WHERE run_id = ?1 AND token = ?2").sql()?;
    let held: Vec<String> =
        stmt.query_map(params![lease.run_id, token], |r| r.get(0)).sql()?.collect::<Result<_, _>>().sql()?;
    let mut same = false;
    for record in held {
        let held: AttemptRecord = from_json("an attempt record", &record)?;
        same |=
            held.class == attempt.class && held.started_ms == attempt.started_ms && held.ended_ms == attempt.ended_ms;
    }
    if !same {
        return Ok(None);
    }
    let outcome: Option<String> = conn
        .prepare_cached("SELECT outcome FROM runs WHERE run_id = ?1 AND state = 'final'")
        .sql()?
        .query_row(params![lease.run_id], |r| r.get(0))
        .optional()
        .sql()?;
    Ok(Some(match outcome {
        Some(o) => AttemptVerdict::Final(parse_outcome(&o)?),
        None => AttemptVerdict::Retry { not_before_ms: 0 },
    }))
}

/// Applies the retry policy after a failed attempt of a leased run: a
/// provider's Retry-After holds the arm, then the run is retried, final,
/// or (auth_error) back in its queue with the arm paused.
fn apply_failure(
    conn: &Connection,
    plan: &PlanHeader,
    run: &LiveRun,
    attempt: &AttemptRecord,
    now_ms: i64,
) -> Result<AttemptVerdict, LedgerError> {
    let (class, detail) = (attempt.class, attempt.detail.as_str());
    if let Some(until) = arm_hold_until(now_ms, attempt.retry_after_ms) {
        hold_arm(conn, &run.arm_id, until, now_ms)?;
    }
    match plan.retry.decide(class, run.counted(), run.started_ms, now_ms, attempt.retry_after_ms) {
        RetryDecision::PauseArm => excuse_and_pause(conn, plan, run, attempt, now_ms),
        RetryDecision::RetryAt { not_before_ms } => {
            match requeue(conn, plan, run, run.attempts, not_before_ms, now_ms)? {
                Some(outcome) => Ok(AttemptVerdict::Final(outcome)),
                None => {
                    log_event(
                        conn,
                        now_ms,
                        "retry",
                        &run.run_id,
                        &format!("{} after attempt {}, not before {not_before_ms}", class.as_str(), run.attempts),
                    )?;
                    Ok(AttemptVerdict::Retry { not_before_ms })
                }
            }
        }
        RetryDecision::Final(outcome) => {
            let reason =
                if detail.is_empty() { class.as_str().to_owned() } else { format!("{}: {detail}", class.as_str()) };
            finalise(conn, run, Bucket::Leased, outcome, &reason, now_ms)?;
            Ok(AttemptVerdict::Final(outcome))
        }
    }
}

/// Holds `arm` for everyone until `until_ms` (a provider's Retry-After);
/// the later hold wins, and an extended hold is logged (`arm_held`).
fn hold_arm(conn: &Connection, arm: &str, until_ms: i64, now_ms: i64) -> Result<(), LedgerError> {
    let extended = conn
        .execute(
            "UPDATE arms SET held_until_ms = ?2 WHERE id = ?1 AND COALESCE(held_until_ms, 0) < ?2",
            params![arm, until_ms],
        )
        .sql()?;
    if extended == 1 {
        log_event(conn, now_ms, "arm_held", "", &format!("arm {arm}: held until {until_ms} (Retry-After)"))?;
        tracing::info!(arm, until_ms, "arm held by the provider's Retry-After");
    }
    Ok(())
}

/// An `auth_error`: the attempt is excused, the run goes back to its place
/// in the queue at once and the arm is paused with a reason that says how
/// to go on. If the cohort has closed, the run gets its closing outcome
/// instead (`not_run` when it has no counted attempt).
fn excuse_and_pause(
    conn: &Connection,
    plan: &PlanHeader,
    run: &LiveRun,
    attempt: &AttemptRecord,
    now_ms: i64,
) -> Result<AttemptVerdict, LedgerError> {
    let excused = LiveRun { excused: run.excused.saturating_add(1), ..run.clone() };
    conn.execute("UPDATE runs SET excused = ?2 WHERE position = ?1", params![run.position, excused.excused]).sql()?;
    if let Some(outcome) = requeue(conn, plan, &excused, run.attempts, 0, now_ms)? {
        return Ok(AttemptVerdict::Final(outcome));
    }
    let reason = auth_pause_reason(&run.arm_id, attempt.http_status, &attempt.detail);
    conn.execute("UPDATE arms SET paused_reason = ?2 WHERE id = ?1", params![run.arm_id, reason]).sql()?;
    log_event(conn, now_ms, "arm_paused", "", &format!("arm {}: {reason}", run.arm_id))?;
    log_event(
        conn,
        now_ms,
        "requeued",
        &run.run_id,
        &format!("{} after attempt {} (excused), back at its place in the queue", attempt.class, run.attempts),
    )?;
    tracing::warn!(arm = %run.arm_id, run_id = %run.run_id, "arm paused: the system under test refused our credentials");
    Ok(AttemptVerdict::ArmPaused)
}

/// Puts a leased run back in the queue with `attempts` counted, not to be
/// leased before `not_before_ms`. If the cohort is aborted or its window
/// has ended, nothing would ever lease it again, so it is closed at once
/// instead, with the outcome it would get at the close: returned as
/// `Some(outcome)`.
fn requeue(
    conn: &Connection,
    plan: &PlanHeader,
    run: &LiveRun,
    attempts: u32,
    not_before_ms: i64,
    now_ms: i64,
) -> Result<Option<Outcome>, LedgerError> {
    let cohort = cohort_state(conn)?.ok_or(LedgerError::NotSeeded)?;
    let closing = if cohort.aborted.is_some() {
        Some(CloseReason::Aborted)
    } else if cohort.window_closed
        || cohort.window_due(now_ms)
        || round_closed(conn, plan, run.position, &cohort, now_ms)?
    {
        Some(if paused_arms(conn)?.contains(&run.arm_id) { CloseReason::ArmPaused } else { CloseReason::WindowClosed })
    } else {
        None
    };
    // A run given back before any counted attempt has not started.
    let counted = attempts.saturating_sub(run.excused);
    conn.execute(
        "UPDATE runs SET state = 'pending', attempts = ?2, not_before_ms = ?3, expires_ms = 0, \
         started_ms = CASE WHEN ?4 = 0 THEN 0 ELSE started_ms END WHERE position = ?1",
        params![run.position, attempts, not_before_ms, counted],
    )
    .sql()?;
    count_runs(conn, &run.arm_id, Bucket::Leased, Bucket::Pending, 1)?;
    let Some(reason) = closing else { return Ok(None) };
    let outcome = closed_outcome(counted);
    finalise(conn, run, Bucket::Pending, outcome, reason.as_str(), now_ms)?;
    Ok(Some(outcome))
}

/// Whether the run at `position` belongs to a round whose own window has
/// passed (its runs can no longer start).
fn round_closed(
    conn: &Connection,
    plan: &PlanHeader,
    position: i64,
    cohort: &CohortState,
    now_ms: i64,
) -> Result<bool, LedgerError> {
    if plan.rounds <= 1 {
        return Ok(false);
    }
    let round: u32 = to_unsigned(
        "repeat",
        conn.query_row("SELECT rep FROM runs WHERE position = ?1", params![position], |r| r.get(0)).sql()?,
    )?;
    Ok(round <= plan.rounds_closed(cohort.window_start_ms, now_ms))
}

/// Makes `run`, now in the `from` bucket, final with `outcome` (no record:
/// the run produced none).
fn finalise(
    conn: &Connection,
    run: &LiveRun,
    from: Bucket,
    outcome: Outcome,
    reason: &str,
    now_ms: i64,
) -> Result<(), LedgerError> {
    conn.execute(
        "UPDATE runs SET state = 'final', outcome = ?2, reason = ?3, ended_ms = ?4, expires_ms = 0, \
         not_before_ms = 0 WHERE position = ?1",
        params![run.position, outcome.as_str(), reason, now_ms],
    )
    .sql()?;
    count_runs(conn, &run.arm_id, from, Bucket::Final(outcome), 1)?;
    log_event(conn, now_ms, "final", &run.run_id, &final_detail(outcome, reason))
}

/// A bucket of the stored run counts (`run_counts`): a state and, for a
/// final run, its outcome.
#[derive(Clone, Copy, Debug)]
enum Bucket {
    Pending,
    Leased,
    Final(Outcome),
}

impl Bucket {
    /// The bucket's (state, outcome) key in `run_counts`.
    fn key(self) -> (&'static str, &'static str) {
        match self {
            Bucket::Pending => ("pending", ""),
            Bucket::Leased => ("leased", ""),
            Bucket::Final(outcome) => ("final", outcome.as_str()),
        }
    }
}

/// Moves `n` runs of `arm` from one bucket of the stored counts to another,
/// in the transaction that moves the runs themselves: every change of a
/// run's state or outcome calls it (lease, requeue, finish, finalise,
/// close_pending). A bucket that holds fewer than `n` runs means the
/// counts no longer match the rows: refused as corrupt, which rolls the
/// whole change back.
fn count_runs(conn: &Connection, arm: &str, from: Bucket, to: Bucket, n: i64) -> Result<(), LedgerError> {
    let ((from_state, from_outcome), (to_state, to_outcome)) = (from.key(), to.key());
    let taken = conn
        .prepare_cached(
            "UPDATE run_counts SET n = n - ?4 WHERE arm_id = ?1 AND state = ?2 AND outcome = ?3 AND n >= ?4",
        )
        .sql()?
        .execute(params![arm, from_state, from_outcome, n])
        .sql()?;
    if taken != 1 {
        return Err(LedgerError::Corrupt(format!(
            "the stored counts hold fewer than {n} runs of arm {arm:?} in {from:?}: they no longer match the runs"
        )));
    }
    conn.prepare_cached(
        "INSERT INTO run_counts (arm_id, state, outcome, n) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (arm_id, state, outcome) DO UPDATE SET n = n + excluded.n",
    )
    .sql()?
    .execute(params![arm, to_state, to_outcome, n])
    .sql()?;
    Ok(())
}

fn final_detail(outcome: Outcome, reason: &str) -> String {
    if reason.is_empty() { outcome.as_str().to_owned() } else { format!("{}: {reason}", outcome.as_str()) }
}

fn record_attempt(conn: &Connection, run_id: &str, record: &AttemptRecord) -> Result<(), LedgerError> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO attempts (run_id, attempt, token, worker, class, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .sql()?;
    let token = i64::try_from(record.token).map_err(|_| LedgerError::Corrupt(format!("token {}", record.token)))?;
    stmt.execute(params![run_id, record.attempt, token, record.worker, record.class.as_str(), to_json(record)?])
        .sql()?;
    conn.prepare_cached(
        "INSERT INTO attempt_counts (class, n) VALUES (?1, 1) ON CONFLICT (class) DO UPDATE SET n = n + 1",
    )
    .sql()?
    .execute(params![record.class.as_str()])
    .sql()?;
    Ok(())
}

fn discarded_report(
    worker: &str,
    lease: &LeaseRef,
    kind: &str,
    now_ms: i64,
    class: Option<AttemptClass>,
    outcome: Option<Outcome>,
) -> DiscardedReport {
    DiscardedReport {
        run_id: lease.run_id.clone(),
        token: lease.token,
        worker: worker.to_owned(),
        kind: kind.to_owned(),
        at_ms: now_ms,
        class,
        outcome,
    }
}

/// Keeps a stale report for audit (and counts it); it changes nothing
/// else.
fn discard(conn: &Connection, report: &DiscardedReport) -> Result<(), LedgerError> {
    conn.execute("INSERT INTO discarded (record) VALUES (?1)", params![to_json(report)?]).sql()?;
    conn.prepare_cached("UPDATE discarded_count SET n = n + 1 WHERE id = 1").sql()?.execute([]).sql()?;
    let detail = format!("stale {} from worker {:?}, token {}", report.kind, report.worker, report.token);
    tracing::debug!(run_id = %report.run_id, %detail, "report discarded");
    log_event(conn, report.at_ms, "discarded", &report.run_id, &detail)
}

fn log_event(conn: &Connection, at_ms: i64, kind: &str, run_id: &str, detail: &str) -> Result<(), LedgerError> {
    let mut stmt =
        conn.prepare_cached("INSERT INTO events (at_ms, kind, run_id, detail) VALUES (?1, ?2, ?3, ?4)").sql()?;
    stmt.execute(params![at_ms, kind, run_id, detail]).sql()?;
    Ok(())
}

// === encoding ===

/// Maps rusqlite errors to [`LedgerError::Sqlite`] (the message only).
trait SqlResult<T> {
    fn sql(self) -> Result<T, LedgerError>;
}

impl<T> SqlResult<T> for rusqlite::Result<T> {
    fn sql(self) -> Result<T, LedgerError> {
        self.map_err(|e| LedgerError::Sqlite(e.to_string()))
    }
}

fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, LedgerError> {
    serde_json::to_string(value).map_err(|e| LedgerError::Corrupt(format!("cannot encode a ledger value: {e}")))
}

fn from_json<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, LedgerError> {
    serde_json::from_str(json).map_err(|e| LedgerError::Corrupt(format!("{what}: {e}")))
}

fn to_unsigned<T: TryFrom<i64>>(what: &str, value: i64) -> Result<T, LedgerError> {
    T::try_from(value).map_err(|_| LedgerError::Corrupt(format!("{what} {value} is out of range")))
}

fn parse_state(name: &str) -> Result<RunStateKind, LedgerError> {
    match name {
        "pending" => Ok(RunStateKind::Pending),
        "leased" => Ok(RunStateKind::Leased),
        "final" => Ok(RunStateKind::Final),
        other => Err(LedgerError::Corrupt(format!("unknown run state {other:?}"))),
    }
}

fn parse_outcome(name: &str) -> Result<Outcome, LedgerError> {
    Outcome::ALL
        .into_iter()
        .find(|o| o.as_str() == name)
        .ok_or_else(|| LedgerError::Corrupt(format!("unknown outcome {name:?}")))
}

fn parse_class(name: &str) -> Result<AttemptClass, LedgerError> {
    AttemptClass::ALL
        .into_iter()
        .find(|c| c.as_str() == name)
        .ok_or_else(|| LedgerError::Corrupt(format!("unknown attempt class {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    /// The conformance suite also holds on the in-memory ledger, and a
    /// reopened file resumes where it stood.
    #[tokio::test]
    async fn in_memory_ledger_conforms() {
        conformance::lease_follows_order_within_caps(&SqliteLedger::in_memory().unwrap()).await;
        conformance::window_close_finalises_pending_runs(&SqliteLedger::in_memory().unwrap()).await;
    }

    /// Reopening the file resumes the cohort: leases, tokens and the window
    /// survive, and the fencing token keeps increasing.
    #[tokio::test]
    async fn reopening_resumes_the_cohort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let first = {
            let l = SqliteLedger::open(&path).unwrap();
            l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
            l.lease("w", 1, 100, conformance::TTL).await.unwrap().leases.remove(0)
        };
        let l = SqliteLedger::open(&path).unwrap();
        assert_eq!(
            l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 5).await.unwrap(),
            SeedOutcome::AlreadySeeded
        );
        let s = l.status().await.unwrap();
        assert_eq!((s.leased, s.window_start_ms), (1, Some(100)));
        let next = l.lease("w", 1, 200, conformance::TTL).await.unwrap().leases.remove(0);
        assert!(next.token > first.token);
        assert!(l.finish("w", &LeaseRef { run_id: first.run_id, token: first.token }, &result(), 300).await.unwrap());
    }

    /// Turns a version 2 file back into version 1: drops every column,
    /// table and trigger version 2 added.
    fn downgrade_to_version_1(path: &Path) {
        Connection::open(path)
            .unwrap()
            .execute_batch(
                "DROP TABLE run_counts; DROP TABLE attempt_counts; DROP TABLE discarded_count; \
                 ALTER TABLE runs DROP COLUMN excused; ALTER TABLE arms DROP COLUMN held_until_ms; \
                 ALTER TABLE cohort DROP COLUMN rounds_closed; PRAGMA user_version = 1;",
            )
            .unwrap();
    }

    /// A version 1 file (before excused attempts, arm holds and the stored
    /// counts) is migrated on open and goes on where it stood: its counts
    /// are filled from the rows, so status reads as before.
    #[tokio::test]
    async fn a_version_1_file_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let before = {
            let l = SqliteLedger::open(&path).unwrap();
            l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
            let g = l.lease("w", 2, 10, conformance::TTL).await.unwrap().leases.remove(0);
            assert!(
                l.finish("w", &LeaseRef { run_id: g.run_id.clone(), token: g.token }, &result(), 20).await.unwrap()
            );
            let other = RunResult { record_sha256: "c".repeat(64), ..result() };
            assert!(!l.finish("w", &LeaseRef { run_id: g.run_id, token: g.token }, &other, 30).await.unwrap());
            l.status().await.unwrap()
        };
        downgrade_to_version_1(&path);
        let l = SqliteLedger::open(&path).unwrap();
        assert_counts_match(&l);
        assert_eq!(l.status().await.unwrap(), before);
        let g = l.lease("w", 1, 100, conformance::TTL).await.unwrap().leases.remove(0);
        let lease = LeaseRef { run_id: g.run_id.clone(), token: g.token };
        let mut attempt = result().attempt;
        attempt.class = AttemptClass::AuthError;
        assert_eq!(l.report_attempt("w", &lease, &attempt, 110).await.unwrap(), AttemptVerdict::ArmPaused);
        let version: i64 =
            Connection::open(&path).unwrap().pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    /// A migrated file has the same tables, indexes and triggers as a new
    /// one: the migration leaves nothing of version 2 out.
    #[tokio::test]
    async fn a_migrated_file_has_the_new_schema() {
        let dir = tempfile::tempdir().unwrap();
        let (fresh, migrated) = (dir.path().join("fresh.sqlite"), dir.path().join("migrated.sqlite"));
        drop(SqliteLedger::open(&fresh).unwrap());
        drop(SqliteLedger::open(&migrated).unwrap());
        downgrade_to_version_1(&migrated);
        drop(SqliteLedger::open(&migrated).unwrap());
        let objects = |path: &Path| -> Vec<(String, String, String)> {
            let conn = Connection::open(path).unwrap();
            let mut stmt = conn.prepare("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name").unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
        };
        let columns = |path: &Path, table: &str| -> Vec<String> {
            let conn = Connection::open(path).unwrap();
            let mut stmt =
                conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}') ORDER BY name")).unwrap();
            stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(objects(&migrated), objects(&fresh));
        for (_, name, _) in objects(&fresh).iter().filter(|(kind, ..)| kind == "table") {
            assert_eq!(columns(&migrated, name), columns(&fresh, name), "table {name}");
        }
    }

    /// The stored counts equal a recount of the rows they count.
    fn assert_counts_match(l: &SqliteLedger) {
        let guard = lock(&l.inner);
        let rows = |sql: &str| -> Vec<(String, String, String, i64)> {
            let mut stmt = guard.conn.prepare(sql).unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(
            rows("SELECT arm_id, state, outcome, n FROM run_counts WHERE n <> 0 ORDER BY 1, 2, 3"),
            rows(
                "SELECT arm_id, state, COALESCE(outcome, ''), COUNT(*) FROM runs \
                 GROUP BY arm_id, state, COALESCE(outcome, '') ORDER BY 1, 2, 3"
            ),
            "runs by arm, state and outcome"
        );
        assert_eq!(
            rows("SELECT class, '', '', n FROM attempt_counts WHERE n <> 0 ORDER BY 1"),
            rows("SELECT class, '', '', COUNT(*) FROM attempts GROUP BY class ORDER BY 1"),
            "attempts by class"
        );
        assert_eq!(
            rows("SELECT '', '', '', n FROM discarded_count"),
            rows("SELECT '', '', '', COUNT(*) FROM discarded"),
            "discarded reports"
        );
        assert_eq!(
            guard.conn.query_row("SELECT COUNT(*) FROM run_counts WHERE n < 0", [], |r| r.get::<_, i64>(0)).unwrap(),
            0
        );
    }

    /// Through a mixed sequence (leases, a finish, a retry, an excused
    /// auth_error, a stale report, a release, expiry, a final failure, an
    /// abort closing the pending runs, a retry closed by the abort) the
    /// stored counts equal a `GROUP BY` recount after every step.
    #[tokio::test]
    async fn stored_counts_follow_every_change() {
        let l = SqliteLedger::in_memory().unwrap();
        l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
        assert_counts_match(&l);
        let leases: Vec<LeaseRef> = l
            .lease("w", 3, 10, conformance::TTL)
            .await
            .unwrap()
            .leases
            .into_iter()
            .map(|g| LeaseRef { run_id: g.run_id, token: g.token })
            .collect();
        assert_eq!(leases.len(), 3);
        assert_counts_match(&l);
        assert!(l.finish("w", &leases[0], &result(), 20).await.unwrap());
        assert_counts_match(&l);
        let mut attempt = result().attempt;
        attempt.class = AttemptClass::ServerError;
        assert!(matches!(l.report_attempt("w", &leases[1], &attempt, 30).await.unwrap(), AttemptVerdict::Retry { .. }));
        assert_counts_match(&l);
        attempt.class = AttemptClass::AuthError;
        assert_eq!(l.report_attempt("w", &leases[2], &attempt, 40).await.unwrap(), AttemptVerdict::ArmPaused);
        assert_counts_match(&l);
        let other = RunResult { record_sha256: "c".repeat(64), ..result() };
        assert!(!l.finish("w", &leases[0], &other, 50).await.unwrap(), "a stale finish is discarded");
        assert_counts_match(&l);
        let more = l.lease("w", 2, 1_000, conformance::TTL).await.unwrap().leases;
        assert!(!more.is_empty());
        assert!(
            l.release("w", &LeaseRef { run_id: more[0].run_id.clone(), token: more[0].token }, 1_010).await.unwrap()
        );
        assert_counts_match(&l);
        let again = l.lease("w", 2, 1_020, conformance::TTL).await.unwrap().leases;
        assert!(!again.is_empty());
        assert!(l.expire(5_000).await.unwrap() > 0);
        assert_counts_match(&l);
        let late = |at: i64| {
            let l = &l;
            async move {
                let g = l.lease("w", 1, at, conformance::TTL).await.unwrap().leases.remove(0);
                LeaseRef { run_id: g.run_id, token: g.token }
            }
        };
        let failing = late(5_500).await;
        attempt.class = AttemptClass::ClientError;
        assert!(matches!(l.report_attempt("w", &failing, &attempt, 5_600).await.unwrap(), AttemptVerdict::Final(_)));
        assert_counts_match(&l);
        let held = late(5_700).await;
        assert!(l.abort("stop", 6_000).await.unwrap() > 0);
        assert_counts_match(&l);
        // A retry after the abort: requeued, then closed at once.
        attempt.class = AttemptClass::ServerError;
        assert!(matches!(l.report_attempt("w", &held, &attempt, 6_100).await.unwrap(), AttemptVerdict::Final(_)));
        assert_counts_match(&l);
        let s = l.status().await.unwrap();
        assert!(s.done());
        assert_eq!((s.planned, s.discarded), (8, 1));
        assert_eq!(s.attempts_by_class.values().sum::<u64>(), {
            let guard = lock(&l.inner);
            guard.conn.query_row("SELECT COUNT(*) FROM attempts", [], |r| r.get::<_, i64>(0)).unwrap() as u64
        });
    }

    /// Every query status runs reads the cohort row, the arms and the
    /// count tables only, by `EXPLAIN QUERY PLAN`: neither the runs nor the
    /// attempts nor the discarded reports are read, so status is O(arms).
    #[tokio::test]
    async fn status_reads_counts_not_runs() {
        let l = SqliteLedger::in_memory().unwrap();
        l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
        let guard = lock(&l.inner);
        for sql in STATUS_QUERIES {
            let mut stmt = guard.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = stmt.query_map([], |r| r.get(3)).unwrap().map(Result::unwrap).collect();
            assert!(!plan.is_empty(), "{sql}");
            for step in &plan {
                let reads_rows = step.split_whitespace().any(|w| matches!(w, "runs" | "attempts" | "discarded"));
                assert!(!reads_rows, "status query {sql:?} reads the rows: {step}");
            }
        }
    }

    /// A call does not block the runtime's thread: while another thread
    /// holds the connection, a ledger call on a one-thread runtime waits on
    /// the blocking pool and the runtime goes on running other tasks (here
    /// the one that lets the connection go). Were the work inline, the
    /// runtime's only thread would wait on the lock and the release would
    /// never be sent; the holder then gives up after 10 s and says so.
    #[tokio::test(flavor = "current_thread")]
    async fn calls_do_not_block_the_runtime() {
        let l = Arc::new(SqliteLedger::in_memory().unwrap());
        l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let inner = Arc::clone(&l.inner);
        let holder = std::thread::spawn(move || {
            let _guard = lock(&inner);
            held_tx.send(()).unwrap();
            release_rx.recv_timeout(Duration::from_secs(10)).is_ok()
        });
        held_rx.recv().unwrap();
        let call = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.status().await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        release_tx.send(()).unwrap();
        assert_eq!(call.await.unwrap().unwrap().planned, 8);
        assert!(holder.join().unwrap(), "the ledger call blocked the runtime's thread");
    }

    /// A retry reported after an abort cannot wait for a lease that will
    /// never come: the run is closed at once.
    #[tokio::test]
    async fn retry_after_abort_closes_the_run() {
        let l = SqliteLedger::in_memory().unwrap();
        l.seed(&conformance::header(), &conformance::questions(), &conformance::order(), 0).await.unwrap();
        let g = l.lease("w", 1, 10, conformance::TTL).await.unwrap().leases.remove(0);
        assert_eq!(l.abort("stop", 20).await.unwrap(), 7);
        let mut attempt = result().attempt;
        attempt.class = AttemptClass::ServerError;
        let lease = LeaseRef { run_id: g.run_id.clone(), token: g.token };
        let v = l.report_attempt("w", &lease, &attempt, 30).await.unwrap();
        assert_eq!(v, AttemptVerdict::Final(Outcome::Unavailable));
        assert!(l.status().await.unwrap().done());
        assert!(l.lease("w", 1, 40, conformance::TTL).await.unwrap().done);
    }

    fn result() -> RunResult {
        RunResult {
            outcome: Outcome::Completed,
            reason: String::new(),
            record_sha256: "b".repeat(64),
            observed_version: None,
            attempt: AttemptRecord {
                class: AttemptClass::Ok,
                http_status: 200,
                detail: String::new(),
                started_ms: 0,
                ended_ms: 1,
                observed_version: None,
                worker: String::new(),
                attempt: 0,
                token: 0,
                retry_after_ms: None,
            },
        }
    }
}
