//! `cohort verify REPORT_DIR`: recomputes every number of a report's
//! `summary.json` from the cohort's ledger and records, checks every file
//! of the folder against the SHA-256 that `summary.json` lists, and names
//! each number or file that differs.
//!
//! The recomputation is the same code path as `cohort report`
//! ([`gather`], [`compute::summarise`]) with the report's own bootstrap
//! draws, so a fresh report verifies exactly; an edited record fails in
//! the artifact store's hash check, an edited report file fails its
//! listed hash, and an edited number in `summary.json` is named with its
//! path (`arms[sim-careful].rates.support_micro.value`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use cohort_artifacts::ArtifactStore;
use cohort_ledger::Ledger;
use serde_json::Value;

use crate::gather::{self, FrozenCohort, NoLines};
use crate::model::Summary;
use crate::{ReportError, compute};

/// What verification found.
#[derive(Debug, Default)]
pub struct VerifyOutcome {
    /// Numbers (JSON leaves) compared.
    pub numbers_checked: usize,
    /// Files checked against their listed SHA-256.
    pub files_checked: usize,
    /// Each difference, in words; empty when the report verifies.
    pub differences: Vec<String>,
}

impl VerifyOutcome {
    pub fn ok(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Fields that are not numbers of the cohort and are not compared.
const NOT_COMPARED: [&str; 2] = ["generated_at", "files"];

/// Verifies the report in `report_dir` against the cohort.
pub async fn verify_report(
    report_dir: &Path,
    cohort_dir: &Path,
    frozen: &FrozenCohort,
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
) -> Result<VerifyOutcome, ReportError> {
    let shown = report_dir.display().to_string();
    let path = report_dir.join("summary.json");
    let bytes = std::fs::read(&path)
        .map_err(|e| ReportError::NotAReport { path: shown.clone(), why: format!("cannot read summary.json: {e}") })?;
    let stored: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ReportError::NotAReport { path: shown.clone(), why: format!("summary.json is not JSON: {e}") })?;
    let summary: Summary = serde_json::from_value(stored.clone()).map_err(|e| ReportError::NotAReport {
        path: shown.clone(),
        why: format!("summary.json does not have the report layout: {e}"),
    })?;
    let mut out = VerifyOutcome::default();
    check_files(report_dir, &summary, &mut out)?;
    if summary.manifest_sha256 != frozen.manifest_sha256 {
        out.differences.push(format!(
            "manifest_sha256: the report is of manifest {}, the cohort's manifest.json is {}",
            summary.manifest_sha256, frozen.manifest_sha256
        ));
        return Ok(out);
    }
    // The same judging pass as the report (an explicit name: a `default`
    // pass made after the report must not change what it is checked with).
    let pass = match &summary.method.judge_pass {
        Some(config) => crate::write::resolve_pass(cohort_dir, Some(&config.name))?,
        None => None,
    };
    let gathered = gather::gather(frozen, ledger, artifacts, &mut NoLines, false, pass.as_deref()).await?;
    let mut recomputed = compute::summarise(frozen, &gathered, summary.bootstrap.draws);
    // The drill-down cut is a note of the page, not a number of the cohort:
    // verify reads no drill-downs, so notes about them are taken as stored.
    let page_notes: Vec<String> =
        summary.notes.iter().filter(|n| n.starts_with(gather::DRILL_DOWN_NOTE)).cloned().collect();
    recomputed.notes.extend(page_notes);
    // Whether the folder is redacted is a property of the folder, not a
    // number of the cohort: its numbers are the same.
    recomputed.redaction.clone_from(&summary.redaction);
    recomputed.notes.sort();
    let mut stored_sorted = stored;
    if let Some(Value::Array(notes)) = stored_sorted.get_mut("notes") {
        notes.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
    let fresh = serde_json::to_value(&recomputed).map_err(|e| ReportError::io("summary", e.into()))?;
    compare("", &stored_sorted, &fresh, &mut out);
    Ok(out)
}

fn check_files(dir: &Path, summary: &Summary, out: &mut VerifyOutcome) -> Result<(), ReportError> {
    let listed: BTreeSet<&str> = summary.files.iter().map(|f| f.name.as_str()).collect();
    for entry in &summary.files {
        out.files_checked += 1;
        match crate::write::sha256_file(&dir.join(&entry.name)) {
            Ok((sha256, _)) if sha256 == entry.sha256 => {}
            Ok((sha256, _)) => out.differences.push(format!(
                "file {}: its SHA-256 is {sha256}, summary.json lists {} (the file was changed after the report was written)",
                entry.name, entry.sha256
            )),
            Err(e) => out.differences.push(format!("file {}: listed in summary.json but cannot be read: {e}", entry.name)),
        }
    }
    let present = std::fs::read_dir(dir).map_err(|e| ReportError::io(&format!("cannot list {}", dir.display()), e))?;
    for entry in present.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "summary.json" && !listed.contains(name.as_str()) {
            out.differences.push(format!("file {name}: present in the report folder but not listed in summary.json"));
        }
    }
    Ok(())
}

/// Compares two JSON trees, naming each leaf that differs.
fn compare(path: &str, stored: &Value, fresh: &Value, out: &mut VerifyOutcome) {
    match (stored, fresh) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                if path.is_empty() && NOT_COMPARED.contains(&key.as_str()) {
                    continue;
                }
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => compare(&child, x, y, out),
                    (Some(_), None) => {
                        out.differences.push(format!("{child}: in the report, not in the recomputation"))
                    }
                    (None, Some(_)) => out.differences.push(format!("{child}: missing from the report")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.differences.push(format!("{path}: {} entries in the report, {} recomputed", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                compare(&format!("{path}[{}]", element_name(x, i)), x, y, out);
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            out.numbers_checked += 1;
            let (fx, fy) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            if x != y && (fx - fy).abs() > 1e-12 * fx.abs().max(fy.abs()).max(1.0) {
                out.differences.push(format!("{path}: the report says {x}, recomputed {y}"));
            }
        }
        (x, y) => {
            out.numbers_checked += 1;
            if x != y {
                out.differences.push(format!("{path}: the report says {x}, recomputed {y}"));
            }
        }
    }
}

/// How an array element is named in a path: its id, category or pair.
fn element_name(v: &Value, i: usize) -> String {
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(id) = field("id") {
        return id;
    }
    if let Some(c) = field("category") {
        return c;
    }
    if let (Some(a), Some(b)) = (field("a"), field("b")) {
        return format!("{a} vs {b}");
    }
    i.to_string()
}
