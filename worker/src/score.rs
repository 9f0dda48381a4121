//! Scoring one completed output (SPEC section 6): claims and citations from
//! `cohort_core::scoring`, evidence from the cited sources as captured, and
//! verdicts from the judge proxy.
//!
//! Rules kept here (docs/judging.md "Evidence"): a claim is judged only
//! against text captured from the URLs it cites, narrowed to the passages
//! most relevant to the claim, the same way for every arm; a snippet the
//! system returned beside its answer (Perplexity's `search_results`, an
//! `http_json` snippet pointer) is the vendor's, kept in the record's
//! `system_sources` and never used as evidence. A claim is judged only when
//! *every* source it cites has captured text; otherwise it is
//! unjudged(source_unavailable), and its `missing_sources` name the cited
//! indices without text. The one exception is the built-in SIMULATED
//! system, whose web is simulated too (its URLs are on the reserved
//! `.invalid` domain, nothing to fetch): its own passages are its pages,
//! recorded as `simulated` evidence. When the judge proxy cannot be reached
//! every planned claim is unjudged(provider_error). Unjudged claims never
//! count either way: the support rate is YES/judged, `None` when nothing
//! was judged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cohort_core::passages::best_passages;
use cohort_core::scoring::{
    ApiCitations, EvidencePassage, JudgePlan, ParsedVerdict, PlannedClaim, ReportFormat, RunFacts, ScoreReport,
    UnjudgedReason, Verdict, analyse_output, judge_sentence, plan_judging,
};
use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_client::JudgeClient;
use serde::Deserialize;
use tracing::Instrument as _;

use crate::capture::SourceCapturer;
pub use cohort_records::passes::served_model_rule;
/// The scoring types of the run record live with it.
pub use cohort_records::score::{EvidenceSource, JudgeCall, JudgeMessage, JudgeSummary, RunScore, SystemSource};

/// How many passages of a captured page go to the judge per claim, and how
/// long each may be: enough context, never the whole page.
const PASSAGES_PER_SOURCE: usize = 2;
const PASSAGE_CHARS: usize = 1_200;
/// Sources fetched at once for one run (inline and by `cohort judge --capture`).
pub const CAPTURE_CONCURRENCY: usize = 4;

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

/// What to score, and what is known about it.
#[derive(Debug, Clone, Default)]
pub struct ScoreInput<'a> {
    pub output: &'a str,
    /// `None` detects the format.
    pub format: Option<ReportFormat>,
    /// Passages the system returned beside its output: the vendor's
    /// snippets, never evidence (but a SIMULATED system's pages).
    pub system_sources: &'a [SystemSource],
    /// The system is the built-in SIMULATED one: its `system_sources` are
    /// the pages of its simulated web, which no capture can reach.
    pub simulated: bool,
    /// What the API said the output cites.
    pub citations: ApiCitations,
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
    let ScoreInput { output, format, system_sources, simulated, citations, given, query_id, system, run } = input;
    let mut analysis = analyse_output(output, &citations, format)?;

    // Evidence per reference: given text first, else a capture of the
    // cited URL (a SIMULATED system's own pages stand for it).
    let EvidencePlan { mut texts, mut evidence_sources, to_capture } =
        plan_evidence(&analysis.references, &given, system_sources, simulated);
    let mut captures = Vec::new();
    if let Some(capturer) = capturer {
        let urls: Vec<String> = to_capture.iter().map(|(_, u)| u.clone()).collect();
        let span = tracing::info_span!("capture sources", cohort.sources = urls.len());
        captures = capturer.capture_all(&urls, CAPTURE_CONCURRENCY).instrument(span).await;
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
    let ClaimPlan { mut verdicts, to_judge, used } =
        plan_claims(&analysis.claims, &analysis.references, ClaimIds::Index);

    let mut judge_summary = None;
    let mut judge_traces = Vec::new();
    let mut judge_calls = Vec::new();
    if !to_judge.is_empty() {
        match judge {
            None => {}
            Some(endpoint) => {
                let claims: Vec<PlannedClaim> = to_judge.iter().map(|(_, c)| c.clone()).collect();
                let result = judge_claims(endpoint, &claims, query_id, system).await;
                // The record keeps the verdicts as the proxy gave them; the
                // pass applies the served-model rule (`PassRun::from_record`).
                for ((i, _), answer) in to_judge.iter().zip(apply_reply(&claims, &result, None)) {
                    verdicts[*i] = Some(answer.verdict);
                    judge_traces.extend(answer.trace);
                }
                // The request's ids are positions; the record names claims
                // by their `ScoredClaim` id.
                let scored_ids: std::collections::HashMap<&str, u32> =
                    to_judge.iter().filter_map(|(i, c)| Some((c.id.as_str(), analysis.claims.get(*i)?.id))).collect();
                if let Ok(reply) = &result {
                    judge_calls = calls_from_pb(reply, |id| scored_ids.get(id).map(u32::to_string));
                }
                judge_summary = Some(match &result {
                    Ok(reply) => summary_from_pb(reply),
                    Err(status) => JudgeSummary {
                        error: Some(format!("judge proxy: {:?}: {}", status.code(), status.message())),
                        ..JudgeSummary::default()
                    },
                });
            }
        }
    }
    // Assembled while the references carry every evidence text (so an
    // unjudged claim's `missing_sources` are named from them); then the
    // reference table keeps the passages actually used, not whole pages.
    let mut report = ScoreReport::assemble(analysis, &run, &verdicts);
    for reference in &mut report.references {
        reference.snippets = used.get(&reference.index).cloned().unwrap_or_default();
    }
    Ok(RunScore { report, evidence_sources, captures, judge: judge_summary, judge_traces, judge_calls })
}

