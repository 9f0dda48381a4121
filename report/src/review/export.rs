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
//! Blinding: each arm gets a code drawn from the operating system's random
//! source (never derived from its name), the mapping is written to
//! `DIR/.cohort/review/blinding.json` only.

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
}

impl ExportWritten {
    /// What `cohort review export` prints.
    pub fn describe(&self, cohort_dir: &Path) -> String {
        let label_studio =
            self.label_studio.as_ref().map_or_else(String::new, |dir| super::label_studio::describe_project(dir));
        format!(
            "exported {} item(s) for {} reviewer(s): {} output(s), {} claim(s), {} claim-citation pair(s)\n\
             folder: {}\n{label_studio}the blinding codes are in {} (keep it from the reviewers)\n",
            self.items,
            self.reviewers,
            self.outputs,
            self.claims,
            self.pairs,
            self.folder.display(),
            state_dir(cohort_dir).join(BLINDING_FILE).display()
        )
    }
}

/// One row of a reviewer's file (the columns of [`REVIEW_COLUMNS`]).
#[derive(Debug, Clone, Default, Serialize)]
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

/// Writes the export (see the module docs). Refuses when a round was
/// already exported for this cohort, or a reviewer id is not a plain name.
pub async fn export(
    cohort_dir: &Path,
    cohort: &ValidatedCohort,
    manifest_sha256: &str,
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    options: &ExportOptions,
    progress: &dyn Fn(u64, u64),
) -> Result<ExportWritten, ReviewError> {
    check_reviewers(&options.reviewers)?;
    let state = state_dir(cohort_dir);
    if state.join(BLINDING_FILE).exists() {
        return Err(ReviewError::Refused(format!(
            "{} exists: this cohort's review round was already exported (codes are drawn once, so labels stay comparable); \
             import its files with `cohort review import`, or start a new round by moving {} aside and exporting again",
            state.join(BLINDING_FILE).display(),
            state.display()
        )));
    }
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

    // Codes from the OS, one per arm, distinct.
    let mut codes: BTreeMap<String, String> = BTreeMap::new();
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

    // (output code, rows, items) per output, sorted by code afterwards.
    let mut outputs: Vec<(String, Vec<ItemRow>, Vec<ExportedItem>)> = Vec::new();
    for (done, row) in completed.iter().enumerate() {
        progress(done as u64, completed.len() as u64);
        let record = read_record(artifacts, &row.run_id, &row.record_sha256)?;
        let Some(code) = codes.get(&record.arm) else { continue };
        let output_code = format!("{code}-{}-{}", record.question_id, record.repeat);
        let question = cohort.question(&record.question_id).map(|q| q.text.clone()).unwrap_or_default();
        let output_text = match &record.output_sha256 {
            Some(sha) => artifacts
                .get(sha)
                .map_err(|e| ReviewError::io(format!("artifact {sha}"), e))?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
            None => String::new(),
        };
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
        if let Some(score) = &record.scoring {
            let mut late = Vec::new();
            for pass in &passes {
                late.extend(pass.read_run(&record.run_id).map_err(pass_error)?.into_iter().flat_map(|r| r.captures));
            }
            let sources = source_texts(artifacts, &record, &late)?;
            let refs: BTreeMap<u32, &cohort_core::scoring::Reference> =
                score.report.references.iter().map(|r| (r.index, r)).collect();
            let listed: Vec<(u32, &str, &[u32])> =
                score.report.claims.iter().map(|c| (c.id, c.text.as_str(), c.cited.as_slice())).collect();
            let distinct: BTreeSet<(u32, u32)> =
                distinct_pairs(&listed, &|i| refs.get(&i).and_then(|r| r.url.clone())).into_iter().collect();
            for claim in &score.report.claims {
                let claim_local = format!("{}", claim.id);
                let urls: Vec<String> = claim
                    .cited
                    .iter()
                    .map(|i| {
                        format!("[{i}] {}", refs.get(i).and_then(|r| r.url.as_deref()).unwrap_or("(no URL given)"))
                    })
                    .collect();
                let texts: Vec<String> =
                    claim.cited.iter().map(|i| format!("[{i}] {}", source_text_of(&refs, &sources, *i))).collect();
                items.push(ExportedItem {
                    claim_id: Some(claim.id),
                    item_id: claim_local.clone(),
                    ..base(ItemKind::Claim)
                });
                rows_out.push(ItemRow {
                    kind: "claim".into(),
                    item_id: claim_local.clone(),
                    claim: claim.text.clone(),
                    line: claim.line.to_string(),
                    cited: claim.cited.iter().map(u32::to_string).collect::<Vec<_>>().join(";"),
                    urls: urls.join("\n"),
                    source_text: texts.join("\n\n"),
                    ..blank.clone()
                });
                for index in &claim.cited {
                    let url = refs.get(index).and_then(|r| r.url.clone());
                    if !distinct.contains(&(claim.id, *index)) {
                        continue;
                    }
                    let pair_local = format!("{}/{index}", claim.id);
                    items.push(ExportedItem {
                        item_id: pair_local.clone(),
                        claim_item: Some(claim_local.clone()),
                        citation: Some(*index),
                        url: url.clone(),
                        ..base(ItemKind::Pair)
                    });
                    rows_out.push(ItemRow {
                        kind: "pair".into(),
                        item_id: pair_local,
                        claim_item: claim_local.clone(),
                        claim: claim.text.clone(),
                        line: claim.line.to_string(),
                        cited: index.to_string(),
                        urls: url.unwrap_or_else(|| "(no URL given)".into()),
                        source_text: source_text_of(&refs, &sources, *index),
                        ..blank.clone()
                    });
                }
            }
        }
        let entry = key.get(record.question_id.as_str());
        // The output's reference table, for the claims a reviewer adds.
        let citations: BTreeMap<u32, String> = record
            .scoring
            .iter()
            .flat_map(|s| &s.report.references)
            .filter_map(|r| Some((r.index, r.url.clone()?)))
            .collect();
        let listed = citations.iter().map(|(i, u)| format!("[{i}] {u}")).collect::<Vec<_>>().join("\n");
        items.push(ExportedItem { item_id: "u".into(), citations, ..base(ItemKind::Uncertainty) });
        rows_out.push(ItemRow {
            kind: "uncertainty".into(),
            item_id: "u".into(),
            urls: listed,
            answerable: entry.map_or_else(|| "not in the key".to_owned(), |e| e.answerable.to_string()),
            required_caveats: entry.map(|e| e.required_caveats.join("\n")).unwrap_or_default(),
            known_disputes: entry.map(|e| e.known_disputes.join("\n")).unwrap_or_default(),
            output_text,
            ..blank.clone()
        });
        for row in &mut rows_out {
            for field in [&mut row.claim, &mut row.source_text, &mut row.output_text, &mut row.urls] {
                *field = redact(field);
            }
        }
        outputs.push((output_code, rows_out, items));
    }
    progress(completed.len() as u64, completed.len() as u64);
    outputs.sort_by(|a, b| a.0.cmp(&b.0));

    // Global item ids: claims c00001.., pairs p00001.., uncertainty u0001..
    let (mut nc, mut np, mut nu) = (0usize, 0usize, 0usize);
    let mut all_items = Vec::new();
    let mut all_rows = Vec::new();
    for (_, rows_out, items) in outputs.iter_mut() {
        let mut claim_ids: BTreeMap<String, String> = BTreeMap::new();
        for (row, item) in rows_out.iter_mut().zip(items.iter_mut()) {
            let id = match item.kind {
                ItemKind::Claim => {
                    nc += 1;
                    let id = format!("c{nc:05}");
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

    // Write: the reviewers' folder under a temporary name, renamed into
    // place when complete; then the state files, write-once.
    let parent = folder.parent().map_or_else(|| PathBuf::from("."), Path::to_owned);
    std::fs::create_dir_all(&parent).map_err(|e| ReviewError::io(parent.display().to_string(), e))?;
    let name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "review".into());
    let partial = parent.join(format!(".partial-{name}-{}", std::process::id()));
    let io = |p: &Path, e| ReviewError::io(p.display().to_string(), e);
    std::fs::create_dir(&partial).map_err(|e| io(&partial, e))?;
    let written = (|| {
        for reviewer in &options.reviewers {
            let dir = partial.join(reviewer);
            std::fs::create_dir(&dir).map_err(|e| io(&dir, e))?;
            let mut csv = String::new();
            csv::record(&mut csv, &REVIEW_COLUMNS);
            let mut jsonl = String::new();
            for row in &all_rows {
                let row = ItemRow { reviewer: reviewer.clone(), ..row.clone() };
                csv::record(&mut csv, &row.fields());
                let line = serde_json::to_string(&row).map_err(|e| io(&dir, std::io::Error::other(e)))?;
                jsonl.push_str(&line);
                jsonl.push('\n');
            }
            write_new(&dir.join("items.csv"), csv.as_bytes())?;
            write_new(&dir.join("items.jsonl"), jsonl.as_bytes())?;
        }
        if options.label_studio {
            // From a reviewer's rows as written: blinded exactly as the files.
            super::label_studio::write_project(&partial, &options.reviewers[0])?;
        }
        Ok::<(), ReviewError>(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e);
    }
    std::fs::create_dir_all(&state).map_err(|e| io(&state, e))?;
    let blinding = Blinding { kind: "cohort-review-blinding".into(), manifest_sha256: manifest_sha256.into(), codes };
    let index = ExportIndex {
        kind: "cohort-review-export".into(),
        manifest_sha256: manifest_sha256.into(),
        exported_at: stamp,
        reviewers: options.reviewers.clone(),
        folder: folder.display().to_string(),
        items: all_items,
    };
    let (index_path, blinding_path) = (state.join(EXPORT_FILE), state.join(BLINDING_FILE));
    write_once(&index_path, &pretty(&index, &index_path)?)?;
    write_once(&blinding_path, &pretty(&blinding, &blinding_path)?)?;
    std::fs::rename(&partial, &folder).map_err(|e| io(&folder, e))?;
    let label_studio = options.label_studio.then(|| folder.join(super::label_studio::PROJECT_DIR));
    Ok(ExportWritten {
        folder,
        items: nc + np + nu,
        outputs: nu,
        claims: nc,
        pairs: np,
        reviewers: options.reviewers.len(),
        label_studio,
    })
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

/// Reviewer ids name folders and files: letters, digits, `-` and `_`.
pub fn check_reviewers(reviewers: &[String]) -> Result<(), ReviewError> {
    if reviewers.len() < 2 {
        return Err(ReviewError::Refused(
            "--reviewers needs at least two reviewer ids (seed 004: two independent reviewers), e.g. --reviewers alice,bob"
                .into(),
        ));
    }
    let mut seen = BTreeSet::new();
    for r in reviewers {
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
