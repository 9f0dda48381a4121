//! Golden tests of the scorer on hand-written reports in `tests/golden/`.
//!
//! Each `NAME.md` is scored (with `NAME.snippets.json` as the captured
//! snippets when present) and the full JSON of `cohort score` is compared
//! with `NAME.expected.json`, which was reviewed by hand. `UPDATE_GOLDEN=1`
//! rewrites the expected files after an intended change; review the diff.
//! The per-case tests below then assert, by name, the property each report
//! was written to prove, so a regenerated golden file cannot silently
//! accept a regression of that property.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cohort_core::scoring::{ReportFormat, ScoreOptions, ScoreReport, UnjudgedReason, VerdictLabel, score_report};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn options_for(name: &str) -> ScoreOptions {
    let snippets = golden_dir().join(format!("{name}.snippets.json"));
    let snippets: BTreeMap<u32, Vec<String>> = match fs::read_to_string(&snippets) {
        Ok(text) => {
            let raw: BTreeMap<String, Vec<String>> = serde_json::from_str(&text).unwrap();
            raw.into_iter().map(|(k, v)| (k.parse().unwrap(), v)).collect()
        }
        Err(_) => BTreeMap::new(),
    };
    ScoreOptions { snippets, ..ScoreOptions::default() }
}

fn score(name: &str) -> ScoreReport {
    let text = fs::read_to_string(golden_dir().join(format!("{name}.md"))).unwrap();
    score_report(&text, &options_for(name)).unwrap()
}

fn claim_texts(report: &ScoreReport) -> Vec<&str> {
    report.claims.iter().map(|c| c.text.as_str()).collect()
}

/// Every golden report scores to exactly its reviewed expected JSON.
#[test]
fn every_report_matches_its_expected_json() {
    let mut names: Vec<String> = fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".md").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "at least 10 golden reports, found {}", names.len());
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatches = Vec::new();
    for name in &names {
        let got = serde_json::to_value(score(name)).unwrap();
        let path = golden_dir().join(format!("{name}.expected.json"));
        if update {
            fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
            continue;
        }
        let expected: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(&path)
                .unwrap_or_else(|_| panic!("{} is missing; run with UPDATE_GOLDEN=1", path.display())),
        )
        .unwrap();
        if got != expected {
            mismatches.push(format!("{name}: got\n{}", serde_json::to_string_pretty(&got).unwrap()));
        }
    }
    assert!(mismatches.is_empty(), "golden mismatches:\n{}", mismatches.join("\n\n"));
}

/// Comma groups and ranges (hyphen and en dash) are expanded and counted:
/// 1 + 2 + 3 + 3 + 3 + 2 = 14 citations, all resolved.
#[test]
fn comma_groups_and_ranges_are_expanded() {
    let r = score("01_comma_groups_and_ranges");
    assert_eq!(r.format, ReportFormat::Numbered);
    assert_eq!(r.metrics.total_citations, 14);
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
    let cited: Vec<Vec<u32>> = r.claims.iter().map(|c| c.cited.clone()).collect();
    assert_eq!(cited, vec![vec![1], vec![1, 2], vec![2, 3, 4], vec![3, 4, 5], vec![1, 3, 5], vec![4, 5]]);
    assert_eq!(r.references.len(), 5);
}

/// Indices missing from the reference list are unresolved: 2 of 6
/// citations ([7] and [9]), resolution 4/6.
#[test]
fn unresolved_indices_lower_the_resolution_rate() {
    let r = score("02_unresolved_indices");
    assert_eq!(r.metrics.total_citations, 6);
    assert_eq!(r.metrics.unresolved_citations, 2);
    assert_eq!(r.metrics.unresolved_indices, vec![7, 9]);
    assert_eq!(r.metrics.resolution_rate, Some(4.0 / 6.0));
    let indices: Vec<u32> = r.references.iter().map(|x| x.index).collect();
    assert_eq!(indices, vec![1, 2, 3]);
}

