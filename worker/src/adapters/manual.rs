//! The `manual` adapter: a person runs the product in its own UI (seed
//! 004's RealityEngine arm has no API). `cohort pending` leases the arm's
//! due runs to the person and shows each exact prompt; `cohort submit`
//! hands back what the product showed. This module holds the arm's
//! settings ([`ManualSettings`]) and the one conversion of a person's
//! submission ([`Submission`]) into the [`Answer`] that
//! `execute::record_answer` classifies, scores and records exactly as it
//! does an adapter's reply, so a manual run's record has the same fields,
//! rules and scoring as any other (docs/manual.md).
//!
//! A worker never calls this adapter: the ledger grants a manual arm's
//! runs only to a `LeaseScope::Manual` lease. Should one reach a worker
//! anyway, [`ManualAdapter::call`] answers with a retryable outage, so the
//! run goes back to the queue for the person instead of becoming final.

use async_trait::async_trait;
use cohort_core::config::ArmConfig;
use cohort_core::taxonomy::AttemptClass;

use super::settings::Settings;
use super::{Adapter, AdapterError, AdapterRequest, AdapterResponse, Reply, TokenUsage, Turn};
use crate::execute::{Answer, SYSTEM, USER};
use crate::record::ManualRun;

/// The largest output accepted by default (bytes): a long deep-research
/// report is some hundred kilobytes; more is almost surely the wrong file.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 2 * 1024 * 1024;

/// The largest `max_output_bytes` an arm may set.
pub const MAX_OUTPUT_BYTES_LIMIT: u64 = 64 * 1024 * 1024;

/// The largest clarifying question accepted (bytes).
pub const MAX_CLARIFICATION_BYTES: usize = 64 * 1024;

/// The lease holder of arm `arm`'s manual runs: the person, as the ledger
/// and every attempt record name them.
pub fn holder(arm: &str) -> String {
    format!("manual:{arm}")
}

/// A manual arm's `settings`: what the person is told and the frozen
/// defaults of the run metadata seed 004 asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualSettings {
    /// Shown with every prompt by `cohort pending` (which mode to choose,
    /// where to paste); frozen, so every run gets the same instructions.
    pub instructions: Option<String>,
    /// The subscription plan the arm is run on, recorded in each run
    /// unless `cohort submit --plan` says otherwise.
    pub plan: Option<String>,
    /// The region the product is used from, likewise (`--region`).
    pub region: Option<String>,
    /// The largest output `cohort submit` accepts, in bytes.
    pub max_output_bytes: u64,
}

impl ManualSettings {
    const KNOWN: [&'static str; 4] = ["instructions", "plan", "region", "max_output_bytes"];

    /// The settings of a manual arm; refuses unknown settings and bad values.
    pub fn from_arm(arm: &ArmConfig) -> Result<ManualSettings, AdapterError> {
        let s = Settings::new(arm, "manual", &Self::KNOWN)?;
        let max_output_bytes = match s.whole("max_output_bytes")? {
            None => DEFAULT_MAX_OUTPUT_BYTES,
            Some(n) if (1..=MAX_OUTPUT_BYTES_LIMIT).contains(&n) => n,
            Some(n) => {
                return Err(s.bad("max_output_bytes", format!("must be from 1 to {MAX_OUTPUT_BYTES_LIMIT}, got {n}")));
            }
        };
        Ok(ManualSettings {
            instructions: s.string("instructions")?,
            plan: s.string("plan")?,
            region: s.string("region")?,
            max_output_bytes,
        })
    }
}

/// The adapter of a manual arm. It exists so that every arm builds (the
/// pre-flight checks its settings through [`ManualSettings::from_arm`]);
/// it is never called in a correct deployment.
#[derive(Debug, Clone)]
pub struct ManualAdapter {
    pub settings: ManualSettings,
}

impl ManualAdapter {
    pub fn from_arm(arm: &ArmConfig) -> Result<ManualAdapter, AdapterError> {
        Ok(ManualAdapter { settings: ManualSettings::from_arm(arm)? })
    }
}

#[async_trait]
impl Adapter for ManualAdapter {
    async fn call(&self, _request: &AdapterRequest) -> AdapterResponse {
        AdapterResponse::nothing(
            AttemptClass::ConnectionError,
            0,
            "a manual arm's runs are carried out by a person (`cohort pending`, `cohort submit`), never by a worker: \
             the run goes back to the queue"
                .to_owned(),
        )
    }
}

/// How the product answered, as the person reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmittedOutcome {
    /// The product's complete output.
    Output(String),
    /// The product declined (`--refused REASON`); `shown` is what it said,
    /// when the person saved it.
    Refused { reason: String, shown: Option<String> },
    /// The product failed (`--failed REASON`: an error page, a crash);
    /// `shown` is what it showed, if anything.
    Failed { reason: String, shown: Option<String> },
}

