//! Operating a cohort through its ledger: `cohort status`, `pause`,
//! `resume`, `abort`. They talk to the ledger directly (embedded or Redis),
//! so they work with or without a coordinator running; every change is
//! logged in the ledger's audit log.
//!
//! `cohort status` is for operators and scripts alike (docs/status.md):
//! plain text with no terminal codes, or `--json`, and an exit code that
//! says whether the cohort is done. The text and the JSON are
//! `cohort_serve::status`.

use std::path::PathBuf;

use cohort_clock::now_ms;
use cohort_ledger::progress::{THROUGHPUT_EVENTS, progress};
use cohort_serve::status;

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

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    block_on(async move {
        // Whatever stops the figures from being read exits 2, so a script
        // never takes "cannot tell" for "not finished yet" (4) or "done" (0).
        let frozen = local::load(&args.dir)
            .map_err(|e| super::refuse(format!("cannot read cohort {}: {e:#}", args.dir.display())))?;
        let ledger = local::open_ledger(&frozen, &args.store)
            .await
            .map_err(|e| super::refuse(format!("cannot read the ledger of {}: {e:#}", args.dir.display())))?;
        let status = ledger.status().await.map_err(|e| match (&e, local::lost_ledger(&frozen)) {
            (cohort_ledger::LedgerError::NotSeeded, Some(lost)) => super::refuse(lost),
            _ => super::refuse(format!("cannot read the status of {}: {e:#}", args.dir.display())),
        })?;
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
            let json = status::status_json(&status, &progress, shown, now, exit)?;
            super::emit(&format!("{}\n", serde_json::to_string_pretty(&json)?));
        } else {
            super::emit(&status::status_text(&frozen, &status, &progress, shown, now, exit));
        }
        if exit == 0 { Ok(()) } else { Err(super::Exit(exit).into()) }
    })
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
