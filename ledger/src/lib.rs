//! The ledger: the one source of truth about a cohort's runs. It holds each
//! planned run's state, every attempt, the counts by outcome and by attempt
//! class, the arms' pause state, the collection window and an audit log.
//!
//! One trait, [`Ledger`], two implementations that pass one conformance
//! suite (`conformance`, behind the `testing` feature): [`redis::RedisLedger`] for a cluster and
//! [`sqlite::SqliteLedger`] for one machine. Both apply the rules of
//! `cohort_core::lifecycle`; every state change of a run is atomic with the
//! counts it moves.
//!
//! Architecture Invariant: a report is accepted only with the fencing token
//! of the run's current lease. A late report from a worker that lost its
//! lease is kept as a discarded report for audit and changes nothing else.
//!
//! Architecture Invariant: a final result is accepted only when its outcome
//! fits its attempt class (`cohort_core::lifecycle::check_final`); one that
//! does not is refused with [`LedgerError::Unfit`] before anything changes
//! (a caller's error, not a stale report: nothing is kept as discarded).

use std::collections::BTreeMap;

use async_trait::async_trait;
use cohort_core::config::RetryPolicy;
use cohort_core::lifecycle::check_final;
use cohort_core::order::{RunId, RunIdError};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use serde::{Deserialize, Serialize};

mod coalesce;
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod progress;
pub mod redis;
pub mod sqlite;

/// What a ledger is seeded with: the frozen plan's header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanHeader {
    pub cohort: String,
    /// SHA-256 of manifest.json: a ledger seeded from one manifest refuses
    /// another.
    pub manifest_sha256: String,
    /// The collection window, from the first lease; in a repeated-run
    /// cohort with a schedule, each round's own window.
    pub window_ms: i64,
    pub retry: RetryPolicy,
    pub arms: Vec<ArmPlan>,
    /// How many rounds (the cohort's repeats; round `k` is repeat `k`).
    #[serde(default = "one_round")]
    pub rounds: u32,
    /// Milliseconds between the openings of consecutive rounds, from the
    /// first start (`[repeat_schedule] every_hours`); 0 opens every round
    /// at the first start.
    #[serde(default)]
    pub round_every_ms: i64,
}

fn one_round() -> u32 {
    1
}

impl PlanHeader {
    /// The plan of a frozen cohort: its name, manifest hash, window, retry
    /// policy and arms, as every seeding path builds it.
    pub fn for_cohort(config: &cohort_core::config::CohortConfig, manifest_sha256: &str) -> PlanHeader {
        PlanHeader {
            cohort: config.name.clone(),
            manifest_sha256: manifest_sha256.to_owned(),
            window_ms: i64::from(config.window_hours) * 3_600_000,
            retry: config.retry.clone(),
            arms: config
                .arms
                .iter()
                .map(|a| ArmPlan {
                    id: a.id.clone(),
                    concurrency: a.concurrency,
                    pinned_version: a.pinned_version.clone(),
                    accepted_versions: config.accepted_versions_of(&a.id).to_vec(),
                    manual: a.adapter == cohort_core::config::AdapterKind::Manual,
                })
                .collect(),
            rounds: config.repeats.max(1),
            round_every_ms: config.repeat_schedule.as_ref().map_or(0, |s| s.opens_after_ms(2)),
        }
    }

    /// The rounds open for leasing at `now_ms` (rounds `1..=n`), given the
    /// first start (`None`: not started yet, when only round 1 can start
    /// the cohort, unless every round opens at once).
    pub fn rounds_open(&self, first_start_ms: Option<i64>, now_ms: i64) -> u32 {
        if self.round_every_ms <= 0 {
            return self.rounds;
        }
        let Some(start) = first_start_ms else { return 1 };
        let elapsed = now_ms.saturating_sub(start).max(0);
        u32::try_from(elapsed / self.round_every_ms).unwrap_or(u32::MAX).saturating_add(1).min(self.rounds)
    }

