//! Pure domain logic of cohort, shared by every role. No I/O happens here:
//! callers read files, clocks and sockets and hand this crate bytes and
//! instants, so everything below is tested with plain unit and property
//! tests.
//!
//! - [`config`]: `cohort.toml`, parsed raw and then validated.
//! - [`questions`]: `questions.json`, with line numbers for every error.
//! - [`cohort`]: the five cohort files validated together.
//! - [`order`]: the run order, algorithm v1 (ChaCha20 + Fisher-Yates).
//! - [`manifest`]: the write-once manifest and amendments.
//! - [`taxonomy`]: outcomes and attempt classes.
//! - [`lifecycle`]: the run lifecycle rules: retries, final outcomes, closing.
//! - [`hash`]: SHA-256 helpers.
//! - [`http_class`]: classifying a provider's HTTP answer (attempt classes).
//! - [`scoring`]: citation normalisation, markers, sentences, claims, the
//!   deterministic metrics, the judge prompt and verdict parser.
//! - [`passages`]: splitting captured source text into passages and ranking
//!   them against a claim (BM25), so the judge sees the relevant passage.
//! - [`stats`]: the cluster bootstrap over questions (algorithm
//!   `cohort-bootstrap-v1`) and numpy's linear percentile.
//! - [`agreement`]: raw agreement, Cohen's kappa (nominal and weighted),
//!   pass-class calibration scores with bootstrap intervals over items
//!   (`cohort-calibration-v1`) or answers (`cohort-calibration-v2`),
//!   majority vote.
//! - [`uncertainty_key`]: `uncertainty_key.json` of seed 004 (required with
//!   `[review]`), and the rule for abstentions on answerable questions.
//! - [`error`]: validation errors that name the file, the line and the field.

pub mod agreement;
pub mod cohort;
pub mod config;
pub mod error;
pub mod hash;
pub mod http_class;
pub mod lifecycle;
pub mod manifest;
pub mod order;
pub mod passages;
pub mod questions;
pub mod scoring;
pub mod stats;
pub mod taxonomy;
pub mod uncertainty_key;

pub use cohort::{CohortFiles, ValidatedCohort};
pub use error::{Problem, ValidationError};

/// The version of the metric definitions. Bumped whenever a definition
/// changes, so two runs are never silently compared across incompatible
/// metrics (seed 000 section 8). Written into every manifest and result.
///
/// History: 1, the first; 2, the reference table from the API's citations
/// (Perplexity's numbered `citations`, `url_citation` annotations), no
/// claim from a reasoning block, a parenthesised citation after the full
/// stop belonging to the sentence before, and a cut-off answer failed; 3,
/// the human-review rates (claim fidelity, citation precision, coverage)
/// micro and equal-question macro with paired differences on the report's
/// bootstrap draws, the publication state, no resolution comparison across
/// citation formats, rates measured on fewer outputs than completed
/// (scoring errors) saying so, the judge's evidence from the captured
/// original source for every arm (never the vendor's snippet) with a claim
/// judged only when every source it cites has text, the source figures,
/// and abstentions on answerable questions counted apart from the 0/1/2
/// uncertainty mean (issue 20); 4, a cited table row and a cited heading
/// written as a statement are claims, the review's pair reasons for a
/// partly supporting and a contradicting source, a split claim's pairs
/// judged per part, a merged paraphrase's repeated pairs counted once, an
/// added claim's citations scored as its pairs, and the secondary-only
/// source rate measured from the reviewers' label (issue 20, review
/// procedure).
///
/// When it changes: ARCHITECTURE.md, "When METRICS_VERSION changes".
pub const METRICS_VERSION: u32 = 4;

/// The version of the cohort tool, written into every manifest.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
