//! Sentence segmentation: UAX #29 sentence boundaries (the
//! `unicode-segmentation` crate) plus the rules a research report needs on
//! top of them.
//!
//! UAX #29 already keeps decimals (`3.5`) and lowercase continuations
//! (`e.g. the`) together. It does not know abbreviations before capitals or
//! numbers (`U.S. Army`, `Fig. 2 Shows`), and it breaks inside markers
//! (`5%.[1] Next` splits after the `[`) and URLs (`cnn.Com`). So the text is
//! first *masked*, byte for byte with offsets unchanged: citation markers
//! become spaces (they then trail the sentence they follow, as a reader
//! attaches them) and URLs and code spans become `x` runs (one opaque word).
//! UAX #29 runs on the masked text, and a boundary right after a known
//! abbreviation or initial is then dropped. ASCII text, most of any
//! report, gets the UAX #29 rules written out for ASCII
//! ([`ascii_boundaries`], tested against the crate): looking every
//! character up in the crate's tables was the largest single cost of
//! scoring.

use std::ops::Range;

use unicode_segmentation::UnicodeSegmentation;

use super::markers::{self, Span, SpanKind};

/// Abbreviations that never end a sentence, lowercase, with their dots.
const ABBREVIATIONS: &[&str] = &[
    "e.g.", "i.e.", "cf.", "vs.", "viz.", "al.", "approx.", "ca.", "resp.", "incl.", "esp.", "dr.", "mr.", "mrs.",
    "ms.", "prof.", "st.", "jr.", "sr.", "gen.", "sen.", "rep.", "dept.", "est.", "govt.", "corp.", "mt.", "ft.",
];

/// Abbreviations that do not end a sentence when a number follows
/// (`Fig. 2`, `No. 5`, `pp. 10-12`, `Jan. 5`), but may end one otherwise
/// (`I said no.`).
const ABBREVIATIONS_BEFORE_NUMBER: &[&str] = &[
    "fig.", "figs.", "no.", "nos.", "vol.", "vols.", "p.", "pp.", "eq.", "eqs.", "sec.", "ch.", "chap.", "ref.",
    "refs.", "art.", "para.", "tab.", "app.", "ex.", "op.", "n.", "jan.", "feb.", "mar.", "apr.", "jun.", "jul.",
    "aug.", "sep.", "sept.", "oct.", "nov.", "dec.", "v.", "ver.", "art.", "r.", "s.",
];

/// The byte ranges of the sentences of `text` (one block of inline text,
/// lines already joined), trimmed of surrounding whitespace, in order.
/// Empty sentences are dropped. Markers that follow a sentence's final
/// punctuation belong to that sentence.
pub fn split_sentences(text: &str) -> Vec<Range<usize>> {
    split_sentences_with(text, &markers::scan(text))
}

/// [`split_sentences`] with the text's spans already scanned.
pub(crate) fn split_sentences_with(text: &str, spans: &[Span]) -> Vec<Range<usize>> {
    let mut scratch = Scratch::default();
    split_sentences_into(text, spans, &mut scratch);
    scratch.sentences
}

/// The buffers of the sentence pass, reused from one leaf to the next:
/// a report has thousands of leaves, and allocating the masked text, the
/// boundaries and the sentences anew for each was a large share of the
/// pass.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    masked: Vec<u8>,
    boundaries: Vec<usize>,
    sentences: Vec<Range<usize>>,
}

/// [`split_sentences_with`] into `scratch`: the sentences are in the
/// slice returned, until the next call.
pub(crate) fn split_sentences_into<'s>(text: &str, spans: &[Span], scratch: &'s mut Scratch) -> &'s [Range<usize>] {
    let Scratch { masked, boundaries, sentences } = scratch;
    mask_into(text, spans, masked);
    boundaries.clear();
    sentences.clear();
    if text.is_ascii() {
        sentences_ascii(text, masked, boundaries, sentences);
    } else {
        // Spans cover whole characters, so the masked text is UTF-8; were
        // that ever not so, fall back to the unmasked text rather than fail.
        let masked = std::str::from_utf8(masked).unwrap_or(text);
        sentences_general(text, masked, boundaries, sentences);
    }
    merge_citation_fragments(text, spans, sentences);
    sentences
}

