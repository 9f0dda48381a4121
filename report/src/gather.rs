//! Reading a cohort for a report: the frozen files, the ledger's runs and
//! attempts, and each run's record from the artifact store, turned into one
//! [`RunView`] per planned run plus the per-claim lines of `claims.jsonl`
//! and the trace lines of `judge_traces.jsonl`.
//!
//! Records are read one at a time and dropped: what is kept per run is a
//! [`RunView`] (a few hundred bytes) and, within a byte budget, its
//! [`DrillDown`] for the HTML page; claims and traces stream to their
//! files. Memory therefore grows with the number of runs, not of claims.
//!
//! The ledger is the truth about outcomes; a record is the truth about
//! what was said. A record whose bytes no longer match its hash is an
//! error ([`ReportError::CorruptRecord`]): a report is never computed from
//! tampered data. A record that is missing is a note, and its run counts
//! as completed but not scored.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cohort_coordinator::ArtifactStore;
use cohort_coordinator::ledger::{AttemptRecord, Ledger, RunRow, RunStateKind, Status};
use cohort_core::ValidatedCohort;
use cohort_core::config::AdapterKind;
use cohort_core::manifest::Manifest;
use cohort_core::scoring::{VerdictLabel, judge_sentence, strip_markers};
use cohort_worker::record::{NOT_DISCLOSED, RunRecord};
use serde::Serialize;

use crate::ReportError;
use crate::model::{DrillAttempt, DrillClaim, DrillDown, DrillEvidence, RunScoreView, RunView};

/// How many bytes of drill-down (prompts, outputs, passages) the HTML page
/// holds at most; runs past it are listed without one, and the page says so.
pub const DRILL_DOWN_BUDGET_BYTES: usize = 48 * 1024 * 1024;

/// The cohort as frozen: what every report starts from.
#[derive(Debug, Clone)]
pub struct FrozenCohort {
    pub cohort: ValidatedCohort,
    pub manifest: Manifest,
    pub manifest_sha256: String,
}

/// Where the claim and trace lines go while records are read.
pub trait LineSink {
    fn claim(&mut self, line: &ClaimLine<'_>) -> Result<(), ReportError>;
    fn trace(&mut self, trace: &serde_json::Value) -> Result<(), ReportError>;
}

/// A sink that drops every line (`cohort verify` needs only the numbers).
#[derive(Debug, Default)]
pub struct NoLines;

impl LineSink for NoLines {
    fn claim(&mut self, _: &ClaimLine<'_>) -> Result<(), ReportError> {
        Ok(())
    }
    fn trace(&mut self, _: &serde_json::Value) -> Result<(), ReportError> {
        Ok(())
    }
}

/// A sink writing JSON lines to two writers.
#[derive(Debug)]
pub struct JsonlSink<W: Write> {
    pub claims: W,
    pub traces: W,
}

impl<W: Write> LineSink for JsonlSink<W> {
    fn claim(&mut self, line: &ClaimLine<'_>) -> Result<(), ReportError> {
        serde_json::to_writer(&mut self.claims, line).map_err(|e| ReportError::io("claims.jsonl", e.into()))?;
        self.claims.write_all(b"\n").map_err(|e| ReportError::io("claims.jsonl", e))
    }
    fn trace(&mut self, trace: &serde_json::Value) -> Result<(), ReportError> {
        serde_json::to_writer(&mut self.traces, trace).map_err(|e| ReportError::io("judge_traces.jsonl", e.into()))?;
        self.traces.write_all(b"\n").map_err(|e| ReportError::io("judge_traces.jsonl", e))
    }
}

/// One line of `claims.jsonl` (docs/report.md).
#[derive(Debug, Serialize)]
pub struct ClaimLine<'a> {
    pub kind: &'static str,
    pub run_id: &'a str,
    pub question_id: &'a str,
    pub category: &'a str,
    pub arm: &'a str,
    pub claim_index: u32,
    pub text: &'a str,
    pub line: u32,
    pub cited_indices: &'a [u32],
    /// `judged` (a YES or NO verdict) or `unjudged`.
    pub status: &'static str,
    pub unjudged_reason: Option<&'a str>,
    pub verdict: Option<&'static str>,
    pub judge_model: Option<&'a str>,
}

