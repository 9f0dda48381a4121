//! Human review (seed 004, "Claim extraction and source review"): the
//! export of blinded review items, the import of two reviewers' labels and
//! a third person's adjudications, and the review metrics of a report
//! (claim fidelity, citation precision and coverage, uncertainty handling,
//! agreement before adjudication). docs/review.md is the user's guide.
//!
//! Where things live (`DIR` is the cohort directory):
//! - `DIR/.cohort/review/blinding.json`: arm id -> random code. Never in a
//!   reviewer's folder: the reviewers see the codes only.
//! - `DIR/.cohort/review/export.json`: every exported item with the run,
//!   arm and claim it stands for (what the report needs to unblind), and
//!   the extraction check the claims were built from, if any.
//! - `DIR/.cohort/review/check.json`: the extraction check's items, when a
//!   person other than the scorers checked the extraction first
//!   ([`check`]); its file is kept as `imported/extraction-check.<ext>`.
//! - `DIR/.cohort/review/imported/`: each imported file, byte for byte,
//!   write-once (`reviewer-<id>.<ext>`, `adjudication.<ext>`; a Label
//!   Studio export as `label-studio-<sha256 prefix>.json` beside the
//!   `reviewer-<id>.jsonl` rows read from it), so both original ratings
//!   are kept.
//! - `--format label-studio` adds `label-studio/label_config.xml` and
//!   `label-studio/tasks.json` to the export folder ([`label_studio`]);
//!   `cohort review sheet` writes a reviewer's page ([`sheet`]).
//! - the export folder (`DIR/review/<UTC timestamp>/` or `--out`): one
//!   folder per reviewer with `items.csv` and `items.jsonl`, write-once.
//!
//! Architecture Invariant: a reviewer's folder holds no arm id, product
//! label or version label; the only link from a code to an arm is
//! `blinding.json` under the state directory.

pub mod check;
pub mod export;
pub mod import;
pub mod label_studio;
pub mod metrics;
pub mod render;
pub mod sheet;
pub mod table;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use metrics::{GoldClaim, ReviewParts, ReviewSummary, gold_labels, summarise_review};

/// The review state directory under a cohort's `.cohort/`.
pub const REVIEW_DIR: &str = "review";
/// The arm -> code mapping.
pub const BLINDING_FILE: &str = "blinding.json";
/// The exported items, unblinded.
pub const EXPORT_FILE: &str = "export.json";
/// The imported files, kept byte for byte.
pub const IMPORTED_DIR: &str = "imported";

/// The five claim labels of seed 004, in the order of the disagreement
/// matrix.
pub const CLAIM_LABELS: [&str; 5] =
    ["fully_supported", "partially_supported", "unsupported", "contradicted", "unverifiable"];
/// Why a cited source does not fully support its claim: the four of seed
/// 004's precision rule (the reference is broken, fabricated, inaccessible
/// or irrelevant), and the two a relevant, accessible source can give
/// (it supports only part of the claim, or it contradicts it). None counts
/// as supporting; the report counts pairs by reason.
pub const PAIR_REASONS: [&str; 6] =
    ["broken", "fabricated", "inaccessible", "irrelevant", "partially_supports", "contradicts"];
/// The claim labels that need their `reason`: unverifiable (the specific
/// reason) and contradicted (the conflicting evidence and the reasoning:
/// seed 004, "record conflicting evidence and reasoning").
pub const LABELS_NEEDING_REASON: [&str; 2] = ["unverifiable", "contradicted"];
/// The separator of split parts (and of their labels and reasons).
pub const PART_SEPARATOR: &str = "||";

/// The columns of a reviewer's file, in order (CSV header; JSONL keys).
pub const REVIEW_COLUMNS: [&str; 28] = [
    "reviewer",
    "item_id",
    "kind",
    "output",
    "question_id",
    "question",
    "claim_item",
    "claim",
    "line",
    "cited",
    "urls",
    "source_text",
    "answerable",
    "required_caveats",
    "known_disputes",
    "output_text",
    // What the reviewer fills in:
    "label",
    "reason",
    "supports",
    "secondary",
    "missing_original",
    "cited_supports",
    "uncertainty",
    "abstained",
    "split",
    "merge_with",
    "not_factual",
    "note",
];

/// The columns of an adjudication file.
pub const ADJUDICATION_COLUMNS: [&str; 5] = ["item_id", "final_label", "reason", "rationale", "adjudicator"];

/// Where a cohort's review state lives.
pub fn state_dir(cohort_dir: &Path) -> PathBuf {
    cohort_dir.join(cohort_artifacts::STATE_DIR).join(REVIEW_DIR)
}

/// Why a review step could not be done. Nothing is written when one is
/// returned.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{file}:{line}:{column}: field `{field}`: {message}")]
    BadInput { file: String, line: usize, column: usize, field: String, message: String },
    #[error("{file}: {message}")]
    BadFile { file: String, message: String },
    #[error("{0}")]
    Refused(String),
    #[error("ledger: {0}")]
    Ledger(#[from] cohort_ledger::LedgerError),
    #[error("the record of run {run_id} (artifact {sha256}) cannot be used: {why}")]
    CorruptRecord { run_id: String, sha256: String, why: String },
}

