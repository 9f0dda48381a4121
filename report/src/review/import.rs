//! `cohort review import`: reviewers' filled files and the adjudication
//! file, checked against the export, then kept byte for byte (write-once)
//! under `DIR/.cohort/review/imported/`. Every file of one call is checked
//! before anything is written: bad input names file, line, column and
//! field, and writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::table::{Row, parse_by_ext};
use super::{CLAIM_LABELS, ExportIndex, IMPORTED_DIR, ItemKind, PAIR_REASONS, PART_SEPARATOR, ReviewError, state_dir};

/// A reviewer's decision on one exported claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// One of [`CLAIM_LABELS`], with the reason (required for unverifiable).
    Label { label: String, reason: String },
    /// Advice, opinion or an uncertainty statement (the reviewer's words).
    NotFactual(String),
    /// A repeated paraphrase of another claim item of the same answer.
    Merged(String),
    /// Split into distinct assertions, each labelled: (text, label, reason).
    Split(Vec<(String, String, String)>),
}

/// An uncited factual claim a reviewer found and added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedClaim {
    /// `added:<reviewer>:<the id the reviewer gave, or the line>`.
    pub unit: String,
    pub output: String,
    pub text: String,
    pub label: String,
    pub reason: String,
    /// The citation indices of the output the claim carries (`cited`,
    /// `1;3`), empty for an uncited claim.
    pub cited: Vec<u32>,
    /// One verdict per cited index, in `cited` order (`cited_supports`,
    /// `yes;no:irrelevant`): the added claim's claim-citation pairs, scored
    /// like the exported ones (seed 004: link every attached citation to
    /// its claim).
    pub pairs: Vec<(u32, bool, String)>,
    /// The reviewer flagged the missing original citation.
    pub missing_original: bool,
}

/// A reviewer's verdict on one claim-citation pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairVerdict {
    /// (fully supports, reason when not): one, or one per part when this
    /// reviewer split the pair's claim (each part is an atomic claim with
    /// the citation attached).
    pub parts: Vec<(bool, String)>,
    /// The cited source is only secondary: it reports the claim from
    /// another source rather than being its original.
    pub secondary: bool,
}

impl PairVerdict {
    /// The verdict on the pair as one (a claim not split by this reviewer).
    pub fn whole(&self) -> Option<&(bool, String)> {
        match self.parts.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// One reviewer's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewerLabels {
    pub reviewer: String,
    pub file: String,
    pub claims: BTreeMap<String, ClaimDecision>,
    /// Pair item -> the verdict.
    pub pairs: BTreeMap<String, PairVerdict>,
    /// Claim items whose missing original citation the reviewer flagged
    /// (`missing_original`: seed 004, "flag the missing original citation").
    pub missing_original: BTreeSet<String>,
    /// Uncertainty item -> (score 0/1/2, abstained).
    pub uncertainty: BTreeMap<String, (u8, bool)>,
    pub added: Vec<AddedClaim>,
}

/// The third person's decisions: item (or unit) id -> (final label,
/// reason, rationale).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjudication {
    pub file: String,
    pub adjudicator: String,
    pub decisions: BTreeMap<String, (String, String, String)>,
}

/// What one call imported.
#[derive(Debug, Clone)]
pub struct Imported {
    pub reviewers: Vec<String>,
    pub adjudication: bool,
    /// The extraction check's file was imported, made by this person.
    pub checker: Option<String>,
    pub stored: Vec<PathBuf>,
}

impl Imported {
    /// What `cohort review import` prints.
    pub fn describe(&self, cohort_dir: &Path) -> String {
        let mut text = String::new();
        for r in &self.reviewers {
            text.push_str(&format!("imported reviewer {r}'s labels\n"));
        }
        if self.adjudication {
            text.push_str("imported the adjudication\n");
        }
        if let Some(c) = &self.checker {
            text.push_str(&format!(
                "imported {c}'s extraction check: export the scorers' items with `cohort review export {} --reviewers A,B`\n",
                cohort_dir.display()
            ));
        }
        for p in &self.stored {
            text.push_str(&format!("kept: {}\n", p.display()));
        }
        text.push_str(&format!("run `cohort report {}` for the review metrics\n", cohort_dir.display()));
        text
    }
}

pub(crate) enum Parsed {
    Reviewer(ReviewerLabels),
    Adjudication(Adjudication),
    /// An extraction check's file ([`super::check`]).
    Check(super::check::CheckLabels),
}

/// A file to keep under `imported/`: its bytes, the name it is kept under,
/// and what it holds once parsed (`None` for a file kept only for the
/// record, as a Label Studio export beside the rows it was turned into).
pub(crate) struct Planned {
    /// What to name in a refusal: the file as given.
    pub source: String,
    pub bytes: Vec<u8>,
    pub stored: String,
    pub parsed: Option<Parsed>,
}

