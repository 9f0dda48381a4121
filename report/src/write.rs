//! Writing a report folder, write-once: `DIR/reports/<UTC timestamp>/` with
//! `summary.md`, `summary.json`, `runs.csv`, `claims.jsonl`,
//! `judge_traces.jsonl`, `judge_calls.jsonl`, `sources.jsonl`,
//! `manifest.json` (a copy), the SVG plots and
//! `index.html` (docs/report.md describes each).
//!
//! The folder is built under a hidden `.partial-*` name, each file created
//! with `create_new` and made read-only, and renamed into place when every
//! file is there: a reader never sees half a report, and nothing in an
//! existing report is overwritten.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use cohort_artifacts::ArtifactStore;
use cohort_core::hash::sha256_hex;
use cohort_ledger::Ledger;
use cohort_records::passes::{DEFAULT_PASS, PassStore};

use crate::gather::{self, FrozenCohort};
use crate::model::{FileEntry, RunView, Summary};
use crate::{ReportError, compute, csv, html, markdown, plots};

/// The folder under a cohort directory that holds its reports.
pub const REPORTS_DIR: &str = "reports";

/// One line per cited source of each scored output (docs/report.md).
pub const SOURCES_JSONL: &str = "sources.jsonl";

/// One line per upstream call of the judge: its prompt as sent and its raw
/// reply (docs/report.md).
pub const JUDGE_CALLS_JSONL: &str = "judge_calls.jsonl";

/// The fields of a judge call a redacted report keeps (the messages and
/// the reply quote claims and captured passages: their sizes stay).
const CALL_FIELDS_KEPT: [&str; 8] =
    ["claim_ids", "requested_model", "served_model", "attempts", "started_at", "latency_ms", "outcome", "simulated"];

/// The human review's final decisions, one JSON line each (docs/report.md).
pub const REVIEW_JSONL: &str = "review.jsonl";
/// The imported review files, byte for byte, are published as
/// `review-imported-<name>`.
pub const REVIEW_IMPORTED_PREFIX: &str = "review-imported-";

/// How a report is made.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Bootstrap draws (seed 004: 10,000).
    pub draws: u32,
    /// The report's timestamp (its folder name).
    pub now: SystemTime,
    /// Where the report folders go (default `DIR/reports`).
    pub reports_root: PathBuf,
    /// The judging pass whose verdicts the report uses; `None` uses the
    /// verdicts recorded with each run (see [`resolve_pass`]).
    pub pass: Option<Arc<PassStore>>,
    /// `cohort report --final`: refuse ([`ReportError::NotFinal`], nothing
    /// written) unless the report's publication state is final.
    pub require_final: bool,
    /// `cohort report --redact`: a folder for material not authorised for
    /// release (seed 004: "Publish only material authorized for release"):
    /// the same numbers, without outputs and captured text ([`REDACTED`]).
    pub redact: bool,
}

/// What a redacted report says on the first line of `summary.md`,
/// `index.html` and `summary.json`, and what it leaves out: no drill-downs
/// (prompts, conversations, outputs, passages), no claim text in
/// `claims.jsonl` (its ids, cited indices and verdicts stay), judge traces
/// without the claim, the passages and the judge's words, judge calls
/// without their prompt and raw reply (their ids, models, attempts and
/// sizes stay), sources without
/// their URL (its SHA-256 stays, so unique sources re-derive), the review's
/// free text removed and the imported review files (which quote outputs and
/// sources) not copied.
pub const REDACTED: &str = "REDACTED: material not authorised for release is left out (outputs, prompts, claim \
     text, captured passages, judge replies, source URLs, reviewers' free text); counts, claim ids and verdicts \
     are kept and every number is the unredacted report's";

/// The fields of a judge trace record a redacted report keeps.
const TRACE_FIELDS_KEPT: [&str; 7] =
    ["query_id", "system", "cited_indices", "judge_verdict", "judge_model", "timestamp", "simulated"];