/// Tracking parameters, fragments, host case and default ports merge into
/// one index; content parameters (page, lang, v, id, tab, section) do not.
#[test]
fn tracking_parameters_merge_and_content_parameters_do_not() {
    let r = score("03_links_tracking_merge");
    assert_eq!(r.format, ReportFormat::MarkdownLinks);
    let urls: Vec<&str> = r.references.iter().filter_map(|x| x.url.as_deref()).collect();
    assert_eq!(
        urls,
        vec![
            "https://www.noaa.gov/news/bleaching",
            "https://coralwatch.example/data?region=caribbean&page=2",
            "https://coralwatch.example/data?region=pacific&page=2",
            "https://coralwatch.example/archive?page=1&lang=en",
            "https://coralwatch.example/archive?page=2&lang=en",
            "https://coralwatch.example/archive?page=1&lang=de",
            "https://video.example/watch?v=abc123",
            "https://video.example/watch?v=def456",
            "https://coralwatch.example/report?id=42&tab=methods&section=3",
        ]
    );
    assert_eq!(r.references[0].as_written.len(), 3, "three spellings merged into [1]");
    let body = r.normalised_body.as_deref().unwrap();
    assert!(body.contains("by NOAA[1].\nThe same announcement[1] says"));
    assert!(body.contains("According to NOAA's bulletin[1], heat stress"));
}

/// Titles, headings (even with markers), pseudo-headings, front matter,
/// metadata lines and reference lists yield no claims; markers in headings
/// still count as in-text citations, markers in reference lists do not.
#[test]
fn headings_metadata_and_reference_lists_are_excluded() {
    let r = score("04_headings_and_reference_lists_excluded");
    assert_eq!(
        claim_texts(&r),
        vec![
            "Cities are on average 1 to 3 degrees warmer than their surroundings [1].",
            "Tree canopy cover lowers peak surface temperatures [2].",
            "Green roofs cut building cooling demand [3].",
        ]
    );
    assert_eq!(r.metrics.total_citations, 5, "3 in prose + [1] in the title + [3] in a heading");
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
}

/// Seed 004 links every attached citation to its claim: a table row that
/// cites is one claim (its cells together), a heading written as a
/// statement that cites is a claim; a title that cites, an uncited row
/// and the header row are not claims.
#[test]
fn cited_table_rows_and_statement_headings_are_claims() {
    let r = score("19_cited_tables_and_statement_headings");
    assert_eq!(
        claim_texts(&r),
        vec![
            "Ice floats because it is about 9% less dense than liquid water [1].",
            "Ice Ih 0.917 g/cm³ [1] handbook",
            "Liquid water 0.9998 g/cm³ [2] handbook",
            "The explanation holds near atmospheric pressure [2].",
        ]
    );
    let cited: Vec<&[u32]> = r.claims.iter().map(|c| c.cited.as_slice()).collect();
    assert_eq!(cited, vec![&[1][..], &[1], &[2], &[2]]);
    assert_eq!(r.metrics.total_citations, 5, "the title's [1] counts as a citation but gives no claim");
}

/// Abbreviations (U.S., Fig. 2, Dr., et al., e.g., Vol. 12, No. 5, J. R.,
/// U.K., Mr.) do not end sentences.
#[test]
fn abbreviations_do_not_split_sentences() {
    let r = score("05_abbreviations");
    assert_eq!(
        claim_texts(&r),
        vec![
            "Smoke from Canadian fires reached the U.S. East Coast in June 2023 [1].",
            "Air quality alerts covered about 100 million people [1].",
            "As shown in Fig. 2 of the agency report, fine particle levels peaked on June 7 [2].",
            "Dr. Patel and colleagues linked the peak to a rise in asthma visits [3].",
            "Smith et al. found similar effects in earlier seasons, e.g. in 2018 and 2020 [4].",
            "Vol. 12 of the survey lists No. 5 as the worst episode [4].",
            "J. R. Harris, a U.K. epidemiologist, called the data set unusually complete [3].",
            "Mr. Harris also noted gaps in rural monitoring [3].",
        ]
    );
}

/// Decimals never end a sentence.
#[test]
fn decimals_do_not_split_sentences() {
    let r = score("06_decimals");
    assert_eq!(r.claims.len(), 5);
    assert_eq!(r.claims[0].text, "Global chip sales reached $627.6 billion in 2024, up 19.1% on the year [1].");
    assert_eq!(r.claims[4].text, "Version 2.0 of the industry roadmap was released in March [2].");
    assert_eq!(r.metrics.unresolved_indices, vec![1, 2, 3], "no reference list: every index is unresolved");
    assert_eq!(r.metrics.resolution_rate, Some(0.0), "citations exist, so the rate is 0, not None");
}

