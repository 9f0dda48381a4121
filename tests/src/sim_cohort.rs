//! The sim cohort the judging tests and the judge benchmark collect and
//! judge (one `sim` arm answering science questions, a `mock` judge), and
//! the judge file that points `cohort run` / `cohort judge` at a proxy.
//! One writer, so the judging tests, `scoring_e2e` and `cargo bench -p
//! cohort-cli --bench judge` measure the same cohort shape.

use std::fs;
use std::io;
use std::path::Path;

/// A cohort of `questions` science questions (`q1`..`qN`, "What is known
/// about topic N?") for one sim arm whose answers leave 30% of claims
/// unsupported, judged by the mock provider's `judge_model`.
#[derive(Debug, Clone)]
pub struct SimCohort<'a> {
    pub name: &'a str,
    pub seed: u64,
    pub questions: usize,
    /// `window_hours`; the config's default when `None`.
    pub window_hours: Option<u32>,
    /// The sim arm's concurrency.
    pub concurrency: u32,
    pub judge_model: &'a str,
    /// The judge's `provider`: `mock` (the mock provider behind a proxy),
    /// or `sim` (the proxy's built-in SIMULATED judge).
    pub judge_provider: &'a str,
    /// The judge's `batch_size`; the config's default when `None`.
    pub batch_size: Option<u32>,
}

impl<'a> SimCohort<'a> {
    /// `name`, `seed`, `questions`; concurrency 4, judge `judge-1`, the
    /// window and batch size left to the config's defaults.
    pub fn new(name: &'a str, seed: u64, questions: usize) -> SimCohort<'a> {
        SimCohort {
            name,
            seed,
            questions,
            window_hours: None,
            concurrency: 4,
            judge_model: "judge-1",
            judge_provider: "mock",
            batch_size: None,
        }
    }

    /// Writes the five cohort files into `dir` (made when missing).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        let qs: Vec<String> = (1..=self.questions)
            .map(|i| format!(r#"{{"id": "q{i}", "category": "science", "text": "What is known about topic {i}?"}}"#))
            .collect();
        fs::write(dir.join("questions.json"), format!("[\n{}\n]\n", qs.join(",\n")))?;
        let mut toml = format!(
            "name = \"{}\"\nseed = {}\nrun_timeout_secs = 30\ncategories = [\"science\"]\n",
            self.name, self.seed
        );
        if let Some(hours) = self.window_hours {
            toml.push_str(&format!("window_hours = {hours}\n"));
        }
        toml.push_str(&format!(
            "\n[[arms]]\nid = \"sim\"\nlabel = \"Sim\"\nadapter = \"sim\"\npinned_version = \"sim-1\"\nvendor_lineage = \"cohort-sim\"\n\
             concurrency = {}\nsettings = {{ unsupported_claim_rate = 0.3 }}\n\n\
             [judge]\nprovider = \"{}\"\nmodel = \"{}\"\nvendor_lineage = \"mock-judges\"\ntemperature = 0.0\n",
            self.concurrency, self.judge_provider, self.judge_model
        ));
        if let Some(batch) = self.batch_size {
            toml.push_str(&format!("batch_size = {batch}\n"));
        }
        fs::write(dir.join("cohort.toml"), toml)?;
        fs::write(dir.join("suffix.txt"), "Cite sources.\n")?;
        fs::write(dir.join("protocol.md"), "# P\n")?;
        fs::write(dir.join("rubric.md"), "# R\n")
    }
}

/// Writes a judge file at `path`: the proxy at `url`, its judge `j`, the
/// team key in the environment variable `key_env`, calls bounded by
/// `deadline_secs`.
pub fn write_judge_file(path: &Path, url: &str, key_env: &str, deadline_secs: u32) -> io::Result<()> {
    fs::write(
        path,
        format!("url = \"{url}\"\njudge = \"j\"\nkey_env = \"{key_env}\"\ndeadline_secs = {deadline_secs}\n"),
    )
}
