//! The reference list of a report that already cites with `[n]` markers.
//!
//! Entries come from reference sections (`## References`, `**Sources:**`),
//! footnote definitions (`[^3]: ...`), numeric link definitions
//! (`[3]: https://...`), and lines shaped like entries anywhere
//! (`[3] Title https://...`). An entry's index is the number written for
//! it: `[3]`, `[^3]`, `3.`, `3)`, `(3)`, or the number of its ordered list
//! item. A citation resolves when its index has an entry; the URL is not
//! required (a printed reference without a link still resolves), but it is
//! canonicalised when present so tables compare across reports.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use super::document::{Leaf, LinkKind, Parsed, Role};
use super::markers::{self, MAX_MARKER_INDEX, SpanKind};
use super::url::canonicalise;
use super::{Reference, ReferenceOrigin};

/// One entry while it is being read.
struct Entry {
    index: u32,
    /// Source ranges of the entry's lines (for finding its links).
    ranges: Vec<Range<usize>>,
    /// The entry text with its index prefix removed.
    text: String,
    leaf: usize,
    item: Option<usize>,
    /// Read from a footnote definition.
    footnote: bool,
    /// Written like a link definition, `[3]: url "Title"`, on a line where
    /// Markdown could not read it as one (inside a paragraph): its title
    /// is quoted.
    definition: bool,
}

