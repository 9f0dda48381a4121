//! The review metrics of seed 004 ("Metrics and denominators", "Reviewer
//! disagreement"), from the imported labels:
//!
//! - **claim fidelity** = fully supported / all factual claims after the
//!   extraction check (split parts and added uncited claims in, claims
//!   marked not factual or merged out; unverifiable and uncited claims stay
//!   in; partially supported gets no credit);
//! - **citation precision** = supporting claim-citation pairs / all emitted
//!   pairs (identical pairs within one answer were exported once; broken,
//!   fabricated, inaccessible and irrelevant stay in the denominator; pairs
//!   of a claim finally marked not factual are not claim-citation pairs);
//! - **citation coverage** = factual claims with at least one supporting
//!   pair / all factual claims (a split part inherits its claim's pairs; an
//!   added claim has none);
//! - **uncertainty**: the 0/1/2 distribution and mean per arm, by group of
//!   the uncertainty key, and abstentions on answerable questions apart.
//!
//! The final label of an item is the one both reviewers gave, else the
//! adjudicator's; an item only one reviewer labelled (an added claim, a
//! split part) keeps that label unless adjudicated and is counted as such.
//! A disagreement without an adjudication leaves the rates it touches
//! unmeasured: a final figure is never made from an unresolved label.
//! Agreement is computed before adjudication with `cohort_core::agreement`.

use std::collections::{BTreeMap, BTreeSet};

use cohort_core::agreement::{Agreement, Weights, agreement};
use cohort_core::stats::{self, ClusterBootstrap, Estimand, Interval};
use serde::{Deserialize, Serialize};

use super::import::ClaimDecision;
use super::{CLAIM_LABELS, ItemKind, ReviewInput};
use crate::gather::FrozenCohort;
use crate::model::{Rate, RateStatus};
use crate::rates::ReviewTally;

/// Agreement of two raters, as `summary.json` keeps it: core's own
/// [`Agreement`], so its fields are defined once (rater A is the first
/// reviewer by id, rater B the second).
pub type AgreementView = Agreement;

/// Agreement before adjudication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewAgreement {
    /// The two reviewers compared (the first two imported, by id).
    pub reviewers: Vec<String>,
    /// Nominal kappa over claims both labelled with one of the five labels.
    pub claims: AgreementView,
    /// Claims where the reviewers' extraction decisions differ (one split,
    /// merged or marked not factual what the other labelled, or splits of
    /// different sizes).
    pub extraction_disagreements: u64,
    /// Pair support (yes/no), nominal.
    pub pairs: AgreementView,
    /// Uncertainty scores 0/1/2: nominal, linear and quadratic weights.
    pub uncertainty_nominal: AgreementView,
    pub uncertainty_linear: AgreementView,
    pub uncertainty_quadratic: AgreementView,
}

/// The 0/1/2 scores of a set of outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UncertaintyFigures {
    /// Outputs with a final score.
    pub outputs: u64,
    /// scores[s] = outputs with final score s.
    pub scores: [u64; 3],
    /// Mean score (a Rate: numerator the sum, denominator the outputs).
    pub mean: Rate,
    /// Outputs whose score awaits adjudication.
    pub unresolved: u64,
}

/// One arm's (or one arm-and-category's) review figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewFigures {
    /// Final label -> factual claims, all five labels present.
    pub labels: BTreeMap<String, u64>,
    pub factual_claims: u64,
    /// Factual claims only one reviewer labelled (added claims, parts of a
    /// split only one made).
    pub single_reviewer_claims: u64,
    /// Claims marked not factual or merged (excluded).
    pub excluded_claims: u64,
    pub covered_claims: u64,
    pub pairs: u64,
    pub supporting_pairs: u64,
    /// Reason -> non-supporting pairs.
    pub pair_reasons: BTreeMap<String, u64>,
    /// Items whose disagreement awaits adjudication.
    pub unresolved_claims: u64,
    pub unresolved_pairs: u64,
    /// The arm's (or arm-and-category's) `claim_fidelity_micro`,
    /// `citation_precision_micro` and `citation_coverage_micro` rates,
    /// copied here beside the counts they are made of.
    pub claim_fidelity: Rate,
    pub citation_precision: Rate,
    pub citation_coverage: Rate,
    pub uncertainty: UncertaintyFigures,
    /// By uncertainty-key group (`insufficient_evidence`, `disputed`,
    /// `answerable`, or `not_in_key`).
    pub uncertainty_by_group: BTreeMap<String, UncertaintyFigures>,
    /// Completed outputs on questions the key calls answerable, and how
    /// many of them every reviewer marked as an abstention.
    pub answerable_outputs: u64,
    pub abstentions_on_answerable: u64,
    /// Factual claims with no cited source finally labelled original
    /// (uncited, or citing only secondary or unlabelled sources), or whose
    /// missing original citation a reviewer flagged (seed 004: "flag the
    /// missing original citation").
    pub missing_original_citation: u64,
    /// Distinct cited sources of the reviewed pairs (per output), those
    /// finally only secondary, and those awaiting adjudication.
    pub reviewed_sources: u64,
    pub secondary_only_sources: u64,
    pub unresolved_sources: u64,
}

/// One arm's review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmReview {
    pub arm: String,
    pub figures: ReviewFigures,
    pub categories: BTreeMap<String, ReviewFigures>,
}

/// Everything the report says about human review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewSummary {
    pub exported_at: String,
    /// Reviewers of the export, and those whose labels were imported.
    pub reviewers: Vec<String>,
    pub imported_reviewers: Vec<String>,
    pub adjudicator: Option<String>,
    /// Per reviewer: label -> claims, before adjudication (both original
    /// ratings published), plus `not_factual`, `merged`, `split`, `added`.
    pub reviewer_counts: BTreeMap<String, BTreeMap<String, u64>>,
    /// `None` with fewer than two reviewers imported.
    pub agreement: Option<ReviewAgreement>,
    pub adjudicated_items: u64,
    pub unresolved_items: u64,
    pub arms: Vec<ArmReview>,
    pub notes: Vec<String>,
    /// Who checked the extraction before scoring and what the check did
    /// (docs/review.md "The extraction check"); `null`: the extraction was
    /// not independently checked (the scorers checked it while labelling).
    #[serde(default)]
    pub extraction_check: Option<super::check::CheckFigures>,
}

/// Per (arm, question) sums.
#[derive(Debug, Clone, Default)]
struct Cell {
    /// Outputs in the review (one uncertainty item each).
    outputs: u64,
    labels: BTreeMap<String, u64>,
    factual: u64,
    single: u64,
    excluded: u64,
    covered: u64,
    pairs: u64,
    supporting: u64,
    reasons: BTreeMap<String, u64>,
    unresolved_claims: u64,
    unresolved_pairs: u64,
    unc: [u64; 3],
    unc_by_group: BTreeMap<String, ([u64; 3], u64)>,
    unc_unresolved: u64,
    answerable: u64,
    abstained: u64,
    missing_original: u64,
    sources: u64,
    secondary_sources: u64,
    unresolved_sources: u64,
}

/// What the reviewers say of one cited source of one output, over its
/// pairs: original when any pair finally says so, else unresolved while a
/// disagreement on one awaits adjudication, else only secondary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SourceLabel {
    Secondary,
    Unresolved,
    Original,
}

