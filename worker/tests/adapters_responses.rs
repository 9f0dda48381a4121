//! `openai_responses` against a loopback axum server that replays bodies
//! shaped like the real Responses API's, errors included. The shapes come
//! from OpenAI's API reference for `POST /v1/responses`,
//! `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel` (the
//! response object: `id`, `object`, `status` queued / in_progress /
//! completed / failed / incomplete / cancelled, `model`, `output` items of
//! type `reasoning`, `web_search_call` and `message` whose `content` holds
//! `output_text` parts with `url_citation` annotations {url, title,
//! start_index, end_index} or `refusal` parts, `usage` {input_tokens,
//! output_tokens, ...details}, `error` {code, message}, `incomplete_details`
//! {reason}), from its background-mode and deep-research guides (queued
//! first, then polled), and from its error-codes guide for the error
//! bodies (`rate_limit_exceeded`, `insufficient_quota`, `invalid_api_key`,
//! `server_error`). Timeouts are short configured bounds, never timed
//! assertions.

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
use cohort_worker::adapters::openai_responses::OpenAiResponsesAdapter;
use cohort_worker::adapters::{Adapter, AdapterRequest, AdapterResponse, Reply, for_arm};
use cohort_worker::record::RunRecord;
use serde_json::{Value, json};
use support::{Canned, PROMPT, SUFFIX, answer, next, ok, status};

const KEY: &str = "sk-proj-responses-test-93ab7c1e5f";
const KEY_VAR: &str = "COHORT_TEST_RESPONSES_KEY";
const ID: &str = "resp_68af4030592c81938ec0a5fbab4a3e9a";

/// What the server answers and what it saw.
#[derive(Default)]
struct Script {
    /// Answers to `POST /responses`, in turn; the last one repeats.
    create: VecDeque<Canned>,
    /// Answers to `GET /responses/{id}`, in turn; the last one repeats.
    polls: VecDeque<Canned>,
    /// Request bodies of the create calls.
    bodies: Vec<Value>,
    /// Authorization headers of every request.
    auths: Vec<Option<String>>,
    /// Ids polled and ids cancelled.
    polled: Vec<String>,
    cancelled: Vec<String>,
}

type Shared = Arc<Mutex<Script>>;

fn auth(headers: &HeaderMap) -> Option<String> {
    support::header(headers, "authorization")
}

async fn create(State(s): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let c = {
        let mut s = s.lock().unwrap();
        s.bodies.push(serde_json::from_str(&body).unwrap());
        s.auths.push(auth(&headers));
        next(&mut s.create)
    };
    answer(c).await
}

async fn get(State(s): State<Shared>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let c = {
        let mut s = s.lock().unwrap();
        s.polled.push(id);
        s.auths.push(auth(&headers));
        next(&mut s.polls)
    };
    answer(c).await
}

async fn cancel(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    s.lock().unwrap().cancelled.push(id.clone());
    answer(ok(json!({"id": id, "object": "response", "status": "cancelled", "output": []}))).await
}

/// A server replaying `create` then `polls`; returns its base URL.
async fn server(create_answers: Vec<Canned>, polls: Vec<Canned>) -> (String, Shared) {
    let shared: Shared =
        Arc::new(Mutex::new(Script { create: create_answers.into(), polls: polls.into(), ..Script::default() }));
    let app = axum::Router::new()
        .route("/v1/responses", axum::routing::post(create))
        .route("/v1/responses/{id}", axum::routing::get(get))
        .route("/v1/responses/{id}/cancel", axum::routing::post(cancel))
        .with_state(shared.clone());
    (support::serve(app).await, shared)
}

