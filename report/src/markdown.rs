//! `summary.md`: what a person reads first. It opens with the method block
//! and the publication fields (seed 000 section 8: "the number means nothing
//! without it"), then every denominator, every rate with its fraction and
//! interval, the paired comparisons as plain statements, the failure
//! taxonomy and time and cost, described and never ranked.

use std::fmt::Write as _;

use crate::model::*;
use crate::rates::Pooling;

const NOT_DECLARED: &str = "not declared";

/// Renders the Markdown summary.
pub fn render_markdown(s: &Summary) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail.
    let _ = render(&mut out, s);
    out
}

/// The cited sources of scored outputs (seed 004): a source is a distinct
/// normalised URL of an output's reference table.
fn sources_table<'s>(
    o: &mut String,
    first: &str,
    rows: impl Iterator<Item = (String, &'s SourceCounts)>,
) -> std::fmt::Result {
    writeln!(
        o,
        "| {first} | sources (per output, summed) | unique sources | accessible | inaccessible | never captured |"
    )?;
    writeln!(o, "|---|---:|---:|---:|---:|---:|")?;
    for (name, c) in rows {
        writeln!(
            o,
            "| {name} | {} | {} | {} | {} | {} |",
            c.cited, c.unique, c.accessible, c.inaccessible, c.uncaptured
        )?;
    }
    writeln!(o)
}

