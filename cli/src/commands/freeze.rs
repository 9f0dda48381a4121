//! `cohort freeze DIR [--amend NEW_NAME --reason TEXT]`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use cohort_coordinator::freeze::{AmendRequest, FreezeOptions, FreezeReport, freeze};
use cohort_core::manifest::Manifest;

use super::emit;

pub fn run(dir: &Path, amend: Option<(String, String)>, show: usize) -> anyhow::Result<()> {
    // Settings the adapters would refuse at run time are refused now: the
    // manifest is write-once, so a frozen cohort must be able to run.
    let warnings = super::local::preflight(dir, cohort_worker::preflight::Scope::Freeze, &[], None)?;
    let options = FreezeOptions {
        now: SystemTime::now(),
        amend: amend.map(|(new_name, reason)| AmendRequest { new_name, reason }),
    };
    let mut out = String::new();
    match freeze(dir, &options)? {
        FreezeReport::Frozen { manifest, path } => {
            let _ = writeln!(out, "froze cohort \"{}\": {}", manifest.cohort, path.display());
            print_manifest(&mut out, &manifest, show);
        }
        FreezeReport::Verified { manifest, path } => {
            let _ = writeln!(
                out,
                "cohort \"{}\" is frozen and unchanged: {} verified, nothing written",
                manifest.cohort,
                path.display()
            );
            if manifest.is_legacy() {
                let _ = writeln!(
                    out,
                    "  legacy manifest (version 1, no self-hash): every field the cohort files derive was derived \
                     again and agrees; frozen_at, tool_version and the amendment log cannot be checked"
                );
            }
            print_manifest(&mut out, &manifest, show);
        }
        FreezeReport::Amended { manifest, dir: new_dir, restored } => {
            let _ = writeln!(
                out,
                "amended cohort \"{}\" into new cohort \"{}\": {}",
                manifest.amendments.last().map_or("", |a| a.from_cohort.as_str()),
                manifest.cohort,
                new_dir.display()
            );
            if let Some(a) = manifest.amendments.last() {
                for change in &a.changes {
                    let _ = writeln!(
                        out,
                        "  changed {}: {} -> {}",
                        change.file,
                        change.old_sha256,
                        change.new_sha256.as_deref().unwrap_or("(missing)")
                    );
                }
            }
            if restored {
                let _ = writeln!(out, "{} was put back as it was frozen; its manifest was not touched", dir.display());
            } else {
                let _ = writeln!(
                    out,
                    "{} keeps the changed files (its frozen originals were not in its artifact store)",
                    dir.display()
                );
            }
            print_manifest(&mut out, &manifest, show);
        }
    }
    emit(&out);
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// The manifest's head: hashes, counts and the first runs of the order.
pub fn print_manifest(out: &mut String, m: &Manifest, show: usize) {
    let _ = writeln!(out, "  frozen_at        {}", m.frozen_at);
    let _ = writeln!(out, "  seed             {}", m.seed);
    for (file, sha) in &m.files {
        let _ = writeln!(out, "  {file:<16} {sha}");
    }
    let _ = writeln!(out, "  config_sha256    {}", m.config_sha256);
    let _ = writeln!(out, "  order_sha256     {}", m.order_sha256);
    let _ = writeln!(out, "  runs             {} ({})", m.run_count, m.order_algorithm);
    if show > 0 && !m.order.is_empty() {
        let shown: Vec<&str> = m.order.iter().take(show).map(String::as_str).collect();
        let more = m.order.len().saturating_sub(shown.len());
        let _ = writeln!(
            out,
            "  order            {}{}",
            shown.join(", "),
            if more > 0 { format!(", ... ({more} more)") } else { String::new() }
        );
    }
}
