//! URL canonicalisation for citation normalisation (seed 000 section 4,
//! step 1): two links to the same page must get one index, and two links to
//! different pages must not.
//!
//! The canonical form is what the `url` crate (WHATWG URL parsing) gives,
//! which lowercases the scheme and host, punycodes international hosts,
//! drops the scheme's default port and resolves `.`/`..` path segments; on
//! top of that the fragment is dropped and tracking parameters are removed.
//! Every other query parameter is kept, byte for byte as written and in its
//! original order, because parameters such as `page`, `section`, `id`, `v`,
//! `lang` and `tab` tell distinct pages of one site apart. Nothing else is
//! guessed: `www.` is not stripped, trailing slashes and path case are kept,
//! since a site may serve different pages there.

use url::Url;

/// The longest URL canonicalised. Longer ones are refused rather than
/// parsed: a citation URL of more than 8 KiB is not a source anyone can
/// open, and the cap keeps the work per link bounded.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// Exact query-parameter names (compared case-insensitively, after
/// percent-decoding) that only track the click and never select content.
/// `utm_*` is matched as a prefix, see [`is_tracking_parameter`].
pub const TRACKING_PARAMETERS: &[&str] = &[
    "ref",
    "ref_src",
    "ref_url",
    "fbclid",
    "gclid",
    "gclsrc",
    "dclid",
    "gbraid",
    "wbraid",
    "msclkid",
    "mc_cid",
    "mc_eid",
    "_ga",
    "_gl",
    "yclid",
    "igshid",
    "twclid",
    "ttclid",
    "li_fat_id",
    "mkt_tok",
    "_hsenc",
    "_hsmi",
    "__hstc",
    "__hssc",
    "__hsfp",
    "hsctatracking",
    "vero_id",
    "vero_conv",
    "oly_anon_id",
    "oly_enc_id",
    "rb_clickid",
    "s_cid",
    "srsltid",
    "wickedid",
];

/// Why a URL could not be canonicalised. A link with such a URL is not a
/// web source, so it gets no citation index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("the url is {len} bytes long; at most {MAX_URL_BYTES} bytes are accepted")]
    TooLong { len: usize },
    #[error("not a valid absolute url: {0}")]
    Invalid(#[from] url::ParseError),
    #[error("the scheme `{0}` is not a web source; only http and https urls are citations")]
    NotWeb(String),
}

/// Whether the query parameter `name` (raw, as written) is on the tracking
/// denylist: `utm_*`, or one of [`TRACKING_PARAMETERS`].
pub fn is_tracking_parameter(name: &str) -> bool {
    // Decoding borrows the name unless it holds `%` or `+`; the denylist is
    // lowercase ASCII, so comparing ignoring ASCII case is the comparison
    // of the lowercased name, without making it.
    let decoded = url::form_urlencoded::parse(name.as_bytes()).map(|(k, _)| k).next().unwrap_or_default();
    let key = decoded.trim();
    key.get(..4).is_some_and(|prefix| prefix.eq_ignore_ascii_case("utm_"))
        || TRACKING_PARAMETERS.iter().any(|tracking| tracking.eq_ignore_ascii_case(key))
}

