//! Human review in Label Studio (issue 21), against the real thing: the
//! `label-studio` server from PyPI (`LABEL_STUDIO_BIN`, which
//! scripts/test.sh sets to its venv, else `label-studio` on PATH) on a free
//! loopback port with a data folder of its own. The test creates a project
//! from the labelling config `cohort review export --format label-studio`
//! wrote, imports its tasks, posts two annotators' annotations through the
//! REST API, exports the project as JSON (a snapshot export naming users
//! by email, and the plain export naming them by id), and imports both into
//! cohort: the imported review and the report's review metrics (kappa
//! included) equal a CSV import of the same labels into a copy of the
//! cohort. An annotator no reviewer maps to is refused, naming them.
//!
//! Without label-studio the test says so and passes, except under CI (env
//! `CI` set), where it fails. The server is stopped on every path (its
//! process group, from `Drop`), and every wait has a deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::review::{collected_quickstart, copy_tree, imported_reviewers, items, report_review};
use support::{cohort, ok};

const LABELS: [&str; 5] = ["fully_supported", "partially_supported", "unsupported", "contradicted", "unverifiable"];
const REASONS: [&str; 4] = ["broken", "fabricated", "inaccessible", "irrelevant"];
/// Label Studio's first start migrates its database: 30-60 s here.
const START_DEADLINE: Duration = Duration::from_secs(200);
const TOKEN: &str = "cohorttesttoken0123456789abcdef";

/// `LABEL_STUDIO_BIN`, else `label-studio` on PATH.
fn label_studio_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("LABEL_STUDIO_BIN").map(PathBuf::from) {
        return bin.is_file().then_some(bin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join("label-studio")).find(|p| p.is_file())
}

// === the server ===

/// A running `label-studio start`, stopped (its whole process group) when
/// dropped, so a failed assertion does not leave it behind.
struct Server {
    child: Child,
    api: Api,
    log: PathBuf,
}

/// The REST API of a server on `port`, with the admin's token.
#[derive(Clone, Copy)]
struct Api {
    port: u16,
}

