//! `cohort.toml`: parsed into a raw serde struct that keeps the position of
//! every field, then checked by [`build_and_validate`] into a
//! [`CohortConfig`] whose invariants hold (every id valid and unique, every
//! arm pinned, the judge independent of every arm and at temperature 0).
//!
//! The validated config serializes to canonical JSON ([`CohortConfig::canonical_json`]):
//! struct fields in declaration order, map keys sorted. Its SHA-256 is the
//! manifest's `config_sha256`.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::error::{Problem, TomlChecker};

/// The file name of the config within a cohort directory.
pub const FILE: &str = "cohort.toml";

/// The collection window when `window_hours` is not set (seed 004).
pub const DEFAULT_WINDOW_HOURS: u32 = 48;
/// The per-run deadline when `run_timeout_secs` is not set.
pub const DEFAULT_RUN_TIMEOUT_SECS: u64 = 1800;
/// The judge batch size when `[judge] batch_size` is not set.
pub const DEFAULT_JUDGE_BATCH_SIZE: u32 = 8;
/// The categories of seed 004's protocol, used when `categories` is unset.
pub const DEFAULT_CATEGORIES: [&str; 5] = ["science", "technology", "history", "disputed", "insufficient"];

// === raw config, as written ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: Spanned<String>,
    seed: Spanned<RawSeed>,
    window_hours: Option<Spanned<WholeNumber>>,
    repeats: Option<Spanned<WholeNumber>>,
    /// A table (`every_hours`, `note`); read by hand so that the free-text
    /// form of earlier versions gets a message saying what to write.
    repeat_schedule: Option<Spanned<toml::Value>>,
    run_timeout_secs: Option<Spanned<WholeNumber>>,
    categories: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    arms: Vec<Spanned<RawArm>>,
    judge: Option<Spanned<RawJudge>>,
    retry: Option<Spanned<RawRetry>>,
    prices: Option<Spanned<RawPrices>>,
    publication: Option<Spanned<RawPublication>>,
    review: Option<Spanned<RawReview>>,
}

/// `[review]` as written: the cohort declares seed 004's human review.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReview {
    reviewers: Option<Spanned<WholeNumber>>,
    adjudicated: Option<bool>,
    key_reviewer: Option<Spanned<String>>,
    extraction_check: Option<bool>,
}

/// `[publication]` as written: what seed 004 ("Publication, independence
/// and limitations") asks a report to disclose.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPublication {
    commissioned_by: Option<Spanned<String>>,
    #[serde(default)]
    internally_commissioned: bool,
    funding: Option<Spanned<String>>,
    conflicts: Option<Spanned<String>>,
    limitations: Option<Spanned<String>>,
    omissions: Option<Spanned<String>>,
    reviewers: Option<Spanned<String>>,
}

/// A seed as written: TOML integers stop at 2^63-1, so the full u64 range
/// may also be written as a string of decimal digits. A larger unquoted
/// number is read too (the parser gives it as an i128), so that the
/// message can say to quote it rather than name a serde enum.
#[derive(Debug)]
enum RawSeed {
    Int(i128),
    Text(String),
}

impl<'de> Deserialize<'de> for RawSeed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Seed;
        impl serde::de::Visitor<'_> for Seed {
            type Value = RawSeed;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a whole number from 0 to 2^64-1 for `seed` (quoted above 2^63-1: seed = \"18446744073709551615\")",
                )
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawSeed, E> {
                Ok(RawSeed::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawSeed, E> {
                Ok(RawSeed::Int(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<RawSeed, E> {
                Ok(RawSeed::Int(v))
            }
            fn visit_u128<E>(self, v: u128) -> Result<RawSeed, E> {
                Ok(RawSeed::Int(i128::try_from(v).unwrap_or(i128::MAX)))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawSeed, E> {
                Ok(RawSeed::Text(v.to_owned()))
            }
        }
        d.deserialize_any(Seed)
    }
}

/// A whole number as written, of any size the parser reads (TOML's own
/// stop at 2^63-1; larger ones come as i128), so a value out of range is
/// a problem that names its field and the range, not "expected i64".
#[derive(Debug, Clone, Copy)]
struct WholeNumber(i128);

impl<'de> Deserialize<'de> for WholeNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Whole;
        impl serde::de::Visitor<'_> for Whole {
            type Value = WholeNumber;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E>(self, v: i64) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v.into()))
            }
            fn visit_i128<E>(self, v: i128) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v))
            }
            fn visit_u128<E>(self, v: u128) -> Result<WholeNumber, E> {
                Ok(WholeNumber(i128::try_from(v).unwrap_or(i128::MAX)))
            }
        }
        d.deserialize_any(Whole)
    }
}

/// The largest `run_timeout_secs` (and `retry.max_total_secs`): its
/// milliseconds must fit the ledger's i64 (it was cast, and a larger value
/// turned negative).
pub const MAX_SECS: u64 = (i64::MAX / 1000) as u64;
/// The largest backoff in milliseconds: an i64 in the ledger.
const MAX_MS: u64 = i64::MAX as u64;
/// The longest version label (`pinned_version`, each of
/// `accepted_versions`), in bytes: the coordinator refuses a longer
/// observed label from a worker (`convert::version_from_pb`), so a longer
/// pinned or accepted one could never be matched.
pub const MAX_VERSION_LABEL_BYTES: usize = 4096;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArm {
    id: Spanned<String>,
    label: Spanned<String>,
    adapter: Spanned<AdapterKind>,
    pinned_version: Option<Spanned<String>>,
    #[serde(default)]
    accepted_versions: Vec<Spanned<String>>,
    vendor_lineage: Option<Spanned<String>>,
    concurrency: Option<Spanned<WholeNumber>>,
    #[serde(default)]
    optional: bool,
    workflow: Option<Spanned<String>>,
    #[serde(default)]
    controls_not_disabled: Vec<Spanned<String>>,
    #[serde(default)]
    settings: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJudge {
    provider: Spanned<String>,
    model: Spanned<String>,
    served_model: Option<Spanned<String>>,
    vendor_lineage: Spanned<String>,
    temperature: Option<Spanned<f64>>,
    batch_size: Option<Spanned<WholeNumber>>,
    lineage_waiver: Option<Spanned<RawWaiver>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWaiver {
    reason: Spanned<String>,
    approved_by: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    max_attempts: Option<Spanned<WholeNumber>>,
    initial_backoff_ms: Option<Spanned<WholeNumber>>,
    max_backoff_ms: Option<Spanned<WholeNumber>>,
    max_total_secs: Option<Spanned<WholeNumber>>,
}

/// A price catalog as written: the `[prices]` table of `cohort.toml` or of
/// the judge proxy's config, or a whole price file. Deserialize it where it
/// stands, so that its spans point into that text, then check it with
/// [`RawPrices::validate`]; a standalone file goes through
/// [`parse_price_catalog`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrices {
    currency: Spanned<String>,
    #[serde(default)]
    models: BTreeMap<String, Spanned<RawPrice>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    input_per_million_tokens: Spanned<f64>,
    output_per_million_tokens: Spanned<f64>,
}

// === validated config ===

/// When the rounds of a repeated-run cohort are collected (seed 004:
/// variability is measured "only if its count and schedule are frozen
/// before collection"). Round `k` is repeat `k` of every question and arm.
/// It opens `(k-1) * every_hours` after the cohort's first start (the first
/// run of round 1 to start), and it has a collection window of its own,
/// `window_hours` long from its opening: its runs are leased only inside
/// it, and a run of round `k` not started by its close is `not_run`
/// (window_closed), like any run outside a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepeatSchedule {
    /// Hours between the openings of consecutive rounds; 0 opens every
    /// round at the first start (all repeats at once, one window).
    pub every_hours: u32,
    /// What the schedule is for, as written; shown in reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl RepeatSchedule {
    /// Milliseconds from the first start to the opening of round `round`
    /// (1-based).
    pub fn opens_after_ms(&self, round: u32) -> i64 {
        i64::from(round.saturating_sub(1)) * i64::from(self.every_hours) * 3_600_000
    }

    /// The schedule in words, for reports: "3 rounds, one every 24 h from
    /// the first start, each with its own 48 h window".
    pub fn describe(&self, rounds: u32, window_hours: u32) -> String {
        let base = if self.every_hours == 0 {
            format!("{rounds} rounds, all at the first start, in one {window_hours} h window")
        } else {
            format!(
                "{rounds} rounds, one every {} h from the first start, each with its own {window_hours} h window",
                self.every_hours
            )
        };
        match &self.note {
            Some(note) => format!("{base} ({note})"),
            None => base,
        }
    }
}

