//! Scoring end to end: `cohort run` on a sim cohort with the judge proxy in
//! front of the mock provider (a TEST DOUBLE). Claims, verdicts, support
//! rates and trace records land in the run records; when the judge cannot
//! be reached, support is unmeasured and every judgeable claim is unjudged
//! with its reason, and the runs stay completed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::fs;
use std::path::Path;
use std::process::Command;

use cohort_tests::{SimCohort, cargo_bin, free_port};
use judge_proxy_support::{mock, proxy};
use serde_json::Value;

const TEAM_KEY: &str = "team-key-e2e-5f1d2c3b4a";

fn write_cohort(dir: &Path) {
    SimCohort::new("e2e", 11, 8).write(dir).unwrap();
}

fn write_judge_file(path: &Path, url: &str) {
    cohort_tests::write_judge_file(path, url, "COHORT_E2E_TEAM_KEY", 60).unwrap();
}

/// The mock provider (a TEST DOUBLE) behind `cohort judge-proxy`; returns
/// both processes and the proxy's gRPC URL.
fn start_judge(dir: &Path) -> (judge_proxy_support::Proc, judge_proxy_support::Proc, String) {
    let (mock_proc, mock_url) = mock(dir, &[], &[]);
    let config = dir.join("proxy.toml");
    fs::write(
        &config,
        format!(
            "[[upstreams]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"{mock_url}\"\napi_key_env = \"MOCK_KEY\"\nrpm = 60000\ntpm = 100000000\n\n\
             [[teams]]\nname = \"eval\"\nkey_env = \"COHORT_E2E_TEAM_KEY\"\n\n\
             [[judges]]\nname = \"j\"\nupstream = \"mock\"\nmodel = \"judge-1\"\n"
        ),
    )
    .unwrap();
    let (proxy_proc, grpc, _http) = proxy(
        &config,
        &[("COHORT_E2E_TEAM_KEY", TEAM_KEY), ("MOCK_KEY", "sk-mock-provider-0001")],
        dir.join("proxy.log"),
    );
    (mock_proc, proxy_proc, grpc)
}

/// Runs the cohort; returns every run's record (JSON) that has one.
/// Runs the cohort with `--judge`, expecting exit code `expected` (3 when
/// the judge left claims unjudged), and reads its records.
fn run_and_read_records(dir: &Path, judge_file: &Path, expected: i32) -> Vec<Value> {
    let out = Command::new(cargo_bin("cohort-cli", "cohort"))
        .arg("run")
        .arg(dir)
        .arg("--judge")
        .arg(judge_file)
        .arg("--no-capture")
        .env("COHORT_E2E_TEAM_KEY", TEAM_KEY)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(expected), "{text}");
    assert!(text.contains("planned 8, attempted 8, completed 8"), "{text}");
    assert!(!text.contains(TEAM_KEY), "the team key never appears in output");
    let db = dir.join(".cohort/artifacts/sha256");
    let mut records = Vec::new();
    for shard in fs::read_dir(&db).unwrap() {
        for blob in fs::read_dir(shard.unwrap().path()).unwrap() {
            let bytes = fs::read(blob.unwrap().path()).unwrap();
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes)
                && v.get("record_version").is_some()
            {
                assert!(!String::from_utf8_lossy(&bytes).contains(TEAM_KEY), "no key in records");
                records.push(v);
            }
        }
    }
    assert_eq!(records.len(), 8, "one record per completed run");
    records
}

