//! Scoring of one report (SPEC section 6, seed 000 sections 3 and 4): citation
//! normalisation, reference lists, markers, sentences, claims and the
//! deterministic metrics, plus the judge's prompt, the parser of its reply
//! and the support rate. Pure: text in, values out.
//!
//! The data flow of [`analyse`]:
//!
//! 1. [`document`] parses the Markdown once (pulldown-cmark, source
//!    offsets) into leaves of inline text and links, and gives each leaf a
//!    role: prose, heading, reference list, metadata, conflict block, table.
//! 2. The format is chosen ([`ReportFormat`], detected unless given).
//!    `[n]` reports read their reference list ([`references`]); Markdown-link
//!    reports are normalised ([`normalise`]): canonical URLs ([`url`]), one
//!    index per unique URL, and links rewritten to `[n]` by byte offset.
//! 3. Each leaf's (normalised) text is scanned once for markers, code spans
//!    and URLs ([`markers`]); body leaves give the citation counts, prose
//!    leaves are split into sentences ([`segment`]) and become claims
//!    ([`claims`]), conflict blocks give contradictions surfaced.
//!
//! Then the worker (or `cohort score`) fills in captured snippets, plans the
//! judging ([`metrics::plan_judging`]), builds prompts ([`prompt`]), parses
//! replies ([`verdicts`]) and assembles a [`ScoreReport`].
//!
//! Architecture invariant: the wording of the report is never changed.
//! Claims are slices of the (normalised) text, and normalisation only
//! removes link syntax and inserts markers, so removing the markers from
//! the normalised body gives the original without its link syntax, with
//! the same sentence boundaries (property-tested in
//! `core/tests/scoring_integrity.rs`).

pub mod claims;
pub(crate) mod document;
pub mod markers;
pub mod metrics;
pub mod normalise;
pub mod prompt;
pub(crate) mod references;
pub mod segment;
pub mod url;
pub mod verdicts;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use claims::Claim;
pub use document::options as markdown_options;
pub use markers::{Marker, judge_sentence, judge_sentence_into, parse_markers, strip_markers};
pub use metrics::{
    Cost, DeterministicMetrics, Evidence, JudgePlan, SupportSummary, missing_sources, plan_judging, support_summary,
};
pub use prompt::{EvidencePassage, JudgeClaim, PlannedClaim, judge_prompt};
pub use segment::split_sentences;
pub use url::canonicalise;
pub use verdicts::{ParsedVerdict, UnjudgedReason, Verdict, parse_verdicts};
pub use wire::{ApiCitations, ApiSource, ApiSpan};

use document::Role;
use normalise::{Edit, OffsetMap};

/// The largest report scored: 4 MiB. The longest deep-research reports are
/// a few hundred KiB; past this the input is not a report.
pub const MAX_REPORT_BYTES: usize = 4 * 1024 * 1024;

/// Why a report could not be scored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScoringError {
    #[error("the report is {len} bytes; at most {MAX_REPORT_BYTES} bytes are scored")]
    TooLarge { len: usize },
}

/// How a report cites its sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    /// `[n]` markers and a reference list.
    Numbered,
    /// Inline Markdown links, normalised before scoring (seed 000 section 4).
    MarkdownLinks,
}

impl ReportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Numbered => "numbered",
            ReportFormat::MarkdownLinks => "markdown_links",
        }
    }
}

/// One row of the reference table: seed 000's `{index, title, url,
/// snippets}`, plus the URLs as written that were merged into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// The citation index, `[index]` in the (normalised) body.
    pub index: u32,
    /// The source's title, when the report gives one.
    pub title: Option<String>,
    /// The canonical URL (as written when it cannot be canonicalised);
    /// `None` for a printed reference without a link.
    pub url: Option<String>,
    /// Text actually captured from the source; empty until the caller fills
    /// it in. Never placeholder text (seed 000 section 4).
    pub snippets: Vec<String>,
    /// The distinct URLs as written that map to this entry, in order of
    /// first appearance (several when tracking parameters differed).
    pub as_written: Vec<String>,
    /// Where the entry came from: the text, the API's citations, or both.
    /// Absent in JSON when it is the text alone (and in records written
    /// before the API's citations were read).
    #[serde(default, skip_serializing_if = "ReferenceOrigin::is_text")]
    pub origin: ReferenceOrigin,
}

/// Where a reference came from (docs/scoring.md, "API citations").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceOrigin {
    /// The text's own reference list or links.
    #[default]
    Text,
    /// The API's citations alone (Perplexity's `citations` for a report
    /// without a list; an annotation over a sentence without a link).
    Api,
    /// Both, naming the same canonical URL.
    Both,
}

