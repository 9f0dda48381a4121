//! The proxy's config file (TOML): parsed into a raw serde struct that keeps
//! the position of every field, then checked by [`build_and_validate`] into
//! a [`ProxyConfig`] whose invariants hold: names unique and plain, every
//! judge on a known upstream, every limit positive, every key present.
//!
//! Keys are read here, from the environment variable or the file the config
//! names, and held as [`Secret`]s from then on. A problem names the file,
//! the line, the field and, for a key, where it was looked for, never the
//! key itself. See docs/judge-proxy.md for the reference.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cohort_core::config::{PriceCatalog, RawPrices, parse_price_catalog};
use cohort_core::error::{Problem, TomlChecker};
use serde::Deserialize;
use toml::Spanned;

use crate::error::ProxyError;
use crate::secret::{MIN_SECRET_LEN, Secret};

/// The judge batch size when a judge does not set `batch_size`.
pub const DEFAULT_BATCH_SIZE: u32 = 8;
/// How long a caller waits (permit and retries included) when it names no
/// deadline.
pub const DEFAULT_DEADLINE_MS: u64 = 60_000;
/// The largest request body the passthrough and gRPC accept.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// The output tokens assumed, before the call, for a passthrough request
/// that sets no `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS_ESTIMATE: u64 = 512;
/// How long the HTTP face waits for a request's headers (a connection's
/// first, and each next one on a kept-alive connection) before closing it.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// How long the HTTP face waits for a whole request body before a 408.
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 30_000;
/// HTTP connections served at once; further ones wait in the listen
/// backlog until one closes.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// A team's local admission rate (requests/s, the burst the same) when
/// `admission_rps` is not set: far above any provider quota, so it only
/// stops a runaway client before it reaches the shared limiter.
pub const DEFAULT_ADMISSION_RPS: u32 = 1000;
/// The Redis key prefix when `redis_key_prefix` is not set.
pub const DEFAULT_REDIS_KEY_PREFIX: &str = "cohort";
/// The `anthropic-version` header sent to Anthropic upstreams.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
/// The `base_url` recorded for a `sim` upstream: it calls nothing, and a
/// scheme no HTTP client speaks keeps it that way.
pub const SIM_BASE_URL: &str = "sim://builtin";

// === raw config, as written ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    grpc_listen: Option<Spanned<String>>,
    http_listen: Option<Spanned<String>>,
    #[serde(default)]
    strict: bool,
    redis_url: Option<Spanned<String>>,
    redis_url_env: Option<Spanned<String>>,
    redis_key_prefix: Option<Spanned<String>>,
    default_deadline_ms: Option<Spanned<i64>>,
    max_request_bytes: Option<Spanned<i64>>,
    output_tokens_estimate: Option<Spanned<i64>>,
    header_read_timeout_ms: Option<Spanned<i64>>,
    body_read_timeout_ms: Option<Spanned<i64>>,
    max_connections: Option<Spanned<i64>>,
    metrics_key_env: Option<Spanned<String>>,
    trace_file: Option<Spanned<String>>,
    price_catalog: Option<Spanned<String>>,
    prices: Option<Spanned<RawPrices>>,
    retry: Option<Spanned<RawRetry>>,
    #[serde(default)]
    upstreams: Vec<Spanned<RawUpstream>>,
    #[serde(default)]
    teams: Vec<Spanned<RawTeam>>,
    #[serde(default)]
    judges: Vec<Spanned<RawJudge>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    max_attempts: Option<Spanned<i64>>,
    initial_backoff_ms: Option<Spanned<i64>>,
    max_backoff_ms: Option<Spanned<i64>>,
    max_total_ms: Option<Spanned<i64>>,
    attempt_timeout_ms: Option<Spanned<i64>>,
    jitter: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: Spanned<String>,
    kind: Spanned<UpstreamKind>,
    /// Required for `openai` and `anthropic`; a `sim` upstream has none.
    base_url: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    api_key_file: Option<Spanned<String>>,
    rpm: Spanned<i64>,
    tpm: Spanned<i64>,
    max_concurrency: Option<Spanned<i64>>,
    burst: Option<Spanned<i64>>,
    context_tokens: Option<Spanned<i64>>,
    max_output_tokens: Option<Spanned<i64>>,
    #[serde(default)]
    served_model_headers: Vec<String>,
    #[serde(default)]
    served_provider_headers: Vec<String>,
    #[serde(default)]
    forward_headers: Vec<String>,
    anthropic_version: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTeam {
    name: Spanned<String>,
    key_env: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    weight: Option<Spanned<i64>>,
    admission_rps: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJudge {
    name: Spanned<String>,
    upstream: Spanned<String>,
    model: Spanned<String>,
    served_model: Option<Spanned<String>>,
    batch_size: Option<Spanned<i64>>,
    max_output_tokens: Option<Spanned<i64>>,
    vendor_lineage: Option<Spanned<String>>,
}

// === validated config ===

/// A validated proxy config, keys resolved.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where gRPC `Judge` listens (used by the CLI; tests pass listeners).
    pub grpc_listen: Option<SocketAddr>,
    /// Where the HTTP passthrough and health endpoints listen.
    pub http_listen: Option<SocketAddr>,
    /// Strict mode: a verdict whose served model is not the judge's pinned
    /// model is unjudged (`model_mismatch`).
    pub strict: bool,
    /// Set: limits are shared through this Redis by every replica. A
    /// [`Secret`] because a URL may carry a password.
    pub redis_url: Option<Secret>,
    pub redis_key_prefix: String,
    pub default_deadline: Duration,
    pub max_request_bytes: usize,
    pub output_tokens_estimate: u64,
    /// The HTTP face closes a connection whose request headers have not
    /// all arrived this long after it started reading them (slowloris);
    /// also the idle time of a kept-alive connection.
    pub header_read_timeout: Duration,
    /// A request body not in whole after this long is answered 408.
    pub body_read_timeout: Duration,
    /// HTTP connections served at once.
    pub max_connections: usize,
    /// Set: `GET /metrics` needs `authorization: Bearer <this key>`;
    /// unset, it is open (scrapers on a private network).
    pub metrics_key: Option<Secret>,
    /// Set: every trace record is also appended to this JSONL file.
    pub trace_file: Option<PathBuf>,
    /// Prices of served models; a model not listed has unknown cost.
    pub prices: Option<PriceCatalog>,
    pub retry: RetryConfig,
    pub upstreams: Vec<UpstreamConfig>,
    pub teams: Vec<TeamConfig>,
    pub judges: Vec<JudgeConfig>,
}

