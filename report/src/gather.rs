//! Reading a cohort for a report: the frozen files, the ledger's runs and
//! attempts, and each run's record from the artifact store, turned into one
//! [`RunView`] per planned run plus the per-claim lines of `claims.jsonl`,
//! the trace lines of `judge_traces.jsonl` and the judge's calls (prompt
//! and raw reply) of `judge_calls.jsonl`.
//!
//! Records are read in chunks of [`CHUNK_RUNS`] runs in planned order.
//! Within a chunk, every run's record is fetched, hash-checked and parsed
//! on scoped threads (one per core, each over a part of consecutive runs),
//! each into a [`RunView`], its lines appended to its part's buffer of
//! each file; the parts' buffers are then handed to the writer in planned
//! order, so the files are the same for any number of threads.
//! Parsing borrows from the record's bytes and reads only the fields a
//! report needs ([`LeanRecord`]; trace records stay raw JSON, compacted to
//! one line), and the whole [`RunRecord`] is parsed only for the runs whose
//! [`DrillDown`] fits the page's budget. Memory therefore grows with the
//! number of runs, not of claims.
//!
//! The ledger is the truth about outcomes; a record is the truth about
//! what was said. A record whose bytes no longer match its hash is an
//! error ([`ReportError::CorruptRecord`]): a report is never computed from
//! tampered data. A record that is missing is a note, and its run counts
//! as completed but not scored.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cohort_artifacts::ArtifactStore;
use cohort_core::ValidatedCohort;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::manifest::Manifest;
use cohort_core::scoring::{UnjudgedReason, VerdictLabel, judge_sentence_into, strip_markers};
use cohort_ledger::{AttemptRecord, Ledger, RunRow, RunStateKind, Status, split_run_id};
use cohort_records::passes::{PassClaim, PassStore, PassVerdict};
use cohort_records::record::{NOT_DISCLOSED, RunRecord};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::ReportError;
use crate::model::{DrillAttempt, DrillClaim, DrillDown, DrillEvidence, RunScoreView, RunView};

/// How many bytes of drill-down (prompts, outputs, passages) the HTML page
/// holds at most; runs past it are listed without one, and the page says so.
pub const DRILL_DOWN_BUDGET_BYTES: usize = 48 * 1024 * 1024;

/// How the note about the page's drill-down cut begins: a note of the page,
/// not a number of the cohort (`cohort verify` reads no drill-downs and
/// takes it as stored).
pub const DRILL_DOWN_NOTE: &str = "the page holds drill-downs";

/// Runs read per chunk: enough to keep every core busy, few enough that a
/// chunk's lines stay a few megabytes.
pub const CHUNK_RUNS: usize = 256;

/// The cohort as frozen: what every report starts from.
#[derive(Debug, Clone)]
pub struct FrozenCohort {
    pub cohort: ValidatedCohort,
    pub manifest: Manifest,
    pub manifest_sha256: String,
    /// The human review imported for the cohort (`review::load`), when
    /// there is one: the report's review section is computed from it.
    pub review: Option<crate::review::ReviewInput>,
    /// The cohort declares a human review, so a report is final only with
    /// an adjudicated one (`compute::publication_state`). Set by the caller:
    /// a `[review]` section in the config when it has one, else a review
    /// was exported for the cohort (`review::declared`).
    pub review_declared: bool,
}

/// Where the claim and trace lines go while records are read: whole
/// JSON lines, newline included, in planned order, handed over by value so
/// that a sink may write them on another thread.
pub trait LineSink {
    fn claims(&mut self, lines: Vec<u8>) -> Result<(), ReportError>;
    fn traces(&mut self, lines: Vec<u8>) -> Result<(), ReportError>;
    /// Lines of `sources.jsonl`.
    fn sources(&mut self, lines: Vec<u8>) -> Result<(), ReportError>;
    /// Lines of `judge_calls.jsonl` ([`JudgeCallLine`]).
    fn calls(&mut self, lines: Vec<u8>) -> Result<(), ReportError>;
}

/// A sink that drops every line (`cohort verify` needs only the numbers).
#[derive(Debug, Default)]
pub struct NoLines;

impl LineSink for NoLines {
    fn claims(&mut self, _: Vec<u8>) -> Result<(), ReportError> {
        Ok(())
    }
    fn traces(&mut self, _: Vec<u8>) -> Result<(), ReportError> {
        Ok(())
    }
    fn sources(&mut self, _: Vec<u8>) -> Result<(), ReportError> {
        Ok(())
    }
    fn calls(&mut self, _: Vec<u8>) -> Result<(), ReportError> {
        Ok(())
    }
}

/// One line of `judge_calls.jsonl` (docs/report.md): one upstream call of
/// the judge for one run, the prompt as sent and the raw reply
/// (`cohort_records::score::JudgeCall`, as the record or the pass keeps
/// it, under `call`).
#[derive(Debug, Serialize)]
pub struct JudgeCallLine<'a, C: Serialize> {
    pub kind: &'static str,
    pub run_id: &'a str,
    /// The judging pass the call was made for; `None`: the run's own
    /// (inline) judging, as its record keeps it.
    pub pass: Option<&'a str>,
    /// The call's place among the run's calls (0-based).
    pub call_index: usize,
    pub call: C,
}

/// The `kind` of a `judge_calls.jsonl` line.
pub const JUDGE_CALL_KIND: &str = "judge_call";

/// One line of `claims.jsonl` (docs/report.md): the run's fields, then
/// the claim's. In two halves so that [`ClaimLines`] serializes the run's
/// half once per run, not once per claim (the same bytes: a test checks).
#[derive(Debug, Serialize)]
pub struct ClaimLine<'a> {
    #[serde(flatten)]
    pub run: ClaimRunFields<'a>,
    #[serde(flatten)]
    pub claim: ClaimFields<'a>,
}

/// The fields of a claim line that are its run's.
#[derive(Debug, Serialize)]
pub struct ClaimRunFields<'a> {
    pub kind: &'static str,
    pub run_id: &'a str,
    pub question_id: &'a str,
    pub category: &'a str,
    pub arm: &'a str,
}