/// Imports `files` for the cohort in `cohort_dir` (see the module docs).
/// A file with a `checker` column is an extraction check's
/// ([`super::check`]), checked against the check's index; every other file
/// against the scorers' export.
pub fn import(cohort_dir: &Path, files: &[PathBuf]) -> Result<Imported, ReviewError> {
    let state = state_dir(cohort_dir);
    let mut export: Option<(ExportIndex, String)> = None;
    let mut planned = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| ReviewError::io(file.clone(), e))?;
        let ext = extension(path)?;
        if let Some(rows) = check_rows(&file, &bytes, ext)? {
            let labels = import_check(&state, &file, &rows)?;
            let stored = format!("{}.{ext}", super::check::STORED_STEM);
            planned.push(Planned { source: file, bytes, stored, parsed: Some(Parsed::Check(labels)) });
            continue;
        }
        let (index, export_sha256) = match &export {
            Some(e) => e,
            None => export.insert(super::sheet::export_and_sha256(&state)?),
        };
        let parsed = parse_file(&file, &bytes, ext, index, export_sha256)?;
        let stored = match &parsed {
            Parsed::Reviewer(r) => format!("reviewer-{}.{ext}", r.reviewer),
            Parsed::Adjudication(_) => format!("adjudication.{ext}"),
            Parsed::Check(_) => format!("{}.{ext}", super::check::STORED_STEM),
        };
        planned.push(Planned { source: file, bytes, stored, parsed: Some(parsed) });
    }
    keep(&state, planned)
}

/// The rows of `bytes` when it is an extraction check's file (a CSV or
/// JSONL table with a `checker` column), else `None`.
fn check_rows(file: &str, bytes: &[u8], ext: &str) -> Result<Option<Vec<Row>>, ReviewError> {
    if ext == "json" {
        return Ok(None);
    }
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(None) };
    match parse_by_ext(text, ext) {
        Ok((header, rows)) if super::check::is_check_header(&header) => Ok(Some(rows)),
        Ok(_) => Ok(None),
        // A file that does not parse is reported by the reviewers' path,
        // unless its first line names the checker column.
        Err(e) if text.lines().next().is_some_and(|l| l.contains("checker")) => Err(ReviewError::table(file, e)),
        Err(_) => Ok(None),
    }
}

/// Validates an extraction check's file: against the check this cohort
/// exported, and only before the scorers' items are exported (a check
/// after scoring is not a check before scoring).
fn import_check(state: &Path, file: &str, rows: &[Row]) -> Result<super::check::CheckLabels, ReviewError> {
    let Some((index, check_sha256)) = super::check::check_index(state)? else {
        return Err(ReviewError::Refused(format!(
            "{file}: is an extraction check's file, but no extraction check was exported for this cohort: run `cohort review export DIR --extraction-checker NAME` first"
        )));
    };
    let export = state.join(super::EXPORT_FILE);
    if export.exists() {
        return Err(ReviewError::Refused(format!(
            "{file}: the scorers' items were already exported ({}) from the unchecked extraction: the extraction is checked before scoring, so this check can no longer be applied; start a new round by moving {} aside",
            export.display(),
            state.display()
        )));
    }
    super::check::parse_check(file, rows, &index, &check_sha256)
}

/// The one write-once store of every import path (CSV, JSONL, sheet,
/// Label Studio): refuses a reviewer (or the adjudication) named twice in
/// one call or already imported, before writing anything.
pub(crate) fn keep(state: &Path, planned: Vec<Planned>) -> Result<Imported, ReviewError> {
    let imported_dir = state.join(IMPORTED_DIR);
    let mut names = BTreeSet::new();
    for p in &planned {
        let base = p.stored.rsplit_once('.').map_or(p.stored.clone(), |(b, _)| b.to_owned());
        if !names.insert(base.clone()) {
            return Err(ReviewError::Refused(format!(
                "{}: two files of this call are both {base}: import one file per reviewer",
                p.source
            )));
        }
        let Some(parsed) = &p.parsed else {
            let existing = imported_dir.join(&p.stored);
            if existing.exists() {
                return Err(ReviewError::Refused(format!(
                    "{}: this file was already imported ({})",
                    p.source,
                    existing.display()
                )));
            }
            continue;
        };
        for ext in ["csv", "jsonl", "json"] {
            let existing = imported_dir.join(format!("{base}.{ext}"));
            if existing.exists() {
                let who = match parsed {
                    Parsed::Reviewer(r) => format!("reviewer {}'s labels were", r.reviewer),
                    Parsed::Adjudication(_) => "the adjudication was".to_owned(),
                    Parsed::Check(c) => format!("the extraction check ({}'s) was", c.checker),
                };
                return Err(ReviewError::Refused(format!(
                    "{}: {who} already imported ({}); imported ratings are kept as they are (seed 004 keeps both original ratings). \
                     To review again, start a new review round: move {} aside and run `cohort review export` again",
                    p.source,
                    existing.display(),
                    state.display()
                )));
            }
        }
    }
    std::fs::create_dir_all(&imported_dir).map_err(|e| ReviewError::io(imported_dir.display().to_string(), e))?;
    let mut out = Imported { reviewers: Vec::new(), adjudication: false, checker: None, stored: Vec::new() };
    for p in planned {
        let target = imported_dir.join(&p.stored);
        super::export::write_once(&target, &p.bytes)?;
        match p.parsed {
            Some(Parsed::Reviewer(r)) => out.reviewers.push(r.reviewer),
            Some(Parsed::Adjudication(_)) => out.adjudication = true,
            Some(Parsed::Check(c)) => out.checker = Some(c.checker),
            None => {}
        }
        out.stored.push(target);
    }
    Ok(out)
}

