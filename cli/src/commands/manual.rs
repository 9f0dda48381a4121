//! `cohort pending` and `cohort submit`: the manual arm, where a person
//! runs the product in its own UI (docs/manual.md). The stage is
//! `cohort_serve::manual` (leases to the person, the submission checked,
//! recorded and finished as a worker's result); this module holds the
//! flags and what is printed.

use std::path::{Path, PathBuf};

use cohort_serve::manual::{self, ArmListing, ArmPaused, ManualError, SubmitRequest};

use super::local::{self, ScoringArgs, StoreArgs};
use super::refuse;

#[derive(Debug, clap::Args)]
pub struct PendingArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// Only this manual arm (default: every manual arm).
    #[arg(long)]
    pub arm: Option<String>,
    /// Also write each open run's prompt to DIR2/<run id>.prompt.txt, the
    /// run id's `:` written as `+` (q3:realityengine:1 ->
    /// q3+realityengine+1.prompt.txt).
    #[arg(long, value_name = "DIR2")]
    pub write: Option<PathBuf>,
    /// Print the open runs as JSON instead.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The cohort directory.
    pub dir: PathBuf,
    /// The run, as `cohort pending` names it (question:arm:repeat).
    pub run_id: String,
    /// The product's complete output, as UTF-8 text.
    pub output_file: PathBuf,
    /// When the person started the run (RFC 3339 UTC, e.g.
    /// 2026-12-01T10:00:00Z; default: when it was offered).
    #[arg(long, value_name = "ISO")]
    pub started: Option<String>,
    /// When the product finished (RFC 3339 UTC; default: now).
    #[arg(long, value_name = "ISO")]
    pub ended: Option<String>,
    /// A file holding the clarifying question the product asked; the reply
    /// recorded is the suffix, the only reply allowed (seed 004).
    #[arg(long, value_name = "FILE")]
    pub clarification: Option<PathBuf>,
    /// The model/version label the product showed (default: "not
    /// disclosed"). A label the arm does not accept pauses it.
    #[arg(long, value_name = "LABEL")]
    pub version: Option<String>,
    /// The product refused: record a `refused` run with this reason (the
    /// output file holds what it said; it may be empty).
    #[arg(long, value_name = "REASON", conflicts_with = "failed")]
    pub refused: Option<String>,
    /// The product failed: record a `failed` run with this reason.
    #[arg(long, value_name = "REASON")]
    pub failed: Option<String>,
    /// The subscription plan used (default: the arm's `settings.plan`).
    #[arg(long)]
    pub plan: Option<String>,
    /// The region the product was used from (default: `settings.region`).
    #[arg(long)]
    pub region: Option<String>,
    /// The credits the product debited, as it shows them.
    #[arg(long, value_name = "N")]
    pub credits: Option<String>,
    /// Input tokens, when the vendor disclosed them.
    #[arg(long, value_name = "N", requires = "usage_output_tokens")]
    pub usage_input_tokens: Option<u64>,
    /// Output tokens, when the vendor disclosed them.
    #[arg(long, value_name = "N", requires = "usage_input_tokens")]
    pub usage_output_tokens: Option<u64>,
    /// A product setting used for the run (repeatable): mode=deep.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub scoring: ScoringArgs,
    /// The judging pass verdicts go into when `--judge` is given.
    #[arg(long, value_name = "NAME", default_value = cohort_worker::passes::DEFAULT_PASS)]
    pub pass: String,
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, ManualError>>) -> anyhow::Result<T> {
    let result = tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f);
    result.map_err(|e| match e {
        ManualError::Refused(message) => refuse(message),
        other => other.into(),
    })
}

pub fn pending(args: PendingArgs) -> anyhow::Result<()> {
    let frozen = local::load(&args.dir)?;
    let store = args.store.config();
    let listings = block_on(manual::pending(&frozen, &store, args.arm.as_deref(), args.write.as_deref()))?;
    if args.json {
        super::emit(&format!("{}\n", serde_json::to_string_pretty(&serde_json::json!({ "arms": listings }))?));
    } else {
        super::emit(&render_pending(&args.dir, &listings));
    }
    Ok(())
}

