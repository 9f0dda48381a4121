//! A ledger that lost its cohort (Redis emptied by FLUSHALL or restarted on
//! an empty data folder, the embedded ledger file deleted), rebuilt from the
//! evidence outside it: `cohort ledger rebuild DIR` (issue 23;
//! docs/operations.md, "A lost ledger").
//!
//! The evidence, gathered by [`Evidence::gather`]:
//! - the run records of the cohort's manifest in the artifact store and in
//!   the workers' spool (`DIR/.cohort/spool`): a record is written, and
//!   durable, before its result is reported, so every run the ledger had
//!   final with a record has one here, with its outcome and every attempt
//!   numbered as its leases numbered them;
//! - the workers' journals (`DIR/.cohort/journal/*`, live or left over):
//!   the reports the ledger may not have had on disk, results and attempts,
//!   each with its lease's token and number.
//!
//! What it rebuilds ([`cohort_ledger::Ledger::rebuild`]): every run with a
//! record is final with the record's outcome and attempts, so no product is
//! called again for it; a run with journaled attempts only is pending with
//! them counted, or final where the retry policy ends it (a quota
//! exhausted, the attempts spent); every other run is pending, as it was;
//! the collection window where the first attempt puts it, never opened
//! again now; tokens and the epoch past every earlier one.
//!
//! Where a run has several records (a worker whose lease was lost meanwhile
//! wrote one too, and the ledger discarded its report), the record of the
//! latest attempt is the run's: the earlier lease had ended when a later
//! one was granted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cohort_artifacts::ArtifactsUrl;
use cohort_core::lifecycle;
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::{AttemptRecord, Rebuild, RestoredResult, RestoredRun};
use cohort_proto::v1 as pb;
use cohort_worker::journal::{self, Entry};
use cohort_worker::record::{NOT_DISCLOSED, RecordedAttempt, RunRecord};

use crate::ServeError;
use crate::local::{self, Frozen, StoreConfig};

/// New tokens start this far past the highest one the evidence names: room
/// for the leases it does not name (granted and never reported), however
/// many recoveries moved the counter by 2^32 meanwhile.
const TOKEN_MARGIN: u64 = 1 << 40;

/// What the evidence outside the ledger shows of a cohort.
#[derive(Debug, Default)]
pub struct Evidence {
    /// Where run records were looked for.
    pub record_dirs: Vec<PathBuf>,
    /// Run records of this manifest found (several for a run count each).
    pub records: usize,
    /// Journals read, and the reports in them.
    pub journals: usize,
    pub journal_reports: usize,
    /// The runs the evidence shows started, by run id.
    pub runs: BTreeMap<String, RestoredRun>,
    /// The highest fencing token the journals name.
    pub max_token: u64,
    /// What was found and left out, for the operator (a record of a run
    /// the plan does not have, an unreadable journal entry).
    pub notes: Vec<String>,
}

/// A run's record candidates: the attempt number and the run.
type Candidate = (u32, RestoredRun);

