//! What a system's API says beside its text, and how it reaches the
//! scorer: the one rule that turns an adapter's reply into the scorer's
//! input (docs/adapters.md, "What becomes what").
//!
//! An API may say which sources its answer cites in three ways, each an
//! [`ApiCitations`] variant that the adapters fill in from the wire:
//!
//! - **numbered**: a list that the text's `[n]` markers index, 1-based
//!   (Perplexity's top-level `citations`, else its `search_results`, and
//!   `http_json`'s `citations_pointer`);
//! - **spans**: annotations over the text (`url_citation` of the OpenAI
//!   Responses API and of chat completions with web search), each naming a
//!   range of the text in Unicode code points and the URL it cites;
//! - **none**: the text is all there is (a person's submission, a local
//!   program, the simulated system, a chat API without citations).
//!
//! [`prepare`] then makes the scorer's input from the raw output:
//!
//! 1. spans are turned from code points into byte offsets of the raw text
//!    (a span past the end is dropped with a warning);
//! 2. reasoning blocks (`<think>...</think>`, as reasoning models put them
//!    before the answer; an unclosed block runs to the end) are taken out
//!    of the body and kept apart: they are recorded, never scored;
//! 3. spans inside a reasoning block are dropped (they cite the reasoning,
//!    not the answer) and the others are moved with the text.
//!
//! `super::analyse_output` reads the prepared body with its citations:
//! the reference table always comes from what the API says is a citation,
//! reconciled with the text (`super::ReferenceOrigin` says where each
//! entry came from).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The longest URL kept from an API's citation list: past this it is no
/// source anyone could open.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// The most citations read from one reply (lists and spans alike).
pub const MAX_API_CITATIONS: usize = 10_000;

/// One entry of a numbered citation list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiSource {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// One citation annotation: `start..end` of the raw output, in Unicode
/// code points (end exclusive), cites `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiSpan {
    pub start: usize,
    pub end: usize,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// What the API said its answer cites (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApiCitations {
    /// The text is all there is.
    #[default]
    None,
    /// `[n]` in the text is `list[n - 1]`.
    Numbered { list: Vec<ApiSource> },
    /// Annotations over the text.
    Spans { spans: Vec<ApiSpan> },
}

impl ApiCitations {
    /// A numbered list from URLs (and titles). A blank entry keeps its
    /// place (as a blank URL), since the markers count positions; a list
    /// with no URL at all is none. Capped at [`MAX_API_CITATIONS`].
    pub fn numbered(entries: impl IntoIterator<Item = (String, Option<String>)>) -> ApiCitations {
        let list: Vec<ApiSource> = entries
            .into_iter()
            .take(MAX_API_CITATIONS)
            .map(|(url, title)| ApiSource { url: clip_url(url.trim()), title: clean(title) })
            .collect();
        if list.iter().all(|s| s.url.is_empty()) { ApiCitations::None } else { ApiCitations::Numbered { list } }
    }

    /// Annotations; spans without a URL (or with one over
    /// [`MAX_URL_BYTES`]) or with `end < start` are dropped.
    pub fn spans(spans: impl IntoIterator<Item = ApiSpan>) -> ApiCitations {
        let spans: Vec<ApiSpan> = spans
            .into_iter()
            .map(|s| ApiSpan { url: clip_url(s.url.trim()), title: clean(s.title), ..s })
            .filter(|s| !s.url.is_empty() && s.end >= s.start)
            .take(MAX_API_CITATIONS)
            .collect();
        if spans.is_empty() { ApiCitations::None } else { ApiCitations::Spans { spans } }
    }

