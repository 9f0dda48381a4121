//! deploy/ is valid and safe to publish.
//!
//! - [`validate_deploy_passes`]: `scripts/validate_deploy.sh` accepts the
//!   compose file (Docker Compose v2's own `config -q`) and the rendered
//!   kustomization (`kubernetes-validate --strict`, the Kubernetes schemas).
//!   A missing tool skips it with a message outside CI and fails it in CI.
//!   It also checks that every coordinator and worker authenticates
//!   workers with the cluster token, and
//!   [`validate_deploy_refuses_an_unauthenticated_coordinator`] proves it
//!   fails on a copy of deploy/ whose coordinator does not.
//! - [`manifests_reference_existing_files`]: every file the compose file and
//!   the kustomization name exists (Compose creates a missing bind-mount
//!   source as an empty directory, and `config -q` does not check secret
//!   files, so neither tool catches these), every `/run/secrets/NAME` a
//!   config reads is a secret both deployments mount, and the copies that
//!   kustomize needs inside deploy/k8s are the same bytes as deploy/.
//! - [`placeholder_secrets_stay_placeholders`]: the example secrets are
//!   marked placeholders, and nothing under deploy/ looks like a real key.
//! - [`checks_catch_bad_input`]: each detector above rejects a bad sample,
//!   so a passing run means something.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cohort_tests::workspace_root;

/// The exit status of `scripts/validate_deploy.sh` when a tool is missing.
const TOOL_MISSING: i32 = 77;

/// The marker every example secret value carries.
const PLACEHOLDER_MARK: &str = "REPLACE-ME";

fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `${NAME:-default}` and `${NAME-default}` as Compose expands them with
/// NAME unset; `${NAME}` without a default stays as written (and then
/// names no existing file).
fn expand_defaults(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &rest[start + 2..start + end];
        match inner.split_once(":-").or_else(|| inner.split_once('-')) {
            Some((_, default)) => out.push_str(default),
            None => out.push_str(&rest[start..=start + end]),
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}

/// The host paths a compose file names, relative to its folder: bind-mount
/// sources (`- SRC:DST[:ro]` with SRC a path), `file:` of secrets and
/// configs, the build `context:` and its `dockerfile:`.
fn compose_references(text: &str) -> Vec<(usize, PathBuf)> {
    let mut refs = Vec::new();
    let mut context: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let code = line.split(" #").next().unwrap_or("").trim();
        if let Some(item) = code.strip_prefix("- ") {
            let item = expand_defaults(item.trim_matches('"'));
            if let Some((src, _)) = item.split_once(':')
                && (src.starts_with("./") || src.starts_with("../") || src.starts_with('/'))
            {
                refs.push((line_no, PathBuf::from(src)));
            }
        } else if let Some(file) = code.strip_prefix("file:") {
            refs.push((line_no, PathBuf::from(expand_defaults(file.trim()))));
        } else if let Some(ctx) = code.strip_prefix("context:") {
            let ctx = expand_defaults(ctx.trim());
            refs.push((line_no, PathBuf::from(&ctx)));
            context = Some(ctx);
        } else if let Some(dockerfile) = code.strip_prefix("dockerfile:") {
            let base = context.clone().unwrap_or_else(|| ".".to_owned());
            refs.push((line_no, Path::new(&base).join(expand_defaults(dockerfile.trim()))));
        }
    }
    refs
}

/// The files a kustomization names, relative to its folder: the items of
/// `resources:` and of each generator's `files:` (`KEY=PATH` or `PATH`).
fn kustomization_references(text: &str) -> Vec<(usize, PathBuf)> {
    let mut refs = Vec::new();
    // The indentation of the `resources:` or `files:` key whose list this
    // is: its items are indented further (or as far, YAML allows both).
    let mut list_key_indent: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let code = line.split(" #").next().unwrap_or("").trim_end();
        let trimmed = code.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = code.len() - trimmed.len();
        let item = trimmed.strip_prefix("- ");
        match (item, list_key_indent) {
            (Some(item), Some(key)) if indent >= key && !(indent == key && item.contains(": ")) => {
                let path = item.rsplit_once('=').map_or(item, |(_, path)| path);
                refs.push((n + 1, PathBuf::from(path.trim())));
            }
            _ => {
                let key = trimmed.strip_prefix("- ").unwrap_or(trimmed);
                list_key_indent = (key == "resources:" || key == "files:").then_some(indent);
            }
        }
    }
    refs
}

