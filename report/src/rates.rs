//! Every rate a report measures, defined once.
//!
//! [`RateKind`] names each rate and says everything about it: its
//! `summary.json` key, its label, its estimand in words, the fraction it
//! takes of the per-question counts, when it cannot be measured, and
//! whether (and over which questions) two arms are compared on it.
//! [`Rates`] and [`Differences`] hold values by kind, and every writer
//! (`summary.md`, `index.html`, `rates.svg`, `summary.json`) iterates
//! [`RateKind::ALL`], so a rate over the counts the report already has is a
//! new variant here and no other change in the code (ARCHITECTURE.md,
//! "Where a change goes", lists the other files: its definition for
//! readers and its independent re-derivation).
//!
//! How a rate reads as text is here too, in one set of display types
//! ([`Fixed`], [`Signed`], [`Count`]) and one reading of a rate
//! ([`Rate::reading`], rendered by [`Rate::display_value`]): "not
//! applicable" and "unmeasured" are words, never 0 or 100%.

use std::collections::BTreeMap;
use std::fmt::{self, Display};
use std::ops::Index;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::{CitationCounts, ClaimCounts, Counts};

// === the rates ===

/// A rate of a report. The variants are in the order every writer shows
/// them (and `summary.json` keys them); [`RateKind::ALL`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RateKind {
    /// completed / planned: every outcome stays in the denominator.
    Completion,
    /// YES / judged claims, pooled (seed 000 3.2).
    SupportMicro,
    /// The mean over questions of each question's support.
    SupportMacro,
    /// (citations - unresolved) / citations, pooled.
    ResolutionMicro,
    /// The mean over questions of each question's resolution.
    ResolutionMacro,
    /// Human review (seed 004): fully supported / all factual claims after
    /// the extraction check, pooled (unverifiable and uncited claims in).
    ClaimFidelityMicro,
    /// The mean over questions of each question's claim fidelity.
    ClaimFidelityMacro,
    /// Claim-citation pairs whose source fully supports the claim / all
    /// emitted pairs, pooled.
    CitationPrecisionMicro,
    /// The mean over questions of each question's citation precision.
    CitationPrecisionMacro,
    /// Factual claims with at least one fully supporting pair / all
    /// factual claims, pooled.
    CitationCoverageMicro,
    /// The mean over questions of each question's citation coverage.
    CitationCoverageMacro,
    /// Unique sources per output (seed 004 "unique sources per product and
    /// category"): each scored output's distinct normalised cited URLs,
    /// summed, / scored outputs. A mean count, not a proportion.
    SourcesPerOutput,
    /// Cited sources whose capture was not accessible / cited sources
    /// whose accessibility was checked (captured), pooled.
    InaccessibleSources,
    /// Reviewed cited sources that are only secondary / reviewed cited
    /// sources (one per distinct URL of an output's reviewed pairs), from
    /// the reviewers' `secondary` label, pooled; unmeasured without a
    /// review or while a disagreement on it awaits adjudication.
    SecondaryOnlySources,
}

/// How a rate pools its questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Sums every question's numerator and denominator.
    Micro,
    /// The mean of the questions' own rates, over the questions where the
    /// rate is defined (each weighs the same).
    Macro,
}

/// The questions a paired difference is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairScope {
    /// Every question (an all-attempt rate: a failure counts against an
    /// arm).
    AllQuestions,
    /// The questions where both arms completed at least one run.
    CompletedPairs,
}

/// How two arms of one workflow are compared on a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compared {
    pub over: PairScope,
    /// The difference's row in `summary.md`.
    pub markdown_label: &'static str,
    /// The difference's row in `index.html`.
    pub html_label: &'static str,
}

impl RateKind {
    /// Every rate, in the order they are computed, stored and shown.
    pub const ALL: [RateKind; 14] = [
        RateKind::Completion,
        RateKind::SupportMicro,
        RateKind::SupportMacro,
        RateKind::ResolutionMicro,
        RateKind::ResolutionMacro,
        RateKind::ClaimFidelityMicro,
        RateKind::ClaimFidelityMacro,
        RateKind::CitationPrecisionMicro,
        RateKind::CitationPrecisionMacro,
        RateKind::CitationCoverageMicro,
        RateKind::CitationCoverageMacro,
        RateKind::SourcesPerOutput,
        RateKind::InaccessibleSources,
        RateKind::SecondaryOnlySources,
    ];

