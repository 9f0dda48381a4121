//! The real adapters against loopback doubles: `openai_chat` against the
//! mock provider (a TEST DOUBLE, in process, faults injected with its
//! `x-mock-fault` header through `extra_headers`) and a tiny axum server
//! answering like Perplexity; `command` against `/bin/sh` scripts written
//! to a temporary directory. Timeouts are short configured bounds, never
//! timed assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::taxonomy::AttemptClass;
use cohort_mock_provider::{AliasConfig, MockConfig, MockHandle};
use cohort_worker::adapters::command::CommandAdapter;
use cohort_worker::adapters::openai_chat::OpenAiChatAdapter;
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply, Turn, for_arm};
use serde_json::{Value, json};

const KEY: &str = "sk-adapter-test-6b1f0c9e2d";
const KEY_VAR: &str = "COHORT_TEST_SUT_KEY";

fn arm(adapter: AdapterKind, settings: Value) -> ArmConfig {
    ArmConfig {
        id: "a".into(),
        label: "A".into(),
        adapter,
        pinned_version: "v-1".into(),
        vendor_lineage: "test".into(),
        concurrency: 1,
        optional: false,
        workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
        controls_not_disabled: Vec::new(),
        settings,
    }
}

fn request(turns: &[(&str, &str)]) -> AdapterRequest {
    AdapterRequest {
        run_id: "q1:a:1".into(),
        question_id: "q1".into(),
        attempt: 1,
        conversation: turns.iter().map(|(role, text)| Turn { role: (*role).into(), text: (*text).into() }).collect(),
        deadline: None,
    }
}

fn prompt() -> AdapterRequest {
    request(&[("user", "What is known about topic 1? Cite sources.")])
}

/// The key lookup tests use: only `KEY_VAR` is set.
fn env(var: &str) -> Option<String> {
    (var == KEY_VAR).then(|| KEY.to_owned())
}

fn openai(settings: Value) -> OpenAiChatAdapter {
    OpenAiChatAdapter::with_env(&arm(AdapterKind::OpenaiChat, settings), env).unwrap()
}

/// One call to the mock with the fault `spec` (None: a normal answer).
async fn call_mock(mock: &MockHandle, spec: Option<&str>, extra: Value) -> AdapterResponse {
    let mut settings = json!({"base_url": mock.base_url(), "model": "research-model"});
    if let Some(spec) = spec {
        settings["extra_headers"] = json!({"x-mock-fault": spec});
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        settings[k] = v.clone();
    }
    openai(settings).call(&prompt()).await
}

async fn mock() -> MockHandle {
    MockHandle::start(MockConfig::default()).await.unwrap()
}

// === openai_chat ===

/// A normal answer is `ok`: the content is the output, the observed version
/// is the model the body names (the alias's served model, not the one
/// requested), and usage is read.
#[tokio::test]
async fn openai_ok_reports_the_served_model() {
    let mock = MockHandle::start(MockConfig {
        aliases: vec![AliasConfig {
            name: "research-model".into(),
            models: vec!["served-model-7".into(), "other".into()],
            every: 1000,
        }],
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let r = call_mock(&mock, None, json!({})).await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.http_status, 200);
    let Reply::Output(text) = &r.reply else { panic!("expected output, got {:?}", r.reply) };
    assert!(text.starts_with("mock reply to: What is known about topic 1?"), "{text}");
    assert_eq!(r.observed_version.as_deref(), Some("served-model-7"));
    let usage = r.usage.unwrap();
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
}

/// A 429 without quota wording is `rate_limited`, and carries the
/// provider's `Retry-After: 2` as 2000 ms for the ledger.
#[tokio::test]
async fn openai_429_is_rate_limited() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("rate_limit;retry_after=2"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::RateLimited, 429), "{}", r.detail);
    assert_eq!(r.reply, Reply::Nothing);
    assert_eq!(r.retry_after_ms, Some(2_000), "{}", r.detail);
}

