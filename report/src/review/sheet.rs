//! `cohort review sheet`: the review in a browser. One self-contained HTML
//! file per reviewer, made from the blinded export (`export.json` and the
//! reviewer's `items.jsonl`, never from the ledger again, so a sheet shows
//! exactly what the CSV shows), and an adjudication sheet of the
//! disagreements once both reviewers' labels are imported.
//!
//! The page (the templates `sheet.html` and `sheet.js` beside this file)
//! fetches nothing: a `Content-Security-Policy` of `default-src 'none'`
//! lets through only its own inline script (by hash) and inline style, and
//! the items ride along as JSON in a `<script type="application/json">`
//! element (escaped so no `</script>` or `<!--` in a claim can end it).
//! Work is kept in the browser's `localStorage` under the sheet id; the
//! `Download labels` button saves a JSON file that `cohort review import`
//! reads through the same validation and the same write-once store as a
//! CSV ([`sheet_file_rows`] turns it into the rows a CSV gives).
//!
//! Architecture Invariant: a labels file carries its sheet id and the
//! SHA-256 of the `export.json` its sheet was made from; the import refuses
//! it against any other export, naming both.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::import::{ClaimDecision, ReviewerLabels, adjudication_labels};
use super::table::{Row, parse_jsonl};
use super::{
    CLAIM_LABELS, EXPORT_FILE, ExportIndex, ItemKind, LABELS_NEEDING_REASON, PAIR_REASONS, PART_SEPARATOR, ReviewError,
    ReviewInput, state_dir,
};

/// `kind` of the JSON embedded in a sheet.
pub const SHEET_KIND: &str = "cohort-review-sheet";
/// `kind` of a reviewer's downloaded labels.
pub const LABELS_KIND: &str = "cohort-review-sheet-labels";
/// `kind` of a downloaded adjudication.
pub const ADJUDICATION_KIND: &str = "cohort-review-sheet-adjudication";
/// What a reviewer may write in `not_factual` from the sheet (seed 004:
/// advice, opinion and explicit uncertainty statements are kept apart).
pub const NOT_FACTUAL_KINDS: [&str; 3] = ["advice", "opinion", "uncertainty statement"];

const TEMPLATE: &str = include_str!("sheet.html");
/// The page's one script; its SHA-256 is the only script the CSP allows.
pub const SCRIPT: &str = include_str!("sheet.js");

/// What to write.
#[derive(Debug, Clone, Default)]
pub struct SheetOptions {
    /// The reviewer's sheet; `None` with `adjudicate`.
    pub reviewer: Option<String>,
    /// The adjudication sheet of the disagreements.
    pub adjudicate: bool,
    /// The file; default `<export folder>/<reviewer>/sheet.html` or
    /// `<export folder>/adjudication-sheet.html`.
    pub out: Option<PathBuf>,
}

/// A sheet, rendered.
#[derive(Debug, Clone)]
pub struct Sheet {
    pub html: String,
    pub sheet_id: String,
    pub export_sha256: String,
    /// Items to label (a reviewer's) or disagreements (adjudication).
    pub items: usize,
    /// Where it goes unless `--out` says otherwise.
    pub default_path: PathBuf,
}

/// What [`write_sheet`] wrote.
#[derive(Debug, Clone)]
pub struct SheetWritten {
    pub path: PathBuf,
    pub sheet_id: String,
    pub export_sha256: String,
    pub items: usize,
    pub adjudication: bool,
}

impl SheetWritten {
    /// What `cohort review sheet` prints.
    pub fn describe(&self) -> String {
        let what = if self.adjudication { "disagreement(s) to adjudicate" } else { "item(s) to label" };
        format!(
            "wrote {} ({} {what}; sheet {}, export sha256 {})\nopen it in a browser; `Download labels` saves the file for `cohort review import`\n",
            self.path.display(),
            self.items,
            self.sheet_id,
            self.export_sha256
        )
    }
}