impl Cell {
    /// What the review rates (`RateKind::ClaimFidelityMicro`...) are
    /// fractions of.
    fn tally(&self) -> ReviewTally {
        ReviewTally {
            outputs: self.outputs,
            factual: self.factual,
            fully: self.labels.get("fully_supported").copied().unwrap_or(0),
            covered: self.covered,
            pairs: self.pairs,
            supporting: self.supporting,
            unresolved_claims: self.unresolved_claims,
            unresolved_pairs: self.unresolved_pairs,
            sources: self.sources,
            secondary_sources: self.secondary_sources,
            unresolved_sources: self.unresolved_sources,
        }
    }

    fn add(&mut self, o: &Cell) {
        for (k, v) in &o.labels {
            *self.labels.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.reasons {
            *self.reasons.entry(k.clone()).or_default() += v;
        }
        for (k, (s, u)) in &o.unc_by_group {
            let e = self.unc_by_group.entry(k.clone()).or_default();
            (0..3).for_each(|i| e.0[i] += s[i]);
            e.1 += u;
        }
        self.outputs += o.outputs;
        self.factual += o.factual;
        self.single += o.single;
        self.excluded += o.excluded;
        self.covered += o.covered;
        self.pairs += o.pairs;
        self.supporting += o.supporting;
        self.unresolved_claims += o.unresolved_claims;
        self.unresolved_pairs += o.unresolved_pairs;
        (0..3).for_each(|i| self.unc[i] += o.unc[i]);
        self.unc_unresolved += o.unc_unresolved;
        self.answerable += o.answerable;
        self.abstained += o.abstained;
        self.missing_original += o.missing_original;
        self.sources += o.sources;
        self.secondary_sources += o.secondary_sources;
        self.unresolved_sources += o.unresolved_sources;
    }
}

/// A claim unit's final state.
enum Final {
    Label { label: String, single: bool },
    Excluded { not_factual: bool },
    Unresolved,
}

/// The final units of every claim item (its label, its split parts'
/// labels, excluded, or unresolved), with the labels each reviewer gave
/// before adjudication and what deciding them counted: the one place the
/// rule "agreed label, else the adjudicator's" lives, used by the report's
/// review metrics and by `gold_labels`.
struct ClaimUnits<'a> {
    units: BTreeMap<&'a str, Vec<Final>>,
    claim_a: Vec<usize>,
    claim_b: Vec<usize>,
    adjudicated: u64,
    extraction_disagreements: u64,
}

fn claim_units<'a>(
    input: &'a ReviewInput,
    ra: Option<&super::import::ReviewerLabels>,
    rb: Option<&super::import::ReviewerLabels>,
    adj: &Decisions,
) -> ClaimUnits<'a> {
    let (mut claim_a, mut claim_b) = (Vec::new(), Vec::new());
    let mut extraction_disagreements = 0u64;
    let mut adjudicated_used = 0u64;
    let label_index = |l: &str| CLAIM_LABELS.iter().position(|x| *x == l);

    // Claim items: final units, and which claim items are finally excluded
    // as not factual (their pairs are not claim-citation pairs) or covered.
    let mut claim_units: BTreeMap<&'a str, Vec<Final>> = BTreeMap::new();
    for item in input.index.items.iter().filter(|i| i.kind == ItemKind::Claim) {
        let id = item.item_id.as_str();
        let da = ra.and_then(|r| r.claims.get(id));
        let db = rb.and_then(|r| r.claims.get(id));
        let adjudicated = |unit: &str| -> Option<Final> {
            let (label, ..) = adj.get(unit)?;
            Some(match label.as_str() {
                "not_factual" => Final::Excluded { not_factual: true },
                "merged" => Final::Excluded { not_factual: false },
                l => Final::Label { label: l.to_owned(), single: false },
            })
        };
        let parts_of = |d: &ClaimDecision, single: bool| -> Vec<Final> {
            match d {
                ClaimDecision::Split(parts) => parts
                    .iter()
                    .enumerate()
                    .map(|(k, (_, l, _))| {
                        adjudicated(&format!("{id}.{}", k + 1)).unwrap_or(Final::Label { label: l.clone(), single })
                    })
                    .collect(),
                ClaimDecision::Label { label, .. } => vec![Final::Label { label: label.clone(), single }],
                ClaimDecision::NotFactual(_) => vec![Final::Excluded { not_factual: true }],
                ClaimDecision::Merged(_) => vec![Final::Excluded { not_factual: false }],
            }
        };
        let units: Vec<Final> = match (da, db) {
            (Some(ClaimDecision::Label { label: la, .. }), Some(ClaimDecision::Label { label: lb, .. })) => {
                if let (Some(a), Some(b)) = (label_index(la), label_index(lb)) {
                    claim_a.push(a);
                    claim_b.push(b);
                }
                if la == lb {
                    vec![Final::Label { label: la.clone(), single: false }]
                } else if let Some(f) = adjudicated(id) {
                    adjudicated_used += 1;
                    vec![f]
                } else {
                    vec![Final::Unresolved]
                }
            }
            (Some(ClaimDecision::Split(pa)), Some(ClaimDecision::Split(pb))) if pa.len() == pb.len() => pa
                .iter()
                .zip(pb)
                .enumerate()
                .map(|(k, ((_, la, _), (_, lb, _)))| {
                    if let (Some(a), Some(b)) = (label_index(la), label_index(lb)) {
                        claim_a.push(a);
                        claim_b.push(b);
                    }
                    if la == lb {
                        Final::Label { label: la.clone(), single: false }
                    } else if let Some(f) = adjudicated(&format!("{id}.{}", k + 1)) {
                        adjudicated_used += 1;
                        f
                    } else {
                        Final::Unresolved
                    }
                })
                .collect(),
            (Some(a), Some(b)) => {
                let excluded = |d: &ClaimDecision| matches!(d, ClaimDecision::NotFactual(_) | ClaimDecision::Merged(_));
                if excluded(a) && excluded(b) {
                    let nf = matches!(a, ClaimDecision::NotFactual(_)) && matches!(b, ClaimDecision::NotFactual(_));
                    vec![Final::Excluded { not_factual: nf }]
                } else {
                    extraction_disagreements += 1;
                    match adj.get(id).map(|(l, ..)| l.as_str()) {
                        Some(choice) if choice.starts_with("split:") => {
                            adjudicated_used += 1;
                            let who = &choice["split:".len()..];
                            let chosen = if ra.is_some_and(|r| r.reviewer == who) { a } else { b };
                            parts_of(chosen, true)
                        }
                        Some(_) => {
                            adjudicated_used += 1;
                            adjudicated(id).into_iter().collect()
                        }
                        None => vec![Final::Unresolved],
                    }
                }
            }
            (Some(d), None) | (None, Some(d)) => parts_of(d, true),
            (None, None) => Vec::new(),
        };
        claim_units.insert(id, units);
    }
    ClaimUnits { units: claim_units, claim_a, claim_b, adjudicated: adjudicated_used, extraction_disagreements }
}

/// The adjudicator's decisions: item (or unit) id -> (final label, reason,
/// rationale).
type Decisions = BTreeMap<String, (String, String, String)>;

/// The imported reviewers by id (agreement compares the first two), and
/// the adjudicator's decisions (none when nothing was adjudicated).
fn reviewers_and_adjudication(input: &ReviewInput) -> (Vec<&super::import::ReviewerLabels>, &Decisions) {
    static NONE: Decisions = BTreeMap::new();
    let mut reviewers: Vec<&super::import::ReviewerLabels> = input.reviewers.iter().collect();
    reviewers.sort_by(|a, b| a.reviewer.cmp(&b.reviewer));
    (reviewers, input.adjudication.as_ref().map_or(&NONE, |a| &a.decisions))
}

