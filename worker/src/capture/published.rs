//! A captured page's publication date, from its own metadata (seed 004,
//! "Run and output record": source publication dates).
//!
//! Only metadata that *says* "published" is read, in this order; the first
//! candidate that reads as a date wins, and when none does, the first one
//! is kept as written and flagged:
//!
//! 1. `<meta property|name="article:published_time">` (Open Graph article),
//!    then `og:published_time` and `og:article:published_time` (common
//!    variants of it);
//! 2. `<meta name="citation_publication_date">`, then `citation_date`
//!    (Highwire Press tags, read by Google Scholar);
//! 3. JSON-LD `datePublished` of a top-level item or an `@graph` item,
//!    articles (`@type` containing `Article`, `Posting` or `Report`) before
//!    other items;
//! 4. Dublin Core: `dcterms.issued`, `dcterms.date`, `dc.date.issued`,
//!    `dc.date` (names compared without case: `DC.Date` too);
//! 5. microdata: `<meta itemprop="datePublished" content>`, `<time
//!    itemprop="datePublished">` and `<time pubdate>` (their `datetime`,
//!    else their text);
//! 6. `<meta name="date">`.
//!
//! Not read, on purpose: modification dates (`article:modified_time`,
//! `dateModified`, `Last-Modified`), which are not publication dates, and a
//! bare `<time>` in the page, which may date a comment, an update or an
//! event as easily as the article. A page that gives none has no date:
//! none is ever guessed.
//!
//! A date is normalised to ISO 8601 when it reads unambiguously
//! ([`normalise`]); otherwise it is kept as written (trimmed) with
//! `as_written` set, so a reader sees exactly what the page said.

use scraper::{ElementRef, Html, Selector};
use serde_json::Value;

use crate::record::{civil_from_days, days_from_civil};

/// The longest metadata value taken for a date: longer text is not a date
/// (and a hostile page must not put megabytes into the record).
const MAX_DATE_LEN: usize = 100;

/// The largest JSON-LD block parsed.
const MAX_JSON_LD: usize = 1024 * 1024;

/// A page's publication date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedDate {
    /// ISO 8601 ([`normalise`]), or the text as written when `as_written`.
    pub value: String,
    /// The page's text could not be read as a date: `value` is that text.
    pub as_written: bool,
    /// Which metadata gave it: `meta article:published_time`,
    /// `json-ld datePublished`, `time pubdate`...
    pub source: String,
}

/// The publication date of a parsed page, if its metadata gives one.
pub fn from_document(document: &Html) -> Option<PublishedDate> {
    let candidates = candidates(document);
    if let Some(found) = candidates.iter().find_map(|(source, raw)| {
        normalise(raw).map(|value| PublishedDate { value, as_written: false, source: source.clone() })
    }) {
        return Some(found);
    }
    candidates.into_iter().next().map(|(source, raw)| PublishedDate { value: raw, as_written: true, source })
}

/// Every candidate, in the order of the module doc: (source, text).
fn candidates(document: &Html) -> Vec<(String, String)> {
    let metas: Vec<(String, String)> = select(document, "meta")
        .filter_map(|el| {
            let key = el.value().attr("property").or_else(|| el.value().attr("name"))?;
            let content = usable(el.value().attr("content")?)?;
            Some((key.trim().to_ascii_lowercase(), content))
        })
        .collect();
    let meta = |keys: &[&str]| -> Vec<(String, String)> {
        keys.iter()
            .flat_map(|k| {
                metas
                    .iter()
                    .filter(move |(key, _)| key.as_str() == *k)
                    .map(|(key, v)| (format!("meta {key}"), v.clone()))
            })
            .collect()
    };
    let mut out = Vec::new();
    out.extend(meta(&["article:published_time", "og:published_time", "og:article:published_time"]));
    out.extend(meta(&["citation_publication_date", "citation_date"]));
    out.extend(json_ld(document).into_iter().map(|v| ("json-ld datePublished".to_owned(), v)));
    out.extend(meta(&["dcterms.issued", "dcterms.date", "dc.date.issued", "dc.date"]));
    out.extend(microdata(document));
    out.extend(meta(&["date"]));
    out
}

