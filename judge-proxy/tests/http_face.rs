//! The HTTP face that one client cannot break: slowloris headers and
//! trickling bodies are cut off at their read timeouts while other clients
//! are served, an oversized `Content-Length` is refused before the body is
//! sent, the connection cap holds the next connection until one frees, the
//! `/metrics` key is enforced, a team's admission bucket refuses with 429
//! `rate_limit_exceeded` before the shared limiter is asked, and a key
//! echoed in a provider's 200 body (plain, base64 or masked) never reaches
//! the client. Loopback only; every wait is bounded.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cohort_judge_proxy::ProxyConfig;
use cohort_judge_proxy::config::build_and_validate;
use cohort_mock_provider::MockConfig;
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const METRICS_KEY: &str = "metrics-key-51c0e9a7d3";

/// Generous: a connection cut off at a 1 s timeout is asserted closed
/// within ten times that; the figure printed is the measured time.
const CLOSE_BOUND: Duration = Duration::from_secs(10);

/// A config against the mock at `base_url` with top-level `top` and
/// `team_a` added to team `a`.
fn face_config(base_url: &str, top: &str, team_a: &str) -> ProxyConfig {
    let text = config_text(base_url, "openai", "judge-1", "judge-1", top, "")
        .replace("key_env = \"TEAM_A_KEY\"", &format!("key_env = \"TEAM_A_KEY\"\n{team_a}"));
    let env = |name: &str| if name == "METRICS_KEY" { Some(METRICS_KEY.to_owned()) } else { env(name) };
    build_and_validate(&text, "test.toml", Path::new("."), &env).unwrap()
}

fn addr(proxy: &ProxyHandle) -> String {
    proxy.http.trim_start_matches("http://").to_owned()
}

fn chat_body() -> Value {
    json!({"model": "j", "messages": [{"role": "user", "content": "hello there"}]})
}

