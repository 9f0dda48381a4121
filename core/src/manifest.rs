//! The write-once manifest of a frozen cohort, and amendments.
//!
//! Architecture Invariant: a manifest is never modified. A cohort whose
//! files changed after freezing goes on only as a new, differently named
//! cohort whose manifest carries the amendment log (what changed, when,
//! why); the old manifest stays as it was.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::cohort::{FROZEN_FILES, OPTIONAL_FILES, ValidatedCohort};
use crate::order::{ORDER_ALGORITHM, RunId, order_sha256};
use crate::questions::Question;
use crate::{METRICS_VERSION, TOOL_VERSION};

/// The file name of the manifest within a cohort directory.
pub const FILE: &str = "manifest.json";

/// The version of the manifest's own layout.
pub const MANIFEST_VERSION: u32 = 1;

/// What `manifest.json` holds. Fields serialize in this order, the long
/// `order` last so the head of the file stays readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub manifest_version: u32,
    /// The cohort's name.
    pub cohort: String,
    /// When it was frozen, RFC 3339 UTC.
    pub frozen_at: String,
    pub tool_version: String,
    pub metrics_version: u32,
    pub seed: u64,
    /// `cohort-order-v1`.
    pub order_algorithm: String,
    /// File name -> lowercase hex SHA-256 of its bytes, for the five files
    /// (and the optional uncertainty key when it was present).
    pub files: BTreeMap<String, String>,
    /// SHA-256 of the canonical JSON of the validated config.
    pub config_sha256: String,
    pub run_count: usize,
    /// SHA-256 of the order: each run id followed by `\n`.
    pub order_sha256: String,
    /// Every amendment that led to this cohort, oldest first.
    #[serde(default)]
    pub amendments: Vec<Amendment>,
    /// The planned run order.
    pub order: Vec<String>,
}

/// One logged amendment: a new cohort made from a changed one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amendment {
    /// The cohort this one was amended from.
    pub from_cohort: String,
    /// SHA-256 of that cohort's `manifest.json` bytes.
    pub from_manifest_sha256: String,
    /// When, RFC 3339 UTC.
    pub amended_at: String,
    /// Why, in the operator's words.
    pub reason: String,
    /// Which frozen files changed.
    pub changes: Vec<FileChange>,
    /// Which questions changed, when the old questions were available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<QuestionChanges>,
}

/// A frozen file whose bytes differ from the manifest's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub file: String,
    pub old_sha256: String,
    /// `None` when the file is now missing.
    pub new_sha256: Option<String>,
}

/// Question ids added, removed or reworded between two question files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same id, different text or category.
    pub changed: Vec<String>,
}

/// RFC 3339 UTC, to the second.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Manifest {
    /// The manifest of `cohort`, frozen at `frozen_at`.
    pub fn build(cohort: &ValidatedCohort, frozen_at: SystemTime, amendments: Vec<Amendment>) -> Manifest {
        let order = cohort.run_order();
        Manifest {
            manifest_version: MANIFEST_VERSION,
            cohort: cohort.config.name.clone(),
            frozen_at: rfc3339(frozen_at),
            tool_version: TOOL_VERSION.to_owned(),
            metrics_version: METRICS_VERSION,
            seed: cohort.config.seed,
            order_algorithm: ORDER_ALGORITHM.to_owned(),
            files: cohort.file_hashes.clone(),
            config_sha256: cohort.config_sha256.clone(),
            run_count: order.len(),
            order_sha256: order_sha256(&order),
            amendments,
            order: order.iter().map(ToString::to_string).collect(),
        }
    }

    /// The frozen files whose current hashes (`current`, name -> hash; a
    /// missing file is absent) differ from the manifest's.
    ///
    /// An optional file ([`OPTIONAL_FILES`]) counts when the manifest froze
    /// it or it is present now: adding one after freezing is a change.
    pub fn changes(&self, current: &BTreeMap<String, String>) -> Vec<FileChange> {
        let optional = OPTIONAL_FILES.iter().filter(|f| self.files.contains_key(**f) || current.contains_key(**f));
        FROZEN_FILES
            .iter()
            .chain(optional)
            .filter_map(|&file| {
                let old = self.files.get(file).cloned().unwrap_or_default();
                let new = current.get(file).cloned();
                (new.as_ref() != Some(&old)).then(|| FileChange {
                    file: file.to_owned(),
                    old_sha256: old,
                    new_sha256: new,
                })
            })
            .collect()
    }

    /// Checks the manifest against the cohort it claims to freeze: the
    /// order must be the one algorithm v1 derives, and its hash must match.
    /// A failure means `manifest.json` itself was edited.
    pub fn check_consistency(&self, cohort: &ValidatedCohort) -> Result<(), String> {
        let order = cohort.run_order();
        let derived = order_sha256(&order);
        if self.order_sha256 != derived {
            return Err(format!("its order_sha256 {} is not the derived {derived}", self.order_sha256));
        }
        let listed: Vec<Option<RunId>> = self.order.iter().map(|id| RunId::parse(id)).collect();
        if self.run_count != order.len()
            || listed.len() != order.len()
            || listed.iter().zip(&order).any(|(l, o)| l.as_ref() != Some(o))
        {
            return Err("its order is not the one its cohort files derive".to_owned());
        }
        if self.seed != cohort.config.seed || self.cohort != cohort.config.name {
            return Err("its cohort name or seed differ from cohort.toml".to_owned());
        }
        Ok(())
    }
}

