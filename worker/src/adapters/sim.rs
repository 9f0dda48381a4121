//! `sim`: a built-in SIMULATED deep-research system, for the offline
//! quickstart and for tests. Every output says it is simulated, and every
//! record of a sim arm carries `simulated: true`. It calls nothing: its
//! reports cite `https://sim.cohort.invalid/...` (a reserved TLD that never
//! resolves).
//!
//! It is deterministic: what happens to a run is a function of the run id
//! and the attempt number (outages depend on the attempt, so a retry can
//! succeed), never of timing. Settings (all optional, in the arm's
//! `settings` table):
//!
//! | setting | default | meaning |
//! |---|---|---|
//! | `latency_ms` | 0 | mean time to answer (+-50 %) |
//! | `refusal_rate` | 0 | share of runs refused |
//! | `failure_rate` | 0 | share of runs answered with a client error or malformed output |
//! | `timeout_rate` | 0 | share of runs that never answer (the worker's deadline ends them) |
//! | `outage_rate` | 0 | share of attempts hitting an outage (503, 429, empty 502, reset) |
//! | `clarification_rate` | 0 | share of runs that first ask a clarifying question |
//! | `unsupported_claim_rate` | 0.2 | share of claims whose cited snippet does not support them |
//! | `version_change_after_runs` | none | after this many answered runs in this process, report `changed_version` |
//! | `changed_version` | `PINNED+1` | the label reported after the change |

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::hash::sha256;
use cohort_core::taxonomy::AttemptClass;

use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply, TokenUsage};
use crate::score::SystemSource;

/// How long a simulated timeout stalls: far past any per-run deadline.
const STALL: Duration = Duration::from_secs(3600);

/// The simulated system of one arm.
#[derive(Debug)]
pub struct SimAdapter {
    arm: String,
    pinned_version: String,
    latency_ms: u64,
    refusal_rate: f64,
    failure_rate: f64,
    timeout_rate: f64,
    outage_rate: f64,
    clarification_rate: f64,
    unsupported_claim_rate: f64,
    version_change_after_runs: Option<u64>,
    changed_version: String,
    /// Answered runs so far in this process (for the version change).
    answered: AtomicU64,
}

impl SimAdapter {
    pub fn from_arm(arm: &ArmConfig) -> Result<SimAdapter, AdapterError> {
        let s = &arm.settings;
        let rate = |field: &str, default: f64| -> Result<f64, AdapterError> {
            match s.get(field) {
                None => Ok(default),
                Some(v) => v.as_f64().filter(|r| (0.0..=1.0).contains(r)).ok_or_else(|| AdapterError::BadSetting {
                    arm: arm.id.clone(),
                    field: field.to_owned(),
                    message: format!("must be a number from 0 to 1, got {v}"),
                }),
            }
        };
        let int = |field: &str| -> Result<Option<u64>, AdapterError> {
            match s.get(field) {
                None => Ok(None),
                Some(v) => v.as_u64().map(Some).ok_or_else(|| AdapterError::BadSetting {
                    arm: arm.id.clone(),
                    field: field.to_owned(),
                    message: format!("must be a whole number, got {v}"),
                }),
            }
        };
        if let Some(key) = s.as_object().and_then(|o| o.keys().find(|k| !KNOWN_SETTINGS.contains(&k.as_str()))) {
            return Err(AdapterError::BadSetting {
                arm: arm.id.clone(),
                field: key.clone(),
                message: format!("unknown sim setting (known: {})", KNOWN_SETTINGS.join(", ")),
            });
        }
        Ok(SimAdapter {
            arm: arm.id.clone(),
            pinned_version: arm.pinned_version.clone(),
            latency_ms: int("latency_ms")?.unwrap_or(0),
            refusal_rate: rate("refusal_rate", 0.0)?,
            failure_rate: rate("failure_rate", 0.0)?,
            timeout_rate: rate("timeout_rate", 0.0)?,
            outage_rate: rate("outage_rate", 0.0)?,
            clarification_rate: rate("clarification_rate", 0.0)?,
            unsupported_claim_rate: rate("unsupported_claim_rate", 0.2)?,
            version_change_after_runs: int("version_change_after_runs")?,
            changed_version: s
                .get("changed_version")
                .and_then(|v| v.as_str())
                .map_or_else(|| format!("{}+1", arm.pinned_version), str::to_owned),
            answered: AtomicU64::new(0),
        })
    }
}

const KNOWN_SETTINGS: [&str; 9] = [
    "latency_ms",
    "refusal_rate",
    "failure_rate",
    "timeout_rate",
    "outage_rate",
    "clarification_rate",
    "unsupported_claim_rate",
    "version_change_after_runs",
    "changed_version",
];

