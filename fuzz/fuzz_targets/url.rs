//! The URL canonicaliser: any string gives a canonical URL or an error,
//! and a canonical URL is its own canonical form.
#![no_main]

use cohort_core::scoring::canonicalise;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(once) = canonicalise(text) {
        assert!(!once.contains('#'), "fragment kept: {once}");
        assert_eq!(canonicalise(&once).as_deref(), Ok(once.as_str()), "not idempotent for {text:?}");
    }
});
