//! The manual arm's stage: where a person runs the product in its own UI
//! (docs/manual.md), as `cohort pending` and `cohort submit` compose it.
//!
//! [`pending`] leases the arm's due runs to the person (the lease holder
//! `manual:<arm>`, through `LeaseScope::Manual`): in planned order, within
//! the arm's concurrency cap, inside the collection window, each lease
//! lasting to the window's end (there are no heartbeats). It lists every
//! open run with its exact prompt, as the coordinator builds it
//! (`cohort_core::cohort::prompt`).
//!
//! [`submit`] checks everything before it writes anything, converts the
//! submission through `adapters::manual::Submission` and records it with
//! `execute::record_answer`, the code that records every automatic run
//! (outcome, stored output, scoring, run record), builds the lease with
//! the coordinator's own builder, finishes it with its fencing token and
//! compares the version label with the arm's accepted ones, as the
//! coordinator does for a worker's result.
//!
//! Nothing here prints: a refusal (bad input, a run not open; nothing was
//! written) is [`ManualError::Refused`], which the CLI turns into exit 2.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cohort_clock::now_ms;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::taxonomy::Outcome;
use cohort_ledger::{
    ArmStatus, LeaseGrant, LeaseRef, LeaseScope, Ledger, RunResult, RunRow, RunStateKind, Status, split_run_id,
};
use cohort_worker::adapters::TokenUsage;
use cohort_worker::adapters::manual::{self, ManualSettings, Submission, SubmittedOutcome};
use cohort_worker::execute::{Report, record_answer};
use cohort_worker::record::{ManualRun, rfc3339_ms};
use cohort_worker::wire::RunLease;
use cohort_worker::{ArmRuntime, adapters, judging};
use serde::Serialize;

use crate::local::{self, ScoringConfig, StoreConfig};
use crate::{Frozen, ServeError};

/// Why a manual step stopped.
#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    /// Bad input or a run that is not the person's to submit: nothing was
    /// written (the CLI exits 2).
    #[error("{0}")]
    Refused(String),
    /// A failure along the way (the CLI exits 1).
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// A ledger call failed.
    #[error(transparent)]
    Ledger(#[from] cohort_ledger::LedgerError),
    /// The run could not be recorded; the ledger is unchanged.
    #[error("{0}")]
    NotRecorded(String),
}

fn refused(message: impl std::fmt::Display) -> ManualError {
    ManualError::Refused(message.to_string())
}

/// One open manual run, as listed.
#[derive(Debug, Serialize)]
pub struct OpenRun {
    pub run_id: String,
    pub question_id: String,
    pub attempt: u32,
    /// When the run was first offered (RFC 3339).
    pub offered_at: String,
    /// When the lease ends: the window's end.
    pub open_until: String,
    pub prompt: String,
    /// Where the prompt was written, when asked.
    pub prompt_file: Option<String>,
}

/// One manual arm's listing.
#[derive(Debug, Serialize)]
pub struct ArmListing {
    pub arm: String,
    pub label: String,
    pub concurrency: u32,
    pub instructions: Option<String>,
    pub open: Vec<OpenRun>,
    /// Runs of the arm still to be offered (pending).
    pub waiting: u64,
    /// Runs of the arm with their final outcome.
    pub finished: u64,
    pub planned: u64,
    /// Why nothing (more) is offered now; `None` when everything due is open.
    pub note: Option<String>,
}

/// The portable file name of a run's prompt: `:` becomes `+`; bytes other
/// than ASCII letters, digits, `.`, `_` and `-` (a `+` included) are
/// written `%XX`, and a leading `.` too, so the name is safe on every
/// file system and no two run ids share one.
pub fn prompt_file_name(run_id: &str) -> String {
    let mut name = String::with_capacity(run_id.len() + 12);
    for (i, b) in run_id.bytes().enumerate() {
        match b {
            b':' => name.push('+'),
            b'.' if i == 0 => name.push_str("%2E"),
            b if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') => name.push(char::from(b)),
            b => name.push_str(&format!("%{b:02X}")),
        }
    }
    name.push_str(".prompt.txt");
    name
}