/// The fields of a claim line that are the claim's own.
#[derive(Debug, Serialize)]
pub struct ClaimFields<'a> {
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

/// Writes one run's claim lines: `serde_json::to_writer` of each
/// [`ClaimLine`], with the run's half serialized once (a run's 50 claims
/// repeat its id, question, category and arm; escaping them 50 times was a
/// tenth of reading a record).
struct ClaimLines {
    /// `{"kind":...,"arm":"..."` without its closing brace.
    run_prefix: Vec<u8>,
}

impl ClaimLines {
    fn new(run: &ClaimRunFields<'_>) -> Result<ClaimLines, serde_json::Error> {
        let mut run_prefix = serde_json::to_vec(run)?;
        run_prefix.pop(); // the closing '}'
        Ok(ClaimLines { run_prefix })
    }

    /// Appends the line of `claim`, newline included.
    fn push(&self, out: &mut Vec<u8>, claim: &ClaimFields<'_>) -> Result<(), serde_json::Error> {
        out.extend_from_slice(&self.run_prefix);
        let start = out.len();
        serde_json::to_writer(&mut *out, claim)?;
        // The claim's object opens with '{': it continues the run's.
        out[start] = b',';
        out.push(b'\n');
        Ok(())
    }
}

/// One line of `sources.jsonl` (docs/report.md): one cited source of one
/// scored output, a distinct normalised URL of its reference table, with
/// what its capture found.
#[derive(Debug, Serialize)]
pub struct SourceLine<'a> {
    pub kind: &'static str,
    pub run_id: &'a str,
    pub question_id: &'a str,
    pub category: &'a str,
    pub arm: &'a str,
    /// The normalised URL.
    pub url: Option<&'a str>,
    /// SHA-256 of the normalised URL: what makes sources distinct, kept
    /// when a redacted report leaves the URL out.
    pub url_sha256: String,
    /// The reference indices of the output that name it.
    pub indices: &'a [u32],
    /// `accessible`, `inaccessible` or `uncaptured`.
    pub status: &'static str,
    pub http_status: Option<u16>,
    /// When the capture shown was made (RFC 3339 UTC).
    pub accessed_at: Option<&'a str>,
    /// The page's publication date, from its metadata, when it gave one.
    pub published_at: Option<&'a str>,
    /// Why the capture failed, by class (`non_success`, `timeout`...).
    pub failure: Option<&'a str>,
}

/// The source status words of `sources.jsonl`.
pub const SOURCE_ACCESSIBLE: &str = "accessible";
pub const SOURCE_INACCESSIBLE: &str = "inaccessible";
pub const SOURCE_UNCAPTURED: &str = "uncaptured";

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
    /// The judging pass the verdicts came from; `None`: each record's own.
    pub pass: Option<cohort_records::passes::PassConfig>,
    /// The distinct normalised URLs the scored outputs cite, per arm and
    /// category (the unique-source counts).
    pub source_urls: BTreeMap<String, BTreeMap<String, std::collections::BTreeSet<String>>>,
}

// === the fields of a run record a report reads, borrowed from its bytes ===
// (the format is `cohort_records::record::RunRecord`, docs/records.md; the
// tests parse real records both ways)

#[derive(Deserialize)]
struct LeanRecord<'a> {
    #[serde(borrow)]
    run_id: Cow<'a, str>,
    #[serde(borrow)]
    question_id: Cow<'a, str>,
    #[serde(borrow)]
    arm: Cow<'a, str>,
    #[serde(default)]
    simulated: bool,
    #[serde(borrow, default)]
    observed_version: Cow<'a, str>,
    cost: Option<f64>,
    #[serde(borrow)]
    currency: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    manual: Option<LeanManual<'a>>,
    #[serde(borrow)]
    scoring: Option<LeanScore<'a>>,
    #[serde(borrow, default)]
    scoring_error: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct LeanManual<'a> {
    #[serde(borrow, default)]
    plan: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    region: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    credits_debited: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct LeanScore<'a> {
    #[serde(borrow)]
    report: LeanReport<'a>,
    #[serde(borrow)]
    judge: Option<LeanJudge<'a>>,
    #[serde(borrow, default)]
    judge_traces: Vec<&'a RawValue>,
    /// Kept raw: copied, compacted, into `judge_calls.jsonl`.
    #[serde(borrow, default)]
    judge_calls: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    captures: Vec<LeanCapture<'a>>,
}

#[derive(Deserialize)]
struct LeanCapture<'a> {
    #[serde(borrow)]
    url: Cow<'a, str>,
    http_status: Option<u16>,
    accessible: bool,
    #[serde(borrow, default)]
    accessed_at: Cow<'a, str>,
    #[serde(borrow, default)]
    published_at: Option<Cow<'a, str>>,
    #[serde(default)]
    failure: Option<cohort_records::capture::CaptureFailure>,
}

#[derive(Deserialize)]
struct LeanReference<'a> {
    index: u32,
    #[serde(borrow, default)]
    url: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct LeanReport<'a> {
    #[serde(default)]
    format: Option<cohort_core::scoring::ReportFormat>,
    metrics: LeanMetrics,
    #[serde(borrow)]
    claims: Vec<LeanClaim<'a>>,
    #[serde(borrow, default)]
    references: Vec<LeanReference<'a>>,
}

#[derive(Deserialize)]
struct LeanMetrics {
    total_citations: u32,
    unresolved_citations: u32,
    uncited_assertive_sentences: u32,
    contradictions_surfaced: u32,
}

#[derive(Deserialize)]
struct LeanClaim<'a> {
    id: u32,
    #[serde(borrow)]
    text: Cow<'a, str>,
    cited: Vec<u32>,
    line: u32,
    verdict: Option<VerdictLabel>,
    unjudged_reason: Option<UnjudgedReason>,
}

#[derive(Deserialize)]
struct LeanJudge<'a> {
    #[serde(borrow, default)]
    served_models: Vec<Cow<'a, str>>,
    #[serde(default)]
    simulated: bool,
}

