//! The cluster bootstrap of seed 004 ("Metrics and denominators"): 95%
//! intervals by resampling questions as clusters, 10,000 paired draws,
//! seed 20261014, preserving within-question claims and paired products.
//!
//! A statistic is an [`Estimand`]: a ratio of sums over clusters (a micro
//! rate is `sum supported / sum judged`; an equal-question macro rate is a
//! ratio whose numerator holds each question's rate and whose denominator
//! holds a 1 for each question that has one), or the difference of two of
//! them. Resampling a cluster resamples all of its claims and all of its
//! arms at once, so claims of one answer are never treated as independent
//! and paired arms stay paired.
//!
//! ## The resampling procedure, algorithm `cohort-bootstrap-v1`
//!
//! Written out in full so that anyone can re-derive every interval from
//! this documentation alone (`scripts/rederive_report.py --intervals` does,
//! with Python's standard library):
//!
//! 1. **Key.** `SHA-256("cohort-bootstrap-v1:" ++ decimal ASCII of the seed)`.
//! 2. **One keystream per draw.** Draw `b` (0-based) reads ChaCha20 as in
//!    RFC 8439 with that key, the nonce `b` as 4 little-endian bytes followed
//!    by 8 zero bytes, the block counter from 0, the output read as successive
//!    little-endian `u64` words (exactly as the run order reads its
//!    keystream, `crate::order`, whose block function this reuses).
//! 3. **Multiplicities.** With `Q` clusters, `m = [0; Q]`; `Q` times: draw
//!    words `x` until `x < 2^64 - (2^64 mod Q)` (rejection sampling, so every
//!    cluster is equally likely), then `m[x mod Q] += 1`.
//! 4. **Statistics.** A ratio is `sum_q m[q]*num[q] / sum_q m[q]*den[q]`,
//!    summed in increasing `q` (each term `m[q]*num[q]` rounded, then added),
//!    undefined when the denominator sum is 0. A difference `a - b` is
//!    evaluated on the same `m`, undefined when either side is.
//! 5. **Interval.** The defined values of the draws, sorted, give
//!    `ci_low = percentile_linear(v, 0.025)` and
//!    `ci_high = percentile_linear(v, 0.975)`; undefined draws are left out
//!    and counted in `undefined_draws`.
//!
//! Every draw depends on its index alone, so draws run in parallel and the
//! result is bit-for-bit the same for any number of threads.
//!
//! ## Why it is fast enough
//!
//! A report of 2,000 questions with ~300 estimands and 10,000 draws is
//! billions of multiply-adds. Three things keep it well under the 5 s
//! target on 2 cores (`cargo bench -p cohort-core --bench bootstrap`):
//! identical ratios are summed once (a difference reuses the ratios of its
//! arms); each ratio keeps only the clusters where its numerator or
//! denominator is non-zero (category rates touch a fifth of the questions),
//! with numerator and denominator summed in one pass; and draws are taken
//! `LANES` at a time, so each non-zero term feeds `LANES` independent
//! sums that the compiler vectorises. Each lane is still summed in
//! increasing cluster order, so the vectorised sums equal the scalar ones
//! of step 4 exactly.

use std::collections::HashMap;
use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::hash::sha256;
use crate::order::KeyStream;

/// The seed of seed 004's bootstrap.
pub const BOOTSTRAP_SEED: u64 = 20261014;
/// Seed 004's number of paired draws.
pub const DEFAULT_DRAWS: u32 = 10_000;
/// The name of the resampling procedure above, recorded in every report.
pub const ALGORITHM: &str = "cohort-bootstrap-v1";

/// The percentiles of a 95% interval.
const LOW: f64 = 0.025;
const HIGH: f64 = 0.975;

/// Draws evaluated together: each non-zero term of a ratio is loaded once
/// and multiplied into this many independent sums. Eight `f64` lanes for
/// numerator and denominator fill the 16 SSE2 registers of the baseline
/// x86-64 target (`benches/bootstrap.rs`, dense mix: 4 lanes took 1.6x and
/// 16 lanes 1.4x the time of 8).
const LANES: usize = 8;

