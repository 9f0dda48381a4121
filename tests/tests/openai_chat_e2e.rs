//! The `openai_chat` adapter end to end: `cohort run` on a cohort whose
//! arm is `openai_chat` pointed at the mock provider binary (a TEST
//! DOUBLE) behind a key. Runs complete, records carry the model the mock
//! reported as served (not the one requested), and the key appears in no
//! output and no record.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::fs;
use std::path::Path;
use std::process::Command;

use cohort_tests::cargo_bin;
use judge_proxy_support::mock;
use serde_json::Value;

const SUT_KEY: &str = "sk-sut-e2e-key-93b7a1c4d2";

fn write_cohort(dir: &Path, base_url: &str) {
    fs::create_dir_all(dir).unwrap();
    let mut questions: Vec<String> = (1..=4)
        .map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "What is known about topic {i}?"}}"#))
        .collect();
    // The mock answers this one with a 400 (a marker in the prompt).
    questions.push(
        r#"{"id": "q5", "category": "science", "text": "What is known about topic 5? [[mock:bad_request]]"}"#
            .to_owned(),
    );
    fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", questions.join(",\n"))).unwrap();
    fs::write(
        dir.join("cohort.toml"),
        format!(
            "name = \"openai-chat-e2e\"\nseed = 5\nrun_timeout_secs = 30\ncategories = [\"science\"]\n\n\
             [[arms]]\nid = \"api\"\nlabel = \"Mock API\"\nadapter = \"openai_chat\"\npinned_version = \"served-research-2\"\n\
             vendor_lineage = \"mock\"\nconcurrency = 2\n\
             settings = {{ base_url = \"{base_url}\", model = \"research\", api_key_env = \"COHORT_E2E_SUT_KEY\", timeout_secs = 20 }}\n"
        ),
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

/// Proves an API arm runs end to end through `openai_chat`: the four
/// ordinary questions complete with the mock's text as output and the
/// served model (`served-research-2`, behind the requested alias
/// `research`) as observed version; the question whose prompt makes the
/// mock answer 400 fails with a client error; the key reaches the mock
/// (which refuses a missing or wrong one) and appears in no output or
/// record.
#[test]
fn cohort_run_with_an_openai_chat_arm() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mock, url) = mock(
        tmp.path(),
        &["--api-key-env", "MOCK_EXPECTED_KEY", "--alias", "research=served-research-2,served-research-3,1000"],
        &[("MOCK_EXPECTED_KEY", SUT_KEY)],
    );
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, &url);

    let out = Command::new(cargo_bin("cohort-cli", "cohort"))
        .arg("run")
        .arg(&dir)
        .arg("--no-capture")
        .env("COHORT_E2E_SUT_KEY", SUT_KEY)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("planned 5, attempted 5, completed 4"), "{text}");
    assert!(!text.contains(SUT_KEY), "the key never appears in output");

    let mut records = Vec::new();
    for shard in fs::read_dir(dir.join(".cohort/artifacts/sha256")).unwrap() {
        for blob in fs::read_dir(shard.unwrap().path()).unwrap() {
            let bytes = fs::read(blob.unwrap().path()).unwrap();
            assert!(!String::from_utf8_lossy(&bytes).contains(SUT_KEY), "no key in any artifact");
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes)
                && v.get("record_version").is_some()
            {
                records.push(v);
            }
        }
    }
    assert_eq!(records.len(), 5, "one record per run");
    for r in &records {
        assert_eq!(r["simulated"], false);
        if r["question_id"] == "q5" {
            assert_eq!(r["outcome"], "failed", "{r}");
            assert_eq!(r["attempt_class"], "client_error", "{r}");
            continue;
        }
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!(r["attempt_class"], "ok");
        assert_eq!(r["observed_version"], "served-research-2", "the served model, not the requested alias");
        assert!(r["token_usage"]["input_tokens"].as_u64().unwrap() > 0);
        let output = r["conversation"].as_array().unwrap().last().unwrap()["text"].as_str().unwrap();
        assert!(output.starts_with("mock reply to: What is known about topic"), "{output}");
    }
}
