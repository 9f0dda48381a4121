//! `cohort calibrate` and `cohort review agreement`, run as real processes
//! on CSV fixtures written here: the `--json` figures equal hand-computed
//! values, missing and extra items are reported and not counted, the
//! majority vote is scored as the judge `majority`, and bad input names
//! file:line, prints nothing to stdout and exits 2.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn csv(rows: &[(&str, &str)]) -> String {
    let mut s = String::from("item_id,label\n");
    for (id, label) in rows {
        s.push_str(&format!("{id},{label}\n"));
    }
    s
}

fn cohort(args: &[&str]) -> Output {
    Command::new(COHORT).args(args).output().unwrap()
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "cohort failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn close(v: &Value, expected: f64) {
    let got = v["value"].as_f64().unwrap_or_else(|| panic!("no value in {v}"));
    assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
}

/// Gold: i1..i10, P P P P F F F F F F.
/// Judge a: P P P F P F F F F F, no verdict on i10, plus an item x1 gold
/// does not have. On i1..i9: tp 3, fn 1, fp 1, tn 4.
/// Judge b: P P F F F F F F F P (all ten).
/// Judge c: P F P P P P F F F F (all ten).
fn fixtures(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let gold: Vec<(String, &str)> = (1..=10).map(|i| (format!("i{i}"), if i <= 4 { "pass" } else { "fail" })).collect();
    let gold: Vec<(&str, &str)> = gold.iter().map(|(i, l)| (i.as_str(), *l)).collect();
    let judge = |labels: &str| -> Vec<(String, &'static str)> {
        labels
            .chars()
            .enumerate()
            .filter(|(_, c)| *c != '.')
            .map(|(i, c)| (format!("i{}", i + 1), if c == 'P' { "PASS" } else { "no" }))
            .collect()
    };
    let as_rows = |v: &[(String, &'static str)]| -> String {
        let rows: Vec<(&str, &str)> = v.iter().map(|(i, l)| (i.as_str(), *l)).collect();
        csv(&rows)
    };
    let mut a = as_rows(&judge("PPPFPFFFF."));
    a.push_str("x1,pass\n");
    (
        write(dir, "gold.csv", &csv(&gold)),
        write(dir, "a.csv", &a),
        write(dir, "b.csv", &as_rows(&judge("PPFFFFFFFP"))),
        write(dir, "c.csv", &as_rows(&judge("PFPPPPFFFF"))),
    )
}

/// The figures of every judge and of the majority vote, checked by hand.
#[test]
fn calibrate_json_equals_hand_values() {
    let dir = tempfile::tempdir().unwrap();
    let (gold, a, b, c) = fixtures(dir.path());
    let out = cohort(&[
        "calibrate",
        "--gold",
        gold.to_str().unwrap(),
        "--verdicts",
        &format!("a={}", a.display()),
        "--verdicts",
        &format!("b={}", b.display()),
        "--verdicts",
        &format!("c={}", c.display()),
        "--dimension",
        "factual_support",
        "--json",
    ]);
    let v = json(&out);
    assert_eq!(v["dimension"], "factual_support");
    assert_eq!(v["gold"]["items"], 10);
    assert_eq!(v["gold"]["pass"], 4);
    assert_eq!(v["bootstrap"]["resamples"], 2000);
    assert_eq!(v["bootstrap"]["seed"], 20261014u64);
    let judges = v["judges"].as_array().unwrap();
    assert_eq!(judges.len(), 4);

    // Judge a on i1..i9: tp 3, fn 1, fp 1, tn 4.
    let ja = &judges[0];
    assert_eq!(ja["name"], "a");
    assert_eq!(
        (ja["tp"].as_u64(), ja["fp"].as_u64(), ja["tn"].as_u64(), ja["fn"].as_u64()),
        (Some(3), Some(1), Some(4), Some(1))
    );
    assert_eq!(ja["items"], 9);
    assert_eq!(ja["missing"]["items"], serde_json::json!(["i10"]));
    assert_eq!(ja["not_in_gold"]["items"], serde_json::json!(["x1"]));
    close(&ja["precision"], 0.75);
    close(&ja["recall"], 0.75);
    close(&ja["f1"], 0.75);
    close(&ja["fpr"], 0.2);
    close(&ja["fnr"], 0.25);
    close(&ja["pass_rate_drift"], 0.0);
    // po = 7/9, pe = (4*4 + 5*5)/81 = 41/81.
    let (po, pe) = (7.0 / 9.0, 41.0 / 81.0);
    close(&ja["kappa"], (po - pe) / (1.0 - pe));
    for m in ["f1", "precision", "recall", "kappa", "pass_rate_drift", "fpr", "fnr"] {
        let (lo, hi) = (ja[m]["ci_low"].as_f64().unwrap(), ja[m]["ci_high"].as_f64().unwrap());
        let point = ja[m]["value"].as_f64().unwrap();
        assert!(lo <= point && point <= hi && lo < hi, "{m}: {point} [{lo}, {hi}]");
    }

    // Judge b: tp 2, fn 2, fp 1, tn 5: precision 2/3, recall 0.5, F1 4/7,
    // drift 0.3 - 0.4.
    let jb = &judges[1];
    close(&jb["precision"], 2.0 / 3.0);
    close(&jb["recall"], 0.5);
    close(&jb["f1"], 4.0 / 7.0);
    close(&jb["pass_rate_drift"], 0.3 - 0.4);
    assert_eq!(jb["missing"]["count"], 0);

    // Majority of a, b, c per item:
    // i1 PPP=P, i2 PPF=P, i3 PFP=P, i4 FFP=F, i5 PFP=P, i6 FFP=F,
    // i7..i9 F, i10 (a none) b P c F = tie -> undecided.
    // On i1..i9: tp 3 (i1-i3), fn 1 (i4), fp 1 (i5), tn 4.
    let jm = &judges[3];
    assert_eq!(jm["name"], "majority");
    assert_eq!(jm["undecided"]["items"], serde_json::json!(["i10"]));
    assert_eq!(jm["missing"]["count"], 0);
    assert_eq!(
        (jm["tp"].as_u64(), jm["fp"].as_u64(), jm["tn"].as_u64(), jm["fn"].as_u64()),
        (Some(3), Some(1), Some(4), Some(1))
    );
    close(&jm["f1"], 0.75);

    // Pairwise: a vs b on i1..i9 (x1 only in a): a PPPFPFFFF, b PPFFFFFFF:
    // agree on 7, matrix [yes,no] x [yes,no]: [[2,2],[0,5]].
    let pairs = v["agreement"].as_array().unwrap();
    // The labels of `cohort passes` (docs/judging.md): one verdict
    // agreement for judges and passes (it said pass/fail here before).
    assert_eq!(pairs[0]["labels"], serde_json::json!(["yes", "no"]));
    assert_eq!(pairs.len(), 3);
    assert_eq!((pairs[0]["a"].as_str(), pairs[0]["b"].as_str()), (Some("a"), Some("b")));
    assert_eq!(pairs[0]["items"], 9);
    assert_eq!(pairs[0]["matrix"], serde_json::json!([[2, 2], [0, 5]]));
    close(&pairs[0]["raw_agreement"], 7.0 / 9.0);
    // rows (4,5), cols (2,7): pe = (8 + 35)/81.
    let pe = 43.0 / 81.0;
    close(&pairs[0]["kappa"], (7.0 / 9.0 - pe) / (1.0 - pe));
}

/// A perfect judge: intervals collapse to [1, 1]; the table prints and a
/// statistic without a value says undefined (gold without a fail: FPR).
#[test]
fn perfect_judge_and_undefined_figures() {
    let dir = tempfile::tempdir().unwrap();
    let gold = write(dir.path(), "gold.csv", &csv(&[("a", "pass"), ("b", "pass"), ("c", "yes")]));
    let out = cohort(&[
        "calibrate",
        "--gold",
        gold.to_str().unwrap(),
        "--verdicts",
        &format!("j={}", gold.display()),
        "--json",
    ]);
    let v = json(&out);
    let j = &v["judges"][0];
    assert_eq!(v["judges"].as_array().unwrap().len(), 1, "no majority with one judge");
    assert_eq!((j["f1"]["ci_low"].as_f64(), j["f1"]["ci_high"].as_f64()), (Some(1.0), Some(1.0)));
    assert!(j["fpr"]["undefined"].as_str().unwrap().contains("no fail"));
    assert!(j["fpr"]["ci_low"].is_null());
    assert!(j["kappa"]["undefined"].as_str().unwrap().contains("same single label"));
    let table =
        cohort(&["calibrate", "--gold", gold.to_str().unwrap(), "--verdicts", &format!("j={}", gold.display())]);
    assert!(table.status.success());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("j fpr: undefined (gold has no fail"), "{text}");
}

