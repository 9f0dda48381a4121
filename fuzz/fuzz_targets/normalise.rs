//! The Markdown normaliser and the whole analysis of one report: any UTF-8
//! input gives a value (or the size error), never a panic, and the claims
//! point inside the normalised body.
#![no_main]

use cohort_core::scoring::{ReportFormat, analyse, strip_markers};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for format in [None, Some(ReportFormat::MarkdownLinks), Some(ReportFormat::Numbered)] {
        let Ok(analysis) = analyse(text, format) else { return };
        let body = analysis.normalised_body.as_deref().unwrap_or(text);
        let _ = strip_markers(body);
        for claim in &analysis.claims {
            assert!(claim.offset <= body.len(), "claim offset past the body");
            assert!(claim.line >= 1);
            assert!(!claim.text.is_empty());
        }
        assert!(analysis.unresolved_citations <= analysis.total_citations);
        for (k, reference) in analysis.references.iter().enumerate() {
            if analysis.format == ReportFormat::MarkdownLinks {
                assert_eq!(reference.index as usize, k + 1, "link indices are sequential");
            }
        }
    }
});
