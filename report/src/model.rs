//! The numbers of a report, as `summary.json` holds them (schema:
//! docs/report.md). Every writer (Markdown, HTML, plots) renders a
//! [`Summary`]; `cohort verify` recomputes one and compares it field by
//! field; `scripts/rederive_report.py` recomputes its headline numbers from
//! `runs.csv` and `claims.jsonl` alone.
//!
//! Honest denominators: every [`Rate`] carries its numerator and
//! denominator, and a rate that cannot be computed says why
//! ([`RateStatus::NotApplicable`] when there is nothing to measure,
//! [`RateStatus::Unmeasured`] when there was something but it was not
//! measured); neither is ever shown as 0 or 100%. The rates themselves,
//! and how they read as text, are defined in [`crate::rates`] and
//! re-exported here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::rates::{
    Compared, Count, Difference, Differences, Fixed, NO_VALUE, NOT_APPLICABLE, PairScope, Pooling, Rate, RateKind,
    RateStatus, Rates, Reading, Signed, UNDEFINED, UNMEASURED,
};

/// The layout version of `summary.json`; bumped when a field changes meaning.
/// 3: `time_cost` keeps the price-catalogue estimate (`estimated_cost`,
/// was `total_cost`), the actual cost, credits, plans and regions apart;
/// `sources` per arm and category.
pub const REPORT_FORMAT: u32 = 3;

/// Everything `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Whether the report may be published as final, and why not: the
    /// first field, so it is the first line of `summary.json` (as of
    /// `summary.md` and `index.html`).
    pub publication_state: PublicationState,
    /// Set in a redacted report (`cohort report --redact`): what it leaves
    /// out ([`crate::write::REDACTED`]), on the first line with the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redaction: Option<String>,
    /// Always `cohort-report`.
    pub kind: String,
    pub report_format: u32,
    pub metrics_version: u32,
    pub tool_version: String,
    pub manifest_sha256: String,
    pub cohort: String,
    /// When this report was computed (RFC 3339 UTC). Not compared by verify.
    pub generated_at: String,
    /// Every arm or judge involved is the built-in simulated one.
    pub simulated: Simulated,
    pub method: Method,
    pub publication: PublicationBlock,
    pub bootstrap: BootstrapInfo,
    /// Question ids in the frozen file's order: the bootstrap's clusters.
    pub questions: Vec<String>,
    pub categories: Vec<String>,
    pub arms: Vec<ArmSummary>,
    /// Paired differences between arms of one workflow.
    pub comparisons: Vec<Comparison>,
    /// Attempts by class, per arm (failure taxonomy), discarded reports
    /// excluded.
    pub attempts_by_class: BTreeMap<String, BTreeMap<String, u64>>,
    /// Completions over the collection window: per arm, one count per hour
    /// since the window opened.
    pub completions_by_hour: BTreeMap<String, Vec<u64>>,
    /// The other files of the report folder, with their SHA-256.
    pub files: Vec<FileEntry>,
    /// Things the reader should know (drill-down cut, records unreadable...).
    pub notes: Vec<String>,
    /// Human review (seed 004): `None` when no review was imported (the
    /// writers then say claim fidelity, precision and coverage are
    /// unmeasured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::review::ReviewSummary>,
}

/// Whether a report is `preliminary` or `final` (seed 004: "No score may be
/// published until actual runs and independent human reviews are
/// complete"), and what is missing while it is preliminary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationState {
    /// [`PublicationState::PRELIMINARY`] or [`PublicationState::FINAL`].
    pub state: String,
    /// What is missing for a final report, one sentence each; empty when
    /// final.
    pub missing: Vec<String>,
}

impl PublicationState {
    pub const PRELIMINARY: &'static str = "preliminary";
    pub const FINAL: &'static str = "final";

    /// A state from what is missing: final when nothing is.
    pub fn from_missing(missing: Vec<String>) -> PublicationState {
        let state = if missing.is_empty() { Self::FINAL } else { Self::PRELIMINARY };
        PublicationState { state: state.to_owned(), missing }
    }

    pub fn is_final(&self) -> bool {
        self.state == Self::FINAL
    }

    /// The state and why, in one line: the first line of every writer.
    pub fn line(&self) -> String {
        if self.is_final() {
            "Publication state: final (every planned run is final, and any declared human review is imported from two reviewers and adjudicated)"
                .to_owned()
        } else {
            format!(
                "Publication state: preliminary, not for publication as final results ({})",
                self.missing.join("; ")
            )
        }
    }
}

/// What is simulated, so every renderer labels it SIMULATED.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Simulated {
    /// Arms whose system is the built-in simulated one.
    pub arms: Vec<String>,
    /// Whether any verdict came from the built-in simulated judge.
    pub judge: bool,
}