impl Server {
    fn start(bin: &Path, dir: &Path) -> Server {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (data, log) = (dir.join("ls-data"), dir.join("label-studio.log"));
        let started = Instant::now();
        let child = Command::new(bin)
            .args(["start", "--no-browser", "--internal-host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--data-dir")
            .arg(&data)
            .args(["--username", "alice@example.org", "--password", "alice-password-1"])
            .args(["--user-token", TOKEN, "--enable-legacy-api-token", "--log-level", "WARNING"])
            .env("LABEL_STUDIO_BASE_DATA_DIR", &data)
            .env("HOME", dir)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(Stdio::from(fs::File::options().append(true).open(&log).unwrap()))
            .process_group(0)
            .spawn()
            .unwrap();
        let mut server = Server { child, api: Api { port }, log };
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("label-studio exited ({status}) before it was up: {}", server.log_tail());
            }
            if matches!(server.api.try_call("GET", "/health", None), Some((200, _))) {
                break;
            }
            assert!(
                started.elapsed() < START_DEADLINE,
                "label-studio is not up after {START_DEADLINE:?}: {}",
                server.log_tail()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!("label-studio was up after {:.1} s", started.elapsed().as_secs_f64());
        server
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Api {
    /// One HTTP/1.0 request (the server closes the connection after its
    /// answer, so the body is what is left); `None` when nothing answers.
    fn try_call(&self, method: &str, path: &str, body: Option<&Value>) -> Option<(u16, Vec<u8>)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let body = body.map(|b| serde_json::to_vec(b).unwrap()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nAuthorization: Token {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        );
        stream.write_all(head.as_bytes()).ok()?;
        stream.write_all(&body).ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).ok()?;
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
        let status = String::from_utf8_lossy(&answer[..end]).split(' ').nth(1)?.parse().ok()?;
        Some((status, answer[end + 4..].to_vec()))
    }

    /// A request that must succeed (2xx), its JSON answer.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, bytes) = self.try_call(method, path, body).unwrap_or_else(|| panic!("{method} {path}: no answer"));
        assert!((200..300).contains(&status), "{method} {path}: {status} {}", String::from_utf8_lossy(&bytes));
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let kill = |signal: &str| Command::new("kill").args([signal, "--", &group]).stderr(Stdio::null()).status();
        let _ = kill("-TERM");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = kill("-KILL");
        let _ = self.child.wait();
    }
}

// === the cohort and the labels ===

/// What a reviewer decides, as the CSV rows of `reviewer`: claim i's
/// label `LABELS[i % 5]` (shifted for some claims by the second reviewer,
/// so the two disagree), pair i yes or a reason, output i scored `i % 3`;
/// claim 1 is split, claim 2 repeats its neighbour, claim 3 is an opinion.
fn plan(items: &[BTreeMap<String, String>], reviewer: &str, shift: usize) -> Vec<BTreeMap<String, String>> {
    let claim = |i: usize| LABELS[(i + shift * usize::from(i % 4 == 1)) % 5];
    let pair = |i: usize| {
        let k = (i + shift * usize::from(i % 5 == 2)) % 5;
        (k != 0 && k != 3).then(|| REASONS[k % 4])
    };
    let score = |i: usize| (i + shift * usize::from(i.is_multiple_of(4))) % 3;
    let (mut c, mut p, mut u) = (0, 0, 0);
    let mut last_claim_of_output: BTreeMap<String, String> = BTreeMap::new();
    let mut split_claim = String::new();
    let mut out = Vec::new();
    for item in items {
        let mut row: BTreeMap<String, String> =
            ["item_id", "kind", "output"].iter().map(|k| ((*k).to_owned(), item[*k].clone())).collect();
        row.insert("reviewer".into(), reviewer.into());
        let mut set = |k: &str, v: &str| {
            row.insert(k.into(), v.into());
        };
        match item["kind"].as_str() {
            "claim" => {
                match c {
                    1 => {
                        split_claim.clone_from(&item["item_id"]);
                        set("split", "the first part || the second part");
                        set("label", "fully_supported || unverifiable");
                        set("reason", " || the record is lost");
                    }
                    2 if last_claim_of_output.contains_key(&item["output"]) => {
                        set("merge_with", &last_claim_of_output[&item["output"]]);
                    }
                    3 => set("not_factual", "opinion"),
                    _ => {
                        set("label", claim(c));
                        if claim(c) == "unverifiable" {
                            set("reason", "the page is gone");
                        }
                        if claim(c) == "contradicted" {
                            set("reason", "the cited page gives another year");
                        }
                    }
                }
                last_claim_of_output.insert(item["output"].clone(), item["item_id"].clone());
                c += 1;
            }
            "pair" => {
                set("supports", if pair(p).is_none() { "yes" } else { "no" });
                set("reason", pair(p).unwrap_or_default());
                // A split claim's pair: one verdict per part.
                if item["claim_item"] == split_claim {
                    set("supports", &format!("{} || no", pair(p).map_or("yes", |_| "no")));
                    set("reason", &format!("{} || irrelevant", pair(p).unwrap_or_default()));
                }
                set("secondary", if p % 4 == 1 { "yes" } else { "no" });
                p += 1;
            }
            _ => {
                set("uncertainty", &score(u).to_string());
                set("abstained", if u == 1 { "yes" } else { "no" });
                u += 1;
            }
        }
        out.push(row);
    }
    out
}

/// The Label Studio results an annotator submits for a row of `plan`,
/// control by control as the exported config names them.
fn results(row: &BTreeMap<String, String>) -> Vec<Value> {
    let get = |k: &str| row.get(k).map_or("", |s| s.trim());
    let (claim, sources, answer) = ("claim", "sources", "answer");
    let choice = |name: &str, to: &str, v: &str| json!({"from_name": name, "to_name": to, "type": "choices", "value": {"choices": [v]}});
    let text = |name: &str, v: Vec<&str>| json!({"from_name": name, "to_name": claim, "type": "textarea", "value": {"text": v}});
    let parts = |k: &str| get(k).split("||").map(str::trim).collect::<Vec<_>>();
    let mut out = Vec::new();
    match get("kind") {
        "claim" if !get("split").is_empty() => {
            out.push(choice("extraction", claim, "split"));
            out.push(text("split", parts("split")));
            out.push(text("split_labels", parts("label")));
            out.push(text("claim_reason", vec![get("reason")]));
        }
        "claim" if !get("merge_with").is_empty() => {
            out.push(choice("extraction", claim, "merge"));
            out.push(text("merge_with", vec![get("merge_with")]));
        }
        "claim" if !get("not_factual").is_empty() => {
            out.push(choice("extraction", claim, "not factual"));
            out.push(choice("not_factual", claim, get("not_factual")));
        }
        "claim" => {
            out.push(choice("label", claim, get("label")));
            if !get("reason").is_empty() {
                out.push(text("claim_reason", vec![get("reason")]));
            }
        }
        "pair" if get("supports").contains("||") => {
            let reasons = parts("reason");
            let verdicts: Vec<String> = parts("supports")
                .iter()
                .zip(&reasons)
                .map(|(s, r)| if *s == "yes" { "yes".to_owned() } else { format!("no:{r}") })
                .collect();
            let joined = verdicts.join(" || ");
            out.push(
                json!({"from_name": "pair_parts", "to_name": sources, "type": "textarea", "value": {"text": [joined]}}),
            );
            out.push(choice(
                "secondary",
                sources,
                if get("secondary") == "yes" { "only secondary" } else { "original" },
            ));
        }
        "pair" => {
            out.push(choice("supports", sources, get("supports")));
            if get("supports") == "no" {
                out.push(choice("pair_reason", sources, get("reason")));
            }
            out.push(choice(
                "secondary",
                sources,
                if get("secondary") == "yes" { "only secondary" } else { "original" },
            ));
        }
        _ => {
            out.push(choice("uncertainty", answer, get("uncertainty")));
            if get("abstained") == "yes" {
                out.push(choice("abstained", answer, "abstained"));
            }
        }
    }
    out
}

fn write_csv(path: &Path, rows: &[BTreeMap<String, String>]) {
    let header = [
        "reviewer",
        "item_id",
        "kind",
        "output",
        "label",
        "reason",
        "supports",
        "secondary",
        "uncertainty",
        "abstained",
        "split",
        "merge_with",
        "not_factual",
    ];
    support::review::write_csv(path, &header, rows);
}

#[test]
fn label_studio_annotations_import_as_their_csv_does() {
    let Some(bin) = label_studio_bin() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "label-studio is not installed (scripts/test.sh installs it and sets LABEL_STUDIO_BIN)"
        );
        eprintln!(
            "skipping: label-studio is not installed (set LABEL_STUDIO_BIN or put it on PATH; scripts/test.sh does)"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = collected_quickstart(tmp.path());
    let export = tmp.path().join("export");
    let d = dir.to_str().unwrap();
    let printed = ok(&cohort(&[
        "review",
        "export",
        d,
        "--reviewers",
        "alice,bob",
        "--out",
        export.to_str().unwrap(),
        "--format",
        "label-studio",
    ]));
    let project = export.join("label-studio");
    assert!(printed.contains(&project.join("label_config.xml").display().to_string()), "{printed}");
    assert!(export.join("alice/items.csv").is_file(), "the CSV path stays");
    let tasks: Vec<Value> = serde_json::from_slice(&fs::read(project.join("tasks.json")).unwrap()).unwrap();
    let alice_items = items(&export, "alice");
    assert_eq!(tasks.len(), alice_items.len(), "one task per exported item");
    // Blinded as the export: no arm id, only output codes.
    let blinding: Value = serde_json::from_slice(&fs::read(dir.join(".cohort/review/blinding.json")).unwrap()).unwrap();
    let tasks_text = fs::read_to_string(project.join("tasks.json")).unwrap();
    for arm in blinding["codes"].as_object().unwrap().keys() {
        assert!(!tasks_text.contains(arm.as_str()), "tasks.json names arm {arm}");
    }
    let (csv_twin, ids_twin) = (tmp.path().join("csv-twin"), tmp.path().join("ids-twin"));
    copy_tree(&dir, &csv_twin);
    copy_tree(&dir, &ids_twin);
    let alice = plan(&alice_items, "alice", 0);
    let bob = plan(&items(&export, "bob"), "bob", 1);

    // Label Studio: the project from the exported config, its tasks, two
    // annotators' annotations, and its two JSON exports.
    let (by_email, by_id, alice_id, bob_id) = {
        let server = Server::start(&bin, tmp.path());
        let api = server.api;
        let bob_user = api.call(
            "POST",
            "/api/users",
            Some(&json!({"email": "bob@example.org", "username": "bob", "first_name": "Bob"})),
        );
        let alice_id = api.call("GET", "/api/current-user/whoami", None)["id"].clone();
        let config = fs::read_to_string(project.join("label_config.xml")).unwrap();
        let created =
            api.call("POST", "/api/projects", Some(&json!({"title": "cohort review", "label_config": config})));
        let pid = created["id"].as_u64().unwrap();
        let imported = api.call(
            "POST",
            &format!("/api/projects/{pid}/import?return_task_ids=true"),
            Some(&Value::Array(tasks.clone())),
        );
        let task_ids: Vec<u64> = imported["task_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(task_ids.len(), tasks.len(), "{imported}");
        // The two annotators label at the same time, two tabs each.
        let posting = Instant::now();
        let mut work: Vec<(&Value, u64, &BTreeMap<String, String>)> = Vec::new();
        for (user, rows) in [(&alice_id, &alice), (&bob_user["id"], &bob)] {
            work.extend(task_ids.iter().zip(rows.iter()).map(|(task, row)| (user, *task, row)));
        }
        std::thread::scope(|s| {
            for share in work.chunks(work.len().div_ceil(4)) {
                s.spawn(move || {
                    for (user, task, row) in share {
                        let annotation = json!({"result": results(row), "completed_by": user});
                        api.call("POST", &format!("/api/tasks/{task}/annotations"), Some(&annotation));
                    }
                });
            }
        });
        eprintln!("posted {} annotations in {:.1} s", 2 * task_ids.len(), posting.elapsed().as_secs_f64());
        // A snapshot export names each annotator by id and email...
        let snapshot = api.call(
            "POST",
            &format!("/api/projects/{pid}/exports"),
            Some(&json!({"serialization_options": {"annotations__completed_by": {"only_id": false}}})),
        );
        let eid = snapshot["id"].as_u64().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while api.call("GET", &format!("/api/projects/{pid}/exports/{eid}"), None)["status"] != "completed" {
            assert!(Instant::now() < deadline, "the snapshot export is not done after 60 s");
            std::thread::sleep(Duration::from_millis(300));
        }
        let by_email = api.call("GET", &format!("/api/projects/{pid}/exports/{eid}/download?exportType=JSON"), None);
        // ... the plain export by id only.
        let by_id = api.call("GET", &format!("/api/projects/{pid}/export?exportType=JSON"), None);
        (by_email, by_id, alice_id, bob_user["id"].clone())
    };
    let (email_file, id_file) = (tmp.path().join("ls-by-email.json"), tmp.path().join("ls-by-id.json"));
    fs::write(&email_file, serde_json::to_vec(&by_email).unwrap()).unwrap();
    fs::write(&id_file, serde_json::to_vec(&by_id).unwrap()).unwrap();

    // By email: alice@... and bob@... are the export's reviewers.
    let printed = ok(&cohort(&["review", "import", d, "--format", "label-studio", email_file.to_str().unwrap()]));
    assert!(printed.contains("imported reviewer alice's labels") && printed.contains("bob"), "{printed}");
    let kept: Vec<String> = fs::read_dir(dir.join(".cohort/review/imported"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(kept.iter().any(|n| n.starts_with("label-studio-") && n.ends_with(".json")), "{kept:?}");
    assert!(kept.contains(&"reviewer-alice.jsonl".to_owned()) && kept.contains(&"reviewer-bob.jsonl".to_owned()));
    let again = cohort(&["review", "import", d, "--format", "label-studio", email_file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "a second import is refused: {}", String::from_utf8_lossy(&again.stderr));

    // By id: an unmapped annotator is refused, naming them; then mapped.
    let t = ids_twin.to_str().unwrap();
    let refused = cohort(&["review", "import", t, "--format", "label-studio", id_file.to_str().unwrap()]);
    let message = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{message}");
    assert!(message.contains("Label Studio user") && message.contains("--reviewer-map"), "{message}");
    assert!(!ids_twin.join(".cohort/review/imported").exists(), "nothing was kept");
    let map = format!("{alice_id}=alice,{bob_id}=bob");
    ok(&cohort(&[
        "review",
        "import",
        t,
        "--format",
        "label-studio",
        "--reviewer-map",
        &map,
        id_file.to_str().unwrap(),
    ]));

    // The CSV of the same labels, into the twin.
    let (alice_csv, bob_csv) = (tmp.path().join("alice.csv"), tmp.path().join("bob.csv"));
    write_csv(&alice_csv, &alice);
    write_csv(&bob_csv, &bob);
    ok(&cohort(&[
        "review",
        "import",
        csv_twin.to_str().unwrap(),
        alice_csv.to_str().unwrap(),
        bob_csv.to_str().unwrap(),
    ]));
    let csv_review = imported_reviewers(&csv_twin);
    assert_eq!(csv_review.len(), 2);
    assert_eq!(imported_reviewers(&dir), csv_review, "Label Studio (by email) imports as the CSV does");
    assert_eq!(imported_reviewers(&ids_twin), csv_review, "Label Studio (by id) imports as the CSV does");
    let review = report_review(&dir, &tmp.path().join("r1"));
    assert_eq!(review, report_review(&csv_twin, &tmp.path().join("r2")), "the same review metrics");
    let agreement = &review["agreement"];
    for kind in ["claims", "pairs", "uncertainty_quadratic"] {
        assert!(agreement[kind]["kappa"]["value"].is_number(), "a {kind} kappa: {agreement}");
    }
}
