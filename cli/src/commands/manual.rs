//! `cohort pending` and `cohort submit`: the manual arm, where a person
//! runs the product in its own UI (docs/manual.md).
//!
//! `pending` leases the arm's due runs to the person (the lease holder
//! `manual:<arm>`, through `LeaseScope::Manual`): in planned order, within
//! the arm's concurrency cap, inside the collection window, each lease
//! lasting to the window's end (there are no heartbeats). It lists every
//! open run with its exact prompt, as the coordinator builds it
//! (`cohort_core::cohort::prompt`).
//!
//! `submit` checks everything before it writes anything, converts the
//! submission through `adapters::manual::Submission` and records it with
//! `execute::record_answer`, the code that records every automatic run
//! (outcome, stored output, scoring, run record), then finishes the lease
//! with its fencing token and compares the version label with the arm's
//! accepted ones, as the coordinator does for a worker's result.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use cohort_clock::now_ms;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_ledger::{
    ArmStatus, LeaseGrant, LeaseRef, LeaseScope, Ledger, RunResult, RunRow, RunStateKind, split_run_id,
};
use cohort_proto::v1 as pb;
use cohort_worker::adapters::manual::{self, ManualSettings, Submission, SubmittedOutcome};
use cohort_worker::execute::{Report, record_answer};
use cohort_worker::record::{ManualRun, rfc3339_ms};
use cohort_worker::{ArmRuntime, adapters};

use super::local::{self, Frozen, ScoringArgs, StoreArgs};
use super::refuse;

#[derive(Debug, clap::Args)]
pub struct PendingArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// Only this manual arm (default: every manual arm).
    #[arg(long)]
    pub arm: Option<String>,
    /// Also write each open run's prompt to DIR2/<run id>.prompt.txt, the
    /// run id's `:` written as `+` (q3:realityengine:1 ->
    /// q3+realityengine+1.prompt.txt).
    #[arg(long, value_name = "DIR2")]
    pub write: Option<PathBuf>,
    /// Print the open runs as JSON instead.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// The run, as `cohort pending` names it (question:arm:repeat).
    pub run_id: String,
    /// The product's complete output, as UTF-8 text.
    pub output_file: PathBuf,
    /// When the person started the run (RFC 3339 UTC, e.g.
    /// 2026-12-01T10:00:00Z; default: when it was offered).
    #[arg(long, value_name = "ISO")]
    pub started: Option<String>,
    /// When the product finished (RFC 3339 UTC; default: now).
    #[arg(long, value_name = "ISO")]
    pub ended: Option<String>,
    /// A file holding the clarifying question the product asked; the reply
    /// recorded is the suffix, the only reply allowed (seed 004).
    #[arg(long, value_name = "FILE")]
    pub clarification: Option<PathBuf>,
    /// The model/version label the product showed (default: "not
    /// disclosed"). A label the arm does not accept pauses it.
    #[arg(long, value_name = "LABEL")]
    pub version: Option<String>,
    /// The product refused: record a `refused` run with this reason (the
    /// output file holds what it said; it may be empty).
    #[arg(long, value_name = "REASON", conflicts_with = "failed")]
    pub refused: Option<String>,
    /// The product failed: record a `failed` run with this reason.
    #[arg(long, value_name = "REASON")]
    pub failed: Option<String>,
    /// The subscription plan used (default: the arm's `settings.plan`).
    #[arg(long)]
    pub plan: Option<String>,
    /// The region the product was used from (default: `settings.region`).
    #[arg(long)]
    pub region: Option<String>,
    /// The credits the product debited, as it shows them.
    #[arg(long, value_name = "N")]
    pub credits: Option<String>,
    /// Input tokens, when the vendor disclosed them.
    #[arg(long, value_name = "N", requires = "usage_output_tokens")]
    pub usage_input_tokens: Option<u64>,
    /// Output tokens, when the vendor disclosed them.
    #[arg(long, value_name = "N", requires = "usage_input_tokens")]
    pub usage_output_tokens: Option<u64>,
    /// A product setting used for the run (repeatable): mode=deep.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub scoring: ScoringArgs,
    /// The judging pass verdicts go into when `--judge` is given.
    #[arg(long, value_name = "NAME", default_value = cohort_worker::passes::DEFAULT_PASS)]
    pub pass: String,
}