/// A validated `cohort.toml`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CohortConfig {
    pub name: String,
    pub seed: u64,
    pub window_hours: u32,
    pub repeats: u32,
    /// Required when `repeats > 1`: when each round (repeat) is collected.
    pub repeat_schedule: Option<RepeatSchedule>,
    pub run_timeout_secs: u64,
    pub categories: Vec<String>,
    pub arms: Vec<ArmConfig>,
    pub judge: Option<JudgeConfig>,
    pub retry: RetryPolicy,
    pub prices: Option<PriceCatalog>,
    /// What a report discloses about who ran the benchmark and why.
    /// Skipped when absent, so configs frozen before it existed keep their
    /// `config_sha256`.
    #[serde(skip_serializing_if = "Publication::is_empty")]
    pub publication: Publication,
    /// Arm id -> the arm's `accepted_versions`: labels known before
    /// collection that do not pause it besides `pinned_version` (a dated
    /// snapshot of the pinned model, a product's release label), in the
    /// order written, never the pinned label, never twice; arms that list
    /// none are absent ([`CohortConfig::accepted_versions_of`]). The
    /// ledger's accepted labels start as the pinned one and these. Kept
    /// beside the arms, by id, so that `ArmConfig`'s shape (built by hand
    /// in adapter tests) is unchanged; last in the canonical JSON and
    /// skipped when empty, so configs frozen before it existed keep their
    /// `config_sha256`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub accepted_versions: BTreeMap<String, Vec<String>>,
    /// `[review]`: the cohort declares seed 004's independent human review.
    /// Its uncertainty key is then required at freeze, one entry per
    /// question (`crate::cohort`), and a report stays preliminary until an
    /// adjudicated review is imported. Last in the canonical JSON and
    /// skipped when absent, so configs frozen before it existed keep their
    /// `config_sha256`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewDeclaration>,
}

/// The independent reviewers per output that seed 004 asks for ("two
/// independent reviewers"), and the default of `[review] reviewers`.
pub const DEFAULT_REVIEWERS: u32 = 2;
/// The most reviewers `[review] reviewers` may declare.
pub const MAX_REVIEWERS: u32 = 20;

/// A validated `[review]` table (docs/review.md "Declaring the review").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewDeclaration {
    /// Independent reviewers who label every output, at least two
    /// ([`DEFAULT_REVIEWERS`] when not written).
    pub reviewers: u32,
    /// A third person adjudicates the reviewers' disagreements with a
    /// written rationale (seed 004); `true` when not written.
    pub adjudicated: bool,
    /// Who froze the uncertainty key (seed 004: "an independent subject
    /// reviewer"), as written; `None`: not declared (a template's draft
    /// key, say), which a report discloses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_reviewer: Option<String>,
    /// Whether a person other than the scorers checks the claim extraction
    /// before scoring (seed 004: "an independent second reviewer checks the
    /// extraction before scoring"; `cohort review export --extraction-checker`).
    /// `Some(true)`: the scorers' export is refused and a report stays
    /// preliminary until a check is imported. `None`: not declared, which
    /// a report discloses when no check was made; skipped when absent so
    /// configs frozen before it existed keep their `config_sha256`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extraction_check: Option<bool>,
}

/// The publication fields of seed 004 ("Publication, independence and
/// limitations"); each `None` is shown as "not declared" in reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    pub commissioned_by: Option<String>,
    /// An internally commissioned benchmark is labelled as such.
    pub internally_commissioned: bool,
    pub funding: Option<String>,
    pub conflicts: Option<String>,
    pub limitations: Option<String>,
    /// What the public material leaves out, and the access route to it.
    pub omissions: Option<String>,
    /// Reviewer qualifications, payment and independence.
    pub reviewers: Option<String>,
}

impl Publication {
    pub fn is_empty(&self) -> bool {
        self == &Publication::default()
    }
}

/// The workflow of an arm that declares none. Arms of different workflows
/// (a product's deep research and its quick source discovery) are never
/// pooled or compared.
pub const DEFAULT_WORKFLOW: &str = "deep_research";

/// The kind of adapter that runs an arm's system under test (SPEC section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterKind {
    OpenaiChat,
    OpenaiResponses,
    HttpJson,
    Command,
    Manual,
    /// The built-in simulated system: labelled simulated everywhere.
    Sim,
}

/// One product arm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmConfig {
    pub id: String,
    pub label: String,
    pub adapter: AdapterKind,
    /// The version or model label the arm is expected to report; a change
    /// pauses the arm.
    pub pinned_version: String,
    /// (The other labels it may report without pausing, an arm's
    /// `accepted_versions`, are [`CohortConfig::accepted_versions`].)
    pub vendor_lineage: String,
    /// The most runs of this arm in flight at once.
    pub concurrency: u32,
    pub optional: bool,
    /// The product workflow this arm measures ([`DEFAULT_WORKFLOW`] unless
    /// declared): only arms of one workflow are pooled or compared.
    /// Skipped in the canonical JSON when default, so older frozen configs
    /// keep their hash.
    #[serde(skip_serializing_if = "is_default_workflow")]
    pub workflow: String,
    /// Product controls that could not be disabled (memory, personalisation
    /// ...), disclosed in every report (seed 004 "equal conditions").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub controls_not_disabled: Vec<String>,
    /// Adapter settings, as JSON with sorted keys.
    pub settings: serde_json::Value,
}

fn label_too_long(label: &str) -> String {
    format!("is {} bytes long, more than the {MAX_VERSION_LABEL_BYTES} a reported version label may have", label.len())
}

fn is_default_workflow(workflow: &String) -> bool {
    workflow == DEFAULT_WORKFLOW
}

/// The judge of the cohort (seed 000 section 3.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeConfig {
    pub provider: String,
    /// The model requested.
    pub model: String,
    /// The model that must actually serve (strict mode); defaults to `model`.
    pub served_model: String,
    pub vendor_lineage: String,
    /// Always 0.0: validation refuses anything else.
    pub temperature: f64,
    pub batch_size: u32,
    /// A recorded exception to judge independence.
    pub lineage_waiver: Option<LineageWaiver>,
}

/// An explicit, recorded waiver of the judge-lineage rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineageWaiver {
    pub reason: String,
    pub approved_by: String,
}

