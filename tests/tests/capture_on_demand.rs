//! Capture only when it is needed (issue 10): without a judge, `cohort run`
//! fetches no cited URL unless `--capture` asks; `cohort judge --capture`
//! fetches the sources collection never captured, records them in the pass
//! with their access time, judges against them, and fetches nothing twice.
//!
//! The system under test is a `command` arm that cites one page on a
//! loopback HTTP server of this test, which counts every request; the judge
//! is the mock provider (a TEST DOUBLE) behind `cohort judge-proxy`, which
//! says YES exactly when the claim's sentence is in its evidence.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod judge_proxy_support;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cohort_tests::{cargo_bin, write_judge_file};
use judge_proxy_support::mock_judge;
use serde_json::Value;

const TEAM_KEY: &str = "team-key-capture-on-demand-51f0";
const MOCK_KEY: &str = "sk-mock-provider-capture-0003";
const CLAIM: &str = "Water boils at 100 degrees Celsius at sea level.";

/// A page server on 127.0.0.1 that answers every request with one HTML
/// page holding [`CLAIM`], and counts the requests.
fn page_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/boiling", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    // Detached on purpose: it dies with the test process.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let body = format!(
                "<html><head><title>Boiling point</title></head><body><article><h1>Boiling point</h1>\
                 <p>{CLAIM} At higher altitudes the boiling point is lower.</p></article></body></html>"
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, hits)
}

/// A cohort of two questions, one `command` arm whose answer cites `url`
/// (no snippets of its own), judged by the mock's `judge-1`.
fn write_cohort(dir: &Path, url: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::write(
        dir.join("questions.json"),
        r#"[{"id": "q1", "category": "science", "text": "At what temperature does water boil?"},
{"id": "q2", "category": "science", "text": "Does altitude change the boiling point?"}]"#,
    )
    .unwrap();
    let answer = format!("{} [1].\\n\\nReferences\\n[1] {url}\\n", CLAIM.trim_end_matches('.'));
    fs::write(
        dir.join("cohort.toml"),
        format!(
            "name = \"capture\"\nseed = 3\nrun_timeout_secs = 30\ncategories = [\"science\"]\n\n\
             [[arms]]\nid = \"cmd\"\nlabel = \"Command\"\nadapter = \"command\"\npinned_version = \"cmd-1\"\n\
             vendor_lineage = \"local\"\nconcurrency = 2\n\
             settings = {{ program = \"/bin/sh\", args = [\"-c\", \"cat >/dev/null; printf '{answer}'\"], version_label = \"cmd-1\" }}\n\n\
             [judge]\nprovider = \"mock\"\nmodel = \"judge-1\"\nvendor_lineage = \"mock-judges\"\ntemperature = 0.0\n"
        ),
    )
    .unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

fn cohort(args: &[&str]) -> Output {
    Command::new(cargo_bin("cohort-cli", "cohort")).args(args).env("CAPTURE_TEAM_KEY", TEAM_KEY).output().unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The run records in the artifact store of the cohort in `dir` (every
/// stored JSON object with a `record_version` and a `run_id`).
fn records(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join(".cohort/artifacts")];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(v) = serde_json::from_slice::<Value>(&fs::read(&path).unwrap())
                && v.get("record_version").is_some()
                && v.get("run_id").is_some()
            {
                out.push(v);
            }
        }
    }
    out
}

fn captures_in(record: &Value) -> usize {
    record["scoring"]["captures"].as_array().map_or(0, Vec::len)
}

/// The pass's run files, as JSON.
fn pass_runs(dir: &Path) -> Vec<Value> {
    let runs = dir.join(".cohort/passes/default/runs");
    let mut out: Vec<Value> = fs::read_dir(runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_slice(&fs::read(p).unwrap()).unwrap())
        .collect();
    out.sort_by_key(|r| r["run_id"].as_str().unwrap().to_owned());
    out
}

