//! [`run_local`]: a cohort run on this machine, what `cohort run` does
//! after freezing. The coordinator, the workers, the ledger and (when the
//! cohort is judged in process) the judge proxy in one process, talking
//! over real loopback gRPC; stopped, it drains and stops, and run again it
//! resumes from the ledger.
//!
//! Nothing here prints: what happens is told to the caller's
//! `progress` callback as [`LocalEvent`]s, in the order the CLI prints
//! them, and the end is a [`LocalOutcome`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cohort_clock::SystemClock;
use cohort_coordinator::service::{self, CoordinatorConfig, CoordinatorService};
use cohort_core::config::{JudgeConfig, RepeatSchedule};
use cohort_judge_proxy::ProxyConfig;
use cohort_ledger::{ArmStatus, SeedOutcome, Status};
use cohort_worker::WorkerConfig;
use cohort_worker::judging::StageError;
use cohort_worker::score::JudgeEndpoint;
use tokio::sync::watch;

use crate::ServeError;
use crate::judge::{InProcessJudge, builtin_sim_judge, start_judge_proxy};
use crate::local::{self, Frozen, ScoringConfig, StoreConfig};

/// What [`run_local`] runs: the cohort, its stores, its scoring and how
/// many workers in this process.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The frozen cohort directory.
    pub dir: PathBuf,
    /// Workers in this process (at least one).
    pub workers: u32,
    /// Runs each worker carries out at once; `None`: the sum of the arms'
    /// concurrency caps, split over the workers.
    pub slots: Option<u32>,
    pub store: StoreConfig,
    pub scoring: ScoringConfig,
    /// A judge proxy config to start in this process and judge through
    /// (`--judge-proxy-config`). Without it or `scoring.judge`, a cohort
    /// whose `[judge] provider` is "sim" is judged by the proxy's built-in
    /// SIMULATED judge, in this process.
    pub judge_proxy_config: Option<PathBuf>,
    /// The judging pass the inline verdicts go into.
    pub pass: String,
}

impl LocalConfig {
    /// `cohort run DIR` with no flags: two workers, the cohort's own
    /// stores, capture as the judge decides, the built-in SIMULATED judge
    /// when the cohort's `[judge]` is "sim", the default pass.
    pub fn for_dir(dir: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            dir: dir.into(),
            workers: 2,
            slots: None,
            store: StoreConfig::default(),
            scoring: ScoringConfig::default(),
            judge_proxy_config: None,
            pass: cohort_worker::passes::DEFAULT_PASS.to_owned(),
        }
    }
}