/// The wire protocol of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    /// OpenAI-compatible chat completions (`POST {base_url}/chat/completions`).
    Openai,
    /// Anthropic Messages (`POST {base_url}/messages`).
    Anthropic,
    /// The built-in SIMULATED judge (`crate::sim`): answers in the OpenAI
    /// chat-completion form, in process, from a word-overlap rule; no
    /// network, no key. For the offline quickstart and tests only.
    Sim,
}

impl UpstreamKind {
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamKind::Openai => "openai",
            UpstreamKind::Anthropic => "anthropic",
            UpstreamKind::Sim => "sim",
        }
    }
}

/// One provider account (or router) the proxy fronts.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub name: String,
    pub kind: UpstreamKind,
    /// Without a trailing `/`: `https://api.openai.com/v1`; [`SIM_BASE_URL`]
    /// for a `sim` upstream.
    pub base_url: String,
    /// None for an upstream without authentication (a local vLLM).
    pub api_key: Option<Secret>,
    /// Requests per minute the provider allows this account.
    pub rpm: u32,
    /// Tokens (input + output) per minute.
    pub tpm: u64,
    /// Upstream calls in flight at once, per replica.
    pub max_concurrency: u32,
    /// Requests that may go back to back when the upstream has been idle
    /// (the limiter's tolerance, in upstream intervals). Default
    /// [`default_burst`]: half the provider's one-second bucket.
    pub burst: u32,
    /// The model's context window (input + output tokens), when set: a
    /// request whose estimate exceeds it is refused with 400.
    pub context_tokens: Option<u64>,
    /// The most output tokens a call may ask for, when set: a larger
    /// `max_tokens` is refused with 400.
    pub max_output_tokens: Option<u64>,
    /// Response headers, in order of preference, that name the served model.
    pub served_model_headers: Vec<String>,
    /// Response headers that name the provider that served.
    pub served_provider_headers: Vec<String>,
    /// Client request headers the passthrough forwards (lowercase).
    pub forward_headers: Vec<String>,
    pub anthropic_version: String,
}

/// A team sharing the upstreams' quotas.
#[derive(Debug, Clone)]
pub struct TeamConfig {
    pub name: String,
    /// The bearer key the team presents.
    pub key: Secret,
    /// Its share of every upstream is weight / (sum of weights).
    pub weight: u32,
    /// Requests per second (the burst the same) the HTTP face admits from
    /// this team's key at one replica, before any Redis call.
    pub admission_rps: u32,
}

/// A configured judge.
#[derive(Debug, Clone)]
pub struct JudgeConfig {
    pub name: String,
    pub upstream: String,
    /// The model requested.
    pub model: String,
    /// The model that must answer (strict mode); defaults to `model`.
    pub served_model: String,
    pub batch_size: u32,
    /// `max_tokens` of a judge call: enough for one line per claim.
    pub max_output_tokens: u64,
    /// The judge model's vendor lineage, when the config declares it
    /// (`DescribeJudge` reports it, so `cohort judge` can check it against
    /// the cohort's frozen `[judge] vendor_lineage`); `None`: not declared.
    pub vendor_lineage: Option<String>,
}

