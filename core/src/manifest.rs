//! The write-once manifest of a frozen cohort, and amendments.
//!
//! Architecture Invariant: a manifest is never modified. A cohort whose
//! files changed after freezing goes on only as a new, differently named
//! cohort whose manifest carries the amendment log (what changed, when,
//! why); the old manifest stays as it was.
//!
//! Every field is checked when a frozen cohort is loaded
//! ([`Manifest::check_consistency`]): the fields the cohort files derive
//! (order, hashes, name, seed, run count) are derived again and compared;
//! the names and versions are checked against the ones this tool knows; the
//! amendment log is checked as a chain (and against the predecessor's own
//! manifest when it is present, [`Manifest::check_predecessor`]); and
//! `self_sha256`, a SHA-256 over the manifest's canonical form, catches an
//! edit of the fields nothing derives (`frozen_at`, `tool_version`, an
//! amendment's reason). The self-hash is not a signature: whoever edits a
//! field and recomputes it is not caught by it. It makes a hand edit
//! deliberate, not possible to miss by accident.
//!
//! Manifests of version 1 (written before the self-hash existed) still
//! load: every derivable field is checked as for version 2, and
//! [`Integrity::Legacy`] says that the rest could not be, so callers can
//! say so.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::cohort::{FROZEN_FILES, OPTIONAL_FILES, ValidatedCohort};
use crate::config;
use crate::hash::{is_sha256_hex, sha256_hex};
use crate::order::{ORDER_ALGORITHM, RunId, order_sha256};
use crate::questions::Question;
use crate::{METRICS_VERSION, TOOL_VERSION};

/// The file name of the manifest within a cohort directory.
pub const FILE: &str = "manifest.json";

/// The version of the manifest's own layout: 2 adds `self_sha256` and an
/// amendment's `from_dir`.
pub const MANIFEST_VERSION: u32 = 2;

/// The layout written before the self-hash: loaded as [`Integrity::Legacy`].
pub const LEGACY_MANIFEST_VERSION: u32 = 1;

