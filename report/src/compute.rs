//! From runs to numbers: counts per arm and category, the rates with their
//! denominators, the cluster-bootstrap intervals (`cohort_core::stats`) and
//! the paired comparisons. Pure: a [`Gathered`] in, a [`Summary`] out, so
//! `cohort verify` recomputes exactly what `cohort report` wrote.
//!
//! Each rate is what its [`RateKind`] says (its fraction of the counts, its
//! pooling, when it cannot be measured, how arms are compared on it);
//! docs/report.md has the definitions for readers. This module only sums
//! the counts per (arm, question), builds every kind's estimand and
//! evaluates them all on one set of bootstrap draws.

use std::collections::{BTreeMap, BTreeSet};

use cohort_core::stats::{self, ClusterBootstrap, Estimand, Interval};

use crate::gather::{FrozenCohort, Gathered, rfc3339_ms};
use crate::model::*;
use crate::rates::{PairScope, Pooling, Tally};

/// Per (arm, question): the sums the rates are made of.
type Cell = Tally;

impl Tally {
    fn add(&mut self, other: &Tally) {
        let (c, o) = (&mut self.counts, &other.counts);
        c.planned += o.planned;
        c.attempted += o.attempted;
        c.completed += o.completed;
        c.refused += o.refused;
        c.failed += o.failed;
        c.timed_out += o.timed_out;
        c.unavailable += o.unavailable;
        c.not_run += o.not_run;
        c.pending += o.pending;
        c.scored += o.scored;
        c.judged_runs += o.judged_runs;
        let (c, o) = (&mut self.claims, &other.claims);
        c.extracted += o.extracted;
        c.cited += o.cited;
        c.uncited += o.uncited;
        c.judged += o.judged;
        c.supported += o.supported;
        for (k, v) in &o.unjudged {
            *c.unjudged.entry(k.clone()).or_default() += v;
        }
        self.citations.total += other.citations.total;
        self.citations.unresolved += other.citations.unresolved;
        self.citations.contradictions_surfaced += other.citations.contradictions_surfaced;
        self.formats.numbered += other.formats.numbered;
        self.formats.markdown_links += other.formats.markdown_links;
        self.review.add(&other.review);
        self.sources.add(&other.sources);
    }

    fn add_run(&mut self, run: &RunView) {
        let c = &mut self.counts;
        c.planned += 1;
        match run.outcome.as_str() {
            "completed" => c.completed += 1,
            "refused" => c.refused += 1,
            "failed" => c.failed += 1,
            "timed_out" => c.timed_out += 1,
            "unavailable" => c.unavailable += 1,
            "not_run" => c.not_run += 1,
            _ => c.pending += 1,
        }
        if run.outcome != "not_run" && run.outcome != "pending" {
            c.attempted += 1;
        }
        if let Some(s) = &run.scored {
            c.scored += 1;
            if s.judged > 0 {
                c.judged_runs += 1;
            }
            let k = &mut self.claims;
            k.extracted += s.claims;
            k.cited += s.cited;
            k.uncited += s.claims - s.cited.min(s.claims);
            k.judged += s.judged;
            k.supported += s.supported;
            for (r, n) in &s.unjudged {
                *k.unjudged.entry(r.clone()).or_default() += n;
            }
            self.citations.total += s.citations;
            self.citations.unresolved += s.unresolved;
            self.citations.contradictions_surfaced += s.contradictions;
            let uncaptured = s.uncaptured_sources.min(s.sources);
            let inaccessible = s.inaccessible_sources.min(s.sources - uncaptured);
            self.sources.add(&crate::rates::SourceTally {
                cited: s.sources,
                accessible: s.sources - uncaptured - inaccessible,
                inaccessible,
                uncaptured,
            });
            match s.citation_format.as_str() {
                "markdown_links" => self.formats.markdown_links += 1,
                "numbered" => self.formats.numbered += 1,
                _ => {}
            }
        }
    }
}

/// Per-question (numerator, denominator) of a kind's fraction.
fn per_question(kind: RateKind, cells: &[Cell]) -> (Vec<f64>, Vec<f64>) {
    cells.iter().map(|c| kind.fraction(c)).map(|(n, d)| (n as f64, d as f64)).unzip()
}

