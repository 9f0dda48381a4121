//! Citation markers (`[3]`, `[1, 2]`, `[2-4]`, `[2–4]`, `[^5]`) and the
//! spans of inline text where a bracketed number is not a marker: code spans
//! and URLs.
//!
//! One left-to-right scan classifies a line of inline Markdown into
//! [`Span`]s. The sentence segmenter and the claim extractor use the same
//! spans, so "what is a marker" and "what is a URL" are decided in one
//! place. The scan is linear in the input (code spans are matched through a
//! per-length index of backtick runs, not by searching forward from every
//! run), so hostile input cannot make it quadratic.

use std::ops::Range;

/// The largest index a marker may carry. `[2024]` is far more often a year
/// than the 2024th source, and no report cites a thousand sources.
pub const MAX_MARKER_INDEX: u32 = 999;

/// The widest range a marker may expand (`[1-100]`). A wider one is not
/// read as a marker, so one bracket cannot claim a thousand citations.
pub const MAX_MARKER_RANGE: u32 = 100;

/// The longest link destination (`](...)`) or autolink (`<...>`) masked as
/// a URL. Past it, the text is treated as prose.
const MAX_URLISH_BYTES: usize = 8 * 1024;

/// One citation marker in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Byte range of the marker, brackets included.
    pub range: Range<usize>,
    /// The cited indices in the order written, ranges expanded: `[1, 3-5]`
    /// gives `[1, 3, 4, 5]`. Repeats are kept (`[2, 2]` cites twice).
    pub indices: Vec<u32>,
}

/// What a stretch of inline text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// A citation marker.
    Marker,
    /// A code span, backticks included: its content is code, not prose.
    Code,
    /// A URL: a bare `http(s)://` or `www.` URL, an autolink `<...>`, or a
    /// Markdown link destination `(...)` after `]`.
    Url,
}

/// A classified stretch of inline text; text outside every span is prose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub kind: SpanKind,
    pub range: Range<usize>,
    /// The indices, for a marker; empty otherwise.
    pub indices: Indices,
}

/// How many indices [`Indices`] holds without a heap allocation: enough
/// for `[1, 2, 3]` and for `[2-7]`.
const INLINE_INDICES: usize = 6;

/// The indices of a marker span, read as a slice (`&[u32]`), in the order
/// written with ranges expanded, as [`Marker::indices`].
///
/// Why not a `Vec`: every marker of every leaf had one, and a heap
/// allocation per marker was a large share of the scan's time, while
/// nearly every marker cites a few sources. Up to [`INLINE_INDICES`] are
/// kept in place; a wider marker moves them to the heap.
/// `indices_read_as_the_vec_they_replace` checks both against a `Vec`.
#[derive(Clone)]
pub struct Indices(IndicesRepr);

#[derive(Clone)]
enum IndicesRepr {
    Inline { len: u8, items: [u32; INLINE_INDICES] },
    Heap(Vec<u32>),
}

impl Indices {
    /// No indices (a span that is not a marker).
    pub const fn new() -> Self {
        Indices(IndicesRepr::Inline { len: 0, items: [0; INLINE_INDICES] })
    }

    fn push(&mut self, index: u32) {
        if let IndicesRepr::Inline { len, items } = &mut self.0 {
            if let Some(slot) = items.get_mut(usize::from(*len)) {
                *slot = index;
                *len += 1;
                return;
            }
            let mut spilled = Vec::with_capacity(2 * INLINE_INDICES);
            spilled.extend_from_slice(items);
            self.0 = IndicesRepr::Heap(spilled);
        }
        if let IndicesRepr::Heap(heap) = &mut self.0 {
            heap.push(index);
        }
    }
}

impl Default for Indices {
    fn default() -> Self {
        Indices::new()
    }
}

impl std::ops::Deref for Indices {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        match &self.0 {
            IndicesRepr::Inline { len, items } => &items[..usize::from(*len)],
            IndicesRepr::Heap(heap) => heap,
        }
    }
}

