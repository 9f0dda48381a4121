//! `cohort judge` and `cohort passes`: judging as a stage of its own
//! (SPEC section 8, docs/judging.md).
//!
//! `cohort judge DIR --judge FILE [--pass NAME]` judges the completed,
//! stored outputs of a cohort, in planned order, without collecting again:
//! each run's judgeable claims that the pass has no YES/NO for yet go
//! through the judge proxy with the evidence the worker used
//! (`cohort_worker::score::plan_stored_run`, the same functions as the
//! inline path), and each run's verdicts are merged into the pass the
//! moment they return (`PassStore::merge_run`), so a crash loses only what
//! was in flight and a rerun only fills in.
//!
//! Before anything is sent or written, a pre-flight checks that the proxy
//! answers, the team key works, the judge's declared vendor lineage (if
//! any) is the cohort's frozen one, and a probe claim is answered by the
//! cohort's frozen `[judge] served_model` (routers resolve aliases per
//! call, so the served model is what counts, not the configured name).
//!
//! Exit codes: 0 every judgeable claim has a verdict; 2 bad input or a
//! pre-flight refusal (nothing sent, nothing written); 3 some claims are
//! still unjudged after an outage (run again to fill them in); 1 any other
//! failure (a record that no longer scores as recorded, an I/O error).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use cohort_artifacts::ArtifactStore;
use cohort_core::agreement::{majority_vote, verdict_agreement};
use cohort_core::scoring::{UnjudgedReason, Verdict};
use cohort_core::taxonomy::Outcome;
use cohort_proto::v1 as pb;
use cohort_worker::capture::{Capture, CaptureConfig, SourceCapturer};
use cohort_worker::passes::{
    self, DEFAULT_PASS, PassClaim, PassConfig, PassJudge, PassKind, PassRun, PassStore, PassVerdict,
};
use cohort_worker::record::RunRecord;
use cohort_worker::score::{self, JudgeEndpoint};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::Exit;
use super::local::{self, StoreArgs};

/// Exit code: some judgeable claims are still unjudged (an outage).
pub const EXIT_UNJUDGED: u8 = 3;
/// Exit code: bad input, or the pre-flight refused; nothing was written.
pub use super::EXIT_REFUSED;

/// The probe claim of the pre-flight: tiny, with its own evidence.
const PROBE_CLAIM: &str = "Water boils at 100 degrees Celsius at sea level.";
const PROBE_EVIDENCE: &str = "At sea level, water boils at 100 degrees Celsius (212 degrees Fahrenheit).";

#[derive(Debug, clap::Args)]
pub struct JudgeArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// The judge proxy to use (the same file as `cohort run --judge`: url,
    /// judge, key_env or key_file, deadline_secs). Without it, a cohort
    /// whose `[judge] provider` is "sim" is judged by the proxy's built-in
    /// SIMULATED judge, in this process, as `cohort run` does.
    #[arg(long, value_name = "FILE", conflicts_with = "ensemble")]
    pub judge: Option<PathBuf>,
    /// The pass to fill in (created on first use, write-once
    /// configuration).
    #[arg(long, value_name = "NAME", default_value = DEFAULT_PASS)]
    pub pass: String,
    /// Instead of judging: make (or fill in) the majority-vote ensemble
    /// pass NAME of the passes named by --of.
    #[arg(long, value_name = "NAME", requires = "of")]
    pub ensemble: Option<String>,
    /// The member passes of --ensemble, comma-separated.
    #[arg(long, value_name = "P1,P2,...", value_delimiter = ',')]
    pub of: Vec<String>,
    /// Runs judged at once (through the proxy's shared quota).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Fetch the cited sources that were never captured (the cohort was
    /// collected without a judge and without `--capture`) now, recorded in
    /// the pass with this access time; without it their claims are
    /// unjudged, source_unavailable.
    #[arg(long)]
    pub capture: bool,
    /// Let --capture reach loopback and private addresses (tests only).
    #[arg(long, hide = true, requires = "capture")]
    pub capture_private_addresses: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct PassesArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// One JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// Why the stage stopped: a refusal (exit 2, nothing written) or a failure