/// One open manual run, as listed.
#[derive(Debug)]
struct OpenRun {
    run_id: String,
    question_id: String,
    attempt: u32,
    /// When the run was first offered (RFC 3339).
    offered_at: String,
    /// When the lease ends: the window's end.
    open_until: String,
    prompt: String,
    /// Where `--write` put the prompt.
    prompt_file: Option<String>,
}

impl OpenRun {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run_id": self.run_id,
            "question_id": self.question_id,
            "attempt": self.attempt,
            "offered_at": self.offered_at,
            "open_until": self.open_until,
            "prompt": self.prompt,
            "prompt_file": self.prompt_file,
        })
    }
}

/// One manual arm's listing.
#[derive(Debug)]
struct ArmListing {
    arm: String,
    label: String,
    concurrency: u32,
    instructions: Option<String>,
    open: Vec<OpenRun>,
    /// Runs of the arm still to be offered (pending).
    waiting: u64,
    /// Runs of the arm with their final outcome.
    finished: u64,
    planned: u64,
    /// Why nothing (more) is offered now; `None` when everything due is open.
    note: Option<String>,
}

impl ArmListing {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "arm": self.arm,
            "label": self.label,
            "concurrency": self.concurrency,
            "instructions": self.instructions,
            "open": self.open.iter().map(OpenRun::to_json).collect::<Vec<_>>(),
            "waiting": self.waiting,
            "finished": self.finished,
            "planned": self.planned,
            "note": self.note,
        })
    }
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

fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f)
}

/// The manual arms `only` selects (all when `None`), or a refusal naming
/// what is wrong.
fn manual_arms<'a>(frozen: &'a Frozen, only: Option<&str>) -> anyhow::Result<Vec<&'a ArmConfig>> {
    let config = &frozen.cohort.config;
    if let Some(id) = only {
        let Some(arm) = config.arm(id) else {
            return Err(refuse(format!("--arm {id:?}: not an arm of cohort {:?}", config.name)));
        };
        if arm.adapter != AdapterKind::Manual {
            return Err(refuse(format!(
                "--arm {id:?}: its adapter is not `manual`: workers run it (`cohort run`), nobody submits it by hand"
            )));
        }
        return Ok(vec![arm]);
    }
    let arms: Vec<&ArmConfig> = config.arms.iter().filter(|a| a.adapter == AdapterKind::Manual).collect();
    if arms.is_empty() {
        return Err(refuse(format!("cohort {:?} has no manual arm (adapter = \"manual\")", config.name)));
    }
    Ok(arms)
}

fn settings_of(arm: &ArmConfig) -> anyhow::Result<ManualSettings> {
    // The pre-flight and freeze checked these settings; a failure here is
    // a cohort.toml edited after freezing, which `local::load` refuses.
    ManualSettings::from_arm(arm).map_err(refuse)
}

/// How long a manual lease lasts: to the window's end, or the whole
/// window when it is not open yet (the first grant opens it).
fn lease_ttl_ms(window_end_ms: Option<i64>, window_ms: i64, now: i64) -> i64 {
    window_end_ms.map_or(window_ms, |end| end - now).max(1)
}

pub fn pending(args: PendingArgs) -> anyhow::Result<()> {
    block_on(async move {
        let frozen = local::load(&args.dir)?;
        let arms = manual_arms(&frozen, args.arm.as_deref())?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        // Idempotent: `pending` may come before any `cohort run`.
        local::seed(ledger.as_ref(), &frozen).await?;
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
                let prompt_file = match &args.write {
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
        if args.json {
            super::emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "arms": listings.iter().map(ArmListing::to_json).collect::<Vec<_>>() })
                )?
            ));
        } else {
            super::emit(&render_pending(&args.dir, &listings));
        }
        Ok(())
    })
}

