//! Counters of the proxy (SPEC section 10): attempts by class, permits
//! granted and waited, permit deadlines, upstream pauses, tokens. Rendered
//! in the Prometheus text format at `GET /metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cohort_core::taxonomy::AttemptClass;

/// Process-wide counters; relaxed atomics, as counters need no ordering.
#[derive(Debug, Default)]
pub struct Metrics {
    attempts: [AtomicU64; AttemptClass::ALL.len()],
    permits_granted: AtomicU64,
    permits_waited: AtomicU64,
    permit_wait_us: AtomicU64,
    permit_deadlines: AtomicU64,
    upstream_pauses: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// (class, attempts) for every class, in [`AttemptClass::ALL`] order.
    pub attempts: Vec<(AttemptClass, u64)>,
    pub permits_granted: u64,
    /// Permits that were not granted at the first ask.
    pub permits_waited: u64,
    pub permit_wait_us: u64,
    pub permit_deadlines: u64,
    pub upstream_pauses: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl MetricsSnapshot {
    pub fn attempts_of(&self, class: AttemptClass) -> u64 {
        self.attempts.iter().find(|(c, _)| *c == class).map_or(0, |(_, n)| *n)
    }
}

fn index(class: AttemptClass) -> usize {
    AttemptClass::ALL.iter().position(|c| *c == class).unwrap_or(0)
}

impl Metrics {
    pub fn attempt(&self, class: AttemptClass) {
        self.attempts[index(class)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn permit_granted(&self, waited: Duration) {
        self.permits_granted.fetch_add(1, Ordering::Relaxed);
        if !waited.is_zero() {
            self.permits_waited.fetch_add(1, Ordering::Relaxed);
            self.permit_wait_us.fetch_add(u64::try_from(waited.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    pub fn permit_deadline(&self) {
        self.permit_deadlines.fetch_add(1, Ordering::Relaxed);
    }

    pub fn upstream_paused(&self) {
        self.upstream_pauses.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tokens(&self, input: u64, output: u64) {
        self.input_tokens.fetch_add(input, Ordering::Relaxed);
        self.output_tokens.fetch_add(output, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            attempts: AttemptClass::ALL.iter().map(|c| (*c, get(&self.attempts[index(*c)]))).collect(),
            permits_granted: get(&self.permits_granted),
            permits_waited: get(&self.permits_waited),
            permit_wait_us: get(&self.permit_wait_us),
            permit_deadlines: get(&self.permit_deadlines),
            upstream_pauses: get(&self.upstream_pauses),
            input_tokens: get(&self.input_tokens),
            output_tokens: get(&self.output_tokens),
        }
    }

    /// The counters in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let s = self.snapshot();
        let mut out = String::new();
        out.push_str("# TYPE cohort_judge_proxy_attempts_total counter\n");
        for (class, n) in &s.attempts {
            let _ = writeln!(out, "cohort_judge_proxy_attempts_total{{class=\"{class}\"}} {n}");
        }
        let mut counter = |name: &str, v: u64| {
            let _ = writeln!(out, "# TYPE cohort_judge_proxy_{name} counter\ncohort_judge_proxy_{name} {v}");
        };
        counter("permits_granted_total", s.permits_granted);
        counter("permits_waited_total", s.permits_waited);
        counter("permit_wait_microseconds_total", s.permit_wait_us);
        counter("permit_deadlines_total", s.permit_deadlines);
        counter("upstream_pauses_total", s.upstream_pauses);
        counter("input_tokens_total", s.input_tokens);
        counter("output_tokens_total", s.output_tokens);
        out
    }
}
