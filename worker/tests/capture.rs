//! Source capture against a real HTTP server on 127.0.0.1:0: what is
//! fetched, what is refused, what text comes out, and what is stored.
//! All traffic stays on the loopback interface; timeouts are bounds, never
//! timed assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use cohort_artifacts::store::ArtifactStore;
use cohort_worker::capture::guard::{GuardedResolver, Refusal};
use cohort_worker::capture::{Capture, CaptureConfig, CaptureFailure, SourceCapturer};
use reqwest::dns::Resolve;

const ARTICLE: &str = r#"<!doctype html>
<html><head><title>Orbital debris</title>
<style>.banner { color: red } /* STYLE-NOISE */</style>
<script>window.tracker = "SCRIPT-NOISE";</script></head>
<body>
<header><a href="/">NAV-HEADER-NOISE</a></header>
<nav><ul><li>NAV-NOISE Home</li><li>About</li></ul></nav>
<article>
<h1>The Kessler syndrome</h1>
<p>In 1978 Donald Kessler proposed that collisions between objects in low
Earth orbit could cascade, each collision creating debris that raises the
likelihood of further collisions.</p>
<p>Studies since then estimate more than 30,000 tracked objects in orbit.</p>
<noscript>NOSCRIPT-NOISE</noscript>
</article>
<footer>FOOTER-NOISE Copyright</footer>
<script>console.log("SCRIPT-NOISE-2")</script>
</body></html>"#;

const NOISE: &[&str] = &[
    "STYLE-NOISE",
    "SCRIPT-NOISE",
    "NAV-HEADER-NOISE",
    "NAV-NOISE",
    "NOSCRIPT-NOISE",
    "FOOTER-NOISE",
    "tracker",
    "console",
];

