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

/// `gen_ai.provider.name` of a call to `url`, as the semantic conventions'
/// well-known values name the provider
/// (<https://opentelemetry.io/docs/specs/semconv/registry/attributes/gen-ai/>):
/// known by the API's host (`api.openai.com` is `openai`,
/// `api.perplexity.ai` `perplexity`, `api.anthropic.com` `anthropic`, ...),
/// else `api`, the API the call speaks (an OpenAI-compatible endpoint
/// elsewhere is `openai`; cohort's own names for what has no well-known
/// value, such as `cohort.sim` for the simulated ones). The vendor lineage a
/// cohort declares is not a provider name: spans carry it as
/// `cohort.vendor_lineage`.
pub fn provider_name(url: Option<&str>, api: &'static str) -> &'static str {
    const KNOWN: [(&str, &str); 10] = [
        ("api.openai.com", "openai"),
        ("api.anthropic.com", "anthropic"),
        ("api.perplexity.ai", "perplexity"),
        ("generativelanguage.googleapis.com", "gcp.gemini"),
        ("api.x.ai", "x_ai"),
        ("api.deepseek.com", "deepseek"),
        ("api.mistral.ai", "mistral_ai"),
        ("api.groq.com", "groq"),
        ("api.cohere.com", "cohere"),
        ("api.cohere.ai", "cohere"),
    ];
    let host = url
        .and_then(|u| u.split_once("://").map(|(_, rest)| rest))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default())
        .map(|authority| authority.rsplit('@').next().unwrap_or_default())
        .map(|hostport| hostport.split(':').next().unwrap_or_default().to_ascii_lowercase());
    match host {
        Some(host) => {
            KNOWN.iter().find(|(h, _)| host == *h || host.ends_with(&format!(".{h}"))).map_or(api, |(_, p)| p)
        }
        None => api,
    }
}

/// A CLIENT span for one call to a model: `operation` on `provider`
/// ([`provider_name`]) asking for `request_model`.
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

/// The vendor lineage the cohort declares for what `span` calls, as
/// `cohort.vendor_lineage` (the provider is `gen_ai.provider.name`).
pub fn set_vendor_lineage(span: &tracing::Span, lineage: &str) {
    if !lineage.is_empty() {
        span.set_attribute("cohort.vendor_lineage", lineage.to_owned());
    }
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

#[cfg(test)]
mod tests {
    use super::provider_name;

    /// Proves the provider is named by the API's host where the semantic
    /// conventions know it, else by the API the call speaks.
    #[test]
    fn providers_are_named_by_their_host_else_by_the_api() {
        assert_eq!(provider_name(Some("https://api.perplexity.ai"), "openai"), "perplexity");
        assert_eq!(provider_name(Some("https://api.openai.com/v1"), "openai"), "openai");
        assert_eq!(provider_name(Some("https://API.Anthropic.com:443/v1/messages"), "anthropic"), "anthropic");
        assert_eq!(provider_name(Some("https://eu.api.x.ai/v1"), "openai"), "x_ai");
        assert_eq!(provider_name(Some("http://127.0.0.1:8080/v1"), "openai"), "openai");
        assert_eq!(provider_name(Some("https://notapi.openai.com.evil.example/v1"), "openai"), "openai");
        assert_eq!(provider_name(Some("https://research.example/api"), "cohort.http_json"), "cohort.http_json");
        assert_eq!(provider_name(None, "cohort.sim"), "cohort.sim");
    }
}
