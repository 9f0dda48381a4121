//! `cohort judge` end to end (issue 9): a sim cohort collected with the
//! judge proxy down, then judged as a stage of its own through `cohort
//! judge-proxy` in front of the mock provider (a TEST DOUBLE), with the
//! provider's own request counts as the witness of what was sent.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cohort_tests::{SimCohort, cargo_bin, free_port, write_judge_file};
use judge_proxy_support::{Proc, mock_judge};
use serde_json::Value;

const TEAM_KEY: &str = "team-key-judge-stage-7a1c2e";
const MOCK_KEY: &str = "sk-mock-provider-judge-0002";
const PROBE: &str = "Water boils at 100 degrees Celsius at sea level.";

fn write_cohort(dir: &Path, judge_model: &str, questions: usize) {
    SimCohort { judge_model, batch_size: Some(4), ..SimCohort::new("stage", 5, questions) }.write(dir).unwrap();
}

fn judge_file(path: &Path, url: &str) -> PathBuf {
    write_judge_file(path, url, "STAGE_TEAM_KEY", 60).unwrap();
    path.to_owned()
}

/// The mock provider (TEST DOUBLE) with `mock_args` behind `cohort
/// judge-proxy`, whose judge `j` requests `judge-1` (`lineage` declared
/// when given). Returns both processes, the proxy's gRPC URL and the mock's
/// base URL.
fn start_judge(dir: &Path, mock_args: &[&str], lineage: Option<&str>) -> (Proc, Proc, String, String) {
    start_judge_with(dir, mock_args, lineage, "")
}

/// [`start_judge`] with `extra` proxy config (a `[retry]` table).
fn start_judge_with(
    dir: &Path,
    mock_args: &[&str],
    lineage: Option<&str>,
    extra: &str,
) -> (Proc, Proc, String, String) {
    let lineage = lineage.map(|l| format!("vendor_lineage = \"{l}\"\n")).unwrap_or_default();
    mock_judge(dir, mock_args, ("STAGE_TEAM_KEY", TEAM_KEY), MOCK_KEY, &lineage, extra)
}

fn cohort(args: &[&str]) -> Command {
    let mut c = Command::new(cargo_bin("cohort-cli", "cohort"));
    c.args(args).env("STAGE_TEAM_KEY", TEAM_KEY);
    c
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Collects the cohort with the judge proxy down (a dead port): the
/// collection goes on (it never waits on the judge) and exits 3, saying
/// how many claims were left unjudged and that `cohort judge` fills them in.
fn collect_with_judge_down(tmp: &Path, dir: &Path) {
    let dead = judge_file(&tmp.join("dead.toml"), &format!("http://127.0.0.1:{}", free_port().unwrap()));
    let out =
        cohort(&["run", dir.to_str().unwrap(), "--judge", dead.to_str().unwrap(), "--no-capture"]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains("not reachable") && said.contains("provider_error") && said.contains("cohort judge"),
        "{said}"
    );
}

fn get_json(url: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { reqwest::get(url).await.unwrap().json::<Value>().await.unwrap() })
}

/// Every claim of the pass: (run id, claim id) -> (verdict, reason).
fn pass_claims(dir: &Path, pass: &str) -> BTreeMap<(String, u64), (String, Option<String>)> {
    let mut out = BTreeMap::new();
    let runs = dir.join(".cohort/passes").join(pass).join("runs");
    for entry in fs::read_dir(runs).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        let run: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let judged = run["claims"].as_array().unwrap().iter().filter(|c| c["verdict"] != "unjudged").count();
        let traces = run["traces"].as_array().unwrap().len();
        // An ensemble keeps no traces (its verdicts are votes, not judge calls).
        assert_eq!(traces, if pass == "vote" { 0 } else { judged }, "one trace per YES/NO claim: {path:?}");
        for c in run["claims"].as_array().unwrap() {
            let key = (run["run_id"].as_str().unwrap().to_owned(), c["claim_id"].as_u64().unwrap());
            let reason = c["unjudged_reason"].as_str().map(str::to_owned);
            assert!(
                out.insert(key, (c["verdict"].as_str().unwrap().to_owned(), reason)).is_none(),
                "one entry per claim"
            );
        }
    }
    out
}