impl ReferenceOrigin {
    pub fn is_text(&self) -> bool {
        *self == ReferenceOrigin::Text
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReferenceOrigin::Text => "text",
            ReferenceOrigin::Api => "api",
            ReferenceOrigin::Both => "both",
        }
    }
}

/// Everything read from one report's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    pub format: ReportFormat,
    /// Whether the format was detected (rather than given).
    pub format_detected: bool,
    pub references: Vec<Reference>,
    pub claims: Vec<Claim>,
    pub total_citations: u32,
    pub unresolved_citations: u32,
    pub unresolved_indices: Vec<u32>,
    pub contradictions_surfaced: u32,
    /// The body with links rewritten to markers; `None` for numbered
    /// reports, whose text is already normalised.
    pub normalised_body: Option<String>,
    /// Things the scorer noticed and the reader should know.
    pub warnings: Vec<String>,
    /// Reasoning blocks (`<think>...</think>`) taken out of the output
    /// before scoring: recorded, never scored.
    pub reasoning: Vec<String>,
}

/// Facts about the run that produced a report, which its text cannot give.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFacts {
    pub wall_time_ms: Option<u64>,
    pub cost: Option<Cost>,
}

/// Reads one report: the format (detected when `format` is `None`), the
/// reference table, the claims and the citation counts. The text is all
/// there is: [`analyse_output`] with no API citations.
pub fn analyse(text: &str, format: Option<ReportFormat>) -> Result<Analysis, ScoringError> {
    analyse_output(text, &ApiCitations::None, format)
}

/// Reads one raw output with what its API said it cites ([`wire`]): the
/// one entry of every path that scores a system's answer (inline, `cohort
/// judge`, `cohort score`). Reasoning blocks are taken out and kept apart;
/// the reference table comes from the API's citations, reconciled with the
/// text's own list or links:
///
/// - a numbered list (Perplexity's `citations`): `[n]` is the list's
///   entry `n`; an index the text's own list also gives keeps the API's
///   URL (with a warning when the two differ); text entries past the list
///   are kept;
/// - annotations: the report is read as a Markdown-link report, and each
///   annotation either is one of its links (same canonical URL inside the
///   span) or gets a marker at the end of its span, so it reaches the claim
///   whose sentence holds it.
pub fn analyse_output(
    raw: &str,
    citations: &ApiCitations,
    format: Option<ReportFormat>,
) -> Result<Analysis, ScoringError> {
    if raw.len() > MAX_REPORT_BYTES {
        return Err(ScoringError::TooLarge { len: raw.len() });
    }
    let prepared = wire::prepare(raw, citations);
    let mut analysis = analyse_prepared(&prepared, format);
    if analysis.normalised_body.is_none() && prepared.body.len() != raw.len() {
        analysis.normalised_body = Some(prepared.body.clone().into_owned());
    }
    analysis.warnings.extend(prepared.warnings.iter().cloned());
    analysis.reasoning = prepared.reasoning;
    Ok(analysis)
}

