//! `http_json` against a loopback axum server playing an asynchronous
//! research API of the common job shape: `POST /v1/research` answers
//! `202 {"job": {"id", "status": "pending"}}`, `GET /v1/jobs/{id}` answers
//! the job until its status is `succeeded` (with `result.answer`,
//! `result.sources[] {url, title, snippet}`, `result.model_version`,
//! `usage {prompt_tokens, completion_tokens}`) or `failed`; errors in the
//! `{"error": {"message", "code"}}` form most JSON APIs use. Timeouts are
//! short configured bounds, never timed assertions.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure panics

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use cohort_core::config::{AdapterKind, ArmConfig};
use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_worker::Report;
use cohort_worker::adapters::http_json::HttpJsonAdapter;
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply, for_arm};
use cohort_worker::record::RunRecord;
use serde_json::{Value, json};
use support::{Canned, PROMPT, SUFFIX, answer, next, ok, status};

const KEY: &str = "re-live-key-5d1e88a0c3f2";
const KEY_VAR: &str = "COHORT_TEST_HTTP_JSON_KEY";
const JOB: &str = "job-7f3c2a";

#[derive(Default)]
struct Script {
    create: VecDeque<Canned>,
    polls: VecDeque<Canned>,
    bodies: Vec<Value>,
    /// `x-api-key` of every request.
    keys: Vec<Option<String>>,
    polled: Vec<String>,
}

type Shared = Arc<Mutex<Script>>;

fn key(headers: &HeaderMap) -> Option<String> {
    support::header(headers, "x-api-key")
}

async fn create(State(s): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let c = {
        let mut s = s.lock().unwrap();
        s.bodies.push(serde_json::from_str(&body).unwrap());
        s.keys.push(key(&headers));
        next(&mut s.create)
    };
    answer(c).await
}

async fn job(State(s): State<Shared>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let c = {
        let mut s = s.lock().unwrap();
        s.polled.push(id);
        s.keys.push(key(&headers));
        next(&mut s.polls)
    };
    answer(c).await
}

async fn server(create_answers: Vec<Canned>, polls: Vec<Canned>) -> (String, Shared) {
    let shared: Shared =
        Arc::new(Mutex::new(Script { create: create_answers.into(), polls: polls.into(), ..Script::default() }));
    let app = axum::Router::new()
        .route("/v1/research", axum::routing::post(create))
        .route("/v1/jobs/{id}", axum::routing::get(job))
        .with_state(shared.clone());
    (support::serve(app).await, shared)
}

fn arm(settings: Value) -> ArmConfig {
    ArmConfig {
        id: "re".into(),
        label: "RealityEngine API".into(),
        adapter: AdapterKind::HttpJson,
        pinned_version: "re-2.3.1".into(),
        vendor_lineage: "re".into(),
        concurrency: 1,
        optional: false,
        workflow: cohort_core::config::DEFAULT_WORKFLOW.into(),
        controls_not_disabled: Vec::new(),
        settings,
    }
}

fn env(var: &str) -> Option<String> {
    (var == KEY_VAR).then(|| KEY.to_owned())
}

/// Settings for a synchronous API at `url` (answers at `/result/...`).
fn sync_settings(url: &str) -> Value {
    json!({
        "url": format!("{url}/research"),
        "headers": {"x-api-key": format!("${{ENV:{KEY_VAR}}}"), "x-client": "cohort"},
        "body": {"query": "{{prompt}}", "mode": "deep", "options": {"language": "en", "label": "q: {{prompt}}"}},
        "output_pointer": "/result/answer",
        "citations_pointer": "/result/sources",
        "version_pointer": "/result/model_version",
        "usage_input_pointer": "/usage/prompt_tokens",
        "usage_output_pointer": "/usage/completion_tokens",
    })
}

/// The same API used asynchronously, through its job URL.
fn job_settings(url: &str) -> Value {
    let mut s = sync_settings(url);
    s["output_pointer"] = json!("/job/result/answer");
    s["citations_pointer"] = json!("/job/result/sources");
    s["version_pointer"] = json!("/job/result/model_version");
    s["job_id_pointer"] = json!("/job/id");
    s["poll_url"] = json!(format!("{url}/jobs/{{{{job_id}}}}"));
    s["status_pointer"] = json!("/job/status");
    s["done_values"] = json!(["succeeded"]);
    s["failed_values"] = json!(["failed", "cancelled"]);
    s["poll_interval_ms"] = json!(10);
    s
}

