//! A real OpenAI client: `scripts/openai_passthrough_check.py` drives the
//! passthrough of `cohort judge-proxy` (in front of the mock provider) with
//! the official `openai` package from PyPI. Proves the passthrough speaks
//! the protocol that package expects: chat completions and the Responses
//! API (`client.responses.create`), the served-model header, and the error
//! classes for bad keys, unknown models and `previous_response_id`.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use std::process::Command;

use judge_proxy_support::{mock, proxy};

const TEAM_KEY: &str = "team-python-key-6f2a90d1";

/// `python3` with `openai` importable: installs it with pip when missing,
/// and fails with a clear message only if that fails.
fn python_with_openai() -> &'static str {
    let importable =
        || Command::new("python3").args(["-c", "import openai"]).output().map(|o| o.status.success()).unwrap_or(false);
    if importable() {
        return "python3";
    }
    let installed = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "openai"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        installed && importable(),
        "this test needs python3 with the `openai` package: `python3 -m pip install openai` failed"
    );
    "python3"
}

/// See the module doc.
#[test]
fn the_openai_python_package_drives_the_passthrough() {
    let python = python_with_openai();
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), &[], &[]);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{mock_url}"
rpm = 600
tpm = 1000000

[[teams]]
name = "py"
key_env = "TEAM_KEY"

[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
"#
        ),
    )
    .unwrap();
    let (_proxy, _grpc, http) = proxy(&config, &[("TEAM_KEY", TEAM_KEY)], dir.path().join("proxy.log"));
    let script = cohort_tests::workspace_root().join("scripts/openai_passthrough_check.py");
    let out = Command::new(python)
        .arg(&script)
        .args(["--judge", "j", "--expect-served", "judge-1"])
        .env("COHORT_PROXY_URL", &http)
        .env("COHORT_TEAM_KEY", TEAM_KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("responses ok: served by judge-1"), "{stdout}");
    assert!(stdout.contains("openai-python passthrough check: ok"), "{stdout}");
}