fn analyse_prepared(prepared: &wire::Prepared, format: Option<ReportFormat>) -> Analysis {
    let text = &*prepared.body;
    let mut parsed = document::parse(text);
    let texts: Vec<std::borrow::Cow<str>> = parsed.leaves.iter().map(|leaf| document::leaf_text(text, leaf)).collect();
    document::classify(text, &mut parsed, &texts);
    let roles: Vec<Role> = parsed.leaves.iter().map(|leaf| leaf.role).collect();

    // Each body leaf's spans, scanned once; reused below for every leaf the
    // normalisation does not rewrite. A leaf holding a link may be
    // rewritten, and then only the marker count of its original is ever
    // read (by the format detection): its scan waits until it is known to
    // be needed (`Deferred`).
    let mut has_link = vec![false; parsed.leaves.len()];
    for link in &parsed.links {
        if let Some(flag) = has_link.get_mut(link.leaf) {
            *flag = true;
        }
    }
    let mut original_spans =
        LeafSpans::new(&texts, |i| roles[i].counts_citations() || roles[i] == Role::Conflict, |i| has_link[i]);
    let body_links: Vec<&document::LinkSpan> = parsed
        .links
        .iter()
        .filter(|l| roles.get(l.leaf).is_some_and(|r| r.counts_citations()))
        .filter(|l| l.canonical_id.is_some())
        .collect();
    let body_web_links = body_links.len();
    // Links whose whole syntax is a marker (`[3]` resolved by a definition
    // `[3]: https://...`) are that report's markers, not links written
    // beside them.
    let stray_links =
        body_links.iter().filter(|l| !is_marker_syntax(text.get(l.range.clone()).unwrap_or_default())).count();
    let (numbered_refs, mut warnings) = references::numbered_references(text, &parsed, &texts);
    let has_list = !numbered_refs.is_empty() || !prepared.list.is_empty();
    let (format, format_detected) = match format {
        Some(format) => (format, false),
        // Annotations cite spans of the text, as links do.
        None if prepared.annotated => (ReportFormat::MarkdownLinks, true),
        None => (detect_format_from(&parsed, &texts, &mut original_spans, stray_links, has_list), true),
    };

    let mut annotated_leaves = Vec::new();
    let mut inserted = 0usize;
    let (edits, references) = match format {
        ReportFormat::Numbered => {
            let numbered_refs = reconcile_numbered(numbered_refs, &prepared.list, &mut warnings);
            // Nothing is rewritten: every body leaf's own spans are read.
            original_spans.scan_deferred(&texts, |_| true);
            if numbered_refs.is_empty() && original_spans.body_marker_spans(&parsed).0 > 0 {
                warnings.push(
                    "the body cites with [n] markers but no reference list was found: every citation is unresolved"
                        .to_owned(),
                );
            }
            if stray_links > 0 {
                warnings.push(format!(
                    "{stray_links} inline web link(s) in the body are not counted as citations in a numbered report; \
                     score with --format markdown-links to count them"
                ));
            }
            (Vec::new(), numbered_refs)
        }
        ReportFormat::MarkdownLinks => {
            warnings.clear();
            let mut normalised = normalise::normalise_links(text, &parsed, &roles);
            (annotated_leaves, inserted) =
                normalise::annotate_spans(text, &parsed, &roles, &prepared.spans, &mut normalised, &mut warnings);
            (normalised.edits, normalised.references)
        }
    };

    let body = match format {
        ReportFormat::Numbered => None,
        ReportFormat::MarkdownLinks => {
            let mut body = String::with_capacity(text.len() + edits.len() * 2);
            normalise::rewrite_into(&mut body, text, 0..text.len(), &edits);
            Some(body)
        }
    };
    let lines = LineIndex::new(body.as_deref().unwrap_or(text));
    let offsets = OffsetMap::new(&edits);
    // Whether index `i` has a reference, for every index a marker can
    // carry: a table, since it is asked once per citation.
    let mut known = vec![false; markers::MAX_MARKER_INDEX as usize + 1];
    for reference in &references {
        if let Some(slot) = known.get_mut(reference.index as usize) {
            *slot = true;
        }
    }

    let mut claims = Vec::new();
    let (mut total, mut unresolved) = (0u32, 0u32);
    let mut unresolved_indices = BTreeSet::new();
    let mut conflicts: BTreeMap<(usize, usize), BTreeSet<u32>> = BTreeMap::new();
    let mut marker_spans = 0usize;
    let mut rewritten_text = String::new();
    let mut segment_starts = Vec::new();
    let mut sentence_scratch = segment::Scratch::default();
    let mut leaf_claims = Vec::new();
    let mut rewritten = vec![false; parsed.leaves.len()];
    for leaf in parsed.links.iter().map(|l| l.leaf).chain(annotated_leaves) {
        if let Some(flag) = rewritten.get_mut(leaf) {
            *flag = !edits.is_empty();
        }
    }
    // The leaves the normalisation does not rewrite are read as written.
    original_spans.scan_deferred(&texts, |i| !rewritten[i]);
    let mut rescanned = Vec::new();
    for (i, leaf) in parsed.leaves.iter().enumerate() {
        let Some(original) = original_spans.get(i) else { continue };
        let (leaf_text, spans) = if rewritten[i] {
            normalised_leaf_text(text, leaf, &edits, &offsets, &mut rewritten_text, &mut segment_starts);
            rescanned.clear();
            markers::scan_into(&rewritten_text, &mut rescanned, &mut original_spans.scratch);
            (rewritten_text.as_str(), rescanned.as_slice())
        } else {
            segment_starts.clear();
            let mut at = 0;
            for segment in leaf.segments.iter() {
                segment_starts.push((at, offsets.map(segment.start)));
                at += segment.len() + 1;
            }
            (&*texts[i], original)
        };
        let markers = spans.iter().filter(|s| s.kind == markers::SpanKind::Marker);
        if leaf.role == Role::Conflict {
            let group = match (leaf.blockquote, leaf.top_item) {
                (Some(quote), _) => (0, quote),
                (None, Some(item)) => (1, item),
                (None, None) => (2, i),
            };
            conflicts.entry(group).or_default().extend(markers.flat_map(|m| m.indices.iter().copied()));
            continue;
        }
        let mut leaf_markers = 0;
        for index in markers.clone().inspect(|_| leaf_markers += 1).flat_map(|m| m.indices.iter().copied()) {
            total = total.saturating_add(1);
            if !known.get(index as usize).copied().unwrap_or(false) {
                unresolved = unresolved.saturating_add(1);
                unresolved_indices.insert(index);
            }
        }
        marker_spans += leaf_markers;
        if leaf_markers > 0
            && (leaf.role == Role::Table || (leaf.role == Role::Heading && claims::is_statement(leaf_text, spans)))
        {
            // Seed 004: every attached citation is linked to its claim. A
            // table row that cites is one claim, whole (its cells are not
            // sentences), and so is a heading written as a statement that
            // cites (it ends with a full stop); a row that cites nothing (a
            // header row) and a title are not extracted (reviewers add a
            // missed claim in the extraction check).
            let trimmed = leaf_text.trim_start();
            let start = leaf_text.len() - trimmed.len();
            let mut cited: Vec<u32> = markers.flat_map(|m| m.indices.iter().copied()).collect();
            cited.sort_unstable();
            cited.dedup();
            let offset =
                segment_starts.first().map_or(0, |&(leaf_at, body_at)| body_at + start.saturating_sub(leaf_at));
            claims.push(Claim {
                id: u32::try_from(claims.len() + 1).unwrap_or(u32::MAX),
                text: trimmed.trim_end().to_owned(),
                cited,
                line: lines.line_of(offset),
                offset,
            });
            continue;
        }
        if leaf.role != Role::Prose {
            continue;
        }
        leaf_claims.clear();
        claims::sentences_into(leaf_text, spans, &mut sentence_scratch, &mut leaf_claims);
        for (range, cited) in leaf_claims.drain(..) {
            let k = segment_starts.partition_point(|&(leaf_at, _)| leaf_at <= range.start).saturating_sub(1);
            let offset = segment_starts.get(k).map_or(0, |&(leaf_at, body_at)| body_at + (range.start - leaf_at));
            claims.push(Claim {
                id: u32::try_from(claims.len() + 1).unwrap_or(u32::MAX),
                text: leaf_text[range].to_owned(),
                cited,
                line: lines.line_of(offset),
                offset,
            });
        }
    }
    if format == ReportFormat::MarkdownLinks && marker_spans > body_web_links + inserted {
        // Each body web link became exactly one marker, and each annotation
        // without one got its own; any other marker was already in the text
        // and now points into the new table.
        warnings.push(format!(
            "{} bracketed number(s) already in the text are read as markers of the normalised table",
            marker_spans - body_web_links - inserted
        ));
    }
    // Distinct conflicting-evidence pairs: conflict entries citing at least
    // two sources, counted once per distinct set of sources.
    let pairs: BTreeSet<&BTreeSet<u32>> = conflicts.values().filter(|set| set.len() >= 2).collect();

    Analysis {
        format,
        format_detected,
        references,
        claims,
        total_citations: total,
        unresolved_citations: unresolved,
        unresolved_indices: unresolved_indices.into_iter().collect(),
        contradictions_surfaced: u32::try_from(pairs.len()).unwrap_or(u32::MAX),
        normalised_body: body,
        warnings,
        reasoning: Vec::new(),
    }
}