/// One sent claim's answer from the judge proxy ([`apply_reply`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAnswer {
    pub verdict: ParsedVerdict,
    /// The model that served this claim's verdict, when the proxy named one.
    pub served_model: Option<String>,
    /// The claim's seed-000 trace record (sent for every YES/NO).
    pub trace: Option<serde_json::Value>,
}

/// The one reading of a judge call's result, for the inline path's request
/// and each batch of `cohort judge` alike; one answer per claim of `sent`,
/// in order:
///
/// - a claim the reply answers gets its verdict, served model and trace;
///   one it does not answer is `unjudged(provider_error)`;
/// - a failed call leaves every claim unjudged: `deadline` when the call's
///   deadline passed (`DeadlineExceeded`: the proxy's permit wait or the
///   judging deadline), else `provider_error` (every other code, the
///   outages of [`crate::is_outage`] included: nothing was judged);
/// - with `strict_served`, the served-model rule ([`served_model_rule`]).
pub fn apply_reply(
    sent: &[PlannedClaim],
    result: &Result<pb::JudgeResponse, tonic::Status>,
    strict_served: Option<&str>,
) -> Vec<ClaimAnswer> {
    let failed = |reason| ClaimAnswer { verdict: unjudged(reason), served_model: None, trace: None };
    match result {
        Err(status) => {
            let reason = if status.code() == tonic::Code::DeadlineExceeded {
                UnjudgedReason::Deadline
            } else {
                UnjudgedReason::ProviderError
            };
            sent.iter().map(|_| failed(reason)).collect()
        }
        Ok(reply) => {
            let by_id: std::collections::HashMap<&str, &pb::ClaimVerdict> =
                reply.verdicts.iter().map(|v| (v.claim_id.as_str(), v)).collect();
            sent.iter()
                .map(|claim| match by_id.get(claim.id.as_str()) {
                    None => failed(UnjudgedReason::ProviderError),
                    Some(v) => {
                        let parsed = parsed_verdict(v);
                        let served = (!v.served_model.is_empty()).then(|| v.served_model.clone());
                        let verdict = served_model_rule(parsed.verdict, served.as_deref(), strict_served);
                        let judged = matches!(verdict, Verdict::Yes | Verdict::No);
                        let trace = judged.then(|| serde_json::from_str(&v.trace_record_json).ok()).flatten();
                        ClaimAnswer {
                            verdict: ParsedVerdict { verdict, line: parsed.line },
                            served_model: served,
                            trace,
                        }
                    }
                })
                .collect()
        }
    }
}

