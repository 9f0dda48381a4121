//! `cohort run DIR`: freeze the cohort if needed, then run it on this
//! machine: the coordinator, the workers and the ledger in one process,
//! talking over real loopback gRPC, with progress bars per arm.
//!
//! Interrupted (Ctrl-C), it drains and stops; run again, it resumes from
//! the ledger where it stopped.
//!
//! Judging: with `--judge FILE` through that proxy; with
//! `--judge-proxy-config FILE` through a proxy started here from that
//! config; with neither and `[judge] provider = "sim"`, through a proxy
//! started here around the proxy's SIMULATED judge (built in memory:
//! `ProxyConfig::builtin_sim`), so the offline quickstart shows the whole
//! pipeline. A real `[judge]` without either flag is not called: support
//! stays unmeasured, and a warning says so.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cohort_clock::SystemClock;
use cohort_coordinator::freeze::read_manifest;
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService};
use cohort_core::config::CohortConfig;
use cohort_core::manifest;
use cohort_core::taxonomy::Outcome;
use cohort_judge_proxy::ProxyConfig;
use cohort_worker::WorkerConfig;
use cohort_worker::score::JudgeEndpoint;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use tokio::sync::watch;

use super::local::{self, ScoringArgs, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// How many workers to run in this process.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Runs each worker carries out at once (default: the sum of the arms'
    /// concurrency caps, split over the workers).
    #[arg(long)]
    pub slots: Option<u32>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub scoring: ScoringArgs,
    /// Start a judge proxy in this process with this config (see
    /// docs/judge-proxy.md) and judge through it, as its first team, with
    /// the judge whose model is the cohort's `[judge] model`. Without it or
    /// `--judge`, a cohort whose `[judge] provider` is "sim" is judged by
    /// the proxy's built-in SIMULATED judge, in this process.
    #[arg(long, value_name = "FILE", conflicts_with = "judge")]
    pub judge_proxy_config: Option<PathBuf>,
    /// The judging pass the inline verdicts go into (the pass `cohort
    /// judge --pass` fills in; docs/judging.md).
    #[arg(long, value_name = "NAME", default_value = cohort_worker::passes::DEFAULT_PASS)]
    pub pass: String,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // Before freezing or opening the ledger: a cohort that cannot run
    // writes nothing (exit 2, every problem named).
    local::preflight(&args.dir, cohort_worker::preflight::Scope::Run, &[], args.scoring.judge.as_deref())?;
    let was_frozen = read_manifest(&args.dir.join(manifest::FILE))?.is_some();
    if !was_frozen {
        super::freeze::run(&args.dir, None, 0)?;
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    runtime.block_on(run_cohort(&args.dir, &args))
}

async fn run_cohort(dir: &Path, args: &RunArgs) -> anyhow::Result<()> {
    let frozen = local::load(dir)?;
    let arms = local::arm_runtimes(&frozen, &[])?;
    let ledger = local::open_ledger(&frozen, &args.store).await?;
    let seeded = local::seed(ledger.as_ref(), &frozen).await?;
    let config = &frozen.cohort.config;
    let simulated: Vec<&str> = arms.values().filter(|a| a.adapter.simulated()).map(|a| a.config.id.as_str()).collect();
    let mut head = format!(
        "cohort \"{}\": {} planned runs ({seeded:?}), manifest {}\n",
        config.name,
        frozen.manifest.run_count,
        &frozen.manifest_sha256[..12]
    );
    if !simulated.is_empty() {
        head.push_str(&format!(
            "arms {} are SIMULATED (built-in sim system, not real products)\n",
            simulated.join(", ")
        ));
    }
    super::emit(&head);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("cannot bind a loopback port")?;
    let address = listener.local_addr()?;
    let coordinator = CoordinatorService::new(
        Arc::clone(&ledger),
        local::served_plan(&frozen),
        Arc::new(SystemClock),
        CoordinatorConfig { reconcile_interval: Duration::from_millis(250), ..CoordinatorConfig::default() },
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    // The workers stop first, on their own signal: they drain (finish or
    // release their runs) while the coordinator and the judge proxy are
    // still up, so nothing in flight is lost or charged as worker_lost.
    let (workers_stop_tx, workers_stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let server = tokio::spawn(service::run(coordinator, listener, stopped(stop_rx.clone())));
    let mut context_judge = None;
    let mut proxy_task = None;
    if let Some(proxy) = in_process_judge(args, config)? {
        let (endpoint, task) =
            local::start_judge_proxy(proxy.config, &proxy.origin, &frozen, stopped(stop_rx.clone())).await?;
        let line = if proxy.simulated {
            format!(
                "judge {:?} is SIMULATED (the judge proxy's built-in sim judge, running in this process at {}): \
                 its verdicts exercise the pipeline and measure nothing about real support\n",
                endpoint.judge, endpoint.url
            )
        } else {
            format!("judge proxy (in this process): {} judge {:?}\n", endpoint.url, endpoint.judge)
        };
        super::emit(&line);
        context_judge = Some(endpoint);
        proxy_task = Some(task);
    } else if args.scoring.judge.is_none()
        && let Some(judge) = &config.judge
    {
        let sources = if args.scoring.captures(false) {
            "cited sources are captured (--capture) for `cohort judge` later"
        } else {
            "cited sources are not fetched (add --capture to keep them, as they are now, for `cohort judge` later)"
        };
        eprintln!(
            "warning: the cohort's judge ({} {:?}) is not called without --judge FILE or --judge-proxy-config FILE: \
             claims are recorded, support will be unmeasured (n/a); {sources}",
            judge.provider, judge.model
        );
    }

    let inline_judge = match &context_judge {
        Some(endpoint) => Some(endpoint.clone()),
        None => args.scoring.judge.as_deref().map(JudgeEndpoint::from_file).transpose()?,
    };
    // The same pre-flight as `cohort judge`, before any run starts. A judge
    // that refuses the key or is not the frozen judge is a configuration
    // error: nothing starts (exit 2). A judge that is down is an outage:
    // collection does not wait on it (the window is frozen), so the runs go
    // on, claims it cannot judge are recorded unjudged(provider_error), and
    // the end says so (exit 3) and how `cohort judge` fills them in.
    if let (Some(endpoint), Some(frozen_judge)) = (&inline_judge, &config.judge)
        && let Err(failure) = cohort_worker::judging::preflight(endpoint, frozen_judge).await
    {
        if failure.outage {
            eprintln!(
                "warning: {:#}\ncollection goes on without waiting for the judge; claims it cannot judge are recorded \
                 unjudged, and `cohort judge {} --judge FILE` fills them in later.",
                failure.error,
                dir.display()
            );
        } else {
            let _ = stop_tx.send(true);
            let _ = server.await;
            eprintln!(
                "error: {:#}\nno run was started. Fix the judge, or run without --judge and judge the stored outputs \
                 later with `cohort judge {} --judge FILE`.",
                failure.error,
                dir.display()
            );
            return Err(super::Exit(super::judge::EXIT_REFUSED).into());
        }
    }
    if let Some(schedule) = config.repeat_schedule.as_ref().filter(|s| config.repeats > 1 && s.every_hours > 0) {
        super::emit(&format!(
            "rounds: {}; this run waits for each round to open (Ctrl-C stops it, `cohort run` again resumes; \
             `cohort status` shows when each round opens)\n",
            schedule.describe(config.repeats, config.window_hours)
        ));
    }
    let pass =
        cohort_worker::judging::inline_pass(&frozen.dir, config.judge.as_ref(), inline_judge.as_ref(), &args.pass)?;
    let total_caps: u32 = config.arms.iter().map(|a| a.concurrency).sum();
    let workers = args.workers.max(1);
    let slots = args.slots.unwrap_or_else(|| total_caps.div_ceil(workers).max(1));
    let mut worker_tasks = Vec::new();
    for i in 0..workers {
        let worker = WorkerConfig {
            coordinator: format!("http://{address}"),
            name: format!("local-{i}"),
            slots,
            drain_grace: Duration::from_secs(5),
            context: {
                let mut context = local::run_context(&frozen, &args.store, &args.scoring)?;
                if let Some(judge) = &context_judge {
                    local::set_judge(&mut context, judge.clone(), &args.scoring)?;
                }
                context.pass.clone_from(&pass);
                context
            },
            arms: arms.clone(),
            // One process on loopback: nothing to authenticate.
            token: None,
            tls: None,
        };
        worker_tasks.push(tokio::spawn(cohort_worker::run(worker, stopped(workers_stop_rx.clone()))));
    }

    // Progress: one bar per arm, from the ledger's counts.
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {msg} eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let arm_bars: Vec<(String, ProgressBar)> = config
        .arms
        .iter()
        .map(|a| {
            let bar = bars.add(ProgressBar::new(0).with_style(style.clone()).with_prefix(a.id.clone()));
            (a.id.clone(), bar)
        })
        .collect();
    // Bars draw only on a terminal; a log file or a pipe gets a plain line
    // per arm every PLAIN_PROGRESS_EVERY instead (and once at the end).
    let plain = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_plain: Option<std::time::Instant> = None;
    let interrupted = local::shutdown_signal();
    tokio::pin!(interrupted);
    let mut was_interrupted = false;
    let status = loop {
        let status = ledger.status().await?;
        if plain && last_plain.is_none_or(|t| t.elapsed() >= PLAIN_PROGRESS_EVERY) {
            last_plain = Some(std::time::Instant::now());
            eprint!("{}", plain_progress(&status));
        }
        for (id, bar) in &arm_bars {
            if let Some(arm) = status.arms.iter().find(|a| &a.id == id) {
                let finished: u64 = arm.by_outcome.values().sum();
                let completed = arm.by_outcome.get(&Outcome::Completed).copied().unwrap_or(0);
                bar.set_length(arm.planned);
                bar.set_position(finished);
                let paused = if arm.paused.is_some() { " PAUSED" } else { "" };
                // Workers never get a manual arm's runs: a person does.
                let manual = if arm.manual { " MANUAL (`cohort pending`)" } else { "" };
                bar.set_message(format!(
                    "completed {completed}, not completed {}{paused}{manual}",
                    finished - completed
                ));
            }
        }
        let workers_done = worker_tasks.iter().all(|t| t.is_finished());
        if status.done() || workers_done || nothing_left_for_workers(&status) {
            break status;
        }
        tokio::select! {
            () = &mut interrupted => { was_interrupted = true; break status; }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    };
    leave_bars(arm_bars.iter().map(|(_, bar)| bar));
    if plain {
        eprint!("{}", plain_progress(&status));
    }
    let _ = workers_stop_tx.send(true);
    for task in worker_tasks {
        if let Ok(Err(e)) = task.await {
            eprintln!("warning: a worker stopped with an error: {e}");
        }
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    if let Some(task) = proxy_task {
        match task.await {
            Ok(Err(e)) => eprintln!("warning: the judge proxy stopped with an error: {e}"),
            Err(e) => eprintln!("warning: the judge proxy task failed: {e}"),
            Ok(Ok(())) => {}
        }
    }
    let status = if was_interrupted { ledger.status().await.unwrap_or(status) } else { status };

    let mut out = String::from("\n");
    out.push_str(&super::table::outcome_table(&status, dir));
    if was_interrupted {
        out.push_str("\ninterrupted: state is kept in the ledger; `cohort run` again resumes where this stopped.\n");
    } else if nothing_left_for_workers(&status) {
        let manual_left: Vec<(&str, u64)> = status
            .arms
            .iter()
            .filter(|a| a.manual)
            .map(|a| (a.id.as_str(), runs_left(a)))
            .filter(|(_, n)| *n > 0)
            .collect();
        if status.arms.iter().any(|a| a.paused.is_some() && !a.manual && runs_left(a) > 0) {
            out.push_str(
                "\nstopped: every run left belongs to a paused arm. Resume the arm (see above), then `cohort run` again;\n\
                 runs still pending when the window closes become not_run (arm_paused).\n",
            );
        } else if !manual_left.is_empty() {
            out.push_str("\nstopped: the runs left are manual: workers never run them.\n");
        }
        for (arm, n) in manual_left {
            out.push_str(&format!(
                "{n} manual run{} of {arm} wait for a person: `cohort pending {}`\n",
                if n == 1 { "" } else { "s" },
                dir.display()
            ));
        }
    } else if !status.done() {
        out.push_str("\nstopped before every run had its outcome: see `cohort status`.\n");
    }
    super::emit(&out);
    // Every planned run has its outcome: the run ends with its report.
    // Otherwise a report would be of a moving target; say how to get one.
    if status.done() {
        let written = super::report::report(dir, &args.store, cohort_core::stats::DEFAULT_DRAWS, None, None).await?;
        super::emit(&format!("\n{}report: {}\n", super::report::headline(&written.summary), written.path.display()));
        // Claims a judge outage left unjudged are not a silent success.
        let mut outage: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for arm in &written.summary.arms {
            for (reason, n) in &arm.claims.unjudged {
                if matches!(reason.as_str(), "provider_error" | "deadline") {
                    *outage.entry(reason.as_str()).or_default() += n;
                }
            }
        }
        if inline_judge.is_some() && !outage.is_empty() {
            let counts: Vec<String> = outage.iter().map(|(r, n)| format!("{n} {r}")).collect();
            eprintln!(
                "warning: the judge left claims unjudged ({}): run `cohort judge {} --judge FILE` to fill them in",
                counts.join(", "),
                dir.display()
            );
            return Err(super::Exit(super::judge::EXIT_UNJUDGED).into());
        }
    } else {
        super::emit(&format!(
            "no report yet: runs are still pending. `cohort report {}` writes one of the state so far.\n",
            dir.display()
        ));
        // A script must not take a stop for the end (issue 10).
        return Err(super::Exit(EXIT_NOT_FINISHED).into());
    }
    Ok(())
}

/// How often `cohort run` writes plain progress lines when stderr is not a
/// terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// One line per arm, no terminal codes: `progress ARM: F/P final
/// (completed C, not completed N)`, and `PAUSED` or `MANUAL` when so.
fn plain_progress(status: &cohort_ledger::Status) -> String {
    let mut out = String::new();
    for arm in &status.arms {
        let finished: u64 = arm.by_outcome.values().sum();
        let completed = arm.by_outcome.get(&Outcome::Completed).copied().unwrap_or(0);
        out.push_str(&format!(
            "progress {}: {finished}/{} final (completed {completed}, not completed {}){}{}\n",
            arm.id,
            arm.planned,
            finished - completed,
            if arm.paused.is_some() { " PAUSED" } else { "" },
            if arm.manual { " MANUAL" } else { "" },
        ));
    }
    out
}

/// Leaves each arm's bar where the arm truly is. `finish()` would move a
/// bar to its length, so an arm stopped by Ctrl-C, a pause or an abort
/// would show as full; `abandon()` keeps the position (a finished arm's
/// bar is full already).
fn leave_bars<'a>(bars: impl IntoIterator<Item = &'a ProgressBar>) {
    for bar in bars {
        bar.abandon();
    }
}

/// The exit code of `cohort run` when it stops with runs not final
/// (interrupted, or every run left belongs to a paused arm); what is left
/// and how to go on were printed.
pub const EXIT_NOT_FINISHED: u8 = 4;

/// Whether the workers can do nothing more until a person acts: no
/// worker's run in flight, and every run without its outcome belongs to a
/// paused arm (an operator resumes it) or to a manual arm (a person runs
/// it: `cohort pending`, `cohort submit`), so `cohort run` stops instead
/// of waiting for ever.
fn nothing_left_for_workers(status: &cohort_ledger::Status) -> bool {
    let in_flight: u64 = status.arms.iter().filter(|a| !a.manual).map(|a| a.leased).sum();
    let workable: u64 = status.arms.iter().filter(|a| a.paused.is_none() && !a.manual).map(runs_left).sum();
    !status.done() && in_flight == 0 && workable == 0
}

/// The runs of an arm without their final outcome (pending or leased).
fn runs_left(arm: &cohort_ledger::ArmStatus) -> u64 {
    arm.planned.saturating_sub(arm.by_outcome.values().sum::<u64>())
}

/// The proxy `cohort run` starts itself, if any: the one of
/// `--judge-proxy-config`, else (no `--judge` either) the built-in
/// SIMULATED one when the cohort's `[judge] provider` is "sim".
fn in_process_judge(args: &RunArgs, cohort: &CohortConfig) -> anyhow::Result<Option<local::InProcessJudge>> {
    if let Some(path) = &args.judge_proxy_config {
        let config = ProxyConfig::load(path)?;
        let simulated = !config.simulated_upstreams().is_empty();
        return Ok(Some(local::InProcessJudge { config, origin: path.display().to_string(), simulated }));
    }
    if args.scoring.judge.is_some() {
        return Ok(None);
    }
    Ok(local::builtin_sim_judge(cohort)?)
}

#[cfg(test)]
mod tests {
    use indicatif::ProgressBar;

    /// Proves a stopped arm's bar keeps its true position instead of
    /// jumping to full (what `finish()` would do).
    #[test]
    fn a_stopped_bar_keeps_its_position() {
        let stopped = ProgressBar::hidden();
        stopped.set_length(12);
        stopped.set_position(5);
        let full = ProgressBar::hidden();
        full.set_length(3);
        full.set_position(3);
        super::leave_bars([&stopped, &full]);
        assert_eq!(stopped.position(), 5);
        assert!(stopped.is_finished());
        assert_eq!(full.position(), 3);
    }
}
