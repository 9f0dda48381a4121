//! The real `index.html` of a real report, in a real browser: `cohort run`
//! on a copy of examples/quickstart writes a report, and Debian's Chromium
//! (headless) loads its `index.html` from the file. The DOM has every arm's
//! row and a run's drill-down with a judged claim from `claims.jsonl`, its
//! verdict and the judge model that served it; the net log shows the page
//! requested nothing but itself. The browser plumbing (and the control
//! that proves the net-log check can fail) is in
//! report/tests/support/chromium.rs and report/tests/html_chromium.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

#[path = "../../report/tests/support/chromium.rs"]
mod chromium;

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use cohort_report::html::testing::drill_id;

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

/// How Chromium serialises a text node: `&`, `<`, `>` escaped.
fn dom_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\u{a0}', "&nbsp;")
}

/// Proves the report `cohort run` writes opens in Chromium with every arm
/// and a complete drill-down, and fetches nothing.
#[test]
fn quickstart_index_html_in_chromium() {
    chromium::require_chromium();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    let out = Command::new(COHORT).args(["run", dir.to_str().unwrap()]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let line = text.lines().find(|l| l.starts_with("report: ")).unwrap_or_else(|| panic!("no report path in:\n{text}"));
    let report = PathBuf::from(line.trim_start_matches("report: ").trim());

    let loaded = chromium::chromium(tmp.path(), &report.join("index.html"), &["--dump-dom".into()]);
    let dom = &loaded.dom;

    let summary: serde_json::Value = serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    let arms = summary["arms"].as_array().unwrap();
    assert!(!arms.is_empty());
    for arm in arms {
        let id = arm["id"].as_str().unwrap();
        assert!(dom.contains(&format!("<tr data-arm=\"{id}\">")), "no row of arm {id}");
    }
    if summary["simulated"]["judge"] == true || arms.iter().any(|arm| arm["simulated"] == true) {
        assert!(dom.contains("id=\"simulated\""), "the SIMULATED banner");
    }

    // A judged claim of a run that has a drill-down in the page.
    let claims = fs::read_to_string(report.join("claims.jsonl")).unwrap();
    let claim = claims
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|claim| claim["kind"] == "claim" && claim["status"] == "judged")
        .find(|claim| dom.contains(&format!("id=\"{}\"", drill_id(claim["run_id"].as_str().unwrap()))))
        .expect("a judged claim of a run with a drill-down");
    let id = drill_id(claim["run_id"].as_str().unwrap());
    let start = dom.find(&format!("id=\"{id}\"")).unwrap();
    let details = &dom[dom[..start].rfind("<details").unwrap()..];
    let details = &details[..details.find("</details>").unwrap()];
    let claim_text = dom_text(claim["text"].as_str().unwrap());
    assert!(details.contains(&claim_text), "drill-down {id} lacks {claim_text}:\n{details}");
    let verdict = claim["verdict"].as_str().unwrap();
    assert!(details.contains(&format!(">{verdict}</span>")), "drill-down {id} lacks the verdict {verdict}");
    let judge_model = claim["judge_model"].as_str().unwrap();
    assert!(
        details.contains(&format!("judge model: {}", dom_text(judge_model))),
        "drill-down {id} lacks {judge_model}"
    );

    let fetched = chromium::page_fetches(&loaded.netlog);
    assert!(fetched.is_empty(), "index.html fetched {fetched:?} (all: {:?})", chromium::requests(&loaded.netlog));
}
