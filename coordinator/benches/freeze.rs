#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Benchmark: freeze a 1,000,000-run cohort (100,000 questions x 10 arms)
//! through the same `freeze` the CLI calls, and print wall time and peak
//! memory. Not a timed test: it prints figures, it asserts no speed.
//!
//!     cargo bench -p cohort-coordinator --bench freeze
//!
//! Peak memory is the process's high-water RSS (VmHWM), reset just before
//! the freeze (`/proc/self/clear_refs` 5) so generating the input does not
//! count. Target on the 2-core reference machine: < 5 s and < 500 MiB.

use std::fmt::Write as _;
use std::fs;
use std::time::{Instant, SystemTime};

use cohort_coordinator::freeze::{FreezeOptions, FreezeReport, freeze};

const QUESTIONS: usize = 100_000;
const ARMS: usize = 10;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_cohort(dir.path());
    let input_bytes: u64 =
        fs::read_dir(dir.path()).expect("dir").filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();

    let reset = fs::write("/proc/self/clear_refs", "5").is_ok();
    let rss_before = status_kib("VmRSS");
    let start = Instant::now();
    let report = freeze(dir.path(), &FreezeOptions { now: SystemTime::now(), amend: None }).expect("freeze");
    let elapsed = start.elapsed();
    let peak = status_kib("VmHWM");
    let FreezeReport::Frozen { manifest, path } = report else { panic!("expected a fresh freeze") };
    let manifest_bytes = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);

    println!("freeze benchmark: {QUESTIONS} questions x {ARMS} arms = {} runs", manifest.run_count);
    println!("  input files        {:.1} MiB", input_bytes as f64 / 1048576.0);
    println!("  manifest.json      {:.1} MiB", manifest_bytes as f64 / 1048576.0);
    println!("  wall time          {:.3} s   (target < 5 s)", elapsed.as_secs_f64());
    match (reset, peak) {
        (true, Some(peak)) => println!(
            "  peak RSS           {:.1} MiB (target < 500 MiB; RSS before freeze {:.1} MiB)",
            peak as f64 / 1024.0,
            rss_before.unwrap_or(0) as f64 / 1024.0
        ),
        _ => println!("  peak RSS           unavailable (needs Linux /proc/self/clear_refs)"),
    }

    // Verifying the frozen cohort again is the other half of the cost.
    let start = Instant::now();
    freeze(dir.path(), &FreezeOptions { now: SystemTime::now(), amend: None }).expect("verify");
    println!("  verify again       {:.3} s", start.elapsed().as_secs_f64());
}

fn write_cohort(dir: &std::path::Path) {
    let mut toml = String::from("name = \"bench\"\nseed = 12345\n");
    for a in 0..ARMS {
        let _ = write!(
            toml,
            "\n[[arms]]\nid = \"arm-{a}\"\nlabel = \"Arm {a}\"\nadapter = \"sim\"\npinned_version = \"v1\"\nvendor_lineage = \"lineage-{a}\"\n"
        );
    }
    let categories = ["science", "technology", "history", "disputed", "insufficient"];
    let mut questions = String::from("[\n");
    for q in 0..QUESTIONS {
        let sep = if q + 1 == QUESTIONS { "" } else { "," };
        let _ = writeln!(
            questions,
            "  {{\"id\": \"q-{q:06}\", \"category\": \"{}\", \"text\": \"What evidence supports claim number {q}, and what remains uncertain?\"}}{sep}",
            categories[q % categories.len()]
        );
    }
    questions.push_str("]\n");
    fs::write(dir.join("cohort.toml"), toml).expect("write");
    fs::write(dir.join("questions.json"), questions).expect("write");
    fs::write(dir.join("suffix.txt"), "Cite original sources.\n").expect("write");
    fs::write(dir.join("protocol.md"), "# Protocol\n").expect("write");
    fs::write(dir.join("rubric.md"), "# Rubric\n").expect("write");
}

/// A `/proc/self/status` field in KiB.
fn status_kib(field: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