/// Writes a reviewer's sheet or the adjudication sheet, once (an existing
/// file is refused).
pub fn write_sheet(cohort_dir: &Path, options: &SheetOptions) -> Result<SheetWritten, ReviewError> {
    let sheet = match (&options.reviewer, options.adjudicate) {
        (Some(r), false) => reviewer_sheet(cohort_dir, r)?,
        (None, true) => adjudication_sheet(cohort_dir)?,
        _ => {
            return Err(ReviewError::Refused(
                "give either --reviewer NAME (a reviewer's sheet) or --adjudicate (the disagreements)".into(),
            ));
        }
    };
    let path = options.out.clone().unwrap_or_else(|| sheet.default_path.clone());
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| ReviewError::io(parent.display().to_string(), e))?;
    }
    super::export::write_once(&path, sheet.html.as_bytes())?;
    Ok(SheetWritten {
        path,
        sheet_id: sheet.sheet_id,
        export_sha256: sheet.export_sha256,
        items: sheet.items,
        adjudication: options.adjudicate,
    })
}

/// The export index and the SHA-256 of its bytes (what a labels file names).
pub fn export_and_sha256(state: &Path) -> Result<(ExportIndex, String), ReviewError> {
    let path = state.join(EXPORT_FILE);
    let bytes = std::fs::read(&path).map_err(|e| {
        ReviewError::io(
            format!("{} (export the review first: `cohort review export DIR --reviewers A,B`)", path.display()),
            e,
        )
    })?;
    let index: ExportIndex = serde_json::from_slice(&bytes).map_err(|e| ReviewError::BadFile {
        file: path.display().to_string(),
        message: format!("is not a review export index ({e})"),
    })?;
    Ok((index, hex::encode(Sha256::digest(&bytes))))
}

/// The id of `who`'s sheet (a reviewer id, or `adjudication`) of the
/// export with this hash: the same export and person give the same id.
pub fn sheet_id(export_sha256: &str, who: &str) -> String {
    let digest = Sha256::digest(format!("{SHEET_KIND}\n{export_sha256}\n{who}").as_bytes());
    format!("sheet-{who}-{}", &hex::encode(digest)[..12])
}

/// The blinded rows of a reviewer's exported `items.jsonl`, checked
/// against the index: the same items, in the same order.
fn exported_rows(index: &ExportIndex, reviewer: &str) -> Result<Vec<Row>, ReviewError> {
    let path = Path::new(&index.folder).join(reviewer).join("items.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        ReviewError::io(
            format!("{} (the export folder of this round; a sheet is made from its items)", path.display()),
            e,
        )
    })?;
    let (_, rows) = parse_jsonl(&text).map_err(|e| ReviewError::table(path.display().to_string(), e))?;
    let ids: Vec<&str> = rows.iter().map(|r| r.get("item_id")).collect();
    let expected: Vec<&str> = index.items.iter().map(|i| i.item_id.as_str()).collect();
    if ids != expected {
        return Err(ReviewError::BadFile {
            file: path.display().to_string(),
            message: format!(
                "holds {} item(s) that are not the {} of {}: it was edited or belongs to another export",
                ids.len(),
                expected.len(),
                EXPORT_FILE
            ),
        });
    }
    Ok(rows)
}

/// Where the claim sits in its answer: the text before it, the claim as
/// found, the text after (a few hundred characters each way). When the
/// exact wording is not in the output, its line instead.
pub fn claim_context(output_text: &str, claim: &str, line: usize) -> (String, String, String) {
    const AROUND: usize = 400;
    let take_end = |s: &str| -> String {
        let chars: Vec<char> = s.chars().collect();
        let cut = chars.len().saturating_sub(AROUND);
        let text: String = chars[cut..].iter().collect();
        if cut > 0 { format!("…{text}") } else { text }
    };
    let take_start = |s: &str| -> String {
        let text: String = s.chars().take(AROUND).collect();
        if s.chars().count() > AROUND { format!("{text}…") } else { text }
    };
    if let Some(at) = output_text.find(claim).filter(|_| !claim.is_empty()) {
        let after = &output_text[at + claim.len()..];
        return (take_end(&output_text[..at]), claim.to_owned(), take_start(after));
    }
    let lines: Vec<&str> = output_text.lines().collect();
    match line.checked_sub(1).and_then(|i| lines.get(i).map(|l| (i, *l))) {
        Some((i, l)) => (take_end(&lines[..i].join("\n")), l.to_owned(), take_start(&lines[i + 1..].join("\n"))),
        None => (String::new(), claim.to_owned(), String::new()),
    }
}

