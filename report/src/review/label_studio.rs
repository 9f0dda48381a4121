//! Human review in Label Studio (the annotation tool, `label-studio` on
//! PyPI), for teams that already run it.
//!
//! `cohort review export --format label-studio` writes, beside the
//! reviewers' `items.csv`/`items.jsonl`, a project in `FOLDER/label-studio/`:
//! `label_config.xml` (the labelling interface) and `tasks.json` (one task
//! per exported item). The tasks are made from a reviewer's `items.jsonl`
//! as written ([`write_project`]), so they are blinded exactly as the files
//! are: output codes, no arm, product or version label.
//!
//! `cohort review import --format label-studio FILE` reads the project's
//! JSON export (a list of tasks, each with its `annotations`, each with
//! `completed_by` and a `result` list of `{from_name, type, value}`), maps
//! each annotator to a reviewer of the export, and turns each reviewer's
//! annotations into the rows a CSV gives ([`annotation_row`]). Those rows are
//! what is validated (`import::parse_file`, the one validation) and kept
//! (`import::keep`, the one write-once store) as
//! `imported/reviewer-<id>.jsonl`; the Label Studio file itself is kept
//! beside them for the record (`label-studio-<sha256 prefix>.json`).
//!
//! Architecture Invariant: the labels a Label Studio annotator can give are
//! the constants the import checks (`CLAIM_LABELS`, `PAIR_REASONS`,
//! `NOT_FACTUAL_KINDS`), and a control's result fills exactly one column
//! of the reviewer's file ([`CONTROLS`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::import::{Imported, Parsed, Planned};
use super::sheet::NOT_FACTUAL_KINDS;
use super::table::{Row, parse_jsonl};
use super::{CLAIM_LABELS, ExportIndex, PAIR_REASONS, PART_SEPARATOR, ReviewError, state_dir};

/// The project folder inside the export folder.
pub const PROJECT_DIR: &str = "label-studio";
/// The labelling config (Label Studio's XML).
pub const CONFIG_FILE: &str = "label_config.xml";
/// The tasks, Label Studio's import format (a JSON list of `{"data": ...}`).
pub const TASKS_FILE: &str = "tasks.json";
/// How a kept Label Studio export is named under `imported/`.
pub const KEPT_PREFIX: &str = "label-studio-";

/// The extraction check of a claim. No choice is "as extracted".
pub const EXTRACTION: [&str; 4] = ["as extracted", "split", "merge", "not factual"];
/// The uncertainty scores with what each means (the sheet's wording).
pub const UNCERTAINTY: [(&str, &str); 3] = [
    ("0", "invented certainty or a missed essential limitation"),
    ("1", "uncertainty acknowledged, a required caveat omitted"),
    ("2", "calibrated: limits, necessary caveats, no invented resolution"),
];
/// The one choice of the `abstained` control.
const ABSTAINED: &str = "abstained";
/// The one choice of the `missing_original` control.
const MISSING_ORIGINAL: &str = "missing original citation";
/// The choices of the `secondary` control: `secondary` no, yes.
pub const SECONDARY: [&str; 2] = ["original", "only secondary"];

/// Each control of the config: its name (`from_name` in a result), the
/// item kind it belongs to (`None`: every kind) and the column it fills.
pub const CONTROLS: [(&str, Option<&str>, &str); 15] = [
    ("extraction", Some("claim"), "split / merge_with / not_factual"),
    ("not_factual", Some("claim"), "not_factual"),
    ("split", Some("claim"), "split"),
    ("split_labels", Some("claim"), "label"),
    ("merge_with", Some("claim"), "merge_with"),
    ("label", Some("claim"), "label"),
    ("claim_reason", Some("claim"), "reason"),
    ("missing_original", Some("claim"), "missing_original"),
    ("supports", Some("pair"), "supports"),
    ("pair_reason", Some("pair"), "reason"),
    ("pair_parts", Some("pair"), "supports / reason, per part"),
    ("secondary", Some("pair"), "secondary"),
    ("uncertainty", Some("uncertainty"), "uncertainty"),
    ("abstained", Some("uncertainty"), "abstained"),
    ("note", None, "note"),
];

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn choices(values: &[&str]) -> String {
    values.iter().map(|v| format!("    <Choice value=\"{}\"/>\n", xml(v))).collect()
}