/// The reference table of a numbered report whose API gave a citation
/// list: entry `n` of the list is reference `n` (blank entries leave a gap,
/// so the markers after them still count positions); an entry of the
/// text's own list with the same index and canonical URL makes it known to
/// both; one naming another URL yields to the API's, with a warning; text
/// entries the list does not cover are kept.
fn reconcile_numbered(text: Vec<Reference>, list: &[ApiSource], warnings: &mut Vec<String>) -> Vec<Reference> {
    if list.is_empty() {
        return text;
    }
    let mut by_index: BTreeMap<u32, Reference> = text.into_iter().map(|r| (r.index, r)).collect();
    for (i, source) in list.iter().enumerate() {
        if source.url.is_empty() {
            continue;
        }
        let Ok(index) = u32::try_from(i + 1) else { break };
        let canonical = canonicalise(&source.url).unwrap_or_else(|_| source.url.clone());
        let from_api = Reference {
            index,
            title: source.title.clone(),
            url: Some(canonical.clone()),
            snippets: Vec::new(),
            as_written: vec![source.url.clone()],
            origin: ReferenceOrigin::Api,
        };
        let merged = match by_index.remove(&index) {
            None => from_api,
            Some(own) if own.url.as_deref() == Some(canonical.as_str()) => {
                Reference { title: source.title.clone().or(own.title), origin: ReferenceOrigin::Both, ..from_api }
            }
            Some(own) => {
                warnings.push(format!(
                    "reference [{index}] of the text names {}, the API's citation {index} is {canonical}: the API's is used",
                    own.url.as_deref().unwrap_or("no URL")
                ));
                from_api
            }
        };
        by_index.insert(index, merged);
    }
    by_index.into_values().collect()
}