/// The capture state a source text starts with (export.rs writes it):
/// `(captured <time>) ...`, or one of the not-captured notes.
pub fn source_state(text: &str) -> (&'static str, String) {
    if let Some(rest) = text.strip_prefix("(captured ") {
        let at = rest.split_once(')').map_or("", |(t, _)| t);
        return ("captured", at.to_owned());
    }
    if text.starts_with("(the SIMULATED system's simulated page)") {
        return ("simulated", String::new());
    }
    if text.starts_with("(evidence passages)") {
        return ("evidence passages", String::new());
    }
    ("not captured", String::new())
}

fn source_of(text: &str) -> Value {
    let (state, accessed_at) = source_state(text);
    json!({"text": text, "state": state, "accessed_at": accessed_at})
}

/// Per output, its rows as the sheet shows them.
fn outputs_of(rows: &[Row]) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut by_output: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for row in rows {
        let output = row.get("output").to_owned();
        if !by_output.contains_key(&output) {
            order.push(output.clone());
        }
        by_output.entry(output).or_default().push(row);
    }
    order
        .iter()
        .map(|output| {
            let rows = &by_output[output];
            let unc = rows.iter().find(|r| r.get("kind") == "uncertainty");
            let output_text = unc.map_or("", |r| r.get("output_text"));
            let lines =
                |s: &str| -> Vec<String> { s.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect() };
            let claims: Vec<Value> = rows
                .iter()
                .filter(|r| r.get("kind") == "claim")
                .map(|r| {
                    let line: usize = r.get("line").parse().unwrap_or(0);
                    let (before, at, after) = claim_context(output_text, r.get("claim"), line);
                    let sources: Vec<Value> = r
                        .get("source_text")
                        .split("\n\n[")
                        .enumerate()
                        .map(|(i, s)| source_of(&if i == 0 { s.to_owned() } else { format!("[{s}") }))
                        .collect();
                    json!({
                        "item_id": r.get("item_id"), "claim": r.get("claim"), "line": line, "cited": r.get("cited"),
                        "urls": lines(r.get("urls")), "sources": sources,
                        "context": {"before": before, "claim": at, "after": after},
                    })
                })
                .collect();
            let pairs: Vec<Value> = rows
                .iter()
                .filter(|r| r.get("kind") == "pair")
                .map(|r| {
                    json!({
                        "item_id": r.get("item_id"), "claim_item": r.get("claim_item"), "claim": r.get("claim"),
                        "cited": r.get("cited"), "url": r.get("urls"), "source": source_of(r.get("source_text")),
                    })
                })
                .collect();
            let first = rows[0];
            json!({
                "output": output, "question_id": first.get("question_id"), "question": first.get("question"),
                "uncertainty_item": unc.map(|r| r.get("item_id")),
                "key": unc.map(|r| json!({
                    "answerable": r.get("answerable"), "required_caveats": lines(r.get("required_caveats")),
                    "known_disputes": lines(r.get("known_disputes")),
                })),
                "output_text": output_text, "claims": claims, "pairs": pairs,
            })
        })
        .collect()
}

/// The label sets, from the constants the import checks against.
fn label_sets() -> Value {
    json!({
        "claim": CLAIM_LABELS, "needs_reason": LABELS_NEEDING_REASON, "pair_reasons": PAIR_REASONS, "not_factual": NOT_FACTUAL_KINDS,
        "part_separator": PART_SEPARATOR,
        "uncertainty": [
            {"value": "0", "text": "invented certainty or a missed essential limitation"},
            {"value": "1", "text": "uncertainty acknowledged, a required caveat omitted"},
            {"value": "2", "text": "calibrated: limits, necessary caveats, no invented resolution"},
        ],
    })
}

/// A reviewer's sheet.
pub fn reviewer_sheet(cohort_dir: &Path, reviewer: &str) -> Result<Sheet, ReviewError> {
    let (index, export_sha256) = export_and_sha256(&state_dir(cohort_dir))?;
    if !index.reviewers.iter().any(|r| r == reviewer) {
        return Err(ReviewError::Refused(format!(
            "\"{reviewer}\" is not a reviewer of this export ({}): a sheet is made for an exported reviewer",
            index.reviewers.join(", ")
        )));
    }
    let rows = exported_rows(&index, reviewer)?;
    let id = sheet_id(&export_sha256, reviewer);
    let data = json!({
        "kind": SHEET_KIND, "mode": "review", "sheet_id": id, "export_sha256": export_sha256,
        "reviewer": reviewer, "labels_kind": LABELS_KIND, "labels": label_sets(), "outputs": outputs_of(&rows),
    });
    Ok(Sheet {
        html: render(&format!("cohort review sheet: {reviewer}"), &data),
        sheet_id: id,
        export_sha256,
        items: rows.len(),
        default_path: Path::new(&index.folder).join(reviewer).join("sheet.html"),
    })
}