/// Retries of an upstream call (SPEC section 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// No retry starts after this much time since the first attempt.
    pub max_total: Duration,
    /// One attempt's deadline (the `timeout` class).
    pub attempt_timeout: Duration,
    pub jitter: bool,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_total: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(120),
            jitter: true,
        }
    }
}

impl ProxyConfig {
    /// Reads and validates the config at `path`: keys from the process
    /// environment, relative paths against the config's directory.
    pub fn load(path: &Path) -> Result<ProxyConfig, ProxyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProxyError::Config(vec![Problem::in_file(&path.display().to_string(), e.to_string())]))?;
        let base = path.parent().unwrap_or(Path::new("."));
        build_and_validate(&text, &path.display().to_string(), base, &|name| std::env::var(name).ok())
    }

    pub fn upstream(&self, name: &str) -> Option<&UpstreamConfig> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    pub fn judge(&self, name: &str) -> Option<&JudgeConfig> {
        self.judges.iter().find(|j| j.name == name)
    }

    /// Every secret of the config, for the [`crate::secret::Redactor`].
    pub fn secrets(&self) -> Vec<Secret> {
        let mut out: Vec<Secret> = self.upstreams.iter().filter_map(|u| u.api_key.clone()).collect();
        out.extend(self.teams.iter().map(|t| t.key.clone()));
        out.extend(self.redis_url.clone());
        out.extend(self.metrics_key.clone());
        out
    }

    /// Whether `judge`'s upstream is the SIMULATED `sim` kind.
    pub fn judge_is_simulated(&self, judge: &JudgeConfig) -> bool {
        self.upstream(&judge.upstream).is_some_and(|u| u.kind == UpstreamKind::Sim)
    }

    /// The names of the `sim` upstreams, for the start-up log line.
    pub fn simulated_upstreams(&self) -> Vec<&str> {
        self.upstreams.iter().filter(|u| u.kind == UpstreamKind::Sim).map(|u| u.name.as_str()).collect()
    }

    /// A proxy built in memory around the SIMULATED judge: one `sim`
    /// upstream, one team (`team_key`), one judge, strict mode on (the sim
    /// answers as the requested model, so the served-model check passes
    /// exactly when `judge.served_model` is `judge.model`). Listen
    /// addresses are unset: the caller passes listeners. `cohort run` uses
    /// it for a cohort whose `[judge] provider` is `"sim"`.
    pub fn builtin_sim(judge: BuiltinSimJudge, team_key: Secret) -> ProxyConfig {
        let upstream = UpstreamConfig {
            name: BUILTIN_SIM_UPSTREAM.to_owned(),
            kind: UpstreamKind::Sim,
            base_url: SIM_BASE_URL.to_owned(),
            api_key: None,
            // Generous limits: the limiter still runs (the real path), but a
            // quickstart never waits on it.
            rpm: 60_000,
            tpm: 100_000_000,
            max_concurrency: 16,
            burst: 32,
            context_tokens: None,
            max_output_tokens: None,
            served_model_headers: Vec::new(),
            served_provider_headers: Vec::new(),
            forward_headers: Vec::new(),
            anthropic_version: DEFAULT_ANTHROPIC_VERSION.to_owned(),
        };
        let batch_size = judge.batch_size.max(1);
        ProxyConfig {
            grpc_listen: None,
            http_listen: None,
            strict: true,
            redis_url: None,
            redis_key_prefix: DEFAULT_REDIS_KEY_PREFIX.to_owned(),
            default_deadline: Duration::from_millis(DEFAULT_DEADLINE_MS),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            output_tokens_estimate: DEFAULT_OUTPUT_TOKENS_ESTIMATE,
            header_read_timeout: Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS),
            body_read_timeout: Duration::from_millis(DEFAULT_BODY_READ_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            metrics_key: None,
            trace_file: None,
            prices: judge.prices,
            retry: RetryConfig::default(),
            upstreams: vec![upstream],
            teams: vec![TeamConfig {
                name: BUILTIN_SIM_TEAM.to_owned(),
                key: team_key,
                weight: 1,
                admission_rps: DEFAULT_ADMISSION_RPS,
            }],
            judges: vec![JudgeConfig {
                name: judge.name,
                upstream: BUILTIN_SIM_UPSTREAM.to_owned(),
                model: judge.model,
                served_model: judge.served_model,
                batch_size,
                max_output_tokens: 16 * u64::from(batch_size) + 64,
                vendor_lineage: None,
            }],
        }
    }
}

