//! Agreement and calibration statistics: two raters' agreement (raw,
//! Cohen's kappa, nominal or weighted, and the disagreement matrix), a
//! judge's pass/fail scores against gold labels (seed 002), their bootstrap
//! intervals over items, and the majority vote of several judges.
//!
//! Every statistic is a [`Stat`]: a value, or "undefined" with the reason
//! (never a made-up number). The definitions, checked against scikit-learn
//! in `core/tests/agreement_sklearn.rs`:
//!
//! - **Raw agreement** = items on the diagonal / items; undefined with 0
//!   items.
//! - **Verdict agreement** ([`verdict_agreement`]): two judges' (or judging
//!   passes') YES/NO verdicts on the items both judged, as a 2x2 nominal
//!   agreement with the labels [`VERDICT_LABELS`] (YES first). The one
//!   definition for `cohort calibrate`'s pairwise agreement of judges and
//!   `cohort passes`' agreement of passes.
//! - **Cohen's kappa** = `(po - pe) / (1 - pe)` with agreement weights
//!   `w_ij` over the `k` labels in their given order: nominal `w_ij = 1` if
//!   `i == j` else 0; linear `1 - |i-j|/(k-1)`; quadratic
//!   `1 - (i-j)^2/(k-1)^2`. `po = sum w_ij n_ij / n`,
//!   `pe = sum w_ij r_i c_j / n^2` (`r`, `c` the two raters' label counts).
//!   Undefined with 0 items, and when `pe == 1`, which happens exactly when
//!   both raters gave every item the same single label (scikit-learn
//!   returns nan there). Weighted kappa equals scikit-learn's
//!   `1 - sum(d_ij n_ij)/sum(d_ij e_ij)` with disagreement weights
//!   `d_ij = |i-j|` or `(i-j)^2`: the ratio does not depend on the scale of
//!   `d`.
//! - **Pass-class scores** (true = pass): precision = tp/(tp+fp), undefined
//!   with no predicted passes; recall = tp/(tp+fn), undefined with no gold
//!   passes; FPR = fp/(fp+tn), undefined with no gold fails; FNR =
//!   fn/(fn+tp), undefined with no gold passes; pass-rate drift = predicted
//!   pass rate - gold pass rate, undefined with 0 items; kappa as above
//!   (gold as one rater, the judge as the other).
//! - **F1** = `2tp / (2tp + fp + fn)`, the count form of the harmonic mean
//!   of precision and recall. It is undefined only when its denominator is
//!   0: no gold pass and no predicted pass, so precision and recall are
//!   both undefined. Where precision and recall are both 0 (tp = 0 but
//!   passes were predicted and missed) it is 0, not undefined: the limit of
//!   the harmonic mean, and an honest figure for a judge that found none of
//!   the passes and whose passes were all wrong. Where only one of the two
//!   is undefined (the judge never says pass, or gold has no pass but the
//!   judge says pass) it is 0 for the same reason. This is scikit-learn's
//!   `f1_score` wherever it raises no zero-division warning.
//!
//! ## Bootstrap intervals, procedure `cohort-calibration-v1`
//!
//! Seed 002: the 2.5th and 97.5th percentiles of each metric over 2,000
//! bootstrap resamples of the items.
//!
//! 1. Key = SHA-256 of the bytes `cohort-calibration-v1:` followed by the
//!    seed in decimal ASCII (default [`CALIBRATION_SEED`]).
//! 2. Resample `r` (0-based) reads the ChaCha20 keystream of
//!    `crate::order::KeyStream` (RFC 8439) with that key, nonce = `r` as 4
//!    little-endian bytes and 8 zero bytes, counter from 0, as successive
//!    little-endian u64 words.
//! 3. With `n` items: `n` times, draw words `x` until
//!    `x < 2^64 - (2^64 mod n)`; item `x mod n` is drawn once more (the
//!    rejection sampling of the run order and the cluster bootstrap).
//! 4. Every metric is computed on the resample's confusion counts
//!    (`tp`, `fp`, `tn`, `fn` summed over the drawn items) with the
//!    definitions above.
//! 5. For each metric, the values of the resamples where it is defined,
//!    sorted, give `ci_low = percentile_linear(v, 0.025)` and
//!    `ci_high = percentile_linear(v, 0.975)`
//!    ([`crate::stats::percentile_linear`], numpy's default); `None` when
//!    no resample defined it.
//!
//! ## Resampling answers, procedure `cohort-calibration-v2`
//!
//! Claims cluster within answers (seed 004: "do not treat claims from one
//! answer as independent samples"), so when each item's answer is known
//! (`cohort calibrate --cohort`: an item is a claim, its answer the run)
//! the resamples draw answers, not items
//! ([`binary_scores_with_answer_intervals`]):
//!
//! 1. Key = SHA-256 of the bytes `cohort-calibration-v2:` followed by the
//!    seed in decimal ASCII.
//! 2. The answers are numbered `0..m` in the order their first item
//!    appears in the item list.
//! 3. Resample `r` reads the keystream of step 2 above with that key; `m`
//!    times it draws an answer index as in step 3 above (with `m` in place
//!    of `n`).
//! 4. The resample is every item of every drawn answer, an answer drawn
//!    twice counting twice; each metric is computed on its confusion
//!    counts, and step 5 above gives the intervals.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::hash::sha256;
use crate::order::KeyStream;
use crate::stats::percentile_linear;