/// A test server and what it counts.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn start_server() -> Server {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new()
        .route("/article", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], ARTICLE) }))
        .route(
            "/plain",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "Plain naïve text ✓.\n\nSecond paragraph.")
            }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/html")], "<p>Not found</p>") }),
        )
        .route("/broken", get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "<p>Internal error</p>") }))
        .route("/r/{n}", get(|Path(n): Path<u32>| async move { redirect(n) }))
        .route(
            "/to-reserved",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "http://sim.cohort.invalid/x")]) }),
        )
        .route("/big", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "0123456789abcdef".repeat(200 * 64)) }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "too late"
            }),
        )
        .route(
            "/pdf",
            get(|| async {
                ([(header::CONTENT_TYPE, "application/pdf")], &b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"[..])
            }),
        )
        .route(
            "/latin1",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=ISO-8859-1")],
                    &b"<html><body><p>Caf\xe9 na\xefve r\xe9sum\xe9</p></body></html>"[..],
                )
            }),
        )
        .route(
            "/latin1-meta",
            get(|| async {
                let body =
                    &b"<html><head><meta charset=\"iso-8859-1\"></head><body><p>D\xe9j\xe0 vu</p></body></html>"[..];
                ([(header::CONTENT_TYPE, "text/html")], body)
            }),
        )
        .route(
            "/dated",
            get(|| async {
                let body = r#"<html><head><meta property="article:published_time" content="2024-05-01T14:30:00+01:00">
                    </head><body><article><p>Dated article text.</p></article></body></html>"#;
                ([(header::CONTENT_TYPE, "text/html")], body)
            }),
        )
        .route(
            "/script-only",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/html")], "<html><body><script>render()</script></body></html>")
            }),
        )
        .route(
            "/count",
            get(move || {
                let hits = Arc::clone(&counted);
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    "counted"
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { addr, hits }
}

fn redirect(n: u32) -> impl IntoResponse {
    let next = if n == 0 { "/article".to_owned() } else { format!("/r/{}", n - 1) };
    (StatusCode::FOUND, [(header::LOCATION, next)])
}

/// A capturer for the test server (private addresses allowed) with
/// generous bounds, except where a test narrows them.
fn capturer(store: &ArtifactStore, tweak: impl FnOnce(&mut CaptureConfig)) -> SourceCapturer {
    let mut config = CaptureConfig {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        max_bytes: 1024 * 1024,
        max_redirects: 5,
        allow_private_addresses: true,
        ..CaptureConfig::default()
    };
    tweak(&mut config);
    SourceCapturer::new(config, store.clone()).unwrap()
}

fn stored(store: &ArtifactStore, sha: Option<&String>) -> Vec<u8> {
    store.get(sha.expect("a hash")).unwrap().expect("stored")
}

/// An HTML article is accessible (200), its readable text keeps the
/// article and drops script, style, nav, header and footer noise, and both
/// the raw body and the text are in the artifact store under their hashes.
#[tokio::test]
async fn html_article_is_captured_as_readable_text() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/article")).await;

    assert_eq!(c.error, None);
    assert!(c.accessible);
    assert_eq!(c.http_status, Some(200));
    assert_eq!(c.content_type.as_deref(), Some("text/html; charset=utf-8"));
    assert_eq!(c.final_url.as_deref(), Some(server.url("/article").as_str()));
    // RFC 3339 UTC with exactly three fractional digits.
    let at = c.accessed_at.as_bytes();
    assert!(at.len() == 24 && at[19] == b'.' && at[23] == b'Z', "{}", c.accessed_at);
    assert_eq!((c.published_at.as_deref(), c.published_at_source.as_deref()), (None, None), "no date metadata");
    assert_eq!(c.bytes, ARTICLE.len() as u64);
    let text = c.text.as_deref().unwrap();
    assert!(text.starts_with("The Kessler syndrome\n\nIn 1978 Donald Kessler proposed"), "{text}");
    assert!(text.contains("more than 30,000 tracked objects"));
    for noise in NOISE {
        assert!(!text.contains(noise), "{noise} leaked into {text:?}");
    }
    assert_eq!(stored(&store, c.raw_sha256.as_ref()), ARTICLE.as_bytes());
    assert_eq!(stored(&store, c.text_sha256.as_ref()), text.as_bytes());
}

/// Plain text is kept as is (UTF-8 losslessly); the record serialises the
/// hash, not the text.
#[tokio::test]
async fn plain_text_is_kept_verbatim_and_not_serialised() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/plain")).await;
    assert_eq!(c.text.as_deref(), Some("Plain naïve text ✓.\n\nSecond paragraph."));
    assert!(c.accessible && c.error.is_none());
    let json = serde_json::to_value(&c).unwrap();
    assert!(json.get("text").is_none());
    assert_eq!(json["text_sha256"].as_str(), c.text_sha256.as_deref());
    let back: Capture = serde_json::from_value(json).unwrap();
    assert_eq!(back.text, None);
    assert_eq!(back.raw_sha256, c.raw_sha256);
}

/// 404 and 500 are not accessible and yield no text (an error page is not
/// the source), but what they served is stored for audit.
#[tokio::test]
async fn non_200_is_inaccessible_without_text() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let capturer = capturer(&store, |_| {});
    for (path, status) in [("/missing", 404), ("/broken", 500)] {
        let c = capturer.capture(&server.url(path)).await;
        assert_eq!(c.http_status, Some(status));
        assert!(!c.accessible);
        assert_eq!(c.text, None);
        assert_eq!(c.text_sha256, None);
        assert_eq!(c.failure, Some(CaptureFailure::NonSuccess));
        assert!(c.error.as_deref().unwrap().starts_with("non-200"), "{:?}", c.error);
        assert!(!stored(&store, c.raw_sha256.as_ref()).is_empty());
    }
}

