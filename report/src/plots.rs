//! The report's SVG plots, drawn with plotters' SVG backend from a
//! [`Summary`] alone (so `cohort verify` and a reader get the same pictures
//! from the same numbers):
//!
//! - `rates.svg`: per arm, each measured rate with its 95% interval, one
//!   panel per rate kind. A rate that is not applicable or unmeasured is
//!   written as words on its row, never drawn as a point at 0.
//! - `failures.svg`: per arm, a stacked bar of final outcomes.
//! - `completions.svg`: cumulative completions per arm over the collection
//!   window.
//!
//! Every SVG carries the cohort, metrics_version and manifest hash in a
//! `<desc>` (every file of a report carries them). Text is laid out with
//! plotters' built-in size estimate (no `ttf` feature): the SVG backend
//! writes `<text>` elements that the viewer renders with its own fonts, so
//! loading system fonts would only slow the build and make it depend on the
//! machine.

use std::fmt::Display;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::model::{ArmSummary, Count, Counts, Fixed, Rate, RateKind, Reading, Summary};

/// File names of the plots, in the order [`render_plots`] returns them.
pub const RATES_SVG: &str = "rates.svg";
pub const FAILURES_SVG: &str = "failures.svg";
pub const COMPLETIONS_SVG: &str = "completions.svg";

const FONT: &str = "sans-serif";
const WIDTH: u32 = 960;
/// Pixels per arm row; enough for a 12 px label and an error bar.
const ROW: u32 = 28;
/// Labels longer than this are cut (the HTML tables carry the full names).
const MAX_LABEL: usize = 48;

/// A plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("could not draw {plot}: {detail} (a bug in the plot layout: report it with the summary.json)")]
    Draw { plot: &'static str, detail: String },
    #[error("{plot} is not a well-formed SVG document (a bug in the plot writer: report it with the summary.json)")]
    Malformed { plot: &'static str },
}

fn draw_error(plot: &'static str, error: impl Display) -> PlotError {
    PlotError::Draw { plot, detail: error.to_string() }
}

/// Renders `rates.svg`, `failures.svg` and `completions.svg`, as (file
/// name, SVG text).
pub fn render_plots(summary: &Summary) -> Result<Vec<(String, String)>, PlotError> {
    let arms = arms_by_workflow(summary);
    let labels: Vec<String> = arms.iter().map(|arm| arm_label(arm)).collect();
    let plots = [
        (RATES_SVG, "Rates per arm with 95% intervals", rates_svg(&arms, &labels)?),
        (FAILURES_SVG, "Final outcomes per arm", failures_svg(&arms, &labels)?),
        (COMPLETIONS_SVG, "Completions over the collection window", completions_svg(summary, &arms, &labels)?),
    ];
    plots
        .into_iter()
        .map(|(name, title, svg)| Ok((name.to_string(), with_provenance(name, summary, title, svg)?)))
        .collect()
}

/// The arms, those of one workflow next to each other (first appearance
/// order), so no plot interleaves workflows.
fn arms_by_workflow(summary: &Summary) -> Vec<&ArmSummary> {
    crate::html::by_workflow(&summary.arms).into_iter().flat_map(|(_, arms)| arms).collect()
}

/// `id · workflow`, with SIMULATED when the arm is the simulated system.
fn arm_label(arm: &ArmSummary) -> String {
    let mut label = format!("{} · {}", arm.id, arm.workflow);
    if label.chars().count() > MAX_LABEL {
        label = label.chars().take(MAX_LABEL - 1).collect();
        label.push('…');
    }
    if arm.simulated {
        label.push_str(" SIMULATED");
    }
    label
}

/// Okabe-Ito colours: distinguishable with the common colour-vision
/// deficiencies.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
];

fn arm_color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// The label column width for `labels`, from plotters' own text estimate
/// (about 0.6 em per character at 12 px).
fn label_width(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|label| label.chars().count()).max().unwrap_or(0) as u32;
    (longest * 7 + 16).clamp(80, 400)
}

