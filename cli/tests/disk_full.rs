//! `cohort run` on a disk that fills up mid-cohort (issue 23): the
//! artifact store and the worker's spool share a small tmpfs this test
//! mounts, so both refuse answers with ENOSPC once it is full. No run is
//! final without a durable record, the worker stops leasing and says why,
//! and the rerun after space is freed completes every run exactly once
//! without calling the system again for a run that already had its record.
//!
//! Mounting needs root (`CAP_SYS_ADMIN`); where `mount` is refused the test
//! says so and checks nothing (`SKIPPED` on stdout, visible with
//! `--no-capture`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::BTreeMap;
use std::fs;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cohort_artifacts::{ArtifactStore, Spool};
use cohort_core::taxonomy::Outcome;
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger as _, RunRow, RunStateKind};

mod support;
use support::{COHORT, cohort, text};

/// Questions in the cohort: far more answers than the small tmpfs holds.
const QUESTIONS: usize = 40;
/// One answer of the system under test: about 3.4 KB of Markdown, 40
/// cited claims. An answer and its run record (which holds every scored
/// claim) take some 25 KB of the store, so the small tmpfs takes a few
/// runs and refuses the rest.
const ANSWER_PARAGRAPHS: usize = 20;
/// The tmpfs's size while it is "full", then after space is freed.
const SMALL: &str = "size=192k";
const ROOMY: &str = "size=32m";
/// A safety bound on each wait.
const DEADLINE: Duration = Duration::from_secs(90);