/// [`pass_claims`], empty while the pass has no run file yet.
fn pass_claims_if_any(dir: &Path, pass: &str) -> BTreeMap<(String, u64), (String, Option<String>)> {
    if dir.join(".cohort/passes").join(pass).join("runs").is_dir() { pass_claims(dir, pass) } else { BTreeMap::new() }
}

/// The claims `cohort judge` says it sent.
fn claims_sent(out: &str) -> u64 {
    let at = out.find(" claims sent in ").unwrap_or_else(|| panic!("no sent count in {out}"));
    out[..at].rsplit(' ').next().unwrap().parse().unwrap()
}

/// Proves `cohort judge` needs no judge file for a cohort frozen with the
/// built-in SIMULATED judge (`[judge] provider = "sim"`): it starts the
/// proxy's sim judge in process, as `cohort run` does, says so, and fills
/// in every judgeable claim; a proxy-served judge of another name then
/// opens the same pass (the proxy's name for a judge is recorded, not
/// compared) and finds nothing left to send; and a cohort whose judge is
/// not built in is refused (exit 2) naming `--judge FILE`.
#[test]
fn judge_without_a_file_uses_the_built_in_sim_judge_and_a_served_one_fills_the_same_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    SimCohort { judge_provider: "sim", batch_size: Some(4), ..SimCohort::new("simstage", 5, 4) }.write(&dir).unwrap();
    collect_with_judge_down(tmp.path(), &dir);
    let out = cohort(&["judge", dir.to_str().unwrap()]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("SIMULATED"), "{said}");
    let after = pass_claims(&dir, "default");
    assert!(!after.is_empty() && after.values().all(|(v, _)| v == "yes" || v == "no"), "{after:?}");
    assert!(after.values().any(|(v, _)| v == "yes"), "the sim judge says YES to supported claims: {after:?}");

    let (_mock, _proxy, grpc, _mock_base) = start_judge(tmp.path(), &[], None);
    let jf = judge_file(&tmp.path().join("judge.toml"), &grpc);
    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()]).output().unwrap();
    let served = text(&out);
    assert_eq!(out.status.code(), Some(0), "{served}");
    assert_eq!(claims_sent(&served), 0, "{served}");
    assert_eq!(pass_claims(&dir, "default"), after, "nothing changed");

    let plain = tmp.path().join("mock-judged");
    write_cohort(&plain, "judge-1", 2);
    collect_with_judge_down(tmp.path(), &plain);
    let out = cohort(&["judge", plain.to_str().unwrap()]).output().unwrap();
    let refused = text(&out);
    assert_eq!(out.status.code(), Some(2), "{refused}");
    assert!(refused.contains("--judge FILE") && refused.contains("mock"), "{refused}");
}