/// The sentences of `text` before citation fragments are merged: cut at
/// each UAX #29 boundary of the `masked` text that does not follow an
/// abbreviation or an initial, and trimmed.
fn sentences_general(text: &str, masked: &str, boundaries: &mut Vec<usize>, sentences: &mut Vec<Range<usize>>) {
    uax29_boundaries(masked, boundaries);
    let mut start = 0;
    for &at in boundaries.iter() {
        if keeps_going(masked, at) {
            continue;
        }
        push_trimmed(text, start..at, sentences);
        start = at;
    }
    push_trimmed(text, start..text.len(), sentences);
}

/// [`sentences_general`] for ASCII text (most of any report), reading
/// bytes: the boundaries, the token before each and the trimming need no
/// UTF-8 check of the masked text and no character decoding, which were
/// a fifth of the sentence pass. `ascii_sentences_equal_the_general_path`
/// checks the two against each other.
fn sentences_ascii(text: &str, masked: &[u8], boundaries: &mut Vec<usize>, sentences: &mut Vec<Range<usize>>) {
    ascii_boundaries(masked, 0, boundaries);
    let bytes = text.as_bytes();
    let mut start = 0;
    for &at in boundaries.iter() {
        if keeps_going_ascii(masked, at) {
            continue;
        }
        sentences.extend(trimmed_ascii(bytes, start..at));
        start = at;
    }
    sentences.extend(trimmed_ascii(bytes, start..bytes.len()));
}

/// Joins to the sentence before it a "sentence" that is only a citation
/// in parentheses, `(source.example[3])`: what a link written after the
/// full stop becomes (`... finished. ([source.example](https://...))`, the
/// form OpenAI's search models use), which cites the sentence it follows.
/// It must hold a marker, open with `(` and close with `)` (a full stop
/// after it allowed), and hold at most one word besides its markers.
fn merge_citation_fragments(text: &str, spans: &[Span], sentences: &mut Vec<Range<usize>>) {
    if sentences.len() < 2 || !spans.iter().any(|s| s.kind == SpanKind::Marker) {
        return;
    }
    // Merged in place: each sentence read gives at most one, so the
    // merged ones (`..written`) never overtake the one being read.
    let mut written = 0usize;
    for read in 0..sentences.len() {
        let range = sentences[read].clone();
        // UAX #29 does not break after the `)` when text follows on the
        // line, so the fragment may open the next sentence: only the
        // fragment moves.
        let lead = text[range.clone()]
            .starts_with('(')
            .then(|| text[range.clone()].find(')'))
            .flatten()
            .map(|close| range.start..range.start + close + 1)
            .filter(|lead| is_citation_fragment(text, spans, lead.clone()));
        let previous = written.checked_sub(1);
        match (previous, lead) {
            (Some(previous), Some(lead)) if !text[lead.end..range.end].chars().any(char::is_alphanumeric) => {
                sentences[previous].end = range.end;
            }
            (Some(previous), Some(lead)) => {
                sentences[previous].end = lead.end;
                if let Some(rest) = trimmed(text, lead.end..range.end) {
                    sentences[written] = rest;
                    written += 1;
                }
            }
            _ => {
                sentences[written] = range;
                written += 1;
            }
        }
    }
    sentences.truncate(written);
}

fn is_citation_fragment(text: &str, spans: &[Span], range: Range<usize>) -> bool {
    let inside: Vec<&Span> =
        spans.iter().filter(|s| s.range.start >= range.start && s.range.end <= range.end).collect();
    if !inside.iter().any(|s| s.kind == SpanKind::Marker) {
        return false;
    }
    let mut rest = String::with_capacity(range.len());
    let mut at = range.start;
    for span in inside.iter().filter(|s| s.kind == SpanKind::Marker) {
        rest.push_str(&text[at..span.range.start]);
        at = span.range.end;
    }
    rest.push_str(&text[at..range.end]);
    let rest = rest.trim().trim_end_matches('.').trim_end();
    let Some(inner) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) else { return false };
    inner.split_whitespace().count() <= 1
}