/// One disagreement the adjudicator decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The id the adjudication names: an item, `<claim item>.<n>` for a
    /// split part.
    pub unit: String,
    /// The exported item it belongs to.
    pub item_id: String,
    /// `claim`, `part`, `extraction`, `pair` (including both "no" with
    /// other reasons; `<pair>.<n>` for a part of a split claim),
    /// `secondary` (`<pair>.secondary`: whether the source is only
    /// secondary) or `uncertainty`.
    pub kind: &'static str,
    /// The final labels the import accepts for it.
    pub allowed: Vec<String>,
    /// Per reviewer: (id, label, reason or detail).
    pub reviewers: Vec<(String, String, String)>,
}

fn describe_claim(d: &ClaimDecision) -> (String, String) {
    match d {
        ClaimDecision::Label { label, reason } => (label.clone(), reason.clone()),
        ClaimDecision::NotFactual(why) => ("not_factual".into(), why.clone()),
        ClaimDecision::Merged(with) => ("merged".into(), format!("a repeat of {with}")),
        ClaimDecision::Split(parts) => (
            format!("split into {}", parts.len()),
            parts
                .iter()
                .enumerate()
                .map(|(k, (t, l, r))| {
                    format!("{}. {t} -> {l}{}", k + 1, if r.is_empty() { String::new() } else { format!(" ({r})") })
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    }
}

/// The disagreements between the first two reviewers (by id, as the
/// metrics compare them) that an adjudication decides: what the report
/// counts as awaiting adjudication, and pairs both marked unsupporting for
/// different reasons (the adjudicator names the reason).
pub fn disagreements(input: &ReviewInput) -> Vec<Disagreement> {
    let mut reviewers: Vec<&ReviewerLabels> = input.reviewers.iter().collect();
    reviewers.sort_by(|a, b| a.reviewer.cmp(&b.reviewer));
    let (Some(a), Some(b)) = (reviewers.first(), reviewers.get(1)) else { return Vec::new() };
    let mut out = Vec::new();
    let both =
        |x: (String, String), y: (String, String)| vec![(a.reviewer.clone(), x.0, x.1), (b.reviewer.clone(), y.0, y.1)];
    for item in &input.index.items {
        let id = item.item_id.as_str();
        match item.kind {
            ItemKind::Claim => {
                let (Some(da), Some(db)) = (a.claims.get(id), b.claims.get(id)) else { continue };
                let claim_labels = adjudication_labels(Some(ItemKind::Claim));
                match (da, db) {
                    (ClaimDecision::Label { label: la, .. }, ClaimDecision::Label { label: lb, .. }) => {
                        if la != lb {
                            out.push(Disagreement {
                                unit: id.into(),
                                item_id: id.into(),
                                kind: "claim",
                                allowed: CLAIM_LABELS.iter().map(|s| (*s).to_owned()).collect(),
                                reviewers: both(describe_claim(da), describe_claim(db)),
                            });
                        }
                    }
                    (ClaimDecision::Split(pa), ClaimDecision::Split(pb)) if pa.len() == pb.len() => {
                        for (k, (x, y)) in pa.iter().zip(pb).enumerate() {
                            if x.1 != y.1 {
                                out.push(Disagreement {
                                    unit: format!("{id}.{}", k + 1),
                                    item_id: id.into(),
                                    kind: "part",
                                    allowed: CLAIM_LABELS.iter().map(|s| (*s).to_owned()).collect(),
                                    reviewers: both(
                                        (
                                            x.1.clone(),
                                            format!(
                                                "{}{}",
                                                x.0,
                                                if x.2.is_empty() { String::new() } else { format!(" ({})", x.2) }
                                            ),
                                        ),
                                        (
                                            y.1.clone(),
                                            format!(
                                                "{}{}",
                                                y.0,
                                                if y.2.is_empty() { String::new() } else { format!(" ({})", y.2) }
                                            ),
                                        ),
                                    ),
                                });
                            }
                        }
                    }
                    _ => {
                        let excluded =
                            |d: &ClaimDecision| matches!(d, ClaimDecision::NotFactual(_) | ClaimDecision::Merged(_));
                        if excluded(da) && excluded(db) {
                            continue;
                        }
                        let mut allowed = claim_labels;
                        for (r, d) in [(a, da), (b, db)] {
                            if matches!(d, ClaimDecision::Split(_)) {
                                allowed.push(format!("split:{}", r.reviewer));
                            }
                        }
                        out.push(Disagreement {
                            unit: id.into(),
                            item_id: id.into(),
                            kind: "extraction",
                            allowed,
                            reviewers: both(describe_claim(da), describe_claim(db)),
                        });
                    }
                }
            }
            ItemKind::Pair => {
                let (Some(x), Some(y)) = (a.pairs.get(id), b.pairs.get(id)) else { continue };
                let show = |p: &(bool, String)| (if p.0 { "yes" } else { "no" }.to_owned(), p.1.clone());
                // Verdicts per part only where both split the claim alike;
                // otherwise the extraction disagreement decides whose parts
                // (and so whose verdicts) are kept.
                if x.parts.len() == y.parts.len() {
                    let n = x.parts.len();
                    for (k, (px, py)) in x.parts.iter().zip(&y.parts).enumerate() {
                        if px != py {
                            out.push(Disagreement {
                                unit: if n == 1 { id.into() } else { format!("{id}.{}", k + 1) },
                                item_id: id.into(),
                                kind: "pair",
                                allowed: adjudication_labels(Some(ItemKind::Pair)),
                                reviewers: both(show(px), show(py)),
                            });
                        }
                    }
                }
                if x.secondary != y.secondary {
                    let said = |v: bool| (if v { "yes" } else { "no" }.to_owned(), "only secondary?".to_owned());
                    out.push(Disagreement {
                        unit: format!("{id}.secondary"),
                        item_id: id.into(),
                        kind: "secondary",
                        allowed: adjudication_labels(Some(ItemKind::Pair)),
                        reviewers: both(said(x.secondary), said(y.secondary)),
                    });
                }
            }
            ItemKind::Uncertainty => {
                let (Some(x), Some(y)) = (a.uncertainty.get(id), b.uncertainty.get(id)) else { continue };
                if x.0 != y.0 {
                    let show = |u: &(u8, bool)| (u.0.to_string(), if u.1 { "abstained".into() } else { String::new() });
                    out.push(Disagreement {
                        unit: id.into(),
                        item_id: id.into(),
                        kind: "uncertainty",
                        allowed: adjudication_labels(Some(ItemKind::Uncertainty)),
                        reviewers: both(show(x), show(y)),
                    });
                }
            }
        }
    }
    out
}

/// The adjudication sheet: the disagreements of the imported reviews.
pub fn adjudication_sheet(cohort_dir: &Path) -> Result<Sheet, ReviewError> {
    let state = state_dir(cohort_dir);
    let (_, export_sha256) = export_and_sha256(&state)?;
    let Some(input) = super::load(cohort_dir)? else {
        return Err(ReviewError::Refused(
            "no reviewer's labels are imported yet: import both reviewers' files first (`cohort review import DIR FILES...`)"
                .into(),
        ));
    };
    let imported: Vec<&str> = input.reviewers.iter().map(|r| r.reviewer.as_str()).collect();
    let missing: Vec<&str> =
        input.index.reviewers.iter().map(String::as_str).filter(|r| !imported.contains(r)).collect();
    if imported.len() < 2 {
        return Err(ReviewError::Refused(format!(
            "only {} is imported: the adjudication sheet compares two reviewers; import {} first",
            imported.join(", "),
            missing.join(", ")
        )));
    }
    if input.adjudication.is_some() {
        return Err(ReviewError::Refused(
            "the adjudication is already imported: it is kept as it is (write-once)".into(),
        ));
    }
    // The blinded text of each item, from the first reviewer's export.
    let rows = exported_rows(&input.index, &input.index.reviewers[0])?;
    let outputs = outputs_of(&rows);
    let mut claim_of: BTreeMap<String, (Value, Value)> = BTreeMap::new();
    for o in &outputs {
        let head = json!({"output": o["output"], "question": o["question"], "key": o["key"]});
        for c in o["claims"].as_array().into_iter().flatten() {
            claim_of.insert(c["item_id"].as_str().unwrap_or_default().to_owned(), (head.clone(), c.clone()));
        }
        for p in o["pairs"].as_array().into_iter().flatten() {
            claim_of.insert(p["item_id"].as_str().unwrap_or_default().to_owned(), (head.clone(), p.clone()));
        }
        if let Some(u) = o["uncertainty_item"].as_str() {
            let text = json!({"output_text": o["output_text"]});
            claim_of.insert(u.to_owned(), (head.clone(), text));
        }
    }
    let found = disagreements(&input);
    let items: Vec<Value> = found
        .iter()
        .map(|d| {
            let (head, item) = claim_of.get(&d.item_id).cloned().unwrap_or((Value::Null, Value::Null));
            json!({
                "unit": d.unit, "item_id": d.item_id, "kind": d.kind, "allowed": d.allowed,
                "reviewers": d.reviewers.iter().map(|(r, l, why)| json!({"reviewer": r, "label": l, "reason": why})).collect::<Vec<_>>(),
                "output": head, "item": item,
            })
        })
        .collect();
    let id = sheet_id(&export_sha256, "adjudication");
    let data = json!({
        "kind": SHEET_KIND, "mode": "adjudicate", "sheet_id": id, "export_sha256": export_sha256,
        "reviewers": input.index.reviewers, "labels_kind": ADJUDICATION_KIND, "labels": label_sets(),
        "disagreements": items,
    });
    Ok(Sheet {
        html: render("cohort adjudication sheet", &data),
        sheet_id: id,
        export_sha256,
        items: found.len(),
        default_path: Path::new(&input.index.folder).join("adjudication-sheet.html"),
    })
}

/// The rows of a downloaded sheet file (the `rows` array, the n-th on
/// line n + 1 as the sheet writes it, one row per line), after checking
/// that it comes from a sheet of this export: the rows go through the same
/// validation as a CSV's.
pub(crate) fn sheet_file_rows(
    file: &str,
    text: &str,
    export_sha256: &str,
) -> Result<(Vec<String>, Vec<Row>), ReviewError> {
    let bad = |message: String| ReviewError::BadFile { file: file.into(), message };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "is not a labels file saved by a review sheet ({e}); a .json file is the sheet's `Download labels`"
        ))
    })?;
    let kind = value["kind"].as_str().unwrap_or_default();
    let who = match kind {
        LABELS_KIND => value["reviewer"].as_str().unwrap_or_default().to_owned(),
        ADJUDICATION_KIND => "adjudication".to_owned(),
        _ => {
            return Err(bad(format!(
                "has kind \"{kind}\", not {LABELS_KIND} or {ADJUDICATION_KIND}: import the file a review sheet's `Download labels` saved"
            )));
        }
    };
    let (their_id, their_export) =
        (value["sheet_id"].as_str().unwrap_or_default(), value["export_sha256"].as_str().unwrap_or_default());
    if their_export != export_sha256 || their_id != sheet_id(export_sha256, &who) {
        return Err(ReviewError::Refused(format!(
            "{file}: these labels come from sheet {their_id} of export {their_export}, but this cohort's export is {export_sha256} \
             (its sheet for {who} is {}): labels are imported only against the export their sheet was made from",
            sheet_id(export_sha256, &who)
        )));
    }
    let Some(rows) = value["rows"].as_array() else { return Err(bad("has no `rows` array".into())) };
    let mut header: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Some(object) = row.as_object() else {
            return Err(ReviewError::BadInput {
                file: file.into(),
                line: i + 2,
                column: 1,
                field: "(row)".into(),
                message: "a row is a JSON object".into(),
            });
        };
        let mut cells = BTreeMap::new();
        for (k, v) in object {
            let text = match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(ReviewError::BadInput {
                        file: file.into(),
                        line: i + 2,
                        column: 1,
                        field: k.clone(),
                        message: format!("is {other}: give a string"),
                    });
                }
            };
            if !header.contains(k) {
                header.push(k.clone());
            }
            cells.insert(k.clone(), text);
        }
        if kind == LABELS_KIND && cells.get("reviewer").map(String::as_str) != Some(who.as_str()) {
            return Err(ReviewError::BadInput {
                file: file.into(),
                line: i + 2,
                column: 1,
                field: "reviewer".into(),
                message: format!("differs from the file's reviewer \"{who}\""),
            });
        }
        out.push(Row { line: i + 2, cells, columns: BTreeMap::new() });
    }
    // An adjudication of no disagreement still says it is one.
    if kind == ADJUDICATION_KIND && !header.iter().any(|h| h == "final_label") {
        header.push("final_label".into());
    }
    if kind == LABELS_KIND && !header.iter().any(|h| h == "reviewer") {
        header.push("reviewer".into());
    }
    Ok((header, out))
}