/// Proves the stage: collected with the judge down, every cited claim is
/// unjudged(provider_error) in the pass; `cohort judge` fills in every
/// judgeable claim with verdicts that follow the evidence; run again, it
/// sends no claim (the mock provider sees the pre-flight probe only) and
/// changes nothing.
#[test]
fn judge_fills_in_a_cohort_collected_with_the_judge_down_and_sends_nothing_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, "judge-1", 6);
    collect_with_judge_down(tmp.path(), &dir);
    let before = pass_claims(&dir, "default");
    assert!(!before.is_empty());
    assert!(before.values().all(|(v, r)| v == "unjudged" && r.as_deref() == Some("provider_error")), "{before:?}");

    let (_mock, _proxy, grpc, mock_base) = start_judge(tmp.path(), &[], None);
    let jf = judge_file(&tmp.path().join("judge.toml"), &grpc);
    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()]).output().unwrap();
    let first = text(&out);
    assert_eq!(out.status.code(), Some(0), "{first}");
    assert!(!first.contains(TEAM_KEY) && !first.contains(MOCK_KEY), "no key in the output");
    let after = pass_claims(&dir, "default");
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "the same claims");
    assert!(after.values().all(|(v, _)| v == "yes" || v == "no"), "{after:?}");
    assert_eq!(claims_sent(&first), after.len() as u64);
    let requests_first = get_json(&format!("{mock_base}/mock/stats"))["requests"].as_u64().unwrap();
    // The sim's supported sentences are in its snippets: the mock says YES
    // to exactly those. Verdicts follow the evidence, read from records.
    let calls = get_json(&format!("{mock_base}/mock/calls"));
    let mut pairs: Vec<(String, String)> = Vec::new();
    for call in calls.as_array().unwrap() {
        for (claim, line) in call["claims"].as_array().unwrap().iter().zip(call["verdicts"].as_array().unwrap()) {
            if claim != PROBE {
                pairs.push((claim.as_str().unwrap().to_owned(), line.as_str().unwrap().to_owned()));
            }
        }
    }
    assert_eq!(pairs.len(), after.len(), "each claim sent once");
    assert!(pairs.iter().all(|(t, line)| t.starts_with("Source ") == line.ends_with("YES")), "{pairs:?}");
    let expected_yes = pairs.iter().filter(|(t, _)| t.starts_with("Source ")).count();
    let yes = after.values().filter(|(v, _)| v == "yes").count();
    assert_eq!(yes, expected_yes, "YES exactly for the supported sentences");

    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()]).output().unwrap();
    let second = text(&out);
    assert_eq!(out.status.code(), Some(0), "{second}");
    assert_eq!(claims_sent(&second), 0, "{second}");
    let requests_second = get_json(&format!("{mock_base}/mock/stats"))["requests"].as_u64().unwrap();
    assert_eq!(requests_second, requests_first + 1, "the second run sends only the pre-flight probe");
    let last = get_json(&format!("{mock_base}/mock/calls"));
    assert_eq!(last.as_array().unwrap().last().unwrap()["claims"][0], PROBE);
    assert_eq!(pass_claims(&dir, "default"), after, "nothing changed");

    // `cohort passes` shows the pass with its counts.
    let out = cohort(&["passes", dir.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passes"][0]["name"], "default");
    assert_eq!(v["passes"][0]["judged"].as_u64().unwrap(), after.len() as u64);
    assert_eq!(v["passes"][0]["served_models"]["judge-1"].as_u64().unwrap(), after.len() as u64);
    println!("judge stage: {} claims judged ({yes} YES), {requests_first} provider requests", after.len());
}

/// Proves a crash loses nothing: `cohort judge` SIGKILLed while a slow mock
/// provider is answering, then run again, ends with every judgeable claim
/// judged, every verdict present at the kill unchanged, and the rerun
/// sending exactly the claims that had no verdict at the kill (nothing is
/// judged twice).
#[test]
fn judge_killed_mid_way_and_rerun_loses_nothing_and_judges_nothing_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, "judge-1", 12);
    collect_with_judge_down(tmp.path(), &dir);
    let total = pass_claims(&dir, "default").len();
    let (_mock, _proxy, grpc, _) = start_judge(tmp.path(), &["--latency-ms", "150"], None);
    let jf = judge_file(&tmp.path().join("judge.toml"), &grpc);

    let mut child = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap(), "--concurrency", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let judged_now = |dir: &Path| pass_claims(dir, "default").values().filter(|(v, _)| v != "unjudged").count();
    while judged_now(&dir) < 3 {
        assert!(Instant::now() < deadline, "cohort judge judged nothing in 60 s");
        assert!(child.try_wait().unwrap().is_none(), "cohort judge ended before it could be killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = pass_claims(&dir, "default");
    let judged_at_kill: Vec<_> = at_kill.iter().filter(|(_, (v, _))| v != "unjudged").collect();
    assert!(judged_at_kill.len() < total, "killed mid-way: {} of {total} judged", judged_at_kill.len());

    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()]).output().unwrap();
    let rerun = text(&out);
    assert_eq!(out.status.code(), Some(0), "{rerun}");
    let end = pass_claims(&dir, "default");
    assert_eq!(end.len(), total);
    assert!(end.values().all(|(v, _)| v == "yes" || v == "no"), "{end:?}");
    for (key, verdict) in &judged_at_kill {
        assert_eq!(&end[*key], *verdict, "a verdict present at the kill is unchanged: {key:?}");
    }
    assert_eq!(claims_sent(&rerun), (total - judged_at_kill.len()) as u64, "only the claims without a verdict");
    println!("killed with {} of {total} judged; the rerun sent {}", judged_at_kill.len(), claims_sent(&rerun));
}