/// What reading the cohort gave.
#[derive(Debug)]
pub struct Gathered {
    pub status: Status,
    pub runs: Vec<RunView>,
    /// Attempts by class, per arm.
    pub attempts_by_class: BTreeMap<String, BTreeMap<String, u64>>,
    /// Claims judged per model that answered.
    pub served_models: BTreeMap<String, u64>,
    pub judge_simulated: bool,
    pub drill: BTreeMap<String, DrillDown>,
    pub notes: Vec<String>,
}

/// Reads every planned run: ledger row, attempts, record.
pub async fn gather(
    frozen: &FrozenCohort,
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    sink: &mut dyn LineSink,
    with_drill_down: bool,
) -> Result<Gathered, ReportError> {
    let status = ledger.status().await?;
    if status.manifest_sha256 != frozen.manifest_sha256 {
        return Err(ReportError::LedgerMismatch {
            ledger: status.manifest_sha256.clone(),
            manifest: frozen.manifest_sha256.clone(),
        });
    }
    let rows = ledger.runs().await?;
    let config = &frozen.cohort.config;
    let categories: BTreeMap<&str, &str> =
        frozen.cohort.questions.iter().map(|q| (q.id.as_str(), q.category.as_str())).collect();
    let mut out = Gathered {
        status,
        runs: Vec::with_capacity(rows.len()),
        attempts_by_class: BTreeMap::new(),
        served_models: BTreeMap::new(),
        judge_simulated: false,
        drill: BTreeMap::new(),
        notes: Vec::new(),
    };
    let mut drill_bytes = 0usize;
    let mut drill_cut = 0u64;
    let mut missing_records = 0u64;
    for row in rows {
        let (question_id, arm_id, repeat) = split_run_id(&row.run_id);
        let arm = config.arm(arm_id).ok_or_else(|| {
            ReportError::Inconsistent(format!(
                "the ledger holds run {} of arm {arm_id:?}, which the frozen cohort does not have",
                row.run_id
            ))
        })?;
        let category = categories.get(question_id).copied().ok_or_else(|| {
            ReportError::Inconsistent(format!("the ledger holds run {} of an unknown question", row.run_id))
        })?;
        let attempts = if row.attempts > 0 { ledger.attempts(&row.run_id).await? } else { Vec::new() };
        let by_class = out.attempts_by_class.entry(arm.id.clone()).or_default();
        for a in &attempts {
            *by_class.entry(a.class.as_str().to_owned()).or_default() += 1;
        }
        let record = if row.record_sha256.is_empty() {
            None
        } else {
            match artifacts.get(&row.record_sha256) {
                Ok(Some(bytes)) => {
                    Some(serde_json::from_slice::<RunRecord>(&bytes).map_err(|e| ReportError::CorruptRecord {
                        run_id: row.run_id.clone(),
                        sha256: row.record_sha256.clone(),
                        why: e.to_string(),
                    })?)
                }
                Ok(None) => {
                    missing_records += 1;
                    None
                }
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(ReportError::CorruptRecord {
                        run_id: row.run_id.clone(),
                        sha256: row.record_sha256.clone(),
                        why: "its bytes no longer match their SHA-256 (edited or damaged)".to_owned(),
                    });
                }
                Err(e) => return Err(ReportError::io(&format!("artifact {}", row.record_sha256), e)),
            }
        };
        let mut view = run_view(&row, question_id, category, arm, repeat, &attempts, record.as_ref());
        if let Some(record) = &record {
            let served = stream_claims(record, category, sink, &mut out.served_models, &mut out.judge_simulated)?;
            if with_drill_down {
                if drill_bytes < DRILL_DOWN_BUDGET_BYTES {
                    let drill = drill_down(record, &attempts, &served, artifacts);
                    drill_bytes += drill_size(&drill);
                    out.drill.insert(row.run_id.clone(), drill);
                } else {
                    drill_cut += 1;
                }
            }
            if record.simulated {
                view.simulated = true;
            }
        } else if with_drill_down && !attempts.is_empty() && drill_bytes < DRILL_DOWN_BUDGET_BYTES {
            let prompt = String::new();
            let drill = DrillDown {
                run_id: row.run_id.clone(),
                prompt,
                conversation: Vec::new(),
                output: None,
                claims: Vec::new(),
                served_judge_models: Vec::new(),
                attempts: attempts.iter().map(drill_attempt).collect(),
            };
            drill_bytes += drill_size(&drill);
            out.drill.insert(row.run_id.clone(), drill);
        }
        out.runs.push(view);
    }
    if missing_records > 0 {
        out.notes.push(format!(
            "{missing_records} run record(s) named by the ledger are missing from the artifact store: \
             those runs count as completed but not scored"
        ));
    }
    if drill_cut > 0 {
        out.notes.push(format!(
            "the page holds drill-downs for the first {} runs in planned order ({} MiB budget); \
             {drill_cut} more are in runs.csv, claims.jsonl and judge_traces.jsonl",
            out.drill.len(),
            DRILL_DOWN_BUDGET_BYTES / (1024 * 1024)
        ));
    }
    Ok(out)
}

