//! `cohort review export`: the items two (or more) reviewers label, per
//! reviewer as `items.csv` and `items.jsonl`, with product identity blinded.
//!
//! Items, in order of output code (the codes are random, so the order says
//! nothing about the arms):
//! - a `claim` per extracted claim, with its exact wording and line, its
//!   cited indices and URLs, and the source text per citation (the captured
//!   text, else the system's own snippet);
//! - a `pair` per claim-citation pair, identical pairs (same wording, same
//!   URL) within one answer once (seed 004: they count once);
//! - an `uncertainty` item per completed output, with the output and the
//!   uncertainty key's caveats and disputes for its question.
//!
//! After an extraction check ([`super::check`]) the claims are the checked
//! extraction's units (parts, merged citations, added claims) and keep the
//! check's ids; `--extraction-checker` writes the check's own file instead.
//!
//! Blinding: each arm gets a code drawn from the operating system's random
//! source (never derived from its name), the mapping is written to
//! `DIR/.cohort/review/blinding.json` only, once per round (the check's
//! export draws it, the scorers' export reuses it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cohort_artifacts::ArtifactStore;
use cohort_core::ValidatedCohort;
use cohort_core::taxonomy::Outcome;
use cohort_ledger::{Ledger, RunStateKind};
use cohort_records::record::RunRecord;
use serde::Serialize;

use crate::csv;

use super::check::{CHECK_COLUMNS, CHECK_INDEX_FILE};
use super::{
    BLINDING_FILE, Blinding, EXPORT_FILE, ExportIndex, ExportedItem, ItemKind, REVIEW_COLUMNS, ReviewError, state_dir,
};

/// Source text per citation is cut here (characters), with a marker, so a
/// file stays openable in a spreadsheet; the full text is in the artifact
/// store under the capture's `text_sha256`.
pub const MAX_SOURCE_CHARS: usize = 20_000;

/// What replaces a product's name, arm id or version label in the text a
/// reviewer reads.
pub const REDACTED: &str = "[product redacted]";

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub reviewers: Vec<String>,
    /// The export folder; `None` for `DIR/review/<UTC timestamp>/`.
    pub out: Option<PathBuf>,
    pub now: SystemTime,
    /// Also a Label Studio project (`label-studio/` in the folder), made
    /// from the same blinded rows ([`super::label_studio`]).
    pub label_studio: bool,
    /// Phase 1 of an extraction check ([`super::check`]): the check's file
    /// for this person instead of the scorers' items.
    pub extraction_checker: Option<String>,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct ExportWritten {
    pub folder: PathBuf,
    pub items: usize,
    pub outputs: usize,
    pub claims: usize,
    pub pairs: usize,
    pub reviewers: usize,
    /// The Label Studio project folder, when asked for.
    pub label_studio: Option<PathBuf>,
    /// The extraction check's file was written for this person.
    pub checker: Option<String>,
    /// The scorers' items were built from the check this person made.
    pub checked_by: Option<String>,
}

impl ExportWritten {
    /// What `cohort review export` prints.
    pub fn describe(&self, cohort_dir: &Path) -> String {
        let blinding = state_dir(cohort_dir).join(BLINDING_FILE);
        if let Some(checker) = &self.checker {
            return format!(
                "exported the extraction check for {checker}: {} claim(s) of {} output(s)\n\
                 file: {}\nthen: `cohort review import {} <the filled check.csv>`, and export the scorers' items\n\
                 the blinding codes are in {} (keep it from the reviewers)\n",
                self.claims,
                self.outputs,
                self.folder.join(checker).join("check.csv").display(),
                cohort_dir.display(),
                blinding.display()
            );
        }
        let label_studio =
            self.label_studio.as_ref().map_or_else(String::new, |dir| super::label_studio::describe_project(dir));
        let checked = self.checked_by.as_ref().map_or_else(
            || "the extraction was not independently checked before scoring\n".to_owned(),
            |c| format!("the claims are the extraction as {c} checked it\n"),
        );
        format!(
            "exported {} item(s) for {} reviewer(s): {} output(s), {} claim(s), {} claim-citation pair(s)\n\
             {checked}folder: {}\n{label_studio}the blinding codes are in {} (keep it from the reviewers)\n",
            self.items,
            self.reviewers,
            self.outputs,
            self.claims,
            self.pairs,
            self.folder.display(),
            blinding.display()
        )
    }
}

