//! `run_local` in process: the quickstart cohort (SIMULATED arms and
//! judge) frozen into a temporary directory and run to the end, with no
//! `cohort` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::path::Path;
use std::time::SystemTime;

use cohort_coordinator::freeze::{FreezeOptions, freeze};
use cohort_serve::{LocalConfig, LocalEvent, LocalOutcome, run_local};

fn quickstart_in(dir: &Path) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for name in ["cohort.toml", "questions.json", "suffix.txt", "protocol.md", "rubric.md"] {
        std::fs::copy(examples.join(name), dir.join(name)).unwrap();
    }
    freeze(dir, &FreezeOptions { now: SystemTime::now(), amend: None }).unwrap();
}

/// Proves `run_local` runs a whole cohort in process: every planned run
/// gets its outcome, the built-in SIMULATED judge is started and judges
/// inline, and the events come in order (seeded first, the last counts
/// before the workers drain last but for the failures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_local_runs_the_quickstart_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    quickstart_in(dir.path());
    let config = LocalConfig::for_dir(dir.path());
    let mut seen = Vec::new();
    let outcome = run_local(
        &config,
        |event| {
            seen.push(match event {
                LocalEvent::Seeded { .. } => "seeded",
                LocalEvent::JudgeStarted { simulated: true, .. } => "sim judge",
                LocalEvent::JudgeStarted { .. } => "judge",
                LocalEvent::Status(_) => "status",
                LocalEvent::Stopping(_) => "stopping",
                _ => "other",
            })
        },
        std::future::pending::<()>(),
    )
    .await
    .unwrap();
    let LocalOutcome::Ran { status, interrupted, judged } = outcome else { panic!("the sim judge refused") };
    assert!(status.done(), "{status:?}");
    assert!(!interrupted && judged);
    assert_eq!(&seen[..2], ["seeded", "sim judge"], "{seen:?}");
    assert_eq!(seen.last(), Some(&"stopping"), "{seen:?}");
}
