//! The run record (seed 004, "Run and output record"): everything kept
//! about one run, stored as JSON in the artifact store; the ledger keeps
//! its hash. The format is documented field by field in `docs/records.md`,
//! which must change with this file: records are what users archive.
//!
//! Times are RFC 3339 in UTC with exactly three fractional digits
//! ([`rfc3339_ms`]), formatted here from Unix milliseconds rather than by a
//! library: the same milliseconds give `duration_ms`, so the two always
//! agree, and no time (even one before 1970 from a skewed clock) can panic.

use serde::{Deserialize, Serialize};

use crate::score::{RunScore, SystemSource};
use crate::{TokenUsage, Turn};

/// The label recorded when the system disclosed no version.
pub const NOT_DISCLOSED: &str = "not disclosed";

/// One run, as recorded.
///
/// Fields added after version 2 carry `#[serde(default)]`, so records
/// written by earlier versions still read (with those fields empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub record_version: u32,
    pub cohort: String,
    pub manifest_sha256: String,
    pub metrics_version: u32,
    pub run_id: String,
    pub question_id: String,
    pub arm: String,
    /// The arm's label (the product).
    pub product: String,
    /// True for the built-in simulated system: never a real product.
    pub simulated: bool,
    pub repeat: u32,
    /// The number of the attempt that produced this record (the last one).
    pub attempt: u32,
    /// The exact prompt submitted.
    pub prompt: String,
    /// The whole conversation: the prompt, any clarifying question and the
    /// reply (the suffix only), and the output.
    pub conversation: Vec<Turn>,
    /// SHA-256 of the raw output in the artifact store; `None` when there
    /// was no output.
    pub output_sha256: Option<String>,
    /// The cited URLs as the API gave them, in order, each once.
    pub citation_urls: Vec<String>,
    /// What the API said the output cites, as it said it (a numbered list,
    /// or annotations with their spans in code points; `none`): scoring
    /// reads the output with it, inline and again in `cohort judge`
    /// (since version 5; `none` in older records).
    #[serde(default)]
    pub api_citations: cohort_core::scoring::ApiCitations,
    /// The model/version label the system reported, or "not disclosed".
    pub observed_version: String,
    pub pinned_version: String,
    /// The arm's adapter settings, as frozen.
    pub settings: serde_json::Value,
    /// When the final attempt started and ended ([`rfc3339_ms`]).
    pub started_at: String,
    pub ended_at: String,
    /// `ended_at - started_at`, in milliseconds.
    pub duration_ms: i64,
    /// The run's final outcome (SPEC section 4), typed: a record cannot
    /// carry a name the taxonomy does not have.
    pub outcome: cohort_core::taxonomy::Outcome,
    pub failure_reason: Option<String>,
    /// The class of the final attempt.
    pub attempt_class: cohort_core::taxonomy::AttemptClass,
    pub token_usage: Option<TokenUsage>,
    /// Cost in the catalog currency; `None` when unknown (never invented).
    pub cost: Option<f64>,
    pub currency: Option<String>,
    /// Source passages the system returned itself (used as evidence).
    /// Since version 2 (defaults to empty for version 1 records; the
    /// `Option` fields below read as `None` when absent).
    #[serde(default)]
    pub system_sources: Vec<SystemSource>,
    /// Claims, citations, captures, verdicts and judge traces of a
    /// completed output; `None` for other outcomes.
    pub scoring: Option<RunScore>,
    /// Why a completed output could not be scored (e.g. too large).
    pub scoring_error: Option<String>,
    /// Every attempt of the run, oldest first, the last one being the
    /// attempt of this record (since version 3; empty in older records).
    #[serde(default)]
    pub attempts: Vec<RecordedAttempt>,
    /// True when `attempts` holds every attempt of the run; false when the
    /// coordinator could not say what the earlier ones were (and in records
    /// older than version 3, which did not list them).
    #[serde(default)]
    pub attempts_complete: bool,
    /// What the person who carried out a manual arm's run recorded
    /// (`cohort submit`; seed 004: plan, settings, region, credits
    /// debited); `None` for the other adapters (since version 4).
    #[serde(default)]
    pub manual: Option<ManualRun>,
}