fn render_pending(dir: &Path, listings: &[ArmListing]) -> String {
    let mut out = String::new();
    for l in listings {
        out.push_str(&format!(
            "arm {} ({}): {} open, {} waiting, {} of {} finished (cap {})\n",
            l.arm,
            l.label,
            l.open.len(),
            l.waiting,
            l.finished,
            l.planned,
            l.concurrency
        ));
        if let Some(instructions) = &l.instructions {
            out.push_str(&format!("instructions: {instructions}\n"));
        }
        if l.open.is_empty() {
            out.push_str(&format!("nothing due: {}\n", l.note.as_deref().unwrap_or("no run of the arm is pending")));
        }
        for run in &l.open {
            out.push_str(&format!(
                "\n--- run {}  question {}  attempt {}  offered {}  open until {}\n",
                run.run_id, run.question_id, run.attempt, run.offered_at, run.open_until
            ));
            if let Some(file) = &run.prompt_file {
                out.push_str(&format!("prompt written to {file}\n"));
            }
            out.push_str("--- prompt (paste exactly, between the lines):\n");
            out.push_str(&run.prompt);
            out.push_str("\n--- end of prompt\n");
            out.push_str(&format!(
                "submit: cohort submit {} {} OUTPUT_FILE [--started ISO --ended ISO] [--clarification FILE] [--version LABEL]\n",
                dir.display(),
                run.run_id
            ));
        }
        if !l.open.is_empty()
            && let Some(note) = &l.note
        {
            out.push_str(&format!("\nmore runs wait: {note}\n"));
        }
        out.push('\n');
    }
    out
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let frozen = local::load(&args.dir)?;
    let request = SubmitRequest {
        run_id: args.run_id.clone(),
        output_file: args.output_file.clone(),
        started: args.started.clone(),
        ended: args.ended.clone(),
        clarification: args.clarification.clone(),
        version: args.version.clone(),
        refused: args.refused.clone(),
        failed: args.failed.clone(),
        plan: args.plan.clone(),
        region: args.region.clone(),
        credits: args.credits.clone(),
        usage_input_tokens: args.usage_input_tokens,
        usage_output_tokens: args.usage_output_tokens,
        settings: args.settings.clone(),
        pass: args.pass.clone(),
    };
    let done = block_on(manual::submit(&frozen, &args.store.config(), &args.scoring.config(), &request))?;
    let sha = &done.record_sha256;
    let mut out = format!(
        "recorded {}: {}{}, version {}, record {}\n",
        args.run_id,
        done.outcome,
        if done.reason.is_empty() { String::new() } else { format!(" ({})", done.reason) },
        done.observed_version.as_deref().unwrap_or(cohort_worker::record::NOT_DISCLOSED),
        &sha[..12.min(sha.len())]
    );
    if let Some(ArmPaused { reason, by_this_run: true }) = &done.paused {
        out.push_str(&format!("arm {} is PAUSED: {reason}\n", done.arm));
    }
    if !done.judged && done.outcome == cohort_core::taxonomy::Outcome::Completed {
        out.push_str(&format!(
            "claims and deterministic metrics are recorded; support is unmeasured until `cohort judge {} --judge \
             FILE{}`{}\n",
            args.dir.display(),
            if done.captured { "" } else { " --capture" },
            if done.captured { "" } else { " (its cited sources were not fetched)" }
        ));
    }
    out.push_str(&next_hint(&args.dir, &done.arm, done.paused.as_ref(), done.observed_version.as_deref()));
    super::emit(&out);
    Ok(())
}

/// The last line `cohort submit` prints: the next due run, or, when the
/// arm is paused (`cohort pending` then offers none of its runs), how to
/// resume it, with the label this run reported to accept when it paused
/// the arm.
fn next_hint(dir: &Path, arm: &str, paused: Option<&ArmPaused>, observed: Option<&str>) -> String {
    let dir = dir.display();
    match paused {
        None => format!("next: `cohort pending {dir}` offers the next due run\n"),
        Some(ArmPaused { by_this_run: true, .. }) => format!(
            "next: arm {arm} is paused: `cohort pending {dir}` offers none of its runs until it is resumed. Check \
             the product's release notes, then accept the new label: `cohort resume {dir} --arm {arm} --ack TEXT \
             --accept-version {}`\n",
            shell_quoted(observed.unwrap_or("LABEL"))
        ),
        Some(ArmPaused { reason, by_this_run: false }) => format!(
            "next: arm {arm} is paused ({reason}): `cohort pending {dir}` offers none of its runs until `cohort \
             resume {dir} --arm {arm} --ack TEXT [--accept-version LABEL]`\n"
        ),
    }
}

/// `text` as one shell word: as it is when it is plain, else in single
/// quotes (a `'` inside written `'\''`), so a printed command can be
/// pasted as it stands.
fn shell_quoted(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'+' | b'='));
    if plain { text.to_owned() } else { format!("'{}'", text.replace('\'', "'\\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the submit's last line: the next due run when the arm is not
    /// paused; when the submission paused it, that it is paused and the
    /// resume command with the cohort's real path and the reported label,
    /// quoted for the shell; when it was paused already, why and how to
    /// resume.
    #[test]
    fn next_hint_after_a_pause_says_how_to_resume() {
        let dir = Path::new("/tmp/my cohorts/p");
        assert_eq!(
            next_hint(dir, "m", None, Some("v1")),
            "next: `cohort pending /tmp/my cohorts/p` offers the next due run\n"
        );
        let paused = ArmPaused { reason: "version changed".into(), by_this_run: true };
        let hint = next_hint(dir, "m", Some(&paused), Some("deep-scan 2026.12 (engine 8)"));
        assert!(hint.starts_with("next: arm m is paused: `cohort pending /tmp/my cohorts/p` offers none"), "{hint}");
        assert!(
            hint.ends_with(
                "`cohort resume /tmp/my cohorts/p --arm m --ack TEXT --accept-version 'deep-scan 2026.12 (engine 8)'`\n"
            ),
            "{hint}"
        );
        assert!(!hint.contains("offers the next due run"), "{hint}");
        let before = ArmPaused { reason: "held by the operator".into(), by_this_run: false };
        let hint = next_hint(dir, "m", Some(&before), None);
        assert!(
            hint.contains("arm m is paused (held by the operator)")
                && hint.contains("cohort resume /tmp/my cohorts/p --arm m"),
            "{hint}"
        );
    }

    /// Proves labels become one shell word: plain ones as they are, others
    /// single-quoted with a `'` inside closed, escaped and reopened.
    #[test]
    fn shell_quoted_labels_paste_as_one_word() {
        assert_eq!(shell_quoted("o3-deep-research-2025-06-26"), "o3-deep-research-2025-06-26");
        assert_eq!(shell_quoted("engine 7"), "'engine 7'");
        assert_eq!(shell_quoted("it's $HOME"), "'it'\\''s $HOME'");
        assert_eq!(shell_quoted(""), "''");
    }
}
