//! The pre-flight: pure checks over a validated cohort config and the
//! environment, run before anything is spent (before freezing, before the
//! ledger is opened, before any run is leased). It returns every problem at
//! once, so an operator fixes a cohort in one round.
//!
//! Two checks:
//! - [`Scope::Freeze`]: every arm's `settings` are valid for its adapter.
//!   Each arm is built through [`adapters::for_arm_with_env`], the adapters'
//!   own parsers, so the rules (unknown keys, the sim's rates in 0..=1, URLs
//!   without credentials) live in one place. The environment is not read:
//!   a cohort is frozen wherever it is written, and run where the keys are.
//! - [`Scope::Run`]: the same, plus every environment variable an arm's
//!   settings name (`api_key_env`, `${ENV:NAME}` headers of `http_json`) is
//!   set and non-empty, and an adapter not built in this version is
//!   refused. Which variables an arm reads is learnt by recording the
//!   names its parser asks for, never by a second reading of the settings.
//!
//! A `manual` arm is checked like any other: its settings through
//! `adapters::manual::ManualSettings` (it names no variable: a person runs
//! it, so `cohort run` has nothing of it to check in the environment).
//!
//! A key's value is never in a problem: the recording lookup hands the
//! parsers a placeholder, and the real lookup only says set or not.

use std::cell::RefCell;

use cohort_core::config::{ArmConfig, CohortConfig, FILE};
use cohort_core::error::Problem;

use crate::adapters::{self, AdapterError};

/// What the pre-flight is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `cohort freeze`: settings only; an adapter not built yet is a warning
    /// (the cohort may be frozen now and its arm run once it is built).
    Freeze,
    /// `cohort run`, `cohort coordinator`, `cohort worker`: settings, the
    /// adapters of this build, and the environment.
    Run,
}

/// What the pre-flight found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    /// What stops the command: nothing may be written.
    pub problems: Vec<Problem>,
    /// What the operator should know but does not stop it.
    pub warnings: Vec<Problem>,
}

/// The pre-flight failed: every problem, in arm order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.problems))]
pub struct PreflightError {
    pub problems: Vec<Problem>,
}

fn render(problems: &[Problem]) -> String {
    let n = problems.len();
    let mut out = format!(
        "pre-flight: the cohort cannot run ({n} problem{}); nothing was written:",
        if n == 1 { "" } else { "s" }
    );
    for p in problems {
        out.push_str("\n  ");
        out.push_str(&p.to_string());
    }
    out
}

impl Findings {
    /// `Err` when any problem stops the command.
    pub fn into_result(self) -> Result<Vec<Problem>, PreflightError> {
        if self.problems.is_empty() { Ok(self.warnings) } else { Err(PreflightError { problems: self.problems }) }
    }
}

/// The value the settings parsers get for every variable in the recording
/// pass: never a real key, so no key can reach a problem's text.
const PLACEHOLDER: &str = "cohort-preflight-placeholder";

/// Checks the arms of `config` (`text` is the `cohort.toml` it was parsed
/// from, for line numbers; `only` limits the arms, empty = all) against
/// `env` (the process environment in production, a map in tests).
pub fn check_arms(
    config: &CohortConfig,
    text: &str,
    scope: Scope,
    only: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Findings {
    let mut findings = Findings::default();
    for (i, arm) in config.arms.iter().enumerate() {
        if !only.is_empty() && !only.contains(&arm.id) {
            continue;
        }
        let place = ArmPlace::find(text, i);
        let asked = RefCell::new(Vec::<String>::new());
        let record = |var: &str| {
            asked.borrow_mut().push(var.to_owned());
            Some(PLACEHOLDER.to_owned())
        };
        match adapters::for_arm_with_env(arm, &record) {
            Ok(_) => {}
            Err(AdapterError::BadSetting { field, message, .. }) => {
                let field = if field == "*" { "settings".to_owned() } else { format!("settings.{field}") };
                findings.problems.push(place.problem(text, i, arm, &field, message));
            }
            Err(AdapterError::NotAvailable { kind, .. }) => {
                let message = format!("adapter `{kind}` is not available in this version of cohort");
                let p = place.problem(text, i, arm, "adapter", message);
                match scope {
                    Scope::Freeze => findings.warnings.push(p),
                    Scope::Run => findings.problems.push(p),
                }
            }
        }
        if scope == Scope::Run {
            let mut seen = Vec::new();
            for var in asked.into_inner() {
                if seen.contains(&var) {
                    continue;
                }
                let set = env(&var).is_some_and(|v| !v.trim().is_empty());
                if !set {
                    let field = setting_naming(arm, &var);
                    let message = format!(
                        "the environment variable {var} is not set or is empty: export it (the key itself never \
                         goes in cohort.toml) and run again"
                    );
                    findings.problems.push(place.problem(text, i, arm, &format!("settings.{field}"), message));
                }
                seen.push(var);
            }
        }
    }
    findings
}

/// Which setting names `var`: `api_key_env` when it is that, else the
/// `${ENV:NAME}` headers of `http_json`.
fn setting_naming(arm: &ArmConfig, var: &str) -> &'static str {
    match arm.settings.get("api_key_env").and_then(|v| v.as_str()) {
        Some(v) if v.trim() == var => "api_key_env",
        _ => "headers",
    }
}

/// Where arm `i` is in `cohort.toml`: the line range of its `[[arms]]`
/// table, when it is written as one (an inline `arms = [...]` has no lines
/// to name, and its problems name the field only).
struct ArmPlace {
    lines: Option<(usize, usize)>,
}

