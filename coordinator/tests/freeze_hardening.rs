//! Freeze hardening (issue 11): every field of a manifest is checked when a
//! frozen cohort is verified or loaded, and only regular files are read,
//! through a cap. Each test names the edit or the file it proves refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use cohort_coordinator::freeze::{AmendRequest, FreezeError, FreezeOptions, FreezeReport, freeze, load_frozen};
use cohort_core::hash::sha256_hex;
use cohort_core::manifest::Manifest;
use serde_json::{Value, json};

/// An edit of the manifest as JSON, of the manifest as a struct, and a
/// way to put something that is not a regular file at a path.
type JsonEdit<'a> = Box<dyn Fn(&mut Value) + 'a>;
type ManifestEdit = Box<dyn Fn(&mut Manifest)>;
type MakeFile = Box<dyn Fn(&Path)>;

/// A fresh copy of `examples/quickstart` at `TMP/quickstart`.
fn cohort() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("quickstart");
    fs::create_dir(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    for name in ["cohort.toml", "questions.json", "suffix.txt", "protocol.md", "rubric.md"] {
        fs::copy(example.join(name), dir.join(name)).unwrap();
    }
    (tmp, dir)
}

fn options() -> FreezeOptions {
    FreezeOptions { now: UNIX_EPOCH + Duration::from_secs(1_790_000_000), amend: None }
}

fn frozen() -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir) = cohort();
    assert!(matches!(freeze(&dir, &options()).unwrap(), FreezeReport::Frozen { .. }));
    (tmp, dir)
}

/// Replaces the (read-only) manifest of `dir` with `bytes`.
fn replace_manifest(dir: &Path, bytes: &[u8]) {
    let path = dir.join("manifest.json");
    fs::remove_file(&path).unwrap();
    fs::write(&path, bytes).unwrap();
}

fn edit_json(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    edit(&mut v);
    replace_manifest(dir, &serde_json::to_vec_pretty(&v).unwrap());
}

/// The error of verifying `dir` (by `freeze`) and of loading it for a run
/// (by `load_frozen`): both must refuse, with the same message.
fn refusal(dir: &Path) -> String {
    let by_freeze = match freeze(dir, &options()) {
        Err(e @ FreezeError::BadManifest { .. }) => e.to_string(),
        other => panic!("expected a bad manifest, got {other:?}"),
    };
    let by_load = load_frozen(dir).map(|_| ()).unwrap_err().to_string();
    assert_eq!(by_freeze, by_load);
    by_freeze
}

/// Proves each hand edit of a manifest field is refused by verification
/// with a message naming the field: the seven fields the independent
/// tester edited, and the derivable ones already checked before.
#[test]
fn every_edited_manifest_field_is_refused_naming_it() {
    let other_sha = "ab".repeat(32);
    let cases: Vec<(&str, JsonEdit)> = vec![
        ("config_sha256", Box::new(|v| v["config_sha256"] = json!(other_sha))),
        ("order_algorithm", Box::new(|v| v["order_algorithm"] = json!("cohort-order-v2"))),
        ("frozen_at", Box::new(|v| v["frozen_at"] = json!("2020-01-01T00:00:00Z"))),
        ("frozen_at", Box::new(|v| v["frozen_at"] = json!("2026-09-21 14:13:20"))),
        ("tool_version", Box::new(|v| v["tool_version"] = json!("0.0.9"))),
        ("tool_version", Box::new(|v| v["tool_version"] = json!("99.0.0"))),
        ("tool_version", Box::new(|v| v["tool_version"] = json!("0.1.0-patched"))),
        ("metrics_version", Box::new(|v| v["metrics_version"] = json!(cohort_core::METRICS_VERSION + 1))),
        ("metrics_version", Box::new(|v| v["metrics_version"] = json!(0))),
        ("manifest_version", Box::new(|v| v["manifest_version"] = json!(1))),
        ("manifest_version", Box::new(|v| v["manifest_version"] = json!(3))),
        ("self_sha256", Box::new(|v| v["self_sha256"] = json!(other_sha))),
        ("self_sha256", Box::new(|v| drop(v.as_object_mut().unwrap().remove("self_sha256")))),
        ("cohort", Box::new(|v| v["cohort"] = json!("other"))),
        ("seed", Box::new(|v| v["seed"] = json!(8))),
        ("run_count", Box::new(|v| v["run_count"] = json!(1))),
        ("order_sha256", Box::new(|v| v["order_sha256"] = json!(other_sha))),
        ("order", Box::new(|v| v["order"].as_array_mut().unwrap().swap(0, 1))),
    ];
    for (field, edit) in cases {
        let (_tmp, dir) = frozen();
        edit_json(&dir, edit);
        let message = refusal(&dir);
        assert!(message.contains(&format!("`{field}`")), "{field}: {message}");
        assert!(message.contains("manifest.json"), "{field}: {message}");
    }
}