/// A manual run's own facts, as the person submitted them. The version
/// label, the times, the usage and the clarification exchange go in the
/// record's common fields, as for every run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManualRun {
    /// Who held the lease: `manual:<arm>`.
    pub holder: String,
    /// When `cohort pending` first offered the run ([`rfc3339_ms`]).
    pub offered_at: String,
    /// When `cohort submit` recorded it.
    pub submitted_at: String,
    /// True when the person gave the run's times (`--started`, `--ended`);
    /// false when they default to `offered_at` and `submitted_at` (an
    /// upper bound on the real duration, not a measurement).
    pub times_given: bool,
    /// The subscription plan the product was used on; `None` when not given.
    pub plan: Option<String>,
    /// The region the product was used from; `None` when not given.
    pub region: Option<String>,
    /// The product settings the person used (`--setting key=value`), in
    /// key order.
    pub settings: std::collections::BTreeMap<String, String>,
    /// The credits the product debited for the run, exactly as it showed
    /// them (a decimal number kept as written, never converted to money);
    /// `None` when not given.
    pub credits_debited: Option<String>,
}

/// The current layout version of [`RunRecord`]. History (docs/records.md):
/// 1, the first; 2, `system_sources`, `scoring`, `scoring_error`; 3,
/// `attempts`, `attempts_complete`, times with milliseconds, capture and
/// system-source publication dates; 4, `manual`; 5, `api_citations`, and
/// `scoring.report.reasoning` and each reference's `origin`.
pub const RECORD_VERSION: u32 = 5;

/// One attempt at the run, in the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedAttempt {
    /// 1-based attempt number.
    pub attempt: u32,
    /// The attempt class (`ok`, `server_error`, `worker_lost`...).
    pub class: String,
    /// The HTTP status of the answer; `None` when there was none.
    pub http_status: Option<u16>,
    /// A short, secret-free description; empty when there was nothing to
    /// say (an `ok` attempt).
    pub detail: String,
    pub started_at: String,
    pub ended_at: String,
    /// `ended_at - started_at`, in milliseconds.
    pub duration_ms: i64,
    /// The worker that made the attempt, as the coordinator named it.
    pub worker: String,
    /// The label the system reported on that attempt, or "not disclosed".
    pub observed_version: String,
}

impl RecordedAttempt {
    /// An attempt as recorded: its class already named (the worker turns
    /// the wire's class into its name, `unknown class N` for one this version
    /// does not know: the attempt happened).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        attempt: u32,
        class: String,
        http_status: u32,
        detail: &str,
        (started_ms, ended_ms): (i64, i64),
        worker: &str,
        observed_version: &str,
    ) -> RecordedAttempt {
        RecordedAttempt {
            attempt,
            class,
            http_status: u16::try_from(http_status).ok().filter(|&s| s != 0),
            detail: detail.to_owned(),
            started_at: rfc3339_ms(started_ms),
            ended_at: rfc3339_ms(ended_ms),
            duration_ms: ended_ms - started_ms,
            worker: worker.to_owned(),
            observed_version: version_label(Some(observed_version)),
        }
    }
}

/// The label to record for a reported version: the label itself, or
/// [`NOT_DISCLOSED`] when there is none or it is blank. Never the pinned
/// label: a substituted label would hide an undisclosed runtime version.
pub fn version_label(reported: Option<&str>) -> String {
    match reported.map(str::trim) {
        Some(v) if !v.is_empty() => v.to_owned(),
        _ => NOT_DISCLOSED.to_owned(),
    }
}