/// Equal when they read the same, wherever they are kept.
impl PartialEq for Indices {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Indices {}

impl std::fmt::Debug for Indices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Indices> for Vec<u32> {
    fn from(indices: Indices) -> Vec<u32> {
        match indices.0 {
            IndicesRepr::Inline { .. } => indices.to_vec(),
            IndicesRepr::Heap(heap) => heap,
        }
    }
}

/// The citation markers of `text`, ignoring bracketed numbers inside code
/// spans and URLs. Never panics, whatever the input.
pub fn parse_markers(text: &str) -> Vec<Marker> {
    scan(text)
        .into_iter()
        .filter(|s| s.kind == SpanKind::Marker)
        .map(|s| Marker { range: s.range, indices: s.indices.into() })
        .collect()
}

/// `text` with every citation marker removed and nothing else changed.
pub fn strip_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for marker in parse_markers(text) {
        out.push_str(&text[at..marker.range.start]);
        at = marker.range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// A claim as the judge sees it (seed 000 3.3: the sentence, without the
/// report's indices, which mean nothing without it): the markers removed,
/// the space a marker leaves before closing punctuation dropped
/// (`"rose [1]."` becomes `"rose."`, not `"rose ."`), trimmed. Unlike
/// [`strip_markers`] it changes spacing, so it is for prompts and traces,
/// never for the integrity of the body.
pub fn judge_sentence(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    judge_sentence_into(text, &mut out);
    out
}

/// [`judge_sentence`] into a buffer the caller reuses (cleared first).
pub fn judge_sentence_into(text: &str, out: &mut String) {
    out.clear();
    let mut at = 0;
    for marker in parse_markers(text) {
        out.push_str(&text[at..marker.range.start]);
        at = marker.range.end;
        let next = text[at..].chars().next();
        if next.is_none_or(|c| matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | ')' | '\u{3002}')) {
            out.truncate(out.trim_end().len());
        }
    }
    out.push_str(&text[at..]);
    let end = out.trim_end().len();
    out.truncate(end);
    let start = out.len() - out.trim_start().len();
    out.drain(..start);
}

/// Classifies `text` into markers, code spans and URLs, in order and
/// without overlap.
pub fn scan(text: &str) -> Vec<Span> {
    let mut spans = Vec::new();
    scan_into(text, &mut spans, &mut ScanScratch::default());
    spans
}

/// The buffers of the scan (the code-span index), reused from one text to
/// the next: built afresh, they were two allocations for every leaf with a
/// backtick.
#[derive(Default)]
pub(crate) struct ScanScratch {
    backticks: BacktickRuns,
}

/// [`scan`] appending to `spans`, so that the spans of many texts can
/// share one buffer.
pub(crate) fn scan_into(text: &str, spans: &mut Vec<Span>, scratch: &mut ScanScratch) {
    let bytes = text.as_bytes();
    // Most text has no backticks: the run index is only read at a
    // backtick, so it is only built when there is one.
    let backticks = &mut scratch.backticks;
    if memchr::memchr(b'`', bytes).is_some() {
        backticks.fill(bytes);
    }
    let backticks = &*backticks;
    // A span every few dozen bytes is usual in report prose: reserving for
    // that spares the vector's first growths (capped for huge leaves).
    spans.reserve((bytes.len() / 48).min(1024));
    let mut i = 0;
    // The end of the last span: a bare URL found late may start no earlier.
    let mut floor = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            match backticks.code_span_at(i) {
                Some(end) => {
                    spans.push(Span { kind: SpanKind::Code, range: i..end, indices: Indices::new() });
                    i = end;
                    floor = end;
                }
                // A run of backticks with no closing run is literal text.
                None => i = backticks.run_end(i),
            }
            continue;
        }
        let found = match bytes[i] {
            b'<' => autolink_at(bytes, i).map(|end| (SpanKind::Url, end, Indices::new())),
            b'(' if i > 0 && bytes[i - 1] == b']' => {
                link_destination_at(bytes, i).map(|end| (SpanKind::Url, end, Indices::new()))
            }
            b'[' => marker_at(bytes, i).map(|(end, indices)| (SpanKind::Marker, end, indices)),
            // A bare URL is found at its `:` (`http://`) or first `.`
            // (`www.`) and starts a few bytes back, which the scan has
            // passed over as plain text: no span can start in between.
            b':' | b'.' => url_start_before(bytes, i, floor)
                .and_then(|start| bare_url_at(text, start).map(|end| (start, end)))
                .map(|(start, end)| {
                    i = start;
                    (SpanKind::Url, end, Indices::new())
                }),
            _ => {
                i = next_interesting(bytes, i + 1);
                continue;
            }
        };
        match found {
            Some((kind, end, indices)) => {
                spans.push(Span { kind, range: i..end, indices });
                i = end;
                floor = end;
            }
            // Most full stops start nothing: go straight to the next
            // byte that may.
            None => i = next_interesting(bytes, i + 1),
        }
    }
}

