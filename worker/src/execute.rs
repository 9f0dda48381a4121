//! Carrying out one leased run: the adapter call under the per-run
//! deadline, the clarification exchange, the run record, and what to tell
//! the coordinator.
//!
//! Rules enforced here, for every adapter: if the system asks for
//! clarification, the reply is the shared suffix only, once, and the
//! exchange is kept; the run has one deadline for all of it; an outage is
//! reported as an attempt (the coordinator's retry policy decides), any
//! answer as the final result.
//!
//! And once the system has answered, it is never called again for that run
//! (seed 004: no rerun replaces a result), even when the artifact store
//! fails: see [`store_answer_blob`].

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use cohort_artifacts::spool::Kept;
use cohort_artifacts::{ArtifactStore, Spool};
use cohort_clock::Clock;
use cohort_core::config::{ArmConfig, PriceCatalog};
use cohort_core::lifecycle::{final_outcome_of, reported_as_attempt};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_proto::convert::outcome_to_pb;
use tracing::{Instrument as _, error, warn};

use crate::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply, TokenUsage, Turn};
use crate::capture::SourceCapturer;
use crate::record::{ManualRun, RECORD_VERSION, RunRecord, attempts_of, rfc3339_ms, version_label};
use crate::score::{JudgeEndpoint, ScoreInput, score_output, system_label};
use crate::wire::{Attempt, RunLease};

/// What the worker knows about its cohort.
#[derive(Debug)]
pub struct RunContext {
    pub cohort: String,
    pub manifest_sha256: String,
    pub run_timeout: Duration,
    pub prices: Option<PriceCatalog>,
    pub store: ArtifactStore,
    /// Where an answer waits when `store` refuses it ([`store_answer_blob`]);
    /// on the worker's own disk (`Spool::for_cohort`).
    pub spool: Spool,
    /// The run times recorded (`SystemClock` outside tests).
    pub clock: Arc<dyn Clock>,
    /// Captures every cited source (a system's own snippets are never
    /// evidence); `None` leaves them uncaptured (their claims unjudged,
    /// source_unavailable, until `cohort judge --capture`).
    pub capturer: Option<SourceCapturer>,
    /// The judge proxy; `None`: claims are extracted and the deterministic
    /// metrics computed, and support stays unmeasured.
    pub judge: Option<JudgeEndpoint>,
    /// The judging pass the inline verdicts of accepted runs are merged
    /// into (`cohort run --judge`, docs/judging.md); `None`: none.
    pub pass: Option<InlinePass>,
    /// What this worker counts for `/metrics` (`cohort worker
    /// --ops-listen`): attempts, adapter latency, captures.
    pub metrics: Arc<crate::metrics::WorkerMetrics>,
}

/// Where inline verdicts go: a pass and its strictness, checked again on
/// each record (a non-strict proxy cannot mix models into a pass).
#[derive(Debug, Clone)]
pub struct InlinePass {
    pub store: Arc<crate::passes::PassStore>,
    /// The cohort's frozen `[judge] served_model`.
    pub served_model_expected: String,
    pub strict: bool,
}

/// One arm, ready to run.
#[derive(Debug, Clone)]
pub struct ArmRuntime {
    pub config: ArmConfig,
    pub adapter: Arc<dyn Adapter>,
}

/// What to report about a run.
#[derive(Debug, Clone)]
pub enum Report {
    /// A failed attempt (an outage): the coordinator decides retry or final.
    Attempt(Attempt),
    /// The final result.
    Result { outcome: Outcome, reason: String, record_sha256: String, observed_version: String, attempt: Attempt },
    /// The system answered, but neither the artifact store nor the spool's
    /// disk took the output or the run record: it is held in this process's
    /// memory only. Nothing is reported (a result must point at a durable
    /// record): the worker gives the lease back unfinished and stops
    /// leasing, saying why.
    NotKept { detail: String },
}

/// What the system said, once its conversation is over: the input of
/// [`record_answer`], from an adapter call ([`execute`]) or from a
/// person's submission (`adapters::manual::Submission`), so both are
/// classified, scored and recorded by the same code.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The conversation before the output: the prompt, then any clarifying
    /// question and the suffix given as the reply.
    pub conversation: Vec<Turn>,
    /// The final response (the output, a refusal, an error).
    pub response: AdapterResponse,
    /// When the final attempt started and ended (Unix ms).
    pub started_ms: i64,
    pub ended_ms: i64,
    /// What a person recorded about a manual run; `None` for the others.
    pub manual: Option<ManualRun>,
}

/// The role names in the recorded conversation.
pub const USER: &str = "user";
pub const SYSTEM: &str = "system_under_test";