/// The format of a report whose format was not given (docs/scoring.md,
/// "Format detection"), from the marker spans and the stray web links of
/// its body and whether it has a numbered reference list.
///
/// A report that cites with `[n]` and lists its references is numbered,
/// whatever links it also has: resolving its markers against a table
/// generated from those links would join its claims to sources it never
/// meant. Without a reference list the style that cites more wins (ties go
/// to numbered, the seed's primary form): a report of `[n]` markers that
/// lost its list is scored as such (every marker unresolved) rather than
/// against one stray link, and a link-citing report with a stray `[3]` is
/// still normalised.
fn detect_format(marker_spans: usize, stray_links: usize, has_reference_list: bool) -> ReportFormat {
    let links = if marker_spans == 0 { stray_links > 0 } else { !has_reference_list && stray_links > marker_spans };
    if links { ReportFormat::MarkdownLinks } else { ReportFormat::Numbered }
}

/// The spans of each leaf's original text, as far as they were needed,
/// all in one buffer: a vector per leaf cost an allocation or more for
/// each leaf (the scan's growths), a large share of scoring's allocations.
struct LeafSpans {
    slots: Vec<LeafSlot>,
    store: Vec<markers::Span>,
    /// The scan's buffers, shared by every scan of the report.
    scratch: markers::ScanScratch,
}

/// Where one leaf's spans are.
enum LeafSlot {
    /// Not a leaf whose spans are read (a reference entry, metadata).
    NotRead,
    /// A leaf with a link, not scanned yet: it may be rewritten.
    Deferred,
    /// Scanned: its spans are `store[range]`.
    Scanned(std::ops::Range<usize>),
}

impl LeafSpans {
    /// Scans each leaf `i` that is `read(i)`, unless its scan is to wait
    /// (`defer(i)`).
    fn new(texts: &[std::borrow::Cow<str>], read: impl Fn(usize) -> bool, defer: impl Fn(usize) -> bool) -> Self {
        // Sized for the leaves scanned now (a span every few dozen bytes).
        let bytes: usize = texts.iter().enumerate().filter(|&(i, _)| read(i) && !defer(i)).map(|(_, t)| t.len()).sum();
        let mut spans = LeafSpans {
            slots: Vec::with_capacity(texts.len()),
            store: Vec::with_capacity(bytes / 48),
            scratch: markers::ScanScratch::default(),
        };
        for (i, text) in texts.iter().enumerate() {
            let slot = match read(i) {
                false => LeafSlot::NotRead,
                true if defer(i) => LeafSlot::Deferred,
                true => spans.scan(text),
            };
            spans.slots.push(slot);
        }
        spans
    }

    fn scan(&mut self, text: &str) -> LeafSlot {
        let start = self.store.len();
        markers::scan_into(text, &mut self.store, &mut self.scratch);
        LeafSlot::Scanned(start..self.store.len())
    }

    /// Leaf `i`'s spans: `None` when they are not read, none while its
    /// scan waits.
    fn get(&self, i: usize) -> Option<&[markers::Span]> {
        match self.slots.get(i)? {
            LeafSlot::NotRead => None,
            LeafSlot::Deferred => Some(&[]),
            LeafSlot::Scanned(range) => self.store.get(range.clone()),
        }
    }

    /// Scans each deferred leaf `i` for which `needed(i)`.
    fn scan_deferred(&mut self, texts: &[std::borrow::Cow<str>], needed: impl Fn(usize) -> bool) {
        for (i, text) in texts.iter().enumerate() {
            if matches!(self.slots.get(i), Some(LeafSlot::Deferred)) && needed(i) {
                self.slots[i] = self.scan(text);
            }
        }
    }