    /// Its position in [`RateKind::ALL`] (the declaration order).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Its key in `summary.json` (and in `cohort verify`'s paths).
    pub const fn key(self) -> &'static str {
        match self {
            RateKind::Completion => "completion",
            RateKind::SupportMicro => "support_micro",
            RateKind::SupportMacro => "support_macro",
            RateKind::ResolutionMicro => "resolution_micro",
            RateKind::ResolutionMacro => "resolution_macro",
            RateKind::ClaimFidelityMicro => "claim_fidelity_micro",
            RateKind::ClaimFidelityMacro => "claim_fidelity_macro",
            RateKind::CitationPrecisionMicro => "citation_precision_micro",
            RateKind::CitationPrecisionMacro => "citation_precision_macro",
            RateKind::CitationCoverageMicro => "citation_coverage_micro",
            RateKind::CitationCoverageMacro => "citation_coverage_macro",
            RateKind::SourcesPerOutput => "sources_per_output",
            RateKind::InaccessibleSources => "inaccessible_source_rate",
            RateKind::SecondaryOnlySources => "secondary_only_sources",
        }
    }

    /// Its short name: a column of the rates tables, a panel of
    /// `rates.svg`.
    pub const fn label(self) -> &'static str {
        match self {
            RateKind::Completion => "completion",
            RateKind::SupportMicro => "support (micro)",
            RateKind::SupportMacro => "support (macro)",
            RateKind::ResolutionMicro => "resolution (micro)",
            RateKind::ResolutionMacro => "resolution (macro)",
            RateKind::ClaimFidelityMicro => "claim fidelity (micro)",
            RateKind::ClaimFidelityMacro => "claim fidelity (macro)",
            RateKind::CitationPrecisionMicro => "citation precision (micro)",
            RateKind::CitationPrecisionMacro => "citation precision (macro)",
            RateKind::CitationCoverageMicro => "citation coverage (micro)",
            RateKind::CitationCoverageMacro => "citation coverage (macro)",
            RateKind::SourcesPerOutput => "unique sources per output",
            RateKind::InaccessibleSources => "inaccessible sources",
            RateKind::SecondaryOnlySources => "secondary-only sources",
        }
    }

    /// What it estimates, in words (after its label in `rates.svg`).
    pub const fn estimand(self) -> &'static str {
        match self {
            RateKind::Completion => "completed / planned (all attempts)",
            RateKind::SupportMicro => "YES / judged claims, pooled",
            RateKind::ResolutionMicro => "resolved / citations, pooled",
            RateKind::ClaimFidelityMicro => "fully supported / factual claims (human review), pooled",
            RateKind::CitationPrecisionMicro => "supporting / claim-citation pairs (human review), pooled",
            RateKind::CitationCoverageMicro => "covered / factual claims (human review), pooled",
            RateKind::SourcesPerOutput => "distinct cited URLs per output / scored outputs, pooled",
            RateKind::InaccessibleSources => "inaccessible / captured cited sources, pooled",
            RateKind::SecondaryOnlySources => "only secondary / reviewed cited sources (a reviewer label), pooled",
            RateKind::SupportMacro
            | RateKind::ResolutionMacro
            | RateKind::ClaimFidelityMacro
            | RateKind::CitationPrecisionMacro
            | RateKind::CitationCoverageMacro => "mean over questions",
        }
    }

    /// The ratio it pools, by name; the micro and macro rates of one ratio
    /// share it (the reasons under a rates table name it).
    pub const fn measure(self) -> &'static str {
        match self {
            RateKind::Completion => "completion",
            RateKind::SupportMicro | RateKind::SupportMacro => "support",
            RateKind::ResolutionMicro | RateKind::ResolutionMacro => "resolution",
            RateKind::ClaimFidelityMicro | RateKind::ClaimFidelityMacro => "claim fidelity",
            RateKind::CitationPrecisionMicro | RateKind::CitationPrecisionMacro => "citation precision",
            RateKind::CitationCoverageMicro | RateKind::CitationCoverageMacro => "citation coverage",
            RateKind::SourcesPerOutput => "unique sources per output",
            RateKind::InaccessibleSources => "inaccessible-source rate",
            RateKind::SecondaryOnlySources => "secondary-only source rate",
        }
    }

    /// The ratio as a row of `summary.md`'s micro/macro table and in the
    /// statement of a difference.
    pub const fn measure_label(self) -> &'static str {
        match self {
            RateKind::Completion => "completion (all attempts)",
            _ => self.measure(),
        }
    }

    pub const fn pooling(self) -> Pooling {
        match self {
            RateKind::Completion
            | RateKind::SupportMicro
            | RateKind::ResolutionMicro
            | RateKind::ClaimFidelityMicro
            | RateKind::CitationPrecisionMicro
            | RateKind::CitationCoverageMicro
            | RateKind::SourcesPerOutput
            | RateKind::InaccessibleSources
            | RateKind::SecondaryOnlySources => Pooling::Micro,
            RateKind::SupportMacro
            | RateKind::ResolutionMacro
            | RateKind::ClaimFidelityMacro
            | RateKind::CitationPrecisionMacro
            | RateKind::CitationCoverageMacro => Pooling::Macro,
        }
    }

    /// Whether its value is a proportion in [0, 1] (every rate but a mean
    /// count, [`RateKind::SourcesPerOutput`]): the plots scale the others'
    /// axis to the values.
    pub const fn is_proportion(self) -> bool {
        !matches!(self, RateKind::SourcesPerOutput)
    }

    /// The macro rate of the same ratio, for a micro rate that has one
    /// (the two share a row of `summary.md`).
    pub fn macro_kind(self) -> Option<RateKind> {
        if self.pooling() != Pooling::Micro {
            return None;
        }
        RateKind::ALL.into_iter().find(|k| k.pooling() == Pooling::Macro && k.measure() == self.measure())
    }

    /// Whether, and how, two arms of one workflow are compared on it.
    pub const fn comparison(self) -> Option<Compared> {
        match self {
            RateKind::Completion => Some(Compared {
                over: PairScope::AllQuestions,
                markdown_label: "completion (all attempts)",
                html_label: "completion (all questions, all attempts)",
            }),
            RateKind::SupportMicro => Some(Compared {
                over: PairScope::CompletedPairs,
                markdown_label: "support (micro, completed pairs)",
                html_label: "support, micro (completed pairs)",
            }),
            RateKind::ResolutionMicro => Some(Compared {
                over: PairScope::CompletedPairs,
                markdown_label: "resolution (micro, completed pairs)",
                html_label: "resolution, micro (completed pairs)",
            }),
            RateKind::ClaimFidelityMicro => Some(Compared {
                over: PairScope::CompletedPairs,
                markdown_label: "claim fidelity (micro, completed pairs)",
                html_label: "claim fidelity, micro (completed pairs)",
            }),
            RateKind::CitationPrecisionMicro => Some(Compared {
                over: PairScope::CompletedPairs,
                markdown_label: "citation precision (micro, completed pairs)",
                html_label: "citation precision, micro (completed pairs)",
            }),
            RateKind::CitationCoverageMicro => Some(Compared {
                over: PairScope::CompletedPairs,
                markdown_label: "citation coverage (micro, completed pairs)",
                html_label: "citation coverage, micro (completed pairs)",
            }),
            RateKind::SupportMacro
            | RateKind::ResolutionMacro
            | RateKind::ClaimFidelityMacro
            | RateKind::CitationPrecisionMacro
            | RateKind::CitationCoverageMacro
            | RateKind::SourcesPerOutput
            | RateKind::InaccessibleSources
            | RateKind::SecondaryOnlySources => None,
        }
    }

    /// Why two arms' values of this rate are not a comparison even though
    /// both are measured; `None` when they are. Resolution: an arm that
    /// cites by Markdown links has its links as its references, so its
    /// resolution is 1 by construction, and a difference against an arm
    /// with numbered citations measures the formats, not the products.
    pub(crate) fn not_comparable(self, a: &Tally, b: &Tally) -> Option<String> {
        match self {
            RateKind::ResolutionMicro | RateKind::ResolutionMacro => {
                let links = |t: &Tally| t.formats.markdown_links > 0;
                let numbered = |t: &Tally| t.formats.numbered > 0;
                ((links(a) && numbered(b)) || (numbered(a) && links(b))).then(|| {
                    "not compared: one arm cites by Markdown links, whose references are the links themselves \
                     (resolution 1 by construction), the other by numbered citations; the difference would \
                     measure the citation formats, not the products"
                        .to_owned()
                })
            }
            _ => None,
        }
    }

    /// (numerator, denominator) of one question's counts, or of an arm's:
    /// a micro rate is the fraction of the summed counts, a macro rate the
    /// mean of the questions' fractions.
    pub(crate) fn fraction(self, t: &Tally) -> (u64, u64) {
        match self {
            RateKind::Completion => (t.counts.completed, t.counts.planned),
            RateKind::SupportMicro | RateKind::SupportMacro => (t.claims.supported, t.claims.judged),
            RateKind::ResolutionMicro | RateKind::ResolutionMacro => {
                let c = &t.citations;
                (c.total - c.unresolved.min(c.total), c.total)
            }
            RateKind::ClaimFidelityMicro | RateKind::ClaimFidelityMacro => (t.review.fully, t.review.factual),
            RateKind::CitationPrecisionMicro | RateKind::CitationPrecisionMacro => {
                (t.review.supporting, t.review.pairs)
            }
            RateKind::CitationCoverageMicro | RateKind::CitationCoverageMacro => (t.review.covered, t.review.factual),
            RateKind::SourcesPerOutput => (t.sources.cited, t.counts.scored),
            RateKind::InaccessibleSources => (t.sources.inaccessible, t.sources.captured()),
            RateKind::SecondaryOnlySources => (t.review.secondary_sources, t.review.sources),
        }
    }

    /// Whether it can be measured for these totals, and if not, why.
    pub(crate) fn status(self, t: &Tally) -> (RateStatus, Option<String>) {
        let unscored = t.counts.completed.saturating_sub(t.counts.scored);
        let not_scored = || (RateStatus::Unmeasured, Some(format!("{unscored} completed output(s) were not scored")));
        // Measured on the scored outputs only: said, never silent.
        let measured = || {
            if unscored > 0 {
                (
                    RateStatus::Measured,
                    Some(format!(
                        "measured on {} of {} completed output(s): {unscored} could not be scored \
                         (scoring_error or missing record) and are in neither numerator nor denominator",
                        t.counts.scored, t.counts.completed
                    )),
                )
            } else {
                (RateStatus::Measured, None)
            }
        };
        let review = |unresolved: u64, nothing: &str| {
            let r = &t.review;
            if r.outputs == 0 && t.counts.completed == 0 {
                (RateStatus::NotApplicable, Some("no completed outputs".to_owned()))
            } else if r.outputs == 0 {
                (RateStatus::Unmeasured, Some("no output was reviewed (no human review imported)".to_owned()))
            } else if self.fraction(t).1 == 0 {
                (RateStatus::NotApplicable, Some(nothing.to_owned()))
            } else if unresolved > 0 {
                (RateStatus::Unmeasured, Some(format!("{unresolved} disagreement(s) await adjudication")))
            } else if r.outputs < t.counts.completed {
                (
                    RateStatus::Measured,
                    Some(format!(
                        "measured on the {} reviewed of {} completed output(s)",
                        r.outputs, t.counts.completed
                    )),
                )
            } else {
                (RateStatus::Measured, None)
            }
        };
        match self {
            RateKind::Completion if t.counts.planned == 0 => {
                (RateStatus::NotApplicable, Some("no planned runs".into()))
            }
            RateKind::Completion => (RateStatus::Measured, None),
            RateKind::SupportMicro | RateKind::SupportMacro => {
                if t.claims.cited == 0 && unscored > 0 {
                    not_scored()
                } else if t.claims.cited == 0 {
                    (RateStatus::NotApplicable, Some("no cited claims".into()))
                } else if t.claims.judged == 0 {
                    let reasons: Vec<String> = t.claims.unjudged.iter().map(|(r, n)| format!("{n} {r}")).collect();
                    (
                        RateStatus::Unmeasured,
                        Some(format!(
                            "no claim was judged ({} cited claims unjudged: {})",
                            t.claims.cited,
                            reasons.join(", ")
                        )),
                    )
                } else {
                    measured()
                }
            }
            RateKind::ResolutionMicro | RateKind::ResolutionMacro => {
                if t.citations.total == 0 && unscored > 0 {
                    not_scored()
                } else if t.citations.total == 0 {
                    (RateStatus::NotApplicable, Some("no citations".into()))
                } else {
                    measured()
                }
            }
            RateKind::ClaimFidelityMicro | RateKind::ClaimFidelityMacro => {
                review(t.review.unresolved_claims, "no factual claims")
            }
            RateKind::CitationPrecisionMicro | RateKind::CitationPrecisionMacro => {
                review(t.review.unresolved_pairs, "no claim-citation pairs")
            }
            RateKind::CitationCoverageMicro | RateKind::CitationCoverageMacro => {
                review(t.review.unresolved_claims + t.review.unresolved_pairs, "no factual claims")
            }
            RateKind::SourcesPerOutput => {
                if t.counts.scored == 0 && unscored > 0 {
                    not_scored()
                } else if t.counts.scored == 0 {
                    (RateStatus::NotApplicable, Some("no scored outputs".into()))
                } else {
                    measured()
                }
            }
            RateKind::InaccessibleSources => {
                let s = &t.sources;
                if s.cited == 0 && unscored > 0 {
                    not_scored()
                } else if s.cited == 0 {
                    (RateStatus::NotApplicable, Some("no cited sources".into()))
                } else if s.captured() == 0 {
                    (
                        RateStatus::Unmeasured,
                        Some(format!(
                            "none of the {} cited source(s) was captured (no capture at collection and no \
                             `cohort judge --capture`), so their accessibility is unknown",
                            s.cited
                        )),
                    )
                } else if s.uncaptured > 0 {
                    (
                        RateStatus::Measured,
                        Some(format!(
                            "measured on the {} captured of {} cited source(s): {} were never captured and are in \
                             neither numerator nor denominator",
                            s.captured(),
                            s.cited,
                            s.uncaptured
                        )),
                    )
                } else {
                    measured()
                }
            }
            RateKind::SecondaryOnlySources => {
                review(t.review.unresolved_sources, "no reviewed claim-citation pair (no cited source to label)")
            }
        }
    }
}