/// Reads the files kept under `imported/` (reviewers in name order).
pub fn read_imported(
    dir: &Path,
    index: &ExportIndex,
) -> Result<(Vec<ReviewerLabels>, Option<Adjudication>), ReviewError> {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(d) => d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
        Err(e) => return Err(ReviewError::io(dir.display().to_string(), e)),
    };
    entries.sort();
    // A sheet's labels file names the export's hash; the state directory
    // holding `imported/` holds the export.
    let state = dir.parent().unwrap_or(dir);
    let sheet_file = |p: &PathBuf| {
        p.extension().is_some_and(|e| e == "json")
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(super::label_studio::KEPT_PREFIX))
    };
    let export_sha256 =
        if entries.iter().any(sheet_file) { super::sheet::export_and_sha256(state)?.1 } else { String::new() };
    let (mut reviewers, mut adjudication) = (Vec::new(), None);
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // A Label Studio export is kept for the record beside the rows it
        // was turned into (`reviewer-<id>.jsonl`), which are what is read.
        // The extraction check's file is read with the check's index
        // (`check::imported_check`); the export index records what it did.
        if name.starts_with('.')
            || name.starts_with(super::label_studio::KEPT_PREFIX)
            || name.starts_with(super::check::STORED_STEM)
        {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| ReviewError::io(path.display().to_string(), e))?;
        match parse_file(&path.display().to_string(), &bytes, extension(&path)?, index, &export_sha256)? {
            Parsed::Reviewer(r) => reviewers.push(r),
            Parsed::Adjudication(a) => adjudication = Some(a),
            Parsed::Check(_) => {}
        }
    }
    Ok((reviewers, adjudication))
}

fn extension(path: &Path) -> Result<&'static str, ReviewError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => Ok("csv"),
        Some("jsonl") => Ok("jsonl"),
        Some("json") => Ok("json"),
        _ => Err(ReviewError::BadFile {
            file: path.display().to_string(),
            message: "is neither .csv, .jsonl nor .json: import the items.csv or items.jsonl a reviewer filled, an adjudication .csv/.jsonl, or the .json a review sheet saved".into(),
        }),
    }
}

pub(crate) fn parse_file(
    file: &str,
    bytes: &[u8],
    ext: &str,
    index: &ExportIndex,
    export_sha256: &str,
) -> Result<Parsed, ReviewError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ReviewError::BadFile {
        file: file.into(),
        message: format!("is not valid UTF-8 (invalid byte at offset {}): save it as UTF-8", e.valid_up_to()),
    })?;
    if ext == "json" {
        return parsed_rows(file, super::sheet::sheet_file_rows(file, text, export_sha256)?, index);
    }
    let table = parse_by_ext(text, ext).map_err(|e| ReviewError::table(file, e))?;
    parsed_rows(file, table, index)
}

/// One validation for every shape: the rows of a CSV, a JSONL or a sheet's
/// labels file, as a reviewer's labels or an adjudication.
fn parsed_rows(
    file: &str,
    (header, rows): (Vec<String>, Vec<Row>),
    index: &ExportIndex,
) -> Result<Parsed, ReviewError> {
    if header.iter().any(|h| h == "final_label") {
        parse_adjudication(file, &rows, index).map(Parsed::Adjudication)
    } else if header.iter().any(|h| h == "reviewer") {
        parse_reviewer(file, &rows, index).map(Parsed::Reviewer)
    } else {
        Err(ReviewError::BadFile {
            file: file.into(),
            message: "has neither a `reviewer` column (a reviewer's items file) nor a `final_label` column (an adjudication file)"
                .into(),
        })
    }
}

pub(super) fn bad(file: &str, row: &Row, field: &str, message: String) -> ReviewError {
    ReviewError::BadInput { file: file.into(), line: row.line, column: row.column(field), field: field.into(), message }
}

/// The one person a labelled file is by: every row's `column` (`reviewer`,
/// or a check file's `checker`) names the same id, one of `known` (who the
/// export was made for; `of_what` says for what, in the message). Called
/// per row with the id seen so far in `so_far` (empty before the first).
pub(super) fn same_person_per_row(
    file: &str,
    row: &Row,
    column: &str,
    known: &[String],
    of_what: &str,
    so_far: &mut String,
) -> Result<(), ReviewError> {
    let id = row.get(column);
    if id.is_empty() {
        return Err(bad(file, row, column, format!("empty: every row names its {column} (as exported)")));
    }
    if so_far.is_empty() {
        if !known.iter().any(|r| r == id) {
            return Err(bad(file, row, column, format!("\"{id}\" is not {of_what} ({})", known.join(", "))));
        }
        id.clone_into(so_far);
    } else if id != so_far {
        return Err(bad(file, row, column, format!("\"{id}\" differs from \"{so_far}\" above: one file per {column}")));
    }
    Ok(())
}

