//! Calibration input and assembly: what `cohort calibrate` (judge verdicts
//! against gold labels, seed 002) and `cohort review agreement` (two
//! raters' agreement, seed 004) compute before they print
//! (docs/calibration.md).
//!
//! Every statistic is `cohort_core::agreement`; the label files are read by
//! [`crate::labels`] (on [`crate::csv`], the result side's one CSV reader),
//! the human review by [`crate::review`] and the judging passes by
//! `cohort_records::passes`. This module pairs items by id, scores each
//! judge and their majority vote against gold, compares judges pairwise,
//! and builds the JSON values of docs/calibration.md. Printing (the tables,
//! progress, exit codes) stays with the CLI; every [`CalibrateError`] is
//! bad input, which the CLI reports and exits 2 on.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use cohort_core::agreement::{
    self, Agreement, BINARY_METRICS, CALIBRATION_ALGORITHM, CALIBRATION_ANSWER_ALGORITHM, ScoredWithIntervals, Stat,
    Weights,
};
use cohort_records::passes::{self, PassError, PassStore};
use serde_json::{Value, json};

use crate::labels::{LabelFile, LabelFileError, label_key, label_order};
use crate::review::ReviewError;

/// The judge name of the majority-vote ensemble.
pub const MAJORITY: &str = "majority";

/// Why calibration input cannot be used: bad input, every message naming
/// what to fix.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Labels(#[from] LabelFileError),
    #[error("--verdicts {name}: the judge name is given twice; name each judge once")]
    DuplicateJudge { name: String },
    #[error("--verdicts {name}: `{name}` is the name of the majority-vote ensemble; name the judge otherwise")]
    ReservedJudge { name: String },
    #[error(transparent)]
    Review(#[from] ReviewError),
    #[error(
        "{dir}: no human review imported (cohort review export, then import, see docs/review.md): there is no gold"
    )]
    NoReview { dir: String },
    #[error("{dir}: no judging pass to score (cohort judge writes one)")]
    NoPass { dir: String },
    #[error(transparent)]
    Pass(#[from] PassError),
}

// === calibration input ===

/// One judge's verdicts, read from a file or a judging pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeVerdicts {
    pub name: String,
    /// The file or pass folder, as named in the output.
    pub file: String,
    /// (item id, pass) in the order read.
    pub verdicts: Vec<(String, bool)>,
}

/// What calibration compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalibrationInput {
    /// Where the gold came from, as named in the output.
    pub gold_source: String,
    /// (item id, pass) in the order read.
    pub gold: Vec<(String, bool)>,
    pub judges: Vec<JudgeVerdicts>,
    /// Gold item id -> the answer (run) it belongs to, when known
    /// (`--cohort`: an item is a claim of a run): the bootstrap then
    /// resamples answers, not items (`cohort-calibration-v2`), as claims
    /// cluster within answers. `None` (label files, which name items only):
    /// items are resampled one by one (`cohort-calibration-v1`).
    pub answers: Option<HashMap<String, String>>,
}

/// Gold and judges from `--gold GOLD.csv` and `--verdicts NAME=FILE.csv`.
/// With two or more judges, none may be named [`MAJORITY`].
pub fn from_files(gold: &Path, verdicts: &[(String, PathBuf)]) -> Result<CalibrationInput, CalibrateError> {
    let gold_file = LabelFile::read(gold)?;
    let gold = gold_file.verdicts()?;
    let mut judges = Vec::new();
    let mut names = HashSet::new();
    for (name, path) in verdicts {
        if name == MAJORITY && verdicts.len() > 1 {
            return Err(CalibrateError::ReservedJudge { name: name.clone() });
        }
        if !names.insert(name.clone()) {
            return Err(CalibrateError::DuplicateJudge { name: name.clone() });
        }
        let file = LabelFile::read(path)?;
        let verdicts = file.verdicts()?;
        judges.push(JudgeVerdicts { name: name.clone(), file: file.file.clone(), verdicts });
    }
    Ok(CalibrationInput { gold_source: gold_file.file.clone(), gold, judges, answers: None })
}

