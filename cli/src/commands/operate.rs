//! Operating a cohort through its ledger: `cohort status`, `pause`,
//! `resume`, `abort`. They talk to the ledger directly (embedded or Redis),
//! so they work with or without a coordinator running; every change is
//! logged in the ledger's audit log.
//!
//! `cohort status` is for operators and scripts alike (docs/status.md):
//! plain text with no terminal codes, or `--json`, and an exit code that
//! says whether the cohort is done.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cohort_clock::now_ms;
use cohort_core::order::RunId;
use cohort_core::taxonomy::Outcome;
use cohort_ledger::{LedgerEvent, Status};

use super::local::{self, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// How many recent audit-log entries to show.
    #[arg(long, default_value_t = 10)]
    pub events: usize,
    /// Print the status as one JSON object instead (fields in
    /// docs/status.md). Either way the exit code is 0 when every planned
    /// run is final, 4 when not yet, 2 when the status cannot be read.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct PauseArgs {
    pub dir: PathBuf,
    #[arg(long)]
    pub arm: String,
    /// Why (logged).
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    pub dir: PathBuf,
    #[arg(long)]
    pub arm: String,
    /// The operator's acknowledgement (logged).
    #[arg(long)]
    pub ack: String,
    /// A version label to accept from now on without pausing again.
    #[arg(long)]
    pub accept_version: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct AbortArgs {
    pub dir: PathBuf,
    /// Why (logged).
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f)
}

/// The rounds of a repeated-run cohort with a schedule: when each opens
/// and closes (from the first start), or the rule before it; empty for a
/// cohort of one round.
fn rounds_line(frozen: &local::Frozen, first_start_ms: Option<i64>) -> String {
    let config = &frozen.cohort.config;
    let Some(schedule) = config.repeat_schedule.as_ref().filter(|_| config.repeats > 1) else { return String::new() };
    let mut out = format!("rounds: {}\n", schedule.describe(config.repeats, config.window_hours));
    if let Some(start) = first_start_ms {
        let window_ms = i64::from(config.window_hours) * 3_600_000;
        for round in 1..=config.repeats {
            let opens = start.saturating_add(schedule.opens_after_ms(round));
            out.push_str(&format!(
                "  round {round}: opens {} closes {}\n",
                fmt_ms(opens),
                fmt_ms(opens.saturating_add(window_ms))
            ));
        }
    }
    out
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    block_on(async move {
        // Whatever stops the figures from being read exits 2, so a script
        // never takes "cannot tell" for "not finished yet" (4) or "done" (0).
        let frozen = local::load(&args.dir)
            .map_err(|e| super::refuse(format!("cannot read cohort {}: {e:#}", args.dir.display())))?;
        let ledger = local::open_ledger(&frozen, &args.store)
            .await
            .map_err(|e| super::refuse(format!("cannot read the ledger of {}: {e:#}", args.dir.display())))?;
        let status = ledger
            .status()
            .await
            .map_err(|e| super::refuse(format!("cannot read the status of {}: {e:#}", args.dir.display())))?;
        // One bounded read serves the events shown and the throughput.
        let events = ledger
            .events(args.events.max(THROUGHPUT_EVENTS))
            .await
            .map_err(|e| super::refuse(format!("cannot read the audit log of {}: {e:#}", args.dir.display())))?;
        let now = now_ms();
        let progress = progress(&status, &events, now);
        let shown = &events[events.len().saturating_sub(args.events)..];
        let exit = if status.done() { 0 } else { super::run::EXIT_NOT_FINISHED };
        if args.json {
            let json = status_json(&status, &progress, shown, now, exit)?;
            super::emit(&format!("{}\n", serde_json::to_string_pretty(&json)?));
        } else {
            super::emit(&status_text(&frozen, &status, &progress, shown, now));
        }
        if exit == 0 { Ok(()) } else { Err(super::Exit(exit).into()) }
    })
}

/// How far back `cohort status` looks for finished runs to measure an
/// arm's throughput: long enough to smooth slow arms, short enough that a
/// stopped cohort shows no throughput (and so no ETA) rather than an old one.
const THROUGHPUT_WINDOW_MS: i64 = 10 * 60_000;

/// The most audit-log entries read to measure throughput: a bounded read
/// whatever the cohort's size (the status counts never read the runs).
const THROUGHPUT_EVENTS: usize = 5_000;