/// Proves judged support end to end: every cited claim of every record
/// gets YES or NO from the judge through the proxy, the verdicts follow the
/// evidence (the sim's supported sentences are in its snippets, the others
/// are not), the support rate is YES/judged, and every judged claim has a
/// trace record naming the model that actually answered.
#[test]
fn claims_verdicts_support_and_traces_land_in_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mock, _proxy, grpc) = start_judge(tmp.path());
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let judge_file = tmp.path().join("judge.toml");
    write_judge_file(&judge_file, &grpc);

    let records = run_and_read_records(&dir, &judge_file, 0);
    let (mut yes, mut judged) = (0u64, 0u64);
    for record in &records {
        let scoring = &record["scoring"];
        let support = &scoring["report"]["support"];
        let claims = scoring["report"]["claims"].as_array().unwrap();
        let cited: Vec<&Value> = claims.iter().filter(|c| !c["cited"].as_array().unwrap().is_empty()).collect();
        assert!(!cited.is_empty());
        for claim in &cited {
            let text = claim["text"].as_str().unwrap();
            let expected = if text.starts_with("Source ") { "yes" } else { "no" };
            assert_eq!(claim["verdict"], expected, "{text}");
        }
        assert_eq!(support["judged"].as_u64().unwrap(), cited.len() as u64);
        assert_eq!(support["unjudged"], 0);
        let rate = support["rate"].as_f64().unwrap();
        assert!((rate - support["yes"].as_f64().unwrap() / support["judged"].as_f64().unwrap()).abs() < 1e-9);
        let traces = scoring["judge_traces"].as_array().unwrap();
        assert_eq!(traces.len(), cited.len(), "one trace record per judged claim");
        for t in traces {
            assert_eq!(t["judge_model"], "judge-1", "the model that actually answered");
            assert_eq!(t["query_id"], record["question_id"]);
            assert!(t["cited_snippets"].as_array().is_some_and(|s| !s.is_empty()));
            assert!(matches!(t["judge_verdict"].as_str(), Some("SUPPORTED" | "UNSUPPORTED")), "{t}");
        }
        assert_eq!(scoring["judge"]["served_models"][0], "judge-1");
        assert!(scoring["evidence_sources"].as_array().unwrap().iter().all(|e| e["source"] == "simulated"));
        yes += support["yes"].as_u64().unwrap();
        judged += support["judged"].as_u64().unwrap();
    }
    let overall = yes as f64 / judged as f64;
    println!("scoring e2e: {} records, {judged} claims judged, {yes} YES, support {overall:.3}", records.len());
    assert!((0.5..0.9).contains(&overall), "about 1 - unsupported_claim_rate (0.7): {overall}");
}

/// Proves a run whose judge calls all failed keeps its outcome (completed)
/// and records support None ("n/a (unmeasured)") with every judgeable claim
/// unjudged(provider_error) and the reason the judge failed.
#[test]
fn judge_failure_leaves_support_unmeasured_and_claims_unjudged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let judge_file = tmp.path().join("judge.toml");
    // Nothing listens on this port: the proxy is unreachable.
    write_judge_file(&judge_file, &format!("http://127.0.0.1:{}", free_port().unwrap()));
    for record in run_and_read_records(&dir, &judge_file, 3) {
        assert_eq!(record["outcome"], "completed");
        let scoring = &record["scoring"];
        let support = &scoring["report"]["support"];
        assert_eq!(support["rate"], Value::Null);
        assert_eq!(support["rendered"], "n/a (unmeasured)");
        assert_eq!(support["judged"], 0);
        let cited: Vec<&Value> = scoring["report"]["claims"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c["cited"].as_array().unwrap().is_empty())
            .collect();
        assert!(!cited.is_empty());
        for claim in cited {
            assert_eq!(claim["verdict"], "unjudged");
            assert_eq!(claim["unjudged_reason"], "provider_error");
        }
        assert!(scoring["judge"]["error"].as_str().unwrap().contains("judge proxy"), "{}", scoring["judge"]);
        assert!(scoring["judge_traces"].as_array().unwrap().is_empty());
    }
}

