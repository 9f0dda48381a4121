//! `cohort status` as a real process on the embedded store, against a sim
//! cohort stopped part-way with one arm paused: per-arm figures, the ETA
//! and its absence, UTC event times, plain text, `--json` checked against
//! the ledger's own counts, and exit codes a script can trust (0 all final,
//! 4 not yet, 2 cannot read).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

use cohort_ledger::Ledger;
use cohort_ledger::sqlite::SqliteLedger;

mod support;
use support::{COHORT, cohort, text};

fn write_cohort(dir: &Path, arms: &str) {
    support::write_cohort(dir, "status-test", 5, arms);
}

fn ledger(dir: &Path) -> SqliteLedger {
    SqliteLedger::open(&dir.join(".cohort/ledger.sqlite")).unwrap()
}

fn utc(ms: i64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
}

/// Runs a cohort of a slow arm `a` and an arm `p` that pauses on a version
/// change after its first run, and interrupts it once `p` is paused and
/// `a` has finished some runs but not all: a cohort part-way.
async fn part_way(dir: &Path) -> Output {
    write_cohort(
        dir,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 1\nsettings = { latency_ms = 400 }\n\n[[arms]]\nid = \"p\"\nlabel = \"P\"\nadapter = \"sim\"\npinned_version = \"p-1\"\nvendor_lineage = \"y\"\nconcurrency = 1\nsettings = { version_change_after_runs = 1, changed_version = \"p-2\" }\n",
    );
    let child = Command::new(COHORT)
        .args(["run", dir.to_str().unwrap(), "--workers", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the cohort did not reach part-way in time");
        if dir.join(".cohort/ledger.sqlite").exists()
            && let Ok(status) = ledger(dir).status().await
            && let [a, p] = status.arms.as_slice()
            && p.paused.is_some()
            && a.by_outcome.values().sum::<u64>() >= 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    child.wait_with_output().unwrap()
}

/// Proves `cohort status` of a cohort part-way exits 4, shows each arm's
/// final count, outcomes, in-flight and pending runs, an ETA for the
/// running arm and none (with the reason) for the paused arm, the pause
/// reason, events with RFC 3339 UTC times, and no terminal codes when its
/// output is not a terminal (nor in `cohort run`'s).
#[tokio::test]
async fn status_part_way_text() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let run = part_way(&dir).await;
    assert_eq!(run.status.code(), Some(4), "{}", text(&run));
    assert!(!text(&run).contains('\x1b'), "cohort run wrote terminal codes into a pipe: {:?}", text(&run));
    let d = dir.to_str().unwrap();

    let out = cohort(&["status", d, "--events", "1000"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(4), "{t}");
    assert!(!t.contains('\x1b'), "terminal codes in piped output: {t:?}");
    let status = ledger(&dir).status().await.unwrap();
    let a = &status.arms[0];
    let a_final: u64 = a.by_outcome.values().sum();
    assert!(a_final < a.planned, "arm a finished before the interrupt: {status:?}");
    let lines: Vec<&str> = t.lines().collect();
    let detail = |arm: &str| {
        let i = lines.iter().position(|l| l.trim_start().starts_with(&format!("{arm} ["))).unwrap();
        (lines[i], lines[i + 1])
    };
    let (a_bar, a_detail) = detail("a");
    assert!(a_bar.contains(&format!("{a_final}/12")), "{t}");
    assert!(a_detail.contains(&format!("final {a_final} (completed {a_final})")), "{t}");
    assert!(a_detail.contains(&format!("pending {}", 12 - a_final - a.leased)), "{t}");
    assert!(a_detail.contains("runs/min") && a_detail.contains("ETA "), "arm a has an ETA: {t}");
    let (p_bar, p_detail) = detail("p");
    assert!(p_bar.contains("PAUSED: version changed: pinned p-1, observed p-2"), "{t}");
    assert!(p_detail.contains("no ETA: paused"), "{t}");
    assert!(!p_detail.contains("ETA ("), "{t}");
    assert!(t.contains("runs not final yet (exit 4)"), "{t}");

    // Every event is shown with its UTC time, none in raw ms.
    let events = ledger(&dir).events(1000).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "arm_paused"), "{events:?}");
    for e in &events {
        let line = format!("  {} {:<14} {}", utc(e.at_ms), e.kind, e.run_id);
        assert!(t.contains(&line), "no line {line:?} in:\n{t}");
        assert!(!t.contains(&e.at_ms.to_string()), "raw ms {} in:\n{t}", e.at_ms);
    }
}