/// The written index at the start of a reference line, and the byte length
/// of that prefix.
fn index_prefix(line: &str) -> Option<(u32, usize)> {
    // The line's first span is a marker at its start exactly when the scan
    // reads one at byte 0: read just that one, not the whole line.
    if let Some((end, indices)) = markers::marker_start(line)
        && let [index] = *indices
    {
        let after = line[end..].strip_prefix(':').map_or(end, |_| end + 1);
        return Some((index, after));
    }
    let (open, rest) = match line.strip_prefix('(') {
        Some(rest) => (1, rest),
        None => (0, line),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let value: u32 = rest[..digits].parse().ok()?;
    let closer = rest.as_bytes().get(digits).copied();
    let closes = if open == 1 { closer == Some(b')') } else { matches!(closer, Some(b'.' | b')')) };
    let spaced = rest.as_bytes().get(digits + 1).is_none_or(|b| b.is_ascii_whitespace());
    ((1..=MAX_MARKER_INDEX).contains(&value) && closes && spaced).then_some((value, open + digits + 1))
}

/// Whether a line has the shape of a reference entry: it starts with a
/// written index (`[3]`, `[3]:`, `(3)`, `3.`, `3)`, `[^3]:`) followed by
/// something. Used to split a heading line from the entries written on the
/// lines right after it.
pub(crate) fn is_entry_line(line: &str) -> bool {
    let line = line.trim();
    index_prefix(line).is_some_and(|(_, skip)| !line[skip..].trim().is_empty())
}

/// Reads every reference entry of a numbered report. Returns the table in
/// index order and a warning for each entry that could not be used.
pub(crate) fn numbered_references(
    source: &str,
    parsed: &Parsed,
    texts: &[Cow<'_, str>],
) -> (Vec<Reference>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    for (i, (leaf, text)) in parsed.leaves.iter().zip(texts).enumerate() {
        if leaf.role != Role::Reference {
            continue;
        }
        read_leaf(source, i, leaf, text, &mut entries, &mut warnings);
    }
    let mut table: BTreeMap<u32, Reference> = BTreeMap::new();
    for definition in &parsed.definitions {
        let Ok(index) = definition.label.parse::<u32>() else { continue };
        if !(1..=MAX_MARKER_INDEX).contains(&index) {
            continue;
        }
        let reference = Reference {
            index,
            title: definition.title.clone().filter(|t| !t.trim().is_empty()),
            url: Some(canonicalise(&definition.dest).unwrap_or_else(|_| definition.dest.clone())),
            snippets: Vec::new(),
            as_written: vec![definition.dest.clone()],
            origin: ReferenceOrigin::Text,
        };
        insert(&mut table, reference, &mut warnings);
    }
    for entry in entries {
        let reference = entry_reference(source, parsed, &entry);
        insert(&mut table, reference, &mut warnings);
    }
    (table.into_values().collect(), warnings)
}

fn insert(table: &mut BTreeMap<u32, Reference>, reference: Reference, warnings: &mut Vec<String>) {
    if let std::collections::btree_map::Entry::Vacant(e) = table.entry(reference.index) {
        e.insert(reference);
    } else {
        warnings.push(format!("reference [{}] is listed more than once; the first entry is used", reference.index));
    }
}

/// Splits one reference leaf into entries: a line that starts with an index
/// starts an entry; other lines continue the entry before them in the same
/// list item or paragraph.
fn read_leaf(source: &str, i: usize, leaf: &Leaf, text: &str, entries: &mut Vec<Entry>, warnings: &mut Vec<String>) {
    if let Some(label) = &leaf.footnote {
        let Ok(index) = label.trim().parse::<u32>() else { return };
        if !(1..=MAX_MARKER_INDEX).contains(&index) {
            return;
        }
        // A footnote with several paragraphs is one entry.
        match entries.iter_mut().rev().find(|e| e.footnote && e.index == index) {
            Some(entry) => {
                entry.ranges.extend(leaf.segments.iter().cloned());
                entry.text.push(' ');
                entry.text.push_str(text);
            }
            None => entries.push(Entry {
                index,
                ranges: leaf.segments.to_vec(),
                text: text.to_owned(),
                leaf: i,
                item: None,
                footnote: true,
                definition: false,
            }),
        }
        return;
    }
    for (k, segment) in leaf.segments.iter().enumerate() {
        let line = source.get(segment.clone()).unwrap_or_default().trim();
        let prefix = index_prefix(line);
        let definition = prefix.is_some_and(|(_, skip)| line.starts_with('[') && line[..skip].ends_with(':'));
        let indexed = prefix
            .map(|(index, skip)| (index, line[skip..].trim().to_owned()))
            .or_else(|| {
                leaf.item_number.filter(|_| k == 0).and_then(|n| u32::try_from(n).ok()).map(|n| (n, line.to_owned()))
            })
            .filter(|(n, _)| (1..=MAX_MARKER_INDEX).contains(n));
        match indexed {
            Some((index, rest)) => entries.push(Entry {
                index,
                ranges: vec![segment.clone()],
                text: rest,
                leaf: i,
                item: leaf.item,
                footnote: false,
                definition,
            }),
            None => match entries.last_mut() {
                Some(last) if last.leaf == i || (last.item.is_some() && last.item == leaf.item) => {
                    last.ranges.push(segment.clone());
                    last.text.push(' ');
                    last.text.push_str(line);
                }
                _ if line.is_empty() => {}
                _ => warnings.push(format!("reference list line without an index is ignored: {}", shorten(line))),
            },
        }
    }
}

/// The reference for one entry: the first web link in it (a Markdown link,
/// an autolink or a bare URL) and a title (the link's anchor text, else the
/// entry text without its URLs).
fn entry_reference(source: &str, parsed: &Parsed, entry: &Entry) -> Reference {
    let within = |r: &Range<usize>| entry.ranges.iter().any(|s| s.start <= r.start && r.end <= s.end);
    let link = parsed.links.iter().find(|l| l.canonical_id.is_some() && within(&l.range));
    let spans = markers::scan(&entry.text);
    let (raw_url, url, title) = match link {
        Some(link) => {
            let anchor = link.inner.clone().and_then(|r| source.get(r)).unwrap_or_default().trim();
            let anchor_is_title = link.kind == LinkKind::Bracketed && !anchor.is_empty() && anchor != link.dest;
            let title = if anchor_is_title { clean_title(anchor) } else { text_title(&entry.text, &spans) };
            (Some(link.dest.clone().into_owned()), parsed.canonical(link).map(str::to_owned), title)
        }
        None => {
            let url = spans.iter().find(|s| s.kind == SpanKind::Url && !entry.text[s.range.clone()].starts_with('('));
            let url = url.map(|s| entry.text[s.range.clone()].trim_start_matches('<').trim_end_matches('>').to_owned());
            let canonical = url.as_deref().map(|raw| {
                let with_scheme = if raw.len() > 4 && raw[..4].eq_ignore_ascii_case("www.") {
                    format!("https://{raw}")
                } else {
                    raw.to_owned()
                };
                canonicalise(&with_scheme).unwrap_or_else(|_| raw.to_owned())
            });
            let title = text_title(&entry.text, &spans);
            (url, canonical, if entry.definition { title.map(unquote) } else { title })
        }
    };
    Reference {
        index: entry.index,
        title,
        url,
        snippets: Vec::new(),
        as_written: raw_url.into_iter().collect(),
        origin: ReferenceOrigin::Text,
    }
}

/// The entry text with URLs removed and separators trimmed, or `None`
/// when nothing is left.
fn text_title(text: &str, spans: &[markers::Span]) -> Option<String> {
    let mut out = String::new();
    let mut at = 0;
    for span in spans.iter().filter(|s| s.kind == SpanKind::Url) {
        out.push_str(&text[at..span.range.start]);
        at = span.range.end;
    }
    out.push_str(&text[at..]);
    clean_title(&out)
}

/// A title as shown in the table: emphasis asterisks removed, whitespace
/// collapsed, separators trimmed (quotes and brackets are kept: they
/// come in pairs); `None` when nothing is left.
pub(crate) fn clean_title(text: &str) -> Option<String> {
    // Removing asterisks never removes white space, so the words of the
    // text without them are its words without them, the empty ones gone.
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        let start = out.len();
        if start > 0 {
            out.push(' ');
        }
        // Most words have no asterisk: copied whole, not char by char.
        if word.contains('*') {
            out.extend(word.chars().filter(|&c| c != '*'));
        } else {
            out.push_str(word);
        }
        if out.len() == start + usize::from(start > 0) {
            out.truncate(start);
        }
    }
    let end = out.trim_end_matches(is_title_separator).len();
    out.truncate(end);
    let start = out.len() - out.trim_start_matches(is_title_separator).len();
    out.drain(..start);
    (!out.is_empty()).then_some(out)
}

/// What [`clean_title`] trims from both ends of a title.
fn is_title_separator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '-' | '–' | '—' | ':' | '|' | ',' | ';' | '.' | '_' | '<' | '>')
}