/// One arm's progress as `cohort status` shows it.
#[derive(Debug, Clone, PartialEq)]
struct ArmProgress {
    id: String,
    planned: u64,
    /// Runs with their final outcome.
    finished: u64,
    /// Leased: to a worker or, on a manual arm, to a person.
    in_flight: u64,
    /// Neither leased nor final.
    pending: u64,
    /// Finished runs (not_run excluded: nothing was done) per minute over
    /// the measured span; `None` when none finished in it.
    per_minute: Option<f64>,
    eta: Eta,
}

/// When an arm should have every run final, or why no estimate is given.
#[derive(Debug, Clone, PartialEq)]
enum Eta {
    Done,
    /// In this many ms from now.
    In(i64),
    /// No estimate, and why.
    None(String),
}

/// Each arm's progress from the status counts and the recent audit log:
/// throughput from the `final` events of the last [`THROUGHPUT_WINDOW_MS`]
/// (or since the window opened, when later), the ETA from it. A paused
/// arm, an aborted cohort or an arm with no throughput yet get no ETA, and
/// the reason.
fn progress(status: &Status, events: &[LedgerEvent], now: i64) -> Vec<ArmProgress> {
    let since = now.saturating_sub(THROUGHPUT_WINDOW_MS).max(status.window_start_ms.unwrap_or(i64::MIN));
    let span_ms = now.saturating_sub(since).max(1);
    let mut recent: BTreeMap<&str, u64> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == "final" && e.at_ms >= since && e.at_ms <= now) {
        // A run that became not_run (window closed, aborted) was not worked on.
        if e.detail.split(':').next() == Some(Outcome::NotRun.as_str()) {
            continue;
        }
        if let Ok((_, arm, _)) = RunId::split(&e.run_id) {
            *recent.entry(arm).or_default() += 1;
        }
    }
    status
        .arms
        .iter()
        .map(|arm| {
            let finished: u64 = arm.by_outcome.values().sum();
            let left = arm.planned.saturating_sub(finished);
            let n = recent.get(arm.id.as_str()).copied().unwrap_or(0);
            let per_minute = (n > 0).then(|| n as f64 * 60_000.0 / span_ms as f64);
            let eta = if left == 0 {
                Eta::Done
            } else if let Some(reason) = &status.aborted {
                Eta::None(format!("the cohort was aborted ({reason})"))
            } else if arm.paused.is_some() {
                Eta::None("paused: no run is leased until `cohort resume`".to_owned())
            } else if status.window_start_ms.is_none() {
                Eta::None("not started: the window opens at the first lease".to_owned())
            } else if let Some(rate) = per_minute {
                Eta::In((left as f64 / rate * 60_000.0).ceil() as i64)
            } else {
                Eta::None(format!(
                    "no run finished in the last {} min",
                    (span_ms as u64).div_ceil(60_000).min(THROUGHPUT_WINDOW_MS as u64 / 60_000)
                ))
            };
            ArmProgress {
                id: arm.id.clone(),
                planned: arm.planned,
                finished,
                in_flight: arm.leased,
                pending: left.saturating_sub(arm.leased),
                per_minute,
                eta,
            }
        })
        .collect()
}

