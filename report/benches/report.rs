//! A report over a synthetic cohort of 100,000 runs and about 5,000,000
//! claims (2,000 questions x 5 arms x 10 repeats, 52 claims per completed
//! run, 4% of runs failed, refused or timed out, a trace
//! record per judged claim) with 10,000 bootstrap draws: prints the time
//! and the peak memory of `cohort_report::write_report`. Run with
//! `cargo bench -p cohort-report --bench report`.
//!
//! The fixture (a frozen cohort, an embedded ledger with every run final,
//! one record per run in the artifact store) is built under /dev/shm when
//! it exists, so the fsyncs of the ledger and the store cost nothing, and
//! then the report is measured in a fresh child process, so its peak RSS is
//! the report's alone. `COHORT_BENCH_RUNS_PER_ARM_QUESTION` (repeats,
//! default 10) and `COHORT_BENCH_QUESTIONS` (default 2,000) change the size.
//!
//! It prints the report's phases (gather: ledger, records, merge;
//! summarise; render) with the peak RSS after each, from the report's own
//! phase log. `COHORT_BENCH_COLD=1` measures on a cold page cache: the
//! fixture's files are dropped from the cache first (`/proc/sys/vm/
//! drop_caches` when writable, else `posix_fadvise(DONTNEED)` on every file
//! of the fixture, which needs no privilege), so the report reads its
//! records from the disk. Build the fixture on a disk for that
//! (`COHORT_BENCH_FIXTURE=DIR` outside /dev/shm).
//!
//! Figures are printed, never asserted (SPEC section 12).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cohort_artifacts::ArtifactStore;
use cohort_coordinator::freeze::{FreezeOptions, freeze, load_frozen};
use cohort_core::scoring::{ParsedVerdict, RunFacts, ScoreReport, Verdict, analyse};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{AttemptRecord, LeaseRef, Ledger, PlanHeader, RunResult};
use cohort_report::{FrozenCohort, ReportOptions};
use serde_json::json;

const ARMS: usize = 5;
/// 52 claims on each of the ~96% of runs that complete: about 5,000,000.
const CLAIMS_PER_RUN: usize = 52;
const CATEGORIES: [&str; 5] = ["science", "technology", "history", "disputed", "insufficient"];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    if let Ok(dir) = std::env::var("COHORT_BENCH_REPORT_DIR") {
        measure(Path::new(&dir));
        return;
    }
    let questions = env_usize("COHORT_BENCH_QUESTIONS", 2_000);
    let repeats = env_usize("COHORT_BENCH_RUNS_PER_ARM_QUESTION", 10);
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let tmp = tempfile::tempdir_in(base).unwrap();
    // COHORT_BENCH_FIXTURE=DIR builds the fixture there once and keeps it
    // (for profiling the measuring child: COHORT_BENCH_REPORT_DIR=DIR).
    let kept = std::env::var("COHORT_BENCH_FIXTURE").ok().map(PathBuf::from);
    let dir = kept.clone().unwrap_or_else(|| tmp.path().join("bench"));
    if kept.is_none() || !dir.join("manifest.json").exists() {
        let started = Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let (runs, claims) = runtime.block_on(build(&dir, questions, repeats));
        println!(
            "fixture: {runs} runs, {claims} claims, {questions} questions x {ARMS} arms x {repeats} repeats, built in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .env("COHORT_BENCH_REPORT_DIR", &dir)
        .status()
        .unwrap();
    assert!(status.success(), "the measuring child failed");
}

/// The report's phase log as text lines (`cohort_report` debug events),
/// printed after the run.
#[derive(Clone, Default)]
struct PhaseLog(Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PhaseLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0.trim().to_owned());
    }
}

/// Drops the fixture's files from the page cache: every cache when
/// `drop_caches` is writable, else each file's pages (`posix_fadvise`).
fn drop_caches(dir: &Path) {
    let _ = std::process::Command::new("sync").status();
    if fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok() {
        println!("cold: dropped every page cache (/proc/sys/vm/drop_caches)");
        return;
    }
    let script = "import os,sys\nn=0\nfor root,_,files in os.walk(sys.argv[1]):\n  for f in files:\n    \
                  fd=os.open(os.path.join(root,f),os.O_RDONLY)\n    os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)\n    \
                  os.close(fd); n+=1\nprint(n)";
    let out = std::process::Command::new("python3").arg("-c").arg(script).arg(dir).output().unwrap();
    println!(
        "cold: /proc/sys/vm/drop_caches is not writable here; {} fixture files dropped from the cache with posix_fadvise(DONTNEED)",
        String::from_utf8_lossy(&out.stdout).trim()
    );
}