    /// The marker spans of the body as far as scanned, and the body leaves
    /// not scanned yet.
    fn body_marker_spans(&self, parsed: &document::Parsed) -> (usize, Vec<usize>) {
        let mut count = 0;
        let mut deferred = Vec::new();
        for (i, leaf) in parsed.leaves.iter().enumerate() {
            if !leaf.role.counts_citations() {
                continue;
            }
            match self.slots.get(i) {
                Some(LeafSlot::Scanned(range)) => {
                    count += self.store[range.clone()].iter().filter(|s| s.kind == markers::SpanKind::Marker).count()
                }
                Some(LeafSlot::Deferred) => deferred.push(i),
                Some(LeafSlot::NotRead) | None => {}
            }
        }
        (count, deferred)
    }
}

/// [`detect_format`] for a body whose leaves with links may not be
/// scanned yet, scanning them only when their marker count can change the
/// answer.
///
/// Every marker a scan finds starts at a `[` where a marker can be read
/// ([`markers::marker_bound`]) (the scan only leaves out those inside code and URLs), so
/// counting those positions bounds a leaf's markers from above without the
/// scan; and the detected format goes from links to numbered as the marker
/// count grows, never back. So when the count of the scanned leaves and
/// the count with the bound of the others give the same format, that is
/// the format; otherwise the others are scanned and counted.
/// `deferred_detection_equals_counting_every_marker` checks this against
/// counting every leaf's markers.
fn detect_format_from(
    parsed: &document::Parsed,
    texts: &[std::borrow::Cow<str>],
    spans: &mut LeafSpans,
    stray_links: usize,
    has_list: bool,
) -> ReportFormat {
    let (known, deferred) = spans.body_marker_spans(parsed);
    let bound = known + deferred.iter().map(|&i| markers::marker_bound(&texts[i])).sum::<usize>();
    let (fewest, most) = (detect_format(known, stray_links, has_list), detect_format(bound, stray_links, has_list));
    if fewest == most {
        return fewest;
    }
    spans.scan_deferred(texts, |i| deferred.binary_search(&i).is_ok());
    detect_format(spans.body_marker_spans(parsed).0, stray_links, has_list)
}

/// Whether `syntax` is exactly one marker, `[3]`.
fn is_marker_syntax(syntax: &str) -> bool {
    // Most links are `[text](url)`: rule them out before scanning.
    if syntax.len() > 16 || !syntax.starts_with('[') || !syntax.ends_with(']') {
        return false;
    }
    let spans = markers::scan(syntax);
    matches!(spans.as_slice(), [only] if only.kind == markers::SpanKind::Marker && only.range == (0..syntax.len()))
}

/// Writes the leaf's normalised text into `out` (segments joined by one
/// space) and, into `starts`, each segment's (offset in `out`, offset in
/// the normalised body).
fn normalised_leaf_text(
    source: &str,
    leaf: &document::Leaf,
    edits: &[Edit],
    offsets: &OffsetMap,
    out: &mut String,
    starts: &mut Vec<(usize, usize)>,
) {
    out.clear();
    starts.clear();
    for (k, segment) in leaf.segments.iter().enumerate() {
        if k > 0 {
            out.push(' ');
        }
        starts.push((out.len(), offsets.map(segment.start)));
        normalise::rewrite_into(out, source, segment.clone(), edits);
    }
}

/// Line starts of a text, for turning offsets into 1-based line numbers.
struct LineIndex {
    newlines: Vec<usize>,
    /// The newlines before the last offset asked about. Claims are asked
    /// about in document order, so the next answer is found by stepping
    /// forward from there: a binary search per claim, each step waiting on
    /// a load, was a tenth of the claim loop's time.
    /// `line_cursor_answers_as_the_binary_search` checks both ways.
    before: std::cell::Cell<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        LineIndex { newlines: memchr::memchr_iter(b'\n', text.as_bytes()).collect(), before: std::cell::Cell::new(0) }
    }

    fn line_of(&self, offset: usize) -> u32 {
        let mut k = self.before.get();
        if k > 0 && self.newlines[k - 1] >= offset {
            // Asked about an earlier offset: search from the start.
            k = self.newlines.partition_point(|&nl| nl < offset);
        } else {
            while self.newlines.get(k).is_some_and(|&nl| nl < offset) {
                k += 1;
            }
        }
        self.before.set(k);
        u32::try_from(k + 1).unwrap_or(u32::MAX)
    }
}

