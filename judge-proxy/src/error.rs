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

    /// The team sent more requests per second than its local admission
    /// bucket allows at this replica (`teams[].admission_rps`); refused at
    /// once, before the shared limiter is asked.
    #[error(
        "team \"{team}\" sent more than its {rps} requests/s admission limit at this replica; retry after {} ms",
        retry_after.as_millis()
    )]
    AdmissionLimited { team: String, rps: u32, retry_after: Duration },

    /// The request's `Content-Length` (or the body read so far) is above
    /// `max_request_bytes`.
    #[error("the request body is larger than {limit} bytes (max_request_bytes): send a smaller request")]
    RequestTooLarge { limit: usize },

    /// The request body did not arrive in whole within
    /// `body_read_timeout_ms`.
    #[error("the request body did not arrive within {} ms (body_read_timeout_ms)", .0.as_millis())]
    BodyTimeout(Duration),

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
            ProxyError::PermitDeadline { .. } | ProxyError::AdmissionLimited { .. } => tonic::Code::ResourceExhausted,
            ProxyError::RequestTooLarge { .. } => tonic::Code::InvalidArgument,
            ProxyError::BodyTimeout(_) => tonic::Code::DeadlineExceeded,
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
            ProxyError::PermitDeadline { .. } | ProxyError::AdmissionLimited { .. } => 429,
            ProxyError::RequestTooLarge { .. } => 413,
            ProxyError::BodyTimeout(_) => 408,
            ProxyError::Upstream { class, .. } => match class {
                AttemptClass::QuotaExhausted => 402,
                AttemptClass::RateLimited => 429,
                AttemptClass::Timeout => 504,
                AttemptClass::ClientError => 400,
                _ => 502,
            },
        }
    }

    /// Whether this error is a rate limit a client should wait out: the
    /// caller's share (no permit before the deadline), its admission
    /// bucket, or the provider's own 429 after every retry.
    fn is_rate_limit(&self) -> bool {
        matches!(
            self,
            ProxyError::PermitDeadline { .. }
                | ProxyError::AdmissionLimited { .. }
                | ProxyError::Upstream { class: AttemptClass::RateLimited, .. }
        )
    }

    /// The OpenAI-style error `type` of the passthrough's error replies.
    /// OpenAI's own 429 for a rate limit says `"type": "requests"` (or
    /// `"tokens"`) with `"code": "rate_limit_exceeded"`; the proxy's limits
    /// count requests and tokens together, so its 429s say `requests`.
    pub fn error_type(&self) -> &'static str {
        if self.is_rate_limit() {
            return "requests";
        }
        match self {
            ProxyError::Unauthenticated
            | ProxyError::InvalidRequest(_)
            | ProxyError::NotFound(_)
            | ProxyError::RequestTooLarge { .. }
            | ProxyError::BodyTimeout(_) => "invalid_request_error",
            ProxyError::Upstream { class: AttemptClass::QuotaExhausted, .. } => "insufficient_quota",
            ProxyError::Upstream { .. } => "upstream_error",
            ProxyError::Limiter(_) => "service_unavailable",
            _ => "server_error",
        }
    }

    /// The OpenAI-style error `code`: what a client branches on
    /// (`rate_limit_exceeded` for every 429 that waiting fixes, as OpenAI
    /// sends, so a client's rate-limit handling applies to the proxy too).
    pub fn error_code(&self) -> &'static str {
        if self.is_rate_limit() {
            return "rate_limit_exceeded";
        }
        match self {
            ProxyError::Unauthenticated => "invalid_api_key",
            ProxyError::InvalidRequest(_) => "invalid_request_error",
            ProxyError::NotFound(_) => "model_not_found",
            ProxyError::RequestTooLarge { .. } => "request_too_large",
            ProxyError::BodyTimeout(_) => "request_timeout",
            ProxyError::Upstream { class: AttemptClass::QuotaExhausted, .. } => "insufficient_quota",
            ProxyError::Upstream { .. } => "upstream_error",
            ProxyError::Limiter(_) => "service_unavailable",
            _ => "server_error",
        }
    }

    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProxyError::Limiter(_)
            | ProxyError::PermitDeadline { .. }
            | ProxyError::AdmissionLimited { .. }
            | ProxyError::BodyTimeout(_) => true,
            ProxyError::Upstream { class, .. } => cohort_core::lifecycle::call_retryable(*class),
            _ => false,
        }
    }

    /// When a retry may succeed, if known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProxyError::PermitDeadline { retry_after, .. } | ProxyError::AdmissionLimited { retry_after, .. } => {
                Some(*retry_after)
            }
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

    /// Every 429 a client should wait out carries OpenAI's
    /// `rate_limit_exceeded` code, the provider's own 429 after retries
    /// included (it said `upstream_error`); quota exhaustion does not.
    #[test]
    fn rate_limits_say_rate_limit_exceeded() {
        let upstream = |class| ProxyError::Upstream {
            upstream: "u".into(),
            class,
            attempts: 4,
            detail: "HTTP 429".into(),
            retry_after: Some(Duration::from_secs(2)),
        };
        let deadline = ProxyError::PermitDeadline {
            team: "a".into(),
            upstream: "u".into(),
            waited: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
        };
        let admission =
            ProxyError::AdmissionLimited { team: "a".into(), rps: 5, retry_after: Duration::from_millis(200) };
        for e in [upstream(AttemptClass::RateLimited), deadline, admission] {
            assert_eq!(
                (e.http_status(), e.error_code(), e.error_type()),
                (429, "rate_limit_exceeded", "requests"),
                "{e}"
            );
            assert!(e.retry_after().is_some() && e.is_retryable(), "{e}");
        }
        let quota = upstream(AttemptClass::QuotaExhausted);
        assert_eq!((quota.error_code(), quota.error_type()), ("insufficient_quota", "insufficient_quota"));
        assert_eq!(upstream(AttemptClass::ServerError).error_code(), "upstream_error");
        assert_eq!(ProxyError::RequestTooLarge { limit: 1024 }.http_status(), 413);
        assert_eq!(ProxyError::BodyTimeout(Duration::from_secs(1)).http_status(), 408);
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