    /// The cited URLs as the API gave them, in order, each once (the run
    /// record's `citation_urls`).
    pub fn urls(&self) -> Vec<String> {
        let all: Vec<&str> = match self {
            ApiCitations::None => Vec::new(),
            ApiCitations::Numbered { list } => list.iter().map(|s| s.url.as_str()).collect(),
            ApiCitations::Spans { spans } => spans.iter().map(|s| s.url.as_str()).collect(),
        };
        let mut out: Vec<String> = Vec::new();
        for url in all.into_iter().filter(|u| !u.is_empty()) {
            if !out.iter().any(|u| u == url) {
                out.push(url.to_owned());
            }
        }
        out
    }

    /// The variant's name, as docs/records.md writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiCitations::None => "none",
            ApiCitations::Numbered { .. } => "numbered",
            ApiCitations::Spans { .. } => "spans",
        }
    }
}

fn clip_url(url: &str) -> String {
    if url.len() > MAX_URL_BYTES { String::new() } else { url.to_owned() }
}

fn clean(title: Option<String>) -> Option<String> {
    title.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

/// A span in byte offsets of the prepared body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ByteSpan {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) url: String,
    pub(crate) title: Option<String>,
}

/// The scorer's input made from a raw output ([`prepare`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared<'a> {
    /// The answer: the raw output without its reasoning blocks (the raw
    /// output itself, borrowed, when it has none).
    pub body: Cow<'a, str>,
    /// The reasoning blocks taken out, in order, without their tags.
    pub reasoning: Vec<String>,
    pub(crate) list: Vec<ApiSource>,
    pub(crate) spans: Vec<ByteSpan>,
    /// Whether the API gave citations of the spans kind (even if every span
    /// was dropped): the report's format is then that of links.
    pub(crate) annotated: bool,
    pub warnings: Vec<String>,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// The byte ranges of the reasoning blocks of `text` (tags included) and
/// their inner text.
fn reasoning_blocks(text: &str) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let mut blocks = Vec::new();
    let mut from = 0;
    while let Some(at) = find_ascii_ci(text, THINK_OPEN, from) {
        let inner_start = at + THINK_OPEN.len();
        let (inner_end, end) = match find_ascii_ci(text, THINK_CLOSE, inner_start) {
            Some(close) => (close, close + THINK_CLOSE.len()),
            None => (text.len(), text.len()),
        };
        blocks.push((at..end, inner_start..inner_end));
        from = end;
    }
    blocks
}

/// The first byte offset at or after `from` where `needle` (ASCII, not
/// empty, starting with a byte that has no case, as `<` does) starts,
/// ignoring ASCII case.
///
/// Every answer is searched for `<think>`, and almost none holds one:
/// the search jumps from one occurrence of the first byte to the next
/// (memchr) instead of comparing at every offset, which cost as much as
/// the Markdown parse.
fn find_ascii_ci(haystack: &str, needle: &str, from: usize) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    let first = *n.first()?;
    debug_assert!(!first.is_ascii_alphabetic(), "the first byte is matched exactly");
    let mut at = from;
    while n.len() <= h.len().checked_sub(at)? {
        let candidate = at + memchr::memchr(first, h.get(at..)?)?;
        if h.get(candidate..candidate + n.len()).is_some_and(|w| w.eq_ignore_ascii_case(n)) {
            return Some(candidate);
        }
        at = candidate + 1;
    }
    None
}

/// Whether `text` holds nothing but reasoning blocks and white space: no
/// answer was obtained (the HTTP adapters' `empty_content`).
pub fn is_reasoning_only(text: &str) -> bool {
    let mut at = 0;
    for (outer, _) in reasoning_blocks(text) {
        if !text[at..outer.start].trim().is_empty() {
            return false;
        }
        at = outer.end;
    }
    text[at..].trim().is_empty()
}