/// Runs `lease` on `arm` for the worker `worker_id` (as the coordinator
/// named it at registration) and says what to report.
pub async fn execute(ctx: &RunContext, arm: &ArmRuntime, lease: &RunLease, worker_id: &str) -> Report {
    let started_ms = ctx.clock.now_ms();
    let mut conversation = vec![Turn { role: USER.into(), text: lease.prompt.clone() }];
    let mut asked_clarification = false;
    let deadline = tokio::time::Instant::now() + ctx.run_timeout;
    let called = std::time::Instant::now();
    let attempt_span =
        tracing::info_span!("attempt", cohort.attempt = lease.attempt, cohort.attempt.class = tracing::field::Empty);
    let response = async {
        loop {
            let request = AdapterRequest {
                run_id: lease.run_id.clone(),
                question_id: lease.question_id.clone(),
                attempt: lease.attempt,
                conversation: conversation.clone(),
                deadline: Some(deadline),
            };
            let call = adapter_span(arm);
            let response =
                match tokio::time::timeout_at(deadline, arm.adapter.call(&request).instrument(call.clone())).await {
                    Ok(r) => r,
                    Err(_) => AdapterResponse::nothing(
                        AttemptClass::Timeout,
                        0,
                        format!("no complete output within the per-run deadline of {} s", ctx.run_timeout.as_secs()),
                    ),
                };
            record_call(&call, &response);
            match &response.reply {
                Reply::Clarification(question) if !asked_clarification => {
                    asked_clarification = true;
                    conversation.push(Turn { role: SYSTEM.into(), text: question.clone() });
                    conversation.push(Turn { role: USER.into(), text: lease.suffix.clone() });
                }
                _ => break response,
            }
        }
    }
    .instrument(attempt_span.clone())
    .await;
    attempt_span.record("cohort.attempt.class", response.class.as_str());
    drop(attempt_span);
    ctx.metrics.adapter_latency(&arm.config.id, called.elapsed());
    ctx.metrics.attempt(response.class);
    let ended_ms = ctx.clock.now_ms();
    let answer = Answer { conversation, response, started_ms, ended_ms, manual: None };
    record_answer(ctx, arm, lease, worker_id, answer).await
}

/// The span of one call to the system under test, as a GenAI `chat` span:
/// the provider is the arm's declared vendor lineage, the requested model
/// its `model` setting (the pinned version label when it has none).
fn adapter_span(arm: &ArmRuntime) -> tracing::Span {
    use cohort_core::config::AdapterKind;
    let setting = |key: &str| arm.config.settings.get(key).and_then(|v| v.as_str());
    let model = setting("model").unwrap_or(&arm.config.pinned_version);
    let temperature = arm.config.settings.get("temperature").and_then(serde_json::Value::as_f64);
    let (api, url) = match arm.config.adapter {
        AdapterKind::OpenaiChat | AdapterKind::OpenaiResponses => ("openai", setting("base_url")),
        AdapterKind::HttpJson => ("cohort.http_json", setting("url")),
        AdapterKind::Command => ("cohort.command", None),
        AdapterKind::Manual => ("cohort.manual", None),
        AdapterKind::Sim => ("cohort.sim", None),
    };
    let provider = cohort_telemetry::genai::provider_name(url, api);
    let span = cohort_telemetry::genai::llm_span(cohort_telemetry::genai::CHAT, provider, model, temperature);
    cohort_telemetry::genai::set_vendor_lineage(&span, &arm.config.vendor_lineage);
    span
}

/// What the call returned, on its span: the version the system reported
/// (`gen_ai.response.model`), its token usage, and the attempt class as
/// `error.type` when it is not `ok`.
fn record_call(span: &tracing::Span, response: &AdapterResponse) {
    let usage = response.usage.as_ref();
    cohort_telemetry::genai::record_response(
        span,
        response.observed_version.as_deref(),
        usage.map(|u| u.input_tokens),
        usage.map(|u| u.output_tokens),
    );
    if response.class != AttemptClass::Ok {
        cohort_telemetry::genai::mark_error(span, response.class.as_str());
    }
}

