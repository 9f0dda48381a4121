//! The wire corpus (`tests/wire/`, see its README): response bodies written
//! from the providers' public documentation, each with the class, the
//! version and the claims and citations it must produce. Every body is
//! read by the adapter that serves its API (`openai_chat` for Perplexity and
//! OpenAI chat, `openai_responses` for the Responses API, the last poll of
//! a background sequence), and every `ok` answer is then read by the
//! scorer with what the API said it cites
//! (`cohort_core::scoring::analyse_output`), exactly as a run is scored.
//!
//! Proves, per API: every documented citation reaches the claim whose
//! sentence holds it (a count per API is asserted, so a case that stopped
//! being read cannot pass unseen); a cut-off answer is `client_error`
//! (the run `failed`); no sentence of a reasoning block is a claim; the
//! observed version is the body's own.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::scoring::{Analysis, analyse_output, canonicalise};
use cohort_worker::adapters::openai_chat::OpenAiChatAdapter;
use cohort_worker::adapters::openai_responses::OpenAiResponsesAdapter;
use cohort_worker::adapters::{AdapterResponse, Reply};
use serde_json::{Value, json};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/wire")
}

/// Every case of the corpus, by file name.
fn cases() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let case: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (name, case)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 30, "the corpus has {} cases", out.len());
    out
}

fn arm(adapter: AdapterKind, settings: Value) -> ArmConfig {
    let toml = format!(
        "name = \"wire\"\nseed = 1\n[[arms]]\nid = \"a\"\nlabel = \"A\"\nadapter = \"{}\"\npinned_version = \"v\"\n\
         vendor_lineage = \"x\"\n[judge]\nprovider = \"sim\"\nmodel = \"j\"\nvendor_lineage = \"y\"\ntemperature = 0.0\n",
        match adapter {
            AdapterKind::OpenaiChat => "openai_chat",
            _ => "openai_responses",
        }
    );
    let mut config = cohort_core::config::build_and_validate(&toml).unwrap();
    let mut arm = config.arms.remove(0);
    arm.settings = settings;
    arm
}

/// What the adapter of the case's API makes of its body.
fn read(case: &Value) -> AdapterResponse {
    let status = case["status"].as_u64().unwrap() as u16;
    match case["api"].as_str().unwrap() {
        "perplexity" | "openai_chat" => {
            let settings = json!({"base_url": "http://127.0.0.1:9", "model": "m"});
            let adapter = OpenAiChatAdapter::with_env(&arm(AdapterKind::OpenaiChat, settings), |_| None).unwrap();
            adapter.read_answer(status, case["body"].to_string().as_bytes())
        }
        "openai_responses" => {
            let settings = json!({"base_url": "http://127.0.0.1:9", "model": "m"});
            let adapter =
                OpenAiResponsesAdapter::with_env(&arm(AdapterKind::OpenaiResponses, settings), |_| None).unwrap();
            // A background sequence is read at its last (terminal) poll.
            let last = case.get("polls").and_then(Value::as_array).and_then(|p| p.last()).unwrap_or(&case["body"]);
            adapter.read_response(status, last)
        }
        other => panic!("no adapter reads {other}"),
    }
}

fn canonical(url: &str) -> String {
    canonicalise(url).unwrap_or_else(|_| url.to_owned())
}

/// The canonical URLs cited by the one claim holding `needle`.
fn cited_by(analysis: &Analysis, name: &str, needle: &str) -> BTreeSet<String> {
    let holding: Vec<_> = analysis.claims.iter().filter(|c| c.text.contains(needle)).collect();
    assert_eq!(
        holding.len(),
        1,
        "{name}: {} claims hold {needle:?}; claims: {:#?}",
        holding.len(),
        analysis.claims.iter().map(|c| &c.text).collect::<Vec<_>>()
    );
    holding[0]
        .cited
        .iter()
        .filter_map(|i| analysis.references.iter().find(|r| r.index == *i).and_then(|r| r.url.clone()))
        .collect()
}