/// The UAX #29 sentence boundaries of `text` strictly inside it, exactly
/// as `split_sentence_bound_indices` gives them, computed only on windows
/// around the bytes where a boundary can arise.
///
/// Why: classifying every character is most of the scorer's time, and
/// UAX #29 only breaks after a terminator (`.`, `?`, `!`, non-ASCII ones)
/// or a paragraph separator. A window runs from a *safe cut* before such a
/// byte to the first safe cut after it, where a safe cut is a position
/// right after an ASCII letter and not on a terminator. Every rule that
/// could break later looks back no further than the last terminator, and
/// every pending decision (SB8's look-ahead included) is settled by the
/// first letter after it; SB7, the one rule that looks one character before
/// a terminator, finds that character inside the window, since a window
/// never starts on a terminator. So the rules give the same answer inside
/// each window as on the whole text, which
/// `windowed_boundaries_equal_full_uax29` checks as a property.
///
/// ASCII text, the common case, needs no windows: [`ascii_boundaries`]
/// gives the same boundaries in one pass. In other text each ASCII window
/// goes to it too, and only the windows holding another character go to
/// the general machine.
fn uax29_boundaries(text: &str, out: &mut Vec<usize>) {
    if text.is_ascii() {
        ascii_boundaries(text.as_bytes(), 0, out);
        return;
    }
    let bytes = text.as_bytes();
    let hot = |b: u8| matches!(b, b'.' | b'?' | b'!' | b'\r' | b'\n') || b >= 0x80;
    let safe = |q: usize| bytes[q - 1].is_ascii_alphabetic() && !hot(bytes[q]);
    let mut done = 0; // everything before this is classified
    let mut t = 0;
    while t < bytes.len() {
        if !hot(bytes[t]) {
            t += 1;
            continue;
        }
        let start = (done.max(1)..=t).rev().find(|&q| safe(q)).unwrap_or(done);
        let mut end = t + 1;
        while end < bytes.len() && !safe(end) {
            end += 1;
        }
        // Window boundaries are on ASCII bytes or the text's ends, so they
        // are character boundaries.
        let window = text.get(start..end).unwrap_or_default();
        if window.is_ascii() {
            ascii_boundaries(window.as_bytes(), start, out);
        } else {
            out.extend(
                window.split_sentence_bound_indices().map(|(at, _)| start + at).filter(|&at| at > start && at < end),
            );
        }
        done = end;
        t = end;
    }
    out.retain(|&at| at > 0 && at < bytes.len());
}

/// The UAX #29 sentence boundaries strictly inside an ASCII text, plus
/// `offset`, pushed onto `out` in order: the rules of the standard written
/// out for the categories ASCII has, so that the common window (all ASCII)
/// skips the general machine, which looks every character up in a range
/// table. The general machine stays the reference:
/// `ascii_boundaries_equal_uax29` checks every ASCII string of up to three
/// characters and random longer ones against it, and a window holding any
/// other character goes to it.
///
/// A boundary arises only (SB4) right after a paragraph separator (`\r`,
/// `\n`, `\r\n` as one) and (SB11) after a terminator `.` `?` `!` with
/// its closing punctuation and spaces (`SATerm Close* Sp*`), unless what
/// follows continues the sentence: a paragraph separator (SB9, SB10: the
/// break comes after it), another terminator or `,` `-` `:` `;` (SB8a); and
/// after a full stop, a digit right after it (SB6: `3.5`), a capital right
/// after a letter and it (SB7: `U.S`), or a lowercase letter before any
/// other letter, terminator or separator (SB8: `e.g. the`, `etc. (see`).
fn ascii_boundaries(bytes: &[u8], offset: usize, out: &mut Vec<usize>) {
    let close = |b: u8| matches!(b, b'"' | b'\'' | b'(' | b')' | b'[' | b']' | b'{' | b'}');
    let sp = |b: u8| matches!(b, b' ' | b'\t' | 0x0b | 0x0c);
    let terminator = |b: u8| matches!(b, b'.' | b'?' | b'!');
    let separator = |b: u8| matches!(b, b'\r' | b'\n');
    let continues = |i: usize, k: usize, c: u8| {
        if separator(c) || terminator(c) || matches!(c, b',' | b'-' | b':' | b';') {
            return true;
        }
        if bytes[i] != b'.' {
            return false;
        }
        let adjacent = k == i + 1;
        (adjacent && c.is_ascii_digit())
            || (adjacent && c.is_ascii_uppercase() && i > 0 && bytes[i - 1].is_ascii_alphabetic())
            || bytes[k..]
                .iter()
                .find(|&&b| b.is_ascii_alphabetic() || terminator(b) || separator(b))
                .is_some_and(u8::is_ascii_lowercase)
    };
    let n = bytes.len();
    let before = out.len();
    // Terminators and separators are found by SIMD search (both are rare
    // beside letters); the closing punctuation and spaces after a
    // terminator hold neither, so each is read on its own.
    for i in memchr::memchr3_iter(b'.', b'?', b'!', bytes) {
        let mut k = i + 1;
        while k < n && close(bytes[k]) {
            k += 1;
        }
        while k < n && sp(bytes[k]) {
            k += 1;
        }
        if k < n && !continues(i, k, bytes[k]) {
            out.push(offset + k);
        }
    }
    let after_terminators = out.len();
    let mut separators = memchr::memchr2_iter(b'\r', b'\n', bytes);
    while let Some(i) = separators.next() {
        let after = if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            separators.next(); // `\r\n` is one separator
            i + 2
        } else {
            i + 1
        };
        if after < n {
            out.push(offset + after);
        }
    }
    if out.len() > after_terminators && after_terminators > before {
        out[before..].sort_unstable();
    }
}