/// One row of a reviewer's file (the columns of [`REVIEW_COLUMNS`]).
#[derive(Debug, Clone, Default)]
struct ItemRow {
    reviewer: String,
    item_id: String,
    kind: String,
    output: String,
    question_id: String,
    question: String,
    claim_item: String,
    claim: String,
    line: String,
    cited: String,
    urls: String,
    source_text: String,
    answerable: String,
    required_caveats: String,
    known_disputes: String,
    output_text: String,
    label: String,
    reason: String,
    supports: String,
    secondary: String,
    missing_original: String,
    cited_supports: String,
    uncertainty: String,
    abstained: String,
    split: String,
    merge_with: String,
    not_factual: String,
    note: String,
}

impl ItemRow {
    fn fields(&self) -> [&str; 28] {
        [
            &self.reviewer,
            &self.item_id,
            &self.kind,
            &self.output,
            &self.question_id,
            &self.question,
            &self.claim_item,
            &self.claim,
            &self.line,
            &self.cited,
            &self.urls,
            &self.source_text,
            &self.answerable,
            &self.required_caveats,
            &self.known_disputes,
            &self.output_text,
            &self.label,
            &self.reason,
            &self.supports,
            &self.secondary,
            &self.missing_original,
            &self.cited_supports,
            &self.uncertainty,
            &self.abstained,
            &self.split,
            &self.merge_with,
            &self.not_factual,
            &self.note,
        ]
    }
}

/// One claim the scorers label: an extracted claim as it is, or, after an
/// extraction check, a claim as the check left it ([`super::check::checked_units`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    /// Without a check the claim's id in the run's score (numbered
    /// `c00001`... later); with one its final id (`c00001`, `c00001.2`,
    /// `a0001`).
    pub id: String,
    pub text: String,
    pub line: String,
    pub cited: Vec<u32>,
    /// The claim's id in the run's score when it is one extracted claim as
    /// extracted (calibration compares the judge's verdict on it).
    pub claim_id: Option<u32>,
}

/// A completed output as read for an export.
struct Output {
    record: RunRecord,
    code: String,
    question: String,
    text: String,
}