fn check_label(file: &str, row: &Row, label: &str, reason: &str) -> Result<(), ReviewError> {
    if !CLAIM_LABELS.contains(&label) {
        return Err(bad(
            file,
            row,
            "label",
            format!("\"{label}\" is not a claim label: use one of {}", CLAIM_LABELS.join(", ")),
        ));
    }
    if reason.is_empty()
        && let Some(why) = reason_required(label)
    {
        return Err(bad(file, row, "reason", why.into()));
    }
    Ok(())
}

/// What a claim label without its reason lacks, for the labels of
/// [`super::LABELS_NEEDING_REASON`].
fn reason_required(label: &str) -> Option<&'static str> {
    match label {
        "unverifiable" => Some(
            "an unverifiable claim needs its specific reason (seed 004: inaccessible source, missing record, untestable claim...)",
        ),
        "contradicted" => Some(
            "a contradicted claim needs its conflicting evidence and the reasoning (seed 004): the source, the passage, why it conflicts",
        ),
        _ => None,
    }
}

fn yes_no(file: &str, row: &Row, field: &str) -> Result<Option<bool>, ReviewError> {
    match row.get(field).to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "yes" | "y" | "true" | "1" => Ok(Some(true)),
        "no" | "n" | "false" | "0" => Ok(Some(false)),
        other => Err(bad(file, row, field, format!("\"{other}\" is not yes or no"))),
    }
}