fn arm(settings: Value) -> ArmConfig {
    ArmConfig {
        id: "chatgpt".into(),
        label: "ChatGPT Deep Research".into(),
        adapter: AdapterKind::OpenaiResponses,
        pinned_version: "o3-deep-research-2025-06-26".into(),
        vendor_lineage: "openai".into(),
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

/// An adapter on `url` with the key and `extra` settings.
fn adapter(url: &str, model: &str, extra: Value) -> OpenAiResponsesAdapter {
    let mut settings = json!({"base_url": url, "model": model, "api_key_env": KEY_VAR, "poll_interval_ms": 10});
    for (k, v) in extra.as_object().into_iter().flatten() {
        settings[k] = v.clone();
    }
    OpenAiResponsesAdapter::with_env(&arm(settings), env).unwrap()
}

fn request(turns: &[(&str, &str)], deadline: Option<Duration>) -> AdapterRequest {
    support::request("chatgpt", turns, deadline)
}

fn prompt() -> AdapterRequest {
    request(&[("user", "What is known about topic 1? Cite sources.")], None)
}

/// No response, detail or Debug shows the key.
fn keyless(r: &AdapterResponse) {
    support::keyless(r, KEY);
}

const TEXT_A: &str = "Topic 1 was first described in 2019 ([example.org](https://example.org/a)).";
const TEXT_B: &str = " A later survey disagreed ([news.example](https://news.example/b)).";

/// A completed deep-research response: a reasoning item, a web search
/// call, and a message with two output_text parts whose url_citation
/// annotations span the inline markdown citations (as the API returns).
fn completed(id: &str) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": 1_756_300_000,
        "status": "completed",
        "background": true,
        "error": null,
        "incomplete_details": null,
        "model": "o3-deep-research-2025-06-26",
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Planning the search."}]},
            {"id": "ws_1", "type": "web_search_call", "status": "completed",
             "action": {"type": "search", "query": "topic 1 first description"}},
            {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [
                {"type": "output_text", "text": TEXT_A, "logprobs": [], "annotations": [
                    {"type": "url_citation", "start_index": 44, "end_index": 74, "url": "https://example.org/a", "title": "Example A"}
                ]},
                {"type": "output_text", "text": TEXT_B, "logprobs": [], "annotations": [
                    {"type": "url_citation", "start_index": 26, "end_index": 66, "url": "https://news.example/b", "title": "News B"},
                    {"type": "url_citation", "start_index": 26, "end_index": 66, "url": "https://example.org/a", "title": "Example A"}
                ]}
            ]}
        ],
        "usage": {"input_tokens": 1840, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 5210, "output_tokens_details": {"reasoning_tokens": 4800}, "total_tokens": 7050}
    })
}

/// The same response while it runs.
fn running(id: &str, status: &str) -> Value {
    json!({"id": id, "object": "response", "created_at": 1_756_300_000, "status": status, "background": true,
           "error": null, "incomplete_details": null, "model": "o3-deep-research-2025-06-26", "output": [], "usage": null})
}

fn message(id: &str, status: &str, content: Value) -> Value {
    json!({"id": id, "object": "response", "status": status, "model": "gpt-4.1-2025-04-14",
           "output": [{"id": "msg_2", "type": "message", "status": "completed", "role": "assistant", "content": content}],
           "usage": {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29}})
}

// === answers ===