/// Writes the export (see the module docs): the scorers' items, or with
/// `extraction_checker` the extraction check's file
/// ([`super::check`]). Refuses when the scorers' round was already
/// exported, a reviewer id is not a plain name, or the extraction check is
/// declared (or exported) and not imported.
pub async fn export(
    cohort_dir: &Path,
    cohort: &ValidatedCohort,
    manifest_sha256: &str,
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    options: &ExportOptions,
    progress: &dyn Fn(u64, u64),
) -> Result<ExportWritten, ReviewError> {
    let state = state_dir(cohort_dir);
    if state.join(EXPORT_FILE).exists() {
        return Err(ReviewError::Refused(format!(
            "{} exists: this cohort's review round was already exported (codes are drawn once, so labels stay comparable); \
             import its files with `cohort review import`, or start a new round by moving {} aside and exporting again",
            state.join(EXPORT_FILE).display(),
            state.display()
        )));
    }
    let check = match &options.extraction_checker {
        Some(checker) => {
            check_ids(std::slice::from_ref(checker))?;
            let index = state.join(CHECK_INDEX_FILE);
            if index.exists() {
                return Err(ReviewError::Refused(format!(
                    "{} exists: this cohort's extraction check was already exported (written once); import the checker's file with `cohort review import`",
                    index.display()
                )));
            }
            None
        }
        None => {
            check_reviewers(&options.reviewers)?;
            scorers_check(&state, cohort, &options.reviewers)?
        }
    };
    let stamp = humantime::format_rfc3339_millis(options.now).to_string();
    let folder = options.out.clone().unwrap_or_else(|| cohort_dir.join("review").join(stamp.replace(':', "-")));
    if folder.exists() {
        return Err(ReviewError::Refused(format!(
            "{} already exists: an export folder is written once; choose another --out",
            folder.display()
        )));
    }
    let status = ledger.status().await?;
    if status.manifest_sha256 != manifest_sha256 {
        return Err(ReviewError::Refused(format!(
            "the ledger was seeded from manifest {}, not this cohort's {manifest_sha256}: point --ledger/--redis at this cohort's ledger",
            status.manifest_sha256
        )));
    }

    // Codes from the OS, one per arm, distinct; drawn once per round, so
    // the scorers' export after an extraction check reuses the check's.
    let blinding_path = state.join(BLINDING_FILE);
    let drawn = !blinding_path.exists();
    let codes: BTreeMap<String, String> = if drawn {
        let mut codes = BTreeMap::new();
        let mut used = BTreeSet::new();
        for arm in &cohort.config.arms {
            let code = loop {
                let c = random_code()?;
                if used.insert(c.clone()) {
                    break c;
                }
            };
            codes.insert(arm.id.clone(), code);
        }
        codes
    } else {
        let bytes =
            std::fs::read(&blinding_path).map_err(|e| ReviewError::io(blinding_path.display().to_string(), e))?;
        let blinding: Blinding = serde_json::from_slice(&bytes)
            .ok()
            .filter(|b: &Blinding| b.manifest_sha256 == manifest_sha256)
            .ok_or_else(|| ReviewError::BadFile {
                file: blinding_path.display().to_string(),
                message: "is not this cohort's blinding (another manifest, or not a blinding file); move the review state aside".into(),
            })?;
        blinding.codes
    };

    // Product identity as it may appear in an output (the built-in sim
    // system names its arm; a product may name itself): every arm id,
    // label and version label, longest first, replaced wherever a
    // reviewer reads text. The exact wording is otherwise kept.
    let mut needles: Vec<String> = cohort
        .config
        .arms
        .iter()
        .flat_map(|a| [a.id.clone(), a.label.clone(), a.pinned_version.clone()])
        .filter(|n| n.trim().len() >= 3)
        .collect();
    let rows = ledger.runs().await?;
    needles.extend(
        rows.iter()
            .filter_map(|r| r.observed_version.clone())
            .filter(|v| v.trim().len() >= 3 && v != cohort_records::record::NOT_DISCLOSED),
    );
    needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    needles.dedup();
    let redact = |text: &str| -> String {
        let mut out = text.to_owned();
        for n in &needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), REDACTED);
            }
        }
        out
    };
    let completed: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.state == RunStateKind::Final && r.outcome == Some(Outcome::Completed) && !r.record_sha256.is_empty()
        })
        .collect();
    let mut read = Vec::new();
    for (done, row) in completed.iter().enumerate() {
        progress(done as u64, completed.len() as u64);
        let record = read_record(artifacts, &row.run_id, &row.record_sha256)?;
        let Some(code) = codes.get(&record.arm) else { continue };
        let code = format!("{code}-{}-{}", record.question_id, record.repeat);
        let question = cohort.question(&record.question_id).map(|q| q.text.clone()).unwrap_or_default();
        let text = match &record.output_sha256 {
            Some(sha) => artifacts
                .get(sha)
                .map_err(|e| ReviewError::io(format!("artifact {sha}"), e))?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
            None => String::new(),
        };
        read.push(Output { record, code, question, text });
    }
    progress(completed.len() as u64, completed.len() as u64);
    read.sort_by(|a, b| a.code.cmp(&b.code));
    let blinding = Blinding { kind: "cohort-review-blinding".into(), manifest_sha256: manifest_sha256.into(), codes };
    let written = Written { state: &state, folder: &folder, blinding: drawn.then_some(&blinding) };
    if let Some(checker) = &options.extraction_checker {
        return export_check(&written, checker, manifest_sha256, &stamp, &read, &redact);
    }
    if let Some(c) = &check {
        // Every output's claims were checked: a run completed after the
        // check's export has no checked extraction.
        let checked: BTreeSet<&str> = c.index.items.iter().map(|i| i.run_id.as_str()).collect();
        let unchecked: Vec<&str> =
            read.iter().map(|o| o.record.run_id.as_str()).filter(|r| !checked.contains(r)).collect();
        if !unchecked.is_empty() {
            return Err(ReviewError::Refused(format!(
                "{} completed run(s) are not in the extraction check ({}{}): they completed after it was exported, so their claims were not checked; start a new round by moving {} aside and exporting the check again",
                unchecked.len(),
                unchecked.iter().take(5).copied().collect::<Vec<_>>().join(", "),
                if unchecked.len() > 5 { ", ..." } else { "" },
                state.display()
            )));
        }
    }
    let key: BTreeMap<&str, &cohort_core::uncertainty_key::UncertaintyEntry> =
        cohort.uncertainty_key.iter().flatten().map(|e| (e.question_id.as_str(), e)).collect();

    // The judging passes, for the sources `cohort judge --capture` fetched
    // after collection: a reviewer reads the text the judge read.
    let pass_error = |e: cohort_records::passes::PassError| ReviewError::BadFile {
        file: cohort_dir.join(cohort_artifacts::STATE_DIR).join("passes").display().to_string(),
        message: e.to_string(),
    };
    let passes: Vec<cohort_records::passes::PassStore> = cohort_records::passes::list(cohort_dir)
        .map_err(pass_error)?
        .iter()
        .map(|name| cohort_records::passes::PassStore::open(cohort_dir, name))
        .collect::<Result<_, _>>()
        .map_err(pass_error)?;

    // (rows, items) per output, in order of output code.
    let mut outputs: Vec<(Vec<ItemRow>, Vec<ExportedItem>)> = Vec::new();
    for Output { record, code: output_code, question, text: output_text } in &read {
        let (mut rows_out, mut items) = (Vec::new(), Vec::new());
        let base = |kind: ItemKind| ExportedItem {
            item_id: String::new(),
            kind,
            run_id: record.run_id.clone(),
            arm: record.arm.clone(),
            question_id: record.question_id.clone(),
            output: output_code.clone(),
            claim_item: None,
            claim_id: None,
            citation: None,
            url: None,
            citations: BTreeMap::new(),
        };
        let blank = ItemRow {
            output: output_code.clone(),
            question_id: record.question_id.clone(),
            question: question.clone(),
            ..ItemRow::default()
        };
        let mut late = Vec::new();
        if record.scoring.is_some() {
            for pass in &passes {
                late.extend(pass.read_run(&record.run_id).map_err(pass_error)?.into_iter().flat_map(|r| r.captures));
            }
        }
        let sources = source_texts(artifacts, record, &late)?;
        let refs: BTreeMap<u32, &cohort_core::scoring::Reference> =
            record.scoring.iter().flat_map(|s| &s.report.references).map(|r| (r.index, r)).collect();
        let claims: Vec<(u32, String, String, Vec<u32>)> = record
            .scoring
            .iter()
            .flat_map(|s| &s.report.claims)
            .map(|c| (c.id, c.text.clone(), c.line.to_string(), c.cited.clone()))
            .collect();
        let units: Vec<Unit> = match &check {
            Some(c) => super::check::checked_units(c, &record.run_id, output_code, &claims),
            None => claims
                .into_iter()
                .map(|(id, text, line, cited)| Unit { id: id.to_string(), text, line, cited, claim_id: Some(id) })
                .collect(),
        };
        let listed: Vec<(u32, &str, &[u32])> =
            units.iter().enumerate().map(|(n, u)| (n as u32, u.text.as_str(), u.cited.as_slice())).collect();
        let distinct: BTreeSet<(u32, u32)> =
            distinct_pairs(&listed, &|i| refs.get(&i).and_then(|r| r.url.clone())).into_iter().collect();
        for (n, unit) in units.iter().enumerate() {
            let urls: Vec<String> = unit
                .cited
                .iter()
                .map(|i| format!("[{i}] {}", refs.get(i).and_then(|r| r.url.as_deref()).unwrap_or("(no URL given)")))
                .collect();
            let texts: Vec<String> =
                unit.cited.iter().map(|i| format!("[{i}] {}", source_text_of(&refs, &sources, *i))).collect();
            items.push(ExportedItem { claim_id: unit.claim_id, item_id: unit.id.clone(), ..base(ItemKind::Claim) });
            rows_out.push(ItemRow {
                kind: "claim".into(),
                item_id: unit.id.clone(),
                claim: unit.text.clone(),
                line: unit.line.clone(),
                cited: unit.cited.iter().map(u32::to_string).collect::<Vec<_>>().join(";"),
                urls: urls.join("\n"),
                source_text: texts.join("\n\n"),
                ..blank.clone()
            });
            for index in unit.cited.iter().filter(|i| distinct.contains(&(n as u32, **i))) {
                let url = refs.get(index).and_then(|r| r.url.clone());
                let pair_local = format!("{}/{index}", unit.id);
                items.push(ExportedItem {
                    item_id: pair_local.clone(),
                    claim_item: Some(unit.id.clone()),
                    citation: Some(*index),
                    url: url.clone(),
                    ..base(ItemKind::Pair)
                });
                rows_out.push(ItemRow {
                    kind: "pair".into(),
                    item_id: pair_local,
                    claim_item: unit.id.clone(),
                    claim: unit.text.clone(),
                    line: unit.line.clone(),
                    cited: index.to_string(),
                    urls: url.unwrap_or_else(|| "(no URL given)".into()),
                    source_text: source_text_of(&refs, &sources, *index),
                    ..blank.clone()
                });
            }
        }
        let entry = key.get(record.question_id.as_str());
        let citations = reference_table(record);
        let listed = citations.iter().map(|(i, u)| format!("[{i}] {u}")).collect::<Vec<_>>().join("\n");
        items.push(ExportedItem { item_id: "u".into(), citations, ..base(ItemKind::Uncertainty) });
        rows_out.push(ItemRow {
            kind: "uncertainty".into(),
            item_id: "u".into(),
            urls: listed,
            answerable: entry.map_or_else(|| "not in the key".to_owned(), |e| e.answerable.to_string()),
            required_caveats: entry.map(|e| e.required_caveats.join("\n")).unwrap_or_default(),
            known_disputes: entry.map(|e| e.known_disputes.join("\n")).unwrap_or_default(),
            output_text: output_text.clone(),
            ..blank.clone()
        });
        for row in &mut rows_out {
            for field in [&mut row.claim, &mut row.source_text, &mut row.output_text, &mut row.urls] {
                *field = redact(field);
            }
        }
        outputs.push((rows_out, items));
    }

    // Global item ids: claims c00001.. (after a check, the check's ids),
    // pairs p00001.., uncertainty u0001..
    let (mut nc, mut np, mut nu) = (0usize, 0usize, 0usize);
    let mut all_items = Vec::new();
    let mut all_rows = Vec::new();
    for (rows_out, items) in outputs.iter_mut() {
        let mut claim_ids: BTreeMap<String, String> = BTreeMap::new();
        for (row, item) in rows_out.iter_mut().zip(items.iter_mut()) {
            let id = match item.kind {
                ItemKind::Claim => {
                    nc += 1;
                    let id = if check.is_some() { item.item_id.clone() } else { format!("c{nc:05}") };
                    claim_ids.insert(item.item_id.clone(), id.clone());
                    id
                }
                ItemKind::Pair => {
                    np += 1;
                    format!("p{np:05}")
                }
                ItemKind::Uncertainty => {
                    nu += 1;
                    format!("u{nu:04}")
                }
            };
            if let Some(local) = &item.claim_item {
                let global = claim_ids.get(local).cloned().unwrap_or_default();
                item.claim_item = Some(global.clone());
                row.claim_item = global;
            }
            item.item_id.clone_from(&id);
            row.item_id = id;
        }
        all_items.extend(items.iter().cloned());
        all_rows.extend(rows_out.iter().cloned());
    }

    let index = ExportIndex {
        kind: "cohort-review-export".into(),
        manifest_sha256: manifest_sha256.into(),
        exported_at: stamp,
        reviewers: options.reviewers.clone(),
        folder: folder.display().to_string(),
        items: all_items,
        extraction_check: check.as_ref().map(super::check::ImportedCheck::record),
    };
    written.write(EXPORT_FILE, &pretty(&index, &state.join(EXPORT_FILE))?, |partial| {
        for reviewer in &options.reviewers {
            let rows: Vec<ItemRow> =
                all_rows.iter().map(|r| ItemRow { reviewer: reviewer.clone(), ..r.clone() }).collect();
            write_table(&partial.join(reviewer), "items", &REVIEW_COLUMNS, &rows, |r| {
                r.fields().iter().map(|f| (*f).to_owned()).collect()
            })?;
        }
        if options.label_studio {
            // From a reviewer's rows as written: blinded exactly as the files.
            super::label_studio::write_project(partial, &options.reviewers[0])?;
        }
        Ok(())
    })?;
    let label_studio = options.label_studio.then(|| folder.join(super::label_studio::PROJECT_DIR));
    Ok(ExportWritten {
        folder,
        items: nc + np + nu,
        outputs: nu,
        claims: nc,
        pairs: np,
        reviewers: options.reviewers.len(),
        label_studio,
        checker: None,
        checked_by: check.map(|c| c.labels.checker),
    })
}

