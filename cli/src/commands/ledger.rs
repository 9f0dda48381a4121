//! `cohort ledger rebuild DIR`: a ledger that lost its cohort, rebuilt from
//! the run records and the workers' journals (`cohort_serve::rebuild`).

use std::path::PathBuf;

use cohort_clock::now_ms;
use cohort_ledger::LedgerError;
use cohort_serve::ServeError;

use super::local::{self, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct LedgerArgs {
    #[command(subcommand)]
    command: LedgerCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LedgerCommand {
    /// Rebuild a ledger that lost its cohort (Redis emptied or restarted on
    /// an empty data folder, the ledger file deleted) from the run records
    /// in the artifact store and the workers' journals: runs with a record
    /// stay final and are never run again, the window stays where it
    /// opened. Stop the coordinator and workers first (docs/operations.md,
    /// "A lost ledger"; exit 2 when the ledger is not empty).
    Rebuild {
        /// The cohort directory.
        dir: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub fn run(args: LedgerArgs) -> anyhow::Result<()> {
    match args.command {
        LedgerCommand::Rebuild { dir, store } => super::runtime()?.block_on(async move {
            let frozen = local::load(&dir)?;
            let summary = cohort_serve::rebuild::rebuild(&frozen, &store.config(), now_ms()).await.map_err(|e| {
                if matches!(e, ServeError::Ledger(LedgerError::NotEmpty { .. }) | ServeError::RebuildFromS3) {
                    super::refuse(e)
                } else {
                    e.into()
                }
            })?;
            super::emit(&summary.describe());
            Ok(())
        }),
    }
}