/// The pass a report uses: the one named, else the `default` pass when it
/// exists (what `cohort run --judge` and `cohort judge` write), else none
/// (each record's own verdicts). A named pass that does not exist is an
/// error.
pub fn resolve_pass(cohort_dir: &Path, name: Option<&str>) -> Result<Option<Arc<PassStore>>, ReportError> {
    let pass_error = |e: cohort_records::passes::PassError| ReportError::Inconsistent(e.to_string());
    match name {
        Some(name) => Ok(Some(Arc::new(PassStore::open(cohort_dir, name).map_err(pass_error)?))),
        None => {
            let names = cohort_records::passes::list(cohort_dir).map_err(pass_error)?;
            if names.iter().any(|n| n == DEFAULT_PASS) {
                Ok(Some(Arc::new(PassStore::open(cohort_dir, DEFAULT_PASS).map_err(pass_error)?)))
            } else {
                Ok(None)
            }
        }
    }
}

/// A report that was written.
#[derive(Debug)]
pub struct ReportWritten {
    pub path: PathBuf,
    pub summary: Summary,
}

/// The columns of `runs.csv`, in order (docs/report.md).
pub const RUNS_CSV_COLUMNS: [&str; 40] = [
    "metrics_version",
    "tool_version",
    "manifest_sha256",
    "run_id",
    "position",
    "question_id",
    "category",
    "arm",
    "workflow",
    "repeat",
    "simulated",
    "outcome",
    "attempt_class",
    "reason",
    "attempts",
    "started_at",
    "ended_at",
    "duration_ms",
    "observed_version",
    "pinned_version",
    "claims",
    "judged",
    "supported",
    "citations",
    "unresolved_citations",
    "uncited_sentences",
    "contradictions",
    "citation_format",
    "scoring_error",
    "sources",
    "inaccessible_sources",
    "uncaptured_sources",
    "estimated_cost",
    "estimated_cost_currency",
    "actual_cost",
    "actual_cost_currency",
    "credits_debited",
    "plan",
    "region",
    "record_sha256",
];