/// The manual arms `only` selects (all when `None`), or a refusal naming
/// what is wrong.
fn manual_arms<'a>(frozen: &'a Frozen, only: Option<&str>) -> Result<Vec<&'a ArmConfig>, ManualError> {
    let config = &frozen.cohort.config;
    if let Some(id) = only {
        let Some(arm) = config.arm(id) else {
            return Err(refused(format!("--arm {id:?}: not an arm of cohort {:?}", config.name)));
        };
        if arm.adapter != AdapterKind::Manual {
            return Err(refused(format!(
                "--arm {id:?}: its adapter is not `manual`: workers run it (`cohort run`), nobody submits it by hand"
            )));
        }
        return Ok(vec![arm]);
    }
    let arms: Vec<&ArmConfig> = config.arms.iter().filter(|a| a.adapter == AdapterKind::Manual).collect();
    if arms.is_empty() {
        return Err(refused(format!("cohort {:?} has no manual arm (adapter = \"manual\")", config.name)));
    }
    Ok(arms)
}

fn settings_of(arm: &ArmConfig) -> Result<ManualSettings, ManualError> {
    // The pre-flight and freeze checked these settings; a failure here is
    // a cohort.toml edited after freezing, which `local::load` refuses.
    ManualSettings::from_arm(arm).map_err(refused)
}

/// How long a manual lease lasts: to the window's end, or the whole
/// window when it is not open yet (the first grant opens it).
fn lease_ttl_ms(window_end_ms: Option<i64>, window_ms: i64, now: i64) -> i64 {
    window_end_ms.map_or(window_ms, |end| end - now).max(1)
}

/// `cohort pending`: seeds the ledger (idempotent: it may come before any
/// `cohort run`), leases each selected manual arm's due runs to the person
/// and lists them; with `write`, each open run's prompt is also written to
/// `write/<prompt_file_name>`.
pub async fn pending(
    frozen: &Frozen,
    store: &StoreConfig,
    only: Option<&str>,
    write: Option<&Path>,
) -> Result<Vec<ArmListing>, ManualError> {
    let arms = manual_arms(frozen, only)?;
    let ledger = local::open_ledger(frozen, store).await?;
    local::seed(ledger.as_ref(), frozen).await?;
    let window_ms = i64::from(frozen.cohort.config.window_hours) * 3_600_000;
    let mut listings = Vec::new();
    for arm in arms {
        let settings = settings_of(arm)?;
        let holder = manual::holder(&arm.id);
        let now = now_ms();
        let before = ledger.status().await?;
        let ttl = lease_ttl_ms(before.window_end_ms, window_ms, now);
        let batch = ledger.lease_scoped(&holder, LeaseScope::Manual(&arm.id), arm.concurrency, now, ttl).await?;
        let held = ledger.leases_held(&holder).await?;
        let status = ledger.status().await?;
        let rows: HashMap<String, RunRow> = if held.is_empty() {
            HashMap::new()
        } else {
            ledger.runs().await?.into_iter().filter(|r| r.arm_id == arm.id).map(|r| (r.run_id.clone(), r)).collect()
        };
        let mut open = Vec::new();
        for grant in &held {
            let prompt = cohort_core::cohort::prompt(&grant.question_text, &frozen.cohort.suffix);
            let prompt_file = match write {
                Some(to) => Some(write_prompt(to, &grant.run_id, &prompt)?),
                None => None,
            };
            let offered = rows.get(&grant.run_id).map_or(0, |r| r.started_ms);
            open.push(OpenRun {
                run_id: grant.run_id.clone(),
                question_id: grant.question_id.clone(),
                attempt: grant.attempt,
                offered_at: rfc3339_ms(offered),
                open_until: rfc3339_ms(grant.expires_ms),
                prompt,
                prompt_file,
            });
        }
        let arm_status = status.arms.iter().find(|a| a.id == arm.id).cloned().unwrap_or_default();
        let finished: u64 = arm_status.by_outcome.values().sum();
        let waiting = arm_status.planned.saturating_sub(finished + arm_status.leased);
        let note = nothing_due_note(&status, &arm_status, arm.concurrency, held.len(), waiting, batch.closed, now);
        listings.push(ArmListing {
            arm: arm.id.clone(),
            label: arm.label.clone(),
            concurrency: arm.concurrency,
            instructions: settings.instructions.clone(),
            open,
            waiting,
            finished,
            planned: arm_status.planned,
            note,
        });
    }
    Ok(listings)
}