/// The counts a rate is a fraction of: one question's, or the sum over an
/// arm's (or a category's) questions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    pub(crate) counts: Counts,
    pub(crate) claims: ClaimCounts,
    pub(crate) citations: CitationCounts,
    /// Scored runs by citation format.
    pub(crate) formats: FormatCounts,
    /// The human review's final figures (`review::metrics`).
    pub(crate) review: ReviewTally,
    /// The scored outputs' cited sources and their accessibility.
    pub(crate) sources: SourceTally,
}

/// The cited sources of scored outputs (one per distinct normalised URL of
/// an output's reference table), by what their capture found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SourceTally {
    pub(crate) cited: u64,
    /// A capture answered HTTP 200 (the record's, or a judging pass's).
    pub(crate) accessible: u64,
    /// Captured, and no capture was accessible.
    pub(crate) inaccessible: u64,
    /// Never captured: accessibility unknown.
    pub(crate) uncaptured: u64,
}

impl SourceTally {
    /// Sources whose accessibility was checked.
    pub(crate) fn captured(&self) -> u64 {
        self.accessible + self.inaccessible
    }

    pub(crate) fn add(&mut self, o: &SourceTally) {
        self.cited += o.cited;
        self.accessible += o.accessible;
        self.inaccessible += o.inaccessible;
        self.uncaptured += o.uncaptured;
    }
}