/// The labelling config. One config for the three kinds of item (Label
/// Studio cannot show controls by a task's data): each task's heading says
/// which section to fill, and a control filled on a task of another kind
/// is refused at import, naming the task.
pub fn label_config() -> String {
    let uncertainty: String =
        UNCERTAINTY.iter().map(|(v, hint)| format!("    <Choice value=\"{v}\" hint=\"{}\"/>\n", xml(hint))).collect();
    let scale: String = UNCERTAINTY.iter().map(|(v, hint)| format!("{v} {hint}. ")).collect();
    format!(
        r#"<View>
  <!-- cohort review (seed 004), written by cohort review export in the label-studio format.
       The labels are the ones cohort review import accepts: edit them and the import refuses. -->
  <Header value="$heading"/>
  <Header value="Question" size="5"/>
  <Text name="question" value="$question"/>
  <Header value="Claim" size="5"/>
  <Text name="claim" value="$claim"/>
  <Header value="Cited sources (as captured)" size="5"/>
  <Text name="sources" value="$sources"/>
  <Header value="Uncertainty key (frozen)" size="5"/>
  <Text name="key" value="$key"/>
  <Header value="The answer" size="5"/>
  <Text name="answer" value="$answer"/>

  <Header value="Claims: extraction check (no choice: one factual claim as extracted)"/>
  <Choices name="extraction" toName="claim" choice="single-radio" showInline="true">
{extraction}  </Choices>
  <View visibleWhen="choice-selected" whenTagName="extraction" whenChoiceValue="not factual">
  <Choices name="not_factual" toName="claim" choice="single-radio" showInline="true">
{not_factual}  </Choices>
  </View>
  <View visibleWhen="choice-selected" whenTagName="extraction" whenChoiceValue="split">
  <Header value="The distinct assertions: one part per entry; then one claim label per part, in order (reasons per part in the reason box, separated by {sep})" size="6"/>
  <TextArea name="split" toName="claim" placeholder="one part per entry"/>
  <TextArea name="split_labels" toName="claim" placeholder="one claim label per part"/>
  </View>
  <View visibleWhen="choice-selected" whenTagName="extraction" whenChoiceValue="merge">
  <TextArea name="merge_with" toName="claim" maxSubmissions="1" placeholder="the item id of the claim of this answer it repeats (c00012)"/>
  </View>
  <Header value="Claims: label"/>
  <Choices name="label" toName="claim" choice="single-radio" showInline="true">
{labels}  </Choices>
  <TextArea name="claim_reason" toName="claim" maxSubmissions="1" placeholder="reason (required for unverifiable: the specific reason; for contradicted: the conflicting evidence and the reasoning)"/>
  <Choices name="missing_original" toName="claim" choice="multiple">
    <Choice value="{missing}" hint="no original source is cited for this claim (checked through primary evidence)"/>
  </Choices>

  <Header value="Claim-citation pairs: does the cited source fully support the claim?"/>
  <Choices name="supports" toName="sources" choice="single-radio" showInline="true">
    <Choice value="yes"/>
    <Choice value="no"/>
  </Choices>
  <View visibleWhen="choice-selected" whenTagName="supports" whenChoiceValue="no">
  <Choices name="pair_reason" toName="sources" choice="single-radio" showInline="true">
{reasons}  </Choices>
  </View>
  <TextArea name="pair_parts" toName="sources" maxSubmissions="1" placeholder="only for a claim you split: one verdict per part instead, in order, as yes or no:REASON, separated by {sep}"/>
  <Header value="Is the cited source the claim's original source, or only secondary (it reports it from another)?" size="6"/>
  <Choices name="secondary" toName="sources" choice="single-radio" showInline="true">
{secondary}  </Choices>

  <Header value="Answers: uncertainty handling against the key. {scale}"/>
  <Choices name="uncertainty" toName="answer" choice="single-radio" showInline="true">
{uncertainty}  </Choices>
  <Choices name="abstained" toName="answer" choice="multiple">
    <Choice value="{ABSTAINED}" hint="the answer declines to answer"/>
  </Choices>

  <TextArea name="note" toName="question" placeholder="note (kept)"/>
</View>
"#,
        extraction = choices(&EXTRACTION[1..]),
        not_factual = choices(&NOT_FACTUAL_KINDS),
        labels = choices(&CLAIM_LABELS),
        reasons = choices(&PAIR_REASONS),
        sep = xml(PART_SEPARATOR),
        missing = xml(MISSING_ORIGINAL),
        secondary = choices(&SECONDARY),
    )
}

