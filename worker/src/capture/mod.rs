//! Source capture: fetch each cited URL, record whether it was accessible,
//! and recover its readable text for the judge (SPEC section 5; seed 000
//! section 4).
//!
//! Every fetch is bounded: a total timeout and a connect timeout, a size
//! cap (the body is read chunk by chunk and reading stops at the cap), a
//! bounded redirect chain, http(s) only, no reserved domains and, unless
//! configured otherwise, no private addresses ([`guard`]). The body and the
//! extracted text go to the artifact store under their SHA-256, so the
//! run record holds hashes and a trace's snippet can be checked against
//! the stored capture.
//!
//! A capture never invents text: a source that failed (dead link, timeout,
//! non-200, PDF, script-only page) has `text: None`, and the claims that
//! rest only on such sources are unjudged (`source_unavailable`), never
//! judged against a placeholder.

pub mod extract;
pub mod guard;
pub mod published;

use std::collections::HashMap;
use std::error::Error as _;
use std::time::Duration;

use cohort_artifacts::ArtifactStore;
use futures_util::StreamExt;
use tracing::debug;
use url::Url;

use self::extract::BodyKind;
use self::guard::{DnsFailure, GuardedResolver, Refusal};

/// Sent with every capture, so site operators can tell what we are.
pub const DEFAULT_USER_AGENT: &str = "cohort-source-capture/0.1 (+citation-fidelity benchmark)";