/// URLs with dots stay inside their sentence, markers inside URLs and code
/// spans are not citations, and reference URLs are canonicalised.
#[test]
fn urls_with_dots_and_code_spans() {
    let r = score("07_urls_with_dots_and_code");
    assert_eq!(r.claims.len(), 6);
    assert!(
        r.claims[1].text.starts_with("Its API is documented at https://data.europa.eu/api/hub/search/v1.2/docs.html")
    );
    assert_eq!(r.claims[3].cited, vec![2], "[3] inside the mirror URL is not a citation");
    assert_eq!(r.claims[4].cited, vec![1], "[5] and [4] inside code spans are not citations");
    assert_eq!(r.metrics.total_citations, 6);
    assert_eq!(r.references[2].url.as_deref(), Some("https://www.rfc-editor.org/rfc/rfc3986.html"));
    assert_eq!(r.references[1].url.as_deref(), Some("https://www.gov.uk/open-data"));
}

/// A report with no citations has no resolution rate (None, never 0) and
/// every assertive sentence is uncited; the question is not a claim.
#[test]
fn no_citations_means_resolution_none() {
    let r = score("08_no_citations");
    assert_eq!(r.metrics.total_citations, 0);
    assert_eq!(r.metrics.resolution_rate, None);
    assert_eq!(r.metrics.assertive_sentences, 5);
    assert_eq!(r.metrics.uncited_assertive_sentences, 5);
    assert!(!claim_texts(&r).contains(&"Is the effect permanent?"));
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["metrics"]["resolution_rate"].is_null());
}

/// When no source could be captured, every cited claim is unjudged
/// (source_unavailable) and the support rate is None, "n/a (unmeasured)".
#[test]
fn unreachable_sources_leave_support_unmeasured() {
    let r = score("09_sources_unreachable");
    assert_eq!(r.claims.len(), 3);
    for claim in &r.claims {
        assert_eq!(claim.verdict, Some(VerdictLabel::Unjudged));
        assert_eq!(claim.unjudged_reason, Some(UnjudgedReason::SourceUnavailable));
    }
    assert_eq!(r.support.rate, None);
    assert_eq!((r.support.judged, r.support.unjudged), (0, 3));
    assert_eq!(r.support.rendered, "n/a (unmeasured)");
    assert_eq!(r.metrics.resolution_rate, Some(1.0), "the citations resolve even though the sources are down");
}

/// Questions are not claims; conflict blocks (quotes with a conflict label
/// and a conflict section) are excluded from the body and give the
/// distinct conflicting pairs {1,3}, {2,4}, {2,5}; a plain quote is body.
#[test]
fn questions_and_conflict_blocks() {
    let r = score("10_questions_and_conflict_blocks");
    assert_eq!(
        claim_texts(&r),
        vec![
            "Most trials say no [1, 2].",
            "Trials of 12 months show similar weight loss for both approaches [1].",
            "Results are mixed [3].",
            "This ordinary quote is part of the body [4].",
        ]
    );
    assert_eq!(r.metrics.contradictions_surfaced, 3);
    assert_eq!(r.metrics.total_citations, 5, "markers in conflict blocks are not body citations");
}

/// Links written as numbers become plain markers, autolinks keep their
/// brackets and get a marker, relative links and e-mail addresses are not
/// sources.
#[test]
fn numeric_anchors_autolinks_and_non_web_links() {
    let r = score("11_numeric_anchors_and_autolinks");
    let body = r.normalised_body.as_deref().unwrap();
    assert!(body.contains("record in 2024 [1].\n"));
    assert!(body.contains("excess heat [2], as the Argo float network[2] shows."));
    assert!(body.contains("<https://argo.example/raw?format=netcdf>[3] and a guide is in the local docs; questions go to <team@argo.example>."));
    assert_eq!(r.references.len(), 3);
}

/// Claims are judgeable only where every cited source has real text: [1]
/// has text, [2] only whitespace, [3] nothing, so the claim citing only [1]
/// awaits a judge (no verdict), the claim citing [1, 2] and the one citing
/// [3] are source_unavailable naming [2] and [3] (issue 20: [1, 2] was
/// judged on [1] alone), and the uncited claim is not in the support counts.
#[test]
fn partial_snippets_split_judgeable_from_unavailable() {
    let r = score("12_partial_snippets");
    let states: Vec<(Option<VerdictLabel>, Option<UnjudgedReason>, Vec<u32>)> =
        r.claims.iter().map(|c| (c.verdict, c.unjudged_reason, c.missing_sources.clone())).collect();
    let unavailable = Some(UnjudgedReason::SourceUnavailable);
    assert_eq!(
        states,
        vec![
            (None, None, vec![]),
            (Some(VerdictLabel::Unjudged), unavailable, vec![2]),
            (Some(VerdictLabel::Unjudged), unavailable, vec![3]),
            (None, None, vec![]),
        ]
    );
    assert_eq!(r.references[0].snippets.len(), 1);
    assert!(r.references[1].snippets.is_empty(), "blank snippets are dropped");
    assert_eq!(r.support.rate, None);
    assert_eq!(r.metrics.uncited_assertive_sentences, 1);
}