/// What `cohort review export --format label-studio` adds to its summary.
pub fn describe_project(dir: &Path) -> String {
    format!(
        "Label Studio: create a project with the labelling config {} and import {} \
         (POST /api/projects with label_config, then POST /api/projects/ID/import); \
         import its JSON export with `cohort review import DIR --format label-studio FILE`\n",
        dir.join(CONFIG_FILE).display(),
        dir.join(TASKS_FILE).display()
    )
}

/// Writes `label-studio/` into the export folder `folder` (being built),
/// from `reviewer`'s `items.jsonl` there.
pub(crate) fn write_project(folder: &Path, reviewer: &str) -> Result<(), ReviewError> {
    let path = folder.join(reviewer).join("items.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| ReviewError::io(path.display().to_string(), e))?;
    let (_, rows) = parse_jsonl(&text).map_err(|e| ReviewError::table(path.display().to_string(), e))?;
    let dir = folder.join(PROJECT_DIR);
    std::fs::create_dir(&dir).map_err(|e| ReviewError::io(dir.display().to_string(), e))?;
    let mut tasks = serde_json::to_vec_pretty(&tasks(&rows)).map_err(|e| ReviewError::io(TASKS_FILE, e.into()))?;
    tasks.push(b'\n');
    super::export::write_new(&dir.join(CONFIG_FILE), label_config().as_bytes())?;
    super::export::write_new(&dir.join(TASKS_FILE), &tasks)
}

fn or_dash(s: String) -> String {
    if s.trim().is_empty() { "—".into() } else { s }
}

/// One task per row, in the export's order. A task carries only what the
/// reviewer's file shows (and the answer's text for context), never a run
/// id or an arm.
pub fn tasks(rows: &[Row]) -> Vec<Value> {
    let answers: BTreeMap<&str, &str> = rows
        .iter()
        .filter(|r| r.get("kind") == "uncertainty")
        .map(|r| (r.get("output"), r.get("output_text")))
        .collect();
    rows.iter()
        .map(|r| {
            let (id, kind, output) = (r.get("item_id"), r.get("kind"), r.get("output"));
            let heading = match kind {
                "claim" => format!(
                    "Claim {id} of answer {output}: do the extraction check, then label the claim (the Claims sections)"
                ),
                "pair" => format!(
                    "Claim-citation pair {id} (claim {}, citation [{}]) of answer {output}: the Claim-citation pairs section",
                    r.get("claim_item"),
                    r.get("cited")
                ),
                _ => format!("Answer {output}: its uncertainty handling (the Answers section)"),
            };
            let claim = match kind {
                "uncertainty" => String::new(),
                _ => format!("{}\n(line {}; cites {})", r.get("claim"), r.get("line"), r.get("cited")),
            };
            let sources = match kind {
                "uncertainty" => String::new(),
                _ => format!("{}\n\n{}", r.get("urls"), r.get("source_text")),
            };
            let key = match kind {
                "uncertainty" => format!(
                    "answerable: {}\nrequired caveats:\n{}\nknown disputes:\n{}",
                    r.get("answerable"),
                    or_dash(r.get("required_caveats").to_owned()),
                    or_dash(r.get("known_disputes").to_owned())
                ),
                _ => String::new(),
            };
            json!({"data": {
                "item_id": id, "kind": kind, "output": output, "question_id": r.get("question_id"),
                "heading": heading, "question": or_dash(r.get("question").to_owned()), "claim": or_dash(claim),
                "sources": or_dash(sources), "key": or_dash(key),
                "answer": or_dash(answers.get(output).copied().unwrap_or_default().to_owned()),
            }})
        })
        .collect()
}

// === import ===

/// A Label Studio user as an export names them: `completed_by` is the
/// user's id, or (a snapshot export's) an object with `id` and `email`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Annotator {
    id: String,
    email: Option<String>,
}

