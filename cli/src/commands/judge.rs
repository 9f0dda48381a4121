//! `cohort judge` and `cohort passes`: judging as a stage of its own
//! (SPEC section 8, docs/judging.md).
//!
//! `cohort judge DIR --judge FILE [--pass NAME]` judges the completed,
//! stored outputs of a cohort, in planned order, without collecting again,
//! after a pre-flight of the judge; `--ensemble` makes a majority-vote pass
//! instead. The stage itself (pre-flight, per-run judging and merging, the
//! pass configuration, the vote, a pass's counts) is
//! [`cohort_worker::judging`]; this module parses the arguments, opens the
//! cohort's ledger and stores, shows progress and prints.
//!
//! Exit codes: 0 every judgeable claim has a verdict; 2 bad input or a
//! pre-flight refusal (nothing sent, nothing written); 3 some claims are
//! still unjudged after an outage (run again to fill them in); 1 any other
//! failure (a record that no longer scores as recorded, an I/O error).

use std::path::PathBuf;
use std::time::Instant;

use cohort_serve::judge_stage::{JudgeStageConfig, open_judge_stage};
use cohort_worker::judging::{self, RunFailure};
use cohort_worker::passes::DEFAULT_PASS;
use indicatif::{ProgressBar, ProgressStyle};

use super::Exit;
use super::local::{self, StoreArgs};

/// Exit code: some judgeable claims are still unjudged (an outage).
pub const EXIT_UNJUDGED: u8 = 3;
/// Exit code: bad input, or the pre-flight refused; nothing was written.
pub use super::EXIT_REFUSED;

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
            Some(name) => ensemble(&args, name),
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

async fn judge_stage(args: &JudgeArgs) -> Result<u8, Stop> {
    let frozen = local::load(&args.dir).map_err(refused)?;
    let asked = JudgeStageConfig {
        pass: &args.pass,
        judge_file: args.judge.as_deref(),
        capture: args.capture,
        capture_private_addresses: args.capture_private_addresses,
    };
    let opened = open_judge_stage(&frozen, &args.store.config(), asked).await.map_err(refused)?;
    let (stage, runs, frozen_judge, described) =
        (&opened.stage, opened.runs.clone(), &opened.frozen_judge, &opened.described);
    let endpoint = &stage.endpoint;
    if opened.simulated_in_process {
        super::emit(&format!(
            "judge {:?} is SIMULATED (the judge proxy's built-in sim judge, running in this process at {}): its \
             verdicts exercise the pipeline and measure nothing about real support\n",
            endpoint.judge, endpoint.url
        ));
    }
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

    let bar = ProgressBar::new(runs.len() as u64).with_style(
        ProgressStyle::with_template("judging [{bar:30}] {pos}/{len} runs, {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let outcome = judging::judge_runs(stage, runs, args.concurrency, |total| {
        bar.inc(1);
        bar.set_message(format!("{} claims judged, {} sent", total.judged, total.sent));
    })
    .await;
    bar.finish();
    let total = outcome.total;
    let failures: Vec<String> = outcome
        .failures
        .into_iter()
        .map(|f| match f {
            RunFailure::Run { run_id, error } => format!("{run_id}: {:#}", anyhow::Error::from(error)),
            RunFailure::Task(e) => format!("a judging task failed: {e}"),
        })
        .collect();
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

// === ensembles ===

/// `--ensemble NAME --of ...`: [`judging::ensemble`], and what it came to.
fn ensemble(args: &JudgeArgs, name: &str) -> Result<u8, Stop> {
    let made = judging::ensemble(&args.dir, name, &args.of, |run_id| {
        eprintln!("warning: run {run_id}: the member passes judged different records; not in the ensemble");
    })
    .map_err(refused)?;
    super::emit(&format!(
        "ensemble pass {name:?} of {}: {} claims with a majority verdict, {} without (tied, undecided yet, or not \
         judgeable){}\n",
        made.members.join(", "),
        made.decided,
        made.undecided,
        if made.skipped > 0 { format!("; {} run(s) skipped", made.skipped) } else { String::new() }
    ));
    Ok(0)
}

// === cohort passes ===

pub fn passes_command(args: PassesArgs) -> anyhow::Result<()> {
    super::emit(&cohort_serve::passes::listing(&args.dir, args.json)?);
    Ok(())
}
