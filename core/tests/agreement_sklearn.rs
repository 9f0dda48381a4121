//! `cohort_core::agreement` checked against scikit-learn: fixed data sets
//! (imbalanced, perfect agreement, a constant rater, two raters constant on
//! one label, the five claim labels of seed 004 nominally, the 0/1/2
//! uncertainty scores with linear and quadratic weights, and judges against
//! gold at seed 002's 18% pass rate), our figures written to a temporary
//! JSON file, and `scripts/sklearn_reference.py` recomputing each with
//! scikit-learn (`cohen_kappa_score`, `confusion_matrix`, `f1_score`,
//! `precision_score`, `recall_score`; FPR, FNR and drift from the confusion
//! matrix) to 1e-12. Where scikit-learn cannot define a figure we must say
//! "undefined". python3, numpy and scikit-learn are required:
//! `scripts/test.sh` installs them, and without them this test fails saying
//! how to install them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use cohort_core::agreement::{KAPPA_CONSTANT, Weights, agreement, binary_scores};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A fixed pseudo-random sequence in `0..k` (a multiplicative hash, so the
/// data are varied but the same on every run).
fn sequence(n: usize, k: usize, salt: u64) -> Vec<usize> {
    (0..n as u64)
        .map(|i| ((i.wrapping_add(salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % k as u64) as usize)
        .collect()
}

/// Rater b: rater a's label, except on every `every`-th item (shifted by
/// `shift` and wrapped), so disagreements are planted at known places.
fn noisy(a: &[usize], k: usize, every: usize, shift: usize) -> Vec<usize> {
    a.iter().enumerate().map(|(i, &l)| if i % every == 0 { (l + shift) % k } else { l }).collect()
}

fn agreement_sets() -> Vec<(&'static str, usize, Vec<usize>, Vec<usize>)> {
    let five = sequence(60, 5, 1);
    let three = sequence(45, 3, 7);
    // 90% of one label: chance agreement is high, kappa far below raw.
    let imbalanced: Vec<usize> = (0..50).map(|i| usize::from(i % 10 == 3)).collect();
    let imbalanced_b: Vec<usize> = (0..50).map(|i| usize::from(i % 10 == 3 || i == 17 || i == 40)).collect();
    vec![
        ("imbalanced binary", 2, imbalanced.clone(), imbalanced_b),
        ("perfect agreement, five labels", 5, five.clone(), five.clone()),
        ("rater a constant", 3, vec![1; 30], sequence(30, 3, 3)),
        ("both constant on one label", 5, vec![2; 12], vec![2; 12]),
        ("five claim labels, nominal", 5, five.clone(), noisy(&five, 5, 3, 1)),
        ("five claim labels, far misses", 5, five.clone(), noisy(&five, 5, 4, 3)),
        ("uncertainty 0/1/2", 3, three.clone(), noisy(&three, 3, 4, 1)),
        ("uncertainty 0/1/2, skewed", 3, three.iter().map(|&l| l.min(1)).collect(), noisy(&three, 3, 5, 2)),
        ("no items", 3, vec![], vec![]),
    ]
}

fn binary_sets() -> Vec<(&'static str, Vec<bool>, Vec<bool>)> {
    // Seed 002's factual support: an 18% gold pass rate.
    let gold: Vec<bool> = sequence(200, 100, 11).into_iter().map(|x| x < 18).collect();
    let lenient: Vec<bool> = gold.iter().enumerate().map(|(i, &g)| g || i % 9 == 0).collect();
    let strict: Vec<bool> = gold.iter().enumerate().map(|(i, &g)| g && i % 3 != 0).collect();
    let noisy: Vec<bool> = gold.iter().enumerate().map(|(i, &g)| if i % 7 == 0 { !g } else { g }).collect();
    vec![
        ("imbalanced, lenient judge", gold.clone(), lenient),
        ("imbalanced, strict judge", gold.clone(), strict),
        ("imbalanced, noisy judge", gold.clone(), noisy),
        ("perfect judge", gold.clone(), gold.clone()),
        ("judge always passes", gold.clone(), vec![true; gold.len()]),
        ("judge never passes", gold.clone(), vec![false; gold.len()]),
        ("gold all fail, judge errs", vec![false; 20], (0..20).map(|i| i % 4 == 0).collect()),
        ("all fail on both sides", vec![false; 10], vec![false; 10]),
        ("every verdict wrong", vec![true, false, true, false], vec![false, true, false, true]),
    ]
}

fn weights_name(w: Weights) -> &'static str {
    match w {
        Weights::None => "none",
        Weights::Linear => "linear",
        Weights::Quadratic => "quadratic",
    }
}

/// Our figures on every data set, in the script's input format.
fn figures() -> Value {
    let mut agreements = Vec::new();
    for (name, k, a, b) in agreement_sets() {
        let labels: Vec<String> = (0..k).map(|i| i.to_string()).collect();
        for w in [Weights::None, Weights::Linear, Weights::Quadratic] {
            let got = agreement(&labels, &a, &b, w);
            agreements.push(json!({
                "name": format!("{name} ({})", weights_name(w)),
                "k": k, "a": a, "b": b, "weights": weights_name(w),
                "rust": {"matrix": got.matrix, "raw_agreement": got.raw_agreement, "kappa": got.kappa},
            }));
        }
    }
    let binaries: Vec<Value> = binary_sets()
        .into_iter()
        .map(|(name, gold, predicted)| {
            let s = binary_scores(&gold, &predicted);
            json!({"name": name, "gold": gold, "predicted": predicted, "rust": s})
        })
        .collect();
    json!({"agreement": agreements, "binary": binaries})
}

/// Runs the script on `input`; (success, stdout).
fn sklearn_reference(input: &Value, tag: &str) -> (bool, String) {
    let file = std::env::temp_dir().join(format!("cohort-agreement-sklearn-{}-{tag}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec_pretty(input).unwrap()).unwrap();
    let output = Command::new("python3").arg(repo_root().join("scripts/sklearn_reference.py")).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let output = output.unwrap_or_else(|e| {
        panic!(
            "could not run python3 ({e}): install python3, numpy and scikit-learn \
             ('apt-get install python3', 'python3 -m pip install numpy scikit-learn'; scripts/test.sh does both)"
        )
    });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code() != Some(2),
        "sklearn_reference.py could not run; install scikit-learn with 'python3 -m pip install scikit-learn' \
         (scripts/test.sh does it)\n{stdout}\n{stderr}"
    );
    (output.status.success(), format!("{stdout}{stderr}"))
}

/// Every figure on every data set equals scikit-learn's to 1e-12, or is
/// undefined exactly where scikit-learn cannot define it.
#[test]
fn agreement_and_calibration_figures_equal_scikit_learn() {
    let input = figures();
    let (ok, stdout) = sklearn_reference(&input, "ok");
    println!("{stdout}");
    assert!(ok, "scikit-learn disagrees:\n{stdout}");
    assert!(stdout.contains("all agree"), "{stdout}");
}

/// The two raters constant on one label: scikit-learn returns nan, we say
/// undefined with the reason (for every weighting); raw agreement is 1.
#[test]
fn kappa_of_two_constant_raters_is_undefined_with_its_reason() {
    let labels: Vec<String> = (0..5).map(|i| i.to_string()).collect();
    for w in [Weights::None, Weights::Linear, Weights::Quadratic] {
        let got = agreement(&labels, &[2; 12], &[2; 12], w);
        assert_eq!(got.kappa.reason(), Some(KAPPA_CONSTANT));
        assert_eq!(got.raw_agreement.value(), Some(1.0));
    }
}

/// The comparison can fail: a kappa off by 1e-9, and a figure we call
/// undefined where scikit-learn defines it, are both reported.
#[test]
fn the_reference_script_catches_a_wrong_figure() {
    let mut input = figures();
    let case = &mut input["agreement"][12]["rust"]["kappa"];
    let v = case["value"].as_f64().expect("a defined kappa in the five-label nominal set");
    *case = json!({"value": v + 1e-9});
    input["binary"][0]["rust"]["recall"] = json!({"undefined": "planted"});
    let (ok, stdout) = sklearn_reference(&input, "bad");
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("2 of"), "{stdout}");
    assert!(stdout.contains("five claim labels, nominal (none): kappa(none)"), "{stdout}");
    assert!(stdout.contains("imbalanced, lenient judge: recall"), "{stdout}");
}