    /// The rounds whose own window has closed at `now_ms` (rounds
    /// `1..=n`); 0 before the first start. The last round closes with the
    /// cohort's window ([`PlanHeader::window_end_ms`]).
    pub fn rounds_closed(&self, first_start_ms: Option<i64>, now_ms: i64) -> u32 {
        let Some(start) = first_start_ms else { return 0 };
        if now_ms < start.saturating_add(self.window_ms) {
            return 0;
        }
        if self.round_every_ms <= 0 {
            return self.rounds;
        }
        let past = now_ms.saturating_sub(start).saturating_sub(self.window_ms);
        u32::try_from(past / self.round_every_ms).unwrap_or(u32::MAX).saturating_add(1).min(self.rounds)
    }

    /// When the cohort's window (its last round's) closes, for a first
    /// start at `first_start_ms`.
    pub fn window_end_ms(&self, first_start_ms: i64) -> i64 {
        let last_opens = i64::from(self.rounds.saturating_sub(1)).saturating_mul(self.round_every_ms.max(0));
        first_start_ms.saturating_add(last_opens).saturating_add(self.window_ms)
    }
}

/// One arm as the ledger needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmPlan {
    pub id: String,
    /// The most runs of this arm leased at once.
    pub concurrency: u32,
    /// The pinned version label: accepted without pausing.
    pub pinned_version: String,
    /// The other labels `cohort.toml` accepts from the start
    /// (`accepted_versions`). Skipped when empty, so a plan header seeded
    /// before the field existed reads, and is written, as it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_versions: Vec<String>,
    /// Run by a person (`adapter = "manual"`): never granted by
    /// [`Ledger::lease`], only by a [`LeaseScope::Manual`] lease. A ledger
    /// seeded before the flag existed reads as not manual.
    #[serde(default)]
    pub manual: bool,
}

impl ArmPlan {
    /// The arm's accepted labels when the ledger is seeded: the pinned one,
    /// then `accepted_versions` in the order written, each once.
    pub fn seeded_versions(&self) -> Vec<&str> {
        let mut versions = vec![self.pinned_version.as_str()];
        for v in &self.accepted_versions {
            if !versions.contains(&v.as_str()) {
                versions.push(v);
            }
        }
        versions
    }
}

/// Which runs a lease call may grant. Workers lease automatically; a
/// manual arm's runs go only to the person who asks for that arm
/// (`cohort pending`), so a worker can never call a product that a person
/// is meant to run by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseScope<'a> {
    /// Every arm that is not manual (workers).
    Automatic,
    /// Only this manual arm's runs (a person, `cohort pending`).
    Manual(&'a str),
}

/// Whether seeding wrote the plan or found it already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedOutcome {
    Seeded,
    AlreadySeeded,
}

/// A run handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseGrant {
    pub run_id: String,
    pub question_id: String,
    pub arm_id: String,
    pub repeat: u32,
    /// 1-based number of this attempt.
    pub attempt: u32,
    /// Fencing token: every report about this lease must carry it.
    pub token: u64,
    /// The question text, verbatim.
    pub question_text: String,
    pub expires_ms: i64,
}

/// A worker's reference to its lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRef {
    pub run_id: String,
    pub token: u64,
}

/// One attempt at a run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub class: AttemptClass,
    /// HTTP status when there was one.
    #[serde(default)]
    pub http_status: u16,
    /// A short, secret-free description.
    #[serde(default)]
    pub detail: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    /// The model or version label the provider reported; `None` when it
    /// disclosed none.
    #[serde(default)]
    pub observed_version: Option<String>,
    /// Filled in by the ledger: the worker, the attempt number, the token.
    /// A report may give the number (its lease's, as the run record has
    /// it; 0 when it does not say): a Redis ledger that lost the lease in a
    /// rollback takes it back at that number, and an attempt replayed after
    /// its run moved on is put back there, so a replay never renumbers.
    #[serde(default)]
    pub worker: String,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub token: u64,
    /// The provider's Retry-After, in ms, when it sent one: the run's next
    /// attempt waits at least this long and the arm is held for everyone
    /// until then.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// The final result of a run, reported with its last attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResult {
    pub outcome: Outcome,
    /// Why, when not completed.
    pub reason: String,
    /// SHA-256 of the run record in the artifact store (empty if none).
    pub record_sha256: String,
    pub observed_version: Option<String>,
    pub attempt: AttemptRecord,
}