/// Why nothing more is offered to the person now, if so.
fn nothing_due_note(
    status: &Status,
    arm: &ArmStatus,
    cap: u32,
    open: usize,
    waiting: u64,
    closed: bool,
    now: i64,
) -> Option<String> {
    let finished: u64 = arm.by_outcome.values().sum();
    if arm.planned > 0 && finished == arm.planned {
        return Some(format!("every run of the arm has its outcome ({finished} of {})", arm.planned));
    }
    if let Some(reason) = &status.aborted {
        return Some(format!("the cohort was aborted ({reason}): nothing more is offered"));
    }
    if closed || status.window_end_ms.is_some_and(|end| now >= end) {
        let end = status.window_end_ms.map_or_else(|| "already".to_owned(), |e| format!("at {}", rfc3339_ms(e)));
        return Some(format!(
            "the collection window closed {end}: nothing more is offered, and runs never submitted are not_run"
        ));
    }
    if waiting == 0 {
        return None;
    }
    if let Some(reason) = &arm.paused {
        return Some(format!("arm paused ({reason}): nothing more is offered until `cohort resume --arm {}`", arm.id));
    }
    if open as u64 >= u64::from(cap) {
        return Some(format!(
            "the arm's concurrency cap ({cap}) is reached: submit an open run and `cohort pending` offers the next"
        ));
    }
    Some("the next runs wait for their retry backoff: run `cohort pending` again later".to_owned())
}

fn write_prompt(dir: &Path, run_id: &str, prompt: &str) -> Result<String, ManualError> {
    std::fs::create_dir_all(dir).map_err(|source| ServeError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(prompt_file_name(run_id));
    std::fs::write(&path, prompt).map_err(|source| ServeError::Write { path: path.clone(), source })?;
    Ok(path.display().to_string())
}

/// What a person submits for one run (`cohort submit`'s flags, as given).
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest {
    /// The run, as `cohort pending` names it (question:arm:repeat).
    pub run_id: String,
    /// The product's complete output, as UTF-8 text.
    pub output_file: PathBuf,
    /// When the person started the run (RFC 3339 UTC; default: when it
    /// was offered).
    pub started: Option<String>,
    /// When the product finished (RFC 3339 UTC; default: now).
    pub ended: Option<String>,
    /// A file holding the clarifying question the product asked.
    pub clarification: Option<PathBuf>,
    /// The model/version label the product showed.
    pub version: Option<String>,
    /// The product refused, with this reason.
    pub refused: Option<String>,
    /// The product failed, with this reason.
    pub failed: Option<String>,
    /// The subscription plan used (default: the arm's `settings.plan`).
    pub plan: Option<String>,
    /// The region the product was used from (default: `settings.region`).
    pub region: Option<String>,
    /// The credits the product debited, as it shows them.
    pub credits: Option<String>,
    pub usage_input_tokens: Option<u64>,
    pub usage_output_tokens: Option<u64>,
    /// Product settings used for the run, `KEY=VALUE`.
    pub settings: Vec<String>,
    /// The judging pass verdicts go into when a judge is configured.
    pub pass: String,
}

/// Why an arm is paused after a submission, and whether the submission
/// paused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmPaused {
    pub reason: String,
    /// Its version label was not one the arm accepts: it paused the arm.
    pub by_this_run: bool,
}