/// A redirect chain within the limit is followed to the article; one
/// beyond it is an error with no text.
#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let capturer = capturer(&store, |c| c.max_redirects = 5);

    // /r/4 -> /r/3 -> /r/2 -> /r/1 -> /r/0 -> /article: five redirects.
    let ok = capturer.capture(&server.url("/r/4")).await;
    assert!(ok.accessible, "{:?}", ok.error);
    assert_eq!(ok.final_url.as_deref(), Some(server.url("/article").as_str()));
    assert!(ok.text.as_deref().unwrap().contains("Kessler"));

    // Six redirects: one too many.
    let too_many = capturer.capture(&server.url("/r/5")).await;
    assert_eq!(too_many.failure, Some(CaptureFailure::TooManyRedirects), "{:?}", too_many.error);
    assert!(too_many.error.as_deref().unwrap().starts_with("too many redirects"));
    assert!(!too_many.accessible);
    assert_eq!(too_many.text, None);
}

/// A redirect to a reserved domain is refused at that hop, like the URL
/// itself would be.
#[tokio::test]
async fn redirect_targets_are_checked() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/to-reserved")).await;
    assert_eq!(c.failure, Some(CaptureFailure::ReservedDomain), "{:?}", c.error);
    assert_eq!(c.text, None);
}

/// A body larger than `max_bytes` is read only up to the cap: the prefix
/// is stored, the capture is marked truncated, and its text is the real
/// text of that prefix.
#[tokio::test]
async fn bodies_over_the_cap_are_truncated() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |c| c.max_bytes = 64 * 1024).capture(&server.url("/big")).await;
    assert!(c.truncated);
    assert_eq!(c.bytes, 64 * 1024);
    assert_eq!(c.failure, Some(CaptureFailure::TooLarge));
    assert!(c.error.as_deref().unwrap().starts_with("too large"));
    let raw = stored(&store, c.raw_sha256.as_ref());
    assert_eq!(raw.len(), 64 * 1024);
    assert!(raw.starts_with(b"0123456789abcdef0123"));
    assert_eq!(c.text.as_deref().map(str::len), Some(64 * 1024));
}

/// A response slower than the timeout ends as a timeout, without text.
#[tokio::test]
async fn slow_responses_time_out() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |c| c.timeout = Duration::from_millis(300)).capture(&server.url("/slow")).await;
    assert_eq!(c.failure, Some(CaptureFailure::Timeout), "{:?}", c.error);
    assert!(c.error.as_deref().unwrap().starts_with("timeout"));
    assert_eq!(c.http_status, None);
    assert_eq!(c.text, None);
}

/// A PDF is accessible and stored, but yields no text and says why.
#[tokio::test]
async fn pdf_is_stored_without_text() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/pdf")).await;
    assert!(c.accessible);
    assert_eq!(c.text, None);
    assert_eq!(c.text_sha256, None);
    assert_eq!(c.error.as_deref(), Some("content type application/pdf: no text extracted"));
    assert!(stored(&store, c.raw_sha256.as_ref()).starts_with(b"%PDF-1.4"));
}

/// ISO-8859-1 HTML decodes correctly, whether the charset is in the
/// Content-Type header or only in a `<meta charset>`.
#[tokio::test]
async fn latin1_html_decodes() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let capturer = capturer(&store, |_| {});
    let header = capturer.capture(&server.url("/latin1")).await;
    assert_eq!(header.text.as_deref(), Some("Café naïve résumé"));
    let meta = capturer.capture(&server.url("/latin1-meta")).await;
    assert_eq!(meta.text.as_deref(), Some("Déjà vu"));
    // The stored text is UTF-8.
    assert_eq!(stored(&store, meta.text_sha256.as_ref()), "Déjà vu".as_bytes());
}

/// A page with no readable text (script-only) has no text rather than an
/// empty or placeholder one.
#[tokio::test]
async fn script_only_page_has_no_text() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/script-only")).await;
    assert!(c.accessible);
    assert_eq!(c.text, None);
    assert_eq!(c.failure, Some(CaptureFailure::NoText));
}

