//! The worker's Prometheus metrics (SPEC section 10), prefixed
//! `cohort_worker_`, and its readiness, for the operations server
//! (`cohort worker --ops-listen`; docs/operations.md lists every metric).
//!
//! One [`WorkerMetrics`] per worker process, shared through
//! [`crate::RunContext::metrics`] so the lease loop, [`crate::execute`]
//! and scoring count into the same place without a global. Relaxed
//! atomics: counters need no ordering between them.
//!
//! Ready means registered with the coordinator and not draining: a worker
//! that is starting, moving its spool, or stopping takes no new runs, so a
//! rollout waits for it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use cohort_core::taxonomy::AttemptClass;
use cohort_telemetry::metrics::{Counter, CounterFamily, Exposition, Gauge, Histogram, OVERFLOW_LABEL};
use cohort_telemetry::ops::{BoxFuture, OpsRole};

use crate::capture::Capture;

/// The prefix of every worker metric.
const P: &str = "cohort_worker";

/// The most arms with a latency histogram of their own; the rest share
/// `arm="other"` (arms come from the cohort's config: a bound, not a cap
/// anyone should meet).
pub const MAX_ARMS: usize = 64;

/// Where the worker is in its life, for readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// Moving its spool, registering, replaying journals: no runs yet.
    Starting = 0,
    /// Registered: leasing and running.
    Registered = 1,
    /// Stopping: no new leases; running runs finish or are given back.
    Draining = 2,
}

/// What this worker process did since it started.
#[derive(Debug)]
pub struct WorkerMetrics {
    /// Attempts carried out, by class, in [`AttemptClass::ALL`] order.
    attempts: [Counter; AttemptClass::ALL.len()],
    /// Per arm: the system's time to its final answer in one attempt
    /// (a clarification exchange included; a timeout counts at the
    /// deadline). A read lock and atomics per attempt; the write lock only
    /// for an arm's first.
    adapter_latency: RwLock<BTreeMap<String, Arc<Histogram>>>,
    /// Cited sources fetched, by result (`ok`, or the failure).
    captures: CounterFamily,
    runs_leased: Counter,
    runs_in_flight: Gauge,
    /// Reports answered by the coordinator, by kind (`attempt`, `result`)
    /// and verdict (`accepted`, `stale`).
    reports: CounterFamily,
    state: AtomicU8,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            attempts: Default::default(),
            adapter_latency: RwLock::default(),
            captures: CounterFamily::new(&["result"], 32),
            runs_leased: Counter::default(),
            runs_in_flight: Gauge::default(),
            reports: CounterFamily::new(&["kind", "verdict"], 8),
            state: AtomicU8::new(WorkerState::Starting as u8),
        }
    }
}

/// Counts one run in flight while it lives: dropped when the run's task
/// ends, however it ends (finished, aborted on a lost lease, panicked).
#[derive(Debug)]
pub struct InFlight(Arc<WorkerMetrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.runs_in_flight.dec();
    }
}

impl WorkerMetrics {
    pub fn set_state(&self, state: WorkerState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn state(&self) -> WorkerState {
        match self.state.load(Ordering::Relaxed) {
            1 => WorkerState::Registered,
            2 => WorkerState::Draining,
            _ => WorkerState::Starting,
        }
    }

    /// One attempt carried out through an arm's adapter, with its class.
    pub fn attempt(&self, class: AttemptClass) {
        let i = AttemptClass::ALL.iter().position(|c| *c == class).unwrap_or(0);
        self.attempts[i].inc();
    }

    /// How many attempts of `class` were carried out.
    pub fn attempts_of(&self, class: AttemptClass) -> u64 {
        AttemptClass::ALL.iter().position(|c| *c == class).map_or(0, |i| self.attempts[i].get())
    }

    /// The time `arm`'s system took to answer one attempt.
    pub fn adapter_latency(&self, arm: &str, took: Duration) {
        if let Some(h) = self.adapter_latency.read().unwrap_or_else(|e| e.into_inner()).get(arm) {
            h.record(took);
            return;
        }
        let mut map = self.adapter_latency.write().unwrap_or_else(|e| e.into_inner());
        let key = if map.len() < MAX_ARMS || map.contains_key(arm) { arm } else { OVERFLOW_LABEL };
        map.entry(key.to_owned()).or_default().record(took);
    }

    /// The captures of one scored output.
    pub fn captures(&self, captures: &[Capture]) {
        for c in captures {
            let result = match (c.accessible, c.failure) {
                (true, None) => "ok".to_owned(),
                (false, None) => "inaccessible".to_owned(),
                // The failure's snake_case name, as the run record spells it.
                (_, Some(f)) => serde_json::to_value(f)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "other".to_owned()),
            };
            self.captures.inc(&[&result]);
        }
    }

