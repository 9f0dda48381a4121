//! The block structure of a report: one pulldown-cmark pass (with source
//! offsets) turns the Markdown into *leaves* (runs of inline text: a
//! paragraph, a heading, a tight list item, a table row), each with the
//! source byte ranges of its lines, and collects every link with the ranges
//! of its syntax and of its anchor text.
//!
//! Leaves keep source ranges rather than rendered text, so the wording that
//! reaches a claim is the wording the system wrote, byte for byte (emphasis
//! markers included), and the Markdown-link normaliser can rewrite the
//! original text by offsets. Then [`classify`] gives each leaf a [`Role`]:
//! prose, heading, reference list, metadata, conflict block, table.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use pulldown_cmark::{CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

use super::markers::{self, SpanKind};
use super::url::canonicalise;

/// What a leaf is, for counting citations and extracting claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Report body text: claims come from here.
    Prose,
    /// A Markdown heading (titles are never claims).
    Heading,
    /// A line that acts as a heading: `**Sources:**`, `**Key findings**`.
    PseudoHeading,
    /// A reference list entry, a footnote or link definition: excluded.
    Reference,
    /// `Date: ...`, `Model: ...` lines: excluded.
    Metadata,
    /// A system-rendered conflict block: excluded from the body metrics,
    /// read only for contradictions surfaced.
    Conflict,
    /// A table row: its markers count, its cells are not sentences.
    Table,
}

impl Role {
    /// Whether markers here count as in-text citations (seed 000 3: the
    /// body, excluding metadata, reference lists and conflict blocks).
    pub(crate) fn counts_citations(self) -> bool {
        matches!(self, Role::Prose | Role::Heading | Role::PseudoHeading | Role::Table)
    }
}

/// One run of inline text.
#[derive(Debug, Clone)]
pub(crate) struct Leaf {
    pub(crate) role: Role,
    /// Heading level 1-6 for headings.
    pub(crate) heading_level: Option<u8>,
    /// Source ranges, one per line (or per table cell), in order.
    pub(crate) segments: Segments,
    /// Id of the outermost block quote holding the leaf.
    pub(crate) blockquote: Option<usize>,
    /// Id of the outermost list item holding the leaf.
    pub(crate) top_item: Option<usize>,
    /// Id of the innermost list item holding the leaf.
    pub(crate) item: Option<usize>,
    /// The number written before an ordered list item (`3.`), on the
    /// item's first leaf only.
    pub(crate) item_number: Option<u64>,
    /// The label of the footnote definition holding the leaf.
    pub(crate) footnote: Option<String>,
    pub(crate) in_table: bool,
}

/// A leaf's source ranges, read as a slice. Most leaves are one line (a
/// paragraph of one line, a heading, a list item), and a vector each was
/// an allocation per leaf: one range is kept in place, and only a leaf of
/// several lines has a vector.
#[derive(Debug, Clone)]
pub(crate) enum Segments {
    One(Range<usize>),
    /// None (a new leaf, with no allocation yet) or several.
    Many(Vec<Range<usize>>),
}

impl Segments {
    pub(crate) fn push(&mut self, segment: Range<usize>) {
        match self {
            Segments::Many(many) if many.is_empty() => *self = Segments::One(segment),
            Segments::Many(many) => many.push(segment),
            Segments::One(one) => *self = Segments::Many(vec![one.clone(), segment]),
        }
    }
}

impl Default for Segments {
    fn default() -> Self {
        Segments::Many(Vec::new())
    }
}

impl std::ops::Deref for Segments {
    type Target = [Range<usize>];

    fn deref(&self) -> &[Range<usize>] {
        match self {
            Segments::One(one) => std::slice::from_ref(one),
            Segments::Many(many) => many,
        }
    }
}

impl From<Vec<Range<usize>>> for Segments {
    fn from(segments: Vec<Range<usize>>) -> Self {
        match <[Range<usize>; 1]>::try_from(segments) {
            Ok([one]) => Segments::One(one),
            Err(many) => Segments::Many(many),
        }
    }
}