fn select<'a>(document: &'a Html, css: &str) -> impl Iterator<Item = ElementRef<'a>> + 'a {
    // The selectors are constants of this module; one that failed to parse
    // would select nothing rather than panic.
    let selector = Selector::parse(css).ok();
    selector.into_iter().flat_map(move |s| document.select(&s).collect::<Vec<_>>())
}

/// A metadata value fit to be a date: trimmed, non-empty, not too long.
fn usable(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t.len() <= MAX_DATE_LEN).then(|| t.to_owned())
}

/// `datePublished` of the JSON-LD items, articles first.
fn json_ld(document: &Html) -> Vec<String> {
    let (mut articles, mut others) = (Vec::new(), Vec::new());
    for script in select(document, "script") {
        let is_ld = script
            .value()
            .attr("type")
            .is_some_and(|t| t.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/ld+json"));
        if !is_ld {
            continue;
        }
        let text: String = script.text().collect();
        if text.len() > MAX_JSON_LD {
            continue;
        }
        // A block that does not parse gives no date (pages do ship broken
        // JSON-LD); it is never scraped for date-looking text.
        let Ok(value) = serde_json::from_str::<Value>(&text) else { continue };
        let top: Vec<&Value> = match &value {
            Value::Array(items) => items.iter().collect(),
            v => vec![v],
        };
        let items = top.into_iter().flat_map(|item| {
            let graph = item.get("@graph").and_then(Value::as_array).into_iter().flatten();
            std::iter::once(item).chain(graph)
        });
        for item in items {
            let date = match item.get("datePublished") {
                Some(Value::String(s)) => usable(s),
                Some(Value::Array(a)) => a.iter().find_map(Value::as_str).and_then(usable),
                _ => None,
            };
            let Some(date) = date else { continue };
            let types: Vec<&str> = match item.get("@type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if types.iter().any(|t| ["Article", "Posting", "Report"].iter().any(|k| t.contains(k))) {
                articles.push(date);
            } else {
                others.push(date);
            }
        }
    }
    articles.extend(others);
    articles
}

/// Microdata publication dates.
fn microdata(document: &Html) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for el in select(document, "[itemprop]") {
        let is_published =
            el.value().attr("itemprop").is_some_and(|p| p.split_whitespace().any(|p| p == "datePublished"));
        if !is_published {
            continue;
        }
        let name = el.value().name();
        let value = match name {
            "meta" => el.value().attr("content").and_then(usable),
            "time" => time_value(el),
            _ => None,
        };
        if let Some(v) = value {
            out.push((format!("{name} itemprop=datePublished"), v));
        }
    }
    for el in select(document, "time[pubdate]") {
        if let Some(v) = time_value(el) {
            out.push(("time pubdate".to_owned(), v));
        }
    }
    out
}

/// A `<time>`'s machine-readable value: `datetime`, else its text (which
/// the HTML standard then defines as the value).
fn time_value(el: ElementRef<'_>) -> Option<String> {
    match el.value().attr("datetime") {
        Some(dt) => usable(dt),
        None => usable(&el.text().collect::<String>()),
    }
}

/// A date as ISO 8601, when it reads unambiguously:
///
/// - `YYYY`, `YYYY-MM`, `YYYY-MM-DD` (also with `/`, one-digit month or
///   day, and `YYYYMMDD`) stay dates: `2024`, `2024-03`, `2024-03-05`;
/// - a date and time with a zone (`Z`, `+01:00`, `+0100`, `+01`, `GMT`,
///   `UTC`) becomes UTC to the second: `2024-03-05T13:30:00Z` (fractions
///   of a second are dropped);
/// - a date and time without a zone stays local, without `Z`:
///   `2024-03-05T14:30:00` (the zone is unknown and is not guessed);
/// - RFC 2822 and HTTP dates (`Tue, 05 Mar 2024 14:30:00 GMT`) and
///   English month names (`March 5, 2024`, `5 Mar 2024`, `March 2024`)
///   read the same way.
///
/// `None` for anything else, including numeric day/month orders that are
/// ambiguous (`03/05/2024`) and impossible dates (`2024-02-30`).
pub fn normalise(text: &str) -> Option<String> {
    let t = text.trim();
    if t.is_empty() || t.len() > MAX_DATE_LEN {
        return None;
    }
    // A date that starts with a four-digit year is ISO-like or nothing.
    if t.len() >= 4 && t.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
        return iso_like(t);
    }
    worded(t)
}