/// A uniform number in [0, 1) from the bytes of `parts`.
fn draw(parts: &[&str]) -> f64 {
    let h = sha256(parts.join("\u{1f}").as_bytes());
    let x = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn nothing(class: AttemptClass, http_status: u16, detail: &str, version: Option<String>) -> AdapterResponse {
    AdapterResponse { observed_version: version, ..AdapterResponse::nothing(class, http_status, detail.to_owned()) }
}

#[async_trait]
impl Adapter for SimAdapter {
    fn simulated(&self) -> bool {
        true
    }

    async fn call(&self, request: &AdapterRequest) -> AdapterResponse {
        let run = request.run_id.as_str();
        let attempt = request.attempt.to_string();
        let latency = (self.latency_ms as f64 * (0.5 + draw(&[run, &attempt, "latency"]))) as u64;
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        let outage = draw(&[run, &attempt, "outage"]);
        if outage < self.outage_rate {
            let which = (draw(&[run, &attempt, "which"]) * 4.0) as u32;
            return match which {
                0 => nothing(AttemptClass::ServerError, 503, "503 service unavailable (simulated)", None),
                1 => nothing(AttemptClass::RateLimited, 429, "429 too many requests (simulated)", None),
                2 => nothing(AttemptClass::EmptyContent, 502, "502 Provider returned empty content (simulated)", None),
                _ => nothing(AttemptClass::ConnectionError, 0, "connection reset by peer (simulated)", None),
            };
        }
        // The rest depends on the run only: a retry meets the same system.
        let fate = draw(&[run, "fate"]);
        let mut threshold = self.timeout_rate;
        if fate < threshold {
            tokio::time::sleep(STALL).await;
            return nothing(AttemptClass::Timeout, 0, "no answer (simulated stall)", None);
        }
        let version = {
            let answered = self.answered.fetch_add(1, Ordering::SeqCst);
            match self.version_change_after_runs {
                Some(after) if answered >= after => self.changed_version.clone(),
                _ => self.pinned_version.clone(),
            }
        };
        threshold += self.refusal_rate;
        if fate < threshold {
            let mut r = nothing(AttemptClass::Refused, 200, "the simulated system declined", Some(version));
            r.reply = Reply::Output("I can't help with researching this request. (SIMULATED REFUSAL)".to_owned());
            return r;
        }
        threshold += self.failure_rate;
        if fate < threshold {
            return if draw(&[run, "failure-kind"]) < 0.5 {
                nothing(AttemptClass::ClientError, 400, "400 invalid request (simulated)", Some(version))
            } else {
                nothing(AttemptClass::Malformed, 200, "unparseable response body (simulated)", Some(version))
            };
        }
        if request.conversation.len() == 1 && draw(&[run, "clarify"]) < self.clarification_rate {
            return AdapterResponse {
                class: AttemptClass::Ok,
                http_status: 200,
                detail: "clarification requested".to_owned(),
                reply: Reply::Clarification(
                    "Before I start: which time period and which kinds of sources should I focus on? (SIMULATED)"
                        .to_owned(),
                ),
                observed_version: Some(version),
                usage: Some(TokenUsage { input_tokens: 80, output_tokens: 20 }),
                citations: cohort_core::scoring::ApiCitations::None,
                sources: Vec::new(),
                retry_after_ms: None,
            };
        }
        let (report, citations, sources) = self.report(&request.question_id, run);
        let input_tokens = request.conversation.iter().map(|t| t.text.len() as u64 / 4 + 1).sum();
        AdapterResponse {
            class: AttemptClass::Ok,
            http_status: 200,
            detail: String::new(),
            usage: Some(TokenUsage { input_tokens, output_tokens: report.len() as u64 / 4 + 1 }),
            reply: Reply::Output(report),
            observed_version: Some(version),
            // The simulated API numbers its citations as its report does.
            citations: cohort_core::scoring::ApiCitations::numbered(citations.into_iter().map(|u| (u, None))),
            sources,
            retry_after_ms: None,
        }
    }
}

impl SimAdapter {
    /// A Markdown report with numbered citations and a reference list, and
    /// the passages the simulated search returned for each source: they
    /// contain the supported claims' sentences and not the unsupported
    /// ones, so a judge has something real to decide.
    fn report(&self, question_id: &str, run: &str) -> (String, Vec<String>, Vec<SystemSource>) {
        let sources = 3 + (draw(&[run, "sources"]) * 4.0) as usize;
        let urls: Vec<String> =
            (1..=sources).map(|i| format!("https://sim.cohort.invalid/{question_id}/source-{i}")).collect();
        // The label is in the heading: headings are never claims.
        let mut body = format!(
            "# Findings on {question_id} (SIMULATED OUTPUT of cohort's built-in sim system, arm {}; not a real product)\n\n",
            self.arm
        );
        let claims = 4 + (draw(&[run, "claims"]) * 6.0) as usize;
        let mut passages: Vec<Vec<String>> = vec![Vec::new(); sources];
        for c in 0..claims {
            let cited = 1 + (draw(&[run, "cite", &c.to_string()]) * sources as f64) as usize % sources;
            let supported = draw(&[run, "support", &c.to_string()]) >= self.unsupported_claim_rate;
            let sentence = if supported {
                passages[cited - 1].push(format!(
                    "In a simulated study, source {cited} reports finding number {c} for this question."
                ));
                format!("Source {cited} reports finding number {c} for this question [{cited}].")
            } else {
                format!("Finding number {c} is asserted here although its source does not say so [{cited}].")
            };
            body.push_str(&sentence);
            body.push(if c % 2 == 1 { '\n' } else { ' ' });
            if c % 2 == 1 {
                body.push('\n');
            }
        }
        body.push_str("\nEvidence on the remaining details is insufficient; they stay unknown.\n\n## References\n\n");
        for (i, url) in urls.iter().enumerate() {
            body.push_str(&format!("{}. [Simulated source {}]({url})\n", i + 1, i + 1));
        }
        let sources = urls
            .iter()
            .zip(passages)
            .enumerate()
            .map(|(i, (url, mut lines))| {
                lines.push(format!("Simulated source {} covers background on {question_id}. (SIMULATED)", i + 1));
                SystemSource {
                    url: url.clone(),
                    title: Some(format!("Simulated source {}", i + 1)),
                    snippet: lines.join(" "),
                    // A simulated source has no publication date: none is invented.
                    published_at: None,
                }
            })
            .collect();
        (body, urls, sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_core::config::AdapterKind;

    fn arm(settings: serde_json::Value) -> ArmConfig {
        ArmConfig {
            id: "s".into(),
            label: "S".into(),
            adapter: AdapterKind::Sim,
            pinned_version: "sim-1".into(),
            vendor_lineage: "sim".into(),
            concurrency: 1,
            optional: false,
            workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
            controls_not_disabled: Vec::new(),
            settings,
        }
    }

    fn request(run: &str, attempt: u32) -> AdapterRequest {
        AdapterRequest {
            run_id: run.into(),
            question_id: "q".into(),
            attempt,
            conversation: vec![super::super::Turn { role: "user".into(), text: "Why?".into() }],
            deadline: None,
        }
    }

    /// Same run and attempt, same answer; the output says it is simulated.
    #[tokio::test]
    async fn deterministic_and_labelled() {
        let sim = SimAdapter::from_arm(&arm(serde_json::json!({}))).unwrap();
        let a = sim.call(&request("q:s:1", 1)).await;
        let b = sim.call(&request("q:s:1", 1)).await;
        assert_eq!(a.reply, b.reply);
        let Reply::Output(text) = a.reply else { panic!("expected output") };
        assert!(text.contains("SIMULATED OUTPUT") && text.contains("## References") && text.contains("[1]"));
        assert_eq!(a.observed_version.as_deref(), Some("sim-1"));
        assert!(sim.simulated());
    }

    /// The rates hold roughly over many runs, and outages vary by attempt.
    #[tokio::test]
    async fn rates_are_roughly_honoured() {
        let sim = SimAdapter::from_arm(&arm(serde_json::json!({"refusal_rate": 0.3, "outage_rate": 0.2}))).unwrap();
        let (mut refused, mut outages) = (0, 0);
        for i in 0..1000 {
            match sim.call(&request(&format!("q{i}:s:1"), 1)).await.class {
                AttemptClass::Refused => refused += 1,
                c if cohort_core::lifecycle::run_retryable(c) => outages += 1,
                _ => {}
            }
        }
        assert!((150..250).contains(&outages), "outages {outages}");
        assert!((180..300).contains(&refused), "refused {refused}");
    }

    /// Bad settings are named.
    #[test]
    fn bad_settings_are_named() {
        let e = SimAdapter::from_arm(&arm(serde_json::json!({"refusal_rate": 2}))).unwrap_err();
        assert!(e.to_string().contains("settings.refusal_rate"), "{e}");
        let e = SimAdapter::from_arm(&arm(serde_json::json!({"colour": 1}))).unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
    }

    /// After the configured number of answered runs the label changes.
    #[tokio::test]
    async fn version_changes_mid_cohort() {
        let sim = SimAdapter::from_arm(&arm(serde_json::json!({"version_change_after_runs": 2}))).unwrap();
        let mut seen = Vec::new();
        for i in 0..3 {
            seen.push(sim.call(&request(&format!("q{i}:s:1"), 1)).await.observed_version.unwrap());
        }
        assert_eq!(seen, ["sim-1", "sim-1", "sim-1+1"]);
    }
}
