//! The extraction check before scoring (seed 004, "Claim extraction and
//! source review": "An independent second reviewer checks the extraction
//! before scoring"). One person who is not a scorer reads every extracted
//! claim of every output (blinded as the scorers' items are) and decides,
//! with the scorers' own columns and the one parser of them
//! ([`super::import::extraction_decision`]), whether it is one factual claim
//! as extracted, the distinct assertions of a conjunction (`split`), a
//! repeated paraphrase of another claim (`merge_with`) or not factual
//! (`not_factual`), and adds the factual claims the extraction missed
//! (`added` rows with their `cited` indices).
//!
//! The phases (docs/review.md, "The extraction check"):
//! 1. `cohort review export DIR --extraction-checker carol` writes
//!    `FOLDER/carol/check.csv` and `check.jsonl` ([`CHECK_COLUMNS`]), the
//!    check's index `DIR/.cohort/review/check.json` and the blinding codes.
//! 2. `cohort review import DIR check.csv` validates the file (a `checker`
//!    column marks it; every row names the SHA-256 of the `check.json` it
//!    was made from) and keeps it as `imported/extraction-check.<ext>`.
//! 3. `cohort review export DIR --reviewers alice,bob` builds the scorers'
//!    claims from the checked extraction ([`checked_units`]): a split claim
//!    becomes its parts (`<claim>.<n>`, each with the claim's citations), a
//!    merged paraphrase's citations go to the claim it repeats (an
//!    identical (claim, URL) pair once), claims not factual leave the
//!    factual set (kept in the export index and in `review.jsonl`), added
//!    claims (`a0001`...) join it with their citations. The export index
//!    records the check ([`ExtractionCheckRecord`]).
//!
//! Architecture Invariant: the checker is never a scorer (by id, compared
//! without regard to ASCII case so `Carol` and `carol` are one person), and
//! the scorers' export of a cohort whose `[review]` declares
//! `extraction_check = true` is refused until a check is imported.

use std::collections::BTreeMap;
use std::path::Path;

use cohort_core::hash::sha256_hex;
use serde::{Deserialize, Serialize};

use super::export::Unit;
use super::import::{Extraction, bad, cited_indices, extraction_decision, no_row_missing, same_person_per_row};
use super::table::{Row, parse_by_ext};
use super::{ExportIndex, ExportedItem, IMPORTED_DIR, ItemKind, ReviewError};

/// The check's index under the review state directory: every checked claim
/// with its run, arm and claim id (what phase 2 needs to unblind).
pub const CHECK_INDEX_FILE: &str = "check.json";
/// `kind` of [`CHECK_INDEX_FILE`].
pub const CHECK_KIND: &str = "cohort-review-extraction-check";
/// The imported check file's name under `imported/` (with its extension).
pub const STORED_STEM: &str = "extraction-check";

/// The columns of a check file, in order: the checker (which marks the
/// file as a check), the SHA-256 of the `check.json` it was made from, what
/// the checker reads, and the extraction columns of a scorer's file.
pub const CHECK_COLUMNS: [&str; 15] = [
    "checker",
    "check_sha256",
    "item_id",
    "kind",
    "output",
    "question_id",
    "question",
    "claim",
    "line",
    "cited",
    "urls",
    "output_text",
    // What the checker fills in:
    "split",
    "merge_with",
    "not_factual",
];

/// What the check did, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFigures {
    /// Who checked the extraction (not a scorer).
    pub checker: String,
    /// SHA-256 of the imported check file, byte for byte.
    pub file_sha256: String,
    /// Extracted claims split into parts, merged into another claim, marked
    /// not factual; claims the check added.
    pub split: u64,
    pub merged: u64,
    pub not_factual: u64,
    pub added: u64,
}

/// An extracted claim the check took out of the factual set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckExcluded {
    /// Its item id in the check (`c00007`).
    pub item_id: String,
    pub run_id: String,
    pub arm: String,
    pub question_id: String,
    pub output: String,
    pub claim_id: Option<u32>,
    /// `not_factual` or `merged`.
    pub decision: String,
    /// For a merge: the claim it repeats (which owns its pairs).
    pub merged_into: Option<String>,
    /// For not factual: the checker's words (advice, opinion...).
    pub reason: String,
}

/// The check as the scorers' export index records it (`export.json`
/// `extraction_check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractionCheckRecord {
    #[serde(flatten)]
    pub figures: CheckFigures,
    /// The file under `imported/`.
    pub file: String,
    /// SHA-256 of the `check.json` the check was made from.
    pub check_sha256: String,
    pub excluded: Vec<CheckExcluded>,
}

/// A claim the check added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAdded {
    /// `a0001`..., in file order.
    pub item_id: String,
    pub output: String,
    pub text: String,
    pub line: String,
    pub cited: Vec<u32>,
}

/// A parsed check file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLabels {
    pub checker: String,
    pub file: String,
    /// Check claim item -> decision.
    pub decisions: BTreeMap<String, Extraction>,
    pub added: Vec<CheckAdded>,
}

