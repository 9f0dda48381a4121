//! Claims: the assertive sentences of the report body, each with the
//! indices it cites.
//!
//! Prose leaves are read sentence by sentence; a table row that cites is
//! one claim whole, and so is a heading written as a statement that cites
//! ([`is_statement`]); titles, uncited rows, reference lists, metadata and
//! conflict blocks never yield claims (see
//! [`Role`](super::document::Role)). Within prose, a sentence is a claim
//! unless it is a question, a lead-in that ends with a colon, or has fewer
//! than two words. A marker belongs to the sentence it sits in, and markers
//! right after a sentence's final punctuation belong to that sentence (see
//! [`segment`](super::segment)).

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::markers::{Span, SpanKind};
use super::segment;

/// One extracted claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// 1-based, in document order.
    pub id: u32,
    /// The sentence as written (markers and inline Markdown included),
    /// with line breaks folded into single spaces.
    pub text: String,
    /// The distinct indices its markers cite, ascending.
    pub cited: Vec<u32>,
    /// 1-based line of the sentence start in the normalised body.
    pub line: u32,
    /// Byte offset of the sentence start in the normalised body.
    pub offset: usize,
}

/// Whether a heading reads as a statement rather than a title: assertive,
/// and ending, before any trailing markers, with a full stop or an
/// exclamation mark (`## Ice floats because it is less dense [1].`).
pub(crate) fn is_statement(heading: &str, spans: &[Span]) -> bool {
    let mut end = heading.trim_end().len();
    for s in spans.iter().rev() {
        if s.kind == SpanKind::Marker && s.range.end >= heading[..end].trim_end().len() {
            end = s.range.start;
        }
    }
    let body = heading[..end].trim_end();
    (body.ends_with('.') || body.ends_with('!')) && is_assertive(heading, spans)
}

/// Whether a sentence is assertive: not a question, not a lead-in ending
/// with a colon, and at least two words outside markers, URLs and code.
pub(crate) fn is_assertive(sentence: &str, spans: &[Span]) -> bool {
    is_assertive_at(sentence, 0, spans)
}

/// [`is_assertive`] for a sentence that starts at byte `base` of the text
/// its `spans` were scanned in.
///
/// The sentence is read as its prose with each marker standing for a space
/// and each URL or code span for one word `x`, without writing that prose
/// out: it is the pieces of text between the spans, and since every stand-in
/// is set off by white space no word runs from one piece into the next.
/// `assertive_reads_the_prose_the_spans_leave` checks this against the
/// prose written out.
fn is_assertive_at(sentence: &str, base: usize, spans: &[Span]) -> bool {
    let piece = |k: usize| {
        let start = if k == 0 { 0 } else { spans[k - 1].range.end - base };
        let end = spans.get(k).map_or(sentence.len(), |s| s.range.start - base);
        &sentence[start..end]
    };
    // The last character before any closing punctuation and white space.
    let mut last = None;
    for k in (0..=spans.len()).rev() {
        if let Some(c) = last_before_closing(piece(k)) {
            last = Some(c);
            break;
        }
        if k > 0 && spans[k - 1].kind != SpanKind::Marker {
            last = Some('x');
            break;
        }
    }
    if last.is_some_and(|c| matches!(c, '?' | '？' | ':' | '：')) {
        return false;
    }
    let mut words = spans.iter().filter(|s| s.kind != SpanKind::Marker).count();
    for k in 0..=spans.len() {
        if words >= 2 {
            break;
        }
        words += prose_words(piece(k), 2);
    }
    words >= 2
}

/// Closing punctuation and white space, which may follow a sentence's
/// last word.
fn is_closing(c: char) -> bool {
    c.is_whitespace() || matches!(c, '*' | '_' | ')' | '"' | '\'' | '”' | '’' | ']' | '»')
}

/// The last character of `piece` before its closing punctuation and white
/// space. Read as bytes from the end until a non-ASCII byte, where the
/// characters are decoded instead: decoding every character was most of
/// the assertive test. `piece_readings_equal_decoding_characters` checks
/// the two.
fn last_before_closing(piece: &str) -> Option<char> {
    for &b in piece.as_bytes().iter().rev() {
        if !b.is_ascii() {
            return piece.trim_end_matches(is_closing).chars().next_back();
        }
        if !is_closing(char::from(b)) {
            return Some(char::from(b));
        }
    }
    None
}

/// How many of the white-space separated words of `piece` hold a letter or
/// a digit, counting up to `most`. Read as bytes until `most` are found or
/// a non-ASCII byte, where the piece is read again as characters: a word
/// counted at a white space byte lies in the ASCII bytes before it, where
/// both readings agree.
fn prose_words(piece: &str, most: usize) -> usize {
    let mut count = 0;
    let mut alphanumeric = false;
    for &b in piece.as_bytes() {
        if !b.is_ascii() {
            return piece.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).take(most).count();
        }
        if char::from(b).is_whitespace() {
            count += usize::from(alphanumeric);
            if count >= most {
                return most;
            }
            alphanumeric = false;
        } else {
            alphanumeric |= b.is_ascii_alphanumeric();
        }
    }
    (count + usize::from(alphanumeric)).min(most)
}

