//! `cohort score`, run as a real process: the golden reports of
//! cohort-core score to the same JSON through the binary, flags choose the
//! format and pass run facts and snippets through, and bad input gets a
//! clear error and a failure exit code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/golden").join(name)
}

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "cohort failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every golden report prints, through the binary, exactly the JSON the
/// core golden test expects (snippets passed with --snippets).
#[test]
fn prints_the_golden_json_for_every_golden_report() {
    let dir = golden("");
    let mut checked = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".md")) else {
            continue;
        };
        let mut args = vec!["score".to_owned(), path.to_str().unwrap().to_owned()];
        let snippets = dir.join(format!("{name}.snippets.json"));
        if snippets.exists() {
            args.extend(["--snippets".to_owned(), snippets.to_str().unwrap().to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = json(&cohort(&args));
        let expected: Value =
            serde_json::from_str(&fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap()).unwrap();
        assert_eq!(got, expected, "{name}");
        checked += 1;
    }
    assert!(checked >= 10, "checked {checked} golden reports");
}

/// `--format` overrides detection: a Markdown-link report scored as
/// numbered has no citations (resolution None) and says why in a warning.
#[test]
fn format_flag_overrides_detection() {
    let file = golden("03_links_tracking_merge.md");
    let links = json(&cohort(&["score", file.to_str().unwrap(), "--format", "markdown-links"]));
    assert_eq!(links["format"], "markdown_links");
    assert_eq!(links["format_detected"], false);
    let numbered = json(&cohort(&["score", file.to_str().unwrap(), "--format", "numbered", "--compact"]));
    assert_eq!(numbered["format"], "numbered");
    assert_eq!(numbered["metrics"]["total_citations"], 0);
    assert!(numbered["metrics"]["resolution_rate"].is_null());
    assert!(numbered["warnings"][0].as_str().unwrap().contains("inline web link"));
}

/// Wall time and cost given on the command line land in the metrics;
/// without them they are null, never invented.
#[test]
fn run_facts_pass_through() {
    let file = golden("08_no_citations.md");
    let without = json(&cohort(&["score", file.to_str().unwrap()]));
    assert!(without["metrics"]["wall_time_ms"].is_null());
    assert!(without["metrics"]["cost"].is_null());
    let with = json(&cohort(&["score", file.to_str().unwrap(), "--wall-time", "2m 5s", "--cost", "0.0425"]));
    assert_eq!(with["metrics"]["wall_time_ms"], 125_000);
    assert_eq!(with["metrics"]["cost"], serde_json::json!({"micros": 42_500, "currency": "USD"}));
}

/// `-` reads the report from standard input.
#[test]
fn reads_standard_input() {
    let mut child =
        Command::new(COHORT).args(["score", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"Prices rose 5% last year [1].\n\n[1] Source https://x.org/a\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let report = json(&out);
    assert_eq!(report["metrics"]["total_citations"], 1);
    assert_eq!(report["metrics"]["resolution_rate"], 1.0);
    assert_eq!(report["references"][0]["url"], "https://x.org/a");
}

/// Missing files, non-UTF-8 files, oversized files and bad snippet files
/// fail with an error that names the problem.
#[test]
fn bad_input_fails_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = cohort(&["score", tmp.path().join("nope.md").to_str().unwrap()]);
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("cannot open the report"), "{}", stderr(&missing));

    let binary = tmp.path().join("bin.md");
    fs::write(&binary, b"ok text \xff\xfe more").unwrap();
    let out = cohort(&["score", binary.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not UTF-8 text (invalid byte at offset 8)"), "{}", stderr(&out));

    let huge = tmp.path().join("huge.md");
    fs::write(&huge, vec![b'a'; cohort_core::scoring::MAX_REPORT_BYTES + 1]).unwrap();
    let out = cohort(&["score", huge.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("larger than"), "{}", stderr(&out));

    let snippets = tmp.path().join("snippets.json");
    fs::write(&snippets, r#"{"one": ["text"]}"#).unwrap();
    let report = golden("09_sources_unreachable.md");
    let out = cohort(&["score", report.to_str().unwrap(), "--snippets", snippets.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("key `one` is not a citation index"), "{}", stderr(&out));

    let out = cohort(&["score", report.to_str().unwrap(), "--cost", "1.5e3"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a decimal amount"), "{}", stderr(&out));
}