/// Why nothing more is offered to the person now, if so.
fn nothing_due_note(
    status: &cohort_ledger::Status,
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

fn render_pending(dir: &Path, listings: &[ArmListing]) -> String {
    let mut out = String::new();
    for l in listings {
        out.push_str(&format!(
            "arm {} ({}): {} open, {} waiting, {} of {} finished (cap {})\n",
            l.arm,
            l.label,
            l.open.len(),
            l.waiting,
            l.finished,
            l.planned,
            l.concurrency
        ));
        if let Some(instructions) = &l.instructions {
            out.push_str(&format!("instructions: {instructions}\n"));
        }
        if l.open.is_empty() {
            out.push_str(&format!("nothing due: {}\n", l.note.as_deref().unwrap_or("no run of the arm is pending")));
        }
        for run in &l.open {
            out.push_str(&format!(
                "\n--- run {}  question {}  attempt {}  offered {}  open until {}\n",
                run.run_id, run.question_id, run.attempt, run.offered_at, run.open_until
            ));
            if let Some(file) = &run.prompt_file {
                out.push_str(&format!("prompt written to {file}\n"));
            }
            out.push_str("--- prompt (paste exactly, between the lines):\n");
            out.push_str(&run.prompt);
            out.push_str("\n--- end of prompt\n");
            out.push_str(&format!(
                "submit: cohort submit {} {} OUTPUT_FILE [--started ISO --ended ISO] [--clarification FILE] [--version LABEL]\n",
                dir.display(),
                run.run_id
            ));
        }
        if !l.open.is_empty()
            && let Some(note) = &l.note
        {
            out.push_str(&format!("\nmore runs wait: {note}\n"));
        }
        out.push('\n');
    }
    out
}

fn write_prompt(dir: &Path, run_id: &str, prompt: &str) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(prompt_file_name(run_id));
    std::fs::write(&path, prompt).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path.display().to_string())
}

/// An RFC 3339 UTC time given on the command line, as Unix ms.
fn parse_time(flag: &str, text: &str) -> anyhow::Result<i64> {
    let t = humantime::parse_rfc3339(text.trim()).map_err(|e| {
        refuse(format!("--{flag} {text:?}: {e}; write a UTC time in RFC 3339, e.g. 2026-12-01T10:00:00Z"))
    })?;
    let ms =
        t.duration_since(std::time::UNIX_EPOCH).map_err(|_| refuse(format!("--{flag} {text:?} is before 1970")))?;
    i64::try_from(ms.as_millis()).map_err(|_| refuse(format!("--{flag} {text:?} is out of range")))
}

fn read_file(what: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| refuse(format!("cannot read the {what} {}: {e}", path.display())))
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    block_on(submit_run(args))
}