impl Annotator {
    fn of(value: &Value) -> Option<Annotator> {
        match value {
            Value::Number(n) => Some(Annotator { id: n.to_string(), email: None }),
            Value::Object(o) => Some(Annotator {
                id: o.get("id").map(|v| v.to_string().trim_matches('"').to_owned()).unwrap_or_default(),
                email: o.get("email").and_then(Value::as_str).filter(|e| !e.is_empty()).map(str::to_owned),
            }),
            _ => None,
        }
    }

    fn name(&self) -> String {
        match &self.email {
            Some(e) => format!("{e} (Label Studio user {})", self.id),
            None => format!("Label Studio user {}", self.id),
        }
    }
}

/// `--reviewer-map ANNOTATOR=REVIEWER` entries, parsed.
fn parse_map(entries: &[String]) -> Result<Vec<(String, String)>, ReviewError> {
    entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((a, r)) if !a.trim().is_empty() && !r.trim().is_empty() => {
                Ok((a.trim().to_owned(), r.trim().to_owned()))
            }
            _ => Err(ReviewError::Refused(format!(
                "--reviewer-map \"{e}\": give ANNOTATOR=REVIEWER (a Label Studio email or user id, and a reviewer of the export)"
            ))),
        })
        .collect()
}

/// The reviewer an annotator is: the map's entry for their email or id,
/// else the reviewer whose id is their email's local part.
fn reviewer_of(
    file: &str,
    who: &Annotator,
    map: &[(String, String)],
    index: &ExportIndex,
) -> Result<String, ReviewError> {
    let mapped =
        map.iter().find(|(a, _)| *a == who.id || who.email.as_deref().is_some_and(|e| e.eq_ignore_ascii_case(a)));
    let reviewer = match mapped {
        Some((_, r)) => Some(r.clone()),
        None => who
            .email
            .as_deref()
            .and_then(|e| e.split_once('@'))
            .and_then(|(local, _)| index.reviewers.iter().find(|r| r.eq_ignore_ascii_case(local)).cloned()),
    };
    match reviewer {
        Some(r) if index.reviewers.contains(&r) => Ok(r),
        Some(r) => Err(ReviewError::Refused(format!(
            "{file}: annotator {} is mapped to \"{r}\", which is not a reviewer of this export ({})",
            who.name(),
            index.reviewers.join(", ")
        ))),
        None => Err(ReviewError::Refused(format!(
            "{file}: annotator {} is no reviewer of this export ({}): map them with --reviewer-map {}=REVIEWER{}",
            who.name(),
            index.reviewers.join(", "),
            who.email.as_deref().unwrap_or(&who.id),
            if who.email.is_none() {
                " (this export names users by id only; a snapshot export with emails is matched by the email's local part)"
            } else {
                ""
            }
        ))),
    }
}