/// Why a submission is refused. Nothing is written when it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmissionError {
    #[error("the output file is empty: save the product's complete output (or use --refused / --failed REASON)")]
    EmptyOutput,
    #[error("the output file is not UTF-8 text (invalid byte at offset {0}): save the output as plain text")]
    NotUtf8(usize),
    #[error(
        "the output file has {size} bytes, more than the arm's max_output_bytes of {max}: is it the right file? \
         (raise settings.max_output_bytes before freezing if outputs are really this long)"
    )]
    TooLarge { size: u64, max: u64 },
    #[error("the clarification file is empty: leave --clarification out when the product asked nothing")]
    EmptyClarification,
    #[error("the clarification file is not UTF-8 text (invalid byte at offset {0})")]
    ClarificationNotUtf8(usize),
    #[error("the clarification file has more than {MAX_CLARIFICATION_BYTES} bytes: it should hold only the question")]
    ClarificationTooLarge,
    #[error("--{flag} needs a reason")]
    EmptyReason { flag: &'static str },
    #[error("--{0} must not be empty")]
    EmptyField(&'static str),
    #[error("--setting {0:?}: write it as key=value, with a non-empty key")]
    BadSetting(String),
    #[error("--setting {0:?} is given twice")]
    DuplicateSetting(String),
    #[error("--credits {0:?}: write the credits debited as the product shows them, a number such as 12 or 3.5")]
    BadCredits(String),
    #[error("--usage-input-tokens and --usage-output-tokens go together: give both, as the vendor disclosed them")]
    HalfUsage,
}

/// The text of a submitted file: UTF-8, at most `max` bytes. Empty text is
/// `Ok("")`; whether that is allowed is the caller's rule.
fn file_text(bytes: Vec<u8>, max: u64) -> Result<String, SubmissionError> {
    let size = bytes.len() as u64;
    if size > max {
        return Err(SubmissionError::TooLarge { size, max });
    }
    String::from_utf8(bytes).map_err(|e| SubmissionError::NotUtf8(e.utf8_error().valid_up_to()))
}

impl SubmittedOutcome {
    /// The outcome from the output file's bytes and the `--refused` /
    /// `--failed` reason, checked against the arm's size cap. A completed
    /// output must hold text; a refusal or failure may come with an empty
    /// file (the product showed nothing worth keeping).
    pub fn from_file(
        bytes: Vec<u8>,
        refused: Option<String>,
        failed: Option<String>,
        settings: &ManualSettings,
    ) -> Result<SubmittedOutcome, SubmissionError> {
        let text = file_text(bytes, settings.max_output_bytes)?;
        let shown = (!text.trim().is_empty()).then_some(text);
        let reason = |r: String, flag| {
            let r = r.trim().to_owned();
            if r.is_empty() { Err(SubmissionError::EmptyReason { flag }) } else { Ok(r) }
        };
        match (refused, failed) {
            (Some(r), _) => Ok(SubmittedOutcome::Refused { reason: reason(r, "refused")?, shown }),
            (None, Some(r)) => Ok(SubmittedOutcome::Failed { reason: reason(r, "failed")?, shown }),
            (None, None) => shown.map(SubmittedOutcome::Output).ok_or(SubmissionError::EmptyOutput),
        }
    }
}

/// The clarifying question the product asked, from its file's bytes.
pub fn clarification_text(bytes: Vec<u8>) -> Result<String, SubmissionError> {
    if bytes.len() > MAX_CLARIFICATION_BYTES {
        return Err(SubmissionError::ClarificationTooLarge);
    }
    let text =
        String::from_utf8(bytes).map_err(|e| SubmissionError::ClarificationNotUtf8(e.utf8_error().valid_up_to()))?;
    let text = text.trim().to_owned();
    if text.is_empty() { Err(SubmissionError::EmptyClarification) } else { Ok(text) }
}

/// `--setting key=value` flags as a table, in key order.
pub fn settings_table(flags: &[String]) -> Result<std::collections::BTreeMap<String, String>, SubmissionError> {
    let mut table = std::collections::BTreeMap::new();
    for flag in flags {
        let Some((key, value)) = flag.split_once('=') else { return Err(SubmissionError::BadSetting(flag.clone())) };
        let key = key.trim();
        if key.is_empty() {
            return Err(SubmissionError::BadSetting(flag.clone()));
        }
        if table.insert(key.to_owned(), value.trim().to_owned()).is_some() {
            return Err(SubmissionError::DuplicateSetting(key.to_owned()));
        }
    }
    Ok(table)
}

/// `--credits` as written, once checked to be a non-negative decimal
/// number (kept as text: "exact credits debited", never rounded).
pub fn credits(text: &str) -> Result<String, SubmissionError> {
    let t = text.trim();
    let (whole, fraction) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (t.contains('.') && fraction.is_empty()) {
        return Err(SubmissionError::BadCredits(text.to_owned()));
    }
    Ok(t.to_owned())
}

/// The vendor-disclosed usage, when both counts are given.
pub fn usage(input: Option<u64>, output: Option<u64>) -> Result<Option<TokenUsage>, SubmissionError> {
    match (input, output) {
        (Some(input_tokens), Some(output_tokens)) => Ok(Some(TokenUsage { input_tokens, output_tokens })),
        (None, None) => Ok(None),
        _ => Err(SubmissionError::HalfUsage),
    }
}

/// A person's account of one manual run, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub outcome: SubmittedOutcome,
    /// The product's clarifying question, when it asked one: the reply
    /// recorded is the suffix (seed 004: "reply only with the predefined
    /// suffix and preserve that exchange").
    pub clarification: Option<String>,
    /// The model/version label the product showed; `None`: "not disclosed".
    pub version: Option<String>,
    pub usage: Option<TokenUsage>,
    /// When the person started and finished the run (Unix ms).
    pub started_ms: i64,
    pub ended_ms: i64,
    /// Plan, settings, region, credits and the lease's times.
    pub metadata: ManualRun,
}