/// With private addresses not allowed (the default), loopback URLs, by
/// literal IP or as `localhost`, are refused before any request is sent.
#[tokio::test]
async fn loopback_is_refused_by_default() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let capturer = SourceCapturer::new(CaptureConfig::default(), store).unwrap();
    let by_ip = capturer.capture(&server.url("/count")).await;
    assert_eq!(by_ip.failure, Some(CaptureFailure::NotAllowed), "{:?}", by_ip.error);
    assert!(by_ip.error.as_deref().unwrap().starts_with("not allowed (private address)"));
    let by_name = capturer.capture(&format!("http://localhost:{}/count", server.addr.port())).await;
    assert_eq!(by_name.failure, Some(CaptureFailure::NotAllowed), "{:?}", by_name.error);
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
    assert_eq!(by_ip.http_status, None);
}

/// The resolver the client connects through refuses names that resolve
/// only to private addresses (the check behind every redirect hop), and
/// passes them when allowed.
#[tokio::test]
async fn resolver_refuses_private_resolutions() {
    let refused = GuardedResolver { allow_private: false }.resolve("localhost".parse().unwrap()).await;
    let err = refused.err().expect("refused");
    assert!(matches!(err.downcast_ref::<Refusal>(), Some(Refusal::PrivateAddress { .. })), "{err}");
    let allowed = GuardedResolver { allow_private: true }.resolve("localhost".parse().unwrap()).await;
    assert!(allowed.unwrap().all(|a| a.ip().is_loopback()));
}

/// A reserved domain fails at once with the reserved-domain error: no
/// request, no DNS.
#[tokio::test]
async fn reserved_domain_fails_immediately() {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture("https://sim.cohort.invalid/x").await;
    assert_eq!(c.error.as_deref(), Some("reserved domain (RFC 2606): never resolvable"));
    assert_eq!(c.failure, Some(CaptureFailure::ReservedDomain));
    assert_eq!(c.final_url, None);
    assert_eq!(c.http_status, None);
    assert!(!c.accessible);
}

/// Nothing listening on the port: connection refused.
#[tokio::test]
async fn connection_refused_is_reported() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(c.failure, Some(CaptureFailure::ConnectionRefused), "{:?}", c.error);
    assert_eq!(c.error.as_deref(), Some("connection refused"));
    assert!(!c.accessible);
}

/// Bad URLs and other schemes are refused with an invalid-url error.
#[tokio::test]
async fn invalid_urls_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let capturer = capturer(&store, |_| {});
    for url in ["not a url", "file:///etc/passwd", "ftp://127.0.0.1/x", "http://"] {
        let c = capturer.capture(url).await;
        assert_eq!(c.failure, Some(CaptureFailure::InvalidUrl), "{url}: {:?}", c.error);
        assert!(c.error.as_deref().unwrap().starts_with("invalid url"), "{url}: {:?}", c.error);
    }
}

/// `capture_all` returns one capture per URL in input order, fetching a
/// repeated URL once.
#[tokio::test]
async fn capture_all_preserves_order_and_dedups() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let urls = vec![server.url("/count"), server.url("/plain"), server.url("/count"), server.url("/missing")];
    let captures = capturer(&store, |_| {}).capture_all(&urls, 2).await;
    assert_eq!(
        captures.iter().map(|c| c.url.as_str()).collect::<Vec<_>>(),
        urls.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(captures[0].text.as_deref(), Some("counted"));
    assert_eq!(captures[0], captures[2]);
    assert_eq!(captures[3].http_status, Some(404));
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
}

/// A page's publication date from its metadata reaches the capture,
/// normalised to UTC, with its source, and into the serialised record.
#[tokio::test]
async fn publication_date_is_captured() {
    let server = start_server().await;
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::local(dir.path());
    let c = capturer(&store, |_| {}).capture(&server.url("/dated")).await;
    assert!(c.accessible && c.error.is_none(), "{:?}", c.error);
    assert_eq!(c.published_at.as_deref(), Some("2024-05-01T13:30:00Z"));
    assert!(!c.published_at_as_written);
    assert_eq!(c.published_at_source.as_deref(), Some("meta article:published_time"));
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["published_at"], "2024-05-01T13:30:00Z");
    assert_eq!(json["published_at_as_written"], false);
}