impl CheckLabels {
    /// What the check did, counted.
    pub fn figures(&self, file_sha256: &str) -> CheckFigures {
        let count = |f: &dyn Fn(&Extraction) -> bool| self.decisions.values().filter(|d| f(d)).count() as u64;
        CheckFigures {
            checker: self.checker.clone(),
            file_sha256: file_sha256.into(),
            split: count(&|d| matches!(d, Extraction::Split(_))),
            merged: count(&|d| matches!(d, Extraction::Merged(_))),
            not_factual: count(&|d| matches!(d, Extraction::NotFactual(_))),
            added: self.added.len() as u64,
        }
    }
}

/// The check's index and the SHA-256 of its bytes, `None` when no check
/// was exported.
pub fn check_index(state: &Path) -> Result<Option<(ExportIndex, String)>, ReviewError> {
    super::read_index(
        &state.join(CHECK_INDEX_FILE),
        "an extraction check index",
        "cohort review export --extraction-checker",
    )
}

/// Whether `header` is a check file's.
pub(crate) fn is_check_header(header: &[String]) -> bool {
    header.iter().any(|h| h == "checker")
}

/// Validates a check file's rows against the check's `index` (whose bytes
/// hash to `check_sha256`): one checker, every row made from this check,
/// every exported claim once with its decision, a merge only into a claim
/// the file keeps whole, added claims with their wording and the output's
/// citation indices.
pub(crate) fn parse_check(
    file: &str,
    rows: &[Row],
    index: &ExportIndex,
    check_sha256: &str,
) -> Result<CheckLabels, ReviewError> {
    let items: BTreeMap<&str, &ExportedItem> = index.items.iter().map(|i| (i.item_id.as_str(), i)).collect();
    let citations_of: BTreeMap<&str, &BTreeMap<u32, String>> = index
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Uncertainty)
        .map(|i| (i.output.as_str(), &i.citations))
        .collect();
    let mut out =
        CheckLabels { checker: String::new(), file: file.into(), decisions: BTreeMap::new(), added: Vec::new() };
    let mut merge_rows: Vec<(&Row, String)> = Vec::new();
    for row in rows {
        same_person_per_row(file, row, "checker", &index.reviewers, "the checker of this check", &mut out.checker)?;
        let sha = row.get("check_sha256");
        if sha != check_sha256 {
            return Err(bad(
                file,
                row,
                "check_sha256",
                format!(
                    "this file was made from the extraction check {}, not this cohort's {check_sha256}: import the file of this cohort's check",
                    if sha.is_empty() { "(none named)" } else { sha }
                ),
            ));
        }
        let (id, kind) = (row.get("item_id"), row.get("kind"));
        match kind {
            "added" => {
                let output = row.get("output");
                if !citations_of.contains_key(output) {
                    return Err(bad(file, row, "output", format!("\"{output}\" is not an exported output code")));
                }
                let text = row.get("claim");
                if text.is_empty() {
                    return Err(bad(file, row, "claim", "an added claim needs its wording".into()));
                }
                let cited = cited_indices(file, row, output, &citations_of)?;
                out.added.push(CheckAdded {
                    item_id: format!("a{:04}", out.added.len() + 1),
                    output: output.into(),
                    text: text.into(),
                    line: row.get("line").into(),
                    cited,
                });
            }
            "output" => {
                if items.get(id).is_none_or(|i| i.kind != ItemKind::Uncertainty) {
                    return Err(bad(file, row, "item_id", format!("\"{id}\" is not an exported output row")));
                }
            }
            "claim" => {
                let Some(item) = items.get(id).filter(|i| i.kind == ItemKind::Claim) else {
                    return Err(bad(
                        file,
                        row,
                        "item_id",
                        format!("\"{id}\" is not an exported claim (a missed claim is a row of kind `added`)"),
                    ));
                };
                let decision = extraction_decision(file, row, item, &items)?;
                if let Extraction::Merged(target) = &decision {
                    merge_rows.push((row, target.clone()));
                }
                if out.decisions.insert(id.into(), decision).is_some() {
                    return Err(bad(file, row, "item_id", format!("item {id} appears twice")));
                }
            }
            other => {
                return Err(bad(
                    file,
                    row,
                    "kind",
                    format!("\"{other}\" is not a row of a check file: `claim`, `output` or `added`"),
                ));
            }
        }
    }
    // A merged claim's pairs go to the claim it repeats, which must stay
    // one factual claim (a part or an excluded claim owns no pairs here).
    for (row, target) in merge_rows {
        if !matches!(out.decisions.get(&target), Some(Extraction::AsExtracted)) {
            return Err(bad(
                file,
                row,
                "merge_with",
                format!(
                    "{target} is itself split, merged or not factual in this file: merge into a claim kept as one factual claim"
                ),
            ));
        }
    }
    if out.checker.is_empty() {
        return Err(ReviewError::BadFile {
            file: file.into(),
            message: "has no rows: fill in the exported claims".into(),
        });
    }
    let missing: Vec<&str> = index
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Claim && !out.decisions.contains_key(&i.item_id))
        .map(|i| i.item_id.as_str())
        .collect();
    no_row_missing(file, &missing, "claim", "every claim is checked")?;
    Ok(out)
}