/// Row `i` (0 = first arm) sits at `n - i - 0.5`, so the first arm is on
/// top; these are the y key points, one tick per row.
fn row_y(n: usize, i: usize) -> f64 {
    (n - i) as f64 - 0.5
}

/// The y axis of the per-arm charts: `n` rows over `0..n`, one tick (and
/// one label) at the centre of each row.
#[derive(Debug, Clone, Copy)]
struct Rows(usize);

impl Ranged for Rows {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.0.max(1) as f64;
        limit.0 + ((limit.1 - limit.0) as f64 * (value / span)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        // Every row is labelled, whatever the hint: a row without its arm's
        // name would be unreadable.
        (0..self.0).map(|i| row_y(self.0, i)).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0.max(1) as f64
    }
}

fn row_label(labels: &[String], y: f64) -> String {
    let n = labels.len();
    let from_top = n as f64 - y;
    if from_top < 0.0 {
        return String::new();
    }
    labels.get(from_top.floor() as usize).cloned().unwrap_or_default()
}

/// A panel of the rates plot: its title.
fn panel_title(kind: RateKind) -> String {
    format!("{}: {}", kind.label(), kind.estimand())
}

/// What to draw for one rate.
enum Mark {
    Interval { value: f64, low: f64, high: f64 },
    Point { value: f64 },
    Words(&'static str),
}

/// A rate's reading ([`Rate::reading`]) as a mark: words are written, not
/// drawn.
fn mark(rate: &Rate) -> Mark {
    match rate.reading() {
        Reading::Words(words) => Mark::Words(words),
        Reading::Value(value) => match (rate.ci_low, rate.ci_high) {
            (Some(low), Some(high)) if low.is_finite() && high.is_finite() => Mark::Interval { value, low, high },
            _ => Mark::Point { value },
        },
    }
}

fn rates_svg(arms: &[&ArmSummary], labels: &[String]) -> Result<String, PlotError> {
    const PLOT: &str = RATES_SVG;
    let n = arms.len().max(1);
    let kinds = RateKind::ALL;
    let panel_height = 70 + ROW * n as u32;
    let height = 40 + panel_height * kinds.len() as u32;
    let label_area = label_width(labels);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_error(PLOT, e))?;
        let root = root
            .titled("Rates per arm with 95% intervals (measured rates only)", (FONT, 18))
            .map_err(|e| draw_error(PLOT, e))?;
        let panels = root.split_evenly((kinds.len(), 1));
        let value_style = (FONT, 12).into_font().color(&BLACK);
        let words_style = (FONT, 12).into_font().color(&RGBColor(90, 90, 90));
        for (panel, kind) in panels.iter().zip(kinds) {
            // A proportion on [0, 1]; a mean count on [0, its largest
            // value or interval bound], rounded up.
            let top = if kind.is_proportion() {
                1.0
            } else {
                arms.iter()
                    .flat_map(|a| [a.rates[kind].value, a.rates[kind].ci_high])
                    .flatten()
                    .filter(|v| v.is_finite())
                    .fold(1.0f64, f64::max)
                    .ceil()
            };
            let mut chart = ChartBuilder::on(panel)
                .caption(panel_title(kind), (FONT, 14))
                .margin(6)
                .margin_right(24)
                .x_label_area_size(28)
                .y_label_area_size(label_area)
                .build_cartesian_2d(0f64..top, Rows(n))
                .map_err(|e| draw_error(PLOT, e))?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_labels(11)
                .light_line_style(WHITE)
                .x_label_formatter(&|x| format!("{x:.1}"))
                .y_label_formatter(&|y| row_label(labels, *y))
                .label_style((FONT, 12))
                .draw()
                .map_err(|e| draw_error(PLOT, e))?;
            if arms.is_empty() {
                chart
                    .draw_series(std::iter::once(Text::new(
                        "no arms",
                        (0.5 * top, 0.5),
                        words_style.clone().pos(Pos::new(HPos::Center, VPos::Center)),
                    )))
                    .map_err(|e| draw_error(PLOT, e))?;
            }
            for (i, arm) in arms.iter().enumerate() {
                let y = row_y(n, i);
                let rate = &arm.rates[kind];
                let color = arm_color(i);
                let (text, at, style) = match mark(rate) {
                    Mark::Interval { value, low, high } => {
                        chart
                            .draw_series(std::iter::once(ErrorBar::new_horizontal(
                                y,
                                low.clamp(0.0, top),
                                value.clamp(0.0, top),
                                high.clamp(0.0, top),
                                color.stroke_width(2),
                                10,
                            )))
                            .map_err(|e| draw_error(PLOT, e))?;
                        (value_text(value, rate), value, value_style.clone())
                    }
                    Mark::Point { value } => {
                        chart
                            .draw_series(std::iter::once(Circle::new((value.clamp(0.0, top), y), 4, color.filled())))
                            .map_err(|e| draw_error(PLOT, e))?;
                        (value_text(value, rate), value, value_style.clone())
                    }
                    Mark::Words(words) => (words.to_string(), 0.0, words_style.clone()),
                };
                // The figure sits just above its point, reading rightwards,
                // or leftwards near the right edge, so it never runs into
                // the arm labels or off the plot.
                let (x, pos) = if at <= 0.8 * top {
                    (at.max(0.0) + 0.01 * top, Pos::new(HPos::Left, VPos::Bottom))
                } else {
                    (at.min(top) - 0.01 * top, Pos::new(HPos::Right, VPos::Bottom))
                };
                chart
                    .draw_series(std::iter::once(Text::new(text, (x, y + 0.1), style.pos(pos))))
                    .map_err(|e| draw_error(PLOT, e))?;
            }
        }
        root.present().map_err(|e| draw_error(PLOT, e))?;
    }
    Ok(svg)
}