/// Seed 002's number of bootstrap resamples of the items.
pub const CALIBRATION_RESAMPLES: u32 = 2_000;
/// The default seed of the calibration bootstrap (the protocol's seed).
pub const CALIBRATION_SEED: u64 = 20261014;
/// The name of the item-level resampling procedure in the module header.
pub const CALIBRATION_ALGORITHM: &str = "cohort-calibration-v1";
/// The name of the answer-level (cluster) procedure in the module header.
pub const CALIBRATION_ANSWER_ALGORITHM: &str = "cohort-calibration-v2";

/// The reason kappa has no value when chance agreement is 1.
pub const KAPPA_CONSTANT: &str = "both raters gave every item the same single label: chance agreement is 1";
const NO_ITEMS: &str = "no items: nothing was rated by both";

/// The metric names of [`BinaryScores`], in the order they are reported.
pub const BINARY_METRICS: [&str; 7] = ["f1", "precision", "recall", "kappa", "pass_rate_drift", "fpr", "fnr"];

/// A statistic's value, or why it has none. Serialised as `{"value": x}`
/// or `{"undefined": "why"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    Value(f64),
    Undefined(String),
}

impl Stat {
    /// The value, if defined.
    pub fn value(&self) -> Option<f64> {
        match self {
            Stat::Value(v) => Some(*v),
            Stat::Undefined(_) => None,
        }
    }

    /// The reason, if undefined.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Stat::Value(_) => None,
            Stat::Undefined(why) => Some(why),
        }
    }

    /// `num / den`, undefined with `why` when `den` is 0.
    fn ratio(num: u64, den: u64, why: &str) -> Stat {
        if den == 0 { Stat::Undefined(why.to_owned()) } else { Stat::Value(num as f64 / den as f64) }
    }
}

impl std::fmt::Display for Stat {
    /// Four decimals, or `undefined (why)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stat::Value(v) => write!(f, "{v:.4}"),
            Stat::Undefined(why) => write!(f, "undefined ({why})"),
        }
    }
}

/// How kappa weighs disagreements between ordered labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weights {
    /// Nominal: any disagreement counts fully.
    None,
    /// `w_ij = 1 - |i-j|/(k-1)`.
    Linear,
    /// `w_ij = 1 - (i-j)^2/(k-1)^2`.
    Quadratic,
}

impl Weights {
    /// The agreement weight of labels `i` and `j` out of `k`.
    fn weight(self, i: usize, j: usize, k: usize) -> f64 {
        if i == j {
            return 1.0;
        }
        // i != j implies k >= 2, so k - 1 > 0.
        let d = i.abs_diff(j) as f64 / (k - 1) as f64;
        match self {
            Weights::None => 0.0,
            Weights::Linear => 1.0 - d,
            Weights::Quadratic => 1.0 - d * d,
        }
    }
}

/// Two raters' labels on the same items (label indices into `labels`).
/// Deserialize too: a report keeps it in `summary.json` as it is, and
/// `cohort verify` reads it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    pub labels: Vec<String>,
    /// matrix[i][j] = items rater A labelled labels[i] and rater B labels[j].
    pub matrix: Vec<Vec<u64>>,
    pub items: u64,
    pub raw_agreement: Stat,
    /// Cohen's kappa, nominal (Weights::None) or weighted for ordinal labels
    /// (label order = `labels` order).
    pub kappa: Stat,
    pub weights: Weights,
}