/// The imported check, when there is one: its stored file name, parsed
/// labels, the file's SHA-256, and the check index's hash.
#[derive(Debug)]
pub struct ImportedCheck {
    pub index: ExportIndex,
    pub check_sha256: String,
    pub file: String,
    pub file_sha256: String,
    pub labels: CheckLabels,
}

impl ImportedCheck {
    /// What the scorers' export index records of the check.
    pub fn record(&self) -> ExtractionCheckRecord {
        let items: BTreeMap<&str, &ExportedItem> = self.index.items.iter().map(|i| (i.item_id.as_str(), i)).collect();
        let excluded = self
            .labels
            .decisions
            .iter()
            .filter_map(|(id, d)| {
                let (decision, merged_into, reason) = match d {
                    Extraction::NotFactual(why) => ("not_factual", None, why.clone()),
                    Extraction::Merged(t) => ("merged", Some(t.clone()), String::new()),
                    _ => return None,
                };
                let item = items.get(id.as_str())?;
                Some(CheckExcluded {
                    item_id: id.clone(),
                    run_id: item.run_id.clone(),
                    arm: item.arm.clone(),
                    question_id: item.question_id.clone(),
                    output: item.output.clone(),
                    claim_id: item.claim_id,
                    decision: decision.into(),
                    merged_into,
                    reason,
                })
            })
            .collect();
        ExtractionCheckRecord {
            figures: self.labels.figures(&self.file_sha256),
            file: self.file.clone(),
            check_sha256: self.check_sha256.clone(),
            excluded,
        }
    }
}

/// Reads the check kept under `state/imported/`; `None` when none was
/// imported. The kept file is parsed again against the check index, so a
/// check index changed after the import is refused here.
pub fn imported_check(state: &Path) -> Result<Option<ImportedCheck>, ReviewError> {
    let Some((index, check_sha256)) = check_index(state)? else { return Ok(None) };
    for ext in ["csv", "jsonl"] {
        let name = format!("{STORED_STEM}.{ext}");
        let path = state.join(IMPORTED_DIR).join(&name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ReviewError::io(path.display().to_string(), e)),
        };
        let file = path.display().to_string();
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| ReviewError::BadFile { file: file.clone(), message: "is not valid UTF-8".into() })?;
        let (_, rows) = parse_by_ext(text, ext).map_err(|e| ReviewError::table(file.clone(), e))?;
        let labels = parse_check(&file, &rows, &index, &check_sha256)?;
        let file_sha256 = sha256_hex(&bytes);
        return Ok(Some(ImportedCheck { index, check_sha256, file: name, file_sha256, labels }));
    }
    Ok(None)
}

/// Whether two people are one, as the checker-is-not-a-scorer rule
/// compares them: ids equal without regard to ASCII case.
pub fn same_person(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// The scorers' claims of one output (`run_id`, the output code `output`)
/// as the check left its extracted `claims` ((claim id, wording, line,
/// cited) in the score's order): a claim kept as extracted under its check
/// id, a split claim's parts `<id>.<n>` each with the claim's citations,
/// a merged claim's citations appended to the claim it repeats, not-factual
/// claims out, then the output's added claims.
pub(crate) fn checked_units(
    check: &ImportedCheck,
    run_id: &str,
    output: &str,
    claims: &[(u32, String, String, Vec<u32>)],
) -> Vec<Unit> {
    let by_claim: BTreeMap<u32, &str> = check
        .index
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Claim && i.run_id == run_id)
        .filter_map(|i| Some((i.claim_id?, i.item_id.as_str())))
        .collect();
    let mut units: Vec<Unit> = Vec::new();
    let mut merged: Vec<(&str, &[u32])> = Vec::new();
    for (claim_id, text, line, cited) in claims {
        let Some(id) = by_claim.get(claim_id) else { continue };
        match check.labels.decisions.get(*id) {
            Some(Extraction::Split(parts)) => {
                for (n, part) in parts.iter().enumerate() {
                    units.push(Unit {
                        id: format!("{id}.{}", n + 1),
                        text: part.clone(),
                        line: line.clone(),
                        cited: cited.clone(),
                        claim_id: None,
                    });
                }
            }
            Some(Extraction::Merged(target)) => merged.push((target.as_str(), cited)),
            Some(Extraction::NotFactual(_)) => {}
            Some(Extraction::AsExtracted) | None => units.push(Unit {
                id: (*id).to_owned(),
                text: text.clone(),
                line: line.clone(),
                cited: cited.clone(),
                claim_id: Some(*claim_id),
            }),
        }
    }
    for (target, cited) in merged {
        if let Some(unit) = units.iter_mut().find(|u| u.id == target) {
            let new: Vec<u32> = cited.iter().copied().filter(|i| !unit.cited.contains(i)).collect();
            unit.cited.extend(new);
        }
    }
    for added in check.labels.added.iter().filter(|a| a.output == output) {
        units.push(Unit {
            id: added.item_id.clone(),
            text: added.text.clone(),
            line: added.line.clone(),
            cited: added.cited.clone(),
            claim_id: None,
        });
    }
    units
}
