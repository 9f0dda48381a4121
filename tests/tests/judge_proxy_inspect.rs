//! Inspect AI (from PyPI, `inspect-ai`) runs an eval through `cohort
//! judge-proxy` with its default settings, against the mock provider (a
//! TEST DOUBLE). Inspect's OpenAI provider calls the Responses API by
//! default for gpt-5 (and o-series, codex, and unrecognised "frontier")
//! model names, so the route `mock/gpt-5-mini` makes it send
//! `POST /v1/responses`, with no `-M responses_api=...`; the mock serves
//! that name with a dated snapshot, and the eval's log must name the
//! snapshot, not the alias.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use judge_proxy_support::{mock, proxy};
use serde_json::Value;

const TEAM_KEY: &str = "team-inspect-key-3b7e19c4";
const REQUESTED: &str = "gpt-5-mini";
const SERVED: &str = "gpt-5-mini-2025-08-07";
/// The longest the eval may take; it is killed past it (Inspect's own
/// retries would otherwise wait minutes on a proxy that fails).
const EVAL_LIMIT: Duration = Duration::from_secs(240);

const TASK: &str = r#"
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def through_the_proxy():
    return Task(
        dataset=[
            Sample(input="Say hello to the judge proxy.", target="mock reply"),
            Sample(input="Say goodbye to the judge proxy.", target="mock reply"),
            Sample(input="Name one colour.", target="mock reply"),
        ],
        solver=generate(),
        scorer=includes(),
    )
"#;

/// Importable `inspect_ai`, beside a click that is not 8.4.0: under click
/// 8.4.0 Inspect's CLI reads every flag left out as given, so `--log-shared`
/// is on (and `--log-format json` refused) and `--retry-on-error` and
/// `--shuffle` are on: not Inspect's defaults. 8.4.1 fixed it.
const INSPECT_READY: &str = "import importlib.metadata as m, inspect_ai; assert m.version('click') != '8.4.0'";

/// `python3` with `inspect-ai` usable: installs it with pip when missing
/// (as `scripts/test.sh` does), and fails with a clear message only if
/// that fails.
fn python_with_inspect() -> &'static str {
    let ready =
        || Command::new("python3").args(["-c", INSPECT_READY]).output().map(|o| o.status.success()).unwrap_or(false);
    if ready() {
        return "python3";
    }
    let installed = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "inspect-ai", "click!=8.4.0"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        installed && ready(),
        "this test needs python3 with the `inspect-ai` package (and click other than 8.4.0): \
         `python3 -m pip install inspect-ai 'click!=8.4.0'` failed"
    );
    "python3"
}

/// See the module doc. Every sample completes and is scored, each sample's
/// output and the log's model usage name the served snapshot, and the mock
/// saw only Responses API calls.
#[tokio::test]
async fn inspect_ai_runs_an_eval_through_the_proxy_with_its_defaults() {
    let python = python_with_inspect();
    let dir = tempfile::tempdir().unwrap();
    let alias = format!("{REQUESTED}={SERVED},{SERVED},1");
    let (_mock, mock_url) = mock(dir.path(), &["--alias", &alias], &[]);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{mock_url}"
rpm = 6000
tpm = 10000000

[[teams]]
name = "inspect"
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
    let task = dir.path().join("task.py");
    std::fs::write(&task, TASK).unwrap();
    let logs = dir.path().join("logs");

    let model = format!("openai/mock/{REQUESTED}");
    // Relative paths from the test's dir: Inspect globs the task path, and
    // pathlib refuses an absolute pattern.
    let mut child = Command::new(python)
        .current_dir(dir.path())
        .args(["-m", "inspect_ai", "eval", "task.py", "--model", &model, "--log-format", "json", "--log-dir", "logs"])
        .env("OPENAI_BASE_URL", format!("{http}/v1"))
        .env("OPENAI_API_KEY", TEAM_KEY)
        // Inspect's own state (not its settings) stays in the test's dir.
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .env_remove("OPENAI_ORG_ID")
        .env_remove("OPENAI_PROJECT_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(dir.path().join("inspect.out")).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(dir.path().join("inspect.err")).unwrap()))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > EVAL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = std::fs::read_to_string(dir.path().join("inspect.out")).unwrap_or_default();
    let err = std::fs::read_to_string(dir.path().join("inspect.err")).unwrap_or_default();
    println!("inspect eval took {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        status.is_some_and(|s| s.success()),
        "inspect eval failed or took over {EVAL_LIMIT:?} ({status:?}):\n{out}\n{err}\nproxy log:\n{}",
        std::fs::read_to_string(dir.path().join("proxy.log")).unwrap_or_default()
    );

    let log_files: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(log_files.len(), 1, "one JSON log in {}: {log_files:?}", logs.display());
    let log: Value = serde_json::from_str(&std::fs::read_to_string(&log_files[0]).unwrap()).unwrap();
    assert_eq!(log["status"], "success", "{}", log["error"]);
    assert_eq!(log["eval"]["model"], model.as_str());
    assert!(log["eval"]["model_args"].get("responses_api").is_none(), "Inspect's default: {}", log["eval"]);
    assert_eq!(log["results"]["total_samples"], 3);
    assert_eq!(log["results"]["completed_samples"], 3);
    let samples = log["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 3);
    for s in samples {
        assert!(s.get("error").is_none_or(Value::is_null), "sample {} failed: {}", s["id"], s["error"]);
        assert_eq!(s["output"]["model"], SERVED, "sample {}: the served snapshot, not the alias", s["id"]);
        let text = s["output"]["choices"][0]["message"]["content"].to_string();
        assert!(text.contains("mock reply to: "), "sample {}: {text}", s["id"]);
        let score = &s["scores"]["includes"]["value"];
        assert_eq!(score, "C", "sample {}: {}", s["id"], s["scores"]);
    }
    println!(
        "inspect log: {} of {} samples completed, each served by {SERVED} (requested {REQUESTED})",
        log["results"]["completed_samples"], log["results"]["total_samples"]
    );
    let usage = &log["stats"]["model_usage"][&model];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{}", log["stats"]);

    let stats: Value =
        reqwest::get(format!("{}/mock/stats", mock_url.trim_end_matches("/v1"))).await.unwrap().json().await.unwrap();
    println!("mock stats: {stats}");
    let responses = stats["responses_requests"].as_u64().unwrap();
    assert!(responses >= 3, "Inspect used the Responses API: {stats}");
    assert_eq!(stats["requests"].as_u64().unwrap(), responses, "and nothing else: {stats}");
}