/// Where each reference's evidence comes from, before any capture.
#[derive(Debug, Default)]
pub struct EvidencePlan {
    /// Text per citation index found without fetching: given by the
    /// caller, or a SIMULATED system's own pages.
    pub texts: BTreeMap<u32, Vec<String>>,
    /// The sources decided so far (`given`, `simulated`, `none` for a
    /// reference without a URL).
    pub evidence_sources: Vec<EvidenceSource>,
    /// (index, URL) of the references whose text must come from a capture:
    /// every cited URL of a real system, whatever snippet it returned.
    pub to_capture: Vec<(u32, String)>,
}

/// Evidence per reference, the one rule of both the inline path and
/// `cohort judge` (docs/judging.md "Evidence"): text given by the caller
/// first (`cohort score --snippets`), else the reference waits for a
/// capture of its URL (fetched now inline; read back by `text_sha256` by
/// the stage). The snippets a system returned (`system_sources`) are the
/// vendor's and are never evidence, so every arm is judged on the same
/// kind of text: the cited page as captured. The one exception is a
/// `simulated` system, whose sources are pages of its simulated web on the
/// reserved `.invalid` domain: its own passages are their text
/// (`simulated` evidence), never fetched.
pub fn plan_evidence(
    references: &[cohort_core::scoring::Reference],
    given: &BTreeMap<u32, Vec<String>>,
    system_sources: &[SystemSource],
    simulated: bool,
) -> EvidencePlan {
    let mut plan = EvidencePlan::default();
    for reference in references {
        let decided =
            |source: &str| EvidenceSource { index: reference.index, url: reference.url.clone(), source: source.into() };
        if let Some(own) = given.get(&reference.index).filter(|t| t.iter().any(|s| !s.trim().is_empty())) {
            plan.texts.insert(reference.index, own.clone());
            plan.evidence_sources.push(decided("given"));
            continue;
        }
        let Some(url) = &reference.url else {
            plan.evidence_sources.push(decided("none"));
            continue;
        };
        if simulated {
            let pages: Vec<String> = system_sources
                .iter()
                .filter(|s| same_source(&s.url, url))
                .map(|s| s.snippet.clone())
                .filter(|s| !s.trim().is_empty())
                .collect();
            if !pages.is_empty() {
                plan.texts.insert(reference.index, pages);
                plan.evidence_sources.push(decided("simulated"));
                continue;
            }
        }
        plan.to_capture.push((reference.index, url.clone()));
    }
    plan
}

/// How judge requests name their claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimIds {
    /// The claim's 0-based position (the inline path's one request).
    Index,
    /// The claim's 1-based `ScoredClaim` id (the stage's pass files).
    ScoredId,
}

/// The judge requests of a run's claims.
#[derive(Debug, Default)]
pub struct ClaimPlan {
    /// Per claim (by position): `None` uncited or still to judge, else the
    /// reason it cannot be judged (`source_unavailable`).
    pub verdicts: Vec<Option<ParsedVerdict>>,
    /// (position, request claim) of each judgeable claim, in order.
    pub to_judge: Vec<(usize, PlannedClaim)>,
    /// The passages used per citation index.
    pub used: BTreeMap<u32, Vec<String>>,
}