/// How a link was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// `[text](url)`, `[text][ref]`, `[text][]`, `[text]`.
    Bracketed,
    /// `<https://...>`.
    Autolink,
    /// `<a@b.org>`.
    Email,
}

/// One link, with the offsets the normaliser rewrites.
#[derive(Debug, Clone)]
pub(crate) struct LinkSpan<'a> {
    pub(crate) kind: LinkKind,
    /// The whole link syntax.
    pub(crate) range: Range<usize>,
    /// The anchor text, when there is any.
    pub(crate) inner: Option<Range<usize>>,
    /// As written: borrowed from the source unless Markdown escapes or
    /// entities made pulldown-cmark write it out (a `String` per link was
    /// an allocation and a copy per link).
    pub(crate) dest: Cow<'a, str>,
    /// The link's web source: its destination's canonical URL
    /// ([`canonicalise`]) is [`Parsed::canonical_urls`]`[id]`. `None` for
    /// an email autolink and for a destination that is not an http(s) URL.
    /// Computed once per distinct destination of the document, since a
    /// report cites the same URL many times and URL parsing was a sixth of
    /// the scorer's time when every reader of a link canonicalised it
    /// again; links to one URL share one id (the `k`-th URL to appear has
    /// id `k`), so the normaliser finds a URL's reference by indexing a
    /// table, and the URL is kept once, not with each link.
    pub(crate) canonical_id: Option<usize>,
    pub(crate) title: Cow<'a, str>,
    /// The leaf the link is in.
    pub(crate) leaf: usize,
}

/// A link reference definition `[label]: dest "title"`.
#[derive(Debug, Clone)]
pub(crate) struct Definition {
    pub(crate) label: String,
    pub(crate) dest: String,
    pub(crate) title: Option<String>,
    pub(crate) span: Range<usize>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Parsed<'a> {
    pub(crate) leaves: Vec<Leaf>,
    pub(crate) links: Vec<LinkSpan<'a>>,
    /// The distinct canonical URLs of the links, by
    /// [`LinkSpan::canonical_id`].
    pub(crate) canonical_urls: Vec<String>,
    pub(crate) definitions: Vec<Definition>,
}

impl Parsed<'_> {
    /// The canonical URL of `link`, when it is a web source.
    pub(crate) fn canonical(&self, link: &LinkSpan<'_>) -> Option<&str> {
        link.canonical_id.and_then(|id| self.canonical_urls.get(id)).map(String::as_str)
    }
}

/// The Markdown dialect read: CommonMark plus GFM tables, strikethrough,
/// task lists, footnotes, alerts and front matter, the union of what
/// deep-research systems emit. Public (as `scoring::markdown_options`) so
/// the scoring benchmark can time a bare parse of the same dialect.
pub fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_PLUSES_DELIMITED_METADATA_BLOCKS
        | Options::ENABLE_GFM
}

/// Collects leaves while walking the events.
#[derive(Default)]
struct Walker<'a> {
    parsed: Parsed<'a>,
    current: Option<Leaf>,
    segment: Option<Range<usize>>,
    heading: Option<u8>,
    blockquote_depth: usize,
    blockquote_id: Option<usize>,
    blockquotes: usize,
    items: Vec<usize>,
    item_count: usize,
    pending_item_number: Option<u64>,
    ordered_lists: Vec<bool>,
    footnotes: Vec<String>,
    in_table: bool,
    /// Inside a code block, HTML block or front matter: not prose.
    opaque: usize,
    /// Links open around the current event: (index into links, inner).
    open_links: Vec<(usize, Option<Range<usize>>)>,
}

/// Walks `source` once. Never fails: every byte sequence that is valid
/// UTF-8 is some Markdown document.
pub(crate) fn parse(source: &str) -> Parsed<'_> {
    let parser = Parser::new_ext(source, options()).into_offset_iter();
    let mut definitions: Vec<Definition> = parser
        .reference_definitions()
        .iter()
        .map(|(label, def)| Definition {
            label: label.to_owned(),
            dest: def.dest.to_string(),
            title: def.title.as_ref().map(|t| t.to_string()),
            span: def.span.clone(),
        })
        .collect();
    definitions.sort_by_key(|d| d.span.start);
    let mut w = Walker::default();
    for (event, range) in parser {
        w.event(source, event, range);
    }
    w.flush();
    w.parsed.definitions = definitions;
    w.parsed.canonical_urls = canonicalise_links(&mut w.parsed.links);
    split_reference_headings(source, &mut w.parsed);
    w.parsed
}