/// Each `/run/secrets/NAME` a file reads.
fn secret_mounts(text: &str) -> BTreeSet<String> {
    let prefix = "/run/secrets/";
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == '.')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// What looks like a real credential: a provider key prefix followed by a
/// long run of key characters, an AWS access key id, a GitHub token, a PEM
/// private key. Returns what matched, for the failure message (the file is
/// in the repository already: showing it hides nothing).
fn looks_like_real_key(text: &str) -> Option<String> {
    if text.contains("PRIVATE KEY-----") {
        return Some("a PEM private key".to_owned());
    }
    let key_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    for word in text.split(|c: char| !key_char(c)) {
        let long_tail = |prefix: &str, min: usize| {
            word.strip_prefix(prefix)
                .is_some_and(|tail| tail.len() >= min && tail.chars().filter(char::is_ascii_digit).count() >= 3)
        };
        let aws = word.len() == 20
            && word.starts_with("AKIA")
            && word.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if long_tail("sk-", 20) || long_tail("ghp_", 30) || long_tail("xoxb-", 20) || aws {
            return Some(word.to_owned());
        }
    }
    None
}

/// Every regular file under `dir`, recursively, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Problems of one list of references: the ones that name no file.
fn missing_references(file: &Path, refs: &[(usize, PathBuf)]) -> Vec<String> {
    let base = file.parent().unwrap();
    refs.iter()
        .filter(|(_, rel)| !base.join(rel).exists())
        .map(|(line, rel)| format!("{}:{line}: names {}, which does not exist", file.display(), rel.display()))
        .collect()
}

/// The validation script accepts deploy/ (see the module doc).
#[test]
fn validate_deploy_passes() {
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts/validate_deploy.sh"))
        .current_dir(workspace_root())
        .output()
        .expect("run scripts/validate_deploy.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    match out.status.code() {
        Some(0) => assert!(text.contains("Kubernetes resources valid"), "no Kubernetes validation ran:\n{text}"),
        Some(TOOL_MISSING) if std::env::var_os("CI").is_none() => {
            println!(
                "SKIPPED validate_deploy_passes: a validation tool is missing here (above); scripts/test.sh installs it"
            );
        }
        _ => panic!("scripts/validate_deploy.sh failed ({}):\n{text}", out.status),
    }
}

/// Copies `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Proves the validation fails (exit 1, naming the role and the fix) on a
/// reference deployment whose coordinator accepts an unauthenticated
/// worker: a copy of deploy/ with `--token-file` taken off the compose
/// coordinator's command, then one with it taken off the Kubernetes
/// worker's args.
#[test]
fn validate_deploy_refuses_an_unauthenticated_coordinator() {
    let cases = [
        (
            "docker-compose.yml",
            r#", "--token-file", "/run/secrets/cluster_token"]"#,
            "]",
            "service coordinator: `cohort coordinator` accepts an unauthenticated worker",
        ),
        (
            "k8s/worker.yaml",
            "            - --token-file\n            - /run/secrets/cluster_token\n",
            "",
            "container worker: `cohort worker` presents no cluster token",
        ),
    ];
    for (file, remove, with, message) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("deploy");
        copy_tree(&deploy_dir(), &copy);
        let path = copy.join(file);
        let text = read(&path);
        assert!(text.contains(remove), "{file} no longer has {remove:?}: update the test");
        fs::write(&path, text.replacen(remove, with, 1)).unwrap();
        let out = Command::new("bash")
            .arg(workspace_root().join("scripts/validate_deploy.sh"))
            .current_dir(workspace_root())
            .env("VALIDATE_DEPLOY_DIR", &copy)
            .output()
            .expect("run scripts/validate_deploy.sh");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.code() == Some(TOOL_MISSING) && std::env::var_os("CI").is_none() {
            println!("SKIPPED validate_deploy_refuses_an_unauthenticated_coordinator: a tool is missing here:\n{text}");
            return;
        }
        assert_eq!(out.status.code(), Some(1), "{file}: the unauthenticated deployment passed:\n{text}");
        assert!(text.contains(message) && text.contains("pass --token-file"), "{file}:\n{text}");
    }
}