/// A plain `Sources:` line followed on the next line by its `[n]` entries
/// (one Markdown paragraph, the usual Perplexity shape) is a reference
/// list: every citation resolves, entries and the heading are not claims,
/// and a body sentence containing the word "sources" stays a claim.
#[test]
fn reference_heading_without_blank_line_is_a_reference_list() {
    let r = score("13_reference_heading_without_blank_line");
    assert_eq!(r.format, ReportFormat::Numbered);
    assert_eq!(r.metrics.total_citations, 5);
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
    let indices: Vec<u32> = r.references.iter().map(|x| x.index).collect();
    assert_eq!(indices, vec![1, 2, 3, 4]);
    assert_eq!(r.references[1].url.as_deref(), Some("https://maine.example/heat-pumps/field-study"));
    assert_eq!(r.references[0].title.as_deref(), Some("NEEP cold-climate heat pump list"));
    assert_eq!(
        claim_texts(&r),
        vec![
            "Modern air-source heat pumps keep working at -25 °C [1].",
            "Field trials in Maine found average seasonal efficiency above 2.5 [2][3].",
            "The sources agree that defrost cycles cost a few percent of output [3].",
            "Independent sources also report lower running costs than oil boilers [4].",
        ]
    );
}

/// `**Sources:**` followed directly by `(n)` entries is a reference list,
/// and the one stray inline link does not switch the report to
/// Markdown-link mode: it stays numbered, its markers resolve against its
/// own list, and a warning says the link is not counted.
#[test]
fn bold_sources_with_parenthesised_entries_and_a_stray_link_stay_numbered() {
    let r = score("14_bold_sources_parenthesised_entries");
    assert_eq!(r.format, ReportFormat::Numbered);
    assert_eq!(r.metrics.total_citations, 4);
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
    let urls: Vec<&str> = r.references.iter().filter_map(|x| x.url.as_deref()).collect();
    assert_eq!(
        urls,
        vec![
            "https://iea.example/critical-minerals-2025",
            "https://markets.example/lithium-prices",
            "https://cochilco.example/lithium"
        ]
    );
    assert_eq!(r.claims.len(), 4, "three cited claims and the sentence holding the stray link");
    assert!(r.claims[3].cited.is_empty(), "a stray link is not a citation");
    assert!(r.warnings.iter().any(|w| w.starts_with("1 inline web link(s) in the body are not counted")));
    assert!(r.normalised_body.is_none());
}

/// `## References` followed directly by `1. [Title](url)` items: the
/// anchors are the titles, both markers resolve, the stray link in the
/// body is not a citation and does not change the format.
#[test]
fn markdown_heading_with_numbered_link_entries() {
    let r = score("15_markdown_heading_numbered_links");
    assert_eq!(r.format, ReportFormat::Numbered);
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
    let titles: Vec<&str> = r.references.iter().filter_map(|x| x.title.as_deref()).collect();
    assert_eq!(
        titles,
        vec!["Rapid single-particle imaging of nanoplastics", "Drinking boiled tap water reduces human intake"]
    );
    assert_eq!(r.references.len(), 2, "the stray link is not added to the table");
}

/// Markers without any reference list plus fewer links than markers: the
/// report is numbered, every marker is unresolved (rate 0.0, not a
/// resolution against a table generated from the one link), and both
/// warnings say why.
#[test]
fn markers_without_a_list_outnumbering_links_stay_numbered_and_unresolved() {
    let r = score("16_markers_without_list_and_a_link");
    assert_eq!(r.format, ReportFormat::Numbered);
    assert_eq!(r.metrics.total_citations, 4);
    assert_eq!(r.metrics.unresolved_indices, vec![1, 2, 3, 4]);
    assert_eq!(r.metrics.resolution_rate, Some(0.0));
    assert!(r.references.is_empty());
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
}