/// How it was run (seed 000 section 8, seed 004 "Publication").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Method {
    pub frozen_at: String,
    pub seed: u64,
    pub order_algorithm: String,
    pub order_sha256: String,
    pub config_sha256: String,
    /// The frozen files and their SHA-256 (questions.json among them).
    pub files: BTreeMap<String, String>,
    /// SHA-256 of each question's text, by question id.
    pub question_sha256: BTreeMap<String, String>,
    pub window_hours: u32,
    /// When the window opened and closes (RFC 3339 UTC), from the ledger.
    pub window_opened_at: Option<String>,
    pub window_closes_at: Option<String>,
    /// The first recorded start and the last recorded end of any run.
    pub first_start_at: Option<String>,
    pub last_end_at: Option<String>,
    pub repeats: u32,
    pub repeat_schedule: Option<String>,
    pub run_timeout_secs: u64,
    pub retry: cohort_core::config::RetryPolicy,
    pub aborted: Option<String>,
    pub amendments: Vec<String>,
    pub judge: Option<JudgeMethod>,
    /// The judging pass whose verdicts this report counts (docs/judging.md);
    /// `None`: the verdicts recorded with each run.
    #[serde(default)]
    pub judge_pass: Option<cohort_records::passes::PassConfig>,
    pub arms: Vec<ArmMethod>,
}

impl Method {
    /// Where the report's verdicts come from, in words (shown in every
    /// rendering of the method block).
    pub fn verdict_source(&self) -> String {
        use cohort_records::passes::PassKind;
        match &self.judge_pass {
            None => "Verdicts as recorded with each run (no judging pass)".to_owned(),
            Some(p) => {
                let kind = match p.kind {
                    PassKind::Judge => "one judge".to_owned(),
                    PassKind::Ensemble => format!("majority vote of {}", p.members.join(", ")),
                };
                let judge = p
                    .judge
                    .as_ref()
                    .map(|j| {
                        format!(
                            ", judge `{}` expecting served model `{}`{}",
                            j.proxy_judge,
                            j.served_model_expected,
                            if j.strict { ", strict" } else { "" }
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "Verdicts from judging pass `{}` ({kind}, created {}{judge}); claims the pass has not judged count as unjudged (not_sent)",
                    p.name, p.created_at
                )
            }
        }
    }
}

/// One arm as frozen and as observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmMethod {
    pub id: String,
    /// The product.
    pub label: String,
    pub adapter: String,
    pub workflow: String,
    pub simulated: bool,
    pub pinned_version: String,
    /// Every version label reported by the arm's runs, with how many runs
    /// reported it ("not disclosed" when none was).
    pub observed_versions: BTreeMap<String, u64>,
    pub vendor_lineage: String,
    pub settings: serde_json::Value,
    pub controls_not_disabled: Vec<String>,
}

/// The judge as frozen, and the models that actually served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeMethod {
    pub provider: String,
    pub model: String,
    pub pinned_served_model: String,
    pub vendor_lineage: String,
    pub temperature: f64,
    pub batch_size: u32,
    pub lineage_waiver: Option<String>,
    /// Model that answered -> claims it judged (from the verdicts).
    pub served_models: BTreeMap<String, u64>,
    pub simulated: bool,
}

/// The publication fields a cohort declares, as frozen in its config
/// (`[publication]`); a `None` is shown as "not declared".
pub use cohort_core::config::Publication as PublicationBlock;

/// How the intervals were computed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapInfo {
    pub algorithm: String,
    pub draws: u32,
    pub seed: u64,
    /// Clusters resampled: the cohort's questions.
    pub clusters: u64,
    pub interval: String,
}

/// Counts of planned runs by final outcome, plus what was scored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub planned: u64,
    /// Started at least once: planned minus not_run.
    pub attempted: u64,
    pub completed: u64,
    pub refused: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub unavailable: u64,
    pub not_run: u64,
    /// Not yet final (the cohort is still running).
    pub pending: u64,
    /// Completed runs whose output was scored (claims and citations read).
    pub scored: u64,
    /// Scored runs with at least one judged claim.
    pub judged_runs: u64,
}

/// Claim counts of scored runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimCounts {
    /// Every extracted claim (assertive sentence of a body).
    pub extracted: u64,
    /// Claims with at least one citation marker.
    pub cited: u64,
    pub uncited: u64,
    /// Claims with a YES or NO verdict.
    pub judged: u64,
    /// YES verdicts.
    pub supported: u64,
    /// Cited claims without a verdict, by reason (`provider_error`,
    /// `source_unavailable`, `model_mismatch`, `not_sent`...).
    pub unjudged: BTreeMap<String, u64>,
}

/// Citation counts of scored runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CitationCounts {
    /// Every in-text marker, groups and ranges expanded.
    pub total: u64,
    pub unresolved: u64,
    pub contradictions_surfaced: u64,
}