/// A statistic over clusters (questions), each a ratio of sums.
#[derive(Debug, Clone, PartialEq)]
pub enum Estimand {
    /// `sum_q m_q * num[q] / sum_q m_q * den[q]` (m = multiplicity of
    /// cluster q in a draw; all 1 for the point value). `num` and `den` have
    /// one entry per cluster (len == clusters); a cluster outside the
    /// statistic has 0/0.
    Ratio { num: Vec<f64>, den: Vec<f64> },
    /// `a - b`, each evaluated on the same draw (paired).
    Difference(Box<Estimand>, Box<Estimand>),
}

impl Estimand {
    /// A micro rate: the ratio of the sums.
    pub fn ratio(num: Vec<f64>, den: Vec<f64>) -> Estimand {
        Estimand::Ratio { num, den }
    }

    /// Equal-cluster macro rate: per-cluster rate `num[q]/den[q]` for
    /// clusters with `den[q] > 0`, averaged with equal weight:
    /// `Ratio { num: r_q (0 where den 0), den: 1 where den[q] > 0 else 0 }`.
    ///
    /// When the two slices differ in length the result keeps both lengths
    /// (a missing numerator counts as 0), so the mismatch is reported by
    /// [`ClusterBootstrap::try_intervals`] instead of being hidden here.
    pub fn macro_rate(num: &[f64], den: &[f64]) -> Estimand {
        let counted = |q: usize| den.get(q).is_some_and(|&d| d > 0.0);
        let rates = (0..num.len()).map(|q| if counted(q) { num[q] / den[q] } else { 0.0 }).collect();
        let weights = (0..den.len()).map(|q| if counted(q) { 1.0 } else { 0.0 }).collect();
        Estimand::Ratio { num: rates, den: weights }
    }

    /// `a - b` on the same draws.
    pub fn difference(a: Estimand, b: Estimand) -> Estimand {
        Estimand::Difference(Box::new(a), Box::new(b))
    }

    /// The value on the full sample (every `m_q = 1`); `None` when a
    /// denominator is 0 (or a ratio's two vectors differ in length).
    pub fn point(&self) -> Option<f64> {
        match self {
            Estimand::Ratio { num, den } => {
                if num.len() != den.len() {
                    return None;
                }
                // Summed in increasing q, as every draw is (step 4).
                let (n, d) = num.iter().zip(den).fold((0.0, 0.0), |(n, d), (a, b)| (n + a, d + b));
                (d != 0.0).then(|| n / d)
            }
            Estimand::Difference(a, b) => Some(a.point()? - b.point()?),
        }
    }

    /// Checks that every ratio has one finite entry per cluster.
    fn check(&self, index: usize, clusters: usize) -> Result<(), StatsError> {
        match self {
            Estimand::Ratio { num, den } => {
                if num.len() != clusters || den.len() != clusters {
                    return Err(StatsError::Length { index, num: num.len(), den: den.len(), clusters });
                }
                match num.iter().zip(den).position(|(n, d)| !n.is_finite() || !d.is_finite()) {
                    Some(cluster) => Err(StatsError::NonFinite { index, cluster }),
                    None => Ok(()),
                }
            }
            Estimand::Difference(a, b) => {
                a.check(index, clusters)?;
                b.check(index, clusters)
            }
        }
    }
}

/// Why a set of estimands cannot be bootstrapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    #[error(
        "estimand {index}: a ratio has {num} numerator and {den} denominator entries; give one entry of each per cluster ({clusters}), 0 for a cluster outside the statistic"
    )]
    Length { index: usize, num: usize, den: usize, clusters: usize },
    #[error(
        "estimand {index}: cluster {cluster} has a value that is not finite; give finite numerators and denominators"
    )]
    NonFinite { index: usize, cluster: usize },
}

/// A bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Percentile 95% interval over the draws where the statistic was
    /// defined; `None` when no draw was.
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub draws: u32,
    /// Draws whose resample left a denominator at 0 (statistic undefined in
    /// that draw); they are left out of the percentiles and counted here.
    pub undefined_draws: u32,
}

/// The cluster bootstrap: `draws` resamples of `clusters` clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterBootstrap {
    pub clusters: usize,
    pub draws: u32,
    pub seed: u64,
}

// === impl ClusterBootstrap ===

impl ClusterBootstrap {
    /// Seed 004's bootstrap: [`DEFAULT_DRAWS`] draws, [`BOOTSTRAP_SEED`].
    pub fn new(clusters: usize) -> Self {
        ClusterBootstrap { clusters, draws: DEFAULT_DRAWS, seed: BOOTSTRAP_SEED }
    }