/// A kind's estimand from its per-question fractions.
fn estimand_of(kind: RateKind, (num, den): (Vec<f64>, Vec<f64>)) -> Estimand {
    match kind.pooling() {
        Pooling::Micro => Estimand::ratio(num, den),
        Pooling::Macro => Estimand::macro_rate(&num, &den),
    }
}

/// The estimands of a set of cells (one per question, zeros outside), one
/// per kind in [`RateKind::ALL`] order, so kind `k`'s is at `k.index()`.
fn rate_estimands(cells: &[Cell]) -> Vec<Estimand> {
    RateKind::ALL.into_iter().map(|kind| estimand_of(kind, per_question(kind, cells))).collect()
}

/// A rate from its estimand's point value, its interval and its status.
fn rate(kind: RateKind, total: &Cell, estimand: &Estimand, interval: &Interval) -> Rate {
    let (numerator, denominator, questions) = match (kind.pooling(), estimand) {
        (Pooling::Micro, _) => {
            let (n, d) = kind.fraction(total);
            (n as f64, d as f64, None)
        }
        (Pooling::Macro, Estimand::Ratio { num, den }) => {
            let q = den.iter().filter(|d| **d > 0.0).count() as u64;
            (num.iter().sum(), den.iter().sum(), Some(q))
        }
        (Pooling::Macro, Estimand::Difference(..)) => (0.0, 0.0, None),
    };
    let (status, reason) = kind.status(total);
    let value = if status == RateStatus::Measured { estimand.point() } else { None };
    Rate {
        value,
        numerator,
        denominator,
        ci_low: value.and(interval.ci_low),
        ci_high: value.and(interval.ci_high),
        undefined_draws: interval.undefined_draws,
        status: if value.is_none() && status == RateStatus::Measured { RateStatus::NotApplicable } else { status },
        reason,
        questions,
    }
}

