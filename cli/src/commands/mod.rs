//! The subcommands of `cohort`, one module each.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod calibrate;
mod freeze;
mod init;
mod judge;
mod judge_proxy;
mod ledger;
mod local;
mod manual;
mod operate;
pub(crate) mod report;
mod review;
mod roles;
mod run;
mod score;

/// Citation-fidelity benchmarks of deep-research systems, with honest
/// denominators.
#[derive(Debug, Parser)]
#[command(name = "cohort", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a cohort directory from a template.
    Init {
        /// The directory to create (must not exist).
        dir: PathBuf,
        /// `quickstart` (offline, simulated arms) or `protocol-v1` (the 30
        /// frozen questions, three product arms).
        #[arg(long, default_value = "quickstart")]
        template: init::Template,
    },
    /// Validate a cohort directory and write its manifest, once. Run again
    /// to verify that nothing changed.
    Freeze {
        /// The cohort directory (cohort.toml, questions.json, suffix.txt,
        /// protocol.md, rubric.md).
        dir: PathBuf,
        /// After files changed: create a new cohort NEW_NAME beside this
        /// one from the changed files, and log the amendment.
        #[arg(long, value_name = "NEW_NAME", requires = "reason")]
        amend: Option<String>,
        /// Why the cohort is amended (recorded in the new manifest).
        #[arg(long, requires = "amend")]
        reason: Option<String>,
        /// How many runs of the order to print.
        #[arg(long, default_value_t = 10)]
        show: usize,
    },
    /// Run a cohort on this machine: freeze it if needed, then run the
    /// coordinator, workers and ledger in one process with progress bars.
    Run(run::RunArgs),
    /// Run the coordinator alone (a cluster's control plane).
    Coordinator(roles::CoordinatorArgs),
    /// Verify a frozen cohort and seed its ledger (idempotent; the
    /// coordinator does it at start).
    Seed(roles::SeedArgs),
    /// Run a worker alone, against a coordinator.
    Worker(roles::WorkerArgs),
    /// Manual arms: lease the due runs to you (in planned order, within the
    /// arm's cap and the window) and show each exact prompt to paste into
    /// the product (docs/manual.md; exit 0 also when nothing is due).
    Pending(manual::PendingArgs),
    /// Manual arms: record a run you carried out (output, times,
    /// clarification, version label, plan, credits, usage), scored and
    /// stored as an automatic run is (exit 2 when refused: nothing written).
    // Boxed: its many flags would make every command this large.
    Submit(Box<manual::SubmitArgs>),
    /// Show a cohort's progress, outcome table, paused arms and audit log.
    Status(operate::StatusArgs),
    /// Pause an arm: no new leases until resumed.
    Pause(operate::PauseArgs),
    /// Resume a paused arm, with a logged acknowledgement.
    Resume(operate::ResumeArgs),
    /// Abort a cohort: pending runs become not_run (aborted).
    Abort(operate::AbortArgs),
    /// The ledger itself: `rebuild` one that lost its cohort.
    Ledger(ledger::LedgerArgs),
    /// Score one report collected anywhere: deterministic citation metrics,
    /// the normalised reference table and the extracted claims, as JSON.
    Score(score::ScoreArgs),
    /// Run the judge proxy: shared provider quotas, retries, served-model
    /// recording, behind gRPC `Judge` and `/v1/chat/completions`.
    JudgeProxy(judge_proxy::JudgeProxyArgs),
    /// Write a report of a cohort into a new folder DIR/reports/<UTC
    /// timestamp>/: every denominator, rate and 95% interval, the method
    /// block, runs.csv, claims.jsonl, judge traces, plots and index.html.
    Report(report::ReportArgs),
    /// Recompute a report from the ledger and the records and name every
    /// number or file that differs (exit 0 agrees, 1 differs, 2 could not
    /// verify).
    Verify(report::VerifyArgs),
    /// Score judges' pass/fail verdicts against gold labels (CSV): F1,
    /// precision, recall, kappa, pass-rate drift, FPR, FNR with 95%
    /// bootstrap intervals, pairwise judge agreement and the majority vote
    /// (docs/calibration.md; exit 2 on bad input).
    Calibrate(calibrate::CalibrateArgs),
    /// Human review (seed 004).
    Review {
        #[command(subcommand)]
        command: ReviewCommand,
    },
    /// Judge a cohort's stored outputs into a named pass, without
    /// collecting again (resumable; pre-flight checks the frozen judge;
    /// exit 0 all judged, 2 refused, 3 some unjudged: run again), or make
    /// a majority-vote ensemble pass (--ensemble NAME --of P1,P2,P3).
    Judge(judge::JudgeArgs),
    /// List a cohort's judging passes: configuration, verdict counts,
    /// served models, and pairwise agreement (raw, Cohen's kappa).
    Passes(judge::PassesArgs),
}

