//! Human review round trip (seed 004) with the real binary on a copy of the
//! offline quickstart with an uncertainty key: `cohort run`, `cohort review
//! export` for two reviewers, both reviewers' files written with planted
//! disagreements, a split claim and an added uncited claim, an adjudication
//! file, `cohort review import`, `cohort report`. The kappa, the 5x5 matrix
//! and the final claim-fidelity, precision and coverage figures must equal
//! what this test computes by hand from what it planted; the reviewers'
//! files must hold no product identity.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

mod support;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");
const LABELS: [&str; 5] = ["fully_supported", "partially_supported", "unsupported", "contradicted", "unverifiable"];

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Cohen's kappa (nominal) and the matrix, by the textbook formula.
fn kappa(a: &[usize], b: &[usize], k: usize) -> (f64, Vec<Vec<u64>>) {
    let mut m = vec![vec![0u64; k]; k];
    for (x, y) in a.iter().zip(b) {
        m[*x][*y] += 1;
    }
    let n = a.len() as f64;
    let po = (0..k).map(|i| m[i][i]).sum::<u64>() as f64 / n;
    let pe: f64 = (0..k)
        .map(|i| {
            let r: u64 = m[i].iter().sum();
            let c: u64 = (0..k).map(|j| m[j][i]).sum();
            r as f64 * c as f64 / (n * n)
        })
        .sum();
    ((po - pe) / (1.0 - pe), m)
}