/// The strings of a result's value: `choices` or `text`.
fn values(result: &Value) -> Vec<String> {
    let value = &result["value"];
    value["choices"]
        .as_array()
        .or_else(|| value["text"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(|s| s.trim().to_owned()))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The row of a reviewer's file one annotation stands for (the columns of
/// `REVIEW_COLUMNS` a reviewer fills, and where it came from); `Err` says
/// what is wrong with it.
pub fn annotation_row(data: &Value, result: &[Value]) -> Result<BTreeMap<String, String>, String> {
    let kind = data["kind"].as_str().unwrap_or_default();
    let mut got: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in result {
        let name = r["from_name"].as_str().unwrap_or_default();
        let Some((control, owner, _)) = CONTROLS.iter().find(|(c, _, _)| *c == name) else {
            return Err(format!("control `{name}` is not in cohort's labelling config"));
        };
        if let Some(owner) = owner.filter(|o| *o != kind) {
            return Err(format!(
                "control `{control}` is for {owner} items, and this task is a {kind} item: clear it and label the section its heading names"
            ));
        }
        got.entry(control).or_default().extend(values(r));
    }
    let one = |c: &str| got.get(c).map(|v| v.join(", ")).unwrap_or_default();
    let parts = |c: &str| got.get(c).map(|v| v.join(&format!(" {PART_SEPARATOR} "))).unwrap_or_default();
    let mut row = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        row.insert(k.to_owned(), v);
    };
    match kind {
        "claim" => match one("extraction").as_str() {
            "" | "as extracted" => {
                set("label", one("label"));
                set("reason", one("claim_reason"));
            }
            "split" => {
                if one("split").is_empty() {
                    return Err("the extraction check says split, and `split` has no parts".into());
                }
                set("split", parts("split"));
                set("label", parts("split_labels"));
                set("reason", one("claim_reason"));
            }
            "merge" => {
                if one("merge_with").is_empty() {
                    return Err("the extraction check says merge, and `merge_with` names no claim".into());
                }
                set("merge_with", one("merge_with"));
            }
            "not factual" => {
                set("not_factual", Some(one("not_factual")).filter(|s| !s.is_empty()).unwrap_or("not factual".into()))
            }
            other => {
                return Err(format!("\"{other}\" is not an extraction check: use one of {}", EXTRACTION.join(", ")));
            }
        },
        "pair" => {
            let per_part = one("pair_parts");
            if per_part.is_empty() {
                set("supports", one("supports"));
                set("reason", one("pair_reason"));
            } else {
                let (mut supports, mut reasons) = (Vec::new(), Vec::new());
                for part in per_part.split(PART_SEPARATOR).map(str::trim) {
                    let (s, r) = part.split_once(':').unwrap_or((part, ""));
                    supports.push(s.trim().to_owned());
                    reasons.push(r.trim().to_owned());
                }
                let sep = format!(" {PART_SEPARATOR} ");
                set("supports", supports.join(&sep));
                set("reason", if reasons.iter().all(String::is_empty) { String::new() } else { reasons.join(&sep) });
            }
            set(
                "secondary",
                match one("secondary").as_str() {
                    v if v == SECONDARY[0] => "no".into(),
                    v if v == SECONDARY[1] => "yes".into(),
                    _ => String::new(),
                },
            );
        }
        _ => {
            set("uncertainty", one("uncertainty"));
            let abstained = got.get("abstained").is_some_and(|v| v.iter().any(|c| c == ABSTAINED));
            set("abstained", if abstained { "yes" } else { "no" }.into());
        }
    }
    if got.get("missing_original").is_some_and(|v| v.iter().any(|c| c == MISSING_ORIGINAL)) {
        set("missing_original", "yes".into());
    }
    set("note", got.get("note").map(|v| v.join("\n")).unwrap_or_default());
    for k in ["item_id", "kind", "output"] {
        set(k, data[k].as_str().unwrap_or_default().to_owned());
    }
    Ok(row)
}

/// Imports Label Studio JSON exports for the cohort in `cohort_dir`:
/// each annotator's annotations as a reviewer's file, through the same
/// validation and the same write-once store as a CSV.
pub fn import(cohort_dir: &Path, files: &[PathBuf], reviewer_map: &[String]) -> Result<Imported, ReviewError> {
    let map = parse_map(reviewer_map)?;
    let state = state_dir(cohort_dir);
    let (index, _) = super::sheet::export_and_sha256(&state)?;
    let mut planned = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| ReviewError::io(&file, e))?;
        planned.extend(plan(&file, &bytes, &map, &index)?);
    }
    super::import::keep(&state, planned)
}