/// Builds every number of the report.
pub fn summarise(frozen: &FrozenCohort, gathered: &Gathered, draws: u32) -> Summary {
    let config = &frozen.cohort.config;
    let questions: Vec<String> = frozen.cohort.questions.iter().map(|q| q.id.clone()).collect();
    let q_index: BTreeMap<&str, usize> = questions.iter().enumerate().map(|(i, q)| (q.as_str(), i)).collect();
    let q_category: Vec<&str> = frozen.cohort.questions.iter().map(|q| q.category.as_str()).collect();
    let arm_index: BTreeMap<&str, usize> = config.arms.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
    let n_q = questions.len();

    // cells[arm][question]
    let mut cells = vec![vec![Cell::default(); n_q]; config.arms.len()];
    let mut observed: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); config.arms.len()];
    let mut durations: Vec<Vec<i64>> = vec![Vec::new(); config.arms.len()];
    let mut costs: Vec<CostSums> = vec![CostSums::default(); config.arms.len()];
    let (mut first_start, mut last_end) = (i64::MAX, 0i64);
    for run in &gathered.runs {
        let (Some(&a), Some(&q)) = (arm_index.get(run.arm.as_str()), q_index.get(run.question_id.as_str())) else {
            continue;
        };
        cells[a][q].add_run(run);
        if !run.observed_version.is_empty() {
            *observed[a].entry(run.observed_version.clone()).or_default() += 1;
        }
        if let Some(d) = run.duration_ms {
            durations[a].push(d);
        }
        if let Some(s) = run.started_ms {
            first_start = first_start.min(s);
            last_end = last_end.max(s + run.duration_ms.unwrap_or(0));
        }
        costs[a].add(run);
    }

    // The human review's figures per (arm, question), so its rates are
    // RateKinds like every other, on the same draws.
    let review = crate::review::summarise_review(frozen, frozen.review.as_ref(), draws);
    if let Some(parts) = &review {
        for (arm_cells, tallies) in cells.iter_mut().zip(&parts.tallies) {
            for (cell, tally) in arm_cells.iter_mut().zip(tallies) {
                cell.review = *tally;
            }
        }
    }

    // Estimands: per arm (one per kind), per arm x category (one per kind
    // each), per comparison (one per compared kind).
    let mut estimands: Vec<Estimand> = Vec::new();
    let mut arm_slots = Vec::new();
    for arm_cells in &cells {
        let start = estimands.len();
        estimands.extend(rate_estimands(arm_cells));
        let mut cat_slots = Vec::new();
        for category in &config.categories {
            let masked: Vec<Cell> = arm_cells
                .iter()
                .zip(&q_category)
                .map(|(c, qc)| if qc == category { c.clone() } else { Cell::default() })
                .collect();
            cat_slots.push((estimands.len(), masked.clone()));
            estimands.extend(rate_estimands(&masked));
        }
        arm_slots.push((start, cat_slots));
    }
    let pairs = comparison_pairs(config);
    let mut pair_slots = Vec::new();
    for &(a, b) in &pairs {
        let paired: Vec<bool> =
            (0..n_q).map(|q| cells[a][q].counts.completed > 0 && cells[b][q].counts.completed > 0).collect();
        let mask = |v: (Vec<f64>, Vec<f64>)| -> (Vec<f64>, Vec<f64>) {
            v.0.iter().zip(&v.1).zip(&paired).map(|((n, d), p)| if *p { (*n, *d) } else { (0.0, 0.0) }).unzip()
        };
        // Questions where both sides are defined.
        let pair_questions = |x: &(Vec<f64>, Vec<f64>), y: &(Vec<f64>, Vec<f64>)| {
            x.1.iter().zip(&y.1).filter(|(p, q)| **p > 0.0 && **q > 0.0).count() as u64
        };
        // Per compared kind: (kind, its estimand's slot, its questions).
        let mut compared_slots = Vec::new();
        for kind in RateKind::ALL {
            let Some(compared) = kind.comparison() else { continue };
            let (x, y) = (per_question(kind, &cells[a]), per_question(kind, &cells[b]));
            let (x, y, over) = match compared.over {
                PairScope::AllQuestions => (x, y, n_q as u64),
                PairScope::CompletedPairs => {
                    let (x, y) = (mask(x), mask(y));
                    let over = pair_questions(&x, &y);
                    (x, y, over)
                }
            };
            compared_slots.push((kind, estimands.len(), over));
            estimands.push(Estimand::difference(estimand_of(kind, x), estimand_of(kind, y)));
        }
        pair_slots.push((paired.iter().filter(|p| **p).count() as u64, compared_slots));
    }
    let bootstrap = ClusterBootstrap { clusters: n_q, draws, seed: stats::BOOTSTRAP_SEED };
    let intervals =
        if n_q == 0 { vec![empty_interval(draws); estimands.len()] } else { bootstrap.intervals(&estimands) };

    let rates_of = |start: usize, total: &Cell| {
        Rates::from_fn(|kind| {
            let slot = start + kind.index();
            rate(kind, total, &estimands[slot], &intervals[slot])
        })
    };
    let total_of = |cs: &[Cell]| {
        let mut t = Cell::default();
        for c in cs {
            t.add(c);
        }
        t
    };

    let totals: Vec<Cell> = cells.iter().map(|c| total_of(c)).collect();
    let mut arms = Vec::new();
    for (a, arm) in config.arms.iter().enumerate() {
        let (start, cat_slots) = &arm_slots[a];
        let total = total_of(&cells[a]);
        let categories = config
            .categories
            .iter()
            .zip(cat_slots)
            .map(|(category, (slot, masked))| {
                let t = total_of(masked);
                let unique = gathered
                    .source_urls
                    .get(&arm.id)
                    .and_then(|by| by.get(category))
                    .map_or(0, |urls| urls.len() as u64);
                CategorySummary {
                    category: category.clone(),
                    rates: rates_of(*slot, &t),
                    sources: source_counts(&t.sources, unique),
                    counts: t.counts,
                    claims: t.claims,
                    citations: t.citations,
                }
            })
            .collect();
        let mut d = durations[a].clone();
        d.sort_unstable();
        arms.push(ArmSummary {
            id: arm.id.clone(),
            label: arm.label.clone(),
            workflow: arm.workflow.clone(),
            simulated: arm.adapter == cohort_core::config::AdapterKind::Sim,
            rates: rates_of(*start, &total),
            counts: total.counts,
            claims: total.claims,
            citations: total.citations,
            sources: source_counts(&total.sources, unique_sources(gathered, &arm.id)),
            time_cost: TimeCost {
                timed_runs: d.len() as u64,
                median_duration_ms: nearest_rank(&d, 0.5),
                p90_duration_ms: nearest_rank(&d, 0.9),
                total_duration_ms: d.iter().sum(),
                ..costs[a].time_cost()
            },
            categories,
        });
    }

    let comparisons: Vec<Comparison> = pairs
        .iter()
        .zip(&pair_slots)
        .map(|(&(a, b), (completed_pairs, compared_slots))| {
            let (ida, idb) = (&config.arms[a].id, &config.arms[b].id);
            let differences = compared_slots
                .iter()
                .map(|&(kind, slot, questions)| {
                    let (e, iv) = (&estimands[slot], &intervals[slot]);
                    let mut d = difference(ida, idb, kind.measure_label(), e, iv, questions, *completed_pairs);
                    if let Some(why) = kind.not_comparable(&totals[a], &totals[b]) {
                        d = Difference {
                            value: None,
                            ci_low: None,
                            ci_high: None,
                            undefined_draws: d.undefined_draws,
                            questions,
                            statement: format!("{}: {why}", kind.measure_label()),
                        };
                    }
                    (kind, d)
                })
                .collect();
            Comparison {
                workflow: config.arms[a].workflow.clone(),
                a: ida.clone(),
                b: idb.clone(),
                completed_pairs: *completed_pairs,
                questions: n_q as u64,
                a_completion: arms[a].rates[RateKind::Completion].clone(),
                b_completion: arms[b].rates[RateKind::Completion].clone(),
                differences,
            }
        })
        .collect();

    let simulated = Simulated {
        arms: config
            .arms
            .iter()
            .filter(|a| a.adapter == cohort_core::config::AdapterKind::Sim)
            .map(|a| a.id.clone())
            .collect(),
        judge: gathered.judge_simulated || config.judge.as_ref().is_some_and(|j| j.provider == "sim"),
    };
    let status = &gathered.status;
    let method = Method {
        frozen_at: frozen.manifest.frozen_at.clone(),
        seed: config.seed,
        order_algorithm: frozen.manifest.order_algorithm.clone(),
        order_sha256: frozen.manifest.order_sha256.clone(),
        config_sha256: frozen.manifest.config_sha256.clone(),
        files: frozen.manifest.files.clone(),
        question_sha256: frozen
            .cohort
            .questions
            .iter()
            .map(|q| (q.id.clone(), cohort_core::hash::sha256_hex(q.text.as_bytes())))
            .collect(),
        window_hours: config.window_hours,
        window_opened_at: status.window_start_ms.and_then(rfc3339_ms),
        window_closes_at: status.window_end_ms.and_then(rfc3339_ms),
        first_start_at: (first_start != i64::MAX).then_some(first_start).and_then(rfc3339_ms),
        last_end_at: rfc3339_ms(last_end),
        repeats: config.repeats,
        repeat_schedule: config.repeat_schedule.as_ref().map(|r| r.describe(config.repeats, config.window_hours)),
        run_timeout_secs: config.run_timeout_secs,
        retry: config.retry.clone(),
        aborted: status.aborted.clone(),
        amendments: frozen
            .manifest
            .amendments
            .iter()
            .map(|a| format!("{} from {} ({}): {}", a.amended_at, a.from_cohort, a.from_manifest_sha256, a.reason))
            .collect(),
        judge: config.judge.as_ref().map(|j| JudgeMethod {
            provider: j.provider.clone(),
            model: j.model.clone(),
            pinned_served_model: j.served_model.clone(),
            vendor_lineage: j.vendor_lineage.clone(),
            temperature: j.temperature,
            batch_size: j.batch_size,
            lineage_waiver: j.lineage_waiver.as_ref().map(|w| format!("{} (approved by {})", w.reason, w.approved_by)),
            served_models: gathered.served_models.clone(),
            simulated: simulated.judge,
        }),
        judge_pass: gathered.pass.clone(),
        arms: config
            .arms
            .iter()
            .zip(&observed)
            .map(|(arm, observed)| ArmMethod {
                id: arm.id.clone(),
                label: arm.label.clone(),
                adapter: serde_json::to_value(arm.adapter)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                workflow: arm.workflow.clone(),
                simulated: arm.adapter == cohort_core::config::AdapterKind::Sim,
                pinned_version: arm.pinned_version.clone(),
                observed_versions: observed.clone(),
                vendor_lineage: arm.vendor_lineage.clone(),
                settings: arm.settings.clone(),
                controls_not_disabled: arm.controls_not_disabled.clone(),
            })
            .collect(),
    };
    let publication = config.publication.clone();

    let mut notes = gathered.notes.clone();
    if status.pending + status.leased > 0 {
        notes.push(format!(
            "the cohort is still running: {} planned run(s) have no final outcome yet and are counted as pending",
            status.pending + status.leased
        ));
    }
    if simulated.judge || !simulated.arms.is_empty() {
        notes.push(
            "SIMULATED: figures from the built-in simulated system or judge measure cohort's pipeline, not any product"
                .to_owned(),
        );
    }
    let review = review.map(|parts| {
        let mut summary = parts.summary;
        for (ar, arm) in summary.arms.iter_mut().zip(&arms) {
            let copy = |f: &mut crate::review::metrics::ReviewFigures, rates: &Rates| {
                f.claim_fidelity = rates[RateKind::ClaimFidelityMicro].clone();
                f.citation_precision = rates[RateKind::CitationPrecisionMicro].clone();
                f.citation_coverage = rates[RateKind::CitationCoverageMicro].clone();
            };
            copy(&mut ar.figures, &arm.rates);
            for c in &arm.categories {
                if let Some(f) = ar.categories.get_mut(&c.category) {
                    copy(f, &c.rates);
                }
            }
        }
        summary
    });
    let publication_state = publication_state(frozen, status, &simulated, review.as_ref());
    let mut comparisons: Vec<Comparison> = comparisons;
    if !publication_state.is_final() {
        for c in &mut comparisons {
            for (_, d) in c.differences.iter_mut() {
                d.statement = preliminary_statement(&d.statement);
            }
        }
    }
    Summary {
        publication_state,
        redaction: None,
        kind: "cohort-report".to_owned(),
        report_format: REPORT_FORMAT,
        metrics_version: frozen.manifest.metrics_version,
        tool_version: cohort_core::TOOL_VERSION.to_owned(),
        manifest_sha256: frozen.manifest_sha256.clone(),
        cohort: config.name.clone(),
        generated_at: String::new(),
        simulated,
        method,
        publication,
        bootstrap: BootstrapInfo {
            algorithm: stats::ALGORITHM.to_owned(),
            draws,
            seed: stats::BOOTSTRAP_SEED,
            clusters: n_q as u64,
            interval: "percentile 95% (linear interpolation), draws where the rate is undefined left out".to_owned(),
        },
        questions,
        categories: config.categories.clone(),
        arms,
        comparisons,
        attempts_by_class: gathered.attempts_by_class.clone(),
        completions_by_hour: completions_by_hour(gathered, status.window_start_ms, config.window_hours),
        files: Vec::new(),
        notes,
        review,
    }
}

