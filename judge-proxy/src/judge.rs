//! The judge call: claims in batches of the judge's size, the prompt of
//! seed 000 section 3.3 at temperature 0, the reply parsed per claim, strict
//! mode checked per call (router aliases resolve per call), usage and cost
//! summed, one trace record per judged claim naming the model that
//! actually answered, and one [`CallRecord`] per batch: the exact messages
//! sent and the raw reply (seed 000 section 7), kept for every upstream
//! kind alike because the prompt is built here, before any provider's
//! body.
//!
//! The prompt ([`scoring::judge_prompt`]), the reply parser
//! ([`scoring::parse_verdicts`]) and the verdict types are
//! `cohort_core::scoring`'s: the proxy adds the batching, the upstream call
//! and strict mode around them, never its own reading of a reply.

use std::sync::Arc;
use std::time::SystemTime;

use cohort_core::config::PriceCatalog;
use cohort_core::scoring::{self, ParsedVerdict, UnjudgedReason, Verdict};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use tracing::Instrument as _;

use crate::config::{JudgeConfig, UpstreamKind};
use crate::error::ProxyError;
use crate::provider::{ChatCall, ChatMessage};
use crate::upstream::{Attempt, Upstreams};

/// What a trace record says when the provider named no served model: a
/// requested id is never written in its place (seed 000 section 3.3).
pub const NOT_DISCLOSED: &str = "not disclosed";

/// A claim to judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeClaim {
    pub claim_id: String,
    pub text: String,
    pub snippets: Vec<Snippet>,
    /// The claim's own cited indices, as the caller sent them (empty from
    /// an older client: see [`JudgeClaim::trace_cited_indices`]).
    pub cited_indices: Vec<u32>,
}

impl JudgeClaim {
    /// Seed 000's `cited_indices`: the claim's own, when the caller sent
    /// them (an index whose source gave no text included, none repeated);
    /// else the distinct indices of the snippets, in order.
    pub fn trace_cited_indices(&self) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let given = if self.cited_indices.is_empty() {
            self.snippets.iter().map(|s| s.index).collect()
        } else {
            self.cited_indices.clone()
        };
        for i in given {
            if !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }
}

/// A passage of a cited source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snippet {
    pub index: u32,
    pub source_url: String,
    #[serde(rename = "snippet_text")]
    pub text: String,
}

/// A judge request, validated.
#[derive(Debug, Clone)]
pub struct JudgeInput {
    pub judge: String,
    pub claims: Vec<JudgeClaim>,
    /// Echoed into the trace records (seed 000's `query_id`, `system`).
    pub query_id: String,
    pub system: String,
}

/// One claim's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimResult {
    pub claim_id: String,
    pub verdict: Verdict,
    /// The judge's line for this claim, verbatim (empty when none).
    pub reasoning: String,
    /// The model that answered the call that judged the claim (empty when
    /// no call answered).
    pub served_model: String,
    /// Seed 000's trace record, for claims judged YES or NO.
    pub trace: Option<TraceRecord>,
}

/// The per-claim trace record of seed 000 section 3.3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceRecord {
    pub query_id: String,
    pub system: String,
    pub claim_text: String,
    pub cited_indices: Vec<u32>,
    pub cited_snippets: Vec<Snippet>,
    /// "SUPPORTED" or "UNSUPPORTED".
    pub judge_verdict: String,
    pub judge_reasoning: String,
    /// The model that actually answered, never the requested one.
    pub judge_model: String,
    /// RFC 3339, UTC.
    pub timestamp: String,
    /// Set (`"simulated": true`) when the SIMULATED `sim` upstream judged;
    /// absent otherwise, so real records keep seed 000's exact shape.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}

/// Tokens and cost of the upstream calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UsageSummary {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// In millionths of `currency`; None when any priced call's served
    /// model has no price (unknown stays unknown).
    pub cost_micros: Option<i64>,
    pub currency: String,
}