fn value_text(value: f64, rate: &Rate) -> String {
    format!("{} ({}/{})", Fixed(value), Count::short(rate.numerator), Count::short(rate.denominator))
}

/// An axis label: counts are whole numbers stored as f64.
fn trim_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{value:.0}") } else { format!("{value:.2}") }
}

/// The final outcomes in the order they are stacked, with their colours.
/// A segment of the outcome bars: its name, colour and count.
type Outcome = (&'static str, RGBColor, fn(&Counts) -> u64);

fn outcomes() -> [Outcome; 7] {
    [
        ("completed", RGBColor(0, 158, 115), |c| c.completed),
        ("refused", RGBColor(230, 159, 0), |c| c.refused),
        ("failed", RGBColor(213, 94, 0), |c| c.failed),
        ("timed_out", RGBColor(204, 121, 167), |c| c.timed_out),
        ("unavailable", RGBColor(86, 180, 233), |c| c.unavailable),
        ("not_run", RGBColor(153, 153, 153), |c| c.not_run),
        // Not a final outcome: shown so a bar of a running cohort still
        // adds up to its planned runs.
        ("pending", RGBColor(221, 221, 221), |c| c.pending),
    ]
}

/// Draws a legend of coloured squares in `area` (pixel coordinates).
fn legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    plot: &'static str,
    entries: &[(String, RGBColor)],
) -> Result<(), PlotError> {
    let style = (FONT, 12).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, color)) in entries.iter().enumerate() {
        let y = 50 + 20 * i as i32;
        area.draw(&Rectangle::new([(8, y - 6), (20, y + 6)], color.filled())).map_err(|e| draw_error(plot, e))?;
        area.draw(&Text::new(name.as_str(), (26, y), style.clone())).map_err(|e| draw_error(plot, e))?;
    }
    Ok(())
}

