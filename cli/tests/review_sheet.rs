//! The review sheet in a real browser (issue 21). Debian's headless
//! Chromium, driven through the DevTools protocol over a pipe (no
//! WebDriver, nothing downloaded), opens a reviewer's sheet of the offline
//! quickstart, labels every item with the keyboard, is reloaded half-way
//! (the labels are kept), and saves the labels with the page's own
//! `Download labels` button (`Browser.setDownloadBehavior`). `cohort review
//! import` reads the file, and the imported review equals a CSV import of
//! the same labels into a copy of the cohort. Then the adjudication sheet
//! of the disagreements with the second reviewer, the same way. Chromium's
//! net log and the DevTools Network events show the page requested
//! nothing. A sheet's file from one export is refused by another, naming
//! both.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

#[path = "../../report/tests/support/chromium.rs"]
mod chromium;
mod support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::review::{collected_quickstart, copy_tree, imported_reviewers, items, report_review, write_csv};
use support::{cohort, ok};

const LABELS: [&str; 5] = ["fully_supported", "partially_supported", "unsupported", "contradicted", "unverifiable"];
const REASONS: [&str; 4] = ["broken", "fabricated", "inaccessible", "irrelevant"];

// === a DevTools protocol client over --remote-debugging-pipe ===

/// Chromium reads commands on fd 3 and writes replies and events on fd 4,
/// each message JSON ended by a NUL byte. The two fds are named pipes the
/// shell that execs Chromium opens (the test forbids `unsafe`, so it does
/// not set up fds itself); a reader thread turns fd 4 into messages.
struct Browser {
    child: Child,
    to: fs::File,
    from: mpsc::Receiver<Value>,
    next: u64,
    /// Every event received, in order (`Network.requestWillBeSent`, ...).
    events: Vec<Value>,
    netlog: PathBuf,
}

impl Browser {
    fn start(dir: &Path) -> Browser {
        chromium::require_chromium();
        let (to_path, from_path) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for p in [&to_path, &from_path] {
            assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
        }
        let profile = dir.join("profile");
        let netlog = dir.join("netlog.json");
        let flags: Vec<&str> = chromium::HEADLESS_FLAGS
            .into_iter()
            .chain(["--window-size=1400,1000", "--remote-debugging-pipe"])
            .collect();
        let script = format!(
            "exec {} {} '--host-resolver-rules=MAP * ~NOTFOUND' --user-data-dir='{}' --log-net-log='{}' about:blank 3<'{}' 4>'{}'",
            chromium::CHROMIUM,
            flags.join(" "),
            profile.display(),
            netlog.display(),
            to_path.display(),
            from_path.display()
        );
        let child = Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.join("chromium.out")).unwrap())
            .stderr(fs::File::create(dir.join("chromium.err")).unwrap())
            .spawn()
            .unwrap();
        let to = fs::OpenOptions::new().write(true).open(&to_path).unwrap();
        let mut reader = fs::File::open(&from_path).unwrap();
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut buf, mut chunk) = (Vec::new(), [0u8; 65536]);
            while let Ok(n) = reader.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|b| *b == 0) {
                    let message: Vec<u8> = buf.drain(..=end).collect();
                    if tx.send(serde_json::from_slice(&message[..end]).unwrap()).is_err() {
                        return;
                    }
                }
            }
        });
        Browser { child, to, from, next: 0, events: Vec::new(), netlog }
    }

    /// Sends a command (to the page's session when given) and waits for
    /// its reply, keeping the events that arrive meanwhile.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let reply = self.from.recv_timeout(Duration::from_secs(60)).expect("chromium answers within 60 s");
            if reply["id"].as_u64() == Some(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
            self.events.push(reply);
        }
    }

    /// Waits for an event `method` whose params satisfy `pred`.
    fn wait_event(&mut self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(e) = self.events.iter().find(|e| e["method"] == method && pred(&e["params"])) {
            return e.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self.from.recv_timeout(left).unwrap_or_else(|_| panic!("no {method} within 60 s"));
            self.events.push(event.clone());
            if event["method"] == method && pred(&event["params"]) {
                return event;
            }
        }
    }

    /// Closes the browser and returns its net log.
    fn close(mut self) -> Value {
        let _ = self.call(None, "Browser.close", json!({}));
        let started = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(started.elapsed() < Duration::from_secs(60), "chromium did not exit");
            std::thread::sleep(Duration::from_millis(100));
        }
        let text = fs::read_to_string(&self.netlog).unwrap();
        serde_json::from_str(&text)
            .or_else(|_| serde_json::from_str(&format!("{}]}}", text.trim_end().trim_end_matches(','))))
            .unwrap()
    }
}