/// A completed response (foreground): the output is the output_text parts
/// concatenated, the url_citation URLs become the citations (in order,
/// each once), the observed version is the served `model`, usage is read;
/// the request carries the prompt as input, the default web-search tool,
/// no background for a model that is not a deep-research one, and the key
/// as a bearer.
#[tokio::test]
async fn completed_response_with_citations() {
    let (url, seen) = server(vec![ok(completed("resp_fg"))], vec![]).await;
    let r = adapter(&url, "gpt-4.1", json!({"max_output_tokens": 9000, "reasoning_effort": "medium"}))
        .call(&prompt())
        .await;
    keyless(&r);
    assert_eq!((r.class, r.http_status), (AttemptClass::Ok, 200), "{}", r.detail);
    assert_eq!(r.reply, Reply::Output(format!("{TEXT_A}{TEXT_B}")));
    assert_eq!(r.citations.urls(), ["https://example.org/a", "https://news.example/b"]);
    assert!(r.sources.is_empty(), "spans are the system's own text: never evidence");
    assert_eq!(r.observed_version.as_deref(), Some("o3-deep-research-2025-06-26"));
    assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((1840, 5210)));
    let seen = seen.lock().unwrap();
    let body = &seen.bodies[0];
    assert_eq!(body["model"], "gpt-4.1");
    assert_eq!(body["input"], json!([{"role": "user", "content": "What is known about topic 1? Cite sources."}]));
    assert_eq!(body["tools"], json!([{"type": "web_search_preview"}]));
    assert!(body.get("background").is_none(), "{body}");
    assert_eq!(body["max_output_tokens"], 9000);
    assert_eq!(body["reasoning"], json!({"effort": "medium"}));
    assert_eq!(seen.auths[0].as_deref(), Some(format!("Bearer {KEY}").as_str()));
    assert!(seen.polled.is_empty());
}

/// A deep-research model runs in background: the create answer is
/// `queued`, polls see `in_progress` then `completed`, and the completed
/// body is read; the request asked for background and storage.
#[tokio::test]
async fn background_response_is_polled_to_completion() {
    let (url, seen) = server(
        vec![ok(running(ID, "queued"))],
        vec![ok(running(ID, "queued")), ok(running(ID, "in_progress")), ok(completed(ID))],
    )
    .await;
    let r = adapter(&url, "o3-deep-research", json!({})).call(&prompt()).await;
    keyless(&r);
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(r.citations.urls().len(), 2);
    assert_eq!(r.observed_version.as_deref(), Some("o3-deep-research-2025-06-26"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.bodies[0]["background"], true);
    assert_eq!(seen.bodies[0]["store"], true);
    assert_eq!(seen.polled, [ID, ID, ID]);
    assert!(seen.auths.iter().all(|a| a.as_deref() == Some(format!("Bearer {KEY}").as_str())), "polls carry the key");
}

/// A poll that meets a 503 or a 429 does not lose the research job: the
/// next poll goes on and the response completes.
#[tokio::test]
async fn an_outage_on_a_poll_is_polled_through() {
    let (url, seen) = server(
        vec![ok(running(ID, "queued"))],
        vec![
            status(503, json!({"error": {"message": "The engine is currently overloaded", "type": "server_error", "code": null}})),
            status(429, json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})),
            ok(completed(ID)),
        ],
    )
    .await;
    let r = adapter(&url, "o3-deep-research", json!({})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Ok, "{}", r.detail);
    assert_eq!(seen.lock().unwrap().polled.len(), 3);
}

/// The run's deadline during polling: the adapter stops just before it,
/// asks the API to cancel the response, and reports a `timeout` whose
/// detail names the response id (so the record keeps it); through
/// `execute` the run is `timed_out` with that reason.
#[tokio::test]
async fn deadline_during_polling_is_timed_out_with_the_id() {
    let (url, seen) = server(vec![ok(running(ID, "queued"))], vec![ok(running(ID, "in_progress"))]).await;
    let r = adapter(&url, "o3-deep-research", json!({}))
        .call(&request(&[("user", "Q? Cite sources.")], Some(Duration::from_millis(600))))
        .await;
    keyless(&r);
    assert_eq!(r.class, AttemptClass::Timeout, "{}", r.detail);
    assert!(r.detail.contains(ID) && r.detail.contains("run's deadline"), "{}", r.detail);
    assert!(r.detail.contains("cancel requested"), "{}", r.detail);
    assert_eq!(seen.lock().unwrap().cancelled, [ID]);
    assert!(seen.lock().unwrap().polled.len() > 1);

    // The same through the worker's execute: outcome timed_out, the id in
    // the record's failure reason.
    let (url, _seen) = server(vec![ok(running(ID, "queued"))], vec![ok(running(ID, "in_progress"))]).await;
    let (report, record) = execute(adapter(&url, "o3-deep-research", json!({})), Duration::from_millis(800)).await;
    let Report::Result { outcome, reason, .. } = report else { panic!("expected a result, got {report:?}") };
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(reason.contains(ID), "{reason}");
    let record = record.unwrap();
    assert_eq!(record.outcome, cohort_core::taxonomy::Outcome::TimedOut);
    assert!(record.failure_reason.unwrap().contains(ID));
}