fn failures_svg(arms: &[&ArmSummary], labels: &[String]) -> Result<String, PlotError> {
    const PLOT: &str = FAILURES_SVG;
    let n = arms.len().max(1);
    // Tall enough for the seven legend entries.
    let height = (110 + ROW * n as u32).max(240);
    let most = arms.iter().map(|arm| arm.counts.planned.max(total(&arm.counts))).max().unwrap_or(0).max(1) as f64;
    let label_area = label_width(labels);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_error(PLOT, e))?;
        let root = root.titled("Final outcomes per arm (planned runs)", (FONT, 18)).map_err(|e| draw_error(PLOT, e))?;
        let (left, right) = root.split_horizontally(WIDTH - 150);
        // Room right of the longest bar for its "N planned" figure.
        let mut chart = ChartBuilder::on(&left)
            .margin(6)
            .margin_right(16)
            .x_label_area_size(40)
            .y_label_area_size(label_area)
            .build_cartesian_2d(0f64..most * 1.18, Rows(n))
            .map_err(|e| draw_error(PLOT, e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("runs")
            .light_line_style(WHITE)
            .x_label_formatter(&|x| trim_number(x.round()))
            .y_label_formatter(&|y| row_label(labels, *y))
            .label_style((FONT, 12))
            .draw()
            .map_err(|e| draw_error(PLOT, e))?;
        let text_style = (FONT, 12).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, arm) in arms.iter().enumerate() {
            let y = row_y(n, i);
            let mut start = 0f64;
            for (_, color, pick) in outcomes() {
                let count = pick(&arm.counts) as f64;
                if count > 0.0 {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(start, y - 0.35), (start + count, y + 0.35)],
                            color.filled(),
                        )))
                        .map_err(|e| draw_error(PLOT, e))?;
                }
                start += count;
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{} planned", arm.counts.planned),
                    (start + most * 0.01, y),
                    text_style.clone(),
                )))
                .map_err(|e| draw_error(PLOT, e))?;
        }
        let entries: Vec<(String, RGBColor)> =
            outcomes().iter().map(|(name, color, _)| (name.to_string(), *color)).collect();
        legend(&right, PLOT, &entries)?;
        root.present().map_err(|e| draw_error(PLOT, e))?;
    }
    Ok(svg)
}

fn total(counts: &Counts) -> u64 {
    outcomes().iter().map(|(_, _, pick)| pick(counts)).sum()
}