/// The default burst of an upstream at `rpm`: half of what a provider's
/// one-second bucket holds (`rpm / 120`), between 1 and 32. A burst equal
/// to the provider's own bucket (`rpm / 60`) tips over on arrival jitter
/// (one 429 at start-up in every rate-limited run); half leaves the margin.
/// 1 is enough for the booking rule: a lone request on an idle timeline
/// still goes at once.
pub fn default_burst(rpm: u32) -> u32 {
    (rpm / 120).clamp(1, 32)
}

/// The upstream name of [`ProxyConfig::builtin_sim`].
pub const BUILTIN_SIM_UPSTREAM: &str = "sim";
/// The team name of [`ProxyConfig::builtin_sim`].
pub const BUILTIN_SIM_TEAM: &str = "local";

/// The judge of [`ProxyConfig::builtin_sim`].
#[derive(Debug, Clone)]
pub struct BuiltinSimJudge {
    /// The judge's name in the proxy (what callers ask for).
    pub name: String,
    /// The model requested; the sim answers as this model.
    pub model: String,
    /// The model that must answer (strict mode).
    pub served_model: String,
    pub batch_size: u32,
    /// Prices by served model (normally none for the sim: cost unknown).
    pub prices: Option<PriceCatalog>,
}

/// Parses and validates a config `text` read from `file`. `env` looks up
/// environment variables; `base` resolves relative paths.
pub fn build_and_validate(
    text: &str,
    file: &str,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProxyConfig, ProxyError> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| ProxyError::Config(vec![TomlChecker::parse_error(file, text, &e)]))?;
    let mut v = Validator { check: TomlChecker::new(file, text), base, env };
    let config = v.config(raw);
    if v.problems.is_empty() { Ok(config) } else { Err(ProxyError::Config(v.check.problems)) }
}

/// Collects problems with their positions while building the config.
struct Validator<'a> {
    check: TomlChecker<'a>,
    base: &'a Path,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> std::ops::Deref for Validator<'a> {
    type Target = TomlChecker<'a>;
    fn deref(&self) -> &TomlChecker<'a> {
        &self.check
    }
}

impl std::ops::DerefMut for Validator<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.check
    }
}