/// The text of `cohort status`: plain text only (no terminal codes), so
/// it reads the same in a terminal, a pipe or a log file.
fn status_text(
    frozen: &local::Frozen,
    status: &Status,
    progress: &[ArmProgress],
    events: &[LedgerEvent],
    now: i64,
) -> String {
    let mut out = format!(
        "cohort \"{}\" (manifest {}) at {}\n",
        status.cohort,
        &status.manifest_sha256[..12.min(status.manifest_sha256.len())],
        fmt_ms(now)
    );
    for (arm, p) in status.arms.iter().zip(progress) {
        let filled = (p.finished * 30).checked_div(arm.planned).unwrap_or(0).min(30) as usize;
        // A manual arm's open runs are leased to the person who runs
        // them (`cohort pending`), not to a worker: say so.
        let leased = match (arm.leased, arm.manual) {
            (0, false) => String::new(),
            (0, true) => " MANUAL".to_owned(),
            (n, false) => format!(" {n} leased"),
            (n, true) => format!(" MANUAL, {n} leased to manual:{} (`cohort submit`)", arm.id),
        };
        let paused = match &arm.paused {
            Some(reason) => format!(" PAUSED: {reason}"),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:>14} [{}{}] {}/{}{leased}{paused}\n",
            arm.id,
            "=".repeat(filled),
            " ".repeat(30 - filled),
            p.finished,
            arm.planned,
        ));
        let outcomes: Vec<String> = arm.by_outcome.iter().map(|(o, n)| format!("{o} {n}")).collect();
        let rate = match p.per_minute {
            Some(r) => format!("{r:.1} runs/min"),
            None => "no throughput".to_owned(),
        };
        let eta = match &p.eta {
            Eta::Done => "every run final".to_owned(),
            Eta::In(ms) => format!("ETA {} ({})", fmt_duration(*ms), fmt_ms(now.saturating_add(*ms))),
            Eta::None(why) => format!("no ETA: {why}"),
        };
        let held = match arm.held_until_ms.filter(|&t| t > now) {
            Some(t) => format!("; held by a Retry-After until {}", fmt_ms(t)),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:>14}  final {} ({}), in flight {}, pending {}; {rate}; {eta}{held}\n",
            "",
            p.finished,
            if outcomes.is_empty() { "none yet".to_owned() } else { outcomes.join(", ") },
            p.in_flight,
            p.pending,
        ));
    }
    match (status.window_start_ms, status.window_end_ms) {
        (Some(s), Some(e)) => out.push_str(&format!("window: opened {} closes {}\n", fmt_ms(s), fmt_ms(e))),
        _ => out.push_str("window: not opened yet (it opens at the first lease)\n"),
    }
    out.push_str(&rounds_line(frozen, status.window_start_ms));
    out.push_str(&format!(
        "throughput: runs finished in the last {} min (or since the window opened); not_run runs not counted\n",
        THROUGHPUT_WINDOW_MS / 60_000
    ));
    out.push('\n');
    out.push_str(&super::table::outcome_table(status, &frozen.dir));
    if !events.is_empty() {
        out.push_str("\nrecent events (UTC):\n");
        for e in events {
            out.push_str(&format!("  {} {:<14} {} {}\n", fmt_ms(e.at_ms), e.kind, e.run_id, e.detail));
        }
    }
    out.push_str(&if status.done() {
        "\nevery planned run is final (exit 0)\n".to_owned()
    } else {
        format!("\n{} runs not final yet (exit {})\n", status.planned - status.finished, super::run::EXIT_NOT_FINISHED)
    });
    out
}

/// The JSON of `cohort status --json` (field names in docs/status.md):
/// the ledger's status as it is, each arm with its progress added, the
/// events with UTC times, and the exit code.
fn status_json(
    status: &Status,
    progress: &[ArmProgress],
    events: &[LedgerEvent],
    now: i64,
    exit: u8,
) -> anyhow::Result<serde_json::Value> {
    use serde_json::json;
    let mut value = serde_json::to_value(status)?;
    if let Some(arms) = value.get_mut("arms").and_then(serde_json::Value::as_array_mut) {
        for (arm, p) in arms.iter_mut().zip(progress) {
            let Some(arm) = arm.as_object_mut() else { continue };
            let (eta_ms, eta_at, no_eta) = match &p.eta {
                Eta::Done => (Some(0), None, None),
                Eta::In(ms) => (Some(*ms), Some(fmt_ms(now.saturating_add(*ms))), None),
                Eta::None(why) => (None, None, Some(why.clone())),
            };
            arm.insert("finished".into(), json!(p.finished));
            arm.insert("in_flight".into(), json!(p.in_flight));
            arm.insert("pending".into(), json!(p.pending));
            arm.insert("runs_per_minute".into(), json!(p.per_minute));
            arm.insert("eta_ms".into(), json!(eta_ms));
            arm.insert("eta_at".into(), json!(eta_at));
            arm.insert("no_eta_reason".into(), json!(no_eta));
        }
    }
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|e| json!({"at": fmt_ms(e.at_ms), "at_ms": e.at_ms, "kind": e.kind, "run_id": e.run_id, "detail": e.detail}))
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert("now".into(), json!(fmt_ms(now)));
        object.insert("window_start".into(), json!(status.window_start_ms.map(fmt_ms)));
        object.insert("window_end".into(), json!(status.window_end_ms.map(fmt_ms)));
        object.insert("throughput_window_ms".into(), json!(THROUGHPUT_WINDOW_MS));
        object.insert("done".into(), json!(status.done()));
        object.insert("exit_code".into(), json!(exit));
        object.insert("events".into(), json!(events));
    }
    Ok(value)
}

