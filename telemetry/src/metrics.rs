//! The Prometheus text exposition format (version 0.0.4), as every role
//! writes it at `GET /metrics`: a fixed-bucket [`Histogram`], a [`Counter`]
//! and a [`Gauge`] on relaxed atomics, a [`CounterFamily`] of labelled
//! counters bounded in size, and [`Exposition`], which writes each family's
//! `# HELP` and `# TYPE` lines before its samples and escapes label values.
//!
//! Hand-written rather than a metrics crate: each role has a few dozen
//! series, known at compile time, and several are read from the ledger at
//! scrape time rather than kept in a registry; what the format needs (a
//! header per family, escaping, cumulative buckets) fits in this module and
//! is checked by an independent parser in `tests/tests/ops_endpoints.rs`.
//!
//! Counters need no ordering between them, so every atomic is relaxed: a
//! scrape sees each value as it was at some moment during the scrape.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The content type of the text exposition format, as `/metrics` sends it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bucket bounds (seconds) of every duration histogram: from a millisecond
/// (an uncontended permit, a ledger call on loopback) to two minutes (a
/// long queue or a slow reasoning model).
pub const BUCKETS_S: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// The label value that stands for every label set past a family's bound.
pub const OVERFLOW_LABEL: &str = "other";

/// What a metric family is, as its `# TYPE` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A label value escaped for the exposition format (backslash, double
/// quote and newline).
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A `# HELP` text escaped for the exposition format (backslash and
/// newline; quotes are literal there).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `name="value",...` with every value escaped; empty for no labels.
pub fn format_labels(labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
    }
    out
}

/// A monotonic counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (runs in flight).
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A fixed-bucket histogram of durations ([`BUCKETS_S`]); relaxed atomics.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative), the last one for +Inf.
    counts: [AtomicU64; BUCKETS_S.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS_S.iter().position(|b| s <= *b).unwrap_or(BUCKETS_S.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The per-bucket counts (not cumulative), the last one for +Inf.
    pub fn counts(&self) -> Vec<u64> {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.counts().iter().sum()
    }

    /// The upper bound of the bucket holding quantile `q` of the values
    /// counted since `before` (per-bucket counts, as [`Histogram::counts`]
    /// gave them), None when there are none.
    pub fn quantile_since(&self, before: &[u64], q: f64) -> Option<f64> {
        let now = self.counts();
        let delta: Vec<u64> =
            now.iter().zip(before.iter().chain(std::iter::repeat(&0))).map(|(a, b)| a.saturating_sub(*b)).collect();
        let total: u64 = delta.iter().sum();
        if total == 0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in delta.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(BUCKETS_S.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        None
    }

    /// The `_bucket`, `_sum` and `_count` samples of `name` with `labels`
    /// (already formatted, `k="v",...`, or empty); the caller writes the
    /// family's header once ([`Exposition::header`]).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let counts = self.counts();
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, n) in counts.iter().enumerate() {
            cumulative += n;
            let le = BUCKETS_S.get(i).map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}");
        }
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// Counters by a fixed list of label names, at most `max_sets` distinct
/// label sets: past that, new sets count under [`OVERFLOW_LABEL`] for
/// every label, so a value that comes from outside (an arm id, a model
/// name) cannot grow the exposition without bound.
#[derive(Debug)]
pub struct CounterFamily {
    labels: &'static [&'static str],
    max_sets: usize,
    /// Label values (in `labels` order) -> count. A std Mutex: held for a
    /// map lookup only, never across an await.
    values: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl CounterFamily {
    pub fn new(labels: &'static [&'static str], max_sets: usize) -> CounterFamily {
        CounterFamily { labels, max_sets, values: Mutex::new(BTreeMap::new()) }
    }

    pub fn inc(&self, values: &[&str]) {
        self.add(values, 1);
    }

    /// Adds `n` to the label set `values` (one per label name; missing
    /// ones are empty, extra ones ignored).
    pub fn add(&self, values: &[&str], n: u64) {
        let key: Vec<String> =
            (0..self.labels.len()).map(|i| values.get(i).copied().unwrap_or_default().to_owned()).collect();
        let mut map = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = map.get_mut(&key) {
            *v += n;
            return;
        }
        let key = if map.len() < self.max_sets { key } else { vec![OVERFLOW_LABEL.to_owned(); self.labels.len()] };
        *map.entry(key).or_default() += n;
    }

    /// The count of one label set (0 when never counted).
    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        self.values.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied().unwrap_or(0)
    }

    /// Every label set with its count, in label order.
    pub fn snapshot(&self) -> Vec<(Vec<String>, u64)> {
        self.values.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The samples of `name` (the caller writes the header).
    fn render(&self, exposition: &mut Exposition, name: &str) {
        for (values, n) in self.snapshot() {
            let labels: Vec<(&str, &str)> =
                self.labels.iter().copied().zip(values.iter().map(String::as_str)).collect();
            exposition.sample(name, &labels, n);
        }
    }
}