impl QuestionChanges {
    /// The differences from `old` to `new`, each list in file order.
    pub fn between(old: &[Question], new: &[Question]) -> QuestionChanges {
        let find = |list: &[Question], id: &str| list.iter().position(|q| q.id == id);
        QuestionChanges {
            added: new.iter().filter(|q| find(old, &q.id).is_none()).map(|q| q.id.clone()).collect(),
            removed: old.iter().filter(|q| find(new, &q.id).is_none()).map(|q| q.id.clone()).collect(),
            changed: new
                .iter()
                .filter(|q| find(old, &q.id).is_some_and(|i| old[i] != **q))
                .map(|q| q.id.clone())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cohort::CohortFiles;
    use std::time::{Duration, UNIX_EPOCH};

    fn cohort(questions: &str) -> ValidatedCohort {
        let mut f = CohortFiles::default();
        let toml = "name = \"t\"\nseed = 5\n[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"v\"\nvendor_lineage = \"x\"\n[[arms]]\nid = \"b\"\nlabel = \"B\"\nadapter = \"manual\"\npinned_version = \"v\"\nvendor_lineage = \"y\"\n";
        f.files.insert("cohort.toml".into(), Some(toml.into()));
        f.files.insert("questions.json".into(), Some(questions.as_bytes().to_vec()));
        for name in ["suffix.txt", "protocol.md", "rubric.md"] {
            f.files.insert(name.into(), Some(b"x".to_vec()));
        }
        f.validate().unwrap()
    }

    const Q: &str = r#"[{"id":"s1","category":"science","text":"a"},{"id":"s2","category":"science","text":"b"}]"#;

    #[test]
    fn build_records_order_and_hashes() {
        let c = cohort(Q);
        let m = Manifest::build(&c, UNIX_EPOCH + Duration::from_secs(1_790_000_000), vec![]);
        assert_eq!(m.run_count, 4);
        assert_eq!(m.frozen_at, "2026-09-21T14:13:20Z");
        assert_eq!(m.files.len(), 5);
        assert!(m.changes(&c.file_hashes).is_empty());
        assert!(m.check_consistency(&c).is_ok());
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.find("\"order\"").unwrap() > json.find("\"amendments\"").unwrap(), "order comes last");
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
    }

    #[test]
    fn edited_manifest_is_detected() {
        let c = cohort(Q);
        let mut m = Manifest::build(&c, UNIX_EPOCH, vec![]);
        m.order.swap(0, 1);
        assert!(m.check_consistency(&c).is_err());
    }

    #[test]
    fn changes_name_each_file_with_both_hashes() {
        let c = cohort(Q);
        let m = Manifest::build(&c, UNIX_EPOCH, vec![]);
        let mut now = c.file_hashes.clone();
        now.insert("questions.json".into(), "ab".repeat(32));
        now.remove("rubric.md");
        let changes = m.changes(&now);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].file, "questions.json");
        assert_eq!(changes[0].old_sha256, c.file_hashes["questions.json"]);
        assert_eq!(changes[1].new_sha256, None);
    }

    #[test]
    fn question_changes_are_listed() {
        let old = cohort(Q).questions;
        let new =
            cohort(r#"[{"id":"s1","category":"science","text":"a!"},{"id":"s3","category":"science","text":"c"}]"#)
                .questions;
        let d = QuestionChanges::between(&old, &new);
        assert_eq!((d.added, d.removed, d.changed), (vec!["s3".into()], vec!["s2".into()], vec!["s1".into()]));
    }
}