/// `text` with markers blanked to spaces and URLs and code spans to `x`,
/// byte for byte (so every offset, and every UTF-8 boundary, is kept).
pub fn mask(text: &str) -> String {
    mask_with(text, &markers::scan(text))
}

fn mask_with(text: &str, spans: &[Span]) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    mask_into(text, spans, &mut bytes);
    // Spans cover whole characters, so the result is UTF-8; were that ever
    // not so, fall back to the unmasked text rather than fail.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_owned())
}

/// The bytes of [`mask`] into `out` (cleared first).
fn mask_into(text: &str, spans: &[Span], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(text.as_bytes());
    for span in spans {
        let fill = if span.kind == SpanKind::Marker { b' ' } else { b'x' };
        if let Some(stretch) = out.get_mut(span.range.clone()) {
            stretch.fill(fill);
        }
    }
}

fn push_trimmed(text: &str, range: Range<usize>, out: &mut Vec<Range<usize>>) {
    out.extend(trimmed(text, range));
}

/// `range` of `text` without its leading and trailing white space, or
/// `None` when nothing is left.
fn trimmed(text: &str, range: Range<usize>) -> Option<Range<usize>> {
    let piece = &text[range.clone()];
    let lead = piece.len() - piece.trim_start().len();
    let trail = piece.len() - piece.trim_end().len();
    (lead + trail < piece.len()).then(|| range.start + lead..range.end - trail)
}

/// Whether the UAX #29 boundary at `at` follows an abbreviation or an
/// initial and so is not a sentence end.
fn keeps_going(masked: &str, at: usize) -> bool {
    let before = masked[..at].trim_end();
    let token = before.rsplit(char::is_whitespace).next().unwrap_or(before);
    let token = token.trim_start_matches(['(', '[', '"', '\'', '“', '‘', '*', '_']);
    if !token.ends_with('.') {
        return false;
    }
    if is_listed(token, ABBREVIATIONS, &ABBREVIATION_SHAPES) || is_initials(token) {
        return true;
    }
    let next_is_number = masked[at..].trim_start().starts_with(|c: char| c.is_ascii_digit());
    next_is_number && is_listed(token, ABBREVIATIONS_BEFORE_NUMBER, &BEFORE_NUMBER_SHAPES)
}

/// White space in ASCII as `char::is_whitespace` has it (vertical tab
/// included, unlike `u8::is_ascii_whitespace`).
fn is_ascii_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

/// [`trimmed`] for ASCII text.
fn trimmed_ascii(bytes: &[u8], range: Range<usize>) -> Option<Range<usize>> {
    let (mut start, mut end) = (range.start, range.end);
    while start < end && is_ascii_space(bytes[start]) {
        start += 1;
    }
    while end > start && is_ascii_space(bytes[end - 1]) {
        end -= 1;
    }
    (start < end).then_some(start..end)
}