/// What the capturer accepts, preferred first.
const ACCEPT: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,*/*;q=0.5";

/// How sources are fetched.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// The whole fetch (connect, redirects, body) of one URL.
    pub timeout: Duration,
    /// One TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Bytes of body kept; the rest is not read (`truncated`).
    pub max_bytes: usize,
    /// Redirects followed; one more is an error.
    pub max_redirects: usize,
    pub user_agent: String,
    /// Fetch loopback, private and link-local addresses too. Off in
    /// production (a cited URL must not reach the worker's own network);
    /// on in tests, whose servers listen on 127.0.0.1.
    pub allow_private_addresses: bool,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
            max_bytes: 5 * 1024 * 1024,
            max_redirects: 5,
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            allow_private_addresses: false,
        }
    }
}

/// A capture of `url` begun now, nothing fetched yet.
fn started(url: &str) -> Capture {
    Capture {
        url: url.to_owned(),
        final_url: None,
        http_status: None,
        accessible: false,
        content_type: None,
        accessed_at: crate::record::rfc3339_ms(cohort_clock::now_ms()),
        published_at: None,
        published_at_as_written: false,
        published_at_source: None,
        bytes: 0,
        raw_sha256: None,
        text_sha256: None,
        text: None,
        error: None,
        failure: None,
        truncated: false,
    }
}

/// `capture` failed with `failure`, said as `error`.
fn fail(mut capture: Capture, failure: CaptureFailure, error: impl Into<String>) -> Capture {
    let error = error.into();
    debug!(url = %capture.url, ?failure, %error, "source not captured");
    capture.failure = Some(failure);
    capture.error = Some(error);
    capture
}

/// The capture types of the run record live with it.
pub use cohort_records::capture::{Capture, CaptureFailure};

/// The capturer could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot build the http client for source capture: {0}")]
    Client(#[from] reqwest::Error),
}

/// Fetches sources and stores what it got. Cheap to share by reference;
/// one HTTP client (connection pool) per capturer.
#[derive(Debug)]
pub struct SourceCapturer {
    config: CaptureConfig,
    store: ArtifactStore,
    client: reqwest::Client,
}

impl SourceCapturer {
    /// A capturer storing into `store`. Fails only when the TLS backend
    /// cannot be set up.
    pub fn new(config: CaptureConfig, store: ArtifactStore) -> Result<SourceCapturer, CaptureError> {
        let allow_private = config.allow_private_addresses;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(guard::redirect_policy(config.max_redirects, allow_private))
            .dns_resolver(GuardedResolver { allow_private })
            .user_agent(config.user_agent.clone())
            // A proxy would resolve names itself, out of reach of the
            // address guard; environment proxies are ignored.
            .no_proxy()
            .referer(false)
            .build()?;
        Ok(SourceCapturer { config, store, client })
    }

    pub fn config(&self) -> &CaptureConfig {
        &self.config
    }

    /// Captures `urls` with at most `concurrency` fetches at once; the
    /// result has one capture per URL, in the same order. A URL cited twice
    /// is fetched once.
    pub async fn capture_all(&self, urls: &[String], concurrency: usize) -> Vec<Capture> {
        let mut unique: Vec<&str> = Vec::new();
        let mut position: HashMap<&str, usize> = HashMap::new();
        for url in urls {
            position.entry(url.as_str()).or_insert_with(|| {
                unique.push(url.as_str());
                unique.len() - 1
            });
        }
        // Owned URLs: a stream of futures borrowing `&str` items makes the
        // caller's future fail `Send` checks when spawned (rustc #102211).
        let owned: Vec<String> = unique.iter().map(|u| (*u).to_owned()).collect();
        let captured: Vec<Capture> = futures_util::stream::iter(owned)
            .map(|u: String| async move { self.capture(&u).await })
            .buffered(concurrency.max(1))
            .collect()
            .await;
        urls.iter().filter_map(|u| position.get(u.as_str()).and_then(|&i| captured.get(i)).cloned()).collect()
    }

    /// Fetches one URL. Never fails: what went wrong is in the capture.
    pub async fn capture(&self, url: &str) -> Capture {
        let capture = started(url);
        let parsed = match Url::parse(url.trim()) {
            Ok(u) => u,
            Err(e) => return fail(capture, CaptureFailure::InvalidUrl, format!("invalid url: {e}")),
        };
        if let Err(refusal) = guard::check_url(&parsed, self.config.allow_private_addresses) {
            return fail(capture, refusal_failure(&refusal), refusal.to_string());
        }
        match self.client.get(parsed).header(reqwest::header::ACCEPT, ACCEPT).send().await {
            Ok(response) => self.read(capture, response).await,
            Err(e) => {
                let mut capture = capture;
                capture.final_url = e.url().map(Url::to_string);
                let (failure, message) = self.describe(&e);
                fail(capture, failure, message)
            }
        }
    }

    async fn read(&self, mut capture: Capture, mut response: reqwest::Response) -> Capture {
        let status = response.status();
        capture.final_url = Some(response.url().to_string());
        capture.http_status = Some(status.as_u16());
        capture.accessible = status == reqwest::StatusCode::OK;
        capture.content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());

        let (body, truncated) = match read_capped(&mut response, self.config.max_bytes).await {
            Ok(read) => read,
            Err(e) => {
                let (failure, message) = self.describe(&e);
                return fail(capture, failure, message);
            }
        };
        capture.bytes = body.len() as u64;
        capture.truncated = truncated;
        // Kept whatever the status, for audit: what the link served.
        let body = std::sync::Arc::new(body);
        match self.put(std::sync::Arc::clone(&body)).await {
            Ok(sha) => capture.raw_sha256 = Some(sha),
            Err(e) => return fail(capture, CaptureFailure::Store, format!("artifact store: {e}")),
        }
        if !capture.accessible {
            return fail(capture, CaptureFailure::NonSuccess, format!("non-200: HTTP {status}"));
        }
        let content_type = capture.content_type.clone();
        let kind = extract::classify(content_type.as_deref(), &body);
        if kind == BodyKind::Other {
            let shown = content_type.as_deref().map(extract::media_type).unwrap_or_else(|| "(none)".to_owned());
            return fail(
                capture,
                CaptureFailure::UnsupportedContentType,
                format!("content type {shown}: no text extracted"),
            );
        }
        // Parsing megabytes of HTML is CPU work: off the async threads.
        let page = tokio::task::spawn_blocking(move || {
            let decoded = extract::decode(&body, content_type.as_deref(), kind);
            match kind {
                BodyKind::Html => extract::read_html(&decoded),
                _ => Ok(extract::HtmlPage { text: decoded, published: None }),
            }
        })
        .await;
        let page = match page {
            Ok(Ok(p)) => p,
            Ok(Err(too_deep)) => return fail(capture, CaptureFailure::NoText, too_deep.to_string()),
            Err(e) => return fail(capture, CaptureFailure::Other, format!("text extraction failed: {e}")),
        };
        // Metadata of what the link served: kept even when the page has no
        // readable text.
        if let Some(date) = page.published {
            capture.published_at = Some(date.value);
            capture.published_at_as_written = date.as_written;
            capture.published_at_source = Some(date.source);
        }
        let text = page.text;
        if text.trim().is_empty() {
            return fail(capture, CaptureFailure::NoText, "no readable text in the page");
        }
        let text_bytes = std::sync::Arc::new(text.into_bytes());
        match self.put(std::sync::Arc::clone(&text_bytes)).await {
            Ok(sha) => capture.text_sha256 = Some(sha),
            Err(e) => return fail(capture, CaptureFailure::Store, format!("artifact store: {e}")),
        }
        // The bytes came from a `String`, so this is never lossy.
        capture.text = Some(String::from_utf8_lossy(&text_bytes).into_owned());
        if truncated {
            let max = self.config.max_bytes;
            return fail(
                capture,
                CaptureFailure::TooLarge,
                format!("too large: body over {max} bytes; text is from the first {max}"),
            );
        }
        capture
    }

    /// Stores bytes without blocking the async threads (the store syncs to
    /// disk).
    async fn put(&self, bytes: std::sync::Arc<Vec<u8>>) -> std::io::Result<String> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.put(&bytes)).await.map_err(std::io::Error::other)?
    }

    /// The failure class and message of a reqwest error, from the most
    /// specific cause in its chain.
    fn describe(&self, e: &reqwest::Error) -> (CaptureFailure, String) {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = e.source();
        let mut refused = false;
        let mut innermost = e.to_string();
        while let Some(c) = cause {
            if let Some(r) = c.downcast_ref::<Refusal>() {
                return (refusal_failure(r), r.to_string());
            }
            if let Some(d) = c.downcast_ref::<DnsFailure>() {
                return (CaptureFailure::Dns, d.to_string());
            }
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
            }
            innermost = c.to_string();
            cause = c.source();
        }
        if e.is_timeout() {
            return (CaptureFailure::Timeout, format!("timeout after {:?}", self.config.timeout));
        }
        if refused {
            return (CaptureFailure::ConnectionRefused, "connection refused".to_owned());
        }
        if e.is_redirect() {
            return (
                CaptureFailure::TooManyRedirects,
                format!("too many redirects (more than {})", self.config.max_redirects),
            );
        }
        if e.is_connect() {
            return (CaptureFailure::Connect, format!("connect: {innermost}"));
        }
        (CaptureFailure::Other, format!("fetch failed: {innermost}"))
    }
}

fn refusal_failure(r: &Refusal) -> CaptureFailure {
    match r {
        Refusal::Scheme(_) | Refusal::NoHost => CaptureFailure::InvalidUrl,
        Refusal::ReservedDomain(_) => CaptureFailure::ReservedDomain,
        Refusal::PrivateAddress { .. } => CaptureFailure::NotAllowed,
        Refusal::TooManyRedirects(_) => CaptureFailure::TooManyRedirects,
    }
}

/// Reads the body chunk by chunk, keeping at most `max` bytes; `true` when
/// there was more (the rest is never read).
async fn read_capped(response: &mut reqwest::Response, max: usize) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let hint = response.content_length().and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
    let mut body = Vec::with_capacity(hint.min(max).min(1024 * 1024));
    while let Some(chunk) = response.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}
