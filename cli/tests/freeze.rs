//! `cohort freeze`, run as a real process on copies of the shipped
//! examples: the manifest, idempotence, refusal of changes, amendments, and
//! a clear error that writes nothing for every kind of bad input.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cohort_core::hash::sha256_hex;
use cohort_core::manifest::Manifest;

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// A fresh copy of `examples/NAME` in a temporary directory.
fn copy_example(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    support::copy_example(name, &dir);
    (tmp, dir)
}

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn freeze(dir: &Path) -> Output {
    cohort(&["freeze", dir.to_str().unwrap()])
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn manifest(dir: &Path) -> Manifest {
    serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// The hash `sha256sum` prints for a file (the coreutils program when it is
/// installed, else the same digest computed here).
fn sha256sum(path: &Path) -> String {
    match Command::new("sha256sum").arg(path).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_owned(),
        _ => sha256_hex(&fs::read(path).unwrap()),
    }
}

/// Proves the manifest of protocol-v1 holds the real file hashes, 90 run
/// ids, and the order algorithm v1 derives, as re-derived independently by
/// scripts/rederive_order.py (plain Python, no cohort code).
#[test]
fn protocol_v1_manifest_has_file_hashes_and_the_v1_order() {
    let (_tmp, dir) = copy_example("protocol-v1");
    let out = freeze(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(&dir);
    // The five files and the uncertainty key ([review] requires it).
    assert_eq!(m.files.len(), 6);
    assert!(m.files.contains_key("uncertainty_key.json"));
    for (file, sha) in &m.files {
        assert_eq!(sha, &sha256sum(&dir.join(file)), "{file}");
    }
    assert_eq!(m.order.len(), 90);
    assert_eq!(m.run_count, 90);
    assert_eq!(m.cohort, "protocol-v1");
    assert_eq!(m.metrics_version, cohort_core::METRICS_VERSION);
    assert!(m.frozen_at.ends_with('Z'));
    // Every question x arm exactly once.
    let mut ids = m.order.clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 90);

    let script = examples().join("../scripts/rederive_order.py");
    match Command::new("python3").arg(&script).arg(&dir).output() {
        Ok(o) => assert!(o.status.success(), "python re-derivation disagrees: {}", String::from_utf8_lossy(&o.stdout)),
        Err(e) => panic!("python3 is needed to re-derive the order independently: {e}"),
    }
}

/// Proves the shipped protocol-v1 template does not pause its own arms on
/// the labels known before collection (issue 19): the Responses arm pins
/// the dated snapshot the API reports for the alias it requests, the
/// manual arm pins the label the README's walk-through submits, and both
/// HTTP arms answer a clarifying question with the suffix by a rule that
/// asks for a question mark and a clarifying phrase.
#[test]
fn protocol_v1_pins_the_labels_its_products_report_and_asks_for_clarifications() {
    let text = fs::read_to_string(examples().join("protocol-v1/cohort.toml")).unwrap();
    let config = cohort_core::config::build_and_validate(&text).unwrap();
    let arm = |id: &str| config.arm(id).unwrap();
    assert_eq!(arm("chatgpt").pinned_version, "o3-deep-research-2025-06-26");
    assert_eq!(arm("chatgpt").settings["model"], "o3-deep-research", "the alias is requested");
    let readme = fs::read_to_string(examples().join("../README.md")).unwrap();
    let submitted = format!("--version \"{}\"", arm("realityengine").pinned_version);
    assert!(readme.contains(&submitted), "the README's walk-through submits {submitted}");
    for id in ["perplexity", "chatgpt"] {
        let rule = &arm(id).settings["clarification"];
        assert_eq!(rule["ends_with_question"], true, "{id}: {rule}");
        assert!(rule["max_chars"].as_u64().is_some_and(|n| n <= 1000), "{id}: {rule}");
        let phrases: Vec<&str> = rule["phrases"].as_array().unwrap().iter().filter_map(|p| p.as_str()).collect();
        assert!(phrases.contains(&"could you clarify") && phrases.contains(&"before i begin"), "{id}: {phrases:?}");
    }
}

/// Proves freezing an unchanged cohort again verifies it and changes
/// nothing, byte for byte.
#[test]
fn freezing_again_changes_nothing() {
    let (_tmp, dir) = copy_example("quickstart");
    assert!(freeze(&dir).status.success());
    let before = fs::read(dir.join("manifest.json")).unwrap();
    let out = freeze(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("frozen and unchanged"));
    assert_eq!(fs::read(dir.join("manifest.json")).unwrap(), before);
}

/// Proves editing one question after freezing is refused with a message
/// naming questions.json and both hashes, and the manifest is untouched.
#[test]
fn editing_a_question_after_freezing_is_refused() {
    let (_tmp, dir) = copy_example("protocol-v1");
    assert!(freeze(&dir).status.success());
    let before = fs::read(dir.join("manifest.json")).unwrap();
    let old_sha = sha256_hex(&fs::read(dir.join("questions.json")).unwrap());
    let edited =
        fs::read_to_string(dir.join("questions.json")).unwrap().replace("Why does ordinary", "Why does common");
    fs::write(dir.join("questions.json"), &edited).unwrap();
    let out = freeze(&dir);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("questions.json"), "{err}");
    assert!(err.contains(&old_sha) && err.contains(&sha256_hex(edited.as_bytes())), "{err}");
    assert!(err.contains("--amend NEW_NAME"), "{err}");
    assert!(!err.contains("cohort.toml:"), "only the changed file is named: {err}");
    assert_eq!(fs::read(dir.join("manifest.json")).unwrap(), before, "the manifest is never overwritten");
}