/// What happens during [`run_local`], in order.
#[derive(Debug)]
pub enum LocalEvent<'a> {
    /// The cohort is loaded and its ledger seeded; `simulated` names the
    /// arms whose system is the built-in sim.
    Seeded { frozen: &'a Frozen, seeded: SeedOutcome, simulated: Vec<&'a str> },
    /// A judge proxy started in this process.
    JudgeStarted { endpoint: &'a JudgeEndpoint, simulated: bool },
    /// The cohort's judge is not called (no judge file, no proxy config);
    /// `captures`: whether cited sources are fetched anyway.
    JudgeNotCalled { judge: &'a JudgeConfig, captures: bool },
    /// The judge's pre-flight found it down: collection goes on, claims it
    /// cannot judge are recorded unjudged.
    JudgeOutage { error: &'a StageError },
    /// The runs come in rounds that open in turn.
    Rounds { schedule: &'a RepeatSchedule, repeats: u32, window_hours: u32 },
    /// The ledger's counts, about every 100 ms while runs go on.
    Status(&'a Status),
    /// The run stops (done, nothing left for workers, or the shutdown
    /// signal): the last counts before the workers drain.
    Stopping(&'a Status),
    /// A worker stopped with an error (the others go on stopping).
    WorkerFailed(&'a cohort_worker::WorkerError),
    /// The in-process judge proxy stopped with an error, or its task failed.
    ProxyFailed(String),
}

/// How [`run_local`] ended.
#[derive(Debug)]
pub enum LocalOutcome {
    /// The run ran and stopped: every run final, or nothing left for the
    /// workers, or interrupted.
    Ran {
        /// The ledger's counts at the end.
        status: Status,
        /// Whether the shutdown signal stopped it.
        interrupted: bool,
        /// Whether claims were judged inline.
        judged: bool,
    },
    /// The judge refused (a key or lineage problem, not an outage):
    /// nothing was started.
    JudgeRefused(StageError),
}

/// Runs the frozen cohort in `config.dir` on this machine until every
/// run is final, the workers can do nothing more, or `shutdown` resolves.
/// Stopping, the workers drain first (finish or release their runs) while
/// the coordinator and the judge proxy are still up, so nothing in flight
/// is lost or charged as worker_lost; then the coordinator and the proxy
/// stop. Every task started here is joined before it returns.
pub async fn run_local(
    config: &LocalConfig,
    mut progress: impl FnMut(LocalEvent<'_>),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<LocalOutcome, ServeError> {
    let frozen = local::load(&config.dir)?;
    let arms = local::arm_runtimes(&frozen, &[])?;
    let ledger = local::open_ledger(&frozen, &config.store).await?;
    let seeded = local::seed(ledger.as_ref(), &frozen).await?;
    let cohort = &frozen.cohort.config;
    let simulated: Vec<&str> = arms.values().filter(|a| a.adapter.simulated()).map(|a| a.config.id.as_str()).collect();
    progress(LocalEvent::Seeded { frozen: &frozen, seeded, simulated });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(ServeError::Bind)?;
    let address = listener.local_addr()?;
    let coordinator = CoordinatorService::new(
        Arc::clone(&ledger),
        local::served_plan(&frozen),
        Arc::new(SystemClock),
        CoordinatorConfig { reconcile_interval: Duration::from_millis(250), ..CoordinatorConfig::default() },
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    // The workers stop first, on their own signal (see the doc comment).
    let (workers_stop_tx, workers_stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let server = tokio::spawn(service::run(coordinator, listener, stopped(stop_rx.clone())));
    let mut context_judge = None;
    let mut proxy_task = None;
    if let Some(proxy) = in_process_judge(config, cohort)? {
        let (endpoint, task) =
            start_judge_proxy(proxy.config, &proxy.origin, &frozen, stopped(stop_rx.clone())).await?;
        progress(LocalEvent::JudgeStarted { endpoint: &endpoint, simulated: proxy.simulated });
        context_judge = Some(endpoint);
        proxy_task = Some(task);
    } else if config.scoring.judge.is_none()
        && let Some(judge) = &cohort.judge
    {
        progress(LocalEvent::JudgeNotCalled { judge, captures: config.scoring.captures(false) });
    }

    let inline_judge = match &context_judge {
        Some(endpoint) => Some(endpoint.clone()),
        None => config.scoring.judge.as_deref().map(JudgeEndpoint::from_file).transpose()?,
    };
    // The same pre-flight as `cohort judge`, before any run starts. A judge
    // that refuses the key or is not the frozen judge is a configuration
    // error: nothing starts. A judge that is down is an outage: collection
    // does not wait on it (the window is frozen), so the runs go on.
    if let (Some(endpoint), Some(frozen_judge)) = (&inline_judge, &cohort.judge)
        && let Err(failure) = cohort_worker::judging::preflight(endpoint, frozen_judge).await
    {
        if failure.outage {
            progress(LocalEvent::JudgeOutage { error: &failure.error });
        } else {
            let _ = stop_tx.send(true);
            let _ = server.await;
            return Ok(LocalOutcome::JudgeRefused(failure.error));
        }
    }
    if let Some(schedule) = cohort.repeat_schedule.as_ref().filter(|s| cohort.repeats > 1 && s.every_hours > 0) {
        progress(LocalEvent::Rounds { schedule, repeats: cohort.repeats, window_hours: cohort.window_hours });
    }
    let pass =
        cohort_worker::judging::inline_pass(&frozen.dir, cohort.judge.as_ref(), inline_judge.as_ref(), &config.pass)?;
    let total_caps: u32 = cohort.arms.iter().map(|a| a.concurrency).sum();
    let workers = config.workers.max(1);
    let slots = config.slots.unwrap_or_else(|| total_caps.div_ceil(workers).max(1));
    let mut worker_tasks = Vec::new();
    for i in 0..workers {
        let worker = WorkerConfig {
            coordinator: format!("http://{address}"),
            name: format!("local-{i}"),
            slots,
            drain_grace: Duration::from_secs(5),
            store_outage_grace: cohort_worker::DEFAULT_STORE_OUTAGE_GRACE,
            context: {
                let mut context = local::run_context(&frozen, &config.store, &config.scoring)?;
                if let Some(judge) = &context_judge {
                    local::set_judge(&mut context, judge.clone(), &config.scoring)?;
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

    tokio::pin!(shutdown);
    let mut interrupted = false;
    let status = loop {
        let status = ledger.status().await?;
        progress(LocalEvent::Status(&status));
        let workers_done = worker_tasks.iter().all(|t| t.is_finished());
        if status.done() || workers_done || nothing_left_for_workers(&status) {
            break status;
        }
        tokio::select! {
            () = &mut shutdown => { interrupted = true; break status; }
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    };
    progress(LocalEvent::Stopping(&status));
    let _ = workers_stop_tx.send(true);
    for task in worker_tasks {
        if let Ok(Err(e)) = task.await {
            progress(LocalEvent::WorkerFailed(&e));
        }
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    if let Some(task) = proxy_task {
        match task.await {
            Ok(Err(e)) => progress(LocalEvent::ProxyFailed(format!("the judge proxy stopped with an error: {e}"))),
            Err(e) => progress(LocalEvent::ProxyFailed(format!("the judge proxy task failed: {e}"))),
            Ok(Ok(())) => {}
        }
    }
    let status = if interrupted { ledger.status().await.unwrap_or(status) } else { status };
    Ok(LocalOutcome::Ran { status, interrupted, judged: inline_judge.is_some() })
}

/// The proxy `run_local` starts itself, if any: the one of
/// `judge_proxy_config`, else (no judge file either) the built-in
/// SIMULATED one when the cohort's `[judge] provider` is "sim".
fn in_process_judge(
    config: &LocalConfig,
    cohort: &cohort_core::config::CohortConfig,
) -> Result<Option<InProcessJudge>, ServeError> {
    if let Some(path) = &config.judge_proxy_config {
        let proxy = ProxyConfig::load(path)?;
        let simulated = !proxy.simulated_upstreams().is_empty();
        return Ok(Some(InProcessJudge { config: proxy, origin: path.display().to_string(), simulated }));
    }
    if config.scoring.judge.is_some() {
        return Ok(None);
    }
    builtin_sim_judge(cohort)
}

/// Whether the workers can do nothing more until a person acts: no
/// worker's run in flight, and every run without its outcome belongs to a
/// paused arm (an operator resumes it) or to a manual arm (a person runs
/// it: `cohort pending`, `cohort submit`), so a local run stops instead of
/// waiting for ever.
pub fn nothing_left_for_workers(status: &Status) -> bool {
    let in_flight: u64 = status.arms.iter().filter(|a| !a.manual).map(|a| a.leased).sum();
    let workable: u64 = status.arms.iter().filter(|a| a.paused.is_none() && !a.manual).map(runs_left).sum();
    !status.done() && in_flight == 0 && workable == 0
}

/// The runs of an arm without their final outcome (pending or leased).
pub fn runs_left(arm: &ArmStatus) -> u64 {
    arm.planned.saturating_sub(arm.by_outcome.values().sum::<u64>())
}