/// `cohort review ...`: `export` and `import` join `agreement` here.
#[derive(Debug, Subcommand)]
enum ReviewCommand {
    /// Agreement of two raters' labels (CSV item_id,label): raw agreement,
    /// the disagreement matrix and Cohen's kappa, nominal or weighted
    /// (docs/calibration.md; exit 2 on bad input).
    Agreement(calibrate::ReviewAgreementArgs),
    /// Write each reviewer's blinded items (claims, claim-citation pairs,
    /// one uncertainty item per output) as CSV and JSONL; the arm codes go
    /// to DIR/.cohort/review/blinding.json only (docs/review.md; exit 2
    /// when refused).
    Export(review::ExportArgs),
    /// Import reviewers' filled files and the adjudication, checked against
    /// the export and kept write-once (docs/review.md; exit 2 on bad input,
    /// nothing written).
    Import(review::ImportArgs),
    /// Write a reviewer's blinded, self-contained HTML sheet, or with
    /// --adjudicate the sheet of the disagreements (docs/review.md).
    Sheet(review::SheetArgs),
}

/// An error that carries the process exit code and whose message has been
/// printed already (`cohort verify` exits 1 when a report differs).
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// The exit code for bad input or a refused step (nothing was written).
pub const EXIT_REFUSED: u8 = 2;

/// Prints `error: MESSAGE` and returns the error that exits
/// [`EXIT_REFUSED`].
pub fn refuse(message: impl std::fmt::Display) -> anyhow::Error {
    eprintln!("error: {message}");
    Exit(EXIT_REFUSED).into()
}

/// The multi-threaded runtime every async command runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")
}

impl Cli {
    /// The log level when `RUST_LOG` is not set: the long-running roles
    /// report what they do; other commands keep stderr for problems.
    /// The `service.name` of this process's traces (unless
    /// `OTEL_SERVICE_NAME` names another): one per role, `cohort` for the
    /// commands that run several in one process or none.
    pub fn service_name(&self) -> &'static str {
        match self.command {
            Command::Coordinator(_) => "cohort-coordinator",
            Command::Worker(_) => "cohort-worker",
            Command::JudgeProxy(_) => "cohort-judge-proxy",
            _ => "cohort",
        }
    }

    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Coordinator(_) | Command::Worker(_) | Command::JudgeProxy(_) => "info",
            _ => "warn",
        }
    }
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Init { dir, template } => init::run(&dir, template),
        Command::Freeze { dir, amend, reason, show } => freeze::run(&dir, amend.zip(reason), show),
        Command::Run(args) => run::run(args),
        Command::Coordinator(args) => roles::coordinator(args),
        Command::Seed(args) => roles::seed(args),
        Command::Worker(args) => roles::worker(args),
        Command::Pending(args) => manual::pending(args),
        Command::Submit(args) => manual::submit(*args),
        Command::Status(args) => operate::status(args),
        Command::Pause(args) => operate::pause(args),
        Command::Resume(args) => operate::resume(args),
        Command::Abort(args) => operate::abort(args),
        Command::Ledger(args) => ledger::run(args),
        Command::Score(args) => score::run(args),
        Command::JudgeProxy(args) => judge_proxy::run(args),
        Command::Report(args) => report::run(args),
        Command::Verify(args) => report::verify(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Review { command: ReviewCommand::Agreement(args) } => calibrate::review_agreement(args),
        Command::Review { command: ReviewCommand::Export(args) } => review::export(args),
        Command::Review { command: ReviewCommand::Import(args) } => review::import(args),
        Command::Review { command: ReviewCommand::Sheet(args) } => review::sheet(args),
        Command::Judge(args) => judge::run(args),
        Command::Passes(args) => judge::passes_command(args),
    }
}

/// Writes a command's output to stdout. A closed pipe (`cohort ... | head`)
/// ends the output quietly instead of panicking.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}