/// One reviewer's annotations in a Label Studio export: who made them, the
/// rows they stand for, and where each row came from (for messages).
struct Annotations {
    who: Annotator,
    rows: Vec<BTreeMap<String, String>>,
    origins: Vec<String>,
}

/// What one Label Studio export becomes: per reviewer, the JSONL rows
/// (validated as a reviewer's file), and the export itself for the record.
fn plan(file: &str, bytes: &[u8], map: &[(String, String)], index: &ExportIndex) -> Result<Vec<Planned>, ReviewError> {
    let bad = |message: String| ReviewError::BadFile { file: file.into(), message };
    let tasks: Vec<Value> = serde_json::from_slice(bytes).map_err(|e| {
        bad(format!(
            "is not a Label Studio JSON export ({e}): export the project as JSON (a list of tasks with their annotations)"
        ))
    })?;
    // Reviewer -> their annotations.
    let mut by_reviewer: BTreeMap<String, Annotations> = BTreeMap::new();
    for task in &tasks {
        let task_id = task["id"].to_string();
        let data = &task["data"];
        let Some(item) = data["item_id"].as_str() else {
            return Err(bad(format!(
                "task {task_id} has no `data.item_id`: import the export of a project made from `cohort review export --format label-studio`"
            )));
        };
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for annotation in task["annotations"].as_array().into_iter().flatten() {
            if annotation["was_cancelled"].as_bool() == Some(true) {
                continue; // skipped: not a label
            }
            let Some(who) = Annotator::of(&annotation["completed_by"]) else {
                return Err(bad(format!("task {task_id}: an annotation has no `completed_by`")));
            };
            let reviewer = reviewer_of(file, &who, map, index)?;
            let origin = format!("task {task_id} (item {item}), annotation {} by {}", annotation["id"], who.name());
            if let Some(first) = seen.insert(reviewer.clone(), origin.clone()) {
                return Err(bad(format!(
                    "{origin} and {first} are both reviewer {reviewer}'s: keep one annotation per task and reviewer"
                )));
            }
            let result = annotation["result"].as_array().map_or(&[][..], Vec::as_slice);
            let mut row = annotation_row(data, result).map_err(|m| bad(format!("{origin}: {m}")))?;
            row.insert("reviewer".into(), reviewer.clone());
            row.insert("label_studio_task".into(), task_id.clone());
            row.insert("label_studio_annotation".into(), annotation["id"].to_string());
            let entry = by_reviewer.entry(reviewer.clone()).or_insert_with(|| Annotations {
                who: who.clone(),
                rows: Vec::new(),
                origins: Vec::new(),
            });
            if entry.who != who {
                return Err(bad(format!(
                    "annotators {} and {} are both mapped to reviewer {reviewer}: one annotator per reviewer",
                    entry.who.name(),
                    who.name()
                )));
            }
            entry.rows.push(row);
            entry.origins.push(origin);
        }
    }
    if by_reviewer.is_empty() {
        return Err(bad("holds no annotation: label the tasks in Label Studio and export the project as JSON".into()));
    }
    let mut planned = Vec::new();
    for (reviewer, Annotations { who, rows, origins }) in by_reviewer {
        let mut jsonl = String::new();
        for row in &rows {
            jsonl.push_str(&serde_json::to_string(row).map_err(|e| ReviewError::io(file, e.into()))?);
            jsonl.push('\n');
        }
        let stored = format!("reviewer-{reviewer}.jsonl");
        let parsed = super::import::parse_file(&stored, jsonl.as_bytes(), "jsonl", index, "").map_err(|e| match e {
            ReviewError::BadInput { line, field, message, .. } => bad(format!(
                "{}: field `{field}` ({}): {message}",
                origins.get(line.saturating_sub(1)).map_or("an annotation", String::as_str),
                controls_of(&field)
            )),
            ReviewError::BadFile { message, .. } => {
                bad(format!("the annotations of {} (reviewer {reviewer}): {message}", who.name()))
            }
            other => other,
        })?;
        planned.push(Planned { source: file.into(), bytes: jsonl.into_bytes(), stored, parsed: Some(parsed) });
    }
    let kept = format!("{KEPT_PREFIX}{}.json", &hex::encode(Sha256::digest(bytes))[..12]);
    planned.push(Planned { source: file.into(), bytes: bytes.to_vec(), stored: kept, parsed: None::<Parsed> });
    Ok(planned)
}