fn adapter(settings: Value) -> HttpJsonAdapter {
    HttpJsonAdapter::with_env(&arm(settings), env).unwrap()
}

fn request(turns: &[(&str, &str)], deadline: Option<Duration>) -> AdapterRequest {
    support::request("re", turns, deadline)
}

fn prompt() -> AdapterRequest {
    request(&[("user", PROMPT)], None)
}

fn keyless(r: &AdapterResponse) {
    support::keyless(r, KEY);
}

fn result() -> Value {
    json!({
        "answer": "Topic 1 was first described in 2019 [1]. A later survey disagreed [2].",
        "sources": [
            {"url": "https://example.org/a", "title": "Example A", "snippet": "First described in 2019."},
            {"url": "https://news.example/b", "title": "News B"},
            "https://plain.example/c",
            {"url": "https://example.org/a", "title": "Example A again", "snippet": "  "}
        ],
        "model_version": "re-2.3.1"
    })
}

// === answers ===

/// A synchronous answer: the output, citations (URLs in order, each once),
/// system sources only for entries with snippet text, version and usage
/// by their pointers; the key header from `${ENV:...}` is sent, and a
/// prompt holding quotes, backslashes, newlines and `{{prompt}}` itself
/// arrives exactly as written, in the value and inside a longer string.
#[tokio::test]
async fn sync_answer_with_citations_and_a_hostile_prompt() {
    let (url, seen) =
        server(vec![ok(json!({"result": result(), "usage": {"prompt_tokens": 31, "completion_tokens": 420}}))], vec![])
            .await;
    let hostile = "Say \"hi\" \\ then {{prompt}} and {{conversation}}\n\t}\"]} done";
    let a = adapter(sync_settings(&url));
    assert!(!format!("{a:?}").contains(KEY), "Debug of the adapter shows no key");
    let r = a.call(&request(&[("user", hostile)], None)).await;
    keyless(&r);
    assert_eq!((r.class, r.http_status), (AttemptClass::Ok, 200), "{}", r.detail);
    let Reply::Output(text) = &r.reply else { panic!("{:?}", r.reply) };
    assert!(text.starts_with("Topic 1 was first described"));
    assert_eq!(r.citations.urls(), ["https://example.org/a", "https://news.example/b", "https://plain.example/c"]);
    assert_eq!(r.sources.len(), 1);
    assert_eq!(
        (r.sources[0].url.as_str(), r.sources[0].snippet.as_str()),
        ("https://example.org/a", "First described in 2019.")
    );
    assert_eq!(r.observed_version.as_deref(), Some("re-2.3.1"));
    assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((31, 420)));
    let seen = seen.lock().unwrap();
    let body = &seen.bodies[0];
    assert_eq!(body["query"], hostile);
    assert_eq!(body["options"]["label"], format!("q: {hostile}"));
    assert_eq!(body["mode"], "deep");
    assert_eq!(seen.keys[0].as_deref(), Some(KEY));
}

/// A job API: the create answer is `pending`, polls see `running` then
/// `succeeded`, and the answer is read from the last poll's body; the job
/// URL carries the id and the key.
#[tokio::test]
async fn job_is_polled_to_completion() {
    let (url, seen) = server(
        vec![status(202, json!({"job": {"id": JOB, "status": "pending"}}))],
        vec![
            ok(json!({"job": {"id": JOB, "status": "running"}})),
            ok(json!({"job": {"id": JOB, "status": "running"}})),
            ok(json!({"job": {"id": JOB, "status": "succeeded", "result": result()}, "usage": {"prompt_tokens": 5}})),
        ],
    )
    .await;
    let r = adapter(job_settings(&url)).call(&prompt()).await;
    keyless(&r);
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.citations.urls().len(), 3);
    assert_eq!(r.observed_version.as_deref(), Some("re-2.3.1"));
    assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((5, 0)));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.polled, [JOB, JOB, JOB]);
    assert!(seen.keys.iter().all(|k| k.as_deref() == Some(KEY)));
}

