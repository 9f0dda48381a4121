//! `cohort score FILE`: scores one report collected anywhere and prints
//! JSON (docs/scoring.md): the deterministic metrics, the normalised
//! reference table and the claims with their cited indices.
//!
//! All scoring logic is `cohort_core::scoring`, the file read and scored
//! by `cohort_worker::score_file`; this module parses flags and prints. With `--judge FILE` the claims go to a judge
//! proxy (the same path as a worker's, `cohort_worker::score`) and the
//! output adds verdicts, the support rate and the judge's trace records;
//! `--capture` fetches cited sources that have no given snippet. Without a
//! judge the support rate is unmeasured, and cited claims whose sources
//! have no snippet are marked `source_unavailable`.

use std::path::PathBuf;

use cohort_core::scoring::ReportFormat;
use cohort_worker::score_file::{ScoreFileRequest, score_file};

use super::emit;

/// How the report cites its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Detect: `[n]` markers with a reference list, or inline links.
    Auto,
    /// `[n]` markers and a reference list.
    Numbered,
    /// Inline Markdown links, normalised to `[n]` first.
    MarkdownLinks,
}

#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    /// The report to score (Markdown, UTF-8); `-` reads standard input.
    pub file: PathBuf,
    /// How the report cites its sources.
    #[arg(long, value_enum, default_value_t = FormatArg::Auto)]
    pub format: FormatArg,
    /// A JSON object of captured source text per citation index,
    /// `{"1": ["snippet", ...], ...}`. Without it no source counts as
    /// captured.
    #[arg(long, value_name = "FILE")]
    pub snippets: Option<PathBuf>,
    /// The run's wall-clock time (`95s`, `2m 5s`), when known.
    #[arg(long, value_name = "DURATION")]
    pub wall_time: Option<humantime::Duration>,
    /// The run's cost as a decimal amount (`0.0425`), when known.
    #[arg(long, value_name = "AMOUNT")]
    pub cost: Option<String>,
    /// The currency of `--cost`.
    #[arg(long, default_value = "USD", requires = "cost")]
    pub currency: String,
    /// Print one line of JSON instead of indented JSON.
    #[arg(long)]
    pub compact: bool,
    /// Judge the claims through a judge proxy (TOML: url, judge, key_env or
    /// key_file, deadline_secs).
    #[arg(long, value_name = "FILE")]
    pub judge: Option<PathBuf>,
    /// Fetch cited sources without a given snippet (with --judge).
    #[arg(long, requires = "judge")]
    pub capture: bool,
    /// The question id written in the judge's trace records.
    #[arg(long, default_value = "", requires = "judge")]
    pub query_id: String,
    /// The system's name written in the judge's trace records.
    #[arg(long, default_value = "", requires = "judge")]
    pub system: String,
}

pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let request = ScoreFileRequest {
        file: args.file.clone(),
        format: match args.format {
            FormatArg::Auto => None,
            FormatArg::Numbered => Some(ReportFormat::Numbered),
            FormatArg::MarkdownLinks => Some(ReportFormat::MarkdownLinks),
        },
        snippets: args.snippets.clone(),
        cost: args.cost.clone(),
        currency: args.currency.clone(),
        wall_time_ms: args.wall_time.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        judge: args.judge.clone(),
        capture: args.capture,
        query_id: args.query_id.clone(),
        system: args.system.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let value = runtime.block_on(score_file(&request))?;
    let mut json = if args.compact { serde_json::to_string(&value)? } else { serde_json::to_string_pretty(&value)? };
    json.push('\n');
    emit(&json);
    Ok(())
}