fn completions_svg(summary: &Summary, arms: &[&ArmSummary], labels: &[String]) -> Result<String, PlotError> {
    const PLOT: &str = COMPLETIONS_SVG;
    let series: Vec<(usize, Vec<(f64, f64)>)> = arms
        .iter()
        .enumerate()
        .filter_map(|(i, arm)| {
            let hours = summary.completions_by_hour.get(&arm.id)?;
            // Cumulative count at the end of each hour, from 0 at the opening.
            let mut points = Vec::with_capacity(hours.len() + 1);
            points.push((0.0, 0.0));
            let mut sum = 0u64;
            for (hour, count) in hours.iter().enumerate() {
                sum += count;
                points.push(((hour + 1) as f64, sum as f64));
            }
            Some((i, points))
        })
        .collect();
    let hours = series
        .iter()
        .map(|(_, points)| points.len() - 1)
        .max()
        .unwrap_or(0)
        .max(summary.method.window_hours as usize)
        .max(1) as f64;
    let most = series.iter().flat_map(|(_, points)| points.iter().map(|(_, y)| *y)).fold(0f64, f64::max).max(1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_error(PLOT, e))?;
        let root = root
            .titled("Completed runs over the collection window (cumulative)", (FONT, 18))
            .map_err(|e| draw_error(PLOT, e))?;
        let legend_width = label_width(labels).max(150) + 30;
        let (left, right) = root.split_horizontally(WIDTH.saturating_sub(legend_width).max(WIDTH / 2));
        let mut chart = ChartBuilder::on(&left)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..hours, 0f64..most * 1.05)
            .map_err(|e| draw_error(PLOT, e))?;
        chart
            .configure_mesh()
            .x_desc("hours since the window opened")
            .y_desc("completed runs")
            .light_line_style(WHITE)
            // Whole-number ticks: counts have no fractions.
            .y_labels((most as usize).clamp(1, 10) + 1)
            .x_label_formatter(&|x| trim_number(x.round()))
            .y_label_formatter(&|y| trim_number(y.round()))
            .label_style((FONT, 12))
            .draw()
            .map_err(|e| draw_error(PLOT, e))?;
        if series.is_empty() {
            chart
                .draw_series(std::iter::once(Text::new(
                    "no completions recorded",
                    (hours / 2.0, most / 2.0),
                    (FONT, 14).into_font().color(&RGBColor(90, 90, 90)).pos(Pos::new(HPos::Center, VPos::Center)),
                )))
                .map_err(|e| draw_error(PLOT, e))?;
        }
        for (i, points) in &series {
            chart
                .draw_series(LineSeries::new(points.iter().copied(), arm_color(*i).stroke_width(2)))
                .map_err(|e| draw_error(PLOT, e))?;
        }
        let entries: Vec<(String, RGBColor)> = arms
            .iter()
            .enumerate()
            .map(|(i, arm)| {
                let name = if summary.completions_by_hour.contains_key(&arm.id) {
                    labels[i].clone()
                } else {
                    format!("{} (no completions recorded)", labels[i])
                };
                (name, arm_color(i))
            })
            .collect();
        legend(&right, PLOT, &entries)?;
        root.present().map_err(|e| draw_error(PLOT, e))?;
    }
    Ok(svg)
}

/// Puts a `<title>` and a `<desc>` naming the cohort, metrics_version and
/// manifest hash right after the opening `<svg ...>` tag (plotters writes
/// no XML prologue and has no API for either).
fn with_provenance(plot: &'static str, summary: &Summary, title: &str, svg: String) -> Result<String, PlotError> {
    let open_end = match (svg.starts_with("<svg"), svg.find('>')) {
        (true, Some(end)) => end + 1,
        _ => return Err(PlotError::Malformed { plot }),
    };
    let mut out = String::with_capacity(svg.len() + 256);
    out.push_str(&svg[..open_end]);
    out.push_str("\n<title>");
    push_xml_escaped(&mut out, title);
    out.push_str("</title>\n<desc>");
    push_xml_escaped(
        &mut out,
        &format!(
            "cohort {}; metrics_version {}; manifest sha256 {}; {} {}",
            summary.cohort, summary.metrics_version, summary.manifest_sha256, summary.kind, summary.tool_version
        ),
    );
    out.push_str("</desc>");
    out.push_str(&svg[open_end..]);
    Ok(out)
}