impl Submission {
    /// The answer `execute::record_answer` records: the conversation (the
    /// prompt; the clarifying question and the suffix as the reply, if
    /// asked) and the response, classified as an adapter's would be
    /// (`ok`; `refused`; `client_error`, which `final_outcome_of` makes
    /// `failed`).
    pub fn into_answer(self, prompt: &str, suffix: &str) -> Answer {
        let mut conversation = vec![Turn { role: USER.into(), text: prompt.to_owned() }];
        if let Some(question) = self.clarification {
            conversation.push(Turn { role: SYSTEM.into(), text: question });
            conversation.push(Turn { role: USER.into(), text: suffix.to_owned() });
        }
        let (class, detail, reply) = match self.outcome {
            SubmittedOutcome::Output(text) => (AttemptClass::Ok, String::new(), Reply::Output(text)),
            SubmittedOutcome::Refused { reason, shown } => {
                (AttemptClass::Refused, reason, shown.map_or(Reply::Nothing, Reply::Output))
            }
            SubmittedOutcome::Failed { reason, shown } => {
                (AttemptClass::ClientError, reason, shown.map_or(Reply::Nothing, Reply::Output))
            }
        };
        let response = AdapterResponse {
            class,
            http_status: 0,
            detail,
            reply,
            observed_version: self.version,
            usage: self.usage,
            // A UI gives no citation list beside its text: the citations
            // are the ones the output itself carries (scoring reads them).
            citations: cohort_core::scoring::ApiCitations::None,
            sources: Vec::new(),
            retry_after_ms: None,
        };
        Answer {
            conversation,
            response,
            started_ms: self.started_ms,
            ended_ms: self.ended_ms,
            manual: Some(self.metadata),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use super::*;

    fn arm(settings: serde_json::Value) -> ArmConfig {
        let text = format!(
            "name = \"t\"\nseed = 1\n\n[[arms]]\nid = \"m\"\nlabel = \"M\"\nadapter = \"manual\"\npinned_version = \"v1\"\nvendor_lineage = \"x\"\nsettings = {}\n",
            toml_inline(&settings)
        );
        cohort_core::config::build_and_validate(&text).unwrap_or_else(|p| panic!("{p:?}")).arms.remove(0)
    }

    fn toml_inline(v: &serde_json::Value) -> String {
        let fields: Vec<String> = v.as_object().unwrap().iter().map(|(k, v)| format!("{k} = {v}")).collect();
        format!("{{ {} }}", fields.join(", "))
    }

    /// Proves the settings parser: defaults, known keys read, unknown keys
    /// and a cap out of range refused naming the setting.
    #[test]
    fn settings_are_checked() {
        let s = ManualSettings::from_arm(&arm(serde_json::json!({}))).unwrap();
        assert_eq!(s.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
        let s =
            ManualSettings::from_arm(&arm(serde_json::json!({"plan": "Pro", "region": "EU", "max_output_bytes": 10})))
                .unwrap();
        assert_eq!((s.plan.as_deref(), s.region.as_deref(), s.max_output_bytes), (Some("Pro"), Some("EU"), 10));
        let e = ManualSettings::from_arm(&arm(serde_json::json!({"mode": "deep"}))).unwrap_err().to_string();
        assert!(e.contains("settings.mode") && e.contains("unknown manual setting"), "{e}");
        let e = ManualSettings::from_arm(&arm(serde_json::json!({"max_output_bytes": 0}))).unwrap_err().to_string();
        assert!(e.contains("max_output_bytes"), "{e}");
    }

    /// Proves the file rules: empty, non-UTF-8 and oversized outputs are
    /// refused; a refusal may come with an empty file.
    #[test]
    fn output_files_are_checked() {
        let s = ManualSettings::from_arm(&arm(serde_json::json!({"max_output_bytes": 8}))).unwrap();
        assert_eq!(SubmittedOutcome::from_file(b" \n".to_vec(), None, None, &s), Err(SubmissionError::EmptyOutput));
        assert_eq!(SubmittedOutcome::from_file(vec![b'a', 0xff], None, None, &s), Err(SubmissionError::NotUtf8(1)));
        assert!(matches!(
            SubmittedOutcome::from_file(vec![b'a'; 9], None, None, &s),
            Err(SubmissionError::TooLarge { size: 9, max: 8 })
        ));
        assert_eq!(
            SubmittedOutcome::from_file(Vec::new(), Some("policy".into()), None, &s),
            Ok(SubmittedOutcome::Refused { reason: "policy".into(), shown: None })
        );
        assert_eq!(
            SubmittedOutcome::from_file(Vec::new(), None, Some(" ".into()), &s),
            Err(SubmissionError::EmptyReason { flag: "failed" })
        );
    }

    /// Proves the small parsers: settings, credits kept as written, usage
    /// only in pairs.
    #[test]
    fn metadata_flags_are_checked() {
        let t = settings_table(&["mode=deep".into(), "sources = web ".into()]).unwrap();
        assert_eq!(t.get("mode").map(String::as_str), Some("deep"));
        assert_eq!(t.get("sources").map(String::as_str), Some("web"));
        assert!(settings_table(&["novalue".into()]).is_err());
        assert!(settings_table(&["a=1".into(), "a=2".into()]).is_err());
        assert_eq!(credits("12.50").unwrap(), "12.50");
        for bad in ["", "-1", "1.", ".5", "1e3", "ten"] {
            assert!(credits(bad).is_err(), "{bad}");
        }
        assert_eq!(usage(Some(1), None), Err(SubmissionError::HalfUsage));
        assert_eq!(usage(Some(1), Some(2)).unwrap(), Some(TokenUsage { input_tokens: 1, output_tokens: 2 }));
    }

    /// Proves the conversion: the clarification exchange has the suffix as
    /// the only reply, and the outcomes map to the classes whose final
    /// outcomes are completed, refused and failed.
    #[test]
    fn submissions_become_answers() {
        let sub = |outcome| Submission {
            outcome,
            clarification: Some("Which period?".into()),
            version: Some("engine-7".into()),
            usage: None,
            started_ms: 1,
            ended_ms: 2,
            metadata: ManualRun::default(),
        };
        let a = sub(SubmittedOutcome::Output("Answer [1].".into())).into_answer("Q?\n\nS.", "S.");
        let turns: Vec<(&str, &str)> = a.conversation.iter().map(|t| (t.role.as_str(), t.text.as_str())).collect();
        assert_eq!(turns, [(USER, "Q?\n\nS."), (SYSTEM, "Which period?"), (USER, "S.")]);
        assert_eq!(a.response.class, AttemptClass::Ok);
        assert_eq!(a.response.observed_version.as_deref(), Some("engine-7"));
        let r = sub(SubmittedOutcome::Refused { reason: "declined".into(), shown: None }).into_answer("p", "s");
        assert_eq!(cohort_core::lifecycle::final_outcome_of(r.response.class).as_str(), "refused");
        let f = sub(SubmittedOutcome::Failed { reason: "crashed".into(), shown: None }).into_answer("p", "s");
        assert_eq!(cohort_core::lifecycle::final_outcome_of(f.response.class).as_str(), "failed");
        assert!(!cohort_core::lifecycle::run_retryable(f.response.class));
    }
}