/// Retries of infrastructure outages (SPEC section 3): bounded by attempts
/// and by total time. A completed output or a refusal is never retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts per run in all, the first included.
    pub max_attempts: u32,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub max_total_secs: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 3, initial_backoff_ms: 1_000, max_backoff_ms: 60_000, max_total_secs: 3_600 }
    }
}

/// Prices per model, in one currency. Models not listed have unknown cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriceCatalog {
    pub currency: String,
    pub models: BTreeMap<String, Price>,
}

/// The price of one model, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Price {
    pub input_per_million_tokens: f64,
    pub output_per_million_tokens: f64,
}

impl CohortConfig {
    /// The canonical JSON of the config, whose SHA-256 is `config_sha256`.
    pub fn canonical_json(&self) -> String {
        // Serializing plain structs, strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The labels arm `id` accepts from the start besides its
    /// `pinned_version` (its `accepted_versions`; none for an unknown arm).
    pub fn accepted_versions_of(&self, id: &str) -> &[String] {
        self.accepted_versions.get(id).map_or(&[], Vec::as_slice)
    }

    /// The arm with id `id`.
    pub fn arm(&self, id: &str) -> Option<&ArmConfig> {
        self.arms.iter().find(|a| a.id == id)
    }
}

/// The longest id (question, arm, category, workflow), in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// The longest arm label (the product's name in every report), in bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// Whether `id` may be used as a question or arm id (or a category, or a
/// workflow): non-empty, and free of `:` (the run-id separator),
/// whitespace, control characters and format characters (Unicode category
/// Cf: zero-width spaces and joiners, bidirectional controls, the BOM),
/// which would make two ids that look alike differ.
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("must not be empty")
    } else if id.len() > MAX_ID_BYTES {
        Some("is longer than 128 bytes (MAX_ID_BYTES): an id names runs, keys and files")
    } else if id.contains(':') {
        Some("must not contain ':' (it separates the parts of a run id)")
    } else if id.chars().any(char::is_whitespace) {
        Some("must not contain whitespace")
    } else {
        invisible_problem(id)
    }
}

/// Whether `name` may be a cohort's name: not blank, and free of control
/// and format characters, of `{` and `}` (the name is the Redis hash tag
/// `cohort:{NAME}:`, which a `}` would end early), and of `/`, `\` and `..`
/// (it names directories beside the cohort).
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("must not be empty")
    } else if name.contains(['{', '}']) {
        Some("must not contain '{' or '}' (the name is the Redis hash tag of the cohort's keys)")
    } else if name.contains(['/', '\\']) || name.contains("..") {
        Some("must not contain '/', '\\' or '..' (the name names directories)")
    } else {
        invisible_problem(name)
    }
}

fn invisible_problem(text: &str) -> Option<&'static str> {
    if text.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else if text.chars().any(is_format_char) {
        Some("must not contain invisible format characters (zero-width spaces or joiners, bidi controls, a BOM)")
    } else {
        None
    }
}

/// Unicode general category Cf (Unicode 15.1, DerivedGeneralCategory.txt),
/// as ranges. Written out: the table is short and stable, and no crate of
/// the workspace carries general categories.
const FORMAT_CHARS: [(char, char); 21] = [
    ('\u{AD}', '\u{AD}'),
    ('\u{600}', '\u{605}'),
    ('\u{61C}', '\u{61C}'),
    ('\u{6DD}', '\u{6DD}'),
    ('\u{70F}', '\u{70F}'),
    ('\u{890}', '\u{891}'),
    ('\u{8E2}', '\u{8E2}'),
    ('\u{180E}', '\u{180E}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{2064}'),
    ('\u{2066}', '\u{206F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFF9}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0001}', '\u{E0001}'),
    ('\u{E0020}', '\u{E007F}'),
];

fn is_format_char(c: char) -> bool {
    FORMAT_CHARS.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// The form under which two ids (or two vendor lineages) are the same:
/// NFKC (compatibility forms such as full-width letters and ligatures
/// folded), format characters removed (zero-width spaces and joiners, bidi
/// controls), case-folded (each character upper- then lower-cased, which
/// folds `ß` to `ss` and `ς` to `σ` as Unicode case folding does, and also
/// takes the dotless `ı` for `i`), then the confusables skeleton of
/// Unicode TR39 (`unicode-security`: a Cyrillic `а` is the Latin `a`, `rn`
/// is `m`), NFC. Keys that are equal name the same thing, however spelled:
/// ids are duplicates, a judge and an arm share a lineage.
pub fn id_key(id: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let folded: String =
        id.nfkc().filter(|c| !is_format_char(*c)).flat_map(char::to_uppercase).flat_map(char::to_lowercase).collect();
    unicode_security::skeleton(&folded).nfc().collect()
}

/// `text` with the value of its top-level `name` replaced by `new_name`,
/// every other byte unchanged (used by amendments, which create a new,
/// differently named cohort from a changed one). `new_name` must be a plain
/// name (letters, digits, `.`, `_`, `-`), which needs no TOML escaping.
pub fn rename(text: &str, new_name: &str) -> Result<String, Problem> {
    #[derive(Deserialize)]
    struct NameOnly {
        name: Spanned<String>,
    }
    if !is_plain_name(new_name) {
        return Err(Problem::in_file(
            FILE,
            format!("\"{new_name}\" is not a plain name: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let parsed: NameOnly = toml::from_str(text).map_err(|e| TomlChecker::parse_error(FILE, text, &e))?;
    let span = parsed.name.span();
    Ok(format!("{}\"{new_name}\"{}", &text[..span.start], &text[span.end..]))
}

/// Whether `name` is a plain name: non-empty ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.` (safe as a directory name too).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Parses and validates `cohort.toml`. Returns every problem found.
pub fn build_and_validate(text: &str) -> Result<CohortConfig, Vec<Problem>> {
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return Err(vec![TomlChecker::parse_error(FILE, text, &e)]),
    };
    let mut v = Validator { check: TomlChecker::new(FILE, text) };
    let config = v.config(raw);
    if v.problems.is_empty() { Ok(config) } else { Err(v.check.problems) }
}

/// Checks the raw config, collecting problems with their positions.
struct Validator<'a> {
    check: TomlChecker<'a>,
}

impl<'a> std::ops::Deref for Validator<'a> {
    type Target = TomlChecker<'a>;
    fn deref(&self) -> &TomlChecker<'a> {
        &self.check
    }
}

impl std::ops::DerefMut for Validator<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.check
    }
}