/// In a fresh process: one report, its time, phases and peak RSS.
fn measure(dir: &Path) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let phases = PhaseLog::default();
    // RUST_LOG=cohort_report=debug also prints each phase as it ends.
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::from_default_env()),
        )
        .with(phases.clone().with_filter(
            tracing_subscriber::filter::Targets::new().with_target("cohort_report", tracing::Level::DEBUG),
        ))
        .try_init();
    if std::env::var("COHORT_BENCH_COLD").is_ok_and(|v| v == "1") {
        let _ = fs::remove_dir_all(dir.join("reports"));
        drop_caches(dir);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (cohort, manifest, manifest_sha256) = load_frozen(dir).unwrap();
    let manifest_bytes = fs::read(dir.join("manifest.json")).unwrap();
    let frozen = FrozenCohort { cohort, manifest, manifest_sha256, review: None, review_declared: false };
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&dir.join("ledger.sqlite")).unwrap());
    let artifacts = ArtifactStore::local(dir.join("artifacts"));
    let options = ReportOptions {
        draws: cohort_core::stats::DEFAULT_DRAWS,
        now: SystemTime::now(),
        reports_root: dir.join("reports"),
        pass: None,
        require_final: false,
        redact: false,
    };
    let started = Instant::now();
    let written =
        runtime.block_on(cohort_report::write_report(&frozen, &manifest_bytes, &ledger, &artifacts, &options)).unwrap();
    let elapsed = started.elapsed();
    let bytes: u64 = written.summary.files.iter().map(|f| f.bytes).sum();
    println!(
        "report: {} runs, {} claims, {} draws: {:.2} s, peak RSS {} MiB, {} MiB written (target <= 5 s, <= 512 MiB)",
        written.summary.arms.iter().map(|a| a.counts.planned).sum::<u64>(),
        written.summary.arms.iter().map(|a| a.claims.extracted).sum::<u64>(),
        written.summary.bootstrap.draws,
        elapsed.as_secs_f64(),
        peak_rss_kib() / 1024,
        bytes / (1024 * 1024)
    );
    for line in phases.0.lock().unwrap().iter() {
        println!("  phase: {line}");
    }
}

/// VmHWM of this process, in KiB (0 where /proc is missing).
fn peak_rss_kib() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// SplitMix64 of a number: deterministic verdicts without a generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