/// A string of pulldown-cmark's as a `Cow`, borrowed when it is.
fn borrowed(text: CowStr<'_>) -> Cow<'_, str> {
    match text {
        CowStr::Borrowed(text) => Cow::Borrowed(text),
        other => Cow::Owned(other.into_string()),
    }
}

/// Fills in [`LinkSpan::canonical_id`], canonicalising each distinct
/// destination once, and returns the distinct canonical URLs by id. Both
/// maps are sized for every link up front: growing them rehashed every URL
/// again.
fn canonicalise_links(links: &mut [LinkSpan<'_>]) -> Vec<String> {
    let mut ids: HashMap<String, usize> = HashMap::with_capacity(links.len());
    let assigned: Vec<Option<usize>> = {
        let mut seen: HashMap<&str, Option<usize>> = HashMap::with_capacity(links.len());
        links
            .iter()
            .map(|link| match link.kind {
                LinkKind::Email => None,
                _ => *seen.entry(&*link.dest).or_insert_with(|| {
                    // Destinations that differ only in what
                    // canonicalisation drops share the first one's id.
                    let url = canonicalise(&link.dest).ok()?;
                    let next = ids.len();
                    Some(*ids.entry(url).or_insert(next))
                }),
            })
            .collect()
    };
    for (link, id) in links.iter_mut().zip(assigned) {
        link.canonical_id = id;
    }
    let mut urls = vec![String::new(); ids.len()];
    for (url, id) in ids {
        urls[id] = url;
    }
    urls
}

/// Splits a paragraph in which a reference heading line is followed,
/// without a blank line, by its entries (`References\n[1] https://...`,
/// `**Sources:**\n(1) ...`): in Markdown that is one paragraph, the usual
/// shape of Perplexity and plain-text answers. The heading line becomes a
/// leaf of its own (classified as a pseudo-heading, which opens the
/// reference section) and the entries another, so they are read as a
/// reference list rather than as one long claim. Lines before the heading
/// stay a leaf of their own. Links are moved to the leaf that now holds
/// them.
fn split_reference_headings(source: &str, parsed: &mut Parsed) {
    let line = |r: &Range<usize>| source.get(r.clone()).unwrap_or_default();
    let split_at = |leaf: &Leaf| -> Option<usize> {
        if leaf.segments.len() < 2
            || leaf.heading_level.is_some()
            || leaf.in_table
            || leaf.item.is_some()
            || leaf.blockquote.is_some()
            || leaf.footnote.is_some()
        {
            return None;
        }
        leaf.segments.windows(2).position(|pair| {
            is_reference_heading_line(line(&pair[0])) && super::references::is_entry_line(line(&pair[1]))
        })
    };
    if !parsed.leaves.iter().any(|leaf| split_at(leaf).is_some()) {
        return;
    }
    let old = std::mem::take(&mut parsed.leaves);
    // For each old leaf: the new index of each of its parts and the source
    // offset where each part starts.
    let mut parts: Vec<Vec<(usize, usize)>> = Vec::with_capacity(old.len());
    for leaf in old {
        let mut mine = Vec::new();
        match split_at(&leaf) {
            Some(k) => {
                let mut rest = leaf.segments.to_vec();
                let entries = rest.split_off(k + 1);
                let heading = rest.split_off(k);
                for segments in [rest, heading, entries] {
                    if segments.is_empty() {
                        continue;
                    }
                    mine.push((parsed.leaves.len(), segments[0].start));
                    let mut part = leaf.clone();
                    part.segments = segments.into();
                    parsed.leaves.push(part);
                }
            }
            None => {
                mine.push((parsed.leaves.len(), leaf.segments.first().map_or(0, |s| s.start)));
                parsed.leaves.push(leaf);
            }
        }
        parts.push(mine);
    }
    for link in &mut parsed.links {
        if let Some(mine) = parts.get(link.leaf) {
            let k = mine.partition_point(|&(_, start)| start <= link.range.start).saturating_sub(1);
            if let Some(&(index, _)) = mine.get(k) {
                link.leaf = index;
            }
        }
    }
}

impl<'a> Walker<'a> {
    fn event(&mut self, source: &str, event: Event<'a>, range: Range<usize>) {
        match event {
            Event::Start(tag) => self.start(source, tag, range),
            Event::End(tag) => self.end(tag, range),
            Event::Text(_)
            | Event::Code(_)
            | Event::InlineHtml(_)
            | Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::FootnoteReference(_)
            | Event::TaskListMarker(_) => {
                if self.opaque == 0 {
                    self.inline(range);
                }
            }
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Html(_) | Event::Rule => self.flush(),
        }
    }

    fn start(&mut self, source: &str, tag: Tag<'a>, range: Range<usize>) {
        match tag {
            Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript
            | Tag::Image { .. } => {
                if self.opaque == 0 {
                    self.inline_start(range);
                }
            }
            Tag::Link { link_type, dest_url, title, .. } => {
                if self.opaque > 0 {
                    return;
                }
                self.inline_start(range.clone());
                let kind = match link_type {
                    LinkType::Autolink => LinkKind::Autolink,
                    LinkType::Email => LinkKind::Email,
                    _ => LinkKind::Bracketed,
                };
                self.parsed.links.push(LinkSpan {
                    kind,
                    range,
                    inner: None,
                    dest: borrowed(dest_url),
                    canonical_id: None,
                    title: borrowed(title),
                    leaf: self.parsed.leaves.len(),
                });
                self.open_links.push((self.parsed.links.len() - 1, None));
            }
            Tag::Heading { level, .. } => {
                self.flush();
                self.heading = Some(level as u8);
            }
            Tag::BlockQuote(_) => {
                self.flush();
                if self.blockquote_depth == 0 {
                    self.blockquote_id = Some(self.blockquotes);
                    self.blockquotes += 1;
                }
                self.blockquote_depth += 1;
            }
            Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::MetadataBlock(_) => {
                self.flush();
                self.opaque += 1;
            }
            Tag::List(first) => {
                self.flush();
                self.ordered_lists.push(first.is_some());
            }
            Tag::Item => {
                self.flush();
                self.items.push(self.item_count);
                self.item_count += 1;
                self.pending_item_number = if self.ordered_lists.last().copied().unwrap_or(false) {
                    let digits: String = source[range].trim_start().chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                } else {
                    None
                };
            }
            Tag::FootnoteDefinition(label) => {
                self.flush();
                self.footnotes.push(label.to_string());
            }
            Tag::Table(_) => {
                self.flush();
                self.in_table = true;
            }
            Tag::TableCell => self.line_break(),
            Tag::Paragraph
            | Tag::TableHead
            | Tag::TableRow
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition => self.flush(),
        }
    }

    fn end(&mut self, tag: TagEnd, range: Range<usize>) {
        match tag {
            TagEnd::Emphasis
            | TagEnd::Strong
            | TagEnd::Strikethrough
            | TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::Image => {
                if self.opaque == 0 {
                    self.inline_end(range);
                }
            }
            TagEnd::Link => {
                if self.opaque > 0 {
                    return;
                }
                self.inline_end(range);
                if let Some((index, inner)) = self.open_links.pop()
                    && let Some(link) = self.parsed.links.get_mut(index)
                {
                    link.inner = inner;
                }
            }
            TagEnd::Heading(_) => {
                self.flush();
                self.heading = None;
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.blockquote_depth = self.blockquote_depth.saturating_sub(1);
                if self.blockquote_depth == 0 {
                    self.blockquote_id = None;
                }
            }
            TagEnd::CodeBlock | TagEnd::HtmlBlock | TagEnd::MetadataBlock(_) => {
                self.flush();
                self.opaque = self.opaque.saturating_sub(1);
            }
            TagEnd::List(_) => {
                self.flush();
                self.ordered_lists.pop();
            }
            TagEnd::Item => {
                self.flush();
                self.items.pop();
                self.pending_item_number = None;
            }
            TagEnd::FootnoteDefinition => {
                self.flush();
                self.footnotes.pop();
            }
            TagEnd::Table => {
                self.flush();
                self.in_table = false;
            }
            TagEnd::TableCell => {}
            TagEnd::Paragraph
            | TagEnd::TableHead
            | TagEnd::TableRow
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition => self.flush(),
        }
    }

    /// A leaf inline event: extends the current segment over `range`.
    fn inline(&mut self, range: Range<usize>) {
        self.note_inner(&range);
        self.inline_start(range.clone());
        self.inline_end(range);
    }

    /// The start of an inline container (or leaf event): opens a leaf and a
    /// segment if none is open. Its end is not taken: a link's range may
    /// span line breaks, and segments must not.
    fn inline_start(&mut self, range: Range<usize>) {
        self.note_inner(&range);
        if self.current.is_none() {
            self.current = Some(Leaf {
                role: if self.heading.is_some() { Role::Heading } else { Role::Prose },
                heading_level: self.heading,
                segments: Segments::default(),
                blockquote: self.blockquote_id,
                top_item: self.items.first().copied(),
                item: self.items.last().copied(),
                item_number: self.pending_item_number.take(),
                footnote: self.footnotes.last().cloned(),
                in_table: self.in_table,
            });
        }
        match &mut self.segment {
            Some(segment) => segment.end = segment.end.max(range.start),
            None => self.segment = Some(range.start..range.start),
        }
    }

    /// The end of an inline container or leaf event.
    fn inline_end(&mut self, range: Range<usize>) {
        if let Some(segment) = &mut self.segment {
            segment.end = segment.end.max(range.end);
        }
    }

    /// Records `range` as part of the anchor text of every open link, except
    /// the range of a link's own start event.
    fn note_inner(&mut self, range: &Range<usize>) {
        for (index, inner) in &mut self.open_links {
            let Some(link) = self.parsed.links.get(*index) else { continue };
            if link.range == *range {
                continue;
            }
            *inner = Some(match inner.take() {
                Some(r) => r.start.min(range.start)..r.end.max(range.end),
                None => range.clone(),
            });
        }
    }

    fn line_break(&mut self) {
        if let (Some(leaf), Some(segment)) = (&mut self.current, self.segment.take())
            && segment.end > segment.start
        {
            leaf.segments.push(segment);
        }
    }

    fn flush(&mut self) {
        self.line_break();
        if let Some(leaf) = self.current.take()
            && !leaf.segments.is_empty()
        {
            self.parsed.leaves.push(leaf);
        }
    }
}

/// The text of a leaf in `source`: its segments joined by single spaces.
/// A leaf of one line is a slice of the source, borrowed, not copied.
pub(crate) fn leaf_text<'a>(source: &'a str, leaf: &Leaf) -> Cow<'a, str> {
    if let [only] = &*leaf.segments {
        return Cow::Borrowed(source.get(only.clone()).unwrap_or_default());
    }
    let mut out = String::new();
    for (i, segment) in leaf.segments.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(source.get(segment.clone()).unwrap_or_default());
    }
    Cow::Owned(out)
}