async fn submit_run(args: SubmitArgs) -> anyhow::Result<()> {
    let frozen = local::load(&args.dir)?;
    let config = &frozen.cohort.config;
    if !frozen.manifest.order.iter().any(|r| r == &args.run_id) {
        return Err(refuse(format!(
            "unknown run id {:?}: not a planned run of cohort {:?} (`cohort pending {}` lists the open ones)",
            args.run_id,
            config.name,
            args.dir.display()
        )));
    }
    let (_, arm_id, _) = split_run_id(&args.run_id);
    let Some(arm) = config.arm(arm_id) else {
        return Err(refuse(format!("run {:?}: arm {arm_id:?} is not in cohort.toml", args.run_id)));
    };
    if arm.adapter != AdapterKind::Manual {
        return Err(refuse(format!(
            "run {:?} belongs to arm {arm_id:?}, which is not a manual arm: workers run it (`cohort run`); only a \
             manual arm's runs are submitted",
            args.run_id
        )));
    }
    let settings = settings_of(arm)?;
    // Every input is checked before anything is written.
    let outcome = SubmittedOutcome::from_file(
        read_file("output file", &args.output_file)?,
        args.refused.clone(),
        args.failed.clone(),
        &settings,
    )
    .map_err(|e| refuse(format!("{}: {e}", args.output_file.display())))?;
    let clarification = match &args.clarification {
        Some(path) => Some(
            manual::clarification_text(read_file("clarification file", path)?)
                .map_err(|e| refuse(format!("{}: {e}", path.display())))?,
        ),
        None => None,
    };
    let nonempty = |flag: &'static str, v: &Option<String>| -> anyhow::Result<Option<String>> {
        match v.as_deref().map(str::trim) {
            Some("") => Err(refuse(manual::SubmissionError::EmptyField(flag))),
            other => Ok(other.map(str::to_owned)),
        }
    };
    let version = nonempty("version", &args.version)?;
    let plan = nonempty("plan", &args.plan)?.or(settings.plan.clone());
    let region = nonempty("region", &args.region)?.or(settings.region.clone());
    let credits = args.credits.as_deref().map(manual::credits).transpose().map_err(refuse)?;
    let product_settings = manual::settings_table(&args.settings).map_err(refuse)?;
    let usage = manual::usage(args.usage_input_tokens, args.usage_output_tokens).map_err(refuse)?;
    let started = args.started.as_deref().map(|t| parse_time("started", t)).transpose()?;
    let ended = args.ended.as_deref().map(|t| parse_time("ended", t)).transpose()?;

    // A ledger that does not exist yet has offered nothing: opening it
    // would write one.
    if args.store.redis.is_none() && !args.store.sqlite_path(&args.dir).exists() {
        return Err(not_due(&args));
    }
    let ledger = local::open_ledger(&frozen, &args.store).await?;
    let holder = manual::holder(&arm.id);
    let held = ledger.leases_held(&holder).await?;
    let rows = ledger.runs().await?;
    let Some(row) = rows.iter().find(|r| r.run_id == args.run_id) else { return Err(not_due(&args)) };
    let Some(grant) = held.into_iter().find(|g| g.run_id == args.run_id) else {
        return Err(not_open(&args, row));
    };
    let status = ledger.status().await?;
    let now = now_ms();
    let offered_ms = row.started_ms;
    let started_ms = started.unwrap_or(offered_ms);
    let ended_ms = ended.unwrap_or(now);
    check_times(&status, offered_ms, started_ms, ended_ms, now, started.is_some(), ended.is_some())?;

    let submission = Submission {
        outcome,
        clarification,
        version,
        usage,
        started_ms,
        ended_ms,
        metadata: ManualRun {
            holder: holder.clone(),
            offered_at: rfc3339_ms(offered_ms),
            submitted_at: rfc3339_ms(now),
            times_given: started.is_some() && ended.is_some(),
            plan,
            region,
            settings: product_settings,
            credits_debited: credits,
        },
    };
    let lease = lease_of(ledger.as_ref(), &frozen, &grant).await;
    let answer = submission.into_answer(&lease.prompt, &lease.suffix);
    let context = local::run_context(&frozen, &args.store, &args.scoring)?;
    let runtime = ArmRuntime { config: arm.clone(), adapter: adapters::for_arm(arm)? };
    let report = record_answer(&context, &runtime, &lease, &holder, answer).await;
    let Report::Result { outcome, reason, record_sha256, observed_version, attempt } = report else {
        let detail = match report {
            Report::Attempt(a) => a.detail,
            Report::Result { .. } => String::new(),
        };
        anyhow::bail!("the run could not be recorded ({detail}); the ledger is unchanged: submit it again");
    };
    // A blob the store refused waits in the spool (`record_answer` never
    // loses an answer): it must be in the store before the ledger names
    // its hash, or the result would point at nothing.
    if !context.spool.pending().unwrap_or_default().is_empty()
        && let Err(e) = context.spool.flush_into(&context.store)
    {
        anyhow::bail!(
            "the artifact store refused the run's output or record ({e}); the ledger is unchanged and the run \
             is still open (what could be kept is in {}): fix the store and submit again",
            context.spool.dir().display()
        );
    }
    // The result as the coordinator takes a worker's: the same conversions
    // and bounds.
    use cohort_coordinator::convert;
    let observed = convert::version_from_pb(&observed_version).map_err(|e| refuse(e.message()))?;
    let attempt_record = convert::attempt_from_pb(Some(&attempt)).map_err(|e| refuse(e.message()))?;
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
        return Err(refuse(format!(
            "run {:?}: the lease is no longer current (the window closed or the cohort was aborted meanwhile): \
             nothing was recorded in the ledger",
            args.run_id
        )));
    }
    let paused = check_version(ledger.as_ref(), &args.run_id, arm, observed.as_deref()).await?;
    if let Some(pass) = super::judge::inline_pass(&frozen, context.judge.as_ref(), &args.pass)? {
        cohort_worker::merge_into_pass(&context, &pass, &record_sha256);
    }

    let mut out = format!(
        "recorded {}: {outcome}{}, version {}, record {}\n",
        args.run_id,
        if reason.is_empty() { String::new() } else { format!(" ({reason})") },
        observed.as_deref().unwrap_or(cohort_worker::record::NOT_DISCLOSED),
        &record_sha256[..12.min(record_sha256.len())]
    );
    if let Some(ArmPaused { reason, by_this_run: true }) = &paused {
        out.push_str(&format!("arm {} is PAUSED: {reason}\n", arm.id));
    }
    if context.judge.is_none() && outcome == cohort_core::taxonomy::Outcome::Completed {
        out.push_str(&format!(
            "claims and deterministic metrics are recorded; support is unmeasured until `cohort judge {} --judge \
             FILE{}`{}\n",
            args.dir.display(),
            if context.capturer.is_none() { " --capture" } else { "" },
            if context.capturer.is_none() { " (its cited sources were not fetched)" } else { "" }
        ));
    }
    out.push_str(&next_hint(&args.dir, &arm.id, paused.as_ref(), observed.as_deref()));
    super::emit(&out);
    Ok(())
}

