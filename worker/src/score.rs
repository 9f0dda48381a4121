//! Scoring one completed output (SPEC section 6): claims and citations from
//! `cohort_core::scoring`, evidence from the snippets the system returned or
//! from captured sources, and verdicts from the judge proxy.
//!
//! Rules kept here: a claim is judged only against real source text (the
//! system's own snippets, recorded as such, or text captured from the cited
//! URL, narrowed to the passages most relevant to the claim); a claim whose
//! sources yielded no text is unjudged(source_unavailable); when the judge
//! proxy cannot be reached every planned claim is unjudged(provider_error).
//! Unjudged claims never count either way: the support rate is YES/judged,
//! `None` when nothing was judged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cohort_core::passages::best_passages;
use cohort_core::scoring::{
    JudgePlan, ParsedVerdict, ReportFormat, RunFacts, ScoreReport, UnjudgedReason, Verdict, analyse, judge_sentence,
    plan_judging,
};
use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_client::JudgeClient;
use serde::{Deserialize, Serialize};

use crate::capture::{Capture, SourceCapturer};

/// How many passages of a captured page go to the judge per claim, and how
/// long each may be: enough context, never the whole page.
const PASSAGES_PER_SOURCE: usize = 2;
const PASSAGE_CHARS: usize = 1_200;
/// How many sources are captured at once for one run.
const CAPTURE_CONCURRENCY: usize = 4;

/// Where the judge proxy is and how to use it: `--judge FILE`.
#[derive(Debug, Clone)]
pub struct JudgeEndpoint {
    /// The proxy's gRPC URL (`http://127.0.0.1:7200`).
    pub url: String,
    /// The judge's name in the proxy's config.
    pub judge: String,
    /// The team key; never printed (see the Debug impl of [`TeamKey`]).
    pub key: TeamKey,
    /// How long one run's judging may take, permit waits included.
    pub deadline: Duration,
    /// One HTTP/2 channel to the proxy for every run of this process,
    /// made on first use (it reconnects by itself), instead of a new
    /// connection per run.
    channel: std::sync::Arc<std::sync::OnceLock<tonic::transport::Channel>>,
}

/// A team key: its Debug and Display never show it.
#[derive(Clone)]
pub struct TeamKey(String);

impl std::fmt::Debug for TeamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TeamKey([redacted])")
    }
}

/// `--judge FILE` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJudgeFile {
    url: String,
    judge: String,
    /// The environment variable holding the team key.
    key_env: Option<String>,
    /// A file holding the team key (first line).
    key_file: Option<String>,
    #[serde(default = "default_deadline_secs")]
    deadline_secs: u64,
}

fn default_deadline_secs() -> u64 {
    300
}

/// Why a judge file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JudgeFileError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl JudgeEndpoint {
    /// An endpoint from its parts (a proxy started in this process).
    pub fn new(url: String, judge: String, key: String, deadline: Duration) -> JudgeEndpoint {
        JudgeEndpoint { url, judge, key: TeamKey(key), deadline, channel: Default::default() }
    }

    /// Reads `--judge FILE` (TOML: `url`, `judge`, `key_env` or `key_file`,
    /// `deadline_secs`). Errors name the file and the field, never the key.
    pub fn from_file(path: &Path) -> Result<JudgeEndpoint, JudgeFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| JudgeFileError::Read { path: shown.clone(), message: e.to_string() })?;
        let raw: RawJudgeFile = toml::from_str(&text)
            .map_err(|e| JudgeFileError::Invalid { path: shown.clone(), message: e.message().to_owned() })?;
        let invalid = |message: String| JudgeFileError::Invalid { path: shown.clone(), message };
        let key = match (&raw.key_env, &raw.key_file) {
            (Some(var), None) => std::env::var(var)
                .map_err(|_| invalid(format!("field `key_env`: the environment variable {var} is not set")))?,
            (None, Some(file)) => std::fs::read_to_string(file)
                .map_err(|e| invalid(format!("field `key_file`: cannot read {file}: {e}")))?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
            _ => return Err(invalid("set exactly one of `key_env` and `key_file` for the team key".to_owned())),
        };
        if key.is_empty() {
            return Err(invalid("the team key is empty".to_owned()));
        }
        if !raw.url.starts_with("http://") && !raw.url.starts_with("https://") {
            return Err(invalid(format!("field `url`: {:?} is not an http(s) URL", raw.url)));
        }
        Ok(JudgeEndpoint {
            url: raw.url,
            judge: raw.judge,
            key: TeamKey(key),
            deadline: Duration::from_secs(raw.deadline_secs.max(1)),
            channel: Default::default(),
        })
    }
}