/// Turns a final answer into what to report: an outage goes back as an
/// attempt; anything else has its output stored, is scored (scoring never
/// changes the outcome), and gets its [`RunRecord`] stored. `worker_id`
/// is the holder of the lease, recorded with the attempt (a worker, or
/// `manual:<arm>` for a person's submission).
pub async fn record_answer(
    ctx: &RunContext,
    arm: &ArmRuntime,
    lease: &RunLease,
    worker_id: &str,
    answer: Answer,
) -> Report {
    let Answer { mut conversation, response, started_ms, ended_ms, manual } = answer;
    // A blank label is no label: "not disclosed" in the record, empty on
    // the wire, never compared with the pinned one.
    let reported_version =
        response.observed_version.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    let attempt = Attempt {
        class: response.class,
        http_status: response.http_status,
        detail: response.detail.clone(),
        started_ms,
        ended_ms,
        observed_version: reported_version.clone(),
        retry_after_ms: response.retry_after_ms.filter(|&ms| ms > 0),
    };
    // Outages, quota and auth errors go to the ledger as attempts: it
    // decides between a retry, a final outcome and pausing the arm.
    if reported_as_attempt(response.class) {
        return Report::Attempt(attempt);
    }

    let (outcome, reason, output) = match (&response.class, response.reply) {
        (AttemptClass::Ok, Reply::Output(text)) => (Outcome::Completed, String::new(), Some(text)),
        (AttemptClass::Ok, Reply::Clarification(q)) => {
            (Outcome::Failed, "asked for clarification again after the suffix was given".to_owned(), Some(q))
        }
        (AttemptClass::Ok, Reply::Nothing) => (Outcome::Failed, "an ok status with no output".to_owned(), None),
        (class, reply) => {
            let text = match reply {
                Reply::Output(t) | Reply::Clarification(t) => Some(t),
                Reply::Nothing => None,
            };
            let outcome = final_outcome_of(*class);
            // The reason names the class unless the outcome already does.
            let reason = match (response.detail.is_empty(), class.as_str() == outcome.as_str()) {
                (true, _) => class.to_string(),
                (false, true) => response.detail.clone(),
                (false, false) => format!("{class}: {}", response.detail),
            };
            (outcome, reason, text)
        }
    };
    if let Some(text) = &output {
        conversation.push(Turn { role: SYSTEM.into(), text: text.clone() });
    }
    let mut not_kept = Vec::new();
    let output_sha256 = match &output {
        Some(text) => {
            let (sha, durable) = store_answer_blob(ctx, text.as_bytes(), &lease.run_id, "output").await;
            if !durable {
                not_kept.push("its output");
            }
            Some(sha)
        }
        None => None,
    };
    let observed_version = version_label(reported_version.as_deref());
    let (cost, currency) = price(ctx.prices.as_ref(), reported_version.as_deref(), response.usage);
    // Scoring never changes the run's outcome: a completed output stays
    // completed whatever happens to its claims.
    let (scoring, scoring_error) = match (&outcome, &output) {
        (Outcome::Completed, Some(text)) => {
            let facts = cohort_core::scoring::RunFacts {
                wall_time_ms: u64::try_from(ended_ms - started_ms).ok(),
                cost: cost.zip(currency.clone()).map(|(amount, currency)| cohort_core::scoring::Cost {
                    micros: (amount * 1e6).round() as i64,
                    currency,
                }),
            };
            let system = system_label(&arm.config.label, arm.adapter.simulated());
            let input = ScoreInput {
                output: text,
                system_sources: &response.sources,
                simulated: arm.adapter.simulated(),
                citations: response.citations.clone(),
                query_id: &lease.question_id,
                system: &system,
                run: facts,
                ..ScoreInput::default()
            };
            match score_output(input, ctx.capturer.as_ref(), ctx.judge.as_ref()).await {
                Ok(score) => {
                    ctx.metrics.captures(&score.captures);
                    (Some(score), None)
                }
                Err(e) => (None, Some(e.to_string())),
            }
        }
        _ => (None, None),
    };
    let (attempts, attempts_complete) = attempts_of(lease, attempt.recorded(lease.attempt, worker_id));
    let record = RunRecord {
        record_version: RECORD_VERSION,
        cohort: ctx.cohort.clone(),
        manifest_sha256: ctx.manifest_sha256.clone(),
        metrics_version: cohort_core::METRICS_VERSION,
        run_id: lease.run_id.clone(),
        question_id: lease.question_id.clone(),
        arm: arm.config.id.clone(),
        product: arm.config.label.clone(),
        simulated: arm.adapter.simulated(),
        repeat: lease.repeat,
        attempt: lease.attempt,
        prompt: lease.prompt.clone(),
        conversation,
        output_sha256,
        citation_urls: response.citations.urls(),
        api_citations: response.citations.clone(),
        observed_version,
        pinned_version: arm.config.pinned_version.clone(),
        settings: arm.config.settings.clone(),
        // The final attempt's own times: `duration_ms` is their difference
        // (scoring, which follows, is not part of the run's duration).
        started_at: rfc3339_ms(started_ms),
        ended_at: rfc3339_ms(ended_ms),
        duration_ms: ended_ms - started_ms,
        outcome,
        failure_reason: (!reason.is_empty()).then(|| reason.clone()),
        attempt_class: response.class,
        token_usage: response.usage,
        cost,
        currency,
        system_sources: response.sources.clone(),
        scoring,
        scoring_error,
        attempts,
        attempts_complete,
        manual,
    };
    let record_sha256 = match serde_json::to_vec_pretty(&record) {
        Ok(bytes) => {
            let (sha, durable) = store_answer_blob(ctx, &bytes, &lease.run_id, "run record").await;
            if !durable {
                not_kept.push("its run record");
            }
            sha
        }
        Err(e) => {
            // Not reached: a RunRecord is plain data. If it were, no record
            // could be made however often the system answered, so the run
            // is final as it is, with no record to point to.
            error!(run_id = %lease.run_id, error = %e, "the run record could not be serialised");
            String::new()
        }
    };
    if !not_kept.is_empty() {
        return Report::NotKept {
            detail: format!(
                "the artifact store and the spool's disk ({}) both refused {}: held in memory only",
                ctx.spool.dir().display(),
                not_kept.join(" and ")
            ),
        };
    }
    Report::Result { outcome, reason, record_sha256, observed_version: reported_version.unwrap_or_default(), attempt }
}