/// Scored runs by the citation format their output used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FormatCounts {
    pub(crate) numbered: u64,
    pub(crate) markdown_links: u64,
}

/// The human review's final figures of one question (or summed): what the
/// review rates are fractions of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReviewTally {
    /// Outputs in the review (exported, with labels imported).
    pub(crate) outputs: u64,
    /// Factual claim units after the extraction check (unresolved ones in).
    pub(crate) factual: u64,
    /// Factual claims finally `fully_supported`.
    pub(crate) fully: u64,
    /// Factual claims with at least one fully supporting pair.
    pub(crate) covered: u64,
    /// Claim-citation pairs (unresolved ones in).
    pub(crate) pairs: u64,
    pub(crate) supporting: u64,
    /// Claim units and pairs whose disagreement awaits adjudication.
    pub(crate) unresolved_claims: u64,
    pub(crate) unresolved_pairs: u64,
    /// Distinct cited sources of the reviewed pairs (per output), those
    /// finally labelled only secondary, and those whose label awaits
    /// adjudication.
    pub(crate) sources: u64,
    pub(crate) secondary_sources: u64,
    pub(crate) unresolved_sources: u64,
}

impl ReviewTally {
    pub(crate) fn add(&mut self, o: &ReviewTally) {
        self.outputs += o.outputs;
        self.factual += o.factual;
        self.fully += o.fully;
        self.covered += o.covered;
        self.pairs += o.pairs;
        self.supporting += o.supporting;
        self.unresolved_claims += o.unresolved_claims;
        self.unresolved_pairs += o.unresolved_pairs;
        self.sources += o.sources;
        self.secondary_sources += o.secondary_sources;
        self.unresolved_sources += o.unresolved_sources;
    }
}