/// along the way (exit 1).
enum Stop {
    Refused(anyhow::Error),
    Failed(anyhow::Error),
}

fn refused<E: Into<anyhow::Error>>(e: E) -> Stop {
    Stop::Refused(e.into())
}

pub fn run(args: JudgeArgs) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let result = runtime.block_on(async {
        match &args.ensemble {
            Some(name) => ensemble(&args, name).map_err(Stop::Refused),
            None => judge_stage(&args).await,
        }
    });
    match result {
        Ok(0) => Ok(()),
        Ok(code) => Err(Exit(code).into()),
        Err(Stop::Refused(e)) => Err(super::refuse(format_args!("{e:#}"))),
        Err(Stop::Failed(e)) => Err(e),
    }
}

// === the judging stage ===

/// What one run came to.
#[derive(Debug, Default)]
struct RunTally {
    sent: u64,
    calls: u64,
    /// Judgeable claims with a YES/NO in the pass after this run.
    judged: u64,
    /// Judgeable claims still unjudged, by reason.
    unjudged: BTreeMap<&'static str, u64>,
    source_unavailable: u64,
    /// Sources fetched at judging time (`--capture`).
    captured: u64,
}

async fn judge_stage(args: &JudgeArgs) -> Result<u8, Stop> {
    let frozen = local::load(&args.dir).map_err(refused)?;
    let config = &frozen.cohort.config;
    let Some(frozen_judge) = config.judge.clone() else {
        return Err(refused(anyhow::anyhow!(
            "cohort {:?} has no [judge] in cohort.toml: nothing says which judge is frozen for it, so it cannot be \
             judged; freeze a cohort with a [judge] section (see docs/judging.md)",
            config.name
        )));
    };
    // The built-in sim judge lives as long as this stage: stopped on return.
    let (_stop_proxy, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let endpoint = match args.judge.as_deref() {
        Some(file) => JudgeEndpoint::from_file(file).map_err(refused)?,
        None => {
            let Some(proxy) = local::builtin_sim_judge(config).map_err(refused)? else {
                return Err(refused(anyhow::anyhow!(
                    "--judge FILE is required: the cohort's judge ({} {:?}) is reached through a judge proxy; only \
                     [judge] provider = \"sim\" is judged in this process without one",
                    frozen_judge.provider,
                    frozen_judge.model
                )));
            };
            let stopped = async move {
                let _ = stop_rx.await;
            };
            let (endpoint, _task) =
                local::start_judge_proxy(proxy.config, &proxy.origin, &frozen, stopped).await.map_err(refused)?;
            super::emit(&format!(
                "judge {:?} is SIMULATED (the judge proxy's built-in sim judge, running in this process at {}): its \
                 verdicts exercise the pipeline and measure nothing about real support\n",
                endpoint.judge, endpoint.url
            ));
            endpoint
        }
    };
    let pass_config = judge_pass_config(&args.pass, &endpoint, &frozen_judge);
    // An existing pass of another configuration is refused now, before
    // anything is sent.
    if passes::list(&args.dir).map_err(refused)?.contains(&args.pass) {
        let existing = PassStore::open(&args.dir, &args.pass).map_err(refused)?;
        let differences = existing.config().differences(&pass_config);
        if !differences.is_empty() {
            return Err(refused(anyhow::anyhow!(
                "pass {:?} was made with another configuration: {}; use another --pass name",
                args.pass,
                differences.join("; ")
            )));
        }
    }
    if args.store.redis.is_none() {
        let ledger = args.store.sqlite_path(&args.dir);
        if !ledger.exists() {
            return Err(refused(anyhow::anyhow!(
                "no ledger at {}: collect the cohort first (`cohort run`), or name it with --ledger/--redis",
                ledger.display()
            )));
        }
    }
    let ledger = local::open_ledger(&frozen, &args.store).await.map_err(refused)?;
    let mut rows = ledger.runs().await.map_err(|e| refused(anyhow::anyhow!("cannot read the ledger: {e}")))?;
    rows.sort_by_key(|r| r.position);
    let rows: Vec<_> =
        rows.into_iter().filter(|r| r.outcome == Some(Outcome::Completed) && !r.record_sha256.is_empty()).collect();

    let described = preflight(&endpoint, &frozen_judge).await.map_err(|f| refused(f.error))?;
    super::emit(&format!(
        "pre-flight: proxy {} judge {:?} serves {:?} (requested {:?}{}{}), the cohort's frozen judge\n",
        endpoint.url,
        endpoint.judge,
        frozen_judge.served_model,
        described.requested_model,
        if described.vendor_lineage.is_empty() {
            String::new()
        } else {
            format!(", lineage {:?}", described.vendor_lineage)
        },
        if described.simulated { ", SIMULATED" } else { "" },
    ));

    // Before the pass is made: a store that cannot be opened writes nothing.
    let artifacts = local::artifact_store(&frozen, &args.store).map_err(refused)?;
    let pass = Arc::new(PassStore::create_or_open(&args.dir, pass_config).map_err(refused)?);
    let endpoint = Arc::new(endpoint);
    let batch = usize::try_from(frozen_judge.batch_size).unwrap_or(1).max(1);
    let expected = Arc::new(frozen_judge.served_model.clone());
    let capturer = if args.capture {
        let config =
            CaptureConfig { allow_private_addresses: args.capture_private_addresses, ..CaptureConfig::default() };
        Some(Arc::new(
            SourceCapturer::new(config, artifacts.clone()).context("cannot set up source capture").map_err(refused)?,
        ))
    } else {
        None
    };

    let bar = ProgressBar::new(rows.len() as u64).with_style(
        ProgressStyle::with_template("judging [{bar:30}] {pos}/{len} runs, {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut total = RunTally::default();
    let mut failures: Vec<String> = Vec::new();
    let mut pending = rows.into_iter();
    let concurrency = args.concurrency.max(1);
    loop {
        while tasks.len() < concurrency {
            let Some(row) = pending.next() else { break };
            let (pass, artifacts, endpoint, expected, capturer) =
                (Arc::clone(&pass), artifacts.clone(), Arc::clone(&endpoint), Arc::clone(&expected), capturer.clone());
            tasks.spawn(async move {
                let id = row.run_id.clone();
                let stage = Stage {
                    pass: &pass,
                    artifacts: &artifacts,
                    endpoint: &endpoint,
                    expected_served: &expected,
                    batch,
                    capturer: capturer.as_deref(),
                };
                let r = judge_run(&stage, &row.run_id, &row.record_sha256).await;
                (id, r)
            });
        }
        let Some(joined) = tasks.join_next().await else { break };
        match joined {
            Ok((_, Ok(t))) => {
                total.sent += t.sent;
                total.calls += t.calls;
                total.judged += t.judged;
                total.source_unavailable += t.source_unavailable;
                total.captured += t.captured;
                for (k, v) in t.unjudged {
                    *total.unjudged.entry(k).or_default() += v;
                }
            }
            Ok((id, Err(e))) => failures.push(format!("{id}: {e:#}")),
            Err(e) => failures.push(format!("a judging task failed: {e}")),
        }
        bar.inc(1);
        bar.set_message(format!("{} claims judged, {} sent", total.judged, total.sent));
    }
    bar.finish();
    let secs = started.elapsed().as_secs_f64();
    let unjudged: u64 = total.unjudged.values().sum();
    let mut out = format!(
        "pass {:?}: {} judgeable claims judged, {unjudged} unjudged; {} claims sent in {} calls in {secs:.2} s; \
         {} cited claims without source text (source_unavailable, not judgeable)\n",
        args.pass, total.judged, total.sent, total.calls, total.source_unavailable
    );
    for (reason, n) in &total.unjudged {
        out.push_str(&format!("  unjudged {reason}: {n}\n"));
    }
    if args.capture {
        out.push_str(&format!(
            "  {} source(s) captured now, at judging time (recorded in the pass with their access time)\n",
            total.captured
        ));
    } else if total.source_unavailable > 0 {
        out.push_str(
            "  sources never captured at collection can be fetched now with --capture (recorded with the access time)\n",
        );
    }
    super::emit(&out);
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("error: {f}");
        }
        return Err(Stop::Failed(anyhow::anyhow!("{} run(s) could not be judged (above)", failures.len())));
    }
    if unjudged > 0 {
        eprintln!(
            "{unjudged} judgeable claim(s) are still unjudged ({}): run `cohort judge` again to fill them in",
            total.unjudged.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", ")
        );
        return Ok(EXIT_UNJUDGED);
    }
    Ok(0)
}

