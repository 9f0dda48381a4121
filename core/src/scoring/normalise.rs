//! Citation normalisation of Markdown-link outputs (seed 000 section 4):
//! canonical URLs, one sequential index per unique canonical URL, the
//! reference table, and inline links rewritten to `[n]` markers.
//!
//! The rewrite is a list of [`Edit`]s on the original text, by byte offset,
//! so everything that is not link syntax is kept byte for byte:
//! `[the report](https://x.org/?utm_source=a)` becomes `the report[1]`, and
//! removing the marker gives back the original text without its link
//! syntax. Three deliberate exceptions, each documented in docs/scoring.md:
//! an autolink `<https://x.org>` keeps its brackets (the URL is its wording)
//! and gets the marker after them; a link whose anchor is only a number
//! (`[3](https://x.org)`, a marker written as a link) becomes just the new
//! marker; links that are not web sources (relative, `mailto:`) lose their
//! syntax and get no marker.

use std::ops::Range;

use super::document::{LinkKind, LinkSpan, Parsed, Role};
use super::references::{clean_title, has_title};
use super::url::canonicalise;
use super::wire::ByteSpan;
use super::{Reference, ReferenceOrigin};

/// One replacement of a byte range of the original text. Edits are sorted
/// by start and never overlap; an empty range is an insertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    pub(crate) range: Range<usize>,
    /// What replaces the range: the marker `[n]`, or nothing. Every edit
    /// is one or the other, so the index is kept rather than the text:
    /// formatting a string for each link was a tenth of normalising.
    pub(crate) marker: Option<u32>,
}

impl Edit {
    /// The length of the replacement text in bytes.
    fn replacement_len(&self) -> usize {
        self.marker.map_or(0, |index| 2 + decimal_digits(index))
    }

    /// Appends the replacement text to `out`.
    fn write_replacement(&self, out: &mut String) {
        if let Some(index) = self.marker {
            out.push('[');
            push_decimal(out, index);
            out.push(']');
        }
    }
}

/// The number of decimal digits of `n`.
fn decimal_digits(n: u32) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Appends `n` in decimal to `out`, as `write!` would, without the
/// formatting machinery.
fn push_decimal(out: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
}

/// The edits and the reference table of a Markdown-link report.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkNormalisation {
    pub(crate) edits: Vec<Edit>,
    pub(crate) references: Vec<Reference>,
}

