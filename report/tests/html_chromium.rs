//! `index.html` in a real browser: Debian's Chromium, headless, loads the
//! fixture report from a file, and the test checks the DOM Chromium built
//! (every arm's row, a run's drill-down with its claim, verdict and served
//! judge model) and Chromium's own net log (the page requested nothing but
//! itself). A control page with a remote image proves the net-log check
//! sees a request when there is one.
//!
//! Chromium itself makes background requests (component and extension
//! updates, an account check) whatever the flags; they are the browser's,
//! not the page's, and `--host-resolver-rules` maps every host name to
//! "not found" so none of them leaves the machine. The check tells the
//! page's requests apart by their network isolation key, which names the
//! page's site (`file://`) for everything the page loads.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cohort_report::html::testing;

const CHROMIUM: &str = "/usr/bin/chromium";
/// A headless page load takes a few seconds; a hung browser fails the test.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

/// What one headless Chromium run produced.
struct Loaded {
    dom: String,
    netlog: serde_json::Value,
}

fn require_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)"
    );
}

/// Runs Chromium headless on `page` with a fresh profile and a net log;
/// `extra` are more flags (`--dump-dom`, `--screenshot=...`).
fn chromium(dir: &Path, page: &Path, extra: &[String]) -> Loaded {
    require_chromium();
    let profile = tempfile::tempdir_in(dir).unwrap();
    let netlog = dir.join(format!("netlog-{}.json", profile.path().file_name().unwrap().to_string_lossy()));
    let stdout_path = dir.join("stdout.html");
    let stderr_path = dir.join("stderr.txt");
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let mut command = Command::new(CHROMIUM);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-pings",
            "--disable-domain-reliability",
            // Keeps Chromium's own background requests on this machine.
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--log-net-log={}", netlog.display()))
        .args(extra)
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap());
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_TIMEOUT:?}: {}", fs::read_to_string(&stderr_path).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium failed ({status}): {}", fs::read_to_string(&stderr_path).unwrap());
    let text = fs::read_to_string(&netlog).unwrap();
    // A net log cut short (browser killed while writing) lacks its closing
    // brackets; Chromium's own viewer accepts it with them added.
    let netlog = serde_json::from_str(&text)
        .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
        .unwrap_or_else(|e| panic!("net log {} is not JSON: {e}", netlog.display()));
    Loaded { dom: fs::read_to_string(&stdout_path).unwrap(), netlog }
}

/// One URL request from the net log.
#[derive(Debug)]
struct Request {
    url: String,
    isolation_key: String,
}

/// Every URL_REQUEST_START_JOB of the net log.
fn requests(netlog: &serde_json::Value) -> Vec<Request> {
    let start_job = netlog["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("the net log names its event types");
    netlog["events"]
        .as_array()
        .expect("the net log has events")
        .iter()
        .filter(|event| event["type"].as_u64() == Some(start_job))
        .filter_map(|event| {
            let params = &event["params"];
            Some(Request {
                url: params["url"].as_str()?.to_string(),
                isolation_key: params["network_isolation_key"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Requests the page made to anything but a `file://` URL (or inline
/// `data:`): those whose isolation key names the page's site.
fn page_fetches(netlog: &serde_json::Value) -> Vec<Request> {
    requests(netlog)
        .into_iter()
        .filter(|request| request.isolation_key.contains("file://"))
        .filter(|request| !(request.url.starts_with("file://") || request.url.starts_with("data:")))
        .collect()
}

fn temp_page(dir: &Path, name: &str, html: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, html).unwrap();
    path
}

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