/// The extraction check a scorers' export builds on: the imported check,
/// `None` when there is none and none is needed. Refused when a check was
/// exported but not imported, when `[review] extraction_check = true` and
/// none was imported, and when a scorer is the checker.
fn scorers_check(
    state: &Path,
    cohort: &ValidatedCohort,
    reviewers: &[String],
) -> Result<Option<super::check::ImportedCheck>, ReviewError> {
    let declared = cohort.config.review.as_ref().and_then(|r| r.extraction_check) == Some(true);
    let imported = super::check::imported_check(state)?;
    let Some(check) = imported else {
        let index = state.join(CHECK_INDEX_FILE);
        if index.exists() {
            return Err(ReviewError::Refused(format!(
                "an extraction check was exported ({}) but its file is not imported: run `cohort review import DIR <checker's check.csv>` first, then export the scorers' items",
                index.display()
            )));
        }
        if declared {
            return Err(ReviewError::Refused(
                "cohort.toml declares `[review] extraction_check = true`: a person who is not a scorer checks the extraction before scoring. \
                 Run `cohort review export DIR --extraction-checker NAME` first, have them fill check.csv, import it with \
                 `cohort review import DIR check.csv`, then export the scorers' items"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if let Some(scorer) = reviewers.iter().find(|r| super::check::same_person(r, &check.labels.checker)) {
        return Err(ReviewError::Refused(format!(
            "scorer \"{scorer}\" is the extraction checker \"{}\": the extraction is checked by a person who is not a scorer (seed 004: an independent second reviewer); choose other scorers",
            check.labels.checker
        )));
    }
    Ok(Some(check))
}

/// Phase 1 of an extraction check: per output (in order of code) a `claim`
/// row per extracted claim (wording, line, cited indices and URLs) and an
/// `output` row with the output's text and reference table, for `checker`.
fn export_check(
    written: &Written<'_>,
    checker: &str,
    manifest_sha256: &str,
    stamp: &str,
    read: &[Output],
    redact: &dyn Fn(&str) -> String,
) -> Result<ExportWritten, ReviewError> {
    let (mut items, mut rows) = (Vec::new(), Vec::<BTreeMap<&'static str, String>>::new());
    let (mut nc, mut nu) = (0usize, 0usize);
    for Output { record, code, question, text } in read {
        let base = |kind: ItemKind, item_id: String| ExportedItem {
            item_id,
            kind,
            run_id: record.run_id.clone(),
            arm: record.arm.clone(),
            question_id: record.question_id.clone(),
            output: code.clone(),
            claim_item: None,
            claim_id: None,
            citation: None,
            url: None,
            citations: BTreeMap::new(),
        };
        let row = |kind: &str, id: &str| -> BTreeMap<&'static str, String> {
            BTreeMap::from([
                ("checker", checker.to_owned()),
                ("item_id", id.to_owned()),
                ("kind", kind.to_owned()),
                ("output", code.clone()),
                ("question_id", record.question_id.clone()),
                ("question", question.clone()),
            ])
        };
        let citations = reference_table(record);
        for claim in record.scoring.iter().flat_map(|s| &s.report.claims) {
            nc += 1;
            let id = format!("c{nc:05}");
            let urls: Vec<String> = claim
                .cited
                .iter()
                .map(|i| format!("[{i}] {}", citations.get(i).map_or("(no URL given)", String::as_str)))
                .collect();
            let mut r = row("claim", &id);
            r.insert("claim", redact(&claim.text));
            r.insert("line", claim.line.to_string());
            r.insert("cited", claim.cited.iter().map(u32::to_string).collect::<Vec<_>>().join(";"));
            r.insert("urls", redact(&urls.join("\n")));
            rows.push(r);
            items.push(ExportedItem { claim_id: Some(claim.id), ..base(ItemKind::Claim, id) });
        }
        nu += 1;
        let id = format!("u{nu:04}");
        let mut r = row("output", &id);
        r.insert("urls", redact(&citations.iter().map(|(i, u)| format!("[{i}] {u}")).collect::<Vec<_>>().join("\n")));
        r.insert("output_text", redact(text));
        rows.push(r);
        items.push(ExportedItem { citations, ..base(ItemKind::Uncertainty, id) });
    }
    let index = ExportIndex {
        kind: super::check::CHECK_KIND.into(),
        manifest_sha256: manifest_sha256.into(),
        exported_at: stamp.into(),
        reviewers: vec![checker.to_owned()],
        folder: written.folder.display().to_string(),
        items,
        extraction_check: None,
    };
    let bytes = pretty(&index, &written.state.join(CHECK_INDEX_FILE))?;
    let sha = cohort_core::hash::sha256_hex(&bytes);
    for r in &mut rows {
        r.insert("check_sha256", sha.clone());
    }
    let fields = |r: &BTreeMap<&'static str, String>| -> Vec<String> {
        CHECK_COLUMNS.iter().map(|c| r.get(c).cloned().unwrap_or_default()).collect()
    };
    written.write(CHECK_INDEX_FILE, &bytes, |partial| {
        write_table(&partial.join(checker), "check", &CHECK_COLUMNS, &rows, fields)
    })?;
    Ok(ExportWritten {
        folder: written.folder.to_owned(),
        items: nc + nu,
        outputs: nu,
        claims: nc,
        pairs: 0,
        reviewers: 1,
        label_studio: None,
        checker: Some(checker.to_owned()),
        checked_by: None,
    })
}

/// An output's reference table, index -> URL (for the claims a reviewer
/// adds, and the check's `urls`).
fn reference_table(record: &RunRecord) -> BTreeMap<u32, String> {
    record.scoring.iter().flat_map(|s| &s.report.references).filter_map(|r| Some((r.index, r.url.clone()?))).collect()
}

/// Where an export writes: the person's folder under a temporary name,
/// renamed into place when complete, after the state files (the index,
/// write-once, and the blinding when this export drew the codes).
struct Written<'a> {
    state: &'a Path,
    folder: &'a Path,
    blinding: Option<&'a Blinding>,
}

impl Written<'_> {
    fn write(
        &self,
        index_name: &str,
        index: &[u8],
        fill: impl FnOnce(&Path) -> Result<(), ReviewError>,
    ) -> Result<(), ReviewError> {
        let folder = self.folder;
        let parent = folder.parent().map_or_else(|| PathBuf::from("."), Path::to_owned);
        let io = |p: &Path, e| ReviewError::io(p.display().to_string(), e);
        std::fs::create_dir_all(&parent).map_err(|e| io(&parent, e))?;
        let name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "review".into());
        let partial = parent.join(format!(".partial-{name}-{}", std::process::id()));
        std::fs::create_dir(&partial).map_err(|e| io(&partial, e))?;
        if let Err(e) = fill(&partial) {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
        std::fs::create_dir_all(self.state).map_err(|e| io(self.state, e))?;
        write_once(&self.state.join(index_name), index)?;
        if let Some(blinding) = self.blinding {
            let path = self.state.join(BLINDING_FILE);
            write_once(&path, &pretty(blinding, &path)?)?;
        }
        std::fs::rename(&partial, folder).map_err(|e| io(folder, e))
    }
}

/// Writes `rows` into `dir` (created) as `<stem>.csv` (header `columns`)
/// and `<stem>.jsonl` (one object per row, the same cells).
fn write_table<R>(
    dir: &Path,
    stem: &str,
    columns: &[&str],
    rows: &[R],
    fields: impl Fn(&R) -> Vec<String>,
) -> Result<(), ReviewError> {
    let io = |e| ReviewError::io(dir.display().to_string(), e);
    std::fs::create_dir(dir).map_err(io)?;
    let (mut csv, mut jsonl) = (String::new(), String::new());
    csv::record(&mut csv, columns);
    for row in rows {
        let cells = fields(row);
        csv::record(&mut csv, &cells);
        let object: serde_json::Map<String, serde_json::Value> =
            columns.iter().zip(cells).map(|(c, v)| ((*c).to_owned(), serde_json::Value::String(v))).collect();
        jsonl.push_str(&serde_json::Value::Object(object).to_string());
        jsonl.push('\n');
    }
    write_new(&dir.join(format!("{stem}.csv")), csv.as_bytes())?;
    write_new(&dir.join(format!("{stem}.jsonl")), jsonl.as_bytes())
}

/// The claim-citation pairs of one answer as (claim id, cited index),
/// identical pairs (the same wording citing the same source) once: seed
/// 004 counts repeated identical pairs within one answer once. A citation
/// without a URL is identified by its index.
pub fn distinct_pairs(claims: &[(u32, &str, &[u32])], url_of: &dyn Fn(u32) -> Option<String>) -> Vec<(u32, u32)> {
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut out = Vec::new();
    for (id, text, cited) in claims {
        for index in *cited {
            let source = url_of(*index).unwrap_or_else(|| format!("[{index}]"));
            if seen.insert(((*text).to_owned(), source)) {
                out.push((*id, *index));
            }
        }
    }
    out
}

/// Pretty JSON with a final newline, for the state files.
fn pretty<T: Serialize>(value: &T, path: &Path) -> Result<Vec<u8>, ReviewError> {
    let mut b = serde_json::to_vec_pretty(value).map_err(|e| ReviewError::io(path.display().to_string(), e.into()))?;
    b.push(b'\n');
    Ok(b)
}

/// Reviewer ids name folders and files: letters, digits, `-` and `_`;
/// at least two scorers (seed 004).
pub fn check_reviewers(reviewers: &[String]) -> Result<(), ReviewError> {
    if reviewers.len() < 2 {
        return Err(ReviewError::Refused(
            "--reviewers needs at least two reviewer ids (seed 004: two independent reviewers), e.g. --reviewers alice,bob"
                .into(),
        ));
    }
    check_ids(reviewers)
}

/// Ids name folders and files: letters, digits, `-` and `_`, each once.
fn check_ids(ids: &[String]) -> Result<(), ReviewError> {
    let mut seen = BTreeSet::new();
    for r in ids {
        if r.is_empty() || !r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ReviewError::Refused(format!(
                "reviewer id \"{r}\" names a folder: use letters, digits, '-' and '_' only"
            )));
        }
        if !seen.insert(r) {
            return Err(ReviewError::Refused(format!("reviewer id \"{r}\" is listed twice")));
        }
    }
    Ok(())
}

