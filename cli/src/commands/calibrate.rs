//! `cohort calibrate` (judge verdicts against gold labels, seed 002) and
//! `cohort review agreement` (two raters' agreement, seed 004 "Reviewer
//! disagreement"), both on `item_id,label` CSV files (docs/calibration.md).
//!
//! The pairing, the scoring and the JSON values are
//! `cohort_report::calibrate` (every statistic `cohort_core::agreement`,
//! the files read by `cohort_report::labels` on `report::csv`, the result
//! side's one CSV reader); this module reads the arguments, shows progress
//! and prints the tables (`cohort_report::calibration_text`). Bad input (an unreadable file, a missing header,
//! an unknown label, a duplicate item id) is reported with the file, the
//! line and the column, prints nothing to stdout and exits 2, so a script
//! can tell bad input (2) from a failure of the tool (1).

use std::path::PathBuf;

use cohort_core::agreement::{CALIBRATION_RESAMPLES, CALIBRATION_SEED, Weights};
use cohort_report::calibrate::{self, CalibrationInput, CalibrationOptions, CalibrationStep, calibration_steps};
use cohort_report::calibration_text::{agreement_table, calibration_table};
use cohort_report::labels::LabelFile;

use super::{emit, refuse};

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Gold labels: CSV with the header `item_id,label`, labels pass or fail
    /// (also yes or no, any case).
    #[arg(long, value_name = "GOLD.csv", required_unless_present = "cohort", conflicts_with = "cohort")]
    pub gold: Option<PathBuf>,
    /// A judge's verdicts, as NAME=FILE.csv (same format as --gold). Repeat
    /// for several judges; with two or more, their majority vote is scored
    /// too, as the judge `majority`.
    #[arg(
        long = "verdicts",
        value_name = "NAME=FILE.csv",
        required_unless_present = "cohort",
        conflicts_with = "cohort",
        value_parser = parse_named
    )]
    pub verdicts: Vec<(String, PathBuf)>,
    /// Instead of files: gold from this cohort's adjudicated human review
    /// (a claim is a pass when its final label is fully_supported, a fail
    /// when partially_supported, unsupported or contradicted; unverifiable,
    /// not factual, split and unresolved claims are left out) and verdicts
    /// from its judging passes. Items are `RUN_ID#CLAIM_ID`.
    #[arg(long, value_name = "DIR")]
    pub cohort: Option<PathBuf>,
    /// With --cohort: the judging passes to score (repeat; default: every
    /// pass of the cohort).
    #[arg(long = "pass", value_name = "NAME", requires = "cohort")]
    pub passes: Vec<String>,
    /// The rubric dimension these labels are for (e.g. factual_support or
    /// source_relevance); labels the output.
    #[arg(long, value_name = "NAME")]
    pub dimension: Option<String>,
    /// Bootstrap resamples of the items for the 95% intervals (seed 002:
    /// 2,000).
    #[arg(long, default_value_t = CALIBRATION_RESAMPLES)]
    pub resamples: u32,
    /// The bootstrap seed.
    #[arg(long, default_value_t = CALIBRATION_SEED)]
    pub seed: u64,
    /// Print one JSON object (schema in docs/calibration.md) instead of the
    /// table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReviewAgreementArgs {
    /// Rater A's labels: CSV with the header `item_id,label`.
    #[arg(long, value_name = "A.csv")]
    pub a: PathBuf,
    /// Rater B's labels, same format.
    #[arg(long, value_name = "B.csv")]
    pub b: PathBuf,
    /// Kappa weights: none (nominal, for claim labels), linear or quadratic
    /// (ordinal, for the 0/1/2 uncertainty scores; the label order is the
    /// matrix order, see docs/calibration.md).
    #[arg(long, value_enum, default_value_t = WeightsArg::None)]
    pub weights: WeightsArg,
    /// Print one JSON object (schema in docs/calibration.md) instead of the
    /// table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsArg {
    None,
    Linear,
    Quadratic,
}

impl From<WeightsArg> for Weights {
    fn from(w: WeightsArg) -> Weights {
        match w {
            WeightsArg::None => Weights::None,
            WeightsArg::Linear => Weights::Linear,
            WeightsArg::Quadratic => Weights::Quadratic,
        }
    }
}

fn parse_named(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, file)) if !name.trim().is_empty() && !file.is_empty() => {
            Ok((name.trim().to_owned(), PathBuf::from(file)))
        }
        _ => Err(format!("expected NAME=FILE.csv (e.g. gpt-5-mini=verdicts.csv), got `{s}`")),
    }
}

// === cohort calibrate ===

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let input = read_input(&args)?;
    let options = CalibrationOptions { resamples: args.resamples, seed: args.seed, dimension: args.dimension.clone() };
    let bar = progress(calibration_steps(input.judges.len()), args.json);
    let calibration = calibrate::calibrate(&input, &options, |step| match step {
        CalibrationStep::Scoring { judge } => bar.set_message(judge.to_owned()),
        CalibrationStep::Scored => bar.inc(1),
    });
    bar.finish_and_clear();
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&calibration.to_json())?));
    } else {
        emit(&calibration_table(&calibration));
    }
    Ok(())
}

/// Gold and judges from `--cohort` or from `--gold` and `--verdicts`; bad
/// input exits 2.
fn read_input(args: &CalibrateArgs) -> anyhow::Result<CalibrationInput> {
    match &args.cohort {
        Some(dir) => calibrate::from_cohort(dir, &args.passes).map_err(refuse),
        None => {
            let gold = args.gold.as_deref().ok_or_else(|| anyhow::anyhow!("--gold is required without --cohort"))?;
            calibrate::from_files(gold, &args.verdicts).map_err(refuse)
        }
    }
}

/// A bar over the judges; hidden for --json and when stderr is not a
/// terminal (indicatif draws only to terminals).
fn progress(len: u64, json: bool) -> indicatif::ProgressBar {
    if json {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template("calibrating {bar:30} {pos}/{len} {msg}") {
        bar.set_style(style);
    }
    bar
}

// === cohort review agreement ===

pub fn review_agreement(args: ReviewAgreementArgs) -> anyhow::Result<()> {
    let a = LabelFile::read(&args.a).map_err(refuse)?;
    let b = LabelFile::read(&args.b).map_err(refuse)?;
    let result = calibrate::rater_agreement(&a, &b, args.weights.into())?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&result.to_json(&a, &b))?));
    } else {
        emit(&agreement_table(&a.file, &b.file, &result.agreement, &result.only_a, &result.only_b));
    }
    Ok(())
}