/// Label files are read by report::csv, as review files are: an item id
/// quoted over two lines is one item (the line-by-line reader before it
/// called it an unterminated quote), the rows after it keep their own
/// line numbers in errors, and a CSV syntax error names file:line:column.
#[test]
fn a_quoted_multi_line_field_is_one_item() {
    let dir = tempfile::tempdir().unwrap();
    let two_lines = "item_id,label\n\"claim 1\nsecond line\",pass\nb,fail\n";
    let gold = write(dir.path(), "gold.csv", two_lines);
    let judge = write(dir.path(), "j.csv", "item_id,label\n\"claim 1\nsecond line\",yes\nb,yes\n");
    let v = json(&cohort(&[
        "calibrate",
        "--gold",
        gold.to_str().unwrap(),
        "--verdicts",
        &format!("j={}", judge.display()),
        "--json",
    ]));
    let j = &v["judges"][0];
    assert_eq!((j["items"].as_u64(), j["tp"].as_u64(), j["fp"].as_u64()), (Some(2), Some(1), Some(1)), "{j}");
    assert_eq!(j["missing"]["count"], 0);

    let cases = [
        ("later.csv", "item_id,label\n\"claim 1\nsecond line\",pass\nb,maybe\n", "later.csv:4: column 2 (label)"),
        ("open.csv", "item_id,label\na,pass\n\"b,fail\n", "open.csv:3:1: a quoted field is never closed"),
        ("stray.csv", "item_id,label\na,pa\"ss\n", "stray.csv:2:5: a quote inside an unquoted field"),
    ];
    for (name, text, expected) in cases {
        refuses_label_file(dir.path(), &gold, name, text, expected);
    }
}