impl Analysis {
    /// Puts captured snippets into the reference table. Blank snippets are
    /// dropped: a source whose text could not be recovered has none.
    pub fn attach_snippets(&mut self, snippets: &BTreeMap<u32, Vec<String>>) {
        for reference in &mut self.references {
            if let Some(texts) = snippets.get(&reference.index) {
                reference.snippets = texts.iter().filter(|s| !s.trim().is_empty()).cloned().collect();
            }
        }
    }

    /// The deterministic metrics (seed 000 section 3.1).
    pub fn metrics(&self, run: &RunFacts) -> DeterministicMetrics {
        let uncited = self.claims.iter().filter(|c| c.cited.is_empty()).count();
        DeterministicMetrics {
            total_citations: self.total_citations,
            unresolved_citations: self.unresolved_citations,
            unresolved_indices: self.unresolved_indices.clone(),
            resolution_rate: metrics::resolution_rate(self.total_citations, self.unresolved_citations),
            assertive_sentences: u32::try_from(self.claims.len()).unwrap_or(u32::MAX),
            uncited_assertive_sentences: u32::try_from(uncited).unwrap_or(u32::MAX),
            contradictions_surfaced: self.contradictions_surfaced,
            wall_time_ms: run.wall_time_ms,
            cost: run.cost.clone(),
        }
    }
}

/// A claim's verdict as written in a [`ScoreReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictLabel {
    Yes,
    No,
    Unjudged,
}

/// One claim in a [`ScoreReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoredClaim {
    pub id: u32,
    pub text: String,
    pub cited: Vec<u32>,
    pub line: u32,
    pub offset: usize,
    /// `None` when the claim was not sent to a judge (uncited, or no judge
    /// was asked).
    pub verdict: Option<VerdictLabel>,
    /// Set when `verdict` is `unjudged`.
    pub unjudged_reason: Option<UnjudgedReason>,
    /// The judge's reply line for the claim, when there was one.
    pub judge_line: Option<String>,
    /// For a claim `unjudged(source_unavailable)`: the cited indices whose
    /// source had no captured text (or that resolve to no reference), the
    /// reason it was not judged ([`missing_sources`]). Empty otherwise, and
    /// absent from the JSON when empty (records written before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_sources: Vec<u32>,
}

/// Everything `cohort score` prints: see docs/scoring.md for every field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    pub metrics_version: u32,
    pub format: ReportFormat,
    pub format_detected: bool,
    pub metrics: DeterministicMetrics,
    pub support: SupportSummary,
    pub references: Vec<Reference>,
    pub claims: Vec<ScoredClaim>,
    pub normalised_body: Option<String>,
    pub warnings: Vec<String>,
    /// Reasoning blocks taken out of the output before scoring (recorded,
    /// never scored); absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<String>,
}

impl ScoreReport {
    /// Assembles the report. `verdicts[i]` is claim `i`'s verdict, `None`
    /// when it was not judged and had no reason to be unjudged (uncited,
    /// or no judge asked); missing entries count as `None`.
    pub fn assemble(analysis: Analysis, run: &RunFacts, verdicts: &[Option<ParsedVerdict>]) -> ScoreReport {
        let metrics = analysis.metrics(run);
        let support = support_summary(verdicts.iter().flatten().map(|v| &v.verdict));
        let references = &analysis.references;
        let claims = analysis
            .claims
            .into_iter()
            .enumerate()
            .map(|(i, claim)| {
                let parsed = verdicts.get(i).cloned().flatten();
                // Named from the evidence texts the references carry now
                // (the caller attaches them before assembling).
                let missing_sources = match parsed.as_ref().map(|p| p.verdict) {
                    Some(Verdict::Unjudged(UnjudgedReason::SourceUnavailable)) => {
                        missing_sources(&claim.cited, references)
                    }
                    _ => Vec::new(),
                };
                let (verdict, unjudged_reason) = match parsed.as_ref().map(|p| p.verdict) {
                    Some(Verdict::Yes) => (Some(VerdictLabel::Yes), None),
                    Some(Verdict::No) => (Some(VerdictLabel::No), None),
                    Some(Verdict::Unjudged(reason)) => (Some(VerdictLabel::Unjudged), Some(reason)),
                    None => (None, None),
                };
                ScoredClaim {
                    id: claim.id,
                    text: claim.text,
                    cited: claim.cited,
                    line: claim.line,
                    offset: claim.offset,
                    verdict,
                    unjudged_reason,
                    judge_line: parsed.and_then(|p| p.line),
                    missing_sources,
                }
            })
            .collect();
        ScoreReport {
            metrics_version: crate::METRICS_VERSION,
            format: analysis.format,
            format_detected: analysis.format_detected,
            metrics,
            support,
            references: analysis.references,
            claims,
            normalised_body: analysis.normalised_body,
            warnings: analysis.warnings,
            reasoning: analysis.reasoning,
        }
    }
}