impl Validator<'_> {
    /// `[repeat_schedule]`: `every_hours` (required, at least 0) and an
    /// optional `note`; anything else, or the free text of earlier
    /// versions, is a problem.
    fn repeat_schedule(&mut self, raw: Spanned<toml::Value>) -> Option<RepeatSchedule> {
        let span = raw.span();
        let table = match raw.into_inner() {
            toml::Value::Table(t) => t,
            toml::Value::String(text) => {
                self.problem(
                    span,
                    "repeat_schedule",
                    format!(
                        "free text ({text:?}) cannot be leased by: write a table, `[repeat_schedule]` with \
                         `every_hours = N` (and an optional `note`)"
                    ),
                );
                return None;
            }
            other => {
                self.problem(
                    span,
                    "repeat_schedule",
                    format!("must be a table with every_hours, not a {}", other.type_str()),
                );
                return None;
            }
        };
        let mut ok = true;
        for key in table.keys().filter(|k| !matches!(k.as_str(), "every_hours" | "note")) {
            self.problem(span.clone(), format!("repeat_schedule.{key}"), "unknown field: expected every_hours or note");
            ok = false;
        }
        let every_hours = match table.get("every_hours") {
            Some(toml::Value::Integer(n)) if (0..=i64::from(u32::MAX)).contains(n) => u32::try_from(*n).ok(),
            Some(other) => {
                self.problem(
                    span.clone(),
                    "repeat_schedule.every_hours",
                    match other {
                        toml::Value::Integer(n) => format!("must be a whole number of at least 0 (got {n})"),
                        other => format!("must be a whole number of at least 0 (got a {})", other.type_str()),
                    },
                );
                None
            }
            None => {
                self.problem(
                    span.clone(),
                    "repeat_schedule.every_hours",
                    "is required: hours between the rounds' openings",
                );
                None
            }
        };
        let note = match table.get("note") {
            None => None,
            Some(toml::Value::String(n)) if !n.trim().is_empty() => Some(n.trim().to_owned()),
            Some(_) => {
                self.problem(span, "repeat_schedule.note", "must be a non-empty string");
                ok = false;
                None
            }
        };
        (ok).then_some(())?;
        Some(RepeatSchedule { every_hours: every_hours?, note })
    }

    fn config(&mut self, raw: RawConfig) -> CohortConfig {
        let name_span = raw.name.span();
        let name = self.non_empty(raw.name, "name");
        if let Some(why) = name_problem(&name).filter(|_| !name.trim().is_empty()) {
            self.problem(name_span, "name", format!("{name:?} {why}"));
        }
        let seed = self.seed(raw.seed);
        let window_hours = self.whole(raw.window_hours, "window_hours", 1, u32::MAX, DEFAULT_WINDOW_HOURS);
        let repeats_span = raw.repeats.as_ref().map(Spanned::span);
        let repeats = self.whole(raw.repeats, "repeats", 1, u32::MAX, 1u32);
        let repeat_schedule = raw.repeat_schedule.and_then(|s| self.repeat_schedule(s));
        if repeats > 1
            && repeat_schedule.is_none()
            && !self.problems.iter().any(|p| p.field.as_deref().is_some_and(|f| f.starts_with("repeat_schedule")))
        {
            self.problem(
                repeats_span.unwrap_or(0..0),
                "repeat_schedule",
                "a repeated-run cohort must freeze its schedule: add `[repeat_schedule]` with `every_hours = N` \
                 (round k opens (k-1)*N hours after the first start, each round with its own window_hours window; \
                 0 runs every round at once)",
            );
        }
        let run_timeout_secs =
            self.whole(raw.run_timeout_secs, "run_timeout_secs", 1, MAX_SECS, DEFAULT_RUN_TIMEOUT_SECS);
        let categories = self.categories(raw.categories);
        let (arms, accepted_versions) = self.arms(raw.arms);
        let judge = raw.judge.map(|judge| self.judge(judge, &arms));
        let retry = raw.retry.map(|r| self.retry(r.into_inner())).unwrap_or_default();
        let prices = raw.prices.and_then(|p| match p.into_inner().validate(FILE, self.text, "prices.") {
            Ok(catalog) => Some(catalog),
            Err(problems) => {
                self.problems.extend(problems);
                None
            }
        });
        CohortConfig {
            name,
            seed,
            window_hours,
            repeats,
            repeat_schedule,
            run_timeout_secs,
            categories,
            arms,
            judge,
            retry,
            prices,
            publication: raw.publication.map(|p| self.publication(p.into_inner())).unwrap_or_default(),
            accepted_versions,
            review: raw.review.map(|r| self.review(r.into_inner())),
        }
    }

    fn review(&mut self, raw: RawReview) -> ReviewDeclaration {
        ReviewDeclaration {
            reviewers: self.whole(raw.reviewers, "review.reviewers", 2, MAX_REVIEWERS, DEFAULT_REVIEWERS),
            adjudicated: raw.adjudicated.unwrap_or(true),
            key_reviewer: raw.key_reviewer.map(|v| self.non_empty(v, "review.key_reviewer")),
            extraction_check: raw.extraction_check,
        }
    }

    fn publication(&mut self, raw: RawPublication) -> Publication {
        let mut text = |value: Option<Spanned<String>>, name: &str| {
            value.map(|v| self.non_empty(v, &format!("publication.{name}")))
        };
        Publication {
            commissioned_by: text(raw.commissioned_by, "commissioned_by"),
            internally_commissioned: raw.internally_commissioned,
            funding: text(raw.funding, "funding"),
            conflicts: text(raw.conflicts, "conflicts"),
            limitations: text(raw.limitations, "limitations"),
            omissions: text(raw.omissions, "omissions"),
            reviewers: text(raw.reviewers, "reviewers"),
        }
    }

    fn seed(&mut self, seed: Spanned<RawSeed>) -> u64 {
        let span = seed.span();
        let range = "must be a whole number from 0 to 2^64-1 (quoted above 2^63-1)";
        match seed.into_inner() {
            RawSeed::Int(n) => match u64::try_from(n) {
                Ok(v) if n <= i128::from(i64::MAX) => v,
                Ok(_) => {
                    self.problem(
                        span,
                        "seed",
                        format!(
                            "{n} is above 2^63-1, the largest number TOML writes unquoted: quote it: seed = \"{n}\""
                        ),
                    );
                    0
                }
                Err(_) => {
                    self.problem(span, "seed", format!("{range} (got {n})"));
                    0
                }
            },
            RawSeed::Text(s) if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() => match s.parse() {
                Ok(n) => n,
                Err(_) => {
                    self.problem(span, "seed", format!("{s} does not fit in 64 bits: {range}"));
                    0
                }
            },
            RawSeed::Text(s) => {
                self.problem(span, "seed", format!("{range} (got {s:?})"));
                0
            }
        }
    }

    /// A whole number from `min` to `max`; `default` when absent (and,
    /// with a problem naming the field and the range, when out of it).
    fn whole<T>(&mut self, value: Option<Spanned<WholeNumber>>, field: &str, min: i128, max: T, default: T) -> T
    where
        T: TryFrom<i128> + Into<i128> + Copy + std::fmt::Display,
    {
        let Some(value) = value else { return default };
        let span = value.span();
        let n = value.into_inner().0;
        match T::try_from(n) {
            Ok(v) if n >= min && n <= max.into() => v,
            _ => {
                self.problem(span, field, format!("must be a whole number from {min} to {max} (got {n})"));
                default
            }
        }
    }

    fn categories(&mut self, raw: Option<Spanned<Vec<Spanned<String>>>>) -> Vec<String> {
        let Some(raw) = raw else {
            return DEFAULT_CATEGORIES.map(str::to_owned).to_vec();
        };
        let span = raw.span();
        let mut out: Vec<String> = Vec::new();
        for (i, category) in raw.into_inner().into_iter().enumerate() {
            let field = format!("categories[{i}]");
            if let Some(why) = id_problem(category.get_ref()) {
                self.problem(category.span(), &field, why);
            } else if out.contains(category.get_ref()) {
                self.problem(category.span(), &field, format!("duplicate category \"{}\"", category.get_ref()));
            }
            out.push(category.into_inner());
        }
        if out.is_empty() {
            self.problem(span, "categories", "must list at least one category");
        }
        out
    }

    /// The arms, and each arm's `accepted_versions` by arm id (arms with
    /// none left out).
    fn arms(&mut self, raw: Vec<Spanned<RawArm>>) -> (Vec<ArmConfig>, BTreeMap<String, Vec<String>>) {
        if raw.is_empty() {
            self.whole_file("arms", "no arms: add at least one [[arms]] table");
        }
        let mut arms: Vec<ArmConfig> = Vec::new();
        let mut accepted: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // id_key -> (id, line) of the first arm with it.
        let mut first_of: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for (i, arm) in raw.into_iter().enumerate() {
            let arm_span = arm.span();
            let arm = arm.into_inner();
            let field = |name: &str| format!("arms[{i}].{name}");
            let id_span = arm.id.span();
            let id = arm.id.into_inner();
            let line = crate::error::line_column(self.text, id_span.start).0;
            if let Some(why) = id_problem(&id) {
                self.problem(id_span.clone(), field("id"), why);
            } else if let Some((first, first_line)) = first_of.get(&id_key(&id)) {
                let message = if *first == id {
                    format!("duplicate arm id \"{id}\" (first at line {first_line})")
                } else {
                    format!(
                        "arm id {id:?} is the same id as {first:?} (line {first_line}) once case and Unicode \
                         normalisation are ignored: make them differ in more than that"
                    )
                };
                self.problem(id_span, field("id"), message);
            } else {
                first_of.insert(id_key(&id), (id.clone(), line));
            }
            let label = self.non_empty_at_most(arm.label, &field("label"), MAX_LABEL_BYTES);
            let pinned_version = match arm.pinned_version {
                Some(v) => {
                    let span = v.span();
                    let v = self.non_empty(v, &field("pinned_version"));
                    if v.len() > MAX_VERSION_LABEL_BYTES {
                        self.problem(span, field("pinned_version"), label_too_long(&v));
                    }
                    v
                }
                None => {
                    self.problem(
                        arm_span.clone(),
                        field("pinned_version"),
                        format!("arm \"{id}\" has no pinned_version: pin the version label the product reports"),
                    );
                    String::new()
                }
            };
            let accepted_versions = self.accepted_versions(arm.accepted_versions, &pinned_version, &field);
            if !accepted_versions.is_empty() {
                accepted.insert(id.clone(), accepted_versions);
            }
            let vendor_lineage = match arm.vendor_lineage {
                Some(v) => self.non_empty(v, &field("vendor_lineage")),
                None => {
                    self.problem(
                        arm_span,
                        field("vendor_lineage"),
                        format!("arm \"{id}\" has no vendor_lineage: judge independence cannot be checked without it"),
                    );
                    String::new()
                }
            };
            let concurrency = self.whole(arm.concurrency, &field("concurrency"), 1, u32::MAX, 1u32);
            let workflow = match arm.workflow {
                Some(w) => {
                    let span = w.span();
                    let w = w.into_inner();
                    if let Some(why) = id_problem(&w) {
                        self.problem(span, field("workflow"), why);
                    }
                    w
                }
                None => DEFAULT_WORKFLOW.to_owned(),
            };
            let controls_not_disabled = arm
                .controls_not_disabled
                .into_iter()
                .enumerate()
                .map(|(j, c)| self.non_empty(c, &field(&format!("controls_not_disabled[{j}]"))))
                .collect();
            let settings = serde_json::to_value(&arm.settings).unwrap_or(serde_json::Value::Null);
            arms.push(ArmConfig {
                id,
                label,
                adapter: arm.adapter.into_inner(),
                pinned_version,
                vendor_lineage,
                concurrency,
                optional: arm.optional,
                workflow,
                controls_not_disabled,
                settings,
            });
        }
        (arms, accepted)
    }

    /// An arm's `accepted_versions`: each label non-blank, without
    /// surrounding whitespace (labels are compared exactly, and `cohort
    /// submit` trims what it is given, so such a label could never match),
    /// at most [`MAX_VERSION_LABEL_BYTES`], not the pinned label (already
    /// accepted) and not twice.
    fn accepted_versions(
        &mut self,
        raw: Vec<Spanned<String>>,
        pinned: &str,
        field: &dyn Fn(&str) -> String,
    ) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(raw.len());
        // label -> line of its first occurrence.
        let mut first_at: BTreeMap<String, usize> = BTreeMap::new();
        for (j, label) in raw.into_iter().enumerate() {
            let name = field(&format!("accepted_versions[{j}]"));
            let span = label.span();
            let label = label.into_inner();
            let line = crate::error::line_column(self.text, span.start).0;
            let problem = if label.trim().is_empty() {
                Some("must not be empty".to_owned())
            } else if label.trim() != label {
                Some(format!(
                    "{label:?} starts or ends with whitespace: labels are compared exactly, so write it as the \
                     product reports it ({:?})",
                    label.trim()
                ))
            } else if label.len() > MAX_VERSION_LABEL_BYTES {
                Some(label_too_long(&label))
            } else if label == pinned {
                Some(format!("{label:?} is the pinned_version, which is always accepted: remove it here"))
            } else {
                first_at
                    .get(&label)
                    .map(|first| format!("duplicate accepted version {label:?} (first at line {first})"))
            };
            match problem {
                Some(message) => self.problem(span, name, message),
                None => {
                    first_at.insert(label.clone(), line);
                }
            }
            out.push(label);
        }
        out
    }

    fn judge(&mut self, judge: Spanned<RawJudge>, arms: &[ArmConfig]) -> JudgeConfig {
        let judge_span = judge.span();
        let judge = judge.into_inner();
        let provider = self.non_empty(judge.provider, "judge.provider");
        let model = self.non_empty(judge.model, "judge.model");
        let served_model =
            judge.served_model.map_or_else(|| model.clone(), |s| self.non_empty(s, "judge.served_model"));
        let lineage_span = judge.vendor_lineage.span();
        let vendor_lineage = self.non_empty(judge.vendor_lineage, "judge.vendor_lineage");
        let temperature = match judge.temperature {
            Some(t) if *t.get_ref() == 0.0 => 0.0,
            Some(t) => {
                self.problem(
                    t.span(),
                    "judge.temperature",
                    format!("must be 0 (got {}): the judge runs at temperature 0", t.get_ref()),
                );
                0.0
            }
            None => {
                self.problem(
                    judge_span,
                    "judge.temperature",
                    "must be set explicitly to 0: the judge must accept temperature=0",
                );
                0.0
            }
        };
        let batch_size = self.whole(judge.batch_size, "judge.batch_size", 1, u32::MAX, DEFAULT_JUDGE_BATCH_SIZE);
        let lineage_waiver = judge.lineage_waiver.map(|w| {
            let w = w.into_inner();
            LineageWaiver {
                reason: self.non_empty(w.reason, "judge.lineage_waiver.reason"),
                approved_by: self.non_empty(w.approved_by, "judge.lineage_waiver.approved_by"),
            }
        });
        if lineage_waiver.is_none() {
            let lineage = id_key(vendor_lineage.trim());
            for arm in arms.iter().filter(|a| id_key(a.vendor_lineage.trim()) == lineage && !lineage.is_empty()) {
                self.problem(
                    lineage_span.clone(),
                    "judge.vendor_lineage",
                    format!(
                        "the judge shares vendor lineage \"{vendor_lineage}\" with arm \"{}\" (seed 000 3.3): \
                         choose an independent judge, or record [judge.lineage_waiver] with reason and approved_by",
                        arm.id
                    ),
                );
            }
        }
        JudgeConfig { provider, model, served_model, vendor_lineage, temperature, batch_size, lineage_waiver }
    }

    fn retry(&mut self, raw: RawRetry) -> RetryPolicy {
        let d = RetryPolicy::default();
        let policy = RetryPolicy {
            max_attempts: self.whole(raw.max_attempts, "retry.max_attempts", 1, u32::MAX, d.max_attempts),
            initial_backoff_ms: self.whole(
                raw.initial_backoff_ms,
                "retry.initial_backoff_ms",
                0,
                MAX_MS,
                d.initial_backoff_ms,
            ),
            max_backoff_ms: self.whole(raw.max_backoff_ms, "retry.max_backoff_ms", 0, MAX_MS, d.max_backoff_ms),
            max_total_secs: self.whole(raw.max_total_secs, "retry.max_total_secs", 1, MAX_SECS, d.max_total_secs),
        };
        if policy.max_backoff_ms < policy.initial_backoff_ms {
            self.problems.push(
                Problem::in_file(FILE, "max_backoff_ms must be at least initial_backoff_ms")
                    .field("retry.max_backoff_ms"),
            );
        }
        policy
    }
}