/// The controls that fill a column, for an error message.
fn controls_of(column: &str) -> String {
    let names: Vec<String> = CONTROLS
        .iter()
        .filter(|(_, _, c)| c.split(" / ").any(|c| c == column))
        .map(|(n, _, _)| format!("`{n}`"))
        .collect();
    if names.is_empty() { "the task's data".into() } else { format!("Label Studio control {}", names.join(" or ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> ExportIndex {
        ExportIndex {
            kind: "cohort-review-export".into(),
            manifest_sha256: "m".into(),
            exported_at: "t".into(),
            reviewers: vec!["alice".into(), "bob".into()],
            folder: "f".into(),
            items: Vec::new(),
            extraction_check: None,
        }
    }

    /// Every label the import accepts is a choice of the config, once.
    #[test]
    fn the_config_offers_exactly_the_imports_labels() {
        let config = label_config();
        for v in CLAIM_LABELS.iter().chain(&PAIR_REASONS).chain(&NOT_FACTUAL_KINDS).chain(&EXTRACTION[1..]) {
            assert_eq!(config.matches(&format!("<Choice value=\"{v}\"")).count(), 1, "{v}");
        }
        for (name, _, _) in CONTROLS {
            assert!(config.contains(&format!("name=\"{name}\"")), "{name}");
        }
        assert!(!config.contains("as extracted\""), "no choice is as extracted");
        let comments: Vec<&str> = config.split("<!--").skip(1).map(|c| c.split("-->").next().unwrap_or("")).collect();
        assert!(comments.iter().all(|c| !c.contains("--")), "XML forbids -- inside a comment");
    }

    #[test]
    fn an_annotation_fills_the_columns_of_its_kind() {
        let choice = |n: &str, v: &str| json!({"from_name": n, "type": "choices", "value": {"choices": [v]}});
        let text = |n: &str, v: &[&str]| json!({"from_name": n, "type": "textarea", "value": {"text": v}});
        let claim = json!({"item_id": "c00001", "kind": "claim", "output": "ABC-q-1"});
        let row = annotation_row(
            &claim,
            &[
                choice("extraction", "split"),
                text("split", &["one", "two"]),
                text("split_labels", &["fully_supported", "unverifiable"]),
                text("claim_reason", &["|| lost"]),
            ],
        )
        .unwrap();
        assert_eq!(row["split"], "one || two");
        assert_eq!(row["label"], "fully_supported || unverifiable");
        assert_eq!(row["reason"], "|| lost");
        let row = annotation_row(&claim, &[choice("extraction", "not factual")]).unwrap();
        assert_eq!(row["not_factual"], "not factual");
        let pair = json!({"item_id": "p00001", "kind": "pair", "output": "ABC-q-1"});
        let row = annotation_row(&pair, &[choice("supports", "no"), choice("pair_reason", "broken")]).unwrap();
        assert_eq!((row["supports"].as_str(), row["reason"].as_str()), ("no", "broken"));
        let err = annotation_row(&pair, &[choice("label", "unsupported")]).unwrap_err();
        assert!(err.contains("`label`") && err.contains("claim items"), "{err}");
        let out = json!({"item_id": "u0001", "kind": "uncertainty", "output": "ABC-q-1"});
        let row = annotation_row(&out, &[choice("uncertainty", "2"), choice("abstained", "abstained")]).unwrap();
        assert_eq!((row["uncertainty"].as_str(), row["abstained"].as_str()), ("2", "yes"));
    }

    /// The rows go through the one validation, and its errors name the
    /// Label Studio task, annotation, author and control.
    #[test]
    fn a_bad_label_is_refused_naming_task_annotator_and_control() {
        let mut index = index();
        let item = |id: &str, kind| super::super::ExportedItem {
            item_id: id.into(),
            kind,
            run_id: "r".into(),
            arm: "a".into(),
            question_id: "q".into(),
            output: "ABC-q-1".into(),
            claim_item: None,
            claim_id: None,
            citations: BTreeMap::new(),
            citation: None,
            url: None,
        };
        index.items =
            vec![item("c00001", super::super::ItemKind::Claim), item("u0001", super::super::ItemKind::Uncertainty)];
        let task = |id: u32, item: &str, kind: &str, from: &str, v: &str| {
            json!({"id": id, "data": {"item_id": item, "kind": kind, "output": "ABC-q-1"}, "annotations": [
                {"id": 40 + id, "completed_by": {"id": 3, "email": "alice@lab.example"},
                 "result": [{"from_name": from, "type": "choices", "value": {"choices": [v]}}]}]})
        };
        let export = |tasks: Vec<Value>| serde_json::to_vec(&tasks).unwrap();
        let good = export(vec![
            task(5, "c00001", "claim", "label", "unsupported"),
            task(6, "u0001", "uncertainty", "uncertainty", "2"),
        ]);
        let planned = plan("ls.json", &good, &[], &index).unwrap();
        assert_eq!(planned.iter().map(|p| p.stored.as_str()).collect::<Vec<_>>()[0], "reviewer-alice.jsonl");
        assert!(planned[1].stored.starts_with(KEPT_PREFIX) && planned[1].parsed.is_none());
        let bad = export(vec![
            task(5, "c00001", "claim", "label", "nonsense"),
            task(6, "u0001", "uncertainty", "uncertainty", "2"),
        ]);
        let err = plan("ls.json", &bad, &[], &index).err().unwrap().to_string();
        for part in
            ["ls.json", "task 5", "annotation 45", "alice@lab.example", "`label`", "\"nonsense\" is not a claim label"]
        {
            assert!(err.contains(part), "{part}: {err}");
        }
        let missing = export(vec![task(5, "c00001", "claim", "label", "unsupported")]);
        let err = plan("ls.json", &missing, &[], &index).err().unwrap().to_string();
        assert!(err.contains("u0001") && err.contains("reviewer alice"), "{err}");
    }

    #[test]
    fn annotators_map_by_flag_or_email_and_an_unmapped_one_is_named() {
        let index = index();
        let by_email = Annotator { id: "7".into(), email: Some("Alice@lab.example".into()) };
        assert_eq!(reviewer_of("f", &by_email, &[], &index).unwrap(), "alice");
        let by_id = Annotator { id: "2".into(), email: None };
        assert_eq!(reviewer_of("f", &by_id, &[("2".into(), "bob".into())], &index).unwrap(), "bob");
        let err = reviewer_of("f", &by_id, &[], &index).unwrap_err().to_string();
        assert!(err.contains("Label Studio user 2") && err.contains("--reviewer-map 2=REVIEWER"), "{err}");
        let err = reviewer_of("f", &by_id, &[("2".into(), "carol".into())], &index).unwrap_err().to_string();
        assert!(err.contains("carol"), "{err}");
        assert!(parse_map(&["nobody".into()]).is_err());
    }
}