/// Makes the scorer's input from a raw output and what its API said (the
/// module doc gives the steps).
pub fn prepare<'a>(raw: &'a str, citations: &ApiCitations) -> Prepared<'a> {
    let mut warnings = Vec::new();
    let mut spans: Vec<ByteSpan> = Vec::new();
    if let ApiCitations::Spans { spans: given } = citations {
        // The byte offset of every code point position, the end included:
        // one pass over the text for all the spans.
        let bytes: Vec<usize> = raw.char_indices().map(|(b, _)| b).chain(std::iter::once(raw.len())).collect();
        let byte = |cp: usize| bytes.get(cp).copied();
        for s in given {
            match (byte(s.start), byte(s.end)) {
                (Some(start), Some(end)) => {
                    spans.push(ByteSpan { range: start..end, url: s.url.clone(), title: s.title.clone() })
                }
                _ => warnings.push(format!(
                    "a citation of {} names characters {}..{} of an answer of {} characters: it is not counted",
                    s.url,
                    s.start,
                    s.end,
                    bytes.len() - 1
                )),
            }
        }
    }

    let blocks = reasoning_blocks(raw);
    let mut reasoning = Vec::new();
    let body = if blocks.is_empty() {
        Cow::Borrowed(raw)
    } else {
        let mut body = String::with_capacity(raw.len());
        let mut at = 0;
        for (outer, inner) in &blocks {
            body.push_str(&raw[at..outer.start]);
            let text = raw[inner.clone()].trim();
            if !text.is_empty() {
                reasoning.push(text.to_owned());
            }
            at = outer.end;
        }
        body.push_str(&raw[at..]);
        Cow::Owned(body)
    };
    if !blocks.is_empty() {
        let mut dropped = 0usize;
        spans.retain_mut(|s| {
            let inside = blocks.iter().any(|(outer, _)| s.range.start < outer.end && s.range.end > outer.start);
            if inside {
                dropped += 1;
                return false;
            }
            let removed = |offset: usize| -> usize {
                blocks.iter().filter(|(outer, _)| outer.end <= offset).map(|(outer, _)| outer.len()).sum()
            };
            s.range = s.range.start - removed(s.range.start)..s.range.end - removed(s.range.end);
            true
        });
        if dropped > 0 {
            warnings.push(format!("{dropped} citation(s) inside the reasoning block are not the answer's"));
        }
    }
    let list = match citations {
        ApiCitations::Numbered { list } => list.clone(),
        _ => Vec::new(),
    };
    Prepared { body, reasoning, list, spans, annotated: matches!(citations, ApiCitations::Spans { .. }), warnings }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn span(start: usize, end: usize, url: &str) -> ApiSpan {
        ApiSpan { start, end, url: url.to_owned(), title: None }
    }

    /// Code point offsets become byte offsets, whatever the characters
    /// before them take in UTF-8 (and in UTF-16: the emoji is two units).
    #[test]
    fn spans_are_code_points() {
        let raw = "Café — 5€ 🎉 grew. Next one.";
        let start = raw.chars().position(|c| c == 'g').unwrap();
        let end = start + "grew.".chars().count();
        let p = prepare(raw, &ApiCitations::spans([span(start, end, "https://a.example/")]));
        assert_eq!(&p.body[p.spans[0].range.clone()], "grew.");
        let past = prepare(raw, &ApiCitations::spans([span(5, 500, "https://a.example/")]));
        assert!(past.spans.is_empty() && past.warnings.len() == 1, "{:?}", past.warnings);
    }

    /// A reasoning block is taken out of the body and kept apart, and the
    /// spans after it move with the text; one inside it is dropped; an
    /// unclosed block runs to the end.
    #[test]
    fn reasoning_blocks_are_kept_apart() {
        let raw = "<think>\nI found 18 sources [1].\n\nThen more.\n</think>\n\nSales grew [1].";
        let inside = raw.find("I found").unwrap();
        let grew = raw.find("Sales").unwrap();
        let spans = ApiCitations::spans([span(inside, inside + 7, "https://x.example/"), span(grew, grew + 15, "u")]);
        let p = prepare(raw, &spans);
        assert_eq!(p.body, "\n\nSales grew [1].");
        assert_eq!(p.reasoning, ["I found 18 sources [1].\n\nThen more."]);
        assert_eq!(p.spans.len(), 1);
        assert_eq!(&p.body[p.spans[0].range.clone()], "Sales grew [1].");
        assert!(is_reasoning_only(" <think>a</think>\n<think>b") && !is_reasoning_only("<think>a</think> x"));
        let open = prepare("Answer.\n<THINK>never closed", &ApiCitations::None);
        assert_eq!((&*open.body, open.reasoning.as_slice()), ("Answer.\n", &["never closed".to_owned()][..]));
    }

    /// A numbered list keeps blank entries in place (markers count
    /// positions) and is no list at all when every entry is blank.
    #[test]
    fn numbered_lists_keep_positions() {
        let c = ApiCitations::numbered([("https://a/".into(), None), (" ".into(), None), ("https://a/".into(), None)]);
        let ApiCitations::Numbered { list } = &c else { panic!("{c:?}") };
        assert_eq!(list.len(), 3);
        assert_eq!(c.urls(), ["https://a/"]);
        assert_eq!(ApiCitations::numbered([(" ".into(), Some("t".into()))]), ApiCitations::None);
    }

    fn cited(analysis: &crate::scoring::Analysis, needle: &str) -> Vec<String> {
        let claim = analysis.claims.iter().find(|c| c.text.contains(needle)).unwrap_or_else(|| {
            panic!("no claim holds {needle:?}: {:?}", analysis.claims.iter().map(|c| &c.text).collect::<Vec<_>>())
        });
        claim
            .cited
            .iter()
            .map(|i| analysis.references.iter().find(|r| r.index == *i).and_then(|r| r.url.clone()).unwrap_or_default())
            .collect()
    }

    /// Perplexity: `[n]` is the API's citation `n`, with no reference list
    /// in the text; markers before and after the full stop, adjacent and
    /// comma groups; a duplicated URL keeps both positions; the tracking
    /// parameter goes; a marker past the list stays unresolved.
    #[test]
    fn numbered_citations_resolve_markers() {
        let raw = "Sales grew 5% [1]. Costs fell.[2] Both moved [1][3]. Margins rose [2, 4]. Nothing here [7].";
        let list = ApiCitations::numbered(
            [
                "https://a.example/x?utm_source=perplexity",
                "https://b.example/",
                "https://a.example/x",
                "https://d.example/",
            ]
            .map(|u| (u.to_owned(), None)),
        );
        let a = crate::scoring::analyse_output(raw, &list, None).unwrap();
        assert_eq!(a.format, crate::scoring::ReportFormat::Numbered);
        assert_eq!(cited(&a, "Sales"), ["https://a.example/x"]);
        assert_eq!(cited(&a, "Costs"), ["https://b.example/"]);
        assert_eq!(cited(&a, "Both"), ["https://a.example/x", "https://a.example/x"]);
        assert_eq!(cited(&a, "Margins"), ["https://b.example/", "https://d.example/"]);
        assert_eq!((a.total_citations, a.unresolved_citations, a.unresolved_indices.clone()), (7, 1, vec![7]));
        assert!(a.references.iter().all(|r| r.origin == crate::scoring::ReferenceOrigin::Api));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }

    /// The text's own list and the API's: the same URL is known to both, a
    /// different one yields to the API's with a warning.
    #[test]
    fn numbered_citations_reconcile_with_the_text() {
        let raw = "Sales grew [1]. Costs fell [2].\n\n## Sources\n\n1. https://a.example/\n2. https://wrong.example/\n";
        let list = ApiCitations::numbered(["https://a.example/", "https://b.example/"].map(|u| (u.to_owned(), None)));
        let a = crate::scoring::analyse_output(raw, &list, None).unwrap();
        let origins: Vec<_> = a.references.iter().map(|r| (r.index, r.origin)).collect();
        use crate::scoring::ReferenceOrigin::{Api, Both};
        assert_eq!(origins, [(1, Both), (2, Api)]);
        assert_eq!(cited(&a, "Costs"), ["https://b.example/"]);
        assert!(a.warnings.iter().any(|w| w.contains("wrong.example")), "{:?}", a.warnings);
    }

    /// Responses and chat annotations: a span over a Markdown link is that
    /// link; a span over a plain sentence gets a marker at its end, so the
    /// claim whose sentence holds it cites it; one URL cited by two
    /// sentences is one reference.
    #[test]
    fn annotations_reach_their_sentences() {
        let raw = "Café prices rose 3% in 2024. The index ([stats.example](https://stats.example/cpi?utm_source=openai)) \
                   fell later. Wages — in € — kept pace. Nothing cites this sentence.";
        let cp = |needle: &str| raw[..raw.find(needle).unwrap()].chars().count();
        let len = |s: &str| s.chars().count();
        let spans = ApiCitations::spans([
            ApiSpan {
                start: cp("Café"),
                end: cp("Café") + len("Café prices rose 3% in 2024. "),
                url: "https://news.example/a?utm_source=openai".into(),
                title: Some("News".into()),
            },
            ApiSpan {
                start: cp("([stats"),
                end: cp(" fell later"),
                url: "https://stats.example/cpi?utm_source=openai".into(),
                title: None,
            },
            ApiSpan {
                start: cp("Wages"),
                end: cp("Wages") + len("Wages — in € — kept pace."),
                url: "https://news.example/a".into(),
                title: None,
            },
        ]);
        let a = crate::scoring::analyse_output(raw, &spans, None).unwrap();
        assert_eq!(a.format, crate::scoring::ReportFormat::MarkdownLinks);
        assert_eq!(cited(&a, "Café"), ["https://news.example/a"]);
        assert_eq!(cited(&a, "index"), ["https://stats.example/cpi"]);
        assert_eq!(cited(&a, "Wages"), ["https://news.example/a"]);
        assert!(cited(&a, "Nothing").is_empty());
        assert_eq!(a.references.len(), 2);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let body = a.normalised_body.unwrap();
        assert!(body.starts_with("Café prices rose 3% in 2024.[2] The index (stats.example[1]) fell"), "{body}");
    }

    /// No sentence of a reasoning block is a claim, and its markers are
    /// not counted; the answer after it is scored.
    #[test]
    fn reasoning_is_never_scored() {
        let raw = "<think>\nI found 18 relevant sources [1].\n\nThe user wants numbers. I will check them.\n</think>\n\n\
                   ## Answer\n\nSales grew 5% [1].";
        let list = ApiCitations::numbered([("https://a.example/".to_owned(), None)]);
        let a = crate::scoring::analyse_output(raw, &list, None).unwrap();
        let texts: Vec<&str> = a.claims.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["Sales grew 5% [1]."]);
        assert_eq!(a.total_citations, 1);
        assert_eq!(a.reasoning.len(), 1);
        let body = a.normalised_body.as_deref().unwrap();
        assert_eq!(&body[a.claims[0].offset..a.claims[0].offset + 5], "Sales");
    }

    /// A span that covers no body text (a code block) is not counted: a
    /// warning says so, and the table gets no entry that nothing cites.
    #[test]
    fn a_span_without_body_text_adds_no_reference() {
        let raw = "Sales grew 5% this year.\n\n```\ncode here\n```\n";
        let start = raw[..raw.find("code here").unwrap()].chars().count();
        let spans = ApiCitations::spans([span(start, start + 9, "https://code.example/")]);
        let a = crate::scoring::analyse_output(raw, &spans, None).unwrap();
        assert!(a.references.is_empty(), "{:?}", a.references);
        assert!(a.warnings.iter().any(|w| w.contains("code.example")), "{:?}", a.warnings);
        let long = ApiCitations::spans([span(0, 5, &format!("https://x.example/{}", "a".repeat(MAX_URL_BYTES)))]);
        assert_eq!(long, ApiCitations::None, "an over-long URL is no citation");
    }
}