/// Proves `cohort status --json` is one JSON object whose figures are the
/// ledger's own counts, with the progress fields added per arm (an ETA for
/// the running arm, none and why for the paused one), UTC event times that
/// parse back to the ledger's instants, and the same exit code (4).
#[tokio::test]
async fn status_part_way_json_matches_the_ledger() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    part_way(&dir).await;
    let out = cohort(&["status", dir.to_str().unwrap(), "--json", "--events", "1000"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = ledger(&dir);
    let status = l.status().await.unwrap();
    assert_eq!(json["planned"], status.planned);
    assert_eq!(json["finished"], status.finished);
    assert_eq!(json["done"], false);
    assert_eq!(json["exit_code"], 4);
    assert_eq!(json["window_start"], utc(status.window_start_ms.unwrap()));
    let arms = json["arms"].as_array().unwrap();
    assert_eq!(arms.len(), status.arms.len());
    for (shown, arm) in arms.iter().zip(&status.arms) {
        let finished: u64 = arm.by_outcome.values().sum();
        assert_eq!(shown["id"], arm.id.as_str());
        assert_eq!(shown["planned"], arm.planned);
        assert_eq!(shown["finished"], finished);
        assert_eq!(shown["in_flight"], arm.leased);
        assert_eq!(shown["pending"], arm.planned - finished - arm.leased);
        assert_eq!(shown["by_outcome"], serde_json::to_value(&arm.by_outcome).unwrap());
        assert_eq!(shown["paused"], serde_json::to_value(&arm.paused).unwrap());
    }
    let (a, p) = (&arms[0], &arms[1]);
    assert!(a["runs_per_minute"].as_f64().unwrap() > 0.0, "{a}");
    assert!(a["eta_ms"].as_i64().unwrap() > 0, "{a}");
    humantime::parse_rfc3339(a["eta_at"].as_str().unwrap()).unwrap();
    assert!(a["no_eta_reason"].is_null(), "{a}");
    assert!(p["paused"].as_str().unwrap().contains("version changed"), "{p}");
    assert!(p["eta_ms"].is_null() && p["eta_at"].is_null(), "{p}");
    assert!(p["no_eta_reason"].as_str().unwrap().contains("paused"), "{p}");

    let events = l.events(1000).await.unwrap();
    let shown = json["events"].as_array().unwrap();
    assert_eq!(shown.len(), events.len());
    for (s, e) in shown.iter().zip(&events) {
        let at = humantime::parse_rfc3339(s["at"].as_str().unwrap()).unwrap();
        assert_eq!(at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64, e.at_ms, "{s}");
        assert!(s["at"].as_str().unwrap().ends_with('Z'), "{s}");
        assert_eq!(s["at_ms"], e.at_ms);
        assert_eq!(s["kind"], e.kind.as_str());
        assert_eq!(s["run_id"], e.run_id.as_str());
    }
}

/// Proves the exit codes at both ends: 0 (and "every run final", done in
/// the JSON) for a finished cohort, 2 with the reason for a directory that
/// cannot be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_exit_codes_done_and_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    write_cohort(
        &dir,
        "[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"sim\"\npinned_version = \"a-1\"\nvendor_lineage = \"x\"\nconcurrency = 4\n",
    );
    let d = dir.to_str().unwrap();
    support::collect(&dir).await;
    let out = cohort(&["status", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("every planned run is final (exit 0)"), "{}", text(&out));
    assert!(text(&out).contains("every run final"), "{}", text(&out));
    let json = cohort(&["status", d, "--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", text(&json));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["done"], true);
    assert_eq!(json["exit_code"], 0);
    assert_eq!(json["arms"][0]["eta_ms"], 0);

    let missing = tmp.path().join("not-a-cohort");
    let out = cohort(&["status", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("cannot read cohort"), "{}", text(&out));
}
