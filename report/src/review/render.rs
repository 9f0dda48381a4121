//! The "Human review" section of `summary.md` and `index.html`: one
//! Markdown text, rendered as is into the report, and an HTML version
//! with every value escaped. Without imported review the section says
//! plainly that the review metrics are unmeasured (never 0).

use std::fmt::Write as _;

use super::metrics::{AgreementView, ReviewFigures, ReviewSummary};
use crate::model::UNMEASURED;

/// What the section says when no review was imported.
pub const NO_REVIEW: &str = "no human review imported: claim fidelity, citation precision and coverage are unmeasured";

fn rate_line(name: &str, r: &crate::model::Rate) -> String {
    let reason = r.reason.as_deref().map(|w| format!(" ({w})")).unwrap_or_default();
    format!("| {name} | {} | {} | {} |{reason}", r.display_value(), r.display_fraction(), r.display_interval())
}

fn figures(o: &mut String, title: &str, f: &ReviewFigures) {
    let _ = writeln!(o, "#### {title}\n");
    let _ = writeln!(o, "| rate | value | fraction | 95% interval |\n|---|---|---|---|");
    for (name, r) in [
        ("claim fidelity", &f.claim_fidelity),
        ("citation precision", &f.citation_precision),
        ("citation coverage", &f.citation_coverage),
        ("uncertainty mean (0-2)", &f.uncertainty.mean),
    ] {
        let _ = writeln!(o, "{}", rate_line(name, r));
    }
    let labels: Vec<String> = f.labels.iter().map(|(l, n)| format!("{l} {n}")).collect();
    let reasons: Vec<String> = f.pair_reasons.iter().map(|(l, n)| format!("{l} {n}")).collect();
    let _ = writeln!(
        o,
        "\nFactual claims {} ({}; {} labelled by one reviewer only, {} excluded as not factual or merged); \
         pairs {} ({} supporting; not supporting: {}); covered claims {}.",
        f.factual_claims,
        labels.join(", "),
        f.single_reviewer_claims,
        f.excluded_claims,
        f.pairs,
        f.supporting_pairs,
        if reasons.is_empty() { "none".to_owned() } else { reasons.join(", ") },
        f.covered_claims
    );
    let u = &f.uncertainty;
    let _ = writeln!(
        o,
        "Uncertainty scores 0/1/2: {}/{}/{} over {} output(s).",
        u.scores[0], u.scores[1], u.scores[2], u.outputs
    );
    for (group, g) in &f.uncertainty_by_group {
        let _ = writeln!(
            o,
            "- {group}: 0/1/2 = {}/{}/{}, mean {}",
            g.scores[0],
            g.scores[1],
            g.scores[2],
            g.mean.display_value()
        );
    }
    let _ = writeln!(
        o,
        "Abstentions on answerable questions (reported apart): {} of {} output(s).\n",
        f.abstentions_on_answerable, f.answerable_outputs
    );
}

fn agreement(o: &mut String, name: &str, a: &AgreementView) {
    let _ = writeln!(
        o,
        "- {name}: {} item(s), raw agreement {}, kappa ({:?}) {}",
        a.items, a.raw_agreement, a.weights, a.kappa
    );
}

/// The section in Markdown.
pub fn markdown(review: Option<&ReviewSummary>) -> String {
    let mut o = String::from("## Human review\n\n");
    let Some(r) = review else {
        let _ = writeln!(o, "{NO_REVIEW} (status: {UNMEASURED}).\n");
        return o;
    };
    let _ = writeln!(
        o,
        "Exported {}; reviewers {} (imported: {}); adjudicator {}; {} item(s) adjudicated, {} awaiting adjudication.\n",
        r.exported_at,
        r.reviewers.join(", "),
        r.imported_reviewers.join(", "),
        r.adjudicator.as_deref().unwrap_or("none yet"),
        r.adjudicated_items,
        r.unresolved_items
    );
    match &r.extraction_check {
        Some(c) => {
            let _ = writeln!(
                o,
                "Extraction checked before scoring by {} (check file SHA-256 {}): {} claim(s) split, {} merged, {} not factual, {} added.\n",
                c.checker, c.file_sha256, c.split, c.merged, c.not_factual, c.added
            );
        }
        None => {
            let _ = writeln!(
                o,
                "Extraction not independently checked before scoring (the scorers checked it while labelling).\n"
            );
        }
    }
    if let Some(a) = &r.agreement {
        let _ = writeln!(o, "### Agreement before adjudication ({} vs {})\n", a.reviewers[0], a.reviewers[1]);
        agreement(&mut o, "claim labels", &a.claims);
        agreement(&mut o, "pair support", &a.pairs);
        agreement(&mut o, "uncertainty (nominal)", &a.uncertainty_nominal);
        agreement(&mut o, "uncertainty (linear)", &a.uncertainty_linear);
        agreement(&mut o, "uncertainty (quadratic)", &a.uncertainty_quadratic);
        let _ =
            writeln!(o, "- extraction disagreements (split, merged, not factual): {}\n", a.extraction_disagreements);
        let _ = writeln!(o, "Claim labels, rows {}, columns {}:\n", a.reviewers[0], a.reviewers[1]);
        let _ = writeln!(o, "| | {} |\n|---|{}", a.claims.labels.join(" | "), "---|".repeat(a.claims.labels.len()));
        for (label, row) in a.claims.labels.iter().zip(&a.claims.matrix) {
            let cells: Vec<String> = row.iter().map(u64::to_string).collect();
            let _ = writeln!(o, "| {label} | {} |", cells.join(" | "));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "### Each reviewer's counts (before adjudication)\n");
    for (who, counts) in &r.reviewer_counts {
        let c: Vec<String> = counts.iter().map(|(l, n)| format!("{l} {n}")).collect();
        let _ = writeln!(o, "- {who}: {}", c.join(", "));
    }
    let _ = writeln!(o, "\n### Final figures per arm\n");
    for arm in &r.arms {
        figures(&mut o, &arm.arm, &arm.figures);
        for (cat, f) in &arm.categories {
            figures(&mut o, &format!("{} / {cat}", arm.arm), f);
        }
    }
    for n in &r.notes {
        let _ = writeln!(o, "- {n}");
    }
    o.push('\n');
    o
}

/// The section in HTML: the Markdown text, escaped, in a `<pre>` block
/// (tables included), so no value can inject markup.
pub fn html(review: Option<&ReviewSummary>) -> String {
    let text = markdown(review);
    let body = text.strip_prefix("## Human review\n\n").unwrap_or(&text);
    format!(
        "<section id=\"review\">\n<h2>Human review</h2>\n<pre class=\"review\">{}</pre>\n</section>\n",
        crate::html::Esc(body)
    )
}