/// What became of a reported failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptVerdict {
    /// The lease was not current: kept as a discarded report only.
    Stale,
    /// Back to the queue, not before this instant.
    Retry { not_before_ms: i64 },
    /// No retry: the run is final with this outcome.
    Final(Outcome),
    /// Our configuration failed (`auth_error`): the attempt is recorded but
    /// excused, the run is back in its queue at its place, and the arm is
    /// paused until an operator resumes it.
    ArmPaused,
}

/// The result of a lease call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseBatch {
    pub leases: Vec<LeaseGrant>,
    /// Whether no run can be leased any more (window closed, aborted, or
    /// every run final): workers may stop asking.
    pub closed: bool,
    /// Every planned run has its final outcome.
    pub done: bool,
}

/// What a ledger rebuilt after it lost its cohort holds beyond the plan
/// ([`Ledger::rebuild`]), as the evidence outside it shows: the run records
/// in the artifact store and the workers' journals (`cohort-serve`'s
/// `rebuild` gathers it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuild {
    /// When the collection window opened (the first attempt the evidence
    /// shows); `None` when no run ever started: then it opens at the first
    /// lease, as in a fresh ledger.
    pub window_start_ms: Option<i64>,
    /// Every fencing token handed out from now on is past this one: past
    /// every token the evidence names, with room for the ones it does not
    /// (leases still held by workers that never reported).
    pub token_floor: u64,
    /// The ledger's epoch from now on: past every epoch a worker may have
    /// seen, so live workers replay what their journals still hold.
    pub epoch: u64,
    /// The runs the evidence shows started; every other planned run is
    /// pending with no attempt.
    pub runs: Vec<RestoredRun>,
}

/// One run as the evidence shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredRun {
    pub run_id: String,
    /// Its attempts, oldest first, with their numbers (the run record's).
    pub attempts: Vec<AttemptRecord>,
    /// Its final outcome; `None`: pending, its attempts counted.
    pub result: Option<RestoredResult>,
}

/// A restored run's final outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredResult {
    pub outcome: Outcome,
    pub reason: String,
    /// The run record's SHA-256 (empty when the run ended without one).
    pub record_sha256: String,
    pub observed_version: Option<String>,
}

/// The detail of a rebuilt ledger's `rebuilt` event, the same for both.
fn rebuilt_detail(rebuilt: &Rebuild, finals: usize) -> String {
    let window = rebuilt.window_start_ms.map_or_else(
        || "the window not opened yet (no run had started)".to_owned(),
        |ms| format!("the window opened at {ms} as before"),
    );
    format!(
        "rebuilt from the run records and the workers' journals: {} runs restored ({finals} final, {} pending with \
         their attempts), {window}; tokens past {}, epoch {}",
        rebuilt.runs.len(),
        rebuilt.runs.len() - finals,
        rebuilt.token_floor,
        rebuilt.epoch
    )
}

/// The state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStateKind {
    Pending,
    Leased,
    Final,
}

/// One run as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    /// Its position in the planned order (0-based).
    pub position: u64,
    pub arm_id: String,
    pub state: RunStateKind,
    pub attempts: u32,
    pub outcome: Option<Outcome>,
    pub reason: String,
    pub record_sha256: String,
    pub observed_version: Option<String>,
    /// First start and final end (ms); 0 when not yet.
    pub started_ms: i64,
    pub ended_ms: i64,
}

/// A report that arrived with a stale lease, kept for audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscardedReport {
    pub run_id: String,
    pub token: u64,
    pub worker: String,
    /// `attempt`, `result` or `release`.
    pub kind: String,
    pub at_ms: i64,
    pub class: Option<AttemptClass>,
    pub outcome: Option<Outcome>,
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEvent {
    pub at_ms: i64,
    /// `seeded`, `window_opened`, `window_closed`, `arm_paused`,
    /// `arm_resumed`, `arm_held` (a Retry-After holds the arm; the detail
    /// names the instant), `aborted`, `expired`, `final`, `retry`,
    /// `requeued` (after an excused auth_error), `discarded`,
    /// `ledger_restarted` (a Redis ledger recovered on a restarted or
    /// replaced server: the detail says how many acknowledgements this
    /// coordinator saw that the server had lost), `reclaimed` (a lease the
    /// ledger lost in that rollback, taken back by its holder), `restored`
    /// (an acknowledged attempt that rollback lost, replayed from a
    /// worker's journal after its run moved on, put back at its number).
    pub kind: String,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub detail: String,
}

