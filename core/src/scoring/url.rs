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
    // A name without `%` or `+` decodes to itself, so the decoder is only
    // run for the others.
    let decoded = if name.bytes().any(|b| b == b'%' || b == b'+') {
        url::form_urlencoded::parse(name.as_bytes()).map(|(k, _)| k).next().unwrap_or_default()
    } else {
        std::borrow::Cow::Borrowed(name)
    };
    let key = decoded.trim();
    key.get(..4).is_some_and(|prefix| prefix.eq_ignore_ascii_case("utm_"))
        || (has_tracking_length(key.len()) && TRACKING_PARAMETERS.iter().any(|t| t.eq_ignore_ascii_case(key)))
}

/// Bit `n` is set when some entry of [`TRACKING_PARAMETERS`] is `n` bytes
/// long (every entry is shorter than 64).
const TRACKING_LENGTHS: u64 = {
    let mut bits = 0u64;
    let mut k = 0;
    while k < TRACKING_PARAMETERS.len() {
        assert!(TRACKING_PARAMETERS[k].len() < 64);
        bits |= 1 << TRACKING_PARAMETERS[k].len();
        k += 1;
    }
    bits
};

/// Whether a name of `len` bytes can be on the denylist: the common
/// content parameters (`id`, `page`, `q`) are lengths no entry has, and
/// are told apart without comparing them to every entry.
fn has_tracking_length(len: usize) -> bool {
    len < 64 && TRACKING_LENGTHS & (1 << len) != 0
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
    if let Some(canonical) = canonicalise_plain(raw) {
        return Ok(canonical);
    }
    let mut url = Url::parse(raw)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UrlError::NotWeb(url.scheme().to_owned()));
    }
    url.set_fragment(None);
    if let Some(query) = url.query()
        && let Some(kept) = kept_query(query)
    {
        url.set_query(kept.as_deref());
    }
    Ok(url.into())
}

/// The query without its tracking parameters and empty pairs, or `None`
/// when it loses nothing: such a query is already in the form setting it
/// would give (the parser serialised it), so it is left as it is, sparing
/// a second parse of most cited URLs. `Some(None)` when nothing is left.
/// The one rule for both paths of [`canonicalise`].
///
/// One pass over the pairs, and nothing allocated until a pair is
/// dropped: the kept pairs before it are the query up to it, as written.
/// (Splitting the query with `str::split` three times, as this did, was
/// most of the cost of canonicalising a plain URL.)
fn kept_query(query: &str) -> Option<Option<String>> {
    let mut kept: Option<String> = None;
    let bytes = query.as_bytes();
    let mut start = 0;
    while start <= bytes.len() {
        // Queries are short: a plain loop finds the `&` and the `=` sooner
        // than a searcher is set up.
        let end = bytes[start..].iter().position(|&b| b == b'&').map_or(bytes.len(), |k| start + k);
        let pair = &query[start..end];
        let pair_start = start;
        start = end + 1;
        let name = pair.bytes().position(|b| b == b'=').map_or(pair, |eq| &pair[..eq]);
        let dropped = pair.is_empty() || is_tracking_parameter(name);
        match (&mut kept, dropped) {
            (None, false) | (Some(_), true) => {}
            // Every pair before the first dropped one is kept: the query
            // up to it, without the `&` that ends it.
            (None, true) => kept = Some(query[..pair_start.saturating_sub(1)].to_owned()),
            (Some(out), false) => {
                if !out.is_empty() {
                    out.push('&');
                }
                out.push_str(pair);
            }
        }
    }
    kept.map(|out| (!out.is_empty()).then_some(out))
}

/// A table of the bytes that are ASCII letters or digits or in `extra`.
const fn byte_table(extra: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut k = 0;
    while k < extra.len() {
        table[extra[k] as usize] = true;
        k += 1;
    }
    table
}

/// The path bytes [`canonicalise_plain`] copies: those the path
/// percent-encode set leaves alone, bar the few it need not handle.
const PLAIN_PATH: [bool; 256] = byte_table(b"-._~!$&'()*+,;=:@/%");

/// The query bytes [`canonicalise_plain`] copies: as [`PLAIN_PATH`], but
/// `'` (in the special-query percent-encode set) is out and `?` is in.
const PLAIN_QUERY: [bool; 256] = byte_table(b"-._~!$&()*+,;=:@/?%");