/// A source passage the system under test returned itself (e.g. Perplexity's
/// `search_results`), used as evidence instead of a capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemSource {
    pub url: String,
    pub title: Option<String>,
    pub snippet: String,
    /// The publication date the system gave for the source (Perplexity's
    /// `search_results[].date`), as it gave it; `None` when it gave none.
    #[serde(default)]
    pub published_at: Option<String>,
}

/// Where a reference's evidence came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceSource {
    pub index: u32,
    pub url: Option<String>,
    /// `given` (supplied with the report), `system` (snippets the system
    /// returned), `capture` (fetched), or `none` (no text recovered).
    pub source: String,
}

/// The judge's side of a run's scoring.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    pub requested_model: String,
    /// The models that actually answered.
    pub served_models: Vec<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cost in millionths of `currency`; `None` when unknown.
    pub cost_micros: Option<i64>,
    pub currency: String,
    /// The class of every upstream attempt, in order.
    pub attempt_classes: Vec<String>,
    /// Why judging failed as a whole, when it did.
    pub error: Option<String>,
    /// The judge was the proxy's SIMULATED `sim` upstream: its verdicts
    /// measure nothing about real support.
    #[serde(default)]
    pub simulated: bool,
}

/// Everything scoring adds to a run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunScore {
    pub report: ScoreReport,
    pub evidence_sources: Vec<EvidenceSource>,
    pub captures: Vec<Capture>,
    pub judge: Option<JudgeSummary>,
    /// One trace record per judged claim (seed 000 section 3.3), with
    /// `judge_model` the model that actually answered.
    pub judge_traces: Vec<serde_json::Value>,
}

/// What to score, and what is known about it.
#[derive(Debug, Clone, Default)]
pub struct ScoreInput<'a> {
    pub output: &'a str,
    /// `None` detects the format.
    pub format: Option<ReportFormat>,
    /// Passages the system returned beside its output.
    pub system_sources: &'a [SystemSource],
    /// Source text given by the caller per citation index (`cohort score
    /// --snippets`), used before anything else.
    pub given: BTreeMap<u32, Vec<String>>,
    /// The question id and the system's name, for the trace records.
    pub query_id: &'a str,
    pub system: &'a str,
    pub run: RunFacts,
}