    pub fn leased(&self) {
        self.runs_leased.inc();
    }

    /// Counts a run in flight until the returned guard is dropped.
    pub fn in_flight(self: &Arc<Self>) -> InFlight {
        self.runs_in_flight.inc();
        InFlight(Arc::clone(self))
    }

    /// The coordinator's answer to one report: `result` (a final result)
    /// or `attempt` (a failed attempt), accepted or stale.
    pub fn reported(&self, result: bool, accepted: bool) {
        let kind = if result { "result" } else { "attempt" };
        self.reports.inc(&[kind, if accepted { "accepted" } else { "stale" }]);
    }

    /// Ready when registered and not draining; else why not.
    pub fn readiness(&self) -> Result<(), String> {
        match self.state() {
            WorkerState::Registered => Ok(()),
            WorkerState::Starting => Err("not registered with the coordinator yet".to_owned()),
            WorkerState::Draining => Err("draining: the worker takes no new runs and is stopping".to_owned()),
        }
    }

    /// Everything in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        let name = format!("{P}_attempts_total");
        e.header(
            &name,
            cohort_telemetry::metrics::Kind::Counter,
            "Attempts carried out through an arm's adapter, by class.",
        );
        for (class, n) in AttemptClass::ALL.iter().zip(&self.attempts) {
            e.sample(&name, &[("class", class.as_str())], n.get());
        }
        let latency = self.adapter_latency.read().unwrap_or_else(|e| e.into_inner());
        e.histograms(
            &format!("{P}_adapter_duration_seconds"),
            "The system's time to its final answer in one attempt, by arm (a clarification exchange included).",
            latency.iter().map(|(arm, h)| (vec![("arm", arm.as_str())], h.as_ref())),
        );
        drop(latency);
        e.counter_family(
            &format!("{P}_captures_total"),
            "Cited sources fetched, by result: ok, inaccessible (not HTTP 200), or the failure (timeout, dns, ...).",
            &self.captures,
        );
        e.counter(&format!("{P}_runs_leased_total"), "Runs leased from the coordinator.", self.runs_leased.get());
        e.gauge(&format!("{P}_runs_in_flight"), "Runs being carried out now.", self.runs_in_flight.get());
        e.counter_family(
            &format!("{P}_reports_total"),
            "Reports the coordinator answered, by kind (attempt, result) and verdict (accepted, stale).",
            &self.reports,
        );
        e.gauge(
            &format!("{P}_ready"),
            "1 while registered and not draining (what /readyz says), else 0.",
            u8::from(self.state() == WorkerState::Registered),
        );
        e.finish()
    }
}

impl OpsRole for WorkerMetrics {
    fn metrics(&self) -> BoxFuture<'_, String> {
        Box::pin(async move { self.render() })
    }

    fn readiness(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { WorkerMetrics::readiness(self) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readiness is registered-and-not-draining; the in-flight gauge
    /// follows its guards; every class has a sample, zeros included.
    #[test]
    fn readiness_and_in_flight_follow_the_worker() {
        let m = Arc::new(WorkerMetrics::default());
        assert!(m.readiness().is_err());
        m.set_state(WorkerState::Registered);
        assert_eq!(m.readiness(), Ok(()));
        let a = m.in_flight();
        let b = m.in_flight();
        drop(a);
        m.attempt(AttemptClass::Refused);
        m.adapter_latency("sim-a", Duration::from_millis(30));
        m.reported(true, true);
        let text = m.render();
        assert!(text.contains("cohort_worker_runs_in_flight 1\n"), "{text}");
        assert!(text.contains("cohort_worker_attempts_total{class=\"refused\"} 1\n"), "{text}");
        assert!(text.contains("cohort_worker_attempts_total{class=\"worker_lost\"} 0\n"), "{text}");
        assert!(text.contains("cohort_worker_adapter_duration_seconds_count{arm=\"sim-a\"} 1\n"), "{text}");
        assert!(text.contains("cohort_worker_reports_total{kind=\"result\",verdict=\"accepted\"} 1\n"), "{text}");
        drop(b);
        m.set_state(WorkerState::Draining);
        assert!(m.readiness().unwrap_err().starts_with("draining"));
        assert!(m.render().contains("cohort_worker_runs_in_flight 0\n"));
    }
}
