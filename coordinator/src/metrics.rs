//! The coordinator's Prometheus metrics (SPEC section 10), prefixed
//! `cohort_coordinator_`, and what its operations server answers
//! ([`CoordinatorOps`]; docs/operations.md lists every metric).
//!
//! Two kinds: what this process did (leases granted, the Lease call's
//! latency, reports by verdict, reconcile runs, failures and duration),
//! kept in [`CoordinatorMetrics`] on relaxed atomics; and the runs by arm,
//! state and outcome, read from the ledger's [`Status`] at scrape time.
//! The second kind lives in the ledger, not here: a restarted coordinator
//! (or one of two behind a load balancer) reports the same runs, and the
//! status call is O(arms) on both ledgers, so a scrape costs what a
//! reconcile tick does.
//!
//! Readiness mirrors the gRPC health of [`crate::service::run`]: ready
//! until a reconcile fails to reach the ledger, not ready from then until
//! one succeeds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_telemetry::metrics::{Counter, CounterFamily, Exposition, Histogram, Kind};
use cohort_telemetry::ops::{BoxFuture, OpsRole};

use cohort_ledger::{AttemptVerdict, Ledger, Status};

/// The prefix of every coordinator metric.
const P: &str = "cohort_coordinator";

/// What this coordinator process did since it started.
#[derive(Debug)]
pub struct CoordinatorMetrics {
    /// Runs granted by `Lease` calls (one per lease, so per attempt).
    leases_granted: Counter,
    /// Whole `Lease` calls, from the request to the answer (the ledger's
    /// grant and the earlier attempts of each granted run).
    lease_latency: Histogram,
    /// Final results by verdict (`accepted`, `stale`).
    results: CounterFamily,
    /// Reported failed attempts by verdict (`retry`, `final`,
    /// `arm_paused`, `stale`).
    attempts: CounterFamily,
    workers_registered: Counter,
    reconcile_runs: Counter,
    reconcile_failures: Counter,
    reconcile_duration: Histogram,
    /// Whether the last reconcile reached the ledger (true until one
    /// fails, as the gRPC health starts SERVING).
    reconcile_ok: AtomicBool,
    /// The last reconcile's error, for `/readyz`'s reason. A std Mutex:
    /// written by the reconcile loop, read by a probe, never held across
    /// an await.
    reconcile_error: Mutex<Option<String>>,
}

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        CoordinatorMetrics {
            leases_granted: Counter::default(),
            lease_latency: Histogram::default(),
            results: CounterFamily::new(&["verdict"], 4),
            attempts: CounterFamily::new(&["verdict"], 8),
            workers_registered: Counter::default(),
            reconcile_runs: Counter::default(),
            reconcile_failures: Counter::default(),
            reconcile_duration: Histogram::default(),
            reconcile_ok: AtomicBool::new(true),
            reconcile_error: Mutex::new(None),
        }
    }
}

/// Records a `Lease` call's latency when dropped, whichever way the call
/// ends (an error returns early with `?`).
#[derive(Debug)]
pub struct LeaseTimer<'a> {
    metrics: &'a CoordinatorMetrics,
    started: Instant,
}

impl Drop for LeaseTimer<'_> {
    fn drop(&mut self) {
        self.metrics.lease_latency.record(self.started.elapsed());
    }
}