/// Options of [`score_report`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScoreOptions {
    /// The format, or `None` to detect it.
    pub format: Option<ReportFormat>,
    pub run: RunFacts,
    /// Captured snippets per citation index (empty: nothing captured).
    pub snippets: BTreeMap<u32, Vec<String>>,
}

/// Scores one report without a judge: the deterministic metrics, the
/// reference table and the claims. Cited claims whose sources have no
/// captured snippet are unjudged (`source_unavailable`); the others are
/// left unjudged without a reason (no judge was asked), so the support rate
/// is unmeasured either way.
pub fn score_report(text: &str, options: &ScoreOptions) -> Result<ScoreReport, ScoringError> {
    let mut analysis = analyse(text, options.format)?;
    analysis.attach_snippets(&options.snippets);
    let verdicts: Vec<Option<ParsedVerdict>> = plan_judging(&analysis.claims, &analysis.references)
        .into_iter()
        .map(|plan| match plan {
            JudgePlan::Unjudged(reason) => Some(ParsedVerdict { verdict: Verdict::Unjudged(reason), line: None }),
            JudgePlan::Judge(_) | JudgePlan::NotCited => None,
        })
        .collect();
    Ok(ScoreReport::assemble(analysis, &options.run, &verdicts))
}

/// The normalised form of a Markdown-link report: the body with links
/// rewritten to `[n]` and the reference table (seed 000 section 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalisedReport {
    pub body: String,
    pub references: Vec<Reference>,
}

/// Normalises a Markdown-link report (whatever its detected format).
pub fn normalise_markdown_links(text: &str) -> Result<NormalisedReport, ScoringError> {
    let analysis = analyse(text, Some(ReportFormat::MarkdownLinks))?;
    Ok(NormalisedReport { body: analysis.normalised_body.unwrap_or_default(), references: analysis.references })
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Line numbers read with the forward cursor, for offsets asked in
        /// any order, are those of a binary search over the newlines.
        #[test]
        fn line_cursor_answers_as_the_binary_search(
            text in "[a\n]{0,40}",
            offsets in proptest::collection::vec(0usize..45, 0..20),
        ) {
            let lines = LineIndex::new(&text);
            for offset in offsets {
                let searched = lines.newlines.partition_point(|&nl| nl < offset) + 1;
                proptest::prop_assert_eq!(lines.line_of(offset) as usize, searched);
            }
        }
    }

    proptest::proptest! {
        /// Detecting the format with the leaves that hold links scanned
        /// only when their count matters gives the format of counting every
        /// body leaf's markers, on reports mixing markers, links, code
        /// spans, URLs and reference lists.
        #[test]
        fn deferred_detection_equals_counting_every_marker(
            text in proptest::string::string_regex(concat!(
                r"((A|b|\[1\]|\[2, 3\]|`\[4\]`|\[x\]\(https://a\.org\)|",
                r"\[5\]\(https://b\.org/\[6\]\)|<https://c\.org>|https://d\.org/\[7\]| |\.|\n|\n\n)*)",
                r"(\n\n## References\n\n1\. https://a\.org\n)?",
            )).unwrap(),
            stray_links in 0usize..6,
        ) {
            let mut parsed = document::parse(&text);
            let texts: Vec<std::borrow::Cow<str>> =
                parsed.leaves.iter().map(|leaf| document::leaf_text(&text, leaf)).collect();
            document::classify(&text, &mut parsed, &texts);
            let has_list = text.contains("References");
            let every: usize = parsed
                .leaves
                .iter()
                .zip(&texts)
                .filter(|(leaf, _)| leaf.role.counts_citations())
                .map(|(_, t)| markers::scan(t).iter().filter(|s| s.kind == markers::SpanKind::Marker).count())
                .sum();
            let mut spans = LeafSpans::new(
                &texts,
                |i| parsed.leaves[i].role.counts_citations(),
                |i| parsed.links.iter().any(|l| l.leaf == i),
            );
            proptest::prop_assert_eq!(
                detect_format_from(&parsed, &texts, &mut spans, stray_links, has_list),
                detect_format(every, stray_links, has_list)
            );
        }
    }
}