/// The first tool version that wrote manifest version 2; a sealed manifest
/// naming an older one was edited.
pub const FIRST_SEALED_TOOL_VERSION: &str = "0.1.0";

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
    /// SHA-256 of [`Manifest::canonical_json`], the manifest without this
    /// field. `None` only in a legacy (version 1) manifest. Not the hash of
    /// the file's bytes, which workers and the ledger use to name a
    /// manifest (`manifest_sha256` elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_sha256: Option<String>,
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
    /// That cohort's directory name, beside this one's, where its manifest
    /// is looked for to check the chain. `None` in amendments of version 1
    /// manifests (the directory was then looked for by the cohort's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_dir: Option<String>,
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
        let mut manifest = Manifest {
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
            self_sha256: None,
            amendments,
            order: order.iter().map(ToString::to_string).collect(),
        };
        manifest.self_sha256 = Some(manifest.computed_self_sha256());
        manifest
    }

    /// The canonical form the self-hash covers: the manifest's JSON, fields
    /// in declaration order, map keys sorted, no whitespace, without
    /// `self_sha256`. Independent of how the file is laid out.
    pub fn canonical_json(&self) -> String {
        let unsealed = Manifest { self_sha256: None, ..self.clone() };
        // Serializing plain structs, strings and numbers cannot fail.
        serde_json::to_string(&unsealed).unwrap_or_default()
    }

    /// Whether this is a version 1 manifest, written before the self-hash:
    /// it loads, but only its derivable fields could be checked
    /// ([`Integrity::Legacy`]).
    pub fn is_legacy(&self) -> bool {
        self.manifest_version == LEGACY_MANIFEST_VERSION
    }

    /// SHA-256 of [`Manifest::canonical_json`].
    pub fn computed_self_sha256(&self) -> String {
        sha256_hex(self.canonical_json().as_bytes())
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

    /// Checks every field of the manifest against the cohort it claims to
    /// freeze (see the module docs). A failure means `manifest.json` itself
    /// was edited; the problem names the field. Derivable fields are
    /// checked before the self-hash, so an edit of one is named as such.
    pub fn check_consistency(&self, cohort: &ValidatedCohort) -> Result<Integrity, ManifestProblem> {
        if self.cohort != cohort.config.name {
            return Err(problem(
                "cohort",
                format!("\"{}\" is not cohort.toml's name \"{}\"", self.cohort, cohort.config.name),
            ));
        }
        if self.seed != cohort.config.seed {
            return Err(problem("seed", format!("{} is not cohort.toml's seed {}", self.seed, cohort.config.seed)));
        }
        if self.config_sha256 != cohort.config_sha256 {
            return Err(problem(
                "config_sha256",
                format!(
                    "{} is not the hash {} of the frozen cohort.toml's canonical config",
                    self.config_sha256, cohort.config_sha256
                ),
            ));
        }
        let order = cohort.run_order();
        let derived = order_sha256(&order);
        if self.order_sha256 != derived {
            return Err(problem("order_sha256", format!("{} is not the derived {derived}", self.order_sha256)));
        }
        if self.run_count != order.len() {
            return Err(problem(
                "run_count",
                format!("{} is not the {} runs the cohort files derive", self.run_count, order.len()),
            ));
        }
        let listed = self.order.iter().map(|id| RunId::parse(id).ok());
        if self.order.len() != order.len() || listed.zip(&order).any(|(l, o)| l.as_ref() != Some(o)) {
            return Err(problem("order", "is not the order its cohort files derive (algorithm v1)"));
        }
        self.check_own_fields(true)
    }

    /// Checks the fields of the manifest that hold whatever the cohort
    /// files are: the version and the self-hash it requires, the order
    /// algorithm, the metrics and tool versions, `frozen_at`, the amendment
    /// chain, and last the self-hash. `derived_checked` says whether the
    /// derivable fields were checked first (so a self-hash mismatch lies in
    /// another field). Used alone on a manifest whose files changed (an
    /// amendment), where the rest cannot be derived.
    pub fn check_own_fields(&self, derived_checked: bool) -> Result<Integrity, ManifestProblem> {
        let integrity = self.check_version()?;
        if self.order_algorithm != ORDER_ALGORITHM {
            return Err(problem(
                "order_algorithm",
                format!(
                    "\"{}\" is not an order algorithm this tool knows (it knows \"{ORDER_ALGORITHM}\")",
                    self.order_algorithm
                ),
            ));
        }
        if self.metrics_version == 0 || self.metrics_version > METRICS_VERSION {
            return Err(problem(
                "metrics_version",
                format!("{} is not a metrics version this tool knows (1 to {METRICS_VERSION})", self.metrics_version),
            ));
        }
        self.check_tool_version(integrity)?;
        check_time(&self.frozen_at).map_err(|why| problem("frozen_at", why))?;
        self.check_amendments()?;
        if let Some(sealed) = &self.self_sha256 {
            let computed = self.computed_self_sha256();
            if *sealed != computed {
                return Err(problem(
                    "self_sha256",
                    format!(
                        "{sealed} is not the hash {computed} of the manifest's other fields: the manifest was \
                         edited after freezing{}",
                        if derived_checked {
                            "; every field the cohort files derive agrees, so the edit is in one they cannot derive \
                             (`frozen_at`, `tool_version`, or an amendment's `from_cohort`, `from_dir`, `reason` or \
                             `changes`)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
        Ok(integrity)
    }

    /// `manifest_version` and whether the self-hash it requires is there.
    fn check_version(&self) -> Result<Integrity, ManifestProblem> {
        match (self.manifest_version, &self.self_sha256) {
            (MANIFEST_VERSION, Some(sha)) if is_sha256_hex(sha) => Ok(Integrity::Sealed),
            (MANIFEST_VERSION, Some(sha)) => {
                Err(problem("self_sha256", format!("{sha:?} is not a lowercase hex SHA-256")))
            }
            (MANIFEST_VERSION, None) => {
                Err(problem("self_sha256", format!("is missing: a version {MANIFEST_VERSION} manifest always has one")))
            }
            (LEGACY_MANIFEST_VERSION, None) => Ok(Integrity::Legacy),
            (LEGACY_MANIFEST_VERSION, Some(_)) => Err(problem(
                "manifest_version",
                format!(
                    "is {LEGACY_MANIFEST_VERSION}, but the manifest has a self_sha256, which only version {MANIFEST_VERSION} writes"
                ),
            )),
            (v, _) => Err(problem(
                "manifest_version",
                format!(
                    "{v} is not a manifest version this tool knows ({LEGACY_MANIFEST_VERSION} or {MANIFEST_VERSION})"
                ),
            )),
        }
    }

    /// `tool_version`: a release `MAJOR.MINOR.PATCH` no newer than this
    /// tool, and for a sealed manifest no older than the first tool that
    /// sealed one.
    fn check_tool_version(&self, integrity: Integrity) -> Result<(), ManifestProblem> {
        let field = "tool_version";
        let Some(version) = release(&self.tool_version) else {
            return Err(problem(field, format!("{:?} is not a release version MAJOR.MINOR.PATCH", self.tool_version)));
        };
        if release(TOOL_VERSION).is_some_and(|current| version > current) {
            return Err(problem(
                field,
                format!(
                    "{} is newer than this tool ({TOOL_VERSION}): verify it with that version or a later one",
                    self.tool_version
                ),
            ));
        }
        if integrity == Integrity::Sealed && release(FIRST_SEALED_TOOL_VERSION).is_some_and(|first| version < first) {
            return Err(problem(
                field,
                format!(
                    "{} is older than the first tool that wrote a version {MANIFEST_VERSION} manifest ({FIRST_SEALED_TOOL_VERSION})",
                    self.tool_version
                ),
            ));
        }
        Ok(())
    }

    /// The amendment log as a chain, from what this manifest holds: each
    /// entry well formed, in time order, the last one made when this
    /// manifest was frozen (so every one before it), from another cohort,
    /// and naming as new hashes
    /// the files this manifest froze.
    fn check_amendments(&self) -> Result<(), ManifestProblem> {
        let mut previous: Option<(SystemTime, &str)> = None;
        for (i, a) in self.amendments.iter().enumerate() {
            let field = |name: &str| format!("amendments[{i}].{name}");
            if !is_sha256_hex(&a.from_manifest_sha256) {
                return Err(problem(
                    field("from_manifest_sha256"),
                    format!("{:?} is not a lowercase hex SHA-256", a.from_manifest_sha256),
                ));
            }
            if a.from_cohort.trim().is_empty() {
                return Err(problem(field("from_cohort"), "is empty"));
            }
            if let Some(dir) = &a.from_dir
                && !config::is_plain_name(dir)
            {
                return Err(problem(field("from_dir"), format!("{dir:?} is not a plain directory name")));
            }
            if a.reason.trim().is_empty() {
                return Err(problem(field("reason"), "is empty: an amendment says why"));
            }
            if a.changes.is_empty() {
                return Err(problem(field("changes"), "is empty: an amendment is made from changed files"));
            }
            let at = check_time(&a.amended_at).map_err(|why| problem(field("amended_at"), why))?;
            if let Some((before, from)) = previous {
                if at < before {
                    return Err(problem(field("amended_at"), "is earlier than the amendment before it"));
                }
                if from == a.from_cohort {
                    return Err(problem(field("from_cohort"), "is the cohort the amendment before it was made from"));
                }
            }
            previous = Some((at, &a.from_cohort));
        }
        let Some(last) = self.amendments.last() else {
            return Ok(());
        };
        let i = self.amendments.len() - 1;
        if last.amended_at != self.frozen_at {
            return Err(problem(
                format!("amendments[{i}].amended_at"),
                format!(
                    "{} is not this manifest's frozen_at {}: an amended cohort is frozen when it is amended",
                    last.amended_at, self.frozen_at
                ),
            ));
        }
        if last.from_cohort == self.cohort {
            return Err(problem(
                format!("amendments[{i}].from_cohort"),
                "is this cohort: an amendment makes a new, differently named one",
            ));
        }
        for (j, change) in last.changes.iter().enumerate() {
            let field = format!("amendments[{i}].changes[{j}]");
            if !FROZEN_FILES.contains(&change.file.as_str()) && !OPTIONAL_FILES.contains(&change.file.as_str()) {
                return Err(problem(field, format!("\"{}\" is not a frozen file", change.file)));
            }
            // cohort.toml is renamed after the change was recorded, so its
            // new hash is not the frozen one.
            if change.file != config::FILE && change.new_sha256.as_ref() != self.files.get(&change.file) {
                return Err(problem(
                    field,
                    format!("its new hash of {} is not the one this manifest froze", change.file),
                ));
            }
        }
        Ok(())
    }

    /// Checks this manifest's last amendment against the manifest it names
    /// as its predecessor, `predecessor` (its file's bytes hash to
    /// `predecessor_sha256`), when the caller found it: the hash, the name,
    /// the earlier amendments, and the old hashes of the changed and
    /// unchanged files must all agree.
    pub fn check_predecessor(&self, predecessor: &Manifest, predecessor_sha256: &str) -> Result<(), ManifestProblem> {
        let Some(last) = self.amendments.last() else {
            return Ok(());
        };
        let i = self.amendments.len() - 1;
        let field = |name: &str| format!("amendments[{i}].{name}");
        if last.from_manifest_sha256 != predecessor_sha256 {
            return Err(problem(
                field("from_manifest_sha256"),
                format!(
                    "{} is not the hash {predecessor_sha256} of cohort \"{}\"'s manifest.json",
                    last.from_manifest_sha256, predecessor.cohort
                ),
            ));
        }
        if last.from_cohort != predecessor.cohort {
            return Err(problem(
                field("from_cohort"),
                format!("\"{}\" is not the predecessor's name \"{}\"", last.from_cohort, predecessor.cohort),
            ));
        }
        if predecessor.amendments[..] != self.amendments[..i] {
            return Err(problem(
                "amendments",
                "the amendments before the last are not the predecessor's own amendment log",
            ));
        }
        let changed = |file: &str| last.changes.iter().find(|c| c.file == file);
        for &file in FROZEN_FILES.iter().chain(&OPTIONAL_FILES) {
            let old = predecessor.files.get(file);
            match changed(file) {
                Some(c) if old != Some(&c.old_sha256) && !(old.is_none() && c.old_sha256.is_empty()) => {
                    return Err(problem(
                        field("changes"),
                        format!("the old hash of {file} is not the one the predecessor froze"),
                    ));
                }
                Some(_) => {}
                None if file != config::FILE && old != self.files.get(file) => {
                    return Err(problem(
                        field("changes"),
                        format!("{file} differs from the predecessor's but is not listed as changed"),
                    ));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// How far a manifest that passed [`Manifest::check_consistency`] could be
/// checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integrity {
    /// Every field derived again or checked, and the self-hash matches.
    Sealed,
    /// A version 1 manifest, written before the self-hash: every derivable
    /// field was derived again and agrees, but an edit of `frozen_at`,
    /// `tool_version` or an amendment's text cannot be detected.
    Legacy,
}

/// A field of `manifest.json` that does not hold: the file was edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}` {message}")]
pub struct ManifestProblem {
    /// The field, as a path (`amendments[0].reason`).
    pub field: String,
    /// What is wrong with it. Lowercase.
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> ManifestProblem {
    ManifestProblem { field: field.into(), message: message.into() }
}

/// A time as [`rfc3339`] writes it (RFC 3339 UTC, to the second), or why
/// not: any other spelling of a time was not written by freezing.
fn check_time(text: &str) -> Result<SystemTime, String> {
    match humantime::parse_rfc3339(text) {
        Ok(t) if rfc3339(t) == text => Ok(t),
        _ => Err(format!(
            "{text:?} is not a time as freezing writes it (RFC 3339 UTC to the second, like 2026-09-21T14:13:20Z)"
        )),
    }
}

/// `MAJOR.MINOR.PATCH` as numbers; `None` for anything else.
fn release(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.split('.').map(|p| {
        (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (p == "0" || !p.starts_with('0')))
            .then(|| p.parse().ok())
            .flatten()
    });
    let v = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(v)
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
        assert_eq!(m.check_consistency(&c), Ok(Integrity::Sealed));
        // The self-hash covers every other field, not itself.
        assert_eq!(m.self_sha256.as_deref(), Some(m.computed_self_sha256().as_str()));
        assert!(!m.canonical_json().contains("self_sha256"));
        let mut edited = m.clone();
        edited.tool_version = "0.0.1".into();
        assert_ne!(edited.computed_self_sha256(), m.computed_self_sha256());
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