/// The judging plan, the one rule of both the inline path and `cohort
/// judge`: per cited claim whose every cited source has text, the passages
/// of each cited source most relevant to it
/// (`core::passages::best_passages`) and the sentence as the judge sees it
/// (`judge_sentence`: without its markers); a cited claim with a source
/// without text is `unjudged(source_unavailable)`
/// (`cohort_core::scoring::plan_judging`). `references` carry the evidence
/// texts as their snippets.
pub fn plan_claims(
    claims: &[cohort_core::scoring::Claim],
    references: &[cohort_core::scoring::Reference],
    ids: ClaimIds,
) -> ClaimPlan {
    let plans = plan_judging(claims, references);
    let mut out = ClaimPlan { verdicts: vec![None; plans.len()], ..ClaimPlan::default() };
    for (i, plan) in plans.into_iter().enumerate() {
        match plan {
            JudgePlan::NotCited => {}
            JudgePlan::Unjudged(reason) => out.verdicts[i] = Some(unjudged(reason)),
            JudgePlan::Judge(evidence) => {
                let claim_text = &claims[i].text;
                let mut snippets = Vec::new();
                for e in evidence {
                    for passage in best_passages(&e.text, claim_text, PASSAGES_PER_SOURCE, PASSAGE_CHARS) {
                        let entry = out.used.entry(e.index).or_default();
                        if !entry.contains(&passage) {
                            entry.push(passage.clone());
                        }
                        snippets.push(EvidencePassage {
                            index: e.index,
                            source_url: e.source_url.clone(),
                            text: passage,
                        });
                    }
                }
                // The judge sees the sentence without its [n] markers: the
                // indices mean nothing without the report (seed 000 3.3).
                let sentence = judge_sentence(claim_text);
                // Its own cited indices go too: the trace record names every
                // index the claim cites, even one whose source gave no text.
                let cited_indices = claims[i].cited.clone();
                let claim_id = match ids {
                    ClaimIds::Index => i.to_string(),
                    ClaimIds::ScoredId => claims[i].id.to_string(),
                };
                out.to_judge
                    .push((i, PlannedClaim { id: claim_id, text: sentence, evidence: snippets, cited_indices }));
            }
        }
    }
    out
}

/// Why a stored run could not be planned for judging again.
#[derive(Debug, thiserror::Error)]
pub enum ReplanError {
    #[error("run {run_id}: the record has no output hash: nothing to judge")]
    NoOutput { run_id: String },
    #[error("run {run_id}: output {sha256} is missing from the artifact store")]
    MissingOutput { run_id: String, sha256: String },
    #[error("run {run_id}: cannot read the artifact store: {message}")]
    Store { run_id: String, message: String },
    #[error(
        "run {run_id}: the output no longer scores as recorded ({message}): judge it with the version that scored it"
    )]
    Drifted { run_id: String, message: String },
}

/// A stored run, planned for judging again (`cohort judge`).
#[derive(Debug)]
pub struct StoredRunPlan {
    /// The cited claims' `ScoredClaim` ids that cannot be judged, with why.
    pub unjudgeable: Vec<(u32, UnjudgedReason)>,
    /// For each `source_unavailable` claim of `unjudgeable` (by
    /// `ScoredClaim` id): the cited indices whose source has no captured
    /// text, as `ScoredClaim::missing_sources` names them.
    pub missing_sources: BTreeMap<u32, Vec<u32>>,
    /// The judgeable claims, each named by its `ScoredClaim` id.
    pub to_judge: Vec<PlannedClaim>,
    /// The `system` of its trace records, as the inline path names it.
    pub system: String,
    /// Cited URLs whose text must come from a capture and that were never
    /// fetched (the run was collected without capture): `cohort judge
    /// --capture` fetches them. A URL fetched once, even without success,
    /// is not in this list: its capture is the record of that access.
    pub uncaptured: Vec<String>,
}