// === values ===

/// Whether a rate has a value, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateStatus {
    Measured,
    /// Nothing to measure (no planned runs, no cited claims, no citations).
    NotApplicable,
    /// Something to measure, nothing measured (every claim unjudged).
    Unmeasured,
}

/// One rate with its denominator and interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub value: Option<f64>,
    pub numerator: f64,
    pub denominator: f64,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// Bootstrap draws in which the rate was undefined (left out of the
    /// interval).
    pub undefined_draws: u32,
    pub status: RateStatus,
    /// Why the value is missing, in words.
    pub reason: Option<String>,
    /// For macro rates: how many questions contributed.
    pub questions: Option<u64>,
}

/// A difference a - b with its interval, over the paired questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub value: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub undefined_draws: u32,
    /// Questions that contributed (both sides defined).
    pub questions: u64,
    /// The plain statement: which is higher, or that they cannot be told
    /// apart (the interval contains 0), or why it is undefined.
    pub statement: String,
}

/// Every rate of an arm (or of an arm within a category), by kind.
/// `summary.json` keeps it as an object keyed by [`RateKind::key`], in
/// [`RateKind::ALL`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates([Rate; RateKind::ALL.len()]);

impl Rates {
    /// The rate of each kind, as `rate` gives it.
    pub fn from_fn(mut rate: impl FnMut(RateKind) -> Rate) -> Rates {
        Rates(std::array::from_fn(|i| rate(RateKind::ALL[i])))
    }