/// Whether the report may be published as final (seed 004: "No score may
/// be published until actual runs and independent human reviews are
/// complete"), and what is missing: runs without a final outcome, and,
/// where the cohort declares a human review, two reviewers' labels with
/// every disagreement adjudicated, and when `[review]` declares it, the
/// extraction check before scoring. Simulated arms or a simulated judge are
/// not actual runs, so such a report is never final.
pub fn publication_state(
    frozen: &FrozenCohort,
    status: &cohort_ledger::Status,
    simulated: &Simulated,
    review: Option<&crate::review::ReviewSummary>,
) -> PublicationState {
    let mut missing = Vec::new();
    let not_final = status.pending + status.leased;
    if not_final > 0 {
        missing.push(format!("{not_final} planned run(s) have no final outcome yet"));
    }
    if !simulated.arms.is_empty() || simulated.judge {
        missing.push("SIMULATED arms or judge: these are not actual runs".to_owned());
    }
    let declared_in_config = frozen.cohort.config.review.is_some();
    let check_declared = frozen.cohort.config.review.as_ref().and_then(|r| r.extraction_check) == Some(true);
    if declared_in_config || frozen.review_declared || review.is_some() {
        match review {
            None => missing.push(format!(
                "the cohort declares a human review ({}), but no reviewer's labels are imported",
                if declared_in_config { "[review] in cohort.toml" } else { "one was exported" }
            )),
            Some(r) => {
                if r.imported_reviewers.len() < 2 {
                    missing.push(format!(
                        "only {} of the 2 independent reviewers' labels are imported",
                        r.imported_reviewers.len()
                    ));
                }
                if r.unresolved_items > 0 {
                    missing.push(format!(
                        "{} review disagreement(s) await adjudication (no adjudicated review imported)",
                        r.unresolved_items
                    ));
                }
                if r.extraction_check.is_none() && check_declared {
                    missing.push(
                        "the cohort declares an extraction check before scoring ([review] extraction_check = true), but none was imported (`cohort review export DIR --extraction-checker NAME`)"
                            .to_owned(),
                    );
                }
            }
        }
    }
    PublicationState::from_missing(missing)
}