/// Whether a path segment is `.` or `..`, written with dots or `%2e` in
/// any case: the parser resolves those, so such a path is not plain.
fn is_dot_segment(segment: &[u8]) -> bool {
    // Most segments are words: only a short one opening with `.` or `%`
    // can be one.
    matches!(segment.first(), Some(b'.' | b'%'))
        && segment.len() <= 6
        && [&b"."[..], b"..", b"%2e", b".%2e", b"%2e.", b"%2e%2e"].iter().any(|dots| dots.eq_ignore_ascii_case(segment))
}

/// [`canonicalise`] without the URL parser, for the URLs that WHATWG
/// parsing leaves as written but for the case of scheme and host, a path
/// for an empty one and the fragment, which [`canonicalise`] drops: `None`
/// for any other, which then goes to the parser.
///
/// Why: parsing was a tenth of the scorer's time, and nearly every cited
/// URL is of this plain form. A URL takes this path only when each of its
/// parts is one the standard copies byte for byte:
///
/// - the scheme is `http` or `https` (any case), followed by `//`;
/// - the host is ASCII letters, digits, `-` and dots between non-empty
///   labels, no label starts with `xn--` (punycode is validated), and the
///   last label starts with a letter (a host ending in a number is read as
///   an IPv4 address); no port, no user info;
/// - the path holds only bytes the path percent-encode set leaves alone and
///   no `.` or `..` segment (written with dots or `%2e`), which would be
///   resolved;
/// - the query holds only bytes the special-query percent-encode set
///   leaves alone (`'` is encoded there);
/// - the fragment, dropped, is anything.
///
/// `plain_urls_canonicalise_as_the_parser_does` checks this path against
/// the parser's on URLs dense in every byte that makes one of these
/// conditions fail.
fn canonicalise_plain(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let scheme_len = if bytes.len() >= 8 && bytes[..8].eq_ignore_ascii_case(b"https://") {
        5
    } else if bytes.len() >= 7 && bytes[..7].eq_ignore_ascii_case(b"http://") {
        4
    } else {
        return None;
    };
    let host_start = scheme_len + 3;
    // Each part is read in one pass over its bytes: splitting them with
    // `str::split` and testing the pieces was most of this function's time.
    // The host runs to the first `/`, `?` or `#`, label by label.
    let mut at = host_start;
    let mut label_start = at;
    loop {
        let b = bytes.get(at).copied();
        match b {
            Some(b'.' | b'/' | b'?' | b'#') | None => {
                let label = &bytes[label_start..at];
                if label.is_empty() || label.get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"xn--")) {
                    return None;
                }
                if b != Some(b'.') {
                    // The last label: a host ending in a number is IPv4.
                    if !label[0].is_ascii_alphabetic() {
                        return None;
                    }
                    break;
                }
                label_start = at + 1;
            }
            Some(b) if b.is_ascii_alphanumeric() || b == b'-' => {}
            Some(_) => return None,
        }
        at += 1;
    }
    let host = &raw[host_start..at];
    // The path runs to the first `?` or `#`, segment by segment.
    let path_start = at;
    let mut segment_start = at;
    loop {
        let b = bytes.get(at).copied();
        match b {
            Some(b'/' | b'?' | b'#') | None => {
                if is_dot_segment(&bytes[segment_start..at]) {
                    return None;
                }
                if b != Some(b'/') {
                    break;
                }
                segment_start = at + 1;
            }
            Some(b) if PLAIN_PATH[usize::from(b)] => {}
            Some(_) => return None,
        }
        at += 1;
    }
    let path = &raw[path_start..at];
    // The query, when there is one, runs to the first `#`; the fragment,
    // dropped, is anything.
    let query = if bytes.get(at) == Some(&b'?') {
        let query_start = at + 1;
        at = query_start;
        while let Some(&b) = bytes.get(at)
            && b != b'#'
        {
            if !PLAIN_QUERY[usize::from(b)] {
                return None;
            }
            at += 1;
        }
        Some(&raw[query_start..at])
    } else {
        None
    };
    // Everything before the fragment, and a `/` for an empty path.
    let mut out = String::with_capacity(at + 1);
    out.push_str(if scheme_len == 5 { "https://" } else { "http://" });
    out.push_str(host);
    // Only the scheme (already lowercase) and the host are in `out` yet.
    out.make_ascii_lowercase();
    out.push_str(if path.is_empty() { "/" } else { path });
    if let Some(query) = query {
        match kept_query(query) {
            None => {
                out.push('?');
                out.push_str(query);
            }
            Some(Some(kept)) => {
                out.push('?');
                out.push_str(&kept);
            }
            Some(None) => {}
        }
    }
    Some(out)
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
        for name in TRACKING_PARAMETERS {
            assert!(is_tracking_parameter(name) && is_tracking_parameter(&name.to_uppercase()), "{name}");
        }
        assert!(!is_tracking_parameter("id") && !is_tracking_parameter("q"));
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

    /// The parser's canonical form, as [`canonicalise`] made it before the
    /// plain path: the reference for [`canonicalise_plain`].
    fn canonicalise_by_parsing(raw: &str) -> Option<String> {
        let mut url = Url::parse(raw.trim()).ok()?;
        if !matches!(url.scheme(), "http" | "https") {
            return None;
        }
        url.set_fragment(None);
        if let Some(query) = url.query()
            && let Some(kept) = kept_query(query)
        {
            url.set_query(kept.as_deref());
        }
        Some(url.into())
    }

    proptest::proptest! {
        /// Wherever the plain path gives a canonical form, the parser gives
        /// the same one, on URLs dense in what the plain path must refuse
        /// or copy: scheme case, odd hosts (ports, user info, numbers,
        /// punycode, empty labels, `_`, non-ASCII), dot segments in every
        /// spelling, percent signs, quotes, spaces, backslashes and
        /// brackets in the path and query, and fragments.
        #[test]
        fn plain_urls_canonicalise_as_the_parser_does(
            raw in proptest::string::string_regex(concat!(
                r"(https?|HTTPS?|Http|ftp)://",
                r"([a-zA-Z0-9]{1,4}|-|_|xn--|XN--|é|@|:8080|:443|\.){0,6}",
                r#"(/([a-z0-9]{1,3}|\.|\.\.|%2e|%2E|%|%41|%zz|'|"|<|`|\{|\||\\|\[|~|!|\$|&|\(|\*|\+|,|;|=|:|@| |\t|é)*){0,4}"#,
                r#"(\?([a-z0-9]{1,3}|=|&|utm_a|fbclid|'|%|%20|"|<|\?|/|`|\{|\^|\[| |é|\+)*)?"#,
                r#"(#[a-z' %"<]*)?"#,
            )).unwrap()
        ) {
            if let Some(plain) = canonicalise_plain(&raw) {
                proptest::prop_assert_eq!(Some(plain), canonicalise_by_parsing(&raw), "{}", raw);
            }
        }
    }

    /// [`kept_query`] as first written, splitting the query into pairs
    /// three times: the reference for the one-pass version.
    fn kept_query_by_splitting(query: &str) -> Option<Option<String>> {
        let dropped = |pair: &str| pair.is_empty() || is_tracking_parameter(pair.split('=').next().unwrap_or(pair));
        if !query.split('&').any(dropped) {
            return None;
        }
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .filter(|pair| !is_tracking_parameter(pair.split('=').next().unwrap_or(pair)))
            .collect();
        if kept.len() == query.split('&').count() {
            return None;
        }
        let kept = kept.join("&");
        Some((!kept.is_empty()).then_some(kept))
    }

    proptest::proptest! {
        /// The one-pass query rule keeps and drops what splitting the
        /// query did, on queries dense in empty pairs, tracking names (in
        /// any case, encoded), content names and `=` signs.
        #[test]
        fn one_pass_query_rule_equals_splitting(
            query in proptest::string::string_regex(
                "(&|=|a|id|page|ref|REF|utm_x|UTM_|fbclid|%5Fga|_g%61|u+|x=1|é| ){0,10}"
            ).unwrap()
        ) {
            proptest::prop_assert_eq!(kept_query(&query), kept_query_by_splitting(&query), "{}", query);
        }
    }

    /// Citation URLs as reports write them take the plain path, which
    /// gives what the parser gives.
    #[test]
    fn common_urls_take_the_plain_path() {
        for raw in [
            "https://site3.example.com/article?id=3&page=1&utm_source=newsletter&fbclid=abc#intro",
            "https://source4.example.org/report/4.html",
            "HTTP://Example.COM",
            "https://x.org/a?utm_source=n",
            "https://x.org/a?",
            "https://en.wikipedia.org/wiki/Grid_(electricity)",
            "https://doi.org/10.1000/xyz-123_a~b",
        ] {
            let plain = canonicalise_plain(raw);
            assert!(plain.is_some(), "{raw}");
            assert_eq!(plain, canonicalise_by_parsing(raw), "{raw}");
        }
        for raw in ["https://x.org:443/", "https://1.2.3.4/", "https://xn--bcher-kva.example/", "https://x.org/a/../b"]
        {
            assert_eq!(canonicalise_plain(raw), None, "{raw}");
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