// === classification ===

/// Headings that open a reference list, compared after [`heading_key`].
const REFERENCE_HEADINGS: &[&str] = &[
    "references",
    "reference",
    "reference list",
    "sources",
    "source",
    "source list",
    "sources cited",
    "cited sources",
    "sources consulted",
    "citations",
    "works cited",
    "bibliography",
    "footnotes",
    "endnotes",
    "notes and references",
    "references and notes",
    "sources and references",
    "references and sources",
    "further reading",
    "links",
    "useful links",
    "related links",
    "resources",
    "key sources",
];

/// Whether a heading (or pseudo-heading) opens a conflict section.
fn is_conflict_title(key: &str) -> bool {
    key.starts_with("conflict")
        || key.starts_with("contradict")
        || key.contains("conflicting")
        || key.contains("sources disagree")
        || key.starts_with("disagreement")
        || key.starts_with("where sources disagree")
}

/// A heading's text reduced for matching: lowercase, emphasis, numbering
/// and punctuation removed, spaces collapsed (`**5. Sources:**` → `sources`).
pub(crate) fn heading_key(text: &str) -> String {
    let lowered = text.to_lowercase();
    let words: Vec<&str> = lowered
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .skip_while(|w| w.chars().all(|c| c.is_ascii_digit()) || matches!(*w, "i" | "ii" | "iii" | "iv" | "v" | "vi"))
        .collect();
    words.join(" ")
}