/// One batch's upstream call as sent and as answered: what a report
/// publishes as `judge_calls.jsonl`. Scrubbed of the proxy's secrets
/// (a provider echoing a key in its reply never gets it into a record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// The request's claim ids, in prompt order ("Claim 1" first).
    pub claim_ids: Vec<String>,
    /// The messages as sent (system, then user), before any provider's
    /// translation of them.
    pub messages: Vec<ChatMessage>,
    /// The reply text, verbatim and unparsed; `None` when no attempt gave a
    /// usable reply.
    pub raw_reply: Option<String>,
    pub requested_model: String,
    /// The model the upstream said served the reply.
    pub served_model: Option<String>,
    /// Upstream attempts made for the call, retries included.
    pub attempts: u32,
    /// When the call started (RFC 3339, UTC, milliseconds).
    pub started_at: String,
    /// From the start to the reply or the last failure (permit waits and
    /// retries included).
    pub latency: std::time::Duration,
    /// `ok`, `deadline`, or the class of the last failed attempt.
    pub outcome: String,
    /// The SIMULATED `sim` upstream answered.
    pub simulated: bool,
}

/// The judge's answer for a whole request.
#[derive(Debug, Clone)]
pub struct JudgeOutput {
    /// One per request claim, in request order.
    pub verdicts: Vec<ClaimResult>,
    pub requested_model: String,
    /// Distinct served models over the calls, in order of first use.
    pub served_models: Vec<String>,
    pub usage: UsageSummary,
    pub attempts: Vec<Attempt>,
    /// Set when a batch could not get a permit before the deadline.
    pub permit_deadline: Option<ProxyError>,
    /// The judge's upstream is the SIMULATED `sim` kind.
    pub simulated: bool,
    /// One per batch sent upstream, in request order.
    pub calls: Vec<CallRecord>,
}

/// What one batch's call came to.
struct BatchOutcome {
    first: usize,
    /// (index in the request, result).
    results: Vec<(usize, ClaimResult)>,
    attempts: Vec<Attempt>,
    served: Option<String>,
    deadline_error: Option<ProxyError>,
    call: CallRecord,
}

/// Judges `input` for `team` with `judge`, until `deadline`.
pub async fn judge(
    upstreams: &Arc<Upstreams>,
    judge: &JudgeConfig,
    strict: bool,
    prices: Option<&PriceCatalog>,
    team: &str,
    input: JudgeInput,
    deadline: Instant,
) -> JudgeOutput {
    let simulated = upstreams.config(&judge.upstream).is_some_and(|u| u.kind == UpstreamKind::Sim);
    let input = Arc::new(input);
    let mut verdicts: Vec<Option<ClaimResult>> = vec![None; input.claims.len()];
    // Claims without captured evidence are never sent: judging against
    // nothing measures nothing (seed 000 section 4).
    let mut judgeable = Vec::new();
    for (i, c) in input.claims.iter().enumerate() {
        if c.snippets.iter().all(|s| s.text.trim().is_empty()) {
            verdicts[i] = Some(unjudged(c, UnjudgedReason::SourceUnavailable, String::new()));
        } else {
            judgeable.push(i);
        }
    }
    let mut batches = JoinSet::new();
    for chunk in judgeable.chunks(usize::try_from(judge.batch_size).unwrap_or(1).max(1)) {
        let upstreams = Arc::clone(upstreams);
        let judge = judge.clone();
        let team = team.to_owned();
        let input = Arc::clone(&input);
        let indices = chunk.to_vec();
        // Each batch task stays in the request's span (and so its trace).
        batches.spawn(
            async move { batch(&upstreams, &judge, Mode { strict, simulated }, &team, &input, indices, deadline).await }
                .instrument(tracing::Span::current()),
        );
    }
    let mut outcomes = Vec::new();
    while let Some(joined) = batches.join_next().await {
        match joined {
            Ok(o) => outcomes.push(o),
            Err(e) => tracing::error!(error = %e, "a judge batch task failed"),
        }
    }
    // Attempts and served models in batch order, whatever order they ended.
    outcomes.sort_by_key(|o| o.first);
    let mut attempts = Vec::new();
    let mut served_models: Vec<String> = Vec::new();
    let mut permit_deadline = None;
    let mut calls = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        calls.push(o.call);
        for (slot, result) in o.results {
            if let Some(v) = verdicts.get_mut(slot) {
                *v = Some(result);
            }
        }
        attempts.extend(o.attempts);
        if let Some(s) = o.served
            && !served_models.contains(&s)
        {
            served_models.push(s);
        }
        if permit_deadline.is_none() {
            permit_deadline = o.deadline_error;
        }
    }
    let verdicts = verdicts
        .into_iter()
        .zip(input.claims.iter())
        .map(|(v, c)| v.unwrap_or_else(|| unjudged(c, UnjudgedReason::ProviderError, String::new())))
        .collect();
    let usage = usage(&attempts, prices);
    JudgeOutput {
        verdicts,
        requested_model: judge.model.clone(),
        served_models,
        usage,
        attempts,
        permit_deadline,
        simulated,
        calls,
    }
}