/// The cited sources of scored outputs (seed 004: "unique sources per
/// product and category", "inaccessible-source rates"). A source is a
/// distinct normalised URL of an output's reference table; `sources.jsonl`
/// has one line per output and source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCounts {
    /// Sources per output, summed over the scored outputs.
    pub cited: u64,
    /// Distinct normalised URLs over all those outputs: a source cited by
    /// several outputs counts once.
    pub unique: u64,
    /// A capture of it answered HTTP 200.
    pub accessible: u64,
    /// Captured, never accessible.
    pub inaccessible: u64,
    /// Never captured: its accessibility is unknown (in neither side of
    /// the inaccessible-source rate).
    pub uncaptured: u64,
}

/// Elapsed time and cost, described (never ranked).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeCost {
    /// Runs with a recorded duration.
    pub timed_runs: u64,
    pub median_duration_ms: Option<i64>,
    pub p90_duration_ms: Option<i64>,
    pub total_duration_ms: i64,
    /// The price-catalogue estimate (the run's token usage at the
    /// catalogue's prices): an estimate, never what was charged. Completed
    /// runs with one, its total in `estimated_cost_currency`, and the
    /// completed runs without one (kept unknown, never invented).
    pub estimated_cost_runs: u64,
    pub estimated_cost: Option<f64>,
    pub estimated_cost_currency: Option<String>,
    pub unknown_estimated_cost_runs: u64,
    /// What was actually charged, as an adapter or the person reported it;
    /// no adapter and no `cohort submit` flag reports one in this version,
    /// so every completed run counts as unknown (seed 004: "Unknown
    /// provider costs stay unknown").
    pub actual_cost_runs: u64,
    pub actual_cost: Option<f64>,
    pub actual_cost_currency: Option<String>,
    pub unknown_actual_cost_runs: u64,
    /// Runs whose person reported the credits debited (manual runs), and
    /// their sum when every one reads as a decimal number (credits are
    /// never turned into money).
    pub credits_runs: u64,
    pub credits_debited: Option<f64>,
    /// Runs by the subscription plan and by the region the person reported
    /// (manual runs; runs that did not say are not counted).
    pub plans: BTreeMap<String, u64>,
    pub regions: BTreeMap<String, u64>,
}

// === impl TimeCost: the cost columns as text, one wording for every writer ===

impl TimeCost {
    /// The price-catalogue estimate: `1.2500 USD (2 runs; 1 unknown)`.
    pub fn estimated_text(&self) -> String {
        money_text(
            self.estimated_cost,
            self.estimated_cost_currency.as_deref(),
            self.estimated_cost_runs,
            self.unknown_estimated_cost_runs,
        )
    }

    /// The actual charge, as reported: `unknown (3 runs: not reported)`
    /// when no run reported one.
    pub fn actual_text(&self) -> String {
        if self.actual_cost_runs == 0 {
            return format!("unknown ({} run(s): not reported)", self.unknown_actual_cost_runs);
        }
        money_text(
            self.actual_cost,
            self.actual_cost_currency.as_deref(),
            self.actual_cost_runs,
            self.unknown_actual_cost_runs,
        )
    }

    /// Credits debited as the person reported them, never money.
    pub fn credits_text(&self) -> String {
        match (self.credits_runs, self.credits_debited) {
            (0, _) => "not reported".to_owned(),
            (n, Some(total)) => format!("{total} credits ({n} run(s))"),
            (n, None) => format!("{n} run(s) report credits, not all as numbers: no total"),
        }
    }

    /// `Pro: 2, Free: 1`, or `not reported`.
    pub fn by_run_text(values: &BTreeMap<String, u64>) -> String {
        if values.is_empty() {
            return "not reported".to_owned();
        }
        values.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ")
    }
}

fn money_text(total: Option<f64>, currency: Option<&str>, runs: u64, unknown: u64) -> String {
    let total = match total {
        Some(t) => format!("{t:.4} {}", currency.unwrap_or("")).trim_end().to_owned(),
        None if runs > 0 => "in several currencies: no total".to_owned(),
        None => "unknown".to_owned(),
    };
    format!("{total} ({runs} run(s); {unknown} unknown)")
}

/// One arm's numbers, overall and per category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmSummary {
    pub id: String,
    pub label: String,
    pub workflow: String,
    pub simulated: bool,
    pub counts: Counts,
    pub claims: ClaimCounts,
    pub citations: CitationCounts,
    #[serde(default)]
    pub sources: SourceCounts,
    pub rates: Rates,
    pub time_cost: TimeCost,
    pub categories: Vec<CategorySummary>,
}

/// An arm's numbers within one category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategorySummary {
    pub category: String,
    pub counts: Counts,
    pub claims: ClaimCounts,
    pub citations: CitationCounts,
    #[serde(default)]
    pub sources: SourceCounts,
    pub rates: Rates,
}