/// Splits a run id `{question}:{arm}:{repeat}`.
fn split_run_id(run_id: &str) -> (&str, &str, u32) {
    let mut parts = run_id.splitn(3, ':');
    let q = parts.next().unwrap_or_default();
    let a = parts.next().unwrap_or_default();
    let r = parts.next().and_then(|r| r.parse().ok()).unwrap_or(1);
    (q, a, r)
}

/// RFC 3339 UTC with milliseconds, from Unix milliseconds; `None` for 0.
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    let ms = u64::try_from(ms).ok().filter(|&m| m > 0)?;
    Some(humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string())
}

fn run_view(
    row: &RunRow,
    question_id: &str,
    category: &str,
    arm: &cohort_core::config::ArmConfig,
    repeat: u32,
    attempts: &[AttemptRecord],
    record: Option<&RunRecord>,
) -> RunView {
    let outcome = match (row.state, row.outcome) {
        (RunStateKind::Final, Some(outcome)) => outcome.as_str().to_owned(),
        _ => "pending".to_owned(),
    };
    let observed_version = record
        .map(|r| r.observed_version.clone())
        .or_else(|| row.observed_version.clone())
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| if row.attempts > 0 { NOT_DISCLOSED.to_owned() } else { String::new() });
    let scored = record.and_then(|r| r.scoring.as_ref()).map(|s| {
        let metrics = &s.report.metrics;
        let mut view = RunScoreView {
            claims: s.report.claims.len() as u64,
            citations: u64::from(metrics.total_citations),
            unresolved: u64::from(metrics.unresolved_citations),
            uncited_sentences: u64::from(metrics.uncited_assertive_sentences),
            contradictions: u64::from(metrics.contradictions_surfaced),
            ..RunScoreView::default()
        };
        for claim in &s.report.claims {
            if !claim.cited.is_empty() {
                view.cited += 1;
            }
            match claim_status(claim) {
                ClaimStatus::Yes => {
                    view.judged += 1;
                    view.supported += 1;
                }
                ClaimStatus::No => view.judged += 1,
                ClaimStatus::Uncited => {}
                ClaimStatus::Unjudged(reason) => *view.unjudged.entry(reason.to_owned()).or_default() += 1,
            }
        }
        view
    });
    let started_ms = (row.started_ms > 0).then_some(row.started_ms);
    let ended = (row.ended_ms > 0).then_some(row.ended_ms);
    RunView {
        run_id: row.run_id.clone(),
        position: row.position,
        question_id: question_id.to_owned(),
        category: category.to_owned(),
        arm: arm.id.clone(),
        workflow: arm.workflow.clone(),
        repeat,
        simulated: arm.adapter == AdapterKind::Sim,
        outcome,
        attempt_class: attempts.last().map(|a| a.class.as_str().to_owned()).unwrap_or_default(),
        reason: row.reason.clone(),
        attempts: row.attempts,
        started_at: started_ms.and_then(rfc3339_ms),
        ended_at: ended.and_then(rfc3339_ms),
        started_ms,
        duration_ms: match (started_ms, ended) {
            (Some(s), Some(e)) if e >= s => Some(e - s),
            _ => None,
        },
        observed_version,
        pinned_version: arm.pinned_version.clone(),
        record_sha256: row.record_sha256.clone(),
        scored,
        cost: record.and_then(|r| r.cost),
        currency: record.and_then(|r| r.currency.clone()),
    }
}