/// The fields of a seed-000 trace record that tie it to its claim.
#[derive(Deserialize)]
struct TraceKey<'a> {
    #[serde(borrow)]
    claim_text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    judge_model: Option<Cow<'a, str>>,
    #[serde(default)]
    simulated: bool,
}

/// The lines of consecutive runs, in planned order, for each file: one
/// per part of a chunk (one thread's runs), handed to the sink whole, so
/// that each file gets a few large writes per chunk rather than four small
/// buffers per run to allocate, copy into the file's buffer and free.
#[derive(Default)]
struct Lines {
    claims: Vec<u8>,
    traces: Vec<u8>,
    sources: Vec<u8>,
    calls: Vec<u8>,
}

impl Lines {
    /// Empty buffers with room for `sizes` and a margin: a part's
    /// buffers are sized from the largest part so far (the parts of one
    /// cohort are about the same size), so that they rarely grow, and never
    /// by copying megabytes over and over.
    fn with_room(sizes: LineSizes) -> Lines {
        let room = |n: usize| n + n / 8;
        let [claims, traces, sources, calls] = sizes.0.map(|n| Vec::with_capacity(room(n)));
        Lines { claims, traces, sources, calls }
    }

    fn sizes(&self) -> LineSizes {
        LineSizes([self.claims.len(), self.traces.len(), self.sources.len(), self.calls.len()])
    }

    /// Hands every file's lines to `sink`.
    fn send(self, sink: &mut dyn LineSink) -> Result<(), ReportError> {
        sink.claims(self.claims)?;
        sink.traces(self.traces)?;
        sink.sources(self.sources)?;
        sink.calls(self.calls)
    }
}

/// The bytes of a part's lines per file (claims, traces, sources, calls).
#[derive(Clone, Copy, Default)]
struct LineSizes([usize; 4]);

impl LineSizes {
    /// The larger of each file's size.
    fn max(self, other: LineSizes) -> LineSizes {
        LineSizes(std::array::from_fn(|i| self.0[i].max(other.0[i])))
    }
}

/// One part's runs and their lines, as [`process_parallel`] gives them.
struct PartOut {
    runs: Vec<Result<RunOut, ReportError>>,
    lines: Lines,
}

/// What processing one run gave, before it is merged in planned order.
struct RunOut {
    view: RunView,
    /// The distinct normalised URLs it cites.
    source_urls: Vec<String>,
    /// Claims judged per served model.
    served: BTreeMap<String, u64>,
    judge_simulated: bool,
    missing_record: bool,
    /// Built only while the page's drill-down budget lasts.
    drill: Option<DrillDown>,
}

/// Reads every planned run: ledger row, attempts, record.
pub async fn gather(
    frozen: &FrozenCohort,
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    sink: &mut dyn LineSink,
    with_drill_down: bool,
    pass: Option<&PassStore>,
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
        pass: pass.map(|p| p.config().clone()),
        source_urls: BTreeMap::new(),
    };
    let threads = std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 8);
    let mut drill_bytes = 0usize;
    let mut drill_cut = 0u64;
    let mut missing_records = 0u64;
    let (mut ledger_time, mut records_time, mut merge_time) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let chunks: Vec<&[RunRow]> = rows.chunks(CHUNK_RUNS).collect();
    // The next chunk's attempts are read while this chunk's records are:
    // the ledger's latency (a round trip per chunk on Redis, a query per
    // run on SQLite) hides behind the records' CPU and files.
    let mut next = chunks.first().map(|c| AttemptsPrefetch::start(ledger, c));
    let mut part_size = LineSizes::default();
    for (k, chunk) in chunks.iter().copied().enumerate() {
        let started = std::time::Instant::now();
        let mut inputs = Vec::with_capacity(chunk.len());
        let read = match next.take() {
            Some(prefetch) => prefetch.join().await?,
            None => Vec::new(),
        };
        next = chunks.get(k + 1).map(|c| AttemptsPrefetch::start(ledger, c));
        let mut attempts_read = read.into_iter();
        for row in chunk {
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
            let attempts = if row.attempts > 0 { attempts_read.next().unwrap_or_default() } else { Vec::new() };
            let by_class = out.attempts_by_class.entry(arm.id.clone()).or_default();
            for a in &attempts {
                *by_class.entry(a.class.as_str().to_owned()).or_default() += 1;
            }
            inputs.push(RunInput { row, question_id, category, arm, repeat, attempts });
        }
        let with_drill = with_drill_down && drill_bytes < DRILL_DOWN_BUDGET_BYTES;
        ledger_time += started.elapsed();
        let started = std::time::Instant::now();
        let parts = blocking(|| process_parallel(&inputs, artifacts, pass, with_drill, threads, &part_size));
        records_time += started.elapsed();
        let started = std::time::Instant::now();
        let mut runs = Vec::with_capacity(inputs.len());
        for part in parts {
            for run in part.runs {
                // The first error in planned order stops the report.
                runs.push(run?);
            }
            part_size = part_size.max(part.lines.sizes());
            part.lines.send(sink)?;
        }
        for (input, run) in inputs.iter().zip(runs) {
            if !run.source_urls.is_empty() {
                let urls = out.source_urls.entry(input.arm.id.clone()).or_default();
                urls.entry(input.category.to_owned()).or_default().extend(run.source_urls);
            }
            for (model, n) in run.served {
                *out.served_models.entry(model).or_default() += n;
            }
            out.judge_simulated |= run.judge_simulated;
            missing_records += u64::from(run.missing_record);
            if let Some(drill) = run.drill {
                if drill_bytes < DRILL_DOWN_BUDGET_BYTES {
                    drill_bytes += crate::html::drill_down_bytes(&run.view, &drill);
                    out.drill.insert(input.row.run_id.clone(), drill);
                } else {
                    drill_cut += 1;
                }
            } else if with_drill_down && (!input.row.record_sha256.is_empty() || !input.attempts.is_empty()) {
                drill_cut += 1;
            }
            out.runs.push(run.view);
        }
        merge_time += started.elapsed();
    }
    tracing::debug!(
        ledger_ms = ledger_time.as_millis() as u64,
        records_ms = records_time.as_millis() as u64,
        merge_ms = merge_time.as_millis() as u64,
        threads,
        "gather"
    );
    if missing_records > 0 {
        out.notes.push(format!(
            "{missing_records} run record(s) named by the ledger are missing from the artifact store: \
             those runs count as completed but not scored"
        ));
    }
    if drill_cut > 0 {
        out.notes.push(format!(
            "{DRILL_DOWN_NOTE} for the first {} runs in planned order ({} MiB budget); \
             {drill_cut} more are in runs.csv, claims.jsonl and judge_traces.jsonl",
            out.drill.len(),
            DRILL_DOWN_BUDGET_BYTES / (1024 * 1024)
        ));
    }
    Ok(out)
}

