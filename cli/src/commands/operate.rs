//! Operating a cohort through its ledger: `cohort status`, `pause`,
//! `resume`, `abort`. They talk to the ledger directly (embedded or Redis),
//! so they work with or without a coordinator running; every change is
//! logged in the ledger's audit log.

use std::path::PathBuf;

use cohort_coordinator::clock::now_ms;

use super::local::{self, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// How many recent audit-log entries to show.
    #[arg(long, default_value_t = 10)]
    pub events: usize,
    /// Print the status as JSON instead.
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
        let frozen = local::load(&args.dir)?;
        let ledger = local::open_ledger(&frozen, &args.store).await?;
        let status = ledger.status().await?;
        if args.json {
            super::emit(&format!("{}\n", serde_json::to_string_pretty(&status)?));
            return Ok(());
        }
        let mut out = format!(
            "cohort \"{}\" (manifest {})\n",
            status.cohort,
            &status.manifest_sha256[..12.min(status.manifest_sha256.len())]
        );
        for arm in &status.arms {
            let finished: u64 = arm.by_outcome.values().sum();
            let filled = (finished * 30).checked_div(arm.planned).unwrap_or(0) as usize;
            // A manual arm's open runs are leased to the person who runs
            // them (`cohort pending`), not to a worker: say so.
            let leased = match (arm.leased, arm.manual) {
                (0, false) => String::new(),
                (0, true) => " MANUAL".to_owned(),
                (n, false) => format!(" {n} leased"),
                (n, true) => format!(" MANUAL, {n} leased to manual:{} (`cohort submit`)", arm.id),
            };
            out.push_str(&format!(
                "{:>14} [{}{}] {finished}/{}{leased}{}\n",
                arm.id,
                "=".repeat(filled),
                " ".repeat(30 - filled),
                arm.planned,
                if arm.paused.is_some() { " PAUSED" } else { "" }
            ));
        }
        match (status.window_start_ms, status.window_end_ms) {
            (Some(s), Some(e)) => out.push_str(&format!("window: opened {} closes {}\n", fmt_ms(s), fmt_ms(e))),
            _ => out.push_str("window: not opened yet (it opens at the first lease)\n"),
        }
        out.push_str(&rounds_line(&frozen, status.window_start_ms));
        out.push('\n');
        out.push_str(&super::table::outcome_table(&status));
        let events = ledger.events(args.events).await?;
        if !events.is_empty() {
            out.push_str("\nrecent events:\n");
            for e in events {
                out.push_str(&format!("  {} {:<14} {} {}\n", fmt_ms(e.at_ms), e.kind, e.run_id, e.detail));
            }
        }
        super::emit(&out);
        Ok(())
    })
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