impl ReviewError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> ReviewError {
        ReviewError::Io { what: what.into(), source }
    }

    /// A CSV or JSONL file of `file` that does not parse, where.
    pub(crate) fn table(file: impl Into<String>, (line, column, message): table::TableError) -> ReviewError {
        ReviewError::BadInput { file: file.into(), line, column, field: "(row)".into(), message }
    }
}

/// `blinding.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blinding {
    pub kind: String,
    pub manifest_sha256: String,
    /// Arm id -> the code reviewers see.
    pub codes: BTreeMap<String, String>,
}

/// What an exported item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Claim,
    Pair,
    Uncertainty,
}

impl ItemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Claim => "claim",
            ItemKind::Pair => "pair",
            ItemKind::Uncertainty => "uncertainty",
        }
    }
}

/// One exported item, unblinded (in `export.json` only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedItem {
    pub item_id: String,
    pub kind: ItemKind,
    pub run_id: String,
    pub arm: String,
    pub question_id: String,
    /// The output code reviewers see.
    pub output: String,
    /// For a pair: its claim's item id.
    pub claim_item: Option<String>,
    /// For a claim: its 1-based id in the run's score.
    pub claim_id: Option<u32>,
    /// For a pair: the cited index and its URL.
    pub citation: Option<u32>,
    pub url: Option<String>,
    /// For an output (its uncertainty item): its reference table, index ->
    /// URL, so a claim a reviewer adds can cite by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub citations: BTreeMap<u32, String>,
}

/// `export.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportIndex {
    pub kind: String,
    pub manifest_sha256: String,
    pub exported_at: String,
    pub reviewers: Vec<String>,
    /// The folder the reviewers' files were written to.
    pub folder: String,
    pub items: Vec<ExportedItem>,
    /// The extraction check the scorers' claims were built from
    /// ([`check`]); absent without one (and in indexes written before it
    /// existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extraction_check: Option<check::ExtractionCheckRecord>,
}

/// Everything imported for a cohort, parsed: what the report computes the
/// review metrics from.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewInput {
    pub index: ExportIndex,
    /// Reviewer id -> their parsed labels, in import order.
    pub reviewers: Vec<import::ReviewerLabels>,
    pub adjudication: Option<import::Adjudication>,
    /// The imported files byte for byte (name, bytes), published in the
    /// report folder as `review-imported-<name>`: both original ratings and
    /// the adjudication's rationales.
    pub imported_files: Vec<(String, Vec<u8>)>,
}

/// Whether the cohort in `cohort_dir` declares a human review: a review
/// (or its extraction check) was exported for it (`cohort review export`
/// wrote `export.json` or `check.json`). A report of such a cohort is
/// preliminary until the review is imported and adjudicated.
pub fn declared(cohort_dir: &Path) -> bool {
    let state = state_dir(cohort_dir);
    state.join(EXPORT_FILE).is_file() || state.join(check::CHECK_INDEX_FILE).is_file()
}

/// An export index (`export.json`, or the extraction check's
/// `check.json`) and the SHA-256 of its bytes, `None` when it was not
/// written; `what` it is and the `command` that writes it name a file that
/// does not parse.
pub(crate) fn read_index(path: &Path, what: &str, command: &str) -> Result<Option<(ExportIndex, String)>, ReviewError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReviewError::io(path.display().to_string(), e)),
    };
    let index: ExportIndex = serde_json::from_slice(&bytes).map_err(|e| ReviewError::BadFile {
        file: path.display().to_string(),
        message: format!("is not {what} ({e}); it is written by `{command}`"),
    })?;
    Ok(Some((index, cohort_core::hash::sha256_hex(&bytes))))
}

/// Reads what has been exported and imported for the cohort in
/// `cohort_dir`; `None` when nothing was exported or no reviewer's labels
/// were imported yet.
pub fn load(cohort_dir: &Path) -> Result<Option<ReviewInput>, ReviewError> {
    let dir = state_dir(cohort_dir);
    let Some((index, _)) = read_index(&dir.join(EXPORT_FILE), "a review export index", "cohort review export")? else {
        return Ok(None);
    };
    let imported = import::read_imported(&dir.join(IMPORTED_DIR), &index)?;
    if imported.0.is_empty() {
        return Ok(None);
    }
    let imported_dir = dir.join(IMPORTED_DIR);
    let mut imported_files = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&imported_dir)
        .map_err(|e| ReviewError::io(imported_dir.display().to_string(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    for path in names {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| ReviewError::io(path.display().to_string(), e))?;
        imported_files.push((name, bytes));
    }
    Ok(Some(ReviewInput { index, reviewers: imported.0, adjudication: imported.1, imported_files }))
}