/// Whether a link's anchor text is only a citation number (`3`, `[3]`,
/// `^3`): the link is then a marker written as a link.
fn is_numeric_anchor(anchor: &str) -> bool {
    let t = anchor.trim().trim_start_matches('[').trim_end_matches(']').trim_start_matches('^').trim();
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

/// Indexes every web link in document order and computes the rewrite.
/// `roles[i]` is the role of leaf `i` (reference-list anchors make the best
/// titles).
pub(crate) fn normalise_links(source: &str, parsed: &Parsed, roles: &[Role]) -> LinkNormalisation {
    // The reference slot of each distinct canonical URL, by its id
    // ([`LinkSpan::canonical_id`]): a table, not a map keyed by the URL,
    // since it is asked once per link.
    let distinct = parsed.links.iter().filter_map(|l| l.canonical_id).max().map_or(0, |id| id + 1);
    let mut slot_of: Vec<Option<usize>> = vec![None; distinct];
    let mut references: Vec<Reference> = Vec::new();
    // Title candidates per reference: (from a link title, from a reference
    // list anchor, from a body anchor), each the first text of its kind
    // that gives a title. Only the one chosen is cleaned, at the end:
    // cleaning each candidate as it came was an allocation per candidate.
    let mut titles: Vec<[Option<&str>; 3]> = Vec::new();
    // Two edits for most links (the syntax before and after the anchor).
    let mut edits = Vec::with_capacity(2 * parsed.links.len());
    for link in &parsed.links {
        let anchor = link.inner.clone().and_then(|r| source.get(r)).unwrap_or_default();
        if link.kind == LinkKind::Email {
            continue;
        }
        let (Some(canonical), Some(id)) = (parsed.canonical(link), link.canonical_id) else {
            // Not a web source: keep the anchor text, drop the syntax.
            if link.kind == LinkKind::Bracketed {
                push_unwrap_edits(link, None, &mut edits);
            }
            continue;
        };
        let slot = *slot_of[id].get_or_insert_with(|| {
            references.push(Reference {
                index: u32::try_from(references.len() + 1).unwrap_or(u32::MAX),
                title: None,
                url: Some(canonical.to_owned()),
                snippets: Vec::new(),
                as_written: Vec::new(),
                origin: ReferenceOrigin::Text,
            });
            titles.push([None, None, None]);
            references.len() - 1
        });
        let reference = &mut references[slot];
        if !reference.as_written.iter().any(|written| *written == link.dest) {
            reference.as_written.push(link.dest.clone().into_owned());
        }
        let marker = Some(reference.index);
        let candidates = &mut titles[slot];
        if candidates[0].is_none() && has_title(&link.title) {
            candidates[0] = Some(&link.title);
        }
        let trimmed_anchor = anchor.trim();
        let usable_anchor =
            link.kind == LinkKind::Bracketed && !trimmed_anchor.is_empty() && !is_numeric_anchor(trimmed_anchor);
        if usable_anchor {
            let in_references = roles.get(link.leaf) == Some(&Role::Reference);
            let at = if in_references { 1 } else { 2 };
            if candidates[at].is_none() && trimmed_anchor != link.dest && has_title(anchor) {
                candidates[at] = Some(anchor);
            }
        }
        match link.kind {
            LinkKind::Autolink => edits.push(Edit { range: link.range.end..link.range.end, marker }),
            _ if usable_anchor => push_unwrap_edits(link, marker, &mut edits),
            _ => edits.push(Edit { range: link.range.clone(), marker }),
        }
    }
    for (reference, [from_title, from_list, from_body]) in references.iter_mut().zip(titles) {
        reference.title = from_title.or(from_list).or(from_body).and_then(clean_title);
    }
    // Links come in document order, so the edits nearly always do too:
    // the sort (which allocates its scratch) is for the rest.
    if !edits.is_sorted_by_key(|e| (e.range.start, e.range.end)) {
        edits.sort_by_key(|e| (e.range.start, e.range.end));
    }
    LinkNormalisation { edits, references }
}

/// Citation annotations of an API over a Markdown-link report (the spans
/// of [`super::wire::Prepared`]), added to its link normalisation: an
/// annotation whose span holds a link to the same canonical URL is that
/// link (the entry is then known to both the text and the API); any other
/// gets the entry of its URL (a new one after the links' when the text
/// never links it) and a marker inserted at the end of its span, before
/// trailing white space and after any link syntax it ends in, so it
/// belongs to the sentence the span covers. Returns the leaves that got a
/// marker and the number of markers inserted; a span that holds no body
/// text is dropped with a warning.
pub(crate) fn annotate_spans(
    source: &str,
    parsed: &Parsed,
    roles: &[Role],
    spans: &[ByteSpan],
    norm: &mut LinkNormalisation,
    warnings: &mut Vec<String>,
) -> (Vec<usize>, usize) {
    let canonical_of = |url: &str| canonicalise(url).unwrap_or_else(|_| url.to_owned());
    let mut inserts: Vec<(usize, u32, usize)> = Vec::new();
    for span in spans {
        let url = canonical_of(&span.url);
        let covered = parsed.links.iter().any(|l| {
            parsed.canonical(l) == Some(url.as_str())
                && l.range.start < span.range.end
                && l.range.end > span.range.start
        });
        // A span with no body text to mark adds nothing to the table: a
        // reference cited by no marker would count as a source of nothing.
        let at = if covered {
            None
        } else {
            match insertion_point(source, parsed, roles, span.range.clone()) {
                Some(at) => Some(at),
                None => {
                    warnings.push(format!(
                        "a citation of {} covers no text of the answer's body (bytes {}..{}): it is not counted",
                        span.url, span.range.start, span.range.end
                    ));
                    continue;
                }
            }
        };
        let slot = match norm.references.iter().position(|r| r.url.as_deref() == Some(url.as_str())) {
            Some(slot) => slot,
            None => {
                norm.references.push(Reference {
                    index: u32::try_from(norm.references.len() + 1).unwrap_or(u32::MAX),
                    title: span.title.clone(),
                    url: Some(url.clone()),
                    snippets: Vec::new(),
                    as_written: Vec::new(),
                    origin: ReferenceOrigin::Api,
                });
                norm.references.len() - 1
            }
        };
        let reference = &mut norm.references[slot];
        if reference.origin == ReferenceOrigin::Text {
            reference.origin = ReferenceOrigin::Both;
        }
        if reference.title.is_none() {
            reference.title = span.title.clone();
        }
        if !reference.as_written.contains(&span.url) {
            reference.as_written.push(span.url.clone());
        }
        if let Some((at, leaf)) = at {
            inserts.push((at, reference.index, leaf));
        }
    }
    inserts.sort_unstable();
    inserts.dedup_by_key(|&mut (at, index, _)| (at, index));
    let count = inserts.len();
    let mut leaves: Vec<usize> = inserts.iter().map(|&(_, _, leaf)| leaf).collect();
    leaves.sort_unstable();
    leaves.dedup();
    norm.edits.extend(inserts.into_iter().map(|(at, index, _)| Edit { range: at..at, marker: Some(index) }));
    // Stable: at one offset, an insertion (empty range) before the edit
    // that starts there, and insertions in index order.
    norm.edits.sort_by_key(|e| (e.range.start, e.range.end));
    (leaves, count)
}

/// Where a span's marker goes: its end, moved back over trailing white
/// space and out of any link syntax it ends in, inside a segment of a body
/// leaf (the segment holding it, else the last one ending within the
/// span). `None` when the span holds no body text.
fn insertion_point(source: &str, parsed: &Parsed, roles: &[Role], span: Range<usize>) -> Option<(usize, usize)> {
    let mut at = span.end.min(source.len());
    while at > span.start {
        match source[..at].chars().next_back() {
            Some(c) if c.is_whitespace() => at -= c.len_utf8(),
            _ => break,
        }
    }
    if let Some(link) = parsed.links.iter().find(|l| l.range.start < at && at < l.range.end) {
        at = link.range.end;
    }
    let body = |i: usize| roles.get(i).is_some_and(|r| r.counts_citations());
    let mut fallback: Option<(usize, usize)> = None;
    for (i, leaf) in parsed.leaves.iter().enumerate().filter(|(i, _)| body(*i)) {
        for segment in leaf.segments.iter() {
            if segment.start < at && at <= segment.end {
                return Some((at, i));
            }
            if segment.end <= at && segment.end > span.start && fallback.is_none_or(|(end, _)| segment.end > end) {
                fallback = Some((segment.end, i));
            }
        }
    }
    fallback
}

/// `[anchor](dest)` → `anchor` + `suffix`: the syntax before the anchor is
/// deleted and the syntax after it replaced.
fn push_unwrap_edits(link: &LinkSpan, suffix: Option<u32>, edits: &mut Vec<Edit>) {
    match link.inner.clone() {
        Some(inner) => {
            edits.push(Edit { range: link.range.start..inner.start, marker: None });
            edits.push(Edit { range: inner.end..link.range.end, marker: suffix });
        }
        None => edits.push(Edit { range: link.range.clone(), marker: suffix }),
    }
}

/// Appends `source[range]` with `edits` applied to `out`. An edit that
/// starts inside `range` is applied there (its replacement emitted, its
/// range clipped to `range`); the part of an edit that started before
/// `range` is skipped.
pub(crate) fn rewrite_into(out: &mut String, source: &str, range: Range<usize>, edits: &[Edit]) {
    let mut at = range.start;
    let first = edits.partition_point(|e| e.range.end < range.start);
    for edit in &edits[first..] {
        if edit.range.start > range.end || (edit.range.start == range.end && !edit.range.is_empty()) {
            break;
        }
        if edit.range.start < range.start {
            at = at.max(edit.range.end.min(range.end));
            continue;
        }
        out.push_str(source.get(at..edit.range.start).unwrap_or_default());
        edit.write_replacement(out);
        at = edit.range.end.min(range.end);
    }
    out.push_str(source.get(at..range.end).unwrap_or_default());
}

/// Maps byte offsets of the original text to offsets of the rewritten one.
#[derive(Debug, Clone)]
pub(crate) struct OffsetMap {
    starts: Vec<usize>,
    /// `shift[k]`: the length change made by edits `0..k`.
    shift: Vec<isize>,
}

impl OffsetMap {
    pub(crate) fn new(edits: &[Edit]) -> Self {
        let mut shift = Vec::with_capacity(edits.len() + 1);
        let mut total = 0isize;
        shift.push(0);
        for e in edits {
            total += e.replacement_len() as isize - e.range.len() as isize;
            shift.push(total);
        }
        OffsetMap { starts: edits.iter().map(|e| e.range.start).collect(), shift }
    }

    /// Where the text at original offset `offset` lands, for an offset that
    /// starts a rewritten stretch (a segment start).
    pub(crate) fn map(&self, offset: usize) -> usize {
        let k = self.starts.partition_point(|&s| s < offset);
        offset.saturating_add_signed(self.shift[k])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edits(list: &[(Range<usize>, &str)]) -> Vec<Edit> {
        // Replacements are written as text, `""` or `"[n]"`.
        let marker = |s: &str| s.strip_prefix('[').and_then(|s| s.strip_suffix(']')).map(|n| n.parse().unwrap());
        list.iter().map(|(r, s)| Edit { range: r.clone(), marker: marker(s) }).collect()
    }

    /// Rewriting a sub-range applies only the edits that start in it and
    /// clips an edit that runs past its end.
    #[test]
    fn rewrite_clips_edits_to_the_range() {
        let source = "ab[cd](u)ef";
        let e = edits(&[(2..3, ""), (5..9, "[1]")]);
        let mut whole = String::new();
        rewrite_into(&mut whole, source, 0..source.len(), &e);
        assert_eq!(whole, "abcd[1]ef");
        let mut part = String::new();
        rewrite_into(&mut part, source, 2..7, &e);
        assert_eq!(part, "cd[1]");
        let mut after = String::new();
        rewrite_into(&mut after, source, 7..11, &e);
        assert_eq!(after, "ef");
    }

    /// Offsets of segment starts map through deletions and insertions.
    #[test]
    fn offset_map_follows_length_changes() {
        let e = edits(&[(2..3, ""), (5..9, "[1]"), (11..11, "[2]")]);
        let map = OffsetMap::new(&e);
        assert_eq!(map.map(0), 0);
        assert_eq!(map.map(2), 2);
        assert_eq!(map.map(9), 7);
        assert_eq!(map.map(11), 9);
        assert_eq!(map.map(12), 13);
    }

    proptest::proptest! {
        /// A marker edit writes, and counts, the text `format!("[{n}]")`
        /// gives, which is what edits held before they kept the index.
        #[test]
        fn marker_replacements_are_the_formatted_marker(n in proptest::prop_oneof![0u32..1000, proptest::num::u32::ANY]) {
            let edit = Edit { range: 0..0, marker: Some(n) };
            let mut out = String::from("x");
            edit.write_replacement(&mut out);
            proptest::prop_assert_eq!(&out[1..], format!("[{n}]"));
            proptest::prop_assert_eq!(edit.replacement_len(), out.len() - 1);
        }
    }

    /// An edit without a marker replaces its range with nothing.
    #[test]
    fn edits_without_a_marker_write_nothing() {
        let edit = Edit { range: 0..3, marker: None };
        let mut out = String::new();
        edit.write_replacement(&mut out);
        assert_eq!((out.as_str(), edit.replacement_len()), ("", 0));
        for n in [0, 9, 10, 99, 100, 999, 1000, u32::MAX] {
            let mut out = String::new();
            Edit { range: 0..0, marker: Some(n) }.write_replacement(&mut out);
            assert_eq!(out, format!("[{n}]"));
        }
    }

    /// Numbers, bracketed numbers and footnote-style numbers are marker anchors.
    #[test]
    fn numeric_anchors_are_markers() {
        assert!(is_numeric_anchor("3") && is_numeric_anchor("[12]") && is_numeric_anchor("^4"));
        assert!(!is_numeric_anchor("2024 report") && !is_numeric_anchor(""));
    }
}