/// One exposition being written: each family's header, then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// The `# HELP` and `# TYPE` lines of family `name`; its samples follow.
    pub fn header(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}\n# TYPE {name} {}", escape_help(help), kind.as_str());
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{}}} {value}", format_labels(labels));
        }
    }

    /// A counter family of one unlabelled sample.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, Kind::Counter, help);
        self.sample(name, &[], value);
    }

    /// A gauge family of one unlabelled sample.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.header(name, Kind::Gauge, help);
        self.sample(name, &[], value);
    }

    /// A labelled counter family, header and samples.
    pub fn counter_family(&mut self, name: &str, help: &str, family: &CounterFamily) {
        self.header(name, Kind::Counter, help);
        family.render(self, name);
    }

    /// A histogram family: the header, then each (labels, histogram).
    pub fn histograms<'a>(
        &mut self,
        name: &str,
        help: &str,
        histograms: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, &'a Histogram)>,
    ) {
        self.header(name, Kind::Histogram, help);
        for (labels, h) in histograms {
            h.render(&mut self.out, name, &format_labels(&labels));
        }
    }

    /// Text written by other code (a role's own renderer), appended as is.
    pub fn push_raw(&mut self, text: &str) {
        self.out.push_str(text);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// The family a sample line belongs to: its name without the
    /// histogram suffixes.
    fn family_of(line: &str) -> &str {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n))
    }

    /// Every sample line comes after its family's `# HELP` and `# TYPE`
    /// lines (HELP first), and no family's header appears twice: what the
    /// format requires of a text exposition.
    #[test]
    fn help_and_type_come_once_before_the_samples() {
        let family = CounterFamily::new(&["arm", "class"], 8);
        family.inc(&["a", "ok"]);
        family.add(&["b", "refusal"], 3);
        let h = Histogram::default();
        h.record(Duration::from_millis(3));
        let mut e = Exposition::new();
        e.counter("x_total", "Things.", 2);
        e.gauge("y", "Level.", -1);
        e.counter_family("z_total", "By arm and class.", &family);
        e.histograms("w_seconds", "How long.", [(vec![("arm", "a")], &h)]);
        let text = e.finish();
        let (mut helped, mut typed) = (HashSet::new(), HashSet::new());
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(!typed.contains(&name), "HELP after TYPE for {name}");
                assert!(helped.insert(name), "two HELP lines: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(typed.insert(rest.split(' ').next().unwrap().to_owned()), "two TYPE lines: {line}");
            } else {
                let family = family_of(line);
                assert!(helped.contains(family) && typed.contains(family), "no header before {line}");
            }
        }
        assert!(text.contains("z_total{arm=\"b\",class=\"refusal\"} 3\n"), "{text}");
        assert!(text.contains("w_seconds_bucket{arm=\"a\",le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("w_seconds_bucket{arm=\"a\",le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("w_seconds_count{arm=\"a\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE y gauge\ny -1\n"), "{text}");
    }

    /// Label values escape backslash, quote and newline; HELP text escapes
    /// backslash and newline and keeps quotes, as the format says.
    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let mut e = Exposition::new();
        e.header("m", Kind::Gauge, "a \"quoted\"\nline \\ here");
        e.sample("m", &[("arm", "x\"y\nz\\")], 1);
        assert_eq!(e.finish(), "# HELP m a \"quoted\"\\nline \\\\ here\n# TYPE m gauge\nm{arm=\"x\\\"y\\nz\\\\\"} 1\n");
    }

    /// A family keeps at most its bound of label sets; the rest count
    /// under `other`, so outside values cannot grow the exposition.
    #[test]
    fn a_counter_family_is_bounded() {
        let family = CounterFamily::new(&["model"], 4);
        for i in 0..10 {
            family.inc(&[&format!("m{i}")]);
        }
        family.inc(&["m0"]);
        let snapshot = family.snapshot();
        assert_eq!(snapshot.len(), 5);
        assert_eq!(family.get(&["m0"]), 2);
        assert_eq!(family.get(&[OVERFLOW_LABEL]), 6);
    }

    /// Buckets are cumulative, the sum is in seconds, and the quantile is
    /// the upper bound of the bucket that holds it.
    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.record(Duration::from_micros(500));
        h.record(Duration::from_millis(200));
        h.record(Duration::from_secs(500));
        let mut out = String::new();
        h.render(&mut out, "d", "");
        assert!(out.contains("d_bucket{le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("d_bucket{le=\"0.25\"} 2\n"), "{out}");
        assert!(out.contains("d_bucket{le=\"120\"} 2\n"), "{out}");
        assert!(out.contains("d_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("d_sum 500.2005\nd_count 3\n"), "{out}");
        assert_eq!(h.quantile_since(&[], 0.5), Some(0.25));
        assert_eq!(h.quantile_since(&h.counts(), 0.5), None);
    }
}
