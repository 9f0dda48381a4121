//! Integrity of citation normalisation as properties (seed 000 section 4,
//! step 5: "wording and sentence boundaries are unmodified").
//!
//! Reports are generated as paragraphs of sentences built from words that
//! stress the segmenter (abbreviations, decimals, URLs with dots), with
//! some words or phrases wrapped in Markdown links whose URLs carry
//! tracking and content parameters. The generator builds, side by side, the
//! report and the text a reader sees (the same report without link syntax).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cohort_core::scoring::{ReportFormat, analyse, canonicalise, normalise_markdown_links, strip_markers};
use proptest::prelude::*;

const WORDS: &[&str] = &[
    "energy",
    "prices",
    "rose",
    "sharply",
    "in",
    "the",
    "U.S.",
    "and",
    "e.g.",
    "Fig. 2",
    "shows",
    "3.5",
    "percent",
    "data",
    "from",
    "https://stats.example.org/v1.2/table.csv",
    "www.example.com",
    "Dr. Smith",
    "reported",
    "growth",
    "of",
    "0.75",
    "et al.",
    "found",
    "similar",
    "results",
    "No. 5",
    "ranked",
    "first",
    "J. Harris",
    "said",
    "so",
];

const HOSTS: &[&str] = &["https://a.example.org", "https://B.Example.org:443", "http://c.example.net"];
const PATHS: &[&str] = &["/", "/report", "/data/v2.1/page.html", "/a_(b)"];
const PARAMS: &[&str] = &["utm_source=x", "page=2", "ref=hn", "lang=de", "fbclid=1", "id=7", "v=3", "tab=a"];

/// One piece of a sentence: plain words, or words wrapped in a link.
#[derive(Debug, Clone)]
enum Piece {
    Words(Vec<&'static str>),
    Link { words: Vec<&'static str>, url: String },
}

fn url() -> impl Strategy<Value = String> {
    (
        prop::sample::select(HOSTS),
        prop::sample::select(PATHS),
        prop::collection::vec(prop::sample::select(PARAMS), 0..3),
        prop::bool::ANY,
    )
        .prop_map(|(host, path, params, fragment)| {
            let mut url = format!("{host}{path}");
            if !params.is_empty() {
                url.push('?');
                url.push_str(&params.join("&"));
            }
            if fragment {
                url.push_str("#sec");
            }
            url
        })
}

fn words(max: usize) -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop::sample::select(WORDS), 1..max)
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        3 => words(5).prop_map(Piece::Words),
        1 => (words(3), url()).prop_map(|(words, url)| Piece::Link { words, url }),
    ]
}

/// A sentence: a capitalised opening word, pieces, and an ending. When
/// `end_in_link` is set and the last piece is a link, the final punctuation
/// goes inside its anchor (`[grew fast.](url)`).
fn sentence() -> impl Strategy<Value = (Vec<Piece>, &'static str, bool)> {
    (prop::collection::vec(piece(), 1..5), prop::sample::select(&[".", "?", "!", "."][..]), prop::bool::ANY)
}

/// Renders (report, reader's text) for paragraphs of sentences.
fn render(paragraphs: &[Vec<(Vec<Piece>, &'static str, bool)>]) -> (String, String) {
    let (mut report, mut plain) = (String::new(), String::new());
    for (p, sentences) in paragraphs.iter().enumerate() {
        if p > 0 {
            report.push_str("\n\n");
            plain.push_str("\n\n");
        }
        for (s, (pieces, end, end_in_link)) in sentences.iter().enumerate() {
            let lead = if s == 0 { "Analysts" } else { " Analysts" };
            report.push_str(lead);
            plain.push_str(lead);
            for (k, piece) in pieces.iter().enumerate() {
                let last = k + 1 == pieces.len();
                match piece {
                    Piece::Words(w) => {
                        report.push(' ');
                        plain.push(' ');
                        report.push_str(&w.join(" "));
                        plain.push_str(&w.join(" "));
                        if last {
                            report.push_str(end);
                            plain.push_str(end);
                        }
                    }
                    Piece::Link { words, url } => {
                        let mut anchor = words.join(" ");
                        let inside = last && *end_in_link;
                        if inside {
                            anchor.push_str(end);
                        }
                        report.push_str(&format!(" [{anchor}]({url})"));
                        plain.push(' ');
                        plain.push_str(&anchor);
                        if last && !inside {
                            report.push_str(end);
                            plain.push_str(end);
                        }
                    }
                }
            }
        }
    }
    (report, plain)
}

fn report() -> impl Strategy<Value = Vec<Vec<(Vec<Piece>, &'static str, bool)>>> {
    prop::collection::vec(prop::collection::vec(sentence(), 1..5), 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Removing the [n] markers from the normalised body gives back the
    /// original text without its link syntax, byte for byte.
    #[test]
    fn stripping_markers_gives_back_the_original_wording(paragraphs in report()) {
        let (report, plain) = render(&paragraphs);
        let normalised = normalise_markdown_links(&report).unwrap();
        prop_assert_eq!(strip_markers(&normalised.body), plain);
    }

    /// The sentences (claims and non-claims alike, here all assertive or
    /// questions) are the same before and after normalisation: the claims of
    /// the normalised report, markers removed, are the claims of the text
    /// without links, in the same order.
    #[test]
    fn sentence_boundaries_are_unchanged(paragraphs in report()) {
        let (report, plain) = render(&paragraphs);
        let normalised = analyse(&report, Some(ReportFormat::MarkdownLinks)).unwrap();
        let reference = analyse(&plain, Some(ReportFormat::Numbered)).unwrap();
        let got: Vec<String> = normalised.claims.iter().map(|c| strip_markers(&c.text)).collect();
        let want: Vec<String> = reference.claims.iter().map(|c| c.text.clone()).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(reference.total_citations, 0);
    }

    /// Every link gets an index, one per distinct canonical URL, 1..=n in
    /// order of first appearance, and each link's marker resolves.
    #[test]
    fn indices_are_sequential_per_canonical_url(paragraphs in report()) {
        let (report, _) = render(&paragraphs);
        let analysis = analyse(&report, Some(ReportFormat::MarkdownLinks)).unwrap();
        let mut distinct: Vec<String> = Vec::new();
        for pieces in paragraphs.iter().flatten().map(|(p, _, _)| p) {
            for piece in pieces {
                if let Piece::Link { url, .. } = piece {
                    let canonical = canonicalise(url).unwrap();
                    if !distinct.contains(&canonical) {
                        distinct.push(canonical);
                    }
                }
            }
        }
        let table: Vec<String> = analysis.references.iter().filter_map(|r| r.url.clone()).collect();
        prop_assert_eq!(&table, &distinct);
        let indices: Vec<u32> = analysis.references.iter().map(|r| r.index).collect();
        prop_assert_eq!(indices, (1..=u32::try_from(distinct.len()).unwrap()).collect::<Vec<_>>());
        prop_assert_eq!(analysis.unresolved_citations, 0);
    }

    /// Canonicalisation is idempotent and never keeps a tracking parameter
    /// or a fragment.
    #[test]
    fn canonicalisation_is_idempotent(url in url()) {
        let once = canonicalise(&url).unwrap();
        prop_assert_eq!(canonicalise(&once).unwrap(), once.clone());
        for tracking in ["utm_source", "ref=", "fbclid", "#"] {
            prop_assert!(!once.contains(tracking), "{} kept in {}", tracking, once);
        }
    }
}