/// The page: the template with its CSP, title, data and script.
fn render(title: &str, data: &Value) -> String {
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{}'; img-src data:; base-uri 'none'; form-action 'none'",
        base64(&Sha256::digest(SCRIPT.as_bytes()))
    );
    TEMPLATE
        .replace("{{CSP}}", &csp)
        .replace("{{TITLE}}", &html_escape(title))
        .replace("{{SCRIPT}}", SCRIPT)
        .replace("{{DATA}}", &script_json(data))
}

/// JSON safe inside a `<script>` element: `<`, `>` and `&` as `\u` escapes
/// (no `</script>`, `<!--` or `]]>` can appear), and the two line
/// separators JavaScript once treated as line ends.
pub fn script_json(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Standard base64 with padding (the CSP hash source).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    /// A claim holding `</script>` or `<!--` cannot end the data element,
    /// and the JSON still parses to the same value.
    #[test]
    fn embedded_json_cannot_end_its_script_element() {
        let value = json!({"claim": "x </script><script>alert(1)</script> <!-- & \u{2028}"});
        let text = script_json(&value);
        assert!(!text.contains('<') && !text.contains('>'), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap_or_default(), value);
    }

    #[test]
    fn the_page_allows_exactly_its_own_script() {
        let page = render("t <x>", &json!({"a": 1}));
        let hash = base64(&Sha256::digest(SCRIPT.as_bytes()));
        assert!(page.contains(&format!("script-src 'sha256-{hash}'")));
        assert!(page.contains("default-src 'none'"));
        assert!(page.contains("<title>t &lt;x&gt;</title>"));
        assert!(!page.contains("{{"), "every placeholder is filled");
        assert!(!page.contains("http://") && !page.contains("https://"), "no external resource");
    }

    #[test]
    fn claim_context_finds_the_wording_or_falls_back_to_its_line() {
        let out = "Intro line.\nIce floats [1]. More.\nEnd.";
        let (b, c, a) = claim_context(out, "Ice floats [1].", 2);
        assert_eq!((b.as_str(), c.as_str(), a.as_str()), ("Intro line.\n", "Ice floats [1].", " More.\nEnd."));
        let (b, c, a) = claim_context(out, "not there", 2);
        assert_eq!((b.as_str(), c.as_str(), a.as_str()), ("Intro line.", "Ice floats [1]. More.", "End."));
    }

    #[test]
    fn source_state_reads_the_export_prefix() {
        assert_eq!(source_state("(captured 2026-10-14T10:00:00Z) text"), ("captured", "2026-10-14T10:00:00Z".into()));
        assert_eq!(source_state("(no source text was captured: open the URL)").0, "not captured");
    }

    #[test]
    fn sheet_ids_depend_on_export_and_person() {
        assert_eq!(sheet_id("a", "alice"), sheet_id("a", "alice"));
        assert_ne!(sheet_id("a", "alice"), sheet_id("b", "alice"));
        assert_ne!(sheet_id("a", "alice"), sheet_id("a", "bob"));
    }

    #[test]
    fn a_file_from_another_export_is_refused_naming_both() {
        let theirs = sheet_id("aaaa", "alice");
        let text = format!(
            "{{\"kind\":\"{LABELS_KIND}\",\"sheet_id\":\"{theirs}\",\"export_sha256\":\"aaaa\",\"reviewer\":\"alice\",\"rows\":[]}}"
        );
        let err = sheet_file_rows("l.json", &text, "bbbb").unwrap_err().to_string();
        assert!(err.contains("aaaa") && err.contains("bbbb") && err.contains(&theirs), "{err}");
        assert!(err.contains(&sheet_id("bbbb", "alice")), "{err}");
    }
}