/// [`keeps_going`] for ASCII masked text.
fn keeps_going_ascii(masked: &[u8], at: usize) -> bool {
    let mut end = at;
    while end > 0 && is_ascii_space(masked[end - 1]) {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && !is_ascii_space(masked[start - 1]) {
        start -= 1;
    }
    while start < end && matches!(masked[start], b'(' | b'[' | b'"' | b'\'' | b'*' | b'_') {
        start += 1;
    }
    let token = &masked[start..end];
    if token.last() != Some(&b'.') {
        return false;
    }
    if is_listed_ascii(token, ABBREVIATIONS, &ABBREVIATION_SHAPES) || is_initials_ascii(token) {
        return true;
    }
    let next = masked[at..].iter().find(|&&b| !is_ascii_space(b));
    next.is_some_and(u8::is_ascii_digit) && is_listed_ascii(token, ABBREVIATIONS_BEFORE_NUMBER, &BEFORE_NUMBER_SHAPES)
}

/// [`is_initials`] for an ASCII token.
fn is_initials_ascii(token: &[u8]) -> bool {
    let Some((b'.', letters)) = token.split_last() else { return false };
    let short = |p: &[u8]| (1..=2).contains(&p.len()) && p.iter().all(u8::is_ascii_alphabetic);
    if letters.contains(&b'.') {
        letters.split(|&b| b == b'.').all(short)
    } else {
        letters.len() == 1 && letters[0].is_ascii_uppercase()
    }
}

/// For each letter `a`..`z`, bit `n` set when some entry of `list` is `n`
/// bytes long and starts with that letter: a token whose first letter and
/// length no entry has is not compared with every entry.
const fn shapes(list: &[&str]) -> [u16; 26] {
    let mut table = [0u16; 26];
    let mut k = 0;
    while k < list.len() {
        let entry = list[k].as_bytes();
        assert!(entry.len() < 16 && entry[0].is_ascii_lowercase());
        table[(entry[0] - b'a') as usize] |= 1 << entry.len();
        k += 1;
    }
    table
}

const ABBREVIATION_SHAPES: [u16; 26] = shapes(ABBREVIATIONS);
const BEFORE_NUMBER_SHAPES: [u16; 26] = shapes(ABBREVIATIONS_BEFORE_NUMBER);

/// Whether `token`, lowercased, is in `list` (whose entries are lowercase
/// ASCII). An ASCII token is compared ignoring ASCII case, which is the
/// same test without lowercasing it into a new string at every sentence end.
/// `shapes` is [`shapes`] of `list`.
fn is_listed(token: &str, list: &[&str], shapes: &[u16; 26]) -> bool {
    if token.is_ascii() {
        is_listed_ascii(token.as_bytes(), list, shapes)
    } else {
        let lower = token.to_lowercase();
        list.contains(&lower.as_str())
    }
}

/// [`is_listed`] for an ASCII token: compared ignoring ASCII case, which
/// is the same test without lowercasing it into a new string.
fn is_listed_ascii(token: &[u8], list: &[&str], shapes: &[u16; 26]) -> bool {
    // Most tokens before a full stop are words no entry has the first
    // letter and the length of.
    let possible = match token.first() {
        Some(first) if first.is_ascii_alphabetic() && token.len() < 16 => {
            shapes[usize::from(first.to_ascii_lowercase() - b'a')] & (1 << token.len()) != 0
        }
        _ => false,
    };
    possible && list.iter().any(|entry| entry.as_bytes().eq_ignore_ascii_case(token))
}

/// `J.` (a capital initial) or `U.S.`, `e.g.`, `Ph.D.`: letters each
/// followed by a dot, with at most two letters between dots.
fn is_initials(token: &str) -> bool {
    // "U.S." is the letters "U.S" and a final dot.
    let Some(letters) = token.strip_suffix('.') else { return false };
    let short = |p: &str| (1..=2).contains(&p.chars().count()) && p.chars().all(char::is_alphabetic);
    if letters.contains('.') {
        letters.split('.').all(short)
    } else {
        short(letters) && letters.chars().count() == 1 && letters.chars().all(char::is_uppercase)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentences(text: &str) -> Vec<&str> {
        split_sentences(text).into_iter().map(|r| &text[r]).collect()
    }

    /// A citation in parentheses after the full stop, as a link written
    /// there becomes once normalised, belongs to the sentence before it;
    /// a parenthesis of words, or one without a marker, is its own.
    #[test]
    fn parenthesised_citations_join_the_sentence_before() {
        assert_eq!(
            sentences("The works end in 2026. (Reuters[3]) Prices rose."),
            ["The works end in 2026. (Reuters[3])", "Prices rose."]
        );
        assert_eq!(sentences("The works end in 2026. (news.example[3])"), ["The works end in 2026. (news.example[3])"]);
        assert_eq!(sentences("It ended.\n(a.example[1][2])."), ["It ended.\n(a.example[1][2])."]);
        assert_eq!(
            sentences("It ended. (See the annex [2].) Next one."),
            ["It ended.", "(See the annex [2].)", "Next one."]
        );
        assert_eq!(sentences("It ended. (Annex) Next."), ["It ended.", "(Annex) Next."]);
    }

    /// Abbreviations before capitals and numbers do not end sentences;
    /// real sentence ends after them still do.
    #[test]
    fn keeps_abbreviations_together() {
        assert_eq!(
            sentences("The U.S. Army grew. See Fig. 2 Shows more. Dr. Smith agreed, e.g. Jones."),
            vec!["The U.S. Army grew.", "See Fig. 2 Shows more.", "Dr. Smith agreed, e.g. Jones."]
        );
        assert_eq!(sentences("J. R. Smith wrote it. Then he left."), vec!["J. R. Smith wrote it.", "Then he left."]);
        assert_eq!(sentences("I said no. No one came."), vec!["I said no.", "No one came."]);
    }

    /// Decimals and URLs with dots stay inside one sentence.
    #[test]
    fn keeps_decimals_and_urls_together() {
        assert_eq!(
            sentences("It rose 3.5 percent. See cnn.Com or https://Example.org/A.B.html for more. Done."),
            vec!["It rose 3.5 percent.", "See cnn.Com or https://Example.org/A.B.html for more.", "Done."]
        );
    }

    /// Markers after the full stop belong to the sentence before them.
    #[test]
    fn trailing_markers_attach_to_their_sentence() {
        assert_eq!(
            sentences("Sales grew 5%.[1] Costs fell. [2, 3] Profit? Yes [4]."),
            vec!["Sales grew 5%.[1]", "Costs fell. [2, 3]", "Profit?", "Yes [4]."]
        );
    }

    proptest::proptest! {
        /// The windowed UAX #29 pass finds exactly the boundaries of the
        /// full pass, on text dense in terminators, quotes, digits, case
        /// changes, line breaks and non-ASCII terminators.
        #[test]
        fn windowed_boundaries_equal_full_uax29(
            text in proptest::string::string_regex("[a-cA-C1 .?!\"')(\n,;:é。…]{0,80}").unwrap()
        ) {
            let full: Vec<usize> =
                text.split_sentence_bound_indices().map(|(at, _)| at).filter(|&at| at > 0 && at < text.len()).collect();
            let mut windowed = Vec::new();
            uax29_boundaries(&text, &mut windowed);
            proptest::prop_assert_eq!(windowed, full);
        }
    }

    /// UAX #29 as the general machine gives it: the boundaries strictly
    /// inside `text`.
    fn reference_boundaries(text: &str) -> Vec<usize> {
        text.split_sentence_bound_indices().map(|(at, _)| at).filter(|&at| at > 0 && at < text.len()).collect()
    }

    fn ascii(text: &str) -> Vec<usize> {
        let mut out = Vec::new();
        ascii_boundaries(text.as_bytes(), 0, &mut out);
        out
    }

    /// The ASCII rules give exactly the general machine's boundaries on
    /// every ASCII string of up to three characters (so every ASCII
    /// character's category is exercised beside every other's).
    #[test]
    fn ascii_boundaries_equal_uax29() {
        let mut text = String::with_capacity(3);
        for len in 0..=3u32 {
            for code in 0..128u32.pow(len) {
                text.clear();
                text.extend((0..len).map(|k| char::from(((code >> (7 * k)) & 0x7f) as u8)));
                assert_eq!(ascii(&text), reference_boundaries(&text), "{text:?}");
            }
        }
    }

    proptest::proptest! {
        /// The same on longer ASCII text dense in terminators, closing
        /// punctuation, spaces, separators, digits and case changes.
        #[test]
        fn ascii_boundaries_equal_uax29_on_long_text(
            text in proptest::string::string_regex("[abAB19 \t.?!\"')(\\[\\]{},;:$*\r\n-]{0,120}").unwrap()
        ) {
            proptest::prop_assert_eq!(ascii(&text), reference_boundaries(&text));
        }
    }

    /// The sentences of the general path (UTF-8 masked text, UAX #29 via
    /// [`uax29_boundaries`], character trimming), before fragments merge.
    fn general_sentences(text: &str) -> Vec<Range<usize>> {
        let masked = mask(text);
        let (mut boundaries, mut sentences) = (Vec::new(), Vec::new());
        sentences_general(text, &masked, &mut boundaries, &mut sentences);
        sentences
    }

    fn ascii_sentences(text: &str) -> Vec<Range<usize>> {
        let masked = mask(text);
        let (mut boundaries, mut sentences) = (Vec::new(), Vec::new());
        sentences_ascii(text, masked.as_bytes(), &mut boundaries, &mut sentences);
        sentences
    }

    proptest::proptest! {
        /// The byte path for ASCII text cuts and trims exactly as the
        /// general path, on text dense in abbreviations (any case, after
        /// brackets, quotes and emphasis), initials, numbers after them,
        /// every ASCII white space (vertical tab included), markers, URLs
        /// and code.
        #[test]
        fn ascii_sentences_equal_the_general_path(
            text in proptest::string::string_regex(concat!(
                r"(Fig\.|fig\.|NO\.|e\.g\.|U\.S\.|J\.|Ph\.D\.|i\.e\.|vs\.|Dr\.|al\.|x\.|",
                r"ab|Word|2|10|\.|\?|!|\(|\[|\*|_|'|\x22| |\t|\n|\x0b|\x0c|\r|\[1\]|`c\.d`|https://x\.org/a\.b)",
                r"{0,24}",
            )).unwrap()
        ) {
            proptest::prop_assert_eq!(ascii_sentences(&text), general_sentences(&text), "{:?}", text);
        }

        /// The first-letter-and-length filter of [`is_listed`] keeps every
        /// token the plain comparison finds, in any case.
        #[test]
        fn listed_filter_equals_comparing_every_entry(token in "[a-zA-Z.]{0,9}") {
            for (list, shapes) in [
                (ABBREVIATIONS, &ABBREVIATION_SHAPES),
                (ABBREVIATIONS_BEFORE_NUMBER, &BEFORE_NUMBER_SHAPES),
            ] {
                let plain = list.iter().any(|entry| entry.eq_ignore_ascii_case(&token));
                proptest::prop_assert_eq!(is_listed(&token, list, shapes), plain);
            }
        }

        /// The byte reading of initials is the character reading, on ASCII
        /// tokens.
        #[test]
        fn ascii_initials_equal_the_character_reading(token in "[aBc.]{0,7}") {
            proptest::prop_assert_eq!(is_initials_ascii(token.as_bytes()), is_initials(&token));
        }
    }

    /// Every entry, in lower and upper case, is listed.
    #[test]
    fn every_abbreviation_is_listed() {
        for (list, shapes) in
            [(ABBREVIATIONS, &ABBREVIATION_SHAPES), (ABBREVIATIONS_BEFORE_NUMBER, &BEFORE_NUMBER_SHAPES)]
        {
            for entry in list {
                assert!(is_listed(entry, list, shapes) && is_listed(&entry.to_uppercase(), list, shapes), "{entry}");
            }
        }
    }

    /// Masking keeps every offset: the masked text has the input's length.
    #[test]
    fn masking_keeps_offsets() {
        let text = "é [1] `ç` https://ü.org";
        let masked = mask(text);
        assert_eq!(masked.len(), text.len());
        assert_eq!(masked, "é     xxxx xxxxxxxxxxxxxx");
    }
}