    /// Every kind with its rate, in [`RateKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (RateKind, &Rate)> {
        RateKind::ALL.into_iter().zip(&self.0)
    }
}

impl Index<RateKind> for Rates {
    type Output = Rate;

    fn index(&self, kind: RateKind) -> &Rate {
        &self.0[kind.index()]
    }
}

impl Serialize for Rates {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (kind, rate) in self.iter() {
            map.serialize_entry(kind.key(), rate)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Rates {
    /// Every kind's key is required; other keys are ignored, as for any
    /// other object of `summary.json`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rates, D::Error> {
        let mut by_key = BTreeMap::<String, Rate>::deserialize(deserializer)?;
        let mut rates = Vec::with_capacity(RateKind::ALL.len());
        for kind in RateKind::ALL {
            rates.push(by_key.remove(kind.key()).ok_or_else(|| D::Error::missing_field(kind.key()))?);
        }
        let rates: [Rate; RateKind::ALL.len()] = rates.try_into().map_err(|_| D::Error::custom("one rate per kind"))?;
        Ok(Rates(rates))
    }
}

/// The differences of a paired comparison, one per kind with a
/// [`RateKind::comparison`], in [`RateKind::ALL`] order. In `summary.json`
/// they are fields of the comparison, keyed by [`RateKind::key`].
#[derive(Debug, Clone, PartialEq)]
pub struct Differences(Vec<(RateKind, Difference)>);

impl Differences {
    /// The difference of each compared kind, as `difference` gives it.
    pub fn from_fn(mut difference: impl FnMut(RateKind) -> Difference) -> Differences {
        Differences(
            RateKind::ALL.into_iter().filter(|k| k.comparison().is_some()).map(|k| (k, difference(k))).collect(),
        )
    }

    /// The difference on `kind`; `None` when arms are not compared on it.
    pub fn get(&self, kind: RateKind) -> Option<&Difference> {
        self.0.iter().find(|(k, _)| *k == kind).map(|(_, d)| d)
    }

    /// Every compared kind with its difference, in [`RateKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (RateKind, &Difference)> {
        self.0.iter().map(|(k, d)| (*k, d))
    }

    /// The same, mutable (the statements are reworded while a report is
    /// preliminary).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (RateKind, &mut Difference)> {
        self.0.iter_mut().map(|(k, d)| (*k, d))
    }
}

impl FromIterator<(RateKind, Difference)> for Differences {
    /// Keeps the compared kinds, in [`RateKind::ALL`] order.
    fn from_iter<I: IntoIterator<Item = (RateKind, Difference)>>(iter: I) -> Differences {
        let mut differences: Vec<(RateKind, Difference)> =
            iter.into_iter().filter(|(k, _)| k.comparison().is_some()).collect();
        differences.sort_by_key(|(k, _)| *k);
        differences.dedup_by_key(|(k, _)| *k);
        Differences(differences)
    }
}

