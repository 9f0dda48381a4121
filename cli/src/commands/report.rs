//! `cohort report DIR` and `cohort verify REPORT_DIR`: the result side
//! (`cohort-report` does the work; this module parses and prints).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context as _;
use cohort_artifacts::ArtifactStore;
use cohort_core::manifest;
use cohort_report::{FrozenCohort, ReportError, ReportOptions};

use super::local::{self, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Bootstrap draws for the 95% intervals (seed 004: 10,000).
    #[arg(long, default_value_t = cohort_core::stats::DEFAULT_DRAWS, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    pub draws: u32,
    /// Where report folders go (default: DIR/reports).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The judging pass whose verdicts to count (docs/judging.md). Default:
    /// the `default` pass when it exists, else each run's recorded verdicts.
    #[arg(long, value_name = "NAME")]
    pub pass: Option<String>,
    /// Refuse (exit 2, nothing written) unless the report is final: every
    /// planned run final and, where the cohort declares a human review,
    /// that review imported from two reviewers and adjudicated.
    #[arg(long = "final")]
    pub final_only: bool,
    /// Leave out outputs and captured text (docs/report.md, "Redacted").
    #[arg(long)]
    pub redact: bool,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The report folder (DIR/reports/<timestamp>).
    pub report: PathBuf,
    /// The cohort directory (default: the report folder's grandparent).
    #[arg(long)]
    pub cohort: Option<PathBuf>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The exit code of `cohort verify` when the report differs from what the
/// ledger and records give.
pub const EXIT_DIFFERS: u8 = 1;
/// The exit code of `cohort verify` when it could not verify at all.
pub const EXIT_CANNOT_VERIFY: u8 = 2;

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let how = How { final_only: args.final_only, redact: args.redact };
    let written =
        runtime.block_on(report_with(&args.dir, &args.store, args.draws, args.out.clone(), args.pass.as_deref(), how));
    let written = match written {
        Ok(written) => written,
        Err(e) => match e.downcast_ref::<ReportError>() {
            // --final on a preliminary cohort: refused, naming what is missing.
            Some(ReportError::NotFinal { .. }) => return Err(super::refuse(e)),
            _ => return Err(e),
        },
    };
    super::emit(&format!("{}\nreport: {}\n", headline(&written.summary), written.path.display()));
    Ok(())
}

/// How `cohort report` writes, beyond what `cohort run`'s report does.
#[derive(Debug, Clone, Copy, Default)]
struct How {
    final_only: bool,
    redact: bool,
}

/// Writes a report of the cohort in `dir` (also the last step of `cohort
/// run`).
pub async fn report(
    dir: &Path,
    store: &StoreArgs,
    draws: u32,
    out: Option<PathBuf>,
    pass: Option<&str>,
) -> anyhow::Result<cohort_report::ReportWritten> {
    report_with(dir, store, draws, out, pass, How::default()).await
}

async fn report_with(
    dir: &Path,
    store: &StoreArgs,
    draws: u32,
    out: Option<PathBuf>,
    pass: Option<&str>,
    how: How,
) -> anyhow::Result<cohort_report::ReportWritten> {
    let (frozen, ledger, artifacts) = open(dir, store).await?;
    let manifest_bytes = std::fs::read(dir.join(manifest::FILE))
        .with_context(|| format!("cannot read {}", dir.join(manifest::FILE).display()))?;
    let options = ReportOptions {
        draws,
        now: SystemTime::now(),
        reports_root: out.unwrap_or_else(|| dir.join(cohort_report::write::REPORTS_DIR)),
        pass: cohort_report::write::resolve_pass(dir, pass)?,
        require_final: how.final_only,
        redact: how.redact,
    };
    Ok(cohort_report::write_report(&frozen, &manifest_bytes, &ledger, &artifacts, &options).await?)
}