/// `a[i]`, `b[i]` are the two labels of item i (indices into labels).
///
/// Malformed input (lists of different lengths, an index outside `labels`)
/// is not counted and leaves both statistics undefined with the reason, so
/// a caller's bug never turns into a figure.
pub fn agreement(labels: &[String], a: &[usize], b: &[usize], weights: Weights) -> Agreement {
    let k = labels.len();
    let mut matrix = vec![vec![0u64; k]; k];
    let mut problem = None;
    if a.len() != b.len() {
        problem = Some(format!(
            "rater a has {} labels and rater b {}: give both raters' labels of the same items",
            a.len(),
            b.len()
        ));
    }
    for (item, (&i, &j)) in a.iter().zip(b).enumerate() {
        match (matrix.get_mut(i).and_then(|row| row.get_mut(j)), &problem) {
            (Some(cell), None) => *cell += 1,
            (None, None) => {
                problem = Some(format!("item {item} has label index {i} or {j}, outside the {k} labels"));
            }
            (_, Some(_)) => {}
        }
    }
    let mut result = from_matrix(labels.to_vec(), matrix, weights);
    if let Some(why) = problem {
        result.raw_agreement = Stat::Undefined(why.clone());
        result.kappa = Stat::Undefined(why);
    }
    result
}

/// The labels of a verdict agreement's matrix, in its order: a judge's
/// YES (a pass) first, NO (a fail) second.
pub const VERDICT_LABELS: [&str; 2] = ["yes", "no"];

/// Two judges' verdicts (`true` = YES, a pass), compared on the items both
/// judged: nominal agreement over [`VERDICT_LABELS`]. An item only one of
/// them judged is not counted. The result does not depend on the maps'
/// order.
pub fn verdict_agreement<K: Eq + Hash>(a: &HashMap<K, bool>, b: &HashMap<K, bool>) -> Agreement {
    let labels: Vec<String> = VERDICT_LABELS.iter().map(|l| (*l).to_owned()).collect();
    let index = |yes: bool| usize::from(!yes);
    let (la, lb): (Vec<usize>, Vec<usize>) =
        a.iter().filter_map(|(item, va)| b.get(item).map(|vb| (index(*va), index(*vb)))).unzip();
    agreement(&labels, &la, &lb, Weights::None)
}

/// Agreement statistics of a k x k matrix of counts.
fn from_matrix(labels: Vec<String>, matrix: Vec<Vec<u64>>, weights: Weights) -> Agreement {
    let k = matrix.len();
    let items: u64 = matrix.iter().flatten().sum();
    let diagonal: u64 = (0..k).map(|i| matrix[i][i]).sum();
    let raw_agreement = Stat::ratio(diagonal, items, NO_ITEMS);
    let kappa = kappa_of(&matrix, items, weights);
    Agreement { labels, matrix, items, raw_agreement, kappa, weights }
}

/// Cohen's kappa of a k x k matrix holding `items` items.
fn kappa_of(matrix: &[Vec<u64>], items: u64, weights: Weights) -> Stat {
    if items == 0 {
        return Stat::Undefined(NO_ITEMS.to_owned());
    }
    let k = matrix.len();
    let rows: Vec<u64> = matrix.iter().map(|row| row.iter().sum()).collect();
    let cols: Vec<u64> = (0..k).map(|j| matrix.iter().map(|row| row[j]).sum()).collect();
    // pe == 1 exactly when both raters' counts sit on one and the same
    // label (every other cell of the expected matrix has weight < 1).
    // Tested on the counts, so rounding cannot hide it.
    if (0..k).any(|i| rows[i] == items && cols[i] == items) {
        return Stat::Undefined(KAPPA_CONSTANT.to_owned());
    }
    let n = items as f64;
    let (mut po, mut pe) = (0.0, 0.0);
    for i in 0..k {
        for j in 0..k {
            let w = weights.weight(i, j, k);
            po += w * matrix[i][j] as f64;
            pe += w * rows[i] as f64 * cols[j] as f64;
        }
    }
    let (po, pe) = (po / n, pe / (n * n));
    if pe >= 1.0 {
        // Unreachable by the test above; kept so no division by 0 can pass.
        return Stat::Undefined(KAPPA_CONSTANT.to_owned());
    }
    Stat::Value((po - pe) / (1.0 - pe))
}

/// Binary pass/fail classification of a judge against gold labels (true =
/// pass).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BinaryScores {
    pub items: u64,
    pub tp: u64,
    pub fp: u64,
    pub tn: u64,
    pub r#fn: u64,
    /// Pass class.
    pub precision: Stat,
    pub recall: Stat,
    pub f1: Stat,
    pub kappa: Stat,
    /// Predicted pass rate - gold pass rate.
    pub pass_rate_drift: Stat,
    pub fpr: Stat,
    pub fnr: Stat,
}