/// Metadata keys: a leaf whose every line is `Key: value` with one of
/// these keys, and which cites nothing, is metadata.
const METADATA_KEYS: &[&str] = &[
    "date",
    "generated",
    "generated by",
    "generated on",
    "generated at",
    "model",
    "author",
    "authors",
    "query",
    "prompt",
    "question",
    "research question",
    "word count",
    "reading time",
    "last updated",
    "updated",
    "published",
    "version",
    "report id",
    "run id",
    "sources consulted",
    "keywords",
    "tags",
    "status",
    "prepared by",
    "prepared for",
];

fn is_metadata_line(line: &str) -> bool {
    // A key is at most 40 bytes: the colon is looked for in the first 41
    // bytes only, not along every line of prose.
    let head = &line.as_bytes()[..line.len().min(41)];
    let Some(colon) = head.iter().position(|&b| b == b':') else { return false };
    let (key, value) = (&line[..colon], &line[colon + 1..]);
    let value = value.trim_matches(|c: char| c.is_whitespace() || c == '*' || c == '_');
    !value.is_empty() && METADATA_KEYS.contains(&heading_key(key).as_str())
}

/// `**Text**`, `__Text__`, or a bare section name with an optional colon:
/// a paragraph standing in for a heading. Returns its inner text.
fn pseudo_heading_inner(text: &str) -> Option<&str> {
    let t = text.trim();
    for wrap in ["**", "__"] {
        if let Some(inner) = t.strip_prefix(wrap).and_then(|s| s.strip_suffix(wrap)) {
            let inner = inner.trim();
            let bare = inner.trim_end_matches(':');
            if !inner.is_empty() && !inner.contains(wrap) && !bare.ends_with(['.', '?', '!']) {
                return Some(inner);
            }
        }
        // `**Sources:**` may also be written `**Sources**:`.
        if let Some(inner) = t.strip_suffix(':').and_then(|s| s.strip_prefix(wrap)).and_then(|s| s.strip_suffix(wrap))
            && !inner.trim().is_empty()
            && !inner.contains(wrap)
        {
            return Some(inner.trim());
        }
    }
    None
}

