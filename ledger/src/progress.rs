//! An arm's progress as `cohort status` shows it: what is final, in
//! flight and pending, the throughput over the recent audit log, and the
//! estimated time to every run final (or why there is no estimate).

use std::collections::BTreeMap;

use cohort_core::order::RunId;
use cohort_core::taxonomy::Outcome;

use crate::{LedgerEvent, Status};

/// How far back `cohort status` looks for finished runs to measure an
/// arm's throughput: long enough to smooth slow arms, short enough that a
/// stopped cohort shows no throughput (and so no ETA) rather than an old one.
pub const THROUGHPUT_WINDOW_MS: i64 = 10 * 60_000;

/// The most audit-log entries read to measure throughput: a bounded read
/// whatever the cohort's size (the status counts never read the runs).
pub const THROUGHPUT_EVENTS: usize = 5_000;

/// One arm's progress as `cohort status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmProgress {
    pub id: String,
    pub planned: u64,
    /// Runs with their final outcome.
    pub finished: u64,
    /// Leased: to a worker or, on a manual arm, to a person.
    pub in_flight: u64,
    /// Neither leased nor final.
    pub pending: u64,
    /// Finished runs (not_run excluded: nothing was done) per minute over
    /// the measured span; `None` when none finished in it.
    pub per_minute: Option<f64>,
    pub eta: Eta,
}

/// When an arm should have every run final, or why no estimate is given.
#[derive(Debug, Clone, PartialEq)]
pub enum Eta {
    Done,
    /// In this many ms from now.
    In(i64),
    /// No estimate, and why.
    None(String),
}

/// Each arm's progress from the status counts and the recent audit log:
/// throughput from the `final` events of the last [`THROUGHPUT_WINDOW_MS`]
/// (or since the window opened, when later), the ETA from it. A paused
/// arm, an aborted cohort or an arm with no throughput yet get no ETA, and
/// the reason.
pub fn progress(status: &Status, events: &[LedgerEvent], now: i64) -> Vec<ArmProgress> {
    let since = now.saturating_sub(THROUGHPUT_WINDOW_MS).max(status.window_start_ms.unwrap_or(i64::MIN));
    let span_ms = now.saturating_sub(since).max(1);
    let mut recent: BTreeMap<&str, u64> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == "final" && e.at_ms >= since && e.at_ms <= now) {
        // A run that became not_run (window closed, aborted) was not worked on.
        if e.detail.split(':').next() == Some(Outcome::NotRun.as_str()) {
            continue;
        }
        if let Ok((_, arm, _)) = RunId::split(&e.run_id) {
            *recent.entry(arm).or_default() += 1;
        }
    }
    status
        .arms
        .iter()
        .map(|arm| {
            let finished: u64 = arm.by_outcome.values().sum();
            let left = arm.planned.saturating_sub(finished);
            let n = recent.get(arm.id.as_str()).copied().unwrap_or(0);
            let per_minute = (n > 0).then(|| n as f64 * 60_000.0 / span_ms as f64);
            let eta = if left == 0 {
                Eta::Done
            } else if let Some(reason) = &status.aborted {
                Eta::None(format!("the cohort was aborted ({reason})"))
            } else if arm.paused.is_some() {
                Eta::None("paused: no run is leased until `cohort resume`".to_owned())
            } else if status.window_start_ms.is_none() {
                Eta::None("not started: the window opens at the first lease".to_owned())
            } else if let Some(rate) = per_minute {
                Eta::In((left as f64 / rate * 60_000.0).ceil() as i64)
            } else {
                Eta::None(format!(
                    "no run finished in the last {} min",
                    (span_ms as u64).div_ceil(60_000).min(THROUGHPUT_WINDOW_MS as u64 / 60_000)
                ))
            };
            ArmProgress {
                id: arm.id.clone(),
                planned: arm.planned,
                finished,
                in_flight: arm.leased,
                pending: left.saturating_sub(arm.leased),
                per_minute,
                eta,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use super::*;
    use crate::ArmStatus;

    const NOW: i64 = 1_800_000_000_000;

    fn arm(id: &str, planned: u64, completed: u64, leased: u64, paused: Option<&str>) -> ArmStatus {
        ArmStatus {
            id: id.to_owned(),
            planned,
            leased,
            by_outcome: [(Outcome::Completed, completed)].into_iter().filter(|(_, n)| *n > 0).collect(),
            paused: paused.map(str::to_owned),
            ..ArmStatus::default()
        }
    }

    fn final_event(at_ms: i64, run_id: &str, detail: &str) -> LedgerEvent {
        LedgerEvent { at_ms, kind: "final".to_owned(), run_id: run_id.to_owned(), detail: detail.to_owned() }
    }

    /// Proves the throughput counts the recent finals of each arm (not
    /// not_run, not those older than the window) and the ETA is the runs
    /// left at that rate; a paused arm gets no ETA and says why.
    #[test]
    fn eta_from_recent_finals_and_none_when_paused() {
        let status = Status {
            arms: vec![arm("a", 12, 4, 1, None), arm("p", 12, 2, 0, Some("version changed"))],
            window_start_ms: Some(NOW - 2 * THROUGHPUT_WINDOW_MS),
            ..Status::default()
        };
        let mut events: Vec<LedgerEvent> =
            (1..=4).map(|i| final_event(NOW - i * 60_000, &format!("q{i}:a:1"), "completed")).collect();
        events.push(final_event(NOW - THROUGHPUT_WINDOW_MS - 1, "q9:a:1", "completed"));
        events.push(final_event(NOW - 1_000, "q8:a:1", "not_run: window_closed"));
        events.push(final_event(NOW - 1_000, "q1:p:1", "completed"));
        let p = progress(&status, &events, NOW);
        // 4 finals in 10 minutes: 0.4 a minute; 8 left: 20 minutes.
        assert_eq!(p[0].per_minute, Some(0.4));
        assert_eq!(p[0].eta, Eta::In(20 * 60_000));
        assert_eq!((p[0].finished, p[0].in_flight, p[0].pending), (4, 1, 7));
        assert!(matches!(&p[1].eta, Eta::None(why) if why.contains("paused")), "{:?}", p[1]);
    }

    /// Proves an arm with no recent final gets no ETA (and why), a done arm
    /// says so, and an aborted cohort gives no ETA.
    #[test]
    fn no_eta_without_throughput_or_after_abort() {
        let mut status = Status {
            arms: vec![arm("a", 12, 4, 0, None), arm("d", 2, 2, 0, None)],
            window_start_ms: Some(NOW - 3 * 60_000),
            ..Status::default()
        };
        let p = progress(&status, &[final_event(NOW - 4 * 60_000, "q1:a:1", "completed")], NOW);
        assert!(matches!(&p[0].eta, Eta::None(why) if why == "no run finished in the last 3 min"), "{:?}", p[0]);
        assert_eq!(p[0].per_minute, None);
        assert_eq!(p[1].eta, Eta::Done);
        status.aborted = Some("operator said so".to_owned());
        let p = progress(&status, &[final_event(NOW - 1, "q1:a:1", "completed")], NOW);
        assert!(matches!(&p[0].eta, Eta::None(why) if why.contains("aborted")), "{:?}", p[0]);
    }
}