fn render(o: &mut String, s: &Summary) -> std::fmt::Result {
    // The first line says whether these numbers may be published as final.
    match &s.redaction {
        Some(redaction) => writeln!(o, "**{redaction}** **{}**\n", s.publication_state.line())?,
        None => writeln!(o, "**{}**\n", s.publication_state.line())?,
    }
    writeln!(o, "# Cohort report: {}\n", s.cohort)?;
    if !s.simulated.arms.is_empty() || s.simulated.judge {
        let mut what = Vec::new();
        if !s.simulated.arms.is_empty() {
            what.push(format!("arms {}", s.simulated.arms.join(", ")));
        }
        if s.simulated.judge {
            what.push("the judge".to_owned());
        }
        writeln!(
            o,
            "> **SIMULATED**: {} {} cohort's built-in simulation, not a real product or model. \
             These numbers exercise the pipeline and measure nothing else.\n",
            what.join(" and "),
            if what.len() > 1 { "are" } else { "is" }
        )?;
    }
    writeln!(
        o,
        "metrics_version {} · tool {} · manifest `{}` · generated {}\n",
        s.metrics_version, s.tool_version, s.manifest_sha256, s.generated_at
    )?;

    method(o, s)?;
    publication(o, &s.publication)?;

    writeln!(o, "## Denominators\n")?;
    writeln!(
        o,
        "Every planned run stays in the accounting: failed, refused, timed-out, unavailable and not-run runs included.\n"
    )?;
    for workflow in workflows(s) {
        writeln!(o, "### Workflow `{workflow}`\n")?;
        writeln!(
            o,
            "| arm | planned | attempted | completed | refused | failed | timed_out | unavailable | not_run | pending | scored | judged runs |"
        )?;
        writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for arm in s.arms.iter().filter(|a| a.workflow == workflow) {
            counts_row(o, &arm_display(&arm.id, arm.simulated), &arm.counts)?;
        }
        writeln!(o)?;
        writeln!(
            o,
            "| arm | claims | cited | uncited | judged | supported | unjudged (by reason) | citations | unresolved | contradictions surfaced |"
        )?;
        writeln!(o, "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")?;
        for arm in s.arms.iter().filter(|a| a.workflow == workflow) {
            let c = &arm.claims;
            writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                arm_display(&arm.id, arm.simulated),
                c.extracted,
                c.cited,
                c.uncited,
                c.judged,
                c.supported,
                unjudged_text(&c.unjudged),
                arm.citations.total,
                arm.citations.unresolved,
                arm.citations.contradictions_surfaced
            )?;
        }
        writeln!(o)?;
        sources_table(
            o,
            "arm",
            s.arms.iter().filter(|a| a.workflow == workflow).map(|a| (arm_display(&a.id, a.simulated), &a.sources)),
        )?;

        writeln!(o, "### Rates (workflow `{workflow}`)\n")?;
        writeln!(
            o,
            "Each rate: value, numerator / denominator, 95% cluster-bootstrap interval over questions. \
             Micro pools claims; macro weighs every question equally. Support counts judged claims only (unjudged claims count in neither direction).\n"
        )?;
        writeln!(
            o,
            "| arm | rate | micro | micro n/d | micro 95% CI | macro | macro n/d (questions) | macro 95% CI |"
        )?;
        writeln!(o, "|---|---|---:|---:|---:|---:|---:|---:|")?;
        for arm in s.arms.iter().filter(|a| a.workflow == workflow) {
            rates_rows(o, &arm_display(&arm.id, arm.simulated), &arm.rates)?;
        }
        writeln!(o)?;
        rate_reasons(o, s, &workflow)?;
    }

    writeln!(o, "## By category\n")?;
    for arm in &s.arms {
        writeln!(o, "### {} (workflow `{}`)\n", arm_display(&arm.id, arm.simulated), arm.workflow)?;
        writeln!(
            o,
            "| category | planned | attempted | completed | refused | failed | timed_out | unavailable | not_run | pending | scored | judged runs |"
        )?;
        writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for c in &arm.categories {
            counts_row(o, &c.category, &c.counts)?;
        }
        writeln!(o)?;
        writeln!(
            o,
            "| category | rate | micro | micro n/d | micro 95% CI | macro | macro n/d (questions) | macro 95% CI |"
        )?;
        writeln!(o, "|---|---|---:|---:|---:|---:|---:|---:|")?;
        for c in &arm.categories {
            rates_rows(o, &c.category, &c.rates)?;
        }
        writeln!(o)?;
        sources_table(o, "category", arm.categories.iter().map(|c| (c.category.clone(), &c.sources)))?;
    }

    writeln!(o, "## Paired comparisons\n")?;
    if s.comparisons.is_empty() {
        writeln!(
            o,
            "No two arms share a workflow: nothing is compared (arms of different workflows are never pooled or compared).\n"
        )?;
    }
    for c in &s.comparisons {
        writeln!(o, "### {} vs {} (workflow `{}`)\n", c.a, c.b, c.workflow)?;
        writeln!(
            o,
            "Completed pairs: **{}** of {} questions. All-attempt completion: {} {} ({}), {} {} ({}).\n",
            c.completed_pairs,
            c.questions,
            c.a,
            c.a_completion.display_value(),
            c.a_completion.display_fraction(),
            c.b,
            c.b_completion.display_value(),
            c.b_completion.display_fraction()
        )?;
        writeln!(o, "| difference (a - b) | value | 95% CI | questions |")?;
        writeln!(o, "|---|---:|---:|---:|")?;
        for (kind, d) in c.differences.iter() {
            let name = kind.comparison().map_or(kind.label(), |compared| compared.markdown_label);
            writeln!(o, "| {name} | {} | {} | {} |", d.display_value(), d.display_interval(), d.questions)?;
        }
        writeln!(o)?;
        for (_, d) in c.differences.iter() {
            writeln!(o, "- {}", d.statement)?;
        }
        writeln!(o)?;
    }

    o.push_str(&crate::review::render::markdown(s.review.as_ref()));
    writeln!(o, "## Failure taxonomy\n")?;
    writeln!(o, "Every attempt by class (retried outages included; discarded stale reports excluded).\n")?;
    let classes: std::collections::BTreeSet<&String> = s.attempts_by_class.values().flat_map(|m| m.keys()).collect();
    if classes.is_empty() {
        writeln!(o, "No attempt recorded yet.\n")?;
    } else {
        write!(o, "| arm |")?;
        for c in &classes {
            write!(o, " {c} |")?;
        }
        writeln!(o)?;
        write!(o, "|---|")?;
        for _ in &classes {
            write!(o, "---:|")?;
        }
        writeln!(o)?;
        for arm in &s.arms {
            write!(o, "| {} |", arm_display(&arm.id, arm.simulated))?;
            let m = s.attempts_by_class.get(&arm.id);
            for c in &classes {
                write!(o, " {} |", m.and_then(|m| m.get(*c)).copied().unwrap_or(0))?;
            }
            writeln!(o)?;
        }
        writeln!(o)?;
    }

    writeln!(o, "## Time and cost\n")?;
    writeln!(
        o,
        "Described, not ranked: wall time and cost depend on load, region and plan, and say nothing general about speed.\n"
    )?;
    writeln!(
        o,
        "Estimated cost is the price catalogue's estimate (token usage at the catalogue's prices), not a charge; \
         actual cost is what an adapter or the person reported as charged; credits, plan and region are as the \
         person reported them (manual runs). Each is kept apart; unknown stays unknown.\n"
    )?;
    writeln!(
        o,
        "| arm | runs timed | median | p90 | total | estimated cost (price catalogue) | actual cost | credits debited | plan | region |"
    )?;
    writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|")?;
    for arm in &s.arms {
        let t = &arm.time_cost;
        let ms = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.1} s", v as f64 / 1000.0));
        writeln!(
            o,
            "| {} | {} | {} | {} | {:.1} s | {} | {} | {} | {} | {} |",
            arm_display(&arm.id, arm.simulated),
            t.timed_runs,
            ms(t.median_duration_ms),
            ms(t.p90_duration_ms),
            t.total_duration_ms as f64 / 1000.0,
            t.estimated_text(),
            t.actual_text(),
            t.credits_text(),
            TimeCost::by_run_text(&t.plans),
            TimeCost::by_run_text(&t.regions)
        )?;
    }
    writeln!(o)?;

    if !s.notes.is_empty() {
        writeln!(o, "## Notes\n")?;
        for n in &s.notes {
            writeln!(o, "- {n}")?;
        }
        writeln!(o)?;
    }
    writeln!(o, "## Files\n")?;
    writeln!(
        o,
        "`summary.json` (these numbers, machine-readable; it lists every other file with its SHA-256), `runs.csv` (one row per planned run), \
         `claims.jsonl` (one line per claim), `judge_traces.jsonl` (seed-000 trace records), `judge_calls.jsonl` (each judge call's prompt and raw reply), `manifest.json` (the frozen manifest), \
         SVG plots and `index.html` (per-run drill-down). Check the numbers with `cohort verify` or, without cohort, \
         `python3 scripts/rederive_report.py <this folder>`."
    )?;
    Ok(())
}

