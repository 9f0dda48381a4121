//! Judging as a stage of its own (SPEC section 8, docs/judging.md): what
//! `cohort judge` and `cohort passes` do, as library functions, and the
//! pass `cohort run`'s inline path writes (issue 22: the CLI parses,
//! shows progress and prints; the stage lives here).
//!
//! [`judge_runs`] judges the completed, stored outputs of a cohort without
//! collecting again: each run's judgeable claims that the pass has no
//! YES/NO for yet go through the judge proxy with the evidence the worker
//! used ([`score::plan_stored_run`], the same functions as the inline
//! path, and [`score::apply_reply`], the one reading of a judge's reply),
//! and each run's verdicts are merged into the pass the moment they return
//! ([`PassStore::merge_run`]), so a crash loses only what was in flight
//! and a rerun only fills in.
//!
//! Before anything is sent or written, [`preflight`] checks that the proxy
//! answers, the team key works, the judge's declared vendor lineage (if
//! any) is the cohort's frozen one, and a probe claim is answered by the
//! cohort's frozen `[judge] served_model` (routers resolve aliases per
//! call, so the served model is what counts, not the configured name).
//!
//! [`ensemble`] makes a majority-vote pass of member passes, and
//! [`PassSummary`] counts a pass for `cohort passes`.

use cohort_core::scoring::{EvidencePassage, PlannedClaim};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use cohort_artifacts::ArtifactStore;
use cohort_core::agreement::{Agreement, majority_vote, verdict_agreement};
use cohort_core::config::JudgeConfig;
use cohort_core::scoring::{UnjudgedReason, Verdict};
use cohort_proto::v1 as pb;

use crate::InlinePass;
use crate::capture::{Capture, SourceCapturer};
use crate::passes::{self, PassClaim, PassConfig, PassError, PassJudge, PassRun, PassStore, PassVerdict};
use crate::record::RunRecord;
use crate::score::{self, JudgeEndpoint, ReplanError};

/// The probe claim of the pre-flight: tiny, with its own evidence.
const PROBE_CLAIM: &str = "Water boils at 100 degrees Celsius at sea level.";
const PROBE_EVIDENCE: &str = "At sea level, water boils at 100 degrees Celsius (212 degrees Fahrenheit).";

