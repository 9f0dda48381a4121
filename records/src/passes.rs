//! Judging passes (SPEC section 8, "Judging is a stage of its own"): each
//! pass is one judge configuration's verdicts over a cohort's stored
//! claims, kept under its own name so several judges (and their
//! majority-vote ensemble) can stand side by side and a report can feed
//! from a chosen one. docs/judging.md is the reference.
//!
//! Layout, under the cohort's state directory:
//!
//! ```text
//! DIR/.cohort/passes/<NAME>/pass.json          PassConfig, written once
//! DIR/.cohort/passes/<NAME>/runs/<run>.json    PassRun, one per run
//! ```
//!
//! The merge rule lives in one function, [`merge_claims`]: a claim with a
//! YES or NO verdict is never changed; an unjudged claim may later get a
//! verdict. A rerun of `cohort judge` therefore only fills in, and a crash
//! loses at most what was in flight: each run's file is replaced
//! atomically (temporary file, fsync, rename) under a per-run lock file, so
//! two processes filling the same pass cannot lose each other's verdicts.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cohort_artifacts::files::{temporary_sibling, write_once_io};
use cohort_core::scoring::{UnjudgedReason, Verdict, judge_sentence};
use serde::{Deserialize, Serialize};

use crate::record::{RunRecord, rfc3339_ms};

/// The layout version of `pass.json` and the run files.
pub const PASS_FORMAT: u32 = 1;
/// Where passes live, under the cohort's state directory.
pub const PASSES_DIR: &str = "passes";
/// The pass `cohort judge` and `cohort run --judge` write when none is named.
pub const DEFAULT_PASS: &str = "default";
/// How long a writer waits for another process's lock on one run file.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// What a pass is: written once, compared on every open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassConfig {
    pub pass_format: u32,
    pub name: String,
    pub kind: PassKind,
    /// When the pass was created (RFC 3339, UTC, milliseconds); not part
    /// of the comparison on open.
    pub created_at: String,
    /// The judge of a `judge` pass; `None` for an ensemble.
    pub judge: Option<PassJudge>,
    /// The member passes of an ensemble, in order; empty for a judge pass.
    #[serde(default)]
    pub members: Vec<String>,
}

/// A judge pass's own verdicts, or a majority vote of other passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassKind {
    Judge,
    Ensemble,
}

/// The judge of a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassJudge {
    /// The judge's name in the judge proxy that made the pass (the judge
    /// file's `judge`): recorded, not part of the pass's identity.
    pub proxy_judge: String,
    /// The model the cohort's frozen `[judge] model` asks for.
    pub requested_model: String,
    /// The cohort's frozen `[judge] served_model`: the only model whose
    /// verdicts count in this pass when `strict`.
    pub served_model_expected: String,
    /// The cohort's frozen `[judge] vendor_lineage`.
    pub vendor_lineage: String,
    /// A verdict served by another model is `unjudged(model_mismatch)`.
    pub strict: bool,
}

impl PassConfig {
    /// A judge pass named `name` (created now).
    pub fn judge(name: &str, judge: PassJudge) -> PassConfig {
        PassConfig {
            pass_format: PASS_FORMAT,
            name: name.to_owned(),
            kind: PassKind::Judge,
            created_at: now_rfc3339(),
            judge: Some(judge),
            members: Vec::new(),
        }
    }

    /// An ensemble pass named `name` over `members` (created now).
    pub fn ensemble(name: &str, members: Vec<String>) -> PassConfig {
        PassConfig {
            pass_format: PASS_FORMAT,
            name: name.to_owned(),
            kind: PassKind::Ensemble,
            created_at: now_rfc3339(),
            judge: None,
            members,
        }
    }