impl Serialize for Differences {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (kind, difference) in self.iter() {
            map.serialize_entry(kind.key(), difference)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Differences {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Differences, D::Error> {
        let mut by_key = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
        let mut differences = Vec::new();
        for kind in RateKind::ALL.into_iter().filter(|k| k.comparison().is_some()) {
            let value = by_key.remove(kind.key()).ok_or_else(|| D::Error::missing_field(kind.key()))?;
            differences.push((kind, Difference::deserialize(value).map_err(D::Error::custom)?));
        }
        Ok(Differences(differences))
    }
}

// === how a rate reads: the one place for numbers, "not applicable" and "unmeasured" ===

/// Shown for a rate with nothing to measure (zero claims, zero pairs).
pub const NOT_APPLICABLE: &str = "not applicable";
/// Shown for a rate with something to measure that was not measured.
pub const UNMEASURED: &str = "n/a (unmeasured)";
/// Shown for a rate said to be measured that has no finite value: a bug
/// upstream, shown as such rather than as a number.
pub const NO_VALUE: &str = "no value";
/// Shown for a difference without a value.
pub const UNDEFINED: &str = "undefined";

/// A rate (or an interval bound) to four decimals.
#[derive(Debug, Clone, Copy)]
pub struct Fixed(pub f64);

impl Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.4}", self.0)
    }
}

/// A difference (or its interval bound) to four decimals, signed.
#[derive(Debug, Clone, Copy)]
pub struct Signed(pub f64);

impl Display for Signed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:+.4}", self.0)
    }
}

/// A numerator or denominator: a count as an integer, a fractional sum
/// (macro numerators are sums of per-question rates) to `places` decimals.
#[derive(Debug, Clone, Copy)]
pub struct Count {
    pub value: f64,
    pub places: usize,
}

impl Count {
    /// Four decimals for a fractional sum: the tables.
    pub const fn of(value: f64) -> Count {
        Count { value, places: 4 }
    }

    /// Two decimals for a fractional sum: the plots' labels, where space
    /// is short.
    pub const fn short(value: f64) -> Count {
        Count { value, places: 2 }
    }
}

impl Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.value;
        if x.fract() == 0.0 && x.abs() < 1e15 { write!(f, "{}", x as i64) } else { write!(f, "{x:.*}", self.places) }
    }
}

/// What a rate shows: its value, or the words that say why it has none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    Value(f64),
    Words(&'static str),
}

impl Rate {
    /// The one reading of a rate: its value when measured, otherwise the
    /// words for its status (never 0 or 100% for a missing value).
    pub fn reading(&self) -> Reading {
        match (self.status, self.value) {
            (RateStatus::NotApplicable, _) => Reading::Words(NOT_APPLICABLE),
            (RateStatus::Unmeasured, _) => Reading::Words(UNMEASURED),
            (RateStatus::Measured, Some(v)) if v.is_finite() => Reading::Value(v),
            (RateStatus::Measured, _) => Reading::Words(NO_VALUE),
        }
    }

    /// The value to four decimals, or why there is none.
    pub fn display_value(&self) -> String {
        match self.reading() {
            Reading::Value(v) => Fixed(v).to_string(),
            Reading::Words(words) => words.to_owned(),
        }
    }

    /// `numerator / denominator`, integers shown as integers.
    pub fn display_fraction(&self) -> String {
        format!("{} / {}", Count::of(self.numerator), Count::of(self.denominator))
    }

    /// `[low, high]`, when there is an interval.
    pub fn interval_text(&self) -> Option<String> {
        match (self.ci_low, self.ci_high) {
            (Some(lo), Some(hi)) => Some(format!("[{}, {}]", Fixed(lo), Fixed(hi))),
            _ => None,
        }
    }

    /// `[low, high]`, or a dash when there is no interval.
    pub fn display_interval(&self) -> String {
        self.interval_text().unwrap_or_else(|| "-".to_owned())
    }
}

impl Difference {
    /// The signed value, when there is a finite one.
    pub fn value_text(&self) -> Option<String> {
        self.value.filter(|v| v.is_finite()).map(|v| Signed(v).to_string())
    }

    /// The signed value, or [`UNDEFINED`].
    pub fn display_value(&self) -> String {
        self.value_text().unwrap_or_else(|| UNDEFINED.to_owned())
    }

    /// `[low, high]` signed, when there is an interval.
    pub fn interval_text(&self) -> Option<String> {
        match (self.ci_low, self.ci_high) {
            (Some(lo), Some(hi)) => Some(format!("[{}, {}]", Signed(lo), Signed(hi))),
            _ => None,
        }
    }