/// How a batch's reply is taken: strict mode, and whether the judge is
/// the SIMULATED one (its trace records say so).
#[derive(Debug, Clone, Copy)]
struct Mode {
    strict: bool,
    simulated: bool,
}

/// One upstream call for the claims at `indices`.
async fn batch(
    upstreams: &Upstreams,
    judge: &JudgeConfig,
    mode: Mode,
    team: &str,
    input: &JudgeInput,
    indices: Vec<usize>,
    deadline: Instant,
) -> BatchOutcome {
    let first = indices.first().copied().unwrap_or(0);
    let claims: Vec<&JudgeClaim> = indices.iter().filter_map(|&i| input.claims.get(i)).collect();
    let prompt_claims: Vec<scoring::JudgeClaim> = claims
        .iter()
        .map(|c| scoring::JudgeClaim {
            text: c.text.clone(),
            snippets: c.snippets.iter().filter(|s| !s.text.trim().is_empty()).map(|s| s.text.clone()).collect(),
        })
        .collect();
    let (system_prompt, user_prompt) = scoring::judge_prompt(&prompt_claims);
    let call = ChatCall {
        model: judge.model.clone(),
        messages: vec![ChatMessage::new("system", system_prompt), ChatMessage::new("user", user_prompt)],
        // Temperature 0 is forced for every judge call (seed 000 3.3).
        temperature: Some(0.0),
        max_tokens: Some(judge.max_output_tokens),
        raw_openai_body: None,
    };
    let started_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let started = Instant::now();
    let outcome = upstreams.call(&judge.upstream, team, &call, &Default::default(), deadline).await;
    let record = call_record(upstreams, judge, mode, &claims, call, &outcome, started_at, started.elapsed());
    let mut results = Vec::with_capacity(claims.len());
    let mut deadline_error = None;
    let served = match outcome.result {
        Err(e) => {
            let reason = if matches!(e, ProxyError::PermitDeadline { .. }) {
                UnjudgedReason::Deadline
            } else {
                UnjudgedReason::ProviderError
            };
            if reason == UnjudgedReason::Deadline {
                deadline_error = Some(e);
            }
            for (&i, c) in indices.iter().zip(&claims) {
                results.push((i, unjudged(c, reason, String::new())));
            }
            None
        }
        Ok(reply) => {
            let served = reply.served_model.clone();
            let served_name = served.clone().unwrap_or_default();
            let mismatch = mode.strict && served.as_deref() != Some(judge.served_model.as_str());
            if mismatch {
                tracing::warn!(
                    judge = %judge.name,
                    requested_model = %judge.model,
                    pinned = %judge.served_model,
                    served_model = %served_name,
                    "strict mode: the served model is not the pinned judge; verdicts left unjudged"
                );
            }
            let parsed = scoring::parse_verdicts(&reply.content, claims.len()).unwrap_or_else(|e| {
                // Only a reply over the parser's size limit gets here (a
                // batch is far below its claim limit): it answers nothing.
                tracing::warn!(judge = %judge.name, error = %e, "the judge reply was not parsed; its claims are unjudged");
                let unparseable = ParsedVerdict { verdict: Verdict::Unjudged(UnjudgedReason::Unparseable), line: None };
                vec![unparseable; claims.len()]
            });
            let timestamp = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
            for ((&i, c), p) in indices.iter().zip(&claims).zip(parsed) {
                let mut result = claim_result(c, p, mismatch, &served, input, &timestamp);
                if let Some(t) = &mut result.trace {
                    t.simulated = mode.simulated;
                }
                result.served_model = served_name.clone();
                results.push((i, result));
            }
            served
        }
    };
    BatchOutcome { first, results, attempts: outcome.attempts, served, deadline_error, call: record }
}

