//! The pre-flight, run as a real process on copies of the shipped
//! examples: `cohort run` refuses a cohort that cannot run before anything
//! is spent or written, and `cohort freeze` refuses settings the adapters
//! would refuse at run time (the manifest is write-once).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

/// A fresh copy of `examples/NAME` in a temporary directory.
fn copy_example(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    support::copy_example(name, &dir);
    (tmp, dir)
}

/// `cohort ARGS` with the arms' key variables removed, then `set` added.
fn cohort(args: &[&str], set: &[(&str, &str)]) -> Output {
    let mut command = Command::new(COHORT);
    command.args(args);
    for var in ["PERPLEXITY_API_KEY", "OPENAI_API_KEY", "COHORT_REDIS_URL"] {
        command.env_remove(var);
    }
    command.envs(set.iter().copied());
    command.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Nothing in the directory but the copied cohort files.
fn assert_nothing_written(dir: &Path) {
    assert!(!dir.join("manifest.json").exists(), "no manifest may be written");
    assert!(!dir.join(".cohort").exists(), "no ledger or artifact store may be created");
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    // The uncertainty key is one of protocol-v1's files ([review] requires it).
    names.retain(|n| n != "uncertainty_key.json");
    assert_eq!(names, ["cohort.toml", "protocol.md", "questions.json", "rubric.md", "suffix.txt"]);
}

/// Proves `cohort run examples/protocol-v1` without the keys stops with
/// exit 2, naming both missing variables (and not the manual arm, which
/// needs none: a person runs it), and writes nothing (no manifest, no
/// `.cohort/`).
#[test]
fn run_without_keys_fails_fast_and_writes_nothing() {
    let (_tmp, dir) = copy_example("protocol-v1");
    let started = Instant::now();
    let out = cohort(&["run", dir.to_str().unwrap()], &[]);
    let took = started.elapsed();
    println!("cohort run protocol-v1 without keys: refused in {took:?}");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("PERPLEXITY_API_KEY") && all.contains("OPENAI_API_KEY"), "{all}");
    assert!(all.contains("arms[1].settings.api_key_env") && all.contains("\"perplexity\""), "{all}");
    assert!(!all.contains("arms[0]"), "the manual arm is built and needs no variable: {all}");
    assert!(all.contains("cohort.toml:"), "problems name the file and line: {all}");
    assert_nothing_written(&dir);
}

/// Proves a sim arm with `refusal_rate = 2.0` is refused by `cohort
/// freeze` naming the arm and the setting, and nothing is written.
#[test]
fn freeze_refuses_a_sim_rate_out_of_range() {
    let (_tmp, dir) = copy_example("quickstart");
    let toml = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let bad = toml.replacen("refusal_rate = 0.1", "refusal_rate = 2.0", 1);
    assert_ne!(bad, toml, "the example changed: this test no longer plants its bad rate");
    fs::write(dir.join("cohort.toml"), bad).unwrap();
    let out = cohort(&["freeze", dir.to_str().unwrap()], &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("arms[1].settings.refusal_rate") && all.contains("\"sim-hasty\""), "{all}");
    assert!(all.contains("from 0 to 1"), "{all}");
    assert!(!all.contains("arms[0]"), "only the bad arm is named: {all}");
    assert_nothing_written(&dir);
}

/// Proves an unknown setting is refused at freeze, naming it.
#[test]
fn freeze_refuses_an_unknown_setting() {
    let (_tmp, dir) = copy_example("quickstart");
    let toml = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let bad = toml.replacen("latency_ms = 40,", "latency_ms = 40, refusal_rte = 0.1,", 1);
    assert_ne!(bad, toml);
    fs::write(dir.join("cohort.toml"), bad).unwrap();
    let out = cohort(&["freeze", dir.to_str().unwrap()], &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("arms[0].settings.refusal_rte") && all.contains("unknown sim setting"), "{all}");
    assert_nothing_written(&dir);
}

/// Proves a key planted in the environment never appears in any output,
/// while the variable that is missing is still named.
#[test]
fn a_planted_key_never_appears_in_output() {
    const PLANTED: &str = "pplx-planted-7f3a9c1e-do-not-print";
    let (_tmp, dir) = copy_example("protocol-v1");
    let out = cohort(&["run", dir.to_str().unwrap()], &[("PERPLEXITY_API_KEY", PLANTED)]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(!all.contains(PLANTED) && !all.contains("7f3a9c1e"), "a key value was printed: {all}");
    assert!(all.contains("OPENAI_API_KEY"), "{all}");
    assert!(!all.contains("PERPLEXITY_API_KEY is not set"), "a set key is not reported missing: {all}");
    assert_nothing_written(&dir);
}

/// Proves the judge file given to `--judge` is checked before anything is
/// written: a key variable that is not set stops `cohort run` with exit 2,
/// naming the file and the variable.
#[test]
fn run_refuses_a_judge_file_whose_key_is_not_set() {
    let (tmp, dir) = copy_example("quickstart");
    let judge = tmp.path().join("judge.toml");
    fs::write(&judge, "url = \"http://127.0.0.1:9\"\njudge = \"sim\"\nkey_env = \"COHORT_PREFLIGHT_TEST_JUDGE_KEY\"\n")
        .unwrap();
    let mut command = Command::new(COHORT);
    command.args(["run", dir.to_str().unwrap(), "--judge", judge.to_str().unwrap()]);
    command.env_remove("COHORT_PREFLIGHT_TEST_JUDGE_KEY").env_remove("COHORT_REDIS_URL");
    let out = command.output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("judge.toml") && all.contains("COHORT_PREFLIGHT_TEST_JUDGE_KEY"), "{all}");
    assert_nothing_written(&dir);
}

/// Proves `cohort worker --arms A` checks only the arms it runs: the
/// variable of an arm it does not run is not asked for.
#[test]
fn worker_checks_only_its_arms() {
    let (_tmp, dir) = copy_example("protocol-v1");
    let out = cohort(&["worker", dir.to_str().unwrap(), "--arms", "perplexity"], &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("PERPLEXITY_API_KEY"), "{all}");
    assert!(!all.contains("OPENAI_API_KEY") && !all.contains("manual"), "other arms are not checked: {all}");
    assert_nothing_written(&dir);
}