/// One arm's state and counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmStatus {
    pub id: String,
    pub planned: u64,
    pub leased: u64,
    pub by_outcome: BTreeMap<Outcome, u64>,
    /// Why the arm is paused; `None` when it is not.
    pub paused: Option<String>,
    /// The version labels that do not pause the arm (the pinned one and
    /// those acknowledged on resume).
    pub accepted_versions: Vec<String>,
    /// Run by a person: leased only through [`LeaseScope::Manual`].
    #[serde(default)]
    pub manual: bool,
    /// The end (ms) of the latest hold a provider's Retry-After put on the
    /// arm; no run of the arm is leased before it. The stored instant, past
    /// or not (status has no clock): the arm is held while now < it.
    /// `None` when no hold was ever set.
    #[serde(default)]
    pub held_until_ms: Option<i64>,
}

/// The whole cohort's state and counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub cohort: String,
    pub manifest_sha256: String,
    pub planned: u64,
    pub pending: u64,
    pub leased: u64,
    pub finished: u64,
    pub by_outcome: BTreeMap<Outcome, u64>,
    /// Every recorded attempt by class (discarded reports excluded).
    pub attempts_by_class: BTreeMap<AttemptClass, u64>,
    pub arms: Vec<ArmStatus>,
    pub window_start_ms: Option<i64>,
    pub window_end_ms: Option<i64>,
    pub aborted: Option<String>,
    pub discarded: u64,
}

impl Status {
    /// Every planned run has its final outcome.
    pub fn done(&self) -> bool {
        self.planned > 0 && self.finished == self.planned
    }

    /// Runs that started at least once (every final outcome but not_run).
    pub fn attempted(&self) -> u64 {
        self.finished - self.by_outcome.get(&Outcome::NotRun).copied().unwrap_or(0)
    }
}

/// Where a ledger's acknowledgements stand (ARCHITECTURE.md, "Durable
/// acknowledgements"), as the coordinator tells its workers on every answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Starts at 1 and moves on when the ledger recovered from a restart
    /// that may have lost acknowledged writes: workers then replay the
    /// reports their journals hold from earlier epochs.
    pub epoch: u64,
    /// The highest acknowledgement sequence number this process has seen
    /// (at least that of every answer it has given so far).
    pub ack_seq: u64,
    /// Every acknowledgement of `epoch` up to this one is on the ledger's
    /// disk: a journal may forget them.
    pub durable_seq: u64,
}

impl Durability {
    /// A ledger that makes every change durable before it answers (SQLite
    /// with `synchronous=FULL`): nothing acknowledged can be lost.
    pub const ALWAYS: Durability = Durability { epoch: 1, ack_seq: 0, durable_seq: u64::MAX };
}

/// Why a ledger call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// A Redis call failed; the source says how. Transient (unreachable,
    /// busy, failing over) or permanent (a script error, a key of the wrong
    /// type, a bad URL): [`LedgerError::is_transient`].
    #[error("{}", redis_what(.0))]
    Redis(#[source] ::redis::RedisError),
    #[error("sqlite: {0}")]
    Sqlite(String),
    #[error(
        "the ledger holds cohort {found_cohort:?} from manifest {found}, not {expected}: use a fresh ledger or the matching manifest"
    )]
    ManifestMismatch { found_cohort: String, found: String, expected: String },
    #[error("the ledger is not seeded yet")]
    NotSeeded,
    /// [`Ledger::rebuild`] on a ledger that holds a cohort.
    #[error(
        "the ledger holds cohort {cohort:?} already: a rebuild writes only an empty ledger (one that lost its cohort), \
         and changes nothing here"
    )]
    NotEmpty { cohort: String },
    #[error("unknown arm {0:?}")]
    UnknownArm(String),
    #[error("arm {0:?} is not a manual arm: its runs are leased by workers, not by a person")]
    NotManual(String),
    #[error("the ledger holds data this version cannot read: {0}")]
    Corrupt(String),
    /// A final result whose outcome its attempt class does not allow
    /// (`lifecycle::check_final`): refused whole, nothing recorded.
    #[error("run {run_id}: result refused, nothing recorded: {}", unfit_why(*.outcome, *.class))]
    Unfit { run_id: String, outcome: Outcome, class: AttemptClass },
    /// A run id that is not `{question}:{arm}:{repeat}`.
    #[error(transparent)]
    BadRunId(#[from] RunIdError),
    /// A Redis URL that names neither a server nor a cluster.
    #[error(transparent)]
    BadRedisUrl(#[from] cohort_redis::RedisUrlError),
}

/// What is wrong with an unfit (outcome, class) pair, in `check_final`'s
/// words.
fn unfit_why(outcome: Outcome, class: AttemptClass) -> String {
    match check_final(outcome, class) {
        Err(e) => e.to_string(),
        Ok(()) => format!("outcome {outcome} with class {class}"),
    }
}

/// Refuses the whole batch when one result's outcome does not fit its
/// attempt class: the check every ledger makes before `finish` changes
/// anything.
pub fn check_results<'a>(results: impl IntoIterator<Item = (&'a LeaseRef, &'a RunResult)>) -> Result<(), LedgerError> {
    for (lease, result) in results {
        if check_final(result.outcome, result.attempt.class).is_err() {
            return Err(LedgerError::Unfit {
                run_id: lease.run_id.clone(),
                outcome: result.outcome,
                class: result.attempt.class,
            });
        }
    }
    Ok(())
}