/// A claim's standing for the support rate.
enum ClaimStatus<'a> {
    Yes,
    No,
    /// No citation: nothing to judge against (not in the support rate).
    Uncited,
    /// Cited, without a verdict: the reason (`not_sent` when no judge was
    /// asked).
    Unjudged(&'a str),
}

fn claim_status(claim: &cohort_core::scoring::ScoredClaim) -> ClaimStatus<'static> {
    match claim.verdict {
        Some(VerdictLabel::Yes) => ClaimStatus::Yes,
        Some(VerdictLabel::No) => ClaimStatus::No,
        Some(VerdictLabel::Unjudged) => ClaimStatus::Unjudged(claim.unjudged_reason.map_or("unknown", |r| r.as_str())),
        None if claim.cited.is_empty() => ClaimStatus::Uncited,
        None => ClaimStatus::Unjudged("not_sent"),
    }
}

/// Writes a record's claims and traces to the sink; returns, per claim
/// index, the model that judged it (from the trace records).
fn stream_claims(
    record: &RunRecord,
    category: &str,
    sink: &mut dyn LineSink,
    served_models: &mut BTreeMap<String, u64>,
    judge_simulated: &mut bool,
) -> Result<Vec<Option<String>>, ReportError> {
    let Some(score) = &record.scoring else { return Ok(Vec::new()) };
    if score.judge.as_ref().is_some_and(|j| j.simulated) {
        *judge_simulated = true;
    }
    // Trace records name the model that answered; they carry the claim's
    // text without markers, which is how a claim finds its trace.
    let mut by_text: BTreeMap<&str, &str> = BTreeMap::new();
    for trace in &score.judge_traces {
        if trace.get("simulated").and_then(serde_json::Value::as_bool) == Some(true) {
            *judge_simulated = true;
        }
        if let (Some(text), Some(model)) = (
            trace.get("claim_text").and_then(serde_json::Value::as_str),
            trace.get("judge_model").and_then(serde_json::Value::as_str),
        ) {
            by_text.entry(text).or_insert(model);
        }
        sink.trace(trace)?;
    }
    let only_model = match score.judge.as_ref().map(|j| j.served_models.as_slice()) {
        Some([one]) => Some(one.as_str()),
        _ => None,
    };
    let mut models = Vec::with_capacity(score.report.claims.len());
    for claim in &score.report.claims {
        let status = claim_status(claim);
        let judged = matches!(status, ClaimStatus::Yes | ClaimStatus::No);
        let model = if judged {
            // Records made before `judge_sentence` carry the plainly
            // stripped text.
            by_text
                .get(judge_sentence(&claim.text).as_str())
                .or_else(|| by_text.get(strip_markers(&claim.text).trim()))
                .copied()
                .or(only_model)
        } else {
            None
        };
        if let Some(m) = model {
            *served_models.entry(m.to_owned()).or_default() += 1;
        }
        let (status_text, reason, verdict) = match status {
            ClaimStatus::Yes => ("judged", None, Some("YES")),
            ClaimStatus::No => ("judged", None, Some("NO")),
            ClaimStatus::Uncited => ("unjudged", Some("uncited"), None),
            ClaimStatus::Unjudged(r) => ("unjudged", Some(r), None),
        };
        sink.claim(&ClaimLine {
            kind: "claim",
            run_id: &record.run_id,
            question_id: &record.question_id,
            category,
            arm: &record.arm,
            claim_index: claim.id,
            text: &claim.text,
            line: claim.line,
            cited_indices: &claim.cited,
            status: status_text,
            unjudged_reason: reason,
            verdict,
            judge_model: model,
        })?;
        models.push(model.map(str::to_owned));
    }
    Ok(models)
}