    /// Every estimand on the same draws: draw b resamples `clusters` cluster
    /// indices with replacement, and every estimand is evaluated on that one
    /// resample (so pairs stay paired and a question's claims stay
    /// together). One Interval per estimand, same order.
    ///
    /// An estimand that [`try_intervals`](Self::try_intervals) would refuse
    /// (a vector without one finite entry per cluster) is undefined in every
    /// draw here: its interval is `None` with `undefined_draws == draws`.
    pub fn intervals(&self, estimands: &[Estimand]) -> Vec<Interval> {
        self.intervals_with_threads(estimands, default_threads())
    }

    /// As [`intervals`](Self::intervals), but refuses malformed estimands
    /// with an error naming the first one.
    pub fn try_intervals(&self, estimands: &[Estimand]) -> Result<Vec<Interval>, StatsError> {
        for (index, estimand) in estimands.iter().enumerate() {
            estimand.check(index, self.clusters)?;
        }
        Ok(self.intervals(estimands))
    }

    /// As [`intervals`](Self::intervals) on exactly `threads` threads (at
    /// most one per group of draws). The result does not depend on it.
    pub fn intervals_with_threads(&self, estimands: &[Estimand], threads: NonZeroUsize) -> Vec<Interval> {
        let plan = Plan::compile(estimands, self.clusters);
        let key = self.key();
        let tiles = (self.draws as usize).div_ceil(LANES);
        let threads = threads.get().min(tiles).max(1);
        // Contiguous ranges of tiles, one per thread.
        let per_thread = tiles.div_ceil(threads);
        let partials: Vec<Values> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (plan, key) = (&plan, &key);
                    let tiles = (t * per_thread)..((t + 1) * per_thread).min(tiles);
                    scope.spawn(move || self.run_tiles(plan, key, tiles))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
        });
        let mut values = partials.into_iter().fold(Values::new(plan.nodes.len()), Values::merge);
        values.defined.iter_mut().for_each(|v| v.sort_unstable_by(f64::total_cmp));
        values
            .defined
            .iter()
            .zip(&values.undefined)
            .map(|(defined, &undefined)| Interval {
                ci_low: percentile_linear(defined, LOW),
                ci_high: percentile_linear(defined, HIGH),
                draws: self.draws,
                undefined_draws: undefined,
            })
            .collect()
    }

    /// The multiplicities of draw b (for tests and for re-derivation):
    /// `m[q]` = times cluster q was drawn.
    pub fn multiplicities(&self, draw: u32) -> Vec<u32> {
        multiplicities(&self.key(), draw, self.clusters)
    }

    /// Step 1: the key of every draw's keystream.
    fn key(&self) -> [u8; 32] {
        sha256(format!("{ALGORITHM}:{}", self.seed).as_bytes())
    }

    /// Evaluates every estimand on the draws of `tiles` (tile t holds draws
    /// `t*LANES ..`), keeping the defined values.
    fn run_tiles(&self, plan: &Plan, key: &[u8; 32], tiles: std::ops::Range<usize>) -> Values {
        let mut values = Values::new(plan.nodes.len());
        // Multiplicities of the tile's draws, cluster-major: lanes[q][j] is
        // m[q] of the tile's draw j, so one cluster's LANES counts are one load.
        let mut lanes = vec![[0.0f64; LANES]; self.clusters];
        let mut sums = vec![([0.0f64; LANES], [0.0f64; LANES]); plan.ratios.len()];
        for tile in tiles {
            let first = tile * LANES;
            let width = (self.draws as usize - first).min(LANES);
            lanes.iter_mut().for_each(|l| *l = [0.0; LANES]);
            for j in 0..width {
                // first + j < draws <= u32::MAX.
                let draw = (first + j) as u32;
                for (lane, m) in lanes.iter_mut().zip(multiplicities(key, draw, self.clusters)) {
                    lane[j] = f64::from(m);
                }
            }
            for (ratio, sum) in plan.ratios.iter().zip(sums.iter_mut()) {
                *sum = ratio.sums(&lanes);
            }
            for (node, index) in plan.nodes.iter().zip(0..) {
                for j in 0..width {
                    match node.eval(&sums, j) {
                        Some(v) => values.defined[index].push(v),
                        None => values.undefined[index] += 1,
                    }
                }
            }
        }
        values
    }
}