impl BinaryScores {
    /// The metric called `name` (one of [`BINARY_METRICS`]).
    pub fn metric(&self, name: &str) -> Option<&Stat> {
        Some(match name {
            "f1" => &self.f1,
            "precision" => &self.precision,
            "recall" => &self.recall,
            "kappa" => &self.kappa,
            "pass_rate_drift" => &self.pass_rate_drift,
            "fpr" => &self.fpr,
            "fnr" => &self.fnr,
            _ => return None,
        })
    }
}

/// The four cells of a confusion matrix.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    tp: u64,
    fp: u64,
    tn: u64,
    fn_: u64,
}

impl Counts {
    fn add(&mut self, gold: bool, predicted: bool) {
        match (gold, predicted) {
            (true, true) => self.tp += 1,
            (false, true) => self.fp += 1,
            (false, false) => self.tn += 1,
            (true, false) => self.fn_ += 1,
        }
    }

    fn scores(self) -> BinaryScores {
        let Counts { tp, fp, tn, fn_ } = self;
        let items = tp + fp + tn + fn_;
        // Labels in the order [fail, pass]; rater A = gold.
        let matrix = vec![vec![tn, fp], vec![fn_, tp]];
        let kappa = kappa_of(&matrix, items, Weights::None);
        let pass_rate_drift = if items == 0 {
            Stat::Undefined(NO_ITEMS.to_owned())
        } else {
            let n = items as f64;
            Stat::Value((tp + fp) as f64 / n - (tp + fn_) as f64 / n)
        };
        BinaryScores {
            items,
            tp,
            fp,
            tn,
            r#fn: fn_,
            precision: Stat::ratio(tp, tp + fp, "the judge predicted no pass: precision has no denominator"),
            recall: Stat::ratio(tp, tp + fn_, "gold has no pass: recall has no denominator"),
            f1: Stat::ratio(
                2 * tp,
                2 * tp + fp + fn_,
                "neither gold nor the judge has a pass: precision and recall are both undefined",
            ),
            kappa,
            pass_rate_drift,
            fpr: Stat::ratio(fp, fp + tn, "gold has no fail: the false positive rate has no denominator"),
            fnr: Stat::ratio(fn_, fn_ + tp, "gold has no pass: the false negative rate has no denominator"),
        }
    }
}

/// The judge's scores on `gold[i]` vs `predicted[i]`. Lists of different
/// lengths are not scored: every statistic is undefined with the reason.
pub fn binary_scores(gold: &[bool], predicted: &[bool]) -> BinaryScores {
    if gold.len() != predicted.len() {
        let why = format!(
            "{} gold labels and {} predictions: give one prediction per gold item",
            gold.len(),
            predicted.len()
        );
        let mut scores = Counts::default().scores();
        let BinaryScores { precision, recall, f1, kappa, pass_rate_drift, fpr, fnr, .. } = &mut scores;
        for stat in [f1, precision, recall, kappa, pass_rate_drift, fpr, fnr] {
            *stat = Stat::Undefined(why.clone());
        }
        return scores;
    }
    let mut counts = Counts::default();
    for (&g, &p) in gold.iter().zip(predicted) {
        counts.add(g, p);
    }
    counts.scores()
}

/// 95% percentile intervals over `resamples` item-level bootstrap
/// resamples (seed 002: 2,000), one interval per metric above.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredWithIntervals {
    pub scores: BinaryScores,
    /// metric name ("f1", "precision", ...) -> (ci_low, ci_high), None when
    /// no resample defined it.
    pub intervals: BTreeMap<String, (Option<f64>, Option<f64>)>,
    pub resamples: u32,
}

/// The scores and their bootstrap intervals (procedure in the module
/// header).
pub fn binary_scores_with_intervals(
    gold: &[bool],
    predicted: &[bool],
    resamples: u32,
    seed: u64,
) -> ScoredWithIntervals {
    let n = gold.len();
    // Lists of different lengths were refused above; an empty list has no
    // resample to draw.
    let drawn_resamples = if n > 0 && n == predicted.len() { resamples } else { 0 };
    let key = calibration_key(seed);
    let intervals = percentile_intervals(drawn_resamples, |r| resample(&key, r, gold, predicted));
    ScoredWithIntervals { scores: binary_scores(gold, predicted), intervals, resamples }
}