/// A parsed date, to the precision it was given.
#[derive(Debug, Clone, Copy)]
enum Parsed {
    Year(i64),
    Month(i64, u32),
    Day(i64, u32, u32),
    /// Date, hour, minute, second, zone offset in minutes (`None`: local).
    Time(i64, u32, u32, u32, u32, u32, Option<i32>),
}

fn render(p: Parsed) -> Option<String> {
    match p {
        Parsed::Year(y) => Some(format!("{y:04}")),
        Parsed::Month(y, m) => Some(format!("{y:04}-{m:02}")),
        Parsed::Day(y, m, d) => Some(format!("{y:04}-{m:02}-{d:02}")),
        Parsed::Time(y, m, d, h, mi, s, None) => Some(format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}")),
        Parsed::Time(y, m, d, h, mi, s, Some(offset)) => {
            let minutes = days_from_civil(y, m, d) * 1440 + i64::from(h) * 60 + i64::from(mi) - i64::from(offset);
            let (y, m, d) = civil_from_days(minutes.div_euclid(1440));
            let of_day = minutes.rem_euclid(1440);
            let (h, mi) = (of_day / 60, of_day % 60);
            (1000..=9999).contains(&y).then(|| format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"))
        }
    }
}

fn valid_date(y: i64, m: u32, d: u32) -> bool {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1000..=9999).contains(&y) && (1..=days).contains(&d)
}

