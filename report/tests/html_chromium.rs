//! `index.html` in a real browser: Debian's Chromium, headless, loads the
//! fixture report from a file, and the test checks the DOM Chromium built
//! (every arm's row, a run's drill-down with its claim, verdict and served
//! judge model) and Chromium's own net log (the page requested nothing but
//! itself). A control page with a remote image proves the net-log check
//! sees a request when there is one. The browser plumbing is in
//! support/chromium.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

#[path = "support/chromium.rs"]
mod chromium;

use std::fs;
use std::path::Path;

use chromium::{chromium, page_fetches, requests, temp_page};
use cohort_report::html::testing;

/// The fixture report, opened in Chromium: every arm's count row and every
/// run's row are in the DOM, the hostile output is text (no script ran:
/// the title is unchanged and no `alert` element exists), a drill-down
/// carries its claim, verdict and served judge model, and the page
/// requested nothing but itself.
#[test]
fn index_html_renders_in_chromium_without_fetching() {
    let dir = tempfile::tempdir().unwrap();
    let page = temp_page(dir.path(), "index.html", &testing::fixture_page());
    let loaded = chromium(dir.path(), &page, &["--dump-dom".into()]);
    let dom = &loaded.dom;
    assert!(dom.contains("<title>cohort report: fixture &lt;cohort&gt; &amp; co</title>"), "{dom}");
    let (summary, runs, _) = testing::fixture();
    for arm in &summary.arms {
        assert!(
            dom.contains(&format!("<tr data-arm=\"{}\"><td><span class=\"arm\">{}</span>", arm.id, arm.id)),
            "row of {}",
            arm.id
        );
    }
    for run in &runs {
        assert!(dom.contains(&format!("<code>{}</code>", run.run_id)), "run {}", run.run_id);
    }
    assert!(dom.contains("SIMULATED"));
    let id = testing::drill_id(testing::HOSTILE_RUN);
    let start = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no drill-down {id} in the DOM"));
    let details = &dom[dom[..start].rfind("<details").unwrap()..];
    let details = &details[..details.find("</details>").unwrap()];
    assert!(details.contains("The sky is blue &lt;b&gt;on clear days&lt;/b&gt; [1]."), "{details}");
    assert!(details.contains(">YES</span>"), "{details}");
    assert!(details.contains(testing::SERVED_JUDGE), "{details}");
    assert!(details.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "the output is shown as text");
    // The script added the filter box, so it ran; the record's did not.
    assert!(dom.contains("id=\"run-filter\""), "the page's own script ran");
    assert_eq!(dom.matches("<script").count(), 1, "no script element from a record");
    assert!(!dom.contains("<img"), "no image element from a record");

    let all = requests(&loaded.netlog);
    let fetched = page_fetches(&loaded.netlog);
    assert!(fetched.is_empty(), "the page fetched {fetched:?} (all requests: {all:?})");
}

/// The net-log check can fail: a page with a remote image (and no CSP)
/// makes Chromium request it, and the check reports exactly that request.
#[test]
fn netlog_check_sees_a_remote_image() {
    let dir = tempfile::tempdir().unwrap();
    let page = temp_page(
        dir.path(),
        "control.html",
        "<!DOCTYPE html><html><body><p>control</p><img src=\"http://127.0.0.1:9/x.png\"></body></html>",
    );
    let loaded = chromium(dir.path(), &page, &["--dump-dom".into()]);
    let fetched = page_fetches(&loaded.netlog);
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    assert_eq!(fetched[0].url, "http://127.0.0.1:9/x.png");

    // And the same image inside the report's CSP is refused before any
    // request: the policy is what makes "fetches nothing" hold.
    let csp = temp_page(
        dir.path(),
        "csp.html",
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\"></head><body>\
         <img src=\"http://127.0.0.1:9/x.png\"></body></html>",
    );
    let loaded = chromium(dir.path(), &csp, &["--dump-dom".into()]);
    let fetched = page_fetches(&loaded.netlog);
    assert!(fetched.is_empty(), "the CSP let through {fetched:?}");
}

