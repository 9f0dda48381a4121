//! The manual arm as real processes on the embedded store: `cohort run`
//! collects the automatic arm and stops naming the manual runs; `cohort
//! pending` offers the manual runs one at a time (the arm's cap) in planned
//! order with their exact prompts; `cohort submit` records what the person
//! saw (output, times, clarification with the suffix as the reply, version
//! label, seed 004's metadata) and refuses, changing nothing, a run not due
//! or already submitted; `cohort status` and `cohort report` show the
//! manual runs like any other.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use cohort_core::taxonomy::Outcome;
use cohort_ledger::sqlite::SqliteLedger;
use cohort_ledger::{Ledger, RunRow};

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");
const SUFFIX: &str = "Cite original sources for every claim.";

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn question(i: usize) -> String {
    format!("What is known about topic {i}, and what is disputed?")
}

/// Three questions, a sim arm and a manual arm with concurrency 1.
fn write_cohort(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let questions: Vec<String> =
        (1..=3).map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "{}"}}"#, question(i))).collect();
    fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", questions.join(",\n"))).unwrap();
    fs::write(
        dir.join("cohort.toml"),
        r#"name = "manual-test"
seed = 11
run_timeout_secs = 5
categories = ["science"]

[[arms]]
id = "s"
label = "Sim"
adapter = "sim"
pinned_version = "s-1"
vendor_lineage = "x"
concurrency = 2

[[arms]]
id = "m"
label = "Manual Product"
adapter = "manual"
pinned_version = "engine-7"
vendor_lineage = "y"
concurrency = 1
settings = { plan = "Team", region = "EU", instructions = "Use Deep Scan mode." }
"#,
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), format!("{SUFFIX}\n")).unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

fn ledger(dir: &Path) -> SqliteLedger {
    SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap()
}

/// The manual arm's run ids in the manifest's planned order.
fn manual_order(dir: &Path) -> Vec<String> {
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .filter(|r| r.contains(":m:"))
        .collect()
}

fn pending_json(d: &str) -> serde_json::Value {
    let out = cohort(&["pending", d, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["arms"].as_array().unwrap().len(), 1, "{v}");
    v["arms"][0].clone()
}

fn artifact(dir: &Path, sha: &str) -> Vec<u8> {
    fs::read(dir.join(".cohort/artifacts/sha256").join(&sha[..2]).join(sha)).unwrap()
}

fn iso(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    let p = e.unwrap().path();
                    if p.is_dir() { count_files(&p) } else { 1 }
                })
                .sum()
        })
        .unwrap_or(0)
}

/// What a refused submit must leave as it was: the ledger's runs and
/// status, and the artifact store.
async fn snapshot(dir: &Path) -> (Vec<RunRow>, cohort_ledger::Status, usize) {
    let l = ledger(dir);
    (l.runs().await.unwrap(), l.status().await.unwrap(), count_files(&dir.join(".cohort/artifacts")))
}

