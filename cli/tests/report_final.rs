//! `cohort report --final` as a real process (issue 20): the offline
//! quickstart, run to the end, is a SIMULATED cohort, so its reports are
//! preliminary; `--final` refuses with exit 2, naming what is missing, and
//! writes nothing, while `cohort report` without it writes a report that
//! says `preliminary` on the first line of summary.md, index.html and
//! summary.json.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::process::{Command, Output};

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Proves `--final` refuses a preliminary cohort with exit 2, naming what
/// is missing, and writes no report folder.
#[test]
fn report_final_refuses_a_preliminary_cohort_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    let d = dir.to_str().unwrap();
    let out = cohort(&["run", d]);
    assert!(out.status.success(), "{}", text(&out));
    let before = fs::read_dir(dir.join("reports")).unwrap().count();

    let refused = cohort(&["report", d, "--final", "--draws", "200"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let t = text(&refused);
    assert!(t.contains("preliminary, not final") && t.contains("SIMULATED arms or judge"), "{t}");
    assert_eq!(fs::read_dir(dir.join("reports")).unwrap().count(), before, "nothing written");

    let out = cohort(&["report", d, "--draws", "200"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.lines().next().unwrap().starts_with("Publication state: preliminary"), "{t}");
    let report = t.lines().find_map(|l| l.strip_prefix("report: ")).unwrap().trim().to_owned();
    for file in ["summary.md", "index.html", "summary.json"] {
        let body = fs::read_to_string(std::path::Path::new(&report).join(file)).unwrap();
        let first = body.lines().next().unwrap();
        assert!(first.contains("preliminary"), "{file}: {first}");
    }
}
