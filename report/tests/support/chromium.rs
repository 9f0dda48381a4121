//! Headless Chromium for the HTML tests (report/tests/html_chromium.rs and
//! cli/tests/report_html.rs include this file with `#[path]`): load a page
//! from a file with a fresh profile, return the DOM Chromium built and its
//! net log, and pick out of the log the requests the page itself made.
//!
//! Chromium makes background requests of its own (component and extension
//! updates, an account check) whatever the flags; they are the browser's,
//! not the page's, and `--host-resolver-rules` maps every host name to "not
//! found" so none of them leaves the machine. The page's requests are told
//! apart by their network isolation key, which names the page's site
//! (`file://`) for everything the page loads.

#![allow(dead_code)] // each including test uses part of it
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// A headless page load takes a few seconds; a hung browser fails the test.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

/// What one headless Chromium run produced.
pub struct Loaded {
    pub dom: String,
    pub netlog: serde_json::Value,
}

pub fn require_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)"
    );
}

/// The flags of a headless Chromium that reaches nothing on its own (no
/// background, update, sync or QUIC traffic): the report's page tests and
/// the review sheet's browser test start it with these.
pub const HEADLESS_FLAGS: [&str; 12] = [
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
];

/// Runs Chromium headless on `page` with a fresh profile and a net log;
/// `extra` are more flags (`--dump-dom`, `--screenshot=...`).
pub fn chromium(dir: &Path, page: &Path, extra: &[String]) -> Loaded {
    require_chromium();
    let profile = tempfile::tempdir_in(dir).unwrap();
    let netlog = dir.join(format!("netlog-{}.json", profile.path().file_name().unwrap().to_string_lossy()));
    let stdout_path = dir.join("stdout.html");
    let stderr_path = dir.join("stderr.txt");
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let mut command = Command::new(CHROMIUM);
    command
        .args(HEADLESS_FLAGS)
        // Keeps Chromium's own background requests on this machine.
        .arg("--host-resolver-rules=MAP * ~NOTFOUND")
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
pub struct Request {
    pub url: String,
    pub isolation_key: String,
}

/// Every URL_REQUEST_START_JOB of the net log.
pub fn requests(netlog: &serde_json::Value) -> Vec<Request> {
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
pub fn page_fetches(netlog: &serde_json::Value) -> Vec<Request> {
    requests(netlog)
        .into_iter()
        .filter(|request| request.isolation_key.contains("file://"))
        .filter(|request| !(request.url.starts_with("file://") || request.url.starts_with("data:")))
        .collect()
}

pub fn temp_page(dir: &Path, name: &str, html: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, html).unwrap();
    path
}