/// Why the pre-flight failed: an outage (the proxy, or its upstream, did
/// not answer: it may come back) or a judge that is not usable as
/// configured (key refused, unknown judge, another model or lineage).
#[derive(Debug)]
pub(crate) struct PreflightFailure {
    pub outage: bool,
    pub error: anyhow::Error,
}

/// The pre-flight: reachable, key accepted, lineage, and the probe's
/// served model. Sends one tiny claim; writes nothing.
pub(crate) async fn preflight(
    endpoint: &JudgeEndpoint,
    frozen: &cohort_core::config::JudgeConfig,
) -> Result<pb::DescribeJudgeResponse, PreflightFailure> {
    let refused = |error: anyhow::Error| PreflightFailure { outage: false, error };
    let status_failure = |what: &str, s: tonic::Status| preflight_failure(endpoint, what, s);
    let described = score::describe_judge(endpoint).await.map_err(|s| status_failure("DescribeJudge", s))?;
    if !described.vendor_lineage.is_empty() && described.vendor_lineage != frozen.vendor_lineage {
        return Err(refused(anyhow::anyhow!(
            "the judge proxy declares vendor lineage {:?} for judge {:?} (model {:?}), but the cohort's frozen [judge] \
             vendor_lineage is {:?}: this is not the cohort's judge; nothing was sent or written",
            described.vendor_lineage,
            endpoint.judge,
            described.requested_model,
            frozen.vendor_lineage
        )));
    }
    let probe = pb::Claim {
        claim_id: "probe".into(),
        text: PROBE_CLAIM.into(),
        snippets: vec![pb::Snippet {
            index: 1,
            source_url: "https://probe.invalid/".into(),
            text: PROBE_EVIDENCE.into(),
        }],
        cited_indices: vec![1],
    };
    let reply = score::judge_claims(endpoint, vec![probe], "cohort-judge-preflight", "pre-flight probe")
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
            error: anyhow::anyhow!(
                "the judge proxy at {} could not get an answer to the probe claim from its upstream (judge {:?}, model \
                 {:?}; attempts: {}): fix the upstream, then run again; nothing was written",
                endpoint.url,
                endpoint.judge,
                reply.requested_model,
                attempt_classes(&reply)
            ),
        }),
        [only] if *only == frozen.served_model => Ok(described),
        others => Err(refused(anyhow::anyhow!(
            "the judge proxy's judge {:?} (requested model {:?}) was served by {} , but the cohort's frozen [judge] \
             served_model is {:?}: judging with it would mix judges; point the judge file at the frozen judge \
             (or freeze a new cohort); nothing was sent beyond the probe and nothing was written",
            endpoint.judge,
            reply.requested_model,
            others.iter().map(|m| format!("{m:?}")).collect::<Vec<_>>().join(" and "),
            frozen.served_model
        ))),
    }
}