/// A screenshot of the fixture report at 1280 px wide comes out as a PNG
/// (kept at `$COHORT_HTML_SCREENSHOT` when set, with the page beside it, for
/// a person to look at).
#[test]
fn index_html_screenshot() {
    let dir = tempfile::tempdir().unwrap();
    let page = temp_page(dir.path(), "index.html", &testing::fixture_page());
    let shot = dir.path().join("index.png");
    chromium(
        dir.path(),
        &page,
        &[format!("--screenshot={}", shot.display()), "--window-size=1280,2000".into(), "--hide-scrollbars".into()],
    );
    let png = fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "not a real screenshot ({} bytes)", png.len());
    if let Some(keep) = std::env::var_os("COHORT_HTML_SCREENSHOT") {
        fs::write(&keep, &png).unwrap();
        fs::write(Path::new(&keep).with_extension("html"), testing::fixture_page()).unwrap();
    }
}

/// The first screen of the page, 1400 px wide (900 px high, a laptop's
/// screen), as Chromium lays it out: the publication state, every arm's
/// headline rates (value, fraction and interval) and the paired
/// comparisons are on it, and the method block starts below them (and is
/// still there, complete). A script added to a copy of the page measures
/// the elements where Chromium placed them and writes the numbers into the
/// DOM that `--dump-dom` prints.
#[test]
fn the_first_screen_shows_the_state_and_the_headline_before_the_method() {
    const WIDTH: u32 = 1400;
    const HEIGHT: f64 = 900.0;
    let dir = tempfile::tempdir().unwrap();
    let measure = "<script>(function(){var out=[];function at(name,el){if(!el){out.push(name+' missing');return;}\
        var r=el.getBoundingClientRect();out.push(name+' '+Math.round(r.top)+' '+Math.round(r.bottom)+' '+\
        Math.round(r.right));}\
        at('state',document.getElementById('publication-state'));\
        document.querySelectorAll('tr[data-headline-arm]').forEach(function(tr){at('arm:'+tr.getAttribute('data-headline-arm'),tr);});\
        document.querySelectorAll('#headline ul.statements li').forEach(function(li,i){at('statement:'+i,li);});\
        at('method',document.getElementById('method'));\
        var pre=document.createElement('pre');pre.id='layout';pre.textContent=out.join('\\n');\
        document.body.appendChild(pre);})();</script></body>";
    let page = testing::fixture_page().replace("</body>", measure);
    let path = temp_page(dir.path(), "index.html", &page);
    let loaded =
        chromium(dir.path(), &path, &["--dump-dom".into(), format!("--window-size={WIDTH},{}", HEIGHT as u32)]);
    let dom = &loaded.dom;
    let start = dom.find("<pre id=\"layout\">").expect("the measuring script ran") + "<pre id=\"layout\">".len();
    let layout = &dom[start..start + dom[start..].find("</pre>").unwrap()];
    let mut boxes = std::collections::BTreeMap::new();
    for line in layout.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 4, "{line} (layout: {layout})");
        let n: Vec<f64> = parts[1..].iter().map(|p| p.parse().unwrap()).collect();
        boxes.insert(parts[0].to_owned(), (n[0], n[1], n[2]));
    }
    let (summary, _, _) = testing::fixture();
    let state = boxes["state"];
    assert!(state.0 >= 0.0 && state.1 <= HEIGHT, "the state is on the first screen: {layout}");
    let method = boxes["method"];
    for arm in &summary.arms {
        let row = boxes[&format!("arm:{}", arm.id)];
        assert!(row.1 <= HEIGHT, "{}'s headline rates are on the first screen: {layout}", arm.id);
        assert!(row.2 <= f64::from(WIDTH), "{}'s headline rates fit the width: {layout}", arm.id);
        assert!(row.1 <= method.0, "{}'s headline rates come before the method block: {layout}", arm.id);
    }
    let statements: usize = summary.comparisons.iter().map(|c| c.differences.iter().count()).sum();
    for i in 0..statements {
        let li = boxes[&format!("statement:{i}")];
        assert!(li.1 <= HEIGHT && li.1 <= method.0, "comparison {i} is on the first screen: {layout}");
    }
    assert!(state.1 <= method.0, "the state comes before the method block: {layout}");
    // The method block is still complete below.
    for field in ["frozen at", "metrics_version", "collection window", "pinned served model", "verdicts"] {
        assert!(dom.contains(&format!("<dt>{field}")), "method field {field}");
    }
}