/// One chunk's attempts, read in bulk (one round trip on Redis, not one
/// per run) on a task of their own, so the read overlaps the previous
/// chunk's records. Owned: awaited by [`AttemptsPrefetch::join`], aborted
/// when dropped unawaited (the report stopped on an error).
struct AttemptsPrefetch {
    task: Option<tokio::task::JoinHandle<Result<Vec<Vec<AttemptRecord>>, cohort_ledger::LedgerError>>>,
}

impl AttemptsPrefetch {
    fn start(ledger: &Arc<dyn Ledger>, chunk: &[RunRow]) -> AttemptsPrefetch {
        let ids: Vec<String> = chunk.iter().filter(|r| r.attempts > 0).map(|r| r.run_id.clone()).collect();
        let ledger = Arc::clone(ledger);
        let task = tokio::spawn(async move {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            ledger.attempts_of(&ids).await
        });
        AttemptsPrefetch { task: Some(task) }
    }

    async fn join(mut self) -> Result<Vec<Vec<AttemptRecord>>, ReportError> {
        let Some(task) = self.task.take() else { return Ok(Vec::new()) };
        match task.await {
            Ok(read) => Ok(read?),
            Err(e) => Err(ReportError::Inconsistent(format!("the attempts reader failed: {e}"))),
        }
    }
}

impl Drop for AttemptsPrefetch {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Runs CPU-bound `f` from async code: in place on a multi-thread runtime
/// (its other tasks, the next chunk's attempts among them, move to the
/// other workers meanwhile), directly on a current-thread one.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// One run's ledger side, ready for its record.
struct RunInput<'a> {
    row: &'a RunRow,
    question_id: &'a str,
    category: &'a str,
    arm: &'a ArmConfig,
    repeat: u32,
    attempts: Vec<AttemptRecord>,
}

/// [`process_run`] over `inputs` on up to `threads` scoped threads, each
/// over a part of consecutive runs: the parts in order, each with its
/// runs' lines (buffers sized for `sizes`).
fn process_parallel(
    inputs: &[RunInput<'_>],
    artifacts: &ArtifactStore,
    pass: Option<&PassStore>,
    with_drill: bool,
    threads: usize,
    sizes: &LineSizes,
) -> Vec<PartOut> {
    let part = |runs: &[RunInput<'_>]| {
        let mut lines = Lines::with_room(*sizes);
        let runs = runs.iter().map(|i| process_run(i, artifacts, pass, with_drill, &mut lines)).collect();
        PartOut { runs, lines }
    };
    if threads <= 1 || inputs.len() < 2 {
        return vec![part(inputs)];
    }
    let per = inputs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = inputs.chunks(per).map(|runs| scope.spawn(move || part(runs))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| PartOut {
                    runs: vec![Err(ReportError::Inconsistent("a record-reading thread panicked".to_owned()))],
                    lines: Lines::default(),
                })
            })
            .collect()
    })
}

/// Fetches, checks and reads one run's record (and, with `with_drill`,
/// builds its drill-down from the whole record).
fn process_run(
    input: &RunInput<'_>,
    artifacts: &ArtifactStore,
    pass: Option<&PassStore>,
    with_drill: bool,
    lines: &mut Lines,
) -> Result<RunOut, ReportError> {
    let row = input.row;
    let corrupt =
        |why: String| ReportError::CorruptRecord { run_id: row.run_id.clone(), sha256: row.record_sha256.clone(), why };
    let bytes = if row.record_sha256.is_empty() {
        None
    } else {
        match artifacts.get(&row.record_sha256) {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(corrupt("its bytes no longer match their SHA-256 (edited or damaged)".to_owned()));
            }
            Err(e) => return Err(ReportError::io(&format!("artifact {}", row.record_sha256), e)),
        }
    };
    let missing_record = !row.record_sha256.is_empty() && bytes.is_none();
    let mut record = match &bytes {
        Some(b) => Some(serde_json::from_slice::<LeanRecord<'_>>(b).map_err(|e| corrupt(e.to_string()))?),
        None => None,
    };
    // With a judging pass, its verdicts replace the record's own.
    let pass_view = match (pass, &mut record) {
        (Some(store), Some(record)) => {
            let view = PassView::read(store, row)?;
            if let Some(score) = &mut record.scoring {
                for claim in &mut score.report.claims {
                    (claim.verdict, claim.unjudged_reason) = view.verdict(claim.id, &claim.cited);
                }
            }
            Some(view)
        }
        _ => None,
    };
    let mut run = RunOut {
        view: run_view(
            row,
            input.question_id,
            input.category,
            input.arm,
            input.repeat,
            &input.attempts,
            record.as_ref(),
        ),
        source_urls: Vec::new(),
        served: BTreeMap::new(),
        judge_simulated: false,
        missing_record,
        drill: None,
    };
    let mut claim_models = Vec::new();
    if let Some(record) = &record {
        if record.simulated {
            run.view.simulated = true;
        }
        if let Some(score) = &record.scoring {
            let models = with_drill.then_some(&mut claim_models);
            lines_of(record, score, input.category, &mut run, lines, models, pass_view.as_ref())
                .map_err(|e| corrupt(e.to_string()))?;
            sources_of(record, score, input.category, &mut run, lines, pass_view.as_ref())
                .map_err(|e| corrupt(e.to_string()))?;
            calls_of(record, score, lines, pass.zip(pass_view.as_ref())).map_err(|e| corrupt(e.to_string()))?;
        }
    }
    if with_drill && (bytes.is_some() || !input.attempts.is_empty()) {
        let full = match &bytes {
            Some(b) => Some(serde_json::from_slice::<RunRecord>(b).map_err(|e| corrupt(e.to_string()))?),
            None => None,
        };
        let full = match (full, &pass_view) {
            (Some(mut full), Some(view)) => {
                if let Some(score) = &mut full.scoring {
                    for claim in &mut score.report.claims {
                        (claim.verdict, claim.unjudged_reason) = view.verdict(claim.id, &claim.cited);
                        claim.judge_line = view.claims.get(&claim.id).and_then(|c| c.judge_line.clone());
                    }
                    if let Some(judge) = &mut score.judge {
                        judge.served_models = view.served_models();
                    }
                }
                Some(full)
            }
            (full, _) => full,
        };
        run.drill = Some(drill_down(&row.run_id, full.as_ref(), &input.attempts, &claim_models, artifacts));
    }
    Ok(run)
}