/// A comparison's statement while the report is preliminary: said as such.
pub(crate) fn preliminary_statement(statement: &str) -> String {
    format!("Preliminary (not for publication): {statement}")
}

/// An arm's costs, each kept apart and labelled (seed 004: "actual
/// marginal cost ... credits and subscription plan cost separately"):
/// the price-catalogue estimate and the actual charge over completed runs
/// (a total only in one currency), credits debited over every run that
/// reports them, plan and region by run.
#[derive(Debug, Clone, Default)]
struct CostSums {
    estimated: Money,
    actual: Money,
    credits_runs: u64,
    credits: f64,
    /// A credits value did not read as a number: no total.
    credits_unreadable: bool,
    plans: BTreeMap<String, u64>,
    regions: BTreeMap<String, u64>,
}

/// Known amounts and their total, per kind of cost.
#[derive(Debug, Clone, Default)]
struct Money {
    runs: u64,
    total: f64,
    currency: Option<String>,
    /// Two currencies: no total (never converted).
    mixed: bool,
    unknown: u64,
}

impl Money {
    fn add(&mut self, amount: Option<f64>, currency: Option<&String>) {
        let Some(amount) = amount else {
            self.unknown += 1;
            return;
        };
        self.runs += 1;
        self.total += amount;
        match (&self.currency, currency) {
            (None, Some(c)) if self.runs == 1 => self.currency = Some(c.clone()),
            (Some(a), Some(b)) if a == b => {}
            (None, None) => {}
            _ => self.mixed = true,
        }
    }