fn not_due(args: &SubmitArgs) -> anyhow::Error {
    refuse(format!(
        "run {:?} is not open: it is not due yet; run it after `cohort pending {}` offers it",
        args.run_id,
        args.dir.display()
    ))
}

/// The refusal for a run the person does not hold.
fn not_open(args: &SubmitArgs, row: &RunRow) -> anyhow::Error {
    match (row.state, row.outcome) {
        (RunStateKind::Final, Some(outcome)) => {
            let at = rfc3339_ms(row.ended_ms);
            let verb = if row.record_sha256.is_empty() { "already final" } else { "already submitted" };
            let why = if row.reason.is_empty() { String::new() } else { format!(" ({})", row.reason) };
            refuse(format!(
                "run {:?} is {verb} at {at}, outcome {outcome}{why}: a result is never replaced (seed 004)",
                args.run_id
            ))
        }
        (RunStateKind::Leased, _) => refuse(format!(
            "run {:?} is leased to someone other than {}: submit it from there",
            args.run_id,
            manual::holder(split_run_id(&args.run_id).1)
        )),
        _ => not_due(args),
    }
}

/// The submitted times: ended >= started, both inside the window, not
/// before the run was offered (it is run after `cohort pending` offers
/// it) and not in the future.
fn check_times(
    status: &cohort_ledger::Status,
    offered_ms: i64,
    started_ms: i64,
    ended_ms: i64,
    now: i64,
    started_given: bool,
    ended_given: bool,
) -> anyhow::Result<()> {
    let t = rfc3339_ms;
    if ended_ms < started_ms {
        return Err(refuse(format!(
            "--ended {} is before --started {}: a run ends after it starts",
            t(ended_ms),
            t(started_ms)
        )));
    }
    if started_given && started_ms < offered_ms {
        return Err(refuse(format!(
            "--started {} is before the run was offered ({}): run it after `cohort pending` offers it",
            t(started_ms),
            t(offered_ms)
        )));
    }
    if let Some(start) = status.window_start_ms
        && started_ms < start
    {
        return Err(refuse(format!(
            "--started {} is before the collection window opened ({})",
            t(started_ms),
            t(start)
        )));
    }
    if let Some(end) = status.window_end_ms
        && ended_ms > end
    {
        return Err(refuse(format!("--ended {} is after the collection window closed ({})", t(ended_ms), t(end))));
    }
    if ended_given && ended_ms > now {
        return Err(refuse(format!("--ended {} is in the future (now {})", t(ended_ms), t(now))));
    }
    Ok(())
}

/// The lease as a worker would get it from the coordinator, through the
/// coordinator's own builder and reading of earlier attempts; a person's
/// lease lasts to the window's end, which is its deadline. A person's run
/// is not traced: no coordinator span leased it.
async fn lease_of(ledger: &dyn Ledger, frozen: &Frozen, grant: &LeaseGrant) -> pb::Lease {
    let previous = cohort_coordinator::service::previous_attempts(ledger, grant).await;
    cohort_coordinator::service::lease_message(
        grant.clone(),
        &frozen.cohort.suffix,
        grant.expires_ms,
        previous,
        String::new(),
    )
}