/// Bad input: file:line and column in the message, nothing on stdout,
/// exit 2. A missing file is bad input too.
#[test]
fn bad_csv_names_file_and_line_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let gold = write(dir.path(), "gold.csv", &csv(&[("a", "pass"), ("b", "fail")]));
    let cases = [
        ("label.csv", "item_id,label\na,pass\nb,maybe\n", "label.csv:3: column 2 (label): unknown label `maybe`"),
        (
            "dup.csv",
            "item_id,label\na,pass\nb,fail\na,fail\n",
            "dup.csv:4: column 1 (item_id): duplicate item id `a` (first on line 2)",
        ),
        ("header.csv", "id,verdict\na,pass\n", "header.csv:1: missing header"),
    ];
    for (name, text, expected) in cases {
        refuses_label_file(dir.path(), &gold, name, text, expected);
    }
    let out = cohort(&["calibrate", "--gold", dir.path().join("none.csv").to_str().unwrap(), "--verdicts", "j=x.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.csv"));
    // A malformed --verdicts is a usage error (clap: exit 2).
    let out = cohort(&["calibrate", "--gold", gold.to_str().unwrap(), "--verdicts", "no-equals-sign"]);
    assert_eq!(out.status.code(), Some(2));
    let bad = write(dir.path(), "bad-review.csv", "item_id,label\na,unsupported\na,contradicted\n");
    let out = cohort(&["review", "agreement", "--a", gold.to_str().unwrap(), "--b", bad.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad-review.csv:3: column 1 (item_id)"));
}

/// Seed 004's five claim labels, two reviewers with planted disagreements,
/// one item each rater alone labelled: the 5x5 matrix in the seed's order,
/// raw agreement and nominal kappa by hand.
#[test]
fn review_agreement_of_claim_labels() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.csv",
        &csv(&[
            ("c1", "fully_supported"),
            ("c2", "fully_supported"),
            ("c3", "partially_supported"),
            ("c4", "unsupported"),
            ("c5", "contradicted"),
            ("c6", "unverifiable"),
            ("c7", "fully_supported"),
            ("only-a", "unsupported"),
        ]),
    );
    let b = write(
        dir.path(),
        "b.csv",
        &csv(&[
            ("c1", "Fully_Supported"),
            ("c2", "partially_supported"),
            ("c3", "partially_supported"),
            ("c4", "contradicted"),
            ("c5", "contradicted"),
            ("c6", "unverifiable"),
            ("c7", "fully_supported"),
            ("only-b", "unsupported"),
        ]),
    );
    let v = json(&cohort(&["review", "agreement", "--a", a.to_str().unwrap(), "--b", b.to_str().unwrap(), "--json"]));
    assert_eq!(
        v["labels"],
        serde_json::json!(["fully_supported", "partially_supported", "unsupported", "contradicted", "unverifiable"])
    );
    assert_eq!(
        v["matrix"],
        serde_json::json!([[2, 1, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])
    );
    assert_eq!(v["items"], 7);
    assert_eq!(v["only_a"]["items"], serde_json::json!(["only-a"]));
    assert_eq!(v["only_b"]["items"], serde_json::json!(["only-b"]));
    close(&v["raw_agreement"], 5.0 / 7.0);
    // rows (3,1,1,1,1), cols (2,2,0,2,1): pe = (6 + 2 + 0 + 2 + 1)/49.
    let pe = 11.0 / 49.0;
    close(&v["kappa"], (5.0 / 7.0 - pe) / (1.0 - pe));
    assert_eq!(v["weights"], "none");
}