async fn build(dir: &Path, n_questions: usize, repeats: usize) -> (usize, usize) {
    fs::create_dir_all(dir).unwrap();
    let mut config = format!(
        "name = \"bench\"\nseed = 1\nrepeats = {repeats}\nrepeat_schedule = {{ every_hours = 0, note = \"benchmark: all at once\" }}\n\n"
    );
    for a in 0..ARMS {
        config.push_str(&format!(
            "[[arms]]\nid = \"arm{a}\"\nlabel = \"Arm {a}\"\nadapter = \"command\"\npinned_version = \"v{a}\"\n\
             vendor_lineage = \"vendor{a}\"\nconcurrency = 1000000\nsettings = {{ program = \"true\" }}\n\n"
        ));
    }
    config
        .push_str("[judge]\nprovider = \"openai\"\nmodel = \"judge\"\nvendor_lineage = \"judges\"\ntemperature = 0\n");
    fs::write(dir.join("cohort.toml"), config).unwrap();
    let questions: Vec<serde_json::Value> = (0..n_questions)
        .map(|i| json!({"id": format!("q{i}"), "category": CATEGORIES[i % 5], "text": format!("Question number {i}?")}))
        .collect();
    fs::write(dir.join("questions.json"), serde_json::to_vec(&questions).unwrap()).unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# Protocol\n").unwrap();
    fs::write(dir.join("rubric.md"), "# Rubric\n").unwrap();
    freeze(dir, &FreezeOptions { now: SystemTime::now(), amend: None }).unwrap();
    let (cohort, manifest, manifest_sha256) = load_frozen(dir).unwrap();

    let ledger = SqliteLedger::open(&dir.join("ledger.sqlite")).unwrap();
    let header = PlanHeader::for_cohort(&cohort.config, &manifest_sha256);
    let qs: Vec<(String, String)> = cohort.questions.iter().map(|q| (q.id.clone(), q.text.clone())).collect();
    let t0 = UNIX_EPOCH + Duration::from_secs(1_790_000_000);
    let t0_ms = 1_790_000_000_000i64;
    ledger.seed(&header, &qs, &manifest.order, t0_ms).await.unwrap();

    // One output of 50 cited sentences, analysed once; each run gets its
    // own verdicts.
    let mut text = String::new();
    for i in 0..CLAIMS_PER_RUN {
        text.push_str(&format!("Measured finding number {i} holds in the cited study [{}]. ", i % 5 + 1));
    }
    text.push_str("\n\n## References\n\n");
    for i in 1..=5 {
        text.push_str(&format!("[{i}] https://example.org/source/{i}\n"));
    }
    let analysis = analyse(&text, None).unwrap();
    assert_eq!(analysis.claims.len(), CLAIMS_PER_RUN);
    let artifacts = ArtifactStore::local(dir.join("artifacts"));
    let output_sha = artifacts.put(text.as_bytes()).unwrap();
    let _ = t0;

    let (mut runs, mut claims) = (0usize, 0usize);
    loop {
        let batch = ledger.lease("bench", 2_000, t0_ms + 1, 3_600_000).await.unwrap();
        if batch.leases.is_empty() {
            break;
        }
        let mut results = Vec::with_capacity(batch.leases.len());
        for grant in &batch.leases {
            let h = mix(grant.token);
            let arm: u64 = grant.arm_id.trim_start_matches("arm").parse().unwrap_or(0);
            let outcome = match h % 100 {
                0..=1 => Outcome::Failed,
                2 => Outcome::Refused,
                3 => Outcome::TimedOut,
                _ => Outcome::Completed,
            };
            // (4% not completed: they stay in every denominator.)
            let record_sha256 = if outcome == Outcome::Completed {
                let verdicts: Vec<Option<ParsedVerdict>> = (0..CLAIMS_PER_RUN as u64)
                    .map(|i| {
                        let v = mix(h ^ i);
                        let verdict = if v % 100 < 60 + arm * 5 { Verdict::Yes } else { Verdict::No };
                        Some(ParsedVerdict { verdict, line: Some(format!("Claim {}: {:?}", i + 1, verdict)) })
                    })
                    .collect();
                let report = ScoreReport::assemble(analysis.clone(), &RunFacts::default(), &verdicts);
                let traces: Vec<serde_json::Value> = report
                    .claims
                    .iter()
                    .map(|claim| {
                        json!({"query_id": grant.question_id, "system": grant.arm_id, "claim_text": claim.text,
                               "cited_indices": claim.cited, "cited_snippets": [{"index": claim.cited[0],
                               "source_url": "https://example.org/source", "snippet_text": "A short passage of the source."}],
                               "judge_verdict": if claim.verdict == Some(cohort_core::scoring::VerdictLabel::Yes) { "SUPPORTED" } else { "UNSUPPORTED" },
                               "judge_reasoning": claim.judge_line, "judge_model": "judge", "timestamp": "2026-12-01T00:00:00.000Z"})
                    })
                    .collect();
                claims += CLAIMS_PER_RUN;
                let record = json!({
                    "record_version": 3, "cohort": "bench", "manifest_sha256": manifest_sha256,
                    "metrics_version": 1, "run_id": grant.run_id, "question_id": grant.question_id,
                    "arm": grant.arm_id, "product": "P", "simulated": false, "repeat": grant.repeat, "attempt": 1,
                    "prompt": "Question?", "conversation": [], "output_sha256": output_sha,
                    "citation_urls": [], "observed_version": format!("v{arm}"),
                    "pinned_version": format!("v{arm}"), "settings": {}, "started_at": "", "ended_at": "",
                    "duration_ms": 1000, "outcome": "completed", "failure_reason": null, "attempt_class": "ok",
                    "token_usage": null, "cost": null, "currency": null, "system_sources": [],
                    "scoring": {"report": report, "evidence_sources": [], "captures": [],
                                "judge": {"requested_model": "judge", "served_models": ["judge"], "input_tokens": 0,
                                          "output_tokens": 0, "cost_micros": null, "currency": "",
                                          "attempt_classes": [], "error": null},
                                "judge_traces": traces},
                    "scoring_error": null
                });
                artifacts.put(&serde_json::to_vec(&record).unwrap()).unwrap()
            } else {
                String::new()
            };
            let class = match outcome {
                Outcome::Completed => AttemptClass::Ok,
                Outcome::Refused => AttemptClass::Refused,
                Outcome::TimedOut => AttemptClass::Timeout,
                _ => AttemptClass::ClientError,
            };
            let at = t0_ms + 1 + (runs as i64) * 10;
            let attempt = AttemptRecord {
                class,
                http_status: 200,
                detail: String::new(),
                started_ms: at,
                ended_ms: at + 1_000,
                observed_version: None,
                worker: String::new(),
                attempt: 0,
                token: 0,
                retry_after_ms: None,
            };
            let result = RunResult { outcome, reason: String::new(), record_sha256, observed_version: None, attempt };
            results.push((LeaseRef { run_id: grant.run_id.clone(), token: grant.token }, result));
            runs += 1;
        }
        let accepted = ledger.finish_many("bench", &results, t0_ms + 2).await.unwrap();
        assert!(accepted.iter().all(|a| *a));
    }
    (runs, claims)
}