fn method(o: &mut String, s: &Summary) -> std::fmt::Result {
    let m = &s.method;
    writeln!(o, "## How it was run\n")?;
    writeln!(
        o,
        "- Frozen: {} (seed {}, order `{}` sha256 `{}`, config sha256 `{}`)",
        m.frozen_at, m.seed, m.order_algorithm, m.order_sha256, m.config_sha256
    )?;
    writeln!(
        o,
        "- Collection window: {} h; opened {}, closes {}; first start {}, last end {}",
        m.window_hours,
        m.window_opened_at.as_deref().unwrap_or("not yet"),
        m.window_closes_at.as_deref().unwrap_or("-"),
        m.first_start_at.as_deref().unwrap_or("-"),
        m.last_end_at.as_deref().unwrap_or("-")
    )?;
    writeln!(
        o,
        "- Repeats: {}{}; per-run deadline {} s",
        m.repeats,
        m.repeat_schedule.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
        m.run_timeout_secs
    )?;
    writeln!(
        o,
        "- Retry policy (infrastructure outages only): at most {} attempts, backoff {}-{} ms, {} s in all",
        m.retry.max_attempts, m.retry.initial_backoff_ms, m.retry.max_backoff_ms, m.retry.max_total_secs
    )?;
    if let Some(a) = &m.aborted {
        writeln!(o, "- **Aborted**: {a}")?;
    }
    for a in &m.amendments {
        writeln!(o, "- Amendment: {a}")?;
    }
    writeln!(
        o,
        "- Frozen files: {}",
        m.files.iter().map(|(f, h)| format!("{f} `{h}`")).collect::<Vec<_>>().join(", ")
    )?;
    writeln!(
        o,
        "- metrics_version {}, bootstrap `{}`: {} draws over {} questions, seed {}, {}\n",
        s.metrics_version,
        s.bootstrap.algorithm,
        s.bootstrap.draws,
        s.bootstrap.clusters,
        s.bootstrap.seed,
        s.bootstrap.interval
    )?;

    writeln!(
        o,
        "| arm | product | adapter | workflow | pinned version | observed versions (runs) | lineage | controls not disabled |"
    )?;
    writeln!(o, "|---|---|---|---|---|---|---|---|")?;
    for a in &m.arms {
        let observed: Vec<String> = a.observed_versions.iter().map(|(v, n)| format!("{v} ({n})")).collect();
        writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            arm_display(&a.id, a.simulated),
            md_cell(&a.label),
            a.adapter,
            a.workflow,
            md_cell(&a.pinned_version),
            md_cell(&if observed.is_empty() { "none yet".to_owned() } else { observed.join(", ") }),
            md_cell(&a.vendor_lineage),
            md_cell(&if a.controls_not_disabled.is_empty() {
                "none recorded".to_owned()
            } else {
                a.controls_not_disabled.join(", ")
            })
        )?;
    }
    writeln!(o)?;
    for a in &m.arms {
        writeln!(o, "- `{}` settings: `{}`", a.id, a.settings)?;
    }
    writeln!(o)?;
    match &m.judge {
        None => writeln!(o, "- Judge: none frozen; support is unmeasured.\n")?,
        Some(j) => {
            let served: Vec<String> = j.served_models.iter().map(|(m, n)| format!("{m} ({n} claims)")).collect();
            writeln!(
                o,
                "- Judge{}: provider `{}`, model `{}` (pinned served model `{}`), lineage `{}`, temperature {}, batch {}; \
                 models that actually served: {}{}\n",
                if j.simulated { " (SIMULATED)" } else { "" },
                j.provider,
                j.model,
                j.pinned_served_model,
                j.vendor_lineage,
                j.temperature,
                j.batch_size,
                if served.is_empty() { "none (nothing judged)".to_owned() } else { served.join(", ") },
                j.lineage_waiver.as_deref().map(|w| format!("; lineage waiver: {w}")).unwrap_or_default()
            )?;
        }
    }
    writeln!(o, "- {}\n", m.verdict_source())?;
    writeln!(o, "<details><summary>Question hashes (SHA-256 of each question's text)</summary>\n")?;
    for (q, h) in &m.question_sha256 {
        writeln!(o, "- `{q}` `{h}`")?;
    }
    writeln!(o, "\n</details>\n")
}

