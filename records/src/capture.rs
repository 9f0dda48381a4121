//! A fetched source as the run record keeps it (the worker's
//! `capture::SourceCapturer` makes them).

use serde::{Deserialize, Serialize};

/// Why a capture failed or is incomplete, for counting in reports; the
/// `error` string of [`Capture`] says the same for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureFailure {
    InvalidUrl,
    ReservedDomain,
    NotAllowed,
    Dns,
    ConnectionRefused,
    Connect,
    Timeout,
    TooManyRedirects,
    /// Answered with a status other than 200.
    NonSuccess,
    /// The body exceeded `max_bytes`; the text is from the first part.
    TooLarge,
    UnsupportedContentType,
    /// A text content type without any readable text (a script-only page).
    NoText,
    /// The capture could not be stored.
    Store,
    Other,
}

/// One fetched source, as kept in the run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    /// The URL as cited.
    pub url: String,
    /// Where the last request went (after redirects); `None` when nothing
    /// was requested.
    pub final_url: Option<String>,
    pub http_status: Option<u16>,
    /// Link accessibility: the final answer was HTTP 200.
    pub accessible: bool,
    /// The Content-Type header as sent.
    pub content_type: Option<String>,
    /// When the fetch started (RFC 3339, UTC, milliseconds:
    /// [`crate::record::rfc3339_ms`]).
    pub accessed_at: String,
    /// The page's publication date from its own metadata
    /// ([`published`]): ISO 8601 when it reads as a date, else the text as
    /// written (`published_at_as_written`); `None` when the page gives none
    /// or was not read (never guessed).
    #[serde(default)]
    pub published_at: Option<String>,
    /// `published_at` is the page's text as written: not a date this
    /// version can read.
    #[serde(default)]
    pub published_at_as_written: bool,
    /// Which metadata gave `published_at` (`meta article:published_time`,
    /// `json-ld datePublished`...).
    #[serde(default)]
    pub published_at_source: Option<String>,
    /// Body bytes kept (at most `max_bytes`).
    pub bytes: u64,
    /// The body in the artifact store.
    pub raw_sha256: Option<String>,
    /// The extracted text (UTF-8) in the artifact store.
    pub text_sha256: Option<String>,
    /// The extracted readable text, for passage selection. Not serialised:
    /// the record holds `text_sha256`, not megabytes of text.
    #[serde(skip)]
    pub text: Option<String>,
    /// Why the capture failed or is incomplete.
    pub error: Option<String>,
    pub failure: Option<CaptureFailure>,
    /// The body was longer than `max_bytes` and was cut there.
    pub truncated: bool,
}