/// Proves `--amend` creates a new, named cohort whose manifest logs what
/// changed, when and why, and leaves the old manifest byte-identical (and
/// the old directory verifiable again).
#[test]
fn amend_creates_a_new_named_cohort_and_logs_it() {
    let (tmp, dir) = copy_example("protocol-v1");
    assert!(freeze(&dir).status.success());
    let old_manifest = fs::read(dir.join("manifest.json")).unwrap();
    let edited =
        fs::read_to_string(dir.join("questions.json")).unwrap().replace("Why does ordinary", "Why does common");
    fs::write(dir.join("questions.json"), edited).unwrap();
    let out =
        cohort(&["freeze", dir.to_str().unwrap(), "--amend", "protocol-v1a", "--reason", "fix wording of science-1"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let new_dir = tmp.path().join("protocol-v1a");
    let m = manifest(&new_dir);
    assert_eq!(m.cohort, "protocol-v1a");
    let a = &m.amendments[0];
    assert_eq!(a.from_cohort, "protocol-v1");
    assert_eq!(a.from_manifest_sha256, sha256_hex(&old_manifest));
    assert_eq!(a.reason, "fix wording of science-1");
    assert_eq!(a.changes.iter().map(|c| c.file.as_str()).collect::<Vec<_>>(), ["questions.json"]);
    assert_eq!(a.questions.as_ref().unwrap().changed, ["science-1"]);
    assert!(fs::read_to_string(new_dir.join("questions.json")).unwrap().contains("Why does common"));
    assert!(fs::read_to_string(new_dir.join("cohort.toml")).unwrap().contains("name = \"protocol-v1a\""));

    assert_eq!(fs::read(dir.join("manifest.json")).unwrap(), old_manifest);
    assert!(freeze(&dir).status.success(), "the old cohort verifies again");
    let again = cohort(&["freeze", dir.to_str().unwrap(), "--amend", "protocol-v1a", "--reason", "x"]);
    assert!(!again.status.success(), "nothing left to amend, and the name is taken");
}

/// One bad cohort: what to break, and what the error must name.
struct BadCase {
    name: &'static str,
    breaks: fn(&Path),
    /// Substrings the error must contain (file, line or field, reason).
    names: &'static [&'static str],
}

fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

const BAD_CASES: &[BadCase] = &[
    BadCase {
        name: "duplicate question id",
        breaks: |d| edit(d, "questions.json", "\"id\": \"science-2\"", "\"id\": \"science-1\""),
        names: &["questions.json:3:", "[1].id", "duplicate question id \"science-1\" (first at line 2)"],
    },
    BadCase {
        name: "unknown field in cohort.toml",
        breaks: |d| edit(d, "cohort.toml", "repeats = 1", "repeats = 1\nwindow_days = 2"),
        names: &["cohort.toml:13:", "window_days"],
    },
    BadCase {
        name: "missing file",
        breaks: |d| fs::remove_file(d.join("rubric.md")).unwrap(),
        names: &["rubric.md: missing"],
    },
    BadCase {
        name: "judge sharing a vendor lineage with an arm",
        breaks: |d| edit(d, "cohort.toml", "vendor_lineage = \"anthropic\"", "vendor_lineage = \"openai\""),
        names: &["cohort.toml:", "judge.vendor_lineage", "arm \"chatgpt\"", "lineage_waiver"],
    },
    BadCase {
        name: "judge temperature not 0",
        breaks: |d| edit(d, "cohort.toml", "temperature = 0.0", "temperature = 0.2"),
        names: &["cohort.toml:", "judge.temperature", "must be 0"],
    },
    BadCase {
        name: "non-UTF-8 text",
        breaks: |d| {
            let mut bytes = fs::read(d.join("suffix.txt")).unwrap();
            // The file ends with a line break: "Caf\xe9" is line 3, the
            // bad byte its 4th character.
            bytes.extend_from_slice(b"\nCaf\xe9");
            fs::write(d.join("suffix.txt"), bytes).unwrap();
        },
        names: &["suffix.txt:3:4:", "not valid UTF-8"],
    },
    BadCase {
        name: "colon in a question id",
        breaks: |d| edit(d, "questions.json", "\"id\": \"history-3\"", "\"id\": \"history:3\""),
        names: &["questions.json:16:", "[14].id", "':'"],
    },
    BadCase {
        name: "arm without pinned_version",
        breaks: |d| edit(d, "cohort.toml", "pinned_version = \"sonar-deep-research\"\n", ""),
        names: &["cohort.toml:", "arms[1].pinned_version", "arm \"perplexity\" has no pinned_version"],
    },
];

/// Proves every kind of bad input gets an error naming the file and the
/// line or field, and that nothing at all is written.
#[test]
fn bad_input_is_named_and_writes_nothing() {
    for case in BAD_CASES {
        let (_tmp, dir) = copy_example("protocol-v1");
        (case.breaks)(&dir);
        let listing_before = listing(&dir);
        let out = freeze(&dir);
        let err = stderr(&out);
        assert!(!out.status.success(), "{}: freeze succeeded", case.name);
        for needle in case.names {
            assert!(err.contains(needle), "{}: error does not name {needle:?}:\n{err}", case.name);
        }
        assert_eq!(listing(&dir), listing_before, "{}: something was written", case.name);
    }
}

/// Proves a recorded waiver lets a judge share a lineage, and the waiver is
/// part of the frozen config.
#[test]
fn a_recorded_waiver_allows_a_shared_lineage() {
    let (_tmp, dir) = copy_example("protocol-v1");
    edit(&dir, "cohort.toml", "vendor_lineage = \"anthropic\"", "vendor_lineage = \"openai\"");
    let toml = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let waived = toml.replace(
        "batch_size = 8\n",
        "batch_size = 8\nlineage_waiver = { reason = \"no independent judge licensed\", approved_by = \"PI\" }\n",
    );
    fs::write(dir.join("cohort.toml"), waived).unwrap();
    let out = freeze(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Every path under `dir` with its size: "nothing written" means this does
/// not change.
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((entry.path(), meta.len()));
        }
    }
    out.sort();
    out
}