/// Computes a report of the cohort and writes it into a new folder.
pub async fn write_report(
    frozen: &FrozenCohort,
    manifest_bytes: &[u8],
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    options: &ReportOptions,
) -> Result<ReportWritten, ReportError> {
    if sha256_hex(manifest_bytes) != frozen.manifest_sha256 {
        return Err(ReportError::Inconsistent("manifest.json changed while the report was being made".into()));
    }
    let name = folder_name(options.now);
    let root = &options.reports_root;
    fs::create_dir_all(root).map_err(|e| ReportError::io(&format!("cannot create {}", root.display()), e))?;
    let final_path = root.join(&name);
    if final_path.exists() {
        return Err(ReportError::Exists { path: final_path.display().to_string() });
    }
    let partial = root.join(format!(".partial-{name}-{}", std::process::id()));
    fs::create_dir(&partial).map_err(|e| ReportError::io(&format!("cannot create {}", partial.display()), e))?;
    let result = fill(&partial, frozen, manifest_bytes, ledger, artifacts, options).await;
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => {
            let _ = fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    if final_path.exists() {
        let _ = fs::remove_dir_all(&partial);
        return Err(ReportError::Exists { path: final_path.display().to_string() });
    }
    fs::rename(&partial, &final_path)
        .map_err(|e| ReportError::io(&format!("cannot move the report into {}", final_path.display()), e))?;
    Ok(ReportWritten { path: final_path, summary })
}

/// `2026-12-01T10-55-12.345Z`: RFC 3339 with `-` for `:`, so the name is a
/// valid folder name everywhere and sorts by time.
pub fn folder_name(now: SystemTime) -> String {
    humantime::format_rfc3339_millis(now).to_string().replace(':', "-")
}

async fn fill(
    dir: &Path,
    frozen: &FrozenCohort,
    manifest_bytes: &[u8],
    ledger: &Arc<dyn Ledger>,
    artifacts: &ArtifactStore,
    options: &ReportOptions,
) -> Result<Summary, ReportError> {
    let header = serde_json::json!({
        "kind": "header",
        "metrics_version": frozen.manifest.metrics_version,
        "tool_version": cohort_core::TOOL_VERSION,
        "manifest_sha256": frozen.manifest_sha256,
    })
    .to_string();
    let mut files: Vec<FileEntry> = Vec::new();
    let mut claims = create(dir, "claims.jsonl")?;
    let mut traces = create(dir, "judge_traces.jsonl")?;
    let mut sources = create(dir, SOURCES_JSONL)?;
    let mut calls = create(dir, JUDGE_CALLS_JSONL)?;
    for w in [&mut claims, &mut traces, &mut sources, &mut calls] {
        writeln!(w, "{header}").map_err(|e| ReportError::io(&w.name, e))?;
    }
    let started = std::time::Instant::now();
    let mut sink = Redacting { sink: ThreadSink::start([claims, traces, sources, calls])?, redact: options.redact };
    let with_drill_down = !options.redact;
    let pass = options.pass.as_deref();
    let gathered = gather::gather(frozen, ledger, artifacts, &mut sink, with_drill_down, pass).await;
    let written = sink.sink.finish();
    let gathered = gathered?;
    files.extend(written?);
    phase("gather", started);

    let started = std::time::Instant::now();
    let mut summary = compute::summarise(frozen, &gathered, options.draws);
    summary.redaction = options.redact.then(|| REDACTED.to_owned());
    phase("summarise", started);
    if options.require_final && !summary.publication_state.is_final() {
        return Err(ReportError::NotFinal { missing: summary.publication_state.missing.clone() });
    }
    let started = std::time::Instant::now();
    summary.generated_at = humantime::format_rfc3339_millis(options.now).to_string();

    let mut runs_csv = create(dir, "runs.csv")?;
    write_runs_csv(&mut runs_csv, &summary, &gathered.runs).map_err(|e| ReportError::io("runs.csv", e))?;
    files.push(runs_csv.finish()?);

    files.push(write_file(dir, "manifest.json", manifest_bytes)?);
    if let Some(parts) = crate::review::summarise_review(frozen, frozen.review.as_ref(), options.draws) {
        // The final decisions the review rates are made of (docs/report.md),
        // and the imported files as they were imported.
        let mut out = create(dir, REVIEW_JSONL)?;
        writeln!(out, "{header}").map_err(|e| ReportError::io(REVIEW_JSONL, e))?;
        for line in &parts.lines {
            let line = if options.redact { redact_review_line(line.clone()) } else { line.clone() };
            writeln!(out, "{line}").map_err(|e| ReportError::io(REVIEW_JSONL, e))?;
        }
        files.push(out.finish()?);
        // The imported files quote the outputs and the sources.
        for (name, bytes) in frozen.review.iter().flat_map(|r| &r.imported_files).filter(|_| !options.redact) {
            files.push(write_file(dir, &format!("{REVIEW_IMPORTED_PREFIX}{name}"), bytes)?);
        }
    }
    let plots = plots::render_plots(&summary)?;
    for (name, svg) in &plots {
        files.push(write_file(dir, name, svg.as_bytes())?);
    }
    files.push(write_file(dir, "summary.md", markdown::render_markdown(&summary).as_bytes())?);
    // Streamed: the page of a large cohort is hundreds of megabytes.
    let mut page = create(dir, "index.html")?;
    html::render_html_into(&mut page, &summary, &gathered.runs, &gathered.drill, &plots)
        .map_err(|e| ReportError::io("index.html", e))?;
    files.push(page.finish()?);
    phase("render", started);
    files.sort_by(|a, b| a.name.cmp(&b.name));
    summary.files = files;
    let json = summary_json(&summary).map_err(|e| ReportError::io("summary.json", e.into()))?;
    write_file(dir, "summary.json", json.as_bytes())?;
    make_read_only(dir)?;
    Ok(summary)
}

/// `summary.json`: pretty-printed, except that its first line holds the
/// publication state whole (`{"publication_state":{...},`), so that the
/// file says on its first line whether it is final, as `summary.md` and
/// `index.html` do. The same JSON value as `to_string_pretty`.
pub fn summary_json(summary: &Summary) -> Result<String, serde_json::Error> {
    let pretty = serde_json::to_string_pretty(summary)?;
    let state = serde_json::to_string(&summary.publication_state)?;
    let state_pretty = serde_json::to_string_pretty(&summary.publication_state)?.replace('\n', "\n  ");
    let mut prefix = format!("{{\n  \"publication_state\": {state_pretty},\n");
    let mut first = format!("{{\"publication_state\":{state},");
    // A redacted report says so on the same first line.
    if let Some(redaction) = &summary.redaction {
        let text = serde_json::to_string(redaction)?;
        prefix.push_str(&format!("  \"redaction\": {text},\n"));
        first.push_str(&format!("\"redaction\":{text},"));
    }
    Ok(match pretty.strip_prefix(&prefix) {
        Some(rest) => format!("{first}\n{rest}"),
        None => pretty,
    })
}

/// A sink that, for a redacted report, strips each line of what is not
/// authorised for release ([`REDACTED`]) before it is written.
struct Redacting<S> {
    sink: S,
    redact: bool,
}

impl<S: gather::LineSink> Redacting<S> {
    /// Each JSON line of `lines` through `edit`.
    fn each(lines: Vec<u8>, edit: impl Fn(&mut serde_json::Value)) -> Result<Vec<u8>, ReportError> {
        let mut out = Vec::with_capacity(lines.len() / 2);
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let mut value: serde_json::Value = serde_json::from_slice(line)
                .map_err(|e| ReportError::Inconsistent(format!("a report line is not JSON: {e}")))?;
            edit(&mut value);
            serde_json::to_writer(&mut out, &value).map_err(|e| ReportError::io("redaction", e.into()))?;
            out.push(b'\n');
        }
        Ok(out)
    }
}