impl Validator<'_> {
    fn required_int<T: TryFrom<i64> + Default>(&mut self, value: Spanned<i64>, field: &str, min: i64) -> T {
        self.int(Some(value), field, min, T::default())
    }

    /// A plain name: letters, digits, `.`, `_`, `-` (it becomes part of
    /// Redis keys and of model routes).
    fn name(&mut self, value: Spanned<String>, field: &str, seen: &mut HashSet<String>, what: &str) -> String {
        let span = value.span();
        let name = value.into_inner();
        if !cohort_core::config::is_plain_name(&name) {
            self.problem(span, field, format!("\"{name}\" is not a plain name: use letters, digits, '.', '_' and '-'"));
        } else if !seen.insert(name.clone()) {
            self.problem(span, field, format!("duplicate {what} name \"{name}\""));
        }
        name
    }

    fn path(&self, value: &str) -> PathBuf {
        let p = Path::new(value);
        if p.is_absolute() { p.to_path_buf() } else { self.base.join(p) }
    }

    /// A key from an environment variable or a file. Problems name where
    /// the key was looked for, never its value.
    fn secret(
        &mut self,
        from_env: Option<Spanned<String>>,
        from_file: Option<Spanned<String>>,
        at: Range<usize>,
        field: &str,
        required: bool,
    ) -> Option<Secret> {
        let value = match (from_env, from_file) {
            (Some(_), Some(file)) => {
                self.problem(
                    file.span(),
                    format!("{field}_file"),
                    format!("set {field}_env or {field}_file, not both"),
                );
                return None;
            }
            (Some(var), None) => match (self.env)(var.get_ref()) {
                Some(v) => v,
                None => {
                    self.problem(
                        var.span(),
                        format!("{field}_env"),
                        format!("the environment variable {} is not set", var.get_ref()),
                    );
                    return None;
                }
            },
            (None, Some(file)) => match std::fs::read_to_string(self.path(file.get_ref())) {
                Ok(v) => v,
                Err(e) => {
                    let message = format!("cannot read {}: {e}", self.path(file.get_ref()).display());
                    self.problem(file.span(), format!("{field}_file"), message);
                    return None;
                }
            },
            (None, None) => {
                if required {
                    self.problem(at, field, format!("set {field}_env or {field}_file"));
                }
                return None;
            }
        };
        let value = value.trim().to_owned();
        if value.len() < MIN_SECRET_LEN || value.chars().any(char::is_whitespace) {
            self.problem(at, field, format!("the key must be at least {MIN_SECRET_LEN} characters with no whitespace"));
            return None;
        }
        Some(Secret::new(value))
    }

    fn addr(&mut self, value: Option<Spanned<String>>, field: &str) -> Option<SocketAddr> {
        let value = value?;
        match value.get_ref().parse() {
            Ok(a) => Some(a),
            Err(_) => {
                self.problem(
                    value.span(),
                    field,
                    format!("\"{}\" is not an address like 127.0.0.1:8080", value.get_ref()),
                );
                None
            }
        }
    }

    fn config(&mut self, raw: RawConfig) -> ProxyConfig {
        let grpc_listen = self.addr(raw.grpc_listen, "grpc_listen");
        let http_listen = self.addr(raw.http_listen, "http_listen");
        let redis_url = match (raw.redis_url, raw.redis_url_env) {
            (Some(url), None) => Some(Secret::new(self.non_empty(url, "redis_url"))),
            (None, Some(var)) => match (self.env)(var.get_ref()) {
                Some(url) if !url.trim().is_empty() => Some(Secret::new(url.trim())),
                _ => {
                    self.problem(
                        var.span(),
                        "redis_url_env",
                        format!("the environment variable {} is not set", var.get_ref()),
                    );
                    None
                }
            },
            (Some(url), Some(_)) => {
                self.problem(url.span(), "redis_url", "set redis_url or redis_url_env, not both");
                None
            }
            (None, None) => None,
        };
        if let Some(url) = &redis_url
            && let Err(e) = cohort_redis::RedisTarget::parse(url.expose())
        {
            // The message never repeats the URL (it may hold a password).
            self.whole_file("redis_url", e.to_string());
        }
        let redis_key_prefix = match raw.redis_key_prefix {
            Some(p) => {
                let span = p.span();
                let p = p.into_inner();
                if !cohort_core::config::is_plain_name(&p) {
                    self.problem(span, "redis_key_prefix", "use letters, digits, '.', '_' and '-'");
                }
                p
            }
            None => DEFAULT_REDIS_KEY_PREFIX.to_owned(),
        };
        let default_deadline =
            Duration::from_millis(self.int(raw.default_deadline_ms, "default_deadline_ms", 1, DEFAULT_DEADLINE_MS));
        let max_request_bytes = self.int(raw.max_request_bytes, "max_request_bytes", 1024, DEFAULT_MAX_REQUEST_BYTES);
        let output_tokens_estimate =
            self.int(raw.output_tokens_estimate, "output_tokens_estimate", 1, DEFAULT_OUTPUT_TOKENS_ESTIMATE);
        let header_read_timeout = Duration::from_millis(self.int(
            raw.header_read_timeout_ms,
            "header_read_timeout_ms",
            1,
            DEFAULT_HEADER_READ_TIMEOUT_MS,
        ));
        let body_read_timeout = Duration::from_millis(self.int(
            raw.body_read_timeout_ms,
            "body_read_timeout_ms",
            1,
            DEFAULT_BODY_READ_TIMEOUT_MS,
        ));
        let max_connections = self.int(raw.max_connections, "max_connections", 1, DEFAULT_MAX_CONNECTIONS);
        let metrics_key = match raw.metrics_key_env {
            Some(var) => {
                let span = var.span();
                self.secret(Some(var), None, span, "metrics_key", true)
            }
            None => None,
        };
        let trace_file = raw.trace_file.map(|f| self.path(f.get_ref()));
        let prices = match (raw.price_catalog, raw.prices) {
            (Some(file), None) => self.price_file(file),
            (None, Some(inline)) => {
                let checked = inline.into_inner().validate(self.file, self.text, "prices.");
                self.collect(checked)
            }
            (Some(file), Some(_)) => {
                self.problem(file.span(), "price_catalog", "set price_catalog or [prices], not both");
                None
            }
            (None, None) => None,
        };
        let retry = raw.retry.map(|r| self.retry(r)).unwrap_or_default();
        let upstreams = self.upstreams(raw.upstreams);
        let teams = self.teams(raw.teams);
        let judges = self.judges(raw.judges, &upstreams);
        ProxyConfig {
            grpc_listen,
            http_listen,
            strict: raw.strict,
            redis_url,
            redis_key_prefix,
            default_deadline,
            max_request_bytes,
            output_tokens_estimate,
            header_read_timeout,
            body_read_timeout,
            max_connections,
            metrics_key,
            trace_file,
            prices,
            retry,
            upstreams,
            teams,
            judges,
        }
    }

    fn price_file(&mut self, file: Spanned<String>) -> Option<PriceCatalog> {
        let path = self.path(file.get_ref());
        let label = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                self.problem(file.span(), "price_catalog", format!("cannot read {label}: {e}"));
                return None;
            }
        };
        self.collect(parse_price_catalog(&text, &label))
    }

    /// The value, or its problems added to the others.
    fn collect<T>(&mut self, checked: Result<T, Vec<Problem>>) -> Option<T> {
        checked.map_err(|problems| self.problems.extend(problems)).ok()
    }

    fn retry(&mut self, raw: Spanned<RawRetry>) -> RetryConfig {
        let span = raw.span();
        let raw = raw.into_inner();
        let d = RetryConfig::default();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let r = RetryConfig {
            max_attempts: self.int(raw.max_attempts, "retry.max_attempts", 1, d.max_attempts),
            initial_backoff: Duration::from_millis(self.int(
                raw.initial_backoff_ms,
                "retry.initial_backoff_ms",
                0,
                ms(d.initial_backoff),
            )),
            max_backoff: Duration::from_millis(self.int(
                raw.max_backoff_ms,
                "retry.max_backoff_ms",
                0,
                ms(d.max_backoff),
            )),
            max_total: Duration::from_millis(self.int(raw.max_total_ms, "retry.max_total_ms", 1, ms(d.max_total))),
            attempt_timeout: Duration::from_millis(self.int(
                raw.attempt_timeout_ms,
                "retry.attempt_timeout_ms",
                1,
                ms(d.attempt_timeout),
            )),
            jitter: raw.jitter.unwrap_or(d.jitter),
        };
        if r.max_backoff < r.initial_backoff {
            self.problem(span, "retry.max_backoff_ms", "must be at least retry.initial_backoff_ms");
        }
        r
    }

    fn upstreams(&mut self, raw: Vec<Spanned<RawUpstream>>) -> Vec<UpstreamConfig> {
        if raw.is_empty() {
            self.whole_file("upstreams", "no upstreams: add an [[upstreams]] table");
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, u) in raw.into_iter().enumerate() {
            let span = u.span();
            let u = u.into_inner();
            let f = |n: &str| format!("upstreams[{i}].{n}");
            let name = self.name(u.name, &f("name"), &mut seen, "upstream");
            let kind = *u.kind.get_ref();
            let base_url = match (kind, u.base_url) {
                // The sim calls nothing: a URL or a key would suggest it does.
                (UpstreamKind::Sim, Some(url)) => {
                    self.problem(url.span(), f("base_url"), "a sim upstream calls nothing: remove base_url");
                    SIM_BASE_URL.to_owned()
                }
                (UpstreamKind::Sim, None) => SIM_BASE_URL.to_owned(),
                (_, None) => {
                    self.problem(
                        span.clone(),
                        f("base_url"),
                        format!("set base_url: a {} upstream needs the provider's URL", kind.as_str()),
                    );
                    String::new()
                }
                (_, Some(url)) => {
                    let url_span = url.span();
                    let base_url = url.into_inner().trim_end_matches('/').to_owned();
                    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
                        self.problem(url_span, f("base_url"), "must start with http:// or https://");
                    }
                    base_url
                }
            };
            if kind == UpstreamKind::Sim && (u.api_key_env.is_some() || u.api_key_file.is_some()) {
                self.problem(
                    span.clone(),
                    f("api_key"),
                    "a sim upstream calls nothing: remove api_key_env/api_key_file",
                );
            }
            let api_key = if kind == UpstreamKind::Sim {
                None
            } else {
                self.secret(u.api_key_env, u.api_key_file, span.clone(), &f("api_key"), false)
            };
            let rpm: u32 = self.required_int(u.rpm, &f("rpm"), 1);
            let tpm: u64 = self.required_int(u.tpm, &f("tpm"), 1);
            let max_concurrency = self.int(u.max_concurrency, &f("max_concurrency"), 1, 16u32);
            let burst = self.int(u.burst, &f("burst"), 1, default_burst(rpm));
            let context_tokens = u.context_tokens.map(|v| self.required_int(v, &f("context_tokens"), 1));
            let max_output_tokens = u.max_output_tokens.map(|v| self.required_int(v, &f("max_output_tokens"), 1));
            let lower = |v: Vec<String>| v.into_iter().map(|h| h.trim().to_ascii_lowercase()).collect::<Vec<_>>();
            let served_model_headers = lower(u.served_model_headers);
            let served_provider_headers = lower(u.served_provider_headers);
            let forward_headers = lower(u.forward_headers);
            for h in served_model_headers.iter().chain(&served_provider_headers).chain(&forward_headers) {
                if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    self.problem(span.clone(), f("headers"), format!("\"{h}\" is not a valid header name"));
                }
                if matches!(h.as_str(), "authorization" | "x-api-key" | "cookie" | "proxy-authorization") {
                    self.problem(
                        span.clone(),
                        f("forward_headers"),
                        format!("\"{h}\" carries credentials: never forwarded"),
                    );
                }
            }
            out.push(UpstreamConfig {
                name,
                kind,
                base_url,
                api_key,
                rpm,
                tpm,
                max_concurrency,
                burst,
                context_tokens,
                max_output_tokens,
                served_model_headers,
                served_provider_headers,
                forward_headers,
                anthropic_version: u.anthropic_version.unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.to_owned()),
            });
        }
        out
    }

    fn teams(&mut self, raw: Vec<Spanned<RawTeam>>) -> Vec<TeamConfig> {
        if raw.is_empty() {
            self.whole_file("teams", "no teams: add a [[teams]] table");
        }
        let mut seen = HashSet::new();
        let mut out: Vec<TeamConfig> = Vec::new();
        for (i, t) in raw.into_iter().enumerate() {
            let span = t.span();
            let t = t.into_inner();
            let f = |n: &str| format!("teams[{i}].{n}");
            let name = self.name(t.name, &f("name"), &mut seen, "team");
            let weight = self.int(t.weight, &f("weight"), 1, 1u32);
            let admission_rps = self.int(t.admission_rps, &f("admission_rps"), 1, DEFAULT_ADMISSION_RPS);
            let Some(key) = self.secret(t.key_env, t.key_file, span.clone(), &f("key"), true) else { continue };
            if let Some(other) = out.iter().find(|o| o.key == key) {
                let message =
                    format!("team \"{name}\" has the same key as team \"{}\": every team needs its own", other.name);
                self.problem(span, f("key"), message);
                continue;
            }
            out.push(TeamConfig { name, key, weight, admission_rps });
        }
        out
    }

    fn judges(&mut self, raw: Vec<Spanned<RawJudge>>, upstreams: &[UpstreamConfig]) -> Vec<JudgeConfig> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, j) in raw.into_iter().enumerate() {
            let j = j.into_inner();
            let f = |n: &str| format!("judges[{i}].{n}");
            let name = self.name(j.name, &f("name"), &mut seen, "judge");
            let up_span = j.upstream.span();
            let upstream = j.upstream.into_inner();
            if !upstreams.iter().any(|u| u.name == upstream) {
                self.problem(up_span, f("upstream"), format!("no upstream is named \"{upstream}\""));
            }
            let model = self.non_empty(j.model, &f("model"));
            let served_model = j.served_model.map_or_else(|| model.clone(), |s| self.non_empty(s, &f("served_model")));
            let batch_size = self.int(j.batch_size, &f("batch_size"), 1, DEFAULT_BATCH_SIZE);
            let max_output_tokens =
                self.int(j.max_output_tokens, &f("max_output_tokens"), 1, 16 * u64::from(batch_size) + 64);
            let vendor_lineage = j.vendor_lineage.map(|l| self.non_empty(l, &f("vendor_lineage")));
            out.push(JudgeConfig {
                name,
                upstream,
                model,
                served_model,
                batch_size,
                max_output_tokens,
                vendor_lineage,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
strict = true

[[upstreams]]
name = "router"
kind = "openai"
base_url = "http://127.0.0.1:9/v1/"
api_key_env = "UPSTREAM_KEY"
rpm = 600
tpm = 100000

[[teams]]
name = "eval"
key_env = "TEAM_EVAL_KEY"
weight = 3

[[teams]]
name = "adhoc"
key_env = "TEAM_ADHOC_KEY"

[[judges]]
name = "default"
upstream = "router"
model = "judge-alias"
served_model = "judge-1"
"#;

    fn env(name: &str) -> Option<String> {
        match name {
            "UPSTREAM_KEY" => Some("sk-upstream-0123456789".into()),
            "TEAM_EVAL_KEY" => Some("team-eval-0123456789".into()),
            "TEAM_ADHOC_KEY" => Some("team-adhoc-0123456789".into()),
            _ => None,
        }
    }

    fn problems(text: &str) -> Vec<String> {
        match build_and_validate(text, "proxy.toml", Path::new("."), &env) {
            Ok(_) => Vec::new(),
            Err(ProxyError::Config(p)) => p.iter().map(ToString::to_string).collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn good_config_gets_defaults_and_keys() {
        let c = build_and_validate(GOOD, "proxy.toml", Path::new("."), &env).unwrap();
        let u = &c.upstreams[0];
        assert_eq!(u.base_url, "http://127.0.0.1:9/v1");
        assert_eq!((u.burst, u.max_concurrency), (5, 16), "half of a one-second bucket at 600 rpm");
        assert_eq!(u.api_key.as_ref().unwrap().expose(), "sk-upstream-0123456789");
        assert_eq!(c.teams[1].weight, 1);
        assert_eq!(c.judges[0].batch_size, DEFAULT_BATCH_SIZE);
        assert!(c.strict);
        assert!(!format!("{c:?}").contains("0123456789"), "Debug of a config never shows a key");
    }

    #[test]
    fn missing_env_key_names_the_variable_and_line() {
        let p = problems(&GOOD.replace("TEAM_ADHOC_KEY", "NOT_SET_ANYWHERE"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("proxy.toml:19:"), "{p:?}");
        assert!(p[0].contains("teams[1].key_env") && p[0].contains("NOT_SET_ANYWHERE"), "{p:?}");
    }

    #[test]
    fn unknown_upstream_and_bad_rpm_are_both_reported() {
        let text = GOOD.replace("upstream = \"router\"", "upstream = \"nope\"").replace("rpm = 600", "rpm = 0");
        let p = problems(&text);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().any(|m| m.contains("upstreams[0].rpm") && m.contains("proxy.toml:9:")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("judges[0].upstream") && m.contains("\"nope\"")), "{p:?}");
    }

    #[test]
    fn unknown_field_and_kind_are_refused() {
        let p = problems(&GOOD.replace("kind = \"openai\"", "kind = \"gemini\""));
        assert!(p[0].contains("proxy.toml:6:") && p[0].contains("gemini"), "{p:?}");
        let p = problems(&GOOD.replace("strict = true", "strict = true\ncolour = 1"));
        assert!(p[0].contains("colour"), "{p:?}");
    }

    #[test]
    fn shared_team_keys_are_refused_without_printing_them() {
        let p = problems(&GOOD.replace("TEAM_ADHOC_KEY", "TEAM_EVAL_KEY"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("same key"), "{p:?}");
        assert!(!p[0].contains("0123456789"), "{p:?}");
    }

    /// The HTTP face's limits have their defaults; set, they are checked,
    /// and a metrics key comes from the variable `metrics_key_env` names.
    #[test]
    fn http_face_limits_and_metrics_key() {
        let c = build_and_validate(GOOD, "proxy.toml", Path::new("."), &env).unwrap();
        assert_eq!(c.header_read_timeout, Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS));
        assert_eq!(c.body_read_timeout, Duration::from_millis(DEFAULT_BODY_READ_TIMEOUT_MS));
        assert_eq!((c.max_connections, c.teams[0].admission_rps), (DEFAULT_MAX_CONNECTIONS, DEFAULT_ADMISSION_RPS));
        assert!(c.metrics_key.is_none(), "/metrics is open by default");
        let text = GOOD
            .replace(
                "strict = true",
                "strict = true\nheader_read_timeout_ms = 1000\nmax_connections = 8\nmetrics_key_env = \"UPSTREAM_KEY\"",
            )
            .replace("weight = 3", "weight = 3\nadmission_rps = 20");
        let c = build_and_validate(&text, "proxy.toml", Path::new("."), &env).unwrap();
        assert_eq!((c.header_read_timeout, c.max_connections), (Duration::from_secs(1), 8));
        assert_eq!((c.teams[0].admission_rps, c.teams[1].admission_rps), (20, DEFAULT_ADMISSION_RPS));
        assert_eq!(c.metrics_key.as_ref().unwrap().expose(), "sk-upstream-0123456789");
        let p =
            problems(&GOOD.replace("strict = true", "strict = true\nmax_connections = 0\nmetrics_key_env = \"NOPE\""));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().any(|m| m.contains("max_connections")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("metrics_key_env") && m.contains("NOPE")), "{p:?}");
    }

    #[test]
    fn credential_headers_are_never_forwarded() {
        let p = problems(&GOOD.replace("tpm = 100000", "tpm = 100000\nforward_headers = [\"Authorization\"]"));
        assert!(p[0].contains("never forwarded"), "{p:?}");
    }

    #[test]
    fn key_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key.txt"), "sk-from-file-0123456789\n").unwrap();
        let text = GOOD.replace("api_key_env = \"UPSTREAM_KEY\"", "api_key_file = \"key.txt\"");
        let c = build_and_validate(&text, "proxy.toml", dir.path(), &env).unwrap();
        assert_eq!(c.upstreams[0].api_key.as_ref().unwrap().expose(), "sk-from-file-0123456789");
    }

    #[test]
    fn price_file_problems_name_the_price_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("prices.toml"),
            "currency = \"USD\"\n[models.\"judge-1\"]\ninput_per_million_tokens = -1.0\noutput_per_million_tokens = 2.0\n",
        )
        .unwrap();
        let text = format!("price_catalog = \"prices.toml\"\n{GOOD}");
        let err = build_and_validate(&text, "proxy.toml", dir.path(), &env).unwrap_err().to_string();
        assert!(err.contains("prices.toml:3:") && err.contains("models.judge-1.input_per_million_tokens"), "{err}");
    }
}