/// Steps 2-3 for one draw.
fn multiplicities(key: &[u8; 32], draw: u32, clusters: usize) -> Vec<u32> {
    let mut stream = KeyStream::for_draw(key, draw);
    let mut m = vec![0u32; clusters];
    for _ in 0..clusters {
        // The index is below `clusters`, so it fits a usize.
        m[stream.below(clusters as u64) as usize] += 1;
    }
    m
}

fn default_threads() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// numpy's default percentile (method "linear"): on sorted v of length n,
/// `h = (n-1)*p`, `v[floor h] + (h - floor h)*(v[floor h + 1] - v[floor h])`.
/// `None` for an empty slice or a `p` outside `[0, 1]`.
pub fn percentile_linear(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * p;
    // h is within [0, n-1], so floor(h) is a valid index.
    let lo = h.floor() as usize;
    let Some(&next) = sorted.get(lo + 1) else {
        return Some(sorted[lo]);
    };
    Some(sorted[lo] + (h - h.floor()) * (next - sorted[lo]))
}

// === the compiled estimands ===

/// The estimands as evaluated: distinct ratios summed once per tile, and one
/// expression per estimand over them.
#[derive(Debug)]
struct Plan {
    ratios: Vec<SparseRatio>,
    nodes: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    Ratio(usize),
    Difference(Box<Node>, Box<Node>),
    /// Refused by `Estimand::check`: undefined in every draw.
    Invalid,
}

/// A ratio's non-zero terms, in increasing cluster order.
#[derive(Debug)]
struct SparseRatio {
    clusters: Vec<u32>,
    num: Vec<f64>,
    den: Vec<f64>,
}

impl Plan {
    fn compile(estimands: &[Estimand], clusters: usize) -> Plan {
        let mut plan = Plan { ratios: Vec::new(), nodes: Vec::new() };
        // Bit patterns of (num, den) -> index in `ratios`.
        let mut seen: HashMap<Vec<u64>, usize> = HashMap::new();
        for (index, estimand) in estimands.iter().enumerate() {
            let node = match estimand.check(index, clusters) {
                Ok(()) => plan.node(estimand, &mut seen),
                Err(_) => Node::Invalid,
            };
            plan.nodes.push(node);
        }
        plan
    }

    fn node(&mut self, estimand: &Estimand, seen: &mut HashMap<Vec<u64>, usize>) -> Node {
        match estimand {
            Estimand::Ratio { num, den } => {
                let bits: Vec<u64> = num.iter().chain(den).map(|v| v.to_bits()).collect();
                let next = self.ratios.len();
                let index = *seen.entry(bits).or_insert(next);
                if index == next {
                    self.ratios.push(SparseRatio::new(num, den));
                }
                Node::Ratio(index)
            }
            Estimand::Difference(a, b) => Node::Difference(Box::new(self.node(a, seen)), Box::new(self.node(b, seen))),
        }
    }
}

impl Node {
    /// The value in lane `j`; `None` when a denominator sum is 0.
    fn eval(&self, sums: &[([f64; LANES], [f64; LANES])], j: usize) -> Option<f64> {
        match self {
            Node::Ratio(r) => {
                let (num, den) = &sums[*r];
                (den[j] != 0.0).then(|| num[j] / den[j])
            }
            Node::Difference(a, b) => Some(a.eval(sums, j)? - b.eval(sums, j)?),
            Node::Invalid => None,
        }
    }
}

impl SparseRatio {
    fn new(num: &[f64], den: &[f64]) -> SparseRatio {
        let mut ratio = SparseRatio { clusters: Vec::new(), num: Vec::new(), den: Vec::new() };
        for (q, (&n, &d)) in num.iter().zip(den).enumerate() {
            // A zero term adds nothing to either sum; leaving it out does not
            // change a single bit of them. Cluster counts fit a u32 (checked
            // lengths come from real cohorts, far below 2^32 questions).
            if n != 0.0 || d != 0.0 {
                ratio.clusters.push(q as u32);
                ratio.num.push(n);
                ratio.den.push(d);
            }
        }
        ratio
    }