/// A record's claim lines and trace lines, and who judged each claim.
fn lines_of(
    record: &LeanRecord<'_>,
    score: &LeanScore<'_>,
    category: &str,
    run: &mut RunOut,
    lines: &mut Lines,
    mut claim_models: Option<&mut Vec<Option<String>>>,
    pass: Option<&PassView>,
) -> Result<(), serde_json::Error> {
    if score.judge.as_ref().is_some_and(|j| j.simulated) {
        run.judge_simulated = true;
    }
    if let Some(pass) = pass {
        for trace in &pass.traces {
            run.judge_simulated |= trace.get("simulated").and_then(serde_json::Value::as_bool) == Some(true);
            serde_json::to_writer(&mut lines.traces, trace)?;
            lines.traces.push(b'\n');
        }
    }
    let only_model = match score.judge.as_ref().map(|j| j.served_models.as_slice()) {
        Some([one]) if pass.is_none() => Some(one.as_ref()),
        _ => None,
    };
    // When one model served the whole run, every judged claim was judged by
    // it; otherwise each claim finds its model in its trace record, which
    // carries the claim's text without markers.
    let mut by_text: BTreeMap<Cow<'_, str>, Cow<'_, str>> = BTreeMap::new();
    if pass.is_none() {
        // Compacting never lengthens a trace.
        lines.traces.reserve(score.judge_traces.iter().map(|raw| raw.get().len() + 1).sum());
    }
    for raw in score.judge_traces.iter().filter(|_| pass.is_none()) {
        // (The run's judge summary says whether the judge was simulated, as
        // each of its traces does.)
        if only_model.is_none() {
            let key: TraceKey<'_> = serde_json::from_str(raw.get())?;
            run.judge_simulated |= key.simulated;
            if let (Some(text), Some(model)) = (key.claim_text, key.judge_model) {
                by_text.entry(text).or_insert(model);
            }
        }
        compact_json_into(raw.get(), &mut lines.traces);
        lines.traces.push(b'\n');
    }
    let mut served: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sentence = String::new();
    let claim_lines = ClaimLines::new(&ClaimRunFields {
        kind: "claim",
        run_id: &record.run_id,
        question_id: &record.question_id,
        category,
        arm: &record.arm,
    })?;
    // The run's prefix, about 110 bytes of fields and the claim's text per
    // line: one allocation for most runs.
    let text_bytes: usize = score.report.claims.iter().map(|c| c.text.len()).sum();
    lines.claims.reserve(text_bytes + score.report.claims.len() * (claim_lines.run_prefix.len() + 192));
    for claim in &score.report.claims {
        let status = claim_status(claim.verdict, claim.unjudged_reason, &claim.cited);
        let judged = matches!(status, ClaimStatus::Yes | ClaimStatus::No);
        let model: Option<&str> = if judged {
            // Records made before `judge_sentence` carry the plainly
            // stripped text.
            match (pass, only_model) {
                (Some(pass), _) => pass.claims.get(&claim.id).and_then(|c| c.judge_model.as_deref()),
                (None, Some(model)) => Some(model),
                (None, None) => {
                    judge_sentence_into(&claim.text, &mut sentence);
                    by_text
                        .get(sentence.as_str())
                        .or_else(|| by_text.get(strip_markers(&claim.text).trim()))
                        .map(AsRef::as_ref)
                }
            }
        } else {
            None
        };
        if let Some(m) = model {
            *served.entry(m).or_default() += 1;
        }
        let (status_text, reason, verdict) = match status {
            ClaimStatus::Yes => ("judged", None, Some("YES")),
            ClaimStatus::No => ("judged", None, Some("NO")),
            ClaimStatus::Uncited => ("unjudged", Some("uncited"), None),
            ClaimStatus::Unjudged(r) => ("unjudged", Some(r), None),
        };
        let fields = ClaimFields {
            claim_index: claim.id,
            text: &claim.text,
            line: claim.line,
            cited_indices: &claim.cited,
            status: status_text,
            unjudged_reason: reason,
            verdict,
            judge_model: model,
        };
        claim_lines.push(&mut lines.claims, &fields)?;
        if let Some(models) = claim_models.as_deref_mut() {
            models.push(model.map(str::to_owned));
        }
    }
    run.served = served.into_iter().map(|(m, n)| (m.to_owned(), n)).collect();
    Ok(())
}