/// See the module doc. Counts per API the citations that reached their
/// claims and the cut-off and reasoning cases checked.
#[test]
fn every_documented_citation_reaches_its_claim() {
    let mut reached: BTreeMap<String, usize> = BTreeMap::new();
    let mut cut_off: BTreeMap<String, usize> = BTreeMap::new();
    let mut reasoning_checked = 0;
    let mut failures = Vec::new();
    for (name, case) in cases() {
        let api = case["api"].as_str().unwrap().to_owned();
        if api == "anthropic_messages" {
            continue; // the judge's answers: judge-proxy/tests/wire_corpus.rs
        }
        let expect = &case["expect"];
        let r = read(&case);
        let class = expect["class"].as_str().unwrap();
        if r.class.as_str() != class {
            failures.push(format!("{name}: class {} ({}), expected {class}", r.class, r.detail));
            continue;
        }
        if r.class != cohort_core::taxonomy::AttemptClass::Ok {
            // A cut-off answer keeps its partial text for the record; it is
            // never completed, so never scored.
            if name.contains("length") || name.contains("max_output_tokens") {
                *cut_off.entry(api.clone()).or_default() += 1;
                assert!(matches!(r.reply, Reply::Output(_)), "{name}: the partial text is kept");
            }
            continue;
        }
        if let Some(v) = expect.get("observed_version").and_then(Value::as_str) {
            assert_eq!(r.observed_version.as_deref(), Some(v), "{name}");
        }
        let Reply::Output(text) = &r.reply else { panic!("{name}: {:?}", r.reply) };
        let analysis = analyse_output(text, &r.citations, None).unwrap();
        for item in expect["cited"].as_array().into_iter().flatten() {
            let needle = item["claim"].as_str().unwrap();
            let want: BTreeSet<String> =
                item["urls"].as_array().unwrap().iter().map(|u| canonical(u.as_str().unwrap())).collect();
            let got = cited_by(&analysis, &name, needle);
            if got == want {
                *reached.entry(api.clone()).or_default() += want.len();
            } else {
                failures.push(format!("{name}: {needle:?} cites {got:?}, expected {want:?}"));
            }
        }
        for needle in expect["uncited"].as_array().into_iter().flatten().map(|v| v.as_str().unwrap()) {
            let got = cited_by(&analysis, &name, needle);
            if !got.is_empty() {
                failures.push(format!("{name}: {needle:?} should cite nothing, cites {got:?}"));
            }
        }
        for needle in expect["not_claims"].as_array().into_iter().flatten().map(|v| v.as_str().unwrap()) {
            if let Some(c) = analysis.claims.iter().find(|c| c.text.contains(needle)) {
                failures.push(format!("{name}: {needle:?} is in claim {:?}", c.text));
            }
        }
        if text.contains("<think>") {
            reasoning_checked += 1;
            assert!(!analysis.reasoning.is_empty(), "{name}: the reasoning block is kept apart");
            assert!(analysis.claims.iter().all(|c| !c.text.contains("think>")), "{name}");
        }
        let distinct: BTreeSet<&str> = analysis
            .claims
            .iter()
            .flat_map(|c| c.cited.iter())
            .filter_map(|i| analysis.references.iter().find(|r| r.index == *i).and_then(|r| r.url.as_deref()))
            .collect();
        if let Some(n) = expect.get("distinct_urls").and_then(Value::as_u64)
            && distinct.len() as u64 != n
        {
            failures.push(format!("{name}: {} distinct cited URLs, expected {n}: {distinct:?}", distinct.len()));
        }
        if let Some(unresolved) = expect.get("unresolved").and_then(Value::as_array) {
            let want: Vec<u32> = unresolved.iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(analysis.unresolved_indices, want, "{name}");
        }
        if !analysis.warnings.is_empty() && name.contains("annotation") {
            failures.push(format!("{name}: warnings {:?}", analysis.warnings));
        }
    }
    println!("citations that reached their claims, per API: {reached:?}");
    println!("cut-off answers failed, per API: {cut_off:?}; reasoning blocks checked: {reasoning_checked}");
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
    // Floors, so that a case that stopped being read fails here.
    for (api, floor) in [("perplexity", 20), ("openai_chat", 6), ("openai_responses", 15)] {
        let n = reached.get(api).copied().unwrap_or(0);
        assert!(n >= floor, "{api}: only {n} citations reached their claims");
    }
    for api in ["perplexity", "openai_chat", "openai_responses"] {
        assert!(cut_off.get(api).copied().unwrap_or(0) >= 1, "{api}: no cut-off answer was checked");
    }
    assert!(reasoning_checked >= 2, "reasoning blocks checked: {reasoning_checked}");
}
