//! `index.html`: the report as one self-contained page, with a drill-down
//! per run (SPEC section 9).
//!
//! The page fetches nothing: CSS and the one small script are inline, the
//! plots are inline SVG, and a `Content-Security-Policy` meta forbids every
//! other source, so a stray reference could not load even if one slipped
//! in. Drill-downs are `<details>` elements, so the page works with scripts
//! off; the script only adds filtering and sorting of the runs table.
//!
//! Everything that comes from a record (outputs, prompts, claims, judge
//! lines, URLs, titles, even arm and run ids) is untrusted text: it is
//! HTML-escaped on the way in, never inserted as markup. URLs are shown as
//! text, and only `http(s)` ones become links (`rel="noreferrer noopener"`;
//! a link is not a fetch).
//!
//! The runs table can have 100,000 rows and the drill-downs are a hundred
//! megabytes or more, so the page is written with `std::fmt::Write` into a
//! `String` and escaping writes straight into it instead of building
//! strings per cell; [`render_html_into`] hands that buffer to the file
//! every [`SPILL_BYTES`] (so the page is never held whole: a 5,000,000-claim
//! report's page is about 190 MB), and [`render_html`] keeps it whole for
//! callers that want the text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display, Write};

use crate::model::{
    ArmSummary, Comparison, Counts, Difference, DrillDown, Rate, RateKind, RateStatus, Rates, RunView, SourceCounts,
    Summary, TimeCost,
};

/// How much of the page [`render_html_into`] buffers before it writes it
/// out: large enough that writes are few, small enough to be nothing
/// beside the report's other memory.
pub const SPILL_BYTES: usize = 1 << 20;

/// Renders the page. `plots` are (file name, SVG text) as
/// [`crate::plots::render_plots`] returns them; they are inlined.
pub fn render_html(
    summary: &Summary,
    runs: &[RunView],
    drill: &BTreeMap<String, DrillDown>,
    plots: &[(String, String)],
) -> String {
    // About 320 bytes per run row (measured), a margin, a few kB per drill-down, the plots.
    let capacity = 64 * 1024
        + runs.len() * 400
        + drill.values().map(|d| 4096 + d.output.as_ref().map_or(0, String::len) * 2).sum::<usize>()
        + plots.iter().map(|(_, svg)| svg.len()).sum::<usize>();
    let mut page = Page::new(String::with_capacity(capacity), summary, None);
    // Writing into a String cannot fail: fmt::Error only comes from a
    // Display impl, and ours only forward the String's own results.
    let _ = page.document(runs, drill, plots);
    page.out
}

/// Renders the page into `out` as [`render_html`] does, byte for byte the
/// same, written out every [`SPILL_BYTES`] instead of held whole.
pub fn render_html_into(
    out: &mut dyn std::io::Write,
    summary: &Summary,
    runs: &[RunView],
    drill: &BTreeMap<String, DrillDown>,
    plots: &[(String, String)],
) -> std::io::Result<()> {
    let mut page = Page::new(String::with_capacity(2 * SPILL_BYTES), summary, Some(out));
    let rendered = page.document(runs, drill, plots).and_then(|()| page.spill(0));
    match (rendered, page.sink_error.take()) {
        (_, Some(e)) => Err(e),
        // Only a failed write makes a fmt::Error here (see render_html).
        (Err(fmt::Error), None) => Err(std::io::Error::other("the page could not be rendered")),
        (Ok(()), None) => Ok(()),
    }
}

/// Arms labelled SIMULATED wherever their name appears.
fn simulated_arms(summary: &Summary) -> BTreeSet<String> {
    let mut arms: BTreeSet<String> = summary.simulated.arms.iter().cloned().collect();
    arms.extend(summary.arms.iter().filter(|arm| arm.simulated).map(|arm| arm.id.clone()));
    arms.extend(summary.method.arms.iter().filter(|arm| arm.simulated).map(|arm| arm.id.clone()));
    arms
}

// === escaping and formatting helpers ===

/// HTML-escapes text for element content and quoted attribute values.
pub(crate) struct Esc<'a>(pub(crate) &'a str);

impl Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        let mut start = 0;
        for (i, c) in text.char_indices() {
            let entity = match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&#39;",
                _ => continue,
            };
            f.write_str(&text[start..i])?;
            f.write_str(entity)?;
            start = i + c.len_utf8();
        }
        f.write_str(&text[start..])
    }
}

/// A run id made safe for an `id` attribute and a URL fragment: ASCII
/// letters, digits and `-` pass; every other byte becomes `_xx` (hex), `_`
/// included, so two different run ids never share an element id.
struct IdSafe<'a>(&'a str);

impl Display for IdSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.bytes() {
            if byte.is_ascii_alphanumeric() || byte == b'-' {
                f.write_char(char::from(byte))?;
            } else {
                write!(f, "_{byte:02x}")?;
            }
        }
        Ok(())
    }
}

/// Milliseconds as a duration a person reads.
struct Millis(i64);

impl Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        if ms.abs() < 1_000 {
            write!(f, "{ms} ms")
        } else if ms.abs() < 60_000 {
            write!(f, "{:.1} s", ms as f64 / 1000.0)
        } else {
            let secs = ms / 1000;
            let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
            if h > 0 { write!(f, "{h} h {m} min {s} s") } else { write!(f, "{m} min {s} s") }
        }
    }
}

/// An optional text, or the given words in grey.
struct OrWords<'a>(Option<&'a str>, &'a str);

impl Display for OrWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) if !text.trim().is_empty() => Esc(text).fmt(f),
            _ => write!(f, "<span class=\"nd\">{}</span>", Esc(self.1)),
        }
    }
}

fn is_http_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://")) && !url.chars().any(char::is_whitespace)
}

/// The outcome's CSS class, for known outcomes only (outcomes are text from
/// the ledger: they do not become class names).
fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "completed" => "o-completed",
        "refused" => "o-refused",
        "failed" => "o-failed",
        "timed_out" => "o-timed_out",
        "unavailable" => "o-unavailable",
        "not_run" => "o-not_run",
        "pending" => "o-pending",
        _ => "",
    }
}

fn verdict_class(verdict: &str) -> &'static str {
    match verdict {
        "YES" => "v-yes",
        "NO" => "v-no",
        _ => "v-other",
    }
}

/// Workflows in order of first appearance, each with its arms.
pub(crate) fn by_workflow(arms: &[ArmSummary]) -> Vec<(&str, Vec<&ArmSummary>)> {
    let mut groups: Vec<(&str, Vec<&ArmSummary>)> = Vec::new();
    for arm in arms {
        match groups.iter_mut().find(|(workflow, _)| *workflow == arm.workflow) {
            Some((_, members)) => members.push(arm),
            None => groups.push((&arm.workflow, vec![arm])),
        }
    }
    groups
}