/// Uncertainty scores 0/1/2: weighted kappa by hand (the 3x3 matrix keeps
/// the full scale), and two raters constant on one score: undefined.
#[test]
fn review_agreement_of_uncertainty_scores_weighted_and_undefined() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.csv",
        &csv(&[("o1", "0"), ("o2", "1"), ("o3", "2"), ("o4", "0"), ("o5", "1"), ("o6", "2")]),
    );
    let b = write(
        dir.path(),
        "b.csv",
        &csv(&[("o1", "0"), ("o2", "1"), ("o3", "2"), ("o4", "1"), ("o5", "1"), ("o6", "0")]),
    );
    let args = |w: &str| {
        vec![
            "review".to_owned(),
            "agreement".to_owned(),
            "--a".to_owned(),
            a.display().to_string(),
            "--b".to_owned(),
            b.display().to_string(),
            "--weights".to_owned(),
            w.to_owned(),
            "--json".to_owned(),
        ]
    };
    let run = |w: &str| {
        let args = args(w);
        json(&cohort(&args.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    close(&run("none")["kappa"], 0.5);
    close(&run("linear")["kappa"], 0.4);
    let q = run("quadratic");
    close(&q["kappa"], 3.0 / 10.5);
    assert_eq!(q["labels"], serde_json::json!(["0", "1", "2"]));

    let c = write(dir.path(), "c.csv", &csv(&[("o1", "2"), ("o2", "2")]));
    let out = cohort(&[
        "review",
        "agreement",
        "--a",
        c.to_str().unwrap(),
        "--b",
        c.to_str().unwrap(),
        "--weights",
        "linear",
        "--json",
    ]);
    let v = json(&out);
    assert_eq!(v["kappa"]["undefined"], "both raters gave every item the same single label: chance agreement is 1");
    close(&v["raw_agreement"], 1.0);
    let text = cohort(&["review", "agreement", "--a", c.to_str().unwrap(), "--b", c.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("Cohen's kappa (nominal): undefined (both raters"), "{text}");
}

/// `cohort calibrate --json` with judge `j`'s labels in `name` (`text`):
/// exit 2, nothing on stdout, and `expected` in the error.
fn refuses_label_file(dir: &Path, gold: &Path, name: &str, text: &str, expected: &str) {
    let file = write(dir, name, text);
    let out = cohort(&[
        "calibrate",
        "--gold",
        gold.to_str().unwrap(),
        "--verdicts",
        &format!("j={}", file.display()),
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
    assert!(out.stdout.is_empty(), "{name}: stdout {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(expected), "{name}: {stderr}");
}