impl Evidence {
    /// Reads the records and journals of the cohort in `frozen.dir`.
    /// Records come from a local store (the cohort's own, or `--artifacts
    /// file://...`); an `s3://` store cannot be listed from here.
    pub fn gather(frozen: &Frozen, store: &StoreConfig) -> Result<Evidence, ServeError> {
        let dirs = record_dirs(frozen, store)?;
        let plan = &frozen.manifest.order;
        let planned: std::collections::HashSet<&str> = plan.iter().map(String::as_str).collect();
        let mut evidence = Evidence { record_dirs: dirs.clone(), ..Evidence::default() };
        let mut best: BTreeMap<String, Candidate> = BTreeMap::new();
        for dir in &dirs {
            for (sha, path) in blobs(dir)? {
                let Ok(bytes) = std::fs::read(&path) else { continue };
                let Some(record) = run_record(&bytes, &frozen.manifest_sha256) else { continue };
                if !planned.contains(record.run_id.as_str()) {
                    evidence
                        .notes
                        .push(format!("record {sha} names run {} that the plan does not have", record.run_id));
                    continue;
                }
                evidence.records += 1;
                let candidate = (record.attempt, restored_from_record(&record, &sha));
                match best.get(&record.run_id) {
                    Some((n, _)) if *n >= candidate.0 => {}
                    _ => {
                        best.insert(record.run_id.clone(), candidate);
                    }
                }
            }
        }
        // The journals: results whose record is nowhere to read, and the
        // attempts of runs that have no record.
        let mut journaled: BTreeMap<String, Vec<AttemptRecord>> = BTreeMap::new();
        let root = frozen.dir.join(cohort_artifacts::STATE_DIR).join("journal");
        let journals = journal::read_all(&root).map_err(|source| ServeError::Read { path: root.clone(), source })?;
        evidence.journals = journals.len();
        for (dir, entries) in journals {
            evidence.journal_reports += entries.len();
            for entry in entries {
                match entry {
                    Entry::Attempt(a) => {
                        let Some(lease) = &a.lease else { continue };
                        evidence.max_token = evidence.max_token.max(lease.fencing_token);
                        if !planned.contains(lease.run_id.as_str()) {
                            continue;
                        }
                        match a.attempt.as_ref().and_then(|at| attempt_from_journal(at, &a.worker_id, lease)) {
                            Some(attempt) => journaled.entry(lease.run_id.clone()).or_default().push(attempt),
                            None => evidence.notes.push(format!(
                                "{}: an attempt of {} that cannot be read",
                                dir.display(),
                                lease.run_id
                            )),
                        }
                    }
                    Entry::Result(r) => {
                        let Some(lease) = &r.lease else { continue };
                        evidence.max_token = evidence.max_token.max(lease.fencing_token);
                        if !planned.contains(lease.run_id.as_str()) {
                            continue;
                        }
                        if let Some((_, run)) = best.get_mut(&lease.run_id) {
                            // The record's lease: its token makes the
                            // journal's replay a no-op, not a stale report.
                            let number = r.attempt.as_ref().map_or(0, |a| a.number);
                            let same = run.result.as_ref().is_some_and(|res| res.record_sha256 == r.record_sha256);
                            if let (true, Some(last)) = (same, run.attempts.last_mut())
                                && (number == 0 || number == last.attempt)
                            {
                                last.token = lease.fencing_token;
                            }
                            continue;
                        }
                        match result_from_journal(&r, lease) {
                            Some(run) => {
                                let number = run.attempts.last().map_or(0, |a| a.attempt);
                                best.insert(lease.run_id.clone(), (number, run));
                            }
                            None => evidence.notes.push(format!(
                                "{}: a result of {} that cannot be read",
                                dir.display(),
                                lease.run_id
                            )),
                        }
                    }
                }
            }
        }
        let max_attempts = frozen.cohort.config.retry.max_attempts;
        for (run_id, attempts) in journaled {
            if let Some((_, run)) = best.get_mut(&run_id) {
                // The record lists them: the journal gives their tokens.
                for journaled in attempts {
                    if let Some(a) = run
                        .attempts
                        .iter_mut()
                        .find(|a| a.attempt == journaled.attempt && a.class == journaled.class && a.token == 0)
                    {
                        a.token = journaled.token;
                    }
                }
                continue;
            }
            evidence.runs.insert(run_id.clone(), restored_from_attempts(run_id, attempts, max_attempts));
        }
        evidence.runs.extend(best.into_iter().map(|(id, (_, run))| (id, run)));
        Ok(evidence)
    }

    /// Whether anything shows the cohort ran: a record of its manifest or
    /// a journaled report.
    pub fn any(&self) -> bool {
        self.records > 0 || self.journal_reports > 0
    }

    /// What it rebuilds, at `now_ms`.
    pub fn rebuild(&self, now_ms: i64) -> Rebuild {
        let window_start_ms =
            self.runs.values().flat_map(|r| r.attempts.iter().map(|a| a.started_ms)).filter(|ms| *ms > 0).min();
        Rebuild {
            window_start_ms,
            token_floor: self.max_token.saturating_add(TOKEN_MARGIN),
            // Past any count of recoveries: live workers replay what their
            // journals hold, which the rebuilt ledger takes as a no-op.
            epoch: u64::try_from(now_ms / 1000).unwrap_or(1).max(2),
            runs: self.runs.values().cloned().collect(),
        }
    }

