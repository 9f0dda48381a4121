//! `cohort calibrate` (judge verdicts against gold labels, seed 002) and
//! `cohort review agreement` (two raters' agreement, seed 004 "Reviewer
//! disagreement"), both on `item_id,label` CSV files (docs/calibration.md).
//!
//! Every statistic is `cohort_core::agreement` and the files are read by
//! `cohort_report::labels` (on `report::csv`, the result side's one CSV
//! reader); this module pairs items by id and prints. Bad input (an
//! unreadable file, a missing header, an unknown label, a duplicate item
//! id) is reported with the file, the line and the column, prints nothing
//! to stdout and exits 2, so a script can tell bad input (2) from a failure
//! of the tool (1).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cohort_core::agreement::{
    self, Agreement, BINARY_METRICS, CALIBRATION_ALGORITHM, CALIBRATION_RESAMPLES, CALIBRATION_SEED,
    ScoredWithIntervals, Stat, Weights,
};
use cohort_report::labels::{LabelFile, label_key, label_order};
use serde_json::{Value, json};

use super::{emit, refuse};

/// The judge name of the majority-vote ensemble.
const MAJORITY: &str = "majority";

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

/// A judge named in a way the command cannot use.
#[derive(Debug, thiserror::Error)]
pub enum JudgeNameError {
    #[error("--verdicts {name}: the judge name is given twice; name each judge once")]
    DuplicateJudge { name: String },
    #[error("--verdicts {name}: `{name}` is the name of the majority-vote ensemble; name the judge otherwise")]
    ReservedJudge { name: String },
}

// === cohort calibrate ===

/// One judge's verdict file, read.
#[derive(Debug)]
struct JudgeFile {
    name: String,
    file: String,
    verdicts: Vec<(String, bool)>,
}

/// One judge scored against gold.
#[derive(Debug)]
struct JudgeResult {
    name: String,
    file: Option<String>,
    scored: ScoredWithIntervals,
    /// Gold items the judge gave no verdict on (not counted).
    missing: Vec<String>,
    /// Items in the judge's file that gold does not have (not counted).
    not_in_gold: Vec<String>,
    /// Majority only: gold items on which the vote tied or no judge voted.
    undecided: Option<Vec<String>>,
}

/// Two judges' agreement on the items both judged.
#[derive(Debug)]
struct PairResult {
    a: String,
    b: String,
    agreement: Agreement,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let (gold_source, gold, judges) = match &args.cohort {
        Some(dir) => from_cohort(dir, &args.passes)?,
        None => from_files(&args)?,
    };

    let bar = progress(judges.len() as u64 + u64::from(judges.len() > 1), args.json);
    let gold_ids: HashSet<&str> = gold.iter().map(|(id, _)| id.as_str()).collect();
    let maps: Vec<HashMap<&str, bool>> =
        judges.iter().map(|j| j.verdicts.iter().map(|(id, p)| (id.as_str(), *p)).collect()).collect();
    let mut results = Vec::new();
    for (JudgeFile { name, file, verdicts }, map) in judges.iter().zip(&maps) {
        bar.set_message(name.clone());
        let per_item: Vec<Option<bool>> = gold.iter().map(|(id, _)| map.get(id.as_str()).copied()).collect();
        let mut result = score(name, &gold, &per_item, &args);
        result.file = Some(file.clone());
        result.not_in_gold =
            verdicts.iter().filter(|(id, _)| !gold_ids.contains(id.as_str())).map(|(id, _)| id.clone()).collect();
        results.push(result);
        bar.inc(1);
    }
    if judges.len() > 1 {
        bar.set_message(MAJORITY);
        let votes: Vec<Vec<Option<bool>>> =
            gold.iter().map(|(id, _)| maps.iter().map(|m| m.get(id.as_str()).copied()).collect()).collect();
        let majority = agreement::majority_vote(&votes);
        let mut result = score(MAJORITY, &gold, &majority, &args);
        // An item no judge voted on is missing; a tie is undecided.
        let (missing, undecided): (Vec<_>, Vec<_>) =
            result.missing.drain(..).partition(|id| maps.iter().all(|m| !m.contains_key(id.as_str())));
        result.missing = missing;
        result.undecided = Some(undecided);
        results.push(result);
        bar.inc(1);
    }
    bar.finish_and_clear();

