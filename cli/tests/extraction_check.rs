//! The extraction check before scoring (seed 004) with the real binary on
//! the offline quickstart declaring `[review] extraction_check = true`:
//! the scorers' export refused (exit 2) until a check is imported; `cohort
//! review export --extraction-checker carol`, blinded; carol's check
//! (a split, a merge, a claim not factual, an added claim) imported; the
//! checker refused as a scorer (exit 2); the scorers' export built from the
//! checked extraction; two reviews and an adjudication imported; `cohort
//! report` names the checker with what the check did, and the publication
//! state does not wait for a check.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn jsonl(path: &std::path::Path) -> Vec<BTreeMap<String, String>> {
    fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn header(path: &std::path::Path) -> Vec<String> {
    fs::read_to_string(path).unwrap().lines().next().unwrap().split(',').map(str::to_owned).collect()
}

/// Proves the flow of the module docs.
#[test]
fn the_extraction_is_checked_before_scoring_and_the_report_names_the_checker() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = support::review::keyed_quickstart(tmp.path());
    let toml = dir.join("cohort.toml");
    fs::write(&toml, fs::read_to_string(&toml).unwrap() + "\n[review]\nextraction_check = true\n").unwrap();
    let d = dir.to_str().unwrap();
    support::collect_blocking(&dir);

    // Declared, not imported: the scorers' export is refused, exit 2, naming the command.
    let scorers = tmp.path().join("scorers");
    let s = scorers.to_str().unwrap();
    let out = cohort(&["review", "export", d, "--reviewers", "alice,bob", "--out", s]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--extraction-checker") && text(&out).contains("nothing was written"),
        "{}",
        text(&out)
    );
    assert!(!scorers.exists() && !dir.join(".cohort/review").exists());

    // Phase 1, blinded as the scorers' files are.
    let check_dir = tmp.path().join("check");
    let out = cohort(&["review", "export", d, "--extraction-checker", "carol", "--out", check_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let check_csv = check_dir.join("carol/check.csv");
    let body = fs::read_to_string(&check_csv).unwrap();
    for needle in ["sim-careful", "sim-hasty"] {
        assert!(!body.contains(needle), "the check file names {needle}");
    }
    let mut rows = jsonl(&check_dir.join("carol/check.jsonl"));
    // Per output, its claims in order.
    let mut by_output: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["kind"] == "claim") {
        by_output.entry(r["output"].clone()).or_default().push(r["item_id"].clone());
    }
    let (first, claims) = by_output.iter().find(|(_, c)| c.len() >= 3).expect("an output with three claims");
    let (split, merged, target) = (claims[0].clone(), claims[1].clone(), claims[2].clone());
    let (other, other_claims) = by_output.iter().find(|(o, _)| *o != first).unwrap();
    let not_factual = other_claims[0].clone();
    for r in &mut rows {
        let id = r["item_id"].clone();
        if id == split {
            r.insert("split".into(), "the first assertion || the second assertion".into());
        } else if id == merged {
            r.insert("merge_with".into(), target.clone());
        } else if id == not_factual {
            r.insert("not_factual".into(), "advice".into());
        }
    }
    let mut added = rows.iter().find(|r| r["kind"] == "output" && &r["output"] == first).unwrap().clone();
    for (k, v) in [("item_id", "m1"), ("kind", "added"), ("claim", "A fact the extractor missed."), ("output_text", "")]
    {
        added.insert(k.into(), v.into());
    }
    rows.push(added);
    let filled = tmp.path().join("carol-check.csv");
    let columns = header(&check_csv);
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    support::review::write_csv(&filled, &columns, &rows);
    // A check file of another check: exit 2, naming both hashes, nothing kept.
    let mut foreign = rows.clone();
    foreign.iter_mut().for_each(|r| {
        r.insert("check_sha256".into(), "f".repeat(64));
    });
    let other_file = tmp.path().join("other-check.csv");
    support::review::write_csv(&other_file, &columns, &foreign);
    let out = cohort(&["review", "import", d, other_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("field `check_sha256`") && text(&out).contains(&"f".repeat(64)), "{}", text(&out));
    assert!(!dir.join(".cohort/review/imported").exists(), "nothing kept on refusal");

    let out = cohort(&["review", "import", d, filled.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("carol's extraction check"), "{}", text(&out));

    // The checker as a scorer: exit 2, naming both.
    let out = cohort(&["review", "export", d, "--reviewers", "alice,carol", "--out", s]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("scorer \"carol\" is the extraction checker \"carol\""), "{}", text(&out));
    assert!(!scorers.exists());

    // Phase 2: the checked extraction.
    let out = cohort(&["review", "export", d, "--reviewers", "alice,bob", "--out", s]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("as carol checked it"), "{}", text(&out));
    let items = support::review::items(&scorers, "alice");
    let ids: Vec<&str> = items.iter().filter(|r| r["kind"] == "claim").map(|r| r["item_id"].as_str()).collect();
    for present in [format!("{split}.1"), format!("{split}.2"), target.clone(), "a0001".into()] {
        assert!(ids.contains(&present.as_str()), "{present} in {ids:?}");
    }
    for absent in [&split, &merged, &not_factual] {
        assert!(!ids.contains(&absent.as_str()), "{absent} in {ids:?}");
    }
    assert!(items.iter().any(|r| r["item_id"] == format!("{split}.2") && r["claim"] == "the second assertion"));
    assert!(items.iter().any(|r| &r["output"] == other), "the other output is still reviewed");

    // Two scorers: every claim fully supported, every pair supporting,
    // except bob's label of the second part, adjudicated to alice's.
    let mut files = Vec::new();
    let columns = header(&scorers.join("alice/items.csv"));
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    for who in ["alice", "bob"] {
        let mut rows = support::review::items(&scorers, who);
        for r in &mut rows {
            match r["kind"].as_str() {
                "claim" => {
                    let part_two = r["item_id"] == format!("{split}.2");
                    let label = if who == "bob" && part_two { "unsupported" } else { "fully_supported" };
                    r.insert("label".into(), label.into());
                }
                "pair" => {
                    r.insert("supports".into(), "yes".into());
                    r.insert("secondary".into(), "no".into());
                }
                _ => {
                    r.insert("uncertainty".into(), "2".into());
                }
            }
        }
        let path = tmp.path().join(format!("{who}.csv"));
        support::review::write_csv(&path, &columns, &rows);
        files.push(path);
    }
    let adjudication = tmp.path().join("adjudication.csv");
    fs::write(
        &adjudication,
        format!(
            "item_id,final_label,reason,rationale,adjudicator\n{split}.2,fully_supported,,read the source again,dana\n"
        ),
    )
    .unwrap();
    let out = cohort(&[
        "review",
        "import",
        d,
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
        adjudication.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));

    let out = cohort(&["report", d, "--draws", "200"]);
    assert!(out.status.success(), "{}", text(&out));
    let report = PathBuf::from(text(&out).lines().find_map(|l| l.strip_prefix("report: ")).unwrap().trim());
    let summary: Value = serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    let check = &summary["review"]["extraction_check"];
    assert_eq!(check["checker"], "carol", "{check}");
    assert_eq!(
        [&check["split"], &check["merged"], &check["not_factual"], &check["added"]].map(|v| v.as_u64()),
        [Some(1); 4]
    );
    assert_eq!(check["file_sha256"], cohort_core::hash::sha256_hex(&fs::read(&filled).unwrap()).as_str());
    // Every checked unit is fully supported after adjudication: fidelity
    // is claims / claims, over the scorers' claim items of the arm; the
    // check's exclusions are counted per arm.
    let code_arm: BTreeMap<String, String> =
        serde_json::from_slice::<Value>(&fs::read(dir.join(".cohort/review/blinding.json")).unwrap()).unwrap()["codes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(arm, code)| (code.as_str().unwrap().to_owned(), arm.clone()))
            .collect();
    let arm_of = |output: &str| code_arm[output.split('-').next().unwrap()].clone();
    let mut claims_of: BTreeMap<String, u64> = BTreeMap::new();
    for r in items.iter().filter(|r| r["kind"] == "claim") {
        *claims_of.entry(arm_of(&r["output"])).or_default() += 1;
    }
    let mut excluded_of: BTreeMap<String, u64> = BTreeMap::new();
    for (output, _) in [(first, &merged), (other, &not_factual)] {
        *excluded_of.entry(arm_of(output)).or_default() += 1;
    }
    for arm in summary["review"]["arms"].as_array().unwrap() {
        let id = arm["arm"].as_str().unwrap();
        let f = &arm["figures"];
        assert_eq!(f["factual_claims"].as_u64(), Some(claims_of[id]), "{id}");
        assert_eq!(f["claim_fidelity"]["numerator"].as_f64(), Some(claims_of[id] as f64), "{id}");
        assert_eq!(f["claim_fidelity"]["value"].as_f64(), Some(1.0), "{id}");
        assert_eq!(f["excluded_claims"].as_u64(), Some(excluded_of.get(id).copied().unwrap_or(0)), "{id}");
    }
    let missing: Vec<&str> =
        summary["publication_state"]["missing"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(!missing.is_empty(), "the quickstart is SIMULATED: preliminary");
    assert!(missing.iter().all(|m| !m.contains("extraction")), "{missing:?}");
    let md = fs::read_to_string(report.join("summary.md")).unwrap();
    assert!(md.contains("Extraction checked before scoring by carol"), "summary.md names the checker");
    let verify = cohort(&["verify", report.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", text(&verify));
}