impl<S: gather::LineSink> gather::LineSink for Redacting<S> {
    fn claims(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        if !self.redact {
            return self.sink.claims(lines);
        }
        self.sink.claims(Self::each(lines, |v| v["text"] = serde_json::Value::Null)?)
    }
    fn traces(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        if !self.redact {
            return self.sink.traces(lines);
        }
        self.sink.traces(Self::each(lines, |v| {
            if let Some(map) = v.as_object_mut() {
                map.retain(|k, _| TRACE_FIELDS_KEPT.contains(&k.as_str()));
            }
        })?)
    }
    fn sources(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        if !self.redact {
            return self.sink.sources(lines);
        }
        self.sink.sources(Self::each(lines, |v| v["url"] = serde_json::Value::Null)?)
    }
    fn calls(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        if !self.redact {
            return self.sink.calls(lines);
        }
        self.sink.calls(Self::each(lines, redact_call_line)?)
    }
}

/// A `judge_calls.jsonl` line without the prompt and the reply: what stays
/// is [`CALL_FIELDS_KEPT`], and the messages' count and sizes in bytes.
fn redact_call_line(line: &mut serde_json::Value) {
    use serde_json::{Value, json};
    let Some(call) = line.get_mut("call").and_then(Value::as_object_mut) else { return };
    let messages = call.get("messages").and_then(Value::as_array);
    let message_count = messages.map_or(0, Vec::len);
    let prompt_bytes: usize =
        messages.into_iter().flatten().filter_map(|m| m.get("content").and_then(Value::as_str)).map(str::len).sum();
    let reply_bytes = call.get("raw_reply").and_then(Value::as_str).map(str::len);
    call.retain(|k, _| CALL_FIELDS_KEPT.contains(&k.as_str()));
    call.insert("message_count".into(), json!(message_count));
    call.insert("prompt_bytes".into(), json!(prompt_bytes));
    call.insert("reply_bytes".into(), json!(reply_bytes));
}

/// A review line without free text: no `text`, `rationale`, `url` or
/// `note` anywhere, and a claim's reasons (free text, unlike a pair's
/// reason classes) removed; labels, statuses and ids stay.
fn redact_review_line(mut line: serde_json::Value) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value, reasons: bool) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|k, _| !matches!(k.as_str(), "text" | "rationale" | "url" | "note"));
                if reasons {
                    map.remove("reason");
                }
                map.values_mut().for_each(|x| strip(x, reasons));
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|x| strip(x, reasons)),
            _ => {}
        }
    }
    let claim = line.get("kind").and_then(serde_json::Value::as_str) != Some("pair");
    strip(&mut line, claim);
    line
}