/// Proves `cohort score --judge` re-scores a report collected elsewhere
/// through the judge proxy: given snippets are the evidence, each cited
/// claim gets its verdict, support = YES / judged, one trace per judged
/// claim, and a claim without evidence stays unjudged(source_unavailable).
#[test]
fn cohort_score_with_a_judge() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mock, _proxy, grpc) = start_judge(tmp.path());
    let judge_file = tmp.path().join("judge.toml");
    write_judge_file(&judge_file, &grpc);
    let report = tmp.path().join("report.md");
    fs::write(
        &report,
        "# Ice\n\nIce is less dense than liquid water [1]. Ice sinks in oil of every kind [2]. \
         Hydrogen bonds hold ice in an open lattice [3].\n\n## References\n\n\
         1. [Density of ice](https://example.org/ice)\n2. [Oils](https://example.org/oil)\n3. [Lattice](https://example.org/lattice)\n",
    )
    .unwrap();
    let snippets = tmp.path().join("snippets.json");
    fs::write(
        &snippets,
        r#"{"1": ["Measurements show ice is less dense than liquid water near 0 C."], "2": ["Oils differ in density."]}"#,
    )
    .unwrap();
    let out = Command::new(cargo_bin("cohort-cli", "cohort"))
        .args(["score", report.to_str().unwrap(), "--snippets", snippets.to_str().unwrap()])
        .args(["--judge", judge_file.to_str().unwrap(), "--query-id", "science-1", "--system", "elsewhere"])
        .env("COHORT_E2E_TEAM_KEY", TEAM_KEY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains(TEAM_KEY));
    let v: Value = serde_json::from_str(&text).unwrap();
    let verdicts: Vec<(&str, &str)> = v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["verdict"].as_str().unwrap_or("none"), c["unjudged_reason"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(verdicts, [("yes", ""), ("no", ""), ("unjudged", "source_unavailable")]);
    assert_eq!(v["support"]["judged"], 2);
    assert_eq!(v["support"]["rate"], 0.5);
    let traces = v["judge_traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2);
    assert!(
        traces
            .iter()
            .all(|t| t["judge_model"] == "judge-1" && t["query_id"] == "science-1" && t["system"] == "elsewhere")
    );
}

/// Proves `cohort run --judge-proxy-config` starts the judge proxy in the
/// same process (issue 4: coordinator, workers and judge proxy in one
/// process) and judges through it: every record has judged claims and
/// trace records naming the model that answered.
#[test]
fn run_starts_its_own_judge_proxy() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(tmp.path(), &[], &[]);
    let config = tmp.path().join("proxy.toml");
    fs::write(
        &config,
        format!(
            "[[upstreams]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"{mock_url}\"\napi_key_env = \"MOCK_KEY\"\nrpm = 60000\ntpm = 100000000\n\n\
             [[teams]]\nname = \"eval\"\nkey_env = \"COHORT_E2E_TEAM_KEY\"\n\n\
             [[judges]]\nname = \"j\"\nupstream = \"mock\"\nmodel = \"judge-1\"\n"
        ),
    )
    .unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir);
    let out = Command::new(cargo_bin("cohort-cli", "cohort"))
        .arg("run")
        .arg(&dir)
        .arg("--judge-proxy-config")
        .arg(&config)
        .env("COHORT_E2E_TEAM_KEY", TEAM_KEY)
        .env("MOCK_KEY", "sk-mock-provider-0001")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("judge proxy (in this process)"), "{text}");
    assert!(!text.contains(TEAM_KEY) && !text.contains("sk-mock-provider-0001"), "no key in the output");
    let mut judged = 0;
    for shard in fs::read_dir(dir.join(".cohort/artifacts/sha256")).unwrap() {
        for blob in fs::read_dir(shard.unwrap().path()).unwrap() {
            let v: Value = match serde_json::from_slice(&fs::read(blob.unwrap().path()).unwrap()) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v.get("record_version").is_some() {
                assert!(v["scoring"]["report"]["support"]["judged"].as_u64().unwrap() > 0);
                assert!(v["scoring"]["judge_traces"].as_array().unwrap().iter().all(|t| t["judge_model"] == "judge-1"));
                judged += 1;
            }
        }
    }
    assert_eq!(judged, 8);
}
