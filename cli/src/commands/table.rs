//! The outcome table: every planned run, by arm and outcome, so the
//! denominators are always visible (failed, refused, timed-out, unavailable
//! and not-run runs included).

use std::fmt::Write as _;
use std::path::Path;

use cohort_core::taxonomy::Outcome;
use cohort_ledger::Status;

/// The table of `status`, as text; a paused arm's resume hint names the
/// cohort directory `dir`, so it can be run as printed.
pub fn outcome_table(status: &Status, dir: &Path) -> String {
    let mut out = String::new();
    let width = status.arms.iter().map(|a| a.id.len()).max().unwrap_or(3).max(5);
    let _ = write!(out, "{:<width$} {:>8} {:>8}", "arm", "planned", "pending");
    for o in Outcome::ALL {
        let _ = write!(out, " {:>11}", o.as_str());
    }
    out.push('\n');
    for arm in &status.arms {
        let finished: u64 = arm.by_outcome.values().sum();
        let _ = write!(out, "{:<width$} {:>8} {:>8}", arm.id, arm.planned, arm.planned - finished);
        for o in Outcome::ALL {
            let _ = write!(out, " {:>11}", arm.by_outcome.get(&o).copied().unwrap_or(0));
        }
        out.push('\n');
    }
    let _ = write!(out, "{:<width$} {:>8} {:>8}", "all", status.planned, status.pending + status.leased);
    for o in Outcome::ALL {
        let _ = write!(out, " {:>11}", status.by_outcome.get(&o).copied().unwrap_or(0));
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "\nplanned {}, attempted {}, completed {}, not completed {} (every planned run stays in the denominators)",
        status.planned,
        status.attempted(),
        status.by_outcome.get(&Outcome::Completed).copied().unwrap_or(0),
        status.finished - status.by_outcome.get(&Outcome::Completed).copied().unwrap_or(0),
    );
    if !status.attempts_by_class.is_empty() {
        let classes: Vec<String> = status.attempts_by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(out, "attempts by class: {}", classes.join(", "));
    }
    if status.discarded > 0 {
        let _ = writeln!(out, "stale reports discarded (kept for audit, never counted): {}", status.discarded);
    }
    for arm in &status.arms {
        if let Some(reason) = &arm.paused {
            let _ = writeln!(out, "arm {} is PAUSED: {reason}", arm.id);
            let _ = writeln!(
                out,
                "  resume with: cohort resume {} --arm {} --ack \"why it is fine\" [--accept-version LABEL]",
                dir.display(),
                arm.id
            );
        }
    }
    if let Some(reason) = &status.aborted {
        let _ = writeln!(out, "the cohort was ABORTED: {reason}");
    }
    out
}