/// Whether [`clean_title`] gives `text` a title, without making it: the
/// title is the text's characters but white space and asterisks, trimmed
/// of separators, so there is one exactly when some character is none of
/// these.
pub(crate) fn has_title(text: &str) -> bool {
    text.chars().any(|c| c != '*' && !is_title_separator(c))
}

/// A link definition's title without its delimiters: `"T"`, `'T'`, `(T)`.
fn unquote(title: String) -> String {
    for (open, close) in [('"', '"'), ('\'', '\''), ('(', ')')] {
        if let Some(inner) = title.strip_prefix(open).and_then(|t| t.strip_suffix(close))
            && !inner.contains([open, close])
            && !inner.trim().is_empty()
        {
            return inner.trim().to_owned();
        }
    }
    title
}

fn shorten(line: &str) -> String {
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every written index style is read, with the rest of the line.
    #[test]
    fn reads_index_prefixes() {
        assert_eq!(index_prefix("[3] Title"), Some((3, 3)));
        assert_eq!(index_prefix("[^4]: Title"), Some((4, 5)));
        assert_eq!(index_prefix("12. Title"), Some((12, 3)));
        assert_eq!(index_prefix("7) Title"), Some((7, 2)));
        assert_eq!(index_prefix("(8) Title"), Some((8, 3)));
        assert_eq!(index_prefix("2024. Title"), None);
        assert_eq!(index_prefix("3.5 percent"), None);
        assert_eq!(index_prefix("[1, 2] Title"), None);
    }

    proptest::proptest! {
        /// Cleaning in one pass gives what removing the asterisks, joining
        /// the words and trimming the separators gives.
        #[test]
        fn clean_title_in_one_pass(text in proptest::string::string_regex("[a* \t.:|,–_<>-]{0,24}").unwrap()) {
            let joined = text.replace('*', "").split_whitespace().collect::<Vec<_>>().join(" ");
            let trimmed = joined.trim_matches(|c: char| {
                c.is_whitespace() || matches!(c, '-' | '–' | '—' | ':' | '|' | ',' | ';' | '.' | '_' | '<' | '>')
            });
            proptest::prop_assert_eq!(clean_title(&text), (!trimmed.is_empty()).then(|| trimmed.to_owned()));
        }

        /// [`has_title`] says whether cleaning gives a title.
        #[test]
        fn has_title_is_whether_cleaning_gives_one(text in proptest::string::string_regex("[a* \t.:|,–_<>é\u{a0}-]{0,12}").unwrap()) {
            proptest::prop_assert_eq!(has_title(&text), clean_title(&text).is_some());
        }
    }

    /// A title is what is left of an entry without its URL and separators.
    #[test]
    fn titles_drop_urls_and_separators() {
        let text = "Smith (2020). A study - https://doi.org/10.1/x.";
        assert_eq!(text_title(text, &markers::scan(text)).as_deref(), Some("Smith (2020). A study"));
        assert_eq!(text_title("<https://x.org>", &markers::scan("<https://x.org>")), None);
    }
}
