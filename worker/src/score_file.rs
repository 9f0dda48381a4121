//! `cohort score FILE`'s stage: one report collected anywhere, read with
//! its bounds, scored by `cohort_core::scoring` (and, with a judge, through
//! the worker's own path, [`crate::score::score_output`]) into the JSON
//! docs/scoring.md describes.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use cohort_artifacts::ArtifactStore;
use cohort_core::scoring::{Cost, MAX_REPORT_BYTES, ReportFormat, RunFacts, ScoreOptions, ScoringError, score_report};

use crate::capture::{CaptureConfig, CaptureError, SourceCapturer};
use crate::score::{JudgeEndpoint, JudgeFileError, ScoreInput, score_output};

/// Why a file could not be scored; the messages name the file or flag.
#[derive(Debug, thiserror::Error)]
pub enum ScoreFileError {
    /// Bad input: a file that is not a report, a bad flag value.
    #[error("{0}")]
    Input(String),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot score {}", path.display())]
    Score {
        path: PathBuf,
        #[source]
        source: ScoringError,
    },
    #[error(transparent)]
    JudgeFile(#[from] JudgeFileError),
    #[error("cannot set up source capture")]
    Capture(#[source] CaptureError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// What `cohort score` was asked.
#[derive(Debug, Clone, Default)]
pub struct ScoreFileRequest {
    /// The report, or `-` for standard input.
    pub file: PathBuf,
    /// `None`: detect.
    pub format: Option<ReportFormat>,
    /// `{"1": ["text", ...]}`: given snippets per citation index.
    pub snippets: Option<PathBuf>,
    /// A decimal amount, e.g. `0.0425`.
    pub cost: Option<String>,
    pub currency: String,
    pub wall_time_ms: Option<u64>,
    /// The judge proxy file; `None`: deterministic metrics only.
    pub judge: Option<PathBuf>,
    /// Fetch cited sources (with a judge).
    pub capture: bool,
    /// The question id and system written in the judge's trace records.
    pub query_id: String,
    pub system: String,
}

/// Scores the report `request` names into the JSON `cohort score` prints.
pub async fn score_file(request: &ScoreFileRequest) -> Result<serde_json::Value, ScoreFileError> {
    let text = read_report(&request.file)?;
    let snippets = match &request.snippets {
        Some(path) => read_snippets(path)?,
        None => BTreeMap::new(),
    };
    let cost = match &request.cost {
        Some(amount) => Some(Cost { micros: parse_micros(amount)?, currency: request.currency.clone() }),
        None => None,
    };
    let options =
        ScoreOptions { format: request.format, run: RunFacts { wall_time_ms: request.wall_time_ms, cost }, snippets };
    let scoring = |source| ScoreFileError::Score { path: request.file.clone(), source };
    let Some(judge_file) = &request.judge else {
        return Ok(serde_json::to_value(score_report(&text, &options).map_err(scoring)?)?);
    };
    let judge = JudgeEndpoint::from_file(judge_file)?;
    let capturer = if request.capture {
        let store = ArtifactStore::local(std::env::temp_dir().join("cohort-score-captures"));
        Some(SourceCapturer::new(CaptureConfig::default(), store).map_err(ScoreFileError::Capture)?)
    } else {
        None
    };
    let input = ScoreInput {
        output: &text,
        format: options.format,
        given: options.snippets.clone(),
        query_id: &request.query_id,
        system: &request.system,
        run: options.run.clone(),
        ..ScoreInput::default()
    };
    let scored = score_output(input, capturer.as_ref(), Some(&judge)).await.map_err(scoring)?;
    // The same fields as without a judge, plus the judge's side.
    let mut value = serde_json::to_value(&scored.report)?;
    if let Some(object) = value.as_object_mut() {
        object.insert("judge".into(), serde_json::to_value(&scored.judge)?);
        object.insert("judge_traces".into(), serde_json::to_value(&scored.judge_traces)?);
        object.insert("evidence_sources".into(), serde_json::to_value(&scored.evidence_sources)?);
        object.insert("captures".into(), serde_json::to_value(&scored.captures)?);
    }
    Ok(value)
}

/// Reads the report, refusing more than [`MAX_REPORT_BYTES`] before
/// reading it all, and naming the byte where UTF-8 breaks.
fn read_report(path: &Path) -> Result<String, ScoreFileError> {
    let limit = u64::try_from(MAX_REPORT_BYTES).unwrap_or(u64::MAX) + 1;
    let mut bytes = Vec::new();
    let io = |what: String| move |source| ScoreFileError::Io { what, source };
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(io("cannot read the report from standard input".to_owned()))?;
    } else {
        let file = std::fs::File::open(path).map_err(io(format!("cannot open the report {}", path.display())))?;
        file.take(limit).read_to_end(&mut bytes).map_err(io(format!("cannot read the report {}", path.display())))?;
    }
    if bytes.len() > MAX_REPORT_BYTES {
        return Err(ScoreFileError::Input(format!(
            "{} is larger than {MAX_REPORT_BYTES} bytes; that is not a report",
            path.display()
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        ScoreFileError::Input(format!(
            "{} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Reads `{"1": ["text", ...]}`.
fn read_snippets(path: &Path) -> Result<BTreeMap<u32, Vec<String>>, ScoreFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScoreFileError::Io {
        what: format!("cannot read the snippets file {}", path.display()),
        source,
    })?;
    let raw: BTreeMap<String, Vec<String>> = serde_json::from_str(&text).map_err(|e| {
        ScoreFileError::Input(format!(
            "{}: expected a JSON object of citation index to a list of snippet strings: {e}",
            path.display()
        ))
    })?;
    raw.into_iter()
        .map(|(key, texts)| match key.trim().parse::<u32>() {
            Ok(index) if index > 0 => Ok((index, texts)),
            _ => Err(ScoreFileError::Input(format!(
                "{}: key `{key}` is not a citation index (a positive integer)",
                path.display()
            ))),
        })
        .collect()
}

/// A non-negative decimal amount to millionths, exactly (no floats):
/// `0.0425` is 42500.
fn parse_micros(amount: &str) -> Result<i64, ScoreFileError> {
    let bad = || ScoreFileError::Input(format!("--cost `{amount}` is not a decimal amount such as 0.0425"));
    let (whole, fraction) = amount.trim().split_once('.').unwrap_or((amount.trim(), ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    if fraction.len() > 6 {
        return Err(ScoreFileError::Input(format!(
            "--cost `{amount}` has more than 6 decimals; the catalog counts millionths"
        )));
    }
    let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
    let fraction: i64 = format!("{fraction:0<6}").parse().map_err(|_| bad())?;
    whole.checked_mul(1_000_000).and_then(|w| w.checked_add(fraction)).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

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