/// Two arms of one workflow, compared on the questions both completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub workflow: String,
    pub a: String,
    pub b: String,
    /// Questions where both arms completed at least one run.
    pub completed_pairs: u64,
    /// All questions (the all-attempt denominator).
    pub questions: u64,
    /// The all-attempt completion rates, beside the paired figures.
    pub a_completion: Rate,
    pub b_completion: Rate,
    /// One difference per compared rate ([`RateKind::comparison`]), fields
    /// of the comparison in `summary.json` (`completion`, `support_micro`,
    /// `resolution_micro`).
    #[serde(flatten)]
    pub differences: Differences,
}

/// A file of the report folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub sha256: String,
    pub bytes: u64,
}

// === per-run views, shared by runs.csv, the HTML page and the plots ===

/// One planned run as the report sees it: ledger state plus what its record
/// says. One per planned run, in planned order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub run_id: String,
    pub position: u64,
    pub question_id: String,
    pub category: String,
    pub arm: String,
    pub workflow: String,
    pub repeat: u32,
    pub simulated: bool,
    /// The final outcome, or `pending` when not yet final.
    pub outcome: String,
    /// The class of the last attempt (empty when never attempted).
    pub attempt_class: String,
    pub reason: String,
    pub attempts: u32,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub started_ms: Option<i64>,
    pub duration_ms: Option<i64>,
    pub observed_version: String,
    pub pinned_version: String,
    pub record_sha256: String,
    /// Set when the output was scored.
    pub scored: Option<RunScoreView>,
    /// The price-catalogue estimate of the run's cost (the record's
    /// `cost`), and its currency: estimated, not charged.
    pub estimated_cost: Option<f64>,
    pub estimated_cost_currency: Option<String>,
    /// The actual charge, when an adapter or the person reported one (none
    /// does in this version: always `None`).
    #[serde(default)]
    pub actual_cost: Option<f64>,
    #[serde(default)]
    pub actual_cost_currency: Option<String>,
    /// A manual run's credits debited, exactly as the person wrote them,
    /// its plan and its region (`cohort submit`); `None` when not given.
    #[serde(default)]
    pub credits_debited: Option<String>,
    #[serde(default)]
    pub plan: Option<String>,
    #[serde(default)]
    pub region: Option<String>,
    /// Why a completed output was not scored (the record's
    /// `scoring_error`).
    #[serde(default)]
    pub scoring_error: Option<String>,
}

/// The scoring figures of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunScoreView {
    pub claims: u64,
    pub cited: u64,
    pub judged: u64,
    pub supported: u64,
    pub citations: u64,
    pub unresolved: u64,
    pub uncited_sentences: u64,
    pub contradictions: u64,
    pub unjudged: BTreeMap<String, u64>,
    /// How the output cites: `numbered` or `markdown_links` (empty for a
    /// record that does not say).
    #[serde(default)]
    pub citation_format: String,
    /// Cited sources (distinct normalised URLs of its reference table),
    /// and of them the inaccessible and the never captured.
    #[serde(default)]
    pub sources: u64,
    #[serde(default)]
    pub inaccessible_sources: u64,
    #[serde(default)]
    pub uncaptured_sources: u64,
}

/// What the HTML page shows when a run is opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillDown {
    pub run_id: String,
    pub prompt: String,
    /// The clarification exchange and the output, as recorded.
    pub conversation: Vec<(String, String)>,
    /// The raw output (`None` when there was none).
    pub output: Option<String>,
    pub claims: Vec<DrillClaim>,
    pub served_judge_models: Vec<String>,
    pub attempts: Vec<DrillAttempt>,
}

/// One claim in a drill-down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillClaim {
    pub index: u32,
    pub text: String,
    pub cited: Vec<u32>,
    /// `YES`, `NO`, or `unjudged (reason)`, or `not judged (uncited)`.
    pub verdict: String,
    pub judge_model: Option<String>,
    /// The judge's reply line.
    pub judge_line: Option<String>,
    /// The evidence passages shown to the judge, per cited index.
    pub evidence: Vec<DrillEvidence>,
}

/// One cited source's evidence in a drill-down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillEvidence {
    pub index: u32,
    pub url: Option<String>,
    pub title: Option<String>,
    /// `system`, `capture`, `given` or `none`.
    pub source: String,
    pub passages: Vec<String>,
}

/// One attempt in a drill-down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrillAttempt {
    pub attempt: u32,
    pub class: String,
    pub http_status: u16,
    pub detail: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub worker: String,
}

/// An arm's name as shown: its id, with SIMULATED when it is simulated.
pub fn arm_display(id: &str, simulated: bool) -> String {
    if simulated { format!("{id} (SIMULATED)") } else { id.to_owned() }
}
