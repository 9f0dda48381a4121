//! A rate is defined once, in `report/src/rates.rs` (`RateKind`), and
//! every writer follows it. These tests pin down where a new rate goes:
//! the variant in `rates.rs`, its definition for readers in
//! `docs/report.md`, its independent re-derivation in
//! `scripts/rederive_report.py` and the hand-made report that script is
//! tested on (`tests/rederive_report_fixture/summary.json`), and a
//! hand-computed value in `report/tests/numbers.rs` (ARCHITECTURE.md,
//! "Where a change goes").
//! Forgetting the documentation or the re-derivation fails here; naming a
//! rate by hand in a writer fails here too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::path::{Path, PathBuf};

use cohort_report::html::testing::fixture;
use cohort_report::model::{Pooling, RateKind};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every kind is defined for readers in docs/report.md, and the
/// independent re-derivation knows every kind, in `RateKind::ALL` order.
#[test]
fn every_rate_is_documented_and_rederived() {
    let docs = read("docs/report.md");
    for kind in RateKind::ALL {
        assert!(docs.contains(kind.key()), "docs/report.md does not define `{}`", kind.key());
    }
    let script = read("scripts/rederive_report.py");
    let line = script.lines().find(|l| l.starts_with("RATES = (")).expect("RATES in scripts/rederive_report.py");
    let names: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    let keys: Vec<&str> = RateKind::ALL.iter().map(|k| k.key()).collect();
    assert_eq!(names, keys, "scripts/rederive_report.py's RATES");
    // The hand-made report the script is tested on (core/tests/rederive_report.rs).
    let fixture: serde_json::Value = serde_json::from_str(&read("tests/rederive_report_fixture/summary.json")).unwrap();
    for arm in fixture["arms"].as_array().unwrap() {
        for kind in RateKind::ALL {
            assert!(
                arm["rates"].get(kind.key()).is_some(),
                "the rederive fixture's {} lacks {}",
                arm["id"],
                kind.key()
            );
        }
    }
}

/// Every writer shows every kind: a column of each index.html rates
/// table, a panel of rates.svg, a row (micro) or column (macro) of
/// summary.md, a key of summary.json's rates in `ALL` order, and each
/// compared kind a row of the comparison tables.
#[test]
fn every_writer_shows_every_rate() {
    let (summary, runs, drill) = fixture();
    let plots = cohort_report::plots::render_plots(&summary).unwrap();
    let page = cohort_report::html::render_html(&summary, &runs, &drill, &plots);
    let markdown = cohort_report::markdown::render_markdown(&summary);
    let rates_svg = &plots.iter().find(|(name, _)| name == cohort_report::plots::RATES_SVG).unwrap().1;
    let json = serde_json::to_string(&summary.arms[0].rates).unwrap();
    let mut at = 0;
    for kind in RateKind::ALL {
        assert!(page.contains(&format!("<th class=\"num\">{}</th>", kind.label())), "index.html: {kind:?}");
        assert!(rates_svg.contains(&format!("{}: {}", kind.label(), kind.estimand())), "rates.svg: {kind:?}");
        let found = json[at..].find(&format!("\"{}\":", kind.key())).unwrap_or_else(|| panic!("json: {kind:?}"));
        at += found + 1;
        if kind.pooling() == Pooling::Micro {
            let row =
                format!("| {} | {} | {} |", "alpha", kind.measure_label(), summary.arms[0].rates[kind].display_value());
            assert!(markdown.contains(&row), "summary.md lacks {row}");
        }
        if let Some(compared) = kind.comparison() {
            assert!(markdown.contains(&format!("| {} |", compared.markdown_label)), "summary.md: {kind:?}");
            assert!(page.contains(&format!("<td>{}</td>", compared.html_label)), "index.html: {kind:?}");
        }
    }
    let macro_kinds = RateKind::ALL.iter().filter(|k| k.pooling() == Pooling::Macro).count();
    let paired = RateKind::ALL.iter().filter(|k| k.macro_kind().is_some()).count();
    assert_eq!(macro_kinds, paired, "every macro rate shares a row of summary.md with its micro rate");
}

/// No writer names a rate by hand: the keys and labels of the kinds
/// appear as string literals only in rates.rs.
#[test]
fn no_writer_names_a_rate_by_hand() {
    let files = [
        "report/src/compute.rs",
        "report/src/markdown.rs",
        "report/src/html.rs",
        "report/src/plots.rs",
        "report/src/write.rs",
        "report/src/verify.rs",
        "report/src/model.rs",
        "cli/src/commands/report.rs",
    ];
    for file in files {
        let text = read(file);
        for kind in RateKind::ALL {
            for name in [kind.key(), kind.label(), kind.measure()] {
                let literal = format!("\"{name}\"");
                assert!(!text.contains(&literal), "{file} names the rate {literal} by hand: use RateKind");
            }
        }
    }
}