/// One claim's final human label, as calibration's gold: from the items
/// with one final label (agreed, adjudicated, or the only reviewer's), not
/// split, not excluded, not unresolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoldClaim {
    pub run_id: String,
    /// The claim's id in the run's score (and in judging passes).
    pub claim_id: u32,
    /// One of the five seed-004 labels.
    pub label: String,
}

/// The final claim labels of an imported review, for `cohort calibrate`.
pub fn gold_labels(input: &ReviewInput) -> Vec<GoldClaim> {
    let (reviewers, adj) = reviewers_and_adjudication(input);
    let units = claim_units(input, reviewers.first().copied(), reviewers.get(1).copied(), adj).units;
    input
        .index
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Claim)
        .filter_map(|item| match (units.get(item.item_id.as_str()).map(Vec::as_slice), item.claim_id) {
            (Some([Final::Label { label, .. }]), Some(claim_id)) => {
                Some(GoldClaim { run_id: item.run_id.clone(), claim_id, label: label.clone() })
            }
            _ => None,
        })
        .collect()
}

/// What the review gives a report: its section, and per arm and question
/// the figures the review rates are fractions of (`compute::summarise`
/// computes those rates with every other [`crate::rates::RateKind`], on the
/// same draws, and copies them into the section's figures), and the final
/// decisions as the lines of `review.jsonl`.
#[derive(Debug, Clone)]
pub struct ReviewParts {
    pub summary: ReviewSummary,
    /// `tallies[arm][question]`, arms and questions in the frozen order.
    pub(crate) tallies: Vec<Vec<ReviewTally>>,
    /// The lines of `review.jsonl` (docs/report.md), in export order.
    pub lines: Vec<serde_json::Value>,
}