/// Scores an output: claims and metrics, evidence, verdicts.
pub async fn score_output(
    input: ScoreInput<'_>,
    capturer: Option<&SourceCapturer>,
    judge: Option<&JudgeEndpoint>,
) -> Result<RunScore, cohort_core::scoring::ScoringError> {
    let ScoreInput { output, format, system_sources, given, query_id, system, run } = input;
    let mut analysis = analyse(output, format)?;

    // Evidence per reference: given text first, then the system's own
    // snippets, else a capture.
    let mut texts: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut evidence_sources = Vec::new();
    let mut to_capture: Vec<(u32, String)> = Vec::new();
    for reference in &analysis.references {
        if let Some(own) = given.get(&reference.index).filter(|t| t.iter().any(|s| !s.trim().is_empty())) {
            texts.insert(reference.index, own.clone());
            evidence_sources.push(EvidenceSource {
                index: reference.index,
                url: reference.url.clone(),
                source: "given".into(),
            });
            continue;
        }
        let own: Vec<String> = reference
            .url
            .as_deref()
            .map(|url| {
                system_sources
                    .iter()
                    .filter(|s| same_source(&s.url, url))
                    .map(|s| s.snippet.clone())
                    .filter(|s| !s.trim().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !own.is_empty() {
            texts.insert(reference.index, own);
            evidence_sources.push(EvidenceSource {
                index: reference.index,
                url: reference.url.clone(),
                source: "system".into(),
            });
        } else if let Some(url) = &reference.url {
            to_capture.push((reference.index, url.clone()));
        } else {
            evidence_sources.push(EvidenceSource { index: reference.index, url: None, source: "none".into() });
        }
    }
    let mut captures = Vec::new();
    if let Some(capturer) = capturer {
        let urls: Vec<String> = to_capture.iter().map(|(_, u)| u.clone()).collect();
        captures = capturer.capture_all(&urls, CAPTURE_CONCURRENCY).await;
        for ((index, url), capture) in to_capture.iter().zip(&captures) {
            let text = capture.text.as_deref().filter(|t| capture.accessible && !t.trim().is_empty());
            let source = match text {
                Some(t) => {
                    texts.insert(*index, vec![t.to_owned()]);
                    "capture"
                }
                None => "none",
            };
            evidence_sources.push(EvidenceSource { index: *index, url: Some(url.clone()), source: source.into() });
        }
    } else {
        for (index, url) in &to_capture {
            evidence_sources.push(EvidenceSource { index: *index, url: Some(url.clone()), source: "none".into() });
        }
    }
    evidence_sources.sort_by_key(|e| e.index);
    analysis.attach_snippets(&texts);

    // Plan: which claims can be judged, with which passages.
    let plans = plan_judging(&analysis.claims, &analysis.references);
    let mut verdicts: Vec<Option<ParsedVerdict>> = vec![None; plans.len()];
    let mut to_judge: Vec<(usize, pb::Claim)> = Vec::new();
    let mut used: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (i, plan) in plans.into_iter().enumerate() {
        match plan {
            JudgePlan::NotCited => {}
            JudgePlan::Unjudged(reason) => verdicts[i] = Some(unjudged(reason)),
            JudgePlan::Judge(evidence) => {
                let claim_text = &analysis.claims[i].text;
                let mut snippets = Vec::new();
                for e in evidence {
                    for passage in best_passages(&e.text, claim_text, PASSAGES_PER_SOURCE, PASSAGE_CHARS) {
                        let entry = used.entry(e.index).or_default();
                        if !entry.contains(&passage) {
                            entry.push(passage.clone());
                        }
                        snippets.push(pb::Snippet {
                            index: e.index,
                            source_url: e.source_url.clone().unwrap_or_default(),
                            text: passage,
                        });
                    }
                }
                // The judge sees the sentence without its [n] markers: the
                // indices mean nothing without the report (seed 000 3.3).
                let sentence = judge_sentence(claim_text);
                // Its own cited indices go too: the trace record names every
                // index the claim cites, even one whose source gave no text.
                let cited_indices = analysis.claims[i].cited.clone();
                to_judge.push((i, pb::Claim { claim_id: i.to_string(), text: sentence, snippets, cited_indices }));
            }
        }
    }
    // The reference table keeps the passages actually used, not whole pages.
    analysis.attach_snippets(&used);
    for reference in &mut analysis.references {
        if !used.contains_key(&reference.index) {
            reference.snippets.clear();
        }
    }

    let mut judge_summary = None;
    let mut judge_traces = Vec::new();
    if !to_judge.is_empty() {
        match judge {
            None => {}
            Some(endpoint) => {
                let claims: Vec<pb::Claim> = to_judge.iter().map(|(_, c)| c.clone()).collect();
                match call_judge(endpoint, claims, query_id, system).await {
                    Ok(reply) => {
                        for v in &reply.verdicts {
                            let Ok(i) = v.claim_id.parse::<usize>() else { continue };
                            if i < verdicts.len() {
                                verdicts[i] = Some(verdict_from_pb(v));
                            }
                            if let Ok(trace) = serde_json::from_str::<serde_json::Value>(&v.trace_record_json) {
                                judge_traces.push(trace);
                            }
                        }
                        // A claim the proxy did not answer for stays unjudged.
                        for (i, _) in &to_judge {
                            if verdicts[*i].is_none() {
                                verdicts[*i] = Some(unjudged(UnjudgedReason::ProviderError));
                            }
                        }
                        judge_summary = Some(summary_from_pb(&reply));
                    }
                    Err(status) => {
                        for (i, _) in &to_judge {
                            verdicts[*i] = Some(unjudged(UnjudgedReason::ProviderError));
                        }
                        judge_summary = Some(JudgeSummary {
                            error: Some(format!("judge proxy: {:?}: {}", status.code(), status.message())),
                            ..JudgeSummary::default()
                        });
                    }
                }
            }
        }
    }
    Ok(RunScore {
        report: ScoreReport::assemble(analysis, &run, &verdicts),
        evidence_sources,
        captures,
        judge: judge_summary,
        judge_traces,
    })
}

fn unjudged(reason: UnjudgedReason) -> ParsedVerdict {
    ParsedVerdict { verdict: Verdict::Unjudged(reason), line: None }
}

/// Whether a system-returned source URL is the reference's (canonical
/// forms compared, falling back to the text as written).
fn same_source(system_url: &str, reference_url: &str) -> bool {
    let canonical = |u: &str| cohort_core::scoring::canonicalise(u).unwrap_or_else(|_| u.to_owned());
    canonical(system_url) == canonical(reference_url)
}

async fn call_judge(
    endpoint: &JudgeEndpoint,
    claims: Vec<pb::Claim>,
    query_id: &str,
    system: &str,
) -> Result<pb::JudgeResponse, tonic::Status> {
    let channel = match endpoint.channel.get() {
        Some(channel) => channel.clone(),
        None => {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.url.clone())
                .map_err(|e| tonic::Status::invalid_argument(format!("judge url: {e}")))?
                .connect_timeout(Duration::from_secs(5))
                .timeout(endpoint.deadline + Duration::from_secs(5))
                .connect_lazy();
            endpoint.channel.get_or_init(|| channel).clone()
        }
    };
    let mut request = tonic::Request::new(pb::JudgeRequest {
        judge: endpoint.judge.clone(),
        claims,
        deadline_ms: u32::try_from(endpoint.deadline.as_millis()).unwrap_or(u32::MAX),
        query_id: query_id.to_owned(),
        system: system.to_owned(),
    });
    let bearer = format!("Bearer {}", endpoint.key.0)
        .parse()
        .map_err(|_| tonic::Status::invalid_argument("the team key has characters a header cannot carry"))?;
    request.metadata_mut().insert("authorization", bearer);
    Ok(JudgeClient::new(channel).judge_claims(request).await?.into_inner())
}

fn verdict_from_pb(v: &pb::ClaimVerdict) -> ParsedVerdict {
    let line = (!v.reasoning.is_empty()).then(|| v.reasoning.clone());
    let verdict = match pb::Verdict::try_from(v.verdict) {
        Ok(pb::Verdict::Yes) => Verdict::Yes,
        Ok(pb::Verdict::No) => Verdict::No,
        _ => Verdict::Unjudged(match pb::UnjudgedReason::try_from(v.unjudged_reason) {
            Ok(pb::UnjudgedReason::PartialReply) => UnjudgedReason::PartialReply,
            Ok(pb::UnjudgedReason::Unparseable) => UnjudgedReason::Unparseable,
            Ok(pb::UnjudgedReason::ModelMismatch) => UnjudgedReason::ModelMismatch,
            Ok(pb::UnjudgedReason::SourceUnavailable) => UnjudgedReason::SourceUnavailable,
            Ok(pb::UnjudgedReason::Deadline) => UnjudgedReason::Deadline,
            Ok(pb::UnjudgedReason::NoMajority) => UnjudgedReason::NoMajority,
            _ => UnjudgedReason::ProviderError,
        }),
    };
    ParsedVerdict { verdict, line }
}

fn summary_from_pb(reply: &pb::JudgeResponse) -> JudgeSummary {
    let usage = reply.usage.clone().unwrap_or_default();
    JudgeSummary {
        requested_model: reply.requested_model.clone(),
        served_models: reply.served_models.clone(),
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        cost_micros: usage.cost_micros,
        currency: usage.currency,
        attempt_classes: reply
            .attempts
            .iter()
            .map(|a| {
                cohort_proto::convert::class_from_pb(a.class)
                    .map_or_else(|_| "unspecified".to_owned(), |c| c.to_string())
            })
            .collect(),
        error: None,
        simulated: reply.simulated,
    }
}