/// A page of the browser: its DevTools session.
struct Page {
    session: String,
}

impl Page {
    fn open(browser: &mut Browser, downloads: &Path) -> Page {
        let targets = browser.call(None, "Target.getTargets", json!({}));
        let target = targets["targetInfos"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target")["targetId"]
            .clone();
        let attached = browser.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true}));
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        for method in ["Page.enable", "Network.enable", "Runtime.enable"] {
            browser.call(Some(&session), method, json!({}));
        }
        browser.call(
            None,
            "Browser.setDownloadBehavior",
            json!({"behavior": "allow", "downloadPath": downloads.display().to_string(), "eventsEnabled": true}),
        );
        Page { session }
    }

    fn eval(&self, b: &mut Browser, expression: &str) -> Value {
        let r = b.call(
            Some(&self.session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }

    fn load(&self, b: &mut Browser, navigate: Option<&str>) {
        b.events.retain(|e| e["method"] != "Page.loadEventFired");
        match navigate {
            Some(url) => b.call(Some(&self.session), "Page.navigate", json!({"url": url})),
            None => b.call(Some(&self.session), "Page.reload", json!({})),
        };
        b.wait_event("Page.loadEventFired", |_| true);
    }

    /// One key press as the keyboard makes it.
    fn key(&self, b: &mut Browser, key: &str) {
        let (code, vk) = match key {
            "Escape" => ("Escape".to_owned(), 27),
            "Enter" => ("Enter".to_owned(), 13),
            k if k.len() == 1 && k.as_bytes()[0].is_ascii_digit() => (format!("Digit{k}"), u32::from(k.as_bytes()[0])),
            k => (format!("Key{}", k.to_ascii_uppercase()), u32::from(k.to_ascii_uppercase().as_bytes()[0])),
        };
        let text = if key.len() == 1 { key } else { "" };
        for kind in ["keyDown", "keyUp"] {
            b.call(
                Some(&self.session),
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "code": code, "text": if kind == "keyDown" { text } else { "" },
                       "windowsVirtualKeyCode": vk}),
            );
        }
    }

    fn arrow_down(&self, b: &mut Browser) {
        for kind in ["keyDown", "keyUp"] {
            b.call(
                Some(&self.session),
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": "ArrowDown", "code": "ArrowDown", "windowsVirtualKeyCode": 40}),
            );
        }
    }

    fn type_text(&self, b: &mut Browser, text: &str) {
        b.call(Some(&self.session), "Input.insertText", json!({"text": text}));
    }

    fn current(&self, b: &mut Browser) -> String {
        self.eval(b, "window.cohortSheet.current()").as_str().unwrap_or_default().to_owned()
    }

    fn done(&self, b: &mut Browser) -> (u64, u64) {
        let v = self.eval(
            b,
            "(function(){var o=document.getElementById('overall');return [+o.dataset.done,+o.dataset.total];})()",
        );
        (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())
    }

    /// A real mouse click on the element `selector`.
    fn click(&self, b: &mut Browser, selector: &str) {
        let at = self.eval(
            b,
            &format!(
                "(function(){{var e=document.querySelector('{selector}');e.scrollIntoView();var r=e.getBoundingClientRect();return [r.left+r.width/2,r.top+r.height/2];}})()"
            ),
        );
        for kind in ["mousePressed", "mouseReleased"] {
            b.call(
                Some(&self.session),
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": at[0], "y": at[1], "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Clicks `Download labels` and returns the saved file.
    fn download(&self, b: &mut Browser, downloads: &Path) -> PathBuf {
        b.events.retain(|e| e["method"] != "Browser.downloadProgress" && e["method"] != "Browser.downloadWillBegin");
        self.click(b, "#download");
        let begin = b.wait_event("Browser.downloadWillBegin", |_| true);
        let name = begin["params"]["suggestedFilename"].as_str().unwrap().to_owned();
        b.wait_event("Browser.downloadProgress", |p| p["state"] == "completed");
        downloads.join(name)
    }
}

/// Requests the page made (DevTools `Network.requestWillBeSent`) to
/// anything but its own file and the blob it saves.
fn network_requests(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_owned))
        .filter(|u| {
            !(u.starts_with("file://") || u.starts_with("blob:") || u.starts_with("data:") || u == "about:blank")
        })
        .collect()
}