/// A run of ASCII digits at the start of `s`, at most `max` long.
fn digits(s: &str, max: usize) -> Option<(u32, &str)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > max {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

/// `YYYY[-MM[-DD[(T| )HH:MM[:SS[.f]][zone]]]]`, `/` for `-`, or `YYYYMMDD`.
fn iso_like(t: &str) -> Option<String> {
    let compact = t.len() == 8 && t.bytes().all(|b| b.is_ascii_digit());
    if compact {
        let (y, m, d) = (t[..4].parse().ok()?, t[4..6].parse().ok()?, t[6..].parse().ok()?);
        return valid_date(y, m, d).then(|| render(Parsed::Day(y, m, d))).flatten();
    }
    let (y, rest) = digits(t, 4)?;
    let y = i64::from(y);
    if rest.is_empty() {
        return (1000..=9999).contains(&y).then(|| render(Parsed::Year(y))).flatten();
    }
    let sep = rest.as_bytes()[0];
    if sep != b'-' && sep != b'/' {
        return None;
    }
    let (m, rest) = digits(&rest[1..], 2)?;
    if rest.is_empty() {
        return ((1..=12).contains(&m) && (1000..=9999).contains(&y)).then(|| render(Parsed::Month(y, m))).flatten();
    }
    if rest.as_bytes()[0] != sep {
        return None;
    }
    let (d, rest) = digits(&rest[1..], 2)?;
    if !valid_date(y, m, d) {
        return None;
    }
    if rest.is_empty() {
        return render(Parsed::Day(y, m, d));
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (h, rest) = digits(rest, 2)?;
    let (mi, rest) = digits(rest.strip_prefix(':')?, 2)?;
    let (s, rest) = match rest.strip_prefix(':') {
        Some(r) => digits(r, 2)?,
        None => (0, rest),
    };
    let rest = match rest.strip_prefix(['.', ',']) {
        Some(r) => r.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let offset = zone(rest.trim_start())?;
    render(Parsed::Time(y, m, d, h, mi, s, offset))
}

/// A zone: `Ok(None)`-like `Some(None)` for none (local), `Some(Some(min))`
/// for an offset, `None` when the text is not a zone.
fn zone(z: &str) -> Option<Option<i32>> {
    match z {
        "" => return Some(None),
        "Z" | "z" | "GMT" | "UTC" | "UT" => return Some(Some(0)),
        _ => {}
    }
    let sign = match z.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let body = &z[1..];
    // Checked first: the slicing below is then on ASCII only.
    if !body.bytes().all(|b| b.is_ascii_digit() || b == b':') {
        return None;
    }
    let (h, m) = match body.len() {
        2 => (body.parse::<i32>().ok()?, 0),
        4 => (body[..2].parse::<i32>().ok()?, body[2..].parse::<i32>().ok()?),
        5 if body.as_bytes()[2] == b':' => (body[..2].parse::<i32>().ok()?, body[3..].parse::<i32>().ok()?),
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    Some(Some(sign * (h * 60 + m)))
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const WEEKDAYS: [&str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

/// A month name (full, or its first three letters; `Sept` too).
fn month(word: &str) -> Option<u32> {
    let w = word.trim_end_matches('.').to_ascii_lowercase();
    MONTHS
        .iter()
        .position(|m| *m == w || (w.len() == 3 && m.starts_with(&w)) || (w == "sept" && *m == "september"))
        .map(|i| i as u32 + 1)
}

fn weekday(word: &str) -> bool {
    let w = word.trim_end_matches('.').to_ascii_lowercase();
    w.len() >= 3 && WEEKDAYS.iter().any(|d| d.starts_with(&w))
}

/// RFC 2822 / HTTP dates and dates with English month names.
fn worded(t: &str) -> Option<String> {
    let words: Vec<&str> = t.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
    let words = match words.split_first() {
        Some((first, rest)) if weekday(first) => rest,
        _ => &words[..],
    };
    let year = |w: &str| -> Option<i64> {
        (w.len() == 4).then(|| w.parse::<i64>().ok()).flatten().filter(|y| (1000..=9999).contains(y))
    };
    let day = |w: &str| -> Option<u32> {
        let w = w.trim_end_matches(|c: char| c.is_ascii_alphabetic()); // 5th, 1st
        (1..=2).contains(&w.len()).then(|| w.parse().ok()).flatten()
    };
    let (y, m, d, rest) = match words {
        // `March 2024`
        [mo, y] if month(mo).is_some() && year(y).is_some() => {
            let (y, m) = (year(y)?, month(mo)?);
            return render(Parsed::Month(y, m));
        }
        // `5 March 2024 [time zone]`
        [d, mo, y, rest @ ..] if day(d).is_some() && month(mo).is_some() => (year(y)?, month(mo)?, day(d)?, rest),
        // `March 5, 2024 [time zone]`
        [mo, d, y, rest @ ..] if month(mo).is_some() && day(d).is_some() => (year(y)?, month(mo)?, day(d)?, rest),
        _ => return None,
    };
    if !valid_date(y, m, d) {
        return None;
    }
    match rest {
        [] => render(Parsed::Day(y, m, d)),
        [time, zone_words @ ..] if zone_words.len() <= 1 => {
            let (h, r) = digits(time, 2)?;
            let (mi, r) = digits(r.strip_prefix(':')?, 2)?;
            let s = match r.strip_prefix(':') {
                Some(r) => match digits(r, 2)? {
                    (s, "") => s,
                    _ => return None,
                },
                None if r.is_empty() => 0,
                None => return None,
            };
            if h > 23 || mi > 59 || s > 59 {
                return None;
            }
            let offset = zone(zone_words.first().copied().unwrap_or(""))?;
            render(Parsed::Time(y, m, d, h, mi, s, offset))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

    use super::*;

    fn date_of(head: &str) -> Option<PublishedDate> {
        from_document(&Html::parse_document(head))
    }

    /// A news article head, as newspapers' CMSs write it (Open Graph
    /// article tags with an offset, a modified time that must be ignored).
    #[test]
    fn news_article_published_time() {
        let html = r#"<!DOCTYPE html><html lang="en"><head>
            <meta charset="utf-8">
            <title>Researchers revisit the 1919 eclipse plates | World news</title>
            <meta property="og:type" content="article">
            <meta property="og:title" content="Researchers revisit the 1919 eclipse plates">
            <meta property="article:modified_time" content="2024-05-02T08:00:00+00:00">
            <meta property="article:published_time" content="2024-05-01T14:30:00+01:00">
            <meta property="article:section" content="Science">
            <meta name="twitter:card" content="summary_large_image">
            </head><body><article><h1>Researchers revisit</h1><time datetime="2024-05-03">3 May</time></article></body></html>"#;
        let d = date_of(html).unwrap();
        assert_eq!(d.value, "2024-05-01T13:30:00Z");
        assert!(!d.as_written);
        assert_eq!(d.source, "meta article:published_time");
    }

    /// A scholarly landing page with Highwire Press tags (slashes, date
    /// only) and Dublin Core beside them.
    #[test]
    fn scholarly_citation_publication_date() {
        let html = r#"<html><head>
            <meta name="citation_title" content="Plate motions from the magnetic record">
            <meta name="citation_author" content="Doe, Jane">
            <meta name="citation_online_date" content="2019/06/30">
            <meta name="citation_publication_date" content="2019/07/15">
            <meta name="citation_journal_title" content="Journal of Geophysics">
            <meta name="DC.Date" content="2019-07-01">
            </head><body><p>Abstract.</p></body></html>"#;
        let d = date_of(html).unwrap();
        assert_eq!(
            (d.value.as_str(), d.as_written, d.source.as_str()),
            ("2019-07-15", false, "meta citation_publication_date")
        );
        // Dublin Core alone, case-insensitive name.
        let dc = date_of(r#"<head><meta name="DC.Date" content="2019-07-01"></head>"#).unwrap();
        assert_eq!((dc.value.as_str(), dc.source.as_str()), ("2019-07-01", "meta dc.date"));
    }

    /// JSON-LD as blogs and news sites emit it: an `@graph` with a
    /// WebSite, a WebPage and the article; the article's date wins.
    #[test]
    fn json_ld_date_published() {
        let html = r#"<html><head><script type="application/ld+json">
            {"@context":"https://schema.org","@graph":[
              {"@type":"WebSite","@id":"https://blog.example/#website","name":"Example"},
              {"@type":"WebPage","@id":"https://blog.example/p/#webpage","datePublished":"2023-01-01T00:00:00+00:00"},
              {"@type":["BlogPosting"],"headline":"On DNSSEC","datePublished":"2023-03-09T10:15:30-05:00","dateModified":"2023-04-01T00:00:00Z"}
            ]}</script>
            <script type="application/ld+json">{ this is not json }</script>
            </head><body></body></html>"#;
        let d = date_of(html).unwrap();
        assert_eq!((d.value.as_str(), d.source.as_str()), ("2023-03-09T15:15:30Z", "json-ld datePublished"));
        // A top-level array, NewsArticle.
        let arr =
            r#"<script type="application/ld+json">[{"@type":"NewsArticle","datePublished":"2022-11-30"}]</script>"#;
        assert_eq!(date_of(arr).unwrap().value, "2022-11-30");
    }

    /// A page without any publication metadata has no date: not the
    /// modification date, not a bare `<time>`, not a date in the text.
    #[test]
    fn page_without_date_is_null() {
        let html = r#"<html><head><title>DNSSEC explained</title>
            <meta name="description" content="Published 2021-01-01 by us">
            <meta property="article:modified_time" content="2024-01-01T00:00:00Z">
            <script type="application/ld+json">{"@type":"Article","dateModified":"2024-01-01"}</script>
            </head><body><p>Posted on <time datetime="2020-02-02">2 Feb 2020</time>.</p></body></html>"#;
        assert_eq!(date_of(html), None);
        assert_eq!(date_of(""), None);
    }

    /// A date that cannot be read is kept as written and flagged; a
    /// readable one from a later source is preferred to it.
    #[test]
    fn malformed_date_is_kept_as_written_and_flagged() {
        let html = r#"<head><meta property="article:published_time" content=" 03/05/2024 "></head>"#;
        let d = date_of(html).unwrap();
        assert_eq!(
            (d.value.as_str(), d.as_written, d.source.as_str()),
            ("03/05/2024", true, "meta article:published_time")
        );
        let impossible = date_of(r#"<meta name="citation_publication_date" content="2024-02-30">"#).unwrap();
        assert_eq!((impossible.value.as_str(), impossible.as_written), ("2024-02-30", true));
        let both = r#"<meta property="article:published_time" content="yesterday">
            <meta name="date" content="2024-03-05">"#;
        let d = date_of(both).unwrap();
        assert_eq!((d.value.as_str(), d.as_written, d.source.as_str()), ("2024-03-05", false, "meta date"));
        // Too long to be a date: ignored, not stored.
        assert_eq!(date_of(&format!(r#"<meta name="date" content="{}">"#, "9".repeat(500))), None);
    }

    /// Microdata and `<time pubdate>`.
    #[test]
    fn microdata_and_pubdate() {
        let m = r#"<article itemscope><time itemprop="datePublished" datetime="2021-06-01T09:00:00Z">1 June</time></article>"#;
        assert_eq!(date_of(m).unwrap().value, "2021-06-01T09:00:00Z");
        let p = r#"<article><header><time pubdate>2010-04-05</time></header></article>"#;
        assert_eq!(date_of(p).unwrap().source, "time pubdate");
    }

    /// The normalisation rules of [`normalise`], one by one.
    #[test]
    fn normalisation() {
        let cases = [
            ("2024", Some("2024")),
            ("2024-03", Some("2024-03")),
            ("2024/3", Some("2024-03")),
            ("2024-03-05", Some("2024-03-05")),
            ("2024/3/5", Some("2024-03-05")),
            ("20240305", Some("2024-03-05")),
            ("2024-03-05T14:30:00Z", Some("2024-03-05T14:30:00Z")),
            ("2024-03-05T14:30:00.123456+01:00", Some("2024-03-05T13:30:00Z")),
            ("2024-03-05 14:30", Some("2024-03-05T14:30:00")),
            ("2024-03-05T23:30:00-0230", Some("2024-03-06T02:00:00Z")),
            ("2024-01-01T00:15:00+01", Some("2023-12-31T23:15:00Z")),
            ("2024-03-05T14:30:00 GMT", Some("2024-03-05T14:30:00Z")),
            ("Tue, 05 Mar 2024 14:30:00 GMT", Some("2024-03-05T14:30:00Z")),
            ("Tue, 5 Mar 2024 14:30:00 +0200", Some("2024-03-05T12:30:00Z")),
            ("March 5, 2024", Some("2024-03-05")),
            ("5th Sept. 2024", Some("2024-09-05")),
            ("March 2024", Some("2024-03")),
            ("2024-02-29", Some("2024-02-29")),
            ("2023-02-29", None),
            ("2024-13-01", None),
            ("2024-03-05T24:00:00Z", None),
            ("2024-03-05T14:30:00+25:00", None),
            ("03/05/2024", None),
            ("yesterday", None),
            ("2024-03-05T14:30:00 EST", None),
            ("0999", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalise(input).as_deref(), want, "{input:?}");
        }
    }

    /// Hostile inputs never panic.
    #[test]
    fn odd_inputs_never_panic() {
        for s in [
            "2024-",
            "2024-03-",
            "2024-03-05T",
            "2024-03-05T1",
            "2024-03-05T14:",
            "2024-03-05T14:30+",
            "+",
            "é2024",
            "2024-03-05T14:30:00+é1",
            "Mar",
            "5 Mar",
            ",,,",
            "2024\u{0}",
        ] {
            let _ = normalise(s);
        }
    }
}