/// The review section of a report; `None` when no review was imported.
pub fn summarise_review<'a>(frozen: &FrozenCohort, input: Option<&'a ReviewInput>, draws: u32) -> Option<ReviewParts> {
    let input = input?;
    let mut lines: Vec<serde_json::Value> = Vec::new();
    let cohort = &frozen.cohort;
    let questions: Vec<&str> = cohort.questions.iter().map(|q| q.id.as_str()).collect();
    let q_index: BTreeMap<&str, usize> = questions.iter().enumerate().map(|(i, q)| (*q, i)).collect();
    let arm_index: BTreeMap<&str, usize> =
        cohort.config.arms.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
    let key: BTreeMap<&str, &cohort_core::uncertainty_key::UncertaintyEntry> =
        cohort.uncertainty_key.iter().flatten().map(|e| (e.question_id.as_str(), e)).collect();
    let mut cells = vec![vec![Cell::default(); questions.len()]; cohort.config.arms.len()];

    let (reviewers, adj) = reviewers_and_adjudication(input);
    let (ra, rb) = (reviewers.first().copied(), reviewers.get(1).copied());
    let mut adjudicated_used = 0u64;
    let mut unresolved_total = 0u64;

    let (mut pair_a, mut pair_b) = (Vec::new(), Vec::new());
    let (mut unc_a, mut unc_b) = (Vec::new(), Vec::new());
    let ClaimUnits { units: claim_units, claim_a, claim_b, adjudicated, extraction_disagreements } =
        claim_units(input, ra, rb, adj);
    adjudicated_used += adjudicated;

    // Pairs. A pair belongs to its claim, or, for a claim finally merged
    // into another (a repeated paraphrase), to the claim it repeats: a pair
    // of it citing a source that claim already cites is the same pair and
    // counts once (seed 004). A split claim's parts are atomic claims, each
    // with the citation attached: one verdict per part. Pairs of claims
    // finally marked not factual are not claim-citation pairs.
    let finally = |id: &str, not_factual: bool| {
        claim_units.get(id).is_some_and(|u| {
            !u.is_empty() && u.iter().all(|f| matches!(f, Final::Excluded { not_factual: nf } if *nf == not_factual))
        })
    };
    let owner_of = |claim: &'a str| -> &'a str {
        let mut at = claim;
        for _ in 0..8 {
            if !finally(at, false) {
                break;
            }
            let target = reviewers.iter().find_map(|r| match r.claims.get(at) {
                Some(ClaimDecision::Merged(t)) => Some(t.as_str()),
                _ => None,
            });
            match target {
                Some(t) if t != claim => at = t,
                _ => break,
            }
        }
        at
    };
    let pair_items: Vec<&super::ExportedItem> = {
        let (mut own, mut merged): (Vec<_>, Vec<_>) = input
            .index
            .items
            .iter()
            .filter(|i| i.kind == ItemKind::Pair)
            .partition(|i| !finally(i.claim_item.as_deref().unwrap_or_default(), false));
        own.append(&mut merged);
        own
    };
    let mut seen: BTreeSet<(&str, String)> = BTreeSet::new();
    let mut covered_units: BTreeSet<(&str, usize)> = BTreeSet::new();
    // Claim units with a cited source finally labelled original.
    let mut original_cited: BTreeSet<&str> = BTreeSet::new();
    let mut sources: BTreeMap<(usize, usize, &str, String), SourceLabel> = BTreeMap::new();
    for item in pair_items {
        let (Some(&a), Some(&q)) = (arm_index.get(item.arm.as_str()), q_index.get(item.question_id.as_str())) else {
            continue;
        };
        let claim = item.claim_item.as_deref().unwrap_or_default();
        if finally(claim, true) {
            continue;
        }
        let owner = owner_of(claim);
        let source = item.url.clone().unwrap_or_else(|| format!("[{}]", item.citation.unwrap_or_default()));
        let duplicate = !seen.insert((owner, source.clone()));
        let id = item.item_id.as_str();
        // The pair's parts: one per final unit of its own (unmerged) claim.
        let parts = if owner == claim { claim_units.get(claim).map_or(1, Vec::len).max(1) } else { 1 };
        let split_by = |r: &super::import::ReviewerLabels| matches!(r.claims.get(claim), Some(ClaimDecision::Split(p)) if p.len() == parts);

        // Only secondary? One label per pair, whatever its parts.
        let sa = ra.and_then(|r| r.pairs.get(id)).map(|v| v.secondary);
        let sb = rb.and_then(|r| r.pairs.get(id)).map(|v| v.secondary);
        let secondary_unit = format!("{id}.secondary");
        let secondary = match (sa, sb) {
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(_), Some(_)) => adj.get(&secondary_unit).map(|(l, ..)| {
                adjudicated_used += 1;
                l == "yes"
            }),
            (Some(x), None) | (None, Some(x)) => Some(x),
            (None, None) => None,
        };
        let label = match secondary {
            Some(true) => SourceLabel::Secondary,
            Some(false) => SourceLabel::Original,
            None => {
                unresolved_total += 1;
                SourceLabel::Unresolved
            }
        };
        let entry = sources.entry((a, q, item.output.as_str(), source.clone())).or_insert(label);
        *entry = (*entry).max(label);
        if secondary == Some(false) {
            original_cited.insert(owner);
        }

        for k in 0..parts {
            let verdict_of = |r: &'a super::import::ReviewerLabels| -> Option<&'a (bool, String)> {
                let v = r.pairs.get(id)?;
                if parts == 1 {
                    v.whole()
                } else if split_by(r) {
                    v.parts.get(k)
                } else {
                    None
                }
            };
            let unit = if parts == 1 { id.to_owned() } else { format!("{id}.{}", k + 1) };
            let (pa, pb) = (ra.and_then(verdict_of), rb.and_then(verdict_of));
            if let (Some(x), Some(y)) = (pa, pb) {
                pair_a.push(usize::from(!x.0));
                pair_b.push(usize::from(!y.0));
            }
            let decided: Option<(bool, String)> = match (pa, pb) {
                (Some(x), Some(y)) if x == y => Some(x.clone()),
                (Some(x), Some(y)) if x.0 == y.0 => {
                    // Both "no", reasons differ: the adjudicator names the reason.
                    match adj.get(&unit) {
                        Some((l, r, _)) => {
                            adjudicated_used += 1;
                            Some((l == "yes", r.clone()))
                        }
                        None => Some((false, "reviewers differ on the reason".into())),
                    }
                }
                (Some(_), Some(_)) => adj.get(&unit).map(|(l, r, _)| {
                    adjudicated_used += 1;
                    (l == "yes", if l == "yes" { String::new() } else { r.clone() })
                }),
                (Some(x), None) | (None, Some(x)) => Some(x.clone()),
                (None, None) => None,
            };
            let status = match (&decided, duplicate) {
                (_, true) => "duplicate",
                (None, _) => "unresolved",
                (Some((true, _)), _) => "supports",
                (Some((false, _)), _) => "does_not_support",
            };
            lines.push(serde_json::json!({
                "kind": "pair", "item_id": item.item_id, "part": (parts > 1).then_some(k + 1), "run_id": item.run_id,
                "arm": item.arm, "question_id": item.question_id, "claim_item": item.claim_item,
                "counted_for": owner, "citation": item.citation, "url": item.url, "status": status,
                "reason": decided.as_ref().filter(|d| !d.0).map(|d| d.1.clone()),
                "secondary": secondary,
                "reviewers": ([ra, rb].iter().flatten().map(|r| (r.reviewer.clone(), r.pairs.get(id).map(|v| serde_json::json!({
                    "supports": v.parts.iter().map(|p| p.0).collect::<Vec<_>>(),
                    "reason": v.parts.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
                    "secondary": v.secondary})))).collect::<BTreeMap<_, _>>()),
                "adjudication": adj.get(&unit).map(|(l, r, why)| serde_json::json!({"final": l, "reason": r, "rationale": why})),
                "secondary_adjudication": adj.get(&secondary_unit).map(|(l, _, why)| serde_json::json!({"final": l, "rationale": why})),
            }));
            if duplicate {
                continue;
            }
            let cell = &mut cells[a][q];
            cell.pairs += 1;
            match decided {
                Some((true, _)) => {
                    cell.supporting += 1;
                    // A merged claim's other source covers the claim it
                    // repeats when that claim is one unit.
                    if owner == claim || claim_units.get(owner).is_some_and(|u| u.len() == 1) {
                        covered_units.insert((owner, if owner == claim { k } else { 0 }));
                    }
                }
                Some((false, reason)) => *cell.reasons.entry(reason).or_default() += 1,
                None => {
                    cell.unresolved_pairs += 1;
                    unresolved_total += 1;
                }
            }
        }
    }
    for ((a, q, ..), label) in &sources {
        let cell = &mut cells[*a][*q];
        cell.sources += 1;
        match label {
            SourceLabel::Secondary => cell.secondary_sources += 1,
            SourceLabel::Unresolved => cell.unresolved_sources += 1,
            SourceLabel::Original => {}
        }
    }

    // Claim units into cells.
    for item in input.index.items.iter().filter(|i| i.kind == ItemKind::Claim) {
        let (Some(&a), Some(&q)) = (arm_index.get(item.arm.as_str()), q_index.get(item.question_id.as_str())) else {
            continue;
        };
        let flagged = reviewers.iter().any(|r| r.missing_original.contains(&item.item_id));
        let missing_original = flagged || !original_cited.contains(item.item_id.as_str());
        for (k, unit) in claim_units.get(item.item_id.as_str()).into_iter().flatten().enumerate() {
            let covered = covered_units.contains(&(item.item_id.as_str(), k));
            let (status, label, single) = match unit {
                Final::Label { label, single } => ("labelled", Some(label.as_str()), *single),
                Final::Excluded { not_factual: true } => ("excluded_not_factual", None, false),
                Final::Excluded { not_factual: false } => ("excluded_merged", None, false),
                Final::Unresolved => ("unresolved", None, false),
            };
            let decision = |r: &&super::import::ReviewerLabels| {
                let d = r.claims.get(&item.item_id)?;
                Some(match d {
                    ClaimDecision::Label { label, reason } => serde_json::json!({"label": label, "reason": reason}),
                    ClaimDecision::NotFactual(why) => serde_json::json!({"label": "not_factual", "reason": why}),
                    ClaimDecision::Merged(with) => serde_json::json!({"label": "merged", "merge_with": with}),
                    ClaimDecision::Split(parts) => {
                        serde_json::json!({"split": parts.iter().map(|(t, l, r)| serde_json::json!({"text": t, "label": l, "reason": r})).collect::<Vec<_>>()})
                    }
                })
            };
            lines.push(serde_json::json!({
                "kind": "claim", "item_id": item.item_id, "unit": k + 1, "run_id": item.run_id, "arm": item.arm,
                "question_id": item.question_id, "claim_id": item.claim_id, "status": status, "label": label,
                "single_reviewer": single, "covered": covered && label.is_some(),
                "missing_original_citation": label.is_some() && missing_original,
                "reviewers": ([ra, rb].iter().flatten().map(|r| (r.reviewer.clone(), decision(r))).collect::<BTreeMap<_, _>>()),
                "adjudication": adj.get(&item.item_id).map(|(l, r, why)| serde_json::json!({"final": l, "reason": r, "rationale": why})),
            }));
            let cell = &mut cells[a][q];
            match unit {
                Final::Label { label, single } => {
                    cell.factual += 1;
                    *cell.labels.entry(label.clone()).or_default() += 1;
                    cell.single += u64::from(*single);
                    cell.covered += u64::from(covered);
                    cell.missing_original += u64::from(missing_original);
                }
                Final::Excluded { .. } => cell.excluded += 1,
                Final::Unresolved => {
                    cell.factual += 1;
                    cell.unresolved_claims += 1;
                    unresolved_total += 1;
                }
            }
        }
    }
    // Added claims: one reviewer's each, with the pairs of the citations
    // they carry (their verdicts that reviewer's).
    let by_output: BTreeMap<&str, &super::ExportedItem> =
        input.index.items.iter().filter(|i| i.kind == ItemKind::Uncertainty).map(|i| (i.output.as_str(), i)).collect();
    for r in &reviewers {
        for added in &r.added {
            let Some(item) = by_output.get(added.output.as_str()) else { continue };
            let (Some(&a), Some(&q)) = (arm_index.get(item.arm.as_str()), q_index.get(item.question_id.as_str()))
            else {
                continue;
            };
            let cell = &mut cells[a][q];
            let label = match adj.get(&added.unit) {
                Some((l, ..)) => {
                    adjudicated_used += 1;
                    l.clone()
                }
                None => added.label.clone(),
            };
            let excluded = label == "not_factual" || label == "merged";
            let covered = !excluded && added.pairs.iter().any(|p| p.1);
            if !excluded {
                for (n, supports, reason) in &added.pairs {
                    lines.push(serde_json::json!({
                        "kind": "pair", "item_id": format!("{}/{n}", added.unit), "run_id": item.run_id, "arm": item.arm,
                        "question_id": item.question_id, "claim_item": added.unit, "counted_for": added.unit,
                        "citation": n, "url": item.citations.get(n),
                        "status": if *supports { "supports" } else { "does_not_support" },
                        "reason": (!supports).then_some(reason), "added_by": r.reviewer,
                    }));
                    cell.pairs += 1;
                    if *supports {
                        cell.supporting += 1;
                    } else {
                        *cell.reasons.entry(reason.clone()).or_default() += 1;
                    }
                }
            }
            let missing_original = !excluded && (added.missing_original || added.pairs.is_empty());
            lines.push(serde_json::json!({
                "kind": "claim", "item_id": added.unit, "unit": 1, "run_id": item.run_id, "arm": item.arm,
                "question_id": item.question_id, "claim_id": null, "added_by": r.reviewer,
                "status": if excluded { "excluded_not_factual" } else { "labelled" },
                "label": (!excluded).then_some(label.as_str()), "single_reviewer": true, "covered": covered,
                "missing_original_citation": missing_original,
                "reviewers": BTreeMap::from([(r.reviewer.clone(), serde_json::json!({"label": added.label, "reason": added.reason, "text": added.text}))]),
                "adjudication": adj.get(&added.unit).map(|(l, rr, why)| serde_json::json!({"final": l, "reason": rr, "rationale": why})),
            }));
            if excluded {
                cell.excluded += 1;
            } else {
                cell.factual += 1;
                cell.single += 1;
                cell.covered += u64::from(covered);
                cell.missing_original += u64::from(missing_original);
                *cell.labels.entry(label).or_default() += 1;
            }
        }
    }
    // Claims the extraction check took out of the factual set: excluded,
    // and published as such (their pairs, for a merge, are the claim's it
    // repeats, exported with it).
    for x in input.index.extraction_check.iter().flat_map(|c| &c.excluded) {
        let (Some(&a), Some(&q)) = (arm_index.get(x.arm.as_str()), q_index.get(x.question_id.as_str())) else {
            continue;
        };
        let not_factual = x.decision == "not_factual";
        lines.push(serde_json::json!({
            "kind": "claim", "item_id": x.item_id, "unit": 1, "run_id": x.run_id, "arm": x.arm,
            "question_id": x.question_id, "claim_id": x.claim_id,
            "status": if not_factual { "excluded_not_factual" } else { "excluded_merged" },
            "label": null, "single_reviewer": false, "covered": false, "missing_original_citation": false,
            "extraction_check": {"decision": x.decision, "merged_into": x.merged_into, "reason": x.reason},
        }));
        cells[a][q].excluded += 1;
    }
    // Uncertainty per output.
    for item in input.index.items.iter().filter(|i| i.kind == ItemKind::Uncertainty) {
        let (Some(&a), Some(&q)) = (arm_index.get(item.arm.as_str()), q_index.get(item.question_id.as_str())) else {
            continue;
        };
        let ua = ra.and_then(|r| r.uncertainty.get(&item.item_id));
        let ub = rb.and_then(|r| r.uncertainty.get(&item.item_id));
        if let (Some(x), Some(y)) = (ua, ub) {
            unc_a.push(usize::from(x.0));
            unc_b.push(usize::from(y.0));
        }
        let score = match (ua, ub) {
            (Some(x), Some(y)) if x.0 == y.0 => Some(x.0),
            (Some(_), Some(_)) => adj.get(&item.item_id).and_then(|(l, ..)| {
                adjudicated_used += 1;
                l.parse::<u8>().ok()
            }),
            (Some(x), None) | (None, Some(x)) => Some(x.0),
            (None, None) => None,
        };
        let group = key.get(item.question_id.as_str()).map_or("not_in_key", |e| e.group()).to_owned();
        let entry = key.get(item.question_id.as_str()).copied();
        let marks: Vec<bool> = [ua, ub].into_iter().flatten().map(|x| x.1).collect();
        // An abstention on an answerable question is counted apart and kept
        // out of the 0/1/2 distribution and mean (seed 004: declining to
        // answer is not calibration); one rule, the key's own.
        let abstention = cohort_core::uncertainty_key::treatment(entry, &marks)
            == cohort_core::uncertainty_key::UncertaintyTreatment::AnswerableAbstention;
        let status = match (abstention, score) {
            (true, _) => "answerable_abstention",
            (false, Some(_)) => "scored",
            (false, None) => "unresolved",
        };
        lines.push(serde_json::json!({
            "kind": "output", "item_id": item.item_id, "run_id": item.run_id, "arm": item.arm,
            "question_id": item.question_id, "output": item.output, "uncertainty_group": group,
            "status": status, "uncertainty": score,
            "reviewers": ([ra, rb].iter().flatten().map(|r| (r.reviewer.clone(), r.uncertainty.get(&item.item_id).map(|(sc, ab)| serde_json::json!({"score": sc, "abstained": ab})))).collect::<BTreeMap<_, _>>()),
            "adjudication": adj.get(&item.item_id).map(|(l, rr, why)| serde_json::json!({"final": l, "reason": rr, "rationale": why})),
        }));
        let cell = &mut cells[a][q];
        cell.outputs += 1;
        if entry.is_some_and(|e| e.answerable) {
            cell.answerable += 1;
        }
        if abstention {
            cell.abstained += 1;
            continue;
        }
        let g = cell.unc_by_group.entry(group).or_default();
        match score {
            Some(s) => {
                cell.unc[usize::from(s.min(2))] += 1;
                g.0[usize::from(s.min(2))] += 1;
            }
            None => {
                cell.unc_unresolved += 1;
                g.1 += 1;
                unresolved_total += 1;
            }
        }
    }

    // Rates on the report's draws (same seed and count, so the same resamples).
    let categories = &cohort.config.categories;
    let q_category: Vec<&str> = cohort.questions.iter().map(|q| q.category.as_str()).collect();
    let mut estimands = Vec::new();
    let mut scopes: Vec<(usize, Option<usize>, Cell)> = Vec::new();
    for (a, arm_cells) in cells.iter().enumerate() {
        for c in std::iter::once(None).chain((0..categories.len()).map(Some)) {
            let masked: Vec<Cell> = arm_cells
                .iter()
                .zip(&q_category)
                .map(|(cell, qc)| match c {
                    Some(ci) if *qc != categories[ci] => Cell::default(),
                    _ => cell.clone(),
                })
                .collect();
            let v = |f: &dyn Fn(&Cell) -> (u64, u64)| -> Estimand {
                let (n, d): (Vec<f64>, Vec<f64>) = masked.iter().map(f).map(|(n, d)| (n as f64, d as f64)).unzip();
                Estimand::ratio(n, d)
            };
            // The claim and pair rates are RateKinds (compute.rs); the
            // uncertainty mean is the review's own.
            estimands.push(v(&|c| (c.unc[1] + 2 * c.unc[2], c.unc.iter().sum())));
            let mut total = Cell::default();
            masked.iter().for_each(|m| total.add(m));
            scopes.push((a, c, total));
        }
    }
    let intervals = if questions.is_empty() {
        vec![Interval { ci_low: None, ci_high: None, draws, undefined_draws: draws }; estimands.len()]
    } else {
        ClusterBootstrap { clusters: questions.len(), draws, seed: stats::BOOTSTRAP_SEED }.intervals(&estimands)
    };
    let mut arms: Vec<ArmReview> = cohort
        .config
        .arms
        .iter()
        .map(|arm| ArmReview {
            arm: arm.id.clone(),
            figures: figures(&Cell::default(), &[], &[]),
            categories: BTreeMap::new(),
        })
        .collect();
    for (slot, (a, c, total)) in scopes.iter().enumerate() {
        let f = figures(total, &estimands[slot..slot + 1], &intervals[slot..slot + 1]);
        match c {
            None => arms[*a].figures = f,
            Some(ci) => {
                arms[*a].categories.insert(categories[*ci].clone(), f);
            }
        }
    }

    let view = |labels: Vec<String>, a: &[usize], b: &[usize], w: Weights| agreement(&labels, a, b, w);
    let five: Vec<String> = CLAIM_LABELS.iter().map(|s| (*s).to_owned()).collect();
    let scores: Vec<String> = ["0", "1", "2"].iter().map(|s| (*s).to_owned()).collect();
    let agreement = match (ra, rb) {
        (Some(x), Some(y)) => Some(ReviewAgreement {
            reviewers: vec![x.reviewer.clone(), y.reviewer.clone()],
            claims: view(five, &claim_a, &claim_b, Weights::None),
            extraction_disagreements,
            pairs: view(vec!["yes".into(), "no".into()], &pair_a, &pair_b, Weights::None),
            uncertainty_nominal: view(scores.clone(), &unc_a, &unc_b, Weights::None),
            uncertainty_linear: view(scores.clone(), &unc_a, &unc_b, Weights::Linear),
            uncertainty_quadratic: view(scores, &unc_a, &unc_b, Weights::Quadratic),
        }),
        _ => None,
    };
    let mut reviewer_counts = BTreeMap::new();
    for r in &reviewers {
        let mut counts: BTreeMap<String, u64> = CLAIM_LABELS
            .iter()
            .map(|l| ((*l).to_owned(), 0))
            .chain(["not_factual", "merged", "split", "added"].map(|k| (k.to_owned(), 0)))
            .collect();
        for d in r.claims.values() {
            match d {
                ClaimDecision::Label { label, .. } => *counts.entry(label.clone()).or_default() += 1,
                ClaimDecision::NotFactual(_) => *counts.entry("not_factual".into()).or_default() += 1,
                ClaimDecision::Merged(_) => *counts.entry("merged".into()).or_default() += 1,
                ClaimDecision::Split(parts) => {
                    *counts.entry("split".into()).or_default() += 1;
                    for (_, l, _) in parts {
                        *counts.entry(l.clone()).or_default() += 1;
                    }
                }
            }
        }
        for added in &r.added {
            *counts.entry("added".into()).or_default() += 1;
            *counts.entry(added.label.clone()).or_default() += 1;
        }
        reviewer_counts.insert(r.reviewer.clone(), counts);
    }
    let mut notes = Vec::new();
    if reviewers.len() < 2 {
        notes.push(format!(
            "only {} reviewer's labels are imported: seed 004 asks for two independent reviewers; agreement is not computed and every label counts as one reviewer's",
            reviewers.len()
        ));
    }
    if reviewers.len() > 2 {
        notes.push("agreement compares the first two reviewers by id; the others' labels are kept but not used".into());
    }
    if unresolved_total > 0 {
        notes.push(format!(
            "{unresolved_total} disagreement(s) await adjudication: the rates they touch are unmeasured until `cohort review import` receives the adjudication"
        ));
    }
    let extraction_check = input.index.extraction_check.as_ref().map(|c| c.figures.clone());
    if extraction_check.is_none() {
        notes.push(
            "extraction not independently checked: no person other than the scorers checked the claim extraction before scoring (seed 004); the scorers checked it while labelling".into(),
        );
    }
    let tallies = cells.iter().map(|arm| arm.iter().map(Cell::tally).collect()).collect();
    let summary = ReviewSummary {
        exported_at: input.index.exported_at.clone(),
        reviewers: input.index.reviewers.clone(),
        imported_reviewers: reviewers.iter().map(|r| r.reviewer.clone()).collect(),
        adjudicator: input.adjudication.as_ref().map(|a| a.adjudicator.clone()),
        reviewer_counts,
        agreement,
        adjudicated_items: adjudicated_used,
        unresolved_items: unresolved_total,
        arms,
        notes,
        extraction_check,
    };
    Some(ReviewParts { summary, tallies, lines })
}