/// Why a step of the judging stage failed. The messages are the ones
/// `cohort judge` and `cohort run` print (tests compare them).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(
        "the judge proxy declares vendor lineage {declared:?} for judge {judge:?} (model {model:?}), but the \
         cohort's frozen [judge] vendor_lineage is {frozen:?}: this is not the cohort's judge; nothing was sent or \
         written"
    )]
    LineageMismatch { declared: String, judge: String, model: String, frozen: String },
    #[error(
        "the judge proxy at {url} could not get an answer to the probe claim from its upstream (judge {judge:?}, \
         model {model:?}; attempts: {attempts}): fix the upstream, then run again; nothing was written"
    )]
    ProbeUnanswered { url: String, judge: String, model: String, attempts: String },
    /// `served` is the served models, each quoted, joined by " and ".
    #[error(
        "the judge proxy's judge {judge:?} (requested model {model:?}) was served by {served} , but the cohort's \
         frozen [judge] served_model is {frozen:?}: judging with it would mix judges; point the judge file at the \
         frozen judge (or freeze a new cohort); nothing was sent beyond the probe and nothing was written"
    )]
    ServedModelMismatch { judge: String, model: String, served: String, frozen: String },
    #[error(
        "the judge proxy at {url} refused the team key (check key_env/key_file in the judge file): nothing was sent \
         or written"
    )]
    KeyRefused { url: String },
    #[error("the judge proxy at {url} has no judge {judge:?} (field `judge` of the judge file): {message}")]
    NoSuchJudge { url: String, judge: String, message: String },
    #[error(
        "the judge proxy at {url} had no permit for the team in time ({what}: {message}): the shared quota is busy; \
         nothing was written"
    )]
    NoPermit { url: String, what: String, message: String },
    #[error(
        "the judge proxy at {url} is not reachable ({what}: {message}): start it, or fix `url` in the judge file; \
         nothing was sent or written"
    )]
    Unreachable { url: String, what: String, message: String },
    #[error("the judge proxy at {url} failed the pre-flight ({what}): {message}")]
    PreflightCall { url: String, what: String, message: String },
    /// `differences` is [`PassConfig::differences`] joined by "; ".
    #[error("pass {name:?} was made with another configuration: {differences}; use another --pass name")]
    PassConfigDiffers { name: String, differences: String },
    #[error("cannot read record {sha256}")]
    ReadRecord {
        sha256: String,
        #[source]
        source: std::io::Error,
    },
    #[error("record {sha256} is missing from the artifact store")]
    MissingRecord { sha256: String },
    #[error("record {sha256} is not a run record")]
    NotARecord {
        sha256: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("--of names {0} pass(es): an ensemble needs at least two (three for a tie-free vote)")]
    TooFewMembers(usize),
    #[error("--ensemble {0:?} cannot be one of its own members")]
    OwnMember(String),
    #[error(transparent)]
    Replan(#[from] ReplanError),
    #[error(transparent)]
    Pass(#[from] PassError),
}

// === the pre-flight ===

/// Why the pre-flight failed: an outage (the proxy, or its upstream, did
/// not answer: it may come back) or a judge that is not usable as
/// configured (key refused, unknown judge, another model or lineage).
#[derive(Debug)]
pub struct PreflightFailure {
    pub outage: bool,
    pub error: StageError,
}

/// The pre-flight: reachable, key accepted, lineage, and the probe's
/// served model. Sends one tiny claim; writes nothing.
pub async fn preflight(
    endpoint: &JudgeEndpoint,
    frozen: &JudgeConfig,
) -> Result<pb::DescribeJudgeResponse, PreflightFailure> {
    let refused = |error: StageError| PreflightFailure { outage: false, error };
    let status_failure = |what: &str, s: tonic::Status| preflight_failure(endpoint, what, s);
    let described = score::describe_judge(endpoint).await.map_err(|s| status_failure("DescribeJudge", s))?;
    if !described.vendor_lineage.is_empty() && described.vendor_lineage != frozen.vendor_lineage {
        return Err(refused(StageError::LineageMismatch {
            declared: described.vendor_lineage.clone(),
            judge: endpoint.judge.clone(),
            model: described.requested_model.clone(),
            frozen: frozen.vendor_lineage.clone(),
        }));
    }
    let probe = PlannedClaim {
        id: "probe".into(),
        text: PROBE_CLAIM.into(),
        evidence: vec![EvidencePassage {
            index: 1,
            source_url: Some("https://probe.invalid/".into()),
            text: PROBE_EVIDENCE.into(),
        }],
        cited_indices: vec![1],
    };
    let reply = score::judge_claims(endpoint, &[probe], "cohort-judge-preflight", "pre-flight probe")
        .await
        .map_err(|s| status_failure("the probe call", s))?;
    let served: Vec<String> = reply
        .verdicts
        .iter()
        .map(|v| v.served_model.clone())
        .chain(reply.served_models.iter().cloned())
        .filter(|m| !m.is_empty())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    match served.as_slice() {
        [] => Err(PreflightFailure {
            outage: true,
            error: StageError::ProbeUnanswered {
                url: endpoint.url.clone(),
                judge: endpoint.judge.clone(),
                model: reply.requested_model.clone(),
                attempts: attempt_classes(&reply),
            },
        }),
        [only] if *only == frozen.served_model => Ok(described),
        others => Err(refused(StageError::ServedModelMismatch {
            judge: endpoint.judge.clone(),
            model: reply.requested_model.clone(),
            served: others.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(" and "),
            frozen: frozen.served_model.clone(),
        })),
    }
}

/// A pre-flight call that failed with `s`: an outage by the one rule of
/// every gRPC client ([`crate::is_outage`]: the proxy away, busy, or out
/// of permits in time, `ResourceExhausted`), which `cohort run` collects
/// through and `cohort judge` exits 3 on; anything else (a wrong key, no
/// such judge) a refusal, exit 2.
fn preflight_failure(endpoint: &JudgeEndpoint, what: &str, s: tonic::Status) -> PreflightFailure {
    PreflightFailure { outage: crate::is_outage(&s), error: status_error_of(endpoint, what, s) }
}

/// The pre-flight's message for a gRPC status from the proxy.
fn status_error_of(endpoint: &JudgeEndpoint, what: &str, s: tonic::Status) -> StageError {
    let (url, what, message) = (endpoint.url.clone(), what.to_owned(), s.message().to_owned());
    match s.code() {
        tonic::Code::Unauthenticated => StageError::KeyRefused { url },
        tonic::Code::NotFound => StageError::NoSuchJudge { url, judge: endpoint.judge.clone(), message },
        tonic::Code::ResourceExhausted => StageError::NoPermit { url, what, message },
        _ if crate::is_outage(&s) => StageError::Unreachable { url, what, message },
        _ => StageError::PreflightCall { url, what, message },
    }
}

fn attempt_classes(reply: &pb::JudgeResponse) -> String {
    let classes: Vec<String> = reply
        .attempts
        .iter()
        .map(|a| {
            cohort_proto::convert::class_from_pb(a.class).map_or_else(|_| "unspecified".to_owned(), |c| c.to_string())
        })
        .collect();
    if classes.is_empty() { "none".to_owned() } else { classes.join(", ") }
}

// === the pass configuration ===

/// The configuration of judging pass `name` with the proxy's judge of
/// `endpoint` and the cohort's frozen `[judge]`, strict on the served
/// model: one for `cohort judge` and `cohort run`'s inline pass.
pub fn judge_pass_config(name: &str, endpoint: &JudgeEndpoint, frozen: &JudgeConfig) -> PassConfig {
    PassConfig::judge(
        name,
        PassJudge {
            proxy_judge: endpoint.judge.clone(),
            requested_model: frozen.model.clone(),
            served_model_expected: frozen.served_model.clone(),
            vendor_lineage: frozen.vendor_lineage.clone(),
            strict: true,
        },
    )
}

/// An existing pass `config.name` of the cohort in `dir` made with another
/// configuration is refused, before anything is sent.
pub fn check_pass_config(dir: &Path, config: &PassConfig) -> Result<(), StageError> {
    if passes::list(dir)?.contains(&config.name) {
        let existing = PassStore::open(dir, &config.name)?;
        let differences = existing.config().differences(config);
        if !differences.is_empty() {
            return Err(StageError::PassConfigDiffers {
                name: config.name.clone(),
                differences: differences.join("; "),
            });
        }
    }
    Ok(())
}

/// `cohort run`'s inline pass: the pass its accepted runs' verdicts go
/// into, with the configuration `cohort judge` would give it for the same
/// judge file, so both write one pass. `None` without a judge or without
/// a cohort `[judge]` (`frozen`).
pub fn inline_pass(
    dir: &Path,
    frozen: Option<&JudgeConfig>,
    judge: Option<&JudgeEndpoint>,
    name: &str,
) -> Result<Option<InlinePass>, PassError> {
    let (Some(endpoint), Some(j)) = (judge, frozen) else { return Ok(None) };
    let store = PassStore::create_or_open(dir, judge_pass_config(name, endpoint, j))?;
    Ok(Some(InlinePass { store: Arc::new(store), served_model_expected: j.served_model.clone(), strict: true }))
}

// === the judging stage ===

/// What one run, or the whole stage, came to.
#[derive(Debug, Default, Clone)]
pub struct RunTally {
    pub sent: u64,
    pub calls: u64,
    /// Judgeable claims with a YES/NO in the pass after this run.
    pub judged: u64,
    /// Judgeable claims still unjudged, by reason.
    pub unjudged: BTreeMap<&'static str, u64>,
    pub source_unavailable: u64,
    /// Sources fetched at judging time (`--capture`).
    pub captured: u64,
}

impl RunTally {
    fn add(&mut self, t: RunTally) {
        self.sent += t.sent;
        self.calls += t.calls;
        self.judged += t.judged;
        self.source_unavailable += t.source_unavailable;
        self.captured += t.captured;
        for (k, v) in t.unjudged {
            *self.unjudged.entry(k).or_default() += v;
        }
    }
}

/// What every run of the stage is judged with.
#[derive(Debug, Clone)]
pub struct Stage {
    pub pass: Arc<PassStore>,
    pub artifacts: ArtifactStore,
    pub endpoint: Arc<JudgeEndpoint>,
    /// The cohort's frozen `[judge] served_model`.
    pub expected_served: Arc<String>,
    /// Claims per judge call (`[judge] batch_size`, at least 1).
    pub batch: usize,
    /// `--capture`: fetches the sources collection never captured.
    pub capturer: Option<Arc<SourceCapturer>>,
}

/// A run the stage could not judge, or a judging task that failed.
#[derive(Debug)]
pub enum RunFailure {
    Run { run_id: String, error: StageError },
    Task(tokio::task::JoinError),
}

/// What the stage came to: the claims' tally over every run judged, and
/// the runs that failed.
#[derive(Debug, Default)]
pub struct StageOutcome {
    pub total: RunTally,
    pub failures: Vec<RunFailure>,
}

/// Judges `runs` (run id, record hash), in the order given, `concurrency`
/// at once (through the proxy's shared quota); `progress` sees the total
/// after each run.
pub async fn judge_runs(
    stage: &Stage,
    runs: Vec<(String, String)>,
    concurrency: usize,
    mut progress: impl FnMut(&RunTally),
) -> StageOutcome {
    let mut tasks = tokio::task::JoinSet::new();
    let mut outcome = StageOutcome::default();
    let mut pending = runs.into_iter();
    let concurrency = concurrency.max(1);
    loop {
        while tasks.len() < concurrency {
            let Some((run_id, record_sha256)) = pending.next() else { break };
            let stage = stage.clone();
            tasks.spawn(async move {
                let r = judge_run(&stage, &run_id, &record_sha256).await;
                (run_id, r)
            });
        }
        let Some(joined) = tasks.join_next().await else { break };
        match joined {
            Ok((_, Ok(t))) => outcome.total.add(t),
            Ok((run_id, Err(error))) => outcome.failures.push(RunFailure::Run { run_id, error }),
            Err(e) => outcome.failures.push(RunFailure::Task(e)),
        }
        progress(&outcome.total);
    }
    outcome
}

/// Judges one run's claims that the pass has no YES/NO for, and merges.
pub async fn judge_run(stage: &Stage, run_id: &str, record_sha256: &str) -> Result<RunTally, StageError> {
    let Stage { pass, artifacts, endpoint, expected_served, batch, capturer } = stage;
    // `get` checks the bytes against the hash: an edited record is an error.
    let bytes = artifacts
        .get(record_sha256)
        .map_err(|source| StageError::ReadRecord { sha256: record_sha256.to_owned(), source })?
        .ok_or_else(|| StageError::MissingRecord { sha256: record_sha256.to_owned() })?;
    let record: RunRecord = serde_json::from_slice(&bytes)
        .map_err(|source| StageError::NotARecord { sha256: record_sha256.to_owned(), source })?;
    let existing = pass.read_run(run_id)?;
    let done: BTreeSet<u32> =
        existing.iter().flat_map(|r| r.claims.iter()).filter(|c| c.verdict.is_judged()).map(|c| c.claim_id).collect();
    let mut late: Vec<Capture> = existing.as_ref().map(|r| r.captures.clone()).unwrap_or_default();
    let mut plan = score::plan_stored_run(&record, artifacts, &late)?;
    let mut tally = RunTally::default();
    let mut captured_now = Vec::new();
    if let Some(capturer) = capturer
        && !plan.uncaptured.is_empty()
    {
        captured_now = capturer.capture_all(&plan.uncaptured, score::CAPTURE_CONCURRENCY).await;
        tally.captured = captured_now.len() as u64;
        late.extend(captured_now.iter().cloned());
        plan = score::plan_stored_run(&record, artifacts, &late)?;
    }
    let mut claims: Vec<(PassClaim, Option<serde_json::Value>)> =
        plan.unjudgeable.iter().map(|(id, reason)| (PassClaim::unjudged(*id, *reason), None)).collect();
    let to_send: Vec<PlannedClaim> =
        plan.to_judge.into_iter().filter(|c| c.id.parse::<u32>().is_ok_and(|id| !done.contains(&id))).collect();
    let mut calls = Vec::new();
    for chunk in to_send.chunks(*batch) {
        tally.sent += chunk.len() as u64;
        tally.calls += 1;
        let result = score::judge_claims(endpoint, chunk, &record.question_id, &plan.system).await;
        // The stage's ids are the record's `ScoredClaim` ids already.
        if let Ok(reply) = &result {
            calls.extend(score::calls_from_pb(reply, |_| None));
        }
        if let Err(status) = &result {
            tracing::warn!(run_id, error = %status.message(), "judge call failed; its claims stay unjudged");
        }
        let strict = pass.config().judge.as_ref().is_some_and(|j| j.strict).then_some(expected_served.as_str());
        for (c, answer) in chunk.iter().zip(score::apply_reply(chunk, &result, strict)) {
            let Ok(id) = c.id.parse::<u32>() else { continue };
            claims.push(pass_claim(id, answer));
        }
    }
    claims.sort_by_key(|(c, _)| c.claim_id);
    // The pass's pairing: traces of the YES/NO claims, in claim order; a
    // YES/NO without a trace drops the run's traces rather than misplacing
    // them (the proxy sends one for every YES/NO).
    let judged = claims.iter().filter(|(c, _)| c.verdict.is_judged()).count();
    let traces: Vec<serde_json::Value> =
        claims.iter().filter(|(c, _)| c.verdict.is_judged()).filter_map(|(_, t)| t.clone()).collect();
    let incoming = PassRun {
        run_id: run_id.to_owned(),
        record_sha256: record_sha256.to_owned(),
        claims: claims.into_iter().map(|(c, _)| c).collect(),
        traces: if traces.len() == judged { traces } else { Vec::new() },
        captures: captured_now,
        calls,
        updated_at: String::new(),
    };
    let stored = pass.merge_run(&incoming)?;
    for c in &stored.claims {
        match (c.verdict, c.unjudged_reason) {
            (v, _) if v.is_judged() => tally.judged += 1,
            (_, Some(UnjudgedReason::SourceUnavailable)) => tally.source_unavailable += 1,
            (_, reason) => {
                *tally.unjudged.entry(reason.map_or("unknown", UnjudgedReason::as_str)).or_default() += 1;
            }
        }
    }
    Ok(tally)
}

/// A claim's answer ([`score::apply_reply`], which applied the pass's
/// served-model rule) as a pass claim, with its trace for a YES/NO.
fn pass_claim(id: u32, answer: score::ClaimAnswer) -> (PassClaim, Option<serde_json::Value>) {
    let score::ClaimAnswer { verdict, served_model, trace } = answer;
    match verdict.verdict {
        v @ (Verdict::Yes | Verdict::No) => {
            let claim = PassClaim {
                claim_id: id,
                verdict: if v == Verdict::Yes { PassVerdict::Yes } else { PassVerdict::No },
                unjudged_reason: None,
                judge_model: served_model,
                judge_line: verdict.line,
            };
            (claim, trace)
        }
        Verdict::Unjudged(reason) => (PassClaim { judge_model: served_model, ..PassClaim::unjudged(id, reason) }, None),
    }
}

// === ensembles ===

/// What [`ensemble`] came to.
#[derive(Debug)]
pub struct EnsembleOutcome {
    /// The member passes, as named (trimmed, empty names left out).
    pub members: Vec<String>,
    /// Claims with a majority verdict.
    pub decided: u64,
    /// Claims without one (tied, undecided yet, or not judgeable).
    pub undecided: u64,
    /// Runs left out: the members judged different records of them.
    pub skipped: u64,
}

/// The ensemble pass `name` of the passes `of` in the cohort `dir`: per
/// claim, the majority vote of the members
/// ([`cohort_core::agreement::majority_vote`]), taken only once it is
/// decided: the margin must exceed the number of members without a verdict
/// yet, so no later member verdict could overturn it (a pass's verdict
/// never changes). Otherwise `unjudged(no_majority)`, filled in when the
/// members are. `skipped` hears of each run left out (its id) as it is.
pub fn ensemble(
    dir: &Path,
    name: &str,
    of: &[String],
    mut skipped_run: impl FnMut(&str),
) -> Result<EnsembleOutcome, StageError> {
    let members: Vec<String> = of.iter().map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect();
    if members.len() < 2 {
        return Err(StageError::TooFewMembers(members.len()));
    }
    if members.iter().any(|m| m == name) {
        return Err(StageError::OwnMember(name.to_owned()));
    }
    let stores: Vec<PassStore> = members.iter().map(|m| PassStore::open(dir, m)).collect::<Result<_, _>>()?;
    let mut by_run: BTreeMap<String, Vec<Option<PassRun>>> = BTreeMap::new();
    for (k, store) in stores.iter().enumerate() {
        for run in store.read_all()? {
            let id = run.run_id.clone();
            by_run.entry(id).or_insert_with(|| vec![None; stores.len()])[k] = Some(run);
        }
    }
    let pass = PassStore::create_or_open(dir, PassConfig::ensemble(name, members.clone()))?;
    let (mut decided, mut undecided, mut skipped) = (0u64, 0u64, 0u64);
    for (run_id, runs) in by_run {
        let shas: BTreeSet<&str> = runs.iter().flatten().map(|r| r.record_sha256.as_str()).collect();
        let [sha] = shas.into_iter().collect::<Vec<_>>()[..] else {
            skipped_run(&run_id);
            skipped += 1;
            continue;
        };
        let ids: BTreeSet<u32> = runs.iter().flatten().flat_map(|r| r.claims.iter().map(|c| c.claim_id)).collect();
        let member_claims: Vec<Vec<Option<&PassClaim>>> = ids
            .iter()
            .map(|id| {
                runs.iter().map(|r| r.as_ref().and_then(|r| r.claims.iter().find(|c| c.claim_id == *id))).collect()
            })
            .collect();
        let votes: Vec<Vec<Option<bool>>> =
            member_claims.iter().map(|cs| cs.iter().map(|c| c.and_then(|c| c.verdict.as_vote())).collect()).collect();
        let majority = majority_vote(&votes);
        let mut claims = Vec::new();
        for ((id, cs), (vote, m)) in ids.iter().zip(&member_claims).zip(votes.iter().zip(majority)) {
            let yes = vote.iter().filter(|v| **v == Some(true)).count();
            let no = vote.iter().filter(|v| **v == Some(false)).count();
            let missing = vote.len() - yes - no;
            let line =
                Some(format!("ensemble of {}: {yes} YES, {no} NO, {missing} without a verdict", members.join(",")));
            let settled = yes.abs_diff(no) > missing;
            let claim = match m {
                Some(v) if settled => {
                    decided += 1;
                    PassClaim {
                        claim_id: *id,
                        verdict: if v { PassVerdict::Yes } else { PassVerdict::No },
                        unjudged_reason: None,
                        judge_model: None,
                        judge_line: line,
                    }
                }
                _ => {
                    undecided += 1;
                    // Every member unjudged for one reason (a claim without
                    // source text): that reason, not "no majority".
                    let reasons: BTreeSet<Option<UnjudgedReason>> =
                        cs.iter().map(|c| c.and_then(|c| c.unjudged_reason)).collect();
                    let reason = match reasons.into_iter().collect::<Vec<_>>()[..] {
                        [Some(r)] if yes + no == 0 => r,
                        _ => UnjudgedReason::NoMajority,
                    };
                    PassClaim { judge_line: line, ..PassClaim::unjudged(*id, reason) }
                }
            };
            claims.push(claim);
        }
        let incoming = PassRun {
            run_id: run_id.clone(),
            record_sha256: sha.to_owned(),
            claims,
            traces: Vec::new(),
            captures: Vec::new(),
            calls: Vec::new(),
            updated_at: String::new(),
        };
        pass.merge_run(&incoming)?;
    }
    Ok(EnsembleOutcome { members, decided, undecided, skipped })
}

// === cohort passes ===

/// A pass's YES/NO votes by (run id, record hash, claim id).
pub type PassVotes = HashMap<(String, String, u32), bool>;

/// One pass, counted.
#[derive(Debug)]
pub struct PassSummary {
    pub name: String,
    pub config: PassConfig,
    pub runs: usize,
    pub claims: usize,
    pub yes: u64,
    pub no: u64,
    pub unjudged: BTreeMap<&'static str, u64>,
    /// YES/NO claims by the model that served them.
    pub served: BTreeMap<String, u64>,
    pub votes: PassVotes,
}

impl PassSummary {
    /// Every pass of the cohort in `dir`, counted, in [`passes::list`]'s
    /// order.
    pub fn read_all(dir: &Path) -> Result<Vec<PassSummary>, PassError> {
        passes::list(dir)?.iter().map(|name| PassSummary::read(dir, name)).collect()
    }

    /// The pass `name` of the cohort in `dir`, counted.
    pub fn read(dir: &Path, name: &str) -> Result<PassSummary, PassError> {
        let store = PassStore::open(dir, name)?;
        let runs = store.read_all()?;
        let mut s = PassSummary {
            name: name.to_owned(),
            config: store.config().clone(),
            runs: runs.len(),
            claims: runs.iter().map(|r| r.claims.len()).sum(),
            yes: 0,
            no: 0,
            unjudged: BTreeMap::new(),
            served: BTreeMap::new(),
            votes: HashMap::new(),
        };
        for run in &runs {
            for c in &run.claims {
                match c.verdict {
                    PassVerdict::Yes => s.yes += 1,
                    PassVerdict::No => s.no += 1,
                    PassVerdict::Unjudged => {
                        *s.unjudged.entry(c.unjudged_reason.map_or("unknown", UnjudgedReason::as_str)).or_default() +=
                            1;
                    }
                }
                if let (true, Some(m)) = (c.verdict.is_judged(), &c.judge_model) {
                    *s.served.entry(m.clone()).or_default() += 1;
                }
                if let Some(v) = c.verdict.as_vote() {
                    s.votes.insert((run.run_id.clone(), run.record_sha256.clone(), c.claim_id), v);
                }
            }
        }
        Ok(s)
    }
}

/// The agreement of every pair of `summaries` (each pair once, in order),
/// on the claims both judged: the one agreement of two judges' verdicts
/// ([`verdict_agreement`], as `cohort calibrate`'s).
pub fn pass_agreements(summaries: &[PassSummary]) -> Vec<(&str, &str, Agreement)> {
    let mut pairs = Vec::new();
    for (i, a) in summaries.iter().enumerate() {
        for b in &summaries[i + 1..] {
            pairs.push((a.name.as_str(), b.name.as_str(), verdict_agreement(&a.votes, &b.votes)));
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the pre-flight classes a failed call with the workers' rule
    /// (issue 22: it knew only Unavailable, DeadlineExceeded and
    /// Cancelled, so a proxy out of permits in time, `ResourceExhausted`,
    /// stopped `cohort run` with exit 2 as if the judge were wrong): an
    /// outage goes on, a refusal stops, each message saying which.
    #[test]
    fn the_preflight_classes_outages_as_the_workers_do() {
        let endpoint =
            JudgeEndpoint::new("http://127.0.0.1:9".into(), "j".into(), "k".into(), std::time::Duration::from_secs(1));
        for s in [
            tonic::Status::resource_exhausted("permit deadline passed"),
            tonic::Status::unavailable("connection refused"),
            tonic::Status::deadline_exceeded("slow"),
            tonic::Status::aborted("restarting"),
        ] {
            let f = preflight_failure(&endpoint, "the probe call", s.clone());
            assert!(f.outage, "{s:?}: {}", f.error);
        }
        let f = preflight_failure(&endpoint, "the probe call", tonic::Status::resource_exhausted("busy"));
        assert!(f.error.to_string().contains("no permit"), "{}", f.error);
        for s in [tonic::Status::unauthenticated("key"), tonic::Status::not_found("no judge j")] {
            assert!(!preflight_failure(&endpoint, "DescribeJudge", s.clone()).outage, "{s:?}");
        }
    }

    /// Proves the messages moved out of the CLI kept their wording: the
    /// pre-flight's, byte for byte as `cohort judge` printed them.
    #[test]
    fn the_preflight_messages_keep_their_wording() {
        let endpoint =
            JudgeEndpoint::new("http://127.0.0.1:9".into(), "j".into(), "k".into(), std::time::Duration::from_secs(1));
        let said = |s: tonic::Status| status_error_of(&endpoint, "DescribeJudge", s).to_string();
        assert_eq!(
            said(tonic::Status::unauthenticated("key")),
            "the judge proxy at http://127.0.0.1:9 refused the team key (check key_env/key_file in the judge file): \
             nothing was sent or written"
        );
        assert_eq!(
            said(tonic::Status::not_found("no judge j")),
            "the judge proxy at http://127.0.0.1:9 has no judge \"j\" (field `judge` of the judge file): no judge j"
        );
        assert_eq!(
            said(tonic::Status::unavailable("refused")),
            "the judge proxy at http://127.0.0.1:9 is not reachable (DescribeJudge: refused): start it, or fix `url` \
             in the judge file; nothing was sent or written"
        );
        assert_eq!(
            said(tonic::Status::internal("boom")),
            "the judge proxy at http://127.0.0.1:9 failed the pre-flight (DescribeJudge): boom"
        );
        let mismatch = StageError::ServedModelMismatch {
            judge: "j".into(),
            model: "m".into(),
            served: "\"a\" and \"b\"".into(),
            frozen: "m-1".into(),
        };
        assert_eq!(
            mismatch.to_string(),
            "the judge proxy's judge \"j\" (requested model \"m\") was served by \"a\" and \"b\" , but the cohort's \
             frozen [judge] served_model is \"m-1\": judging with it would mix judges; point the judge file at the \
             frozen judge (or freeze a new cohort); nothing was sent beyond the probe and nothing was written"
        );
    }
}
