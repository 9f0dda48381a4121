//! `cohort score FILE`: scores one report collected anywhere and prints
//! JSON (docs/scoring.md): the deterministic metrics, the normalised
//! reference table and the claims with their cited indices.
//!
//! All scoring logic is `cohort_core::scoring`; this module reads files,
//! parses flags and prints. With `--judge FILE` the claims go to a judge
//! proxy (the same path as a worker's, `cohort_worker::score`) and the
//! output adds verdicts, the support rate and the judge's trace records;
//! `--capture` fetches cited sources that have no given snippet. Without a
//! judge the support rate is unmeasured, and cited claims whose sources
//! have no snippet are marked `source_unavailable`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use cohort_core::scoring::{Cost, MAX_REPORT_BYTES, ReportFormat, RunFacts, ScoreOptions, score_report};

use cohort_artifacts::ArtifactStore;
use cohort_worker::capture::{CaptureConfig, SourceCapturer};
use cohort_worker::score::{JudgeEndpoint, ScoreInput, score_output};

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
    let text = read_report(&args.file)?;
    let snippets = match &args.snippets {
        Some(path) => read_snippets(path)?,
        None => BTreeMap::new(),
    };
    let cost = match &args.cost {
        Some(amount) => Some(Cost { micros: parse_micros(amount)?, currency: args.currency.clone() }),
        None => None,
    };
    let wall_time_ms = args.wall_time.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let options = ScoreOptions {
        format: match args.format {
            FormatArg::Auto => None,
            FormatArg::Numbered => Some(ReportFormat::Numbered),
            FormatArg::MarkdownLinks => Some(ReportFormat::MarkdownLinks),
        },
        run: RunFacts { wall_time_ms, cost },
        snippets,
    };
    let value = match &args.judge {
        None => serde_json::to_value(
            score_report(&text, &options).with_context(|| format!("cannot score {}", args.file.display()))?,
        )?,
        Some(judge_file) => {
            let judge = JudgeEndpoint::from_file(judge_file)?;
            let capturer = if args.capture {
                let store = ArtifactStore::local(std::env::temp_dir().join("cohort-score-captures"));
                Some(SourceCapturer::new(CaptureConfig::default(), store).context("cannot set up source capture")?)
            } else {
                None
            };
            let input = ScoreInput {
                output: &text,
                format: options.format,
                given: options.snippets.clone(),
                query_id: &args.query_id,
                system: &args.system,
                run: options.run.clone(),
                ..ScoreInput::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let scored = runtime
                .block_on(score_output(input, capturer.as_ref(), Some(&judge)))
                .with_context(|| format!("cannot score {}", args.file.display()))?;
            // The same fields as without a judge, plus the judge's side.
            let mut value = serde_json::to_value(&scored.report)?;
            if let Some(object) = value.as_object_mut() {
                object.insert("judge".into(), serde_json::to_value(&scored.judge)?);
                object.insert("judge_traces".into(), serde_json::to_value(&scored.judge_traces)?);
                object.insert("evidence_sources".into(), serde_json::to_value(&scored.evidence_sources)?);
                object.insert("captures".into(), serde_json::to_value(&scored.captures)?);
            }
            value
        }
    };
    let mut json = if args.compact { serde_json::to_string(&value)? } else { serde_json::to_string_pretty(&value)? };
    json.push('\n');
    emit(&json);
    Ok(())
}

/// Reads the report, refusing more than [`MAX_REPORT_BYTES`] before
/// reading it all, and naming the byte where UTF-8 breaks.
fn read_report(path: &Path) -> anyhow::Result<String> {
    let limit = u64::try_from(MAX_REPORT_BYTES).unwrap_or(u64::MAX) + 1;
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin().take(limit).read_to_end(&mut bytes).context("cannot read the report from standard input")?;
    } else {
        let file = std::fs::File::open(path).with_context(|| format!("cannot open the report {}", path.display()))?;
        file.take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read the report {}", path.display()))?;
    }
    if bytes.len() > MAX_REPORT_BYTES {
        bail!("{} is larger than {MAX_REPORT_BYTES} bytes; that is not a report", path.display());
    }
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// Reads `{"1": ["text", ...]}`.
fn read_snippets(path: &Path) -> anyhow::Result<BTreeMap<u32, Vec<String>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the snippets file {}", path.display()))?;
    let raw: BTreeMap<String, Vec<String>> = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected a JSON object of citation index to a list of snippet strings", path.display())
    })?;
    raw.into_iter()
        .map(|(key, texts)| match key.trim().parse::<u32>() {
            Ok(index) if index > 0 => Ok((index, texts)),
            _ => bail!("{}: key `{key}` is not a citation index (a positive integer)", path.display()),
        })
        .collect()
}

/// A non-negative decimal amount to millionths, exactly (no floats):
/// `0.0425` is 42500.
fn parse_micros(amount: &str) -> anyhow::Result<i64> {
    let bad = || anyhow::anyhow!("--cost `{amount}` is not a decimal amount such as 0.0425");
    let (whole, fraction) = amount.trim().split_once('.').unwrap_or((amount.trim(), ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    if fraction.len() > 6 {
        bail!("--cost `{amount}` has more than 6 decimals; the catalog counts millionths");
    }
    let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let fraction: i64 = format!("{fraction:0<6}").parse().map_err(|_| bad())?;
    whole.checked_mul(1_000_000).and_then(|w| w.checked_add(fraction)).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decimal amounts convert to millionths exactly; junk is an error.
    #[test]
    fn parses_cost_to_micros() {
        assert_eq!(parse_micros("0.0425").unwrap(), 42_500);
        assert_eq!(parse_micros("3").unwrap(), 3_000_000);
        assert_eq!(parse_micros(".5").unwrap(), 500_000);
        assert!(parse_micros("-1").is_err());
        assert!(parse_micros("1.2345678").is_err());
        assert!(parse_micros("abc").is_err());
        assert!(parse_micros(".").is_err());
    }
}