/// A duration for people: `45s`, `12m 30s`, `3h 05m`, `2d 04h`.
fn fmt_duration(ms: i64) -> String {
    let s = (ms.max(0) as u64).div_ceil(1000);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

fn fmt_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

pub fn pause(args: PauseArgs) -> anyhow::Result<()> {
    block_on(async move {
        let frozen = local::load(&args.dir)?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        ledger.pause_arm(&args.arm, &args.reason, now_ms()).await?;
        super::emit(&format!("arm {} paused: no new leases until `cohort resume`\n", args.arm));
        Ok(())
    })
}

pub fn resume(args: ResumeArgs) -> anyhow::Result<()> {
    block_on(async move {
        let frozen = local::load(&args.dir)?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        ledger.resume_arm(&args.arm, &args.ack, args.accept_version.as_deref(), now_ms()).await?;
        super::emit(&format!("arm {} resumed (acknowledgement logged)\n", args.arm));
        Ok(())
    })
}

pub fn abort(args: AbortArgs) -> anyhow::Result<()> {
    block_on(async move {
        let frozen = local::load(&args.dir)?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        let n = ledger.abort(&args.reason, now_ms()).await?;
        super::emit(&format!(
            "cohort aborted: {n} pending runs are now not_run (aborted); running runs may still report\n"
        ));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use cohort_core::taxonomy::Outcome;
    use cohort_ledger::{ArmStatus, LedgerEvent, Status};

    use super::{Eta, THROUGHPUT_WINDOW_MS, progress};

    const NOW: i64 = 1_800_000_000_000;

    fn arm(id: &str, planned: u64, completed: u64, leased: u64, paused: Option<&str>) -> ArmStatus {
        ArmStatus {
            id: id.to_owned(),
            planned,
            leased,
            by_outcome: [(Outcome::Completed, completed)].into_iter().filter(|(_, n)| *n > 0).collect(),
            paused: paused.map(str::to_owned),
            ..ArmStatus::default()
        }
    }

    fn final_event(at_ms: i64, run_id: &str, detail: &str) -> LedgerEvent {
        LedgerEvent { at_ms, kind: "final".to_owned(), run_id: run_id.to_owned(), detail: detail.to_owned() }
    }

    /// Proves the throughput counts the recent finals of each arm (not
    /// not_run, not those older than the window) and the ETA is the runs
    /// left at that rate; a paused arm gets no ETA and says why.
    #[test]
    fn eta_from_recent_finals_and_none_when_paused() {
        let status = Status {
            arms: vec![arm("a", 12, 4, 1, None), arm("p", 12, 2, 0, Some("version changed"))],
            window_start_ms: Some(NOW - 2 * THROUGHPUT_WINDOW_MS),
            ..Status::default()
        };
        let mut events: Vec<LedgerEvent> =
            (1..=4).map(|i| final_event(NOW - i * 60_000, &format!("q{i}:a:1"), "completed")).collect();
        events.push(final_event(NOW - THROUGHPUT_WINDOW_MS - 1, "q9:a:1", "completed"));
        events.push(final_event(NOW - 1_000, "q8:a:1", "not_run: window_closed"));
        events.push(final_event(NOW - 1_000, "q1:p:1", "completed"));
        let p = progress(&status, &events, NOW);
        // 4 finals in 10 minutes: 0.4 a minute; 8 left: 20 minutes.
        assert_eq!(p[0].per_minute, Some(0.4));
        assert_eq!(p[0].eta, Eta::In(20 * 60_000));
        assert_eq!((p[0].finished, p[0].in_flight, p[0].pending), (4, 1, 7));
        assert!(matches!(&p[1].eta, Eta::None(why) if why.contains("paused")), "{:?}", p[1]);
    }

    /// Proves an arm with no recent final gets no ETA (and why), a done arm
    /// says so, and an aborted cohort gives no ETA.
    #[test]
    fn no_eta_without_throughput_or_after_abort() {
        let mut status = Status {
            arms: vec![arm("a", 12, 4, 0, None), arm("d", 2, 2, 0, None)],
            window_start_ms: Some(NOW - 3 * 60_000),
            ..Status::default()
        };
        let p = progress(&status, &[final_event(NOW - 4 * 60_000, "q1:a:1", "completed")], NOW);
        assert!(matches!(&p[0].eta, Eta::None(why) if why == "no run finished in the last 3 min"), "{:?}", p[0]);
        assert_eq!(p[0].per_minute, None);
        assert_eq!(p[1].eta, Eta::Done);
        status.aborted = Some("operator said so".to_owned());
        let p = progress(&status, &[final_event(NOW - 1, "q1:a:1", "completed")], NOW);
        assert!(matches!(&p[0].eta, Eta::None(why) if why.contains("aborted")), "{:?}", p[0]);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(super::fmt_duration(45_000), "45s");
        assert_eq!(super::fmt_duration(750_000), "12m 30s");
        assert_eq!(super::fmt_duration(3 * 3_600_000 + 5 * 60_000), "3h 05m");
        assert_eq!(super::fmt_duration(2 * 86_400_000 + 4 * 3_600_000), "2d 04h");
    }
}