/// A 429 `insufficient_quota` and a 402 are `quota_exhausted`.
#[tokio::test]
async fn openai_insufficient_quota_is_quota_exhausted() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("insufficient_quota"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::QuotaExhausted, 429), "{}", r.detail);
    let r = call_mock(&mock, Some("payment_required"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::QuotaExhausted, 402), "{}", r.detail);
}

/// 500 and 503 are `server_error`.
#[tokio::test]
async fn openai_5xx_is_server_error() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("server_error"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 500), "{}", r.detail);
    let r = call_mock(&mock, Some("unavailable"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 503), "{}", r.detail);
}

/// A 502 "Provider returned empty content" and a 200 with empty content
/// are both `empty_content`, with no output.
#[tokio::test]
async fn openai_empty_content_502_and_200() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("empty_502"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::EmptyContent, 502), "{}", r.detail);
    let r = call_mock(&mock, Some("empty_200"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::EmptyContent, 200), "{}", r.detail);
    assert_eq!(r.reply, Reply::Nothing);
}

/// A 200 whose JSON is cut short is `malformed`.
#[tokio::test]
async fn openai_truncated_json_is_malformed() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("truncated_json"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::Malformed, 200), "{}", r.detail);
    assert_eq!(r.reply, Reply::Nothing);
}

/// A 400 is `client_error`, its detail quoting the provider's message.
#[tokio::test]
async fn openai_400_is_client_error() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("bad_request"), json!({})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ClientError, 400), "{}", r.detail);
    assert!(r.detail.contains("HTTP 400: mock: bad request"), "{}", r.detail);
}

/// Nothing listening on the port is a `connection_error`.
#[tokio::test]
async fn openai_connection_refused_is_connection_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = openai(json!({"base_url": format!("http://127.0.0.1:{port}/v1"), "model": "m"})).call(&prompt()).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ConnectionError, 0), "{}", r.detail);
}

/// A connection that dies mid-body is a `connection_error` too.
#[tokio::test]
async fn openai_reset_mid_body_is_connection_error() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("reset"), json!({})).await;
    assert_eq!(r.class, AttemptClass::ConnectionError, "{}", r.detail);
}

/// A provider that stalls past `timeout_secs` is a `timeout`.
#[tokio::test]
async fn openai_stall_past_the_timeout_is_timeout() {
    let mock = mock().await;
    let r = call_mock(&mock, Some("stall;ms=30000"), json!({"timeout_secs": 0.3})).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::Timeout, 0), "{}", r.detail);
}

/// A refusal keeps the text and is `refused`; so is a content filter.
#[tokio::test]
async fn openai_refusal_is_refused_with_text() {
    let (url, _seen) = fixed_server(json!({
        "model": "m-2",
        "choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't help with that."},
                     "finish_reason": "stop"}],
    }))
    .await;
    let r = openai(json!({"base_url": url, "model": "m"})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Refused, "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("I can't help with that.".into()));
    assert_eq!(r.observed_version.as_deref(), Some("m-2"));
}

/// What the fixed server saw: the request bodies and authorization headers.
type Seen = Arc<Mutex<Vec<(Value, Option<String>)>>>;

