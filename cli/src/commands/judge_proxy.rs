//! `cohort judge-proxy --config FILE`: being built (issue 3); owned by the
//! judge-proxy work.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct JudgeProxyArgs {
    /// The proxy's config file (TOML).
    #[arg(long)]
    pub config: PathBuf,
}

pub fn run(_args: JudgeProxyArgs) -> anyhow::Result<()> {
    anyhow::bail!("`cohort judge-proxy` is not built yet")
}