/// Whether one line, on its own, is a heading that opens a reference list:
/// `References`, `Sources:`, `**Sources:**`, `5. Bibliography`. The whole
/// line must be the section name, so a sentence that merely contains the
/// word ("The sources say ...") is not one.
pub(crate) fn is_reference_heading_line(line: &str) -> bool {
    let title = match pseudo_heading_inner(line) {
        Some(inner) => inner,
        // Section names are short; long lines are not one.
        None if line.len() <= 64 => line,
        None => return false,
    };
    REFERENCE_HEADINGS.contains(&heading_key(title).as_str())
}

/// Whether a leaf's text has the shape of reference entries: every line
/// starts with `[n]` (or `[^n]`) and has a URL.
fn looks_like_reference_entries(source: &str, leaf: &Leaf) -> bool {
    leaf.segments.iter().all(|segment| {
        let line = source.get(segment.clone()).unwrap_or_default();
        if !line.starts_with('[') {
            return false;
        }
        let spans = markers::scan(line);
        let starts_with_marker = spans.first().is_some_and(|s| s.kind == SpanKind::Marker && s.range.start == 0);
        starts_with_marker && spans.iter().any(|s| s.kind == SpanKind::Url)
    })
}

/// The open section while classifying.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Body,
    /// A reference list under a heading of this level (7 for a
    /// pseudo-heading, which any heading closes).
    References(u8),
    Conflicts(u8),
}