fn figures(t: &Cell, estimands: &[Estimand], intervals: &[Interval]) -> ReviewFigures {
    let mut labels: BTreeMap<String, u64> = CLAIM_LABELS.iter().map(|l| ((*l).to_owned(), 0)).collect();
    for (k, v) in &t.labels {
        *labels.entry(k.clone()).or_default() += v;
    }
    let rate = |i: usize, num: u64, den: u64, none: &str, unresolved: u64| -> Rate {
        let (estimand, interval) = (estimands.get(i), intervals.get(i));
        let (status, reason) = if den == 0 {
            (RateStatus::NotApplicable, Some(none.to_owned()))
        } else if unresolved > 0 {
            (RateStatus::Unmeasured, Some(format!("{unresolved} disagreement(s) await adjudication")))
        } else {
            (RateStatus::Measured, None)
        };
        let value = (status == RateStatus::Measured).then(|| estimand.and_then(Estimand::point)).flatten();
        Rate {
            value,
            numerator: num as f64,
            denominator: den as f64,
            ci_low: value.and(interval.and_then(|i| i.ci_low)),
            ci_high: value.and(interval.and_then(|i| i.ci_high)),
            undefined_draws: interval.map_or(0, |i| i.undefined_draws),
            status,
            reason,
            questions: None,
        }
    };
    // Filled in by `compute::summarise` from the rates of the same name.
    let by_report = || rate(usize::MAX, 0, 0, "computed with the report's rates", 0);
    let unc = |scores: [u64; 3], unresolved: u64, bootstrap: bool| {
        let n: u64 = scores.iter().sum();
        let sum = scores[1] + 2 * scores[2];
        let mut mean = if bootstrap {
            rate(0, sum, n, "no completed output was scored", unresolved)
        } else {
            rate(usize::MAX, sum, n, "no completed output was scored", unresolved)
        };
        if !bootstrap && mean.status == RateStatus::Measured {
            mean.value = Some(sum as f64 / n as f64);
        }
        UncertaintyFigures { outputs: n, scores, mean, unresolved }
    };
    ReviewFigures {
        claim_fidelity: by_report(),
        citation_precision: by_report(),
        citation_coverage: by_report(),
        uncertainty: unc(t.unc, t.unc_unresolved, true),
        uncertainty_by_group: t.unc_by_group.iter().map(|(g, (s, u))| (g.clone(), unc(*s, *u, false))).collect(),
        labels,
        factual_claims: t.factual,
        single_reviewer_claims: t.single,
        excluded_claims: t.excluded,
        covered_claims: t.covered,
        pairs: t.pairs,
        supporting_pairs: t.supporting,
        pair_reasons: t.reasons.clone(),
        unresolved_claims: t.unresolved_claims,
        unresolved_pairs: t.unresolved_pairs,
        answerable_outputs: t.answerable,
        abstentions_on_answerable: t.abstained,
        missing_original_citation: t.missing_original,
        reviewed_sources: t.sources,
        secondary_only_sources: t.secondary_sources,
        unresolved_sources: t.unresolved_sources,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::UNIX_EPOCH;

    use cohort_core::CohortFiles;
    use cohort_core::agreement::Stat;
    use cohort_core::manifest::Manifest;

    use super::super::import::{ClaimDecision, PairVerdict, ReviewerLabels};
    use super::super::{ExportIndex, ExportedItem, ItemKind, ReviewInput};
    use super::*;

    fn frozen() -> FrozenCohort {
        let toml = "name = \"t\"\nseed = 1\n[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"v1\"\nvendor_lineage = \"x\"\n";
        let questions =
            r#"[{"id":"s1","category":"science","text":"Why?"},{"id":"s2","category":"science","text":"How?"}]"#;
        let mut f = CohortFiles::default();
        for (name, body) in [
            ("cohort.toml", toml),
            ("questions.json", questions),
            ("suffix.txt", "Cite.\n"),
            ("protocol.md", "# P\n"),
            ("rubric.md", "# R\n"),
        ] {
            f.files.insert(name.into(), Some(body.as_bytes().to_vec()));
        }
        let cohort = f.validate().unwrap();
        let manifest = Manifest::build(&cohort, UNIX_EPOCH, Vec::new());
        FrozenCohort { cohort, manifest, manifest_sha256: "0".repeat(64), review: None, review_declared: false }
    }

    fn item(id: &str, kind: ItemKind, q: &str, claim: Option<&str>) -> ExportedItem {
        ExportedItem {
            item_id: id.into(),
            kind,
            run_id: format!("{q}:a:1"),
            arm: "a".into(),
            question_id: q.into(),
            output: format!("CODE-{q}-1"),
            claim_item: claim.map(str::to_owned),
            claim_id: None,
            citation: None,
            url: None,
            citations: BTreeMap::new(),
        }
    }

    fn labels(who: &str, claims: &[(&str, &str)], pairs: &[(&str, bool, &str)]) -> ReviewerLabels {
        ReviewerLabels {
            reviewer: who.into(),
            file: format!("{who}.csv"),
            claims: claims
                .iter()
                .map(|(id, l)| ((*id).into(), ClaimDecision::Label { label: (*l).into(), reason: "r".into() }))
                .collect(),
            pairs: pairs
                .iter()
                .map(|(id, s, r)| ((*id).into(), PairVerdict { parts: vec![(*s, (*r).into())], secondary: false }))
                .collect(),
            uncertainty: BTreeMap::new(),
            added: Vec::new(),
            missing_original: BTreeSet::new(),
        }
    }

    fn summary(items: Vec<ExportedItem>, a: ReviewerLabels, b: ReviewerLabels) -> ReviewParts {
        summary_of(&frozen(), items, a, b)
    }

    fn summary_of(
        frozen: &FrozenCohort,
        items: Vec<ExportedItem>,
        a: ReviewerLabels,
        b: ReviewerLabels,
    ) -> ReviewParts {
        let input = ReviewInput {
            index: ExportIndex {
                kind: "cohort-review-export".into(),
                manifest_sha256: String::new(),
                exported_at: String::new(),
                reviewers: vec!["alice".into(), "bob".into()],
                folder: String::new(),
                items,
                extraction_check: None,
            },
            reviewers: vec![a, b],
            adjudication: None,
            imported_files: Vec::new(),
        };
        summarise_review(frozen, Some(&input), 200).unwrap()
    }

    /// Proves an abstention on a question the key calls answerable is
    /// counted apart and left out of the 0/1/2 distribution and mean, while
    /// an abstention on an insufficient-evidence question is scored (there
    /// it is the calibrated answer).
    #[test]
    fn answerable_abstentions_are_counted_apart_from_the_mean() {
        let mut frozen = frozen();
        frozen.cohort.uncertainty_key = Some(
            serde_json::from_str(r#"[{"question_id":"s1","answerable":true},{"question_id":"s2","answerable":false}]"#)
                .unwrap(),
        );
        let items = vec![item("u1", ItemKind::Uncertainty, "s1", None), item("u2", ItemKind::Uncertainty, "s2", None)];
        let mut a = labels("alice", &[], &[]);
        let mut b = labels("bob", &[], &[]);
        for r in [&mut a, &mut b] {
            r.uncertainty.insert("u1".into(), (0, true));
            r.uncertainty.insert("u2".into(), (2, true));
        }
        let p = summary_of(&frozen, items, a, b);
        let f = &p.summary.arms[0].figures;
        assert_eq!(f.abstentions_on_answerable, 1);
        assert_eq!((f.uncertainty.outputs, f.uncertainty.scores), (1, [0, 0, 1]), "only the s2 abstention is scored");
        assert_eq!(f.uncertainty.mean.value, Some(2.0));
    }

    /// A run with zero factual claims has no claim-fidelity denominator
    /// (the rate is "not applicable", RateKind's rule, never 100%), and
    /// zero pairs gives no precision denominator.
    #[test]
    fn zero_factual_claims_is_not_applicable() {
        let items = vec![item("u1", ItemKind::Uncertainty, "s1", None)];
        let p = summary(items, labels("alice", &[], &[]), labels("bob", &[], &[]));
        let t = p.tallies[0][0];
        assert_eq!((t.outputs, t.factual, t.pairs), (1, 0, 0));
        // Nothing rated by both: kappa is undefined, with its reason.
        let k = &p.summary.agreement.unwrap().claims.kappa;
        assert!(matches!(k, Stat::Undefined(why) if !why.is_empty()), "{k:?}");
    }

    /// A partially supported claim gets no credit; a broken reference stays
    /// in the precision denominator and is counted under its reason; a claim
    /// whose only pair does not support is not covered.
    #[test]
    fn partial_support_gets_no_credit_and_broken_pairs_stay_in_the_denominator() {
        let items = vec![
            item("c1", ItemKind::Claim, "s1", None),
            item("c2", ItemKind::Claim, "s2", None),
            item("p1", ItemKind::Pair, "s1", Some("c1")),
            item("p2", ItemKind::Pair, "s2", Some("c2")),
        ];
        let claims = [("c1", "fully_supported"), ("c2", "partially_supported")];
        let pairs = [("p1", true, ""), ("p2", false, "broken")];
        let p = summary(items, labels("alice", &claims, &pairs), labels("bob", &claims, &pairs));
        let mut t = ReviewTally::default();
        p.tallies[0].iter().for_each(|q| t.add(q));
        assert_eq!((t.fully, t.factual), (1, 2));
        assert_eq!((t.supporting, t.pairs), (1, 2));
        assert_eq!(t.covered, 1);
        let f = &p.summary.arms[0].figures;
        assert_eq!(f.labels["partially_supported"], 1);
        assert_eq!(f.pair_reasons["broken"], 1);
        let a = p.summary.agreement.unwrap();
        assert_eq!(a.claims.items, 2);
        assert_eq!(a.claims.raw_agreement, Stat::Value(1.0));
        // Every final decision is a line of review.jsonl.
        let kinds: Vec<&str> = p.lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["pair", "pair", "claim", "claim"]);
        assert_eq!(p.lines[1]["reason"], "broken");
        assert_eq!(p.lines[2]["covered"], true);
    }

    /// A disagreement without an adjudication is counted as unresolved (the
    /// rates it touches are then unmeasured, never a number); two raters
    /// constant on different labels agree at chance (kappa 0, as
    /// scikit-learn gives).
    #[test]
    fn an_unadjudicated_disagreement_is_unmeasured() {
        let items = vec![item("c1", ItemKind::Claim, "s1", None), item("c2", ItemKind::Claim, "s2", None)];
        let a = labels("alice", &[("c1", "fully_supported"), ("c2", "fully_supported")], &[]);
        let b = labels("bob", &[("c1", "unsupported"), ("c2", "unsupported")], &[]);
        let p = summary(items, a, b);
        let mut t = ReviewTally::default();
        p.tallies[0].iter().for_each(|q| t.add(q));
        assert_eq!((t.unresolved_claims, t.factual, t.fully), (2, 2, 0));
        assert_eq!(p.summary.unresolved_items, 2);
        assert_eq!(p.lines[0]["status"], "unresolved");
        let a = p.summary.agreement.unwrap();
        assert_eq!(a.claims.kappa, Stat::Value(0.0));
        assert_eq!(a.claims.raw_agreement, Stat::Value(0.0));
        assert_eq!(a.claims.matrix[0][2], 2, "fully_supported x unsupported");
    }

    fn pair_item(id: &str, q: &str, claim: &str, url: &str) -> ExportedItem {
        ExportedItem { url: Some(url.into()), citation: Some(1), ..item(id, ItemKind::Pair, q, Some(claim)) }
    }

    fn total(p: &ReviewParts) -> ReviewTally {
        let mut t = ReviewTally::default();
        p.tallies[0].iter().for_each(|q| t.add(q));
        t
    }

    /// Seed 004: repeated identical pairs within one answer count once. c2
    /// repeats c1 (both reviewers merge it): its pair citing c1's source is
    /// the same pair (counted once, published as `duplicate`); its pair
    /// citing another source is a pair of c1, and covers it.
    #[test]
    fn a_merged_paraphrase_keeps_its_new_sources_and_drops_its_repeated_pairs() {
        let items = vec![
            item("c1", ItemKind::Claim, "s1", None),
            item("c2", ItemKind::Claim, "s1", None),
            pair_item("p1", "s1", "c1", "https://x.example/a"),
            pair_item("p2", "s1", "c2", "https://x.example/a"),
            pair_item("p3", "s1", "c2", "https://x.example/b"),
        ];
        let mut a = labels(
            "alice",
            &[("c1", "fully_supported")],
            &[("p1", false, "irrelevant"), ("p2", true, ""), ("p3", true, "")],
        );
        let mut b = a.clone();
        b.reviewer = "bob".into();
        for r in [&mut a, &mut b] {
            r.claims.insert("c2".into(), ClaimDecision::Merged("c1".into()));
        }
        let p = summary(items, a, b);
        let t = total(&p);
        assert_eq!((t.factual, t.pairs, t.supporting), (1, 2, 1), "p2 counts once, as p1");
        assert_eq!(t.covered, 1, "p3 covers c1");
        let statuses: Vec<(&str, &str)> = p
            .lines
            .iter()
            .filter(|l| l["kind"] == "pair")
            .map(|l| (l["item_id"].as_str().unwrap(), l["status"].as_str().unwrap()))
            .collect();
        assert_eq!(statuses, [("p1", "does_not_support"), ("p2", "duplicate"), ("p3", "supports")]);
    }

    /// A split claim's parts are atomic claims with the citation attached:
    /// one verdict per part, counted per part; a part's disagreement is its
    /// own unit (`p1.2`), unresolved until adjudicated.
    #[test]
    fn a_split_claims_pair_is_judged_per_part() {
        let items = vec![item("c1", ItemKind::Claim, "s1", None), pair_item("p1", "s1", "c1", "https://x.example/a")];
        let split = |labels: [&str; 2]| {
            ClaimDecision::Split(vec![
                ("first".into(), labels[0].into(), String::new()),
                ("second".into(), labels[1].into(), String::new()),
            ])
        };
        let mut a = labels("alice", &[], &[]);
        let mut b = labels("bob", &[], &[]);
        a.claims.insert("c1".into(), split(["fully_supported", "unsupported"]));
        b.claims.insert("c1".into(), split(["fully_supported", "unsupported"]));
        let verdict = |second: bool| PairVerdict {
            parts: vec![(true, String::new()), (second, if second { String::new() } else { "irrelevant".into() })],
            secondary: false,
        };
        a.pairs.insert("p1".into(), verdict(false));
        b.pairs.insert("p1".into(), verdict(true));
        let p = summary(items.clone(), a.clone(), b.clone());
        let t = total(&p);
        assert_eq!((t.factual, t.pairs, t.supporting, t.unresolved_pairs), (2, 2, 1, 1));
        assert_eq!(t.covered, 1, "part 1 is covered; part 2 awaits its pair's adjudication");
        // Adjudicated: p1.2 does not support.
        let input = ReviewInput {
            index: ExportIndex {
                kind: String::new(),
                manifest_sha256: String::new(),
                exported_at: String::new(),
                reviewers: vec!["alice".into(), "bob".into()],
                folder: String::new(),
                items,
                extraction_check: None,
            },
            reviewers: vec![a, b],
            adjudication: Some(super::super::import::Adjudication {
                file: "adj.csv".into(),
                adjudicator: "carol".into(),
                decisions: BTreeMap::from([(
                    "p1.2".to_owned(),
                    ("no".to_owned(), "irrelevant".to_owned(), "read it".to_owned()),
                )]),
            }),
            imported_files: Vec::new(),
        };
        let p = summarise_review(&frozen(), Some(&input), 200).unwrap();
        let t = total(&p);
        assert_eq!((t.pairs, t.supporting, t.unresolved_pairs, t.covered), (2, 1, 0, 1));
        assert_eq!(p.summary.arms[0].figures.pair_reasons["irrelevant"], 1);
    }

    /// A claim a reviewer adds with its citations is scored as cited: its
    /// pairs count in precision and a supporting one covers it.
    #[test]
    fn an_added_claims_citations_are_its_pairs() {
        let mut u = item("u1", ItemKind::Uncertainty, "s1", None);
        u.citations = BTreeMap::from([(1, "https://x.example/a".to_owned()), (2, "https://x.example/b".to_owned())]);
        let mut a = labels("alice", &[], &[]);
        a.added.push(super::super::import::AddedClaim {
            unit: "added:alice:x".into(),
            output: u.output.clone(),
            text: "A missed claim.".into(),
            label: "fully_supported".into(),
            reason: String::new(),
            cited: vec![1, 2],
            pairs: vec![(1, true, String::new()), (2, false, "contradicts".into())],
            missing_original: false,
        });
        let p = summary(vec![u], a, labels("bob", &[], &[]));
        let t = total(&p);
        assert_eq!((t.factual, t.fully, t.pairs, t.supporting, t.covered), (1, 1, 2, 1, 1));
        assert_eq!(p.summary.arms[0].figures.pair_reasons["contradicts"], 1);
        let urls: Vec<&str> =
            p.lines.iter().filter(|l| l["kind"] == "pair").map(|l| l["url"].as_str().unwrap()).collect();
        assert_eq!(urls, ["https://x.example/a", "https://x.example/b"]);
    }

    /// Secondary-only sources: one source per output and URL, secondary
    /// when every pair citing it finally says so; reviewers who differ
    /// leave it unresolved (the rate unmeasured) until `<pair>.secondary`
    /// is adjudicated.
    #[test]
    fn secondary_sources_are_counted_once_and_a_disagreement_waits() {
        let items = vec![
            item("c1", ItemKind::Claim, "s1", None),
            item("c2", ItemKind::Claim, "s1", None),
            pair_item("p1", "s1", "c1", "https://x.example/a"),
            pair_item("p2", "s1", "c2", "https://x.example/a"),
            pair_item("p3", "s1", "c2", "https://x.example/b"),
        ];
        let claims = [("c1", "fully_supported"), ("c2", "fully_supported")];
        let pairs = [("p1", true, ""), ("p2", true, ""), ("p3", true, "")];
        let (mut a, mut b) = (labels("alice", &claims, &pairs), labels("bob", &claims, &pairs));
        for r in [&mut a, &mut b] {
            r.pairs.get_mut("p1").unwrap().secondary = true;
            r.pairs.get_mut("p2").unwrap().secondary = true;
        }
        b.pairs.get_mut("p3").unwrap().secondary = true;
        let p = summary(items, a, b);
        let t = total(&p);
        assert_eq!((t.sources, t.secondary_sources, t.unresolved_sources), (2, 1, 1));
        let f = &p.summary.arms[0].figures;
        assert_eq!(f.missing_original_citation, 2, "neither claim cites a source finally labelled original");
        assert!(p.lines.iter().any(|l| l["item_id"] == "p3" && l["secondary"].is_null()));
    }
}
