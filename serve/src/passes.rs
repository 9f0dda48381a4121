//! `cohort passes`: a cohort's judging passes listed (configuration,
//! verdict counts, served models) with their pairwise agreement, as text or
//! as the JSON docs/judging.md describes.

use std::collections::BTreeMap;
use std::path::Path;

use cohort_worker::judging::{self, PassSummary};
use cohort_worker::passes::{PassError, PassKind};
use serde_json::json;

/// The listing of the passes in the cohort `dir`: JSON when `as_json`,
/// else text.
pub fn listing(dir: &Path, as_json: bool) -> Result<String, PassError> {
    let summaries = PassSummary::read_all(dir)?;
    let pairs = judging::pass_agreements(&summaries);
    if as_json {
        return Ok(format!("{}\n", json_listing(&summaries, &pairs)));
    }
    if summaries.is_empty() {
        return Ok(format!("no passes in {} yet: `cohort judge` makes one\n", dir.display()));
    }
    Ok(text_listing(&summaries, &pairs))
}

type Pairs<'a> = [(&'a str, &'a str, cohort_core::agreement::Agreement)];

fn json_listing(summaries: &[PassSummary], pairs: &Pairs<'_>) -> String {
    let passes: Vec<serde_json::Value> = summaries
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "config": s.config,
                "runs": s.runs,
                "claims": s.claims,
                "judged": s.yes + s.no,
                "yes": s.yes,
                "no": s.no,
                "unjudged": s.unjudged,
                "served_models": s.served,
            })
        })
        .collect();
    let agreement: Vec<serde_json::Value> = pairs
        .iter()
        .map(|(a, b, agreed)| {
            json!({
                "a": a,
                "b": b,
                "items": agreed.items,
                "raw_agreement": agreed.raw_agreement,
                "kappa": agreed.kappa,
                "matrix": agreed.matrix,
                "labels": agreed.labels,
            })
        })
        .collect();
    let out = json!({ "passes": passes, "agreement": agreement });
    serde_json::to_string_pretty(&out).unwrap_or_default()
}

fn text_listing(summaries: &[PassSummary], pairs: &Pairs<'_>) -> String {
    let mut out = String::new();
    for s in summaries {
        let config = &s.config;
        let what = match (&config.kind, &config.judge) {
            (PassKind::Judge, Some(j)) => format!(
                "judge {:?}, frozen model {:?} served {:?}, lineage {:?}{}",
                j.proxy_judge,
                j.requested_model,
                j.served_model_expected,
                j.vendor_lineage,
                if j.strict { ", strict" } else { "" }
            ),
            _ => format!("majority-vote ensemble of {}", config.members.join(", ")),
        };
        out.push_str(&format!(
            "{}: {what}; created {}\n  {} runs, {} claims: {} judged ({} YES, {} NO); unjudged {}; served by {}\n",
            s.name,
            config.created_at,
            s.runs,
            s.claims,
            s.yes + s.no,
            s.yes,
            s.no,
            render_counts(&s.unjudged),
            render_counts(&s.served),
        ));
    }
    if !pairs.is_empty() {
        out.push_str("\nagreement on claims both passes judged (nominal Cohen's kappa):\n");
        for (a, b, agreed) in pairs {
            out.push_str(&format!(
                "  {a} vs {b}: {} claims, raw agreement {}, kappa {}\n",
                agreed.items, agreed.raw_agreement, agreed.kappa,
            ));
        }
    }
    out
}

fn render_counts<K: std::fmt::Display>(counts: &BTreeMap<K, u64>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}