    /// What differs between `self` (stored) and `other` (asked for), as
    /// `field: stored X, asked Y` phrases; empty when they agree.
    pub fn differences(&self, other: &PassConfig) -> Vec<String> {
        let mut out = Vec::new();
        let mut differ = |field: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{field}: stored {a}, asked {b}"));
            }
        };
        differ("pass_format", self.pass_format.to_string(), other.pass_format.to_string());
        differ("name", format!("{:?}", self.name), format!("{:?}", other.name));
        differ("kind", format!("{:?}", self.kind), format!("{:?}", other.kind));
        differ("members", format!("{:?}", self.members), format!("{:?}", other.members));
        match (&self.judge, &other.judge) {
            (Some(a), Some(b)) => {
                // The proxy's own name for the judge is recorded, not
                // compared: the frozen judge is what the pass measures, and
                // one frozen judge may be served under another name later
                // (the built-in sim judge in process, a shared proxy's
                // `[[judges]] name`).
                differ("judge.requested_model", format!("{:?}", a.requested_model), format!("{:?}", b.requested_model));
                differ(
                    "judge.served_model_expected",
                    format!("{:?}", a.served_model_expected),
                    format!("{:?}", b.served_model_expected),
                );
                differ("judge.vendor_lineage", format!("{:?}", a.vendor_lineage), format!("{:?}", b.vendor_lineage));
                differ("judge.strict", a.strict.to_string(), b.strict.to_string());
            }
            (a, b) => differ("judge", format!("{:?}", a.is_some()), format!("{:?}", b.is_some())),
        }
        out
    }
}

/// One run's verdicts in a pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassRun {
    pub run_id: String,
    /// The run record the claims come from (the ledger's hash).
    pub record_sha256: String,
    /// Every cited claim of the record, by `claim_id` ascending.
    pub claims: Vec<PassClaim>,
    /// The seed-000 trace records of the YES/NO claims: `traces[k]` belongs
    /// to the k-th claim of `claims` with a YES or NO verdict (that pairing
    /// is checked on every merge). Empty for an ensemble.
    pub traces: Vec<serde_json::Value>,
    /// Sources this pass fetched itself at judging time (`cohort judge
    /// --capture`), because the run was collected without capture: each
    /// with its own access time, kept once (a later merge never replaces
    /// one), so a rerun judges against the same text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captures: Vec<crate::capture::Capture>,
    /// Every judge call made for this run in this pass (the prompt as sent
    /// and the raw reply), over all its `cohort judge` runs in the order
    /// made: a merge appends the incoming calls it does not hold yet and
    /// never drops one, even one whose verdicts were not kept. Empty for an
    /// ensemble, and in files written before issue 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<crate::score::JudgeCall>,
    /// When this file was last written.
    pub updated_at: String,
}

/// One claim's verdict in a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassClaim {
    /// The `ScoredClaim` id in the run record (1-based, document order).
    pub claim_id: u32,
    pub verdict: PassVerdict,
    /// Set when `verdict` is `unjudged`.
    pub unjudged_reason: Option<UnjudgedReason>,
    /// The model that actually served the verdict; `None` when none did.
    pub judge_model: Option<String>,
    /// The judge's reply line, when there was one.
    pub judge_line: Option<String>,
}

/// A claim's verdict in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassVerdict {
    Yes,
    No,
    Unjudged,
}

impl PassVerdict {
    /// YES or NO: a verdict the merge rule never changes.
    pub fn is_judged(self) -> bool {
        matches!(self, PassVerdict::Yes | PassVerdict::No)
    }

    /// `Some(true)` for YES, `Some(false)` for NO, `None` unjudged.
    pub fn as_vote(self) -> Option<bool> {
        match self {
            PassVerdict::Yes => Some(true),
            PassVerdict::No => Some(false),
            PassVerdict::Unjudged => None,
        }
    }
}

impl PassClaim {
    pub fn unjudged(claim_id: u32, reason: UnjudgedReason) -> PassClaim {
        PassClaim {
            claim_id,
            verdict: PassVerdict::Unjudged,
            unjudged_reason: Some(reason),
            judge_model: None,
            judge_line: None,
        }
    }
}

/// Why a pass could not be used. Each names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("pass name {name:?} is not plain: use letters, digits, '.', '_' and '-'")]
    BadName { name: String },
    #[error("pass {name:?} does not exist (no {path}): judge it first with `cohort judge --pass {name}`")]
    Missing { name: String, path: PathBuf },
    #[error(
        "pass {name:?} ({path}) was made with another configuration: {}; use another --pass name",
        differences.join("; ")
    )]
    Differs { name: String, path: PathBuf, differences: Vec<String> },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("{path} is not a valid pass file: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error(
        "{path}: run {run_id} was judged from record {stored}, and the ledger now names record {incoming}: \
         its claims may differ, so they are not merged (judge this run into a new --pass)"
    )]
    RecordChanged { path: PathBuf, run_id: String, stored: String, incoming: String },
    #[error("{path}: invalid run for the pass: {message}")]
    InvalidRun { path: PathBuf, message: String },
    #[error(
        "{path} is locked by another process (pid {pid}) for more than {secs} s; remove it if that process is gone"
    )]
    Locked { path: PathBuf, pid: String, secs: u64 },
}