impl ArmPlace {
    fn find(text: &str, i: usize) -> ArmPlace {
        let lines: Vec<&str> = text.lines().collect();
        // An `[arms.settings]` sub-table belongs to the arm above it.
        let header = |l: &str| {
            let l = l.trim_start();
            l.starts_with('[') && !l.starts_with("[arms.settings")
        };
        let start = lines.iter().enumerate().filter(|(_, l)| l.trim() == "[[arms]]").nth(i).map(|(n, _)| n);
        ArmPlace {
            lines: start.map(|s| {
                let end = lines.iter().enumerate().skip(s + 1).find(|(_, l)| header(l)).map_or(lines.len(), |(n, _)| n);
                (s, end)
            }),
        }
    }

    /// The 1-based line of `key` in the arm's table (the first segment of a
    /// dotted field), else the table's header line.
    fn line(&self, text: &str, field: &str) -> Option<usize> {
        let (start, end) = self.lines?;
        let key = field.rsplit("settings.").next().unwrap_or(field).split('.').next().unwrap_or(field);
        let within = text.lines().enumerate().skip(start).take(end - start);
        let found = if field.starts_with("settings.") {
            // Settings may be inline (`settings = { ... }`) or their own
            // table further down: the line that names the key, else the
            // `settings` line.
            within
                .clone()
                .find(|(_, l)| l.contains(key) && l.contains('='))
                .or_else(|| within.clone().find(|(_, l)| l.trim_start().starts_with("settings")))
        } else {
            within.clone().find(|(_, l)| l.trim_start().starts_with(key))
        };
        Some(found.map_or(start, |(n, _)| n) + 1)
    }

    fn problem(&self, text: &str, i: usize, arm: &ArmConfig, field: &str, message: String) -> Problem {
        let mut p = Problem::in_file(FILE, format!("arm {:?}: {message}", arm.id)).field(format!("arms[{i}].{field}"));
        p.line = self.line(text, field);
        p
    }
}

/// Checks the judge file given to `--judge`: it parses and its key is
/// readable. The problem names the file; never the key.
pub fn check_judge_file(path: &std::path::Path) -> Option<Problem> {
    crate::score::JudgeEndpoint::from_file(path)
        .err()
        .map(|e| Problem::in_file(&path.display().to_string(), format!("--judge: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"name = "t"
seed = 1

[[arms]]
id = "a"
label = "A"
adapter = "sim"
pinned_version = "v1"
vendor_lineage = "x"
settings = { refusal_rate = 2.0 }

[[arms]]
id = "b"
label = "B"
adapter = "openai_chat"
pinned_version = "v1"
vendor_lineage = "y"
settings = { base_url = "https://api.example.com", model = "m", api_key_env = "B_KEY" }

[[arms]]
id = "c"
label = "C"
adapter = "manual"
pinned_version = "v1"
vendor_lineage = "z"
settings = { plan = "Pro" }
"#;

    fn config() -> CohortConfig {
        cohort_core::config::build_and_validate(TEXT).unwrap_or_else(|p| panic!("{p:?}"))
    }

    /// Proves freeze-scope checks: a bad setting is a problem with its
    /// line, and a valid manual arm passes (it is built in this version).
    #[test]
    fn freeze_scope_refuses_bad_settings_and_accepts_manual() {
        let f = check_arms(&config(), TEXT, Scope::Freeze, &[], &|_| None);
        assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
        let p = f.problems[0].to_string();
        assert!(p.contains("cohort.toml:10:") && p.contains("arms[0].settings.refusal_rate"), "{p}");
        assert!(p.contains("\"a\"") && p.contains("from 0 to 1"), "{p}");
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    }

    /// Proves a manual arm's settings go through its own parser: an
    /// unknown setting is refused at freeze and at run, naming it.
    #[test]
    fn manual_settings_are_checked() {
        let text = TEXT.replace("settings = { plan = \"Pro\" }", "settings = { plan = \"Pro\", mode = \"deep\" }");
        let config = cohort_core::config::build_and_validate(&text).unwrap_or_else(|p| panic!("{p:?}"));
        for scope in [Scope::Freeze, Scope::Run] {
            let f = check_arms(&config, &text, scope, &["c".to_owned()], &|_| None);
            assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
            let p = f.problems[0].to_string();
            assert!(p.contains("arms[2].settings.mode") && p.contains("unknown manual setting"), "{p}");
            assert!(p.contains("cohort.toml:26:"), "{p}");
        }
    }

    #[test]
    fn run_scope_names_missing_variables_and_never_a_value() {
        let f = check_arms(&config(), TEXT, Scope::Run, &[], &|_| None);
        let all: Vec<String> = f.problems.iter().map(ToString::to_string).collect();
        assert_eq!(all.len(), 2, "a manual arm needs no variable: {all:?}");
        assert!(all[1].contains("B_KEY") && all[1].contains("arms[1].settings.api_key_env"), "{all:?}");
        let set = check_arms(&config(), TEXT, Scope::Run, &["b".to_owned()], &|_| Some("sk-secret-123".into()));
        assert!(set.problems.is_empty(), "{:?}", set.problems);
        let empty = check_arms(&config(), TEXT, Scope::Run, &["b".to_owned()], &|_| Some("  ".into()));
        assert_eq!(empty.problems.len(), 1);
        assert!(!format!("{empty:?}").contains("sk-secret"));
    }
}