// === price catalogs ===

/// Parses and validates a standalone price file `text` read from `file`:
/// `currency` and `[models."MODEL"]` tables, the shape of `cohort.toml`'s
/// `[prices]`. Returns every problem found, each naming `file`, the line
/// and the field.
pub fn parse_price_catalog(text: &str, file: &str) -> Result<PriceCatalog, Vec<Problem>> {
    let raw: RawPrices = toml::from_str(text).map_err(|e| vec![TomlChecker::parse_error(file, text, &e)])?;
    raw.validate(file, text, "")
}

impl RawPrices {
    /// Checks the catalog: a currency, and finite, non-negative prices.
    /// `text` is the text of `file` this was deserialized from; each problem
    /// names `file`, the line and the field under `prefix` (`"prices."` for
    /// a `[prices]` table, `""` for a whole price file).
    pub fn validate(self, file: &str, text: &str, prefix: &str) -> Result<PriceCatalog, Vec<Problem>> {
        let mut problems = Vec::new();
        let mut problem = |span: Range<usize>, field: String, message: &str| {
            problems.push(Problem::at_offset(file, text, span.start, message).field(field));
        };
        if self.currency.get_ref().trim().is_empty() {
            problem(self.currency.span(), format!("{prefix}currency"), "must not be empty");
        }
        let mut models = BTreeMap::new();
        for (model, price) in self.models {
            let price = price.into_inner();
            let mut rate = |v: Spanned<f64>, which: &str| {
                let x = *v.get_ref();
                if !(x.is_finite() && x >= 0.0) {
                    problem(
                        v.span(),
                        format!("{prefix}models.{model}.{which}"),
                        "must be a finite, non-negative price",
                    );
                }
                x
            };
            let input = rate(price.input_per_million_tokens, "input_per_million_tokens");
            let output = rate(price.output_per_million_tokens, "output_per_million_tokens");
            models.insert(model, Price { input_per_million_tokens: input, output_per_million_tokens: output });
        }
        if problems.is_empty() {
            Ok(PriceCatalog { currency: self.currency.into_inner(), models })
        } else {
            Err(problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "demo"
seed = 7

[[arms]]
id = "a"
label = "Arm A"
adapter = "sim"
pinned_version = "sim-1"
vendor_lineage = "simco"

[judge]
provider = "openai"
model = "judge-1"
vendor_lineage = "judgeco"
temperature = 0.0
"#;

    fn problems(text: &str) -> Vec<String> {
        build_and_validate(text).err().unwrap_or_default().iter().map(ToString::to_string).collect()
    }

    /// Proves identifiers and lineages compare under NFKC, case folding,
    /// removal of format characters and the TR39 confusables skeleton
    /// (issue 23): a Cyrillic look-alike, a full-width form and a
    /// zero-width space make no new id, and a lineage spelled so is the
    /// arm's lineage; different names stay different.
    #[test]
    fn look_alike_ids_and_lineages_are_the_same() {
        assert_eq!(id_key("sci\u{0435}nce-1"), id_key("science-1"), "Cyrillic e");
        assert_eq!(id_key("ＳＣＩＥＮＣＥ"), id_key("science"), "full width");
        assert_eq!(id_key("cohort-sim\u{200b}"), id_key("cohort-sim"), "zero-width space");
        assert_eq!(id_key("Straße"), id_key("STRASSE"));
        assert_ne!(id_key("science-1"), id_key("science-2"));
        let shared = GOOD.replace("vendor_lineage = \"judgeco\"", "vendor_lineage = \"simc\u{043e}\u{200b}\"");
        let p = problems(&shared);
        assert!(p.iter().any(|m| m.contains("judge.vendor_lineage") && m.contains("arm \"a\"")), "{p:?}");
    }

    /// Proves ids, labels and free text have caps, each refusal naming
    /// the field (issue 23: a 10 MB arm label froze and no run of the arm
    /// could then be judged).
    #[test]
    fn ids_labels_and_free_text_are_capped() {
        let label = "L".repeat(MAX_LABEL_BYTES + 1);
        let p = problems(&GOOD.replace("label = \"Arm A\"", &format!("label = \"{label}\"")));
        assert!(p.len() == 1 && p[0].contains("arms[0].label") && p[0].contains("at most 256"), "{p:?}");
        let id = "a".repeat(MAX_ID_BYTES + 1);
        let p = problems(&GOOD.replace("id = \"a\"", &format!("id = \"{id}\"")));
        assert!(p.iter().any(|m| m.contains("arms[0].id") && m.contains("128")), "{p:?}");
        let model = "m".repeat(crate::error::MAX_TEXT_BYTES + 1);
        let p = problems(&GOOD.replace("model = \"judge-1\"", &format!("model = \"{model}\"")));
        assert!(p.iter().any(|m| m.contains("judge.model") && m.contains("at most 16384")), "{p:?}");
    }

    #[test]
    fn good_config_gets_defaults() {
        let c = build_and_validate(GOOD).unwrap();
        assert_eq!((c.window_hours, c.repeats, c.run_timeout_secs), (48, 1, 1800));
        assert_eq!(c.categories.len(), 5);
        assert_eq!(c.judge.as_ref().unwrap().served_model, "judge-1");
        assert_eq!(c.arms[0].concurrency, 1);
    }

    /// Proves `[review]` is read with its defaults (two reviewers,
    /// adjudicated), refuses fewer than two reviewers naming the field, and
    /// leaves a config without it hashing as before (absent from the
    /// canonical JSON).
    #[test]
    fn the_review_declaration_has_defaults_and_bounds() {
        let without = build_and_validate(GOOD).unwrap();
        assert_eq!(without.review, None);
        assert!(!without.canonical_json().contains("\"review\""));
        let with = build_and_validate(&format!("{GOOD}\n[review]\n")).unwrap();
        assert_eq!(
            with.review,
            Some(ReviewDeclaration { reviewers: 2, adjudicated: true, key_reviewer: None, extraction_check: None })
        );
        assert!(
            with.canonical_json().ends_with(r#""review":{"reviewers":2,"adjudicated":true}}"#),
            "{}",
            with.canonical_json()
        );
        let declared = build_and_validate(&format!(
            "{GOOD}\n[review]\nreviewers = 3\nadjudicated = false\nkey_reviewer = \"Dr. A. Subject\"\nextraction_check = true\n"
        ))
        .unwrap();
        assert_eq!(
            declared.review,
            Some(ReviewDeclaration {
                reviewers: 3,
                adjudicated: false,
                key_reviewer: Some("Dr. A. Subject".into()),
                extraction_check: Some(true),
            })
        );
        assert!(declared.canonical_json().ends_with(r#""key_reviewer":"Dr. A. Subject","extraction_check":true}}"#));
        let p = problems(&format!("{GOOD}\n[review]\nreviewers = 1\n"));
        assert!(p.iter().any(|p| p.contains("field `review.reviewers`") && p.contains("from 2 to 20")), "{p:?}");
        let p = problems(&format!("{GOOD}\n[review]\nreviewer = 2\n"));
        assert!(p.iter().any(|p| p.contains("reviewer")), "{p:?}");
    }

    #[test]
    fn canonical_json_is_stable_and_sorted() {
        let a = build_and_validate(GOOD).unwrap().canonical_json();
        let reordered = GOOD.replace("name = \"demo\"\nseed = 7", "seed = 7\nname = \"demo\"");
        assert_eq!(a, build_and_validate(&reordered).unwrap().canonical_json());
    }

    #[test]
    fn unknown_field_names_line_and_field() {
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\ncolour = \"red\""));
        assert_eq!(p.len(), 1);
        assert!(p[0].starts_with("cohort.toml:4:1:"), "{p:?}");
        assert!(p[0].contains("colour"), "{p:?}");
    }

    #[test]
    fn judge_temperature_must_be_zero() {
        let p = problems(&GOOD.replace("temperature = 0.0", "temperature = 0.7"));
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("cohort.toml:16:15:") && p[0].contains("judge.temperature"), "{p:?}");
    }

    #[test]
    fn judge_sharing_lineage_needs_a_waiver() {
        let shared = GOOD.replace("vendor_lineage = \"judgeco\"", "vendor_lineage = \"SimCo\"");
        let p = problems(&shared);
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("judge.vendor_lineage") && p[0].contains("arm \"a\""), "{p:?}");
        let waived = format!("{shared}\n[judge.lineage_waiver]\nreason = \"ablation\"\napproved_by = \"pi\"\n");
        let c = build_and_validate(&waived).unwrap();
        assert_eq!(c.judge.unwrap().lineage_waiver.unwrap().approved_by, "pi");
    }

    #[test]
    fn arm_without_pinned_version_is_refused() {
        let p = problems(&GOOD.replace("pinned_version = \"sim-1\"\n", ""));
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("arms[0].pinned_version") && p[0].contains("cohort.toml:5:"), "{p:?}");
    }

    /// Proves `accepted_versions` is part of the frozen config, in the
    /// order written, and that a config without it keeps the canonical
    /// JSON (hence the `config_sha256`) it had before the field existed.
    #[test]
    fn accepted_versions_are_frozen_and_absent_when_empty() {
        let plain = build_and_validate(GOOD).unwrap();
        assert!(plain.accepted_versions.is_empty() && plain.accepted_versions_of("a").is_empty());
        assert!(!plain.canonical_json().contains("accepted_versions"));
        // The hash GOOD's config had before `accepted_versions` existed.
        assert_eq!(
            crate::hash::sha256_hex(plain.canonical_json().as_bytes()),
            "80f2a2948bf3c0e1cee5994cc4e8ae45a2cadf5504f00125cd058a46418339fc",
            "{}",
            plain.canonical_json()
        );
        let text = GOOD.replace(
            "pinned_version = \"sim-1\"\n",
            "pinned_version = \"sim-1\"\naccepted_versions = [\"sim-1-2026-06-26\", \"sim 1 (engine 7)\"]\n",
        );
        let c = build_and_validate(&text).unwrap();
        assert_eq!(c.accepted_versions_of("a"), ["sim-1-2026-06-26", "sim 1 (engine 7)"]);
        assert!(
            c.canonical_json().ends_with(r#","accepted_versions":{"a":["sim-1-2026-06-26","sim 1 (engine 7)"]}}"#),
            "{}",
            c.canonical_json()
        );
        assert_ne!(c.canonical_json(), plain.canonical_json());
        let empty =
            GOOD.replace("pinned_version = \"sim-1\"\n", "pinned_version = \"sim-1\"\naccepted_versions = []\n");
        assert_eq!(build_and_validate(&empty).unwrap().canonical_json(), plain.canonical_json());
    }

    /// Proves each accepted label is checked, every problem naming the
    /// file, the line, the column and the element: blank, surrounding
    /// whitespace, too long, the pinned label itself, a duplicate (with the
    /// first one's line); and that pinned_version is capped the same way.
    #[test]
    fn bad_accepted_versions_name_file_line_and_field() {
        let long = "v".repeat(MAX_VERSION_LABEL_BYTES + 1);
        let text = GOOD.replace(
            "pinned_version = \"sim-1\"\n",
            &format!(
                "pinned_version = \"sim-1\"\naccepted_versions = [\n  \"\",\n  \" x\",\n  \"{long}\",\n  \"sim-1\",\n  \"d\",\n  \"d\",\n]\n"
            ),
        );
        let p = problems(&text);
        assert_eq!(p.len(), 5, "{p:?}");
        assert_eq!(p[0], "cohort.toml:11:3: field `arms[0].accepted_versions[0]`: must not be empty");
        assert!(
            p[1].starts_with(
                "cohort.toml:12:3: field `arms[0].accepted_versions[1]`: \" x\" starts or ends with whitespace"
            ) && p[1].contains("(\"x\")"),
            "{p:?}"
        );
        assert!(
            p[2].starts_with(
                "cohort.toml:13:3: field `arms[0].accepted_versions[2]`: is 4097 bytes long, more than the 4096"
            ),
            "{p:?}"
        );
        assert_eq!(
            p[3],
            "cohort.toml:14:3: field `arms[0].accepted_versions[3]`: \"sim-1\" is the pinned_version, which is always \
             accepted: remove it here"
        );
        assert_eq!(
            p[4],
            "cohort.toml:16:3: field `arms[0].accepted_versions[5]`: duplicate accepted version \"d\" (first at line 15)"
        );
        let p = problems(&GOOD.replace("accepted_versions", "x").replace("\"sim-1\"", &format!("\"{long}\"")));
        assert!(
            p.len() == 1 && p[0].starts_with("cohort.toml:9:18: field `arms[0].pinned_version`: is 4097 bytes"),
            "{p:?}"
        );
        let p = problems(
            &GOOD
                .replace("pinned_version = \"sim-1\"\n", "pinned_version = \"sim-1\"\naccepted_versions = \"sim-2\"\n"),
        );
        assert!(p.len() == 1 && p[0].starts_with("cohort.toml:10:21:"), "a string, not a list: {p:?}");
    }

    #[test]
    fn colon_in_arm_id_is_refused() {
        let p = problems(&GOOD.replace("id = \"a\"", "id = \"a:b\""));
        assert!(p[0].contains("arms[0].id") && p[0].contains("':'"), "{p:?}");
    }

    /// Proves arm ids that differ only by case or normalisation are
    /// duplicates named with both spellings and the first one's line.
    #[test]
    fn arm_ids_equal_after_case_folding_and_nfc_are_duplicates() {
        let second = "\n[[arms]]\nid = \"A\"\nlabel = \"Arm A2\"\nadapter = \"sim\"\npinned_version = \"v\"\nvendor_lineage = \"simco2\"\n";
        let p = problems(&format!("{GOOD}{second}"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("cohort.toml:19:6: field `arms[1].id`: arm id \"A\" is the same id as \"a\" (line 6)"),
            "{p:?}"
        );
        let p = problems(&format!("{GOOD}{}", second.replace("\"A\"", "\"a\"")));
        assert!(p.len() == 1 && p[0].contains("duplicate arm id \"a\" (first at line 6)"), "{p:?}");
        let p = problems(&GOOD.replace("id = \"a\"", "id = \"a\\u200B\""));
        assert!(p.len() == 1 && p[0].contains("arms[0].id") && p[0].contains("invisible"), "{p:?}");
    }

    /// Proves cohort names that would break the Redis hash tag or name
    /// other directories, or hide characters, are refused naming `name`.
    #[test]
    fn cohort_names_with_braces_slashes_dots_or_invisible_characters_are_refused() {
        for bad in ["a}b", "a{b", "a/b", "a\\\\b", "../x", "a..b", "a\\u200Bb", "a\\u0007b"] {
            let p = problems(&GOOD.replace("name = \"demo\"", &format!("name = \"{bad}\"")));
            assert!(p.len() == 1 && p[0].starts_with("cohort.toml:2:8: field `name`: "), "{bad}: {p:?}");
        }
        assert!(build_and_validate(&GOOD.replace("name = \"demo\"", "name = \"Démo 2026.v1\"")).is_ok());
    }

    /// Proves the numbers the parser once reported as "untagged enum
    /// RawSeed" or "expected i64" name the file, line and field, and say
    /// what to write.
    #[test]
    fn out_of_range_and_mistyped_numbers_name_their_field() {
        let p = problems(&GOOD.replace("seed = 7", "seed = 18446744073709551615"));
        assert_eq!(
            p,
            ["cohort.toml:3:8: field `seed`: 18446744073709551615 is above 2^63-1, the largest number TOML writes \
              unquoted: quote it: seed = \"18446744073709551615\""]
        );
        let p = problems(&GOOD.replace("seed = 7", "seed = 1.5"));
        assert!(
            p.len() == 1 && p[0].starts_with("cohort.toml:3:8: field `seed`: ") && p[0].contains("quoted"),
            "{p:?}"
        );
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nrun_timeout_secs = 99999999999999999999"));
        assert_eq!(
            p,
            ["cohort.toml:4:20: field `run_timeout_secs`: must be a whole number from 1 to 9223372036854775 (got \
              99999999999999999999)"]
        );
        // Milliseconds of the largest accepted value fit the ledger's i64.
        assert!(i64::try_from(MAX_SECS * 1000).is_ok());
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nwindow_hours = \"two days\""));
        assert!(p.len() == 1 && p[0].starts_with("cohort.toml:4:16: field `window_hours`: "), "{p:?}");
        let p = problems(&GOOD.replace("adapter = \"sim\"", "adapter = \"sim\"\nconcurrency = 1.5"));
        assert!(p.len() == 1 && p[0].contains("field `arms[0].concurrency`"), "{p:?}");
        let p = problems(&GOOD.replace("temperature = 0.0", "temperature = 0.0\nbatch_size = 4294967296"));
        assert!(
            p.len() == 1 && p[0].contains("field `judge.batch_size`: must be a whole number from 1 to 4294967295"),
            "{p:?}"
        );
    }

    #[test]
    fn big_seeds_may_be_quoted() {
        let c = build_and_validate(&GOOD.replace("seed = 7", "seed = \"18446744073709551615\"")).unwrap();
        assert_eq!(c.seed, u64::MAX);
        assert!(!problems(&GOOD.replace("seed = 7", "seed = -1")).is_empty());
    }

    #[test]
    fn repeats_need_a_structured_schedule() {
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nrepeats = 3"));
        assert!(p[0].contains("repeat_schedule") && p[0].contains("every_hours"), "{p:?}");
        // The free text of earlier versions is refused with what to write.
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nrepeats = 3\nrepeat_schedule = \"daily\""));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("free text") && p[0].contains("every_hours = N"), "{p:?}");
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nrepeats = 3\nrepeat_schedule = { every_hours = -1 }"));
        assert!(p.len() == 1 && p[0].contains("repeat_schedule.every_hours"), "{p:?}");
        let p = problems(&GOOD.replace("seed = 7", "seed = 7\nrepeats = 3\nrepeat_schedule = { every = 2 }"));
        assert!(p.iter().any(|p| p.contains("`repeat_schedule.every`: unknown field")), "{p:?}");
        let ok = GOOD.replace(
            "seed = 7",
            "seed = 7\nrepeats = 3\nrepeat_schedule = { every_hours = 24, note = \"weekly drift\" }",
        );
        let c = build_and_validate(&ok).unwrap();
        let schedule = c.repeat_schedule.clone().unwrap();
        assert_eq!((c.repeats, schedule.every_hours), (3, 24));
        assert_eq!((schedule.opens_after_ms(1), schedule.opens_after_ms(3)), (0, 48 * 3_600_000));
        assert_eq!(
            schedule.describe(3, 48),
            "3 rounds, one every 24 h from the first start, each with its own 48 h window (weekly drift)"
        );
        // The schedule is part of the frozen config.
        let other = build_and_validate(&ok.replace("every_hours = 24", "every_hours = 12")).unwrap();
        assert_ne!(c.canonical_json(), other.canonical_json());
    }

    #[test]
    fn rename_changes_only_the_name_value() {
        let renamed = rename(GOOD, "demo-v2").unwrap();
        assert_eq!(renamed, GOOD.replace("name = \"demo\"", "name = \"demo-v2\""));
        assert!(rename(GOOD, "../evil").is_err());
        assert!(rename(GOOD, "a b").is_err());
    }

    /// The `[prices]` table of cohort.toml and a standalone price file are
    /// checked by the same rules; problems name the file, line and field.
    #[test]
    fn price_problems_name_file_line_and_field() {
        let table = "\n[prices]\ncurrency = \"USD\"\n[prices.models.\"judge-1\"]\ninput_per_million_tokens = 3.0\noutput_per_million_tokens = -1.0\n";
        let c = build_and_validate(&format!("{GOOD}{}", table.replace("-1.0", "15.0"))).unwrap();
        assert_eq!(c.prices.unwrap().models["judge-1"].output_per_million_tokens, 15.0);
        let p = problems(&format!("{GOOD}{table}"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("cohort.toml:22:") && p[0].contains("prices.models.judge-1.output_per_million_tokens"),
            "{p:?}"
        );

        let file =
            "currency = \" \"\n[models.\"m\"]\ninput_per_million_tokens = inf\noutput_per_million_tokens = 2.0\n";
        let p: Vec<String> =
            parse_price_catalog(file, "prices.toml").unwrap_err().iter().map(ToString::to_string).collect();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("prices.toml:1:") && p[0].contains("`currency`"), "{p:?}");
        assert!(p[1].starts_with("prices.toml:3:") && p[1].contains("models.m.input_per_million_tokens"), "{p:?}");
        let p = parse_price_catalog("currency = \"USD\"\ncolour = 1\n", "prices.toml").unwrap_err();
        assert!(p[0].to_string().starts_with("prices.toml:2:") && p[0].to_string().contains("colour"), "{p:?}");
        let ok = parse_price_catalog(&file.replace("\" \"", "\"EUR\"").replace("inf", "1.5"), "prices.toml").unwrap();
        assert_eq!((ok.currency.as_str(), ok.models["m"].input_per_million_tokens), ("EUR", 1.5));
    }

    #[test]
    fn unknown_adapter_is_named() {
        let p = problems(&GOOD.replace("adapter = \"sim\"", "adapter = \"telepathy\""));
        assert!(p[0].contains("cohort.toml:8:") && p[0].contains("telepathy"), "{p:?}");
    }
}
