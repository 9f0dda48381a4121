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
use std::time::Duration;

use anyhow::Context as _;
use cohort_coordinator::freeze::read_manifest;
use cohort_core::manifest;
use cohort_core::taxonomy::Outcome;
use cohort_serve::ServeError;
use cohort_serve::run::{nothing_left_for_workers, runs_left};
use cohort_serve::{LocalConfig, LocalEvent, LocalOutcome};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

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
    let config = LocalConfig {
        dir: dir.to_owned(),
        workers: args.workers,
        slots: args.slots,
        store: args.store.config(),
        scoring: args.scoring.config(),
        judge_proxy_config: args.judge_proxy_config.clone(),
        pass: args.pass.clone(),
    };
    let mut shown = Shown::new(dir);
    let outcome = cohort_serve::run_local(&config, |event| shown.show(event), local::shutdown_signal())
        .await
        .map_err(|e| if matches!(e, ServeError::LedgerLost { .. }) { super::refuse(e) } else { e.into() })?;
    let (status, was_interrupted, judged) = match outcome {
        LocalOutcome::Ran { status, interrupted, judged } => (status, interrupted, judged),
        LocalOutcome::JudgeRefused(error) => {
            eprintln!(
                "error: {:#}\nno run was started. Fix the judge, or run without --judge and judge the stored outputs \
                 later with `cohort judge {} --judge FILE`.",
                error,
                dir.display()
            );
            return Err(super::Exit(super::judge::EXIT_REFUSED).into());
        }
    };

    let mut out = String::from("\n");
    out.push_str(&cohort_serve::status::outcome_table(&status, dir));
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
        if judged && !outage.is_empty() {
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

/// What `cohort run` shows of [`cohort_serve::run_local`]'s events: the
/// lines it prints, and one bar per arm from the ledger's counts (on a
/// terminal; a log file or a pipe gets a plain line per arm every
/// [`PLAIN_PROGRESS_EVERY`] instead, and once at the end).
struct Shown {
    /// The cohort directory, named in the hints.
    dir: PathBuf,
    bars: MultiProgress,
    /// The arms, in config order: their bars are made at the first counts.
    arms: Vec<String>,
    arm_bars: Vec<(String, ProgressBar)>,
    plain: bool,
    last_plain: Option<std::time::Instant>,
}

impl Shown {
    fn new(dir: &Path) -> Shown {
        Shown {
            dir: dir.to_owned(),
            bars: MultiProgress::new(),
            arms: Vec::new(),
            arm_bars: Vec::new(),
            plain: !std::io::IsTerminal::is_terminal(&std::io::stderr()),
            last_plain: None,
        }
    }

    fn show(&mut self, event: LocalEvent<'_>) {
        match event {
            LocalEvent::Seeded { frozen, seeded, simulated } => {
                let config = &frozen.cohort.config;
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
                self.arms = config.arms.iter().map(|a| a.id.clone()).collect();
            }
            LocalEvent::JudgeStarted { endpoint, simulated } => {
                let line = if simulated {
                    format!(
                        "judge {:?} is SIMULATED (the judge proxy's built-in sim judge, running in this process at {}): \
                         its verdicts exercise the pipeline and measure nothing about real support\n",
                        endpoint.judge, endpoint.url
                    )
                } else {
                    format!("judge proxy (in this process): {} judge {:?}\n", endpoint.url, endpoint.judge)
                };
                super::emit(&line);
            }
            LocalEvent::JudgeNotCalled { judge, captures } => {
                let sources = if captures {
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
            LocalEvent::JudgeOutage { error } => {
                eprintln!(
                    "warning: {:#}\ncollection goes on without waiting for the judge; claims it cannot judge are recorded \
                     unjudged, and `cohort judge {} --judge FILE` fills them in later.",
                    error,
                    self.dir.display()
                );
            }
            LocalEvent::Rounds { schedule, repeats, window_hours } => {
                super::emit(&format!(
                    "rounds: {}; this run waits for each round to open (Ctrl-C stops it, `cohort run` again resumes; \
                     `cohort status` shows when each round opens)\n",
                    schedule.describe(repeats, window_hours)
                ));
            }
            LocalEvent::Status(status) => {
                if self.arm_bars.is_empty() {
                    let style = ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {msg} eta {eta}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> ");
                    self.arm_bars = (self.arms.iter())
                        .map(|id| {
                            let bar =
                                self.bars.add(ProgressBar::new(0).with_style(style.clone()).with_prefix(id.clone()));
                            (id.clone(), bar)
                        })
                        .collect();
                }
                if self.plain && self.last_plain.is_none_or(|t| t.elapsed() >= PLAIN_PROGRESS_EVERY) {
                    self.last_plain = Some(std::time::Instant::now());
                    eprint!("{}", plain_progress(status));
                }
                for (id, bar) in &self.arm_bars {
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
            }
            LocalEvent::Stopping(status) => {
                leave_bars(self.arm_bars.iter().map(|(_, bar)| bar));
                if self.plain {
                    eprint!("{}", plain_progress(status));
                }
            }
            LocalEvent::WorkerFailed(e) => eprintln!("warning: a worker stopped with an error: {e}"),
            LocalEvent::ProxyFailed(why) => eprintln!("warning: {why}"),
        }
    }
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