/// A pre-flight call that failed with `s`: an outage by the one rule of
/// every gRPC client ([`cohort_worker::is_outage`]: the proxy away, busy,
/// or out of permits in time, `ResourceExhausted`), which `cohort run`
/// collects through and `cohort judge` exits 3 on; anything else (a wrong
/// key, no such judge) a refusal, exit 2.
fn preflight_failure(endpoint: &JudgeEndpoint, what: &str, s: tonic::Status) -> PreflightFailure {
    PreflightFailure { outage: cohort_worker::is_outage(&s), error: status_error_of(endpoint, what, s) }
}

/// The pre-flight's message for a gRPC status from the proxy.
fn status_error_of(endpoint: &JudgeEndpoint, what: &str, s: tonic::Status) -> anyhow::Error {
    match s.code() {
        tonic::Code::Unauthenticated => anyhow::anyhow!(
            "the judge proxy at {} refused the team key (check key_env/key_file in the judge file): nothing was \
             sent or written",
            endpoint.url
        ),
        tonic::Code::NotFound => anyhow::anyhow!(
            "the judge proxy at {} has no judge {:?} (field `judge` of the judge file): {}",
            endpoint.url,
            endpoint.judge,
            s.message()
        ),
        tonic::Code::ResourceExhausted => anyhow::anyhow!(
            "the judge proxy at {} had no permit for the team in time ({what}: {}): the shared quota is busy; \
             nothing was written",
            endpoint.url,
            s.message()
        ),
        _ if cohort_worker::is_outage(&s) => anyhow::anyhow!(
            "the judge proxy at {} is not reachable ({what}: {}): start it, or fix `url` in the judge file; \
             nothing was sent or written",
            endpoint.url,
            s.message()
        ),
        _ => anyhow::anyhow!("the judge proxy at {} failed the pre-flight ({what}): {}", endpoint.url, s.message()),
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

/// What every run of the stage is judged with.
struct Stage<'a> {
    pass: &'a PassStore,
    artifacts: &'a ArtifactStore,
    endpoint: &'a JudgeEndpoint,
    expected_served: &'a str,
    batch: usize,
    /// `--capture`: fetches the sources collection never captured.
    capturer: Option<&'a SourceCapturer>,
}

/// Judges one run's claims that the pass has no YES/NO for, and merges.
async fn judge_run(stage: &Stage<'_>, run_id: &str, record_sha256: &str) -> anyhow::Result<RunTally> {
    let Stage { pass, artifacts, endpoint, expected_served, batch, capturer } = *stage;
    // `get` checks the bytes against the hash: an edited record is an error.
    let bytes = artifacts
        .get(record_sha256)
        .with_context(|| format!("cannot read record {record_sha256}"))?
        .ok_or_else(|| anyhow::anyhow!("record {record_sha256} is missing from the artifact store"))?;
    let record: RunRecord =
        serde_json::from_slice(&bytes).with_context(|| format!("record {record_sha256} is not a run record"))?;
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
    let to_send: Vec<pb::Claim> =
        plan.to_judge.into_iter().filter(|c| c.claim_id.parse::<u32>().is_ok_and(|id| !done.contains(&id))).collect();
    for chunk in to_send.chunks(batch) {
        tally.sent += chunk.len() as u64;
        tally.calls += 1;
        let result = score::judge_claims(endpoint, chunk.to_vec(), &record.question_id, &plan.system).await;
        if let Err(status) = &result {
            tracing::warn!(run_id, error = %status.message(), "judge call failed; its claims stay unjudged");
        }
        let strict = pass.config().judge.as_ref().is_some_and(|j| j.strict).then_some(expected_served);
        for (c, answer) in chunk.iter().zip(score::apply_reply(chunk, &result, strict)) {
            let Ok(id) = c.claim_id.parse::<u32>() else { continue };
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

/// The ensemble pass `name` of `args.of`: per claim, the majority vote of
/// the members (`cohort_core::agreement::majority_vote`), taken only once
/// it is decided: the margin must exceed the number of members without a
/// verdict yet, so no later member verdict could overturn it (a pass's
/// verdict never changes). Otherwise `unjudged(no_majority)`, filled in
/// when the members are.
fn ensemble(args: &JudgeArgs, name: &str) -> anyhow::Result<u8> {
    let members: Vec<String> = args.of.iter().map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect();
    if members.len() < 2 {
        anyhow::bail!(
            "--of names {} pass(es): an ensemble needs at least two (three for a tie-free vote)",
            members.len()
        );
    }
    if members.iter().any(|m| m == name) {
        anyhow::bail!("--ensemble {name:?} cannot be one of its own members");
    }
    let stores: Vec<PassStore> = members.iter().map(|m| PassStore::open(&args.dir, m)).collect::<Result<_, _>>()?;
    let mut by_run: BTreeMap<String, Vec<Option<PassRun>>> = BTreeMap::new();
    for (k, store) in stores.iter().enumerate() {
        for run in store.read_all()? {
            let id = run.run_id.clone();
            by_run.entry(id).or_insert_with(|| vec![None; stores.len()])[k] = Some(run);
        }
    }
    let pass = PassStore::create_or_open(&args.dir, PassConfig::ensemble(name, members.clone()))?;
    let (mut decided, mut undecided, mut skipped) = (0u64, 0u64, 0u64);
    for (run_id, runs) in by_run {
        let shas: BTreeSet<&str> = runs.iter().flatten().map(|r| r.record_sha256.as_str()).collect();
        let [sha] = shas.into_iter().collect::<Vec<_>>()[..] else {
            eprintln!("warning: run {run_id}: the member passes judged different records; not in the ensemble");
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
            updated_at: String::new(),
        };
        pass.merge_run(&incoming)?;
    }
    super::emit(&format!(
        "ensemble pass {name:?} of {}: {decided} claims with a majority verdict, {undecided} without (tied, \
         undecided yet, or not judgeable){}\n",
        members.join(", "),
        if skipped > 0 { format!("; {skipped} run(s) skipped") } else { String::new() }
    ));
    Ok(0)
}

// === cohort passes ===

/// A pass's YES/NO votes by (run id, record hash, claim id).
type PassVotes = HashMap<(String, String, u32), bool>;

/// One pass, counted.
struct PassSummary {
    name: String,
    config: PassConfig,
    runs: usize,
    claims: usize,
    yes: u64,
    no: u64,
    unjudged: BTreeMap<&'static str, u64>,
    served: BTreeMap<String, u64>,
    votes: PassVotes,
}

impl PassSummary {
    fn read(dir: &std::path::Path, name: &str) -> anyhow::Result<PassSummary> {
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

pub fn passes_command(args: PassesArgs) -> anyhow::Result<()> {
    let summaries: Vec<PassSummary> =
        passes::list(&args.dir)?.iter().map(|name| PassSummary::read(&args.dir, name)).collect::<Result<_, _>>()?;
    // The one agreement of two judges' verdicts (as `cohort calibrate`'s).
    let mut pairs = Vec::new();
    for (i, a) in summaries.iter().enumerate() {
        for b in &summaries[i + 1..] {
            pairs.push((&a.name, &b.name, verdict_agreement(&a.votes, &b.votes)));
        }
    }
    if args.json {
        let passes: Vec<serde_json::Value> = summaries
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "config": s.config,
                    "runs": s.runs,
                    "claims": s.claims,
                    "judged": s.yes + s.no,
                    "yes": s.yes,
                    "no": s.no,
                    "unjudged": s.unjudged,
                    "served_models": s.served,
                })
            })
            .collect();
        let agreement: Vec<serde_json::Value> = pairs
            .iter()
            .map(|(a, b, agreed)| {
                json!({
                    "a": a,
                    "b": b,
                    "items": agreed.items,
                    "raw_agreement": agreed.raw_agreement,
                    "kappa": agreed.kappa,
                    "matrix": agreed.matrix,
                    "labels": agreed.labels,
                })
            })
            .collect();
        let out = json!({ "passes": passes, "agreement": agreement });
        super::emit(&format!("{}\n", serde_json::to_string_pretty(&out)?));
        return Ok(());
    }
    if summaries.is_empty() {
        super::emit(&format!("no passes in {} yet: `cohort judge` makes one\n", args.dir.display()));
        return Ok(());
    }
    let mut out = String::new();
    for s in &summaries {
        let config = &s.config;
        let what = match (&config.kind, &config.judge) {
            (PassKind::Judge, Some(j)) => format!(
                "judge {:?}, frozen model {:?} served {:?}, lineage {:?}{}",
                j.proxy_judge,
                j.requested_model,
                j.served_model_expected,
                j.vendor_lineage,
                if j.strict { ", strict" } else { "" }
            ),
            _ => format!("majority-vote ensemble of {}", config.members.join(", ")),
        };
        out.push_str(&format!(
            "{}: {what}; created {}\n  {} runs, {} claims: {} judged ({} YES, {} NO); unjudged {}; served by {}\n",
            s.name,
            config.created_at,
            s.runs,
            s.claims,
            s.yes + s.no,
            s.yes,
            s.no,
            render_counts(&s.unjudged),
            render_counts(&s.served),
        ));
    }
    if !pairs.is_empty() {
        out.push_str("\nagreement on claims both passes judged (nominal Cohen's kappa):\n");
        for (a, b, agreed) in &pairs {
            out.push_str(&format!(
                "  {a} vs {b}: {} claims, raw agreement {}, kappa {}\n",
                agreed.items, agreed.raw_agreement, agreed.kappa,
            ));
        }
    }
    super::emit(&out);
    Ok(())
}

fn render_counts<K: std::fmt::Display>(counts: &BTreeMap<K, u64>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// `cohort run`'s inline pass: the pass its accepted runs' verdicts go
/// into, with the configuration `cohort judge` would give it for the same
/// judge file, so both write one pass. `None` without a judge or without
/// a cohort `[judge]`.
pub fn inline_pass(
    frozen: &local::Frozen,
    judge: Option<&JudgeEndpoint>,
    name: &str,
) -> anyhow::Result<Option<cohort_worker::InlinePass>> {
    let (Some(endpoint), Some(j)) = (judge, frozen.cohort.config.judge.as_ref()) else { return Ok(None) };
    let store = PassStore::create_or_open(&frozen.dir, judge_pass_config(name, endpoint, j))?;
    Ok(Some(cohort_worker::InlinePass {
        store: Arc::new(store),
        served_model_expected: j.served_model.clone(),
        strict: true,
    }))
}

/// The configuration of judging pass `name` with the proxy's judge of
/// `endpoint` and the cohort's frozen `[judge]`, strict on the served
/// model: one for `cohort judge` and `cohort run`'s inline pass.
fn judge_pass_config(name: &str, endpoint: &JudgeEndpoint, frozen: &cohort_core::config::JudgeConfig) -> PassConfig {
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
            assert!(f.outage, "{s:?}: {:#}", f.error);
        }
        let f = preflight_failure(&endpoint, "the probe call", tonic::Status::resource_exhausted("busy"));
        assert!(format!("{:#}", f.error).contains("no permit"), "{:#}", f.error);
        for s in [tonic::Status::unauthenticated("key"), tonic::Status::not_found("no judge j")] {
            assert!(!preflight_failure(&endpoint, "DescribeJudge", s.clone()).outage, "{s:?}");
        }
    }
}