/// Proves an edit that leaves every derivable field alone (frozen_at moved
/// to another valid time) is caught by the self-hash, whose message names
/// the fields that can hold such an edit.
#[test]
fn an_edit_only_the_self_hash_sees_names_the_candidate_fields() {
    let (_tmp, dir) = frozen();
    edit_json(&dir, |v| v["frozen_at"] = json!("2026-09-21T14:13:21Z"));
    let message = refusal(&dir);
    assert!(message.contains("`self_sha256`") && message.contains("frozen_at"), "{message}");
    // Whitespace is not an edit of a field (the self-hash covers the
    // canonical form), but the ledger and the records name a cohort by the
    // bytes' hash: a re-indented manifest is refused by freeze and by a run
    // alike, naming both hashes (issue 23), never verified by one and
    // refused by the other.
    let (_tmp, dir) = frozen();
    let (_, frozen_sha) = manifest_of(&dir);
    edit_json(&dir, |_| {});
    let message = refusal(&dir);
    assert!(message.contains("bytes are not the ones freezing wrote") && message.contains(&frozen_sha), "{message}");
}

/// The manifest and its bytes' hash.
fn manifest_of(dir: &Path) -> (Manifest, String) {
    let bytes = fs::read(dir.join("manifest.json")).unwrap();
    (serde_json::from_slice(&bytes).unwrap(), sha256_hex(&bytes))
}

/// Writes `m` with its self-hash recomputed: a forger who knows the rule.
fn write_resealed(dir: &Path, mut m: Manifest) {
    m.self_sha256 = Some(m.computed_self_sha256());
    replace_manifest(dir, &serde_json::to_vec_pretty(&m).unwrap());
}

/// Proves a forged amendment entry is refused: added to a cohort that was
/// never amended (the self-hash), and forged in an amended cohort with the
/// self-hash recomputed (the chain: the predecessor's manifest beside it
/// does not agree).
#[test]
fn forged_amendments_are_refused() {
    // An entry added to a manifest that was never amended.
    let (_tmp, dir) = frozen();
    let (m, _) = manifest_of(&dir);
    edit_json(&dir, |v| {
        v["amendments"] = json!([{
            "from_cohort": "quickstart-old",
            "from_manifest_sha256": "cd".repeat(32),
            "amended_at": m.frozen_at,
            "reason": "forged",
            "changes": [{"file": "questions.json", "old_sha256": "ef".repeat(32), "new_sha256": m.files["questions.json"]}],
        }]);
    });
    let message = refusal(&dir);
    assert!(message.contains("`self_sha256`") && message.contains("amendment"), "{message}");

    // A real amendment, then forgeries of it with the self-hash recomputed.
    let (_tmp, dir) = frozen();
    let questions = fs::read_to_string(dir.join("questions.json")).unwrap();
    fs::write(dir.join("questions.json"), questions.replacen("?", "?!", 1)).unwrap();
    let amend = FreezeOptions {
        amend: Some(AmendRequest { new_name: "quickstart-v2".into(), reason: "fix a question".into() }),
        ..options()
    };
    let FreezeReport::Amended { dir: new_dir, restored: true, .. } = freeze(&dir, &amend).unwrap() else {
        panic!("expected an amendment that restores the old directory");
    };
    assert!(matches!(freeze(&new_dir, &options()).unwrap(), FreezeReport::Verified { .. }));
    let (good, _) = manifest_of(&new_dir);
    assert_eq!(good.amendments[0].from_dir.as_deref(), Some("quickstart"));

    let forgeries: Vec<(&str, ManifestEdit)> = vec![
        ("amendments[0].from_manifest_sha256", Box::new(|m| m.amendments[0].from_manifest_sha256 = "cd".repeat(32))),
        ("amendments[0].from_cohort", Box::new(|m| m.amendments[0].from_cohort = "quickstart-v2".into())),
        ("amendments[0].changes", Box::new(|m| m.amendments[0].changes[0].old_sha256 = "ef".repeat(32))),
        ("amendments[0].amended_at", Box::new(|m| m.amendments[0].amended_at = "2020-01-01T00:00:00Z".into())),
        ("amendments[0].reason", Box::new(|m| m.amendments[0].reason = " ".into())),
        ("amendments", Box::new(|m| m.amendments.insert(0, m.amendments[0].clone()))),
    ];
    for (field, forge) in forgeries {
        let mut m = good.clone();
        forge(&mut m);
        write_resealed(&new_dir, m);
        let message = refusal(&new_dir);
        assert!(message.contains(&format!("`{field}")), "{field}: {message}");
    }
}