/// Gold from a cohort's adjudicated human review, judges from its judging
/// passes (`passes`, or every pass when empty): the seed-002 comparison of
/// judges against human labels, on the claims both have, with each claim's
/// answer (its run) so that the intervals resample answers. Items are
/// `RUN_ID#CLAIM_ID`; a claim is a pass when its final label is
/// fully_supported, a fail when partially_supported, unsupported or
/// contradicted; unverifiable claims and unjudged verdicts are left out.
pub fn from_cohort(dir: &Path, passes: &[String]) -> Result<CalibrationInput, CalibrateError> {
    let review =
        crate::review::load(dir)?.ok_or_else(|| CalibrateError::NoReview { dir: dir.display().to_string() })?;
    let gold_claims = crate::review::gold_labels(&review);
    let gold: Vec<(String, bool)> = gold_claims
        .iter()
        .filter(|g| g.label != "unverifiable")
        .map(|g| (format!("{}#{}", g.run_id, g.claim_id), g.label == "fully_supported"))
        .collect();
    let names = if passes.is_empty() { passes::list(dir)? } else { passes.to_vec() };
    if names.is_empty() {
        return Err(CalibrateError::NoPass { dir: dir.display().to_string() });
    }
    if names.len() > 1 && names.iter().any(|n| n == MAJORITY) {
        return Err(CalibrateError::ReservedJudge { name: MAJORITY.to_owned() });
    }
    let runs: BTreeSet<&str> = gold_claims.iter().map(|g| g.run_id.as_str()).collect();
    let mut judges = Vec::new();
    for name in names {
        let store = PassStore::open(dir, &name)?;
        let mut verdicts = Vec::new();
        for run_id in &runs {
            let Some(run) = store.read_run(run_id)? else { continue };
            for claim in &run.claims {
                let Some(vote) = claim.verdict.as_vote() else { continue };
                verdicts.push((format!("{run_id}#{}", claim.claim_id), vote));
            }
        }
        judges.push(JudgeVerdicts { name: name.clone(), file: store.dir().display().to_string(), verdicts });
    }
    let answers = gold_claims.iter().map(|g| (format!("{}#{}", g.run_id, g.claim_id), g.run_id.clone())).collect();
    Ok(CalibrationInput {
        gold_source: format!("{} (adjudicated human review)", dir.display()),
        gold,
        judges,
        answers: Some(answers),
    })
}

// === calibration ===

/// How to calibrate: the bootstrap of the items, and the rubric dimension
/// that labels the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalibrationOptions {
    pub resamples: u32,
    pub seed: u64,
    pub dimension: Option<String>,
}

/// Where [`calibrate`] is, for a progress display: it scores the judges
/// in order, then their majority vote (as [`MAJORITY`]) when there are two
/// or more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalibrationStep<'a> {
    Scoring { judge: &'a str },
    Scored,
}

/// The number of [`CalibrationStep::Scored`] steps of [`calibrate`] over
/// `judges` judges.
pub fn calibration_steps(judges: usize) -> u64 {
    judges as u64 + u64::from(judges > 1)
}

/// The gold labels, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldSummary {
    pub file: String,
    pub items: usize,
    pub pass: usize,
}

/// One judge scored against gold.
#[derive(Debug)]
pub struct JudgeResult {
    pub name: String,
    pub file: Option<String>,
    pub scored: ScoredWithIntervals,
    /// Gold items the judge gave no verdict on (not counted).
    pub missing: Vec<String>,
    /// Items in the judge's file that gold does not have (not counted).
    pub not_in_gold: Vec<String>,
    /// Majority only: gold items on which the vote tied.
    pub undecided: Option<Vec<String>>,
    /// The answers the scored items belong to, when answers are resampled.
    pub answers: Option<usize>,
}

/// Two judges' agreement on the items both judged.
#[derive(Debug)]
pub struct PairResult {
    pub a: String,
    pub b: String,
    pub agreement: Agreement,
}