    fn total(&self) -> Option<f64> {
        (self.runs > 0 && !self.mixed).then_some(self.total)
    }
}

impl CostSums {
    fn add(&mut self, run: &RunView) {
        if run.outcome == "completed" {
            self.estimated.add(run.estimated_cost, run.estimated_cost_currency.as_ref());
            self.actual.add(run.actual_cost, run.actual_cost_currency.as_ref());
        }
        if let Some(credits) = &run.credits_debited {
            self.credits_runs += 1;
            match credits.trim().parse::<f64>() {
                Ok(c) if c.is_finite() => self.credits += c,
                _ => self.credits_unreadable = true,
            }
        }
        if let Some(plan) = &run.plan {
            *self.plans.entry(plan.clone()).or_default() += 1;
        }
        if let Some(region) = &run.region {
            *self.regions.entry(region.clone()).or_default() += 1;
        }
    }

    /// The cost fields of [`TimeCost`] (its time fields zero).
    fn time_cost(&self) -> TimeCost {
        TimeCost {
            estimated_cost_runs: self.estimated.runs,
            estimated_cost: self.estimated.total(),
            estimated_cost_currency: self.estimated.currency.clone().filter(|_| !self.estimated.mixed),
            unknown_estimated_cost_runs: self.estimated.unknown,
            actual_cost_runs: self.actual.runs,
            actual_cost: self.actual.total(),
            actual_cost_currency: self.actual.currency.clone().filter(|_| !self.actual.mixed),
            unknown_actual_cost_runs: self.actual.unknown,
            credits_runs: self.credits_runs,
            credits_debited: (self.credits_runs > 0 && !self.credits_unreadable).then_some(self.credits),
            plans: self.plans.clone(),
            regions: self.regions.clone(),
            ..TimeCost::default()
        }
    }
}