fn parse_reviewer(file: &str, rows: &[Row], index: &ExportIndex) -> Result<ReviewerLabels, ReviewError> {
    let items: BTreeMap<&str, &super::ExportedItem> = index.items.iter().map(|i| (i.item_id.as_str(), i)).collect();
    let outputs: BTreeSet<&str> = index.items.iter().map(|i| i.output.as_str()).collect();
    let mut out = ReviewerLabels {
        reviewer: String::new(),
        file: file.into(),
        claims: BTreeMap::new(),
        pairs: BTreeMap::new(),
        uncertainty: BTreeMap::new(),
        added: Vec::new(),
        missing_original: BTreeSet::new(),
    };
    // Pair rows are checked once every claim's decision is known (a pair
    // of a claim this reviewer split gives one verdict per part).
    let mut pair_rows: Vec<(&Row, &super::ExportedItem)> = Vec::new();
    let citations_of: BTreeMap<&str, &BTreeMap<u32, String>> = index
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Uncertainty)
        .map(|i| (i.output.as_str(), &i.citations))
        .collect();
    for row in rows {
        same_person_per_row(file, row, "reviewer", &index.reviewers, "a reviewer of this export", &mut out.reviewer)?;
        let id = row.get("item_id");
        let kind = row.get("kind");
        if kind == "added" {
            let output = row.get("output");
            if !outputs.contains(output) {
                return Err(bad(file, row, "output", format!("\"{output}\" is not an exported output code")));
            }
            let text = row.get("claim");
            if text.is_empty() {
                return Err(bad(file, row, "claim", "an added claim needs its wording".into()));
            }
            let (label, reason) = (row.get("label"), row.get("reason"));
            check_label(file, row, label, reason)?;
            let cited = cited_indices(file, row, output, &citations_of)?;
            let verdicts: Vec<&str> =
                row.get("cited_supports").split([';', ',']).map(str::trim).filter(|v| !v.is_empty()).collect();
            if verdicts.len() != cited.len() {
                return Err(bad(
                    file,
                    row,
                    "cited_supports",
                    format!(
                        "{} cited index(es) but {} verdict(s): give one per cited index, in order, as `yes` or `no:<reason>` ({}), separated by `;`",
                        cited.len(),
                        verdicts.len(),
                        PAIR_REASONS.join(", ")
                    ),
                ));
            }
            let mut pairs = Vec::new();
            for (n, v) in cited.iter().zip(&verdicts) {
                let verdict = if v.eq_ignore_ascii_case("yes") {
                    Some((true, ""))
                } else {
                    match v.split_once(':') {
                        Some((no, why))
                            if no.trim().eq_ignore_ascii_case("no") && PAIR_REASONS.contains(&why.trim()) =>
                        {
                            Some((false, why.trim()))
                        }
                        _ => None,
                    }
                };
                let Some((supports, why)) = verdict else {
                    return Err(bad(
                        file,
                        row,
                        "cited_supports",
                        format!(
                            "\"{v}\" (for [{n}]): give `yes` or `no:<reason>` with a reason among {}",
                            PAIR_REASONS.join(", ")
                        ),
                    ));
                };
                pairs.push((*n, supports, why.to_owned()));
            }
            let local = if id.is_empty() { format!("line{}", row.line) } else { id.to_owned() };
            out.added.push(AddedClaim {
                unit: format!("added:{}:{local}", out.reviewer),
                output: output.into(),
                text: text.into(),
                label: label.into(),
                reason: reason.into(),
                cited,
                pairs,
                missing_original: yes_no(file, row, "missing_original")?.unwrap_or(false),
            });
            continue;
        }
        let Some(item) = items.get(id) else {
            return Err(bad(
                file,
                row,
                "item_id",
                format!("\"{id}\" is not an exported item (an added claim has kind `added`)"),
            ));
        };
        if kind != item.kind.as_str() {
            return Err(bad(file, row, "kind", format!("item {id} is a {} item, not \"{kind}\"", item.kind.as_str())));
        }
        match item.kind {
            ItemKind::Claim => {
                let decision = match extraction_decision(file, row, item, &items)? {
                    Extraction::NotFactual(why) => ClaimDecision::NotFactual(why),
                    Extraction::Merged(target) => ClaimDecision::Merged(target),
                    Extraction::Split(parts) => {
                        let labels: Vec<&str> = row.get("label").split(PART_SEPARATOR).map(str::trim).collect();
                        let reasons_cell = row.get("reason");
                        let reasons: Vec<&str> = if reasons_cell.is_empty() {
                            vec![""; parts.len()]
                        } else {
                            reasons_cell.split(PART_SEPARATOR).map(str::trim).collect()
                        };
                        if labels.len() != parts.len() || reasons.len() != parts.len() {
                            return Err(bad(
                                file,
                                row,
                                "label",
                                format!(
                                    "{} parts but {} labels and {} reasons: give one label (and reason, or none at all) per part, separated by `{PART_SEPARATOR}`",
                                    parts.len(),
                                    labels.len(),
                                    reasons.len()
                                ),
                            ));
                        }
                        for (l, r) in labels.iter().zip(&reasons) {
                            check_label(file, row, l, r)?;
                        }
                        ClaimDecision::Split(
                            parts
                                .into_iter()
                                .zip(&labels)
                                .zip(&reasons)
                                .map(|((p, l), r)| (p, (*l).to_owned(), (*r).to_owned()))
                                .collect(),
                        )
                    }
                    Extraction::AsExtracted => {
                        let (label, reason) = (row.get("label"), row.get("reason"));
                        if label.is_empty() {
                            return Err(bad(
                                file,
                                row,
                                "label",
                                "empty: label the claim, or mark it not_factual, merge_with or split".into(),
                            ));
                        }
                        check_label(file, row, label, reason)?;
                        ClaimDecision::Label { label: label.into(), reason: reason.into() }
                    }
                };
                if out.claims.insert(id.into(), decision).is_some() {
                    return Err(bad(file, row, "item_id", format!("item {id} appears twice")));
                }
                if yes_no(file, row, "missing_original")?.unwrap_or(false) {
                    out.missing_original.insert(id.into());
                }
            }
            ItemKind::Pair => {
                if pair_rows.iter().any(|(_, i)| i.item_id == id) {
                    return Err(bad(file, row, "item_id", format!("item {id} appears twice")));
                }
                pair_rows.push((row, item));
            }
            ItemKind::Uncertainty => {
                let score = match row.get("uncertainty") {
                    "0" => 0,
                    "1" => 1,
                    "2" => 2,
                    other => {
                        return Err(bad(
                            file,
                            row,
                            "uncertainty",
                            format!(
                                "\"{other}\" is not an uncertainty score: 0 (invented certainty or a missed essential limitation), 1 (a required caveat omitted) or 2 (calibrated)"
                            ),
                        ));
                    }
                };
                let abstained = yes_no(file, row, "abstained")?.unwrap_or(false);
                if out.uncertainty.insert(id.into(), (score, abstained)).is_some() {
                    return Err(bad(file, row, "item_id", format!("item {id} appears twice")));
                }
            }
        }
    }
    for (row, item) in pair_rows {
        let claim = item.claim_item.as_deref().unwrap_or_default();
        let parts = match out.claims.get(claim) {
            Some(ClaimDecision::Split(parts)) => parts.len(),
            _ => 1,
        };
        let verdict = pair_verdict(file, row, parts, claim)?;
        out.pairs.insert(item.item_id.clone(), verdict);
    }
    if out.reviewer.is_empty() {
        return Err(ReviewError::BadFile {
            file: file.into(),
            message: "has no rows: fill in the exported items".into(),
        });
    }
    let missing: Vec<&str> = index
        .items
        .iter()
        .filter(|i| match i.kind {
            ItemKind::Claim => !out.claims.contains_key(&i.item_id),
            ItemKind::Pair => !out.pairs.contains_key(&i.item_id),
            ItemKind::Uncertainty => !out.uncertainty.contains_key(&i.item_id),
        })
        .map(|i| i.item_id.as_str())
        .collect();
    no_row_missing(file, &missing, "item", "every item is labelled")?;
    Ok(out)
}