/// Every judge (then their majority vote) against gold, and every pair of
/// judges against each other.
#[derive(Debug)]
pub struct Calibration {
    pub dimension: Option<String>,
    pub resamples: u32,
    pub seed: u64,
    /// `cohort-calibration-v2` (answers resampled) or `-v1` (items).
    pub algorithm: &'static str,
    /// What one bootstrap draw picks: `answer` or `item`.
    pub resample_unit: &'static str,
    pub gold: GoldSummary,
    pub judges: Vec<JudgeResult>,
    pub pairs: Vec<PairResult>,
}

/// Scores every judge of `input` against its gold on the items both have,
/// with the majority vote of two or more judges as the judge
/// [`MAJORITY`], and compares the judges pairwise. `progress` hears of
/// each step.
pub fn calibrate(
    input: &CalibrationInput,
    options: &CalibrationOptions,
    mut progress: impl FnMut(CalibrationStep<'_>),
) -> Calibration {
    let CalibrationInput { gold_source, gold, judges, answers } = input;
    let answers = answers.as_ref();
    let gold_ids: HashSet<&str> = gold.iter().map(|(id, _)| id.as_str()).collect();
    let maps = verdict_maps(judges);
    let mut results = Vec::new();
    for (JudgeVerdicts { name, file, verdicts }, map) in judges.iter().zip(&maps) {
        progress(CalibrationStep::Scoring { judge: name });
        let per_item: Vec<Option<bool>> = gold.iter().map(|(id, _)| map.get(id.as_str()).copied()).collect();
        let mut result = score(name, gold, &per_item, answers, options);
        result.file = Some(file.clone());
        result.not_in_gold =
            verdicts.iter().filter(|(id, _)| !gold_ids.contains(id.as_str())).map(|(id, _)| id.clone()).collect();
        results.push(result);
        progress(CalibrationStep::Scored);
    }
    if judges.len() > 1 {
        progress(CalibrationStep::Scoring { judge: MAJORITY });
        let votes: Vec<Vec<Option<bool>>> =
            gold.iter().map(|(id, _)| maps.iter().map(|m| m.get(id.as_str()).copied()).collect()).collect();
        let majority = agreement::majority_vote(&votes);
        let mut result = score(MAJORITY, gold, &majority, answers, options);
        // An item no judge voted on is missing; a tie is undecided.
        let (missing, undecided): (Vec<_>, Vec<_>) =
            result.missing.drain(..).partition(|id| maps.iter().all(|m| !m.contains_key(id.as_str())));
        result.missing = missing;
        result.undecided = Some(undecided);
        results.push(result);
        progress(CalibrationStep::Scored);
    }
    let pass = gold.iter().filter(|(_, g)| *g).count();
    Calibration {
        dimension: options.dimension.clone(),
        resamples: options.resamples,
        seed: options.seed,
        algorithm: if answers.is_some() { CALIBRATION_ANSWER_ALGORITHM } else { CALIBRATION_ALGORITHM },
        resample_unit: if answers.is_some() { "answer" } else { "item" },
        gold: GoldSummary { file: gold_source.clone(), items: gold.len(), pass },
        judges: results,
        pairs: pairwise(judges, &maps),
    }
}

fn verdict_maps(judges: &[JudgeVerdicts]) -> Vec<HashMap<&str, bool>> {
    judges.iter().map(|j| j.verdicts.iter().map(|(id, v)| (id.as_str(), *v)).collect()).collect()
}

/// Scores `predicted[i]` (None = no verdict) against `gold[i]`, on the
/// items with a verdict; with `answers`, the intervals resample the
/// answers of those items (`cohort-calibration-v2`), else the items.
fn score(
    name: &str,
    gold: &[(String, bool)],
    predicted: &[Option<bool>],
    answers: Option<&HashMap<String, String>>,
    options: &CalibrationOptions,
) -> JudgeResult {
    let mut g = Vec::new();
    let mut p = Vec::new();
    let mut a: Vec<&str> = Vec::new();
    let mut missing = Vec::new();
    for ((id, gold), predicted) in gold.iter().zip(predicted) {
        match predicted {
            Some(v) => {
                g.push(*gold);
                p.push(*v);
                // An item without a known answer is an answer of its own.
                a.push(answers.and_then(|m| m.get(id)).map_or(id.as_str(), String::as_str));
            }
            None => missing.push(id.clone()),
        }
    }
    let (scored, answers) = match answers {
        Some(_) => (
            agreement::binary_scores_with_answer_intervals(&g, &p, &a, options.resamples, options.seed),
            Some(a.iter().collect::<BTreeSet<_>>().len()),
        ),
        None => (agreement::binary_scores_with_intervals(&g, &p, options.resamples, options.seed), None),
    };
    JudgeResult {
        name: name.to_owned(),
        file: None,
        scored,
        missing,
        not_in_gold: Vec::new(),
        undecided: None,
        answers,
    }
}

/// Every pair of judges, on the items both judged
/// (`agreement::verdict_agreement`, as `cohort passes` compares passes).
fn pairwise(judges: &[JudgeVerdicts], maps: &[HashMap<&str, bool>]) -> Vec<PairResult> {
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

impl Calibration {
    /// The `cohort calibrate --json` object (docs/calibration.md).
    pub fn to_json(&self) -> Value {
        let judges: Vec<Value> = self.judges.iter().map(judge_json).collect();
        let gold = &self.gold;
        json!({
            "dimension": self.dimension,
            "gold": {
                "file": gold.file,
                "items": gold.items,
                "pass": gold.pass,
                "fail": gold.items - gold.pass,
            },
            "bootstrap": {
                "algorithm": self.algorithm,
                "unit": self.resample_unit,
                "resamples": self.resamples,
                "seed": self.seed,
                "level": 0.95,
            },
            "judges": judges,
            "agreement": self.pairs.iter().map(pair_json).collect::<Vec<_>>(),
        })
    }
}

fn judge_json(r: &JudgeResult) -> Value {
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
        if let Some(answers) = r.answers {
            map.insert("answers".into(), json!(answers));
        }
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

// === review agreement ===

/// A label missing from the matrix order: never, as the order is built
/// from the labels; a defect of this module, not bad input.
#[derive(Debug, thiserror::Error)]
#[error("label `{a}` or `{b}` missing from the matrix order")]
pub struct MatrixOrderError {
    pub a: String,
    pub b: String,
}

/// Two raters' agreement on the items both labelled.
#[derive(Debug)]
pub struct RaterAgreement {
    pub agreement: Agreement,
    /// Items only rater A labelled (not counted), in A's order.
    pub only_a: Vec<String>,
    /// Items only rater B labelled (not counted), in B's order.
    pub only_b: Vec<String>,
}

/// Pairs rater A's labels with rater B's by item id, in the matrix order
/// of [`label_order`], and measures their agreement.
pub fn rater_agreement(a: &LabelFile, b: &LabelFile, weights: Weights) -> Result<RaterAgreement, MatrixOrderError> {
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
                    return Err(MatrixOrderError { a: row.label.clone(), b: other.label.clone() });
                };
                la.push(i);
                lb.push(j);
            }
            None => only_a.push(row.id.clone()),
        }
    }
    let only_b: Vec<String> = b.rows.iter().filter(|r| !a.index.contains_key(&r.id)).map(|r| r.id.clone()).collect();
    Ok(RaterAgreement { agreement: agreement::agreement(&order, &la, &lb, weights), only_a, only_b })
}