/// What a report is computed from: the frozen cohort with its imported
/// review, its ledger and its artifact store.
async fn open(
    dir: &Path,
    store: &StoreArgs,
) -> anyhow::Result<(FrozenCohort, std::sync::Arc<dyn cohort_ledger::Ledger>, ArtifactStore)> {
    let frozen = local::load(dir)?;
    let ledger = local::open_ledger(&frozen, store).await?;
    let artifacts = local::artifact_store(&frozen, store)?;
    let frozen = FrozenCohort {
        review: cohort_report::review::load(dir)?,
        review_declared: cohort_report::review::declared(dir),
        cohort: frozen.cohort,
        manifest: frozen.manifest,
        manifest_sha256: frozen.manifest_sha256,
    };
    Ok((frozen, ledger, artifacts))
}

/// One line per arm: the numbers a reader looks for first.
pub fn headline(s: &cohort_report::model::Summary) -> String {
    use cohort_report::model::RateKind;
    let mut out = format!("{}\n", s.publication_state.line());
    for arm in &s.arms {
        let (support, resolution) = (&arm.rates[RateKind::SupportMicro], &arm.rates[RateKind::ResolutionMicro]);
        out.push_str(&format!(
            "{:<24} completed {}/{}  support {} ({}) {}  resolution {} ({})\n",
            cohort_report::model::arm_display(&arm.id, arm.simulated),
            arm.counts.completed,
            arm.counts.planned,
            support.display_value(),
            support.display_fraction(),
            support.display_interval(),
            resolution.display_value(),
            resolution.display_fraction(),
        ));
    }
    for c in &s.comparisons {
        if let Some(support) = c.differences.get(RateKind::SupportMicro) {
            out.push_str(&format!(
                "{} vs {} ({} completed pairs): {}\n",
                c.a, c.b, c.completed_pairs, support.statement
            ));
        }
    }
    if s.simulated.judge || !s.simulated.arms.is_empty() {
        out.push_str(
            "SIMULATED: built-in simulated arms or judge; these numbers measure cohort's pipeline, not a product.\n",
        );
    }
    out
}

pub fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    // Said before anything else: the cohort is found from the report folder.
    if !args.report.join("summary.json").is_file() {
        eprintln!(
            "error: {} is not a report folder (it has no summary.json): pass a folder `cohort report` wrote, \
             DIR/reports/<timestamp>",
            args.report.display()
        );
        return Err(super::Exit(EXIT_CANNOT_VERIFY).into());
    }
    let cohort_dir = match &args.cohort {
        Some(dir) => dir.clone(),
        None => args
            .report
            .parent()
            .and_then(Path::parent)
            .map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d })
            .map(Path::to_owned)
            .ok_or_else(|| anyhow::anyhow!("cannot tell the cohort of {}: pass --cohort DIR", args.report.display()))?,
    };
    let runtime = super::runtime()?;
    let outcome = runtime.block_on(async {
        let (frozen, ledger, artifacts) = open(&cohort_dir, &args.store).await?;
        match cohort_report::verify_report(&args.report, &cohort_dir, &frozen, &ledger, &artifacts).await {
            Ok(outcome) => Ok(outcome),
            // A tampered record is a finding of verification, not a failure
            // to verify.
            Err(e @ ReportError::CorruptRecord { .. }) => {
                Ok(cohort_report::VerifyOutcome { differences: vec![e.to_string()], ..Default::default() })
            }
            Err(e) => Err(anyhow::Error::new(e)),
        }
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: could not verify {}: {e:#}", args.report.display());
            return Err(super::Exit(EXIT_CANNOT_VERIFY).into());
        }
    };
    if outcome.ok() {
        super::emit(&format!(
            "verified: {} numbers and {} files of {} agree with the ledger and the records\n",
            outcome.numbers_checked,
            outcome.files_checked,
            args.report.display()
        ));
        return Ok(());
    }
    let mut text = format!("{} difference(s) in {}:\n", outcome.differences.len(), args.report.display());
    for d in &outcome.differences {
        text.push_str(&format!("  {d}\n"));
    }
    super::emit(&text);
    Err(super::Exit(EXIT_DIFFERS).into())
}