/// Rebuilds a completed run's judge requests from what was stored: the
/// output (by `output_sha256`) read again with the recorded format,
/// captured text from the artifact store by each capture's `text_sha256`
/// (a SIMULATED system's pages from the record's `system_sources`); then
/// [`plan_evidence`] and [`plan_claims`], exactly as the inline path. The
/// vendor's snippets of a real system are never evidence here either. The
/// claims must be the record's (same ids and text), or the run is refused.
///
/// `late` are captures made after collection (a judging pass's own,
/// `PassRun::captures`), read after the record's.
pub fn plan_stored_run(
    record: &crate::record::RunRecord,
    store: &cohort_artifacts::ArtifactStore,
    late: &[crate::capture::Capture],
) -> Result<StoredRunPlan, ReplanError> {
    let run_id = record.run_id.clone();
    let scoring = record.scoring.as_ref();
    let sha = record.output_sha256.clone().ok_or_else(|| ReplanError::NoOutput { run_id: run_id.clone() })?;
    let store_err = |e: std::io::Error| ReplanError::Store { run_id: run_id.clone(), message: e.to_string() };
    let bytes = store
        .get(&sha)
        .map_err(store_err)?
        .ok_or_else(|| ReplanError::MissingOutput { run_id: run_id.clone(), sha256: sha.clone() })?;
    let output = String::from_utf8_lossy(&bytes);
    let drifted = |message: String| ReplanError::Drifted { run_id: run_id.clone(), message };
    let mut analysis = analyse_output(&output, &record.api_citations, scoring.map(|s| s.report.format))
        .map_err(|e| drifted(e.to_string()))?;
    if let Some(s) = scoring {
        let same = s.report.claims.len() == analysis.claims.len()
            && s.report.claims.iter().zip(&analysis.claims).all(|(a, b)| a.id == b.id && a.text == b.text);
        if !same {
            return Err(drifted("its claims differ from the record's".to_owned()));
        }
    }
    let EvidencePlan { mut texts, to_capture, .. } =
        plan_evidence(&analysis.references, &BTreeMap::new(), &record.system_sources, record.simulated);
    let recorded = scoring.map(|s| s.captures.as_slice()).unwrap_or_default();
    let captures: Vec<&crate::capture::Capture> = recorded.iter().chain(late).collect();
    let mut uncaptured = Vec::new();
    for (index, url) in to_capture {
        if !captures.iter().any(|c| c.url == url) {
            if !uncaptured.contains(&url) {
                uncaptured.push(url);
            }
            continue;
        }
        let Some(capture) = captures.iter().find(|c| c.url == url && c.accessible) else { continue };
        let Some(text_sha) = &capture.text_sha256 else { continue };
        if let Some(text) = store.get(text_sha).map_err(store_err)? {
            let text = String::from_utf8_lossy(&text).into_owned();
            if !text.trim().is_empty() {
                texts.insert(index, vec![text]);
            }
        }
    }
    analysis.attach_snippets(&texts);
    let plan = plan_claims(&analysis.claims, &analysis.references, ClaimIds::ScoredId);
    let unjudgeable: Vec<(u32, UnjudgedReason)> = plan
        .verdicts
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match v.as_ref().map(|v| v.verdict) {
            Some(Verdict::Unjudged(reason)) => Some((analysis.claims[i].id, reason)),
            _ => None,
        })
        .collect();
    let missing_sources = analysis
        .claims
        .iter()
        .filter(|c| unjudgeable.contains(&(c.id, UnjudgedReason::SourceUnavailable)))
        .map(|c| (c.id, cohort_core::scoring::missing_sources(&c.cited, &analysis.references)))
        .collect();
    // Labelled as the inline path labels it.
    let system = system_label(&record.product, record.simulated);
    Ok(StoredRunPlan {
        unjudgeable,
        missing_sources,
        to_judge: plan.to_judge.into_iter().map(|(_, c)| c).collect(),
        system,
        uncaptured,
    })
}

/// `DescribeJudge` for the endpoint's judge, with its team key: checks the
/// proxy is reachable and the key works, without an upstream call.
pub async fn describe_judge(endpoint: &JudgeEndpoint) -> Result<pb::DescribeJudgeResponse, tonic::Status> {
    let channel = channel(endpoint)?;
    let mut request = tonic::Request::new(pb::DescribeJudgeRequest { judge: endpoint.judge.clone() });
    request.metadata_mut().insert("authorization", bearer(endpoint)?);
    Ok(JudgeClient::new(channel).describe_judge(request).await?.into_inner())
}

