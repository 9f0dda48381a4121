//! The plain-text tables of `cohort calibrate` and `cohort review
//! agreement`, from the values `crate::calibrate` computes (the JSON is
//! their `to_json`).

use std::fmt::Write as _;

use cohort_core::agreement::{Agreement, BINARY_METRICS, Stat, Weights};

use crate::calibrate::Calibration;

fn fmt_interval(interval: Option<&(Option<f64>, Option<f64>)>) -> String {
    match interval {
        Some((Some(lo), Some(hi))) => format!("[{lo:.3}, {hi:.3}]"),
        _ => "[undefined]".to_owned(),
    }
}

/// The table `cohort calibrate` prints: each judge's counts and metrics
/// with their intervals, what was not counted and why, and the pairwise
/// agreement between judges.
pub fn calibration_table(c: &Calibration) -> String {
    let (gold, results, pairs) = (&c.gold, &c.judges, &c.pairs);
    let mut out = String::new();
    let dimension = c.dimension.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
    let _ = writeln!(
        out,
        "calibration{dimension}: gold {} with {} items, {} pass, {} fail; 95% intervals over {} {} resamples \
         ({}, seed {})\n",
        gold.file,
        gold.items,
        gold.pass,
        gold.items - gold.pass,
        c.resamples,
        c.resample_unit,
        c.algorithm,
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

/// The table `cohort review agreement` prints: raw agreement, Cohen's
/// kappa, the disagreement matrix and the items only one rater labelled.
pub fn agreement_table(a: &str, b: &str, r: &Agreement, only_a: &[String], only_b: &[String]) -> String {
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
