//! Cluster-bootstrap throughput at report scale: 2,000 questions (5
//! categories of 400) x 5 arms, 300 estimands, 10,000 draws, in draws/s and
//! ms. Run with `cargo bench -p cohort-core --bench bootstrap`.
//!
//! Two mixes are timed:
//! - `report`: what a report asks for. Per arm, 5 rates (completion,
//!   support micro and macro, resolution micro and macro) overall and per
//!   category (150 ratios), plus the 5 rates' paired differences for the 10
//!   arm pairs, overall and in the first two categories (150 differences, whose
//!   sides are ratios already in the list);
//! - `dense`: 300 distinct ratios over every question, nothing shared: the
//!   worst case for the same size.
//!
//! The data come from a fixed formula, so every run sums the same numbers;
//! the figures are printed, never asserted (SPEC section 12).

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Instant;

use cohort_core::stats::{ClusterBootstrap, DEFAULT_DRAWS, Estimand};

const QUESTIONS: usize = 2_000;
const CATEGORIES: usize = 5;
const ARMS: usize = 5;

/// A per-question count in `0..modulus`, varied by question and salt.
fn count(q: usize, salt: usize, modulus: usize) -> f64 {
    ((q.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % modulus) as f64
}

/// The rate `metric` of `arm` restricted to `category` (None: every
/// question): a micro ratio for even metrics, a macro rate for odd ones.
fn rate(arm: usize, metric: usize, category: Option<usize>) -> Estimand {
    let in_scope = |q: usize| category.is_none_or(|c| q % CATEGORIES == c);
    let salt = arm * 10 + metric / 2;
    let den: Vec<f64> = (0..QUESTIONS).map(|q| if in_scope(q) { count(q, salt, 12) } else { 0.0 }).collect();
    let num: Vec<f64> = den.iter().enumerate().map(|(q, d)| (d - count(q, salt + 7, 4)).max(0.0)).collect();
    if metric % 2 == 1 { Estimand::macro_rate(&num, &den) } else { Estimand::ratio(num, den) }
}

fn report_mix() -> Vec<Estimand> {
    let scopes: Vec<Option<usize>> = std::iter::once(None).chain((0..CATEGORIES).map(Some)).collect();
    let mut estimands = Vec::new();
    for arm in 0..ARMS {
        for metric in 0..5 {
            for &scope in &scopes {
                estimands.push(rate(arm, metric, scope));
            }
        }
    }
    for a in 0..ARMS {
        for b in (a + 1)..ARMS {
            for metric in 0..5 {
                for scope in [None, Some(0), Some(1)] {
                    estimands.push(Estimand::difference(rate(a, metric, scope), rate(b, metric, scope)));
                }
            }
        }
    }
    estimands
}

fn dense_mix() -> Vec<Estimand> {
    (0..300)
        .map(|i| {
            let den: Vec<f64> = (0..QUESTIONS).map(|q| 1.0 + count(q, 1000 + i, 12)).collect();
            let num = (0..QUESTIONS).map(|q| count(q, 2000 + i, 13).min(den[q])).collect();
            Estimand::ratio(num, den)
        })
        .collect()
}

fn time(label: &str, estimands: &[Estimand], threads: Option<NonZeroUsize>) {
    let boot = ClusterBootstrap::new(QUESTIONS);
    let started = Instant::now();
    let intervals = match threads {
        Some(t) => boot.intervals_with_threads(black_box(estimands), t),
        None => boot.intervals(black_box(estimands)),
    };
    let seconds = started.elapsed().as_secs_f64();
    black_box(&intervals);
    let threads = threads.map_or_else(|| "all".to_owned(), |t| t.to_string());
    println!(
        "bootstrap/{label}: {QUESTIONS} clusters x {} estimands x {DEFAULT_DRAWS} draws on {threads} threads: {:.0} ms, {:.0} draws/s",
        estimands.len(),
        seconds * 1e3,
        f64::from(DEFAULT_DRAWS) / seconds,
    );
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    println!("bootstrap: {cores} threads available");
    let boot = ClusterBootstrap::new(QUESTIONS);
    let started = Instant::now();
    for b in 0..DEFAULT_DRAWS {
        black_box(boot.multiplicities(b));
    }
    println!(
        "bootstrap/multiplicities only: {DEFAULT_DRAWS} draws of {QUESTIONS} on 1 thread: {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    let report = report_mix();
    let dense = dense_mix();
    time("report", &report, None);
    time("report", &report, NonZeroUsize::new(1));
    time("dense", &dense, None);
}