    let pairs = pairwise(&judges);
    let gold_pass = gold.iter().filter(|(_, g)| *g).count();
    let summary = GoldSummary { file: gold_source, items: gold.len(), pass: gold_pass };
    if args.json {
        let value = calibration_json(&args, &summary, &results, &pairs);
        emit(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    } else {
        emit(&calibration_table(&args, &summary, &results, &pairs));
    }
    Ok(())
}

/// What calibration compares: where the gold came from, the gold labels
/// (item id, pass), and the judges.
type CalibrationInput = (String, Vec<(String, bool)>, Vec<JudgeFile>);

/// Gold and judges from `--gold` and `--verdicts` files.
fn from_files(args: &CalibrateArgs) -> anyhow::Result<CalibrationInput> {
    let gold_path = args.gold.as_deref().ok_or_else(|| anyhow::anyhow!("--gold is required without --cohort"))?;
    let gold_file = LabelFile::read(gold_path).map_err(refuse)?;
    let gold = gold_file.verdicts().map_err(refuse)?;
    let mut judges = Vec::new();
    let mut names = HashSet::new();
    for (name, path) in &args.verdicts {
        if name == MAJORITY && args.verdicts.len() > 1 {
            return Err(refuse(JudgeNameError::ReservedJudge { name: name.clone() }));
        }
        if !names.insert(name.clone()) {
            return Err(refuse(JudgeNameError::DuplicateJudge { name: name.clone() }));
        }
        let file = LabelFile::read(path).map_err(refuse)?;
        let verdicts = file.verdicts().map_err(refuse)?;
        judges.push(JudgeFile { name: name.clone(), file: file.file.clone(), verdicts });
    }
    Ok((gold_file.file.clone(), gold, judges))
}

/// Gold from a cohort's adjudicated human review, judges from its passes
/// (docs/calibration.md): the seed-002 comparison of judges against human
/// labels, on the claims both have.
fn from_cohort(dir: &Path, passes: &[String]) -> anyhow::Result<CalibrationInput> {
    use cohort_worker::passes::PassStore;
    let review = cohort_report::review::load(dir).map_err(refuse)?.ok_or_else(|| {
        refuse(format!(
            "{}: no human review imported (cohort review export, then import, see docs/review.md): there is no gold",
            dir.display()
        ))
    })?;
    let gold_claims = cohort_report::review::gold_labels(&review);
    let gold: Vec<(String, bool)> = gold_claims
        .iter()
        .filter(|g| g.label != "unverifiable")
        .map(|g| (format!("{}#{}", g.run_id, g.claim_id), g.label == "fully_supported"))
        .collect();
    let names = if passes.is_empty() { cohort_worker::passes::list(dir).map_err(refuse)? } else { passes.to_vec() };
    if names.is_empty() {
        return Err(refuse(format!("{}: no judging pass to score (cohort judge writes one)", dir.display())));
    }
    if names.len() > 1 && names.iter().any(|n| n == MAJORITY) {
        return Err(refuse(JudgeNameError::ReservedJudge { name: MAJORITY.to_owned() }));
    }
    let runs: std::collections::BTreeSet<&str> = gold_claims.iter().map(|g| g.run_id.as_str()).collect();
    let mut judges = Vec::new();
    for name in names {
        let store = PassStore::open(dir, &name).map_err(refuse)?;
        let mut verdicts = Vec::new();
        for run_id in &runs {
            let Some(run) = store.read_run(run_id).map_err(refuse)? else { continue };
            for claim in &run.claims {
                let Some(vote) = claim.verdict.as_vote() else { continue };
                verdicts.push((format!("{run_id}#{}", claim.claim_id), vote));
            }
        }
        judges.push(JudgeFile { name: name.clone(), file: store.dir().display().to_string(), verdicts });
    }
    Ok((format!("{} (adjudicated human review)", dir.display()), gold, judges))
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

/// Scores `predicted[i]` (None = no verdict) against `gold[i]`.
fn score(name: &str, gold: &[(String, bool)], predicted: &[Option<bool>], args: &CalibrateArgs) -> JudgeResult {
    let mut g = Vec::new();
    let mut p = Vec::new();
    let mut missing = Vec::new();
    for ((id, gold), predicted) in gold.iter().zip(predicted) {
        match predicted {
            Some(v) => {
                g.push(*gold);
                p.push(*v);
            }
            None => missing.push(id.clone()),
        }
    }
    let scored = agreement::binary_scores_with_intervals(&g, &p, args.resamples, args.seed);
    JudgeResult { name: name.to_owned(), file: None, scored, missing, not_in_gold: Vec::new(), undecided: None }
}

/// Every pair of judges, on the items both judged
/// (`agreement::verdict_agreement`, as `cohort passes` compares passes).
fn pairwise(judges: &[JudgeFile]) -> Vec<PairResult> {
    let maps: Vec<HashMap<&str, bool>> =
        judges.iter().map(|j| j.verdicts.iter().map(|(id, v)| (id.as_str(), *v)).collect()).collect();
    let mut pairs = Vec::new();
    for (i, a) in judges.iter().enumerate() {
        for (j, b) in judges.iter().enumerate().skip(i + 1) {
            pairs.push(PairResult {
                a: a.name.clone(),
                b: b.name.clone(),
                agreement: agreement::verdict_agreement(&maps[i], &maps[j]),
            });
        }
    }
    pairs
}

#[derive(Debug)]
struct GoldSummary {
    file: String,
    items: usize,
    pass: usize,
}

/// `{"value": x}` or `{"undefined": why}`, plus the interval.
fn metric_json(stat: &Stat, interval: Option<&(Option<f64>, Option<f64>)>) -> Value {
    let mut v = serde_json::to_value(stat).unwrap_or(Value::Null);
    if let (Value::Object(map), Some((lo, hi))) = (&mut v, interval) {
        map.insert("ci_low".into(), json!(lo));
        map.insert("ci_high".into(), json!(hi));
    }
    v
}

fn ids_json(ids: &[String]) -> Value {
    json!({"count": ids.len(), "items": ids})
}

fn calibration_json(args: &CalibrateArgs, gold: &GoldSummary, results: &[JudgeResult], pairs: &[PairResult]) -> Value {
    let judges: Vec<Value> = results
        .iter()
        .map(|r| {
            let s = &r.scored.scores;
            let mut j = json!({
                "name": r.name,
                "file": r.file,
                "items": s.items,
                "tp": s.tp, "fp": s.fp, "tn": s.tn, "fn": s.r#fn,
                "missing": ids_json(&r.missing),
                "not_in_gold": ids_json(&r.not_in_gold),
            });
            if let Value::Object(map) = &mut j {
                if let Some(undecided) = &r.undecided {
                    map.insert("ensemble".into(), json!("majority vote"));
                    map.insert("undecided".into(), ids_json(undecided));
                }
                for name in BINARY_METRICS {
                    if let Some(stat) = s.metric(name) {
                        map.insert(name.into(), metric_json(stat, r.scored.intervals.get(name)));
                    }
                }
            }
            j
        })
        .collect();
    json!({
        "dimension": args.dimension,
        "gold": {
            "file": gold.file,
            "items": gold.items,
            "pass": gold.pass,
            "fail": gold.items - gold.pass,
        },
        "bootstrap": {"algorithm": CALIBRATION_ALGORITHM, "resamples": args.resamples, "seed": args.seed, "level": 0.95},
        "judges": judges,
        "agreement": pairs.iter().map(pair_json).collect::<Vec<_>>(),
    })
}

fn pair_json(p: &PairResult) -> Value {
    let a = &p.agreement;
    json!({
        "a": p.a,
        "b": p.b,
        "items": a.items,
        "labels": a.labels,
        "matrix": a.matrix,
        "raw_agreement": a.raw_agreement,
        "kappa": a.kappa,
    })
}

fn fmt_interval(interval: Option<&(Option<f64>, Option<f64>)>) -> String {
    match interval {
        Some((Some(lo), Some(hi))) => format!("[{lo:.3}, {hi:.3}]"),
        _ => "[undefined]".to_owned(),
    }
}

fn calibration_table(
    args: &CalibrateArgs,
    gold: &GoldSummary,
    results: &[JudgeResult],
    pairs: &[PairResult],
) -> String {
    let mut out = String::new();
    let dimension = args.dimension.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
    let _ = writeln!(
        out,
        "calibration{dimension}: gold {} with {} items, {} pass, {} fail; 95% intervals over {} item resamples (seed {})\n",
        gold.file,
        gold.items,
        gold.pass,
        gold.items - gold.pass,
        args.resamples,
        args.seed
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
    let seen: Vec<&str> = a.rows.iter().chain(&b.rows).map(|r| r.label.as_str()).collect();
    let order = label_order(&seen);
    let position: HashMap<&str, usize> = order.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect();
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut only_a = Vec::new();
    for row in &a.rows {
        match b.index.get(&row.id).and_then(|&j| b.rows.get(j)) {
            Some(other) => {
                // Every label is in `order` by construction.
                let (Some(&i), Some(&j)) = (
                    position.get(label_key(&row.label, &order).as_str()),
                    position.get(label_key(&other.label, &order).as_str()),
                ) else {
                    anyhow::bail!("label `{}` or `{}` missing from the matrix order", row.label, other.label);
                };
                la.push(i);
                lb.push(j);
            }
            None => only_a.push(row.id.clone()),
        }
    }
    let only_b: Vec<String> = b.rows.iter().filter(|r| !a.index.contains_key(&r.id)).map(|r| r.id.clone()).collect();
    let result = agreement::agreement(&order, &la, &lb, args.weights.into());
    if args.json {
        let value = json!({
            "a": {"file": a.file, "items": a.rows.len()},
            "b": {"file": b.file, "items": b.rows.len()},
            "weights": result.weights,
            "labels": result.labels,
            "items": result.items,
            "matrix": result.matrix,
            "raw_agreement": result.raw_agreement,
            "kappa": result.kappa,
            "only_a": ids_json(&only_a),
            "only_b": ids_json(&only_b),
        });
        emit(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    } else {
        emit(&agreement_table(&a.file, &b.file, &result, &only_a, &only_b));
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
