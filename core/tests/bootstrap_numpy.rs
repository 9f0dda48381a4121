//! The cluster bootstrap of `cohort_core::stats` checked against an
//! independent implementation: `scripts/bootstrap_reference.py`, which
//! re-implements it with numpy (its own generator, its own sums,
//! `np.percentile`).
//!
//! A fixed synthetic cohort (30 questions x 2 arms, per-question judged and
//! supported counts from a formula) is bootstrapped here; the data and the
//! Rust figures go to a temporary JSON file and the script compares: point
//! values exactly, interval ends within Monte Carlo tolerance (the script
//! explains it), and that the data are varied enough for a wrong bootstrap
//! to fail. python3 and numpy are required: `scripts/test.sh` installs them,
//! and without them this test fails saying how to install them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use cohort_core::stats::{ClusterBootstrap, Estimand, percentile_linear};
use serde_json::json;

const QUESTIONS: usize = 30;

/// The synthetic cohort: each question has a difficulty (a permutation of
/// 0..29, scaled to 0..1) shared by both arms, so the arms are correlated
/// question by question (pairing matters) and questions differ a lot
/// (clustering matters). Arm a has no judged claims on question 11, arm b
/// none on question 4, so the macro rates leave a question out.
fn cohort() -> [(Vec<f64>, Vec<f64>); 2] {
    let difficulty = |q: usize| ((q * 7) % QUESTIONS) as f64 / (QUESTIONS - 1) as f64;
    let arm = |judged: &dyn Fn(usize) -> usize, base: f64, slope: f64, skip: usize| {
        let judged: Vec<f64> = (0..QUESTIONS).map(|q| if q == skip { 0.0 } else { judged(q) as f64 }).collect();
        let supported = judged.iter().enumerate().map(|(q, j)| (j * (base + slope * difficulty(q))).round()).collect();
        (supported, judged)
    };
    [arm(&|q| 2 + (q * 7) % 13, 0.1, 0.85, 11), arm(&|q| 3 + (q * 5) % 11, 0.05, 0.8, 4)]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Runs the numpy reference on the Rust figures; it must agree.
#[test]
fn the_cluster_bootstrap_agrees_with_an_independent_numpy_implementation() {
    let [(sup_a, jud_a), (sup_b, jud_b)] = cohort();
    let micro_a = Estimand::ratio(sup_a.clone(), jud_a.clone());
    let micro_b = Estimand::ratio(sup_b.clone(), jud_b.clone());
    let macro_a = Estimand::macro_rate(&sup_a, &jud_a);
    let macro_b = Estimand::macro_rate(&sup_b, &jud_b);
    let named = [
        ("a.micro", micro_a.clone()),
        ("a.macro", macro_a.clone()),
        ("b.micro", micro_b.clone()),
        ("b.macro", macro_b.clone()),
        ("diff.micro", Estimand::difference(micro_a, micro_b)),
        ("diff.macro", Estimand::difference(macro_a, macro_b)),
    ];
    let estimands: Vec<Estimand> = named.iter().map(|(_, e)| e.clone()).collect();
    let boot = ClusterBootstrap::new(QUESTIONS);
    let intervals = boot.try_intervals(&estimands).unwrap();

    let mut points = serde_json::Map::new();
    let mut ends = serde_json::Map::new();
    let mut undefined = serde_json::Map::new();
    for ((name, estimand), interval) in named.iter().zip(&intervals) {
        points.insert((*name).into(), json!(estimand.point().unwrap()));
        ends.insert((*name).into(), json!([interval.ci_low.unwrap(), interval.ci_high.unwrap()]));
        undefined.insert((*name).into(), json!(interval.undefined_draws));
        assert_eq!(interval.draws, 10_000);
    }
    // percentile_linear on a fixed, unevenly spaced sample.
    let mut values: Vec<f64> = (0..37).map(|i| f64::from((i * 17) % 37).powf(1.5) / 7.0).collect();
    values.sort_by(f64::total_cmp);
    let ps = [0.0, 0.025, 0.1, 0.3333, 0.5, 0.975, 0.999, 1.0];
    let rust_percentiles: Vec<f64> = ps.iter().map(|&p| percentile_linear(&values, p).unwrap()).collect();

    let input = json!({
        "questions": QUESTIONS,
        "draws": boot.draws,
        "seed": boot.seed,
        "arms": {
            "a": {"supported": sup_a, "judged": jud_a},
            "b": {"supported": sup_b, "judged": jud_b},
        },
        "pair": ["a", "b"],
        "rust": {"points": points, "intervals": ends, "undefined_draws": undefined},
        "percentiles": {"values": values, "p": ps, "rust": rust_percentiles},
    });
    let file = std::env::temp_dir().join(format!("cohort-bootstrap-numpy-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec_pretty(&input).unwrap()).unwrap();

    let script = repo_root().join("scripts/bootstrap_reference.py");
    let output = Command::new("python3").arg(&script).arg(&file).output();
    let _ = std::fs::remove_file(&file);
    let output = output.unwrap_or_else(|e| {
        panic!(
            "could not run python3 ({e}): install python3 and numpy \
             ('apt-get install python3' and 'python3 -m pip install numpy'; scripts/test.sh does both)"
        )
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "bootstrap_reference.py disagrees or could not run (status {}); install numpy with \
         'python3 -m pip install numpy' if it is missing\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all agree"), "{stdout}");
}

/// The exact re-derivation of `scripts/rederive_report.py` (pure-Python
/// ChaCha20, the documented procedure) gives the same intervals as
/// `ClusterBootstrap` on the 30-question cohort, to the last bit: the
/// procedure in `core/src/stats.rs` is complete enough to re-derive.
#[test]
fn the_documented_procedure_rederives_the_intervals_exactly_in_python() {
    let [(sup_a, jud_a), (sup_b, jud_b)] = cohort();
    let ratios = [
        (sup_a.clone(), jud_a.clone()),
        (sup_b.clone(), jud_b.clone()),
        match Estimand::macro_rate(&sup_a, &jud_a) {
            Estimand::Ratio { num, den } => (num, den),
            Estimand::Difference(..) => unreachable!(),
        },
    ];
    let estimands: Vec<Estimand> = ratios.iter().map(|(n, d)| Estimand::ratio(n.clone(), d.clone())).collect();
    let rust = ClusterBootstrap::new(QUESTIONS).try_intervals(&estimands).unwrap();
    let program = "import json, sys\n\
                   sys.path.insert(0, sys.argv[1])\n\
                   import rederive_report\n\
                   ratios = json.load(sys.stdin)\n\
                   print(json.dumps(rederive_report.intervals(ratios, 30, 10000, 20261014)))\n";
    let mut child = Command::new("python3")
        // Importing the script must not leave a __pycache__ in the tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg("-c")
        .arg(program)
        .arg(repo_root().join("scripts"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run python3 ({e}): install it ('apt-get install python3')"));
    let input = serde_json::to_vec(&ratios).unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
    let python: Vec<(f64, f64)> = serde_json::from_slice(&output.stdout).unwrap();
    let rust: Vec<(f64, f64)> = rust.iter().map(|i| (i.ci_low.unwrap(), i.ci_high.unwrap())).collect();
    assert_eq!(python, rust);
}
