//! A cohort's status as `cohort status` shows it (docs/status.md): the
//! plain text (no terminal codes, so it reads the same in a terminal, a
//! pipe or a log file), the JSON, and the outcome table `cohort run` prints
//! too, from the ledger's status and `cohort_ledger::progress`.

use std::fmt::Write as _;
use std::path::Path;

use cohort_core::taxonomy::Outcome;
use cohort_ledger::progress::{ArmProgress, Eta, THROUGHPUT_WINDOW_MS};
use cohort_ledger::{LedgerEvent, Status};

use crate::Frozen;

/// The outcome table: every planned run, by arm and outcome, so the
/// denominators are always visible (failed, refused, timed-out,
/// unavailable and not-run runs included).
///
/// As text; a paused arm's resume hint names the
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

/// The rounds of a repeated-run cohort with a schedule: when each opens
/// and closes (from the first start), or the rule before it; empty for a
/// cohort of one round.
fn rounds_line(frozen: &Frozen, first_start_ms: Option<i64>) -> String {
    let config = &frozen.cohort.config;
    let Some(schedule) = config.repeat_schedule.as_ref().filter(|_| config.repeats > 1) else { return String::new() };
    let mut out = format!("rounds: {}\n", schedule.describe(config.repeats, config.window_hours));
    if let Some(start) = first_start_ms {
        let window_ms = i64::from(config.window_hours) * 3_600_000;
        for round in 1..=config.repeats {
            let opens = start.saturating_add(schedule.opens_after_ms(round));
            out.push_str(&format!(
                "  round {round}: opens {} closes {}\n",
                fmt_ms(opens),
                fmt_ms(opens.saturating_add(window_ms))
            ));
        }
    }
    out
}

/// The text of `cohort status`: plain text only (no terminal codes), so
/// it reads the same in a terminal, a pipe or a log file.
pub fn status_text(
    frozen: &Frozen,
    status: &Status,
    progress: &[ArmProgress],
    events: &[LedgerEvent],
    now: i64,
    exit: u8,
) -> String {
    let mut out = format!(
        "cohort \"{}\" (manifest {}) at {}\n",
        status.cohort,
        &status.manifest_sha256[..12.min(status.manifest_sha256.len())],
        fmt_ms(now)
    );
    for (arm, p) in status.arms.iter().zip(progress) {
        let filled = (p.finished * 30).checked_div(arm.planned).unwrap_or(0).min(30) as usize;
        // A manual arm's open runs are leased to the person who runs
        // them (`cohort pending`), not to a worker: say so.
        let leased = match (arm.leased, arm.manual) {
            (0, false) => String::new(),
            (0, true) => " MANUAL".to_owned(),
            (n, false) => format!(" {n} leased"),
            (n, true) => format!(" MANUAL, {n} leased to manual:{} (`cohort submit`)", arm.id),
        };
        let paused = match &arm.paused {
            Some(reason) => format!(" PAUSED: {reason}"),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:>14} [{}{}] {}/{}{leased}{paused}\n",
            arm.id,
            "=".repeat(filled),
            " ".repeat(30 - filled),
            p.finished,
            arm.planned,
        ));
        let outcomes: Vec<String> = arm.by_outcome.iter().map(|(o, n)| format!("{o} {n}")).collect();
        let rate = match p.per_minute {
            Some(r) => format!("{r:.1} runs/min"),
            None => "no throughput".to_owned(),
        };
        let eta = match &p.eta {
            Eta::Done => "every run final".to_owned(),
            Eta::In(ms) => format!("ETA {} ({})", fmt_duration(*ms), fmt_ms(now.saturating_add(*ms))),
            Eta::None(why) => format!("no ETA: {why}"),
        };
        let held = match arm.held_until_ms.filter(|&t| t > now) {
            Some(t) => format!("; held by a Retry-After until {}", fmt_ms(t)),
            None => String::new(),
        };
        out.push_str(&format!(
            "{:>14}  final {} ({}), in flight {}, pending {}; {rate}; {eta}{held}\n",
            "",
            p.finished,
            if outcomes.is_empty() { "none yet".to_owned() } else { outcomes.join(", ") },
            p.in_flight,
            p.pending,
        ));
    }
    match (status.window_start_ms, status.window_end_ms) {
        (Some(s), Some(e)) => out.push_str(&format!("window: opened {} closes {}\n", fmt_ms(s), fmt_ms(e))),
        _ => out.push_str("window: not opened yet (it opens at the first lease)\n"),
    }
    out.push_str(&rounds_line(frozen, status.window_start_ms));
    out.push_str(&format!(
        "throughput: runs finished in the last {} min (or since the window opened); not_run runs not counted\n",
        THROUGHPUT_WINDOW_MS / 60_000
    ));
    out.push('\n');
    out.push_str(&outcome_table(status, &frozen.dir));
    if !events.is_empty() {
        out.push_str("\nrecent events (UTC):\n");
        for e in events {
            out.push_str(&format!("  {} {:<14} {} {}\n", fmt_ms(e.at_ms), e.kind, e.run_id, e.detail));
        }
    }
    out.push_str(&if status.done() {
        format!("\nevery planned run is final (exit {exit})\n")
    } else {
        format!("\n{} runs not final yet (exit {exit})\n", status.planned - status.finished)
    });
    out
}