/// The claims of one prose leaf: its assertive sentences, as (range in
/// `text`, cited indices), given the leaf's scanned spans.
#[cfg(test)]
pub(crate) fn sentences_of(text: &str, spans: &[Span]) -> Vec<(Range<usize>, Vec<u32>)> {
    let mut out = Vec::new();
    sentences_into(text, spans, &mut segment::Scratch::default(), &mut out);
    out
}

/// [`sentences_of`] appended to `out`, with the sentence pass's buffers
/// reused from `scratch`.
pub(crate) fn sentences_into(
    text: &str,
    spans: &[Span],
    scratch: &mut segment::Scratch,
    out: &mut Vec<(Range<usize>, Vec<u32>)>,
) {
    // Sentences and spans are both in order: walk them together.
    let mut next = 0;
    let sentences = segment::split_sentences_into(text, spans, scratch);
    out.extend(sentences.iter().cloned().filter_map(|range| {
        while next < spans.len() && spans[next].range.start < range.start {
            next += 1;
        }
        let first = next;
        while next < spans.len() && spans[next].range.end <= range.end {
            next += 1;
        }
        let inside = &spans[first..next];
        if !is_assertive_at(&text[range.clone()], range.start, inside) {
            return None;
        }
        let mut cited: Vec<u32> = inside.iter().flat_map(|s| s.indices.iter().copied()).collect();
        cited.sort_unstable();
        cited.dedup();
        Some((range, cited))
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::markers::scan;

    fn assertive(s: &str) -> bool {
        is_assertive(s, &scan(s))
    }

    /// Questions, lead-ins and one-word fragments are not claims.
    #[test]
    fn filters_non_assertive_sentences() {
        assert!(assertive("Sales grew 5% [1]."));
        assert!(assertive("Revenue: $5B [2]"));
        assert!(!assertive("Did sales grow? [1]"));
        assert!(!assertive("**Why does it matter?**"));
        assert!(!assertive("The main findings are:"));
        assert!(!assertive("Python"));
        assert!(!assertive("See [3]."));
        assert!(!assertive("https://x.org/a.b [4]"));
    }

    /// The rule as first written: the prose written out, markers as
    /// spaces and other spans as `x`, then its end and its words read.
    fn assertive_by_writing_the_prose(sentence: &str, spans: &[Span]) -> bool {
        let mut prose = String::new();
        let mut at = 0;
        for span in spans {
            prose.push_str(&sentence[at..span.range.start]);
            prose.push_str(if span.kind == SpanKind::Marker { " " } else { " x " });
            at = span.range.end;
        }
        prose.push_str(&sentence[at..]);
        let closing = |c: char| c.is_whitespace() || matches!(c, '*' | '_' | ')' | '"' | '\'' | '”' | '’' | ']' | '»');
        if prose.trim_end_matches(closing).ends_with(['?', '？', ':', '：']) {
            return false;
        }
        prose.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).take(2).count() == 2
    }

    proptest::proptest! {
        /// Reading the pieces between the spans gives the verdict of
        /// reading the prose written out, on text dense in markers, URLs,
        /// code, closing punctuation, questions and colons.
        #[test]
        fn assertive_reads_the_prose_the_spans_leave(
            text in proptest::string::string_regex("([ab]{1,3}|[ ?:*)\\]\"”]|\\[[12]\\]|`c`|https://x\\.org|？|é){0,12}").unwrap()
        ) {
            let spans = scan(&text);
            proptest::prop_assert_eq!(is_assertive(&text, &spans), assertive_by_writing_the_prose(&text, &spans));
        }
    }

    proptest::proptest! {
        /// The byte readings of a piece (its last character before closing
        /// punctuation, its words) are the character readings, on text
        /// dense in white space (vertical tab and non-ASCII spaces
        /// included), closing punctuation, letters, digits and non-ASCII
        /// letters and quotes.
        #[test]
        fn piece_readings_equal_decoding_characters(
            piece in r#"[ab1 \t\n\x0b\x0c\r*_)"'\]?:.\-é”\u{a0}\u{2003}？]{0,16}"#
        ) {
            proptest::prop_assert_eq!(last_before_closing(&piece), piece.trim_end_matches(is_closing).chars().next_back());
            for most in 1..4 {
                let words = piece.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).take(most).count();
                proptest::prop_assert_eq!(prose_words(&piece, most), words);
            }
        }
    }

    /// Claims are the assertive sentences, each citing the distinct indices
    /// of its markers.
    #[test]
    fn cites_distinct_sorted_indices() {
        let text = "A grew [3, 1]. B fell.[2-3][3] C rose.";
        let got: Vec<(&str, Vec<u32>)> =
            sentences_of(text, &scan(text)).into_iter().map(|(r, c)| (&text[r], c)).collect();
        assert_eq!(got, vec![("A grew [3, 1].", vec![1, 3]), ("B fell.[2-3][3]", vec![2, 3]), ("C rose.", vec![])]);
        let text = "Why? [1] It grew [2].";
        let got: Vec<(&str, Vec<u32>)> =
            sentences_of(text, &scan(text)).into_iter().map(|(r, c)| (&text[r], c)).collect();
        assert_eq!(got, vec![("It grew [2].", vec![2])], "a question is no claim");
    }
}