/// Gives every leaf its role. `texts[i]` is leaf `i`'s text in the
/// original source.
pub(crate) fn classify(source: &str, parsed: &mut Parsed, texts: &[Cow<'_, str>]) {
    let mut has_link = vec![false; parsed.leaves.len()];
    for link in &parsed.links {
        if let Some(flag) = has_link.get_mut(link.leaf) {
            *flag = true;
        }
    }
    // Block quotes that open with a conflict label. Quote ids are given in
    // document order, so each quote's first leaf is the first with its id.
    let mut conflict_quotes = std::collections::BTreeSet::new();
    let mut next_quote = 0;
    for (leaf, text) in parsed.leaves.iter().zip(texts) {
        if let Some(id) = leaf.blockquote
            && id >= next_quote
        {
            next_quote = id + 1;
            if is_conflict_title(&heading_key(&first_words(text, 4))) {
                conflict_quotes.insert(id);
            }
        }
    }

    let mut section = Section::Body;
    for (i, (leaf, text)) in parsed.leaves.iter_mut().zip(texts).enumerate() {
        // Headings close the sections they end, then may open one.
        let heading = match leaf.role {
            Role::Heading => Some((leaf.heading_level.unwrap_or(1), &**text)),
            _ if leaf.segments.len() == 1 && leaf.item.is_none() && leaf.blockquote.is_none() => {
                let inner = pseudo_heading_inner(text).or_else(|| {
                    // Section names are short; long paragraphs are not one.
                    if text.len() > 64 {
                        return None;
                    }
                    let key = heading_key(text);
                    // A bare `References` line is a heading; a conflict title
                    // needs its colon, since "Conflicts remain." is a sentence.
                    let colon = text.trim_end().ends_with(':');
                    let named = REFERENCE_HEADINGS.contains(&key.as_str()) || (colon && is_conflict_title(&key));
                    (named && key.split(' ').count() <= 4).then_some(&**text)
                });
                inner.map(|inner| {
                    leaf.role = Role::PseudoHeading;
                    (7, inner)
                })
            }
            _ => None,
        };
        if let Some((level, title)) = heading {
            if match section {
                Section::References(open) | Section::Conflicts(open) => level <= open || open == 7,
                Section::Body => false,
            } {
                section = Section::Body;
            }
            let key = heading_key(title);
            if REFERENCE_HEADINGS.contains(&key.as_str()) {
                section = Section::References(level);
            } else if is_conflict_title(&key) {
                section = Section::Conflicts(level);
            }
            continue;
        }
        leaf.role = if leaf.footnote.is_some() {
            Role::Reference
        } else if leaf.blockquote.is_some_and(|id| conflict_quotes.contains(&id)) {
            Role::Conflict
        } else {
            match section {
                Section::References(_) => Role::Reference,
                Section::Conflicts(_) => Role::Conflict,
                Section::Body if leaf.in_table => Role::Table,
                Section::Body if looks_like_reference_entries(source, leaf) => Role::Reference,
                Section::Body
                    if !has_link[i]
                        && leaf
                            .segments
                            .iter()
                            .all(|s| is_metadata_line(source.get(s.clone()).unwrap_or_default()))
                        && markers::parse_markers(text).is_empty() =>
                {
                    Role::Metadata
                }
                Section::Body => Role::Prose,
            }
        };
    }
}

fn first_words(text: &str, n: usize) -> String {
    text.split_whitespace().take(n).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(source: &str) -> Vec<(Role, String)> {
        let mut parsed = parse(source);
        let texts: Vec<Cow<str>> = parsed.leaves.iter().map(|l| leaf_text(source, l)).collect();
        classify(source, &mut parsed, &texts);
        parsed.leaves.iter().zip(texts).map(|(l, t)| (l.role, t.into_owned())).collect()
    }

    /// Lines of a paragraph become segments joined by one space; block
    /// quote markers on continuation lines are not part of the text.
    #[test]
    fn joins_lines_without_container_prefixes() {
        let got = leaves("> quoted line\n> two [1]\n\nplain *em\nphasis* end\n");
        assert_eq!(
            got,
            vec![(Role::Prose, "quoted line two [1]".to_owned()), (Role::Prose, "plain *em phasis* end".to_owned())]
        );
    }

    /// Headings, reference sections (real and pseudo), footnotes, metadata,
    /// conflict blocks and tables each get their role; code blocks vanish.
    #[test]
    fn classifies_roles() {
        let source = "---\ntitle: x\n---\n# Title\n\nDate: 2026-01-01\n\nBody text [1].\n\n```\ncode [2]\n```\n\n> **Conflicting evidence:** [1] vs [2].\n\n| a | b [3] |\n|---|---|\n| c | d |\n\n**Sources:**\n\n1. First https://a.org\n\n## Next\n\nMore body.[^1]\n\n[^1]: Foot https://f.org\n";
        let roles: Vec<(Role, &str)> = leaves(source).into_iter().map(|(r, t)| (r, &*t.leak())).collect();
        assert_eq!(
            roles,
            vec![
                (Role::Heading, "Title"),
                (Role::Metadata, "Date: 2026-01-01"),
                (Role::Prose, "Body text [1]."),
                (Role::Conflict, "**Conflicting evidence:** [1] vs [2]."),
                (Role::Table, "a b [3]"),
                (Role::Table, "c d"),
                (Role::PseudoHeading, "**Sources:**"),
                (Role::Reference, "First https://a.org"),
                (Role::Heading, "Next"),
                (Role::Prose, "More body.[^1]"),
                (Role::Reference, "Foot https://f.org"),
            ]
        );
    }

    /// A link's anchor range and syntax range are recorded, across lines.
    #[test]
    fn records_link_anchor_ranges() {
        let source = "See [the\nreport](https://x.org \"T\") and <https://y.org>.";
        let parsed = parse(source);
        let spans: Vec<(&str, Option<&str>)> =
            parsed.links.iter().map(|l| (&source[l.range.clone()], l.inner.clone().map(|r| &source[r]))).collect();
        assert_eq!(
            spans,
            vec![
                ("[the\nreport](https://x.org \"T\")", Some("the\nreport")),
                ("<https://y.org>", Some("https://y.org"))
            ]
        );
    }

    /// A reference heading line followed directly by entries (one
    /// paragraph in Markdown) is split into body, heading and entries, and
    /// each link moves to the leaf that holds it.
    #[test]
    fn splits_a_heading_line_from_the_entries_after_it() {
        let source = "Body [1] per [x](https://x.org).\n**Sources:**\n[1] [Alpha](https://a.org)\n(2) https://b.org\n";
        assert_eq!(
            leaves(source),
            vec![
                (Role::Prose, "Body [1] per [x](https://x.org).".to_owned()),
                (Role::PseudoHeading, "**Sources:**".to_owned()),
                (Role::Reference, "[1] [Alpha](https://a.org) (2) https://b.org".to_owned()),
            ]
        );
        let parsed = parse(source);
        let link_leaves: Vec<usize> = parsed.links.iter().map(|l| l.leaf).collect();
        assert_eq!(link_leaves, vec![0, 2]);
        // A line that only mentions sources, or a heading line with nothing
        // indexed after it, splits nothing.
        assert_eq!(leaves("The sources\n[1] agree.\n").len(), 1);
        assert_eq!(leaves("References\nare listed below [1].\n").len(), 1);
    }

    proptest::proptest! {
        /// Segments pushed one by one, or made from a vector, read as the
        /// vector of them, in place or on the heap.
        #[test]
        fn segments_read_as_the_vec_they_replace(starts in proptest::collection::vec(0usize..100, 0..6)) {
            let ranges: Vec<Range<usize>> = starts.iter().map(|&s| s..s + 1).collect();
            let mut pushed = Segments::default();
            for range in &ranges {
                pushed.push(range.clone());
            }
            proptest::prop_assert_eq!(&*pushed, ranges.as_slice());
            proptest::prop_assert_eq!(&*Segments::from(ranges.clone()), ranges.as_slice());
        }
    }

    /// Ordered list items carry the number written in the source.
    #[test]
    fn ordered_items_keep_their_written_numbers() {
        let parsed = parse("## Sources\n\n3. A\n7. B\n");
        let numbers: Vec<Option<u64>> = parsed.leaves.iter().map(|l| l.item_number).collect();
        assert_eq!(numbers, vec![None, Some(3), Some(7)]);
    }
}