    /// The numerator and denominator sums of every lane, each in increasing
    /// cluster order (step 4).
    fn sums(&self, lanes: &[[f64; LANES]]) -> ([f64; LANES], [f64; LANES]) {
        let (mut num, mut den) = ([0.0f64; LANES], [0.0f64; LANES]);
        for ((&q, &n), &d) in self.clusters.iter().zip(&self.num).zip(&self.den) {
            let m = &lanes[q as usize];
            for j in 0..LANES {
                num[j] += m[j] * n;
                den[j] += m[j] * d;
            }
        }
        (num, den)
    }
}

/// Per estimand: the defined values of the draws seen so far and the count
/// of undefined draws.
#[derive(Debug)]
struct Values {
    defined: Vec<Vec<f64>>,
    undefined: Vec<u32>,
}

impl Values {
    fn new(estimands: usize) -> Values {
        Values { defined: vec![Vec::new(); estimands], undefined: vec![0; estimands] }
    }

    fn merge(mut self, other: Values) -> Values {
        for (mine, theirs) in self.defined.iter_mut().zip(other.defined) {
            mine.extend(theirs);
        }
        for (mine, theirs) in self.undefined.iter_mut().zip(other.undefined) {
            *mine += theirs;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    /// Micro and macro rates on a hand example: question 1 has 9 of 10
    /// claims supported, question 2 has 0 of 1, question 3 none judged.
    /// Micro = 9/11; macro = (0.9 + 0.0)/2 = 0.45, question 3 left out.
    #[test]
    fn micro_and_macro_point_values_on_a_hand_example() {
        let supported = [9.0, 0.0, 0.0];
        let judged = [10.0, 1.0, 0.0];
        let micro = Estimand::ratio(supported.to_vec(), judged.to_vec());
        assert_eq!(micro.point(), Some(9.0 / 11.0));
        let macro_rate = Estimand::macro_rate(&supported, &judged);
        assert_eq!(macro_rate, Estimand::ratio(vec![0.9, 0.0, 0.0], vec![1.0, 1.0, 0.0]));
        assert_eq!(macro_rate.point(), Some(0.45));
    }

    /// A difference is the difference of the point values; undefined when
    /// either side is.
    #[test]
    fn difference_point_value() {
        let a = Estimand::ratio(vec![3.0, 1.0], vec![4.0, 4.0]);
        let b = Estimand::ratio(vec![1.0, 1.0], vec![4.0, 4.0]);
        assert_eq!(Estimand::difference(a.clone(), b).point(), Some(0.25));
        let none = Estimand::ratio(vec![0.0, 0.0], vec![0.0, 0.0]);
        assert_eq!(Estimand::difference(a.clone(), none.clone()).point(), None);
        assert_eq!(Estimand::difference(none, a).point(), None);
    }

    /// A statistic with a zero denominator on the full sample is undefined
    /// in every draw too: no interval, every draw counted as undefined.
    #[test]
    fn an_estimand_undefined_in_the_full_sample_has_no_interval() {
        let nothing = Estimand::ratio(vec![0.0; 5], vec![0.0; 5]);
        assert_eq!(nothing.point(), None);
        let boot = ClusterBootstrap { clusters: 5, draws: 100, seed: 1 };
        let got = boot.intervals(&[nothing]);
        assert_eq!(got, vec![Interval { ci_low: None, ci_high: None, draws: 100, undefined_draws: 100 }]);
    }

    /// A statistic defined on one cluster of 20 is undefined in the draws
    /// that miss that cluster (about (19/20)^20 = 36% of them), which are
    /// counted and left out of the percentiles.
    #[test]
    fn draws_that_miss_the_only_cluster_are_counted_as_undefined() {
        let mut num = vec![0.0; 20];
        let mut den = vec![0.0; 20];
        (num[3], den[3]) = (1.0, 2.0);
        let boot = ClusterBootstrap { clusters: 20, draws: 2000, seed: 5 };
        let interval = &boot.intervals(&[Estimand::ratio(num, den)])[0];
        let missed = (0..2000).filter(|&b| boot.multiplicities(b)[3] == 0).count() as u32;
        assert_eq!(interval.undefined_draws, missed);
        assert!((600..840).contains(&missed), "{missed} of 2000 draws missed the cluster");
        // Every defined draw has the same value, 1/2.
        assert_eq!((interval.ci_low, interval.ci_high), (Some(0.5), Some(0.5)));
    }

    #[test]
    fn multiplicities_sum_to_the_cluster_count() {
        for clusters in [1, 2, 7, 30, 1000] {
            let boot = ClusterBootstrap::new(clusters);
            for b in [0, 1, 17, 9999] {
                let m = boot.multiplicities(b);
                assert_eq!(m.len(), clusters);
                assert_eq!(m.iter().sum::<u32>() as usize, clusters);
            }
        }
        assert!(ClusterBootstrap::new(0).multiplicities(0).is_empty());
    }

    /// Keystream words and multiplicities computed independently in Python
    /// with `scripts/rederive_order.py`'s `chacha20_block`: key
    /// SHA-256("cohort-bootstrap-v1:20261014"), nonce = b (4 LE bytes) + 8
    /// zero bytes, counter 0.
    #[test]
    fn keystream_and_multiplicities_match_the_python_derivation() {
        let boot = ClusterBootstrap::new(7);
        let key = boot.key();
        assert_eq!(hex::encode(key), "be0a50603cf922201ce26c6f851833ea29ea0e724193a3f89a40011bb77f9b31");
        let mut stream = KeyStream::for_draw(&key, 1);
        let words: Vec<u64> = (0..4).map(|_| stream.next_u64()).collect();
        assert_eq!(words, [0xe4a727d86ed44741, 0xbab266a58bdc5538, 0x2285b7869f6c2308, 0x0f5d5751955eaebc]);
        assert_eq!(boot.multiplicities(0), [0, 1, 1, 1, 3, 1, 0]);
        assert_eq!(boot.multiplicities(1), [1, 0, 2, 2, 1, 0, 1]);
        assert_eq!(boot.multiplicities(2), [4, 1, 2, 0, 0, 0, 0]);
        let thirty = ClusterBootstrap::new(30).multiplicities(3);
        let expected = [3, 1, 1, 0, 0, 0, 0, 1, 1, 0, 2, 1, 0, 3, 2, 0, 1, 2, 2, 1, 1, 0, 1, 3, 1, 1, 1, 0, 0, 1];
        assert_eq!(thirty, expected);
    }

    /// Synthetic per-question counts: varied, with some empty questions.
    fn cohort(clusters: usize, salt: usize) -> (Vec<f64>, Vec<f64>) {
        let den: Vec<f64> = (0..clusters).map(|q| ((q * 7 + salt * 3) % 11) as f64).collect();
        let num = den.iter().enumerate().map(|(q, d)| (d * ((q + salt) % 5) as f64 / 4.0).floor()).collect();
        (num, den)
    }

    fn estimands(clusters: usize) -> Vec<Estimand> {
        let (na, da) = cohort(clusters, 1);
        let (nb, db) = cohort(clusters, 2);
        let a = Estimand::ratio(na.clone(), da.clone());
        let b = Estimand::ratio(nb.clone(), db.clone());
        vec![
            a.clone(),
            Estimand::macro_rate(&na, &da),
            b.clone(),
            Estimand::difference(a.clone(), b),
            Estimand::difference(Estimand::macro_rate(&na, &da), a),
        ]
    }

    /// The draws, the sums and the values do not depend on the thread
    /// count (a tile count that does not divide evenly included).
    #[test]
    fn one_thread_and_two_threads_agree() {
        let boot = ClusterBootstrap { clusters: 40, draws: 1003, seed: 9 };
        let e = estimands(40);
        let one = boot.intervals_with_threads(&e, threads(1));
        assert_eq!(one, boot.intervals_with_threads(&e, threads(2)));
        assert_eq!(one, boot.intervals_with_threads(&e, threads(5)));
    }

    /// Same seed, same intervals; another seed, other intervals.
    #[test]
    fn the_seed_reproduces_the_intervals() {
        let e = estimands(30);
        let boot = ClusterBootstrap { clusters: 30, draws: 2000, seed: BOOTSTRAP_SEED };
        let first = boot.intervals(&e);
        assert_eq!(first, boot.intervals(&e));
        let other = ClusterBootstrap { seed: BOOTSTRAP_SEED + 1, ..boot }.intervals(&e);
        assert_ne!(first, other);
        for (interval, estimand) in first.iter().zip(&e) {
            let (lo, hi, point) = (interval.ci_low.unwrap(), interval.ci_high.unwrap(), estimand.point().unwrap());
            assert!(lo <= point && point <= hi, "{lo} <= {point} <= {hi}");
            assert!(lo < hi);
        }
    }

    /// The vectorised, sparse, deduplicated evaluation equals a plain
    /// evaluation of step 4 from the multiplicities, bit for bit.
    #[test]
    fn intervals_equal_a_plain_evaluation_of_the_documented_procedure() {
        let clusters = 25;
        let boot = ClusterBootstrap { clusters, draws: 301, seed: 77 };
        let e = estimands(clusters);
        fn plain(e: &Estimand, m: &[u32]) -> Option<f64> {
            match e {
                Estimand::Ratio { num, den } => {
                    let (mut n, mut d) = (0.0, 0.0);
                    for q in 0..m.len() {
                        n += f64::from(m[q]) * num[q];
                        d += f64::from(m[q]) * den[q];
                    }
                    (d != 0.0).then(|| n / d)
                }
                Estimand::Difference(a, b) => Some(plain(a, m)? - plain(b, m)?),
            }
        }
        let got = boot.intervals(&e);
        for (estimand, interval) in e.iter().zip(&got) {
            let mut values: Vec<f64> =
                (0..boot.draws).filter_map(|b| plain(estimand, &boot.multiplicities(b))).collect();
            let undefined = boot.draws - values.len() as u32;
            values.sort_by(f64::total_cmp);
            let expected = Interval {
                ci_low: percentile_linear(&values, 0.025),
                ci_high: percentile_linear(&values, 0.975),
                draws: boot.draws,
                undefined_draws: undefined,
            };
            assert_eq!(interval, &expected);
        }
    }

    #[test]
    fn percentile_is_numpys_linear_method() {
        let v = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(percentile_linear(&v, 0.0), Some(1.0));
        assert_eq!(percentile_linear(&v, 1.0), Some(8.0));
        // h = 3 * 0.5 = 1.5: 2 + 0.5 * (4 - 2).
        assert_eq!(percentile_linear(&v, 0.5), Some(3.0));
        // h = 3 * 0.025 = 0.075: 1 + 0.075 * 1; np.percentile gives 1.075.
        assert!((percentile_linear(&v, 0.025).unwrap() - 1.075).abs() < 1e-15);
        assert_eq!(percentile_linear(&[5.0], 0.975), Some(5.0));
        assert_eq!(percentile_linear(&[], 0.5), None);
        assert_eq!(percentile_linear(&v, 1.5), None);
        assert_eq!(percentile_linear(&v, f64::NAN), None);
    }

    /// A ratio without one finite entry per cluster is refused by
    /// `try_intervals` (naming it) and undefined throughout in `intervals`,
    /// without disturbing the others.
    #[test]
    fn malformed_estimands_are_named() {
        let boot = ClusterBootstrap { clusters: 3, draws: 50, seed: 1 };
        let good = Estimand::ratio(vec![1.0, 2.0, 3.0], vec![2.0, 2.0, 4.0]);
        let short = Estimand::ratio(vec![1.0], vec![1.0, 1.0, 1.0]);
        let nan = Estimand::difference(good.clone(), Estimand::ratio(vec![1.0, f64::NAN, 0.0], vec![1.0; 3]));
        assert_eq!(
            boot.try_intervals(&[good.clone(), short.clone()]),
            Err(StatsError::Length { index: 1, num: 1, den: 3, clusters: 3 })
        );
        assert_eq!(boot.try_intervals(std::slice::from_ref(&nan)), Err(StatsError::NonFinite { index: 0, cluster: 1 }));
        let got = boot.intervals(&[good.clone(), short, nan]);
        assert_eq!(got[0], boot.intervals(&[good])[0]);
        assert!(got[0].ci_low.is_some());
        for invalid in &got[1..] {
            assert_eq!(invalid, &Interval { ci_low: None, ci_high: None, draws: 50, undefined_draws: 50 });
        }
        let message = StatsError::Length { index: 1, num: 1, den: 3, clusters: 3 }.to_string();
        assert!(message.starts_with("estimand 1: a ratio has 1 numerator"), "{message}");
    }

    #[test]
    fn no_draws_give_no_interval() {
        let boot = ClusterBootstrap { clusters: 3, draws: 0, seed: 1 };
        let e = Estimand::ratio(vec![1.0; 3], vec![1.0; 3]);
        assert_eq!(boot.intervals(&[e]), vec![Interval { ci_low: None, ci_high: None, draws: 0, undefined_draws: 0 }]);
    }
}