/// The JSON of `cohort status --json` (field names in docs/status.md):
/// the ledger's status as it is, each arm with its progress added, the
/// events with UTC times, and the exit code.
pub fn status_json(
    status: &Status,
    progress: &[ArmProgress],
    events: &[LedgerEvent],
    now: i64,
    exit: u8,
) -> Result<serde_json::Value, serde_json::Error> {
    use serde_json::json;
    let mut value = serde_json::to_value(status)?;
    if let Some(arms) = value.get_mut("arms").and_then(serde_json::Value::as_array_mut) {
        for (arm, p) in arms.iter_mut().zip(progress) {
            let Some(arm) = arm.as_object_mut() else { continue };
            let (eta_ms, eta_at, no_eta) = match &p.eta {
                Eta::Done => (Some(0), None, None),
                Eta::In(ms) => (Some(*ms), Some(fmt_ms(now.saturating_add(*ms))), None),
                Eta::None(why) => (None, None, Some(why.clone())),
            };
            arm.insert("finished".into(), json!(p.finished));
            arm.insert("in_flight".into(), json!(p.in_flight));
            arm.insert("pending".into(), json!(p.pending));
            arm.insert("runs_per_minute".into(), json!(p.per_minute));
            arm.insert("eta_ms".into(), json!(eta_ms));
            arm.insert("eta_at".into(), json!(eta_at));
            arm.insert("no_eta_reason".into(), json!(no_eta));
        }
    }
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|e| json!({"at": fmt_ms(e.at_ms), "at_ms": e.at_ms, "kind": e.kind, "run_id": e.run_id, "detail": e.detail}))
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert("now".into(), json!(fmt_ms(now)));
        object.insert("window_start".into(), json!(status.window_start_ms.map(fmt_ms)));
        object.insert("window_end".into(), json!(status.window_end_ms.map(fmt_ms)));
        object.insert("throughput_window_ms".into(), json!(THROUGHPUT_WINDOW_MS));
        object.insert("done".into(), json!(status.done()));
        object.insert("exit_code".into(), json!(exit));
        object.insert("events".into(), json!(events));
    }
    Ok(value)
}

/// A duration for people: `45s`, `12m 30s`, `3h 05m`, `2d 04h`.
pub fn fmt_duration(ms: i64) -> String {
    let s = (ms.max(0) as u64).div_ceil(1000);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

fn fmt_ms(ms: i64) -> String {
    cohort_worker::record::rfc3339_ms(ms.max(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(super::fmt_duration(45_000), "45s");
        assert_eq!(super::fmt_duration(750_000), "12m 30s");
        assert_eq!(super::fmt_duration(3 * 3_600_000 + 5 * 60_000), "3h 05m");
        assert_eq!(super::fmt_duration(2 * 86_400_000 + 4 * 3_600_000), "2d 04h");
    }
}
