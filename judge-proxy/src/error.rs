//! The proxy's one error type. Each variant knows its gRPC code, its HTTP
//! status, whether a caller may retry, and when. Messages are lowercase,
//! say what to fix, and never carry a key: anything that came from outside
//! (a provider's error body) is scrubbed by the [`crate::secret::Redactor`]
//! before it is put in one.

use std::time::Duration;

use cohort_core::error::Problem;
use cohort_core::taxonomy::AttemptClass;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProxyError {
    /// The config file is not valid.
    #[error("the judge-proxy config is not valid:{}", problems_text(.0))]
    Config(Vec<Problem>),

    /// A listener, file or other local resource failed.
    #[error("{0}")]
    Io(String),

    /// The shared-limit store (Redis) could not be used. The proxy fails
    /// closed: without the shared count it cannot promise the quota.
    #[error("the shared rate-limit store is unavailable: {0}")]
    Limiter(String),

    /// No team key, or a key no team has.
    #[error("missing or unknown team key: send `authorization: Bearer <team key>`")]
    Unauthenticated,

    /// The caller's request is wrong.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// The request names a judge or model route the proxy does not have.
    #[error("{0}")]
    NotFound(String),

    /// The caller's deadline passed while it waited for a rate-limit permit.
    #[error(
        "team \"{team}\" waited {} ms for a permit of upstream \"{upstream}\" without getting one \
         (its share is in use); retry after {} ms",
        waited.as_millis(),
        retry_after.as_millis()
    )]
    PermitDeadline { team: String, upstream: String, waited: Duration, retry_after: Duration },

    /// Every attempt at the upstream failed; `class` is the last attempt's.
    #[error("upstream \"{upstream}\" failed after {attempts} attempt(s), last {class}: {detail}")]
    Upstream {
        upstream: String,
        class: AttemptClass,
        attempts: usize,
        /// Secret-free detail (scrubbed).
        detail: String,
        /// From the provider's Retry-After, when it sent one.
        retry_after: Option<Duration>,
    },

    #[error("internal error: {0}")]
    Internal(String),
}

fn problems_text(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("\n  {p}")).collect()
}

impl ProxyError {
    /// The gRPC status code for this error.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            ProxyError::Config(_) | ProxyError::Io(_) | ProxyError::Internal(_) => tonic::Code::Internal,
            ProxyError::Limiter(_) => tonic::Code::Unavailable,
            ProxyError::Unauthenticated => tonic::Code::Unauthenticated,
            ProxyError::InvalidRequest(_) => tonic::Code::InvalidArgument,
            ProxyError::NotFound(_) => tonic::Code::NotFound,
            ProxyError::PermitDeadline { .. } => tonic::Code::ResourceExhausted,
            ProxyError::Upstream { class, .. } => match class {
                AttemptClass::QuotaExhausted | AttemptClass::RateLimited => tonic::Code::ResourceExhausted,
                AttemptClass::Timeout => tonic::Code::DeadlineExceeded,
                // The upstream refused the proxy's own key: a configuration
                // error of the proxy that no retry fixes.
                AttemptClass::ClientError | AttemptClass::AuthError => tonic::Code::FailedPrecondition,
                _ => tonic::Code::Unavailable,
            },
        }
    }

    /// The HTTP status for this error (the passthrough's error replies).
    pub fn http_status(&self) -> u16 {
        match self {
            ProxyError::Config(_) | ProxyError::Io(_) | ProxyError::Internal(_) => 500,
            ProxyError::Limiter(_) => 503,
            ProxyError::Unauthenticated => 401,
            ProxyError::InvalidRequest(_) => 400,
            ProxyError::NotFound(_) => 404,
            ProxyError::PermitDeadline { .. } => 429,
            ProxyError::Upstream { class, .. } => match class {
                AttemptClass::QuotaExhausted => 402,
                AttemptClass::RateLimited => 429,
                AttemptClass::Timeout => 504,
                AttemptClass::ClientError => 400,
                _ => 502,
            },
        }
    }

    /// The OpenAI-style error `type` of the passthrough's error replies.
    pub fn error_type(&self) -> &'static str {
        match self {
            ProxyError::Unauthenticated => "invalid_api_key",
            ProxyError::InvalidRequest(_) => "invalid_request_error",
            ProxyError::NotFound(_) => "model_not_found",
            ProxyError::PermitDeadline { .. } => "rate_limit_exceeded",
            ProxyError::Upstream { class: AttemptClass::QuotaExhausted, .. } => "insufficient_quota",
            ProxyError::Upstream { .. } => "upstream_error",
            ProxyError::Limiter(_) => "service_unavailable",
            _ => "server_error",
        }
    }

    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProxyError::Limiter(_) | ProxyError::PermitDeadline { .. } => true,
            ProxyError::Upstream { class, .. } => cohort_core::lifecycle::call_retryable(*class),
            _ => false,
        }
    }

    /// When a retry may succeed, if known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProxyError::PermitDeadline { retry_after, .. } => Some(*retry_after),
            ProxyError::Upstream { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// This error as a gRPC status, with `retry-after-ms` metadata when a
    /// retry time is known.
    pub fn to_status(&self) -> tonic::Status {
        let mut status = tonic::Status::new(self.grpc_code(), self.to_string());
        if let Some(after) = self.retry_after()
            && let Ok(v) = after.as_millis().to_string().parse()
        {
            status.metadata_mut().insert("retry-after-ms", v);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_deadline_is_a_retryable_429() {
        let e = ProxyError::PermitDeadline {
            team: "a".into(),
            upstream: "u".into(),
            waited: Duration::from_millis(1500),
            retry_after: Duration::from_millis(250),
        };
        assert_eq!((e.http_status(), e.grpc_code()), (429, tonic::Code::ResourceExhausted));
        assert!(e.is_retryable());
        assert!(e.to_string().contains("waited 1500 ms") && e.to_string().contains("retry after 250 ms"));
        assert_eq!(e.to_status().metadata().get("retry-after-ms").unwrap(), "250");
    }

    #[test]
    fn quota_exhaustion_is_final() {
        let e = ProxyError::Upstream {
            upstream: "u".into(),
            class: AttemptClass::QuotaExhausted,
            attempts: 1,
            detail: String::new(),
            retry_after: None,
        };
        assert_eq!(e.http_status(), 402);
        assert!(!e.is_retryable());
    }

    /// The upstream refusing the proxy's key is the proxy's configuration:
    /// not retryable, a failed precondition, a bad gateway to HTTP clients
    /// (their own key was fine).
    #[test]
    fn an_upstream_auth_error_is_a_configuration_error() {
        let e = ProxyError::Upstream {
            upstream: "u".into(),
            class: AttemptClass::AuthError,
            attempts: 1,
            detail: "HTTP 401: Incorrect API key provided".into(),
            retry_after: None,
        };
        assert_eq!((e.http_status(), e.grpc_code()), (502, tonic::Code::FailedPrecondition));
        assert!(!e.is_retryable());
    }
}