/// Unix milliseconds as RFC 3339 in UTC with exactly three fractional
/// digits: `2026-12-01T09:51:32.123Z`. Years outside 0000-9999 are written
/// with their sign and digits (never reached by a real clock).
pub fn rfc3339_ms(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(86_400_000);
    let ms_of_day = unix_ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, ms) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z")
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`, exact for every i64 year in range).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H.
/// Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    /// Proves the format: exactly three fractional digits, `Z`, zero-padded
    /// fields, on the example of the task and on edge milliseconds.
    #[test]
    fn timestamps_have_exactly_three_fractional_digits() {
        assert_eq!(rfc3339_ms(1_796_118_692_123), "2026-12-01T09:51:32.123Z");
        assert_eq!(rfc3339_ms(1_796_118_692_000), "2026-12-01T09:51:32.000Z");
        assert_eq!(rfc3339_ms(1_796_118_692_007), "2026-12-01T09:51:32.007Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        let re = |s: &str| {
            s.len() == 24
                && s.as_bytes()[19] == b'.'
                && s.ends_with('Z')
                && s[20..23].bytes().all(|b| b.is_ascii_digit())
        };
        assert!(re(&rfc3339_ms(1_700_000_000_001)));
    }

    /// Proves the formatter agrees with an independent implementation
    /// (humantime) over a spread of instants from 1970 to 2200, and that
    /// day counts round-trip.
    #[test]
    fn timestamps_agree_with_humantime() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            // xorshift: a fixed, reproducible spread of instants.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ms = (x % 7_258_118_400_000) as i64;
            let reference = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string();
            assert_eq!(rfc3339_ms(ms), reference, "at {ms} ms");
            let days = ms / 86_400_000;
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    /// Proves the version rule: a label is kept verbatim (trimmed), none or
    /// a blank one is "not disclosed".
    #[test]
    fn absent_versions_are_not_disclosed() {
        assert_eq!(version_label(Some("sonar-deep-research")), "sonar-deep-research");
        assert_eq!(version_label(Some("  m-1 ")), "m-1");
        assert_eq!(version_label(Some("")), NOT_DISCLOSED);
        assert_eq!(version_label(Some("  ")), NOT_DISCLOSED);
        assert_eq!(version_label(None), NOT_DISCLOSED);
    }

    /// Proves version-2 and version-1 records (no attempt list, times in
    /// whole seconds) still read, with the newer fields empty and the
    /// attempt list marked incomplete.
    #[test]
    fn older_records_still_read() {
        let v2 = r#"{
          "record_version": 2, "cohort": "c", "manifest_sha256": "ab", "metrics_version": 1,
          "run_id": "q1:a:1", "question_id": "q1", "arm": "a", "product": "A", "simulated": true,
          "repeat": 1, "attempt": 2, "prompt": "Q?\n\nS.", "conversation": [{"role": "user", "text": "Q?\n\nS."}],
          "output_sha256": null, "citation_urls": [], "observed_version": "not disclosed",
          "pinned_version": "a-1", "settings": {}, "started_at": "2026-10-14T09:00:00Z",
          "ended_at": "2026-10-14T09:00:03Z", "duration_ms": 3000, "outcome": "refused",
          "failure_reason": "the system declined", "attempt_class": "refused", "token_usage": null,
          "cost": null, "currency": null,
          "system_sources": [{"url": "https://a.example/", "title": null, "snippet": "s"}],
          "scoring": null, "scoring_error": null
        }"#;
        let r: RunRecord = serde_json::from_str(v2).unwrap();
        assert_eq!((r.record_version, r.attempts.len(), r.attempts_complete), (2, 0, false));
        assert_eq!(r.system_sources[0].published_at, None);

        // Version 1 had no system sources and no scoring.
        let mut v1: serde_json::Value = serde_json::from_str(v2).unwrap();
        let fields = v1.as_object_mut().unwrap();
        for f in ["system_sources", "scoring", "scoring_error"] {
            fields.remove(f);
        }
        fields.insert("record_version".into(), 1.into());
        let r: RunRecord = serde_json::from_value(v1).unwrap();
        assert_eq!((r.record_version, r.system_sources.len(), r.scoring.is_none()), (1, 0, true));
    }
}