/// A tmpfs mounted by this test at a directory of its own, unmounted when
/// dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` when this machine refuses the mount (not root, no
    /// `CAP_SYS_ADMIN`): the message says why.
    fn mount(at: &Path, options: &str) -> Result<Tmpfs, String> {
        fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "cohort-disk-full-test"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs refused: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs(at.to_owned()))
    }

    /// Frees space the way an operator would: the same mount, bigger.
    fn grow(&self, options: &str) {
        let out = Command::new("mount").args(["-o", &format!("remount,{options}")]).arg(&self.0).output().unwrap();
        assert!(out.status.success(), "remount: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The system under test: a program (the real `command` adapter runs it)
/// that logs the first line of its prompt (the question) to `calls`, then
/// answers with the same long cited report every time.
fn write_system(dir: &Path, calls: &Path) -> PathBuf {
    let answer = dir.join("answer.md");
    let mut text = String::from("# Findings\n\n");
    for i in 0..ANSWER_PARAGRAPHS {
        text.push_str(&format!(
            "Measurement series {i} reported a mean of {i}.5 units across the surveyed sites [1]. The same series \
             found no change in the control group over the period studied [2].\n\n"
        ));
    }
    text.push_str("## Sources\n\n1. https://example.org/series\n2. https://example.org/control\n");
    fs::write(&answer, text).unwrap();
    let script = dir.join("system.sh");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\nIFS= read -r question\nprintf '%s\\n' \"$question\" >> '{}'\ncat > /dev/null\ncat '{}'\n",
            calls.display(),
            answer.display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&script).status().unwrap();
    script
}

fn write_cohort(dir: &Path, system: &Path) {
    fs::create_dir_all(dir).unwrap();
    let questions: Vec<String> = (1..=QUESTIONS)
        .map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "What is known about topic {i}?"}}"#))
        .collect();
    fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", questions.join(",\n"))).unwrap();
    fs::write(
        dir.join("cohort.toml"),
        format!(
            "name = \"disk-full\"\nseed = 7\nrun_timeout_secs = 20\ncategories = [\"science\"]\n\n[[arms]]\nid = \
             \"a\"\nlabel = \"A\"\nadapter = \"command\"\npinned_version = \"not disclosed\"\nvendor_lineage = \
             \"test-double\"\nconcurrency = 2\nsettings = {{ program = \"{}\" }}\n\n[retry]\nmax_attempts = \
             3\ninitial_backoff_ms = 10\nmax_backoff_ms = 20\nmax_total_secs = 30\n",
            system.display()
        ),
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

/// The system's calls per question so far.
fn calls_per_question(calls: &Path) -> BTreeMap<String, usize> {
    let mut per = BTreeMap::new();
    for line in fs::read_to_string(calls).unwrap_or_default().lines() {
        *per.entry(line.to_owned()).or_insert(0) += 1;
    }
    per
}

async fn runs(dir: &Path) -> Vec<RunRow> {
    SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap().runs().await.unwrap()
}

/// The invariant: every run the ledger holds final has its record
/// somewhere durable (the store, or the spool on the disk), and so has
/// every blob the record names.
fn assert_every_final_run_is_durable(rows: &[RunRow], store: &ArtifactStore, spool: &Spool, when: &str) {
    let spooled = spool.pending().unwrap();
    let durable = |sha: &str| store.get(sha).unwrap().is_some() || spooled.iter().any(|s| s == sha);
    for row in rows.iter().filter(|r| r.outcome.is_some()) {
        assert!(!row.record_sha256.is_empty(), "{when}: {} is final without a record: {row:?}", row.run_id);
        assert!(
            durable(&row.record_sha256),
            "{when}: {} is final ({:?}) but its record {} is neither in the store nor in the spool",
            row.run_id,
            row.outcome,
            row.record_sha256
        );
    }
}

/// Proves a full disk loses no record of a run the ledger calls final, and
/// that the cohort completes once space is freed. `cohort run` runs with
/// `DIR/.cohort/artifacts` and `DIR/.cohort/spool` on one small tmpfs (the
/// ledger on the ordinary disk): once it is full the worker warns that
/// leasing is paused, no run is final without its record stored, and after
/// an interrupt (the answers held in memory are lost with the process) and
/// space freed, `cohort run` completes every run exactly once, never asks
/// the system again for a run that had its record, and `cohort verify`
/// agrees with the report.
#[tokio::test]
async fn a_full_disk_leaves_no_final_run_without_its_record_and_the_rerun_completes_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fs_dir = tmp.path().join("tmpfs");
    let disk = match Tmpfs::mount(&fs_dir, SMALL) {
        Ok(disk) => disk,
        Err(why) => {
            println!("SKIPPED: the disk-full test needs to mount a tmpfs: {why}");
            return;
        }
    };
    let calls = tmp.path().join("calls.log");
    let system = write_system(tmp.path(), &calls);
    let dir = tmp.path().join("c");
    write_cohort(&dir, &system);
    // The store and the spool on the small tmpfs, the ledger beside them on
    // the ordinary disk.
    fs::create_dir_all(dir.join(".cohort")).unwrap();
    for name in ["artifacts", "spool"] {
        fs::create_dir_all(fs_dir.join(name)).unwrap();
        std::os::unix::fs::symlink(fs_dir.join(name), dir.join(".cohort").join(name)).unwrap();
    }
    let store = ArtifactStore::for_cohort(&dir);
    let spool = Spool::for_cohort(&dir);
    let d = dir.to_str().unwrap();

    // Phase 1: the disk fills; wait for the worker to say leasing stopped.
    let mut child = Command::new(COHORT)
        .args(["run", d, "--workers", "1"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr: Arc<Mutex<Vec<String>>> = Arc::default();
    let reader = {
        let stderr = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                stderr.lock().unwrap().push(line);
            }
        })
    };
    let paused = "leasing paused";
    let started = Instant::now();
    while !stderr.lock().unwrap().iter().any(|l| l.contains(paused)) {
        let log = stderr.lock().unwrap().join("\n");
        assert!(started.elapsed() < DEADLINE, "the worker never said it stopped leasing:\n{log}");
        assert!(child.try_wait().unwrap().is_none(), "cohort run ended before the disk filled:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let warning = stderr.lock().unwrap().iter().find(|l| l.contains(paused)).cloned().unwrap();
    assert!(warning.contains("WARN") && warning.contains("artifact store refuses"), "{warning}");
    let rows = runs(&dir).await;
    assert_every_final_run_is_durable(&rows, &store, &spool, "disk full");
    let final_then: Vec<String> = rows.iter().filter(|r| r.outcome.is_some()).map(|r| r.run_id.clone()).collect();
    assert!(!final_then.is_empty(), "the disk was full before any run could be kept: nothing was tested");
    assert!(final_then.len() < QUESTIONS, "every run was kept: the disk never filled");

    // The operator stops it while the disk is still full: what only memory
    // held is lost with the process, and was never reported.
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let waited = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(waited.elapsed() < DEADLINE, "cohort run did not stop after SIGINT");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    reader.join().unwrap();
    let log = stderr.lock().unwrap().join("\n");
    assert!(!status.success(), "cohort run exited 0 although runs are unfinished:\n{log}");
    let rows = runs(&dir).await;
    assert_every_final_run_is_durable(&rows, &store, &spool, "after the interrupt");
    assert_eq!(rows.iter().filter(|r| r.state == RunStateKind::Leased).count(), 0, "a lease was left behind:\n{log}");
    let final_before: Vec<String> = rows.iter().filter(|r| r.outcome.is_some()).map(|r| r.run_id.clone()).collect();
    let calls_before = calls_per_question(&calls);

    // Phase 2: space freed; the rerun completes every run exactly once.
    disk.grow(ROOMY);
    let again = cohort(&["run", d, "--workers", "1"]);
    let t = text(&again);
    assert!(again.status.success(), "{t}");
    let rows = runs(&dir).await;
    assert_eq!(rows.len(), QUESTIONS, "{rows:?}");
    assert_every_final_run_is_durable(&rows, &store, &spool, "after the rerun");
    for row in &rows {
        assert_eq!(row.outcome, Some(Outcome::Completed), "{row:?}\n{t}");
        assert!(store.get(&row.record_sha256).unwrap().is_some(), "{} has no record in the store", row.run_id);
    }
    assert!(spool.pending().unwrap().is_empty(), "the spool still holds answers after the rerun");
    // A run that was final before the rerun is never asked again; every
    // question was asked at least once in all.
    let calls_after = calls_per_question(&calls);
    let question_of = |run_id: &str| {
        let q = run_id.split(':').next().unwrap();
        format!("What is known about topic {}?", q.trim_start_matches('q'))
    };
    for run in &final_before {
        let q = question_of(run);
        assert_eq!(calls_after.get(&q), calls_before.get(&q), "{run} was final before the rerun and was called again");
    }
    assert_eq!(calls_after.len(), QUESTIONS, "{calls_after:?}");

    // The report the rerun wrote agrees with the ledger and the records.
    let report = t
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report path in:\n{t}"))
        .trim()
        .to_owned();
    let verified = cohort(&["verify", &report, "--cohort", d]);
    assert!(verified.status.success(), "{}", text(&verified));
}