/// A loopback server answering every chat call with `reply`.
async fn fixed_server(reply: Value) -> (String, Seen) {
    use axum::http::HeaderMap;
    let seen: Seen = Arc::default();
    let app = axum::Router::new().route(
        "/chat/completions",
        axum::routing::post({
            let seen = seen.clone();
            move |headers: HeaderMap, axum::Json(body): axum::Json<Value>| {
                let seen = seen.clone();
                let reply = reply.clone();
                async move {
                    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
                    seen.lock().unwrap().push((body, auth));
                    axum::Json(reply)
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Runs until the test's runtime ends.
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// Perplexity's `citations` become the citations and its `search_results`
/// with snippet text become system sources (entries without text are
/// skipped, not given invented text); the conversation's roles are mapped
/// to `user`/`assistant`, `max_tokens` is sent and an unset temperature
/// is omitted.
#[tokio::test]
async fn perplexity_citations_and_search_results() {
    let (url, seen) = fixed_server(json!({
        "id": "p1",
        "model": "sonar-deep-research",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Answer [1][2]."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 34},
        "citations": ["https://a.example/1", "https://b.example/2"],
        "search_results": [
            {"title": "A", "url": "https://a.example/1", "date": "2024-01-01", "snippet": "Alpha text."},
            {"title": "B", "url": "https://b.example/2", "date": "2024-01-02"},
            {"title": "C", "url": "https://c.example/3", "snippet": "   "},
        ],
    }))
    .await;
    let adapter = openai(json!({"base_url": format!("{url}/"), "model": "sonar-deep-research", "max_tokens": 900}));
    let r = adapter
        .call(&request(&[("user", "Q?"), ("system_under_test", "Which period?"), ("user", "Cite sources.")]))
        .await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.citations.urls(), ["https://a.example/1", "https://b.example/2"]);
    assert_eq!(r.sources.len(), 1);
    assert_eq!(r.sources[0].url, "https://a.example/1");
    assert_eq!(r.sources[0].title.as_deref(), Some("A"));
    assert_eq!(r.sources[0].snippet, "Alpha text.");
    assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((12, 34)));
    assert_eq!(r.observed_version.as_deref(), Some("sonar-deep-research"));

    let seen = seen.lock().unwrap();
    let (body, auth) = &seen[0];
    let roles: Vec<&str> = body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(body["max_tokens"], 900);
    assert!(body.get("temperature").is_none(), "{body}");
    assert_eq!(auth, &None, "no key configured, no authorization sent");
}

/// A body that names no model reports no version (never the requested one).
#[tokio::test]
async fn openai_no_model_in_body_is_not_disclosed() {
    let (url, seen) = fixed_server(json!({"choices": [{"message": {"content": "Text."}}]})).await;
    let r = openai(json!({"base_url": url, "model": "requested", "temperature": 0.2})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.observed_version, None);
    assert_eq!(seen.lock().unwrap()[0].0["temperature"], 0.2);
}

/// The key from `api_key_env` is sent as a bearer token (the mock checks
/// it); a wrong key that the provider echoes back in its 401 never reaches
/// the detail, and neither the adapter's nor the response's Debug shows it.
#[tokio::test]
async fn api_key_is_a_bearer_and_never_shown() {
    let mock = MockHandle::start(MockConfig { api_key: Some(KEY.into()), ..MockConfig::default() }).await.unwrap();
    let settings = json!({"base_url": mock.base_url(), "model": "m", "api_key_env": KEY_VAR});
    let adapter = openai(settings.clone());
    let r = adapter.call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert!(!format!("{adapter:?}").contains(KEY), "Debug of the adapter shows no key");
    assert!(!format!("{r:?}").contains(KEY));

    let (url, seen) = fixed_server(json!({"choices": [{"message": {"content": "Text."}}]})).await;
    openai(json!({"base_url": url, "model": "m", "api_key_env": KEY_VAR})).call(&prompt()).await;
    assert_eq!(seen.lock().unwrap()[0].1.as_deref(), Some(format!("Bearer {KEY}").as_str()));

    // The wrong key, which the mock echoes: the adapter holds it as its key.
    let wrong = "sk-wrong-key-echoed-4c2a9d";
    let adapter =
        OpenAiChatAdapter::with_env(&arm(AdapterKind::OpenaiChat, settings), |_| Some(wrong.to_owned())).unwrap();
    let r = adapter.call(&prompt()).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::AuthError, 401), "{}", r.detail);
    assert!(!r.detail.contains(wrong) && r.detail.contains("[redacted]"), "{}", r.detail);
    assert!(!format!("{adapter:?}").contains(wrong) && !format!("{r:?}").contains(wrong));
}

/// Bad settings are refused naming the setting: unknown names, missing or
/// non-HTTP `base_url`, credentials in the URL, an unset key variable, an
/// authorization header in `extra_headers`; `for_arm` builds the adapter.
#[test]
fn openai_bad_settings_are_named() {
    let err = |settings: Value| {
        OpenAiChatAdapter::with_env(&arm(AdapterKind::OpenaiChat, settings), env).unwrap_err().to_string()
    };
    let base = || json!({"base_url": "http://127.0.0.1:9/v1", "model": "m"});
    let mut s = base();
    s["tools"] = json!(["web"]);
    assert!(err(s).contains("settings.tools: unknown openai_chat setting"));
    assert!(err(json!({"model": "m"})).contains("settings.base_url: is required"));
    assert!(err(json!({"base_url": "ftp://h/v1", "model": "m"})).contains("settings.base_url"));
    assert!(err(json!({"base_url": "https://u:p@h/v1", "model": "m"})).contains("settings.base_url"));
    assert!(err(json!({"base_url": "https://h/v1"})).contains("settings.model"));
    let mut s = base();
    s["api_key_env"] = json!("COHORT_TEST_UNSET_VAR");
    let e = err(s);
    assert!(e.contains("settings.api_key_env") && e.contains("COHORT_TEST_UNSET_VAR is not set"), "{e}");
    let mut s = base();
    s["extra_headers"] = json!({"Authorization": "Bearer x"});
    assert!(err(s).contains("settings.extra_headers"));
    let mut s = base();
    s["timeout_secs"] = json!(0);
    assert!(err(s).contains("settings.timeout_secs"));
    assert!(for_arm(&arm(AdapterKind::OpenaiChat, base())).is_ok());
    // The manual arm builds (a person runs it); its settings are checked.
    assert!(for_arm(&arm(AdapterKind::Manual, json!({"plan": "Pro"}))).is_ok());
    let e = for_arm(&arm(AdapterKind::Manual, json!({"model": "m"}))).unwrap_err().to_string();
    assert!(e.contains("settings.model: unknown manual setting"), "{e}");
}

// === command ===

/// A `command` adapter running `/bin/sh` on `script` (written to `dir`;
/// run through sh, never executed directly, so no exec races the write).
fn shell(dir: &tempfile::TempDir, script: &str, extra: Value) -> CommandAdapter {
    static SCRIPTS: AtomicUsize = AtomicUsize::new(0);
    let path = dir.path().join(format!("s{}.sh", SCRIPTS.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, script).unwrap();
    let mut settings = json!({"program": "/bin/sh", "args": [path.to_string_lossy()]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        settings[k] = v.clone();
    }
    CommandAdapter::from_arm(&arm(AdapterKind::Command, settings)).unwrap()
}

/// Exit 0 with output is `ok`: stdout is the output, the prompt arrived on
/// stdin verbatim, `env` reached the program, and the version is the
/// configured label.
#[tokio::test]
async fn command_ok_echoes_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = shell(
        &dir,
        "printf 'turns=%s greeting=%s\\n' \"$COHORT_TURNS\" \"$GREETING\"; cat\n",
        json!({"version_label": "local-1", "env": {"GREETING": "hi"}}),
    );
    let r = adapter.call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("turns=1 greeting=hi\nWhat is known about topic 1? Cite sources.".into()));
    assert_eq!(r.observed_version.as_deref(), Some("local-1"));
}

/// A follow-up gets the whole conversation, each turn under its header.
#[tokio::test]
async fn command_follow_up_gets_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = shell(&dir, "cat\n", json!({}));
    let r = adapter.call(&request(&[("user", "Q?"), ("system_under_test", "Which?"), ("user", "Cite.")])).await;
    assert_eq!(
        r.reply,
        Reply::Output(
            "--- cohort turn 1: user ---\nQ?\n--- cohort turn 2: system_under_test ---\nWhich?\n\
             --- cohort turn 3: user ---\nCite.\n"
                .into()
        )
    );
    assert_eq!(r.observed_version, None, "no version_label: not disclosed");
}

/// A non-zero exit is `client_error` with stderr's first line.
#[tokio::test]
async fn command_nonzero_exit_is_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = shell(&dir, "echo 'boom: bad input' >&2\necho more >&2\nexit 3\n", json!({})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::ClientError);
    assert!(r.detail.contains("exit status 3: boom: bad input") && !r.detail.contains("more"), "{}", r.detail);
    assert_eq!(r.reply, Reply::Nothing);
}