/// Proves the pre-flight: a proxy whose judge is served by another model
/// than the cohort's frozen judge is refused with exit 2 and a message
/// naming both models, after the probe only (the mock provider counts one
/// request), writing no pass; a proxy declaring another vendor lineage is
/// refused before any call; a proxy that is down, or a wrong team key, is
/// refused too; a cohort without [judge] is refused.
#[test]
fn preflight_refuses_another_judge_before_any_claim_is_sent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    // Frozen with judge-2; the proxy's judge j is served by judge-1.
    write_cohort(&dir, "judge-2", 3);
    let (_mock, _proxy, grpc, mock_base) = start_judge(tmp.path(), &[], None);
    let jf = judge_file(&tmp.path().join("judge.toml"), &grpc);
    // `cohort run --judge` runs the same pre-flight: another judge is a
    // configuration error, so no run starts (exit 2), nothing is judged.
    let out =
        cohort(&["run", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap(), "--no-capture"]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("\"judge-1\"") && said.contains("\"judge-2\"") && said.contains("no run was started"),
        "{said}"
    );
    assert!(!dir.join(".cohort/passes").exists(), "no pass was created");
    assert_eq!(get_json(&format!("{mock_base}/mock/stats"))["requests"], 1, "the probe only");
    let out = cohort(&["run", dir.to_str().unwrap(), "--no-capture"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("\"judge-1\"") && said.contains("\"judge-2\""), "names both models: {said}");
    assert_eq!(get_json(&format!("{mock_base}/mock/stats"))["requests"], 2, "the two probes only");
    assert!(!dir.join(".cohort/passes").exists(), "nothing written");

    // Down, and a wrong key: refused, nothing written.
    let dead = judge_file(&tmp.path().join("dead.toml"), &format!("http://127.0.0.1:{}", free_port().unwrap()));
    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", dead.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not reachable"), "{}", text(&out));
    let out = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap()])
        .env("STAGE_TEAM_KEY", "not-the-team-key-000000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("refused the team key") && !text(&out).contains("not-the-team-key"), "{}", text(&out));
    assert!(!dir.join(".cohort/passes").exists(), "nothing written");
    drop((_mock, _proxy));

    // A proxy declaring another lineage for the right model.
    let tmp2 = tempfile::tempdir().unwrap();
    let dir2 = tmp2.path().join("cohort");
    write_cohort(&dir2, "judge-1", 2);
    let out = cohort(&["run", dir2.to_str().unwrap(), "--no-capture"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let (_mock2, _proxy2, grpc2, mock_base2) = start_judge(tmp2.path(), &[], Some("anthropic"));
    let jf2 = judge_file(&tmp2.path().join("judge.toml"), &grpc2);
    let out = cohort(&["judge", dir2.to_str().unwrap(), "--judge", jf2.to_str().unwrap()]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("\"anthropic\"") && said.contains("\"mock-judges\""), "names both lineages: {said}");
    assert_eq!(get_json(&format!("{mock_base2}/mock/stats"))["requests"], 0, "refused before the probe");

    // No [judge]: refused with a message.
    let toml = fs::read_to_string(dir2.join("cohort.toml")).unwrap();
    let plain = tmp2.path().join("plain");
    write_cohort(&plain, "judge-1", 2);
    fs::write(plain.join("cohort.toml"), &toml[..toml.find("[judge]").unwrap()]).unwrap();
    let out = cohort(&["run", plain.to_str().unwrap(), "--no-capture"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = cohort(&["judge", plain.to_str().unwrap(), "--judge", jf2.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("has no [judge]"), "{}", text(&out));
}

/// Proves an outage during the stage exits 3 with the counts and the hint
/// (the mock provider killed mid-way, the proxy retrying once), keeps what
/// was judged, and a later run fills the rest in; and that an ensemble of
/// three passes is the majority vote, with the pairwise agreement of
/// `cohort passes`.
#[test]
fn outage_exits_3_and_ensembles_vote() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, "judge-1", 10);
    collect_with_judge_down(tmp.path(), &dir);
    let total = pass_claims(&dir, "default").len();
    let sub = tmp.path().join("outage");
    fs::create_dir_all(&sub).unwrap();
    let (mock_proc, _proxy, grpc, _) =
        start_judge_with(&sub, &["--latency-ms", "150"], None, "[retry]\nmax_attempts = 1\n");
    let jf = judge_file(&sub.join("judge.toml"), &grpc);
    let child = cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap(), "--pass", "a"])
        .args(["--concurrency", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pass_claims_if_any(&dir, "a").values().filter(|(v, _)| v != "unjudged").count() < 2 {
        assert!(Instant::now() < deadline, "cohort judge judged nothing in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(mock_proc); // the provider goes away mid-way
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("unjudged provider_error") && said.contains("run `cohort judge` again"), "{said}");
    let partial = pass_claims(&dir, "a");
    let judged: Vec<_> = partial.iter().filter(|(_, (v, _))| v != "unjudged").collect();
    assert!(!judged.is_empty() && judged.len() < total, "{} of {total}", judged.len());
    // The provider is back (a new mock and proxy): the rerun fills in.
    let (_mock, _proxy2, grpc, _) = start_judge(tmp.path(), &[], None);
    let jf = judge_file(&tmp.path().join("judge.toml"), &grpc);
    let out =
        cohort(&["judge", dir.to_str().unwrap(), "--judge", jf.to_str().unwrap(), "--pass", "a"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let a = pass_claims(&dir, "a");
    assert!(a.values().all(|(v, _)| v == "yes" || v == "no"));
    for (key, verdict) in judged {
        assert_eq!(&a[key], verdict, "kept through the outage: {key:?}");
    }

    // Passes b and c are copies of a with planted disagreements, to check
    // the vote; then the ensemble and the agreement.
    for (name, flip) in [("b", 1usize), ("c", 2usize)] {
        let src = dir.join(".cohort/passes/a");
        let dst = dir.join(".cohort/passes").join(name);
        fs::create_dir_all(dst.join("runs")).unwrap();
        let mut config: Value = serde_json::from_slice(&fs::read(src.join("pass.json")).unwrap()).unwrap();
        config["name"] = name.into();
        fs::write(dst.join("pass.json"), serde_json::to_vec(&config).unwrap()).unwrap();
        let mut flipped = 0;
        for entry in fs::read_dir(src.join("runs")).unwrap() {
            let path = entry.unwrap().path();
            let mut run: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            for c in run["claims"].as_array_mut().unwrap() {
                if flipped < flip && c["verdict"] == "yes" {
                    c["verdict"] = "no".into();
                    flipped += 1;
                }
            }
            fs::write(dst.join("runs").join(path.file_name().unwrap()), serde_json::to_vec(&run).unwrap()).unwrap();
        }
    }
    let out = cohort(&["judge", dir.to_str().unwrap(), "--ensemble", "vote", "--of", "a,b,c"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let a = pass_claims(&dir, "a");
    let b = pass_claims(&dir, "b");
    let c = pass_claims(&dir, "c");
    let vote = pass_claims(&dir, "vote");
    for (key, (va, _)) in &a {
        let yes = [va, &b[key].0, &c[key].0].iter().filter(|v| **v == "yes").count();
        let expected = if yes >= 2 { "yes" } else { "no" };
        assert_eq!(vote[key].0, expected, "{key:?}");
    }
    let out = cohort(&["passes", dir.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ab = v["agreement"].as_array().unwrap().iter().find(|p| p["a"] == "a" && p["b"] == "b").unwrap();
    let n = a.len() as f64;
    assert_eq!(ab["items"].as_u64().unwrap(), a.len() as u64);
    assert!((ab["raw_agreement"]["value"].as_f64().unwrap() - (n - 1.0) / n).abs() < 1e-12, "{ab}");
}