/// The `system` a judge request names: the arm's label, marked
/// `(SIMULATED)` once for a simulated system (a label that already says
/// SIMULATED keeps it). The inline path and `cohort judge` both use it.
pub(crate) fn system_label(label: &str, simulated: bool) -> String {
    if simulated && !label.contains("SIMULATED") { format!("{label} (SIMULATED)") } else { label.to_owned() }
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

/// The endpoint's one channel, made on first use.
fn channel(endpoint: &JudgeEndpoint) -> Result<tonic::transport::Channel, tonic::Status> {
    Ok(match endpoint.channel.get() {
        Some(channel) => channel.clone(),
        None => {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.url.clone())
                .map_err(|e| tonic::Status::invalid_argument(format!("judge url: {e}")))?
                .connect_timeout(Duration::from_secs(5))
                .timeout(endpoint.deadline + Duration::from_secs(5))
                .connect_lazy();
            endpoint.channel.get_or_init(|| channel).clone()
        }
    })
}

fn bearer(endpoint: &JudgeEndpoint) -> Result<tonic::metadata::MetadataValue<tonic::metadata::Ascii>, tonic::Status> {
    format!("Bearer {}", endpoint.key.0)
        .parse()
        .map_err(|_| tonic::Status::invalid_argument("the team key has characters a header cannot carry"))
}

/// A planned claim as the `Judge` service takes it: the one conversion of
/// the worker's claims to the wire.
fn claim_to_pb(claim: &PlannedClaim) -> pb::Claim {
    pb::Claim {
        claim_id: claim.id.clone(),
        text: claim.text.clone(),
        snippets: claim
            .evidence
            .iter()
            .map(|e| pb::Snippet {
                index: e.index,
                source_url: e.source_url.clone().unwrap_or_default(),
                text: e.text.clone(),
            })
            .collect(),
        cited_indices: claim.cited_indices.clone(),
    }
}

/// One `JudgeClaims` call through `endpoint` (the inline path and the
/// stage's).
pub async fn judge_claims(
    endpoint: &JudgeEndpoint,
    claims: &[PlannedClaim],
    query_id: &str,
    system: &str,
) -> Result<pb::JudgeResponse, tonic::Status> {
    let channel = channel(endpoint)?;
    let mut request = tonic::Request::new(pb::JudgeRequest {
        judge: endpoint.judge.clone(),
        claims: claims.iter().map(claim_to_pb).collect(),
        deadline_ms: u32::try_from(endpoint.deadline.as_millis()).unwrap_or(u32::MAX),
        query_id: query_id.to_owned(),
        system: system.to_owned(),
    });
    request.metadata_mut().insert("authorization", bearer(endpoint)?);
    let span = tracing::info_span!(
        "judge batch",
        otel.kind = "client",
        rpc.system = "grpc",
        rpc.service = "cohort.v1.Judge",
        rpc.method = "JudgeClaims",
        cohort.judge = %endpoint.judge,
        cohort.claims = request.get_ref().claims.len(),
    );
    cohort_telemetry::propagation::inject_metadata(&span, request.metadata_mut());
    let reply = JudgeClient::new(channel).judge_claims(request).instrument(span.clone()).await;
    if let Err(status) = &reply {
        cohort_telemetry::genai::mark_error(&span, &format!("{:?}", status.code()));
    }
    Ok(reply?.into_inner())
}