/// An arm's (or category's) source counts, with its distinct URLs.
fn source_counts(t: &crate::rates::SourceTally, unique: u64) -> SourceCounts {
    SourceCounts {
        cited: t.cited,
        unique,
        accessible: t.accessible,
        inaccessible: t.inaccessible,
        uncaptured: t.uncaptured,
    }
}

/// Distinct normalised URLs over an arm's scored outputs, every category.
fn unique_sources(gathered: &Gathered, arm: &str) -> u64 {
    let Some(by_category) = gathered.source_urls.get(arm) else { return 0 };
    let all: BTreeSet<&String> = by_category.values().flatten().collect();
    all.len() as u64
}

fn empty_interval(draws: u32) -> Interval {
    Interval { ci_low: None, ci_high: None, draws, undefined_draws: draws }
}

/// Every pair of arms (config order) that share a workflow.
fn comparison_pairs(config: &cohort_core::config::CohortConfig) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for a in 0..config.arms.len() {
        for b in a + 1..config.arms.len() {
            if config.arms[a].workflow == config.arms[b].workflow {
                pairs.push((a, b));
            }
        }
    }
    pairs
}

fn difference(
    a: &str,
    b: &str,
    metric: &str,
    estimand: &Estimand,
    interval: &Interval,
    questions: u64,
    pairs: u64,
) -> Difference {
    let value = estimand.point();
    let statement = match (value, interval.ci_low, interval.ci_high) {
        (None, ..) => format!(
            "{metric}: the difference is undefined ({} has no measured {metric} on the {pairs} completed pair(s))",
            if questions == 0 { "at least one arm" } else { "one arm" }
        ),
        (Some(v), Some(lo), Some(hi)) if lo <= 0.0 && hi >= 0.0 => format!(
            "{a} and {b} cannot be told apart on {metric}: the difference {} has a 95% interval [{}, {}] that contains 0",
            Signed(v),
            Signed(lo),
            Signed(hi)
        ),
        (Some(v), Some(lo), Some(hi)) => format!(
            "{a} is {} than {b} on {metric} by {} (95% interval [{}, {}], over {questions} question(s))",
            if v > 0.0 { "higher" } else { "lower" },
            Fixed(v.abs()),
            Signed(lo),
            Signed(hi)
        ),
        (Some(v), ..) => format!("{metric}: difference {}; no interval (no bootstrap draw defined it)", Signed(v)),
    };
    Difference {
        value,
        ci_low: value.and(interval.ci_low),
        ci_high: value.and(interval.ci_high),
        undefined_draws: interval.undefined_draws,
        questions,
        statement,
    }
}

/// The nearest-rank quantile of sorted values.
fn nearest_rank(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Completed runs per hour of the window, per arm.
fn completions_by_hour(
    gathered: &Gathered,
    window_start: Option<i64>,
    window_hours: u32,
) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let Some(start) = window_start else { return out };
    let ends: Vec<(&str, i64)> = gathered
        .runs
        .iter()
        .filter(|r| r.outcome == "completed")
        .filter_map(|r| Some((r.arm.as_str(), r.started_ms? + r.duration_ms.unwrap_or(0))))
        .collect();
    let last = ends.iter().map(|(_, e)| *e).max().unwrap_or(start);
    let hours = (((last - start).max(0) / 3_600_000) + 1).min(i64::from(window_hours.max(1))) as usize;
    let arms: BTreeSet<&str> = gathered.runs.iter().map(|r| r.arm.as_str()).collect();
    for arm in arms {
        out.insert(arm.to_owned(), vec![0; hours]);
    }
    for (arm, end) in ends {
        let h = (((end - start).max(0) / 3_600_000) as usize).min(hours - 1);
        if let Some(v) = out.get_mut(arm) {
            v[h] += 1;
        }
    }
    out
}