    /// The evidence in one line, for the refusal of a lost ledger.
    pub fn describe(&self) -> String {
        format!(
            "{} run records of its manifest in {} and {} reports in {} workers' journals",
            self.records,
            self.record_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" and "),
            self.journal_reports,
            self.journals
        )
    }
}

/// What `cohort ledger rebuild` did.
#[derive(Debug)]
pub struct RebuildSummary {
    pub cohort: String,
    pub planned: usize,
    /// Runs rebuilt final, and of those with a record.
    pub finals: usize,
    pub with_record: usize,
    /// Runs rebuilt pending with attempts (from the journals).
    pub started_pending: usize,
    pub window_start_ms: Option<i64>,
    pub evidence: String,
    pub notes: Vec<String>,
}

impl RebuildSummary {
    pub fn describe(&self) -> String {
        let window = match self.window_start_ms {
            Some(ms) => format!("the collection window opened at {} as before", cohort_worker::record::rfc3339_ms(ms)),
            None => "no run had started: the window opens at the first lease".to_owned(),
        };
        let mut text = format!(
            "ledger of cohort {:?} rebuilt from {}: {} of {} runs final ({} with a run record, never run again), {} \
             pending with their attempts, the other {} pending; {window}. Start the coordinator and workers again \
             (docs/operations.md, \"A lost ledger\").\n",
            self.cohort,
            self.evidence,
            self.finals,
            self.planned,
            self.with_record,
            self.started_pending,
            self.planned - self.finals - self.started_pending,
        );
        for note in &self.notes {
            text.push_str(&format!("note: {note}\n"));
        }
        text
    }
}

/// Rebuilds the ledger `store` names for the frozen cohort from the
/// evidence ([`Evidence::gather`]); refuses a ledger that holds the cohort
/// ([`cohort_ledger::LedgerError::NotEmpty`]).
pub async fn rebuild(frozen: &Frozen, store: &StoreConfig, now_ms: i64) -> Result<RebuildSummary, ServeError> {
    let ledger = local::open_ledger(frozen, store).await?;
    let evidence = Evidence::gather(frozen, store)?;
    let header = cohort_ledger::PlanHeader::for_cohort(&frozen.cohort.config, &frozen.manifest_sha256);
    let questions: Vec<(String, String)> =
        frozen.cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let rebuilt = evidence.rebuild(now_ms);
    ledger.rebuild(&header, &questions, &frozen.manifest.order, &rebuilt, now_ms).await?;
    local::write_seed_marker(frozen)?;
    let finals = rebuilt.runs.iter().filter(|r| r.result.is_some()).count();
    let with_record =
        rebuilt.runs.iter().filter(|r| r.result.as_ref().is_some_and(|r| !r.record_sha256.is_empty())).count();
    tracing::warn!(cohort = %frozen.cohort.config.name, finals, "ledger rebuilt from the run records and the workers' journals");
    Ok(RebuildSummary {
        cohort: frozen.cohort.config.name.clone(),
        planned: frozen.manifest.order.len(),
        finals,
        with_record,
        started_pending: rebuilt.runs.len() - finals,
        window_start_ms: rebuilt.window_start_ms,
        evidence: evidence.describe(),
        notes: evidence.notes,
    })
}

/// Where run records are read: the local artifact store and the spool.
fn record_dirs(frozen: &Frozen, store: &StoreConfig) -> Result<Vec<PathBuf>, ServeError> {
    let state = frozen.dir.join(cohort_artifacts::STATE_DIR);
    let root = match &store.artifacts {
        None => state.join("artifacts"),
        Some(ArtifactsUrl::Local(root)) => root.clone(),
        Some(ArtifactsUrl::S3 { .. }) => return Err(ServeError::RebuildFromS3),
    };
    Ok(vec![root, state.join("spool")])
}