/// A column of the counts tables: its header and its field.
type CountColumn = (&'static str, fn(&Counts) -> u64);

const COUNT_COLUMNS: [CountColumn; 11] = [
    ("planned", |c| c.planned),
    ("attempted", |c| c.attempted),
    ("completed", |c| c.completed),
    ("refused", |c| c.refused),
    ("failed", |c| c.failed),
    ("timed_out", |c| c.timed_out),
    ("unavailable", |c| c.unavailable),
    ("not_run", |c| c.not_run),
    ("pending", |c| c.pending),
    ("scored", |c| c.scored),
    ("judged_runs", |c| c.judged_runs),
];

const SECTIONS: [(&str, &str); 13] = [
    ("headline", "Headline"),
    ("method", "Method"),
    ("publication", "Publication"),
    ("arms", "Arms"),
    ("categories", "Per category"),
    ("comparisons", "Comparisons"),
    ("failures", "Failure taxonomy"),
    ("time-cost", "Time and cost"),
    ("plots", "Plots"),
    ("notes", "Notes"),
    ("runs", "Runs"),
    ("drill-downs", "Drill-downs"),
    ("files", "Files"),
];

const STYLE: &str = r#"
:root{--fg:#1b1b1b;--muted:#5f6368;--line:#d9d9d9;--head:#f3f4f6;--sim:#a4161a;--link:#0b57d0}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:16px 20px 64px}
h1{font-size:1.6em;margin:.4em 0 .2em}
h2{font-size:1.3em;margin:1.8em 0 .5em;padding-bottom:.2em;border-bottom:2px solid var(--line)}
h3{font-size:1.1em;margin:1.3em 0 .4em}
h4{font-size:1em;margin:1em 0 .3em}
a{color:var(--link)}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,"Liberation Mono",monospace;font-size:.9em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f7f8;border:1px solid var(--line);padding:8px 10px;margin:.3em 0;max-height:32em;overflow:auto}
.hash{overflow-wrap:anywhere}
.sim{display:inline-block;background:var(--sim);color:#fff;font-weight:700;font-size:.75em;letter-spacing:.04em;padding:0 .4em;border-radius:3px;vertical-align:middle}
table.headline th{font-size:.85em}
.state{font-weight:700;padding:10px 14px;margin:10px 0;border-radius:4px;border:2px solid}
.state.preliminary{background:#fff4e0;border-color:#b45f06;color:#7a3e00}
.state.final{background:#e6f4ea;border-color:#1e7d32;color:#145a24}
.banner{background:#fde8e8;border:2px solid var(--sim);color:var(--sim);font-weight:700;padding:10px 14px;margin:10px 0;border-radius:4px}
.meta{color:var(--muted);margin:0}
nav.toc{background:var(--head);border:1px solid var(--line);padding:8px 14px;margin:14px 0;border-radius:4px}
nav.toc ol{margin:0;padding-left:1.3em;columns:3 14em}
.scroll{overflow-x:auto;margin:.4em 0 1em}
table{border-collapse:collapse;font-size:.92em}
th,td{border:1px solid var(--line);padding:4px 8px;vertical-align:top;text-align:left}
thead th{background:var(--head);position:sticky;top:0}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.rate{white-space:normal;min-width:8.5em}
td.rate .v{display:block;font-weight:600;white-space:nowrap}
td.rate .den,td.rate .ci,td.rate .why{display:block;color:var(--muted);font-size:.88em}
td.rate .den,td.rate .ci{white-space:nowrap}
td.rate .why{max-width:16em;margin-left:auto}
td.na,td.unm{color:var(--muted);font-style:italic}
.nd{color:var(--muted);font-style:italic}
dl.kv{display:grid;grid-template-columns:minmax(10em,max-content) 1fr;gap:2px 14px;margin:.4em 0}
dl.kv dt{color:var(--muted)}
dl.kv dd{margin:0;overflow-wrap:anywhere}
ul.plain{margin:.2em 0;padding-left:1.2em}
.statement{font-style:italic}
figure{margin:1em 0}
figure svg{max-width:100%;height:auto;border:1px solid var(--line)}
figcaption{color:var(--muted);font-size:.9em}
.o-completed{color:#0a6b47}.o-refused{color:#8a5a00}.o-failed,.o-timed_out,.o-unavailable{color:#a4161a}.o-not_run,.o-pending{color:var(--muted)}
.v-yes{color:#0a6b47;font-weight:700}.v-no{color:#a4161a;font-weight:700}.v-other{color:var(--muted)}
details.drill{border:1px solid var(--line);border-radius:4px;margin:6px 0;padding:0 10px}
details.drill>summary{cursor:pointer;padding:6px 0}
details.drill[open]>summary{border-bottom:1px solid var(--line);margin-bottom:6px}
details.drill:target{outline:2px solid var(--link)}
ol.claims>li{margin:.6em 0}
.evidence{border-left:3px solid var(--line);padding-left:10px;margin:.3em 0}
blockquote{margin:.3em 0;padding:4px 10px;background:#f7f7f8;white-space:pre-wrap;overflow-wrap:anywhere}
#run-filter{width:100%;max-width:32em;padding:6px 8px;margin:.3em 0;font:inherit}
th.sortable{cursor:pointer}
th[aria-sort=ascending]::after{content:" \25B2"}th[aria-sort=descending]::after{content:" \25BC"}
@media (max-width:700px){main{padding:10px}body{font-size:14px}dl.kv{grid-template-columns:1fr}dl.kv dd{margin-bottom:6px}th,td{padding:3px 5px}}
"#;

/// Opens a drill-down named by the URL fragment; filters and sorts the
/// runs table. Everything works without it except filtering and sorting.
const SCRIPT: &str = r#"
(function(){
  function openTarget(){
    var id=location.hash.slice(1); if(!id)return;
    var el=document.getElementById(id);
    if(el&&el.tagName==='DETAILS'){el.open=true;el.scrollIntoView();}
  }
  window.addEventListener('hashchange',openTarget); openTarget();
  var table=document.getElementById('runs-table'); if(!table||!table.tBodies.length)return;
  var body=table.tBodies[0];
  var input=document.createElement('input');
  input.type='search'; input.id='run-filter';
  input.placeholder='Filter runs by any text (run, question, arm, outcome, version)';
  input.setAttribute('aria-label','Filter runs');
  table.parentNode.parentNode.insertBefore(input,table.parentNode);
  var timer;
  input.addEventListener('input',function(){
    clearTimeout(timer);
    timer=setTimeout(function(){
      var q=input.value.toLowerCase(),rows=body.rows;
      for(var i=0;i<rows.length;i++){rows[i].hidden=q!==''&&rows[i].textContent.toLowerCase().indexOf(q)<0;}
    },150);
  });
  var heads=table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads,function(th,col){
    th.classList.add('sortable'); th.title='Sort';
    th.addEventListener('click',function(){
      var numeric=th.classList.contains('num'),asc=th.getAttribute('aria-sort')!=='ascending';
      Array.prototype.forEach.call(heads,function(h){h.removeAttribute('aria-sort');});
      th.setAttribute('aria-sort',asc?'ascending':'descending');
      var rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=a.cells[col].textContent,y=b.cells[col].textContent,d;
        if(numeric){x=parseFloat(x);y=parseFloat(y);d=(isNaN(x)?-1:x)-(isNaN(y)?-1:y);}
        else{d=x<y?-1:x>y?1:0;}
        return asc?d:-d;
      });
      var frag=document.createDocumentFragment();
      rows.forEach(function(r){frag.appendChild(r);});
      body.appendChild(frag);
    });
  });
})();
"#;

// === the page ===

struct Page<'a> {
    out: String,
    summary: &'a Summary,
    simulated: BTreeSet<String>,
    /// Where `out` is written out as it fills ([`render_html_into`]);
    /// `None`: the page stays whole in `out`.
    sink: Option<&'a mut dyn std::io::Write>,
    /// The sink's error, when a write failed (the rendering then stops
    /// with `fmt::Error`).
    sink_error: Option<std::io::Error>,
}

impl<'a> Page<'a> {
    fn new(out: String, summary: &'a Summary, sink: Option<&'a mut dyn std::io::Write>) -> Page<'a> {
        Page { out, summary, simulated: simulated_arms(summary), sink, sink_error: None }
    }

    /// Writes the buffered page out to the sink once it holds `at_least`
    /// bytes (0: whatever it holds); nothing without a sink.
    fn spill(&mut self, at_least: usize) -> fmt::Result {
        let Some(sink) = self.sink.as_mut() else { return Ok(()) };
        if self.out.len() < at_least.max(1) {
            return Ok(());
        }
        if let Err(e) = sink.write_all(self.out.as_bytes()) {
            self.sink_error = Some(e);
            return Err(fmt::Error);
        }
        self.out.clear();
        Ok(())
    }
    fn document(
        &mut self,
        runs: &[RunView],
        drill: &BTreeMap<String, DrillDown>,
        plots: &[(String, String)],
    ) -> fmt::Result {
        self.head()?;
        // The state (in the header), the headline rates and the paired
        // comparisons come first; the method block follows, complete.
        self.headline()?;
        self.contents()?;
        self.method()?;
        self.publication()?;
        self.arms()?;
        self.categories()?;
        self.comparisons()?;
        self.out.push_str(&crate::review::render::html(self.summary.review.as_ref()));
        self.failures()?;
        self.time_cost()?;
        self.plots(plots)?;
        self.notes()?;
        self.runs(runs, drill)?;
        self.drill_downs(runs, drill)?;
        self.files()?;
        write!(self.out, "</main>\n<script>{SCRIPT}</script>\n</body>\n</html>\n")
    }

    /// An arm's name as every table shows it: with SIMULATED when it is.
    fn arm(&mut self, id: &str) -> fmt::Result {
        write_arm(&mut self.out, id, self.simulated.contains(id))
    }

    fn head(&mut self) -> fmt::Result {
        let s = self.summary;
        // The first line says whether the report is final (a comment before
        // the doctype does not change the parsing mode).
        let state_line = match &s.redaction {
            Some(redaction) => format!("{redaction} · {}", s.publication_state.line()),
            None => s.publication_state.line(),
        };
        let state_line = state_line.replace("--", "- -").replace(['<', '>'], " ");
        writeln!(self.out, "<!-- {state_line} -->")?;
        write!(
            self.out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
             script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'\">\n\
             <meta http-equiv=\"x-dns-prefetch-control\" content=\"off\">\n\
             <meta name=\"referrer\" content=\"no-referrer\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"generator\" content=\"{} {}\">\n\
             <meta name=\"cohort-metrics-version\" content=\"{}\">\n\
             <meta name=\"cohort-manifest-sha256\" content=\"{}\">\n\
             <title>cohort report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
            Esc(&s.kind),
            Esc(&s.tool_version),
            s.metrics_version,
            Esc(&s.manifest_sha256),
            Esc(&s.cohort)
        )?;
        self.out.push_str("<header>\n");
        self.publication_state()?;
        write!(self.out, "<h1>cohort report: {}", Esc(&s.cohort))?;
        let simulated = !s.simulated.arms.is_empty() || s.simulated.judge || !self.simulated.is_empty();
        if simulated {
            self.out.push_str(" <span class=\"sim\">SIMULATED</span>");
        }
        self.out.push_str("</h1>\n");
        if simulated {
            self.out.push_str(
                "<p class=\"banner\" id=\"simulated\">SIMULATED: this report includes output from cohort's built-in \
                 simulated ",
            );
            let mut parts = Vec::new();
            if !self.simulated.is_empty() {
                parts.push("system");
            }
            if s.simulated.judge {
                parts.push("judge");
            }
            self.out.push_str(&parts.join(" and "));
            self.out.push_str(". Its numbers describe the simulation, not any real product.");
            if !self.simulated.is_empty() {
                self.out.push_str(" Simulated arms: ");
                let arms: Vec<String> = self.simulated.iter().cloned().collect();
                for (i, arm) in arms.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    write!(self.out, "<code>{}</code>", Esc(arm))?;
                }
                self.out.push('.');
            }
            self.out.push_str("</p>\n");
        }
        write!(
            self.out,
            "<p class=\"meta\">Generated {} by {} {} · metrics_version {} · report format {} · manifest SHA-256 \
             <code class=\"hash\">{}</code></p>\n</header>\n",
            Esc(&s.generated_at),
            Esc(&s.kind),
            Esc(&s.tool_version),
            s.metrics_version,
            s.report_format,
            Esc(&s.manifest_sha256)
        )?;
        Ok(())
    }

    fn contents(&mut self) -> fmt::Result {
        self.out.push_str("<nav class=\"toc\" aria-label=\"Contents\"><strong>Contents</strong>\n<ol>\n");
        for (id, title) in SECTIONS {
            writeln!(self.out, "<li><a href=\"#{id}\">{title}</a></li>")?;
        }
        self.out.push_str("</ol>\n</nav>\n");
        Ok(())
    }

    /// What a reader looks for first: per arm, every micro rate with its
    /// fraction and interval (macro rates, categories and counts are in
    /// "Arms" below), and every paired comparison as its statement.
    fn headline(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str(
            "<section id=\"headline\">\n<h2>Headline</h2>\n<p>The compared micro rates: value, <em>numerator / denominator</em>, \
             95% cluster-bootstrap interval. Arms of different workflows are never compared.</p>\n",
        );
        // The headline: the compared micro rates (the descriptive ones, such
        // as the source figures, follow in the per-arm tables).
        let headline_kinds: Vec<RateKind> = RateKind::ALL
            .into_iter()
            .filter(|k| k.pooling() == crate::rates::Pooling::Micro && k.comparison().is_some())
            .collect();
        for (workflow, arms) in by_workflow(&s.arms) {
            write!(
                self.out,
                "<h3>Workflow <code>{}</code></h3>\n<div class=\"scroll\"><table class=\"rates headline\">\n\
                 <thead><tr><th>arm</th>",
                Esc(workflow)
            )?;
            for kind in &headline_kinds {
                // The ratio's name: every headline rate is the micro one.
                write!(self.out, "<th class=\"num\">{}</th>", kind.measure())?;
            }
            self.out.push_str("</tr></thead>\n<tbody>\n");
            for arm in &arms {
                write!(self.out, "<tr data-headline-arm=\"{}\"><td>", Esc(&arm.id))?;
                self.arm(&arm.id)?;
                self.out.push_str("</td>");
                for kind in &headline_kinds {
                    self.rate_cell(&arm.rates[*kind])?;
                }
                self.out.push_str("</tr>\n");
            }
            self.out.push_str("</tbody></table></div>\n");
            let compared: Vec<&Comparison> = s.comparisons.iter().filter(|c| c.workflow == workflow).collect();
            if !compared.is_empty() {
                self.out.push_str("<ul class=\"statements\">\n");
                for c in compared {
                    for (_, d) in c.differences.iter() {
                        write!(self.out, "<li>{}", Esc(&d.statement))?;
                        writeln!(
                            self.out,
                            " <span class=\"why\">({} of {} questions completed by both)</span></li>",
                            c.completed_pairs, c.questions
                        )?;
                    }
                }
                self.out.push_str("</ul>\n");
            }
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    /// The publication state, first on the page: final, or preliminary
    /// with what is missing.
    fn publication_state(&mut self) -> fmt::Result {
        if let Some(redaction) = &self.summary.redaction {
            writeln!(
                self.out,
                "<p class=\"state preliminary\" id=\"redaction\"><strong>{}</strong></p>",
                Esc(redaction)
            )?;
        }
        let p = &self.summary.publication_state;
        if p.is_final() {
            writeln!(self.out, "<p class=\"state final\" id=\"publication-state\">{}</p>", Esc(&p.line()))
        } else {
            write!(
                self.out,
                "<p class=\"state preliminary\" id=\"publication-state\"><strong>Preliminary</strong>: not for \
                 publication as final results. Missing: "
            )?;
            for (i, m) in p.missing.iter().enumerate() {
                if i > 0 {
                    self.out.push_str("; ");
                }
                write!(self.out, "{}", Esc(m))?;
            }
            self.out.push_str(".</p>\n");
            Ok(())
        }
    }

    fn kv(&mut self, key: &str, value: impl Display) -> fmt::Result {
        writeln!(self.out, "<dt>{}</dt><dd>{value}</dd>", Esc(key))
    }

    fn method(&mut self) -> fmt::Result {
        let s = self.summary;
        let m = &s.method;
        self.out.push_str("<section id=\"method\">\n<h2>Method</h2>\n<dl class=\"kv\">\n");
        self.kv("cohort", Esc(&s.cohort))?;
        self.kv("frozen at", Esc(&m.frozen_at))?;
        self.kv("metrics_version", s.metrics_version)?;
        self.kv("tool version", format_args!("{} {}", Esc(&s.kind), Esc(&s.tool_version)))?;
        self.kv("manifest SHA-256", format_args!("<code class=\"hash\">{}</code>", Esc(&s.manifest_sha256)))?;
        self.kv("config SHA-256", format_args!("<code class=\"hash\">{}</code>", Esc(&m.config_sha256)))?;
        self.kv(
            "run order",
            format_args!(
                "{}, seed {}, order SHA-256 <code class=\"hash\">{}</code>",
                Esc(&m.order_algorithm),
                m.seed,
                Esc(&m.order_sha256)
            ),
        )?;
        self.kv("collection window", format_args!("{} hours", m.window_hours))?;
        self.kv("window opened", OrWords(m.window_opened_at.as_deref(), "not recorded"))?;
        self.kv("window closes", OrWords(m.window_closes_at.as_deref(), "not recorded"))?;
        self.kv("first run started", OrWords(m.first_start_at.as_deref(), "no run started"))?;
        self.kv("last run ended", OrWords(m.last_end_at.as_deref(), "no run ended"))?;
        self.kv(
            "repeats",
            format_args!(
                "{} per question and arm{}",
                m.repeats,
                match &m.repeat_schedule {
                    Some(schedule) => format!(", schedule {}", Esc(schedule)),
                    None => String::new(),
                }
            ),
        )?;
        self.kv("run timeout", Millis(i64::try_from(m.run_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX)))?;
        self.kv(
            "retry policy",
            format_args!(
                "at most {} attempts per run; backoff from {} to {}; at most {} per run in all",
                m.retry.max_attempts,
                Millis(i64::try_from(m.retry.initial_backoff_ms).unwrap_or(i64::MAX)),
                Millis(i64::try_from(m.retry.max_backoff_ms).unwrap_or(i64::MAX)),
                Millis(i64::try_from(m.retry.max_total_secs.saturating_mul(1000)).unwrap_or(i64::MAX))
            ),
        )?;
        let b = &s.bootstrap;
        self.kv(
            "intervals",
            format_args!(
                "{}: {}, {} draws, seed {}, {} clusters (questions)",
                Esc(&b.interval),
                Esc(&b.algorithm),
                b.draws,
                b.seed,
                b.clusters
            ),
        )?;
        self.kv("aborted", OrWords(m.aborted.as_deref(), "no"))?;
        self.out.push_str("<dt>amendments</dt><dd>");
        if m.amendments.is_empty() {
            self.out.push_str("<span class=\"nd\">none</span>");
        } else {
            self.out.push_str("<ul class=\"plain\">");
            for amendment in &m.amendments {
                write!(self.out, "<li>{}</li>", Esc(amendment))?;
            }
            self.out.push_str("</ul>");
        }
        self.out.push_str("</dd>\n</dl>\n");

        // Question hashes and frozen files: long lists, collapsed.
        write!(
            self.out,
            "<details id=\"question-hashes\"><summary>{} questions: SHA-256 of each question's text</summary>\n\
             <div class=\"scroll\"><table><thead><tr><th>question</th><th>SHA-256</th></tr></thead><tbody>\n",
            m.question_sha256.len().max(s.questions.len())
        )?;
        let mut listed = BTreeSet::new();
        for question in &s.questions {
            listed.insert(question.as_str());
            let hash = m.question_sha256.get(question).map(String::as_str);
            writeln!(
                self.out,
                "<tr><td><code>{}</code></td><td><code class=\"hash\">{}</code></td></tr>",
                Esc(question),
                OrWords(hash, "not recorded")
            )?;
        }
        for (question, hash) in &m.question_sha256 {
            if !listed.contains(question.as_str()) {
                writeln!(
                    self.out,
                    "<tr><td><code>{}</code></td><td><code class=\"hash\">{}</code></td></tr>",
                    Esc(question),
                    Esc(hash)
                )?;
            }
        }
        self.out.push_str("</tbody></table></div>\n</details>\n");
        write!(
            self.out,
            "<details id=\"frozen-files\"><summary>{} frozen files and their SHA-256</summary>\n\
             <div class=\"scroll\"><table><thead><tr><th>file</th><th>SHA-256</th></tr></thead><tbody>\n",
            m.files.len()
        )?;
        for (file, hash) in &m.files {
            writeln!(
                self.out,
                "<tr><td><code>{}</code></td><td><code class=\"hash\">{}</code></td></tr>",
                Esc(file),
                Esc(hash)
            )?;
        }
        self.out.push_str("</tbody></table></div>\n</details>\n");

        self.out.push_str(
            "<h3 id=\"method-arms\">Arms as frozen and as observed</h3>\n<div class=\"scroll\"><table>\n\
             <thead><tr><th>arm</th><th>product</th><th>adapter</th><th>workflow</th><th>vendor lineage</th>\
             <th>pinned version</th><th>observed versions (runs)</th><th>settings</th>\
             <th>controls not disabled</th></tr></thead>\n<tbody>\n",
        );
        for arm in &m.arms {
            self.out.push_str("<tr><td>");
            self.arm(&arm.id)?;
            write!(
                self.out,
                "</td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td>",
                Esc(&arm.label),
                Esc(&arm.adapter),
                Esc(&arm.workflow),
                Esc(&arm.vendor_lineage),
                Esc(&arm.pinned_version)
            )?;
            if arm.observed_versions.is_empty() {
                self.out.push_str("<span class=\"nd\">no run reported</span>");
            } else {
                self.out.push_str("<ul class=\"plain\">");
                for (version, count) in &arm.observed_versions {
                    write!(self.out, "<li><code>{}</code>: {count}</li>", Esc(version))?;
                }
                self.out.push_str("</ul>");
            }
            let settings = serde_json::to_string(&arm.settings).unwrap_or_default();
            write!(self.out, "</td><td><code>{}</code></td><td>", Esc(&settings))?;
            if arm.controls_not_disabled.is_empty() {
                self.out.push_str("<span class=\"nd\">none</span>");
            } else {
                self.out.push_str("<ul class=\"plain\">");
                for control in &arm.controls_not_disabled {
                    write!(self.out, "<li>{}</li>", Esc(control))?;
                }
                self.out.push_str("</ul>");
            }
            self.out.push_str("</td></tr>\n");
        }
        self.out.push_str("</tbody></table></div>\n<h3 id=\"method-judge\">Judge</h3>\n");
        match &m.judge {
            None => self.out.push_str("<p class=\"nd\">No judge configured: no claim was judged.</p>\n"),
            Some(judge) => {
                self.out.push_str("<dl class=\"kv\">\n");
                let sim =
                    if judge.simulated || s.simulated.judge { " <span class=\"sim\">SIMULATED</span>" } else { "" };
                self.kv("provider", format_args!("{}{sim}", Esc(&judge.provider)))?;
                self.kv("model", format_args!("<code>{}</code>", Esc(&judge.model)))?;
                self.kv("pinned served model", format_args!("<code>{}</code>", Esc(&judge.pinned_served_model)))?;
                self.kv("vendor lineage", Esc(&judge.vendor_lineage))?;
                self.kv("temperature", judge.temperature)?;
                self.kv("batch size", format_args!("{} claims", judge.batch_size))?;
                self.kv("lineage waiver", OrWords(judge.lineage_waiver.as_deref(), "none"))?;
                self.kv("verdicts", Esc(&m.verdict_source()))?;
                self.out.push_str("<dt>models that actually served (claims judged)</dt><dd>");
                if judge.served_models.is_empty() {
                    self.out.push_str("<span class=\"nd\">none: no verdict recorded</span>");
                } else {
                    self.out.push_str("<ul class=\"plain\">");
                    for (model, claims) in &judge.served_models {
                        write!(self.out, "<li><code>{}</code>: {claims}</li>", Esc(model))?;
                    }
                    self.out.push_str("</ul>");
                }
                self.out.push_str("</dd>\n</dl>\n");
            }
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn publication(&mut self) -> fmt::Result {
        let p = &self.summary.publication;
        self.out.push_str("<section id=\"publication\">\n<h2>Publication</h2>\n<dl class=\"kv\">\n");
        if p.internally_commissioned {
            match p.commissioned_by.as_deref() {
                Some(by) if !by.trim().is_empty() => {
                    self.kv("commissioned by", format_args!("<strong>Internally commissioned</strong>: {}", Esc(by)))?
                }
                _ => self.kv("commissioned by", "<strong>Internally commissioned</strong>")?,
            }
        } else {
            self.kv("commissioned by", OrWords(p.commissioned_by.as_deref(), "not declared"))?;
        }
        self.kv("funding", OrWords(p.funding.as_deref(), "not declared"))?;
        self.kv("conflicts of interest", OrWords(p.conflicts.as_deref(), "not declared"))?;
        self.kv("limitations", OrWords(p.limitations.as_deref(), "not declared"))?;
        self.kv("omissions", OrWords(p.omissions.as_deref(), "not declared"))?;
        self.kv("reviewers", OrWords(p.reviewers.as_deref(), "not declared"))?;
        self.out.push_str("</dl>\n</section>\n");
        Ok(())
    }

    /// One rate as a table cell: value, numerator / denominator, interval;
    /// words (never 0 or 100%) when there is no value.
    fn rate_cell(&mut self, rate: &Rate) -> fmt::Result {
        write_rate_cell(&mut self.out, rate)
    }

    fn counts_header(&mut self, first: &str) {
        self.out.push_str("<thead><tr><th>");
        self.out.push_str(first);
        self.out.push_str("</th>");
        for (name, _) in COUNT_COLUMNS {
            self.out.push_str("<th class=\"num\">");
            self.out.push_str(name);
            self.out.push_str("</th>");
        }
        self.out.push_str("</tr></thead>\n");
    }

    fn counts_cells(&mut self, counts: &Counts) -> fmt::Result {
        for (_, pick) in COUNT_COLUMNS {
            write!(self.out, "<td class=\"num\">{}</td>", pick(counts))?;
        }
        Ok(())
    }

    fn rates_header(&mut self, first: &str) {
        self.out.push_str("<thead><tr><th>");
        self.out.push_str(first);
        self.out.push_str("</th>");
        for kind in RateKind::ALL {
            self.out.push_str("<th class=\"num\">");
            self.out.push_str(kind.label());
            self.out.push_str("</th>");
        }
        self.out.push_str("</tr></thead>\n");
    }

    fn rates_cells(&mut self, rates: &Rates) -> fmt::Result {
        for (_, rate) in rates.iter() {
            self.rate_cell(rate)?;
        }
        Ok(())
    }

    fn arms(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str(
            "<section id=\"arms\">\n<h2>Arms</h2>\n<p>Grouped by workflow: arms of different workflows are never \
             pooled or compared. Rates show the value (4 decimals), <em>numerator / denominator</em> and the 95% \
             interval. Micro rates pool every claim or citation; macro rates are the mean over questions.</p>\n",
        );
        for (workflow, arms) in by_workflow(&s.arms) {
            write!(
                self.out,
                "<div class=\"workflow\" data-workflow=\"{0}\">\n<h3>Workflow <code>{0}</code></h3>\n\
                 <h4>Planned runs by final outcome</h4>\n<div class=\"scroll\"><table class=\"counts\">\n",
                Esc(workflow)
            )?;
            self.counts_header("arm");
            self.out.push_str("<tbody>\n");
            for arm in &arms {
                write!(self.out, "<tr data-arm=\"{}\"><td>", Esc(&arm.id))?;
                self.arm(&arm.id)?;
                self.out.push_str("</td>");
                self.counts_cells(&arm.counts)?;
                self.out.push_str("</tr>\n");
            }
            self.out
                .push_str("</tbody></table></div>\n<h4>Rates</h4>\n<div class=\"scroll\"><table class=\"rates\">\n");
            self.rates_header("arm");
            self.out.push_str("<tbody>\n");
            for arm in &arms {
                write!(self.out, "<tr data-arm=\"{}\"><td>", Esc(&arm.id))?;
                self.arm(&arm.id)?;
                self.out.push_str("</td>");
                self.rates_cells(&arm.rates)?;
                self.out.push_str("</tr>\n");
            }
            self.out.push_str(
                "</tbody></table></div>\n<h4>Claims and citations of scored runs</h4>\n<div class=\"scroll\">\
                 <table class=\"claims\">\n<thead><tr><th>arm</th><th class=\"num\">claims extracted</th>\
                 <th class=\"num\">cited</th><th class=\"num\">uncited</th><th class=\"num\">judged</th>\
                 <th class=\"num\">supported</th><th>unjudged (reason)</th><th class=\"num\">citations</th>\
                 <th class=\"num\">unresolved</th><th class=\"num\">contradictions surfaced</th></tr></thead>\n<tbody>\n",
            );
            for arm in &arms {
                let c = &arm.claims;
                self.out.push_str("<tr><td>");
                self.arm(&arm.id)?;
                write!(
                    self.out,
                    "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                     <td class=\"num\">{}</td><td class=\"num\">{}</td><td>",
                    c.extracted, c.cited, c.uncited, c.judged, c.supported
                )?;
                unjudged_list(&mut self.out, &c.unjudged)?;
                let t = &arm.citations;
                writeln!(
                    self.out,
                    "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    t.total, t.unresolved, t.contradictions_surfaced
                )?;
            }
            self.out.push_str("</tbody></table></div>\n");
            self.sources_table("arm", arms.iter().map(|a| (a.id.as_str(), &a.sources)), true)?;
            self.out.push_str("</div>\n");
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    /// The cited sources of scored outputs (seed 004): per output summed,
    /// unique over the outputs, and by what their capture found.
    fn sources_table<'s>(
        &mut self,
        first: &str,
        rows: impl Iterator<Item = (&'s str, &'s SourceCounts)>,
        arms: bool,
    ) -> fmt::Result {
        write!(
            self.out,
            "<h4>Cited sources of scored outputs</h4>\n<div class=\"scroll\"><table class=\"sources\">\n\
             <thead><tr><th>{first}</th><th class=\"num\">sources (per output, summed)</th>\
             <th class=\"num\">unique sources</th><th class=\"num\">accessible</th>\
             <th class=\"num\">inaccessible</th><th class=\"num\">never captured</th></tr></thead>\n<tbody>\n"
        )?;
        for (name, c) in rows {
            self.out.push_str("<tr><td>");
            if arms {
                self.arm(name)?;
            } else {
                write!(self.out, "{}", Esc(name))?;
            }
            writeln!(
                self.out,
                "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                c.cited, c.unique, c.accessible, c.inaccessible, c.uncaptured
            )?;
        }
        self.out.push_str("</tbody></table></div>\n");
        Ok(())
    }

    fn categories(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str("<section id=\"categories\">\n<h2>Per category</h2>\n");
        for (workflow, arms) in by_workflow(&s.arms) {
            writeln!(self.out, "<h3>Workflow <code>{}</code></h3>", Esc(workflow))?;
            for arm in arms {
                self.out.push_str("<h4>");
                self.arm(&arm.id)?;
                self.out.push_str("</h4>\n");
                if arm.categories.is_empty() {
                    self.out.push_str("<p class=\"nd\">no categories</p>\n");
                    continue;
                }
                self.out.push_str(
                    "<div class=\"scroll\"><table class=\"category\">\n<thead><tr><th>category</th>\
                     <th class=\"num\">planned</th><th class=\"num\">completed</th><th class=\"num\">scored</th>",
                );
                for kind in RateKind::ALL {
                    write!(self.out, "<th class=\"num\">{}</th>", kind.label())?;
                }
                self.out.push_str("</tr></thead>\n<tbody>\n");
                for category in &arm.categories {
                    write!(
                        self.out,
                        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
                        Esc(&category.category),
                        category.counts.planned,
                        category.counts.completed,
                        category.counts.scored
                    )?;
                    self.rates_cells(&category.rates)?;
                    self.out.push_str("</tr>\n");
                }
                self.out.push_str("</tbody></table></div>\n");
                self.sources_table(
                    "category",
                    arm.categories.iter().map(|c| (c.category.as_str(), &c.sources)),
                    false,
                )?;
            }
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn comparisons(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str(
            "<section id=\"comparisons\">\n<h2>Comparisons</h2>\n<p>Paired differences <em>a − b</em> between arms \
             of one workflow. Support and resolution are compared on the questions both arms completed; completion \
             over all questions (all attempts).</p>\n",
        );
        if s.comparisons.is_empty() {
            self.out.push_str("<p class=\"nd\">No comparisons: no workflow has two arms.</p>\n");
        }
        for comparison in &s.comparisons {
            self.comparison(comparison)?;
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn comparison(&mut self, c: &Comparison) -> fmt::Result {
        self.out.push_str("<div class=\"comparison\">\n<h3>");
        self.arm(&c.a)?;
        self.out.push_str(" vs ");
        self.arm(&c.b)?;
        write!(
            self.out,
            " <small>(workflow <code>{}</code>)</small></h3>\n<p>Completed pairs: <strong>{}</strong> of {} \
             questions.</p>\n<div class=\"scroll\"><table class=\"pair\">\n<thead><tr><th>all-attempt completion</th>\
             <th class=\"num\">",
            Esc(&c.workflow),
            c.completed_pairs,
            c.questions
        )?;
        self.arm(&c.a)?;
        self.out.push_str("</th><th class=\"num\">");
        self.arm(&c.b)?;
        self.out.push_str("</th></tr></thead>\n<tbody><tr><td>completed / planned</td>");
        self.rate_cell(&c.a_completion)?;
        self.rate_cell(&c.b_completion)?;
        self.out.push_str(
            "</tr></tbody></table></div>\n<div class=\"scroll\"><table class=\"differences\">\n<thead><tr>\
             <th>measure</th><th class=\"num\">a − b</th><th class=\"num\">95% interval</th>\
             <th class=\"num\">questions</th><th class=\"num\">undefined draws</th><th>statement</th></tr></thead>\n<tbody>\n",
        );
        for (kind, d) in c.differences.iter() {
            self.difference(kind.comparison().map_or(kind.label(), |compared| compared.html_label), d)?;
        }
        self.out.push_str("</tbody></table></div>\n</div>\n");
        Ok(())
    }

    fn difference(&mut self, measure: &str, d: &Difference) -> fmt::Result {
        write!(self.out, "<tr><td>{measure}</td><td class=\"num\">")?;
        match d.value_text() {
            Some(value) => self.out.push_str(&value),
            None => write!(self.out, "<span class=\"nd\">{}</span>", d.display_value())?,
        }
        self.out.push_str("</td><td class=\"num\">");
        match d.interval_text() {
            Some(interval) => self.out.push_str(&interval),
            None => self.out.push_str("<span class=\"nd\">no interval</span>"),
        }
        writeln!(
            self.out,
            "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"statement\">{}</td></tr>",
            d.questions,
            d.undefined_draws,
            Esc(&d.statement)
        )
    }

    fn failures(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str(
            "<section id=\"failures\">\n<h2>Failure taxonomy</h2>\n<p>Every attempt by class, retries included \
             (discarded reports excluded). Final outcomes per planned run are in the arms' count tables.</p>\n",
        );
        let classes: BTreeSet<&str> =
            s.attempts_by_class.values().flat_map(|by_class| by_class.keys().map(String::as_str)).collect();
        if classes.is_empty() {
            self.out.push_str("<p class=\"nd\">No attempt recorded.</p>\n</section>\n");
            return Ok(());
        }
        self.out.push_str("<div class=\"scroll\"><table class=\"taxonomy\">\n<thead><tr><th>arm</th>");
        for class in &classes {
            write!(self.out, "<th class=\"num\">{}</th>", Esc(class))?;
        }
        self.out.push_str("<th class=\"num\">attempts</th></tr></thead>\n");
        let mut arm_order: Vec<&str> = Vec::new();
        for (_, arms) in by_workflow(&s.arms) {
            arm_order.extend(arms.iter().map(|arm| arm.id.as_str()));
        }
        // Arms that only the taxonomy knows still show, after the others.
        for arm in s.attempts_by_class.keys() {
            if !arm_order.contains(&arm.as_str()) {
                arm_order.push(arm.as_str());
            }
        }
        // One row group per workflow (None: arms only the taxonomy knows).
        let mut current: Option<Option<&str>> = None;
        for arm in arm_order {
            let workflow = s.arms.iter().find(|a| a.id == arm).map(|a| a.workflow.as_str());
            if current != Some(workflow) {
                if current.is_some() {
                    self.out.push_str("</tbody>\n");
                }
                writeln!(
                    self.out,
                    "<tbody><tr><th colspan=\"{}\">workflow <code>{}</code></th></tr>",
                    classes.len() + 2,
                    Esc(workflow.unwrap_or("unknown"))
                )?;
                current = Some(workflow);
            }
            let by_class = s.attempts_by_class.get(arm);
            self.out.push_str("<tr><td>");
            self.arm(arm)?;
            self.out.push_str("</td>");
            let mut total = 0u64;
            for class in &classes {
                let count = by_class.and_then(|m| m.get(*class)).copied().unwrap_or(0);
                total += count;
                write!(self.out, "<td class=\"num\">{count}</td>")?;
            }
            writeln!(self.out, "<td class=\"num\">{total}</td></tr>")?;
        }
        if current.is_some() {
            self.out.push_str("</tbody>\n");
        }
        self.out.push_str("</table></div>\n</section>\n");
        Ok(())
    }

    fn time_cost(&mut self) -> fmt::Result {
        let s = self.summary;
        self.out.push_str(
            "<section id=\"time-cost\">\n<h2>Time and cost</h2>\n<p>Described, not ranked: elapsed time and cost \
             depend on each product's own pacing, queueing and pricing. Estimated cost is the price catalogue's \
             estimate (token usage at its prices), not a charge; actual cost is what an adapter or the person \
             reported as charged; credits, plan and region are as the person reported them. Each is kept apart; \
             unknown stays unknown.</p>\n\
             <div class=\"scroll\"><table class=\"time-cost\">\n<thead><tr><th>arm</th><th class=\"num\">timed runs</th>\
             <th class=\"num\">median duration</th><th class=\"num\">90th percentile</th>\
             <th class=\"num\">total duration</th><th class=\"num\">estimated cost (price catalogue)</th>\
             <th class=\"num\">actual cost</th><th class=\"num\">credits debited</th><th>plan</th><th>region</th>\
             </tr></thead>\n",
        );
        for (workflow, arms) in by_workflow(&s.arms) {
            writeln!(self.out, "<tbody><tr><th colspan=\"10\">workflow <code>{}</code></th></tr>", Esc(workflow))?;
            for arm in arms {
                self.out.push_str("<tr><td>");
                self.arm(&arm.id)?;
                self.out.push_str("</td>");
                time_cost_cells(&mut self.out, &arm.time_cost)?;
                self.out.push_str("</tr>\n");
            }
            self.out.push_str("</tbody>\n");
        }
        self.out.push_str("</table></div>\n</section>\n");
        Ok(())
    }

    fn plots(&mut self, plots: &[(String, String)]) -> fmt::Result {
        self.out.push_str("<section id=\"plots\">\n<h2>Plots</h2>\n");
        if plots.is_empty() {
            self.out.push_str("<p class=\"nd\">No plots.</p>\n");
        }
        for (name, svg) in plots {
            writeln!(self.out, "<figure id=\"plot-{}\">", IdSafe(name))?;
            match inlinable_svg(svg) {
                Some(svg) => self.out.push_str(svg),
                // Not what the plot writer makes: shown as text, never as
                // markup.
                None => write!(self.out, "<pre>{}</pre>", Esc(svg))?,
            }
            write!(self.out, "\n<figcaption>{} (also a file of this report)</figcaption>\n</figure>\n", Esc(name))?;
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn notes(&mut self) -> fmt::Result {
        self.out.push_str("<section id=\"notes\">\n<h2>Notes</h2>\n");
        if self.summary.notes.is_empty() {
            self.out.push_str("<p class=\"nd\">None.</p>\n");
        } else {
            self.out.push_str("<ul>\n");
            for note in &self.summary.notes {
                writeln!(self.out, "<li>{}</li>", Esc(note))?;
            }
            self.out.push_str("</ul>\n");
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn runs(&mut self, runs: &[RunView], drill: &BTreeMap<String, DrillDown>) -> fmt::Result {
        let drilled = runs.iter().filter(|run| drill.contains_key(&run.run_id)).count();
        write!(
            self.out,
            "<section id=\"runs\">\n<h2>Runs</h2>\n<p>{} planned runs in planned order; {drilled} with a drill-down \
             (the run id links to it). – means not scored.</p>\n<div class=\"scroll\"><table id=\"runs-table\">\n\
             <thead><tr><th>run</th><th>question</th><th>category</th><th>arm</th><th>outcome</th>\
             <th class=\"num\">attempts</th><th class=\"num\">claims</th><th class=\"num\">judged</th>\
             <th class=\"num\">supported</th><th class=\"num\">citations</th><th>version</th></tr></thead>\n<tbody>\n",
            runs.len()
        )?;
        for run in runs {
            self.out.push_str("<tr><td>");
            if drill.contains_key(&run.run_id) {
                write!(self.out, "<a href=\"#run-{}\"><code>{}</code></a>", IdSafe(&run.run_id), Esc(&run.run_id))?;
            } else {
                write!(self.out, "<code>{}</code>", Esc(&run.run_id))?;
            }
            write!(self.out, "</td><td>{}</td><td>{}</td><td>", Esc(&run.question_id), Esc(&run.category))?;
            self.arm(&run.arm)?;
            if run.simulated && !self.simulated.contains(&run.arm) {
                self.out.push_str(" <span class=\"sim\">SIMULATED</span>");
            }
            write!(
                self.out,
                "</td><td class=\"{}\">{}</td><td class=\"num\">{}</td>",
                outcome_class(&run.outcome),
                Esc(&run.outcome),
                run.attempts
            )?;
            match &run.scored {
                Some(score) => write!(
                    self.out,
                    "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
                    score.claims, score.judged, score.supported, score.citations
                )?,
                None => self.out.push_str(
                    "<td class=\"num\">–</td><td class=\"num\">–</td><td class=\"num\">–</td><td class=\"num\">–</td>",
                ),
            }
            write!(self.out, "<td><code>{}</code>", Esc(&run.observed_version))?;
            if !run.pinned_version.is_empty() && run.pinned_version != run.observed_version {
                write!(self.out, " <small>(pinned <code>{}</code>)</small>", Esc(&run.pinned_version))?;
            }
            self.out.push_str("</td></tr>\n");
            self.spill(SPILL_BYTES)?;
        }
        self.out.push_str("</tbody></table></div>\n</section>\n");
        Ok(())
    }

    fn drill_downs(&mut self, runs: &[RunView], drill: &BTreeMap<String, DrillDown>) -> fmt::Result {
        self.out.push_str("<section id=\"drill-downs\">\n<h2>Drill-downs</h2>\n");
        if drill.is_empty() {
            self.out.push_str("<p class=\"nd\">No drill-downs in this report.</p>\n");
        }
        let mut shown = 0usize;
        for run in runs {
            if let Some(d) = drill.get(&run.run_id) {
                self.drill_down(Some(run), d)?;
                self.spill(SPILL_BYTES)?;
                shown += 1;
            }
        }
        // Drill-downs of runs the runs table does not list (should not
        // happen): shown rather than lost.
        if shown < drill.len() {
            let listed: BTreeSet<&str> = runs.iter().map(|run| run.run_id.as_str()).collect();
            for d in drill.values().filter(|d| !listed.contains(d.run_id.as_str())) {
                self.drill_down(None, d)?;
                self.spill(SPILL_BYTES)?;
            }
        }
        self.out.push_str("</section>\n");
        Ok(())
    }

    fn drill_down(&mut self, run: Option<&RunView>, d: &DrillDown) -> fmt::Result {
        let run = run.map(|run| (run, self.simulated.contains(&run.arm)));
        write_drill_down(&mut self.out, run, d)
    }

    fn files(&mut self) -> fmt::Result {
        self.out.push_str(
            "<section id=\"files\">\n<h2>Files</h2>\n<p>The other files of this report folder, with their SHA-256 \
             (<code>manifest.json</code> lists them all).</p>\n",
        );
        if self.summary.files.is_empty() {
            self.out.push_str("<p class=\"nd\">Not listed.</p>\n");
        } else {
            self.out.push_str(
                "<div class=\"scroll\"><table><thead><tr><th>file</th><th class=\"num\">bytes</th><th>SHA-256</th>\
                 </tr></thead><tbody>\n",
            );
            for file in &self.summary.files {
                writeln!(
                    self.out,
                    "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td><code class=\"hash\">{}</code></td></tr>",
                    Esc(&file.name),
                    file.bytes,
                    Esc(&file.sha256)
                )?;
            }
            self.out.push_str("</tbody></table></div>\n");
        }
        self.out.push_str("</section>\n");
        Ok(())
    }
}

/// One run's drill-down (`run`: its row and whether its arm is
/// simulated, when the runs table lists it).
fn write_drill_down(out: &mut String, run: Option<(&RunView, bool)>, d: &DrillDown) -> fmt::Result {
    write!(out, "<details class=\"drill\" id=\"run-{}\"><summary><code>{}</code>", IdSafe(&d.run_id), Esc(&d.run_id))?;
    if let Some((run, simulated)) = run {
        write!(out, " · {} · ", Esc(&run.question_id))?;
        write_arm(out, &run.arm, simulated)?;
        write!(out, " · <span class=\"{}\">{}</span>", outcome_class(&run.outcome), Esc(&run.outcome))?;
    }
    out.push_str("</summary>\n<div class=\"drill-body\">\n");
    write!(out, "<h4>Prompt</h4>\n<pre class=\"prompt\">{}</pre>\n", Esc(&d.prompt))?;
    out.push_str("<h4>Conversation</h4>\n");
    if d.conversation.is_empty() {
        out.push_str("<p class=\"nd\">No turns recorded.</p>\n");
    } else {
        out.push_str("<ol class=\"turns\">\n");
        for (role, text) in &d.conversation {
            writeln!(out, "<li><strong>{}</strong><pre>{}</pre></li>", Esc(role), Esc(text))?;
        }
        out.push_str("</ol>\n");
    }
    out.push_str("<h4>Output</h4>\n");
    match &d.output {
        Some(output) => writeln!(out, "<pre class=\"output\">{}</pre>", Esc(output))?,
        None => out.push_str("<p class=\"nd\">No output.</p>\n"),
    }
    writeln!(out, "<h4>Claims ({})</h4>", d.claims.len())?;
    if d.claims.is_empty() {
        out.push_str("<p class=\"nd\">No claims extracted.</p>\n");
    } else {
        out.push_str("<ol class=\"claims\">\n");
        for claim in &d.claims {
            write!(
                out,
                "<li value=\"{}\" class=\"claim\"><p class=\"claim-text\">{}</p>\n<p>cites: ",
                claim.index,
                Esc(&claim.text)
            )?;
            if claim.cited.is_empty() {
                out.push_str("<span class=\"nd\">no citation</span>");
            }
            for (i, index) in claim.cited.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write!(out, "[{index}]")?;
            }
            writeln!(
                out,
                " · verdict: <span class=\"verdict {}\">{}</span> · judge model: {}</p>",
                verdict_class(&claim.verdict),
                Esc(&claim.verdict),
                OrWords(claim.judge_model.as_deref(), "none")
            )?;
            if let Some(line) = &claim.judge_line {
                writeln!(out, "<p>judge's reply: <code class=\"judge-line\">{}</code></p>", Esc(line))?;
            }
            for evidence in &claim.evidence {
                write!(out, "<div class=\"evidence\"><p>[{}] ", evidence.index)?;
                match evidence.url.as_deref() {
                    Some(url) if is_http_url(url) => {
                        write!(out, "<a href=\"{0}\" rel=\"noreferrer noopener\"><code>{0}</code></a>", Esc(url))?
                    }
                    Some(url) => write!(out, "<code>{}</code>", Esc(url))?,
                    None => out.push_str("<span class=\"nd\">no URL</span>"),
                }
                writeln!(
                    out,
                    " · {} · source: <code>{}</code></p>",
                    OrWords(evidence.title.as_deref(), "no title"),
                    Esc(&evidence.source)
                )?;
                if evidence.passages.is_empty() {
                    out.push_str("<p class=\"nd\">No passage shown to the judge.</p>\n");
                }
                for passage in &evidence.passages {
                    writeln!(out, "<blockquote>{}</blockquote>", Esc(passage))?;
                }
                out.push_str("</div>\n");
            }
            out.push_str("</li>\n");
        }
        out.push_str("</ol>\n");
    }
    out.push_str("<h4>Judge models that served this run</h4>\n");
    if d.served_judge_models.is_empty() {
        out.push_str("<p class=\"nd\">None.</p>\n");
    } else {
        out.push_str("<ul class=\"plain served\">");
        for model in &d.served_judge_models {
            write!(out, "<li><code>{}</code></li>", Esc(model))?;
        }
        out.push_str("</ul>\n");
    }
    writeln!(out, "<h4>Attempts ({})</h4>", d.attempts.len())?;
    if !d.attempts.is_empty() {
        out.push_str(
            "<div class=\"scroll\"><table class=\"attempts\"><thead><tr><th class=\"num\">attempt</th>\
             <th>class</th><th class=\"num\">HTTP status</th><th>detail</th><th>started</th><th>ended</th>\
             <th>worker</th></tr></thead><tbody>\n",
        );
        for attempt in &d.attempts {
            out.push_str("<tr>");
            write!(
                out,
                "<td class=\"num\">{}</td><td>{}</td><td class=\"num\">",
                attempt.attempt,
                Esc(&attempt.class)
            )?;
            if attempt.http_status == 0 {
                out.push_str("<span class=\"nd\">none</span>");
            } else {
                write!(out, "{}", attempt.http_status)?;
            }
            writeln!(
                out,
                "</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                Esc(&attempt.detail),
                OrWords(attempt.started_at.as_deref(), "not recorded"),
                OrWords(attempt.ended_at.as_deref(), "not recorded"),
                Esc(&attempt.worker)
            )?;
        }
        out.push_str("</tbody></table></div>\n");
    }
    out.push_str("</div>\n</details>\n");
    Ok(())
}

/// The bytes `d` takes on the page, for the gatherer's budget
/// ([`crate::gather::DRILL_DOWN_BUDGET_BYTES`]): the drill-down as the page
/// writes it (its arm counted as simulated, the longer form).
pub(crate) fn drill_down_bytes(run: &RunView, d: &DrillDown) -> usize {
    let mut out = String::new();
    let _ = write_drill_down(&mut out, Some((run, true)), d);
    out.len()
}

/// An arm's id, marked SIMULATED when it is.
fn write_arm(out: &mut String, id: &str, simulated: bool) -> fmt::Result {
    write!(out, "<span class=\"arm\">{}</span>", Esc(id))?;
    if simulated {
        out.push_str(" <span class=\"sim\">SIMULATED</span>");
    }
    Ok(())
}

fn write_rate_cell(out: &mut String, rate: &Rate) -> fmt::Result {
    let class = match rate.status {
        RateStatus::Measured => "num rate",
        RateStatus::NotApplicable => "num rate na",
        RateStatus::Unmeasured => "num rate unm",
    };
    write!(out, "<td class=\"{class}\"><span class=\"v\">{}</span>", Esc(&rate.display_value()))?;
    write!(out, "<span class=\"den\">{}</span>", Esc(&rate.display_fraction()))?;
    if rate.status == RateStatus::Measured {
        match rate.interval_text() {
            Some(interval) => write!(out, "<span class=\"ci\">{interval}</span>")?,
            None => out.push_str("<span class=\"ci\">no interval</span>"),
        }
        if rate.undefined_draws > 0 {
            write!(out, "<span class=\"why\">{} undefined draws left out</span>", rate.undefined_draws)?;
        }
        if let Some(questions) = rate.questions {
            write!(out, "<span class=\"why\">over {questions} questions</span>")?;
        }
    }
    if let Some(reason) = &rate.reason {
        write!(out, "<span class=\"why\">{}</span>", Esc(reason))?;
    }
    out.push_str("</td>");
    Ok(())
}

fn unjudged_list(out: &mut String, unjudged: &BTreeMap<String, u64>) -> fmt::Result {
    if unjudged.is_empty() {
        out.push_str("<span class=\"nd\">none</span>");
        return Ok(());
    }
    for (i, (reason, count)) in unjudged.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{}: {count}", Esc(reason))?;
    }
    Ok(())
}

fn time_cost_cells(out: &mut String, t: &TimeCost) -> fmt::Result {
    write!(out, "<td class=\"num\">{}</td>", t.timed_runs)?;
    for ms in [t.median_duration_ms, t.p90_duration_ms] {
        match ms {
            Some(ms) => write!(out, "<td class=\"num\">{}</td>", Millis(ms))?,
            None => out.push_str("<td class=\"num\"><span class=\"nd\">no timed run</span></td>"),
        }
    }
    write!(
        out,
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td>{}</td><td>{}</td>",
        Millis(t.total_duration_ms),
        Esc(&t.estimated_text()),
        Esc(&t.actual_text()),
        Esc(&t.credits_text()),
        Esc(&TimeCost::by_run_text(&t.plans)),
        Esc(&TimeCost::by_run_text(&t.regions))
    )
}

/// The SVG to inline, if it is what the plot writer makes: an `<svg>`
/// document (an XML prologue dropped) with no script or foreign content.
fn inlinable_svg(svg: &str) -> Option<&str> {
    let mut body = svg.trim_start();
    if body.starts_with("<?xml") {
        body = body[body.find("?>")? + 2..].trim_start();
    }
    let lower = body.to_ascii_lowercase();
    let forbidden = ["<script", "<foreignobject", "<iframe", "<image", "href=", "javascript:", " on"];
    if !body.starts_with("<svg") || forbidden.iter().any(|bad| lower.contains(bad) && !allowed_on(bad, &lower)) {
        return None;
    }
    Some(body)
}

/// `" on"` is there to catch event-handler attributes (`onload=`), but
/// plot text may contain the word " on": only an ` on...=` attribute
/// counts.
fn allowed_on(bad: &str, lower: &str) -> bool {
    if bad != " on" {
        return false;
    }
    lower.match_indices(" on").all(|(i, _)| {
        let rest = &lower[i + 3..];
        let name_len = rest.bytes().take_while(|b| b.is_ascii_alphabetic()).count();
        !rest[name_len..].starts_with('=')
    })
}

// === the fixture, shared by the unit tests, the plots' tests and
// tests/html_chromium.rs ===

#[doc(hidden)]
pub mod testing {
    //! A hand-built report: three arms (two of one workflow, one of them
    //! SIMULATED, and one of another workflow), a not-applicable and an
    //! unmeasured rate, a comparison, and a run whose output and claim try
    //! to inject markup.

    use std::collections::BTreeMap;

    use crate::model::*;

    pub const ALPHA: &str = "alpha";
    pub const BETA_SIM: &str = "beta-sim";
    pub const GAMMA: &str = "gamma";
    /// The run with the hostile output and a drill-down.
    pub const HOSTILE_RUN: &str = "r-0001";
    /// A drill-down whose run id needs [`super::IdSafe`].
    pub const ODD_RUN: &str = "q 7/beta#1";
    pub const HOSTILE_OUTPUT: &str =
        "Alpha says hello.<script>alert(1)</script> The sky is blue [1]. <img src=\"http://127.0.0.1:9/leak.png\">";
    pub const CLAIM_TEXT: &str = "The sky is blue <b>on clear days</b> [1].";
    pub const SERVED_JUDGE: &str = "judge-model-2025-06-01";
    pub const STATEMENT: &str = "alpha is higher than beta-sim: the interval [0.0500, 0.4500] does not contain 0";

    pub fn measured(numerator: f64, denominator: f64, low: f64, high: f64) -> Rate {
        Rate {
            value: Some(numerator / denominator),
            numerator,
            denominator,
            ci_low: Some(low),
            ci_high: Some(high),
            undefined_draws: 0,
            status: RateStatus::Measured,
            reason: None,
            questions: None,
        }
    }

    pub fn not_applicable(reason: &str) -> Rate {
        Rate {
            value: None,
            numerator: 0.0,
            denominator: 0.0,
            ci_low: None,
            ci_high: None,
            undefined_draws: 0,
            status: RateStatus::NotApplicable,
            reason: Some(reason.into()),
            questions: None,
        }
    }

    pub fn unmeasured(denominator: f64, reason: &str) -> Rate {
        Rate {
            value: None,
            numerator: 0.0,
            denominator,
            ci_low: None,
            ci_high: None,
            undefined_draws: 0,
            status: RateStatus::Unmeasured,
            reason: Some(reason.into()),
            questions: None,
        }
    }

    /// Rates by kind; a kind the fixture does not set is not applicable.
    fn rates(set: &[(RateKind, Rate)]) -> Rates {
        Rates::from_fn(|kind| {
            set.iter()
                .find(|(k, _)| *k == kind)
                .map_or_else(|| not_applicable("not in the fixture"), |(_, rate)| rate.clone())
        })
    }

    fn with_questions(mut rate: Rate, questions: u64) -> Rate {
        rate.questions = Some(questions);
        rate
    }

    fn counts(planned: u64, completed: u64, refused: u64, failed: u64, timed_out: u64, scored: u64) -> Counts {
        Counts {
            planned,
            attempted: planned,
            completed,
            refused,
            failed,
            timed_out,
            unavailable: 0,
            not_run: 0,
            pending: 0,
            scored,
            judged_runs: scored,
        }
    }

    fn arm(id: &str, workflow: &str, simulated: bool, counts: Counts, rates: Rates) -> ArmSummary {
        ArmSummary {
            id: id.into(),
            label: format!("{id} product"),
            workflow: workflow.into(),
            simulated,
            categories: vec![
                CategorySummary {
                    category: "science".into(),
                    counts: counts.clone(),
                    claims: ClaimCounts::default(),
                    citations: CitationCounts::default(),
                    sources: SourceCounts::default(),
                    rates: rates.clone(),
                },
                CategorySummary {
                    category: "law <&>".into(),
                    counts: Counts::default(),
                    claims: ClaimCounts::default(),
                    citations: CitationCounts::default(),
                    sources: SourceCounts::default(),
                    rates: Rates::from_fn(|_| not_applicable("no planned runs")),
                },
            ],
            counts,
            claims: ClaimCounts {
                extracted: 20,
                cited: 16,
                uncited: 4,
                judged: 12,
                supported: 9,
                unjudged: BTreeMap::from([("source_unavailable".into(), 4)]),
            },
            citations: CitationCounts { total: 18, unresolved: 2, contradictions_surfaced: 1 },
            sources: SourceCounts { cited: 6, unique: 5, accessible: 4, inaccessible: 1, uncaptured: 1 },
            rates,
            time_cost: TimeCost {
                timed_runs: 3,
                median_duration_ms: Some(95_000),
                p90_duration_ms: Some(410_000),
                total_duration_ms: 700_000,
                estimated_cost_runs: 2,
                estimated_cost: Some(1.25),
                estimated_cost_currency: Some("USD".into()),
                unknown_estimated_cost_runs: 1,
                actual_cost_runs: 0,
                actual_cost: None,
                actual_cost_currency: None,
                unknown_actual_cost_runs: 3,
                credits_runs: 1,
                credits_debited: Some(12.5),
                plans: BTreeMap::from([("Pro".into(), 1)]),
                regions: BTreeMap::from([("EU".into(), 1)]),
            },
        }
    }

    fn arm_method(id: &str, workflow: &str, simulated: bool) -> ArmMethod {
        ArmMethod {
            id: id.into(),
            label: format!("{id} product"),
            adapter: if simulated { "sim".into() } else { "openai_chat".into() },
            workflow: workflow.into(),
            simulated,
            pinned_version: "v1".into(),
            observed_versions: BTreeMap::from([("v1".into(), 3), ("not disclosed".into(), 1)]),
            vendor_lineage: format!("{id}-vendor"),
            settings: serde_json::json!({"temperature": 0, "note": "<i>x</i>"}),
            controls_not_disabled: if simulated { vec![] } else { vec!["web browsing".into()] },
        }
    }

    fn run(run_id: &str, position: u64, question: &str, arm: &str, workflow: &str, outcome: &str) -> RunView {
        let completed = outcome == "completed";
        RunView {
            run_id: run_id.into(),
            position,
            question_id: question.into(),
            category: "science".into(),
            arm: arm.into(),
            workflow: workflow.into(),
            repeat: 0,
            simulated: arm == BETA_SIM,
            outcome: outcome.into(),
            attempt_class: outcome.into(),
            reason: String::new(),
            attempts: if completed { 1 } else { 2 },
            started_at: Some("2025-06-01T10:00:00Z".into()),
            ended_at: Some("2025-06-01T10:02:00Z".into()),
            started_ms: Some(0),
            duration_ms: Some(120_000),
            observed_version: if completed { "v1".into() } else { "not disclosed".into() },
            pinned_version: "v1".into(),
            record_sha256: "ab".repeat(32),
            scored: completed.then(|| RunScoreView {
                claims: 3,
                cited: 2,
                judged: 2,
                supported: 1,
                citations: 2,
                unresolved: 0,
                uncited_sentences: 1,
                contradictions: 0,
                unjudged: BTreeMap::new(),
                citation_format: "numbered".into(),
                sources: 2,
                inaccessible_sources: 1,
                uncaptured_sources: 0,
            }),
            estimated_cost: None,
            estimated_cost_currency: None,
            actual_cost: None,
            actual_cost_currency: None,
            credits_debited: None,
            plan: None,
            region: None,
            scoring_error: None,
        }
    }

    fn drill(run_id: &str, output: &str) -> DrillDown {
        DrillDown {
            run_id: run_id.into(),
            prompt: "What colour is the sky? Cite sources.".into(),
            conversation: vec![
                ("user".into(), "What colour is the sky? Cite sources.".into()),
                ("assistant".into(), output.into()),
            ],
            output: Some(output.into()),
            claims: vec![
                DrillClaim {
                    index: 1,
                    text: CLAIM_TEXT.into(),
                    cited: vec![1, 2],
                    verdict: "YES".into(),
                    judge_model: Some(SERVED_JUDGE.into()),
                    judge_line: Some("1: YES".into()),
                    evidence: vec![
                        DrillEvidence {
                            index: 1,
                            url: Some("https://example.org/sky?a=1&b=2".into()),
                            title: Some("Why the sky is blue".into()),
                            source: "capture".into(),
                            passages: vec!["Rayleigh scattering <em>makes</em> the sky blue.".into()],
                        },
                        DrillEvidence {
                            index: 2,
                            url: Some("javascript:alert(3)".into()),
                            title: None,
                            source: "none".into(),
                            passages: vec![],
                        },
                    ],
                },
                DrillClaim {
                    index: 2,
                    text: "Alpha says hello.".into(),
                    cited: vec![],
                    verdict: "not judged (uncited)".into(),
                    judge_model: None,
                    judge_line: None,
                    evidence: vec![],
                },
            ],
            served_judge_models: vec![SERVED_JUDGE.into()],
            attempts: vec![DrillAttempt {
                attempt: 1,
                class: "completed".into(),
                http_status: 200,
                detail: String::new(),
                started_at: Some("2025-06-01T10:00:00Z".into()),
                ended_at: Some("2025-06-01T10:02:00Z".into()),
                worker: "worker-1".into(),
            }],
        }
    }

    /// The hand-built report: summary, runs and drill-downs.
    pub fn fixture() -> (Summary, Vec<RunView>, BTreeMap<String, DrillDown>) {
        use RateKind::*;
        let alpha_rates = rates(&[
            (Completion, measured(3.0, 4.0, 0.5, 1.0)),
            (SupportMicro, measured(9.0, 12.0, 0.6, 0.9)),
            (SupportMacro, with_questions(measured(1.5, 2.0, 0.55, 0.95), 2)),
            (ResolutionMicro, measured(16.0, 18.0, 0.8, 0.97)),
            (ResolutionMacro, with_questions(measured(1.8, 2.0, 0.82, 0.98), 2)),
        ]);
        let beta_rates = rates(&[
            (Completion, measured(2.0, 4.0, 0.1, 0.8)),
            (SupportMicro, unmeasured(10.0, "every cited claim is unjudged (source_unavailable)")),
            (SupportMacro, unmeasured(2.0, "every cited claim is unjudged (source_unavailable)")),
            (ResolutionMicro, measured(7.0, 10.0, 0.4, 0.9)),
            (ResolutionMacro, with_questions(measured(1.4, 2.0, 0.45, 0.92), 2)),
        ]);
        let gamma_rates = rates(&[
            (Completion, measured(1.0, 2.0, 0.0, 1.0)),
            (SupportMicro, not_applicable("no cited claims")),
            (SupportMacro, not_applicable("no cited claims")),
            (ResolutionMicro, not_applicable("no citations")),
            (ResolutionMacro, not_applicable("no citations")),
        ]);
        let summary = Summary {
            publication_state: PublicationState::from_missing(vec![
                "2 planned run(s) have no final outcome yet".into(),
                "SIMULATED arms or judge: these are not actual runs".into(),
            ]),
            redaction: None,
            kind: "cohort-report".into(),
            report_format: REPORT_FORMAT,
            metrics_version: 3,
            tool_version: "0.1.0".into(),
            manifest_sha256: "0123456789abcdef".repeat(4),
            cohort: "fixture <cohort> & co".into(),
            generated_at: "2025-06-03T12:00:00Z".into(),
            simulated: Simulated { arms: vec![BETA_SIM.into()], judge: false },
            method: Method {
                frozen_at: "2025-06-01T09:00:00Z".into(),
                seed: 20261014,
                order_algorithm: "sha256-shuffle-v1".into(),
                order_sha256: "cd".repeat(32),
                config_sha256: "ef".repeat(32),
                files: BTreeMap::from([("questions.json".into(), "12".repeat(32))]),
                question_sha256: BTreeMap::from([("q1".into(), "34".repeat(32)), ("q2".into(), "56".repeat(32))]),
                window_hours: 48,
                window_opened_at: Some("2025-06-01T10:00:00Z".into()),
                window_closes_at: Some("2025-06-03T10:00:00Z".into()),
                first_start_at: Some("2025-06-01T10:00:05Z".into()),
                last_end_at: Some("2025-06-01T16:00:00Z".into()),
                repeats: 1,
                repeat_schedule: None,
                run_timeout_secs: 1800,
                retry: cohort_core::config::RetryPolicy::default(),
                aborted: None,
                amendments: vec![],
                judge: Some(JudgeMethod {
                    provider: "openai".into(),
                    model: "judge-model".into(),
                    pinned_served_model: SERVED_JUDGE.into(),
                    vendor_lineage: "judge-vendor".into(),
                    temperature: 0.0,
                    batch_size: 8,
                    lineage_waiver: None,
                    served_models: BTreeMap::from([(SERVED_JUDGE.into(), 12)]),
                    simulated: false,
                }),
                judge_pass: None,
                arms: vec![
                    arm_method(ALPHA, "deep_research", false),
                    arm_method(BETA_SIM, "deep_research", true),
                    arm_method(GAMMA, "quick_discovery", false),
                ],
            },
            publication: PublicationBlock {
                commissioned_by: Some("Example Lab".into()),
                internally_commissioned: true,
                funding: None,
                conflicts: Some("none known".into()),
                limitations: None,
                omissions: None,
                reviewers: None,
            },
            bootstrap: BootstrapInfo {
                algorithm: "cluster bootstrap over questions, paired".into(),
                draws: 10_000,
                seed: 20261014,
                clusters: 2,
                interval: "95% percentile".into(),
            },
            questions: vec!["q1".into(), "q2".into()],
            categories: vec!["science".into(), "law <&>".into()],
            arms: vec![
                arm(ALPHA, "deep_research", false, counts(4, 3, 1, 0, 0, 3), alpha_rates),
                arm(GAMMA, "quick_discovery", false, counts(2, 1, 0, 0, 1, 1), gamma_rates),
                arm(BETA_SIM, "deep_research", true, counts(4, 2, 0, 1, 1, 2), beta_rates),
            ],
            comparisons: vec![Comparison {
                workflow: "deep_research".into(),
                a: ALPHA.into(),
                b: BETA_SIM.into(),
                completed_pairs: 2,
                questions: 2,
                a_completion: measured(3.0, 4.0, 0.5, 1.0),
                b_completion: measured(2.0, 4.0, 0.1, 0.8),
                differences: [
                    (
                        Completion,
                        Difference {
                            value: Some(0.25),
                            ci_low: Some(0.05),
                            ci_high: Some(0.45),
                            undefined_draws: 0,
                            questions: 2,
                            statement: STATEMENT.into(),
                        },
                    ),
                    (
                        SupportMicro,
                        Difference {
                            value: None,
                            ci_low: None,
                            ci_high: None,
                            undefined_draws: 10_000,
                            questions: 0,
                            statement: "undefined: beta-sim has no judged claim".into(),
                        },
                    ),
                    (
                        ResolutionMicro,
                        Difference {
                            value: Some(0.19),
                            ci_low: Some(-0.1),
                            ci_high: Some(0.4),
                            undefined_draws: 12,
                            questions: 2,
                            statement: "alpha and beta-sim cannot be told apart: the interval contains 0".into(),
                        },
                    ),
                ]
                .into_iter()
                .chain([ClaimFidelityMicro, CitationPrecisionMicro, CitationCoverageMicro].map(|kind| {
                    (
                        kind,
                        Difference {
                            value: None,
                            ci_low: None,
                            ci_high: None,
                            undefined_draws: 10_000,
                            questions: 0,
                            statement: "undefined: no output of beta-sim was reviewed".into(),
                        },
                    )
                }))
                .collect(),
            }],
            attempts_by_class: BTreeMap::from([
                (ALPHA.into(), BTreeMap::from([("completed".into(), 3), ("refused".into(), 2)])),
                (BETA_SIM.into(), BTreeMap::from([("completed".into(), 2), ("server_error".into(), 3)])),
                (GAMMA.into(), BTreeMap::from([("completed".into(), 1), ("timed_out".into(), 2)])),
            ]),
            completions_by_hour: BTreeMap::from([
                (ALPHA.into(), vec![1, 0, 2]),
                (BETA_SIM.into(), vec![0, 1, 1]),
                (GAMMA.into(), vec![1]),
            ]),
            files: vec![FileEntry { name: "summary.json".into(), sha256: "78".repeat(32), bytes: 1234 }],
            notes: vec!["drill-downs are cut at 2 runs per arm <by design>".into()],
            review: None,
        };
        let runs = vec![
            run(HOSTILE_RUN, 0, "q1", ALPHA, "deep_research", "completed"),
            run("r-0002", 1, "q2", ALPHA, "deep_research", "refused"),
            run(ODD_RUN, 2, "q1", BETA_SIM, "deep_research", "completed"),
            run("r-0004", 3, "q2", GAMMA, "quick_discovery", "timed_out"),
        ];
        let drill = BTreeMap::from([
            (HOSTILE_RUN.to_string(), drill(HOSTILE_RUN, HOSTILE_OUTPUT)),
            (ODD_RUN.to_string(), drill(ODD_RUN, "Beta output [1].")),
        ]);
        (summary, runs, drill)
    }

    /// The page of the fixture, with its plots.
    pub fn fixture_page() -> String {
        let (summary, runs, drill) = fixture();
        let plots = match crate::plots::render_plots(&summary) {
            Ok(plots) => plots,
            Err(error) => vec![("error.txt".into(), error.to_string())],
        };
        super::render_html(&summary, &runs, &drill, &plots)
    }

    /// The element id of a run's drill-down.
    pub fn drill_id(run_id: &str) -> String {
        format!("run-{}", super::IdSafe(run_id))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    fn page() -> String {
        fixture_page()
    }

    /// Record text comes out escaped: the hostile output is shown, not run,
    /// and the page's only script is its own.
    #[test]
    fn hostile_output_is_escaped() {
        let page = page();
        assert!(page.contains("Alpha says hello.&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!page.contains("<script>alert(1)"));
        assert_eq!(page.matches("<script").count(), 1, "only the page's own script");
        assert!(!page.contains("<img"), "no image element from a record");
        assert!(page.contains("The sky is blue &lt;b&gt;on clear days&lt;/b&gt; [1]."));
        assert!(page.contains("fixture &lt;cohort&gt; &amp; co"));
        assert!(!page.contains("<b>on clear days"));
    }

    /// The page forbids every fetch, and nothing in it points outside
    /// except http(s) links, which carry rel="noreferrer noopener".
    #[test]
    fn page_is_self_contained() {
        let page = page();
        assert!(page.contains(
            "content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:;"
        ));
        for bad in ["<link", "@import", "url(", "<img", "<iframe", "<object", "<embed", "<source", "<video", "<audio"] {
            assert!(!page.contains(bad), "the page contains {bad}");
        }
        let links: Vec<&str> = page.match_indices("<a href=\"").map(|(i, _)| &page[i..]).collect();
        for link in links {
            let target = &link[9..link[9..].find('"').unwrap() + 9];
            assert!(target.starts_with('#') || target.starts_with("http"), "unexpected link {target}");
            if target.starts_with("http") {
                assert!(link[..link.find('>').unwrap()].contains("rel=\"noreferrer noopener\""), "{link}");
            }
        }
        assert!(page.contains("<a href=\"https://example.org/sky?a=1&amp;b=2\" rel=\"noreferrer noopener\">"));
        assert!(!page.contains("href=\"javascript:"));
        assert!(page.contains("<code>javascript:alert(3)</code>"));
    }

    /// Not applicable and unmeasured rates are words, never 0 or 100%.
    #[test]
    fn missing_rates_are_words_not_numbers() {
        let mut cell = String::new();
        write_rate_cell(&mut cell, &not_applicable("no cited claims")).unwrap();
        assert!(cell.contains("not applicable"), "{cell}");
        assert!(!cell.contains("0.0000") && !cell.contains('%') && !cell.contains("1.0000"), "{cell}");
        cell.clear();
        write_rate_cell(&mut cell, &unmeasured(10.0, "every claim unjudged")).unwrap();
        assert!(cell.contains("n/a (unmeasured)") && cell.contains("0 / 10"), "{cell}");
        assert!(!cell.contains("0.0000") && !cell.contains('%'), "{cell}");
        cell.clear();
        write_rate_cell(&mut cell, &measured(3.0, 4.0, 0.5, 1.0)).unwrap();
        assert!(cell.contains(">0.7500<") && cell.contains("3 / 4") && cell.contains("[0.5000, 1.0000]"), "{cell}");

        let page = page();
        assert!(page.contains("not applicable") && page.contains("n/a (unmeasured)"));
    }

    /// Every mention of the simulated arm carries the SIMULATED label, and
    /// the page has the banner.
    #[test]
    fn simulated_arm_is_labelled_everywhere() {
        let page = page();
        assert!(page.contains("<p class=\"banner\" id=\"simulated\">SIMULATED"));
        let name = format!("<span class=\"arm\">{BETA_SIM}</span>");
        let mentions = page.matches(&name).count();
        assert!(mentions >= 8, "beta-sim shown in every table ({mentions})");
        assert_eq!(page.matches(&format!("{name} <span class=\"sim\">SIMULATED</span>")).count(), mentions);
        let alpha = format!("<span class=\"arm\">{ALPHA}</span> <span class=\"sim\">");
        assert!(!page.contains(&alpha), "a real arm is not labelled SIMULATED");
    }

    /// Arms of different workflows never share a table.
    #[test]
    fn workflows_are_separate_tables() {
        let page = page();
        let arms =
            &page[page.find("<section id=\"arms\">").unwrap()..page.find("<section id=\"categories\">").unwrap()];
        let groups: Vec<&str> = arms.split("<div class=\"workflow\"").skip(1).collect();
        assert_eq!(groups.len(), 2);
        assert!(groups[0].contains("data-workflow=\"deep_research\""));
        assert!(groups[0].contains(ALPHA) && groups[0].contains(BETA_SIM) && !groups[0].contains(GAMMA));
        assert!(groups[1].contains(GAMMA) && !groups[1].contains(&format!(">{ALPHA}<")));
    }

    /// The sections come in the order the brief asks, the method block has
    /// the collapsed question hashes and served judge models, the
    /// publication block says what is not declared, and the comparison's
    /// statement is there verbatim.
    #[test]
    fn sections_and_blocks_are_complete() {
        let page = page();
        let mut last = 0;
        for (id, _) in SECTIONS {
            let at = page.find(&format!("<section id=\"{id}\">")).unwrap_or_else(|| panic!("no section {id}"));
            assert!(at > last, "section {id} out of order");
            last = at;
            assert!(page.contains(&format!("<a href=\"#{id}\">")), "toc lacks {id}");
        }
        assert!(page.contains("<details id=\"question-hashes\"><summary>2 questions"));
        assert!(page.contains(&"34".repeat(32)));
        assert!(page.contains(&format!("<li><code>{SERVED_JUDGE}</code>: 12</li>")));
        assert!(page.contains("<strong>Internally commissioned</strong>: Example Lab"));
        assert_eq!(page.matches("<span class=\"nd\">not declared</span>").count(), 4);
        assert!(page.contains(&format!("<td class=\"statement\">{STATEMENT}</td>")));
        assert!(page.contains("[+0.0500, +0.4500]"));
        assert!(page.contains("web browsing"), "controls not disabled");
        assert!(page.contains("{&quot;note&quot;:&quot;&lt;i&gt;x&lt;/i&gt;&quot;"), "settings escaped");
        assert!(page.contains("<figure id=\"plot-rates_2esvg\">\n<svg"), "plots inlined");
        assert!(page.contains("metrics_version 3"));
    }

    /// Drill-downs open by a safe id, and show prompt, output, claims,
    /// evidence, verdict, served judge model and attempts.
    #[test]
    fn drill_downs_are_complete() {
        let page = page();
        assert_eq!(drill_id(ODD_RUN), "run-q_207_2fbeta_231");
        assert_eq!(drill_id("a_b"), "run-a_5fb");
        assert_ne!(drill_id("a_5fb"), drill_id("a_b"));
        for run in [HOSTILE_RUN, ODD_RUN] {
            let id = drill_id(run);
            let start = page.find(&format!("<details class=\"drill\" id=\"{id}\">")).unwrap();
            let body = &page[start..start + page[start..].find("</details>").unwrap()];
            assert!(body.contains("What colour is the sky?"));
            assert!(body.contains("<pre class=\"output\">"));
            assert!(body.contains("The sky is blue &lt;b&gt;"));
            assert!(body.contains("cites: [1], [2]"));
            assert!(body.contains("<span class=\"verdict v-yes\">YES</span>"));
            assert!(body.contains(&format!("judge model: {SERVED_JUDGE}")));
            assert!(body.contains("Why the sky is blue") && body.contains("source: <code>capture</code>"));
            assert!(body.contains("Rayleigh scattering &lt;em&gt;makes&lt;/em&gt;"));
            assert!(body.contains("<td>completed</td>") && body.contains("worker-1"));
            assert!(page.contains(&format!("<a href=\"#{id}\">")), "the runs table links to {id}");
        }
        assert!(page.contains("<tr><td><code>r-0002</code></td>"), "a run without drill-down has no link");
    }

    /// The gatherer's budget counts a drill-down as the bytes the page
    /// writes for it (an estimate from its texts alone counted about a
    /// third of them): at most the SIMULATED mark more per drill-down.
    #[test]
    fn a_drill_downs_size_is_its_bytes_on_the_page() {
        let (_, runs, drill) = fixture();
        let page = page();
        let mut shown = 0;
        for run in &runs {
            let Some(d) = drill.get(&run.run_id) else { continue };
            let start = page.find(&format!("<details class=\"drill\" id=\"{}\">", drill_id(&run.run_id))).unwrap();
            let end = start + page[start..].find("</details>\n").unwrap() + "</details>\n".len();
            let counted = super::drill_down_bytes(run, d);
            let mark = " <span class=\"sim\">SIMULATED</span>".len();
            assert!(counted >= end - start && counted <= end - start + mark, "{} vs {}", counted, end - start);
            shown += 1;
        }
        assert!(shown >= 2, "the fixture has drill-downs to measure");
    }

    /// A plot that is not plain plotter output is shown as text, not markup.
    #[test]
    fn foreign_svg_is_not_inlined() {
        assert!(inlinable_svg("<svg><text>drawn on 3 arms</text></svg>").is_some());
        assert!(inlinable_svg("<?xml version=\"1.0\"?>\n<svg></svg>").is_some());
        assert!(inlinable_svg("<svg onload=\"alert(1)\"></svg>").is_none());
        assert!(inlinable_svg("<svg><script>alert(1)</script></svg>").is_none());
        assert!(inlinable_svg("<svg><image href=\"http://x/\"/></svg>").is_none());
        assert!(inlinable_svg("<div></div>").is_none());
        let (summary, runs, drill) = fixture();
        let page = render_html(&summary, &runs, &drill, &[("x.svg".into(), "<svg onload=\"a()\"></svg>".into())]);
        assert!(page.contains("<pre>&lt;svg onload=&quot;a()&quot;&gt;&lt;/svg&gt;</pre>"));
    }

    /// A large cohort renders in one pass into a String of about the size
    /// reserved for it.
    #[test]
    fn large_runs_table_renders() {
        let (summary, runs, drill) = fixture();
        let many: Vec<RunView> = (0..100_000)
            .map(|i| {
                let mut run = runs[i % runs.len()].clone();
                run.run_id = format!("r-{i:06}");
                run
            })
            .collect();
        let start = std::time::Instant::now();
        let page = render_html(&summary, &many, &drill, &[]);
        let elapsed = start.elapsed();
        assert_eq!(page.matches("<tr><td><code>r-").count(), 100_000);
        eprintln!("100000 runs: {} bytes in {elapsed:?}", page.len());
    }

    /// The page written out as it fills is byte for byte the page held
    /// whole (it spills several times here), and a failing file is an
    /// error, not a short page.
    #[test]
    fn streamed_page_is_the_whole_page() {
        let (summary, runs, drill) = fixture();
        let many: Vec<RunView> = (0..20_000)
            .map(|i| {
                let mut run = runs[i % runs.len()].clone();
                if i >= runs.len() {
                    run.run_id = format!("r-{i:06}");
                }
                run
            })
            .collect();
        let plots = [("x.svg".to_owned(), "<svg><text>a</text></svg>".to_owned())];
        let whole = render_html(&summary, &many, &drill, &plots);
        assert!(whole.len() > 3 * SPILL_BYTES, "the test must spill: {} bytes", whole.len());
        let mut streamed = Vec::new();
        render_html_into(&mut streamed, &summary, &many, &drill, &plots).unwrap();
        assert!(streamed == whole.as_bytes(), "the streamed page differs");

        struct Full(usize);
        impl std::io::Write for Full {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0 + buf.len() > SPILL_BYTES {
                    return Err(std::io::Error::other("disk full"));
                }
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let err = render_html_into(&mut Full(0), &summary, &many, &drill, &plots).unwrap_err();
        assert_eq!(err.to_string(), "disk full");
    }
}