impl RaterAgreement {
    /// The `cohort review agreement --json` object (docs/calibration.md)
    /// for the files `a` and `b`.
    pub fn to_json(&self, a: &LabelFile, b: &LabelFile) -> Value {
        let result = &self.agreement;
        json!({
            "a": {"file": a.file, "items": a.rows.len()},
            "b": {"file": b.file, "items": b.rows.len()},
            "weights": result.weights,
            "labels": result.labels,
            "items": result.items,
            "matrix": result.matrix,
            "raw_agreement": result.raw_agreement,
            "kappa": result.kappa,
            "only_a": ids_json(&self.only_a),
            "only_b": ids_json(&self.only_b),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judge(name: &str, verdicts: &[(&str, bool)]) -> JudgeVerdicts {
        JudgeVerdicts {
            name: name.into(),
            file: format!("{name}.csv"),
            verdicts: verdicts.iter().map(|(id, v)| ((*id).to_owned(), *v)).collect(),
        }
    }

    /// The pairing rules: a judge's gold items without a verdict are
    /// missing and its items outside gold are not in gold; for the
    /// majority, an item no judge voted on is missing and a tie is
    /// undecided; progress hears every judge, the majority last.
    #[test]
    fn judges_are_paired_with_gold_by_item_id() {
        let input = CalibrationInput {
            gold_source: "gold.csv".into(),
            gold: vec![("a".into(), true), ("b".into(), false), ("c".into(), true)],
            judges: vec![
                judge("x", &[("a", true), ("b", true), ("z", false)]),
                judge("y", &[("a", true), ("b", false)]),
            ],
            answers: None,
        };
        let options = CalibrationOptions { resamples: 10, seed: 1, dimension: None };
        let mut steps = Vec::new();
        let c = calibrate(&input, &options, |s| {
            steps.push(match s {
                CalibrationStep::Scoring { judge } => judge.to_owned(),
                CalibrationStep::Scored => "+".to_owned(),
            })
        });
        assert_eq!(steps, ["x", "+", "y", "+", MAJORITY, "+"]);
        assert_eq!(steps.iter().filter(|s| *s == "+").count() as u64, calibration_steps(2));
        assert_eq!(c.gold, GoldSummary { file: "gold.csv".into(), items: 3, pass: 2 });
        let [x, y, m] = c.judges.as_slice() else { panic!("three results: {:?}", c.judges) };
        assert_eq!((x.missing.as_slice(), x.not_in_gold.as_slice()), (&["c".to_owned()][..], &["z".to_owned()][..]));
        assert_eq!((y.missing.len(), y.not_in_gold.len(), y.undecided.is_none()), (1, 0, true));
        assert_eq!(m.name, MAJORITY);
        assert_eq!(
            (m.missing.as_slice(), m.undecided.as_deref()),
            (&["c".to_owned()][..], Some(&["b".to_owned()][..]))
        );
        assert_eq!(m.scored.scores.items, 1);
        assert_eq!(c.pairs.len(), 1);
        assert_eq!(c.pairs[0].agreement.items, 2);
    }

    /// Planted claims of 12 answers (runs) for three judges: `x` is right
    /// on every claim of answers 0-7 and wrong on every claim of answers
    /// 8-11 (its errors cluster within answers), `y` and `z` err here and
    /// there. Returns the input with each item's answer.
    fn clustered_input() -> CalibrationInput {
        let sizes = [4, 3, 5, 2, 4, 3, 2, 5, 3, 4, 2, 3];
        let (mut gold, mut answers) = (Vec::new(), HashMap::new());
        let (mut x, mut y, mut z) = (Vec::new(), Vec::new(), Vec::new());
        let mut k = 0usize;
        for (a, size) in sizes.iter().enumerate() {
            let run = format!("q{a}:arm:1");
            for c in 1..=*size {
                let id = format!("{run}#{c}");
                let pass = !(k * 7 + a).is_multiple_of(3);
                gold.push((id.clone(), pass));
                answers.insert(id.clone(), run.clone());
                x.push((id.clone(), if a < 8 { pass } else { !pass }));
                if k % 5 != 2 {
                    y.push((id.clone(), if k % 4 == 1 { !pass } else { pass }));
                }
                z.push((id.clone(), if k.is_multiple_of(6) { !pass } else { pass }));
                k += 1;
            }
        }
        let judge = |name: &str, verdicts: Vec<(String, bool)>| JudgeVerdicts {
            name: name.into(),
            file: format!(".cohort/passes/{name}"),
            verdicts,
        };
        CalibrationInput {
            gold_source: "planted".into(),
            gold,
            judges: vec![judge("x", x), judge("y", y), judge("z", z)],
            answers: Some(answers),
        }
    }

    /// Proves issue 20's calibration item: with each claim's answer known
    /// (`--cohort`) the intervals resample answers (`cohort-calibration-v2`),
    /// and every judge's and the majority's counts and interval ends equal
    /// an independent computation (scripts/calibration_reference.py,
    /// Python's standard library alone: the scripts' own ChaCha20 draws, counts,
    /// figures and percentiles) with the same seed and 2,000 resamples; the
    /// script also checks that item-level resampling gives other intervals
    /// on these data (so the check could fail). Without answers (label
    /// files) the procedure stays item-level, `cohort-calibration-v1`, and
    /// judge `x`'s clustered errors give it narrower intervals.
    #[test]
    fn cohort_calibration_resamples_answers_as_an_independent_computation_does() {
        let input = clustered_input();
        let options = CalibrationOptions { resamples: 2_000, seed: 20261014, dimension: None };
        let c = calibrate(&input, &options, |_| {});
        let json = c.to_json();
        assert_eq!(json["bootstrap"]["algorithm"], "cohort-calibration-v2");
        assert_eq!(json["bootstrap"]["unit"], "answer");
        assert_eq!(c.judges.iter().map(|j| j.answers).collect::<Vec<_>>(), [Some(12), Some(12), Some(12), Some(12)]);
        assert!(json["judges"][0]["answers"] == 12, "{}", json["judges"][0]);

        let mut rust = serde_json::Map::new();
        for j in &c.judges {
            let s = &j.scored.scores;
            let intervals: serde_json::Map<String, Value> =
                j.scored.intervals.iter().map(|(name, (lo, hi))| (name.clone(), json!([lo, hi]))).collect();
            rust.insert(
                j.name.clone(),
                json!({"items": s.items, "answers": j.answers, "tp": s.tp, "fp": s.fp, "tn": s.tn, "fn": s.r#fn,
                       "intervals": intervals}),
            );
        }
        let data = json!({
            "seed": options.seed,
            "resamples": options.resamples,
            "gold": input.gold,
            "answers": input.answers,
            "judges": input.judges.iter().map(|j| (j.name.clone(), json!(j.verdicts))).collect::<serde_json::Map<_, _>>(),
            "rust": rust,
        });
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("calibration.json");
        std::fs::write(&file, serde_json::to_vec(&data).unwrap()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/calibration_reference.py");
        let out = std::process::Command::new("python3").arg(&script).arg(&file).output().unwrap_or_else(|e| {
            panic!("could not run python3 ({e}): install it ('apt-get install python3'; scripts/test.sh does)")
        });
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        println!("{said}");
        assert!(out.status.success(), "the independent computation disagrees:\n{said}");

        // Items one by one (label files have no answers): v1, narrower here.
        let items = CalibrationInput { answers: None, ..input };
        let v1 = calibrate(&items, &options, |_| {});
        assert_eq!(v1.to_json()["bootstrap"]["algorithm"], "cohort-calibration-v1");
        assert_eq!(v1.to_json()["bootstrap"]["unit"], "item");
        let width = |c: &Calibration, metric: &str| {
            let (lo, hi) = c.judges[0].scored.intervals[metric];
            hi.unwrap() - lo.unwrap()
        };
        for metric in ["f1", "kappa", "fnr"] {
            let (answer, item) = (width(&c, metric), width(&v1, metric));
            println!("judge x {metric}: 95% interval width {answer:.4} resampling answers, {item:.4} resampling items");
            assert!(answer > item, "{metric}: clustered errors widen the interval ({answer} vs {item})");
        }
    }

    #[test]
    fn a_judge_named_majority_is_refused_beside_others() {
        let dir = tempfile::tempdir().unwrap();
        let gold = dir.path().join("gold.csv");
        std::fs::write(&gold, "item_id,label\na,pass\n").unwrap();
        let two = [(MAJORITY.to_owned(), gold.clone()), ("j".to_owned(), gold.clone())];
        let e = from_files(&gold, &two).unwrap_err().to_string();
        assert_eq!(
            e,
            "--verdicts majority: `majority` is the name of the majority-vote ensemble; name the judge otherwise"
        );
        assert_eq!(from_files(&gold, &two[..1]).unwrap().judges.len(), 1);
        let twice = [("j".to_owned(), gold.clone()), ("j".to_owned(), gold.clone())];
        let e = from_files(&gold, &twice).unwrap_err().to_string();
        assert_eq!(e, "--verdicts j: the judge name is given twice; name each judge once");
    }
}