/// A run's `judge_calls.jsonl` lines: the pass's calls when the report
/// uses a pass (its verdicts are the report's), else the record's own.
fn calls_of(
    record: &LeanRecord<'_>,
    score: &LeanScore<'_>,
    lines: &mut Lines,
    pass: Option<(&PassStore, &PassView)>,
) -> Result<(), serde_json::Error> {
    fn line<C: Serialize>(out: &mut Vec<u8>, line: &JudgeCallLine<'_, C>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(&mut *out, line)?;
        out.push(b'\n');
        Ok(())
    }
    let run_id = &record.run_id;
    match pass {
        Some((store, view)) => {
            let pass = Some(store.config().name.as_str());
            for (call_index, call) in view.calls.iter().enumerate() {
                line(&mut lines.calls, &JudgeCallLine { kind: JUDGE_CALL_KIND, run_id, pass, call_index, call })?;
            }
        }
        None => {
            let mut compact = Vec::new();
            for (call_index, raw) in score.judge_calls.iter().enumerate() {
                // Records are pretty-printed: a line holds one compacted.
                compact.clear();
                compact_json_into(raw.get(), &mut compact);
                let call: &RawValue = serde_json::from_slice(&compact)?;
                line(&mut lines.calls, &JudgeCallLine { kind: JUDGE_CALL_KIND, run_id, pass: None, call_index, call })?;
            }
        }
    }
    Ok(())
}

/// A capture as the source figures read it: the record's or a pass's.
struct SeenCapture<'a> {
    url: &'a str,
    http_status: Option<u16>,
    accessible: bool,
    accessed_at: &'a str,
    published_at: Option<&'a str>,
    failure: Option<&'static str>,
}

fn failure_word(f: Option<cohort_records::capture::CaptureFailure>) -> Option<&'static str> {
    use cohort_records::capture::CaptureFailure as F;
    // The enum's serde names (snake_case).
    Some(match f? {
        F::InvalidUrl => "invalid_url",
        F::ReservedDomain => "reserved_domain",
        F::NotAllowed => "not_allowed",
        F::Dns => "dns",
        F::ConnectionRefused => "connection_refused",
        F::Connect => "connect",
        F::Timeout => "timeout",
        F::TooManyRedirects => "too_many_redirects",
        F::NonSuccess => "non_success",
        F::TooLarge => "too_large",
        F::UnsupportedContentType => "unsupported_content_type",
        F::NoText => "no_text",
        F::Store => "store",
        F::Other => "other",
    })
}

/// A scored output's sources: one per distinct normalised URL of its
/// reference table (in order of first index), accessible when any capture
/// of it (the record's, then a judging pass's late ones) answered HTTP 200,
/// inaccessible when captured and none did, uncaptured otherwise. Writes
/// their `sources.jsonl` lines and counts them into the run's view.
fn sources_of(
    record: &LeanRecord<'_>,
    score: &LeanScore<'_>,
    category: &str,
    run: &mut RunOut,
    lines: &mut Lines,
    pass: Option<&PassView>,
) -> Result<(), serde_json::Error> {
    let mut by_url: Vec<(&str, Vec<u32>)> = Vec::new();
    for reference in &score.report.references {
        let Some(url) = reference.url.as_deref().filter(|u| !u.trim().is_empty()) else { continue };
        match by_url.iter_mut().find(|(u, _)| *u == url) {
            Some((_, indices)) => indices.push(reference.index),
            None => by_url.push((url, vec![reference.index])),
        }
    }
    let mut seen: Vec<SeenCapture<'_>> = score
        .captures
        .iter()
        .map(|c| SeenCapture {
            url: &c.url,
            http_status: c.http_status,
            accessible: c.accessible,
            accessed_at: &c.accessed_at,
            published_at: c.published_at.as_deref(),
            failure: failure_word(c.failure),
        })
        .collect();
    for c in pass.map(|p| p.captures.as_slice()).unwrap_or_default() {
        seen.push(SeenCapture {
            url: &c.url,
            http_status: c.http_status,
            accessible: c.accessible,
            accessed_at: &c.accessed_at,
            published_at: c.published_at.as_deref(),
            failure: failure_word(c.failure),
        });
    }
    let (mut inaccessible, mut uncaptured) = (0u64, 0u64);
    for (url, indices) in &by_url {
        let mine: Vec<&SeenCapture<'_>> = seen.iter().filter(|c| c.url == *url).collect();
        // The accessible capture when there is one, else the last tried.
        let shown = mine.iter().find(|c| c.accessible).or_else(|| mine.last()).copied();
        let status = match shown {
            Some(c) if c.accessible => SOURCE_ACCESSIBLE,
            Some(_) => {
                inaccessible += 1;
                SOURCE_INACCESSIBLE
            }
            None => {
                uncaptured += 1;
                SOURCE_UNCAPTURED
            }
        };
        serde_json::to_writer(
            &mut lines.sources,
            &SourceLine {
                kind: "source",
                run_id: &record.run_id,
                question_id: &record.question_id,
                category,
                arm: &record.arm,
                url: Some(url),
                url_sha256: cohort_core::hash::sha256_hex(url.as_bytes()),
                indices,
                status,
                http_status: shown.and_then(|c| c.http_status),
                accessed_at: shown.map(|c| c.accessed_at).filter(|t| !t.is_empty()),
                published_at: shown.and_then(|c| c.published_at),
                failure: shown.filter(|c| !c.accessible).and_then(|c| c.failure),
            },
        )?;
        lines.sources.push(b'\n');
        run.source_urls.push((*url).to_owned());
    }
    if let Some(view) = &mut run.view.scored {
        view.sources = by_url.len() as u64;
        view.inaccessible_sources = inaccessible;
        view.uncaptured_sources = uncaptured;
    }
    Ok(())
}

/// One run's verdicts in the chosen judging pass.
struct PassView {
    claims: BTreeMap<u32, PassClaim>,
    traces: Vec<serde_json::Value>,
    /// Captures the pass made after collection (`cohort judge --capture`).
    captures: Vec<cohort_records::capture::Capture>,
    /// The judge calls the pass made for the run.
    calls: Vec<cohort_records::score::JudgeCall>,
}