/// The canonical form of an http(s) URL: lowercase scheme and host, no
/// default port, no fragment, no tracking parameters; every other query
/// parameter kept in its original order and spelling. Empty query pairs
/// (`a=1&&b=2`) are dropped, and so is a query left empty.
pub fn canonicalise(raw: &str) -> Result<String, UrlError> {
    let raw = raw.trim();
    if raw.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong { len: raw.len() });
    }
    let mut url = Url::parse(raw)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlError::NotWeb(url.scheme().to_owned()));
    }
    url.set_fragment(None);
    if let Some(query) = url.query() {
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .filter(|pair| !is_tracking_parameter(pair.split('=').next().unwrap_or(pair)))
            .collect();
        // A query that loses nothing is already in the form setting it
        // would give (the parser serialised it): it is left as it is,
        // sparing a second parse of most cited URLs.
        if kept.len() != query.split('&').count() {
            let kept = kept.join("&");
            url.set_query(if kept.is_empty() { None } else { Some(&kept) });
        }
    }
    Ok(url.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scheme and host case, default ports and fragments do not tell pages
    /// apart, so they are normalised away.
    #[test]
    fn lowercases_scheme_and_host_and_drops_default_port_and_fragment() {
        assert_eq!(canonicalise("HTTPS://Example.COM:443/Path#Intro").unwrap(), "https://example.com/Path");
        assert_eq!(canonicalise("http://example.com:80").unwrap(), "http://example.com/");
        assert_eq!(canonicalise("http://example.com:8080/a").unwrap(), "http://example.com:8080/a");
    }

    /// The denylist removes tracking parameters whatever their case, and
    /// keeps content parameters in their original order.
    #[test]
    fn removes_tracking_keeps_content_parameters_in_order() {
        let got = canonicalise("https://x.org/a?utm_source=n&page=2&UTM_Medium=e&ref=hn&lang=de&fbclid=1&tab=3&v=9&id=7&section=b&gclid=z&msclkid=q&mc_cid=c&_ga=1").unwrap();
        assert_eq!(got, "https://x.org/a?page=2&lang=de&tab=3&v=9&id=7&section=b");
        assert_eq!(canonicalise("https://x.org/a?utm_source=n").unwrap(), "https://x.org/a");
        assert_eq!(canonicalise("https://x.org/a?").unwrap(), "https://x.org/a");
        assert_eq!(canonicalise("https://x.org/a?b=1&&c=2").unwrap(), "https://x.org/a?b=1&c=2");
    }

    /// Parameters that merely contain a denylisted name are content.
    #[test]
    fn keeps_parameters_that_only_look_like_tracking() {
        assert_eq!(
            canonicalise("https://x.org/?reference=1&refresh=2&utm=3").unwrap(),
            "https://x.org/?reference=1&refresh=2&utm=3"
        );
        assert!(is_tracking_parameter("utm_campaign"));
        assert!(is_tracking_parameter("utm%5Fcampaign"));
        assert!(!is_tracking_parameter("page"));
    }

    /// A query that loses no parameter is left as parsed: setting it again,
    /// as canonicalisation did for every URL, changes nothing, whatever
    /// characters it holds.
    #[test]
    fn setting_a_parsed_query_again_changes_nothing() {
        for raw in [
            "https://x.org/a?b=1&c=2",
            "https://x.org/a?q=a b&r='x'&s=\"y\"&t=<z>",
            "https://x.org/a?q=%41%zz%&r=é&s=ü%20v&t=a+b",
            "https://x.org/a?=1&b&c==d&e=f=g",
            "https://x.org/a?q=\u{7f}\t`{|}^[]",
        ] {
            let parsed = Url::parse(raw).unwrap();
            let mut again = parsed.clone();
            again.set_query(parsed.query());
            assert_eq!(again.as_str(), parsed.as_str(), "{raw}");
            assert_eq!(canonicalise(raw).unwrap(), parsed.as_str(), "{raw}");
        }
    }

    /// Only web URLs are citations; everything else is an error, not a panic.
    #[test]
    fn refuses_non_web_invalid_and_oversized_urls() {
        assert!(matches!(canonicalise("mailto:a@b.c"), Err(UrlError::NotWeb(_))));
        assert!(matches!(canonicalise("/relative/path"), Err(UrlError::Invalid(_))));
        assert!(matches!(canonicalise("http://"), Err(UrlError::Invalid(_))));
        let long = format!("https://x.org/{}", "a".repeat(MAX_URL_BYTES));
        assert!(matches!(canonicalise(&long), Err(UrlError::TooLong { .. })));
    }
}