/// Past `timeout_secs` (here without a run deadline) the same: a
/// `timeout` naming the id and the bound.
#[tokio::test]
async fn timeout_secs_during_polling_is_timeout() {
    let (url, _seen) = server(vec![ok(running(ID, "queued"))], vec![ok(running(ID, "in_progress"))]).await;
    let r = adapter(&url, "o3-deep-research", json!({"timeout_secs": 0.3})).call(&prompt()).await;
    assert_eq!(r.class, AttemptClass::Timeout, "{}", r.detail);
    assert!(r.detail.contains(ID) && r.detail.contains("timeout_secs (0.3 s)"), "{}", r.detail);
}

/// A create call that stalls past `timeout_secs` is a `timeout` too.
#[tokio::test]
async fn a_stalled_create_is_timeout() {
    let stall = Canned { delay: Duration::from_secs(30), ..ok(completed("x")) };
    let (url, _seen) = server(vec![stall], vec![]).await;
    let r = adapter(&url, "gpt-4.1", json!({"timeout_secs": 0.3})).call(&prompt()).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::Timeout, 0), "{}", r.detail);
}

// === errors ===

async fn one(c: Canned) -> AdapterResponse {
    let (url, _seen) = server(vec![c], vec![]).await;
    let r = adapter(&url, "gpt-4.1", json!({})).call(&prompt()).await;
    keyless(&r);
    r
}

