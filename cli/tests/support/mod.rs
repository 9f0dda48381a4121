//! What the CLI's integration tests share.

pub mod review;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// The `cohort` binary under test.
#[allow(dead_code)] // Not every test binary that shares this module runs it.
pub const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

/// `cohort ARGS...`, its output collected.
#[allow(dead_code)]
pub fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

/// stdout then stderr of a command that must succeed (the test fails with
/// them otherwise).
#[allow(dead_code)]
pub fn ok(o: &Output) -> String {
    let t = text(o);
    assert!(o.status.success(), "{t}");
    t
}

/// stdout then stderr, for assertion messages.
#[allow(dead_code)]
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A 12-question cohort named `name` with seed `seed` and the `[[arms]]`
/// tables `arms` in `dir` (created), with fast retries.
#[allow(dead_code)]
pub fn write_cohort(dir: &Path, name: &str, seed: u64, arms: &str) {
    fs::create_dir_all(dir).unwrap();
    let questions: Vec<String> = (1..=12)
        .map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "What is known about topic {i}?"}}"#))
        .collect();
    fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", questions.join(",\n"))).unwrap();
    fs::write(
        dir.join("cohort.toml"),
        format!("name = \"{name}\"\nseed = {seed}\nrun_timeout_secs = 5\ncategories = [\"science\"]\n\n{arms}\n[retry]\nmax_attempts = 3\ninitial_backoff_ms = 10\nmax_backoff_ms = 20\nmax_total_secs = 30\n"),
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

/// The five cohort files of the shipped `examples/NAME`, copied into `to`
/// (created); a developer's local run state stays out.
#[allow(dead_code)]
pub fn copy_example(name: &str, to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
    fs::create_dir_all(to).unwrap();
    for file in ["cohort.toml", "questions.json", "suffix.txt", "protocol.md", "rubric.md"] {
        fs::copy(from.join(file), to.join(file)).unwrap();
    }
    // protocol-v1 declares [review]: its uncertainty key is one of its files.
    let key = from.join("uncertainty_key.json");
    if key.exists() {
        fs::copy(&key, to.join("uncertainty_key.json")).unwrap();
    }
}

/// Collects the cohort in `dir` in process, as `cohort run` does (frozen
/// first when it is not), through the library entry point
/// `cohort_serve::run_local`: no binary is spawned and no report written.
/// For tests that need a collected cohort, not `cohort run`'s output.
/// Returns the ledger's final status (every planned run has its outcome).
#[allow(dead_code)]
pub async fn collect(dir: &Path) -> cohort_ledger::Status {
    use cohort_coordinator::freeze::{FreezeOptions, freeze};
    use cohort_serve::{LocalConfig, LocalOutcome, run_local};
    if !dir.join("manifest.json").exists() {
        freeze(dir, &FreezeOptions { now: std::time::SystemTime::now(), amend: None }).unwrap();
    }
    let config = LocalConfig::for_dir(dir);
    match run_local(&config, |_| {}, std::future::pending::<()>()).await.unwrap() {
        LocalOutcome::Ran { status, .. } => {
            assert!(status.done(), "the cohort was not collected to the end: {status:?}");
            status
        }
        LocalOutcome::JudgeRefused(e) => panic!("the judge refused: {e}"),
    }
}

/// [`collect`] on a runtime of its own, for a test that is not async.
#[allow(dead_code)]
pub fn collect_blocking(dir: &Path) -> cohort_ledger::Status {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(collect(dir))
}