fn drill_attempt(a: &AttemptRecord) -> DrillAttempt {
    DrillAttempt {
        attempt: a.attempt,
        class: a.class.as_str().to_owned(),
        http_status: a.http_status,
        detail: a.detail.clone(),
        started_at: rfc3339_ms(a.started_ms),
        ended_at: rfc3339_ms(a.ended_ms),
        worker: a.worker.clone(),
    }
}

fn drill_down(
    record: &RunRecord,
    attempts: &[AttemptRecord],
    models: &[Option<String>],
    artifacts: &ArtifactStore,
) -> DrillDown {
    let output = record
        .output_sha256
        .as_deref()
        .and_then(|sha| artifacts.get(sha).ok().flatten())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let mut claims = Vec::new();
    let mut served = Vec::new();
    if let Some(score) = &record.scoring {
        if let Some(judge) = &score.judge {
            served.clone_from(&judge.served_models);
        }
        let sources: BTreeMap<u32, &str> =
            score.evidence_sources.iter().map(|e| (e.index, e.source.as_str())).collect();
        for (i, claim) in score.report.claims.iter().enumerate() {
            let evidence = claim
                .cited
                .iter()
                .map(|index| {
                    let reference = score.report.references.iter().find(|r| r.index == *index);
                    DrillEvidence {
                        index: *index,
                        url: reference.and_then(|r| r.url.clone()),
                        title: reference.and_then(|r| r.title.clone()),
                        source: sources.get(index).copied().unwrap_or("none").to_owned(),
                        passages: reference.map(|r| r.snippets.clone()).unwrap_or_default(),
                    }
                })
                .collect();
            let verdict = match claim_status(claim) {
                ClaimStatus::Yes => "YES".to_owned(),
                ClaimStatus::No => "NO".to_owned(),
                ClaimStatus::Uncited => "not judged (uncited)".to_owned(),
                ClaimStatus::Unjudged(reason) => format!("unjudged ({reason})"),
            };
            claims.push(DrillClaim {
                index: claim.id,
                text: claim.text.clone(),
                cited: claim.cited.clone(),
                verdict,
                judge_model: models.get(i).cloned().flatten(),
                judge_line: claim.judge_line.clone(),
                evidence,
            });
        }
    }
    DrillDown {
        run_id: record.run_id.clone(),
        prompt: record.prompt.clone(),
        conversation: record.conversation.iter().map(|t| (t.role.clone(), t.text.clone())).collect(),
        output,
        claims,
        served_judge_models: served,
        attempts: attempts.iter().map(drill_attempt).collect(),
    }
}

/// About how many bytes a drill-down adds to the page.
fn drill_size(d: &DrillDown) -> usize {
    let claims: usize = d
        .claims
        .iter()
        .map(|c| {
            c.text.len()
                + c.evidence.iter().map(|e| e.passages.iter().map(String::len).sum::<usize>() + 64).sum::<usize>()
        })
        .sum();
    d.prompt.len()
        + d.conversation.iter().map(|(r, t)| r.len() + t.len()).sum::<usize>()
        + d.output.as_ref().map_or(0, String::len)
        + claims
        + 256 * (1 + d.attempts.len())
}