// === the cohort ===

/// What a reviewer decides for each item: claim i's label is `LABELS[i %
/// 5]` (with a reason when unverifiable), pair i yes or a reason, output i
/// scored `i % 3`. Per the extraction check: claim 1 is split, claim 2
/// repeats claim 1's neighbour, claim 3 is an opinion; one missed claim is
/// added to the first output, citing [1].
#[derive(Clone)]
struct Plan {
    shift: usize,
}

impl Plan {
    fn claim(&self, i: usize) -> &'static str {
        LABELS[(i + self.shift * usize::from(i % 4 == 1)) % 5]
    }
    fn pair(&self, i: usize) -> Option<&'static str> {
        let k = (i + self.shift * usize::from(i % 5 == 2)) % 5;
        (k != 0 && k != 3).then(|| REASONS[k % 4])
    }
    fn score(&self, i: usize) -> usize {
        (i + self.shift * usize::from(i.is_multiple_of(4))) % 3
    }

    /// The labels as the CSV rows of `reviewer`.
    fn rows(&self, items: &[BTreeMap<String, String>], reviewer: &str) -> Vec<BTreeMap<String, String>> {
        let mut out = Vec::new();
        let (mut c, mut p, mut u) = (0, 0, 0);
        let first_output = items[0]["output"].clone();
        let mut last_claim_of_output: BTreeMap<String, String> = BTreeMap::new();
        let mut split_claim = String::new();
        for item in items {
            let mut row: BTreeMap<String, String> = BTreeMap::new();
            for k in ["item_id", "kind", "output"] {
                row.insert(k.into(), item[k].clone());
            }
            row.insert("reviewer".into(), reviewer.into());
            match item["kind"].as_str() {
                "claim" => {
                    match c {
                        1 => {
                            split_claim = item["item_id"].clone();
                            row.insert("split".into(), "the first part || the second part".into());
                            row.insert("label".into(), "fully_supported || unverifiable".into());
                            row.insert("reason".into(), " || the record is lost".into());
                        }
                        2 if last_claim_of_output.contains_key(&item["output"]) => {
                            row.insert("merge_with".into(), last_claim_of_output[&item["output"]].clone());
                        }
                        3 => {
                            row.insert("not_factual".into(), "opinion".into());
                        }
                        _ => {
                            row.insert("label".into(), self.claim(c).into());
                            if self.claim(c) == "unverifiable" {
                                row.insert("reason".into(), "the page is gone".into());
                            }
                            if self.claim(c) == "contradicted" {
                                row.insert("reason".into(), "the cited page gives another year".into());
                            }
                        }
                    }
                    last_claim_of_output.insert(item["output"].clone(), item["item_id"].clone());
                    c += 1;
                }
                "pair" => {
                    let reason = self.pair(p);
                    row.insert("supports".into(), if reason.is_none() { "yes" } else { "no" }.into());
                    row.insert("reason".into(), reason.unwrap_or_default().into());
                    // A split claim's pair: one verdict per part.
                    if item["claim_item"] == split_claim {
                        let first = reason.map_or("yes", |_| "no");
                        row.insert("supports".into(), format!("{first} || no"));
                        row.insert("reason".into(), format!("{} || irrelevant", reason.unwrap_or_default()));
                    }
                    row.insert("secondary".into(), if p % 4 == 1 { "yes" } else { "no" }.into());
                    p += 1;
                }
                _ => {
                    row.insert("uncertainty".into(), self.score(u).to_string());
                    row.insert("abstained".into(), if u == 1 { "yes" } else { "no" }.into());
                    u += 1;
                }
            }
            out.push(row);
        }
        let added = [
            ("reviewer", reviewer),
            ("item_id", "a1"),
            ("kind", "added"),
            ("output", first_output.as_str()),
            ("claim", "A claim the extraction missed."),
            ("cited", "1"),
            ("cited_supports", "yes"),
            ("label", "unsupported"),
        ];
        out.push(added.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        out
    }
}