/// Proves the whole manual-arm walk-through (issue 10, "A manual-arm
/// integration test"): run stops with exit 4 naming the manual runs;
/// pending offers the first due run with the exact prompt, and again the
/// same one (cap 1); submit records output, times, clarification (suffix
/// as the reply), version and metadata; the next pending offers the next
/// run in planned order; a run not due and a second submit are refused
/// with exit 2 and change nothing; a refusal is recorded as refused; an
/// unaccepted version label pauses the arm; status and the report show the
/// manual runs.
#[tokio::test]
async fn manual_runs_are_offered_in_order_submitted_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("c");
    write_cohort(&dir);
    let d = dir.to_str().unwrap();

    // `cohort run` collects the sim arm and stops: the manual runs wait.
    let run = cohort(&["run", d, "--workers", "1"]);
    let t = text(&run);
    assert_eq!(run.status.code(), Some(4), "{t}");
    assert!(t.contains(&format!("3 manual runs of m wait for a person: `cohort pending {d}`")), "{t}");
    let status = ledger(&dir).status().await.unwrap();
    let arm = |s: &cohort_ledger::Status, id: &str| s.arms.iter().find(|a| a.id == id).unwrap().clone();
    assert_eq!(arm(&status, "s").by_outcome.values().sum::<u64>(), 3, "{status:?}");
    assert_eq!(arm(&status, "m").by_outcome.values().sum::<u64>(), 0, "{status:?}");
    assert_eq!(arm(&status, "m").leased, 0, "no worker took a manual run");

    let order = manual_order(&dir);
    assert_eq!(order.len(), 3);
    let prompt_of = |run_id: &str| {
        let q: usize = run_id.split(':').next().unwrap().trim_start_matches('q').parse().unwrap();
        format!("{}\n\n{SUFFIX}", question(q))
    };

    // The first due run, with its exact prompt; asked again, the same run
    // (the cap is 1: no second grant).
    let first = pending_json(d);
    let open = first["open"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{first}");
    assert_eq!(open[0]["run_id"], order[0].as_str());
    assert_eq!(open[0]["attempt"], 1);
    assert_eq!(open[0]["prompt"], prompt_of(&order[0]).as_str());
    assert_eq!(first["instructions"], "Use Deep Scan mode.");
    let prompts = tmp.path().join("prompts");
    let again = cohort(&["pending", d, "--write", prompts.to_str().unwrap()]);
    let t = text(&again);
    assert!(again.status.success(), "{t}");
    assert!(t.contains(&order[0]) && t.contains(&prompt_of(&order[0])), "{t}");
    assert!(!t.contains(&order[1]), "no second grant beyond the cap: {t}");
    assert!(t.contains("concurrency cap (1) is reached"), "{t}");
    let file = prompts.join(format!("{}.prompt.txt", order[0].replace(':', "+")));
    assert_eq!(fs::read_to_string(&file).unwrap(), prompt_of(&order[0]));
    let status = ledger(&dir).status().await.unwrap();
    assert_eq!(arm(&status, "m").leased, 1, "{status:?}");
    let shown = cohort(&["status", d, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let m = shown["arms"].as_array().unwrap().iter().find(|a| a["id"] == "m").unwrap().clone();
    assert_eq!(m["leased"], 1, "status shows the person's run as leased: {m}");
    let shown = text(&cohort(&["status", d]));
    assert!(shown.contains("0/3 MANUAL, 1 leased to manual:m"), "{shown}");

    // A run that is not due yet is refused and changes nothing.
    let output = tmp.path().join("output.md");
    let body =
        "Ice floats because it is less dense than liquid water [1].\n\n## References\n\n1. https://example.org/ice\n";
    fs::write(&output, body).unwrap();
    let before = snapshot(&dir).await;
    let early = cohort(&["submit", d, &order[1], output.to_str().unwrap(), "--no-capture"]);
    assert_eq!(early.status.code(), Some(2), "{}", text(&early));
    assert!(text(&early).contains("run it after `cohort pending"), "{}", text(&early));
    assert_eq!(snapshot(&dir).await, before);

    // Submit the open run with times, a clarification and a version.
    let clarification = tmp.path().join("clarification.txt");
    fs::write(&clarification, "Which period do you mean?\n").unwrap();
    let started = SystemTime::now();
    std::thread::sleep(Duration::from_millis(20));
    let ended = SystemTime::now();
    let submit = cohort(&[
        "submit",
        d,
        &order[0],
        output.to_str().unwrap(),
        "--started",
        &iso(started),
        "--ended",
        &iso(ended),
        "--clarification",
        clarification.to_str().unwrap(),
        "--version",
        "engine-7",
        "--credits",
        "12.5",
        "--usage-input-tokens",
        "100",
        "--usage-output-tokens",
        "2000",
        "--setting",
        "mode=deep",
        "--region",
        "EU-West",
        "--no-capture",
    ]);
    let t = text(&submit);
    assert!(submit.status.success(), "{t}");
    assert!(t.contains("completed") && t.contains("engine-7"), "{t}");
    let rows = ledger(&dir).runs().await.unwrap();
    let row = rows.iter().find(|r| r.run_id == order[0]).unwrap();
    assert_eq!(row.outcome, Some(Outcome::Completed), "{row:?}");
    assert_eq!(row.observed_version.as_deref(), Some("engine-7"));
    let record: serde_json::Value = serde_json::from_slice(&artifact(&dir, &row.record_sha256)).unwrap();
    let output_sha = record["output_sha256"].as_str().unwrap();
    assert_eq!(String::from_utf8(artifact(&dir, output_sha)).unwrap(), body);
    assert_eq!(record["prompt"], prompt_of(&order[0]).as_str());
    assert_eq!(record["started_at"], iso(started).as_str());
    assert_eq!(record["ended_at"], iso(ended).as_str());
    let turns: Vec<(&str, &str)> = record["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["role"].as_str().unwrap(), t["text"].as_str().unwrap()))
        .collect();
    let prompt = prompt_of(&order[0]);
    assert_eq!(
        turns,
        [
            ("user", prompt.as_str()),
            ("system_under_test", "Which period do you mean?"),
            ("user", SUFFIX),
            ("system_under_test", body)
        ]
    );
    assert_eq!(record["observed_version"], "engine-7");
    assert_eq!(record["attempt_class"], "ok");
    assert_eq!(record["token_usage"]["input_tokens"], 100);
    assert_eq!(record["token_usage"]["output_tokens"], 2000);
    assert_eq!(record["manual"]["plan"], "Team", "the arm's frozen plan");
    assert_eq!(record["manual"]["region"], "EU-West", "--region overrides the arm's");
    assert_eq!(record["manual"]["credits_debited"], "12.5");
    assert_eq!(record["manual"]["settings"]["mode"], "deep");
    assert_eq!(record["manual"]["times_given"], true);
    assert_eq!(record["manual"]["holder"], "manual:m");
    assert_eq!(record["attempts"][0]["worker"], "manual:m");
    // Scored as an automatic output is: claims and the deterministic
    // metrics; without a judge, support is unmeasured.
    let report = &record["scoring"]["report"];
    assert_eq!(report["claims"].as_array().map(Vec::len), Some(1), "scored: {record}");
    assert_eq!(report["metrics"]["unresolved_citations"], 0, "{record}");
    assert_eq!(report["support"]["rate"], serde_json::Value::Null);

    // A second submit of the same run is refused and changes nothing.
    let before = snapshot(&dir).await;
    let twice = cohort(&["submit", d, &order[0], output.to_str().unwrap(), "--no-capture"]);
    let t = text(&twice);
    assert_eq!(twice.status.code(), Some(2), "{t}");
    assert!(t.contains("already submitted at") && t.contains("a result is never replaced"), "{t}");
    assert_eq!(snapshot(&dir).await, before);

    // The next pending offers the next run in planned order; it is refused
    // by the product (an empty file: nothing shown).
    let next = pending_json(d);
    assert_eq!(next["open"][0]["run_id"], order[1].as_str(), "{next}");
    let empty = tmp.path().join("empty.txt");
    fs::write(&empty, "").unwrap();
    let refused = cohort(&["submit", d, &order[1], empty.to_str().unwrap(), "--refused", "declined the topic"]);
    assert!(refused.status.success(), "{}", text(&refused));

    // The last run shows a label the arm does not accept: it is recorded,
    // and the arm pauses, as for an automatic run.
    let last = pending_json(d);
    assert_eq!(last["open"][0]["run_id"], order[2].as_str(), "{last}");
    let paused = cohort(&["submit", d, &order[2], output.to_str().unwrap(), "--version", "engine-8", "--no-capture"]);
    let t = text(&paused);
    assert!(paused.status.success(), "{t}");
    assert!(t.contains("PAUSED: version changed: pinned engine-7, observed engine-8"), "{t}");

    let done = cohort(&["pending", d]);
    let t = text(&done);
    assert!(done.status.success(), "{t}");
    assert!(t.contains("nothing due: every run of the arm has its outcome (3 of 3)"), "{t}");

    let l = ledger(&dir);
    let status = l.status().await.unwrap();
    assert!(status.done(), "{status:?}");
    let m = arm(&status, "m");
    assert_eq!(m.by_outcome.get(&Outcome::Completed), Some(&2));
    assert_eq!(m.by_outcome.get(&Outcome::Refused), Some(&1));
    assert!(m.paused.is_some());
    let shown = cohort(&["status", d]);
    let s = text(&shown);
    assert!(s.contains("3/3") && s.contains("PAUSED"), "{s}");

    // The report lists the manual runs with their outcomes.
    let report = cohort(&["report", d]);
    let t = text(&report);
    assert!(report.status.success(), "{t}");
    let line = t.lines().find(|l| l.starts_with("report: ")).unwrap();
    let folder = PathBuf::from(line.trim_start_matches("report: ").trim());
    let csv = fs::read_to_string(folder.join("runs.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let outcomes: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|cells| cells[col("arm")] == "m")
        .map(|cells| (cells[col("run_id")].clone(), cells[col("outcome")].clone()))
        .collect();
    assert_eq!(outcomes.len(), 3, "{csv}");
    for (run_id, outcome) in &outcomes {
        let expected = if *run_id == order[1] { "refused" } else { "completed" };
        assert_eq!(outcome, expected, "{run_id}: {csv}");
    }
}

/// Proves bad submissions are refused with exit 2 and write nothing: an
/// unknown run id, a run of an automatic arm, an empty or non-UTF-8
/// output, bad times, and pending for an arm that is not manual.
#[tokio::test]
async fn bad_submissions_are_refused_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("c");
    write_cohort(&dir);
    let d = dir.to_str().unwrap();
    let freeze = cohort(&["freeze", d]);
    assert!(freeze.status.success(), "{}", text(&freeze));
    let order = manual_order(&dir);
    let offered = pending_json(d);
    assert_eq!(offered["open"][0]["run_id"], order[0].as_str());
    let output = tmp.path().join("out.md");
    fs::write(&output, "An answer [1].\n\n1. https://example.org/\n").unwrap();
    let empty = tmp.path().join("empty.md");
    fs::write(&empty, "  \n").unwrap();
    let binary = tmp.path().join("binary.md");
    fs::write(&binary, [b'o', b'k', 0xff, 0xfe]).unwrap();
    let o = output.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["submit", d, "q9:m:1", o], "unknown run id"),
        (vec!["submit", d, "q1:s:1", o], "not a manual arm"),
        (vec!["submit", d, &order[0], empty.to_str().unwrap()], "the output file is empty"),
        (vec!["submit", d, &order[0], binary.to_str().unwrap()], "not UTF-8"),
        (vec!["submit", d, &order[0], o, "--started", "yesterday"], "RFC 3339"),
        (vec!["submit", d, &order[0], o, "--started", "2001-01-01T00:00:00Z"], "before the run was offered"),
        (vec!["submit", d, &order[0], o, "--ended", "2999-01-01T00:00:00Z"], "after the collection window closed"),
        (vec!["submit", d, &order[0], o, "--credits", "ten"], "--credits"),
        (vec!["pending", d, "--arm", "s"], "not `manual`"),
    ];
    let before = snapshot(&dir).await;
    for (args, message) in cases {
        let out = cohort(&args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(message), "{args:?}: {t}");
    }
    assert_eq!(snapshot(&dir).await, before);
}

/// Proves a label frozen in `accepted_versions` does not pause the manual
/// arm, while another label does, and that every hint printed then names
/// the real cohort directory and can be run as printed (issue 19): submit
/// says the arm is paused and how to resume it (not that `pending` offers
/// the next run), with the judge hint's whole command inside its
/// backticks; `cohort status` prints the resume command with the path; and
/// that command, run as printed, resumes the arm and accepts the label.
#[tokio::test]
async fn accepted_versions_do_not_pause_and_pause_hints_name_the_cohort() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("c");
    write_cohort(&dir);
    let toml = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let toml = toml.replacen(
        "pinned_version = \"engine-7\"\n",
        "pinned_version = \"engine-7\"\naccepted_versions = [\"engine 7 (build 2)\"]\n",
        1,
    );
    fs::write(dir.join("cohort.toml"), toml).unwrap();
    let d = dir.to_str().unwrap();
    let freeze = cohort(&["freeze", d]);
    assert!(freeze.status.success(), "{}", text(&freeze));
    let order = manual_order(&dir);
    let output = tmp.path().join("output.md");
    fs::write(&output, "Ice floats because it is less dense than liquid water [1].\n\n1. https://example.org/ice\n")
        .unwrap();
    let submit = |run_id: &str, version: &str| {
        let out = cohort(&["submit", d, run_id, output.to_str().unwrap(), "--version", version, "--no-capture"]);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        t
    };

    assert_eq!(pending_json(d)["open"][0]["run_id"], order[0].as_str());
    let t = submit(&order[0], "engine 7 (build 2)");
    assert!(!t.contains("PAUSED"), "a label frozen as accepted: {t}");
    assert!(t.contains(&format!("next: `cohort pending {d}` offers the next due run")), "{t}");
    assert!(
        t.contains(&format!(
            "support is unmeasured until `cohort judge {d} --judge FILE --capture` (its cited sources were not fetched)"
        )),
        "the whole command inside the backticks: {t}"
    );

    assert_eq!(pending_json(d)["open"][0]["run_id"], order[1].as_str());
    let t = submit(&order[1], "engine-8");
    assert!(t.contains("arm m is PAUSED: version changed: pinned engine-7, observed engine-8"), "{t}");
    assert!(!t.contains("offers the next due run"), "the arm is paused: {t}");
    assert!(t.contains(&format!("next: arm m is paused: `cohort pending {d}` offers none of its runs")), "{t}");
    let resume = format!("cohort resume {d} --arm m --ack TEXT --accept-version engine-8");
    assert!(t.contains(&format!("`{resume}`")), "{t}");
    let listing = pending_json(d);
    assert!(listing["open"].as_array().unwrap().is_empty(), "a paused arm offers nothing: {listing}");

    let shown = text(&cohort(&["status", d]));
    assert!(
        shown.contains(&format!(
            "resume with: cohort resume {d} --arm m --ack \"why it is fine\" [--accept-version LABEL]"
        )),
        "{shown}"
    );
    assert!(!shown.contains(" DIR "), "{shown}");

    // The printed command, as printed (the path has no spaces).
    let args: Vec<&str> = resume.split(' ').skip(1).collect();
    let resumed = cohort(&args);
    assert!(resumed.status.success(), "{}", text(&resumed));
    let status = ledger(&dir).status().await.unwrap();
    let m = status.arms.iter().find(|a| a.id == "m").unwrap();
    assert_eq!(m.paused, None);
    assert_eq!(m.accepted_versions, ["engine-7", "engine 7 (build 2)", "engine-8"]);
    assert_eq!(pending_json(d)["open"][0]["run_id"], order[2].as_str(), "resumed: the next run is offered");
}

/// Proves two `cohort submit` of one manual run at once record it once
/// (issue 23): one exits 0, the other exits 2 naming the first ("already
/// submitted at ..."), and the artifact store holds exactly what the
/// winner wrote (the loser left no output or record), eight races in a
/// row.
#[tokio::test]
async fn concurrent_submits_of_one_run_record_it_once() {
    for race in 0..8 {
        let tmp = tempfile::tempdir().unwrap();
        let dir: PathBuf = tmp.path().join("c");
        write_cohort(&dir);
        let d = dir.to_str().unwrap();
        assert!(cohort(&["freeze", d]).status.success());
        let offered = pending_json(d);
        let run_id = offered["open"][0]["run_id"].as_str().unwrap().to_owned();
        let before = count_files(&dir.join(".cohort/artifacts"));
        let outputs: Vec<PathBuf> = (0..2)
            .map(|i| {
                let path = tmp.path().join(format!("out{i}.md"));
                fs::write(&path, format!("Answer {i} of race {race} [1].\n\n1. https://example.org/{i}\n")).unwrap();
                path
            })
            .collect();
        let children: Vec<std::process::Child> = outputs
            .iter()
            .map(|o| {
                Command::new(COHORT)
                    .args(["submit", d, &run_id, o.to_str().unwrap()])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        let winner = codes.iter().position(|c| *c == Some(0)).unwrap_or_else(|| panic!("race {race}: {codes:?}"));
        let loser = &outs[1 - winner];
        let t = text(loser);
        assert_eq!(loser.status.code(), Some(2), "race {race}: {t}");
        assert!(t.contains(&format!("run {run_id:?} is already submitted at")), "race {race}: {t}");
        let rows = ledger(&dir).runs().await.unwrap();
        let row = rows.iter().find(|r| r.run_id == run_id).unwrap();
        let record: serde_json::Value = serde_json::from_slice(&artifact(&dir, &row.record_sha256)).unwrap();
        let output_sha = record["output_sha256"].as_str().unwrap_or_default().to_owned();
        let recorded = String::from_utf8(artifact(&dir, &output_sha)).unwrap_or_default();
        assert!(recorded.starts_with(&format!("Answer {winner} of race {race}")), "race {race}: {recorded:?}");
        // The winner wrote its output and its record; nothing else is new.
        assert_eq!(count_files(&dir.join(".cohort/artifacts")), before + 2, "race {race}: the loser left an artifact");
    }
}