/// A pass on disk.
#[derive(Debug)]
pub struct PassStore {
    dir: PathBuf,
    config: PassConfig,
}

impl PassStore {
    /// Opens the pass `config.name`, creating it (its `pass.json` written
    /// once) when it does not exist; an existing pass made with another
    /// configuration is refused, naming what differs.
    pub fn create_or_open(cohort_dir: &Path, config: PassConfig) -> Result<PassStore, PassError> {
        check_name(&config.name)?;
        for member in &config.members {
            check_name(member)?;
        }
        let dir = pass_dir(cohort_dir, &config.name);
        let path = dir.join("pass.json");
        if !path.exists() {
            fs::create_dir_all(dir.join("runs")).map_err(|source| PassError::Write { path: dir.clone(), source })?;
            let bytes = serde_json::to_vec_pretty(&config)
                .map_err(|e| PassError::Write { path: path.clone(), source: io::Error::other(e) })?;
            match write_once_io(&path, &bytes) {
                Ok(()) => return Ok(PassStore { dir, config }),
                // Another process created it first: compare with theirs.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(PassError::Write { path, source }),
            }
        }
        let stored = read_config(&path)?;
        let differences = stored.differences(&config);
        if !differences.is_empty() {
            return Err(PassError::Differs { name: config.name, path, differences });
        }
        fs::create_dir_all(dir.join("runs")).map_err(|source| PassError::Write { path: dir.clone(), source })?;
        Ok(PassStore { dir, config: stored })
    }

    /// Opens an existing pass (to read it, or to merge into it with the
    /// configuration it was made with).
    pub fn open(cohort_dir: &Path, name: &str) -> Result<PassStore, PassError> {
        check_name(name)?;
        let dir = pass_dir(cohort_dir, name);
        let path = dir.join("pass.json");
        if !path.exists() {
            return Err(PassError::Missing { name: name.to_owned(), path });
        }
        let config = read_config(&path)?;
        Ok(PassStore { dir, config })
    }

    pub fn config(&self) -> &PassConfig {
        &self.config
    }

    /// The pass's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The stored verdicts of `run_id`, `None` when the run has none yet.
    pub fn read_run(&self, run_id: &str) -> Result<Option<PassRun>, PassError> {
        let path = self.run_path(run_id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(PassError::Read { path, source }),
        };
        let run: PassRun = serde_json::from_slice(&bytes)
            .map_err(|e| PassError::Corrupt { path: path.clone(), message: e.to_string() })?;
        if run.run_id != run_id {
            return Err(PassError::Corrupt { path, message: format!("it holds run {:?}, not {run_id:?}", run.run_id) });
        }
        Ok(Some(run))
    }

    /// Merges `incoming` into the stored run by [`merge_claims`] and
    /// returns what is stored afterwards. Nothing is written when the
    /// merge changes nothing.
    pub fn merge_run(&self, incoming: &PassRun) -> Result<PassRun, PassError> {
        let path = self.run_path(&incoming.run_id);
        let invalid = |message: String| PassError::InvalidRun { path: path.clone(), message };
        let incoming_pairs = paired(incoming).map_err(invalid)?;
        let _lock = RunLock::acquire(&path)?;
        let stored = self.read_run(&incoming.run_id)?;
        let merged = match stored {
            None => PassRun { updated_at: now_rfc3339(), ..unpair(incoming, incoming_pairs) },
            Some(stored) => {
                if stored.record_sha256 != incoming.record_sha256 {
                    return Err(PassError::RecordChanged {
                        path,
                        run_id: incoming.run_id.clone(),
                        stored: stored.record_sha256,
                        incoming: incoming.record_sha256.clone(),
                    });
                }
                let stored_pairs =
                    paired(&stored).map_err(|message| PassError::Corrupt { path: path.clone(), message })?;
                let (pairs, claims_changed) = merge_claims(stored_pairs, incoming_pairs);
                let captures = merge_captures(&stored.captures, &incoming.captures);
                let calls = merge_calls(&stored.calls, &incoming.calls);
                if !claims_changed && captures.len() == stored.captures.len() && calls.len() == stored.calls.len() {
                    return Ok(stored);
                }
                PassRun { updated_at: now_rfc3339(), captures, calls, ..unpair(&stored, pairs) }
            }
        };
        let bytes = serde_json::to_vec_pretty(&merged)
            .map_err(|e| PassError::Write { path: path.clone(), source: io::Error::other(e) })?;
        replace_atomically(&path, &bytes).map_err(|source| PassError::Write { path, source })?;
        Ok(merged)
    }

