//! The metrics of seed 000 section 3: the deterministic ones (3.1) and the
//! judged support rate (3.2), with honest denominators.
//!
//! Two rules carry the weight here. A rate with an empty denominator is
//! `None`, never 0: a report with no citations has no resolution rate, and a
//! run whose claims could not be judged has no support rate (rendered
//! "n/a (unmeasured)"). And an unjudged claim counts neither as YES nor as
//! NO, so an exhausted quota or a dead source cannot pass for a quality
//! collapse.

use serde::{Deserialize, Serialize};

use super::Reference;
use super::claims::Claim;
use super::verdicts::{UnjudgedReason, Verdict};

/// How an unmeasured rate is shown to a reader (seed 000 section 3.2).
pub const UNMEASURED: &str = "n/a (unmeasured)";

/// A cost in the catalog currency. Unknown cost is `None`, never invented.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Millionths of the currency unit.
    pub micros: i64,
    /// ISO 4217 code of the catalog currency (`USD`).
    pub currency: String,
}

/// The deterministic metrics of one report (seed 000 section 3.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeterministicMetrics {
    /// Every index cited by an in-text marker of the body, comma groups and
    /// ranges expanded (`[1, 2]` is two, `[2-4]` three).
    pub total_citations: u32,
    /// Citations whose index has no entry in the reference table.
    pub unresolved_citations: u32,
    /// The distinct unresolved indices, ascending.
    pub unresolved_indices: Vec<u32>,
    /// (total - unresolved) / total; `None` when there are no citations.
    pub resolution_rate: Option<f64>,
    /// Assertive sentences of the body: the claims.
    pub assertive_sentences: u32,
    /// Assertive sentences carrying no citation marker.
    pub uncited_assertive_sentences: u32,
    /// Distinct conflicting-evidence pairs shown in conflict blocks.
    pub contradictions_surfaced: u32,
    /// Wall-clock time of the run, when known (not from the report text).
    pub wall_time_ms: Option<u64>,
    /// Cost of the run, when known (not from the report text).
    pub cost: Option<Cost>,
}

/// (total - unresolved) / total, or `None` when nothing was cited.
pub fn resolution_rate(total: u32, unresolved: u32) -> Option<f64> {
    (total > 0).then(|| f64::from(total.saturating_sub(unresolved)) / f64::from(total))
}

/// The judged support rate of a set of claims (seed 000 section 3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SupportSummary {
    /// Claims with a YES or NO verdict: the denominator.
    pub judged: u32,
    pub yes: u32,
    pub no: u32,
    /// Cited claims left without a verdict, excluded from the denominator.
    pub unjudged: u32,
    /// yes / judged; `None` when nothing was judged.
    pub rate: Option<f64>,
    /// The rate to four decimals, or "n/a (unmeasured)".
    pub rendered: String,
}

/// Support over `verdicts` (one per cited claim that was, or could have
/// been, judged). Unjudged verdicts count in neither direction.
pub fn support_summary<'a>(verdicts: impl IntoIterator<Item = &'a Verdict>) -> SupportSummary {
    let (mut yes, mut no, mut unjudged) = (0u32, 0u32, 0u32);
    for verdict in verdicts {
        match verdict {
            Verdict::Yes => yes += 1,
            Verdict::No => no += 1,
            Verdict::Unjudged(_) => unjudged += 1,
        }
    }
    let judged = yes + no;
    let rate = (judged > 0).then(|| f64::from(yes) / f64::from(judged));
    let rendered = rate.map_or_else(|| UNMEASURED.to_owned(), |r| format!("{r:.4}"));
    SupportSummary { judged, yes, no, unjudged, rate, rendered }
}

/// A piece of evidence for one claim: a snippet of a cited source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The citation index.
    pub index: u32,
    /// The source's canonical URL, when known.
    pub source_url: Option<String>,
    /// Captured text; never a placeholder.
    pub text: String,
}

/// What to do with one claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JudgePlan {
    /// Send to the judge with this evidence (never empty).
    Judge(Vec<Evidence>),
    /// Cannot be judged: record this reason; it stays out of the denominator.
    Unjudged(UnjudgedReason),
    /// The claim cites nothing: it is counted as uncited, not judged.
    NotCited,
}