/// Every blob under a store's root (`ROOT/sha256/ab/<sha>`), by name.
fn blobs(root: &Path) -> Result<Vec<(String, PathBuf)>, ServeError> {
    let top = root.join("sha256");
    let read = |path: &Path| {
        std::fs::read_dir(path).map(Some).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(None),
            _ => Err(ServeError::Read { path: path.to_owned(), source: e }),
        })
    };
    let mut found = Vec::new();
    let Some(folders) = read(&top)? else { return Ok(found) };
    for folder in folders.flatten() {
        let Some(files) = read(&folder.path())? else { continue };
        for file in files.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            // Temporary files of an interrupted write start with a dot.
            if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                found.push((name, file.path()));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The blob as a run record of `manifest`, if it is one.
fn run_record(bytes: &[u8], manifest: &str) -> Option<RunRecord> {
    // Outputs and captured pages are most blobs: skip what cannot be one.
    if bytes.first() != Some(&b'{') || !bytes.windows(manifest.len()).any(|w| w == manifest.as_bytes()) {
        return None;
    }
    let record: RunRecord = serde_json::from_slice(bytes).ok()?;
    (record.manifest_sha256 == manifest).then_some(record)
}

fn unix_ms(text: &str) -> i64 {
    humantime::parse_rfc3339(text)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

fn version(label: &str) -> Option<String> {
    (!label.is_empty() && label != NOT_DISCLOSED).then(|| label.to_owned())
}

fn class_named(name: &str) -> Option<AttemptClass> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

fn attempt_from_record(a: &RecordedAttempt) -> Option<AttemptRecord> {
    Some(AttemptRecord {
        class: class_named(&a.class)?,
        http_status: a.http_status.unwrap_or(0),
        detail: a.detail.clone(),
        started_ms: unix_ms(&a.started_at),
        ended_ms: unix_ms(&a.ended_at),
        observed_version: version(&a.observed_version),
        worker: a.worker.clone(),
        attempt: a.attempt,
        token: 0,
        retry_after_ms: None,
    })
}

/// A run as its record shows it: final, with every attempt the record lists.
fn restored_from_record(record: &RunRecord, sha: &str) -> RestoredRun {
    let mut attempts: Vec<AttemptRecord> = record.attempts.iter().filter_map(attempt_from_record).collect();
    if attempts.is_empty() {
        // A record older than version 3 lists no attempts: its own is the one known.
        attempts.push(AttemptRecord {
            class: record.attempt_class,
            http_status: 0,
            detail: String::new(),
            started_ms: unix_ms(&record.started_at),
            ended_ms: unix_ms(&record.ended_at),
            observed_version: version(&record.observed_version),
            worker: String::new(),
            attempt: record.attempt,
            token: 0,
            retry_after_ms: None,
        });
    }
    RestoredRun {
        run_id: record.run_id.clone(),
        attempts,
        result: Some(RestoredResult {
            outcome: record.outcome,
            reason: record.failure_reason.clone().unwrap_or_default(),
            record_sha256: sha.to_owned(),
            observed_version: version(&record.observed_version),
        }),
    }
}

fn attempt_from_journal(a: &pb::Attempt, worker: &str, lease: &pb::LeaseRef) -> Option<AttemptRecord> {
    Some(AttemptRecord {
        class: cohort_proto::convert::class_from_pb(a.class).ok()?,
        http_status: u16::try_from(a.http_status).unwrap_or(0),
        detail: a.detail.clone(),
        started_ms: a.started_unix_ms,
        ended_ms: a.ended_unix_ms,
        observed_version: version(&a.observed_version),
        worker: worker.to_owned(),
        attempt: a.number,
        token: lease.fencing_token,
        retry_after_ms: (a.retry_after_ms > 0).then_some(a.retry_after_ms),
    })
}

/// A run whose result a journal holds but whose record is nowhere to read
/// (a store that cannot be listed): final as the worker reported it, once
/// its record was durable.
fn result_from_journal(r: &pb::ReportResultRequest, lease: &pb::LeaseRef) -> Option<RestoredRun> {
    let attempt = attempt_from_journal(r.attempt.as_ref()?, &r.worker_id, lease)?;
    Some(RestoredRun {
        run_id: lease.run_id.clone(),
        attempts: vec![attempt],
        result: Some(RestoredResult {
            outcome: cohort_proto::convert::outcome_from_pb(r.outcome).ok()?,
            reason: r.reason.clone(),
            record_sha256: r.record_sha256.clone(),
            observed_version: version(&r.observed_version),
        }),
    })
}

/// A run with journaled attempts and no record: its attempts, once each and
/// in number order, and its state as the retry policy leaves it (pending to
/// be tried again, or final when the last attempt ends it).
fn restored_from_attempts(run_id: String, mut attempts: Vec<AttemptRecord>, max_attempts: u32) -> RestoredRun {
    attempts.sort_by_key(|a| (a.attempt, a.token, a.started_ms));
    attempts.dedup_by(|a, b| a.token == b.token && a.class == b.class && a.started_ms == b.started_ms);
    for (i, a) in attempts.iter_mut().enumerate() {
        if a.attempt == 0 {
            a.attempt = u32::try_from(i + 1).unwrap_or(u32::MAX);
        }
    }
    let counted = attempts.iter().filter(|a| !lifecycle::excused(a.class)).count();
    let result = attempts.last().and_then(|last| {
        let retried = lifecycle::run_retryable(last.class) && (counted as u64) < u64::from(max_attempts);
        if lifecycle::excused(last.class) || retried {
            return None;
        }
        let outcome: Outcome = lifecycle::final_outcome_of(last.class);
        Some(RestoredResult {
            outcome,
            reason: format!("{} after {counted} attempts (rebuilt from a worker's journal)", last.class),
            record_sha256: String::new(),
            observed_version: None,
        })
    });
    RestoredRun { run_id, attempts, result }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journaled(n: u32, class: AttemptClass, token: u64) -> AttemptRecord {
        AttemptRecord {
            class,
            http_status: 0,
            detail: String::new(),
            started_ms: i64::from(n) * 100,
            ended_ms: i64::from(n) * 100 + 1,
            observed_version: None,
            worker: "w1".into(),
            attempt: n,
            token,
            retry_after_ms: None,
        }
    }

    /// Proves a run known from journaled attempts only keeps each attempt
    /// once, in number order (a journal replayed twice holds it twice), and
    /// is pending while the retry policy would try it again, final as the
    /// policy ends it otherwise.
    #[test]
    fn journaled_attempts_give_the_runs_state_by_the_retry_policy() {
        let twice = vec![
            journaled(2, AttemptClass::RateLimited, 9),
            journaled(1, AttemptClass::ServerError, 5),
            journaled(1, AttemptClass::ServerError, 5),
        ];
        let run = restored_from_attempts("q1:a:1".into(), twice, 3);
        let numbers: Vec<u32> = run.attempts.iter().map(|a| a.attempt).collect();
        assert_eq!(numbers, [1, 2]);
        assert_eq!(run.result, None, "two outages of three allowed: tried again");

        let spent = vec![journaled(1, AttemptClass::ServerError, 5), journaled(2, AttemptClass::ServerError, 9)];
        let run = restored_from_attempts("q1:a:1".into(), spent, 2);
        assert_eq!(run.result.map(|r| r.outcome), Some(Outcome::Unavailable));

        let quota = vec![journaled(1, AttemptClass::QuotaExhausted, 5)];
        let run = restored_from_attempts("q1:a:1".into(), quota, 3);
        assert_eq!(run.result.map(|r| r.outcome), Some(lifecycle::final_outcome_of(AttemptClass::QuotaExhausted)));

        let paused = vec![journaled(1, AttemptClass::AuthError, 5)];
        assert_eq!(restored_from_attempts("q1:a:1".into(), paused, 1).result, None, "an excused attempt waits");
    }
}