/// Logs how long a phase took and the peak memory so far (debug level:
/// `RUST_LOG=cohort_report=debug`), for operators of large cohorts.
fn phase(name: &str, started: std::time::Instant) {
    let peak = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
    });
    tracing::debug!(
        phase = name,
        ms = started.elapsed().as_millis() as u64,
        peak_rss = peak.as_deref().unwrap_or("?"),
        "report phase"
    );
}

/// A new report file (never an existing one) that hashes what is written
/// through it, so `summary.json` lists every file's SHA-256 without reading
/// gigabytes back.
pub(crate) struct HashedFile {
    name: String,
    out: BufWriter<File>,
    hasher: sha2::Sha256,
    bytes: u64,
}

impl Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use sha2::Digest as _;
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl HashedFile {
    /// Flushes the file; its name, SHA-256 and length.
    fn finish(mut self) -> Result<FileEntry, ReportError> {
        use sha2::Digest as _;
        self.out.flush().map_err(|e| ReportError::io(&self.name, e))?;
        Ok(FileEntry { sha256: hex::encode(self.hasher.finalize()), bytes: self.bytes, name: self.name })
    }
}

fn create(dir: &Path, name: &str) -> Result<HashedFile, ReportError> {
    use sha2::Digest as _;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(name))
        .map_err(|e| ReportError::io(&format!("cannot create {name}"), e))?;
    Ok(HashedFile {
        name: name.to_owned(),
        out: BufWriter::with_capacity(1 << 20, file),
        hasher: sha2::Sha256::new(),
        bytes: 0,
    })
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<FileEntry, ReportError> {
    let mut w = create(dir, name)?;
    w.write_all(bytes).map_err(|e| ReportError::io(name, e))?;
    w.finish()
}

/// Writes claim, trace and source lines on threads of their own (writing
/// and hashing gigabytes overlaps with reading records), each file's in
/// the order given: the trace lines, the largest file, on one writer and
/// the others on a second, so that the two cores share the hashing and the
/// copying into the files instead of one writer holding the report up
/// after the records are read. The channels are bounded, so memory stays
/// a few chunks' worth.
struct ThreadSink {
    writers: [Writer; 2],
    /// The writer, and its file, of file 0 (claims), 1 (traces), 2
    /// (sources) and 3 (calls).
    route: [(usize, usize); 4],
}

/// One writer thread and the files it owns.
struct Writer {
    tx: Option<std::sync::mpsc::SyncSender<(usize, Vec<u8>)>>,
    handle: Option<std::thread::JoinHandle<Result<Vec<FileEntry>, ReportError>>>,
}

impl Writer {
    fn start(name: &str, mut files: Vec<HashedFile>) -> Result<Writer, ReportError> {
        // Gather hands over a few buffers of a megabyte or more per chunk
        // (one per file and thread): half a dozen in flight per writer
        // keeps it busy without holding many chunks.
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>)>(6);
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for (which, lines) in rx {
                    let file = &mut files[which];
                    file.write_all(&lines).map_err(|e| ReportError::io(&file.name, e))?;
                }
                files.into_iter().map(HashedFile::finish).collect()
            })
            .map_err(|e| ReportError::io("cannot start the report writer", e))?;
        Ok(Writer { tx: Some(tx), handle: Some(handle) })
    }

    /// Hands `lines` to file `which`; false when the writer has stopped.
    fn send(&self, which: usize, lines: Vec<u8>) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send((which, lines)).is_ok())
    }

    /// Closes the channel and waits for the writer: its files' entries.
    fn finish(&mut self) -> Result<Vec<FileEntry>, ReportError> {
        self.tx = None;
        match self.handle.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(ReportError::Inconsistent("the report writer panicked".to_owned())),
            None => Err(ReportError::Inconsistent("the report writer was already finished".to_owned())),
        }
    }
}

