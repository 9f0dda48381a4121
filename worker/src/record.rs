//! The run record (seed 004, "Run and output record"): everything kept
//! about one run, stored as JSON in the artifact store; the ledger keeps
//! its hash.

use serde::{Deserialize, Serialize};

use crate::adapters::{TokenUsage, Turn};
use crate::score::{RunScore, SystemSource};

/// The label recorded when the system disclosed no version.
pub const NOT_DISCLOSED: &str = "not disclosed";

/// One run, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub record_version: u32,
    pub cohort: String,
    pub manifest_sha256: String,
    pub metrics_version: u32,
    pub run_id: String,
    pub question_id: String,
    pub arm: String,
    /// The arm's label (the product).
    pub product: String,
    /// True for the built-in simulated system: never a real product.
    pub simulated: bool,
    pub repeat: u32,
    pub attempt: u32,
    /// The exact prompt submitted.
    pub prompt: String,
    /// The whole conversation: the prompt, any clarifying question and the
    /// reply (the suffix only), and the output.
    pub conversation: Vec<Turn>,
    /// SHA-256 of the raw output in the artifact store; `None` when there
    /// was no output.
    pub output_sha256: Option<String>,
    pub citation_urls: Vec<String>,
    /// The model/version label the system reported, or "not disclosed".
    pub observed_version: String,
    pub pinned_version: String,
    /// The arm's adapter settings, as frozen.
    pub settings: serde_json::Value,
    pub started_at: String,
    pub ended_at: String,
    pub duration_ms: i64,
    pub outcome: String,
    pub failure_reason: Option<String>,
    pub attempt_class: String,
    pub token_usage: Option<TokenUsage>,
    /// Cost in the catalog currency; `None` when unknown (never invented).
    pub cost: Option<f64>,
    pub currency: Option<String>,
    /// Source passages the system returned itself (used as evidence).
    pub system_sources: Vec<SystemSource>,
    /// Claims, citations, captures, verdicts and judge traces of a
    /// completed output; `None` for other outcomes.
    pub scoring: Option<RunScore>,
    /// Why a completed output could not be scored (e.g. too large).
    pub scoring_error: Option<String>,
}

/// The current layout version of [`RunRecord`].
pub const RECORD_VERSION: u32 = 2;