/// The [`CallRecord`] of one batch's call: its messages as sent and its
/// reply as received, scrubbed of the proxy's secrets.
#[allow(clippy::too_many_arguments)] // one call's parts, named at the one call site
fn call_record(
    upstreams: &Upstreams,
    judge: &JudgeConfig,
    mode: Mode,
    claims: &[&JudgeClaim],
    call: ChatCall,
    outcome: &crate::upstream::CallOutcome,
    started_at: String,
    latency: std::time::Duration,
) -> CallRecord {
    let redactor = upstreams.redactor();
    let messages =
        call.messages.into_iter().map(|m| ChatMessage { content: redactor.scrub(&m.content), role: m.role }).collect();
    let (raw_reply, served_model, outcome_word) = match &outcome.result {
        Ok(reply) => (Some(redactor.scrub(&reply.content)), reply.served_model.clone(), "ok".to_owned()),
        Err(ProxyError::PermitDeadline { .. }) => (None, None, "deadline".to_owned()),
        Err(_) => {
            let last = outcome.attempts.last().map_or_else(|| "error".to_owned(), |a| a.class.to_string());
            (None, None, last)
        }
    };
    CallRecord {
        claim_ids: claims.iter().map(|c| c.claim_id.clone()).collect(),
        messages,
        raw_reply,
        requested_model: judge.model.clone(),
        served_model,
        attempts: u32::try_from(outcome.attempts.len()).unwrap_or(u32::MAX),
        started_at,
        latency,
        outcome: outcome_word,
        simulated: mode.simulated,
    }
}

/// A claim's result from its parsed verdict. Strict mode's `mismatch`
/// overrides any verdict; only a YES or NO carries its line, so an
/// unjudged claim's reasoning stays empty whatever lines the reply had.
fn claim_result(
    c: &JudgeClaim,
    parsed: ParsedVerdict,
    mismatch: bool,
    served: &Option<String>,
    input: &JudgeInput,
    timestamp: &str,
) -> ClaimResult {
    match (parsed.verdict, parsed.line.unwrap_or_default()) {
        (Verdict::Yes | Verdict::No, line) if mismatch => unjudged(c, UnjudgedReason::ModelMismatch, line),
        _ if mismatch => unjudged(c, UnjudgedReason::ModelMismatch, String::new()),
        (verdict @ (Verdict::Yes | Verdict::No), line) => judged(c, verdict, line, served, input, timestamp),
        (Verdict::Unjudged(reason), _) => unjudged(c, reason, String::new()),
    }
}

fn unjudged(c: &JudgeClaim, reason: UnjudgedReason, reasoning: String) -> ClaimResult {
    ClaimResult {
        claim_id: c.claim_id.clone(),
        verdict: Verdict::Unjudged(reason),
        reasoning,
        served_model: String::new(),
        trace: None,
    }
}

