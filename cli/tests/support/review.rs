//! What the human-review tests share (`review`, `review_sheet`,
//! `label_studio`): the quickstart with an uncertainty key, copies of a
//! cohort, the exported items, the reviewers' CSV files, and the review as
//! imported and as reported.

// Each test binary includes the whole module and uses a different part.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The quickstart copied into `tmp/quickstart` with an uncertainty key for
/// every question (answerable unless `insufficient`), not collected.
pub fn keyed_quickstart(tmp: &Path) -> PathBuf {
    let dir = tmp.join("quickstart");
    super::copy_example("quickstart", &dir);
    let questions: Vec<Value> = serde_json::from_slice(&fs::read(dir.join("questions.json")).unwrap()).unwrap();
    let key: Vec<Value> = questions
        .iter()
        .map(|q| {
            let cat = q["category"].as_str().unwrap();
            json!({
                "question_id": q["id"],
                "answerable": cat != "insufficient",
                "required_caveats": ["state the limits of the evidence"],
                "known_disputes": if cat == "disputed" { vec!["the claim is contested"] } else { vec![] },
                "sources": ["the frozen protocol"],
            })
        })
        .collect();
    fs::write(dir.join("uncertainty_key.json"), serde_json::to_vec_pretty(&key).unwrap()).unwrap();
    dir
}

/// [`keyed_quickstart`], collected in process.
pub fn collected_quickstart(tmp: &Path) -> PathBuf {
    let dir = keyed_quickstart(tmp);
    super::collect_blocking(&dir);
    dir
}

/// Copies `from` into `to`, recursively.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A reviewer's exported items (`items.jsonl`).
pub fn items(export: &Path, reviewer: &str) -> Vec<BTreeMap<String, String>> {
    fs::read_to_string(export.join(reviewer).join("items.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<BTreeMap<String, String>>(l).unwrap())
        .collect()
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n']) { format!("\"{}\"", v.replace('"', "\"\"")) } else { v.to_owned() }
}

/// Writes `rows` as CSV with the columns `header`, a missing field empty.
pub fn write_csv(path: &Path, header: &[&str], rows: &[BTreeMap<String, String>]) {
    let mut out = header.join(",") + "\n";
    for r in rows {
        let fields: Vec<String> = header.iter().map(|h| csv_field(r.get(*h).map_or("", String::as_str))).collect();
        out.push_str(&(fields.join(",") + "\n"));
    }
    fs::write(path, out).unwrap();
}

/// The reviewers' labels as imported, the files' names left out (they
/// differ by path and extension by design).
pub fn imported_reviewers(dir: &Path) -> Vec<cohort_report::review::import::ReviewerLabels> {
    let input = cohort_report::review::load(dir).unwrap().unwrap();
    input
        .reviewers
        .into_iter()
        .map(|r| cohort_report::review::import::ReviewerLabels { file: String::new(), ..r })
        .collect()
}

/// The report's review section (`summary.json` `review`), the list of
/// imported files left out.
pub fn report_review(dir: &Path, out: &Path) -> Value {
    super::ok(&super::cohort(&["report", dir.to_str().unwrap(), "--draws", "200", "--out", out.to_str().unwrap()]));
    let folder = fs::read_dir(out).unwrap().next().unwrap().unwrap().path();
    let summary: Value = serde_json::from_slice(&fs::read(folder.join("summary.json")).unwrap()).unwrap();
    let mut review = summary["review"].clone();
    assert!(review.is_object(), "the report has a review section: {summary}");
    review.as_object_mut().unwrap().remove("imported_files");
    review
}