/// A poll that meets a 502 goes on; a job that reports `failed` is a
/// `server_error` naming the job.
#[tokio::test]
async fn poll_outage_then_failed_job() {
    let (url, _seen) = server(
        vec![status(202, json!({"job": {"id": JOB, "status": "pending"}}))],
        vec![
            status(502, json!({"error": {"message": "bad gateway"}})),
            ok(json!({"job": {"id": JOB, "status": "failed"}})),
        ],
    )
    .await;
    let r = adapter(job_settings(&url)).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::ServerError, "{}", r.detail);
    assert!(r.detail.contains(JOB) && r.detail.contains("failed"), "{}", r.detail);
}

/// The run's deadline while the job runs: a `timeout` naming the job id;
/// through `execute` the run is `timed_out` with it in the reason.
#[tokio::test]
async fn deadline_during_polling_is_timed_out_with_the_job_id() {
    let running = || {
        (
            vec![status(202, json!({"job": {"id": JOB, "status": "pending"}}))],
            vec![ok(json!({"job": {"id": JOB, "status": "running"}}))],
        )
    };
    let (c, p) = running();
    let (url, _seen) = server(c, p).await;
    let r = adapter(job_settings(&url)).call(&request(&[("user", PROMPT)], Some(Duration::from_millis(500)))).await;
    assert_eq!(r.class, AttemptClass::Timeout, "{}", r.detail);
    assert!(r.detail.contains(JOB) && r.detail.contains("run's deadline"), "{}", r.detail);

    let (c, p) = running();
    let (url, _seen) = server(c, p).await;
    let (report, record) = execute(adapter(job_settings(&url)), Duration::from_millis(700)).await;
    let Report::Result { outcome, reason, .. } = report else { panic!("expected a result, got {report:?}") };
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(reason.contains(JOB), "{reason}");
    assert_eq!(record.unwrap().outcome, cohort_core::taxonomy::Outcome::TimedOut);
}

// === errors ===

async fn one(c: Canned) -> AdapterResponse {
    let (url, _seen) = server(vec![c], vec![]).await;
    let r = adapter(sync_settings(&url)).call(&prompt()).await;
    keyless(&r);
    r
}

/// 429 with and without Retry-After (seconds, or an HTTP date) is
/// `rate_limited`, the retry time noted when given.
#[tokio::test]
async fn rate_limited_with_and_without_retry_after() {
    let body = json!({"error": {"message": "Too many requests", "code": "rate_limited"}});
    let r = one(Canned { headers: vec![("retry-after", "3".into())], ..status(429, body.clone()) }).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::RateLimited, 429), "{}", r.detail);
    assert!(r.detail.contains("retry after 3 s"), "{}", r.detail);
    let r = one(status(429, body)).await;
    assert_eq!(r.class, AttemptClass::RateLimited);
    assert!(!r.detail.contains("retry after"), "{}", r.detail);
}