fn judged(
    c: &JudgeClaim,
    verdict: Verdict,
    line: String,
    served: &Option<String>,
    input: &JudgeInput,
    timestamp: &str,
) -> ClaimResult {
    let trace = TraceRecord {
        query_id: input.query_id.clone(),
        system: input.system.clone(),
        claim_text: c.text.clone(),
        cited_indices: c.trace_cited_indices(),
        cited_snippets: c.snippets.clone(),
        judge_verdict: if verdict == Verdict::Yes { "SUPPORTED" } else { "UNSUPPORTED" }.to_owned(),
        judge_reasoning: line.clone(),
        judge_model: served.clone().unwrap_or_else(|| NOT_DISCLOSED.to_owned()),
        timestamp: timestamp.to_owned(),
        simulated: false,
    };
    ClaimResult {
        claim_id: c.claim_id.clone(),
        verdict,
        reasoning: line,
        served_model: String::new(),
        trace: Some(trace),
    }
}

/// Tokens over every attempt that reported usage, priced by the model that
/// served it.
pub fn usage(attempts: &[Attempt], prices: Option<&PriceCatalog>) -> UsageSummary {
    let mut s = UsageSummary {
        cost_micros: prices.map(|_| 0),
        currency: prices.map(|p| p.currency.clone()).unwrap_or_default(),
        ..Default::default()
    };
    for a in attempts {
        let Some(u) = a.usage else { continue };
        s.input_tokens += u.input;
        s.output_tokens += u.output;
        let price = prices.zip(a.served_model.as_ref()).and_then(|(p, m)| p.models.get(m));
        s.cost_micros = match (s.cost_micros, price) {
            (Some(total), Some(p)) => {
                let cost = u.input as f64 * p.input_per_million_tokens + u.output as f64 * p.output_per_million_tokens;
                Some(total + cost.round() as i64)
            }
            _ => None,
        };
    }
    if s.cost_micros.is_none() {
        s.currency.clear();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use cohort_core::config::Price;
    use cohort_core::taxonomy::AttemptClass;

    use super::*;
    use crate::provider::TokenUsage;

    fn attempt(served: &str, input: u64, output: u64) -> Attempt {
        Attempt {
            class: AttemptClass::Ok,
            http_status: Some(200),
            requested_model: "alias".into(),
            served_model: Some(served.into()),
            served_provider: None,
            detail: String::new(),
            latency: Duration::ZERO,
            permit_wait: Duration::ZERO,
            usage: Some(TokenUsage { input, output }),
        }
    }

    fn catalog() -> PriceCatalog {
        let mut models = BTreeMap::new();
        models.insert("judge-1".into(), Price { input_per_million_tokens: 3.0, output_per_million_tokens: 15.0 });
        PriceCatalog { currency: "USD".into(), models }
    }

    /// The core parser's verdicts become the proxy's results: YES and NO
    /// with their line and a trace naming what served (never the requested
    /// model), a claim answered both ways unparseable with no reasoning,
    /// and strict mode overriding every verdict.
    #[test]
    fn parsed_verdicts_become_results() {
        let claim = |id: &str| JudgeClaim {
            claim_id: id.into(),
            text: format!("claim {id}"),
            snippets: vec![Snippet { index: 1, source_url: "https://example.com".into(), text: "s".into() }],
            cited_indices: vec![],
        };
        let input = JudgeInput {
            judge: "j".into(),
            claims: vec![claim("a"), claim("b"), claim("c")],
            query_id: "q".into(),
            system: "arm".into(),
        };
        let parsed = scoring::parse_verdicts("Claim 1: YES\nClaim 2: NO\nClaim 2: YES", 3).unwrap();
        let results: Vec<ClaimResult> = input
            .claims
            .iter()
            .zip(parsed.clone())
            .map(|(c, p)| claim_result(c, p, false, &None, &input, "t"))
            .collect();
        assert_eq!(results[0].verdict, Verdict::Yes);
        assert_eq!(results[0].reasoning, "Claim 1: YES");
        let trace = results[0].trace.as_ref().unwrap();
        assert_eq!((trace.judge_verdict.as_str(), trace.judge_model.as_str()), ("SUPPORTED", NOT_DISCLOSED));
        assert_eq!(results[1].verdict, Verdict::Unjudged(UnjudgedReason::Unparseable), "YES and NO decide nothing");
        assert_eq!((results[1].reasoning.as_str(), results[1].trace.is_none()), ("", true));
        assert_eq!(results[2].verdict, Verdict::Unjudged(UnjudgedReason::PartialReply));

        let served = Some("other-model".to_owned());
        let strict: Vec<ClaimResult> =
            input.claims.iter().zip(parsed).map(|(c, p)| claim_result(c, p, true, &served, &input, "t")).collect();
        assert!(
            strict.iter().all(|r| r.verdict == Verdict::Unjudged(UnjudgedReason::ModelMismatch) && r.trace.is_none())
        );
        assert_eq!(strict[0].reasoning, "Claim 1: YES", "a mismatched verdict keeps its line");
    }

    /// Golden: a claim citing [1, 2] whose evidence is two passages of
    /// source 1 (source 2 gave no text) has seed 000's `cited_indices:
    /// [1, 2]`, not `[1, 1]`; a request from an older client without the
    /// claim's indices falls back to the distinct snippet indices.
    #[test]
    fn trace_cited_indices_are_the_claims_own() {
        let passage = |text: &str| Snippet { index: 1, source_url: "https://a.example/".into(), text: text.into() };
        let claim = JudgeClaim {
            claim_id: "0".into(),
            text: "Sales doubled.".into(),
            snippets: vec![passage("Sales doubled in 2020."), passage("Sales were flat before.")],
            cited_indices: vec![1, 2],
        };
        let input = JudgeInput {
            judge: "j".into(),
            claims: vec![claim.clone()],
            query_id: "llm-memory".into(),
            system: "arm".into(),
        };
        let yes = ParsedVerdict { verdict: Verdict::Yes, line: Some("Claim 1: YES".into()) };
        let served = Some("judge-1".to_owned());
        let r = claim_result(&claim, yes.clone(), false, &served, &input, "2026-01-01T00:00:00.000Z");
        let json = serde_json::to_value(r.trace.unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "query_id": "llm-memory",
                "system": "arm",
                "claim_text": "Sales doubled.",
                "cited_indices": [1, 2],
                "cited_snippets": [
                    {"index": 1, "source_url": "https://a.example/", "snippet_text": "Sales doubled in 2020."},
                    {"index": 1, "source_url": "https://a.example/", "snippet_text": "Sales were flat before."},
                ],
                "judge_verdict": "SUPPORTED",
                "judge_reasoning": "Claim 1: YES",
                "judge_model": "judge-1",
                "timestamp": "2026-01-01T00:00:00.000Z",
            }),
            "a real judge's record has seed 000's fields and no `simulated`"
        );
        let old = JudgeClaim { cited_indices: vec![], ..claim };
        let r = claim_result(&old, yes, false, &served, &input, "t");
        assert_eq!(r.trace.unwrap().cited_indices, [1], "fallback: distinct snippet indices");
    }

    #[test]
    fn cost_is_priced_by_the_served_model() {
        let u = usage(&[attempt("judge-1", 1000, 100)], Some(&catalog()));
        assert_eq!((u.input_tokens, u.output_tokens, u.cost_micros), (1000, 100, Some(4500)));
        assert_eq!(u.currency, "USD");
    }

    #[test]
    fn an_unknown_price_makes_the_cost_unknown() {
        let u = usage(&[attempt("judge-1", 1000, 100), attempt("other", 10, 1)], Some(&catalog()));
        assert_eq!((u.input_tokens, u.cost_micros, u.currency.as_str()), (1010, None, ""));
        assert_eq!(usage(&[attempt("judge-1", 1, 1)], None).cost_micros, None, "no catalog, no cost");
    }
}