/// Proves the round trip of the module docs.
#[test]
fn review_round_trip_matches_hand_computed_figures_and_is_blinded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = support::review::keyed_quickstart(tmp.path());
    let d = dir.to_str().unwrap();
    support::collect_blocking(&dir);
    let manifest: Value = serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["files"]["uncertainty_key.json"].is_string(), "the key is frozen with the cohort");

    let export_dir = tmp.path().join("export");
    let out = cohort(&["review", "export", d, "--reviewers", "alice,bob", "--out", export_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    // Write-once: a second export is refused, exit 2.
    let again =
        cohort(&["review", "export", d, "--reviewers", "alice,bob", "--out", tmp.path().join("x").to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));

    // Blinding: nothing in the reviewers' folders names an arm, a product or a version.
    let config = fs::read_to_string(dir.join("cohort.toml")).unwrap();
    let mut identity =
        vec!["sim-careful".to_owned(), "sim-hasty".to_owned(), "sim-careful-1".into(), "sim-hasty-1".into()];
    identity.extend(config.lines().filter_map(|l| l.strip_prefix("label = ")).map(|l| l.trim_matches('"').to_owned()));
    for reviewer in ["alice", "bob"] {
        for file in ["items.csv", "items.jsonl"] {
            let body = fs::read_to_string(export_dir.join(reviewer).join(file)).unwrap();
            for needle in &identity {
                assert!(!body.contains(needle.as_str()), "{reviewer}/{file} contains {needle:?}");
            }
        }
    }
    assert!(!export_dir.join("alice").join("blinding.json").exists());
    let blinding: Value = serde_json::from_slice(&fs::read(dir.join(".cohort/review/blinding.json")).unwrap()).unwrap();
    let code_arm: BTreeMap<String, String> = blinding["codes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(arm, code)| (code.as_str().unwrap().to_owned(), arm.clone()))
        .collect();
    let arm_of = |output: &str| code_arm[output.split('-').next().unwrap()].clone();

    let items: Vec<BTreeMap<String, String>> = fs::read_to_string(export_dir.join("alice/items.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<BTreeMap<String, Value>>(l).unwrap())
        .map(|m| m.into_iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect())
        .collect();
    let claims: Vec<&BTreeMap<String, String>> = items.iter().filter(|i| i["kind"] == "claim").collect();
    let pairs: Vec<&BTreeMap<String, String>> = items.iter().filter(|i| i["kind"] == "pair").collect();
    let outputs: Vec<&BTreeMap<String, String>> = items.iter().filter(|i| i["kind"] == "uncertainty").collect();
    assert!(
        claims.len() > 20 && pairs.len() > 20 && outputs.len() > 5,
        "{} {} {}",
        claims.len(),
        pairs.len(),
        outputs.len()
    );

    // Plant: alice's claim label i%5, bob's the same except every 4th claim
    // (the next label). Claim 0: alice splits it (fully || unsupported),
    // bob labels it; the adjudicator keeps alice's split. Alice adds one
    // uncited claim (unsupported) to the first output.
    let label_a = |i: usize| LABELS[i % 5];
    let label_b = |i: usize| if i % 4 == 1 { LABELS[(i + 1) % 5] } else { LABELS[i % 5] };
    let supports_a = |i: usize| !i.is_multiple_of(3);
    let supports_b = |i: usize| if i % 5 == 2 { !supports_a(i) } else { supports_a(i) };
    let score_a = |i: usize| i % 3;
    let score_b = |i: usize| if i.is_multiple_of(4) { (i + 1) % 3 } else { i % 3 };
    let mut rows_a = Vec::new();
    let mut rows_b = Vec::new();
    let mut adjudication = Vec::new();
    let adj = |id: &str, label: &str, reason: &str| -> BTreeMap<String, String> {
        [
            ("item_id", id),
            ("final_label", label),
            ("reason", reason),
            ("rationale", "checked the source again"),
            ("adjudicator", "carol"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    };
    for (i, c) in claims.iter().enumerate() {
        let mut a = (*c).clone();
        let mut b = (*c).clone();
        b.insert("reviewer".into(), "bob".into());
        if i == 0 {
            a.insert("split".into(), "first part || second part".into());
            a.insert("label".into(), "fully_supported || unsupported".into());
            b.insert("label".into(), "fully_supported".into());
            adjudication.push(adj(&c["item_id"], "split:alice", ""));
        } else {
            a.insert("label".into(), label_a(i).into());
            b.insert("label".into(), label_b(i).into());
            for (row, l) in [(&mut a, label_a(i)), (&mut b, label_b(i))] {
                if l == "unverifiable" {
                    row.insert("reason".into(), "the source is behind a paywall".into());
                }
                if l == "contradicted" {
                    row.insert("reason".into(), "the cited table gives 12%, not 21%".into());
                }
            }
            if label_a(i) != label_b(i) {
                let reason = match label_a(i) {
                    "unverifiable" => "paywall",
                    "contradicted" => "the cited table gives 12%",
                    _ => "",
                };
                adjudication.push(adj(&c["item_id"], label_a(i), reason));
            }
        }
        rows_a.push(a);
        rows_b.push(b);
    }
    // Claim 0's pairs: alice split it, so she gives one verdict per part
    // (the first part as supports_a, the second irrelevant). Every 7th
    // pair's source is only secondary, for both.
    let split_claim = claims[0]["item_id"].clone();
    let secondary = |i: usize| i % 7 == 3;
    for (i, p) in pairs.iter().enumerate() {
        let mut a = (*p).clone();
        let mut b = (*p).clone();
        b.insert("reviewer".into(), "bob".into());
        for (row, s) in [(&mut a, supports_a(i)), (&mut b, supports_b(i))] {
            row.insert("supports".into(), if s { "yes" } else { "no" }.into());
            if !s {
                row.insert("reason".into(), "broken".into());
            }
            row.insert("secondary".into(), if secondary(i) { "yes" } else { "no" }.into());
        }
        if p["claim_item"] == split_claim {
            let s = supports_a(i);
            a.insert("supports".into(), format!("{} || no", if s { "yes" } else { "no" }));
            a.insert("reason".into(), format!("{} || irrelevant", if s { "" } else { "broken" }));
        }
        if supports_a(i) != supports_b(i) {
            let s = supports_a(i);
            adjudication.push(adj(&p["item_id"], if s { "yes" } else { "no" }, if s { "" } else { "broken" }));
        }
        rows_a.push(a);
        rows_b.push(b);
    }
    for (i, u) in outputs.iter().enumerate() {
        let mut a = (*u).clone();
        let mut b = (*u).clone();
        b.insert("reviewer".into(), "bob".into());
        a.insert("uncertainty".into(), score_a(i).to_string());
        b.insert("uncertainty".into(), score_b(i).to_string());
        if score_a(i) != score_b(i) {
            adjudication.push(adj(&u["item_id"], &score_a(i).to_string(), ""));
        }
        rows_a.push(a);
        rows_b.push(b);
    }
    let first_output = claims[0]["output"].clone();
    rows_a.push(
        [
            ("reviewer", "alice"),
            ("item_id", "extra1"),
            ("kind", "added"),
            ("output", first_output.as_str()),
            ("claim", "An uncited factual claim the extractor missed."),
            ("label", "unsupported"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    let header: Vec<String> = fs::read_to_string(export_dir.join("alice/items.csv"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let (fa, fb, fj) = (tmp.path().join("alice.csv"), tmp.path().join("bob.csv"), tmp.path().join("adjudication.csv"));
    support::review::write_csv(&fa, &header, &rows_a);
    support::review::write_csv(&fb, &header, &rows_b);
    support::review::write_csv(&fj, &["item_id", "final_label", "reason", "rationale", "adjudicator"], &adjudication);

    // Bad input writes nothing: an unknown label names file, line and field.
    let mut bad_rows = rows_b.clone();
    bad_rows[1].insert("label".into(), "mostly_true".into());
    let fbad = tmp.path().join("bad.csv");
    support::review::write_csv(&fbad, &header, &bad_rows);
    let bad = cohort(&["review", "import", d, fa.to_str().unwrap(), fbad.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("bad.csv:3:") && text(&bad).contains("field `label`"), "{}", text(&bad));
    assert!(!dir.join(".cohort/review/imported").exists(), "nothing written on bad input");

    let out = cohort(&["review", "import", d, fa.to_str().unwrap(), fb.to_str().unwrap(), fj.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let again = cohort(&["review", "import", d, fa.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).contains("alice") && text(&again).contains("new review round"), "{}", text(&again));

    let out = cohort(&["report", d, "--draws", "200"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    let report = PathBuf::from(t.lines().find_map(|l| l.strip_prefix("report: ")).unwrap().trim());
    let summary: Value = serde_json::from_slice(&fs::read(report.join("summary.json")).unwrap()).unwrap();
    let review = &summary["review"];

    // Agreement before adjudication: claims both labelled (claim 0 was split by alice: not in kappa).
    let (a_idx, b_idx): (Vec<usize>, Vec<usize>) = (1..claims.len())
        .map(|i| {
            (
                LABELS.iter().position(|l| *l == label_a(i)).unwrap(),
                LABELS.iter().position(|l| *l == label_b(i)).unwrap(),
            )
        })
        .unzip();
    let (k, matrix) = kappa(&a_idx, &b_idx, 5);
    let ag = &review["agreement"]["claims"];
    assert_eq!(ag["matrix"], json!(matrix));
    assert!((ag["kappa"]["value"].as_f64().unwrap() - k).abs() < 1e-12, "{ag} vs {k}");
    assert_eq!(review["agreement"]["extraction_disagreements"], 1);
    let (ua, ub): (Vec<usize>, Vec<usize>) = (0..outputs.len()).map(|i| (score_a(i), score_b(i))).unzip();
    let (ku, _) = kappa(&ua, &ub, 3);
    assert!((review["agreement"]["uncertainty_nominal"]["kappa"]["value"].as_f64().unwrap() - ku).abs() < 1e-12);
    assert!(review["agreement"]["uncertainty_quadratic"]["kappa"]["value"].is_f64());

    // Final figures by hand: alice's labels are final (agreed or adjudicated to hers).
    #[derive(Default, Debug)]
    struct Hand {
        factual: u64,
        fully: u64,
        covered: u64,
        pairs: u64,
        supporting: u64,
    }
    let mut hand: BTreeMap<String, Hand> = BTreeMap::new();
    let mut covered_claim: BTreeMap<String, bool> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        let h = hand.entry(arm_of(&p["output"])).or_default();
        h.pairs += 1;
        if supports_a(i) {
            h.supporting += 1;
            covered_claim.insert(p["claim_item"].clone(), true);
        }
        // The split claim's pairs are one pair per part: its second part's
        // (irrelevant) never supports, and never covers that part.
        h.pairs += u64::from(p["claim_item"] == split_claim);
    }
    for (i, c) in claims.iter().enumerate() {
        let h = hand.entry(arm_of(&c["output"])).or_default();
        let covered = u64::from(covered_claim.get(&c["item_id"]).copied().unwrap_or(false));
        let labels: Vec<&str> = if i == 0 { vec!["fully_supported", "unsupported"] } else { vec![label_a(i)] };
        for (k, l) in labels.into_iter().enumerate() {
            h.factual += 1;
            h.fully += u64::from(l == "fully_supported");
            h.covered += if k == 0 { covered } else { 0 };
        }
    }
    hand.entry(arm_of(&first_output)).or_default().factual += 1; // the added claim, unsupported, uncited
    for arm in review["arms"].as_array().unwrap() {
        let h = &hand[arm["arm"].as_str().unwrap()];
        let f = &arm["figures"];
        let check = |rate: &Value, num: u64, den: u64| {
            assert_eq!(rate["numerator"].as_f64().unwrap(), num as f64, "{rate}");
            assert_eq!(rate["denominator"].as_f64().unwrap(), den as f64, "{rate}");
            assert!((rate["value"].as_f64().unwrap() - num as f64 / den as f64).abs() < 1e-12, "{rate}");
            assert!(rate["ci_low"].as_f64().unwrap() <= rate["value"].as_f64().unwrap());
        };
        check(&f["claim_fidelity"], h.fully, h.factual);
        check(&f["citation_precision"], h.supporting, h.pairs);
        check(&f["citation_coverage"], h.covered, h.factual);
        assert_eq!(f["unresolved_claims"], 0);
    }
    // Secondary-only sources by hand: one source per output and URL, only
    // secondary when every pair citing it says so.
    let mut sources: BTreeMap<(String, String, String), bool> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        let key = (arm_of(&p["output"]), p["output"].clone(), p["urls"].clone());
        *sources.entry(key).or_insert(true) &= secondary(i);
    }
    let mut planted_secondary = 0;
    for arm in summary["arms"].as_array().unwrap() {
        let id = arm["id"].as_str().unwrap();
        let mine: Vec<bool> = sources.iter().filter(|((a, ..), _)| a == id).map(|(_, s)| *s).collect();
        let secondary_count = mine.iter().filter(|s| **s).count();
        planted_secondary += secondary_count;
        let r = &arm["rates"]["secondary_only_sources"];
        assert_eq!(r["status"], "measured", "{id}: {r}");
        assert_eq!(r["numerator"].as_f64().unwrap(), secondary_count as f64, "{id}: {r}");
        assert_eq!(r["denominator"].as_f64().unwrap(), mine.len() as f64, "{id}: {r}");
    }
    assert!(planted_secondary > 0, "the plant has secondary-only sources");
    let md = fs::read_to_string(report.join("summary.md")).unwrap();
    assert!(md.contains("## Human review"), "summary.md has the review section");
    let verify = cohort(&["verify", report.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", text(&verify));

    // Calibration against the adjudicated review: the judge's pass (the
    // sim judge's `default`) scored on the claims with one final label that
    // is not unverifiable. Computed here from the planted labels, the
    // export index (item -> run and claim) and the report's claims.jsonl
    // (the same pass's verdicts).
    let index: Value = serde_json::from_slice(&fs::read(dir.join(".cohort/review/export.json")).unwrap()).unwrap();
    let where_is: BTreeMap<String, String> = index["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "claim")
        .map(|i| {
            let id = i["item_id"].as_str().unwrap().to_owned();
            (id, format!("{}#{}", i["run_id"].as_str().unwrap(), i["claim_id"]))
        })
        .collect();
    let verdicts: BTreeMap<String, bool> = fs::read_to_string(report.join("claims.jsonl"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| c["status"] == "judged")
        .map(|c| (format!("{}#{}", c["run_id"].as_str().unwrap(), c["claim_index"]), c["verdict"] == "YES"))
        .collect();
    let (mut tp, mut fp, mut tn, mut fn_) = (0u64, 0u64, 0u64, 0u64);
    for (i, c) in claims.iter().enumerate().skip(1) {
        let label = label_a(i);
        if label == "unverifiable" {
            continue;
        }
        let Some(&judged_yes) = verdicts.get(&where_is[&c["item_id"]]) else { continue };
        match (label == "fully_supported", judged_yes) {
            (true, true) => tp += 1,
            (false, true) => fp += 1,
            (false, false) => tn += 1,
            (true, false) => fn_ += 1,
        }
    }
    let out = cohort(&["calibrate", "--cohort", d, "--json", "--resamples", "200"]);
    assert!(out.status.success(), "{}", text(&out));
    let cal: Value = serde_json::from_slice(&out.stdout).unwrap();
    let judge = cal["judges"].as_array().unwrap().iter().find(|j| j["name"] == "default").unwrap();
    assert_eq!(
        (judge["tp"].as_u64(), judge["fp"].as_u64(), judge["tn"].as_u64(), judge["fn"].as_u64()),
        (Some(tp), Some(fp), Some(tn), Some(fn_)),
        "{judge}"
    );
    assert!(tp + fp + tn + fn_ > 10, "enough items to mean something");
    // Without an imported review there is no gold: exit 2, saying why.
    fs::create_dir(tmp.path().join("plain")).unwrap();
    let plain = support::review::keyed_quickstart(&tmp.path().join("plain"));
    let out = cohort(&["calibrate", "--cohort", plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no human review imported"), "{}", text(&out));
}