impl PassView {
    /// The pass's run file (empty when the pass has not reached the run);
    /// one for another record than the ledger's is refused.
    fn read(store: &PassStore, row: &RunRow) -> Result<PassView, ReportError> {
        let pass_error = |e: cohort_records::passes::PassError| ReportError::Inconsistent(e.to_string());
        match store.read_run(&row.run_id).map_err(pass_error)? {
            None => {
                Ok(PassView { claims: BTreeMap::new(), traces: Vec::new(), captures: Vec::new(), calls: Vec::new() })
            }
            Some(run) if run.record_sha256 != row.record_sha256 => Err(ReportError::Inconsistent(format!(
                "pass {:?} judged record {} of run {}, but the ledger's record is {}",
                store.config().name,
                run.record_sha256,
                row.run_id,
                row.record_sha256
            ))),
            Some(run) => Ok(PassView {
                claims: run.claims.into_iter().map(|c| (c.claim_id, c)).collect(),
                traces: run.traces,
                captures: run.captures,
                calls: run.calls,
            }),
        }
    }

    /// A claim's verdict in the pass: a cited claim the pass has not
    /// judged is `not_sent` (no verdict, no reason), an uncited one stays
    /// uncited; the record's own verdicts never mix in.
    fn verdict(&self, claim_id: u32, cited: &[u32]) -> (Option<VerdictLabel>, Option<UnjudgedReason>) {
        match self.claims.get(&claim_id) {
            _ if cited.is_empty() => (None, None),
            None => (None, None),
            Some(c) => match c.verdict {
                PassVerdict::Yes => (Some(VerdictLabel::Yes), None),
                PassVerdict::No => (Some(VerdictLabel::No), None),
                PassVerdict::Unjudged => (Some(VerdictLabel::Unjudged), c.unjudged_reason),
            },
        }
    }

    /// The models that served the pass's verdicts on this run.
    fn served_models(&self) -> Vec<String> {
        let models: std::collections::BTreeSet<&str> =
            self.claims.values().filter_map(|c| c.judge_model.as_deref()).collect();
        models.into_iter().map(str::to_owned).collect()
    }
}

/// Appends `json` with the whitespace outside its strings removed: one
/// line, the same JSON value (records are stored pretty-printed).
fn compact_json_into(json: &str, out: &mut Vec<u8>) {
    let bytes = json.as_bytes();
    // Already one line (a compact record; a line break inside a JSON
    // string is always escaped): copy it whole.
    if !bytes.contains(&b'\n') && !bytes.contains(&b'\r') {
        out.extend_from_slice(bytes);
        return;
    }
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            out.push(b);
        }
    }
}

/// RFC 3339 UTC with milliseconds, from Unix milliseconds; `None` for 0.
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    (ms > 0).then(|| cohort_records::record::rfc3339_ms(ms))
}

fn run_view(
    row: &RunRow,
    question_id: &str,
    category: &str,
    arm: &ArmConfig,
    repeat: u32,
    attempts: &[AttemptRecord],
    record: Option<&LeanRecord<'_>>,
) -> RunView {
    let outcome = match (row.state, row.outcome) {
        (RunStateKind::Final, Some(outcome)) => outcome.as_str().to_owned(),
        _ => "pending".to_owned(),
    };
    let observed_version = record
        .map(|r| r.observed_version.clone().into_owned())
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
            citation_format: s.report.format.map(|f| f.as_str().to_owned()).unwrap_or_default(),
            ..RunScoreView::default()
        };
        for claim in &s.report.claims {
            if !claim.cited.is_empty() {
                view.cited += 1;
            }
            match claim_status(claim.verdict, claim.unjudged_reason, &claim.cited) {
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
        estimated_cost: record.and_then(|r| r.cost),
        estimated_cost_currency: record.and_then(|r| r.currency.as_deref().map(str::to_owned)),
        // No adapter reads a charge from its API and `cohort submit` takes
        // credits, not money: unknown, never invented.
        actual_cost: None,
        actual_cost_currency: None,
        credits_debited: manual(record, |m| m.credits_debited.as_deref()),
        plan: manual(record, |m| m.plan.as_deref()),
        region: manual(record, |m| m.region.as_deref()),
        scoring_error: record.and_then(|r| r.scoring_error.as_deref().map(str::to_owned)),
    }
}