/// How often a put of an answer's blob is tried before the spool takes it,
/// and the backoff between tries (a store that blips: a full disk being
/// cleaned, an NFS hiccup).
const STORE_TRIES: usize = 4;
const STORE_BACKOFF_MIN: Duration = Duration::from_millis(50);
const STORE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Stores one blob of an answer (its output or its run record) and returns
/// its SHA-256; never fails, because of the rule it keeps:
///
/// **A system that answered is not called again for that run.** A failed
/// put was once reported as a `connection_error` attempt, so the retry
/// policy called the product again (and charged for it), and a rerun could
/// replace the answer (seed 004). Now a put is retried a few times with
/// backoff; if the store still refuses, the bytes go to the worker's
/// [`Spool`] (its own disk) and the run is reported final by its hashes all
/// the same, which content addressing knows before the bytes are stored.
/// Only when the spool's disk refuses too (a full disk) is the answer held
/// in memory, and then the run is not reported at all: a result the ledger
/// marks final must point at a record that survives this process, so the
/// lease goes back unfinished and the run is run again once there is room
/// (the one case where a product that answered is called again: its answer
/// could be kept nowhere). The worker sees the spool used
/// (`Spool::kept_here`), stops leasing, and moves the spool into the store
/// before it stops and before it leases again (`crate::run`), so nothing
/// is run while the store fails and no record is left behind unstored.
///
/// Returns the blob's hash and whether it is durable (in the store or on
/// the spool's disk); a blob only in memory makes the run
/// [`Report::NotKept`].
async fn store_answer_blob(ctx: &RunContext, bytes: &[u8], run_id: &str, what: &str) -> (String, bool) {
    let backoff = ExponentialBuilder::new()
        .with_min_delay(STORE_BACKOFF_MIN)
        .with_max_delay(STORE_BACKOFF_MAX)
        .with_max_times(STORE_TRIES - 1)
        .with_jitter();
    let stored = (|| async { ctx.store.put(bytes) })
        .retry(backoff)
        .notify(|e, delay| warn!(run_id, what, error = %e, ?delay, "the artifact store refused a put; trying again"))
        .await;
    match stored {
        Ok(sha) => (sha, true),
        Err(e) => {
            let (sha, kept) = ctx.spool.keep(bytes);
            let durable = matches!(kept, Kept::OnDisk);
            let spool = ctx.spool.dir().display();
            match kept {
                Kept::OnDisk => error!(
                    run_id, what, error = %e, %spool,
                    "the artifact store refused the answer {STORE_TRIES} times: it is kept in the spool and the run \
                     is reported by its hash; the worker stops leasing"
                ),
                Kept::InMemory(disk) => error!(
                    run_id, what, error = %e, spool_error = %disk, %spool,
                    "the artifact store and the spool both refused the answer: it is held in memory only, so the \
                     run is not reported (its lease goes back unfinished); the worker stops leasing"
                ),
            }
            (sha, durable)
        }
    }
}

/// The cost of a call in the catalog's currency; unknown when the model or
/// the usage is unknown (never invented).
fn price(
    prices: Option<&PriceCatalog>,
    model: Option<&str>,
    usage: Option<TokenUsage>,
) -> (Option<f64>, Option<String>) {
    let (Some(prices), Some(model), Some(usage)) = (prices, model, usage) else { return (None, None) };
    let Some(p) = prices.models.get(model) else { return (None, None) };
    let cost = usage.input_tokens as f64 / 1e6 * p.input_per_million_tokens
        + usage.output_tokens as f64 / 1e6 * p.output_per_million_tokens;
    (Some(cost), Some(prices.currency.clone()))
}

/// The outcome as it goes on the wire.
pub fn outcome_wire(o: Outcome) -> i32 {
    outcome_to_pb(o) as i32
}