/// Every file the manifests name exists; secrets and copies agree.
#[test]
fn manifests_reference_existing_files() {
    let deploy = deploy_dir();
    let compose_file = deploy.join("docker-compose.yml");
    let kustomization = deploy.join("k8s/kustomization.yaml");
    let compose = read(&compose_file);
    let kust = read(&kustomization);

    let compose_refs = compose_references(&compose);
    let kust_refs = kustomization_references(&kust);
    assert!(compose_refs.len() >= 6, "the compose scan found too few references: {compose_refs:?}");
    assert!(kust_refs.len() >= 6, "the kustomization scan found too few references: {kust_refs:?}");
    let mut problems = missing_references(&compose_file, &compose_refs);
    problems.extend(missing_references(&kustomization, &kust_refs));

    // Every secret a config reads is one both deployments provide.
    let mut wanted = BTreeSet::new();
    for config in ["config/judge-proxy.toml", "config/judge.toml"] {
        wanted.extend(secret_mounts(&read(&deploy.join(config))));
    }
    assert!(wanted.contains("team_key"), "the configs read no team_key secret: {wanted:?}");
    for name in &wanted {
        if !compose.contains(&format!("  {name}:\n    file:")) {
            problems.push(format!(
                "{}: no top-level secret `{name}` (a config reads /run/secrets/{name})",
                compose_file.display()
            ));
        }
        if !kust.contains(&format!("- {name}=")) {
            problems.push(format!("{}: the secretGenerator has no key `{name}`", kustomization.display()));
        }
    }

    // kustomize reads nothing above deploy/k8s: its copies must not drift.
    for copy in [
        "config/judge-proxy.toml",
        "config/judge.toml",
        "secrets.example/team_key",
        "secrets.example/openrouter_api_key",
        "secrets.example/cluster_token",
    ] {
        if read(&deploy.join(copy)) != read(&deploy.join("k8s").join(copy)) {
            problems.push(format!("deploy/{copy} and deploy/k8s/{copy} differ: keep the copies equal"));
        }
    }
    assert!(problems.is_empty(), "deploy/ references:\n{}", problems.join("\n"));
}

/// Example secrets are placeholders; nothing under deploy/ looks real.
#[test]
fn placeholder_secrets_stay_placeholders() {
    let deploy = deploy_dir();
    let mut problems = Vec::new();
    let mut examples = 0;
    for dir in ["secrets.example", "k8s/secrets.example"] {
        for file in files_under(&deploy.join(dir)) {
            if file.extension().is_some_and(|e| e == "md") {
                continue;
            }
            examples += 1;
            let value = read(&file);
            if !value.contains(PLACEHOLDER_MARK) {
                problems.push(format!(
                    "{}: not marked {PLACEHOLDER_MARK}: an example secret must be a placeholder",
                    file.display()
                ));
            }
        }
    }
    assert!(examples >= 4, "found only {examples} example secrets");
    let mut scanned: Vec<PathBuf> = files_under(&deploy);
    scanned.push(workspace_root().join("scripts/validate_deploy.sh"));
    for file in scanned {
        let Ok(text) = fs::read_to_string(&file) else { continue };
        if let Some(what) = looks_like_real_key(&text) {
            problems
                .push(format!("{}: looks like a real key ({what}); keep keys out of the repository", file.display()));
        }
    }
    assert!(problems.is_empty(), "secrets under deploy/:\n{}", problems.join("\n"));
}

/// Each detector rejects a bad sample (so the checks above can fail).
#[test]
fn checks_catch_bad_input() {
    assert_eq!(
        looks_like_real_key("key: sk-proj-4fa91c0e7d2b8a6f3e5c1d9b"),
        Some("sk-proj-4fa91c0e7d2b8a6f3e5c1d9b".to_owned())
    );
    assert!(looks_like_real_key("AKIA2E0A8F3B5C7D9E1F").is_some());
    assert!(looks_like_real_key("-----BEGIN RSA PRIVATE KEY-----").is_some());
    assert_eq!(looks_like_real_key("REPLACE-ME-placeholder-provider-key sk-or-v1"), None);

    assert_eq!(expand_defaults("${COHORT_SECRETS:-./secrets.example}/team_key"), "./secrets.example/team_key");
    assert_eq!(expand_defaults("${X}/a"), "${X}/a");

    let compose = "secrets:\n  team_key:\n    file: ./nope/team_key\nservices:\n  a:\n    volumes:\n      - ./missing.toml:/etc/a.toml:ro\n      - data:/data\n";
    let refs = compose_references(compose);
    assert_eq!(
        refs.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        [PathBuf::from("./nope/team_key"), PathBuf::from("./missing.toml")]
    );
    let missing = missing_references(&deploy_dir().join("docker-compose.yml"), &refs);
    assert_eq!(missing.len(), 2, "{missing:?}");

    let kust = "resources:\n  - gone.yaml\nconfigMapGenerator:\n  - name: c\n    files:\n      - a.toml=config/gone.toml\n  - name: d\nimages:\n  - name: x\n";
    let refs = kustomization_references(kust);
    assert_eq!(
        refs.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        [PathBuf::from("gone.yaml"), PathBuf::from("config/gone.toml")]
    );
    assert_eq!(missing_references(&deploy_dir().join("k8s/kustomization.yaml"), &refs).len(), 2);

    assert_eq!(
        secret_mounts("key_file = \"/run/secrets/team_key\"\n# /run/secrets/other"),
        BTreeSet::from(["team_key".to_owned(), "other".to_owned()])
    );
}
