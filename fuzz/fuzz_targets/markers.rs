//! The marker parser, the span scanner and the sentence segmenter: spans
//! are in order, inside the text, on character boundaries, and markers
//! carry valid indices; sentences are in order and inside the text.
#![no_main]

use cohort_core::scoring::markers::{self, MAX_MARKER_INDEX};
use cohort_core::scoring::{parse_markers, split_sentences, strip_markers};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut at = 0;
    for span in markers::scan(text) {
        assert!(span.range.start >= at && span.range.start < span.range.end && span.range.end <= text.len());
        assert!(text.is_char_boundary(span.range.start) && text.is_char_boundary(span.range.end));
        at = span.range.end;
    }
    for marker in parse_markers(text) {
        assert!(!marker.indices.is_empty());
        assert!(marker.indices.iter().all(|&i| (1..=MAX_MARKER_INDEX).contains(&i)));
    }
    assert!(strip_markers(text).len() <= text.len());
    let mut at = 0;
    for sentence in split_sentences(text) {
        assert!(sentence.start >= at && sentence.start < sentence.end && sentence.end <= text.len());
        assert!(text.get(sentence.clone()).is_some());
        at = sentence.end;
    }
});