/// Decides, per claim, whether it can be judged: a cited claim is judged
/// only when *every* source it cites has captured text; one cited source
/// without it (unreachable, unparseable, an unresolved index) makes the
/// claim `source_unavailable` ([`missing_sources`] names which), so a claim
/// citing [1,2] is never judged on [1] alone, and it is never judged
/// against a placeholder. `references[..].snippets` must hold only real
/// captured text; blank snippets are ignored.
pub fn plan_judging(claims: &[Claim], references: &[Reference]) -> Vec<JudgePlan> {
    claims
        .iter()
        .map(|claim| {
            if claim.cited.is_empty() {
                return JudgePlan::NotCited;
            }
            if !missing_sources(&claim.cited, references).is_empty() {
                return JudgePlan::Unjudged(UnjudgedReason::SourceUnavailable);
            }
            let evidence: Vec<Evidence> = claim
                .cited
                .iter()
                .filter_map(|index| references.iter().find(|r| r.index == *index))
                .flat_map(|r| {
                    r.snippets.iter().filter(|s| !s.trim().is_empty()).map(|s| Evidence {
                        index: r.index,
                        source_url: r.url.clone(),
                        text: s.clone(),
                    })
                })
                .collect();
            JudgePlan::Judge(evidence)
        })
        .collect()
}

/// The indices of `cited` whose source has no captured text (blank
/// snippets count as none), or that resolve to no reference, each once in
/// citing order: the sources that keep a claim unjudged
/// (`source_unavailable`).
pub fn missing_sources(cited: &[u32], references: &[Reference]) -> Vec<u32> {
    let mut missing = Vec::new();
    for index in cited {
        let has_text = references
            .iter()
            .find(|r| r.index == *index)
            .is_some_and(|r| r.snippets.iter().any(|s| !s.trim().is_empty()));
        if !has_text && !missing.contains(index) {
            missing.push(*index);
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No citations means no resolution rate, not a rate of zero.
    #[test]
    fn resolution_rate_is_none_without_citations() {
        assert_eq!(resolution_rate(0, 0), None);
        assert_eq!(resolution_rate(4, 1), Some(0.75));
        assert_eq!(resolution_rate(2, 2), Some(0.0));
    }

    /// Unjudged verdicts leave the denominator; nothing judged is unmeasured.
    #[test]
    fn support_excludes_unjudged_and_is_none_when_nothing_judged() {
        let unjudged = Verdict::Unjudged(UnjudgedReason::ProviderError);
        let s = support_summary(&[Verdict::Yes, Verdict::No, Verdict::Yes, unjudged]);
        assert_eq!((s.judged, s.yes, s.no, s.unjudged), (3, 2, 1, 1));
        assert_eq!(s.rendered, "0.6667");
        let none = support_summary(&[unjudged, unjudged]);
        assert_eq!(none.rate, None);
        assert_eq!(none.rendered, "n/a (unmeasured)");
    }

    fn claim(cited: &[u32]) -> Claim {
        Claim { id: 1, text: "x".into(), cited: cited.to_vec(), line: 1, offset: 0 }
    }

    fn reference(index: u32, snippets: &[&str]) -> Reference {
        Reference {
            index,
            title: None,
            url: Some(format!("https://x.org/{index}")),
            snippets: snippets.iter().map(|s| (*s).to_owned()).collect(),
            as_written: Vec::new(),
            origin: crate::scoring::ReferenceOrigin::Text,
        }
    }

    /// A claim is judged only when every source it cites has real text
    /// (issue 20: [1,3] with [3] empty was judged on [1] alone); without
    /// it the claim is source_unavailable, naming the sources without
    /// text, and uncited claims are not judged.
    #[test]
    fn plans_judging_only_when_every_cited_source_has_text() {
        let refs =
            vec![reference(1, &["real text"]), reference(2, &["  "]), reference(3, &[]), reference(4, &["more"])];
        let plans = plan_judging(&[claim(&[1, 3]), claim(&[2, 3]), claim(&[9]), claim(&[]), claim(&[1, 4])], &refs);
        assert_eq!(plans[0], JudgePlan::Unjudged(UnjudgedReason::SourceUnavailable));
        assert_eq!(missing_sources(&[1, 3], &refs), [3]);
        assert_eq!(plans[1], JudgePlan::Unjudged(UnjudgedReason::SourceUnavailable));
        assert_eq!(missing_sources(&[2, 3, 2], &refs), [2, 3]);
        assert_eq!(plans[2], JudgePlan::Unjudged(UnjudgedReason::SourceUnavailable));
        assert_eq!(missing_sources(&[9], &refs), [9]);
        assert_eq!(plans[3], JudgePlan::NotCited);
        let evidence = |index: u32, text: &str| Evidence {
            index,
            source_url: Some(format!("https://x.org/{index}")),
            text: text.into(),
        };
        assert_eq!(plans[4], JudgePlan::Judge(vec![evidence(1, "real text"), evidence(4, "more")]));
    }
}