/// Exit 0 with blank stdout is `empty_content`; non-UTF-8 is `malformed`.
#[tokio::test]
async fn command_empty_or_binary_output() {
    let dir = tempfile::tempdir().unwrap();
    let r = shell(&dir, "cat >/dev/null\necho\n", json!({})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::EmptyContent, "{}", r.detail);
    let r = shell(&dir, "printf '\\377\\376 not utf-8'\n", json!({})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Malformed, "{}", r.detail);
}

/// A program that cannot be started is `client_error` naming it.
#[tokio::test]
async fn command_missing_program_is_client_error() {
    let program = "/nonexistent/cohort-no-such-program";
    let adapter = CommandAdapter::from_arm(&arm(AdapterKind::Command, json!({"program": program}))).unwrap();
    let r = adapter.call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::ClientError);
    assert!(r.detail.contains(program), "{}", r.detail);
}

/// A program still running at `timeout_secs` is killed: `timeout`.
#[tokio::test]
async fn command_timeout_kills_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let r = shell(&dir, "exec sleep 30\n", json!({"timeout_secs": 0.3})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Timeout, "{}", r.detail);
}

/// Unknown or missing settings are refused naming the setting.
#[test]
fn command_bad_settings_are_named() {
    let err = |settings: Value| CommandAdapter::from_arm(&arm(AdapterKind::Command, settings)).unwrap_err().to_string();
    assert!(err(json!({})).contains("settings.program: is required"));
    assert!(err(json!({"program": "x", "stdin": "y"})).contains("settings.stdin: unknown command setting"));
    assert!(err(json!({"program": "x", "args": "-v"})).contains("settings.args"));
    assert!(err(json!({"program": "x", "env": {"A": 1}})).contains("settings.env"));
    assert!(for_arm(&arm(AdapterKind::Command, json!({"program": "x"}))).is_ok());
}

