//! The judge-reply parser: any reply gives one verdict per claim (or the
//! size error), never a panic. The first byte picks the claim count.
#![no_main]

use cohort_core::scoring::{Verdict, parse_verdicts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let Ok(reply) = std::str::from_utf8(rest) else { return };
    let n = usize::from(n);
    let Ok(verdicts) = parse_verdicts(reply, n) else { return };
    assert_eq!(verdicts.len(), n);
    for v in &verdicts {
        if matches!(v.verdict, Verdict::Yes | Verdict::No) {
            assert!(v.line.is_some(), "a verdict without its line");
        }
    }
});