    /// The run ids with a file in this pass (file-safe names decoded).
    pub fn run_files(&self) -> Result<Vec<PathBuf>, PassError> {
        let runs = self.dir.join("runs");
        let mut out = Vec::new();
        let entries = match fs::read_dir(&runs) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(source) => return Err(PassError::Read { path: runs, source }),
        };
        for entry in entries {
            let entry = entry.map_err(|source| PassError::Read { path: runs.clone(), source })?;
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json")
                && !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                out.push(path);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every stored run of the pass, read.
    pub fn read_all(&self) -> Result<Vec<PassRun>, PassError> {
        let mut out = Vec::new();
        for path in self.run_files()? {
            let bytes = fs::read(&path).map_err(|source| PassError::Read { path: path.clone(), source })?;
            let run: PassRun = serde_json::from_slice(&bytes)
                .map_err(|e| PassError::Corrupt { path: path.clone(), message: e.to_string() })?;
            out.push(run);
        }
        Ok(out)
    }

    fn run_path(&self, run_id: &str) -> PathBuf {
        self.dir.join("runs").join(format!("{}.json", file_safe(run_id)))
    }
}

/// The passes of a cohort, by name.
pub fn list(cohort_dir: &Path) -> Result<Vec<String>, PassError> {
    let root = cohort_dir.join(cohort_artifacts::STATE_DIR).join(PASSES_DIR);
    let entries = match fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(PassError::Read { path: root, source }),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| PassError::Read { path: root.clone(), source })?;
        if entry.path().join("pass.json").is_file() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// A claim with its trace, the unit the merge rule works on.
pub type ClaimWithTrace = (PassClaim, Option<serde_json::Value>);

/// THE merge rule: a claim with a YES or NO verdict in `stored` is never
/// changed (its trace stays with it); an unjudged stored claim takes the
/// incoming verdict (YES, NO, or a newer unjudged reason); a claim only one
/// side has is kept. Returns the merged claims by id and whether anything
/// changed.
pub fn merge_claims(stored: Vec<ClaimWithTrace>, incoming: Vec<ClaimWithTrace>) -> (Vec<ClaimWithTrace>, bool) {
    let mut by_id: BTreeMap<u32, ClaimWithTrace> = stored.into_iter().map(|c| (c.0.claim_id, c)).collect();
    let mut changed = false;
    for (claim, trace) in incoming {
        match by_id.get(&claim.claim_id) {
            Some((kept, _)) if kept.verdict.is_judged() => {}
            Some((kept, _)) if *kept == claim => {}
            _ => {
                changed = true;
                by_id.insert(claim.claim_id, (claim, trace));
            }
        }
    }
    (by_id.into_values().collect(), changed)
}

/// A run's claims with their traces (the `traces[k]` pairing checked).
fn paired(run: &PassRun) -> Result<Vec<ClaimWithTrace>, String> {
    let mut claims = run.claims.clone();
    claims.sort_by_key(|c| c.claim_id);
    if claims.windows(2).any(|w| w[0].claim_id == w[1].claim_id) {
        return Err(format!("run {}: a claim id is repeated", run.run_id));
    }
    let judged = claims.iter().filter(|c| c.verdict.is_judged()).count();
    if !run.traces.is_empty() && run.traces.len() != judged {
        return Err(format!(
            "run {}: {} trace records for {judged} YES/NO claims (one per YES/NO claim, or none)",
            run.run_id,
            run.traces.len()
        ));
    }
    let mut traces = run.traces.iter().cloned();
    Ok(claims
        .into_iter()
        .map(|c| {
            let trace = if c.verdict.is_judged() { traces.next() } else { None };
            (c, trace)
        })
        .collect())
}

/// The stored captures, then those of `incoming` for URLs not captured yet:
/// a source's text, once used for a verdict, is never swapped for a later
/// fetch.
fn merge_captures(
    stored: &[crate::capture::Capture],
    incoming: &[crate::capture::Capture],
) -> Vec<crate::capture::Capture> {
    let mut merged = stored.to_vec();
    for capture in incoming {
        if !merged.iter().any(|c| c.url == capture.url) {
            merged.push(capture.clone());
        }
    }
    merged
}

/// The stored calls, then the incoming ones not stored yet (the same call
/// merged twice is kept once): every prompt sent stays on record.
fn merge_calls(
    stored: &[crate::score::JudgeCall],
    incoming: &[crate::score::JudgeCall],
) -> Vec<crate::score::JudgeCall> {
    let mut merged = stored.to_vec();
    for call in incoming {
        if !merged.contains(call) {
            merged.push(call.clone());
        }
    }
    merged
}

fn unpair(base: &PassRun, pairs: Vec<ClaimWithTrace>) -> PassRun {
    let traces: Vec<serde_json::Value> =
        pairs.iter().filter(|(c, _)| c.verdict.is_judged()).filter_map(|(_, t)| t.clone()).collect();
    // A judged claim without a trace (an ensemble, or a proxy that sent
    // none) would break the pairing: then no traces are kept at all for
    // the run rather than misattributed ones.
    let judged = pairs.iter().filter(|(c, _)| c.verdict.is_judged()).count();
    let traces = if traces.len() == judged { traces } else { Vec::new() };
    PassRun {
        run_id: base.run_id.clone(),
        record_sha256: base.record_sha256.clone(),
        claims: pairs.into_iter().map(|(c, _)| c).collect(),
        traces,
        captures: base.captures.clone(),
        calls: base.calls.clone(),
        updated_at: base.updated_at.clone(),
    }
}

impl PassRun {
    /// The verdicts a run record carries (the inline `cohort run --judge`
    /// path): every cited claim, its verdict and the model that served it
    /// (the trace's `judge_model`). With `strict`, a YES/NO served by a
    /// model other than `expected_served` becomes `unjudged(model_mismatch)`,
    /// so a non-strict proxy cannot mix models into one pass. `None` when
    /// the record has no scoring.
    pub fn from_record(
        record_sha256: &str,
        record: &RunRecord,
        expected_served: &str,
        strict: bool,
    ) -> Option<PassRun> {
        let scoring = record.scoring.as_ref()?;
        let mut traces_by_text: BTreeMap<String, Vec<&serde_json::Value>> = BTreeMap::new();
        for t in &scoring.judge_traces {
            if let Some(text) = t.get("claim_text").and_then(|v| v.as_str()) {
                traces_by_text.entry(text.to_owned()).or_default().push(t);
            }
        }
        let mut claims = Vec::new();
        let mut traces = Vec::new();
        for c in scoring.report.claims.iter().filter(|c| !c.cited.is_empty()) {
            use cohort_core::scoring::VerdictLabel;
            let trace = match c.verdict {
                Some(VerdictLabel::Yes | VerdictLabel::No) => {
                    traces_by_text.get_mut(&judge_sentence(&c.text)).and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
                }
                _ => None,
            };
            let served = trace.and_then(|t| t.get("judge_model")).and_then(|v| v.as_str()).map(str::to_owned);
            // The served-model rule treats YES and NO alike; it is applied
            // only to them below.
            let mismatch =
                served_model_rule(Verdict::Yes, served.as_deref(), strict.then_some(expected_served)) != Verdict::Yes;
            let claim = match (c.verdict, trace) {
                (Some(VerdictLabel::Yes | VerdictLabel::No), Some(_)) if mismatch => {
                    PassClaim { judge_model: served, ..PassClaim::unjudged(c.id, UnjudgedReason::ModelMismatch) }
                }
                (Some(label @ (VerdictLabel::Yes | VerdictLabel::No)), Some(t)) => {
                    traces.push(t.clone());
                    PassClaim {
                        claim_id: c.id,
                        verdict: if label == VerdictLabel::Yes { PassVerdict::Yes } else { PassVerdict::No },
                        unjudged_reason: None,
                        judge_model: served,
                        judge_line: c.judge_line.clone(),
                    }
                }
                // A verdict without its trace cannot say which model
                // served it: it does not count in a pass.
                (Some(VerdictLabel::Yes | VerdictLabel::No), None) => {
                    PassClaim::unjudged(c.id, UnjudgedReason::ModelMismatch)
                }
                (Some(VerdictLabel::Unjudged), _) => {
                    PassClaim::unjudged(c.id, c.unjudged_reason.unwrap_or(UnjudgedReason::ProviderError))
                }
                // Cited, but no judge was asked: nothing to record yet.
                (None, _) => continue,
            };
            claims.push(claim);
        }
        Some(PassRun {
            run_id: record.run_id.clone(),
            record_sha256: record_sha256.to_owned(),
            claims,
            traces,
            captures: Vec::new(),
            calls: scoring.judge_calls.clone(),
            updated_at: now_rfc3339(),
        })
    }
}

fn check_name(name: &str) -> Result<(), PassError> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain { Ok(()) } else { Err(PassError::BadName { name: name.to_owned() }) }
}