/// What one submission recorded.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub arm: String,
    pub outcome: Outcome,
    pub reason: String,
    /// The version label recorded (`None`: not disclosed).
    pub observed_version: Option<String>,
    pub record_sha256: String,
    /// Why the arm is paused now, if it is.
    pub paused: Option<ArmPaused>,
    /// Whether a judge judged its claims as it was recorded.
    pub judged: bool,
    /// Whether its cited sources were captured as it was recorded.
    pub captured: bool,
}

/// An RFC 3339 UTC time given on the command line, as Unix ms.
fn parse_time(flag: &str, text: &str) -> Result<i64, ManualError> {
    let t = humantime::parse_rfc3339(text.trim()).map_err(|e| {
        refused(format!("--{flag} {text:?}: {e}; write a UTC time in RFC 3339, e.g. 2026-12-01T10:00:00Z"))
    })?;
    let ms =
        t.duration_since(std::time::UNIX_EPOCH).map_err(|_| refused(format!("--{flag} {text:?} is before 1970")))?;
    i64::try_from(ms.as_millis()).map_err(|_| refused(format!("--{flag} {text:?} is out of range")))
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>, ManualError> {
    std::fs::read(path).map_err(|e| refused(format!("cannot read the {what} {}: {e}", path.display())))
}

/// Everything a submission says, checked before anything is written.
struct Checked {
    outcome: SubmittedOutcome,
    clarification: Option<String>,
    version: Option<String>,
    plan: Option<String>,
    region: Option<String>,
    credits: Option<String>,
    settings: std::collections::BTreeMap<String, String>,
    usage: Option<TokenUsage>,
    started: Option<i64>,
    ended: Option<i64>,
}

fn check_request(request: &SubmitRequest, settings: &ManualSettings) -> Result<Checked, ManualError> {
    let outcome = SubmittedOutcome::from_file(
        read_file("output file", &request.output_file)?,
        request.refused.clone(),
        request.failed.clone(),
        settings,
    )
    .map_err(|e| refused(format!("{}: {e}", request.output_file.display())))?;
    let clarification = match &request.clarification {
        Some(path) => Some(
            manual::clarification_text(read_file("clarification file", path)?)
                .map_err(|e| refused(format!("{}: {e}", path.display())))?,
        ),
        None => None,
    };
    let nonempty = |flag: &'static str, v: &Option<String>| -> Result<Option<String>, ManualError> {
        match v.as_deref().map(str::trim) {
            Some("") => Err(refused(manual::SubmissionError::EmptyField(flag))),
            other => Ok(other.map(str::to_owned)),
        }
    };
    Ok(Checked {
        outcome,
        clarification,
        version: nonempty("version", &request.version)?,
        plan: nonempty("plan", &request.plan)?.or(settings.plan.clone()),
        region: nonempty("region", &request.region)?.or(settings.region.clone()),
        credits: request.credits.as_deref().map(manual::credits).transpose().map_err(refused)?,
        settings: manual::settings_table(&request.settings).map_err(refused)?,
        usage: manual::usage(request.usage_input_tokens, request.usage_output_tokens).map_err(refused)?,
        started: request.started.as_deref().map(|t| parse_time("started", t)).transpose()?,
        ended: request.ended.as_deref().map(|t| parse_time("ended", t)).transpose()?,
    })
}

