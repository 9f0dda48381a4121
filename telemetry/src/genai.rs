//! Spans of LLM calls as the OpenTelemetry GenAI semantic conventions name
//! them (<https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/>):
//! name `{gen_ai.operation.name} {gen_ai.request.model}`, kind CLIENT,
//! `gen_ai.provider.name` (not the deprecated `gen_ai.system`),
//! `gen_ai.request.model`, `gen_ai.response.model` (the model that
//! actually served), `gen_ai.usage.input_tokens` / `output_tokens`,
//! `gen_ai.request.temperature`, and `error.type` on a failure. The
//! attribute names are the `opentelemetry-semantic-conventions` crate's.
//! Prompts and outputs are never recorded.
//!
//! The crate (0.33) marks its `GEN_AI_*` constants deprecated only because
//! the GenAI conventions moved to a repository of their own; the names are
//! the current ones, so they are used here with the warning allowed.
#![allow(deprecated)]

use opentelemetry::trace::Status;
use opentelemetry_semantic_conventions::attribute as semconv;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// `gen_ai.operation.name` of a chat completion (and a Responses API call).
pub const CHAT: &str = "chat";

/// A CLIENT span for one call to a model: `operation` on `provider`
/// (`openai`, `anthropic`, or cohort's own names for the simulated ones)
/// asking for `request_model`.
pub fn llm_span(operation: &str, provider: &str, request_model: &str, temperature: Option<f64>) -> tracing::Span {
    let span = tracing::info_span!(
        "gen_ai",
        otel.name = format!("{operation} {request_model}").as_str(),
        otel.kind = "client",
    );
    span.set_attribute(semconv::GEN_AI_OPERATION_NAME, operation.to_owned());
    span.set_attribute(semconv::GEN_AI_PROVIDER_NAME, provider.to_owned());
    span.set_attribute(semconv::GEN_AI_REQUEST_MODEL, request_model.to_owned());
    if let Some(t) = temperature {
        span.set_attribute(semconv::GEN_AI_REQUEST_TEMPERATURE, t);
    }
    span
}

/// What came back: the model that served (when the provider said) and the
/// tokens it counted.
pub fn record_response(
    span: &tracing::Span,
    response_model: Option<&str>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
) {
    if let Some(m) = response_model.filter(|m| !m.is_empty()) {
        span.set_attribute(semconv::GEN_AI_RESPONSE_MODEL, m.to_owned());
    }
    if let Some(n) = input_tokens.and_then(|n| i64::try_from(n).ok()) {
        span.set_attribute(semconv::GEN_AI_USAGE_INPUT_TOKENS, n);
    }
    if let Some(n) = output_tokens.and_then(|n| i64::try_from(n).ok()) {
        span.set_attribute(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, n);
    }
}

/// Marks `span` failed with `error.type` = `error_type` (cohort's attempt
/// class, such as `rate_limited` or `timeout`: low-cardinality, never a
/// message that could hold a secret).
pub fn mark_error(span: &tracing::Span, error_type: &str) {
    span.set_attribute(semconv::ERROR_TYPE, error_type.to_owned());
    span.set_status(Status::error(error_type.to_owned()));
}