/// A wire verdict as the core's.
pub fn parsed_verdict(v: &pb::ClaimVerdict) -> ParsedVerdict {
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

/// The judge calls of a reply as records keep them (docs/records.md):
/// each call's claim ids through `id` (the caller's id to the record's; an
/// id it does not know is kept as sent).
pub fn calls_from_pb(reply: &pb::JudgeResponse, id: impl Fn(&str) -> Option<String>) -> Vec<JudgeCall> {
    reply
        .calls
        .iter()
        .map(|c| JudgeCall {
            claim_ids: c.claim_ids.iter().map(|i| id(i).unwrap_or_else(|| i.clone())).collect(),
            messages: c
                .messages
                .iter()
                .map(|m| JudgeMessage { role: m.role.clone(), content: m.content.clone() })
                .collect(),
            raw_reply: c.replied.then(|| c.raw_reply.clone()),
            requested_model: c.requested_model.clone(),
            served_model: (!c.served_model.is_empty()).then(|| c.served_model.clone()),
            attempts: c.attempts,
            started_at: c.started_at.clone(),
            latency_ms: u64::from(c.latency_ms),
            outcome: c.outcome.clone(),
            simulated: c.simulated,
        })
        .collect()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure panics

    use super::*;

    fn sent(ids: &[&str]) -> Vec<PlannedClaim> {
        ids.iter().map(|id| PlannedClaim { id: (*id).to_owned(), ..PlannedClaim::default() }).collect()
    }

    fn verdict(id: &str, v: pb::Verdict, served: &str) -> pb::ClaimVerdict {
        pb::ClaimVerdict {
            claim_id: id.to_owned(),
            verdict: v as i32,
            served_model: served.to_owned(),
            trace_record_json: format!(r#"{{"claim": "{id}"}}"#),
            ..pb::ClaimVerdict::default()
        }
    }

    fn reasons(answers: &[ClaimAnswer]) -> Vec<Verdict> {
        answers.iter().map(|a| a.verdict.verdict).collect()
    }

    /// Proves the one reading of a judge call's result (issue 22: the
    /// inline path said `provider_error` where `cohort judge` said
    /// `deadline`): a call whose deadline passed leaves its claims
    /// `unjudged(deadline)` on both paths; any other failure, an outage
    /// included, `provider_error`; a claim the reply leaves out is
    /// `provider_error`.
    #[test]
    fn a_failed_call_and_a_missing_answer_are_unjudged_with_one_rule() {
        let claims = sent(&["0", "1"]);
        let late = apply_reply(&claims, &Err(tonic::Status::deadline_exceeded("permit deadline")), None);
        assert_eq!(reasons(&late), [Verdict::Unjudged(UnjudgedReason::Deadline); 2]);
        for status in [tonic::Status::unavailable("down"), tonic::Status::resource_exhausted("no permit")] {
            let down = apply_reply(&claims, &Err(status), None);
            assert_eq!(reasons(&down), [Verdict::Unjudged(UnjudgedReason::ProviderError); 2]);
        }
        let reply = pb::JudgeResponse { verdicts: vec![verdict("1", pb::Verdict::Yes, "j-1")], ..Default::default() };
        let partial = apply_reply(&claims, &Ok(reply), None);
        assert_eq!(reasons(&partial), [Verdict::Unjudged(UnjudgedReason::ProviderError), Verdict::Yes]);
        assert!(partial[0].trace.is_none() && partial[1].trace.is_some());
        assert_eq!(partial[1].served_model.as_deref(), Some("j-1"));
    }

    /// Proves the served-model rule is one rule (issue 22: `cohort judge`
    /// applied it always, the inline pass only under `strict`): with a
    /// strict model, a YES/NO served by another model or by none named is
    /// `model_mismatch` and keeps no trace; without one, verdicts stand.
    #[test]
    fn the_served_model_rule_is_applied_only_when_strict() {
        let claims = sent(&["a", "b", "c"]);
        let reply = pb::JudgeResponse {
            verdicts: vec![
                verdict("a", pb::Verdict::Yes, "j-1"),
                verdict("b", pb::Verdict::No, "j-2"),
                verdict("c", pb::Verdict::Yes, ""),
            ],
            ..Default::default()
        };
        let strict = apply_reply(&claims, &Ok(reply.clone()), Some("j-1"));
        let mismatch = Verdict::Unjudged(UnjudgedReason::ModelMismatch);
        assert_eq!(reasons(&strict), [Verdict::Yes, mismatch, mismatch]);
        assert!(strict[1].trace.is_none() && strict[2].trace.is_none());
        let lax = apply_reply(&claims, &Ok(reply), None);
        assert_eq!(reasons(&lax), [Verdict::Yes, Verdict::No, Verdict::Yes]);
        assert_eq!(served_model_rule(Verdict::No, Some("x"), Some("j-1")), mismatch);
        let unjudged = Verdict::Unjudged(UnjudgedReason::Unparseable);
        assert_eq!(served_model_rule(unjudged, Some("x"), Some("j-1")), unjudged);
    }
}