/// Six base-32 characters from the operating system's random source.
fn random_code() -> Result<String, ReviewError> {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut bytes = [0u8; 6];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ReviewError::io("the operating system's random source (/dev/urandom)", e))?;
    Ok(bytes.iter().map(|b| ALPHABET[usize::from(b % 32)] as char).collect())
}

/// `ArtifactStore::get` has already checked the bytes against `sha256`.
fn read_record(artifacts: &ArtifactStore, run_id: &str, sha256: &str) -> Result<RunRecord, ReviewError> {
    let corrupt = |why: String| ReviewError::CorruptRecord { run_id: run_id.into(), sha256: sha256.into(), why };
    let bytes = artifacts
        .get(sha256)
        .map_err(|e| ReviewError::io(format!("artifact {sha256}"), e))?
        .ok_or_else(|| corrupt("it is missing from the artifact store".into()))?;
    serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("it is not a run record ({e})")))
}

/// URL -> the text a reviewer reads for it: the cited page as captured
/// (the judge's evidence, docs/judging.md "Evidence"), for a SIMULATED
/// system its own simulated page. A real system's own snippet is never
/// shown as the source: when nothing was captured the reviewer is told to
/// open the URL, and the snippet follows labelled as the vendor's.
/// `late` are the captures judging passes made after collection, read after
/// the record's.
fn source_texts(
    artifacts: &ArtifactStore,
    record: &RunRecord,
    late: &[cohort_records::capture::Capture],
) -> Result<BTreeMap<String, String>, ReviewError> {
    let mut out = BTreeMap::new();
    let recorded = record.scoring.iter().flat_map(|s| &s.captures);
    for c in recorded.chain(late).filter(|c| c.accessible) {
        let Some(sha) = c.text_sha256.as_ref().filter(|_| !out.contains_key(&c.url)) else { continue };
        if let Some(bytes) = artifacts.get(sha).map_err(|e| ReviewError::io(format!("artifact {sha}"), e))? {
            out.insert(c.url.clone(), format!("(captured {}) {}", c.accessed_at, String::from_utf8_lossy(&bytes)));
        }
    }
    for s in &record.system_sources {
        let text = if record.simulated {
            format!("(the SIMULATED system's simulated page) {}", s.snippet)
        } else {
            format!("(no source text was captured: open the URL) the vendor's snippet (not the source): {}", s.snippet)
        };
        out.entry(s.url.clone()).or_insert(text);
    }
    Ok(out)
}