impl LedgerError {
    /// Whether retrying the same call may succeed: Redis was unreachable,
    /// timed out, or said to try again (BUSY, TRYAGAIN, LOADING,
    /// MASTERDOWN, CLUSTERDOWN). A script error, a key of the wrong type, a
    /// bad URL or credentials, an unparsable reply, and every other ledger
    /// error fail the same way again: callers stop with the message instead
    /// of retrying forever.
    pub fn is_transient(&self) -> bool {
        match self {
            LedgerError::Redis(e) => redis_transient(e),
            _ => false,
        }
    }
}

/// Whether a Redis error may heal by itself (see [`LedgerError::is_transient`]).
fn redis_transient(e: &::redis::RedisError) -> bool {
    use ::redis::{ErrorKind, ServerErrorKind};
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        return true;
    }
    match e.kind() {
        // MOVED/ASK past the cluster client's own redirects: the slot map
        // is still changing under a failover (seen as a worker stopped on
        // "Moved: 7616" while a replica took over), so the call is retried.
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => true,
        ErrorKind::ClusterConnectionNotFound => true,
        // A script still running on the server (BUSY) is not a known kind.
        _ => e.code() == Some("BUSY"),
    }
}

/// The message of a Redis error: what happened, and whether waiting helps.
fn redis_what(e: &::redis::RedisError) -> &'static str {
    if redis_transient(e) {
        "the redis ledger is unreachable or busy (retrying)"
    } else {
        "the redis ledger refused the call, and would again: check the redis url, the server, and that nothing else writes the cohort's keys"
    }
}