/// Refuses a labelled file that leaves exported `what`s (`item`, `claim`)
/// without a row, naming the first ten; `rule` says what is expected.
pub(super) fn no_row_missing(file: &str, missing: &[&str], what: &str, rule: &str) -> Result<(), ReviewError> {
    if missing.is_empty() {
        return Ok(());
    }
    Err(ReviewError::BadFile {
        file: file.into(),
        message: format!(
            "{} exported {what}(s) have no row: {}{}; {rule}",
            missing.len(),
            missing.iter().take(10).copied().collect::<Vec<_>>().join(", "),
            if missing.len() > 10 { ", ..." } else { "" }
        ),
    })
}

/// A claim row's extraction decision (`not_factual`, `merge_with`,
/// `split`), as a scorer's file and the extraction check's file write it:
/// the one parser of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extraction {
    /// One factual claim as extracted.
    AsExtracted,
    /// Advice, opinion or an uncertainty statement (the reviewer's words).
    NotFactual(String),
    /// A repeated paraphrase of another claim item of the same output.
    Merged(String),
    /// The distinct assertions of a conjunction, at least two.
    Split(Vec<String>),
}

/// Reads the extraction decision of `row`, the row of claim `item`;
/// `items` are the export's items, for the target of a merge.
pub(crate) fn extraction_decision(
    file: &str,
    row: &Row,
    item: &super::ExportedItem,
    items: &BTreeMap<&str, &super::ExportedItem>,
) -> Result<Extraction, ReviewError> {
    let (not_factual, merge, split) = (row.get("not_factual"), row.get("merge_with"), row.get("split"));
    if !not_factual.is_empty() && !matches!(not_factual, "no" | "n" | "false" | "0") {
        return Ok(Extraction::NotFactual(not_factual.into()));
    }
    if !merge.is_empty() {
        let target = items.get(merge).filter(|t| t.kind == ItemKind::Claim && t.run_id == item.run_id);
        if target.is_none() || merge == item.item_id {
            return Err(bad(
                file,
                row,
                "merge_with",
                format!("\"{merge}\" is not another claim item of the same output {}", item.output),
            ));
        }
        return Ok(Extraction::Merged(merge.into()));
    }
    if split.is_empty() {
        return Ok(Extraction::AsExtracted);
    }
    let parts: Vec<String> = split.split(PART_SEPARATOR).map(|p| p.trim().to_owned()).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        return Err(bad(
            file,
            row,
            "split",
            format!("give at least two non-empty parts separated by `{PART_SEPARATOR}`"),
        ));
    }
    Ok(Extraction::Split(parts))
}

/// The `cited` indices of an added claim's row (`1;3`, empty for an
/// uncited claim), each a citation of `output` (its reference table in
/// `citations_of`, when the export has one).
pub(crate) fn cited_indices(
    file: &str,
    row: &Row,
    output: &str,
    citations_of: &BTreeMap<&str, &BTreeMap<u32, String>>,
) -> Result<Vec<u32>, ReviewError> {
    let mut cited = Vec::new();
    for part in row.get("cited").split([';', ',', ' ']).filter(|p| !p.is_empty()) {
        match part.trim_start_matches('[').trim_end_matches(']').parse::<u32>() {
            Ok(n) if n > 0 => cited.push(n),
            _ => {
                return Err(bad(
                    file,
                    row,
                    "cited",
                    format!(
                        "\"{part}\" is not a citation index: give the output's indices as 1;3, or nothing for an uncited claim"
                    ),
                ));
            }
        }
    }
    if let Some(table) = citations_of.get(output).filter(|t| !t.is_empty())
        && let Some(n) = cited.iter().find(|n| !table.contains_key(n))
    {
        return Err(bad(
            file,
            row,
            "cited",
            format!(
                "[{n}] is not a citation of output {output} (its references: {})",
                table.keys().map(|k| format!("[{k}]")).collect::<Vec<_>>().join(" ")
            ),
        ));
    }
    Ok(cited)
}