/// Proves a manifest of version 1 (written before the self-hash) still
/// loads, says it is legacy, and still has every derivable field checked.
#[test]
fn legacy_manifests_load_with_derived_fields_checked() {
    let (_tmp, dir) = frozen();
    let (mut m, _) = manifest_of(&dir);
    m.manifest_version = 1;
    m.self_sha256 = None;
    replace_manifest(&dir, &serde_json::to_vec_pretty(&m).unwrap());
    let FreezeReport::Verified { manifest, .. } = freeze(&dir, &options()).unwrap() else { panic!("not verified") };
    assert!(manifest.is_legacy());
    assert!(load_frozen(&dir).is_ok());
    m.config_sha256 = "ab".repeat(32);
    replace_manifest(&dir, &serde_json::to_vec_pretty(&m).unwrap());
    assert!(refusal(&dir).contains("`config_sha256`"));
}

/// Everything in `dir`, recursively, for "nothing was written".
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        out.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            out.extend(listing(&entry.path()).into_iter().map(|n| format!("{}/{n}", entry.file_name().display())));
        }
    }
    out.sort();
    out
}

/// Runs `freeze` on another thread and fails (instead of hanging the
/// suite) when it does not return within a minute. The error's message.
fn freeze_within_a_minute(dir: &Path) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(freeze(&dir, &options()).map(drop).map_err(|e| e.to_string()));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("freeze hung on a file that is not regular")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

/// Proves a cohort file that is a symlink to /dev/zero, a FIFO, a
/// directory or larger than the cap is refused, quickly, with a message
/// naming the file, and nothing is written.
#[test]
fn files_that_are_not_regular_are_refused_without_reading_them() {
    let cases: Vec<(&str, &str, MakeFile)> = vec![
        ("questions.json", "a device", Box::new(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap())),
        ("rubric.md", "a FIFO", Box::new(mkfifo)),
        ("protocol.md", "a directory", Box::new(|p| fs::create_dir(p).unwrap())),
        ("uncertainty_key.json", "a FIFO", Box::new(mkfifo)),
        (
            "suffix.txt",
            "larger than",
            Box::new(|p| fs::File::create(p).unwrap().set_len(cohort_coordinator::freeze::MAX_FILE_BYTES + 1).unwrap()),
        ),
    ];
    for (file, kind, make) in cases {
        let (_tmp, dir) = cohort();
        let path = dir.join(file);
        let _ = fs::remove_file(&path);
        make(&path);
        let before = listing(&dir);
        let message = freeze_within_a_minute(&dir).unwrap_err().to_string();
        assert!(message.contains(file) && message.contains(kind), "{file}: {message}");
        assert_eq!(listing(&dir), before, "{file}: nothing is written");
    }
}

/// Proves a frozen cohort whose manifest.json was replaced by a FIFO or a
/// link to /dev/zero is refused, by verification and by loading.
#[test]
fn a_manifest_that_is_not_regular_is_refused() {
    for make in [mkfifo as fn(&Path), |p: &Path| std::os::unix::fs::symlink("/dev/zero", p).unwrap()] {
        let (_tmp, dir) = frozen();
        let path = dir.join("manifest.json");
        fs::remove_file(&path).unwrap();
        make(&path);
        let message = freeze_within_a_minute(&dir).unwrap_err().to_string();
        assert!(message.contains("manifest.json") && message.contains("not a regular file"), "{message}");
        assert!(load_frozen(&dir).unwrap_err().to_string().contains("not a regular file"));
    }
}