fn pass_dir(cohort_dir: &Path, name: &str) -> PathBuf {
    cohort_dir.join(cohort_artifacts::STATE_DIR).join(PASSES_DIR).join(name)
}

fn read_config(path: &Path) -> Result<PassConfig, PassError> {
    let bytes = fs::read(path).map_err(|source| PassError::Read { path: path.to_owned(), source })?;
    let config: PassConfig = serde_json::from_slice(&bytes)
        .map_err(|e| PassError::Corrupt { path: path.to_owned(), message: e.to_string() })?;
    if config.pass_format != PASS_FORMAT {
        return Err(PassError::Corrupt {
            path: path.to_owned(),
            message: format!("pass_format {} (this version reads {PASS_FORMAT})", config.pass_format),
        });
    }
    Ok(config)
}

/// A run id as a file name: plain bytes kept, every other byte (`:` of
/// `q1:arm:1` included) as `%XX`, so distinct ids never share a file.
pub fn file_safe(run_id: &str) -> String {
    let mut out = String::with_capacity(run_id.len());
    for b in run_id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-') || (b == b'.' && !out.is_empty()) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn now_rfc3339() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    rfc3339_ms(ms)
}

/// A run file: written whole to a temporary file, synced, renamed over the
/// old one, so a reader (or a crash) sees the old file or the new one.
fn replace_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temporary_sibling(path);
    let result = (|| {
        let mut file = fs::File::create_new(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A lock on one run file across processes: a `create_new` lock file
/// holding the owner's pid. A lock whose owner no longer runs (killed
/// mid-merge) is taken over; `std::fs::File::lock` would do this, but it is
/// newer than the workspace's minimum Rust.
struct RunLock {
    path: PathBuf,
}

impl RunLock {
    fn acquire(run_path: &Path) -> Result<RunLock, PassError> {
        let name = run_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = run_path.with_file_name(format!(".{name}.lock"));
        let started = Instant::now();
        loop {
            match fs::File::create_new(&path) {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return Ok(RunLock { path });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let pid = fs::read_to_string(&path).unwrap_or_default();
                    if owner_is_gone(pid.trim()) {
                        let _ = fs::remove_file(&path);
                        continue;
                    }
                    if started.elapsed() > LOCK_WAIT {
                        return Err(PassError::Locked { path, pid, secs: LOCK_WAIT.as_secs() });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(source) => return Err(PassError::Write { path, source }),
            }
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether the process that wrote a lock is gone. On Linux `/proc` says;
/// elsewhere a lock is never taken over (it times out with a message).
/// An empty pid is a lock being written right now: not gone.
fn owner_is_gone(pid: &str) -> bool {
    if pid.is_empty() || pid.parse::<u32>().is_err() {
        return false;
    }
    if pid == std::process::id().to_string() {
        return false;
    }
    cfg!(target_os = "linux") && Path::new("/proc").is_dir() && !Path::new("/proc").join(pid).exists()
}

/// The served-model rule, the one copy (the stage, and the inline verdicts
/// as they go into a pass): with `strict_served`, a YES/NO served by any
/// other model, or by one the proxy did not name, is
/// `unjudged(model_mismatch)`; without it, the verdict stands.
pub fn served_model_rule(verdict: Verdict, served: Option<&str>, strict_served: Option<&str>) -> Verdict {
    match (verdict, strict_served) {
        (Verdict::Yes | Verdict::No, Some(expected)) if served != Some(expected) => {
            Verdict::Unjudged(UnjudgedReason::ModelMismatch)
        }
        (v, _) => v,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use super::*;

    fn judge_config(name: &str) -> PassConfig {
        PassConfig::judge(
            name,
            PassJudge {
                proxy_judge: "j".into(),
                requested_model: "judge-1".into(),
                served_model_expected: "judge-1".into(),
                vendor_lineage: "judgeco".into(),
                strict: true,
            },
        )
    }

    fn claim(id: u32, verdict: PassVerdict) -> PassClaim {
        PassClaim {
            claim_id: id,
            verdict,
            unjudged_reason: (verdict == PassVerdict::Unjudged).then_some(UnjudgedReason::ProviderError),
            judge_model: verdict.is_judged().then(|| "judge-1".to_owned()),
            judge_line: None,
        }
    }

    fn run(claims: Vec<PassClaim>) -> PassRun {
        let traces = claims
            .iter()
            .filter(|c| c.verdict.is_judged())
            .map(
                |c| serde_json::json!({"claim_text": format!("claim {}", c.claim_id), "v": format!("{:?}", c.verdict)}),
            )
            .collect();
        PassRun {
            run_id: "q1:a:1".into(),
            record_sha256: "ab".into(),
            claims,
            traces,
            captures: Vec::new(),
            calls: Vec::new(),
            updated_at: String::new(),
        }
    }

    /// Proves the merge rule: YES/NO never change, unjudged claims fill
    /// in, traces stay with their claims, and a merge that adds nothing
    /// writes nothing (the file's bytes are unchanged).
    #[test]
    fn merge_only_fills_in() {
        let tmp = tempfile::tempdir().unwrap();
        let store = PassStore::create_or_open(tmp.path(), judge_config("p")).unwrap();
        let first = run(vec![claim(1, PassVerdict::Yes), claim(2, PassVerdict::Unjudged), claim(3, PassVerdict::No)]);
        store.merge_run(&first).unwrap();
        // A rerun that disagrees on 1 and 3 and fills 2.
        let second = run(vec![claim(1, PassVerdict::No), claim(2, PassVerdict::No), claim(3, PassVerdict::Yes)]);
        let merged = store.merge_run(&second).unwrap();
        let verdicts: Vec<PassVerdict> = merged.claims.iter().map(|c| c.verdict).collect();
        assert_eq!(verdicts, [PassVerdict::Yes, PassVerdict::No, PassVerdict::No]);
        let texts: Vec<&str> = merged.traces.iter().map(|t| t["v"].as_str().unwrap()).collect();
        assert_eq!(texts, ["Yes", "No", "No"], "claim 1's own trace, claim 2's new one, claim 3's own");
        assert_eq!(merged.traces[1]["claim_text"], "claim 2");
        let path = store.dir().join("runs").join(format!("{}.json", file_safe("q1:a:1")));
        let before = fs::read(&path).unwrap();
        let again = store.merge_run(&second).unwrap();
        assert_eq!(again, merged);
        assert_eq!(fs::read(&path).unwrap(), before, "nothing new, nothing written");
        assert_eq!(store.read_run("q1:a:1").unwrap().unwrap(), merged);
        assert!(store.read_run("q2:a:1").unwrap().is_none());
    }

    /// Proves the judge calls of every merge are kept: a rerun whose
    /// verdicts change nothing still adds its calls (they are written), the
    /// same call merged again is kept once, and a file without `calls` (an
    /// older pass) reads as none.
    #[test]
    fn merges_keep_every_judge_call() {
        let tmp = tempfile::tempdir().unwrap();
        let store = PassStore::create_or_open(tmp.path(), judge_config("p")).unwrap();
        let call = |reply: &str| crate::score::JudgeCall {
            claim_ids: vec!["1".into()],
            raw_reply: Some(reply.into()),
            ..Default::default()
        };
        let first = PassRun { calls: vec![call("Claim 1: YES")], ..run(vec![claim(1, PassVerdict::Yes)]) };
        store.merge_run(&first).unwrap();
        let rerun = PassRun { calls: vec![call("Claim 1: NO")], ..run(vec![claim(1, PassVerdict::No)]) };
        let merged = store.merge_run(&rerun).unwrap();
        assert_eq!(merged.claims[0].verdict, PassVerdict::Yes, "the verdict stays");
        assert_eq!(merged.calls, [call("Claim 1: YES"), call("Claim 1: NO")], "both calls kept, in order");
        assert_eq!(store.merge_run(&rerun).unwrap().calls.len(), 2, "the same call once");
        assert_eq!(store.read_run("q1:a:1").unwrap().unwrap().calls.len(), 2);
        let old = serde_json::to_value(run(vec![claim(1, PassVerdict::Yes)])).unwrap();
        assert!(old.get("calls").is_none(), "an empty list is not written");
        let read: PassRun = serde_json::from_value(old).unwrap();
        assert!(read.calls.is_empty());
    }

    /// Proves the configuration is written once and an open with another
    /// configuration is refused naming each field that differs.
    #[test]
    fn a_pass_keeps_its_configuration() {
        let tmp = tempfile::tempdir().unwrap();
        PassStore::create_or_open(tmp.path(), judge_config("p")).unwrap();
        // The same configuration (another created_at) opens.
        let again = PassStore::create_or_open(tmp.path(), judge_config("p")).unwrap();
        assert_eq!(again.config().judge.as_ref().unwrap().proxy_judge, "j");
        let mut other = judge_config("p");
        if let Some(j) = other.judge.as_mut() {
            j.served_model_expected = "judge-2".into();
            j.strict = false;
        }
        let e = PassStore::create_or_open(tmp.path(), other).unwrap_err().to_string();
        assert!(e.contains("judge.served_model_expected: stored \"judge-1\", asked \"judge-2\""), "{e}");
        assert!(e.contains("judge.strict: stored true, asked false") && e.contains("pass.json"), "{e}");
        assert_eq!(list(tmp.path()).unwrap(), ["p"]);
        assert!(matches!(PassStore::open(tmp.path(), "nope"), Err(PassError::Missing { .. })));
        assert!(matches!(PassStore::create_or_open(tmp.path(), judge_config("a/b")), Err(PassError::BadName { .. })));
        let readonly = fs::metadata(tmp.path().join(".cohort/passes/p/pass.json")).unwrap().permissions().readonly();
        assert!(readonly, "pass.json is read-only");
    }

    /// Proves a run judged from one record is not merged with verdicts of
    /// another record, and a broken trace pairing is refused.
    #[test]
    fn merges_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let store = PassStore::create_or_open(tmp.path(), judge_config("p")).unwrap();
        store.merge_run(&run(vec![claim(1, PassVerdict::Unjudged)])).unwrap();
        let other = PassRun { record_sha256: "cd".into(), ..run(vec![claim(1, PassVerdict::Yes)]) };
        let e = store.merge_run(&other).unwrap_err().to_string();
        assert!(e.contains("record ab") && e.contains("record cd"), "{e}");
        let mut broken = run(vec![claim(1, PassVerdict::Yes), claim(2, PassVerdict::No)]);
        broken.traces.pop();
        assert!(matches!(store.merge_run(&broken), Err(PassError::InvalidRun { .. })));
    }

    /// Proves run ids map to distinct, plain file names.
    #[test]
    fn file_names_are_safe_and_distinct() {
        assert_eq!(file_safe("q1:a:1"), "q1%3Aa%3A1");
        assert_ne!(file_safe("a:b"), file_safe("a%3Ab"));
        assert_eq!(file_safe("../x"), "%2E.%2Fx");
        assert!(!owner_is_gone(&std::process::id().to_string()));
    }
}
