//! What scoring adds to a run record (the worker's `score` makes it).

use serde::{Deserialize, Serialize};

use crate::capture::Capture;

/// A source passage the system under test returned itself (e.g. Perplexity's
/// `search_results`), used as evidence instead of a capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemSource {
    pub url: String,
    pub title: Option<String>,
    pub snippet: String,
    /// The publication date the system gave for the source (Perplexity's
    /// `search_results[].date`), as it gave it; `None` when it gave none.
    #[serde(default)]
    pub published_at: Option<String>,
}

/// Where a reference's evidence came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceSource {
    pub index: u32,
    pub url: Option<String>,
    /// `given` (supplied with the report), `capture` (fetched),
    /// `simulated` (a SIMULATED system's own page), or `none` (no text
    /// recovered). `system` (the vendor's snippets used as evidence) is
    /// found only in records written before issue 20: a vendor's snippet is
    /// kept in the record's `system_sources`, never used as evidence.
    pub source: String,
}

/// The judge's side of a run's scoring.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    pub requested_model: String,
    /// The models that actually answered.
    pub served_models: Vec<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cost in millionths of `currency`; `None` when unknown.
    pub cost_micros: Option<i64>,
    pub currency: String,
    /// The class of every upstream attempt, in order.
    pub attempt_classes: Vec<String>,
    /// Why judging failed as a whole, when it did.
    pub error: Option<String>,
    /// The judge was the proxy's SIMULATED `sim` upstream: its verdicts
    /// measure nothing about real support.
    #[serde(default)]
    pub simulated: bool,
}

/// Everything scoring adds to a run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunScore {
    pub report: cohort_core::scoring::ScoreReport,
    pub evidence_sources: Vec<EvidenceSource>,
    pub captures: Vec<Capture>,
    pub judge: Option<JudgeSummary>,
    /// One trace record per judged claim (seed 000 section 3.3), with
    /// `judge_model` the model that actually answered.
    pub judge_traces: Vec<serde_json::Value>,
    /// Every upstream call of the judge (one per batch): the exact prompt
    /// and the raw reply (seed 000 section 7). Absent in records written
    /// before issue 20, and when no claim was sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_calls: Vec<JudgeCall>,
}

/// One upstream call of the judge, as sent and as answered (the judge
/// proxy's `JudgeCall`, docs/records.md): the batch's prompt and the
/// reply before any parsing, so a verdict can be re-read from what the
/// judge saw and said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeCall {
    /// The ids of the claims the call judged, in prompt order (the first
    /// is the prompt's "Claim 1"): the claim's index in the run record
    /// (`ScoredClaim::id`) as text.
    pub claim_ids: Vec<String>,
    /// The chat messages as sent: the system prompt, then the user prompt.
    pub messages: Vec<JudgeMessage>,
    /// The reply's text, verbatim; `None` when no attempt gave a usable
    /// reply.
    pub raw_reply: Option<String>,
    pub requested_model: String,
    /// The model the upstream said served the reply; `None` when it said
    /// nothing or nothing replied.
    pub served_model: Option<String>,
    /// Upstream attempts made for the call, retries included.
    pub attempts: u32,
    /// When the call started (RFC 3339, UTC, milliseconds).
    pub started_at: String,
    /// From the start to the reply or the last failure, permit waits and
    /// retries included.
    pub latency_ms: u64,
    /// `ok`, `deadline`, or the attempt class of the last failed attempt.
    pub outcome: String,
    /// The SIMULATED `sim` judge answered: a word-overlap rule, not a model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}

/// A chat message of a judge call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeMessage {
    /// `system` or `user`.
    pub role: String,
    /// Byte for byte as sent.
    pub content: String,
}