/// A manual run's field, when given (not blank).
fn manual<'r>(
    record: Option<&'r LeanRecord<'_>>,
    field: impl Fn(&'r LeanManual<'_>) -> Option<&'r str>,
) -> Option<String> {
    record.and_then(|r| r.manual.as_ref()).and_then(field).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
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

fn claim_status(verdict: Option<VerdictLabel>, reason: Option<UnjudgedReason>, cited: &[u32]) -> ClaimStatus<'static> {
    match verdict {
        Some(VerdictLabel::Yes) => ClaimStatus::Yes,
        Some(VerdictLabel::No) => ClaimStatus::No,
        Some(VerdictLabel::Unjudged) => ClaimStatus::Unjudged(reason.map_or("unknown", |r| r.as_str())),
        None if cited.is_empty() => ClaimStatus::Uncited,
        None => ClaimStatus::Unjudged("not_sent"),
    }
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
    run_id: &str,
    record: Option<&RunRecord>,
    attempts: &[AttemptRecord],
    models: &[Option<String>],
    artifacts: &ArtifactStore,
) -> DrillDown {
    let mut drill = DrillDown {
        run_id: run_id.to_owned(),
        prompt: String::new(),
        conversation: Vec::new(),
        output: None,
        claims: Vec::new(),
        served_judge_models: Vec::new(),
        attempts: attempts.iter().map(drill_attempt).collect(),
    };
    let Some(record) = record else { return drill };
    drill.prompt.clone_from(&record.prompt);
    drill.conversation = record.conversation.iter().map(|t| (t.role.clone(), t.text.clone())).collect();
    drill.output = record
        .output_sha256
        .as_deref()
        .and_then(|sha| artifacts.get(sha).ok().flatten())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let Some(score) = &record.scoring else { return drill };
    if let Some(judge) = &score.judge {
        drill.served_judge_models.clone_from(&judge.served_models);
    }
    let sources: BTreeMap<u32, &str> = score.evidence_sources.iter().map(|e| (e.index, e.source.as_str())).collect();
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
        let verdict = match claim_status(claim.verdict, claim.unjudged_reason, &claim.cited) {
            ClaimStatus::Yes => "YES".to_owned(),
            ClaimStatus::No => "NO".to_owned(),
            ClaimStatus::Uncited => "not judged (uncited)".to_owned(),
            ClaimStatus::Unjudged(reason) => format!("unjudged ({reason})"),
        };
        drill.claims.push(DrillClaim {
            index: claim.id,
            text: claim.text.clone(),
            cited: claim.cited.clone(),
            verdict,
            judge_model: models.get(i).cloned().flatten(),
            judge_line: claim.judge_line.clone(),
            evidence,
        });
    }
    drill
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two models served one run: each claim's line names the model whose
    /// trace holds its text (the sentence the judge saw), and the served
    /// counts add up per model.
    #[test]
    fn each_claim_finds_its_model_when_several_served() {
        let record = serde_json::json!({
            "run_id": "q:a:1", "question_id": "q", "arm": "a", "simulated": false, "observed_version": "v",
            "cost": null, "currency": null,
            "scoring": {
                "report": {
                    "metrics": {"total_citations": 2, "unresolved_citations": 0, "uncited_assertive_sentences": 0,
                                "contradictions_surfaced": 0},
                    "claims": [
                        {"id": 1, "text": "Ice floats on water [1].", "cited": [1], "line": 1, "verdict": "yes", "unjudged_reason": null},
                        {"id": 2, "text": "Stones sink [2].", "cited": [2], "line": 1, "verdict": "no", "unjudged_reason": null}
                    ]
                },
                "judge": {"served_models": ["m-one", "m-two"], "simulated": false},
                "judge_traces": [
                    {"claim_text": "Stones sink.", "judge_model": "m-two"},
                    {"claim_text": "Ice floats on water.", "judge_model": "m-one"}
                ]
            }
        });
        let bytes = serde_json::to_vec_pretty(&record).unwrap();
        let lean: LeanRecord<'_> = serde_json::from_slice(&bytes).unwrap();
        let mut run = RunOut {
            view: RunView {
                run_id: String::new(),
                position: 0,
                question_id: String::new(),
                category: String::new(),
                arm: String::new(),
                workflow: String::new(),
                repeat: 1,
                simulated: false,
                outcome: String::new(),
                attempt_class: String::new(),
                reason: String::new(),
                attempts: 0,
                started_at: None,
                ended_at: None,
                started_ms: None,
                duration_ms: None,
                observed_version: String::new(),
                pinned_version: String::new(),
                record_sha256: String::new(),
                scored: None,
                estimated_cost: None,
                estimated_cost_currency: None,
                actual_cost: None,
                actual_cost_currency: None,
                credits_debited: None,
                plan: None,
                region: None,
                scoring_error: None,
            },
            source_urls: Vec::new(),
            served: BTreeMap::new(),
            judge_simulated: false,
            missing_record: false,
            drill: None,
        };
        let mut models = Vec::new();
        let mut lines = Lines::default();
        lines_of(&lean, lean.scoring.as_ref().unwrap(), "science", &mut run, &mut lines, Some(&mut models), None)
            .unwrap();
        assert_eq!(models, vec![Some("m-one".to_owned()), Some("m-two".to_owned())]);
        assert_eq!(run.served.get("m-one"), Some(&1));
        assert_eq!(run.served.get("m-two"), Some(&1));
        let claims: Vec<serde_json::Value> =
            String::from_utf8(lines.claims).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(claims[0]["judge_model"], "m-one");
        assert_eq!(claims[1]["verdict"], "NO");
        // The pretty-printed traces became one line each.
        assert_eq!(String::from_utf8(lines.traces).unwrap().lines().count(), 2);
    }

    /// A claim line written with the run's half serialized once is byte
    /// for byte `serde_json::to_writer` of the whole [`ClaimLine`], with
    /// text that needs escaping in both halves.
    #[test]
    fn claim_lines_are_the_whole_line() {
        let run = || ClaimRunFields {
            kind: "claim",
            run_id: "q\"1:arm\\b:1",
            question_id: "q\"1",
            category: "sci\u{e9}nce\n",
            arm: "arm\\b",
        };
        let claims = [
            ClaimFields {
                claim_index: 1,
                text: "Ice \"floats\" [1].\t\u{1}",
                line: 3,
                cited_indices: &[1, 2],
                status: "judged",
                unjudged_reason: None,
                verdict: Some("YES"),
                judge_model: Some("m"),
            },
            ClaimFields {
                claim_index: 2,
                text: "",
                line: 4,
                cited_indices: &[],
                status: "unjudged",
                unjudged_reason: Some("uncited"),
                verdict: None,
                judge_model: None,
            },
        ];
        let lines = ClaimLines::new(&run()).unwrap();
        let (mut fast, mut whole) = (Vec::new(), Vec::new());
        for claim in claims {
            lines.push(&mut fast, &claim).unwrap();
            serde_json::to_writer(&mut whole, &ClaimLine { run: run(), claim }).unwrap();
            whole.push(b'\n');
        }
        assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(whole.clone()).unwrap());
        let first: serde_json::Value = serde_json::from_slice(whole.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(first["kind"], "claim");
        assert_eq!(first["claim_index"], 1);
    }

    #[test]
    fn compaction_keeps_strings_and_drops_layout() {
        let pretty = "{\n  \"a\": \"x y\\\" z\",\n  \"b\": [1, 2]\n}";
        let mut out = Vec::new();
        compact_json_into(pretty, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, r#"{"a":"x y\" z","b":[1,2]}"#);
        let same: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(same, serde_json::from_str::<serde_json::Value>(pretty).unwrap());
        let mut again = Vec::new();
        compact_json_into(&text, &mut again);
        assert_eq!(String::from_utf8(again).unwrap(), text);
    }
}