fn publication(o: &mut String, p: &PublicationBlock) -> std::fmt::Result {
    writeln!(o, "## Publication\n")?;
    if p.internally_commissioned {
        writeln!(o, "**Internally commissioned benchmark.**\n")?;
    }
    let field = |v: &Option<String>| v.clone().unwrap_or_else(|| NOT_DECLARED.to_owned());
    writeln!(o, "- Commissioned by: {}", field(&p.commissioned_by))?;
    writeln!(o, "- Funding: {}", field(&p.funding))?;
    writeln!(o, "- Conflicts: {}", field(&p.conflicts))?;
    writeln!(o, "- Reviewers: {}", field(&p.reviewers))?;
    writeln!(o, "- Limitations: {}", field(&p.limitations))?;
    writeln!(o, "- Omissions from the public material: {}\n", field(&p.omissions))
}

fn workflows(s: &Summary) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in &s.arms {
        if !out.contains(&a.workflow) {
            out.push(a.workflow.clone());
        }
    }
    out
}

fn counts_row(o: &mut String, name: &str, c: &Counts) -> std::fmt::Result {
    writeln!(
        o,
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        c.planned,
        c.attempted,
        c.completed,
        c.refused,
        c.failed,
        c.timed_out,
        c.unavailable,
        c.not_run,
        c.pending,
        c.scored,
        c.judged_runs
    )
}

/// One row per ratio: its micro rate, and its macro rate when it has one.
fn rates_rows(o: &mut String, name: &str, r: &Rates) -> std::fmt::Result {
    for kind in RateKind::ALL.into_iter().filter(|k| k.pooling() == Pooling::Micro) {
        let micro = &r[kind];
        write!(
            o,
            "| {name} | {} | {} | {} | {} |",
            kind.measure_label(),
            micro.display_value(),
            micro.display_fraction(),
            micro.display_interval()
        )?;
        match kind.macro_kind() {
            Some(macro_kind) => {
                let m = &r[macro_kind];
                writeln!(
                    o,
                    " {} | {} ({}) | {} |",
                    m.display_value(),
                    m.display_fraction(),
                    m.questions.unwrap_or(0),
                    m.display_interval()
                )?;
            }
            None => writeln!(o, " | | |")?,
        }
    }
    Ok(())
}

/// Why a micro rate has no value, per arm (a macro rate's reason is its
/// micro rate's).
fn rate_reasons(o: &mut String, s: &Summary, workflow: &str) -> std::fmt::Result {
    let mut any = false;
    for arm in s.arms.iter().filter(|a| a.workflow == workflow) {
        for (kind, r) in arm.rates.iter().filter(|(k, _)| k.pooling() == Pooling::Micro) {
            if let Some(reason) = &r.reason {
                writeln!(o, "- {} {}: {} ({reason})", arm.id, kind.measure(), r.display_value())?;
                any = true;
            }
        }
    }
    if any {
        writeln!(o)?;
    }
    Ok(())
}

fn unjudged_text(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "0".to_owned();
    }
    m.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
}

/// A table cell: pipes and line breaks would break the row.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}