/// Insufficient quota (429 saying so, and 402) is `quota_exhausted`; a 401
/// is `auth_error` and, echoing the key, shows `[redacted]`; 500 and 503
/// are `server_error`.
#[tokio::test]
async fn quota_auth_and_server_errors() {
    let r = one(status(
        429,
        json!({"error": {"message": "insufficient_quota: credits exhausted", "code": "insufficient_quota"}}),
    ))
    .await;
    assert_eq!(r.class, AttemptClass::QuotaExhausted, "{}", r.detail);
    let r = one(status(402, json!({"error": {"message": "Payment required: 0 credits left"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::QuotaExhausted, 402), "{}", r.detail);
    let r = one(status(401, json!({"error": {"message": format!("invalid key {KEY}")}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::AuthError, 401), "{}", r.detail);
    assert!(r.detail.contains("[redacted]"), "{}", r.detail);
    let r = one(status(500, json!({"error": {"message": "internal error"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 500), "{}", r.detail);
    let r = one(status(503, json!({"error": {"message": "maintenance"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 503), "{}", r.detail);
}

/// Blank output is `empty_content`; an output pointer that finds nothing,
/// and JSON cut short, are `malformed`; a missing version is not
/// disclosed (the answer still counts).
#[tokio::test]
async fn empty_missing_and_malformed() {
    let r = one(ok(json!({"result": {"answer": "  ", "model_version": "re-2.3.1"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::EmptyContent, 200), "{}", r.detail);
    let r = one(ok(json!({"result": {"text": "wrong field"}}))).await;
    assert_eq!(r.class, AttemptClass::Malformed, "{}", r.detail);
    assert!(r.detail.contains("output_pointer /result/answer"), "{}", r.detail);
    let mut cut = ok(json!({"result": result()}));
    cut.body.truncate(20);
    assert_eq!(one(cut).await.class, AttemptClass::Malformed);
    let r = one(ok(json!({"result": {"answer": "Fine."}}))).await;
    assert_eq!((r.class, r.observed_version), (AttemptClass::Ok, None));
}

/// With `refusal_pointer`, a refusal message is `refused` with its text.
#[tokio::test]
async fn refusal_is_refused() {
    let (url, _seen) =
        server(vec![ok(json!({"result": {"answer": null, "refusal": "This request violates our policy."}}))], vec![])
            .await;
    let mut s = sync_settings(&url);
    s["refusal_pointer"] = json!("/result/refusal");
    let r = adapter(s).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Refused, "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("This request violates our policy.".into()));
}

/// A clarifying question flagged by `clarification_pointer`, through
/// `execute`: the follow-up body's `{{conversation}}` holds the prompt, the
/// question and the suffix only; the record keeps the exchange and the
/// second answer is the output; no key in the record.
#[tokio::test]
async fn clarifying_question_answered_with_the_suffix() {
    let question = "Which region should the sources cover?";
    let (url, seen) = server(
        vec![
            ok(json!({"result": {"answer": null, "clarifying_question": question}})),
            ok(json!({"result": result(), "usage": {"prompt_tokens": 50, "completion_tokens": 400}})),
        ],
        vec![],
    )
    .await;
    let mut s = sync_settings(&url);
    s["body"] = json!({"messages": "{{conversation}}", "mode": "deep"});
    s["clarification_pointer"] = json!("/result/clarifying_question");
    let (report, record) = execute(adapter(s), Duration::from_secs(20)).await;
    let Report::Result { outcome, .. } = report else { panic!("expected a result, got {report:?}") };
    assert_eq!(outcome, Outcome::Completed);
    let record = record.unwrap();
    let turns: Vec<(&str, &str)> = record.conversation.iter().map(|t| (t.role.as_str(), t.text.as_str())).collect();
    assert_eq!(turns[..3], [("user", PROMPT), ("system_under_test", question), ("user", SUFFIX)]);
    assert_eq!(record.observed_version, "re-2.3.1");
    assert!(!serde_json::to_string(&record).unwrap().contains(KEY));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.bodies[0]["messages"], json!([{"role": "user", "content": PROMPT}]));
    assert_eq!(
        seen.bodies[1]["messages"],
        json!([{"role": "user", "content": PROMPT}, {"role": "assistant", "content": question}, {"role": "user", "content": SUFFIX}])
    );
}

async fn execute(adapter: HttpJsonAdapter, timeout: Duration) -> (Report, Option<RunRecord>) {
    support::execute(arm(json!({})), Arc::new(adapter), timeout).await
}

// === settings ===

/// Bad settings are refused naming the setting: unknown names, a literal
/// credential header, an unset `${ENV:...}`, a body without a placeholder,
/// a pointer that is not one, half a polling configuration, a
/// clarification without `{{conversation}}`; `for_arm` builds the adapter.
#[test]
fn bad_settings_are_named() {
    let err = |settings: Value| HttpJsonAdapter::with_env(&arm(settings), env).unwrap_err().to_string();
    let base = || sync_settings("http://127.0.0.1:9/v1");
    let with = |k: &str, v: Value| {
        let mut s = base();
        s[k] = v;
        s
    };
    assert!(err(with("model", json!("x"))).contains("settings.model: unknown http_json setting"));
    let e = err(with("headers", json!({"Authorization": "Bearer sk-literal"})));
    assert!(e.contains("settings.headers") && e.contains("${ENV:NAME}") && !e.contains("sk-literal"), "{e}");
    let e = err(with("headers", json!({"x-api-key": "${ENV:COHORT_TEST_UNSET_VAR}"})));
    assert!(e.contains("COHORT_TEST_UNSET_VAR is not set"), "{e}");
    assert!(err(with("body", json!({"q": "static"}))).contains("settings.body"));
    assert!(err(with("output_pointer", json!("result.answer"))).contains("settings.output_pointer"));
    assert!(err(with("method", json!("GET"))).contains("settings.method"));
    assert!(err(with("url", json!("ftp://x/y"))).contains("settings.url"));
    let e = err(with("job_id_pointer", json!("/job/id")));
    assert!(e.contains("settings.poll_url: is required"), "{e}");
    let mut s = job_settings("http://127.0.0.1:9/v1");
    s["poll_url"] = json!("http://127.0.0.1:9/v1/jobs");
    assert!(err(s).contains("settings.poll_url: must hold {{job_id}}"));
    let e = err(with("clarification_pointer", json!("/q")));
    assert!(e.contains("{{conversation}}"), "{e}");
    assert!(err(with("poll_interval_ms", json!(100))).contains("only with polling"));
    assert!(for_arm(&arm(base())).is_err(), "the real environment has no test key");
    let mut s = base();
    s["headers"] = json!({"x-client": "cohort"});
    assert!(for_arm(&arm(s)).is_ok());
    assert!(for_arm(&arm(job_settings("http://127.0.0.1:9/v1"))).is_err());
}

/// A server that accepts and never answers: past `timeout_secs` the
/// attempt is a `timeout` naming the bound.
#[tokio::test]
async fn a_silent_server_is_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Holds every connection open without a byte; ends with the runtime.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut s = sync_settings(&format!("http://{addr}/v1"));
    s["timeout_secs"] = json!(0.3);
    let r = adapter(s).call(&prompt()).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::Timeout, 0), "{}", r.detail);
    assert!(r.detail.contains("timeout_secs (0.3 s)"), "{}", r.detail);
}

/// Proves the numbered citation list keeps every position (the answer's
/// `[2]` is the list's second entry even after a repeated URL), a
/// `finish_pointer` reading a cut-off reason makes the answer
/// `client_error` with its partial text kept (the one rule of every
/// adapter), `cut_off_values` replaces the default reasons and needs
/// `finish_pointer`, and a reply that is only a reasoning block is
/// `empty_content`.
#[test]
fn cut_off_answers_fail_and_citations_keep_their_positions() {
    let mut settings = sync_settings("http://127.0.0.1:9");
    settings["finish_pointer"] = json!("/result/finish");
    let a = adapter(settings.clone());
    let mut body = json!({"result": result()});
    let r = a.read_answer(200, &body);
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    let cohort_core::scoring::ApiCitations::Numbered { list } = &r.citations else { panic!("{:?}", r.citations) };
    assert_eq!(list.len(), 4, "every entry keeps its place");
    assert_eq!(list[1].url, "https://news.example/b");
    body["result"]["finish"] = json!("length");
    let r = a.read_answer(200, &body);
    assert_eq!(r.class, AttemptClass::ClientError, "{}", r.detail);
    assert!(matches!(&r.reply, Reply::Output(t) if t.starts_with("Topic 1")), "{:?}", r.reply);
    settings["cut_off_values"] = json!(["truncated"]);
    let custom = adapter(settings.clone());
    assert_eq!(custom.read_answer(200, &body).class, AttemptClass::Ok);
    body["result"]["finish"] = json!("truncated");
    assert_eq!(custom.read_answer(200, &body).class, AttemptClass::ClientError);
    let mut orphan = sync_settings("http://127.0.0.1:9");
    orphan["cut_off_values"] = json!(["x"]);
    let e = HttpJsonAdapter::with_env(&arm(orphan), env).unwrap_err().to_string();
    assert!(e.contains("cut_off_values") && e.contains("finish_pointer"), "{e}");
    body["result"]["finish"] = json!("stop");
    body["result"]["answer"] = json!("<think>\nLet me search for this.\n</think>\n");
    assert_eq!(a.read_answer(200, &body).class, AttemptClass::EmptyContent);
}
