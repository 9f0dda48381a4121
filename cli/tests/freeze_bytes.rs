//! `cohort freeze` vouches only for the manifest `cohort run` accepts
//! (issue 23): a re-indented manifest.json has the same content but other
//! bytes, and the ledger, the records and the workers name a cohort by the
//! SHA-256 of those bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod support;

use std::fs;

use support::{cohort, text};

/// Proves a re-indented manifest is refused by `cohort freeze` (which
/// verified it before) and by `cohort run`, with the same message naming
/// both hashes, and that the bytes freezing wrote are accepted again once
/// restored.
#[test]
fn a_reformatted_manifest_is_refused_by_freeze_and_run_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    support::copy_example("quickstart", &dir);
    let d = dir.to_str().unwrap();
    let out = cohort(&["freeze", d]);
    assert!(out.status.success(), "{}", text(&out));
    let path = dir.join("manifest.json");
    let written = fs::read(&path).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&written).unwrap();
    fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();

    let frozen = cohort(&["freeze", d]);
    let run = cohort(&["run", d]);
    for (what, out) in [("freeze", &frozen), ("run", &run)] {
        let t = text(out);
        assert!(!out.status.success(), "{what} accepted a re-formatted manifest:\n{t}");
        assert!(t.contains("its bytes are not the ones freezing wrote"), "{what}:\n{t}");
        assert!(t.contains(&cohort_core::hash::sha256_hex(&written)), "{what} names the frozen hash:\n{t}");
    }
    assert!(!dir.join(".cohort/ledger.sqlite").exists(), "run wrote a ledger");

    fs::write(&path, &written).unwrap();
    let again = cohort(&["freeze", d]);
    assert!(again.status.success(), "{}", text(&again));
}