/// `openai_chat` under a configured clarification rule: a short uncited
/// question as the first reply is a clarification, the same text after the
/// suffix (three turns) is output, and a cited reply never is one; without
/// the rule it is output.
#[tokio::test]
async fn openai_clarification_rule() {
    let question = "Which years should I cover?";
    let (url, _seen) = fixed_server(json!({"model": "sonar", "choices": [{"message": {"content": question}}]})).await;
    let ruled = openai(json!({"base_url": url, "model": "m", "clarification": {"max_chars": 300}}));
    assert_eq!(ruled.call(&prompt()).await.reply, Reply::Clarification(question.into()));
    let follow_up = request(&[("user", "Q?"), ("system_under_test", question), ("user", "Cite sources.")]);
    assert_eq!(ruled.call(&follow_up).await.reply, Reply::Output(question.into()));
    assert_eq!(
        openai(json!({"base_url": url, "model": "m"})).call(&prompt()).await.reply,
        Reply::Output(question.into())
    );

    let (url, _seen) =
        fixed_server(json!({"choices": [{"message": {"content": question}}], "citations": ["https://a.example/"]}))
            .await;
    let ruled = openai(json!({"base_url": url, "model": "m", "clarification": {"max_chars": 300}}));
    assert_eq!(ruled.call(&prompt()).await.reply, Reply::Output(question.into()), "a cited reply is an answer");
}