async fn chat(proxy: &ProxyHandle, key: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", proxy.http))
        .bearer_auth(key)
        .timeout(Duration::from_secs(20))
        .json(&chat_body());
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

/// Reads until the peer closes (or resets) the connection; what it sent.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `head`, then one `drip` every `every` until the proxy closes the
/// connection; returns how long that took and what the proxy sent. Panics
/// if the connection is still open after [`CLOSE_BOUND`].
async fn drip_until_closed(address: String, head: String, drip: &'static [u8], every: Duration) -> (Duration, Vec<u8>) {
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let closed = tokio::time::timeout(CLOSE_BOUND, async {
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                },
                _ = tick.tick() => {
                    // A write to a closed connection fails: the read sees
                    // the close next.
                    let _ = stream.write_all(drip).await;
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the proxy kept a slow connection open past {CLOSE_BOUND:?}");
    (started.elapsed(), out)
}

fn figures(label: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: Duration| d.as_millis();
    println!(
        "{label}: {} connections closed; min {} ms, median {} ms, max {} ms",
        times.len(),
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    );
}

/// 300 slowloris connections (a request line, then one header line every
/// 300 ms, never the blank line) are each closed by the proxy within its
/// 1 s header timeout (asserted within 10 s; the times are printed), and a
/// normal client is served while they are open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_headers_are_cut_off_at_the_header_timeout() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), "header_read_timeout_ms = 1000", "")).await;
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n".to_owned();
    let attack: Vec<_> = (0..300)
        .map(|_| {
            tokio::spawn(drip_until_closed(addr(&proxy), head.clone(), b"X-Slow: 1\r\n", Duration::from_millis(300)))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = proxy.proxy.http_face().stats.connections_open.load(std::sync::atomic::Ordering::Relaxed);
    let r = chat(&proxy, TEAM_A_KEY, &[]).await;
    assert_eq!(r.status(), 200, "a normal client is served during the attack");
    println!("a normal request was served while {open} connections were open");
    let mut times = Vec::new();
    for a in attack {
        let (took, sent) = a.await.unwrap();
        assert!(!String::from_utf8_lossy(&sent).contains("200 OK"), "a slow request was never answered as whole");
        times.push(took);
    }
    figures("slowloris headers (timeout 1000 ms)", times);
    let timeouts = proxy.proxy.http_face().stats.header_timeouts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(timeouts >= 300, "every slow connection counted as a header timeout: {timeouts}");
}

/// 50 requests whose bodies trickle in (headers whole, `Content-Length:
/// 1000`, one byte every 200 ms) are each answered 408 and closed within
/// the 1 s body timeout (asserted within 10 s; the times are printed); a
/// normal client is served meanwhile, and nothing reached the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_bodies_are_answered_408_at_the_body_timeout() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), "body_read_timeout_ms = 1000", "")).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer {TEAM_B_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    );
    let attack: Vec<_> = (0..50)
        .map(|_| tokio::spawn(drip_until_closed(addr(&proxy), head.clone(), b" ", Duration::from_millis(200))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(chat(&proxy, TEAM_A_KEY, &[]).await.status(), 200, "a normal client is served meanwhile");
    let mut times = Vec::new();
    for a in attack {
        let (took, sent) = a.await.unwrap();
        let sent = String::from_utf8_lossy(&sent).into_owned();
        assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
        assert!(sent.contains("body_read_timeout_ms") && sent.contains("request_timeout"), "{sent}");
        times.push(took);
    }
    figures("trickling bodies (timeout 1000 ms)", times);
    assert_eq!(mock_calls(&mock).await.len(), 1, "only the normal request reached the provider");
}

/// A `Content-Length` above `max_request_bytes` is answered 413 from the
/// headers alone: the body is never sent, and the reply still arrives.
#[tokio::test]
async fn an_oversized_content_length_is_refused_before_the_body() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), "max_request_bytes = 1024", "")).await;
    let mut stream = TcpStream::connect(addr(&proxy)).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer {TEAM_A_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let sent = tokio::time::timeout(CLOSE_BOUND, read_to_close(&mut stream)).await.expect("a 413 without the body");
    let sent = String::from_utf8_lossy(&sent).into_owned();
    assert!(sent.starts_with("HTTP/1.1 413"), "{sent}");
    assert!(sent.contains("request_too_large") && sent.contains("1024 bytes"), "{sent}");
    // A body over the cap without a Content-Length (chunked) is cut at the
    // cap too.
    let mut stream = TcpStream::connect(addr(&proxy)).await.unwrap();
    let chunk = "x".repeat(4096);
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer {TEAM_A_KEY}\r\n\
         Transfer-Encoding: chunked\r\n\r\n1000\r\n{chunk}\r\n0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let sent = tokio::time::timeout(CLOSE_BOUND, read_to_close(&mut stream)).await.expect("a 413 for a chunked body");
    assert!(String::from_utf8_lossy(&sent).starts_with("HTTP/1.1 413"), "{}", String::from_utf8_lossy(&sent));
    assert!(mock_calls(&mock).await.is_empty(), "nothing reached the provider");
}

/// With `max_connections = 4` and four connections held open (kept alive
/// after a request each), a fifth connection's request is not answered;
/// once one of the four closes, it is.
#[tokio::test]
async fn the_connection_after_the_cap_waits_until_one_frees() {
    let mock = mock(MockConfig::default()).await;
    let top = "max_connections = 4\nheader_read_timeout_ms = 30000";
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), top, "")).await;
    let get = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr(&proxy)).await.unwrap();
        s.write_all(get).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(CLOSE_BOUND, s.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        held.push(s);
    }
    let mut fifth = TcpStream::connect(addr(&proxy)).await.unwrap();
    fifth.write_all(get).await.unwrap();
    let mut buf = [0u8; 1024];
    let early = tokio::time::timeout(Duration::from_millis(700), fifth.read(&mut buf)).await;
    assert!(early.is_err(), "the fifth connection was served while four were held");
    let waited = proxy.proxy.http_face().stats.connections_waited.load(std::sync::atomic::Ordering::Relaxed);
    assert!(waited >= 1, "the accept loop waited for a slot");
    let freed = Instant::now();
    drop(held.pop());
    let n = tokio::time::timeout(CLOSE_BOUND, fifth.read(&mut buf)).await.expect("served once one freed").unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    println!("the fifth connection was served {} ms after one of the four closed", freed.elapsed().as_millis());
}

/// With `metrics_key_env` set, `/metrics` answers 401 without the key or
/// with a wrong one (a team key included), 200 with it; the face's own
/// counters are in it. Health stays open.
#[tokio::test]
async fn metrics_need_the_metrics_key_when_one_is_set() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), "metrics_key_env = \"METRICS_KEY\"", "")).await;
    let client = reqwest::Client::new();
    let url = format!("{}/metrics", proxy.http);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    for wrong in [TEAM_A_KEY, &METRICS_KEY[..METRICS_KEY.len() - 1], &format!("{METRICS_KEY}0")] {
        let r = client.get(&url).bearer_auth(wrong).send().await.unwrap();
        assert_eq!(r.status(), 401, "{wrong}");
        assert!(!r.text().await.unwrap().contains(METRICS_KEY), "the key is never echoed");
    }
    let r = client.get(&url).bearer_auth(METRICS_KEY).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("cohort_judge_proxy_http_connections_open") && text.contains("permits_granted_total"));
    assert_eq!(client.get(format!("{}/healthz", proxy.http)).send().await.unwrap().status(), 200);
    // Unset, /metrics is open (as before).
    let open = ProxyHandle::start(face_config(&mock.base_url(), "", "")).await;
    assert_eq!(client.get(format!("{}/metrics", open.http)).send().await.unwrap().status(), 200);
}