/// The 95% percentile interval of every binary metric over `resamples`
/// resamples, resample `r` counted by `counts(r)`; a metric a resample
/// leaves undefined is left out of that resample.
fn percentile_intervals(
    resamples: u32,
    mut counts: impl FnMut(u32) -> Counts,
) -> BTreeMap<String, (Option<f64>, Option<f64>)> {
    let mut defined: BTreeMap<&str, Vec<f64>> = BINARY_METRICS.iter().map(|&m| (m, Vec::new())).collect();
    for r in 0..resamples {
        let scored = counts(r).scores();
        for (name, values) in defined.iter_mut() {
            if let Some(v) = scored.metric(name).and_then(Stat::value) {
                values.push(v);
            }
        }
    }
    defined
        .into_iter()
        .map(|(name, mut values)| {
            values.sort_unstable_by(f64::total_cmp);
            (name.to_owned(), (percentile_linear(&values, 0.025), percentile_linear(&values, 0.975)))
        })
        .collect()
}

/// The scores and their bootstrap intervals with answers resampled
/// (procedure `cohort-calibration-v2` in the module header): `answers[i]`
/// names item `i`'s answer. Lists of different lengths get undefined
/// scores and no intervals, as in [`binary_scores_with_intervals`].
pub fn binary_scores_with_answer_intervals(
    gold: &[bool],
    predicted: &[bool],
    answers: &[&str],
    resamples: u32,
    seed: u64,
) -> ScoredWithIntervals {
    let n = gold.len();
    let drawn_resamples = if n > 0 && n == predicted.len() && n == answers.len() { resamples } else { 0 };
    let members = answer_members(answers);
    let key = answer_key(seed);
    let intervals = percentile_intervals(drawn_resamples, |r| {
        let mut counts = Counts::default();
        for a in drawn(&key, r, members.len()) {
            for &i in &members[a] {
                counts.add(gold[i], predicted[i]);
            }
        }
        counts
    });
    ScoredWithIntervals { scores: binary_scores(gold, predicted), intervals, resamples }
}

/// Step 2 of `cohort-calibration-v2`: the items of each answer, answers in
/// the order their first item appears.
fn answer_members(answers: &[&str]) -> Vec<Vec<usize>> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, a) in answers.iter().enumerate() {
        let k = *index.entry(a).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[k].push(i);
    }
    members
}

/// The answer indices (numbered as step 2 of `cohort-calibration-v2`)
/// drawn by resample `r` over `answers` answers (for re-derivation and
/// tests).
pub fn answer_resample_indices(answers: usize, r: u32, seed: u64) -> Vec<usize> {
    drawn(&answer_key(seed), r, answers).collect()
}

/// Step 1 of `cohort-calibration-v2`.
fn answer_key(seed: u64) -> [u8; 32] {
    sha256(format!("{CALIBRATION_ANSWER_ALGORITHM}:{seed}").as_bytes())
}

/// Steps 2-4 for resample `r`: the confusion counts of the drawn items.
fn resample(key: &[u8; 32], r: u32, gold: &[bool], predicted: &[bool]) -> Counts {
    let mut counts = Counts::default();
    for i in drawn(key, r, gold.len()) {
        counts.add(gold[i], predicted[i]);
    }
    counts
}

/// The item indices drawn by resample `r` (for re-derivation and tests).
pub fn resample_indices(n: usize, r: u32, seed: u64) -> Vec<usize> {
    drawn(&calibration_key(seed), r, n).collect()
}

/// Step 1: the key of every resample's keystream.
fn calibration_key(seed: u64) -> [u8; 32] {
    sha256(format!("{CALIBRATION_ALGORITHM}:{seed}").as_bytes())
}

/// Steps 2-3 for resample `r` of `n` items: each drawn index, below `n`.
fn drawn(key: &[u8; 32], r: u32, n: usize) -> impl Iterator<Item = usize> {
    let mut stream = KeyStream::for_draw(key, r);
    (0..n).map(move |_| stream.below(n as u64) as usize)
}