/// Proves the rule of capture: a plain `cohort run` (no judge) fetches
/// nothing; `--capture` fetches the cited page once per run and records it;
/// `cohort judge` without `--capture` leaves an uncaptured run's claim
/// source_unavailable and says how to fetch it; with `--capture` it fetches
/// each uncaptured source once, records the capture in the pass and judges
/// the claim YES against the page; run again, it fetches nothing.
#[test]
fn sources_are_fetched_only_when_asked_or_needed() {
    let tmp = tempfile::tempdir().unwrap();
    let (url, hits) = page_server();

    // No judge, no --capture: the web is not touched.
    let plain = tmp.path().join("plain");
    write_cohort(&plain, &url);
    let out = cohort(&["run", plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("cited sources are not fetched (add --capture"), "{}", text(&out));
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a plain run fetched a cited URL");
    let plain_records = records(&plain);
    assert_eq!(plain_records.len(), 2);
    assert!(plain_records.iter().all(|r| captures_in(r) == 0), "no capture recorded");

    // No judge, --capture: each run's cited page is fetched and recorded.
    let asked = tmp.path().join("asked");
    write_cohort(&asked, &url);
    let out = cohort(&["run", asked.to_str().unwrap(), "--capture", "--capture-private-addresses"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(hits.load(Ordering::SeqCst), 2, "one fetch per run");
    let asked_records = records(&asked);
    assert!(asked_records.iter().all(|r| captures_in(r) == 1), "{asked_records:?}");
    assert!(asked_records.iter().all(|r| r["scoring"]["captures"][0]["accessible"] == true));

    // Judging the plain cohort: without --capture nothing is fetched and
    // the claim has no evidence.
    let (_mock, _proxy, grpc, _mock_base) =
        mock_judge(tmp.path(), &[], ("CAPTURE_TEAM_KEY", TEAM_KEY), MOCK_KEY, "", "");
    let jf = tmp.path().join("judge.toml");
    write_judge_file(&jf, &grpc, "CAPTURE_TEAM_KEY", 60).unwrap();
    let judge = |extra: &[&str]| {
        let mut args = vec!["judge", plain.to_str().unwrap(), "--judge", jf.to_str().unwrap()];
        args.extend_from_slice(extra);
        cohort(&args)
    };
    let out = judge(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("can be fetched now with --capture"), "{}", text(&out));
    assert_eq!(hits.load(Ordering::SeqCst), 2, "judging without --capture fetched");
    let runs = pass_runs(&plain);
    assert_eq!(runs.len(), 2);
    for run in &runs {
        assert_eq!(run["claims"][0]["verdict"], "unjudged", "{run}");
        assert_eq!(run["claims"][0]["unjudged_reason"], "source_unavailable", "{run}");
    }

    // With --capture: fetched once per run, kept in the pass, judged YES.
    let out = judge(&["--capture", "--capture-private-addresses"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("2 source(s) captured now, at judging time"), "{said}");
    assert!(!said.contains(TEAM_KEY) && !said.contains(MOCK_KEY), "no key in the output");
    assert_eq!(hits.load(Ordering::SeqCst), 4, "one fetch per uncaptured run");
    let runs = pass_runs(&plain);
    for run in &runs {
        assert_eq!(run["claims"][0]["verdict"], "yes", "the page's sentence supports the claim: {run}");
        let captures = run["captures"].as_array().unwrap();
        assert_eq!(captures.len(), 1, "{run}");
        assert_eq!(captures[0]["url"], url.as_str());
        assert_eq!(captures[0]["http_status"], 200);
        assert!(captures[0]["accessed_at"].as_str().unwrap().ends_with('Z'), "{run}");
    }

    // Again: everything is judged and captured, nothing is fetched.
    let out = judge(&["--capture", "--capture-private-addresses"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("0 source(s) captured now"), "{}", text(&out));
    assert_eq!(hits.load(Ordering::SeqCst), 4, "a source captured once is not fetched again");
    assert_eq!(pass_runs(&plain), runs, "nothing changed");
}