/// Team `a` at `admission_rps = 5` sending 30 requests at once: at most
/// the burst (5, plus what refills meanwhile) are admitted, the rest get
/// 429 `rate_limit_exceeded` with a Retry-After at once, and only admitted
/// requests reach the provider. Team `b` (the default rate) is unaffected.
#[tokio::test]
async fn admission_refuses_a_team_over_its_rate_with_429() {
    let mock = mock(MockConfig::default()).await;
    let proxy = Arc::new(ProxyHandle::start(face_config(&mock.base_url(), "", "admission_rps = 5")).await);
    let sends: Vec<_> = (0..30)
        .map(|_| {
            let p = Arc::clone(&proxy);
            tokio::spawn(async move {
                let r = chat(&p, TEAM_A_KEY, &[]).await;
                let status = r.status().as_u16();
                let retry_after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
                (status, retry_after, r.text().await.unwrap())
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for s in sends {
        let (status, retry_after, body) = s.await.unwrap();
        match status {
            200 => admitted += 1,
            429 => {
                refused += 1;
                let body: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
                assert!(body["error"]["message"].as_str().unwrap().contains("admission"), "{body}");
                assert_eq!(retry_after.as_deref(), Some("1"), "Retry-After in whole seconds");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    println!("admission at 5 requests/s: {admitted} admitted, {refused} refused of 30 sent at once");
    assert!(refused >= 15 && admitted >= 5, "admitted {admitted}, refused {refused}");
    assert_eq!(mock_calls(&mock).await.len(), admitted, "refused requests never reached the limiter or provider");
    assert_eq!(chat(&proxy, TEAM_B_KEY, &[]).await.status(), 200, "another team is not affected");
    let metrics = reqwest::get(format!("{}/metrics", proxy.http)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("cohort_judge_proxy_http_admission_refused_total {refused}")), "{metrics}");
}

/// A provider's 200 body that echoes the proxy's upstream key, plainly,
/// base64-encoded (the whole `Bearer KEY`, or the key URL-safe unpadded)
/// or masked, reaches the client with `[redacted]` instead, as valid JSON.
#[tokio::test]
async fn a_key_echoed_in_a_200_body_is_scrubbed() {
    let mock = mock(MockConfig::default()).await;
    let proxy = ProxyHandle::start(face_config(&mock.base_url(), "", "")).await;
    for form in ["plain", "b64", "b64url", "masked"] {
        let fault = format!("echo_key;form={form}");
        let r = chat(&proxy, TEAM_A_KEY, &[("x-mock-fault", &fault)]).await;
        assert_eq!(r.status(), 200, "{form}");
        let text = r.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap();
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(content, "mock: the key I was sent is [redacted]", "{form}: {text}");
        assert!(!text.contains(&UPSTREAM_KEY[UPSTREAM_KEY.len() - 4..]), "{form}: {text}");
    }
    let metrics = reqwest::get(format!("{}/metrics", proxy.http)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("cohort_judge_proxy_http_secrets_scrubbed_total 4"), "{metrics}");
}

/// Shutdown is graceful and bounded: a request in flight when it begins
/// (the provider takes 800 ms) is answered 200, an idle kept-alive
/// connection is closed at once (not at its 30 s header timeout), the
/// listener stops accepting, and `serve` returns.
#[tokio::test]
async fn shutdown_lets_requests_in_flight_finish_and_closes_idle_connections() {
    let mock = mock(MockConfig { latency_ms: 800, ..MockConfig::default() }).await;
    let config = face_config(&mock.base_url(), "header_read_timeout_ms = 30000", "");
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = http.local_addr().unwrap();
    let proxy = Arc::new(cohort_judge_proxy::Proxy::new(config).await.unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(cohort_judge_proxy::serve(
        Arc::clone(&proxy),
        cohort_judge_proxy::Listeners { grpc, http },
        async {
            let _ = stopped.await;
        },
    ));
    let mut idle = TcpStream::connect(address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(CLOSE_BOUND, idle.read(&mut buf)).await.unwrap().unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let in_flight = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("http://{address}/v1/chat/completions"))
            .bearer_auth(TEAM_A_KEY)
            .json(&chat_body())
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    stop.send(()).unwrap();
    assert_eq!(in_flight.await.unwrap().unwrap(), 200, "the request in flight finished");
    let closed = tokio::time::timeout(CLOSE_BOUND, read_to_close(&mut idle)).await;
    assert!(closed.is_ok(), "the idle connection was closed at shutdown");
    tokio::time::timeout(CLOSE_BOUND, served).await.expect("serve returned").unwrap().unwrap();
    println!("serve returned {} ms after shutdown began", stopping.elapsed().as_millis());
    assert!(TcpStream::connect(address).await.is_err(), "the listener is closed");
}