/// The ledger's operations. Every method is atomic: it moves a run's state
/// and the counts together, or changes nothing.
#[async_trait]
pub trait Ledger: Send + Sync + std::fmt::Debug + 'static {
    /// Requests sent to the store so far, where that means something
    /// (Redis: one per script call, command or pipeline).
    fn round_trips(&self) -> Option<u64> {
        None
    }

    /// Whether a crash of the ledger's server can take back a change it
    /// acknowledged (Redis without `appendfsync always`): the coordinator
    /// then asks workers to journal their reports until [`Ledger::durability`]
    /// says they are on disk. `false` for a ledger that syncs every change
    /// before it answers.
    fn acks_may_be_lost(&self) -> bool {
        self.durable_after() != Some(std::time::Duration::ZERO)
    }

    /// How long after an acknowledgement it is known to be on disk (and
    /// [`Ledger::durability`] says so): zero for a ledger that syncs every
    /// change before it answers, `None` when it never is (a Redis without
    /// an AOF keeps nothing a crash cannot take back).
    fn durable_after(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::ZERO)
    }

    /// How long leasing and expiry wait after the ledger recovered from a
    /// restart of its server that may have lost writes: at least a lease's
    /// life, so that every live worker has heartbeated (taking back a lease
    /// the restart lost) before anything is leased or expired again. The
    /// coordinator sets it to its lease time-to-live; nothing to do for a
    /// ledger that cannot lose writes.
    fn set_recovery_grace(&self, _grace_ms: i64) {}

    /// The ledger's epoch and how far its acknowledgements are known to be
    /// on disk, as this process knows them.
    fn durability(&self) -> Durability {
        Durability::ALWAYS
    }

    /// Seeds the plan: the runs in order, the question texts, the arms.
    /// Idempotent: seeding the same manifest again changes nothing; another
    /// manifest is refused.
    async fn seed(
        &self,
        header: &PlanHeader,
        questions: &[(String, String)],
        order: &[String],
        now_ms: i64,
    ) -> Result<SeedOutcome, LedgerError>;

    /// Leases up to `max` pending runs to `worker`, in the planned order,
    /// skipping arms that are paused or at their concurrency cap, and runs
    /// whose retry backoff has not elapsed. The window opens at the first
    /// start: the first call that grants a run (a call that grants nothing
    /// does not start the clock). Once the window has passed, the call
    /// closes it (pending runs get their closing outcome) and grants nothing.
    ///
    /// A run that would go back to the queue after the cohort closed
    /// (aborted, or the window passed) is closed at once instead: a retry
    /// becomes `unavailable`, a release `not_run` or `unavailable`.
    ///
    /// Manual arms are skipped: this is [`Ledger::lease_scoped`] with
    /// [`LeaseScope::Automatic`].
    async fn lease(&self, worker: &str, max: u32, now_ms: i64, ttl_ms: i64) -> Result<LeaseBatch, LedgerError> {
        self.lease_scoped(worker, LeaseScope::Automatic, max, now_ms, ttl_ms).await
    }

    /// Leases as [`Ledger::lease`] does, from the arms `scope` allows: every
    /// non-manual arm, or one manual arm's runs only. The cap, pause,
    /// backoff, order, window and abort rules are the same for both; the
    /// first grant of either scope opens the window. `LeaseScope::Manual`
    /// naming an unknown arm is [`LedgerError::UnknownArm`], a non-manual
    /// one [`LedgerError::NotManual`].
    async fn lease_scoped(
        &self,
        worker: &str,
        scope: LeaseScope<'_>,
        max: u32,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<LeaseBatch, LedgerError>;

    /// The leases `worker` holds now, in planned order, with their tokens
    /// (a person's open manual runs: the person leases once and submits
    /// later, possibly from another process).
    async fn leases_held(&self, worker: &str) -> Result<Vec<LeaseGrant>, LedgerError>;

    /// Extends the worker's current leases; returns those it no longer holds.
    async fn heartbeat(
        &self,
        worker: &str,
        leases: &[LeaseRef],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Vec<LeaseRef>, LedgerError>;

    /// Rebuilds the ledger of a cohort it lost (emptied, or its file
    /// deleted) from the evidence outside it: seeds the plan as
    /// [`Ledger::seed`] does, with the runs of `rebuilt` in their state
    /// (final with their record and attempts, or pending with their
    /// attempts counted), the collection window where it was (never opened
    /// again at `now_ms`), tokens and epoch past every earlier one. The
    /// ledger is not seeded (no lease can be granted) until all of it is
    /// written; a rebuild cut short is done again. A ledger that holds a
    /// cohort is refused ([`LedgerError::NotEmpty`]) and not changed.
    async fn rebuild(
        &self,
        header: &PlanHeader,
        questions: &[(String, String)],
        order: &[String],
        rebuilt: &Rebuild,
        now_ms: i64,
    ) -> Result<(), LedgerError>;

    /// Records a failed attempt and applies the retry policy.
    async fn report_attempt(
        &self,
        worker: &str,
        lease: &LeaseRef,
        attempt: &AttemptRecord,
        now_ms: i64,
    ) -> Result<AttemptVerdict, LedgerError>;

    /// Records a run's final result. `false` when the lease was stale.
    /// A result whose outcome does not fit its attempt class is
    /// [`LedgerError::Unfit`] (checked first, lease current or not), and
    /// nothing changes.
    async fn finish(
        &self,
        worker: &str,
        lease: &LeaseRef,
        result: &RunResult,
        now_ms: i64,
    ) -> Result<bool, LedgerError>;

    /// Records several final results at once; one `bool` per result, as
    /// [`Ledger::finish`] would return it. Implementations make it one
    /// round trip where they can. One unfit result refuses the whole batch
    /// ([`LedgerError::Unfit`]) before any is recorded.
    async fn finish_many(
        &self,
        worker: &str,
        results: &[(LeaseRef, RunResult)],
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError> {
        check_results(results.iter().map(|(l, r)| (l, r)))?;
        let mut accepted = Vec::with_capacity(results.len());
        for (lease, result) in results {
            accepted.push(self.finish(worker, lease, result, now_ms).await?);
        }
        Ok(accepted)
    }

    /// Gives a lease back unfinished (drain): the run returns to the queue
    /// and no attempt is counted. `false` when the lease was stale.
    async fn release(&self, worker: &str, lease: &LeaseRef, now_ms: i64) -> Result<bool, LedgerError>;

    /// Expires leases whose time passed: a worker_lost attempt is recorded
    /// and the retry policy applied. Returns how many expired.
    async fn expire(&self, now_ms: i64) -> Result<u64, LedgerError>;

    /// Closes the collection window if it has passed: every pending run
    /// gets its closing outcome. Returns how many runs it finalised.
    async fn close_window_if_due(&self, now_ms: i64) -> Result<u64, LedgerError>;

    /// Pauses an arm (no new leases); logged with the reason.
    async fn pause_arm(&self, arm: &str, reason: &str, now_ms: i64) -> Result<(), LedgerError>;

    /// Resumes an arm; `accept_version` is added to its accepted labels.
    /// The acknowledgement is logged.
    async fn resume_arm(
        &self,
        arm: &str,
        acknowledgement: &str,
        accept_version: Option<&str>,
        now_ms: i64,
    ) -> Result<(), LedgerError>;

    /// Aborts the cohort: pending runs become not_run(aborted); leased runs
    /// may still report. Returns how many runs it finalised.
    async fn abort(&self, reason: &str, now_ms: i64) -> Result<u64, LedgerError>;

    /// Counts and arm states.
    async fn status(&self) -> Result<Status, LedgerError>;

    /// Every run, in planned order.
    async fn runs(&self) -> Result<Vec<RunRow>, LedgerError>;

    /// The recorded attempts of a run, in order.
    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, LedgerError>;

    /// The recorded attempts of each of `run_ids`, in order, one list per
    /// run id: what `attempts` gives for each, read in bulk (one round trip
    /// for a Redis ledger, whatever the count; a report reads 100,000 runs'
    /// attempts). By default one `attempts` call per run.
    async fn attempts_of(&self, run_ids: &[&str]) -> Result<Vec<Vec<AttemptRecord>>, LedgerError> {
        let mut all = Vec::with_capacity(run_ids.len());
        for run_id in run_ids {
            all.push(self.attempts(run_id).await?);
        }
        Ok(all)
    }

    /// Reports that arrived with stale leases.
    async fn discarded(&self) -> Result<Vec<DiscardedReport>, LedgerError>;

    /// The audit log, oldest first, at most `limit` entries from the end.
    async fn events(&self, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError>;
}

/// Whether an accepted result's observed version label pauses its arm, and
/// why: a label the arm does not accept (the pinned one and those
/// acknowledged on resume), on an arm not already paused. The one rule of
/// the coordinator (a worker's result) and `cohort submit` (a person's);
/// "not disclosed" (`None`) is never compared.
pub fn version_pause_reason(
    run_id: &str,
    pinned: &str,
    accepted: &[String],
    already_paused: bool,
    observed: Option<&str>,
) -> Option<String> {
    let observed = observed?;
    if already_paused || accepted.iter().any(|v| v == observed) {
        return None;
    }
    Some(format!("version changed: pinned {pinned}, observed {observed} on run {run_id}"))
}

/// Splits a run id the ledger holds, `{question}:{arm}:{repeat}`, with
/// [`RunId::split`]. Both ledgers refuse to seed a malformed id, so every
/// stored id splits; a malformed one from elsewhere gives itself as the
/// question, an empty arm and repeat 1 (which no cohort has: callers then
/// name it as unknown).
pub fn split_run_id(run_id: &str) -> (&str, &str, u32) {
    RunId::split(run_id).unwrap_or((run_id, "", 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves an arm plan without `accepted_versions` reads and writes as
    /// before the field existed (a stored plan header is unchanged), and
    /// that the seeded labels are the pinned one, then the config's, each
    /// once.
    #[test]
    fn arm_plan_accepted_versions_are_optional_and_seeded_after_the_pin() {
        let old = r#"{"id":"a","concurrency":2,"pinned_version":"a-1","manual":false}"#;
        let arm: ArmPlan = serde_json::from_str(old).expect("an old arm plan parses");
        assert!(arm.accepted_versions.is_empty());
        assert_eq!(serde_json::to_string(&arm).unwrap(), old);
        assert_eq!(arm.seeded_versions(), ["a-1"]);
        let arm = ArmPlan { accepted_versions: vec!["a-1-2026".into(), "a-1".into(), "a-1-2026".into()], ..arm };
        assert_eq!(arm.seeded_versions(), ["a-1", "a-1-2026"]);
    }

    /// A plan seeded before the manual flag existed reads as automatic.
    /// Proves a redirect that outlives the cluster client's own (MOVED or
    /// ASK while a failover moves the slot) is an outage to retry, not a
    /// refusal that stops the worker, and a cross-slot call still is one.
    #[test]
    fn redirects_during_a_failover_are_transient() {
        use ::redis::{ErrorKind, RedisError, ServerErrorKind};
        for kind in [ServerErrorKind::Moved, ServerErrorKind::Ask, ServerErrorKind::TryAgain] {
            let e =
                LedgerError::Redis(RedisError::from((ErrorKind::Server(kind), "redirect", "7616 127.0.0.1:1".into())));
            assert!(e.is_transient(), "{e}");
        }
        let wrong = LedgerError::Redis(RedisError::from((ErrorKind::Server(ServerErrorKind::CrossSlot), "cross slot")));
        assert!(!wrong.is_transient(), "{wrong}");
    }

    #[test]
    fn arm_plan_without_the_manual_flag_is_automatic() {
        let arm: ArmPlan = serde_json::from_str(r#"{"id":"a","concurrency":2,"pinned_version":"a-1"}"#)
            .expect("an old arm plan parses");
        assert!(!arm.manual);
        let status: ArmStatus = serde_json::from_str(
            r#"{"id":"a","planned":1,"leased":0,"by_outcome":{},"paused":null,"accepted_versions":[]}"#,
        )
        .expect("an old arm status parses");
        assert!(!status.manual);
    }

    /// The plan marks exactly the arms whose adapter is `manual`.
    #[test]
    fn plan_marks_manual_arms() {
        let arm = |id: &str, adapter: &str| {
            format!(
                "[[arms]]\nid = \"{id}\"\nlabel = \"{id}\"\nadapter = \"{adapter}\"\npinned_version = \"v\"\nvendor_lineage = \"{id}co\"\n"
            )
        };
        let text = format!("name = \"demo\"\nseed = 7\n\n{}\n{}", arm("s", "sim"), arm("p", "manual"));
        let config = cohort_core::config::build_and_validate(&text).expect("a valid cohort");
        let plan = PlanHeader::for_cohort(&config, &"a".repeat(64));
        let manual: Vec<(&str, bool)> = plan.arms.iter().map(|a| (a.id.as_str(), a.manual)).collect();
        assert_eq!(manual, vec![("s", false), ("p", true)]);
    }

    /// Proves the plan carries each arm's `accepted_versions` from
    /// cohort.toml, and none for an arm that lists none.
    #[test]
    fn plan_carries_the_accepted_versions_of_each_arm() {
        let text = "name = \"demo\"\nseed = 7\n\n[[arms]]\nid = \"s\"\nlabel = \"s\"\nadapter = \"sim\"\n\
                    pinned_version = \"v\"\naccepted_versions = [\"v-2026\", \"v (7)\"]\nvendor_lineage = \"sco\"\n\n\
                    [[arms]]\nid = \"p\"\nlabel = \"p\"\nadapter = \"manual\"\npinned_version = \"v\"\n\
                    vendor_lineage = \"pco\"\n";
        let config = cohort_core::config::build_and_validate(text).expect("a valid cohort");
        let plan = PlanHeader::for_cohort(&config, &"a".repeat(64));
        assert_eq!(plan.arms[0].seeded_versions(), ["v", "v-2026", "v (7)"]);
        assert!(plan.arms[1].accepted_versions.is_empty());
    }
}
