//! `cohort score FILE`: being built (issue 5); owned by the scoring work.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    /// The report to score (Markdown).
    pub file: PathBuf,
}

pub fn run(_args: ScoreArgs) -> anyhow::Result<()> {
    anyhow::bail!("`cohort score` is not built yet")
}