impl CoordinatorMetrics {
    /// Starts timing one `Lease` call.
    pub fn lease_timer(&self) -> LeaseTimer<'_> {
        LeaseTimer { metrics: self, started: Instant::now() }
    }

    pub fn leases_granted(&self, n: usize) {
        self.leases_granted.add(n as u64);
    }

    pub fn worker_registered(&self) {
        self.workers_registered.inc();
    }

    /// The ledger's verdicts on one `ReportResults` batch.
    pub fn results(&self, accepted: &[bool]) {
        let ok = accepted.iter().filter(|a| **a).count() as u64;
        self.results.add(&["accepted"], ok);
        self.results.add(&["stale"], accepted.len() as u64 - ok);
    }

    /// The ledger's verdict on one reported failed attempt.
    pub fn attempt(&self, verdict: &AttemptVerdict) {
        let v = match verdict {
            AttemptVerdict::Stale => "stale",
            AttemptVerdict::Retry { .. } => "retry",
            AttemptVerdict::Final(_) => "final",
            AttemptVerdict::ArmPaused => "arm_paused",
        };
        self.attempts.inc(&[v]);
    }

    /// One reconcile tick that took `took`; `error` when it failed.
    pub fn reconciled(&self, took: Duration, error: Option<String>) {
        self.reconcile_runs.inc();
        self.reconcile_duration.record(took);
        if error.is_some() {
            self.reconcile_failures.inc();
        }
        self.reconcile_ok.store(error.is_none(), Ordering::Relaxed);
        *self.reconcile_error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// Ready unless the last reconcile failed (then why).
    pub fn readiness(&self) -> Result<(), String> {
        if self.reconcile_ok.load(Ordering::Relaxed) {
            return Ok(());
        }
        let error = self.reconcile_error.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default();
        Err(format!("the last reconcile could not reach the ledger: {error}"))
    }

    /// This process's counters, then (when the ledger answered) the runs.
    pub fn render(&self, status: Result<&Status, String>) -> String {
        let mut e = Exposition::new();
        e.counter(
            &format!("{P}_leases_granted_total"),
            "Runs granted to workers (one per attempt).",
            self.leases_granted.get(),
        );
        e.histograms(
            &format!("{P}_lease_duration_seconds"),
            "Lease calls, from the request to the answer (the ledger's grant and the earlier attempts of each run).",
            [(vec![], &self.lease_latency)],
        );
        e.counter(
            &format!("{P}_workers_registered_total"),
            "Workers registered with this process.",
            self.workers_registered.get(),
        );
        e.counter_family(
            &format!("{P}_results_total"),
            "Final results reported, by the ledger's verdict: accepted, or stale (the lease had moved on; kept as a discarded report).",
            &self.results,
        );
        e.counter_family(
            &format!("{P}_attempts_reported_total"),
            "Failed attempts reported, by the ledger's verdict: retry, final, arm_paused or stale.",
            &self.attempts,
        );
        e.counter(
            &format!("{P}_reconcile_runs_total"),
            "Reconcile ticks (expire leases, close the window, refresh arms).",
            self.reconcile_runs.get(),
        );
        e.counter(
            &format!("{P}_reconcile_failures_total"),
            "Reconcile ticks that could not reach the ledger.",
            self.reconcile_failures.get(),
        );
        e.histograms(
            &format!("{P}_reconcile_duration_seconds"),
            "Reconcile ticks, failed ones included.",
            [(vec![], &self.reconcile_duration)],
        );
        e.gauge(
            &format!("{P}_ready"),
            "1 while the last reconcile reached the ledger (what /readyz and gRPC health say), else 0.",
            u8::from(self.reconcile_ok.load(Ordering::Relaxed)),
        );
        e.gauge(
            &format!("{P}_ledger_up"),
            "1 when this scrape could read the ledger's status, else 0 (the run metrics below are then missing).",
            u8::from(status.is_ok()),
        );
        if let Ok(status) = status {
            render_status(&mut e, status);
        }
        e.finish()
    }
}

/// The runs by arm, state and outcome, and the ledger's attempts by class.
fn render_status(e: &mut Exposition, status: &Status) {
    let name = format!("{P}_runs_planned");
    e.header(&name, Kind::Gauge, "Planned runs, by arm.");
    for arm in &status.arms {
        e.sample(&name, &[("arm", &arm.id)], arm.planned);
    }
    let name = format!("{P}_runs");
    e.header(&name, Kind::Gauge, "Runs by arm and state (pending, leased, final), from the ledger.");
    for arm in &status.arms {
        let finished: u64 = arm.by_outcome.values().sum();
        let pending = arm.planned.saturating_sub(arm.leased + finished);
        for (state, n) in [("pending", pending), ("leased", arm.leased), ("final", finished)] {
            e.sample(&name, &[("arm", &arm.id), ("state", state)], n);
        }
    }
    let name = format!("{P}_runs_final");
    e.header(&name, Kind::Gauge, "Final runs by arm and outcome, from the ledger.");
    for arm in &status.arms {
        for outcome in Outcome::ALL {
            let n = arm.by_outcome.get(&outcome).copied().unwrap_or(0);
            e.sample(&name, &[("arm", &arm.id), ("outcome", outcome.as_str())], n);
        }
    }
    let name = format!("{P}_arm_paused");
    e.header(&name, Kind::Gauge, "1 while the arm is paused (cohort status says why), else 0.");
    for arm in &status.arms {
        e.sample(&name, &[("arm", &arm.id)], u8::from(arm.paused.is_some()));
    }
    let name = format!("{P}_ledger_attempts");
    e.header(&name, Kind::Gauge, "Attempts the ledger recorded, by class (discarded reports excluded).");
    for class in AttemptClass::ALL {
        let n = status.attempts_by_class.get(&class).copied().unwrap_or(0);
        e.sample(&name, &[("class", class.as_str())], n);
    }
    e.gauge(
        &format!("{P}_discarded_reports"),
        "Reports the ledger kept as discarded (their lease had moved on).",
        status.discarded,
    );
    e.gauge(&format!("{P}_aborted"), "1 when the cohort was aborted, else 0.", u8::from(status.aborted.is_some()));
}