/// Links outnumbering the markers of a report without a reference list:
/// the report is normalised as Markdown links, and the stray marker is
/// read against the generated table with a warning saying so.
#[test]
fn links_outnumbering_stray_markers_are_normalised() {
    let r = score("17_links_with_a_stray_marker");
    assert_eq!(r.format, ReportFormat::MarkdownLinks);
    assert_eq!(r.references.len(), 4);
    assert_eq!(r.metrics.total_citations, 5);
    assert_eq!(
        r.warnings,
        vec!["1 bracketed number(s) already in the text are read as markers of the normalised table".to_owned()]
    );
}

/// `Citations:` followed directly by `[n]: url "Title"` lines: Markdown
/// cannot read them as link definitions (a definition cannot interrupt a
/// paragraph), so they are read as entries, the quoted title unquoted.
#[test]
fn definition_shaped_entries_after_a_heading_line() {
    let r = score("18_citations_as_link_definitions");
    assert_eq!(r.metrics.total_citations, 3);
    assert_eq!(r.metrics.resolution_rate, Some(1.0));
    assert_eq!(r.references[0].title.as_deref(), Some("NSIDC Sea Ice Today"));
    assert_eq!(r.references[1].title, None);
    assert_eq!(r.claims.len(), 2);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

/// Every reference heading shape followed on the very next line by every
/// entry shape: two citations, both resolve, exactly the two body
/// sentences are claims (the heading and the entries never are), and the
/// entries' URLs are read.
#[test]
fn every_heading_shape_with_every_entry_shape_resolves() {
    let headings = [
        "References",
        "References:",
        "Sources",
        "Sources:",
        "Citations",
        "Citations:",
        "Bibliography",
        "Bibliography:",
        "**Sources:**",
        "**References**",
        "**Sources**:",
        "## References",
        "### Sources:",
    ];
    let entries: [fn(u32, &str) -> String; 7] = [
        |n, url| format!("[{n}] {url}"),
        |n, url| format!("[{n}] Report number {n}. {url}"),
        |n, url| format!("({n}) {url}"),
        |n, url| format!("{n}. {url}"),
        |n, url| format!("{n}. [Report {n}]({url})"),
        |n, url| format!("[{n}]: {url}"),
        |n, url| format!("[{n}]: {url} \"Report {n}\""),
    ];
    let urls = ["https://a.example/one", "https://b.example/two?page=2"];
    let mut failures = Vec::new();
    for heading in headings {
        for (shape, entry) in entries.iter().enumerate() {
            let text = format!(
                "Sales grew by a tenth [1].\nPrices fell sharply [2].\n\n{heading}\n{}\n{}\n",
                entry(1, urls[0]),
                entry(2, urls[1])
            );
            let r = score_report(&text, &ScoreOptions::default()).unwrap();
            let got_urls: Vec<&str> = r.references.iter().filter_map(|x| x.url.as_deref()).collect();
            let ok = r.format == ReportFormat::Numbered
                && r.metrics.total_citations == 2
                && r.metrics.resolution_rate == Some(1.0)
                && claim_texts(&r) == vec!["Sales grew by a tenth [1].", "Prices fell sharply [2]."]
                && got_urls == urls;
            if !ok {
                failures.push(format!(
                    "heading {heading:?}, entry shape {shape}: format {:?}, total {}, rate {:?}, claims {:?}, urls {got_urls:?}",
                    r.format,
                    r.metrics.total_citations,
                    r.metrics.resolution_rate,
                    claim_texts(&r)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// A line that merely contains a reference word, or a sentence ending in
/// one, followed by a line starting with a number is not a heading: the
/// paragraph stays body text and its markers stay citations.
#[test]
fn a_sentence_mentioning_sources_is_not_a_heading() {
    for text in [
        "Several independent sources\n[1] confirm the figure, as do later surveys [2].\n",
        "We checked the sources.\n(1) The first survey found growth [1].\n",
        "The main references are two surveys\n1) the 2023 census and the 2024 poll [1].\n",
    ] {
        let r = score_report(text, &ScoreOptions::default()).unwrap();
        assert!(r.references.is_empty(), "{text:?}: {:?}", r.references);
        assert!(!r.claims.is_empty(), "{text:?}: the paragraph is body text");
        assert!(r.metrics.total_citations >= 1, "{text:?}");
        assert_eq!(r.metrics.resolution_rate, Some(0.0), "{text:?}");
    }
}
