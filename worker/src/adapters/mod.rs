//! Adapters: how a worker calls one kind of system under test. One trait,
//! each adapter a small module. The worker, not the adapter, enforces the
//! protocol's rules around the call (the clarification reply is the suffix
//! only; the per-run deadline; one attempt per lease).

use std::sync::Arc;

use async_trait::async_trait;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::scoring::ApiCitations;
use cohort_core::taxonomy::AttemptClass;

pub mod command;
mod http;
pub mod http_json;
pub mod manual;
pub mod openai_chat;
pub mod openai_responses;
mod settings;
pub mod sim;

/// The conversation and usage types live with the run record.
pub use cohort_records::{TokenUsage, Turn};
pub use http::ClarificationRule;

/// What an adapter is asked.
#[derive(Debug, Clone)]
pub struct AdapterRequest {
    pub run_id: String,
    pub question_id: String,
    /// 1-based attempt number of the run.
    pub attempt: u32,
    /// The conversation so far: the prompt first, then any clarification
    /// exchange. The last turn is the user's.
    pub conversation: Vec<Turn>,
    /// The run's deadline, when the worker set one. The worker drops a
    /// call still running at the deadline; an adapter that knows more than
    /// the worker would (a background response's id) stops just before it
    /// and says so in its `timeout` detail.
    pub deadline: Option<tokio::time::Instant>,
}

/// What the system answered, classified.
#[derive(Debug, Clone)]
pub struct AdapterResponse {
    pub class: AttemptClass,
    pub http_status: u16,
    /// Secret-free detail for the attempt record.
    pub detail: String,
    pub reply: Reply,
    /// The model or version label the system reported; `None` when it
    /// disclosed none (recorded as "not disclosed", never a marketing name).
    pub observed_version: Option<String>,
    pub usage: Option<TokenUsage>,
    /// What the API says the text cites (Perplexity's numbered
    /// `citations`, Responses and chat `url_citation` annotations,
    /// `http_json`'s `citations_pointer`): the scorer's reference table
    /// comes from it ([`cohort_core::scoring::wire`]).
    pub citations: ApiCitations,
    /// Source passages the system returned beside its text (e.g.
    /// Perplexity's `search_results`): used as evidence, recorded as such.
    pub sources: Vec<crate::score::SystemSource>,
    /// The provider's Retry-After on a failed attempt, in ms: the ledger
    /// waits at least this long before the run's next attempt and holds
    /// the arm for every worker until then.
    pub retry_after_ms: Option<u64>,
}

impl AdapterResponse {
    /// An attempt that obtained nothing usable (an outage, an error, a
    /// refusal without text): `class`, the HTTP status (0 for none) and a
    /// secret-free detail; no output, version, usage, citations or sources.
    pub fn nothing(class: AttemptClass, http_status: u16, detail: String) -> AdapterResponse {
        AdapterResponse {
            class,
            http_status,
            detail,
            reply: Reply::Nothing,
            observed_version: None,
            usage: None,
            citations: ApiCitations::None,
            sources: Vec::new(),
            retry_after_ms: None,
        }
    }
}

/// The content of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing usable (an error, a refusal, an outage).
    Nothing,
    /// The system asks a clarifying question before researching.
    Clarification(String),
    /// The complete output.
    Output(String),
}

/// A system under test.
#[async_trait]
pub trait Adapter: Send + Sync + std::fmt::Debug {
    /// Whether every output is simulated (recorded in every record).
    fn simulated(&self) -> bool {
        false
    }

    /// Calls the system once with the conversation so far.
    async fn call(&self, request: &AdapterRequest) -> AdapterResponse;
}

/// Why an adapter could not be built from an arm's config.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// An adapter kind the config knows and this build does not (every
    /// kind is built now; kept so that a kind added to the config before
    /// its adapter is refused, not panicked on).
    #[error(
        "arm {arm:?}: adapter `{kind}` is not available in this version of cohort (available: openai_responses, http_json, openai_chat, command, sim, manual)"
    )]
    NotAvailable { arm: String, kind: String },
    #[error("arm {arm:?}: settings.{field}: {message}")]
    BadSetting { arm: String, field: String, message: String },
}

/// The adapter for an arm.
pub fn for_arm(arm: &ArmConfig) -> Result<Arc<dyn Adapter>, AdapterError> {
    for_arm_with_env(arm, &|var| std::env::var(var).ok())
}

/// [`for_arm`] with `env` looking up the environment variables the arm's
/// settings name (`api_key_env`, `${ENV:NAME}` headers). The pre-flight
/// (`crate::preflight`) builds every arm through this with a recording
/// `env`, so the settings rules live only in the adapters' own parsers.
pub fn for_arm_with_env(
    arm: &ArmConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Adapter>, AdapterError> {
    match arm.adapter {
        AdapterKind::Sim => Ok(Arc::new(sim::SimAdapter::from_arm(arm)?)),
        AdapterKind::OpenaiChat => Ok(Arc::new(openai_chat::OpenAiChatAdapter::with_env(arm, env)?)),
        AdapterKind::OpenaiResponses => Ok(Arc::new(openai_responses::OpenAiResponsesAdapter::with_env(arm, env)?)),
        AdapterKind::HttpJson => Ok(Arc::new(http_json::HttpJsonAdapter::with_env(arm, env)?)),
        AdapterKind::Command => Ok(Arc::new(command::CommandAdapter::from_arm(arm)?)),
        // A person runs it (`cohort pending`, `cohort submit`); building it
        // checks its settings, as the pre-flight needs.
        AdapterKind::Manual => Ok(Arc::new(manual::ManualAdapter::from_arm(arm)?)),
    }
}