impl ThreadSink {
    fn start([claims, traces, sources, calls]: [HashedFile; 4]) -> Result<ThreadSink, ReportError> {
        let lines = Writer::start("report-writer", vec![claims, sources, calls])?;
        let traces = Writer::start("report-traces", vec![traces])?;
        Ok(ThreadSink { writers: [lines, traces], route: [(0, 0), (1, 0), (0, 1), (0, 2)] })
    }

    fn send(&mut self, file: usize, lines: Vec<u8>) -> Result<(), ReportError> {
        if lines.is_empty() {
            return Ok(());
        }
        let (writer, which) = self.route[file];
        if self.writers[writer].send(which, lines) {
            return Ok(());
        }
        // The writer stopped: its own error says why.
        match self.writers[writer].finish() {
            Err(e) => Err(e),
            Ok(_) => Err(ReportError::Inconsistent("the report writer stopped early".to_owned())),
        }
    }

    /// Closes the channels and waits for the writers: the four files'
    /// entries (the first error, if any, after both have stopped).
    fn finish(&mut self) -> Result<Vec<FileEntry>, ReportError> {
        let [a, b] = &mut self.writers;
        let (a, b) = (a.finish(), b.finish());
        let mut entries = a?;
        entries.extend(b?);
        Ok(entries)
    }
}

impl gather::LineSink for ThreadSink {
    fn claims(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        self.send(0, lines)
    }
    fn traces(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        self.send(1, lines)
    }
    fn sources(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        self.send(2, lines)
    }
    fn calls(&mut self, lines: Vec<u8>) -> Result<(), ReportError> {
        self.send(3, lines)
    }
}

/// The SHA-256 (lowercase hex) and length of a file, read in blocks: a
/// report's `.jsonl` files can be gigabytes.
pub fn sha256_file(path: &Path) -> std::io::Result<(String, u64)> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let mut file = File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), total))
}

fn make_read_only(dir: &Path) -> Result<(), ReportError> {
    for entry in fs::read_dir(dir).map_err(|e| ReportError::io("cannot list the report", e))? {
        let entry = entry.map_err(|e| ReportError::io("cannot list the report", e))?;
        let mut perms = entry.metadata().map_err(|e| ReportError::io("cannot read permissions", e))?.permissions();
        perms.set_readonly(true);
        fs::set_permissions(entry.path(), perms).map_err(|e| ReportError::io("cannot make a file read-only", e))?;
    }
    Ok(())
}

