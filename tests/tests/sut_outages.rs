//! Outages of a system under test, end to end: `cohort run` on a cohort
//! with a sim arm and an `openai_chat` arm pointed at the mock provider (a
//! TEST DOUBLE) that answers 401, with OpenAI's error body echoing the key
//! it was given, unless the request carries the right key.
//!
//! A wrong key is our configuration, not the product's answer: the arm is
//! paused after one `auth_error` attempt, the other arm goes on, no run of
//! the arm is final, and after `cohort resume` with the right key every run
//! of the arm completes. The key never appears in any output, ledger or
//! record file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger, RunStateKind};
use cohort_tests::cargo_bin;
use judge_proxy_support::mock;

const RIGHT_KEY: &str = "sk-sut-outage-right-5f2c9e81";
const WRONG_KEY: &str = "sk-sut-outage-wrong-0d7a3b64";
const KEY_ENV: &str = "COHORT_OUTAGE_SUT_KEY";

fn write_cohort(dir: &Path, base_url: &str) {
    fs::create_dir_all(dir).unwrap();
    let questions: Vec<String> = (1..=3)
        .map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "What is known about topic {i}?"}}"#))
        .collect();
    fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", questions.join(",\n"))).unwrap();
    fs::write(
        dir.join("cohort.toml"),
        format!(
            "name = \"sut-outages\"\nseed = 11\nrun_timeout_secs = 30\ncategories = [\"science\"]\n\n\
             [[arms]]\nid = \"sim\"\nlabel = \"Sim\"\nadapter = \"sim\"\npinned_version = \"sim-1\"\n\
             vendor_lineage = \"simco\"\nconcurrency = 2\n\n\
             [[arms]]\nid = \"api\"\nlabel = \"Mock API\"\nadapter = \"openai_chat\"\npinned_version = \"served-research-2\"\n\
             vendor_lineage = \"mock\"\nconcurrency = 1\n\
             settings = {{ base_url = \"{base_url}\", model = \"research\", api_key_env = \"{KEY_ENV}\", timeout_secs = 20 }}\n"
        ),
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

fn cohort(args: &[&str], key: &str) -> (Output, String) {
    let out = Command::new(cargo_bin("cohort-cli", "cohort"))
        .args(args)
        .env(KEY_ENV, key)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out, text)
}

/// Every file under `dir` (ledger, WAL, artifacts, records), searched for
/// `needle` as bytes.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                hits.push(path.display().to_string());
            }
        }
    }
    hits
}

/// Proves a mistyped key pauses its arm instead of burning its runs: the
/// first `cohort run` completes the sim arm, stops with exit 4 after
/// exactly one `auth_error` attempt of the `openai_chat` arm (paused, with
/// a reason that says what to do; none of its runs final); after `cohort
/// resume` and a run with the right key, every run of the arm completes
/// and the run exits 0. Neither key appears in any output or file.
#[test]
fn a_wrong_key_pauses_the_arm_until_resumed() {
    let tmp = tempfile::tempdir().unwrap();
    let (mock_provider, url) = mock(
        tmp.path(),
        &["--api-key-env", "MOCK_EXPECTED_KEY", "--alias", "research=served-research-2,served-research-3,1000"],
        &[("MOCK_EXPECTED_KEY", RIGHT_KEY)],
    );
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, &url);
    let dir_arg = dir.to_str().unwrap();

    let (out, first) = cohort(&["run", dir_arg, "--no-capture"], WRONG_KEY);
    assert_eq!(out.status.code(), Some(4), "stopped with the api arm paused:\n{first}");
    assert!(first.contains("paused"), "{first}");

    let ledger_path = dir.join(".cohort/ledger.sqlite");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let ledger = SqliteLedger::open(&ledger_path).unwrap();
        let status = ledger.status().await.unwrap();
        let sim = status.arms.iter().find(|a| a.id == "sim").unwrap();
        assert_eq!(sim.by_outcome.get(&Outcome::Completed), Some(&3), "the sim arm went on: {status:?}");
        let api = status.arms.iter().find(|a| a.id == "api").unwrap();
        let reason = api.paused.as_deref().expect("the api arm is paused");
        assert!(reason.starts_with("auth_error: HTTP 401"), "{reason}");
        assert!(reason.contains("cohort resume DIR --arm api"), "{reason}");
        assert!(api.by_outcome.is_empty(), "no run of the api arm is final: {api:?}");
        assert_eq!(status.attempts_by_class.get(&AttemptClass::AuthError), Some(&1), "exactly one attempt");
        let runs = ledger.runs().await.unwrap();
        assert!(runs.iter().filter(|r| r.arm_id == "api").all(|r| r.state == RunStateKind::Pending), "{runs:?}");
    });

    let (out, text) =
        cohort(&["resume", dir_arg, "--arm", "api", "--ack", "fixed the key in the environment"], RIGHT_KEY);
    assert!(out.status.success(), "{text}");
    let (out, second) = cohort(&["run", dir_arg, "--no-capture"], RIGHT_KEY);
    assert!(out.status.success(), "{second}");

    rt.block_on(async {
        let ledger = SqliteLedger::open(&ledger_path).unwrap();
        let status = ledger.status().await.unwrap();
        assert!(status.done(), "{status:?}");
        let api = status.arms.iter().find(|a| a.id == "api").unwrap();
        assert_eq!(api.by_outcome.get(&Outcome::Completed), Some(&3), "every run of the api arm completed: {api:?}");
        assert_eq!(status.attempts_by_class.get(&AttemptClass::AuthError), Some(&1));
    });

    for key in [WRONG_KEY, RIGHT_KEY] {
        assert!(!first.contains(key) && !second.contains(key), "a key in the output");
        assert_eq!(files_containing(&dir, key), Vec::<String>::new(), "a key in the cohort's files");
    }
    // The mock did see the wrong key (it echoes it in its 401): the test
    // would notice if the arm never reached it.
    drop(mock_provider);
}
