//! Counters, gauges and histograms of the proxy (SPEC section 10):
//! attempts by class, permits granted and waited, refusals, pauses, rate
//! cuts, tokens, the permit-wait and upstream-latency histograms, calls
//! per served model, the effective rate per upstream. Rendered in the
//! Prometheus text format at `GET /metrics`; summarised at `info` every
//! minute by [`Metrics::spawn_summary`] (per-call lines are `debug`).
//! The histogram and the label escaping are the ones every role shares
//! (`cohort_telemetry::metrics`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cohort_core::taxonomy::AttemptClass;
use cohort_telemetry::metrics::{Histogram, escape_label as label};

/// How often the `info` summary line is logged (when there was traffic).
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// The most distinct (upstream, requested, served) label sets kept; the
/// rest count under `served_model="other"`, so a router that names a new
/// model per call cannot grow the exposition without bound.
pub const MAX_SERVED_LABEL_SETS: usize = 64;

/// Process-wide metrics; relaxed atomics, as counters need no ordering.
#[derive(Debug, Default)]
pub struct Metrics {
    attempts: [AtomicU64; AttemptClass::ALL.len()],
    permits_granted: AtomicU64,
    permits_waited: AtomicU64,
    permit_wait_us: AtomicU64,
    permit_deadlines: AtomicU64,
    upstream_pauses: AtomicU64,
    rate_cuts: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    permit_wait: Histogram,
    /// Per upstream. A read lock and atomics per call; the write lock only
    /// for an upstream's first call.
    latency: RwLock<BTreeMap<String, Arc<Histogram>>>,
    /// (upstream, requested model, served model) -> calls.
    served: Mutex<HashMap<(String, String, String), u64>>,
    /// Upstream -> effective requests per minute (set when it changes).
    effective_rpm: Mutex<BTreeMap<String, f64>>,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// (class, attempts) for every class, in [`AttemptClass::ALL`] order.
    pub attempts: Vec<(AttemptClass, u64)>,
    pub permits_granted: u64,
    /// Permits whose booked slot was in the future (the caller slept).
    pub permits_waited: u64,
    pub permit_wait_us: u64,
    /// Bookings refused because the slot was past the caller's deadline.
    pub permit_deadlines: u64,
    pub upstream_pauses: u64,
    pub rate_cuts: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl MetricsSnapshot {
    pub fn attempts_of(&self, class: AttemptClass) -> u64 {
        self.attempts.iter().find(|(c, _)| *c == class).map_or(0, |(_, n)| *n)
    }

    fn calls(&self) -> u64 {
        self.attempts.iter().map(|(_, n)| n).sum()
    }
}

fn index(class: AttemptClass) -> usize {
    AttemptClass::ALL.iter().position(|c| *c == class).unwrap_or(0)
}

/// What the last summary line saw, so the next one covers what came since.
#[derive(Debug, Default)]
pub struct SummaryState {
    last: MetricsSnapshot,
    wait_counts: Vec<u64>,
}

impl Metrics {
    pub fn attempt(&self, class: AttemptClass) {
        self.attempts[index(class)].fetch_add(1, Ordering::Relaxed);
    }