const CSV_HEADER: [&str; 16] = [
    "reviewer",
    "item_id",
    "kind",
    "output",
    "claim",
    "cited",
    "label",
    "reason",
    "supports",
    "secondary",
    "cited_supports",
    "uncertainty",
    "abstained",
    "split",
    "merge_with",
    "not_factual",
];

/// Labels the focused card of a reviewer's sheet the way `rows` says,
/// with the keyboard only.
fn label_card(page: &Page, b: &mut Browser, key: &str, by_id: &BTreeMap<String, BTreeMap<String, String>>) {
    let (kind, id) = key.split_once(':').unwrap();
    let digit = |list: &[&str], v: &str| (list.iter().position(|x| *x == v).unwrap() + 1).to_string();
    match kind {
        "ext" => {
            let row = &by_id[id];
            if !row.get("split").is_none_or(String::is_empty) {
                page.key(b, "2");
                page.type_text(b, row["split"].as_str());
                page.key(b, "Escape");
            } else if let Some(with) = row.get("merge_with").filter(|w| !w.is_empty()) {
                page.key(b, "3");
                // The select lists the answer's other claims in order.
                let options: Vec<String> = serde_json::from_value(
                    page.eval(b, "Array.from(document.activeElement.options).map(function(o){return o.value;})"),
                )
                .unwrap();
                for _ in 0..options.iter().position(|o| o == with).unwrap() {
                    page.arrow_down(b);
                }
                page.key(b, "Escape");
            } else if row.get("not_factual").is_some_and(|n| !n.is_empty()) {
                page.key(b, "4");
                page.arrow_down(b);
                page.arrow_down(b); // (choose), advice, opinion
                page.key(b, "Escape");
            } else {
                page.key(b, "1");
            }
        }
        "add" => {
            let added = by_id.get(&format!("added:{id}"));
            if let Some(row) = added {
                page.key(b, "a");
                page.type_text(b, &row["claim"]);
                page.key(b, "Escape");
                page.key(b, "c");
                page.type_text(b, &row["cited"]);
                page.key(b, "Escape");
                page.key(b, "v");
                page.type_text(b, &row["cited_supports"]);
                page.key(b, "Escape");
                page.key(b, &digit(&LABELS, &row["label"]));
            }
        }
        "claim" => {
            let row = &by_id[id];
            if row.get("merge_with").is_some_and(|m| !m.is_empty())
                || row.get("not_factual").is_some_and(|n| !n.is_empty())
            {
                return;
            }
            let labels: Vec<&str> = row["label"].split("||").map(str::trim).collect();
            let reasons: Vec<&str> = row.get("reason").map_or("", String::as_str).split("||").map(str::trim).collect();
            for (i, l) in labels.iter().enumerate() {
                page.key(b, &digit(&LABELS, l));
                if *l == "unverifiable" || *l == "contradicted" {
                    page.type_text(b, reasons.get(i).copied().unwrap_or_default());
                    page.key(b, "Escape");
                }
            }
        }
        "pair" => {
            let row = &by_id[id];
            let reasons: Vec<&str> = row["reason"].split("||").map(str::trim).collect();
            for (k, supports) in row["supports"].split("||").map(str::trim).enumerate() {
                let n = if supports == "yes" { 1 } else { 2 + REASONS.iter().position(|r| *r == reasons[k]).unwrap() };
                page.key(b, &n.to_string());
            }
            page.key(b, if row["secondary"] == "yes" { "s" } else { "o" });
        }
        "unc" => {
            let row = &by_id[id];
            page.key(b, &row["uncertainty"]);
            if row["abstained"] == "yes" {
                page.key(b, "x");
            }
        }
        "added" => {}
        other => panic!("unknown card {other}"),
    }
}