/// What the coordinator's operations server answers: the metrics (the
/// ledger's status read at each scrape) and readiness.
#[derive(Debug)]
pub struct CoordinatorOps {
    pub ledger: Arc<dyn Ledger>,
    pub metrics: Arc<CoordinatorMetrics>,
}

impl OpsRole for CoordinatorOps {
    fn metrics(&self) -> BoxFuture<'_, String> {
        Box::pin(async move {
            let status = self.ledger.status().await.map_err(|e| e.to_string());
            if let Err(error) = &status {
                tracing::warn!(%error, "a metrics scrape could not read the ledger's status");
            }
            self.metrics.render(status.as_ref().map_err(Clone::clone))
        })
    }

    fn readiness(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.metrics.readiness() })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use cohort_ledger::ArmStatus;

    /// Readiness follows the reconcile loop as gRPC health does: ready at
    /// start, not ready (with the error) after a failed tick, ready again
    /// after a good one; failures are counted.
    #[test]
    fn readiness_follows_the_last_reconcile() {
        let m = CoordinatorMetrics::default();
        assert_eq!(m.readiness(), Ok(()));
        m.reconciled(Duration::from_millis(2), Some("connection refused".into()));
        assert_eq!(m.readiness(), Err("the last reconcile could not reach the ledger: connection refused".into()));
        m.reconciled(Duration::from_millis(2), None);
        assert_eq!(m.readiness(), Ok(()));
        let text = m.render(Err("down".into()));
        assert!(text.contains("cohort_coordinator_reconcile_runs_total 2\n"), "{text}");
        assert!(text.contains("cohort_coordinator_reconcile_failures_total 1\n"), "{text}");
        assert!(text.contains("cohort_coordinator_ledger_up 0\n") && !text.contains("_runs{"), "{text}");
    }

    /// Runs per arm are split into pending, leased and final from the
    /// status, and every outcome of every arm has a sample (zeros too).
    #[test]
    fn runs_by_arm_state_and_outcome_come_from_the_status() {
        let status = Status {
            arms: vec![ArmStatus {
                id: "a\"1".into(),
                planned: 10,
                leased: 2,
                by_outcome: BTreeMap::from([(Outcome::Completed, 5), (Outcome::Refused, 1)]),
                ..ArmStatus::default()
            }],
            attempts_by_class: BTreeMap::from([(AttemptClass::Ok, 6), (AttemptClass::ServerError, 3)]),
            ..Status::default()
        };
        let m = CoordinatorMetrics::default();
        m.results(&[true, false, true]);
        let text = m.render(Ok(&status));
        for line in [
            "cohort_coordinator_runs{arm=\"a\\\"1\",state=\"pending\"} 2",
            "cohort_coordinator_runs{arm=\"a\\\"1\",state=\"leased\"} 2",
            "cohort_coordinator_runs{arm=\"a\\\"1\",state=\"final\"} 6",
            "cohort_coordinator_runs_final{arm=\"a\\\"1\",outcome=\"not_run\"} 0",
            "cohort_coordinator_ledger_attempts{class=\"server_error\"} 3",
            "cohort_coordinator_results_total{verdict=\"accepted\"} 2",
            "cohort_coordinator_results_total{verdict=\"stale\"} 1",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line} missing from\n{text}");
        }
        let finals = text.lines().filter(|l| l.starts_with("cohort_coordinator_runs_final{")).count();
        assert_eq!(finals, Outcome::ALL.len());
    }
}