/// 429 with and without Retry-After is `rate_limited`; the retry time is
/// noted when given.
#[tokio::test]
async fn rate_limited_with_and_without_retry_after() {
    let body = json!({"error": {"message": "Rate limit reached for o3-deep-research in organization org-x on requests per min (RPM): Limit 5, Used 5.",
                                "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    let r = one(Canned { headers: vec![("retry-after", "2".into())], ..status(429, body.clone()) }).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::RateLimited, 429), "{}", r.detail);
    assert!(r.detail.contains("Rate limit reached") && r.detail.contains("retry after 2 s"), "{}", r.detail);
    let r = one(status(429, body)).await;
    assert_eq!(r.class, AttemptClass::RateLimited, "{}", r.detail);
    assert!(!r.detail.contains("retry after"), "{}", r.detail);
}

/// 429 `insufficient_quota` and 402 are `quota_exhausted`.
#[tokio::test]
async fn insufficient_quota_is_quota_exhausted() {
    let r = one(status(429, json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                                              "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}})))
    .await;
    assert_eq!((r.class, r.http_status), (AttemptClass::QuotaExhausted, 429), "{}", r.detail);
    let r = one(status(402, json!({"error": {"message": "Payment required", "type": "billing"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::QuotaExhausted, 402), "{}", r.detail);
}

/// A 401 that echoes the key is an `auth_error` (the ledger pauses the
/// arm) whose detail shows `[redacted]`, never the key.
#[tokio::test]
async fn unauthorized_never_shows_the_key() {
    let r = one(status(401, json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."),
                                              "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})))
    .await;
    assert_eq!((r.class, r.http_status), (AttemptClass::AuthError, 401), "{}", r.detail);
    assert!(r.detail.contains("[redacted]"), "{}", r.detail);
}

/// 500 and 503 are `server_error`; a failed background response is
/// classified by its error code.
#[tokio::test]
async fn server_errors_and_failed_responses() {
    let r = one(status(500, json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 500), "{}", r.detail);
    let r = one(status(503, json!({"error": {"message": "The engine is currently overloaded, please try again later", "type": "server_error"}}))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::ServerError, 503), "{}", r.detail);

    let failed = |code: &str, message: &str| {
        let mut b = running(ID, "failed");
        b["error"] = json!({"code": code, "message": message});
        b
    };
    for (code, message, class) in [
        ("server_error", "The model failed to generate a response.", AttemptClass::ServerError),
        ("rate_limit_exceeded", "Rate limit reached.", AttemptClass::RateLimited),
        ("invalid_prompt", "Your prompt was flagged as potentially violating our usage policy.", AttemptClass::Refused),
    ] {
        let (url, _seen) = server(vec![ok(running(ID, "queued"))], vec![ok(failed(code, message))]).await;
        let r = adapter(&url, "o3-deep-research", json!({})).call(&prompt()).await;
        assert_eq!(r.class, class, "{code}: {}", r.detail);
        assert!(r.detail.contains(ID) && r.detail.contains(code), "{}", r.detail);
    }
}

/// A completed response whose message has no text is `empty_content`.
#[tokio::test]
async fn empty_output_is_empty_content() {
    let r =
        one(ok(message("resp_e", "completed", json!([{"type": "output_text", "text": "", "annotations": []}])))).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::EmptyContent, 200), "{}", r.detail);
    assert_eq!(r.reply, Reply::Nothing);
    // Only a reasoning item, no message at all: the same.
    let mut b = running("resp_r", "completed");
    b["output"] = json!([{"id": "rs_1", "type": "reasoning", "summary": []}]);
    assert_eq!(one(ok(b)).await.class, AttemptClass::EmptyContent);
}

/// A 200 whose JSON is cut short, and one with no status, are `malformed`.
#[tokio::test]
async fn malformed_json_is_malformed() {
    let mut cut = ok(completed("resp_m"));
    cut.body.truncate(cut.body.len() / 2);
    let r = one(cut).await;
    assert_eq!((r.class, r.http_status), (AttemptClass::Malformed, 200), "{}", r.detail);
    let r = one(ok(json!({"id": "resp_m", "object": "response", "output": []}))).await;
    assert_eq!(r.class, AttemptClass::Malformed, "{}", r.detail);
}

/// A refusal part is `refused` with its text kept; an incomplete response
/// cut by the content filter is `refused` with its partial text; one cut
/// by `max_output_tokens` is `client_error` (the run is `failed`), the
/// partial text kept.
#[tokio::test]
async fn refusals_and_incomplete_responses() {
    let r = one(ok(message(
        "resp_x",
        "completed",
        json!([{"type": "refusal", "refusal": "I'm sorry, but I can't help with that request."}]),
    )))
    .await;
    assert_eq!(r.class, AttemptClass::Refused, "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("I'm sorry, but I can't help with that request.".into()));
    assert_eq!(r.observed_version.as_deref(), Some("gpt-4.1-2025-04-14"));

    let mut b =
        message("resp_i", "incomplete", json!([{"type": "output_text", "text": "Partial report", "annotations": []}]));
    b["incomplete_details"] = json!({"reason": "content_filter"});
    let r = one(ok(b.clone())).await;
    assert_eq!(r.class, AttemptClass::Refused, "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("Partial report".into()));

    b["incomplete_details"] = json!({"reason": "max_output_tokens"});
    let r = one(ok(b)).await;
    assert_eq!(r.class, AttemptClass::ClientError, "{}", r.detail);
    assert!(r.detail.contains("max_output_tokens"), "{}", r.detail);
    assert_eq!(r.reply, Reply::Output("Partial report".into()));
}

// === clarification ===

/// Under a configured rule, a short uncited first reply ending with a
/// question is a clarification; the follow-up sends the whole exchange as
/// input (user, assistant, user: the suffix only); through `execute` the
/// record keeps the exchange and the second reply is the output. Without
/// the rule the same reply is the output.
#[tokio::test]
async fn clarifying_question_answered_with_the_suffix() {
    let question = "Do you want sources from a specific period, or all years?";
    let ask = message("resp_q", "completed", json!([{"type": "output_text", "text": question, "annotations": []}]));
    let rule = json!({"clarification": {"max_chars": 400}});

    let (url, _seen) = server(vec![ok(ask.clone())], vec![]).await;
    let r = adapter(&url, "gpt-4.1", json!({})).call(&prompt()).await;
    assert_eq!(r.reply, Reply::Output(question.into()), "no rule: the reply is the output");

    let (url, seen) = server(vec![ok(ask), ok(completed("resp_after"))], vec![]).await;
    let (report, record) = execute(adapter(&url, "gpt-4.1", rule), Duration::from_secs(20)).await;
    let Report::Result { outcome, .. } = report else { panic!("expected a result, got {report:?}") };
    assert_eq!(outcome, Outcome::Completed);
    let record = record.unwrap();
    let turns: Vec<(&str, &str)> = record.conversation.iter().map(|t| (t.role.as_str(), t.text.as_str())).collect();
    assert_eq!(turns[..3], [("user", PROMPT), ("system_under_test", question), ("user", SUFFIX)]);
    assert_eq!(turns.len(), 4, "the final output is the fourth turn");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.bodies[1]["input"],
        json!([{"role": "user", "content": PROMPT}, {"role": "assistant", "content": question}, {"role": "user", "content": SUFFIX}])
    );
    assert!(!serde_json::to_string(&record).unwrap().contains(KEY), "the record holds no key");
}

/// Runs one lease through the worker's `execute` with `adapter` and a
/// per-run deadline of `timeout`; the report and the stored record.
async fn execute(adapter: OpenAiResponsesAdapter, timeout: Duration) -> (Report, Option<RunRecord>) {
    support::execute(arm(json!({})), Arc::new(adapter), timeout).await
}

// === settings ===

/// Bad settings are refused naming the setting; `for_arm` builds the
/// adapter (the arm is no longer refused as unavailable).
#[test]
fn bad_settings_are_named() {
    let err = |settings: Value| OpenAiResponsesAdapter::with_env(&arm(settings), env).unwrap_err().to_string();
    let base = || json!({"model": "o3-deep-research"});
    let with = |k: &str, v: Value| {
        let mut s = base();
        s[k] = v;
        s
    };
    assert!(err(with("temperature", json!(0))).contains("settings.temperature: unknown openai_responses setting"));
    assert!(err(json!({})).contains("settings.model: is required"));
    assert!(err(with("base_url", json!("https://u:p@api.openai.com/v1"))).contains("settings.base_url"));
    assert!(err(with("reasoning_effort", json!("max"))).contains("settings.reasoning_effort"));
    assert!(err(with("tools", json!([{"name": "x"}]))).contains("settings.tools: item 0"));
    assert!(err(with("poll_interval_ms", json!(1))).contains("settings.poll_interval_ms"));
    assert!(err(with("background", json!("yes"))).contains("settings.background"));
    let e = err(with("api_key_env", json!("COHORT_TEST_UNSET_VAR")));
    assert!(e.contains("COHORT_TEST_UNSET_VAR is not set"), "{e}");
    assert!(
        err(with("clarification", json!({"ends_with_question": true}))).contains("settings.clarification.max_chars")
    );
    assert!(
        err(with("clarification", json!({"max_chars": 300, "regex": "x"}))).contains("settings.clarification.regex")
    );
    let e = err(with("clarification", json!({"max_chars": 300, "ends_with_question": false})));
    assert!(e.contains("length alone"), "{e}");
    assert!(for_arm(&arm(base())).is_ok());
    // examples/protocol-v1's form: tool names as shorthand.
    let a = OpenAiResponsesAdapter::with_env(&arm(with("tools", json!(["web_search_preview"]))), env).unwrap();
    assert_eq!(a.request_body(&prompt())["tools"], json!([{"type": "web_search_preview"}]));
}