/// A pair row's verdict: `supports` yes or no (with a reason among
/// [`PAIR_REASONS`] when no), one per part, separated by `||`, when this
/// reviewer split the pair's claim into `parts`; `secondary` yes or no.
fn pair_verdict(file: &str, row: &Row, parts: usize, claim: &str) -> Result<PairVerdict, ReviewError> {
    let supports_cell = row.get("supports");
    if supports_cell.is_empty() {
        return Err(bad(
            file,
            row,
            "supports",
            "empty: does the cited source fully support the claim? yes or no".into(),
        ));
    }
    let values: Vec<&str> = supports_cell.split(PART_SEPARATOR).map(str::trim).collect();
    let reason_cell = row.get("reason");
    let reasons: Vec<&str> = if reason_cell.is_empty() {
        vec![""; values.len()]
    } else {
        reason_cell.split(PART_SEPARATOR).map(str::trim).collect()
    };
    if values.len() != parts {
        let why = if parts > 1 {
            format!(
                "{} verdict(s), but this file splits claim {claim} into {parts} parts: give one yes or no per part, separated by `{PART_SEPARATOR}` (each part is an atomic claim with this citation attached)",
                values.len()
            )
        } else {
            format!("{} verdicts for an unsplit claim: give one yes or no", values.len())
        };
        return Err(bad(file, row, "supports", why));
    }
    if reasons.len() != values.len() {
        return Err(bad(
            file,
            row,
            "reason",
            format!(
                "{} verdicts but {} reasons: give one reason per part (empty for a yes), separated by `{PART_SEPARATOR}`",
                values.len(),
                reasons.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (value, reason) in values.iter().zip(&reasons) {
        let supports = match value.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" | "1" => true,
            "no" | "n" | "false" | "0" => false,
            other => return Err(bad(file, row, "supports", format!("\"{other}\" is not yes or no"))),
        };
        if !supports && !PAIR_REASONS.contains(reason) {
            return Err(bad(
                file,
                row,
                "reason",
                format!("\"{reason}\": a pair that does not support needs a reason among {}", PAIR_REASONS.join(", ")),
            ));
        }
        out.push((supports, if supports { String::new() } else { (*reason).to_owned() }));
    }
    let Some(secondary) = yes_no(file, row, "secondary")? else {
        return Err(bad(
            file,
            row,
            "secondary",
            "empty: is the cited source only secondary (it reports the claim from another source)? yes or no (seed 004 reports secondary-only sources apart)".into(),
        ));
    };
    Ok(PairVerdict { parts: out, secondary })
}

/// The final labels an adjudicator may give, per kind of item.
pub(crate) fn adjudication_labels(kind: Option<ItemKind>) -> Vec<String> {
    match kind {
        Some(ItemKind::Pair) => vec!["yes".into(), "no".into()],
        Some(ItemKind::Uncertainty) => vec!["0".into(), "1".into(), "2".into()],
        // Claims, split parts and added claims.
        _ => CLAIM_LABELS.iter().map(|s| (*s).to_owned()).chain(["not_factual".into(), "merged".into()]).collect(),
    }
}

fn parse_adjudication(file: &str, rows: &[Row], index: &ExportIndex) -> Result<Adjudication, ReviewError> {
    let items: BTreeMap<&str, ItemKind> = index.items.iter().map(|i| (i.item_id.as_str(), i.kind)).collect();
    let mut out = Adjudication { file: file.into(), adjudicator: String::new(), decisions: BTreeMap::new() };
    for row in rows {
        let id = row.get("item_id");
        // A split part is `<claim item>.<n>`; an added claim `added:<reviewer>:<id>`.
        // An item id may hold a dot itself (a part of a claim the
        // extraction check split, `c00001.2`), so the part is the last one.
        let base = if items.contains_key(id) { id } else { id.rsplit_once('.').map_or(id, |(b, _)| b) };
        let kind = items.get(base).copied();
        if kind.is_none() && !id.starts_with("added:") {
            return Err(bad(
                file,
                row,
                "item_id",
                format!("\"{id}\" is not an exported item, split part or added claim"),
            ));
        }
        let label = row.get("final_label");
        let allowed = adjudication_labels(kind);
        let split_choice = kind == Some(ItemKind::Claim) && label.starts_with("split:");
        if !allowed.iter().any(|a| a == label) && !split_choice {
            return Err(bad(
                file,
                row,
                "final_label",
                format!(
                    "\"{label}\" is not a final label for {id}: use one of {}{}",
                    allowed.join(", "),
                    if kind == Some(ItemKind::Claim) {
                        ", or split:<reviewer> to keep that reviewer's split"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let reason = row.get("reason");
        if reason.is_empty()
            && kind != Some(ItemKind::Pair)
            && kind != Some(ItemKind::Uncertainty)
            && let Some(why) = reason_required(label)
        {
            return Err(bad(file, row, "reason", why.into()));
        }
        if kind == Some(ItemKind::Pair)
            && label == "no"
            && !id.ends_with(".secondary")
            && !PAIR_REASONS.contains(&reason)
        {
            return Err(bad(
                file,
                row,
                "reason",
                format!("a pair that does not support needs a reason among {}", PAIR_REASONS.join(", ")),
            ));
        }
        let rationale = row.get("rationale");
        if rationale.is_empty() {
            return Err(bad(
                file,
                row,
                "rationale",
                "empty: seed 004 asks for a written rationale per adjudication".into(),
            ));
        }
        let adjudicator = row.get("adjudicator");
        if adjudicator.is_empty() {
            return Err(bad(file, row, "adjudicator", "empty: name the third person who adjudicated".into()));
        }
        if !index.reviewers.is_empty() && index.reviewers.iter().any(|r| r == adjudicator) {
            return Err(bad(
                file,
                row,
                "adjudicator",
                format!("\"{adjudicator}\" is one of the reviewers: a third person adjudicates"),
            ));
        }
        out.adjudicator = adjudicator.into();
        if out.decisions.insert(id.into(), (label.into(), reason.into(), rationale.into())).is_some() {
            return Err(bad(file, row, "item_id", format!("item {id} is adjudicated twice")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{ExportIndex, ExportedItem, ItemKind};
    use super::{Parsed, ReviewError, parse_file};

    fn index() -> ExportIndex {
        let item = |id: &str, kind, claim: Option<&str>| ExportedItem {
            item_id: id.into(),
            kind,
            run_id: "q1:a:1".into(),
            arm: "a".into(),
            question_id: "q1".into(),
            output: "OUT".into(),
            claim_item: claim.map(str::to_owned),
            claim_id: Some(1),
            citation: claim.map(|_| 1),
            url: claim.map(|_| "https://x.example/a".into()),
            citations: if kind == ItemKind::Uncertainty {
                BTreeMap::from([(1, "https://x.example/a".to_owned())])
            } else {
                BTreeMap::new()
            },
        };
        ExportIndex {
            kind: "cohort-review-export".into(),
            manifest_sha256: String::new(),
            exported_at: String::new(),
            reviewers: vec!["alice".into(), "bob".into()],
            folder: String::new(),
            items: vec![
                item("c1", ItemKind::Claim, None),
                item("p1", ItemKind::Pair, Some("c1")),
                item("u1", ItemKind::Uncertainty, None),
            ],
            extraction_check: None,
        }
    }

    const HEADER: &str = "reviewer,item_id,kind,output,claim,cited,label,reason,supports,secondary,missing_original,cited_supports,uncertainty,split\n";

    fn parse(rows: &str) -> Result<Parsed, ReviewError> {
        parse_file("alice.csv", format!("{HEADER}{rows}").as_bytes(), "csv", &index(), "")
    }

    fn refusal(rows: &str) -> (usize, String, String) {
        match parse(rows) {
            Err(ReviewError::BadInput { line, field, message, .. }) => (line, field, message),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("accepted"),
        }
    }

    const UNC: &str = "alice,u1,uncertainty,OUT,,,,,,,,,2,\n";

    /// The seed-004 procedure as the import enforces it, each refusal
    /// naming its line and field: contradicted needs its evidence; a pair
    /// of a claim split in this file takes one verdict per part; every pair
    /// says whether its source is only secondary; an added claim's cited
    /// indices are the output's and each has a verdict.
    #[test]
    fn the_review_procedure_is_checked_field_by_field() {
        let pair = "alice,p1,pair,OUT,,,,,yes,no,,,,\n";
        let (line, field, message) = refusal(&format!("alice,c1,claim,OUT,,,contradicted,,,,,,,\n{pair}{UNC}"));
        assert_eq!((line, field.as_str()), (2, "reason"), "{message}");
        assert!(message.contains("conflicting evidence"), "{message}");

        let split = "alice,c1,claim,OUT,,,fully_supported || unsupported,,,,,,,one || two\n";
        let (line, field, message) = refusal(&format!("{split}{pair}{UNC}"));
        assert_eq!((line, field.as_str()), (3, "supports"), "{message}");
        assert!(message.contains("splits claim c1 into 2 parts"), "{message}");

        let (line, field, _) =
            refusal(&format!("alice,c1,claim,OUT,,,fully_supported,,,,,,,\nalice,p1,pair,OUT,,,,,yes,,,,,\n{UNC}"));
        assert_eq!((line, field.as_str()), (3, "secondary"));

        let labelled = format!("alice,c1,claim,OUT,,,fully_supported,,,,,,,\n{pair}{UNC}");
        let (line, field, message) =
            refusal(&format!("{labelled}alice,x1,added,OUT,A missed claim.,1,unsupported,,,,,,,\n"));
        assert_eq!((line, field.as_str()), (5, "cited_supports"), "{message}");
        let (_, field, message) =
            refusal(&format!("{labelled}alice,x1,added,OUT,A missed claim.,3,unsupported,,,,,no:broken,,\n"));
        assert_eq!(field, "cited", "{message}");
        assert!(message.contains("[3] is not a citation of output OUT"), "{message}");
    }

    /// What a valid file records: per-part verdicts, the secondary label,
    /// the missing-original flag, an added claim's pairs.
    #[test]
    fn per_part_verdicts_flags_and_added_pairs_are_kept() {
        let rows = format!(
            "alice,c1,claim,OUT,,,fully_supported || unsupported,,,,yes,,,one || two\n\
             alice,p1,pair,OUT,,,,|| partially_supports,yes || no,yes,,,,\n{UNC}\
             alice,x1,added,OUT,A missed claim.,1,unsupported,,,,,no:contradicts,,\n"
        );
        let Ok(Parsed::Reviewer(r)) = parse(&rows) else { panic!("refused") };
        let v = &r.pairs["p1"];
        assert_eq!(v.parts, vec![(true, String::new()), (false, "partially_supports".to_owned())]);
        assert!(v.secondary);
        assert!(r.missing_original.contains("c1"));
        assert_eq!(r.added[0].pairs, vec![(1, false, "contradicts".to_owned())]);
    }
}