    /// A permit granted after `waited`; `slept`: its booked slot was in
    /// the future (only those count as waited).
    pub fn permit_granted(&self, waited: Duration, slept: bool) {
        self.permits_granted.fetch_add(1, Ordering::Relaxed);
        self.permit_wait.record(waited);
        if slept {
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

    /// A provider 429 on a granted permit, reported to the rate.
    pub fn rate_cut(&self) {
        self.rate_cuts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tokens(&self, input: u64, output: u64) {
        self.input_tokens.fetch_add(input, Ordering::Relaxed);
        self.output_tokens.fetch_add(output, Ordering::Relaxed);
    }

    /// One attempt's latency at `upstream`.
    pub fn upstream_latency(&self, upstream: &str, latency: Duration) {
        if let Some(h) = self.latency.read().unwrap_or_else(|e| e.into_inner()).get(upstream) {
            h.record(latency);
            return;
        }
        let mut map = self.latency.write().unwrap_or_else(|e| e.into_inner());
        map.entry(upstream.to_owned()).or_default().record(latency);
    }

    /// A call of `upstream` asked for `requested` and served by `served`.
    pub fn served(&self, upstream: &str, requested: &str, served: &str) {
        let mut map = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let key = (upstream.to_owned(), requested.to_owned(), served.to_owned());
        if let Some(n) = map.get_mut(&key) {
            *n += 1;
            return;
        }
        let key = if map.len() < MAX_SERVED_LABEL_SETS {
            key
        } else {
            (upstream.to_owned(), "other".to_owned(), "other".to_owned())
        };
        *map.entry(key).or_default() += 1;
    }

    /// The effective rate of `upstream` (requests per minute).
    pub fn effective_rpm(&self, upstream: &str, rpm: f64) {
        self.effective_rpm.lock().unwrap_or_else(|e| e.into_inner()).insert(upstream.to_owned(), rpm);
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
            rate_cuts: get(&self.rate_cuts),
            input_tokens: get(&self.input_tokens),
            output_tokens: get(&self.output_tokens),
        }
    }

    /// Everything in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let s = self.snapshot();
        let mut out = String::new();
        let p = "cohort_judge_proxy";
        let _ = writeln!(out, "# HELP {p}_attempts_total Upstream attempts by outcome class.");
        let _ = writeln!(out, "# TYPE {p}_attempts_total counter");
        for (class, n) in &s.attempts {
            let _ = writeln!(out, "{p}_attempts_total{{class=\"{class}\"}} {n}");
        }
        let mut counter = |name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {p}_{name} {help}\n# TYPE {p}_{name} counter\n{p}_{name} {v}");
        };
        counter("permits_granted_total", "Rate-limit permits granted.", s.permits_granted);
        counter(
            "permits_waited_total",
            "Permits whose booked slot was in the future (the caller slept for it).",
            s.permits_waited,
        );
        counter("permit_wait_microseconds_total", "Time slept for the permits counted as waited.", s.permit_wait_us);
        counter(
            "permit_deadlines_total",
            "Bookings refused because the earliest slot was past the caller's deadline.",
            s.permit_deadlines,
        );
        counter(
            "upstream_pauses_total",
            "Pauses of an upstream (provider Retry-After or nothing remaining).",
            s.upstream_pauses,
        );
        counter("rate_limited_permits_total", "Provider 429s on permits the limiter granted.", s.rate_cuts);
        counter("input_tokens_total", "Input tokens the providers reported.", s.input_tokens);
        counter("output_tokens_total", "Output tokens the providers reported.", s.output_tokens);

        let _ = writeln!(out, "# HELP {p}_permit_wait_seconds Time from booking to a granted permit.");
        let _ = writeln!(out, "# TYPE {p}_permit_wait_seconds histogram");
        self.permit_wait.render(&mut out, &format!("{p}_permit_wait_seconds"), "");

        let _ = writeln!(out, "# HELP {p}_upstream_latency_seconds One attempt, from sending to the end of the body.");
        let _ = writeln!(out, "# TYPE {p}_upstream_latency_seconds histogram");
        for (upstream, h) in self.latency.read().unwrap_or_else(|e| e.into_inner()).iter() {
            h.render(&mut out, &format!("{p}_upstream_latency_seconds"), &format!("upstream=\"{}\"", label(upstream)));
        }

        let _ = writeln!(out, "# HELP {p}_served_total Successful calls by requested and served model.");
        let _ = writeln!(out, "# TYPE {p}_served_total counter");
        let served: BTreeMap<_, _> =
            self.served.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect();
        for ((upstream, requested, model), n) in served {
            let _ = writeln!(
                out,
                "{p}_served_total{{upstream=\"{}\",requested_model=\"{}\",served_model=\"{}\"}} {n}",
                label(&upstream),
                label(&requested),
                label(&model)
            );
        }

        let _ = writeln!(out, "# HELP {p}_effective_rpm The requests per minute the limiter allows an upstream now.");
        let _ = writeln!(out, "# TYPE {p}_effective_rpm gauge");
        for (upstream, rpm) in self.effective_rpm.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "{p}_effective_rpm{{upstream=\"{}\"}} {rpm}", label(upstream));
        }
        out
    }

    /// One line about what happened since `state` (then updated), or None
    /// when there was no traffic.
    pub fn summary_line(&self, state: &mut SummaryState) -> Option<String> {
        let now = self.snapshot();
        let last = &state.last;
        let calls = now.calls() - last.calls();
        let granted = now.permits_granted - last.permits_granted;
        let refused = now.permit_deadlines - last.permit_deadlines;
        if calls == 0 && granted == 0 && refused == 0 {
            return None;
        }
        let classes: Vec<String> = now
            .attempts
            .iter()
            .zip(&last.attempts)
            .filter(|((_, a), (_, b))| a > b)
            .map(|((c, a), (_, b))| format!("{c}={}", a - b))
            .collect();
        let q =
            |x: f64| self.permit_wait.quantile_since(&state.wait_counts, x).map_or("-".to_owned(), |v| format!("{v}s"));
        let rates: Vec<String> = self
            .effective_rpm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(u, r)| format!("{u}={r:.0}"))
            .collect();
        let line = format!(
            "calls {calls} ({}); permits granted {granted}, waited {}, refused {refused}; wait p50 <= {}, p99 <= {}; \
             rate-limited {}; effective rpm {}",
            classes.join(" "),
            now.permits_waited - last.permits_waited,
            q(0.5),
            q(0.99),
            now.rate_cuts - last.rate_cuts,
            rates.join(" ")
        );
        state.wait_counts = self.permit_wait.counts();
        state.last = now;
        Some(line)
    }

    /// Logs [`Metrics::summary_line`] at `info` every `interval` while
    /// there is traffic. The caller owns the task (abort it on shutdown).
    pub fn spawn_summary(self: Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut state = SummaryState::default();
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                if let Some(line) = self.summary_line(&mut state) {
                    tracing::info!(summary = %line, "judge proxy summary");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_permits_that_slept_count_as_waited() {
        let m = Metrics::default();
        m.permit_granted(Duration::from_micros(30), false);
        m.permit_granted(Duration::from_millis(300), true);
        let s = m.snapshot();
        assert_eq!((s.permits_granted, s.permits_waited), (2, 1));
        let text = m.render();
        assert!(text.contains("cohort_judge_proxy_permit_wait_seconds_bucket{le=\"0.001\"} 1\n"), "{text}");
        assert!(text.contains("cohort_judge_proxy_permit_wait_seconds_bucket{le=\"0.5\"} 2\n"), "{text}");
        assert!(text.contains("cohort_judge_proxy_permit_wait_seconds_count 2\n"), "{text}");
    }

    #[test]
    fn served_label_sets_are_bounded() {
        let m = Metrics::default();
        for i in 0..100 {
            m.served("u", "alias", &format!("model-{i}"));
        }
        let text = m.render();
        let sets = text.lines().filter(|l| l.starts_with("cohort_judge_proxy_served_total{")).count();
        assert_eq!(sets, MAX_SERVED_LABEL_SETS + 1, "{text}");
        assert!(text.contains("served_model=\"other\"} 36"), "{text}");
    }

    #[test]
    fn every_sample_line_follows_its_type_line() {
        let m = Metrics::default();
        m.upstream_latency("u", Duration::from_millis(20));
        m.effective_rpm("u", 600.0);
        let text = m.render();
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap_or_default().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap_or_default();
                let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
                assert!(typed.contains(name) || typed.contains(family), "no TYPE before {line}");
            }
        }
    }

    #[test]
    fn the_summary_speaks_only_after_traffic() {
        let m = Metrics::default();
        let mut state = SummaryState::default();
        assert_eq!(m.summary_line(&mut state), None);
        m.attempt(AttemptClass::Ok);
        m.permit_granted(Duration::from_millis(40), true);
        let line = m.summary_line(&mut state).unwrap_or_default();
        assert!(line.contains("calls 1") && line.contains("p50 <= 0.05s"), "{line}");
        assert_eq!(m.summary_line(&mut state), None);
    }
}