/// The review of a cohort as imported, with the files' names left out
/// (they differ by path and extension by design).
fn imported_review(dir: &Path) -> (Vec<cohort_report::review::import::ReviewerLabels>, Option<Value>) {
    let input = cohort_report::review::load(dir).unwrap().unwrap();
    let adjudication = input.adjudication.map(|a| json!({"adjudicator": a.adjudicator, "decisions": a.decisions}));
    (imported_reviewers(dir), adjudication)
}

/// The round trip of the module docs, reviewer then adjudicator.
#[test]
fn a_sheet_labelled_with_the_keyboard_imports_as_its_csv_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = collected_quickstart(tmp.path());
    let export = tmp.path().join("export");
    ok(&cohort(&[
        "review",
        "export",
        dir.to_str().unwrap(),
        "--reviewers",
        "alice,bob",
        "--out",
        export.to_str().unwrap(),
    ]));
    let twin = tmp.path().join("twin");
    copy_tree(&dir, &twin);
    let printed = ok(&cohort(&["review", "sheet", dir.to_str().unwrap(), "--reviewer", "alice"]));
    let sheet = export.join("alice").join("sheet.html");
    assert!(printed.contains(&sheet.display().to_string()), "{printed}");

    let alice_items = items(&export, "alice");
    let alice = Plan { shift: 0 }.rows(&alice_items, "alice");
    let bob = Plan { shift: 1 }.rows(&items(&export, "bob"), "bob");
    let mut by_id: BTreeMap<String, BTreeMap<String, String>> =
        alice.iter().map(|r| (r["item_id"].clone(), r.clone())).collect();
    let added = alice.last().unwrap().clone();
    by_id.insert(format!("added:{}", added["output"]), added);

    let downloads = tmp.path().join("downloads");
    fs::create_dir_all(&downloads).unwrap();
    let browser_dir = tempfile::tempdir_in(tmp.path()).unwrap();
    let mut b = Browser::start(browser_dir.path());
    let page = Page::open(&mut b, &downloads);
    let url = format!("file://{}", sheet.canonicalize().unwrap().display());
    page.load(&mut b, Some(&url));
    let (_, total) = page.done(&mut b);
    let mut seen = 0;
    let mut reloaded = false;
    loop {
        let key = page.current(&mut b);
        label_card(&page, &mut b, &key, &by_id);
        seen += 1;
        page.key(&mut b, "j");
        let next = page.current(&mut b);
        if next == key {
            break;
        }
        if !reloaded && seen >= total / 2 && next.starts_with("pair:") {
            // Half-way: a reload keeps every label (localStorage), and `n`
            // goes to the first unfinished card, the one after the last
            // labelled (a pair: always required).
            let before = page.done(&mut b);
            page.load(&mut b, None);
            assert_eq!(page.done(&mut b), before, "the labels survive a reload");
            page.key(&mut b, "n");
            assert_eq!(page.current(&mut b), next, "every card before {next} is done after the reload");
            reloaded = true;
        }
    }
    assert!(reloaded);
    let (done, total) = page.done(&mut b);
    assert_eq!(done, total, "every card is labelled");
    let file = page.download(&mut b, &downloads);
    let events = b.events.clone();
    let netlog = b.close();
    let fetched = chromium::page_fetches(&netlog);
    let fetched: Vec<_> = fetched.iter().filter(|r| !r.url.starts_with("blob:")).collect();
    assert!(fetched.is_empty(), "the sheet fetched {fetched:?}");
    assert_eq!(network_requests(&events), Vec::<String>::new(), "no network request in the DevTools events");

    // The downloaded labels import as the CSV of the same labels does.
    let d = dir.to_str().unwrap();
    ok(&cohort(&["review", "import", d, file.to_str().unwrap()]));
    let (bob_csv, alice_csv) = (tmp.path().join("bob.csv"), tmp.path().join("alice.csv"));
    write_csv(&bob_csv, &CSV_HEADER, &bob);
    write_csv(&alice_csv, &CSV_HEADER, &alice);
    ok(&cohort(&["review", "import", d, bob_csv.to_str().unwrap()]));
    ok(&cohort(&["review", "import", twin.to_str().unwrap(), alice_csv.to_str().unwrap(), bob_csv.to_str().unwrap()]));
    assert!(dir.join(".cohort/review/imported/reviewer-alice.json").is_file());
    assert_eq!(imported_review(&dir), imported_review(&twin), "the sheet's import equals the CSV's");
    let review = report_review(&dir, &tmp.path().join("r1"));
    assert_eq!(review, report_review(&twin, &tmp.path().join("r2")), "the same review metrics");

    // The adjudication sheet: the disagreements, decided with the keyboard.
    ok(&cohort(&["review", "sheet", d, "--adjudicate"]));
    let adj_sheet = export.join("adjudication-sheet.html");
    let html = fs::read_to_string(&adj_sheet).unwrap();
    let start = html.find("id=\"sheet-data\">").unwrap() + "id=\"sheet-data\">".len();
    let data: Value = serde_json::from_str(&html[start..start + html[start..].find("</script>").unwrap()]).unwrap();
    let disagreements = data["disagreements"].as_array().unwrap().clone();
    assert!(disagreements.len() > 5, "{}", disagreements.len());
    for d in &disagreements {
        let who: Vec<&str> =
            d["reviewers"].as_array().unwrap().iter().map(|r| r["reviewer"].as_str().unwrap()).collect();
        assert_eq!(who, ["alice", "bob"], "both labels side by side");
    }
    let browser_dir = tempfile::tempdir_in(tmp.path()).unwrap();
    let mut b = Browser::start(browser_dir.path());
    let page = Page::open(&mut b, &downloads);
    page.load(&mut b, Some(&format!("file://{}", adj_sheet.canonicalize().unwrap().display())));
    page.eval(&mut b, "document.querySelector('[data-role=adjudicator]').focus()");
    page.type_text(&mut b, "carol");
    page.key(&mut b, "Escape");
    let mut adjudication = Vec::new();
    for d in &disagreements {
        let unit = d["unit"].as_str().unwrap();
        assert_eq!(page.current(&mut b), format!("adj:{unit}"));
        // The first reviewer's label, where it is a final label; else the first allowed.
        let allowed: Vec<&str> = d["allowed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let theirs = d["reviewers"][0]["label"].as_str().unwrap();
        let (final_label, reason) = if d["kind"] == "pair" {
            ("no", "irrelevant")
        } else if allowed.contains(&theirs) && theirs != "unverifiable" && theirs != "contradicted" {
            (theirs, "")
        } else {
            (allowed[0], "")
        };
        let n = if d["kind"] == "pair" { 5 } else { allowed.iter().position(|a| *a == final_label).unwrap() + 1 };
        page.key(&mut b, &n.to_string());
        page.key(&mut b, "r");
        page.type_text(&mut b, "read the source again");
        page.key(&mut b, "Escape");
        page.key(&mut b, "j");
        adjudication.push(
            [
                ("item_id", unit),
                ("final_label", final_label),
                ("reason", reason),
                ("rationale", "read the source again"),
                ("adjudicator", "carol"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<String, String>>(),
        );
    }
    let file = page.download(&mut b, &downloads);
    let events = b.events.clone();
    let netlog = b.close();
    assert!(chromium::page_fetches(&netlog).iter().all(|r| r.url.starts_with("blob:")));
    assert_eq!(network_requests(&events), Vec::<String>::new());
    ok(&cohort(&["review", "import", d, file.to_str().unwrap()]));
    let adj_csv = tmp.path().join("adjudication.csv");
    write_csv(&adj_csv, &["item_id", "final_label", "reason", "rationale", "adjudicator"], &adjudication);
    ok(&cohort(&["review", "import", twin.to_str().unwrap(), adj_csv.to_str().unwrap()]));
    assert_eq!(imported_review(&dir), imported_review(&twin), "the adjudication sheet's import equals the CSV's");
    let review = report_review(&dir, &tmp.path().join("r3"));
    assert_eq!(review, report_review(&twin, &tmp.path().join("r4")));
    let text = review.to_string();
    assert!(!text.contains("await adjudication"), "every disagreement was adjudicated: {text}");
}

/// A sheet's labels file names its export: imported into the same cohort
/// exported again (another round, other codes) it is refused, exit 2,
/// naming the sheet's id and both exports' hashes; nothing is kept.
#[test]
fn a_sheet_file_from_another_export_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = collected_quickstart(tmp.path());
    let other = tmp.path().join("other");
    copy_tree(&dir, &other);
    let (ea, eb) = (tmp.path().join("ea"), tmp.path().join("eb"));
    for (d, e) in [(&dir, &ea), (&other, &eb)] {
        ok(&cohort(&[
            "review",
            "export",
            d.to_str().unwrap(),
            "--reviewers",
            "alice,bob",
            "--out",
            e.to_str().unwrap(),
        ]));
        ok(&cohort(&["review", "sheet", d.to_str().unwrap(), "--reviewer", "alice"]));
    }
    let data = |sheet: &Path| -> Value {
        let html = fs::read_to_string(sheet).unwrap();
        let start = html.find("id=\"sheet-data\">").unwrap() + "id=\"sheet-data\">".len();
        serde_json::from_str(&html[start..start + html[start..].find("</script>").unwrap()]).unwrap()
    };
    let (a, b) = (data(&ea.join("alice/sheet.html")), data(&eb.join("alice/sheet.html")));
    assert_ne!(a["export_sha256"], b["export_sha256"]);
    // The file A's sheet saves (its shape: kind, ids, one row per line).
    let rows: Vec<String> = Plan { shift: 0 }
        .rows(&items(&ea, "alice"), "alice")
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    let file = tmp.path().join("labels-alice.json");
    fs::write(
        &file,
        format!(
            "{{\"kind\":\"cohort-review-sheet-labels\",\"sheet_id\":{},\"export_sha256\":{},\"reviewer\":\"alice\",\"rows\":[\n{}\n]}}\n",
            a["sheet_id"],
            a["export_sha256"],
            rows.join(",\n")
        ),
    )
    .unwrap();
    let refused = cohort(&["review", "import", other.to_str().unwrap(), file.to_str().unwrap()]);
    let message = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{message}");
    for id in [&a["sheet_id"], &a["export_sha256"], &b["export_sha256"], &b["sheet_id"]] {
        assert!(message.contains(id.as_str().unwrap()), "the refusal names {id}: {message}");
    }
    assert!(!other.join(".cohort/review/imported").exists(), "nothing was kept");
    // And against its own export it imports.
    ok(&cohort(&["review", "import", dir.to_str().unwrap(), file.to_str().unwrap()]));
}