fn push_xml_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html::testing::fixture;

    /// A minimal well-formedness check: one root `<svg>` element, every
    /// start tag closed in order, nothing after the root.
    fn check_balanced(svg: &str) -> Result<(), String> {
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg.trim();
        if !(rest.starts_with("<svg") || rest.starts_with("<?xml")) {
            return Err("does not start with <svg or <?xml".into());
        }
        let mut closed_root = false;
        while let Some(start) = rest.find('<') {
            if closed_root && !rest[..start].trim().is_empty() {
                return Err("text after the root element".into());
            }
            let after = &rest[start..];
            if let Some(body) = after.strip_prefix("<?") {
                rest = &body[body.find("?>").ok_or("unclosed prologue")? + 2..];
                continue;
            }
            if let Some(body) = after.strip_prefix("<!--") {
                rest = &body[body.find("-->").ok_or("unclosed comment")? + 3..];
                continue;
            }
            let end = after.find('>').ok_or("unclosed tag")?;
            let tag = &after[1..end];
            if tag.contains('<') {
                return Err(format!("'<' inside a tag: {tag}"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or_else(|| format!("</{name}> without a start tag"))?;
                if open != name.trim() {
                    return Err(format!("</{name}> closes <{open}>"));
                }
                if stack.is_empty() {
                    closed_root = true;
                }
            } else if !tag.ends_with('/') {
                if closed_root {
                    return Err("a second root element".into());
                }
                stack.push(tag.split_whitespace().next().ok_or("empty tag")?);
            }
            rest = &after[end + 1..];
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if !closed_root {
            return Err("no root element".into());
        }
        Ok(())
    }

    /// The checker itself rejects what it must (a check that cannot fail
    /// is not a check).
    #[test]
    fn balance_check_rejects_broken_documents() {
        assert!(check_balanced("<svg><g></g></svg>").is_ok());
        assert!(check_balanced("<svg><g></svg>").is_err());
        assert!(check_balanced("<svg><g>").is_err());
        assert!(check_balanced("<html></html>").is_err());
        assert!(check_balanced("<svg></svg><svg></svg>").is_err());
    }

    /// The three plots come out, well formed, naming every arm (SIMULATED
    /// on the simulated one) and carrying metrics_version and the manifest
    /// hash.
    #[test]
    fn plots_are_well_formed_and_name_every_arm() {
        let (summary, _, _) = fixture();
        let plots = render_plots(&summary).unwrap();
        let names: Vec<&str> = plots.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, [RATES_SVG, FAILURES_SVG, COMPLETIONS_SVG]);
        for (name, svg) in &plots {
            check_balanced(svg).unwrap_or_else(|e| panic!("{name}: {e}\n{svg}"));
            for arm in &summary.arms {
                assert!(svg.contains(&arm.id), "{name} does not name arm {}", arm.id);
            }
            assert!(svg.contains("SIMULATED"), "{name} does not label the simulated arm");
            let desc =
                format!("metrics_version {}; manifest sha256 {}", summary.metrics_version, summary.manifest_sha256);
            assert!(svg.contains(&desc), "{name} lacks its provenance");
            assert!(!svg.contains("<script"), "{name} has a script");
        }
    }

    /// Not applicable and unmeasured rates are written as words, and no
    /// point is drawn for them: the fixture has exactly as many interval
    /// marks as measured rates with intervals.
    #[test]
    fn rates_plot_draws_only_measured_rates() {
        let (summary, _, _) = fixture();
        let plots = render_plots(&summary).unwrap();
        let rates = &plots[0].1;
        assert!(rates.contains("not applicable"));
        assert!(rates.contains("n/a (unmeasured)"));
        let measured = summary
            .arms
            .iter()
            .flat_map(|arm| arm.rates.iter().map(|(_, rate)| rate.clone()))
            .filter(|rate| matches!(mark(rate), Mark::Interval { .. }))
            .count();
        let figures = summary
            .arms
            .iter()
            .flat_map(|arm| arm.rates.iter().map(|(_, rate)| rate.clone()))
            .filter_map(|rate| match mark(&rate) {
                Mark::Interval { value, .. } => Some(value_text(value, &rate)),
                _ => None,
            })
            .filter(|text| rates.contains(text.as_str()))
            .count();
        assert!(measured > 0);
        assert_eq!(figures, measured, "every measured rate is labelled with its value and denominator");
    }

    /// Hostile arm names come out escaped, and an empty summary still draws.
    #[test]
    fn hostile_names_are_escaped_and_empty_summaries_draw() {
        let (mut summary, _, _) = fixture();
        summary.arms[0].id = "<script>alert(1)</script>".into();
        summary.cohort = "a&b <x>".into();
        for (name, svg) in render_plots(&summary).unwrap() {
            assert!(!svg.contains("<script>"), "{name}");
            check_balanced(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        summary.arms.clear();
        summary.completions_by_hour.clear();
        for (name, svg) in render_plots(&summary).unwrap() {
            check_balanced(&svg).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