/// Writes `runs.csv`: one row per planned run, every outcome.
pub fn write_runs_csv(w: &mut impl Write, summary: &Summary, runs: &[RunView]) -> std::io::Result<()> {
    writeln!(w, "{}", RUNS_CSV_COLUMNS.join(","))?;
    let mut line = String::with_capacity(512);
    let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_default();
    for run in runs {
        line.clear();
        let s = run.scored.as_ref();
        let fields: [String; RUNS_CSV_COLUMNS.len()] = [
            summary.metrics_version.to_string(),
            summary.tool_version.clone(),
            summary.manifest_sha256.clone(),
            run.run_id.clone(),
            run.position.to_string(),
            run.question_id.clone(),
            run.category.clone(),
            run.arm.clone(),
            run.workflow.clone(),
            run.repeat.to_string(),
            run.simulated.to_string(),
            run.outcome.clone(),
            run.attempt_class.clone(),
            run.reason.clone(),
            run.attempts.to_string(),
            run.started_at.clone().unwrap_or_default(),
            run.ended_at.clone().unwrap_or_default(),
            run.duration_ms.map(|d| d.to_string()).unwrap_or_default(),
            run.observed_version.clone(),
            run.pinned_version.clone(),
            opt(s.map(|s| s.claims)),
            opt(s.map(|s| s.judged)),
            opt(s.map(|s| s.supported)),
            opt(s.map(|s| s.citations)),
            opt(s.map(|s| s.unresolved)),
            opt(s.map(|s| s.uncited_sentences)),
            opt(s.map(|s| s.contradictions)),
            s.map(|s| s.citation_format.clone()).unwrap_or_default(),
            run.scoring_error.clone().unwrap_or_default(),
            opt(s.map(|s| s.sources)),
            opt(s.map(|s| s.inaccessible_sources)),
            opt(s.map(|s| s.uncaptured_sources)),
            run.estimated_cost.map(|c| c.to_string()).unwrap_or_default(),
            run.estimated_cost_currency.clone().unwrap_or_default(),
            run.actual_cost.map(|c| c.to_string()).unwrap_or_default(),
            run.actual_cost_currency.clone().unwrap_or_default(),
            run.credits_debited.clone().unwrap_or_default(),
            run.plan.clone().unwrap_or_default(),
            run.region.clone().unwrap_or_default(),
            run.record_sha256.clone(),
        ];
        csv::record(&mut line, &fields);
        w.write_all(line.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_names_sort_by_time_and_have_no_colons() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_764_582_912_345);
        let name = folder_name(t);
        assert!(!name.contains(':'), "{name}");
        assert!(name.ends_with(".345Z"), "{name}");
        assert!(folder_name(t + std::time::Duration::from_secs(1)) > name);
    }

    /// Each line file goes to its writer in order, and a writer that fails
    /// (here the trace lines' file is `/dev/full`, ENOSPC) stops the
    /// report with an error that names its file, while the other writer's
    /// files are whole.
    #[test]
    fn each_writer_writes_its_files_in_order_and_a_failed_one_names_its_file() {
        use gather::LineSink as _;
        let dir = tempfile::tempdir().unwrap();
        let [claims, traces, sources, calls] =
            ["claims.jsonl", "judge_traces.jsonl", "sources.jsonl", "judge_calls.jsonl"]
                .map(|n| create(dir.path(), n).unwrap());
        let mut sink = ThreadSink::start([claims, traces, sources, calls]).unwrap();
        for k in 0..3 {
            sink.claims(format!("claim {k}\n").into_bytes()).unwrap();
            sink.traces(format!("trace {k}\n").into_bytes()).unwrap();
            sink.sources(format!("source {k}\n").into_bytes()).unwrap();
            sink.calls(format!("call {k}\n").into_bytes()).unwrap();
        }
        let entries = sink.finish().unwrap();
        for (name, word) in [
            ("claims.jsonl", "claim"),
            ("judge_traces.jsonl", "trace"),
            ("sources.jsonl", "source"),
            ("judge_calls.jsonl", "call"),
        ] {
            let text = fs::read_to_string(dir.path().join(name)).unwrap();
            assert_eq!(text, format!("{word} 0\n{word} 1\n{word} 2\n"), "{name}");
            let entry = entries.iter().find(|e| e.name == name).unwrap();
            assert_eq!(entry.sha256, cohort_core::hash::sha256_hex(text.as_bytes()), "{name}");
            assert_eq!(entry.bytes, text.len() as u64, "{name}");
        }

        let full = || {
            use sha2::Digest as _;
            let file = OpenOptions::new().write(true).open("/dev/full").unwrap();
            HashedFile {
                name: "judge_traces.jsonl".to_owned(),
                out: BufWriter::with_capacity(16, file),
                hasher: sha2::Sha256::new(),
                bytes: 0,
            }
        };
        let other = tempfile::tempdir().unwrap();
        let [claims, sources, calls] =
            ["claims.jsonl", "sources.jsonl", "judge_calls.jsonl"].map(|n| create(other.path(), n).unwrap());
        let mut sink = ThreadSink::start([claims, full(), sources, calls]).unwrap();
        sink.claims(b"claim 0\n".to_vec()).unwrap();
        // The failed writer's error comes back on a later send or at the end.
        let sent = (0..100).map(|_| sink.traces(vec![b'x'; 4096])).find_map(Result::err);
        let finished = sink.finish();
        let err = sent.or(finished.err()).expect("writing to /dev/full fails");
        assert!(err.to_string().contains("judge_traces.jsonl"), "{err}");
        assert_eq!(fs::read_to_string(other.path().join("claims.jsonl")).unwrap(), "claim 0\n");
    }
}