/// The manual arm a planned run belongs to, or a refusal.
fn arm_of<'a>(frozen: &'a Frozen, run_id: &str) -> Result<&'a ArmConfig, ManualError> {
    let config = &frozen.cohort.config;
    if !frozen.manifest.order.iter().any(|r| r == run_id) {
        return Err(refused(format!(
            "unknown run id {run_id:?}: not a planned run of cohort {:?} (`cohort pending {}` lists the open ones)",
            config.name,
            frozen.dir.display()
        )));
    }
    let (_, arm_id, _) = split_run_id(run_id);
    let Some(arm) = config.arm(arm_id) else {
        return Err(refused(format!("run {run_id:?}: arm {arm_id:?} is not in cohort.toml")));
    };
    if arm.adapter != AdapterKind::Manual {
        return Err(refused(format!(
            "run {run_id:?} belongs to arm {arm_id:?}, which is not a manual arm: workers run it (`cohort run`); \
             only a manual arm's runs are submitted"
        )));
    }
    Ok(arm)
}

/// `cohort submit`: records one manual run the person carried out, or
/// refuses with nothing written.
pub async fn submit(
    frozen: &Frozen,
    store: &StoreConfig,
    scoring: &ScoringConfig,
    request: &SubmitRequest,
) -> Result<Submitted, ManualError> {
    let run_id = request.run_id.as_str();
    let arm = arm_of(frozen, run_id)?;
    let settings = settings_of(arm)?;
    // Every input is checked before anything is written.
    let checked = check_request(request, &settings)?;

    // A ledger that does not exist yet has offered nothing: opening it
    // would write one.
    if store.redis.is_none() && !store.sqlite_path(&frozen.dir).exists() {
        return Err(not_due(frozen, run_id));
    }
    // One submit of a run at a time: a second one waits here, then finds
    // the run final and is refused before it writes anything.
    let _lock = submit_lock(&frozen.dir, run_id)?;
    let ledger = local::open_ledger(frozen, store).await?;
    let holder = manual::holder(&arm.id);
    let held = ledger.leases_held(&holder).await?;
    let rows = ledger.runs().await?;
    let Some(row) = rows.iter().find(|r| r.run_id == run_id) else { return Err(not_due(frozen, run_id)) };
    let Some(grant) = held.into_iter().find(|g| g.run_id == run_id) else {
        return Err(not_open(frozen, run_id, row));
    };
    let status = ledger.status().await?;
    let now = now_ms();
    let offered_ms = row.started_ms;
    let started_ms = checked.started.unwrap_or(offered_ms);
    let ended_ms = checked.ended.unwrap_or(now);
    check_times(&status, offered_ms, started_ms, ended_ms, now, checked.started.is_some(), checked.ended.is_some())?;

    let submission = Submission {
        outcome: checked.outcome,
        clarification: checked.clarification,
        version: checked.version,
        usage: checked.usage,
        started_ms,
        ended_ms,
        metadata: ManualRun {
            holder: holder.clone(),
            offered_at: rfc3339_ms(offered_ms),
            submitted_at: rfc3339_ms(now),
            times_given: checked.started.is_some() && checked.ended.is_some(),
            plan: checked.plan,
            region: checked.region,
            settings: checked.settings,
            credits_debited: checked.credits,
        },
    };
    let lease = lease_of(ledger.as_ref(), frozen, &grant).await;
    let answer = submission.into_answer(&lease.prompt, &lease.suffix);
    let context = local::run_context(frozen, store, scoring)?;
    let runtime = ArmRuntime { config: arm.clone(), adapter: adapters::for_arm(arm).map_err(ServeError::from)? };
    let report = record_answer(&context, &runtime, &lease, &holder, answer).await;
    let Report::Result { outcome, reason, record_sha256, observed_version, attempt } = report else {
        let detail = match report {
            Report::Attempt(a) => a.detail,
            Report::NotKept { detail } => detail,
            Report::Result { .. } => String::new(),
        };
        return Err(ManualError::NotRecorded(format!(
            "the run could not be recorded ({detail}); the ledger is unchanged: submit it again"
        )));
    };
    // A blob the store refused waits in the spool (`record_answer` never
    // loses an answer): it must be in the store before the ledger names
    // its hash, or the result would point at nothing.
    if !context.spool.pending().unwrap_or_default().is_empty()
        && let Err(e) = context.spool.flush_into(&context.store)
    {
        return Err(ManualError::NotRecorded(format!(
            "the artifact store refused the run's output or record ({e}); the ledger is unchanged and the run is \
             still open (what could be kept is in {}): fix the store and submit again",
            context.spool.dir().display()
        )));
    }
    // The result as the coordinator takes a worker's: the same conversions
    // and bounds.
    use cohort_coordinator::convert;
    let observed = convert::version_from_pb(&observed_version).map_err(|e| refused(e.message()))?;
    let attempt_record = convert::attempt_from_pb(Some(&attempt.to_pb())).map_err(|e| refused(e.message()))?;
    let result = RunResult {
        outcome,
        // The coordinator keeps a worker's reason to 1024 characters too.
        reason: reason.chars().take(1024).collect(),
        record_sha256: record_sha256.clone(),
        observed_version: observed.clone(),
        attempt: attempt_record,
    };
    let lease_ref = LeaseRef { run_id: grant.run_id.clone(), token: grant.token };
    if !ledger.finish(&holder, &lease_ref, &result, now_ms()).await? {
        // Another submit of the run (from another machine) came first:
        // name it, not a closed window.
        let rows = ledger.runs().await?;
        if let Some(row) = rows.iter().find(|r| r.run_id == run_id && r.state == RunStateKind::Final) {
            return Err(not_open(frozen, run_id, row));
        }
        return Err(refused(format!(
            "run {run_id:?}: the lease is no longer current (the window closed or the cohort was aborted \
             meanwhile): nothing was recorded in the ledger"
        )));
    }
    let paused = check_version(ledger.as_ref(), run_id, arm, observed.as_deref()).await?;
    let pass =
        judging::inline_pass(&frozen.dir, frozen.cohort.config.judge.as_ref(), context.judge.as_ref(), &request.pass)
            .map_err(ServeError::from)?;
    if let Some(pass) = pass {
        cohort_worker::merge_into_pass(&context, &pass, &record_sha256);
    }
    Ok(Submitted {
        arm: arm.id.clone(),
        outcome,
        reason,
        observed_version: observed,
        record_sha256,
        paused,
        judged: context.judge.is_some(),
        captured: context.capturer.is_some(),
    })
}