    /// `[low, high]` signed, or a dash when there is no interval.
    pub fn display_interval(&self) -> String {
        self.interval_text().unwrap_or_else(|| "-".to_owned())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `RateKind::ALL` is the declaration order, so `index` is a position
    /// in it, and every key and label is distinct.
    #[test]
    fn all_is_the_declaration_order_and_names_are_distinct() {
        for (i, kind) in RateKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
        }
        let keys: std::collections::BTreeSet<&str> = RateKind::ALL.iter().map(|k| k.key()).collect();
        let labels: std::collections::BTreeSet<&str> = RateKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!((keys.len(), labels.len()), (RateKind::ALL.len(), RateKind::ALL.len()));
    }

    /// Rates and differences keep `summary.json`'s layout: objects keyed
    /// by kind in `ALL` order, read back as written; a missing kind is an
    /// error naming it.
    #[test]
    fn rates_and_differences_round_trip_as_objects_keyed_by_kind() {
        let rate = |kind: RateKind| Rate {
            value: Some(kind.index() as f64 / 10.0),
            numerator: kind.index() as f64,
            denominator: 10.0,
            ci_low: None,
            ci_high: None,
            undefined_draws: 0,
            status: RateStatus::Measured,
            reason: None,
            questions: None,
        };
        let rates = Rates::from_fn(rate);
        let json = serde_json::to_value(&rates).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let want: Vec<&str> = RateKind::ALL.iter().map(|k| k.key()).collect();
        let text = serde_json::to_string(&rates).unwrap();
        let mut at = 0;
        for key in &want {
            let found = text[at..].find(&format!("\"{key}\":")).unwrap();
            at += found + 1;
        }
        assert_eq!(keys.len(), want.len());
        assert_eq!(serde_json::from_value::<Rates>(json.clone()).unwrap(), rates);
        let mut missing = json;
        missing.as_object_mut().unwrap().remove("support_macro");
        let e = serde_json::from_value::<Rates>(missing).unwrap_err().to_string();
        assert!(e.contains("support_macro"), "{e}");

        let difference = |kind: RateKind| Difference {
            value: None,
            ci_low: None,
            ci_high: None,
            undefined_draws: 0,
            questions: kind.index() as u64,
            statement: kind.key().to_owned(),
        };
        let differences = Differences::from_fn(difference);
        let compared: Vec<RateKind> = differences.iter().map(|(k, _)| k).collect();
        assert_eq!(
            compared,
            [
                RateKind::Completion,
                RateKind::SupportMicro,
                RateKind::ResolutionMicro,
                RateKind::ClaimFidelityMicro,
                RateKind::CitationPrecisionMicro,
                RateKind::CitationCoverageMicro
            ]
        );
        let json = serde_json::to_value(&differences).unwrap();
        assert_eq!(serde_json::from_value::<Differences>(json).unwrap(), differences);
        assert!(differences.get(RateKind::SupportMacro).is_none());
    }

    /// One reading of a rate: a measured value to four decimals; the
    /// words otherwise, never 0 or 100%.
    #[test]
    fn a_rate_reads_as_its_value_or_as_words() {
        let mut rate = Rate {
            value: Some(0.75),
            numerator: 3.0,
            denominator: 4.0,
            ci_low: Some(0.5),
            ci_high: Some(1.0),
            undefined_draws: 0,
            status: RateStatus::Measured,
            reason: None,
            questions: None,
        };
        assert_eq!(
            (rate.display_value(), rate.display_fraction(), rate.display_interval()),
            ("0.7500".to_owned(), "3 / 4".to_owned(), "[0.5000, 1.0000]".to_owned())
        );
        rate.numerator = 1.23456;
        assert_eq!(rate.display_fraction(), "1.2346 / 4");
        assert_eq!(Count::short(1.23456).to_string(), "1.23");
        assert_eq!(Count::of(-0.0).to_string(), "0", "an empty sum is 0, not -0");
        rate.value = None;
        assert_eq!(rate.display_value(), NO_VALUE);
        rate.value = Some(f64::NAN);
        assert_eq!(rate.display_value(), NO_VALUE);
        rate.status = RateStatus::NotApplicable;
        assert_eq!(rate.display_value(), NOT_APPLICABLE);
        rate.status = RateStatus::Unmeasured;
        assert_eq!(rate.display_value(), UNMEASURED);
        let d = Difference {
            value: Some(0.25),
            ci_low: Some(-0.1),
            ci_high: None,
            undefined_draws: 0,
            questions: 2,
            statement: String::new(),
        };
        assert_eq!((d.display_value(), d.display_interval()), ("+0.2500".to_owned(), "-".to_owned()));
    }
}