/// Majority vote over several judges' verdicts per item: `votes[i]` holds
/// item i's verdicts, one per judge (None = that judge gave no verdict on
/// the item). The result for item i is the verdict most judges gave among
/// those that gave one; a tie or no verdict at all is None (undecided,
/// never a pass).
pub fn majority_vote(votes: &[Vec<Option<bool>>]) -> Vec<Option<bool>> {
    votes
        .iter()
        .map(|item| {
            let passes = item.iter().filter(|v| **v == Some(true)).count();
            let fails = item.iter().filter(|v| **v == Some(false)).count();
            match passes.cmp(&fails) {
                std::cmp::Ordering::Greater => Some(true),
                std::cmp::Ordering::Less => Some(false),
                std::cmp::Ordering::Equal => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn labels(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Two judges on the items both judged: the 2x2 over yes/no (YES
    /// first), items one judge left out not counted, the same figures as
    /// `agreement` on the paired labels.
    #[test]
    fn verdict_agreement_pairs_items_both_judged() {
        let a: HashMap<&str, bool> =
            [("i1", true), ("i2", true), ("i3", false), ("i4", false), ("only-a", true)].into_iter().collect();
        let b: HashMap<&str, bool> =
            [("i1", true), ("i2", false), ("i3", false), ("i4", false), ("only-b", false)].into_iter().collect();
        let got = verdict_agreement(&a, &b);
        assert_eq!(got.labels, ["yes", "no"]);
        assert_eq!(got.matrix, vec![vec![1, 1], vec![0, 2]]);
        assert_eq!(got.items, 4);
        assert_eq!(got.raw_agreement, Stat::Value(0.75));
        assert_eq!(got.kappa, agreement(&labels(&["yes", "no"]), &[0, 0, 1, 1], &[0, 1, 1, 1], Weights::None).kappa);
        let none = verdict_agreement(&a, &HashMap::new());
        assert_eq!(none.items, 0);
        assert!(none.kappa.reason().is_some());
    }

    /// Hand-computed 2x2: matrix [[20, 5], [10, 15]], po = 0.7,
    /// pe = (25*30 + 25*20)/2500 = 0.5, kappa = 0.4.
    #[test]
    fn nominal_kappa_matches_a_hand_computation() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (i, j, times) in [(0, 0, 20), (0, 1, 5), (1, 0, 10), (1, 1, 15)] {
            for _ in 0..times {
                a.push(i);
                b.push(j);
            }
        }
        let got = agreement(&labels(&["x", "y"]), &a, &b, Weights::None);
        assert_eq!(got.matrix, vec![vec![20, 5], vec![10, 15]]);
        assert_eq!(got.items, 50);
        assert_eq!(got.raw_agreement, Stat::Value(0.7));
        assert!((got.kappa.value().unwrap() - 0.4).abs() < 1e-15);
    }

    /// 3 ordinal labels, one item off by one and one off by two. Hand:
    /// rows (2,2,2), cols (2,3,1), n = 6. Nominal po = 4/6, pe = 12/36,
    /// kappa 0.5. Linear po = 4.5/6, pe = 21/36, kappa 0.4 (the miss by two
    /// weighs more than nominally). Quadratic po = 4.75/6, pe = 25.5/36,
    /// kappa 3/10.5.
    #[test]
    fn weighted_kappa_weighs_disagreements_by_distance() {
        let l = labels(&["0", "1", "2"]);
        let a = [0, 1, 2, 0, 1, 2];
        let b = [0, 1, 2, 1, 1, 0];
        let kappa = |w| agreement(&l, &a, &b, w).kappa.value().unwrap();
        assert!((kappa(Weights::None) - 0.5).abs() < 1e-15);
        assert!((kappa(Weights::Linear) - 0.4).abs() < 1e-15);
        assert!((kappa(Weights::Quadratic) - 3.0 / 10.5).abs() < 1e-15);
    }

    #[test]
    fn kappa_of_two_constant_raters_on_one_label_is_undefined_with_the_reason() {
        let got = agreement(&labels(&["pass", "fail"]), &[1, 1, 1], &[1, 1, 1], Weights::None);
        assert_eq!(got.raw_agreement, Stat::Value(1.0));
        assert_eq!(got.kappa, Stat::Undefined(KAPPA_CONSTANT.to_owned()));
        for w in [Weights::Linear, Weights::Quadratic] {
            assert_eq!(agreement(&labels(&["a", "b", "c"]), &[2, 2], &[2, 2], w).kappa.reason(), Some(KAPPA_CONSTANT));
        }
        // Constant on different labels: pe = 0, kappa 0 (a value).
        let apart = agreement(&labels(&["pass", "fail"]), &[0, 0], &[1, 1], Weights::None);
        assert_eq!(apart.kappa, Stat::Value(0.0));
    }

    #[test]
    fn no_items_and_malformed_input_are_undefined() {
        let empty = agreement(&labels(&["a", "b"]), &[], &[], Weights::None);
        assert!(empty.raw_agreement.value().is_none() && empty.kappa.value().is_none());
        let short = agreement(&labels(&["a", "b"]), &[0, 1], &[0], Weights::None);
        assert!(short.kappa.reason().unwrap().contains("2 labels and rater b 1"));
        let outside = agreement(&labels(&["a", "b"]), &[0, 5], &[0, 1], Weights::None);
        assert!(outside.raw_agreement.reason().unwrap().contains("outside the 2 labels"));
        let scores = binary_scores(&[true], &[]);
        assert!(BINARY_METRICS.iter().all(|m| scores.metric(m).unwrap().value().is_none()));
    }

    #[test]
    fn stat_serialises_as_value_or_undefined() {
        assert_eq!(serde_json::to_string(&Stat::Value(0.5)).unwrap(), r#"{"value":0.5}"#);
        assert_eq!(serde_json::to_string(&Stat::Undefined("why".into())).unwrap(), r#"{"undefined":"why"}"#);
        let back: Stat = serde_json::from_str(r#"{"undefined":"why"}"#).unwrap();
        assert_eq!(back.reason(), Some("why"));
        assert_eq!(serde_json::to_string(&Weights::Quadratic).unwrap(), r#""quadratic""#);
    }

    /// gold   P P P P F F F F F F
    /// judge  P P P F P F F F F F  -> tp 3, fn 1, fp 1, tn 5.
    #[test]
    fn binary_scores_match_hand_values() {
        let gold = [true, true, true, true, false, false, false, false, false, false];
        let pred = [true, true, true, false, true, false, false, false, false, false];
        let s = binary_scores(&gold, &pred);
        assert_eq!((s.tp, s.r#fn, s.fp, s.tn, s.items), (3, 1, 1, 5, 10));
        assert_eq!(s.precision, Stat::Value(0.75));
        assert_eq!(s.recall, Stat::Value(0.75));
        assert_eq!(s.f1, Stat::Value(0.75));
        assert_eq!(s.fpr, Stat::Value(1.0 / 6.0));
        assert_eq!(s.fnr, Stat::Value(0.25));
        assert_eq!(s.pass_rate_drift, Stat::Value(0.0));
        // po = 0.8, pe = 0.4*0.4 + 0.6*0.6 = 0.52, kappa = 0.28/0.48.
        assert!((s.kappa.value().unwrap() - 0.28 / 0.48).abs() < 1e-12);
    }

    #[test]
    fn f1_convention_at_the_edges() {
        // No passes anywhere: everything pass-class is undefined.
        let none = binary_scores(&[false, false], &[false, false]);
        assert!(none.f1.value().is_none() && none.precision.value().is_none() && none.recall.value().is_none());
        assert_eq!(none.fpr, Stat::Value(0.0));
        // Precision and recall both 0: F1 is 0.
        let wrong = binary_scores(&[true, false], &[false, true]);
        assert_eq!(
            (wrong.precision.value(), wrong.recall.value(), wrong.f1.value()),
            (Some(0.0), Some(0.0), Some(0.0))
        );
        // The judge never passes: precision undefined, recall 0, F1 0.
        let never = binary_scores(&[true, false], &[false, false]);
        assert!(never.precision.value().is_none());
        assert_eq!((never.recall.value(), never.f1.value()), (Some(0.0), Some(0.0)));
        assert_eq!(never.pass_rate_drift, Stat::Value(-0.5));
    }

    #[test]
    fn intervals_are_reproducible_and_depend_on_the_seed() {
        let gold: Vec<bool> = (0..60).map(|i| i % 3 != 0).collect();
        let pred: Vec<bool> = (0..60).map(|i| i % 5 != 0).collect();
        let a = binary_scores_with_intervals(&gold, &pred, 500, CALIBRATION_SEED);
        let b = binary_scores_with_intervals(&gold, &pred, 500, CALIBRATION_SEED);
        assert_eq!(a, b);
        let c = binary_scores_with_intervals(&gold, &pred, 500, CALIBRATION_SEED + 1);
        assert_ne!(a.intervals, c.intervals);
        for name in BINARY_METRICS {
            let (lo, hi) = a.intervals[name];
            let (lo, hi) = (lo.unwrap(), hi.unwrap());
            let point = a.scores.metric(name).unwrap().value().unwrap();
            assert!(lo < hi, "{name}: [{lo}, {hi}]");
            assert!(lo <= point && point <= hi, "{name}: {point} outside [{lo}, {hi}]");
        }
        assert_eq!(a.resamples, 500);
    }

    /// The intervals follow the documented procedure: resample 0's counts
    /// recomputed from `resample_indices` give the same scores.
    #[test]
    fn resample_indices_are_the_drawn_items() {
        let gold: Vec<bool> = (0..17).map(|i| i % 2 == 0).collect();
        let pred: Vec<bool> = (0..17).map(|i| i % 3 == 0).collect();
        let key = calibration_key(CALIBRATION_SEED);
        let idx = resample_indices(17, 3, CALIBRATION_SEED);
        assert_eq!(idx.len(), 17);
        let g: Vec<bool> = idx.iter().map(|&i| gold[i]).collect();
        let p: Vec<bool> = idx.iter().map(|&i| pred[i]).collect();
        assert_eq!(resample(&key, 3, &gold, &pred).scores(), binary_scores(&g, &p));
        assert_ne!(idx, resample_indices(17, 4, CALIBRATION_SEED));
    }

    #[test]
    fn a_perfect_judge_has_degenerate_intervals() {
        let gold: Vec<bool> = (0..40).map(|i| i % 4 != 0).collect();
        let got = binary_scores_with_intervals(&gold, &gold, CALIBRATION_RESAMPLES, CALIBRATION_SEED);
        for name in ["f1", "precision", "recall", "kappa"] {
            assert_eq!(got.intervals[name], (Some(1.0), Some(1.0)), "{name}");
        }
        for name in ["fpr", "fnr", "pass_rate_drift"] {
            assert_eq!(got.intervals[name], (Some(0.0), Some(0.0)), "{name}");
        }
    }

    #[test]
    fn empty_input_has_no_intervals() {
        let got = binary_scores_with_intervals(&[], &[], 100, CALIBRATION_SEED);
        assert!(got.intervals.values().all(|&(lo, hi)| lo.is_none() && hi.is_none()));
        assert_eq!(
            got.scores.f1.reason(),
            Some("neither gold nor the judge has a pass: precision and recall are both undefined")
        );
    }

    /// Proves the answer-level bootstrap draws answers, keeping each
    /// answer's items together: a hand computation of every resample from
    /// `answer_resample_indices` (each drawn answer's items, with
    /// multiplicity) gives the intervals exactly; the draws use their own
    /// key (not the item-level procedure's); mismatched lengths get no
    /// intervals.
    #[test]
    fn answer_intervals_resample_whole_answers() {
        // Answers a (3 items, all right), b (1 item, a missed pass), c (2
        // items, right); numbered a=0, b=1, c=2 by first appearance.
        let gold = [true, false, true, true, false, true];
        let predicted = [true, false, true, false, false, true];
        let answers = ["a", "a", "c", "b", "c", "a"];
        let members = [vec![0, 1, 5], vec![3], vec![2, 4]];
        let s = binary_scores_with_answer_intervals(&gold, &predicted, &answers, 300, 7);
        assert_eq!((s.scores.tp, s.scores.r#fn, s.scores.tn, s.scores.fp), (3, 1, 2, 0));
        let mut fnr = Vec::new();
        for r in 0..300 {
            let drawn = answer_resample_indices(3, r, 7);
            assert_eq!(drawn.len(), 3, "one draw per answer");
            let mut counts = Counts::default();
            for &a in &drawn {
                for &i in &members[a] {
                    counts.add(gold[i], predicted[i]);
                }
            }
            if let Some(v) = counts.scores().fnr.value() {
                fnr.push(v);
            }
        }
        fnr.sort_unstable_by(f64::total_cmp);
        assert_eq!(s.intervals["fnr"], (percentile_linear(&fnr, 0.025), percentile_linear(&fnr, 0.975)));
        assert_ne!(
            (0..20).map(|r| answer_resample_indices(6, r, 7)).collect::<Vec<_>>(),
            (0..20).map(|r| resample_indices(6, r, 7)).collect::<Vec<_>>(),
            "v2 has its own key"
        );
        let none = binary_scores_with_answer_intervals(&gold, &predicted, &answers[..5], 10, 7);
        assert!(none.intervals.values().all(|i| *i == (None, None)));
    }

    #[test]
    fn majority_vote_breaks_no_ties_and_ignores_missing_verdicts() {
        let votes = vec![
            vec![Some(true), Some(true), Some(false)],
            vec![Some(true), Some(false)],
            vec![None, None],
            vec![None, Some(false), None],
            vec![],
            vec![Some(true), None, Some(false), Some(true)],
        ];
        assert_eq!(majority_vote(&votes), vec![Some(true), None, None, Some(false), None, Some(true)]);
    }
}