/// The marker that opens `text`, as [`scan`] reads it: its end and its
/// indices, when the first span of `text` is a marker starting at byte 0.
/// (The scan reads a `[` at byte 0 as a marker when it can, before
/// anything else; `marker_start_is_the_scans_first_span` checks this.)
pub(crate) fn marker_start(text: &str) -> Option<(usize, Indices)> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    marker_at(bytes, 0)
}

/// The bytes where a span can start or be recognised; the scan skips all
/// others in a tight loop.
const INTERESTING: [bool; 256] = {
    let mut table = [false; 256];
    let mut k = 0;
    let bytes = *b"`<([:.";
    while k < bytes.len() {
        table[bytes[k] as usize] = true;
        k += 1;
    }
    table
};

/// The first byte at or after `i` where a span can start or be recognised
/// ([`INTERESTING`]), or the end. Most of a report is plain prose, so
/// eight bytes are tested at a time: XORed with one of the six bytes
/// repeated, a word holds that byte where it has a zero byte, and the
/// lowest high bit of `(x - 0x01..) & !x & 0x80..` marks the first zero
/// byte exactly (a borrow can only mark bytes above a real zero). The tail
/// of fewer than eight bytes is read byte by byte;
/// `next_interesting_finds_the_first_interesting_byte` checks the two
/// against each other.
fn next_interesting(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zeros = |word: u64, byte: u8| {
        let x = word ^ (ONES * u64::from(byte));
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    while let Some(Ok(chunk)) = bytes.get(i..i + 8).map(<[u8; 8]>::try_from) {
        let word = u64::from_le_bytes(chunk);
        let found = zeros(word, b'`')
            | zeros(word, b'<')
            | zeros(word, b'(')
            | zeros(word, b'[')
            | zeros(word, b':')
            | zeros(word, b'.');
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !INTERESTING[usize::from(bytes[i])] {
        i += 1;
    }
    i
}

/// Where a bare URL starts, given its `:` of `http://`/`https://` or the
/// `.` of `www.` at `at`: the scheme or `www` must start a word, at or
/// after `floor`.
fn url_start_before(bytes: &[u8], at: usize, floor: usize) -> Option<usize> {
    let ends_with = |start: usize, word: &[u8]| start >= floor && bytes[start..at].eq_ignore_ascii_case(word);
    let start = if bytes[at] == b':' {
        if !bytes[at..].starts_with(b"://") {
            return None;
        }
        if at >= 5 && ends_with(at - 5, b"https") {
            at - 5
        } else if at >= 4 && ends_with(at - 4, b"http") {
            at - 4
        } else {
            return None;
        }
    } else if at >= 3 && ends_with(at - 3, b"www") {
        at - 3
    } else {
        return None;
    };
    (start == 0 || !is_word_byte(bytes[start - 1])).then_some(start)
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

// === impl BacktickRuns ===

/// Every run of backticks in the text, indexed by length, so that the
/// closing run of a code span is found without rescanning (CommonMark: a
/// code span closes at the next run of exactly the same length).
#[derive(Default)]
struct BacktickRuns {
    /// (start, len) of each run, in order.
    runs: Vec<(usize, usize)>,
    /// (len, start) of each run, sorted: the runs of one length in order,
    /// so the run after a run of the same length is the next entry.
    by_len: Vec<(usize, usize)>,
}

impl BacktickRuns {
    /// The index of the runs of `bytes`, replacing what was there (the
    /// vectors are kept for the next text).
    fn fill(&mut self, bytes: &[u8]) {
        let BacktickRuns { runs, by_len } = self;
        runs.clear();
        for at in memchr::memchr_iter(b'`', bytes) {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == at => *len += 1,
                _ => runs.push((at, 1)),
            }
        }
        by_len.clear();
        by_len.extend(runs.iter().map(|&(start, len)| (len, start)));
        by_len.sort_unstable();
    }

    fn run_index(&self, start: usize) -> Option<usize> {
        self.runs.binary_search_by_key(&start, |&(s, _)| s).ok()
    }

    /// The end of the run starting at `start` (or just past `start` when it
    /// is not a run start: the scan then steps one byte).
    fn run_end(&self, start: usize) -> usize {
        self.run_index(start).map_or(start + 1, |k| start + self.runs[k].1)
    }

    /// The end of the code span opening at `start`, or `None` when the run
    /// never closes (it is then literal text).
    fn code_span_at(&self, start: usize) -> Option<usize> {
        let len = self.runs[self.run_index(start)?].1;
        let at = self.by_len.binary_search(&(len, start)).ok()?;
        self.by_len.get(at + 1).filter(|&&(next_len, _)| next_len == len).map(|&(_, next)| next + len)
    }
}

/// An autolink `<scheme:...>` or `<www...>` starting at `i`: its end.
fn autolink_at(bytes: &[u8], i: usize) -> Option<usize> {
    let rest = &bytes[i + 1..];
    let limit = rest.len().min(MAX_URLISH_BYTES);
    let close = rest[..limit].iter().position(|&b| b == b'>' || b == b'<' || b.is_ascii_whitespace())?;
    if rest[close] != b'>' {
        return None;
    }
    let inner = &rest[..close];
    let scheme_len = inner.iter().position(|&b| b == b':')?;
    let scheme_ok = (2..=32).contains(&scheme_len)
        && inner[0].is_ascii_alphabetic()
        && inner[..scheme_len].iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'));
    scheme_ok.then_some(i + 1 + close + 1)
}

/// A Markdown link destination `(...)` right after `]`, starting at `i`
/// (the `(`): its end, with nested parentheses balanced. Titles inside the
/// parentheses are part of the masked span.
fn link_destination_at(bytes: &[u8], i: usize) -> Option<usize> {
    let mut depth = 0usize;
    let end = bytes.len().min(i + MAX_URLISH_BYTES);
    let mut j = i;
    while j < end {
        match bytes[j] {
            b'\\' => j += 1,
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// A bare URL (`http://`, `https://`, `www.`) starting at `i`: its end,
/// with trailing punctuation and unbalanced closing brackets left out.
fn bare_url_at(text: &str, i: usize) -> Option<usize> {
    let rest = &text.as_bytes()[i..];
    let starts = |p: &[u8]| rest.len() > p.len() && rest[..p.len()].eq_ignore_ascii_case(p);
    let prefix = if starts(b"https://") {
        8
    } else if starts(b"http://") {
        7
    } else if starts(b"www.") {
        4
    } else {
        return None;
    };
    let mut end = rest
        .iter()
        .position(|&b| b.is_ascii_whitespace() || matches!(b, b'<' | b'>' | b'"' | b'`'))
        .unwrap_or(rest.len());
    // Markers written right after a URL (`https://x.org/a[1].`) cite it;
    // they are peeled off the end, with any punctuation between them. A
    // bracketed number followed by more URL (`/archive/[3]/file.csv`) stays
    // part of the URL. Each round removes one marker, so this is linear.
    let trailing = |b: u8| matches!(b, b'.' | b',' | b':' | b';' | b'!' | b'?' | b'\'' | b'*' | b'_' | b'~');
    loop {
        let mut e = end;
        while e > prefix && trailing(rest[e - 1]) {
            e -= 1;
        }
        if e <= prefix || rest[e - 1] != b']' {
            break;
        }
        let Some(open) = rest[prefix..e].iter().rposition(|&b| b == b'[').map(|k| prefix + k) else { break };
        match marker_at(rest, open) {
            Some((marker_end, _)) if marker_end == e => end = open,
            _ => break,
        }
    }
    // Trailing punctuation belongs to the sentence, and a closing bracket
    // without its opening one belongs to the text around the URL. Bracket
    // counts are kept up to date while trimming, so this stays linear.
    // (Counted in one pass over the URL, not one per bracket.)
    let (mut parens, mut squares) = (0isize, 0isize);
    for &b in &rest[..end] {
        match b {
            b')' => parens += 1,
            b'(' => parens -= 1,
            b']' => squares += 1,
            b'[' => squares -= 1,
            _ => {}
        }
    }
    while end > prefix {
        match rest[end - 1] {
            b'.' | b',' | b':' | b';' | b'!' | b'?' | b'\'' | b'*' | b'_' | b'~' => {}
            b')' if parens > 0 => parens -= 1,
            b']' if squares > 0 => squares -= 1,
            _ => break,
        }
        end -= 1;
    }
    if end <= prefix {
        return None;
    }
    // Never end inside a multi-byte character.
    while !text.is_char_boundary(i + end) {
        end += 1;
    }
    Some(i + end)
}

/// An upper bound of the markers [`scan`] finds in `text`, without
/// scanning it: the `[` where a marker can be read. Every marker of the
/// scan is one of these (the scan leaves out those inside code spans and
/// URLs, and finds no other); `marker_bound_bounds_the_scan` checks it.
pub(crate) fn marker_bound(text: &str) -> usize {
    let bytes = text.as_bytes();
    memchr::memchr_iter(b'[', bytes).filter(|&i| marker_at(bytes, i).is_some()).count()
}

/// A marker starting at `i` (the `[`): its end and indices. Grammar:
/// `[` `^`? item (`,` item)* `]`, item = n | n `-`|`–`|`—` n, spaces
/// allowed around numbers and separators; `[^n]` takes one number.
fn marker_at(bytes: &[u8], i: usize) -> Option<(usize, Indices)> {
    let mut p = Cursor { bytes, at: i + 1 };
    let footnote = p.eat(b"^");
    let mut indices = Indices::new();
    loop {
        p.skip_spaces();
        let first = p.number()?;
        p.skip_spaces();
        if p.eat(b"-") || p.eat("–".as_bytes()) || p.eat("—".as_bytes()) {
            if footnote {
                return None;
            }
            p.skip_spaces();
            let last = p.number()?;
            if last < first || last - first > MAX_MARKER_RANGE {
                return None;
            }
            for index in first..=last {
                indices.push(index);
            }
            p.skip_spaces();
        } else {
            indices.push(first);
        }
        if p.eat(b"]") {
            return Some((p.at, indices));
        }
        if footnote || !p.eat(b",") {
            return None;
        }
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn eat(&mut self, token: &[u8]) -> bool {
        if self.bytes[self.at.min(self.bytes.len())..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        while self.at < self.bytes.len() && self.bytes[self.at] == b' ' {
            self.at += 1;
        }
    }

    /// A citation index: 1 to [`MAX_MARKER_INDEX`], at most 3 digits after
    /// leading zeros.
    fn number(&mut self) -> Option<u32> {
        let start = self.at;
        let mut value: u32 = 0;
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_digit() {
            value = value.saturating_mul(10).saturating_add(u32::from(self.bytes[self.at] - b'0'));
            self.at += 1;
        }
        (self.at > start && (1..=MAX_MARKER_INDEX).contains(&value)).then_some(value)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn judge_sentence_drops_the_space_a_marker_leaves_before_punctuation() {
        assert_eq!(judge_sentence("Ice floats [1]."), "Ice floats.");
        assert_eq!(judge_sentence("Ice floats [1][2], mostly [3]"), "Ice floats, mostly");
        assert_eq!(judge_sentence("Ice [1] floats."), "Ice  floats.");
        assert_eq!(judge_sentence("No markers here."), "No markers here.");
        assert_eq!(judge_sentence("Code `[1]` stays [2]."), "Code `[1]` stays.");
    }

    use super::*;

    fn indices(text: &str) -> Vec<Vec<u32>> {
        parse_markers(text).into_iter().map(|m| m.indices).collect()
    }

    /// Comma groups and ranges (hyphen and en dash) expand to every index.
    #[test]
    fn expands_groups_and_ranges() {
        assert_eq!(
            indices("a [3] b [1, 2] c [2-4] d [2–4] e [1,3 - 5]"),
            vec![vec![3], vec![1, 2], vec![2, 3, 4], vec![2, 3, 4], vec![1, 3, 4, 5]]
        );
        assert_eq!(indices("x[^7] y[1][2]"), vec![vec![7], vec![1], vec![2]]);
    }

    /// Code spans and URLs hide bracketed numbers; a link destination after
    /// a marker is masked, the marker itself is kept.
    #[test]
    fn ignores_markers_in_code_and_urls() {
        assert_eq!(indices("use `arr[1]` and ``x[2]`` here [3]"), vec![vec![3]]);
        assert_eq!(indices("see https://x.org/wiki/A_[4]_b and <https://y.org/[5]> [6]"), vec![vec![6]]);
        assert_eq!(indices("claim [1](https://x.org/p[2]) end"), vec![vec![1]]);
        assert_eq!(indices("at https://x.org/a[1]. and https://x.org/b.[2][3] x"), vec![vec![1], vec![2], vec![3]]);
        assert_eq!(indices("unclosed `code [1]"), vec![vec![1]], "an unclosed backtick is literal");
    }

    /// Brackets that are not markers stay text: zero, too large, reversed
    /// or too wide ranges, words, empty brackets.
    #[test]
    fn rejects_non_markers() {
        assert!(indices("[0] [1000] [4-2] [1-200] [a] [] [1,] [^1-2] [ 1 2 ]").is_empty());
        assert_eq!(indices("[001]"), vec![vec![1]]);
    }

    /// Bare URLs end before trailing punctuation and unbalanced brackets.
    #[test]
    fn bare_urls_leave_trailing_punctuation_outside() {
        let text = "(see https://x.org/a_(b).) and www.y.org.";
        let urls: Vec<&str> =
            scan(text).into_iter().filter(|s| s.kind == SpanKind::Url).map(|s| &text[s.range]).collect();
        assert_eq!(urls, vec!["https://x.org/a_(b)", "www.y.org"]);
    }

    proptest::proptest! {
        /// The word-at-a-time skip stops where a byte-by-byte walk of
        /// [`INTERESTING`] stops, from every starting point.
        #[test]
        fn next_interesting_finds_the_first_interesting_byte(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"ab `<([:.]\x00\x7f\x80\xff\x2d\x5c\x60\x3b".to_vec()),
                0..40,
            )
        ) {
            for start in 0..=bytes.len() {
                let walked = (start..bytes.len()).find(|&k| INTERESTING[usize::from(bytes[k])]).unwrap_or(bytes.len());
                proptest::prop_assert_eq!(next_interesting(&bytes, start), walked);
            }
        }
    }

    proptest::proptest! {
        /// The `[` where a marker can be read bound the markers the scan
        /// finds, on text dense in markers inside and outside code spans,
        /// URLs and link destinations.
        #[test]
        fn marker_bound_bounds_the_scan(
            text in proptest::string::string_regex(r"(\[[12]\]|\[1, 2\]|\[\^3\]|\[|\]|\(|\)|`|<|>|https://x\.org/|www\.|a| |\.|:|-)*").unwrap()
        ) {
            let found = scan(&text).iter().filter(|s| s.kind == SpanKind::Marker).count();
            proptest::prop_assert!(marker_bound(&text) >= found);
        }
    }

    proptest::proptest! {
        /// Pushed indices read as a `Vec` of them does, in place and on
        /// the heap, and compare equal wherever they are kept.
        #[test]
        fn indices_read_as_the_vec_they_replace(pushed in proptest::collection::vec(1u32..1000, 0..20)) {
            let mut indices = Indices::new();
            for &index in &pushed {
                indices.push(index);
            }
            proptest::prop_assert_eq!(&*indices, pushed.as_slice());
            proptest::prop_assert_eq!(format!("{indices:?}"), format!("{pushed:?}"));
            let heap = Indices(IndicesRepr::Heap(pushed.clone()));
            proptest::prop_assert_eq!(&indices, &heap);
            proptest::prop_assert_eq!(Vec::from(indices), pushed);
        }
    }

    proptest::proptest! {
        /// [`marker_start`] reads the marker the scan reads first, exactly
        /// when the scan's first span is a marker at byte 0.
        #[test]
        fn marker_start_is_the_scans_first_span(
            text in proptest::string::string_regex(r"(\[|\]|\^|1|2|, |-|–|`|<|\(|https://x\.org|a| |:){0,10}").unwrap()
        ) {
            let first = scan(&text).into_iter().next().filter(|s| s.kind == SpanKind::Marker && s.range.start == 0);
            proptest::prop_assert_eq!(marker_start(&text), first.map(|s| (s.range.end, s.indices)));
        }
    }

    proptest::proptest! {
        /// Texts scanned one after another into one buffer with one
        /// scratch give each the spans of a scan of its own: nothing of one
        /// text's backtick runs is read for the next.
        #[test]
        fn scans_sharing_a_scratch_equal_scans_of_their_own(
            texts in proptest::collection::vec(
                proptest::string::string_regex(r"(`|``|\[1\]|a| |https://x\.org){0,8}").unwrap(),
                0..6,
            )
        ) {
            let (mut store, mut scratch) = (Vec::new(), ScanScratch::default());
            for text in &texts {
                let start = store.len();
                scan_into(text, &mut store, &mut scratch);
                let alone = scan(text);
                proptest::prop_assert_eq!(&store[start..], alone.as_slice(), "{:?}", text);
            }
        }
    }

    /// Stripping markers removes exactly the markers.
    #[test]
    fn strip_markers_removes_only_markers() {
        assert_eq!(strip_markers("A[1] b [2, 3]. `c[4]`"), "A b . `c[4]`");
    }
}
