//! `cohort review export`, `import` and `sheet` (seed 004, human review;
//! docs/review.md). `cohort-report`'s `review` module does the
//! work; this module parses, shows progress and prints.

use std::path::PathBuf;
use std::time::SystemTime;

use cohort_report::review::{ReviewError, export, import, label_studio, sheet};

use super::local::{self, StoreArgs};

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// The reviewers' ids, comma-separated (at least two: seed 004 has two
    /// independent reviewers). Each gets a folder with items.csv and
    /// items.jsonl.
    #[arg(long, value_delimiter = ',', required_unless_present = "extraction_checker")]
    pub reviewers: Vec<String>,
    /// First, the extraction check by this person (not a scorer):
    /// FOLDER/<ID>/check.csv (docs/review.md "The extraction check").
    #[arg(long, value_name = "ID", conflicts_with_all = ["reviewers", "format"])]
    pub extraction_checker: Option<String>,
    /// The export folder (default: DIR/review/<UTC timestamp>); written
    /// once, refused when it exists.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// label-studio: also a Label Studio project (label_config.xml,
    /// tasks.json) in FOLDER/label-studio, from the same blinded items.
    #[arg(long, default_value = "csv", value_parser = ["csv", "label-studio"])]
    pub format: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// Reviewers' filled items.csv / items.jsonl (the reviewer id is in
    /// the file) and the adjudication file (item_id, final_label, reason,
    /// rationale, adjudicator). All are checked before any is kept.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// label-studio: FILES are Label Studio JSON exports of the project.
    #[arg(long, default_value = "csv", value_parser = ["csv", "label-studio"])]
    pub format: String,
    /// Label Studio annotator (email or user id) to reviewer; default: the
    /// reviewer named by the email's local part.
    #[arg(long, value_delimiter = ',', value_name = "ANNOTATOR=REVIEWER")]
    pub reviewer_map: Vec<String>,
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let frozen = local::load(&args.dir)?;
    let runtime = super::runtime()?;
    let ledger = runtime.block_on(local::open_ledger(&frozen, &args.store))?;
    let artifacts = local::artifact_store(&frozen, &args.store)?;
    let style = indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} outputs");
    let bar =
        indicatif::ProgressBar::new(0).with_style(style.unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    bar.set_message("reading outputs");
    let (reviewers, out, now) = (args.reviewers.clone(), args.out.clone(), SystemTime::now());
    let (label_studio, extraction_checker) = (args.format == "label-studio", args.extraction_checker.clone());
    let options = export::ExportOptions { reviewers, out, now, label_studio, extraction_checker };
    let progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let result = runtime.block_on(export::export(
        &args.dir,
        &frozen.cohort,
        &frozen.manifest_sha256,
        &ledger,
        &artifacts,
        &options,
        &progress,
    ));
    bar.finish_and_clear();
    super::emit(&refused_or(result)?.describe(&args.dir));
    Ok(())
}

pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    let imported = match args.format.as_str() {
        "label-studio" => label_studio::import(&args.dir, &args.files, &args.reviewer_map),
        _ => import::import(&args.dir, &args.files),
    };
    super::emit(&refused_or(imported)?.describe(&args.dir));
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct SheetArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// The exported reviewer whose sheet to write.
    #[arg(long, required_unless_present = "adjudicate", conflicts_with = "adjudicate")]
    pub reviewer: Option<String>,
    /// The adjudication sheet: the disagreements of both imported reviews.
    #[arg(long)]
    pub adjudicate: bool,
    /// The file (default: in the export folder); written once.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn sheet(args: SheetArgs) -> anyhow::Result<()> {
    let options = sheet::SheetOptions { reviewer: args.reviewer, adjudicate: args.adjudicate, out: args.out };
    super::emit(&refused_or(sheet::write_sheet(&args.dir, &options))?.describe());
    Ok(())
}

/// Prints a refusal or bad input and exits [`super::EXIT_REFUSED`].
fn refused_or<T>(result: Result<T, ReviewError>) -> anyhow::Result<T> {
    match result {
        Ok(v) => Ok(v),
        Err(e @ (ReviewError::BadInput { .. } | ReviewError::BadFile { .. } | ReviewError::Refused(_))) => {
            Err(super::refuse(format_args!("{e}; nothing was written")))
        }
        Err(e) => Err(e.into()),
    }
}
