//! `cohort calibrate` (judge verdicts against gold labels, seed 002) and
//! `cohort review agreement` (two raters' agreement, seed 004 "Reviewer
//! disagreement"), both on `item_id,label` CSV files (docs/calibration.md).
//!
//! The pairing, the scoring and the JSON values are
//! `cohort_report::calibrate` (every statistic `cohort_core::agreement`,
//! the files read by `cohort_report::labels` on `report::csv`, the result
//! side's one CSV reader); this module reads the arguments, shows progress
//! and prints the tables. Bad input (an unreadable file, a missing header,
//! an unknown label, a duplicate item id) is reported with the file, the
//! line and the column, prints nothing to stdout and exits 2, so a script
//! can tell bad input (2) from a failure of the tool (1).

use std::fmt::Write as _;
use std::path::PathBuf;

use cohort_core::agreement::{Agreement, BINARY_METRICS, CALIBRATION_RESAMPLES, CALIBRATION_SEED, Stat, Weights};
use cohort_report::calibrate::{
    self, Calibration, CalibrationInput, CalibrationOptions, CalibrationStep, calibration_steps,
};
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

fn fmt_interval(interval: Option<&(Option<f64>, Option<f64>)>) -> String {
    match interval {
        Some((Some(lo), Some(hi))) => format!("[{lo:.3}, {hi:.3}]"),
        _ => "[undefined]".to_owned(),
    }
}

fn calibration_table(c: &Calibration) -> String {
    let (gold, results, pairs) = (&c.gold, &c.judges, &c.pairs);
    let mut out = String::new();
    let dimension = c.dimension.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
    let _ = writeln!(
        out,
        "calibration{dimension}: gold {} with {} items, {} pass, {} fail; 95% intervals over {} item resamples (seed {})\n",
        gold.file,
        gold.items,
        gold.pass,
        gold.items - gold.pass,
        c.resamples,
        c.seed
    );
    let width = results.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
    let _ = write!(out, "{:<width$} {:>6} {:>5} {:>5} {:>5} {:>5}", "judge", "items", "tp", "fp", "tn", "fn");
    for m in BINARY_METRICS {
        let _ = write!(out, " {m:>24}");
    }
    out.push('\n');
    let mut undefined = Vec::new();
    for r in results {
        let s = &r.scored.scores;
        let _ = write!(out, "{:<width$} {:>6} {:>5} {:>5} {:>5} {:>5}", r.name, s.items, s.tp, s.fp, s.tn, s.r#fn);
        for m in BINARY_METRICS {
            let cell = match s.metric(m) {
                Some(Stat::Value(v)) => format!("{v:.3} {}", fmt_interval(r.scored.intervals.get(m))),
                Some(Stat::Undefined(why)) => {
                    undefined.push(format!("{} {m}: undefined ({why})", r.name));
                    "undefined".to_owned()
                }
                None => String::new(),
            };
            let _ = write!(out, " {cell:>24}");
        }
        out.push('\n');
    }
    out.push('\n');
    for line in undefined {
        let _ = writeln!(out, "{line}");
    }
    for r in results {
        let list = |ids: &[String]| {
            let shown: Vec<&str> = ids.iter().take(10).map(String::as_str).collect();
            let more = if ids.len() > 10 { format!(", ... ({} more)", ids.len() - 10) } else { String::new() };
            format!("{}{more}", shown.join(", "))
        };
        if !r.missing.is_empty() {
            let _ = writeln!(
                out,
                "{}: {} gold items without a verdict (not counted): {}",
                r.name,
                r.missing.len(),
                list(&r.missing)
            );
        }
        if !r.not_in_gold.is_empty() {
            let _ = writeln!(
                out,
                "{}: {} items not in gold (not counted): {}",
                r.name,
                r.not_in_gold.len(),
                list(&r.not_in_gold)
            );
        }
        if let Some(undecided) = r.undecided.as_ref().filter(|u| !u.is_empty()) {
            let _ = writeln!(
                out,
                "{}: {} items with a tied vote (undecided, not counted): {}",
                r.name,
                undecided.len(),
                list(undecided)
            );
        }
    }
    if !pairs.is_empty() {
        let _ = writeln!(out, "\npairwise agreement between judges (items both judged):");
        for p in pairs {
            let a = &p.agreement;
            let _ = writeln!(
                out,
                "  {} vs {}: {} items, raw agreement {}, kappa {}, matrix [{labels}] x [{labels}] {:?}",
                p.a,
                p.b,
                a.items,
                a.raw_agreement,
                a.kappa,
                a.matrix,
                labels = a.labels.join(",")
            );
        }
    }
    out
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

fn agreement_table(a: &str, b: &str, r: &Agreement, only_a: &[String], only_b: &[String]) -> String {
    let mut out = String::new();
    let weights = match r.weights {
        Weights::None => "nominal",
        Weights::Linear => "linear weights",
        Weights::Quadratic => "quadratic weights",
    };
    let _ = writeln!(out, "agreement of A = {a} and B = {b} on {} items both labelled", r.items);
    let _ = writeln!(out, "raw agreement: {}", r.raw_agreement);
    let _ = writeln!(out, "Cohen's kappa ({weights}): {}\n", r.kappa);
    let width = r.labels.iter().map(String::len).max().unwrap_or(1).max(6);
    let _ = write!(out, "{:<width$}", "A \\ B");
    for l in &r.labels {
        let _ = write!(out, " {l:>width$}");
    }
    out.push('\n');
    for (l, row) in r.labels.iter().zip(&r.matrix) {
        let _ = write!(out, "{l:<width$}");
        for n in row {
            let _ = write!(out, " {n:>width$}");
        }
        out.push('\n');
    }
    if !only_a.is_empty() || !only_b.is_empty() {
        out.push('\n');
    }
    for (who, ids) in [("A", only_a), ("B", only_b)] {
        if !ids.is_empty() {
            let _ = writeln!(out, "{} items labelled by {who} only (not counted): {}", ids.len(), ids.join(", "));
        }
    }
    out
}