/// Why an arm is paused after a submission, and whether the submission
/// paused it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArmPaused {
    reason: String,
    /// Its version label was not one the arm accepts: it paused the arm.
    by_this_run: bool,
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
) -> anyhow::Result<Option<ArmPaused>> {
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

/// The last line `cohort submit` prints: the next due run, or, when the
/// arm is paused (`cohort pending` then offers none of its runs), how to
/// resume it, with the label this run reported to accept when it paused
/// the arm.
fn next_hint(dir: &Path, arm: &str, paused: Option<&ArmPaused>, observed: Option<&str>) -> String {
    let dir = dir.display();
    match paused {
        None => format!("next: `cohort pending {dir}` offers the next due run\n"),
        Some(ArmPaused { by_this_run: true, .. }) => format!(
            "next: arm {arm} is paused: `cohort pending {dir}` offers none of its runs until it is resumed. Check \
             the product's release notes, then accept the new label: `cohort resume {dir} --arm {arm} --ack TEXT \
             --accept-version {}`\n",
            shell_quoted(observed.unwrap_or("LABEL"))
        ),
        Some(ArmPaused { reason, by_this_run: false }) => format!(
            "next: arm {arm} is paused ({reason}): `cohort pending {dir}` offers none of its runs until `cohort \
             resume {dir} --arm {arm} --ack TEXT [--accept-version LABEL]`\n"
        ),
    }
}

/// `text` as one shell word: as it is when it is plain, else in single
/// quotes (a `'` inside written `'\''`), so a printed command can be
/// pasted as it stands.
fn shell_quoted(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'+' | b'='));
    if plain { text.to_owned() } else { format!("'{}'", text.replace('\'', "'\\''")) }
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

    fn status(window: Option<(i64, i64)>, arm: ArmStatus) -> cohort_ledger::Status {
        cohort_ledger::Status {
            window_start_ms: window.map(|w| w.0),
            window_end_ms: window.map(|w| w.1),
            arms: vec![arm.clone()],
            ..Default::default()
        }
    }

    fn arm(planned: u64, finished: u64, paused: Option<&str>) -> ArmStatus {
        let mut by_outcome = std::collections::BTreeMap::new();
        if finished > 0 {
            by_outcome.insert(cohort_core::taxonomy::Outcome::Completed, finished);
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
        let note = |s: &cohort_ledger::Status, open, waiting, closed, now| {
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

    /// Proves the submit's last line: the next due run when the arm is not
    /// paused; when the submission paused it, that it is paused and the
    /// resume command with the cohort's real path and the reported label,
    /// quoted for the shell; when it was paused already, why and how to
    /// resume.
    #[test]
    fn next_hint_after_a_pause_says_how_to_resume() {
        let dir = Path::new("/tmp/my cohorts/p");
        assert_eq!(
            next_hint(dir, "m", None, Some("v1")),
            "next: `cohort pending /tmp/my cohorts/p` offers the next due run\n"
        );
        let paused = ArmPaused { reason: "version changed".into(), by_this_run: true };
        let hint = next_hint(dir, "m", Some(&paused), Some("deep-scan 2026.12 (engine 8)"));
        assert!(hint.starts_with("next: arm m is paused: `cohort pending /tmp/my cohorts/p` offers none"), "{hint}");
        assert!(
            hint.ends_with(
                "`cohort resume /tmp/my cohorts/p --arm m --ack TEXT --accept-version 'deep-scan 2026.12 (engine 8)'`\n"
            ),
            "{hint}"
        );
        assert!(!hint.contains("offers the next due run"), "{hint}");
        let before = ArmPaused { reason: "held by the operator".into(), by_this_run: false };
        let hint = next_hint(dir, "m", Some(&before), None);
        assert!(
            hint.contains("arm m is paused (held by the operator)")
                && hint.contains("cohort resume /tmp/my cohorts/p --arm m"),
            "{hint}"
        );
    }

    /// Proves labels become one shell word: plain ones as they are, others
    /// single-quoted with a `'` inside closed, escaped and reopened.
    #[test]
    fn shell_quoted_labels_paste_as_one_word() {
        assert_eq!(shell_quoted("o3-deep-research-2025-06-26"), "o3-deep-research-2025-06-26");
        assert_eq!(shell_quoted("engine 7"), "'engine 7'");
        assert_eq!(shell_quoted("it's $HOME"), "'it'\\''s $HOME'");
        assert_eq!(shell_quoted(""), "''");
    }
}