fn source_text_of(
    refs: &BTreeMap<u32, &cohort_core::scoring::Reference>,
    sources: &BTreeMap<String, String>,
    index: u32,
) -> String {
    let Some(r) = refs.get(&index) else { return "(the citation resolves to no reference)".into() };
    let text = r
        .url
        .iter()
        .chain(&r.as_written)
        .find_map(|u| sources.get(u).cloned())
        .or_else(|| (!r.snippets.is_empty()).then(|| format!("(evidence passages) {}", r.snippets.join(" … "))))
        .unwrap_or_else(|| "(no source text was captured: open the URL)".into());
    if text.chars().count() > MAX_SOURCE_CHARS {
        let cut: String = text.chars().take(MAX_SOURCE_CHARS).collect();
        format!("{cut} [cut at {MAX_SOURCE_CHARS} characters: open the URL for the rest]")
    } else {
        text
    }
}

pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ReviewError> {
    use std::io::Write as _;
    let mut f = std::fs::File::create_new(path).map_err(|e| ReviewError::io(path.display().to_string(), e))?;
    f.write_all(bytes).map_err(|e| ReviewError::io(path.display().to_string(), e))
}

/// Write-once (`cohort_artifacts::files::write_once_io`: hard link into
/// place, read-only), the rule of every result file.
pub(crate) fn write_once(path: &Path, bytes: &[u8]) -> Result<(), ReviewError> {
    cohort_artifacts::files::write_once_io(path, bytes).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            ReviewError::Refused(format!("{} already exists: it is written once", path.display()))
        }
        _ => ReviewError::io(path.display().to_string(), e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 004: repeated identical pairs within one answer count once;
    /// the same source behind another wording is another pair.
    #[test]
    fn identical_pairs_within_an_answer_are_listed_once() {
        let url = |i: u32| (i != 9).then(|| format!("https://example.org/{i}"));
        let claims: Vec<(u32, &str, &[u32])> = vec![
            (1, "Water ice floats [1].", &[1]),
            (2, "Water ice floats [1].", &[1]),
            (3, "Ice is less dense [1][2].", &[1, 2]),
            (4, "No link [9].", &[9]),
            (5, "No link [9].", &[9]),
        ];
        assert_eq!(distinct_pairs(&claims, &url), vec![(1, 1), (3, 1), (3, 2), (4, 9)]);
    }

    #[test]
    fn reviewer_ids_are_checked() {
        assert!(check_reviewers(&["a".into()]).is_err(), "one reviewer is not enough");
        assert!(check_reviewers(&["a".into(), "a".into()]).is_err());
        assert!(check_reviewers(&["a/b".into(), "c".into()]).is_err());
        assert!(check_reviewers(&["alice".into(), "bob_2".into()]).is_ok());
    }

    #[test]
    fn codes_come_from_the_os_and_differ() {
        let (a, b) = (random_code().unwrap(), random_code().unwrap());
        assert_eq!(a.len(), 6);
        assert_ne!(a, b, "two draws of 30 random bits differ");
    }
}