/// Where the submit locks of a cohort live.
const SUBMIT_LOCKS: &str = ".cohort/submit-locks";

/// An exclusive lock on `run_id`'s submission, held until dropped: two
/// `cohort submit` of one run on this machine are serialised, so the
/// second sees the first's result and is refused (exit 2, "already
/// submitted") before it records an output or a run record. Submits of
/// one run from two machines sharing a Redis ledger are not serialised by
/// it: docs/manual.md says so.
fn submit_lock(dir: &Path, run_id: &str) -> Result<std::fs::File, ManualError> {
    let locks = dir.join(SUBMIT_LOCKS);
    std::fs::create_dir_all(&locks).map_err(|source| ServeError::CreateDir { path: locks.clone(), source })?;
    let path = locks.join(prompt_file_name(run_id).replace(".prompt.txt", ".lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| ServeError::Write { path: path.clone(), source })?;
    file.lock().map_err(|source| ServeError::Write { path, source })?;
    Ok(file)
}

fn not_due(frozen: &Frozen, run_id: &str) -> ManualError {
    refused(format!(
        "run {run_id:?} is not open: it is not due yet; run it after `cohort pending {}` offers it",
        frozen.dir.display()
    ))
}

/// The refusal for a run the person does not hold.
fn not_open(frozen: &Frozen, run_id: &str, row: &RunRow) -> ManualError {
    match (row.state, row.outcome) {
        (RunStateKind::Final, Some(outcome)) => {
            let at = rfc3339_ms(row.ended_ms);
            let verb = if row.record_sha256.is_empty() { "already final" } else { "already submitted" };
            let why = if row.reason.is_empty() { String::new() } else { format!(" ({})", row.reason) };
            refused(format!(
                "run {run_id:?} is {verb} at {at}, outcome {outcome}{why}: a result is never replaced (seed 004)"
            ))
        }
        (RunStateKind::Leased, _) => refused(format!(
            "run {run_id:?} is leased to someone other than {}: submit it from there",
            manual::holder(split_run_id(run_id).1)
        )),
        _ => not_due(frozen, run_id),
    }
}

/// The submitted times: ended >= started, both inside the window, not
/// before the run was offered (it is run after `cohort pending` offers
/// it) and not in the future.
fn check_times(
    status: &Status,
    offered_ms: i64,
    started_ms: i64,
    ended_ms: i64,
    now: i64,
    started_given: bool,
    ended_given: bool,
) -> Result<(), ManualError> {
    let t = rfc3339_ms;
    if ended_ms < started_ms {
        return Err(refused(format!(
            "--ended {} is before --started {}: a run ends after it starts",
            t(ended_ms),
            t(started_ms)
        )));
    }
    if started_given && started_ms < offered_ms {
        return Err(refused(format!(
            "--started {} is before the run was offered ({}): run it after `cohort pending` offers it",
            t(started_ms),
            t(offered_ms)
        )));
    }
    if let Some(start) = status.window_start_ms
        && started_ms < start
    {
        return Err(refused(format!(
            "--started {} is before the collection window opened ({})",
            t(started_ms),
            t(start)
        )));
    }
    if let Some(end) = status.window_end_ms
        && ended_ms > end
    {
        return Err(refused(format!("--ended {} is after the collection window closed ({})", t(ended_ms), t(end))));
    }
    if ended_given && ended_ms > now {
        return Err(refused(format!("--ended {} is in the future (now {})", t(ended_ms), t(now))));
    }
    Ok(())
}

/// The lease as a worker would get it from the coordinator, through the
/// coordinator's own builder and reading of earlier attempts; a person's
/// lease lasts to the window's end, which is its deadline. A person's run
/// is not traced: no coordinator span leased it.
async fn lease_of(ledger: &dyn Ledger, frozen: &Frozen, grant: &LeaseGrant) -> RunLease {
    let previous = cohort_coordinator::service::previous_attempts(ledger, grant).await;
    let message = cohort_coordinator::service::lease_message(
        grant.clone(),
        &frozen.cohort.suffix,
        grant.expires_ms,
        previous,
        String::new(),
    );
    RunLease::from_pb(&message)
}

/// Pauses the arm when the submitted label is not one it accepts, by the
/// coordinator's rule (`ledger::version_pause_reason`) over the ledger's
/// accepted labels. Returns why the arm is paused now, if it is (by this
/// submission or already before it).
async fn check_version(
    ledger: &dyn Ledger,
    run_id: &str,
    arm: &ArmConfig,
    observed: Option<&str>,
) -> Result<Option<ArmPaused>, ManualError> {
    let status = ledger.status().await?;
    let Some(state) = status.arms.iter().find(|a| a.id == arm.id) else { return Ok(None) };
    if let Some(reason) = &state.paused {
        return Ok(Some(ArmPaused { reason: reason.clone(), by_this_run: false }));
    }
    let Some(reason) =
        cohort_ledger::version_pause_reason(run_id, &arm.pinned_version, &state.accepted_versions, false, observed)
    else {
        return Ok(None);
    };
    ledger.pause_arm(&arm.id, &reason, now_ms()).await?;
    Ok(Some(ArmPaused { reason, by_this_run: true }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves prompt file names are portable and distinct: `:` is `+`, a
    /// `+`, `/` or leading `.` in an id is escaped, so ids that differ give
    /// names that differ.
    #[test]
    fn prompt_file_names_are_portable_and_distinct() {
        assert_eq!(prompt_file_name("q3:realityengine:1"), "q3+realityengine+1.prompt.txt");
        assert_eq!(prompt_file_name("a+b:c:1"), "a%2Bb+c+1.prompt.txt");
        assert_eq!(prompt_file_name("../x:c:1"), "%2E.%2Fx+c+1.prompt.txt");
        assert_ne!(prompt_file_name("a+b:c:1"), prompt_file_name("a:b:c:1"));
    }

    fn status(window: Option<(i64, i64)>, arm: ArmStatus) -> Status {
        Status {
            window_start_ms: window.map(|w| w.0),
            window_end_ms: window.map(|w| w.1),
            arms: vec![arm.clone()],
            ..Default::default()
        }
    }

    fn arm(planned: u64, finished: u64, paused: Option<&str>) -> ArmStatus {
        let mut by_outcome = std::collections::BTreeMap::new();
        if finished > 0 {
            by_outcome.insert(Outcome::Completed, finished);
        }
        ArmStatus {
            id: "m".into(),
            planned,
            by_outcome,
            paused: paused.map(str::to_owned),
            manual: true,
            ..Default::default()
        }
    }

    /// Proves each reason `cohort pending` gives when nothing (more) is
    /// due: all final, window closed (the lease call said closed, or the
    /// end has passed), paused, cap reached, backoff; none when every due
    /// run is open.
    #[test]
    fn nothing_due_says_why() {
        let note = |s: &Status, open, waiting, closed, now| {
            nothing_due_note(s, &s.arms[0], 1, open, waiting, closed, now).unwrap_or_default()
        };
        let done = status(Some((0, 100)), arm(3, 3, None));
        assert!(note(&done, 0, 0, true, 50).contains("every run of the arm has its outcome (3 of 3)"));
        let open = status(Some((0, 100)), arm(3, 1, None));
        assert!(note(&open, 0, 2, true, 50).contains("window closed at 1970-01-01T00:00:00.100Z"));
        assert!(note(&open, 0, 2, false, 100).contains("window closed"), "the end has come");
        let paused = status(Some((0, 100)), arm(3, 1, Some("version changed")));
        assert!(note(&paused, 0, 2, false, 50).contains("arm paused (version changed)"));
        assert!(note(&open, 1, 1, false, 50).contains("concurrency cap (1) is reached"));
        assert!(note(&open, 0, 2, false, 50).contains("retry backoff"));
        assert_eq!(note(&open, 1, 0, false, 50), "", "everything due is open");
    }

    /// Proves the lease lasts to the window's end, or the whole window
    /// before it opens, and never less than 1 ms.
    #[test]
    fn manual_leases_last_to_the_window_end() {
        assert_eq!(lease_ttl_ms(None, 3_600_000, 10), 3_600_000);
        assert_eq!(lease_ttl_ms(Some(1_000), 3_600_000, 400), 600);
        assert_eq!(lease_ttl_ms(Some(1_000), 3_600_000, 2_000), 1);
    }

    /// Proves the time rules of `cohort submit`.
    #[test]
    fn submitted_times_are_checked() {
        let s = status(Some((1_000, 10_000)), arm(1, 0, None));
        let check = |started, ended, given| check_times(&s, 2_000, started, ended, 5_000, given, given).is_ok();
        assert!(check(2_000, 4_000, true));
        assert!(!check(4_000, 3_000, true), "ended before started");
        assert!(!check(1_500, 3_000, true), "started before the run was offered");
        assert!(!check(2_000, 12_000, true), "ended after the window");
        assert!(!check(2_000, 6_000, true), "ended in the future");
        assert!(parse_time("started", "2026-12-01T10:00:00.250Z").is_ok_and(|ms| ms % 1000 == 250));
    }
}
